/* hift.h - the HiFT vocoder (CausalHiFTGenerator.inference, docs/model.md section 8) on the GPU.
 *
 * Same semantics, layouts, lengths and argument checks as the CPU reference (lib/ref/hift.h):
 * mel CHANNELS-FIRST [80][T]; f0 [T] (final) or [T-3] (non-final); s [480 T_f0]; the waveform
 * 480 T samples (final) or 480 (T-8) (non-final); the default noise (noise == NULL) is
 * ref_hift_default_noise's counter-based generator, bit-identical here.
 *
 * Precision: the F0 predictor runs in fp64 (its f0 equals the CPU reference's to the last bit in
 * practice); the source path reproduces the reference's fp32/fp64 operation order (bit-identical
 * s for the same f0); the STFT/iSTFT follow the reference's fp64 order; the decoder convolutions
 * run on tensor cores with fp32 storage and accumulation, products in 3xTF32 (fp32-level
 * accuracy, the default) or TF32 (gpu_hift_set_precision: ~1.45x faster, waveform ~1.5e-2 rel L2
 * from the fp32 reference on the random-weight models), or with fp16 operands (COSY_HPREC_F16:
 * TF32's operand precision at twice the tensor rate, kernels/conv.cu conv2_kernel; a job whose
 * activations exceed fp16's range is decoded again in TF32: gpu_hift_set_f16_guard). Measured
 * numbers: lib/gpu/hift.c.
 *
 * A gpu_hift holds the weights and every buffer for calls of up to max_frames mel frames, all
 * allocated at create through the cosy_gpu budget. Calls run on the context's stream (plus a side
 * stream of the gpu_hift, joined back into it) and synchronize before returning; one gpu_hift
 * serves one thread at a time. */
#ifndef COSY_GPU_HIFT_H
#define COSY_GPU_HIFT_H

#include <stdint.h>

#include "cosyvoice.h"
#include "gpu/gpu.h"
#include "model.h"
#include "ref/hift.h"

typedef struct gpu_hift gpu_hift;

/* Upload the "hift.*" tensors of m (m may be freed afterwards) and plan the buffers for
 * T <= max_frames (1 <= max_frames <= 2000000, memory permitting). */
cosy_status gpu_hift_create(cosy_gpu *g, const cosy_model *m, int max_frames, gpu_hift **out);
/* NULL is a no-op. The device memory stays with g (freed by cosy_gpu_free). */
void gpu_hift_free(gpu_hift *h);

/* ref_hift_infer's contract with the default noise (host mel CHANNELS-FIRST [80][T]; *wav
 * malloc'd host, free()). cancel (may be NULL) is polled between stages. */
cosy_status gpu_hift_infer(gpu_hift *h, const float *mel, int T, int finalize,
                           const volatile int *cancel, float **wav, int64_t *n);

/* For parity tests: the pieces, host in/out, as ref_hift_f0 / ref_hift_source / ref_hift_decode
 * (noise: injected buffers, or NULL for the default generator). */
cosy_status gpu_hift_f0(gpu_hift *h, const float *mel, int T, int finalize, float *f0);
cosy_status gpu_hift_source(gpu_hift *h, const float *f0, int T_f0, const ref_hift_noise *noise,
                            float *s);
cosy_status gpu_hift_decode(gpu_hift *h, const float *mel, int T, const float *s, int finalize,
                            float **wav, int64_t *n);

/* The arithmetic of the decoder convolutions: COSY_HPREC_3XTF32 (default), COSY_HPREC_TF32 or
 * COSY_HPREC_F16 (the first choice of it makes the fp16 weights: ~42 MB for the full model, from
 * the budget; a failure leaves the precision as it was)
 * (kernels/kernels_hift.h). Returns COSY_ERR_INVALID_ARG for another value. */
cosy_status gpu_hift_set_precision(gpu_hift *h, int prec);

/* The F16 guard (COSY_HPREC_F16 only; on by default): after each decode the jobs whose fp16
 * convolutions met an activation beyond 65504 (fp16's largest finite value: clamped there) run
 * again in TF32 before their samples are returned, so that a job's samples are its fp16 decode
 * (no saturation) or its TF32 decode, bit for bit, whatever the other jobs of the call (hift.c,
 * "Saturation"). on = 0 turns it off (measurements and tests: the clamped fp16 result is then
 * returned). COSY_ERR_INVALID_ARG for another value. */
cosy_status gpu_hift_set_f16_guard(gpu_hift *h, int on);
/* The staged fp16 convolutions (COSY_HPREC_F16; on by default): every fp16 launch gets a slice
 * of a workspace of the vocoder's per conv (two workspaces, one per stream: 3 halves per float
 * of an activation buffer, and of the largest source buffer for the side stream; made with the
 * fp16 weights); where the kernels' rule picks the staged kernel (kernels/conv.cu conv3_prefer:
 * Snake and mean-of-3 inputs) a first kernel writes the convs' activated inputs there in fp16,
 * time-major, and the convs copy their strips from there through a ring of shared-memory stages
 * (conv3_kernel): the same bits as the register-staged kernel, which on = 0 selects everywhere
 * (COSY_HIFT_STAGED=0, a measurement knob). COSY_ERR_INVALID_ARG for another value; a workspace that cannot be allocated is
 * COSY_ERR_GPU_NO_MEMORY. */
