/* test_gpu_fault.c - injected CUDA failures on the GPU engine (needs a CUDA device and
 * the small test model, SKIP without). lib/gpu/gpu.h: every checked CUDA operation of the engine
 * (allocation, copy, kernel or graph launch, synchronization) goes through cosy_gpu_check, which
 * can make the n-th one report a failure (cosy_gpu_fault_arm; the environment variable
 * COSY_CUDA_FAULT=<n>[:launch|oom|lost] does the same from engine creation on).
 *
 * The documented behaviour (docs/testing.md, include/cosyvoice.h ERRORS):
 *   - launch (COSY_ERR_CUDA) and oom (COSY_ERR_GPU_NO_MEMORY) are not sticky: the requests of the
 *     batched call that failed end with that status and a message naming the operation; the
 *     others go on; the engine keeps serving, and a later request gives exactly the audio of a
 *     fault-free engine in the same state;
 *   - lost (COSY_ERR_DEVICE_LOST, sticky: every later checked operation fails too, as after an
 *     illegal address) makes the engine lost: every request not finished ends with
 *     COSY_ERR_DEVICE_LOST, every later call on the engine (submit, synthesize, voices, stats)
 *     returns it, cosy_engine_destroy is clean;
 *   - at creation any failure is a clean create error (the status of its kind).
 * No request may hang: every wait has a timeout, and a watchdog (SIGALRM) ends the process after
 * COSY_GPU_FAULT_TIMEOUT seconds (default 60) of one run, naming the phase and n.
 *
 * The synthesis is "the pair": two push requests submitted together (30 and 12 speech tokens,
 * min = max so their lengths are fixed; the first streams two chunks), then, with nothing armed,
 * "the check": one request of another voice, compared sample for sample with the same request on
 * a fault-free engine in the same state (cold: the voice's first use in a fresh engine; warm:
 * its second).
 * Phases:
 *   warm   one engine for the whole sweep (warmed up: graphs captured, the voice blocks cached):
 *          a counting run of the pair gives T checked operations and the call sites; then the
 *          pair with the n-th failing, for every COSY_GPU_FAULT_STRIDE-th n (default: about
 *          COSY_GPU_FAULT_POINTS = 120 of them) and the first operation of each site, launch and
 *          oom alternating; after each: statuses, the survivor's length, the check (warm)
 *   cold   a fresh engine per n (the first use of everything: graph capture, the voice's
 *          blocks): about POINTS/3 n over the cold count and each site the warm run lacked;
 *          after each: the check (cold)
 *   lost   a fresh engine per n, about POINTS/6 n: the lost behaviour above
 *   create COSY_CUDA_FAULT=<n>[:kind] at engine creation, about POINTS/4 n over its count plus
 *          each site: create fails with the kind's status, or succeeds and then speaks exactly;
 *          a malformed value is COSY_ERR_INVALID_ARG
 * COSY_GPU_FAULT_STRIDE=1 tries every n of every phase (the full sweep: long). Afterwards the
 * device memory in use must be back within 64 MiB of where it started (failure paths free what
 * they allocated). COSY_GPU_FAULT_PHASES (default "warm cold lost create"),
 * COSY_GPU_FAULT_VERBOSE=1 (a line per n), COSY_GPU_FAULT_EXACT=0 (the check within rel L2 1e-3
 * instead of exactly; for a device where the engine is not bitwise repeatable). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cosyvoice.h"
#include "testutil.h"

#ifdef COSY_WITH_CUDA
#include <cuda_runtime_api.h>

#include "gpu/gpu.h"

static int have_gpu(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static const char *model_path(void) {
  const char *e = getenv("COSY_GPU_TEST_MODEL");
  return (e && *e) ? e : tu_small_model();
}

static long envl(const char *name, long def) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 10) : def;
}

static int phase_on(const char *name) {
  const char *v = getenv("COSY_GPU_FAULT_PHASES");
  return !v || !*v || strstr(v, name) != NULL;
}

/* ---- watchdog ---------------------------------------------------------------------------------- */

