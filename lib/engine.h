/* engine.h - internal structures behind the public handles (cosy_engine, cosy_voice,
 * cosy_request) and the backend interface the scheduler drives (CPU or GPU).
 *
 * Threads: the scheduler (lib/scheduler.c) owns the compute: its LLM thread admits requests and
 * runs one batched decode step over every active sequence per iteration, its token-to-wave
 * thread runs batched flow and vocoder calls and delivers audio chunk by chunk either to the
 * request's push callback or into its pull buffer. cosy_synthesize is a submit whose chunks are
 * collected, then a wait. Cancellation is a flag polled at every LLM step, flow call and vocoder
 * call. */
#ifndef COSY_ENGINE_H
#define COSY_ENGINE_H

#include <pthread.h>
#include <stdint.h>

#include "cosyvoice.h"
#include "knobs.h"
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

/* A compute backend: the CPU reference (lib/backend_cpu.c) or the GPU (lib/backend_gpu.c).
 * The scheduler (scheduler.c) drives either through these batch-shaped calls; sampling, the
 * silent-token filter and the chunk schedule live in the scheduler, so both backends follow one
 * set of semantics. The LLM calls come from the scheduler's LLM thread only, the flow calls
 * from its token-to-wave thread only, the vocoder calls from its vocoder thread (vocoder_thread
 * below) or the token-to-wave thread, never two at once; the sides may run at the same time. */
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

/* One row of a batched LLM decode step: feed `token` to `seq`, sample the next token. */
typedef struct cosy_llm_row {
  void *seq;
  int32_t token;
  cosy_next_req nx;
  int32_t next;                /* out */
  cosy_status status;          /* out: this row's sampling (COSY_OK or why not) */
} cosy_llm_row;

/* One sequence of a batched prefill: L more positions of emb (host fp32 [L][H]); nx != NULL on
 * the prompt's last piece (the next token is sampled into `next`). */
typedef struct cosy_prefill_row {
  void *seq;
  const float *emb;
  int L;
  const cosy_next_req *nx;
  int32_t next;                /* out */
  cosy_status status;          /* out: this row's sampling (COSY_OK or why not) */
} cosy_prefill_row;

/* The prompt side of a request's flow calls (constant over the utterance). */
typedef struct cosy_flow_prompt {
  const int32_t *tokens;       /* prompt speech tokens [n_tokens] */
  int n_tokens;
  const float *mel;            /* frame-major [2 n_tokens][80] */
  const float *spk;            /* [192] speaker embedding */
} cosy_flow_prompt;

/* One flow call of a batch: mel frames of the request's generated tokens.
 *   tokens = prompt tokens then generated ones; n_gen of them are used (incl. the 3 look-ahead
 *   tokens when !finalize). The call computes the mel of prompt + tokens with the block-causal
 *   mask (full_attention = 0) or full attention, and returns generated frames
 *   [frame_from, frame_from + n_frames) in `mel` (frame-major, caller's buffer). Frames before
 *   frame_from were returned by earlier calls of the same state; with block-causal calls that end
 *   on 50-frame blocks a backend may keep what those calls computed instead of recomputing it. */
typedef struct cosy_flow_job {
  void *fs;                    /* the request's flow state (flow_open) */
  const int32_t *tokens;       /* [n_prompt + n_gen] */
  int n_gen;
  int finalize;                /* last call: every token, zero look-ahead */
  int full_attention;
  int frame_from, n_frames;
  float *mel;                  /* out: [n_frames][80] */
  cosy_status status;          /* out */
} cosy_flow_job;

/* One vocoder call of a batch: append n_new mel frames (frame-major) to the request's vocoder
 * state; the samples that became final come back in wav (malloc'd) / n. finalize = last call. */
typedef struct cosy_voc_job {
  void *vs;
  const float *mel;
  int n_new;
  int finalize;
  float *wav;                  /* out, malloc'd (free()) */
  int64_t n;                   /* out */
  cosy_status status;          /* out */
} cosy_voc_job;

