// Inspecting and preparing what the runtime can run: built-in variants, the disk cache, and
// compiling a variant ahead of use (to warm a cache for a fleet).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/export.h"

namespace ejk {

struct OpListing {
  std::string api;                    // "flash_attention"; internal ops: their kernel family
  std::string op;                     // "flash_fwd"
  std::string spec_file;
  std::vector<std::string> backends;  // backends the spec defines
  std::vector<std::string> builtin;   // AOT keys in this build
};
EJK_API std::vector<OpListing> list_ops();  // every spec, internal ops included

struct CacheEntry {
  std::string backend, key, hash;
  std::filesystem::path path;
  uint64_t size = 0;
  bool valid = true;
  std::string problem;  // why it is not valid
  // "entry"; or what else was found: "temp" (a writer's temp file), "root" (the cache itself is
  // unusable: problem says why), "other" (directories, FIFOs, unknown names).
  std::string kind = "entry";
};
EJK_API std::filesystem::path cache_root();  // EJK_CACHE_DIR, XDG_CACHE_HOME/ejkernel or ~/.cache/ejkernel, + /v<format>
EJK_API std::vector<CacheEntry> cache_list(bool verify);
EJK_API size_t cache_clear();

class Args;  // ejk/op.h

// Floating-point operations of one call of `op` with `args` (inputs and scalars) as the op counts
// them (attention: 4 * Hq * D per visible query-key pair), for reporting rates; 0 where the op
// counts none. Reads host-resident metadata such as cum_seqlens.
EJK_API double call_flops(std::string_view op, const Args& args);

// Whether CPU variants can be compiled at run time: built with the ORC JIT, and its plugin
// (libejk_cpu_jit.so, with the LLVM 19 it links) loads.
EJK_API bool cpu_jit_available();

struct CompileRequest {
  std::string api;  // the op, e.g. "flash_attention"
  std::string backend = "cpu";
  std::string target;  // empty: the host's (cpu) or the device's (cuda)
  // Axis values by axis name; ints as decimal, flags "0"/"1", enums by name. Axes left out come
  // from the spec's heuristic (with its problem variables' defaults) or stay off.
  std::map<std::string, std::string> axes;
};

struct CompileReport {
  std::string key, target, source;  // source: aot, cache or jit
  double compile_ms = 0;
  std::filesystem::path cache_path;
  int registers = -1;       // GPU variants, when the compiler reports them
  // GPU variants: shared memory per block of a launch: static (on sm_90 including the 1 KiB
  // reserved per block) plus the dynamic shared memory the runtime launches the key with.
  int64_t shared_bytes = -1;
};
EJK_API CompileReport compile_variant(const CompileRequest& req);

// The tuning store (what `ejk tune` measured fastest per device and problem class; plans without
// caller tuning values use it unless EJK_TUNING=0).
struct TuningRecord {
  std::filesystem::path path;
  std::string op, device, problem_class, key;  // op: the spec op ("flash_fwd")
  double ms = 0, heuristic_ms = 0;             // the winner's and the heuristic key's medians
  std::string problem;                         // why the file is not a usable record; empty when it is
};
EJK_API std::filesystem::path tuning_root();  // beside the cache: <cache dir>/tune-v1
EJK_API std::vector<TuningRecord> tuning_list();
EJK_API size_t tuning_clear();
EJK_API std::string tuning_export();                    // every usable record, as one text
EJK_API size_t tuning_import(const std::string& text);  // checks all, then stores all; returns how many
struct Context;  // ejk/types.h
// Records `key` (a variant of `op` differing from the heuristic's only in tuning axes) as the
// fastest for the problem `args` describe (inputs and scalars, no tuning values) on the device
// ctx's backend runs it on; returns the record's path. InvalidArgument when `key` is another
// problem's.
EJK_API std::filesystem::path tuning_record(std::string_view op, const Args& args, const std::string& key, double ms,
                                            double heuristic_ms, const Context& ctx);

}  // namespace ejk
