/* test_edges.c - inputs a hostile client would send, each of which must end quickly with a clear
 * status (issue: every input bounded). Speed is checked by counting work (the library's
 * per-thread counters, lib/util.h cosy_work), never by timing:
 *   - tokenizer: the canonical ordering of NFC equals the former insertion sort on random runs
 *     of combining marks; a run of marks whose classes alternate (U+0301 / U+0323) costs work
 *     linear in its length (20 to 160 KB through cosy_tokenize);
 *   - text streaming: tens of thousands of one-byte pushes cost work linear in their number,
 *     with and without text normalization, with and without commits; the total
 *     (COSY_TEXT_MAX_BYTES) and the token budget (max_tokens / 2) refuse a push with
 *     COSY_ERR_TEXT naming the limit and the numbers, and the request goes on;
 *   - limits fail early and name the public parameter: a 1 MiB text, instruct_text, prompt text
 *     (COSY_TEXT_MAX_BYTES, before any normalization), a segment or a whole unnormalized text
 *     beyond COSY_LLM_MAX_TEXT_TOKENS (refused by submit, never an internal function's name),
 *     max_tokens beyond COSY_LLM_MAX_SPEECH_TOKENS;
 *   - files: tensor data not aligned for its type (general.alignment 1) is COSY_ERR_MODEL_FORMAT
 *     (gguf_parse, under every model and voice reader); bad values in a voice file (token 6561,
 *     token -1, NaN mel, NaN or all-zero speaker vector) are COSY_ERR_MODEL_FORMAT; its prompt
 *     text with a NUL, beyond the byte limit, not UTF-8 or beyond the token limit each get their
 *     own message.
 * The engine cases use the small golden model (`make test`; skipped without it). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
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
#include "gguf.h"
#include "testutil.h"
#include "tokenizer.h"
#include "util.h"

typedef struct fx {
  cosy_engine *e;
  cosy_voice *v;
} fx;

static float g_spk[192];
static float g_mel[4 * 80];
static int32_t g_tok[2] = {1, 2};

static int setup(void **state) {
  static fx f;
  memset(&f, 0, sizeof f);
  *state = &f;
  for (int i = 0; i < 192; i++) g_spk[i] = (float)sin(0.37 * i + 0.1);
  for (int i = 0; i < 4 * 80; i++) g_mel[i] = -3.0f + 0.01f * (float)(i % 80);
  const char *model = tu_small_model();
  if (!model) return 0;
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  c.model_path = model;
  c.device = COSY_DEVICE_CPU;
  c.max_active = 2;
  if (cosy_engine_create(&c, &f.e)) {
    fprintf(stderr, "engine: %s\n", cosy_last_error());
    return -1;
  }
  cosy_voice_features vf;
  cosy_voice_features_init(&vf, sizeof vf);
  vf.prompt_text = "Hello there.";
  vf.speech_tokens = g_tok;
  vf.n_speech_tokens = 2;
  vf.mel = g_mel;
  vf.n_mel_frames = 4;
  vf.speaker_embedding = g_spk;
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

#define NEED(f) TU_REQUIRE((f)->e != NULL, "the small test model is absent (make test)")

/* the last error holds every given substring and no internal function's name */
static void expect_msg(const char *what, ...) {
  const char *m = cosy_last_error();
  print_message("  %s: %s\n", what, m);
  va_list ap;
  va_start(ap, what);
  for (const char *s; (s = va_arg(ap, const char *)) != NULL;)
    if (!strstr(m, s)) fail_msg("%s: message \"%s\" lacks \"%s\"", what, m, s);
  va_end(ap);
  if (strstr(m, "ref_") || strstr(m, "job_prepare") || strstr(m, "textstream_"))
    fail_msg("%s: message names an internal function: %s", what, m);
}

