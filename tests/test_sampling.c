/* test_sampling.c - the seeded RNG and RAS sampling (lib/ref/sampling.c, docs/model.md section 4).
 *
 * Hand-built distributions with known answers:
 *   - RNG: pinned first outputs of xoshiro256** seeded through splitmix64 (values computed by an
 *     independent Python transcription of the published algorithms), determinism, range, mean.
 *   - nucleus: which ids can be drawn (crossing token included, nothing beyond top_k, ties broken
 *     by the lower id as a stable sort does).
 *   - frequencies: over N draws each id's count is compared with N * p_expected (p computed here
 *     in closed form) through Pearson's chi-square. Draws are seeded, so the statistic is a fixed
 *     number; the bound (CHI2_MAX = 30 for <= 5 degrees of freedom, p < 2e-5 for a correct
 *     sampler) only guards against seeds that happen to be unlucky. A wrong rule (crossing token
 *     excluded, no renormalisation, resampling inside the nucleus, ...) shifts some expected
 *     frequency by >= 0.05, i.e. a chi-square in the thousands at N = 100000.
 *   - repetition: a token in the last win_size history entries is never returned; the others get
 *     its mass in proportion to the FULL distribution; outside the window it is drawn again.
 *   - min_len: with ignore_eos no id >= 6561 is ever drawn, even when they hold most of the mass.
 *   - temperature: T -> 0 gives the argmax; T = 2 gives p^(1/2) renormalised. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ref/sampling.h"
#include "testutil.h"

#define NV 6761
#define SMALL 64
#define CHI2_MAX 30.0

static float logp[NV], scratch[2 * NV];
/* Vocabulary size of the current distribution: the full 6761 where stop ids matter, else a
 * small one (the sampler costs ~5 ns per vocabulary entry, mostly expf; this keeps the test fast) */
static int nv = NV;

/* logp = log(p) for the listed ids, -inf elsewhere; vocabulary of size vocab */
static void set_dist(const int *ids, const double *p, int n, int vocab) {
  nv = vocab;
  for (int i = 0; i < NV; i++) logp[i] = -INFINITY;
  for (int i = 0; i < n; i++) logp[ids[i]] = (float)log(p[i]);
}

static void count_draws(const cosy_sampling *s, const int32_t *hist, int nh, int ignore_eos,
                        uint64_t seed, int n, int *counts) {
  cosy_rng r;
  cosy_rng_seed(&r, seed);
  memset(counts, 0, sizeof(int) * NV);
  for (int i = 0; i < n; i++) {
    int32_t t = cosy_sample_ras(logp, nv, hist, nh, s, ignore_eos, &r, scratch);
    assert_true(t >= 0 && t < nv);
    counts[t]++;
  }
}

/* Pearson chi-square of counts over ids[0..k) against expected probabilities; every other id
 * must have count 0. */
static double chi2(const int *counts, const int *ids, const double *pexp, int k, int n) {
  double x2 = 0.0;
  int in_set = 0;
  for (int i = 0; i < k; i++) {
    double e = n * pexp[i], d = counts[ids[i]] - e;
    x2 += d * d / e;
    in_set += counts[ids[i]];
  }
  assert_int_equal(in_set, n); /* nothing drawn outside the expected support */
  return x2;
}

static void test_rng(void **state) {
  (void)state;
  cosy_rng a, b;
  cosy_rng_seed(&a, 0);
  assert_true(cosy_rng_next(&a) == 0x99ec5f36cb75f2b4ull);
  assert_true(cosy_rng_next(&a) == 0xbf6e1f784956452aull);
  assert_true(cosy_rng_next(&a) == 0x1a5f849d4933e6e0ull);
  cosy_rng_seed(&a, 42);
  assert_true(cosy_rng_next(&a) == 0x15780b2e0c2ec716ull);
  assert_true(cosy_rng_next(&a) == 0x6104d9866d113a7eull);
  assert_true(cosy_rng_next(&a) == 0xae17533239e499a1ull);

  cosy_rng_seed(&a, 123456789);
  cosy_rng_seed(&b, 123456789);
  double mean = 0.0;
  const int n = 100000;
  for (int i = 0; i < n; i++) {
    double u = cosy_rng_uniform(&a);
    assert_true(u == cosy_rng_uniform(&b));
    assert_true(u >= 0.0 && u < 1.0);
    mean += u;
  }
  mean /= n;
  print_message("uniform mean over %d draws: %.5f (expect 0.5 +- 0.005)\n", n, mean);
  assert_true(fabs(mean - 0.5) < 0.005);
  cosy_rng_seed(&b, 123456788);
  cosy_rng_seed(&a, 123456789);
  assert_true(cosy_rng_next(&a) != cosy_rng_next(&b));
}

