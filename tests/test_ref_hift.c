/* test_ref_hift.c - the CPU reference HiFT vocoder (lib/ref/hift.c) against the golden data of the
 * official CausalHiFTGenerator on the small random model (../shared/golden/hift).
 *
 *   F0:      final (vs f0_f64 and f0) and non-final (mel_in[:, :32] -> nonfinal/f0)
 *   source:  golden f0 + golden rand_ini/sine_waves injected -> final/s, nonfinal/s
 *   STFT:    of golden final/s vs s_stft_real / s_stft_imag
 *   decode:  golden final/s injected -> conv_pre, magnitude, phase, wav; non-final (nonfinal/s)
 *            -> conv_pre, wav
 *   end to end (own f0 and s, golden noise) vs final/wav: loose, see below
 *   default noise generator: deterministic, in [0,1), mean ~0.5, chunk independent; non-final
 *   output with it equals the prefix of the final output
 *   argument validation and cancellation.
 *   streaming (ref_hift_stream_*) on random mel: 1-frame chunks with a final T_new = 0 call,
 *   random 1..12-frame chunks, chunks below the 8-frame look-ahead, a single final chunk, the
 *   50/100/200 schedule: every non-final prefix vs ref_hift_infer(so far, 0) and the
 *   concatenation vs ref_hift_infer(whole, 1) (tolerance 1e-4 rel L2; bit-identical measured);
 *   the derived contexts (F0 8, decode 29 frames) and that shorter ones break the equality (so
 *   the comparisons can fail); free/create reuse; cancellation keeps the stream consistent; the
 *   stream's cost against the whole-mel re-runs is printed.
 * Tolerances (relative L2 unless said otherwise): F0 and source 1e-3, STFT / decode path 1e-4
 * (the references are fp32 CPU PyTorch, the F0 predictor fp64; ours differs in summation order).
 * Every measured error is printed. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model.h"
#include "ref/hift.h"
#include "testutil.h"
#include "util.h"

#define TOL_SRC 1e-3
#define TOL_DEC 1e-4
#define T_NONFINAL TU_HIFT_T_NONFINAL /* HIFT(nonfinal) = mel_in[:, :32] */

typedef struct fixture {
  cosy_model *m;
  ref_hift *h;
  float *mel; /* [80][T] */
  int T;
  float *mel_nf; /* [80][32] */
  float *rand_ini, *sine_waves; /* [9], [rows][9] */
  int64_t n_rows;
  int nh;
} fixture;

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  *state = fx;
  const char *model = tu_small_model();
  if (!model || !tu_shared_dir()) return 0;
  if (cosy_model_load(model, &fx->m) != COSY_OK) {
    fprintf(stderr, "model load failed: %s\n", cosy_last_error());
    return -1;
  }
  if (ref_hift_create(fx->m, &fx->h) != COSY_OK) {
    fprintf(stderr, "ref_hift_create failed: %s\n", cosy_last_error());
    return -1;
  }
  fx->nh = fx->m->hp.nb_harmonics + 1;
  tu_hift_inputs in;
  if (tu_golden_hift_inputs(fx->nh, &in)) return -1;
  fx->mel = in.mel;
  fx->T = in.T;
  fx->mel_nf = in.mel_nf;
  fx->rand_ini = in.rand_ini;
  fx->sine_waves = in.sine_waves;
  fx->n_rows = in.n_rows;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  ref_hift_free(fx->h);
  cosy_model_free(fx->m);
  free(fx->mel), free(fx->mel_nf), free(fx->rand_ini), free(fx->sine_waves);
  free(fx);
  return 0;
}

#define NEED(fx) TU_REQUIRE((fx)->h, "golden data or test model absent (make build/test/small-f32.gguf)")

static double check(const char *what, const float *got, const float *ref, size_t n, double tol) {
  double e = tu_rel_l2(got, ref, n);
  print_message("%-28s rel L2 %.3e  max abs %.3e  (tol %.0e)\n", what, e,
                tu_max_abs_diff(got, ref, n), tol);
  assert_true(e <= tol);
  return e;
}

static ref_hift_noise golden_noise(const fixture *fx) {
  ref_hift_noise nz = {fx->rand_ini, fx->sine_waves, fx->n_rows};
  return nz;
}

/* ---- F0 ----------------------------------------------------------------------------------------- */

static void test_f0_final(void **state) {
  fixture *fx = *state;
  NEED(fx);
  int nd;
  int64_t sh[8];
  double *ref64 = tu_npy_f64(tu_shared("golden/hift/final/f0_f64.npy"), &nd, sh);
  float *ref = tu_load_f32("golden/hift/final/f0.npy", fx->T);
  assert_non_null(ref64);
  assert_non_null(ref);
  assert_int_equal(tu_numel(nd, sh), fx->T);
  float *f0 = malloc(sizeof(float) * fx->T);
  assert_int_equal(ref_hift_f0(fx->h, fx->mel, fx->T, 1, f0), COSY_OK);
  double num = 0, den = 0;
  for (int t = 0; t < fx->T; t++) num += (f0[t] - ref64[t]) * (f0[t] - ref64[t]), den += ref64[t] * ref64[t];
  double e64 = sqrt(num / den);
  print_message("%-28s rel L2 %.3e  (tol %.0e)\n", "f0 final vs f0_f64", e64, TOL_SRC);
  assert_true(e64 <= TOL_SRC);
  check("f0 final vs f0", f0, ref, (size_t)fx->T, TOL_SRC);
  free(f0), free(ref), free(ref64);
}

