/* fuzz_gguf.c - libFuzzer target: the GGUF reader (lib/gguf.c) on arbitrary bytes.
 *
 * The input is parsed as a whole file (gguf_parse on the exact bytes, so a read past the end is
 * an ASan report). A file that parses must then be consistent: every key and tensor can be
 * found by its name, every typed getter either fails cleanly or returns views inside the input,
 * and every tensor's data lies inside the input. */
#include "fuzz_common.h"

#include "gguf.h"

static void check_inside(const uint8_t *buf, size_t size, const void *p, size_t n,
                         const char *what) {
  const uint8_t *q = (const uint8_t *)p;
  FUZZ_CHECK(q >= buf && n <= size && (size_t)(q - buf) <= size - n,
             "%s [%p, +%zu) is outside the input [%p, +%zu)", what, p, n, (const void *)buf, size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gguf_file *f = NULL;
  cosy_status st = gguf_parse(data, size, "fuzz", &f);
  if (st != COSY_OK) {
    FUZZ_CHECK(f == NULL, "failed parse returned a file");
    FUZZ_CHECK(st == COSY_ERR_MODEL_FORMAT || st == COSY_ERR_MODEL_VERSION ||
                   st == COSY_ERR_NO_MEMORY,
               "unexpected status %d", st);
    return 0;
  }
  volatile uint32_t sink = 0;
  /* lookups by name are linear, so only the first 1000 keys and tensors are looked up (a file
   * of 100000 keys would otherwise cost 10^10 compares here) */
  for (uint64_t i = 0; i < f->n_kv && i < 1000; i++) {
    const gguf_kv *kv = &f->kv[i];
    FUZZ_CHECK(gguf_find_kv(f, kv->key) == kv, "key %s is not found by its name", kv->key);
    uint32_t u;
    float x;
    gguf_str s;
    if (gguf_get_u32(f, kv->key, &u) == COSY_OK) sink += u;
    if (gguf_get_f32(f, kv->key, &x) == COSY_OK) sink += (uint32_t)(x == x);
    if (gguf_get_str(f, kv->key, &s) == COSY_OK) {
      check_inside(data, size, s.p, (size_t)s.n, "string value");
      if (s.n) sink += (uint8_t)s.p[s.n - 1];
    }
    uint32_t arr[8];
    uint64_t n = 0;
    if (gguf_get_arr_u32(f, kv->key, arr, 8, &n) == COSY_OK) {
      FUZZ_CHECK(n == kv->n, "array length");
      if (n) check_inside(data, size, kv->data, (size_t)n * 4, "u32 array");
      sink += n ? arr[0] : 0;
    }
    if (kv->type == GGUF_T_ARRAY && kv->arr_type == GGUF_T_STRING) {
      uint64_t cap = kv->n < 4096 ? kv->n : 4096;
      gguf_str *v = (gguf_str *)calloc(cap ? cap : 1, sizeof *v);
      if (v && gguf_get_arr_str(f, kv->key, v, cap, &n) == COSY_OK) {
        FUZZ_CHECK(n == kv->n, "string array length");
        for (uint64_t j = 0; j < cap; j++) {
          check_inside(data, size, v[j].p, (size_t)v[j].n, "string array element");
          if (v[j].n) sink += (uint8_t)v[j].p[0];
        }
      }
      free(v);
    }
  }
  for (uint64_t i = 0; i < f->n_tensors; i++) {
    const gguf_tensor *t = &f->tensors[i];
    if (i < 1000)
      FUZZ_CHECK(gguf_find_tensor(f, t->name) == t, "tensor %s is not found by its name",
                 t->name);
    FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS, "tensor %s: %u dims", t->name,
               t->n_dims);
    size_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) nel *= (size_t)t->ne[d];
    FUZZ_CHECK(gguf_type_size(t->type) && nel * gguf_type_size(t->type) == t->nbytes,
               "tensor %s: %zu bytes for %zu elements of %s", t->name, t->nbytes, nel,
               gguf_type_name(t->type));
    check_inside(data, size, t->data, t->nbytes, "tensor data");
    const uint8_t *p = (const uint8_t *)t->data;
    sink += p[0] + p[t->nbytes - 1];
  }
  (void)sink;
  gguf_close(f);
  return 0;
}
