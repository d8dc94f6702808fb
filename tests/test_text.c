/* test_text.c - the text front end (lib/text) against the official front end's outputs in
 * tests/data/text (made by tools/golden_text.py; format in its docstring), compared exactly.
 *
 * The wetext grammars are read from $COSY_WETEXT_FSTS (the `fsts` directory of the installed
 * wetext wheel; `make test` sets it when python3 finds wetext), else from the test model file
 * (cosyvoice-convert packs them); tests that need them SKIP without them. English split lengths
 * need the real tokenizer: the small test model ($COSY_TEST_MODEL); test_engine checks that the
 * engine normalizes when that model holds the grammars. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine.h"
#include "model.h"
#include "testutil.h"
#include "text/fst.h"
#include "text/normalize.h"
#include "tokenizer.h"
#include "util.h"

static cosy_text_norm *g_tn;       /* full, or NULL when the grammars are absent */
static cosy_model *g_model;
static cosy_tokenizer *g_tok;
static void *g_bufs[COSY_TN_N_GRAMMARS];
static size_t g_sizes[COSY_TN_N_GRAMMARS];
static const char *const FST_FILES[COSY_TN_N_GRAMMARS] = {
    "zh/tn/tagger.fst", "zh/tn/verbalizer.fst", "en/tn/tagger.fst", "en/tn/verbalizer.fst"};

static void *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *b = malloc(sz > 0 ? (size_t)sz : 1);
  if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *n = (size_t)sz;
  return b;
}

static int setup(void **state) {
  (void)state;
  const char *model = tu_small_model();
  if (model && cosy_model_load(model, &g_model) == COSY_OK)
    cosy_tokenizer_create(g_model, &g_tok);
  const char *dir = getenv("COSY_WETEXT_FSTS");
  if (!dir || !dir[0]) { /* the grammars packed into the test model, if any */
    if (g_model && cosy_text_norm_create(g_model->f, g_tok, &g_tn) == COSY_OK &&
        !cosy_text_norm_is_full(g_tn)) {
      cosy_text_norm_free(g_tn);
      g_tn = NULL;
    }
    return 0;
  }
  for (int i = 0; i < COSY_TN_N_GRAMMARS; i++) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, FST_FILES[i]);
    if (!(g_bufs[i] = slurp(p, &g_sizes[i]))) {
      fprintf(stderr, "note: %s not readable\n", p);
      return 0;
    }
  }
  if (cosy_text_norm_create_from_buffers((const void *const *)g_bufs, g_sizes, g_tok, &g_tn)) {
    fprintf(stderr, "grammars: %s\n", cosy_last_error());
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  cosy_text_norm_free(g_tn);
  cosy_tokenizer_free(g_tok);
  cosy_model_free(g_model);
  for (int i = 0; i < COSY_TN_N_GRAMMARS; i++) free(g_bufs[i]);
  return 0;
}

/* ---- data files -------------------------------------------------------------------------- */

#define MAXF 64
typedef struct rec {
  char kind;
  char *f[MAXF];
  int nf;
} rec;

static char *unesc(const char *s, size_t n) {
  char *o = (char *)malloc(n + 1);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\\' && i + 1 < n) {
      char c = s[++i];
      o[k++] = c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : c;
    } else {
      o[k++] = s[i];
    }
  }
  o[k] = '\0';
  return o;
}

/* all records of tests/data/text/<name>.tsv; *n records */
static rec *load_tsv(const char *name, int *n) {
  char path[256];
  snprintf(path, sizeof path, "tests/data/text/%s.tsv", name);
  size_t sz;
  char *b = (char *)slurp(path, &sz);
  *n = 0;
  if (!b) return NULL;
  rec *r = (rec *)calloc(sz / 2 + 1, sizeof(rec));
  size_t i = 0;
  while (i < sz) {
    size_t e = i;
    while (e < sz && b[e] != '\n') e++;
    if (e > i && b[i] != '#') {
      rec *x = &r[(*n)++];
      x->kind = b[i];
      size_t a = i + 2;
      while (a <= e && x->nf < MAXF) {
        size_t t = a;
        while (t < e && b[t] != '\t') t++;
        x->f[x->nf++] = unesc(b + a, t - a);
        a = t + 1;
      }
    }
    i = e + 1;
  }
  free(b);
  return r;
}

static void free_recs(rec *r, int n) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < r[i].nf; j++) free(r[i].f[j]);
  free(r);
}

