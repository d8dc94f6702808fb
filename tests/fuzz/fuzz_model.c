/* fuzz_model.c - libFuzzer target: model validation (lib/model.c) and the tokenizer's
 * construction from a model (cosy_tokenizer_create) on arbitrary GGUF headers.
 *
 * A model file is megabytes of tensor data behind a header of a few tens of kB, and validation
 * reads only the header (hyperparameters, tokenizer arrays, the tensor table). So the input is
 * the header: it is placed at the start of a zero-filled buffer of FUZZ_MODEL_BYTES, which stands
 * for the data section (a tensor that fits there is "present"). Reads past the header land in
 * the zeros, not past the allocation, so this target does not look for overreads of the header
 * itself: fuzz_gguf does, on exact-size inputs. A model that validates must also give a
 * tokenizer or a clean COSY_ERR_MODEL_FORMAT, and that tokenizer must tokenize. */
#include "fuzz_common.h"

#include "gguf.h"
#include "model.h"
#include "tokenizer.h"

/* room for the demo model's data (13 MB; see tools/make_model.py --preset demo) */
#define FUZZ_MODEL_BYTES ((size_t)24 << 20)

static uint8_t *g_buf;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FUZZ_MODEL_BYTES) return 0;
  if (!g_buf) {
    /* anonymous pages read as zero and cost nothing until written */
    g_buf = (uint8_t *)mmap(NULL, FUZZ_MODEL_BYTES, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FUZZ_CHECK(g_buf != MAP_FAILED, "mmap");
  }
  memcpy(g_buf, data, size);
  gguf_file *f = NULL;
  cosy_status st = gguf_parse(g_buf, FUZZ_MODEL_BYTES, "fuzz", &f);
  if (st == COSY_OK) {
    cosy_model *m = NULL;
    st = cosy_model_from_gguf(f, &m); /* takes f */
    if (st == COSY_OK) {
      FUZZ_CHECK(m->hp.n_tokens >= 256 && m->hp.n_tokens <= m->hp.text_vocab, "n_tokens %d",
                 m->hp.n_tokens);
      cosy_tokenizer *t = NULL;
      st = cosy_tokenizer_create(m, &t);
      FUZZ_CHECK(st == COSY_OK || st == COSY_ERR_MODEL_FORMAT || st == COSY_ERR_NO_MEMORY,
                 "tokenizer status %d", st);
      if (st == COSY_OK) {
        static const char *texts[] = {"Hello, world! It's 42.", "<|endofprompt|>[breath] \r\n x",
                                      "\xe4\xbd\xa0\xe5\xa5\xbd  \t", ""};
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
          int32_t *ids = NULL, n = 0;
          st = cosy_tokenize(t, texts[i], strlen(texts[i]), &ids, &n);
          FUZZ_CHECK(st == COSY_OK, "tokenize: %d", st);
          for (int32_t k = 0; k < n; k++)
            FUZZ_CHECK(ids[k] >= 0 && ids[k] < cosy_tokenizer_n_tokens(t), "id %d", ids[k]);
          free(ids);
        }
        cosy_tokenizer_free(t);
      }
      cosy_model_free(m);
    } else {
      FUZZ_CHECK(m == NULL, "failed validation returned a model");
    }
  }
  memset(g_buf, 0, size);
  return 0;
}
