/* backend_gpu.c - the GPU backend (beside backend_cpu.c): the stages of lib/gpu/ (LLM with a
 * paged KV cache and CUDA graphs, the DiT flow, HiFT) behind the cosy_backend interface.
 *
 * Memory plan at creation, all inside gpu_memory_fraction of the device: weights of the three
 * stages, the flow workspaces for the longest utterance (FLOW_UTT_FRAMES mel frames incl. the
 * prompt) and the vocoder's for its longest call (VOC_FRAMES), the LLM activations, the flow's
 * batch buffers; of what is left (less KV_RESERVE) the flow's cache pages take three quarters,
 * or all but the LLM KV cache's full size (max_active
 * sequences of LLM_KV_POSITIONS) when that is more, and the LLM KV cache the rest, never less
 * than KV_MIN_POSITIONS positions. A budget too small for all that fails here with
 * COSY_ERR_GPU_NO_MEMORY and a message saying how much the engine needs: measured by planning
 * the same engine again within all the free memory of the device (then released), so the
 * number is what this model, max_active and build take, not an estimate. docs/gpus.md ("GPU memory")
 * gives the settings per GPU size.
 *
 * Concurrency: the LLM runs on the context's high-priority stream; the flow and the vocoder each
 * on a child context of their own (its own low-priority stream, urgent stream and cuBLASLt
 * workspace), so a request's chunk work (the scheduler's token-to-wave and vocoder threads)
 * overlaps the LLM's next tokens and one batch's vocoder overlaps the next batch's flow. Each
 * stage is called from one scheduler thread at a time (the vocoder from the vocoder thread or,
 * while that one is idle, the token-to-wave thread); the scheduler (lib/scheduler.c) batches every active
 * request's decode step, flow chunk and vocoder call into these calls (docs/scheduler.md). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "util.h"

/* built in every configuration; without CUDA (CUDA=0: no lib/gpu/, no kernels) only the stub at
 * the end, which refuses a GPU engine */
#ifdef COSY_WITH_CUDA
#include "gpu/flow.h"
#include "gpu/frontend.h"
#include "gpu/gpu.h"
#include "gpu/hift.h"
#include "kernels_hift.h" /* COSY_HPREC_* */
#include "gpu/llm.h"
#include "ref/s3tok.h" /* S3TOK_MAX_SECONDS */
#include "ref/sampling.h"

/* per-utterance capacity: COSY_GPU_UTT_FRAMES (flow) and COSY_GPU_VOC_FRAMES (one vocoder call),
 * lib/engine.h */
#define FLOW_UTT_FRAMES COSY_GPU_UTT_FRAMES
#define VOC_FRAMES COSY_GPU_VOC_FRAMES
_Static_assert(COSY_GPU_UTT_POSITIONS == GPU_LLM_MAX_CTX, "COSY_GPU_UTT_POSITIONS != GPU_LLM_MAX_CTX");
#define KV_RESERVE ((size_t)64 << 20)
#define GB_MAX_PREFILL 2048  /* positions of one packed prefill forward pass */
/* LLM KV positions planned per active sequence: 4096 hold the default ceiling of a segment of the
 * official split (~80 text tokens: 1600 speech tokens) with its input and a 30 s voice (750
 * prompt tokens), so that max_active requests of long text decode together. Measured on an H200
 * (bench/RESULTS.md, long text: 16 requests of a 2,000-character paragraph, max_active 16): with
 * 1024 the LLM ran 4.3 rows a step and first audio p95 was 5.9 s (9.7 s with a 30 s voice), the
 * requests waiting for KV pages at admission; with 2048, 7.5 rows and 3.2 s (4.7 s). On a large
 * GPU this takes a few GB from the flow's cache pages; on a small one the KV cache is bounded by
 * its quarter of the budget anyway. */
#define LLM_KV_POSITIONS 4096
/* the smallest LLM KV cache an engine starts with: one request of the longest context, so any
 * request fits an idle engine (sched_llm.c: admission) */
#define KV_MIN_POSITIONS GPU_LLM_MAX_CTX
#define FE_MAX_MEL (S3TOK_MAX_SECONDS * 100 + 8) /* log-mel / fbank frames of the longest prompt */

typedef struct gpu_state {
  cosy_gpu *g;      /* LLM */
  cosy_gpu *post;   /* flow and the voice front end (child of g) */
  cosy_gpu *voc;    /* vocoder (child of g) */
  gpu_llm *llm;
  gpu_flow *flow;
  gpu_hift *hift;
  gpu_fe *fe;               /* voice front end (NULL: no front end in the file, or no room) */
  pthread_mutex_t mu;       /* the KV page accounting (sequence open/close vs. stats) */
  pthread_mutex_t flow_mu;  /* the flow's page pool (batches vs. closes): apart from mu,
                               so that the LLM thread opening or closing a sequence never waits
                               for a flow batch, which holds it until the device is done (under
                               W3, mu held through every batch kept the LLM idle ~40% of the time) */
  int step_cap;             /* rows of a decode step (max_active) */
  int *step_ids;
  int32_t *step_toks;
  int flow_recompute;       /* COSY_FLOW_CACHE=0: every chunk recomputes the prefix */
} gpu_state;

