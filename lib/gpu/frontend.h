/* frontend.h - the voice front end on the GPU: the speech tokenizer v3 and the CAM++ speaker
 * embedding (the math of lib/ref/s3tok.h and lib/ref/campplus.h), from the features the CPU
 * computes (whisper log-mel, mean-removed kaldi fbank: cheap, see lib/voice_audio.c).
 *
 * Precision: fp32 weights and activations, fp32 GEMMs (cuBLASLt CUBLAS_COMPUTE_32F, no TF32).
 * The FSQ head rounds tanh(h) * 0.999 to {-1, 0, 1}: a token flips when the error of h crosses a
 * rounding boundary, and bf16 weights or activations (~4e-3 relative per rounding) would flip a
 * visible fraction of them, so the tokenizer keeps fp32 (its 242 M parameters take 0.97 GB).
 * CAM++ (6.9 M parameters) is fp32 too.
 *
 * Work: everything of one voice is enqueued on the context's stream (the engine's flow/vocoder
 * stream; gpu_fe_run is called on the scheduler's token-to-wave thread between its batches), with
 * the front end's own cuBLASLt handle (its shapes change with every audio length and would evict
 * the flow's cached plans); the inputs go up once and the tokens and the embedding come back with
 * one synchronization at the end. No allocation per call: every buffer is planned at creation for
 * the longest prompt (30 s, the official limit), in two device allocations (weights, workspace),
 * so a failed creation holds nothing it cannot give back with the context.
 *
 * Convolutions: im2col (kernels/frontend.cu) + GEMM; CAM++'s 2-D head convs in chunks of output
 * frequency rows that fit the column buffer. Attention: cosy_k_attn_dit (fp32 path, full
 * attention); rotary: cosy_k_rope_neox with the reference's fp32 inverse frequencies. */
#ifndef COSY_GPU_FRONTEND_H
#define COSY_GPU_FRONTEND_H

#include <stdint.h>

#include "cosyvoice.h"
#include "gpu/gpu.h"
#include "model.h"

typedef struct gpu_fe gpu_fe;

/* Device bytes gpu_fe_create takes for this model (weights + workspace for max_mel log-mel
 * frames, i.e. max_mel / 100 seconds); 0 when the model has no front end. */
size_t gpu_fe_bytes(const cosy_model *m, int max_mel);

/* Upload the two models (COSY_ERR_UNSUPPORTED when the file lacks one; COSY_ERR_GPU_NO_MEMORY when
 * g's budget cannot hold gpu_fe_bytes: nothing is allocated then). Runs on g's stream. */
cosy_status gpu_fe_create(cosy_gpu *g, const cosy_model *m, int max_mel, gpu_fe **out);
/* Free the host side and the cuBLASLt handle (the device memory belongs to the context). */
void gpu_fe_free(gpu_fe *f);

/* One voice: tokens of the log-mel [128][T_lm] (channels-first, ref_whisper_logmel) and the
 * embedding of the mean-removed fbank [T_fb][80] (ref_kaldi_fbank minus its mean over time).
 * *tokens malloc'd [*n_tokens]; emb [192]. T_lm <= max_mel, 4 <= T_fb <= max_mel. */
cosy_status gpu_fe_run(gpu_fe *f, const float *logmel, int32_t T_lm, const float *fbank,
                       int32_t T_fb, int32_t **tokens, int32_t *n_tokens, float *emb);

/* The two halves alone, with the reference's optional intermediate outputs (NULL to skip; the
 * shapes of ref_s3tok_encode / ref_campplus_embed). For the tests. */
cosy_status gpu_fe_s3tok(gpu_fe *f, const float *logmel, int32_t T, int32_t **tokens,
                         int32_t *n_tokens, float *proj, float *enc, float *conv2, float *block0);
cosy_status gpu_fe_campplus(gpu_fe *f, const float *fbank, int32_t T, float *emb, float *head,
                            float *tdnn, float *stats);

#endif
