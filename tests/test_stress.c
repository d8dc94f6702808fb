/* test_stress.c - stress and soak of the engine: hundreds of requests from many
 * threads, random cancels, random push (callback) and pull readers, engines destroyed with
 * requests in flight, over several rounds.
 *
 * Each round creates an engine, two voices (25 and 60 prompt tokens: with and without the first
 * chunk's block padding) and runs COSY_STRESS_REQUESTS requests from COSY_STRESS_THREADS threads.
 * A request is one of a few variants (text, voice, mode, output rate 24/16/22.05 kHz, first chunk
 * size, short max_tokens, forced or free length, seed); its reader is a push callback or a pull
 * loop (random buffer sizes, timeouts -1 / 0 / 5 ms); what happens to it is drawn at random:
 * read to the end; cancelled right after submit; cancelled after a random number of samples
 * (pull, or push by polling); cancelled by its callback returning non-zero after some chunks;
 * released at once without reading (the push callback's memory is freed right after release);
 * cancelled at a random time by a separate canceller thread. Push requests are waited on later,
 * so a thread has several in flight. One round in two destroys the engine once a random share
 * of the requests has been submitted (requests queued, running and being read); the rounds use
 * different max_active, and one of three a tiny max_queued (COSY_ERR_QUEUE_FULL, retried).
 *
 * Checks (every request):
 *   - no lost or duplicated samples: a request that ends with COSY_OK delivered exactly the audio
 *     of cosy_synthesize for the same text/voice/params/seed (computed first on a separate
 *     engine), sample for sample; a cancelled one delivered a prefix of it; push chunks arrive
 *     with contiguous offsets, the output rate, exactly one COSY_CHUNK_LAST (the end) and nothing
 *     after it; no callback runs after cosy_request_release has returned;
 *   - statuses: COSY_OK or COSY_ERR_CANCELLED only, and COSY_ERR_CANCELLED only for a request
 *     that was cancelled or whose engine was destroyed; cosy_request_get_stats' n_samples equals
 *     what the reader got; after cosy_engine_destroy every request has ended (no wait blocks);
 *   - no leak: after each round's engine destroy, the heap in use (glibc mallinfo2: every arena
 *     and the mmapped blocks) is within COSY_STRESS_HEAP_SLACK_MB (default 0.25) of what it was
 *     before the first round, and host RSS (after malloc_trim; main() pins glibc's mmap and trim
 *     thresholds so that freed memory goes back to the system) within COSY_STRESS_RSS_SLACK_MB
 *     (default 4); with CUDA, device memory in use (cudaMemGetInfo) within
 *     COSY_STRESS_DEV_SLACK_MB (default 8) of the value before the first round. Under the
 *     sanitizers these checks are skipped (their allocators differ); LeakSanitizer checks leaks
 *     at exit in the ASan build;
 *   - no hang: a watchdog ends the process after COSY_STRESS_TIMEOUT seconds per round (600).
 *
 * Two tests:
 *   test_stress_cpu  the CPU engine with the small test model (make test; sized down under the
 *                    sanitizers: 160 / 32 / 24 requests per round, 3 / 2 / 2 rounds for the plain,
 *                    ASan and TSan builds);
 *   test_stress_gpu  device mode: the GPU engine on device 0 (CUDA build with a GPU, else SKIP)
 *                    with COSY_STRESS_MODEL, else COSY_FULL_MODEL, else the small model; 256
 *                    requests per round from 32 threads, 11 rounds, max_tokens up to 300 by default.
 *                    On the GPU the test runs the batch-invariant LLM (COSY_LLM_DECODE=tc unless
 *                    set: the same tokens whatever the batch) but the flow's GEMMs round by
 *                    batch size (docs/scheduler.md section 1), so
 *                    a request must have the reference's length and be within rel L2
 *                    COSY_STRESS_REL_L2 (0.05) of it (a lost, duplicated or shifted chunk or
 *                    another token gives ~1; COSY_STRESS_EXACT=1 demands every bit); the
 *                    number of exact matches and the largest difference are reported. The
 *                    memory baseline is taken after the warm-up rounds (COSY_STRESS_WARMUP: 1 on
 *                    the CPU; 3 on the GPU, one of each kind of round: see test_stress_gpu).
 *   Device command (full-size model; see bench/device_run.sh for making it):
 *     COSY_STRESS_MODEL=$PWD/build/dev/full-bf16.gguf build/dev/tests/test_stress
 * Environment (both tests; the CPU test's defaults above): COSY_STRESS_REQUESTS, _THREADS,
 * _ROUNDS, _MAX_TOKENS (the longest variant), _VARIANTS (how many of the 12), _SEED (default 1),
 * _EXACT, _REL_L2, _WARMUP, _TIMEOUT, _HEAP_SLACK_MB, _RSS_SLACK_MB, _DEV_SLACK_MB,
 * _STEADY_SLACK_MB (the heap's growth from the middle measured round to the last);
 * COSY_STRESS_ONLY=cpu|gpu runs one of the two. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cmocka.h>

#include "cosyvoice.h"
#include "testutil.h"

#ifdef COSY_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

/* ---- configuration --------------------------------------------------------------------------- */

#define NVAR 12 /* request variants (make_variants) */

typedef struct scfg {
  const char *name;
  const char *model;
  int device;
  int requests, threads, rounds, max_tokens, nvar;
  uint64_t seed;
  int exact;
  double rel_l2;  /* without exact: the largest rel L2 difference from the reference allowed */
  int warmup;     /* rounds before the memory baseline is taken */
  double rss_slack_mb, heap_slack_mb, dev_slack_mb;
  /* the heap may not grow by more than this from the middle measured round to the last one
   * (with one_step: when it grew in more than one of those rounds, by more than 0.02 MiB; the GPU
   * mode): a leak grows with the
   * work, round after round (or every other round, if only drained or only destroyed rounds
   * leak); a process-wide cache grows in steps, when a round first reaches a new high-water mark */
  double steady_slack_mb;
  int one_step;   /* tolerate growth in one round after the middle one (CUDA's process-wide caches) */
  int timeout_s;
} scfg;

static long env_l(const char *name, long dflt) {
  const char *s = getenv(name);
  return s && *s ? strtol(s, NULL, 10) : dflt;
}

static double env_d(const char *name, double dflt) {
  const char *s = getenv(name);
  return s && *s ? strtod(s, NULL) : dflt;
}

