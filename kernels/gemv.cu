/* gemv.cu - the fused skinny GEMMs ("gemv") of the GPU LLM's decode steps (lib/gpu/llm.c):
 * y = epilogue(x W^T) with the RMSNorm of its input and the layer's epilogue (residual add, SiLU
 * gate, RoPE + paged KV append) fused; gemv on the CUDA cores for 1..8 rows, gemv_tc on the
 * tensor cores for any number of rows. Interface in gemv.h.
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
 *
 * gemv_tc (cosy_k_llm_gemv_tc): the same prologues and epilogues on the tensor cores, for any
 *   number of rows R; the GPU LLM's decode step at every batch size with COSY_LLM_DECODE=tc.
 *   Math: out(m, n) = sum_k (hi(xn[m][k]) + lo(xn[m][k])) W[n][k], hi = bf16(xn), lo =
 *   bf16(xn - hi), so x is kept to ~2^-17 relative (the cuBLASLt hi/lo path's precision);
 *   mma.sync m16n8k16 bf16 with fp32 accumulation, the hi then the lo product of each k step.
 *   Thread mapping: a warp owns a "tile" of 16 weight rows (mma rows g and g + 8, g = lane / 4:
 *   rows n0 + g, n0 + 8 + g; for SILU_MUL gate j0 + g and up I + j0 + g; for QKV_ROPE head rows
 *   i0 + g and i0 + 32 + g) and one of KS parts of K: k-blocks of 32 kb = p, p + KS, ... KS
 *   depends on N and K only, never R: at most 16 k-blocks per warp, then doubled (while a warp
 *   keeps >= 2 k-blocks) until one 8-row block gives 2048 warps. A block has 8 warps: 8 / KS tiles
 *   of up to 8 parts; beyond 8 parts (up to 32, only where the device has thread-block clusters,
 *   else at most 8) a tile's parts span the CS = KS / 8 blocks of a cluster (1, 1, CS), whose
 *   partial sums meet through distributed shared memory. Full model with clusters: q|k|v and o
 *   8 parts, down 32 (clusters of 4), gate|up 4, head 8.
 *   In a k-block of 32, lane (g, t = lane % 4) loads 16 bytes of each of its two weight rows
 *   (k = 32 kb + 8 t .. + 7) and, per 8-row tile of x, the same 8 k of x row g (RMSNorm'd and
 *   split); mma 1 takes k 0..3 of those 8, mma 2 k 4..7 (a permutation of k applied alike to
 *   A = W and B = x, so each lane's loads are 16-byte vectors). D k-blocks of weights are in
 *   flight per warp (loaded before the PDL wait, refilled as used).
 *   Rows: a block holds 8 NT rows of x (larger R runs in several row blocks, gridDim.x, fastest,
 *   so a weight tile's row blocks share it through L2). Up to 8 rows: NT 1, TW 1 tile a warp,
 *   D 4 with three blocks an SM (80 registers), and x split in the block: its rows (RMSNorm'd
 *   inputs) first copied into shared memory, since the statistics and the fragments read them
 *   twice (not the RMSNorm weights beside them, TC_EARLY_NORMW: every block copying them cost
 *   more than it saved). More rows with the caller's
 *   workspace (a->xs): tc_split_kernel first writes every row RMSNorm'd and split, once (instead
 *   of once per block and k-block: at 64 rows that split was the kernel's cost), in fragment
 *   order (per 8-row tile and k-block, lane by lane, 16 bytes hi and 16 lo: a warp loads a
 *   tile's k-block as 1 KB in a row), and the
 *   blocks load their B fragments from there: up to 32 rows NT 2, TW 1, D 4; more NT 4, TW 2
 *   (each fragment serves both tiles), D 2. Without a workspace: NT 2, x split in the block.
 *   Where x is split in the block, by default each warp splits its own k-blocks in its mma loop
 *   (every warp group and every block again for the same x); with args xfrag (COSY_LLM_XFRAG,
 *   a measurement switch; XF) the block's threads split its rows once, for exactly the k-blocks
 *   its warps use, into dynamic shared memory (tc_xf_lkb), and the mma loop loads them: the same
 *   tc_xfrag on the same inputs, so the same bits; only where the block still fits the device's
 *   shared memory with tc_min_blocks blocks an SM (else the per-warp path).
 *   The KS partial sums of a tile meet in shared memory (the cluster's, read in block rank
 *   order) and are added in part order; the epilogue's 8-row tiles are shared out over the
 *   tile's KS warps, and lane (g, t) owns outputs (rows 2t, 2t + 1 of an 8-row tile) x (weight
 *   rows g, g + 8): a SiLU or RoPE pair is in one thread. What the epilogue reads besides the
 *   sums is copied into shared memory early by cp.async (bias and RoPE frequencies before the
 *   PDL wait; positions, cache slots and the residual's old values right after it), so that its
 *   latency hides behind the mma loop without holding registers. RMSNorm
 *   statistics: lane l adds the squares of k = 4 l + 128 i in order, then a butterfly, written
 *   with explicit roundings (tc_ss4, tc_rn) and shared by both kernels, as is the split
 *   (tc_xfrag): a row split by tc_split_kernel has the bits the block would have made.
 *   Batch invariance: nothing a row's arithmetic depends on (KS, the k order, the statistics)
 *   changes with R, NT, TW, D, the staging, the split's place or the row's position, and mma
 *   columns are independent.
 *
 * gemv_tcb (cosy_llm_gemv_args.gemvb, the measurement knob COSY_LLM_GEMVB): above 8 rows with
 *   the workspace, the operands' roles swapped. In gemv_tc_kernel the weights are mma's A
 *   operand, whose fragment interleaves rows g and g + 8 ({wa.x, wb.x, wa.y, wb.y}) while a lane
 *   loads 16 bytes of each row, so every HMMA's A registers are assembled by copies. Here the
 *   weights are the B operand (lane (g, t) holds b0 = k 2t, 2t + 1 and b1 = k 2t + 8, 2t + 9 of
 *   column n = g): with the same k permutation one 16-byte load of weight row g is mma 1's
 *   (b0, b1) = (.x, .y) and mma 2's (.z, .w), as loaded. x is the A operand, 16 rows an mma;
 *   tc_splitb_kernel (the same statistics and hi/lo values as tc_split_kernel) writes it in
 *   A-fragment order, one 16-byte load an mma. A warp keeps gemv_tc_kernel's 16-row weight tile
 *   (two 8-column halves: rows rA and rB), so the grid, the K split (from N and K only) and each
 *   output's sum (the same products in the same mma-k slots, hi then lo, k-blocks in order, K
 *   parts in order) are those of gemv_tc_kernel; whether the tensor core adds the transposed
 *   product in the same order is the hardware's (the test compares the bits). Three block shapes
 *   (tcb_shape, by matrix and rows): 16 rows (MT 1, TW 1, D 4), 32 rows with two weight tiles a
 *   warp (MT 2, TW 2, D 2) and 32 rows with one (MT 2, TW 1, D 4). sm_90 machine code of the gate|up
 *   loop: 32.5 instructions a k-block for 8 HMMA and 6 loads, no register copies (gemv_tc_kernel
 *   at 16 rows: 119); at 32 rows 68 a k-block for 32 HMMA (gemv_tc_kernel: 319).
 */
#include "gemv.h"
#include "kcommon.cuh"

#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <type_traits>

#include <cooperative_groups.h>

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
  /* 1: trigger the dependent launch (PDL) after the dot products instead of at the start, so
   * that the next kernel's blocks do not sit resident, waiting, through this whole kernel
   * (they hold the SMs other streams' kernels could use); gemv_knobs */
  int late;
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


/* QKV_ROPE output of one RoPE pair (i, i + 32) of head `head` for row gm, bias already added,
 * given the row's position, its cache slot and the pair's inverse frequency: rotated for q and k
 * heads; q to y, k and v to the cache row `slot` (none when < 0) */
__device__ __forceinline__ void rope_store(const GemvP &a, int gm, int head, int i, float x1,
                                           float x2, int pos, int slot, float invf) {
  if (head < a.n_qh + a.n_kh) {
    float sn, cs;
    sincosf((float)pos * invf, &sn, &cs);
    const float t1 = x1 * cs - x2 * sn, t2 = x2 * cs + x1 * sn;
    x1 = t1;
    x2 = t2;
  }
  if (head < a.n_qh) {
    float *q = a.y + (size_t)gm * a.ldy + (size_t)head * HD;
    q[i] = x1;
    q[i + HALF] = x2;
  } else if (slot >= 0) {
    const bool is_k = head < a.n_qh + a.n_kh;
    const int kvh = is_k ? head - a.n_qh : head - a.n_qh - a.n_kh;
    float *c = (is_k ? a.kc : a.vc) + ((size_t)slot * a.n_kh + kvh) * HD;
    c[i] = x1;
    c[i + HALF] = x2;
  }
}

/* the same, reading the position, slot and frequency where they are used (a position for q and
 * k heads, a slot for k and v heads) */
__device__ __forceinline__ void qkv_rope_out(const GemvP &a, int gm, int head, int i, float x1,
                                             float x2) {
  const bool rot = head < a.n_qh + a.n_kh, kv = head >= a.n_qh;
  rope_store(a, gm, head, i, x1, x2, rot ? a.pos[gm] : 0, kv ? a.slots[gm] : -1,
             rot ? a.inv_freq[i] : 0.f);
}

template <int M, int KS, int PRO, int EPI>
__global__ void __launch_bounds__(GV_THREADS, M == 1 ? (gv_rows(EPI) == 1 ? 5 : 4) : 2)
    gemv_kernel(GemvP a) {
  constexpr int RW = gv_rows(EPI), GV_CMAX = gv_cmax(EPI);
  constexpr int SPB = GV_WARPS / KS;
  __shared__ float red[GV_WARPS][RW * M];
  __shared__ float nred[GV_WARPS][M];

  if (!a.late) pdl_trigger();
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

  if (a.late) pdl_trigger();
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
    qkv_rope_out(a, gm, head, i, x1, x2);
  }
}