typedef struct cosy_backend {
  const char *name;
  cosy_status (*create)(struct cosy_engine *e);           /* sets e->be_state */
  void (*destroy)(struct cosy_engine *e);
  void (*stats)(const struct cosy_engine *e, cosy_engine_stats *s);
  /* optional: the backend's part of cosy_engine_get_info (device, memory plan, pages) */
  void (*info)(const struct cosy_engine *e, cosy_engine_info *s);
  /* LLM input [sos, text, task_id, prompt speech] as host fp32 [L][H] (malloc'd) */
  cosy_status (*llm_input)(struct cosy_engine *e, const int32_t *prompt_text, int n_pt,
                           const int32_t *tts_text, int n_tt, const int32_t *prompt_speech,
                           int n_ps, float **emb, int *L);
  /* embeddings of input items, host fp32 [n][H] (malloc'd): item >= 0 a text id, item < 0 the
   * speech-embedding row -1 - item (text streaming builds its LLM input piece by piece) */
  cosy_status (*llm_embed)(struct cosy_engine *e, const int32_t *items, int n, float **emb);
  /* a sequence of at most max_positions; COSY_ERR_GPU_NO_MEMORY when the KV pool cannot hold it
   * now (the scheduler keeps the request waiting) */
  cosy_status (*llm_open)(struct cosy_engine *e, int max_positions, void **seq);
  void (*llm_close)(struct cosy_engine *e, void *seq);
  /* prefill pieces of n distinct sequences (the backend may pack them into one forward pass);
   * a failing row sets its status, a failing call returns non-zero (every row failed) */
  cosy_status (*llm_prefill)(struct cosy_engine *e, cosy_prefill_row *rows, int n);
  /* one decode step of n distinct sequences, each row sampled with its own parameters and
   * generator; a failing row sets its status, a failing step returns non-zero */
  cosy_status (*llm_step)(struct cosy_engine *e, cosy_llm_row *rows, int n);
  /* flow state for an utterance of at most max_gen generated tokens */
  cosy_status (*flow_open)(struct cosy_engine *e, const cosy_flow_prompt *p, int max_gen,
                           void **fs);
  void (*flow_close)(struct cosy_engine *e, void *fs);
  /* Optional (NULL: no page pool, the flow takes what it needs): fs NULL: the flow cache's free
   * pages (-1: no pool); else the pages the state holds (its voice's shared ones included). A
   * page holds one 50-frame block of one request. Called on the token-to-wave thread. */
  int (*flow_pages)(struct cosy_engine *e, void *fs);
  /* n calls of distinct states; urgent: a first chunk is among them (time to first audio) */
  cosy_status (*flow_run)(struct cosy_engine *e, cosy_flow_job *jobs, int n, int urgent,
                          const volatile int *cancel);
  cosy_status (*voc_open)(struct cosy_engine *e, int max_frames, void **vs);
  void (*voc_close)(struct cosy_engine *e, void *vs);
  cosy_status (*vocode)(struct cosy_engine *e, cosy_voc_job *jobs, int n, int urgent,
                        const volatile int *cancel);
  /* Optional (NULL: the CPU reference does it): the voice front end's models on the backend's
   * device, from the CPU's features: speech tokens of a whisper log-mel [128][T_lm]
   * (*tokens malloc'd) and the speaker embedding [192] of a mean-removed fbank [T_fb][80].
   * COSY_ERR_UNSUPPORTED: not available on this engine (the CPU reference runs instead).
   * voice_audio.c calls it through sched_run_on_t2w, on the token-to-wave thread. */
  cosy_status (*voice_features)(struct cosy_engine *e, const float *logmel, int T_lm,
                                const float *fbank, int T_fb, int32_t **tokens,
                                int32_t *n_tokens, float *spk);
  /* Optional (NULL: nothing to do): called first on each of the scheduler's threads (the LLM
   * thread, the token-to-wave thread and the vocoder thread), which make every later backend call of the engine
   * except create, destroy and stats. The GPU backend makes the engine's device the thread's
   * current CUDA device there: a thread starts on device 0, and an engine on device 1 would
   * otherwise launch its kernels from a thread whose current device is not its streams'. */
  void (*thread_enter)(struct cosy_engine *e);
  /* 1: the vocoder calls may run beside the flow calls (their own stream and buffers), so the
   * scheduler gives them a thread of their own and the flow's next batch overlaps this one's
   * vocoder; 2: the same thread, but only for a flow batch of later chunks that the batch caps
   * cut short (the flow has more ready work than one batch), every other vocoder call on the
   * token-to-wave thread once the vocoder thread is idle (the GPU: docs/scheduler.md); 0: the
   * token-to-wave thread makes both calls in turn (the CPU). COSY_SCHED_VOCODER_THREAD=0/1/2
   * overrides it (measurements, tests). */
  int vocoder_thread;
} cosy_backend;

/* flow_job_take (lib/backend_cpu.c, shared by the backends): copy the job's frames out of a
 * CHANNELS-FIRST [80][frames] mel of generated frames. */
