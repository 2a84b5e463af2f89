// The persistent tuning store: for one device and one problem class of an op, the variant key a
// tuning run (`ejk tune`) measured fastest. A plan made without caller tuning values takes the
// stored key instead of the spec's heuristic; the winner is a variant key like any other, so it
// is built in, cached or bundled like the rest.
//
// One small text file per (device, op, class), written atomically beside the cache
// (<cache dir>/tune-v1/<op>-<hash16>.tune, hash16 of fingerprint and class): concurrent tuners
// of different classes never touch one file, and a crash leaves the old entry or the new one.
// A record is used only when its fingerprint and class match exactly and its key differs from
// the heuristic's in tuning axes alone, so a stale, foreign or planted file can at worst select
// another valid variant of the same problem; anything else is ignored.
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ejk/core/schema.h"
#include "engine/op_def.h"

namespace ejk::engine::tuning {

// EJK_TUNING: 1 (the default) lets plans read the store, 0 ignores it (the heuristic only).
bool enabled();
// EJK_AUTOTUNE: 1 lets the first call of a problem class without a record measure the spec's
// candidate configs and record the fastest (engine/autotune.h); 0 (the default) does not; a
// comma-separated list of op names does for those ops only (flash_attention,flash_attention_backward).
// Whether it does for `op` (empty: for any op, as a check of the setting).
bool autotune_enabled(std::string_view op = {});
// Replaces EJK_AUTOTUNE's value for this process (ejk_set_autotune); nullopt: EJK_AUTOTUNE again.
// InvalidArgument for a value EJK_AUTOTUNE could not hold.
void set_autotune(std::optional<std::string> value);

// <cache dir>/tune-v1, beside the cache's versioned root.
std::filesystem::path root();

// The device a measurement holds for: the CPU model and the op's CPU target, or the GPU's name,
// compute capability and SM count.
std::string fingerprint(Backend backend, Device device, std::string_view target);

// The problem class: the heuristic's key and the problem variables the op supplies.
std::string problem_class(const OpSchema& s, const VariantKey& heuristic, const ProblemValues& problem);

// Whether `key` differs from `heuristic` in tuning axes only (block sizes, schedule flags).
bool same_problem(const OpSchema& s, const VariantKey& key, const VariantKey& heuristic);

// The stored winner for this class, or nullopt (no record, or one that does not match).
std::optional<VariantKey> lookup(const OpSchema& s, const std::string& fingerprint, const std::string& cls,
                                 const VariantKey& heuristic);

struct Record {
  std::filesystem::path path;
  std::string op, fingerprint, cls, key;
  double ms = 0, heuristic_ms = 0;
  std::string problem;  // why the file is not a usable record; empty when it is
};

// Writes (or replaces) the record; returns its path. Throws ejk::Error naming the path.
std::filesystem::path store(const OpSchema& s, const Record& r);

std::vector<Record> list();
size_t clear();  // removes every record; returns how many

// Every usable record as one text (another machine's `import_text` reads it), and the reverse:
// each record checked (its op by `schema_of`, its key valid) before any is stored; returns how
// many. InvalidArgument naming the first bad record.
std::string export_text();
size_t import_text(const std::string& text, const std::function<const OpSchema&(const std::string&)>& schema_of);

}  // namespace ejk::engine::tuning