static char g_where[160];
static void on_alarm(int sig) {
  (void)sig;
  char m[256];
  int k = snprintf(m, sizeof m, "\nFAIL: no progress for COSY_GPU_FAULT_TIMEOUT s: HANG at %s\n",
                   g_where);
  if (k > 0) (void)!write(2, m, (size_t)k);
  _exit(3);
}
static void watch(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_where, sizeof g_where, fmt, ap);
  va_end(ap);
  alarm((unsigned)envl("COSY_GPU_FAULT_TIMEOUT", 60));
}
static void unwatch(void) { alarm(0); }

/* ---- requests ---------------------------------------------------------------------------------- */

static const char *TEXT_A = "Hello there, how are you today?";
static const char *TEXT_B = "Fine, thanks.";
static const char *TEXT_C = "The morning train was late again.";

typedef struct pushbuf {
  float *pcm;
  int64_t n, cap;
  int chunks, last;
} pushbuf;

static int32_t on_chunk(void *user, const cosy_chunk *c) {
  pushbuf *b = (pushbuf *)user;
  if (b->n + c->n_samples > b->cap) {
    b->cap = (b->n + c->n_samples) * 2 + 1;
    b->pcm = (float *)realloc(b->pcm, (size_t)b->cap * sizeof *b->pcm);
  }
  if (c->n_samples) memcpy(b->pcm + b->n, c->pcm, (size_t)c->n_samples * sizeof *c->pcm);
  b->n += c->n_samples;
  b->chunks++;
  b->last |= (c->flags & COSY_CHUNK_LAST) != 0;
  return 0;
}

static void params(cosy_synth_params *p, int tokens, uint64_t seed) {
  cosy_synth_params_init(p, sizeof *p);
  p->seed = seed;
  p->min_tokens = p->max_tokens = tokens;
}

static cosy_voice *make_voice(cosy_engine *e, int variant) {
  int32_t tok[60];
  float mel[120 * 80], spk[192];
  for (int i = 0; i < 60; i++) tok[i] = (i * 997 + 13 + 101 * variant) % 6561;
  for (int i = 0; i < 120 * 80; i++) mel[i] = -6.0f + 4.0f * sinf(0.01f * (float)i + (float)variant);
  for (int i = 0; i < 192; i++) spk[i] = cosf(0.3f * (float)i + 0.5f * (float)variant);
  cosy_voice_features f;
  cosy_voice_features_init(&f, sizeof f);
  f.prompt_text = variant ? "You are a helpful assistant.<|endofprompt|>Good morning."
                          : "You are a helpful assistant.<|endofprompt|>Hello there.";
  f.speech_tokens = tok;
  f.n_speech_tokens = variant ? 47 : 60; /* another length: another flow block layout */
  f.mel = mel;
  f.n_mel_frames = 120;
  f.speaker_embedding = spk;
  cosy_voice *v = NULL;
  if (cosy_voice_from_features(e, &f, &v)) fail_msg("voice: %s", cosy_last_error());
  return v;
}

typedef struct engine_set {
  cosy_engine *e;
  cosy_voice *v1, *v2; /* v1: the pair's, v2: the check's */
} engine_set;

static cosy_status open_engine(engine_set *s) {
  memset(s, 0, sizeof *s);
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  c.model_path = model_path();
  c.device = 0;
  c.max_active = 8;
  cosy_status st = cosy_engine_create(&c, &s->e);
  if (st) return st;
  s->v1 = make_voice(s->e, 0);
  s->v2 = make_voice(s->e, 1);
  return COSY_OK;
}

static void close_engine(engine_set *s) {
  cosy_voice_release(s->v1);
  cosy_voice_release(s->v2);
  cosy_engine_destroy(s->e);
  memset(s, 0, sizeof *s);
}

typedef struct pair_result {
  cosy_status st[2];
  char msg[2][512];
  pushbuf b[2];
  int submitted[2];
} pair_result;

static void pair_free(pair_result *r) {
  free(r->b[0].pcm);
  free(r->b[1].pcm);
  memset(r, 0, sizeof *r);
}

