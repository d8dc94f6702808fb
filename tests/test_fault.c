/* test_fault.c - host allocation failures injected across a whole session on the CPU.
 * Needs a fault-injection build (COSY_FAULT_INJECTION, lib/util.h: the Makefile sets it
 * with SAN=1, so `make test-sanitize` and `make test-fault` run this under AddressSanitizer, whose
 * leak check covers every path); elsewhere it says SKIP.
 *
 * Every host allocation of the library goes through cosy_malloc / cosy_calloc / cosy_realloc /
 * cosy_strdup, which count (on every thread) and can make the n-th one fail once. The session is
 * engine create (small model) -> voice load (a voice file written beforehand) -> blocking
 * synthesis -> push streaming (two chunks) -> pull streaming at 16 kHz (the resampler) -> two
 * pull requests submitted together (a long and a short text) -> voice release -> engine destroy.
 *
 * Phase 1, create + load: a counting run gives their allocations T1 and call sites; then for
 * every COSY_FAULT_STRIDE_SETUP-th n of 1..T1 (default 4) and the first allocation of each call
 * site, the two run with the n-th allocation failing: each returns COSY_OK or COSY_ERR_NO_MEMORY
 * with a message (nothing else), COSY_ERR_NO_MEMORY only when the failure was injected.
 * Phase 2, the synthesis steps, on one engine that lives through all of them: after a warm-up run
 * of each step (its reference audio), a counting run per step gives its allocations Tk and call
 * sites (the return address of each allocation's caller and the index of its first allocation);
 * then the step runs with the n-th allocation failing, for the chosen n: the step ends with
 * COSY_OK and exactly its reference audio (the failure was absorbed), or COSY_ERR_NO_MEMORY with
 * a message; of the two requests at once, a survivor gives exactly its own reference audio.
 * After the sweep every step runs again without failures and gives its reference audio (the
 * failures left the engine usable).
 * Which n in phase 2: every COSY_FAULT_STRIDE-th n (1, 1 + s, 1 + 2s, ...; default s = 64) and
 * the first allocation of each call site of the step's counting run that no earlier step made to
 * fail; a site that the injected failure then missed (threads interleave their allocations
 * differently from run to run) is tried at the next n, up to 16 times. The test fails when a call
 * site seen by a counting run was never made to fail. The two-request step tries, besides the
 * stride, the first allocation of each site among its first third (admission and prefill of both,
 * where a failure of one met the other), without the coverage requirement (its sites are the
 * one-request steps'). COSY_FAULT_STRIDE=1 and COSY_FAULT_STRIDE_SETUP=1 try every n: the full
 * sweep, for a run by hand (phase 2 alone then tries about 64 times as many n).
 * After each run: no crash (ASan), no hang (a watchdog ends the process after COSY_FAULT_TIMEOUT
 * seconds of one run, default 120, naming the n), no leak (LeakSanitizer's check of the heap,
 * __lsan_do_recoverable_leak_check; COSY_FAULT_LEAK_CHECK=0 turns it off), no request left in the
 * engine (stats: 0 active, 0 queued).
 * More environment: COSY_FAULT_FROM / COSY_FAULT_TO (limit n to a range, to replay a failure),
 * COSY_FAULT_STEPS (which steps, digits of 0..5 as in STEP_NAME; default all),
 * COSY_FAULT_VERBOSE=1 (one line per n). A site is printed as binary+offset for
 * `addr2line -f -i -e build/asan/tests/test_fault 0xOFFSET`. */
#define _GNU_SOURCE
#include <dlfcn.h>
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

#include <cmocka.h>

#include "cosyvoice.h"
#include "testutil.h"
#include "util.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define HAVE_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/lsan_interface.h>
#define HAVE_LSAN 1
#endif
#endif

#define NSTEP 6
enum { S_CREATE, S_LOAD, S_BLOCK, S_PUSH, S_PULL, S_PAIR };
static const char *STEP_NAME[NSTEP] = {"engine create", "voice load", "blocking synthesis",
                                       "push streaming", "pull streaming (16 kHz)",
                                       "two requests at once"};
/* S_PAIR: a long and a short request submitted together, so that they are admitted and
 * prefilled in one LLM iteration (the short one, admitted last, first): a failure in one must
 * not disturb the other (it once let the LLM thread read a job the other thread had freed). Both
 * may fail cleanly from one failure: the flow and the vocoder run the two in one batched call,
 * whose allocations are shared (lib/sched_t2w.c sched_t2w_main); a survivor's audio must be
 * exact. */
