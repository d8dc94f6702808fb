/* fuzz_common.h - helpers shared by the libFuzzer targets in tests/fuzz/ (see README.md there).
 *
 * The readers under test take a path (cosy_wav_read, voice files through gguf_open's mmap), so a
 * target writes its input to an anonymous in-memory file (memfd) and passes /proc/self/fd/N:
 * the library then runs exactly the code a caller's file would reach, open() and mmap() included,
 * without touching the disk. */
#ifndef COSY_FUZZ_COMMON_H
#define COSY_FUZZ_COMMON_H

#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* the libFuzzer entry points (declared here for -Wmissing-prototypes) */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Abort with a message: libFuzzer reports it as a crash and saves the input. Used for the
 * targets' own checks (a wrong result is a finding like a sanitizer report). */
#define FUZZ_CHECK(cond, ...)                                              \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, "\n");                                               \
      abort();                                                             \
    }                                                                      \
  } while (0)

/* An in-memory file holding data[0..size): its path is written to path (>= 64 bytes).
 * Returns the descriptor (close it after use), or -1. */
static inline int fuzz_memfile(const uint8_t *data, size_t size, char *path) {
  int fd = memfd_create("cosy-fuzz", MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < size) {
    ssize_t w = write(fd, data + done, size - done);
    if (w <= 0) {
      close(fd);
      return -1;
    }
    done += (size_t)w;
  }
  snprintf(path, 64, "/proc/self/fd/%d", fd);
  return fd;
}

/* The model a target loads once at start: $COSY_FUZZ_MODEL, else the demo model that
 * `make fuzz` writes (FUZZ_DEFAULT_MODEL is set by tests/fuzz/fuzz.mk). */
static inline const char *fuzz_model_path(void) {
  const char *p = getenv("COSY_FUZZ_MODEL");
  if (p && p[0]) return p;
#ifdef FUZZ_DEFAULT_MODEL
  return FUZZ_DEFAULT_MODEL;
#else
  return "build/fuzz/demo/demo.gguf";
#endif
}

static inline const char *fuzz_voice_path(void) {
  const char *p = getenv("COSY_FUZZ_VOICE");
  if (p && p[0]) return p;
#ifdef FUZZ_DEFAULT_VOICE
  return FUZZ_DEFAULT_VOICE;
#else
  return "build/fuzz/demo/demo-voice.gguf";
#endif
}

#endif
