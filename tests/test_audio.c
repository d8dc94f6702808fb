/* test_audio.c - WAV I/O, resampling, FFT and the prompt mel (lib/audio.c, lib/ref/fft.c).
 *
 * Golden data (../shared/golden/frontend, official matcha mel_spectrogram in fp32):
 *   mel24k.npy     [1,174,80]  mel of zero_shot_prompt.wav (24 kHz float)     rel L2 <= 1e-4
 *   xl_mel24k.npy  [1,100,80]  mel of cross_lingual_prompt.wav (22.05 kHz int16) resampled by
 *                  torchaudio's sinc resampler, which cosy_audio_to_mel reproduces: rel L2 <= 1e-4;
 *                  via libsamplerate instead (another filter): bands 0..74 rel L2 <= 1e-2
 *   wav16k.npy     [55680]     torchaudio Resample(24000, 16000) of the 24 kHz prompt: rel L2 <= 1e-5
 * Golden data of tests/data/resample (tools/golden_resample.py): torchaudio Resample of real audio
 *   at 8, 22.05, 32, 44.1, 48 kHz to 16 and 24 kHz: rel L2 <= 1e-6, max abs <= 2.5e-7
 *   mel_fb_24k.npy [80,961]    librosa slaney filterbank                        max abs <= 1e-7
 *                                                                              (rel L2 <= 1e-6)
 * Self-checks: FFT vs a double-precision direct DFT (rel L2 < 1e-5), WAV round trips (exact),
 * corrupt/truncated WAVs fail cleanly, chunked resampling == one-shot (bit-exact), argument checks.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka after the standard headers */
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audio.h"
#include "cosyvoice.h"
#include "ref/fft.h"
#include "testutil.h"
#include "util.h"

#define PI 3.14159265358979323846

/* ------------------------------------------------------------------------------ helpers */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* xorshift64*, uniform [0, 1) */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (double)((g_rng * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

static const char *tmp_path(const char *tag) {
  char name[64];
  snprintf(name, sizeof name, "audio_%s.wav", tag);
  return tu_tmp_path(name);
}

static void write_bytes(const char *path, const unsigned char *b, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)sz + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)sz, f), (size_t)sz);
  fclose(f);
  *n = (size_t)sz;
  return b;
}

static void put16(unsigned char *p, uint32_t v) { p[0] = v & 0xff; p[1] = (v >> 8) & 0xff; }
static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (v >> (8 * i)) & 0xff;
}

/* A WAV in memory: fmt (plain 16 bytes or EXTENSIBLE 40 bytes), an unknown "LIST" chunk with an
 * odd size (pad byte), then data. Returns the size. */
static size_t make_wav(unsigned char *b, uint32_t tag, int extensible, uint32_t ch, uint32_t rate,
                       uint32_t bits, const unsigned char *data, uint32_t data_size) {
  size_t p = 12;
  memcpy(b, "RIFF", 4);
  memcpy(b + 8, "WAVE", 4);
  memcpy(b + p, "fmt ", 4);
  put32(b + p + 4, extensible ? 40 : 16);
  put16(b + p + 8, extensible ? 0xFFFE : tag);
  put16(b + p + 10, ch);
  put32(b + p + 12, rate);
  put32(b + p + 16, rate * ch * bits / 8);
  put16(b + p + 20, ch * bits / 8);
  put16(b + p + 22, bits);
  p += 24;
  if (extensible) {
    static const unsigned char tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                           0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};
    put16(b + p, 22);
    put16(b + p + 2, bits);
    put32(b + p + 4, 0);
    put16(b + p + 8, tag);
    memcpy(b + p + 10, tail, 14);
    p += 24;
  }
  memcpy(b + p, "LIST", 4);
  put32(b + p + 4, 3);
  memcpy(b + p + 8, "abc", 3);
  b[p + 11] = 0;
  p += 12;
  memcpy(b + p, "data", 4);
  put32(b + p + 4, data_size);
  memcpy(b + p + 8, data, data_size);
  p += 8 + data_size;
  put32(b + 4, (uint32_t)(p - 8));
  return p;
}

/* ----------------------------------------------------------------------------------- FFT */

static void dft_ref(const float *in, double *out, int n, int inverse) {
  double *c = malloc(sizeof(double) * n), *sn = malloc(sizeof(double) * n);
  assert_true(c && sn);
  for (int r = 0; r < n; r++) {
    double a = (inverse ? 2.0 : -2.0) * PI * (double)r / n;
    c[r] = cos(a);
    sn[r] = sin(a);
  }
  for (int k = 0; k < n; k++) {
    double sr = 0, si = 0;
    for (int j = 0; j < n; j++) {
      int r = (int)(((int64_t)j * k) % n);
      sr += in[2 * j] * c[r] - in[2 * j + 1] * sn[r];
      si += in[2 * j] * sn[r] + in[2 * j + 1] * c[r];
    }
    out[2 * k] = sr;
    out[2 * k + 1] = si;
  }
  free(c);
  free(sn);
}

