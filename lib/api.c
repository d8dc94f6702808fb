#define _POSIX_C_SOURCE 200809L
/* api.c - the public entry points: argument validation, struct_size handling, configuration
 * defaults (version strings are in version.c, status strings in util.c: both at the bottom, which
 * every layer may call). The top layer of the host code (docs/architecture.md): the engine's
 * lifecycle is in engine.c, request state and delivery in request.c, the scheduler that runs
 * requests in scheduler.c (and sched_*.c), voices in voice.c and voice_audio.c. */
#include <math.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "cosyvoice.h"
#include "engine.h"
#include "sampling.h"
#include "util.h"

/* First published sizes of the versioned structs (ABI 0.1): callers must pass at least these. */
/* the first versions of the growing structs (older callers pass these sizes) */
#define MIN_ENGINE_CONFIG offsetof(cosy_engine_config, first_chunk_wait_max)
#define MIN_SYNTH_PARAMS sizeof(cosy_synth_params)
#define MIN_VOICE_FEATURES sizeof(cosy_voice_features)
#define MIN_ENGINE_STATS offsetof(cosy_engine_stats, llm_steps)
#define MIN_ENGINE_INFO sizeof(cosy_engine_info) /* the first version: the whole struct */
#define MIN_TEXT_MARK sizeof(cosy_text_mark)     /* the first version: the whole struct */

COSY_API void cosy_free(void *p) { free(p); }

/* ---- struct init ------------------------------------------------------------------------------
 * Each *_init zeroes min(struct_size, sizeof) bytes, sets the defaults that are not zero, and
 * stores struct_size. A caller built against an older, smaller struct passes its smaller size. */

#define INIT_STRUCT(T, p, size)                                   \
  do {                                                            \
    if (!(p) || (size) < sizeof(uint32_t)) return;                \
    T tmp_;                                                       \
    memset(&tmp_, 0, sizeof tmp_);

/* A caller built against a newer header (larger struct) gets its unknown tail zeroed too, up
 * to the same 1 MiB bound the copy-in accepts, so a fresh *_init never leaves garbage that the
 * library would later refuse as an unknown non-zero field. */
#define INIT_END(T, p, size)                                      \
    size_t n_ = (size) < sizeof(T) ? (size) : sizeof(T);          \
    memcpy((p), &tmp_, n_);                                       \
    if ((size) > sizeof(T) && (size) <= (1u << 20))               \
      memset((char *)(p) + sizeof(T), 0, (size) - sizeof(T));     \
    memcpy((p), &(size), sizeof(uint32_t));                       \
  } while (0)

COSY_API void cosy_engine_config_init(cosy_engine_config *c, uint32_t struct_size) {
  INIT_STRUCT(cosy_engine_config, c, struct_size)
  tmp_.device = 0;
  INIT_END(cosy_engine_config, c, struct_size);
}

COSY_API void cosy_engine_stats_init(cosy_engine_stats *s, uint32_t struct_size) {
  INIT_STRUCT(cosy_engine_stats, s, struct_size)
  INIT_END(cosy_engine_stats, s, struct_size);
}

COSY_API void cosy_engine_info_init(cosy_engine_info *s, uint32_t struct_size) {
  INIT_STRUCT(cosy_engine_info, s, struct_size)
  INIT_END(cosy_engine_info, s, struct_size);
}

COSY_API void cosy_voice_features_init(cosy_voice_features *f, uint32_t struct_size) {
  INIT_STRUCT(cosy_voice_features, f, struct_size)
  tmp_.speaker_dim = 192;
  INIT_END(cosy_voice_features, f, struct_size);
}

COSY_API void cosy_synth_params_init(cosy_synth_params *p, uint32_t struct_size) {
  INIT_STRUCT(cosy_synth_params, p, struct_size)
  INIT_END(cosy_synth_params, p, struct_size);
}

/* ---- synthesis parameters ------------------------------------------------------------------- */

