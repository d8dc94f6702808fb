/* kernel_time.c - GPU kernel time of a whole process, for benchmarks (not part of the library).
 *
 * Built as a preload library (bench/device_run.sh, step gputime):
 *   cc -shared -fPIC -O2 -I$CUDA_HOME/include -o kernel_time.so bench/kernel_time.c \
 *      -L$CUDA_HOME/lib64 -lcupti
 *   LD_PRELOAD=./kernel_time.so build/dev/bench/bench_w1 ...
 * At exit it prints one line to stderr:
 *   kernel_time: N kernels, sum S ms, busy B ms
 * S is the sum of every kernel's duration (CUPTI's concurrent-kernel activity records, so
 * kernels of different streams are timed as they really ran, overlapping); B is the time the
 * GPU had at least one kernel running (the union of the kernels' [start, end) intervals):
 * launch gaps and idle time are in neither. Fixed costs (engine creation, graph capture,
 * warm-up) cancel when two runs of different request counts are subtracted.
 * KERNEL_TIME_TOP=N also prints the N kernels of the largest summed duration (name, calls,
 * ms, share of the sum; names cut at 90 characters): where a run's GPU time goes. */
#define _POSIX_C_SOURCE 200809L
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  uint64_t start, end;
} span;

static span *g_spans;
static size_t g_n, g_cap;
static uint64_t g_sum;

/* per-name totals (KERNEL_TIME_TOP) */
typedef struct {
  char *name;
  uint64_t ns, calls;
} ktot;
static ktot *g_k;
static size_t g_nk, g_capk;
static int g_top;

static void add_name(const char *name, uint64_t ns) {
  if (!name) name = "?";
  for (size_t i = 0; i < g_nk; i++)
    if (strcmp(g_k[i].name, name) == 0) {
      g_k[i].ns += ns;
      g_k[i].calls++;
      return;
    }
  if (g_nk == g_capk) {
    size_t cap = g_capk ? 2 * g_capk : 256;
    ktot *p = realloc(g_k, cap * sizeof *p);
    if (!p) return;
    g_k = p;
    g_capk = cap;
  }
  g_k[g_nk].name = strdup(name);
  if (!g_k[g_nk].name) return;
  g_k[g_nk].ns = ns;
  g_k[g_nk].calls = 1;
  g_nk++;
}

static int by_ns(const void *a, const void *b) {
  const ktot *x = a, *y = b;
  return x->ns > y->ns ? -1 : x->ns < y->ns;
}

static void CUPTIAPI buf_requested(uint8_t **buf, size_t *size, size_t *max_records) {
  *size = (size_t)8 << 20;
  *buf = aligned_alloc(8, *size);
  *max_records = 0;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                   size_t valid) {
  (void)ctx, (void)stream, (void)size;
  CUpti_Activity *rec = NULL;
  while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
    if (k->end <= k->start) continue;
    g_sum += k->end - k->start;
    if (g_top > 0) add_name(k->name, k->end - k->start);
    if (g_n == g_cap) {
      size_t cap = g_cap ? 2 * g_cap : 1 << 16;
      span *p = realloc(g_spans, cap * sizeof *p);
      if (!p) continue;
      g_spans = p;
      g_cap = cap;
    }
    g_spans[g_n].start = k->start;
    g_spans[g_n].end = k->end;
    g_n++;
  }
  free(buf);
}

static int by_start(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

static void report(void) {
  cuptiActivityFlushAll(1);
  qsort(g_spans, g_n, sizeof *g_spans, by_start);
  uint64_t busy = 0, cur_s = 0, cur_e = 0;
  for (size_t i = 0; i < g_n; i++) {
    if (i == 0 || g_spans[i].start > cur_e) {
      busy += cur_e - cur_s;
      cur_s = g_spans[i].start;
      cur_e = g_spans[i].end;
    } else if (g_spans[i].end > cur_e) {
      cur_e = g_spans[i].end;
    }
  }
  busy += cur_e - cur_s;
  fprintf(stderr, "kernel_time: %zu kernels, sum %.3f ms, busy %.3f ms\n", g_n, g_sum / 1e6,
          busy / 1e6);
  if (g_top > 0 && g_nk > 0) {
    qsort(g_k, g_nk, sizeof *g_k, by_ns);
    for (size_t i = 0; i < g_nk && i < (size_t)g_top; i++)
      fprintf(stderr, "kernel_time top %2zu: %10.3f ms %5.1f%% %9llu calls  %.90s\n", i + 1,
              g_k[i].ns / 1e6, 100.0 * g_k[i].ns / (g_sum ? g_sum : 1),
              (unsigned long long)g_k[i].calls, g_k[i].name);
  }
}

__attribute__((constructor)) static void kernel_time_init(void) {
  const char *top = getenv("KERNEL_TIME_TOP");
  g_top = top ? atoi(top) : 0;
  if (cuptiActivityRegisterCallbacks(buf_requested, buf_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    fprintf(stderr, "kernel_time: CUPTI activity tracing could not start\n");
    return;
  }
  atexit(report);
}
