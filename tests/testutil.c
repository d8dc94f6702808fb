/* testutil.c - see testutil.h */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include <cosyvoice.h>

#include "knobs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The Makefile compiles this file with both as absolute paths; these are for other builds, which
 * then run the tests from the repository root. */
#ifndef TU_SHARED_DEFAULT
#define TU_SHARED_DEFAULT "../shared"
#endif
#ifndef TU_TEST_MODEL_DEFAULT
#define TU_TEST_MODEL_DEFAULT "build/test/small-f32.gguf"
#endif
#ifndef TU_FE_MODEL_DEFAULT
#define TU_FE_MODEL_DEFAULT "build/test/small-fe-f32.gguf"
#endif
#ifndef TU_FE_DATA_DEFAULT
#define TU_FE_DATA_DEFAULT "tests/data/frontend"
#endif

static int is_dir(const char *p) {
  struct stat sb;
  return p && stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

const char *tu_shared_dir(void) {
  const char *e = getenv("COSY_SHARED");
  if (e && *e) return is_dir(e) ? e : NULL;
  return is_dir(TU_SHARED_DEFAULT) ? TU_SHARED_DEFAULT : NULL;
}

const char *tu_shared(const char *rel) {
  static _Thread_local char buf[4096];
  const char *d = tu_shared_dir();
  if (!d) return NULL;
  snprintf(buf, sizeof buf, "%s/%s", d, rel);
  return buf;
}

const char *tu_small_model(void) {
  const char *e = getenv("COSY_TEST_MODEL");
  const char *p = (e && *e) ? e : TU_TEST_MODEL_DEFAULT;
  struct stat sb;
  return stat(p, &sb) == 0 ? p : NULL;
}

const char *tu_fe_model(void) {
  const char *e = getenv("COSY_TEST_FE_MODEL");
  const char *p = (e && *e) ? e : TU_FE_MODEL_DEFAULT;
  struct stat sb;
  return stat(p, &sb) == 0 ? p : NULL;
}

const char *tu_fe_file(const char *name) {
  static _Thread_local char buf[4096];
  const char *d = getenv("COSY_TEST_FE_DATA");
  snprintf(buf, sizeof buf, "%s/%s", (d && *d) ? d : TU_FE_DATA_DEFAULT, name);
  return buf;
}

const char *tu_tmp_path(const char *tag) {
  static _Thread_local char buf[4096];
  const char *d = getenv("TMPDIR");
  snprintf(buf, sizeof buf, "%s/cosy-test-%d-%s", (d && *d) ? d : "/tmp", (int)getpid(), tag);
  return buf;
}

#ifndef TU_TESTS_DIR
#define TU_TESTS_DIR "tests"
#endif
const char *tu_tests_file(const char *name) {
  static _Thread_local char buf[4096];
  snprintf(buf, sizeof buf, "%s/%s", TU_TESTS_DIR, name);
  return buf;
}

int64_t tu_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

/* returns raw data and its dtype code: 'f4','f8','i4','i8' */
static void *npy_raw(const char *path, int *ndim, int64_t shape[8], char *kind, int *size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "npy: cannot open %s\n", path);
    return NULL;
  }
  unsigned char pre[10];
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
    fprintf(stderr, "npy: %s is not a .npy file\n", path);
    fclose(f);
    return NULL;
  }
  size_t hlen;
  if (pre[6] == 1) {
    hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
  } else {
    unsigned char b[2];
    if (fread(b, 1, 2, f) != 2) { fclose(f); return NULL; }
    hlen = (size_t)pre[8] | ((size_t)pre[9] << 8) | ((size_t)b[0] << 16) | ((size_t)b[1] << 24);
  }
  char *h = (char *)calloc(1, hlen + 1);
  if (!h || fread(h, 1, hlen, f) != hlen) { free(h); fclose(f); return NULL; }
  char *d = strstr(h, "'descr':");
  char *o = strstr(h, "'fortran_order':");
  char *s = strstr(h, "'shape':");
  if (!d || !o || !s || strstr(o, "True")  == o + 17) {
    fprintf(stderr, "npy: %s: unsupported header %s\n", path, h);
    free(h); fclose(f); return NULL;
  }
  char *q = strchr(d + 8, '\'');
  if (!q || (q[1] != '<' && q[1] != '|')) { free(h); fclose(f); return NULL; }
  *kind = q[2];
  *size = q[3] - '0';
  *ndim = 0;
  char *p = strchr(s, '(') + 1;
  while (*p && *p != ')') {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') break;
    shape[(*ndim)++] = strtoll(p, &p, 10);
  }
  free(h);
  int64_t n = tu_numel(*ndim, shape);
  void *data = malloc((size_t)(n ? n : 1) * (size_t)*size);
  if (!data || fread(data, (size_t)*size, (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "npy: %s: short data\n", path);
    free(data); fclose(f); return NULL;
  }
  fclose(f);
  return data;
}

