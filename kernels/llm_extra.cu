/* llm_extra.cu - kernels of the GPU speech-token LLM: decode-step preparation, RoPE + paged KV
 * append, KV gather for chunked prefill, and the fused skinny GEMM ("gemv") used by small decode
 * batches. Interfaces in llm_extra.h.
 *
 * Math
 *   decode_prep: h[i] = speech_embedding[token_i] (fp32), slot_i = block_table[pos_i / P] * P +
 *     pos_i % P (P = page size), len_i = pos_i + 1, and the batch's block-table rows.
 *   rope_append: NeoX RoPE (Qwen2 rotate_half) on head_dim 64, angle a = fp32(pos) * inv_freq[i]
 *     (the fp32 table of lib/ref/llm.c), accurate sincosf; q -> bf16, k/v -> bf16 cache rows.
 *   kv_gather: copy of cache rows of one sequence to contiguous [t][kv_dim].
 *   gemv: out(m, n) = sum_k xs[m][k] W[n][k] (+ bias[n]) with the epilogues of llm_extra.h;
 *     xs = bf16 input, or for IN_RMSNORM xs[m][k] = bf16(w[k] * (x[m][k] * r_m)),
 *     r_m = rsqrt(mean_k x[m][k]^2 + eps) (Qwen2 RMSNorm, statistics fp32), which is exactly what
 *     cosy_k_rmsnorm with a bf16 output produces for the cuBLAS path.
 * Shapes: see llm_extra.h. Decode: M <= 8 rows, H = 896, qkv N = 1152, gate|up N = 9728,
 *   down K = 4864, head N = 6761 (full model).
 * Thread mapping
 *   decode_prep: one block of 128 threads per row (threads stride over H and the block table).
 *   rope_append: one thread per (token, head of q|k|v, i < 32) pair; grid-stride.
 *   kv_gather: one thread per (token, 8-element vector of K and V).
 *   gemv: 256 threads = 8 warps per block. A "slot" is one output row (STORE / ADD), or the row
 *     pair (j, j + I) for SILU_MUL, or (head*64 + i, head*64 + i + 32) for QKV_ROPE, so that a
 *     pair's epilogue (SiLU gate, rotation) needs no exchange between blocks. KS warps (1, 2, 4 or
 *     8, a template parameter) share one slot and split K; a block holds 8 / KS slots. Lane l of
 *     K-part p reads 16-byte weight chunks j = (c*KS + p)*32 + l, c < 4 (coalesced 512-byte
 *     warp accesses), all issued into registers before anything else, so the weight stream is in
 *     flight while the block stages x (and computes the RMSNorm) in shared memory. Then each lane
 *     does 8 FMAs per chunk and row of x, partial sums are reduced with warp shuffles and, across
 *     the KS warps, through shared memory; thread (slot, m) applies the epilogue. KS is chosen by
 *     the launcher: the least that covers K in 4 chunks per lane, then doubled (up to 8 and while
 *     each warp still has chunks) until the grid has >= 264 blocks (2 per SM of an H100).
 *     The grid is ceil(slots / (8 / KS)): 144..846 blocks for the full model's matrices.
 * Numerics: fp32 accumulation and epilogues; bf16 rounding once at each bf16 store. The weight is
 *   read exactly once per call (the floor for decode is bytes(W) / bandwidth).
 */
