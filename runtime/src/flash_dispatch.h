// The flash attention op's per-backend paths, after validation.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "ejk/core/schema.h"
#include "ejk/flash_attention.h"
#include "flash_validate.h"

namespace ejk::detail {

// The key of the variant that computes this problem on `backend`/`target`: the problem's
// dtype, head_dim and flags, block sizes from the options or the spec's heuristic; validated.
VariantKey flash_key(const OpSchema& schema, const FlashProblem& pb, const FlashAttentionOptions& opt,
                     std::string_view backend, std::string_view target);

// Turns on the tuning flags (the spec's `tuning: true`, e.g. `.items`) that the heuristic's
// choice `chosen` names; flags it leaves out stay as they are. Only for keys that take the
// heuristic's tile: a tuning flag belongs to it, blocks given by the caller take none.
void set_tuning_flags(const OpSchema& schema, VariantKey& key,
                      const std::map<std::string, int64_t>& chosen);

// The heuristic's problem variable `extras` (specs/flash_attention.yaml): how many of the key's
// per-score flags (window, segments, softcap, bias) are on.
int64_t logit_extras(const VariantKey& key);

// Throws InvalidArgument naming the key if the variant lacks code for what params use
// (segment ids without the segments flag): a kernel must never silently drop a mask.
void require_variant_covers(const VariantKey& key, const FlashFwdParams& p);

RunInfo run_flash_cpu(FlashProblem& pb, const FlashAttentionOptions& opt);

// Launches on the device of pb (asynchronous, legacy default stream). BackendUnavailable in a
// build without CUDA.
RunInfo run_flash_cuda(FlashProblem& pb, const FlashAttentionOptions& opt);

}  // namespace ejk::detail