static const char *LONG_TEXT =
    "The quick brown fox jumps over the lazy dog while seven wizards quietly hum a cheerful "
    "tune, and the morning train was late again.";

static const char *TEXT = "Hello there, how are you?";

typedef struct audio {
  float *pcm;
  int64_t n;
  int chunks;
  int64_t n_first;   /* S_PAIR: samples of the first request (pcm holds both, one after the other) */
  int failed;        /* S_PAIR: bit k = request k failed (its audio is left out) */
} audio;

static char g_voice_path[4096];
static const char *g_model;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The push step streams two chunks (a first chunk of 25 tokens + 3 look-ahead: the voice's 25
 * prompt tokens need no padding, then the last one); the others make 10 tokens, the last chunk
 * only, and little else (this runs under AddressSanitizer once per allocation tried). */
static void params(cosy_synth_params *p, int k) {
  cosy_synth_params_init(p, sizeof *p);
  p->seed = 4242;
  p->max_tokens = p->min_tokens = k == S_PUSH ? 30 : 10;
  p->sample_rate = k == S_PULL ? 16000 : 0;
}

typedef struct pushbuf {
  float *pcm;
  int64_t n, cap;
  int chunks, bad;
} pushbuf;

static int32_t on_chunk(void *user, const cosy_chunk *c) {
  pushbuf *b = (pushbuf *)user;
  if (c->offset != b->n) b->bad = 1;
  if (b->n + c->n_samples > b->cap) {
    b->cap = (b->n + c->n_samples) * 2 + 1024;
    float *np = (float *)realloc(b->pcm, (size_t)b->cap * sizeof *np);
    if (!np) abort();
    b->pcm = np;
  }
  memcpy(b->pcm + b->n, c->pcm, (size_t)c->n_samples * sizeof *c->pcm);
  b->n += c->n_samples;
  b->chunks++;
  return 0;
}

/* Run synthesis step k (S_BLOCK, S_PUSH or S_PULL) on e; the audio into *out (caller frees
 * out->pcm), the message of a failure into msg. */
static cosy_status run_step(cosy_engine *e, const cosy_voice *v, int k, audio *out, char *msg,
                            size_t msg_cap) {
  memset(out, 0, sizeof *out);
  cosy_synth_params p;
  params(&p, k);
  cosy_status st;
  if (k == S_BLOCK) {
    st = cosy_synthesize(e, v, TEXT, &p, &out->pcm, &out->n);
    out->chunks = 1;
  } else if (k == S_PUSH) {
    pushbuf b = {0};
    cosy_request *r = NULL;
    st = cosy_request_submit(e, v, TEXT, &p, on_chunk, &b, &r);
    if (!st) st = cosy_request_wait(r, -1);
    snprintf(msg, msg_cap, "%s", st ? cosy_last_error() : "");
    cosy_request_release(r);
    if (b.bad) {
      st = COSY_ERR_INTERNAL;
      snprintf(msg, msg_cap, "a chunk's offset is not the number of samples before it");
    }
    out->pcm = b.pcm;
    out->n = b.n;
    out->chunks = b.chunks;
    return st;
  } else if (k == S_PAIR) {
    cosy_request *r[2] = {NULL, NULL};
    cosy_status s2[2];
    s2[0] = cosy_request_submit(e, v, LONG_TEXT, &p, NULL, NULL, &r[0]);
    s2[1] = cosy_request_submit(e, v, TEXT, &p, NULL, NULL, &r[1]);
    int64_t cap = 0;
    msg[0] = '\0';
    for (int q = 0; q < 2; q++) {
      const int64_t n0 = out->n;
      while (!s2[q]) {
        if (out->n + 777 > cap) {
          cap = 2 * (out->n + 777);
          float *np = (float *)realloc(out->pcm, (size_t)cap * sizeof *np);
          if (!np) abort();
          out->pcm = np;
        }
        int64_t got = 0;
        s2[q] = cosy_request_read(r[q], out->pcm + out->n, 777, &got, -1);
        if (!s2[q] && got == 0) break;
        out->n += got;
      }
      if (s2[q]) {
        if (!msg[0]) snprintf(msg, msg_cap, "%s", cosy_last_error());
        out->n = n0; /* a failed request's audio is left out */
        out->failed |= 1 << q;
      }
      if (q == 0) out->n_first = out->n;
      cosy_request_release(r[q]);
    }
    /* an unexpected status wins over COSY_ERR_NO_MEMORY, which wins over COSY_OK */
    for (int q = 0; q < 2; q++)
      if (s2[q] && s2[q] != COSY_ERR_NO_MEMORY) return s2[q];
    return s2[0] ? s2[0] : s2[1];
  } else {
    cosy_request *r = NULL;
    st = cosy_request_submit(e, v, TEXT, &p, NULL, NULL, &r);
    int64_t cap = 0;
    while (!st) {
      if (out->n + 777 > cap) {
        cap = 2 * (out->n + 777);
        float *np = (float *)realloc(out->pcm, (size_t)cap * sizeof *np);
        if (!np) abort();
        out->pcm = np;
      }
      int64_t got = 0;
      st = cosy_request_read(r, out->pcm + out->n, 777, &got, -1);
      if (!st && got == 0) break;
      out->n += got;
      out->chunks++;
    }
    snprintf(msg, msg_cap, "%s", st ? cosy_last_error() : "");
    cosy_request_release(r);
    return st;
  }
  snprintf(msg, msg_cap, "%s", st ? cosy_last_error() : "");
  return st;
}