float *tu_npy_f32(const char *path, int *ndim, int64_t shape[8]) {
  char kind; int size; int nd; int64_t sh[8];
  if (!ndim) ndim = &nd;
  if (!shape) shape = sh;
  void *raw = npy_raw(path, ndim, shape, &kind, &size);
  if (!raw) return NULL;
  int64_t n = tu_numel(*ndim, shape);
  if (kind == 'f' && size == 4) return (float *)raw;
  float *out = (float *)malloc((size_t)(n ? n : 1) * sizeof *out);
  for (int64_t i = 0; i < n; i++) {
    if (kind == 'f' && size == 8) out[i] = (float)((double *)raw)[i];
    else if (kind == 'i' && size == 4) out[i] = (float)((int32_t *)raw)[i];
    else if (kind == 'i' && size == 8) out[i] = (float)((int64_t *)raw)[i];
    else { free(out); free(raw); fprintf(stderr, "npy: %s: unsupported dtype\n", path); return NULL; }
  }
  free(raw);
  return out;
}

double *tu_npy_f64(const char *path, int *ndim, int64_t shape[8]) {
  char kind; int size; int nd; int64_t sh[8];
  if (!ndim) ndim = &nd;
  if (!shape) shape = sh;
  void *raw = npy_raw(path, ndim, shape, &kind, &size);
  if (!raw) return NULL;
  if (kind == 'f' && size == 8) return (double *)raw;
  int64_t n = tu_numel(*ndim, shape);
  double *out = (double *)malloc((size_t)(n ? n : 1) * sizeof *out);
  for (int64_t i = 0; i < n; i++)
    out[i] = (kind == 'f' && size == 4) ? ((float *)raw)[i] : (double)((int32_t *)raw)[i];
  free(raw);
  return out;
}

int32_t *tu_npy_i32(const char *path, int *ndim, int64_t shape[8]) {
  char kind; int size; int nd; int64_t sh[8];
  if (!ndim) ndim = &nd;
  if (!shape) shape = sh;
  void *raw = npy_raw(path, ndim, shape, &kind, &size);
  if (!raw) return NULL;
  if (kind == 'i' && size == 4) return (int32_t *)raw;
  int64_t n = tu_numel(*ndim, shape);
  int32_t *out = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof *out);
  for (int64_t i = 0; i < n; i++) out[i] = (int32_t)((int64_t *)raw)[i];
  free(raw);
  return out;
}

double tu_rel_l2(const float *a, const float *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - (double)ref[i];
    num += d * d;
    den += (double)ref[i] * (double)ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

double tu_max_abs_diff(const float *a, const float *ref, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)ref[i]);
    if (d > m || d != d) m = d;
  }
  return m;
}

int32_t *tu_load_ids(const char *rel, int *n) {
  int nd;
  int64_t sh[8];
  const char *p = tu_shared(rel);
  int32_t *v = p ? tu_npy_i32(p, &nd, sh) : NULL;
  *n = v ? (int)tu_numel(nd, sh) : 0;
  return v;
}

