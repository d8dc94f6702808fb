/* parallel.c - a fork-join helper for the CPU feature stages (lib/voice_audio.c): threads are
 * started per call (tens of microseconds each), which is small beside the milliseconds of work
 * they split. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "util.h"

int cosy_cpu_count(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int c = CPU_COUNT(&set);
    if (c > 0) return c;
  }
  long c = sysconf(_SC_NPROCESSORS_ONLN);
  return c > 0 ? (int)(c < 4096 ? c : 4096) : 1;
}

typedef struct par_arg {
  void (*fn)(void *arg, int i, int n);
  void *arg;
  int i, n;
} par_arg;

static void *par_main(void *p) {
  par_arg *a = (par_arg *)p;
  a->fn(a->arg, a->i, a->n);
  return NULL;
}

#define PAR_MAX 256

void cosy_parallel(int n, void (*fn)(void *arg, int i, int n), void *arg) {
  if (n > PAR_MAX) n = PAR_MAX;
  if (n <= 1) {
    fn(arg, 0, 1);
    return;
  }
  pthread_t th[PAR_MAX];
  par_arg a[PAR_MAX];
  unsigned char started[PAR_MAX];
  for (int i = 1; i < n; i++) {
    a[i].fn = fn, a[i].arg = arg, a[i].i = i, a[i].n = n;
    started[i] = pthread_create(&th[i], NULL, par_main, &a[i]) == 0;
  }
  fn(arg, 0, n);
  for (int i = 1; i < n; i++) {
    if (started[i]) pthread_join(th[i], NULL);
    else fn(arg, i, n); /* no thread: run it here */
  }
}
