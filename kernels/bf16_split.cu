/* bf16_split.cu - hi/lo bf16 splitting of the GPU LLM's fp32 activations for cuBLASLt
 * (lib/gpu/llm.c; the precision scheme is in bf16_split.h): residual add + RMSNorm + split, plain
 * split, SiLU gate + split, and an fp32 add. Interfaces in bf16_split.h.
 *
 * Math
 *   norm_split: h += d + d_lo; y = w * (h * rsqrt(mean h^2 + eps)); hi = bf16(y), lo = bf16(y-hi).
 *   split / silu_split / add: see bf16_split.h.
 * Thread mapping
 *   norm_split: one block of 256 threads per row, two strided passes over the row.
 *   split / silu_split / add: one thread per element; grid-stride.
 * Numerics: fp32 arithmetic; the pair (hi, lo) holds x to ~2^-17 relative.
 */
#include "bf16_split.h"
#include "kcommon.cuh"

using namespace cosyk;

namespace {

constexpr int EW_THREADS = 256;           /* threads per block of the per-element kernels */
constexpr unsigned EW_MAX_BLOCKS = 4096u; /* their grid-stride loops: at most this many blocks */

inline unsigned grid_for(int64_t total) { return cosyk_blocks(total, EW_THREADS, EW_MAX_BLOCKS); }

/* ------------------------------------------------------------------------------------------ */
/* hi/lo helpers                                                                               */

__device__ __forceinline__ void split1(float y, bf16 *hi, bf16 *lo) {
  const bf16 h = __float2bfloat16_rn(y);
  *hi = h;
  *lo = __float2bfloat16_rn(y - __bfloat162float(h));
}

constexpr int NS_THREADS = 256;

__global__ void __launch_bounds__(NS_THREADS)
norm_split_kernel(float *h, const float *__restrict__ d, const float *__restrict__ dl,
                  const float *__restrict__ w, float eps, bf16 *__restrict__ hi,
                  bf16 *__restrict__ lo, int H) {
  __shared__ float red[32];
  const size_t row = blockIdx.x;
  float *hr = h + row * H;
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += NS_THREADS) {
    float v = hr[i];
    if (d) {
      v += d[row * H + i] + dl[row * H + i];
      hr[i] = v;
    }
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const float r = rsqrtf(ss / (float)H + eps);
  /* each thread re-reads only the h elements it wrote itself */
  for (int i = threadIdx.x; i < H; i += NS_THREADS)
    split1(w[i] * (hr[i] * r), hi + row * H + i, lo + row * H + i);
}

__global__ void __launch_bounds__(EW_THREADS)
split_kernel(const float *__restrict__ x, int ldx, bf16 *__restrict__ hi, bf16 *__restrict__ lo,
             int M, int K) {
  const int64_t total = (int64_t)M * K;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t m = e / K, k = e % K;
    split1(x[m * ldx + k], hi + e, lo + e);
  }
}

__global__ void __launch_bounds__(EW_THREADS)
silu_split_kernel(const float *__restrict__ gu, const float *__restrict__ gl, int I,
                  bf16 *__restrict__ hi, bf16 *__restrict__ lo, int M) {
  const int64_t total = (int64_t)M * I;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t m = e / I, j = e % I;
    const size_t o = (size_t)m * 2 * I + j;
    const float g = gu[o] + gl[o], u = gu[o + I] + gl[o + I];
    split1(g / (1.f + expf(-g)) * u, hi + e, lo + e);
  }
}

__global__ void __launch_bounds__(EW_THREADS)
add_kernel(const float *a, const float *b, float *out, int64_t n) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    out[e] = a[e] + b[e];
}

} /* namespace */

extern "C" cudaError_t cosy_k_llm_norm_split(cudaStream_t s, float *h, const float *delta,
                                             const float *delta_lo, const float *w, float eps,
                                             cosy_bf16 *hi, cosy_bf16 *lo, int M, int H) {
  if (M < 0 || H <= 0 || (delta && !delta_lo)) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  if (!h || !w || !hi || !lo) return cudaErrorInvalidValue;
  norm_split_kernel<<<M, NS_THREADS, 0, s>>>(h, delta, delta_lo, w, eps, (bf16 *)hi, (bf16 *)lo,
                                             H);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_llm_split(cudaStream_t s, const float *x, int ldx, cosy_bf16 *hi,
                                        cosy_bf16 *lo, int M, int K) {
  if (M < 0 || K <= 0 || ldx < K) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  if (!x || !hi || !lo) return cudaErrorInvalidValue;
  split_kernel<<<grid_for((int64_t)M * K), EW_THREADS, 0, s>>>(
      x, ldx, (bf16 *)hi, (bf16 *)lo, M, K);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_llm_silu_split(cudaStream_t s, const float *gu, const float *gu_lo,
                                             int I, cosy_bf16 *hi, cosy_bf16 *lo, int M) {
  if (M < 0 || I <= 0) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  if (!gu || !gu_lo || !hi || !lo) return cudaErrorInvalidValue;
  silu_split_kernel<<<grid_for((int64_t)M * I), EW_THREADS, 0, s>>>(gu, gu_lo, I, (bf16 *)hi,
                                                             (bf16 *)lo, M);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_llm_add(cudaStream_t s, const float *a, const float *b, float *out,
                                      int64_t n) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!a || !b || !out) return cudaErrorInvalidValue;
  add_kernel<<<grid_for(n), EW_THREADS, 0, s>>>(a, b, out, n);
  return cudaGetLastError();
}