static void cfg_env(scfg *c) {
  c->requests = (int)env_l("COSY_STRESS_REQUESTS", c->requests);
  c->threads = (int)env_l("COSY_STRESS_THREADS", c->threads);
  c->rounds = (int)env_l("COSY_STRESS_ROUNDS", c->rounds);
  c->max_tokens = (int)env_l("COSY_STRESS_MAX_TOKENS", c->max_tokens);
  c->nvar = (int)env_l("COSY_STRESS_VARIANTS", c->nvar);
  if (c->nvar < 1 || c->nvar > NVAR) c->nvar = NVAR;
  c->seed = (uint64_t)env_l("COSY_STRESS_SEED", 1);
  c->exact = (int)env_l("COSY_STRESS_EXACT", c->exact);
  c->rel_l2 = env_d("COSY_STRESS_REL_L2", c->rel_l2 > 0 ? c->rel_l2 : 0.05);
  c->warmup = (int)env_l("COSY_STRESS_WARMUP", c->warmup);
  c->timeout_s = (int)env_l("COSY_STRESS_TIMEOUT", 600);
  c->rss_slack_mb = env_d("COSY_STRESS_RSS_SLACK_MB", c->rss_slack_mb > 0 ? c->rss_slack_mb : 4);
  c->heap_slack_mb =
      env_d("COSY_STRESS_HEAP_SLACK_MB", c->heap_slack_mb > 0 ? c->heap_slack_mb : 0.25);
  c->steady_slack_mb = env_d("COSY_STRESS_STEADY_SLACK_MB", 0.25);
  c->dev_slack_mb = env_d("COSY_STRESS_DEV_SLACK_MB", 8);
}

/* ---- random numbers (splitmix64: a request's plan depends only on the seed and its index) ---- */

static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static int rnd(uint64_t *s, int n) { return (int)(mix(s) % (uint64_t)n); }

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- voices and variants --------------------------------------------------------------------- */

static cosy_voice *make_voice(cosy_engine *e, int P) {
  int32_t tok[60];
  static float mel[120 * 80];
  float spk[192];
  for (int i = 0; i < P; i++) tok[i] = (i * 997 + 13 + P) % 6561;
  for (int i = 0; i < 2 * P * 80; i++) mel[i] = -6.0f + 4.0f * sinf(0.01f * (float)(i + P));
  for (int i = 0; i < 192; i++) spk[i] = cosf(0.3f * (float)i + 0.01f * (float)P);
  cosy_voice_features f;
  cosy_voice_features_init(&f, sizeof f);
  f.prompt_text = "You are a helpful assistant.<|endofprompt|>Hello there, nice to meet you.";
  f.speech_tokens = tok;
  f.n_speech_tokens = P;
  f.mel = mel;
  f.n_mel_frames = 2 * P;
  f.speaker_embedding = spk;
  cosy_voice *v = NULL;
  if (cosy_voice_from_features(e, &f, &v)) fail_msg("voice: %s", cosy_last_error());
  return v;
}

static const int VOICE_P[2] = {25, 60};

typedef struct variant {
  const char *text;
  int voice;
  cosy_synth_params p;
  float *ref;
  int64_t n_ref;
} variant;

static const char *TEXTS[] = {
    "Hello there.",
    "The quick brown fox jumps over the lazy dog.",
    "今天天气很好，我们去公园散步吧。",
    "Call me at 10:30 on May 5th, it costs $42.50.",
};

static void make_variants(variant *v, int max_tokens, uint64_t seed) {
  static const int rates[4] = {0, 16000, 0, 22050};
  for (int k = 0; k < NVAR; k++) {
    memset(&v[k], 0, sizeof v[k]);
    v[k].text = TEXTS[k % 4];
    v[k].voice = k % 2;
    cosy_synth_params *p = &v[k].p;
    cosy_synth_params_init(p, sizeof *p);
    p->mode = (k / 2) % 3;
    if (p->mode == COSY_MODE_INSTRUCT) p->instruct_text = "Speak slowly and clearly.";
    p->sample_rate = rates[(k / 3) % 4];
    p->first_chunk_tokens = k % 5 == 4 ? 50 : 25;
    /* three lengths: max, about 2/3 and 1/2 of it */
    p->max_tokens = k % 3 == 0 ? max_tokens : k % 3 == 1 ? (2 * max_tokens) / 3 : max_tokens / 2;
    if (p->max_tokens < 1) p->max_tokens = 1;
    p->min_tokens = k % 4 == 3 ? 0 : p->max_tokens; /* forced length, or the model's own stop */
    p->seed = seed * 1000 + (uint64_t)k + 1;
  }
}

static cosy_engine *engine_new(const scfg *c, int max_active, int max_queued) {
  cosy_engine_config ec;
  cosy_engine_config_init(&ec, sizeof ec);
  ec.model_path = c->model;
  ec.device = c->device;
  ec.max_active = max_active;
  ec.max_queued = max_queued;
  cosy_engine *e = NULL;
  if (cosy_engine_create(&ec, &e)) fail_msg("engine create: %s", cosy_last_error());
  return e;
}

/* the blocking output of every variant, on an engine of its own */
static void make_references(const scfg *c, variant *v) {
  const int nvar = c->nvar;
  cosy_engine *e = engine_new(c, 0, 0);
  cosy_voice *vo[2] = {make_voice(e, VOICE_P[0]), make_voice(e, VOICE_P[1])};
  double t0 = now_s();
  int64_t total = 0;
  for (int k = 0; k < nvar; k++) {
    if (cosy_synthesize(e, vo[v[k].voice], v[k].text, &v[k].p, &v[k].ref, &v[k].n_ref))
      fail_msg("reference %d: %s", k, cosy_last_error());
    total += v[k].n_ref;
  }
  print_message("%d references (blocking synthesis): %lld samples in %.1f s\n", nvar,
                (long long)total, now_s() - t0);
  cosy_voice_release(vo[0]);
  cosy_voice_release(vo[1]);
  cosy_engine_destroy(e);
}

/* ---- memory ---------------------------------------------------------------------------------- */

static double rss_mb(void) {
#ifdef __GLIBC__
  malloc_trim(0); /* give freed heap back first: what stays is what is still allocated */
#endif
  long pages = 0, res = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = -1;
  fclose(f);
  return res < 0 ? -1 : (double)res * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

/* heap bytes in use (every arena and the mmapped blocks), -1 where glibc cannot say */
static double heap_mb(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  struct mallinfo2 mi = mallinfo2();
  return (double)(mi.uordblks + mi.hblkhd) / 1048576.0;
#else
  return -1;
#endif
}

static double dev_used_mb(int device) {
#ifdef COSY_WITH_CUDA
  if (device >= 0) {
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) return (double)(tot - fr) / 1048576.0;
  }
#else
  (void)device;
#endif
  return -1;
}