cosy_status flow_job_take(cosy_flow_job *j, const float *mel_cf, int frames);

extern const cosy_backend cosy_backend_cpu;
#ifdef COSY_WITH_CUDA
extern const cosy_backend cosy_backend_gpu;
#endif

struct cosy_sched;

/* What one utterance (one segment of a long text, or a streamed text) may take on an engine, in
 * the units its states are reserved in at admission (docs/scheduler.md section 8). 0: no limit
 * at admission (the CPU reference allocates as it goes). */
typedef struct cosy_utt_caps {
  int flow_frames;    /* mel frames of prompt + generated + look-ahead tokens the flow holds */
  int voc_frames;     /* mel frames of one vocoder call (the whole mel of a one-shot utterance) */
  int llm_positions;  /* LLM positions of one sequence */
  const char *where;  /* what holds them, for messages ("the GPU flow") */
} cosy_utt_caps;

/* One utterance's ceiling, as sched_job_prepare computes it (lib/sched_jobs.c). */
typedef struct cosy_utt {
  int seg, n_segs;    /* segment index and count of a long text; n_segs 0: text streamed in */
  int n_chars;        /* the segment's characters (code points) */
  int text_tokens;    /* its text tokens (the LLM's tts text) */
  int prompt_tokens;  /* the voice's prompt speech tokens (the flow's prompt) */
  int max_tokens;     /* the request's max_tokens (0: the default ceiling) */
  int max_gen;        /* the ceiling in force: speech tokens at most */
  int llm_positions;  /* LLM positions the sequence reserves (input + max_gen) */
  int one_shot;       /* COSY_SYNTH_ONE_SHOT or speed != 1: the whole mel in one vocoder call */
  float speed;
  int token_mel_ratio, lookahead; /* the model's (2 and 3 for CosyVoice3) */
} cosy_utt;

/* COSY_OK when the utterance fits caps whatever it generates up to its ceiling; otherwise the
 * status and a message naming the segment (index, characters, text tokens), the numbers and the
 * knob: COSY_ERR_TEXT when the default ceiling of a segment's text is what does not fit (the text
 * is too long for one segment), COSY_ERR_INVALID_ARG when the caller's max_tokens, the voice or
 * the one-shot vocoder call is (lib/sched_jobs.c). */
cosy_status sched_utt_check(const cosy_utt_caps *caps, const cosy_utt *u);

/* Mel frames one utterance (one segment of a long text) may take in the flow, prompt and
 * look-ahead included: 8000 (160 s). Every flow call of an utterance, even one that recomputes
 * all of it (its cache pages could not be had, or full attention), fits the flow's buffers, and
 * the scheduler refuses at submission a segment whose ceiling does not fit (sched_utt_check), so
 * nothing fails mid-utterance. 8000 holds the default ceiling (20 speech tokens per text token)
 * of every segment the official split makes of sentences up to 80 text tokens (a segment of at
 * most 60 + 80 + 19 = 159 tokens: 3180 speech tokens) with a 30 s voice (750 prompt tokens):
 * 2 (750 + 3180 + 3) = 7866 frames. The flow's buffers take about 94 KB per frame for the
 * full-size model (docs/scheduler.md section 8; lib/backend_gpu.c plans them): ~750 MB, 470 MB
 * more than the 60 s they held before, taken from the flow's cache pages (~90 MB each). */
#define COSY_GPU_UTT_FRAMES 8000
/* mel frames of one vocoder call (the vocoder's buffers are planned for it): a streaming call
 * takes a chunk's frames (the batch's jobs share them), a one-shot utterance (COSY_SYNTH_ONE_SHOT,
 * speed != 1) all of its generated frames at once, so its ceiling is checked against this too */
#define COSY_GPU_VOC_FRAMES 3000
#define COSY_GPU_UTT_POSITIONS 8192 /* LLM positions of one sequence (= GPU_LLM_MAX_CTX, lib/gpu/llm.h) */
/* GPU max_active: at most COSY_GPU_MAX_ACTIVE (the LLM's largest decode bucket, lib/gpu/llm.c
 * MAX_BUCKETS: a decode step batches up to that many sequences; the flow and vocoder split larger
 * batches into calls of their own sizes); COSY_GPU_DEFAULT_ACTIVE when the config says 0, the
 * number the memory plan of docs/gpus.md "GPU memory" was measured for */
