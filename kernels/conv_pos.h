/* conv_pos.h - launcher of the DiT's convolutional position embedding (kernels/conv_pos.cu;
 * plain C). Used by lib/gpu/flow.c. Layout: frame-major [B][N][C], as dit_elementwise.h.
 *
 * Conventions: those of kernels.h (first argument the stream, asynchronous launch; the return
 * value is cudaErrorInvalidValue for arguments a caller could get wrong, else cudaGetLastError()
 * after the launch; nothing allocates, synchronizes, prints or exits; zero rows is a valid no-op;
 * row-major tensors listed outermost first; bf16 stored as its bit pattern cosy_bf16; all
 * arithmetic in fp32, bf16 outputs rounded to nearest-even once at the store). */
#ifndef COSY_CONV_POS_H
#define COSY_CONV_POS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif
