/* llm_extra.h - CUDA kernels specific to the GPU speech-token LLM (lib/gpu/llm.c); plain C
 * launchers, same conventions as kernels.h (stream first, asynchronous, cudaErrorInvalidValue for
 * bad arguments, else cudaGetLastError() after the launch; nothing allocates, synchronizes,
 * prints or exits; zero rows is a no-op). head_dim is fixed at 64 (Qwen2-0.5B geometry).
 *
 * Paged KV cache layout (as kernels.h): per layer one K and one V array
 *   cache[page][page_size][n_kh][64] bf16; token t of a sequence sits at cache row
 *   slot = block_table[t / page_size] * page_size + t % page_size.
 *
 * Kernels (math, shapes, thread mapping and numerics in kernels/llm_extra.cu):
 *  - cosy_k_llm_decode_prep: per-step inputs of a batched decode step -> embeddings, positions,
 *    cache slots, context lengths and the batch's block tables (one launch, graph-capturable).
 *  - cosy_k_llm_rope_append: RoPE on q and k of a fused fp32 qkv row (bias already added), q to
 *    bf16, k (rotated) and v to the paged cache.
 *  - cosy_k_llm_kv_gather: one sequence's first n_tok cache rows -> contiguous K and V (prefill
 *    attention over earlier chunks).
 *  - cosy_k_llm_gemv: skinny GEMM for M in {1, 2, 4, 8} rows (decode), optionally fused with the RMSNorm of
 *    its fp32 input and with the layer's epilogue (residual add, SiLU-gate, RoPE + KV append).
 */
#ifndef COSY_LLM_EXTRA_H
#define COSY_LLM_EXTRA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Decode-step preparation for n rows (n = the graph's batch bucket).
 * in [3][n] int32 (device): in[i] = speech token, in[n + i] = sequence slot (< 0: a dummy row),
 * in[2n + i] = position of the new token (= tokens already stored for that sequence).
 * For a real row i (0 <= slot < n_slots, 0 <= position < bt_all_stride * page_size):
 *   h[i][:] = emb[token][:] (fp32; a token outside [0, n_emb) gives zeros), pos[i] = position,
 *   slots[i] = bt_all[slot][position / page_size] * page_size + position % page_size,
 *   lens[i] = position + 1, bt[i][j] = bt_all[slot][j] for j < bt_stride.
 * A dummy row gets h = 0, pos = 0, slots = -1 (no cache write), lens = 0 (attention writes a
 * zero row) and bt row 0s.
 * emb [n_emb][H] bf16; bt_all [n_slots][bt_all_stride]; h [n][H] fp32; bt [n][bt_stride]
 * with bt_stride <= bt_all_stride. One block of 128 threads per row. */
cudaError_t cosy_k_llm_decode_prep(cudaStream_t s, const int32_t *in, int n, const cosy_bf16 *emb,
                                   int n_emb, int H, const int32_t *bt_all, int bt_all_stride,
                                   int n_slots, int page_size, float *h, int32_t *pos,
                                   int32_t *slots, int32_t *lens, int32_t *bt, int bt_stride);

/* RoPE (NeoX, head_dim 64) + bf16 conversion + paged KV append, for n_tok tokens:
 *   qkv [n_tok][qkv_stride] fp32 = [q heads (n_qh x 64) | k heads (n_kh x 64) | v heads], bias
 *   included. With a = pos[t] * inv_freq[i] (fp32), i < 32, x1 = x[i], x2 = x[i + 32]:
 *   x[i] = x1 cos a - x2 sin a, x[i + 32] = x2 cos a + x1 sin a for q and k heads;
 *   q[t][h*64 + d] = bf16(rotated q); k_cache[slot][kvh][d] = bf16(rotated k),
 *   v_cache[slot][kvh][d] = bf16(v), slot = slots[t] (< 0: no cache write for that token).
 * pos, slots [n_tok] int32 device; inv_freq [32] fp32 device. One thread per rotated pair. */
