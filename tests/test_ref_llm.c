/* test_ref_llm.c - the CPU reference LLM (lib/ref/llm.c) against ../shared/golden/llm.
 *
 * Golden data (fp32 PyTorch on CPU, small random model, L = 102, K = 40 forced decode steps):
 *   lm_input        built from inputs/prompt_text_ids, tts_text_ids, prompt_speech_tokens:
 *                   a pure table lookup, tolerance 1e-6 abs.
 *   prefill_logp    [L][6761] log-probs of all prefill positions; decode_logp [K][6761]: step k
 *                   feeds speech_embedding[forced[k]] at position L+k. Acceptance 1e-3 abs (the
 *                   official GPU-vs-CPU spread is 9.5e-6, so we expect ~1e-5).
 *   h_layer0_*, h_norm_* hidden states after layer 0 / after the final norm: 1e-4 abs.
 * Plus: one forward over all L+K positions matches decode_logp too (1e-3), argument checks, the silent
 * filter, and ref_llm_generate (deterministic per seed, equal to a hand-written loop over
 * ref_llm_forward + cosy_sample_ras, bounded by max_len, cancellable). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model.h"
#include "ref/llm.h"
#include "ref/sampling.h"
#include "testutil.h"

#define TOL_EMB 1e-6
#define TOL_LOGP 1e-3
#define TOL_H 1e-4

typedef struct fixture {
  cosy_model *m;
  ref_llm *l;
  int32_t *pt, *tt, *ps, *forced;
  int npt, ntt, nps, nforced;
} fixture;

static fixture F;

static int setup(void **state) {
  (void)state;
  memset(&F, 0, sizeof F);
  const char *mp = tu_small_model();
  if (!mp || !tu_shared_dir()) return 0;
  if (cosy_model_load(mp, &F.m) != COSY_OK) {
    print_message("model load failed: %s\n", cosy_last_error());
    return 0;
  }
  if (ref_llm_create(F.m, &F.l) != COSY_OK) {
    print_message("ref_llm_create failed: %s\n", cosy_last_error());
    return -1;
  }
  F.pt = tu_load_ids("golden/inputs/prompt_text_ids.npy", &F.npt);
  F.tt = tu_load_ids("golden/inputs/tts_text_ids.npy", &F.ntt);
  F.ps = tu_load_ids("golden/inputs/prompt_speech_tokens.npy", &F.nps);
  F.forced = tu_load_ids("golden/inputs/llm_forced_tokens.npy", &F.nforced);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  ref_llm_free(F.l);
  cosy_model_free(F.m);
  free(F.pt);
  free(F.tt);
  free(F.ps);
  free(F.forced);
  return 0;
}

#define NEED_MODEL() \
  TU_REQUIRE(F.l && F.pt && F.tt && F.ps && F.forced, "small model or ../shared/golden absent")

static void test_lm_input(void **state) {
  (void)state;
  NEED_MODEL();
  const int H = ref_llm_hidden(F.l);
  float *emb = NULL;
  int L = 0;
  assert_int_equal(ref_llm_build_input(F.l, F.pt, F.npt, F.tt, F.ntt, F.ps, F.nps, &emb, &L),
                   COSY_OK);
  assert_int_equal(L, 1 + F.npt + F.ntt + 1 + F.nps);
  float *ref = tu_load_f32("golden/llm/lm_input.npy", (int64_t)L * H);
  assert_non_null(ref);
  double d = tu_max_abs_diff(emb, ref, (size_t)L * H);
  print_message("lm_input [%d][%d]: max abs diff %.3g (tol %g)\n", L, H, d, TOL_EMB);
  assert_true(d <= TOL_EMB);
  free(ref);
  free(emb);
}

static void test_prefill_and_forced_decode(void **state) {
  (void)state;
  NEED_MODEL();
  const int H = ref_llm_hidden(F.l), V = ref_llm_speech_vocab(F.l), K = F.nforced;
  float *emb = NULL;
  int L = 0;
  assert_int_equal(ref_llm_build_input(F.l, F.pt, F.npt, F.tt, F.ntt, F.ps, F.nps, &emb, &L),
                   COSY_OK);
  float *g_logp = tu_load_f32("golden/llm/prefill_logp.npy", (int64_t)L * V);
  float *g_h0 = tu_load_f32("golden/llm/h_layer0_prefill.npy", (int64_t)L * H);
  float *g_hn = tu_load_f32("golden/llm/h_norm_prefill.npy", (int64_t)L * H);
  float *g_dlogp = tu_load_f32("golden/llm/decode_logp.npy", (int64_t)K * V);
  float *g_dh0 = tu_load_f32("golden/llm/h_layer0_decode.npy", (int64_t)K * H);
  float *g_dhn = tu_load_f32("golden/llm/h_norm_decode.npy", (int64_t)K * H);
  assert_true(g_logp && g_h0 && g_hn && g_dlogp && g_dh0 && g_dhn);

  ref_kv *kv = NULL;
  assert_int_equal(ref_kv_create(F.l, L + K, &kv), COSY_OK);
  float *logp = malloc(sizeof(float) * (size_t)L * V), *last = malloc(sizeof(float) * V);
  float *h0 = malloc(sizeof(float) * (size_t)L * H), *hn = malloc(sizeof(float) * (size_t)L * H);
  assert_true(logp && last && h0 && hn);
  assert_int_equal(ref_llm_forward(F.l, kv, emb, L, logp, last, h0, hn), COSY_OK);
  assert_int_equal(ref_kv_len(kv), L);
  double d_logp = tu_max_abs_diff(logp, g_logp, (size_t)L * V);
  double d_h0 = tu_max_abs_diff(h0, g_h0, (size_t)L * H);
  double d_hn = tu_max_abs_diff(hn, g_hn, (size_t)L * H);
  double d_last = tu_max_abs_diff(last, logp + (size_t)(L - 1) * V, (size_t)V);
  print_message("prefill L=%d: logp max abs %.3g (rel l2 %.3g), h_layer0 %.3g, h_norm %.3g "
                "(tol %g / %g)\n",
                L, d_logp, tu_rel_l2(logp, g_logp, (size_t)L * V), d_h0, d_hn, TOL_LOGP, TOL_H);
  assert_true(d_logp <= TOL_LOGP);
  assert_true(d_h0 <= TOL_H);
  assert_true(d_hn <= TOL_H);
  assert_true(d_last == 0.0);

  double m_logp = 0, m_h0 = 0, m_hn = 0;
  float *e = malloc(sizeof(float) * H);
  assert_non_null(e);
  for (int k = 0; k < K; k++) {
    ref_llm_embed_speech(F.l, F.forced[k], e);
    assert_int_equal(ref_llm_forward(F.l, kv, e, 1, NULL, last, h0, hn), COSY_OK);
    double a = tu_max_abs_diff(last, g_dlogp + (size_t)k * V, (size_t)V);
    double b = tu_max_abs_diff(h0, g_dh0 + (size_t)k * H, (size_t)H);
    double c = tu_max_abs_diff(hn, g_dhn + (size_t)k * H, (size_t)H);
    m_logp = a > m_logp ? a : m_logp;
    m_h0 = b > m_h0 ? b : m_h0;
    m_hn = c > m_hn ? c : m_hn;
  }
  print_message("forced decode K=%d: logp max abs %.3g, h_layer0 %.3g, h_norm %.3g\n", K, m_logp,
                m_h0, m_hn);
  assert_true(m_logp <= TOL_LOGP);
  assert_true(m_h0 <= TOL_H);
  assert_true(m_hn <= TOL_H);
  assert_int_equal(ref_kv_len(kv), L + K);
  /* the cache is full now: one more position must be refused without changing it */
  assert_int_equal(ref_llm_forward(F.l, kv, e, 1, NULL, last, NULL, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_kv_len(kv), L + K);

  /* one forward over [lm_input; forced embeddings] == prefill + K incremental steps */
  float *all = malloc(sizeof(float) * (size_t)(L + K) * H);
  float *lall = malloc(sizeof(float) * (size_t)(L + K) * V);
  assert_true(all && lall);
  memcpy(all, emb, sizeof(float) * (size_t)L * H);
  for (int k = 0; k < K; k++) ref_llm_embed_speech(F.l, F.forced[k], all + (size_t)(L + k) * H);
  ref_kv_reset(kv);
  assert_int_equal(ref_llm_forward(F.l, kv, all, L + K, lall, NULL, NULL, NULL), COSY_OK);
  double d_full = tu_max_abs_diff(lall + (size_t)L * V, g_dlogp, (size_t)K * V);
  print_message("single forward of L+K positions vs golden decode_logp: %.3g\n", d_full);
  assert_true(d_full <= TOL_LOGP);

  free(all);
  free(lall);
  free(e);
  free(logp);
  free(last);
  free(h0);
  free(hn);
  ref_kv_free(kv);
  free(emb);
  free(g_logp);
  free(g_h0);
  free(g_hn);
  free(g_dlogp);
  free(g_dh0);
  free(g_dhn);
}