/* the pair: two push requests submitted together; every wait bounded */
static void run_pair(engine_set *s, pair_result *r) {
  memset(r, 0, sizeof *r);
  cosy_synth_params p[2];
  params(&p[0], 30, 4242);
  params(&p[1], 12, 777);
  const char *text[2] = {TEXT_A, TEXT_B};
  cosy_request *q[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    r->st[i] = cosy_request_submit(s->e, s->v1, text[i], &p[i], on_chunk, &r->b[i], &q[i]);
    r->submitted[i] = r->st[i] == COSY_OK;
    if (r->st[i]) snprintf(r->msg[i], sizeof r->msg[i], "submit: %s", cosy_last_error());
  }
  for (int i = 0; i < 2; i++) {
    if (!q[i]) continue;
    r->st[i] = cosy_request_wait(q[i], 1000 * (int32_t)envl("COSY_GPU_FAULT_TIMEOUT", 60));
    if (r->st[i] == COSY_ERR_TIMEOUT) fail_msg("HANG: request %d did not end (%s)", i, g_where);
    snprintf(r->msg[i], sizeof r->msg[i], "%s", r->st[i] ? cosy_last_error() : "");
    cosy_request_release(q[i]);
  }
}

/* the check: one request of voice v2 (blocking) */
static cosy_status run_check(engine_set *s, float **pcm, int64_t *n) {
  cosy_synth_params p;
  params(&p, 30, 99);
  return cosy_synthesize(s->e, s->v2, TEXT_C, &p, pcm, n);
}

static int g_exact = 1;
/* 1 when a equals the reference (exactly, or within rel L2 1e-3 with COSY_GPU_FAULT_EXACT=0) */
static int same_audio(const float *a, int64_t na, const float *ref, int64_t nref, double *d) {
  *d = INFINITY;
  if (na != nref || !a || !ref) return 0;
  if (g_exact) {
    *d = tu_max_abs_diff(a, ref, (size_t)na);
    return *d == 0.0;
  }
  *d = tu_rel_l2(a, ref, (size_t)na);
  return *d < 1e-3;
}

static int audio_ok(const pushbuf *b) {
  for (int64_t i = 0; i < b->n; i++)
    if (!isfinite(b->pcm[i]) || fabsf(b->pcm[i]) > 1.0f) return 0;
  return b->n > 0 && b->last;
}

/* ---- the references ---------------------------------------------------------------------------- */

static float *g_ref_cold, *g_ref_warm;
static int64_t g_n_cold, g_n_warm, g_n_pair[2];

static int kind_status(int kind) {
  return kind == COSY_GPU_FAULT_OOM    ? COSY_ERR_GPU_NO_MEMORY
         : kind == COSY_GPU_FAULT_LOST ? COSY_ERR_DEVICE_LOST
                                       : COSY_ERR_CUDA;
}
static const char *kind_name(int kind) {
  return kind == COSY_GPU_FAULT_OOM ? "oom" : kind == COSY_GPU_FAULT_LOST ? "lost" : "launch";
}

static size_t used_now(void) {
  size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  return t - f;
}

static int setup(void **state) {
  (void)state;
  g_exact = envl("COSY_GPU_FAULT_EXACT", 1) != 0;
  return 0;
}

static void need_refs(void) {
  if (g_ref_cold) return;
  engine_set s;
  watch("reference");
  if (open_engine(&s)) fail_msg("create: %s", cosy_last_error());
  pair_result r;
  run_pair(&s, &r);
  for (int i = 0; i < 2; i++) {
    if (r.st[i]) fail_msg("reference pair, request %d: %s", i, r.msg[i]);
    assert_true(audio_ok(&r.b[i]));
    g_n_pair[i] = r.b[i].n;
  }
  pair_free(&r);
  if (run_check(&s, &g_ref_cold, &g_n_cold)) fail_msg("reference check: %s", cosy_last_error());
  if (run_check(&s, &g_ref_warm, &g_n_warm)) fail_msg("reference check: %s", cosy_last_error());
  double d = 0;
  const int same = same_audio(g_ref_warm, g_n_warm, g_ref_cold, g_n_cold, &d);
  print_message("references: pair %lld + %lld samples; check %lld samples cold, %lld warm "
                "(warm vs cold: %s, %.3g)\n",
                (long long)g_n_pair[0], (long long)g_n_pair[1], (long long)g_n_cold,
                (long long)g_n_warm, same ? "same" : "differ", d);
  close_engine(&s);
  unwatch();
}

