/* test_model.c - the model loader (lib/gguf.c + lib/model.c) on the golden small model and on
 * damaged copies of it.
 *
 * The small golden checkpoint converted with f32 weights (tu_small_model()) must load with the
 * golden geometry (tools/make_model.py's "small" preset). Then copies of the file held in
 * memory are damaged and parsed with gguf_parse + cosy_model_from_gguf (never the mmap):
 *   - truncation at >= 200 offsets covering every region (magic, version, counts, the key/value
 *     area incl. the tokenizer arrays, the tensor table, the padding, the data): always
 *     COSY_ERR_MODEL_FORMAT with a message saying "truncated". Each truncated copy of the header
 *     part is its own malloc of exactly that many bytes, so AddressSanitizer sees any read past
 *     the end; cuts inside the data section (which the loader never reads) reuse the full copy
 *     with a smaller size, plus a few exact-size copies;
 *   - wrong magic; GGUF version 2 and 4 and cosyvoice.format_version 2 / 0 ->
 *     COSY_ERR_MODEL_VERSION (magic: COSY_ERR_MODEL_FORMAT);
 *   - flipped bytes (xor 0xff and xor 0x01) over the fixed header, the key/value entries and the
 *     tensor table: no crash, the status is OK, FORMAT or VERSION, and a message when not OK;
 *   - a renamed tensor (missing "llm.norm.weight"), a smaller ne[] (the message names the tensor
 *     and both shapes; a larger one overlaps the next tensor's data and is refused for that), a changed type (F32 -> F16), a tensor offset moved onto its neighbour's
 *     data or off the alignment, absurd string lengths and counts.
 * The layout (where each key, value and tensor-info field lies) is found by a small walker
 * written here, independent of lib/gguf.c. Correctness only; nothing is timed.
 * Also: a GGUF of 20000 keys and 20000 tensors with one repeated name anywhere -> refused (and
 * without one it parses); cosy_engine_create with a missing model path -> COSY_ERR_IO. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cosyvoice.h"
#include "gguf.h"
#include "model.h"
#include "testutil.h"

/* ---- the file in memory and its layout ---------------------------------------------------- */

typedef struct tinfo {
  size_t name_len_off; /* u64 length of the name */
  size_t name_off;     /* first byte of the name */
  size_t ne_off;       /* ne[0] */
  uint32_t n_dims;
  size_t type_off, offset_off, end;
} tinfo;

typedef struct layout {
  size_t kv_start, kv_end;        /* key/value area */
  size_t tab_start, tab_end;      /* tensor infos */
  size_t data_offset;
  size_t fmt_value_off;           /* u32 value of cosyvoice.format_version */
  size_t name_value_len_off;      /* u64 length of the general.name value */
  size_t first_token_len_off;     /* u64 length of tokenizer.ggml.tokens[0] */
  size_t tokens_start, tokens_end, merges_start, merges_end; /* the big string arrays */
  size_t small_kv_off[128];       /* start of each key/value entry that is not a big array */
  size_t small_kv_end[128];
  int n_small_kv;
  tinfo norm, up, first;          /* llm.norm.weight, llm.layers.0.mlp.up_proj.weight, #0 */
  size_t tinfo_off[1024];
  int n_tinfo;
} layout;

static uint8_t *g_file;   /* pristine copy */
static uint8_t *g_work;   /* scratch copy, restored after each change */
static size_t g_size;
static layout g_lay;

static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

static size_t scalar_bytes(uint32_t t) {
  static const size_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return t < 13 ? sz[t] : 0;
}

