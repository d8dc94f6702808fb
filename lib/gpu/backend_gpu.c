/* backend_gpu.c - the GPU backend: the stages of lib/gpu/ (LLM with a paged KV cache and CUDA
 * graphs, the DiT flow, HiFT) behind the cosy_backend interface.
 *
 * Memory plan at creation, all inside gpu_memory_fraction of the device: weights of the three
 * stages, the flow and vocoder workspaces for the longest utterance (MAX_FRAMES mel frames incl.
 * the prompt), the LLM activations, and then the paged KV cache takes what is left (minus a
 * reserve). A fraction too small for the weights fails here with COSY_ERR_GPU_NO_MEMORY.
 *
 * Concurrency: the LLM runs on the context's high-priority stream; the flow and the vocoder on a
 * child context (its own low-priority stream and cuBLASLt workspace), so a request's chunk work
 * (pipeline.c's chunk thread) overlaps its next LLM tokens. Calls into one side are serialized by
 * that side's mutex; requests on several workers interleave step by step (continuous batching of
 * many requests into one decode step is the scheduler's job, not done yet). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "util.h"

#if defined(__has_include)
#if __has_include("gpu/llm.h") && __has_include("gpu/flow.h") && __has_include("gpu/hift.h")
#define HAVE_GPU_STAGES 1
#endif
#endif

#ifdef HAVE_GPU_STAGES
#include "gpu/flow.h"
#include "gpu/gpu.h"
#include "gpu/hift.h"
#include "gpu/llm.h"
#include "ref/sampling.h"

#define MAX_FRAMES 3000   /* mel frames per flow / vocoder call, prompt included (60 s) */
#define KV_RESERVE ((size_t)64 << 20)

typedef struct gpu_state {
  cosy_gpu *g;      /* LLM */
  cosy_gpu *post;   /* flow + vocoder (child of g) */
  gpu_llm *llm;
  gpu_flow *flow;
  gpu_hift *hift;
  pthread_mutex_t mu;       /* LLM calls */
  pthread_mutex_t mu_post;  /* flow and vocoder calls */
} gpu_state;

#define ST(e) ((gpu_state *)(e)->be_state)

static void gb_destroy(cosy_engine *e) {
  gpu_state *s = ST(e);
  if (!s) return;
  gpu_hift_free(s->hift);
  gpu_flow_free(s->flow);
  gpu_llm_free(s->llm);
  cosy_gpu_free(s->post);
  cosy_gpu_free(s->g);
  pthread_mutex_destroy(&s->mu);
  pthread_mutex_destroy(&s->mu_post);
  free(s);
  e->be_state = NULL;
}

static cosy_status gb_create(cosy_engine *e) {
  gpu_state *s = (gpu_state *)cosy_calloc(1, sizeof *s);
  if (!s) return COSY_ERR_NO_MEMORY;
  pthread_mutex_init(&s->mu, NULL);
  pthread_mutex_init(&s->mu_post, NULL);
  e->be_state = s;
  cosy_status st;
  int max_seqs = e->cfg.max_active > 0 ? e->cfg.max_active : 1;
  if ((st = cosy_gpu_create(e->cfg.device, e->cfg.gpu_memory_fraction, &s->g)) ||
      (st = cosy_gpu_create_child(s->g, &s->post)) ||
      (st = gpu_llm_create(s->g, e->model, max_seqs, 512, &s->llm)) ||
      (st = gpu_flow_create(s->post, e->model, MAX_FRAMES, &s->flow)) ||
      (st = gpu_hift_create(s->post, e->model, MAX_FRAMES, &s->hift)) ||
      (st = gpu_llm_reserve_kv(s->llm, 0, KV_RESERVE))) {
    gb_destroy(e);
    return st;
  }
  return COSY_OK;
}

