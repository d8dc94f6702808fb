/* test_textstream.c - text streamed in (COSY_SYNTH_TEXT_STREAM, cosy_request_push_text /
 * cosy_request_end_text) on the CPU engine with the small golden model and the golden voice:
 *   - the text pushed in one piece, word by word (with pauses, so the LLM waits for text) and
 *     byte by byte gives identical speech tokens and identical audio (same seed), with and
 *     without text normalization;
 *   - the library's LLM input schedule (COSY_TEXT_TRACE) equals an independent reimplementation
 *     of the official inference_bistream schedule (tests/bistream_ref.py), which in turn
 *     reproduces the schedule of the official code itself (tests/data/bistream/official.trace);
 *   - the word cut: tokenizing the committed pieces gives the ids of the whole text (contractions,
 *     CJK, special tokens, runs of spaces, a UTF-8 character cut between pushes);
 *   - errors: NULL arguments, invalid UTF-8 in a push (COSY_ERR_TEXT, the request unharmed: its
 *     audio equals the clean run's), a push after end_text / on a cancelled or finished request,
 *     end_text inside a UTF-8 character, a request without the flag, cosy_synthesize with it,
 *     modes other than zero-shot, a text without tokens. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cosyvoice.h"
#include "engine.h"
#include "testutil.h"
#include "tokenizer.h"

typedef struct fx {
  cosy_engine *e;
  cosy_voice *v;
  char trace[4096];
} fx;

static const char *TEXT =
    "The quick brown fox jumps over the lazy dog. Seven wizards quietly hum a cheerful tune, "
    "and the morning train was late again! 她沿着河边走了回去。";

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
  snprintf(f.trace, sizeof f.trace, "%s", tu_tmp_path("text-trace"));
  setenv("COSY_TEXT_TRACE", f.trace, 1); /* read at engine create */
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  c.model_path = model;
  c.device = COSY_DEVICE_CPU;
  c.max_active = 4;
  cosy_status st = cosy_engine_create(&c, &f.e);
  unsetenv("COSY_TEXT_TRACE");
  if (st) {
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
  if (f->trace[0]) remove(f->trace);
  return 0;
}

#define NEED(f)                                                          \
  do {                                                                   \
    if (!(f)->e) {                                                       \
      print_message("SKIP: no small golden model / shared data\n");      \
      skip();                                                            \
    }                                                                    \
  } while (0)

static void params(cosy_synth_params *p, uint32_t flags, uint64_t seed) {
  cosy_synth_params_init(p, sizeof *p);
  p->flags = COSY_SYNTH_TEXT_STREAM | flags;
  p->seed = seed;
  p->max_tokens = 240;
}

typedef struct run_out {
  float *pcm;
  int64_t n;
  int32_t n_speech, n_text;
} run_out;