static char *repeat(const char *unit, size_t times) {
  size_t u = strlen(unit);
  char *s = (char *)malloc(u * times + 1);
  assert_non_null(s);
  for (size_t i = 0; i < times; i++) memcpy(s + i * u, unit, u);
  s[u * times] = 0;
  return s;
}

/* ---- tokenizer: canonical ordering ------------------------------------------------------- */

/* the former canonical ordering (insertion sort over the whole decomposition) */
static void old_order(uint32_t *d, size_t m) {
  for (size_t i = 1; i < m; i++) {
    int ci = cosy_ccc(d[i]);
    if (ci == 0) continue;
    size_t j = i;
    uint32_t c = d[i];
    while (j > 0 && cosy_ccc(d[j - 1]) > ci) {
      d[j] = d[j - 1];
      j--;
    }
    d[j] = c;
  }
}

static void test_canonical_order_random(void **state) {
  (void)state;
  /* starters and marks of many classes (1, 7, 9, 202, 214, 216, 220, 222, 228, 230, 232, 233,
   * 234, 240, ...), including several code points per class (stability matters) */
  static const uint32_t pool[] = {'a', 'e', 0x3042, 0x0301, 0x0300, 0x0302, 0x0323, 0x0324,
                                  0x0327, 0x0328, 0x0334, 0x0338, 0x05B0, 0x05B1, 0x0F71,
                                  0x0F72, 0x093C, 0x094D, 0x302A, 0x302B, 0x302E, 0x0345,
                                  0x035C, 0x035D, 0x0315, 0x031B, 0x1DCE, 0x0E38, 0x0E48};
  const int np = (int)(sizeof pool / sizeof pool[0]);
  int classes = 0;
  for (int i = 0; i < np; i++) classes += cosy_ccc(pool[i]) != 0;
  assert_true(classes >= 20); /* the pool is what it says */
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint32_t a[600], b[600];
  for (int trial = 0; trial < 3000; trial++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    size_t n = (size_t)(s >> 33) % 600;
    int marks_only = trial % 3 == 0; /* long runs, beyond the insertion-sort size */
    for (size_t i = 0; i < n; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      int k = (int)((s >> 33) % (uint64_t)np);
      if (marks_only && k < 3) k = 3 + (int)((s >> 40) % (uint64_t)(np - 3));
      a[i] = b[i] = pool[k];
    }
    old_order(a, n);
    assert_int_equal(cosy_canonical_order(b, n), 0);
    assert_memory_equal(a, b, n * sizeof *a);
  }
}

/* work of the ordering on a run of n alternating marks (U+0301 class 230, U+0323 class 220) */
static uint64_t order_ops(size_t n) {
  uint32_t *d = (uint32_t *)malloc(n * sizeof *d);
  assert_non_null(d);
  for (size_t i = 0; i < n; i++) d[i] = i % 2 ? 0x0323 : 0x0301;
  uint64_t w0 = cosy_work.ccc_ops;
  assert_int_equal(cosy_canonical_order(d, n), 0);
  uint64_t w = cosy_work.ccc_ops - w0;
  for (size_t i = 0; i + 1 < n; i++) assert_true(cosy_ccc(d[i]) <= cosy_ccc(d[i + 1]));
  free(d);
  return w;
}

