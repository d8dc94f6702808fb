/* flow_pack.h - launchers of the flow cache's row copies (kernels/flow_pack.cu; plain C): rows
 * between a packed batch of DiT rows and the flow's cache pages. Used by lib/gpu/flow.c.
 *
 * Conventions: those of kernels.h (first argument the stream, asynchronous launch; the return
 * value is cudaErrorInvalidValue for arguments a caller could get wrong, else cudaGetLastError()
 * after the launch; nothing allocates, synchronizes, prints or exits; zero rows is a valid no-op;
 * row-major tensors listed outermost first; bf16 stored as its bit pattern cosy_bf16; all
 * arithmetic in fp32, bf16 outputs rounded to nearest-even once at the store). */
#ifndef COSY_FLOW_PACK_H
#define COSY_FLOW_PACK_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows between a packed batch and the cache pages (kernels/flow_pack.cu; offsets in elements of
 * the pool, per row, computed by the host; see that file for the exact copies):
 * x_gather: dst [rows][M] from cached rows (src >= 0: pool + src + step_off), rows of this call
 *   (src <= -2: xnew[-2 - src]) or zeros (src == -1). x_store: pool + dst[i] + step_off =
 *   xnew[i] where dst[i] >= 0. kv_store: K and V columns of qkv [rows][3D] bf16 to pool +
 *   dst[i] + layer_off (+ v_off for V) where dst[i] >= 0 (16-byte aligned, D % 8 == 0).
 *   rows_gather_f32: dst[i] = src[map[i]] (fp32 rows of D, D % 4 == 0). rows_zero_bf16: the
 *   listed rows of x [.][D] become 0 (D % 8 == 0).
 * dev_off (x_gather, x_store, kv_store; NULL: none): a device int64 added to step_off /
 * layer_off when the kernel runs (kv_store: keep the sum a multiple of 8), so that one captured
 * launch serves every Euler step. */
cudaError_t cosy_k_flow_x_gather(cudaStream_t s, float *dst, const int64_t *src, const float *pool,
                                 int64_t step_off, const int64_t *dev_off, const float *xnew,
                                 int rows, int M);
cudaError_t cosy_k_flow_x_store(cudaStream_t s, float *pool, const int64_t *dst, int64_t step_off,
                                const int64_t *dev_off, const float *xnew, int rows, int M);
cudaError_t cosy_k_flow_kv_store(cudaStream_t s, cosy_bf16 *pool, const int64_t *dst,
                                 int64_t layer_off, const int64_t *dev_off, int64_t v_off,
                                 const cosy_bf16 *qkv, int rows, int D);
cudaError_t cosy_k_rows_gather_f32(cudaStream_t s, float *dst, const float *src,
                                   const int32_t *map, int rows, int D);
cudaError_t cosy_k_rows_zero_bf16(cudaStream_t s, cosy_bf16 *x, const int32_t *rows, int n_rows,
                                  int D);

#ifdef __cplusplus
}
#endif

#endif
