/* test_abi_compat.c - the ABI rules of cosyvoice.h for the versioned structs: a program built
 * against the 0.1 header keeps working when a later version appends a field, and a program built
 * against a later header works with this library as long as it leaves the new fields zero.
 *
 * The structs: cosy_engine_config, cosy_synth_params, cosy_voice_features (caller -> library) and
 * cosy_engine_stats, cosy_request_stats (library -> caller, the caller's struct_size says how
 * much the library may write).
 *
 * What is checked:
 *   1. The 0.1 layout is pinned (LP64): every struct's size and every field's offset. Inserting,
 *      reordering or retyping a field fails here; appending one changes a size and fails here too,
 *      on purpose: then this table and abi/ get the new version's sizes, and the old sizes
 *      become the library's minimums (MIN_* in lib/api.c).
 *   2. Newer caller (its struct = the 0.1 struct + one appended 8-byte field, struct_size = the
 *      larger size): with the new field zero every call works exactly as with the 0.1 struct;
 *      with it non-zero the call fails with COSY_ERR_STRUCT_SIZE and says which byte. For the
 *      output structs the library fills the part it knows and leaves the appended field alone.
 *   3. Older caller (struct_size smaller than the library's): *_init writes only struct_size
 *      bytes. For the calls themselves, 0.1 is the first version, so the minimum struct_size IS
 *      the 0.1 size: a smaller one is COSY_ERR_STRUCT_SIZE (header: "struct_size smaller than the
 *      first version of the struct is COSY_ERR_STRUCT_SIZE"). That a 0.1 caller keeps working
 *      with a later library whose struct has grown is simulated with the library's own copy-in
 *      (cosy_struct_in) and a "0.2" struct: the known bytes are copied, the new field reads 0.
 *
 * The struct checks that can run before any engine exists (engine config, synthesis parameters,
 * the copy-in) need no model. The rest use the small test model (build/test/small-f32.gguf or
 * $COSY_TEST_MODEL) with a synthetic voice (no ../shared needed) and skip without it. */
#define _POSIX_C_SOURCE 200809L
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
#include "util.h" /* cosy_struct_in: the library's copy-in of a caller's struct */

/* internal (lib/api.c): copy and check the caller's synthesis parameters */
#include "engine.h" /* params_resolve: the library's copy-in and check of cosy_synth_params */

/* A caller built against a later header: the 0.1 struct with one field appended. The static
 * asserts check that this is the same layout as appending a field to the struct itself (no tail
 * padding in the 0.1 struct that the new field could have moved into). */
