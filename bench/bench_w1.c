/* bench_w1.c - workload W1 (DESIGN.md section 7): interactive streaming, closed loop.
 *
 *   bench_w1 -m MODEL [--device N] [--concurrency 1,4,16] [--requests N] [--tokens 112]
 *            [--texts ../shared/bench/w1_texts.txt] [--prompt-wav ../shared/audio/zero_shot_prompt.wav]
 *
 * The voice: the real mel of the prompt wav, 87 random prompt speech tokens and a random speaker
 * embedding (the speech tokenizer and CAM++ are not part of the library yet). Each request says
 * the next line of the texts file with its length forced to --tokens speech tokens
 * (min_tokens = max_tokens). C client threads each keep one request in flight (closed loop).
 *
 * Per request: TTFB = submit -> first chunk delivered; RTF = (last chunk - submit) / audio
 * seconds; an underrun is a chunk arriving after playback (started at the first chunk) would
 * have run dry. Reported per concurrency level: TTFB p50/p95, RTF p50/p95, xRT (audio seconds
 * per wall second, all requests), underruns, chars/s, and the engine's memory. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audio.h"
#include "cosyvoice.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct result {
  double ttfb, rtf, audio_s, llm_s, flow_s, voc_s;
  int underruns, chars;
  cosy_status st;
} result;

typedef struct req_state {
  double t_submit, t_first, t_last;
  int64_t samples;
  int rate, underruns;
} req_state;

static int32_t on_chunk(void *user, const cosy_chunk *c) {
  req_state *s = (req_state *)user;
  double t = now();
  if (s->t_first == 0 && c->n_samples > 0) s->t_first = t;
  /* playback started at t_first has played (t - t_first) s; audio before this chunk: samples */
  if (s->t_first > 0 && c->n_samples > 0 && s->samples > 0 &&
      t - s->t_first > (double)s->samples / c->sample_rate)
    s->underruns++;
  s->samples += c->n_samples;
  s->rate = c->sample_rate;
  s->t_last = t;
  return 0;
}

typedef struct shared {
  cosy_engine *e;
  cosy_voice *v;
  char **texts;
  int n_texts, tokens, total;
  int next;            /* next request index (under mu) */
  pthread_mutex_t mu;
  result *res;
} shared;

static void *client(void *arg) {
  shared *sh = (shared *)arg;
  for (;;) {
    pthread_mutex_lock(&sh->mu);
    int i = sh->next++;
    pthread_mutex_unlock(&sh->mu);
    if (i >= sh->total) break;
    const char *text = sh->texts[i % sh->n_texts];
    cosy_synth_params p;
    cosy_synth_params_init(&p, sizeof p);
    p.seed = 1000 + (uint64_t)i;
    p.min_tokens = p.max_tokens = sh->tokens;
    req_state s;
    memset(&s, 0, sizeof s);
    s.t_submit = now();
    cosy_request *r;
    result *res = &sh->res[i];
    res->chars = (int)strlen(text);
    res->st = cosy_request_submit(sh->e, sh->v, text, &p, on_chunk, &s, &r);
    if (res->st) {
      fprintf(stderr, "submit: %s\n", cosy_last_error());
      continue;
    }
    res->st = cosy_request_wait(r, -1);
    if (res->st) fprintf(stderr, "request %d: %s\n", i, cosy_last_error());
    cosy_request_stats rs;
    cosy_request_stats_init(&rs, sizeof rs);
    if (cosy_request_get_stats(r, &rs) == COSY_OK) {
      res->llm_s = rs.llm_s;
      res->flow_s = rs.flow_s;
      res->voc_s = rs.vocoder_s;
    }
    cosy_request_release(r);
    res->audio_s = s.rate ? (double)s.samples / s.rate : 0;
    res->ttfb = s.t_first - s.t_submit;
    res->rtf = res->audio_s > 0 ? (s.t_last - s.t_submit) / res->audio_s : 0;
    res->underruns = s.underruns;
  }
  return NULL;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double pct(double *v, int n, double q) {
  if (n == 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  int k = (int)ceil(q * n) - 1;
  if (k < 0) k = 0;
  return v[k];
}

static char **read_lines(const char *path, int *n) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  char **v = NULL;
  int k = 0;
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    size_t L = strlen(line);
    while (L && (line[L - 1] == '\n' || line[L - 1] == '\r')) line[--L] = '\0';
    if (!L) continue;
    v = (char **)realloc(v, (size_t)(k + 1) * sizeof *v);
    v[k++] = strdup(line);
  }
  fclose(f);
  *n = k;
  return v;
}

