/* fuzz_voice.c - libFuzzer target: the voice-file reader (lib/voice.c voice_load_file, the code
 * behind cosy_voice_load) on arbitrary bytes, through a real file descriptor and mmap.
 *
 * A voice that loads must be usable: tokens in [0, 6561), a finite prompt mel for every token,
 * a finite non-zero speaker embedding, a NUL-free UTF-8 prompt text. It is then saved with
 * voice_save_file and loaded again, and must come back identical. */
#include "fuzz_common.h"

#include <math.h>

#include "engine.h"
#include "util.h"

static struct cosy_engine g_engine; /* voices only remember their engine */
static char g_dir[256];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/cosy-fuzz-voice-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  FUZZ_CHECK(mkdtemp(g_dir) != NULL, "mkdtemp %s", g_dir);
  return 0;
}

static void check_voice(const cosy_voice *v) {
  FUZZ_CHECK(v->n_tokens >= 0 && v->n_tokens <= 3000, "n_tokens %d", v->n_tokens);
  for (int i = 0; i < v->n_tokens; i++)
    FUZZ_CHECK(v->speech_tokens[i] >= 0 && v->speech_tokens[i] < 6561, "token %d",
               v->speech_tokens[i]);
  for (int64_t i = 0; i < (int64_t)v->n_tokens * 2 * 80; i++)
    FUZZ_CHECK(isfinite(v->mel[i]), "mel %lld", (long long)i);
  double norm = 0;
  for (int i = 0; i < 192; i++) {
    FUZZ_CHECK(isfinite(v->spk[i]), "spk %d", i);
    norm += (double)v->spk[i] * v->spk[i];
  }
  FUZZ_CHECK(norm > 0, "zero speaker embedding");
  size_t n = strlen(v->prompt_text);
  FUZZ_CHECK(cosy_utf8_invalid_at(v->prompt_text, n) < 0, "prompt text not UTF-8");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = fuzz_memfile(data, size, path);
  if (fd < 0) return 0;
  cosy_voice *v = NULL;
  cosy_status st = voice_load_file(&g_engine, path, &v);
  close(fd);
  if (st != COSY_OK) {
    FUZZ_CHECK(v == NULL, "failed load returned a voice");
    /* bad values in a file are a corrupt file: COSY_ERR_MODEL_FORMAT, never INVALID_ARG */
    FUZZ_CHECK(st == COSY_ERR_MODEL_FORMAT || st == COSY_ERR_MODEL_VERSION ||
                   st == COSY_ERR_NO_MEMORY || st == COSY_ERR_IO,
               "unexpected status %d: %s", st, cosy_last_error());
    return 0;
  }
  check_voice(v);
  /* round trip */
  char out[512];
  snprintf(out, sizeof out, "%s/voice.gguf", g_dir);
  FUZZ_CHECK(voice_save_file(v, out) == COSY_OK, "save: %s", cosy_last_error());
  cosy_voice *w = NULL;
  FUZZ_CHECK(voice_load_file(&g_engine, out, &w) == COSY_OK, "reload: %s", cosy_last_error());
  FUZZ_CHECK(w->n_tokens == v->n_tokens && !strcmp(w->prompt_text, v->prompt_text) &&
                 !memcmp(w->speech_tokens, v->speech_tokens, (size_t)v->n_tokens * 4) &&
                 !memcmp(w->mel, v->mel, (size_t)v->n_tokens * 2 * 80 * 4) &&
                 !memcmp(w->spk, v->spk, sizeof v->spk),
             "the saved voice differs from the loaded one");
  remove(out);
  voice_unref(w);
  voice_unref(v);
  return 0;
}
