/* test_voice_audio.c - cosy_voice_from_audio (lib/voice_audio.c) end to end, and its input checks.
 *
 * End to end: zero_shot_prompt.wav (24 kHz) through the library on the front-end test model
 * ($COSY_TEST_FE_MODEL: the small golden model plus the random front-end models of
 * tests/data/frontend) gives the voice the official frontend_zero_shot makes with the same
 * weights: speech tokens == tests/data/frontend/s3_full_tokens.npy (exact; the official tokens of
 * the official features), the prompt mel vs golden/frontend/mel24k.npy (rel L2 <= 1e-4, as the
 * prompt-mel test) and the speaker embedding vs cam_full_embedding.npy (campplus_small.onnx under
 * onnxruntime 1.18.0 on the official features; rel L2 <= 1e-4). The
 * library computes its own 16 kHz audio and features (the golden features are not used), so this
 * also covers resampling. The 16 kHz golden prompt (wav16k.npy) as input gives the same tokens
 * and embedding. A voice file round trip keeps all of it.
 * Bad input: NULL, empty (0 or negative length), unsupported rates (0, negative, 8 kHz, just
 * outside [16000, 192000]), NaN / Inf, < 0.5 s, > 30 s, silent (also a DC offset alone),
 * unscaled, clipped -> COSY_ERR_INVALID_ARG with a message; a model without the front end ->
 * COSY_ERR_UNSUPPORTED. Odd rates (16001, 22051, 44101 Hz) and 192 kHz give a voice of 1 s.
 * Non-mono WAV, read with cosy_wav_read (channels mixed by their mean, as the official load_wav):
 * a stereo float WAV of the prompt (channels x + d and x - d) gives the official voice; a
 * 4-channel int16 one (x in each) the voice of the mono int16 file, bit for bit.
 * Threaded features (voice_feats, what a GPU engine runs): for several thread counts, the 16 kHz
 * audio, log-mel, mean-removed fbank and prompt mel equal the single-threaded functions bit for
 * bit (24 and 44.1 kHz input).
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
#include "ref/campplus.h"
#include "ref/s3tok.h"
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
  expect_bad(e, x, n, 15999, COSY_ERR_INVALID_ARG, "sample rate");
  expect_bad(e, x, n, 192001, COSY_ERR_INVALID_ARG, "sample rate");
  expect_bad(e, x, n, -16000, COSY_ERR_INVALID_ARG, "sample rate");
  expect_bad(e, x, -5, sr, COSY_ERR_INVALID_ARG, "empty");
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
  /* rates that share no factor with 16 or 24 kHz (long kernels) and the ends of the range */
  static const int32_t odd[] = {16001, 22051, 44101, 192000};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    assert_int_equal(cosy_voice_from_audio(e, x, odd[i], odd[i], "", &v), COSY_OK);
    assert_true(v->n_tokens >= 24 && v->n_tokens <= 25);
    cosy_voice_release(v);
  }
  assert_int_equal(cosy_voice_from_audio(e, x, sr / 2, sr, "", &v), COSY_OK);
  assert_int_equal(v->n_tokens, 12); /* 50 mel frames at 24 kHz -> 25 tokens, 13 at 16 kHz */
  cosy_voice_release(v);
  assert_int_equal(cosy_voice_from_audio(e, x, 30 * (int64_t)sr, sr, NULL, &v), COSY_OK);
  assert_int_equal(v->n_tokens, 750);
  cosy_voice_release(v);
  free(z), free(x);
  cosy_engine_destroy(e);
}