static void sleep_ms(int ms) {
  struct timespec ts = {0, (long)ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* how: 0 = one piece (given to submit), 1 = word by word with pauses, 2 = byte by byte */
static run_out run(fx *f, const char *text, uint32_t flags, int how) {
  cosy_synth_params p;
  params(&p, flags, 77);
  cosy_request *r = NULL;
  cosy_status st = cosy_request_submit(f->e, f->v, how == 0 ? text : NULL, &p, NULL, NULL, &r);
  if (st) fail_msg("submit: %s", cosy_last_error());
  if (how == 1) {
    const char *s = text;
    while (*s) {
      const char *t = strchr(s + 1, ' ');
      size_t n = t ? (size_t)(t - s) : strlen(s);
      char w[256];
      memcpy(w, s, n);
      w[n] = 0;
      st = cosy_request_push_text(r, w);
      if (st) fail_msg("push: %s", cosy_last_error());
      s += n;
      sleep_ms(3);
    }
  } else if (how == 2) {
    for (const char *s = text; *s; s++) {
      char b[2] = {*s, 0};
      st = cosy_request_push_text(r, b);
      if (st) fail_msg("push byte: %s", cosy_last_error());
    }
  }
  assert_int_equal(cosy_request_end_text(r), COSY_OK);
  run_out o = {0};
  float buf[4096];
  int64_t got, cap = 0;
  while ((st = cosy_request_read(r, buf, 4096, &got, -1)) == COSY_OK && got > 0) {
    if (o.n + got > cap) {
      cap = (o.n + got) * 2;
      o.pcm = (float *)realloc(o.pcm, (size_t)cap * sizeof *o.pcm);
    }
    memcpy(o.pcm + o.n, buf, (size_t)got * sizeof *buf);
    o.n += got;
  }
  if (st) fail_msg("read: %s", cosy_last_error());
  cosy_request_stats rs;
  cosy_request_stats_init(&rs, sizeof rs);
  assert_int_equal(cosy_request_get_stats(r, &rs), COSY_OK);
  o.n_speech = rs.n_speech_tokens;
  o.n_text = rs.n_text_tokens;
  cosy_request_release(r);
  return o;
}

static void check_same(const run_out *a, const run_out *b) {
  assert_int_equal(a->n_speech, b->n_speech);
  assert_int_equal(a->n_text, b->n_text);
  assert_int_equal(a->n, b->n);
  assert_memory_equal(a->pcm, b->pcm, (size_t)a->n * sizeof *a->pcm);
}

static void pieces(fx *f, uint32_t flags) {
  run_out one = run(f, TEXT, flags, 0);
  run_out words = run(f, TEXT, flags, 1);
  run_out bytes = run(f, TEXT, flags, 2);
  print_message("text stream (flags 0x%x): %d text tokens, %d speech tokens, %lld samples\n", flags,
                one.n_text, one.n_speech, (long long)one.n);
  assert_true(one.n > 0);
  assert_true(one.n_speech > 30);
  check_same(&one, &words);
  check_same(&one, &bytes);
  free(one.pcm);
  free(words.pcm);
  free(bytes.pcm);
}

static void test_pieces_normalized(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  pieces(f, 0);
}

static void test_pieces_raw(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  pieces(f, COSY_SYNTH_NO_TEXT_NORMALIZATION);
}

/* the schedule of every request run so far against tests/bistream_ref.py */
static void test_schedule_reference(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  run_out o = run(f, TEXT, COSY_SYNTH_NO_TEXT_NORMALIZATION, 1);
  free(o.pcm);
  const char *py = getenv("PYTHON");
  char cmd[9000];
  snprintf(cmd, sizeof cmd, "%s '%s' '%s'", py && *py ? py : "python3",
           tu_tests_file("bistream_ref.py"), f->trace);
  int rc = system(cmd);
  assert_int_equal(rc, 0);
  /* and the reference reproduces the official code's own schedule (tests/data/bistream) */
  char official[4096]; /* (tu_tests_file's buffer is reused by each call) */
  snprintf(official, sizeof official, "%s", tu_tests_file("data/bistream/official.trace"));
  snprintf(cmd, sizeof cmd, "%s '%s' '%s'", py && *py ? py : "python3",
           tu_tests_file("bistream_ref.py"), official);
  rc = system(cmd);
  assert_int_equal(rc, 0);
}

/* tokenizing the committed pieces (textstream_word_cut on a growing buffer) == the whole text */
static void test_word_cut(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  static const char *cases[] = {
      "Don't stop, it's   fine.  Really?! Yes...",
      "希望你以后能够做的比我还好呦，真的！好。",
      "A [breath] pause, <|endofprompt|>then [laughter]more; x<y and z>w.",
      "Numbers 12345 and 3.14, e.g. café naïve (ok)\n\nnew  line\t tab",
      "mixed中文and English，标点。end",
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    const char *s = cases[c];
    const size_t n = strlen(s);
    int32_t *whole, nw;
    assert_int_equal(cosy_tokenize(f->e->tok, s, n, &whole, &nw), COSY_OK);
    int32_t got[1024];
    int ng = 0;
    size_t done = 0; /* committed bytes */
    for (size_t have = 1; have <= n; have++) { /* one character more each time */
      if (have < n && ((unsigned char)s[have] & 0xC0) == 0x80) continue; /* (the library commits
                                                                          only whole characters) */
      size_t cut = have == n ? n : done + textstream_word_cut(s + done, have - done);
      /* never inside a UTF-8 character: the cut is at a space or ASCII/CJK punctuation */
      if (cut > done) {
        int32_t *ids, ni;
        assert_int_equal(cosy_tokenize(f->e->tok, s + done, cut - done, &ids, &ni), COSY_OK);
        assert_true(ng + ni <= 1024);
        memcpy(got + ng, ids, (size_t)ni * sizeof *ids);
        ng += ni;
        free(ids);
        done = cut;
      }
    }
    if (ng != nw || memcmp(got, whole, (size_t)nw * sizeof *whole))
      fail_msg("case %zu: pieces give %d ids, the whole text %d", c, ng, nw);
    free(whole);
  }
}

static void test_errors(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  cosy_synth_params p;
  params(&p, COSY_SYNTH_NO_TEXT_NORMALIZATION, 77);
  assert_int_equal(cosy_request_push_text(NULL, "x"), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_request_end_text(NULL), COSY_ERR_INVALID_ARG);
  /* cosy_synthesize cannot take pushed text; other modes are not implemented */
  float *pcm;
  int64_t n;
  assert_int_equal(cosy_synthesize(f->e, f->v, "Hi.", &p, &pcm, &n), COSY_ERR_INVALID_ARG);
  cosy_synth_params q = p;
  q.mode = COSY_MODE_CROSS_LINGUAL;
  cosy_request *r = NULL;
  assert_int_equal(cosy_request_submit(f->e, f->v, NULL, &q, NULL, NULL, &r), COSY_ERR_UNSUPPORTED);
  assert_null(r);
  /* a request without the flag takes no text */
  cosy_synth_params plain;
  cosy_synth_params_init(&plain, sizeof plain);
  plain.max_tokens = 20;
  assert_int_equal(cosy_request_submit(f->e, f->v, "Hello.", &plain, NULL, NULL, &r), COSY_OK);
  assert_int_equal(cosy_request_push_text(r, "more"), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_request_end_text(r), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  cosy_request_release(r);
  /* a text stream without text is still NULL-text-safe (NULL push is an argument error) */
  assert_int_equal(cosy_request_submit(f->e, f->v, NULL, &p, NULL, NULL, &r), COSY_OK);
  assert_int_equal(cosy_request_push_text(r, NULL), COSY_ERR_INVALID_ARG);
  /* invalid UTF-8 pieces are refused and change nothing; a character cut between pushes is fine */
  const char *half = "caf\xC3";
  assert_int_equal(cosy_request_push_text(r, "The quick brown fox jumps over the lazy dog. "), COSY_OK);
  assert_int_equal(cosy_request_push_text(r, "bad \xFF byte"), COSY_ERR_TEXT);
  assert_int_equal(cosy_request_push_text(r, "\xC0\xAF"), COSY_ERR_TEXT); /* overlong */
  assert_int_equal(cosy_request_push_text(r, half), COSY_OK);
  assert_int_equal(cosy_request_push_text(r, "x"), COSY_ERR_TEXT); /* not a continuation */
  assert_int_equal(cosy_request_end_text(r), COSY_ERR_TEXT);       /* ends inside a character */
  assert_int_equal(cosy_request_push_text(r, "\xA9 au lait. "), COSY_OK);
  assert_int_equal(cosy_request_push_text(r, "Seven wizards quietly hum a cheerful tune."), COSY_OK);
  assert_int_equal(cosy_request_end_text(r), COSY_OK);
  assert_int_equal(cosy_request_end_text(r), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_request_push_text(r, "late"), COSY_ERR_INVALID_ARG);
  float buf[4096];
  int64_t got, n_err = 0;
  cosy_status st;
  while ((st = cosy_request_read(r, buf, 4096, &got, -1)) == COSY_OK && got > 0) n_err += got;
  assert_int_equal(st, COSY_OK);
  assert_int_equal(cosy_request_push_text(r, "after"), COSY_ERR_INVALID_ARG); /* finished */
  cosy_request_release(r);
  /* the same text without the refused pieces gives the same audio */
  run_out clean = run(f,
                      "The quick brown fox jumps over the lazy dog. caf\xC3\xA9 au lait. Seven "
                      "wizards quietly hum a cheerful tune.",
                      COSY_SYNTH_NO_TEXT_NORMALIZATION, 0);
  assert_int_equal(clean.n, n_err);
  free(clean.pcm);
  /* cancelled: pushes say so */
  assert_int_equal(cosy_request_submit(f->e, f->v, "Hello", &p, NULL, NULL, &r), COSY_OK);
  cosy_request_cancel(r);
  assert_int_equal(cosy_request_push_text(r, " there"), COSY_ERR_CANCELLED);
  assert_int_equal(cosy_request_end_text(r), COSY_ERR_CANCELLED);
  assert_int_equal(cosy_request_wait(r, -1), COSY_ERR_CANCELLED);
  cosy_request_release(r);
  /* released without end_text: ends (cancelled), nothing leaks (ASan) */
  assert_int_equal(cosy_request_submit(f->e, f->v, "Hello", &p, NULL, NULL, &r), COSY_OK);
  cosy_request_release(r);
  /* a text with no tokens */
  assert_int_equal(cosy_request_submit(f->e, f->v, NULL, &p, NULL, NULL, &r), COSY_OK);
  assert_int_equal(cosy_request_push_text(r, ""), COSY_OK);
  assert_int_equal(cosy_request_end_text(r), COSY_OK);
  assert_int_equal(cosy_request_wait(r, -1), COSY_ERR_TEXT);
  cosy_request_release(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_word_cut),
      cmocka_unit_test(test_pieces_normalized),
      cmocka_unit_test(test_pieces_raw),
      cmocka_unit_test(test_schedule_reference),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