static void test_bad_args(void **state) {
  (void)state;
  NEED_MODEL();
  float *emb = NULL;
  int L = 0;
  /* no <|endofprompt|> in the text: refused as upstream asserts */
  assert_int_equal(ref_llm_build_input(F.l, NULL, 0, F.tt, F.ntt, F.ps, F.nps, &emb, &L),
                   COSY_ERR_INVALID_ARG);
  assert_null(emb);
  int32_t bad_speech[1] = {6561};
  assert_int_equal(ref_llm_build_input(F.l, F.pt, F.npt, F.tt, F.ntt, bad_speech, 1, &emb, &L),
                   COSY_ERR_INVALID_ARG);
  int32_t bad_text[1] = {-1};
  assert_int_equal(ref_llm_build_input(F.l, F.pt, F.npt, bad_text, 1, NULL, 0, &emb, &L),
                   COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_llm_build_input(F.l, F.pt, -1, NULL, 0, NULL, 0, &emb, &L),
                   COSY_ERR_INVALID_ARG);
  /* no prompt speech is fine (cross-lingual / instruct) */
  assert_int_equal(ref_llm_build_input(F.l, F.pt, F.npt, F.tt, F.ntt, NULL, 0, &emb, &L), COSY_OK);
  assert_int_equal(L, F.npt + F.ntt + 2);
  ref_kv *kv = NULL;
  assert_int_equal(ref_kv_create(F.l, 0, &kv), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_kv_create(F.l, L - 1, &kv), COSY_OK);
  assert_int_equal(ref_llm_forward(F.l, kv, emb, L, NULL, NULL, NULL, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_llm_forward(F.l, kv, emb, 0, NULL, NULL, NULL, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_llm_forward(F.l, NULL, emb, 1, NULL, NULL, NULL, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(ref_kv_len(kv), 0);
  ref_kv_free(kv);
  cosy_sampling s = cosy_sampling_default();
  cosy_rng r;
  cosy_rng_seed(&r, 1);
  s.top_p = 0.0f;
  assert_int_equal(ref_llm_generate(F.l, emb, L, 0, 10, &s, &r, NULL, NULL, NULL),
                   COSY_ERR_INVALID_ARG);
  s = cosy_sampling_default();
  assert_int_equal(ref_llm_generate(F.l, emb, L, 5, -1, &s, &r, NULL, NULL, NULL),
                   COSY_ERR_INVALID_ARG);
  free(emb);
}

static void test_silent_filter(void **state) {
  (void)state;
  /* 7 silent tokens in a row: only the first 5 pass; a non-silent token resets the run */
  const int32_t seq[] = {1, 2, 28, 29, 55, 248, 494, 100, 2241, 2242, 2322, 2323, 1, 2, 7, 1};
  const int want[] = {1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1};
  int run = 0;
  for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++)
    assert_int_equal(ref_silent_pass(&run, seq[i]), want[i]);
}

typedef struct collect {
  int32_t tok[4096];
  int n, stop_after;
} collect;

static int collect_fn(void *user, int32_t token) {
  collect *c = user;
  if (c->n < 4096) c->tok[c->n] = token;
  c->n++;
  return c->stop_after > 0 && c->n >= c->stop_after;
}

static void test_generate(void **state) {
  (void)state;
  NEED_MODEL();
  float *emb = NULL;
  int L = 0;
  assert_int_equal(ref_llm_build_input(F.l, F.pt, F.npt, F.tt, F.ntt, F.ps, F.nps, &emb, &L),
                   COSY_OK);
  const int min_len = 2 * F.ntt, max_len = 20 * F.ntt, V = ref_llm_speech_vocab(F.l);
  cosy_sampling s = cosy_sampling_default();
  static collect a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  cosy_rng r;
  int na = -1, nb = -1;
  cosy_rng_seed(&r, 1234);
  assert_int_equal(ref_llm_generate(F.l, emb, L, min_len, max_len, &s, &r, collect_fn, &a, &na),
                   COSY_OK);
  cosy_rng_seed(&r, 1234);
  assert_int_equal(ref_llm_generate(F.l, emb, L, min_len, max_len, &s, &r, collect_fn, &b, &nb),
                   COSY_OK);
  print_message("generate: %d tokens (%d passed on; min_len %d, max_len %d)\n", na, a.n, min_len,
                max_len);
  assert_int_equal(na, nb);
  assert_int_equal(a.n, b.n);
  assert_memory_equal(a.tok, b.tok, sizeof(int32_t) * (size_t)a.n);
  assert_true(na >= min_len && na <= max_len);
  assert_true(a.n <= na);
  for (int i = 0; i < a.n; i++) assert_true(a.tok[i] >= 0 && a.tok[i] < COSY_SPEECH_TOKENS);

  /* the same loop written out: prefill, sample, feed back */
  ref_kv *kv = NULL;
  assert_int_equal(ref_kv_create(F.l, L + max_len, &kv), COSY_OK);
  float *logp = malloc(sizeof(float) * V), *scratch = malloc(sizeof(float) * 2 * V);
  float *e = malloc(sizeof(float) * ref_llm_hidden(F.l));
  int32_t *hist = malloc(sizeof(int32_t) * max_len);
  assert_true(logp && scratch && e && hist);
  assert_int_equal(ref_llm_forward(F.l, kv, emb, L, NULL, logp, NULL, NULL), COSY_OK);
  cosy_rng_seed(&r, 1234);
  int n = 0, run = 0, passed = 0;
  for (int i = 0; i < max_len; i++) {
    int32_t t = cosy_sample_ras(logp, V, hist, n, &s, i < min_len, &r, scratch);
    assert_true(t >= 0);
    if (t >= COSY_SPEECH_TOKENS) break;
    hist[n++] = t;
    if (ref_silent_pass(&run, t)) {
      assert_true(passed < a.n);
      assert_int_equal(t, a.tok[passed]);
      passed++;
    }
    ref_llm_embed_speech(F.l, t, e);
    if (i + 1 < max_len) assert_int_equal(ref_llm_forward(F.l, kv, e, 1, NULL, logp, NULL, NULL), COSY_OK);
  }
  assert_int_equal(n, na);
  assert_int_equal(passed, a.n);

  /* a different seed gives a different stream */
  static collect c;
  memset(&c, 0, sizeof c);
  cosy_rng_seed(&r, 99);
  assert_int_equal(ref_llm_generate(F.l, emb, L, min_len, max_len, &s, &r, collect_fn, &c, NULL),
                   COSY_OK);
  int same = c.n == a.n && memcmp(c.tok, a.tok, sizeof(int32_t) * (size_t)a.n) == 0;
  assert_false(same);

  /* max_len caps the stream; min_len = max_len forbids stopping early */
  memset(&c, 0, sizeof c);
  cosy_rng_seed(&r, 5);
  int nc = -1;
  assert_int_equal(ref_llm_generate(F.l, emb, L, 7, 7, &s, &r, collect_fn, &c, &nc), COSY_OK);
  assert_int_equal(nc, 7);

  /* cancellation through the callback */
  memset(&c, 0, sizeof c);
  c.stop_after = 5;
  cosy_rng_seed(&r, 1234);
  assert_int_equal(ref_llm_generate(F.l, emb, L, min_len, max_len, &s, &r, collect_fn, &c, &nc),
                   COSY_ERR_CANCELLED);
  assert_int_equal(c.n, 5);
  assert_memory_equal(c.tok, a.tok, 5 * sizeof(int32_t));

  ref_kv_free(kv);
  free(logp);
  free(scratch);
  free(e);
  free(hist);
  free(emb);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lm_input),
      cmocka_unit_test(test_prefill_and_forced_decode),
      cmocka_unit_test(test_bad_args),
      cmocka_unit_test(test_silent_filter),
      cmocka_unit_test(test_generate),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