#define ST(e) ((gpu_state *)(e)->be_state)


static void gb_destroy(cosy_engine *e) {
  gpu_state *s = ST(e);
  if (!s) return;
  /* the caller's thread may be on another device (another engine's): free on this one's */
  if (s->g) cudaSetDevice(s->g->device);
  if (s->hift && e->cfg.vocoder_precision == COSY_VOCODER_FP16) {
    int64_t jobs = 0, fb = 0;
    gpu_hift_f16_stats(s->hift, &jobs, &fb);
    engine_log(e, COSY_LOG_INFO,
               "vocoder fp16: %lld TF32 fallbacks in %lld jobs (activations beyond 65504)",
               (long long)fb, (long long)jobs);
  }
  gpu_fe_free(s->fe);
  gpu_hift_free(s->hift);
  gpu_flow_free(s->flow);
  gpu_llm_free(s->llm);
  cosy_gpu_free(s->voc);
  cosy_gpu_free(s->post);
  cosy_gpu_free(s->g);
  pthread_mutex_destroy(&s->mu);
  pthread_mutex_destroy(&s->flow_mu);
  free(s->step_ids);
  free(s->step_toks);
  free(s);
  e->be_state = NULL;
}

/* FLOW_UTT_FRAMES, or the model's noise frames when it has fewer (the flow's own limit) */
static int flow_utt_frames(const cosy_engine *e) {
  const int nf = e->model->hp.noise_frames;
  return nf < FLOW_UTT_FRAMES ? nf : FLOW_UTT_FRAMES;
}

/* the three stages on s->g (made by the caller) and its child; the flow's batch buffers and cache
 * pages, the LLM KV cache: the plan of the comment at the top. measure: the flow gets no cache
 * pages and the LLM no KV cache (the rest of the minimum is added by the caller). */
static cosy_status plan_stages(cosy_engine *e, gpu_state *s, int max_seqs, int measure) {
  cosy_status st;
  if ((st = cosy_gpu_create_child(s->g, &s->post)) ||
      (st = cosy_gpu_create_child(s->g, &s->voc)) ||
      (st = gpu_llm_create(s->g, e->model, max_seqs, GB_MAX_PREFILL, &s->llm)) ||
      (st = gpu_flow_create(s->post, e->model, flow_utt_frames(e), &s->flow)) ||
      (st = gpu_hift_create(s->voc, e->model, VOC_FRAMES, &s->hift)))
    return st;
  /* the vocoder's convolutions in TF32 or fp16 instead of 3xTF32
   * (cosy_engine_config.vocoder_precision) */
  if (e->cfg.vocoder_precision == COSY_VOCODER_TF32 &&
      (st = gpu_hift_set_precision(s->hift, COSY_HPREC_TF32)))
    return st;
  if (!e->knobs.hift_staged && (st = gpu_hift_set_staged(s->hift, 0))) /* COSY_HIFT_STAGED=0 */
    return st;
  if (e->cfg.vocoder_precision == COSY_VOCODER_FP16 &&
      (st = gpu_hift_set_precision(s->hift, COSY_HPREC_F16)))
    return st;
  /* the voice front end (speech tokenizer + CAM++, fp32: ~1 GB for the full models) before the
   * pools take what is left; a budget that cannot hold it leaves cloning on the CPU */
  if (e->model->hp.has_s3tok && e->model->hp.has_campplus) {
    st = gpu_fe_create(s->post, e->model, FE_MAX_MEL, &s->fe);
    if (st == COSY_ERR_GPU_NO_MEMORY) {
      engine_log(e, COSY_LOG_WARN, "voice front end stays on the CPU: %s", cosy_last_error());
      cosy_err_clear();
      s->fe = NULL;
    } else if (st) {
      return st;
    }
  }
  if (measure) return gpu_flow_pool(s->flow, 1); /* the batch buffers, no page */
  const cosy_hparams *hp = &e->model->hp;
  const size_t per_pos = (size_t)hp->llm_layers * 2 * hp->llm_kv_heads * hp->llm_head_dim * 4;
  const size_t kv_min = (size_t)KV_MIN_POSITIONS * per_pos;
  const size_t kv_full = (size_t)max_seqs * LLM_KV_POSITIONS * per_pos;
  size_t left = cosy_gpu_left(s->g);
  if (left < kv_min + KV_RESERVE)
    return cosy_err(COSY_ERR_GPU_NO_MEMORY, "no room for the smallest LLM KV cache");
  left -= KV_RESERVE;
  size_t flow_want = left / 4 * 3;
  if (kv_full < left && left - kv_full > flow_want) flow_want = left - kv_full;
  /* the flow's buffers and pages may not take the smallest KV cache and the reserve */
  cosy_gpu_set_aside(s->g, kv_min + KV_RESERVE);
  st = gpu_flow_pool(s->flow, flow_want > 0 ? flow_want : 1);
  cosy_gpu_set_aside(s->g, 0);
  if (st) return st;
  left = cosy_gpu_left(s->g);
  size_t kv = left > KV_RESERVE ? left - KV_RESERVE : 0;
  if (kv > kv_full) kv = kv_full;
  if (kv < kv_min) kv = kv_min;
  return gpu_llm_reserve_kv(s->llm, kv, 0);
}

