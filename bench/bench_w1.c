/* bench_w1.c - workload W1 (docs/scheduler.md section 6): interactive streaming, closed loop; W2
 * (--w2): offline, every request submitted at once; W3 (--w3 / --users): live users; and W4
 * (--text-stream): text streamed in by simulated LLMs.
 *
 *   bench_w1 -m MODEL [--device N | --device N,M,...] [--concurrency 1,4,16] [--requests N]
 *            [--tokens 112 | --tokens default] [--prompt-tokens 87]
 *            [--texts ../shared/bench/w1_texts.txt] [--prompt-wav ../shared/audio/zero_shot_prompt.wav]
 *            [--w2 | --offline N] [--max-active N] [--warmup 2] [--ramp SECONDS] [--one-shot] [--hash] [--vocoder-tf32 | --vocoder-accurate | --vocoder-fp16]
 *            [--first-chunk N] [--first-wait N] [--memory-fraction F | --memory-gb G]
 *            [--w3 | --users 128,192,256,320] [--level-s 40] [--spread 8] [--think 2] [--utter 2,10]
 *            [--skip 10] [--seed 1] [--p95-ms 200]
 *            [--text-stream 20,40 [--ts-lines 2] [--ts-tokens-per-word 8] [--ts-dump DIR]] [--voice FILE]
 *
 * Exit status: 0, or 3 when any request failed (2: bad arguments, 1: setup failed).
 * --memory-fraction F sets gpu_memory_fraction; --memory-gb G sets it to G GiB over the device's
 * memory (cudaMemGetInfo), so the engine plans within the budget of a smaller card (a 24 or 32 GB
 * one) on a larger GPU.
 * The voice: the real mel of the prompt wav, 87 random prompt speech tokens (--prompt-tokens N:
 * N, the wav's audio said again and again until its mel covers them: 750 makes a 30 s voice)
 * and a random speaker embedding, given to cosy_voice_from_features. The library's own speech
 * tokenizer and CAM++ (cosy_voice_from_audio) are left out on purpose: the benchmark model
 * (tools/make_model.py --preset full) carries no front-end models, and
 * bench/official/run_official.py gives the official code the same tokens and embedding (the same
 * generator), so both time the same requests; cloning itself is timed by bench_voice.c. Each
 * request says the next line of the texts file with its length forced to --tokens
 * speech tokens (min_tokens = max_tokens); --tokens default leaves both 0, the library's
 * defaults (2 and 20 speech tokens per text token of each segment; a random-weight model rarely
 * stops early, so nearly every segment runs to its ceiling). C client threads each keep one request in flight (closed loop).
 * By default every client starts at once (a burst of C first requests); --ramp S starts client k
 * at k * S / C seconds instead (users arriving over S seconds, the usual load-test ramp-up), and
 * the level's wall time then includes the ramp. --one-shot sends COSY_SYNTH_ONE_SHOT requests
 * (non-streaming: one flow and one vocoder call at the end), to compare the GPU time per request
 * of streaming against non-streaming synthesis. --vocoder-tf32 / --vocoder-accurate / --vocoder-fp16
 * set vocoder_precision to COSY_VOCODER_TF32 / COSY_VOCODER_ACCURATE / COSY_VOCODER_FP16 (the GPU
 * default; cosyvoice.h); with the fp16 vocoder each engine prints at the end (its destroy) how
 * many vocoder jobs saturated fp16 and were recomputed in TF32 ("vocoder fp16: N TF32 fallbacks
 * in M jobs", warm-up included). --first-chunk N sets first_chunk_tokens (W1 requests and the
 * warm-up; 0: the default, auto; the voice's 87 prompt tokens leave 13 to their last block, so
 * 5 <= N <= 13 makes every first chunk 13 tokens: 0.36 s of audio). --first-wait N sets
 * first_chunk_wait_max (0: the default).
 *
 * Per request: TTFB = submit -> first chunk delivered; RTF = (last chunk - submit) / audio
 * seconds; an underrun is a chunk arriving after playback (started at the first chunk) would
 * have run dry. Reported per concurrency level: TTFB p50/p95, RTF p50/p95, xRT (audio seconds
 * per wall second, all requests), underruns (requests with at least one), chars/s, and the
 * engine's memory; then, on lines of their own, the first four requests that ran dry (TTFB, the
 * first chunk's audio, the latest chunk and by how much), the scheduler's mean batch sizes during
 * the level (differences of the cumulative batch counters in cosy_engine_stats) and the GPU's
 * utilization sampled during the level.
 *
 * W2 (--w2 = --offline 256): N requests of --tokens speech tokens (250 unless --tokens is given)
 * are all submitted at once from one thread (no closed loop); reported: wall time (first submit
 * -> last request ended), audio seconds, RTF = wall / audio, xRT = audio / wall, and the same
 * batch and GPU lines. With --w2 alone only W2 runs; with --concurrency too, W1 runs first.
 *
 * --hash (W1 and W2): each request's samples are hashed as they arrive (FNV-1a of the float
 * bits), and after each level a line gives the hash of the requests' hashes in request order
 * ("audio bits"). Request i has seed 1000 + i, text line i % lines and its forced length, so two
 * builds that print the same line made the same audio, sample for sample: a kernel change that
 * must keep the bits can be checked at the engine's level in the same device call.
 *
 * W3 (--users U1,U2,...; --w3 = --users 128,192,256,320): a level of U live users each, for
 * --level-s seconds (40). User k arrives at a uniform time in the first --spread s (8), asks for an
 * utterance of a uniform length in --utter A,B s of audio (2,10: 25 speech tokens a second, forced
 * as W1 forces --tokens; a random line of the texts), listens to it in real time from its first
 * chunk, thinks for an exponential time of mean --think s (2) after its playback ended, asks
 * again; no request starts after the level's end, which waits for the last one to finish. Every
 * draw comes from user k's own random stream, seeded by --seed (1) and k. Requests submitted in
 * the first --skip s (10) are not counted. A row per level: users, counted requests, failed ones,
 * TTFB p50/p95/p99, requests with an underrun (a chunk later than its playback time, as in W1) and
 * the latest chunk's lateness, xRT (audio the engines delivered in the counted window per second
 * of it), the mean batch sizes in the window (LLM, flow, vocoder) with the largest mean over 20 ms
 * (LLM, flow), the most requests active / queued, and ok: TTFB p95 <= --p95-ms (200), no underrun,
 * no failure; then the batch and GPU lines. Last, the rows again as a summary table and the
 * headline: the most users of a level that is ok. W3 runs after W1 and W2 when they are asked for
 * too. `make test-bench` runs it on the CPU with tiny numbers (tests/check_bench_w3.sh).
 *
 * W4 (--text-stream WPS_MIN,WPS_MAX, with --concurrency's levels, which then run W4 instead of
 * W1; --level-s, --skip and --seed as W3's): C sessions, each writing utterances word by word
 * into COSY_SYNTH_TEXT_STREAM requests at a rate drawn per session, closed loop; first audio is
 * counted from the first piece pushed. The comment above run_ts says exactly what is drawn, pushed
 * and measured; bench/serve_ws.py runs the same sessions through the server's WebSocket and
 * checks its audio against --ts-dump's. `make test-bench` runs both on the CPU with tiny numbers
 * (tests/check_bench_ws.sh); `bash bench/serve_device_run.sh MODEL ws` at C = 64 on a GPU.
 * --voice FILE: the voice saved in FILE (cosy_voice_load; bench/serve_w1.py make-voice writes
 * bench_w1's own voice there for the servers) instead of the one made here; W4 over the
 * WebSocket is compared with --voice set to the server's voice file, so both use the same bits
 * (the voice made here repeats the prompt wav up to 3.52 s of mel, make-voice does not).
 *
 * The engine is created with max_active = the largest concurrency level, W2 request count or W3
 * user count (--max-active overrides); the GPU path accepts at most 1024 (include/cosyvoice.h), so
 * larger values are cut to 1024 there and the rest wait in the engine's queue (the engine's own
 * default on a GPU is 256: --max-active 256 measures that).
 *
 * Several devices (--device 0,1; a list of up to 16, -1 = the CPU): one engine per entry in this
 * process, each with the same voice, each created with max_active = its share of the largest level
 * (ceil(C / engines); --max-active overrides) and, where a GPU is listed more than once, an equal
 * part of 0.9 of its memory (unless --memory-fraction / --memory-gb say otherwise). Client k of a
 * level sends all its requests to engine k % engines (at C = 128 on two engines, 64 clients each:
 * what one engine serves at C = 64), and W2 sends request i to engine i % engines; request i is
 * the same text and seed as with one engine. Each W1 level prints its row over all requests
 * (the same columns; xRT = all audio per wall second, mem = all engines), then one row per engine
 * with e0, e1, ... in the C column (its requests' TTFB, RTF and underruns; its audio per wall
 * second), then the batch and GPU lines per engine ("batches e0:", "gpu util e0:") and the mean
 * GPU utilization over the engines ("gpu util all:"). W2 prints a line per engine before its row.
 * One device prints exactly what it printed before lists existed. `--device -1,-1` (two CPU
 * engines) is what `make test-bench` runs (tests/check_bench_multi.sh).
 *
 * GPU utilization comes from NVML, opened at run time with dlopen("libnvidia-ml.so.1") (no link
 * dependency): a thread reads nvmlDeviceGetUtilizationRates (percent of time a kernel ran, over
 * the driver's own averaging window, which is longer than our period, so samples overlap) and
 * nvmlDeviceGetMemoryInfo every 25 ms. Memory "used" is the whole device's, other processes
 * included. NVML numbers GPUs in PCI bus order; --device N is mapped through CUDA_VISIBLE_DEVICES
 * when that is set (index or UUID entries), else taken as the NVML index, which matches CUDA's
 * ordinal on hosts of one GPU model (or with CUDA_DEVICE_ORDER=PCI_BUS_ID). The NVML device's name
 * is printed so a log shows which GPU was watched. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audio.h"
#include "cosyvoice.h"

#ifdef COSY_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

/* requests that failed in any level (the exit status is 3 when there were any) */
static int g_failed;
static int g_hash; /* --hash */

/* FNV-1a over n bytes, continuing from h */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
#define FNV_OFFSET 1469598103934665603ull

/* the fp16 vocoder (the GPU default, or --vocoder-fp16): the engine's INFO line about it
 * (lib/backend_gpu.c, at destroy: how many vocoder jobs saturated fp16 and were recomputed in
 * TF32) on stdout; other messages (the few INFO lines of a create) on stderr */
static void fp16_log(void *user, int32_t level, const char *msg) {
  if (!strncmp(msg, "vocoder fp16", 12))
    printf("bench_w1: engine %d: %s\n", (int)(intptr_t)user, msg);
  else if (level <= COSY_LOG_WARN)
    fprintf(stderr, "bench_w1: engine %d: %s\n", (int)(intptr_t)user, msg);
}

