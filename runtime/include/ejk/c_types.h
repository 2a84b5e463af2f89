/* The C ABI's plain types (ejk/ejk.h has the functions): status codes, dtypes, devices,
 * backends, tensor descriptors, the call context and the named argument. No function, no
 * generated header: the library's argument readers and their fuzz target need only these. */
#ifndef EJK_C_TYPES_H
#define EJK_C_TYPES_H
#include <stddef.h>
#include <stdint.h>

/* The version of these types and of the functions' calling conventions. */
#define EJK_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif /* EJK_C_TYPES_H */
