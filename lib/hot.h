/* hot.h - the CPU reference's innermost loops under the sanitizers.
 *
 * AddressSanitizer, UBSan and ThreadSanitizer check every load and store, and their checks stop
 * the compiler from vectorizing: the dense loops of the CPU reference (the flow's linear layers and
 * attention, the vocoder's convolutions, the LLM's matmul) ran ~30x slower than in the plain build,
 * and the sanitizer runs of the test suite took most of CI's time in them.
 *
 * A function marked COSY_HOT is compiled without per-access checks in the sanitizer builds
 * (SAN=1 / SAN=thread define COSY_SANITIZE); in exchange it states its whole footprint once per
 * call: cosy_san_read(p, bytes) / cosy_san_write(p, bytes) for every region it reads or writes
 * (for a strided matrix, first element to one past the last). AddressSanitizer then reports a
 * region that is not entirely addressable (out of bounds, freed), and ThreadSanitizer records the
 * region as read or written by this thread, so a race on it is still found. What is lost: an
 * access outside the stated footprint but inside the same buffer (such an index error changes the
 * numbers, which the reference tests compare with the official outputs). Model weights are
 * stated with cosy_san_weights: checked by AddressSanitizer, not recorded by ThreadSanitizer
 * (they are written once, at load, before any thread reads them; recording every weight read cost
 * about as much as the loops themselves). In plain builds the marks compile to nothing. */
#ifndef COSY_HOT_H
#define COSY_HOT_H

#include <stddef.h>
#include <stdint.h>

/* GCC defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang answers __has_feature */
#if defined(__SANITIZE_ADDRESS__)
#  define COSY_HOT_ASAN 1
#elif defined(__SANITIZE_THREAD__)
#  define COSY_HOT_TSAN 1
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define COSY_HOT_ASAN 1
#  elif __has_feature(thread_sanitizer)
#    define COSY_HOT_TSAN 1
#  endif
#endif

#if defined(COSY_SANITIZE) && defined(__GNUC__)
#  include <stdio.h>
#  include <stdlib.h>
#  define COSY_HOT __attribute__((no_sanitize("address", "thread", "undefined")))
#  if defined(COSY_HOT_ASAN)
#    include <sanitizer/asan_interface.h>
static inline void cosy_san_region(const void *p, size_t n, const char *what) {
  void *bad = n ? __asan_region_is_poisoned((void *)(uintptr_t)p, n) : NULL;
  if (!bad) return;
  fprintf(stderr, "cosy hot loop: %s of %zu bytes at %p: byte %p is not addressable\n", what, n,
          p, bad);
  __asan_describe_address(bad);
  __sanitizer_print_stack_trace();
  abort();
}
#    define cosy_san_read(p, n) cosy_san_region((p), (n), "read")
#    define cosy_san_write(p, n) cosy_san_region((p), (n), "write")
#    define cosy_san_weights(p, n) cosy_san_region((p), (n), "weight read")
#  elif defined(COSY_HOT_TSAN)
void __tsan_read_range(void *addr, unsigned long size);
void __tsan_write_range(void *addr, unsigned long size);
#    define cosy_san_read(p, n) __tsan_read_range((void *)(uintptr_t)(p), (unsigned long)(n))
#    define cosy_san_write(p, n) __tsan_write_range((void *)(uintptr_t)(p), (unsigned long)(n))
#  endif
#else
#  define COSY_HOT
#endif
/* what no sanitizer above defined states nothing */
#ifndef cosy_san_read
#  define cosy_san_read(p, n) ((void)(p), (void)(n))
#  define cosy_san_write(p, n) ((void)(p), (void)(n))
#endif
#ifndef cosy_san_weights
#  define cosy_san_weights(p, n) ((void)(p), (void)(n))
#endif

/* bytes spanned by `rows` rows of `cols` floats `ld` floats apart (0 when empty) */
static inline size_t cosy_span_f32(size_t rows, size_t cols, size_t ld) {
  return rows && cols ? ((rows - 1) * ld + cols) * sizeof(float) : 0;
}

#endif