/* engine create + voice load (+ destroy); statuses into st[2], messages into msg[2] */
static void run_setup(cosy_status st[2], char msg[2][256], cosy_engine **keep_e, cosy_voice **keep_v) {
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  c.model_path = g_model;
  c.device = COSY_DEVICE_CPU;
  c.max_active = 2;
  cosy_engine *e = NULL;
  cosy_voice *v = NULL;
  st[1] = -1;
  msg[0][0] = msg[1][0] = '\0';
  st[0] = cosy_engine_create(&c, &e);
  if (st[0]) snprintf(msg[0], 256, "%s", cosy_last_error());
  if (!st[0] && (e == NULL)) st[0] = COSY_ERR_INTERNAL, snprintf(msg[0], 256, "no engine");
  if (!st[0]) {
    st[1] = cosy_voice_load(e, g_voice_path, &v);
    if (st[1]) snprintf(msg[1], 256, "%s", cosy_last_error());
  }
  if (keep_e && !st[0] && !st[1]) {
    *keep_e = e;
    *keep_v = v;
    return;
  }
  cosy_voice_release(v);
  cosy_engine_destroy(e);
}

/* ---- watchdog: a hang ends the process with the n that hung ---------------------------------- */

static volatile long long g_current_n;
static volatile sig_atomic_t g_watchdog_s = 120;

static void on_alarm(int sig) {
  (void)sig;
  char buf[160];
  int len = snprintf(buf, sizeof buf,
                     "test_fault: HANG: allocation %lld made to fail, no progress for %d s\n",
                     g_current_n, (int)g_watchdog_s);
  if (len > 0) {
    ssize_t w = write(2, buf, (size_t)len);
    (void)w;
  }
  _exit(3);
}

/* "file+0xoffset" of a code address (for addr2line -f -e file 0xoffset) */
static void site_name(const void *a, char *buf, size_t cap) {
  Dl_info di;
  if (dladdr(a, &di) && di.dli_fname)
    snprintf(buf, cap, "%s%s%s+0x%lx", strrchr(di.dli_fname, '/') ? strrchr(di.dli_fname, '/') + 1 : di.dli_fname,
             di.dli_sname ? ":" : "", di.dli_sname ? di.dli_sname : "",
             (unsigned long)((const char *)a - (const char *)(di.dli_sname ? di.dli_saddr : di.dli_fbase)));
  else
    snprintf(buf, cap, "%p", a);
}

static long long env_ll(const char *name, long long dflt) {
  const char *s = getenv(name);
  return s && *s ? strtoll(s, NULL, 10) : dflt;
}

static int cmp_ll(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return x < y ? -1 : x > y;
}

