/* bench_edges.c - the cost of inputs that were once superlinear (tests/test_edges.c checks the
 * same by counting work): one-byte text pushes and runs of combining marks, on one core.
 *
 *   build/bench/bench_edges MODEL.gguf [--max-pushes N]
 *
 * 1. Text streaming (lib/textstream.c): N one-byte pushes (N = 10^4, 10^5, 10^6, up to
 *    --max-pushes) of a text that never gives a cut ("aaaa...", with and without text
 *    normalization: everything stays pending, the case that rescanned all pending bytes at each
 *    push) and of prose ("Hello there, said the fox. ...": sentences and words committed, so
 *    normalized and tokenized, as they complete). A request takes at most COSY_TEXT_MAX_BYTES
 *    and min(max_tokens / 2, COSY_LLM_MAX_TEXT_TOKENS) text tokens: the pushes go to a fresh
 *    request whenever the current one is full. The requests are made as tests/fuzz's reference
 *    makes them (struct cosy_request, never handed to the scheduler), so only the pushing
 *    thread's work is timed, not the LLM's. Linear: ns per push stays flat as N grows.
 * 2. Tokenizer: "a" followed by a run of alternating U+0301 / U+0323 (classes 230 / 220: the
 *    canonical ordering's worst case for an insertion sort) of 20, 40, 80, 160 KB through
 *    cosy_tokenize and through cosy_text_split (normalization + split_paragraph, which
 *    tokenizes too): best of 3. Linear: ns per byte stays flat. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cosyvoice.h"
#include "engine.h"
#include "text/normalize.h"
#include "tokenizer.h"
#include "util.h"

static cosy_request *fresh(cosy_engine *e, uint32_t flags) {
  cosy_request *r = (cosy_request *)calloc(1, sizeof *r);
  if (!r) exit(1);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->engine = e;
  cosy_synth_params_init(&r->params, sizeof r->params);
  r->params.flags = COSY_SYNTH_TEXT_STREAM | flags;
  r->params.max_tokens = COSY_LLM_MAX_SPEECH_TOKENS;
  r->text_stream = 1;
  r->state = REQ_RUNNING;
  r->tx_max = COSY_LLM_MAX_TEXT_TOKENS;
  return r;
}

static void drop(cosy_request *r) {
  free(r->tx_raw);
  free(r->tx_ids);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r);
}

/* n one-byte pushes of unit's bytes in turn; returns seconds; *n_req requests used */
static double pushes(cosy_engine *e, uint32_t flags, const char *unit, long n, int *n_req) {
  const size_t u = strlen(unit);
  cosy_request *r = fresh(e, flags);
  *n_req = 1;
  double t0 = cosy_now();
  for (long i = 0; i < n; i++) {
    char b[2] = {unit[(size_t)i % u], 0};
    cosy_status st = textstream_push(r, b);
    if (st == COSY_ERR_TEXT) { /* this request is full (bytes or tokens): the next one */
      drop(r);
      r = fresh(e, flags);
      ++*n_req;
      st = textstream_push(r, b);
    }
    if (st) {
      fprintf(stderr, "push %ld: %s\n", i, cosy_last_error());
      exit(1);
    }
  }
  double t = cosy_now() - t0;
  drop(r);
  return t;
}

int main(int argc, char **argv) {
  const char *model = NULL;
  long max_pushes = 1000000;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--max-pushes") && i + 1 < argc) max_pushes = atol(argv[++i]);
    else model = argv[i];
  }
  if (!model) {
    fprintf(stderr, "usage: %s MODEL.gguf [--max-pushes N]\n", argv[0]);
    return 2;
  }
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  c.model_path = model;
  c.device = COSY_DEVICE_CPU;
  c.max_active = 1;
  cosy_engine *e;
  if (cosy_engine_create(&c, &e)) {
    fprintf(stderr, "%s\n", cosy_last_error());
    return 1;
  }
  static const struct {
    const char *name, *unit;
    uint32_t flags;
  } cases[] = {
      {"no cut, words (no normalization)", "a", COSY_SYNTH_NO_TEXT_NORMALIZATION},
      {"no cut, sentences (normalized)", "a", 0},
      {"prose, words (no normalization)", "Hello there, said the fox. Then it ran off. ",
       COSY_SYNTH_NO_TEXT_NORMALIZATION},
      {"prose, sentences (normalized)", "Hello there, said the fox. Then it ran off. ", 0},
  };
  printf("one-byte pushes (ns per push; requests of at most %d bytes / %d text tokens)\n",
         COSY_TEXT_MAX_BYTES, COSY_LLM_MAX_TEXT_TOKENS);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (long n = 10000; n <= max_pushes; n *= 10) {
      int nr = 0;
      double t = pushes(e, cases[k].flags, cases[k].unit, n, &nr);
      printf("  %-36s %8ld pushes: %8.3f s, %7.0f ns/push, %d requests\n", cases[k].name, n, t,
             t / (double)n * 1e9, nr);
      fflush(stdout);
    }
  printf("alternating combining marks U+0301/U+0323 after one 'a' (best of 3)\n");
  for (size_t kb = 20; kb <= 160; kb *= 2) {
    size_t nm = kb * 1024 / 2, len = 1 + 2 * nm;
    char *t = (char *)malloc(len + 1);
    t[0] = 'a';
    for (size_t i = 0; i < nm; i++) memcpy(t + 1 + 2 * i, i % 2 ? "\xcc\xa3" : "\xcc\x81", 2);
    t[len] = 0;
    double best_tok = 1e9, best_split = 1e9;
    for (int it = 0; it < 3; it++) {
      int32_t *ids = NULL, nid = 0;
      double t0 = cosy_now();
      if (cosy_tokenize(e->tok, t, len, &ids, &nid)) return 1;
      double t1 = cosy_now();
      free(ids);
      char **segs = NULL;
      int ns = 0;
      if (cosy_text_split(e->tn, t, 0, &segs, &ns)) return 1;
      double t2 = cosy_now();
      cosy_text_segments_free(segs, ns);
      if (t1 - t0 < best_tok) best_tok = t1 - t0;
      if (t2 - t1 < best_split) best_split = t2 - t1;
    }
    printf("  %4zu KB: tokenize %8.4f s (%5.1f ns/byte), split %8.4f s (%5.1f ns/byte)\n", kb,
           best_tok, best_tok / (double)len * 1e9, best_split, best_split / (double)len * 1e9);
    free(t);
  }
  cosy_engine_destroy(e);
  return 0;
}
