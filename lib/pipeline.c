/* pipeline.c - one utterance on the CPU reference path, chunk by chunk, as the official
 * streaming code (CosyVoice3Model.tts with stream=True; spec section 5) does it:
 *
 *   text -> (normalize) -> BPE ids; LLM input per mode; LLM tokens (RAS sampling, silent filter)
 *   chunk k is ready when len(tokens) - offset >= hop_k + 3 (3 look-ahead tokens), with
 *     hop_0 = first_chunk_tokens + prompt_pad, prompt_pad = ceil(P/25)*25 - P (aligns the prompt
 *     plus the first chunk to the flow's 50-frame attention blocks), hop_{k+1} = min(100, 2*hop'_k)
 *     where hop'_0 = first_chunk_tokens (the official doubling of token_hop_len);
 *   each chunk: flow(prompt + tokens[: offset + hop + 3], block-causal mask, finalize = 0) gives
 *     mel frames up to 2*(offset + hop); the new frames are appended to the utterance's mel;
 *     HiFT (non-final) re-runs on the whole mel and the samples beyond those already sent go out;
 *   end: flow(prompt + all tokens, full attention, finalize = 1), the new frames appended, HiFT
 *     (final) over the whole mel, the rest of the samples go out with COSY_CHUNK_LAST.
 *
 * Blocking synthesis (cosy_synthesize) runs exactly this schedule and concatenates the chunks, so
 * streaming and blocking outputs are identical for the same seed. The exception is speed != 1
 * (blocking only): then, as the official non-streaming path, all tokens are generated first, the
 * flow runs once with full attention, the mel is linearly resampled to T/speed frames, and HiFT
 * runs once.
 *
 * Prompt conventions (spec 1.1): zero-shot uses the voice's prompt text (prefixed with
 * "You are a helpful assistant.<|endofprompt|>" when it lacks <|endofprompt|>) and its speech
 * tokens; cross-lingual gives the LLM no prompt text or tokens and prefixes the text itself;
 * instruct uses "You are a helpful assistant. <instruct><|endofprompt|>" (or the instruct text as
 * is when it already holds <|endofprompt|>). The flow always gets the voice's tokens, mel and
 * speaker embedding. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio.h"
#include "engine.h"
#include "ref/llm.h" /* ref_silent_pass */
#include "ref/sampling.h"
#include "text/normalize.h"
#include "tokenizer.h"
#include "util.h"

#define SYSTEM_PREFIX "You are a helpful assistant."
#define EOP "<|endofprompt|>"
#define MEL 80
#define LOOKAHEAD 3
#define MAX_HOP 100

/* ---- text --------------------------------------------------------------------------------- */

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

/* ---- the streaming state ------------------------------------------------------------------ */

typedef struct stream {
  cosy_engine *e;
  cosy_request *r;
  const cosy_voice *v;
  int32_t *tokens;           /* prompt tokens then generated flow tokens */
  int n_tok, cap_tok;        /* generated count, capacity */
  int offset;                /* generated tokens already turned into mel */
  int hop, next_hop_base;
  float *mel;                /* accumulated mel, frame-major [T][80] */
  int T, cap_T;
  int64_t sent;              /* native-rate samples already delivered */
  cosy_resampler *rs;        /* NULL at the native rate */
  float *rs_buf;
  int64_t rs_cap;
  cosy_status err;
  int collect_only;          /* speed != 1: generate everything first */
  /* the chunk thread (flow + vocoder beside the LLM); cmu guards n_ready, llm_done, chunk_err */
  pthread_mutex_t cmu;
  pthread_cond_t ccv;
  int n_ready;               /* generated tokens visible to the chunk thread */
  int llm_done;
  int chunks_done;           /* streaming chunks made so far */
  int first_flow_done;       /* the first chunk's flow has run (chunk thread, under cmu) */
  cosy_status chunk_err;
  char chunk_msg[512];
  pthread_t cth;
  int has_thread;
} stream;

static int cancelled(const stream *s) {
  return __atomic_load_n(&s->r->cancel, __ATOMIC_SEQ_CST) != 0;
}

static void add_time(cosy_request *r, double *slot, double dt) {
  pthread_mutex_lock(&r->mu);
  *slot += dt;
  pthread_mutex_unlock(&r->mu);
}

