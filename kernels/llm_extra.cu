/* llm_extra.cu - kernels of the GPU speech-token LLM: decode-step preparation, RoPE + paged KV
 * append, KV gather for chunked prefill, hi/lo bf16 splitting of fp32 activations for cuBLASLt,
 * and the fused skinny GEMM ("gemv") used by small decode batches. Interfaces in llm_extra.h.
 *
 * Math
 *   decode_prep: h[i] = speech_embedding[token_i] (fp32), slot_i = block_table[pos_i / P] * P +
 *     pos_i % P (P = page size), len_i = pos_i + 1, and the batch's block-table rows.
 *   rope_append: x = qkv (+ qkv_lo) (+ bias); NeoX RoPE (Qwen2 rotate_half) on head_dim 64, angle
 *     a = fp32(pos) * inv_freq[i] (the fp32 table of lib/ref/llm.c), accurate sincosf; q out,
 *     k/v to cache rows (all fp32).
 *   kv_gather: copy of cache rows of one sequence to contiguous [t][kv_dim].
 *   norm_split: h += d + d_lo; y = w * (h * rsqrt(mean h^2 + eps)); hi = bf16(y), lo = bf16(y-hi).
 *   split / silu_split / add: see llm_extra.h.
 *   gemv: out(m, n) = sum_k xn[m][k] W[n][k] (+ bias[n]) with the epilogues of llm_extra.h;
 *     xn = x, or for IN_RMSNORM xn[m][k] = w[k] * (x[m][k] * r_m), r_m = rsqrt(mean_k x^2 + eps),
 *     all fp32 (the same expression as lib/ref/llm.c).
 * Shapes: see llm_extra.h. Decode: M <= 8 rows, H = 896, qkv N = 1152, gate|up N = 9728,
 *   down K = 4864, head N = 6761 (full model).
 * Thread mapping
 *   decode_prep: one block of 128 threads per row (threads stride over H and the block table).
 *   rope_append: one thread per (token, head of q|k|v, i < 32) pair; grid-stride.
 *   kv_gather: one thread per (token, 4-float vector of K and V).
 *   norm_split: one block of 256 threads per row, two strided passes over the row.
 *   split / silu_split / add: one thread per element; grid-stride.
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
 * Numerics: fp32 everywhere except the bf16 weights (and the bf16 hi/lo pairs, exact to ~2^-17
 *   relative); fp32 accumulation. The gemv reads each weight exactly once per call.
 */
#include "kcommon.cuh"
#include "llm_extra.h"

#include <string.h>

using namespace cosyk;