template <int M, int KS, int PRO, int EPI>
cudaError_t gemv_launch(cudaStream_t s, const GemvP &p, int pdl) {
  constexpr int SPB = GV_WARPS / KS;
  const unsigned blocks = (unsigned)((p.P + SPB - 1) / SPB);
  const dim3 grid((unsigned)p.groups, blocks);
  return launch_pdl(gemv_kernel<M, KS, PRO, EPI>, grid, GV_THREADS, 0, s, pdl, p);
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

/* ------------------------------------------------------------------------------------------ */
/* gemv_tc: the same epilogues on the tensor cores, for any number of rows                    */

/* a gemv_tc block has 8 warps; K parts beyond 8 go to the other blocks of a thread-block cluster
 * (sm_90 and newer): KS parts = CS blocks of KS / CS parts each */
constexpr int TC_WARPS = 8;
__host__ __device__ constexpr int tc_cs(int ks) { return ks > TC_WARPS ? ks / TC_WARPS : 1; }
constexpr int TC_MAX_KS = 32; /* clusters of up to 4 blocks (8 measured slower, RESULTS) */
/* K parts are doubled until the grid has this many warps (~16 per SM of an H100) */
constexpr int TC_TARGET_WARPS = 2048;

/* The block barrier of a K-split group: the block's, or the cluster's when its K parts span
 * CS > 1 blocks (their partial sums are then read from each other's shared memory). */
template <int CS>
__device__ __forceinline__ void tc_sync() {
  if constexpr (CS == 1) {
    __syncthreads();
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();
#else
    __trap(); /* the launcher never makes clusters without kdevice.h clusters */
#endif
  }
}
/* this block's rank in its cluster (0 without one) */
template <int CS>
__device__ __forceinline__ int tc_rank() {
  if constexpr (CS == 1) {
    return 0;
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return (int)cooperative_groups::this_cluster().block_rank();
#else
    __trap();
    return 0;
#endif
  }
}
/* p (in this block's shared memory) as seen in block r of the cluster */
template <int CS>
__device__ __forceinline__ const float *tc_at(float *p, int r) {
  if constexpr (CS == 1) {
    return p;
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cooperative_groups::this_cluster().map_shared_rank(p, (unsigned)r);
#else
    __trap();
    return p;
#endif
  }
}

/* D = A B + D, A 16x16 (row), B 16x8 (col), bf16 in, fp32 accumulate. */
__device__ __forceinline__ void tc_mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap(); /* every build target is sm_80 or newer (Makefile CUDA_ARCH_LIST) */
#endif
}

/* (v0, v1) -> bf16x2 hi = rn(v), lo = rn(v - hi): v = hi + lo to ~2^-17 relative */
__device__ __forceinline__ void tc_split2(float v0, float v1, uint32_t &hi, uint32_t &lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
  const float2 hf = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(__fsub_rn(v0, hf.x), __fsub_rn(v1, hf.y));
  hi = *reinterpret_cast<const uint32_t *>(&h);
  lo = *reinterpret_cast<const uint32_t *>(&l);
}

/* RMSNorm statistics of a row, written with explicit roundings so that the main kernel and
 * tc_split_kernel compute the same bits: lane l adds the squares of k = 4 l + 128 i in i order
 * (tc_ss4), then a butterfly over the lanes (warp_sum), then r = rsqrt(mean + eps) (tc_rn) */
__device__ __forceinline__ float tc_ss4(float ss, const float4 v) {
  return __fadd_rn(ss, __fmaf_rn(v.w, v.w, __fmaf_rn(v.z, v.z, __fmaf_rn(v.y, v.y,
                                                                         __fmul_rn(v.x, v.x)))));
}
__device__ __forceinline__ float tc_rn(float t2, int K, float eps) {
  return rsqrtf(__fadd_rn(__fdiv_rn(t2, (float)K), eps));
}

/* static shared memory of a gemv_tc block of rc rows (at most, whatever the epilogue):
 * red[8][rc / 8][4][32], rn_s[rc], the epilogue's operands ep_old[8][2][4][32],
 * ep_b[8][2][2][32], pos_s[rc], slot_s[rc], invf_s[32] */
constexpr size_t tc_static_smem(int rc) {
  return sizeof(float) * (8 * (rc / 8) * 4 * 32 + rc + 8 * 2 * 4 * 32 + 8 * 2 * 2 * 32 + 2 * rc +
                          32);
}

/* 4-byte asynchronous copy global -> shared (sm_80+), completed by cp_async_wait_all */
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem) {
  const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(sa), "l"(gmem));
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

struct TcP {
  GemvP g;
  int R;     /* rows */
  int KB;    /* k-blocks of 32 */
  int stage; /* rows of x staged in shared memory (0: read from global memory) */
  /* x already RMSNorm'd and split by tc_split_kernel, in fragment order (8-row tile, k-block,
   * lane: 16 bytes hi, 16 lo); NULL: the main kernel does it per k-block */
  const uint4 *xs;
  /* which epilogue operands go to shared memory early (gemv_knobs; a cleared bit reads that
   * operand from global memory where it is used): TC_EARLY_BIAS, _INVF, _POS (positions and
   * cache slots), _OLD (the residual's old values), _NORMW (the RMSNorm weights, staged beside
   * the staged rows) */
  int early;
  /* 1: the block's x fragments computed once into shared memory (tc_xf_*), instead of by each
   * warp in its mma loop; chosen by the launcher (args xfrag, where they fit) */
  int xf;
  /* the per-block shared-memory limit (args smem_max; 48 KB when 0): the launch sets a kernel's
   * dynamic-size attribute to this less its static arrays, the most any call can ask, so that
   * host threads launching one instantiation with different row counts never undo each other's
   * attribute between its setting and their launch */
  int smem_lim;
  /* 1: above 8 rows with xs, the B-operand kernel (gemv_tcb_kernel; xs then written by
   * tc_splitb_kernel in its order); the knob COSY_LLM_GEMVB through cosy_llm_gemv_args.gemvb */
  int gemvb;
  /* gemv_tcb_kernel's block shape (tcb_shape; args tcb_shape): 0 = the rule, 1-3 forced */
  int shape;
};
enum { TC_EARLY_BIAS = 1, TC_EARLY_INVF = 2, TC_EARLY_POS = 4, TC_EARLY_OLD = 8, TC_EARLY_NORMW = 16 };

/* x fragment of lane (g, t) for one k-block: x row `row` at k .. k + 7, RMSNorm'd, split into
 * hi/lo bf16x2 (h[j], l[j] = elements 2j, 2j + 1) */
template <int PRO>
__device__ __forceinline__ void tc_xfrag(const float *xr, bool ok, const float *nw, float rn,
                                         uint32_t h[4], uint32_t l[4]) {
  float xf[8];
  if (ok) {
    load8f(xr, xf);
    if (PRO == COSY_GEMV_IN_RMSNORM) {
#pragma unroll
      for (int e = 0; e < 8; ++e) xf[e] = __fmul_rn(nw[e], __fmul_rn(xf[e], rn));
    }
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) xf[e] = 0.f;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) tc_split2(xf[2 * j], xf[2 * j + 1], h[j], l[j]);
}

/* The x side of gemv_tc done once per row (for many rows, where every block would otherwise redo
 * it): warp w of block (b, c) takes row 8 b + w, computes its RMSNorm statistics as the main
 * kernel does, and writes the RMSNorm'd row split into hi and lo (tc_xfrag, 8 elements a lane at
 * a time) for the 256-k chunks c, c + gridDim.y, ... of the row. The main kernel then loads its
 * B fragments from there: the same bits. */
struct SplitP {
  GemvP g;
  int R;
  uint4 *xs; /* ceil(R / 8) * KB * 64 16-byte units (see the kernel) */
};
template <int PRO>
__global__ void __launch_bounds__(256) tc_split_kernel(SplitP sp) {
  const GemvP &a = sp.g;
  const int R = sp.R;
  pdl_trigger();
  pdl_wait();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = blockIdx.x * 8 + warp;
  if (row >= R) return;
  const int K = a.K;
  const float *xr = a.x + (size_t)row * a.ldx;
  float rn = 1.f;
  if (PRO == COSY_GEMV_IN_RMSNORM) {
    float ss = 0.f;
    for (int k = lane * 4; k < K; k += 128)
      ss = tc_ss4(ss, *reinterpret_cast<const float4 *>(xr + k));
    rn = tc_rn(warp_sum(ss), K, a.eps);
  }
  /* fragment order: 8 k of row 8 rt + g at k-block kb, part t go to 32-byte slot
   * (rt KB + kb) 32 + 4 g + t, hi then lo, so that a warp loads one k-block of an 8-row tile as
   * 1 KB in a row (lane = 4 g + t); k past K (the last k-block) is written as zeros */
  const int KB = (K + 31) / 32;
  uint4 *dst = reinterpret_cast<uint4 *>(sp.xs) + (size_t)(row >> 3) * KB * 64 + (row & 7) * 8;
  for (int k = lane * 8 + 256 * (int)blockIdx.y; k < KB * 32; k += 256 * (int)gridDim.y) {
    uint32_t h[4], l[4];
    if (k < K) {
      float nw[8];
      if (PRO == COSY_GEMV_IN_RMSNORM) load8w(a.norm_w + k, nw);
      tc_xfrag<PRO>(xr + k, true, nw, rn, h, l);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) h[j] = l[j] = 0u;
    }
    uint4 *d = dst + (size_t)(k >> 5) * 64 + ((k >> 3) & 3) * 2;
    d[0] = make_uint4(h[0], h[1], h[2], h[3]);
    d[1] = make_uint4(l[0], l[1], l[2], l[3]);
  }
}

/* blocks an SM the registers must allow: three with 4 k-blocks in flight at one row tile (80
 * registers), else two (128) */
constexpr int tc_min_blocks(int nt, int d) { return nt == 1 && d <= 4 ? 3 : 2; }

