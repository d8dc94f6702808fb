/* gguf.h - bounds-checked reader of GGUF v3 files (model and voice files).
 *
 * The whole file is mapped read-only (mmap), or parsed from a caller's buffer. Every length,
 * count and offset is checked against the buffer before use, so a truncated or corrupted file
 * yields COSY_ERR_MODEL_FORMAT with a message naming the problem, never a crash. Strings in the
 * file are not NUL-terminated: keys and tensor names are copied out; string values are returned
 * as (pointer, length) views. */
#ifndef COSY_GGUF_H
#define COSY_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "cosyvoice.h"

enum {
  GGUF_T_UINT8 = 0, GGUF_T_INT8, GGUF_T_UINT16, GGUF_T_INT16, GGUF_T_UINT32, GGUF_T_INT32,
  GGUF_T_FLOAT32, GGUF_T_BOOL, GGUF_T_STRING, GGUF_T_ARRAY, GGUF_T_UINT64, GGUF_T_INT64,
  GGUF_T_FLOAT64, GGUF_T_COUNT
};
/* ggml tensor types this library reads */
enum { GGML_F32 = 0, GGML_F16 = 1, GGML_I32 = 26, GGML_BF16 = 30 };

#define GGUF_MAX_DIMS 4

typedef struct gguf_str { const char *p; uint64_t n; } gguf_str;

typedef struct gguf_kv {
  char *key;
  uint32_t type;          /* GGUF_T_* */
  uint32_t arr_type;      /* element type when type == GGUF_T_ARRAY */
  uint64_t n;             /* array length (1 for scalars) */
  const uint8_t *data;    /* value bytes in the file (for string arrays: the first string) */
} gguf_kv;

typedef struct gguf_tensor {
  char *name;
  uint32_t n_dims;
  int64_t ne[GGUF_MAX_DIMS];   /* innermost first (ne[0] is the contiguous dimension) */
  uint32_t type;               /* GGML_* */
  uint64_t offset;             /* from the start of the data section */
  const void *data;
  size_t nbytes;
} gguf_tensor;

typedef struct gguf_file {
  const uint8_t *buf;
  size_t size;
  void *map;                   /* mmap base when opened from a path */
  uint32_t version;
  uint64_t n_kv, n_tensors;
  gguf_kv *kv;
  gguf_tensor *tensors;
  uint32_t alignment;
  size_t data_offset;
} gguf_file;

/* Map and parse a file. what names it in messages ("model", "voice"). */
cosy_status gguf_open(const char *path, const char *what, gguf_file **out);
/* Parse a buffer the caller keeps alive (tests, in-memory voices). */
cosy_status gguf_parse(const void *buf, size_t size, const char *what, gguf_file **out);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
const char *gguf_type_name(uint32_t ggml_type);
size_t gguf_type_size(uint32_t ggml_type);       /* bytes per element, 0 if unsupported */

/* Typed getters: fail with COSY_ERR_MODEL_FORMAT naming the key when missing or of another type. */
cosy_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
cosy_status gguf_get_f32(const gguf_file *f, const char *key, float *out);
cosy_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Array of u32/i32: copies up to cap elements; *n gets the array length. */
cosy_status gguf_get_arr_u32(const gguf_file *f, const char *key, uint32_t *out, uint64_t cap,
                             uint64_t *n);
/* Array of strings: fills views[i] (caller array of *n entries, use n = kv->n). */
cosy_status gguf_get_arr_str(const gguf_file *f, const char *key, gguf_str *views, uint64_t cap,
                             uint64_t *n);

#endif
