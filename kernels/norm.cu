/* norm.cu - RMSNorm (Qwen2), fused residual-add + RMSNorm, LayerNorm with AdaLN modulation (DiT).
 *
 * Math
 *   rmsnorm:      y[r][i] = w[i] * x[r][i] * rsqrt(mean_i x[r][i]^2 + eps)      (Qwen2, eps 1e-6)
 *   add_rmsnorm:  h[r][i] = T_h(h[r][i] + delta[r][i]);  y = rmsnorm(h) from the stored h, so the
 *                 fused op equals "add, store, then rmsnorm" exactly.
 *   layernorm_mod: y[b][n][d] = (x - mean) * rsqrt(var + eps) * (1 + scale[b][d]) + shift[b][d]
 *                 mean, var (biased) over d; no affine weights (DiT: eps 1e-6, AdaLN chunks).
 * Shapes: rows of H (LLM: H = 896) or B*N rows of D (DiT: D = 1024); see kernels.h.
 * Thread mapping: one block of 256 threads per row; thread t handles elements t, t+256, ...
 *   Each pass re-reads the row (from L1/L2) rather than caching it, so any H works; every thread
 *   reads exactly the elements it later writes, which makes in-place use (y == x) safe.
 * Numerics: statistics in fp32 (sum of squares; mean then centred sum of squares for LayerNorm,
 *   two passes, no catastrophic cancellation); one rounding at the bf16 store. HF's Qwen2 rounds
 *   the normalized value to the input dtype before multiplying by w; for fp32 that is identical,
 *   for bf16 it differs by at most one bf16 rounding.
 */
#include "kcommon.cuh"

using namespace cosyk;

namespace {

constexpr int NORM_THREADS = 256;

template <typename TX, typename TY>
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(const TX *x, const float *__restrict__ w, TY *y, int H, float eps) {
  __shared__ float red[32];
  const size_t row = blockIdx.x;
  const TX *xr = x + row * H;
  TY *yr = y + row * H;
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    float v = ld(xr + i);
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const float r = rsqrtf(ss / (float)H + eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x) st(yr + i, w[i] * (ld(xr + i) * r));
}

template <typename TH, typename TD, typename TY>
__global__ void __launch_bounds__(NORM_THREADS)
add_rmsnorm_kernel(TH *h, const TD *__restrict__ delta, const float *__restrict__ w, TY *y, int H,
                   float eps) {
  __shared__ float red[32];
  const size_t row = blockIdx.x;
  TH *hr = h + row * H;
  const TD *dr = delta + row * H;
  TY *yr = y + row * H;
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    float v = round_to<TH>(ld(hr + i) + ld(dr + i));
    st(hr + i, v);
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const float r = rsqrtf(ss / (float)H + eps);
  /* each thread re-reads only the h elements it stored itself */
  for (int i = threadIdx.x; i < H; i += blockDim.x) st(yr + i, w[i] * (ld(hr + i) * r));
}

template <typename TX, typename TY>
__global__ void __launch_bounds__(NORM_THREADS)
layernorm_mod_kernel(const TX *x, TY *y, const float *__restrict__ scale,
                     const float *__restrict__ shift, int mod_stride, int N, int D, float eps) {
  __shared__ float red[32];
  const size_t row = blockIdx.x;
  const int b = (int)(row / (size_t)N);
  const TX *xr = x + row * D;
  TY *yr = y + row * D;
  float s = 0.f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) s += ld(xr + i);
  const float mean = block_sum(s, red) / (float)D;
  float v2 = 0.f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float c = ld(xr + i) - mean;
    v2 += c * c;
  }
  const float r = rsqrtf(block_sum(v2, red) / (float)D + eps);
  const float *sc = scale ? scale + (size_t)b * mod_stride : nullptr;
  const float *sh = shift ? shift + (size_t)b * mod_stride : nullptr;
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float v = (ld(xr + i) - mean) * r;
    if (sc) v = v * (1.f + sc[i]);
    if (sh) v = v + sh[i];
    st(yr + i, v);
  }
}

} /* namespace */

extern "C" cudaError_t cosy_k_rmsnorm(cudaStream_t s, cosy_kdtype x_dt, const void *x,
                                      const float *w, cosy_kdtype y_dt, void *y, int rows, int H,
                                      float eps) {
  if (rows < 0 || H <= 0 || !cosyk_dt_ok(x_dt) || !cosyk_dt_ok(y_dt) || !(eps >= 0.f))
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (!x || !w || !y) return cudaErrorInvalidValue;
  COSYK_DT_CASE(x_dt, TX, COSYK_DT_CASE(y_dt, TY, {
    rmsnorm_kernel<TX, TY><<<rows, NORM_THREADS, 0, s>>>((const TX *)x, w, (TY *)y, H, eps);
  }))
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_add_rmsnorm(cudaStream_t s, cosy_kdtype h_dt, void *h,
                                          cosy_kdtype delta_dt, const void *delta,
                                          const float *w, cosy_kdtype y_dt, void *y, int rows,
                                          int H, float eps) {
  if (rows < 0 || H <= 0 || !cosyk_dt_ok(h_dt) || !cosyk_dt_ok(delta_dt) || !cosyk_dt_ok(y_dt) ||
      !(eps >= 0.f))
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (!h || !delta || !w || !y) return cudaErrorInvalidValue;
  COSYK_DT_CASE(h_dt, TH, COSYK_DT_CASE(delta_dt, TD, COSYK_DT_CASE(y_dt, TY, {
    add_rmsnorm_kernel<TH, TD, TY>
        <<<rows, NORM_THREADS, 0, s>>>((TH *)h, (const TD *)delta, w, (TY *)y, H, eps);
  })))
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_layernorm_mod(cudaStream_t s, cosy_kdtype x_dt, const void *x,
                                            cosy_kdtype y_dt, void *y, const float *scale,
                                            const float *shift, int mod_stride, int B, int N,
                                            int D, float eps) {
  if (B < 0 || N < 0 || D <= 0 || !cosyk_dt_ok(x_dt) || !cosyk_dt_ok(y_dt) || !(eps >= 0.f))
    return cudaErrorInvalidValue;
  if ((scale || shift) && mod_stride < D) return cudaErrorInvalidValue;
  const int64_t rows = (int64_t)B * N;
  if (rows == 0) return cudaSuccess;
  if (!x || !y || rows > 0x7fffffff) return cudaErrorInvalidValue;
  COSYK_DT_CASE(x_dt, TX, COSYK_DT_CASE(y_dt, TY, {
    layernorm_mod_kernel<TX, TY><<<(unsigned)rows, NORM_THREADS, 0, s>>>(
        (const TX *)x, (TY *)y, scale, shift, mod_stride, N, D, eps);
  }))
  return cudaGetLastError();
}