static void free_stages(gpu_state *s) {
  gpu_fe_free(s->fe);
  s->fe = NULL;
  gpu_hift_free(s->hift);
  gpu_flow_free(s->flow);
  gpu_llm_free(s->llm);
  cosy_gpu_free(s->voc);
  cosy_gpu_free(s->post);
  cosy_gpu_free(s->g);
  s->hift = NULL, s->flow = NULL, s->llm = NULL, s->voc = NULL, s->post = NULL, s->g = NULL;
}

/* After COSY_ERR_GPU_NO_MEMORY: how much the engine needs, measured by planning the same stages
 * within all the free memory of the device (then released), in the error message. */
static cosy_status report_need(cosy_engine *e, gpu_state *s, int max_seqs, const char *why,
                               int budget_from_free) {
  char first[512];
  snprintf(first, sizeof first, "%s", why);
  const cosy_hparams *hp = &e->model->hp;
  const size_t per_pos = (size_t)hp->llm_layers * 2 * hp->llm_kv_heads * hp->llm_head_dim * 4;
  const size_t kv_min = (size_t)KV_MIN_POSITIONS * per_pos;
  const double GiB = 1073741824.0, frac = e->cfg.gpu_memory_fraction;
  cosy_status st = cosy_gpu_create(e->cfg.device, 1.0f, &e->knobs, &s->g);
  if (!st) st = plan_stages(e, s, max_seqs, 1);
  if (!s->g) return cosy_err(COSY_ERR_GPU_NO_MEMORY, "%s", first);
  const size_t total = s->g->total, free_now = s->g->budget + COSY_GPU_RUNTIME_RESERVE;
  const size_t planned = s->g->used;
  free_stages(s);
  if (st) {
    char inner[400];
    snprintf(inner, sizeof inner, "%s", cosy_last_error());
    return cosy_err(COSY_ERR_GPU_NO_MEMORY,
                    "GPU %d: the engine needs more than the %.2f GiB free on the device (%.2f GiB "
                    "total; planning within all of it failed: %s): free device memory is the "
                    "budget that failed (gpu_memory_fraction %.3f would allow %.2f GiB); free "
                    "memory on the device (other processes or CUDA contexts hold %.2f GiB) or "
                    "lower max_active. First failure: %s",
                    e->cfg.device, (double)free_now / GiB, (double)total / GiB, inner, frac,
                    frac * (double)total / GiB, (double)(total - free_now) / GiB, first);
  }
  /* the engine's budget is the smaller of two (gpu.c): fraction x total, and the memory free on
   * the device, each less the runtime's reserve; the message says which one failed, and what
   * each holds */
  const size_t need = planned + kv_min + KV_RESERVE + COSY_GPU_RUNTIME_RESERVE;
  const double need_frac = (double)need / (double)total;
  const double share = frac * (double)total;
  const int free_fails = (double)need > (double)free_now, frac_fails = (double)need > share;
  char which[512];
  if (budget_from_free || (free_fails && !frac_fails))
    snprintf(which, sizeof which,
             "but only %.2f GiB of the device's %.2f GiB is free (other processes or CUDA "
             "contexts hold %.2f GiB): free device memory is the budget that failed, not "
             "gpu_memory_fraction (%.3f gives %.2f GiB%s); free memory on the device, or lower "
             "max_active",
             (double)free_now / GiB, (double)total / GiB, (double)(total - free_now) / GiB, frac,
             share / GiB, frac_fails ? ", too little as well" : ", enough");
  else
    snprintf(which, sizeof which,
             "but gpu_memory_fraction %.3f of the device's %.2f GiB gives %.2f GiB (%.2f GiB is "
             "free on the device%s): gpu_memory_fraction is the budget that failed; set "
             "gpu_memory_fraction to at least %.4f, or lower max_active",
             frac, (double)total / GiB, share / GiB, (double)free_now / GiB,
             free_fails ? ", too little as well" : "", need_frac + 0.0001);
  return cosy_err(COSY_ERR_GPU_NO_MEMORY,
                  "GPU %d: the engine needs %.2f GiB of GPU memory (model weights and workspaces "
                  "for max_active %d: %.2f GiB, the smallest LLM KV cache: %.0f MiB, reserves: "
                  "%.0f MiB) %s (README: GPU memory). First failure: %s",
                  e->cfg.device, (double)need / GiB, max_seqs, (double)planned / GiB,
                  (double)kv_min / 1048576.0,
                  (double)(KV_RESERVE + COSY_GPU_RUNTIME_RESERVE) / 1048576.0, which, first);
}

