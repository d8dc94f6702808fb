/* backend_cpu.c - the CPU backend (beside backend_gpu.c): the plain-C reference stages of
 * lib/ref/ behind the cosy_backend interface. The reference objects are read-only after
 * creation, so concurrent requests need no lock; each sequence owns its KV cache. */
#include <stdlib.h>
#include <string.h>

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
  /* COSY_TEST_FLOW_PAGES (tests of the scheduler's page gate): a pool of that many pages that the
   * flow states take blocks from as the GPU's cache would (the CPU reference recomputes every
   * call, so the pages change nothing but what cpu_flow_pages reports); 0: no pool */
  int sim_pages, sim_used; /* sim_used: atomic */
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
  /* nothing per utterance is reserved at admission but the LLM's KV cache (ref_kv_create's
   * limit): the flow and the vocoder allocate per call, and the model's noise (300 s, the
   * official flow's own limit) bounds an utterance's actual length, not its ceiling */
  e->caps.flow_frames = 0;
  e->caps.voc_frames = 0;
  e->caps.llm_positions = 1 << 24;
  e->caps.where = "the CPU reference";
  s->sim_pages = e->knobs.test_flow_pages;
  return COSY_OK;
}

static void cpu_stats(const cosy_engine *e, cosy_engine_stats *s) {
  s->weights_bytes = (int64_t)e->model->f->size;
}

static cosy_status cpu_llm_input(cosy_engine *e, const int32_t *pt, int n_pt, const int32_t *tt,
                                 int n_tt, const int32_t *ps, int n_ps, float **emb, int *L) {
  return ref_llm_build_input(ST(e)->llm, pt, n_pt, tt, n_tt, ps, n_ps, emb, L);
}