static void test_fft_vs_dft(void **state) {
  (void)state;
  /* tolerance: relative L2 error < 1e-5 against a double direct DFT */
  static const int lens[] = {1, 2, 3, 4, 5, 6, 8, 9, 12, 15, 16, 25, 30, 60, 120, 400,
                             480, 512, 960, 1920, 7, 11, 49, 14, 1000, 2048, 3000};
  double worst = 0.0;
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    const int n = lens[li];
    float *in = malloc(sizeof(float) * 2 * n), *out = malloc(sizeof(float) * 2 * n);
    double *ref = malloc(sizeof(double) * 2 * n);
    assert_true(in && out && ref);
    for (int i = 0; i < 2 * n; i++) in[i] = (float)(2.0 * urand() - 1.0);
    cosy_fft_plan *p = NULL;
    assert_int_equal(cosy_fft_plan_create(n, &p), COSY_OK);
    assert_int_equal(cosy_fft_plan_size(p), n);
    for (int inv = 0; inv < 2; inv++) {
      assert_int_equal(cosy_fft_exec(p, in, out, inv), COSY_OK);
      dft_ref(in, ref, n, inv);
      double num = 0, den = 0;
      for (int i = 0; i < 2 * n; i++) {
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
      }
      double rel = sqrt(num / den);
      if (rel > worst) worst = rel;
      if (rel >= 1e-5) print_message("n=%d inverse=%d rel L2 %.3g\n", n, inv, rel);
      assert_true(rel < 1e-5);
    }
    if (n == 1920 || n == 400 || n == 512 || n == 16) assert_true(cosy_fft_plan_is_fast(p));
    if (n == 7 || n == 49) assert_false(cosy_fft_plan_is_fast(p));
    /* overlapping buffers are refused */
    assert_int_equal(cosy_fft_exec(p, in, in, 0), COSY_ERR_INVALID_ARG);
    cosy_fft_plan_free(p);
    free(in);
    free(out);
    free(ref);
  }
  print_message("FFT vs direct DFT: worst relative L2 %.3g (limit 1e-5)\n", worst);
  cosy_fft_plan *p = NULL;
  assert_int_equal(cosy_fft_plan_create(0, &p), COSY_ERR_INVALID_ARG);
  assert_null(p);
  assert_int_equal(cosy_fft_plan_create(-5, &p), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_fft_plan_create(16, NULL), COSY_ERR_INVALID_ARG);
}

/* the real transform (bins 0 .. n/2 of n reals) against the direct DFT in double and the complex
 * plan on the same input; also per-bin: no bin is off by more than 1e-5 of the spectrum's L2 norm
 * (a wrong twiddle in one stage would pass a loose whole-array check only on long inputs) */
static void test_rfft_vs_dft(void **state) {
  (void)state;
  static const int lens[] = {2, 4, 6, 8, 10, 12, 16, 18, 24, 30, 32, 40, 50, 60, 64, 90, 120,
                             200, 250, 256, 400, 480, 512, 960, 1024, 1920, 2000, 3840,
                             14, 22, 26, 98, 1022};
  double worst = 0.0, worst_c = 0.0;
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    const int n = lens[li], nb = n / 2 + 1;
    float *x = malloc(sizeof(float) * n), *cin = malloc(sizeof(float) * 2 * n);
    float *cout_ = malloc(sizeof(float) * 2 * n), *out = malloc(sizeof(float) * (n + 2));
    double *ref = malloc(sizeof(double) * 2 * n);
    assert_true(x && cin && cout_ && out && ref);
    for (int i = 0; i < n; i++) {
      x[i] = (float)(2.0 * urand() - 1.0);
      cin[2 * i] = x[i], cin[2 * i + 1] = 0.0f;
    }
    cosy_rfft_plan *p = NULL;
    assert_int_equal(cosy_rfft_plan_create(n, &p), COSY_OK);
    float *scratch = malloc(sizeof(float) * (size_t)cosy_rfft_scratch_floats(p));
    assert_non_null(scratch);
    out[n] = out[n + 1] = 12345.0f;
    cosy_rfft_exec(p, x, out, scratch);
    dft_ref(cin, ref, n, 0);
    cosy_fft_plan *cp = NULL;
    assert_int_equal(cosy_fft_plan_create(n, &cp), COSY_OK);
    assert_int_equal(cosy_fft_exec(cp, cin, cout_, 0), COSY_OK);
    double num = 0, den = 0, numc = 0, maxe = 0;
    for (int i = 0; i < 2 * nb; i++) {
      double e = out[i] - ref[i];
      num += e * e;
      den += ref[i] * ref[i];
      numc += (cout_[i] - ref[i]) * (cout_[i] - ref[i]);
      if (fabs(e) > maxe) maxe = fabs(e);
    }
    double rel = sqrt(num / den), relc = sqrt(numc / den), bin = maxe / sqrt(den);
    if (rel > worst) worst = rel;
    if (relc > worst_c) worst_c = relc;
    if (rel >= 1e-5 || bin >= 1e-5)
      print_message("rfft n=%d rel L2 %.3g, worst bin %.3g of the norm\n", n, rel, bin);
    assert_true(rel < 1e-5);
    assert_true(bin < 1e-5);
    assert_true(out[1] == 0.0f && out[n + 1] == 0.0f); /* DC and Nyquist are real */
    cosy_rfft_plan_free(p);
    cosy_fft_plan_free(cp);
    free(scratch), free(x), free(cin), free(cout_), free(out), free(ref);
  }
  print_message("real FFT vs direct DFT: worst relative L2 %.3g (complex plan: %.3g; limit 1e-5)\n",
                worst, worst_c);
  cosy_rfft_plan *p = NULL;
  assert_int_equal(cosy_rfft_plan_create(0, &p), COSY_ERR_INVALID_ARG);
  assert_null(p);
  assert_int_equal(cosy_rfft_plan_create(7, &p), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_rfft_plan_create(16, NULL), COSY_ERR_INVALID_ARG);
}

/* ------------------------------------------------------------------------------- golden mel */