#define COSY_GPU_MAX_ACTIVE 1024
#define COSY_GPU_DEFAULT_ACTIVE 256
/* the LLM's prompt: a prompt text without <|endofprompt|> gets the official system prefix */
#define COSY_SYSTEM_PREFIX "You are a helpful assistant."
#define COSY_EOP "<|endofprompt|>"
#define COSY_TEXT_STREAM_MAX_TOKENS 1000 /* a streamed text's default max_tokens (40 s) */

struct cosy_engine {
  cosy_engine_config cfg;        /* copy; model_path points into model_path_buf */
  cosy_knobs knobs;              /* the environment knobs, read at create (lib/knobs.h) */
  char *model_path_buf;
  cosy_model *model;
  struct cosy_tokenizer *tok;
  struct cosy_text_norm *tn;     /* text front end (lib/text); minimal without grammars */
  const cosy_backend *be;
  void *be_state;
  int speech_vocab;              /* rows of the LLM's speech head (6761) */

  pthread_mutex_t mu;            /* the scheduler's queues and every request's shared state */
  struct cosy_sched *sched;      /* lib/sched_internal.h */
  int n_queued, n_active, n_voices;
  int stopping;
  int lost;                      /* a sticky CUDA error happened: nothing more runs on the device
                                    and every call fails with COSY_ERR_DEVICE_LOST (written under
                                    mu, read with __atomic loads; sched_jobs.c) */
  char lost_msg[512];            /* what failed (set once, under mu, before lost) */
  int64_t requests_done, samples_out;
  struct voice_frontend *frontend; /* speech tokenizer + CAM++, made on first use (voice_audio.c) */
  cosy_utt_caps caps;            /* what one utterance (one segment) may take; the backend's
                                    create sets it, the scheduler checks every segment against it
                                    at submission (sched_utt_check) */
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
  int cb_closed;                 /* request_release has begun: no more callbacks (r->mu) */
  int in_callback;               /* a push callback is running (r->mu; request_deliver) */
  pthread_t cb_thread;           /* the thread running it */
  struct cosy_request *next;     /* scheduler queue */
  struct sjob *job;              /* the scheduler's state of this utterance (sched_internal.h) */
  cosy_status prep_st;           /* preparing it on the caller's thread failed (sched_submit): */
  char *prep_msg;                /* admission finishes the request with this status and message */
  int prep_limit;                /* the failure was a limit (COSY_LLM_MAX_TEXT_TOKENS, a segment
                                    beyond the per-utterance capacity): submit
                                    refuses the request instead (sched_submit) */

  /* text streaming (COSY_SYNTH_TEXT_STREAM, lib/textstream.c): pushed text is committed to ids on
   * the caller's thread; the LLM thread takes them one at a time */
  int text_stream;
  char *tx_raw;                  /* pushed bytes not committed yet (caller's thread only) */
  size_t tx_len, tx_cap;
  /* what earlier pushes learnt about tx_raw, so that a push costs O(its bytes) (caller's thread
   * only): tx_raw[0..tx_ok) is complete UTF-8 (the rest, at most 3 bytes, a character cut
   * between pushes); the search for the next cut resumes at tx_scan (no sentence end before it;
   * word cuts: tx_cut is the last one before it, 0 when none, tx_prev the code point before it) */
  size_t tx_ok, tx_scan, tx_cut;
  uint32_t tx_prev;
  int tx_have_prev;
  size_t tx_total;               /* bytes accepted so far, at most COSY_TEXT_MAX_BYTES */
  int tx_any;                    /* a piece gave tokens (caller's thread only) */
  int32_t *tx_ids;               /* committed text ids (r->mu) */
  int tx_n, tx_cap_ids, tx_max;  /* (r->mu) tx_max: most text tokens */
  int tx_ended;                  /* cosy_request_end_text was called (r->mu) */
  /* marks (cosy_request_text_marks): one unit per committed sentence / word that gave tokens;
   * lib/textstream.c appends them with their ids (r->mu), the LLM thread (sched_llm.c bs_feed)
   * sets their speech position when their first token is fed (r->mu) */
  struct tx_unit {
    int64_t b0, b1;              /* bytes [b0, b1) of the concatenated pushes */
    int32_t tok0;                /* index of the first of its text ids in tx_ids */
    int32_t speech;              /* spoken speech tokens generated before it was fed; -1 not yet */
  } *tx_units;
  int tx_n_units, tx_cap_units;
  int tx_marked;                 /* units tx_units[0..tx_marked) have their speech position */
  size_t tx_base;                /* bytes committed and dropped from tx_raw (caller's thread) */

