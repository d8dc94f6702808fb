/* test_synth.c - end-to-end synthesis on the CPU path with the small golden model and the golden
 * voice (prompt text, 60 prompt speech tokens, the real prompt mel, a speaker embedding):
 *   - blocking == push streaming == pull streaming, sample for sample, for one seed (all three
 *     modes), and the streaming run really delivers several chunks;
 *   - a different seed gives different audio; the same seed gives the same audio;
 *   - first_chunk_tokens moves the chunk boundaries (a first chunk shorter than a block) and
 *     leaves the audio identical; the default (auto) gives the short first chunk at light load
 *     and the official one within 3 s of a burst beyond first_chunk_wait_max;
 *   - output resampling (16 kHz) matches the native output resampled in one go;
 *   - cancel from the callback and from another thread ends the request with
 *     COSY_ERR_CANCELLED within one step, and everything is freed (run under ASan in CI);
 *   - many requests at once on a multi-worker engine each equal their serial result;
 *   - request and engine statistics read while a push request runs grow monotonically and end
 *     equal to what was delivered (the data-race check of `make test-tsan`);
 *   - COSY_SCHED_MAX_STREAMS=1: three requests at once run one at a time (at most one active,
 *     the others queued, polled), each with the audio of the same request alone. */
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
#include <time.h>

#include <cmocka.h>

#include "audio.h"
#include "cosyvoice.h"
#include "testutil.h"

typedef struct fx {
  cosy_engine *e;
  cosy_voice *v;
} fx;

/* long enough that min_len (2 per text token) forces several streaming chunks */
static const char *TEXT =
    "The quick brown fox jumps over the lazy dog while seven wizards quietly hum a cheerful "
    "tune, and the morning train was late again, so she walked along the river instead of "
    "waiting on the cold platform.";

/* the golden voice (testutil) */
static cosy_voice *golden_voice(cosy_engine *e) {
  return tu_golden_voice(e, "You are a helpful assistant.<|endofprompt|>希望你以后能够做的比我还好呦。");
}