#include "kcommon.cuh"
#include "llm_extra.h"

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
rope_append_kernel(const float *__restrict__ qkv, int qkv_stride, int n_tok, int n_qh, int n_kh,
                   const int32_t *__restrict__ pos, const int32_t *__restrict__ slots,
                   const float *__restrict__ inv_freq, bf16 *__restrict__ q, int q_stride,
                   bf16 *__restrict__ kc, bf16 *__restrict__ vc) {
  const int heads = n_qh + 2 * n_kh;
  const int64_t total = (int64_t)n_tok * heads * HALF;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int i = (int)(e % HALF);
    const int head = (int)((e / HALF) % heads);
    const int t = (int)(e / ((int64_t)HALF * heads));
    const float *row = qkv + (size_t)t * qkv_stride + (size_t)head * HD;
    float x1 = row[i], x2 = row[i + HALF];
    if (head < n_qh + n_kh) {
      float sn, cs;
      sincosf((float)pos[t] * inv_freq[i], &sn, &cs);
      const float r1 = x1 * cs - x2 * sn, r2 = x2 * cs + x1 * sn;
      x1 = r1;
      x2 = r2;
    }
    if (head < n_qh) {
      bf16 *qr = q + (size_t)t * q_stride + (size_t)head * HD;
      qr[i] = __float2bfloat16_rn(x1);
      qr[i + HALF] = __float2bfloat16_rn(x2);
    } else {
      const int slot = slots[t];
      if (slot < 0) continue;
      const bool is_k = head < n_qh + n_kh;
      const int kvh = is_k ? head - n_qh : head - n_qh - n_kh;
      bf16 *c = (is_k ? kc : vc) + ((size_t)slot * n_kh + kvh) * HD;
      c[i] = __float2bfloat16_rn(x1);
      c[i + HALF] = __float2bfloat16_rn(x2);
    }
  }
}

/* ------------------------------------------------------------------------------------------ */
/* kv_gather                                                                                   */