/* the n to try: every stride-th of [1, T] (stride from the points wanted, or
 * COSY_GPU_FAULT_STRIDE) plus the first operation of each site (those in `skip` left out) */
typedef struct nlist {
  long long *n;
  int count;
} nlist;

static int cmp_ll(const void *a, const void *b) {
  const long long x = *(const long long *)a, y = *(const long long *)b;
  return x < y ? -1 : x > y;
}

static nlist pick_n(long long T, long points, const long long *site_first, int n_sites,
                    const char (*site_names)[64], const char (*skip)[64], int n_skip) {
  long long stride = envl("COSY_GPU_FAULT_STRIDE", 0);
  if (stride <= 0) stride = T / (points > 0 ? points : 1);
  if (stride < 1) stride = 1;
  nlist L;
  L.n = (long long *)malloc(sizeof(long long) * (size_t)(T / stride + 2 + n_sites));
  L.count = 0;
  for (long long n = 1; n <= T; n += stride) L.n[L.count++] = n;
  for (int i = 0; i < n_sites; i++) {
    int skipped = 0;
    for (int k = 0; k < n_skip && !skipped; k++) skipped = !strcmp(skip[k], site_names[i]);
    if (!skipped) L.n[L.count++] = site_first[i];
  }
  qsort(L.n, (size_t)L.count, sizeof *L.n, cmp_ll);
  int w = 0;
  for (int i = 0; i < L.count; i++)
    if (w == 0 || L.n[w - 1] != L.n[i]) L.n[w++] = L.n[i];
  L.count = w;
  return L;
}

#define MAX_SITES 1024
static long long g_first[MAX_SITES];
static char g_names[MAX_SITES][64];

static long long count_pair(engine_set *s, int *n_sites) {
  cosy_gpu_fault_arm(0, 0);
  pair_result r;
  run_pair(s, &r);
  const long long T = cosy_gpu_fault_calls();
  *n_sites = cosy_gpu_fault_sites(g_first, g_names, MAX_SITES);
  if (*n_sites > MAX_SITES) *n_sites = MAX_SITES;
  cosy_gpu_fault_arm(-1, 0);
  for (int i = 0; i < 2; i++)
    if (r.st[i]) fail_msg("counting run, request %d: %s", i, r.msg[i]);
  pair_free(&r);
  return T;
}

/* the pair's statuses after a non-sticky failure of `kind` (fired: it was injected) */
static void check_pair(const pair_result *r, int kind, int fired, long long n, int *n_failed) {
  int failed = 0;
  for (int i = 0; i < 2; i++) {
    if (r->st[i] == COSY_OK) {
      if (!audio_ok(&r->b[i]) || r->b[i].n != g_n_pair[i])
        fail_msg("n=%lld (%s): request %d ended COSY_OK with %lld samples (%lld expected) or bad "
                 "audio",
                 n, kind_name(kind), i, (long long)r->b[i].n, (long long)g_n_pair[i]);
      continue;
    }
    failed++;
    if (!fired || r->st[i] != kind_status(kind))
      fail_msg("n=%lld (%s, %s): request %d ended with status %d (%s): %s", n, kind_name(kind),
               fired ? "injected" : "not injected", i, (int)r->st[i], cosy_status_str(r->st[i]),
               r->msg[i]);
    if (!strstr(r->msg[i], "injected"))
      fail_msg("n=%lld: request %d's message does not name the injected failure: \"%s\"", n, i,
               r->msg[i]);
  }
  if (fired && !failed) {
    char site[64];
    cosy_gpu_fault_fired(site, sizeof site);
    fail_msg("n=%lld (%s): the failure of \"%s\" was injected but both requests ended COSY_OK "
             "(a failure absorbed silently)",
             n, kind_name(kind), site);
  }
  *n_failed += failed;
}