/* an engine config for the small model on the CPU with max_active requests at once */
static void cpu_config(cosy_engine_config *c, int max_active) {
  cosy_engine_config_init(c, sizeof *c);
  c->model_path = tu_small_model();
  c->device = COSY_DEVICE_CPU;
  c->max_active = max_active;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int setup(void **state) {
  static fx f;
  memset(&f, 0, sizeof f);
  *state = &f;
  if (!tu_small_model() || !tu_shared_dir()) return 0;
  cosy_engine_config c;
  cpu_config(&c, 3);
  if (cosy_engine_create(&c, &f.e)) {
    fprintf(stderr, "engine: %s\n", cosy_last_error());
    return -1;
  }
  f.v = golden_voice(f.e);
  return f.v ? 0 : -1;
}

static int teardown(void **state) {
  fx *f = (fx *)*state;
  cosy_voice_release(f->v);
  cosy_engine_destroy(f->e);
  return 0;
}

typedef struct pushbuf {
  float *pcm;
  int64_t n, cap;
  int chunks, last_seen, cancel_after, bad_offset;
  int32_t rate;
  int64_t sizes[32]; /* the first chunks' sample counts */
} pushbuf;

static int32_t on_chunk(void *user, const cosy_chunk *c) {
  pushbuf *b = (pushbuf *)user;
  if (c->offset != b->n) b->bad_offset = 1;
  if (b->n + c->n_samples > b->cap) {
    b->cap = (b->n + c->n_samples) * 2 + 1024;
    b->pcm = (float *)realloc(b->pcm, (size_t)b->cap * sizeof *b->pcm);
  }
  memcpy(b->pcm + b->n, c->pcm, (size_t)c->n_samples * sizeof *c->pcm);
  b->n += c->n_samples;
  if (b->chunks < 32) b->sizes[b->chunks] = c->n_samples;
  b->chunks++;
  b->rate = c->sample_rate;
  if (c->flags & COSY_CHUNK_LAST) b->last_seen = 1;
  return b->cancel_after && b->chunks >= b->cancel_after;
}

static void params(cosy_synth_params *p, int mode, uint64_t seed) {
  cosy_synth_params_init(p, sizeof *p);
  p->mode = mode;
  p->seed = seed;
  p->max_tokens = 140; /* enough for several chunks (25+15, 50, 100...) and quick */
  if (mode == COSY_MODE_INSTRUCT) p->instruct_text = "Speak slowly.";
}

static void check_modes(fx *f, int mode) {
  cosy_synth_params p;
  params(&p, mode, 1234);
  float *blk = NULL;
  int64_t n_blk = 0;
  cosy_status st = cosy_synthesize(f->e, f->v, TEXT, &p, &blk, &n_blk);
  if (st) fail_msg("synthesize: %s", cosy_last_error());
  assert_true(n_blk > 0);
  int finite = 1;
  double energy = 0;
  for (int64_t i = 0; i < n_blk; i++) {
    finite &= isfinite(blk[i]) && fabsf(blk[i]) <= 0.99f;
    energy += (double)blk[i] * blk[i];
  }
  assert_true(finite);
  assert_true(energy > 0);

  /* push streaming */
  pushbuf b = {0};
  cosy_request *r;
  assert_int_equal(cosy_request_submit(f->e, f->v, TEXT, &p, on_chunk, &b, &r), COSY_OK);
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  cosy_request_stats rs;
  cosy_request_stats_init(&rs, sizeof rs);
  assert_int_equal(cosy_request_get_stats(r, &rs), COSY_OK);
  cosy_request_release(r);
  print_message("mode %d: %lld samples, %d chunks, %d speech tokens, ttfb %.3f s, total %.3f s\n",
                mode, (long long)b.n, b.chunks, rs.n_speech_tokens, rs.ttfb_s, rs.total_s);
  assert_true(b.last_seen);
  assert_false(b.bad_offset);
  assert_int_equal(b.rate, 24000);
  assert_true(b.chunks >= 3);
  assert_int_equal(b.n, n_blk);
  assert_memory_equal(b.pcm, blk, (size_t)n_blk * sizeof *blk);

  /* pull streaming with a small buffer */
  assert_int_equal(cosy_request_submit(f->e, f->v, TEXT, &p, NULL, NULL, &r), COSY_OK);
  float *pulled = (float *)malloc((size_t)n_blk * sizeof *pulled + 4096);
  int64_t n_pull = 0, got = 0;
  float tmp[997];
  for (;;) {
    st = cosy_request_read(r, tmp, 997, &got, -1);
    assert_int_equal(st, COSY_OK);
    if (got == 0) break;
    assert_true(n_pull + got <= n_blk);
    memcpy(pulled + n_pull, tmp, (size_t)got * sizeof *tmp);
    n_pull += got;
  }
  assert_int_equal(cosy_request_wait(r, 0), COSY_OK);
  cosy_request_release(r);
  assert_int_equal(n_pull, n_blk);
  assert_memory_equal(pulled, blk, (size_t)n_blk * sizeof *blk);
  free(pulled);
  free(b.pcm);
  cosy_free(blk);
}

static void test_zero_shot(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  check_modes(f, COSY_MODE_ZERO_SHOT);
}
static void test_cross_lingual(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  check_modes(f, COSY_MODE_CROSS_LINGUAL);
}
static void test_instruct(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  check_modes(f, COSY_MODE_INSTRUCT);
}

static void test_seeds(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  cosy_synth_params p;
  params(&p, COSY_MODE_ZERO_SHOT, 5);
  p.max_tokens = 40;
  float *a, *b, *c;
  int64_t na, nb, nc;
  assert_int_equal(cosy_synthesize(f->e, f->v, TEXT, &p, &a, &na), COSY_OK);
  assert_int_equal(cosy_synthesize(f->e, f->v, TEXT, &p, &b, &nb), COSY_OK);
  p.seed = 6;
  assert_int_equal(cosy_synthesize(f->e, f->v, TEXT, &p, &c, &nc), COSY_OK);
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, (size_t)na * sizeof *a);
  assert_true(na != nc || memcmp(a, c, (size_t)na * sizeof *a) != 0);
  cosy_free(a);
  cosy_free(b);
  cosy_free(c);
}

