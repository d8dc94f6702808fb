/* bench_voice.c - time cosy_voice_from_audio (a voice cloned from a WAV) on the CPU or a GPU
 * engine, and each of its stages.
 *
 *   bench_voice -m MODEL [--wav FILE] [--seconds 10] [--repeat 3] [--device N] [--beside]
 *               [--fe-threads T16,TMEL]
 *
 * The WAV (default ../shared/audio/zero_shot_prompt.wav) is tiled or cut to --seconds at its own
 * rate. Prints the best and median wall time of the whole call over --repeat runs (after one
 * untimed call); then the stages on the CPU, single-threaded, each the best of --repeat runs:
 * resampling to 16 kHz, whisper log-mel, fbank (+ mean removal), resampling to 24 kHz + prompt
 * mel; then the features as cosy_voice_from_audio computes them on a GPU engine (voice_feats: the
 * 16 kHz features split over most CPUs, the prompt mel beside on the rest, overlapping the
 * models): when the 16 kHz features are ready (the models' job starts then) and when the prompt
 * mel is (--fe-threads T16,TMEL sets the two thread counts instead of the engine's choice); then
 * the models: on the CPU the speech tokenizer and CAM++ (the CPU reference), on a GPU engine the
 * models' job as the scheduler runs it (sched_run_on_t2w: the wait of the calling thread, GPU
 * work and the hop to the token-to-wave thread included).
 * --beside (GPU): a streaming synthesis alone, then the same synthesis while another thread
 * clones voices back to back; prints the largest gap between two audio chunks of each run, so
 * one sees whether cloning stalls other requests' audio.
 * The model needs the front-end models (tools/convert.py with speech_tokenizer_v3.onnx /
 * campplus.onnx, or tools/make_model.py --frontend). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pthread.h>

#include "audio.h"
#include "cosyvoice.h"
#include "engine.h"
#include "model.h"
#include "ref/campplus.h"
#include "ref/s3tok.h"
#include "util.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* the models' job of a GPU engine, run as cosy_voice_from_audio runs it */
typedef struct gjob {
  const float *lm, *fb;
  int32_t T_lm, T_fb;
  int32_t *tok, n_tok;
  float spk[192];
} gjob;

static cosy_status gjob_fn(cosy_engine *e, void *arg) {
  gjob *j = arg;
  return e->be->voice_features(e, j->lm, j->T_lm, j->fb, j->T_fb, &j->tok, &j->n_tok, j->spk);
}

/* --beside: chunk arrival times of a streaming synthesis, and a cloning loop beside it */
typedef struct gaps {
  double last, max_gap;
  int chunks;
} gaps;

static int32_t on_chunk(void *user, const cosy_chunk *c) {
  (void)c;
  gaps *g = user;
  double t = now();
  if (g->chunks++ > 0 && t - g->last > g->max_gap) g->max_gap = t - g->last;
  g->last = t;
  return 0;
}

typedef struct cloner {
  cosy_engine *e;
  const float *pcm;
  int64_t n;
  int32_t sr;
  volatile int stop;
  int done;
  double worst;
} cloner;

static void *clone_loop(void *arg) {
  cloner *c = arg;
  while (!__atomic_load_n(&c->stop, __ATOMIC_SEQ_CST)) {
    cosy_voice *v;
    double t0 = now();
    if (cosy_voice_from_audio(c->e, c->pcm, c->n, c->sr, "", &v)) break;
    if (now() - t0 > c->worst) c->worst = now() - t0;
    cosy_voice_release(v);
    c->done++;
  }
  return NULL;
}

static double stream_once(cosy_engine *e, const cosy_voice *v, gaps *g) {
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.seed = 7;
  p.min_tokens = p.max_tokens = 300;
  memset(g, 0, sizeof *g);
  cosy_request *r;
  double t0 = now();
  if (cosy_request_submit(e, v, "The quick brown fox jumps over the lazy dog, again and again.",
                          &p, on_chunk, g, &r))
    return -1;
  cosy_request_wait(r, -1);
  cosy_request_release(r);
  return now() - t0;
}

