// Throughput of MUFU.EX2 forms on one SM: one block of 1024 threads per SM, 8 independent
// chains per thread, cycles from clock64 around the loop.
#include <cstdio>
#include <cuda_runtime.h>
typedef unsigned u32;
constexpr int kIters = 2048, kChains = 8;

__device__ __forceinline__ float ex2f(float x) { float y; asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ __forceinline__ u32 ex2h2(u32 x) { u32 y; asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x)); return y; }
__device__ __forceinline__ u32 ex2bh2(u32 x) { u32 y; asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x)); return y; }
__device__ __forceinline__ u32 cvth2(float a, float b) { u32 y; asm volatile("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(y) : "f"(a), "f"(b)); return y; }

template <int kMode> __global__ void bench(u32* out, long long* cyc, float seed) {
  u32 acc = 0;
  float xf[kChains]; u32 xh[kChains];
  for (int c = 0; c < kChains; ++c) { xf[c] = -seed * (threadIdx.x + c); xh[c] = 0xBC00BC00u + threadIdx.x + c; }
  __syncthreads();
  long long t0 = clock64();
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if (kMode == 0) xf[c] = ex2f(xf[c]) - 1.5f;
      if (kMode == 1) xh[c] = ex2h2(xh[c]) ^ 0x80008000u;   // negate: stays in range
      if (kMode == 2) xh[c] = ex2bh2(xh[c]) ^ 0x80008000u;
      if (kMode == 3) { float y = ex2f(xf[c]); xh[c] ^= cvth2(y, xf[c]); xf[c] = y - 1.5f; }
      if (kMode == 4) { xh[c] = ex2h2(cvth2(xf[c], xf[c] + 1.f)); xf[c] = __uint_as_float(xh[c]) - 2.f; }
    }
  }
  __syncthreads();
  long long t1 = clock64();
  for (int c = 0; c < kChains; ++c) acc ^= xh[c] ^ __float_as_uint(xf[c]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
  if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}

template <int kMode> void run(const char* name, int sms, u32* out, long long* cyc, double results_per_op) {
  bench<kMode><<<sms, 1024>>>(out, cyc, 0.01f);
  bench<kMode><<<sms, 1024>>>(out, cyc, 0.01f);
  cudaDeviceSynchronize();
  long long h[1024]; cudaMemcpy(h, cyc, sms * sizeof(long long), cudaMemcpyDeviceToHost);
  double c = 0; for (int i = 0; i < sms; ++i) c += h[i]; c /= sms;
  double ops = 1024.0 * kIters * kChains;
  printf("%-28s %8.0f cycles  %6.2f MUFU-instr/clk/SM  %6.2f exp results/clk/SM\n", name, c, ops / c, ops * results_per_op / c);
}

int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  u32* out; long long* cyc;
  cudaMalloc(&out, sms * 1024 * 4); cudaMalloc(&cyc, sms * 8);
  run<0>("ex2.approx.ftz.f32", sms, out, cyc, 1);
  run<1>("ex2.approx.f16x2", sms, out, cyc, 2);
  run<2>("ex2.approx.ftz.bf16x2", sms, out, cyc, 2);
  run<3>("ex2.f32 + cvt.f16x2", sms, out, cyc, 1);
  run<4>("cvt.f16x2 + ex2.f16x2", sms, out, cyc, 2);
  printf("err: %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
}