/* COSY_SYNTH_ONE_SHOT: the tokens of the streaming schedule (same seed), one flow call with full
 * attention and one vocoder call: one chunk, as long as the streamed utterance, different audio
 * (block-causal chunks with look-ahead vs full attention), and the same blocking or pushed */
static void test_one_shot(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  cosy_synth_params p;
  params(&p, COSY_MODE_ZERO_SHOT, 4321);
  float *str = NULL, *one = NULL;
  int64_t n_str = 0, n_one = 0;
  assert_int_equal(cosy_synthesize(f->e, f->v, TEXT, &p, &str, &n_str), COSY_OK);
  p.flags = COSY_SYNTH_ONE_SHOT;
  assert_int_equal(cosy_synthesize(f->e, f->v, TEXT, &p, &one, &n_one), COSY_OK);
  assert_int_equal(n_one, n_str);
  assert_true(memcmp(one, str, (size_t)n_one * sizeof *one) != 0);
  pushbuf b = {0};
  cosy_request *r;
  assert_int_equal(cosy_request_submit(f->e, f->v, TEXT, &p, on_chunk, &b, &r), COSY_OK);
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  cosy_request_release(r);
  print_message("one shot: %lld samples in %d chunk(s); rel L2 to the streaming schedule %.3g\n",
                (long long)b.n, b.chunks, tu_rel_l2(one, str, (size_t)n_one));
  assert_int_equal(b.chunks, 1);
  assert_true(b.last_seen);
  assert_int_equal(b.n, n_one);
  assert_memory_equal(b.pcm, one, (size_t)n_one * sizeof *one);
  free(b.pcm);
  cosy_free(str);
  cosy_free(one);
}

/* first_chunk_tokens changes where chunks end, never the audio (docs/scheduler.md section 2):
 * the flow's blocks and the vocoder's state make every block-aligned schedule give the same
 * samples. The golden voice has 60 prompt tokens, so the prompt's last block lacks 15 tokens:
 * first_chunk_tokens 25 (the default) -> chunks of 40, 50, ... tokens; 5 -> 15, 25, 50, ...
 * (one chunk more, the first one 25 tokens = 24000 samples shorter); 30 -> 40, 100, ... (the
 * later hops double from first_chunk_tokens rounded up to whole blocks). Each
 * non-final chunk of h tokens gives 2 h mel frames, less the vocoder's 8-frame look-ahead on the
 * first: (2 h - 8) * 480 samples, then 2 h * 480. */
static void test_chunk_schedule(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  cosy_synth_params p;
  params(&p, COSY_MODE_ZERO_SHOT, 99);
  const int firsts[3] = {25, 5, 30};
  pushbuf b[3];
  memset(b, 0, sizeof b);
  for (int k = 0; k < 3; k++) {
    p.first_chunk_tokens = firsts[k];
    cosy_request *r;
    assert_int_equal(cosy_request_submit(f->e, f->v, TEXT, &p, on_chunk, &b[k], &r), COSY_OK);
    assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
    cosy_request_release(r);
    print_message("first_chunk_tokens %d: %d chunks, %lld samples, first %lld, second %lld\n",
                  firsts[k], b[k].chunks, (long long)b[k].n, (long long)b[k].sizes[0],
                  (long long)b[k].sizes[1]);
    assert_true(b[k].last_seen);
    assert_false(b[k].bad_offset);
  }
  assert_true(b[0].chunks >= 3); /* the default schedule had a non-final chunk */
  assert_int_equal(b[0].sizes[0], (2 * 40 - 8) * 480);
  assert_int_equal(b[1].chunks, b[0].chunks + 1);
  assert_int_equal(b[1].sizes[0], (2 * 15 - 8) * 480);
  assert_int_equal(b[1].sizes[1], 2 * 25 * 480);
  assert_int_equal(b[1].sizes[2], b[0].sizes[1]);
  assert_int_equal(b[2].sizes[0], b[0].sizes[0]);
  for (int k = 1; k < 3; k++) {
    assert_int_equal(b[k].n, b[0].n);
    assert_memory_equal(b[k].pcm, b[0].pcm, (size_t)b[0].n * sizeof *b[0].pcm);
  }
  for (int k = 0; k < 3; k++) free(b[k].pcm);
}