static void make_voice_file(void) {
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  c.model_path = g_model;
  c.device = COSY_DEVICE_CPU;
  cosy_engine *e = NULL;
  if (cosy_engine_create(&c, &e)) fail_msg("create: %s", cosy_last_error());
  enum { P = 25 }; /* a multiple of 25: the first chunk ends on a block without padding */
  int32_t tok[P];
  static float mel[2 * P * 80];
  float spk[192];
  for (int i = 0; i < P; i++) tok[i] = (i * 997 + 13) % 6561;
  for (int i = 0; i < 2 * P * 80; i++) mel[i] = -6.0f + 4.0f * sinf(0.01f * (float)i);
  for (int i = 0; i < 192; i++) spk[i] = cosf(0.3f * (float)i);
  cosy_voice_features f;
  cosy_voice_features_init(&f, sizeof f);
  f.prompt_text = "Hello there.";
  f.speech_tokens = tok;
  f.n_speech_tokens = P;
  f.mel = mel;
  f.n_mel_frames = 2 * P;
  f.speaker_embedding = spk;
  cosy_voice *v = NULL;
  if (cosy_voice_from_features(e, &f, &v)) fail_msg("voice: %s", cosy_last_error());
  snprintf(g_voice_path, sizeof g_voice_path, "%s", tu_tmp_path("fault-voice.gguf"));
  if (cosy_voice_save(v, g_voice_path)) fail_msg("voice save: %s", cosy_last_error());
  cosy_voice_release(v);
  cosy_engine_destroy(e);
}

/* the n to try out of 1..T: every n with stride 1; else every stride-th n (1, 1 + stride, ...)
 * and the first allocation of each call site (first[0..ns)); limited to [from, to]. Sorted,
 * distinct; returns the count. */
static long long pick_ns(long long T, long long stride, const long long *first, int ns,
                         long long from, long long to, long long *out) {
  long long nn = 0;
  for (long long n = 1; n <= T; n++)
    if (stride == 1 || (n - 1) % stride == 0) out[nn++] = n;
  for (int i = 0; i < ns && stride > 1; i++) out[nn++] = first[i];
  qsort(out, (size_t)nn, sizeof *out, cmp_ll);
  long long m = 0;
  for (long long i = 0; i < nn; i++)
    if ((m == 0 || out[i] != out[m - 1]) && out[i] >= from && out[i] <= to) out[m++] = out[i];
  return m;
}

enum { MAXS = 4096 };

typedef struct sweep {
  const char *name;
  long long runs, nomem, absorbed, not_reached, retries;
  int failures, leaks, sites, missed;
  double seconds;
} sweep;

static int leak_check(void) {
#ifdef HAVE_LSAN
  static int every = -1;
  if (every < 0) every = (int)env_ll("COSY_FAULT_LEAK_CHECK", 1);
  return every ? __lsan_do_recoverable_leak_check() : 0;
#else
  return 0;
#endif
}

/* record the site that failed in hit[] (sites site[0..ns)) */
static void mark_hit(const void *const *site, int ns, int *hit) {
  const void *fs = cosy_fault_failed_site();
  for (int s = 0; s < ns && fs; s++)
    if (site[s] == fs) hit[s] = 1;
}

static void report(sweep *w, long long n, const char *where, const char *why, const char *ok_what,
                   int verbose) {
  if (why[0]) w->failures++;
  if (why[0] || verbose)
    print_message("%s n=%lld (%s): %s%s\n", w->name, n, where, why[0] ? "FAIL: " : "", why[0] ? why : ok_what);
}

static int count_missed(const char *name, const void *const *site, const long long *first,
                        int ns, const int *hit) {
  int missed = 0;
  for (int s = 0; s < ns; s++)
    if (!hit[s]) {
      char nm[256];
      site_name(site[s], nm, sizeof nm);
      print_message("%s: call site %s (first allocation %lld) was never made to fail\n", name, nm,
                    first[s]);
      missed++;
    }
  return missed;
}

static void sweep_done(sweep *w) {
  print_message("%s: %lld runs (%lld of them retries of a missed site) in %.1f s: %lld clean "
                "COSY_ERR_NO_MEMORY, %lld absorbed (same result), %lld not reached; %d of %d call "
                "sites made to fail; %d failures, %d leaks\n",
                w->name, w->runs, w->retries, w->seconds, w->nomem, w->absorbed, w->not_reached,
                w->sites - w->missed, w->sites, w->failures, w->leaks);
}