static void test_nucleus_support(void **state) {
  (void)state;
  cosy_sampling s = cosy_sampling_default();
  static int counts[NV];
  /* p: 0.5, 0.2, 0.15, 0.1, 0.05 on scattered ids; top_p 0.8: cum 0.5, 0.7 (< 0.8, so the 0.15
   * token that crosses 0.8 is included), then 0.85 stops */
  const int ids[] = {30, 17, 40, 2, 60};
  const double p[] = {0.5, 0.2, 0.15, 0.1, 0.05};
  set_dist(ids, p, 5, SMALL);
  count_draws(&s, NULL, 0, 0, 1, 20000, counts);
  assert_true(counts[30] > 0 && counts[17] > 0 && counts[40] > 0);
  assert_int_equal(counts[2] + counts[60], 0);

  /* top_k 2 cuts before top_p */
  s.top_k = 2;
  count_draws(&s, NULL, 0, 0, 2, 20000, counts);
  assert_true(counts[30] > 0 && counts[17] > 0);
  assert_int_equal(counts[30] + counts[17], 20000);

  /* top_k 1 = argmax */
  s.top_k = 1;
  count_draws(&s, NULL, 0, 0, 3, 1000, counts);
  assert_int_equal(counts[30], 1000);

  /* ties: four ids of 0.25 each; top_k 2 keeps the two lowest ids (stable descending sort) */
  s = cosy_sampling_default();
  s.top_k = 2;
  const int tid[] = {63, 50, 55, 51};
  const double tp[] = {0.25, 0.25, 0.25, 0.25};
  set_dist(tid, tp, 4, SMALL);
  count_draws(&s, NULL, 0, 0, 4, 4000, counts);
  assert_true(counts[50] > 0 && counts[51] > 0);
  assert_int_equal(counts[50] + counts[51], 4000);
  /* ties decide the order too: two ids of 0.45, top_p 0.4 -> the first one alone is taken, and
   * the first is the lower id */
  s = cosy_sampling_default();
  s.top_p = 0.4f;
  const int t2[] = {51, 50, 60};
  const double p2[] = {0.45, 0.45, 0.1};
  set_dist(t2, p2, 3, SMALL);
  count_draws(&s, NULL, 0, 0, 7, 1000, counts);
  assert_int_equal(counts[50], 1000);

  /* the crossing token is the last one taken */
  s = cosy_sampling_default();
  const int eid[] = {10, 11, 12};
  const double ep[] = {0.5, 0.3, 0.2};
  set_dist(eid, ep, 3, SMALL);
  s.top_p = 0.75f; /* 0.5 < 0.75 -> take 0.3 -> 0.8 >= 0.75 stop: {10, 11} */
  count_draws(&s, NULL, 0, 0, 5, 4000, counts);
  assert_int_equal(counts[12], 0);
  assert_true(counts[10] > 0 && counts[11] > 0);
  s.top_p = 0.4f; /* the first token alone crosses 0.4 */
  count_draws(&s, NULL, 0, 0, 6, 1000, counts);
  assert_int_equal(counts[10], 1000);
}

