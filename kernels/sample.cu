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
 *   ras_sample: RAS sampling of lib/ref/sampling.h step by step (tempered masked softmax, top-k
 *     in stable order, top-p prefix, multinomial draw, repetition check, full-distribution
 *     redraw), xoshiro256** on the device with the state carried in the row.
 * Numerics: exact selection (no approximation); log_softmax uses expf/logf in fp32.
 *
 * ras_sample thread mapping: one block of 1024 threads per row; thread t owns the 8 consecutive
 *   ids 8t..8t+7 (n <= 8192) in registers, so "in id order" is "in thread order, then register
 *   order". (0) logp = log_softmax(logits) as cosy_k_log_softmax computes it (two block
 *   reductions; written out when asked). (1) x = logp (* 1/T), block max (NaN flagged),
 *   e = expf(x - max), sum in double
 *   (block reduction), p = e * (float)(1 / sum): the host's formulas. (2) the k-th largest p by
 *   radix select on the fp32 bit patterns (p >= 0, so bits order like values): four passes of
 *   an 8-bit digit histogram in shared memory, one warp picks the digit; the candidates are all
 *   p above the threshold plus the first ids equal to it (an exclusive scan of per-thread tie
 *   counts gives id order), which is exactly the first k of a stable descending sort. They are
 *   ordered by rank (count of candidates before them in (p desc, id asc)), O(k^2) compares in
 *   shared memory. (3) thread 0 walks the top-p prefix (fp32 running sum, double total) and
 *   draws as the host does. (4) repetition check on the row's history; on a hit p[id] = 0, the
 *   remaining mass is an inclusive scan of per-thread double sums, thread 0 draws u, and the
 *   thread whose [exclusive, inclusive) range holds u * rest walks its own ids.
 */
#include <limits.h>

#include "kcommon.cuh"
#include "rng.h" /* lib/rng.h: xoshiro256**, the host sampler's generator */

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

/* ------------------------------------------------------------------------------------------ */
/* RAS sampling                                                                                */

constexpr int RAS_THREADS = 1024;
constexpr int RAS_E = COSY_K_RAS_MAX_N / RAS_THREADS; /* ids per thread */
constexpr int RAS_WARPS = RAS_THREADS / 32;

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* inclusive scan over the block (blockDim.x a multiple of 32, <= 1024) of an int or a double;
 * red: __shared__ T[32]; the call contains barriers, so all threads must make it */
template <typename T> __device__ __forceinline__ T block_incl_scan(T v, T *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T t = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += t;
  }
  __syncthreads();
  if (lane == 31) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = red[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const T t = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += t;
    }
    red[lane] = w;
  }
  __syncthreads();
  return warp ? v + red[warp - 1] : v;
}