/* Copy the caller's params (or defaults when p is NULL), check every knob and fill defaults. */
cosy_status params_resolve(const cosy_synth_params *p, cosy_synth_params *out) {
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  if (p) {
    cosy_status st = cosy_struct_in(out, sizeof *out, p, MIN_SYNTH_PARAMS, "cosy_synth_params");
    if (st) return st;
  }
  if (out->flags & ~(COSY_SYNTH_NO_TEXT_NORMALIZATION | COSY_SYNTH_FULL_ATTENTION_FINAL |
                     COSY_SYNTH_ONE_SHOT | COSY_SYNTH_TEXT_STREAM))
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_synth_params.flags 0x%x has unknown bits",
                    out->flags);
  if (out->mode < COSY_MODE_ZERO_SHOT || out->mode > COSY_MODE_INSTRUCT)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_synth_params.mode %d is not a COSY_MODE_*",
                    out->mode);
  if (out->mode == COSY_MODE_INSTRUCT && (!out->instruct_text || !out->instruct_text[0]))
    return cosy_err(COSY_ERR_INVALID_ARG, "COSY_MODE_INSTRUCT needs instruct_text");
  if (out->sample_rate == 0) out->sample_rate = 24000;
  if (out->sample_rate < 8000 || out->sample_rate > 48000)
    return cosy_err(COSY_ERR_INVALID_ARG, "sample_rate %d is outside 8000..48000",
                    out->sample_rate);
  if (out->speed == 0) out->speed = 1.0f;
  if (!(out->speed >= 0.5f && out->speed <= 2.0f))
    return cosy_err(COSY_ERR_INVALID_ARG, "speed %g is outside 0.5..2.0", (double)out->speed);
  if (out->temperature == 0) out->temperature = COSY_SAMPLING_TEMPERATURE;
  if (!(out->temperature > 0.0f && out->temperature <= COSY_SAMPLING_TEMPERATURE_MAX))
    return cosy_err(COSY_ERR_INVALID_ARG, "temperature %g is outside (0, %g]",
                    (double)out->temperature, (double)COSY_SAMPLING_TEMPERATURE_MAX);
  if (out->top_p == 0) out->top_p = COSY_SAMPLING_TOP_P;
  if (!(out->top_p > 0.0f && out->top_p <= 1.0f))
    return cosy_err(COSY_ERR_INVALID_ARG, "top_p %g is outside (0, 1]", (double)out->top_p);
  if (out->top_k == 0) out->top_k = COSY_SAMPLING_TOP_K;
  if (out->top_k < 1 || out->top_k > COSY_SAMPLING_TOP_K_MAX)
    return cosy_err(COSY_ERR_INVALID_ARG, "top_k %d is outside 1..%d", out->top_k,
                    COSY_SAMPLING_TOP_K_MAX);
  /* at least 5: the first chunk then has 2 * 5 - 8 >= 2 frames of audio after the vocoder's
   * 8-frame look-ahead */
  if (out->first_chunk_tokens != 0 &&
      (out->first_chunk_tokens < 5 || out->first_chunk_tokens > 100))
    return cosy_err(COSY_ERR_INVALID_ARG, "first_chunk_tokens %d is neither 0 (auto) nor in 5..100",
                    out->first_chunk_tokens);
  if (out->max_tokens < 0 || out->max_tokens > COSY_LLM_MAX_SPEECH_TOKENS)
    return cosy_err(COSY_ERR_INVALID_ARG, "max_tokens %d is outside 0..%d (COSY_LLM_MAX_SPEECH_TOKENS)",
                    out->max_tokens, COSY_LLM_MAX_SPEECH_TOKENS);
  if (out->min_tokens < 0 || out->min_tokens > COSY_LLM_MAX_SPEECH_TOKENS)
    return cosy_err(COSY_ERR_INVALID_ARG, "min_tokens %d is outside 0..%d (COSY_LLM_MAX_SPEECH_TOKENS)",
                    out->min_tokens, COSY_LLM_MAX_SPEECH_TOKENS);
  if (out->reserved)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_synth_params.reserved must be 0");
  return COSY_OK;
}

