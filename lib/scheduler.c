/* scheduler.c - how requests move through the engine: one place that owns the compute and
 * batches every stage across requests.
 *
 *   cosy_request_submit ─► queue ─(admission)─► active ─► LLM thread ─► tokens ─► token-to-wave
 *                                                        (batched     (per         thread
 *                                                         decode      request)    (batched flow,
 *                                                         steps)                   batched vocoder,
 *                                                                                  delivery)
 *
 * LLM thread (sched_llm_main), one iteration:
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
 * Token-to-wave thread (sched_t2w_main), one iteration:
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
 * COSY_SCHED_VOCODER_THREAD=1, this runs on a vocoder thread (sched_voc_main) fed by a queue, so one
 * batch's vocoder overlaps the next batch's flow; with 2 (the GPU backend's default) only the
 * batches of later chunks that the batch caps cut short go there, and the token-to-wave thread
 * runs the others right after its flow call once the vocoder thread is idle; with 0 (the CPU's)
 * the token-to-wave thread runs every one. A job is busy from its flow call until its vocoder
 * call is over, so a request's chunks stay in order.
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
 * in struct sjob, lib/sched_internal.h). Only the token-to-wave thread removes jobs from the
 * active list, and only after the LLM thread has released them (llm_released), so each thread can
 * work on its own snapshot of jobs without holding the lock during compute. Push callbacks run on
 * the thread that vocodes.
 *
 * The files (each names only the ones below it, so they call each other in no circle;
 * docs/architecture.md):
 *   lib/scheduler.c      this overview and the lifecycle: sched_start (starts the threads),
 *                        sched_stop, sched_submit (prepares a request on the caller's thread and
 *                        queues it), sched_stats (all called by lib/engine.c), sched_wake_llm
 *                        (lib/textstream.c)
 *   lib/sched_llm.c      the LLM thread (sched_llm_main): admission, prefill and decode steps, the
 *                        pause and yield rules, text streaming's input schedule
 *   lib/sched_t2w.c      the token-to-wave thread (sched_t2w_main): chunk selection, flow batches,
 *                        reaping; the vocoder stage (voc_batch, the vocoder thread sched_voc_main);
 *                        sched_run_on_t2w
 *   lib/sched_jobs.c     what both threads and submission use: a job's preparation (text,
 *                        tokens, LLM input, the per-utterance ceiling: sched_utt_check),
 *                        reservation and freeing, and a lost device (engine_check_lost)
 *   lib/sched_internal.h the job (sjob) and the scheduler's state (struct cosy_sched), the shared
 *                        constants and small helpers (static inline), the sched_ functions above
 *                        (internal: hidden, not exported from libcosyvoice.so) */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_internal.h"

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
  s->flow_frames = kn->flow_frames;
  s->flow_gate = kn->flow_gate >= 0 ? kn->flow_gate : 1; /* the page gate: lib/sched_t2w.c */
  s->round_s = 0.1;
  pthread_cond_init(&s->cv_llm, NULL);
  pthread_cond_init(&s->cv_t2w, NULL);
  pthread_cond_init(&s->cv_voc, NULL);
  pthread_cond_init(&s->cv_call, NULL);
  e->sched = s;
  int rc = pthread_create(&s->llm_th, NULL, sched_llm_main, e);
  if (rc) return cosy_err(COSY_ERR_INTERNAL, "cannot start the LLM thread: %s", strerror(rc));
  s->llm_started = 1;
  /* the vocoder thread before the token-to-wave thread, which reads voc_started */
  const int voc = kn->vocoder_thread >= 0 ? kn->vocoder_thread : e->be->vocoder_thread;
  s->voc_mode = voc;
  if (voc) {
    rc = pthread_create(&s->voc_th, NULL, sched_voc_main, e);
    if (rc) return cosy_err(COSY_ERR_INTERNAL, "cannot start the vocoder thread: %s", strerror(rc));
    s->voc_started = 1;
  }
  rc = pthread_create(&s->t2w_th, NULL, sched_t2w_main, e);
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
    if (r->job) sched_job_free(r->job);
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
    cosy_status st = sched_job_prepare(e, r, 0, &j);
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
    if (r->job) sched_job_free(r->job);
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
    if (r->job) sched_job_free(r->job);
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
