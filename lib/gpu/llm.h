/* llm.h - the CosyVoice3 speech-token LLM (Qwen2) on the GPU: bf16 weights, paged KV cache,
 * chunked prefill, batched decode steps replayed as CUDA graphs (built only with CUDA=1).
 *
 * Same math as lib/ref/llm.h (the CPU reference defines "correct"): lm_input = [sos, prompt text,
 * tts text, task_id, prompt speech]; per layer h += Wo attn(rope(q), rope(k), v) with q|k|v
 * biases, h += Wd (silu(Wg n2(h)) * Wu n2(h)); RMSNorm eps from the model; NeoX RoPE with theta
 * from the model (1e6); GQA; final norm; logp = log_softmax(llm_decoder h). head_dim must be 64.
 *
 * Precision (a choice of this project; the reference is fp32): weights bf16 (q|k|v fused into one
 * [q + 2 kv][H] matrix with one fp32 bias, gate|up into one [2 I][H]), every activation fp32:
 * the residual stream, RMSNorm (statistics and output), q/k/v, the KV cache, attention, the
 * SiLU product, logits and log_softmax. Where a cuBLASLt bf16 GEMM consumes an fp32 activation,
 * the activation goes in as a hi/lo pair of bf16 rows in ONE GEMM of twice the rows (weights
 * still read once; x = hi + lo to ~2^-17), so the only rounding left is that of the weights.
 * Why: with bf16 activations (bf16 GEMM inputs, bf16 q/k/v/KV) the log-probs of the full-size
 * random model differ from the fp32 reference by ~0.1 (a CPU simulation of each rounding point:
 * normalized GEMM inputs alone 0.077, q/k/v alone 0.048, attention output 0.045, gate/up 0.057;
 * all together 0.10-0.12), twice the 5e-2 acceptance bound, and argmax flips in ~10% of the
 * steps. The cost: the KV cache takes 4 bytes per value (24 KiB per position for the full model)
 * and the batched GEMMs do twice the (cheap) tensor-core work; the decode weight stream, which
 * bounds the step time, is unchanged.
 *
 * Paged KV cache: pages of GPU_LLM_PAGE_SIZE positions; one page holds K and V of every layer
 * (layers x 2 x page_size x n_kv_heads x 64 fp32: 384 KiB for the full model). A sequence
 * reserves the pages for its max_len positions at gpu_llm_seq_open, so a later step can never
 * run out; seq_open fails with COSY_ERR_GPU_NO_MEMORY ("KV cache full") when the pool cannot
 * hold it, and the caller queues the request. A sequence holds at most GPU_LLM_MAX_CTX positions.
 *
 * Decode step (gpu_llm_decode): the n sequences are padded to a batch bucket (1, 2, 4, ..., the
 * power of two >= max_seqs) and the longest context to a context bucket (256, 512, ...,
 * GPU_LLM_MAX_CTX); each (batch bucket, context bucket) has one CUDA graph, captured the first
 * time it is needed (that first step runs eagerly) and replayed afterwards. Per-step inputs (token
 * ids, sequence slots, positions) are one cudaMemcpyAsync from pinned memory into a fixed device
 * buffer; a prep kernel derives the embeddings, slot mapping, lengths and block tables from them
 * on the device. The graph ends with the logits; either the log-probs come back with one async
 * copy and one stream sync (logp given), or gpu_llm_sample draws the next tokens on the device
 * (RAS, log_softmax fused) and only the sampled ids and generator states come back. Buckets of
 * up to GPU_LLM_GEMV_DEFAULT = 4 rows (llm.c; gpu_llm_set_tuning changes it) use fused skinny
 * GEMMs (kernels/gemv.h: RMSNorm + projection + RoPE + KV append in one kernel, SiLU gate in the gate|up epilogue, residual adds in the o/down
 * epilogues): 4 kernels plus one attention kernel per layer, all launched as programmatic
 * dependents (sm_90) so each kernel's weight stream starts while its predecessor finishes.
 * Larger buckets use cuBLASLt GEMMs on hi/lo pairs with fused norm / RoPE+append / SiLU kernels.
 * The batch-invariant path (gpu_llm_set_tc; the default where the device runs it) runs every
 * bucket on tensor-core versions of the fused skinny GEMMs and the prefill GEMMs on one algorithm
 * per shape: a sequence's logits then do not depend on the batch, at the measured cost in llm.c
 * (GPU_LLM_TC_DEFAULT).
 *
 * Prefill: gpu_llm_prefill (one sequence) and gpu_llm_prefill_batch (several sequences packed
 * into one forward pass, what the scheduler uses), at most max_prefill positions per call, eager
 * launches (cuBLASLt GEMMs on hi/lo pairs over every piece's rows together; causal attention of
 * all pieces in one launch per layer, kernels.h cosy_k_paged_prefill, reading each sequence's
 * K/V from its cache pages, so a piece sees the sequence's earlier positions).
 *
 * Measured (H100, full-size random model, contexts 120-160; tests/test_gpu_llm.c, commit
 * 6d802bf): decode step (graph replay incl. upload/download) batch 1 0.648 ms (0.73 without
 * PDL, 1.06 via cuBLASLt), with GPU sampling 0.651 ms per token; batch 4 1.03 ms, batch 8
 * 1.10 ms (cuBLASLt), batch 16 1.19 ms, batch 64 1.64 ms; prefill of 120 positions 3.1 ms. The
 * batch-1 step is bound by the chain of 122 dependent kernels (~26.5 us per layer), not by the
 * 0.73 GB weight stream (0.25 ms at the measured 2.96 TB/s).
 *
 * Threading: a gpu_llm is used by one thread at a time (the scheduler's LLM thread); all work
 * goes to the cosy_gpu's stream. The cosy_model must outlive the gpu_llm (text embedding rows
 * are read from it by gpu_llm_build_input). Device memory is taken through cosy_gpu_alloc and is
 * returned only by cosy_gpu_free (gpu_llm_free releases host memory and graphs).
 */
