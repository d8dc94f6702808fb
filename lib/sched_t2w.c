/* sched_t2w.c - the scheduler's token-to-wave thread (sched_t2w_main; lib/scheduler.c describes
 * the scheduler): reaping finished jobs, choosing the ready chunks (first chunks, then playback
 * deadline) for one batched flow call, the vocoder stage (voc_batch, on this thread or on the
 * vocoder thread sched_voc_main) that delivers the samples, and work other threads run on this
 * thread (sched_run_on_t2w).
 *
 * Threads: the token-to-wave thread, and the vocoder thread when the engine runs one (voc_batch,
 * sched_voc_main); sched_run_on_t2w is called on any thread and waits for this one. They hold e->mu
 * while they choose and drop it around backend calls and delivery. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/flow.h" /* flow_prompt_only_blocks */
#include "sched_internal.h"

#define MEL 80

#define MAX_HOP 100      /* the official hop stops doubling here */

#define FLOW_BATCH_JOBS 64
#define FLOW_BATCH_FRAMES 3000 /* new mel frames per flow batch (per CFG row). A 1024 cap was
                                 measured worse at C = 64 (TTFB p95 1168 vs 1003 ms, 148x vs 160x
                                 real time: smaller batches, same queue); see bench/RESULTS.md */

#define DEFER_SLACK_S 1.0 /* chunks with more audio ahead than this wait for a wave's first chunks */
#define DEFER_POLL_MS 2

/* ---- the token-to-wave thread --------------------------------------------------------------- */

static int is_lost(const cosy_engine *e) { return __atomic_load_n(&e->lost, __ATOMIC_ACQUIRE); }

/* send native-rate samples through the job's resampler (if any) to the caller */
static cosy_status emit(cosy_engine *e, sjob *j, const float *pcm, int64_t n, int last) {
  (void)e;
  cosy_request *r = j->r;
  const float *out = pcm;
  int64_t n_out = n;
  if (j->rs) {
    double t0 = cosy_now();
    int64_t need = cosy_resampler_max_out(j->rs, n);
    if (need > j->rs_cap) {
      float *nb = (float *)cosy_realloc(j->rs_buf, (size_t)need * sizeof *nb);
      if (!nb) return cosy_err(COSY_ERR_NO_MEMORY, "out of memory resampling");
      j->rs_buf = nb;
      j->rs_cap = need;
    }
    cosy_status st = cosy_resampler_process(j->rs, pcm, n, last, j->rs_buf, j->rs_cap, &n_out);
    if (st) return st;
    out = j->rs_buf;
    add_time(r, &r->vocoder_s, cosy_now() - t0);
  }
  j->delivered += n;
  r->native_out += n;
  pthread_mutex_lock(&r->mu);
  r->n_chunks++;
  pthread_mutex_unlock(&r->mu);
  /* the chunk that ends a segment ends the request only when it is the last segment */
  if (request_deliver(r, out, n_out, last && j->seg_i + 1 >= r->n_segs))
    return cosy_err(COSY_ERR_CANCELLED, "cancelled by the chunk callback");
  return COSY_OK;
}

/* What the job's next flow call is (e->mu held): 0 none yet, 1 a streaming chunk, 2 the last. */
static int chunk_ready(const sjob *j) {
  if (j->final_done || j->busy || j->err) return 0;
  if (j->seg_i != j->r->seg_delivered) return 0; /* the audio of the segments before it first */
  if (!j->collect_only && j->n_tok - j->offset >= j->hop + LOOKAHEAD) return 1;
  if (j->llm_done) return 2;
  return 0;
}

static int voice_warm(const struct cosy_sched *s, const cosy_voice *v) {
  for (int i = 0; i < s->n_warm; i++)
    if (s->warm[i] == v) return 1;
  return 0;
}

/* the 50-frame blocks a first chunk of j's voice finds computed (its prompt-only blocks, once a
 * request of the voice has made them) */
static int voice_blocks(const struct cosy_sched *s, const sjob *j) {
  return voice_warm(s, j->v)
             ? flow_prompt_only_blocks(j->v->n_tokens, 2, LOOKAHEAD, 2 * BLOCK_TOKENS)
             : 0;
}