/* send native-rate samples through the resampler (if any) to the caller */
static cosy_status emit(stream *s, const float *pcm, int64_t n, int last) {
  cosy_request *r = s->r;
  const float *out = pcm;
  int64_t n_out = n;
  if (s->rs) {
    double t0 = cosy_now();
    int64_t need = cosy_resampler_max_out(s->rs, n);
    if (need > s->rs_cap) {
      float *nb = (float *)realloc(s->rs_buf, (size_t)need * sizeof *nb);
      if (!nb) return cosy_err(COSY_ERR_NO_MEMORY, "out of memory resampling");
      s->rs_buf = nb;
      s->rs_cap = need;
    }
    cosy_status st = cosy_resampler_process(s->rs, pcm, n, last, s->rs_buf, s->rs_cap, &n_out);
    if (st) return st;
    out = s->rs_buf;
    add_time(r, &r->vocoder_s, cosy_now() - t0);
  }
  pthread_mutex_lock(&r->mu);
  r->n_chunks++;
  pthread_mutex_unlock(&r->mu);
  if (request_deliver(r, out, n_out, last))
    return cosy_err(COSY_ERR_CANCELLED, "cancelled by the chunk callback");
  return COSY_OK;
}

/* run the flow on prompt + tokens[0 : n_used], append frames [2*offset, 2*(offset+new)) */
static cosy_status flow_chunk(stream *s, int n_used, int n_new, int streaming, int finalize) {
  cosy_engine *e = s->e;
  double t0 = cosy_now();
  float *mel = NULL;
  int frames = 0;
  cosy_status st = e->be->flow_infer(e, s->tokens, s->v->n_tokens, n_used, s->v->mel,
                                     2 * s->v->n_tokens, s->v->spk, streaming, finalize,
                                     s->chunks_done == 0, &s->r->cancel, &mel, &frames);
  add_time(s->r, &s->r->flow_s, cosy_now() - t0);
  if (st) return st;
  /* mel is channels-first [80][frames]; frames covers generated tokens [0, n_used(-3)) x 2 */
  int first = 2 * s->offset, count = 2 * n_new;
  if (first + count > frames) {
    free(mel);
    return cosy_err(COSY_ERR_INTERNAL, "flow returned %d frames, needed %d", frames, first + count);
  }
  if (s->T + count > s->cap_T) {
    int nc = s->cap_T ? s->cap_T : 256;
    while (nc < s->T + count) nc *= 2;
    float *nm = (float *)realloc(s->mel, (size_t)nc * MEL * sizeof *nm);
    if (!nm) {
      free(mel);
      return cosy_err(COSY_ERR_NO_MEMORY, "out of memory growing the mel");
    }
    s->mel = nm;
    s->cap_T = nc;
  }
  for (int t = 0; t < count; t++)
    for (int c = 0; c < MEL; c++) s->mel[(size_t)(s->T + t) * MEL + c] = mel[(size_t)c * frames + first + t];
  s->T += count;
  s->offset += n_new;
  free(mel);
  return COSY_OK;
}

/* vocode the whole mel (channels-first copy), send what is new */
static cosy_status vocode(stream *s, const float *mel_fm, int T, int finalize) {
  if (!finalize && T < 9) return COSY_OK; /* nothing complete yet */
  if (T == 0) return emit(s, NULL, 0, 1);
  double t0 = cosy_now();
  float *cf = (float *)cosy_malloc((size_t)T * MEL * sizeof *cf);
  if (!cf) return COSY_ERR_NO_MEMORY;
  for (int t = 0; t < T; t++)
    for (int c = 0; c < MEL; c++) cf[(size_t)c * T + t] = mel_fm[(size_t)t * MEL + c];
  float *wav = NULL;
  int64_t n = 0;
  cosy_status st = s->e->be->hift_infer(s->e, cf, T, finalize, s->chunks_done == 0,
                                        &s->r->cancel, &wav, &n);
  free(cf);
  add_time(s->r, &s->r->vocoder_s, cosy_now() - t0);
  if (st) return st;
  int64_t from = s->sent < n ? s->sent : n;
  st = emit(s, wav + from, n - from, finalize);
  if (n > s->sent) s->sent = n;
  free(wav);
  return st;
}

/* One streaming chunk: flow over prompt + tokens[: offset + hop + 3] (block-causal, not final),
 * the next hop, then the vocoder over the whole mel. Runs on the chunk thread. */
