/* engine.c - engine lifecycle, request submission, chunk delivery, pull reads (the scheduler that
 * moves requests is lib/scheduler.c).
 *
 * Ownership of a request: the caller's handle and the scheduler each hold it; whichever of
 * cosy_request_release() and the end of processing comes last frees it. A request never touches
 * its engine after it is done, so handles may be released after cosy_engine_destroy(). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#include "engine.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#include "text/normalize.h"
#include "tokenizer.h"
#include "util.h"

void engine_log(const cosy_engine *e, int level, const char *fmt, ...) COSY_PRINTF(3, 4);

void engine_log(const cosy_engine *e, int level, const char *fmt, ...) {
  int max = e->cfg.log_level == 0 ? COSY_LOG_WARN : e->cfg.log_level;
  if (!e->cfg.log_fn || level > max) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  e->cfg.log_fn(e->cfg.log_user, level, msg);
}

void request_free(cosy_request *r) {
  if (r->voice) voice_unref(r->voice);
  free(r->text);
  free(r->instruct_text);
  free(r->buf);
  free(r->tx_raw);
  free(r->prep_msg);
  cosy_text_segments_free(r->segs, r->n_segs);
  free(r->tx_ids);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r);
}

void request_finish(cosy_request *r, cosy_status st, const char *msg) {
  cosy_engine *e = r->engine;
  pthread_mutex_lock(&e->mu);
  e->requests_done++;
  pthread_mutex_unlock(&e->mu);
  pthread_mutex_lock(&r->mu);
  if (r->buf_oom && st == COSY_ERR_CANCELLED) { /* request_deliver could not buffer a chunk */
    st = COSY_ERR_NO_MEMORY;
    msg = "out of host memory buffering the audio for cosy_request_read";
  }
  r->final_status = st;
  snprintf(r->error, sizeof r->error, "%s", st ? (msg ? msg : cosy_status_str(st)) : "");
  r->state = REQ_DONE;
  r->t_end = cosy_now();
  pthread_cond_broadcast(&r->cv);
  int free_now = r->released;
  pthread_mutex_unlock(&r->mu);
  if (free_now) request_free(r);
}

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