namespace {

constexpr int HD = 64;
constexpr int HALF = 32;

/* ------------------------------------------------------------------------------------------ */
/* decode_prep                                                                                 */

__global__ void __launch_bounds__(128)
decode_prep_kernel(const int32_t *__restrict__ in, int n, const bf16 *__restrict__ emb, int n_emb,
                   int H, const int32_t *__restrict__ bt_all, int bt_all_stride, int n_slots,
                   int page_size, float *__restrict__ h, int32_t *__restrict__ pos,
                   int32_t *__restrict__ slots, int32_t *__restrict__ lens,
                   int32_t *__restrict__ bt, int bt_stride) {
  /* the first layer's q|k|v skinny GEMM (a programmatic dependent) may start streaming its
   * weights now; it reads h and the tables only after this grid has completed */
  pdl_trigger();
  const int i = blockIdx.x, tid = threadIdx.x;
  const int tok = in[i], seq = in[n + i], p = in[2 * n + i];
  const bool real = seq >= 0 && seq < n_slots && p >= 0 && p < bt_all_stride * page_size;
  float *hr = h + (size_t)i * H;
  int32_t *btr = bt + (size_t)i * bt_stride;
  if (!real) {
    for (int d = tid; d < H; d += blockDim.x) hr[d] = 0.f;
    for (int j = tid; j < bt_stride; j += blockDim.x) btr[j] = 0;
    if (tid == 0) {
      pos[i] = 0;
      slots[i] = -1;
      lens[i] = 0;
    }
    return;
  }
  const int32_t *src = bt_all + (size_t)seq * bt_all_stride;
  if (tok >= 0 && tok < n_emb) {
    const bf16 *er = emb + (size_t)tok * H;
    for (int d = tid; d < H; d += blockDim.x) hr[d] = __bfloat162float(er[d]);
  } else {
    for (int d = tid; d < H; d += blockDim.x) hr[d] = 0.f;
  }
  for (int j = tid; j < bt_stride; j += blockDim.x) btr[j] = src[j];
  if (tid == 0) {
    pos[i] = p;
    slots[i] = src[p / page_size] * page_size + p % page_size;
    lens[i] = p + 1;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* rope_append                                                                                 */

__global__ void __launch_bounds__(256)
rope_append_kernel(const float *__restrict__ qkv, const float *__restrict__ qkv_lo,
                   int qkv_stride, const float *__restrict__ bias, int n_tok, int n_qh, int n_kh,
                   const int32_t *__restrict__ pos, const int32_t *__restrict__ slots,
                   const float *__restrict__ inv_freq, float *__restrict__ q, int q_stride,
                   float *__restrict__ kc, float *__restrict__ vc) {
  const int heads = n_qh + 2 * n_kh;
  const int64_t total = (int64_t)n_tok * heads * HALF;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int i = (int)(e % HALF);
    const int head = (int)((e / HALF) % heads);
    const int t = (int)(e / ((int64_t)HALF * heads));
    const size_t o = (size_t)t * qkv_stride + (size_t)head * HD + i;
    float x1 = qkv[o], x2 = qkv[o + HALF];
    if (qkv_lo) {
      x1 += qkv_lo[o];
      x2 += qkv_lo[o + HALF];
    }
    if (bias) {
      x1 += bias[head * HD + i];
      x2 += bias[head * HD + i + HALF];
    }
    if (head < n_qh + n_kh) {
      float sn, cs;
      sincosf((float)pos[t] * inv_freq[i], &sn, &cs);
      const float r1 = x1 * cs - x2 * sn, r2 = x2 * cs + x1 * sn;
      x1 = r1;
      x2 = r2;
    }
    if (head < n_qh) {
      float *qr = q + (size_t)t * q_stride + (size_t)head * HD;
      qr[i] = x1;
      qr[i + HALF] = x2;
    } else {
      const int slot = slots[t];
      if (slot < 0) continue;
      const bool is_k = head < n_qh + n_kh;
      const int kvh = is_k ? head - n_qh : head - n_qh - n_kh;
      float *c = (is_k ? kc : vc) + ((size_t)slot * n_kh + kvh) * HD;
      c[i] = x1;
      c[i + HALF] = x2;
    }
  }
}

/* ------------------------------------------------------------------------------------------ */
/* kv_gather                                                                                   */

__global__ void __launch_bounds__(256)
kv_gather_kernel(const float *__restrict__ kc, const float *__restrict__ vc,
                 const int32_t *__restrict__ bt, int page_size, int kv_dim, int n_tok,
                 float *__restrict__ k, float *__restrict__ v) {
  const int nv = kv_dim / 4;
  const int64_t total = (int64_t)n_tok * nv;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int t = (int)(e / nv), c = (int)(e % nv) * 4;
    const size_t src = ((size_t)bt[t / page_size] * page_size + t % page_size) * kv_dim + c;
    const size_t dst = (size_t)t * kv_dim + c;
    *reinterpret_cast<float4 *>(k + dst) = *reinterpret_cast<const float4 *>(kc + src);
    *reinterpret_cast<float4 *>(v + dst) = *reinterpret_cast<const float4 *>(vc + src);
  }
}

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

__global__ void __launch_bounds__(256)
split_kernel(const float *__restrict__ x, int ldx, bf16 *__restrict__ hi, bf16 *__restrict__ lo,
             int M, int K) {
  const int64_t total = (int64_t)M * K;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t m = e / K, k = e % K;
    split1(x[m * ldx + k], hi + e, lo + e);
  }
}

__global__ void __launch_bounds__(256)
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

__global__ void __launch_bounds__(256)
add_kernel(const float *a, const float *b, float *out, int64_t n) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    out[e] = a[e] + b[e];
}