/* Phase 1: engine create and voice load, failing each n of theirs. */
static void sweep_setup(sweep *w, long long stride, long long from, long long to, int verbose) {
  static const void *site[MAXS];
  static long long first[MAXS];
  static int hit[MAXS];
  cosy_status st[2];
  char msg[2][256];
  cosy_fault_arm(0);
  run_setup(st, msg, NULL, NULL);
  const long long T = cosy_fault_calls();
  if (st[0] || st[1]) fail_msg("counting run: %s", st[0] ? msg[0] : msg[1]);
  const int ns = cosy_fault_sites(site, first, MAXS);
  assert_true(ns <= MAXS);
  memset(hit, 0, sizeof hit);
  w->sites = ns;
  long long *list = (long long *)malloc(sizeof(long long) * (size_t)(T + ns + 1));
  const long long nn = pick_ns(T, stride, first, ns, from, to, list);
  print_message("%s: %lld allocations from %d call sites; %lld runs\n", w->name, T, ns, nn);
  const double t0 = now_s();
  for (long long i = 0; i < nn && w->failures < 10; i++) {
    const long long n = list[i];
    g_current_n = n;
    alarm((unsigned)g_watchdog_s);
    cosy_fault_arm(n);
    run_setup(st, msg, NULL, NULL);
    alarm(0);
    const int fired = cosy_fault_fired();
    mark_hit(site, ns, hit);
    char where[256] = "not reached";
    if (fired) site_name(cosy_fault_failed_site(), where, sizeof where);
    char why[1024] = "";
    const char *what = "succeeded";
    for (int k = 0; k < 2 && !why[0]; k++) {
      if (st[k] == -1) continue; /* voice load after a failed create */
      if (st[k] == COSY_ERR_NO_MEMORY) {
        if (!fired) snprintf(why, sizeof why, "%s: COSY_ERR_NO_MEMORY, no failure injected", STEP_NAME[k]);
        else if (!msg[k][0]) snprintf(why, sizeof why, "%s: COSY_ERR_NO_MEMORY without a message", STEP_NAME[k]);
        what = k ? "voice load failed cleanly" : "engine create failed cleanly";
        w->nomem++;
      } else if (st[k]) {
        snprintf(why, sizeof why, "%s returned %d (%s): %s", STEP_NAME[k], st[k], cosy_status_str(st[k]), msg[k]);
      }
    }
    if (!why[0] && fired && !st[0] && !st[1]) w->absorbed++;
    if (!fired) w->not_reached++;
    cosy_fault_arm(0);
    if (!why[0] && leak_check()) {
      snprintf(why, sizeof why, "memory leaked (LeakSanitizer report above)");
      w->leaks++;
    }
    w->runs++;
    report(w, n, where, why, what, verbose);
  }
  w->seconds = now_s() - t0;
  if (from == 1 && to >= T && w->failures == 0) w->missed = count_missed(w->name, site, first, ns, hit);
  free(list);
}

/* Phase 2: synthesis step k on a live engine, failing each chosen n of the step. */
/* call sites made to fail by an earlier synthesis step */
static const void *g_covered[MAXS];
static int g_ncovered;

static void cover(const void *const *site, int ns, const int *hit) {
  for (int s = 0; s < ns; s++) {
    int known = 0;
    for (int c = 0; c < g_ncovered && !known; c++) known = g_covered[c] == site[s];
    if (hit[s] && !known && g_ncovered < MAXS) g_covered[g_ncovered++] = site[s];
  }
}

/* Phase 2, one step. own_sites: the first allocation of each call site no earlier step has made
 * to fail is tried, a missed one retried, and every site must end up covered; otherwise
 * (S_PAIR, whose sites are those of the one-request steps: it is about two requests at once)
 * the first allocation of every site up to its admission and prefill (n <= T / 3) is tried. */