static cosy_status one_chunk(stream *s) {
  cosy_status st = flow_chunk(s, s->offset + s->hop + LOOKAHEAD, s->hop, 1, 0);
  if (st) return st;
  if (s->chunks_done == 0) { /* the LLM may wait for the first flow only */
    pthread_mutex_lock(&s->cmu);
    s->first_flow_done = 1;
    pthread_cond_broadcast(&s->ccv);
    pthread_mutex_unlock(&s->cmu);
  }
  s->next_hop_base = s->next_hop_base * 2 < MAX_HOP ? s->next_hop_base * 2 : MAX_HOP;
  s->hop = s->next_hop_base;
  if ((st = vocode(s, s->mel, s->T, 0))) return st;
  if (cancelled(s)) return cosy_err(COSY_ERR_CANCELLED, "request cancelled");
  return COSY_OK;
}

/* The chunk thread: makes every chunk as soon as its tokens (plus the look-ahead) exist, while the
 * LLM goes on generating. Which chunks are made depends only on token counts, never on timing, so
 * the audio is the same as if the chunks were made inline. Exits when the LLM is done and no whole
 * chunk is left (the final, partial chunk is made by pipeline_run after the join). */
static void *chunk_main(void *arg) {
  stream *s = (stream *)arg;
  pthread_mutex_lock(&s->cmu);
  for (;;) {
    while (!s->llm_done && s->n_ready - s->offset < s->hop + LOOKAHEAD)
      pthread_cond_wait(&s->ccv, &s->cmu);
    if (s->n_ready - s->offset >= s->hop + LOOKAHEAD && !cancelled(s)) {
      pthread_mutex_unlock(&s->cmu);
      cosy_status st = one_chunk(s);
      pthread_mutex_lock(&s->cmu);
      s->chunks_done++;
      pthread_cond_broadcast(&s->ccv); /* the LLM may be waiting for the first chunk */
      if (st) {
        s->chunk_err = st;
        snprintf(s->chunk_msg, sizeof s->chunk_msg, "%s", cosy_last_error());
        break;
      }
      continue;
    }
    break; /* LLM done (or cancelled) and no whole chunk left */
  }
  pthread_cond_broadcast(&s->ccv);
  pthread_mutex_unlock(&s->cmu);
  return NULL;
}

/* stop and join the chunk thread; returns its failure, if any (message restored on this thread) */
static cosy_status chunk_join(stream *s) {
  if (!s->has_thread) return COSY_OK;
  pthread_mutex_lock(&s->cmu);
  s->llm_done = 1;
  pthread_cond_signal(&s->ccv);
  pthread_mutex_unlock(&s->cmu);
  pthread_join(s->cth, NULL);
  s->has_thread = 0;
  if (s->chunk_err) return cosy_err(s->chunk_err, "%s", s->chunk_msg);
  return COSY_OK;
}

/* a token for the flow (LLM thread): publish it to the chunk thread; non-zero stops the LLM */
static int on_token(stream *s, int32_t token) {
  if (cancelled(s)) return 1;
  int P = s->v->n_tokens;
  if (P + s->n_tok + 1 > s->cap_tok) { /* capacity is planned from max_len; never grows */
    s->err = cosy_err(COSY_ERR_INTERNAL, "token buffer overflow");
    return 1;
  }
  s->tokens[P + s->n_tok++] = token;
  pthread_mutex_lock(&s->r->mu);
  s->r->n_speech_tokens = s->n_tok;
  pthread_mutex_unlock(&s->r->mu);
  pthread_mutex_lock(&s->cmu);
  s->n_ready = s->n_tok;
  pthread_cond_broadcast(&s->ccv);
  /* time to first audio first: the LLM waits while the first chunk is made (the whole chunk, or
   * with first_chunk_overlap 1 only its flow, the vocoder then running urgently beside the LLM;
   * 2: no wait), so the two do not compete for the device; later chunks always overlap the
   * LLM's next tokens */
  if (s->e->first_chunk_overlap < 2 && s->chunks_done == 0 &&
      s->n_ready - s->offset >= s->hop + LOOKAHEAD)
    while (s->chunks_done == 0 && !(s->e->first_chunk_overlap == 1 && s->first_flow_done) &&
           s->chunk_err == COSY_OK && !cancelled(s))
      pthread_cond_wait(&s->ccv, &s->cmu);
  int failed = s->chunk_err != COSY_OK;
  pthread_mutex_unlock(&s->cmu);
  return failed;
}

