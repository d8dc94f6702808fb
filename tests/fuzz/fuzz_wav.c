/* fuzz_wav.c - libFuzzer target: the WAV reader (lib/audio.c cosy_wav_read) on arbitrary bytes,
 * through a real file descriptor. (fuzz_mel gives what reads on to cosy_audio_to_mel.)
 *
 * Checks: a failed read leaves *pcm NULL and *n 0 with a documented status; a read gives a buffer
 * of *n >= 0 samples (each is read here, so a short buffer is an ASan report) and a rate >= 1. */
#include "fuzz_common.h"

#include "audio.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = fuzz_memfile(data, size, path);
  if (fd < 0) return 0;
  float *pcm = NULL;
  int64_t n = -1;
  int32_t rate = 0;
  cosy_status st = cosy_wav_read(path, &pcm, &n, &rate);
  close(fd);
  if (st != COSY_OK) {
    FUZZ_CHECK(pcm == NULL && n == 0, "failed read returned samples");
    FUZZ_CHECK(st == COSY_ERR_MODEL_FORMAT || st == COSY_ERR_UNSUPPORTED || st == COSY_ERR_IO ||
                   st == COSY_ERR_NO_MEMORY,
               "unexpected status %d: %s", st, cosy_last_error());
    return 0;
  }
  FUZZ_CHECK(pcm != NULL && n >= 0 && rate >= 1, "n %lld rate %d", (long long)n, rate);
  FUZZ_CHECK((size_t)n <= size, "%lld samples from %zu bytes", (long long)n, size);
  volatile float sink = 0;
  for (int64_t i = 0; i < n; i++) sink += pcm[i];
  (void)sink;
  free(pcm);
  return 0;
}
