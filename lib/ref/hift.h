/* hift.h - CPU reference of the CosyVoice3 vocoder CausalHiFTGenerator.inference (docs/model.md section 8):
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
 *   mix(z)    = splitmix64 output for state z (lib/rng.h cosy_splitmix64): z += 0x9E3779B97F4A7C15;
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

/* ---- streaming ---------------------------------------------------------------------------------
 *
 * A stream vocodes one utterance whose mel arrives in chunks, doing each frame's work once plus a
 * bounded left context, with the same samples as re-running ref_hift_infer over the whole mel
 * received so far (what a caller without streams does at every chunk).
 *
 * Why a window is exact. Every piece of inference is either (a) pointwise in time or a
 * convolution over a bounded range of the input, or (b) one of three utterance-wide things: the
 * SineGen2 phase (a running sum over all frames), the noise (indexed by the absolute sample) and
 * the utterance-start padding (STFT reflection at sample 0, ReflectionPad1d((1,0)) of stage 2,
 * the causal convs' left zeros, the iSTFT's missing frames before frame 0). The right end of a
 * call (look-ahead frames as context or zeros, the non-final trims, the STFT/iSTFT edges) depends
 * only on the total length T, which a window ending at T shares with the whole run; and the
 * 480 (T - 8) samples a non-final run returns read no look-ahead frame as anything but real mel
 * (the 8 held-back frames: 3 F0 + 4 conv_pre look-ahead + 1 trimmed), so they are also the prefix
 * of every longer run, final or not. So:
 *   - F0: f0[k] depends on mel[k-8 .. k+3] (condnet.0 looks 3 frames right, then 4 layers of k3
 *     look 2 left each): it is final once frame k+3 has arrived (or at the final call, whose
 *     right zeros are the whole run's), and the F0 predictor run over mel[b, T) gives it exactly
 *     for k >= b + 8 (F0 context 8; b = 0 is the whole run itself).
 *   - source: frame k's samples depend on f0[k], the phase sums of frames <= k (carried as the
 *     9 fp64 running sums, added in the same order: bit-identical) and the absolute sample index
 *     (noise rows, rand_ini's tap at sample 0). Each frame's source is computed once and kept.
 *   - decode: run ref_hift_decode over the window mel[a, T), s[480 a, 480 Tm) with the same
 *     finalize. All strides divide the 120 STFT frames of a mel frame, so local index u of every
 *     level is global index u + a x (that level's rate). A local value differs from the global
 *     one only if it depends on the window's left edge; the first clean index of each level
 *     follows from the kernel sizes (computed by ref_hift_stream_context, here for the model's
 *     kernels 16/11/7 up, 3/7/11 resblocks, 7/7/11 source resblocks, dilations 1/3/5):
 *       STFT frames: clean from 2 (the window reaches 8 samples left)
 *       conv_pre: 0 (looks right only)
 *       ResBlock(k) reaches sum_d (k-1) d + (k-1) = 12 (k-1) left: 24 / 72 / 120
 *       stage i:  up conv output clean from c_in r_i + k_i - 1 (+1 at stage 2, the reflection);
 *                 source branch from ceil((2 + sd_i - 1) / sd_i) + ResBlock_src;
 *                 the stage input from the larger; its output 120 further (the k11 resblock)
 *         stage 0 (8 / frame):   up 15, source 2 + 72 = 74  -> 194
 *         stage 1 (40 / frame):  up 194*5 + 10 = 980, source 74 -> 1100
 *         stage 2 (120 / frame): up 1100*3 + 6 + 1 = 3307, source 122 -> 3427
 *       conv_post (k7): 3433;  iSTFT sample t reads frames ceil((t-7)/4) .. : clean from
 *       t = 4 * 3433 + 4 = 13736 samples = 28.6 frames -> decode context D = 29 frames.
 *     A call that must emit from sample E (a multiple of 480) uses a = max(0, E/480 - D).
 *     The bound is tight: with D = 28 samples already change (test_ref_hift).
 * In exact arithmetic the stream therefore equals the whole-mel runs; in this fp32 reference it
 * is bit-identical too, because every value is computed by the same operations in the same order
 * whatever its position (direct convolutions, per-frame STFT, frame-ordered overlap-add, the
 * sequential phase sum), which test_ref_hift checks (max abs printed).
 *
 * State (per stream, malloc'd), between non-final calls: the mel frames from min(a, b) on
 * (a = T - 8 - 29, b = T - 3 - 8: 37 frames, 12 KB), the source samples of frames [a, T - 3)
 * (34 frames, 65 KB), the 9 phase sums and a few counters: ~77 KB; during a call also the new
 * chunk (the buffers shrink back after a large one). Cost per call: the F0 predictor over the new
 * frames + 8, the source of the new frames only, the decode of new + 37 frames (29 context + the
 * 8 held back by the previous call), against all T frames for a whole-mel re-run (e.g. a 50-frame
 * chunk at T = 300: 87 vs 300 frames decoded). */
typedef struct ref_hift_stream ref_hift_stream; /* one utterance's vocoder state */

/* The left contexts in mel frames of the F0 predictor (8) and the decode path (29 for the
 * CosyVoice3 geometry) for hp's kernel sizes, dilations and rates (the formulas above). */
cosy_status ref_hift_stream_context(const cosy_hparams *hp, int *f0_ctx, int *dec_ctx);

/* Tests only: override a fresh stream's contexts (before its first call) to show that smaller ones
 * break the equality. COSY_ERR_INVALID_ARG when negative or after the first call. */
cosy_status ref_hift_stream_set_context(ref_hift_stream *st, int f0_ctx, int dec_ctx);

/* A new stream (malloc'd state). */
cosy_status ref_hift_stream_create(const ref_hift *h, ref_hift_stream **out);
/* NULL is a no-op. */
void ref_hift_stream_free(ref_hift_stream *st);
/* Append T_new mel frames (FRAME-MAJOR host [T_new][80]; T_new may be 0, mel_new may then be
 * NULL) and return in *wav (malloc'd, free(); never NULL on success) / *n the samples that are
 * now final: everything up to 480 (T_total - 8) after a non-final call, everything (480 T_total)
 * after the call with finalize = 1, the last of the utterance (later calls fail with
 * COSY_ERR_INVALID_ARG). The concatenation of all calls' outputs equals ref_hift_infer(whole mel,
 * finalize = 1) and after each non-final call the prefix that ref_hift_infer(mel so far, 0)
 * returns (bit-identical here; see above). Default noise generator. cancel (may be NULL) is
 * polled between stages: COSY_ERR_CANCELLED (or another error after the mel was stored) returns
 * nothing, but the stream stays consistent: the mel is kept and the samples not returned come
 * with the next call. Argument errors change nothing. */
cosy_status ref_hift_stream_run(const ref_hift *h, ref_hift_stream *st, const float *mel_new,
                                int T_new, int finalize, const volatile int *cancel, float **wav,
                                int64_t *n);

#endif