static void test_mel_filterbank(void **state) {
  (void)state;
  const char *path = tu_shared("golden/frontend/mel_fb_24k.npy");
  TU_REQUIRE(path, "../shared not found");
  int nd;
  int64_t sh[8];
  float *ref = tu_npy_f32(path, &nd, sh);
  TU_REQUIRE(ref, "cannot load %s", path);
  assert_int_equal(nd, 2);
  assert_int_equal(sh[0], 80);
  assert_int_equal(sh[1], 961);
  float *fb = malloc(sizeof(float) * 80 * 961);
  assert_non_null(fb);
  assert_int_equal(cosy_mel_filterbank(24000, 1920, 80, 0.0, 0.0, fb), COSY_OK);
  double rel = tu_rel_l2(fb, ref, 80 * 961), mad = tu_max_abs_diff(fb, ref, 80 * 961);
  size_t same = 0;
  for (size_t i = 0; i < 80 * 961; i++) same += fb[i] == ref[i];
  /* tolerance: max abs <= 1e-7 (values up to ~1e-2; float rounding), rel L2 <= 1e-6 */
  print_message("mel filterbank vs librosa: rel L2 %.3g, max abs %.3g, %zu/%d bit-identical\n",
                rel, mad, same, 80 * 961);
  assert_true(mad <= 1e-7);
  assert_true(rel <= 1e-6);
  /* argument checks */
  assert_int_equal(cosy_mel_filterbank(24000, 1920, 80, 0.0, 0.0, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_mel_filterbank(24000, 1920, 0, 0.0, 0.0, fb), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_mel_filterbank(24000, 1920, 80, 0.0, 13000.0, fb), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_mel_filterbank(24000, 1920, 80, 500.0, 400.0, fb), COSY_ERR_INVALID_ARG);
  free(fb);
  free(ref);
}

static void test_mel_zero_shot(void **state) {
  (void)state;
  const char *wp = tu_shared("audio/zero_shot_prompt.wav");
  TU_REQUIRE(wp, "../shared not found");
  float *pcm;
  int64_t n;
  int32_t sr;
  assert_int_equal(cosy_wav_read(wp, &pcm, &n, &sr), COSY_OK);
  assert_int_equal(sr, 24000);
  int nd;
  int64_t sh[8];
  float *ref = tu_npy_f32(tu_shared("golden/frontend/mel24k.npy"), &nd, sh);
  TU_REQUIRE(ref, "cannot load mel24k.npy");
  assert_int_equal(nd, 3);
  float *mel;
  int32_t T;
  double t0 = cosy_now();
  assert_int_equal(cosy_audio_to_mel(pcm, n, sr, &mel, &T), COSY_OK);
  double dt = cosy_now() - t0;
  assert_int_equal(T, n / 480);
  assert_int_equal(T, sh[1]);
  assert_int_equal(sh[2], 80);
  double rel = tu_rel_l2(mel, ref, (size_t)T * 80), mad = tu_max_abs_diff(mel, ref, (size_t)T * 80);
  /* tolerance: rel L2 <= 1e-4 (fp32 FFT and summation order vs torch) */
  print_message("zero-shot prompt mel (%lld samples, %d frames, %.1f ms): rel L2 %.3g, max abs "
                "%.3g (limit rel 1e-4)\n",
                (long long)n, T, dt * 1e3, rel, mad);
  assert_true(rel <= 1e-4);
  free(mel);
  free(ref);
  free(pcm);
}

static void test_mel_cross_lingual(void **state) {
  (void)state;
  const char *wp = tu_shared("audio/cross_lingual_prompt.wav");
  TU_REQUIRE(wp, "../shared not found");
  float *pcm;
  int64_t n;
  int32_t sr;
  assert_int_equal(cosy_wav_read(wp, &pcm, &n, &sr), COSY_OK);
  assert_int_equal(sr, 22050);
  int nd;
  int64_t sh[8];
  float *ref = tu_npy_f32(tu_shared("golden/frontend/xl_mel24k.npy"), &nd, sh);
  TU_REQUIRE(ref, "cannot load xl_mel24k.npy");
  assert_int_equal(sh[1], 100);
  assert_int_equal(sh[2], 80);
  float *mel;
  int32_t T;
  double t0 = cosy_now();
  assert_int_equal(cosy_audio_to_mel(pcm, n, sr, &mel, &T), COSY_OK);
  double dt = cosy_now() - t0;
  /* 24 kHz length is ceil(n * 24000 / 22050) as torchaudio's */
  assert_int_equal(T, ((n * 24000 + 22049) / 22050) / 480);
  assert_true(T >= 100);
  double rel = tu_rel_l2(mel, ref, 100 * 80), mad = tu_max_abs_diff(mel, ref, 100 * 80);
  /* tolerance: rel L2 <= 1e-4 (3e-2 would do for a libsamplerate resampler; cosy_audio_to_mel uses
   * the torchaudio-compatible resampler, so only fp32 rounding remains) */
  print_message("cross-lingual prompt mel (22.05 kHz -> 24 kHz, torchaudio-style resampler, %d "
                "frames, %.1f ms): rel L2 %.3g, max abs %.3g (limit rel 1e-4)\n",
                T, dt * 1e3, rel, mad);
  assert_true(rel <= 1e-4);
  free(mel);

  /* the same through libsamplerate (SRC_SINC_BEST_QUALITY), for the record: its sharper
   * anti-alias filter empties the 10.9-12 kHz region that torchaudio's filter keeps, so the top
   * two mel bands (78, 79) fall to the log(1e-5) floor and bands 75..77 move by ~0.3;
   * below them it agrees to ~3e-3.
   * tolerance: bands 0..74 rel L2 <= 1e-2; all bands <= 0.1 */
  float *x24;
  int64_t n24;
  assert_int_equal(cosy_resample(pcm, n, sr, 24000, &x24, &n24), COSY_OK);
  assert_int_equal(cosy_mel_24k(x24, n24, &mel, &T), COSY_OK);
  double rel_all = tu_rel_l2(mel, ref, 100 * 80);
  double num = 0, den = 0;
  for (int t = 0; t < 100; t++)
    for (int m = 0; m < 75; m++) {
      double d = (double)mel[t * 80 + m] - ref[t * 80 + m];
      num += d * d;
      den += (double)ref[t * 80 + m] * ref[t * 80 + m];
    }
  double rel_low = sqrt(num / den);
  print_message("  via libsamplerate: rel L2 %.3g (all bands), %.3g (bands 0..74)\n", rel_all,
                rel_low);
  assert_true(rel_low <= 1e-2);
  assert_true(rel_all <= 0.1);
  free(mel);
  free(x24);
  free(ref);
  free(pcm);
}

/* torchaudio Resample's output as a direct formula, every kernel tap (no span shortcut) */
static double sinc_hann_direct(const float *x, int64_t n, int64_t orig, int64_t nw, int64_t j) {
  const double lpw = 6.0, base = (double)(orig < nw ? orig : nw) * 0.99;
  const int64_t width = (int64_t)ceil(lpw * (double)orig / base);
  const int64_t b = j / nw, i = j % nw;
  double acc = 0;
  for (int64_t k = 0; k < 2 * width + orig; k++) {
    int64_t m = b * orig + k - width;
    if (m < 0 || m >= n) continue;
    double t = ((double)(-(float)i / (float)nw) + (double)(k - width) / orig) * base;
    t = t < -lpw ? -lpw : t > lpw ? lpw : t;
    double win = cos(t * PI / lpw / 2) * cos(t * PI / lpw / 2);
    t *= PI;
    double kv = (t == 0 ? 1.0 : sin(t) / t) * win * base / orig;
    acc += (double)(float)kv * x[m];
  }
  return acc;
}

static void test_resample_sinc_hann(void **state) {
  (void)state;
  /* 1. vs torchaudio's Resample(24000, 16000) of the zero-shot prompt (golden wav16k.npy)
   *    tolerance: rel L2 <= 1e-5 (fp32 kernel; we sum in double, torch in fp32) */
  const char *wp = tu_shared("audio/zero_shot_prompt.wav");
  if (wp && access(wp, R_OK) == 0) {
    float *pcm, *y, *ref;
    int64_t n, ny, sh[8];
    int32_t sr;
    int nd;
    assert_int_equal(cosy_wav_read(wp, &pcm, &n, &sr), COSY_OK);
    ref = tu_npy_f32(tu_shared("golden/frontend/wav16k.npy"), &nd, sh);
    assert_non_null(ref);
    assert_int_equal(cosy_resample_sinc_hann(pcm, n, sr, 16000, &y, &ny), COSY_OK);
    assert_int_equal(ny, sh[0]);
    double rel = tu_rel_l2(y, ref, (size_t)ny), mad = tu_max_abs_diff(y, ref, (size_t)ny);
    print_message("24k -> 16k vs torchaudio Resample: rel L2 %.3g, max abs %.3g (limit 1e-5)\n",
                  rel, mad);
    assert_true(rel <= 1e-5);
    free(y);
    assert_int_equal(cosy_resample(pcm, n, sr, 16000, &y, &ny), COSY_OK);
    print_message("  (libsamplerate for the record: rel L2 %.3g)\n",
                  tu_rel_l2(y, ref, (size_t)ny));
    free(y);
    free(ref);
    free(pcm);
  }
  /* 2. vs the direct formula for several rate pairs, including co-prime ones */
  static const int32_t rates[][2] = {{22050, 24000}, {44100, 24000}, {16001, 24000},
                                     {192000, 24000}, {191999, 24000}, {24000, 16000},
                                     {8000, 24000}, {24000, 48000}};
  enum { N = 3000 };
  float *x = malloc(sizeof(float) * N);
  assert_non_null(x);
  for (int i = 0; i < N; i++) x[i] = (float)(2 * urand() - 1);
  double worst = 0;
  for (size_t ri = 0; ri < sizeof rates / sizeof rates[0]; ri++) {
    const int64_t a = rates[ri][0], b = rates[ri][1];
    int64_t g = a, h = b;
    while (h) { int64_t t = g % h; g = h; h = t; }
    float *y;
    int64_t ny;
    assert_int_equal(cosy_resample_sinc_hann(x, N, (int32_t)a, (int32_t)b, &y, &ny), COSY_OK);
    assert_int_equal(ny, (N * b + a - 1) / a);
    for (int s = 0; s < 60; s++) {
      int64_t j = s < 20 ? s : s < 40 ? ny - 1 - (s - 20) : (int64_t)(urand() * (double)ny);
      double r = sinc_hann_direct(x, N, a / g, b / g, j);
      double e = fabs(r - y[j]);
      if (e > worst) worst = e;
      if (e > 1e-5) print_message("%lld->%lld sample %lld: %g vs %g\n", (long long)a,
                                  (long long)b, (long long)j, y[j], r);
      assert_true(e <= 1e-5);
    }
    free(y);
  }
  print_message("sinc_hann vs direct formula: max abs %.3g (limit 1e-5)\n", worst);
  free(x);
}

/* vs torchaudio.transforms.Resample (the official load_wav) on real audio: tests/data/resample
 * (tools/golden_resample.py), cross_lingual_prompt.wav samples [77175, 79575) taken as audio at
 * 8, 22.05, 32, 44.1 and 48 kHz, to 16 and 24 kHz. Float precision: max abs <= 2.5e-7 (two fp32
 * ulps at the signal's peak of ~0.68; torch sums in fp32, the library in double) and rel L2 <= 1e-6.
 * The kernel in double throughout (phase offsets not rounded to fp32 as torchaudio's are) misses
 * this at 22.05 and 44.1 kHz by ~10x. */
static void test_resample_torchaudio_golden(void **state) {
  (void)state;
  const char *wp = tu_shared("audio/cross_lingual_prompt.wav");
  TU_REQUIRE(wp && access(wp, R_OK) == 0, "shared reference data not found (set COSY_SHARED)");
  float *pcm;
  int64_t n;
  int32_t sr;
  assert_int_equal(cosy_wav_read(wp, &pcm, &n, &sr), COSY_OK);
  enum { START = 77175, LEN = 2400 };
  assert_true(n >= START + LEN);
  static const int32_t rates[] = {8000, 22050, 32000, 44100, 48000}, outs[] = {16000, 24000};
  for (size_t ri = 0; ri < sizeof rates / sizeof rates[0]; ri++)
    for (size_t oi = 0; oi < 2; oi++) {
      char nm[64];
      snprintf(nm, sizeof nm, "data/resample/rs_%d_to_%d.npy", (int)rates[ri], (int)outs[oi]);
      int nd;
      int64_t sh[8];
      float *ref = tu_npy_f32(tu_tests_file(nm), &nd, sh), *y;
      assert_non_null(ref);
      int64_t ny;
      assert_int_equal(cosy_resample_sinc_hann(pcm + START, LEN, rates[ri], outs[oi], &y, &ny),
                       COSY_OK);
      assert_int_equal(ny, tu_numel(nd, sh));
      double rel = tu_rel_l2(y, ref, (size_t)ny), mad = tu_max_abs_diff(y, ref, (size_t)ny);
      print_message("%5d -> %5d Hz vs torchaudio Resample: %5lld samples, rel L2 %.3g, max abs "
                    "%.3g (limits 1e-6, 2.5e-7)\n",
                    (int)rates[ri], (int)outs[oi], (long long)ny, rel, mad);
      assert_true(rel <= 1e-6);
      assert_true(mad <= 2.5e-7);
      free(y);
      free(ref);
    }
  free(pcm);
}

/* ----------------------------------------------------------------------------------- WAV */

static void test_wav_roundtrip(void **state) {
  (void)state;
  enum { N = 1000 };
  float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)(int)floor((2.0 * urand() - 1.0) * 32768.0) / 32768.0f;
  x[0] = 0.0f;
  x[1] = -1.0f;
  x[2] = 32767.0f / 32768.0f;
  const char *p = tmp_path("rt");
  float *y;
  int64_t n;
  int32_t sr;
  /* float32: exact */
  assert_int_equal(cosy_wav_write(p, x, N, 44100, 1), COSY_OK);
  assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_OK);
  assert_int_equal(n, N);
  assert_int_equal(sr, 44100);
  assert_memory_equal(x, y, sizeof x);
  free(y);
  /* int16: k/32768 round-trips exactly */
  assert_int_equal(cosy_wav_write(p, x, N, 16000, 0), COSY_OK);
  assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_OK);
  assert_int_equal(n, N);
  assert_int_equal(sr, 16000);
  assert_memory_equal(x, y, sizeof x);
  free(y);
  /* int16 clipping and NaN */
  float c[4] = {2.0f, -3.0f, NAN, 0.5f};
  assert_int_equal(cosy_wav_write(p, c, 4, 8000, 0), COSY_OK);
  assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_OK);
  assert_int_equal(n, 4);
  assert_true(y[0] == 32767.0f / 32768.0f && y[1] == -1.0f && y[2] == 0.0f && y[3] == 0.5f);
  free(y);
  /* empty file */
  assert_int_equal(cosy_wav_write(p, NULL, 0, 8000, 1), COSY_OK);
  assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_OK);
  assert_int_equal(n, 0);
  assert_non_null(y);
  free(y);
  unlink(p);
}

