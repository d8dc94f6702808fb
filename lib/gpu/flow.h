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

/* ---- batched calls with per-request caches (the scheduler's path) ----
 * gpu_flow_pool takes `bytes` (0 = everything left in the budget) of cache pages after planning
 * the packed buffers of a batch (up to max_frames new frames per CFG row and 64 requests); once
 * per gpu_flow, before any other call below. A page holds one 50-frame block of one request
 * (gpu_flow_page_bytes: the K/V rows of every layer, CFG row and Euler step, and the Euler state). */
size_t gpu_flow_page_bytes(const gpu_flow *f);
cosy_status gpu_flow_pool(gpu_flow *f, size_t bytes);
/* The knob COSY_FLOW_TIMING (a measurement aid): one line per packed flow batch into the file
 * `path` (its time, jobs, first calls, new frames, ext rows, attention tiles, graphs replayed /
 * captured / launched, host and device ms). NULL or "": none. */
void gpu_flow_set_timing(gpu_flow *f, const char *path);
/* The knob COSY_FLOW_ATTN_SPLIT (a measurement aid): the packed batches' attention splits each
 * query tile's keys over n_split blocks (cosy_k_attn_dit_paged_split, kernels.h), n_split 2..8;
 * GPU_FLOW_ATTN_AUTO: over a part count chosen per segment from its key count
 * (cosy_k_attn_dit_paged_auto; nothing allocated); 0 or 1: the one-block kernel (the default).
 * Call it before the first gpu_flow_batch (a step graph keeps the kernel it was captured with).
 * Returns the value now in effect: 0 where the device has no thread-block clusters or n_split is
 * out of range. */
#define GPU_FLOW_ATTN_AUTO (-1)
int gpu_flow_set_attn_split(gpu_flow *f, int n_split);
/* The knob COSY_FLOW_ATTN_V2 (a measurement aid): the packed batches' attention by
 * cosy_k_attn_dit_paged_v2 (kernels.h: the one-block kernel's bits, less work around them) with
 * query tiles of tile_q = 64 or 128 frames, or GPU_FLOW_ATTN_V2_AUTO: 128 for a batch whose
 * 128-query tiles (blocks of 8 warps) hold no more warps than its 64-query tiles would (blocks of
 * 4), else 64; 0: off (the one-block kernel; the engine sets 64 unless the knob says otherwise,
 * lib/knobs.c). COSY_FLOW_ATTN_SPLIT, when on, takes precedence. Call it
 * before the first gpu_flow_batch. Returns the value now in effect (0 for another tile_q). */
#define GPU_FLOW_ATTN_V2_AUTO 1
int gpu_flow_set_attn_v2(gpu_flow *f, int tile_q);
/* The knob COSY_FLOW_PAD=0 (a measurement aid): a packed batch runs at its exact sizes instead
 * of sizes rounded up so that its step graph is reused (lib/gpu/flow.c "Padded sizes"; on by
 * default). Call it before the first gpu_flow_batch. */
void gpu_flow_set_pad(gpu_flow *f, int on);
/* GEMM plans of ff1 that run without the fused bias + GELU epilogue because cuBLASLt refused it
 * (kernels/gemm.cu cosy_gemm_epi_fallbacks; the GEMM, then a bias + GELU kernel: same results,
 * one launch more); 0 expected. */
long gpu_flow_ff1_fallbacks(const gpu_flow *f);
/* GEMM plans of ff1 fused with the bias rounded to bf16 because cuBLASLt refused the fp32 bias
 * in the epilogue (kernels/gemm.cu cosy_gemm_epi_bias_y). */
long gpu_flow_ff1_bias_bf16(const gpu_flow *f);
int gpu_flow_pages_total(const gpu_flow *f);
int gpu_flow_pages_free(const gpu_flow *f);
/* pages held by the voice table: the prompt-only blocks of the voices seen (blocks 50 b .. 50 b + 49
 * with 50 b + 49 <= 2 P - 7 depend on the prompt alone, so every request of the voice shares the
 * first request's pages and starts after them); an unused voice's pages are dropped when the pool
 * runs out */
int gpu_flow_pages_voice(const gpu_flow *f);

/* One utterance: the prompt (tokens and frame-major mel [2 n_prompt][80] stay the caller's and
 * must outlive the request), the speaker embedding (copied), at most max_gen generated tokens
 * (COSY_ERR_INVALID_ARG when prompt + max_gen + 3 look-ahead tokens exceed max_frames). No page
 * is taken here: calls take them as they commit blocks, and a request whose pages cannot be had
 * recomputes instead (so a call never fails for want of pages). */
typedef struct gpu_flow_req gpu_flow_req;
cosy_status gpu_flow_req_open(gpu_flow *f, const int32_t *prompt_tokens, int n_prompt,
                              const float *prompt_mel, const float *spk, int max_gen,
                              gpu_flow_req **out);
void gpu_flow_req_close(gpu_flow *f, gpu_flow_req *q); /* pages back to the pool; NULL no-op */
/* the pages q holds (its voice's shared prompt-only pages included); 0 for NULL */
int gpu_flow_req_pages(const gpu_flow_req *q);

/* One call of a batch, as ref_flow_infer with the request's prompt: tokens = prompt then
 * generated (n_gen used, incl. the 3 look-ahead tokens when !finalize), block-causal (full = 0)
 * or full attention; mel (frame-major [n_frames][80], the caller's) receives generated frames
 * [frame_from, frame_from + n_frames). A block-causal, non-final call whose frame_from is the end
 * of the previous call's frames reuses that call's blocks (exact: flow.c explains why) and keeps
 * the blocks it completes for the next call. */
typedef struct gpu_flow_call {
  gpu_flow_req *q;
  const int32_t *tokens;
  int n_gen, finalize, full;
  int frame_from, n_frames;
  float *mel;
} gpu_flow_call;
/* Runs the calls (distinct requests) packed together, in as few batches as the buffers allow;
 * waits for the device. cancel (may be NULL) is polled between batches. */
cosy_status gpu_flow_batch(gpu_flow *f, gpu_flow_call *calls, int n, const volatile int *cancel);

/* Tests / benchmarks: enable (default) or disable the CUDA-graph capture of the Euler loop
 * (disabled: the same launches go straight to the stream). Drops the cached graphs. */
void gpu_flow_set_graphs(gpu_flow *f, int enable);

#endif
