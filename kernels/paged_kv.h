/* paged_kv.h - the GPU LLM's paged KV cache kernels (kernels/paged_kv.cu; plain C launchers):
 * decode-step preparation and RoPE + K/V append to the pages.
 * Used by lib/gpu/llm.c (the host side of the pages: lib/gpu/kv_pool.h).
 *
 * Conventions: those of kernels.h (stream first, asynchronous, cudaErrorInvalidValue for bad
 * arguments, else cudaGetLastError() after the launch; nothing allocates, synchronizes, prints or
 * exits; zero rows is a no-op). head_dim is fixed at 64 (Qwen2-0.5B geometry).
 *
 * Paged KV cache layout (as kernels.h): per layer one K and one V array
 *   cache[page][page_size][n_kh][64] fp32; token t of a sequence sits at cache row
 *   slot = block_table[t / page_size] * page_size + t % page_size.
 */
#ifndef COSY_PAGED_KV_H
#define COSY_PAGED_KV_H

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


#ifdef __cplusplus
}
#endif

#endif
