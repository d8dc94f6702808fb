/* voice_audio.c - a voice from raw audio: what the official front end does for a zero-shot
 * prompt (frontend_zero_shot), on the CPU reference path:
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
 * silent (peak below 1e-4, -80 dBFS); not scaled to [-1, 1] (peak above 4: e.g. int16 values
 * passed as float); clipped (more than 1% of the samples at |x| >= 0.999).
 *
 * Weights: the two models are set up on first use (one per engine, kept until the engine is
 * destroyed; their weights are the model file's mapped F32 data, read-only, so calls may run in
 * parallel). A model
 * file without them gives COSY_ERR_UNSUPPORTED. A GPU engine runs this same CPU code. */
#include <math.h>
#include <pthread.h>
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
  for (int64_t i = 0; i < n; i++) {
    float a = fabsf(pcm[i]);
    if (!isfinite(pcm[i]))
      return cosy_err(COSY_ERR_INVALID_ARG, "cosy_voice_from_audio: sample %lld is %s", (long long)i,
                      isnan(pcm[i]) ? "NaN" : "infinite");
    if (a > peak) peak = a;
    clipped += a >= CLIP_LEVEL;
  }
  if (peak < SILENT_PEAK)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_voice_from_audio: the audio is silent (peak %.2g, below -80 dBFS)",
                    (double)peak);
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

cosy_status voice_from_audio(cosy_engine *e, const float *pcm, int64_t n, int32_t sr,
                             const char *prompt_text, cosy_voice **out) {
  *out = NULL;
  struct voice_frontend *f;
  cosy_status st = get_frontend(e, &f); /* first: a model without it says so whatever the audio */
  if (st) return st;
  if ((st = check_audio(pcm, n, sr))) return st;
  float *x16 = NULL, *lm = NULL, *fb = NULL, *mel = NULL;
  int32_t *tok = NULL, n_tok = 0, T_lm = 0, T_fb = 0, T_mel = 0;
  int64_t n16 = 0;
  float spk[192];
  if (sr == S3TOK_SR) {
    x16 = (float *)cosy_malloc((size_t)n * sizeof(float));
    if (!x16) return COSY_ERR_NO_MEMORY;
    memcpy(x16, pcm, (size_t)n * sizeof(float));
    n16 = n;
  } else if ((st = cosy_resample_sinc_hann(pcm, n, sr, S3TOK_SR, &x16, &n16))) {
    return st;
  }
  if ((st = ref_whisper_logmel(x16, n16, &lm, &T_lm))) goto done;
  if ((st = ref_s3tok_encode(f->s3, lm, T_lm, &tok, &n_tok, NULL, NULL, NULL, NULL))) goto done;
  if ((st = ref_kaldi_fbank(x16, n16, &fb, &T_fb))) goto done;
  for (int m = 0; m < 80; m++) {
    double s = 0;
    for (int32_t t = 0; t < T_fb; t++) s += fb[(size_t)t * 80 + m];
    float mean = (float)(s / T_fb);
    for (int32_t t = 0; t < T_fb; t++) fb[(size_t)t * 80 + m] -= mean;
  }
  if ((st = ref_campplus_embed(f->cam, fb, T_fb, spk, NULL, NULL, NULL))) goto done;
  if ((st = cosy_audio_to_mel(pcm, n, sr, &mel, &T_mel))) goto done;
  st = voice_create(e, prompt_text, tok, n_tok, mel, T_mel, spk, out);
done:
  free(x16), free(lm), free(fb), free(mel), free(tok);
  if (st == COSY_OK) cosy_err_clear();
  return st;
}
