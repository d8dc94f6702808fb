/* flow.h - the flow decoder (CausalMaskedDiffWithDiT: speaker affine, token embedding,
 * PreLookahead, 10-step cosine Euler CFM with CFG, DiT estimator) on the GPU. Same semantics,
 * layouts and argument checks as the CPU reference lib/ref/flow.h; bf16 weights and activations
 * with fp32 accumulation, fp32 Euler state / CFG / norm statistics / residual stream.
 *
 * A gpu_flow lives on one cosy_gpu and uses its stream and GEMM context; it is NOT thread-safe
 * (one caller at a time). Its device memory is taken from the cosy_gpu budget at create and is
 * released with the cosy_gpu (cosy_gpu_free); gpu_flow_free releases the host side and the
 * CUDA graphs. */
#ifndef COSY_GPU_FLOW_H
#define COSY_GPU_FLOW_H

#include <stdint.h>

#include "cosyvoice.h"
#include "gpu/gpu.h"
#include "model.h"

typedef struct gpu_flow gpu_flow;

/* Upload the flow weights of m (m may be freed afterwards) and plan every buffer for calls of up
 * to max_frames mel frames (prompt included; 1 <= max_frames <= the model's noise frames). */
cosy_status gpu_flow_create(cosy_gpu *g, const cosy_model *m, int max_frames, gpu_flow **out);
/* NULL is a no-op. */
void gpu_flow_free(gpu_flow *f);

/* Exactly ref_flow_infer's contract (host inputs; *mel malloc'd host CHANNELS-FIRST
 * [80][*n_frames], prompt frames removed). Additionally N = 2 * (tokens used) must not exceed
 * max_frames (COSY_ERR_INVALID_ARG). cancel is polled on the host before the Euler steps are
 * enqueued (they then run back to back on the GPU, as one CUDA graph from the second call of an
 * (N, streaming) pair on, with no host synchronization; with graphs off it is polled before
 * each step is enqueued). */
cosy_status gpu_flow_infer(gpu_flow *f, const int32_t *tokens, int n_prompt, int n_gen,
                           const float *prompt_mel, int n_prompt_frames, const float *spk,
                           int streaming, int finalize, const volatile int *cancel, float **mel,
                           int *n_frames);

/* The estimator alone, host in/out like ref_flow_estimator (x, mu, cond, out [B][80][N];
 * t [B]; spks [B][80]); 1 <= B <= 1024, 1 <= N <= max_frames. Rows run two at a time. */
cosy_status gpu_flow_estimator(gpu_flow *f, int B, int N, const float *x, const float *mu,
                               const float *t, const float *spks, const float *cond,
                               int streaming, float *out);

/* Tests / benchmarks: enable (default) or disable the CUDA-graph capture of the Euler loop
 * (disabled: the same launches go straight to the stream). Drops the cached graphs. */
void gpu_flow_set_graphs(gpu_flow *f, int enable);

#endif