/* hand-built files: every encoding, stereo mixing, EXTENSIBLE, extra chunks */
static void test_wav_encodings(void **state) {
  (void)state;
  unsigned char data[64], b[256];
  const char *p = tmp_path("enc");
  float *y;
  int64_t n;
  int32_t sr;
  /* 16-bit stereo: frames (1000, 3000) and (-32768, 0) -> means 2000/32768 and -0.5 */
  put16(data, 1000); put16(data + 2, 3000); put16(data + 4, 0x8000); put16(data + 6, 0);
  for (int ext = 0; ext < 2; ext++) {
    size_t sz = make_wav(b, 1, ext, 2, 48000, 16, data, 8);
    write_bytes(p, b, sz);
    assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(sr, 48000);
    assert_true(fabsf(y[0] - 2000.0f / 32768.0f) < 1e-7f && y[1] == -0.5f);
    free(y);
  }
  /* 8-bit unsigned mono: 0 -> -1, 128 -> 0, 192 -> 0.5 */
  data[0] = 0; data[1] = 128; data[2] = 192;
  write_bytes(p, b, make_wav(b, 1, 0, 1, 16000, 8, data, 3)); /* odd data size, no pad byte */
  assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_OK);
  assert_int_equal(n, 3);
  assert_true(y[0] == -1.0f && y[1] == 0.0f && y[2] == 0.5f);
  free(y);
  /* 24-bit mono: 0x400000 -> 0.5, 0x800000 -> -1, 0xFFFFFF -> -1/2^23 */
  const unsigned char d24[9] = {0, 0, 0x40, 0, 0, 0x80, 0xff, 0xff, 0xff};
  write_bytes(p, b, make_wav(b, 1, 1, 1, 24000, 24, d24, 9));
  assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_OK);
  assert_int_equal(n, 3);
  assert_true(y[0] == 0.5f && y[1] == -1.0f && y[2] == -1.0f / 8388608.0f);
  free(y);
  /* 32-bit int: 0x80000000 -> -1, 0x40000000 -> 0.5 */
  put32(data, 0x80000000u); put32(data + 4, 0x40000000u);
  write_bytes(p, b, make_wav(b, 1, 0, 1, 24000, 32, data, 8));
  assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_OK);
  assert_true(n == 2 && y[0] == -1.0f && y[1] == 0.5f);
  free(y);
  /* float64 stereo, EXTENSIBLE: (0.25, 0.75) -> 0.5 */
  double dd[2] = {0.25, 0.75};
  memcpy(data, dd, 16); /* the test runs on little-endian hosts */
  write_bytes(p, b, make_wav(b, 3, 1, 2, 96000, 64, data, 16));
  assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_OK);
  assert_true(n == 1 && sr == 96000 && y[0] == 0.5f);
  free(y);
  /* partial trailing frame is dropped */
  put16(data, 100); put16(data + 2, 200); data[4] = 7;
  write_bytes(p, b, make_wav(b, 1, 0, 1, 24000, 16, data, 5));
  assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_OK);
  assert_int_equal(n, 2);
  free(y);
  /* unsupported encodings: A-law (6), 12-bit PCM, unknown EXTENSIBLE GUID */
  write_bytes(p, b, make_wav(b, 6, 0, 1, 8000, 8, data, 4));
  assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_ERR_UNSUPPORTED);
  assert_null(y);
  print_message("A-law: %s\n", cosy_last_error());
  size_t sz = make_wav(b, 1, 1, 1, 8000, 16, data, 4);
  b[12 + 8 + 24 + 10] = 0x55; /* GUID tail */
  write_bytes(p, b, sz);
  assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_ERR_UNSUPPORTED);
  unlink(p);
}