/* ---- one round ------------------------------------------------------------------------------- */

enum { A_READ, A_CANCEL_AT_ONCE, A_CANCEL_AFTER, A_CALLBACK_STOP, A_RELEASE_AT_ONCE, A_EXTERNAL, A_N };
static const char *ACTION[A_N] = {"read to the end", "cancel at once", "cancel after samples",
                                  "callback stop", "release at once", "external cancel"};

#define PENDING 3 /* push requests a thread has in flight before it waits for the oldest */

typedef struct pushctx {
  float *pcm;
  int64_t n, cap;
  int64_t n_pub;     /* n for the worker's polling (atomic) */
  int chunks, last_seen, after_last, bad_offset, bad_rate;
  int32_t rate;
  int stop_after;    /* the callback returns 1 at this chunk (0: never) */
  int released;      /* set (atomic) when cosy_request_release has returned */
  int *violations;   /* callbacks after release (atomic) */
} pushctx;

typedef struct plan {
  int idx, var, push, action;
  int64_t cancel_at; /* A_CANCEL_AFTER: samples */
  int read_cap, read_timeout;
} plan;

struct round;

typedef struct item { /* a request a worker is responsible for */
  plan pl;
  cosy_request *r;
  pushctx *px;
  int slot;          /* canceller slot (A_EXTERNAL), -1 none */
  int *slot_used;    /* the worker's flag for that slot */
} item;

typedef struct round {
  const scfg *c;
  variant *var;
  cosy_engine *e;
  cosy_voice *voice[2];
  pthread_rwlock_t gate;   /* submits hold it shared, the destroy exclusively */
  int destroying;          /* under gate */
  int destroy_started;     /* atomic: a request may end cancelled by the destroy */
  int next;                /* atomic: next request index */
  int submitted;           /* atomic */
  int stop_canceller;      /* atomic */
  pthread_mutex_t mu;      /* slots, failure message */
  cosy_request **slot;     /* requests the canceller may cancel */
  int n_slots;
  int violations;          /* atomic: callbacks after release */
  /* counters (atomic) */
  int ok, cancelled, queue_full, exact, prefix, rejected, failures, by_action[A_N];
  int64_t samples;
  double worst_rel; /* under mu: the largest rel L2 from the reference of a finished request */
  char first_failure[768];
} round_t;

