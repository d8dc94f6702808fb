/* gemv.cu - the fused skinny GEMM ("gemv") of the GPU LLM's small decode batches (lib/gpu/llm.c):
 * y = epilogue(x W^T) for 1..8 rows with the RMSNorm of its input and the layer's epilogue
 * (residual add, SiLU gate, RoPE + paged KV append) fused. Interface in gemv.h.
 *
 * Math
 *   gemv: out(m, n) = sum_k xn[m][k] W[n][k] (+ bias[n]) with the epilogues of gemv.h;
 *     xn = x, or for IN_RMSNORM xn[m][k] = w[k] * (x[m][k] * r_m), r_m = rsqrt(mean_k x^2 + eps),
 *     all fp32 (the same expression as lib/ref/llm.c).
 * Shapes: see gemv.h. Decode: M <= 8 rows, H = 896, qkv N = 1152, gate|up N = 9728,
 *   down K = 4864, head N = 6761 (full model).
 * Thread mapping
 *   gemv: 256 threads = 8 warps per block. A "slot" is one output row (STORE / ADD), or the row
 *     pair (j, j + I) for SILU_MUL, or (head*64 + i, head*64 + i + 32) for QKV_ROPE, so that a
 *     pair's epilogue (SiLU gate, rotation) needs no exchange between blocks. KS warps (1, 2, 4 or
 *     8, a template parameter) share one slot and split K; a block holds 8 / KS slots. Lane l of
 *     K-part p owns the 16-byte weight chunks j = (c*KS + p)*32 + l, c < C (C = 4 for row
 *     pairs, 5 for single rows; coalesced 512-byte
 *     warp accesses), all issued into registers first, so the weight stream is in flight while
 *     the block waits for its producer (PDL) and computes the RMSNorm statistics. x (fp32, tiny)
 *     is then read with plain loads (L1 hits after the first warp; never ld.global.nc, see load8f)
 *     next to each weight chunk (two float4 per row and chunk); each lane
 *     does 8 FMAs per chunk, row of W and row of x; partial sums are reduced with warp shuffles
 *     and, across the KS warps, through shared memory; thread (slot, m) applies the epilogue.
 *     KS is chosen by the launcher: the least that covers K in C chunks per lane, then doubled
 *     (up to 8, while each warp still has chunks) until the grid has >= 264 blocks (2 per SM).
 *     The grid is ceil(slots / (8 / KS)): 288..846 blocks for the full model's matrices (down:
 *     KS 4, 448 blocks). Register bounds at M = 1 (5 blocks per SM for single rows, 4 for pairs)
 *     keep each of those grids within one or two waves; the weights in flight are ~32 of each
 *     thread's registers.
 *     PDL (sm_90): every gemv block triggers its dependents at once and waits (griddepcontrol)
 *     for its own producers after issuing its weight loads.
 * Numerics: fp32 everywhere except the bf16 weights; fp32 accumulation. The gemv reads each
 *   weight exactly once per call.
 */
#include "gemv.h"
#include "kcommon.cuh"

#include <string.h>

using namespace cosyk;

