/* source.cu - the HiFT source signal (SineGen2 causal + SourceModuleHnNSF) and its default noise.
 *
 * Math (lib/ref/hift.c, ref_hift_source; kernels_hift.h for the launchers):
 *   noise:   u24(x) = (splitmix64(x) >> 40) 2^-24;
 *            row i, column h = u24(KEY_ROWS ^ (i (nb+1) + h));
 *            rand_ini[h] = u24(KEY_INI ^ h), rand_ini[0] = 0             (bit-identical to the CPU)
 *   sine:    per frame k and harmonic h: rad = fmodf(f0 (h+1) / sr, 1), radd = 0.5 r0 + 0.5 r1,
 *            cum = fp64 running sum of radd rounded to fp32, ph = ((cum 2) pi_f) R,
 *            sine = (float)sin((double)ph) amp
 *   source:  per sample i (frame k = i / R): x_h = sine[k][h] uv + namp U[i][h];
 *            s = (float)tanh((double)(float)(lin_b + sum_h lin_w[h] x_h))
 * Thread mapping: noise and source one thread per element / sample (grid-stride); sine one block:
 *   per chunk of frames all threads compute the increments radd into shared memory, then one
 *   thread per harmonic runs the sequential fp64 scan over them (exactly the reference's
 *   summation order, so the phases are bit-identical; the phase reaches ~1e5 rad where one fp32
 *   ulp is 0.008 rad), writing the fp32 cumulative sums into `sine`; finally all threads turn
 *   them into sine values in place.
 * Numerics: every fp32 operation is written with __f*_rn intrinsics so that nvcc cannot contract
 *   it into an FMA the reference does not have (gcc -std=c11 does not contract); the fp64 sums
 *   likewise. sin/tanh in fp64 (CUDA's are within 1-2 fp64 ulp of glibc's, invisible after the
 *   rounding to fp32 in practice). */
#include <stdint.h>

#include "kcommon.cuh"
#include "kernels_hift.h"
#include "rng.h" /* lib/rng.h: cosy_splitmix64, shared with lib/ref/hift.c */

namespace {

constexpr uint64_t KEY_ROWS = 0x5EED51AE00000000ull;
constexpr uint64_t KEY_INI = 0x5EED1A1700000000ull;
constexpr int MAX_NH = 64;

__device__ __forceinline__ float u24(uint64_t x) {
  return __fmul_rn((float)(cosy_splitmix64(x) >> 40), 1.0f / 16777216.0f);
}

__global__ void noise_kernel(int nh, int64_t first_row, int64_t n_rows, float *rand_ini,
                             float *rows) {
  const int64_t total = n_rows * nh;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / nh, h = e - r * nh;
    rows[e] = u24(KEY_ROWS ^ ((uint64_t)(first_row + r) * (uint64_t)nh + (uint64_t)h));
  }
  if (rand_ini && blockIdx.x == 0 && threadIdx.x < nh)
    rand_ini[threadIdx.x] = threadIdx.x == 0 ? 0.0f : u24(KEY_INI ^ (uint64_t)threadIdx.x);
}

constexpr int SINE_SMEM = 8192; /* floats of radd staged per chunk of frames */

/* f0[k] is absolute frame k_first + k; cum_in (may be NULL: zeros) holds the running sums before
 * frame k_first, cum_out (may be NULL, may equal cum_in) gets those after the last frame. */
__global__ void sine_kernel(const float *__restrict__ f0, int T, int nh, int R, float sr,
                            float amp, const float *__restrict__ rand_ini, int64_t k_first,
                            const double *cum_in, double *cum_out, float *sine) {
  __shared__ float radd_s[SINE_SMEM];
  const int tid = threadIdx.x;
  const float pi_f = 3.14159265358979323846f, up = (float)R;
  const int CH = SINE_SMEM / nh; /* frames per chunk */
  /* the running sum of harmonic tid (threads tid < nh) */
  double cum = (cum_in && tid < nh) ? cum_in[tid] : 0.0;
  for (int k0 = 0; k0 < T; k0 += CH) {
    const int n = T - k0 < CH ? T - k0 : CH;
    /* every thread: the per-frame increments radd of this chunk */
    for (int e = tid; e < n * nh; e += blockDim.x) {
      const int kk = e / nh, h = e - kk * nh, k = k0 + kk;
      const float fn = __fmul_rn(f0[k], (float)(h + 1));
      float r0 = fmodf(__fdiv_rn(fn, sr), 1.0f), r1 = r0;
      /* the two taps of frame k (absolute sample indices) */
      const int64_t i0 = (k_first + k) * R + R / 2 - 1, i1 = i0 + 1;
      if (i0 == 0 || i1 == 0) {
        const float ini = rand_ini ? rand_ini[h] : (h == 0 ? 0.0f : u24(KEY_INI ^ (uint64_t)h));
        if (i0 == 0) r0 = __fadd_rn(r0, ini);
        if (i1 == 0) r1 = __fadd_rn(r1, ini);
      }
      radd_s[e] = __fadd_rn(__fmul_rn(0.5f, r0), __fmul_rn(0.5f, r1));
    }
    __syncthreads();
    /* one thread per harmonic: the sequential fp64 scan (the reference's order) */
    if (tid < nh)
      for (int kk = 0; kk < n; kk++) {
        cum = __dadd_rn(cum, (double)radd_s[kk * nh + tid]);
        sine[(size_t)(k0 + kk) * nh + tid] = (float)cum;
      }
    __syncthreads(); /* radd_s is reused; the global writes are visible to the block */
  }
  if (cum_out && tid < nh) cum_out[tid] = cum;
  for (int e = tid; e < T * nh; e += blockDim.x) {
    float ph = sine[e];
    ph = __fmul_rn(ph, 2.0f);
    ph = __fmul_rn(ph, pi_f);
    ph = __fmul_rn(ph, up);
    sine[e] = __fmul_rn((float)sin((double)ph), amp);
  }
}

