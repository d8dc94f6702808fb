/* sched_llm.c - the scheduler's LLM thread (sched_llm_main; lib/scheduler.c describes the
 * scheduler): admission of queued requests and of long texts' next segments, prefill in pieces
 * and one batched decode step per iteration, the pause while a first chunk's flow runs (light
 * load) and the yield to playback, text streaming's input schedule (bs_advance, bs_feed, bs_fill), and the release
 * of a job's LLM part (llm_release), which hands it to the token-to-wave thread.
 *
 * Threads: everything here runs on the LLM thread; it holds e->mu while it plans an iteration and
 * drops it around backend calls and job preparation. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/llm.h" /* ref_silent_pass */
#include "sched_internal.h"

#define AUTO_SHORT_FIRST 5 /* first_chunk_tokens 0 at light load: the prompt's last block only */
#define LOAD_WINDOW_S 3.0  /* light load: no admission saw more than the limit for this long */

#define PREFILL_PIECE 1024       /* positions of one sequence per iteration at most */
#define PREFILL_BUDGET 1024      /* positions per iteration while sequences decode (~4 ms on an H100) */
#define PREFILL_BUDGET_IDLE 2048 /* ... and while none does */

#define YIELD_S 0.25 /* the LLM yields to playback while a ready chunk's audio runs out within
                        this (yield_to_playback) */

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
    nst = sched_job_prepare(e, j->r, j->seg_i + 1, &jn);
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
      if ((j->stale >= 0 && (st = sched_items_push(&items, &n, &cap, head, 1))) ||
          (st = sched_items_push(&items, &n, &cap, j->pend, j->n_pend)) ||
          (st = sched_items_push(&items, &n, &cap, j->tcache, j->n_tc)) ||
          (st = sched_items_push(&items, &n, &cap, &task, 1))) {
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
    if ((st = sched_items_push(&j->tcache, &j->n_tc, &j->cap_tc, &id, 1))) return st;
    while (j->ps_at < P && j->n_tc >= MIX_TEXT) {
      int ns = P - j->ps_at < MIX_SPEECH ? P - j->ps_at : MIX_SPEECH;
      if ((st = sched_items_push(&j->pend, &j->n_pend, &j->cap_pend, j->tcache, MIX_TEXT))) return st;
      for (int i = 0; i < ns; i++) {
        int32_t it = -1 - j->v->speech_tokens[j->ps_at + i];
        if ((st = sched_items_push(&j->pend, &j->n_pend, &j->cap_pend, &it, 1))) return st;
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
      if ((st = sched_items_push(&j->pend, &j->n_pend, &j->cap_pend, j->tcache, MIX_TEXT))) return st;
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
      st = sched_job_reserve(e, j);
      if (st == COSY_ERR_DEVICE_LOST) sched_note_status(e, st, cosy_last_error());
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
      if (r->job) sched_job_free(r->job);
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
      st = sched_job_prepare(e, r, 0, &j);
      if (!st) r->job = j;
    }
    int idle = 0;
    if (!st) {
      st = sched_job_reserve(e, j);
      if (st == COSY_ERR_DEVICE_LOST) sched_note_status(e, st, cosy_last_error());
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
      sched_job_free(j);
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

/* The scheduler trace's line for a part of the LLM thread's iteration that began at t0 (admission,
 * the failure check, the token hand-over, the wait for the engine lock), when it took over
 * 0.3 ms: where the thread stands idle between steps. */
static void trace_part(struct cosy_sched *s, const char *what, int rows, double t0) {
  if (!s->trace) return;
  const double dt = cosy_now() - t0;
  if (dt > 3e-4) trace(s, what, rows, 0, 0, dt);
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

/* The LLM yields to playback (e->mu held; only with the knob COSY_SCHED_YIELD=1, off by default
 * since 2026-12-01): with two or more requests, some request with audio out has its next chunk
 * ready (its tokens are there, or it is in the token-to-wave stage) and less than YIELD_S of audio
 * left, while no request waits for its first chunk's tokens and pausing would not make another
 * request's audio run out (pause_risks_underrun). The idea: a decode step then only adds tokens
 * that nobody needs yet, and its kernels share the device with the flow and vocoder calls that
 * the audio waits for. A request alone is never held back. Timing decides only when tokens are
 * made, never which: no request's audio changes either way. On an H100 with the kernels of
 * 2026-11-28 (bench/HISTORY.md, eighth session) it removed late second chunks at W1 C = 64 (7-28
 * ms late in each of nine runs without it, none in six with it). On an H200 with the kernels of
 * 2026-12-01 it costs throughput and buys nothing (bench/RESULTS.md, W1): the requests of a
 * burst, prefilled in groups, are a token or a few apart, and while one group's urgent chunk is
 * in the flow the yield holds back the step that would make the next group's chunk, so the flow
 * takes the groups one at a time (8 jobs a call, ~24 ms apart, idle between); fresh C = 64 runs
 * 325.8-355.3x with it, 364.1-370.6x without, no underrun either way, W3 400 users alike. */
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

void *sched_llm_main(void *arg) {
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
    trace_part(s, "admit", s->n_llm, ta);
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
     * so the two do not compete for the device; for a request alone too (its own later tokens are
     * all the pause holds back: on an H200 W1's C = 1 first audio 33.5 -> 29.3 ms, RTF 0.0266 ->
     * 0.0283; bench/RESULTS.md) */
    const int pause_max =
        e->knobs.first_pause >= 0 ? e->knobs.first_pause : e->cfg.first_chunk_wait_max;
    if (s->first_in_flight && pause_max > 0 && s->n_llm <= pause_max &&
        (s->n_llm <= SCHED_PAUSE_TRICKLE || sched_wave(e, s)) && !e->stopping &&
        !pause_risks_underrun(s, cosy_now())) {
      const double tp = cosy_now();
      timed_wait(&s->cv_llm, &e->mu, IDLE_POLL_MS);
      trace(s, "pause", s->n_llm, 0, 0, cosy_now() - tp); /* the first-chunk pause */
      continue;
    }
    if (e->knobs.sched_yield && !e->stopping && yield_to_playback(s, cosy_now())) {
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
    trace_part(s, "check", n, tk);
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
      sched_note_status(e, st, msg);
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
      sched_note_status(e, st, msg);
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
      trace_part(s, "tokens", nr, tt);
    }
    const double tl = cosy_now();
    pthread_mutex_lock(&e->mu);
    trace_part(s, "lock", 0, tl);
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