/* The x fragments of a block computed once (XF, args xfrag): the block's threads together split
 * its rows (rows < nr) for exactly the k-blocks its warps use, kb = kp + KS c over the block's
 * KS / CS K parts kp, into dynamic shared memory behind the staged rows; the mma loop then loads
 * lane (g, t)'s h[4], l[4] with two 16-byte loads. Layout, in 16-byte units: per real row (not
 * per 8-row tile) a stride of tc_xf_stride units, in it per local k-block li = c KSB + (kp %
 * KSB) 8 units: hi of t = 0..3, then lo of t = 0..3; the 4 units of padding per row put rows g
 * and g + 1 of one quarter-warp's loads on different banks. */
__host__ __device__ constexpr int tc_xf_lkb(int KB, int KS) { /* local k-blocks of a block */
  return KS / tc_cs(KS) * ((KB + KS - 1) / KS);
}
__host__ __device__ constexpr int tc_xf_stride(int lkb) { return lkb * 8 + 4; }
inline size_t tc_xf_smem(int rows, int KB, int KS) {
  return (size_t)rows * (size_t)tc_xf_stride(tc_xf_lkb(KB, KS)) * 16;
}

/* NT 8-row tiles of x per block, KS parts of K per weight tile (CS = tc_cs(KS) blocks of a
 * cluster, KS / CS parts each), TW weight tiles per warp, D k-blocks of weights in flight per
 * warp, PRE: x split beforehand (tc_split_kernel), XF: x split once per block into shared memory
 * (tc_xf_lkb; not with PRE), else by each warp for its k-blocks in the mma loop. A row's
 * arithmetic depends on none of NT, TW, D, PRE, XF or the staging; only on KS, fixed by N and K
 * (and whether the device has clusters). */
template <int NT, int KS, int TW, int D, int PRO, int EPI, bool PRE, bool XF>
__global__ void __launch_bounds__(TC_WARPS * 32, tc_min_blocks(NT, D)) gemv_tc_kernel(TcP tp) {
  const GemvP &a = tp.g;
  constexpr int NW = TC_WARPS;  /* warps of the block */
  constexpr int CS = tc_cs(KS); /* blocks of the cluster */
  constexpr int KSB = KS / CS;  /* K parts of this block */
  constexpr int WT = NW / KSB;  /* warp groups of a block (each TW tiles) */
  constexpr int RC = 8 * NT;    /* rows per block */
  static_assert(KSB * CS == KS && KSB <= NW && NW % KSB == 0, "K split");
  constexpr int NJ = (NT + KS - 1) / KS; /* 8-row tiles per warp in the epilogue */
  /* the residual's old values go through shared memory where a warp has one epilogue tile */
  constexpr bool OLD_S = EPI == COSY_GEMV_ADD_F32 && NJ == 1;
  __shared__ float red[NW][NT][4][32];
  __shared__ float rn_s[RC];
  __shared__ float ep_old[OLD_S ? NW : 1][TW][4][32]; /* lane's old y (ADD) */
  __shared__ float ep_b[NW][TW][2][32];                 /* lane's bias of rows rA, rB */
  __shared__ int pos_s[EPI == COSY_GEMV_QKV_ROPE ? RC : 1], slot_s[EPI == COSY_GEMV_QKV_ROPE ? RC : 1];
  __shared__ float invf_s[32];
  extern __shared__ __align__(16) float xs_dyn[];

  if (!a.late) pdl_trigger();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int K = a.K, KB = tp.KB, early = tp.early;
  const int crank = tc_rank<CS>();
  const int kp = crank * KSB + warp % KSB; /* this warp's K part, 0 .. KS - 1 */
  const int tile0 = (blockIdx.y * WT + warp / KSB) * TW;
  constexpr bool pre = PRE; /* x split by tc_split_kernel (tp.xs) */
  static_assert(!(PRE && XF), "x split either beforehand or in the block");
  /* the two weight rows of this lane in each of its tiles: mma rows g and g + 8 */
  int rA[TW], rB[TW];
  bool okA[TW], okB[TW];
  const bf16 *wA[TW], *wB[TW];
#pragma unroll
  for (int u = 0; u < TW; ++u) {
    const int tile = tile0 + u;
    if (EPI == COSY_GEMV_SILU_MUL) {
      rA[u] = tile * 8 + g;
      rB[u] = rA[u] + (a.N >> 1);
    } else if (EPI == COSY_GEMV_QKV_ROPE) {
      rA[u] = (tile >> 2) * HD + (tile & 3) * 8 + g;
      rB[u] = rA[u] + HALF;
    } else {
      rA[u] = tile * 16 + g;
      rB[u] = rA[u] + 8;
    }
    okA[u] = tile < a.P && rA[u] < a.N;
    okB[u] = tile < a.P && rB[u] < a.N;
    wA[u] = a.w + (size_t)(okA[u] ? rA[u] : 0) * K + 8 * t;
    wB[u] = a.w + (size_t)(okB[u] ? rB[u] : 0) * K + 8 * t;
  }
  /* this warp's k-blocks: kb = kp + KS * c, c < nc */
  const int nc = kp < KB ? (KB - kp + KS - 1) / KS : 0;

  /* 1. the first D k-blocks of weights, before waiting for the producer */
  uint4 wa[D][TW], wb[D][TW];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    const int kb = kp + KS * d;
    const bool in = d < nc && kb * 32 + 8 * t < K;
#pragma unroll
    for (int u = 0; u < TW; ++u) {
      wa[d][u] = in && okA[u] ? __ldcs(reinterpret_cast<const uint4 *>(wA[u] + (size_t)kb * 32))
                              : make_uint4(0u, 0u, 0u, 0u);
      wb[d][u] = in && okB[u] ? __ldcs(reinterpret_cast<const uint4 *>(wB[u] + (size_t)kb * 32))
                              : make_uint4(0u, 0u, 0u, 0u);
    }
  }
  /* ... and the other constants, into shared memory so that they hold no registers through the
   * mma loop: the epilogue's bias and RoPE frequencies (cp.async, waited for before the partial
   * sums meet), the RMSNorm weights behind the staged rows */
  if (early & TC_EARLY_BIAS) {
#pragma unroll
    for (int u = 0; u < TW; ++u) {
      if (a.bias && okA[u]) cp_async4(&ep_b[warp][u][0][lane], a.bias + rA[u]);
      if (a.bias && okB[u]) cp_async4(&ep_b[warp][u][1][lane], a.bias + rB[u]);
    }
  }
  if (EPI == COSY_GEMV_QKV_ROPE && (early & TC_EARLY_INVF) && tid < 32)
    cp_async4(&invf_s[tid], a.inv_freq + tid);
  const bool nw_s =
      PRO == COSY_GEMV_IN_RMSNORM && !pre && !XF && tp.stage > 0 && (early & TC_EARLY_NORMW);
  float *const nws = xs_dyn + (size_t)tp.stage * K;
  if (nw_s)
    for (int i = tid; i < (K >> 2); i += NW * 32)
      reinterpret_cast<float4 *>(nws)[i] = __ldg(reinterpret_cast<const float4 *>(a.norm_w) + i);

  /* XF: the RMSNorm weights of this thread's first fragment unit (unit tid: row 0, or for
   * tid >= 4 lkb a later row at the same k), a constant, read before the producer is waited for
   * (at up to 8 rows of K = 896 a thread's only unit); sm_90+ (PDL) only: on sm_80 it made the
   * RMSNorm kernels spill 28-36 bytes a thread (ptxas) for no overlap with a producer */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool XNW = XF && PRO == COSY_GEMV_IN_RMSNORM;
#else
  constexpr bool XNW = false;
