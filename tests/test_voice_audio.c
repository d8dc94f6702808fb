/* test_voice_audio.c - cosy_voice_from_audio (lib/voice_audio.c) end to end, and its input checks.
 *
 * End to end: zero_shot_prompt.wav (24 kHz) through the library on the front-end test model
 * ($COSY_TEST_FE_MODEL: the small golden model plus the random front-end models of
 * tests/data/frontend) gives the voice the official frontend_zero_shot makes with the same
 * weights: speech tokens == tests/data/frontend/s3_full_tokens.npy (exact; the official tokens of
 * the official features), the prompt mel vs golden/frontend/mel24k.npy (rel L2 <= 1e-4, as the
 * prompt-mel test) and the speaker embedding vs cam_full_embedding.npy (rel L2 <= 1e-4). The
 * library computes its own 16 kHz audio and features (the golden features are not used), so this
 * also covers resampling. The 16 kHz golden prompt (wav16k.npy) as input gives the same tokens
 * and embedding. A voice file round trip keeps all of it.
 * Bad input: NULL, empty, unknown rates, NaN / Inf, < 0.5 s, > 30 s, silent (also a DC offset
 * alone), unscaled, clipped
 * -> COSY_ERR_INVALID_ARG with a message; a model without the front end -> COSY_ERR_UNSUPPORTED.
 * Two clones made beside a synthesis on the same engine equal the ones made alone, and so does
 * the audio (the front end is set up once, then shared read-only).
 * sched_run_on_t2w (the hook a GPU engine's cloning goes through): runs the function on the
 * token-to-wave thread with its status and message carried back, inline from a push callback. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
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
#include "cosyvoice.h"
#include "engine.h"
#include "testutil.h"
#include "util.h"

/* the golden front-end data: tests/data/frontend, or $COSY_TEST_FE_DATA (e.g. a full-size set made
 * by tools/golden_frontend.py --size full, with a model converted from its state dicts); both
 * found from any current directory (testutil) */
static const char *fe_file(const char *name) { return tu_fe_file(name); }
#define PROMPT_TEXT "You are a helpful assistant.<|endofprompt|>希望你以后能够做的比我还好呦。"

static const char *fe_model(void) { return tu_fe_model(); }

static cosy_engine *engine_for(const char *model) {
  cosy_engine_config cfg;
  cosy_engine_config_init(&cfg, sizeof cfg);
  cfg.model_path = model;
  cfg.device = COSY_DEVICE_CPU;
  cosy_engine *e = NULL;
  if (cosy_engine_create(&cfg, &e) != COSY_OK) {
    fprintf(stderr, "engine: %s\n", cosy_last_error());
    return NULL;
  }
  return e;
}

static void check_voice(const cosy_voice *v, int check_mel) {
  int nd;
  int64_t sh[8];
  int32_t *rt = tu_npy_i32(fe_file("s3_full_tokens.npy"), &nd, sh);
  assert_non_null(rt);
  int N = (int)sh[0];
  assert_int_equal(v->n_tokens, N); /* min(174 / 2, 87) */
  int mism = 0;
  for (int i = 0; i < N; i++) mism += v->speech_tokens[i] != rt[i];
  print_message("voice speech tokens: %d of %d differ from the official ones (limit 0)\n", mism, N);
  assert_int_equal(mism, 0);
  float *emb = tu_npy_f32(fe_file("cam_full_embedding.npy"), &nd, sh);
  assert_non_null(emb);
  double r = tu_rel_l2(v->spk, emb, 192);
  print_message("voice speaker embedding: rel L2 %.3g (limit 1e-4)\n", r);
  assert_true(r <= 1e-4);
  if (check_mel) {
    float *mel = tu_load_f32("golden/frontend/mel24k.npy", 174 * 80);
    assert_non_null(mel);
    r = tu_rel_l2(v->mel, mel, (size_t)2 * N * 80);
    print_message("voice prompt mel [%d][80]: rel L2 %.3g (limit 1e-4)\n", 2 * N, r);
    assert_true(r <= 1e-4);
    free(mel);
  }
  assert_string_equal(v->prompt_text, PROMPT_TEXT);
  free(rt), free(emb);
}