static void sweep_step(sweep *w, cosy_engine *e, const cosy_voice *v, int k, const audio *ref,
                       long long stride, long long from, long long to, int verbose, int own_sites) {
  static const void *site[MAXS];
  static long long first[MAXS], cand[MAXS];
  static int hit[MAXS];
  char msg[512];
  audio a;
  cosy_fault_arm(0);
  cosy_status st = run_step(e, v, k, &a, msg, sizeof msg);
  const long long T = cosy_fault_calls();
  if (st) fail_msg("counting run: %s: %s", STEP_NAME[k], msg);
  free(a.pcm);
  const int ns = cosy_fault_sites(site, first, MAXS);
  assert_true(ns <= MAXS);
  memset(hit, 0, sizeof hit);
  w->sites = ns;
  int nc = 0;
  for (int sidx = 0; sidx < ns; sidx++) {
    int known = 0;
    for (int c = 0; c < g_ncovered && !known; c++) known = g_covered[c] == site[sidx];
    if (own_sites && known) hit[sidx] = 1; /* covered by an earlier step */
    else if (own_sites || (stride > 1 && first[sidx] <= T / 3)) cand[nc++] = first[sidx];
  }
  long long *list = (long long *)malloc(sizeof(long long) * (size_t)(T + ns + 1));
  const long long nn = pick_ns(T, stride, cand, nc, from, to, list);
  print_message("%s: %lld allocations from %d call sites (%d tried); %lld runs\n", w->name, T, ns, nc,
                nn);
  const double t0 = now_s();
  for (long long i = 0; i < nn && w->failures < 10; i++) {
    const long long n = list[i];
    g_current_n = n;
    alarm((unsigned)g_watchdog_s);
    cosy_fault_arm(n);
    st = run_step(e, v, k, &a, msg, sizeof msg);
    alarm(0);
    const int fired = cosy_fault_fired();
    mark_hit(site, ns, hit);
    char where[256] = "not reached";
    if (fired) site_name(cosy_fault_failed_site(), where, sizeof where);
    cosy_fault_arm(0);
    char why[1024] = "";
    const char *what = "succeeded";
    if (st == COSY_ERR_NO_MEMORY) {
      if (!fired) snprintf(why, sizeof why, "COSY_ERR_NO_MEMORY, no failure injected");
      else if (!msg[0]) snprintf(why, sizeof why, "COSY_ERR_NO_MEMORY without a message");
      else if (k == S_PAIR && a.failed == 1 &&
               (a.n != ref->n - ref->n_first ||
                memcmp(a.pcm, ref->pcm + ref->n_first, (size_t)a.n * sizeof(float))))
        snprintf(why, sizeof why, "the second request (the first failed) gave other audio");
      else if (k == S_PAIR && a.failed == 2 &&
               (a.n != ref->n_first || memcmp(a.pcm, ref->pcm, (size_t)a.n * sizeof(float))))
        snprintf(why, sizeof why, "the first request (the second failed) gave other audio");
      what = "failed cleanly";
      w->nomem++;
    } else if (st) {
      snprintf(why, sizeof why, "returned %d (%s): %s", st, cosy_status_str(st), msg);
    } else if (a.n != ref->n || memcmp(a.pcm, ref->pcm, (size_t)ref->n * sizeof(float))) {
      snprintf(why, sizeof why, "succeeded with other audio (%lld vs %lld samples)", (long long)a.n,
               (long long)ref->n);
    } else if (fired) {
      w->absorbed++;
    }
    if (!fired) w->not_reached++;
    free(a.pcm);
    /* the engine's own state is still alive here: a leak is what nothing points to any more */
    if (!why[0] && leak_check()) {
      snprintf(why, sizeof why, "memory leaked (LeakSanitizer report above)");
      w->leaks++;
    }
    cosy_engine_stats es;
    cosy_engine_stats_init(&es, sizeof es);
    if (!why[0] && cosy_engine_get_stats(e, &es) == COSY_OK && (es.active || es.queued))
      snprintf(why, sizeof why, "the engine still counts %d active / %d queued requests", es.active, es.queued);
    w->runs++;
    report(w, n, where, why, what, verbose);
  }
  /* With several threads allocating, the n-th allocation is not always the same one: a site
   * whose first allocation was not the one that failed is tried again at the next n, up to 16 */
  for (int sidx = 0; sidx < ns && own_sites && w->failures == 0 && from == 1 && to >= T; sidx++) {
    for (long long n = first[sidx] + 1; !hit[sidx] && n <= first[sidx] + 16 && n <= T; n++) {
      g_current_n = n;
      alarm((unsigned)g_watchdog_s);
      cosy_fault_arm(n);
      st = run_step(e, v, k, &a, msg, sizeof msg);
      alarm(0);
      mark_hit(site, ns, hit);
      cosy_fault_arm(0);
      free(a.pcm);
      w->runs++;
      w->retries++;
      if (st != COSY_OK && st != COSY_ERR_NO_MEMORY) {
        print_message("%s n=%lld (retry): FAIL: returned %d (%s): %s\n", w->name, n, st,
                      cosy_status_str(st), msg);
        w->failures++;
      }
    }
  }
  w->seconds = now_s() - t0;
  if (own_sites && from == 1 && to >= T && w->failures == 0)
    w->missed = count_missed(w->name, site, first, ns, hit);
  cover(site, ns, hit);
  free(list);
}

