/* scheduler.c - how requests move through the engine: one place that owns the compute and
 * batches every stage across requests.
 *
 *   cosy_request_submit ─► queue ─(admission)─► active ─► LLM thread ─► tokens ─► token-to-wave
 *                                                        (batched     (per         thread
 *                                                         decode      request)    (batched flow,
 *                                                         steps)                   batched vocoder,
 *                                                                                  delivery)
 *
 * LLM thread (llm_main), one iteration:
 *   1. admission: the queue's head requests, prepared by their callers (text -> ids -> LLM input,
 *      host work, in sched_submit; a text-streamed one here), are
 *      admitted while fewer than max_active are active and the backend can reserve their LLM
 *      sequence, flow state and vocoder state (KV pages / flow cache). A request that does not
 *      fit waits at the head of the queue (first come, first served); one that could not fit even
 *      in an idle engine fails with COSY_ERR_GPU_NO_MEMORY. Nothing is reserved mid-utterance, so
 *      an admitted request never fails for memory.
 *   2. prefill: each newly admitted sequence gets its prompt in pieces of PREFILL_PIECE positions
 *      (at most PREFILL_BUDGET positions per iteration over all sequences), so a long prompt never
 *      holds the running streams' next token for long; the last piece samples the first token.
 *   3. one decode step over every sequence that has a token to feed (backend llm_step: one
 *      batched forward, each row sampled with its own request's parameters and generator).
 *      Each sampled token: a stop id ends the request's LLM part; otherwise it joins the RAS
 *      history and, unless the silent-token filter drops it, the request's flow tokens.
 *   Cancelled or failed requests release their sequence here.
 *
 * Token-to-wave thread (t2w_main), one iteration:
 *   1. requests whose LLM part and last chunk are done (or that failed / were cancelled and have
 *      no call in flight) are finished and their states released;
 *   2. every request whose next chunk is ready (the chunk schedule below, decided by token counts
 *      only) is a candidate; first chunks go first (time to first audio), then the request whose
 *      delivered audio runs out soonest (playback deadline); at most one chunk per request and
 *      FLOW_BATCH_JOBS requests per batch;
 *   3. one flow call for the batch (backend flow_run); each job's new frames go to the vocoder.
 * Vocoder (voc_batch): one vocoder call (backend vocode) over queued flow results, first chunks
 * first; the new samples go through the request's resampler to its callback or pull buffer, and
 * the job's chunk state advances. When the backend asks for it (vocoder_thread) or
 * COSY_SCHED_VOCODER_THREAD=1, this runs on a vocoder thread (voc_main) fed by a queue, so one
 * batch's vocoder overlaps the next batch's flow; otherwise (the default) the token-to-wave
 * thread runs it right after its flow call. A job is busy from its flow call until its vocoder call is over,
 * so a request's chunks stay in order.
 *
 * The chunk schedule (docs/scheduler.md section 2): chunk k is ready when
 *   n_tokens - offset >= hop_k + 3 (3 look-ahead tokens); hop_0 = sched_first_hop (the fewest
 *   tokens, at least first_chunk_tokens, that end prompt + first chunk on a 50-frame attention
 *   block: pad = ceil(P/25)*25 - P when that is enough, else pad + whole blocks; with
 *   first_chunk_tokens 0 chosen at admission: AUTO_SHORT_FIRST at light load, else 25, the
 *   official schedule), then hops doubling up to 100 from first_chunk_tokens rounded up to a
 *   block; each chunk's flow call uses
 *   prompt + tokens[: offset + hop + 3] with the block-causal mask and yields frames
 *   [2 offset, 2 (offset + hop)); the last call (after the LLM's last token) uses every token with
 *   finalize (zero look-ahead) and yields the rest. Whether the last call attends block-causally
 *   (the default) or over everything (as the official code does) is COSY_SYNTH_FULL_ATTENTION_FINAL;
 *   docs/scheduler.md explains the choice. Blocking synthesis runs exactly this schedule, so
 *   streaming and blocking output are identical for the same seed (and since chunks end on block
 *   boundaries, where they end does not change the samples). COSY_SYNTH_ONE_SHOT, or
 *   speed != 1 (blocking only): all tokens first, one full-attention flow call, (speed != 1) the
 *   mel linearly resampled to T/speed frames, one final vocoder call.
 *
 * Text streamed in (COSY_SYNTH_TEXT_STREAM; docs/scheduler.md section 7): the LLM input is built
 * piece by piece as upstream's inference_bistream does (bs_advance / bs_fill); a job waiting for
 * text has nothing to prefill or decode and simply sits out the iteration.
 * Long text (docs/scheduler.md section 8): one job per segment; the next segment's job is made
 * when the previous one's LLM part ends (llm_release) and admitted ahead of the queue (s->seg_q);
 * its chunks wait for the previous segment's last chunk (r->seg_delivered); the request ends
 * with its last segment job (r->seg_alive).
 *
 * Threads and locks: e->mu guards the queue, the active list and each job's shared fields (marked
 * below). Only the token-to-wave thread removes jobs from the active list, and only after the LLM
 * thread has released them (llm_released), so each thread can work on its own snapshot of jobs
 * without holding the lock during compute. Push callbacks run on the thread that vocodes. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "audio.h"
#include "engine.h"
#include "ref/flow.h" /* flow_prompt_only_blocks */
#include "ref/llm.h" /* ref_silent_pass */
#include "sampling.h"
#include "text/normalize.h"
#include "tokenizer.h"
#include "util.h"

#define SYSTEM_PREFIX COSY_SYSTEM_PREFIX
#define EOP COSY_EOP
#define MEL 80
#define LOOKAHEAD 3      /* tokens of right context a non-final flow call needs */
#define BLOCK_TOKENS 25  /* the flow's attention block (50 frames) in tokens */
#define MAX_HOP 100      /* the official hop stops doubling here */
#define AUTO_SHORT_FIRST 5 /* first_chunk_tokens 0 at light load: the prompt's last block only */
#define LOAD_WINDOW_S 3.0  /* light load: no admission saw more than the limit for this long */

/* The first chunk's tokens (docs/scheduler.md section 2): the fewest, at least n, that end the
 * prompt + first chunk on a block boundary. pad = the tokens that complete the prompt's last
 * block; n <= pad: the first chunk is those pad tokens (shorter than a block), else pad plus
 * whole blocks (n = 25, 50, 75, 100: n + pad, the official schedule). */
static int sched_first_hop(int P, int n) {
  const int pad = (BLOCK_TOKENS - P % BLOCK_TOKENS) % BLOCK_TOKENS;
  return n <= pad ? pad : pad + (n - pad + BLOCK_TOKENS - 1) / BLOCK_TOKENS * BLOCK_TOKENS;
}
#define PREFILL_PIECE 1024       /* positions of one sequence per iteration at most */
#define PREFILL_BUDGET 1024      /* positions per iteration while sequences decode (~4 ms on an H100) */
#define PREFILL_BUDGET_IDLE 2048 /* ... and while none does */
#define FLOW_BATCH_JOBS 64
#define FLOW_BATCH_FRAMES 3000 /* new mel frames per flow batch (per CFG row). A 1024 cap was
                                 measured worse at C = 64 (TTFB p95 1168 vs 1003 ms, 148x vs 160x
                                 real time: smaller batches, same queue); see bench/RESULTS.md */
#define YIELD_S 0.25 /* the LLM yields to playback while a ready chunk's audio runs out within
                        this (yield_to_playback) */
#define IDLE_POLL_MS 20  /* threads with active work re-check cancel flags at least this often */
#define DEFER_SLACK_S 1.0 /* chunks with more audio ahead than this wait for a wave's first chunks */
#define DEFER_POLL_MS 2

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
static void trace(struct cosy_sched *s, const char *what, int rows, int size, int firsts,
                  double dt) {
  if (!s->trace) return;
  pthread_mutex_lock(&s->trace_mu);
  fprintf(s->trace, "%.4f %s %d %d %d %.3f\n", cosy_now() - s->t0 - dt, what, rows, size, firsts,
          dt * 1e3);
  pthread_mutex_unlock(&s->trace_mu);
}

/* COSY_TEXT_TRACE=path: one line per event of a text-streamed request's LLM input (tests compare
 * it with an independent implementation of the official schedule, tests/bistream_ref.py). */