static void test_end_to_end(void **state) {
  (void)state;
  TU_REQUIRE(tu_shared_dir(), "shared reference data not found (set COSY_SHARED)");
  const char *model = fe_model();
  TU_REQUIRE(model, "front-end test model not found (make test builds build/test/small-fe-f32.gguf)");
  cosy_engine *e = engine_for(model);
  assert_non_null(e);
  float *pcm;
  int64_t n;
  int32_t sr;
  assert_int_equal(cosy_wav_read(tu_shared("audio/zero_shot_prompt.wav"), &pcm, &n, &sr), COSY_OK);
  assert_int_equal(sr, 24000);
  cosy_voice *v;
  double t0 = cosy_now();
  assert_int_equal(cosy_voice_from_audio(e, pcm, n, sr, PROMPT_TEXT, &v), COSY_OK);
  print_message("voice from %.2f s of 24 kHz audio in %.3f s (CPU)\n",
                (double)n / sr, cosy_now() - t0);
  check_voice(v, 1);
  /* saved and loaded: the same voice */
  char path[] = "/tmp/cosy-test-voice-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(cosy_voice_save(v, path), COSY_OK);
  cosy_voice *w;
  assert_int_equal(cosy_voice_load(e, path, &w), COSY_OK);
  assert_int_equal(w->n_tokens, v->n_tokens);
  assert_memory_equal(w->speech_tokens, v->speech_tokens, (size_t)v->n_tokens * 4);
  assert_memory_equal(w->mel, v->mel, (size_t)v->n_tokens * 2 * 80 * 4);
  assert_memory_equal(w->spk, v->spk, sizeof v->spk);
  remove(path);
  cosy_voice_release(w);
  cosy_voice_release(v);
  /* the official 16 kHz prompt as input: the same tokens and embedding */
  float *w16 = tu_load_f32("golden/frontend/wav16k.npy", 55680);
  assert_non_null(w16);
  assert_int_equal(cosy_voice_from_audio(e, w16, 55680, 16000, PROMPT_TEXT, &v), COSY_OK);
  check_voice(v, 0);
  cosy_voice_release(v);
  free(w16);
  free(pcm);
  cosy_engine_destroy(e);
}

static void expect_bad(cosy_engine *e, const float *pcm, int64_t n, int32_t sr, cosy_status want,
                       const char *needle) {
  cosy_voice *v = (cosy_voice *)(uintptr_t)1;
  cosy_status st = cosy_voice_from_audio(e, pcm, n, sr, "", &v);
  print_message("  %lld samples at %d Hz -> %s: %s\n", (long long)n, (int)sr, cosy_status_str(st),
                cosy_last_error());
  assert_int_equal(st, want);
  assert_null(v);
  assert_non_null(strstr(cosy_last_error(), needle));
}

static void test_bad_input(void **state) {
  (void)state;
  const char *model = fe_model();
  TU_REQUIRE(model, "front-end test model not found (make test builds build/test/small-fe-f32.gguf)");
  cosy_engine *e = engine_for(model);
  assert_non_null(e);
  const int sr = 16000;
  const int64_t n = 2 * sr, nl = 31 * (int64_t)sr;
  float *x = malloc((size_t)nl * sizeof(float));
  uint32_t s = 12345;
  for (int64_t i = 0; i < nl; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = 0.3f * (float)sin(0.05 * (double)i) + 0.05f * ((float)(s >> 8) / 16777216.0f - 0.5f);
  }
  cosy_voice *v;
  assert_int_equal(cosy_voice_from_audio(NULL, x, n, sr, "", &v), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_voice_from_audio(e, x, n, sr, "", NULL), COSY_ERR_INVALID_ARG);
  expect_bad(e, NULL, n, sr, COSY_ERR_INVALID_ARG, "NULL");
  expect_bad(e, x, 0, sr, COSY_ERR_INVALID_ARG, "empty");
  expect_bad(e, x, n, 8000, COSY_ERR_INVALID_ARG, "sample rate");
  expect_bad(e, x, n, 0, COSY_ERR_INVALID_ARG, "sample rate");
  expect_bad(e, x, n, 200000, COSY_ERR_INVALID_ARG, "sample rate");
  expect_bad(e, x, sr * 4 / 10, sr, COSY_ERR_INVALID_ARG, "at least 0.5 s");
  expect_bad(e, x, nl, sr, COSY_ERR_INVALID_ARG, "at most 30 s");
  float keep = x[100];
  x[100] = NAN;
  expect_bad(e, x, n, sr, COSY_ERR_INVALID_ARG, "NaN");
  x[100] = INFINITY;
  expect_bad(e, x, n, sr, COSY_ERR_INVALID_ARG, "infinite");
  x[100] = keep;
  float *z = calloc((size_t)n, sizeof(float));
  expect_bad(e, z, n, sr, COSY_ERR_INVALID_ARG, "silent");
  for (int64_t i = 0; i < n; i++) z[i] = 0.25f; /* a DC offset and nothing else */
  expect_bad(e, z, n, sr, COSY_ERR_INVALID_ARG, "silent");
  z[n / 2] = 0.25f + 5e-5f; /* ... with a step below -80 dBFS */
  expect_bad(e, z, n, sr, COSY_ERR_INVALID_ARG, "silent");
  for (int64_t i = 0; i < n; i++) z[i] = x[i] * 32768.0f;
  expect_bad(e, z, n, sr, COSY_ERR_INVALID_ARG, "scaled");
  for (int64_t i = 0; i < n; i++) z[i] = fmaxf(-1.0f, fminf(1.0f, 10.0f * x[i]));
  expect_bad(e, z, n, sr, COSY_ERR_INVALID_ARG, "clipped");
  /* valid: a voice at a rate that needs resampling, and exactly 0.5 s and 30 s */
  assert_int_equal(cosy_voice_from_audio(e, x, n, 44100, "", &v), COSY_OK);
  assert_true(v->n_tokens > 0);
  for (int i = 0; i < v->n_tokens; i++) assert_true(v->speech_tokens[i] >= 0 && v->speech_tokens[i] < 6561);
  cosy_voice_release(v);
  assert_int_equal(cosy_voice_from_audio(e, x, sr / 2, sr, "", &v), COSY_OK);
  assert_int_equal(v->n_tokens, 12); /* 50 mel frames at 24 kHz -> 25 tokens, 13 at 16 kHz */
  cosy_voice_release(v);
  assert_int_equal(cosy_voice_from_audio(e, x, 30 * (int64_t)sr, sr, NULL, &v), COSY_OK);
  assert_int_equal(v->n_tokens, 750);
  cosy_voice_release(v);
  free(z), free(x);
  cosy_engine_destroy(e);
}