cudaError_t cosy_k_llm_rope_append(cudaStream_t s, const float *qkv, int qkv_stride, int n_tok,
                                   int n_qh, int n_kh, const int32_t *pos, const int32_t *slots,
                                   const float *inv_freq, cosy_bf16 *q, int q_stride,
                                   cosy_bf16 *k_cache, cosy_bf16 *v_cache);

/* Gather one sequence's cache rows 0..n_tok-1 into contiguous buffers:
 *   k[t][c] = k_cache[bt[t / page_size] * page_size + t % page_size][c], c < kv_dim (v alike).
 * bt: that sequence's block-table row (device); k, v [n_tok][kv_dim] bf16, kv_dim % 8 == 0.
 * One thread per 16-byte vector. */
cudaError_t cosy_k_llm_kv_gather(cudaStream_t s, const cosy_bf16 *k_cache,
                                 const cosy_bf16 *v_cache, const int32_t *bt, int page_size,
                                 int kv_dim, int n_tok, cosy_bf16 *k, cosy_bf16 *v);

/* ---- skinny GEMM (decode) ------------------------------------------------------------------ */

typedef enum cosy_llm_gemv_in {
  COSY_GEMV_IN_BF16 = 0,    /* x [M][ldx] bf16 (16-byte aligned rows) */
  COSY_GEMV_IN_RMSNORM = 1  /* x [M][ldx] fp32; uses bf16(norm_w[k] * (x[m][k] * rsqrt(mean x^2 + eps))) */
} cosy_llm_gemv_in;

typedef enum cosy_llm_gemv_out {
  COSY_GEMV_STORE_F32 = 0,  /* y[m][n] = dot + bias[n]                      (y fp32 [M][ldy]) */
  COSY_GEMV_ADD_F32 = 1,    /* y[m][n] += dot + bias[n]                     (y fp32, residual) */
  COSY_GEMV_SILU_MUL = 2,   /* W = [gate; up] (N = 2I rows): y[m][j] = bf16(silu(g_j) * u_j), j < I
                               (y bf16 [M][ldy]) */
  COSY_GEMV_QKV_ROPE = 3    /* W = [q; k; v] (N = (n_qh + 2 n_kh) * 64): + bias, RoPE on q/k,
                               q -> y bf16 [M][ldy], k/v -> paged cache rows slots[m] (as
                               cosy_k_llm_rope_append, with pos/slots/inv_freq) */
} cosy_llm_gemv_out;

typedef struct cosy_llm_gemv_args {
  int M, N, K;              /* M in {1, 2, 4, 8} rows, W [N][K] bf16 (K % 8 == 0, rows 16-byte aligned) */
  cosy_llm_gemv_in in_mode;
  const void *x;
  int ldx;
  const float *norm_w;      /* [K], IN_RMSNORM only */
  float eps;
  const cosy_bf16 *w;
  const float *bias;        /* [N] or NULL */
  cosy_llm_gemv_out out_mode;
  void *y;
  int ldy;
  /* QKV_ROPE only */
  int n_qh, n_kh;
  const int32_t *pos, *slots;
  const float *inv_freq;    /* [32] */
  cosy_bf16 *k_cache, *v_cache;
} cosy_llm_gemv_args;

/* 1 when cosy_k_llm_gemv supports M rows of K inputs (M in {1, 2, 4, 8}, K % 8 == 0, the bf16 input staged
 * in shared memory fits: M * K * 2 <= 48 KiB, and K <= 8192). */
int cosy_k_llm_gemv_supported(int M, int K);

/* y = epilogue(x W^T (+ bias)) for M in {1, 2, 4, 8} rows, see the modes above. W is read once, x is
 * staged in shared memory as bf16; fp32 accumulation. Graph-capturable (the grid depends only on
 * M, N, K). Dummy rows are harmless (their slots < 0 skip the cache writes). */
cudaError_t cosy_k_llm_gemv(cudaStream_t s, const cosy_llm_gemv_args *a);

#ifdef __cplusplus
}
#endif

#endif
