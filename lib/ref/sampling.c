/* sampling.c - RAS sampling on the host; the math and the choices are documented in
 * sampling.h.
 *
 * Scratch layout for cosy_sample_ras (n = n_vocab):
 *   scratch[0 .. n)        p, the tempered and masked softmax (fp32)
 *   scratch[n .. n + k)    the top-k candidate ids (k = min(top_k, n)), stored as float (exact
 *                          for ids < 2^24), kept sorted by p descending / id ascending.
 * The top-k ids are found by insertion into that sorted list while scanning ids in increasing
 * order, moving past strictly smaller p only, which gives exactly the first k entries of a
 * stable descending sort. */
#include "ref/sampling.h"

#include <math.h>
#include <stddef.h>

#include "util.h"

/* ---- RAS ------------------------------------------------------------------------------------ */

/* Draw an index of w[0..n) (indirect through ids when ids != NULL) with probability w/sum. */
static int draw(const float *p, const float *ids, int n, double total, cosy_rng *rng) {
  double u = cosy_rng_uniform(rng) * total, acc = 0.0;
  int last = -1;
  for (int i = 0; i < n; i++) {
    float w = ids ? p[(int)ids[i]] : p[i];
    if (w <= 0.0f) continue;
    acc += w;
    last = i;
    if (u < acc) return i;
  }
  return last; /* u landed on the rounding tail of the sum */
}

int32_t cosy_sample_ras(const float *logp, int n_vocab, const int32_t *history, int n_history,
                        const cosy_sampling *s, int ignore_eos, cosy_rng *rng, float *scratch) {
  if (!logp || !scratch || !rng) {
    cosy_err(COSY_ERR_INVALID_ARG, "sample_ras: NULL logp, scratch or rng");
    return -1;
  }
  if (n_vocab < 1 || n_vocab >= (1 << 24)) {
    cosy_err(COSY_ERR_INVALID_ARG, "sample_ras: n_vocab %d out of range", n_vocab);
    return -1;
  }
  if (n_history < 0 || (n_history > 0 && !history)) {
    cosy_err(COSY_ERR_INVALID_ARG, "sample_ras: bad history (%d entries)", n_history);
    return -1;
  }
  if (cosy_sampling_check(s) != COSY_OK) return -1;

  const int n = n_vocab;
  const int n_allowed = (ignore_eos && n > COSY_SPEECH_TOKENS) ? COSY_SPEECH_TOKENS : n;
  float *p = scratch;
  float *cand = scratch + n;
  const float inv_t = 1.0f / s->temperature;

  /* 1-2: tempered, masked softmax */
  float mx = -INFINITY;
  for (int i = 0; i < n_allowed; i++) {
    if (isnan(logp[i])) {
      cosy_err(COSY_ERR_INVALID_ARG, "sample_ras: NaN log-probability at id %d", i);
      return -1;
    }
    float x = s->temperature == 1.0f ? logp[i] : logp[i] * inv_t;
    if (x > mx) mx = x;
  }
  if (!isfinite(mx)) {
    cosy_err(COSY_ERR_INVALID_ARG, "sample_ras: no finite log-probability among %d ids",
             n_allowed);
    return -1;
  }
  double sum = 0.0;
  for (int i = 0; i < n_allowed; i++) {
    float x = s->temperature == 1.0f ? logp[i] : logp[i] * inv_t;
    float e = expf(x - mx);
    p[i] = e;
    sum += e;
  }
  for (int i = n_allowed; i < n; i++) p[i] = 0.0f;
  const float inv_sum = (float)(1.0 / sum);
  for (int i = 0; i < n_allowed; i++) p[i] *= inv_sum;

  /* 3: top-k candidates in stable descending order, then the top-p prefix */
  const int k = s->top_k < n ? s->top_k : n;
  int c = 0;
  for (int i = 0; i < n; i++) {
    float pi = p[i];
    if (c == k && !(pi > p[(int)cand[k - 1]])) continue;
    int j = c < k ? c++ : k - 1; /* when full, the last entry falls off */
    while (j > 0 && p[(int)cand[j - 1]] < pi) {
      cand[j] = cand[j - 1];
      j--;
    }
    cand[j] = (float)i;
  }
  float cum = 0.0f;
  int taken = 0;
  double total = 0.0;
  while (taken < c && cum < s->top_p) {
    float w = p[(int)cand[taken]];
    cum += w;
    total += w;
    taken++;
  }
  int pick = draw(p, cand, taken, total, rng);
  int32_t id = (int32_t)cand[pick < 0 ? 0 : pick];

  /* 4: repetition aware resampling */
  if (s->win_size > 0) {
    int from = n_history > s->win_size ? n_history - s->win_size : 0, rep = 0;
    for (int i = from; i < n_history; i++) rep += history[i] == id;
    float thr = (float)s->win_size * s->tau_r;
    if ((float)rep >= thr) {
      p[id] = 0.0f;
      double rest = 0.0;
      for (int i = 0; i < n; i++) rest += p[i];
      if (rest > 0.0) {
        int r = draw(p, NULL, n, rest, rng);
        if (r >= 0) id = r;
      }
    }
  }
  return id;
}