cosy_status gpu_hift_set_staged(gpu_hift *h, int on);
/* Since create: the jobs decoded under the guard (the whole-utterance calls count one each) and
 * those of them recomputed in TF32. Read from the thread that runs the gpu_hift. */
void gpu_hift_f16_stats(const gpu_hift *h, int64_t *jobs, int64_t *fallbacks);

/* ---- streaming ---------------------------------------------------------------------------------
 * ref_hift_stream_run's contract on the GPU (lib/ref/hift.h derives the window and its exactness):
 * per call, the F0 predictor runs over the new f0-final frames plus the 8-frame F0 context, the
 * source over the new frames only (cosy_k_hift_sine_at / cosy_k_hift_source_at continue the
 * phase sums and the absolute noise index, bit-identical to one whole-mel source), and the decode
 * over the window [a, T) with a = max(0, sent / 480 - 29): the same kernels as gpu_hift_infer on
 * a shorter input, except that the convolutions never split their reduction (see
 * gpu_hift_stream_run). So the samples equal the whole-mel gpu_hift_infer's to fp32 rounding
 * (the whole-mel run may split; not promised bit for bit).
 *
 * State: HOST memory (malloc), not the gpu budget: the mel history (frames from
 * min(a, f0_done - 8), 320 B a frame), the source samples of frames [a, f0_done) (1920 B a frame)
 * and the 9 fp64 phase sums: ~77 KB per stream between calls (lib/ref/hift.h). The device
 * buffers are the gpu_hift's (allocated at gpu_hift_create from the gpu budget, plus 64 x 9 fp64
 * phase-sum slots), shared by the jobs of a call (and by gpu_hift_infer: every call uploads what
 * it needs); a stream may be used with any gpu_hift of the same model.
 * A job's window, T_total - min(a, f0_done - 8) frames (min(T_total, T_new + 37): the 29-frame
 * context plus the 8 frames the previous call held back), must fit max_frames (else
 * COSY_ERR_INVALID_ARG, nothing done). */
typedef struct gpu_hift_stream gpu_hift_stream;
cosy_status gpu_hift_stream_create(gpu_hift *h, gpu_hift_stream **out);
/* NULL is a no-op; h may be NULL. */
void gpu_hift_stream_free(gpu_hift *h, gpu_hift_stream *st);

typedef struct gpu_hift_job {
  gpu_hift_stream *st;
  const float *mel_new; /* host FRAME-MAJOR [T_new][80] (may be NULL when T_new = 0) */
  int T_new, finalize;
  float *wav;           /* out: malloc'd host samples (free(); never NULL on success) */
  int64_t n;            /* out: their count, as ref_hift_stream_run */
} gpu_hift_job;

/* Run n jobs (distinct streams) on the context's stream and wait; fills each job's wav / n.
 * Batched: the jobs whose windows fit the gpu_hift's buffers together (sum of the windows about
 * <= max_frames; at most 64 jobs) share every decoder launch: each conv launch carries up to 16
 * convs of any jobs (kernels_hift.h: cosy_k_hift_conv_split), and the F0 predictor runs once for
 * all the jobs (6 launches: cosy_k_hift_conv64_group, cosy_k_hift_f0_classify_group); the source,
 * the STFT and the iSTFT stay per job (small); larger calls run as several batches in job order.
 * The convolutions never split their reduction here, and a conv's values depend only on its own
 * descriptor, so a job's samples do not depend on the other jobs (bit-identical to running it
 * alone; test_gpu_hift checks it). cancel (may be NULL) is polled between stages. Arguments of
 * every job are checked first (COSY_ERR_INVALID_ARG, nothing done). On a later error (or a
 * cancel) the batches before the failing one are complete (wav / n filled: free them); the jobs
 * of the failing batch and those after return wav = NULL, n = 0 and their streams stay consistent
 * (the failing batch's mel is kept and the samples not returned come with the stream's next call,
 * as ref_hift_stream_run). */
cosy_status gpu_hift_stream_run(gpu_hift *h, gpu_hift_job *jobs, int n, const volatile int *cancel);

/* Measurements: the split mode of the streaming decoder's convs (cosy_k_hift_conv_split): 1 never
 * (default: batch invariant), 0 automatic (the whole-mel path's choice, by the launch's block
 * count: faster for a lone small window, but a job's samples then depend, at fp32 rounding, on
 * the batch it ran in), 2 always. COSY_ERR_INVALID_ARG for another value. */
cosy_status gpu_hift_set_stream_split(gpu_hift *h, int mode);

#endif