static cosy_status gb_create(cosy_engine *e) {
  /* test only: COSY_CUDA_FAULT arms injected CUDA failures from here on (gpu.h) */
  cosy_status fst = cosy_gpu_fault_from_knob(e->knobs.cuda_fault);
  if (fst) return fst;
  gpu_state *s = (gpu_state *)cosy_calloc(1, sizeof *s);
  if (!s) return COSY_ERR_NO_MEMORY;
  pthread_mutex_init(&s->mu, NULL);
  pthread_mutex_init(&s->flow_mu, NULL);
  e->be_state = s;
  cosy_status st;
  int max_seqs = e->cfg.max_active > 0 ? e->cfg.max_active : 1;
  s->step_cap = max_seqs;
  s->step_ids = (int *)cosy_malloc(sizeof(int) * (size_t)max_seqs);
  s->step_toks = (int32_t *)cosy_malloc(sizeof(int32_t) * (size_t)max_seqs);
  if (!s->step_ids || !s->step_toks) {
    gb_destroy(e);
    return COSY_ERR_NO_MEMORY;
  }
  if ((st = cosy_gpu_create(e->cfg.device, e->cfg.gpu_memory_fraction, &e->knobs, &s->g))) {
    gb_destroy(e);
    return st;
  }
  if ((st = plan_stages(e, s, max_seqs, 0))) {
    if (st == COSY_ERR_GPU_NO_MEMORY) {
      char why[512];
      snprintf(why, sizeof why, "%s", cosy_last_error());
      const int from_free = s->g->budget_from_free;
      free_stages(s);
      st = report_need(e, s, max_seqs, why, from_free);
    }
    gb_destroy(e);
    return st;
  }
  /* what one utterance may reserve: the scheduler checks each segment's ceiling against it */
  e->caps.flow_frames = flow_utt_frames(e);
  e->caps.voc_frames = VOC_FRAMES;
  e->caps.llm_positions = COSY_GPU_UTT_POSITIONS;
  e->caps.where = "the GPU flow";
  s->flow_recompute = e->knobs.flow_recompute; /* COSY_FLOW_CACHE=0 (a test knob) */
  gpu_flow_set_timing(s->flow, e->knobs.flow_timing);
  if (e->knobs.flow_nopad) gpu_flow_set_pad(s->flow, 0);
  if (e->knobs.flow_attn_split && !gpu_flow_set_attn_split(s->flow, e->knobs.flow_attn_split))
    engine_log(e, COSY_LOG_WARN, "COSY_FLOW_ATTN_SPLIT: not supported by this device (no "
                                 "thread-block clusters); the one-block attention runs");
  if (e->knobs.flow_attn_v2) gpu_flow_set_attn_v2(s->flow, e->knobs.flow_attn_v2);
  if (gpu_flow_ff1_fallbacks(s->flow))
    engine_log(e, COSY_LOG_WARN, "flow: cuBLASLt refused the ff1 GEMM's bias + GELU epilogue for "
                                 "%ld plans; those run as GEMM + bias/GELU kernel",
               gpu_flow_ff1_fallbacks(s->flow));
  gpu_llm_set_prefill_timing(s->llm, e->knobs.prefill_timing);
  /* COSY_LLM_DECODE (a test and measurement knob): "tc" (the default where the device runs it:
   * the batch-invariant LLM, every decode bucket on the tensor-core fused path and the prefill
   * GEMMs on one algorithm per shape, so a request's tokens do not depend on what else runs; see
   * lib/gpu/llm.c GPU_LLM_TC_DEFAULT), "mixed" (faster, not batch-invariant: skinny GEMM up to 4
   * rows, cuBLASLt above; a row's bits depend on the batch bucket) */
  if (e->knobs.llm_decode == COSY_KNOB_LLM_MIXED) gpu_llm_set_tc(s->llm, 0);
  if (e->knobs.llm_decode == COSY_KNOB_LLM_TC && !gpu_llm_set_tc(s->llm, 1))
    engine_log(e, COSY_LOG_WARN, "COSY_LLM_DECODE=tc: not supported by this model or device");
  /* the caller's COSY_ENGINE_BATCH_INVARIANT wins over the measurement knob */
  if ((e->cfg.flags & COSY_ENGINE_BATCH_INVARIANT) && !gpu_llm_set_tc(s->llm, 1)) {
    st = cosy_err(COSY_ERR_UNSUPPORTED,
                  "COSY_ENGINE_BATCH_INVARIANT: this GPU (compute capability %d.%d) or model "
                  "cannot run the batch-invariant LLM kernels",
                  s->g->dev.cc_major, s->g->dev.cc_minor);
    gb_destroy(e);
    return st;
  }
  const cosy_kdev *d = &s->g->dev;
  engine_log(e, COSY_LOG_INFO,
             "GPU %d: %s, compute capability %d.%d, %d SMs, %zu KB shared memory per block, "
             "clusters %s, programmatic dependent launch %s%s%s; budget %.2f GiB, planned %.2f GiB; "
             "LLM %s",
             d->device, d->name, d->cc_major, d->cc_minor, d->n_sm, d->smem_block / 1024,
             d->clusters ? "yes" : "no", d->pdl ? "yes" : "no",
             d->profile[0] ? ", test profile " : "", d->profile,
             (double)s->g->budget / 1073741824.0, (double)s->g->used / 1073741824.0,
             gpu_llm_tc(s->llm) ? "batch-invariant" : "mixed (not batch-invariant)");
  return COSY_OK;
}

