// The tuning store's public face: list, clear, and record a measured winner (ejk tune).
#include <fmt/format.h>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "ejk/op.h"
#include "engine/bind.h"
#include "engine/call.h"
#include "engine/tuning_store.h"
#include "registry.h"

namespace ejk {

std::filesystem::path tuning_root() { return engine::tuning::root(); }

std::vector<TuningRecord> tuning_list() {
  std::vector<TuningRecord> out;
  for (const auto& r : engine::tuning::list())
    out.push_back({r.path, r.op, r.fingerprint, r.cls, r.key, r.ms, r.heuristic_ms, r.problem});
  return out;
}

size_t tuning_clear() { return engine::tuning::clear(); }

std::string tuning_export() { return engine::tuning::export_text(); }

size_t tuning_import(const std::string& text) {
  return engine::tuning::import_text(text, [](const std::string& op) -> const OpSchema& {
    return detail::op_schema(op);
  });
}

std::filesystem::path tuning_record(std::string_view op_name, const Args& args, const std::string& key, double ms,
                                    double heuristic_ms, const Context& ctx) {
  const engine::OpDef& op = engine::find_op(op_name);
  engine::ArgPack pack = engine::pack_args(op, args);
  pack.shapes_only = true;
  pack.outputs_optional = true;
  const engine::Bound b = engine::bind(op, pack);
  op.check(b);
  const engine::TuningSlot slot = engine::tuning_slot(b, engine::resolve_backend(op, b.device, ctx.backend));
  const OpSchema& s = op.schema();
  const VariantKey winner = s.parse_key(key);
  s.validate(winner);
  if (!engine::tuning::same_problem(s, winner, slot.heuristic))
    throw InvalidArgument(fmt::format("tuning_record: {} is not a variant of this problem (its heuristic key is {}); "
                                      "only tuning axes may differ", key, to_string(slot.heuristic)));
  return engine::tuning::store(s, {{}, s.op(), slot.fingerprint, slot.cls, key, ms, heuristic_ms, {}});
}

}  // namespace ejk
