/* test_ref_frontend.c - the front-end CPU references (lib/ref/s3tok.c, lib/ref/campplus.c)
 * against golden data.
 *
 * Features, from the shared 16 kHz prompt golden/frontend/wav16k.npy (the official front end's
 * torchaudio resampling of zero_shot_prompt.wav):
 *   whisper log-mel vs golden/frontend/whisper_logmel.npy [1][128][348]   rel L2 <= 1e-5
 *   kaldi fbank     vs golden/frontend/kaldi_fbank.npy [346][80]         rel L2 <= 1e-5,
 *   and its mean-removed version vs kaldi_fbank_cmn.npy                    rel L2 <= 1e-4
 *   (the mean-removed values are smaller, so the same absolute error weighs more)
 *   22.05 and 44.1 kHz audio -> the library's resampler and whisper log-mel vs the official
 *   front end's (torchaudio Resample + whisper; tests/data/resample/logmel_*.npy)  max abs <= 5e-5
 * Models: the small random models of tests/data/frontend (tools/golden_frontend.py; converted
 * into $COSY_TEST_FE_MODEL by `make test`) on the golden features:
 *   speech tokenizer (348 and 301 mel frames): tokens exact; the FSQ projection, encoder output,
 *     conv2 output and block 0 output rel L2 <= 1e-4 (fp32, other summation order than torch)
 *   CAM++ on a short (80 fbank frames, 0.8 s), two medium (250, 346) and a long (1100, 11 s)
 *     input (frame t = golden fbank frame t mod 346, re-centred; tools/golden_frontend.py
 *     cam_input): embedding vs campplus_small.onnx under onnxruntime 1.18.0 rel L2 <= 1e-4 (the
 *     last, partial segment window divided by 100 as that runtime does: lib/ref/campplus.h; every
 *     case has one), pooled stats rel L2 <= 1e-4 vs PyTorch with the same pooling; head and tdnn
 *     (346 frames) rel L2 <= 1e-4
 * Loader: a renamed front-end tensor, a geometry key that does not fit the tensors and tensors
 * without their keys are refused with a message naming the tensor.
 * Every measured error is printed. Missing shared data or model: SKIP with the reason. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <unistd.h>

#include "audio.h"
#include "gguf.h"
#include "model.h"
#include "ref/campplus.h"
#include "ref/s3tok.h"
#include "testutil.h"
#include "util.h"

/* the golden front-end data: tests/data/frontend, or $COSY_TEST_FE_DATA (e.g. a full-size set made
 * by tools/golden_frontend.py --size full, with a model converted from its state dicts); both
 * found from any current directory (testutil) */
static const char *fe_file(const char *name) { return tu_fe_file(name); }
#define TOL_FEAT 1e-5
#define TOL_NET 1e-4

typedef struct fixture {
  cosy_model *m;
  ref_s3tok *s3;
  ref_campplus *cam;
} fixture;

static const char *fe_model(void) { return tu_fe_model(); }

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  *state = fx;
  const char *p = fe_model();
  if (!p) return 0;
  if (cosy_model_load(p, &fx->m) != COSY_OK) {
    fprintf(stderr, "model load failed: %s\n", cosy_last_error());
    return -1;
  }
  if (ref_s3tok_create(fx->m, &fx->s3) || ref_campplus_create(fx->m, &fx->cam)) {
    fprintf(stderr, "front-end create failed: %s\n", cosy_last_error());
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  ref_s3tok_free(fx->s3);
  ref_campplus_free(fx->cam);
  cosy_model_free(fx->m);
  free(fx);
  return 0;
}

static float *load_local(const char *name, int64_t want) {
  char p[1024];
  snprintf(p, sizeof p, "%s", fe_file(name));
  int nd;
  int64_t sh[8];
  float *v = tu_npy_f32(p, &nd, sh);
  if (v && want >= 0 && tu_numel(nd, sh) != want) {
    fprintf(stderr, "%s: %lld elements, expected %lld\n", p, (long long)tu_numel(nd, sh),
            (long long)want);
    free(v);
    return NULL;
  }
  return v;
}

static double check(const char *what, const float *a, const float *ref, size_t n, double tol) {
  double rel = tu_rel_l2(a, ref, n), mad = tu_max_abs_diff(a, ref, n);
  print_message("%-40s rel L2 %.3g, max abs %.3g (limit rel %.0e)\n", what, rel, mad, tol);
  assert_true(rel <= tol);
  return rel;
}

