/* hift.h - CPU reference of the CosyVoice3 vocoder CausalHiFTGenerator.inference (spec section 4):
 * the fp64 F0 predictor, the causal NSF source (SineGen2 + SourceModuleHnNSF), the STFT of the
 * source, the conv_pre / 3 upsample stages / resblocks / conv_post decoder and the iSTFT.
 *
 * Layouts: mel is CHANNELS-FIRST [80][T] (as PyTorch's [1,80,T]); f0 is [T_f0]; the source s and
 * the waveform are plain sample arrays (24 kHz, 480 samples per mel frame).
 *
 * Lengths (finalize = 1 / finalize = 0, "non-final": the last frames are look-ahead context only):
 *   f0:      T            / T - 3   (condnet.0 looks 3 frames ahead)
 *   s:       480 * T_f0
 *   decode:  480 * T      / 480 * (T - 8)  (3 f0 frames + 4 conv_pre frames + 1 trimmed frame)
 *
 * Fixed noise. The official SineGen2 uses two buffers drawn from torch's global RNG at
 * construction (rand_ini [9], the initial phases with [0] = 0, and sine_waves [7.2M][9], uniform
 * [0,1) noise indexed by the absolute sample number). They cannot be reproduced in general, so the
 * default (noise == NULL) is OUR counter-based generator, which any chunking and the GPU path
 * reproduce exactly (ref_hift_default_noise documents it); tests inject the golden buffers.
 *
 * A ref_hift holds copies of the weights (fp32; the F0 predictor in fp64); it is read-only after
 * ref_hift_create and may be shared by any number of threads (each call allocates its own
 * scratch). */
#ifndef COSY_REF_HIFT_H
#define COSY_REF_HIFT_H

#include <stdint.h>

#include "cosyvoice.h"
#include "model.h"

typedef struct ref_hift ref_hift; /* weights; read-only after create */

/* Copy every "hift.*" tensor of m (weight norm already folded by the converter). m may be freed
 * afterwards. */
cosy_status ref_hift_create(const cosy_model *m, ref_hift **out);
/* NULL is a no-op. */
void ref_hift_free(ref_hift *h);

/* Injected noise buffers (the official model's, for parity tests). */
typedef struct ref_hift_noise {
  const float *rand_ini;   /* [nb_harmonics+1], rand_ini[0] = 0 */
  const float *sine_waves; /* [n_rows][nb_harmonics+1]; row i is used for sample i */
  int64_t n_rows;          /* must be >= the number of samples generated */
} ref_hift_noise;          /* pass NULL for the default generator */

/* The default noise generator ("hift noise v1"), counter-based so that any chunk gives the same
 * values at the same absolute sample index:
 *   mix(z)    = splitmix64 output for state z:  z += 0x9E3779B97F4A7C15;
 *               z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
 *               return z ^ (z >> 31)                                  (all uint64, wrapping)
 *   u24(x)    = (mix(x) >> 40) * 2^-24                                (in [0,1), exact in fp32)
 *   row i, column h (0 <= h <= nb):  u24(0x5EED51AE00000000 ^ (i * (nb+1) + h))
 *   rand_ini[0] = 0,  rand_ini[h] = u24(0x5EED1A1700000000 ^ h)  for h = 1..nb
 * nb = nb_harmonics. Fills rows [first_row, first_row + n_rows) into rows[n_rows][nb+1] and/or
 * rand_ini[nb+1]; either pointer may be NULL. Invalid arguments (nb < 0, first_row < 0,
 * n_rows < 0) leave the outputs untouched. */
void ref_hift_default_noise(int nb, int64_t first_row, int64_t n_rows, float *rand_ini,
                            float *rows);

/* The F0 predictor (fp64 inside, rounded to fp32). mel: CHANNELS-FIRST [80][T].
 * f0 out: [T] when finalize (T >= 1), [T-3] otherwise (T >= 4). */
cosy_status ref_hift_f0(const ref_hift *h, const float *mel, int T, int finalize, float *f0);

/* The source signal s [T_f0*480] from f0 [T_f0] (SineGen2 causal + Linear(nb+1 -> 1) + tanh).
 * noise: injected buffers, or NULL for the default generator. */
cosy_status ref_hift_source(const ref_hift *h, const float *f0, int T_f0,
                            const ref_hift_noise *noise, float *s);

/* Optional intermediate outputs of the decode path (tests); any pointer may be NULL.
 * F = 120*T + 1 STFT frames when finalize, 120*(T-7) + 1 otherwise. */
typedef struct ref_hift_debug {
  float *s_stft_real; /* [9][F] STFT of s (after the non-final trim) */
  float *s_stft_imag; /* [9][F] */
  float *conv_pre;    /* [C][T] when finalize, [C][T-7] otherwise */
  float *magnitude;   /* [9][F] exp(conv_post[:9]) before the clip at 100 */
  float *phase;       /* [9][F] sin(conv_post[9:]) */
} ref_hift_debug;

/* The decode path given s (length 480*T when finalize, 480*(T-3) otherwise; T >= 1 when
 * finalize, T >= 9 otherwise). *wav is malloc'd (free()); *n = 480*T (finalize) or 480*(T-8). */
cosy_status ref_hift_decode(const ref_hift *h, const float *mel, int T, const float *s, int finalize,
                            float **wav, int64_t *n);
/* The same with optional intermediates (dbg may be NULL) and a cancel flag (may be NULL; polled
 * between stages, non-zero -> COSY_ERR_CANCELLED). */
cosy_status ref_hift_decode_ex(const ref_hift *h, const float *mel, int T, const float *s,
                               int finalize, const volatile int *cancel, ref_hift_debug *dbg,
                               float **wav, int64_t *n);

/* The whole CausalHiFTGenerator.inference: f0 -> source -> decode. cancel: optional flag polled
 * between stages. *wav malloc'd (free()), *n as ref_hift_decode. */
cosy_status ref_hift_infer(const ref_hift *h, const float *mel, int T, int finalize,
                           const ref_hift_noise *noise, const volatile int *cancel, float **wav,
                           int64_t *n);

/* The STFT used on s (n_fft 16, hop 4, periodic Hann, center with reflect padding, onesided):
 * s [n] (n >= 9, n % 4 == 0) -> re, im [9][n/4 + 1]. Exposed for tests and the GPU path. */
cosy_status ref_hift_stft(const float *s, int64_t n, float *re, float *im);

#endif