static cosy_status text_check(const char *text, const char *what) {
  if (!text) return cosy_err(COSY_ERR_INVALID_ARG, "%s is NULL", what);
  /* the limit first: nothing beyond it is read */
  size_t n = strnlen(text, COSY_TEXT_MAX_BYTES + 1);
  if (n > COSY_TEXT_MAX_BYTES)
    return cosy_err(COSY_ERR_TEXT,
                    "%s is longer than COSY_TEXT_MAX_BYTES (%d bytes); split it into several "
                    "requests",
                    what, COSY_TEXT_MAX_BYTES);
  long bad = cosy_utf8_invalid_at(text, n);
  if (bad >= 0) return cosy_err(COSY_ERR_TEXT, "%s is not valid UTF-8 (byte %ld)", what, bad);
  return COSY_OK;
}

/* ---- engine ---------------------------------------------------------------------------------- */

COSY_API cosy_status cosy_engine_create(const cosy_engine_config *c, cosy_engine **out) {
  if (out) *out = NULL;
  if (!c || !out) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_engine_create: NULL %s", !c ? "config" : "out");
  cosy_engine_config cfg;
  cosy_status st = cosy_struct_in(&cfg, sizeof cfg, c, MIN_ENGINE_CONFIG, "cosy_engine_config");
  if (st) return st;
  if (cfg.flags & ~COSY_ENGINE_BATCH_INVARIANT)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_engine_config.flags 0x%x has unknown bits",
                    cfg.flags);
  if (!cfg.model_path || !cfg.model_path[0])
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_engine_config.model_path is not set");
  if (cfg.device < -1 || cfg.device > 1023)
    return cosy_err(COSY_ERR_INVALID_ARG, "device %d is neither a CUDA ordinal nor COSY_DEVICE_CPU",
                    cfg.device);
  if (cfg.gpu_memory_fraction == 0) cfg.gpu_memory_fraction = 0.9f;
  if (!(cfg.gpu_memory_fraction > 0.0f && cfg.gpu_memory_fraction <= 1.0f))
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_memory_fraction %g is outside (0, 1]",
                    (double)cfg.gpu_memory_fraction);
  if (cfg.max_active < 0 || cfg.max_active > 4096)
    return cosy_err(COSY_ERR_INVALID_ARG, "max_active %d is outside 0..4096", cfg.max_active);
  if (cfg.max_queued < 0 || cfg.max_queued > 1 << 20)
    return cosy_err(COSY_ERR_INVALID_ARG, "max_queued %d is outside 0..1048576", cfg.max_queued);
  if (cfg.cpu_threads < 0 || cfg.cpu_threads > 1024)
    return cosy_err(COSY_ERR_INVALID_ARG, "cpu_threads %d is outside 0..1024", cfg.cpu_threads);
  if (cfg.log_level > COSY_LOG_DEBUG)
    return cosy_err(COSY_ERR_INVALID_ARG, "log_level %d is above COSY_LOG_DEBUG", cfg.log_level);
  if (cfg.max_queued == 0) cfg.max_queued = 1024;
#ifndef COSY_WITH_CUDA
  if (cfg.device >= 0)
    return cosy_err(COSY_ERR_UNSUPPORTED,
                    "this libcosyvoice was built without CUDA (make CUDA=1); use device = "
                    "COSY_DEVICE_CPU (-1)");