static void failf(round_t *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void failf(round_t *R, const char *fmt, ...) {
  char buf[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&R->mu);
  if (!R->failures) snprintf(R->first_failure, sizeof R->first_failure, "%s", buf);
  R->failures++;
  pthread_mutex_unlock(&R->mu);
  fprintf(stderr, "test_stress: FAIL: %s\n", buf);
}

static int32_t on_chunk(void *user, const cosy_chunk *ch) {
  pushctx *x = (pushctx *)user;
  if (__atomic_load_n(&x->released, __ATOMIC_SEQ_CST)) {
    __atomic_add_fetch(x->violations, 1, __ATOMIC_SEQ_CST);
    return 1;
  }
  if (x->last_seen) x->after_last = 1;
  if (ch->offset != x->n) x->bad_offset = 1;
  if (ch->sample_rate != x->rate) x->bad_rate = 1;
  if (ch->n_samples > 0) {
    if (x->n + ch->n_samples > x->cap) {
      int64_t nc = 2 * (x->n + ch->n_samples) + 4096;
      float *np = (float *)realloc(x->pcm, (size_t)nc * sizeof *np);
      if (!np) abort();
      x->pcm = np;
      x->cap = nc;
    }
    memcpy(x->pcm + x->n, ch->pcm, (size_t)ch->n_samples * sizeof *ch->pcm);
    x->n += ch->n_samples;
  }
  __atomic_store_n(&x->n_pub, x->n, __ATOMIC_SEQ_CST);
  x->chunks++;
  if (ch->flags & COSY_CHUNK_LAST) x->last_seen++;
  return x->stop_after && x->chunks >= x->stop_after;
}

static plan plan_of(const round_t *R, int idx, int round_no) {
  uint64_t s = R->c->seed * 0x100000001B3ull + (uint64_t)round_no * 1000003u + (uint64_t)idx;
  plan p;
  memset(&p, 0, sizeof p);
  p.idx = idx;
  p.var = rnd(&s, R->c->nvar);
  p.push = rnd(&s, 2);
  const int a = rnd(&s, 20); /* half read to the end */
  p.action = a < 10 ? A_READ : a < 12 ? A_CANCEL_AT_ONCE : a < 15 ? A_CANCEL_AFTER
           : a < 17 ? (p.push ? A_CALLBACK_STOP : A_CANCEL_AFTER) : a < 18 ? A_RELEASE_AT_ONCE
           : A_EXTERNAL;
  const int64_t nref = R->var[p.var].n_ref;
  p.cancel_at = nref > 0 ? (int64_t)(mix(&s) % (uint64_t)nref) : 0;
  static const int caps[4] = {1, 97, 4800, 100000};
  p.read_cap = caps[rnd(&s, 4)];
  static const int timeouts[3] = {-1, 0, 5};
  p.read_timeout = timeouts[rnd(&s, 3)];
  return p;
}

/* The canceller's view of a worker's A_EXTERNAL requests: a slot holds the request until the
 * worker clears it (before the release) or the canceller has cancelled it. Which slots a worker
 * uses is the worker's own business (item.slot_used), so a slot cleared by the canceller is not
 * handed to another request while its owner still points at it. */
static void slot_set(round_t *R, int slot, cosy_request *r) {
  if (slot < 0) return;
  pthread_mutex_lock(&R->mu);
  R->slot[slot] = r;
  pthread_mutex_unlock(&R->mu);
}

static void slot_free(round_t *R, item *it) {
  if (it->slot < 0) return;
  slot_set(R, it->slot, NULL);
  *it->slot_used = 0;
  it->slot = -1;
}

static void *canceller_main(void *arg) {
  round_t *R = (round_t *)arg;
  uint64_t s = R->c->seed ^ 0xC0FFEEu;
  while (!__atomic_load_n(&R->stop_canceller, __ATOMIC_SEQ_CST)) {
    sleep_ms(1 + rnd(&s, 20));
    pthread_mutex_lock(&R->mu);
    int k = rnd(&s, R->n_slots);
    if (R->slot[k]) {
      cosy_request_cancel(R->slot[k]);
      R->slot[k] = NULL;
    }
    pthread_mutex_unlock(&R->mu);
  }
  return NULL;
}

/* Check a finished request's audio and status (see the header comment). */
/* rel L2 of a against the reference r (n samples) */
static double rel_l2f(const float *a, const float *r, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    const double d = (double)a[i] - r[i];
    num += d * d;
    den += (double)r[i] * r[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void verify(round_t *R, const plan *pl, cosy_status st, const float *pcm, int64_t n,
                   const cosy_request *r) {
  const variant *v = &R->var[pl->var];
  const int destroyed = __atomic_load_n(&R->destroy_started, __ATOMIC_SEQ_CST);
  const char *act = ACTION[pl->action];
  if (st != COSY_OK && st != COSY_ERR_CANCELLED) {
    failf(R, "request %d (%s, %s): status %d (%s): %s", pl->idx, pl->push ? "push" : "pull", act, st,
          cosy_status_str(st), cosy_last_error());
    return;
  }
  if (st == COSY_ERR_CANCELLED && pl->action == A_READ && !destroyed) {
    failf(R, "request %d (%s, read to the end): cancelled, but nobody cancelled it", pl->idx,
          pl->push ? "push" : "pull");
    return;
  }
  if (r) {
    cosy_request_stats rs;
    cosy_request_stats_init(&rs, sizeof rs);
    if (cosy_request_get_stats(r, &rs) || !rs.done || rs.n_samples != n) {
      failf(R, "request %d (%s, %s): stats say done %d, %lld samples; the reader got %lld", pl->idx,
            pl->push ? "push" : "pull", act, rs.done, (long long)rs.n_samples, (long long)n);
      return;
    }
  }
  __atomic_add_fetch(&R->samples, n, __ATOMIC_SEQ_CST);
  if (st == COSY_OK) {
    __atomic_add_fetch(&R->ok, 1, __ATOMIC_SEQ_CST);
    const int same = n == v->n_ref && (n == 0 || memcmp(pcm, v->ref, (size_t)n * sizeof *pcm) == 0);
    if (same) __atomic_add_fetch(&R->exact, 1, __ATOMIC_SEQ_CST);
    /* without exact (the GPU, whose flow rounds by batch): the same length (the LLM is
     * batch-invariant: the same tokens) and the audio within rel_l2 of the reference; a lost,
     * duplicated or shifted chunk, or another token, gives ~1 */
    const double rel = n == v->n_ref && n > 0 && !same ? rel_l2f(pcm, v->ref, n) : 0.0;
    if (rel > 0) {
      pthread_mutex_lock(&R->mu);
      if (rel > R->worst_rel) R->worst_rel = rel;
      pthread_mutex_unlock(&R->mu);
    }
    if (!same && (R->c->exact || n != v->n_ref || !(rel <= R->c->rel_l2))) {
      int64_t first = -1;
      for (int64_t i = 0; i < n && i < v->n_ref && first < 0; i++)
        if (pcm[i] != v->ref[i]) first = i;
      failf(R, "request %d (variant %d, %s, %s): %lld samples, blocking gives %lld; first "
            "difference at %lld, rel L2 %.3g", pl->idx, pl->var, pl->push ? "push" : "pull", act,
            (long long)n, (long long)v->n_ref, (long long)first, rel);
    }
  } else {
    __atomic_add_fetch(&R->cancelled, 1, __ATOMIC_SEQ_CST);
    if (n > v->n_ref) {
      failf(R, "request %d (variant %d, %s, %s): cancelled after %lld samples, more than the "
            "whole utterance (%lld)", pl->idx, pl->var, pl->push ? "push" : "pull", act,
            (long long)n, (long long)v->n_ref);
    } else if (n > 0 && memcmp(pcm, v->ref, (size_t)n * sizeof *pcm) != 0 &&
               (R->c->exact || !(rel_l2f(pcm, v->ref, n) <= R->c->rel_l2))) {
      failf(R, "request %d (variant %d, %s, %s): cancelled after %lld samples that are not a "
            "prefix of the blocking output", pl->idx, pl->var, pl->push ? "push" : "pull", act,
            (long long)n);
    } else {
      __atomic_add_fetch(&R->prefix, 1, __ATOMIC_SEQ_CST);
    }
  }
}

/* wait for a push request, check it, release it */
static void finish_push(round_t *R, item *it) {
  cosy_status st = cosy_request_wait(it->r, -1);
  pushctx *x = it->px;
  if (x->bad_offset || x->bad_rate || x->after_last || x->last_seen > 1 ||
      (st == COSY_OK && x->last_seen != 1))
    failf(R, "request %d (push, %s): chunks: offset gap %d, wrong rate %d, chunk after the last %d, "
          "%d last flags (status %d)", it->pl.idx, ACTION[it->pl.action], x->bad_offset,
          x->bad_rate, x->after_last, x->last_seen, st);
  else
    verify(R, &it->pl, st, x->pcm, x->n, it->r);
  slot_free(R, it);
  cosy_request_release(it->r);
  __atomic_store_n(&x->released, 1, __ATOMIC_SEQ_CST);
  free(x->pcm);
  free(x);
  it->r = NULL;
}

/* read a pull request to its end (cancelling it on the way when the plan says so) */
static void run_pull(round_t *R, item *it) {
  const plan *pl = &it->pl;
  int64_t cap = 0, n = 0;
  float *pcm = NULL;
  cosy_status st;
  int cancelled = 0;
  for (;;) {
    if (pl->action == A_CANCEL_AFTER && !cancelled && n >= pl->cancel_at) {
      cosy_request_cancel(it->r);
      cancelled = 1;
    }
    if (n + pl->read_cap > cap) {
      cap = 2 * (n + pl->read_cap);
      float *np = (float *)realloc(pcm, (size_t)cap * sizeof *np);
      if (!np) abort();
      pcm = np;
    }
    int64_t got = 0;
    st = cosy_request_read(it->r, pcm + n, pl->read_cap, &got, pl->read_timeout);
    if (st == COSY_ERR_TIMEOUT) {
      if (got != 0) {
        failf(R, "request %d: read timed out with %lld samples", pl->idx, (long long)got);
        break;
      }
      if (pl->read_timeout == 0) sleep_ms(1);
      continue;
    }
    if (st != COSY_OK || got == 0) break;
    n += got;
  }
  /* the read's end status is the request's: wait agrees, and at once */
  cosy_status ws = cosy_request_wait(it->r, 0);
  if (ws != st)
    failf(R, "request %d (pull, %s): read ended with %d, wait says %d", pl->idx, ACTION[pl->action], st,
          ws);
  else
    verify(R, pl, st, pcm, n, it->r);
  slot_free(R, it);
  cosy_request_release(it->r);
  free(pcm);
  it->r = NULL;
}

typedef struct worker {
  round_t *R;
  int id, round_no;
} worker;

static void *worker_main(void *arg) {
  worker *w = (worker *)arg;
  round_t *R = w->R;
  const scfg *c = R->c;
  item pend[PENDING];
  int np = 0;
  int slot_used[PENDING + 1] = {0};
  for (;;) {
    const int idx = __atomic_fetch_add(&R->next, 1, __ATOMIC_SEQ_CST);
    if (idx >= c->requests) break;
    item it;
    memset(&it, 0, sizeof it);
    it.pl = plan_of(R, idx, w->round_no);
    it.slot = -1;
    const variant *v = &R->var[it.pl.var];
    if (it.pl.push) {
      it.px = (pushctx *)calloc(1, sizeof *it.px);
      it.px->rate = v->p.sample_rate ? v->p.sample_rate : 24000;
      it.px->violations = &R->violations;
      if (it.pl.action == A_CALLBACK_STOP) it.px->stop_after = 1 + (int)(it.pl.cancel_at % 2);
    }
    /* submit (retried while the queue is full) */
    cosy_status st = COSY_ERR_QUEUE_FULL;
    int stopped = 0;
    const double give_up = now_s() + 30; /* a full queue is retried for up to 30 s */
    for (int tries = 0; st == COSY_ERR_QUEUE_FULL && (tries == 0 || now_s() < give_up); tries++) {
      if (tries) {
        __atomic_add_fetch(&R->queue_full, 1, __ATOMIC_SEQ_CST);
        sleep_ms(2);
      }
      pthread_rwlock_rdlock(&R->gate);
      if (R->destroying) {
        stopped = 1;
        pthread_rwlock_unlock(&R->gate);
        break;
      }
      st = cosy_request_submit(R->e, R->voice[v->voice], v->text, &v->p, it.pl.push ? on_chunk : NULL,
                               it.px, &it.r);
      pthread_rwlock_unlock(&R->gate);
    }
    if (stopped || st == COSY_ERR_QUEUE_FULL) {
      if (!stopped) __atomic_add_fetch(&R->rejected, 1, __ATOMIC_SEQ_CST);
      free(it.px);
      if (stopped) break;
      continue;
    }
    if (st) {
      failf(R, "request %d: submit: %d (%s): %s", idx, st, cosy_status_str(st), cosy_last_error());
      free(it.px);
      continue;
    }
    __atomic_add_fetch(&R->submitted, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&R->by_action[it.pl.action], 1, __ATOMIC_SEQ_CST);
    if (it.pl.action == A_EXTERNAL) {
      int k = 0;
      while (slot_used[k]) k++; /* at most PENDING others are live: one is free */
      slot_used[k] = 1;
      it.slot = w->id * (PENDING + 1) + k;
      it.slot_used = &slot_used[k];
      slot_set(R, it.slot, it.r);
    }
    switch (it.pl.action) {
      case A_CANCEL_AT_ONCE:
        cosy_request_cancel(it.r);
        break;
      case A_RELEASE_AT_ONCE:
        /* nothing is checked; a push callback's memory goes at once (no callback after release) */
        slot_free(R, &it);
        cosy_request_release(it.r);
        if (it.px) {
          __atomic_store_n(&it.px->released, 1, __ATOMIC_SEQ_CST);
          free(it.px->pcm);
          free(it.px);
        }
        continue;
      case A_CANCEL_AFTER:
        if (it.pl.push) { /* poll what arrived, then cancel */
          while (__atomic_load_n(&it.px->n_pub, __ATOMIC_SEQ_CST) < it.pl.cancel_at &&
                 cosy_request_wait(it.r, 0) == COSY_ERR_TIMEOUT)
            sleep_ms(1);
          cosy_request_cancel(it.r);
        }
        break;
      default:
        break;
    }
    if (!it.pl.push) {
      run_pull(R, &it);
      continue;
    }
    if (np == PENDING) {
      finish_push(R, &pend[0]);
      memmove(pend, pend + 1, sizeof pend[0] * (PENDING - 1));
      np--;
    }
    pend[np++] = it;
  }
  for (int k = 0; k < np; k++) finish_push(R, &pend[k]);
  return NULL;
}

static volatile sig_atomic_t g_round_no;

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_stress: HANG: a round ran past COSY_STRESS_TIMEOUT\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(3);
}

typedef struct round_result {
  int failures;
  double seconds;
} round_result;

static round_result run_round(const scfg *c, variant *var, int round_no) {
  static const int actives[3] = {4, 8, 2};
  const int max_active = c->device >= 0 ? 0 : actives[round_no % 3];
  const int max_queued = round_no % 3 == 1 ? 4 : 0;
  const int abort_round = round_no % 2 == 1;
  round_t R;
  memset(&R, 0, sizeof R);
  R.c = c;
  R.var = var;
  pthread_rwlock_init(&R.gate, NULL);
  pthread_mutex_init(&R.mu, NULL);
  R.n_slots = c->threads * (PENDING + 1);
  R.slot = (cosy_request **)calloc((size_t)R.n_slots, sizeof *R.slot);
  R.e = engine_new(c, max_active, max_queued);
  R.voice[0] = make_voice(R.e, VOICE_P[0]);
  R.voice[1] = make_voice(R.e, VOICE_P[1]);
  uint64_t s = c->seed * 7919u + (uint64_t)round_no;
  /* destroy once 30..80% of the requests have been submitted */
  const int abort_at = abort_round ? c->requests * (30 + rnd(&s, 51)) / 100 : 0;
  const double t0 = now_s();
  alarm((unsigned)c->timeout_s);
  pthread_t canceller;
  pthread_create(&canceller, NULL, canceller_main, &R);
  pthread_t *th = (pthread_t *)calloc((size_t)c->threads, sizeof *th);
  worker *ws = (worker *)calloc((size_t)c->threads, sizeof *ws);
  for (int i = 0; i < c->threads; i++) {
    ws[i] = (worker){&R, i, round_no};
    pthread_create(&th[i], NULL, worker_main, &ws[i]);
  }
  double t_destroy = 0;
  cosy_engine_stats es;
  cosy_engine_stats_init(&es, sizeof es);
  if (abort_round) {
    while (__atomic_load_n(&R.submitted, __ATOMIC_SEQ_CST) < abort_at &&
           __atomic_load_n(&R.next, __ATOMIC_SEQ_CST) < c->requests)
      sleep_ms(1);
    cosy_engine_get_stats(R.e, &es);
    pthread_rwlock_wrlock(&R.gate);
    R.destroying = 1;
    __atomic_store_n(&R.destroy_started, 1, __ATOMIC_SEQ_CST);
    cosy_voice_release(R.voice[0]); /* the requests keep them alive */
    cosy_voice_release(R.voice[1]);
    const double td = now_s();
    cosy_engine_destroy(R.e);
    t_destroy = now_s() - td;
    R.e = NULL;
    pthread_rwlock_unlock(&R.gate);
  }
  for (int i = 0; i < c->threads; i++) pthread_join(th[i], NULL);
  __atomic_store_n(&R.stop_canceller, 1, __ATOMIC_SEQ_CST);
  pthread_join(canceller, NULL);
  if (!abort_round) {
    cosy_engine_get_stats(R.e, &es);
    if (es.active || es.queued)
      failf(&R, "after every request ended the engine counts %d active, %d queued", es.active,
            es.queued);
    cosy_voice_release(R.voice[0]);
    cosy_voice_release(R.voice[1]);
    cosy_engine_destroy(R.e);
  }
  alarm(0);
  const double dt = now_s() - t0;
  if (R.violations) failf(&R, "%d push callbacks ran after cosy_request_release returned", R.violations);
  print_message("%s round %d (max_active %d, max_queued %d, %s): %d submitted (%d read to the end, "
                "%d cancelled at once, %d after samples, %d by callback, %d released at once, %d by "
                "another thread), %d queue-full retries, %d rejected; ended: %d ok (%d equal to "
                "blocking), %d cancelled (%d prefixes of blocking); %.1f s of audio; %.1f s%s\n",
                c->name, round_no, max_active, max_queued ? max_queued : 1024,
                abort_round ? "engine destroyed in flight" : "drained", R.submitted,
                R.by_action[A_READ], R.by_action[A_CANCEL_AT_ONCE], R.by_action[A_CANCEL_AFTER],
                R.by_action[A_CALLBACK_STOP], R.by_action[A_RELEASE_AT_ONCE],
                R.by_action[A_EXTERNAL], R.queue_full, R.rejected, R.ok, R.exact, R.cancelled,
                R.prefix, (double)R.samples / 24000.0, dt, "");
  if (!c->exact)
    print_message("  largest rel L2 from the reference among the finished requests: %.3g (limit "
                  "%.3g)\n", R.worst_rel, c->rel_l2);
  if (abort_round)
    print_message("  destroyed with %d active and %d queued requests, %.3f s\n", es.active, es.queued,
                  t_destroy);
  if (R.failures) print_message("  %d failures; first: %s\n", R.failures, R.first_failure);
  round_result res = {R.failures, dt};
  free(th);
  free(ws);
  free(R.slot);
  pthread_rwlock_destroy(&R.gate);
  pthread_mutex_destroy(&R.mu);
  return res;
}

static void run_stress(scfg *c) {
  cfg_env(c);
  assert_true(c->requests > 0 && c->threads > 0 && c->rounds > 0 && c->max_tokens > 0);
  signal(SIGALRM, on_alarm);
  print_message("%s: model %s, device %d, %d requests x %d rounds from %d threads, max_tokens %d, "
                "seed %llu, audio %s\n",
                c->name, c->model, c->device, c->requests, c->rounds, c->threads, c->max_tokens,
                (unsigned long long)c->seed, c->exact ? "compared exactly" : "same length, within the rel L2 limit");
  variant var[NVAR];
  make_variants(var, c->max_tokens, c->seed);
  make_references(c, var);
#if defined(UNDER_ASAN) || defined(UNDER_TSAN)
  const int check_rss = 0;
  print_message("RSS check skipped under the sanitizers (LeakSanitizer checks leaks at exit)\n");
#else
  const int check_rss = 1;
#endif
  double rss0 = rss_mb(), heap0 = heap_mb(), dev0 = dev_used_mb(c->device);
  int failures = 0;
  /* the steady-state check: heap after the middle measured round and after the last, and in how
   * many rounds after the middle one it grew */
  const int k_mid = c->warmup + (c->rounds - c->warmup - 1) / 2;
  double heap_mid = -1, heap_last = -1, heap_prev = -1;
  int grew = 0;
  char grew_at[128] = "";
  for (int k = 0; k < c->rounds; k++) {
    round_result rr = run_round(c, var, k);
    failures += rr.failures;
    const double rss = rss_mb(), heap = heap_mb(), dev = dev_used_mb(c->device);
    if (k < c->warmup) {
      /* the first engine of the process that runs every path loads, once for the process, the
       * kernels CUDA loads lazily and cuBLASLt's kernel images: the baseline is taken after it */
      print_message("  after warm-up round %d: RSS %.1f MiB (%+.1f), heap in use %.2f MiB (%+.2f)"
                    ", device memory in use %.1f MiB (%+.1f): the baseline from here\n",
                    k, rss, rss - rss0, heap, heap - heap0, dev, dev - dev0);
      rss0 = rss, heap0 = heap, dev0 = dev;
      continue;
    }
    if (k == k_mid) heap_mid = heap;
    if (k > k_mid && heap_prev >= 0 && heap > heap_prev + 0.02) {
      grew++;
      const size_t n = strlen(grew_at);
      snprintf(grew_at + n, sizeof grew_at - n, " %d (%+.2f)", k, heap - heap_prev);
    }
    heap_prev = heap;
    heap_last = heap;
    print_message("  after round %d: RSS %.1f MiB, heap in use %.2f MiB (before the rounds: %.1f, "
                  "%.2f)%s", k, rss, heap, rss0, heap0, dev >= 0 ? "" : "\n");
    if (dev >= 0) print_message(", device memory in use %.1f MiB (before %.1f)\n", dev, dev0);
    if (check_rss && heap >= 0 && heap > heap0 + c->heap_slack_mb) {
      print_message("FAIL: %.2f MiB of heap in use after round %d, %.2f before the rounds (limit "
                    "+%.2f): a leak\n", heap, k, heap0, c->heap_slack_mb);
      failures++;
    }
    if (check_rss && rss > rss0 + c->rss_slack_mb) {
      print_message("FAIL: RSS %.1f MiB after round %d, %.1f before the rounds (limit +%.1f): a "
                    "leak\n", rss, k, rss0, c->rss_slack_mb);
      failures++;
    }
    if (dev >= 0 && dev > dev0 + c->dev_slack_mb) {
      print_message("FAIL: device memory in use %.1f MiB after round %d, %.1f before (limit +%.1f)\n",
                    dev, k, dev0, c->dev_slack_mb);
      failures++;
    }
  }
  if (check_rss && heap_mid >= 0 && c->rounds - 1 > k_mid) {
    print_message("  heap from round %d to round %d: %+.2f MiB, grown in %d round(s)%s%s (limit "
                  "+%.2f%s)\n",
                  k_mid, c->rounds - 1, heap_last - heap_mid, grew, grew ? ":" : "", grew_at,
                  c->steady_slack_mb,
                  c->one_step ? " when grown in more than one: a leak grows round after round, "
                                "a process-wide cache in a step"
                              : ": a leak grows every round");
    if (heap_last > heap_mid + c->steady_slack_mb && (!c->one_step || grew > 1)) {
      print_message("FAIL: the heap still grows after round %d: a leak\n", k_mid);
      failures++;
    }
  }
  for (int k = 0; k < NVAR; k++) cosy_free(var[k].ref);
  assert_int_equal(failures, 0);
}

static int only(const char *which) {
  const char *o = getenv("COSY_STRESS_ONLY");
  return !o || !*o || !strcmp(o, which);
}

static void test_stress_cpu(void **state) {
  (void)state;
  TU_REQUIRE(only("cpu"), "COSY_STRESS_ONLY=%s", getenv("COSY_STRESS_ONLY"));
  const char *m = tu_small_model();
  TU_REQUIRE(m, "no small model (make build/test/small-f32.gguf)");
  scfg c;
  memset(&c, 0, sizeof c);
  c.name = "cpu";
  c.model = m;
  c.device = COSY_DEVICE_CPU;
  /* the longer variants stream two chunks (a first chunk of 25 tokens + 3 look-ahead) */
#if defined(UNDER_TSAN)
  c.requests = 24, c.rounds = 2, c.nvar = 6, c.max_tokens = 30;
#elif defined(UNDER_ASAN)
  c.requests = 32, c.rounds = 2, c.nvar = 6, c.max_tokens = 30;
#else
  c.requests = 160, c.rounds = 3, c.nvar = NVAR, c.max_tokens = 45;
#endif
  c.threads = 8;
  c.exact = 1;
  run_stress(&c);
}

static void test_stress_gpu(void **state) {
  (void)state;
  TU_REQUIRE(only("gpu"), "COSY_STRESS_ONLY=%s", getenv("COSY_STRESS_ONLY"));
#ifndef COSY_WITH_CUDA
  TU_REQUIRE(0, "built without CUDA (make CUDA=1): the device mode of the stress test not run");
#else
  int ndev = 0;
  TU_REQUIRE(cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0,
             "no CUDA device: the device mode of the stress test not run");
  const char *m = getenv("COSY_STRESS_MODEL");
  if (!m || !*m) m = getenv("COSY_FULL_MODEL");
  if (!m || !*m) m = tu_small_model();
  TU_REQUIRE(m, "no model (set COSY_STRESS_MODEL or COSY_FULL_MODEL, or make the small model)");
  /* cuBLASLt keeps a process-wide cache of heuristic answers that grows with every new problem
   * size (up to 8192 entries) and outlives every handle: without it (unless set otherwise) the
   * memory checks see the library's code, not a cache of the process */
  setenv("CUBLASLT_HEURISTICS_CACHE_CAPACITY", "0", 0);
  cudaFree(0); /* the context exists before device memory is measured */
  /* the batch-invariant LLM (the default; set here so that a caller's COSY_LLM_DECODE=mixed is
   * the only way out): with the mixed arithmetic a request's tokens may change with its batch,
   * and the comparison with the reference would say nothing about lost or duplicated samples */
  setenv("COSY_LLM_DECODE", "tc", 0);
  print_message("COSY_LLM_DECODE=%s, CUBLASLT_HEURISTICS_CACHE_CAPACITY=%s, CUDA_MODULE_LOADING=%s\n",
                getenv("COSY_LLM_DECODE"), getenv("CUBLASLT_HEURISTICS_CACHE_CAPACITY"),
                getenv("CUDA_MODULE_LOADING"));
  scfg c;
  memset(&c, 0, sizeof c);
  c.name = "gpu";
  c.model = m;
  c.device = 0;
  c.requests = 256;
  c.rounds = 11;
  c.one_step = 1;
  c.threads = 32;
  c.max_tokens = 300;
  c.nvar = NVAR;
  c.exact = 0;
  /* Three warm-up rounds (drained with a long queue, destroyed in flight with a short one,
   * drained again): besides the kernels CUDA loads lazily, two kinds of process-wide state
   * outlive every engine and grow until the process has seen every shape, both measured with
   * standalone programs on an H100 (bench/RESULTS.md, session of 2026-11-27, third): cuBLASLt
   * keeps ~2-5 KB of host memory for each GEMM algorithm configuration it has launched once (the
   * heuristic's answer differs by row count), even past cudaDeviceReset; and the driver keeps
   * the memory of destroyed graph executables at the high-water mark of graph nodes instantiated
   * at once (~4.3 KB host, ~2.6 KB device a node). A drained round reaches new row counts and
   * new decode graphs (longer contexts) that the first round may not have; a leak of the
   * library's own grows every round, in rounds that are destroyed in flight too. */
  c.warmup = 3;
  /* what those caches add past the warm-up (0.7 MiB of heap seen on an H100) is within 4 MiB;
   * that the heap stops growing is checked from the middle round on (steady_slack_mb, 0.25,
   * when it grew in more than one round). The flow's graph cache (up to 128 step graphs of
   * ~230 nodes an engine) reaches a new high-water mark whenever a round first holds more
   * distinct batch shapes at once: on an H200 with the vocoder thread taking capped batches,
   * one step of +0.70 MiB at the last of 7 rounds, flat before (2026-11-30, bench/RESULTS.md,
   * the stress test). Eleven rounds: after the middle one (6) come two destroyed in flight (7, 9)
   * and two drained (8, 10), so a leak of either kind grows in two rounds or more. */
  c.heap_slack_mb = 4;
  /* RSS moved by -1.8..+4.1 MiB from round to round with the heap flat to 0.01 MiB and device
   * memory flat (H100, 256 requests a round: the driver's own mappings and the threads' stacks,
   * not the heap): a limit of 8 MiB */
  c.rss_slack_mb = 8;
  run_stress(&c);
#endif
}

/* ---- regressions of what the stress test found ------------------------------------------------ */

static cosy_engine *small_engine(void) {
  const char *m = tu_small_model();
  if (!m) return NULL;
  scfg c;
  memset(&c, 0, sizeof c);
  c.model = m;
  c.device = COSY_DEVICE_CPU;
  return engine_new(&c, 0, 0);
}

typedef struct slowcb {
  int in_cb, calls, after_release, released;
} slowcb;

static int32_t slow_chunk(void *user, const cosy_chunk *ch) {
  (void)ch;
  slowcb *b = (slowcb *)user;
  if (__atomic_load_n(&b->released, __ATOMIC_SEQ_CST)) __atomic_add_fetch(&b->after_release, 1, __ATOMIC_SEQ_CST);
  __atomic_store_n(&b->in_cb, 1, __ATOMIC_SEQ_CST);
  sleep_ms(300);
  __atomic_add_fetch(&b->calls, 1, __ATOMIC_SEQ_CST);
  __atomic_store_n(&b->in_cb, 0, __ATOMIC_SEQ_CST);
  return 0;
}

/* cosy_request_release returned while the push callback was still running on the engine's
 * thread (and further callbacks could follow), so a caller that freed the callback's data after
 * release had a use-after-free. Now release waits for a running callback and none starts after. */
static void test_no_callback_after_release(void **state) {
  (void)state;
  cosy_engine *e = small_engine();
  TU_REQUIRE(e, "no small model (make build/test/small-f32.gguf)");
  cosy_voice *v = make_voice(e, VOICE_P[0]);
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.seed = 5;
  p.max_tokens = p.min_tokens = 80; /* several chunks */
  slowcb b;
  memset(&b, 0, sizeof b);
  cosy_request *r = NULL;
  assert_int_equal(cosy_request_submit(e, v, TEXTS[1], &p, slow_chunk, &b, &r), COSY_OK);
  while (!__atomic_load_n(&b.in_cb, __ATOMIC_SEQ_CST) && cosy_request_wait(r, 0) == COSY_ERR_TIMEOUT)
    sleep_ms(1);
  assert_true(__atomic_load_n(&b.in_cb, __ATOMIC_SEQ_CST)); /* released during the first callback */
  cosy_request_release(r);
  const int running = __atomic_load_n(&b.in_cb, __ATOMIC_SEQ_CST);
  __atomic_store_n(&b.released, 1, __ATOMIC_SEQ_CST);
  cosy_voice_release(v);
  cosy_engine_destroy(e); /* joins the engine's threads: every callback has happened */
  print_message("callback running when release returned: %d; calls %d, calls after release %d\n",
                running, b.calls, b.after_release);
  assert_int_equal(running, 0);
  assert_int_equal(b.after_release, 0);
}

/* A request cancelled while its last chunk was in the flow or the vocoder ended with COSY_OK
 * without that chunk (final_done was set although nothing was delivered): a reader saw a
 * "finished" utterance with samples missing and no COSY_CHUNK_LAST. The cancel here lands right
 * after the LLM's last token, while the only (last) chunk is being made. */
static void test_cancel_during_last_chunk(void **state) {
  (void)state;
  cosy_engine *e = small_engine();
  TU_REQUIRE(e, "no small model (make build/test/small-f32.gguf)");
  cosy_voice *v = make_voice(e, VOICE_P[0]);
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.seed = 11;
  p.max_tokens = p.min_tokens = 20; /* fewer than a first chunk: the last chunk is the only one */
  float *ref = NULL;
  int64_t n_ref = 0;
  assert_int_equal(cosy_synthesize(e, v, TEXTS[1], &p, &ref, &n_ref), COSY_OK);
  int n_cancelled = 0, n_ok = 0;
  for (int it = 0; it < 8; it++) {
    pushctx x;
    memset(&x, 0, sizeof x);
    x.rate = 24000;
    int viol = 0;
    x.violations = &viol;
    cosy_request *r = NULL;
    assert_int_equal(cosy_request_submit(e, v, TEXTS[1], &p, on_chunk, &x, &r), COSY_OK);
    cosy_request_stats rs;
    for (;;) { /* until the LLM has made every token */
      cosy_request_stats_init(&rs, sizeof rs);
      assert_int_equal(cosy_request_get_stats(r, &rs), COSY_OK);
      if (rs.n_speech_tokens >= p.max_tokens || rs.done) break;
      sleep_ms(1);
    }
    cosy_request_cancel(r);
    const cosy_status st = cosy_request_wait(r, -1);
    cosy_request_release(r);
    if (st == COSY_OK) {
      n_ok++;
      assert_int_equal(x.last_seen, 1);
      assert_int_equal(x.n, n_ref);
      assert_memory_equal(x.pcm, ref, (size_t)n_ref * sizeof *ref);
    } else {
      assert_int_equal(st, COSY_ERR_CANCELLED);
      n_cancelled++;
      assert_int_equal(x.last_seen, 0);
      assert_true(x.n <= n_ref);
    }
    free(x.pcm);
  }
  print_message("cancelled during the last chunk: %d ended cancelled, %d ok (the cancel came too "
                "late)\n", n_cancelled, n_ok);
  cosy_free(ref);
  cosy_voice_release(v);
  cosy_engine_destroy(e);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines reach a log as they happen */
#ifdef __GLIBC__
  /* Fixed thresholds: glibc otherwise raises them after large frees, and then keeps freed memory
   * in its arenas (their top chunks, which malloc_trim does not give back), so that RSS would
   * grow over rounds with nothing allocated (the heap in use stays flat). */
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  mallopt(M_TRIM_THRESHOLD, 128 * 1024);
#endif
  /* Every kernel module loaded at CUDA's start (unless set otherwise), before any test touches the
   * device: with lazy loading, CUDA's default, a module is loaded at its first launch and stays
   * for the process, so kernels first met in a later round (cuBLASLt's algorithms for row counts
   * not seen before, the library's kernel variants) grew the heap in use by 0.75-1 MiB from the
   * middle round to the last and device memory by 2 MiB on an H200: the library's memory did not
   * change, the process's code did. Eager: +0.00 MiB (bench/RESULTS.md, the stress test). */
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_callback_after_release),
      cmocka_unit_test(test_cancel_during_last_chunk),
      cmocka_unit_test(test_stress_cpu),
      cmocka_unit_test(test_stress_gpu),
  };
  return cmocka_run_group_tests_name("stress", tests, NULL, NULL);
}
