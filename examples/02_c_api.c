/* 02: the same op through the C ABI: descriptors in, status and message out. The first
 * argument is an ejk_context (NULL: defaults; set its stream to launch on a CUDA stream). */
#include <ejk/ejk.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  enum { B = 2, S = 128, H = 4, D = 64 };
  float* q = malloc(sizeof(float) * B * S * H * D);
  float* k = malloc(sizeof(float) * B * S * H * D);
  float* v = malloc(sizeof(float) * B * S * H * D);
  float* out = malloc(sizeof(float) * B * S * H * D);
  float* lse = malloc(sizeof(float) * B * H * S);
  srand(1);
  for (int i = 0; i < B * S * H * D; ++i) {
    q[i] = (float)rand() / RAND_MAX - 0.5f;
    k[i] = (float)rand() / RAND_MAX - 0.5f;
    v[i] = (float)rand() / RAND_MAX - 0.5f;
  }
  int64_t shape[4] = {B, S, H, D}, lse_shape[3] = {B, H, S};
  ejk_tensor tq = {q, EJK_F32, EJK_DEVICE_CPU, 0, 4, shape, NULL};
  ejk_tensor tk = {k, EJK_F32, EJK_DEVICE_CPU, 0, 4, shape, NULL};
  ejk_tensor tv = {v, EJK_F32, EJK_DEVICE_CPU, 0, 4, shape, NULL};
  ejk_tensor to = {out, EJK_F32, EJK_DEVICE_CPU, 0, 4, shape, NULL};
  ejk_tensor tl = {lse, EJK_F32, EJK_DEVICE_CPU, 0, 3, lse_shape, NULL};
  ejk_flash_attention_options opt;
  ejk_flash_attention_options_init(&opt);
  opt.causal = 1;

  int status = ejk_flash_attention(NULL, &tq, &tk, &tv, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &opt, &to, &tl);
  if (status != EJK_OK) {
    fprintf(stderr, "ejk_flash_attention failed (%d): %s\n", status, ejk_last_error());
    return 1;
  }
  printf("out[0] = %.5f, lse[0] = %.5f (a causal row 0 sees one key: lse = scale * q.k)\n", out[0], lse[0]);

  /* A bad call: k with a different head_dim. The message names the argument. */
  int64_t bad_shape[4] = {B, S, H, 32};
  ejk_tensor tbad = {k, EJK_F32, EJK_DEVICE_CPU, 0, 4, bad_shape, NULL};
  status = ejk_flash_attention(NULL, &tq, &tbad, &tbad, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &opt, &to, &tl);
  printf("bad call: status %d: %s\n", status, ejk_last_error());
  free(q); free(k); free(v); free(out); free(lse);
  return status == EJK_INVALID_ARGUMENT ? 0 : 1;
}
