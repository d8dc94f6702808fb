/* sched_internal.h - the scheduler's private definitions, shared by its files: a job (sjob), the
 * scheduler's state (struct cosy_sched), the constants and small helpers more than one file uses
 * (static inline), and the functions one file defines for the others (sched_ names; internal like
 * every symbol of lib/: hidden, not exported from libcosyvoice.so). lib/scheduler.c describes the
 * scheduler as a whole and lists its files.
 *
 * Threads: a job's fields say which thread owns them or that e->mu guards them; each helper says
 * which lock it expects (e->mu held, or none). Included after _POSIX_C_SOURCE is defined. */
#ifndef COSY_SCHED_INTERNAL_H
#define COSY_SCHED_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "audio.h"
#include "engine.h"
#include "sampling.h"
#include "util.h"

#define LOOKAHEAD 3      /* tokens of right context a non-final flow call needs */
#define BLOCK_TOKENS 25  /* the flow's attention block (50 frames) in tokens */

/* The first chunk's tokens (docs/scheduler.md section 2): the fewest, at least n, that end the
 * prompt + first chunk on a block boundary. pad = the tokens that complete the prompt's last
 * block; n <= pad: the first chunk is those pad tokens (shorter than a block), else pad plus
 * whole blocks (n = 25, 50, 75, 100: n + pad, the official schedule). */
static inline int sched_first_hop(int P, int n) {
  const int pad = (BLOCK_TOKENS - P % BLOCK_TOKENS) % BLOCK_TOKENS;
  return n <= pad ? pad : pad + (n - pad + BLOCK_TOKENS - 1) / BLOCK_TOKENS * BLOCK_TOKENS;
}

#define IDLE_POLL_MS 20  /* threads with active work re-check cancel flags at least this often */

typedef struct sjob {
  cosy_request *r;
  const cosy_voice *v;
  struct sjob *next;          /* active list (e->mu) */
  /* set at admission */
  float *lm_input;
  int L, min_len, max_len;
  cosy_sampling samp;
  cosy_rng rng;
  int collect_only;           /* speed != 1 or COSY_SYNTH_ONE_SHOT: one flow call at the end */
  int max_pos;                /* LLM positions reserved */
  /* text streaming (COSY_SYNTH_TEXT_STREAM; LLM thread only): the official bidirectional schedule */
  int bistream, bs_phase;     /* BS_* */
  int trace_id;               /* COSY_TEXT_TRACE */
  int32_t *pend;              /* input items not fed yet (>= 0 text id, < 0 speech row -1 - id) */
  int n_pend, cap_pend;
  int32_t *tcache;            /* the text cache: ids not fed yet */
  int n_tc, cap_tc;
  int ps_at;                  /* prompt speech tokens interleaved so far */
  int next_fill;              /* out-token index of the next forced fill token */
  int32_t stale;              /* the last fed input when a fill ended a decode (re-fed at the end,
                                 as upstream does), -1 none */
  int tx_used;                /* text ids taken from the request */
  int txt_fed;                /* text ids fed (the prompt's n_prompt_txt first): marks */
  int n_prompt_txt;
  int fill_step;              /* the next decode step feeds tok and yields the fill token */
  /* long text: one job per segment (r->segs), one after the other in one request */
  int seg_i;                  /* this job's segment */
  int tok_base;               /* speech tokens of the earlier segments */
  int n_fills;                /* fill tokens in hist (text streaming) */
  int full_final;             /* COSY_SYNTH_FULL_ATTENTION_FINAL */
  /* LLM side (LLM thread only) */
  void *seq;
  int fed;                    /* prompt positions prefilled */
  int decoding;               /* prefill done; tok is the next input */
  int32_t tok;
  int32_t *hist;
  int n_hist, silent_run;
  /* shared (e->mu) */
  int32_t *tokens;            /* prompt speech tokens, then the tokens for the flow */
  int cap_tok, n_tok;         /* n_tok: generated tokens published */
  int llm_done;               /* no more tokens will come */
  int llm_released;           /* the LLM thread is done with this job */
  cosy_status err;            /* first failure */
  char msg[512];
  int busy;                   /* a flow or vocoder call is in flight for it (from its flow call
                                 until its vocoder call has advanced its chunk state) */
  double audio_until;         /* when its delivered audio runs out, played from its first audio
                                 in real time (cosy_now() time; set with each chunk) */
  /* token-to-wave side (token-to-wave thread only) */
  void *fs, *vs;
  int offset, hop, next_hop_base, chunks_done, final_done;
  int gate_held;              /* the flow's page gate holds its first chunk this round */
  int auto_first;             /* first_chunk_tokens 0: the first hop is chosen at admission */
  int64_t delivered;          /* native-rate samples delivered */
  cosy_resampler *rs;
  float *rs_buf;
  int64_t rs_cap;
} sjob;