static void ttrace(struct cosy_sched *s, int id, const char *fmt, ...) COSY_PRINTF(3, 4);
static void ttrace(struct cosy_sched *s, int id, const char *fmt, ...) {
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

static int cancelled(const cosy_request *r) {
  return __atomic_load_n(&r->cancel, __ATOMIC_SEQ_CST) != 0;
}

static void add_time(cosy_request *r, double *slot, double dt) {
  pthread_mutex_lock(&r->mu);
  *slot += dt;
  pthread_mutex_unlock(&r->mu);
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
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
static void job_fail_locked(sjob *j, cosy_status st, const char *msg) {
  if (j->err) return;
  j->err = st;
  snprintf(j->msg, sizeof j->msg, "%s", msg && msg[0] ? msg : cosy_status_str(st));
}

/* ---- a lost device ---------------------------------------------------------------------------- */

/* A backend call ended with a sticky CUDA error (COSY_ERR_DEVICE_LOST: illegal address, launch
 * failure, ECC, ...): the CUDA context is unusable, so the engine is lost. Every request not yet
 * finished fails with COSY_ERR_DEVICE_LOST (queued ones at the LLM thread's next admission),
 * nothing more is sent to the device, and every later call on the engine (submit, synthesize,
 * voices, stats) returns COSY_ERR_DEVICE_LOST; cosy_engine_destroy still works. A non-sticky
 * failure (COSY_ERR_CUDA, COSY_ERR_GPU_NO_MEMORY) fails only the requests of the batched call
 * that failed; the engine goes on serving. Other statuses are ignored here. */
static void note_status(cosy_engine *e, cosy_status st, const char *msg) {
  if (st != COSY_ERR_DEVICE_LOST) return;
  struct cosy_sched *s = e->sched;
  pthread_mutex_lock(&e->mu);
  const int first = !e->lost;
  if (first) {
    snprintf(e->lost_msg, sizeof e->lost_msg, "%s", msg && msg[0] ? msg : cosy_status_str(st));
    __atomic_store_n(&e->lost, 1, __ATOMIC_RELEASE);
  }
  char m[512];
  snprintf(m, sizeof m, "the GPU failed; the engine must be destroyed: %.440s", e->lost_msg);
  for (sjob *j = s->active; j; j = j->next)
    if (!j->final_done) job_fail_locked(j, COSY_ERR_DEVICE_LOST, m);
  pthread_cond_broadcast(&s->cv_llm);
  pthread_cond_broadcast(&s->cv_t2w);
  pthread_mutex_unlock(&e->mu);
  if (first) engine_log(e, COSY_LOG_ERROR, "%s", m);
}

cosy_status engine_check_lost(const cosy_engine *e) {
  if (!__atomic_load_n(&e->lost, __ATOMIC_ACQUIRE)) return COSY_OK;
  return cosy_err(COSY_ERR_DEVICE_LOST,
                  "the engine's GPU failed with a sticky error and the engine must be destroyed "
                  "(%s)", e->lost_msg);
}

static int is_lost(const cosy_engine *e) { return __atomic_load_n(&e->lost, __ATOMIC_ACQUIRE); }

/* ---- text ------------------------------------------------------------------------------------ */

/* The official front end's text_normalize(text, split=False) (lib/text/normalize.h): wetext TN
 * and the post-processing rules when the model file has the grammars, else the minimal rule
 * (whitespace runs -> one space, ends trimmed); text holding "<|" and "|>" passes untouched. */
static cosy_status normalize_text(const cosy_text_norm *tn, const char *in, int enabled,
                                  char **out) {
  if (!enabled) return (*out = cosy_strdup(in)) ? COSY_OK : COSY_ERR_NO_MEMORY;
  return cosy_text_normalize(tn, in, 0, out);
}

static char *concat3(const char *a, const char *b, const char *c) {
  size_t na = strlen(a), nb = strlen(b), nc = strlen(c);
  char *s = (char *)cosy_malloc(na + nb + nc + 1);
  if (!s) return NULL;
  memcpy(s, a, na);
  memcpy(s + na, b, nb);
  memcpy(s + na + nb, c, nc + 1);
  return s;
}

static void job_free(sjob *j) {
  if (!j) return;
  free(j->lm_input);
  free(j->pend);
  free(j->tcache);
  free(j->hist);
  free(j->tokens);
  free(j->rs_buf);
  if (j->rs) cosy_resampler_free(j->rs);
  free(j);
}

static cosy_status items_push(int32_t **a, int *n, int *cap, const int32_t *add, int na) {
  if (*n + na > *cap) {
    int nc = *cap ? *cap : 64;
    while (nc < *n + na) nc *= 2;
    int32_t *p = (int32_t *)cosy_realloc(*a, (size_t)nc * sizeof *p);
    if (!p) return cosy_err(COSY_ERR_NO_MEMORY, "out of memory building the LLM input");
    *a = p;
    *cap = nc;
  }
  if (na) memcpy(*a + *n, add, (size_t)na * sizeof *add);
  *n += na;
  return COSY_OK;
}

/* A text-streamed request (zero-shot): the LLM input starts as [sos, prompt text up to and with
 * <|endofprompt|>]; the rest of the prompt text starts the text cache (upstream
 * inference_bistream); the prompt speech is interleaved as text arrives. */
static cosy_status prepare_stream(cosy_engine *e, sjob *j) {
  const cosy_voice *v = j->v;
  const cosy_synth_params *p = &j->r->params;
  const int S = e->model->hp.speech_tokens, P = v->n_tokens;
  char *prompt = strstr(v->prompt_text, EOP) ? cosy_strdup(v->prompt_text)
                                             : concat3(SYSTEM_PREFIX, EOP, v->prompt_text);
  if (!prompt) return COSY_ERR_NO_MEMORY;
  int32_t *ids = NULL, n = 0;
  cosy_status st = cosy_tokenize(e->tok, prompt, strlen(prompt), &ids, &n);
  free(prompt);
  if (st) return st;
  int eop = -1;
  for (int i = 0; i < n && eop < 0; i++)
    if (ids[i] == e->model->hp.endofprompt_id) eop = i;
  if (eop < 0) {
    free(ids);
    return cosy_err(COSY_ERR_TEXT, "the prompt text holds no <|endofprompt|> token");
  }
  const int32_t sos = -1 - S;
  if (!(st = items_push(&j->pend, &j->n_pend, &j->cap_pend, &sos, 1)) &&
      !(st = items_push(&j->pend, &j->n_pend, &j->cap_pend, ids, eop + 1)))
    st = items_push(&j->tcache, &j->n_tc, &j->cap_tc, ids + eop + 1, n - eop - 1);
  free(ids);
  if (st) return st;
  j->bistream = 1;
  j->n_prompt_txt = n;
  j->bs_phase = BS_ADVANCE;
  j->stale = -1;
  j->next_fill = (P / MIX_SPEECH + 1) * MIX_SPEECH - P;
  j->max_len = p->max_tokens > 0 ? p->max_tokens : COSY_TEXT_STREAM_MAX_TOKENS;
  j->min_len = 0;
  /* [sos, prompt text, prompt speech, text, every generated token, the re-fed one, task_id] */
  j->max_pos = 1 + n + P + j->r->tx_max + j->max_len + 2;
  j->L = j->fed = 0;
  pthread_mutex_lock(&j->r->mu);
  j->r->n_text_tokens = n;
  pthread_mutex_unlock(&j->r->mu);
  struct cosy_sched *s = e->sched;
  if (s->ttrace) {
    pthread_mutex_lock(&s->trace_mu);
    j->trace_id = s->n_ttrace++;
    pthread_mutex_unlock(&s->trace_mu);
    char buf[64];
    size_t cap = 64 + 12 * (size_t)(j->n_pend + j->n_tc + P), at = 0;
    char *line = (char *)cosy_malloc(cap);
    if (line) {
      at += (size_t)snprintf(line + at, cap - at, "H S=%d P=%d prefix", S, P);
      for (int i = 1; i < j->n_pend; i++) {
        snprintf(buf, sizeof buf, " %d", (int)j->pend[i]);
        at += (size_t)snprintf(line + at, cap - at, "%s", buf);
      }
      at += (size_t)snprintf(line + at, cap - at, " cache");
      for (int i = 0; i < j->n_tc; i++) at += (size_t)snprintf(line + at, cap - at, " %d", (int)j->tcache[i]);
      at += (size_t)snprintf(line + at, cap - at, " ps");
      for (int i = 0; i < P; i++) at += (size_t)snprintf(line + at, cap - at, " %d", (int)v->speech_tokens[i]);
      ttrace(s, j->trace_id, "%s", line);
      free(line);
    }
  }
  return COSY_OK;
}

/* the text of one LLM call as the mode gives it to the LLM (cross-lingual: with the system
 * prefix, unless the text holds <|endofprompt|>) */
static char *mode_tts(const cosy_synth_params *p, const char *text) {
  if (p->mode == COSY_MODE_CROSS_LINGUAL && !strstr(text, EOP))
    return concat3(SYSTEM_PREFIX, EOP, text);
  return cosy_strdup(text);
}

/* The text tokens of one LLM call are bounded (COSY_LLM_MAX_TEXT_TOKENS, cosyvoice.h): the
 * segment's n tokens; seg of n_segs (n_segs 0: the text is not split). */
static cosy_status seg_limit(const cosy_synth_params *p, int n, int seg, int n_segs) {
  if (n <= COSY_LLM_MAX_TEXT_TOKENS) return COSY_OK;
  if (n_segs > 0)
    return cosy_err(COSY_ERR_TEXT,
                    "text: segment %d of %d has %d text tokens; one LLM call takes at most "
                    "COSY_LLM_MAX_TEXT_TOKENS (%d): the text is cut at sentence ends, so add "
                    "sentence punctuation or line breaks, or split the text",
                    seg + 1, n_segs, n, COSY_LLM_MAX_TEXT_TOKENS);
  return cosy_err(COSY_ERR_TEXT,
                  "text: %d text tokens; one LLM call takes at most COSY_LLM_MAX_TEXT_TOKENS (%d)%s",
                  n, COSY_LLM_MAX_TEXT_TOKENS,
                  (p->flags & COSY_SYNTH_NO_TEXT_NORMALIZATION)
                      ? " and with COSY_SYNTH_NO_TEXT_NORMALIZATION the whole text is one call: "
                        "split the text, or let the library normalize and split it"
                      : ": split the text");
}

/* The largest ceiling (speech tokens) that fits caps, from the utterance's fixed parts; how many
 * tokens each reservation leaves (INT_MAX: no limit). */
static int utt_fit_flow(const cosy_utt_caps *c, const cosy_utt *u) {
  if (c->flow_frames <= 0) return INT_MAX;
  return c->flow_frames / u->token_mel_ratio - u->prompt_tokens - u->lookahead;
}
static int utt_fit_llm(const cosy_utt_caps *c, const cosy_utt *u) {
  if (c->llm_positions <= 0) return INT_MAX;
  return c->llm_positions - (u->llm_positions - u->max_gen);
}
/* one-shot: speed_mel makes (int)(ratio g / speed) frames of g tokens, all in one vocoder call */
static int utt_voc_frames(const cosy_utt *u, int g) {
  return (int)((double)u->token_mel_ratio * g / (double)u->speed);
}
static int utt_fit_voc(const cosy_utt_caps *c, const cosy_utt *u) {
  if (c->voc_frames <= 0 || !u->one_shot) return INT_MAX;
  int g = (int)((double)c->voc_frames * u->speed / u->token_mel_ratio) + 1;
  while (g > 0 && utt_voc_frames(u, g) > c->voc_frames) g--;
  return g;
}

cosy_status sched_utt_check(const cosy_utt_caps *c, const cosy_utt *u) {
  const int ff = utt_fit_flow(c, u), fl = utt_fit_llm(c, u), fv = utt_fit_voc(c, u);
  int fit = ff < fl ? ff : fl;
  if (fv < fit) fit = fv;
  if (u->max_gen <= fit) return COSY_OK;
  const char *where = c->where ? c->where : "the engine";
  char what[160], ceil[200], need[320], fix[200];
  if (u->n_segs > 0)
    snprintf(what, sizeof what, "segment %d of %d (%d characters, %d text tokens)", u->seg + 1,
             u->n_segs, u->n_chars, u->text_tokens);
  else
    snprintf(what, sizeof what, "the streamed text");
  if (u->max_tokens > 0)
    snprintf(ceil, sizeof ceil, "max_tokens %d", u->max_tokens);
  else if (u->n_segs > 0)
    snprintf(ceil, sizeof ceil,
             "up to %d speech tokens (with max_tokens 0 the ceiling is 20 per text token, as "
             "the official code's max_token_text_ratio)",
             u->max_gen);
  else
    snprintf(ceil, sizeof ceil, "up to %d speech tokens (max_tokens 0: the default for streamed "
             "text)", u->max_gen);
  if (ff < u->max_gen) {
    const int frames = u->token_mel_ratio * (u->prompt_tokens + u->max_gen + u->lookahead);
    snprintf(need, sizeof need,
             "with the voice's %d prompt tokens and %d look-ahead tokens that is %d mel frames, "
             "more than the %d (%d s) %s holds for one utterance",
             u->prompt_tokens, u->lookahead, frames, c->flow_frames, c->flow_frames / 50, where);
  } else if (fl < u->max_gen) {
    snprintf(need, sizeof need,
             "with its %d LLM input positions that is %d positions, more than the %d one LLM "
             "sequence holds",
             u->llm_positions - u->max_gen, u->llm_positions, c->llm_positions);
  } else {
    snprintf(need, sizeof need,
             "COSY_SYNTH_ONE_SHOT or speed != 1 (speed %g) sends the whole mel, %d frames, to "
             "one vocoder call, which holds at most %d frames",
             (double)u->speed, utt_voc_frames(u, u->max_gen), c->voc_frames);
  }
  if (ff < 1)
    snprintf(fix, sizeof fix, "the voice's %d prompt tokens leave no room: use a shorter voice",
             u->prompt_tokens);
  else if (fl < 1)
    snprintf(fix, sizeof fix, "its LLM input of %d positions leaves no room: cut the text",
             u->llm_positions - u->max_gen);
  else if (u->n_segs > 0 && u->max_tokens <= 0)
    snprintf(fix, sizeof fix,
             "set max_tokens to at most %d, use a shorter voice, or cut the segment with "
             "punctuation (. ? ! ; :)",
             fit);
  else
    snprintf(fix, sizeof fix, "set max_tokens to at most %d or use a shorter voice", fit);
  /* a segment too long for its default ceiling, or whose input alone fills the LLM sequence,
   * is the text's doing; a ceiling the caller set, a voice that leaves no room or the one-shot
   * vocoder call are the arguments' */
  const int text_cause = u->n_segs > 0 && (fl < 1 || (u->max_tokens <= 0 && ff >= 1 &&
                                                      fv >= u->max_gen));
  const cosy_status st = text_cause ? COSY_ERR_TEXT : COSY_ERR_INVALID_ARG;
  return cosy_err(st, "%s: %s; %s; %s", what, ceil, need, fix);
}

static int utf8_chars(const char *t) {
  int n = 0;
  for (; *t; t++) n += ((unsigned char)*t & 0xC0) != 0x80;
  return n;
}

static cosy_utt utt_of(const cosy_engine *e, const sjob *j, int n_chars, int n_tts) {
  const cosy_request *r = j->r;
  cosy_utt u;
  memset(&u, 0, sizeof u);
  u.seg = j->seg_i;
  u.n_segs = r->text_stream ? 0 : r->n_segs > 0 ? r->n_segs : 1;
  u.n_chars = n_chars;
  u.text_tokens = n_tts;
  u.prompt_tokens = j->v->n_tokens;
  u.max_tokens = r->params.max_tokens;
  u.max_gen = j->max_len;
  u.llm_positions = j->max_pos;
  u.one_shot = j->collect_only;
  u.speed = r->params.speed > 0 ? r->params.speed : 1.0f;
  u.token_mel_ratio = e->model->hp.token_mel_ratio;
  u.lookahead = e->model->hp.pre_lookahead;
  return u;
}

/* The tts text of a request's text (per mode) tokenized, counted in r->seg_tokenized. */
static cosy_status tokenize_tts(cosy_engine *e, cosy_request *r, const char *tts, int32_t **ids,
                                int32_t *n) {
  __atomic_fetch_add(&r->seg_tokenized, 1, __ATOMIC_RELAXED);
  return cosy_tokenize(e->tok, tts, strlen(tts), ids, n);
}

/* The official ceiling of segment j->seg_i (n_tts text tokens) against the engine's
 * per-utterance capacity (e->caps), and, for the first segment of a long text, that of every
 * later segment too: their text tokens counted as job_prepare will count them (the same tts text
 * per mode), their LLM input as long as this one's but for the text. So a long text whose
 * segment k cannot be held (or has more text tokens than one LLM call takes) fails at submission
 * with that segment named, never after the audio of the segments before it. The ids of segment
 * k are kept (r->seg_ids[k]) for its job_prepare, so that each segment is tokenized once. */
static cosy_status plan_segments(cosy_engine *e, const sjob *j, const char *text, int n_tts) {
  cosy_utt u = utt_of(e, j, utf8_chars(text), n_tts);
  cosy_status st = sched_utt_check(&e->caps, &u);
  cosy_request *r = j->r;
  const cosy_synth_params *p = &r->params;
  if (!st && j->seg_i == 0 && r->n_segs > 1 && !r->seg_ids) {
    r->seg_ids = (int32_t **)cosy_calloc((size_t)r->n_segs, sizeof *r->seg_ids);
    r->seg_n_ids = (int32_t *)cosy_calloc((size_t)r->n_segs, sizeof *r->seg_n_ids);
    if (!r->seg_ids || !r->seg_n_ids) return COSY_ERR_NO_MEMORY;
  }
  for (int k = j->seg_i + 1; !st && j->seg_i == 0 && k < r->n_segs; k++) {
    const char *t = r->segs[k];
    char *tts = mode_tts(p, t);
    int32_t *ids = NULL, n = 0;
    if (!tts) return COSY_ERR_NO_MEMORY;
    st = tokenize_tts(e, r, tts, &ids, &n);
    free(tts);
    free(r->seg_ids[k]);
    r->seg_ids[k] = ids; /* NULL on failure */
    r->seg_n_ids[k] = n;
    if (!st) st = seg_limit(p, n, k, r->n_segs); /* COSY_LLM_MAX_TEXT_TOKENS */
    if (st) return st;
    cosy_utt uk = u;
    uk.seg = k;
    uk.n_chars = utf8_chars(t);
    uk.text_tokens = n;
    uk.max_gen = p->max_tokens > 0 ? p->max_tokens
               : 20 * n < COSY_LLM_MAX_SPEECH_TOKENS ? 20 * n : COSY_LLM_MAX_SPEECH_TOKENS;
    uk.llm_positions = j->max_pos - j->max_len - n_tts + n + uk.max_gen;
    st = sched_utt_check(&e->caps, &uk);
  }
  return st;
}

/* Everything before the LLM (host work): text and prompt per mode (zero-shot uses the voice's
 * prompt text, prefixed with the system prompt when it lacks <|endofprompt|>, and its speech
 * tokens; cross-lingual gives the LLM no prompt and prefixes the text itself; instruct uses the
 * instruct text as the prompt), tokenization, lengths (min 2, max 20 speech tokens per text
 * token unless the request says otherwise), the LLM input, the generator, the resampler. */
static cosy_status job_prepare(cosy_engine *e, cosy_request *r, int seg, sjob **out) {
  const cosy_voice *v = r->voice;
  const cosy_synth_params *p = &r->params;
  cosy_status st = COSY_OK;
  char *text = NULL, *tts = NULL, *prompt = NULL;
  int32_t *tts_ids = NULL, *prompt_ids = NULL;
  int32_t n_tts = 0, n_prompt = 0;
  sjob *j = (sjob *)cosy_calloc(1, sizeof *j);
  if (!j) return COSY_ERR_NO_MEMORY;
  j->r = r;
  j->v = v;
  j->collect_only = p->speed != 1.0f || (p->flags & COSY_SYNTH_ONE_SHOT);
  j->full_final = (p->flags & COSY_SYNTH_FULL_ATTENTION_FINAL) != 0;
  j->seg_i = seg;
  pthread_mutex_lock(&r->mu);
  j->tok_base = r->n_speech_tokens;
  pthread_mutex_unlock(&r->mu);
  if (r->text_stream) {
    if ((st = prepare_stream(e, j)) || (st = plan_segments(e, j, "", 0))) goto done;
    goto lengths_done;
  }
  if (seg > 0) { /* a later segment of a long text (normalized and cut with the first) */
    if (!(text = cosy_strdup(r->segs[seg]))) st = COSY_ERR_NO_MEMORY;
  } else if (!(p->flags & COSY_SYNTH_NO_TEXT_NORMALIZATION)) {
    /* the official front end's text_normalize(split=True): normalized segments of at most ~80
     * tokens, each synthesized in turn as its own utterance (same prompt, fresh LLM context) */
    if (!(st = cosy_text_split(e->tn, r->text, 0, &r->segs, &r->n_segs)) &&
        r->n_segs > 0 && !(text = cosy_strdup(r->segs[0])))
      st = COSY_ERR_NO_MEMORY;
    if (!st && r->n_segs == 0 && !(text = cosy_strdup(""))) st = COSY_ERR_NO_MEMORY;
  } else {
    st = normalize_text(e->tn, r->text, 0, &text);
  }
  if (st) goto done;
  if (!text[0]) {
    st = cosy_err(COSY_ERR_TEXT, "nothing to say: the text is empty after normalization");
    goto done;
  }
  int use_prompt_tokens = p->mode == COSY_MODE_ZERO_SHOT;
  if (p->mode == COSY_MODE_ZERO_SHOT) {
    prompt = strstr(v->prompt_text, EOP) ? cosy_strdup(v->prompt_text)
                                          : concat3(SYSTEM_PREFIX, EOP, v->prompt_text);
  } else if (p->mode == COSY_MODE_CROSS_LINGUAL) {
    prompt = cosy_strdup("");
  } else {
    prompt = strstr(p->instruct_text, EOP) ? cosy_strdup(p->instruct_text)
                                            : concat3(SYSTEM_PREFIX " ", p->instruct_text, EOP);
  }
  tts = mode_tts(p, text);
  if (!prompt || !tts) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  if ((st = cosy_tokenize(e->tok, prompt, strlen(prompt), &prompt_ids, &n_prompt))) goto done;
  if (seg > 0 && r->seg_ids && r->seg_ids[seg]) { /* tokenized at submission (plan_segments) */
    tts_ids = r->seg_ids[seg];
    n_tts = r->seg_n_ids[seg];
    r->seg_ids[seg] = NULL;
  } else if ((st = tokenize_tts(e, r, tts, &tts_ids, &n_tts))) {
    goto done;
  }
  if (n_tts == 0) {
    st = cosy_err(COSY_ERR_TEXT, "nothing to say: the text has no tokens");
    goto done;
  }
  /* the LLM call's work is bounded before it starts (cosyvoice.h, limits) */
  r->prep_limit = seg == 0; /* a limit below: cosy_request_submit refuses the request */
  if (n_prompt > COSY_LLM_MAX_TEXT_TOKENS) {
    st = cosy_err(COSY_ERR_TEXT,
                  "%s has %d text tokens (with the system prefix), more than "
                  "COSY_LLM_MAX_TEXT_TOKENS (%d)",
                  p->mode == COSY_MODE_INSTRUCT ? "instruct_text" : "the voice's prompt text",
                  (int)n_prompt, COSY_LLM_MAX_TEXT_TOKENS);
    goto done;
  }
  if ((st = seg_limit(p, n_tts, seg, r->n_segs))) goto done;
  r->prep_limit = 0;
  j->min_len = 2 * n_tts;
  j->max_len = 20 * n_tts;
  if (j->max_len > COSY_LLM_MAX_SPEECH_TOKENS) j->max_len = COSY_LLM_MAX_SPEECH_TOKENS;
  if (p->max_tokens > 0) j->max_len = p->max_tokens;
  if (p->min_tokens > 0) j->min_len = p->min_tokens;
  if (j->min_len > j->max_len) j->min_len = j->max_len;
  {
  const int P = v->n_tokens;
  if ((st = e->be->llm_input(e, prompt_ids, n_prompt, tts_ids, n_tts,
                             use_prompt_tokens ? v->speech_tokens : NULL,
                             use_prompt_tokens ? P : 0, &j->lm_input, &j->L)))
    goto done;
  pthread_mutex_lock(&r->mu);
  r->n_text_tokens = seg == 0 ? n_prompt + n_tts : r->n_text_tokens + n_tts;
  pthread_mutex_unlock(&r->mu);
  j->max_pos = j->L + j->max_len;
  }
  /* the ceiling of this segment and (at submission) of every later one must fit what one
   * utterance may reserve: a segment that cannot is refused now, before any audio */
  r->prep_limit = seg == 0; /* refused at submission too (cosy_request_submit) */
  if ((st = plan_segments(e, j, text, n_tts))) goto done;
  r->prep_limit = 0;
lengths_done:;
  const int P = v->n_tokens;
  j->cap_tok = P + j->max_len + 1;
  j->tokens = (int32_t *)cosy_malloc((size_t)j->cap_tok * sizeof *j->tokens);
  j->hist = (int32_t *)cosy_malloc((size_t)(j->max_len + 1) * sizeof *j->hist);
  if (!j->tokens || !j->hist) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  if (P) memcpy(j->tokens, v->speech_tokens, (size_t)P * sizeof *j->tokens);
  /* first_chunk_tokens 0 (auto): 25 (the official schedule) unless admission finds a light load
   * (admit: at most first_chunk_wait_max requests active and queued), then AUTO_SHORT_FIRST;
   * text-streamed requests always 25: their tokens come as fast as their text does (15 speech
   * tokens per 5 text tokens), so a short first chunk's audio could run out before the next
   * chunk's tokens (W4 at C = 64 on an H200: 11 of 649 utterances with a gap of up to 200 ms
   * with the short first chunk, none with 25, first audio p95 1405 -> 1651 ms;
   * bench/RESULTS.md) */
  const int n_first = p->first_chunk_tokens ? p->first_chunk_tokens : BLOCK_TOKENS;
  j->auto_first = p->first_chunk_tokens == 0 && seg == 0 && !(p->flags & COSY_SYNTH_TEXT_STREAM);
  j->hop = sched_first_hop(P, n_first);
  /* the hops after the first: whole blocks, doubling from first_chunk_tokens rounded up to a block
   * (a first chunk shorter than a block is one extra chunk ahead of that schedule) */
  j->next_hop_base = (n_first + BLOCK_TOKENS - 1) / BLOCK_TOKENS * BLOCK_TOKENS;
  if (p->sample_rate != e->model->hp.sample_rate &&
      (st = cosy_resampler_create(e->model->hp.sample_rate, p->sample_rate, &j->rs)))
    goto done;
  j->samp = cosy_sampling_from_params(p);
  if ((st = cosy_sampling_check(&j->samp))) goto done;
  /* segment k of a long text draws from seed + k */
  uint64_t seed = p->seed ? p->seed + (uint64_t)seg
                          : (uint64_t)(cosy_now() * 1e9) ^ (uint64_t)(uintptr_t)r ^ (uint64_t)seg;
  cosy_rng_seed(&j->rng, seed);
done:
  free(text);
  free(tts);
  free(prompt);
  free(tts_ids);
  free(prompt_ids);
  if (st) {
    job_free(j);
    return st;
  }
  *out = j;
  return COSY_OK;
}

/* Reserve the job's backend states. COSY_ERR_GPU_NO_MEMORY: not now (the caller decides whether
 * to wait). */
static cosy_status job_reserve(cosy_engine *e, sjob *j) {
  const cosy_voice *v = j->v;
  cosy_flow_prompt fp = {v->speech_tokens, v->n_tokens, v->mel, v->spk};
  cosy_status st;
  if ((st = e->be->llm_open(e, j->max_pos, &j->seq))) return st;
  if ((st = e->be->flow_open(e, &fp, j->max_len, &j->fs))) goto fail;
  if ((st = e->be->voc_open(e, 2 * (j->max_len + LOOKAHEAD), &j->vs))) goto fail;
  return COSY_OK;
fail:
  if (j->fs) e->be->flow_close(e, j->fs);
  e->be->llm_close(e, j->seq);
  j->fs = j->seq = NULL;
  return st;
}

/* ---- the LLM thread ------------------------------------------------------------------------- */

/* the LLM part of j is over (done, failed or cancelled): release the sequence, tell the other
 * thread */
static void llm_release(cosy_engine *e, sjob *j, cosy_status st, const char *msg) {
  struct cosy_sched *s = e->sched;
  if (j->seq) e->be->llm_close(e, j->seq);
  j->seq = NULL;
  free(j->lm_input);
  j->lm_input = NULL;
  /* a long text: the next segment's LLM starts now, while this one's audio is still being made
   * (it is made before this job is marked released, so the request never looks finished) */
  sjob *jn = NULL;
  cosy_status nst = COSY_OK;
  char nmsg[512] = "";
  if (!st && j->seg_i + 1 < j->r->n_segs && !cancelled(j->r)) {
    cosy_err_clear();
    nst = job_prepare(e, j->r, j->seg_i + 1, &jn);
    if (nst) snprintf(nmsg, sizeof nmsg, "%s", cosy_last_error());
  }
  pthread_mutex_lock(&e->mu);
  if (nst) job_fail_locked(j, nst, nmsg);
  if (jn) {
    j->r->seg_alive++;
    sjob **pp = &s->seg_q;
    while (*pp) pp = &(*pp)->next;
    jn->next = NULL;
    *pp = jn;
  }
  if (st) job_fail_locked(j, st, msg);
  j->llm_done = 1;
  j->llm_released = 1;
  s->n_llm--;
  pthread_cond_broadcast(&s->cv_t2w);
  pthread_mutex_unlock(&e->mu);
}

/* A sampled token (token index n_hist). Returns 1 when the job's LLM part is over. */
static int take_token(cosy_engine *e, sjob *j, int32_t tok) {
  struct cosy_sched *s = e->sched;
  if (tok >= e->model->hp.speech_tokens) { /* a stop id: not emitted */
    if (j->bistream) ttrace(s, j->trace_id, "S");
    return 1;
  }
  if (j->bistream) {
    ttrace(s, j->trace_id, "O %d", (int)tok);
    /* upstream forces the fill token when the out tokens (fills included) reach next_fill: the
     * next forward feeds this token and its output is the fill token, not a sample */
    if (j->bs_phase == BS_DECODE && j->n_hist + 1 == j->next_fill) j->fill_step = 1;
  }
  j->hist[j->n_hist++] = tok;
  if (ref_silent_pass(&j->silent_run, tok)) {
    const int P = j->v->n_tokens;
    pthread_mutex_lock(&e->mu);
    if (P + j->n_tok + 1 <= j->cap_tok) {
      j->tokens[P + j->n_tok] = tok;
      j->n_tok++;
    }
    pthread_cond_broadcast(&s->cv_t2w);
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_lock(&j->r->mu);
    j->r->n_speech_tokens = j->tok_base + j->n_hist - j->n_fills;
    pthread_mutex_unlock(&j->r->mu);
  }
  j->tok = tok;
  return j->n_hist >= j->max_len;
}

static void next_req(sjob *j, cosy_next_req *nx) {
  nx->samp = &j->samp;
  /* text streaming: no stop id while text is interleaved (upstream decodes with ignore_eos until
   * its fill token), none masked in the final decode (upstream has no minimum there) */
  nx->ignore_eos = j->bistream ? j->bs_phase != BS_FINAL : j->n_hist < j->min_len;
  nx->hist = j->hist;
  nx->n_hist = j->n_hist;
  nx->rng = &j->rng;
}

/* Text streaming: the pending items become the job's next prefill (the last piece samples). */
static cosy_status bs_feed(cosy_engine *e, sjob *j) {
  struct cosy_sched *s = e->sched;
  float *emb = NULL;
  cosy_status st = e->be->llm_embed(e, j->pend, j->n_pend, &emb);
  if (st) return st;
  if (s->ttrace) {
    size_t cap = 16 + 12 * (size_t)j->n_pend, at = 0;
    char *line = (char *)cosy_malloc(cap);
    if (line) {
      at += (size_t)snprintf(line, cap, "F");
      for (int i = 0; i < j->n_pend; i++)
        at += (size_t)(j->pend[i] >= 0 ? snprintf(line + at, cap - at, " t%d", (int)j->pend[i])
                                       : snprintf(line + at, cap - at, " s%d", (int)(-1 - j->pend[i])));
      ttrace(s, j->trace_id, "%s", line);
      free(line);
    }
  }
  /* marks (cosy_request_text_marks): the units whose first text id is in this input get the
   * number of spoken tokens generated so far, the index of the first one that sees them */
  for (int i = 0; i < j->n_pend; i++) j->txt_fed += j->pend[i] >= 0;
  const int fed = j->txt_fed - j->n_prompt_txt;
  cosy_request *r = j->r;
  pthread_mutex_lock(&r->mu);
  while (r->tx_marked < r->tx_n_units && r->tx_units[r->tx_marked].tok0 < fed)
    r->tx_units[r->tx_marked++].speech = j->n_tok; /* n_tok: written by this thread only */
  pthread_mutex_unlock(&r->mu);
  free(j->lm_input);
  j->lm_input = emb;
  j->L = j->n_pend;
  j->fed = 0;
  j->decoding = 0;
  j->n_pend = 0;
  return COSY_OK;
}

/* Text streaming, upstream's inference_bistream one text token at a time: take the request's
 * next text id into the text cache; while prompt speech is left, every 5 cached text tokens go to
 * the input with the next 15 prompt speech tokens; once it is all in, a decode starts (the first
 * one at once, each later one, after a fill token, with the next 5 text tokens as its input); a
 * decode runs until the fill token (bs_take). Without text the job pauses; after the end of the
 * text the input is [the last fed token again (upstream re-feeds it), the text cache, task_id]
 * and the LLM decodes until its end token. Sets j->L > j->fed when there is something to feed. */
static cosy_status bs_advance(cosy_engine *e, sjob *j) {
  struct cosy_sched *s = e->sched;
  cosy_request *r = j->r;
  const int S = e->model->hp.speech_tokens, P = j->v->n_tokens;
  cosy_status st;
  for (;;) {
    int32_t id = 0;
    int have = 0, ended = 0;
    pthread_mutex_lock(&r->mu);
    if (j->tx_used < r->tx_n) {
      id = r->tx_ids[j->tx_used++];
      have = 1;
      r->n_text_tokens++;
    } else {
      ended = r->tx_ended;
    }
    pthread_mutex_unlock(&r->mu);
    if (!have) {
      if (!ended) return COSY_OK; /* wait for text */
      if (j->tx_used == 0)
        return cosy_err(COSY_ERR_TEXT, "nothing to say: the streamed text gave no tokens");
      ttrace(s, j->trace_id, "E");
      int32_t head[1] = {-1 - j->stale}, task = -1 - (S + 2);
      int32_t *items = NULL;
      int n = 0, cap = 0;
      if ((j->stale >= 0 && (st = items_push(&items, &n, &cap, head, 1))) ||
          (st = items_push(&items, &n, &cap, j->pend, j->n_pend)) ||
          (st = items_push(&items, &n, &cap, j->tcache, j->n_tc)) ||
          (st = items_push(&items, &n, &cap, &task, 1))) {
        free(items);
        return st;
      }
      free(j->pend);
      j->pend = items;
      j->n_pend = n;
      j->cap_pend = cap;
      j->n_tc = 0;
      j->stale = -1;
      j->bs_phase = BS_FINAL;
      return bs_feed(e, j);
    }
    ttrace(s, j->trace_id, "T %d", (int)id);
    if ((st = items_push(&j->tcache, &j->n_tc, &j->cap_tc, &id, 1))) return st;
    while (j->ps_at < P && j->n_tc >= MIX_TEXT) {
      int ns = P - j->ps_at < MIX_SPEECH ? P - j->ps_at : MIX_SPEECH;
      if ((st = items_push(&j->pend, &j->n_pend, &j->cap_pend, j->tcache, MIX_TEXT))) return st;
      for (int i = 0; i < ns; i++) {
        int32_t it = -1 - j->v->speech_tokens[j->ps_at + i];
        if ((st = items_push(&j->pend, &j->n_pend, &j->cap_pend, &it, 1))) return st;
      }
      j->ps_at += ns;
      memmove(j->tcache, j->tcache + MIX_TEXT, (size_t)(j->n_tc - MIX_TEXT) * sizeof *j->tcache);
      j->n_tc -= MIX_TEXT;
    }
    if (j->ps_at < P) continue;
    const int after_fill = j->n_hist > 0 && j->hist[j->n_hist - 1] == S + 3;
    if (after_fill || (j->n_hist == 0 && j->n_pend == 1)) {
      if (j->n_tc < MIX_TEXT) continue;
      if (after_fill) { /* the text is the whole input (the fill token is not fed) */
        j->n_pend = 0;
        j->stale = -1;
      }
      if ((st = items_push(&j->pend, &j->n_pend, &j->cap_pend, j->tcache, MIX_TEXT))) return st;
      memmove(j->tcache, j->tcache + MIX_TEXT, (size_t)(j->n_tc - MIX_TEXT) * sizeof *j->tcache);
      j->n_tc -= MIX_TEXT;
    }
    j->bs_phase = BS_DECODE;
    return bs_feed(e, j);
  }
}

/* Text streaming: the decode step that fed j->tok yielded the forced fill token (its sample is
 * not used): the decode pauses until the next 5 text tokens. Returns 1 when the LLM part is over. */
static int bs_fill(cosy_engine *e, sjob *j) {
  const int S = e->model->hp.speech_tokens;
  ttrace(e->sched, j->trace_id, "X");
  j->fill_step = 0;
  j->hist[j->n_hist++] = S + 3;
  j->n_fills++;
  j->next_fill = j->n_hist + MIX_SPEECH;
  j->stale = j->tok;
  j->decoding = 0;
  j->bs_phase = BS_ADVANCE;
  return j->n_hist >= j->max_len;
}

/* Admit queued requests while room is left (e->mu held; dropped around backend calls). */
static void admit(cosy_engine *e) {
  struct cosy_sched *s = e->sched;
  /* the next segments of running requests go first (their audio continues an utterance) */
  while (s->seg_q &&
         (e->stopping || e->lost || cancelled(s->seg_q->r) || s->n_llm < e->cfg.max_active)) {
    sjob *j = s->seg_q;
    cosy_status st = COSY_OK;
    if (e->lost && !e->stopping && !cancelled(j->r)) {
      char msg[512];
      snprintf(msg, sizeof msg, "the GPU failed; the engine must be destroyed: %.440s", e->lost_msg);
      job_fail_locked(j, COSY_ERR_DEVICE_LOST, msg);
      st = COSY_ERR_DEVICE_LOST;
    } else if (!e->stopping && !cancelled(j->r)) {
      pthread_mutex_unlock(&e->mu);
      cosy_err_clear();
      st = job_reserve(e, j);
      if (st == COSY_ERR_DEVICE_LOST) note_status(e, st, cosy_last_error());
      char msg[512];
      snprintf(msg, sizeof msg, "%s", st ? cosy_last_error() : "");
      pthread_mutex_lock(&e->mu);
      if (st == COSY_ERR_GPU_NO_MEMORY && s->active) return; /* wait for memory */
      if (st) job_fail_locked(j, st, msg);
    }
    s->seg_q = j->next;
    j->next = s->active;
    s->active = j;
    e->n_active++;
    if (st || e->stopping || cancelled(j->r)) { /* the token-to-wave thread reaps it */
      j->llm_done = j->llm_released = 1;
      pthread_cond_broadcast(&s->cv_t2w);
    } else {
      s->n_llm++;
    }
  }
  while (s->q_head && (e->stopping || e->lost || cancelled(s->q_head) ||
                       (s->n_llm < e->cfg.max_active && (!s->max_streams || e->n_active < s->max_streams)))) {
    cosy_request *r = s->q_head;
    if (cancelled(r) || e->stopping || e->lost) {
      s->q_head = r->next;
      if (!s->q_head) s->q_tail = NULL;
      e->n_queued--;
      const int stopping = e->stopping; /* read under e->mu */
      const int lost = e->lost && !cancelled(r) && !stopping;
      char msg[512];
      snprintf(msg, sizeof msg, "%s%.400s",
               lost ? "the GPU failed before the request started; the engine must be destroyed: "
                    : stopping ? "the engine was destroyed" : "request cancelled before it started",
               lost ? e->lost_msg : "");
      pthread_mutex_unlock(&e->mu);
      if (r->job) job_free(r->job);
      r->job = NULL;
      request_finish(r, lost ? COSY_ERR_DEVICE_LOST : COSY_ERR_CANCELLED, msg);
      pthread_mutex_lock(&e->mu);
      continue;
    }
    pthread_mutex_unlock(&e->mu);
    cosy_status st = COSY_OK;
    sjob *j = r->job;
    if (r->prep_st) { /* its text failed on the caller's thread (sched_submit) */
      st = cosy_err(r->prep_st, "%s", r->prep_msg ? r->prep_msg : cosy_status_str(r->prep_st));
    } else if (!j) { /* a text-streamed request: its job starts with no text */
      cosy_err_clear();
      st = job_prepare(e, r, 0, &j);
      if (!st) r->job = j;
    }
    int idle = 0;
    if (!st) {
      st = job_reserve(e, j);
      if (st == COSY_ERR_DEVICE_LOST) note_status(e, st, cosy_last_error());
      if (st == COSY_ERR_GPU_NO_MEMORY) {
        pthread_mutex_lock(&e->mu);
        idle = s->active == NULL;
        pthread_mutex_unlock(&e->mu);
        if (!idle) { /* wait for memory to come back */
          pthread_mutex_lock(&e->mu);
          return;
        }
      }
    }
    pthread_mutex_lock(&e->mu);
    s->q_head = r->next;
    if (!s->q_head) s->q_tail = NULL;
    e->n_queued--;
    r->next = NULL;
    if (st) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s%s", idle ? "the engine cannot hold this request even when idle: " : "",
               cosy_last_error());
      r->job = NULL;
      pthread_mutex_unlock(&e->mu);
      job_free(j);
      request_finish(r, st, msg);
      pthread_mutex_lock(&e->mu);
      continue;
    }
    /* auto first chunk: shorter than a block at light load: at most first_chunk_wait_max
     * requests active and queued (this one included) at every admission of the last
     * LOAD_WINDOW_S seconds, so neither a burst beyond the limit nor the dip between two waves of
     * a busy engine gets it (its second chunk must follow within the short chunk's audio) */
    {
      const int load = e->n_active + 1 + e->n_queued;
      const double now = cosy_now();
      if (load >= s->load_peak || now - s->load_peak_t > LOAD_WINDOW_S) {
        s->load_peak = load;
        s->load_peak_t = now;
      }
      if (j->auto_first && e->cfg.first_chunk_wait_max > 0 &&
          s->load_peak <= e->cfg.first_chunk_wait_max)
        j->hop = sched_first_hop(j->v->n_tokens, AUTO_SHORT_FIRST);
    }
    j->next = s->active;
    s->active = j;
    s->n_llm++;
    e->n_active++;
    r->seg_alive = 1;
    pthread_mutex_lock(&r->mu);
    r->state = REQ_RUNNING;
    pthread_mutex_unlock(&r->mu);
  }
}