/* run every record of a file; returns failures, prints each */
static int run_file(const char *name, int *total) {
  int n, fails = 0;
  rec *r = load_tsv(name, &n);
  assert_non_null(r);
  *total = 0;
  for (int i = 0; i < n; i++) {
    rec *x = &r[i];
    const char *in = x->f[0];
    char *got = NULL;
    int ok = 1;
    if (x->kind == 'S' && !g_tok && strcmp(name, "zh") != 0) continue; /* en lengths: tokenizer */
    (*total)++;
    if (x->kind == 'N') {
      assert_int_equal(cosy_text_normalize(g_tn, in, 0, &got), COSY_OK);
      ok = x->nf == 2 && strcmp(got, x->f[1]) == 0;
      if (!ok) printf("FAIL %s N [%s]\n   want [%s]\n   got  [%s]\n", name, in, x->f[1], got);
    } else if (x->kind == 'W') {
      assert_int_equal(cosy_text_wetext(g_tn, in, &got), COSY_OK);
      ok = x->nf == 2 && strcmp(got, x->f[1]) == 0;
      if (!ok) printf("FAIL %s W [%s]\n   want [%s]\n   got  [%s]\n", name, in, x->f[1], got);
    } else if (x->kind == 'P') {
      got = cosy_text_spell_out_numbers(in);
      ok = x->nf == 2 && strcmp(got, x->f[1]) == 0;
      if (!ok) printf("FAIL %s P [%s]\n   want [%s]\n   got  [%s]\n", name, in, x->f[1], got);
    } else if (x->kind == 'S') {
      char **seg;
      int ns;
      assert_int_equal(cosy_text_split(g_tn, in, 0, &seg, &ns), COSY_OK);
      ok = ns == x->nf - 1;
      for (int j = 0; ok && j < ns; j++) ok = strcmp(seg[j], x->f[j + 1]) == 0;
      if (!ok) {
        printf("FAIL %s S [%s]: want %d segments, got %d\n", name, in, x->nf - 1, ns);
        for (int j = 0; j < ns; j++) printf("   got  [%s]\n", seg[j]);
        for (int j = 1; j < x->nf; j++) printf("   want [%s]\n", x->f[j]);
      }
      cosy_text_segments_free(seg, ns);
    }
    free(got);
    fails += !ok;
  }
  free_recs(r, n);
  return fails;
}

static void check_file(const char *name) {
  TU_REQUIRE(g_tn, "wetext grammars not found (set COSY_WETEXT_FSTS to the wetext wheel's fsts "
                   "directory: pip install wetext)");
  int total, fails = run_file(name, &total);
  printf("text parity %s: %d / %d cases pass%s\n", name, total - fails, total,
         g_tok ? "" : " (English splits skipped: no test model for the tokenizer)");
  assert_int_equal(fails, 0);
}

static void test_zh(void **state) { (void)state; check_file("zh"); }
static void test_en(void **state) { (void)state; check_file("en"); }
static void test_raw(void **state) { (void)state; check_file("raw"); }
static void test_long(void **state) { (void)state; check_file("long"); }

/* number spelling needs no grammar */
static void test_numbers(void **state) {
  (void)state;
  int total, fails = run_file("numbers", &total);
  printf("text parity numbers: %d / %d cases pass\n", total - fails, total);
  assert_int_equal(fails, 0);
}