#ifndef COSY_GPU_LLM_H
#define COSY_GPU_LLM_H

#include <stddef.h>
#include <stdint.h>

#include "cosyvoice.h"
#include "gpu/gpu.h"
#include "kernels.h"
#include "model.h"

#define GPU_LLM_PAGE_SIZE 16   /* positions per KV page */
#define GPU_LLM_MAX_CTX 8192   /* positions per sequence at most (max_len of seq_open) */

typedef struct gpu_llm gpu_llm;

/* Uploads weights (NOT the 151936-row text embedding: text rows are gathered on the host by
 * gpu_llm_build_input), plans activations for up to max_seqs sequences decoded together and a
 * prefill of up to max_prefill tokens at once (longer prefills are chunked). max_seqs in
 * [1, 1024], max_prefill in [1, 8192]. At most 4 * max_seqs (>= 16) sequences may be open. */
cosy_status gpu_llm_create(cosy_gpu *g, const cosy_model *m, int max_seqs, int max_prefill,
                           gpu_llm **out);
/* Paged KV cache: take `bytes` (0 = everything left in the budget minus `reserve` bytes) as pages
 * of GPU_LLM_PAGE_SIZE tokens. Once per gpu_llm; fails with COSY_ERR_GPU_NO_MEMORY when not even
 * one page fits. */
cosy_status gpu_llm_reserve_kv(gpu_llm *l, size_t bytes, size_t reserve);
void gpu_llm_free(gpu_llm *l);
int gpu_llm_pages_total(const gpu_llm *l);
int gpu_llm_pages_free(const gpu_llm *l);
size_t gpu_llm_kv_bytes(const gpu_llm *l);

/* host: lm_input = [sos, prompt text, tts text, task_id, prompt speech] in fp32 [L][H], *emb
 * malloc'd (free() it); rows converted from the model file (no fp32 copy of whole tables). Same
 * checks as ref_llm_build_input (ids in range, <|endofprompt|> present). */
cosy_status gpu_llm_build_input(const gpu_llm *l, const int32_t *prompt_text, int n_pt,
                                const int32_t *tts_text, int n_tt, const int32_t *prompt_speech,
                                int n_ps, float **emb, int *L);

/* host: embeddings of a list of items as ref_llm_embed_items (item >= 0: text id; item < 0: speech
 * row -1 - item), fp32 [n][H], *emb malloc'd (free() it). Text streaming builds its input with it. */
cosy_status gpu_llm_embed_items(const gpu_llm *l, const int32_t *items, int n, float **emb);

/* Reserves pages for max_len (1..GPU_LLM_MAX_CTX) positions, *seq gets the sequence id, or fails
 * with COSY_ERR_GPU_NO_MEMORY ("KV cache full" or too many open sequences: the caller queues). */
