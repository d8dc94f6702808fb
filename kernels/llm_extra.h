/* llm_extra.h - CUDA kernels specific to the GPU speech-token LLM (lib/gpu/llm.c); plain C
 * launchers, same conventions as kernels.h (stream first, asynchronous, cudaErrorInvalidValue for
 * bad arguments, else cudaGetLastError() after the launch; nothing allocates, synchronizes,
 * prints or exits; zero rows is a no-op). head_dim is fixed at 64 (Qwen2-0.5B geometry).
 *
 * Precision scheme of the LLM: weights bf16, every activation fp32. Where a cuBLASLt bf16 GEMM
 * consumes an fp32 activation x, x is given as two bf16 rows, hi = bf16(x) and lo = bf16(x - hi)
 * (x = hi + lo to ~2^-17 relative), stacked as 2M rows [hi rows; lo rows], so ONE GEMM of 2M rows
 * reads the weights once and returns y_hi and y_lo, whose sum the next kernel forms
 * (y = y_hi + y_lo = W x to fp32 accuracy). The KV cache is fp32.
 *
 * Paged KV cache layout (as kernels.h): per layer one K and one V array
 *   cache[page][page_size][n_kh][64] fp32; token t of a sequence sits at cache row
 *   slot = block_table[t / page_size] * page_size + t % page_size.
 *
 * Kernels (math, shapes, thread mapping and numerics in kernels/llm_extra.cu):
 *  - cosy_k_llm_decode_prep: per-step inputs of a batched decode step -> embeddings, positions,
 *    cache slots, context lengths and the batch's block tables (one launch, graph-capturable).
 *  - cosy_k_llm_rope_append: (hi + lo) q|k|v rows + bias, RoPE on q and k, q out, k/v to the
 *    paged cache.
 *  - cosy_k_llm_kv_gather: one sequence's first n_tok cache rows -> contiguous K and V.
 *  - cosy_k_llm_norm_split: residual add of a pending (hi + lo) delta, RMSNorm, hi/lo split.
 *  - cosy_k_llm_split, cosy_k_llm_silu_split, cosy_k_llm_add: hi/lo helpers.
 *  - cosy_k_llm_gemv: skinny GEMM for M in {1, 2, 4, 8} rows (decode) on fp32 activations,
 *    optionally fused with the RMSNorm of its input and with the layer's epilogue (residual add,
 *    SiLU gate, RoPE + KV append); optional programmatic dependent launch.
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
 * zero row) and a bt row of 0s.
 * emb [n_emb][H] bf16; bt_all [n_slots][bt_all_stride]; h [n][H] fp32; bt [n][bt_stride]
 * with bt_stride <= bt_all_stride. */
cudaError_t cosy_k_llm_decode_prep(cudaStream_t s, const int32_t *in, int n, const cosy_bf16 *emb,
                                   int n_emb, int H, const int32_t *bt_all, int bt_all_stride,
                                   int n_slots, int page_size, float *h, int32_t *pos,
                                   int32_t *slots, int32_t *lens, int32_t *bt, int bt_stride);

/* q|k|v of n_tok tokens: x[t][c] = qkv[t][c] (+ qkv_lo[t][c] when qkv_lo != NULL) (+ bias[c]),
 * both [n_tok][qkv_stride] fp32 = [q heads (n_qh x 64) | k heads (n_kh x 64) | v heads].
 * NeoX RoPE (head_dim 64) on q and k heads: with a = pos[t] * inv_freq[i] (fp32), i < 32,
 *   x1 = x[i], x2 = x[i + 32]: x[i] = x1 cos a - x2 sin a, x[i + 32] = x2 cos a + x1 sin a.
 * q[t][h*64 + d] = rotated q; k_cache[slot][kvh][d] = rotated k, v_cache[slot][kvh][d] = v with
 * slot = slots[t] (< 0: no cache write for that token). All fp32.
 * pos, slots [n_tok] int32 device; inv_freq [32] fp32 device; bias [q + 2 kv] fp32 or NULL. */
cudaError_t cosy_k_llm_rope_append(cudaStream_t s, const float *qkv, const float *qkv_lo,
                                   int qkv_stride, const float *bias, int n_tok, int n_qh,
                                   int n_kh, const int32_t *pos, const int32_t *slots,
                                   const float *inv_freq, float *q, int q_stride, float *k_cache,
                                   float *v_cache);

/* Gather one sequence's cache rows 0..n_tok-1 into contiguous buffers:
 *   k[t][c] = k_cache[bt[t / page_size] * page_size + t % page_size][c], c < kv_dim (v alike).
 * bt: that sequence's block-table row (device); k, v [n_tok][kv_dim] fp32, kv_dim % 4 == 0. */
cudaError_t cosy_k_llm_kv_gather(cudaStream_t s, const float *k_cache, const float *v_cache,
                                 const int32_t *bt, int page_size, int kv_dim, int n_tok, float *k,
                                 float *v);

