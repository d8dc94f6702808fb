/* voice_audio.c - a voice from raw audio: what the official front end does for a zero-shot
 * prompt (frontend_zero_shot), as the CPU reference computes it (GPU engines: below):
 *
 *   x24 = resample(pcm, rate -> 24000)    prompt mel, cosy_audio_to_mel      [T][80] (50 Hz)
 *   x16 = resample(pcm, rate -> 16000)    cosy_resample_sinc_hann
 *   tokens = speech tokenizer v3 (whisper log-mel of x16)   (ref/s3tok.h; _extract_speech_token)
 *   spk    = CAM++ (kaldi fbank of x16 minus its mean over time) (ref/campplus.h;
 *            _extract_spk_embedding)
 *   voice_create aligns them: n = min(T / 2, n_tokens) tokens and 2 n mel frames.
 *
 * Resampling: the official load_wav resamples with torchaudio.transforms.Resample's defaults
 * (sinc_interp_hann, width 6, rolloff 0.99) to both 16 and 24 kHz; cosy_resample_sinc_hann is that
 * formula (audio.h), so non-16/24 kHz prompts give the official features. libsamplerate's sharper
 * filter would move the top mel bands and the fbank's highest bins, so it is not used here.
 *
 * Input checks (COSY_ERR_INVALID_ARG, message names the problem): NULL or empty audio; rate
 * outside [16000, 192000] (the official front end refuses rates below 16 kHz); a NaN or Inf
 * sample; shorter than 0.5 s; longer than 30 s (the official _extract_speech_token's limit);
 * silent (peak of the signal minus its mean below 1e-4, -80 dBFS: a DC offset alone is
 * silence); not scaled to [-1, 1] (peak above 4: e.g. int16 values passed as float); clipped
 * (more than 1% of the samples at |x| >= 0.999).
 *
 * Weights: the two models are set up on first use (one per engine, kept until the engine is
 * destroyed; their weights are the model file's mapped F32 data, read-only, so calls may run in
 * parallel). A model
 * file without them gives COSY_ERR_UNSUPPORTED.
 *
 * GPU engines: the features (resampling, log-mel, fbank, prompt mel) stay on the calling thread's
 * CPU (a few ms for 10 s: the mel filterbanks are sparse, see ref/s3tok.c); the two models run on
 * the GPU (lib/gpu/frontend.h) through the backend's voice_features, as one job that the
 * scheduler's token-to-wave thread runs between two of its flow/vocoder batches
 * (sched_run_on_t2w): cloning shares the GPU with synthesis the way every other piece of GPU work
 * does, and the caller waits only for its own job. A GPU engine without the GPU front end (its
 * memory budget could not hold it) runs the CPU models instead. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio.h"
#include "engine.h"
#include "ref/campplus.h"
#include "ref/s3tok.h"
#include "util.h"

#define MIN_SECONDS 0.5
#define SILENT_PEAK 1e-4f
#define MAX_PEAK 4.0f
#define CLIP_LEVEL 0.999f
#define CLIP_FRACTION 0.01

struct voice_frontend {
  ref_s3tok *s3;
  ref_campplus *cam;
};

static pthread_mutex_t fe_mu = PTHREAD_MUTEX_INITIALIZER;

void voice_frontend_free(struct voice_frontend *f) {
  if (!f) return;
  ref_s3tok_free(f->s3);
  ref_campplus_free(f->cam);
  free(f);
}

static cosy_status get_frontend(cosy_engine *e, struct voice_frontend **out) {
  cosy_status st = COSY_OK;
  pthread_mutex_lock(&fe_mu);
  if (!e->frontend) {
    const cosy_hparams *h = &e->model->hp;
    if (!h->has_s3tok || !h->has_campplus) {
      st = cosy_err(COSY_ERR_UNSUPPORTED,
                    "cosy_voice_from_audio: the model file has no %s; convert it with "
                    "tools/convert.py from a model directory holding speech_tokenizer_v3.onnx and "
                    "campplus.onnx (or make voices with cosy_voice_from_features)",
                    !h->has_s3tok && !h->has_campplus ? "speech tokenizer and no CAM++ model"
                    : !h->has_s3tok                   ? "speech tokenizer (s3tok.*)"
                                                      : "CAM++ speaker model (campplus.*)");
    } else {
      struct voice_frontend *f = (struct voice_frontend *)cosy_calloc(1, sizeof *f);
      if (!f) st = COSY_ERR_NO_MEMORY;
      if (!st) st = ref_s3tok_create(e->model, &f->s3);
      if (!st) st = ref_campplus_create(e->model, &f->cam);
      if (st) voice_frontend_free(f);
      else e->frontend = f;
    }
  }
  *out = e->frontend;
  pthread_mutex_unlock(&fe_mu);
  return st;
}

static cosy_status check_audio(const float *pcm, int64_t n, int32_t sr) {
  if (!pcm) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_voice_from_audio: pcm is NULL");
  if (n <= 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_voice_from_audio: the audio is empty (%lld samples)",
                    (long long)n);
  if (sr < 16000 || sr > 192000)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_voice_from_audio: sample rate %d Hz is not supported (16000 .. 192000 Hz; "
                    "the official front end refuses prompts below 16 kHz)", (int)sr);
  if ((double)n < MIN_SECONDS * sr)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_voice_from_audio: the prompt is %.5g s long (%lld samples at %d Hz); at "
                    "least %.1f s is needed", (double)n / sr, (long long)n, (int)sr, MIN_SECONDS);
  if ((double)n > (double)S3TOK_MAX_SECONDS * sr)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_voice_from_audio: the prompt is %.1f s long; the speech tokenizer takes at "
                    "most %d s (as the official front end): cut it", (double)n / sr,
                    S3TOK_MAX_SECONDS);
  float peak = 0.0f;
  int64_t clipped = 0;
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) {
    float a = fabsf(pcm[i]);
    if (!isfinite(pcm[i]))
      return cosy_err(COSY_ERR_INVALID_ARG, "cosy_voice_from_audio: sample %lld is %s", (long long)i,
                      isnan(pcm[i]) ? "NaN" : "infinite");
    if (a > peak) peak = a;
    clipped += a >= CLIP_LEVEL;
    sum += pcm[i];
  }
  /* silence is judged without the DC offset (a constant signal carries no voice) */
  const double mean = sum / (double)n;
  double ac_peak = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double a = fabs((double)pcm[i] - mean);
    if (a > ac_peak) ac_peak = a;
  }
  if (ac_peak < SILENT_PEAK)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_voice_from_audio: the audio is silent (peak %.2g around its mean %.2g, "
                    "below -80 dBFS)", ac_peak, mean);
  if (peak > MAX_PEAK)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_voice_from_audio: peak sample %.4g: float audio must be scaled to [-1, 1] "
                    "(integer PCM divided by 2^(bits-1))", (double)peak);
  if ((double)clipped > CLIP_FRACTION * (double)n)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_voice_from_audio: the audio is clipped (%.1f%% of the samples at full "
                    "scale); record it again at a lower level", 100.0 * (double)clipped / (double)n);
  return COSY_OK;
}