static void test_alloc_faults(void **state) {
  (void)state;
  TU_REQUIRE(cosy_fault_enabled(),
             "built without COSY_FAULT_INJECTION (make test-fault runs it in the ASan build)");
  g_model = tu_small_model();
  TU_REQUIRE(g_model, "no small model (make build/test/small-f32.gguf)");
  make_voice_file();
  g_watchdog_s = (sig_atomic_t)env_ll("COSY_FAULT_TIMEOUT", 120);
  signal(SIGALRM, on_alarm);
  const long long stride_setup = env_ll("COSY_FAULT_STRIDE_SETUP", 4);
  const long long stride = env_ll("COSY_FAULT_STRIDE", 64);
  const long long from = env_ll("COSY_FAULT_FROM", 1), to = env_ll("COSY_FAULT_TO", 1LL << 62);
  const int verbose = env_ll("COSY_FAULT_VERBOSE", 0) != 0;
  const char *only = getenv("COSY_FAULT_STEPS"); /* e.g. "01234" (default: all) */
  assert_true(stride >= 1 && stride_setup >= 1);
  const double t_all = now_s();
  sweep w[NSTEP];
  memset(w, 0, sizeof w);
  w[S_CREATE].name = "create+load";
  if (!only || strchr(only, '0') || strchr(only, '1'))
    sweep_setup(&w[S_CREATE], stride_setup, from, to, verbose);

  /* the synthesis steps on one engine: a warm-up run of each step gives its reference audio (and
   * fills what an engine makes once, so the counting runs see a steady state) */
  cosy_status st[2];
  char msg[2][256];
  cosy_engine *e = NULL;
  cosy_voice *v = NULL;
  cosy_fault_arm(0);
  run_setup(st, msg, &e, &v);
  if (!e) fail_msg("setup: %s", st[0] ? msg[0] : msg[1]);
  audio ref[NSTEP];
  memset(ref, 0, sizeof ref);
  char m[512];
  for (int k = S_BLOCK; k <= S_PAIR; k++)
    if (run_step(e, v, k, &ref[k], m, sizeof m)) fail_msg("reference %s: %s", STEP_NAME[k], m);
  print_message("references: %lld samples (blocking), push %d chunks, pull at 16 kHz %lld samples\n",
                (long long)ref[S_BLOCK].n, ref[S_PUSH].chunks, (long long)ref[S_PULL].n);
  assert_true(ref[S_BLOCK].n > 0 && ref[S_PULL].n > 0);
  assert_true(ref[S_PUSH].chunks >= 2); /* the streaming path, not one final chunk */
  static const char *names[NSTEP] = {"", "", "blocking", "push", "pull", "pair"};
  for (int k = S_BLOCK; k <= S_PAIR; k++) {
    w[k].name = names[k];
    if (!only || strchr(only, '0' + k)) sweep_step(&w[k], e, v, k, &ref[k], stride, from, to, verbose, k != S_PAIR);
  }
  /* after every failure the engine still gives the reference audio */
  for (int k = S_BLOCK; k <= S_PAIR; k++) {
    audio a;
    cosy_status s2 = run_step(e, v, k, &a, m, sizeof m);
    if (s2) fail_msg("after the sweep: %s: %s", STEP_NAME[k], m);
    assert_int_equal(a.n, ref[k].n);
    assert_memory_equal(a.pcm, ref[k].pcm, (size_t)a.n * sizeof(float));
    free(a.pcm);
    free(ref[k].pcm);
  }
  cosy_voice_release(v);
  cosy_engine_destroy(e);
  unlink(g_voice_path);
  int failures = 0, leaks = 0, missed = 0;
  for (int k = 0; k < NSTEP; k++) {
    if (!w[k].name || !w[k].runs) continue;
    sweep_done(&w[k]);
    failures += w[k].failures;
    leaks += w[k].leaks;
    missed += w[k].missed;
  }
  print_message("fault injection: %.1f s in all\n", now_s() - t_all);
  assert_int_equal(leaks, 0);
  assert_int_equal(failures, 0);
  assert_int_equal(missed, 0);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines reach a log as they happen */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alloc_faults),
  };
  return cmocka_run_group_tests_name("fault injection", tests, NULL, NULL);
}