/* first thing on each scheduler thread: the backend's per-thread setup, the CPU threads */
static void thread_enter(cosy_engine *e) {
  if (e->be->thread_enter) e->be->thread_enter(e);
#ifdef _OPENMP
  if (e->cfg.cpu_threads > 0) omp_set_num_threads(e->cfg.cpu_threads);
#endif
}

/* the job's next chunk already has its tokens (e->mu held) */
static int chunk_tokens_ready(const sjob *j) {
  return !j->collect_only && j->n_tok - j->offset >= j->hop + LOOKAHEAD;
}

/* the job's next chunk is its request's first audio (not a later segment's first chunk) */
static int request_first(const sjob *j) { return j->chunks_done == 0 && j->seg_i == 0; }

/* the request's first chunk is still to come from this job (its first segment, streamed, not
 * failed, finished or cancelled; e->mu held) */
static int first_open(const sjob *j) {
  return request_first(j) && !j->collect_only && !j->err && !j->final_done && !cancelled(j->r);
}

/* Pausing the LLM now could make a request's audio run out (e->mu held): a request with audio
 * out whose next chunk still lacks tokens has less audio left than those tokens' decode steps
 * (at the recent step time) plus PAUSE_GUARD_ROUNDS token-to-wave rounds (the pause itself, the
 * round the chunk may wait for, its own round). On an H100 at W1 C = 64 the unconditional pause
 * made the second chunk of a burst's short first chunks (0.36 s of audio) late by ~15 ms in one
 * run of four (bench/RESULTS.md). */