/* the backend's part of a voice, run on the scheduler's token-to-wave thread */
typedef struct fe_job {
  const float *lm;
  int32_t T_lm;
  const float *fb;
  int32_t T_fb;
  int32_t *tok; /* out */
  int32_t n_tok;
  float *spk;
} fe_job;

static cosy_status run_fe_job(cosy_engine *e, void *arg) {
  fe_job *j = (fe_job *)arg;
  return e->be->voice_features(e, j->lm, j->T_lm, j->fb, j->T_fb, &j->tok, &j->n_tok, j->spk);
}

/* Feature work that can run on a helper thread: the prompt mel (24 kHz) of the input, or the
 * mean-removed fbank of the 16 kHz audio. The status and message come back with the result. */
typedef struct feat_task {
  const float *x;
  int64_t n;
  int32_t sr;
  int fbank;      /* 0: prompt mel of x at sr; 1: fbank of x (16 kHz) minus its mean */
  float *out;     /* malloc'd */
  int32_t T;
  cosy_status st;
  char msg[512];
  pthread_t th;
  int started;
} feat_task;

static void *feat_main(void *arg) {
  feat_task *t = (feat_task *)arg;
  if (!t->fbank) {
    t->st = cosy_audio_to_mel(t->x, t->n, t->sr, &t->out, &t->T);
  } else if (!(t->st = ref_kaldi_fbank(t->x, t->n, &t->out, &t->T))) {
    float *fb = t->out;
    for (int m = 0; m < 80; m++) {
      double s = 0;
      for (int32_t i = 0; i < t->T; i++) s += fb[(size_t)i * 80 + m];
      float mean = (float)(s / t->T);
      for (int32_t i = 0; i < t->T; i++) fb[(size_t)i * 80 + m] -= mean;
    }
  }
  if (t->st) snprintf(t->msg, sizeof t->msg, "%s", cosy_last_error());
  return NULL;
}