namespace {

constexpr int HD = 64;   /* head_dim */
constexpr int HALF = 32; /* RoPE pairs (i, i + 32) of a head */
constexpr int GV_MAX_GROUPS = 65535; /* row groups of one launch at most */

/* ------------------------------------------------------------------------------------------ */
/* gemv                                                                                        */

constexpr int GV_THREADS = 256;
constexpr int GV_WARPS = GV_THREADS / 32;
/* 16-byte weight chunks per lane and row: 5 for single rows (down: K = 4864 = 4.75 chunks per
 * lane at 4 K parts, so 448 blocks, one wave), 4 for row pairs (registers) */
__host__ __device__ constexpr int gv_rows(int epi) {
  return (epi == COSY_GEMV_SILU_MUL || epi == COSY_GEMV_QKV_ROPE) ? 2 : 1;
}
__host__ __device__ constexpr int gv_cmax(int epi) { return gv_rows(epi) == 2 ? 4 : 5; }
constexpr int GV_TARGET_BLOCKS = 264;

struct GemvP {
  int M, N, K, P, groups;
  const float *x;
  int ldx;
  const float *norm_w;
  float eps;
  const bf16 *w;
  const float *bias;
  float *y;
  int ldy;
  int n_qh, n_kh;
  const int32_t *pos, *slots;
  const float *inv_freq;
  float *kc, *vc;
};

__device__ __forceinline__ void unpack8(const uint4 &t, float f[8]) {
  f[0] = __uint_as_float(t.x << 16); f[1] = __uint_as_float(t.x & 0xffff0000u);
  f[2] = __uint_as_float(t.y << 16); f[3] = __uint_as_float(t.y & 0xffff0000u);
  f[4] = __uint_as_float(t.z << 16); f[5] = __uint_as_float(t.z & 0xffff0000u);
  f[6] = __uint_as_float(t.w << 16); f[7] = __uint_as_float(t.w & 0xffff0000u);
}

/* 8 floats of a constant (weight) vector: read-only path */
__device__ __forceinline__ void load8w(const float *p, float f[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4 *>(p));
  const float4 b = __ldg(reinterpret_cast<const float4 *>(p) + 1);
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

/* 8 floats of an activation written by an earlier kernel: plain (coherent, L1-cached) loads.
 * Never the read-only path (ld.global.nc, __ldg) for such data: with PDL this grid starts before
 * its producer has finished, and nc loads then returned stale values (seen on an H200: decode
 * log-probs off by ~12); plain loads after griddepcontrol.wait see the producer's writes. */
__device__ __forceinline__ void load8f(const float *p, float f[8]) {
  const float4 a = *reinterpret_cast<const float4 *>(p);
  const float4 b = *(reinterpret_cast<const float4 *>(p) + 1);
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}


template <int M, int KS, int PRO, int EPI>
__global__ void __launch_bounds__(GV_THREADS, M == 1 ? (gv_rows(EPI) == 1 ? 5 : 4) : 2)
    gemv_kernel(GemvP a) {
  constexpr int RW = gv_rows(EPI), GV_CMAX = gv_cmax(EPI);
  constexpr int SPB = GV_WARPS / KS;
  __shared__ float red[GV_WARPS][RW * M];
  __shared__ float nred[GV_WARPS][M];

  pdl_trigger();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int K = a.K, nch = K >> 3;
  /* blockIdx.x: the row group (fastest, so the groups of one weight slice run together and
   * share it through L2), blockIdx.y: the slot block */
  const int grp = blockIdx.x;
  const int slot = blockIdx.y * SPB + warp / KS, kp = warp % KS;
  const bool valid = slot < a.P;

  int row[RW];
  if (EPI == COSY_GEMV_SILU_MUL) {
    row[0] = slot;
    row[RW - 1] = slot + (a.N >> 1);
  } else if (EPI == COSY_GEMV_QKV_ROPE) {
    row[0] = (slot / HALF) * HD + slot % HALF;
    row[RW - 1] = row[0] + HALF;
  } else {
    row[0] = slot;
  }

  /* 1. the weight stream, straight into registers (weights never depend on a producer) */
  uint4 wv[RW][GV_CMAX];
#pragma unroll
  for (int c = 0; c < GV_CMAX; ++c) {
    const int j = (c * KS + kp) * 32 + lane;
#pragma unroll
    for (int r = 0; r < RW; ++r) {
      if (valid && j < nch)
        wv[r][c] = __ldcs(reinterpret_cast<const uint4 *>(a.w + (size_t)row[r] * K + (size_t)j * 8));
      else
        wv[r][c] = make_uint4(0u, 0u, 0u, 0u);
    }
  }

  /* 2. everything below may read what the previous kernel wrote */
  pdl_wait();
  const float *x = a.x + (size_t)grp * M * a.ldx;
  float rn[M];
#pragma unroll
  for (int m = 0; m < M; ++m) rn[m] = 1.f;
  if (PRO == COSY_GEMV_IN_RMSNORM) {
    float ss[M];
#pragma unroll
    for (int m = 0; m < M; ++m) ss[m] = 0.f;
    for (int k = tid * 4; k < K; k += GV_THREADS * 4) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float4 v = *reinterpret_cast<const float4 *>(x + (size_t)m * a.ldx + k);
        ss[m] += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float t = warp_sum(ss[m]);
      if (lane == 0) nred[warp][m] = t;
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float t = 0.f;
#pragma unroll
      for (int q = 0; q < GV_WARPS; ++q) t += nred[q][m];
      rn[m] = rsqrtf(t / (float)K + a.eps);
    }
  }

  /* 3. dot products */
  float acc[RW][M];
#pragma unroll
  for (int r = 0; r < RW; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
#pragma unroll
  for (int c = 0; c < GV_CMAX; ++c) {
    const int j = (c * KS + kp) * 32 + lane;
    if (j < nch) {
      float wf[RW][8];
#pragma unroll
      for (int r = 0; r < RW; ++r) unpack8(wv[r][c], wf[r]);
      float nw[8];
      if (PRO == COSY_GEMV_IN_RMSNORM) load8w(a.norm_w + (size_t)j * 8, nw);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xf[8];
        load8f(x + (size_t)m * a.ldx + (size_t)j * 8, xf);
        if (PRO == COSY_GEMV_IN_RMSNORM) {
#pragma unroll
          for (int e = 0; e < 8; ++e) xf[e] = nw[e] * (xf[e] * rn[m]);
        }
#pragma unroll
        for (int r = 0; r < RW; ++r)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][m] = fmaf(wf[r][e], xf[e], acc[r][m]);
      }
    }
  }