/* ---------------------------------------------------------------------------- features */

static void test_whisper_logmel(void **state) {
  (void)state;
  TU_REQUIRE(tu_shared_dir(), "shared reference data not found (set COSY_SHARED)");
  int n = 0;
  float *wav = tu_load_f32("golden/frontend/wav16k.npy", -1);
  float *ref = tu_load_f32("golden/frontend/whisper_logmel.npy", 128 * 348);
  assert_non_null(wav);
  assert_non_null(ref);
  n = 55680;
  float *mel;
  int32_t T;
  assert_int_equal(ref_whisper_logmel(wav, n, &mel, &T), COSY_OK);
  assert_int_equal(T, 348);
  check("whisper log-mel [128][348]", mel, ref, (size_t)128 * T, TOL_FEAT);
  free(mel);
  assert_int_equal(ref_whisper_logmel(wav, 400, &mel, &T), COSY_ERR_INVALID_ARG);
  free(wav), free(ref);
}

/* The speech tokenizer's input from 22.05 and 44.1 kHz audio as the official front end makes it:
 * tests/data/resample/logmel_R.npy (tools/golden_resample.py) is openai-whisper's log-mel of
 * torchaudio.transforms.Resample(R, 16000) (load_wav) of cross_lingual_prompt.wav samples
 * [0, 44100) taken as audio at R; here the library's resampler and log-mel, as
 * cosy_voice_from_audio computes them: max abs <= 5e-5. (The log-mel alone, on torchaudio's own
 * 16 kHz signal, differs from whisper's by up to ~3e-5 near its floor; a resampler off by 1e-5, as
 * torchaudio.functional.resample is, by 3e-4 .. 1e-3.) */
static void test_whisper_logmel_resampled(void **state) {
  (void)state;
  const char *wp = tu_shared("audio/cross_lingual_prompt.wav");
  TU_REQUIRE(wp && access(wp, R_OK) == 0, "shared reference data not found (set COSY_SHARED)");
  float *pcm;
  int64_t n;
  int32_t sr;
  assert_int_equal(cosy_wav_read(wp, &pcm, &n, &sr), COSY_OK);
  assert_true(n >= 44100);
  static const int32_t rates[] = {22050, 44100};
  for (int ri = 0; ri < 2; ri++) {
    char nm[64];
    snprintf(nm, sizeof nm, "data/resample/logmel_%d.npy", (int)rates[ri]);
    int nd;
    int64_t sh[8];
    float *ref = tu_npy_f32(tu_tests_file(nm), &nd, sh), *x16, *mel;
    assert_non_null(ref);
    assert_int_equal(nd, 2);
    int64_t n16;
    int32_t T;
    assert_int_equal(cosy_resample_sinc_hann(pcm, 44100, rates[ri], 16000, &x16, &n16), COSY_OK);
    assert_int_equal(ref_whisper_logmel(x16, n16, &mel, &T), COSY_OK);
    assert_int_equal(sh[0], 128);
    assert_int_equal(T, sh[1]);
    double mad = tu_max_abs_diff(mel, ref, (size_t)128 * T), rel = tu_rel_l2(mel, ref, (size_t)128 * T);
    print_message("whisper log-mel of %d Hz audio [128][%d]: max abs %.3g (limit 5e-5), rel L2 %.3g\n",
                  (int)rates[ri], (int)T, mad, rel);
    assert_true(mad <= 5e-5);
    free(x16), free(mel), free(ref);
  }
  free(pcm);
}