float *tu_load_f32(const char *rel, int64_t want) {
  int nd;
  int64_t sh[8];
  const char *p = tu_shared(rel);
  float *v = p ? tu_npy_f32(p, &nd, sh) : NULL;
  if (v && want >= 0 && tu_numel(nd, sh) != want) {
    fprintf(stderr, "%s: %lld elements, expected %lld\n", rel, (long long)tu_numel(nd, sh),
            (long long)want);
    free(v);
    return NULL;
  }
  return v;
}

int tu_golden_flow_inputs(tu_flow_inputs *in) {
  memset(in, 0, sizeof *in);
  int32_t *pt = tu_load_ids("golden/inputs/prompt_speech_tokens.npy", &in->n_prompt);
  int32_t *ft = tu_load_ids("golden/inputs/flow_tokens.npy", &in->n_flow);
  in->prompt_feat = tu_load_f32("golden/inputs/prompt_feat.npy", (int64_t)2 * in->n_prompt * 80);
  in->spk = tu_load_f32("golden/inputs/spk_embedding.npy", 192);
  in->tokens = (int32_t *)malloc(sizeof(int32_t) * (size_t)(in->n_prompt + in->n_flow + 1));
  int ok = pt && ft && in->prompt_feat && in->spk && in->tokens;
  if (ok) {
    memcpy(in->tokens, pt, sizeof(int32_t) * (size_t)in->n_prompt);
    memcpy(in->tokens + in->n_prompt, ft, sizeof(int32_t) * (size_t)in->n_flow);
  }
  free(pt);
  free(ft);
  if (!ok) tu_flow_inputs_free(in);
  return ok ? 0 : -1;
}

int tu_golden_hift_inputs(int nh, tu_hift_inputs *in) {
  memset(in, 0, sizeof *in);
  int nd = 0, nd2 = 0;
  int64_t sh[8], sh2[8];
  in->mel = tu_npy_f32(tu_shared("golden/hift/mel_in.npy"), &nd, sh);
  in->rand_ini = tu_load_f32("golden/hift/rand_ini.npy", nh);
  in->sine_waves = tu_npy_f32(tu_shared("golden/hift/sine_waves.npy"), &nd2, sh2);
  int ok = in->mel && nd == 2 && sh[0] == 80 && sh[1] >= TU_HIFT_T_NONFINAL && in->rand_ini &&
           in->sine_waves && nd2 == 2 && sh2[1] == nh;
  if (ok) {
    in->T = (int)sh[1];
    in->n_rows = sh2[0];
    in->mel_nf = (float *)malloc(sizeof(float) * 80 * TU_HIFT_T_NONFINAL);
    ok = in->mel_nf != NULL;
  }
  if (ok)
    for (int c = 0; c < 80; c++)
      memcpy(in->mel_nf + c * TU_HIFT_T_NONFINAL, in->mel + (size_t)c * in->T,
             sizeof(float) * TU_HIFT_T_NONFINAL);
  if (!ok) {
    free(in->mel), free(in->mel_nf), free(in->rand_ini), free(in->sine_waves);
    memset(in, 0, sizeof *in);
  }
  return ok ? 0 : -1;
}

void tu_flow_inputs_free(tu_flow_inputs *in) {
  free(in->tokens);
  free(in->prompt_feat);
  free(in->spk);
  memset(in, 0, sizeof *in);
}

cosy_voice *tu_golden_voice(cosy_engine *e, const char *prompt_text) {
  tu_flow_inputs in;
  if (tu_golden_flow_inputs(&in)) return NULL;
  cosy_voice_features f;
  cosy_voice_features_init(&f, sizeof f);
  f.prompt_text = prompt_text;
  f.speech_tokens = in.tokens;
  f.n_speech_tokens = in.n_prompt;
  f.mel = in.prompt_feat;
  f.n_mel_frames = 2 * in.n_prompt;
  f.speaker_embedding = in.spk;
  cosy_voice *v = NULL;
  if (cosy_voice_from_features(e, &f, &v) != COSY_OK) fprintf(stderr, "voice: %s\n", cosy_last_error());
  tu_flow_inputs_free(&in);
  return v;
}

const struct cosy_knobs *tu_knobs(void) {
  static cosy_knobs k;
  cosy_knobs_read(&k);
  return &k;
}