static void test_marks_linear(void **state) {
  fx *f = (fx *)*state;
  uint64_t w1 = order_ops(10000), w8 = order_ops(80000);
  print_message("  ordering work: 10000 marks %llu, 80000 marks %llu\n", (unsigned long long)w1,
                (unsigned long long)w8);
  assert_true(w8 <= 4 * 80000 + 512);  /* linear (the insertion sort took n^2 / 4: 1.6e9) */
  assert_true(w8 <= 8 * w1 + 8 * 256); /* 8x the marks, 8x the work */
  NEED(f);
  /* through cosy_tokenize, as submit reaches it: 20, 40, 80, 160 KB of "a" + marks */
  uint64_t prev = 0;
  for (size_t kb = 20; kb <= 160; kb *= 2) {
    size_t n = kb * 1024 / 2;
    char *t = (char *)malloc(2 * n + 2);
    assert_non_null(t);
    t[0] = 'a';
    for (size_t i = 0; i < n; i++) memcpy(t + 1 + 2 * i, i % 2 ? "\xcc\xa3" : "\xcc\x81", 2);
    uint64_t w0 = cosy_work.ccc_ops;
    int32_t *ids = NULL, nid = 0;
    assert_int_equal(cosy_tokenize(f->e->tok, t, 1 + 2 * n, &ids, &nid), COSY_OK);
    uint64_t w = cosy_work.ccc_ops - w0;
    print_message("  tokenize %zu KB of alternating marks: %d ids, ordering work %llu\n", kb, nid,
                  (unsigned long long)w);
    assert_true(nid > 0);
    assert_true(w <= 4 * (uint64_t)n + 512);
    if (prev) assert_true(w <= 2 * prev + 512);
    prev = w;
    free(ids);
    free(t);
  }
}

/* ---- text streaming ---------------------------------------------------------------------- */

static cosy_request *stream_req(fx *f, uint32_t flags, int max_tokens) {
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.flags = COSY_SYNTH_TEXT_STREAM | flags;
  p.max_tokens = max_tokens;
  p.seed = 7;
  cosy_request *r = NULL;
  assert_int_equal(cosy_request_submit(f->e, f->v, NULL, &p, NULL, NULL, &r), COSY_OK);
  return r;
}

static void end_cancelled(cosy_request *r) {
  cosy_request_cancel(r);
  assert_int_equal(cosy_request_wait(r, -1), COSY_ERR_CANCELLED);
  cosy_request_release(r);
}

/* text_scan work of n one-byte pushes of unit's bytes in turn */
static uint64_t push_bytes(cosy_request *r, const char *unit, size_t n) {
  size_t u = strlen(unit);
  uint64_t w0 = cosy_work.text_scan;
  for (size_t i = 0; i < n; i++) {
    char b[2] = {unit[i % u], 0};
    cosy_status st = cosy_request_push_text(r, b);
    if (st) fail_msg("push %zu: %s", i, cosy_last_error());
  }
  return cosy_work.text_scan - w0;
}

static void test_push_linear(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  /* no cut at all (a word, a sentence that never ends): the whole text stays pending; the former
   * code rescanned it at each push, n^2 / 2 bytes (1.8e9 for 60000) */
  for (int norm = 0; norm < 2; norm++) {
    uint32_t fl = norm ? 0 : COSY_SYNTH_NO_TEXT_NORMALIZATION;
    cosy_request *r = stream_req(f, fl, 0);
    uint64_t w1 = push_bytes(r, "a", 20000);
    uint64_t w2 = push_bytes(r, "a", 40000);
    print_message("  %s, no cut: 20000 pushes %llu bytes of work, 40000 more %llu\n",
                  norm ? "normalized" : "words", (unsigned long long)w1, (unsigned long long)w2);
    assert_true(w1 <= 4 * 20000);
    assert_true(w2 <= 4 * 40000);
    assert_int_equal(r->tx_len, 60000);
    end_cancelled(r);
  }
  /* characters cut between pushes: a 4-byte character one byte at a time, again and again */
  {
    cosy_request *r = stream_req(f, COSY_SYNTH_NO_TEXT_NORMALIZATION, 0);
    uint64_t w = push_bytes(r, "\xf0\x9f\x98\x80", 40000);
    print_message("  4-byte characters byte by byte: 40000 pushes %llu bytes of work\n",
                  (unsigned long long)w);
    assert_true(w <= 8 * 40000);
    end_cancelled(r);
  }
  /* with commits: words (word cuts) and sentences, byte by byte; the committed bytes are
   * normalized and tokenized once (not counted here), the rest is linear */
  static const char *units[2] = {"one two three four five six. ", "Hello there, said the fox. "};
  for (int norm = 0; norm < 2; norm++) {
    uint32_t fl = norm ? 0 : COSY_SYNTH_NO_TEXT_NORMALIZATION;
    cosy_request *r = stream_req(f, fl, COSY_LLM_MAX_SPEECH_TOKENS);
    size_t n = 4000;
    uint64_t w = push_bytes(r, units[norm], n);
    pthread_mutex_lock(&r->mu);
    int ids = r->tx_n;
    pthread_mutex_unlock(&r->mu);
    print_message("  %s with commits: %zu pushes, %d ids committed, %llu bytes of work\n",
                  norm ? "sentences" : "words", n, ids, (unsigned long long)w);
    assert_true(ids > 100);
    assert_true(w <= 8 * (uint64_t)n);
    end_cancelled(r);
  }
}