/* f0 / sine row k hold absolute frame k_base + k */
__global__ void source_kernel(const float *__restrict__ f0, const float *__restrict__ sine, int nh,
                              int R, int64_t i0, int64_t n, int64_t k_base,
                              const float *__restrict__ U,
                              const float *__restrict__ lin_w, float lin_b, float thr,
                              float sigma, float amp_unvoiced, float *__restrict__ out) {
  __shared__ float w_s[MAX_NH];
  if (threadIdx.x < nh) w_s[threadIdx.x] = lin_w[threadIdx.x];
  __syncthreads();
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = i0 + e;
    const int64_t k = i / R - k_base;
    const float f = f0[k];
    const float uv = f > thr ? 1.0f : 0.0f;
    const float namp = uv > 0.f ? sigma : amp_unvoiced;
    double acc = (double)lin_b;
    for (int h = 0; h < nh; h++) {
      const float u =
          U ? U[e * nh + h] : u24(KEY_ROWS ^ ((uint64_t)i * (uint64_t)nh + (uint64_t)h));
      const float x = __fadd_rn(__fmul_rn(sine[k * nh + h], uv), __fmul_rn(namp, u));
      acc = __dadd_rn(acc, __dmul_rn((double)w_s[h], (double)x));
    }
    out[e] = (float)tanh((double)(float)acc);
  }
}

} /* namespace */

extern "C" cudaError_t cosy_k_hift_noise(cudaStream_t s, int nb, int64_t first_row,
                                         int64_t n_rows, float *rand_ini, float *rows) {
  if (nb < 0 || nb + 1 > MAX_NH || first_row < 0 || n_rows < 0 || (!rows && n_rows > 0))
    return cudaErrorInvalidValue;
  if (n_rows == 0 && !rand_ini) return cudaSuccess;
  const unsigned blocks = cosyk_blocks(n_rows * (nb + 1), 256, 4096);
  noise_kernel<<<blocks, 256, 0, s>>>(nb + 1, first_row, n_rows, rand_ini, rows);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_hift_sine(cudaStream_t s, const float *f0, int T, int nb, int R,
                                        float sr, float amp, const float *rand_ini, float *sine) {
  return cosy_k_hift_sine_at(s, f0, T, nb, R, sr, amp, rand_ini, 0, NULL, NULL, sine);
}

extern "C" cudaError_t cosy_k_hift_sine_at(cudaStream_t s, const float *f0, int T, int nb, int R,
                                           float sr, float amp, const float *rand_ini,
                                           int64_t k_first, const double *cum_in,
                                           double *cum_out, float *sine) {
  if (!f0 || !sine || T < 0 || nb < 0 || nb + 1 > MAX_NH || R < 1 || !(sr > 0.f) || k_first < 0)
    return cudaErrorInvalidValue;
  if (T == 0) {
    if (cum_out && cum_out != cum_in) /* no frames: the sums pass through */
      return cum_in ? cudaMemcpyAsync(cum_out, cum_in, (size_t)(nb + 1) * sizeof(double),
                                      cudaMemcpyDeviceToDevice, s)
                    : cudaMemsetAsync(cum_out, 0, (size_t)(nb + 1) * sizeof(double), s);
    return cudaSuccess;
  }
  sine_kernel<<<1, 1024, 0, s>>>(f0, T, nb + 1, R, sr, amp, rand_ini, k_first, cum_in, cum_out,
                                 sine);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_hift_source(cudaStream_t s, const float *f0, const float *sine,
                                          int nb, int R, int64_t i0, int64_t n, const float *U,
                                          const float *lin_w, float lin_b, float thr,
                                          float sigma, float amp_unvoiced, float *out) {
  return cosy_k_hift_source_at(s, f0, sine, nb, R, i0, n, 0, U, lin_w, lin_b, thr, sigma,
                               amp_unvoiced, out);
}

extern "C" cudaError_t cosy_k_hift_source_at(cudaStream_t s, const float *f0, const float *sine,
                                             int nb, int R, int64_t i0, int64_t n, int64_t k_base,
                                             const float *U, const float *lin_w, float lin_b,
                                             float thr, float sigma, float amp_unvoiced,
                                             float *out) {
  if (!f0 || !sine || !lin_w || !out || nb < 0 || nb + 1 > MAX_NH || R < 1 || i0 < 0 || n < 0 ||
      k_base < 0 || (n > 0 && i0 / R < k_base))
    return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const unsigned blocks = cosyk_blocks(n, 256, 8192);
  source_kernel<<<blocks, 256, 0, s>>>(f0, sine, nb + 1, R, i0, n, k_base, U, lin_w, lin_b, thr,
                                       sigma, amp_unvoiced, out);
  return cudaGetLastError();
}
