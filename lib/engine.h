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
struct cosy_text_norm;

struct cosy_voice {
  int refs;                      /* atomic (__atomic builtins) */
  struct cosy_engine *engine;
  char *prompt_text;             /* as given (may be "") */
  int32_t *speech_tokens;        /* [n_tokens], cut to the mel: n = min(n, n_mel_frames / 2) */
  int32_t n_tokens;
  float *mel;                    /* [2 * n_tokens][80] frame-major */
  float spk[192];
};

/* A compute backend: the CPU reference (lib/backend_cpu.c) or the GPU (lib/gpu/backend_gpu.c).
 * The pipeline (pipeline.c) drives either through these calls; the sampling, the silent-token
 * filter and the chunk schedule are shared, so both backends follow the same semantics. Calls
 * may come from several worker threads at once; a backend serializes what it must. */
struct cosy_rng;
struct cosy_sampling;

/* What a backend needs to sample the next speech token (RAS, lib/ref/sampling.h) from the
 * log-probs its prefill or decode step has just computed; the backend samples where the
 * log-probs are (the GPU backend on the device) and returns the id. */
typedef struct cosy_next_req {
  const struct cosy_sampling *samp;
  int ignore_eos;              /* mask every stop id (token index < min_len) */
  const int32_t *hist;         /* the tokens generated so far (RAS history) */
  int n_hist;
  struct cosy_rng *rng;        /* the request's generator, advanced by the draws */
} cosy_next_req;

typedef struct cosy_backend {
  const char *name;
  /* while the first chunk of an utterance is made: 0 the LLM waits for the whole chunk; 1 it
   * waits for the chunk's flow only (the vocoder runs urgently beside it); 2 it goes on (flow
   * and vocoder urgently beside it). Urgent work runs ahead of the LLM where the backend can. */
  int first_chunk_overlap;
  cosy_status (*create)(struct cosy_engine *e);           /* sets e->be_state */
  void (*destroy)(struct cosy_engine *e);
  void (*stats)(const struct cosy_engine *e, cosy_engine_stats *s);
  /* LLM input [sos, text, task_id, prompt speech] as host fp32 [L][H] (malloc'd) */
  cosy_status (*llm_input)(struct cosy_engine *e, const int32_t *prompt_text, int n_pt,
                           const int32_t *tts_text, int n_tt, const int32_t *prompt_speech,
                           int n_ps, float **emb, int *L);
  /* one sequence: open for max_positions, prefill, decode one token at a time; prefill and
   * decode both end by sampling the next token (*next) as nx says */
  cosy_status (*llm_open)(struct cosy_engine *e, int max_positions, void **seq);
  void (*llm_close)(struct cosy_engine *e, void *seq);
  cosy_status (*llm_prefill)(struct cosy_engine *e, void *seq, const float *emb, int L,
                             const cosy_next_req *nx, int32_t *next);
  cosy_status (*llm_decode)(struct cosy_engine *e, void *seq, int32_t token,
                            const cosy_next_req *nx, int32_t *next);
  /* ref_flow_infer's contract (mel host, channels-first, malloc'd); urgent: the first chunk of
   * an utterance (the time to first audio waits on it) */
  cosy_status (*flow_infer)(struct cosy_engine *e, const int32_t *tokens, int n_prompt, int n_gen,
                            const float *prompt_mel, int n_prompt_frames, const float *spk,
                            int streaming, int finalize, int urgent, const volatile int *cancel,
                            float **mel, int *n_frames);
  /* ref_hift_infer's contract with the default noise */
  cosy_status (*hift_infer)(struct cosy_engine *e, const float *mel, int T, int finalize,
                            int urgent, const volatile int *cancel, float **wav, int64_t *n);
} cosy_backend;

extern const cosy_backend cosy_backend_cpu;
#ifdef COSY_WITH_CUDA
extern const cosy_backend cosy_backend_gpu;
#endif

struct cosy_engine {
  cosy_engine_config cfg;        /* copy; model_path points into model_path_buf */
  char *model_path_buf;
  cosy_model *model;
  struct cosy_tokenizer *tok;
  struct cosy_text_norm *tn;     /* text front end (lib/text); minimal without grammars */
  const cosy_backend *be;
  void *be_state;
  int speech_vocab;              /* rows of the LLM's speech head (6761) */
  int first_chunk_overlap;       /* the backend's choice, or COSY_FIRST_CHUNK=wait|flow|overlap */

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

/* Copy a caller's cosy_synth_params (NULL = defaults), check every knob, fill defaults (api.c). */
cosy_status params_resolve(const cosy_synth_params *p, cosy_synth_params *out);

/* engine lifecycle and requests (lib/engine.c); api.c validates the arguments first */
cosy_status engine_create(const cosy_engine_config *cfg, cosy_engine **out);
void engine_destroy(cosy_engine *e);
cosy_status engine_stats(const cosy_engine *e, cosy_engine_stats *s);
cosy_status engine_submit(cosy_engine *e, const cosy_voice *v, const char *text,
                          const cosy_synth_params *p, cosy_chunk_fn fn, void *user,
                          cosy_request **out);
cosy_status request_read(cosy_request *r, float *buf, int64_t cap, int64_t *n_read,
                         int32_t timeout_ms);
cosy_status request_wait(cosy_request *r, int32_t timeout_ms);
void request_release(cosy_request *r);

/* voices (lib/voice.c) */
cosy_status voice_load_file(cosy_engine *e, const char *path, cosy_voice **out);
cosy_status voice_save_file(const cosy_voice *v, const char *path);
cosy_status voice_create(struct cosy_engine *e, const char *prompt_text, const int32_t *tokens,
                         int32_t n_tokens, const float *mel, int32_t n_mel_frames, const float *spk,
                         struct cosy_voice **out);
void voice_ref(struct cosy_voice *v);
void voice_unref(struct cosy_voice *v);

#endif