__global__ void __launch_bounds__(RAS_THREADS)
ras_kernel(const float *__restrict__ logits, int stride, int n, float *__restrict__ logp_out,
           cosy_k_ras_row *rows) {
  __shared__ double dred[32];
  __shared__ float fred[32];
  __shared__ int ired[32];
  __shared__ int hist[256];
  __shared__ float cp[COSY_K_RAS_MAX_K];
  __shared__ int cid[COSY_K_RAS_MAX_K];
  __shared__ float sp[COSY_K_RAS_MAX_K];
  __shared__ int sid[COSY_K_RAS_MAX_K];
  __shared__ int s_digit, s_kk, s_count, s_id, s_resample, s_tok, s_last;
  __shared__ double s_u, s_rest;

  cosy_k_ras_row *row = rows + blockIdx.x;
  const float *xr = logits + (size_t)blockIdx.x * stride;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int base = tid * RAS_E;
  /* the row (192 bytes) into shared memory in one round of loads: thread 0's serial part
   * (nucleus, draws, repetition check) then never waits on global memory */
  __shared__ __align__(16) cosy_k_ras_row srow;
  static_assert(sizeof(cosy_k_ras_row) % 4 == 0, "row size");
  if (tid < (int)(sizeof(cosy_k_ras_row) / 4))
    reinterpret_cast<unsigned *>(&srow)[tid] = reinterpret_cast<const unsigned *>(row)[tid];
  __syncthreads();
  const float temperature = srow.temperature;
  const float inv_t = 1.0f / temperature;
  const int n_allowed = min(srow.n_allowed, n);

  /* 0. log_softmax of the logits (cosy_k_log_softmax's formula), kept in registers and
   * written to logp_out */
  float lg[RAS_E];
  float lm = -INFINITY;
#pragma unroll
  for (int e = 0; e < RAS_E; ++e) {
    lg[e] = base + e < n ? xr[base + e] : -INFINITY;
    lm = fmaxf(lm, lg[e]);
  }
  lm = block_max(lm, fred);
  float ls = 0.f;
#pragma unroll
  for (int e = 0; e < RAS_E; ++e)
    if (base + e < n) ls += expf(lg[e] - lm);
  ls = block_sum(ls, fred);
  const float lse = lm + logf(ls);
#pragma unroll
  for (int e = 0; e < RAS_E; ++e) {
    lg[e] -= lse;
    if (logp_out && base + e < n) logp_out[(size_t)blockIdx.x * n + base + e] = lg[e];
  }

  /* 1. tempered, masked softmax */
  float p[RAS_E];
  float mx = -INFINITY;
  int has_nan = 0;
#pragma unroll
  for (int e = 0; e < RAS_E; ++e) {
    const int i = base + e;
    p[e] = -INFINITY;
    if (i < n_allowed) {
      const float l = lg[e];
      if (isnan(l)) has_nan = 1;
      const float x = temperature == 1.0f ? l : l * inv_t;
      p[e] = x;
      if (x > mx) mx = x;
    }
  }
  has_nan = __syncthreads_or(has_nan);
  mx = block_max(mx, fred);
  if (has_nan || !isfinite(mx)) {
    if (tid == 0) {
      row->token = -1;
      row->status = has_nan ? 1 : 2;
    }
    return;
  }
  double part = 0.0;
#pragma unroll
  for (int e = 0; e < RAS_E; ++e) {
    if (base + e < n_allowed) {
      p[e] = expf(p[e] - mx);
      part += p[e];
    } else {
      p[e] = 0.f;
    }
  }
  part = warp_sum_d(part);
  if (lane == 0) dred[warp] = part;
  __syncthreads();
  if (warp == 0) {
    const double t = warp_sum_d(dred[lane]);
    if (lane == 0) dred[0] = t;
  }
  __syncthreads();
  const float inv_sum = (float)(1.0 / dred[0]);
#pragma unroll
  for (int e = 0; e < RAS_E; ++e)
    if (base + e < n_allowed) p[e] *= inv_sum;

  /* 2. the k-th largest p (radix select on the bits), then the candidates in rank order */
  const int k = min(srow.top_k, n);
  unsigned prefix = 0u, mask = 0u;
  int kk = k; /* rank wanted among the ids matching prefix */
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += RAS_THREADS) hist[b] = 0;
    __syncthreads();
#pragma unroll
    for (int e = 0; e < RAS_E; ++e) { /* lanes with the same digit add once (few hot bins) */
      const unsigned bits = __float_as_uint(p[e]);
      const bool in = base + e < n && (bits & mask) == prefix;
      const unsigned digit = in ? (bits >> shift) & 255u : 256u;
      const unsigned same = __match_any_sync(0xffffffffu, digit);
      if (in && lane == __ffs(same) - 1) atomicAdd(&hist[digit], __popc(same));
    }
    __syncthreads();
    if (warp == 0) {
      /* lane l holds digits 255 - 8l .. 248 - 8l (descending) */
      int c[8], tot = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        c[j] = hist[255 - 8 * lane - j];
        tot += c[j];
      }
      int incl = tot;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
      }
      const int excl = incl - tot;
      if (excl < kk && kk <= incl) { /* exactly one lane */
        int above = excl;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (above < kk && kk <= above + c[j]) {
            s_digit = 255 - 8 * lane - j;
            s_kk = kk - above;
          }
          above += c[j];
        }
      }
    }
    __syncthreads();
    prefix |= (unsigned)s_digit << shift;
    mask |= 255u << shift;
    kk = s_kk;
    __syncthreads();
  }
  /* prefix = bits of the k-th largest p; kk = how many ids equal to it are taken (lowest first) */
  int ties = 0;
#pragma unroll
  for (int e = 0; e < RAS_E; ++e) ties += base + e < n && __float_as_uint(p[e]) == prefix;
  int tie_rank = block_incl_scan(ties, ired) - ties; /* exclusive */
  if (tid == 0) s_count = 0;
  __syncthreads();