/* walk a valid file; returns 0 on success */
static int walk(const uint8_t *b, size_t n, layout *L) {
  memset(L, 0, sizeof *L);
  if (n < 24 || memcmp(b, "GGUF", 4)) return -1;
  uint64_t nt = rd64(b + 8), nkv = rd64(b + 16);
  size_t p = 24;
  L->kv_start = p;
  for (uint64_t i = 0; i < nkv; i++) {
    size_t start = p;
    uint64_t kl = rd64(b + p);
    char key[300] = {0};
    if (kl >= sizeof key || p + 8 + kl + 4 > n) return -1;
    memcpy(key, b + p + 8, kl);
    p += 8 + kl;
    uint32_t t = rd32(b + p);
    p += 4;
    int big = 0;
    if (t == GGUF_T_STRING) {
      if (!strcmp(key, "general.name")) L->name_value_len_off = p;
      p += 8 + rd64(b + p);
    } else if (t == GGUF_T_ARRAY) {
      uint32_t et = rd32(b + p);
      uint64_t cnt = rd64(b + p + 4);
      p += 12;
      if (!strcmp(key, "tokenizer.ggml.tokens")) {
        L->first_token_len_off = p;
        L->tokens_start = start;
      }
      if (!strcmp(key, "tokenizer.ggml.merges")) L->merges_start = start;
      for (uint64_t j = 0; j < cnt; j++) {
        if (et == GGUF_T_STRING) {
          if (p + 8 > n) return -1;
          p += 8 + rd64(b + p);
        } else {
          p += scalar_bytes(et);
        }
        if (p > n) return -1;
      }
      if (!strcmp(key, "tokenizer.ggml.tokens")) L->tokens_end = p;
      if (!strcmp(key, "tokenizer.ggml.merges")) L->merges_end = p;
      big = cnt > 16;
    } else {
      if (!strcmp(key, "cosyvoice.format_version")) L->fmt_value_off = p;
      p += scalar_bytes(t);
    }
    if (p > n) return -1;
    if (!big && L->n_small_kv < 128) {
      L->small_kv_off[L->n_small_kv] = start;
      L->small_kv_end[L->n_small_kv++] = p;
    }
  }
  L->kv_end = L->tab_start = p;
  for (uint64_t i = 0; i < nt; i++) {
    tinfo ti;
    ti.name_len_off = p;
    uint64_t nl = rd64(b + p);
    if (nl > 256 || p + 8 + nl + 4 > n) return -1;
    ti.name_off = p + 8;
    char name[300] = {0};
    memcpy(name, b + p + 8, nl);
    p += 8 + nl;
    ti.n_dims = rd32(b + p);
    p += 4;
    ti.ne_off = p;
    p += 8 * (size_t)ti.n_dims;
    ti.type_off = p;
    ti.offset_off = p + 4;
    p += 12;
    ti.end = p;
    if (p > n) return -1;
    if (L->n_tinfo < 1024) L->tinfo_off[L->n_tinfo++] = ti.name_len_off;
    if (i == 0) L->first = ti;
    if (!strcmp(name, "llm.norm.weight")) L->norm = ti;
    if (!strcmp(name, "llm.layers.0.mlp.up_proj.weight")) L->up = ti;
  }
  L->tab_end = p;
  L->data_offset = (p + 31) / 32 * 32;
  return L->norm.name_off && L->up.name_off && L->fmt_value_off && L->first_token_len_off ? 0 : -1;
}

