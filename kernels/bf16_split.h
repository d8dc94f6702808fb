/* bf16_split.h - hi/lo bf16 splitting of fp32 activations (kernels/bf16_split.cu; plain C
 * launchers), the GPU LLM's way to feed fp32 activations to bf16 cuBLASLt GEMMs. Used by
 * lib/gpu/llm.c.
 *
 * Conventions: those of kernels.h (stream first, asynchronous, cudaErrorInvalidValue for bad
 * arguments, else cudaGetLastError() after the launch; nothing allocates, synchronizes, prints or
 * exits; zero rows is a no-op). head_dim is fixed at 64 (Qwen2-0.5B geometry).
 *
 * Precision scheme of the LLM: weights bf16, every activation fp32. Where a cuBLASLt bf16 GEMM
 * consumes an fp32 activation x, x is given as two bf16 rows, hi = bf16(x) and lo = bf16(x - hi)
 * (x = hi + lo to ~2^-17 relative), stacked as 2M rows [hi rows; lo rows], so ONE GEMM of 2M rows
 * reads the weights once and returns y_hi and y_lo, whose sum the next kernel forms
 * (y = y_hi + y_lo = W x to fp32 accuracy). The KV cache is fp32.
 */
#ifndef COSY_BF16_SPLIT_H
#define COSY_BF16_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif
