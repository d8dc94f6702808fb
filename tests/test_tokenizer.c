/* test_tokenizer.c - the text tokenizer (lib/tokenizer.c) against the HF tokenizer's golden ids.
 *
 * Tolerance: none. Every case of golden/tokenizer/cases.jsonl and both golden input texts
 * (golden/inputs/texts.json -> inputs/prompt_text_ids.npy, inputs/tts_text_ids.npy) must give
 * exactly the reference ids; the number of mismatching cases is printed. Also: invalid UTF-8 and
 * NULL arguments are refused with the right status, a tiny hand-made vocabulary (256 byte tokens,
 * a few merges and specials, as the demo model has) works, concurrent calls agree, long inputs are
 * fast, and random valid UTF-8 never fails (run under ASan once). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>

#include "model.h"
#include "testutil.h"
#include "tokenizer.h"
#include "util.h"

/* ---------------------------------------------------------------------------------------------
 * a tiny JSON reader: strings (with \uXXXX escapes and surrogate pairs, to UTF-8 bytes that may
 * contain NUL), integer arrays; everything else is skipped */

typedef struct {
  const char *p, *end;
} jcur;

static void jws(jcur *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int hex4(const char *p, unsigned *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    char ch = p[i];
    int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
          : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
    if (d < 0) return -1;
    *v = *v * 16 + (unsigned)d;
  }
  return 0;
}

static size_t put_utf8(unsigned c, char *o) {
  if (c < 0x80) { o[0] = (char)c; return 1; }
  if (c < 0x800) { o[0] = (char)(0xC0 | c >> 6); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
  if (c < 0x10000) {
    o[0] = (char)(0xE0 | c >> 12); o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[2] = (char)(0x80 | (c & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | c >> 18); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F));
  return 4;
}

/* parses a JSON string at c->p; returns malloc'd bytes (NUL-terminated too), length in *n */
static char *jstring(jcur *c, size_t *n) {
  jws(c);
  if (c->p >= c->end || *c->p != '"') return NULL;
  c->p++;
  char *o = malloc((size_t)(c->end - c->p) + 1);
  size_t k = 0;
  while (c->p < c->end && *c->p != '"') {
    if (*c->p != '\\') { o[k++] = *c->p++; continue; }
    c->p++;
    if (c->p >= c->end) break;
    char e = *c->p++;
    unsigned u, lo;
    switch (e) {
      case 'n': o[k++] = '\n'; break;
      case 't': o[k++] = '\t'; break;
      case 'r': o[k++] = '\r'; break;
      case 'b': o[k++] = '\b'; break;
      case 'f': o[k++] = '\f'; break;
      case 'u':
        if (c->end - c->p < 4 || hex4(c->p, &u)) { free(o); return NULL; }
        c->p += 4;
        if (u >= 0xD800 && u < 0xDC00 && c->end - c->p >= 6 && c->p[0] == '\\' && c->p[1] == 'u' &&
            !hex4(c->p + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
          u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
          c->p += 6;
        }
        k += put_utf8(u, o + k);
        break;
      default: o[k++] = e; break; /* \" \\ \/ */
    }
  }
  if (c->p >= c->end) { free(o); return NULL; }
  c->p++;
  o[k] = 0;
  *n = k;
  return o;
}

static void jskip(jcur *c) {
  jws(c);
  if (c->p >= c->end) return;
  if (*c->p == '"') {
    size_t n;
    free(jstring(c, &n));
    return;
  }
  if (*c->p == '[' || *c->p == '{') {
    char close = *c->p == '[' ? ']' : '}';
    c->p++;
    for (;;) {
      jws(c);
      if (c->p >= c->end) return;
      if (*c->p == close) { c->p++; return; }
      if (*c->p == ',' || *c->p == ':') { c->p++; continue; }
      jskip(c);
    }
  }
  while (c->p < c->end && !strchr(",]}: \t\r\n", *c->p)) c->p++;
}

/* integer array at c->p; malloc'd, count in *n (NULL on a syntax error) */
static int32_t *jints(jcur *c, int *n) {
  jws(c);
  if (c->p >= c->end || *c->p != '[') return NULL;
  c->p++;
  int cap = 16, k = 0;
  int32_t *v = malloc(cap * sizeof *v);
  for (;;) {
    jws(c);
    if (c->p >= c->end) { free(v); return NULL; }
    if (*c->p == ']') { c->p++; break; }
    if (*c->p == ',') { c->p++; continue; }
    char *e;
    long x = strtol(c->p, &e, 10);
    if (e == c->p) { free(v); return NULL; }
    c->p = e;
    if (k == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
    v[k++] = (int32_t)x;
  }
  *n = k;
  return v;
}

/* move c->p to the value of key in the object that starts at c->p; 0 when found */
static int jfind(jcur c0, const char *key, jcur *out) {
  jcur c = c0;
  jws(&c);
  if (c.p >= c.end || *c.p != '{') return -1;
  c.p++;
  for (;;) {
    jws(&c);
    if (c.p >= c.end || *c.p == '}') return -1;
    if (*c.p == ',') { c.p++; continue; }
    size_t n;
    char *k = jstring(&c, &n);
    if (!k) return -1;
    jws(&c);
    if (c.p < c.end && *c.p == ':') c.p++;
    int hit = strcmp(k, key) == 0;
    free(k);
    if (hit) { *out = c; return 0; }
    jskip(&c);
  }
}

static char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)sz + 1);
  if (fread(b, 1, (size_t)sz, f) != (size_t)sz) { free(b); fclose(f); return NULL; }
  fclose(f);
  b[sz] = 0;
  *n = (size_t)sz;
  return b;
}