static int setup(void **state) {
  (void)state;
  const char *path = tu_small_model();
  if (!path) return 0;
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  g_file = (uint8_t *)malloc((size_t)n);
  g_work = (uint8_t *)malloc((size_t)n);
  if (!g_file || !g_work || fread(g_file, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    return -1;
  }
  fclose(f);
  g_size = (size_t)n;
  memcpy(g_work, g_file, g_size);
  if (walk(g_file, g_size, &g_lay)) {
    fprintf(stderr, "test_model: cannot walk %s\n", path);
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  free(g_file);
  free(g_work);
  return 0;
}

/* every damaging test starts from a pristine header (a failed assertion leaves its damage) */
#define NEED_FILE()                                                                      \
  do {                                                                                   \
    TU_REQUIRE(g_file != NULL, "small model not built (make build/test/small-f32.gguf)"); \
    memcpy(g_work, g_file, g_lay.data_offset);                                           \
  } while (0)

/* parse + validate a buffer; frees the model on success */
static cosy_status load_buf(const uint8_t *buf, size_t n) {
  gguf_file *f = NULL;
  cosy_status st = gguf_parse(buf, n, "model", &f);
  if (st) {
    assert_null(f);
    return st;
  }
  cosy_model *m = NULL;
  st = cosy_model_from_gguf(f, &m);
  if (st) {
    assert_null(m);
    return st;
  }
  assert_non_null(m);
  cosy_model_free(m);
  return COSY_OK;
}

static void restore(size_t off, size_t n) { memcpy(g_work + off, g_file + off, n); }

static const char *msg(void) {
  const char *e = cosy_last_error();
  return e ? e : "";
}

/* ---- the good file ------------------------------------------------------------------------- */

static void test_load_small(void **state) {
  (void)state;
  const char *path = tu_small_model();
  TU_REQUIRE(path != NULL, "small model not built (make build/test/small-f32.gguf)");
  cosy_model *m = NULL;
  cosy_status st = cosy_model_load(path, &m);
  if (st) print_message("load: %s\n", msg());
  assert_int_equal(st, COSY_OK);
  const cosy_hparams *h = &m->hp;
  assert_int_equal(h->llm_hidden, 128);
  assert_int_equal(h->llm_layers, 2);
  assert_int_equal(h->llm_heads, 2);
  assert_int_equal(h->llm_kv_heads, 1);
  assert_int_equal(h->llm_head_dim, 64);
  assert_int_equal(h->llm_inter, 384);
  assert_int_equal(h->text_vocab, 151936);
  assert_int_equal(h->speech_vocab, 6761);
  assert_int_equal(h->speech_tokens, 6561);
  assert_int_equal(h->pre_channels, 128);
  assert_int_equal(h->dit_dim, 128);
  assert_int_equal(h->dit_depth, 2);
  assert_int_equal(h->dit_heads, 2);
  assert_int_equal(h->dit_ff, 256);
  assert_int_equal(h->conv_pos_kernel, 31);
  assert_int_equal(h->conv_pos_groups, 16);
  assert_int_equal(h->noise_frames, 15000);
  assert_int_equal(h->hift_ch, 64);
  assert_int_equal(h->hift_cond_ch, 64);
  assert_int_equal(h->nb_harmonics, 8);
  assert_int_equal(h->up_rates[0] * h->up_rates[1] * h->up_rates[2] * h->hop, 480);
  assert_int_equal(h->up_kernels[0], 16);
  assert_int_equal(h->n_tokens, 151924);
  assert_int_equal(h->n_merges, 134935);
  assert_int_equal(h->endofprompt_id, 151646);
  assert_int_equal(h->eos_id, 151643);
  assert_int_equal(h->weight_type, GGML_F32);
  assert_true(h->rope_theta == 1e6f && h->rms_eps == 1e-6f && h->cfg_rate == 0.7f);
  assert_int_equal(m->f->n_tensors, 324);
  assert_int_equal(m->token_types[151646], 4);
  assert_int_equal(m->token_types[151643], 3);
  assert_true(m->tokens[151646].n == 15 && !memcmp(m->tokens[151646].p, "<|endofprompt|>", 15));
  /* the flow noise's first values as torch prints them (docs/model-format.md section 6), tolerance 1e-6 */
  float *z = cosy_model_f32(m, "flow.noise");
  assert_non_null(z);
  static const float r0[5] = {-1.1258398f, -1.1523602f, -0.2505786f, -0.4338788f, 0.8487104f};
  double d = tu_max_abs_diff(z, r0, 5);
  print_message("flow.noise[0][:5] vs torch's values: max abs %.2e (tolerance 1e-6)\n", d);
  assert_true(d <= 1e-6);
  free(z);
  assert_null(cosy_model_f32(m, "llm.no_such.weight"));
  assert_int_equal(cosy_model_tensor(m, "llm.norm.weight")->type, GGML_F32);
  cosy_model_free(m);
  /* the in-memory path accepts the pristine copy */
  NEED_FILE();
  assert_int_equal(load_buf(g_file, g_size), COSY_OK);
}

static void test_missing_file(void **state) {
  (void)state;
  cosy_model *m = (cosy_model *)1;
  cosy_status st = cosy_model_load("build/no/such/model.gguf", &m);
  assert_int_equal(st, COSY_ERR_IO);
  assert_null(m);
  assert_non_null(strstr(msg(), "build/no/such/model.gguf"));
  print_message("missing file: %s\n", msg());
}

/* ---- truncation --------------------------------------------------------------------------- */

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

static void check_truncated(size_t cut, int exact_copy) {
  cosy_status st;
  if (exact_copy) {
    uint8_t *b = (uint8_t *)malloc(cut ? cut : 1);
    assert_non_null(b);
    memcpy(b, g_file, cut);
    st = load_buf(b, cut);
    free(b);
  } else {
    st = load_buf(g_file, cut);
  }
  if (st != COSY_ERR_MODEL_FORMAT || !strstr(msg(), "truncated"))
    print_message("cut at %zu of %zu: status %d: %s\n", cut, g_size, st, msg());
  assert_int_equal(st, COSY_ERR_MODEL_FORMAT);
  assert_non_null(strstr(msg(), "truncated"));
}

static void test_truncation(void **state) {
  (void)state;
  NEED_FILE();
  const layout *L = &g_lay;
  size_t cuts[600];
  int n = 0;
  for (size_t i = 0; i <= 40; i++) cuts[n++] = i;                       /* magic .. first key */
  for (int k = 0; k < L->n_small_kv && n < 200; k++) {                  /* each small key/value */
    size_t a = L->small_kv_off[k], b = L->small_kv_end[k];
    cuts[n++] = a + 4;            /* inside the key length */
    cuts[n++] = a + 8 + 3;        /* inside the key */
    cuts[n++] = b - 1;            /* inside the value */
  }
  for (int i = 0; i < 20; i++)                                          /* token and merge arrays */
    cuts[n++] = L->tokens_start + (L->tokens_end - L->tokens_start) * (size_t)i / 20 + 5;
  for (int i = 0; i < 10; i++)
    cuts[n++] = L->merges_start + (L->merges_end - L->merges_start) * (size_t)i / 10 + 7;
  const tinfo *ts[3] = {&L->first, &L->norm, &L->up};                  /* every field of 3 infos */
  for (int j = 0; j < 3; j++) {
    cuts[n++] = ts[j]->name_len_off + 2;
    cuts[n++] = ts[j]->name_off + 1;
    cuts[n++] = ts[j]->ne_off - 2;
    cuts[n++] = ts[j]->ne_off + 5;
    cuts[n++] = ts[j]->type_off + 1;
    cuts[n++] = ts[j]->offset_off + 7;
  }
  for (int i = 0; i < 60; i++)                                          /* across the tensor table */
    cuts[n++] = L->tab_start + (L->tab_end - L->tab_start) * (size_t)i / 60 + 11;
  cuts[n++] = L->tab_end;                                               /* the padding */
  cuts[n++] = L->data_offset - 1;
  cuts[n++] = L->data_offset;
  int first_data = n;
  for (int i = 0; i < 40; i++)                                          /* the data */
    cuts[n++] = L->data_offset + 1 + (g_size - L->data_offset - 1) * (size_t)i / 40;
  cuts[n++] = g_size - 1;
  assert_true(n <= 600);
  qsort(cuts, (size_t)n, sizeof cuts[0], cmp_size);
  int copies = 0, checked = 0;
  for (int i = 0; i < n; i++) {
    if (i && cuts[i] == cuts[i - 1]) continue;
    assert_true(cuts[i] < g_size);
    /* exact-size copies for everything the loader reads, and for every 8th cut in the data */
    int exact = cuts[i] <= L->data_offset + 64 || (i - first_data) % 8 == 0;
    check_truncated(cuts[i], exact);
    copies += exact;
    checked++;
  }
  print_message("%d truncation points (%d as exact-size copies), all COSY_ERR_MODEL_FORMAT "
                "\"truncated\"; e.g. %s\n", checked, copies, msg());
  assert_true(checked >= 200);
}

/* ---- versions and magic -------------------------------------------------------------------- */

static void test_magic_and_versions(void **state) {
  (void)state;
  NEED_FILE();
  g_work[0] = 'X';
  assert_int_equal(load_buf(g_work, g_size), COSY_ERR_MODEL_FORMAT);
  assert_non_null(strstr(msg(), "magic"));
  print_message("magic: %s\n", msg());
  restore(0, 4);
  static const uint32_t vers[] = {2, 4, 0, 0xffffffffu};
  for (int i = 0; i < 4; i++) {
    memcpy(g_work + 4, &vers[i], 4);
    assert_int_equal(load_buf(g_work, g_size), COSY_ERR_MODEL_VERSION);
    assert_non_null(strstr(msg(), "version"));
  }
  print_message("GGUF version: %s\n", msg());
  restore(4, 4);
  static const uint32_t fv[] = {2, 0, 100};
  for (int i = 0; i < 3; i++) {
    memcpy(g_work + g_lay.fmt_value_off, &fv[i], 4);
    assert_int_equal(load_buf(g_work, g_size), COSY_ERR_MODEL_VERSION);
    char want[64];
    snprintf(want, sizeof want, "version %u", fv[i]);
    assert_non_null(strstr(msg(), want));
  }
  print_message("cosyvoice.format_version: %s\n", msg());
  restore(g_lay.fmt_value_off, 4);
  assert_int_equal(load_buf(g_work, g_size), COSY_OK);
}

/* ---- flipped bytes ------------------------------------------------------------------------- */

static int flip_one(size_t off, uint8_t mask, int *n_ok) {
  g_work[off] ^= mask;
  cosy_status st = load_buf(g_work, g_size);
  g_work[off] = g_file[off];
  if (st == COSY_OK) {
    (*n_ok)++;
    return 0;
  }
  if (st != COSY_ERR_MODEL_FORMAT && st != COSY_ERR_MODEL_VERSION)
    print_message("flip 0x%02x at %zu: status %d: %s\n", mask, off, st, msg());
  assert_true(st == COSY_ERR_MODEL_FORMAT || st == COSY_ERR_MODEL_VERSION);
  assert_true(msg()[0] != '\0');
  return 1;
}

static void test_flipped_bytes(void **state) {
  (void)state;
  NEED_FILE();
  const layout *L = &g_lay;
  size_t offs[1200];
  int n = 0;
  for (size_t i = 0; i < 24; i++) offs[n++] = i;                        /* fixed header */
  for (int k = 0; k < L->n_small_kv; k++) {                             /* each small key/value: */
    size_t a = L->small_kv_off[k], b = L->small_kv_end[k];              /* length, key, type, value */
    offs[n++] = a;
    offs[n++] = a + 5;
    offs[n++] = a + 8 + (b - a) / 4;
    offs[n++] = b - 1;
    if (k % 4 == 0)
      for (size_t p = a; p < b && n < 400; p += 3) offs[n++] = p;
  }
  offs[n++] = L->first_token_len_off;                                  /* a token's length */
  offs[n++] = L->first_token_len_off + 1;
  offs[n++] = L->tokens_start + 8 + 21 + 4;                            /* its element type */
  offs[n++] = L->tokens_start + 8 + 21 + 8;                            /* the tokens count */
  for (int i = 0; i < 20; i++)                                          /* inside the big arrays */
    offs[n++] = L->tokens_start + (L->tokens_end - L->tokens_start) * (size_t)i / 20 + 13;
  const tinfo *ts[3] = {&L->first, &L->norm, &L->up};                  /* every byte of 3 infos */
  for (int j = 0; j < 3; j++)
    for (size_t p = ts[j]->name_len_off; p < ts[j]->end && n < 1000; p++) offs[n++] = p;
  for (int i = 0; i < 150 && n < 1200; i++)                             /* across the table */
    offs[n++] = L->tab_start + (L->tab_end - L->tab_start) * (size_t)i / 150 + (size_t)(i * 7 % 23);
  int refused = 0, ok = 0, tried = 0;
  static const uint8_t masks[2] = {0xff, 0x01};
  for (int i = 0; i < n; i++) {
    if (offs[i] >= L->data_offset) continue;
    for (int m = 0; m < 2; m++) {
      refused += flip_one(offs[i], masks[m], &ok);
      tried++;
    }
  }
  print_message("%d flips at %d offsets in the header and tensor table: %d refused with a message, "
                "%d harmless (e.g. inside a token string); no crash\n", tried, n, refused, ok);
  assert_true(refused > tried / 2);
  assert_int_equal(load_buf(g_work, g_size), COSY_OK); /* everything restored */
}

/* ---- targeted damage ----------------------------------------------------------------------- */

static void test_missing_tensor(void **state) {
  (void)state;
  NEED_FILE();
  size_t p = g_lay.norm.name_off + 4; /* "llm.norm.weight": 'n' -> 'm' */
  assert_int_equal(g_work[p], 'n');
  g_work[p] = 'm';
  cosy_status st = load_buf(g_work, g_size);
  print_message("missing tensor: %s\n", msg());
  assert_int_equal(st, COSY_ERR_MODEL_FORMAT);
  assert_non_null(strstr(msg(), "llm.norm.weight"));
  assert_non_null(strstr(msg(), "missing"));
  restore(p, 1);
}

static void test_wrong_shape(void **state) {
  (void)state;
  NEED_FILE();
  /* ne[0] = 128 (the input width) -> 127: smaller, so the data stays clear of the next tensor
   * (a larger one is refused as overlapping before the shapes are compared) */
  size_t p = g_lay.up.ne_off;
  assert_int_equal(g_lay.up.n_dims, 2);
  assert_int_equal(rd64(g_work + p), 128);
  assert_int_equal(rd64(g_work + p + 8), 384);
  uint64_t v = 127;
  memcpy(g_work + p, &v, 8);
  cosy_status st = load_buf(g_work, g_size);
  print_message("wrong shape: %s\n", msg());
  assert_int_equal(st, COSY_ERR_MODEL_FORMAT);
  assert_non_null(strstr(msg(), "llm.layers.0.mlp.up_proj.weight"));
  assert_non_null(strstr(msg(), "384x128"));
  assert_non_null(strstr(msg(), "384x127"));
  restore(p, 8);
  v = 129; /* larger: overlaps the next tensor */
  memcpy(g_work + p, &v, 8);
  assert_int_equal(load_buf(g_work, g_size), COSY_ERR_MODEL_FORMAT);
  assert_non_null(strstr(msg(), "overlaps"));
  restore(p, 8);
  /* one dimension fewer: [384][128] read as [128] */
  uint32_t one = 1;
  memcpy(g_work + g_lay.up.ne_off - 4, &one, 4);
  st = load_buf(g_work, g_size);
  assert_int_not_equal(st, COSY_OK);
  restore(g_lay.up.ne_off - 4, 4);
}

static void test_wrong_dtype(void **state) {
  (void)state;
  NEED_FILE();
  size_t p = g_lay.norm.type_off;
  assert_int_equal(rd32(g_work + p), GGML_F32);
  uint32_t t = GGML_F16;
  memcpy(g_work + p, &t, 4);
  cosy_status st = load_buf(g_work, g_size);
  print_message("wrong dtype: %s\n", msg());
  assert_int_equal(st, COSY_ERR_MODEL_FORMAT);
  assert_non_null(strstr(msg(), "llm.norm.weight"));
  assert_non_null(strstr(msg(), "f16"));
  assert_non_null(strstr(msg(), "f32"));
  t = 2; /* Q4_0: not supported */
  memcpy(g_work + p, &t, 4);
  assert_int_equal(load_buf(g_work, g_size), COSY_ERR_MODEL_FORMAT);
  assert_non_null(strstr(msg(), "llm.norm.weight"));
  restore(p, 4);
}

static void test_overlapping_offsets(void **state) {
  (void)state;
  NEED_FILE();
  size_t p = g_lay.first.offset_off;
  uint64_t old = rd64(g_work + p), v = old + 32; /* still aligned and inside the file */
  memcpy(g_work + p, &v, 8);
  cosy_status st = load_buf(g_work, g_size);
  print_message("offset moved by 32: %s\n", msg());
  assert_int_equal(st, COSY_ERR_MODEL_FORMAT);
  assert_non_null(strstr(msg(), "overlaps"));
  v = old + 16; /* misaligned */
  memcpy(g_work + p, &v, 8);
  assert_int_equal(load_buf(g_work, g_size), COSY_ERR_MODEL_FORMAT);
  assert_non_null(strstr(msg(), "aligned"));
  restore(p, 8);
}

static void test_absurd_lengths(void **state) {
  (void)state;
  NEED_FILE();
  struct { size_t off; uint64_t v; const char *what; } cases[] = {
      {g_lay.kv_start, 1ull << 40, "the first key's length"},
      {g_lay.kv_start, 300, "the first key's length (above the 256-byte name limit)"},
      {g_lay.name_value_len_off, 1ull << 62, "general.name's length"},
      {g_lay.name_value_len_off, ~0ull, "general.name's length (2^64-1)"},
      {g_lay.first_token_len_off, 1ull << 35, "a token's length"},
      {g_lay.first.name_len_off, 1000, "a tensor name's length"},
      {g_lay.first.name_len_off, ~0ull - 7, "a tensor name's length (2^64-8)"},
      {g_lay.tokens_start + 8 + 21 + 8, 1ull << 60, "the tokens array count"},
      {8, 1ull << 50, "the tensor count"},
      {16, ~0ull, "the key count"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t old = rd64(g_work + cases[i].off);
    memcpy(g_work + cases[i].off, &cases[i].v, 8);
    cosy_status st = load_buf(g_work, g_size);
    print_message("%s = %llu: %s\n", cases[i].what, (unsigned long long)cases[i].v, msg());
    assert_int_equal(st, COSY_ERR_MODEL_FORMAT);
    assert_true(strstr(msg(), "absurd") || strstr(msg(), "truncated") || strstr(msg(), "bad array"));
    memcpy(g_work + cases[i].off, &old, 8);
  }
  /* just past the end: a length that fits the limit but not the file */
  uint64_t old = rd64(g_work + g_lay.first_token_len_off);
  uint64_t v = (1ull << 29);
  memcpy(g_work + g_lay.first_token_len_off, &v, 8);
  assert_int_equal(load_buf(g_work, g_size), COSY_ERR_MODEL_FORMAT);
  memcpy(g_work + g_lay.first_token_len_off, &old, 8);
  assert_int_equal(load_buf(g_work, g_size), COSY_OK);
}

/* ---- duplicate names ------------------------------------------------------------------------ */

/* A GGUF of n u8 keys "k000000".. and n one-element f32 tensors "t000000".., with key dup_k
 * renamed to key 0's name and tensor dup_t to tensor 0's (-1: none). Returns its size. */
static size_t many_names(uint8_t *buf, int n, int dup_k, int dup_t) {
  size_t o = 0;
#define PUT(p, k) (memcpy(buf + o, (p), (k)), o += (k))
  uint32_t u = 3;
  uint64_t q = (uint64_t)n;
  PUT("GGUF", 4);
  PUT(&u, 4);
  PUT(&q, 8);
  PUT(&q, 8);
  char name[16];
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "k%06d", i == dup_k ? 0 : i);
    q = 7;
    u = 0; /* GGUF_T_UINT8 */
    uint8_t one = 1;
    PUT(&q, 8);
    PUT(name, 7);
    PUT(&u, 4);
    PUT(&one, 1);
  }
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "t%06d", i == dup_t ? 0 : i);
    q = 7;
    PUT(&q, 8);
    PUT(name, 7);
    u = 1; /* dims */
    PUT(&u, 4);
    q = 1; /* ne[0] */
    PUT(&q, 8);
    u = 0; /* f32 */
    PUT(&u, 4);
    q = (uint64_t)i * 32;
    PUT(&q, 8);
  }
