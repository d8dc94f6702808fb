/* sampling.h - the speech-token sampler's parameters: their one declaration, defaults, limits
 * and named constants, used by the API defaults (lib/api.c), the scheduler (lib/sched_jobs.c,
 * one cosy_sampling per request), the CPU sampler (lib/ref/sampling.c: cosy_sample_ras, the
 * algorithm, RAS, docs/model.md section 4) and the GPU sampler's host side
 * (lib/backend_gpu.c: the rows of kernels/sample.cu's cosy_k_ras_sample). The generator
 * they draw from is lib/rng.h.
 *
 * The official settings: temperature 1, top_p 0.8, top_k 25, and the repetition check over a
 * window of 10 tokens with tau_r 0.1 (win_size * tau_r is computed in float: 10 * 0.1f == 1.0f,
 * so one occurrence in the window triggers a redraw). Callers choose temperature, top_p and
 * top_k (cosy_synth_params, 0 = the default); the window and tau_r are fixed. */
#ifndef COSY_SAMPLING_H
#define COSY_SAMPLING_H

#include "cosyvoice.h"
#include "rng.h"

/* Speech token ids are 0..6560; every id >= 6561 is a stop id (sos, eos, task_id, fill, unused). */
#define COSY_SPEECH_TOKENS 6561

/* defaults (the official settings) */
#define COSY_SAMPLING_TEMPERATURE 1.0f
#define COSY_SAMPLING_TOP_P 0.8f
#define COSY_SAMPLING_TOP_K 25
/* the repetition-aware part of the official settings (not caller knobs) */
#define COSY_RAS_WIN_SIZE 10
#define COSY_RAS_TAU_R 0.1f

/* what cosy_synth_params accepts: temperature in (0, MAX], top_p in (0, 1], top_k in 1..MAX */
#define COSY_SAMPLING_TEMPERATURE_MAX 2.0f
#define COSY_SAMPLING_TOP_K_MAX COSY_SPEECH_TOKENS

typedef struct cosy_sampling {
  float temperature; /* > 0, 1.0 = official */
  float top_p;       /* (0, 1], official 0.8 */
  int top_k;         /* >= 1 (clamped to n_vocab), official 25 */
  int win_size;      /* >= 0 history window of the repetition check, official 10 (0 = off) */
  float tau_r;       /* >= 0, official 0.1 */
} cosy_sampling;

/* The official settings, as an initializer: cosy_sampling s = COSY_SAMPLING_DEFAULT; */
#define COSY_SAMPLING_DEFAULT                                                                    \
  {                                                                                              \
    .temperature = COSY_SAMPLING_TEMPERATURE, .top_p = COSY_SAMPLING_TOP_P,                      \
    .top_k = COSY_SAMPLING_TOP_K, .win_size = COSY_RAS_WIN_SIZE, .tau_r = COSY_RAS_TAU_R         \
  }

/* The official settings: 1.0, 0.8, 25, 10, 0.1. */
cosy_sampling cosy_sampling_default(void);
/* A request's settings: temperature, top_p and top_k from p (defaults already applied by
 * lib/api.c), the fixed window and tau_r. */
cosy_sampling cosy_sampling_from_params(const cosy_synth_params *p);
/* COSY_OK when every field is in range, else COSY_ERR_INVALID_ARG with a message. */
cosy_status cosy_sampling_check(const cosy_sampling *s);

#endif