#endif
  float xnw[8];
  if (XNW) {
    const int lkb = tc_xf_lkb(KB, KS), pu = tid % (lkb * 4), li = pu >> 2;
    const int kb = crank * KSB + li % KSB + KS * (li / KSB), k = kb * 32 + 8 * (pu & 3);
    if (tid < min(RC, tp.R - (int)blockIdx.x * RC) * lkb * 4 && kb < KB && k < K) {
      load8w(a.norm_w + k, xnw);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) xnw[e] = 0.f;
    }
  }
  /* 2. this block's rows: already split (pre), staged in shared memory (tp.stage rows) or read
   * in place */
  pdl_wait();
  const int r0 = blockIdx.x * RC;
  const int nr = min(RC, tp.R - r0);
  const float *xb = a.x + (size_t)r0 * a.ldx;
  int ldxs = a.ldx;
  if (!pre && tp.stage) {
    const int k4 = K >> 2;
    for (int i = tid; i < nr * k4; i += NW * 32) {
      const int row = i / k4, c4 = i - row * k4;
      reinterpret_cast<float4 *>(xs_dyn)[i] =
          *reinterpret_cast<const float4 *>(xb + (size_t)row * a.ldx + 4 * c4);
    }
    xb = xs_dyn;
    ldxs = K;
    __syncthreads();
  }
  /* what the epilogue reads of the producers' data, copied now (cp.async) so that its latency
   * hides behind the mma loop: the rows' positions and cache slots (QKV_ROPE); with one
   * epilogue tile a warp (nt = kp; lane (g, t) owns rows 2t, 2t + 1 of it), the residual's old
   * values (ADD) */
  if (EPI == COSY_GEMV_QKV_ROPE && (early & TC_EARLY_POS) && tid < nr) {
    cp_async4(&pos_s[tid], a.pos + r0 + tid);
    cp_async4(&slot_s[tid], a.slots + r0 + tid);
  }
  if (OLD_S && (early & TC_EARLY_OLD)) {
#pragma unroll
    for (int e2 = 0; e2 < 2; ++e2) {
      const int lr = kp * 8 + 2 * t + e2;
      if (kp < NT && lr < nr) {
#pragma unroll
        for (int u = 0; u < TW; ++u) {
          if (okA[u]) cp_async4(&ep_old[warp][u][e2][lane], a.y + (size_t)(r0 + lr) * a.ldy + rA[u]);
          if (okB[u])
            cp_async4(&ep_old[warp][u][2 + e2][lane], a.y + (size_t)(r0 + lr) * a.ldy + rB[u]);
        }
      }
    }
  }
  /* RMSNorm statistics: warp w sums rows w, w + NW, ... (tc_ss4 / tc_rn: the same bits whichever
   * block or warp sums a row); the loads of all of a warp's rows are in flight together */
  if (PRO == COSY_GEMV_IN_RMSNORM && !pre) {
    constexpr int RPW = (RC + NW - 1) / NW; /* rows per warp */
    float ss[RPW];
#pragma unroll
    for (int j = 0; j < RPW; ++j) ss[j] = 0.f;
    for (int k = lane * 4; k < K; k += 128) {
#pragma unroll
      for (int j = 0; j < RPW; ++j) {
        const int rr = warp + j * NW;
        if (rr < nr)
          ss[j] = tc_ss4(ss[j], *reinterpret_cast<const float4 *>(xb + (size_t)rr * ldxs + k));
      }
    }
#pragma unroll
    for (int j = 0; j < RPW; ++j) {
      const float t2 = warp_sum(ss[j]);
      const int rr = warp + j * NW;
      if (lane == 0 && rr < RC) rn_s[rr] = tc_rn(t2, K, a.eps);
    }
    __syncthreads();
  }
  /* XF: the block's fragments, once (tc_xf_lkb): unit (row, li, t) is what lane (row % 8, t) of
   * the warp of K part kp = CS-rank KSB + li % KSB computes for its k-block c = li / KSB, with
   * the same tc_xfrag and inputs (the same bits); k-blocks past KB are never read */
  const int xrs = tc_xf_stride(tc_xf_lkb(KB, KS)); /* row stride in 16-byte units */
  uint4 *const xfs = reinterpret_cast<uint4 *>(xs_dyn + (size_t)tp.stage * K);
  if (XF) {
    const int lkb = tc_xf_lkb(KB, KS), nu = nr * lkb * 4;
    for (int i = tid; i < nu; i += NW * 32) {
      const int tq = i & 3, q = i >> 2;
      const int row = q / lkb, li = q - row * lkb;
      const int kb = crank * KSB + li % KSB + KS * (li / KSB);
      if (kb >= KB) continue;
      const int k = kb * 32 + 8 * tq;
      const bool kin = k < K;
      float nw[8];
      if (PRO == COSY_GEMV_IN_RMSNORM) {
        if (XNW && i == tid) {
#pragma unroll
          for (int e = 0; e < 8; ++e) nw[e] = xnw[e];
        } else if (!kin) {
#pragma unroll
          for (int e = 0; e < 8; ++e) nw[e] = 0.f;
        } else {
          load8w(a.norm_w + k, nw);
        }
      }
      uint32_t h[4], l[4];
      tc_xfrag<PRO>(xb + (size_t)row * ldxs + k, kin, nw,
                    PRO == COSY_GEMV_IN_RMSNORM ? rn_s[row] : 1.f, h, l);
      uint4 *d = xfs + (size_t)row * xrs + li * 8 + tq;
      d[0] = make_uint4(h[0], h[1], h[2], h[3]);
      d[4] = make_uint4(l[0], l[1], l[2], l[3]);
    }
    __syncthreads();
  }

  /* 3. mma over this warp's k-blocks: lane (g, t) holds k = 32 kb + 8 t .. + 7 of its weight
   * rows and of x row g of each 8-row tile; mma 1 takes its k 0..3, mma 2 its k 4..7 (the same
   * permutation of k in A and B), each with x's hi then lo part */
  float acc[TW][NT][4];
#pragma unroll
  for (int u = 0; u < TW; ++u)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[u][nt][e] = 0.f;
  for (int c0 = 0; c0 < nc; c0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int c = c0 + d;
      if (c < nc) {
        const int k = (kp + KS * c) * 32 + 8 * t;
        const bool kin = k < K;
        float nw[8];
        if (PRO == COSY_GEMV_IN_RMSNORM && !pre && !XF) {
          if (!kin) {
#pragma unroll
            for (int e = 0; e < 8; ++e) nw[e] = 0.f;
          } else if (nw_s) {
            const float4 n0 = *reinterpret_cast<const float4 *>(nws + k);
            const float4 n1 = *reinterpret_cast<const float4 *>(nws + k + 4);
            nw[0] = n0.x, nw[1] = n0.y, nw[2] = n0.z, nw[3] = n0.w;
            nw[4] = n1.x, nw[5] = n1.y, nw[6] = n1.z, nw[7] = n1.w;
          } else {
            load8w(a.norm_w + k, nw);
          }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int row = nt * 8 + g;
          uint32_t h[4], l[4];
          if (pre) {
            uint4 hv = make_uint4(0u, 0u, 0u, 0u), lv = hv;
            if (row < nr) { /* fragment order (tc_split_kernel); plain loads: see load8f */
              const uint4 *q = tp.xs + ((size_t)((r0 >> 3) + nt) * KB + (kp + KS * c)) * 64 +
                               lane * 2;
              hv = q[0];
              lv = q[1];
            }
            h[0] = hv.x, h[1] = hv.y, h[2] = hv.z, h[3] = hv.w;
            l[0] = lv.x, l[1] = lv.y, l[2] = lv.z, l[3] = lv.w;
          } else if (XF) {
            uint4 hv = make_uint4(0u, 0u, 0u, 0u), lv = hv;
            if (row < nr) { /* the block's fragments (tc_xf_lkb's layout) */
              const uint4 *q = xfs + (size_t)row * xrs + (c * KSB + warp % KSB) * 8 + t;
              hv = q[0];
              lv = q[4];
            }
            h[0] = hv.x, h[1] = hv.y, h[2] = hv.z, h[3] = hv.w;
            l[0] = lv.x, l[1] = lv.y, l[2] = lv.z, l[3] = lv.w;
          } else {
            tc_xfrag<PRO>(xb + (size_t)row * ldxs + k, kin && row < nr, nw,
                          PRO == COSY_GEMV_IN_RMSNORM ? rn_s[row] : 1.f, h, l);
          }
#pragma unroll
          for (int u = 0; u < TW; ++u) {
            tc_mma(acc[u][nt], wa[d][u].x, wb[d][u].x, wa[d][u].y, wb[d][u].y, h[0], h[1]);
            tc_mma(acc[u][nt], wa[d][u].z, wb[d][u].z, wa[d][u].w, wb[d][u].w, h[2], h[3]);
            tc_mma(acc[u][nt], wa[d][u].x, wb[d][u].x, wa[d][u].y, wb[d][u].y, l[0], l[1]);
            tc_mma(acc[u][nt], wa[d][u].z, wb[d][u].z, wa[d][u].w, wb[d][u].w, l[2], l[3]);
          }
        }
        /* refill this slot with k-block c + D */
        const int kbn = kp + KS * (c + D);
        const bool in = c + D < nc && kbn * 32 + 8 * t < K;
#pragma unroll
        for (int u = 0; u < TW; ++u) {
          wa[d][u] = in && okA[u]
                         ? __ldcs(reinterpret_cast<const uint4 *>(wA[u] + (size_t)kbn * 32))
                         : make_uint4(0u, 0u, 0u, 0u);
          wb[d][u] = in && okB[u]
                         ? __ldcs(reinterpret_cast<const uint4 *>(wB[u] + (size_t)kbn * 32))
                         : make_uint4(0u, 0u, 0u, 0u);
        }
      }
    }
  }

  /* 4. per tile of the warp group: the KS warps' partial sums (in this block and, with a
   * cluster, in the same warps of its other blocks) meet in shared memory and are added in
   * k-part order; 5. the epilogue, its 8-row tiles shared out over the KS parts' warps (part kp
   * takes tiles nt = kp, kp + KS, ...): lane (g, t) owns c0, c1 = (weight row rA, rows 2t,
   * 2t + 1 of the 8-row tile), c2, c3 = (row rB, same) */
  if (a.late) pdl_trigger();
  const int wbase = warp - warp % KSB; /* the group's first warp in each block */
  cp_async_wait_all(); /* this thread's copies; the barrier below shows them to the block */
#pragma unroll
  for (int u = 0; u < TW; ++u) {
    if (u) tc_sync<CS>(); /* red is reused: every block of the cluster is done reading it */
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) red[warp][nt][e][lane] = acc[u][nt][e];
    tc_sync<CS>();
    const int tile = tile0 + u;
    if (tile >= a.P) continue;
    const bool eb = early & TC_EARLY_BIAS;
    const float bA = a.bias && okA[u] ? (eb ? ep_b[warp][u][0][lane] : a.bias[rA[u]]) : 0.f;
    const float bB = a.bias && okB[u] ? (eb ? ep_b[warp][u][1][lane] : a.bias[rB[u]]) : 0.f;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int nt = kp + j * KS;
      if (nt >= NT) continue;
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float sacc = 0.f;
#pragma unroll
        for (int r = 0; r < CS; ++r) {
          const float *rb = tc_at<CS>(&red[0][0][0][0], r);
#pragma unroll
          for (int q = 0; q < KSB; ++q) sacc += rb[(((wbase + q) * NT + nt) * 4 + e) * 32 + lane];
        }
        v[e] = sacc;
      }
