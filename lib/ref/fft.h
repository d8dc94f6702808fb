/* fft.h - small mixed-radix complex FFT (CPU reference; used by the audio front end).
 *
 * Forward transform (unnormalised, the numpy/torch sign convention):
 *     X[k] = sum_{j=0}^{n-1} x[j] * exp(-2 pi i j k / n),          k = 0 .. n-1
 * Inverse transform (also unnormalised: divide by n yourself):
 *     x[j] = sum_{k=0}^{n-1} X[k] * exp(+2 pi i j k / n)
 *
 * Data are interleaved complex fp32: element j is (buf[2j], buf[2j+1]) = (re, im).
 * Lengths whose only prime factors are 2, 3 and 5 (e.g. 1920 = 2^7 * 3 * 5, 400, 512, 16) run in
 * O(n * sum of factors) through a recursive decimation-in-time Cooley-Tukey with radix-4, -2, -3
 * and -5 butterflies; any other length falls back to a direct O(n^2) DFT (accumulated in double).
 * Twiddle factors are computed in double and stored as fp32.
 *
 * A plan is immutable after creation: one plan may be used by many threads at once.
 */
#ifndef COSY_REF_FFT_H
#define COSY_REF_FFT_H

#include <stdint.h>

#include "cosyvoice.h"

typedef struct cosy_fft_plan cosy_fft_plan;

/* Largest transform length accepted by cosy_fft_plan_create. */
#define COSY_FFT_MAX_N (1 << 24)

/* Plan a length-n transform, 1 <= n <= COSY_FFT_MAX_N. */
cosy_status cosy_fft_plan_create(int32_t n, cosy_fft_plan **out);
/* Free a plan (NULL is a no-op). */
void cosy_fft_plan_free(cosy_fft_plan *p);
/* The plan's length. */
int32_t cosy_fft_plan_size(const cosy_fft_plan *p);
/* 1 when the plan uses the fast mixed-radix path, 0 when it is the direct O(n^2) DFT. */
int cosy_fft_plan_is_fast(const cosy_fft_plan *p);

/* out = FFT(in) (inverse = 0) or the unnormalised inverse (inverse != 0). in and out each hold
 * 2n floats and must not overlap. */
cosy_status cosy_fft_exec(const cosy_fft_plan *p, const float *in, float *out, int inverse);

/* ------------------------------------------------------------------------- real transform
 * Forward transform of n real samples (n even), the first n/2 + 1 bins of the complex FFT above
 * (the rest are their conjugates):
 *     X[k] = sum_{j=0}^{n-1} x[j] exp(-2 pi i j k / n),  k = 0 .. n/2     (out[2k], out[2k+1])
 * Algorithm: the n reals are m = n/2 complex values z[j] = x[2j] + i x[2j+1]; Z = DFT_m(z) by an
 * iterative mixed-radix Stockham transform (radix 4, 2, 3, 5; twiddles of every stage tabled in
 * double, stored fp32; m with another prime factor falls back to the complex plan on n points);
 * then E[k] = (Z[k] + conj Z[m-k]) / 2, O[k] = -i (Z[k] - conj Z[m-k]) / 2 (the DFTs of the even
 * and odd samples, Z[m] = Z[0]) and X[k] = E[k] + exp(-2 pi i k / n) O[k]. fp32 throughout; about
 * 4x fewer operations than the complex plan on the zero-imaginary input, with the same accuracy
 * (tests/test_audio.c: both against a double-precision direct DFT).
 * A plan is immutable after creation and may be used by many threads at once, each with its own
 * scratch. */
typedef struct cosy_rfft_plan cosy_rfft_plan;

/* Plan a length-n real transform, n even, 2 <= n <= COSY_FFT_MAX_N. */
cosy_status cosy_rfft_plan_create(int32_t n, cosy_rfft_plan **out);
void cosy_rfft_plan_free(cosy_rfft_plan *p);
/* floats of scratch that cosy_rfft_exec needs (2 n; 4 n for the fallback) */
int64_t cosy_rfft_scratch_floats(const cosy_rfft_plan *p);
/* out[0 .. n + 2) = X[0 .. n/2] interleaved (re, im) of the n reals in x; scratch holds
 * cosy_rfft_scratch_floats(p) floats. x may not overlap out or scratch. */
void cosy_rfft_exec(const cosy_rfft_plan *p, const float *x, float *out, float *scratch);

#endif
