/* test_api.c - public API argument validation: NULLs, struct_size rules, out-of-range knobs,
 * unknown modes, bad text, status strings, version. Runs without any model for the engine-config
 * checks; the voice and synthesis checks use the small golden model when present. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cosyvoice.h"
#include "testutil.h"

static void expect_status(cosy_status got, cosy_status want, const char *what) {
  if (got != want)
    fail_msg("%s: got %d (%s: %s), expected %d (%s)", what, got, cosy_status_str(got),
             cosy_last_error(), want, cosy_status_str(want));
  if (want != COSY_OK && strlen(cosy_last_error()) == 0)
    fail_msg("%s: status %d but cosy_last_error() is empty", what, got);
}

static void test_version_and_status(void **state) {
  (void)state;
  assert_int_equal(cosy_version_number(), COSY_VERSION_NUMBER);
  assert_non_null(strstr(cosy_version_string(), "0.1.0"));
  for (int s = -5; s < 120; s++) assert_non_null(cosy_status_str(s));
  assert_string_equal(cosy_status_str(12345), "unknown status");
  assert_string_equal(cosy_status_str(COSY_OK), "ok");
  /* pinned values */
  assert_int_equal(COSY_ERR_INVALID_ARG, 1);
  assert_int_equal(COSY_ERR_STRUCT_SIZE, 2);
  assert_int_equal(COSY_ERR_UNSUPPORTED, 10);
  assert_int_equal(COSY_ERR_TEXT, 14);
  assert_int_equal(COSY_ERR_INTERNAL, 99);
  cosy_free(NULL);
  cosy_engine_destroy(NULL);
  cosy_voice_release(NULL);
  cosy_request_release(NULL);
  cosy_request_cancel(NULL);
}

static void test_config_init(void **state) {
  (void)state;
  cosy_engine_config_init(NULL, sizeof(cosy_engine_config));
  cosy_engine_config c;
  memset(&c, 0xAB, sizeof c);
  cosy_engine_config_init(&c, sizeof c);
  assert_int_equal(c.struct_size, sizeof c);
  assert_null(c.model_path);
  assert_int_equal(c.device, 0);
  assert_true(c.gpu_memory_fraction == 0.0f);
  /* an older, smaller struct: only its bytes are touched */
  unsigned char buf[sizeof c + 16];
  memset(buf, 0xCD, sizeof buf);
  cosy_engine_config_init((cosy_engine_config *)buf, 16);
  uint32_t ss;
  memcpy(&ss, buf, 4);
  assert_int_equal(ss, 16);
  for (size_t i = 16; i < sizeof buf; i++) assert_int_equal(buf[i], 0xCD);
}