int main(int argc, char **argv) {
  const char *model = NULL, *texts_path = "../shared/bench/w1_texts.txt";
  const char *wav = "../shared/audio/zero_shot_prompt.wav", *conc = "1";
  int device = -1, requests = 0, tokens = 112, warmup = 2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
    else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--concurrency") && i + 1 < argc) conc = argv[++i];
    else if (!strcmp(argv[i], "--requests") && i + 1 < argc) requests = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--texts") && i + 1 < argc) texts_path = argv[++i];
    else if (!strcmp(argv[i], "--prompt-wav") && i + 1 < argc) wav = argv[++i];
    else {
      fprintf(stderr, "usage: bench_w1 -m MODEL [--device N] [--concurrency 1,4,16] [--requests N] "
                      "[--tokens 112] [--warmup 2] [--texts FILE] [--prompt-wav WAV]\n");
      return 2;
    }
  }
  if (!model) {
    fprintf(stderr, "bench_w1: -m MODEL is required\n");
    return 2;
  }
  int n_texts = 0;
  char **texts = read_lines(texts_path, &n_texts);
  if (!texts || !n_texts) {
    fprintf(stderr, "bench_w1: cannot read texts from %s\n", texts_path);
    return 1;
  }
  float *pcm;
  int64_t n;
  int32_t sr;
  if (cosy_wav_read(wav, &pcm, &n, &sr)) {
    fprintf(stderr, "bench_w1: %s: %s\n", wav, cosy_last_error());
    return 1;
  }
  float *mel;
  int32_t frames;
  if (cosy_audio_to_mel(pcm, n, sr, &mel, &frames)) {
    fprintf(stderr, "bench_w1: mel: %s\n", cosy_last_error());
    return 1;
  }
  free(pcm);
  int32_t ptok[87];
  float spk[192];
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < 87; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    ptok[i] = (int32_t)((x >> 33) % 6561);
  }
  for (int i = 0; i < 192; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    spk[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }

  int levels[16], n_levels = 0, max_c = 1;
  for (const char *p = conc; *p && n_levels < 16;) {
    levels[n_levels] = atoi(p);
    if (levels[n_levels] > max_c) max_c = levels[n_levels];
    n_levels++;
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  cosy_engine_config cfg;
  cosy_engine_config_init(&cfg, sizeof cfg);
  cfg.model_path = model;
  cfg.device = device;
  cfg.max_active = max_c;
  cosy_engine *e;
  double t0 = now();
  if (cosy_engine_create(&cfg, &e)) {
    fprintf(stderr, "bench_w1: engine: %s\n", cosy_last_error());
    return 1;
  }
  double t_load = now() - t0;
  cosy_voice_features vf;
  cosy_voice_features_init(&vf, sizeof vf);
  vf.prompt_text = "You are a helpful assistant.<|endofprompt|>希望你以后能够做的比我还好呦。";
  vf.speech_tokens = ptok;
  vf.n_speech_tokens = frames / 2 < 87 ? frames / 2 : 87;
  vf.mel = mel;
  vf.n_mel_frames = frames;
  vf.speaker_embedding = spk;
  cosy_voice *v;
  if (cosy_voice_from_features(e, &vf, &v)) {
    fprintf(stderr, "bench_w1: voice: %s\n", cosy_last_error());
    return 1;
  }
  printf("bench_w1: model %s, device %d, %s, load %.2f s, prompt %d tokens, %d tokens/request\n",
         model, device, cosy_version_string(), t_load, vf.n_speech_tokens, tokens);
  /* warm-up: first calls build CUDA graphs and plans; not measured */
  for (int w = 0; w < warmup; w++) {
    cosy_synth_params p;
    cosy_synth_params_init(&p, sizeof p);
    p.seed = 1;
    p.min_tokens = p.max_tokens = tokens;
    float *wpcm;
    int64_t np;
    if (cosy_synthesize(e, v, texts[w % n_texts], &p, &wpcm, &np) == COSY_OK) cosy_free(wpcm);
  }
  printf("%d warm-up requests done\n", warmup);
  printf("%5s %5s %9s %9s %8s %8s %7s %9s %9s %10s\n", "C", "reqs", "ttfb_p50", "ttfb_p95",
         "rtf_p50", "rtf_p95", "xRT", "underrun", "chars/s", "mem_MiB");
  for (int li = 0; li < n_levels; li++) {
    int C = levels[li];
    int total = requests ? requests : (C < 4 ? 8 : 2 * C);
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.e = e;
    sh.v = v;
    sh.texts = texts;
    sh.n_texts = n_texts;
    sh.tokens = tokens;
    sh.total = total;
    sh.res = (result *)calloc((size_t)total, sizeof *sh.res);
    pthread_mutex_init(&sh.mu, NULL);
    pthread_t *th = (pthread_t *)calloc((size_t)C, sizeof *th);
    double w0 = now();
    for (int i = 0; i < C; i++) pthread_create(&th[i], NULL, client, &sh);
    for (int i = 0; i < C; i++) pthread_join(th[i], NULL);
    double wall = now() - w0;
    double *tt = (double *)calloc((size_t)total, sizeof *tt), *rt = (double *)calloc((size_t)total, sizeof *rt);
    int ok = 0, under = 0;
    long chars = 0;
    double audio = 0, llm = 0, flow = 0, voc = 0;
    for (int i = 0; i < total; i++) {
      if (sh.res[i].st) continue;
      tt[ok] = sh.res[i].ttfb;
      rt[ok] = sh.res[i].rtf;
      ok++;
      under += sh.res[i].underruns > 0;
      chars += sh.res[i].chars;
      audio += sh.res[i].audio_s;
      llm += sh.res[i].llm_s;
      flow += sh.res[i].flow_s;
      voc += sh.res[i].voc_s;
    }
    cosy_engine_stats st;
    cosy_engine_stats_init(&st, sizeof st);
    cosy_engine_get_stats(e, &st);
    double mem = (double)(st.device_bytes_total ? st.device_bytes_total : st.weights_bytes) / 1048576.0;
    printf("%5d %5d %8.1fms %8.1fms %8.4f %8.4f %7.2f %9d %9.1f %10.0f\n", C, ok,
           1e3 * pct(tt, ok, 0.5), 1e3 * pct(tt, ok, 0.95), pct(rt, ok, 0.5), pct(rt, ok, 0.95),
           audio / wall, under, (double)chars / wall, mem);
    fflush(stdout);
    if (ok)
      printf("      per request (mean): llm %.1f ms, flow %.1f ms, vocoder %.1f ms, audio %.2f s; "
             "engine holds %.0f MiB (KV %.0f MiB)\n",
             1e3 * llm / ok, 1e3 * flow / ok, 1e3 * voc / ok, audio / ok,
             (double)st.device_bytes_total / 1048576.0, (double)st.kv_bytes / 1048576.0);
    if (ok != total) printf("      (%d of %d requests failed)\n", total - ok, total);
    free(tt);
    free(rt);
    free(th);
    free(sh.res);
    pthread_mutex_destroy(&sh.mu);
  }
  cosy_voice_release(v);
  cosy_engine_destroy(e);
  cosy_free(mel);
  for (int i = 0; i < n_texts; i++) free(texts[i]);
  free(texts);
  return 0;
}