/* ---------------------------------------------------------------------------------------------
 * fixture: the small golden model's tokenizer */

static cosy_model *g_model;
static cosy_tokenizer *g_tok;

static int setup(void **state) {
  (void)state;
  const char *path = tu_small_model();
  if (!path) return 0;
  if (cosy_model_load(path, &g_model)) {
    fprintf(stderr, "cannot load %s: %s\n", path, cosy_last_error());
    return 0;
  }
  double t0 = cosy_now();
  cosy_status st = cosy_tokenizer_create(g_model, &g_tok);
  double dt = cosy_now() - t0;
  if (st) fprintf(stderr, "tokenizer_create: %s\n", cosy_last_error());
  else fprintf(stderr, "tokenizer_create: %d tokens, %d merges in %.3f s\n",
               g_model->hp.n_tokens, g_model->hp.n_merges, dt);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  cosy_tokenizer_free(g_tok);
  cosy_model_free(g_model);
  return 0;
}

#define NEED_TOK() TU_REQUIRE(g_tok != NULL, "small model (tu_small_model) not available")

static int same_ids(const int32_t *a, int na, const int32_t *b, int nb) {
  if (na != nb) return 0;
  for (int i = 0; i < na; i++)
    if (a[i] != b[i]) return 0;
  return 1;
}

static void print_ids(const char *what, const int32_t *v, int n) {
  char buf[2048];
  size_t k = 0;
  for (int i = 0; i < n && k < sizeof buf - 16; i++) k += (size_t)snprintf(buf + k, sizeof buf - k, " %d", v[i]);
  print_message("  %s (%d):%s\n", what, n, buf);
}

/* ---------------------------------------------------------------------------------------------
 * tests */

static void test_golden_cases(void **state) {
  (void)state;
  NEED_TOK();
  const char *path = tu_shared("golden/tokenizer/cases.jsonl");
  size_t fsz;
  char *buf = path ? read_file(path, &fsz) : NULL;
  TU_REQUIRE(buf != NULL, "golden/tokenizer/cases.jsonl not found");
  int n_cases = 0, n_bad = 0;
  double t0 = cosy_now();
  for (char *line = buf; line < buf + fsz;) {
    char *nl = memchr(line, '\n', (size_t)(buf + fsz - line));
    char *le = nl ? nl : buf + fsz;
    jcur c = {line, le}, v;
    line = le + 1;
    jws(&c);
    if (c.p >= c.end) continue;
    size_t tn = 0;
    int nref = 0;
    char *text = NULL;
    int32_t *ref = NULL;
    if (!jfind(c, "text", &v)) text = jstring(&v, &tn);
    if (!jfind(c, "ids", &v)) ref = jints(&v, &nref);
    assert_non_null(text);
    assert_non_null(ref);
    int32_t *ids = NULL, n = -1;
    cosy_status st = cosy_tokenize(g_tok, text, tn, &ids, &n);
    n_cases++;
    if (st != COSY_OK || !same_ids(ids, n, ref, nref)) {
      n_bad++;
      print_message("MISMATCH case %d (%zu bytes) \"%s\": status %d %s\n", n_cases, tn, text, st,
                    st ? cosy_last_error() : "");
      print_ids("got", ids, n);
      print_ids("ref", ref, nref);
    }
    free(ids);
    free(text);
    free(ref);
  }
  free(buf);
  print_message("golden tokenizer cases: %d, mismatching: %d (%.2f ms total)\n", n_cases, n_bad,
                (cosy_now() - t0) * 1e3);
  assert_true(n_cases >= 60);
  assert_int_equal(n_bad, 0);
}