static int is_clean_error(cosy_status st) {
  return st == COSY_ERR_MODEL_FORMAT || st == COSY_ERR_IO || st == COSY_ERR_UNSUPPORTED;
}

static void test_wav_corrupt(void **state) {
  (void)state;
  const char *p = tmp_path("bad");
  float *y;
  int64_t n;
  int32_t sr;
  unsigned char data[64], b[256], c[256];
  for (int i = 0; i < 64; i++) data[i] = (unsigned char)(i * 37);
  for (int ext = 0; ext < 2; ext++) {
    const size_t sz = make_wav(b, 1, ext, 2, 22050, 16, data, 40);
    /* truncated at every offset */
    for (size_t cut = 0; cut < sz; cut++) {
      write_bytes(p, b, cut);
      cosy_status st = cosy_wav_read(p, &y, &n, &sr);
      if (!is_clean_error(st)) print_message("cut at %zu: status %d\n", cut, st);
      assert_true(is_clean_error(st));
      assert_null(y);
      assert_int_equal(n, 0);
    }
    write_bytes(p, b, sz);
    assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_OK);
    free(y);
    /* bad sizes in every size field: RIFF, fmt, LIST, data */
    const size_t fmt_off = 12, list_off = 12 + 8 + (ext ? 40 : 16), data_off = list_off + 12;
    const size_t size_fields[4] = {4, fmt_off + 4, list_off + 4, data_off + 4};
    const uint32_t bad_vals[6] = {0xFFFFFFFFu, 0x7FFFFFFFu, 0x80000000u, 1000, 3, 0};
    for (int f = 0; f < 4; f++) {
      for (int v = 0; v < 6; v++) {
        memcpy(c, b, sz);
        put32(c + size_fields[f], bad_vals[v]);
        write_bytes(p, c, sz);
        cosy_status st = cosy_wav_read(p, &y, &n, &sr);
        if (st == COSY_OK) {
          /* a few edits leave a readable file (e.g. data size 0, or RIFF 0xFFFFFFFF = to EOF) */
          assert_true(n >= 0 && n <= 10);
          free(y);
        } else {
          assert_true(is_clean_error(st));
          assert_null(y);
        }
      }
    }
    /* semantic errors */
    memcpy(c, b, sz); put16(c + fmt_off + 10, 0); /* 0 channels */
    write_bytes(p, c, sz);
    assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_ERR_MODEL_FORMAT);
    memcpy(c, b, sz); put16(c + fmt_off + 20, 3); /* block align */
    write_bytes(p, c, sz);
    assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_ERR_MODEL_FORMAT);
    print_message("bad block align: %s\n", cosy_last_error());
    memcpy(c, b, sz); put32(c + fmt_off + 12, 0); /* rate 0 */
    write_bytes(p, c, sz);
    assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_ERR_MODEL_FORMAT);
    memcpy(c, b, sz); memcpy(c + data_off, "dat4", 4); /* no data chunk */
    write_bytes(p, c, sz);
    assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_ERR_MODEL_FORMAT);
    memcpy(c, b, sz); memcpy(c + fmt_off, "fmx ", 4); /* no fmt chunk */
    write_bytes(p, c, sz);
    assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_ERR_MODEL_FORMAT);
    memcpy(c, b, sz); memcpy(c + list_off, "fmt ", 4); /* second (short) fmt chunk */
    write_bytes(p, c, sz);
    assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_ERR_MODEL_FORMAT);
    memcpy(c, b, sz); memcpy(c + 8, "WAVX", 4);
    write_bytes(p, c, sz);
    assert_int_equal(cosy_wav_read(p, &y, &n, &sr), COSY_ERR_MODEL_FORMAT);
    /* random byte corruption in the header: never crashes */
    for (int it = 0; it < 500; it++) {
      memcpy(c, b, sz);
      int nflip = 1 + (int)(urand() * 3);
      for (int k = 0; k < nflip; k++) c[(size_t)(urand() * (double)data_off + 8)] = (unsigned char)(urand() * 256);
      write_bytes(p, c, sz);
      cosy_status st = cosy_wav_read(p, &y, &n, &sr);
      if (st == COSY_OK) {
        assert_true(n >= 0 && n <= 40 && sr > 0);
        free(y);
      } else {
        assert_true(is_clean_error(st));
      }
    }
  }
  /* the real prompt file truncated at many offsets */
  const char *wp = tu_shared("audio/cross_lingual_prompt.wav");
  if (wp && access(wp, R_OK) == 0) {
    size_t fsz;
    unsigned char *fb = read_bytes(wp, &fsz);
    for (size_t cut = 0; cut < fsz; cut += (cut < 64 ? 1 : 9973)) {
      write_bytes(p, fb, cut);
      assert_true(is_clean_error(cosy_wav_read(p, &y, &n, &sr)));
    }
    free(fb);
  }
  assert_int_equal(cosy_wav_read("/nonexistent/dir/x.wav", &y, &n, &sr), COSY_ERR_IO);
  print_message("missing file: %s\n", cosy_last_error());
  unlink(p);
}

