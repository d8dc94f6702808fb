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
 * warm-up) cancel when two runs of different request counts are subtracted. */
#define _POSIX_C_SOURCE 200809L
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  uint64_t start, end;
} span;

static span *g_spans;
static size_t g_n, g_cap;
static uint64_t g_sum;

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
}

__attribute__((constructor)) static void kernel_time_init(void) {
  if (cuptiActivityRegisterCallbacks(buf_requested, buf_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    fprintf(stderr, "kernel_time: CUPTI activity tracing could not start\n");
    return;
  }
  atexit(report);
}