#undef PUT
  size_t data = (o + 31) / 32 * 32;
  memset(buf + o, 0, data + (size_t)n * 32 - o);
  return data + (size_t)n * 32;
}

/* Duplicates are found wherever they are (first and last entries, middle ones), among 20000
 * keys and 20000 tensors; without one the file parses. */
static void test_duplicate_names(void **state) {
  (void)state;
  const int n = 20000;
  /* per name: key 20 bytes, tensor info 39, tensor data 32 */
  uint8_t *buf = (uint8_t *)malloc((size_t)n * (20 + 39 + 32) + 64);
  assert_non_null(buf);
  gguf_file *f = NULL;
  size_t sz = many_names(buf, n, -1, -1);
  assert_int_equal(gguf_parse(buf, sz, "test", &f), COSY_OK);
  assert_int_equal(f->n_kv, n);
  assert_int_equal(f->n_tensors, n);
  gguf_close(f);
  const int where[] = {1, n / 2, n - 1};
  for (int i = 0; i < 3; i++) {
    sz = many_names(buf, n, where[i], -1);
    assert_int_equal(gguf_parse(buf, sz, "test", &f), COSY_ERR_MODEL_FORMAT);
    assert_null(f);
    assert_non_null(strstr(msg(), "key k000000 appears twice"));
    sz = many_names(buf, n, -1, where[i]);
    assert_int_equal(gguf_parse(buf, sz, "test", &f), COSY_ERR_MODEL_FORMAT);
    assert_non_null(strstr(msg(), "tensor t000000 appears twice"));
  }
  print_message("%d keys + %d tensors: duplicates found (%s)\n", n, n, msg());
  free(buf);
}

