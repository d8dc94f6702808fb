/* fuzz_wav.c - libFuzzer target: the WAV reader (lib/audio.c cosy_wav_read) on arbitrary bytes,
 * through a real file descriptor; audio that reads is then given to the public
 * cosy_audio_to_mel (resampling and the prompt mel) when its rate is one that call accepts.
 *
 * Checks: a read gives *n >= 0 samples and a rate >= 1; integer PCM decodes into [-1, 1];
 * cosy_audio_to_mel gives floor(n_24k / 480) frames of finite values, or a clean error. */
#include "fuzz_common.h"

#include <math.h>

#include "audio.h"
#include "util.h"

/* longest audio handed to cosy_audio_to_mel (keeps an execution cheap) */
#define FUZZ_MEL_MAX_SAMPLES 20000

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
  int finite = 1;
  for (int64_t i = 0; i < n; i++) finite &= isfinite(pcm[i]) != 0;
  if (finite && n > 0 && n <= FUZZ_MEL_MAX_SAMPLES && rate >= 16000 && rate <= 192000) {
    float *mel = NULL;
    int32_t frames = -1;
    st = cosy_audio_to_mel(pcm, n, rate, &mel, &frames);
    if (st == COSY_OK) {
      int64_t n24 = cosy_resample_length(n, rate, 24000);
      FUZZ_CHECK(frames == n24 / 480, "%d frames for %lld samples at 24 kHz", frames,
                 (long long)n24);
      for (int64_t i = 0; i < (int64_t)frames * 80; i++)
        FUZZ_CHECK(isfinite(mel[i]), "mel value %lld is %g", (long long)i, (double)mel[i]);
      free(mel);
    } else {
      FUZZ_CHECK(mel == NULL, "failed mel returned memory");
      FUZZ_CHECK(st == COSY_ERR_INVALID_ARG, "cosy_audio_to_mel: %d: %s", st, cosy_last_error());
    }
  }
  free(pcm);
  return 0;
}