static void check_input(const char *json, size_t jn, const char *key, const char *npy) {
  jcur c = {json, json + jn}, v;
  assert_int_equal(jfind(c, key, &v), 0);
  size_t tn;
  char *text = jstring(&v, &tn);
  assert_non_null(text);
  int nd;
  int64_t shape[8];
  int32_t *ref = tu_npy_i32(tu_shared(npy), &nd, shape);
  assert_non_null(ref);
  int32_t *ids = NULL, n = 0;
  assert_int_equal(cosy_tokenize(g_tok, text, tn, &ids, &n), COSY_OK);
  int ok = same_ids(ids, n, ref, (int)tu_numel(nd, shape));
  print_message("%s: %d ids, %s\n", npy, n, ok ? "identical" : "DIFFERENT");
  if (!ok) {
    print_ids("got", ids, n);
    print_ids("ref", ref, (int)tu_numel(nd, shape));
  }
  assert_true(ok);
  free(ids);
  free(ref);
  free(text);
}

static void test_golden_inputs(void **state) {
  (void)state;
  NEED_TOK();
  const char *path = tu_shared("golden/inputs/texts.json");
  size_t n;
  char *json = path ? read_file(path, &n) : NULL;
  TU_REQUIRE(json != NULL, "golden/inputs/texts.json not found");
  check_input(json, n, "prompt_text", "golden/inputs/prompt_text_ids.npy");
  check_input(json, n, "tts_text", "golden/inputs/tts_text_ids.npy");
  free(json);
}

static void test_find(void **state) {
  (void)state;
  NEED_TOK();
  assert_int_equal(cosy_tokenizer_find(g_tok, "<|endofprompt|>"), g_model->hp.endofprompt_id);
  assert_int_equal(cosy_tokenizer_find(g_tok, "<|endofprompt|>"), 151646);
  assert_int_equal(cosy_tokenizer_find(g_tok, "<|endoftext|>"), g_model->hp.eos_id);
  assert_int_equal(cosy_tokenizer_find(g_tok, "[breath]"), 151647);
  assert_int_equal(cosy_tokenizer_find(g_tok, "Hello"), 9707);
  assert_int_equal(cosy_tokenizer_find(g_tok, "\xC4\xA0world"), 1879); /* "Ġworld" */
  assert_int_equal(cosy_tokenizer_find(g_tok, "no-such-token-xyz"), -1);
  assert_int_equal(cosy_tokenizer_find(g_tok, NULL), -1);
  assert_int_equal(cosy_tokenizer_find(NULL, "a"), -1);
  assert_int_equal(cosy_tokenizer_n_tokens(g_tok), g_model->hp.n_tokens);
}