static void test_push_limits(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  /* the total: COSY_TEXT_MAX_BYTES in all */
  cosy_request *r = stream_req(f, COSY_SYNTH_NO_TEXT_NORMALIZATION, 0);
  char *big = repeat("a", COSY_TEXT_MAX_BYTES - 100);
  assert_int_equal(cosy_request_push_text(r, big), COSY_OK);
  char *more = repeat("b", 101);
  assert_int_equal(cosy_request_push_text(r, more), COSY_ERR_TEXT);
  expect_msg("push beyond the total", "COSY_TEXT_MAX_BYTES", "65536", "65436", "not taken", NULL);
  assert_int_equal(r->tx_len, COSY_TEXT_MAX_BYTES - 100); /* not taken */
  more[100] = 0;
  assert_int_equal(cosy_request_push_text(r, more), COSY_OK); /* exactly at the limit */
  assert_int_equal(cosy_request_push_text(r, ""), COSY_OK);
  assert_int_equal(cosy_request_push_text(r, "c"), COSY_ERR_TEXT);
  end_cancelled(r);
  /* a 1 MiB first piece given to submit: refused before it is read further */
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.flags = COSY_SYNTH_TEXT_STREAM;
  char *mib = repeat("x", 1 << 20);
  r = (cosy_request *)&p;
  assert_int_equal(cosy_request_submit(f->e, f->v, mib, &p, NULL, NULL, &r), COSY_ERR_TEXT);
  assert_null(r);
  expect_msg("1 MiB first piece", "text", "COSY_TEXT_MAX_BYTES", NULL);
  /* the token budget: max_tokens 20 -> 10 text tokens; the refused push leaves the request as it
   * was, and it still takes text and speaks */
  r = stream_req(f, COSY_SYNTH_NO_TEXT_NORMALIZATION, 20);
  assert_int_equal(cosy_request_push_text(r, "one two three "), COSY_OK);
  cosy_status st = cosy_request_push_text(r, "four five six seven eight nine ten eleven twelve ");
  assert_int_equal(st, COSY_ERR_TEXT);
  expect_msg("push beyond the token budget", "text tokens", "at most 10", "max_tokens / 2", NULL);
  assert_int_equal(cosy_request_push_text(r, "four"), COSY_OK);
  assert_int_equal(cosy_request_end_text(r), COSY_OK);
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  cosy_request_release(r);
  /* max_tokens 15000 -> at most COSY_LLM_MAX_TEXT_TOKENS */
  r = stream_req(f, COSY_SYNTH_NO_TEXT_NORMALIZATION, COSY_LLM_MAX_SPEECH_TOKENS);
  char *words = repeat("w ", 2100);
  assert_int_equal(cosy_request_push_text(r, words), COSY_ERR_TEXT);
  expect_msg("push beyond the call's tokens", "COSY_LLM_MAX_TEXT_TOKENS", "at most 2048", NULL);
  end_cancelled(r);
  free(words);
  free(mib);
  free(more);
  free(big);
}