/* mel frames a flow call of the job computes (about: the backend may reuse earlier blocks).
 * A first chunk of a voice seen before skips the prompt-only blocks (flow_prompt_only_blocks),
 * which the GPU flow keeps per voice; counting them would cap a batch of first chunks at a third
 * of what it computes. */
static int job_frames(const struct cosy_sched *s, const sjob *j, int kind) {
  const int P = j->v->n_tokens;
  if (kind == 2 && (j->collect_only || j->full_final)) return 2 * (P + j->n_tok);
  if (j->chunks_done == 0)
    return 2 * (P + (kind == 1 ? j->hop + LOOKAHEAD : j->n_tok)) -
           2 * BLOCK_TOKENS * voice_blocks(s, j);
  return 2 * ((kind == 1 ? j->hop + LOOKAHEAD : j->n_tok - j->offset)) + 50;
}

/* ---- the flow's page gate (s->flow_gate; backends with a cache page pool) -------------------
 * A flow call keeps the 50-frame blocks it completes in pages of the backend's pool so that the
 * request's next call starts after them; a call that finds no free page keeps what it has and its
 * request's next call recomputes from there (never a failure). With more requests under way than
 * the pool holds the blocks of (a page is 90 MB with the full model; W2's 256 requests of 10 s
 * want ~11 each), every later call recomputes earlier blocks: on an H200 W2 computed 697 new
 * frames per request against the 524 of each frame once (bench/RESULTS.md). The gate starts a job's first
 * chunk only while the free pages, less what the jobs under way will still take, hold the new
 * job's blocks too, oldest submission first; the others wait (their first audio later) until
 * jobs end and give pages back. A job under way always goes, so the gate never stops the flow:
 * with none under way every first chunk may start. Text-streamed and one-shot jobs are never
 * held (the first wait for their text, the second cache nothing). Where the pool holds every
 * request under way nothing is held and the schedule is as without the gate (W1 at C = 1, 16
 * and 64 on an H200 ran as without it); where it binds, requests wait for their first audio
 * instead of every request recomputing (W2 on an H200: 389x against 347x, first audio p95 5.5
 * against 1.4 s; bench/RESULTS.md). On by default (COSY_SCHED_FLOW_GATE=0: off). */

/* the 50-frame blocks of a job's prompt and the speech tokens it is expected to reach: what the
 * LLM made when it is done, else the more of what it made so far and a guess a quarter of the way
 * from its least to its most tokens (the official bounds are 2 and 20 tokens a text token: 6.5).
 * A text-streamed job counts what it made so far: its text may not have come yet (a voice
 * agent's session stays open between replies), so a guess would hold pages it may never take. */
static int job_blocks(const sjob *j) {
  int E = j->n_tok;
  if (!j->llm_done && !j->bistream) {
    const int g = j->min_len + (j->max_len - j->min_len) / 4;
    if (g > E) E = g;
  }
  return (j->v->n_tokens + E) / BLOCK_TOKENS;
}

typedef struct gate_cand {
  double t;
  sjob *j;
  int need;
} gate_cand;

static int gate_cmp(const void *a, const void *b) {
  const double x = ((const gate_cand *)a)->t, y = ((const gate_cand *)b)->t;
  return x < y ? -1 : x > y;
}

/* a job the gate counts: its flow state caches blocks and it is not over */
static int gate_counts(const sjob *j) {
  return j->fs && !j->final_done && !j->collect_only && !cancelled(j->r);
}
/* ... and one it may hold: a first chunk ready and not started (text-streamed jobs never) */
static int gate_may_hold(const sjob *j) {
  return !j->chunks_done && !j->busy && !j->bistream && chunk_ready(j);
}

