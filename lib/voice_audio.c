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
 * computation, to an fp32 ulp (audio.c; tests/data/resample), so prompts at other rates give the
 * official features (the speech tokenizer's log-mel within 5e-5 at 22.05 and 44.1 kHz). The 16 kHz
 * audio feeds both the log-mel and the fbank, the 24 kHz audio the prompt mel. libsamplerate's sharper
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
                    "cosyvoice-convert from the released model folder, which holds "
                    "speech_tokenizer_v3.onnx and "
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
  float peak = 0.0f, lo = pcm[0], hi = pcm[0];
  int64_t clipped = 0;
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const float x = pcm[i], a = fabsf(x);
    if (!isfinite(x))
      return cosy_err(COSY_ERR_INVALID_ARG, "cosy_voice_from_audio: sample %lld is %s", (long long)i,
                      isnan(x) ? "NaN" : "infinite");
    if (a > peak) peak = a;
    if (x < lo) lo = x;
    if (x > hi) hi = x;
    clipped += a >= CLIP_LEVEL;
    sum += x;
  }
  /* silence is judged without the DC offset (a constant signal carries no voice): the peak of
   * |x - mean| is at the smallest or the largest sample */
  const double mean = sum / (double)n;
  const double ac_peak = fmax((double)hi - mean, mean - (double)lo);
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

/* ---- features on threads (engine.h: voice_feats) ---------------------------------------------- */

void voice_feats_threads(int *t16, int *tmel) {
  const int c = cosy_cpu_count();
  /* the prompt mel has the models' GPU job to hide behind: a quarter of the CPUs (at most 4), the
   * 16 kHz features, which the job waits for, the rest (at most 12) */
  int m = c / 4;
  if (m < 1) m = 1;
  if (m > 4) m = 4;
  int k = c - m;
  if (k < 1) k = 1;
  if (k > 12) k = 12;
  *t16 = k;
  *tmel = m;
}

typedef struct lm_fb_job {
  voice_feats *f;
  float lmax[256];
  cosy_status st[256];
} lm_fb_job;

static void lm_fb_worker(void *arg, int i, int n) {
  lm_fb_job *j = (lm_fb_job *)arg;
  voice_feats *f = j->f;
  j->st[i] = ref_whisper_logmel_frames(f->x16, f->n16, (int32_t)((int64_t)f->T_lm * i / n),
                                       (int32_t)((int64_t)f->T_lm * (i + 1) / n), f->lm,
                                       &j->lmax[i]);
  if (!j->st[i])
    j->st[i] = ref_kaldi_fbank_frames(f->x16, f->n16, (int32_t)((int64_t)f->T_fb * i / n),
                                      (int32_t)((int64_t)f->T_fb * (i + 1) / n), f->fb);
}

typedef struct mel_job {
  voice_feats *f;
  const float *x;
  int64_t n;
  cosy_status st[256];
} mel_job;

static void mel_worker(void *arg, int i, int n) {
  mel_job *j = (mel_job *)arg;
  const int32_t T = j->f->T_mel;
  j->st[i] = cosy_mel_24k_frames(j->x, j->n, (int32_t)((int64_t)T * i / n),
                                 (int32_t)((int64_t)T * (i + 1) / n), j->f->mel);
}

/* the status of a split run: the frame functions fail only in their one-time setup, which the
 * caller made (an empty range) before starting the workers, so this is a safeguard */
static cosy_status first_status(const cosy_status *st, int n, const char *what) {
  for (int i = 0; i < n; i++)
    if (st[i]) return cosy_err(st[i], "cosy_voice_from_audio: %s failed (status %d)", what, st[i]);
  return COSY_OK;
}

static cosy_status mel_compute(voice_feats *f) {
  const int t = f->tmel > 0 ? f->tmel : 1;
  const float *x = f->pcm;
  int64_t n = f->n;
  cosy_status st;
  if (f->sr != COSY_MEL_SR) {
    if ((st = cosy_resample_sinc_hann_mt(f->pcm, f->n, f->sr, COSY_MEL_SR, t, &f->x24, &f->n24)))
      return st;
    x = f->x24, n = f->n24;
  }
  if ((st = cosy_mel_24k_check(n, &f->T_mel))) return st;
  if ((st = cosy_mel_24k_frames(x, n, 0, 0, NULL))) return st; /* the one-time setup */
  f->mel = (float *)cosy_malloc((size_t)f->T_mel * COSY_MEL_BINS * sizeof(float));
  if (!f->mel) return COSY_ERR_NO_MEMORY;
  mel_job j;
  memset(&j, 0, sizeof j);
  j.f = f, j.x = x, j.n = n;
  int w = t;
  if (w > f->T_mel / 16) w = f->T_mel / 16; /* at least 16 frames a worker */
  if (w < 1) w = 1;
  cosy_parallel(w, mel_worker, &j);
  return first_status(j.st, w, "the prompt mel");
}

static void *mel_main(void *arg) {
  voice_feats *f = (voice_feats *)arg;
  f->mel_st = mel_compute(f);
  if (f->mel_st) snprintf(f->mel_msg, sizeof f->mel_msg, "%s", cosy_last_error());
  return NULL;
}