/* the fraction of device `dev`'s memory that is `gb` GiB (0 when there is no such device) */
static float fraction_of_gb(int dev, double gb) {
#ifdef COSY_WITH_CUDA
  size_t f = 0, t = 0;
  if (cudaSetDevice(dev) != cudaSuccess || cudaMemGetInfo(&f, &t) != cudaSuccess || t == 0)
    return 0.0f;
  return (float)(gb * 1073741824.0 / (double)t);
#else
  (void)dev, (void)gb;
  return 0.0f;
#endif
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- NVML, loaded at run time -------------------------------------------------------------- */
/* dlopen & co. are weak so that the binary also links where they live in libdl (glibc before
 * 2.34) and the Makefile does not pass -ldl: there they are found at run time when some loaded
 * library pulled libdl in, and otherwise the monitor reports itself unavailable. */
#pragma weak dlopen
#pragma weak dlsym
#pragma weak dlclose
#pragma weak dlerror

typedef int nvml_return;                  /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef struct nvml_device_st *nvml_device;
typedef struct nvml_utilization {         /* nvmlUtilization_t */
  unsigned int gpu, memory;               /* percent */
} nvml_utilization;
typedef struct nvml_memory {              /* nvmlMemory_t (v1) */
  unsigned long long total, free, used;   /* bytes */
} nvml_memory;

typedef struct gpu_mon {
  int ok;                                 /* 1: dev can be sampled */
  char why[200];                          /* why not, when ok == 0 */
  char name[96];
  void *so;
  nvml_device dev;
  unsigned long long mem_total;
  nvml_return (*shutdown)(void);
  nvml_return (*util)(nvml_device, nvml_utilization *);
  nvml_return (*mem)(nvml_device, nvml_memory *);
} gpu_mon;

static void gpu_mon_open(gpu_mon *m, int device) {
  memset(m, 0, sizeof *m);
  if (device < 0) {
    snprintf(m->why, sizeof m->why, "CPU run");
    return;
  }
  if (!dlopen || !dlsym) {
    snprintf(m->why, sizeof m->why, "dlopen is not linked in (build with LDLIBS=-ldl)");
    return;
  }
  m->so = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!m->so) {
    const char *err = dlerror ? dlerror() : NULL;
    snprintf(m->why, sizeof m->why, "%s", err ? err : "libnvidia-ml.so.1 cannot be opened");
    return;
  }
  nvml_return (*init)(void);
  nvml_return (*by_index)(unsigned int, nvml_device *);
  nvml_return (*by_uuid)(const char *, nvml_device *);
  nvml_return (*get_name)(nvml_device, char *, unsigned int);
  *(void **)&init = dlsym(m->so, "nvmlInit_v2");
  *(void **)&by_index = dlsym(m->so, "nvmlDeviceGetHandleByIndex_v2");
  *(void **)&by_uuid = dlsym(m->so, "nvmlDeviceGetHandleByUUID");
  *(void **)&get_name = dlsym(m->so, "nvmlDeviceGetName");
  *(void **)&m->shutdown = dlsym(m->so, "nvmlShutdown");
  *(void **)&m->util = dlsym(m->so, "nvmlDeviceGetUtilizationRates");
  *(void **)&m->mem = dlsym(m->so, "nvmlDeviceGetMemoryInfo");
  if (!init || !by_index || !m->shutdown || !m->util || !m->mem) {
    snprintf(m->why, sizeof m->why, "libnvidia-ml.so.1 lacks an NVML function");
    dlclose(m->so);
    m->so = NULL;
    return;
  }
  nvml_return r = init();
  if (r) {
    snprintf(m->why, sizeof m->why, "nvmlInit_v2 returned %d", r);
    dlclose(m->so);
    m->so = NULL;
    return;
  }
  /* --device N is the N-th visible CUDA device: the N-th entry of CUDA_VISIBLE_DEVICES */
  char entry[128] = "";
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (vis && *vis) {
    const char *p = vis;
    for (int k = 0; k < device && p; k++) {
      p = strchr(p, ',');
      if (p) p++;
    }
    if (p) {
      size_t L = strcspn(p, ",");
      if (L >= sizeof entry) L = sizeof entry - 1;
      memcpy(entry, p, L);
      entry[L] = '\0';
    }
  }
  if (entry[0] && !(entry[0] >= '0' && entry[0] <= '9')) {
    r = by_uuid ? by_uuid(entry, &m->dev) : -1;
    if (r) snprintf(m->why, sizeof m->why, "nvmlDeviceGetHandleByUUID(%s) returned %d", entry, r);
  } else {
    unsigned int idx = entry[0] ? (unsigned int)atoi(entry) : (unsigned int)device;
    r = by_index(idx, &m->dev);
    if (r) snprintf(m->why, sizeof m->why, "nvmlDeviceGetHandleByIndex_v2(%u) returned %d", idx, r);
  }
  if (r) {
    m->shutdown();
    dlclose(m->so);
    m->so = NULL;
    return;
  }
  if (!get_name || get_name(m->dev, m->name, sizeof m->name)) snprintf(m->name, sizeof m->name, "?");
  nvml_memory mi;
  if (m->mem(m->dev, &mi) == 0) m->mem_total = mi.total;
  m->ok = 1;
}

static void gpu_mon_close(gpu_mon *m) {
  if (m->so) {
    m->shutdown();
    dlclose(m->so);
  }
  m->so = NULL;
  m->ok = 0;
}

#define SAMPLE_MS 25

typedef struct sampler {
  gpu_mon *m;
  pthread_t th;
  atomic_int stop;
  int running;
  double *util;                 /* GPU util % of each good sample */
  int n, cap, errors;
  nvml_return last_err;
  unsigned long long mem_peak;  /* bytes used on the device, highest sample */
} sampler;