  /* long text (sched_jobs.c): the normalized segments, synthesized in turn (set when the first
   * segment's job is prepared: on the caller's thread at submission) */
  char **segs;
  int n_segs;
  /* the text ids of segments 1 .. n_segs-1 (their tts text per mode), tokenized once, at
   * submission, when plan_segments checks their limits; each taken (and the slot set to NULL)
   * by its segment's sched_job_prepare; what is left is freed with the request */
  int32_t **seg_ids;
  int32_t *seg_n_ids;
  int seg_tokenized;             /* tts texts tokenized for this request (atomic; for tests:
                                    each segment once) */
  int seg_alive;                 /* segment jobs made and not yet reaped (e->mu) */
  int seg_delivered;             /* segments whose audio is complete (e->mu) */
  cosy_status seg_err;           /* the first failure of a segment (e->mu) */
  char seg_msg[512];
  int64_t native_out;            /* native-rate samples delivered (token-to-wave thread) */

  /* pull buffer (fn == NULL): samples produced and not yet read */
  float *buf;
  int64_t buf_len, buf_cap, buf_read;
  int buf_oom;                   /* a chunk could not be buffered: the request fails with
                                    COSY_ERR_NO_MEMORY (r->mu) */
  /* for cosy_synthesize */
  int64_t offset;                /* samples delivered so far (output rate) */
  double t_submit, t_first, t_end;  /* cosy_now() at submit, first chunk, end */
  double llm_s, flow_s, vocoder_s;   /* stage times (written by the worker) */
  int32_t n_text_tokens, n_speech_tokens, n_chunks;
};

/* The scheduler (lib/scheduler.c): started by engine_create after the backend, stopped by
 * engine_destroy (every request cancelled and finished, its threads joined). */
cosy_status sched_start(struct cosy_engine *e);
void sched_stop(struct cosy_engine *e);
/* Run fn(e, arg) on the token-to-wave thread (the one that owns the flow's GPU work and the
 * voice front end's) between two of its batches and wait for it; fn's status comes back and, on
 * failure, its message (cosy_last_error() of this thread). Runs fn on the calling thread when
 * that is the token-to-wave thread itself (a push callback of an engine without a vocoder
 * thread) or the scheduler is not running; refuses
 * (COSY_ERR_INVALID_ARG) once the engine is being destroyed. */
cosy_status sched_run_on_t2w(struct cosy_engine *e, cosy_status (*fn)(struct cosy_engine *, void *),
                             void *arg);
/* COSY_OK, or COSY_ERR_DEVICE_LOST with a message when a sticky CUDA error has made the engine
 * unusable (every public call on it then fails so, except destroy). In sched_jobs.c, which marks
 * the engine lost. */
cosy_status engine_check_lost(const struct cosy_engine *e);
/* Queue a request (COSY_ERR_QUEUE_FULL beyond max_queued). */
cosy_status sched_submit(struct cosy_engine *e, struct cosy_request *r);
/* The scheduler's counters into s (batch sizes per stage). */
void sched_stats(const struct cosy_engine *e, cosy_engine_stats *s);

/* A request's state and delivery (lib/request.c; below the scheduler, which calls the first
 * two from its threads). */
/* Mark the request finished with status st (wakes waiters and readers; frees it when released). */
void request_finish(struct cosy_request *r, cosy_status st, const char *msg);
void request_free(struct cosy_request *r);
/* Deliver a chunk to the request (callback or pull buffer). Returns non-zero to cancel. */
int request_deliver(struct cosy_request *r, const float *pcm, int64_t n, int last);

/* text streaming (lib/textstream.c): push / end on the caller's thread (arguments checked) */
cosy_status textstream_push(struct cosy_request *r, const char *utf8);
cosy_status textstream_end(struct cosy_request *r);
size_t textstream_word_cut(const char *s, size_t n);
size_t textstream_next_word_cut(const char *s, size_t a, size_t n);
size_t textstream_sentence_end(const char *s, size_t n);
/* wake the LLM thread (text arrived) */
void sched_wake_llm(struct cosy_engine *e);

/* Copy a caller's cosy_synth_params (NULL = defaults), check every knob, fill defaults (api.c). */
cosy_status params_resolve(const cosy_synth_params *p, cosy_synth_params *out);

