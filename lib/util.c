/* util.c - error reporting and status strings, struct_size handling, allocation helpers: the
 * bottom of the host code, which every file of lib/ may call and which calls none of them. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char g_last_error[1024];
_Thread_local cosy_work_counters cosy_work;

cosy_status cosy_err(cosy_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
  va_end(ap);
  return s;
}

void cosy_err_clear(void) { g_last_error[0] = '\0'; }

COSY_API const char *cosy_last_error(void) { return g_last_error; }

COSY_API const char *cosy_status_str(cosy_status s) {
  switch (s) {
    case COSY_OK: return "ok";
    case COSY_ERR_INVALID_ARG: return "invalid argument";
    case COSY_ERR_STRUCT_SIZE: return "struct size mismatch";
    case COSY_ERR_NO_MEMORY: return "out of host memory";
    case COSY_ERR_GPU_NO_MEMORY: return "out of GPU memory";
    case COSY_ERR_CUDA: return "CUDA error";
    case COSY_ERR_DEVICE_LOST: return "GPU device lost";
    case COSY_ERR_IO: return "I/O error";
    case COSY_ERR_MODEL_FORMAT: return "bad model file";
    case COSY_ERR_MODEL_VERSION: return "unsupported model file version";
    case COSY_ERR_UNSUPPORTED: return "not supported";
    case COSY_ERR_CANCELLED: return "cancelled";
    case COSY_ERR_TIMEOUT: return "timed out";
    case COSY_ERR_QUEUE_FULL: return "queue full";
    case COSY_ERR_TEXT: return "invalid text";
    case COSY_ERR_INTERNAL: return "internal error";
    default: return "unknown status";
  }
}

cosy_status cosy_struct_in(void *dst, size_t own_size, const void *src, size_t min_size,
                           const char *what) {
  uint32_t caller;
  memcpy(&caller, src, sizeof caller);
  if (caller < min_size)
    return cosy_err(COSY_ERR_STRUCT_SIZE,
                    "%s: struct_size %u is smaller than the smallest known size %zu "
                    "(call the matching *_init first)",
                    what, caller, min_size);
  if (caller > (1u << 20))
    return cosy_err(COSY_ERR_STRUCT_SIZE, "%s: struct_size %u is absurd", what, caller);
  if (caller > own_size) {
    const unsigned char *p = (const unsigned char *)src;
    for (size_t i = own_size; i < caller; i++)
      if (p[i] != 0)
        return cosy_err(COSY_ERR_STRUCT_SIZE,
                        "%s: struct_size %u is larger than this library's %zu and byte %zu is "
                        "non-zero (a newer field this version does not know)",
                        what, caller, own_size, i);
  }
  size_t n = caller < own_size ? caller : own_size;
  memcpy(dst, src, n);
  memset((char *)dst + n, 0, own_size - n);
  memcpy(dst, &caller, sizeof caller);
  return COSY_OK;
}

/* ---- fault injection (util.h) ---------------------------------------------------------------- */

#ifdef COSY_FAULT_INJECTION
#include <pthread.h>

#define FAULT_MAX_SITES 4096
static pthread_mutex_t g_fault_mu = PTHREAD_MUTEX_INITIALIZER;
static long long g_fault_at, g_fault_count;
static int g_fault_fired;
static const void *g_fault_failed;
static const void *g_site_addr[FAULT_MAX_SITES];
static long long g_site_first[FAULT_MAX_SITES];
static int g_n_sites;

/* count one allocation from `site`; 1: make it fail */
static int fault_now(const void *site) {
  pthread_mutex_lock(&g_fault_mu);
  const long long k = ++g_fault_count;
  int i = 0;
  while (i < g_n_sites && g_site_addr[i] != site) i++;
  if (i == g_n_sites && g_n_sites < FAULT_MAX_SITES) {
    g_site_addr[i] = site;
    g_site_first[i] = k;
    g_n_sites++;
  }
  const int fail = g_fault_at > 0 && k == g_fault_at;
  if (fail) {
    g_fault_fired = 1;
    g_fault_failed = site;
  }
  pthread_mutex_unlock(&g_fault_mu);
  return fail;
}