static void test_kaldi_fbank(void **state) {
  (void)state;
  TU_REQUIRE(tu_shared_dir(), "shared reference data not found (set COSY_SHARED)");
  float *wav = tu_load_f32("golden/frontend/wav16k.npy", 55680);
  float *ref = tu_load_f32("golden/frontend/kaldi_fbank.npy", 346 * 80);
  float *cmn = tu_load_f32("golden/frontend/kaldi_fbank_cmn.npy", 346 * 80);
  assert_non_null(wav);
  assert_non_null(ref);
  assert_non_null(cmn);
  float *fb;
  int32_t T;
  assert_int_equal(ref_kaldi_fbank(wav, 55680, &fb, &T), COSY_OK);
  assert_int_equal(T, 346);
  check("kaldi fbank [346][80]", fb, ref, (size_t)T * 80, TOL_FEAT);
  for (int m = 0; m < 80; m++) {
    double s = 0;
    for (int t = 0; t < T; t++) s += fb[t * 80 + m];
    float mean = (float)(s / T);
    for (int t = 0; t < T; t++) fb[t * 80 + m] -= mean;
  }
  check("kaldi fbank minus mean", fb, cmn, (size_t)T * 80, 1e-4);
  free(fb);
  assert_int_equal(ref_kaldi_fbank(wav, 399, &fb, &T), COSY_ERR_INVALID_ARG);
  free(wav), free(ref), free(cmn);
}

/* ---------------------------------------------------------------------------- tokenizer */

static void run_s3(fixture *fx, const char *tag, int T) {
  float *full = tu_load_f32("golden/frontend/whisper_logmel.npy", 128 * 348);
  assert_non_null(full);
  float *mel = malloc((size_t)128 * T * sizeof(float));
  for (int c = 0; c < 128; c++) memcpy(mel + (size_t)c * T, full + (size_t)c * 348, T * sizeof(float));
  char nm[128];
  snprintf(nm, sizeof nm, "s3_%s_tokens.npy", tag);
  char p[1024];
  snprintf(p, sizeof p, "%s", fe_file(nm));
  int nd;
  int64_t sh[8];
  int32_t *rt = tu_npy_i32(p, &nd, sh);
  assert_non_null(rt);
  int N = (int)sh[0], S = ref_s3tok_width(fx->s3);
  float *proj = malloc((size_t)N * 8 * sizeof(float)), *enc = malloc((size_t)N * S * sizeof(float));
  float *c2 = malloc((size_t)N * S * sizeof(float)), *b0 = malloc((size_t)N * S * sizeof(float));
  int32_t *tok, nt;
  assert_int_equal(ref_s3tok_encode(fx->s3, mel, T, &tok, &nt, proj, enc, c2, b0), COSY_OK);
  assert_int_equal(nt, N);
  int mism = 0;
  for (int i = 0; i < N; i++) mism += tok[i] != rt[i];
  print_message("speech tokens (%s, %d frames): %d of %d differ (limit 0)\n", tag, T, mism, N);
  assert_int_equal(mism, 0);
  snprintf(nm, sizeof nm, "s3_%s_proj.npy", tag);
  float *r = load_local(nm, (int64_t)N * 8);
  assert_non_null(r);
  check("FSQ projection", proj, r, (size_t)N * 8, TOL_NET);
  free(r);
  snprintf(nm, sizeof nm, "s3_%s_encoder_out.npy", tag);
  r = load_local(nm, (int64_t)N * S);
  assert_non_null(r);
  check("encoder output", enc, r, (size_t)N * S, TOL_NET);
  free(r);
  if (!strcmp(tag, "full")) {
    r = load_local("s3_full_conv2_pre_gelu.npy", (int64_t)N * S);
    assert_non_null(r);
    check("conv2 (before GELU)", c2, r, (size_t)N * S, TOL_NET);
    free(r);
    r = load_local("s3_full_block0.npy", (int64_t)N * S);
    assert_non_null(r);
    check("block 0 output", b0, r, (size_t)N * S, TOL_NET);
    free(r);
  }
  free(tok), free(rt), free(proj), free(enc), free(c2), free(b0), free(mel), free(full);
}

static void test_s3tok_full(void **state) {
  fixture *fx = *state;
  TU_REQUIRE(tu_shared_dir(), "shared reference data not found (set COSY_SHARED)");
  TU_REQUIRE(fx->s3, "front-end test model not found (make test builds build/test/small-fe-f32.gguf)");
  run_s3(fx, "full", 348);
}

static void test_s3tok_cut(void **state) {
  fixture *fx = *state;
  TU_REQUIRE(tu_shared_dir(), "shared reference data not found (set COSY_SHARED)");
  TU_REQUIRE(fx->s3, "front-end test model not found (make test builds build/test/small-fe-f32.gguf)");
  run_s3(fx, "cut301", 301);
}

/* ---------------------------------------------------------------------------- CAM++ */