#pragma unroll
  for (int e = 0; e < RAS_E; ++e) {
    const unsigned bits = __float_as_uint(p[e]);
    if (base + e >= n) continue;
    bool take = bits > prefix;
    if (bits == prefix) take = tie_rank++ < kk;
    if (take) {
      const int slot = atomicAdd(&s_count, 1);
      sp[slot] = p[e];
      sid[slot] = base + e;
    }
  }
  __syncthreads();
  const int c = s_count; /* == k */
  for (int j = tid; j < c; j += RAS_THREADS) {
    const float pj = sp[j];
    const int ij = sid[j];
    int rank = 0;
    for (int i = 0; i < c; ++i) {
      const float pi = sp[i];
      rank += pi > pj || (pi == pj && sid[i] < ij);
    }
    cp[rank] = pj;
    cid[rank] = ij;
  }
  __syncthreads();

  /* 3. top-p prefix and the draw (thread 0 owns the generator); 4. repetition check */
  cosy_rng rng;
  if (tid == 0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) rng.s[j] = srow.rng[j];
    float cum = 0.0f;
    int taken = 0;
    double total = 0.0;
    while (taken < c && cum < srow.top_p) {
      const float w = cp[taken];
      cum += w;
      total += w;
      taken++;
    }
    const double u = cosy_rng_uniform(&rng) * total;
    double acc = 0.0;
    int pick = -1, last = -1;
    for (int i = 0; i < taken; ++i) {
      const float w = cp[i];
      if (w <= 0.0f) continue;
      acc += w;
      last = i;
      if (u < acc) {
        pick = i;
        break;
      }
    }
    if (pick < 0) pick = last;
    const int id = cid[pick < 0 ? 0 : pick];
    int resample = 0;
    const int win = srow.win_size;
    if (win > 0) {
      const int nh = min(srow.n_hist, win);
      int rep = 0;
      for (int i = 0; i < nh; ++i) rep += srow.hist[i] == id;
      const float thr = (float)win * srow.tau_r;
      resample = (float)rep >= thr;
    }
    s_id = id;
    s_resample = resample;
    s_tok = id;
  }
  __syncthreads();
  if (s_resample) {
    const int id = s_id;
#pragma unroll
    for (int e = 0; e < RAS_E; ++e)
      if (base + e == id) p[e] = 0.f;
    double seg = 0.0;
    int lastpos = -1;
#pragma unroll
    for (int e = 0; e < RAS_E; ++e) {
      seg += p[e];
      if (p[e] > 0.f) lastpos = base + e;
    }
    const double incl = block_incl_scan(seg, dred);
    __shared__ double s_incl[RAS_THREADS];
    s_incl[tid] = incl;
    if (tid == RAS_THREADS - 1) s_rest = incl;
    const int lastall = __reduce_max_sync(0xffffffffu, (unsigned)(lastpos + 1)) - 1;
    if (lane == 0) ired[warp] = lastall;
    __syncthreads();
    const double rest = s_rest;
    if (tid == 0) {
      int la = -1;
      for (int w = 0; w < RAS_WARPS; ++w) la = max(la, ired[w]);
      s_last = la;
      if (rest > 0.0) s_u = cosy_rng_uniform(&rng) * rest;
    }
    __syncthreads();
    if (rest > 0.0) {
      const double u = s_u;
      const double excl = tid ? s_incl[tid - 1] : 0.0;
      if (tid == 0) s_tok = s_last; /* u on the rounding tail: the last id with mass */
      __syncthreads();
      if (seg > 0.0 && excl <= u && u < incl) {
        double acc = excl;
        int pick = lastpos;
#pragma unroll
        for (int e = 0; e < RAS_E; ++e) {
          if (p[e] <= 0.f) continue;
          acc += p[e];
          if (u < acc) {
            pick = base + e;
            break;
          }
        }
        s_tok = pick;
      }
    }
    __syncthreads();
  }
  if (tid == 0) {
    row->token = s_tok;
    row->status = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) row->rng[j] = rng.s[j];
  }
}

} /* namespace */

extern "C" int cosy_k_ras_supported(int n, int top_k, int win_size) {
  return n >= 1 && n <= COSY_K_RAS_MAX_N && top_k >= 1 && top_k <= COSY_K_RAS_MAX_K &&
         win_size >= 0 && win_size <= COSY_K_RAS_MAX_HIST;
}

extern "C" cudaError_t cosy_k_ras_sample(cudaStream_t s, const float *logits, int stride,
                                         int rows, int n, float *logp_out,
                                         cosy_k_ras_row *rows_io) {
  if (rows < 0 || n < 1 || n > COSY_K_RAS_MAX_N || stride < n) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (!logits || !rows_io) return cudaErrorInvalidValue;
  ras_kernel<<<rows, RAS_THREADS, 0, s>>>(logits, stride, n, logp_out, rows_io);
  return cudaGetLastError();
}

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
