/* bench_voice.c - time cosy_voice_from_audio (a voice cloned from a WAV) on the CPU path, and
 * each of its stages.
 *
 *   bench_voice -m MODEL [--wav FILE] [--seconds 10] [--repeat 3]
 *
 * The WAV (default ../shared/audio/zero_shot_prompt.wav) is tiled or cut to --seconds at its own
 * rate. Prints the best and median wall time of the whole call over --repeat runs, then one run's
 * stages: resampling to 16 kHz, whisper log-mel, speech tokenizer, fbank, CAM++, resampling to
 * 24 kHz + prompt mel. The model needs the front-end models (tools/convert.py with
 * speech_tokenizer_v3.onnx / campplus.onnx, or tools/make_model.py --frontend). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audio.h"
#include "cosyvoice.h"
#include "engine.h"
#include "model.h"
#include "ref/campplus.h"
#include "ref/s3tok.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int die(const char *what) {
  fprintf(stderr, "bench_voice: %s: %s\n", what, cosy_last_error());
  return 1;
}

int main(int argc, char **argv) {
  const char *model = NULL, *wav = "../shared/audio/zero_shot_prompt.wav";
  double seconds = 10;
  int repeat = 3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
    else if (!strcmp(argv[i], "--wav") && i + 1 < argc) wav = argv[++i];
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_voice -m MODEL [--wav FILE] [--seconds S] [--repeat N]\n");
      return 2;
    }
  }
  if (!model || repeat < 1 || repeat > 100) {
    fprintf(stderr, "usage: bench_voice -m MODEL [--wav FILE] [--seconds S] [--repeat N]\n");
    return 2;
  }
  float *src;
  int64_t ns;
  int32_t sr;
  if (cosy_wav_read(wav, &src, &ns, &sr)) return die(wav);
  int64_t n = (int64_t)(seconds * sr);
  float *pcm = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) pcm[i] = src[i % ns];
  cosy_engine_config cfg;
  cosy_engine_config_init(&cfg, sizeof cfg);
  cfg.model_path = model;
  cfg.device = COSY_DEVICE_CPU;
  cosy_engine *e;
  if (cosy_engine_create(&cfg, &e)) return die(model);
  double *t = malloc((size_t)(repeat + 1) * sizeof(double));
  for (int r = 0; r <= repeat; r++) { /* run 0 loads the weights: reported apart */
    cosy_voice *v;
    double t0 = now();
    if (cosy_voice_from_audio(e, pcm, n, sr, "", &v)) return die("cosy_voice_from_audio");
    t[r] = now() - t0;
    if (r == 0)
      printf("first call (sets up the front end; weights used in place): %.3f s, %d prompt tokens\n", t[0],
             v->n_tokens);
    cosy_voice_release(v);
  }
  qsort(t + 1, (size_t)repeat, sizeof(double), cmp);
  printf("voice from %.2f s of audio at %d Hz: best %.3f s, median %.3f s (%d runs, CPU, 1 thread"
         " unless built with OPENMP=1)\n", (double)n / sr, (int)sr, t[1], t[1 + repeat / 2], repeat);
  /* stages */
  cosy_model *m = e->model;
  ref_s3tok *s3;
  ref_campplus *cam;
  if (ref_s3tok_create(m, &s3) || ref_campplus_create(m, &cam)) return die("front end");
  float *x16, *lm, *fb, *mel, emb[192];
  int64_t n16;
  int32_t Tl, Tf, Tm, *tok, nt;
  double a = now();
  if (cosy_resample_sinc_hann(pcm, n, sr, 16000, &x16, &n16)) return die("resample");
  double b = now();
  if (ref_whisper_logmel(x16, n16, &lm, &Tl)) return die("logmel");
  double c = now();
  if (ref_s3tok_encode(s3, lm, Tl, &tok, &nt, NULL, NULL, NULL, NULL)) return die("s3tok");
  double d = now();
  if (ref_kaldi_fbank(x16, n16, &fb, &Tf)) return die("fbank");
  double f = now();
  if (ref_campplus_embed(cam, fb, Tf, emb, NULL, NULL, NULL)) return die("campplus");
  double g = now();
  if (cosy_audio_to_mel(pcm, n, sr, &mel, &Tm)) return die("mel");
  double h = now();
  printf("stages: resample->16k %.3f s | log-mel %.3f s | speech tokenizer (%d tokens) %.3f s | "
         "fbank %.3f s | CAM++ %.3f s | resample->24k + prompt mel %.3f s\n",
         b - a, c - b, nt, d - c, f - d, g - f, h - g);
  free(x16), free(lm), free(fb), free(mel), free(tok), free(t), free(pcm), free(src);
  ref_s3tok_free(s3);
  ref_campplus_free(cam);
  cosy_engine_destroy(e);
  return 0;
}