/* the CAM++ input of a case: T frames, frame t = the golden mean-removed fbank's frame t mod 346,
 * re-centred over the T frames (the official call on audio of that length takes its own mean);
 * the whole prompt (T = 346) as it is. tools/golden_frontend.py cam_input makes the same. */
static float *cam_input(int T) {
  float *full = tu_load_f32("golden/frontend/kaldi_fbank_cmn.npy", 346 * 80);
  float *x = full ? malloc((size_t)T * 80 * sizeof(float)) : NULL;
  if (!x) {
    free(full);
    return NULL;
  }
  for (int t = 0; t < T; t++) memcpy(x + (size_t)t * 80, full + (size_t)(t % 346) * 80, 80 * sizeof(float));
  free(full);
  if (T != 346)
    for (int m = 0; m < 80; m++) {
      double s = 0;
      for (int t = 0; t < T; t++) s += x[(size_t)t * 80 + m];
      float mean = (float)(s / T);
      for (int t = 0; t < T; t++) x[(size_t)t * 80 + m] -= mean;
    }
  return x;
}

static void run_cam(fixture *fx, const char *tag, int T) {
  float *full = cam_input(T);
  assert_non_null(full);
  int T2 = (T - 1) / 2 + 1;
  float emb[192], *head = malloc((size_t)320 * T * sizeof(float));
  float *tdnn = malloc((size_t)4096 * T2 * sizeof(float)), stats[4096];
  assert_int_equal(ref_campplus_embed(fx->cam, full, T, emb, head, tdnn, stats), COSY_OK);
  char nm[128], what[96];
  snprintf(nm, sizeof nm, "cam_%s_embedding.npy", tag);
  float *r = load_local(nm, 192);
  assert_non_null(r);
  snprintf(what, sizeof what, "CAM++ embedding, %d frames (onnxruntime 1.18.0)", T);
  check(what, emb, r, 192, TOL_NET);
  free(r);
  snprintf(nm, sizeof nm, "cam_%s_stats.npy", tag);
  int nd;
  int64_t sh[8];
  char p[1024];
  snprintf(p, sizeof p, "%s", fe_file(nm));
  r = tu_npy_f32(p, &nd, sh);
  assert_non_null(r);
  check("CAM++ pooled stats", stats, r, (size_t)sh[0], TOL_NET);
  free(r);
  if (!strcmp(tag, "full")) {
    r = load_local("cam_full_head.npy", (int64_t)320 * T);
    assert_non_null(r);
    check("CAM++ head [320][T]", head, r, (size_t)320 * T, TOL_NET);
    free(r);
    snprintf(p, sizeof p, "%s", fe_file("cam_full_tdnn.npy"));
    r = tu_npy_f32(p, &nd, sh);
    assert_non_null(r);
    assert_int_equal(sh[1], T2);
    check("CAM++ tdnn", tdnn, r, (size_t)(sh[0] * sh[1]), TOL_NET);
    free(r);
  }
  free(head), free(tdnn), free(full);
}

#define CAM_CASE(name, tag, T)                                                                     \
  static void name(void **state) {                                                                 \
    fixture *fx = *state;                                                                          \
    TU_REQUIRE(tu_shared_dir(), "shared reference data not found (set COSY_SHARED)");              \
    TU_REQUIRE(fx->cam,                                                                            \
               "front-end test model not found (make test builds build/test/small-fe-f32.gguf)");  \
    run_cam(fx, tag, T);                                                                           \
  }
CAM_CASE(test_campplus_short, "short", 80)
CAM_CASE(test_campplus_cut, "cut250", 250)
CAM_CASE(test_campplus_full, "full", 346)
CAM_CASE(test_campplus_long, "long", 1100)

/* ---------------------------------------------------------------------------- misc */

