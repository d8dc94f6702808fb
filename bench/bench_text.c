/* bench_text.c - speed of the text front end on one core: normalization + splitting
 * (cosy_text_split: wetext TN, the language rules, split_paragraph, the punctuation filter) +
 * tokenization of every segment (cosy_tokenize), per 1,000 characters of input.
 *
 *   build/bench/bench_text MODEL.gguf [TEXT.txt ...] [--iters N] [--repeat R] [--fsts DIR]
 *
 * MODEL.gguf gives the tokenizer and, unless --fsts names the wetext wheel's fsts/ directory,
 * the grammars (docs/model-format.md section 9). Default texts: bench/text/en.txt and zh.txt.
 * --repeat R uses each file's content R times over (a longer text).
 * Prints, per text: characters, segments, tokens, the median and the best time of N runs (after
 * one warm-up run), ms per 1,000 characters, and the normalizer's memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "text/normalize.h"
#include "tokenizer.h"
#include "util.h"

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = (char *)malloc((size_t)sz + 1);
  if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) b[sz] = '\0';
  if (n) *n = (size_t)sz;
  return b;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static long utf8_chars(const char *s) {
  long k = 0;
  for (; *s; s++) k += ((unsigned char)*s & 0xC0) != 0x80;
  return k;
}

int main(int argc, char **argv) {
  const char *model = NULL, *fsts = NULL;
  const char *texts[16];
  int nt = 0, iters = 20, repeat = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fsts") && i + 1 < argc) fsts = argv[++i];
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
    else if (!model) model = argv[i];
    else if (nt < 16) texts[nt++] = argv[i];
  }
  if (!model) {
    fprintf(stderr, "usage: %s MODEL.gguf [TEXT.txt ...] [--iters N] [--fsts DIR]\n", argv[0]);
    return 2;
  }
  if (!nt) {
    texts[nt++] = "bench/text/en.txt";
    texts[nt++] = "bench/text/zh.txt";
  }
  if (iters < 1) iters = 1;
  cosy_model *m;
  cosy_tokenizer *tok;
  if (cosy_model_load(model, &m) || cosy_tokenizer_create(m, &tok)) {
    fprintf(stderr, "%s\n", cosy_last_error());
    return 1;
  }
  cosy_text_norm *tn = NULL;
  cosy_status st;
  double t0 = cosy_now();
  if (fsts) {
    static const char *const files[COSY_TN_N_GRAMMARS] = {
        "zh/tn/tagger.fst", "zh/tn/verbalizer.fst", "en/tn/tagger.fst", "en/tn/verbalizer.fst"};
    const void *bufs[COSY_TN_N_GRAMMARS];
    size_t sizes[COSY_TN_N_GRAMMARS];
    char p[4096];
    for (int i = 0; i < COSY_TN_N_GRAMMARS; i++) {
      snprintf(p, sizeof p, "%s/%s", fsts, files[i]);
      if (!(bufs[i] = slurp(p, &sizes[i]))) {
        fprintf(stderr, "%s: cannot read\n", p);
        return 1;
      }
    }
    st = cosy_text_norm_create_from_buffers(bufs, sizes, tok, &tn);
    for (int i = 0; i < COSY_TN_N_GRAMMARS; i++) free((void *)bufs[i]);
  } else {
    st = cosy_text_norm_create(m->f, tok, &tn);
  }
  if (st || !cosy_text_norm_is_full(tn)) {
    fprintf(stderr, "no text normalization grammars (%s)\n", st ? cosy_last_error() : "model");
    return 1;
  }
  printf("grammars loaded in %.1f ms; normalizer memory %.1f MB\n", (cosy_now() - t0) * 1e3,
         cosy_text_norm_bytes(tn) / 1e6);
  double *t = (double *)malloc((size_t)iters * sizeof(double));
  for (int k = 0; k < nt; k++) {
    size_t tl;
    char *one = slurp(texts[k], &tl), *text;
    if (!one) {
      fprintf(stderr, "%s: cannot read\n", texts[k]);
      return 1;
    }
    if (repeat < 1) repeat = 1;
    text = (char *)malloc(tl * (size_t)repeat + 1);
    for (int r = 0; r < repeat; r++) memcpy(text + tl * (size_t)r, one, tl);
    text[tl * (size_t)repeat] = '\0';
    free(one);
    long chars = utf8_chars(text);
    int nseg = 0;
    long ntok = 0;
    for (int it = -1; it < iters; it++) {
      double a = cosy_now();
      char **seg;
      if (cosy_text_split(tn, text, 0, &seg, &nseg)) {
        fprintf(stderr, "%s\n", cosy_last_error());
        return 1;
      }
      ntok = 0;
      for (int i = 0; i < nseg; i++) {
        int32_t *ids, nid;
        if (cosy_tokenize(tok, seg[i], strlen(seg[i]), &ids, &nid)) return 1;
        ntok += nid;
        free(ids);
      }
      cosy_text_segments_free(seg, nseg);
      if (it >= 0) t[it] = cosy_now() - a;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp_d);
    double med = t[iters / 2], best = t[0];
    printf("%s x%d: %ld chars, %d segments, %ld tokens: median %.2f ms (best %.2f), "
           "%.2f ms per 1000 chars\n",
           texts[k], repeat, chars, nseg, ntok, med * 1e3, best * 1e3, med * 1e3 * 1000.0 / chars);
    free(text);
  }
  free(t);
  cosy_text_norm_free(tn);
  cosy_tokenizer_free(tok);
  cosy_model_free(m);
  return 0;
}