inline unsigned grid_for(int64_t total) {
  int64_t blocks = (total + 255) / 256;
  if (blocks > 4096) blocks = 4096;
  return (unsigned)(blocks < 1 ? 1 : blocks);
}

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

extern "C" cudaError_t cosy_k_llm_decode_prep(cudaStream_t s, const int32_t *in, int n,
                                              const cosy_bf16 *emb, int n_emb, int H,
                                              const int32_t *bt_all, int bt_all_stride,
                                              int n_slots, int page_size, float *h, int32_t *pos,
                                              int32_t *slots, int32_t *lens, int32_t *bt,
                                              int bt_stride) {
  if (n < 0 || H <= 0 || n_emb < 0 || bt_all_stride <= 0 || n_slots < 0 || page_size <= 0 ||
      bt_stride <= 0 || bt_stride > bt_all_stride)
    return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!in || !emb || !bt_all || !h || !pos || !slots || !lens || !bt) return cudaErrorInvalidValue;
  decode_prep_kernel<<<n, 128, 0, s>>>(in, n, (const bf16 *)emb, n_emb, H, bt_all, bt_all_stride,
                                       n_slots, page_size, h, pos, slots, lens, bt, bt_stride);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_llm_rope_append(cudaStream_t s, const float *qkv,
                                              const float *qkv_lo, int qkv_stride,
                                              const float *bias, int n_tok, int n_qh, int n_kh,
                                              const int32_t *pos, const int32_t *slots,
                                              const float *inv_freq, float *q, int q_stride,
                                              float *k_cache, float *v_cache) {
  if (n_tok < 0 || n_qh <= 0 || n_kh <= 0 || qkv_stride < (n_qh + 2 * n_kh) * HD ||
      q_stride < n_qh * HD)
    return cudaErrorInvalidValue;
  if (n_tok == 0) return cudaSuccess;
  if (!qkv || !pos || !slots || !inv_freq || !q || !k_cache || !v_cache)
    return cudaErrorInvalidValue;
  const int64_t total = (int64_t)n_tok * (n_qh + 2 * n_kh) * HALF;
  rope_append_kernel<<<grid_for(total), 256, 0, s>>>(qkv, qkv_lo, qkv_stride, bias, n_tok, n_qh,
                                                     n_kh, pos, slots, inv_freq, q, q_stride,
                                                     k_cache, v_cache);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_llm_kv_gather(cudaStream_t s, const float *k_cache,
                                            const float *v_cache, const int32_t *bt,
                                            int page_size, int kv_dim, int n_tok, float *k,
                                            float *v) {
  if (n_tok < 0 || page_size <= 0 || kv_dim <= 0 || kv_dim % 4 != 0) return cudaErrorInvalidValue;
  if (n_tok == 0) return cudaSuccess;
  if (!k_cache || !v_cache || !bt || !k || !v || !aligned16(k_cache) || !aligned16(v_cache) ||
      !aligned16(k) || !aligned16(v))
    return cudaErrorInvalidValue;
  kv_gather_kernel<<<grid_for((int64_t)n_tok * (kv_dim / 4)), 256, 0, s>>>(
      k_cache, v_cache, bt, page_size, kv_dim, n_tok, k, v);
  return cudaGetLastError();
}

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
  split_kernel<<<grid_for((int64_t)M * K), 256, 0, s>>>(x, ldx, (bf16 *)hi, (bf16 *)lo, M, K);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_llm_silu_split(cudaStream_t s, const float *gu, const float *gu_lo,
                                             int I, cosy_bf16 *hi, cosy_bf16 *lo, int M) {
  if (M < 0 || I <= 0) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  if (!gu || !gu_lo || !hi || !lo) return cudaErrorInvalidValue;
  silu_split_kernel<<<grid_for((int64_t)M * I), 256, 0, s>>>(gu, gu_lo, I, (bf16 *)hi,
                                                             (bf16 *)lo, M);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_llm_add(cudaStream_t s, const float *a, const float *b, float *out,
                                      int64_t n) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!a || !b || !out) return cudaErrorInvalidValue;
  add_kernel<<<grid_for(n), 256, 0, s>>>(a, b, out, n);
  return cudaGetLastError();
}

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
  if (a->groups < 0 || a->groups > 65535) return cudaErrorInvalidValue;
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