static void test_invalid_utf8(void **state) {
  (void)state;
  NEED_TOK();
  static const struct { const char *s; size_t n; long off; const char *what; } bad[] = {
      {"ab\xC0\xAF", 4, 2, "overlong 2-byte"},
      {"\xE0\x80\xAF", 3, 0, "overlong 3-byte"},
      {"xyz\xF0\x80\x80\xAF", 7, 3, "overlong 4-byte"},
      {"ab\xE4\xB8", 4, 2, "truncated at the end"},
      {"a\xE4\xB8z", 4, 1, "truncated before ASCII"},
      {"\x80", 1, 0, "lone continuation"},
      {"hello \xBF world", 13, 6, "lone continuation in the middle"},
      {"\xED\xA0\x80", 3, 0, "high surrogate"},
      {"ok\xED\xBF\xBF", 5, 2, "low surrogate"},
      {"\xF4\x90\x80\x80", 4, 0, "beyond U+10FFFF"},
      {"\xFF", 1, 0, "0xFF"},
      {"<|endofprompt|>\xFE", 16, 15, "after a special token"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int32_t *ids = (int32_t *)1, n = 7;
    cosy_status st = cosy_tokenize(g_tok, bad[i].s, bad[i].n, &ids, &n);
    char want[64];
    snprintf(want, sizeof want, "offset %ld", bad[i].off);
    const char *msg = cosy_last_error();
    print_message("%-32s -> %d \"%s\"\n", bad[i].what, st, msg);
    assert_int_equal(st, COSY_ERR_TEXT);
    assert_null(ids);
    assert_int_equal(n, 0);
    assert_non_null(strstr(msg, want));
  }
  /* the same bytes cut before the bad byte are fine */
  int32_t *ids = NULL, n = 0;
  assert_int_equal(cosy_tokenize(g_tok, "ab\xC0\xAF", 2, &ids, &n), COSY_OK);
  assert_true(n >= 1);
  free(ids);
}

static void test_null_args(void **state) {
  (void)state;
  NEED_TOK();
  int32_t *ids = NULL, n = 0;
  assert_int_equal(cosy_tokenize(NULL, "a", 1, &ids, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_tokenize(g_tok, NULL, 1, &ids, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_tokenize(g_tok, NULL, 0, &ids, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_tokenize(g_tok, "a", 1, NULL, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_tokenize(g_tok, "a", 1, &ids, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_tokenize(g_tok, "a", (size_t)-1, &ids, &n), COSY_ERR_INVALID_ARG);
  cosy_tokenizer *t = (cosy_tokenizer *)1;
  assert_int_equal(cosy_tokenizer_create(NULL, &t), COSY_ERR_INVALID_ARG);
  assert_null(t);
  assert_int_equal(cosy_tokenizer_create(g_model, NULL), COSY_ERR_INVALID_ARG);
  cosy_tokenizer_free(NULL);
  /* empty text: success, no ids, a freeable pointer */
  assert_int_equal(cosy_tokenize(g_tok, "", 0, &ids, &n), COSY_OK);
  assert_int_equal(n, 0);
  free(ids);
}

/* extra properties not covered by the golden cases */
static void expect_same(const char *a, size_t na, const char *b, size_t nb) {
  int32_t *ia = NULL, *ib = NULL, n1 = 0, n2 = 0;
  assert_int_equal(cosy_tokenize(g_tok, a, na, &ia, &n1), COSY_OK);
  assert_int_equal(cosy_tokenize(g_tok, b, nb, &ib, &n2), COSY_OK);
  assert_true(same_ids(ia, n1, ib, n2));
  free(ia);
  free(ib);
}

static void test_properties(void **state) {
  (void)state;
  NEED_TOK();
  /* NFC: decomposed input equals precomposed input (e + U+0301, A + U+030A; Hangul jamo) */
  expect_same("cafe\xCC\x81", 6, "caf\xC3\xA9", 5);
  expect_same("A\xCC\x8A", 3, "\xC3\x85", 2);
  expect_same("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB", 9, "\xED\x95\x9C", 3); /* 한 */
  /* canonical reordering: q + dot below + dot above == q + dot above + dot below */
  expect_same("q\xCC\x87\xCC\xA3", 5, "q\xCC\xA3\xCC\x87", 5);
  /* NUL is an ordinary character */
  int32_t *ids = NULL, n = 0;
  assert_int_equal(cosy_tokenize(g_tok, "a\0b", 3, &ids, &n), COSY_OK);
  assert_int_equal(n, 3);
  free(ids);
  /* a special token between letters is atomic; its neighbours are tokenized on their own */
  assert_int_equal(cosy_tokenize(g_tok, "ab[breath]cd", 12, &ids, &n), COSY_OK);
  int found = 0;
  for (int i = 0; i < n; i++) found += ids[i] == 151647;
  assert_int_equal(found, 1);
  free(ids);
}

/* a long input must stay fast (heap BPE, no quadratic passes) */
static void test_long_input(void **state) {
  (void)state;
  NEED_TOK();
  size_t n = 200000;
  char *s = malloc(n);
  for (size_t i = 0; i < n; i++) s[i] = 'a';
  int32_t *ids = NULL, k = 0;
  double t0 = cosy_now();
  assert_int_equal(cosy_tokenize(g_tok, s, n, &ids, &k), COSY_OK);
  double dt1 = cosy_now() - t0;
  free(ids);
  for (size_t i = 0; i < n; i++) s[i] = "the quick, brown fox!\n 123 "[i % 27];
  t0 = cosy_now();
  assert_int_equal(cosy_tokenize(g_tok, s, n, &ids, &k), COSY_OK);
  double dt2 = cosy_now() - t0;
  print_message("200 kB of 'a': %.1f ms; 200 kB of prose: %.1f ms (%d ids)\n", dt1 * 1e3, dt2 * 1e3,
                k);
  assert_true(dt1 < 5.0 && dt2 < 5.0);
  free(ids);
  free(s);
}

/* random valid UTF-8 (all planes, combining marks, specials' bytes) never fails */
static void test_random_utf8(void **state) {
  (void)state;
  NEED_TOK();
  uint64_t r = 88172645463325252ULL;
  char buf[4096];
  for (int iter = 0; iter < 300; iter++) {
    size_t k = 0;
    int len = (int)(r % 600);
    for (int i = 0; i < len; i++) {
      r ^= r << 13; r ^= r >> 7; r ^= r << 17;
      unsigned c;
      switch (r % 6) {
        case 0: c = (unsigned)(r >> 8) % 0x80; break;
        case 1: c = 0x300 + (unsigned)(r >> 8) % 0x70; break;       /* combining marks */
        case 2: c = 0x1100 + (unsigned)(r >> 8) % 0x200; break;     /* Hangul jamo */
        case 3: c = 0xAC00 + (unsigned)(r >> 8) % 11172; break;     /* Hangul syllables */
        case 4: c = "<|[]> \n\r'sS"[(r >> 8) % 12]; break;
        default: c = (unsigned)(r >> 8) % 0x110000; break;
      }
      if (c >= 0xD800 && c < 0xE000) c = 'x';
      k += put_utf8(c, buf + k);
    }
    int32_t *ids = NULL, n = 0;
    cosy_status st = cosy_tokenize(g_tok, buf, k, &ids, &n);
    if (st) print_message("iter %d: %s\n", iter, cosy_last_error());
    assert_int_equal(st, COSY_OK);
    for (int i = 0; i < n; i++) assert_true(ids[i] >= 0 && ids[i] < g_model->hp.n_tokens);
    free(ids);
  }
}

/* concurrent calls on one tokenizer agree with a serial run */
typedef struct { const char *text; int32_t *ref; int nref; int ok; } thr_arg;

static void *thr_main(void *p) {
  thr_arg *a = (thr_arg *)p;
  a->ok = 1;
  for (int it = 0; it < 200; it++) {
    int32_t *ids = NULL, n = 0;
    if (cosy_tokenize(g_tok, a->text, strlen(a->text), &ids, &n) || !same_ids(ids, n, a->ref, a->nref))
      a->ok = 0;
    free(ids);
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  NEED_TOK();
  static const char *texts[4] = {
      "You are a helpful assistant.<|endofprompt|>\xE5\xB8\x8C\xE6\x9C\x9B",
      "The quick brown fox jumps over the lazy dog while seven wizards quietly hum.",
      "caf\x65\xCC\x81 [AA1][B] 3.14159 and 2,718,281",
      "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88"};
  thr_arg a[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    a[i].text = texts[i];
    int32_t n = 0;
    assert_int_equal(cosy_tokenize(g_tok, texts[i], strlen(texts[i]), &a[i].ref, &n), COSY_OK);
    a[i].nref = n;
  }
  for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, thr_main, &a[i]), 0);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++) {
    assert_true(a[i].ok);
    free(a[i].ref);
  }
}

/* ---------------------------------------------------------------------------------------------
 * a tiny vocabulary like the demo model's: 256 byte tokens, a few merges, a few specials */

static uint32_t b2u(int b) {
  if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
    return (uint32_t)b;
  int n = 0;
  for (int x = 0; x < b; x++)
    if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) n++;
  return 256u + (uint32_t)n;
}

static void test_tiny_vocab(void **state) {
  (void)state;
  enum { NB = 256 };
  static const char *extra[] = {"he", "ll", "hell", "hello", "\xC4\xA0w", "\xC4\xA0wo", "or",
                                "<|endoftext|>", "[breath]", "[breath]x", "<|endofprompt|>"};
  static const int32_t types_extra[] = {1, 1, 1, 1, 1, 1, 1, 3, 4, 4, 4};
  static const char *merges[] = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "\xC4\xA0w o",
                                 "o r"};
  int ne = (int)(sizeof extra / sizeof extra[0]), nm = (int)(sizeof merges / sizeof merges[0]);
  char bytes[NB][4];
  gguf_str toks[NB + 16], mg[16];
  int32_t types[NB + 16];
  for (int b = 0; b < NB; b++) {
    size_t k = put_utf8(b2u(b), bytes[b]);
    toks[b].p = bytes[b];
    toks[b].n = k;
    types[b] = 1;
  }
  for (int i = 0; i < ne; i++) {
    toks[NB + i].p = extra[i];
    toks[NB + i].n = strlen(extra[i]);
    types[NB + i] = types_extra[i];
  }
  for (int i = 0; i < nm; i++) {
    mg[i].p = merges[i];
    mg[i].n = strlen(merges[i]);
  }
  cosy_model m;
  memset(&m, 0, sizeof m);
  m.hp.n_tokens = NB + ne;
  m.hp.n_merges = nm;
  m.tokens = toks;
  m.token_types = types;
  m.merges = mg;
  cosy_tokenizer *t = NULL;
  assert_int_equal(cosy_tokenizer_create(&m, &t), COSY_OK);
  const char *text = "hello world<|endofprompt|>[breath]x[breath]hello";
  int32_t *ids = NULL, n = 0;
  assert_int_equal(cosy_tokenize(t, text, strlen(text), &ids, &n), COSY_OK);
  /* hello | Ġwo r l d | <|endofprompt|> | [breath]x (longest) | [breath] | hello */
  const int32_t want[] = {NB + 3, NB + 5, 'r', 'l', 'd', NB + 10, NB + 9, NB + 8, NB + 3};
  print_ids("tiny vocab", ids, n);
  assert_true(same_ids(ids, n, want, (int)(sizeof want / sizeof want[0])));
  free(ids);
  assert_int_equal(cosy_tokenizer_find(t, "[breath]"), NB + 8);
  cosy_tokenizer_free(t);
  /* a merge naming an unknown token, a malformed merge, a missing byte token: refused */
  static const char *bad_merge = "q zz";
  mg[0].p = bad_merge;
  mg[0].n = strlen(bad_merge);
  assert_int_equal(cosy_tokenizer_create(&m, &t), COSY_ERR_MODEL_FORMAT);
  mg[0].p = "he";
  mg[0].n = 2;
  assert_int_equal(cosy_tokenizer_create(&m, &t), COSY_ERR_MODEL_FORMAT);
  mg[0].p = merges[0];
  mg[0].n = strlen(merges[0]);
  toks[65].p = "A_";
  toks[65].n = 2;
  assert_int_equal(cosy_tokenizer_create(&m, &t), COSY_ERR_MODEL_FORMAT);
  print_message("refusal message: %s\n", cosy_last_error());
  assert_null(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_golden_cases), cmocka_unit_test(test_golden_inputs),
      cmocka_unit_test(test_find),         cmocka_unit_test(test_invalid_utf8),
      cmocka_unit_test(test_null_args),    cmocka_unit_test(test_properties),
      cmocka_unit_test(test_long_input),   cmocka_unit_test(test_random_utf8),
      cmocka_unit_test(test_threads),      cmocka_unit_test(test_tiny_vocab),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
