/* gguf.c - bounds-checked GGUF v3 reader; see gguf.h. */
#define _POSIX_C_SOURCE 200809L
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define MAX_KV 100000ull
#define MAX_TENSORS 100000ull
#define MAX_NAME 256ull
#define MAX_ARRAY (1ull << 28)

typedef struct rd {
  const uint8_t *p;
  size_t size, pos;
  const char *what;
} rd;

static cosy_status trunc_err(const rd *r, const char *field) {
  return cosy_err(COSY_ERR_MODEL_FORMAT, "%s file: truncated at byte %zu of %zu while reading %s",
                  r->what, r->pos, r->size, field);
}

static cosy_status rd_bytes(rd *r, void *dst, size_t n, const char *field) {
  if (n > r->size - r->pos) return trunc_err(r, field);
  memcpy(dst, r->p + r->pos, n);
  r->pos += n;
  return COSY_OK;
}
static cosy_status rd_u32(rd *r, uint32_t *v, const char *f) { return rd_bytes(r, v, 4, f); }
static cosy_status rd_u64(rd *r, uint64_t *v, const char *f) { return rd_bytes(r, v, 8, f); }

/* string: u64 length + bytes; returns a view */
static cosy_status rd_str(rd *r, gguf_str *s, uint64_t max, const char *field) {
  cosy_status st = rd_u64(r, &s->n, field);
  if (st) return st;
  if (s->n > max)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "%s file: %s at byte %zu has absurd length %llu",
                    r->what, field, r->pos - 8, (unsigned long long)s->n);
  if (s->n > r->size - r->pos) return trunc_err(r, field);
  s->p = (const char *)r->p + r->pos;
  r->pos += (size_t)s->n;
  return COSY_OK;
}

static size_t scalar_size(uint32_t t) {
  switch (t) {
    case GGUF_T_UINT8: case GGUF_T_INT8: case GGUF_T_BOOL: return 1;
    case GGUF_T_UINT16: case GGUF_T_INT16: return 2;
    case GGUF_T_UINT32: case GGUF_T_INT32: case GGUF_T_FLOAT32: return 4;
    case GGUF_T_UINT64: case GGUF_T_INT64: case GGUF_T_FLOAT64: return 8;
    default: return 0;
  }
}

size_t gguf_type_size(uint32_t t) {
  switch (t) {
    case GGML_F32: case GGML_I32: return 4;
    case GGML_F16: case GGML_BF16: return 2;
    default: return 0;
  }
}

const char *gguf_type_name(uint32_t t) {
  switch (t) {
    case GGML_F32: return "f32";
    case GGML_F16: return "f16";
    case GGML_BF16: return "bf16";
    case GGML_I32: return "i32";
    default: return "unsupported";
  }
}

static char *dup_name(const gguf_str *s) {
  char *p = (char *)cosy_malloc((size_t)s->n + 1);
  if (!p) return NULL;
  memcpy(p, s->p, (size_t)s->n);
  p[s->n] = '\0';
  return p;
}

/* skip one value of type t (scalars, strings); arrays are handled by the caller */
static cosy_status skip_value(rd *r, uint32_t t, const char *key) {
  if (t == GGUF_T_STRING) {
    gguf_str s;
    return rd_str(r, &s, (uint64_t)1 << 30, key);
  }
  size_t n = scalar_size(t);
  if (!n)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "%s file: key %s has unknown value type %u", r->what,
                    key, t);
  if (n > r->size - r->pos) return trunc_err(r, key);
  r->pos += n;
  return COSY_OK;
}