/* ---------------------------------------------------------------------------- resampling */

static void test_resampler_chunked(void **state) {
  (void)state;
  static const int32_t rates[][2] = {{22050, 24000}, {24000, 16000}, {48000, 24000},
                                     {24000, 44100}, {24000, 24000}, {192000, 24000}};
  enum { N = 30000 };
  float *x = malloc(sizeof(float) * N);
  assert_non_null(x);
  for (int i = 0; i < N; i++)
    x[i] = (float)(0.5 * sin(0.01 * i) + 0.3 * sin(0.37 * i) + 0.1 * (2 * urand() - 1));
  for (size_t ri = 0; ri < sizeof rates / sizeof rates[0]; ri++) {
    const int32_t a = rates[ri][0], bb = rates[ri][1];
    float *one;
    int64_t n1;
    assert_int_equal(cosy_resample(x, N, a, bb, &one, &n1), COSY_OK);
    assert_int_equal(n1, cosy_resample_length(N, a, bb));
    assert_int_equal(n1, ((int64_t)N * bb + a - 1) / a);
    cosy_resampler *r;
    assert_int_equal(cosy_resampler_create(a, bb, &r), COSY_OK);
    for (int pass = 0; pass < 2; pass++) { /* second pass after reset */
      float *acc = malloc(sizeof(float) * (size_t)(n1 + 16));
      assert_non_null(acc);
      int64_t have = 0, fed = 0;
      int ended = 0;
      while (fed < N) {
        int64_t chunk = (int64_t)(urand() * 3000.0);
        if (urand() < 0.1) chunk = 0;
        if (chunk > N - fed) chunk = N - fed;
        int end = fed + chunk == N && urand() < 0.5;
        int64_t cap = cosy_resampler_max_out(r, chunk);
        assert_true(cap >= 0 && have + cap <= n1 + 16);
        int64_t got;
        assert_int_equal(cosy_resampler_process(r, x + fed, chunk, end, acc + have, cap, &got),
                         COSY_OK);
        assert_true(got >= 0 && got <= cap);
        have += got;
        fed += chunk;
        ended = end;
        if (end) break;
      }
      if (!ended) { /* flush with an empty final call */
        int64_t got = 0, cap = cosy_resampler_max_out(r, 0);
        assert_int_equal(cosy_resampler_process(r, NULL, 0, 1, acc + have, cap, &got), COSY_OK);
        have += got;
      }
      assert_int_equal(have, n1);
      size_t diff = 0;
      for (int64_t i = 0; i < n1; i++) diff += acc[i] != one[i];
      if (diff) print_message("%d->%d: %zu samples differ, max abs %.3g\n", a, bb, diff,
                              tu_max_abs_diff(acc, one, (size_t)n1));
      assert_int_equal(diff, 0);
      /* after the end only reset/free are allowed */
      int64_t got;
      assert_int_equal(cosy_resampler_process(r, x, 10, 0, acc, 100, &got), COSY_ERR_INVALID_ARG);
      assert_int_equal(cosy_resampler_reset(r), COSY_OK);
      free(acc);
    }
    cosy_resampler_free(r);
    /* a sanity check of the conversion itself: a 440 Hz tone stays a 440 Hz tone */
    free(one);
  }
  /* tone check: 1 kHz at 22050 -> 24000, compare the middle with the exact tone */
  for (int i = 0; i < N; i++) x[i] = (float)sin(2.0 * PI * 1000.0 * i / 22050.0);
  float *y;
  int64_t ny;
  assert_int_equal(cosy_resample(x, N, 22050, 24000, &y, &ny), COSY_OK);
  double worst = 0;
  for (int64_t i = 2000; i < ny - 2000; i++)
    worst = fmax(worst, fabs(y[i] - sin(2.0 * PI * 1000.0 * (double)i / 24000.0)));
  print_message("resampled 1 kHz tone: max abs error %.3g (limit 1e-4)\n", worst);
  assert_true(worst < 1e-4);
  free(y);
  free(x);
}