#endif
  if (cfg.vocoder_precision < 0 || cfg.vocoder_precision > COSY_VOCODER_FP16)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "vocoder_precision %d is not 0, COSY_VOCODER_ACCURATE, COSY_VOCODER_TF32 or "
                    "COSY_VOCODER_FP16",
                    cfg.vocoder_precision);
  /* GPU: fp16 operands with a per-job TF32 fallback (the error size of TF32, what PyTorch's Conv1d
   * computes on a GPU by default, at twice the tensor rate), see cosyvoice.h */
  if (cfg.vocoder_precision == 0) cfg.vocoder_precision = COSY_VOCODER_FP16;
  if (cfg.device >= 0 && cfg.max_active > COSY_GPU_MAX_ACTIVE)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "max_active %d: the GPU path decodes at most %d requests together",
                    cfg.max_active, COSY_GPU_MAX_ACTIVE);
  if (cfg.max_active == 0) cfg.max_active = cfg.device >= 0 ? COSY_GPU_DEFAULT_ACTIVE : 8;
  if (cfg.first_chunk_wait_max == 0) cfg.first_chunk_wait_max = cfg.device >= 0 ? 64 : -1;
  return engine_create(&cfg, out);
}

COSY_API void cosy_engine_destroy(cosy_engine *e) {
  if (e) engine_destroy(e);
}

COSY_API int32_t cosy_engine_sample_rate(const cosy_engine *e) {
  return e ? e->model->hp.sample_rate : 0;
}

COSY_API cosy_status cosy_engine_get_stats(const cosy_engine *e, cosy_engine_stats *out) {
  if (!e || !out) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_engine_get_stats: NULL argument");
  cosy_engine_stats s;
  cosy_status st = cosy_struct_in(&s, sizeof s, out, MIN_ENGINE_STATS, "cosy_engine_stats");
  if (st) return st;
  uint32_t caller = s.struct_size;
  st = engine_stats(e, &s);
  if (st) return st;
  s.struct_size = caller;
  memcpy(out, &s, caller < sizeof s ? caller : sizeof s);
  return engine_check_lost(e); /* a lost engine: the stats are filled, the status says so */
}

COSY_API cosy_status cosy_engine_get_info(const cosy_engine *e, cosy_engine_info *out) {
  if (!e || !out) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_engine_get_info: NULL argument");
  cosy_engine_info s;
  cosy_status st = cosy_struct_in(&s, sizeof s, out, MIN_ENGINE_INFO, "cosy_engine_info");
  if (st) return st;
  uint32_t caller = s.struct_size;
  engine_info(e, &s);
  s.struct_size = caller;
  memcpy(out, &s, caller < sizeof s ? caller : sizeof s);
  return COSY_OK;
}

/* ---- voices ---------------------------------------------------------------------------------- */

COSY_API cosy_status cosy_voice_load(cosy_engine *e, const char *path, cosy_voice **out) {
  if (out) *out = NULL;
  if (!e || !path || !out)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_voice_load: NULL %s", !e ? "engine" : !path ? "path" : "out");
  cosy_status st = engine_check_lost(e);
  if (st) return st;
  return voice_load_file(e, path, out);
}

COSY_API cosy_status cosy_voice_save(const cosy_voice *v, const char *path) {
  if (!v || !path) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_voice_save: NULL %s", !v ? "voice" : "path");
  return voice_save_file(v, path);
}

COSY_API cosy_status cosy_voice_from_features(cosy_engine *e, const cosy_voice_features *f,
                                              cosy_voice **out) {
  if (out) *out = NULL;
  if (!e || !f || !out)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_voice_from_features: NULL %s",
                    !e ? "engine" : !f ? "features" : "out");
  cosy_voice_features vf;
  cosy_status st = cosy_struct_in(&vf, sizeof vf, f, MIN_VOICE_FEATURES, "cosy_voice_features");
  if (st) return st;
  if ((st = engine_check_lost(e))) return st;
  const char *pt = vf.prompt_text ? vf.prompt_text : "";
  if ((st = text_check(pt, "prompt_text"))) return st;
  if (vf.n_speech_tokens < 0 || vf.n_speech_tokens > 3000)
    return cosy_err(COSY_ERR_INVALID_ARG, "n_speech_tokens %d is outside 0..3000 (120 s)",
                    vf.n_speech_tokens);
  if (vf.n_speech_tokens > 0 && !vf.speech_tokens)
    return cosy_err(COSY_ERR_INVALID_ARG, "speech_tokens is NULL but n_speech_tokens is %d",
                    vf.n_speech_tokens);
  if (vf.n_mel_frames < 0 || vf.n_mel_frames > 6000)
    return cosy_err(COSY_ERR_INVALID_ARG, "n_mel_frames %d is outside 0..6000", vf.n_mel_frames);
  if (vf.n_mel_frames > 0 && !vf.mel)
    return cosy_err(COSY_ERR_INVALID_ARG, "mel is NULL but n_mel_frames is %d", vf.n_mel_frames);
  if (vf.n_mel_frames < 2 * vf.n_speech_tokens)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "%d mel frames cannot cover %d speech tokens (need 2 frames per token)",
                    vf.n_mel_frames, vf.n_speech_tokens);
  if (vf.speaker_dim != 192 || !vf.speaker_embedding)
    return cosy_err(COSY_ERR_INVALID_ARG, "speaker_embedding must be 192 floats (got dim %d%s)",
                    vf.speaker_dim, vf.speaker_embedding ? "" : ", NULL");
  return voice_create(e, pt, vf.speech_tokens, vf.n_speech_tokens, vf.mel, vf.n_mel_frames,
                      vf.speaker_embedding, out);
}