static void check_idle(engine_set *s, long long n) {
  cosy_engine_stats es;
  cosy_engine_stats_init(&es, sizeof es);
  assert_int_equal(cosy_engine_get_stats(s->e, &es), COSY_OK);
  if (es.active || es.queued)
    fail_msg("n=%lld: %d active, %d queued requests left after the pair", n, es.active, es.queued);
}

static void check_after(engine_set *s, int warm, long long n, int kind) {
  float *pcm = NULL;
  int64_t np = 0;
  cosy_status st = run_check(s, &pcm, &np);
  if (st) fail_msg("n=%lld (%s): the later request failed: %s", n, kind_name(kind), cosy_last_error());
  double d = 0;
  if (!same_audio(pcm, np, warm ? g_ref_warm : g_ref_cold, warm ? g_n_warm : g_n_cold, &d))
    fail_msg("n=%lld (%s): the later request's audio differs from a fault-free engine's (%s): "
             "%lld vs %lld samples, %s %.3g",
             n, kind_name(kind), warm ? "warm" : "cold", (long long)np,
             (long long)(warm ? g_n_warm : g_n_cold), g_exact ? "max abs" : "rel L2", d);
  cosy_free(pcm);
}

static size_t g_mem0;
static int g_mem0_set;
static void mem_mark(void) {
  if (g_mem0_set) return;
  cudaFree(0);
  g_mem0 = used_now();
  g_mem0_set = 1;
}

/* ---- phases ------------------------------------------------------------------------------------ */

static char g_warm_names[MAX_SITES][64];
static int g_n_warm_sites;

static void test_warm(void **state) {
  (void)state;
  TU_REQUIRE(have_gpu(), "no CUDA device: GPU fault tests skipped");
  TU_REQUIRE(model_path(), "no model (make build/test/small-f32.gguf or set COSY_GPU_TEST_MODEL)");
  TU_REQUIRE(phase_on("warm"), "warm phase not in COSY_GPU_FAULT_PHASES");
  mem_mark();
  need_refs();
  engine_set s;
  watch("warm: create");
  if (open_engine(&s)) fail_msg("create: %s", cosy_last_error());
  pair_result r;
  watch("warm: warm-up");
  run_pair(&s, &r);
  pair_free(&r);
  float *pcm = NULL;
  int64_t np = 0;
  if (run_check(&s, &pcm, &np)) fail_msg("warm-up check: %s", cosy_last_error());
  double d = 0;
  if (!same_audio(pcm, np, g_ref_cold, g_n_cold, &d))
    fail_msg("warm-up: the check differs from the reference engine's before any fault (%lld vs "
             "%lld samples, %.3g): the engine is not repeatable here (COSY_GPU_FAULT_EXACT=0?)",
             (long long)np, (long long)g_n_cold, d);
  cosy_free(pcm);
  run_pair(&s, &r); /* steady state: the counting run sees what every later run does */
  pair_free(&r);
  int n_sites = 0;
  const long long T = count_pair(&s, &n_sites);
  g_n_warm_sites = n_sites;
  memcpy(g_warm_names, g_names, sizeof(g_names[0]) * (size_t)n_sites);
  nlist L = pick_n(T, envl("COSY_GPU_FAULT_POINTS", 120), g_first, n_sites,
                   (const char(*)[64])g_names, NULL, 0);
  print_message("warm: the pair makes %lld checked CUDA operations at %d call sites; %d runs\n", T,
                n_sites, L.count);
  int fired_n = 0, failed = 0;
  for (int i = 0; i < L.count; i++) {
    const long long n = L.n[i];
    const int kind = i % 2 ? COSY_GPU_FAULT_OOM : COSY_GPU_FAULT_LAUNCH;
    watch("warm n=%lld (%s)", n, kind_name(kind));
    cosy_gpu_fault_arm(n, kind);
    run_pair(&s, &r);
    char site[64] = "";
    const int fired = cosy_gpu_fault_fired(site, sizeof site);
    cosy_gpu_fault_arm(-1, 0);
    fired_n += fired;
    if (envl("COSY_GPU_FAULT_VERBOSE", 0))
      print_message("warm n=%lld %s: %s; statuses %d %d; %s\n", n, kind_name(kind),
                    fired ? site : "(not reached)", (int)r.st[0], (int)r.st[1], r.msg[0][0] ? r.msg[0] : r.msg[1]);
    check_pair(&r, kind, fired, n, &failed);
    pair_free(&r);
    check_idle(&s, n);
    check_after(&s, 1, n, kind);
  }
  unwatch();
  print_message("warm: %d of %d runs injected a failure; %d requests failed as documented, the "
                "engine served every later request exactly\n",
                fired_n, L.count, failed);
  assert_true(fired_n > 0);
  free(L.n);
  close_engine(&s);
}