  /* 4. reductions: lanes, then the KS warps of a slot */
#pragma unroll
  for (int r = 0; r < RW; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float t = warp_sum(acc[r][m]);
      if (lane == 0) red[warp][r * M + m] = t;
    }
  __syncthreads();
  if (tid >= SPB * M) return;
  const int sl = tid / M, m = tid - sl * M;
  const int s = blockIdx.y * SPB + sl;
  if (s >= a.P) return;
  const int gm = grp * M + m; /* the row in the whole call */
  float v[RW];
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    float t = 0.f;
#pragma unroll
    for (int q = 0; q < KS; ++q) t += red[sl * KS + q][r * M + m];
    v[r] = t;
  }

  /* 5. epilogue of (slot s, row m) */
  if (EPI == COSY_GEMV_STORE_F32 || EPI == COSY_GEMV_ADD_F32) {
    float *y = a.y + (size_t)gm * a.ldy + s;
    const float o = v[0] + (a.bias ? a.bias[s] : 0.f);
    if (EPI == COSY_GEMV_ADD_F32)
      *y += o;
    else
      *y = o;
  } else if (EPI == COSY_GEMV_SILU_MUL) {
    const float g = v[0] + (a.bias ? a.bias[s] : 0.f);
    const float u = v[RW - 1] + (a.bias ? a.bias[s + (a.N >> 1)] : 0.f);
    a.y[(size_t)gm * a.ldy + s] = g / (1.f + expf(-g)) * u;
  } else { /* QKV_ROPE */
    const int head = s / HALF, i = s % HALF;
    const int r0 = head * HD + i;
    float x1 = v[0], x2 = v[RW - 1];
    if (a.bias) {
      x1 += a.bias[r0];
      x2 += a.bias[r0 + HALF];
    }
    if (head < a.n_qh + a.n_kh) {
      float sn, cs;
      sincosf((float)a.pos[gm] * a.inv_freq[i], &sn, &cs);
      const float t1 = x1 * cs - x2 * sn, t2 = x2 * cs + x1 * sn;
      x1 = t1;
      x2 = t2;
    }
    if (head < a.n_qh) {
      float *q = a.y + (size_t)gm * a.ldy + (size_t)head * HD;
      q[i] = x1;
      q[i + HALF] = x2;
    } else {
      const int sc = a.slots[gm];
      if (sc >= 0) {
        const bool is_k = head < a.n_qh + a.n_kh;
        const int kvh = is_k ? head - a.n_qh : head - a.n_qh - a.n_kh;
        float *c = (is_k ? a.kc : a.vc) + ((size_t)sc * a.n_kh + kvh) * HD;
        c[i] = x1;
        c[i + HALF] = x2;
      }
    }
  }
}

template <int M, int KS, int PRO, int EPI>
cudaError_t gemv_launch(cudaStream_t s, const GemvP &p, int pdl) {
  constexpr int SPB = GV_WARPS / KS;
  const unsigned blocks = (unsigned)((p.P + SPB - 1) / SPB);
  const dim3 grid((unsigned)p.groups, blocks);
  if (!pdl) {
    gemv_kernel<M, KS, PRO, EPI><<<grid, GV_THREADS, 0, s>>>(p);
    return cudaGetLastError();
  }
  cudaLaunchConfig_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDim = grid;
  cfg.blockDim = dim3(GV_THREADS);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaError_t e = cudaLaunchKernelEx(&cfg, gemv_kernel<M, KS, PRO, EPI>, p);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

template <int M, int PRO, int EPI>
cudaError_t gemv_ks(cudaStream_t s, const GemvP &p, int ks, int pdl) {
  switch (ks) {
  case 1: return gemv_launch<M, 1, PRO, EPI>(s, p, pdl);
  case 2: return gemv_launch<M, 2, PRO, EPI>(s, p, pdl);
  case 4: return gemv_launch<M, 4, PRO, EPI>(s, p, pdl);
  case 8: return gemv_launch<M, 8, PRO, EPI>(s, p, pdl);
  default: return cudaErrorInvalidValue;
  }
}

template <int PRO, int EPI>
cudaError_t gemv_m(cudaStream_t s, const GemvP &p, int ks, int pdl) {
  switch (p.M) {
  case 1: return gemv_ks<1, PRO, EPI>(s, p, ks, pdl);
  case 2: return gemv_ks<2, PRO, EPI>(s, p, ks, pdl);
  case 4: return gemv_ks<4, PRO, EPI>(s, p, ks, pdl);
  case 8: return gemv_ks<8, PRO, EPI>(s, p, ks, pdl);
  default: return cudaErrorInvalidValue;
  }
}

inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

} /* namespace */