/* without grammars: the minimal rule; REQUIRE_FULL refuses */
static void test_minimal(void **state) {
  (void)state;
  char *out;
  assert_int_equal(cosy_text_normalize(NULL, "  a \t b\n\nc  ", 0, &out), COSY_OK);
  assert_string_equal(out, "a b c");
  free(out);
  assert_int_equal(cosy_text_normalize(NULL, "x", COSY_TN_REQUIRE_FULL, &out),
                   COSY_ERR_UNSUPPORTED);
  assert_null(out);
  assert_int_equal(cosy_text_normalize(NULL, "bad \xff", 0, &out), COSY_ERR_TEXT);
  char **seg;
  int n;
  assert_int_equal(cosy_text_split(NULL, " one. two. ", 0, &seg, &n), COSY_OK);
  assert_int_equal(n, 1); /* short: merged into one piece */
  assert_string_equal(seg[0], "one. two.");
  cosy_text_segments_free(seg, n);
  /* long text is still cut without grammars (lengths in bytes without a tokenizer) */
  char longt[4000] = "";
  for (int i = 0; i < 40; i++) strcat(longt, "This sentence has some words in it. ");
  assert_int_equal(cosy_text_split(NULL, longt, 0, &seg, &n), COSY_OK);
  assert_true(n > 10);
  for (int i = 0; i < n; i++) assert_true(strlen(seg[i]) <= 120);
  cosy_text_segments_free(seg, n);
  assert_int_equal(cosy_text_split(NULL, "...!!!", 0, &seg, &n), COSY_OK);
  assert_int_equal(n, 0); /* only punctuation */
  cosy_text_segments_free(seg, n);
  assert_int_equal(cosy_text_split(NULL, "   ", 0, &seg, &n), COSY_OK);
  assert_int_equal(n, 0);
  cosy_text_segments_free(seg, n);
  /* empty text: no segment (the official code returns [''], a deliberate difference:
   * tests/data/text/README.md), with or without the grammars */
  for (int full = 0; full < 2; full++) {
    if (full && !g_tn) continue;
    assert_int_equal(cosy_text_split(full ? g_tn : NULL, "", 0, &seg, &n), COSY_OK);
    assert_int_equal(n, 0);
    cosy_text_segments_free(seg, n);
    assert_int_equal(cosy_text_normalize(full ? g_tn : NULL, "", 0, &out), COSY_OK);
    assert_string_equal(out, "");
    free(out);
  }
  cosy_text_norm *tn;
  assert_int_equal(cosy_text_norm_create(NULL, NULL, &tn), COSY_OK);
  assert_int_equal(cosy_text_norm_is_full(tn), 0);
  cosy_text_norm_free(tn);
}

static void test_punct(void **state) {
  (void)state;
  assert_true(cosy_text_is_only_punctuation(""));
  assert_true(cosy_text_is_only_punctuation("。！？…—$+"));
  assert_false(cosy_text_is_only_punctuation("a."));
  assert_false(cosy_text_is_only_punctuation("。 "));
}

/* corrupted grammar files are refused, never crash */
static void test_bad_fst(void **state) {
  (void)state;
  cosy_fst *f;
  unsigned char junk[64] = {0};
  assert_int_equal(cosy_fst_load(junk, sizeof junk, "junk", &f), COSY_ERR_MODEL_FORMAT);
  TU_REQUIRE(g_bufs[0], "wetext grammars not found");
  for (size_t cut = 0; cut < g_sizes[0]; cut += g_sizes[0] / 97 + 1)
    assert_int_equal(cosy_fst_load(g_bufs[0], cut, "cut", &f), COSY_ERR_MODEL_FORMAT);
  const void *three[COSY_TN_N_GRAMMARS] = {g_bufs[0], g_bufs[1], g_bufs[2], NULL};
  cosy_text_norm *tn;
  assert_int_equal(cosy_text_norm_create_from_buffers(three, g_sizes, NULL, &tn),
                   COSY_ERR_MODEL_FORMAT);
}

/* the normalizer is shared by threads (each call takes its own scratch from the pool) */
static const char *const THREAD_TEXTS[] = {
    "今天是2024年3月5日下午3点，气温-5.5℃。", "I have $3.50 on 12/05 at 3:30pm, Dr. Smith.",
    "电话13812345678，比分3:2，占比45%。", "The 1st, 2nd and 3rd place; 100 km/h, 5kg, 20%."};
#define N_TT (int)(sizeof THREAD_TEXTS / sizeof THREAD_TEXTS[0])
static char *g_thread_want[N_TT];

static void *thread_main(void *arg) {
  long bad = 0;
  for (int it = 0; it < 20; it++) {
    int k = (int)(((long)arg + it) % N_TT);
    char *got;
    if (cosy_text_normalize(g_tn, THREAD_TEXTS[k], 0, &got) != COSY_OK) return (void *)1;
    bad += strcmp(got, g_thread_want[k]) != 0;
    free(got);
  }
  return (void *)bad;
}

static void test_threads(void **state) {
  (void)state;
  TU_REQUIRE(g_tn, "wetext grammars not found");
  for (int k = 0; k < N_TT; k++)
    assert_int_equal(cosy_text_normalize(g_tn, THREAD_TEXTS[k], 0, &g_thread_want[k]), COSY_OK);
  pthread_t th[4];
  for (long i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, thread_main, (void *)i), 0);
  long bad = 0;
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(th[i], &r);
    bad += (long)r;
  }
  for (int k = 0; k < N_TT; k++) free(g_thread_want[k]);
  assert_int_equal(bad, 0);
}

/* random text from an alphabet of digits, letters, CJK, punctuation and whitespace: no failure,
 * valid UTF-8 out, no segment that is only punctuation */