#pragma unroll
      for (int e2 = 0; e2 < 2; ++e2) {
        const int lr = nt * 8 + 2 * t + e2;
        if (lr >= nr) continue;
        const int gm = r0 + lr;
        if (EPI == COSY_GEMV_STORE_F32 || EPI == COSY_GEMV_ADD_F32) {
          float oA = 0.f, oB = 0.f;
          if (EPI == COSY_GEMV_ADD_F32) {
            if (OLD_S && (early & TC_EARLY_OLD)) {
              oA = ep_old[OLD_S ? warp : 0][u][e2][lane];
              oB = ep_old[OLD_S ? warp : 0][u][2 + e2][lane];
            } else {
              if (okA[u]) oA = a.y[(size_t)gm * a.ldy + rA[u]];
              if (okB[u]) oB = a.y[(size_t)gm * a.ldy + rB[u]];
            }
          }
          if (okA[u]) a.y[(size_t)gm * a.ldy + rA[u]] = oA + (v[e2] + bA);
          if (okB[u]) a.y[(size_t)gm * a.ldy + rB[u]] = oB + (v[2 + e2] + bB);
        } else if (EPI == COSY_GEMV_SILU_MUL) {
          const float gt = v[e2] + bA;
          const float uu = v[2 + e2] + bB;
          a.y[(size_t)gm * a.ldy + rA[u]] = gt / (1.f + expf(-gt)) * uu;
        } else { /* QKV_ROPE */
          const int i = (tile & 3) * 8 + g;
          const int head = tile >> 2;
          const bool rot = head < a.n_qh + a.n_kh, kv = head >= a.n_qh;
          const bool ep = early & TC_EARLY_POS;
          rope_store(a, gm, head, i, v[e2] + bA, v[2 + e2] + bB,
                     ep ? pos_s[lr] : rot ? a.pos[gm] : 0, ep ? slot_s[lr] : kv ? a.slots[gm] : -1,
                     (early & TC_EARLY_INVF) ? invf_s[i] : rot ? a.inv_freq[i] : 0.f);
        }
      }
    }
  }
  if (CS > 1) tc_sync<CS>(); /* no block leaves while another still reads its shared memory */
}


/* ------------------------------------------------------------------------------------------ */
/* gemv_tcb: the weights as mma's B operand (above 8 rows, x split beforehand; COSY_LLM_GEMVB) */

/* The split for gemv_tcb_kernel: the RMSNorm statistics and hi/lo values of tc_split_kernel
 * (tc_ss4, tc_rn, tc_xfrag: the same bits), laid out as mma's A fragments of 16-row tiles. Unit
 * T KB + kb (128 16-byte words) holds k-block kb of rows 16 T .. 16 T + 15; its word q 32 + lane
 * (lane = 4 g + t: k 32 kb + 8 t .. + 7 of rows 16 T + g and 16 T + 8 + g) is mma 1's (q 0, 2)
 * or mma 2's (q 1, 3) A fragment of the hi (q 0, 1) or lo (q 2, 3) part: {row g, row g + 8} x
 * {k 0-1, k 2-3} of mma 1's four k (k 4-7 for mma 2), i.e. a0..a3 of m16n8k16 (a0 = row g,
 * k 2t..2t+1; a1 = row g + 8; a2 = row g, k 2t+8..; a3 = row g + 8), so that a warp loads a
 * tile's k-block as four 512-byte words per lane-row. Warp w of block (T, c) takes rows 16 T + w
 * and 16 T + 8 + w (the 256-k chunks c, c + gridDim.y, ...); rows at or past R are zeros. */
template <int PRO>
__global__ void __launch_bounds__(256) tc_splitb_kernel(SplitP sp) {
  const GemvP &a = sp.g;
  const int R = sp.R;
  pdl_trigger();
  pdl_wait();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int T = blockIdx.x, K = a.K, KB = (K + 31) / 32;
  const int row0 = T * 16 + warp, row1 = row0 + 8;
  const bool ok0 = row0 < R, ok1 = row1 < R;
  const float *xr0 = a.x + (size_t)(ok0 ? row0 : 0) * a.ldx;
  const float *xr1 = a.x + (size_t)(ok1 ? row1 : 0) * a.ldx;
  float rn0 = 1.f, rn1 = 1.f;
  if (PRO == COSY_GEMV_IN_RMSNORM) {
    float s0 = 0.f, s1 = 0.f;
    for (int k = lane * 4; k < K; k += 128) {
      if (ok0) s0 = tc_ss4(s0, *reinterpret_cast<const float4 *>(xr0 + k));
      if (ok1) s1 = tc_ss4(s1, *reinterpret_cast<const float4 *>(xr1 + k));
    }
    rn0 = tc_rn(warp_sum(s0), K, a.eps);
    rn1 = tc_rn(warp_sum(s1), K, a.eps);
  }
  uint4 *dst = sp.xs + (size_t)T * KB * 128 + 4 * warp;
  for (int k = lane * 8 + 256 * (int)blockIdx.y; k < KB * 32; k += 256 * (int)gridDim.y) {
    uint32_t h0[4], l0[4], h1[4], l1[4];
    float nw[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    const bool kin = k < K;
    if (PRO == COSY_GEMV_IN_RMSNORM && kin) load8w(a.norm_w + k, nw);
    tc_xfrag<PRO>(xr0 + k, kin && ok0, nw, rn0, h0, l0);
    tc_xfrag<PRO>(xr1 + k, kin && ok1, nw, rn1, h1, l1);
    uint4 *d = dst + (size_t)(k >> 5) * 128 + ((k >> 3) & 3);
    d[0] = make_uint4(h0[0], h1[0], h0[1], h1[1]);
    d[32] = make_uint4(h0[2], h1[2], h0[3], h1[3]);
    d[64] = make_uint4(l0[0], l1[0], l0[1], l1[1]);
    d[96] = make_uint4(l0[2], l1[2], l0[3], l1[3]);
  }
}

/* weight row j (0..7) of half h of a 16-row weight tile: the rows gemv_tc_kernel gives lane g = j
 * as rA (h 0) and rB (h 1): rows tile 16 + j (+ 8), gate|up tile 8 + j (+ N / 2), RoPE head rows
 * i and i + 32 */
template <int EPI>
__device__ __forceinline__ int tcb_row(int tile, int j, int h, int N) {
  if (EPI == COSY_GEMV_SILU_MUL) return tile * 8 + j + (h ? (N >> 1) : 0);
  if (EPI == COSY_GEMV_QKV_ROPE) return (tile >> 2) * HD + (tile & 3) * 8 + j + (h ? HALF : 0);
  return tile * 16 + j + 8 * h;
}

/* gemv_tc_kernel with the operands' roles swapped: the weights are mma's B operand (n = 8 weight
 * rows an mma, lane (g, t) loads 16 bytes of weight row g of each half of its tile: its .x, .y are
 * mma 1's b0, b1 and .z, .w mma 2's, as loaded) and x its A operand (16 rows of x an mma, from
 * tc_splitb_kernel's layout: one 16-byte load is one mma's a0..a3). MT 16-row tiles of x per
 * block (rows 16 MT), KS, TW, D as in gemv_tc_kernel, with the same K split, k permutation and
 * hi-then-lo order per k-block, so that each output's sum has the same terms in the same mma
 * sequence. The accumulators hold (x row, weight row) pairs: lane (g, t) c0, c1 = (row g, weight
 * rows 2t, 2t + 1 of a half), c2, c3 = (row g + 8, the same); per half h (0: rows rA, 1: rB of
 * gemv_tc_kernel) one accumulator, so a SiLU or RoPE pair is c_e of both halves in one lane. The
 * epilogue's units (tile mt, element e), 4 MT of them, are shared out over the K parts' warps. */
template <int MT, int KS, int TW, int D, int PRO, int EPI>
__global__ void __launch_bounds__(TC_WARPS * 32, 2) gemv_tcb_kernel(TcP tp) {
  const GemvP &a = tp.g;
  constexpr int NW = TC_WARPS, CS = tc_cs(KS), KSB = KS / CS, WT = NW / KSB, RC = 16 * MT;
  static_assert(KSB * CS == KS && KSB <= NW && NW % KSB == 0, "K split");
  constexpr int NU = 4 * MT;             /* epilogue units (16-row tile mt, element e) */
  constexpr int NJ = (NU + KS - 1) / KS; /* units per warp */
  constexpr bool OLD_S = EPI == COSY_GEMV_ADD_F32 && NJ == 1;
  __shared__ float red[NW][MT][2][4][32];
  __shared__ float ep_old[OLD_S ? NW : 1][TW][2][32]; /* the lane's unit's old y (ADD) */
  __shared__ float ep_b[NW][TW][2][8];                 /* bias of the tile's weight rows */
  __shared__ int pos_s[EPI == COSY_GEMV_QKV_ROPE ? RC : 1], slot_s[EPI == COSY_GEMV_QKV_ROPE ? RC : 1];
  __shared__ float invf_s[32];

  /* what the loop needs, in registers once */
  const int late = a.late, early = tp.early;
  if (!late) pdl_trigger();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int K = a.K, KB = tp.KB, N = a.N, P = a.P;
  const int kp = tc_rank<CS>() * KSB + warp % KSB; /* this warp's K part */
  const int tile0 = (blockIdx.y * WT + warp / KSB) * TW;
  /* this lane's weight rows (column g of each half), at its first k-block; rows past N read
   * row 0 (their columns are never stored) */
  const bf16 *wp[TW][2];
#pragma unroll
  for (int u = 0; u < TW; ++u)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = tcb_row<EPI>(tile0 + u, g, h, N);
      const bool ok = tile0 + u < P && r < N;
      wp[u][h] = a.w + (size_t)(ok ? r : 0) * K + (size_t)kp * 32 + 8 * t;
    }
  /* this warp's k-blocks kb = kp + KS c, c < nc; those where the lane's 8 k start below K:
   * c < ncl (the last k-block may be partial) */
  const int nc = kp < KB ? (KB - kp + KS - 1) / KS : 0;
  const int KBt = (K - 8 * t + 31) / 32;
  const int ncl = kp < KBt ? (KBt - kp + KS - 1) / KS : 0;
  constexpr size_t WSTEP = (size_t)KS * 32; /* elements from one of the warp's k-blocks to the next */

  /* 1. the first D k-blocks of weights, before waiting for the producer */
  uint4 w[D][TW][2];
#pragma unroll
  for (int d = 0; d < D; ++d)
#pragma unroll
    for (int u = 0; u < TW; ++u)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        w[d][u][h] = d < ncl ? __ldcs(reinterpret_cast<const uint4 *>(wp[u][h] + WSTEP * d))
                             : make_uint4(0u, 0u, 0u, 0u);
  if ((early & TC_EARLY_BIAS) && a.bias && t == 0) {
#pragma unroll
    for (int u = 0; u < TW; ++u)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = tcb_row<EPI>(tile0 + u, g, h, N);
        if (tile0 + u < P && r < N) cp_async4(&ep_b[warp][u][h][g], a.bias + r);
      }
  }
  if (EPI == COSY_GEMV_QKV_ROPE && (early & TC_EARLY_INVF) && tid < 32)
    cp_async4(&invf_s[tid], a.inv_freq + tid);

  /* 2. this block's rows */
  pdl_wait();
  const int r0 = blockIdx.x * RC;
  const int nr = min(RC, tp.R - r0);
  if (EPI == COSY_GEMV_QKV_ROPE && (early & TC_EARLY_POS) && tid < nr) {
    cp_async4(&pos_s[tid], a.pos + r0 + tid);
    cp_async4(&slot_s[tid], a.slots + r0 + tid);
  }
  if (OLD_S && (early & TC_EARLY_OLD) && kp < NU) { /* the warp's one unit: kp */
    const int lr = (kp >> 2) * 16 + g + 8 * ((kp & 3) >> 1), col = 2 * t + (kp & 1);
    if (lr < nr) {
#pragma unroll
      for (int u = 0; u < TW; ++u)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = tcb_row<EPI>(tile0 + u, col, h, N);
          if (tile0 + u < P && r < N)
            cp_async4(&ep_old[warp][u][h][lane], a.y + (size_t)(r0 + lr) * a.ldy + r);
        }
    }
  }

  /* 3. mma over this warp's k-blocks: per k-block and 16-row tile, the A fragments of x (hi
   * mma 1, hi mma 2, lo mma 1, lo mma 2), each against the B fragments (.x, .y) or (.z, .w) of
   * both halves of each weight tile */
  const uint4 *xq = tp.xs + ((size_t)(r0 >> 4) * KB + kp) * 128 + lane;
  const size_t xt = (size_t)KB * 128; /* the block's next 16-row tile */
  const bool m1 = MT > 1 && nr > 16;  /* the second tile has rows */
  float acc[TW][MT][2][4];