/* Sets gate_held on the first chunks the gate holds this round (e->mu held). */
static void flow_gate(cosy_engine *e, struct cosy_sched *s) {
  for (sjob *j = s->active; j; j = j->next) j->gate_held = 0;
  if (!s->flow_gate || !e->be->flow_pages) return;
  int budget = e->be->flow_pages(e, NULL);
  if (budget < 0) return;
  int under_way = 0, n = 0;
  for (sjob *j = s->active; j; j = j->next) {
    if (!gate_counts(j)) continue;
    if (j->chunks_done > 0 || j->busy) {
      const int more = job_blocks(j) - e->be->flow_pages(e, j->fs);
      if (more > 0) budget -= more;
      under_way++;
    } else if (gate_may_hold(j)) {
      n++;
    }
  }
  if (!under_way || !n) return;
  gate_cand stack[64], *c = n <= 64 ? stack : (gate_cand *)malloc(sizeof *c * (size_t)n);
  if (!c) return; /* no room to rank them: nothing held */
  int m = 0;
  for (sjob *j = s->active; j && m < n; j = j->next)
    if (gate_counts(j) && gate_may_hold(j))
      c[m++] = (gate_cand){j->r->t_submit, j, job_blocks(j) - voice_blocks(s, j)};
  qsort(c, (size_t)m, sizeof *c, gate_cmp);
  for (int i = 0; i < m; i++) {
    if (c[i].need <= budget) {
      budget -= c[i].need;
    } else {
      c[i].j->gate_held = 1;
    }
  }
  if (c != stack) free(c);
}

/* when the request's delivered audio runs out, played in real time from its first audio (the
 * token-to-wave thread, which writes both) */
static double audio_end(const cosy_request *r, int sample_rate) {
  return r->t_first + (double)r->native_out / sample_rate;
}

/* The rank of a ready chunk (smaller goes first): a chunk whose request's audio runs out within
 * two token-to-wave rounds (s->round_s: it could not come in time from the round after next)
 * ranks before every first chunk, by its playback deadline; then first chunks, by arrival; then
 * the rest by playback deadline (when the audio delivered so far runs out). e->mu held. */
static double deadline(const struct cosy_sched *s, const sjob *j, int sample_rate, double now) {
  if (request_first(j)) return -1e12 + j->r->t_submit;
  const double d = audio_end(j->r, sample_rate);
  return d - now < 2.0 * s->round_s ? -2e12 + d : d;
}

/* Some request still waits for its first chunk's tokens from the LLM (e->mu held): admitted,
 * prefilling or decoding towards its first chunk. While one does, the token-to-wave thread holds
 * back chunks that are not needed soon (more than DEFER_SLACK_S of audio ahead of playback), so that
 * the device is the LLM's: in a burst the prefill and the first decode steps of the new requests
 * otherwise share it with the old requests' later chunks (on an H100 at W1 C = 64 a burst's
 * prefill took 128 ms instead of 60 while the previous wave's last chunks ran). The held chunks
 * lose nothing: their audio lasts longer than the wave's first chunks take, and they become
 * urgent (deadline) well before it runs out. Text-streamed requests, which may wait for text
 * for as long as their client likes, do not count. */
static int llm_first_wanted(const struct cosy_sched *s) {
  for (const sjob *j = s->active; j; j = j->next)
    if (first_open(j) && !j->bistream && !j->busy && !j->llm_done && !chunk_tokens_ready(j))
      return 1;
  return 0;
}

/* The most urgent FLOW_BATCH_JOBS candidates, earliest deadline first: rank_insert keeps r[0..n)
 * sorted (ties in arrival order) and drops a candidate later than all of a full list. */
typedef struct ranked {
  double deadline;
  void *p;  /* the candidate (a job, a vocoder item) */
  int kind; /* the caller's tag (chunk_ready's kind) */
} ranked;

static void rank_insert(ranked *r, int *n, ranked x) {
  if (*n == FLOW_BATCH_JOBS && x.deadline >= r[*n - 1].deadline) return;
  int at = *n < FLOW_BATCH_JOBS ? (*n)++ : *n - 1;
  for (; at > 0 && r[at - 1].deadline > x.deadline; at--) r[at] = r[at - 1];
  r[at] = x;
}