static void test_cold(void **state) {
  (void)state;
  TU_REQUIRE(have_gpu(), "no CUDA device: GPU fault tests skipped");
  TU_REQUIRE(model_path(), "no model");
  TU_REQUIRE(phase_on("cold"), "cold phase not in COSY_GPU_FAULT_PHASES");
  mem_mark();
  need_refs();
  engine_set s;
  watch("cold: counting");
  if (open_engine(&s)) fail_msg("create: %s", cosy_last_error());
  int n_sites = 0;
  const long long T = count_pair(&s, &n_sites);
  close_engine(&s);
  nlist L = pick_n(T, envl("COSY_GPU_FAULT_POINTS", 120) / 3, g_first, n_sites,
                   (const char(*)[64])g_names, (const char(*)[64])g_warm_names, g_n_warm_sites);
  print_message("cold: the pair on a fresh engine makes %lld checked CUDA operations at %d call "
                "sites; %d runs (a fresh engine each)\n",
                T, n_sites, L.count);
  int fired_n = 0, failed = 0;
  for (int i = 0; i < L.count; i++) {
    const long long n = L.n[i];
    const int kind = i % 2 ? COSY_GPU_FAULT_LAUNCH : COSY_GPU_FAULT_OOM;
    watch("cold n=%lld (%s)", n, kind_name(kind));
    if (open_engine(&s)) fail_msg("create: %s", cosy_last_error());
    cosy_gpu_fault_arm(n, kind);
    pair_result r;
    run_pair(&s, &r);
    char site[64] = "";
    const int fired = cosy_gpu_fault_fired(site, sizeof site);
    cosy_gpu_fault_arm(-1, 0);
    fired_n += fired;
    if (envl("COSY_GPU_FAULT_VERBOSE", 0))
      print_message("cold n=%lld %s: %s; statuses %d %d\n", n, kind_name(kind),
                    fired ? site : "(not reached)", (int)r.st[0], (int)r.st[1]);
    check_pair(&r, kind, fired, n, &failed);
    pair_free(&r);
    check_idle(&s, n);
    check_after(&s, 0, n, kind);
    watch("cold n=%lld (%s): destroy", n, kind_name(kind));
    close_engine(&s);
  }
  unwatch();
  print_message("cold: %d of %d runs injected a failure; %d requests failed as documented\n",
                fired_n, L.count, failed);
  assert_true(fired_n > 0);
  free(L.n);
}

