/* util.c - error reporting, struct_size handling, allocation helpers. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char g_last_error[1024];

cosy_status cosy_err(cosy_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
  va_end(ap);
  return s;
}

void cosy_err_clear(void) { g_last_error[0] = '\0'; }

COSY_API const char *cosy_last_error(void) { return g_last_error; }

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

void *cosy_malloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) cosy_err(COSY_ERR_NO_MEMORY, "out of host memory allocating %zu bytes", n);
  return p;
}

void *cosy_calloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) cosy_err(COSY_ERR_NO_MEMORY, "out of host memory allocating %zu x %zu bytes", n, size);
  return p;
}

char *cosy_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = (char *)cosy_malloc(n);
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