/* first_chunk_tokens 0 (auto) on an engine with first_chunk_wait_max 4: a lone request gets the
 * short first chunk (15 tokens: (2 * 15 - 8) * 480 samples); the same request submitted with a
 * burst of 6, and alone within 3 s of that burst (an admission saw more than 4 requests), gets
 * the official one (40 tokens); all three give the same samples (same seed) */
static void test_auto_first_chunk(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  cosy_engine_config c;
  cpu_config(&c, 8);
  c.first_chunk_wait_max = 4;
  cosy_engine *e = NULL;
  if (cosy_engine_create(&c, &e)) fail_msg("engine: %s", cosy_last_error());
  cosy_voice *v = golden_voice(e);
  assert_non_null(v);
  cosy_synth_params p;
  params(&p, COSY_MODE_ZERO_SHOT, 31);
  p.max_tokens = p.min_tokens = 60;
  pushbuf lone = {0}, after = {0};
  cosy_request *r;
  assert_int_equal(cosy_request_submit(e, v, TEXT, &p, on_chunk, &lone, &r), COSY_OK);
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  cosy_request_release(r);
  /* a burst of 6 short requests and, submitted with them, the same request as the lone one: at
   * its admission more than 4 are active or queued, so it gets the official first chunk */
  cosy_synth_params q = p;
  q.max_tokens = q.min_tokens = 20;
  cosy_request *burst[6];
  pushbuf with = {0};
  const double t0 = now_s();
  for (int i = 0; i < 6; i++) {
    q.seed = 100 + (uint64_t)i;
    assert_int_equal(cosy_request_submit(e, v, TEXT, &q, NULL, NULL, &burst[i]), COSY_OK);
  }
  assert_int_equal(cosy_request_submit(e, v, TEXT, &p, on_chunk, &with, &r), COSY_OK);
  for (int i = 0; i < 6; i++) {
    assert_int_equal(cosy_request_wait(burst[i], -1), COSY_OK);
    cosy_request_release(burst[i]);
  }
  const double burst_s = now_s() - t0;
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  cosy_request_release(r);
  /* a lone request after the burst: still within 3 s of its admissions (unless this run is too
   * slow to tell, e.g. under a sanitizer), so the official first chunk too */
  assert_int_equal(cosy_request_submit(e, v, TEXT, &p, on_chunk, &after, &r), COSY_OK);
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  cosy_request_release(r);
  print_message("auto first chunk: alone %lld samples first (%d chunks), with a burst %lld (%d), "
                "after it %lld (%d; burst %.2f s)\n", (long long)lone.sizes[0], lone.chunks,
                (long long)with.sizes[0], with.chunks, (long long)after.sizes[0], after.chunks,
                burst_s);
  assert_int_equal(lone.sizes[0], (2 * 15 - 8) * 480);
  assert_int_equal(with.sizes[0], (2 * 40 - 8) * 480);
  if (burst_s < 2.0)
    assert_int_equal(after.sizes[0], (2 * 40 - 8) * 480);
  else
    print_message("(the burst took %.2f s: the 3 s window is not checked)\n", burst_s);
  assert_int_equal(lone.n, with.n);
  assert_memory_equal(lone.pcm, with.pcm, (size_t)lone.n * sizeof *lone.pcm);
  assert_int_equal(lone.n, after.n);
  assert_memory_equal(lone.pcm, after.pcm, (size_t)lone.n * sizeof *lone.pcm);
  free(lone.pcm);
  free(with.pcm);
  free(after.pcm);
  cosy_voice_release(v);
  cosy_engine_destroy(e);
}

