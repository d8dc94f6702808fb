/* fuzz_text.c - libFuzzer target: text normalization and splitting (lib/text/normalize.c
 * cosy_text_normalize / cosy_text_split: the wetext grammars of the model (FST rewrites), the
 * number spelling, split_paragraph) on arbitrary bytes, with the grammars and tokenizer of the
 * model fuzz_model_path() names (the demo model by default; it carries the grammars when
 * tools/make_model.py found the wetext wheel, else the normalizer is the minimal one).
 *
 * Checks: invalid UTF-8 gives COSY_ERR_TEXT; valid text gives COSY_OK, and the normalized text
 * and every split segment are NUL-terminated valid UTF-8. */
#include "fuzz_common.h"

#include "model.h"
#include "text/normalize.h"
#include "tokenizer.h"
#include "util.h"

static cosy_model *g_model;
static cosy_tokenizer *g_tok;
static cosy_text_norm *g_tn;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  FUZZ_CHECK(cosy_model_load(fuzz_model_path(), &g_model) == COSY_OK, "%s", cosy_last_error());
  FUZZ_CHECK(cosy_tokenizer_create(g_model, &g_tok) == COSY_OK, "%s", cosy_last_error());
  FUZZ_CHECK(cosy_text_norm_create(g_model->f, g_tok, &g_tn) == COSY_OK, "%s", cosy_last_error());
  fprintf(stderr, "fuzz_text: %s normalizer\n", cosy_text_norm_is_full(g_tn) ? "full" : "minimal");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = (char *)malloc(size + 1);
  memcpy(text, data, size);
  text[size] = '\0';
  size_t n = strlen(text); /* the C API takes NUL-terminated text */
  int valid = cosy_utf8_invalid_at(text, n) < 0;
  char *out = NULL;
  cosy_status st = cosy_text_normalize(g_tn, text, 0, &out);
  if (!valid) {
    FUZZ_CHECK(st == COSY_ERR_TEXT && out == NULL, "invalid UTF-8: status %d", st);
  } else {
    FUZZ_CHECK(st == COSY_OK && out != NULL, "normalize: %d: %s", st, cosy_last_error());
    FUZZ_CHECK(cosy_utf8_invalid_at(out, strlen(out)) < 0, "normalized text is not UTF-8");
    free(out);
    char **seg = NULL;
    int ns = -1;
    st = cosy_text_split(g_tn, text, 0, &seg, &ns);
    FUZZ_CHECK(st == COSY_OK && ns >= 0, "split: %d: %s", st, cosy_last_error());
    for (int i = 0; i < ns; i++)
      FUZZ_CHECK(seg[i] && cosy_utf8_invalid_at(seg[i], strlen(seg[i])) < 0,
                 "segment %d is not UTF-8", i);
    cosy_text_segments_free(seg, ns);
  }
  free(text);
  return 0;
}