#define PAUSE_GUARD_ROUNDS 3.0
static int pause_risks_underrun(const struct cosy_sched *s, double now) {
  for (const sjob *j = s->active; j; j = j->next) {
    const int missing = j->offset + j->hop + LOOKAHEAD - j->n_tok; /* > 0: tokens not ready */
    if (j->chunks_done == 0 || j->llm_done || j->llm_released || j->err || j->collect_only ||
        cancelled(j->r) || missing <= 0)
      continue;
    if (j->audio_until - now < missing * s->step_s + PAUSE_GUARD_ROUNDS * s->round_s) return 1;
  }
  return 0;
}

/* The LLM yields to playback (e->mu held): with two or more requests, some request with audio
 * out has its next chunk ready (its tokens are there, or it is in the token-to-wave stage) and
 * less than YIELD_S of audio left, while no request waits for its first chunk's tokens and
 * pausing would not make another request's audio run out (pause_risks_underrun). A decode step
 * then only adds tokens that nobody needs yet, and its kernels share the device with the flow
 * and vocoder calls that the audio waits for. A request alone is never held back (its own later
 * tokens are all a pause would delay). Timing decides only when tokens are made, never which: no
 * request's audio changes. Measured on an H100 at W1 C = 64 with the batch-invariant LLM
 * (bench/RESULTS.md, 2026-11-28 (eighth)): without it the second chunks of a burst's short first
 * chunks (0.36 s of audio), which need ~300 ms of flow and vocoder, came late by 7-28 ms in
 * each of nine runs (1-8 requests); with 250 ms none in six (400 ms: none either, but C = 1 RTF
 * 0.030 against 0.028, as the request alone was still held back then). */