/* speed != 1: the official non-streaming path with mel interpolation (linear, align_corners=False) */
static cosy_status offline_speed(stream *s, float speed) {
  cosy_status st = flow_chunk(s, s->n_tok, s->n_tok, 0, 1);
  if (st) return st;
  int T = s->T, Tn = (int)((double)T / speed);
  if (Tn < 1) return emit(s, NULL, 0, 1);
  float *m = (float *)cosy_malloc((size_t)Tn * MEL * sizeof *m);
  if (!m) return COSY_ERR_NO_MEMORY;
  double scale = (double)T / Tn;
  for (int i = 0; i < Tn; i++) {
    double x = (i + 0.5) * scale - 0.5;
    if (x < 0) x = 0;
    int i0 = (int)x;
    if (i0 > T - 1) i0 = T - 1;
    int i1 = i0 + 1 < T ? i0 + 1 : T - 1;
    double w = x - i0;
    for (int c = 0; c < MEL; c++)
      m[(size_t)i * MEL + c] = (float)((1 - w) * s->mel[(size_t)i0 * MEL + c] + w * s->mel[(size_t)i1 * MEL + c]);
  }
  st = vocode(s, m, Tn, 1);
  free(m);
  return st;
}

/* The LLM decode loop (spec 1.5, 2.3): prefill, then sample / feed back one token at a time.
 * Token i (0-based) is sampled with every stop id masked while i < min_len; a stop id ends the
 * utterance (not emitted); at most max_len tokens. Every token goes into the RAS history and back
 * into the LLM; the silent-token filter decides which ones reach the flow (on_token). */
static cosy_status generate(stream *s, const float *lm_input, int L, int min_len, int max_len,
                            const cosy_sampling *samp, cosy_rng *rng) {
  cosy_engine *e = s->e;
  void *seq = NULL;
  int32_t *hist = (int32_t *)cosy_malloc(sizeof(int32_t) * (size_t)(max_len ? max_len : 1));
  cosy_status st = COSY_OK;
  if (!hist) return COSY_ERR_NO_MEMORY;
  if (max_len == 0) goto done;
  if ((st = e->be->llm_open(e, L + max_len, &seq))) goto done;
  cosy_next_req nx = {samp, 0 < min_len, hist, 0, rng};
  int32_t tok = -1;
  double t0 = cosy_now();
  st = e->be->llm_prefill(e, seq, lm_input, L, &nx, &tok); /* token 0 */
  add_time(s->r, &s->r->llm_s, cosy_now() - t0);
  if (st) goto done;
  int silent_run = 0;
  for (int i = 0; i < max_len; i++) { /* tok = token i */
    if (tok >= e->model->hp.speech_tokens) break; /* stop id, not emitted */
    hist[nx.n_hist++] = tok;
    if (ref_silent_pass(&silent_run, tok) && on_token(s, tok)) {
      st = s->err ? s->err : COSY_ERR_CANCELLED; /* the chunk thread's error is reported later */
      if (!s->err) cosy_err(COSY_ERR_CANCELLED, "request cancelled");
      goto done;
    }
    if (i + 1 == max_len) break;
    nx.ignore_eos = i + 1 < min_len;
    t0 = cosy_now();
    st = e->be->llm_decode(e, seq, tok, &nx, &tok); /* token i + 1 */
    add_time(s->r, &s->r->llm_s, cosy_now() - t0);
    if (st) goto done;
  }
done:
  if (seq) e->be->llm_close(e, seq);
  free(hist);
  return st;
}

