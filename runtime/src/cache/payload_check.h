// What a cache entry's payload must be before anything loads it. A checksum only detects
// damage; this rejects payloads that are well-formed entries but not something the runtime can
// safely link: not an object for this backend, no kernel symbol, or (CPU) initializer sections,
// which a JIT linker runs at load time, before any of our code is called.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ejk::cache {

// nullopt when `bytes` is acceptable for `backend`, else the reason:
//  - "cpu":  an ELF64 relocatable object for this machine (x86-64 or AArch64) that defines
//            `symbol` (global or weak, in an executable section) and has no initializer or
//            finalizer sections (.init_array, .preinit_array, .ctors, .init and the fini kinds).
//  - "cuda": an ELF cubin (EM_CUDA) with the kernel: a ".text.<symbol>" section or a defined
//            symbol of that name.
// Other backends have no known format and are not checked (nullopt).
std::optional<std::string> check_payload(std::string_view backend, std::string_view symbol,
                                         std::span<const uint8_t> bytes);

// The kernel symbol of a variant key, as the runtime names it: "ejk_" + key with '.' -> '_'.
std::string symbol_for_key(std::string_view key);

}  // namespace ejk::cache
