/* test_text.c - the text front end (lib/text) against the official front end's outputs in
 * tests/data/text (made by tools/golden_text.py; format in its docstring), compared exactly.
 *
 * The wetext grammars are read from $COSY_WETEXT_FSTS (the `fsts` directory of the installed
 * wetext wheel; `make test` sets it when python3 finds wetext), else from the test model file
 * (tools/convert.py packs them); tests that need them SKIP without them. English split lengths need the real tokenizer: the small test model ($COSY_TEST_MODEL). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model.h"
#include "testutil.h"
#include "text/fst.h"
#include "text/normalize.h"
#include "tokenizer.h"

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
  assert_int_equal(n, 1);
  assert_string_equal(seg[0], "one. two.");
  cosy_text_segments_free(seg, n);
  assert_int_equal(cosy_text_split(NULL, "   ", 0, &seg, &n), COSY_OK);
  assert_int_equal(n, 0);
  cosy_text_segments_free(seg, n);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_minimal), cmocka_unit_test(test_punct),
      cmocka_unit_test(test_numbers), cmocka_unit_test(test_bad_fst),
      cmocka_unit_test(test_zh),      cmocka_unit_test(test_en),
      cmocka_unit_test(test_raw),     cmocka_unit_test(test_long),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
