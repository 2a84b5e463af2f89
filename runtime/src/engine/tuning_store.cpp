#include "engine/tuning_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>

#include "cache/disk_cache.h"
#include "cache/posix_io.h"
#include "cache/trust.h"
#include "ejk/core/error.h"
#include "util/env.h"
#include "util/hash.h"
#if EJK_HAVE_CUDA
#include "cuda/device.h"
#endif

namespace fs = std::filesystem;

namespace ejk::engine::tuning {
namespace {

constexpr std::string_view kMagic = "ejk-tune 1";
constexpr std::string_view kSuffix = ".tune";
constexpr size_t kMaxRecordBytes = 4096;

const std::string& cpu_model() {
  static const std::string model = [] {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
      if (line.starts_with("model name"))
        if (const size_t colon = line.find(':'); colon != std::string::npos) return line.substr(colon + 2);
    return std::string("unknown CPU");
  }();
  return model;
}

fs::path record_path(const std::string& op, const std::string& fingerprint, const std::string& cls) {
  return root() / fmt::format("{}-{}{}", op, util::hash_strings_hex({fingerprint, cls}).substr(0, 16), kSuffix);
}

std::string encode(const Record& r) {
  return fmt::format("{}\nop {}\nfingerprint {}\nclass {}\nkey {}\nms {}\nheuristic_ms {}\n", kMagic, r.op,
                     r.fingerprint, r.cls, r.key, r.ms, r.heuristic_ms);
}

// The record `text` holds; `problem` says why it is not one.
Record parse_record(const std::string& text) {
  Record r;
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kMagic) return r.problem = "not a tuning record", r;
  auto field = [&](std::string_view name, std::string& out) {
    if (!std::getline(in, line) || !line.starts_with(name) || line.size() <= name.size() || line[name.size()] != ' ')
      return false;
    out = line.substr(name.size() + 1);
    return true;
  };
  std::string ms, heuristic_ms;
  if (!field("op", r.op) || !field("fingerprint", r.fingerprint) || !field("class", r.cls) || !field("key", r.key) ||
      !field("ms", ms) || !field("heuristic_ms", heuristic_ms))
    return r.problem = "malformed record", r;
  try {
    r.ms = std::stod(ms), r.heuristic_ms = std::stod(heuristic_ms);
  } catch (const std::exception&) {
    r.problem = "malformed timing";
  }
  return r;
}

// The record in `path`; `problem` says why it is unusable (unreadable, untrusted, malformed).
Record read_record(const fs::path& path) {
  std::optional<cache::io::FileBytes> file;
  std::string problem;
  try {
    file = cache::io::read_file(path, kMaxRecordBytes + 1);
    if (!file) problem = "missing";
    else if (file->untrusted) problem = *file->untrusted;
    else if (file->size > kMaxRecordBytes) problem = fmt::format("larger than {} bytes", kMaxRecordBytes);
  } catch (const Error& e) {
    problem = e.what();
  }
  Record r = problem.empty() ? parse_record(std::string(file->bytes.begin(), file->bytes.end())) : Record{};
  r.path = path;
  if (!problem.empty()) r.problem = problem;
  return r;
}

}  // namespace

bool enabled() { return util::env_bool("EJK_TUNING", true); }

namespace {

std::mutex g_autotune_mu;
std::optional<std::string> g_autotune;  // ejk_set_autotune's value, replacing EJK_AUTOTUNE's

// `text` as EJK_AUTOTUNE takes it: whether it names `op` (empty op: whether it names any).
bool autotunes(const std::string& text, std::string_view op, const char* source) {
  for (std::string_view w : {"1", "true", "yes", "on"})
    if (text == w) return true;
  for (std::string_view w : {"0", "false", "no", "off"})
    if (text == w) return false;
  bool named = false;
  for (size_t begin = 0; begin <= text.size();) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string_view name = std::string_view(text).substr(begin, end - begin);
    // Every name must be an op: a misspelt one is an error, not a silent "tune nothing".
    const auto& ops = all_ops();
    if (std::none_of(ops.begin(), ops.end(), [&](const OpDef* o) { return o->name() == name; }))
      throw InvalidArgument(fmt::format("{}=\"{}\": expected 1, 0 (or true, false, yes, no, on, off) or a "
                                        "comma-separated list of op names; '{}' is not an op", source, text, name));
    named = named || op.empty() || name == op;
    begin = end + 1;
  }
  return named;
}

}  // namespace

bool autotune_enabled(std::string_view op) {
  {
    std::lock_guard lk(g_autotune_mu);
    if (g_autotune) return autotunes(*g_autotune, op, "ejk_set_autotune");
  }
  const std::optional<std::string> text = util::env_string("EJK_AUTOTUNE");
  if (!text) return false;
  std::string lowered = *text;  // ON and On as on; op names are lower case
  for (char& c : lowered) c = char(std::tolower(static_cast<unsigned char>(c)));
  return autotunes(lowered, op, "EJK_AUTOTUNE");
}