/* a WAV of ch channels built by hand: float32 (bits 32) or int16 (bits 16) samples */
static void write_wav(const char *path, const float *data, int64_t frames, int ch, int bits,
                      int32_t sr) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  const uint32_t bps = (uint32_t)bits / 8, data_size = (uint32_t)(frames * ch * bps);
  unsigned char h[44];
  memcpy(h, "RIFF", 4);
  uint32_t v = 36 + data_size;
  for (int i = 0; i < 4; i++) h[4 + i] = (unsigned char)(v >> (8 * i));
  memcpy(h + 8, "WAVEfmt ", 8);
  const uint32_t fmt[] = {16, (bits == 32 ? 3u : 1u) | ((uint32_t)ch << 16), (uint32_t)sr,
                          (uint32_t)sr * ch * bps, (ch * bps) | ((uint32_t)bits << 16)};
  for (int k = 0; k < 5; k++)
    for (int i = 0; i < 4; i++) h[16 + 4 * k + i] = (unsigned char)(fmt[k] >> (8 * i));
  memcpy(h + 36, "data", 4);
  for (int i = 0; i < 4; i++) h[40 + i] = (unsigned char)(data_size >> (8 * i));
  assert_int_equal(fwrite(h, 1, 44, f), 44);
  for (int64_t i = 0; i < frames * ch; i++) {
    if (bits == 32) {
      assert_int_equal(fwrite(&data[i], 4, 1, f), 1); /* little-endian host */
    } else {
      float x = data[i] * 32768.0f;
      int16_t q = (int16_t)(x > 32767.0f ? 32767 : x < -32768.0f ? -32768 : lrintf(x));
      assert_int_equal(fwrite(&q, 2, 1, f), 1);
    }
  }
  fclose(f);
}

static void test_non_mono_wav(void **state) {
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
  char path[] = "/tmp/cosy-test-stereo-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  /* stereo float: x + d, x - d (d: a quiet tone), whose mean is x up to rounding */
  float *st = malloc((size_t)n * 4 * sizeof(float));
  assert_non_null(st);
  for (int64_t i = 0; i < n; i++) {
    float d = 0.05f * (float)sin(0.01 * (double)i);
    st[2 * i] = pcm[i] + d;
    st[2 * i + 1] = pcm[i] - d;
  }
  write_wav(path, st, n, 2, 32, sr);
  float *mix;
  int64_t nm;
  int32_t srm;
  assert_int_equal(cosy_wav_read(path, &mix, &nm, &srm), COSY_OK);
  assert_int_equal(nm, n);
  assert_int_equal(srm, sr);
  cosy_voice *v;
  assert_int_equal(cosy_voice_from_audio(e, mix, nm, srm, PROMPT_TEXT, &v), COSY_OK);
  print_message("stereo float WAV:\n");
  check_voice(v, 1);
  cosy_voice_release(v);
  free(mix);
  /* 4 channels of int16, the same prompt in each: the voice of the mono int16 file, bit for bit
   * (int16 rounding moves the embedding by ~1e-2 from the official float prompt's) */
  write_wav(path, pcm, n, 1, 16, sr);
  assert_int_equal(cosy_wav_read(path, &mix, &nm, &srm), COSY_OK);
  cosy_voice *mono;
  assert_int_equal(cosy_voice_from_audio(e, mix, nm, srm, PROMPT_TEXT, &mono), COSY_OK);
  free(mix);
  for (int64_t i = 0; i < n; i++)
    for (int c = 0; c < 4; c++) st[4 * i + c] = pcm[i];
  write_wav(path, st, n, 4, 16, sr);
  assert_int_equal(cosy_wav_read(path, &mix, &nm, &srm), COSY_OK);
  assert_int_equal(nm, n);
  assert_int_equal(cosy_voice_from_audio(e, mix, nm, srm, PROMPT_TEXT, &v), COSY_OK);
  assert_int_equal(v->n_tokens, mono->n_tokens);
  assert_memory_equal(v->speech_tokens, mono->speech_tokens, (size_t)v->n_tokens * 4);
  assert_memory_equal(v->mel, mono->mel, (size_t)v->n_tokens * 2 * 80 * 4);
  assert_memory_equal(v->spk, mono->spk, sizeof v->spk);
  print_message("4-channel int16 WAV: the voice of the mono int16 file, bit for bit\n");
  cosy_voice_release(v);
  cosy_voice_release(mono);
  free(mix);
  remove(path);
  free(st), free(pcm);
  cosy_engine_destroy(e);
}

