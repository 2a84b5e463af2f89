// The generator's version, written into every generated file and into the registry
// (kGeneratorVersion). Bump it when the generated text changes for the same inputs, so that
// caches keyed on it (the runtime's JIT cache) do not reuse objects built from older text.
#pragma once

namespace ejk::gen {
inline constexpr const char* kVersion = "0.1.0";
}  // namespace ejk::gen