/* ---- the public API ------------------------------------------------------------------------ */

static void test_engine_missing_model(void **state) {
  (void)state;
  cosy_engine_config cfg;
  cosy_engine_config_init(&cfg, sizeof cfg);
  cfg.model_path = "build/no/such/model.gguf";
  cfg.device = COSY_DEVICE_CPU;
  cosy_engine *e = NULL;
  cosy_status st = cosy_engine_create(&cfg, &e);
  print_message("cosy_engine_create(missing model): %d %s\n", st, cosy_last_error());
  assert_int_equal(st, COSY_ERR_IO);
  assert_null(e);
  assert_non_null(strstr(cosy_last_error(), "build/no/such/model.gguf"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_load_small),
      cmocka_unit_test(test_missing_file),
      cmocka_unit_test(test_truncation),
      cmocka_unit_test(test_magic_and_versions),
      cmocka_unit_test(test_flipped_bytes),
      cmocka_unit_test(test_missing_tensor),
      cmocka_unit_test(test_wrong_shape),
      cmocka_unit_test(test_wrong_dtype),
      cmocka_unit_test(test_overlapping_offsets),
      cmocka_unit_test(test_absurd_lengths),
      cmocka_unit_test(test_duplicate_names),
      cmocka_unit_test(test_engine_missing_model),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