__global__ void __launch_bounds__(256)
kv_gather_kernel(const bf16 *__restrict__ kc, const bf16 *__restrict__ vc,
                 const int32_t *__restrict__ bt, int page_size, int kv_dim, int n_tok,
                 bf16 *__restrict__ k, bf16 *__restrict__ v) {
  const int nv = kv_dim / 8;
  const int64_t total = (int64_t)n_tok * nv;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int t = (int)(e / nv), c = (int)(e % nv) * 8;
    const size_t src = ((size_t)bt[t / page_size] * page_size + t % page_size) * kv_dim + c;
    const size_t dst = (size_t)t * kv_dim + c;
    *reinterpret_cast<uint4 *>(k + dst) = *reinterpret_cast<const uint4 *>(kc + src);
    *reinterpret_cast<uint4 *>(v + dst) = *reinterpret_cast<const uint4 *>(vc + src);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* gemv                                                                                        */

constexpr int GV_THREADS = 256;
constexpr int GV_WARPS = GV_THREADS / 32;
constexpr int GV_CMAX = 4;                 /* 16-byte weight chunks per lane and row */
constexpr int GV_MAXM = 8;
constexpr size_t GV_SMEM_MAX = 48 * 1024;  /* no opt-in needed below this */
constexpr int GV_TARGET_BLOCKS = 264;

struct GemvP {
  int M, N, K, P;
  const void *x;
  int ldx;
  const float *norm_w;
  float eps;
  const bf16 *w;
  const float *bias;
  void *y;
  int ldy;
  int n_qh, n_kh;
  const int32_t *pos, *slots;
  const float *inv_freq;
  bf16 *kc, *vc;
};

__device__ __forceinline__ void unpack8(const uint4 &t, float f[8]) {
  f[0] = __uint_as_float(t.x << 16); f[1] = __uint_as_float(t.x & 0xffff0000u);
  f[2] = __uint_as_float(t.y << 16); f[3] = __uint_as_float(t.y & 0xffff0000u);
  f[4] = __uint_as_float(t.z << 16); f[5] = __uint_as_float(t.z & 0xffff0000u);
  f[6] = __uint_as_float(t.w << 16); f[7] = __uint_as_float(t.w & 0xffff0000u);
}

__device__ __forceinline__ uint4 ld_stream(const bf16 *p) {
  return __ldcs(reinterpret_cast<const uint4 *>(p)); /* read once: evict-first */
}

template <int M, int KS, int PRO, int EPI>
__global__ void __launch_bounds__(GV_THREADS) gemv_kernel(GemvP a) {
  constexpr int RW = (EPI == COSY_GEMV_SILU_MUL || EPI == COSY_GEMV_QKV_ROPE) ? 2 : 1;
  constexpr int SPB = GV_WARPS / KS;
  extern __shared__ __align__(16) unsigned char gv_smem[];
  bf16 *xs = reinterpret_cast<bf16 *>(gv_smem); /* [M][K] */
  __shared__ float red[GV_WARPS][RW * M];
  __shared__ float nred[GV_WARPS][M];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int K = a.K, nch = K >> 3;
  const int slot = blockIdx.x * SPB + warp / KS, kp = warp % KS;
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

  /* 1. the weight stream, straight into registers */
  uint4 wv[RW][GV_CMAX];
#pragma unroll
  for (int c = 0; c < GV_CMAX; ++c) {
    const int j = (c * KS + kp) * 32 + lane;
#pragma unroll
    for (int r = 0; r < RW; ++r) {
      if (valid && j < nch)
        wv[r][c] = ld_stream(a.w + (size_t)row[r] * K + (size_t)j * 8);
      else
        wv[r][c] = make_uint4(0u, 0u, 0u, 0u);
    }
  }

  /* 2. x -> shared memory (bf16), with the RMSNorm when asked */
  if (PRO == COSY_GEMV_IN_BF16) {
    const bf16 *x = reinterpret_cast<const bf16 *>(a.x);
    for (int e = tid; e < M * nch; e += GV_THREADS) {
      const int m = e / nch, j = e - m * nch;
      *reinterpret_cast<uint4 *>(xs + (size_t)m * K + j * 8) =
          *reinterpret_cast<const uint4 *>(x + (size_t)m * a.ldx + j * 8);
    }
  } else {
    const float *x = reinterpret_cast<const float *>(a.x);
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
    float r[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float t = 0.f;
#pragma unroll
      for (int q = 0; q < GV_WARPS; ++q) t += nred[q][m];
      r[m] = rsqrtf(t / (float)K + a.eps);
    }
    for (int k = tid * 4; k < K; k += GV_THREADS * 4) {
      const float4 w4 = *reinterpret_cast<const float4 *>(a.norm_w + k);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float4 v = *reinterpret_cast<const float4 *>(x + (size_t)m * a.ldx + k);
        __nv_bfloat162 lo = __floats2bfloat162_rn(w4.x * (v.x * r[m]), w4.y * (v.y * r[m]));
        __nv_bfloat162 hi = __floats2bfloat162_rn(w4.z * (v.z * r[m]), w4.w * (v.w * r[m]));
        uint2 pk;
        pk.x = *reinterpret_cast<uint32_t *>(&lo);
        pk.y = *reinterpret_cast<uint32_t *>(&hi);
        *reinterpret_cast<uint2 *>(xs + (size_t)m * K + k) = pk;
      }
    }
  }
  __syncthreads();

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
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xf[8];
        unpack8(*reinterpret_cast<const uint4 *>(xs + (size_t)m * K + j * 8), xf);
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
  const int s = blockIdx.x * SPB + sl;
  if (s >= a.P) return;
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
    float *y = reinterpret_cast<float *>(a.y) + (size_t)m * a.ldy + s;
    const float o = v[0] + (a.bias ? a.bias[s] : 0.f);
    if (EPI == COSY_GEMV_ADD_F32)
      *y += o;
    else
      *y = o;
  } else if (EPI == COSY_GEMV_SILU_MUL) {
    const float g = v[0], u = v[RW - 1];
    reinterpret_cast<bf16 *>(a.y)[(size_t)m * a.ldy + s] =
        __float2bfloat16_rn(g / (1.f + expf(-g)) * u);
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
      sincosf((float)a.pos[m] * a.inv_freq[i], &sn, &cs);
      const float t1 = x1 * cs - x2 * sn, t2 = x2 * cs + x1 * sn;
      x1 = t1;
      x2 = t2;
    }
    if (head < a.n_qh) {
      bf16 *q = reinterpret_cast<bf16 *>(a.y) + (size_t)m * a.ldy + (size_t)head * HD;
      q[i] = __float2bfloat16_rn(x1);
      q[i + HALF] = __float2bfloat16_rn(x2);
    } else {
      const int sc = a.slots[m];
      if (sc >= 0) {
        const bool is_k = head < a.n_qh + a.n_kh;
        const int kvh = is_k ? head - a.n_qh : head - a.n_qh - a.n_kh;
        bf16 *c = (is_k ? a.kc : a.vc) + ((size_t)sc * a.n_kh + kvh) * HD;
        c[i] = __float2bfloat16_rn(x1);
        c[i + HALF] = __float2bfloat16_rn(x2);
      }
    }
  }
}