static void test_frequencies(void **state) {
  (void)state;
  cosy_sampling s = cosy_sampling_default();
  static int counts[NV];
  const int n = 100000;
  const int ids[] = {30, 17, 40, 2, 60};
  const double p[] = {0.5, 0.2, 0.15, 0.1, 0.05};
  set_dist(ids, p, 5, SMALL);

  /* default nucleus: {30, 17, 40} renormalised by 0.85 */
  const double e1[] = {0.5 / 0.85, 0.2 / 0.85, 0.15 / 0.85};
  count_draws(&s, NULL, 0, 0, 11, n, counts);
  double x = chi2(counts, ids, e1, 3, n);
  print_message("nucleus top_p 0.8: chi2 %.2f (2 dof, bound %g)\n", x, CHI2_MAX);
  assert_true(x < CHI2_MAX);

  /* top_k 2: {30, 17} renormalised by 0.7 */
  s.top_k = 2;
  const double e2[] = {0.5 / 0.7, 0.2 / 0.7};
  count_draws(&s, NULL, 0, 0, 12, n, counts);
  x = chi2(counts, ids, e2, 2, n);
  print_message("top_k 2: chi2 %.2f (1 dof)\n", x);
  assert_true(x < CHI2_MAX);

  /* top_p 1, top_k >= support: the full distribution */
  s.top_k = 25;
  s.top_p = 1.0f;
  count_draws(&s, NULL, 0, 0, 13, n, counts);
  x = chi2(counts, ids, p, 5, n);
  print_message("top_p 1: chi2 %.2f (4 dof)\n", x);
  assert_true(x < CHI2_MAX);

  /* temperature 2 with the full distribution: sqrt(p) renormalised */
  s.temperature = 2.0f;
  double e3[5], z = 0.0;
  for (int i = 0; i < 5; i++) z += sqrt(p[i]);
  for (int i = 0; i < 5; i++) e3[i] = sqrt(p[i]) / z;
  count_draws(&s, NULL, 0, 0, 14, n, counts);
  x = chi2(counts, ids, e3, 5, n);
  print_message("temperature 2: chi2 %.2f (4 dof)\n", x);
  assert_true(x < CHI2_MAX);
}

static void test_repetition(void **state) {
  (void)state;
  cosy_sampling s = cosy_sampling_default();
  static int counts[NV];
  const int n = 100000;
  const int ids[] = {30, 17, 40, 2, 60};
  const double p[] = {0.5, 0.2, 0.15, 0.1, 0.05};
  set_dist(ids, p, 5, SMALL);
  /* 30 once in the last 10 tokens (10 * 0.1 = 1 occurrence suffices) */
  int32_t hist[12] = {30, 5, 5, 5, 5, 5, 5, 5, 5, 5, 30, 5};
  /* nucleus q = {30: .5/.85, 17: .2/.85, 40: .15/.85}; a drawn 30 is replaced by a draw from
   * the FULL distribution without it: j gets p_j / 0.5. */
  const double q30 = 0.5 / 0.85;
  const int rid[] = {17, 40, 2, 60};
  const double e[] = {0.2 / 0.85 + q30 * 0.2 / 0.5, 0.15 / 0.85 + q30 * 0.15 / 0.5,
                      q30 * 0.1 / 0.5, q30 * 0.05 / 0.5};
  count_draws(&s, hist, 12, 0, 21, n, counts);
  assert_int_equal(counts[30], 0);
  double x = chi2(counts, rid, e, 4, n);
  print_message("repetition resample: chi2 %.2f (3 dof); %d draws of 2 and %d of 60 "
                "(outside the nucleus)\n", x, counts[2], counts[60]);
  assert_true(x < CHI2_MAX);

  /* 30 only 11 positions back: outside the window, drawn normally */
  int32_t old[11] = {30, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5};
  const double e1[] = {0.5 / 0.85, 0.2 / 0.85, 0.15 / 0.85};
  count_draws(&s, old, 11, 0, 22, n, counts);
  x = chi2(counts, ids, e1, 3, n);
  print_message("repeated token outside the window: chi2 %.2f\n", x);
  assert_true(x < CHI2_MAX);

  /* tau_r 0.2: one occurrence (< 2) does not trigger, two do */
  s.tau_r = 0.2f;
  count_draws(&s, hist + 2, 10, 0, 23, 20000, counts); /* one 30 in the window */
  assert_true(counts[30] > 0);
  int32_t two[10] = {5, 30, 5, 5, 5, 5, 30, 5, 5, 5};
  count_draws(&s, two, 10, 0, 24, 20000, counts);      /* two 30s */
  assert_int_equal(counts[30], 0);

  /* only one token has mass: the resample has nothing left, the repeated token is kept */
  s = cosy_sampling_default();
  const int one[] = {42};
  const double pone[] = {1.0};
  set_dist(one, pone, 1, SMALL);
  int32_t h42[1] = {42};
  count_draws(&s, h42, 1, 0, 25, 100, counts);
  assert_int_equal(counts[42], 100);
}

