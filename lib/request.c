/* request.c - what happens to a request between the scheduler and the caller: chunk delivery
 * (to the callback, or into the pull buffer cosy_request_read drains), the end of a request
 * (its final status, waking the waiters), the caller's reads and waits, and release.
 *
 * Ownership of a request: the caller's handle and the scheduler each hold it; whichever of
 * cosy_request_release() and the end of processing comes last frees it. A request never touches
 * its engine after it is done, so handles may be released after cosy_engine_destroy().
 *
 * Layer (docs/architecture.md): below the scheduler, which calls request_deliver and
 * request_finish from its threads; the public API calls the reads, waits and release. Nothing
 * here calls the scheduler or the engine. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "text/normalize.h"
#include "util.h"

void request_free(cosy_request *r) {
  if (r->voice) voice_unref(r->voice);
  free(r->text);
  free(r->instruct_text);
  free(r->buf);
  free(r->tx_raw);
  free(r->prep_msg);
  if (r->seg_ids)
    for (int k = 0; k < r->n_segs; k++) free(r->seg_ids[k]);
  free(r->seg_ids);
  free(r->seg_n_ids);
  cosy_text_segments_free(r->segs, r->n_segs);
  free(r->tx_ids);
  free(r->tx_units);
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
