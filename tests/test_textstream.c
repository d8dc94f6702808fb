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
 *   - marks (cosy_request_text_marks): the same for every cut into pushes and timing, one per
 *     unit at the library's own word cuts / sentence ends, contiguous byte ranges over the text,
 *     a unit's first token where tokenizing the text before it says, its speech token where the
 *     schedule trace has the forward that fed it, samples at the output rate (16 kHz), polled
 *     while the audio plays (a known sample never changes), a request waiting for text, a
 *     cancelled one, a whole-text one, argument and struct_size errors, and (fault-injection
 *     builds) a push whose allocation fails leaves them as they were;
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
#include <pthread.h>

#include "cosyvoice.h"
#include "engine.h"
#include "testutil.h"
#include "ref/llm.h" /* ref_silent_pass: what the engine drops as silence */
#include "tokenizer.h"
#include "util.h" /* cosy_fault_*: allocation failures (fault-injection builds) */

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
  cosy_text_mark *marks; /* cosy_request_text_marks at the end */
  int32_t n_marks;
  int trace_id;          /* the request's id in the COSY_TEXT_TRACE file */
} run_out;

static int32_t g_rate; /* sample_rate of run()'s requests (0: native) */

/* the id of the last text-streamed request admitted (its H line in the trace) */
static int trace_last_id(const char *trace) {
  FILE *fp = fopen(trace, "r");
  assert_non_null(fp);
  static char line[1 << 16];
  int id = -1, k;
  while (fgets(line, sizeof line, fp))
    if (sscanf(line, "%d H", &k) == 1 && strstr(line, " H ")) id = k;
  fclose(fp);
  assert_true(id >= 0);
  return id;
}

/* every mark of r (fails the test on an error) */
static cosy_text_mark *all_marks(cosy_request *r, int32_t *n) {
  assert_int_equal(cosy_request_text_marks(r, 0, NULL, 0, n), COSY_OK);
  cosy_text_mark *m = (cosy_text_mark *)calloc((size_t)*n + 1, sizeof *m);
  for (int32_t i = 0; i <= *n; i++) cosy_text_mark_init(&m[i], sizeof m[i]);
  int32_t n2 = 0;
  assert_int_equal(cosy_request_text_marks(r, 0, m, *n + 1, &n2), COSY_OK);
  assert_true(n2 >= *n); /* units only get appended (another thread may push meanwhile) */
  *n = n2 < *n + 1 ? n2 : *n + 1;
  return m;
}

/* the marks seen while the audio plays: the count never shrinks, a known sample never changes */
static void poll_marks(cosy_request *r, cosy_text_mark *seen, int32_t *n_seen, int32_t cap) {
  int32_t n = 0;
  cosy_text_mark *m = all_marks(r, &n);
  assert_true(n >= *n_seen);
  for (int32_t i = 0; i < *n_seen; i++) {
    assert_int_equal(m[i].text_begin, seen[i].text_begin);
    assert_int_equal(m[i].text_end, seen[i].text_end);
    assert_int_equal(m[i].text_token, seen[i].text_token);
    if (seen[i].sample >= 0) assert_int_equal(m[i].sample, seen[i].sample);
  }
  *n_seen = n < cap ? n : cap;
  memcpy(seen, m, (size_t)*n_seen * sizeof *m);
  free(m);
}