static void gb_stats(const cosy_engine *e, cosy_engine_stats *out) {
  gpu_state *s = ST(e);
  pthread_mutex_lock(&s->mu);
  out->kv_bytes = (int64_t)gpu_llm_kv_bytes(s->llm);
  out->kv_pages_total = gpu_llm_pages_total(s->llm);
  out->kv_pages_used = out->kv_pages_total - gpu_llm_pages_free(s->llm);
  out->device_bytes_total = (int64_t)s->g->used;
  out->weights_bytes = 0; /* included in device_bytes_total */
  out->workspace_bytes = (int64_t)s->g->used - out->kv_bytes;
  pthread_mutex_unlock(&s->mu);
  /* without flow_mu: a batch holds it until the device is done, and the caller (engine_stats)
   * holds the engine lock that the LLM thread needs after every step (bench_w1's W3 sampler and
   * a server's /metrics call stats often); the free count is read atomically */
  out->flow_pages_total = gpu_flow_pages_total(s->flow);
  out->flow_pages_used = out->flow_pages_total - gpu_flow_pages_free(s->flow);
}

static void gb_info(const cosy_engine *e, cosy_engine_info *out) {
  gpu_state *s = ST(e);
  const cosy_kdev *d = &s->g->dev;
  pthread_mutex_lock(&s->mu);
  out->kv_pages_total = gpu_llm_pages_total(s->llm);
  pthread_mutex_unlock(&s->mu);
  out->kv_page_positions = GPU_LLM_PAGE_SIZE;
  out->flow_pages_total = gpu_flow_pages_total(s->flow);
  out->cc_major = d->cc_major;
  out->cc_minor = d->cc_minor;
  out->n_sm = d->n_sm;
  out->smem_per_block = (int32_t)d->smem_block;
  out->clusters = d->clusters;
  out->pdl = d->pdl;
  out->gpu_memory_fraction = e->cfg.gpu_memory_fraction;
  out->gpu_memory_budget = (int64_t)s->g->budget;
  out->gpu_memory_planned = (int64_t)s->g->used;
  snprintf(out->device_name, sizeof out->device_name, "%s", d->name);
  snprintf(out->gpu_profile, sizeof out->gpu_profile, "%s", d->profile);
}

static cosy_status gb_llm_input(cosy_engine *e, const int32_t *pt, int n_pt, const int32_t *tt,
                                int n_tt, const int32_t *ps, int n_ps, float **emb, int *L) {
  return gpu_llm_build_input(ST(e)->llm, pt, n_pt, tt, n_tt, ps, n_ps, emb, L);
}

