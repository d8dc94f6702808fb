/* fuzz_tokenizer.c - libFuzzer target: the text tokenizer (lib/tokenizer.c cosy_tokenize) on
 * arbitrary bytes, with the tokenizer of the model fuzz_model_path() names (the demo model by
 * default; `make fuzz` passes the converted golden model's full Qwen2 vocabulary when it exists).
 *
 * Checks: valid UTF-8 gives COSY_OK and ids in [0, n_tokens); invalid UTF-8 gives COSY_ERR_TEXT;
 * and for ASCII input (where NFC changes nothing) the ids decode back to exactly the input bytes
 * (special tokens decode to themselves, BPE tokens through the GPT-2 byte mapping). */
#include "fuzz_common.h"

#include "model.h"
#include "tokenizer.h"
#include "util.h"

static cosy_model *g_model;
static cosy_tokenizer *g_tok;
static int g_byte_of[512]; /* GPT-2 byte-level code point (< 512) -> byte */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *path = fuzz_model_path();
  FUZZ_CHECK(cosy_model_load(path, &g_model) == COSY_OK, "%s", cosy_last_error());
  FUZZ_CHECK(cosy_tokenizer_create(g_model, &g_tok) == COSY_OK, "%s", cosy_last_error());
  /* the GPT-2 byte -> code point table (printable Latin-1 maps to itself) */
  for (int i = 0; i < 512; i++) g_byte_of[i] = -1;
  int extra = 0;
  for (int b = 0; b < 256; b++) {
    int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    g_byte_of[keep ? b : 256 + extra++] = b;
  }
  return 0;
}

/* Append the bytes token id stands for to out (byte-level decode); -1 if it cannot be decoded. */
static int decode_token(int32_t id, uint8_t *out, size_t cap, size_t *n) {
  const gguf_str *s = &g_model->tokens[id];
  if (g_model->token_types[id] == 3 || g_model->token_types[id] == 4) {
    if (*n + s->n > cap) return -1;
    memcpy(out + *n, s->p, (size_t)s->n);
    *n += (size_t)s->n;
    return 0;
  }
  const uint8_t *p = (const uint8_t *)s->p;
  for (uint64_t i = 0; i < s->n;) {
    uint32_t cp;
    if (p[i] < 0x80) cp = p[i++];
    else if ((p[i] & 0xE0) == 0xC0 && i + 1 < s->n) {
      cp = ((uint32_t)(p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F);
      i += 2;
    } else return -1;
    if (cp >= 512 || g_byte_of[cp] < 0 || *n >= cap) return -1;
    out[(*n)++] = (uint8_t)g_byte_of[cp];
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int32_t *ids = NULL, n = -1;
  cosy_status st = cosy_tokenize(g_tok, (const char *)data, size, &ids, &n);
  int valid = cosy_utf8_invalid_at((const char *)data, size) < 0;
  if (!valid) {
    FUZZ_CHECK(st == COSY_ERR_TEXT && ids == NULL && n == 0, "invalid UTF-8: status %d", st);
    return 0;
  }
  FUZZ_CHECK(st == COSY_OK && ids != NULL, "valid UTF-8: status %d: %s", st, cosy_last_error());
  int ascii = 1;
  for (size_t i = 0; i < size; i++) ascii &= data[i] < 0x80;
  /* every id covers at least one byte of the NFC text, and NFC can make text longer (U+FB44
   * becomes U+05E4 U+05BC: 3 bytes -> 4) but never more than 3 times (Unicode's stability
   * bound on NFC's expansion); ASCII is left as it is */
  FUZZ_CHECK(n >= 0 && (size_t)n <= (ascii ? size : 3 * size), "%d ids for %zu bytes", n, size);
  for (int32_t i = 0; i < n; i++)
    FUZZ_CHECK(ids[i] >= 0 && ids[i] < cosy_tokenizer_n_tokens(g_tok), "id %d", ids[i]);
  if (ascii) {
    uint8_t *back = (uint8_t *)malloc(size + 1);
    size_t nb = 0;
    for (int32_t i = 0; i < n; i++)
      FUZZ_CHECK(decode_token(ids[i], back, size, &nb) == 0, "token %d does not decode within "
                 "the input's length", ids[i]);
    FUZZ_CHECK(nb == size && memcmp(back, data, size) == 0, "ASCII text does not round-trip");
    free(back);
  }
  free(ids);
  return 0;
}