void gguf_close(gguf_file *f) {
  if (!f) return;
  if (f->kv)
    for (uint64_t i = 0; i < f->n_kv; i++) free(f->kv[i].key);
  if (f->tensors)
    for (uint64_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
  free(f->kv);
  free(f->tensors);
  if (f->map) munmap(f->map, f->size);
  free(f);
}

static int has_bad_chars(const gguf_str *s) {
  for (uint64_t i = 0; i < s->n; i++)
    if ((unsigned char)s->p[i] < 0x20 || (unsigned char)s->p[i] == 0x7f) return 1;
  return 0;
}

typedef struct span { uint64_t begin, end, idx; } span;

static int span_cmp(const void *a, const void *b) {
  const span *x = (const span *)a, *y = (const span *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* No two tensors may share bytes: a corrupted offset that still lands aligned and inside the
 * file would otherwise alias another tensor's data silently. */
static cosy_status check_overlap(const gguf_file *f) {
  if (f->n_tensors < 2) return COSY_OK;
  span *s = (span *)cosy_malloc((size_t)f->n_tensors * sizeof *s);
  if (!s) return cosy_err(COSY_ERR_NO_MEMORY, "out of memory");
  for (uint64_t i = 0; i < f->n_tensors; i++) {
    s[i].begin = f->tensors[i].offset;
    s[i].end = f->tensors[i].offset + f->tensors[i].nbytes;
    s[i].idx = i;
  }
  qsort(s, (size_t)f->n_tensors, sizeof *s, span_cmp);
  cosy_status st = COSY_OK;
  for (uint64_t i = 0; i + 1 < f->n_tensors && !st; i++)
    if (s[i].end > s[i + 1].begin)
      st = cosy_err(COSY_ERR_MODEL_FORMAT,
                    "tensor %s: data [%llu, %llu) overlaps tensor %s at %llu: file corrupt",
                    f->tensors[s[i + 1].idx].name, (unsigned long long)s[i + 1].begin,
                    (unsigned long long)(s[i + 1].begin + f->tensors[s[i + 1].idx].nbytes),
                    f->tensors[s[i].idx].name, (unsigned long long)s[i].begin);
  free(s);
  return st;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* No key and no tensor name may appear twice. Sorting the names finds repeats in O(n log n):
 * comparing each name with all earlier ones (as this reader first did) took ~5e9 strcmp calls,
 * tens of seconds, for a 2 MB voice file of 100000 keys (tests/fuzz/README.md). */
static cosy_status check_unique(const gguf_file *f, const char *what) {
  uint64_t n = f->n_kv > f->n_tensors ? f->n_kv : f->n_tensors;
  if (n < 2) return COSY_OK;
  const char **v = (const char **)cosy_malloc((size_t)n * sizeof *v);
  if (!v) return cosy_err(COSY_ERR_NO_MEMORY, "out of memory");
  cosy_status st = COSY_OK;
  for (int pass = 0; pass < 2 && !st; pass++) {
    uint64_t m = pass == 0 ? f->n_kv : f->n_tensors;
    for (uint64_t i = 0; i < m; i++) v[i] = pass == 0 ? f->kv[i].key : f->tensors[i].name;
    if (m > 1) qsort(v, (size_t)m, sizeof *v, name_cmp);
    for (uint64_t i = 0; i + 1 < m && !st; i++)
      if (strcmp(v[i], v[i + 1]) == 0)
        st = cosy_err(COSY_ERR_MODEL_FORMAT, "%s file: %s %s appears twice", what,
                      pass == 0 ? "key" : "tensor", v[i]);
  }
  free(v);
  return st;
}

cosy_status gguf_parse(const void *buf, size_t size, const char *what, gguf_file **out) {
  *out = NULL;
  rd r = {(const uint8_t *)buf, size, 0, what};
  cosy_status st;
  char magic[4];
  if (size < 4) return trunc_err(&r, "the magic");
  if ((st = rd_bytes(&r, magic, 4, "the magic"))) return st;
  if (memcmp(magic, "GGUF", 4) != 0)
    return cosy_err(COSY_ERR_MODEL_FORMAT,
                    "%s file: bad magic %02x %02x %02x %02x (expected \"GGUF\"): not a GGUF file",
                    what, (unsigned char)magic[0], (unsigned char)magic[1],
                    (unsigned char)magic[2], (unsigned char)magic[3]);
  gguf_file *f = (gguf_file *)cosy_calloc(1, sizeof *f);
  if (!f) return cosy_err(COSY_ERR_NO_MEMORY, "out of memory");
  f->buf = r.p;
  f->size = size;
  f->alignment = 32;
  if ((st = rd_u32(&r, &f->version, "the version"))) goto fail;
  if (f->version != 3) {
    st = cosy_err(COSY_ERR_MODEL_VERSION, "%s file: GGUF version %u is not supported (need 3)",
                  what, f->version);
    goto fail;
  }
  uint64_t nt, nkv;
  if ((st = rd_u64(&r, &nt, "the tensor count")) || (st = rd_u64(&r, &nkv, "the key count")))
    goto fail;
  if (nt > MAX_TENSORS || nkv > MAX_KV) {
    st = cosy_err(COSY_ERR_MODEL_FORMAT, "%s file: absurd counts (%llu tensors, %llu keys)", what,
                  (unsigned long long)nt, (unsigned long long)nkv);
    goto fail;
  }
  f->kv = (gguf_kv *)cosy_calloc(nkv ? nkv : 1, sizeof *f->kv);
  f->tensors = (gguf_tensor *)cosy_calloc(nt ? nt : 1, sizeof *f->tensors);
  if (!f->kv || !f->tensors) { st = cosy_err(COSY_ERR_NO_MEMORY, "out of memory"); goto fail; }

  for (uint64_t i = 0; i < nkv; i++) {
    gguf_kv *kv = &f->kv[i];
    gguf_str key;
    if ((st = rd_str(&r, &key, MAX_NAME, "a key name"))) goto fail;
    if (key.n == 0 || has_bad_chars(&key)) {
      st = cosy_err(COSY_ERR_MODEL_FORMAT, "%s file: key %llu has an empty or binary name", what,
                    (unsigned long long)i);
      goto fail;
    }
    if (!(kv->key = dup_name(&key))) { st = cosy_err(COSY_ERR_NO_MEMORY, "out of memory"); goto fail; }
    f->n_kv = i + 1;
    if ((st = rd_u32(&r, &kv->type, kv->key))) goto fail;
    kv->n = 1;
    if (kv->type == GGUF_T_ARRAY) {
      if ((st = rd_u32(&r, &kv->arr_type, kv->key)) || (st = rd_u64(&r, &kv->n, kv->key)))
        goto fail;
      if (kv->n > MAX_ARRAY || kv->arr_type == GGUF_T_ARRAY) {
        st = cosy_err(COSY_ERR_MODEL_FORMAT, "%s file: key %s: bad array (type %u, length %llu)",
                      what, kv->key, kv->arr_type, (unsigned long long)kv->n);
        goto fail;
      }
      kv->data = r.p + r.pos;
      if (kv->arr_type == GGUF_T_STRING) {
        for (uint64_t j = 0; j < kv->n; j++)
          if ((st = skip_value(&r, GGUF_T_STRING, kv->key))) goto fail;
      } else {
        size_t es = scalar_size(kv->arr_type);
        if (!es) {
          st = cosy_err(COSY_ERR_MODEL_FORMAT, "%s file: key %s: unknown array element type %u",
                        what, kv->key, kv->arr_type);
          goto fail;
        }
        if (kv->n * es > r.size - r.pos) { st = trunc_err(&r, kv->key); goto fail; }
        r.pos += (size_t)(kv->n * es);
      }
    } else {
      kv->data = r.p + r.pos;
      if ((st = skip_value(&r, kv->type, kv->key))) goto fail;
    }
    if (strcmp(kv->key, "general.alignment") == 0) {
      if (kv->type != GGUF_T_UINT32) {
        st = cosy_err(COSY_ERR_MODEL_FORMAT, "%s file: general.alignment is not a u32", what);
        goto fail;
      }
      memcpy(&f->alignment, kv->data, 4);
      if (f->alignment == 0 || (f->alignment & (f->alignment - 1)) || f->alignment > 65536) {
        st = cosy_err(COSY_ERR_MODEL_FORMAT, "%s file: alignment %u is not a power of two", what,
                      f->alignment);
        goto fail;
      }
    }
  }

  for (uint64_t i = 0; i < nt; i++) {
    gguf_tensor *t = &f->tensors[i];
    gguf_str name;
    if ((st = rd_str(&r, &name, MAX_NAME, "a tensor name"))) goto fail;
    if (name.n == 0 || has_bad_chars(&name)) {
      st = cosy_err(COSY_ERR_MODEL_FORMAT, "%s file: tensor %llu has an empty or binary name",
                    what, (unsigned long long)i);
      goto fail;
    }
    if (!(t->name = dup_name(&name))) { st = cosy_err(COSY_ERR_NO_MEMORY, "out of memory"); goto fail; }
    f->n_tensors = i + 1;
    if ((st = rd_u32(&r, &t->n_dims, t->name))) goto fail;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS) {
      st = cosy_err(COSY_ERR_MODEL_FORMAT, "tensor %s: %u dimensions (1..%d supported)", t->name,
                    t->n_dims, GGUF_MAX_DIMS);
      goto fail;
    }
    uint64_t nel = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
      uint64_t ne;
      if ((st = rd_u64(&r, &ne, t->name))) goto fail;
      if (ne == 0 || ne > (1ull << 40) || nel > (1ull << 40) / ne) {
        st = cosy_err(COSY_ERR_MODEL_FORMAT, "tensor %s: bad dimension %u = %llu", t->name, d,
                      (unsigned long long)ne);
        goto fail;
      }
      t->ne[d] = (int64_t)ne;
      nel *= ne;
    }
    for (uint32_t d = t->n_dims; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    if ((st = rd_u32(&r, &t->type, t->name)) || (st = rd_u64(&r, &t->offset, t->name))) goto fail;
    size_t es = gguf_type_size(t->type);
    if (!es) {
      st = cosy_err(COSY_ERR_MODEL_FORMAT, "tensor %s: ggml type %u is not supported here",
                    t->name, t->type);
      goto fail;
    }
    t->nbytes = (size_t)(nel * es);
  }
  if ((st = check_unique(f, what))) goto fail;
  size_t a = f->alignment;
  f->data_offset = (r.pos + a - 1) / a * a;
  if (f->data_offset > size && nt > 0) {
    st = cosy_err(COSY_ERR_MODEL_FORMAT, "%s file: truncated before the tensor data (%zu of %zu bytes)",
                  what, size, f->data_offset);
    goto fail;
  }
  for (uint64_t i = 0; i < nt; i++) {
    gguf_tensor *t = &f->tensors[i];
    if (t->offset % a) {
      st = cosy_err(COSY_ERR_MODEL_FORMAT, "tensor %s: data offset %llu is not %zu-aligned",
                    t->name, (unsigned long long)t->offset, a);
      goto fail;
    }
    if (t->offset > size - f->data_offset || t->nbytes > size - f->data_offset - t->offset) {
      st = cosy_err(COSY_ERR_MODEL_FORMAT,
                    "tensor %s: data [%llu, +%zu) lies beyond the end of the file (%zu data bytes): "
                    "file truncated or corrupt",
                    t->name, (unsigned long long)t->offset, t->nbytes, size - f->data_offset);
      goto fail;
    }
    t->data = f->buf + f->data_offset + t->offset;
    /* readers use the data in place (f32 / f16 / bf16 / i32 loads): a tensor must start at a
     * multiple of its element size, which a general.alignment below 4 does not ensure */
    const size_t es = gguf_type_size(t->type);
    if ((uintptr_t)t->data % es) {
      st = cosy_err(COSY_ERR_MODEL_FORMAT,
                    "tensor %s: data at file byte %zu is not aligned for its %zu-byte elements "
                    "(general.alignment %u): the file is corrupt or from a writer that does not "
                    "align tensor data",
                    t->name, f->data_offset + (size_t)t->offset, es, f->alignment);
      goto fail;
    }
  }
  if ((st = check_overlap(f))) goto fail;
  *out = f;
  return COSY_OK;
fail:
  gguf_close(f);
  return st;
}

cosy_status gguf_open(const char *path, const char *what, gguf_file **out) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return cosy_err(COSY_ERR_IO, "cannot open %s file %s: %s", what, path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return cosy_err(COSY_ERR_IO, "%s file %s is not a regular file", what, path);
  }
  size_t size = (size_t)sb.st_size;
  if (size == 0) {
    close(fd);
    return cosy_err(COSY_ERR_MODEL_FORMAT, "%s file %s is empty", what, path);
  }
  void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return cosy_err(COSY_ERR_IO, "cannot map %s: %s", path, strerror(errno));
  gguf_file *f;
  cosy_status st = gguf_parse(map, size, what, &f);
  if (st) {
    munmap(map, size);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", cosy_last_error());
    return cosy_err(st, "%s: %s", path, msg);
  }
  f->map = map;
  *out = f;
  return COSY_OK;
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
  for (uint64_t i = 0; i < f->n_kv; i++)
    if (strcmp(f->kv[i].key, key) == 0) return &f->kv[i];
  return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
  for (uint64_t i = 0; i < f->n_tensors; i++)
    if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
  return NULL;
}

static const char *type_word(uint32_t t) {
  static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
                                "array", "u64", "i64", "f64"};
  return t < GGUF_T_COUNT ? names[t] : "unknown";
}

static cosy_status need_kv(const gguf_file *f, const char *key, uint32_t type, uint32_t arr_type,
                           const gguf_kv **out) {
  const gguf_kv *kv = gguf_find_kv(f, key);
  if (!kv) return cosy_err(COSY_ERR_MODEL_FORMAT, "key %s is missing", key);
  if (kv->type != type || (type == GGUF_T_ARRAY && kv->arr_type != arr_type))
    return cosy_err(COSY_ERR_MODEL_FORMAT, "key %s: expected %s%s%s, file has %s%s%s", key,
                    type_word(type), type == GGUF_T_ARRAY ? " of " : "",
                    type == GGUF_T_ARRAY ? type_word(arr_type) : "", type_word(kv->type),
                    kv->type == GGUF_T_ARRAY ? " of " : "",
                    kv->type == GGUF_T_ARRAY ? type_word(kv->arr_type) : "");
  *out = kv;
  return COSY_OK;
}

cosy_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
  const gguf_kv *kv;
  cosy_status st = need_kv(f, key, GGUF_T_UINT32, 0, &kv);
  if (!st) memcpy(out, kv->data, 4);
  return st;
}

