/* fuzz_mel.c - libFuzzer target: the public cosy_audio_to_mel (resampling to 24 kHz and the
 * prompt mel) on the audio of arbitrary WAV files (read with cosy_wav_read, like fuzz_wav; the
 * rate and the samples come from the file, so every rate the call accepts is reachable).
 *
 * Checks: finite input in the accepted range gives floor(n_24k / 480) frames of finite values,
 * or COSY_ERR_INVALID_ARG (too short, too loud); nothing else. */
#include "fuzz_common.h"

#include <math.h>

#include "audio.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = fuzz_memfile(data, size, path);
  if (fd < 0) return 0;
  float *pcm = NULL;
  int64_t n = 0;
  int32_t rate = 0;
  cosy_status st = cosy_wav_read(path, &pcm, &n, &rate);
  close(fd);
  if (st != COSY_OK) return 0;
  float *mel = NULL;
  int32_t frames = -1;
  st = cosy_audio_to_mel(pcm, n, rate, &mel, &frames);
  int ok_input = n > 0 && rate >= 16000 && rate <= 192000;
  for (int64_t i = 0; i < n && ok_input; i++) ok_input = isfinite(pcm[i]) != 0;
  if (st == COSY_OK) {
    FUZZ_CHECK(ok_input, "accepted %lld samples at %d Hz with a bad argument", (long long)n, rate);
    int64_t n24 = rate == 24000 ? n : cosy_resample_length(n, rate, 24000);
    FUZZ_CHECK(frames == n24 / 480, "%d frames for %lld samples at 24 kHz", frames,
               (long long)n24);
    for (int64_t i = 0; i < (int64_t)frames * 80; i++)
      FUZZ_CHECK(isfinite(mel[i]), "mel value %lld is %g", (long long)i, (double)mel[i]);
    free(mel);
  } else {
    FUZZ_CHECK(mel == NULL && frames == 0, "failed call returned a mel");
    FUZZ_CHECK(st == COSY_ERR_INVALID_ARG || st == COSY_ERR_NO_MEMORY, "status %d: %s", st,
               cosy_last_error());
  }
  free(pcm);
  return 0;
}