#pragma unroll
  for (int u = 0; u < TW; ++u)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[u][mt][h][e] = 0.f;
  size_t wo = WSTEP * D; /* the refill's offset */
  for (int c0 = 0; c0 < nc; c0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int c = c0 + d;
      if (c < nc) {
        uint4 xa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          if (mt == 0 || m1) { /* plain loads: see load8f */
#pragma unroll
            for (int q = 0; q < 4; ++q) xa[mt][q] = xq[mt * xt + 32 * q];
          }
        xq += KS * 128;
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
            if (mt == 0 || m1) {
#pragma unroll
              for (int u = 0; u < TW; ++u)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                  const uint4 &b = w[d][u][h];
                  tc_mma(acc[u][mt][h], xa[mt][q].x, xa[mt][q].y, xa[mt][q].z, xa[mt][q].w,
                         (q & 1) ? b.z : b.x, (q & 1) ? b.w : b.y);
                }
            }
        /* refill this slot with k-block c + D. Where the lane's 8 k of it are past K (only in
         * a partial last k-block) the slot keeps the finite weights it held: x is zero there
         * (tc_splitb_kernel), so the products are zeros either way, without 8 register clears
         * a k-block */
        if (c + D < ncl) {
#pragma unroll
          for (int u = 0; u < TW; ++u)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              w[d][u][h] = __ldcs(reinterpret_cast<const uint4 *>(wp[u][h] + wo));
        }
        wo += WSTEP;
      }
    }
  }

  /* 4. per weight tile of the warp group: the KS warps' partial sums meet in shared memory (the
   * cluster's, in block rank order) and are added in k-part order; 5. the epilogue, its units
   * (mt, e) shared out over the parts' warps (part kp takes units kp, kp + KS, ...): lane (g, t)
   * owns x row 16 mt + g (+ 8 for e >= 2) and weight column 2 t + (e & 1) of both halves */
  if (late) pdl_trigger();
  const int wbase = warp - warp % KSB;
  cp_async_wait_all();
#pragma unroll
  for (int u = 0; u < TW; ++u) {
    if (u) tc_sync<CS>(); /* red is reused: every block of the cluster is done reading it */
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 4; ++e) red[warp][mt][h][e][lane] = acc[u][mt][h][e];
    tc_sync<CS>();
    const int tile = tile0 + u;
    if (tile >= P) continue;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int unit = kp + j * KS;
      if (unit >= NU) continue;
      const int mt = unit >> 2, e = unit & 3;
      const int lr = mt * 16 + g + 8 * (e >> 1);
      if (lr >= nr) continue;
      float v[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sacc = 0.f;
#pragma unroll
        for (int r = 0; r < CS; ++r) {
          const float *rb = tc_at<CS>(&red[0][0][0][0][0], r);
#pragma unroll
          for (int q = 0; q < KSB; ++q)
            sacc += rb[((((wbase + q) * MT + mt) * 2 + h) * 4 + e) * 32 + lane];
        }
        v[h] = sacc;
      }
      const int col = 2 * t + (e & 1);
      const int rA = tcb_row<EPI>(tile, col, 0, N), rB = tcb_row<EPI>(tile, col, 1, N);
      const bool okA = rA < N, okB = rB < N;
      const bool eb = early & TC_EARLY_BIAS;
      const float bA = a.bias && okA ? (eb ? ep_b[warp][u][0][col] : a.bias[rA]) : 0.f;
      const float bB = a.bias && okB ? (eb ? ep_b[warp][u][1][col] : a.bias[rB]) : 0.f;
      const int gm = r0 + lr;
      if (EPI == COSY_GEMV_STORE_F32 || EPI == COSY_GEMV_ADD_F32) {
        float oA = 0.f, oB = 0.f;
        if (EPI == COSY_GEMV_ADD_F32) {
          if (OLD_S && (early & TC_EARLY_OLD)) {
            oA = ep_old[OLD_S ? warp : 0][u][0][lane];
            oB = ep_old[OLD_S ? warp : 0][u][1][lane];
          } else {
            if (okA) oA = a.y[(size_t)gm * a.ldy + rA];
            if (okB) oB = a.y[(size_t)gm * a.ldy + rB];
          }
        }
        if (okA) a.y[(size_t)gm * a.ldy + rA] = oA + (v[0] + bA);
        if (okB) a.y[(size_t)gm * a.ldy + rB] = oB + (v[1] + bB);
      } else if (EPI == COSY_GEMV_SILU_MUL) {
        const float gt = v[0] + bA, uu = v[1] + bB;
        a.y[(size_t)gm * a.ldy + rA] = gt / (1.f + expf(-gt)) * uu;
      } else { /* QKV_ROPE */
        const int i = (tile & 3) * 8 + col, head = tile >> 2;
        const bool rot = head < a.n_qh + a.n_kh, kv = head >= a.n_qh;
        const bool ep = early & TC_EARLY_POS;
        rope_store(a, gm, head, i, v[0] + bA, v[1] + bB,
                   ep ? pos_s[lr] : rot ? a.pos[gm] : 0, ep ? slot_s[lr] : kv ? a.slots[gm] : -1,
                   (early & TC_EARLY_INVF) ? invf_s[i] : rot ? a.inv_freq[i] : 0.f);
      }
    }
  }
  if (CS > 1) tc_sync<CS>(); /* no block leaves while another still reads its shared memory */
}

template <int MT, int KS, int TW, int D, int PRO, int EPI>
cudaError_t gemv_tcb_launch(cudaStream_t s, const TcP &p, int pdl) {
  constexpr int CS = tc_cs(KS), WT = TC_WARPS / (KS / CS), RC = 16 * MT;
  const dim3 grid((unsigned)((p.R + RC - 1) / RC),
                  (unsigned)((p.g.P + WT * TW - 1) / (WT * TW)), (unsigned)CS);
  auto kern = gemv_tcb_kernel<MT, KS, TW, D, PRO, EPI>;
  if (CS == 1) return launch_pdl(kern, grid, TC_WARPS * 32, 0, s, pdl, p);
  return launch_ex(s, grid, dim3(TC_WARPS * 32), 0, dim3(1, 1, (unsigned)CS), pdl, kern, p);
}

/* dynamic shared memory of a gemv_tc block: the staged rows of x, then (RMSNorm'd inputs split
 * in the block) the RMSNorm weights */
inline size_t tc_dyn_smem(int stage, int K, bool rms) {
  return stage > 0 ? ((size_t)stage + (rms ? 1 : 0)) * (size_t)K * sizeof(float) : 0;
}
/* ... with the block's x fragments (XF): the staged rows, then the fragments of `rows` rows (no
 * RMSNorm weights: each block reads them once) */
inline size_t tc_dyn_smem_xf(int stage, int K, int rows, int KB, int KS) {
  return (size_t)stage * (size_t)K * sizeof(float) + tc_xf_smem(rows, KB, KS);
}

template <int NT, int KS, int TW, int D, int PRO, int EPI, bool PRE, bool XF>
cudaError_t gemv_tc_launch(cudaStream_t s, const TcP &p, int pdl) {
  constexpr int CS = tc_cs(KS), WT = TC_WARPS / (KS / CS), RC = 8 * NT;
  const dim3 grid((unsigned)((p.R + RC - 1) / RC),
                  (unsigned)((p.g.P + WT * TW - 1) / (WT * TW)), (unsigned)CS);
  const size_t dyn = PRE  ? 0
                     : XF ? tc_dyn_smem_xf(p.stage, p.g.K, std::min(p.R, RC), p.KB, KS)
                          : tc_dyn_smem(p.stage, p.g.K, PRO == COSY_GEMV_IN_RMSNORM);
  constexpr size_t stat = tc_static_smem(RC);
  auto kern = gemv_tc_kernel<NT, KS, TW, D, PRO, EPI, PRE, XF>;
  if (dyn && stat + dyn > 48 * 1024) { /* beyond the default: static + dynamic <= 48 KB */
    const size_t most = (size_t)p.smem_lim > stat ? (size_t)p.smem_lim - stat : 0;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)std::max(dyn, most));
    if (e != cudaSuccess) return e;
  }
  if (CS == 1) return launch_pdl(kern, grid, TC_WARPS * 32, dyn, s, pdl, p);
  /* a K split over CS blocks: one cluster (1, 1, CS) per (row block, tile group) */
  return launch_ex(s, grid, dim3(TC_WARPS * 32), dyn, dim3(1, 1, (unsigned)CS), pdl, kern, p);
}

