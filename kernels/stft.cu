/* stft.cu - the 16-point STFT of the HiFT source and the iSTFT of its output (n_fft 16, hop 4,
 * periodic Hann window, center=True).
 *
 * Math (lib/ref/hift.c stft16 / istft16; kernels_hift.h for the launchers):
 *   STFT:  frame f, bin k < 9: X = sum_j x[reflect(4 f + j - 8)] w[j] e^{-2 pi i k j / 16}
 *   iSTFT: frame f: v[j] = (X0 + (-1)^j X8 + 2 sum_{k=1..7} (Re X_k cos - Im X_k sin)) / 16;
 *          y[t] = sum_f v_f[m - 4 f] w[m - 4 f] / sum_f w[m - 4 f]^2 at m = t + 8
 *          with X = min(exp(post), 100) e^{i sin(post')} from the conv_post output.
 * The cos/sin tables and the window are computed on the host exactly as the reference does (glibc
 * cos/sin in fp64, the window rounded to fp32) and passed by value, so both transforms follow the
 * reference's fp64 operations in the same order, without contraction: the STFT is bit-identical
 * to ref_hift_stft; the iSTFT is bit-identical given the same spectrum (expf/sinf/cosf of the
 * head may differ from glibc's by an ulp).
 * Thread mapping: STFT one thread per frame (all 9 bins); iSTFT a block of 256 output samples:
 * the block first builds the complex spectrum of the ~70 frames they touch in shared memory
 * (one thread per frame and bin), then each thread overlap-adds its <= 4 frames in ascending
 * frame order (the reference's accumulation order) and clamps. */
#include <math.h>
#include <stdint.h>

#include "kcommon.cuh"
#include "kernels_hift.h"

