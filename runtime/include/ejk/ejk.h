/* ejkernel C ABI. Every function returns EJK_OK or an error code; ejk_last_error() gives the
 * message of the calling thread's last failure. Tensors are described, never owned. */
#ifndef EJK_EJK_H
#define EJK_EJK_H
#include <stdint.h>

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
  int32_t rank;
  const int64_t* shape;
  const int64_t* strides; /* in elements; NULL = contiguous */
} ejk_tensor;

typedef struct {
  int32_t has_softmax_scale;
  float softmax_scale;    /* used when has_softmax_scale; default 1/sqrt(D) */
  int32_t causal;
  int32_t has_window;
  int64_t window_left, window_right;
  float logits_soft_cap;  /* <= 0: off */
  int32_t normalize_output;
  int32_t backend;        /* ejk_backend */
  int64_t block_q, block_k; /* 0: heuristic */
} ejk_flash_options;

void ejk_flash_options_init(ejk_flash_options* opt);

/* Optional tensors may be NULL. out: q's shape and dtype; lse: [B, Hq, Sq] f32. */
int ejk_flash_attention(const ejk_tensor* q, const ejk_tensor* k, const ejk_tensor* v,
                        const ejk_tensor* bias, const ejk_tensor* q_segment_ids,
                        const ejk_tensor* kv_segment_ids, const ejk_tensor* cum_seqlens_q,
                        const ejk_tensor* cum_seqlens_k, const ejk_tensor* softmax_aux,
                        const ejk_flash_options* opt, const ejk_tensor* out,
                        const ejk_tensor* lse);

const char* ejk_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* EJK_EJK_H */