/* engine lifecycle and requests (lib/engine.c); api.c validates the arguments first */
cosy_status engine_create(const cosy_engine_config *cfg, cosy_engine **out);
void engine_destroy(cosy_engine *e);
cosy_status engine_stats(const cosy_engine *e, cosy_engine_stats *s);
void engine_info(const cosy_engine *e, cosy_engine_info *s);
cosy_status engine_submit(cosy_engine *e, const cosy_voice *v, const char *text,
                          const cosy_synth_params *p, cosy_chunk_fn fn, void *user,
                          cosy_request **out);
/* the caller's side of a request (lib/request.c) */
cosy_status request_read(cosy_request *r, float *buf, int64_t cap, int64_t *n_read,
                         int32_t timeout_ms);
cosy_status request_wait(cosy_request *r, int32_t timeout_ms);
void request_release(cosy_request *r);
/* a message to the engine's log callback at or below its log level (lib/log.c) */
void engine_log(const cosy_engine *e, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* voices (lib/voice.c) */
/* The values of a voice checked (speech tokens in [0, 6561), a finite mel, a finite non-zero
 * speaker embedding, a prompt text of at most COSY_TEXT_MAX_BYTES bytes and, as the LLM gets it
 * (with the system prefix unless it holds <|endofprompt|>), at most COSY_LLM_MAX_TEXT_TOKENS
 * tokens). from_file: the values come from a voice file (`file` names it): every failure is
 * COSY_ERR_MODEL_FORMAT; else COSY_ERR_INVALID_ARG, COSY_ERR_TEXT for the prompt text. */
cosy_status voice_check(struct cosy_engine *e, const char *prompt_text, const int32_t *tokens,
                        int32_t n_tokens, const float *mel, int32_t n_mel_frames, const float *spk,
                        const char *file);
cosy_status voice_load_file(cosy_engine *e, const char *path, cosy_voice **out);
cosy_status voice_save_file(const cosy_voice *v, const char *path);
cosy_status voice_create(struct cosy_engine *e, const char *prompt_text, const int32_t *tokens,
                         int32_t n_tokens, const float *mel, int32_t n_mel_frames, const float *spk,
                         struct cosy_voice **out);
void voice_ref(struct cosy_voice *v);
void voice_unref(struct cosy_voice *v);
/* voice_audio.c: a voice from raw audio (cosy_voice_from_audio after its argument checks) */
cosy_status voice_from_audio(struct cosy_engine *e, const float *pcm, int64_t n,
                             int32_t sample_rate, const char *prompt_text, struct cosy_voice **out);
void voice_frontend_free(struct voice_frontend *f);

/* voice_audio.c: the features of a voice from checked audio (pcm, n, sr as voice_from_audio takes
 * them), on threads. voice_feats_begin starts the prompt mel (x24 = resample to 24 kHz, then
 * cosy_mel_24k's frames) on a thread of its own that splits the work over mel_threads workers
 * (mel_threads 0: no thread; voice_feats_end computes it on the caller), then computes the 16 kHz
 * features on t16 threads (the caller one of them): x16 = resample to 16 kHz (output ranges
 * split), then the whisper log-mel and the kaldi fbank (frames split), the fbank's mean over time
 * removed; it returns when those are ready. voice_feats_end waits for the prompt mel.
 * voice_feats_free (always, after begin) joins a running thread and frees everything. The
 * features equal the single-threaded ones (ref_whisper_logmel, ref_kaldi_fbank, cosy_audio_to_mel)
 * bit for bit, whatever the thread counts (tests/test_voice_audio.c). */
typedef struct voice_feats {
  const float *pcm;
  int64_t n;
  int32_t sr;
  int t16, tmel;
  float *x16; /* malloc'd unless it is pcm (16 kHz input) */
  int64_t n16;
  float *lm;  /* [128][T_lm] */
  int32_t T_lm;
  float *fb;  /* [T_fb][80], mean over time removed */
  int32_t T_fb;
  float *x24; /* malloc'd when resampled */
  int64_t n24;
  float *mel; /* [T_mel][80] */
  int32_t T_mel;
  cosy_status mel_st;
  char mel_msg[512];
  pthread_t mel_th;
  int mel_started;
} voice_feats;
/* the thread counts a GPU engine uses: t16 and tmel for voice_feats_begin, from the CPUs this
 * process may run on */
void voice_feats_threads(int *t16, int *tmel);
cosy_status voice_feats_begin(voice_feats *f, const float *pcm, int64_t n, int32_t sr, int t16,
                              int tmel);
cosy_status voice_feats_end(voice_feats *f);
void voice_feats_free(voice_feats *f);

#endif