static void test_f0_nonfinal(void **state) {
  fixture *fx = *state;
  NEED(fx);
  const int n = T_NONFINAL - 3;
  float *ref = tu_load_f32("golden/hift/nonfinal/f0.npy", n);
  assert_non_null(ref);
  float *f0 = malloc(sizeof(float) * n);
  assert_int_equal(ref_hift_f0(fx->h, fx->mel_nf, T_NONFINAL, 0, f0), COSY_OK);
  check("f0 nonfinal", f0, ref, (size_t)n, TOL_SRC);
  free(f0), free(ref);
}

/* ---- source ------------------------------------------------------------------------------------ */

static void source_case(fixture *fx, const char *f0_rel, const char *s_rel, int Tf, const char *what) {
  float *f0 = tu_load_f32(f0_rel, Tf);
  float *ref = tu_load_f32(s_rel, (int64_t)Tf * 480);
  assert_non_null(f0);
  assert_non_null(ref);
  float *s = malloc(sizeof(float) * (size_t)Tf * 480);
  ref_hift_noise nz = golden_noise(fx);
  assert_int_equal(ref_hift_source(fx->h, f0, Tf, &nz, s), COSY_OK);
  check(what, s, ref, (size_t)Tf * 480, TOL_SRC);
  free(f0), free(ref), free(s);
}

static void test_source_final(void **state) {
  fixture *fx = *state;
  NEED(fx);
  source_case(fx, "golden/hift/final/f0.npy", "golden/hift/final/s.npy", fx->T, "source final");
}

static void test_source_nonfinal(void **state) {
  fixture *fx = *state;
  NEED(fx);
  source_case(fx, "golden/hift/nonfinal/f0.npy", "golden/hift/nonfinal/s.npy", T_NONFINAL - 3,
              "source nonfinal");
}

/* ---- STFT and decode ----------------------------------------------------------------------------- */

static void test_stft(void **state) {
  fixture *fx = *state;
  NEED(fx);
  const int64_t n = (int64_t)fx->T * 480, F = n / 4 + 1;
  float *s = tu_load_f32("golden/hift/final/s.npy", n);
  float *rr = tu_load_f32("golden/hift/final/s_stft_real.npy", 9 * F);
  float *ri = tu_load_f32("golden/hift/final/s_stft_imag.npy", 9 * F);
  assert_non_null(s), assert_non_null(rr), assert_non_null(ri);
  float *re = malloc(sizeof(float) * 9 * F), *im = malloc(sizeof(float) * 9 * F);
  assert_int_equal(ref_hift_stft(s, n, re, im), COSY_OK);
  check("stft real", re, rr, (size_t)(9 * F), TOL_DEC);
  check("stft imag", im, ri, (size_t)(9 * F), TOL_DEC);
  free(s), free(rr), free(ri), free(re), free(im);
}

static void test_decode_final(void **state) {
  fixture *fx = *state;
  NEED(fx);
  const int T = fx->T, C = fx->m->hp.hift_ch;
  const int64_t n = (int64_t)T * 480, F = 120 * (int64_t)T + 1;
  float *s = tu_load_f32("golden/hift/final/s.npy", n);
  float *rwav = tu_load_f32("golden/hift/final/wav.npy", n);
  float *rpre = tu_load_f32("golden/hift/final/conv_pre.npy", (int64_t)C * T);
  float *rmag = tu_load_f32("golden/hift/final/magnitude.npy", 9 * F);
  float *rph = tu_load_f32("golden/hift/final/phase.npy", 9 * F);
  float *rr = tu_load_f32("golden/hift/final/s_stft_real.npy", 9 * F);
  assert_non_null(s), assert_non_null(rwav), assert_non_null(rpre), assert_non_null(rmag);
  assert_non_null(rph), assert_non_null(rr);
  ref_hift_debug dbg = {0};
  dbg.conv_pre = malloc(sizeof(float) * C * T);
  dbg.magnitude = malloc(sizeof(float) * 9 * F);
  dbg.phase = malloc(sizeof(float) * 9 * F);
  dbg.s_stft_real = malloc(sizeof(float) * 9 * F);
  float *wav = NULL;
  int64_t nw = 0;
  double t0 = cosy_now();
  assert_int_equal(ref_hift_decode_ex(fx->h, fx->mel, T, s, 1, NULL, &dbg, &wav, &nw), COSY_OK);
  print_message("decode final: %d frames in %.3f s\n", T, cosy_now() - t0);
  assert_int_equal(nw, n);
  check("decode final stft real", dbg.s_stft_real, rr, (size_t)(9 * F), TOL_DEC);
  check("decode final conv_pre", dbg.conv_pre, rpre, (size_t)C * T, TOL_DEC);
  check("decode final magnitude", dbg.magnitude, rmag, (size_t)(9 * F), TOL_DEC);
  check("decode final phase", dbg.phase, rph, (size_t)(9 * F), TOL_DEC);
  check("decode final wav", wav, rwav, (size_t)n, TOL_DEC);
  /* the plain entry point gives the same samples */
  float *wav2 = NULL;
  int64_t nw2 = 0;
  assert_int_equal(ref_hift_decode(fx->h, fx->mel, T, s, 1, &wav2, &nw2), COSY_OK);
  assert_int_equal(nw2, nw);
  assert_memory_equal(wav, wav2, sizeof(float) * (size_t)nw);
  free(wav), free(wav2), free(s), free(rwav), free(rpre), free(rmag), free(rph), free(rr);
  free(dbg.conv_pre), free(dbg.magnitude), free(dbg.phase), free(dbg.s_stft_real);
}