/* speed != 1: linear interpolation of the mel to T/speed frames (align_corners = False) */
static float *speed_mel(const float *mel, int T, float speed, int *Tn_out) {
  int Tn = (int)((double)T / speed);
  *Tn_out = Tn < 0 ? 0 : Tn;
  float *m = (float *)cosy_malloc((size_t)(Tn > 0 ? Tn : 1) * MEL * sizeof *m);
  if (!m) return NULL;
  double scale = Tn > 0 ? (double)T / Tn : 1.0;
  for (int i = 0; i < Tn; i++) {
    double x = (i + 0.5) * scale - 0.5;
    if (x < 0) x = 0;
    int i0 = (int)x;
    if (i0 > T - 1) i0 = T - 1;
    int i1 = i0 + 1 < T ? i0 + 1 : T - 1;
    double w = x - i0;
    for (int c = 0; c < MEL; c++)
      m[(size_t)i * MEL + c] = (float)((1 - w) * mel[(size_t)i0 * MEL + c] + w * mel[(size_t)i1 * MEL + c]);
  }
  return m;
}

/* finish and unlink every job that is over (e->mu held; dropped around the releases) */
static void reap(cosy_engine *e) {
  struct cosy_sched *s = e->sched;
  for (;;) {
    sjob **pp = &s->active, *j = NULL;
    for (; *pp; pp = &(*pp)->next) {
      sjob *c = *pp;
      if (!c->llm_released || c->busy) continue;
      if (c->err || c->final_done || cancelled(c->r) || e->stopping) {
        j = c;
        break;
      }
    }
    if (!j) return;
    *pp = j->next;
    e->n_active--;
    cosy_status st = j->err;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", j->msg);
    if (!st && !j->final_done) {
      st = COSY_ERR_CANCELLED;
      snprintf(msg, sizeof msg, "request cancelled");
    }
    /* a long text's segments: the request ends with its last segment job; the first failure
     * is its status and stops the other segments */
    cosy_request *r = j->r;
    if (st && !r->seg_err) {
      r->seg_err = st;
      snprintf(r->seg_msg, sizeof r->seg_msg, "%s", msg);
      if (r->seg_alive > 1) __atomic_store_n(&r->cancel, 1, __ATOMIC_SEQ_CST);
    }
    const int finish = --r->seg_alive <= 0;
    if (r->seg_err) {
      st = r->seg_err;
      snprintf(msg, sizeof msg, "%s", r->seg_msg);
    }
    pthread_cond_broadcast(&s->cv_llm); /* memory and a slot came back */
    pthread_mutex_unlock(&e->mu);
    if (j->fs) e->be->flow_close(e, j->fs);
    if (j->vs) e->be->voc_close(e, j->vs);
    j->fs = j->vs = NULL;
    r->job = NULL; /* (only meaningful while queued) */
    sched_job_free(j);
    if (finish) request_finish(r, st, msg);
    pthread_mutex_lock(&e->mu);
    pthread_cond_broadcast(&s->cv_llm);
  }
}

/* ---- work run on the token-to-wave thread (sched_run_on_t2w) --------------------------------- */

typedef struct t2w_call {
  cosy_status (*fn)(cosy_engine *, void *);
  void *arg;
  cosy_status st;
  int done;
  char msg[512];
  struct t2w_call *next;
} t2w_call;

/* run the queued calls, oldest first (e->mu held; dropped around each call) */
static void run_calls(cosy_engine *e) {
  struct cosy_sched *s = e->sched;
  while (s->calls) {
    t2w_call *c = s->calls;
    s->calls = c->next;
    pthread_mutex_unlock(&e->mu);
    cosy_status st = is_lost(e) ? engine_check_lost(e) : c->fn(e, c->arg);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st ? cosy_last_error() : "");
    sched_note_status(e, st, msg);
    pthread_mutex_lock(&e->mu);
    c->st = st;
    memcpy(c->msg, msg, sizeof msg);
    c->done = 1;
    pthread_cond_broadcast(&s->cv_call);
  }
}

cosy_status sched_run_on_t2w(cosy_engine *e, cosy_status (*fn)(cosy_engine *, void *), void *arg) {
  struct cosy_sched *s = e->sched;
  if (!s || !s->t2w_started || pthread_equal(pthread_self(), s->t2w_th)) return fn(e, arg);
  t2w_call c;
  memset(&c, 0, sizeof c);
  c.fn = fn;
  c.arg = arg;
  pthread_mutex_lock(&e->mu);
  if (e->stopping) {
    pthread_mutex_unlock(&e->mu);
    return cosy_err(COSY_ERR_INVALID_ARG, "the engine is being destroyed");
  }
  if (e->lost) {
    pthread_mutex_unlock(&e->mu);
    return engine_check_lost(e);
  }
  t2w_call **pp = &s->calls;
  while (*pp) pp = &(*pp)->next;
  *pp = &c;
  pthread_cond_broadcast(&s->cv_t2w);
  while (!c.done) pthread_cond_wait(&s->cv_call, &e->mu);
  pthread_mutex_unlock(&e->mu);
  if (c.st) return cosy_err(c.st, "%s", c.msg);
  return COSY_OK;
}