static void test_min_len_mask(void **state) {
  (void)state;
  cosy_sampling s = cosy_sampling_default();
  static int counts[NV];
  /* most mass on stop ids: sos 6561, eos 6562, 6760 */
  const int ids[] = {6561, 6562, 6760, 100, 200};
  const double p[] = {0.3, 0.3, 0.2, 0.15, 0.05};
  set_dist(ids, p, 5, NV);
  count_draws(&s, NULL, 0, 1, 31, 5000, counts);
  int stops = 0;
  for (int i = COSY_SPEECH_TOKENS; i < NV; i++) stops += counts[i];
  assert_int_equal(stops, 0);
  /* masked: {100: .75, 200: .25}; top_p 0.8: 0.75 < 0.8 so 200 is included too */
  const int sid[] = {100, 200};
  const double e[] = {0.75, 0.25};
  double x = chi2(counts, sid, e, 2, 5000);
  print_message("ignore_eos: chi2 %.2f\n", x);
  assert_true(x < CHI2_MAX);
  count_draws(&s, NULL, 0, 0, 32, 5000, counts);
  assert_true(counts[6561] > 0 && counts[6562] > 0 && counts[6760] > 0);
  /* only stop ids have mass: nothing can be drawn while they are masked */
  const double ps[] = {0.5, 0.3, 0.2};
  set_dist(ids, ps, 3, NV);
  cosy_rng r;
  cosy_rng_seed(&r, 1);
  assert_int_equal(cosy_sample_ras(logp, NV, NULL, 0, &s, 1, &r, scratch), -1);
}

static void test_temperature(void **state) {
  (void)state;
  cosy_sampling s = cosy_sampling_default();
  static int counts[NV];
  const int ids[] = {30, 17, 40, 2, 60};
  const double p[] = {0.5, 0.2, 0.15, 0.1, 0.05};
  set_dist(ids, p, 5, SMALL);
  s.temperature = 0.01f; /* (0.2/0.5)^100 ~ 1e-40 */
  count_draws(&s, NULL, 0, 0, 41, 5000, counts);
  assert_int_equal(counts[30], 5000);
}

static void test_bad_args(void **state) {
  (void)state;
  cosy_sampling s = cosy_sampling_default();
  cosy_rng r;
  cosy_rng_seed(&r, 1);
  const int ids[] = {1, 2};
  const double p[] = {0.5, 0.5};
  set_dist(ids, p, 2, NV);
  assert_int_equal(cosy_sample_ras(NULL, NV, NULL, 0, &s, 0, &r, scratch), -1);
  assert_int_equal(cosy_sample_ras(logp, 0, NULL, 0, &s, 0, &r, scratch), -1);
  assert_int_equal(cosy_sample_ras(logp, NV, NULL, 3, &s, 0, &r, scratch), -1);
  assert_int_equal(cosy_sample_ras(logp, NV, NULL, 0, &s, 0, NULL, scratch), -1);
  assert_int_equal(cosy_sample_ras(logp, NV, NULL, 0, &s, 0, &r, NULL), -1);
  assert_int_equal(cosy_sample_ras(logp, NV, NULL, 0, NULL, 0, &r, scratch), -1);
  cosy_sampling b = s;
  b.temperature = 0.0f;
  assert_int_equal(cosy_sampling_check(&b), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_sample_ras(logp, NV, NULL, 0, &b, 0, &r, scratch), -1);
  b = s;
  b.top_p = 1.5f;
  assert_int_equal(cosy_sampling_check(&b), COSY_ERR_INVALID_ARG);
  b = s;
  b.top_k = 0;
  assert_int_equal(cosy_sampling_check(&b), COSY_ERR_INVALID_ARG);
  b = s;
  b.win_size = -1;
  assert_int_equal(cosy_sampling_check(&b), COSY_ERR_INVALID_ARG);
  b = s;
  b.tau_r = NAN;
  assert_int_equal(cosy_sampling_check(&b), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_sampling_check(&s), COSY_OK);
  logp[5] = NAN;
  assert_int_equal(cosy_sample_ras(logp, NV, NULL, 0, &s, 0, &r, scratch), -1);
  for (int i = 0; i < NV; i++) logp[i] = -INFINITY;
  assert_int_equal(cosy_sample_ras(logp, NV, NULL, 0, &s, 0, &r, scratch), -1);
  /* a small vocabulary (no stop ids) works, ignore_eos has nothing to mask */
  float small[3] = {logf(0.9f), logf(0.05f), logf(0.05f)};
  int32_t t = cosy_sample_ras(small, 3, NULL, 0, &s, 1, &r, scratch);
  assert_true(t == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rng),          cmocka_unit_test(test_nucleus_support),
      cmocka_unit_test(test_frequencies),  cmocka_unit_test(test_repetition),
      cmocka_unit_test(test_min_len_mask), cmocka_unit_test(test_temperature),
      cmocka_unit_test(test_bad_args),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