struct cosy_sched {
  cosy_engine *e;
  pthread_t llm_th, t2w_th, voc_th;
  int llm_started, t2w_started, llm_exited;
  int voc_started, t2w_exited;   /* the vocoder thread (when the backend runs one beside the flow) */
  int voc_mode;                  /* 0 no vocoder thread; 1 every flow batch's vocoder call on it;
                                    2 only a batch of later chunks that the flow batch's caps cut
                                    short (the rest on the token-to-wave thread, once the vocoder
                                    thread is idle): lib/sched_t2w.c */
  int voc_busy;                  /* the vocoder thread is in a vocoder call (e->mu) */
  int flow_frames;               /* COSY_SCHED_FLOW_FRAMES: a flow batch's new frames at most, below
                                    FLOW_BATCH_FRAMES (lib/sched_t2w.c; 0: that cap) */
  int flow_gate;                 /* the flow's page gate (lib/sched_t2w.c, flow_gate) */
  pthread_cond_t cv_llm, cv_t2w, cv_voc;
  struct vitem *vq;              /* flow results waiting for the vocoder thread (e->mu) */
  cosy_request *q_head, *q_tail; /* submitted, not admitted */
  sjob *active;
  sjob *seg_q;                   /* next segments of running requests, waiting for admission */
  int n_llm;                     /* active jobs the LLM thread still owns */
  int first_in_flight;           /* a first chunk's flow call is running */
  double round_s;                /* moving average of a token-to-wave round (flow + vocoder), s */
  double step_s;                 /* moving average of a decode step's wall time, s (LLM thread) */
  int load_peak;                 /* most requests active + queued at an admission ... */
  double load_peak_t;            /* ... within the last LOAD_WINDOW_S seconds (when it was set) */
  FILE *trace;                   /* COSY_SCHED_TRACE: one line per batch (measurement aid) */
  pthread_mutex_t trace_mu;
  double t0;
  FILE *ttrace;                  /* COSY_TEXT_TRACE: the text-streaming input schedule (tests) */
  int n_ttrace;
  int64_t wake_seq;              /* bumped (e->mu) when the LLM thread has new work */
  struct t2w_call *calls;        /* sched_run_on_t2w: work for the token-to-wave thread (e->mu) */
  pthread_cond_t cv_call;        /* a call is done */
  int64_t steps, step_rows, flow_calls, flow_jobs, voc_calls, voc_jobs;
  int max_streams;               /* COSY_SCHED_MAX_STREAMS=N (e->knobs): new requests are
                                    admitted only while fewer than N are active in any stage
                                    (0: no such bound) */
  /* voices whose prompt-only flow blocks a first chunk has computed (t2w thread): the GPU flow
   * keeps them for the voice's later first chunks (job_frames) */
  const cosy_voice *warm[16];
  int n_warm;
};

enum { BS_ADVANCE = 0, BS_DECODE = 1, BS_FINAL = 2 };
#define MIX_TEXT 5    /* text tokens per group (upstream mix_ratio) */
#define MIX_SPEECH 15 /* speech tokens per group */

/* One line per backend call when the environment names a trace file (COSY_SCHED_TRACE=path):
 * seconds since the engine started, the call, rows (sequences / jobs), a size (positions or new
 * mel frames, 0 when not counted), first chunks among the rows, and the call's wall time in ms. */
static inline void trace(struct cosy_sched *s, const char *what, int rows, int size, int firsts,
                         double dt) {
  if (!s->trace) return;
  pthread_mutex_lock(&s->trace_mu);
  fprintf(s->trace, "%.4f %s %d %d %d %.3f\n", cosy_now() - s->t0 - dt, what, rows, size, firsts,
          dt * 1e3);
  pthread_mutex_unlock(&s->trace_mu);
}

/* COSY_TEXT_TRACE=path: one line per event of a text-streamed request's LLM input (tests compare
 * it with an independent implementation of the official schedule, tests/bistream_ref.py). */
static inline void ttrace(struct cosy_sched *s, int id, const char *fmt, ...) COSY_PRINTF(3, 4);
static inline void ttrace(struct cosy_sched *s, int id, const char *fmt, ...) {
  if (!s->ttrace) return;
  pthread_mutex_lock(&s->trace_mu);
  fprintf(s->ttrace, "%d ", id);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(s->ttrace, fmt, ap);
  va_end(ap);
  fputc('\n', s->ttrace);
  fflush(s->ttrace);
  pthread_mutex_unlock(&s->trace_mu);
}

