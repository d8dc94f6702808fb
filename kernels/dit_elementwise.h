/* dit_elementwise.h - launchers of the DiT's fused elementwise kernels (kernels/dit_elementwise.cu;
 * plain C, callable from C and C++). Used by lib/gpu/flow.c.
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
 *
 * pdl (resid_ln, qkv_post*): non-zero launches the kernel as a programmatic dependent
 * of the previous kernel on s (programmatic dependent launch: its launch overlaps the
 * predecessor's end; same results). Pass it only where the device has it (cosy_kdev.pdl,
 * kdevice.h); 0: a plain launch.
 */
#ifndef COSY_DIT_ELEMENTWISE_H
#define COSY_DIT_ELEMENTWISE_H

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
                                 float eps, int pdl);

/* QKV epilogue: bias, then the DiT's interleaved RoPE on q and k (pairs (2i, 2i+1) of their
 * first rot_dim columns = head 0), in place on qkv [B][N][3D] bf16 (q | k | v column blocks):
 *   x[c] = x[c] + bias[c]   (c < 3D, fp32, one rounding at the store)
 *   q, k, pair i < rot_dim/2:  x[2i] = x[2i] cos a - x[2i+1] sin a;  x[2i+1] = x[2i+1] cos a + x[2i] sin a
 * with (cos a, sin a) = cos_sin[n][i] ([N][rot_dim/2][2] fp32; a = n * inv_freq[i] made by the
 * caller). D % 8 == 0, rot_dim % 8 == 0, qkv and bias 16-byte aligned. */
cudaError_t cosy_k_flow_qkv_post(cudaStream_t s, cosy_bf16 *qkv, const float *bias,
                                 const float *cos_sin, int B, int N, int D, int rot_dim,
                                 int pdl);

/* h[b][n][d] = xp[b*xp_bstride + n*D + d] + hc[b][n][d];  hb = bf16(h).
 * xp fp32 (xp_bstride = 0: one [N][D] block shared by every row, else N*D), hc, h [B][N][D]
 * fp32, hb [B][N][D] bf16. D % 4 == 0 and 16-byte aligned pointers. */
cudaError_t cosy_k_flow_add_rows(cudaStream_t s, const float *xp, int64_t xp_bstride,
                                 const float *hc, float *h, cosy_bf16 *hb, int B, int N, int D);

/* The constant part of the DiT input rows: out[n] = [cond[n], mu[n], spk] (3M floats per frame);
 * cond, mu [N][M] fp32 and spk [M] fp32, each may be NULL (= zeros). out [N][3M] fp32. */
cudaError_t cosy_k_flow_pack_cond(cudaStream_t s, float *out, const float *cond, const float *mu,
                                  const float *spk, int N, int M);

/* PreLookahead residual + repeat_interleave: mu[n][c] = pre[n/ratio][c] + xe[n/ratio][c].
 * pre, xe [>= ceil(N/ratio)][M] fp32 (row stride M); mu [N][M] fp32. */
cudaError_t cosy_k_flow_mu(cudaStream_t s, float *mu, const float *pre, const float *xe,
                           int ratio, int N, int M);

/* QKV epilogue as cosy_k_flow_qkv_post for B = 1, with the RoPE position of row i read from
 * pos[i] (the packed rows of a batched call hold frames of several requests) instead of i. */
cudaError_t cosy_k_flow_qkv_post_pos(cudaStream_t s, cosy_bf16 *qkv, const float *bias,
                                     const float *cos_sin, const int32_t *pos, int rows, int D,
                                     int rot_dim, int pdl);

/* cosy_k_flow_qkv_post_pos, and the K and V columns of each row i with dst[i] >= 0 also written
 * (the values just stored in qkv, bit for bit) to the flow cache's pages, as
 * cosy_k_flow_kv_store does after it (kernels/flow_pack.h):
 *   pool[dst[i] + off + c] = qkv[i][D + c],  pool[dst[i] + off + v_off + c] = qkv[i][2D + c],
 *   c < D, off = layer_off + (*dev_off when dev_off is not NULL, read on the device).
 * layer_off, v_off, dst[i] and *dev_off multiples of 8; pool 16-byte aligned. One launch and
 * one pass over the K/V columns instead of two. */
cudaError_t cosy_k_flow_qkv_post_store(cudaStream_t s, cosy_bf16 *qkv, const float *bias,
                                      const float *cos_sin, const int32_t *pos, int rows, int D,
                                      int rot_dim, cosy_bf16 *pool, const int64_t *dst,
                                      int64_t layer_off, const int64_t *dev_off, int64_t v_off,
                                      int pdl);

#ifdef __cplusplus
}
#endif

#endif
