/* test_longtext.c - long text: the official front end's text_normalize(split=True) cuts the text
 * into segments (split_paragraph, ~60-80 tokens each) and each is synthesized in turn within one
 * request (same prompt, fresh LLM context, fresh flow and vocoder states; segment k draws from
 * seed + k). On the CPU engine with the small golden model and voice:
 *   - a long multi-sentence text gives more than one segment;
 *   - its audio equals, sample for sample, the concatenation of blocking synthesis of each
 *     segment's normalized text alone (COSY_SYNTH_NO_TEXT_NORMALIZATION, seed + k), for the
 *     blocking call, push streaming and pull streaming of the long text: one continuous stream
 *     (chunk offsets contiguous, COSY_CHUNK_LAST once, on the last chunk);
 *   - the request's statistics add the segments up; a cancel during a later segment ends the
 *     request with COSY_ERR_CANCELLED; with COSY_SYNTH_NO_TEXT_NORMALIZATION the text is one
 *     utterance (no split, as the official code with text_frontend=False). */
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
#include "engine.h"
#include "testutil.h"
#include "text/normalize.h"

typedef struct fx {
  cosy_engine *e;
  cosy_voice *v;
} fx;

static const char *LONG =
    "The quick brown fox jumps over the lazy dog while seven wizards quietly hum a cheerful "
    "tune. The morning train was late again, so she walked along the river instead of waiting "
    "on the cold platform. Birds were singing in the tall trees, and a gentle wind carried the "
    "smell of fresh bread from the bakery on the corner. By the time she reached the old stone "
    "bridge, the sun had finally broken through the clouds. She stopped for a moment to watch "
    "the boats drifting slowly downstream, then hurried on towards the office.";

/* the golden voice (testutil) */
static cosy_voice *golden_voice(cosy_engine *e) {
  return tu_golden_voice(e, "You are a helpful assistant.<|endofprompt|>希望你以后能够做的比我还好呦。");
}