namespace {

struct Tables {
  double cs[16], sn[16];
  float w[16];
};

Tables make_tables() {
  Tables t;
  const double pi = 3.14159265358979323846;
  for (int n = 0; n < 16; n++) {
    t.cs[n] = cos(2.0 * pi * n / 16.0);
    t.sn[n] = sin(2.0 * pi * n / 16.0);
    t.w[n] = (float)(0.5 - 0.5 * cos(2.0 * pi * n / 16.0));
  }
  return t;
}

__global__ void stft_kernel(const float *__restrict__ x, int64_t n, int64_t F,
                            float *__restrict__ out, int ld, const Tables tab) {
  const int64_t f = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (f >= F) return;
  double xw[16];
#pragma unroll
  for (int j = 0; j < 16; j++) {
    int64_t i = f * 4 + j - 8;
    if (i < 0) i = -i;
    if (i >= n) i = 2 * (n - 1) - i;
    xw[j] = __dmul_rn((double)x[i], (double)tab.w[j]);
  }
#pragma unroll
  for (int k = 0; k < 9; k++) {
    double a = 0.0, b = 0.0;
#pragma unroll
    for (int j = 0; j < 16; j++) {
      a = __dadd_rn(a, __dmul_rn(xw[j], tab.cs[(k * j) & 15]));
      b = __dsub_rn(b, __dmul_rn(xw[j], tab.sn[(k * j) & 15]));
    }
    out[(size_t)k * ld + f] = (float)a;
    out[(size_t)(9 + k) * ld + f] = (float)b;
  }
}

constexpr int IS_NT = 256;
constexpr int IS_MAXF = IS_NT / 4 + 8; /* frames one block touches */

__global__ void __launch_bounds__(IS_NT)
istft_kernel(const float *__restrict__ post, int ld, int64_t F, int64_t n_out, float limit,
             int raw, float *__restrict__ y, const Tables tab) {
  __shared__ float xr_s[IS_MAXF][9], xi_s[IS_MAXF][9];
  __shared__ double cs_s[16], sn_s[16], w_s[16];
  const int tid = threadIdx.x;
  const int64_t tb = (int64_t)blockIdx.x * IS_NT;
  if (tid < 16) {
    cs_s[tid] = tab.cs[tid];
    sn_s[tid] = tab.sn[tid];
    w_s[tid] = (double)tab.w[tid];
  }
  /* frames touched by m in [tb + 8, tb + 8 + IS_NT) */
  const int64_t m_lo = tb + 8;
  int64_t f_lo = m_lo - 15 <= 0 ? 0 : (m_lo - 15 + 3) / 4;
  int64_t f_hi = (m_lo + IS_NT - 1) / 4;
  if (f_hi > F - 1) f_hi = F - 1;
  const int nf = (int)(f_hi - f_lo + 1);
  for (int e = tid; e < nf * 9; e += IS_NT) {
    const int fl = e / 9, b = e - fl * 9;
    const int64_t f = f_lo + fl;
    if (raw) {
      xr_s[fl][b] = post[(size_t)b * ld + f];
      xi_s[fl][b] = post[(size_t)(9 + b) * ld + f];
      continue;
    }
    float mag = expf(post[(size_t)b * ld + f]);
    const float ph = sinf(post[(size_t)(9 + b) * ld + f]);
    mag = mag > 100.0f ? 100.0f : mag;
    xr_s[fl][b] = __fmul_rn(mag, cosf(ph));
    xi_s[fl][b] = __fmul_rn(mag, sinf(ph));
  }
  __syncthreads();
  const int64_t t = tb + tid;
  if (t >= n_out) return;
  const int64_t m = t + 8;
  int64_t fa = m - 15 <= 0 ? 0 : (m - 15 + 3) / 4;
  int64_t fb = m / 4;
  if (fb > F - 1) fb = F - 1;
  double ola = 0.0, env = 0.0;
  for (int64_t f = fa; f <= fb; f++) {
    const int j = (int)(m - 4 * f);
    const int fl = (int)(f - f_lo);
    const double x8 = (double)xr_s[fl][8];
    double v = __dadd_rn((double)xr_s[fl][0], (j & 1) ? -x8 : x8);
#pragma unroll
    for (int k = 1; k < 8; k++) {
      const int q = (k * j) & 15;
      v = __dadd_rn(v, __dmul_rn(2.0, __dsub_rn(__dmul_rn((double)xr_s[fl][k], cs_s[q]),
                                                __dmul_rn((double)xi_s[fl][k], sn_s[q]))));
    }
    v = __dmul_rn(v, 1.0 / 16.0);
    ola = __dadd_rn(ola, __dmul_rn(v, w_s[j]));
    env = __dadd_rn(env, __dmul_rn(w_s[j], w_s[j]));
  }
  float o = (float)__ddiv_rn(ola, env);
  o = o > limit ? limit : o < -limit ? -limit : o;
  y[t] = o;
}

} /* namespace */

extern "C" cudaError_t cosy_k_hift_stft(cudaStream_t s, const float *x, int64_t n, int64_t F,
                                        float *out, int ld_out) {
  if (!x || !out || n < 9 || F < 0 || F > n / 4 + 1 || ld_out < F) return cudaErrorInvalidValue;
  if (F == 0) return cudaSuccess;
  stft_kernel<<<(unsigned)((F + 127) / 128), 128, 0, s>>>(x, n, F, out, ld_out, make_tables());
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_hift_istft(cudaStream_t s, const float *post, int ld_post, int64_t F,
                                         int64_t n_out, float limit, int raw, float *y) {
  if (!post || !y || F < 2 || ld_post < F || n_out < 0 || n_out > 4 * (F - 1))
    return cudaErrorInvalidValue;
  if (n_out == 0) return cudaSuccess;
  istft_kernel<<<(unsigned)((n_out + IS_NT - 1) / IS_NT), IS_NT, 0, s>>>(
      post, ld_post, F, n_out, limit, raw, y, make_tables());
  return cudaGetLastError();
}