extern "C" int cosy_k_llm_gemv_supported(int M, int K) {
  return (M == 1 || M == 2 || M == 4 || M == 8) && K >= 8 && K % 8 == 0 &&
         K <= 4 * 8 * 32 * 8;
}

extern "C" cudaError_t cosy_k_llm_gemv(cudaStream_t s, const cosy_llm_gemv_args *a) {
  if (!a || !cosy_k_llm_gemv_supported(a->M, a->K) || a->N <= 0 || !a->x || !a->w || !a->y ||
      !aligned16(a->w) || !aligned16(a->x) || a->ldx < a->K || a->ldx % 4 != 0)
    return cudaErrorInvalidValue;
  if (a->in_mode == COSY_GEMV_IN_RMSNORM && (!a->norm_w || !aligned16(a->norm_w)))
    return cudaErrorInvalidValue;
  if (a->groups < 0 || a->groups > GV_MAX_GROUPS) return cudaErrorInvalidValue;
  GemvP p;
  p.M = a->M;
  p.groups = a->groups > 1 ? a->groups : 1;
  p.N = a->N;
  p.K = a->K;
  p.x = a->x;
  p.ldx = a->ldx;
  p.norm_w = a->norm_w;
  p.eps = a->eps;
  p.w = (const bf16 *)a->w;
  p.bias = a->bias;
  p.y = a->y;
  p.ldy = a->ldy;
  p.n_qh = a->n_qh;
  p.n_kh = a->n_kh;
  p.pos = a->pos;
  p.slots = a->slots;
  p.inv_freq = a->inv_freq;
  p.kc = a->k_cache;
  p.vc = a->v_cache;
  switch (a->out_mode) {
  case COSY_GEMV_STORE_F32:
  case COSY_GEMV_ADD_F32:
    p.P = a->N;
    if (a->ldy < a->N) return cudaErrorInvalidValue;
    break;
  case COSY_GEMV_SILU_MUL:
    if (a->N % 2 != 0 || a->ldy < a->N / 2) return cudaErrorInvalidValue;
    p.P = a->N / 2;
    break;
  case COSY_GEMV_QKV_ROPE:
    if (a->n_qh <= 0 || a->n_kh <= 0 || a->N != (a->n_qh + 2 * a->n_kh) * HD ||
        a->ldy < a->n_qh * HD || !a->pos || !a->slots || !a->inv_freq || !a->k_cache ||
        !a->v_cache)
      return cudaErrorInvalidValue;
    p.P = a->N / 2;
    break;
  default:
    return cudaErrorInvalidValue;
  }
  /* K split: least that covers K in gv_cmax chunks per lane, then more for a fuller grid */
  const int nch = a->K / 8, cmax = gv_cmax(a->out_mode);
  int ks = 1;
  while (ks < 8 && (nch + 32 * ks - 1) / (32 * ks) > cmax) ks *= 2;
  while (ks < 8 && (p.P + GV_WARPS / ks - 1) / (GV_WARPS / ks) < GV_TARGET_BLOCKS &&
         nch > 32 * ks)
    ks *= 2;

  const int pro = a->in_mode, epi = a->out_mode, pdl = a->pdl ? 1 : 0;
  if (pro == COSY_GEMV_IN_RMSNORM && epi == COSY_GEMV_QKV_ROPE)
    return gemv_m<COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE>(s, p, ks, pdl);
  if (pro == COSY_GEMV_IN_RMSNORM && epi == COSY_GEMV_SILU_MUL)
    return gemv_m<COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL>(s, p, ks, pdl);
  if (pro == COSY_GEMV_IN_RMSNORM && epi == COSY_GEMV_STORE_F32)
    return gemv_m<COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32>(s, p, ks, pdl);
  if (pro == COSY_GEMV_IN_F32 && epi == COSY_GEMV_ADD_F32)
    return gemv_m<COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32>(s, p, ks, pdl);
  if (pro == COSY_GEMV_IN_F32 && epi == COSY_GEMV_STORE_F32)
    return gemv_m<COSY_GEMV_IN_F32, COSY_GEMV_STORE_F32>(s, p, ks, pdl);
  return cudaErrorNotSupported;
}