/* ---- limits fail early ------------------------------------------------------------------- */

static void test_text_limits_early(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  char *mib = repeat("1", 1 << 20); /* digits: the slowest text to normalize */
  cosy_request *r = NULL;
  assert_int_equal(cosy_request_submit(f->e, f->v, mib, NULL, NULL, NULL, &r), COSY_ERR_TEXT);
  assert_null(r);
  expect_msg("1 MiB text, submit", "text", "COSY_TEXT_MAX_BYTES", "65536", NULL);
  float *pcm = NULL;
  int64_t n = 0;
  assert_int_equal(cosy_synthesize(f->e, f->v, mib, NULL, &pcm, &n), COSY_ERR_TEXT);
  expect_msg("1 MiB text, synthesize", "text", "COSY_TEXT_MAX_BYTES", NULL);
  mib[COSY_TEXT_MAX_BYTES + 1] = 0; /* one byte beyond */
  assert_int_equal(cosy_synthesize(f->e, f->v, mib, NULL, &pcm, &n), COSY_ERR_TEXT);
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.mode = COSY_MODE_INSTRUCT;
  p.instruct_text = mib;
  assert_int_equal(cosy_synthesize(f->e, f->v, "Hi.", &p, &pcm, &n), COSY_ERR_TEXT);
  expect_msg("instruct_text", "instruct_text", "COSY_TEXT_MAX_BYTES", NULL);
  cosy_voice_features vf;
  cosy_voice_features_init(&vf, sizeof vf);
  vf.prompt_text = mib;
  vf.speaker_embedding = g_spk;
  cosy_voice *v = NULL;
  assert_int_equal(cosy_voice_from_features(f->e, &vf, &v), COSY_ERR_TEXT);
  expect_msg("prompt_text", "prompt_text", "COSY_TEXT_MAX_BYTES", NULL);
  /* max_tokens */
  cosy_synth_params_init(&p, sizeof p);
  p.max_tokens = COSY_LLM_MAX_SPEECH_TOKENS + 1;
  assert_int_equal(cosy_synthesize(f->e, f->v, "Hi.", &p, &pcm, &n), COSY_ERR_INVALID_ARG);
  expect_msg("max_tokens", "max_tokens", "COSY_LLM_MAX_SPEECH_TOKENS", NULL);
  free(mib);
}

static void test_llm_limits(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  char *words = repeat("w ", 2100); /* 4200 bytes, about 2100 tokens, no punctuation */
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.flags = COSY_SYNTH_NO_TEXT_NORMALIZATION;
  cosy_request *r = NULL;
  assert_int_equal(cosy_request_submit(f->e, f->v, words, &p, NULL, NULL, &r), COSY_ERR_TEXT);
  assert_null(r);
  expect_msg("unnormalized text", "COSY_LLM_MAX_TEXT_TOKENS", "COSY_SYNTH_NO_TEXT_NORMALIZATION",
             NULL);
  /* normalized: ordinary sentences, then a long stretch without punctuation: the later segment
   * is refused before the first one's LLM starts */
  char *head = repeat("The quick brown fox jumps over the lazy dog. ", 12);
  char *text = (char *)malloc(strlen(head) + strlen(words) + 1);
  assert_non_null(text);
  strcpy(text, head);
  strcat(text, words);
  assert_int_equal(cosy_request_submit(f->e, f->v, text, NULL, NULL, NULL, &r), COSY_ERR_TEXT);
  assert_null(r);
  expect_msg("a long segment", "segment", "COSY_LLM_MAX_TEXT_TOKENS", NULL);
  float *pcm = NULL;
  int64_t n = 0;
  assert_int_equal(cosy_synthesize(f->e, f->v, text, NULL, &pcm, &n), COSY_ERR_TEXT);
  cosy_engine_stats es;
  cosy_engine_stats_init(&es, sizeof es);
  assert_int_equal(cosy_engine_get_stats(f->e, &es), COSY_OK);
  assert_int_equal(es.active, 0);
  assert_int_equal(es.queued, 0);
  /* instruct_text within the byte limit, beyond the token limit */
  cosy_synth_params_init(&p, sizeof p);
  p.mode = COSY_MODE_INSTRUCT;
  p.instruct_text = words;
  assert_int_equal(cosy_request_submit(f->e, f->v, "Hi.", &p, NULL, NULL, &r), COSY_ERR_TEXT);
  expect_msg("instruct_text tokens", "instruct_text", "COSY_LLM_MAX_TEXT_TOKENS", NULL);
  /* a voice's prompt text beyond the token limit */
  cosy_voice_features vf;
  cosy_voice_features_init(&vf, sizeof vf);
  vf.prompt_text = words;
  vf.speaker_embedding = g_spk;
  cosy_voice *v = NULL;
  assert_int_equal(cosy_voice_from_features(f->e, &vf, &v), COSY_ERR_TEXT);
  expect_msg("prompt text tokens", "prompt text", "COSY_LLM_MAX_TEXT_TOKENS", NULL);
  /* a text just within the limits still speaks (a few tokens, to keep it short) */
  cosy_synth_params_init(&p, sizeof p);
  p.max_tokens = 4;
  assert_int_equal(cosy_synthesize(f->e, f->v, head, &p, &pcm, &n), COSY_OK);
  cosy_free(pcm);
  free(text);
  free(head);
  free(words);
}

