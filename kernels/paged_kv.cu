/* paged_kv.cu - the GPU LLM's paged KV cache ops (lib/gpu/llm.c): decode-step preparation
 * (embeddings, positions, cache slots, block tables of the batch) and RoPE + append of K/V to
 * the pages (the attention that reads them: kernels.h cosy_k_paged_decode /
 * cosy_k_paged_prefill). Interfaces in paged_kv.h.
 *
 * Math
 *   decode_prep: h[i] = speech_embedding[token_i] (fp32), slot_i = block_table[pos_i / P] * P +
 *     pos_i % P (P = page size), len_i = pos_i + 1, and the batch's block-table rows.
 *   rope_append: x = qkv (+ qkv_lo) (+ bias); NeoX RoPE (Qwen2 rotate_half) on head_dim 64, angle
 *     a = fp32(pos) * inv_freq[i] (the fp32 table of lib/ref/llm.c), accurate sincosf; q out,
 *     k/v to cache rows (all fp32).
 * Thread mapping
 *   decode_prep: one block of 128 threads per row (threads stride over H and the block table).
 *   rope_append: one thread per (token, head of q|k|v, i < 32) pair; grid-stride.
 * Numerics: fp32; copies are exact.
 */
#include "kcommon.cuh"
#include "paged_kv.h"

using namespace cosyk;

namespace {

constexpr int HD = 64;   /* head_dim */
constexpr int HALF = 32; /* RoPE pairs (i, i + 32) of a head */
constexpr int DP_THREADS = 128; /* decode_prep: threads per row */
constexpr int EW_THREADS = 256;           /* threads per block of the per-element kernels */
constexpr unsigned EW_MAX_BLOCKS = 4096u; /* their grid-stride loops: at most this many blocks */

inline unsigned grid_for(int64_t total) { return cosyk_blocks(total, EW_THREADS, EW_MAX_BLOCKS); }

/* ------------------------------------------------------------------------------------------ */
/* decode_prep                                                                                 */

__global__ void __launch_bounds__(DP_THREADS)
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

__global__ void __launch_bounds__(EW_THREADS)
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
  decode_prep_kernel<<<n, DP_THREADS, 0, s>>>(
      in, n, (const bf16 *)emb, n_emb, H, bt_all, bt_all_stride, n_slots, page_size, h, pos, slots,
      lens, bt, bt_stride);
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
  rope_append_kernel<<<grid_for(total), EW_THREADS, 0, s>>>(
      qkv, qkv_lo, qkv_stride, bias, n_tok, n_qh, n_kh, pos, slots, inv_freq, q, q_stride, k_cache,
      v_cache);
  return cudaGetLastError();
}