#define YIELD_POLL_MS 5
static int yield_to_playback(const struct cosy_sched *s, double now) {
  if (s->n_llm < 2) return 0;
  int urgent = 0;
  for (const sjob *j = s->active; j; j = j->next) {
    if (j->err || j->collect_only || j->final_done || cancelled(j->r)) continue;
    const int ready = j->busy || chunk_tokens_ready(j) || j->llm_done;
    if (request_first(j)) {
      if (!ready) return 0; /* first audio waits for tokens */
      continue;
    }
    if (j->chunks_done > 0 && ready && j->audio_until - now < YIELD_S) urgent = 1;
  }
  return urgent && !pause_risks_underrun(s, now);
}

static void *llm_main(void *arg) {
  cosy_engine *e = (cosy_engine *)arg;
  struct cosy_sched *s = e->sched;
  thread_enter(e);
  int cap = 0;
  sjob **jobs = NULL;
  cosy_llm_row *rows = NULL;
  cosy_prefill_row *prows = NULL;
  cosy_next_req *pnx = NULL;
  sjob **pjobs = NULL;
  int *pidx = NULL;
  pthread_mutex_lock(&e->mu);
  for (;;) {
    const double ta = cosy_now();
    admit(e);
    if (s->trace && cosy_now() - ta > 3e-4) trace(s, "admit", s->n_llm, 0, 0, cosy_now() - ta);
    if (e->stopping && !s->q_head && !s->seg_q && s->n_llm == 0) break;
    if (s->n_llm == 0) {
      if (s->seg_q) { /* a segment waits for memory held by the other thread's jobs */
        timed_wait(&s->cv_llm, &e->mu, IDLE_POLL_MS);
        continue;
      }
      if (e->stopping) continue; /* admit() drains the queue as cancelled */
      pthread_cond_wait(&s->cv_llm, &e->mu);
      continue;
    }
    /* time to first audio first: at light load the LLM pauses while a first chunk's flow runs,
     * so the two do not compete for the device; not for a request alone, whose own later tokens
     * are all the pause would hold back (on an H100 it moved W1's C = 1 first audio 32 -> 37 ms
     * and RTF 0.0305 -> 0.0285 with the batch-invariant LLM; bench/RESULTS.md) */
    const int pause_max =
        e->knobs.first_pause >= 0 ? e->knobs.first_pause : e->cfg.first_chunk_wait_max;
    if (s->first_in_flight && pause_max > 0 && s->n_llm >= 2 && s->n_llm <= pause_max &&
        !e->stopping &&
        !pause_risks_underrun(s, cosy_now())) {
      const double tp = cosy_now();
      timed_wait(&s->cv_llm, &e->mu, IDLE_POLL_MS);
      trace(s, "pause", s->n_llm, 0, 0, cosy_now() - tp); /* the first-chunk pause */
      continue;
    }
    if (!e->stopping && yield_to_playback(s, cosy_now())) {
      const double ty = cosy_now();
      timed_wait(&s->cv_llm, &e->mu, YIELD_POLL_MS);
      trace(s, "yield", s->n_llm, 0, 0, cosy_now() - ty); /* the LLM's yield and its wait */
      continue;
    }
    /* snapshot of the jobs this thread owns */
    int n = 0;
    for (sjob *j = s->active; j; j = j->next)
      if (!j->llm_released) n++;
    if (n > cap) {
      int nc = n * 2;
      sjob **nj = (sjob **)cosy_realloc(jobs, (size_t)nc * sizeof *nj);
      if (nj) jobs = nj;
      cosy_llm_row *nr = (cosy_llm_row *)cosy_realloc(rows, (size_t)nc * sizeof *nr);
      if (nr) rows = nr;
      cosy_prefill_row *np_ = (cosy_prefill_row *)cosy_realloc(prows, (size_t)nc * sizeof *np_);
      if (np_) prows = np_;
      cosy_next_req *nn = (cosy_next_req *)cosy_realloc(pnx, (size_t)nc * sizeof *nn);
      if (nn) pnx = nn;
      sjob **pj = (sjob **)cosy_realloc(pjobs, (size_t)nc * sizeof *pj);
      if (pj) pjobs = pj;
      int *pi = (int *)cosy_realloc(pidx, (size_t)nc * sizeof *pi);
      if (pi) pidx = pi;
      if (!nj || !nr || !np_ || !nn || !pj || !pi) { /* cannot even plan a step: fail everything this thread owns */
        for (sjob *j = s->active; j; j = j->next)
          if (!j->llm_released) job_fail_locked(j, COSY_ERR_NO_MEMORY, "out of memory planning a step");
        n = 0;
      } else {
        cap = nc;
      }
    }
    int k = 0;
    for (sjob *j = s->active; j && k < cap; j = j->next)
      if (!j->llm_released) jobs[k++] = j;
    n = k;
    const int64_t seen = s->wake_seq;
    pthread_mutex_unlock(&e->mu);

    /* failures and cancellations release their sequences */
    const double tk = cosy_now();
    int nd = 0;
    for (int i = 0; i < n; i++) {
      sjob *j = jobs[i];
      int failed;
      pthread_mutex_lock(&e->mu);
      failed = j->err != COSY_OK || e->stopping || e->lost; /* under e->mu (make test-tsan) */
      pthread_mutex_unlock(&e->mu);
      if (failed || cancelled(j->r))
        llm_release(e, j, COSY_ERR_CANCELLED, "request cancelled");
      else
        jobs[nd++] = j;
    }
    n = nd;
    if (s->trace && cosy_now() - tk > 3e-4) trace(s, "check", n, 0, 0, cosy_now() - tk);
    /* text streaming: jobs with nothing in flight take the text that arrived (bs_advance) */
    nd = 0;
    for (int i = 0; i < n; i++) {
      sjob *j = jobs[i];
      if (j->bistream && !j->decoding && j->fed == j->L && j->bs_phase != BS_FINAL) {
        cosy_err_clear();
        cosy_status st = bs_advance(e, j);
        if (st) {
          llm_release(e, j, st, cosy_last_error());
          continue;
        }
      }
      jobs[nd++] = j;
    }
    n = nd;
    /* prefill pieces, packed into one backend call: at most PREFILL_BUDGET positions while
     * other sequences decode (their next token waits for the call), PREFILL_BUDGET_IDLE when
     * none does */
    int budget = PREFILL_BUDGET_IDLE;
    for (int i = 0; i < n; i++)
      if (jobs[i]->decoding) budget = PREFILL_BUDGET;
    int np = 0;
    for (int i = 0; i < n && budget > 0 && np < cap; i++) {
      sjob *j = jobs[i];
      if (j->decoding || j->fed == j->L) continue; /* (a text-streamed job waiting for text) */
      int piece = j->L - j->fed;
      if (piece > PREFILL_PIECE) piece = PREFILL_PIECE;
      if (piece > budget) piece = budget;
      budget -= piece;
      cosy_prefill_row *pr = &prows[np];
      memset(pr, 0, sizeof *pr);
      pr->seq = j->seq;
      pr->emb = j->lm_input + (size_t)j->fed * e->model->hp.llm_hidden;
      pr->L = piece;
      if (j->fed + piece == j->L) {
        next_req(j, &pnx[np]);
        pr->nx = &pnx[np];
      }
      pidx[np] = i;
      pjobs[np++] = j;
    }
    if (np > 0) {
      double t0 = cosy_now();
      cosy_status st = e->be->llm_prefill(e, prows, np);
      double dt = cosy_now() - t0;
      char msg[512];
      snprintf(msg, sizeof msg, "%s", st ? cosy_last_error() : "");
      note_status(e, st, msg);
      int tot = 0;
      for (int i = 0; i < np; i++) tot += prows[i].L;
      trace(s, "prefill", np, tot, 0, dt);
      for (int i = 0; i < np; i++) {
        sjob *j = pjobs[i];
        add_time(j->r, &j->r->llm_s, dt);
        /* a released job may be reaped and freed by the token-to-wave thread at once: it leaves
         * the snapshot (the decode step below must not read it) */
        if (st) {
          llm_release(e, j, st, msg);
          jobs[pidx[i]] = NULL;
          continue;
        }
        if (prows[i].status) {
          llm_release(e, j, prows[i].status, "sampling the first token failed (NaN or no finite log-probability)");
          jobs[pidx[i]] = NULL;
          continue;
        }
        j->fed += prows[i].L;
        if (prows[i].nx) {
          j->decoding = 1;
          if (take_token(e, j, prows[i].next)) {
            llm_release(e, j, COSY_OK, NULL);
            jobs[pidx[i]] = NULL;
          }
        }
      }
    }
    /* one decode step over every sequence with a token to feed */
    int nr = 0;
    for (int i = 0; i < n; i++) {
      sjob *j = jobs[i];
      if (!j || !j->decoding || j->llm_released) continue;
      /* a job whose prefill just finished has its first token: it joins this step */
      rows[nr].seq = j->seq;
      rows[nr].token = j->tok;
      if (j->bistream) ttrace(s, j->trace_id, "F s%d", (int)j->tok);
      next_req(j, &rows[nr].nx);
      rows[nr].next = -1;
      rows[nr].status = COSY_OK;
      jobs[nr++] = j;
    }
    if (nr > 0) {
      double t0 = cosy_now();
      cosy_status st = e->be->llm_step(e, rows, nr);
      double dt = cosy_now() - t0;
      char msg[512];
      snprintf(msg, sizeof msg, "%s", st ? cosy_last_error() : "");
      note_status(e, st, msg);
      /* counters read by sched_stats on a caller's thread: atomic (TSan) */
      trace(s, "step", nr, 0, 0, dt);
      s->step_s = s->step_s > 0 ? 0.8 * s->step_s + 0.2 * dt : dt;
      __atomic_add_fetch(&s->steps, 1, __ATOMIC_RELAXED);
      __atomic_add_fetch(&s->step_rows, nr, __ATOMIC_RELAXED);
      const double tt = cosy_now();
      for (int i = 0; i < nr; i++) {
        sjob *j = jobs[i];
        add_time(j->r, &j->r->llm_s, dt);
        if (st) {
          llm_release(e, j, st, msg);
        } else if (rows[i].status) {
          llm_release(e, j, rows[i].status, "sampling failed (NaN or no finite log-probability)");
        } else if (j->fill_step) {
          if (bs_fill(e, j)) llm_release(e, j, COSY_OK, NULL);
        } else if (take_token(e, j, rows[i].next)) {
          llm_release(e, j, COSY_OK, NULL);
        }
      }
      if (s->trace && cosy_now() - tt > 3e-4) trace(s, "tokens", nr, 0, 0, cosy_now() - tt);
    }
    const double tl = cosy_now();
    pthread_mutex_lock(&e->mu);
    if (s->trace && cosy_now() - tl > 3e-4) trace(s, "lock", 0, 0, 0, cosy_now() - tl);
    /* nothing ran (every job waits for text): sleep until text, a request or a
     * delivered chunk arrives */
    if (np == 0 && nr == 0 && s->wake_seq == seen && !e->stopping)
      timed_wait(&s->cv_llm, &e->mu, IDLE_POLL_MS);
  }
  s->llm_exited = 1;
  pthread_cond_broadcast(&s->cv_t2w);
  pthread_mutex_unlock(&e->mu);
  free(jobs);
  free(rows);
  free(prows);
  free(pnx);
  free(pjobs);
  free(pidx);
  return NULL;
}