static void test_lost(void **state) {
  (void)state;
  TU_REQUIRE(have_gpu(), "no CUDA device: GPU fault tests skipped");
  TU_REQUIRE(model_path(), "no model");
  TU_REQUIRE(phase_on("lost"), "lost phase not in COSY_GPU_FAULT_PHASES");
  mem_mark();
  need_refs();
  engine_set s;
  watch("lost: counting");
  if (open_engine(&s)) fail_msg("create: %s", cosy_last_error());
  int n_sites = 0;
  const long long T = count_pair(&s, &n_sites);
  close_engine(&s);
  nlist L = pick_n(T, envl("COSY_GPU_FAULT_POINTS", 120) / 6, g_first, 0, NULL, NULL, 0);
  print_message("lost: %d runs over %lld operations (a fresh engine each)\n", L.count, T);
  int lost_n = 0;
  for (int i = 0; i < L.count; i++) {
    const long long n = L.n[i];
    watch("lost n=%lld", n);
    if (open_engine(&s)) fail_msg("create: %s", cosy_last_error());
    cosy_gpu_fault_arm(n, COSY_GPU_FAULT_LOST);
    pair_result r;
    run_pair(&s, &r);
    const int fired = cosy_gpu_fault_fired(NULL, 0);
    int n_lost = 0;
    for (int k = 0; k < 2; k++) {
      if (r.st[k] == COSY_OK) {
        if (!audio_ok(&r.b[k]) || r.b[k].n != g_n_pair[k])
          fail_msg("lost n=%lld: request %d ended COSY_OK with %lld samples (%lld expected)", n, k,
                   (long long)r.b[k].n, (long long)g_n_pair[k]);
        continue;
      }
      if (r.st[k] != COSY_ERR_DEVICE_LOST)
        fail_msg("lost n=%lld: request %d ended with %d (%s): %s", n, k, (int)r.st[k],
                 cosy_status_str(r.st[k]), r.msg[k]);
      n_lost++;
    }
    if (fired && !n_lost)
      fail_msg("lost n=%lld: a sticky failure was injected but both requests ended COSY_OK", n);
    if (fired) {
      lost_n++;
      /* every later call: COSY_ERR_DEVICE_LOST */
      cosy_engine_stats es;
      cosy_engine_stats_init(&es, sizeof es);
      assert_int_equal(cosy_engine_get_stats(s.e, &es), COSY_ERR_DEVICE_LOST);
      assert_int_equal(es.active, 0);
      assert_int_equal(es.queued, 0);
      float *pcm = NULL;
      int64_t np = 0;
      assert_int_equal(run_check(&s, &pcm, &np), COSY_ERR_DEVICE_LOST);
      assert_null(pcm);
      cosy_request *q = NULL;
      cosy_synth_params p;
      params(&p, 5, 1);
      assert_int_equal(cosy_request_submit(s.e, s.v1, TEXT_B, &p, NULL, NULL, &q),
                       COSY_ERR_DEVICE_LOST);
      assert_null(q);
      assert_non_null(strstr(cosy_last_error(), "destroyed"));
      cosy_voice *v = NULL;
      cosy_voice_features f;
      cosy_voice_features_init(&f, sizeof f);
      float spk[192] = {0};
      spk[0] = 1;
      f.speaker_embedding = spk;
      f.speaker_dim = 192;
      assert_int_equal(cosy_voice_from_features(s.e, &f, &v), COSY_ERR_DEVICE_LOST);
      assert_null(v);
    } else {
      assert_int_equal(r.st[0], COSY_OK);
      assert_int_equal(r.st[1], COSY_OK);
    }
    if (envl("COSY_GPU_FAULT_VERBOSE", 0))
      print_message("lost n=%lld: %s; statuses %d %d; %s\n", n, fired ? "injected" : "not reached",
                    (int)r.st[0], (int)r.st[1], r.msg[0][0] ? r.msg[0] : r.msg[1]);
    pair_free(&r);
    watch("lost n=%lld: destroy", n);
    close_engine(&s); /* still armed: every checked operation fails, as on a lost device */
    cosy_gpu_fault_arm(-1, 0);
  }
  unwatch();
  print_message("lost: %d of %d runs lost the engine; every later call said so; destroy clean\n",
                lost_n, L.count);
  assert_true(lost_n > 0);
  free(L.n);
}