/* ---- files ------------------------------------------------------------------------------- */

typedef struct gbuf {
  uint8_t *p;
  size_t n, cap;
} gbuf;

static void put(gbuf *b, const void *src, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = (uint8_t *)realloc(b->p, b->cap);
    assert_non_null(b->p);
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}
static void put_u32(gbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(gbuf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(gbuf *b, const char *s, size_t n) {
  put_u64(b, n);
  put(b, s, n);
}
static void put_kv_u32(gbuf *b, const char *k, uint32_t v) {
  put_str(b, k, strlen(k));
  put_u32(b, GGUF_T_UINT32);
  put_u32(b, v);
}
static void put_kv_str(gbuf *b, const char *k, const char *v, size_t n) {
  put_str(b, k, strlen(k));
  put_u32(b, GGUF_T_STRING);
  put_str(b, v, n);
}

/* one tensor of a test file: 1-D, `n` elements of `type` (`es` bytes each), data `src` */
typedef struct ten {
  const char *name;
  uint32_t type;
  int n_dims;
  int64_t ne[2];
  const void *src;
  size_t bytes;
  uint64_t shift; /* bytes added to its offset (misplacing it under alignment 1) */
} ten;

/* A GGUF v3 file of the given keys (written by keys(b)) and tensors; returns the buffer. */
static gbuf make_gguf(uint32_t alignment, int n_kv, void (*keys)(gbuf *, const void *),
                      const void *karg, const ten *t, int nt) {
  gbuf b = {0};
  put(&b, "GGUF", 4);
  put_u32(&b, 3);
  put_u64(&b, (uint64_t)nt);
  put_u64(&b, (uint64_t)n_kv + 1);
  put_kv_u32(&b, "general.alignment", alignment);
  keys(&b, karg);
  uint64_t off = 0;
  for (int i = 0; i < nt; i++) {
    put_str(&b, t[i].name, strlen(t[i].name));
    put_u32(&b, (uint32_t)t[i].n_dims);
    for (int d = 0; d < t[i].n_dims; d++) put_u64(&b, (uint64_t)t[i].ne[d]);
    put_u32(&b, t[i].type);
    off += t[i].shift;
    put_u64(&b, off);
    off += (t[i].bytes + alignment - 1) / alignment * alignment;
  }
  while (b.n % alignment) put(&b, "", 1);
  for (int i = 0; i < nt; i++) {
    static const uint8_t z[64] = {0};
    put(&b, z, (size_t)t[i].shift);
    put(&b, t[i].src, t[i].bytes);
    size_t pad = (alignment - t[i].bytes % alignment) % alignment;
    put(&b, z, pad);
  }
  return b;
}

static void no_keys(gbuf *b, const void *arg) {
  (void)arg;
  put_kv_str(b, "general.architecture", "test", 4);
}

static void test_gguf_alignment(void **state) {
  (void)state;
  float f32[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint16_t bf16[8] = {0x3f80, 0x4000, 0x4040, 0x4080, 0, 0, 0, 0};
  /* alignment 1, offsets that suit the types: accepted */
  ten ok[2] = {{"a", GGML_F32, 1, {8, 0}, f32, 32, 0}, {"b", GGML_BF16, 1, {8, 0}, bf16, 16, 0}};
  for (int shift = 0; shift < 4; shift++) {
    gbuf b;
    /* the header's length decides where the data starts: pad the architecture so that the data
     * offset is a multiple of 4 (found by trying) */
    b = make_gguf(1, 1, no_keys, NULL, ok, 2);
    size_t hdr = b.n - 48;
    free(b.p);
    ten t[2] = {ok[0], ok[1]};
    t[0].shift = (4 - hdr % 4) % 4;
    t[1].shift = (uint64_t)shift; /* bf16 at +0..3 after the f32 data */
    b = make_gguf(1, 1, no_keys, NULL, t, 2);
    gguf_file *g = NULL;
    cosy_status st = gguf_parse(b.p, b.n, "test", &g);
    const int want_ok = shift % 2 == 0;
    print_message("  alignment 1, bf16 tensor moved by %d: %s\n", shift,
                  st ? cosy_last_error() : "accepted");
    if (want_ok) {
      assert_int_equal(st, COSY_OK);
      const gguf_tensor *x = gguf_find_tensor(g, "b");
      assert_non_null(x);
      assert_int_equal((uintptr_t)x->data % 2, 0);
      gguf_close(g);
    } else {
      assert_int_equal(st, COSY_ERR_MODEL_FORMAT);
      assert_non_null(strstr(cosy_last_error(), "not aligned"));
      assert_non_null(strstr(cosy_last_error(), "general.alignment 1"));
    }
    /* the f32 tensor moved by 1 or 2: refused */
    t[0].shift += 1 + (uint64_t)(shift % 2);
    t[1].shift = 0;
    free(b.p);
    b = make_gguf(1, 1, no_keys, NULL, t, 2);
    assert_int_equal(gguf_parse(b.p, b.n, "test", &g), COSY_ERR_MODEL_FORMAT);
    assert_non_null(strstr(cosy_last_error(), "tensor a"));
    free(b.p);
  }
}

/* voice files */
typedef struct vkeys {
  const char *text;
  size_t n;
} vkeys;

static void voice_keys(gbuf *b, const void *arg) {
  const vkeys *k = (const vkeys *)arg;
  put_kv_str(b, "general.architecture", "cosyvoice3-voice", 16);
  put_kv_u32(b, "cosyvoice.voice.format_version", 1);
  put_kv_str(b, "cosyvoice.voice.prompt_text", k->text, k->n);
}

/* write a voice file of 2 prompt tokens; returns its load status */
static cosy_status load_voice(fx *f, const char *text, size_t tn, const int32_t tok[2],
                              const float *mel, const float *spk, uint32_t alignment,
                              uint64_t spk_shift) {
  vkeys k = {text, tn};
  ten t[3] = {{"voice.speech_tokens", GGML_I32, 1, {2, 0}, tok, 8, 0},
              {"voice.mel", GGML_F32, 2, {80, 4}, mel, 4 * 80 * 4, 0},
              {"voice.speaker_embedding", GGML_F32, 1, {192, 0}, spk, 192 * 4, spk_shift}};
  gbuf b = make_gguf(alignment, 3, voice_keys, &k, t, 3);
  const char *path = tu_tmp_path("edges-voice");
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(b.p, 1, b.n, fp), b.n);
  fclose(fp);
  free(b.p);
  cosy_voice *v = NULL;
  cosy_status st = cosy_voice_load(f->e, path, &v);
  if (!st) cosy_voice_release(v);
  remove(path);
  return st;
}

static void test_voice_file_values(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  const int32_t tok[2] = {5, 6}, tok_hi[2] = {5, 6561}, tok_neg[2] = {-1, 6};
  float mel[4 * 80], mel_nan[4 * 80], spk_nan[192], spk0[192] = {0};
  memcpy(mel, g_mel, sizeof mel);
  memcpy(mel_nan, g_mel, sizeof mel);
  mel_nan[2 * 80 + 7] = NAN;
  memcpy(spk_nan, g_spk, sizeof spk_nan);
  spk_nan[100] = NAN;
  const char *txt = "Hello there.";
  const size_t tn = strlen(txt);
  assert_int_equal(load_voice(f, txt, tn, tok, mel, g_spk, 32, 0), COSY_OK); /* the writer */
  struct {
    const int32_t *tok;
    const float *mel, *spk;
    const char *want;
  } bad[] = {{tok_hi, mel, g_spk, "6561"},        {tok_neg, mel, g_spk, "-1"},
             {tok, mel_nan, g_spk, "mel value"},  {tok, mel, spk_nan, "value 100 is not finite"},
             {tok, mel, spk0, "all zeros"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(load_voice(f, txt, tn, bad[i].tok, bad[i].mel, bad[i].spk, 32, 0),
                     COSY_ERR_MODEL_FORMAT);
    expect_msg("voice file value", bad[i].want, "edges-voice", NULL);
  }
  /* the prompt text: each limit its own message */
  assert_int_equal(load_voice(f, "Hello\0there.", 12, tok, mel, g_spk, 32, 0), COSY_ERR_MODEL_FORMAT);
  expect_msg("prompt text with NUL", "NUL", "byte 5", NULL);
  char *big = repeat("a", COSY_TEXT_MAX_BYTES + 1);
  assert_int_equal(load_voice(f, big, COSY_TEXT_MAX_BYTES + 1, tok, mel, g_spk, 32, 0),
                   COSY_ERR_MODEL_FORMAT);
  expect_msg("prompt text too long", "COSY_TEXT_MAX_BYTES", "65537", NULL);
  assert_int_equal(load_voice(f, "ab\xff", 3, tok, mel, g_spk, 32, 0), COSY_ERR_MODEL_FORMAT);
  expect_msg("prompt text not UTF-8", "not valid UTF-8", "byte 2", NULL);
  char *words = repeat("w ", 2100);
  assert_int_equal(load_voice(f, words, strlen(words), tok, mel, g_spk, 32, 0),
                   COSY_ERR_MODEL_FORMAT);
  expect_msg("prompt text too many tokens", "COSY_LLM_MAX_TEXT_TOKENS", NULL);
  /* alignment 1 with the speaker embedding one byte off: refused, not read misaligned */
  cosy_status st = COSY_OK;
  for (uint64_t s = 1; s <= 3 && !st; s++) st = load_voice(f, txt, tn, tok, mel, g_spk, 1, s);
  assert_int_equal(st, COSY_ERR_MODEL_FORMAT);
  expect_msg("misaligned tensor", "not aligned", NULL);
  free(words);
  free(big);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_canonical_order_random),
      cmocka_unit_test(test_marks_linear),
      cmocka_unit_test(test_push_linear),
      cmocka_unit_test(test_push_limits),
      cmocka_unit_test(test_text_limits_early),
      cmocka_unit_test(test_llm_limits),
      cmocka_unit_test(test_gguf_alignment),
      cmocka_unit_test(test_voice_file_values),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
