/* hift.h - the HiFT vocoder (CausalHiFTGenerator.inference, spec section 4) on the GPU.
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
 * from the fp32 reference on the random-weight models). Measured numbers: lib/gpu/hift.c.
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

/* The arithmetic of the decoder convolutions: COSY_HPREC_3XTF32 (default) or COSY_HPREC_TF32
 * (kernels/kernels_hift.h). Returns COSY_ERR_INVALID_ARG for another value. */
cosy_status gpu_hift_set_precision(gpu_hift *h, int prec);

#endif
