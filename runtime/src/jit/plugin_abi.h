// The C interface between libejk and its CPU JIT plugin (libejk_cpu_jit.so, which carries
// Clang and LLVM ORC). libejk loads the plugin with dlopen on the first variant it has to
// compile, so a machine without LLVM 19 still runs every built-in variant. Only C types cross:
// both sides hide their C++ symbols, so an exception or a std:: type would not be the same type
// on the other side.
#pragma once
#include <stddef.h>
#include <stdint.h>

extern "C" {

#define EJK_CPU_JIT_PLUGIN_ABI 1
#define EJK_CPU_JIT_PLUGIN_FILE "libejk_cpu_jit.so"
#define EJK_CPU_JIT_PLUGIN_ENTRY "ejk_cpu_jit_plugin_v1"

// What failed; the message goes to the call's sink. Mirrors ejk's exception types.
typedef enum {
  EJK_JIT_OK = 0,
  EJK_JIT_INVALID_ARGUMENT = 1,
  EJK_JIT_COMPILE_ERROR = 2,
  EJK_JIT_UNAVAILABLE = 3,
  EJK_JIT_INTERNAL = 4
} ejk_jit_status;

// Receives a call's result (text or object bytes) on success, or its error message otherwise.
typedef void (*ejk_jit_sink)(void* sink_ctx, const char* data, size_t size);

typedef struct {
  const char* path;  // as written in #include "...", NUL-terminated
  const char* text;
  size_t text_size;
} ejk_jit_header;

typedef struct {
  const char* name;   // NUL-terminated
  const char* text;
  size_t text_size;
  const char* march;  // "" for this host's CPU
  const ejk_jit_header* headers;
  size_t num_headers;
} ejk_jit_source;

typedef enum {
  EJK_JIT_FACT_IDENTITY = 0,  // CpuCompiler::identity()
  EJK_JIT_FACT_HOST_CPU = 1,
  EJK_JIT_FACT_TRIPLE = 2,
  EJK_JIT_FACT_FEATURES = 3   // "+avx2,-sse4a,..."
} ejk_jit_fact;

// Every function returns an ejk_jit_status.
typedef struct {
  uint32_t abi_version;  // EJK_CPU_JIT_PLUGIN_ABI
  int (*fact)(int which, ejk_jit_sink sink, void* sink_ctx);
  int (*identity_for_march)(const char* march, ejk_jit_sink sink, void* sink_ctx);
  int (*compile)(const ejk_jit_source* src, ejk_jit_sink sink, void* sink_ctx);
  // On success *address is the symbol's and the sink is not called.
  int (*load)(const uint8_t* object, size_t size, const char* symbol, void** address, ejk_jit_sink sink,
              void* sink_ctx);
} ejk_cpu_jit_plugin;

typedef const ejk_cpu_jit_plugin* (*ejk_cpu_jit_plugin_entry)(void);

}  // extern "C"