/* cloning beside synthesis and beside another clone: same results as alone */
typedef struct job {
  cosy_engine *e;
  const float *pcm;
  int64_t n;
  int32_t sr;
  cosy_voice *voice; /* clone jobs: out; synth job: in */
  float *wav;
  int64_t n_wav;
  cosy_status st;
} job;

static void *clone_job(void *arg) {
  job *j = arg;
  j->st = cosy_voice_from_audio(j->e, j->pcm, j->n, j->sr, PROMPT_TEXT, &j->voice);
  return NULL;
}

static void *synth_job(void *arg) {
  job *j = arg;
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.seed = 11;
  p.max_tokens = 30;
  j->st = cosy_synthesize(j->e, j->voice, "Hello there.", &p, &j->wav, &j->n_wav);
  return NULL;
}

static void test_concurrent(void **state) {
  (void)state;
  TU_REQUIRE(tu_shared_dir(), "shared reference data not found (set COSY_SHARED)");
  const char *model = fe_model();
  TU_REQUIRE(model, "front-end test model not found (make test builds build/test/small-fe-f32.gguf)");
  cosy_engine *e = engine_for(model);
  assert_non_null(e);
  float *pcm;
  int64_t n;
  int32_t sr;
  assert_int_equal(cosy_wav_read(tu_shared("audio/zero_shot_prompt.wav"), &pcm, &n, &sr), COSY_OK);
  /* the reference: a clone alone, on its own engine */
  cosy_engine *e0 = engine_for(model);
  assert_non_null(e0);
  job ref = {e0, pcm, n, sr, NULL, NULL, 0, COSY_OK};
  clone_job(&ref);
  assert_int_equal(ref.st, COSY_OK);
  /* two clones at once on a fresh engine (they race to set up the front end), then two more
   * beside a synthesis */
  job c[4];
  for (int i = 0; i < 4; i++) c[i] = (job){e, pcm, n, sr, NULL, NULL, 0, COSY_OK};
  pthread_t th[3];
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, clone_job, &c[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  job syn = {e, NULL, 0, 0, NULL, NULL, 0, COSY_OK};
  syn.voice = c[0].voice;
  synth_job(&syn); /* alone */
  assert_int_equal(syn.st, COSY_OK);
  job s2 = syn;
  s2.wav = NULL;
  assert_int_equal(pthread_create(&th[0], NULL, synth_job, &s2), 0);
  for (int i = 2; i < 4; i++) assert_int_equal(pthread_create(&th[i - 1], NULL, clone_job, &c[i]), 0);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  assert_int_equal(s2.st, COSY_OK);
  assert_int_equal(s2.n_wav, syn.n_wav);
  assert_memory_equal(s2.wav, syn.wav, (size_t)syn.n_wav * sizeof(float));
  for (int i = 0; i < 4; i++) {
    assert_int_equal(c[i].st, COSY_OK);
    assert_int_equal(c[i].voice->n_tokens, ref.voice->n_tokens);
    assert_memory_equal(c[i].voice->speech_tokens, ref.voice->speech_tokens,
                        (size_t)ref.voice->n_tokens * 4);
    assert_memory_equal(c[i].voice->spk, ref.voice->spk, sizeof ref.voice->spk);
    assert_memory_equal(c[i].voice->mel, ref.voice->mel, (size_t)ref.voice->n_tokens * 160 * 4);
    cosy_voice_release(c[i].voice);
  }
  print_message("two clones racing on a fresh engine, two beside a synthesis: voices and audio identical to the runs alone\n");
  cosy_free(syn.wav), cosy_free(s2.wav);
  cosy_voice_release(ref.voice);
  free(pcm);
  cosy_engine_destroy(e);
  cosy_engine_destroy(e0);
}

/* sched_run_on_t2w, the hook a GPU engine's cloning goes through: the function runs on another
 * thread (the scheduler's token-to-wave thread) and its status and message come back; called from
 * a push callback (which runs on that thread) it runs inline instead of waiting for itself. */
typedef struct hook_rec {
  pthread_t th;
  int ran;
  cosy_status ret;
} hook_rec;

static cosy_status hook_fn(cosy_engine *e, void *arg) {
  (void)e;
  hook_rec *h = arg;
  h->th = pthread_self();
  h->ran++;
  return h->ret ? cosy_err(h->ret, "hook failed on purpose (%d)", 42) : COSY_OK;
}

typedef struct cb_rec {
  cosy_engine *e;
  hook_rec h;
  pthread_t cb_th;
  int calls;
  cosy_status st;
} cb_rec;

static int32_t hook_cb(void *user, const cosy_chunk *chunk) {
  (void)chunk;
  cb_rec *c = user;
  if (c->calls++ == 0) {
    c->cb_th = pthread_self();
    c->st = sched_run_on_t2w(c->e, hook_fn, &c->h);
  }
  return 0;
}

static void test_run_on_t2w(void **state) {
  (void)state;
  TU_REQUIRE(tu_shared_dir(), "shared reference data not found (set COSY_SHARED)");
  const char *model = fe_model();
  TU_REQUIRE(model, "front-end test model not found (make test builds build/test/small-fe-f32.gguf)");
  cosy_engine *e = engine_for(model);
  assert_non_null(e);
  hook_rec h = {pthread_self(), 0, COSY_OK};
  assert_int_equal(sched_run_on_t2w(e, hook_fn, &h), COSY_OK);
  assert_int_equal(h.ran, 1);
  assert_false(pthread_equal(h.th, pthread_self()));
  h.ret = COSY_ERR_CUDA;
  assert_int_equal(sched_run_on_t2w(e, hook_fn, &h), COSY_ERR_CUDA);
  assert_int_equal(h.ran, 2);
  assert_string_equal(cosy_last_error(), "hook failed on purpose (42)");
  /* from a push callback: inline, on the callback's own thread */
  float *pcm;
  int64_t n;
  int32_t sr;
  assert_int_equal(cosy_wav_read(tu_shared("audio/zero_shot_prompt.wav"), &pcm, &n, &sr), COSY_OK);
  cosy_voice *v;
  assert_int_equal(cosy_voice_from_audio(e, pcm, n, sr, PROMPT_TEXT, &v), COSY_OK);
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.seed = 3;
  p.max_tokens = 20;
  cb_rec c;
  memset(&c, 0, sizeof c);
  c.e = e;
  cosy_request *r;
  assert_int_equal(cosy_request_submit(e, v, "Hello.", &p, hook_cb, &c, &r), COSY_OK);
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  cosy_request_release(r);
  assert_true(c.calls > 0);
  assert_int_equal(c.st, COSY_OK);
  assert_int_equal(c.h.ran, 1);
  assert_true(pthread_equal(c.h.th, c.cb_th));
  print_message("sched_run_on_t2w: ran on the token-to-wave thread, status and message carried "
                "back; inline from a push callback\n");
  cosy_voice_release(v);
  free(pcm);
  cosy_engine_destroy(e);
}

static void test_no_frontend(void **state) {
  (void)state;
  const char *model = tu_small_model();
  TU_REQUIRE(model, "small test model not found");
  cosy_engine *e = engine_for(model);
  assert_non_null(e);
  float x[16000];
  for (int i = 0; i < 16000; i++) x[i] = 0.3f * sinf(0.05f * (float)i);
  cosy_voice *v;
  assert_int_equal(cosy_voice_from_audio(e, x, 16000, 16000, "", &v), COSY_ERR_UNSUPPORTED);
  print_message("no front end: %s\n", cosy_last_error());
  assert_non_null(strstr(cosy_last_error(), "speech tokenizer"));
  assert_null(v);
  cosy_engine_destroy(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_end_to_end),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_concurrent),
      cmocka_unit_test(test_run_on_t2w),
      cmocka_unit_test(test_no_frontend),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