static void test_engine_create_args(void **state) {
  (void)state;
  cosy_engine *e = (cosy_engine *)(uintptr_t)1;
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  expect_status(cosy_engine_create(NULL, &e), COSY_ERR_INVALID_ARG, "NULL config");
  assert_null(e);
  expect_status(cosy_engine_create(&c, NULL), COSY_ERR_INVALID_ARG, "NULL out");
  expect_status(cosy_engine_create(&c, &e), COSY_ERR_INVALID_ARG, "no model path");
  c.model_path = "/nonexistent/model.gguf";
  c.device = COSY_DEVICE_CPU;
  expect_status(cosy_engine_create(&c, &e), COSY_ERR_IO, "missing model file");
  assert_non_null(strstr(cosy_last_error(), "/nonexistent/model.gguf"));

  cosy_engine_config b = c;
  b.struct_size = 0;
  expect_status(cosy_engine_create(&b, &e), COSY_ERR_STRUCT_SIZE, "struct_size 0");
  b.struct_size = 7;
  expect_status(cosy_engine_create(&b, &e), COSY_ERR_STRUCT_SIZE, "struct_size 7");
  b.struct_size = 56 - 1; /* one byte short of the first (0.1) version */
  expect_status(cosy_engine_create(&b, &e), COSY_ERR_STRUCT_SIZE, "struct_size 0.1 - 1");

  /* a newer caller's larger struct: zero tail accepted, non-zero tail refused */
  struct {
    cosy_engine_config c;
    uint64_t future_field;
  } big;
  memset(&big, 0, sizeof big);
  cosy_engine_config_init(&big.c, sizeof big);
  big.c.model_path = "/nonexistent/model.gguf";
  big.c.device = COSY_DEVICE_CPU;
  expect_status(cosy_engine_create(&big.c, &e), COSY_ERR_IO, "bigger struct, zero tail");
  big.future_field = 1;
  expect_status(cosy_engine_create(&big.c, &e), COSY_ERR_STRUCT_SIZE, "bigger struct, non-zero tail");

  struct { const char *what; void (*set)(cosy_engine_config *); } bad[] = {
    {"fraction 1.5", NULL}, {"fraction -0.1", NULL}, {"fraction NaN", NULL}, {"device -2", NULL},
    {"device 5000", NULL}, {"max_active -1", NULL}, {"max_active 5000", NULL},
    {"max_queued -1", NULL}, {"cpu_threads -3", NULL}, {"flags 2", NULL}, {"log_level 9", NULL},
    {"max_active 4097", NULL}, {"max_queued 2^20 + 1", NULL}, {"cpu_threads 1025", NULL},
    {"vocoder_precision 4", NULL}, {"vocoder_precision -1", NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cosy_engine_config x = c;
    switch (i) {
      case 0: x.gpu_memory_fraction = 1.5f; break;
      case 1: x.gpu_memory_fraction = -0.1f; break;
      case 2: x.gpu_memory_fraction = NAN; break;
      case 3: x.device = -2; break;
      case 4: x.device = 5000; break;
      case 5: x.max_active = -1; break;
      case 6: x.max_active = 5000; break;
      case 7: x.max_queued = -1; break;
      case 8: x.cpu_threads = -3; break;
      case 9: x.flags = 2; break; /* an unknown bit (1 is COSY_ENGINE_BATCH_INVARIANT) */
      case 10: x.log_level = 9; break;
      case 11: x.max_active = 4097; break;
      case 12: x.max_queued = (1 << 20) + 1; break;
      case 13: x.cpu_threads = 1025; break;
      case 14: x.vocoder_precision = 4; break; /* 3 is COSY_VOCODER_FP16 */
      case 15: x.vocoder_precision = -1; break;
    }
    expect_status(cosy_engine_create(&x, &e), COSY_ERR_INVALID_ARG, bad[i].what);
    assert_null(e);
  }
  /* the limits themselves pass the checks (then the missing model file fails the create) */
  {
    cosy_engine_config x = c;
    x.max_active = 4096, x.max_queued = 1 << 20, x.cpu_threads = 1024;
    expect_status(cosy_engine_create(&x, &e), COSY_ERR_IO, "max_active 4096, max_queued 2^20");
    assert_null(e);
    x.vocoder_precision = COSY_VOCODER_TF32;
    expect_status(cosy_engine_create(&x, &e), COSY_ERR_IO, "vocoder_precision TF32");
    assert_null(e);
    x.vocoder_precision = COSY_VOCODER_FP16;
    expect_status(cosy_engine_create(&x, &e), COSY_ERR_IO, "vocoder_precision FP16");
    assert_null(e);
    x.flags = COSY_ENGINE_BATCH_INVARIANT;
    expect_status(cosy_engine_create(&x, &e), COSY_ERR_IO, "flags COSY_ENGINE_BATCH_INVARIANT");
    assert_null(e);
    x.flags = COSY_ENGINE_BATCH_INVARIANT | 0x80000000u;
    expect_status(cosy_engine_create(&x, &e), COSY_ERR_INVALID_ARG, "flags with a high bit");
    assert_null(e);
  }
  /* the GPU path decodes at most 1024 requests together (lib/engine.h COSY_GPU_MAX_ACTIVE):
   * more is rejected at create, before the device is touched (a build without CUDA refuses any
   * device first) */
  {
    cosy_engine_config x = c;
    x.device = 0, x.max_active = 1025;
#ifdef COSY_WITH_CUDA
    expect_status(cosy_engine_create(&x, &e), COSY_ERR_INVALID_ARG, "GPU max_active 1025");
#else
    expect_status(cosy_engine_create(&x, &e), COSY_ERR_UNSUPPORTED, "GPU max_active 1025");
#endif
    assert_null(e);
  }
}

static void test_audio_to_mel_args(void **state) {
  (void)state;
  float pcm[4800];
  for (int i = 0; i < 4800; i++) pcm[i] = 0.1f * sinf(0.05f * (float)i);
  float *mel = (float *)(uintptr_t)1;
  int32_t frames = -1;
  expect_status(cosy_audio_to_mel(NULL, 4800, 24000, &mel, &frames), COSY_ERR_INVALID_ARG, "NULL pcm");
  expect_status(cosy_audio_to_mel(pcm, 0, 24000, &mel, &frames), COSY_ERR_INVALID_ARG, "0 samples");
  expect_status(cosy_audio_to_mel(pcm, 4800, 8000, &mel, &frames), COSY_ERR_INVALID_ARG, "8 kHz");
  expect_status(cosy_audio_to_mel(pcm, 4800, 24000, NULL, &frames), COSY_ERR_INVALID_ARG, "NULL mel");
  pcm[7] = NAN;
  expect_status(cosy_audio_to_mel(pcm, 4800, 24000, &mel, &frames), COSY_ERR_INVALID_ARG, "NaN sample");
  pcm[7] = 0;
  expect_status(cosy_audio_to_mel(pcm, 4800, 24000, &mel, &frames), COSY_OK, "valid");
  assert_int_equal(frames, 10);
  cosy_free(mel);
}

/* ---- with a model -------------------------------------------------------------------------- */

typedef struct fixture {
  cosy_engine *e;
  cosy_voice *v;
} fixture;

static int setup_engine(void **state) {
  static fixture fx;
  memset(&fx, 0, sizeof fx);
  *state = &fx;
  const char *model = tu_small_model();
  if (!model) return 0;
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  c.model_path = model;
  c.device = COSY_DEVICE_CPU;
  if (cosy_engine_create(&c, &fx.e) != COSY_OK) {
    fprintf(stderr, "engine: %s\n", cosy_last_error());
    return -1;
  }
  int32_t tok[10];
  float mel[20 * 80], spk[192];
  for (int i = 0; i < 10; i++) tok[i] = (i * 577) % 6561;
  for (int i = 0; i < 20 * 80; i++) mel[i] = -5.0f + (float)(i % 13) * 0.3f;
  for (int i = 0; i < 192; i++) spk[i] = (float)((i * 37) % 11) - 5.0f;
  cosy_voice_features f;
  cosy_voice_features_init(&f, sizeof f);
  f.prompt_text = "Hello.";
  f.speech_tokens = tok;
  f.n_speech_tokens = 10;
  f.mel = mel;
  f.n_mel_frames = 20;
  f.speaker_embedding = spk;
  if (cosy_voice_from_features(fx.e, &f, &fx.v) != COSY_OK) {
    fprintf(stderr, "voice: %s\n", cosy_last_error());
    return -1;
  }
  return 0;
}

static int teardown_engine(void **state) {
  fixture *fx = (fixture *)*state;
  cosy_voice_release(fx->v);
  cosy_engine_destroy(fx->e);
  return 0;
}

static void test_gpu_device_unsupported_or_error(void **state) {
  (void)state;
  const char *model = tu_small_model();
  TU_REQUIRE(model, "small model absent (make build/test/small-f32.gguf)");
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  c.model_path = model;
  c.device = 0;
  cosy_engine *e = NULL;
  cosy_status st = cosy_engine_create(&c, &e);
  /* without a GPU (or without CUDA in the build): a clear status, never a crash */
  if (st == COSY_OK) {
    print_message("a GPU engine was created on device 0\n");
    cosy_engine_destroy(e);
    return;
  }
  assert_true(st == COSY_ERR_UNSUPPORTED || st == COSY_ERR_CUDA);
  assert_null(e);
  assert_true(strlen(cosy_last_error()) > 0);
}

static void test_engine_basics(void **state) {
  fixture *fx = (fixture *)*state;
  TU_REQUIRE(fx->e, "small model absent (make build/test/small-f32.gguf)");
  assert_int_equal(cosy_engine_sample_rate(fx->e), 24000);
  assert_int_equal(cosy_engine_sample_rate(NULL), 0);
  cosy_engine_stats s;
  cosy_engine_stats_init(&s, sizeof s);
  expect_status(cosy_engine_get_stats(fx->e, &s), COSY_OK, "stats");
  assert_true(s.weights_bytes > 0);
  expect_status(cosy_engine_get_stats(NULL, &s), COSY_ERR_INVALID_ARG, "stats NULL engine");
  expect_status(cosy_engine_get_stats(fx->e, NULL), COSY_ERR_INVALID_ARG, "stats NULL out");
  s.struct_size = 3;
  expect_status(cosy_engine_get_stats(fx->e, &s), COSY_ERR_STRUCT_SIZE, "stats size 3");

  /* the effective settings: the defaults cosy_engine_create resolved (the fixture's config
   * leaves max_active, max_queued and first_chunk_wait_max at 0) */
  cosy_engine_info in;
  cosy_engine_info_init(&in, sizeof in);
  assert_int_equal(in.struct_size, sizeof in);
  expect_status(cosy_engine_get_info(fx->e, &in), COSY_OK, "info");
  print_message("info: backend %s, device %d (%s), max_active %d, max_queued %d, cpu_threads %d, "
                "%d Hz, first_chunk_wait_max %d\n", in.backend, in.device, in.device_name,
                in.max_active, in.max_queued, in.cpu_threads, in.sample_rate,
                in.first_chunk_wait_max);
  assert_string_equal(in.backend, "cpu");
  assert_string_equal(in.device_name, "CPU");
  assert_int_equal(in.device, COSY_DEVICE_CPU);
  assert_int_equal(in.max_active, 8);
  assert_int_equal(in.max_queued, 1024);
  assert_int_equal(in.first_chunk_wait_max, -1);
  assert_int_equal(in.sample_rate, 24000);
  assert_true(in.cpu_threads >= 1);
  assert_int_equal(in.kv_pages_total, 0);
  assert_true(in.gpu_memory_budget == 0 && in.cc_major == 0 && in.gpu_profile[0] == 0);
  expect_status(cosy_engine_get_info(NULL, &in), COSY_ERR_INVALID_ARG, "info NULL engine");
  expect_status(cosy_engine_get_info(fx->e, NULL), COSY_ERR_INVALID_ARG, "info NULL out");
  in.struct_size = 8;
  expect_status(cosy_engine_get_info(fx->e, &in), COSY_ERR_STRUCT_SIZE, "info size 8");
}

static void test_voice_args(void **state) {
  fixture *fx = (fixture *)*state;
  TU_REQUIRE(fx->e, "small model absent");
  int32_t tok[4] = {1, 2, 3, 4};
  float mel[8 * 80], spk[192];
  for (int i = 0; i < 8 * 80; i++) mel[i] = -3.0f;
  for (int i = 0; i < 192; i++) spk[i] = 0.5f;
  cosy_voice_features f;
  cosy_voice_features_init(&f, sizeof f);
  f.prompt_text = "Hi.";
  f.speech_tokens = tok;
  f.n_speech_tokens = 4;
  f.mel = mel;
  f.n_mel_frames = 8;
  f.speaker_embedding = spk;
  cosy_voice *v = NULL;
  expect_status(cosy_voice_from_features(NULL, &f, &v), COSY_ERR_INVALID_ARG, "NULL engine");
  expect_status(cosy_voice_from_features(fx->e, NULL, &v), COSY_ERR_INVALID_ARG, "NULL features");
  expect_status(cosy_voice_from_features(fx->e, &f, NULL), COSY_ERR_INVALID_ARG, "NULL out");
  cosy_voice_features g = f;
  g.struct_size = 4;
  expect_status(cosy_voice_from_features(fx->e, &g, &v), COSY_ERR_STRUCT_SIZE, "features size 4");
  g = f; tok[2] = 6561;
  expect_status(cosy_voice_from_features(fx->e, &g, &v), COSY_ERR_INVALID_ARG, "token 6561");
  tok[2] = -1;
  expect_status(cosy_voice_from_features(fx->e, &g, &v), COSY_ERR_INVALID_ARG, "token -1");
  tok[2] = 3;
  g = f; g.n_mel_frames = 7;
  expect_status(cosy_voice_from_features(fx->e, &g, &v), COSY_ERR_INVALID_ARG, "too few frames");
  g = f; g.n_speech_tokens = -1;
  expect_status(cosy_voice_from_features(fx->e, &g, &v), COSY_ERR_INVALID_ARG, "negative tokens");
  g = f; g.n_speech_tokens = 1 << 30;
  expect_status(cosy_voice_from_features(fx->e, &g, &v), COSY_ERR_INVALID_ARG, "absurd tokens");
  g = f; g.speaker_dim = 191;
  expect_status(cosy_voice_from_features(fx->e, &g, &v), COSY_ERR_INVALID_ARG, "speaker dim 191");
  g = f; g.speaker_embedding = NULL;
  expect_status(cosy_voice_from_features(fx->e, &g, &v), COSY_ERR_INVALID_ARG, "NULL speaker");
  g = f; g.mel = NULL;
  expect_status(cosy_voice_from_features(fx->e, &g, &v), COSY_ERR_INVALID_ARG, "NULL mel");
  g = f; mel[5] = NAN;
  expect_status(cosy_voice_from_features(fx->e, &g, &v), COSY_ERR_INVALID_ARG, "NaN mel");
  mel[5] = -3.0f;
  g = f; g.prompt_text = "bad \xC3\x28 utf8";
  expect_status(cosy_voice_from_features(fx->e, &g, &v), COSY_ERR_TEXT, "invalid UTF-8 prompt");
  assert_null(v);
  expect_status(cosy_voice_from_features(fx->e, &f, &v), COSY_OK, "valid voice");
  cosy_voice_release(v);
  float pcm[48000] = {0};
  expect_status(cosy_voice_from_audio(fx->e, pcm, 48000, 24000, "x", &v), COSY_ERR_UNSUPPORTED,
                "voice from audio");
  expect_status(cosy_voice_load(fx->e, "/nonexistent.voice", &v), COSY_ERR_IO, "missing voice");
  expect_status(cosy_voice_load(fx->e, NULL, &v), COSY_ERR_INVALID_ARG, "NULL voice path");
  expect_status(cosy_voice_load(fx->e, tu_small_model(), &v), COSY_ERR_MODEL_FORMAT,
                "a model file is not a voice");
}

static void test_voice_file_round_trip(void **state) {
  fixture *fx = (fixture *)*state;
  TU_REQUIRE(fx->e, "small model absent");
  const char *path = tu_tmp_path("api_voice.gguf");
  expect_status(cosy_voice_save(fx->v, path), COSY_OK, "save");
  expect_status(cosy_voice_save(NULL, path), COSY_ERR_INVALID_ARG, "save NULL");
  expect_status(cosy_voice_save(fx->v, "/nonexistent-dir/x.gguf"), COSY_ERR_IO, "save bad dir");
  cosy_voice *v = NULL;
  expect_status(cosy_voice_load(fx->e, path, &v), COSY_OK, "load");
  /* same voice -> same audio for the same seed */
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.seed = 7;
  p.max_tokens = 30;
  float *a = NULL, *b = NULL;
  int64_t na = 0, nb = 0;
  expect_status(cosy_synthesize(fx->e, fx->v, "Hi there.", &p, &a, &na), COSY_OK, "synth a");
  expect_status(cosy_synthesize(fx->e, v, "Hi there.", &p, &b, &nb), COSY_OK, "synth b");
  assert_int_equal(na, nb);
  assert_true(na > 0);
  assert_memory_equal(a, b, (size_t)na * sizeof *a);
  cosy_free(a);
  cosy_free(b);
  cosy_voice_release(v);
  remove(path);
}

static void test_synth_params(void **state) {
  fixture *fx = (fixture *)*state;
  TU_REQUIRE(fx->e, "small model absent");
  float *pcm = NULL;
  int64_t n = 0;
  cosy_synth_params p;
  const char *text = "Hi.";
  struct { const char *what; int field; double value; } bad[] = {
    {"mode 3", 0, 3}, {"mode -1", 0, -1}, {"rate 7999", 1, 7999}, {"rate 48001", 1, 48001},
    {"speed 3", 2, 3}, {"speed 0.1", 2, 0.1}, {"temperature -1", 3, -1}, {"temperature 5", 3, 5},
    {"top_p 1.5", 4, 1.5}, {"top_p -0.5", 4, -0.5}, {"top_k -1", 5, -1}, {"top_k 7000", 5, 7000},
    {"first chunk 4", 6, 4}, {"first chunk 101", 6, 101}, {"first chunk -25", 6, -25},
    {"max_tokens -1", 7, -1}, {"flags 0x100", 8, 0x100}, {"speed NaN", 2, NAN},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cosy_synth_params_init(&p, sizeof p);
    switch (bad[i].field) {
      case 0: p.mode = (int32_t)bad[i].value; break;
      case 1: p.sample_rate = (int32_t)bad[i].value; break;
      case 2: p.speed = (float)bad[i].value; break;
      case 3: p.temperature = (float)bad[i].value; break;
      case 4: p.top_p = (float)bad[i].value; break;
      case 5: p.top_k = (int32_t)bad[i].value; break;
      case 6: p.first_chunk_tokens = (int32_t)bad[i].value; break;
      case 7: p.max_tokens = (int32_t)bad[i].value; break;
      case 8: p.flags = (uint32_t)bad[i].value; break;
    }
    expect_status(cosy_synthesize(fx->e, fx->v, text, &p, &pcm, &n), COSY_ERR_INVALID_ARG, bad[i].what);
    assert_null(pcm);
  }
  cosy_synth_params_init(&p, sizeof p);
  p.mode = COSY_MODE_INSTRUCT;
  expect_status(cosy_synthesize(fx->e, fx->v, text, &p, &pcm, &n), COSY_ERR_INVALID_ARG,
                "instruct without text");
  cosy_synth_params_init(&p, sizeof p);
  p.struct_size = 8;
  expect_status(cosy_synthesize(fx->e, fx->v, text, &p, &pcm, &n), COSY_ERR_STRUCT_SIZE, "params size 8");
  cosy_synth_params_init(&p, sizeof p);
  expect_status(cosy_synthesize(NULL, fx->v, text, &p, &pcm, &n), COSY_ERR_INVALID_ARG, "NULL engine");
  expect_status(cosy_synthesize(fx->e, NULL, text, &p, &pcm, &n), COSY_ERR_INVALID_ARG, "NULL voice");
  expect_status(cosy_synthesize(fx->e, fx->v, NULL, &p, &pcm, &n), COSY_ERR_INVALID_ARG, "NULL text");
  expect_status(cosy_synthesize(fx->e, fx->v, text, &p, NULL, &n), COSY_ERR_INVALID_ARG, "NULL pcm");
  expect_status(cosy_synthesize(fx->e, fx->v, "\xFF\xFE", &p, &pcm, &n), COSY_ERR_TEXT, "bad UTF-8");
  expect_status(cosy_synthesize(fx->e, fx->v, "a\xED\xA0\x80", &p, &pcm, &n), COSY_ERR_TEXT, "surrogate");
  expect_status(cosy_synthesize(fx->e, fx->v, "  \n\t ", &p, &pcm, &n), COSY_ERR_TEXT, "blank text");
  expect_status(cosy_synthesize(fx->e, fx->v, "", &p, &pcm, &n), COSY_ERR_TEXT, "empty text");
  p.instruct_text = "\xC0\x80";
  p.mode = COSY_MODE_INSTRUCT;
  expect_status(cosy_synthesize(fx->e, fx->v, text, &p, &pcm, &n), COSY_ERR_TEXT, "bad instruct UTF-8");
}

static int32_t noop_chunk(void *u, const cosy_chunk *c) {
  (void)u; (void)c;
  return 0;
}

static void test_request_args(void **state) {
  fixture *fx = (fixture *)*state;
  TU_REQUIRE(fx->e, "small model absent");
  cosy_request *r = NULL;
  float buf[16];
  int64_t got;
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.max_tokens = 20;
  expect_status(cosy_request_submit(fx->e, fx->v, "Hi.", &p, NULL, NULL, NULL), COSY_ERR_INVALID_ARG, "NULL out");
  /* speed != 1 implies COSY_SYNTH_ONE_SHOT: a pull request gets its audio as one chunk */
  p.speed = 1.5f;
  expect_status(cosy_request_submit(fx->e, fx->v, "Hi.", &p, NULL, NULL, &r), COSY_OK, "speed 1.5 submit");
  expect_status(cosy_request_wait(r, -1), COSY_OK, "speed 1.5 wait");
  {
    cosy_request_stats s1;
    cosy_request_stats_init(&s1, sizeof s1);
    expect_status(cosy_request_get_stats(r, &s1), COSY_OK, "speed 1.5 stats");
    assert_int_equal(s1.n_chunks, 1);
    assert_true(s1.n_samples > 0);
  }
  cosy_request_release(r);
  r = NULL;
  p.speed = 0;
  expect_status(cosy_request_submit(fx->e, fx->v, "Hi.", &p, noop_chunk, NULL, &r), COSY_OK, "submit push");
  expect_status(cosy_request_read(r, buf, 16, &got, 0), COSY_ERR_INVALID_ARG, "read on a push request");
  expect_status(cosy_request_wait(r, -2), COSY_ERR_INVALID_ARG, "wait -2");
  expect_status(cosy_request_wait(r, -1), COSY_OK, "wait");
  cosy_request_stats rs;
  cosy_request_stats_init(&rs, sizeof rs);
  expect_status(cosy_request_get_stats(r, &rs), COSY_OK, "stats");
  assert_int_equal(rs.done, 1);
  assert_true(rs.n_speech_tokens > 0 && rs.n_speech_tokens <= 20);
  cosy_request_release(r);
  expect_status(cosy_request_submit(fx->e, fx->v, "Hi.", &p, NULL, NULL, &r), COSY_OK, "submit pull");
  expect_status(cosy_request_read(r, NULL, 16, &got, 0), COSY_ERR_INVALID_ARG, "read NULL buf");
  expect_status(cosy_request_read(r, buf, 0, &got, 0), COSY_ERR_INVALID_ARG, "read cap 0");
  expect_status(cosy_request_read(r, buf, 16, NULL, 0), COSY_ERR_INVALID_ARG, "read NULL n");
  expect_status(cosy_request_read(r, buf, 16, &got, -5), COSY_ERR_INVALID_ARG, "read timeout -5");
  cosy_request_release(r); /* released while running: cancelled and freed by the engine */
}

/* Submission prepares the text on the caller's thread (lib/scheduler.c sched_submit): a request
 * queued behind max_active running ones already knows its text tokens when submit returns (before
 * this it was prepared only at admission, on the LLM thread), and a text that cannot be
 * synthesized still ends the request with COSY_ERR_TEXT and the normalizer's message. */
static void test_submit_prepares(void **state) {
  fixture *fx = (fixture *)*state;
  TU_REQUIRE(fx->e, "small model absent");
  cosy_engine_info in;
  cosy_engine_info_init(&in, sizeof in);
  expect_status(cosy_engine_get_info(fx->e, &in), COSY_OK, "info");
  assert_true(in.max_active >= 1 && in.max_active <= 16);
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.seed = 7;
  p.min_tokens = p.max_tokens = 2000; /* long: they hold every active slot while we look */
  cosy_request *run[16] = {0}, *q = NULL;
  /* cosy_last_error describes the last failing call: a successful submit (which prepares on this
   * thread) leaves it as it was */
  expect_status(cosy_request_submit(fx->e, fx->v, "Hi.", &p, NULL, NULL, NULL), COSY_ERR_INVALID_ARG,
                "NULL out");
  char before[512];
  snprintf(before, sizeof before, "%s", cosy_last_error());
  assert_true(before[0] != '\0');
  for (int i = 0; i < in.max_active; i++)
    expect_status(cosy_request_submit(fx->e, fx->v, "Hello there.", &p, noop_chunk, NULL, &run[i]),
                  COSY_OK, "submit a long request");
  p.min_tokens = p.max_tokens = 20;
  expect_status(cosy_request_submit(fx->e, fx->v, "Hello there, how are you today?", &p, NULL, NULL, &q),
                COSY_OK, "submit behind them");
  assert_string_equal(cosy_last_error(), before);
  cosy_request_stats rs;
  cosy_request_stats_init(&rs, sizeof rs);
  expect_status(cosy_request_get_stats(q, &rs), COSY_OK, "stats");
  print_message("info: queued request: %d text tokens, %d speech tokens, done %d\n", rs.n_text_tokens,
                rs.n_speech_tokens, rs.done);
  assert_int_equal(rs.done, 0);
  assert_int_equal(rs.n_speech_tokens, 0);
  assert_true(rs.n_text_tokens > 0);
  for (int i = 0; i < in.max_active; i++) cosy_request_release(run[i]);
  expect_status(cosy_request_wait(q, -1), COSY_OK, "the queued request runs once they are gone");
  cosy_request_release(q);
  cosy_request *bad = NULL;
  expect_status(cosy_request_submit(fx->e, fx->v, "  \n\t ", &p, NULL, NULL, &bad), COSY_OK,
                "submit a blank text (the request carries the error)");
  expect_status(cosy_request_wait(bad, -1), COSY_ERR_TEXT, "a blank text ends the request");
  print_message("info: its message: %s\n", cosy_last_error());
  assert_non_null(strstr(cosy_last_error(), "nothing to say"));
  cosy_request_stats_init(&rs, sizeof rs);
  expect_status(cosy_request_get_stats(bad, &rs), COSY_OK, "stats");
  assert_int_equal(rs.done, 1);
  assert_int_equal(rs.n_samples, 0);
  cosy_request_release(bad);
}

int main(void) {
  const struct CMUnitTest plain[] = {
      cmocka_unit_test(test_version_and_status),
      cmocka_unit_test(test_config_init),
      cmocka_unit_test(test_engine_create_args),
      cmocka_unit_test(test_audio_to_mel_args),
      cmocka_unit_test(test_gpu_device_unsupported_or_error),
  };
  const struct CMUnitTest with_model[] = {
      cmocka_unit_test(test_engine_basics),
      cmocka_unit_test(test_voice_args),
      cmocka_unit_test(test_voice_file_round_trip),
      cmocka_unit_test(test_synth_params),
      cmocka_unit_test(test_request_args),
      cmocka_unit_test(test_submit_prepares),
  };
  int fails = cmocka_run_group_tests_name("api", plain, NULL, NULL);
  fails += cmocka_run_group_tests_name("api with model", with_model, setup_engine, teardown_engine);
  return fails ? 1 : 0;
}
