/* flow_extra.h - launchers of the flow decoder's own CUDA kernels (kernels/flow_extra.cu; plain C,
 * callable from C and C++). Used by lib/gpu/flow.c.
 *
 * Conventions: those of kernels.h (first argument the stream, asynchronous launch; the return
 * value is cudaErrorInvalidValue for arguments a caller could get wrong, else cudaGetLastError()
 * after the launch; nothing allocates, synchronizes, prints or exits; zero rows is a valid no-op;
 * row-major tensors listed outermost first; bf16 stored as its bit pattern cosy_bf16; all
 * arithmetic in fp32, bf16 outputs rounded to nearest-even once at the store).
 *
 * Layout of the DiT activations here: frame-major [B][N][C] (B = CFG / batch rows, N frames,
 * C = 1024 channels in the full model). The per-row AdaLN vectors are fp32 rows of a modulation
 * table: element d of row b of a chunk is chunk[b * mod_bstride + d]; mod_bstride = 0 lets every
 * batch row share one vector (the Euler/CFG batch: both rows see the same t).
 */
#ifndef COSY_FLOW_EXTRA_H
#define COSY_FLOW_EXTRA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Gated residual + LayerNorm (no affine, eps) + AdaLN modulation, one pass:
 *   if a != NULL:  h[b][n][d] += gate[b*mod_bstride + d] * (a[b][n][d] + abias[d])
 *                  (h stored back, fp32; abias may be NULL = 0: the bias of the GEMM that made a)
 *   y[b][n][d] = (h - mean) / sqrt(var + eps) * (1 + scale[b*mod_bstride + d])
 *                + shift[b*mod_bstride + d]                              (bf16)
 * mean / biased var over d of the (updated) row. h, a [B][N][D] fp32; y [B][N][D] bf16.
 * D % 4 == 0, D <= 4096; h, a, abias, gate, scale, shift 16-byte aligned, y 8-byte aligned;
 * mod_bstride % 4 == 0. gate is needed when a != NULL; scale and shift are required. */
cudaError_t cosy_k_flow_resid_ln(cudaStream_t s, float *h, const float *a, const float *abias,
                                 const float *gate, const float *scale, const float *shift,
                                 int64_t mod_bstride, cosy_bf16 *y, int B, int N, int D,
                                 float eps);

/* QKV epilogue: bias, then the DiT's interleaved RoPE on q and k (pairs (2i, 2i+1) of their
 * first rot_dim columns = head 0), in place on qkv [B][N][3D] bf16 (q | k | v column blocks):
 *   x[c] = x[c] + bias[c]   (c < 3D, fp32, one rounding at the store)
 *   q, k, pair i < rot_dim/2:  x[2i] = x[2i] cos a - x[2i+1] sin a;  x[2i+1] = x[2i+1] cos a + x[2i] sin a
 * with (cos a, sin a) = cos_sin[n][i] ([N][rot_dim/2][2] fp32; a = n * inv_freq[i] made by the
 * caller). D % 8 == 0, rot_dim % 8 == 0, qkv and bias 16-byte aligned. */
cudaError_t cosy_k_flow_qkv_post(cudaStream_t s, cosy_bf16 *qkv, const float *bias,
                                 const float *cos_sin, int B, int N, int D, int rot_dim);

/* x = gelu_tanh(x + bias) in place (gelu_tanh(u) = 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))))
 * on x [rows][F] bf16, bias [F] fp32; F % 8 == 0, x and bias 16-byte aligned. */
cudaError_t cosy_k_flow_bias_gelu(cudaStream_t s, cosy_bf16 *x, const float *bias, int rows,
                                  int F);

/* h[b][n][d] = xp[b*xp_bstride + n*D + d] + hc[b][n][d];  hb = bf16(h).
 * xp fp32 (xp_bstride = 0: one [N][D] block shared by every row, else N*D), hc, h [B][N][D]
 * fp32, hb [B][N][D] bf16. D % 4 == 0 and 16-byte aligned pointers. */
cudaError_t cosy_k_flow_add_rows(cudaStream_t s, const float *xp, int64_t xp_bstride,
                                 const float *hc, float *h, cosy_bf16 *hb, int B, int N, int D);

/* Causal grouped Conv1d (left pad K-1, no right pad) + bias + Mish, on frame-major data:
 *   z[b][n][c] = bias[c] + sum_{k<K} sum_{i<cin} x[b][n+k-(K-1)][g*cin + i] * w[c][k][i]
 *   (g = c / cin, cin = C / G, x[b][<0] = 0);  m = mish(z) = z tanh(log1p(e^z))
 *   y != NULL: y[b][n][c] = bf16(m);   h != NULL: h[b][n][c] += m (fp32)   (exactly one of them)
 * x [B][N][C] bf16, w [C][K][cin] bf16 (PyTorch's [C][cin][K] permuted), bias [C] fp32.
 * cin = 64 with 16-byte aligned x/w and K <= 64 takes a tensor-core path (mma.sync bf16, fp32
 * accumulation); any other geometry a plain fp32 path. */
cudaError_t cosy_k_flow_conv_pos(cudaStream_t s, const cosy_bf16 *x, const cosy_bf16 *w,
                                 const float *bias, cosy_bf16 *y, float *h, int B, int N, int C,
                                 int G, int K);