COSY_API cosy_status cosy_voice_from_audio(cosy_engine *e, const float *pcm, int64_t n_samples,
                                           int32_t sample_rate, const char *transcript,
                                           cosy_voice **out) {
  if (out) *out = NULL;
  if (!e || !out)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_voice_from_audio: NULL %s", !e ? "engine" : "out");
  const char *pt = transcript ? transcript : "";
  cosy_status st = text_check(pt, "transcript");
  if (st) return st;
  if ((st = engine_check_lost(e))) return st;
  return voice_from_audio(e, pcm, n_samples, sample_rate, pt, out);
}

COSY_API void cosy_voice_release(cosy_voice *v) {
  if (v) voice_unref(v);
}

/* ---- requests -------------------------------------------------------------------------------- */

static cosy_status check_submit(cosy_engine *e, const cosy_voice *v, const char *text,
                                const cosy_synth_params *p, cosy_synth_params *out) {
  if (!e || !v)
    return cosy_err(COSY_ERR_INVALID_ARG, "NULL %s", !e ? "engine" : "voice");
  if (v->engine != e)
    return cosy_err(COSY_ERR_INVALID_ARG, "the voice belongs to another engine");
  cosy_status st = params_resolve(p, out);
  if (st) return st;
  if (out->flags & COSY_SYNTH_TEXT_STREAM) {
    if (out->mode != COSY_MODE_ZERO_SHOT)
      return cosy_err(COSY_ERR_UNSUPPORTED,
                      "COSY_SYNTH_TEXT_STREAM is implemented for COSY_MODE_ZERO_SHOT only");
    if (text && (st = text_check(text, "text"))) return st;
  } else if ((st = text_check(text, "text"))) {
    return st;
  }
  if (out->instruct_text && (st = text_check(out->instruct_text, "instruct_text"))) return st;
  return COSY_OK;
}

typedef struct collect {
  float *pcm;
  int64_t n, cap;
  int oom;
} collect;

static int32_t collect_fn(void *user, const cosy_chunk *c) {
  collect *k = (collect *)user;
  if (c->n_samples <= 0) return 0;
  if (k->n + c->n_samples > k->cap) {
    int64_t nc = k->cap ? k->cap : 24000;
    while (nc < k->n + c->n_samples) nc *= 2;
    float *np = (float *)cosy_realloc(k->pcm, (size_t)nc * sizeof *np);
    if (!np) {
      k->oom = 1;
      return 1;
    }
    k->pcm = np;
    k->cap = nc;
  }
  memcpy(k->pcm + k->n, c->pcm, (size_t)c->n_samples * sizeof *c->pcm);
  k->n += c->n_samples;
  return 0;
}