static void test_absent_and_args(void **state) {
  fixture *fx = *state;
  /* a model without the front end: create says UNSUPPORTED with a message naming the fix */
  const char *plain = tu_small_model();
  if (plain) {
    cosy_model *m;
    if (cosy_model_load(plain, &m) == COSY_OK) {
      ref_s3tok *s;
      ref_campplus *c;
      assert_int_equal(ref_s3tok_create(m, &s), COSY_ERR_UNSUPPORTED);
      assert_non_null(strstr(cosy_last_error(), "speech tokenizer"));
      assert_int_equal(ref_campplus_create(m, &c), COSY_ERR_UNSUPPORTED);
      assert_non_null(strstr(cosy_last_error(), "CAM++"));
      cosy_model_free(m);
    }
  }
  TU_REQUIRE(fx->s3 && fx->cam, "front-end test model not found");
  int32_t *tok, n;
  float mel[128 * 2] = {0}, emb[192];
  assert_int_equal(ref_s3tok_encode(fx->s3, mel, 0, &tok, &n, NULL, NULL, NULL, NULL),
                   COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_s3tok_encode(fx->s3, mel, 2, &tok, &n, NULL, NULL, NULL, NULL), COSY_OK);
  assert_int_equal(n, 1);
  assert_true(tok[0] >= 0 && tok[0] < 6561);
  free(tok);
  assert_int_equal(ref_campplus_embed(fx->cam, mel, 3, emb, NULL, NULL, NULL), COSY_ERR_INVALID_ARG);
}

/* the loader: front-end tensors are validated like the others */
static void *find(uint8_t *b, size_t n, const char *s) {
  size_t k = strlen(s);
  for (size_t i = 0; i + k <= n; i++)
    if (b[i] == (uint8_t)s[0] && !memcmp(b + i, s, k)) return b + i;
  return NULL;
}

static cosy_status load_mem(uint8_t *buf, size_t n) {
  gguf_file *f = NULL;
  cosy_status st = gguf_parse(buf, n, "model", &f);
  if (st) return st;
  cosy_model *m = NULL;
  st = cosy_model_from_gguf(f, &m);
  cosy_model_free(m);
  return st;
}

static void test_loader(void **state) {
  (void)state;
  const char *p = fe_model();
  TU_REQUIRE(p, "front-end test model not found (make test builds build/test/small-fe-f32.gguf)");
  FILE *f = fopen(p, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  size_t n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(n);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, n, f), n);
  fclose(f);
  size_t hdr = n < (64u << 20) ? n : (64u << 20);
  assert_int_equal(load_mem(b, n), COSY_OK);
  /* a front-end tensor missing (renamed) */
  uint8_t *q = find(b, hdr, "campplus.dense.bias");
  assert_non_null(q);
  q[9] = 'D';
  assert_int_equal(load_mem(b, n), COSY_ERR_MODEL_FORMAT);
  print_message("renamed tensor: %s\n", cosy_last_error());
  assert_non_null(strstr(cosy_last_error(), "campplus.dense.bias"));
  q[9] = 'd';
  /* a geometry key that does not fit the tensors */
  q = find(b, hdr, "cosyvoice.campplus.growth_rate");
  assert_non_null(q);
  uint32_t v, t;
  memcpy(&t, q + 30, 4);
  memcpy(&v, q + 34, 4);
  assert_int_equal(t, 4); /* u32 */
  uint32_t v2 = v + 2; /* keeps every block's channel count even */
  memcpy(q + 34, &v2, 4);
  assert_int_equal(load_mem(b, n), COSY_ERR_MODEL_FORMAT);
  print_message("growth rate %u -> %u: %s\n", v, v2, cosy_last_error());
  assert_non_null(strstr(cosy_last_error(), "campplus.block1"));
  memcpy(q + 34, &v, 4);
  /* the tokenizer's keys gone (renamed): its tensors are then unexpected */
  q = find(b, hdr, "cosyvoice.s3tok.n_state");
  assert_non_null(q);
  q[16] = 'N';
  assert_int_equal(load_mem(b, n), COSY_ERR_MODEL_FORMAT);
  print_message("no tokenizer keys: %s\n", cosy_last_error());
  assert_non_null(strstr(cosy_last_error(), "s3tok."));
  assert_non_null(strstr(cosy_last_error(), "not part of this model format"));
  q[16] = 'n';
  assert_int_equal(load_mem(b, n), COSY_OK);
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_whisper_logmel), cmocka_unit_test(test_whisper_logmel_resampled),
      cmocka_unit_test(test_kaldi_fbank),
      cmocka_unit_test(test_s3tok_full),     cmocka_unit_test(test_s3tok_cut),
      cmocka_unit_test(test_campplus_short), cmocka_unit_test(test_campplus_cut),
      cmocka_unit_test(test_campplus_full),  cmocka_unit_test(test_campplus_long),
      cmocka_unit_test(test_absent_and_args), cmocka_unit_test(test_loader),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