/* The constant part of the DiT input rows: out[n] = [cond[n], mu[n], spk] (3M floats per frame);
 * cond, mu [N][M] fp32 and spk [M] fp32, each may be NULL (= zeros). out [N][3M] fp32. */
cudaError_t cosy_k_flow_pack_cond(cudaStream_t s, float *out, const float *cond, const float *mu,
                                  const float *spk, int N, int M);

/* PreLookahead residual + repeat_interleave: mu[n][c] = pre[n/ratio][c] + xe[n/ratio][c].
 * pre, xe [>= ceil(N/ratio)][M] fp32 (row stride M); mu [N][M] fp32. */
cudaError_t cosy_k_flow_mu(cudaStream_t s, float *mu, const float *pre, const float *xe,
                           int ratio, int N, int M);

/* Euler step with classifier-free guidance (upstream's fp32 order):
 *   x[i] = x[i] + dt * (c1 * vc[i] - c2 * vu[i])   for i < n (all fp32). */
cudaError_t cosy_k_flow_euler(cudaStream_t s, float *x, const float *vc, const float *vu,
                              int64_t n, float dt, float c1, float c2);

/* QKV epilogue as cosy_k_flow_qkv_post for B = 1, with the RoPE position of row i read from
 * pos[i] (the packed rows of a batched call hold frames of several requests) instead of i. */
cudaError_t cosy_k_flow_qkv_post_pos(cudaStream_t s, cosy_bf16 *qkv, const float *bias,
                                     const float *cos_sin, const int32_t *pos, int rows, int D,
                                     int rot_dim);

/* Rows between a packed batch and the cache pages (kernels/flow_pack.cu; offsets in elements of
 * the pool, per row, computed by the host; see that file for the exact copies):
 * x_gather: dst [rows][M] from cached rows (src >= 0: pool + src + step_off), rows of this call
 *   (src <= -2: xnew[-2 - src]) or zeros (src == -1). x_store: pool + dst[i] + step_off =
 *   xnew[i] where dst[i] >= 0. kv_store: K and V columns of qkv [rows][3D] bf16 to pool +
 *   dst[i] + layer_off (+ v_off for V) where dst[i] >= 0 (16-byte aligned, D % 8 == 0).
 *   rows_gather_f32: dst[i] = src[map[i]] (fp32 rows of D, D % 4 == 0). rows_zero_bf16: the
 *   listed rows of x [.][D] become 0 (D % 8 == 0). */
cudaError_t cosy_k_flow_x_gather(cudaStream_t s, float *dst, const int64_t *src, const float *pool,
                                 int64_t step_off, const float *xnew, int rows, int M);
cudaError_t cosy_k_flow_x_store(cudaStream_t s, float *pool, const int64_t *dst, int64_t step_off,
                                const float *xnew, int rows, int M);
cudaError_t cosy_k_flow_kv_store(cudaStream_t s, cosy_bf16 *pool, const int64_t *dst,
                                 int64_t layer_off, int64_t v_off, const cosy_bf16 *qkv, int rows,
                                 int D);
cudaError_t cosy_k_rows_gather_f32(cudaStream_t s, float *dst, const float *src,
                                   const int32_t *map, int rows, int D);
cudaError_t cosy_k_rows_zero_bf16(cudaStream_t s, cosy_bf16 *x, const int32_t *rows, int n_rows,
                                  int D);

/* Block-causal (or full) DiT attention over a packed batch whose earlier keys sit in cache pages
 * (kernels/attention.cu). Segment g (a request's CFG row) has queries at packed rows
 * [q_row0, q_row0 + n_q) of qkv [.][3D] bf16 (q | k | v column blocks, already biased and
 * rotated) for absolute frames [cached, cached + n_q); its keys are frames [0, Lk): frames below
 * `cached` are rows of cache pages (page ptab[f / page_frames], row f % page_frames, at element
 * offset pool + page * page_elems + layer_off + (2 row + kv) * page_frames * D + (f % page_frames)
 * * D, kv = 0 for K, 1 for V), later frames are the packed rows q_row0 + (f - cached). Query
 * frame i sees keys f < min(Lk, (i / chunk + 1) chunk) (full: f < Lk). out [.][D] bf16 at the
 * query rows. 16 heads of 64 in the model; head_dim must be 64. */
typedef struct cosy_k_dit_seg {
  int32_t q_row0, n_q, cached, Lk;
  int32_t ptab0;     /* index of the segment's first page id in ptab */
  int32_t row;       /* CFG row (0 conditional, 1 unconditional) */
  int32_t full;      /* 1: full attention */
  int32_t pad_;
} cosy_k_dit_seg;
cudaError_t cosy_k_attn_dit_paged(cudaStream_t s, const cosy_bf16 *qkv, int D, int n_heads,
                                  const cosy_k_dit_seg *segs, const int32_t *tiles, int n_tiles,
                                  const cosy_bf16 *pool, int64_t page_elems, int64_t layer_off,
                                  int page_frames, const int32_t *ptab, cosy_bf16 *out, int chunk,
                                  float scale);
/* tiles: int32 pairs (segment, first query of the tile within the segment), 64 queries a tile */
#define COSY_K_DIT_TILE 64

#ifdef __cplusplus
}
#endif

#endif