static cosy_status cpu_llm_embed(cosy_engine *e, const int32_t *items, int n, float **emb) {
  return ref_llm_embed_items(ST(e)->llm, items, n, emb);
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

/* the sequences one after the other (the reference has no packed forward) */
static cosy_status cpu_llm_prefill(cosy_engine *e, cosy_prefill_row *rows, int n) {
  for (int i = 0; i < n; i++) {
    cpu_seq *q = (cpu_seq *)rows[i].seq;
    cosy_status st = ref_llm_forward(ST(e)->llm, q->kv, rows[i].emb, rows[i].L, NULL, q->logp,
                                     NULL, NULL);
    if (st) return st;
    rows[i].status = rows[i].nx ? cpu_next(e, q, rows[i].nx, &rows[i].next) : COSY_OK;
  }
  return COSY_OK;
}

/* the rows one after the other (the reference has no batched forward) */
static cosy_status cpu_llm_step(cosy_engine *e, cosy_llm_row *rows, int n) {
  ref_llm *l = ST(e)->llm;
  for (int i = 0; i < n; i++) {
    cpu_seq *q = (cpu_seq *)rows[i].seq;
    ref_llm_embed_speech(l, rows[i].token, q->x);
    cosy_status st = ref_llm_forward(l, q->kv, q->x, 1, NULL, q->logp, NULL, NULL);
    if (st) return st;
    rows[i].status = cpu_next(e, q, &rows[i].nx, &rows[i].next);
  }
  return COSY_OK;
}

/* flow: the reference recomputes prompt + tokens every call (block-causal calls give the same
 * earlier frames, so this equals reusing them) */
typedef struct cpu_flow_state {
  cosy_flow_prompt p;
  int blocks; /* simulated pool pages held (COSY_TEST_FLOW_PAGES) */
} cpu_flow_state;

static cosy_status cpu_flow_open(cosy_engine *e, const cosy_flow_prompt *p, int max_gen, void **fs) {
  (void)e;
  (void)max_gen;
  cpu_flow_state *f = (cpu_flow_state *)cosy_calloc(1, sizeof *f);
  if (!f) return COSY_ERR_NO_MEMORY;
  f->p = *p;
  *fs = f;
  return COSY_OK;
}

static void cpu_flow_close(cosy_engine *e, void *fs) {
  const cpu_flow_state *f = (const cpu_flow_state *)fs;
  if (f && f->blocks) __atomic_sub_fetch(&ST(e)->sim_used, f->blocks, __ATOMIC_RELAXED);
  free(fs);
}

/* the simulated pool (COSY_TEST_FLOW_PAGES): a block-causal, non-final call takes pages for the
 * 50-frame blocks it completes (its tokens but the 3 look-ahead ones), as many as are free */
static void sim_take(cpu_state *s, cpu_flow_state *f, const cosy_flow_job *j) {
  if (s->sim_pages <= 0 || j->finalize || j->full_attention) return;
  const int want = 2 * (f->p.n_tokens + j->n_gen - 3) / 50;
  for (int b = f->blocks; b < want; b++) {
    int used = __atomic_load_n(&s->sim_used, __ATOMIC_RELAXED);
    if (used >= s->sim_pages ||
        !__atomic_compare_exchange_n(&s->sim_used, &used, used + 1, 0, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
      break;
    f->blocks++;
  }
}

static int cpu_flow_pages(cosy_engine *e, void *fs) {
  cpu_state *s = ST(e);
  if (s->sim_pages <= 0) return -1;
  if (fs) return ((const cpu_flow_state *)fs)->blocks;
  return s->sim_pages - __atomic_load_n(&s->sim_used, __ATOMIC_RELAXED);
}

cosy_status flow_job_take(cosy_flow_job *j, const float *mel_cf, int frames) {
  if (j->frame_from < 0 || j->frame_from + j->n_frames > frames)
    return cosy_err(COSY_ERR_INTERNAL, "flow returned %d frames, needed %d", frames,
                    j->frame_from + j->n_frames);
  for (int t = 0; t < j->n_frames; t++)
    for (int c = 0; c < 80; c++)
      j->mel[(size_t)t * 80 + c] = mel_cf[(size_t)c * frames + j->frame_from + t];
  return COSY_OK;
}

static cosy_status cpu_flow_run(cosy_engine *e, cosy_flow_job *jobs, int n, int urgent,
                                const volatile int *cancel) {
  (void)urgent;
  for (int i = 0; i < n; i++) {
    cosy_flow_job *j = &jobs[i];
    cpu_flow_state *f = (cpu_flow_state *)j->fs;
    float *mel = NULL;
    int frames = 0;
    j->status = ref_flow_infer(ST(e)->flow, j->tokens, f->p.n_tokens, j->n_gen, f->p.mel,
                               2 * f->p.n_tokens, f->p.spk, !j->full_attention, j->finalize,
                               cancel, &mel, &frames, NULL);
    if (!j->status) j->status = flow_job_take(j, mel, frames);
    if (!j->status) sim_take(ST(e), f, j);
    free(mel);
  }
  return COSY_OK;
}

/* vocoder: one streaming state per utterance (each frame vocoded once, lib/ref/hift.h) */
static cosy_status cpu_voc_open(cosy_engine *e, int max_frames, void **vs) {
  (void)max_frames;
  return ref_hift_stream_create(ST(e)->hift, (ref_hift_stream **)vs);
}

static void cpu_voc_close(cosy_engine *e, void *vs) {
  (void)e;
  ref_hift_stream_free((ref_hift_stream *)vs);
}

static cosy_status cpu_vocode(cosy_engine *e, cosy_voc_job *jobs, int n, int urgent,
                              const volatile int *cancel) {
  (void)urgent;
  for (int i = 0; i < n; i++) {
    cosy_voc_job *j = &jobs[i];
    j->wav = NULL;
    j->n = 0;
    j->status = ref_hift_stream_run(ST(e)->hift, (ref_hift_stream *)j->vs, j->mel, j->n_new,
                                    j->finalize, cancel, &j->wav, &j->n);
  }
  return COSY_OK;
}

const cosy_backend cosy_backend_cpu = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .stats = cpu_stats,
    .llm_input = cpu_llm_input,
    .llm_embed = cpu_llm_embed,
    .llm_open = cpu_llm_open,
    .llm_close = cpu_llm_close,
    .llm_prefill = cpu_llm_prefill,
    .llm_step = cpu_llm_step,
    .flow_open = cpu_flow_open,
    .flow_close = cpu_flow_close,
    .flow_pages = cpu_flow_pages,
    .flow_run = cpu_flow_run,
    .voc_open = cpu_voc_open,
    .voc_close = cpu_voc_close,
    .vocode = cpu_vocode,
};