static void test_output_rate(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  cosy_synth_params p;
  params(&p, COSY_MODE_ZERO_SHOT, 77);
  float *nat, *low;
  int64_t n_nat, n_low;
  assert_int_equal(cosy_synthesize(f->e, f->v, TEXT, &p, &nat, &n_nat), COSY_OK);
  p.sample_rate = 16000;
  assert_int_equal(cosy_synthesize(f->e, f->v, TEXT, &p, &low, &n_low), COSY_OK);
  float *ref;
  int64_t n_ref;
  assert_int_equal(cosy_resample(nat, n_nat, 24000, 16000, &ref, &n_ref), COSY_OK);
  assert_int_equal(n_low, n_ref);
  double err = tu_rel_l2(low, ref, (size_t)n_ref);
  print_message("16 kHz streamed output vs one-shot resampling: rel L2 %.3g (tolerance 1e-6)\n", err);
  assert_true(err <= 1e-6);
  free(ref);
  cosy_free(nat);
  cosy_free(low);
}

static void test_cancel_from_callback(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  cosy_synth_params p;
  params(&p, COSY_MODE_ZERO_SHOT, 9);
  pushbuf b = {0};
  b.cancel_after = 1;
  cosy_request *r;
  assert_int_equal(cosy_request_submit(f->e, f->v, TEXT, &p, on_chunk, &b, &r), COSY_OK);
  assert_int_equal(cosy_request_wait(r, -1), COSY_ERR_CANCELLED);
  assert_int_equal(b.chunks, 1);
  assert_false(b.last_seen);
  cosy_request_release(r);
  free(b.pcm);
}

static void test_cancel_from_thread(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  cosy_synth_params p;
  params(&p, COSY_MODE_ZERO_SHOT, 10);
  p.max_tokens = 400;
  cosy_request *r;
  assert_int_equal(cosy_request_submit(f->e, f->v, TEXT, &p, NULL, NULL, &r), COSY_OK);
  float tmp[256];
  int64_t got;
  /* wait for the first audio, then cancel */
  assert_int_equal(cosy_request_read(r, tmp, 256, &got, -1), COSY_OK);
  assert_true(got > 0);
  cosy_request_stats rs;
  cosy_request_stats_init(&rs, sizeof rs);
  cosy_request_cancel(r);
  const double t0 = now_s();
  cosy_status st = cosy_request_wait(r, 60000);
  const double dt = now_s() - t0;
  assert_int_equal(cosy_request_get_stats(r, &rs), COSY_OK);
  print_message("cancel honoured after %.3f s, at %d speech tokens of at most 400\n", dt,
                rs.n_speech_tokens);
  assert_true(st == COSY_ERR_CANCELLED || st == COSY_OK);
  assert_true(rs.n_speech_tokens < 400);
  cosy_request_cancel(r); /* idempotent */
  cosy_request_release(r);
  /* released while queued or running: must not leak or crash */
  assert_int_equal(cosy_request_submit(f->e, f->v, TEXT, &p, NULL, NULL, &r), COSY_OK);
  cosy_request_release(r);
}

/* max_queued counts only requests that wait: with max_active 2 and max_queued 1, three requests
 * submitted back to back into an idle engine are all taken (two take the free active slots, one
 * waits), whether or not the LLM thread has admitted the earlier ones yet, and a fourth is
 * refused with COSY_ERR_QUEUE_FULL while the three still run. */