static void test_random(void **state) {
  (void)state;
  TU_REQUIRE(g_tn, "wetext grammars not found");
  static const char *const alpha[] = {
      "0", "1", "2", "5", "9", "a", "Z", " ", "  ", "\n", "\t", ".", ",", ":", "-", "/", "$", "%",
      "\"", "'", "(", ")", "\xe4\xbd\xa0", "\xe5\xb9\xb4", "\xe3\x80\x82", "\xef\xbc\x8c",
      "\xe2\x80\x9d", "\xc2\xb2", "\xe2\x80\x94", "<|", "|>", "\xf0\x9f\x98\x80", "km"};
  unsigned seed = 12345;
  char buf[512];
  for (int it = 0; it < 300; it++) {
    size_t o = 0;
    int len = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 40;
    for (int j = 0; j < len; j++) {
      const char *a = alpha[((seed = seed * 1103515245u + 12345u) >> 16) % (sizeof alpha / sizeof *alpha)];
      size_t l = strlen(a);
      memcpy(buf + o, a, l);
      o += l;
    }
    buf[o] = '\0';
    char **seg;
    int n;
    assert_int_equal(cosy_text_split(g_tn, buf, 0, &seg, &n), COSY_OK);
    for (int j = 0; j < n; j++) {
      assert_int_equal(cosy_utf8_invalid_at(seg[j], strlen(seg[j])), -1);
      if (!(strstr(buf, "<|") && strstr(buf, "|>"))) assert_false(cosy_text_is_only_punctuation(seg[j]));
    }
    cosy_text_segments_free(seg, n);
  }
}

/* the engine normalizes the text it is given (zero-shot: prompt text untouched, it holds <|...|>):
 * "23" becomes "twenty three" unless COSY_SYNTH_NO_TEXT_NORMALIZATION is set */
static int32_t text_tokens_of(cosy_engine *e, cosy_voice *v, const char *text, uint32_t flags) {
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.flags = flags;
  p.seed = 1;
  p.max_tokens = p.min_tokens = 4;
  cosy_request *r;
  assert_int_equal(cosy_request_submit(e, v, text, &p, NULL, NULL, &r), COSY_OK);
  float buf[4096];
  int64_t got;
  while (cosy_request_read(r, buf, 4096, &got, -1) == COSY_OK && got > 0) {
  }
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  cosy_request_stats st;
  cosy_request_stats_init(&st, sizeof st);
  assert_int_equal(cosy_request_get_stats(r, &st), COSY_OK);
  cosy_request_release(r);
  return st.n_text_tokens;
}

static void test_engine(void **state) {
  (void)state;
  const char *model = tu_small_model();
  TU_REQUIRE(model && tu_shared_dir() && g_tok, "no test model / shared data");
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  c.model_path = model;
  c.device = COSY_DEVICE_CPU;
  cosy_engine *e;
  assert_int_equal(cosy_engine_create(&c, &e), COSY_OK);
  if (!cosy_text_norm_is_full(e->tn)) {
    cosy_engine_destroy(e);
    TU_REQUIRE(0, "the test model has no text normalization grammars (convert it with wetext "
                  "installed: tools/setup.sh)");
  }
  cosy_voice *v = tu_golden_voice(e, "You are a helpful assistant.<|endofprompt|>Hello.");
  assert_non_null(v);
  int32_t raw = text_tokens_of(e, v, "I have 23 apples.", COSY_SYNTH_NO_TEXT_NORMALIZATION);
  int32_t norm = text_tokens_of(e, v, "I have 23 apples.", 0);
  int32_t *ids, a, b;
  assert_int_equal(cosy_tokenize(g_tok, "I have 23 apples.", 17, &ids, &a), COSY_OK);
  free(ids);
  assert_int_equal(cosy_tokenize(g_tok, "I have twenty three apples.", 27, &ids, &b), COSY_OK);
  free(ids);
  printf("engine: %d text tokens as given, %d normalized\n", raw, norm);
  assert_int_equal(norm - raw, b - a);
  cosy_voice_release(v);
  cosy_engine_destroy(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_minimal), cmocka_unit_test(test_punct),
      cmocka_unit_test(test_numbers), cmocka_unit_test(test_bad_fst),
      cmocka_unit_test(test_zh),      cmocka_unit_test(test_en),
      cmocka_unit_test(test_raw),     cmocka_unit_test(test_long),
      cmocka_unit_test(test_threads), cmocka_unit_test(test_random),
      cmocka_unit_test(test_engine),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