/* ---- the vocoder stage ------------------------------------------------------------------------ */

/* One job's flow result waiting for the vocoder (the vocoder queue s->vq, e->mu). The job stays
 * busy from its flow call until its vocoder call is over and its state advanced. */
typedef struct vitem {
  sjob *j;
  int kind;           /* 1 a streaming chunk, 2 the last */
  float *mel;         /* [n_frames][MEL] (malloc'd; the speed-resampled copy when speed != 1) */
  int n_frames;
  double flow_s;      /* the flow call's wall time (request timing) */
  struct vitem *next;
} vitem;

/* The vocoder call over n items (no lock held): samples to the callers, each job's chunk state
 * advanced, the jobs no longer busy, the items freed. Runs on the vocoder thread when the
 * engine has one, else on the token-to-wave thread right after the flow call. */
static void voc_batch(cosy_engine *e, vitem **it, int n) {
  struct cosy_sched *s = e->sched;
  cosy_voc_job vj[FLOW_BATCH_JOBS];
  int urgent = 0;
  for (int i = 0; i < n; i++) {
    sjob *j = it[i]->j;
    memset(&vj[i], 0, sizeof vj[i]);
    vj[i].vs = j->vs;
    vj[i].finalize = it[i]->kind == 2;
    vj[i].mel = it[i]->mel;
    vj[i].n_new = it[i]->n_frames;
    if (j->chunks_done == 0) urgent = 1;
  }
  cosy_status vst = COSY_OK;
  double t0 = cosy_now();
  if (n && is_lost(e)) vst = engine_check_lost(e); /* nothing more on a lost device */
  else if (n) vst = e->be->vocode(e, vj, n, urgent, NULL);
  double dt = cosy_now() - t0;
  {
    int fr = 0, firsts = 0;
    for (int i = 0; i < n; i++) {
      fr += vj[i].n_new;
      firsts += it[i]->j->chunks_done == 0;
    }
    trace(s, "vocoder", n, fr, firsts, dt);
  }
  char bmsg[512];
  snprintf(bmsg, sizeof bmsg, "%s", vst ? cosy_last_error() : "");
  sched_note_status(e, vst, bmsg);
  for (int i = 0; i < n && !vst; i++)
    if (vj[i].status == COSY_ERR_DEVICE_LOST) sched_note_status(e, vj[i].status, "vocoder call failed");
  for (int i = 0; i < n; i++) {
    sjob *j = it[i]->j;
    const int kind = it[i]->kind;
    add_time(j->r, &j->r->flow_s, it[i]->flow_s);
    add_time(j->r, &j->r->vocoder_s, dt);
    cosy_status js = vst ? vst : vj[i].status;
    const int last = kind == 2;
    /* a cancelled job delivers nothing more and must not end as done: its last chunk (were
     * final_done set without it) would be lost from a request that reports COSY_OK */
    if (!js && cancelled(j->r)) js = cosy_err(COSY_ERR_CANCELLED, "request cancelled");
    /* the device was lost meanwhile (by the other thread): no more audio (sched_note_status failed
     * the job already; its message wins) */
    if (!js && is_lost(e)) js = engine_check_lost(e);
    if (!js && (vj[i].n > 0 || last)) js = emit(e, j, vj[i].wav, vj[i].n, last);
    free(vj[i].wav);
    free(it[i]->mel);
    free(it[i]);
    pthread_mutex_lock(&e->mu);
    if (js) job_fail_locked(j, js, vst ? bmsg : cosy_last_error());
    if (kind == 1) {
      /* after a first chunk shorter than a block the schedule starts at next_hop_base */
      const int short_first = j->chunks_done == 0 && j->hop < BLOCK_TOKENS;
      j->offset += j->hop;
      if (!short_first)
        j->next_hop_base = j->next_hop_base * 2 < MAX_HOP ? j->next_hop_base * 2 : MAX_HOP;
      j->hop = j->next_hop_base;
    } else {
      j->offset = j->n_tok;
      j->final_done = 1;
      if (!js) j->r->seg_delivered++; /* the next segment's audio may follow */
    }
    j->chunks_done++;
    j->busy = 0;
    j->audio_until = audio_end(j->r, e->model->hp.sample_rate);
    pthread_mutex_unlock(&e->mu);
  }
  __atomic_add_fetch(&s->voc_calls, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&s->voc_jobs, n, __ATOMIC_RELAXED);
  pthread_mutex_lock(&e->mu);
  pthread_cond_broadcast(&s->cv_t2w); /* chunks may be ready again, jobs may be over */
  pthread_cond_broadcast(&s->cv_llm); /* a pause or yield of the LLM may end */
  pthread_mutex_unlock(&e->mu);
}