/* ---- the token-to-wave thread --------------------------------------------------------------- */

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

/* mel frames a flow call of the job computes (about: the backend may reuse earlier blocks).
 * A first chunk of a voice seen before skips the prompt-only blocks (flow_prompt_only_blocks),
 * which the GPU flow keeps per voice; counting them would cap a batch of first chunks at a third
 * of what it computes. */
static int job_frames(const struct cosy_sched *s, const sjob *j, int kind) {
  const int P = j->v->n_tokens;
  if (kind == 2 && (j->collect_only || j->full_final)) return 2 * (P + j->n_tok);
  if (j->chunks_done == 0) {
    const int f = 2 * (P + (kind == 1 ? j->hop + LOOKAHEAD : j->n_tok)), block = 2 * BLOCK_TOKENS;
    return voice_warm(s, j->v) ? f - block * flow_prompt_only_blocks(P, 2, LOOKAHEAD, block) : f;
  }
  return 2 * ((kind == 1 ? j->hop + LOOKAHEAD : j->n_tok - j->offset)) + 50;
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
    job_free(j);
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
    note_status(e, st, msg);
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
  note_status(e, vst, bmsg);
  for (int i = 0; i < n && !vst; i++)
    if (vj[i].status == COSY_ERR_DEVICE_LOST) note_status(e, vj[i].status, "vocoder call failed");
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
    /* the device was lost meanwhile (by the other thread): no more audio (note_status failed
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
static void *voc_main(void *arg) {
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
    pthread_mutex_unlock(&e->mu);
    voc_batch(e, pick, n);
    pthread_mutex_lock(&e->mu);
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

static void *t2w_main(void *arg) {
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
    int n = 0;
    const double now = cosy_now();
    for (sjob *j = s->active; j; j = j->next) {
      if (cancelled(j->r)) continue;
      int k = chunk_ready(j);
      if (k) rank_insert(rk, &n, (ranked){deadline(s, j, sr, now), j, k});
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
    /* the most urgent ready chunk has more than DEFER_SLACK_S of audio ahead (first chunks and urgent
     * ones rank far below any real time) while a new request awaits its first tokens: wait */
    if (rk[0].deadline > now + DEFER_SLACK_S && !e->stopping &&
        llm_first_wanted(s)) {
      timed_wait(&s->cv_t2w, &e->mu, DEFER_POLL_MS);
      continue;
    }
    /* a batch of at most FLOW_BATCH_FRAMES new frames (the first job always goes),
     * so a first chunk that arrives while a batch runs waits for a short one; a batch that starts
     * with first chunks holds nothing else: later chunks that are not urgent (those
     * rank before the first chunks) would only make the first audio wait for their frames (on an
     * H100 at W1 C = 64 a wave's first chunks went with 15 later ones in a 64 ms call instead of
     * ~30; over ten runs each, p95 251-303 ms with no underrun against 251-336 with one run
     * late, bench/RESULTS.md) */
    int frames = 0;
    {
      int keep = 0;
      for (; keep < n; keep++) {
        const int f = job_frames(s, pick[keep], kind[keep]);
        if (keep > 0 && frames + f > FLOW_BATCH_FRAMES) break;
        if (keep > 0 && request_first(pick[0]) && !request_first(pick[keep]))
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
    note_status(e, st, bmsg);
    for (int i = 0; i < n && !st; i++)
      if (fj[i].status == COSY_ERR_DEVICE_LOST) note_status(e, fj[i].status, "flow call failed");
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
    if (s->voc_started) {
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
    s->round_s = 0.7 * s->round_s + 0.3 * (cosy_now() - t0);
  }
  s->t2w_exited = 1;
  pthread_cond_broadcast(&s->cv_voc);
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

cosy_status sched_start(cosy_engine *e) {
  struct cosy_sched *s = (struct cosy_sched *)cosy_calloc(1, sizeof *s);
  if (!s) return COSY_ERR_NO_MEMORY;
  s->e = e;
  s->t0 = cosy_now();
  pthread_mutex_init(&s->trace_mu, NULL);
  /* the knobs (lib/knobs.h), before the threads start */
  const cosy_knobs *kn = &e->knobs;
  if (kn->sched_trace[0]) s->trace = fopen(kn->sched_trace, "w");
  if (kn->text_trace[0]) s->ttrace = fopen(kn->text_trace, "w");
  s->max_streams = kn->max_streams;
  s->round_s = 0.1;
  pthread_cond_init(&s->cv_llm, NULL);
  pthread_cond_init(&s->cv_t2w, NULL);
  pthread_cond_init(&s->cv_voc, NULL);
  pthread_cond_init(&s->cv_call, NULL);
  e->sched = s;
  int rc = pthread_create(&s->llm_th, NULL, llm_main, e);
  if (rc) return cosy_err(COSY_ERR_INTERNAL, "cannot start the LLM thread: %s", strerror(rc));
  s->llm_started = 1;
  /* the vocoder thread before the token-to-wave thread, which reads voc_started */
  const int voc = kn->vocoder_thread >= 0 ? kn->vocoder_thread : e->be->vocoder_thread;
  if (voc) {
    rc = pthread_create(&s->voc_th, NULL, voc_main, e);
    if (rc) return cosy_err(COSY_ERR_INTERNAL, "cannot start the vocoder thread: %s", strerror(rc));
    s->voc_started = 1;
  }
  rc = pthread_create(&s->t2w_th, NULL, t2w_main, e);
  if (rc) return cosy_err(COSY_ERR_INTERNAL, "cannot start the token-to-wave thread: %s", strerror(rc));
  s->t2w_started = 1;
  return COSY_OK;
}

void sched_stop(cosy_engine *e) {
  struct cosy_sched *s = e->sched;
  if (!s) return;
  pthread_mutex_lock(&e->mu);
  e->stopping = 1;
  for (cosy_request *r = s->q_head; r; r = r->next) __atomic_store_n(&r->cancel, 1, __ATOMIC_SEQ_CST);
  for (sjob *j = s->active; j; j = j->next) __atomic_store_n(&j->r->cancel, 1, __ATOMIC_SEQ_CST);
  if (!s->llm_started) s->llm_exited = 1;
  if (!s->t2w_started) s->t2w_exited = 1;
  pthread_cond_broadcast(&s->cv_llm);
  pthread_cond_broadcast(&s->cv_t2w);
  pthread_cond_broadcast(&s->cv_voc);
  pthread_mutex_unlock(&e->mu);
  if (s->llm_started) pthread_join(s->llm_th, NULL);
  if (s->t2w_started) pthread_join(s->t2w_th, NULL);
  if (s->voc_started) pthread_join(s->voc_th, NULL);
  /* what never started (thread creation failed) */
  while (s->q_head) {
    cosy_request *r = s->q_head;
    s->q_head = r->next;
    if (r->job) job_free(r->job);
    r->job = NULL;
    request_finish(r, COSY_ERR_CANCELLED, "the engine was destroyed");
  }
  pthread_cond_destroy(&s->cv_llm);
  pthread_cond_destroy(&s->cv_t2w);
  pthread_cond_destroy(&s->cv_voc);
  if (s->trace) fclose(s->trace);
  if (s->ttrace) fclose(s->ttrace);
  pthread_mutex_destroy(&s->trace_mu);
  pthread_cond_destroy(&s->cv_call);
  free(s);
  e->sched = NULL;
}

/* Submission prepares the request's job on the caller's thread: text normalization, splitting
 * and tokenization (about 6 ms per 1,000 characters on one core, bench/bench_text.c) and the
 * LLM's input embeddings, so a burst of requests is prepared by its callers in parallel instead
 * of one after the other on the LLM thread, where every request's preparation also held back
 * every running decode step (at W1 C = 64 on an H100 the LLM thread spent ~41 ms preparing the
 * burst before its first prefill; bench/RESULTS.md). A text that fails here still comes back as
 * the request's status (admit finishes it), as before. Text-streamed requests start with no text
 * and are prepared at admission (cheap). */
cosy_status sched_submit(cosy_engine *e, cosy_request *r) {
  struct cosy_sched *s = e->sched;
  if (!r->text_stream) {
    /* cosy_last_error describes the caller's last failing call: a preparation failure belongs
     * to the request (it is its status), so the thread's message is kept as it was */
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", cosy_last_error());
    sjob *j = NULL;
    cosy_err_clear();
    cosy_status st = job_prepare(e, r, 0, &j);
    if (st && r->prep_limit) return st; /* a limit: refused at once, with its message */
    if (st) {
      r->prep_st = st;
      r->prep_msg = cosy_strdup(cosy_last_error());
    }
    r->job = j;
    if (saved[0])
      cosy_err(COSY_OK, "%s", saved);
    else
      cosy_err_clear();
  }
  pthread_mutex_lock(&e->mu);
  if (e->stopping || e->lost) {
    const int stopping = e->stopping;
    pthread_mutex_unlock(&e->mu);
    if (r->job) job_free(r->job);
    r->job = NULL;
    return stopping ? cosy_err(COSY_ERR_INVALID_ARG, "the engine is being destroyed")
                    : engine_check_lost(e);
  }
  /* the queue holds requests the LLM thread has not admitted yet; those that will take a free
   * active slot at its next admission are not waiting, so they do not count against max_queued
   * (otherwise a request submitted right after another into an idle engine could be refused,
   * depending on whether the LLM thread had admitted the first yet) */
  int free_slots = e->cfg.max_active - s->n_llm;
  for (const sjob *j = s->seg_q; j && free_slots > 0; j = j->next) free_slots--;
  if (free_slots < 0) free_slots = 0;
  if (e->n_queued - free_slots >= e->cfg.max_queued) {
    int q = e->n_queued;
    pthread_mutex_unlock(&e->mu);
    if (r->job) job_free(r->job);
    r->job = NULL;
    return cosy_err(COSY_ERR_QUEUE_FULL,
                    "%d requests are already queued (max_queued %d beyond %d free active slots)",
                    q, e->cfg.max_queued, free_slots);
  }
  r->next = NULL;
  if (s->q_tail) s->q_tail->next = r;
  else s->q_head = r;
  s->q_tail = r;
  e->n_queued++;
  s->wake_seq++;
  pthread_cond_broadcast(&s->cv_llm);
  pthread_mutex_unlock(&e->mu);
  return COSY_OK;
}

void sched_wake_llm(cosy_engine *e) {
  struct cosy_sched *s = e->sched;
  if (!s) return;
  pthread_mutex_lock(&e->mu);
  s->wake_seq++;
  pthread_cond_broadcast(&s->cv_llm);
  pthread_mutex_unlock(&e->mu);
}

void sched_stats(const cosy_engine *e, cosy_engine_stats *st) {
  const struct cosy_sched *s = e->sched;
  if (!s) return;
  /* the scheduler's threads count without e->mu (atomic adds): atomic loads here */
  st->llm_steps = __atomic_load_n(&s->steps, __ATOMIC_RELAXED);
  st->llm_step_rows = __atomic_load_n(&s->step_rows, __ATOMIC_RELAXED);
  st->flow_calls = __atomic_load_n(&s->flow_calls, __ATOMIC_RELAXED);
  st->flow_jobs = __atomic_load_n(&s->flow_jobs, __ATOMIC_RELAXED);
  st->vocoder_calls = __atomic_load_n(&s->voc_calls, __ATOMIC_RELAXED);
  st->vocoder_jobs = __atomic_load_n(&s->voc_jobs, __ATOMIC_RELAXED);
}