/* For each of M rows (h, delta, delta_lo [M][H] fp32 contiguous):
 *   h[m] += delta[m] + delta_lo[m]   (only when delta != NULL; then delta_lo must be given too)
 *   y = w * (h[m] * rsqrt(mean(h[m]^2) + eps))      (fp32, Qwen2 RMSNorm)
 *   hi[m] = bf16(y), lo[m] = bf16(y - hi[m])          (hi, lo [M][H] bf16)
 * One block of 256 threads per row. */
cudaError_t cosy_k_llm_norm_split(cudaStream_t s, float *h, const float *delta,
                                  const float *delta_lo, const float *w, float eps, cosy_bf16 *hi,
                                  cosy_bf16 *lo, int M, int H);

/* hi[m][k] = bf16(x[m][k]), lo[m][k] = bf16(x[m][k] - hi[m][k]); x [M][ldx] fp32, hi/lo [M][K]. */
cudaError_t cosy_k_llm_split(cudaStream_t s, const float *x, int ldx, cosy_bf16 *hi,
                             cosy_bf16 *lo, int M, int K);

/* g = gu[m][j] + gu_lo[m][j], u = gu[m][I + j] + gu_lo[m][I + j] (gu, gu_lo [M][2I] fp32),
 * a = silu(g) * u = g / (1 + e^-g) * u; hi[m][j] = bf16(a), lo[m][j] = bf16(a - hi) ([M][I]). */
cudaError_t cosy_k_llm_silu_split(cudaStream_t s, const float *gu, const float *gu_lo, int I,
                                  cosy_bf16 *hi, cosy_bf16 *lo, int M);

/* out[i] = a[i] + b[i], n fp32 values (out may equal a). */
cudaError_t cosy_k_llm_add(cudaStream_t s, const float *a, const float *b, float *out, int64_t n);

/* ---- skinny GEMM (decode) ------------------------------------------------------------------ */

typedef enum cosy_llm_gemv_in {
  COSY_GEMV_IN_F32 = 0,     /* x [M][ldx] fp32 */
  COSY_GEMV_IN_RMSNORM = 1  /* x [M][ldx] fp32; uses norm_w[k] * (x[m][k] * rsqrt(mean_k x^2 + eps)) */
} cosy_llm_gemv_in;

typedef enum cosy_llm_gemv_out {
  COSY_GEMV_STORE_F32 = 0,  /* y[m][n] = dot + bias[n]                      (y fp32 [M][ldy]) */
  COSY_GEMV_ADD_F32 = 1,    /* y[m][n] += dot + bias[n]                     (y fp32, residual) */
  COSY_GEMV_SILU_MUL = 2,   /* W = [gate; up] (N = 2I rows): y[m][j] = silu(g_j) * u_j, j < I,
                               g_j = dot_j + bias[j], u_j = dot_{I+j} + bias[I+j] (y fp32
                               [M][ldy]) */
  COSY_GEMV_QKV_ROPE = 3    /* W = [q; k; v] (N = (n_qh + 2 n_kh) * 64): + bias, RoPE on q/k,
                               q -> y fp32 [M][ldy], k/v -> fp32 paged cache rows slots[m] (as
                               cosy_k_llm_rope_append, with pos/slots/inv_freq) */
} cosy_llm_gemv_out;

typedef struct cosy_llm_gemv_args {
  int M, N, K;              /* M in {1, 2, 4, 8} rows; W [N][K] bf16 (K % 8 == 0, 16-B rows) */
  int groups;               /* 0 or 1: M rows; G > 1: G groups of M rows (rows g*M .. g*M+M-1
                               of x, y, pos and slots), one grid; a row's result does not depend
                               on M or G (the same reduction order), so the decode step is batch-
                               invariant when every bucket runs here */
  cosy_llm_gemv_in in_mode;
  const float *x;           /* 16-byte aligned, ldx % 4 == 0 */
  int ldx;
  const float *norm_w;      /* [K], IN_RMSNORM only (16-byte aligned) */
  float eps;
  const cosy_bf16 *w;
  const float *bias;        /* [N] or NULL */
  cosy_llm_gemv_out out_mode;
  float *y;
  int ldy;
  /* QKV_ROPE only */
  int n_qh, n_kh;
  const int32_t *pos, *slots;
  const float *inv_freq;    /* [32] */
  float *k_cache, *v_cache;
  /* 1: launch as a programmatic dependent of the previous kernel on the stream (the weight
   * stream starts before that kernel has finished; everything it produced is read only after
   * griddepcontrol.wait). Needs sm_90; ignored (plain launch) elsewhere. */
  int pdl;
} cosy_llm_gemv_args;

/* 1 when cosy_k_llm_gemv supports M rows of K inputs (M in {1, 2, 4, 8}, K % 8 == 0,
 * 8 <= K <= 8192). */
int cosy_k_llm_gemv_supported(int M, int K);

/* y = epilogue(x W^T (+ bias)) for M in {1, 2, 4, 8} rows, see the modes above. W is read once
 * (streamed into registers first), x through the L1 cache; fp32 accumulation. Graph-capturable
 * (the grid depends only on M, N, K). Dummy rows are harmless (slots < 0 skip cache writes). */
cudaError_t cosy_k_llm_gemv(cudaStream_t s, const cosy_llm_gemv_args *a);

#ifdef __cplusplus
}
#endif

#endif