cosy_status gpu_llm_seq_open(gpu_llm *l, int max_len, int *seq);
/* Returns the sequence's pages to the pool. An id that is not open is ignored. */
void gpu_llm_seq_close(gpu_llm *l, int seq);
/* Positions stored for seq so far (-1 if it is not open). */
int gpu_llm_seq_len(const gpu_llm *l, int seq);

/* Prefill L positions of emb (host fp32 [L][H]) into seq, after the positions it already holds
 * (so a prompt may also be given in several calls). logp_last (host, [speech_vocab], may be NULL)
 * gets the last position's log-probs. Fails (COSY_ERR_INVALID_ARG, nothing stored) when the
 * positions would pass the sequence's max_len. */
cosy_status gpu_llm_prefill(gpu_llm *l, int seq, const float *emb, int L, float *logp_last);

/* Prefill of n (1..max_seqs) distinct open sequences packed into one forward pass: Ls[j]
 * positions of embs[j] (host fp32 [Ls[j]][H]) after the positions seqs[j] already holds; at
 * most max_prefill positions in all. Each row's result does not depend on the other sequences
 * of the call except through the GEMMs' row count (see llm.c on batch invariance). The
 * last position's log-probs of every sequence with want[j] != 0 are left in rows 0..nw-1 (in
 * order; *n_want = nw) for gpu_llm_sample / gpu_llm_logp. Waits for the device. */
cosy_status gpu_llm_prefill_batch(gpu_llm *l, int n, const int *seqs, const float *const *embs,
                                  const int *Ls, const int *want, int *n_want);

/* One decode step for n (1..max_seqs) distinct open sequences at once: tokens[i] (speech token
 * id in [0, speech_vocab), embedded with speech_embedding on the GPU) is appended to seqs[i];
 * logp (host, [n][speech_vocab]) gets the next-token log-probs of each and the call waits for
 * the step; with logp NULL the step is only enqueued (no wait; gpu_llm_sample or gpu_llm_logp
 * then picks the log-probs up, and a failure of the step surfaces there). */
cosy_status gpu_llm_decode(gpu_llm *l, const int *seqs, const int32_t *tokens, int n, float *logp);

/* RAS sampling on the device (kernels.h cosy_k_ras_sample) of rows 0..n-1 of the log-probs the
 * last gpu_llm_prefill (1 row) or gpu_llm_decode (n rows, in its seqs order) computed: rows
 * (host, in/out) carry each row's parameters, history and generator state; on return .token,
 * .status and .rng are filled. COSY_ERR_UNSUPPORTED when a row is beyond the kernel's limits
 * (cosy_k_ras_supported): sample those on the host from gpu_llm_logp. Waits for the device. */
cosy_status gpu_llm_sample(gpu_llm *l, int n, cosy_k_ras_row *rows);
/* Download rows 0..n-1 of those log-probs (host [n][speech_vocab]). */
cosy_status gpu_llm_logp(gpu_llm *l, int n, float *logp);

/* Rows of the speech head (6761) and the hidden size. */
int gpu_llm_speech_vocab(const gpu_llm *l);
int gpu_llm_hidden(const gpu_llm *l);

/* Tuning / test knobs (drop the captured graphs): decode buckets <= gemv_max use the fused
 * skinny-GEMM path, larger ones cuBLASLt (0 = always cuBLASLt, -1 = the default, 4); pdl 1/0
 * turns programmatic dependent launch of the skinny GEMMs on/off (-1 = on where sm_90). */
void gpu_llm_set_tuning(gpu_llm *l, int gemv_max, int pdl);
/* The knob COSY_LLM_PREFILL_TIMING (a measurement aid): one line per packed prefill into the
 * file `path` (sequences, positions, host preparation, launch enqueue, device and wall ms). NULL
 * or "": none. */
void gpu_llm_set_prefill_timing(gpu_llm *l, const char *path);

/* 1: every decode bucket runs the tensor-core fused projections (kernels/gemv.h
 * cosy_k_llm_gemv_tc; batch-invariant: a row's logits do not depend on the other rows), the
 * default where the geometry and device allow; 0: the gemv_max / cuBLASLt split above. Drops the
 * captured graphs; returns the mode in effect (0 where the tensor-core path is not supported). */
int gpu_llm_set_tc(gpu_llm *l, int on);
int gpu_llm_tc(const gpu_llm *l);

#endif
