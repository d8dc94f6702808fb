/* backend_cpu.c - the CPU backend: the plain-C reference stages of lib/ref/ behind the
 * cosy_backend interface. The reference objects are read-only after creation, so concurrent
 * requests need no lock; each sequence owns its KV cache. */
#include <stdlib.h>

#include "engine.h"
#include "ref/flow.h"
#include "ref/hift.h"
#include "ref/llm.h"
#include "ref/sampling.h"
#include "util.h"

typedef struct cpu_state {
  ref_llm *llm;
  ref_flow *flow;
  ref_hift *hift;
} cpu_state;

#define ST(e) ((cpu_state *)(e)->be_state)

static void cpu_destroy(cosy_engine *e) {
  cpu_state *s = ST(e);
  if (!s) return;
  ref_hift_free(s->hift);
  ref_flow_free(s->flow);
  ref_llm_free(s->llm);
  free(s);
  e->be_state = NULL;
}

static cosy_status cpu_create(cosy_engine *e) {
  cpu_state *s = (cpu_state *)cosy_calloc(1, sizeof *s);
  if (!s) return COSY_ERR_NO_MEMORY;
  e->be_state = s;
  cosy_status st;
  if ((st = ref_llm_create(e->model, &s->llm)) || (st = ref_flow_create(e->model, &s->flow)) ||
      (st = ref_hift_create(e->model, &s->hift))) {
    cpu_destroy(e);
    return st;
  }
  return COSY_OK;
}

static void cpu_stats(const cosy_engine *e, cosy_engine_stats *s) {
  s->weights_bytes = (int64_t)e->model->f->size;
}

static cosy_status cpu_llm_input(cosy_engine *e, const int32_t *pt, int n_pt, const int32_t *tt,
                                 int n_tt, const int32_t *ps, int n_ps, float **emb, int *L) {
  return ref_llm_build_input(ST(e)->llm, pt, n_pt, tt, n_tt, ps, n_ps, emb, L);
}

/* a sequence: its KV cache and the buffers of its steps */
typedef struct cpu_seq {
  ref_kv *kv;
  float *logp;    /* [speech_vocab] */
  float *scratch; /* COSY_SAMPLE_SCRATCH(speech_vocab) */
  float *x;       /* [llm_hidden] */
} cpu_seq;

static void cpu_llm_close(cosy_engine *e, void *seq) {
  (void)e;
  cpu_seq *q = (cpu_seq *)seq;
  if (!q) return;
  ref_kv_free(q->kv);
  free(q->logp);
  free(q->scratch);
  free(q->x);
  free(q);
}

static cosy_status cpu_llm_open(cosy_engine *e, int max_positions, void **seq) {
  const int V = e->speech_vocab;
  cpu_seq *q = (cpu_seq *)cosy_calloc(1, sizeof *q);
  if (!q) return COSY_ERR_NO_MEMORY;
  q->logp = (float *)cosy_malloc(sizeof(float) * (size_t)V);
  q->scratch = (float *)cosy_malloc(sizeof(float) * COSY_SAMPLE_SCRATCH(V));
  q->x = (float *)cosy_malloc(sizeof(float) * (size_t)e->model->hp.llm_hidden);
  cosy_status st = !q->logp || !q->scratch || !q->x ? COSY_ERR_NO_MEMORY
                                                    : ref_kv_create(ST(e)->llm, max_positions,
                                                                    &q->kv);
  if (st) {
    cpu_llm_close(e, q);
    return st;
  }
  *seq = q;
  return COSY_OK;
}

static cosy_status cpu_next(cosy_engine *e, cpu_seq *q, const cosy_next_req *nx, int32_t *next) {
  const int32_t tok = cosy_sample_ras(q->logp, e->speech_vocab, nx->hist, nx->n_hist, nx->samp,
                                      nx->ignore_eos, nx->rng, q->scratch);
  if (tok < 0) return COSY_ERR_INTERNAL; /* message set by the sampler */
  *next = tok;
  return COSY_OK;
}

static cosy_status cpu_llm_prefill(cosy_engine *e, void *seq, const float *emb, int L,
                                   const cosy_next_req *nx, int32_t *next) {
  cpu_seq *q = (cpu_seq *)seq;
  cosy_status st = ref_llm_forward(ST(e)->llm, q->kv, emb, L, NULL, q->logp, NULL, NULL);
  return st ? st : cpu_next(e, q, nx, next);
}

static cosy_status cpu_llm_decode(cosy_engine *e, void *seq, int32_t token,
                                  const cosy_next_req *nx, int32_t *next) {
  ref_llm *l = ST(e)->llm;
  cpu_seq *q = (cpu_seq *)seq;
  ref_llm_embed_speech(l, token, q->x);
  cosy_status st = ref_llm_forward(l, q->kv, q->x, 1, NULL, q->logp, NULL, NULL);
  return st ? st : cpu_next(e, q, nx, next);
}

static cosy_status cpu_flow_infer(cosy_engine *e, const int32_t *tokens, int n_prompt, int n_gen,
                                  const float *prompt_mel, int n_prompt_frames, const float *spk,
                                  int streaming, int finalize, int urgent,
                                  const volatile int *cancel, float **mel, int *n_frames) {
  (void)urgent;
  return ref_flow_infer(ST(e)->flow, tokens, n_prompt, n_gen, prompt_mel, n_prompt_frames, spk,
                        streaming, finalize, cancel, mel, n_frames, NULL);
}

static cosy_status cpu_hift_infer(cosy_engine *e, const float *mel, int T, int finalize,
                                  int urgent, const volatile int *cancel, float **wav,
                                  int64_t *n) {
  (void)urgent;
  return ref_hift_infer(ST(e)->hift, mel, T, finalize, NULL, cancel, wav, n);
}

const cosy_backend cosy_backend_cpu = {
    "cpu",          0,               cpu_create,      cpu_destroy,    cpu_stats,      cpu_llm_input,
    cpu_llm_open,   cpu_llm_close,   cpu_llm_prefill, cpu_llm_decode, cpu_flow_infer,
    cpu_hift_infer,
};