static void sleep_ms(int ms) {
  struct timespec ts = {0, (long)ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* how: 0 = one piece (given to submit), 1 = word by word with pauses, 2 = byte by byte */
static run_out run(fx *f, const char *text, uint32_t flags, int how) {
  cosy_synth_params p;
  params(&p, flags, 77);
  p.sample_rate = g_rate;
  cosy_request *r = NULL;
  cosy_status st = cosy_request_submit(f->e, f->v, how == 0 ? text : NULL, &p, NULL, NULL, &r);
  if (st) fail_msg("submit: %s", cosy_last_error());
  static cosy_text_mark seen[512];
  int32_t n_seen = 0;
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
      poll_marks(r, seen, &n_seen, 512);
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
    poll_marks(r, seen, &n_seen, 512);
  }
  if (st) fail_msg("read: %s", cosy_last_error());
  poll_marks(r, seen, &n_seen, 512);
  o.marks = all_marks(r, &o.n_marks);
  o.trace_id = trace_last_id(f->trace); /* (one request at a time here) */
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

/* ---- the first chunk of a text-streamed request ------------------------------------------- */

static int32_t first_chunk_cb(void *user, const cosy_chunk *c) {
  int64_t *first = (int64_t *)user;
  if (*first == 0) *first = c->n_samples;
  return 0;
}

/* the samples of the first chunk pushed: text-streamed (the text in one push) or whole */
static int64_t first_chunk_of(cosy_engine *e, const cosy_voice *v, int stream, int32_t first_tokens) {
  cosy_synth_params p;
  params(&p, 0, 7);
  if (!stream) p.flags &= ~COSY_SYNTH_TEXT_STREAM;
  p.first_chunk_tokens = first_tokens;
  int64_t first = 0;
  cosy_request *r = NULL;
  assert_int_equal(cosy_request_submit(e, v, stream ? NULL : TEXT, &p, first_chunk_cb, &first, &r),
                   COSY_OK);
  if (stream) {
    assert_int_equal(cosy_request_push_text(r, TEXT), COSY_OK);
    assert_int_equal(cosy_request_end_text(r), COSY_OK);
  }
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  cosy_request_release(r);
  assert_true(first > 0);
  return first;
}

/* first_chunk_tokens 0 (auto) gives a light-loaded request a first chunk shorter than a block,
 * but a text-streamed one the official 25 tokens: its tokens come only as fast as its text
 * (docs/scheduler.md section 2). An engine with first_chunk_wait_max set (the CPU default is
 * off) so that the light-load rule applies. */
static void test_first_chunk_auto(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  c.model_path = tu_small_model();
  c.device = COSY_DEVICE_CPU;
  c.max_active = 4;
  c.first_chunk_wait_max = 64;
  cosy_engine *e = NULL;
  assert_int_equal(cosy_engine_create(&c, &e), COSY_OK);
  cosy_voice *v = golden_voice(e);
  assert_non_null(v);
  const int64_t whole_auto = first_chunk_of(e, v, 0, 0), whole_25 = first_chunk_of(e, v, 0, 25);
  const int64_t stream_auto = first_chunk_of(e, v, 1, 0), stream_25 = first_chunk_of(e, v, 1, 25);
  print_message("first chunk samples: whole auto %lld / 25 %lld, streamed auto %lld / 25 %lld\n",
                (long long)whole_auto, (long long)whole_25, (long long)stream_auto,
                (long long)stream_25);
  assert_true(whole_auto < whole_25); /* the light-load rule is on in this engine */
  assert_int_equal(stream_auto, stream_25);
  cosy_voice_release(v);
  cosy_engine_destroy(e);
}

/* ---- marks (cosy_request_text_marks) ------------------------------------------------------ */

static void same_marks(const run_out *a, const run_out *b) {
  assert_int_equal(a->n_marks, b->n_marks);
  for (int32_t i = 0; i < a->n_marks; i++) {
    const cosy_text_mark *x = &a->marks[i], *y = &b->marks[i];
    if (x->text_begin != y->text_begin || x->text_end != y->text_end ||
        x->text_token != y->text_token || x->speech_token != y->speech_token ||
        x->sample != y->sample)
      fail_msg("mark %d differs: [%lld, %lld) t%d s%d @%lld vs [%lld, %lld) t%d s%d @%lld", i,
               (long long)x->text_begin, (long long)x->text_end, x->text_token, x->speech_token,
               (long long)x->sample, (long long)y->text_begin, (long long)y->text_end,
               y->text_token, y->speech_token, (long long)y->sample);
  }
}

/* From the COSY_TEXT_TRACE lines of request id: for each of the request's text tokens (prompt
 * text excluded), the spoken tokens sampled before the forward that fed it (ref_silent_pass:
 * the silence the engine drops is not spoken). Returns how many text tokens were fed. */
static int trace_positions(const char *trace, int id, int *pos, int cap) {
  FILE *fp = fopen(trace, "r");
  assert_non_null(fp);
  static char line[1 << 16];
  int n_prompt = -1, fed = 0, spoken = 0, run = 0;
  while (fgets(line, sizeof line, fp)) {
    char *p = line, *q;
    long rid = strtol(p, &q, 10);
    if (q == p || rid != id) continue;
    p = q + 1;
    if (p[0] == 'H') { /* prefix <ids> cache <ids> ps ...: the prompt's text ids */
      n_prompt = 0;
      char *t = strstr(p, " prefix"), *ps = strstr(p, " ps");
      assert_true(t && ps);
      for (t += 7; t < ps;) {
        while (*t == ' ') t++;
        if (t >= ps) break;
        if (strncmp(t, "cache", 5)) n_prompt++;
        while (*t && *t != ' ') t++;
      }
    } else if (p[0] == 'O') {
      if (ref_silent_pass(&run, (int32_t)atoi(p + 2))) spoken++;
    } else if (p[0] == 'F') {
      for (char *t = strtok(p + 1, " \n"); t; t = strtok(NULL, " \n"))
        if (t[0] == 't') {
          if (fed >= n_prompt && fed - n_prompt < cap) pos[fed - n_prompt] = spoken;
          fed++;
        }
    }
  }
  fclose(fp);
  assert_true(n_prompt > 0);
  return fed - n_prompt;
}

/* the marks of a finished run of text: contiguous byte ranges over the whole text, one per unit
 * (word cuts / sentence ends, as the library's own cut functions find them), the unit's first
 * token where tokenizing the text before it says, the trace's positions, the output rate */
static void check_marks(fx *f, const char *text, uint32_t flags, const run_out *o) {
  const int32_t rate = g_rate ? g_rate : 24000;
  const size_t len = strlen(text);
  assert_true(o->n_marks > 0);
  /* the units: the library's cut functions on the whole text */
  size_t ends[512];
  int n_units = 0;
  if (flags & COSY_SYNTH_NO_TEXT_NORMALIZATION) {
    for (size_t a = 0; a < len && n_units < 512;) {
      size_t b = textstream_next_word_cut(text, a, len);
      ends[n_units++] = b;
      a = b;
    }
  } else {
    for (size_t a = 0; a < len && n_units < 512;) {
      size_t b = textstream_sentence_end(text + a, len - a);
      b = b ? a + b : len;
      ends[n_units++] = b;
      a = b;
    }
  }
  assert_int_equal(o->n_marks, n_units); /* every unit of this text gives tokens */
  static int pos[4096];
  int fed = trace_positions(f->trace, o->trace_id, pos, 4096);
  for (int32_t i = 0; i < o->n_marks; i++) {
    const cosy_text_mark *m = &o->marks[i];
    assert_int_equal(m->struct_size, sizeof *m);
    assert_int_equal(m->text_begin, i ? o->marks[i - 1].text_end : 0);
    assert_int_equal(m->text_end, (int64_t)ends[i]);
    if (i) assert_true(m->text_token > o->marks[i - 1].text_token);
    if (i) assert_true(m->speech_token >= o->marks[i - 1].speech_token);
    assert_true(m->speech_token >= 0);
    assert_true(m->text_token < fed);
    assert_int_equal(m->speech_token, pos[m->text_token]);
    assert_int_equal(m->sample, (int64_t)m->speech_token * 960 * rate / 24000);
    assert_true(m->sample <= o->n);
    if (flags & COSY_SYNTH_NO_TEXT_NORMALIZATION) { /* ids of the text before the unit */
      int32_t *ids = NULL, n = 0;
      assert_int_equal(cosy_tokenize(f->e->tok, text, (size_t)m->text_begin, &ids, &n), COSY_OK);
      assert_int_equal(m->text_token, n);
      free(ids);
    }
  }
  assert_int_equal(o->marks[o->n_marks - 1].text_end, (int64_t)len);
  print_message("  %d marks (flags 0x%x, %d Hz): last at token %d, sample %lld of %lld\n",
                o->n_marks, flags, rate, o->marks[o->n_marks - 1].speech_token,
                (long long)o->marks[o->n_marks - 1].sample, (long long)o->n);
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
  check_marks(f, TEXT, flags, &one);
  same_marks(&one, &words);
  same_marks(&one, &bytes);
  free(one.pcm);
  free(words.pcm);
  free(bytes.pcm);
  free(one.marks);
  free(words.marks);
  free(bytes.marks);
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
  free(o.marks);
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
  free(clean.marks);
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

/* marks at another output rate (the same tokens, the samples at the rate), for a whole-text
 * request, while text waits, and the errors */
static void test_marks(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  run_out native = run(f, TEXT, 0, 0);
  g_rate = 16000;
  run_out low = run(f, TEXT, 0, 1);
  g_rate = 0;
  check_marks(f, TEXT, 0, &native);
  g_rate = 16000;
  check_marks(f, TEXT, 0, &low);
  g_rate = 0;
  assert_int_equal(native.n_marks, low.n_marks);
  for (int32_t i = 0; i < low.n_marks; i++) {
    assert_int_equal(low.marks[i].speech_token, native.marks[i].speech_token);
    assert_int_equal(low.marks[i].sample, (int64_t)native.marks[i].speech_token * 640);
  }
  free(native.pcm);
  free(native.marks);
  free(low.pcm);
  free(low.marks);

  cosy_synth_params p;
  params(&p, COSY_SYNTH_NO_TEXT_NORMALIZATION, 5);
  cosy_request *r = NULL;
  int32_t n = -1;
  cosy_text_mark m[4];
  for (int i = 0; i < 4; i++) cosy_text_mark_init(&m[i], sizeof m[i]);
  assert_int_equal(m[0].sample, -1);
  assert_int_equal(m[0].speech_token, -1);
  /* a text-streamed request: units appear as words are committed; before they are fed
   * (the LLM waits for 5 text tokens) their sample is -1 */
  assert_int_equal(cosy_request_submit(f->e, f->v, NULL, &p, NULL, NULL, &r), COSY_OK);
  assert_int_equal(cosy_request_text_marks(r, 0, m, 4, &n), COSY_OK);
  assert_int_equal(n, 0);
  assert_int_equal(cosy_request_push_text(r, "Hello there"), COSY_OK); /* "Hello" committed */
  assert_int_equal(cosy_request_text_marks(r, 0, m, 4, &n), COSY_OK);
  assert_int_equal(n, 1);
  assert_int_equal(m[0].text_begin, 0);
  assert_int_equal(m[0].text_end, 5);
  assert_int_equal(m[0].text_token, 0);
  sleep_ms(50);
  assert_int_equal(cosy_request_text_marks(r, 0, m, 4, &n), COSY_OK);
  assert_int_equal(m[0].sample, -1); /* one text token: the schedule needs 5 */
  assert_int_equal(m[0].speech_token, -1);
  /* first beyond the end: nothing copied, the count still given */
  m[1].text_begin = 777;
  assert_int_equal(cosy_request_text_marks(r, 1, &m[1], 1, &n), COSY_OK);
  assert_int_equal(n, 1);
  assert_int_equal(m[1].text_begin, 777);
  /* errors */
  assert_int_equal(cosy_request_text_marks(NULL, 0, m, 4, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(n, 0);
  assert_int_equal(cosy_request_text_marks(r, 0, m, 4, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_request_text_marks(r, 0, NULL, 1, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_request_text_marks(r, -1, m, 4, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_request_text_marks(r, 0, m, -1, &n), COSY_ERR_INVALID_ARG);
  m[0].struct_size = 8;
  assert_int_equal(cosy_request_text_marks(r, 0, m, 4, &n), COSY_ERR_STRUCT_SIZE);
  /* a newer caller's larger struct: the stride is its size; a non-zero unknown tail is refused */
  struct newer {
    cosy_text_mark m;
    int64_t appended;
  } big[2];
  memset(big, 0, sizeof big);
  cosy_text_mark_init(&big[0].m, sizeof big[0]);
  big[1].appended = 99; /* only out[0]'s tail is looked at; the others are left alone */
  assert_int_equal(cosy_request_text_marks(r, 0, &big[0].m, 2, &n), COSY_OK);
  assert_int_equal(n, 1);
  assert_int_equal(big[0].m.text_end, 5);
  assert_int_equal(big[0].appended, 0);
  big[0].appended = 1;
  assert_int_equal(cosy_request_text_marks(r, 0, &big[0].m, 2, &n), COSY_ERR_STRUCT_SIZE);
  assert_int_equal(cosy_request_push_text(r, " and more words to say."), COSY_OK);
  assert_int_equal(cosy_request_end_text(r), COSY_OK);
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  int32_t nm = 0;
  cosy_text_mark *all = all_marks(r, &nm);
  assert_int_equal(nm, 8); /* Hello, there, and, more, words, to, say, "." */
  for (int32_t i = 0; i < nm; i++) assert_true(all[i].sample >= 0);
  free(all);
  cosy_request_release(r);
  /* cancelled before the text was fed: the marks stay -1 */
  assert_int_equal(cosy_request_submit(f->e, f->v, "One two three", &p, NULL, NULL, &r), COSY_OK);
  cosy_request_cancel(r);
  assert_int_equal(cosy_request_wait(r, -1), COSY_ERR_CANCELLED);
  all = all_marks(r, &nm);
  assert_int_equal(nm, 2);
  assert_int_equal(all[1].text_begin, 3);
  assert_int_equal(all[1].text_end, 7);
  for (int32_t i = 0; i < nm; i++) assert_int_equal(all[i].sample, -1);
  free(all);
  cosy_request_release(r);
  /* a whole-text request: one mark, the whole text, sample 0 */
  cosy_synth_params plain;
  cosy_synth_params_init(&plain, sizeof plain);
  plain.max_tokens = 20;
  const char *hi = "Hello, world.";
  assert_int_equal(cosy_request_submit(f->e, f->v, hi, &plain, NULL, NULL, &r), COSY_OK);
  assert_int_equal(cosy_request_text_marks(r, 0, m, 4, &n), COSY_ERR_STRUCT_SIZE); /* m[0] still 8 */
  cosy_text_mark_init(&m[0], sizeof m[0]);
  assert_int_equal(cosy_request_text_marks(r, 0, m, 4, &n), COSY_OK);
  assert_int_equal(n, 1);
  assert_int_equal(m[0].text_begin, 0);
  assert_int_equal(m[0].text_end, (int64_t)strlen(hi));
  assert_int_equal(m[0].sample, 0);
  assert_int_equal(m[0].speech_token, 0);
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  cosy_request_release(r);
}

/* a push whose allocations fail (fault-injection builds, lib/util.h:
 * make B=build/asan SAN=1 CUDA=0 TEST_ONLY=test_textstream test-c; make test-sanitize runs it)
 * changes nothing: no marks, no ids appended; pushed again it gives the marks of a clean run */
static void test_marks_alloc_faults(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  if (!cosy_fault_enabled()) {
    print_message("SKIP: not a fault-injection build (make B=build/asan SAN=1 ...)\n");
    skip();
  }
  static const char *a = "One two three. ", *b = "Four five, six. Seven eight nine ten eleven ";
  for (int norm = 0; norm < 2; norm++) {
    const uint32_t flags = norm ? 0 : COSY_SYNTH_NO_TEXT_NORMALIZATION;
    cosy_synth_params p;
    params(&p, flags, 31);
    cosy_text_mark ref[32];
    int32_t n_ref = 0;
    int failed = 0, tried = 0;
    long long T = 0, step = 1; /* the push's allocations (counted in the clean run) */
    for (long long k = 0; k == 0 || k <= T; k += k ? step : 1) { /* k = 0: the clean run */
      cosy_request *r = NULL;
      assert_int_equal(cosy_request_submit(f->e, f->v, a, &p, NULL, NULL, &r), COSY_OK);
      int32_t n0 = 0, n1 = 0;
      assert_int_equal(cosy_request_text_marks(r, 0, NULL, 0, &n0), COSY_OK);
      pthread_mutex_lock(&r->mu);
      const int ids0 = r->tx_n;
      pthread_mutex_unlock(&r->mu);
      cosy_fault_arm(k);
      cosy_status st = cosy_request_push_text(r, b);
      const int fired = cosy_fault_fired();
      if (k == 0) {
        T = cosy_fault_calls();
        step = T > 40 ? T / 40 : 1;
      }
      cosy_fault_arm(0);
      tried += k > 0;
      if (st == COSY_ERR_INVALID_ARG) { /* the failure hit an engine thread: the request ended */
        assert_true(k > 0 && fired);
        assert_int_equal(cosy_request_wait(r, -1), COSY_ERR_NO_MEMORY);
        cosy_request_release(r);
        continue;
      }
      if (st == COSY_ERR_NO_MEMORY) {
        assert_true(fired);
        failed++;
        assert_int_equal(cosy_request_text_marks(r, 0, NULL, 0, &n1), COSY_OK);
        pthread_mutex_lock(&r->mu);
        const int ids1 = r->tx_n;
        pthread_mutex_unlock(&r->mu);
        assert_int_equal(n1, n0);
        assert_int_equal(ids1, ids0);
        st = cosy_request_push_text(r, b);
      }
      assert_int_equal(st, COSY_OK);
      st = cosy_request_end_text(r); /* (finished when the failure hit an engine thread) */
      assert_true(st == COSY_OK || (k > 0 && st == COSY_ERR_INVALID_ARG));
      st = cosy_request_wait(r, -1); /* (the failure may have hit an engine thread instead) */
      assert_true(st == COSY_OK || (k > 0 && st == COSY_ERR_NO_MEMORY));
      if (st == COSY_OK) {
        cosy_text_mark m[32];
        int32_t n = 0;
        cosy_text_mark_init(&m[0], sizeof m[0]);
        assert_int_equal(cosy_request_text_marks(r, 0, m, 32, &n), COSY_OK);
        assert_true(n > 2 && n <= 32);
        if (k == 0) {
          memcpy(ref, m, sizeof m);
          n_ref = n;
        } else {
          assert_int_equal(n, n_ref);
          assert_memory_equal(m, ref, (size_t)n * sizeof *m);
        }
      }
      cosy_request_release(r);
    }
    print_message("  %s: %d of %d pushes (of the %lld allocations of a push and the engine "
                  "threads meanwhile) failed with an injected allocation failure\n",
                  norm ? "sentences" : "words", failed, tried, T);
    assert_true(failed > 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_word_cut),
      cmocka_unit_test(test_pieces_normalized),
      cmocka_unit_test(test_pieces_raw),
      cmocka_unit_test(test_schedule_reference),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_first_chunk_auto),
      cmocka_unit_test(test_marks),
      cmocka_unit_test(test_marks_alloc_faults),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