COSY_API cosy_status cosy_synthesize(cosy_engine *e, const cosy_voice *v, const char *text,
                                     const cosy_synth_params *p, float **pcm, int64_t *n_samples) {
  if (pcm) *pcm = NULL;
  if (n_samples) *n_samples = 0;
  if (!pcm || !n_samples) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_synthesize: NULL output");
  cosy_synth_params sp;
  cosy_status st = check_submit(e, v, text, p, &sp);
  if (st) return st;
  if (sp.flags & COSY_SYNTH_TEXT_STREAM)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "COSY_SYNTH_TEXT_STREAM needs cosy_request_submit (the text is pushed)");
  collect k = {0};
  cosy_request *r;
  if ((st = engine_submit(e, v, text, &sp, collect_fn, &k, &r))) return st;
  st = request_wait(r, -1); /* on failure it set the request's message on this thread */
  /* collect_fn cancels the request when it cannot grow its buffer: that is a memory failure */
  if (k.oom) st = cosy_err(COSY_ERR_NO_MEMORY, "out of host memory collecting the audio");
  request_release(r);
  if (!st && !k.pcm && !(k.pcm = (float *)cosy_calloc(1, sizeof(float)))) st = COSY_ERR_NO_MEMORY;
  if (st) {
    free(k.pcm);
    return st;
  }
  *pcm = k.pcm;
  *n_samples = k.n;
  return COSY_OK;
}

COSY_API cosy_status cosy_request_submit(cosy_engine *e, const cosy_voice *v, const char *text,
                                         const cosy_synth_params *p, cosy_chunk_fn fn, void *user,
                                         cosy_request **out) {
  if (out) *out = NULL;
  if (!out) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_request_submit: NULL out");
  cosy_synth_params sp;
  cosy_status st = check_submit(e, v, text, p, &sp);
  if (st) return st;
  /* speed != 1 implies COSY_SYNTH_ONE_SHOT (the scheduler collects every token first): the audio
   * arrives as one chunk at the end, and the request can be cancelled meanwhile */
  return engine_submit(e, v, text, &sp, fn, user, out);
}

COSY_API cosy_status cosy_request_push_text(cosy_request *r, const char *utf8) {
  if (!r || !utf8)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_request_push_text: NULL %s", !r ? "request" : "text");
  return textstream_push(r, utf8);
}

COSY_API cosy_status cosy_request_end_text(cosy_request *r) {
  if (!r) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_request_end_text: NULL request");
  return textstream_end(r);
}

COSY_API cosy_status cosy_request_read(cosy_request *r, float *buf, int64_t cap, int64_t *n_read,
                                       int32_t timeout_ms) {
  if (n_read) *n_read = 0;
  if (!r || !buf || !n_read)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_request_read: NULL %s", !r ? "request" : !buf ? "buf" : "n_read");
  if (cap <= 0) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_request_read: cap %lld <= 0", (long long)cap);
  if (timeout_ms < -1)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_request_read: timeout_ms %d < -1", timeout_ms);
  if (r->fn)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_request_read: this request pushes its audio to a callback");
  return request_read(r, buf, cap, n_read, timeout_ms);
}

COSY_API void cosy_request_stats_init(cosy_request_stats *s, uint32_t struct_size) {
  INIT_STRUCT(cosy_request_stats, s, struct_size)
  INIT_END(cosy_request_stats, s, struct_size);
}

COSY_API cosy_status cosy_request_get_stats(const cosy_request *r, cosy_request_stats *out) {
  if (!r || !out) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_request_get_stats: NULL argument");
  cosy_request_stats s;
  cosy_status st = cosy_struct_in(&s, sizeof s, out, sizeof(cosy_request_stats), "cosy_request_stats");
  if (st) return st;
  uint32_t caller = s.struct_size;
  cosy_request *m = (cosy_request *)r;
  pthread_mutex_lock(&m->mu);
  double now = cosy_now();
  s.done = r->state == REQ_DONE;
  s.ttfb_s = r->t_first > 0 ? r->t_first - r->t_submit : 0;
  s.total_s = (s.done ? r->t_end : now) - r->t_submit;
  s.llm_s = r->llm_s;
  s.flow_s = r->flow_s;
  s.vocoder_s = r->vocoder_s;
  s.n_samples = r->offset;
  s.n_text_tokens = r->n_text_tokens;
  s.n_speech_tokens = r->n_speech_tokens;
  s.n_chunks = r->n_chunks;
  pthread_mutex_unlock(&m->mu);
  s.struct_size = caller;
  memcpy(out, &s, caller < sizeof s ? caller : sizeof s);
  return COSY_OK;
}