static void test_decode_nonfinal(void **state) {
  fixture *fx = *state;
  NEED(fx);
  const int T = T_NONFINAL, C = fx->m->hp.hift_ch;
  float *s = tu_load_f32("golden/hift/nonfinal/s.npy", (int64_t)(T - 3) * 480);
  float *rwav = tu_load_f32("golden/hift/nonfinal/wav.npy", (int64_t)(T - 8) * 480);
  float *rpre = tu_load_f32("golden/hift/nonfinal/conv_pre.npy", (int64_t)C * (T - 7));
  assert_non_null(s), assert_non_null(rwav), assert_non_null(rpre);
  ref_hift_debug dbg = {0};
  dbg.conv_pre = malloc(sizeof(float) * C * (T - 7));
  float *wav = NULL;
  int64_t nw = 0;
  assert_int_equal(ref_hift_decode_ex(fx->h, fx->mel_nf, T, s, 0, NULL, &dbg, &wav, &nw), COSY_OK);
  assert_int_equal(nw, (int64_t)(T - 8) * 480);
  check("decode nonfinal conv_pre", dbg.conv_pre, rpre, (size_t)C * (T - 7), TOL_DEC);
  check("decode nonfinal wav", wav, rwav, (size_t)nw, TOL_DEC);
  free(wav), free(s), free(rwav), free(rpre), free(dbg.conv_pre);
}

/* End to end with the golden noise. As measured when the golden data were made, the random-weight decoder
 * amplifies the fp32 phase noise of the source (1e-6 on s moves wav by 3e-4; GPU torch vs CPU
 * torch: wav 1.4e-2 max abs), so only a loose bound applies here: relative L2 <= 2e-2. */
static void test_infer_final(void **state) {
  fixture *fx = *state;
  NEED(fx);
  const int64_t n = (int64_t)fx->T * 480;
  float *rwav = tu_load_f32("golden/hift/final/wav.npy", n);
  assert_non_null(rwav);
  ref_hift_noise nz = golden_noise(fx);
  float *wav = NULL;
  int64_t nw = 0;
  assert_int_equal(ref_hift_infer(fx->h, fx->mel, fx->T, 1, &nz, NULL, &wav, &nw), COSY_OK);
  assert_int_equal(nw, n);
  check("infer final wav (loose)", wav, rwav, (size_t)n, 2e-2);
  free(wav), free(rwav);
}

static void test_infer_nonfinal(void **state) {
  fixture *fx = *state;
  NEED(fx);
  const int64_t n = (int64_t)(T_NONFINAL - 8) * 480;
  float *rwav = tu_load_f32("golden/hift/nonfinal/wav.npy", n);
  assert_non_null(rwav);
  ref_hift_noise nz = golden_noise(fx);
  float *wav = NULL;
  int64_t nw = 0;
  assert_int_equal(ref_hift_infer(fx->h, fx->mel_nf, T_NONFINAL, 0, &nz, NULL, &wav, &nw), COSY_OK);
  assert_int_equal(nw, n);
  check("infer nonfinal wav (loose)", wav, rwav, (size_t)n, 2e-2);
  free(wav), free(rwav);
}

/* ---- default noise ------------------------------------------------------------------------------- */