static inline int cancelled(const cosy_request *r) {
  return __atomic_load_n(&r->cancel, __ATOMIC_SEQ_CST) != 0;
}

static inline void add_time(cosy_request *r, double *slot, double dt) {
  pthread_mutex_lock(&r->mu);
  *slot += dt;
  pthread_mutex_unlock(&r->mu);
}

static inline void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += (long)ms * 1000000L;
  while (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(cv, mu, &ts);
}

/* record the first failure of a job (e->mu held) */
static inline void job_fail_locked(sjob *j, cosy_status st, const char *msg) {
  if (j->err) return;
  j->err = st;
  snprintf(j->msg, sizeof j->msg, "%s", msg && msg[0] ? msg : cosy_status_str(st));
}

/* first thing on each scheduler thread: the backend's per-thread setup, the CPU threads */
static inline void thread_enter(cosy_engine *e) {
  if (e->be->thread_enter) e->be->thread_enter(e);
#ifdef _OPENMP
  if (e->cfg.cpu_threads > 0) omp_set_num_threads(e->cfg.cpu_threads);
#endif
}

/* the job's next chunk already has its tokens (e->mu held) */
static inline int chunk_tokens_ready(const sjob *j) {
  return !j->collect_only && j->n_tok - j->offset >= j->hop + LOOKAHEAD;
}

/* the job's next chunk is its request's first audio (not a later segment's first chunk) */
static inline int request_first(const sjob *j) { return j->chunks_done == 0 && j->seg_i == 0; }

/* the request's first chunk is still to come from this job (its first segment, streamed, not
 * failed, finished or cancelled; e->mu held) */
static inline int first_open(const sjob *j) {
  return request_first(j) && !j->collect_only && !j->err && !j->final_done && !cancelled(j->r);
}

/* Waves (e->mu held). A burst (W1: many clients at once) and a steady stream of arrivals (live
 * users, W3) want different rules. While at least SCHED_WAVE_MIN requests await their first
 * audio (a wave; the knob COSY_SCHED_WAVE moves the bound, 0: always a wave) the scheduler
 * gives the device to the wave: later chunks with audio to spare wait while new requests await
 * their first tokens (lib/sched_t2w.c), a flow batch that starts with first chunks holds nothing
 * else, and the LLM pauses while a first chunk's flow runs (with up to first_chunk_wait_max
 * requests decoding, lib/sched_llm.c). Outside a wave none of these holds work back, apart from
 * the pause while at most SCHED_PAUSE_TRICKLE requests decode: under a steady stream each of
 * them turned small delays into smaller, less efficient batches and a queue that fed itself (on
 * an H200 at 320 live users first-audio p95 327 ms with them, 166 ms without; with a bound of
 * 24 instead of 12 W1's C = 64 second wave was no wave and its p95 rose from ~245 to 274-299
 * ms; bench/RESULTS.md). */
#define SCHED_WAVE_MIN 12
#define SCHED_PAUSE_TRICKLE 8
static inline int sched_wave(const cosy_engine *e, const struct cosy_sched *s) {
  const int min = e->knobs.wave >= 0 ? e->knobs.wave : SCHED_WAVE_MIN;
  int n = 0;
  for (const sjob *j = s->active; j && n < min; j = j->next)
    if (first_open(j)) n++;
  return n >= min;
}

/* lib/sched_jobs.c */
/* a backend call's status: COSY_ERR_DEVICE_LOST marks the engine lost (no lock held) */
void sched_note_status(cosy_engine *e, cosy_status st, const char *msg);
void sched_job_free(sjob *j);
/* append na items to the growing array *a (n used, cap allocated) */
cosy_status sched_items_push(int32_t **a, int *n, int *cap, const int32_t *add, int na);
/* the job of segment seg of r, prepared (host work; no lock held) */
cosy_status sched_job_prepare(cosy_engine *e, cosy_request *r, int seg, sjob **out);
/* the job's backend states; COSY_ERR_GPU_NO_MEMORY: not now */
cosy_status sched_job_reserve(cosy_engine *e, sjob *j);

/* The threads' bodies (pthread start routines, arg: the engine), started by sched_start. */
void *sched_llm_main(void *arg); /* lib/sched_llm.c */
void *sched_t2w_main(void *arg); /* lib/sched_t2w.c */
void *sched_voc_main(void *arg); /* lib/sched_t2w.c */

#endif /* COSY_SCHED_INTERNAL_H */
