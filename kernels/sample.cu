/* sample.cu - log-softmax over the speech vocabulary and top-k candidate selection on the GPU.
 *
 * Math
 *   log_softmax: out[r][i] = x[r][i] - m - log(sum_j exp(x[r][j] - m)), m = max_j x[r][j]
 *     (rows of n = 6761 speech logits; fp32 throughout, natural log).
 *   topk: the k (<= 64) largest values of a row, in descending order, ties broken by the lower
 *     index first, i.e. the first k entries of a stable descending sort (what torch.sort(
 *     descending=True, stable=True) gives and RAS sampling's nucleus step consumes).
 * Shapes: x [rows][stride] (n used); out [rows][n]; vals/idx [rows][k].
 * Thread mapping
 *   log_softmax: one block of 512 threads per row, three strided passes (max, sum, write) that
 *     re-read the row from L1/L2.
 *   topk: one block of 256 threads per row; thread t owns elements t, t+256, ... (held in
 *     registers when n <= 256*32, else re-read). Selection is k rounds of a block arg-max under
 *     the total order (value desc, index asc). Each thread keeps its best element that comes after
 *     the last winner in that order; after a round only the winning thread rescans its own
 *     elements, so a round costs one block reduction plus one thread's rescan. NaNs compare false
 *     and are never selected.
 * Numerics: exact selection (no approximation); log_softmax uses expf/logf in fp32.
 */
#include <limits.h>

#include "kcommon.cuh"

using namespace cosyk;

namespace {

constexpr int LSM_THREADS = 512;
constexpr int TOPK_THREADS = 256;
constexpr int TOPK_IPT = 32;
constexpr int TOPK_MAXK = 64;

template <typename T>
__global__ void __launch_bounds__(LSM_THREADS)
log_softmax_kernel(const T *__restrict__ x, int in_stride, float *__restrict__ out, int n) {
  __shared__ float red[32];
  const T *xr = x + (size_t)blockIdx.x * in_stride;
  float *orow = out + (size_t)blockIdx.x * n;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, ld(xr + i));
  m = block_max(m, red);
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += expf(ld(xr + i) - m);
  s = block_sum(s, red);
  const float lse = m + logf(s);
  for (int i = threadIdx.x; i < n; i += blockDim.x) orow[i] = ld(xr + i) - lse;
}

/* (v, i) ranks before (bv, bi) in the order value desc, index asc */
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

template <bool REG>
__global__ void __launch_bounds__(TOPK_THREADS)
topk_kernel(const float *__restrict__ x, int stride, int n, int k, float *__restrict__ vals,
            int32_t *__restrict__ idx) {
  __shared__ float wv[TOPK_THREADS / 32];
  __shared__ int wi[TOPK_THREADS / 32];
  __shared__ float win_v;
  __shared__ int win_i;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float *xr = x + (size_t)blockIdx.x * stride;
  float rv[REG ? TOPK_IPT : 1];
  if (REG) {
#pragma unroll
    for (int m = 0; m < TOPK_IPT; ++m) {
      const int i = tid + m * TOPK_THREADS;
      rv[m] = i < n ? xr[i] : __int_as_float(0x7fffffff); /* NaN: never selected */
    }
  }
  /* this thread's best element ranked after (bound_v, bound_i) */
  float cv = -INFINITY;
  int ci = INT_MAX; /* INT_MAX: no candidate */
  auto rescan = [&](float bound_v, int bound_i) {
    cv = -INFINITY;
    ci = INT_MAX;
    if (REG) {
#pragma unroll
      for (int m = 0; m < TOPK_IPT; ++m) {
        const int i = tid + m * TOPK_THREADS;
        const float v = rv[m];
        if (better(bound_v, bound_i, v, i) && better(v, i, cv, ci)) {
          cv = v;
          ci = i;
        }
      }
    } else {
      for (int i = tid; i < n; i += TOPK_THREADS) {
        const float v = xr[i];
        if (better(bound_v, bound_i, v, i) && better(v, i, cv, ci)) {
          cv = v;
          ci = i;
        }
      }
    }
  };
  rescan(INFINITY, -1);

  float *vr = vals + (size_t)blockIdx.x * k;
  int32_t *ir = idx + (size_t)blockIdx.x * k;
  for (int kk = 0; kk < k; ++kk) {
    float v = cv;
    int i = ci;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, i, o);
      if (better(ov, oi, v, i)) {
        v = ov;
        i = oi;
      }
    }
    if (lane == 0) {
      wv[warp] = v;
      wi[warp] = i;
    }
    __syncthreads();
    if (warp == 0) {
      v = lane < TOPK_THREADS / 32 ? wv[lane] : -INFINITY;
      i = lane < TOPK_THREADS / 32 ? wi[lane] : INT_MAX;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (better(ov, oi, v, i)) {
          v = ov;
          i = oi;
        }
      }
      if (lane == 0) {
        win_v = v;
        win_i = i;
      }
    }
    __syncthreads();
    const float bv = win_v;
    const int bi = win_i;
    if (bi == INT_MAX) { /* fewer than k selectable (non-NaN) values */
      for (int r = kk + tid; r < k; r += TOPK_THREADS) {
        vr[r] = -INFINITY;
        ir[r] = -1;
      }
      break;
    }
    if (tid == 0) {
      vr[kk] = bv;
      ir[kk] = bi;
    }
    if (ci == bi) rescan(bv, bi);
  }
}

} /* namespace */

extern "C" cudaError_t cosy_k_log_softmax(cudaStream_t s, cosy_kdtype in_dt, const void *x,
                                          int in_stride, float *out, int rows, int n) {
  if (!cosyk_dt_ok(in_dt) || rows < 0 || n <= 0 || in_stride < n) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (!x || !out) return cudaErrorInvalidValue;
  COSYK_DT_CASE(in_dt, T, {
    log_softmax_kernel<T><<<rows, LSM_THREADS, 0, s>>>((const T *)x, in_stride, out, n);
  })
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_topk(cudaStream_t s, const float *x, int stride, int rows, int n,
                                   int k, float *vals, int32_t *idx) {
  if (rows < 0 || n <= 0 || stride < n || k < 1 || k > TOPK_MAXK || k > n)
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (!x || !vals || !idx) return cudaErrorInvalidValue;
  if (n <= TOPK_THREADS * TOPK_IPT)
    topk_kernel<true><<<rows, TOPK_THREADS, 0, s>>>(x, stride, n, k, vals, idx);
  else
    topk_kernel<false><<<rows, TOPK_THREADS, 0, s>>>(x, stride, n, k, vals, idx);
  return cudaGetLastError();
}
