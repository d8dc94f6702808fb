/* engine.c - engine lifecycle (create: model, tokenizer, text normalizer, backend, scheduler;
 * destroy in reverse), stats and info, request submission (the scheduler that moves requests is
 * lib/scheduler.c with lib/sched_*.c; chunk delivery, pull reads and a request's end are
 * lib/request.c).
 * Layer (docs/architecture.md): under the public API (api.c), over text streaming, the voice
 * front end, the scheduler and request.c; nothing below calls it. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "engine.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#include "text/normalize.h"
#include "tokenizer.h"
#include "util.h"

cosy_status engine_create(const cosy_engine_config *cfg, cosy_engine **out) {
  cosy_engine *e = (cosy_engine *)cosy_calloc(1, sizeof *e);
  if (!e) return COSY_ERR_NO_MEMORY;
  e->cfg = *cfg;
  cosy_knobs_read(&e->knobs);
  cosy_status st = COSY_OK;
  if (!(e->model_path_buf = cosy_strdup(cfg->model_path))) { free(e); return COSY_ERR_NO_MEMORY; }
  e->cfg.model_path = e->model_path_buf;
  pthread_mutex_init(&e->mu, NULL);
  double t0 = cosy_now();
  if ((st = cosy_model_load(e->model_path_buf, &e->model))) goto fail;
  if ((st = cosy_tokenizer_create(e->model, &e->tok))) goto fail;
  if ((st = cosy_text_norm_create(e->model->f, e->tok, &e->tn))) goto fail;
  if (!cosy_text_norm_is_full(e->tn))
    engine_log(e, COSY_LOG_WARN, "the model file has no text normalization grammars "
               "(cosyvoice.text.*): only whitespace is normalized; re-convert with wetext installed");
  e->speech_vocab = e->model->hp.speech_vocab;
#ifdef COSY_WITH_CUDA
  e->be = cfg->device >= 0 ? &cosy_backend_gpu : &cosy_backend_cpu;
#else
  e->be = &cosy_backend_cpu;
#endif
  if ((st = e->be->create(e))) {
    e->be = NULL;
    goto fail;
  }
  engine_log(e, COSY_LOG_INFO, "model %s loaded in %.2f s (%s backend)", e->model_path_buf,
             cosy_now() - t0, e->be->name);
  if ((st = sched_start(e))) goto fail;
  *out = e;
  return COSY_OK;
fail:;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", cosy_last_error());
  engine_destroy(e);
  return cosy_err(st, "%s", msg);
}

void engine_destroy(cosy_engine *e) {
  sched_stop(e);
  if (e->be) e->be->destroy(e);
  voice_frontend_free(e->frontend);
  cosy_text_norm_free(e->tn);
  cosy_tokenizer_free(e->tok);
  cosy_model_free(e->model);
  pthread_mutex_destroy(&e->mu);
  free(e->model_path_buf);
  free(e);
}

cosy_status engine_stats(const cosy_engine *e, cosy_engine_stats *s) {
  cosy_engine *m = (cosy_engine *)e;
  pthread_mutex_lock(&m->mu);
  s->weights_bytes = s->kv_bytes = s->workspace_bytes = s->device_bytes_total = 0;
  s->kv_pages_total = s->kv_pages_used = 0;
  e->be->stats(e, s);
  sched_stats(e, s);
  s->active = e->n_active;
  s->queued = e->n_queued;
  s->requests_done = e->requests_done;
  s->audio_samples_out = e->samples_out;
  pthread_mutex_unlock(&m->mu);
  return COSY_OK;
}

/* The settings the engine runs with (the config after the defaults cosy_engine_create applied)
 * and the backend's part (device description, memory plan). */
void engine_info(const cosy_engine *e, cosy_engine_info *s) {
  s->device = e->cfg.device;
  s->max_active = e->cfg.max_active;
  s->max_queued = e->cfg.max_queued;
#ifdef _OPENMP
  s->cpu_threads = e->cfg.cpu_threads > 0 ? e->cfg.cpu_threads : omp_get_max_threads();
#else
  s->cpu_threads = 1;
#endif
  s->sample_rate = e->model->hp.sample_rate;
  s->first_chunk_wait_max = e->cfg.first_chunk_wait_max;
  snprintf(s->backend, sizeof s->backend, "%s", e->cfg.device >= 0 ? "cuda" : "cpu");
  snprintf(s->device_name, sizeof s->device_name, "%s", e->cfg.device >= 0 ? "" : "CPU");
  if (e->be->info) e->be->info(e, s);
}

cosy_status engine_submit(cosy_engine *e, const cosy_voice *v, const char *text,
                          const cosy_synth_params *p, cosy_chunk_fn fn, void *user,
                          cosy_request **out) {
  cosy_request *r = (cosy_request *)cosy_calloc(1, sizeof *r);
  if (!r) return COSY_ERR_NO_MEMORY;
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->engine = e;
  r->params = *p;
  r->fn = fn;
  r->user = user;
  r->text = cosy_strdup(text ? text : "");
  r->text_stream = (p->flags & COSY_SYNTH_TEXT_STREAM) != 0;
  if (p->instruct_text) r->instruct_text = cosy_strdup(p->instruct_text);
  if (!r->text || (p->instruct_text && !r->instruct_text)) {
    request_free(r);
    return COSY_ERR_NO_MEMORY;
  }
  r->params.instruct_text = r->instruct_text;
  r->voice = (cosy_voice *)v;
  voice_ref(r->voice);
  r->t_submit = cosy_now();
  cosy_status st = COSY_OK;
  if (r->text_stream) { /* the first piece of a streamed text, if any, is its first push */
    r->tx_max = (p->max_tokens > 0 ? p->max_tokens : COSY_TEXT_STREAM_MAX_TOKENS) / 2;
    if (r->tx_max > COSY_LLM_MAX_TEXT_TOKENS) r->tx_max = COSY_LLM_MAX_TEXT_TOKENS;
    if (r->text[0] && (st = textstream_push(r, r->text))) {
      request_free(r);
      return st;
    }
  }
  st = sched_submit(e, r);
  if (st) {
    request_free(r);
    return st;
  }
  *out = r;
  return COSY_OK;
}