cosy_status voice_feats_begin(voice_feats *f, const float *pcm, int64_t n, int32_t sr, int t16,
                              int tmel) {
  memset(f, 0, sizeof *f);
  f->pcm = pcm, f->n = n, f->sr = sr;
  f->t16 = t16 < 1 ? 1 : t16 > 256 ? 256 : t16;
  f->tmel = tmel < 0 ? 0 : tmel > 256 ? 256 : tmel;
  if (f->tmel > 0) f->mel_started = pthread_create(&f->mel_th, NULL, mel_main, f) == 0;
  if (f->tmel > 0 && !f->mel_started) f->tmel = 1; /* no thread: voice_feats_end computes it */
  cosy_status st;
  if (sr == S3TOK_SR) {
    f->x16 = (float *)pcm;
    f->n16 = n;
  } else if ((st = cosy_resample_sinc_hann_mt(pcm, n, sr, S3TOK_SR, f->t16, &f->x16, &f->n16))) {
    return st;
  }
  if ((st = ref_whisper_logmel_check(f->n16, &f->T_lm))) return st;
  if ((st = ref_kaldi_fbank_check(f->n16, &f->T_fb))) return st;
  float lmax0;
  if ((st = ref_whisper_logmel_frames(f->x16, f->n16, 0, 0, NULL, &lmax0))) return st;
  if ((st = ref_kaldi_fbank_frames(f->x16, f->n16, 0, 0, NULL))) return st;
  f->lm = (float *)cosy_malloc((size_t)128 * f->T_lm * sizeof(float));
  f->fb = (float *)cosy_malloc((size_t)80 * f->T_fb * sizeof(float));
  if (!f->lm || !f->fb) return COSY_ERR_NO_MEMORY;
  lm_fb_job *j = (lm_fb_job *)cosy_malloc(sizeof *j);
  if (!j) return COSY_ERR_NO_MEMORY;
  j->f = f;
  int w = f->t16;
  if (w > f->T_fb / 16) w = f->T_fb / 16; /* at least 16 frames a worker */
  if (w < 1) w = 1;
  cosy_parallel(w, lm_fb_worker, j);
  st = first_status(j->st, w, "the log-mel or the fbank");
  float lmax = -INFINITY;
  for (int i = 0; i < w; i++)
    if (j->lmax[i] > lmax) lmax = j->lmax[i];
  free(j);
  if (st) return st;
  ref_whisper_logmel_finish(f->lm, f->T_lm, lmax);
  /* the fbank minus its mean over time, per bin (sums in double, frame by frame) */
  double sum[80] = {0};
  for (int32_t t = 0; t < f->T_fb; t++) {
    const float *r = f->fb + (size_t)t * 80;
    for (int m = 0; m < 80; m++) sum[m] += r[m];
  }
  float mean[80];
  for (int m = 0; m < 80; m++) mean[m] = (float)(sum[m] / f->T_fb);
  for (int32_t t = 0; t < f->T_fb; t++) {
    float *r = f->fb + (size_t)t * 80;
    for (int m = 0; m < 80; m++) r[m] -= mean[m];
  }
  return COSY_OK;
}

cosy_status voice_feats_end(voice_feats *f) {
  if (f->mel_started) {
    pthread_join(f->mel_th, NULL);
    f->mel_started = 0;
    return f->mel_st ? cosy_err(f->mel_st, "%s", f->mel_msg) : COSY_OK;
  }
  if (!f->mel && !f->mel_st) f->mel_st = mel_compute(f);
  return f->mel_st;
}

void voice_feats_free(voice_feats *f) {
  if (f->mel_started) pthread_join(f->mel_th, NULL); /* an early failure: the prompt mel still runs */
  f->mel_started = 0;
  if (f->x16 != f->pcm) free(f->x16);
  free(f->lm), free(f->fb), free(f->x24), free(f->mel);
  f->x16 = f->lm = f->fb = f->x24 = f->mel = NULL;
}

cosy_status voice_from_audio(cosy_engine *e, const float *pcm, int64_t n, int32_t sr,
                             const char *prompt_text, cosy_voice **out) {
  *out = NULL;
  struct voice_frontend *f;
  cosy_status st = get_frontend(e, &f); /* first: a model without it says so whatever the audio */
  if (st) return st;
  if ((st = check_audio(pcm, n, sr))) return st;
  /* a backend that runs the models (the GPU) waits for the 16 kHz features only: they are split
   * over most of the CPUs, the prompt mel runs beside on the rest and overlaps the models' job.
   * The CPU engine computes them on the calling thread, as it runs the models. */
  int t16 = 1, tmel = 0;
  if (e->be->voice_features) voice_feats_threads(&t16, &tmel);
  voice_feats vf;
  int32_t *tok = NULL, n_tok = 0;
  float spk[192];
  memset(spk, 0, sizeof spk);
  if ((st = voice_feats_begin(&vf, pcm, n, sr, t16, tmel))) goto done;
  st = COSY_ERR_UNSUPPORTED;
  if (e->be->voice_features) {
    fe_job job = {vf.lm, vf.T_lm, vf.fb, vf.T_fb, NULL, 0, spk};
    st = sched_run_on_t2w(e, run_fe_job, &job);
    tok = job.tok, n_tok = job.n_tok;
    if (st && st != COSY_ERR_UNSUPPORTED) goto done;
  }
  if (st == COSY_ERR_UNSUPPORTED) { /* the CPU reference */
    free(tok);
    tok = NULL;
    if ((st = ref_s3tok_encode(f->s3, vf.lm, vf.T_lm, &tok, &n_tok, NULL, NULL, NULL, NULL)))
      goto done;
    if ((st = ref_campplus_embed(f->cam, vf.fb, vf.T_fb, spk, NULL, NULL, NULL))) goto done;
  }
  if ((st = voice_feats_end(&vf))) goto done;
  st = voice_create(e, prompt_text, tok, n_tok, vf.mel, vf.T_mel, spk, out);
done:
  voice_feats_free(&vf);
  free(tok);
  if (st == COSY_OK) cosy_err_clear();
  return st;
}