/* The vocoder thread (engines whose backend runs the vocoder beside the flow): takes the queued
 * flow results, most urgent first (first chunks, then playback deadline), at most
 * FLOW_BATCH_JOBS per call, so the flow's next batch runs while this one is vocoded. */
void *sched_voc_main(void *arg) {
  cosy_engine *e = (cosy_engine *)arg;
  struct cosy_sched *s = e->sched;
  thread_enter(e);
  const int sr = e->model->hp.sample_rate;
  ranked rk[FLOW_BATCH_JOBS];
  vitem *pick[FLOW_BATCH_JOBS];
  pthread_mutex_lock(&e->mu);
  for (;;) {
    if (!s->vq) {
      if (s->t2w_exited) break;
      pthread_cond_wait(&s->cv_voc, &e->mu);
      continue;
    }
    int n = 0;
    const double now = cosy_now();
    for (vitem *v = s->vq; v; v = v->next)
      rank_insert(rk, &n, (ranked){deadline(s, v->j, sr, now), v, 0});
    for (int i = 0; i < n; i++) pick[i] = (vitem *)rk[i].p;
    for (int i = 0; i < n; i++) { /* unlink the picked items */
      vitem **pp = &s->vq;
      while (*pp != pick[i]) pp = &(*pp)->next;
      *pp = pick[i]->next;
      pick[i]->next = NULL;
    }
    s->voc_busy = 1;
    pthread_mutex_unlock(&e->mu);
    voc_batch(e, pick, n);
    pthread_mutex_lock(&e->mu);
    s->voc_busy = 0;
    pthread_cond_broadcast(&s->cv_t2w); /* the token-to-wave thread may vocode now (voc_mode 2) */
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

void *sched_t2w_main(void *arg) {
  cosy_engine *e = (cosy_engine *)arg;
  struct cosy_sched *s = e->sched;
  thread_enter(e);
  const int sr = e->model->hp.sample_rate;
  ranked rk[FLOW_BATCH_JOBS];
  sjob *pick[FLOW_BATCH_JOBS];
  int kind[FLOW_BATCH_JOBS];
  cosy_flow_job fj[FLOW_BATCH_JOBS];
  float *mels[FLOW_BATCH_JOBS];
  vitem *items[FLOW_BATCH_JOBS];
  pthread_mutex_lock(&e->mu);
  for (;;) {
    reap(e);
    run_calls(e);
    if (e->stopping && s->llm_exited && !s->active) break;
    /* the ready chunks, most urgent first (selection by deadline, at most FLOW_BATCH_JOBS) */
    int n = 0, n_ready = 0;
    const double now = cosy_now();
    flow_gate(e, s);
    for (sjob *j = s->active; j; j = j->next) {
      if (cancelled(j->r) || j->gate_held) continue;
      int k = chunk_ready(j);
      if (k) rank_insert(rk, &n, (ranked){deadline(s, j, sr, now), j, k});
      n_ready += k != 0;
    }
    for (int i = 0; i < n; i++) {
      pick[i] = (sjob *)rk[i].p;
      kind[i] = rk[i].kind;
    }
    if (n == 0) {
      if (s->active)
        timed_wait(&s->cv_t2w, &e->mu, IDLE_POLL_MS);
      else
        pthread_cond_wait(&s->cv_t2w, &e->mu);
      continue;
    }
    /* in a wave, the most urgent ready chunk has more than DEFER_SLACK_S of audio ahead (first
     * chunks and urgent ones rank far below any real time) while a new request awaits its first
     * tokens: wait */
    const int wave = sched_wave(e, s); /* lib/sched_internal.h: the wave rules */
    if (wave && rk[0].deadline > now + DEFER_SLACK_S && !e->stopping && llm_first_wanted(s)) {
      timed_wait(&s->cv_t2w, &e->mu, DEFER_POLL_MS);
      continue;
    }
    /* a batch of at most FLOW_BATCH_FRAMES new frames (the first job always goes),
     * so a first chunk that arrives while a batch runs waits for a short one; in a wave a batch
     * that starts with first chunks holds nothing else: later chunks that are not urgent (those
     * rank before the first chunks) would only make the first audio wait for their frames (on an
     * H100 at W1 C = 64 a wave's first chunks went with 15 later ones in a 64 ms call instead of
     * ~30; over ten runs each, p95 251-303 ms with no underrun against 251-336 with one run
     * late, bench/RESULTS.md) */
    int frames = 0;
    int capped = n_ready > n; /* the batch's caps leave ready chunks out (voc_mode 2) */
    const int frames_max =
        s->flow_frames && s->flow_frames < FLOW_BATCH_FRAMES ? s->flow_frames : FLOW_BATCH_FRAMES;
    {
      int keep = 0;
      for (; keep < n; keep++) {
        const int f = job_frames(s, pick[keep], kind[keep]);
        if (keep > 0 && frames + f > frames_max) {
          capped = 1;
          break;
        }
        if (keep > 0 && wave && request_first(pick[0]) && !request_first(pick[keep]))
          break;
        frames += f;
      }
      n = keep;
    }
    int urgent = 0;
    for (int i = 0; i < n; i++) {
      sjob *j = pick[i];
      j->busy = 1;
      if (j->chunks_done == 0) urgent = 1;
      memset(&fj[i], 0, sizeof fj[i]);
      fj[i].fs = j->fs;
      fj[i].tokens = j->tokens;
      if (kind[i] == 1) {
        fj[i].n_gen = j->offset + j->hop + LOOKAHEAD;
        fj[i].frame_from = 2 * j->offset;
        fj[i].n_frames = 2 * j->hop;
      } else {
        fj[i].n_gen = j->n_tok;
        fj[i].finalize = 1;
        fj[i].full_attention = j->collect_only || j->full_final;
        fj[i].frame_from = j->collect_only ? 0 : 2 * j->offset;
        fj[i].n_frames = 2 * j->n_tok - fj[i].frame_from;
      }
    }
    s->first_in_flight = 0;
    for (int i = 0; i < n; i++) s->first_in_flight |= pick[i]->chunks_done == 0;
    pthread_mutex_unlock(&e->mu);

    /* flow */
    cosy_status st = is_lost(e) ? engine_check_lost(e) : COSY_OK;
    for (int i = 0; i < n; i++) {
      mels[i] = (float *)cosy_malloc((size_t)(fj[i].n_frames > 0 ? fj[i].n_frames : 1) * MEL * sizeof(float));
      fj[i].mel = mels[i];
      if (!mels[i]) st = COSY_ERR_NO_MEMORY;
    }
    double t0 = cosy_now();
    if (!st) st = e->be->flow_run(e, fj, n, urgent, NULL);
    double dt = cosy_now() - t0;
    char bmsg[512];
    snprintf(bmsg, sizeof bmsg, "%s", st ? cosy_last_error() : "");
    sched_note_status(e, st, bmsg);
    for (int i = 0; i < n && !st; i++)
      if (fj[i].status == COSY_ERR_DEVICE_LOST) sched_note_status(e, fj[i].status, "flow call failed");
    pthread_mutex_lock(&e->mu);
    s->first_in_flight = 0;
    {
      int firsts = 0;
      for (int i = 0; i < n; i++) {
        sjob *j = pick[i];
        firsts += j->chunks_done == 0;
        if (!st && !fj[i].status && j->chunks_done == 0 && !fj[i].full_attention &&
            !voice_warm(s, j->v)) {
          if (s->n_warm == (int)(sizeof s->warm / sizeof s->warm[0])) {
            memmove(s->warm, s->warm + 1, (size_t)(s->n_warm - 1) * sizeof s->warm[0]);
            s->n_warm--;
          }
          s->warm[s->n_warm++] = j->v;
        }
      }
      trace(s, "flow", n, frames, firsts, dt);
    }
    __atomic_add_fetch(&s->flow_calls, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->flow_jobs, n, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&s->cv_llm);
    pthread_mutex_unlock(&e->mu);

    /* the vocoder's share: the new frames of each job that got them */
    int nv = 0;
    for (int i = 0; i < n; i++) {
      sjob *j = pick[i];
      cosy_status js = st ? st : fj[i].status;
      vitem *v = NULL;
      if (!js) {
        v = (vitem *)cosy_calloc(1, sizeof *v);
        if (!v) js = COSY_ERR_NO_MEMORY;
      }
      if (!js && j->collect_only && j->r->params.speed != 1.0f) {
        int Tn = 0;
        float *m = speed_mel(mels[i], fj[i].n_frames, j->r->params.speed, &Tn);
        if (!m) {
          js = cosy_err(COSY_ERR_NO_MEMORY, "out of memory resampling the mel");
        } else {
          free(mels[i]);
          mels[i] = m;
          fj[i].n_frames = Tn;
        }
      }
      if (js) {
        free(v);
        free(mels[i]);
        add_time(j->r, &j->r->flow_s, dt);
        pthread_mutex_lock(&e->mu);
        job_fail_locked(j, js, st ? bmsg : cosy_last_error());
        j->busy = 0;
        pthread_mutex_unlock(&e->mu);
        continue;
      }
      v->j = j;
      v->kind = kind[i];
      v->mel = mels[i];
      v->n_frames = fj[i].n_frames;
      v->flow_s = dt;
      items[nv++] = v;
    }
    /* the vocoder call: on the vocoder thread (voc_mode 1; voc_mode 2 only for a batch of later
     * chunks cut short by the caps, i.e. while the flow has more ready work than one batch: then
     * the next batch's flow runs beside this one's vocoder, as under W2, where the two calls in
     * turn left the flow's stream idle for each vocoder call, ~28 ms of every ~90; bench/
     * RESULTS.md), else here, once the vocoder thread (if any) is idle, so that the vocoder's
     * calls never overlap one another and a batch that is not cut short keeps its jobs
     * together for the next flow batch (W1 at C = 16 lost 5% with every call on the thread) */
    const int handoff = s->voc_started && (s->voc_mode != 2 || (capped && !urgent));
    if (s->voc_started && !handoff) {
      pthread_mutex_lock(&e->mu);
      while (s->vq || s->voc_busy) timed_wait(&s->cv_t2w, &e->mu, DEFER_POLL_MS);
      pthread_mutex_unlock(&e->mu);
    }
    if (handoff) {
      pthread_mutex_lock(&e->mu);
      vitem **tail = &s->vq;
      while (*tail) tail = &(*tail)->next;
      for (int i = 0; i < nv; i++) {
        *tail = items[i];
        tail = &items[i]->next;
      }
      pthread_cond_broadcast(&s->cv_voc);
    } else {
      voc_batch(e, items, nv);
      pthread_mutex_lock(&e->mu);
    }
    /* (a round that handed its vocoder call to the vocoder thread counts the flow call only,
     * though its chunks arrive that vocoder call later: the urgency and the LLM's pause guard
     * that read round_s are then a little less cautious while the flow is the bottleneck;
     * measured without an underrun at W1 C = 64 and W3's 400 users, bench/RESULTS.md) */
    s->round_s = 0.7 * s->round_s + 0.3 * (cosy_now() - t0);
  }
  s->t2w_exited = 1;
  pthread_cond_broadcast(&s->cv_voc);
  pthread_mutex_unlock(&e->mu);
  return NULL;
}