static void test_create(void **state) {
  (void)state;
  TU_REQUIRE(have_gpu(), "no CUDA device: GPU fault tests skipped");
  TU_REQUIRE(model_path(), "no model");
  TU_REQUIRE(phase_on("create"), "create phase not in COSY_GPU_FAULT_PHASES");
  mem_mark();
  need_refs();
  engine_set s;
  setenv("COSY_CUDA_FAULT", "3:bogus", 1);
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  c.model_path = model_path();
  c.device = 0;
  cosy_engine *e = NULL;
  assert_int_equal(cosy_engine_create(&c, &e), COSY_ERR_INVALID_ARG);
  assert_null(e);
  setenv("COSY_CUDA_FAULT", "0", 1); /* count only */
  watch("create: counting");
  if (open_engine(&s)) fail_msg("create (counting): %s", cosy_last_error());
  const long long T = cosy_gpu_fault_calls();
  int n_sites = cosy_gpu_fault_sites(g_first, g_names, MAX_SITES);
  if (n_sites > MAX_SITES) n_sites = MAX_SITES;
  close_engine(&s);
  nlist L = pick_n(T, envl("COSY_GPU_FAULT_POINTS", 120) / 4, g_first, n_sites,
                   (const char(*)[64])g_names, NULL, 0);
  print_message("create: %lld checked CUDA operations at %d call sites; %d runs\n", T, n_sites,
                L.count);
  int failed = 0;
  for (int i = 0; i < L.count; i++) {
    const long long n = L.n[i];
    const int kind = i % 3 == 0 ? COSY_GPU_FAULT_LAUNCH : i % 3 == 1 ? COSY_GPU_FAULT_OOM
                                                                   : COSY_GPU_FAULT_LOST;
    char v[64];
    snprintf(v, sizeof v, "%lld:%s", n, kind_name(kind));
    setenv("COSY_CUDA_FAULT", v, 1);
    watch("create COSY_CUDA_FAULT=%s", v);
    cosy_status st = open_engine(&s);
    char site[64] = "";
    const int fired = cosy_gpu_fault_fired(site, sizeof site);
    if (envl("COSY_GPU_FAULT_VERBOSE", 0))
      print_message("create %s: %s; status %d %s\n", v, fired ? site : "(not reached)", (int)st,
                    st ? cosy_last_error() : "");
    if (st) {
      failed++;
      if (!fired || st != kind_status(kind))
        fail_msg("COSY_CUDA_FAULT=%s (%s): create failed with %d (%s): %s", v,
                 fired ? "injected" : "not injected", (int)st, cosy_status_str(st),
                 cosy_last_error());
      assert_null(s.e);
      cosy_gpu_fault_arm(-1, 0);
      continue;
    }
    /* absorbed at creation (a fallback): the engine must then work exactly */
    cosy_gpu_fault_arm(-1, 0);
    if (fired && kind == COSY_GPU_FAULT_LOST)
      fail_msg("COSY_CUDA_FAULT=%s: a sticky failure at \"%s\" during create, yet create succeeded",
               v, site);
    if (fired) print_message("create %s: the failure of \"%s\" was absorbed\n", v, site);
    check_after(&s, 0, n, kind);
    close_engine(&s);
  }
  unsetenv("COSY_CUDA_FAULT");
  cosy_gpu_fault_arm(-1, 0);
  unwatch();
  print_message("create: %d of %d runs failed cleanly with the injected status\n", failed, L.count);
  assert_true(failed > 0);
  free(L.n);
}

/* last: what the failure paths left on the device */
static void test_memory_back(void **state) {
  (void)state;
  TU_REQUIRE(have_gpu() && g_mem0_set, "no CUDA device or no phase ran");
  const size_t now = used_now();
  const double drift = ((double)now - (double)g_mem0) / 1048576.0;
  print_message("device memory in use: %.0f MiB before the phases, %.0f MiB after (%+.0f MiB)\n",
                (double)g_mem0 / 1048576.0, (double)now / 1048576.0, drift);
  assert_true(drift < 64.0);
}

static int teardown(void **state) {
  (void)state;
  cosy_free(g_ref_cold);
  cosy_free(g_ref_warm);
  return 0;
}

int main(void) {
  signal(SIGALRM, on_alarm);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_warm),   cmocka_unit_test(test_cold),
      cmocka_unit_test(test_lost),   cmocka_unit_test(test_create),
      cmocka_unit_test(test_memory_back),
  };
  return cmocka_run_group_tests_name("gpu fault injection", tests, setup, teardown);
}
#else
int main(void) {
  printf("SKIP: built without CUDA (make CUDA=1): GPU fault injection tests not run\n");
  return 0;
}
#endif