int cosy_fault_enabled(void) { return 1; }

void cosy_fault_arm(long long n) {
  pthread_mutex_lock(&g_fault_mu);
  g_fault_at = n;
  g_fault_count = 0;
  g_fault_fired = 0;
  g_fault_failed = NULL;
  g_n_sites = 0;
  pthread_mutex_unlock(&g_fault_mu);
}

long long cosy_fault_calls(void) {
  pthread_mutex_lock(&g_fault_mu);
  long long n = g_fault_count;
  pthread_mutex_unlock(&g_fault_mu);
  return n;
}

int cosy_fault_fired(void) {
  pthread_mutex_lock(&g_fault_mu);
  int f = g_fault_fired;
  pthread_mutex_unlock(&g_fault_mu);
  return f;
}

int cosy_fault_sites(const void **addr, long long *first, int cap) {
  pthread_mutex_lock(&g_fault_mu);
  int n = g_n_sites;
  for (int i = 0; i < n && i < cap; i++) {
    addr[i] = g_site_addr[i];
    first[i] = g_site_first[i];
  }
  pthread_mutex_unlock(&g_fault_mu);
  return n;
}

const void *cosy_fault_failed_site(void) {
  pthread_mutex_lock(&g_fault_mu);
  const void *s = g_fault_failed;
  pthread_mutex_unlock(&g_fault_mu);
  return s;
}
#define FAULT(site) fault_now(site)
#else
int cosy_fault_enabled(void) { return 0; }
void cosy_fault_arm(long long n) { (void)n; }
long long cosy_fault_calls(void) { return 0; }
int cosy_fault_fired(void) { return 0; }
int cosy_fault_sites(const void **addr, long long *first, int cap) {
  (void)addr, (void)first, (void)cap;
  return 0;
}
const void *cosy_fault_failed_site(void) { return NULL; }
#define FAULT(site) 0
#endif

/* ---- allocation ------------------------------------------------------------------------------ */

/* The call site (for fault injection) is the caller of the public wrapper: each wrapper passes its
 * own return address down. */
#define CALLER __builtin_return_address(0)

static void *alloc_at(size_t n, const void *site) {
  void *p = FAULT(site) ? NULL : malloc(n ? n : 1);
  if (!p) cosy_err(COSY_ERR_NO_MEMORY, "out of host memory allocating %zu bytes", n);
  return p;
}

__attribute__((noinline)) void *cosy_malloc(size_t n) { return alloc_at(n, CALLER); }

__attribute__((noinline)) void *cosy_calloc(size_t n, size_t size) {
  void *p = FAULT(CALLER) ? NULL : calloc(n ? n : 1, size ? size : 1);
  if (!p) cosy_err(COSY_ERR_NO_MEMORY, "out of host memory allocating %zu x %zu bytes", n, size);
  return p;
}

__attribute__((noinline)) void *cosy_realloc(void *old, size_t n) {
  void *p = FAULT(CALLER) ? NULL : realloc(old, n ? n : 1);
  if (!p) cosy_err(COSY_ERR_NO_MEMORY, "out of host memory reallocating to %zu bytes", n);
  return p;
}

__attribute__((noinline)) char *cosy_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = (char *)alloc_at(n, CALLER);
  if (p) memcpy(p, s, n);
  return p;
}

int cosy_mul_size(size_t a, size_t b, size_t *out) {
  if (a && b > (size_t)-1 / a) return -1;
  *out = a * b;
  return 0;
}

double cosy_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

long cosy_utf8_invalid_at(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) { i++; continue; }
    size_t len;
    uint32_t cp, min;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; min = 0x10000; }
    else return (long)i;
    if (i + len > n) return (long)i;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xC0) != 0x80) return (long)i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return (long)i;
    i += len;
  }
  return -1;
}