static void test_default_noise(void **state) {
  (void)state;
  const int nb = 8, nh = nb + 1;
  const int64_t N = 20000;
  float *a = malloc(sizeof(float) * N * nh), *b = malloc(sizeof(float) * N * nh);
  float ini[9], ini2[9];
  ref_hift_default_noise(nb, 0, N, ini, a);
  ref_hift_default_noise(nb, 0, N, ini2, b);
  assert_memory_equal(a, b, sizeof(float) * N * nh); /* deterministic */
  assert_memory_equal(ini, ini2, sizeof ini);
  assert_true(ini[0] == 0.0f);
  double sum = 0, sum2 = 0;
  float lo = 1, hi = 0;
  for (int64_t i = 0; i < N * nh; i++) {
    assert_true(a[i] >= 0.0f && a[i] < 1.0f);
    sum += a[i], sum2 += (double)a[i] * a[i];
    lo = a[i] < lo ? a[i] : lo, hi = a[i] > hi ? a[i] : hi;
  }
  double mean = sum / (N * nh), var = sum2 / (N * nh) - mean * mean;
  print_message("default noise: mean %.5f var %.5f (uniform: 0.5, 0.08333) min %.2e max %.6f\n", mean,
                var, lo, hi);
  assert_true(fabs(mean - 0.5) < 5e-3);
  assert_true(fabs(var - 1.0 / 12) < 2e-3);
  for (int k = 1; k < nh; k++) assert_true(ini[k] >= 0.0f && ini[k] < 1.0f);
  /* neighbouring rows and columns differ (no trivial pattern) */
  int same = 0;
  for (int64_t i = 1; i < N * nh; i++) same += a[i] == a[i - 1];
  assert_true(same < 10);
  /* chunk independence: rows [a0, a0 + n) equal the slice of the longer generation */
  const int64_t starts[3] = {0, 4799, 12345};
  const int64_t lens[3] = {1, 480, 7000};
  for (int c = 0; c < 3; c++) {
    ref_hift_default_noise(nb, starts[c], lens[c], NULL, b);
    assert_memory_equal(b, a + starts[c] * nh, sizeof(float) * lens[c] * nh);
  }
  /* nothing written on invalid arguments */
  b[0] = -1;
  ref_hift_default_noise(nb, -1, 4, NULL, b);
  ref_hift_default_noise(-1, 0, 4, NULL, b);
  assert_true(b[0] == -1);
  free(a), free(b);
}

/* With the default noise (the same at the same absolute sample), the non-final output of the
 * first 32 frames equals the prefix of the final output of all 48 frames: the official model
 * gives 2.9e-5 (measured with the golden data); allowed here: max abs 1e-3. Also checks that the source of the
 * non-final call is the prefix of the final one bit for bit. */
static void test_default_noise_streaming(void **state) {
  fixture *fx = *state;
  NEED(fx);
  float *wf = NULL, *wn = NULL;
  int64_t nf = 0, nn = 0;
  assert_int_equal(ref_hift_infer(fx->h, fx->mel, fx->T, 1, NULL, NULL, &wf, &nf), COSY_OK);
  assert_int_equal(ref_hift_infer(fx->h, fx->mel_nf, T_NONFINAL, 0, NULL, NULL, &wn, &nn), COSY_OK);
  assert_int_equal(nn, (int64_t)(T_NONFINAL - 8) * 480);
  double e = tu_max_abs_diff(wn, wf, (size_t)nn);
  print_message("default noise: nonfinal vs final prefix max abs %.3e (tol 1e-3), rel L2 %.3e\n", e,
                tu_rel_l2(wn, wf, (size_t)nn));
  assert_true(e <= 1e-3);
  /* the source path is chunk independent */
  float f0f[64], f0n[64];
  assert_int_equal(ref_hift_f0(fx->h, fx->mel, fx->T, 1, f0f), COSY_OK);
  assert_int_equal(ref_hift_f0(fx->h, fx->mel_nf, T_NONFINAL, 0, f0n), COSY_OK);
  float *sf = malloc(sizeof(float) * fx->T * 480), *sn = malloc(sizeof(float) * (T_NONFINAL - 3) * 480);
  assert_int_equal(ref_hift_source(fx->h, f0f, fx->T, NULL, sf), COSY_OK);
  assert_int_equal(ref_hift_source(fx->h, f0n, T_NONFINAL - 3, NULL, sn), COSY_OK);
  print_message("default noise: f0 nonfinal vs final prefix max abs %.3e\n",
                tu_max_abs_diff(f0n, f0f, T_NONFINAL - 3));
  assert_true(tu_max_abs_diff(f0n, f0f, T_NONFINAL - 3) == 0.0);
  assert_memory_equal(sn, sf, sizeof(float) * (T_NONFINAL - 3) * 480);
  free(wf), free(wn), free(sf), free(sn);
}

/* ---- arguments ------------------------------------------------------------------------------------ */