template <int M, int KS, int PRO, int EPI>
cudaError_t gemv_launch(cudaStream_t s, const GemvP &p) {
  constexpr int SPB = GV_WARPS / KS;
  const int blocks = (p.P + SPB - 1) / SPB;
  const size_t smem = (size_t)M * p.K * 2;
  gemv_kernel<M, KS, PRO, EPI><<<blocks, GV_THREADS, smem, s>>>(p);
  return cudaGetLastError();
}

template <int M, int PRO, int EPI>
cudaError_t gemv_ks(cudaStream_t s, const GemvP &p, int ks) {
  switch (ks) {
  case 1: return gemv_launch<M, 1, PRO, EPI>(s, p);
  case 2: return gemv_launch<M, 2, PRO, EPI>(s, p);
  case 4: return gemv_launch<M, 4, PRO, EPI>(s, p);
  case 8: return gemv_launch<M, 8, PRO, EPI>(s, p);
  default: return cudaErrorInvalidValue;
  }
}

template <int PRO, int EPI>
cudaError_t gemv_m(cudaStream_t s, const GemvP &p, int ks) {
  switch (p.M) {
  case 1: return gemv_ks<1, PRO, EPI>(s, p, ks);
  case 2: return gemv_ks<2, PRO, EPI>(s, p, ks);
  case 4: return gemv_ks<4, PRO, EPI>(s, p, ks);
  case 8: return gemv_ks<8, PRO, EPI>(s, p, ks);
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

extern "C" cudaError_t cosy_k_llm_rope_append(cudaStream_t s, const float *qkv, int qkv_stride,
                                              int n_tok, int n_qh, int n_kh, const int32_t *pos,
                                              const int32_t *slots, const float *inv_freq,
                                              cosy_bf16 *q, int q_stride, cosy_bf16 *k_cache,
                                              cosy_bf16 *v_cache) {
  if (n_tok < 0 || n_qh <= 0 || n_kh <= 0 || qkv_stride < (n_qh + 2 * n_kh) * HD ||
      q_stride < n_qh * HD)
    return cudaErrorInvalidValue;
  if (n_tok == 0) return cudaSuccess;
  if (!qkv || !pos || !slots || !inv_freq || !q || !k_cache || !v_cache)
    return cudaErrorInvalidValue;
  const int64_t total = (int64_t)n_tok * (n_qh + 2 * n_kh) * HALF;
  int64_t blocks = (total + 255) / 256;
  if (blocks > 65535) blocks = 65535;
  rope_append_kernel<<<(unsigned)blocks, 256, 0, s>>>(qkv, qkv_stride, n_tok, n_qh, n_kh, pos,
                                                      slots, inv_freq, (bf16 *)q, q_stride,
                                                      (bf16 *)k_cache, (bf16 *)v_cache);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_llm_kv_gather(cudaStream_t s, const cosy_bf16 *k_cache,
                                            const cosy_bf16 *v_cache, const int32_t *bt,
                                            int page_size, int kv_dim, int n_tok, cosy_bf16 *k,
                                            cosy_bf16 *v) {
  if (n_tok < 0 || page_size <= 0 || kv_dim <= 0 || kv_dim % 8 != 0) return cudaErrorInvalidValue;
  if (n_tok == 0) return cudaSuccess;
  if (!k_cache || !v_cache || !bt || !k || !v || !aligned16(k_cache) || !aligned16(v_cache) ||
      !aligned16(k) || !aligned16(v))
    return cudaErrorInvalidValue;
  const int64_t total = (int64_t)n_tok * (kv_dim / 8);
  int64_t blocks = (total + 255) / 256;
  if (blocks > 65535) blocks = 65535;
  kv_gather_kernel<<<(unsigned)blocks, 256, 0, s>>>((const bf16 *)k_cache, (const bf16 *)v_cache,
                                                    bt, page_size, kv_dim, n_tok, (bf16 *)k,
                                                    (bf16 *)v);
  return cudaGetLastError();
}

extern "C" int cosy_k_llm_gemv_supported(int M, int K) {
  if ((M != 1 && M != 2 && M != 4 && M != GV_MAXM) || K < 8 || K % 8 != 0 ||
      K > GV_CMAX * 8 * 32 * 8)
    return 0;
  return (size_t)M * (size_t)K * 2 <= GV_SMEM_MAX;
}

extern "C" cudaError_t cosy_k_llm_gemv(cudaStream_t s, const cosy_llm_gemv_args *a) {
  if (!a || !cosy_k_llm_gemv_supported(a->M, a->K) || a->N <= 0 || !a->x || !a->w || !a->y ||
      !aligned16(a->w) || !aligned16(a->x))
    return cudaErrorInvalidValue;
  GemvP p;
  p.M = a->M;
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
  p.kc = (bf16 *)a->k_cache;
  p.vc = (bf16 *)a->v_cache;
  if (a->ldx < a->K || a->ldx % (a->in_mode == COSY_GEMV_IN_BF16 ? 8 : 4) != 0)
    return cudaErrorInvalidValue;
  if (a->in_mode == COSY_GEMV_IN_RMSNORM && (!a->norm_w || !aligned16(a->norm_w)))
    return cudaErrorInvalidValue;
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
  /* K split: least that covers K in GV_CMAX chunks per lane, then more for a fuller grid */
  const int nch = a->K / 8;
  int ks = 1;
  while (ks < 8 && (nch + 32 * ks - 1) / (32 * ks) > GV_CMAX) ks *= 2;
  while (ks < 8 && (p.P + GV_WARPS / ks - 1) / (GV_WARPS / ks) < GV_TARGET_BLOCKS &&
         nch > 32 * ks)
    ks *= 2;

  const int pro = a->in_mode, epi = a->out_mode;
  if (pro == COSY_GEMV_IN_RMSNORM && epi == COSY_GEMV_QKV_ROPE)
    return gemv_m<COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE>(s, p, ks);
  if (pro == COSY_GEMV_IN_RMSNORM && epi == COSY_GEMV_SILU_MUL)
    return gemv_m<COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL>(s, p, ks);
  if (pro == COSY_GEMV_IN_RMSNORM && epi == COSY_GEMV_STORE_F32)
    return gemv_m<COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32>(s, p, ks);
  if (pro == COSY_GEMV_IN_BF16 && epi == COSY_GEMV_ADD_F32)
    return gemv_m<COSY_GEMV_IN_BF16, COSY_GEMV_ADD_F32>(s, p, ks);
  if (pro == COSY_GEMV_IN_BF16 && epi == COSY_GEMV_STORE_F32)
    return gemv_m<COSY_GEMV_IN_BF16, COSY_GEMV_STORE_F32>(s, p, ks);
  return cudaErrorNotSupported;
}