static cosy_status gb_llm_embed(cosy_engine *e, const int32_t *items, int n, float **emb) {
  return gpu_llm_embed_items(ST(e)->llm, items, n, emb);
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

static void ras_row(const cosy_next_req *nx, int V, cosy_k_ras_row *row) {
  const cosy_sampling *sp = nx->samp;
  memset(row, 0, sizeof *row);
  memcpy(row->rng, nx->rng->s, sizeof row->rng);
  row->temperature = sp->temperature;
  row->top_p = sp->top_p;
  row->tau_r = sp->tau_r;
  row->top_k = sp->top_k;
  row->win_size = sp->win_size;
  row->n_allowed = nx->ignore_eos && V > COSY_SPEECH_TOKENS ? COSY_SPEECH_TOKENS : V;
  const int nh = nx->n_hist < sp->win_size ? nx->n_hist : sp->win_size;
  row->n_hist = nh;
  if (nh > 0) memcpy(row->hist, nx->hist + nx->n_hist - nh, sizeof(int32_t) * (size_t)nh);
}

/* The next token of each of the n rows from the log-probs the last prefill (n = 1) or decode
 * step left on the device: RAS on the GPU for every row within the kernel's limits, on the host
 * (from the downloaded log-probs) for the others (top_k > COSY_K_RAS_MAX_K, ...). */
static cosy_status gb_sample(cosy_engine *e, gpu_state *s, cosy_llm_row *rows, int n) {
  const int V = e->speech_vocab;
  cosy_status st = COSY_OK;
  int n_host = 0;
  for (int i = 0; i < n; i++) {
    const cosy_sampling *sp = rows[i].nx.samp;
    if ((rows[i].status = cosy_sampling_check(sp))) continue;
    if (!cosy_k_ras_supported(V, sp->top_k, sp->win_size)) n_host++;
  }
  if (n_host) {
    float *logp = (float *)cosy_malloc(sizeof(float) * (size_t)V * n);
    float *scratch = (float *)cosy_malloc(sizeof(float) * COSY_SAMPLE_SCRATCH(V));
    st = !logp || !scratch ? COSY_ERR_NO_MEMORY : gpu_llm_logp(s->llm, n, logp);
    for (int i = 0; i < n && !st; i++) {
      const cosy_next_req *nx = &rows[i].nx;
      if (rows[i].status || cosy_k_ras_supported(V, nx->samp->top_k, nx->samp->win_size)) continue;
      int32_t tok = cosy_sample_ras(logp + (size_t)i * V, V, nx->hist, nx->n_hist, nx->samp,
                                    nx->ignore_eos, nx->rng, scratch);
      if (tok < 0) rows[i].status = COSY_ERR_INTERNAL;
      rows[i].next = tok;
    }
    free(logp);
    free(scratch);
    if (st) return st;
  }
  if (n_host == n) return COSY_OK;
  /* the kernel samples every row (rows of the host path are drawn and ignored; their generator
   * state is not taken back) */
  cosy_k_ras_row *kr = (cosy_k_ras_row *)cosy_malloc(sizeof *kr * (size_t)n);
  if (!kr) return COSY_ERR_NO_MEMORY;
  for (int i = 0; i < n; i++) ras_row(&rows[i].nx, V, &kr[i]);
  if (!(st = gpu_llm_sample(s->llm, n, kr))) {
    for (int i = 0; i < n; i++) {
      const cosy_next_req *nx = &rows[i].nx;
      if (rows[i].status || !cosy_k_ras_supported(V, nx->samp->top_k, nx->samp->win_size)) continue;
      if (kr[i].status) {
        rows[i].status = COSY_ERR_INTERNAL;
        continue;
      }
      memcpy(nx->rng->s, kr[i].rng, sizeof kr[i].rng);
      rows[i].next = kr[i].token;
    }
  }
  free(kr);
  return st;
}

/* Prefill pieces packed into forward passes of at most GB_MAX_PREFILL positions (a piece longer
 * than that runs alone, in chunks), then one sampling call for the pieces that end a prompt. */
static cosy_status gb_llm_prefill(cosy_engine *e, cosy_prefill_row *rows, int n) {
  gpu_state *s = ST(e);
  if (n > s->step_cap) return cosy_err(COSY_ERR_INTERNAL, "prefill of %d rows > %d", n, s->step_cap);
  int *ids = s->step_ids;
  const float **embs = (const float **)cosy_malloc(sizeof *embs * (size_t)n);
  int *Ls = (int *)cosy_malloc(sizeof(int) * (size_t)n);
  int *want = (int *)cosy_malloc(sizeof(int) * (size_t)n);
  cosy_llm_row *sr = (cosy_llm_row *)cosy_calloc((size_t)n, sizeof *sr);
  cosy_status st = !embs || !Ls || !want || !sr ? COSY_ERR_NO_MEMORY : COSY_OK;
  for (int i = 0; i < n && !st;) {
    int j = i, tot = 0;
    while (j < n && tot + rows[j].L <= GB_MAX_PREFILL) tot += rows[j++].L;
    int nw = 0;
    if (j == i) { /* one long piece */
      st = gpu_llm_prefill(s->llm, ((gseq *)rows[i].seq)->id, rows[i].emb, rows[i].L, NULL);
      nw = rows[i].nx != NULL;
      j = i + 1;
    } else {
      for (int k = i; k < j; k++) {
        ids[k - i] = ((gseq *)rows[k].seq)->id;
        embs[k - i] = rows[k].emb;
        Ls[k - i] = rows[k].L;
        want[k - i] = rows[k].nx != NULL;
      }
      st = gpu_llm_prefill_batch(s->llm, j - i, ids, embs, Ls, want, &nw);
    }
    if (st) break;
    int k = 0;
    for (int r = i; r < j; r++) {
      rows[r].status = COSY_OK;
      if (!rows[r].nx) continue;
      memset(&sr[k], 0, sizeof sr[k]);
      sr[k].seq = rows[r].seq;
      sr[k].nx = *rows[r].nx;
      k++;
    }
    if (k && !(st = gb_sample(e, s, sr, k)))
      for (int r = i, q = 0; r < j; r++)
        if (rows[r].nx) {
          rows[r].status = sr[q].status;
          rows[r].next = sr[q].next;
          q++;
        }
    i = j;
  }
  free(embs);
  free(Ls);
  free(want);
  free(sr);
  if (st) cosy_gpu_drain(s->g);
  return st;
}

static cosy_status gb_llm_step(cosy_engine *e, cosy_llm_row *rows, int n) {
  gpu_state *s = ST(e);
  int *ids = s->step_ids;
  int32_t *toks = s->step_toks;
  if (n > s->step_cap) return cosy_err(COSY_ERR_INTERNAL, "decode step of %d rows > %d", n, s->step_cap);
  for (int i = 0; i < n; i++) {
    ids[i] = ((gseq *)rows[i].seq)->id;
    toks[i] = rows[i].token;
  }
  cosy_status st = gpu_llm_decode(s->llm, ids, toks, n, NULL);
  if (!st) st = gb_sample(e, s, rows, n);
  if (st) cosy_gpu_drain(s->g);
  return st;
}

/* urgent calls (a batch holding an utterance's first chunk) run on the stage context's
 * highest-priority stream, so their blocks are scheduled ahead of the LLM's; each call waits for
 * its own stream, so the swap never leaves work of one call on the other stream */
static void post_begin(cosy_gpu *c, int urgent, cudaStream_t *saved) {
  *saved = c->stream;
  if (urgent && c->stream_urgent) c->stream = c->stream_urgent;
}
static void post_end(cosy_gpu *c, cudaStream_t saved) { c->stream = saved; }

typedef struct gflow_state {
  cosy_flow_prompt p;
  gpu_flow_req *q;
} gflow_state;

static cosy_status gb_flow_open(cosy_engine *e, const cosy_flow_prompt *p, int max_gen, void **fs) {
  gpu_state *s = ST(e);
  gflow_state *f = (gflow_state *)cosy_calloc(1, sizeof *f);
  if (!f) return COSY_ERR_NO_MEMORY;
  f->p = *p;
  cosy_status st = gpu_flow_req_open(s->flow, p->tokens, p->n_tokens, p->mel, p->spk, max_gen, &f->q);
  if (st) {
    free(f);
    return st;
  }
  *fs = f;
  return COSY_OK;
}

static void gb_flow_close(cosy_engine *e, void *fs) {
  gpu_state *s = ST(e);
  gflow_state *f = (gflow_state *)fs;
  if (!f) return;
  pthread_mutex_lock(&s->flow_mu); /* page accounting vs. stats and batches */
  gpu_flow_req_close(s->flow, f->q);
  pthread_mutex_unlock(&s->flow_mu);
  free(f);
}

static int gb_flow_pages(cosy_engine *e, void *fs) {
  gpu_state *s = ST(e);
  if (fs) return gpu_flow_req_pages(((gflow_state *)fs)->q);
  return gpu_flow_pages_total(s->flow) > 0 ? gpu_flow_pages_free(s->flow) : -1;
}

static cosy_status gb_flow_run(cosy_engine *e, cosy_flow_job *jobs, int n, int urgent,
                               const volatile int *cancel) {
  gpu_state *s = ST(e);
  cudaStream_t saved;
  post_begin(s->post, urgent, &saved);
  cosy_status st = COSY_OK;
  if (s->flow_recompute) {
    for (int i = 0; i < n; i++) {
      cosy_flow_job *j = &jobs[i];
      const gflow_state *f = (const gflow_state *)j->fs;
      float *mel = NULL;
      int frames = 0;
      j->status = gpu_flow_infer(s->flow, j->tokens, f->p.n_tokens, j->n_gen, f->p.mel,
                                 2 * f->p.n_tokens, f->p.spk, !j->full_attention, j->finalize,
                                 cancel, &mel, &frames);
      if (!j->status) j->status = flow_job_take(j, mel, frames);
      free(mel);
    }
  } else {
    gpu_flow_call *c = (gpu_flow_call *)cosy_calloc((size_t)(n > 0 ? n : 1), sizeof *c);
    if (!c) {
      post_end(s->post, saved);
      return COSY_ERR_NO_MEMORY;
    }
    for (int i = 0; i < n; i++) {
      c[i].q = ((gflow_state *)jobs[i].fs)->q;
      c[i].tokens = jobs[i].tokens;
      c[i].n_gen = jobs[i].n_gen;
      c[i].finalize = jobs[i].finalize;
      c[i].full = jobs[i].full_attention;
      c[i].frame_from = jobs[i].frame_from;
      c[i].n_frames = jobs[i].n_frames;
      c[i].mel = jobs[i].mel;
    }
    pthread_mutex_lock(&s->flow_mu); /* page accounting vs. stats and closes */
    st = gpu_flow_batch(s->flow, c, n, cancel);
    pthread_mutex_unlock(&s->flow_mu);
    for (int i = 0; i < n; i++) jobs[i].status = st;
    free(c);
  }
  int bad = st != COSY_OK;
  for (int i = 0; i < n; i++) bad |= jobs[i].status != COSY_OK;
  if (bad) cosy_gpu_drain(s->post);
  post_end(s->post, saved);
  return st;
}

/* vocoder: one streaming state per utterance, the batch's jobs in shared launches */
static cosy_status gb_voc_open(cosy_engine *e, int max_frames, void **vs) {
  (void)max_frames;
  return gpu_hift_stream_create(ST(e)->hift, (gpu_hift_stream **)vs);
}

static void gb_voc_close(cosy_engine *e, void *vs) {
  gpu_hift_stream_free(ST(e)->hift, (gpu_hift_stream *)vs);
}

static cosy_status gb_vocode(cosy_engine *e, cosy_voc_job *jobs, int n, int urgent,
                             const volatile int *cancel) {
  gpu_state *s = ST(e);
  gpu_hift_job *hj = (gpu_hift_job *)cosy_calloc((size_t)(n > 0 ? n : 1), sizeof *hj);
  if (!hj) return COSY_ERR_NO_MEMORY;
  for (int i = 0; i < n; i++) {
    hj[i].st = (gpu_hift_stream *)jobs[i].vs;
    hj[i].mel_new = jobs[i].mel;
    hj[i].T_new = jobs[i].n_new;
    hj[i].finalize = jobs[i].finalize;
  }
  cudaStream_t saved;
  post_begin(s->voc, urgent, &saved);
  int64_t fb0 = 0, fb1 = 0, nj = 0;
  gpu_hift_f16_stats(s->hift, NULL, &fb0);
  cosy_status st = gpu_hift_stream_run(s->hift, hj, n, cancel);
  gpu_hift_f16_stats(s->hift, &nj, &fb1);
  if (fb1 > fb0) /* COSY_VOCODER_FP16: jobs whose activations exceeded fp16's range */
    engine_log(e, COSY_LOG_DEBUG,
               "vocoder fp16: %lld of %d jobs recomputed in TF32 (activations beyond 65504); "
               "%lld TF32 fallbacks in %lld jobs",
               (long long)(fb1 - fb0), n, (long long)fb1, (long long)nj);
  if (st) cosy_gpu_drain(s->voc);
  post_end(s->voc, saved);
  for (int i = 0; i < n; i++) {
    jobs[i].wav = hj[i].wav;
    jobs[i].n = hj[i].n;
    jobs[i].status = st;
  }
  free(hj);
  return st;
}

/* the voice front end's models (voice_audio.c, on the token-to-wave thread: the post context's
 * stream and the front end's own cuBLASLt handle) */
static cosy_status gb_voice_features(cosy_engine *e, const float *logmel, int T_lm,
                                     const float *fbank, int T_fb, int32_t **tokens,
                                     int32_t *n_tokens, float *spk) {
  gpu_state *s = ST(e);
  if (!s->fe) return COSY_ERR_UNSUPPORTED;
  cosy_status st = cosy_gpu_check(cudaSetDevice(s->g->device), "cudaSetDevice");
  if (st) return st;
  return gpu_fe_run(s->fe, logmel, T_lm, fbank, T_fb, tokens, n_tokens, spk);
}

/* the scheduler's threads (lib/engine.h): the engine's device current on them. Not a checked
 * operation (cosy_gpu_check): the injected-failure count (COSY_CUDA_FAULT) stays that of the
 * stages; a failure here makes the first launch on this thread fail, with its own status. */
static void gb_thread_enter(cosy_engine *e) {
  gpu_state *s = ST(e);
  cudaError_t err = cudaSetDevice(s->g->device);
  if (err != cudaSuccess)
    engine_log(e, COSY_LOG_ERROR, "GPU %d: cudaSetDevice on a scheduler thread: %s", s->g->device,
               cudaGetErrorString(err));
}

const cosy_backend cosy_backend_gpu = {
    .name = "gpu",
    .create = gb_create,
    .destroy = gb_destroy,
    .stats = gb_stats,
    .info = gb_info,
    .llm_input = gb_llm_input,
    .llm_embed = gb_llm_embed,
    .llm_open = gb_llm_open,
    .llm_close = gb_llm_close,
    .llm_prefill = gb_llm_prefill,
    .llm_step = gb_llm_step,
    .flow_open = gb_flow_open,
    .flow_close = gb_flow_close,
    .flow_pages = gb_flow_pages,
    .flow_run = gb_flow_run,
    .voc_open = gb_voc_open,
    .voc_close = gb_voc_close,
    .vocode = gb_vocode,
    .voice_features = gb_voice_features,
    .thread_enter = gb_thread_enter,
    /* the vocoder thread only for the flow batches of later chunks that the batch caps cut
     * short (lib/sched_t2w.c, voc_mode 2): W2 ~4% faster on an H200 (the flow's stream no
     * longer idle through each vocoder call), W1 and W3 as before; every call on the thread
     * (1) cost 5% at W1's C = 16 (smaller flow batches: bench/RESULTS.md) */
    .vocoder_thread = 2,
};

#else /* COSY_WITH_CUDA: the GPU stages are not in this build */

static cosy_status gb_unsupported(cosy_engine *e) {
  (void)e;
  return cosy_err(COSY_ERR_UNSUPPORTED, "this build has no GPU stages; use COSY_DEVICE_CPU");
}

const cosy_backend cosy_backend_gpu = {.name = "gpu", .create = gb_unsupported};
#endif