static void test_args(void **state) {
  fixture *fx = *state;
  NEED(fx);
  float f0[64], *wav = (float *)1;
  int64_t n = 7;
  float *s = calloc((size_t)fx->T * 480, sizeof(float));
  assert_int_equal(ref_hift_create(NULL, NULL), COSY_ERR_INVALID_ARG);
  ref_hift *tmp = (ref_hift *)1;
  assert_int_equal(ref_hift_create(NULL, &tmp), COSY_ERR_INVALID_ARG);
  assert_null(tmp);
  ref_hift_free(NULL);
  assert_int_equal(ref_hift_f0(NULL, fx->mel, fx->T, 1, f0), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_f0(fx->h, NULL, fx->T, 1, f0), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_f0(fx->h, fx->mel, fx->T, 1, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_f0(fx->h, fx->mel, 0, 1, f0), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_f0(fx->h, fx->mel, 3, 0, f0), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_f0(fx->h, fx->mel, -5, 1, f0), COSY_ERR_INVALID_ARG);
  print_message("error text: %s\n", cosy_last_error());
  assert_int_equal(ref_hift_source(fx->h, NULL, 4, NULL, s), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_source(fx->h, f0, 0, NULL, s), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_source(fx->h, f0, 4, NULL, NULL), COSY_ERR_INVALID_ARG);
  ref_hift_noise shortnz = {fx->rand_ini, fx->sine_waves, 480 * 4 - 1};
  assert_int_equal(ref_hift_source(fx->h, f0, 4, &shortnz, s), COSY_ERR_INVALID_ARG);
  print_message("error text: %s\n", cosy_last_error());
  ref_hift_noise nonull = {NULL, fx->sine_waves, fx->n_rows};
  assert_int_equal(ref_hift_source(fx->h, f0, 4, &nonull, s), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_decode(fx->h, fx->mel, 8, s, 0, &wav, &n), COSY_ERR_INVALID_ARG);
  print_message("error text: %s\n", cosy_last_error());
  assert_null(wav);
  assert_int_equal(n, 0);
  assert_int_equal(ref_hift_decode(fx->h, fx->mel, fx->T, NULL, 1, &wav, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_decode(fx->h, fx->mel, fx->T, s, 1, NULL, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_decode(fx->h, fx->mel, fx->T, s, 1, &wav, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_infer(fx->h, fx->mel, 8, 0, NULL, NULL, &wav, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_infer(fx->h, NULL, fx->T, 1, NULL, NULL, &wav, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_stft(s, 6, f0, f0), COSY_ERR_INVALID_ARG);
  /* smallest valid sizes work */
  assert_int_equal(ref_hift_infer(fx->h, fx->mel_nf, 9, 0, NULL, NULL, &wav, &n), COSY_OK);
  assert_int_equal(n, 480);
  free(wav);
  assert_int_equal(ref_hift_infer(fx->h, fx->mel_nf, 1, 1, NULL, NULL, &wav, &n), COSY_OK);
  assert_int_equal(n, 480);
  for (int64_t i = 0; i < n; i++) assert_true(wav[i] >= -0.99f && wav[i] <= 0.99f);
  free(wav);
  /* cancellation */
  volatile int cancel = 1;
  assert_int_equal(ref_hift_infer(fx->h, fx->mel, fx->T, 1, NULL, &cancel, &wav, &n),
                   COSY_ERR_CANCELLED);
  assert_null(wav);
  free(s);
}

/* ---- streaming ------------------------------------------------------------------------------------ */

/* Random mel, FRAME-MAJOR [T][80]: a smooth random walk per channel around a log-mel-like level
 * plus noise (never zero), fixed seed. */
static uint64_t srng = 1;
static double surand(void) {
  srng ^= srng << 13, srng ^= srng >> 7, srng ^= srng << 17;
  return (double)(srng >> 11) * (1.0 / 9007199254740992.0);
}
static float *stream_mel(int T, int M, uint64_t seed) {
  srng = seed * 0x9E3779B97F4A7C15ull + 77;
  float *m = malloc(sizeof(float) * (size_t)(T > 0 ? T : 1) * M);
  for (int c = 0; c < M; c++) {
    double v = -4.0 + 3.0 * surand();
    for (int t = 0; t < T; t++) {
      v += 0.6 * (surand() - 0.5);
      m[(size_t)t * M + c] = (float)(v + 0.3 * (surand() - 0.5));
    }
  }
  return m;
}

/* whole-mel reference: ref_hift_infer over frames [0, T) of a frame-major mel */
static float *whole(const ref_hift *h, const float *mel_fm, int T, int M, int finalize, int64_t *n) {
  float *cf = malloc(sizeof(float) * (size_t)T * M), *w = NULL;
  for (int t = 0; t < T; t++)
    for (int c = 0; c < M; c++) cf[(size_t)c * T + t] = mel_fm[(size_t)t * M + c];
  cosy_status st = ref_hift_infer(h, cf, T, finalize, NULL, NULL, &w, n);
  free(cf);
  assert_int_equal(st, COSY_OK);
  return w;
}

typedef struct stream_err {
  double rel, max_abs; /* worst over the prefixes and the final comparison */
} stream_err;

static void err_update(stream_err *e, const float *got, const float *ref, size_t n) {
  double r = tu_rel_l2(got, ref, n), a = tu_max_abs_diff(got, ref, n);
  if (!(r <= e->rel)) e->rel = r; /* NaN sticks */
  if (!(a <= e->max_abs)) e->max_abs = a;
}

/* Run one utterance through a stream in the given chunks (the last call finalizes; a chunk of 0
 * is allowed). Checks every non-final prefix (T >= 9) against ref_hift_infer(so far, 0) and the
 * concatenation against ref_hift_infer(whole, 1). dec_ctx >= 0 overrides the decode context.
 * Returns the concatenated samples (malloc'd) in *all. */
static stream_err stream_case(const ref_hift *h, const float *mel, int M, const int *chunks,
                              int n_chunks, int check_prefixes, int dec_ctx, float **all,
                              int64_t *n_all) {
  stream_err e = {0, 0};
  ref_hift_stream *st = NULL;
  assert_int_equal(ref_hift_stream_create(h, &st), COSY_OK);
  if (dec_ctx >= 0) assert_int_equal(ref_hift_stream_set_context(st, 8, dec_ctx), COSY_OK);
  int T = 0;
  for (int i = 0; i < n_chunks; i++) T += chunks[i];
  float *acc = malloc(sizeof(float) * ((size_t)T * 480 + 1));
  int64_t na = 0;
  int t = 0;
  for (int i = 0; i < n_chunks; i++) {
    const int fin = i == n_chunks - 1;
    float *w = NULL;
    int64_t n = -1;
    assert_int_equal(ref_hift_stream_run(h, st, chunks[i] ? mel + (size_t)t * M : NULL, chunks[i],
                                         fin, NULL, &w, &n),
                     COSY_OK);
    assert_non_null(w);
    t += chunks[i];
    const int64_t want = fin ? (int64_t)t * 480 : (t > 8 ? (int64_t)(t - 8) * 480 : 0);
    assert_int_equal(na + n, want);
    memcpy(acc + na, w, sizeof(float) * (size_t)n);
    na += n;
    free(w);
    if (!fin && check_prefixes && t >= 9) {
      int64_t nr = 0;
      float *r = whole(h, mel, t, M, 0, &nr);
      assert_int_equal(nr, na);
      err_update(&e, acc, r, (size_t)na);
      free(r);
    }
  }
  int64_t nr = 0;
  float *r = whole(h, mel, T, M, 1, &nr);
  assert_int_equal(nr, na);
  err_update(&e, acc, r, (size_t)na);
  free(r);
  /* a finalized stream takes no more calls */
  float *w = (float *)1;
  int64_t n = 5;
  assert_int_equal(ref_hift_stream_run(h, st, mel, 1, 1, NULL, &w, &n), COSY_ERR_INVALID_ARG);
  assert_null(w);
  assert_int_equal(n, 0);
  ref_hift_stream_free(st);
  if (all) *all = acc, *n_all = na;
  else free(acc);
  return e;
}

static int rand_chunks(int *ch, int max_n, int T, int lo, int hi, uint64_t seed) {
  srng = seed * 0x2545F4914F6CDD1Dull + 3;
  int n = 0, t = 0;
  while (t < T && n < max_n - 1) {
    int c = lo + (int)(surand() * (hi - lo + 1));
    if (c > T - t) c = T - t;
    ch[n++] = c, t += c;
  }
  ch[n++] = 0; /* the final call with T_new = 0 */
  return n;
}

#define TOL_STREAM TOL_DEC

static void report(const char *what, stream_err e) {
  print_message("stream %-44s rel L2 %.3e  max abs %.3e  (tol %.0e)\n", what, e.rel, e.max_abs,
                TOL_STREAM);
  assert_true(e.rel <= TOL_STREAM);
}

static void test_stream_context(void **state) {
  fixture *fx = *state;
  NEED(fx);
  int f0c = -1, dc = -1;
  assert_int_equal(ref_hift_stream_context(&fx->m->hp, &f0c, &dc), COSY_OK);
  print_message("stream contexts: F0 %d frames, decode %d frames\n", f0c, dc);
  assert_int_equal(f0c, 8);
  assert_int_equal(dc, 29); /* the CosyVoice3 kernels (hift.h derives it) */
  assert_int_equal(ref_hift_stream_context(NULL, &f0c, &dc), COSY_ERR_INVALID_ARG);
}

/* 1-frame chunks (each smaller than the 8-frame look-ahead), then a final call with T_new = 0;
 * 1..12-frame random chunks; mixed sizes around the look-ahead; every prefix checked. */
static void test_stream_small_chunks(void **state) {
  fixture *fx = *state;
  NEED(fx);
  const int M = fx->m->hp.mel_dim;
  int ch[512];
  {
    const int T = 45;
    float *mel = stream_mel(T, M, 1);
    for (int i = 0; i < T; i++) ch[i] = 1;
    ch[T] = 0;
    report("1-frame chunks, T 45, final T_new 0", stream_case(fx->h, mel, M, ch, T + 1, 1, -1, NULL, NULL));
    free(mel);
  }
  for (int rep = 0; rep < 3; rep++) {
    const int T = 60 + 7 * rep;
    float *mel = stream_mel(T, M, 10 + rep);
    int n = rand_chunks(ch, 512, T, 1, 12, 100 + rep);
    if (rep == 1) n--; /* the last data chunk finalizes */
    char what[64];
    snprintf(what, sizeof what, "random 1..12 chunks (%d calls), T %d", n, T);
    report(what, stream_case(fx->h, mel, M, ch, n, 1, -1, NULL, NULL));
    free(mel);
  }
  {
    const int T = 64;
    float *mel = stream_mel(T, M, 7);
    const int c[] = {3, 5, 1, 9, 8, 2, 30, 6};
    report("chunks 3,5,1,9,8,2,30,6(final)", stream_case(fx->h, mel, M, c, 8, 1, -1, NULL, NULL));
    const int c1[] = {64};
    report("one final chunk of 64", stream_case(fx->h, mel, M, c1, 1, 1, -1, NULL, NULL));
    const int c2[] = {8, 0, 56, 0};
    report("chunks 8, 0, 56, 0(final)", stream_case(fx->h, mel, M, c2, 4, 1, -1, NULL, NULL));
    free(mel);
  }
}

/* The official streaming schedule: 50, 100, 200 frames, then the rest with the final call; the
 * window re-run's cost against the whole-mel re-runs is timed (CPU, this model). */
static void test_stream_schedule(void **state) {
  fixture *fx = *state;
  NEED(fx);
  const int M = fx->m->hp.mel_dim;
  const int c[] = {50, 100, 200, 37};
  const int T = 387;
  float *mel = stream_mel(T, M, 42);
  report("schedule 50/100/200/37(final), T 387", stream_case(fx->h, mel, M, c, 4, 1, -1, NULL, NULL));
  /* timing: stream calls vs whole-mel re-runs of the same schedule */
  double ts = 0, tw = 0;
  ref_hift_stream *st = NULL;
  assert_int_equal(ref_hift_stream_create(fx->h, &st), COSY_OK);
  int t = 0;
  for (int i = 0; i < 4; i++) {
    float *w = NULL;
    int64_t n = 0;
    double t0 = cosy_now();
    assert_int_equal(ref_hift_stream_run(fx->h, st, mel + (size_t)t * M, c[i], i == 3, NULL, &w, &n),
                     COSY_OK);
    double t1 = cosy_now();
    free(w);
    t += c[i];
    int64_t nr = 0;
    double t2 = cosy_now();
    free(whole(fx->h, mel, t, M, i == 3, &nr));
    double t3 = cosy_now();
    print_message("stream timing: call %d (+%d -> T %d): stream %.1f ms, whole-mel %.1f ms\n", i,
                  c[i], t, 1e3 * (t1 - t0), 1e3 * (t3 - t2));
    ts += t1 - t0, tw += t3 - t2;
  }
  print_message("stream timing: total stream %.1f ms, whole-mel re-runs %.1f ms\n", 1e3 * ts,
                1e3 * tw);
  ref_hift_stream_free(st);
  free(mel);
}

/* The derived context is needed: a stream with a decode context several frames short differs
 * from the whole-mel output (so the comparisons above can fail); the F0 context likewise. Also:
 * two streams of the same model are independent, and free/create gives a fresh stream with the
 * same output bit for bit. */
static void test_stream_context_needed(void **state) {
  fixture *fx = *state;
  NEED(fx);
  const int M = fx->m->hp.mel_dim;
  const int T = 120;
  float *mel = stream_mel(T, M, 5);
  const int c[] = {40, 40, 40, 0};
  float *a = NULL, *b = NULL;
  int64_t na = 0, nb = 0;
  stream_err ok = stream_case(fx->h, mel, M, c, 4, 0, -1, &a, &na);
  report("chunks 40/40/40/0 (reference for reuse)", ok);
  stream_err ok2 = stream_case(fx->h, mel, M, c, 4, 0, -1, &b, &nb);
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, sizeof(float) * (size_t)na); /* reuse after free/create */
  free(b);
  (void)ok2;
  /* 28: one frame short (the bound is tight: no longer bit-identical); 20: clearly wrong */
  const int shorts[] = {28, 20};
  for (int i = 0; i < 2; i++) {
    stream_err bad = stream_case(fx->h, mel, M, c, 4, 0, shorts[i], NULL, NULL);
    print_message("stream with decode context %d (< 29): rel L2 %.3e max abs %.3e (must be %s)\n",
                  shorts[i], bad.rel, bad.max_abs, i == 0 ? "> 0" : "> 1e-6 rel");
    assert_true(i == 0 ? bad.max_abs > 0 : bad.rel > 1e-6);
  }
  /* the F0 context: 8 -> 2 */
  {
    ref_hift_stream *st = NULL;
    assert_int_equal(ref_hift_stream_create(fx->h, &st), COSY_OK);
    assert_int_equal(ref_hift_stream_set_context(st, 2, 29), COSY_OK);
    float *acc = malloc(sizeof(float) * T * 480);
    int64_t n_acc = 0;
    int t = 0;
    for (int i = 0; i < 4; i++) {
      float *w = NULL;
      int64_t n = 0;
      assert_int_equal(ref_hift_stream_run(fx->h, st, c[i] ? mel + (size_t)t * M : NULL, c[i], i == 3,
                                           NULL, &w, &n),
                       COSY_OK);
      memcpy(acc + n_acc, w, sizeof(float) * n), n_acc += n, t += c[i];
      free(w);
    }
    assert_int_equal(n_acc, na);
    double e = tu_rel_l2(acc, a, (size_t)na);
    print_message("stream with F0 context 2 (< 8): rel L2 %.3e (must be > 1e-6)\n", e);
    assert_true(e > 1e-6);
    assert_int_equal(ref_hift_stream_set_context(st, 8, 29), COSY_ERR_INVALID_ARG); /* used */
    ref_hift_stream_free(st);
    free(acc);
  }
  free(a), free(mel);
}

/* Cancellation returns nothing and keeps the stream consistent; arguments. */
static void test_stream_cancel_args(void **state) {
  fixture *fx = *state;
  NEED(fx);
  const int M = fx->m->hp.mel_dim;
  const int T = 90;
  float *mel = stream_mel(T, M, 9);
  int64_t nr = 0;
  float *ref = whole(fx->h, mel, T, M, 1, &nr);
  ref_hift_stream *st = NULL;
  assert_int_equal(ref_hift_stream_create(fx->h, &st), COSY_OK);
  float *acc = malloc(sizeof(float) * T * 480), *w = (float *)1;
  int64_t na = 0, n = 7;
  volatile int cancel = 0;
  assert_int_equal(ref_hift_stream_run(fx->h, st, mel, 30, 0, &cancel, &w, &n), COSY_OK);
  memcpy(acc, w, sizeof(float) * n), na = n;
  free(w);
  cancel = 1;
  w = (float *)1, n = 7;
  assert_int_equal(ref_hift_stream_run(fx->h, st, mel + 30 * M, 30, 0, &cancel, &w, &n),
                   COSY_ERR_CANCELLED);
  assert_null(w);
  assert_int_equal(n, 0);
  print_message("error text: %s\n", cosy_last_error());
  cancel = 0; /* the cancelled call's frames were kept: go on with the rest */
  assert_int_equal(ref_hift_stream_run(fx->h, st, mel + 60 * M, 30, 1, &cancel, &w, &n), COSY_OK);
  memcpy(acc + na, w, sizeof(float) * n), na += n;
  free(w);
  assert_int_equal(na, nr);
  double e = tu_rel_l2(acc, ref, (size_t)na);
  print_message("stream after a cancelled call vs whole: rel L2 %.3e\n", e);
  assert_true(e <= TOL_STREAM);
  /* arguments */
  assert_int_equal(ref_hift_stream_run(fx->h, st, mel, 1, 0, NULL, &w, &n), COSY_ERR_INVALID_ARG);
  ref_hift_stream_free(st);
  ref_hift_stream_free(NULL);
  assert_int_equal(ref_hift_stream_create(fx->h, NULL), COSY_ERR_INVALID_ARG);
  st = (ref_hift_stream *)1;
  assert_int_equal(ref_hift_stream_create(NULL, &st), COSY_ERR_INVALID_ARG);
  assert_null(st);
  assert_int_equal(ref_hift_stream_create(fx->h, &st), COSY_OK);
  assert_int_equal(ref_hift_stream_run(NULL, st, mel, 1, 0, NULL, &w, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_stream_run(fx->h, NULL, mel, 1, 0, NULL, &w, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_stream_run(fx->h, st, NULL, 1, 0, NULL, &w, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_stream_run(fx->h, st, mel, -1, 0, NULL, &w, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_stream_run(fx->h, st, mel, 1, 0, NULL, NULL, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_hift_stream_run(fx->h, st, mel, 1, 0, NULL, &w, NULL), COSY_ERR_INVALID_ARG);
  /* an empty utterance: one final call without frames */
  w = (float *)1, n = 7;
  assert_int_equal(ref_hift_stream_run(fx->h, st, NULL, 0, 1, NULL, &w, &n), COSY_OK);
  assert_non_null(w);
  assert_int_equal(n, 0);
  free(w);
  ref_hift_stream_free(st);
  free(acc), free(ref), free(mel);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f0_final),         cmocka_unit_test(test_f0_nonfinal),
      cmocka_unit_test(test_source_final),     cmocka_unit_test(test_source_nonfinal),
      cmocka_unit_test(test_stft),             cmocka_unit_test(test_decode_final),
      cmocka_unit_test(test_decode_nonfinal),  cmocka_unit_test(test_infer_final),
      cmocka_unit_test(test_infer_nonfinal),   cmocka_unit_test(test_default_noise),
      cmocka_unit_test(test_default_noise_streaming), cmocka_unit_test(test_args),
      cmocka_unit_test(test_stream_context),   cmocka_unit_test(test_stream_small_chunks),
      cmocka_unit_test(test_stream_schedule),  cmocka_unit_test(test_stream_context_needed),
      cmocka_unit_test(test_stream_cancel_args),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
