/* sampling.c - the sampler's parameters (sampling.h): defaults and range checks. */
#include "sampling.h"

#include <math.h>

#include "util.h"

cosy_sampling cosy_sampling_default(void) {
  const cosy_sampling s = COSY_SAMPLING_DEFAULT;
  return s;
}

cosy_sampling cosy_sampling_from_params(const cosy_synth_params *p) {
  cosy_sampling s = COSY_SAMPLING_DEFAULT;
  s.temperature = p->temperature;
  s.top_p = p->top_p;
  s.top_k = p->top_k;
  return s;
}

cosy_status cosy_sampling_check(const cosy_sampling *s) {
  if (!s) return cosy_err(COSY_ERR_INVALID_ARG, "sampling: NULL parameters");
  if (!(s->temperature > 0.0f) || !isfinite(s->temperature))
    return cosy_err(COSY_ERR_INVALID_ARG, "sampling: temperature %g must be > 0",
                    (double)s->temperature);
  if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
    return cosy_err(COSY_ERR_INVALID_ARG, "sampling: top_p %g not in (0, 1]", (double)s->top_p);
  if (s->top_k < 1) return cosy_err(COSY_ERR_INVALID_ARG, "sampling: top_k %d < 1", s->top_k);
  if (s->win_size < 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "sampling: win_size %d < 0", s->win_size);
  if (!(s->tau_r >= 0.0f) || !isfinite(s->tau_r))
    return cosy_err(COSY_ERR_INVALID_ARG, "sampling: tau_r %g must be >= 0", (double)s->tau_r);
  return COSY_OK;
}