cosy_status gguf_get_f32(const gguf_file *f, const char *key, float *out) {
  const gguf_kv *kv;
  cosy_status st = need_kv(f, key, GGUF_T_FLOAT32, 0, &kv);
  if (!st) memcpy(out, kv->data, 4);
  return st;
}

cosy_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
  const gguf_kv *kv;
  cosy_status st = need_kv(f, key, GGUF_T_STRING, 0, &kv);
  if (st) return st;
  memcpy(&out->n, kv->data, 8);
  out->p = (const char *)kv->data + 8;
  return COSY_OK;
}

cosy_status gguf_get_arr_u32(const gguf_file *f, const char *key, uint32_t *out, uint64_t cap,
                             uint64_t *n) {
  const gguf_kv *kv = gguf_find_kv(f, key);
  if (!kv) return cosy_err(COSY_ERR_MODEL_FORMAT, "key %s is missing", key);
  if (kv->type != GGUF_T_ARRAY || (kv->arr_type != GGUF_T_UINT32 && kv->arr_type != GGUF_T_INT32))
    return cosy_err(COSY_ERR_MODEL_FORMAT, "key %s: expected an array of u32/i32", key);
  *n = kv->n;
  uint64_t m = kv->n < cap ? kv->n : cap;
  if (m) memcpy(out, kv->data, (size_t)m * 4);
  return COSY_OK;
}

cosy_status gguf_get_arr_str(const gguf_file *f, const char *key, gguf_str *views, uint64_t cap,
                             uint64_t *n) {
  const gguf_kv *kv;
  cosy_status st = need_kv(f, key, GGUF_T_ARRAY, GGUF_T_STRING, &kv);
  if (st) return st;
  *n = kv->n;
  const uint8_t *p = kv->data; /* already bounds-checked by the parser */
  for (uint64_t i = 0; i < kv->n && i < cap; i++) {
    memcpy(&views[i].n, p, 8);
    views[i].p = (const char *)p + 8;
    p += 8 + views[i].n;
  }
  return COSY_OK;
}