cosy_status engine_check_lost(const cosy_engine *e) {
  if (!__atomic_load_n(&e->lost, __ATOMIC_ACQUIRE)) return COSY_OK;
  return cosy_err(COSY_ERR_DEVICE_LOST,
                  "the engine's GPU failed with a sticky error and the engine must be destroyed "
                  "(%s)", e->lost_msg);
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

int request_deliver(cosy_request *r, const float *pcm, int64_t n, int last) {
  cosy_engine *e = r->engine;
  pthread_mutex_lock(&e->mu);
  e->samples_out += n;
  pthread_mutex_unlock(&e->mu);
  /* t_first and offset are read by cosy_request_get_stats on the caller's thread: written under
   * r->mu (make test-tsan, test_synth's test_stats_while_running, caught them unlocked) */
  pthread_mutex_lock(&r->mu);
  if (r->fn && r->cb_closed) { /* nobody listens any more: no callback after release returned */
    pthread_mutex_unlock(&r->mu);
    return 1;
  }
  if (r->t_first == 0 && (n > 0 || last)) r->t_first = cosy_now();
  int64_t offset = r->offset;
  if (r->fn) {
    r->offset += n;
    r->in_callback = 1; /* request_release waits for the end of this call */
    r->cb_thread = pthread_self();
  }
  pthread_mutex_unlock(&r->mu);
  if (r->fn) {
    cosy_chunk c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.flags = last ? COSY_CHUNK_LAST : 0;
    c.pcm = pcm;
    c.n_samples = n;
    c.offset = offset;
    c.sample_rate = r->params.sample_rate;
    int32_t stop = r->fn(r->user, &c);
    pthread_mutex_lock(&r->mu);
    r->in_callback = 0;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (stop) __atomic_store_n(&r->cancel, 1, __ATOMIC_SEQ_CST);
    return stop != 0;
  }
  pthread_mutex_lock(&r->mu);
  if (r->buf_read > 0 && r->buf_read * 2 >= r->buf_len) { /* compact */
    memmove(r->buf, r->buf + r->buf_read, (size_t)(r->buf_len - r->buf_read) * sizeof *r->buf);
    r->buf_len -= r->buf_read;
    r->buf_read = 0;
  }
  if (r->buf_len + n > r->buf_cap) {
    int64_t nc = r->buf_cap ? r->buf_cap : 48000;
    while (nc < r->buf_len + n) nc *= 2;
    float *nb = (float *)cosy_realloc(r->buf, (size_t)nc * sizeof *nb);
    if (!nb) {
      r->buf_oom = 1; /* the request ends with COSY_ERR_NO_MEMORY (request_finish) */
      pthread_mutex_unlock(&r->mu);
      __atomic_store_n(&r->cancel, 1, __ATOMIC_SEQ_CST);
      return 1;
    }
    r->buf = nb;
    r->buf_cap = nc;
  }
  if (n > 0) memcpy(r->buf + r->buf_len, pcm, (size_t)n * sizeof *pcm);
  r->buf_len += n;
  r->offset += n;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  return 0;
}

/* wait on r->cv (r->mu held) until pred or the deadline; returns 0 on timeout */
static int deadline_from(int32_t timeout_ms, struct timespec *ts) {
  if (timeout_ms < 0) return 0;
  clock_gettime(CLOCK_REALTIME, ts);
  ts->tv_sec += timeout_ms / 1000;
  ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
  return 1;
}

static cosy_status finished_status(cosy_request *r) {
  if (r->final_status) return cosy_err(r->final_status, "%s", r->error);
  return COSY_OK;
}

cosy_status request_read(cosy_request *r, float *buf, int64_t cap, int64_t *n_read,
                         int32_t timeout_ms) {
  struct timespec ts;
  int timed = deadline_from(timeout_ms, &ts);
  pthread_mutex_lock(&r->mu);
  for (;;) {
    int64_t avail = r->buf_len - r->buf_read;
    if (avail > 0) {
      int64_t n = avail < cap ? avail : cap;
      memcpy(buf, r->buf + r->buf_read, (size_t)n * sizeof *buf);
      r->buf_read += n;
      *n_read = n;
      pthread_mutex_unlock(&r->mu);
      return COSY_OK;
    }
    if (r->state == REQ_DONE) {
      cosy_status st = finished_status(r);
      pthread_mutex_unlock(&r->mu);
      return st;
    }
    if (timeout_ms == 0) break;
    int rc = timed ? pthread_cond_timedwait(&r->cv, &r->mu, &ts) : pthread_cond_wait(&r->cv, &r->mu);
    if (rc == ETIMEDOUT) break;
  }
  pthread_mutex_unlock(&r->mu);
  return cosy_err(COSY_ERR_TIMEOUT, "no audio within %d ms", timeout_ms);
}

cosy_status request_wait(cosy_request *r, int32_t timeout_ms) {
  struct timespec ts;
  int timed = deadline_from(timeout_ms, &ts);
  pthread_mutex_lock(&r->mu);
  while (r->state != REQ_DONE) {
    if (timeout_ms == 0) break;
    int rc = timed ? pthread_cond_timedwait(&r->cv, &r->mu, &ts) : pthread_cond_wait(&r->cv, &r->mu);
    if (rc == ETIMEDOUT) break;
  }
  if (r->state != REQ_DONE) {
    pthread_mutex_unlock(&r->mu);
    return cosy_err(COSY_ERR_TIMEOUT, "request still running after %d ms", timeout_ms);
  }
  cosy_status st = finished_status(r);
  pthread_mutex_unlock(&r->mu);
  return st;
}

void request_release(cosy_request *r) {
  __atomic_store_n(&r->cancel, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_lock(&r->mu);
  /* no callback starts from now on (request_deliver), and one running now (on the engine's
   * thread) ends before this returns, so the caller may free the callback's data at once; from
   * inside the callback itself (not allowed, but no deadlock) it does not wait. `released` is
   * set only after the wait, under the lock, with the test of the end: request_finish, which may
   * run during the wait, must not see it before (both would free the request). */
  r->cb_closed = 1;
  while (r->in_callback && !pthread_equal(r->cb_thread, pthread_self()))
    pthread_cond_wait(&r->cv, &r->mu);
  r->released = 1;
  int free_now = r->state == REQ_DONE;
  pthread_mutex_unlock(&r->mu);
  if (free_now) request_free(r);
}
