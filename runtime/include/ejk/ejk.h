/* ejkernel's C ABI. Every function returns EJK_OK or an error code; ejk_last_error() gives the
 * message of the calling thread's last failure. Tensors are described, never owned.
 *
 * Versioning: option and context structs begin with struct_size, which the caller sets (the
 * *_init functions do) to the size it was compiled with. A library takes the sizes of the
 * versions it knows (an older one: the fields it lacks keep their defaults), so fields can be
 * added at the end without breaking older callers; a caller built against a newer header gets
 * EJK_INVALID_ARGUMENT naming the size, as any other size could make the library read past the
 * caller's struct. */
#ifndef EJK_EJK_H
#define EJK_EJK_H
#include <stddef.h>
#include <stdint.h>

#include "ejk/c_types.h"
#include "ejk/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version: major << 16 | minor << 8 | patch. */
EJK_API uint32_t ejk_version(void);
EJK_API uint32_t ejk_abi_version(void); /* EJK_ABI_VERSION (ejk/c_types.h) of the library */

/* The types (ejk_tensor, ejk_context, ejk_arg, the enums): ejk/c_types.h. */
/* Sets *ctx to the defaults and struct_size to this header's size. */
EJK_API void ejk_context_init(ejk_context* ctx);

/* Runs `op` with named arguments (ejk_arg). */
EJK_API int ejk_run(const char* op, const ejk_arg* args, int32_t num_args, const ejk_context* ctx);
/* The canonical key of the variant ejk_run would run with these arguments, after every check a
 * run makes; nothing is compiled or run, and tensor data may be NULL (bindings check a call when
 * they trace it). Writes the NUL-terminated key to key; EJK_INVALID_ARGUMENT if key_size is too
 * small. */
EJK_API int ejk_variant_key(const char* op, const ejk_arg* args, int32_t num_args, const ejk_context* ctx,
                            char* key, int64_t key_size);

/* Called with (user, key, 1) before a variant is compiled at run time and (user, key, 0) after,
 * on the compiling thread; NULL removes it. One per process, as ejk::set_compile_observer. */
typedef void (*ejk_compile_observer)(void* user, const char* key, int started);
EJK_API void ejk_set_compile_observer(ejk_compile_observer observer, void* user);

/* Registers a kernel bundle (.ejkb) file, or every *.ejkb file of a directory, as ejk::load_bundle
 * (ejk/bundle.h): variants not built in then come from it before the disk cache and the JIT. */
EJK_API int ejk_load_bundle(const char* path);

/* In-call autotuning for this process, replacing EJK_AUTOTUNE's value: "1" every op, "0" none, or
 * a comma-separated list of op names (the backward ops left out: forward ops only); NULL follows
 * EJK_AUTOTUNE again. It applies to plans made after it (a plan is made once per problem class).
 * EJK_INVALID_ARGUMENT, changing nothing, for a value that is none of these. */
EJK_API int ejk_set_autotune(const char* ops);

EJK_API const char* ejk_last_error(void);

/* A program's own CPU variants, compiled into it: CMake's ejk_generate_kernels generates them
 * with a registration file that calls this as the program loads. Calls then find them as
 * built-in variants, after the library's own. kernel_abi names the kernel headers they were
 * compiled from; all are refused when this library was built from others, and so is any entry
 * whose key is malformed, not a CPU key, or one the library or an earlier call has
 * (EJK_INVALID_ARGUMENT, naming each); the rest are registered. The functions must stay loaded
 * for the life of the process. */
typedef struct {
  const char* key; /* canonical variant key, <kernel>.<backend>.<target>.<dtype>[.<axis>...] */
  void (*fn)(const void* params, long long task_begin, long long task_end);
} ejk_cpu_variant;
EJK_API int ejk_register_cpu_variants(const char* kernel_abi, const ejk_cpu_variant* variants, size_t n);


/* --- Describing ops, for language bindings (runtime/src/api/c_describe.cpp) ---------------
 * What a binding needs to expose every op without per-op code: the ops' names, each op's
 * arguments in the spec's order, and the outputs a call's inputs imply. The strings returned
 * are the library's, valid for the life of the process. */

/* The number of ops a user can call; ejk_op_name(i) is the i-th (sorted), NULL out of range. */
EJK_API int32_t ejk_op_count(void);
EJK_API const char* ejk_op_name(int32_t index);

/* EJK_PARAM_TUNING: a tuning axis a caller may set with EJK_ARG_TUNE (block sizes and the like);
 * left out, the tuning store's value or the spec's heuristic is used. */
typedef enum { EJK_PARAM_INPUT = 0, EJK_PARAM_OUTPUT = 1, EJK_PARAM_SCALAR = 2, EJK_PARAM_TUNING = 3 } ejk_param_role;
typedef struct {
  const char* name;
  int32_t role;              /* ejk_param_role */
  int32_t optional;          /* tensors: may be omitted; scalars: the default is "none" (absent) */
  int32_t contiguous;        /* tensors: must be contiguous as a whole (else: the last dim only) */
  const char* type;          /* tensors: dtypes as "bf16|f16|f32"; scalars: f32, f64, i64, bool, i64[2]; tuning: i64 */
  const char* layout;        /* tensors: "[B, Sq, Hq, D]" or "like q"; scalars: ""; tuning: the values it takes */
  const char* default_value; /* scalars: the spec's text ("true", "none", "1/sqrt(D)"); tensors: "" */
  const char* doc;
} ejk_param_info;
typedef struct {
  const char* name;
  const char* doc;
  int32_t num_params;
  const ejk_param_info* params; /* tensors (inputs and outputs) in the spec's order, then scalars, then
                                   tuning axes */
} ejk_op_info;
/* Fills *info for op; EJK_INVALID_ARGUMENT naming the ops there are for an unknown one. */
EJK_API int ejk_describe_op(const char* op, ejk_op_info* info);

typedef struct {
  char name[64];     /* the output tensor's name in the spec */
  int32_t dtype;     /* ejk_dtype */
  int32_t rank;
  int64_t shape[8];
} ejk_output_spec;
/* The outputs a call with args (its inputs and scalars; outputs may be left out) would write,
 * after the checks of the inputs a run makes (tensor data may be NULL); ctx as for ejk_run.
 * Writes up to capacity specs and sets *num_specs to the op's number of outputs;
 * EJK_INVALID_ARGUMENT if capacity is smaller. */
EJK_API int ejk_output_specs(const char* op, const ejk_arg* args, int32_t num_args, const ejk_context* ctx,
                             ejk_output_spec* specs, int32_t capacity, int32_t* num_specs);

#ifdef __cplusplus
}
#endif

/* Every op's C function, generated from its spec (specs/<op>.yaml): ejk/ops/<op>_c.h. */
#include "ejk/ops/c_ops.h"
#endif /* EJK_EJK_H */