static int setup(void **state) {
  static fx f;
  memset(&f, 0, sizeof f);
  *state = &f;
  const char *model = tu_small_model();
  if (!model || !tu_shared_dir()) return 0;
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  c.model_path = model;
  c.device = COSY_DEVICE_CPU;
  c.max_active = 4;
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

#define NEED(f)                                                          \
  do {                                                                   \
    if (!(f)->e) {                                                       \
      print_message("SKIP: no small golden model / shared data\n");      \
      skip();                                                            \
    }                                                                    \
  } while (0)

static void params(cosy_synth_params *p, uint64_t seed) {
  cosy_synth_params_init(p, sizeof *p);
  p->seed = seed;
  p->max_tokens = 90; /* per segment: several chunks each, quick */
}

typedef struct pushbuf {
  float *pcm;
  int64_t n, cap;
  int chunks, lasts, bad_offset, last_not_at_end;
} pushbuf;

static int32_t on_chunk(void *user, const cosy_chunk *c) {
  pushbuf *b = (pushbuf *)user;
  if (c->offset != b->n) b->bad_offset = 1;
  if (b->lasts) b->last_not_at_end = 1; /* a chunk after the COSY_CHUNK_LAST one */
  if (b->n + c->n_samples > b->cap) {
    b->cap = (b->n + c->n_samples) * 2 + 1024;
    b->pcm = (float *)realloc(b->pcm, (size_t)b->cap * sizeof *b->pcm);
  }
  memcpy(b->pcm + b->n, c->pcm, (size_t)c->n_samples * sizeof *c->pcm);
  b->n += c->n_samples;
  b->chunks++;
  if (c->flags & COSY_CHUNK_LAST) b->lasts++;
  return 0;
}

static void test_segments_concatenate(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  char **seg = NULL;
  int n_seg = 0;
  assert_int_equal(cosy_text_split(f->e->tn, LONG, 0, &seg, &n_seg), COSY_OK);
  print_message("%d segments\n", n_seg);
  assert_true(n_seg > 1);
  /* the reference: each segment alone, blocking, its normalized text as is, seed 100 + k */
  float *ref = NULL;
  int64_t n_ref = 0;
  int32_t ref_tokens = 0;
  for (int k = 0; k < n_seg; k++) {
    cosy_synth_params p;
    params(&p, 100 + (uint64_t)k);
    p.flags = COSY_SYNTH_NO_TEXT_NORMALIZATION;
    cosy_request *r;
    pushbuf b = {0};
    assert_int_equal(cosy_request_submit(f->e, f->v, seg[k], &p, on_chunk, &b, &r), COSY_OK);
    assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
    cosy_request_stats rs;
    cosy_request_stats_init(&rs, sizeof rs);
    cosy_request_get_stats(r, &rs);
    ref_tokens += rs.n_speech_tokens;
    cosy_request_release(r);
    print_message("segment %d: \"%.40s...\" %lld samples\n", k, seg[k], (long long)b.n);
    assert_true(b.n > 0);
    ref = (float *)realloc(ref, (size_t)(n_ref + b.n) * sizeof *ref);
    memcpy(ref + n_ref, b.pcm, (size_t)b.n * sizeof *ref);
    n_ref += b.n;
    free(b.pcm);
  }
  cosy_text_segments_free(seg, n_seg);
  cosy_synth_params p;
  params(&p, 100);
  /* blocking */
  float *blk;
  int64_t n_blk;
  assert_int_equal(cosy_synthesize(f->e, f->v, LONG, &p, &blk, &n_blk), COSY_OK);
  assert_int_equal(n_blk, n_ref);
  assert_memory_equal(blk, ref, (size_t)n_ref * sizeof *ref);
  /* push: one continuous stream, contiguous offsets, one last chunk at the end */
  pushbuf b = {0};
  cosy_request *r;
  assert_int_equal(cosy_request_submit(f->e, f->v, LONG, &p, on_chunk, &b, &r), COSY_OK);
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  cosy_request_stats rs;
  cosy_request_stats_init(&rs, sizeof rs);
  cosy_request_get_stats(r, &rs);
  cosy_request_release(r);
  assert_int_equal(b.n, n_ref);
  assert_memory_equal(b.pcm, ref, (size_t)n_ref * sizeof *ref);
  assert_false(b.bad_offset);
  assert_int_equal(b.lasts, 1);
  assert_false(b.last_not_at_end);
  assert_int_equal(rs.n_speech_tokens, ref_tokens);
  assert_int_equal(rs.n_samples, n_ref);
  print_message("long text: %lld samples in %d chunks == the %d segments one after the other\n",
                (long long)b.n, b.chunks, n_seg);
  free(b.pcm);
  /* pull */
  assert_int_equal(cosy_request_submit(f->e, f->v, LONG, &p, NULL, NULL, &r), COSY_OK);
  float *got = (float *)malloc((size_t)n_ref * sizeof *got);
  int64_t n_got = 0, k;
  cosy_status st;
  float buf[3000];
  while ((st = cosy_request_read(r, buf, 3000, &k, -1)) == COSY_OK && k > 0) {
    assert_true(n_got + k <= n_ref);
    memcpy(got + n_got, buf, (size_t)k * sizeof *buf);
    n_got += k;
  }
  assert_int_equal(st, COSY_OK);
  cosy_request_release(r);
  assert_int_equal(n_got, n_ref);
  assert_memory_equal(got, ref, (size_t)n_ref * sizeof *ref);
  free(got);
  free(blk);
  free(ref);
}

typedef struct cancel_at {
  int64_t n, at;
} cancel_at;

static int32_t cancel_cb(void *user, const cosy_chunk *c) {
  cancel_at *a = (cancel_at *)user;
  a->n += c->n_samples;
  return a->n >= a->at;
}

static void test_cancel_and_no_split(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  cosy_synth_params p;
  params(&p, 100);
  /* cancelled in a later segment (after more audio than the first segment's 90 tokens) */
  cancel_at a = {0, 90 * 960 + 1};
  cosy_request *r;
  assert_int_equal(cosy_request_submit(f->e, f->v, LONG, &p, cancel_cb, &a, &r), COSY_OK);
  assert_int_equal(cosy_request_wait(r, -1), COSY_ERR_CANCELLED);
  cosy_request_release(r);
  /* released while running: nothing leaks (ASan) */
  assert_int_equal(cosy_request_submit(f->e, f->v, LONG, &p, NULL, NULL, &r), COSY_OK);
  cosy_request_release(r);
  /* without normalization: one utterance */
  p.flags = COSY_SYNTH_NO_TEXT_NORMALIZATION;
  p.max_tokens = 100;
  float *pcm;
  int64_t n;
  assert_int_equal(cosy_synthesize(f->e, f->v, LONG, &p, &pcm, &n), COSY_OK);
  assert_true(n > 0 && n <= 100 * 960);
  cosy_free(pcm);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_segments_concatenate),
      cmocka_unit_test(test_cancel_and_no_split),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
