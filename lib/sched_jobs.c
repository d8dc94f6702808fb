/* sched_jobs.c - the scheduler's jobs (lib/scheduler.c describes the scheduler): everything
 * before the LLM (text normalization and segments, tokenization, the LLM input, lengths, the
 * chunk schedule's first hop, the generator, the resampler) in sched_job_prepare; the
 * per-utterance ceiling against the engine's capacity (sched_utt_check); the backend states
 * (sched_job_reserve) and freeing a job (sched_job_free); a lost device (sched_note_status,
 * engine_check_lost).
 *
 * Threads: sched_job_prepare runs on the submitting caller's thread (sched_submit) or on the LLM
 * thread (a text-streamed request at admission, a long text's next segment); sched_job_reserve
 * on the LLM thread (admission); sched_note_status on whichever thread a backend call failed. A
 * job being prepared is not yet shared, so none of this holds e->mu but where it says so. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_internal.h"
#include "text/normalize.h"
#include "tokenizer.h"

#define SYSTEM_PREFIX COSY_SYSTEM_PREFIX
#define EOP COSY_EOP

/* ---- a lost device ---------------------------------------------------------------------------- */

/* A backend call ended with a sticky CUDA error (COSY_ERR_DEVICE_LOST: illegal address, launch
 * failure, ECC, ...): the CUDA context is unusable, so the engine is lost. Every request not yet
 * finished fails with COSY_ERR_DEVICE_LOST (queued ones at the LLM thread's next admission),
 * nothing more is sent to the device, and every later call on the engine (submit, synthesize,
 * voices, stats) returns COSY_ERR_DEVICE_LOST; cosy_engine_destroy still works. A non-sticky
 * failure (COSY_ERR_CUDA, COSY_ERR_GPU_NO_MEMORY) fails only the requests of the batched call
 * that failed; the engine goes on serving. Other statuses are ignored here. */
void sched_note_status(cosy_engine *e, cosy_status st, const char *msg) {
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

void sched_job_free(sjob *j) {
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

cosy_status sched_items_push(int32_t **a, int *n, int *cap, const int32_t *add, int na) {
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
  if (!(st = sched_items_push(&j->pend, &j->n_pend, &j->cap_pend, &sos, 1)) &&
      !(st = sched_items_push(&j->pend, &j->n_pend, &j->cap_pend, ids, eop + 1)))
    st = sched_items_push(&j->tcache, &j->n_tc, &j->cap_tc, ids + eop + 1, n - eop - 1);
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
 * later segment too: their text tokens counted as sched_job_prepare will count them (the same tts text
 * per mode), their LLM input as long as this one's but for the text. So a long text whose
 * segment k cannot be held (or has more text tokens than one LLM call takes) fails at submission
 * with that segment named, never after the audio of the segments before it. The ids of segment
 * k are kept (r->seg_ids[k]) for its sched_job_prepare, so that each segment is tokenized once. */
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
cosy_status sched_job_prepare(cosy_engine *e, cosy_request *r, int seg, sjob **out) {
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
    sched_job_free(j);
    return st;
  }
  *out = j;
  return COSY_OK;
}

/* Reserve the job's backend states. COSY_ERR_GPU_NO_MEMORY: not now (the caller decides whether
 * to wait). */
cosy_status sched_job_reserve(cosy_engine *e, sjob *j) {
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