static void test_queue_room(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  cosy_engine_config c;
  cpu_config(&c, 2);
  c.max_queued = 1;
  cosy_engine *e = NULL;
  assert_int_equal(cosy_engine_create(&c, &e), COSY_OK);
  cosy_voice *v = golden_voice(e);
  assert_non_null(v);
  cosy_synth_params p;
  params(&p, COSY_MODE_ZERO_SHOT, 7);
  p.min_tokens = 300; /* long enough to be running still when the fourth is submitted */
  p.max_tokens = 400;
  cosy_request *r[4] = {NULL};
  for (int i = 0; i < 3; i++) {
    cosy_status st = cosy_request_submit(e, v, TEXT, &p, NULL, NULL, &r[i]);
    if (st) print_message("submit %d: %s\n", i, cosy_last_error());
    assert_int_equal(st, COSY_OK);
  }
  cosy_status st = cosy_request_submit(e, v, TEXT, &p, NULL, NULL, &r[3]);
  print_message("fourth submit: %s (%s)\n", cosy_status_str(st), st ? cosy_last_error() : "");
  assert_int_equal(st, COSY_ERR_QUEUE_FULL);
  for (int i = 0; i < 3; i++) {
    cosy_request_cancel(r[i]);
    cosy_request_release(r[i]);
  }
  cosy_voice_release(v);
  cosy_engine_destroy(e);
}

/* Progress is read while the request runs (cosy_request_get_stats and cosy_engine_get_stats
 * from the caller's thread, the push callback on the engine's): the snapshots only grow, and the
 * last one equals the request's end. Under `make test-tsan` this is the data-race check of the
 * statistics the worker writes. */
typedef struct pushed {
  int64_t n;
  int chunks;
} pushed;

static int32_t count_chunk(void *user, const cosy_chunk *c) {
  pushed *p = (pushed *)user;
  p->n += c->n_samples;
  p->chunks++;
  return 0;
}