static int die(const char *what) {
  fprintf(stderr, "bench_voice: %s: %s\n", what, cosy_last_error());
  return 1;
}

int main(int argc, char **argv) {
  const char *model = NULL, *wav = "../shared/audio/zero_shot_prompt.wav";
  double seconds = 10;
  int repeat = 3, device = COSY_DEVICE_CPU, beside = 0, fe_t16 = 0, fe_tmel = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
    else if (!strcmp(argv[i], "--wav") && i + 1 < argc) wav = argv[++i];
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--beside")) beside = 1;
    else if (!strcmp(argv[i], "--fe-threads") && i + 1 < argc)
      sscanf(argv[++i], "%d,%d", &fe_t16, &fe_tmel);
    else {
      fprintf(stderr, "usage: bench_voice -m MODEL [--wav FILE] [--seconds S] [--repeat N] "
                      "[--device N] [--beside] [--fe-threads T16,TMEL]\n");
      return 2;
    }
  }
  if (!model || repeat < 1 || repeat > 100) {
    fprintf(stderr, "usage: bench_voice -m MODEL [--wav FILE] [--seconds S] [--repeat N] "
                    "[--device N] [--beside] [--fe-threads T16,TMEL]\n");
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
  cfg.device = device;
  cosy_engine *e;
  if (cosy_engine_create(&cfg, &e)) return die(model);
  double *t = malloc((size_t)(repeat + 1) * sizeof(double));
  for (int r = 0; r <= repeat; r++) { /* run 0 loads the weights: reported apart */
    cosy_voice *v;
    double t0 = now();
    if (cosy_voice_from_audio(e, pcm, n, sr, "", &v)) return die("cosy_voice_from_audio");
    t[r] = now() - t0;
    if (r == 0)
      printf("first call (sets up the front end%s): %.3f s, %d prompt tokens\n",
             e->be->voice_features ? "; cuBLASLt plans for these shapes" : "; weights used in place",
             t[0], v->n_tokens);
    cosy_voice_release(v);
  }
  qsort(t + 1, (size_t)repeat, sizeof(double), cmp);
  printf("voice from %.2f s of audio at %d Hz: best %.2f ms, median %.2f ms (%d runs, %s engine%s)\n",
         (double)n / sr, (int)sr, 1e3 * t[1], 1e3 * t[1 + repeat / 2], repeat, e->be->name,
         e->be->voice_features ? "" : ", 1 thread unless built with OPENMP=1");
  /* stages */
  cosy_model *m = e->model;
  float *x16, *lm, *fb, *mel, emb[192];
  int64_t n16;
  int32_t Tl, Tf, Tm, *tok = NULL, nt = 0;
  double st_best[4] = {1e30, 1e30, 1e30, 1e30};
  for (int r = 0; r < repeat; r++) { /* each stage: best of --repeat runs */
    if (r > 0) free(x16), free(lm), free(fb), free(mel);
    double a = now();
    if (cosy_resample_sinc_hann(pcm, n, sr, 16000, &x16, &n16)) return die("resample");
    double b = now();
    if (ref_whisper_logmel(x16, n16, &lm, &Tl)) return die("logmel");
    double c = now();
    if (ref_kaldi_fbank(x16, n16, &fb, &Tf)) return die("fbank");
    for (int k = 0; k < 80; k++) {
      double sum = 0;
      for (int32_t i = 0; i < Tf; i++) sum += fb[(size_t)i * 80 + k];
      for (int32_t i = 0; i < Tf; i++) fb[(size_t)i * 80 + k] -= (float)(sum / Tf);
    }
    double d = now();
    if (cosy_audio_to_mel(pcm, n, sr, &mel, &Tm)) return die("mel");
    double f = now();
    const double dt[4] = {b - a, c - b, d - c, f - d};
    for (int k = 0; k < 4; k++)
      if (dt[k] < st_best[k]) st_best[k] = dt[k];
  }
  printf("CPU features (1 thread each, best of %d): resample->16k %.2f ms | log-mel %.2f ms | fbank "
         "%.2f ms | resample->24k + prompt mel %.2f ms\n", repeat, 1e3 * st_best[0],
         1e3 * st_best[1], 1e3 * st_best[2], 1e3 * st_best[3]);
  { /* the features as cosy_voice_from_audio computes them on a GPU engine (voice_feats) */
    int k16 = fe_t16, kmel = fe_tmel;
    if (k16 <= 0) voice_feats_threads(&k16, &kmel);
    double b16 = 1e30, ball = 1e30, s16 = 0, sall = 0;
    for (int r = 0; r < repeat; r++) {
      voice_feats vf;
      double t0 = now();
      if (voice_feats_begin(&vf, pcm, n, sr, k16, kmel)) return die("voice_feats_begin");
      double t1 = now();
      if (voice_feats_end(&vf)) return die("voice_feats_end");
      double t2 = now();
      voice_feats_free(&vf);
      if (t1 - t0 < b16) b16 = t1 - t0;
      if (t2 - t0 < ball) ball = t2 - t0;
      s16 += t1 - t0, sall += t2 - t0;
    }
    printf("CPU features as a GPU engine computes them (%d threads for 16 kHz + %d for the prompt "
           "mel, %d CPUs): 16 kHz features ready after %.2f ms (mean %.2f), prompt mel after %.2f ms "
           "(mean %.2f), best of %d\n", k16, kmel, cosy_cpu_count(), 1e3 * b16, 1e3 * s16 / repeat,
           1e3 * ball, 1e3 * sall / repeat, repeat);
  }
  if (e->be->voice_features) {
    double best = 1e30;
    for (int r = 0; r < repeat; r++) {
      gjob j = {lm, fb, Tl, Tf, NULL, 0, {0}};
      double g0 = now();
      if (sched_run_on_t2w(e, gjob_fn, &j)) return die("GPU front end");
      double g1 = now() - g0;
      if (g1 < best) best = g1;
      nt = j.n_tok;
      free(j.tok);
    }
    printf("GPU models (speech tokenizer %d tokens + CAM++, one job through the scheduler): best "
           "%.2f ms of %d\n", (int)nt, 1e3 * best, repeat);
  } else {
    ref_s3tok *s3;
    ref_campplus *cam;
    if (ref_s3tok_create(m, &s3) || ref_campplus_create(m, &cam)) return die("front end");
    double g0 = now();
    if (ref_s3tok_encode(s3, lm, Tl, &tok, &nt, NULL, NULL, NULL, NULL)) return die("s3tok");
    double g1 = now();
    if (ref_campplus_embed(cam, fb, Tf, emb, NULL, NULL, NULL)) return die("campplus");
    double g2 = now();
    printf("CPU models: speech tokenizer (%d tokens) %.2f ms | CAM++ %.2f ms\n", (int)nt,
           1e3 * (g1 - g0), 1e3 * (g2 - g1));
    ref_s3tok_free(s3);
    ref_campplus_free(cam);
  }
  if (beside && e->be->voice_features) {
    cosy_voice *v;
    if (cosy_voice_from_audio(e, pcm, n < 10 * (int64_t)sr ? n : 10 * (int64_t)sr, sr, "", &v))
      return die("voice");
    gaps g0, g1;
    stream_once(e, v, &g0); /* warm */
    double t0 = stream_once(e, v, &g0);
    cloner cl = {e, pcm, n, sr, 0, 0, 0};
    pthread_t th;
    if (pthread_create(&th, NULL, clone_loop, &cl)) return die("thread");
    double t1 = stream_once(e, v, &g1);
    __atomic_store_n(&cl.stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(th, NULL);
    printf("streaming synthesis of 300 tokens: alone %.3f s, %d chunks, largest gap %.1f ms | "
           "beside %d clones (each up to %.1f ms): %.3f s, largest gap %.1f ms\n", t0, g0.chunks,
           1e3 * g0.max_gap, cl.done, 1e3 * cl.worst, t1, 1e3 * g1.max_gap);
    cosy_voice_release(v);
  }
  free(x16), free(lm), free(fb), free(mel), free(tok), free(t), free(pcm), free(src);
  cosy_engine_destroy(e);
  return 0;
}