static void gb_stats(const cosy_engine *e, cosy_engine_stats *out) {
  gpu_state *s = ST(e);
  out->kv_bytes = (int64_t)gpu_llm_kv_bytes(s->llm);
  out->kv_pages_total = gpu_llm_pages_total(s->llm);
  out->kv_pages_used = out->kv_pages_total - gpu_llm_pages_free(s->llm);
  out->device_bytes_total = (int64_t)s->g->used;
  out->weights_bytes = 0; /* included in device_bytes_total */
  out->workspace_bytes = (int64_t)s->g->used - out->kv_bytes;
}

static cosy_status gb_llm_input(cosy_engine *e, const int32_t *pt, int n_pt, const int32_t *tt,
                                int n_tt, const int32_t *ps, int n_ps, float **emb, int *L) {
  return gpu_llm_build_input(ST(e)->llm, pt, n_pt, tt, n_tt, ps, n_ps, emb, L);
}

typedef struct gseq {
  int id;
} gseq;

static cosy_status gb_llm_open(cosy_engine *e, int max_positions, void **seq) {
  gpu_state *s = ST(e);
  gseq *q = (gseq *)cosy_malloc(sizeof *q);
  if (!q) return COSY_ERR_NO_MEMORY;
  pthread_mutex_lock(&s->mu);
  cosy_status st = gpu_llm_seq_open(s->llm, max_positions, &q->id);
  pthread_mutex_unlock(&s->mu);
  if (st) {
    free(q);
    return st;
  }
  *seq = q;
  return COSY_OK;
}

static void gb_llm_close(cosy_engine *e, void *seq) {
  gpu_state *s = ST(e);
  pthread_mutex_lock(&s->mu);
  gpu_llm_seq_close(s->llm, ((gseq *)seq)->id);
  pthread_mutex_unlock(&s->mu);
  free(seq);
}

/* The next token from the log-probs the step just left on the device (called with mu held, so
 * no other sequence's step overwrote them): RAS on the GPU, or on the host when the parameters
 * are beyond the kernel's limits (top_k > COSY_K_RAS_MAX_K, win_size > COSY_K_RAS_MAX_HIST). */
static cosy_status gb_next(cosy_engine *e, gpu_state *s, const cosy_next_req *nx, int32_t *next) {
  const cosy_sampling *sp = nx->samp;
  cosy_status st = cosy_sampling_check(sp);
  if (st) return st;
  const int V = e->speech_vocab;
  if (!cosy_k_ras_supported(V, sp->top_k, sp->win_size)) {
    float *logp = (float *)cosy_malloc(sizeof(float) * (size_t)V);
    float *scratch = (float *)cosy_malloc(sizeof(float) * COSY_SAMPLE_SCRATCH(V));
    st = !logp || !scratch ? COSY_ERR_NO_MEMORY : gpu_llm_logp(s->llm, 1, logp);
    int32_t tok = -1;
    if (!st) {
      tok = cosy_sample_ras(logp, V, nx->hist, nx->n_hist, sp, nx->ignore_eos, nx->rng, scratch);
      if (tok < 0) st = COSY_ERR_INTERNAL; /* message set by the sampler */
    }
    free(logp);
    free(scratch);
    if (!st) *next = tok;
    return st;
  }
  cosy_k_ras_row row;
  memset(&row, 0, sizeof row);
  memcpy(row.rng, nx->rng->s, sizeof row.rng);
  row.temperature = sp->temperature;
  row.top_p = sp->top_p;
  row.tau_r = sp->tau_r;
  row.top_k = sp->top_k;
  row.win_size = sp->win_size;
  row.n_allowed = nx->ignore_eos && V > COSY_SPEECH_TOKENS ? COSY_SPEECH_TOKENS : V;
  const int nh = nx->n_hist < sp->win_size ? nx->n_hist : sp->win_size;
  row.n_hist = nh;
  if (nh > 0) memcpy(row.hist, nx->hist + nx->n_hist - nh, sizeof(int32_t) * (size_t)nh);
  if ((st = gpu_llm_sample(s->llm, 1, &row))) return st;
  if (row.status)
    return cosy_err(COSY_ERR_INTERNAL, "sampling: %s", row.status == 1
                                                            ? "NaN log-probability"
                                                            : "no finite log-probability");
  memcpy(nx->rng->s, row.rng, sizeof row.rng);
  *next = row.token;
  return COSY_OK;
}