COSY_API void cosy_text_mark_init(cosy_text_mark *m, uint32_t struct_size) {
  INIT_STRUCT(cosy_text_mark, m, struct_size)
  tmp_.sample = -1;
  tmp_.speech_token = -1;
  INIT_END(cosy_text_mark, m, struct_size);
}

/* A unit's mark (r->mu held). A token's samples at the output rate: 2 mel frames of 480 native
 * samples (the vocoder's hop; lib/model.c checks it) each, resampled to the request's rate. */
static void mark_of(const cosy_request *r, const struct tx_unit *t, cosy_text_mark *m) {
  const cosy_hparams *hp = &r->engine->model->hp;
  m->text_begin = t->b0;
  m->text_end = t->b1;
  m->text_token = t->tok0;
  m->speech_token = t->speech;
  m->sample = t->speech < 0 ? -1
                            : (int64_t)t->speech * 480 * hp->token_mel_ratio *
                                  r->params.sample_rate / hp->sample_rate;
}

COSY_API cosy_status cosy_request_text_marks(const cosy_request *r, int32_t first,
                                             cosy_text_mark *out, int32_t cap, int32_t *n_marks) {
  if (n_marks) *n_marks = 0;
  if (!r || !n_marks)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_request_text_marks: NULL %s", !r ? "request" : "n_marks");
  if (first < 0 || cap < 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_request_text_marks: %s %d < 0",
                    first < 0 ? "first" : "cap", first < 0 ? first : cap);
  if (cap > 0 && !out)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_request_text_marks: NULL out with cap %d", cap);
  cosy_text_mark m;
  uint32_t stride = 0;
  if (cap > 0) {
    cosy_status st = cosy_struct_in(&m, sizeof m, out, MIN_TEXT_MARK, "cosy_text_mark");
    if (st) return st;
    stride = m.struct_size;
  }
  const size_t n_copy = stride < sizeof m ? stride : sizeof m;
  cosy_request *q = (cosy_request *)r;
  pthread_mutex_lock(&q->mu);
  int total;
  if (r->text_stream) {
    total = r->tx_n_units;
    for (int32_t i = 0; i < cap && first + i < total; i++) {
      memset(&m, 0, sizeof m);
      mark_of(r, &r->tx_units[first + i], &m);
      m.struct_size = stride;
      memcpy((char *)out + (size_t)i * stride, &m, n_copy);
    }
  } else { /* the whole text is in the LLM's input before its first speech token */
    total = r->text && r->text[0] ? 1 : 0;
    if (total && first == 0 && cap > 0) {
      struct tx_unit t = {0, (int64_t)strlen(r->text), 0, 0};
      memset(&m, 0, sizeof m);
      mark_of(r, &t, &m);
      m.struct_size = stride;
      memcpy(out, &m, n_copy);
    }
  }
  pthread_mutex_unlock(&q->mu);
  *n_marks = total;
  return COSY_OK;
}

COSY_API void cosy_request_cancel(cosy_request *r) {
  if (r) __atomic_store_n(&r->cancel, 1, __ATOMIC_SEQ_CST);
}

COSY_API cosy_status cosy_request_wait(cosy_request *r, int32_t timeout_ms) {
  if (!r) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_request_wait: NULL request");
  if (timeout_ms < -1)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_request_wait: timeout_ms %d < -1", timeout_ms);
  return request_wait(r, timeout_ms);
}

COSY_API void cosy_request_release(cosy_request *r) {
  if (r) request_release(r);
}
