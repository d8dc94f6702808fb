/* euler.h - launcher of the flow's CFG Euler step (kernels/euler.cu; plain C). Used by
 * lib/gpu/flow.c.
 *
 * Conventions: those of kernels.h (first argument the stream, asynchronous launch; the return
 * value is cudaErrorInvalidValue for arguments a caller could get wrong, else cudaGetLastError()
 * after the launch; nothing allocates, synchronizes, prints or exits; zero rows is a valid no-op;
 * row-major tensors listed outermost first; bf16 stored as its bit pattern cosy_bf16; all
 * arithmetic in fp32, bf16 outputs rounded to nearest-even once at the store). */
#ifndef COSY_EULER_H
#define COSY_EULER_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Euler step with classifier-free guidance (upstream's fp32 order):
 *   x[i] = x[i] + dt * (c1 * vc[i] - c2 * vu[i])   for i < n (all fp32).
 * dev_dt: NULL, or a device float read when the kernel runs that replaces dt (so that one
 * captured launch serves every Euler step). */
cudaError_t cosy_k_flow_euler(cudaStream_t s, float *x, const float *vc, const float *vu,
                              int64_t n, float dt, const float *dev_dt, float c1, float c2);

#ifdef __cplusplus
}
#endif

#endif