/* ------------------------------------------------------------------------------- arguments */

static void test_invalid_args(void **state) {
  (void)state;
  static float x[8000];
  for (int i = 0; i < 8000; i++) x[i] = (float)sin(0.05 * i);
  float *mel = (float *)0x1;
  int32_t T = 7;
  assert_int_equal(cosy_audio_to_mel(NULL, 2000, 24000, &mel, &T), COSY_ERR_INVALID_ARG);
  assert_null(mel);
  assert_int_equal(T, 0);
  assert_int_equal(cosy_audio_to_mel(x, 2000, 24000, NULL, &T), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_audio_to_mel(x, 2000, 24000, &mel, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_audio_to_mel(x, 0, 24000, &mel, &T), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_audio_to_mel(x, -1, 24000, &mel, &T), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_audio_to_mel(x, 2000, 15999, &mel, &T), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_audio_to_mel(x, 2000, 192001, &mel, &T), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_audio_to_mel(x, 2000, 0, &mel, &T), COSY_ERR_INVALID_ARG);
  /* > 30 minutes (checked before the samples are touched) */
  assert_int_equal(cosy_audio_to_mel(x, (int64_t)1800 * 24000 + 1, 24000, &mel, &T),
                   COSY_ERR_INVALID_ARG);
  print_message("too long: %s\n", cosy_last_error());
  assert_int_equal(cosy_audio_to_mel(x, INT64_MAX, 16000, &mel, &T), COSY_ERR_INVALID_ARG);
  /* too short for the reflect pad */
  assert_int_equal(cosy_audio_to_mel(x, 720, 24000, &mel, &T), COSY_ERR_INVALID_ARG);
  print_message("too short: %s\n", cosy_last_error());
  /* NaN / Inf */
  x[100] = NAN;
  assert_int_equal(cosy_audio_to_mel(x, 2000, 24000, &mel, &T), COSY_ERR_INVALID_ARG);
  print_message("NaN: %s\n", cosy_last_error());
  x[100] = INFINITY;
  assert_int_equal(cosy_audio_to_mel(x, 2000, 48000, &mel, &T), COSY_ERR_INVALID_ARG);
  /* finite but huge (overflowed the power spectrum to an infinite mel; tests/fuzz/regressions/wav) */
  x[100] = 7.2e31f;
  assert_int_equal(cosy_audio_to_mel(x, 2000, 24000, &mel, &T), COSY_ERR_INVALID_ARG);
  print_message("huge: %s\n", cosy_last_error());
  x[100] = -65536.0f; /* the largest magnitude taken: every mel value finite */
  assert_int_equal(cosy_audio_to_mel(x, 2000, 24000, &mel, &T), COSY_OK);
  for (int i = 0; i < T * 80; i++) assert_true(isfinite(mel[i]));
  free(mel);
  x[100] = 0.0f;
  /* the smallest valid input, and the rate limits */
  assert_int_equal(cosy_audio_to_mel(x, 721, 24000, &mel, &T), COSY_OK);
  assert_int_equal(T, 1);
  free(mel);
  assert_int_equal(cosy_audio_to_mel(x, 2000, 16000, &mel, &T), COSY_OK);
  assert_int_equal(T, 3000 / 480);
  for (int i = 0; i < T * 80; i++) assert_true(isfinite(mel[i]) && mel[i] >= logf(1e-5f) - 1e-6f);
  free(mel);
  assert_int_equal(cosy_audio_to_mel(x, 8000, 192000, &mel, &T), COSY_OK);
  assert_int_equal(T, 1000 / 480); /* 8000 samples at 192 kHz = 1000 at 24 kHz */
  free(mel);
  /* 2000 samples at 192 kHz = 250 at 24 kHz: too short */
  assert_int_equal(cosy_audio_to_mel(x, 2000, 192000, &mel, &T), COSY_ERR_INVALID_ARG);

  /* WAV and resampler arguments */
  float *y;
  int64_t n;
  int32_t sr;
  assert_int_equal(cosy_wav_read(NULL, &y, &n, &sr), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_wav_read("x.wav", NULL, &n, &sr), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_wav_write(NULL, x, 10, 24000, 0), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_wav_write(tmp_path("a"), NULL, 10, 24000, 0), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_wav_write(tmp_path("a"), x, -1, 24000, 0), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_wav_write(tmp_path("a"), x, 10, 0, 0), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_wav_write(tmp_path("a"), x, (int64_t)1 << 31, 24000, 1),
                   COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_wav_write("/nonexistent/dir/a.wav", x, 10, 24000, 0), COSY_ERR_IO);
  assert_int_equal(cosy_resample(x, 10, 0, 24000, &y, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_resample(x, 10, 1000, 300000, &y, &n), COSY_ERR_INVALID_ARG); /* > 256x */
  assert_int_equal(cosy_resample(x, -1, 16000, 24000, &y, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_resample(NULL, 10, 16000, 24000, &y, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_resample(x, 10, 16000, 24000, NULL, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_resample(x, 0, 16000, 24000, &y, &n), COSY_OK);
  assert_int_equal(n, 0);
  free(y);
  assert_int_equal(cosy_resample(x, 10, 24000, 24000, &y, &n), COSY_OK); /* identity copy */
  assert_int_equal(n, 10);
  assert_memory_equal(x, y, 10 * sizeof(float));
  free(y);
  cosy_resampler *r;
  assert_int_equal(cosy_resampler_create(16000, 0, &r), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_resampler_create(16000, 24000, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_resampler_create(16000, 24000, &r), COSY_OK);
  float out[64];
  assert_int_equal(cosy_resampler_process(r, x, 100, 1, out, 64, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_resampler_process(r, NULL, 10, 0, out, 64, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_resampler_process(r, x, -1, 0, out, 64, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_resampler_process(r, x, 10, 0, out, 64, NULL), COSY_ERR_INVALID_ARG);
  cosy_resampler_free(r);
  cosy_resampler_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fft_vs_dft), cmocka_unit_test(test_rfft_vs_dft),        cmocka_unit_test(test_mel_filterbank),
      cmocka_unit_test(test_mel_zero_shot),     cmocka_unit_test(test_mel_cross_lingual),
      cmocka_unit_test(test_wav_roundtrip),     cmocka_unit_test(test_wav_encodings),
      cmocka_unit_test(test_wav_corrupt),       cmocka_unit_test(test_resampler_chunked),
      cmocka_unit_test(test_resample_sinc_hann), cmocka_unit_test(test_resample_torchaudio_golden),
      cmocka_unit_test(test_invalid_args),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
