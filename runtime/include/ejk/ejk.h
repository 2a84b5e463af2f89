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

#include "ejk/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version: major << 16 | minor << 8 | patch. */
EJK_API uint32_t ejk_version(void);
#define EJK_ABI_VERSION 1
EJK_API uint32_t ejk_abi_version(void); /* EJK_ABI_VERSION of the library */

typedef enum { EJK_OK = 0, EJK_INVALID_ARGUMENT = 1, EJK_COMPILE_ERROR = 2,
               EJK_BACKEND_UNAVAILABLE = 3, EJK_INTERNAL_ERROR = 4 } ejk_status;
typedef enum { EJK_F32 = 0, EJK_BF16 = 1, EJK_F16 = 2, EJK_F64 = 3, EJK_I32 = 4, EJK_I64 = 5,
               EJK_U8 = 6 } ejk_dtype;
typedef enum { EJK_DEVICE_CPU = 0, EJK_DEVICE_CUDA = 1, EJK_DEVICE_HIP = 2 } ejk_device_kind;
typedef enum { EJK_BACKEND_AUTO = 0, EJK_BACKEND_CPU = 1, EJK_BACKEND_CUDA = 2,
               EJK_BACKEND_HIP = 3 } ejk_backend;

typedef struct {
  void* data;
  int32_t dtype;        /* ejk_dtype */
  int32_t device_kind;  /* ejk_device_kind */
  int32_t device_index;
  int32_t rank;         /* 0..8 */
  const int64_t* shape;
  const int64_t* strides; /* in elements; NULL = contiguous */
} ejk_tensor;

/* Where a call runs. */
typedef struct {
  uint32_t struct_size;
  int32_t backend;      /* ejk_backend; AUTO: the tensors' device */
  void* stream;         /* CUDA: a CUstream (NULL: the legacy default stream); ignored on the CPU */
  /* CPU: run tasks on the caller's pool (NULL: ejkernel's own). Must call fn(arg, b, e) over
   * disjoint ranges covering [0, n) and return when all have run. */
  void (*cpu_parallel_for)(void* pool, int64_t n, void (*fn)(void* arg, int64_t begin, int64_t end),
                           void* arg);
  void* cpu_pool;
} ejk_context;
EJK_API void ejk_context_init(ejk_context* ctx);

/* Any op by the names of its spec (specs/<op>.yaml): tensors (inputs and outputs), scalars, and
 * tuning values (block sizes). Unnamed optional arguments take their defaults. */
typedef enum { EJK_ARG_TENSOR = 0, EJK_ARG_BOOL = 1, EJK_ARG_INT = 2, EJK_ARG_FLOAT = 3,
               EJK_ARG_INT_PAIR = 4, EJK_ARG_TUNE = 5 } ejk_arg_kind;
typedef struct {
  const char* name;
  int32_t kind;              /* ejk_arg_kind */
  const ejk_tensor* tensor;  /* EJK_ARG_TENSOR */
  int64_t ints[2];           /* BOOL (0/1), INT, INT_PAIR, TUNE */
  double real;               /* FLOAT */
} ejk_arg;
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

/* flash_attention (specs/flash_attention.yaml). */
typedef struct {
  uint32_t struct_size;
  int32_t has_softmax_scale;
  float softmax_scale;      /* used when has_softmax_scale; default 1/sqrt(D) */
  int32_t causal;
  int32_t has_window;
  int64_t window_left, window_right;
  float logits_soft_cap;    /* <= 0: off */
  int32_t normalize_output;
  int64_t max_seqlen_q, max_seqlen_k; /* varlen: the longest sequences; < 0: not given */
  int64_t block_q, block_k; /* 0: heuristic */
} ejk_flash_options;
EJK_API void ejk_flash_options_init(ejk_flash_options* opt);

/* Optional tensors may be NULL. out: q's shape and dtype; lse: [B, Hq, Sq] f32.
 * softmax_aux: f32 [S] (shared by every head) or [Hq, S]. ctx may be NULL (defaults). */
EJK_API int ejk_flash_attention(const ejk_context* ctx, const ejk_tensor* q, const ejk_tensor* k,
                                const ejk_tensor* v, const ejk_tensor* bias,
                                const ejk_tensor* q_segment_ids, const ejk_tensor* kv_segment_ids,
                                const ejk_tensor* cum_seqlens_q, const ejk_tensor* cum_seqlens_k,
                                const ejk_tensor* softmax_aux, const ejk_flash_options* opt,
                                const ejk_tensor* out, const ejk_tensor* lse);

/* merge_attention_states (specs/merge_attention_states.yaml): out_a, out_b [..., T, H, D] (f32, bf16
 * or f16) with lse_a, lse_b [..., H, T] (f32, natural log) -> out (out_a's shape and dtype) and
 * lse [..., H, T], merged by log-sum-exp; both LSEs -inf give out 0, lse -inf. out and lse are the
 * caller's and may be out_a/out_b and lse_a/lse_b themselves; ctx may be NULL (defaults). */
EJK_API int ejk_merge_attention_states(const ejk_context* ctx, const ejk_tensor* out_a, const ejk_tensor* lse_a,
                                       const ejk_tensor* out_b, const ejk_tensor* lse_b, const ejk_tensor* out,
                                       const ejk_tensor* lse);

/* mean_pooling (specs/mean_pooling.yaml): x [B, T, D] -> out [B, D], or packed x [total, D] with
 * cu_seqlens [N + 1] (i32; NULL: dense) -> out [N, D]; a sequence without tokens gives zeros.
 * mean_pooling_backward: g [B, D] -> dx [B, T, D], or g [N, D] with cu_seqlens -> dx [total, D],
 * g / len at every token. out and dx are the caller's; ctx may be NULL (defaults). */
EJK_API int ejk_mean_pooling(const ejk_context* ctx, const ejk_tensor* x, const ejk_tensor* cu_seqlens,
                             const ejk_tensor* out);
EJK_API int ejk_mean_pooling_backward(const ejk_context* ctx, const ejk_tensor* g,
                                      const ejk_tensor* cu_seqlens, const ejk_tensor* dx);

/* Registers a kernel bundle (.ejkb) file, or every *.ejkb file of a directory, as ejk::load_bundle
 * (ejk/bundle.h): variants not built in then come from it before the disk cache and the JIT. */
EJK_API int ejk_load_bundle(const char* path);

EJK_API const char* ejk_last_error(void);

/* A program's own CPU variants, compiled into it: CMake's ejk_generate_kernels generates them
 * with a registration file that calls this as the program loads. Calls then find them as
 * built-in variants, after the library's own. kernel_abi names the kernel headers they were
 * compiled from; all are refused when this library was built from others, and so is any entry
 * whose key is malformed, not a CPU key, or one the library or an earlier call has
 * (EJK_INVALID_ARGUMENT, naming each); the rest are registered. The functions must stay loaded
 * for the life of the process. */
typedef struct {
  const char* key; /* canonical variant key, e.g. "flash_fwd.cpu.avx512.f32.d80.bq64.bk64" */
  void (*fn)(const void* params, long long task_begin, long long task_end);
} ejk_cpu_variant;
EJK_API int ejk_register_cpu_variants(const char* kernel_abi, const ejk_cpu_variant* variants, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* EJK_EJK_H */