/* the threaded features (voice_feats) equal the single-threaded functions bit for bit */
static void feats_vs_single(const float *pcm, int64_t n, int32_t sr) {
  float *x16, *lm, *fb, *mel;
  int64_t n16;
  int32_t T_lm, T_fb, T_mel;
  assert_int_equal(cosy_resample_sinc_hann(pcm, n, sr, 16000, &x16, &n16), COSY_OK);
  assert_int_equal(ref_whisper_logmel(x16, n16, &lm, &T_lm), COSY_OK);
  assert_int_equal(ref_kaldi_fbank(x16, n16, &fb, &T_fb), COSY_OK);
  for (int m = 0; m < 80; m++) { /* as the official _extract_spk_embedding */
    double s = 0;
    for (int32_t t = 0; t < T_fb; t++) s += fb[(size_t)t * 80 + m];
    float mean = (float)(s / T_fb);
    for (int32_t t = 0; t < T_fb; t++) fb[(size_t)t * 80 + m] -= mean;
  }
  assert_int_equal(cosy_audio_to_mel(pcm, n, sr, &mel, &T_mel), COSY_OK);
  static const int t16s[] = {1, 2, 3, 7, 16}, tmels[] = {0, 1, 2, 5};
  for (size_t a = 0; a < sizeof t16s / sizeof t16s[0]; a++)
    for (size_t b = 0; b < sizeof tmels / sizeof tmels[0]; b++) {
      voice_feats f;
      assert_int_equal(voice_feats_begin(&f, pcm, n, sr, t16s[a], tmels[b]), COSY_OK);
      assert_int_equal(f.n16, n16);
      assert_memory_equal(f.x16, x16, (size_t)n16 * sizeof(float));
      assert_int_equal(f.T_lm, T_lm);
      assert_memory_equal(f.lm, lm, (size_t)128 * T_lm * sizeof(float));
      assert_int_equal(f.T_fb, T_fb);
      assert_memory_equal(f.fb, fb, (size_t)80 * T_fb * sizeof(float));
      assert_int_equal(voice_feats_end(&f), COSY_OK);
      assert_int_equal(f.T_mel, T_mel);
      assert_memory_equal(f.mel, mel, (size_t)80 * T_mel * sizeof(float));
      voice_feats_free(&f);
    }
  print_message("threaded features at %d Hz (%lld samples): x16, log-mel [128][%d], fbank [%d][80], "
                "prompt mel [%d][80] bit-identical for 1..16 threads\n", (int)sr, (long long)n,
                (int)T_lm, (int)T_fb, (int)T_mel);
  free(x16), free(lm), free(fb), free(mel);
}

static void test_threaded_features(void **state) {
  (void)state;
  TU_REQUIRE(tu_shared_dir(), "shared reference data not found (set COSY_SHARED)");
  float *pcm;
  int64_t n;
  int32_t sr;
  assert_int_equal(cosy_wav_read(tu_shared("audio/zero_shot_prompt.wav"), &pcm, &n, &sr), COSY_OK);
  feats_vs_single(pcm, n, sr);
  /* 44.1 kHz (both features resampled): 2.5 s of a chirp plus noise */
  const int64_t n44 = 110250;
  float *x = malloc((size_t)n44 * sizeof(float));
  assert_non_null(x);
  uint32_t s = 7;
  for (int64_t i = 0; i < n44; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = 0.3f * (float)sin(1e-6 * (double)i * (double)i) +
           0.02f * ((float)(s >> 8) / 16777216.0f - 0.5f);
  }
  feats_vs_single(x, n44, 44100);
  int t16, tmel;
  voice_feats_threads(&t16, &tmel);
  print_message("a GPU engine here uses %d + %d threads (%d CPUs)\n", t16, tmel, cosy_cpu_count());
  assert_true(t16 >= 1 && tmel >= 1);
  free(x), free(pcm);
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
      cmocka_unit_test(test_non_mono_wav),
      cmocka_unit_test(test_threaded_features),
      cmocka_unit_test(test_concurrent),
      cmocka_unit_test(test_run_on_t2w),
      cmocka_unit_test(test_no_frontend),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