void set_autotune(std::optional<std::string> value) {
  if (value) autotunes(*value, {}, "ejk_set_autotune");  // refused before it replaces anything
  std::lock_guard lk(g_autotune_mu);
  g_autotune = std::move(value);
}

fs::path root() { return cache::default_root().parent_path() / "tune-v1"; }

std::string fingerprint(Backend backend, Device device, std::string_view target) {
#if EJK_HAVE_CUDA
  if (backend == Backend::cuda) {
    const cuda::DeviceInfo& d = cuda::use_device(device.index);
    return fmt::format("cuda {} sm{}{} {}sm {}", d.name, d.major, d.minor, d.sm_count, target);
  }
#endif
  (void)device;
  return fmt::format("{} {} {}", backend_name(backend), cpu_model(), target);
}

std::string problem_class(const OpSchema& s, const VariantKey& heuristic, const ProblemValues& problem) {
  std::string cls = to_string(heuristic);
  const auto& defs = s.problem_vars();
  for (size_t i = 0; i < defs.size(); ++i)
    if ((problem.set >> i) & 1u) cls += fmt::format(" {}={}", defs[i].name, problem.value[i]);
  return cls;
}

bool same_problem(const OpSchema& s, const VariantKey& key, const VariantKey& heuristic) {
  if (key.op != heuristic.op || key.backend != heuristic.backend || key.target != heuristic.target) return false;
  for (const AxisDef& a : s.axes()) {
    const bool tuning = a.tuning || (a.kind == AxisKind::Int && a.from.empty());
    if (tuning) continue;
    const AxisValue &x = key.axis(a.name), &y = heuristic.axis(a.name);
    if (x.int_value != y.int_value || x.enum_value != y.enum_value || x.flag_value != y.flag_value) return false;
  }
  return true;
}

std::optional<VariantKey> lookup(const OpSchema& s, const std::string& fingerprint, const std::string& cls,
                                 const VariantKey& heuristic) {
  const Record r = read_record(record_path(s.op(), fingerprint, cls));
  if (!r.problem.empty() || r.op != s.op() || r.fingerprint != fingerprint || r.cls != cls) return std::nullopt;
  try {
    VariantKey key = s.parse_key(r.key);
    s.validate(key);
    if (same_problem(s, key, heuristic)) return key;
  } catch (const Error&) {
  }
  return std::nullopt;
}

fs::path store(const OpSchema& s, const Record& r) {
  const fs::path path = record_path(s.op(), r.fingerprint, r.cls);
  cache::trust::ensure_tree(root(), "", 0755);
  const std::string text = encode(r);
  cache::io::write_file_atomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  return path;
}

std::vector<Record> list() {
  std::string error;
  std::vector<Record> out;
  const fs::path dir = root();
  if (!fs::is_directory(dir)) return out;
  for (const std::string& name : cache::io::list_directory(dir, error).value_or(std::vector<std::string>{}))
    if (name.ends_with(kSuffix)) out.push_back(read_record(dir / name));
  if (!error.empty()) throw Error(fmt::format("tuning store {}: {}", dir.string(), error));
  return out;
}

size_t clear() {
  size_t removed = 0;
  for (const Record& r : list()) removed += fs::remove(r.path);
  // The temp files of writers killed before their rename: never records, gone with them.
  std::string error;
  const fs::path dir = root();
  if (fs::is_directory(dir))
    for (const std::string& name : cache::io::list_directory(dir, error).value_or(std::vector<std::string>{}))
      if (name.find(std::string(kSuffix) + ".tmp.") != std::string::npos) fs::remove(dir / name);
  return removed;
}

std::string export_text() {
  std::string out;
  for (const Record& r : list())
    if (r.problem.empty()) out += encode(r);
  return out;
}

size_t import_text(const std::string& text, const std::function<const OpSchema&(const std::string&)>& schema_of) {
  std::vector<std::string> blocks;
  for (size_t at = 0; at < text.size();) {
    const size_t next = text.find(std::string("\n") + std::string(kMagic) + "\n", at + 1);
    const size_t end = next == std::string::npos ? text.size() : next + 1;
    blocks.push_back(text.substr(at, end - at));
    at = end;
  }
  std::vector<std::pair<const OpSchema*, Record>> records;
  for (size_t i = 0; i < blocks.size(); ++i) {
    Record r = parse_record(blocks[i]);
    if (!r.problem.empty()) throw InvalidArgument(fmt::format("tuning import: record {}: {}", i + 1, r.problem));
    const OpSchema& s = schema_of(r.op);
    s.validate(s.parse_key(r.key));
    records.emplace_back(&s, std::move(r));
  }
  for (const auto& [s, r] : records) store(*s, r);  // all checked first: none or all are stored
  return records.size();
}

}  // namespace ejk::engine::tuning
