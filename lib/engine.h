/* engine.h - internal structures behind the public handles (cosy_engine, cosy_voice,
 * cosy_request) and the CPU synthesis pipeline.
 *
 * Threads: the engine owns `n_workers` worker threads and a FIFO of submitted requests. A worker
 * takes a request and runs the whole utterance (pipeline_run), delivering audio chunk by chunk
 * either to the request's push callback or into its pull buffer. cosy_synthesize is a submit
 * whose chunks are collected, then a wait. Cancellation is a flag polled at every LLM token,
 * every flow Euler step and every vocoder call. */
#ifndef COSY_ENGINE_H
#define COSY_ENGINE_H

#include <pthread.h>
#include <stdint.h>

#include "cosyvoice.h"
#include "model.h"

struct cosy_tokenizer;
struct ref_llm;
struct ref_flow;
struct ref_hift;

struct cosy_voice {
  int refs;                      /* atomic (__atomic builtins) */
  struct cosy_engine *engine;
  char *prompt_text;             /* as given (may be "") */
  int32_t *speech_tokens;        /* [n_tokens], cut to the mel: n = min(n, n_mel_frames / 2) */
  int32_t n_tokens;
  float *mel;                    /* [2 * n_tokens][80] frame-major */
  float spk[192];
};

struct cosy_engine {
  cosy_engine_config cfg;        /* copy; model_path points into model_path_buf */
  char *model_path_buf;
  cosy_model *model;
  struct cosy_tokenizer *tok;
  struct ref_llm *llm;
  struct ref_flow *flow;
  struct ref_hift *hift;

  pthread_mutex_t mu;
  pthread_cond_t cv_work;        /* workers wait for requests */
  struct cosy_request *q_head, *q_tail;
  int n_queued, n_active, n_voices;
  int stopping;
  int n_workers;
  struct engine_worker *workers;
  int64_t requests_done, samples_out;
};

enum { REQ_QUEUED = 0, REQ_RUNNING = 1, REQ_DONE = 2 };

struct cosy_request {
  struct cosy_engine *engine;
  struct cosy_voice *voice;      /* holds a reference */
  char *text;
  cosy_synth_params params;
  char *instruct_text;           /* owned copy of params.instruct_text */
  cosy_chunk_fn fn;
  void *user;

  volatile int cancel;           /* set by cosy_request_cancel (any thread) */
  pthread_mutex_t mu;
  pthread_cond_t cv;             /* signalled on new audio and on completion */
  int state;                     /* REQ_* */
  cosy_status final_status;
  char error[512];               /* message of a failed request */
  int released;                  /* the caller gave its handle back */
  struct cosy_request *next;     /* engine queue */

  /* pull buffer (fn == NULL): samples produced and not yet read */
  float *buf;
  int64_t buf_len, buf_cap, buf_read;
  /* for cosy_synthesize */
  int64_t offset;                /* samples delivered so far (output rate) */
  double t_submit, t_first, t_end;  /* cosy_now() at submit, first chunk, end */
  double llm_s, flow_s, vocoder_s;   /* stage times (written by the worker) */
  int32_t n_text_tokens, n_speech_tokens, n_chunks;
};

/* Run one request to the end on the calling thread: text -> tokens -> LLM -> flow -> HiFT ->
 * (resample) -> deliver(). Returns the request's final status (COSY_ERR_CANCELLED when cancelled)
 * with cosy_last_error() set on failure. */
cosy_status pipeline_run(struct cosy_engine *e, struct cosy_request *r);
/* Deliver a chunk to the request (callback or pull buffer). Returns non-zero to cancel. */
int request_deliver(struct cosy_request *r, const float *pcm, int64_t n, int last);

/* voices (lib/voice.c) */
cosy_status voice_create(struct cosy_engine *e, const char *prompt_text, const int32_t *tokens,
                         int32_t n_tokens, const float *mel, int32_t n_mel_frames, const float *spk,
                         struct cosy_voice **out);
void voice_ref(struct cosy_voice *v);
void voice_unref(struct cosy_voice *v);

#endif