static cosy_status gb_llm_prefill(cosy_engine *e, void *seq, const float *emb, int L,
                                  const cosy_next_req *nx, int32_t *next) {
  gpu_state *s = ST(e);
  pthread_mutex_lock(&s->mu);
  cosy_status st = gpu_llm_prefill(s->llm, ((gseq *)seq)->id, emb, L, NULL);
  if (!st) st = gb_next(e, s, nx, next);
  pthread_mutex_unlock(&s->mu);
  return st;
}

static cosy_status gb_llm_decode(cosy_engine *e, void *seq, int32_t token,
                                 const cosy_next_req *nx, int32_t *next) {
  gpu_state *s = ST(e);
  int id = ((gseq *)seq)->id;
  pthread_mutex_lock(&s->mu);
  cosy_status st = gpu_llm_decode(s->llm, &id, &token, 1, NULL);
  if (!st) st = gb_next(e, s, nx, next);
  pthread_mutex_unlock(&s->mu);
  return st;
}

/* urgent calls (an utterance's first chunk) run on the child context's highest-priority stream,
 * so their blocks are scheduled ahead of the LLM's; each call waits for its own stream, so the
 * swap never leaves work of one call on the other stream */
static void post_begin(gpu_state *s, int urgent, cudaStream_t *saved) {
  pthread_mutex_lock(&s->mu_post);
  *saved = s->post->stream;
  if (urgent && s->post->stream_urgent) s->post->stream = s->post->stream_urgent;
}
static void post_end(gpu_state *s, cudaStream_t saved) {
  s->post->stream = saved;
  pthread_mutex_unlock(&s->mu_post);
}

static cosy_status gb_flow_infer(cosy_engine *e, const int32_t *tokens, int n_prompt, int n_gen,
                                 const float *prompt_mel, int n_prompt_frames, const float *spk,
                                 int streaming, int finalize, int urgent,
                                 const volatile int *cancel, float **mel, int *n_frames) {
  gpu_state *s = ST(e);
  cudaStream_t saved;
  post_begin(s, urgent, &saved);
  cosy_status st = gpu_flow_infer(s->flow, tokens, n_prompt, n_gen, prompt_mel, n_prompt_frames,
                                  spk, streaming, finalize, cancel, mel, n_frames);
  post_end(s, saved);
  return st;
}

static cosy_status gb_hift_infer(cosy_engine *e, const float *mel, int T, int finalize,
                                 int urgent, const volatile int *cancel, float **wav,
                                 int64_t *n) {
  gpu_state *s = ST(e);
  cudaStream_t saved;
  post_begin(s, urgent, &saved);
  cosy_status st = gpu_hift_infer(s->hift, mel, T, finalize, cancel, wav, n);
  post_end(s, saved);
  return st;
}

const cosy_backend cosy_backend_gpu = {
    "gpu",         1 /* the LLM waits for the first chunk's flow */, gb_create,    gb_destroy,     gb_stats,      gb_llm_input,  gb_llm_open,
    gb_llm_close,  gb_llm_prefill, gb_llm_decode, gb_flow_infer, gb_hift_infer,
};

#else /* the GPU stages are not in this build */

static cosy_status gb_unsupported(cosy_engine *e) {
  (void)e;
  return cosy_err(COSY_ERR_UNSUPPORTED, "this build has no GPU stages; use COSY_DEVICE_CPU");
}

const cosy_backend cosy_backend_gpu = {"gpu", 0,    gb_unsupported, NULL, NULL, NULL, NULL,
                                       NULL,  NULL, NULL,           NULL, NULL};
#endif