/* (NT, TW, D) by rows, as measured on an H100 (decode step of the full-size model, bench/RESULTS.md):
 * up to 8 rows one 8-row block, 4 k-blocks in flight per warp, three blocks an SM; up to 32 rows
 * blocks of 16; more rows blocks of 32 with two weight tiles per warp (each x fragment serves
 * both), only with x split beforehand (pre: the in-kernel split would not fit the registers) */
/* gemv_tc's tuning, fixed (each was an environment knob until its measurement was done; the
 * numbers are in bench/HISTORY.md):
 *   stage 1: up to 8 rows, stage x in shared memory for RMSNorm'd inputs (read twice:
 *            statistics, then fragments)
 *   maxks TC_MAX_KS: at most this many K parts (more than 8 only on devices with clusters)
 *   trigger 1: gemv_tc triggers its dependents (PDL) after its mma loop, gemv at its start. With
 *            gemv_tc's early trigger the next kernel's blocks sat resident through each decode
 *            kernel and starved the concurrent flow calls (H100, W1: a flow call 171 ms instead
 *            of 41; C = 64: 83 of 128 requests with an underrun); late: the decode step within 3%.
 *            The decode attention's early loads behind gemv_tc (COSY_K_DECODE_EARLY, passed by
 *            lib/gpu/llm.c) rely on this late trigger: it comes after gemv_tc's own wait
 *   early: the epilogue operands gemv_tc copies into shared memory before its mma loop (bias,
 *            RoPE frequencies, positions and cache slots, the residual's old values; not the
 *            RMSNorm weights, which cost the head 1.1 us at batch 1)
 *   target TC_TARGET_WARPS: K parts are doubled until the grid has this many warps
 *   split_chunks 1: tc_split_kernel spreads a row group over 256-k chunks (gridDim.y) */
struct GemvKnobs {
  int stage, maxks, trigger, early, target, split_chunks;
};
constexpr GemvKnobs kGemvKnobs = {1, TC_MAX_KS, 1,
                                  TC_EARLY_BIAS | TC_EARLY_INVF | TC_EARLY_POS | TC_EARLY_OLD,
                                  TC_TARGET_WARPS, 1};
inline const GemvKnobs &gemv_knobs() { return kGemvKnobs; }
inline int tc_rows_per_block(int R, bool pre) { return R <= 8 ? 8 : R <= 32 || !pre ? 16 : 32; }
/* gemv_tcb_kernel's block shape: 1 = blocks of 16 rows, one weight tile a warp, D 4; 2 = 32 rows,
 * two weight tiles a warp (each x fragment serves both), D 2; 3 = 32 rows, one tile a warp, D 4.
 * The same bits in each (the same K split and mma sequence per output). Chosen per matrix and
 * row count from the kernel table on an H200 (bench/RESULTS.md, "The decode projections by block
 * shape"): q|k|v and o (72 and 56 weight tiles of 16 rows: shape 2 leaves most SMs idle) take
 * 16-row blocks up to 64 rows; gate|up and down 16-row blocks up to 16 rows; down 32-row blocks
 * with one tile a warp up to 40 rows; the rest two tiles a warp, the head from 9 rows. */
inline int tcb_shape(int epi, int K, int R) {
  if (epi == COSY_GEMV_STORE_F32) return 2;
  if (epi == COSY_GEMV_QKV_ROPE || (epi == COSY_GEMV_ADD_F32 && K <= 1024)) return R <= 64 ? 1 : 2;
  if (R <= 16) return 1;
  return epi == COSY_GEMV_ADD_F32 && R <= 40 ? 3 : 2;
}
template <int KS, int PRO, int EPI>
cudaError_t gemv_tc_rows(cudaStream_t s, const TcP &p, int pdl) {
  const bool pre = p.xs != nullptr;
  const int rc = tc_rows_per_block(p.R, pre);
  if (pre && p.gemvb && rc > 8) { /* x split by tc_splitb_kernel: the B-operand kernel */
    const int sh = p.shape ? p.shape : tcb_shape(EPI, p.g.K, p.R); /* tc_plan: 0 or 1-3 */
    return sh == 1   ? gemv_tcb_launch<1, KS, 1, 4, PRO, EPI>(s, p, pdl)
           : sh == 2 ? gemv_tcb_launch<2, KS, 2, 2, PRO, EPI>(s, p, pdl)
                     : gemv_tcb_launch<2, KS, 1, 4, PRO, EPI>(s, p, pdl);
  }
  if (rc == 8)
    return p.xf ? gemv_tc_launch<1, KS, 1, 4, PRO, EPI, false, true>(s, p, pdl)
                : gemv_tc_launch<1, KS, 1, 4, PRO, EPI, false, false>(s, p, pdl);
  if (rc == 16)
    return pre    ? gemv_tc_launch<2, KS, 1, 4, PRO, EPI, true, false>(s, p, pdl)
           : p.xf ? gemv_tc_launch<2, KS, 1, 4, PRO, EPI, false, true>(s, p, pdl)
                  : gemv_tc_launch<2, KS, 1, 4, PRO, EPI, false, false>(s, p, pdl);
  return gemv_tc_launch<4, KS, 2, 2, PRO, EPI, true, false>(s, p, pdl);
}

template <int PRO, int EPI>
cudaError_t gemv_tc_nt(cudaStream_t s, const TcP &p, int ks, int pdl) {
  switch (ks) {
  case 1: return gemv_tc_rows<1, PRO, EPI>(s, p, pdl);
  case 2: return gemv_tc_rows<2, PRO, EPI>(s, p, pdl);
  case 4: return gemv_tc_rows<4, PRO, EPI>(s, p, pdl);
  case 8: return gemv_tc_rows<8, PRO, EPI>(s, p, pdl);
  case 16: return gemv_tc_rows<16, PRO, EPI>(s, p, pdl);
  case 32: return gemv_tc_rows<32, PRO, EPI>(s, p, pdl);
  default: return cudaErrorInvalidValue;
  }
}

inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* The checks both launchers make and the parameters they share: fills p (P = output slots: N
 * rows, or N / 2 row pairs for SILU_MUL and QKV_ROPE; groups = max(groups, 1)). */
cudaError_t gemv_params(const cosy_llm_gemv_args *a, GemvP *p) {
  if (a->N <= 0 || !a->x || !a->w || !a->y || !aligned16(a->w) || !aligned16(a->x) ||
      a->ldx < a->K || a->ldx % 4 != 0)
    return cudaErrorInvalidValue;
  if (a->in_mode == COSY_GEMV_IN_RMSNORM && (!a->norm_w || !aligned16(a->norm_w)))
    return cudaErrorInvalidValue;
  if (a->groups < 0 || a->groups > GV_MAX_GROUPS) return cudaErrorInvalidValue;
  p->M = a->M;
  p->groups = a->groups > 1 ? a->groups : 1;
  p->N = a->N;
  p->K = a->K;
  p->x = a->x;
  p->ldx = a->ldx;
  p->norm_w = a->norm_w;
  p->eps = a->eps;
  p->w = (const bf16 *)a->w;
  p->bias = a->bias;
  p->y = a->y;
  p->ldy = a->ldy;
  p->n_qh = a->n_qh;
  p->n_kh = a->n_kh;
  p->pos = a->pos;
  p->slots = a->slots;
  p->inv_freq = a->inv_freq;
  p->kc = a->k_cache;
  p->vc = a->v_cache;
  switch (a->out_mode) {
  case COSY_GEMV_STORE_F32:
  case COSY_GEMV_ADD_F32:
    if (a->ldy < a->N) return cudaErrorInvalidValue;
    p->P = a->N;
    return cudaSuccess;
  case COSY_GEMV_SILU_MUL:
    if (a->N % 2 != 0 || a->ldy < a->N / 2) return cudaErrorInvalidValue;
    p->P = a->N / 2;
    return cudaSuccess;
  case COSY_GEMV_QKV_ROPE:
    if (a->n_qh <= 0 || a->n_kh <= 0 || a->N != (a->n_qh + 2 * a->n_kh) * HD ||
        a->ldy < a->n_qh * HD || !a->pos || !a->slots || !a->inv_freq || !a->k_cache ||
        !a->v_cache)
      return cudaErrorInvalidValue;
    p->P = a->N / 2;
    return cudaSuccess;
  default:
    return cudaErrorInvalidValue;
  }
}

/* f(PRO, EPI) as integral constants for the (prologue, epilogue) pairs that are built */
template <class F>
cudaError_t by_mode(int pro, int epi, F &&f) {
  using std::integral_constant;
  using In = integral_constant<int, COSY_GEMV_IN_F32>;
  using Rms = integral_constant<int, COSY_GEMV_IN_RMSNORM>;
  if (pro == COSY_GEMV_IN_RMSNORM && epi == COSY_GEMV_QKV_ROPE)
    return f(Rms(), integral_constant<int, COSY_GEMV_QKV_ROPE>());
  if (pro == COSY_GEMV_IN_RMSNORM && epi == COSY_GEMV_SILU_MUL)
    return f(Rms(), integral_constant<int, COSY_GEMV_SILU_MUL>());
  if (pro == COSY_GEMV_IN_RMSNORM && epi == COSY_GEMV_STORE_F32)
    return f(Rms(), integral_constant<int, COSY_GEMV_STORE_F32>());
  if (pro == COSY_GEMV_IN_F32 && epi == COSY_GEMV_ADD_F32)
    return f(In(), integral_constant<int, COSY_GEMV_ADD_F32>());
  if (pro == COSY_GEMV_IN_F32 && epi == COSY_GEMV_STORE_F32)
    return f(In(), integral_constant<int, COSY_GEMV_STORE_F32>());
  return cudaErrorNotSupported;
}

} /* namespace */