cosy_status pipeline_run(cosy_engine *e, cosy_request *r) {
  const cosy_voice *v = r->voice;
  const cosy_synth_params *p = &r->params;
  stream s;
  memset(&s, 0, sizeof s);
  s.e = e;
  s.r = r;
  s.v = v;
  s.collect_only = p->speed != 1.0f;
  pthread_mutex_init(&s.cmu, NULL);
  pthread_cond_init(&s.ccv, NULL);
  cosy_status st = COSY_OK;
  char *text = NULL, *tts = NULL, *prompt = NULL;
  int32_t *tts_ids = NULL, *prompt_ids = NULL;
  int32_t n_tts = 0, n_prompt = 0;
  float *lm_input = NULL;

  /* text and prompt per mode */
  if ((st = normalize_text(e->tn, r->text, !(p->flags & COSY_SYNTH_NO_TEXT_NORMALIZATION),
                           &text)))
    goto done;
  if (!text[0]) {
    st = cosy_err(COSY_ERR_TEXT, "nothing to say: the text is empty after normalization");
    goto done;
  }
  int use_prompt_tokens = p->mode == COSY_MODE_ZERO_SHOT;
  if (p->mode == COSY_MODE_ZERO_SHOT) {
    prompt = strstr(v->prompt_text, EOP) ? cosy_strdup(v->prompt_text)
                                          : concat3(SYSTEM_PREFIX, EOP, v->prompt_text);
    tts = cosy_strdup(text);
  } else if (p->mode == COSY_MODE_CROSS_LINGUAL) {
    prompt = cosy_strdup("");
    tts = strstr(text, EOP) ? cosy_strdup(text) : concat3(SYSTEM_PREFIX, EOP, text);
  } else {
    prompt = strstr(p->instruct_text, EOP) ? cosy_strdup(p->instruct_text)
                                            : concat3(SYSTEM_PREFIX " ", p->instruct_text, EOP);
    tts = cosy_strdup(text);
  }
  if (!prompt || !tts) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  if ((st = cosy_tokenize(e->tok, prompt, strlen(prompt), &prompt_ids, &n_prompt))) goto done;
  if ((st = cosy_tokenize(e->tok, tts, strlen(tts), &tts_ids, &n_tts))) goto done;
  if (n_tts == 0) {
    st = cosy_err(COSY_ERR_TEXT, "nothing to say: the text has no tokens");
    goto done;
  }
  int min_len = 2 * n_tts, max_len = 20 * n_tts;
  if (p->max_tokens > 0) max_len = p->max_tokens;
  if (p->min_tokens > 0) min_len = p->min_tokens;
  if (min_len > max_len) min_len = max_len;
  int P = v->n_tokens;
  int L = 0;
  if ((st = e->be->llm_input(e, prompt_ids, n_prompt, tts_ids, n_tts,
                             use_prompt_tokens ? v->speech_tokens : NULL,
                             use_prompt_tokens ? P : 0, &lm_input, &L)))
    goto done;
  pthread_mutex_lock(&r->mu);
  r->n_text_tokens = n_prompt + n_tts;
  pthread_mutex_unlock(&r->mu);

  /* streaming state */
  s.cap_tok = P + max_len + 1;
  if (!(s.tokens = (int32_t *)cosy_malloc((size_t)s.cap_tok * sizeof *s.tokens))) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  if (P) memcpy(s.tokens, v->speech_tokens, (size_t)P * sizeof *s.tokens);
  int pad = (25 - P % 25) % 25;
  s.next_hop_base = p->first_chunk_tokens;
  s.hop = p->first_chunk_tokens + pad;
  if (p->sample_rate != e->model->hp.sample_rate &&
      (st = cosy_resampler_create(e->model->hp.sample_rate, p->sample_rate, &s.rs)))
    goto done;

  cosy_sampling samp = {p->temperature, p->top_p, p->top_k, 10, 0.1f};
  cosy_rng rng;
  uint64_t seed = p->seed ? p->seed : (uint64_t)(cosy_now() * 1e9) ^ (uint64_t)(uintptr_t)r;
  cosy_rng_seed(&rng, seed);
  if ((st = cosy_sampling_check(&samp))) goto done;
  if (!s.collect_only) {
    int rc = pthread_create(&s.cth, NULL, chunk_main, &s);
    if (rc) {
      st = cosy_err(COSY_ERR_INTERNAL, "cannot start the chunk thread: %s", strerror(rc));
      goto done;
    }
    s.has_thread = 1;
  }
  st = generate(&s, lm_input, L, min_len, max_len, &samp, &rng);
  {
    cosy_status cst = chunk_join(&s);
    if (cst && (st == COSY_OK || st == COSY_ERR_CANCELLED)) st = cst;
  }
  if (s.err) {
    st = s.err;
    goto done;
  }
  if (st) goto done;
  if (cancelled(&s)) {
    st = cosy_err(COSY_ERR_CANCELLED, "request cancelled");
    goto done;
  }
  if (s.collect_only) {
    st = offline_speed(&s, p->speed);
  } else {
    /* final chunk: everything left, full attention, finalize */
    if ((st = flow_chunk(&s, s.n_tok, s.n_tok - s.offset, 0, 1))) goto done;
    st = vocode(&s, s.mel, s.T, 1);
  }
done:
  chunk_join(&s);
  pthread_mutex_destroy(&s.cmu);
  pthread_cond_destroy(&s.ccv);
  if (st == COSY_OK && cancelled(&s)) st = cosy_err(COSY_ERR_CANCELLED, "request cancelled");
  free(text);
  free(tts);
  free(prompt);
  free(tts_ids);
  free(prompt_ids);
  free(lm_input);
  free(s.tokens);
  free(s.mel);
  free(s.rs_buf);
  if (s.rs) cosy_resampler_free(s.rs);
  return st;
}