/* start the task on a thread when threaded (else, or when no thread can be made, run it here) */
static void feat_start(feat_task *t, int threaded) {
  t->started = threaded && pthread_create(&t->th, NULL, feat_main, t) == 0;
  if (!t->started) feat_main(t);
}

static cosy_status feat_join(feat_task *t) {
  if (t->started) pthread_join(t->th, NULL);
  t->started = 0;
  return t->st ? cosy_err(t->st, "%s", t->msg) : COSY_OK;
}

cosy_status voice_from_audio(cosy_engine *e, const float *pcm, int64_t n, int32_t sr,
                             const char *prompt_text, cosy_voice **out) {
  *out = NULL;
  struct voice_frontend *f;
  cosy_status st = get_frontend(e, &f); /* first: a model without it says so whatever the audio */
  if (st) return st;
  if ((st = check_audio(pcm, n, sr))) return st;
  /* a backend that runs the models (the GPU) waits for features only: compute them on three
   * threads (prompt mel | log-mel | fbank), the prompt mel overlapping the models' job too */
  const int threaded = e->be->voice_features != NULL;
  feat_task tm, tf;
  memset(&tm, 0, sizeof tm);
  memset(&tf, 0, sizeof tf);
  tm.x = pcm, tm.n = n, tm.sr = sr;
  feat_start(&tm, threaded);
  if (!tm.started && tm.st) return feat_join(&tm);
  float *x16 = NULL, *lm = NULL;
  int32_t *tok = NULL, n_tok = 0, T_lm = 0;
  int64_t n16 = 0;
  float spk[192];
  memset(spk, 0, sizeof spk);
  if (sr == S3TOK_SR) {
    x16 = (float *)cosy_malloc((size_t)n * sizeof(float));
    if (!x16) st = COSY_ERR_NO_MEMORY;
    else memcpy(x16, pcm, (size_t)n * sizeof(float));
    n16 = n;
  } else {
    st = cosy_resample_sinc_hann(pcm, n, sr, S3TOK_SR, &x16, &n16);
  }
  if (st) goto done;
  tf.x = x16, tf.n = n16, tf.fbank = 1;
  feat_start(&tf, threaded);
  st = ref_whisper_logmel(x16, n16, &lm, &T_lm);
  {
    cosy_status sf = feat_join(&tf);
    if (!st) st = sf;
  }
  if (st) goto done;
  st = COSY_ERR_UNSUPPORTED;
  if (e->be->voice_features) {
    fe_job job = {lm, T_lm, tf.out, tf.T, NULL, 0, spk};
    st = sched_run_on_t2w(e, run_fe_job, &job);
    tok = job.tok, n_tok = job.n_tok;
    if (st && st != COSY_ERR_UNSUPPORTED) goto done;
  }
  if (st == COSY_ERR_UNSUPPORTED) { /* the CPU reference */
    free(tok);
    tok = NULL;
    if ((st = ref_s3tok_encode(f->s3, lm, T_lm, &tok, &n_tok, NULL, NULL, NULL, NULL))) goto done;
    if ((st = ref_campplus_embed(f->cam, tf.out, tf.T, spk, NULL, NULL, NULL))) goto done;
  }
  if ((st = feat_join(&tm))) goto done;
  st = voice_create(e, prompt_text, tok, n_tok, tm.out, tm.T, spk, out);
done:
  if (tm.started) pthread_join(tm.th, NULL); /* an early failure: the prompt mel still runs */
  free(x16), free(lm), free(tf.out), free(tm.out), free(tok);
  if (st == COSY_OK) cosy_err_clear();
  return st;
}