static void *sampler_main(void *arg) {
  sampler *s = (sampler *)arg;
  struct timespec ts = {0, SAMPLE_MS * 1000000L};
  while (!atomic_load(&s->stop)) {
    nvml_utilization u;
    nvml_memory mi;
    nvml_return r = s->m->util(s->m->dev, &u);
    if (r == 0) {
      if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 1024;
        double *nu = (double *)realloc(s->util, (size_t)cap * sizeof *nu);
        if (!nu) break;
        s->util = nu;
        s->cap = cap;
      }
      s->util[s->n++] = u.gpu;
    } else {
      s->errors++;
      s->last_err = r;
    }
    if (s->m->mem(s->m->dev, &mi) == 0 && mi.used > s->mem_peak) s->mem_peak = mi.used;
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static void sampler_start(sampler *s, gpu_mon *m) {
  memset(s, 0, sizeof *s);
  s->m = m;
  atomic_init(&s->stop, 0);
  if (m->ok) s->running = pthread_create(&s->th, NULL, sampler_main, s) == 0;
}

static double pct(double *v, int n, double q);

/* stops the thread and prints the level's line: "gpu util<label>: ..."; the mean utilization
 * (percent), or -1 when there is none */
static double sampler_finish(sampler *s, const char *label) {
  double mean = -1;
  if (s->running) {
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
  }
  if (!s->m->ok)
    printf("      gpu util%s: n/a (%s)\n", label, s->m->why);
  else if (!s->running)
    printf("      gpu util%s: n/a (sampler thread not started)\n", label);
  else if (s->n == 0)
    printf("      gpu util%s: n/a (nvmlDeviceGetUtilizationRates returned %d)\n", label, s->last_err);
  else {
    double sum = 0;
    for (int i = 0; i < s->n; i++) sum += s->util[i];
    mean = sum / s->n;
    double p50 = pct(s->util, s->n, 0.5), p95 = pct(s->util, s->n, 0.95);
    printf("      gpu util%s: mean %.1f%%, p50 %.0f%%, p95 %.0f%% (%d samples every %d ms); "
           "peak memory used %.0f of %.0f MiB\n",
           label, mean, p50, p95, s->n, SAMPLE_MS, (double)s->mem_peak / 1048576.0,
           (double)s->m->mem_total / 1048576.0);
  }
  free(s->util);
  s->util = NULL;
  return mean;
}

/* the scheduler's mean batch sizes between two cosy_engine_get_stats snapshots */
static void print_batches(const cosy_engine_stats *a, const cosy_engine_stats *b, const char *label) {
  long long steps = (long long)(b->llm_steps - a->llm_steps);
  long long rows = (long long)(b->llm_step_rows - a->llm_step_rows);
  long long fc = (long long)(b->flow_calls - a->flow_calls);
  long long fj = (long long)(b->flow_jobs - a->flow_jobs);
  long long vc = (long long)(b->vocoder_calls - a->vocoder_calls);
  long long vj = (long long)(b->vocoder_jobs - a->vocoder_jobs);
  printf("      batches%s: llm %.2f rows/step (%lld steps), flow %.2f jobs/call (%lld calls), "
         "vocoder %.2f jobs/call (%lld calls)\n",
         label, steps ? (double)rows / steps : 0.0, steps, fc ? (double)fj / fc : 0.0, fc,
         vc ? (double)vj / vc : 0.0, vc);
}

/* After a level: each engine's batch sizes between its stats a and b, then each engine's GPU
 * utilization (its sampler), and their mean when there are several. window: the batch line's
 * label names the span of a and b (W3 counts a window of its level), else only the engine. */
static void print_engines(const cosy_engine_stats *a, const cosy_engine_stats *b, sampler *smp,
                          int n_eng, int window) {
  for (int k = 0; k < n_eng; k++) {
    char label[24] = "";
    if (window) snprintf(label, sizeof label, n_eng > 1 ? " e%d (window)" : " (counted window)", k);
    else if (n_eng > 1) snprintf(label, sizeof label, " e%d", k);
    print_batches(&a[k], &b[k], label);
  }
  double util_sum = 0;
  int util_n = 0;
  for (int k = 0; k < n_eng; k++) {
    char label[16] = "";
    if (n_eng > 1) snprintf(label, sizeof label, " e%d", k);
    const double u = sampler_finish(&smp[k], label);
    if (u >= 0) util_sum += u, util_n++;
  }
  if (n_eng > 1 && util_n)
    printf("      gpu util all: mean %.1f%% over %d engines\n", util_sum / util_n, util_n);
}

/* an array p of *cap elements of size bytes, n of them used, with room for one more: p itself,
 * or p grown (doubling, from 1024; *cap updated) when full; NULL when that allocation fails (p
 * is then unchanged) */
static void *room_for(void *p, int *cap, int n, size_t size) {
  if (n < *cap) return p;
  const int c = *cap ? 2 * *cap : 1024;
  void *np_ = realloc(p, (size_t)c * size);
  if (np_) *cap = c;
  return np_;
}

/* n threads fn(arg) (th may be NULL: none); returns how many started (a message if not all) */
static int start_threads(pthread_t *th, int n, void *(*fn)(void *), void *arg, const char *what) {
  int started = 0;
  for (int i = 0; th && i < n; i++) {
    if (pthread_create(&th[i], NULL, fn, arg)) {
      fprintf(stderr, "bench_w1: only %d of %d %s started\n", i, n, what);
      break;
    }
    started++;
  }
  return started;
}

typedef struct result {
  double ttfb, rtf, audio_s, llm_s, flow_s, voc_s;
  int underruns, chars;
  double first_s, late_s; /* the first chunk's audio; the latest chunk's lateness */
  int late_chunk;         /* that chunk's index (0-based) */
  int eng;  /* the engine (index into --device's list) that served it */
  cosy_status st;
  uint64_t hash; /* --hash */
} result;

typedef struct req_state {
  double t_submit, t_first, t_last;
  double play_end;  /* when playback (from the first chunk, pausing where a chunk came late) ends */
  int64_t samples, first_n;
  int rate, underruns, chunks, late_chunk;
  double late_s;
  uint64_t hash; /* --hash: FNV-1a of the samples so far (0 before the first) */
} req_state;

static int32_t on_chunk(void *user, const cosy_chunk *c) {
  req_state *s = (req_state *)user;
  double t = now();
  if (s->t_first == 0 && c->n_samples > 0) {
    s->t_first = t;
    s->first_n = c->n_samples;
  }
  /* playback started at t_first has played (t - t_first) s; audio before this chunk: samples */
  if (s->t_first > 0 && c->n_samples > 0 && s->samples > 0) {
    const double late = t - s->t_first - (double)s->samples / c->sample_rate;
    if (late > 0) {
      s->underruns++;
      if (late > s->late_s) {
        s->late_s = late;
        s->late_chunk = s->chunks;
      }
    }
  }
  if (c->n_samples > 0) {
    s->chunks++;
    s->play_end = (t > s->play_end ? t : s->play_end) + (double)c->n_samples / c->sample_rate;
  }
  if (g_hash && c->n_samples > 0)
    s->hash = fnv1a(s->hash ? s->hash : FNV_OFFSET, c->pcm, (size_t)c->n_samples * sizeof *c->pcm);
  s->samples += c->n_samples;
  s->rate = c->sample_rate;
  s->t_last = t;
  return 0;
}

/* --hash: a level's requests' hashes folded in request order (a failed request as 0), then its
 * line */
static uint64_t bits_add(uint64_t all, uint64_t h) { return fnv1a(all, &h, sizeof h); }
static void print_bits(uint64_t all, int n) {
  printf("      audio bits: %016llx (%d requests' samples, FNV-1a, in request order)\n",
         (unsigned long long)all, n);
}
#define MAX_ENGINES 16

typedef struct shared {
  cosy_engine **e;     /* one engine per entry of --device; client k uses engine k % n_eng */
  cosy_voice **v;
  int n_eng;
  char **texts;
  int n_texts, tokens, total;
  int next;            /* next request index (under mu) */
  int next_client;     /* client index (under mu) */
  int conc;            /* clients */
  double ramp;         /* --ramp: client k starts k * ramp / conc seconds after the level starts */
  uint32_t flags;      /* --one-shot: COSY_SYNTH_ONE_SHOT */
  int first_chunk;     /* --first-chunk: first_chunk_tokens (0 = default) */
  pthread_mutex_t mu;
  result *res;
} shared;

static void *client(void *arg) {
  shared *sh = (shared *)arg;
  pthread_mutex_lock(&sh->mu);
  const int me = sh->next_client++;
  pthread_mutex_unlock(&sh->mu);
  const int ek = me % sh->n_eng;
  if (sh->ramp > 0 && me > 0) {
    const double d = sh->ramp * me / sh->conc;
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    nanosleep(&ts, NULL);
  }
  for (;;) {
    pthread_mutex_lock(&sh->mu);
    int i = sh->next++;
    pthread_mutex_unlock(&sh->mu);
    if (i >= sh->total) break;
    const char *text = sh->texts[i % sh->n_texts];
    cosy_synth_params p;
    cosy_synth_params_init(&p, sizeof p);
    p.seed = 1000 + (uint64_t)i;
    p.flags = sh->flags;
    p.first_chunk_tokens = sh->first_chunk;
    p.min_tokens = p.max_tokens = sh->tokens;
    req_state s;
    memset(&s, 0, sizeof s);
    s.t_submit = now();
    cosy_request *r;
    result *res = &sh->res[i];
    res->chars = (int)strlen(text);
    res->eng = ek;
    res->st = cosy_request_submit(sh->e[ek], sh->v[ek], text, &p, on_chunk, &s, &r);
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
    res->first_s = s.rate ? (double)s.first_n / s.rate : 0;
    res->late_s = s.late_s;
    res->late_chunk = s.late_chunk;
    res->hash = s.hash;
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

/* W2: n requests submitted at once from this thread, then waited for; request i goes to engine
 * i % n_eng */
static void run_w2(cosy_engine **e, cosy_voice **v, int n_eng, char **texts, int n_texts, int n,
                   int tokens, gpu_mon *mon) {
  cosy_request **rq = (cosy_request **)calloc((size_t)n, sizeof *rq);
  req_state *rs = (req_state *)calloc((size_t)n, sizeof *rs);
  double *ttfb = (double *)calloc((size_t)n, sizeof *ttfb), *end = (double *)calloc((size_t)n, sizeof *end);
  int *eng_of = (int *)calloc((size_t)n, sizeof *eng_of);
  int *rq_ok = (int *)calloc((size_t)n, sizeof *rq_ok);
  cosy_engine_stats st0[MAX_ENGINES], st[MAX_ENGINES];
  sampler smp[MAX_ENGINES];
  for (int k = 0; k < n_eng; k++) {
    cosy_engine_stats_init(&st0[k], sizeof st0[k]);
    cosy_engine_stats_init(&st[k], sizeof st[k]);
    cosy_engine_get_stats(e[k], &st0[k]);
    sampler_start(&smp[k], &mon[k]);
  }
  double w0 = now();
  int submitted = 0;
  long chars = 0;
  for (int i = 0; i < n; i++) {
    cosy_synth_params p;
    cosy_synth_params_init(&p, sizeof p);
    p.seed = 1000 + (uint64_t)i;
    p.min_tokens = p.max_tokens = tokens;
    const char *text = texts[i % n_texts];
    const int k = i % n_eng;
    rs[i].t_submit = now();
    if (cosy_request_submit(e[k], v[k], text, &p, on_chunk, &rs[i], &rq[i])) {
      fprintf(stderr, "submit %d: %s\n", i, cosy_last_error());
      rq[i] = NULL;
      continue;
    }
    submitted++;
    chars += (long)strlen(text);
  }
  double t_submitted = now() - w0;
  int ok = 0;
  double audio = 0, audio_k[MAX_ENGINES] = {0};
  for (int i = 0; i < n; i++) {
    if (!rq[i]) continue;
    cosy_status s = cosy_request_wait(rq[i], -1);
    if (s) fprintf(stderr, "request %d: %s\n", i, cosy_last_error());
    cosy_request_release(rq[i]);
    if (s) continue;
    rq_ok[i] = 1;
    if (rs[i].rate) {
      audio += (double)rs[i].samples / rs[i].rate;
      audio_k[i % n_eng] += (double)rs[i].samples / rs[i].rate;
    }
    ttfb[ok] = rs[i].t_first - rs[i].t_submit;
    end[ok] = rs[i].t_last - w0;
    eng_of[ok] = i % n_eng;
    ok++;
  }
  double wall = now() - w0;
  double dev_bytes = 0, kv_bytes = 0;
  for (int k = 0; k < n_eng; k++) {
    cosy_engine_get_stats(e[k], &st[k]);
    dev_bytes += (double)st[k].device_bytes_total;
    kv_bytes += (double)st[k].kv_bytes;
  }
  printf("W2 offline: %d requests x %d tokens submitted at once (in %.1f ms)%s\n", n, tokens,
         1e3 * t_submitted, n_eng > 1 ? "; request i to engine i % engines" : "");
  printf("%5s %9s %9s %9s %8s %9s %9s %9s %9s\n", "reqs", "wall_s", "audio_s", "RTF", "xRT",
         "ttfb_p50", "ttfb_p95", "end_p50", "end_p95");
  if (n_eng > 1) { /* per engine first (pct sorts: copies of the engine's values) */
    double *tk = (double *)calloc((size_t)n + 1, sizeof *tk), *ek = (double *)calloc((size_t)n + 1, sizeof *ek);
    for (int k = 0; k < n_eng; k++) {
      int m = 0;
      for (int i = 0; i < ok; i++)
        if (eng_of[i] == k) tk[m] = ttfb[i], ek[m++] = end[i];
      printf("      e%d: %d requests, audio %.2f s, xRT %.2f, ttfb p50 %.2fs p95 %.2fs, end p50 "
             "%.2fs p95 %.2fs\n", k, m, audio_k[k], audio_k[k] / wall, pct(tk, m, 0.5),
             pct(tk, m, 0.95), pct(ek, m, 0.5), pct(ek, m, 0.95));
    }
    free(tk);
    free(ek);
  }
  printf("%5d %9.2f %9.2f %9.5f %8.2f %8.2fs %8.2fs %8.2fs %8.2fs\n", ok, wall, audio,
         audio > 0 ? wall / audio : 0.0, audio / wall, pct(ttfb, ok, 0.5), pct(ttfb, ok, 0.95),
         pct(end, ok, 0.5), pct(end, ok, 0.95));
  printf("      chars/s %.1f; engine%s %.0f MiB (KV %.0f MiB)\n", (double)chars / wall,
         n_eng > 1 ? "s hold" : " holds", dev_bytes / 1048576.0, kv_bytes / 1048576.0);
  if (ok != n) {
    printf("      (%d of %d requests failed, %d not submitted)\n", n - ok, n, n - submitted);
    g_failed += n - ok;
  }
  if (g_hash) {
    uint64_t all = FNV_OFFSET;
    for (int i = 0; i < n; i++) all = bits_add(all, rq_ok[i] ? rs[i].hash : 0);
    print_bits(all, n);
  }
  print_engines(st0, st, smp, n_eng, 0);
  fflush(stdout);
  free(rq);
  free(rs);
  free(ttfb);
  free(end);
  free(eng_of);
  free(rq_ok);
}

/* ---- W3: live users (docs/scheduler.md section 6) ------------------------------------------- */
/* U users per level. User k arrives at a uniform time in [0, --spread) s of the level, asks for an
 * utterance of a uniform length in --utter A,B seconds of audio (A * 25 .. B * 25 speech tokens
 * forced, a random line of the texts, a random seed), listens to it in real time from its first
 * chunk to the end of its playback (pausing where a chunk came late), thinks for an exponential
 * time of mean --think s, asks again; no request starts after --level-s s, and the level ends
 * when the last one has finished. Every draw comes from user k's own stream, seeded from --seed
 * and k alone (splitmix64), in a fixed order per request (text, length, seed, think), so a level
 * replays the same requests at the same offsets for a seed (the engine's timing aside: an
 * arrival depends on when the previous answer finished). Requests submitted in the first --skip
 * s are not counted. Per level: TTFB p50/p95/p99 and requests with an underrun (a chunk later than
 * its playback time: the first chunk's arrival + the audio before it) and the latest chunk's
 * lateness, over the counted requests; xRT = audio samples the engines delivered between --skip
 * and --level-s (cosy_engine_stats) per second of that window; the mean batch sizes in it and
 * their largest mean over a poll period of W3_POLL_MS (a stand-in for the largest batch: the
 * engine counts only sums); the largest active and queued counts polled. The headline: the most
 * users of a level with TTFB p95 <= --p95-ms, no underrun and no failed request. */
#define W3_TOKENS_PER_S 25 /* speech tokens per second of audio */
#define W3_POLL_MS 20

typedef struct w3_opts {
  double level_s, spread_s, think_s, skip_s, utter_min_s, utter_max_s, p95_ms;
  uint64_t seed;
  int first_chunk;
  uint32_t flags;
} w3_opts;

typedef struct w3_req {
  double t_start; /* submitted, seconds after the level started */
  double ttfb, audio_s, late_s;
  int underruns;
  cosy_status st;
} w3_req;

typedef struct w3_level {
  const w3_opts *o;
  cosy_engine **e; /* user k asks engine k % n_eng */
  cosy_voice **v;
  int n_eng, n_texts;
  char **texts;
  double t0;       /* the level's start (now()) */
  pthread_mutex_t mu;
  int next_user;   /* under mu */
  w3_req *req;     /* every request of the level, under mu */
  int n_req, cap_req, lost;
} w3_level;

typedef struct w3_row { /* a level's line of the summary */
  int users, counted, failed, under, active_max, queued_max, pass;
  double p50, p95, p99, late_max, xrt, llm, llm_max, flow, flow_max, voc;
} w3_row;

/* splitmix64 */
static uint64_t w3_next(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static double w3_unif(uint64_t *x) { return (double)(w3_next(x) >> 11) / 9007199254740992.0; }

static void sleep_until(double t) {
  for (double d; (d = t - now()) > 0;) {
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    nanosleep(&ts, NULL);
  }
}

static void *w3_user(void *arg) {
  w3_level *L = (w3_level *)arg;
  const w3_opts *o = L->o;
  pthread_mutex_lock(&L->mu);
  const int me = L->next_user++;
  pthread_mutex_unlock(&L->mu);
  const int ek = me % L->n_eng;
  uint64_t k = (uint64_t)me, rng = o->seed ^ w3_next(&k);
  double t = o->spread_s * w3_unif(&rng); /* the next request, seconds after the level started */
  while (t < o->level_s) {
    sleep_until(L->t0 + t);
    const char *text = L->texts[w3_next(&rng) % (uint64_t)L->n_texts];
    const double dur = o->utter_min_s + (o->utter_max_s - o->utter_min_s) * w3_unif(&rng);
    const uint64_t seed = w3_next(&rng);
    const double think = -o->think_s * log(1.0 - w3_unif(&rng));
    cosy_synth_params p;
    cosy_synth_params_init(&p, sizeof p);
    p.seed = seed;
    p.flags = o->flags;
    p.first_chunk_tokens = o->first_chunk;
    p.min_tokens = p.max_tokens = dur * W3_TOKENS_PER_S < 1 ? 1 : (int)lround(dur * W3_TOKENS_PER_S);
    req_state s;
    memset(&s, 0, sizeof s);
    w3_req q;
    memset(&q, 0, sizeof q);
    s.t_submit = now();
    q.t_start = s.t_submit - L->t0;
    cosy_request *r;
    q.st = cosy_request_submit(L->e[ek], L->v[ek], text, &p, on_chunk, &s, &r);
    if (q.st) {
      fprintf(stderr, "W3 user %d: submit: %s\n", me, cosy_last_error());
    } else {
      q.st = cosy_request_wait(r, -1);
      if (q.st) fprintf(stderr, "W3 user %d: %s\n", me, cosy_last_error());
      cosy_request_release(r);
    }
    if (!q.st && !s.t_first) q.st = COSY_ERR_INTERNAL; /* no audio at all: counted as a failure */
    q.ttfb = s.t_first - s.t_submit;
    q.audio_s = s.rate ? (double)s.samples / s.rate : 0;
    q.underruns = s.underruns;
    q.late_s = s.late_s;
    pthread_mutex_lock(&L->mu);
    w3_req *nr = (w3_req *)room_for(L->req, &L->cap_req, L->n_req, sizeof *nr);
    if (nr) L->req = nr, L->req[L->n_req++] = q;
    else L->lost++;
    pthread_mutex_unlock(&L->mu);
    /* listens to the end of its playback, then thinks */
    const double heard = s.play_end > now() ? s.play_end : now();
    t = heard - L->t0 + think;
  }
  return NULL;
}

/* the batch counters' growth from a to b: the mean batch sizes, and the largest means so far */
static void w3_batches(const cosy_engine_stats *a, const cosy_engine_stats *b, double *llm, double *flow,
                       double *voc) {
  long long steps = (long long)(b->llm_steps - a->llm_steps), fc = (long long)(b->flow_calls - a->flow_calls);
  long long vc = (long long)(b->vocoder_calls - a->vocoder_calls);
  *llm = steps ? (double)(b->llm_step_rows - a->llm_step_rows) / (double)steps : 0;
  *flow = fc ? (double)(b->flow_jobs - a->flow_jobs) / (double)fc : 0;
  *voc = vc ? (double)(b->vocoder_jobs - a->vocoder_jobs) / (double)vc : 0;
}

static void w3_print_row(const w3_row *r) {
  printf("%5d %5d %4d %8.1fms %8.1fms %8.1fms %8d %7.1fms %7.2f %6.1f/%-5.0f %5.1f/%-4.0f %5.1f %4d/%-4d %s\n",
         r->users, r->counted, r->failed, 1e3 * r->p50, 1e3 * r->p95, 1e3 * r->p99, r->under,
         1e3 * r->late_max, r->xrt, r->llm, r->llm_max, r->flow, r->flow_max, r->voc, r->active_max,
         r->queued_max, r->pass ? "yes" : "no");
}

static void run_w3_level(cosy_engine **e, cosy_voice **v, int n_eng, char **texts, int n_texts,
                         const w3_opts *o, int users, gpu_mon *mon, w3_row *row) {
  w3_level L;
  memset(&L, 0, sizeof L);
  memset(row, 0, sizeof *row);
  row->users = users;
  L.o = o;
  L.e = e;
  L.v = v;
  L.n_eng = n_eng;
  L.texts = texts;
  L.n_texts = n_texts;
  pthread_mutex_init(&L.mu, NULL);
  pthread_t *th = (pthread_t *)calloc((size_t)users, sizeof *th);
  cosy_engine_stats a[MAX_ENGINES], b[MAX_ENGINES], prev[MAX_ENGINES];
  int rate = 0;
  sampler smp[MAX_ENGINES];
  for (int k = 0; k < n_eng; k++) {
    cosy_engine_stats_init(&a[k], sizeof a[k]);
    cosy_engine_stats_init(&b[k], sizeof b[k]);
    cosy_engine_info info;
    cosy_engine_info_init(&info, sizeof info);
    if (cosy_engine_get_info(e[k], &info) == COSY_OK) rate = info.sample_rate;
    sampler_start(&smp[k], &mon[k]);
  }
  L.t0 = now();
  const int started = start_threads(th, users, w3_user, &L, "W3 users");
  /* the counted window [skip, level]: the engines' counters at its ends and polled within */
  sleep_until(L.t0 + o->skip_s);
  for (int k = 0; k < n_eng; k++) cosy_engine_get_stats(e[k], &a[k]), prev[k] = a[k];
  const double ta = now();
  for (int last = 0; !last;) {
    const double left = L.t0 + o->level_s - now();
    last = left <= 1e-3 * W3_POLL_MS;
    sleep_until(now() + (last ? (left > 0 ? left : 0) : 1e-3 * W3_POLL_MS));
    int active = 0, queued = 0;
    for (int k = 0; k < n_eng; k++) {
      cosy_engine_get_stats(e[k], &b[k]);
      active += b[k].active;
      queued += b[k].queued;
      double llm, flow, voc;
      w3_batches(&prev[k], &b[k], &llm, &flow, &voc);
      if (llm > row->llm_max) row->llm_max = llm;
      if (flow > row->flow_max) row->flow_max = flow;
      prev[k] = b[k];
    }
    if (active > row->active_max) row->active_max = active;
    if (queued > row->queued_max) row->queued_max = queued;
  }
  const double tb = now();
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  const double wall = now() - L.t0;
  double audio = 0;
  for (int k = 0; k < n_eng; k++) audio += (double)(b[k].audio_samples_out - a[k].audio_samples_out);
  row->xrt = rate && tb > ta ? audio / rate / (tb - ta) : 0;
  /* the counted requests */
  double *tt = (double *)calloc((size_t)L.n_req + 1, sizeof *tt);
  int total = L.n_req, ok = 0, shown = 0;
  for (int i = 0; i < L.n_req; i++) {
    const w3_req *q = &L.req[i];
    if (q->t_start < o->skip_s) continue;
    if (q->st) {
      row->failed++;
      continue;
    }
    tt[ok++] = q->ttfb;
    if (q->underruns) {
      row->under++;
      if (q->late_s > row->late_max) row->late_max = q->late_s;
    }
  }
  row->failed += L.lost;
  row->counted = ok;
  row->p50 = pct(tt, ok, 0.5);
  row->p95 = pct(tt, ok, 0.95);
  row->p99 = pct(tt, ok, 0.99);
  row->pass = ok > 0 && !row->failed && !row->under && started == users && 1e3 * row->p95 <= o->p95_ms;
  for (int k = 0; k < n_eng; k++) { /* over the window, all engines */
    double llm, flow, voc;
    w3_batches(&a[k], &b[k], &llm, &flow, &voc);
    row->llm += llm / n_eng, row->flow += flow / n_eng, row->voc += voc / n_eng;
  }
  w3_print_row(row);
  printf("      level %.1f s (the last request ended %.1f s after the level's %g s); %d requests, %d "
         "submitted in the first %g s not counted\n", wall, wall - o->level_s, o->level_s, total,
         total - ok - row->failed + L.lost, o->skip_s);
  for (int i = 0; i < L.n_req && shown < 4; i++) {
    const w3_req *q = &L.req[i];
    if (q->st || !q->underruns || q->t_start < o->skip_s) continue;
    printf("%s request at %.2f s (ttfb %.1f ms, %.2f s of audio): %d chunks late, by up to %.1f ms",
           shown ? ";" : "      underruns:", q->t_start, 1e3 * q->ttfb, q->audio_s, q->underruns,
           1e3 * q->late_s);
    shown++;
  }
  if (shown) printf("\n");
  print_engines(a, b, smp, n_eng, 1);
  if (row->failed) {
    printf("      (%d counted requests failed)\n", row->failed);
    g_failed += row->failed;
  }
  fflush(stdout);
  free(tt);
  free(th);
  free(L.req);
  pthread_mutex_destroy(&L.mu);
}

static void w3_header(void) {
  printf("%5s %5s %4s %10s %10s %10s %8s %9s %7s %12s %10s %5s %9s %s\n", "users", "reqs", "fail",
         "ttfb_p50", "ttfb_p95", "ttfb_p99", "underrun", "late_max", "xRT", "llm_b/max", "flow_b/max",
         "voc_b", "act/queue", "ok");
}

/* all the levels, then the summary table and the headline */
static void run_w3(cosy_engine **e, cosy_voice **v, int n_eng, char **texts, int n_texts,
                   const w3_opts *o, const int *users, int n_levels, gpu_mon *mon) {
  w3_row rows[64];
  printf("W3 live users: arrivals over %.1f s, utterances of %.1f-%.1f s (%d-%d tokens), think "
         "time exponential of mean %.2f s, levels of %.1f s, requests of the first %.1f s not "
         "counted, seed %llu; ok = TTFB p95 <= %.0f ms, no underrun, no failure\n",
         o->spread_s, o->utter_min_s, o->utter_max_s, (int)lround(o->utter_min_s * W3_TOKENS_PER_S),
         (int)lround(o->utter_max_s * W3_TOKENS_PER_S), o->think_s, o->level_s, o->skip_s,
         (unsigned long long)o->seed, o->p95_ms);
  printf("(llm_b, flow_b, voc_b: mean batch sizes in the counted window; /max: the largest mean "
         "over %d ms; act/queue: the most requests active / queued)\n", W3_POLL_MS);
  w3_header();
  for (int li = 0; li < n_levels; li++)
    run_w3_level(e, v, n_eng, texts, n_texts, o, users[li], mon, &rows[li]);
  printf("W3 summary\n");
  w3_header();
  int best = -1;
  for (int li = 0; li < n_levels; li++) {
    const w3_row *r = &rows[li];
    w3_print_row(r);
    if (r->pass && (best < 0 || r->users > rows[best].users)) best = li;
  }
  if (best >= 0)
    printf("W3 headline: %d users (TTFB p95 %.1f ms <= %.0f ms, no underrun)\n", rows[best].users,
           1e3 * rows[best].p95, o->p95_ms);
  else
    printf("W3 headline: no level has TTFB p95 <= %.0f ms with no underrun\n", o->p95_ms);
  fflush(stdout);
}

/* ---- W4: text streamed in by simulated LLMs (docs/scheduler.md section 6) ------------------- */
/* run_ts: C sessions per level (--text-stream WPS_MIN,WPS_MAX with --concurrency C1,C2,...), closed loop
 * for --level-s seconds. Session k draws from its own stream (splitmix64, seeded from --seed and k
 * as W3's users are): first its writing rate, uniform in [WPS_MIN, WPS_MAX) words a second, once;
 * then per utterance the first line (a uniform index into the texts) and the synthesis seed. An
 * utterance says --ts-lines consecutive lines of the texts (wrapping), joined by one space; its
 * pieces are its words each with the white space after it (the regular expression \S+\s*: their
 * concatenation is the text, leading white space aside), pushed with cosy_request_push_text at
 * t0 + i / rate for word i, then cosy_request_end_text (submitted with COSY_SYNTH_TEXT_STREAM and
 * no text at t0, the first piece pushed at once). A random-weight model never samples the stop
 * token, so each utterance is bounded: max_tokens = --ts-tokens-per-word (8) x its words, about
 * 3.1 words a second of speech (two lines of the benchmark texts: ~26 words, ~8 s); the text
 * streaming schedule writes 3 speech tokens per text token while text comes (~4 a word), so the
 * bound is reached only after the text has ended. The next utterance starts when the previous
 * one's audio is all delivered. Utterances started in the first --skip s are not counted; none
 * starts after --level-s s. Per utterance: first audio = the first piece pushed (t0) -> the first
 * chunk; an underrun is a chunk later than playback from the first chunk in real time (W1's rule,
 * counted per utterance), with the latest lateness. Per level: utterances counted and failed, first
 * audio p50/p95/p99, utterances with an underrun and the latest chunk's lateness, xRT (audio of the
 * counted utterances per second from --skip to the last one's end), mean words, audio and
 * writing time per utterance. bench/serve_ws.py runs the same sessions (the same draws, texts,
 * pieces, times, seeds and bounds) through the server's WebSocket; --ts-dump DIR writes the audio
 * of sessions 0..3 (float32, DIR/sK_uJ.f32) and DIR/index.tsv (session, utterance, seed,
 * max_tokens, text) so that it can check its audio against this. */
#define TS_DUMP_SESSIONS 4

typedef struct ts_opts {
  double wps_min, wps_max, tokens_per_word;
  int lines;
  const char *dump;   /* --ts-dump DIR, or NULL */
} ts_opts;

typedef struct ts_utt {
  double t_start, ttfa, audio_s, late_s, text_s;
  double t_end;       /* the last chunk, seconds after the level started */
  int underruns, words;
  cosy_status st;
} ts_utt;

typedef struct ts_level {
  const w3_opts *o;
  const ts_opts *t;
  cosy_engine **e;
  cosy_voice **v;
  int n_eng, n_texts;
  char **texts;
  double t0;
  pthread_mutex_t mu;
  int next_user;
  ts_utt *utt;        /* under mu */
  int n_utt, cap_utt, lost;
  FILE *index;        /* --ts-dump's index.tsv, under mu */
} ts_level;

typedef struct ts_req {
  req_state s;
  float *pcm;         /* the audio, when dumped */
  int64_t n, cap;
  int keep;
} ts_req;

static int32_t ts_on_chunk(void *user, const cosy_chunk *c) {
  ts_req *q = (ts_req *)user;
  on_chunk(&q->s, c);
  if (q->keep && c->n_samples > 0) {
    if (q->n + c->n_samples > q->cap) {
      int64_t cap = q->cap ? 2 * q->cap : 1 << 16;
      while (cap < q->n + c->n_samples) cap *= 2;
      float *np_ = (float *)realloc(q->pcm, (size_t)cap * sizeof *np_);
      if (!np_) {
        q->keep = 0;
        return 0;
      }
      q->pcm = np_;
      q->cap = cap;
    }
    memcpy(q->pcm + q->n, c->pcm, (size_t)c->n_samples * sizeof *q->pcm);
    q->n += c->n_samples;
  }
  return 0;
}

/* the utterance's text: `lines` lines of texts from `first` (wrapping), joined by one space */
static char *ts_text(char **texts, int n_texts, int first, int lines) {
  size_t L = 1;
  for (int i = 0; i < lines; i++) L += strlen(texts[(first + i) % n_texts]) + 1;
  char *s = (char *)malloc(L);
  if (!s) return NULL;
  s[0] = '\0';
  for (int i = 0; i < lines; i++) {
    if (i) strcat(s, " ");
    strcat(s, texts[(first + i) % n_texts]);
  }
  return s;
}

static int ts_is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* text cut into pieces \S+\s* (leading white space dropped): *out gets a malloc'ed array of
 * malloc'ed strings; the count */
static int ts_pieces(const char *text, char ***out) {
  int n = 0, cap = 0;
  char **v = NULL;
  const char *p = text;
  while (*p && ts_is_space(*p)) p++;
  while (*p) {
    const char *b = p;
    while (*p && !ts_is_space(*p)) p++;
    while (*p && ts_is_space(*p)) p++;
    if (n == cap) {
      cap = cap ? 2 * cap : 32;
      char **nv = (char **)realloc(v, (size_t)cap * sizeof *nv);
      if (!nv) break;
      v = nv;
    }
    v[n] = (char *)malloc((size_t)(p - b) + 1);
    if (!v[n]) break;
    memcpy(v[n], b, (size_t)(p - b));
    v[n][p - b] = '\0';
    n++;
  }
  *out = v;
  return n;
}

static void ts_dump_write(const char *dir, int k, int j, const float *pcm, int64_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/s%d_u%d.f32", dir, k, j);
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(pcm, sizeof *pcm, (size_t)n, f) != (size_t)n))
    fprintf(stderr, "bench_w1: --ts-dump: cannot write %s\n", path);
  if (f) fclose(f);
}

static void *ts_session(void *arg) {
  ts_level *L = (ts_level *)arg;
  const w3_opts *o = L->o;
  const ts_opts *t = L->t;
  pthread_mutex_lock(&L->mu);
  const int me = L->next_user++;
  pthread_mutex_unlock(&L->mu);
  const int ek = me % L->n_eng;
  uint64_t k = (uint64_t)me, rng = o->seed ^ w3_next(&k);
  const double rate = t->wps_min + (t->wps_max - t->wps_min) * w3_unif(&rng);
  for (int j = 0; now() - L->t0 < o->level_s; j++) {
    const int first = (int)(w3_next(&rng) % (uint64_t)L->n_texts);
    const uint64_t seed = w3_next(&rng);
    char *text = ts_text(L->texts, L->n_texts, first, t->lines);
    char **pieces = NULL;
    const int np_ = text ? ts_pieces(text, &pieces) : 0;
    cosy_synth_params p;
    cosy_synth_params_init(&p, sizeof p);
    p.seed = seed;
    p.flags = o->flags | COSY_SYNTH_TEXT_STREAM;
    p.first_chunk_tokens = o->first_chunk;
    const long mt = lround(t->tokens_per_word * np_);
    p.max_tokens = mt < 1 ? 1 : mt > 1000000 ? 1000000 : (int32_t)mt;
    ts_req q;
    memset(&q, 0, sizeof q);
    q.keep = t->dump && me < TS_DUMP_SESSIONS;
    ts_utt u;
    memset(&u, 0, sizeof u);
    u.words = np_;
    const double t0 = now();
    q.s.t_submit = t0;
    u.t_start = t0 - L->t0;
    cosy_request *r = NULL;
    u.st = np_ ? cosy_request_submit(L->e[ek], L->v[ek], NULL, &p, ts_on_chunk, &q, &r) : COSY_ERR_TEXT;
    if (u.st) {
      fprintf(stderr, "W4 session %d: submit: %s\n", me, np_ ? cosy_last_error() : "no text");
    } else {
      for (int i = 0; i < np_ && !u.st; i++) {
        if (i) sleep_until(t0 + i / rate);
        u.st = cosy_request_push_text(r, pieces[i]);
      }
      if (!u.st) u.st = cosy_request_end_text(r);
      u.text_s = now() - t0;
      if (u.st) {
        fprintf(stderr, "W4 session %d: push: %s\n", me, cosy_last_error());
        cosy_request_cancel(r);
        cosy_request_wait(r, -1);
      } else {
        u.st = cosy_request_wait(r, -1);
        if (u.st) fprintf(stderr, "W4 session %d: %s\n", me, cosy_last_error());
      }
      cosy_request_release(r);
    }
    if (!u.st && !q.s.t_first) u.st = COSY_ERR_INTERNAL; /* no audio at all: a failure */
    u.ttfa = q.s.t_first - t0;
    u.audio_s = q.s.rate ? (double)q.s.samples / q.s.rate : 0;
    u.underruns = q.s.underruns;
    u.late_s = q.s.late_s;
    u.t_end = q.s.t_last - L->t0;
    if (q.keep && !u.st) ts_dump_write(t->dump, me, j, q.pcm, q.n);
    pthread_mutex_lock(&L->mu);
    if (L->index && me < TS_DUMP_SESSIONS)
      fprintf(L->index, "%d\t%d\t%llu\t%d\t%s\n", me, j, (unsigned long long)seed, p.max_tokens,
              text ? text : "");
    ts_utt *nu = (ts_utt *)room_for(L->utt, &L->cap_utt, L->n_utt, sizeof *nu);
    if (nu) L->utt = nu, L->utt[L->n_utt++] = u;
    else L->lost++;
    pthread_mutex_unlock(&L->mu);
    free(q.pcm);
    for (int i = 0; i < np_; i++) free(pieces[i]);
    free(pieces);
    free(text);
  }
  return NULL;
}

static void ts_header(void) {
  printf("%5s %5s %4s %10s %10s %10s %8s %9s %7s %6s %7s %7s\n", "C", "utts", "fail", "fa_p50",
         "fa_p95", "fa_p99", "underrun", "late_max", "xRT", "words", "audio_s", "text_s");
}

static void run_ts(cosy_engine **e, cosy_voice **v, int n_eng, char **texts, int n_texts,
                   const w3_opts *o, const ts_opts *t, const int *levels, int n_levels, gpu_mon *mon) {
  printf("W4 text stream: each session writes at a rate drawn uniformly in %g-%g words/s (its own "
         "stream, seed %llu), utterances of %d line%s of the texts pushed word by word, "
         "max_tokens = %g x words, levels of %g s, utterances started in the first %g s not "
         "counted; fa = first audio after the first piece pushed\n",
         t->wps_min, t->wps_max, (unsigned long long)o->seed, t->lines, t->lines == 1 ? "" : "s",
         t->tokens_per_word, o->level_s, o->skip_s);
  ts_header();
  for (int li = 0; li < n_levels; li++) {
    const int C = levels[li];
    ts_level L;
    memset(&L, 0, sizeof L);
    L.o = o;
    L.t = t;
    L.e = e;
    L.v = v;
    L.n_eng = n_eng;
    L.texts = texts;
    L.n_texts = n_texts;
    pthread_mutex_init(&L.mu, NULL);
    if (t->dump) {
      char path[4096];
      snprintf(path, sizeof path, "%s/index.tsv", t->dump);
      if (!(L.index = fopen(path, "w"))) fprintf(stderr, "bench_w1: --ts-dump: cannot write %s\n", path);
    }
    cosy_engine_stats st0[MAX_ENGINES], st[MAX_ENGINES];
    sampler smp[MAX_ENGINES];
    for (int k = 0; k < n_eng; k++) {
      cosy_engine_stats_init(&st0[k], sizeof st0[k]);
      cosy_engine_stats_init(&st[k], sizeof st[k]);
      cosy_engine_get_stats(e[k], &st0[k]);
      sampler_start(&smp[k], &mon[k]);
    }
    pthread_t *th = (pthread_t *)calloc((size_t)C, sizeof *th);
    L.t0 = now();
    const int started = start_threads(th, C, ts_session, &L, "W4 sessions");
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    const double wall = now() - L.t0;
    for (int k = 0; k < n_eng; k++) cosy_engine_get_stats(e[k], &st[k]);
    if (L.index) fclose(L.index);
    double *fa = (double *)calloc((size_t)L.n_utt + 1, sizeof *fa);
    int ok = 0, failed = L.lost, under = 0, words = 0;
    double late = 0, audio = 0, text_s = 0, t_end = o->skip_s;
    for (int i = 0; i < L.n_utt; i++) {
      const ts_utt *u = &L.utt[i];
      if (u->t_start < o->skip_s) continue;
      if (u->st) {
        failed++;
        continue;
      }
      fa[ok++] = u->ttfa;
      if (u->underruns) under++;
      if (u->late_s > late) late = u->late_s;
      audio += u->audio_s;
      words += u->words;
      text_s += u->text_s;
      if (u->t_end > t_end) t_end = u->t_end;
    }
    const double xrt = t_end > o->skip_s ? audio / (t_end - o->skip_s) : 0;
    printf("%5d %5d %4d %8.1fms %8.1fms %8.1fms %8d %7.1fms %7.2f %6.1f %7.2f %7.2f\n", C, ok,
           failed, 1e3 * pct(fa, ok, 0.5), 1e3 * pct(fa, ok, 0.95), 1e3 * pct(fa, ok, 0.99), under,
           1e3 * late, xrt, ok ? (double)words / ok : 0.0, ok ? audio / ok : 0.0,
           ok ? text_s / ok : 0.0);
    printf("      level %.1f s (the last utterance ended %.1f s after the level's %g s); %d "
           "utterances, %d started in the first %g s not counted\n", wall, wall - o->level_s,
           o->level_s, L.n_utt + L.lost, L.n_utt - ok - (failed - L.lost), o->skip_s);
    if (!ok && !failed)
      printf("      (no utterance counted: every one started in the first %g s; a longer --level-s)\n",
             o->skip_s);
    print_engines(st0, st, smp, n_eng, 0);
    if (failed) {
      printf("      (%d counted utterances failed)\n", failed);
      g_failed += failed;
    }
    fflush(stdout);
    free(fa);
    free(th);
    free(L.utt);
    pthread_mutex_destroy(&L.mu);
  }
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

/* one engine's row of a W1 level ("e0" etc. in the C column when label is set), over the
 * requests of engine k (k < 0: all); its xRT over the level's wall time */
static void w1_row(const result *res, int total, int k, int C, const char *label, double wall,
                   double mem_mib, int *ok_out, double *sums) {
  double *tt = (double *)calloc((size_t)total + 1, sizeof *tt), *rt = (double *)calloc((size_t)total + 1, sizeof *rt);
  int ok = 0, under = 0;
  long chars = 0;
  double audio = 0, llm = 0, flow = 0, voc = 0;
  for (int i = 0; i < total; i++) {
    if (res[i].st || (k >= 0 && res[i].eng != k)) continue;
    tt[ok] = res[i].ttfb;
    rt[ok] = res[i].rtf;
    ok++;
    under += res[i].underruns > 0;
    chars += res[i].chars;
    audio += res[i].audio_s;
    llm += res[i].llm_s;
    flow += res[i].flow_s;
    voc += res[i].voc_s;
  }
  if (label)
    printf("%5s %5d %8.1fms %8.1fms %8.4f %8.4f %7.2f %9d %9.1f %10.0f\n", label, ok,
           1e3 * pct(tt, ok, 0.5), 1e3 * pct(tt, ok, 0.95), pct(rt, ok, 0.5), pct(rt, ok, 0.95),
           audio / wall, under, (double)chars / wall, mem_mib);
  else
    printf("%5d %5d %8.1fms %8.1fms %8.4f %8.4f %7.2f %9d %9.1f %10.0f\n", C, ok,
           1e3 * pct(tt, ok, 0.5), 1e3 * pct(tt, ok, 0.95), pct(rt, ok, 0.5), pct(rt, ok, 0.95),
           audio / wall, under, (double)chars / wall, mem_mib);
  *ok_out = ok;
  sums[0] = audio, sums[1] = llm, sums[2] = flow, sums[3] = voc;
  free(tt);
  free(rt);
}

/* a list of positive counts "1,4,16" into out[0..64); the count, or -1 (printed) when bad */
static int parse_levels(const char *list, int *out, const char *opt) {
  int n = 0;
  for (const char *p = list; p && *p;) {
    char *end;
    long c = strtol(p, &end, 10);
    if (n == 64 || end == p || (*end && *end != ',') || c < 1 || c > 1000000) {
      fprintf(stderr, "bench_w1: bad %s \"%s\" (a list of at most 64 positive counts: 1,4,16)\n", opt, list);
      return -1;
    }
    out[n++] = (int)c;
    p = *end ? end + 1 : end;
  }
  if (!n) fprintf(stderr, "bench_w1: empty %s\n", opt);
  return n ? n : -1;
}

int main(int argc, char **argv) {
  const char *model = NULL, *texts_path = "../shared/bench/w1_texts.txt";
  const char *wav = "../shared/audio/zero_shot_prompt.wav", *conc = NULL, *dev_arg = "-1";
  int requests = 0, tokens = 0, warmup = 2, w2_n = 0, max_active = 0, voc_prec = 0, first_chunk = 0,
      first_wait = 0, n_ptok = 87;
  double mem_gb = 0;
  float mem_fraction = 0;
  double ramp = 0;
  uint32_t flags = 0;
  const char *users_arg = NULL; /* --w3 / --users: W3's levels */
  const char *voice_path = NULL; /* --voice FILE: a saved voice instead of the generated one */
  w3_opts w3 = {40, 8, 2, 10, 2, 10, 200, 1, 0, 0};
  ts_opts ts = {0, 0, 8, 2, NULL}; /* --text-stream (W4): wps_min = 0 while not asked for */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
    else if (!strcmp(argv[i], "--device") && i + 1 < argc) dev_arg = argv[++i];
    else if (!strcmp(argv[i], "--concurrency") && i + 1 < argc) conc = argv[++i];
    else if (!strcmp(argv[i], "--requests") && i + 1 < argc) requests = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
      ++i;
      tokens = !strcmp(argv[i], "default") ? -1 : atoi(argv[i]);
      if (tokens == 0) tokens = -2; /* refused below */
    }
    else if (!strcmp(argv[i], "--prompt-tokens") && i + 1 < argc) n_ptok = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--texts") && i + 1 < argc) texts_path = argv[++i];
    else if (!strcmp(argv[i], "--prompt-wav") && i + 1 < argc) wav = argv[++i];
    else if (!strcmp(argv[i], "--w2")) w2_n = 256;
    else if (!strcmp(argv[i], "--offline") && i + 1 < argc) w2_n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--max-active") && i + 1 < argc) max_active = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--memory-fraction") && i + 1 < argc) mem_fraction = (float)atof(argv[++i]);
    else if (!strcmp(argv[i], "--memory-gb") && i + 1 < argc) mem_gb = atof(argv[++i]);
    else if (!strcmp(argv[i], "--ramp") && i + 1 < argc) ramp = atof(argv[++i]);
    else if (!strcmp(argv[i], "--one-shot")) flags |= COSY_SYNTH_ONE_SHOT;
    else if (!strcmp(argv[i], "--hash")) g_hash = 1;
    else if (!strcmp(argv[i], "--vocoder-tf32")) voc_prec = COSY_VOCODER_TF32;
    else if (!strcmp(argv[i], "--vocoder-accurate")) voc_prec = COSY_VOCODER_ACCURATE;
    else if (!strcmp(argv[i], "--vocoder-fp16")) voc_prec = COSY_VOCODER_FP16;
    else if (!strcmp(argv[i], "--first-chunk") && i + 1 < argc) first_chunk = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--first-wait") && i + 1 < argc) first_wait = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--w3")) users_arg = users_arg ? users_arg : "128,192,256,320";
    else if (!strcmp(argv[i], "--users") && i + 1 < argc) users_arg = argv[++i];
    else if (!strcmp(argv[i], "--level-s") && i + 1 < argc) w3.level_s = atof(argv[++i]);
    else if (!strcmp(argv[i], "--spread") && i + 1 < argc) w3.spread_s = atof(argv[++i]);
    else if (!strcmp(argv[i], "--think") && i + 1 < argc) w3.think_s = atof(argv[++i]);
    else if (!strcmp(argv[i], "--skip") && i + 1 < argc) w3.skip_s = atof(argv[++i]);
    else if (!strcmp(argv[i], "--p95-ms") && i + 1 < argc) w3.p95_ms = atof(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) w3.seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--text-stream") && i + 1 < argc) {
      if (sscanf(argv[++i], "%lf,%lf", &ts.wps_min, &ts.wps_max) != 2) ts.wps_min = -1;
      else if (!(ts.wps_min > 0)) ts.wps_min = -1;
    }
    else if (!strcmp(argv[i], "--ts-lines") && i + 1 < argc) ts.lines = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--ts-tokens-per-word") && i + 1 < argc) ts.tokens_per_word = atof(argv[++i]);
    else if (!strcmp(argv[i], "--ts-dump") && i + 1 < argc) ts.dump = argv[++i];
    else if (!strcmp(argv[i], "--voice") && i + 1 < argc) voice_path = argv[++i];
    else if (!strcmp(argv[i], "--utter") && i + 1 < argc) {
      if (sscanf(argv[++i], "%lf,%lf", &w3.utter_min_s, &w3.utter_max_s) != 2) w3.utter_min_s = -1;
    } else {
      fprintf(stderr, "usage: bench_w1 -m MODEL [--device N | --device N,M,...] [--concurrency 1,4,16] "
                      "[--requests N] [--tokens 112 | --tokens default] [--prompt-tokens 87] [--warmup 2] [--texts FILE] [--prompt-wav WAV] "
                      "[--w2 | --offline N] [--max-active N] [--ramp SECONDS] [--one-shot] [--hash] "
                      "[--vocoder-tf32 | --vocoder-accurate | --vocoder-fp16] [--first-chunk N] [--first-wait N] [--memory-fraction F | --memory-gb G] "
                      "[--w3 | --users 128,192] [--level-s 40] [--spread 8] [--think 2] [--utter 2,10] "
                      "[--skip 10] [--seed 1] [--p95-ms 200] "
                      "[--text-stream 20,40 [--ts-lines 2] [--ts-tokens-per-word 8] [--ts-dump DIR]] [--voice FILE]\n");
      return 2;
    }
  }
  if (!model) {
    fprintf(stderr, "bench_w1: -m MODEL is required\n");
    return 2;
  }
  if (w2_n < 0 || tokens < -1 || requests < 0 || max_active < 0 || !(ramp >= 0)) {
    fprintf(stderr, "bench_w1: negative --offline, --requests or --max-active, or --tokens neither "
                    "a count nor \"default\"\n");
    return 2;
  }
  if (n_ptok < 1 || n_ptok > 3000) {
    fprintf(stderr, "bench_w1: --prompt-tokens %d is outside 1..3000\n", n_ptok);
    return 2;
  }
  if (!(w3.level_s > 0 && w3.level_s < 1e6) || !(w3.skip_s >= 0 && w3.skip_s < w3.level_s)) {
    fprintf(stderr, "bench_w1: --level-s must be > 0 and --skip in [0, --level-s) (%g, %g)\n",
            w3.level_s, w3.skip_s);
    return 2;
  }
  if (!(w3.spread_s >= 0 && w3.spread_s < 1e6) || !(w3.think_s >= 0 && w3.think_s < 1e6) ||
      !(w3.p95_ms > 0)) {
    fprintf(stderr, "bench_w1: --spread and --think must be >= 0, --p95-ms > 0\n");
    return 2;
  }
  if (!(w3.utter_min_s > 0 && w3.utter_min_s <= w3.utter_max_s && w3.utter_max_s <= 600)) {
    fprintf(stderr, "bench_w1: --utter A,B: seconds of audio, 0 < A <= B <= 600\n");
    return 2;
  }
  if (ts.wps_min < 0 || (ts.wps_min > 0 && !(ts.wps_max >= ts.wps_min && ts.wps_max <= 1000))) {
    fprintf(stderr, "bench_w1: --text-stream WPS_MIN,WPS_MAX: words a second, 0 < WPS_MIN <= "
                    "WPS_MAX <= 1000\n");
    return 2;
  }
  if (ts.lines < 1 || ts.lines > 64 || !(ts.tokens_per_word >= 1 && ts.tokens_per_word <= 100)) {
    fprintf(stderr, "bench_w1: --ts-lines must be in 1..64 and --ts-tokens-per-word in 1..100\n");
    return 2;
  }
  if (ts.dump && ts.wps_min == 0) {
    fprintf(stderr, "bench_w1: --ts-dump needs --text-stream\n");
    return 2;
  }
  int users[64], n_w3 = 0;
  if (users_arg && (n_w3 = parse_levels(users_arg, users, "--users")) < 0) return 2;
  /* --device: one device, or a list (one engine per entry; -1 = the CPU) */
  int devs[MAX_ENGINES], n_eng = 0;
  for (const char *p = dev_arg; *p;) {
    char *end;
    long d = strtol(p, &end, 10);
    if (end == p || (*end && *end != ',') || d < -1 || d > 1023 || n_eng == MAX_ENGINES) {
      fprintf(stderr, "bench_w1: bad --device \"%s\" (a device, -1 for the CPU, or a list of at "
                      "most %d: 0,1)\n", dev_arg, MAX_ENGINES);
      return 2;
    }
    devs[n_eng++] = (int)d;
    p = *end ? end + 1 : end;
  }
  if (!n_eng) {
    fprintf(stderr, "bench_w1: empty --device\n");
    return 2;
  }
  const int device = devs[0];
  int any_gpu = 0;
  for (int k = 0; k < n_eng; k++) any_gpu |= devs[k] >= 0;
  /* --w2 or --w3 alone runs only W2 or W3; W1 runs when asked for or when neither is */
  if (!conc && !w2_n && !n_w3) conc = "1";
  /* --tokens default: min_tokens = max_tokens = 0 (the library's defaults) */
  int w1_tokens = tokens > 0 ? tokens : tokens < 0 ? 0 : 112;
  int w2_tokens = tokens > 0 ? tokens : tokens < 0 ? 0 : 250;
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
  /* --prompt-tokens beyond the wav: its audio again and again until the mel covers them (two
   * frames per token, 480 samples a frame at 24 kHz: the mel's length follows the samples) */
  const int64_t want_n = (int64_t)((double)(2 * n_ptok + 2) * sr / 50.0);
  if (n < want_n) {
    float *rep = (float *)malloc((size_t)want_n * sizeof *rep);
    if (!rep) return 1;
    for (int64_t i = 0; i < want_n; i++) rep[i] = pcm[i % n];
    free(pcm);
    pcm = rep;
    n = want_n;
  }
  float *mel;
  int32_t frames;
  if (cosy_audio_to_mel(pcm, n, sr, &mel, &frames)) {
    fprintf(stderr, "bench_w1: mel: %s\n", cosy_last_error());
    return 1;
  }
  free(pcm);
  int32_t *ptok = (int32_t *)malloc(sizeof *ptok * (size_t)n_ptok);
  float spk[192];
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < n_ptok; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    ptok[i] = (int32_t)((x >> 33) % 6561);
  }
  for (int i = 0; i < 192; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    spk[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }

  /* concurrency levels: any positive count (nothing here caps them; see max_active below) */
  int levels[64], n_levels = 0, max_c = 1;
  if (conc && (n_levels = parse_levels(conc, levels, "--concurrency")) < 0) return 2;
  for (int li = 0; li < n_levels; li++)
    if (levels[li] > max_c) max_c = levels[li];
  for (int li = 0; li < n_w3; li++)
    if (users[li] > max_c) max_c = users[li];
  /* --text-stream: the levels are W4's (W1 does not run) */
  int ts_levels[64], n_ts = 0;
  if (ts.wps_min > 0) {
    if (!n_levels) ts_levels[n_ts++] = 1;
    for (int li = 0; li < n_levels; li++) ts_levels[n_ts++] = levels[li];
    n_levels = 0;
  }
  if (w2_n > max_c) max_c = w2_n;
  /* every level's requests decode together: max_active >= the largest level (and the W2 count),
   * cut to what the path accepts (include/cosyvoice.h: at most 1024 on the GPU, 4096 in all).
   * With several engines each serves its share: the clients (and W2 requests) are spread evenly */
  const int per_eng = (max_c + n_eng - 1) / n_eng;
  int max_active_cap = any_gpu ? 1024 : 4096;
  if (!max_active) max_active = per_eng;
  if (max_active > max_active_cap) {
    fprintf(stderr, "bench_w1: max_active %d cut to %d (the %s path's limit); the rest queue\n",
            max_active, max_active_cap, any_gpu ? "GPU" : "CPU");
    max_active = max_active_cap;
  }
  cosy_engine *e[MAX_ENGINES];
  cosy_voice *v[MAX_ENGINES];
  gpu_mon mon[MAX_ENGINES];
  double t0 = now();
  for (int k = 0; k < n_eng; k++) {
    cosy_engine_config cfg;
    cosy_engine_config_init(&cfg, sizeof cfg);
    cfg.model_path = model;
    cfg.device = devs[k];
    cfg.max_active = max_active;
    cfg.first_chunk_wait_max = first_wait;
    cfg.vocoder_precision = voc_prec;
    if (voc_prec == 0 || voc_prec == COSY_VOCODER_FP16) { /* the TF32 fallback count, at the end */
      cfg.log_level = COSY_LOG_INFO;
      cfg.log_fn = fp16_log;
      cfg.log_user = (void *)(intptr_t)k;
    }
    float frac = mem_fraction;
    if (mem_gb > 0) {
      frac = fraction_of_gb(devs[k], mem_gb);
      if (!(frac > 0 && frac <= 1)) {
        fprintf(stderr, "bench_w1: --memory-gb %g: not possible on device %d (fraction %g)\n", mem_gb,
                devs[k], (double)frac);
        return 2;
      }
    }
    int same = 0; /* engines of this list on this GPU: they share its memory */
    for (int j = 0; j < n_eng; j++) same += devs[j] == devs[k];
    if (frac <= 0 && devs[k] >= 0 && same > 1) {
      frac = 0.9f / (float)same;
      printf("bench_w1: %d engines on device %d: gpu_memory_fraction %.4f each\n", same, devs[k],
             (double)frac);
    } else if (frac > 0 && (k == 0 || mem_gb > 0)) {
      if (n_eng > 1)
        printf("bench_w1: e%d gpu_memory_fraction %.4f%s\n", k, (double)frac,
               mem_gb > 0 ? " (the --memory-gb budget)" : "");
      else
        printf("bench_w1: gpu_memory_fraction %.4f%s\n", (double)frac,
               mem_gb > 0 ? " (the --memory-gb budget)" : "");
    }
    if (frac > 0) cfg.gpu_memory_fraction = frac;
    /* W2 submits everything at once: room in the queue for what is not admitted yet */
    const int w2_k = (w2_n + n_eng - 1) / n_eng;
    if (w2_k - max_active > 1024) cfg.max_queued = w2_k - max_active;
    if (cosy_engine_create(&cfg, &e[k])) {
      if (n_eng == 1) fprintf(stderr, "bench_w1: engine: %s\n", cosy_last_error());
      else fprintf(stderr, "bench_w1: engine e%d on device %d: %s\n", k, devs[k], cosy_last_error());
      return 1;
    }
  }
  double t_load = now() - t0;
  cosy_voice_features vf;
  cosy_voice_features_init(&vf, sizeof vf);
  vf.prompt_text = "You are a helpful assistant.<|endofprompt|>希望你以后能够做的比我还好呦。";
  vf.speech_tokens = ptok;
  vf.n_speech_tokens = frames / 2 < n_ptok ? frames / 2 : n_ptok;
  vf.mel = mel;
  vf.n_mel_frames = frames;
  vf.speaker_embedding = spk;
  for (int k = 0; k < n_eng; k++) /* the same voice on every engine */
    if (voice_path ? cosy_voice_load(e[k], voice_path, &v[k]) : cosy_voice_from_features(e[k], &vf, &v[k])) {
      fprintf(stderr, "bench_w1: voice%s%s: %s\n", voice_path ? " " : "", voice_path ? voice_path : "",
              cosy_last_error());
      return 1;
    }
  free(ptok);
  /* W3 alone warms up with utterances of its mean length */
  int warm_tokens = n_levels ? w1_tokens : w2_n ? w2_tokens
                  : (int)lround(0.5 * (w3.utter_min_s + w3.utter_max_s) * W3_TOKENS_PER_S);
  if (warm_tokens < 1 && (n_levels || w2_n) == 0) warm_tokens = 1;
  char per_req[48];
  if (warm_tokens) snprintf(per_req, sizeof per_req, "%d tokens/request", warm_tokens);
  else snprintf(per_req, sizeof per_req, "default tokens (min/max_tokens 0)");
  if (n_eng == 1)
    if (voice_path)
      printf("bench_w1: model %s, device %d, %s, load %.2f s, voice %s, %s\n",
             model, device, cosy_version_string(), t_load, voice_path, per_req);
    else
      printf("bench_w1: model %s, device %d, %s, load %.2f s, prompt %d tokens, %s\n",
             model, device, cosy_version_string(), t_load, vf.n_speech_tokens, per_req);
  else
    printf("bench_w1: model %s, devices %s (%d engines), %s, load %.2f s (all engines), prompt %d "
           "tokens, %s\n",
           model, dev_arg, n_eng, cosy_version_string(), t_load, vf.n_speech_tokens, per_req);
  const char *prof = getenv("COSY_GPU_PROFILE"); /* the test profile the engine serves with */
  if (any_gpu && prof && *prof) printf("bench_w1: COSY_GPU_PROFILE=%s\n", prof);
  for (int k = 0; k < n_eng; k++) {
    gpu_mon_open(&mon[k], devs[k]);
    if (n_eng == 1) printf("engine max_active %d; ", max_active);
    else printf("engine e%d: device %d, max_active %d, clients (W2: requests) k %% %d == %d; ", k,
                devs[k], max_active, n_eng, k);
    if (mon[k].ok)
      printf("gpu util: NVML device %s, %.0f MiB, sampled every %d ms\n", mon[k].name,
             (double)mon[k].mem_total / 1048576.0, SAMPLE_MS);
    else
      printf("gpu util: n/a (%s)\n", mon[k].why);
  }
  /* warm-up: first calls build CUDA graphs and plans; not measured */
  for (int k = 0; k < n_eng; k++)
    for (int w = 0; w < warmup; w++) {
      cosy_synth_params p;
      cosy_synth_params_init(&p, sizeof p);
      p.seed = 1;
      p.min_tokens = p.max_tokens = warm_tokens;
      p.first_chunk_tokens = first_chunk;
      float *wpcm;
      int64_t np;
      if (cosy_synthesize(e[k], v[k], texts[w % n_texts], &p, &wpcm, &np) == COSY_OK) cosy_free(wpcm);
    }
  /* W4 warms up the text-streaming path too: the first text pushed whole, then the end */
  for (int k = 0; n_ts && k < n_eng; k++)
    for (int w = 0; w < warmup; w++) {
      cosy_synth_params p;
      cosy_synth_params_init(&p, sizeof p);
      p.seed = 1;
      p.flags = flags | COSY_SYNTH_TEXT_STREAM;
      p.first_chunk_tokens = first_chunk;
      p.max_tokens = 112;
      cosy_request *r;
      if (cosy_request_submit(e[k], v[k], texts[w % n_texts], &p, NULL, NULL, &r) == COSY_OK) {
        if (cosy_request_end_text(r) != COSY_OK) cosy_request_cancel(r);
        float buf[4096];
        int64_t got;
        while (cosy_request_read(r, buf, 4096, &got, -1) == COSY_OK && got > 0) {}
        cosy_request_release(r);
      }
    }
  if (n_eng == 1) printf("%d warm-up requests done\n", warmup);
  else printf("%d warm-up requests done on each engine\n", warmup);
  if (n_levels)
    printf("%5s %5s %9s %9s %8s %8s %7s %9s %9s %10s\n", "C", "reqs", "ttfb_p50", "ttfb_p95",
         "rtf_p50", "rtf_p95", "xRT", "underrun", "chars/s", "mem_MiB");
  for (int li = 0; li < n_levels; li++) {
    int C = levels[li];
    int total = requests ? requests : (C < 4 ? 8 : 2 * C);
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.e = e;
    sh.v = v;
    sh.n_eng = n_eng;
    sh.texts = texts;
    sh.n_texts = n_texts;
    sh.tokens = w1_tokens;
    sh.total = total;
    sh.conc = C;
    sh.ramp = ramp;
    sh.flags = flags;
    sh.first_chunk = first_chunk;
    sh.res = (result *)calloc((size_t)total, sizeof *sh.res);
    pthread_mutex_init(&sh.mu, NULL);
    pthread_t *th = (pthread_t *)calloc((size_t)C, sizeof *th);
    cosy_engine_stats st0[MAX_ENGINES], st[MAX_ENGINES];
    sampler smp[MAX_ENGINES];
    for (int k = 0; k < n_eng; k++) {
      cosy_engine_stats_init(&st0[k], sizeof st0[k]);
      cosy_engine_get_stats(e[k], &st0[k]);
      sampler_start(&smp[k], &mon[k]);
    }
    double w0 = now();
    const int started = start_threads(th, C, client, &sh, "client threads");
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    double wall = now() - w0;
    double mem_k[MAX_ENGINES], mem = 0, dev_bytes = 0, kv_bytes = 0;
    for (int k = 0; k < n_eng; k++) {
      cosy_engine_stats_init(&st[k], sizeof st[k]);
      cosy_engine_get_stats(e[k], &st[k]);
      mem_k[k] = (double)(st[k].device_bytes_total ? st[k].device_bytes_total : st[k].weights_bytes) / 1048576.0;
      mem += mem_k[k];
      dev_bytes += (double)st[k].device_bytes_total;
      kv_bytes += (double)st[k].kv_bytes;
    }
    /* the level's row (all engines), then one row per engine when there are several */
    int ok, ok_k;
    double sums[4], sums_k[4];
    w1_row(sh.res, total, -1, C, NULL, wall, mem, &ok, sums);
    for (int k = 0; n_eng > 1 && k < n_eng; k++) {
      char label[16];
      snprintf(label, sizeof label, "e%d", k);
      w1_row(sh.res, total, k, C, label, wall, mem_k[k], &ok_k, sums_k);
    }
    if (g_hash) {
      uint64_t all = FNV_OFFSET;
      for (int i = 0; i < total; i++) all = bits_add(all, sh.res[i].st ? 0 : sh.res[i].hash);
      print_bits(all, total);
    }
    fflush(stdout);
    { /* which requests ran dry: the first few, with their first chunk and the latest chunk */
      int shown = 0;
      for (int i = 0; i < total && shown < 4; i++) {
        const result *q = &sh.res[i];
        if (q->st || !q->underruns) continue;
        printf("%s request %d (ttfb %.1f ms, first chunk %.2f s of audio): chunk %d late by %.1f "
               "ms%s", shown ? ";" : "      underruns:", i, 1e3 * q->ttfb, q->first_s,
               q->late_chunk, 1e3 * q->late_s, q->underruns > 1 ? " (and more)" : "");
        shown++;
      }
      if (shown) printf("\n");
    }
    if (ok)
      printf("      per request (mean): llm %.1f ms, flow %.1f ms, vocoder %.1f ms, audio %.2f s; "
             "engine%s %.0f MiB (KV %.0f MiB)\n",
             1e3 * sums[1] / ok, 1e3 * sums[2] / ok, 1e3 * sums[3] / ok, sums[0] / ok,
             n_eng > 1 ? "s hold" : " holds", dev_bytes / 1048576.0, kv_bytes / 1048576.0);
    /* the first C requests start together (a burst unless --ramp); the rest arrive as earlier
     * ones finish: their TTFB apart shows the burst against the steady closed loop */
    if (total > C) {
      double *w1 = (double *)calloc((size_t)total, sizeof *w1), *w2 = (double *)calloc((size_t)total, sizeof *w2);
      int n1 = 0, n2 = 0;
      for (int i = 0; w1 && w2 && i < total; i++) {
        if (sh.res[i].st) continue;
        if (i < C) w1[n1++] = sh.res[i].ttfb;
        else w2[n2++] = sh.res[i].ttfb;
      }
      if (n1 && n2)
        printf("      ttfb by wave: first %d requests p50 %.1f ms p95 %.1f ms; later %d p50 %.1f ms "
               "p95 %.1f ms\n", n1, 1e3 * pct(w1, n1, 0.5), 1e3 * pct(w1, n1, 0.95), n2,
               1e3 * pct(w2, n2, 0.5), 1e3 * pct(w2, n2, 0.95));
      free(w1);
      free(w2);
    }
    if (ok != total) {
      printf("      (%d of %d requests failed)\n", total - ok, total);
      g_failed += total - ok;
    }
    print_engines(st0, st, smp, n_eng, 0);
    fflush(stdout);
    free(th);
    free(sh.res);
    pthread_mutex_destroy(&sh.mu);
  }
  if (w2_n) run_w2(e, v, n_eng, texts, n_texts, w2_n, w2_tokens, mon);
  if (n_ts) {
    w3.first_chunk = first_chunk;
    w3.flags = flags;
    run_ts(e, v, n_eng, texts, n_texts, &w3, &ts, ts_levels, n_ts, mon);
  }
  if (n_w3) {
    w3.first_chunk = first_chunk;
    w3.flags = flags;
    run_w3(e, v, n_eng, texts, n_texts, &w3, users, n_w3, mon);
  }
  for (int k = 0; k < n_eng; k++) {
    gpu_mon_close(&mon[k]);
    cosy_voice_release(v[k]);
    cosy_engine_destroy(e[k]);
  }
  cosy_free(mel);
  for (int i = 0; i < n_texts; i++) free(texts[i]);
  free(texts);
  if (g_failed) fprintf(stderr, "bench_w1: %d requests failed\n", g_failed);
  return g_failed ? 3 : 0;
}