#define NEWER(T)                                                                   \
  typedef struct T##_newer {                                                       \
    T v01;                                                                         \
    uint64_t appended;                                                             \
  } T##_newer;                                                                     \
  _Static_assert(offsetof(T##_newer, appended) == sizeof(T), #T " has tail padding")
NEWER(cosy_engine_config);
NEWER(cosy_synth_params);
NEWER(cosy_voice_features);
NEWER(cosy_engine_stats);
NEWER(cosy_request_stats);

/* ---- 1. pinned 0.1 layout ------------------------------------------------------------------- */

typedef struct pin {
  const char *name;
  size_t got, want;
} pin;

#define SZ(T, n) {#T, sizeof(T), n}
#define OFF(T, f, n) {#T "." #f, offsetof(T, f), n}

static void test_layout_pinned(void **state) {
  (void)state;
  if (sizeof(void *) != 8) skip(); /* the table is for LP64 */
  static const pin pins[] = {
      SZ(cosy_engine_config, 64), OFF(cosy_engine_config, flags, 4),
      OFF(cosy_engine_config, model_path, 8), OFF(cosy_engine_config, device, 16),
      OFF(cosy_engine_config, gpu_memory_fraction, 20), OFF(cosy_engine_config, max_active, 24),
      OFF(cosy_engine_config, max_queued, 28), OFF(cosy_engine_config, cpu_threads, 32),
      OFF(cosy_engine_config, log_level, 36), OFF(cosy_engine_config, log_fn, 40),
      OFF(cosy_engine_config, log_user, 48),
      /* appended after 0.1 (older callers pass struct_size 56) */
      OFF(cosy_engine_config, first_chunk_wait_max, 56), OFF(cosy_engine_config, vocoder_precision, 60),

      SZ(cosy_synth_params, 64), OFF(cosy_synth_params, flags, 4), OFF(cosy_synth_params, mode, 8),
      OFF(cosy_synth_params, sample_rate, 12), OFF(cosy_synth_params, instruct_text, 16),
      OFF(cosy_synth_params, speed, 24), OFF(cosy_synth_params, temperature, 28),
      OFF(cosy_synth_params, top_p, 32), OFF(cosy_synth_params, top_k, 36),
      OFF(cosy_synth_params, seed, 40), OFF(cosy_synth_params, first_chunk_tokens, 48),
      OFF(cosy_synth_params, max_tokens, 52), OFF(cosy_synth_params, min_tokens, 56),
      OFF(cosy_synth_params, reserved, 60),

      SZ(cosy_voice_features, 56), OFF(cosy_voice_features, prompt_text, 8),
      OFF(cosy_voice_features, speech_tokens, 16), OFF(cosy_voice_features, n_speech_tokens, 24),
      OFF(cosy_voice_features, n_mel_frames, 28), OFF(cosy_voice_features, mel, 32),
      OFF(cosy_voice_features, speaker_embedding, 40), OFF(cosy_voice_features, speaker_dim, 48),
      OFF(cosy_voice_features, reserved2, 52),

      SZ(cosy_engine_stats, 128), OFF(cosy_engine_stats, weights_bytes, 8),
      OFF(cosy_engine_stats, kv_bytes, 16), OFF(cosy_engine_stats, workspace_bytes, 24),
      OFF(cosy_engine_stats, device_bytes_total, 32), OFF(cosy_engine_stats, kv_pages_total, 40),
      OFF(cosy_engine_stats, kv_pages_used, 44), OFF(cosy_engine_stats, active, 48),
      OFF(cosy_engine_stats, queued, 52), OFF(cosy_engine_stats, requests_done, 56),
      OFF(cosy_engine_stats, audio_samples_out, 64),
      /* appended after 0.1 (older callers pass struct_size 72) */
      OFF(cosy_engine_stats, llm_steps, 72), OFF(cosy_engine_stats, llm_step_rows, 80),
      OFF(cosy_engine_stats, flow_calls, 88), OFF(cosy_engine_stats, flow_jobs, 96),
      OFF(cosy_engine_stats, vocoder_calls, 104), OFF(cosy_engine_stats, vocoder_jobs, 112),
      OFF(cosy_engine_stats, flow_pages_total, 120), OFF(cosy_engine_stats, flow_pages_used, 124),

      SZ(cosy_request_stats, 72), OFF(cosy_request_stats, ttfb_s, 8),
      OFF(cosy_request_stats, total_s, 16), OFF(cosy_request_stats, llm_s, 24),
      OFF(cosy_request_stats, flow_s, 32), OFF(cosy_request_stats, vocoder_s, 40),
      OFF(cosy_request_stats, n_samples, 48), OFF(cosy_request_stats, n_text_tokens, 56),
      OFF(cosy_request_stats, n_speech_tokens, 60), OFF(cosy_request_stats, n_chunks, 64),
      OFF(cosy_request_stats, done, 68),

      SZ(cosy_chunk, 40), OFF(cosy_chunk, pcm, 8), OFF(cosy_chunk, n_samples, 16),
      OFF(cosy_chunk, offset, 24), OFF(cosy_chunk, sample_rate, 32), OFF(cosy_chunk, reserved, 36),

      /* added after 0.1 (its first version; cosy_request_text_marks) */
      SZ(cosy_text_mark, 40), OFF(cosy_text_mark, reserved, 4), OFF(cosy_text_mark, text_begin, 8),
      OFF(cosy_text_mark, text_end, 16), OFF(cosy_text_mark, sample, 24),
      OFF(cosy_text_mark, text_token, 32), OFF(cosy_text_mark, speech_token, 36),
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof pins / sizeof pins[0]; i++)
    if (pins[i].got != pins[i].want) {
      print_message("layout changed: %s is %zu, the 0.1 ABI says %zu\n", pins[i].name,
                    pins[i].got, pins[i].want);
      bad = 1;
    }
  print_message("%zu sizes/offsets checked against the pinned 0.1 layout\n",
                sizeof pins / sizeof pins[0]);
  assert_false(bad);
}

/* ---- 3. init with older / newer sizes -------------------------------------------------------- */

/* *_init(ptr, size) writes nothing beyond `size` bytes (an older caller's struct is smaller);
 * with a newer caller's larger size, the bytes it does not know are left alone or zeroed. */
#define CHECK_INIT_BOUNDED(T, init)                                                    \
  do {                                                                                 \
    unsigned char buf[sizeof(T) + 64];                                                 \
    for (uint32_t size_ = 4; size_ <= sizeof(T) + 32; size_ += 4) {                    \
      memset(buf, 0xA5, sizeof buf);                                                   \
      init((T *)(void *)buf, size_);                                                   \
      uint32_t ss;                                                                     \
      memcpy(&ss, buf, 4);                                                             \
      assert_int_equal(ss, size_);                                                     \
      for (size_t k = size_; k < sizeof buf; k++)                                      \
        if (buf[k] != 0xA5) fail_msg(#init "(size %u) wrote byte %zu", size_, k);      \
      for (size_t k = sizeof(T); k < size_; k++)                                       \
        if (buf[k] != 0xA5 && buf[k] != 0)                                             \
          fail_msg(#init "(size %u) wrote %d into unknown byte %zu", size_, buf[k], k); \
    }                                                                                  \
  } while (0)

static void test_init_writes_only_struct_size(void **state) {
  (void)state;
  CHECK_INIT_BOUNDED(cosy_engine_config, cosy_engine_config_init);
  CHECK_INIT_BOUNDED(cosy_synth_params, cosy_synth_params_init);
  CHECK_INIT_BOUNDED(cosy_voice_features, cosy_voice_features_init);
  CHECK_INIT_BOUNDED(cosy_engine_stats, cosy_engine_stats_init);
  CHECK_INIT_BOUNDED(cosy_request_stats, cosy_request_stats_init);
  CHECK_INIT_BOUNDED(cosy_text_mark, cosy_text_mark_init);
  /* a newer caller's appended field is not touched by this (older) library's init: a caller
   * must zero its struct (= {0} or memset) before *_init, as every example here does */
  cosy_synth_params_newer n;
  memset(&n, 0, sizeof n);
  cosy_synth_params_init(&n.v01, sizeof n);
  assert_int_equal(n.v01.struct_size, sizeof n);
  assert_true(n.appended == 0);
  cosy_engine_config_init(NULL, sizeof(cosy_engine_config)); /* NULL is a no-op */
}

/* ---- 2./3. model-free: engine config and synthesis parameters ------------------------------- */

static void test_engine_config_sizes(void **state) {
  (void)state;
  cosy_engine *e = (cosy_engine *)0x1;
  cosy_engine_config_newer n;
  memset(&n, 0, sizeof n);
  cosy_engine_config_init(&n.v01, sizeof n);
  n.v01.device = COSY_DEVICE_CPU;
  /* model_path left NULL: the struct is accepted and the call proceeds to the path check */
  assert_int_equal(cosy_engine_create(&n.v01, &e), COSY_ERR_INVALID_ARG);
  assert_null(e);
  assert_non_null(strstr(cosy_last_error(), "model_path"));

  n.appended = 1;
  assert_int_equal(cosy_engine_create(&n.v01, &e), COSY_ERR_STRUCT_SIZE);
  print_message("newer caller, non-zero appended field: %s\n", cosy_last_error());
  assert_non_null(strstr(cosy_last_error(), "non-zero"));
  n.appended = (uint64_t)1 << 63; /* the last byte counts too */
  assert_int_equal(cosy_engine_create(&n.v01, &e), COSY_ERR_STRUCT_SIZE);

  cosy_engine_config c;
  /* a 0.1 caller (56 bytes) is served: the appended fields read as 0 (defaults) */
  cosy_engine_config_init(&c, 56);
  c.device = COSY_DEVICE_CPU;
  assert_int_equal(cosy_engine_create(&c, &e), COSY_ERR_INVALID_ARG); /* no model_path */
  assert_non_null(strstr(cosy_last_error(), "model_path"));
  cosy_engine_config_init(&c, 56 - 8); /* smaller than the first version */
  c.device = COSY_DEVICE_CPU;
  assert_int_equal(cosy_engine_create(&c, &e), COSY_ERR_STRUCT_SIZE);
  print_message("older caller (struct_size %d): %s\n", 56 - 8, cosy_last_error());
  c.struct_size = 0;
  assert_int_equal(cosy_engine_create(&c, &e), COSY_ERR_STRUCT_SIZE);
  c.struct_size = 1u << 30; /* absurd: refused before reading anything beyond the struct */
  assert_int_equal(cosy_engine_create(&c, &e), COSY_ERR_STRUCT_SIZE);
}

static void test_synth_params_sizes(void **state) {
  (void)state;
  cosy_synth_params plain, ref, got;
  cosy_synth_params_init(&plain, sizeof plain);
  plain.seed = 42;
  plain.top_k = 7;
  plain.max_tokens = 33;
  assert_int_equal(params_resolve(&plain, &ref), COSY_OK); /* defaults filled: the reference */

  cosy_synth_params_newer n;
  memset(&n, 0, sizeof n);
  cosy_synth_params_init(&n.v01, sizeof n);
  n.v01.seed = 42;
  n.v01.top_k = 7;
  n.v01.max_tokens = 33;
  assert_int_equal(params_resolve(&n.v01, &got), COSY_OK);
  got.struct_size = ref.struct_size;
  assert_memory_equal(&got, &ref, sizeof ref);

  n.appended = 0x100;
  assert_int_equal(params_resolve(&n.v01, &got), COSY_ERR_STRUCT_SIZE);
  assert_non_null(strstr(cosy_last_error(), "cosy_synth_params"));

  cosy_synth_params older;
  cosy_synth_params_init(&older, sizeof older - 4);
  assert_int_equal(params_resolve(&older, &got), COSY_ERR_STRUCT_SIZE);
  assert_int_equal(params_resolve(NULL, &got), COSY_OK); /* NULL = defaults */
}

/* A 0.1 caller against a later library whose struct grew: simulated with the library's copy-in
 * and a "0.2" struct (the 0.1 one plus a new knob). */
static void test_older_caller_simulated(void **state) {
  (void)state;
  typedef struct {
    cosy_synth_params v01;
    int32_t new_knob;
    int32_t new_knob2;
  } params_v02;
  cosy_synth_params caller;
  cosy_synth_params_init(&caller, sizeof caller);
  caller.seed = 99;
  caller.temperature = 0.5f;
  params_v02 lib;
  memset(&lib, 0x5A, sizeof lib);
  assert_int_equal(cosy_struct_in(&lib, sizeof lib, &caller, sizeof(cosy_synth_params), "v02"),
                   COSY_OK);
  assert_int_equal(lib.v01.struct_size, sizeof caller);
  assert_true(lib.v01.seed == 99 && lib.v01.temperature == 0.5f);
  assert_int_equal(lib.new_knob, 0); /* unknown to the caller: default */
  assert_int_equal(lib.new_knob2, 0);
  /* and the same library refuses a caller below the first published size */
  caller.struct_size = sizeof caller - 8;
  assert_int_equal(cosy_struct_in(&lib, sizeof lib, &caller, sizeof(cosy_synth_params), "v02"),
                   COSY_ERR_STRUCT_SIZE);
}

/* ---- 2./3. with the model: voice features, both stats structs, and working calls ------------- */

typedef struct fx {
  cosy_engine *e;
  cosy_voice *v;
} fx;

static cosy_voice_features synthetic_features(int32_t *tok, float *mel, float *spk) {
  uint32_t s = 12345;
  for (int i = 0; i < 30; i++) tok[i] = (int32_t)((s = s * 1103515245u + 12345u) >> 8) % 6561;
  for (int i = 0; i < 60 * 80; i++) mel[i] = -6.0f + (float)((i * 37) % 97) / 24.0f;
  for (int i = 0; i < 192; i++) spk[i] = (float)((i * 53) % 41) / 20.0f - 1.0f;
  cosy_voice_features f;
  cosy_voice_features_init(&f, sizeof f);
  f.prompt_text = "A synthetic prompt.<|endofprompt|>";
  f.speech_tokens = tok;
  f.n_speech_tokens = 30;
  f.mel = mel;
  f.n_mel_frames = 60;
  f.speaker_embedding = spk;
  return f;
}

static int setup(void **state) {
  static fx f;
  static int32_t tok[30];
  static float mel[60 * 80], spk[192];
  memset(&f, 0, sizeof f);
  *state = &f;
  const char *model = tu_small_model();
  if (!model) return 0;
  /* a newer caller's config (appended field zero) creates a working engine */
  cosy_engine_config_newer n;
  memset(&n, 0, sizeof n);
  cosy_engine_config_init(&n.v01, sizeof n);
  n.v01.model_path = model;
  n.v01.device = COSY_DEVICE_CPU;
  if (cosy_engine_create(&n.v01, &f.e)) {
    fprintf(stderr, "engine: %s\n", cosy_last_error());
    return -1;
  }
  cosy_voice_features vf = synthetic_features(tok, mel, spk);
  if (cosy_voice_from_features(f.e, &vf, &f.v)) {
    fprintf(stderr, "voice: %s\n", cosy_last_error());
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  fx *f = (fx *)*state;
  cosy_voice_release(f->v);
  cosy_engine_destroy(f->e);
  return 0;
}

static void test_voice_features_sizes(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small test model absent (make build/test/small-f32.gguf)");
  static int32_t tok[30];
  static float mel[60 * 80], spk[192];
  cosy_voice_features_newer n;
  memset(&n, 0, sizeof n);
  n.v01 = synthetic_features(tok, mel, spk);
  n.v01.struct_size = sizeof n;
  cosy_voice *v = NULL;
  assert_int_equal(cosy_voice_from_features(f->e, &n.v01, &v), COSY_OK);
  cosy_voice_release(v);
  n.appended = 7;
  assert_int_equal(cosy_voice_from_features(f->e, &n.v01, &v), COSY_ERR_STRUCT_SIZE);
  assert_null(v);
  n.appended = 0;
  n.v01.struct_size = sizeof(cosy_voice_features) - 8;
  assert_int_equal(cosy_voice_from_features(f->e, &n.v01, &v), COSY_ERR_STRUCT_SIZE);
}

static void test_synth_params_in_synthesis(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small test model absent (make build/test/small-f32.gguf)");
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.seed = 5;
  p.max_tokens = 30;
  float *a = NULL, *b = NULL;
  int64_t na = 0, nb = 0;
  assert_int_equal(cosy_synthesize(f->e, f->v, "Hello there.", &p, &a, &na), COSY_OK);
  cosy_synth_params_newer n;
  memset(&n, 0, sizeof n);
  cosy_synth_params_init(&n.v01, sizeof n);
  n.v01.seed = 5;
  n.v01.max_tokens = 30;
  assert_int_equal(cosy_synthesize(f->e, f->v, "Hello there.", &n.v01, &b, &nb), COSY_OK);
  assert_true(na > 0);
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, (size_t)na * sizeof *a); /* same audio as the 0.1 struct */
  cosy_free(a);
  cosy_free(b);
  n.appended = 1;
  assert_int_equal(cosy_synthesize(f->e, f->v, "Hello there.", &n.v01, &b, &nb),
                   COSY_ERR_STRUCT_SIZE);
  cosy_request *r = NULL;
  assert_int_equal(cosy_request_submit(f->e, f->v, "Hello.", &n.v01, NULL, NULL, &r),
                   COSY_ERR_STRUCT_SIZE);
  assert_null(r);
}

static void test_engine_stats_sizes(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small test model absent (make build/test/small-f32.gguf)");
  cosy_engine_stats ref;
  cosy_engine_stats_init(&ref, sizeof ref);
  assert_int_equal(cosy_engine_get_stats(f->e, &ref), COSY_OK);
  assert_true(ref.weights_bytes > 0);

  cosy_engine_stats_newer n;
  memset(&n, 0, sizeof n);
  cosy_engine_stats_init(&n.v01, sizeof n);
  assert_int_equal(cosy_engine_get_stats(f->e, &n.v01), COSY_OK);
  assert_int_equal(n.v01.struct_size, sizeof n); /* the caller's size is kept */
  assert_true(n.v01.weights_bytes == ref.weights_bytes);
  assert_true(n.appended == 0); /* not written: this library does not know it */

  n.appended = 3;
  assert_int_equal(cosy_engine_get_stats(f->e, &n.v01), COSY_ERR_STRUCT_SIZE);
  cosy_engine_stats older;
  cosy_engine_stats_init(&older, 72); /* a 0.1 caller: served, nothing written past 72 bytes */
  memset((char *)&older + 72, 0x5A, sizeof older - 72);
  assert_int_equal(cosy_engine_get_stats(f->e, &older), COSY_OK);
  assert_true(older.weights_bytes == ref.weights_bytes);
  for (size_t k = 72; k < sizeof older; k++) assert_int_equal(((unsigned char *)&older)[k], 0x5A);
  cosy_engine_stats_init(&older, 72 - 8); /* smaller than the first version */
  assert_int_equal(cosy_engine_get_stats(f->e, &older), COSY_ERR_STRUCT_SIZE);
}

static void test_request_stats_sizes(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small test model absent (make build/test/small-f32.gguf)");
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.seed = 3;
  p.max_tokens = 30;
  cosy_request *r;
  assert_int_equal(cosy_request_submit(f->e, f->v, "Hello.", &p, NULL, NULL, &r), COSY_OK);
  float buf[4096];
  int64_t got, total = 0;
  while (cosy_request_read(r, buf, 4096, &got, -1) == COSY_OK && got > 0) total += got;
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);

  cosy_request_stats_newer n;
  memset(&n, 0, sizeof n);
  cosy_request_stats_init(&n.v01, sizeof n);
  assert_int_equal(cosy_request_get_stats(r, &n.v01), COSY_OK);
  assert_int_equal(n.v01.struct_size, sizeof n);
  assert_int_equal(n.v01.done, 1);
  assert_true(n.v01.n_samples == total && total > 0);
  assert_true(n.appended == 0);

  n.appended = 9;
  assert_int_equal(cosy_request_get_stats(r, &n.v01), COSY_ERR_STRUCT_SIZE);
  cosy_request_stats older;
  cosy_request_stats_init(&older, sizeof older - 8);
  assert_int_equal(cosy_request_get_stats(r, &older), COSY_ERR_STRUCT_SIZE);
  cosy_request_release(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layout_pinned),
      cmocka_unit_test(test_init_writes_only_struct_size),
      cmocka_unit_test(test_engine_config_sizes),
      cmocka_unit_test(test_synth_params_sizes),
      cmocka_unit_test(test_older_caller_simulated),
      cmocka_unit_test(test_voice_features_sizes),
      cmocka_unit_test(test_synth_params_in_synthesis),
      cmocka_unit_test(test_engine_stats_sizes),
      cmocka_unit_test(test_request_stats_sizes),
  };
  return cmocka_run_group_tests_name("abi_compat", tests, setup, teardown);
}