extern "C" int cosy_k_llm_gemv_supported(int M, int K) {
  return (M == 1 || M == 2 || M == 4 || M == 8) && K >= 8 && K % 8 == 0 &&
         K <= 4 * 8 * 32 * 8;
}

extern "C" cudaError_t cosy_k_llm_gemv(cudaStream_t s, const cosy_llm_gemv_args *a) {
  if (!a || !cosy_k_llm_gemv_supported(a->M, a->K)) return cudaErrorInvalidValue;
  GemvP p;
  const cudaError_t pe = gemv_params(a, &p);
  if (pe != cudaSuccess) return pe;
  p.late = gemv_knobs().trigger == 2;
  /* K split: least that covers K in gv_cmax chunks per lane, then more for a fuller grid */
  const int nch = a->K / 8, cmax = gv_cmax(a->out_mode);
  int ks = 1;
  while (ks < 8 && (nch + 32 * ks - 1) / (32 * ks) > cmax) ks *= 2;
  while (ks < 8 && (p.P + GV_WARPS / ks - 1) / (GV_WARPS / ks) < GV_TARGET_BLOCKS &&
         nch > 32 * ks)
    ks *= 2;

  const int pdl = a->pdl ? 1 : 0;
  return by_mode(a->in_mode, a->out_mode, [&](auto pro, auto epi) {
    return gemv_m<decltype(pro)::value, decltype(epi)::value>(s, p, ks, pdl);
  });
}

extern "C" int cosy_k_llm_gemv_tc_supported(int N, int K, int out_mode) {
  if (K < 8 || K % 8 != 0 || N <= 0) return 0;
  if (out_mode == COSY_GEMV_SILU_MUL) return N % 16 == 0;
  if (out_mode == COSY_GEMV_QKV_ROPE) return N % 64 == 0;
  return out_mode == COSY_GEMV_STORE_F32 || out_mode == COSY_GEMV_ADD_F32;
}

extern "C" size_t cosy_k_llm_gemv_tc_workspace(int R, int K) {
  if (R <= 0 || K <= 0) return 0;
  /* R rounded up to 16 (tc_splitb_kernel's tiles; 8 for tc_split_kernel's) x 32 k x 4 bytes */
  return (size_t)((R + 15) / 16) * 2 * ((K + 31) / 32) * 64 * 16;
}

/* The plan of a cosy_k_llm_gemv_tc call (nothing launched): the checks, the parameters, the K
 * split (*ks) and the x side: *split (tc_split_kernel first, into a->xs), else tp->stage rows
 * staged and tp->xf (the block's fragments, args xfrag, where they fit). */
static cudaError_t tc_plan(const cosy_llm_gemv_args *a, TcP *tpp, int *ksp, bool *split) {
  if (!a || a->M < 0 || !cosy_k_llm_gemv_tc_supported(a->N, a->K, a->out_mode))
    return cudaErrorInvalidValue;
  TcP &tp = *tpp;
  memset(&tp, 0, sizeof tp);
  *split = false;
  GemvP &p = tp.g;
  const cudaError_t pe = gemv_params(a, &p);
  if (pe != cudaSuccess) return pe;
  p.late = gemv_knobs().trigger >= 1;
  tp.early = gemv_knobs().early;
  tp.gemvb = a->gemvb ? 1 : 0;
  tp.shape = a->tcb_shape >= 1 && a->tcb_shape <= 3 ? a->tcb_shape : 0;
  const long long R = (long long)a->M * p.groups;
  if (R > 65535LL * 64) return cudaErrorInvalidValue;
  tp.R = (int)R;
  tp.KB = (a->K + 31) / 32;
  p.groups = 1;
  /* P = 16-row weight tiles: 16 rows, or 8 row pairs */
  p.P = a->out_mode == COSY_GEMV_STORE_F32 || a->out_mode == COSY_GEMV_ADD_F32 ? (a->N + 15) / 16
                                                                               : a->N / 16;
  /* K split from N and K only (never the rows, so a row's sums do not depend on the batch):
   * at most 16 k-blocks per warp, then more parts (while a warp keeps at least 2 k-blocks) until
   * the grid has TC_TARGET_WARPS warps at one 8-row block; beyond 8 parts a tile's parts span
   * the blocks of a cluster, so without clusters at most 8. Measured on an H200 (RESULTS): a
   * cluster pays for long K only (down: 7.4 us at 32 parts, 9.5 at 16, 13.5 at 8, 11.5 at 64),
   * not for K = 896 (q|k|v 5.2 us at 8 parts, 6.0 at 16 over two blocks) */
  int ks = 1;
  const int maxks = a->clusters ? gemv_knobs().maxks : std::min(gemv_knobs().maxks, TC_WARPS);
  while (ks < maxks && (tp.KB + ks - 1) / ks > 16) ks *= 2;
  while (ks < maxks && (long long)p.P * ks < gemv_knobs().target && tp.KB >= 4 * ks) ks *= 2;
  *ksp = ks;
  if (tp.R == 0) return cudaSuccess;
  /* more than 8 rows with a workspace: the x side once per row (tc_split_kernel), so that the
   * blocks only load their B fragments */
  if (tp.R > 8 && a->xs && a->xs_bytes >= cosy_k_llm_gemv_tc_workspace(tp.R, a->K)) {
    if (!aligned16(a->xs)) return cudaErrorInvalidValue;
    *split = true;
    return cudaSuccess;
  }
  /* x staged in shared memory when the block's rows fit beside the static arrays (at most
   * smem_max bytes in all; 48 KB when 0): one bulk read instead of a read per k-block */
  const int rc = tc_rows_per_block(tp.R, false);
  const int rows = tp.R < rc ? tp.R : rc;
  const size_t stat = tc_static_smem(rc);
  const size_t lim = a->smem_max > 0 ? (size_t)a->smem_max : (size_t)48 * 1024;
  tp.smem_lim = (int)lim;
  const size_t need = tc_dyn_smem(rows, a->K, a->in_mode == COSY_GEMV_IN_RMSNORM);
  /* at most 96 KB, so that two blocks fit an SM */
  const int st = gemv_knobs().stage;
  const bool want = st == 2 || (st == 1 && a->in_mode == COSY_GEMV_IN_RMSNORM);
  tp.stage = want && stat + need <= lim && need <= (size_t)96 * 1024 ? rows : 0;
  /* xfrag: the block's x fragments in shared memory (tc_xf_lkb) where the block still fits the
   * per-block limit and tc_min_blocks blocks (each with the 1 KB the runtime reserves) fit an SM
   * (smem_sm; 0: smem_max's value); the staged rows are dropped where only that makes them fit,
   * and always with xfrag 2 (the statistics and the fragments then read x in place: the same
   * values) */
  if (a->xfrag == 1 || a->xfrag == 2) {
    const size_t sm = a->smem_sm > 0 ? (size_t)a->smem_sm : lim;
    const size_t nb = (size_t)tc_min_blocks(rc / 8, 4);
    for (int sg = a->xfrag == 2 ? 0 : tp.stage;; sg = 0) {
      const size_t blk = stat + tc_dyn_smem_xf(sg, a->K, rows, tp.KB, ks);
      if (blk <= lim && nb * (blk + 1024) <= sm) {
        tp.stage = sg;
        tp.xf = 1;
        break;
      }
      if (sg == 0) break;
    }
  }
  return cudaSuccess;
}

extern "C" int cosy_k_llm_gemv_tc_xfrag_used(const cosy_llm_gemv_args *a) {
  TcP tp;
  int ks = 0;
  bool split = false;
  return tc_plan(a, &tp, &ks, &split) == cudaSuccess && tp.R > 0 && !split && tp.xf;
}

extern "C" cudaError_t cosy_k_llm_gemv_tc(cudaStream_t s, const cosy_llm_gemv_args *a) {
  TcP tp;
  int ks = 1;
  bool split = false;
  const cudaError_t ce = tc_plan(a, &tp, &ks, &split);
  if (ce != cudaSuccess) return ce;
  if (tp.R == 0) return cudaSuccess;
  const GemvP &p = tp.g;
  const int pdl = a->pdl ? 1 : 0;
  if (split) {
    const SplitP sp = {p, tp.R, (uint4 *)a->xs};
    /* blockIdx.y: chunks of 256 k (a warp's 8 k a lane), so that the few rows of a decode step
     * still give ~2 blocks an SM of 132 (at 64 rows and K = 4864 one block a row group took
     * 19 passes; H100 decode step at 64 rows 2.10 ms against 2.27, at 16 rows 1.07 against
     * 1.31: bench/RESULTS.md) */
    /* (gemvb: blocks of 16 rows, two a warp, in the B-operand kernel's A-fragment order) */
    const int nk = (tp.KB * 32 + 255) / 256, rb = tp.gemvb ? (tp.R + 15) / 16 : (tp.R + 7) / 8;
    const int ny =
        gemv_knobs().split_chunks ? std::max(1, std::min(nk, GV_TARGET_BLOCKS / rb)) : 1;
    const dim3 grid((unsigned)rb, (unsigned)ny);
    const bool rms = a->in_mode == COSY_GEMV_IN_RMSNORM;
    const cudaError_t e =
        tp.gemvb ? (rms ? launch_pdl(tc_splitb_kernel<COSY_GEMV_IN_RMSNORM>, grid, 256, 0, s, pdl, sp)
                        : launch_pdl(tc_splitb_kernel<COSY_GEMV_IN_F32>, grid, 256, 0, s, pdl, sp))
        : rms ? launch_pdl(tc_split_kernel<COSY_GEMV_IN_RMSNORM>, grid, 256, 0, s, pdl, sp)
              : launch_pdl(tc_split_kernel<COSY_GEMV_IN_F32>, grid, 256, 0, s, pdl, sp);
    if (e != cudaSuccess) return e;
    tp.xs = sp.xs;
  }
  return by_mode(a->in_mode, a->out_mode, [&](auto pro, auto epi) {
    return gemv_tc_nt<decltype(pro)::value, decltype(epi)::value>(s, tp, ks, pdl);
  });
}