static void test_stats_while_running(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  cosy_synth_params p;
  params(&p, COSY_MODE_ZERO_SHOT, 77);
  p.max_tokens = 45;
  pushed got = {0, 0};
  cosy_request *r;
  assert_int_equal(cosy_request_submit(f->e, f->v, TEXT, &p, count_chunk, &got, &r), COSY_OK);
  cosy_request_stats rs, prev;
  cosy_request_stats_init(&prev, sizeof prev);
  int polls = 0;
  for (;;) {
    cosy_request_stats_init(&rs, sizeof rs);
    assert_int_equal(cosy_request_get_stats(r, &rs), COSY_OK);
    cosy_engine_stats es;
    cosy_engine_stats_init(&es, sizeof es);
    assert_int_equal(cosy_engine_get_stats(f->e, &es), COSY_OK);
    assert_true(rs.n_samples >= prev.n_samples && rs.n_chunks >= prev.n_chunks &&
                rs.n_speech_tokens >= prev.n_speech_tokens);
    assert_true(rs.ttfb_s >= 0 && (rs.n_samples == 0 || rs.ttfb_s > 0));
    prev = rs;
    polls++;
    if (rs.done) break;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  assert_int_equal(rs.n_samples, got.n);
  assert_int_equal(rs.n_chunks, got.chunks);
  print_message("%d snapshots while running; %lld samples in %d chunks\n", polls,
                (long long)got.n, got.chunks);
  cosy_request_release(r);
}

/* one zero-shot request of TEXT on engine e with voice v, on its own thread */
typedef struct job {
  cosy_engine *e;
  cosy_voice *v;
  uint64_t seed;
  int max_tokens;
  float *pcm;
  int64_t n;
  cosy_status st;
} job;

static void *run_job(void *arg) {
  job *j = (job *)arg;
  cosy_synth_params p;
  params(&p, COSY_MODE_ZERO_SHOT, j->seed);
  p.max_tokens = j->max_tokens;
  j->st = cosy_synthesize(j->e, j->v, TEXT, &p, &j->pcm, &j->n);
  return NULL;
}

/* nj requests (seeds seed0, seed0 + 1, ...) at once on engine e with voice v; each one's audio
 * must equal the same request made alone on the fixture's engine */
enum { MAX_JOBS = 8 };
static void concurrent_equal_alone(fx *f, cosy_engine *e, cosy_voice *v, int nj, uint64_t seed0,
                                   int max_tokens) {
  job jobs[MAX_JOBS];
  pthread_t th[MAX_JOBS];
  assert_true(nj <= MAX_JOBS);
  for (int i = 0; i < nj; i++) {
    jobs[i] = (job){e, v, seed0 + (uint64_t)i, max_tokens, NULL, 0, COSY_OK};
    pthread_create(&th[i], NULL, run_job, &jobs[i]);
  }
  for (int i = 0; i < nj; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < nj; i++) {
    assert_int_equal(jobs[i].st, COSY_OK);
    job alone = {f->e, f->v, jobs[i].seed, max_tokens, NULL, 0, COSY_OK};
    run_job(&alone);
    assert_int_equal(alone.st, COSY_OK);
    assert_int_equal(alone.n, jobs[i].n);
    assert_memory_equal(alone.pcm, jobs[i].pcm, (size_t)alone.n * sizeof(float));
    cosy_free(alone.pcm);
    cosy_free(jobs[i].pcm);
  }
}

static void test_concurrent(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  concurrent_equal_alone(f, f->e, f->v, 5, 100, 45);
}

/* engine statistics polled on a thread of its own: the most active and queued requests seen */
typedef struct poller {
  cosy_engine *e;
  int stop; /* atomic */
  int active_max, queued_max, polls;
} poller;

static void *poll_main(void *arg) {
  poller *p = (poller *)arg;
  while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
    cosy_engine_stats st;
    cosy_engine_stats_init(&st, sizeof st);
    if (cosy_engine_get_stats(p->e, &st) == COSY_OK) {
      if (st.active > p->active_max) p->active_max = st.active;
      if (st.queued > p->queued_max) p->queued_max = st.queued;
      p->polls++;
    }
    const struct timespec ts = {0, 500000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

/* a CPU engine of 4 active requests created with the knob `name` set to `value` (unset again
 * after the engine has read it), and the golden voice on it */
static cosy_engine *knob_engine(const char *name, const char *value, cosy_voice **v) {
  setenv(name, value, 1);
  cosy_engine_config c;
  cpu_config(&c, 4);
  cosy_engine *e = NULL;
  cosy_status st = cosy_engine_create(&c, &e);
  unsetenv(name);
  assert_int_equal(st, COSY_OK);
  *v = golden_voice(e);
  assert_non_null(*v);
  return e;
}

/* COSY_SCHED_MAX_STREAMS=1 (lib/sched_llm.c admit): a new request is admitted only while no
 * request is active in any stage, so three requests at once run one after another; each equals
 * the same request alone (the bound changes timing, never tokens) */
static void test_max_streams(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  cosy_voice *v = NULL;
  cosy_engine *e = knob_engine("COSY_SCHED_MAX_STREAMS", "1", &v);
  poller pl = {e, 0, 0, 0, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, poll_main, &pl), 0);
  concurrent_equal_alone(f, e, v, 3, 700, 40);
  __atomic_store_n(&pl.stop, 1, __ATOMIC_RELEASE);
  pthread_join(th, NULL);
  print_message("COSY_SCHED_MAX_STREAMS=1: %d polls, at most %d active and %d queued\n", pl.polls,
                pl.active_max, pl.queued_max);
  assert_int_equal(pl.active_max, 1);
  assert_true(pl.queued_max >= 1);
  cosy_voice_release(v);
  cosy_engine_destroy(e);
}

/* The flow's page gate (lib/sched_t2w.c flow_gate) on the CPU, with the pool the GPU's flow cache
 * would have simulated by the CPU backend (COSY_TEST_FLOW_PAGES=1: one page). Request A goes
 * alone; once its first chunk has arrived, B and C are submitted: A under way reserves more pages
 * than there are, so the gate holds B's and C's first chunks until A has ended and given its page
 * back: their first audio comes after A's last chunk (an order of callbacks, not of timing;
 * without the gate, COSY_SCHED_FLOW_GATE=0, B's first chunk comes while A still speaks).
 * Each request's audio equals the same request alone (the gate changes when, never what). */
typedef struct gate_req {
  cosy_request *r;
  int *seq;       /* the test's callback counter (atomic) */
  int first, last; /* the counter at the first and the last chunk */
  int chunks;
  float *pcm;
  int64_t n, cap;
} gate_req;

static int32_t gate_chunk(void *user, const cosy_chunk *c) {
  gate_req *g = (gate_req *)user;
  const int k = __atomic_add_fetch(g->seq, 1, __ATOMIC_ACQ_REL);
  if (g->chunks++ == 0) __atomic_store_n(&g->first, k, __ATOMIC_RELEASE);
  if (g->n + c->n_samples > g->cap) {
    g->cap = 2 * (g->n + c->n_samples);
    g->pcm = (float *)realloc(g->pcm, (size_t)g->cap * sizeof(float));
  }
  memcpy(g->pcm + g->n, c->pcm, (size_t)c->n_samples * sizeof(float));
  g->n += c->n_samples;
  if (c->flags & COSY_CHUNK_LAST) __atomic_store_n(&g->last, k, __ATOMIC_RELEASE);
  return 0;
}

static void test_flow_gate(void **state) {
  fx *f = (fx *)*state;
  TU_REQUIRE(f->e, "small model or shared reference data (COSY_SHARED) absent");
  cosy_voice *v = NULL;
  cosy_engine *e = knob_engine("COSY_TEST_FLOW_PAGES", "1", &v);
  int seq = 0;
  gate_req g[3];
  memset(g, 0, sizeof g);
  cosy_synth_params p[3];
  for (int i = 0; i < 3; i++) {
    params(&p[i], COSY_MODE_ZERO_SHOT, 900 + (uint64_t)i);
    /* A: several chunks (25 + 15, 50, 100, the rest), long after B's and C's first chunks would
     * be ready without the gate; B and C: two chunks */
    p[i].min_tokens = p[i].max_tokens = i == 0 ? 220 : 60;
    g[i].seq = &seq;
  }
  assert_int_equal(cosy_request_submit(e, v, TEXT, &p[0], gate_chunk, &g[0], &g[0].r), COSY_OK);
  while (!__atomic_load_n(&g[0].first, __ATOMIC_ACQUIRE)) {
    const struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  for (int i = 1; i < 3; i++)
    assert_int_equal(cosy_request_submit(e, v, TEXT, &p[i], gate_chunk, &g[i], &g[i].r), COSY_OK);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(cosy_request_wait(g[i].r, -1), COSY_OK);
    cosy_request_release(g[i].r);
  }
  print_message("page gate, one page: A's chunks %d..%d, B's first at %d, C's first at %d\n",
                g[0].first, g[0].last, g[1].first, g[2].first);
  assert_true(g[0].last > 0 && g[0].chunks >= 2);
  assert_true(g[1].first > g[0].last);
  assert_true(g[2].first > g[0].last);
  for (int i = 0; i < 3; i++) {
    float *pcm = NULL;
    int64_t n = 0;
    assert_int_equal(cosy_synthesize(f->e, f->v, TEXT, &p[i], &pcm, &n), COSY_OK);
    assert_int_equal(n, g[i].n);
    assert_memory_equal(pcm, g[i].pcm, (size_t)n * sizeof(float));
    cosy_free(pcm);
    free(g[i].pcm);
  }
  cosy_voice_release(v);
  cosy_engine_destroy(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_zero_shot),     cmocka_unit_test(test_cross_lingual),
      cmocka_unit_test(test_instruct),      cmocka_unit_test(test_seeds),
      cmocka_unit_test(test_one_shot),      cmocka_unit_test(test_output_rate),
      cmocka_unit_test(test_chunk_schedule), cmocka_unit_test(test_auto_first_chunk),
      cmocka_unit_test(test_cancel_from_callback),
      cmocka_unit_test(test_cancel_from_thread), cmocka_unit_test(test_concurrent),
      cmocka_unit_test(test_stats_while_running), cmocka_unit_test(test_queue_room),
      cmocka_unit_test(test_max_streams), cmocka_unit_test(test_flow_gate),
  };
  return cmocka_run_group_tests_name("synth", tests, setup, teardown);
}
