/* util.h - internal helpers shared by the host code: error reporting, struct_size handling,
 * checked allocation, logging. Nothing here is exported. */
#ifndef COSY_UTIL_H
#define COSY_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "cosyvoice.h"

#if defined(__GNUC__)
#  define COSY_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#  define COSY_PRINTF(a, b)
#endif

/* Record a failure in this thread's cosy_last_error() and return s. */
cosy_status cosy_err(cosy_status s, const char *fmt, ...) COSY_PRINTF(2, 3);
/* Clear this thread's last error (at the start of a public call that succeeds). */
void cosy_err_clear(void);

/* Copy a caller's versioned struct into dst (the library's own size own_size): copies
 * min(caller, own) bytes, zero-fills the rest. Fails with COSY_ERR_STRUCT_SIZE when the caller's
 * struct_size is below min_size (the first published size) or when the caller's struct is larger
 * than ours and holds a non-zero byte beyond own_size. `what` names the struct in the message. */
cosy_status cosy_struct_in(void *dst, size_t own_size, const void *src, size_t min_size,
                           const char *what);

/* malloc/calloc/realloc/strdup that never return NULL silently: they set the error
 * (COSY_ERR_NO_MEMORY) and return NULL. Every host allocation of the library goes through these
 * (free() releases them), so that a fault-injection build can make any one of them fail.
 * cosy_realloc(p, n) keeps p on failure, as realloc does. */
void *cosy_malloc(size_t n);
void *cosy_calloc(size_t n, size_t size);
void *cosy_realloc(void *p, size_t n);
char *cosy_strdup(const char *s);

/* Allocation fault injection (compiled with -DCOSY_FAULT_INJECTION, which the Makefile sets in
 * its SAN=1 builds; tests/test_fault.c). Each call of the four functions above counts as one
 * allocation, on any thread.
 *   cosy_fault_arm(n)   reset the count; the n-th allocation from now fails (once, as if the
 *                       system were out of memory); n = 0: none fails, only count
 *   cosy_fault_calls()  allocations counted since the last cosy_fault_arm
 *   cosy_fault_fired()  1 once the armed allocation has failed
 *   cosy_fault_sites(addr, first, cap)  the distinct call sites seen since the last arm (the
 *                       return address of each allocation's caller, and the index, from 1, of
 *                       its first allocation); returns how many (at most cap are written)
 *   cosy_fault_failed_site()  the call site of the allocation that failed (NULL if none)
 * Without COSY_FAULT_INJECTION cosy_fault_enabled() is 0 and the others do nothing. */
int cosy_fault_enabled(void);
void cosy_fault_arm(long long n);
long long cosy_fault_calls(void);
int cosy_fault_fired(void);
int cosy_fault_sites(const void **addr, long long *first, int cap);
const void *cosy_fault_failed_site(void);

/* Work counters of this thread, for tests that check the cost of an input by counting its work
 * instead of timing it (tests/test_edges.c): the library only ever adds to them, a test reads
 * them before and after a call on the same thread.
 *   text_scan  bytes the text-streaming code (lib/textstream.c) examined, copied or committed
 *   ccc_ops    comparisons and moves of the tokenizer's canonical ordering (lib/tokenizer.c) */
typedef struct cosy_work_counters {
  uint64_t text_scan;
  uint64_t ccc_ops;
} cosy_work_counters;
extern _Thread_local cosy_work_counters cosy_work;

/* Overflow-checked size arithmetic: returns 0 and sets *out on success, -1 on overflow. */
int cosy_mul_size(size_t a, size_t b, size_t *out);

/* Number of CPUs this process may run on (its affinity mask; at least 1). lib/parallel.c */
int cosy_cpu_count(void);
/* Run fn(arg, i, n) for i = 0 .. n-1 (n at most 256): i = 0 on the calling thread, the others on
 * threads started for this call; an index whose thread cannot be started runs on the calling
 * thread. Returns when every index is done. */
void cosy_parallel(int n, void (*fn)(void *arg, int i, int n), void *arg);

/* Monotonic clock in seconds. */
double cosy_now(void);

/* Check that s is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). Returns the byte offset
 * of the first bad byte, or -1 when valid. */
long cosy_utf8_invalid_at(const char *s, size_t n);

#endif
