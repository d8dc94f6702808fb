/* test_kernels.c - every CUDA launcher of kernels/kernels.h against a plain CPU reference.
 *
 * Each check draws fresh random inputs (fixed seed, never zeros), uploads them in the storage
 * type under test (the host copy is rounded to the stored values, so the reference sees exactly
 * what the GPU sees), poisons outputs with NaN (0xFF bytes), runs the launcher, synchronizes, and
 * compares with a reference computed in double:
 *   err = ||out - ref||_2 / ||ref||_2, and every output element must have been written (no NaN).
 * Tolerances (relative L2), per op and output type:
 *   fp32 outputs of fp32 math ............................................. 1e-5
 *   bf16 outputs (one rounding at the store, ~2e-3 expected) .............. 1e-2
 *   gemm bf16 inputs -> fp32 output (fp32 accumulation; ~1e-6 expected) ... 1e-4
 *   attention with bf16 data (P rounded to bf16 on the tensor-core path) .. 1e-2
 *   copies (embedding, kv append) and top-k selection ..................... exact (0)
 * One line per check: op, size, rel-L2, tolerance, PASS/FAIL. Without a CUDA device the program
 * prints "SKIP: ..." and exits 0 (the CI situation); on a device any wrong result fails. Built
 * without CUDA (no COSY_WITH_CUDA) it prints "SKIP: built without CUDA" and exits 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if !__has_include(<cmocka.h>)
#define COSY_TEST_NO_CMOCKA 1
#endif
#endif

#ifndef COSY_TEST_NO_CMOCKA
#include <cmocka.h>
#else
/* The GPU machines have no cmocka: the few cmocka calls used here, as a minimal stand-in (each
 * test runs under setjmp; fail() jumps back; the exit status counts failed tests). */
static jmp_buf tk_jmp;
#define fail() longjmp(tk_jmp, 1)
#define assert_non_null(p)                                   \
  do {                                                       \
    if (!(p)) {                                              \
      printf("assertion failed: %s is NULL\n", #p);          \
      fail();                                                \
    }                                                        \
  } while (0)
#define assert_int_equal(a, b)                                                  \
  do {                                                                          \
    if ((long long)(a) != (long long)(b)) {                                     \
      printf("assertion failed: %s == %lld, expected %lld\n", #a, (long long)(a), \
             (long long)(b));                                                   \
      fail();                                                                   \
    }                                                                           \
  } while (0)
struct CMUnitTest {
  const char *name;
  void (*fn)(void **);
};
#define cmocka_unit_test(f) {#f, f}
static int tk_run(const struct CMUnitTest *t, size_t n) {
  volatile int failed = 0;
  for (volatile size_t i = 0; i < n; ++i) {
    printf("[ RUN      ] %s\n", t[i].name);
    if (setjmp(tk_jmp) == 0) {
      t[i].fn(NULL);
      printf("[       OK ] %s\n", t[i].name);
    } else {
      printf("[  FAILED  ] %s\n", t[i].name);
      failed++;
    }
  }
  printf("[==========] %zu test(s) run, %d failed\n", n, (int)failed);
  return failed;
}
#define cmocka_run_group_tests(t, setup, teardown) tk_run(t, sizeof(t) / sizeof((t)[0]))
#endif

#ifndef COSY_WITH_CUDA

int main(void) {
  printf("SKIP: built without CUDA\n");
  return 0;
}

#else

#include <math.h>

#include <cuda_runtime_api.h>

#include "kernels.h"
#include "llm_extra.h"
#include "ref/sampling.h"

/* ---------------------------------------------------------------------------------------------
 * helpers */

#define CK(call)                                                                            \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      printf("CUDA error '%s' at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, \
             #call);                                                                        \
      fail();                                                                               \
    }                                                                                       \
  } while (0)

#define F32 COSY_KDT_F32
#define BF16 COSY_KDT_BF16

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static int g_failures; /* failed checks in the current cmocka test */

static void rng_seed(uint64_t s) { g_rng = s * 0x9E3779B97F4A7C15ull + 12345u; }
static uint64_t rng_next(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545F4914F6CDD1Dull;
}
/* the device as the launchers that take a description see it (filled in main) */
static cosy_kdev g_dev;

/* uniform in [lo, hi) */
static float rnd(float lo, float hi) {
  return lo + (hi - lo) * (float)((rng_next() >> 40) * (1.0 / 16777216.0));
}
static int rnd_int(int n) { return (int)(rng_next() % (uint64_t)n); }

static float *fill(size_t n, float lo, float hi) {
  float *a = malloc((n ? n : 1) * sizeof *a);
  assert_non_null(a);
  for (size_t i = 0; i < n; ++i) a[i] = rnd(lo, hi);
  return a;
}
static double *dalloc_host(size_t n) {
  double *a = calloc(n ? n : 1, sizeof *a);
  assert_non_null(a);
  return a;
}

static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static float round_dt(float v, cosy_kdtype dt) { return dt == BF16 ? bf2f(f2bf(v)) : v; }
static const char *dtn(cosy_kdtype dt) { return dt == BF16 ? "bf16" : "f32"; }
static size_t dts(cosy_kdtype dt) { return dt == BF16 ? 2 : 4; }

static void *dmalloc(size_t bytes) {
  void *p = NULL;
  CK(cudaMalloc(&p, bytes ? bytes : 16));
  return p;
}
/* device buffer of n elements of dt filled with NaN */
static void *dpoison(size_t n, cosy_kdtype dt) {
  void *p = dmalloc(n * dts(dt));
  CK(cudaMemset(p, 0xFF, n * dts(dt)));
  return p;
}
/* copy h (n floats) to device memory d as dt; h is rounded in place to the stored values */
static void to_dev(void *d, float *h, size_t n, cosy_kdtype dt) {
  if (dt == BF16) {
    uint16_t *t = malloc((n ? n : 1) * 2);
    assert_non_null(t);
    for (size_t i = 0; i < n; ++i) {
      t[i] = f2bf(h[i]);
      h[i] = bf2f(t[i]);
    }
    CK(cudaMemcpy(d, t, n * 2, cudaMemcpyHostToDevice));
    free(t);
  } else {
    CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
  }
}
static void *dup_dt(float *h, size_t n, cosy_kdtype dt) {
  void *d = dmalloc(n * dts(dt));
  to_dev(d, h, n, dt);
  return d;
}
static void from_dev(float *h, const void *d, size_t n, cosy_kdtype dt) {
  CK(cudaDeviceSynchronize());
  if (dt == BF16) {
    uint16_t *t = malloc((n ? n : 1) * 2);
    assert_non_null(t);
    CK(cudaMemcpy(t, d, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) h[i] = bf2f(t[i]);
    free(t);
  } else {
    CK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
  }
}
static float *download(const void *d, size_t n, cosy_kdtype dt) {
  float *h = malloc((n ? n : 1) * sizeof *h);
  assert_non_null(h);
  from_dev(h, d, n, dt);
  return h;
}
static int32_t *dup_i32(const int32_t *h, size_t n) {
  int32_t *d = dmalloc(n * 4);
  CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
  return d;
}
static void dfree(void *p) {
  if (p) CK(cudaFree(p));
}

static size_t count_nan(const float *a, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) c += isnan(a[i]) ? 1 : 0;
  return c;
}
static double rel_l2(const float *out, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = (double)out[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}
static double tol_for(cosy_kdtype out_dt) { return out_dt == BF16 ? 1e-2 : 1e-5; }

/* print the result line; counts a failure when err > tol, err is NaN or outputs are unwritten */
static void report(const char *op, const char *size, double err, double tol, size_t unwritten) {
  const int ok = unwritten == 0 && !isnan(err) && err <= tol;
  printf("%-22s %-46s rel-L2 %.3e  tol %.0e  %s", op, size, err, tol, ok ? "PASS" : "FAIL");
  if (unwritten) printf("  (%zu outputs not written)", unwritten);
  printf("\n");
  if (!ok) g_failures++;
}
/* compare a downloaded output against the reference and report */
static void check(const char *op, const char *size, const float *out, const double *ref,
                  size_t n, double tol) {
  report(op, size, rel_l2(out, ref, n), tol, count_nan(out, n));
}

static void begin_test(uint64_t seed) {
  g_failures = 0;
  rng_seed(seed);
}
static void end_test(void) {
  CK(cudaDeviceSynchronize());
  assert_int_equal(g_failures, 0);
}

/* ---------------------------------------------------------------------------------------------
 * norm.cu */

static void check_rmsnorm(int rows, int H, cosy_kdtype xdt, cosy_kdtype ydt) {
  const size_t n = (size_t)rows * H;
  float *x = fill(n, -2.f, 2.f), *w = fill(H, 0.5f, 1.5f);
  void *dx = dup_dt(x, n, xdt);
  float *dw = dup_dt(w, H, F32);
  void *dy = dpoison(n, ydt);
  CK(cosy_k_rmsnorm(0, xdt, dx, dw, ydt, dy, rows, H, 1e-6f));
  float *y = download(dy, n, ydt);
  double *ref = dalloc_host(n);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < H; ++i) ss += (double)x[(size_t)r * H + i] * x[(size_t)r * H + i];
    const double s = 1.0 / sqrt(ss / H + 1e-6);
    for (int i = 0; i < H; ++i) ref[(size_t)r * H + i] = w[i] * (x[(size_t)r * H + i] * s);
  }
  char sz[96];
  snprintf(sz, sizeof sz, "rows=%d H=%d %s->%s", rows, H, dtn(xdt), dtn(ydt));
  check("rmsnorm", sz, y, ref, n, tol_for(ydt));
  free(x), free(w), free(y), free(ref);
  dfree(dx), dfree(dw), dfree(dy);
}

static void check_add_rmsnorm(int rows, int H, cosy_kdtype hdt, cosy_kdtype ddt,
                              cosy_kdtype ydt) {
  const size_t n = (size_t)rows * H;
  float *h = fill(n, -2.f, 2.f), *d = fill(n, -1.f, 1.f), *w = fill(H, 0.5f, 1.5f);
  void *dh = dup_dt(h, n, hdt), *dd = dup_dt(d, n, ddt);
  float *dw = dup_dt(w, H, F32);
  void *dy = dpoison(n, ydt);
  CK(cosy_k_add_rmsnorm(0, hdt, dh, ddt, dd, dw, ydt, dy, rows, H, 1e-6f));
  float *y = download(dy, n, ydt), *h2 = download(dh, n, hdt);
  double *ref_h = dalloc_host(n), *ref_y = dalloc_host(n);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < H; ++i) {
      const size_t e = (size_t)r * H + i;
      /* the sum is formed in fp32 and stored in h's type, as the kernel documents */
      ref_h[e] = round_dt(h[e] + d[e], hdt);
      ss += ref_h[e] * ref_h[e];
    }
    const double s = 1.0 / sqrt(ss / H + 1e-6);
    for (int i = 0; i < H; ++i) ref_y[(size_t)r * H + i] = w[i] * ref_h[(size_t)r * H + i] * s;
  }
  char sz[96];
  snprintf(sz, sizeof sz, "rows=%d H=%d h:%s d:%s y:%s", rows, H, dtn(hdt), dtn(ddt), dtn(ydt));
  check("add_rmsnorm (h)", sz, h2, ref_h, n, tol_for(hdt));
  check("add_rmsnorm (y)", sz, y, ref_y, n, tol_for(ydt));
  free(h), free(d), free(w), free(y), free(h2), free(ref_h), free(ref_y);
  dfree(dh), dfree(dd), dfree(dw), dfree(dy);
}

static void check_layernorm_mod(int B, int N, int D, int with_mod, cosy_kdtype xdt,
                                cosy_kdtype ydt) {
  const size_t n = (size_t)B * N * D;
  const int ms = 6 * D; /* a DiT block's modulation row: shift, scale, gate, ... */
  float *x = fill(n, -1.f, 3.f), *emb = fill((size_t)B * ms, -0.5f, 0.5f);
  void *dx = dup_dt(x, n, xdt);
  float *demb = dup_dt(emb, (size_t)B * ms, F32);
  void *dy = dpoison(n, ydt);
  const float *shift = with_mod ? demb : NULL, *scale = with_mod ? demb + D : NULL;
  CK(cosy_k_layernorm_mod(0, xdt, dx, ydt, dy, scale, shift, ms, B, N, D, 1e-6f));
  float *y = download(dy, n, ydt);
  double *ref = dalloc_host(n);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < N; ++t) {
      const float *xr = x + ((size_t)b * N + t) * D;
      double mean = 0, var = 0;
      for (int i = 0; i < D; ++i) mean += xr[i];
      mean /= D;
      for (int i = 0; i < D; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      var /= D;
      const double r = 1.0 / sqrt(var + 1e-6);
      for (int i = 0; i < D; ++i) {
        double v = (xr[i] - mean) * r;
        if (with_mod) v = v * (1.0 + emb[(size_t)b * ms + D + i]) + emb[(size_t)b * ms + i];
        ref[((size_t)b * N + t) * D + i] = v;
      }
    }
  char sz[96];
  snprintf(sz, sizeof sz, "B=%d N=%d D=%d %s %s->%s", B, N, D, with_mod ? "mod" : "plain",
           dtn(xdt), dtn(ydt));
  check("layernorm_mod", sz, y, ref, n, tol_for(ydt));
  free(x), free(emb), free(y), free(ref);
  dfree(dx), dfree(demb), dfree(dy);
}

static void test_norm(void **state) {
  (void)state;
  begin_test(1);
  const int rows[] = {1, 3, 37};
  const int Hs[] = {896, 1024, 67};
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      check_rmsnorm(rows[a], Hs[b], F32, F32);
      check_rmsnorm(rows[a], Hs[b], BF16, BF16);
    }
  check_rmsnorm(5, 896, F32, BF16);
  check_rmsnorm(5, 896, BF16, F32);
  for (int a = 0; a < 3; ++a) {
    check_add_rmsnorm(rows[a], 896, F32, F32, F32);
    check_add_rmsnorm(rows[a], 896, BF16, BF16, BF16);
    check_add_rmsnorm(rows[a], 896, F32, BF16, BF16);
    check_add_rmsnorm(rows[a], 896, F32, F32, BF16);
  }
  const int Ns[] = {1, 37, 101};
  for (int a = 0; a < 3; ++a) {
    check_layernorm_mod(2, Ns[a], 1024, 1, F32, F32);
    check_layernorm_mod(2, Ns[a], 1024, 1, BF16, BF16);
    check_layernorm_mod(2, Ns[a], 1024, 1, F32, BF16);
  }
  check_layernorm_mod(1, 5, 1024, 0, F32, F32);
  check_layernorm_mod(3, 7, 80, 0, BF16, F32);
  end_test();
}

/* ---------------------------------------------------------------------------------------------
 * rope.cu */

/* inv_freq as the kernel computes it when given NULL: fp32(1 / theta^(2i/dim)) via double */
static float inv_freq_ref(int i, int dim, float theta) {
  return (float)(1.0 / pow((double)theta, (double)(2 * i) / (double)dim));
}

static void check_rope_neox(int n_tok, cosy_kdtype dt, int table) {
  const int nqh = 14, nkh = 2, hd = 64, stride = (nqh + 2 * nkh) * hd; /* fused q|k|v rows */
  const float theta = 1e6f;
  const size_t n = (size_t)n_tok * stride;
  float *x = fill(n, -2.f, 2.f);
  int32_t *pos = malloc(n_tok * sizeof *pos);
  for (int t = 0; t < n_tok; ++t) pos[t] = t == 0 ? 0 : rnd_int(5000);
  float inv[32];
  for (int i = 0; i < hd / 2; ++i) /* a table that differs from the default, when given */
    inv[i] = table ? inv_freq_ref(i, hd, theta) * 0.75f : inv_freq_ref(i, hd, theta);
  void *dx = dup_dt(x, n, dt);
  int32_t *dpos = dup_i32(pos, n_tok);
  float *dinv = dup_dt(inv, hd / 2, F32);
  char *base = dx;
  CK(cosy_k_rope_neox(0, dt, base, stride, nqh, base + (size_t)nqh * hd * dts(dt), stride, nkh,
                      dpos, n_tok, hd, theta, table ? dinv : NULL));
  float *y = download(dx, n, dt);
  double *ref = dalloc_host(n);
  for (size_t e = 0; e < n; ++e) ref[e] = x[e];
  for (int t = 0; t < n_tok; ++t)
    for (int h = 0; h < nqh + nkh; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        const float a = (float)pos[t] * inv[i];
        const double c = cos((double)a), s = sin((double)a);
        const size_t e = (size_t)t * stride + (size_t)h * hd + i;
        const double x1 = x[e], x2 = x[e + hd / 2];
        ref[e] = x1 * c - x2 * s;
        ref[e + hd / 2] = x2 * c + x1 * s;
      }
  char sz[96];
  snprintf(sz, sizeof sz, "tok=%d 14q+2k heads (v kept) %s%s", n_tok, dtn(dt),
           table ? " table" : "");
  check("rope_neox", sz, y, ref, n, tol_for(dt));
  free(x), free(pos), free(y), free(ref);
  dfree(dx), dfree(dpos), dfree(dinv);
}

static void check_rope_interleaved(int B, int N, cosy_kdtype dt, int two) {
  const int stride = 1024, rot = 64;
  const float theta = 1e4f;
  const size_t n = (size_t)B * N * stride;
  float *x = fill(n, -2.f, 2.f), *x2 = fill(n, -2.f, 2.f);
  void *dx = dup_dt(x, n, dt), *dx2 = dup_dt(x2, n, dt);
  CK(cosy_k_rope_interleaved(0, dt, dx, two ? dx2 : NULL, stride, B, N, rot, theta, NULL));
  float *y = download(dx, n, dt), *y2 = download(dx2, n, dt);
  double *ref = dalloc_host(n), *ref2 = dalloc_host(n);
  for (int w = 0; w < 2; ++w) {
    const float *in = w ? x2 : x;
    double *r = w ? ref2 : ref;
    for (size_t e = 0; e < n; ++e) r[e] = in[e];
    if (w == 1 && !two) continue;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < N; ++t)
        for (int i = 0; i < rot / 2; ++i) {
          const float a = (float)t * inv_freq_ref(i, rot, theta);
          const double c = cos((double)a), s = sin((double)a);
          const size_t e = ((size_t)b * N + t) * stride + 2 * i;
          r[e] = in[e] * c - in[e + 1] * s;
          r[e + 1] = in[e + 1] * c + in[e] * s;
        }
  }
  char sz[96];
  snprintf(sz, sizeof sz, "B=%d N=%d stride=1024 rot=64 %s %s", B, N, two ? "q+k" : "q",
           dtn(dt));
  check("rope_interleaved", sz, y, ref, n, tol_for(dt));
  check("rope_interleaved (2nd)", sz, y2, ref2, n, tol_for(dt));
  free(x), free(x2), free(y), free(y2), free(ref), free(ref2);
  dfree(dx), dfree(dx2);
}

static void test_rope(void **state) {
  (void)state;
  begin_test(2);
  const int toks[] = {1, 17, 300};
  for (int a = 0; a < 3; ++a) {
    check_rope_neox(toks[a], F32, 0);
    check_rope_neox(toks[a], BF16, 0);
  }
  check_rope_neox(17, F32, 1);
  const int Ns[] = {1, 37, 401};
  for (int a = 0; a < 3; ++a) {
    check_rope_interleaved(2, Ns[a], F32, 1);
    check_rope_interleaved(2, Ns[a], BF16, 1);
  }
  check_rope_interleaved(1, 50, F32, 0);
  end_test();
}

/* ---------------------------------------------------------------------------------------------
 * act.cu */

static double silu_d(double x) { return x / (1.0 + exp(-x)); }
static double gelu_d(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}
static double mish_d(double x) { return x * tanh(log1p(exp(x))); }

static void check_unary(const char *op, int64_t n, cosy_kdtype idt, cosy_kdtype odt,
                        float slope) {
  float *x = fill((size_t)n, -6.f, 6.f);
  void *dx = dup_dt(x, (size_t)n, idt), *dy = dpoison((size_t)n, odt);
  if (!strcmp(op, "silu"))
    CK(cosy_k_silu(0, idt, dx, odt, dy, n));
  else if (!strcmp(op, "gelu_tanh"))
    CK(cosy_k_gelu_tanh(0, idt, dx, odt, dy, n));
  else if (!strcmp(op, "mish"))
    CK(cosy_k_mish(0, idt, dx, odt, dy, n));
  else
    CK(cosy_k_leaky_relu(0, idt, dx, odt, dy, n, slope));
  float *y = download(dy, (size_t)n, odt);
  double *ref = dalloc_host((size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    ref[i] = !strcmp(op, "silu")        ? silu_d(v)
             : !strcmp(op, "gelu_tanh") ? gelu_d(v)
             : !strcmp(op, "mish")      ? mish_d(v)
                                        : (v > 0 ? v : v * slope);
  }
  char sz[96];
  snprintf(sz, sizeof sz, "n=%lld %s->%s%s", (long long)n, dtn(idt), dtn(odt),
           !strcmp(op, "leaky_relu") ? (slope < 0.05f ? " slope .01" : " slope .1") : "");
  check(op, sz, y, ref, (size_t)n, tol_for(odt));
  free(x), free(y), free(ref);
  dfree(dx), dfree(dy);
}

static void check_silu_mul(int rows, int n, cosy_kdtype idt, cosy_kdtype odt) {
  const size_t nin = (size_t)rows * 2 * n, nout = (size_t)rows * n;
  float *gu = fill(nin, -4.f, 4.f);
  char *dgu = dup_dt(gu, nin, idt);
  void *dy = dpoison(nout, odt);
  CK(cosy_k_silu_mul(0, idt, dgu, dgu + (size_t)n * dts(idt), 2 * n, odt, dy, rows, n));
  float *y = download(dy, nout, odt);
  double *ref = dalloc_host(nout);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < n; ++i)
      ref[(size_t)r * n + i] =
          silu_d(gu[(size_t)r * 2 * n + i]) * gu[(size_t)r * 2 * n + n + i];
  char sz[96];
  snprintf(sz, sizeof sz, "rows=%d n=%d (fused gate|up) %s->%s", rows, n, dtn(idt), dtn(odt));
  check("silu_mul", sz, y, ref, nout, tol_for(odt));
  free(gu), free(y), free(ref);
  dfree(dgu), dfree(dy);
}

static void check_snake(int B, int C, int T, int cl, cosy_kdtype idt, cosy_kdtype odt) {
  const size_t n = (size_t)B * C * T;
  float *x = fill(n, -3.f, 3.f), *al = fill(C, 0.2f, 2.f);
  void *dx = dup_dt(x, n, idt), *dy = dpoison(n, odt);
  float *dal = dup_dt(al, C, F32);
  CK(cosy_k_snake(0, idt, dx, odt, dy, dal, B, C, T, cl));
  float *y = download(dy, n, odt);
  double *ref = dalloc_host(n);
  for (size_t e = 0; e < n; ++e) {
    const int c = cl ? (int)(e % C) : (int)((e / T) % C);
    const double a = al[c], s = sin(a * x[e]);
    ref[e] = x[e] + s * s / (a + 1e-9);
  }
  char sz[96];
  snprintf(sz, sizeof sz, "B=%d C=%d T=%d %s %s->%s", B, C, T, cl ? "[B][T][C]" : "[B][C][T]",
           dtn(idt), dtn(odt));
  check("snake", sz, y, ref, n, tol_for(odt));
  free(x), free(al), free(y), free(ref);
  dfree(dx), dfree(dy), dfree(dal);
}

static void check_gated_residual(int B, int N, int D, cosy_kdtype hdt, cosy_kdtype adt) {
  const size_t n = (size_t)B * N * D;
  const int gs = 6 * D;
  float *h = fill(n, -2.f, 2.f), *a = fill(n, -2.f, 2.f), *gate = fill((size_t)B * gs, -1.f, 1.f);
  void *dh = dup_dt(h, n, hdt), *da = dup_dt(a, n, adt);
  float *dg = dup_dt(gate, (size_t)B * gs, F32);
  CK(cosy_k_gated_residual(0, hdt, dh, adt, da, dg + 2 * D, gs, B, N, D));
  float *y = download(dh, n, hdt);
  double *ref = dalloc_host(n);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < N; ++t)
      for (int d = 0; d < D; ++d) {
        const size_t e = ((size_t)b * N + t) * D + d;
        ref[e] = h[e] + (double)gate[(size_t)b * gs + 2 * D + d] * a[e];
      }
  char sz[96];
  snprintf(sz, sizeof sz, "B=%d N=%d D=%d h:%s a:%s", B, N, D, dtn(hdt), dtn(adt));
  check("gated_residual", sz, y, ref, n, tol_for(hdt));
  free(h), free(a), free(gate), free(y), free(ref);
  dfree(dh), dfree(da), dfree(dg);
}

static void check_add_bias(int rows, int cols, int stride, cosy_kdtype dt) {
  const size_t n = (size_t)rows * stride;
  float *y = fill(n, -2.f, 2.f), *bias = fill(cols, -1.f, 1.f);
  void *dy = dup_dt(y, n, dt);
  float *db = dup_dt(bias, cols, F32);
  CK(cosy_k_add_bias(0, dt, dy, stride, db, rows, cols));
  float *out = download(dy, n, dt);
  double *ref = dalloc_host(n);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < stride; ++c)
      ref[(size_t)r * stride + c] = y[(size_t)r * stride + c] + (c < cols ? bias[c] : 0.f);
  char sz[96];
  snprintf(sz, sizeof sz, "rows=%d cols=%d stride=%d %s", rows, cols, stride, dtn(dt));
  check("add_bias", sz, out, ref, n, tol_for(dt));
  free(y), free(bias), free(out), free(ref);
  dfree(dy), dfree(db);
}

static void test_act(void **state) {
  (void)state;
  begin_test(3);
  const char *ops[] = {"silu", "gelu_tanh", "mish"};
  const int64_t ns[] = {1, 37, 1000003};
  for (int o = 0; o < 3; ++o)
    for (int a = 0; a < 3; ++a) {
      check_unary(ops[o], ns[a], F32, F32, 0.f);
      check_unary(ops[o], ns[a], BF16, BF16, 0.f);
    }
  check_unary("gelu_tanh", 4099, F32, BF16, 0.f);
  check_unary("leaky_relu", 4099, F32, F32, 0.01f);
  check_unary("leaky_relu", 4099, BF16, BF16, 0.1f);
  check_unary("leaky_relu", 3, BF16, F32, 0.1f);
  const int rows[] = {1, 3, 37};
  for (int a = 0; a < 3; ++a) {
    check_silu_mul(rows[a], 4864, F32, F32);
    check_silu_mul(rows[a], 4864, BF16, BF16);
  }
  check_silu_mul(2, 33, F32, BF16);
  check_snake(1, 64, 123, 0, F32, F32);
  check_snake(2, 256, 37, 0, BF16, BF16);
  check_snake(1, 128, 45, 1, F32, F32);
  check_snake(2, 18, 7, 1, F32, BF16);
  check_gated_residual(2, 37, 1024, F32, F32);
  check_gated_residual(2, 101, 1024, BF16, BF16);
  check_gated_residual(1, 3, 1024, F32, BF16);
  check_add_bias(3, 896, 896, F32);
  check_add_bias(37, 80, 96, BF16);
  end_test();
}

/* ---------------------------------------------------------------------------------------------
 * embed.cu */

static void check_embed(int n_rows, int dim, int n_ids, int bad, cosy_kdtype tdt,
                        cosy_kdtype odt) {
  const int out_stride = dim + 16;
  const size_t nt = (size_t)n_rows * dim, no = (size_t)n_ids * out_stride;
  float *table = fill(nt, -1.f, 1.f);
  int32_t *ids = malloc(n_ids * sizeof *ids);
  for (int i = 0; i < n_ids; ++i) ids[i] = rnd_int(n_rows);
  if (bad && n_ids >= 3) {
    ids[0] = -1;
    ids[n_ids / 2] = n_rows;
    ids[n_ids - 1] = 0x7fffffff;
  }
  ids[n_ids > 1 ? 1 : 0] = bad && n_ids < 3 ? n_rows : n_rows - 1; /* last row is reachable */
  void *dt = dup_dt(table, nt, tdt);
  int32_t *dids = dup_i32(ids, n_ids);
  void *dout = dpoison(no, odt);
  int *dflag = dmalloc(sizeof(int));
  CK(cudaMemset(dflag, 0, sizeof(int)));
  CK(cosy_k_embed(0, tdt, dt, n_rows, dim, dids, n_ids, odt, dout, out_stride, dflag));
  float *out = download(dout, no, odt);
  int flag = -1;
  CK(cudaMemcpy(&flag, dflag, sizeof flag, cudaMemcpyDeviceToHost));
  double *ref = dalloc_host(no);
  float *got = malloc(((size_t)n_ids * dim) * sizeof *got);
  double *refc = dalloc_host((size_t)n_ids * dim);
  int want_flag = 0;
  for (int i = 0; i < n_ids; ++i) {
    const int ok = ids[i] >= 0 && ids[i] < n_rows;
    if (!ok) want_flag = 1;
    for (int d = 0; d < dim; ++d) {
      refc[(size_t)i * dim + d] = ok ? round_dt(table[(size_t)ids[i] * dim + d], odt) : 0.0;
      got[(size_t)i * dim + d] = out[(size_t)i * out_stride + d];
    }
  }
  char sz[96];
  snprintf(sz, sizeof sz, "%dx%d ids=%d%s %s->%s", n_rows, dim, n_ids, bad ? " (bad ids)" : "",
           dtn(tdt), dtn(odt));
  check("embed", sz, got, refc, (size_t)n_ids * dim, 0.0);
  report("embed (error flag)", sz, flag == want_flag ? 0.0 : 1.0, 0.0, 0);
  /* the padding columns between rows must be untouched (still NaN) */
  size_t touched = 0;
  for (int i = 0; i < n_ids; ++i)
    for (int d = dim; d < out_stride; ++d) touched += isnan(out[(size_t)i * out_stride + d]) ? 0 : 1;
  report("embed (stride kept)", sz, (double)touched, 0.0, 0);
  free(table), free(ids), free(out), free(ref), free(got), free(refc);
  dfree(dt), dfree(dids), dfree(dout), dfree(dflag);
}

static void test_embed(void **state) {
  (void)state;
  begin_test(4);
  check_embed(6761, 896, 1, 0, F32, F32);
  check_embed(6761, 896, 37, 0, BF16, F32);
  check_embed(6761, 896, 37, 1, BF16, BF16);
  check_embed(151936, 896, 3, 1, BF16, F32);
  check_embed(6561, 80, 300, 1, F32, BF16);
  check_embed(6561, 80, 2, 1, F32, F32);
  end_test();
}

/* ---------------------------------------------------------------------------------------------
 * attention.cu */

/* out[h*64+d] for one query row: softmax over keys kv[j] (j < nk) */
static void attn_row_ref(const float *q, const float *const *krow, const float *const *vrow,
                         int nk, double scale, double *out) {
  double *s = malloc((nk ? nk : 1) * sizeof *s);
  double m = -INFINITY, l = 0;
  for (int j = 0; j < nk; ++j) {
    double acc = 0;
    for (int d = 0; d < 64; ++d) acc += (double)q[d] * krow[j][d];
    s[j] = acc * scale;
    if (s[j] > m) m = s[j];
  }
  for (int d = 0; d < 64; ++d) out[d] = 0;
  for (int j = 0; j < nk; ++j) {
    const double p = exp(s[j] - m);
    l += p;
    for (int d = 0; d < 64; ++d) out[d] += p * vrow[j][d];
  }
  for (int d = 0; d < 64; ++d) out[d] = nk ? out[d] / l : 0.0;
  free(s);
}

static void check_kv_append(int n_tok, int page_size, int n_pages, cosy_kdtype dt) {
  const int nkh = 2, hd = 64, kv_stride = 1152; /* k, v inside fused qkv-like rows */
  const size_t per = (size_t)nkh * hd, ncache = (size_t)n_pages * page_size * per;
  float *kc = fill(ncache, -1.f, 1.f), *vc = fill(ncache, -1.f, 1.f);
  float *kin = fill((size_t)n_tok * kv_stride, -2.f, 2.f), *vin = fill((size_t)n_tok * kv_stride, -2.f, 2.f);
  int32_t *slots = malloc(n_tok * sizeof *slots);
  /* distinct slots: a random permutation prefix; every 5th token skipped (-1) */
  const int nslots = n_pages * page_size;
  int32_t *perm = malloc(nslots * sizeof *perm);
  for (int i = 0; i < nslots; ++i) perm[i] = i;
  for (int i = nslots - 1; i > 0; --i) {
    const int j = rnd_int(i + 1);
    const int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (int t = 0; t < n_tok; ++t) slots[t] = t % 5 == 4 ? -1 : perm[t];
  void *dkc = dup_dt(kc, ncache, dt), *dvc = dup_dt(vc, ncache, dt);
  void *dk = dup_dt(kin, (size_t)n_tok * kv_stride, dt), *dv = dup_dt(vin, (size_t)n_tok * kv_stride, dt);
  int32_t *dslots = dup_i32(slots, n_tok);
  CK(cosy_k_kv_append(0, dt, dk, dv, kv_stride, dslots, n_tok, dkc, dvc, nkh, hd));
  float *kg = download(dkc, ncache, dt), *vg = download(dvc, ncache, dt);
  double *kr = dalloc_host(ncache), *vr = dalloc_host(ncache);
  for (size_t e = 0; e < ncache; ++e) kr[e] = kc[e], vr[e] = vc[e];
  for (int t = 0; t < n_tok; ++t) {
    if (slots[t] < 0) continue;
    for (size_t c = 0; c < per; ++c) {
      kr[(size_t)slots[t] * per + c] = kin[(size_t)t * kv_stride + c];
      vr[(size_t)slots[t] * per + c] = vin[(size_t)t * kv_stride + c];
    }
  }
  char sz[96];
  snprintf(sz, sizeof sz, "tok=%d page=%d pages=%d %s", n_tok, page_size, n_pages, dtn(dt));
  check("kv_append (k)", sz, kg, kr, ncache, 0.0);
  check("kv_append (v)", sz, vg, vr, ncache, 0.0);
  free(kc), free(vc), free(kin), free(vin), free(slots), free(perm), free(kg), free(vg), free(kr),
      free(vr);
  dfree(dkc), dfree(dvc), dfree(dk), dfree(dv), dfree(dslots);
}

/* n_seq sequences with the given lengths; pages shuffled over a pool bigger than needed */
static void check_paged_decode(int n_seq, const int *lens, int page_size, cosy_kdtype dt,
                               int max_ctx) {
  const int nqh = 14, nkh = 2, hd = 64, q_stride = 1152, out_stride = nqh * hd;
  const double scale = 0.125;
  int max_pages = (max_ctx + page_size - 1) / page_size;
  int need = 0;
  for (int s = 0; s < n_seq; ++s) need += (lens[s] + page_size - 1) / page_size;
  const int n_pages = need + 7;
  const size_t per = (size_t)nkh * hd, ncache = (size_t)n_pages * page_size * per;
  float *kc = fill(ncache, -1.f, 1.f), *vc = fill(ncache, -1.f, 1.f);
  float *q = fill((size_t)n_seq * q_stride, -1.5f, 1.5f);
  int32_t *perm = malloc(n_pages * sizeof *perm);
  for (int i = 0; i < n_pages; ++i) perm[i] = i;
  for (int i = n_pages - 1; i > 0; --i) {
    const int j = rnd_int(i + 1);
    const int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  int32_t *bt = malloc((size_t)n_seq * max_pages * sizeof *bt);
  int used = 0;
  for (int s = 0; s < n_seq; ++s)
    for (int p = 0; p < max_pages; ++p)
      bt[(size_t)s * max_pages + p] =
          p < (lens[s] + page_size - 1) / page_size ? perm[used++] : -1000000; /* never read */
  void *dkc = dup_dt(kc, ncache, dt), *dvc = dup_dt(vc, ncache, dt);
  void *dq = dup_dt(q, (size_t)n_seq * q_stride, dt);
  int32_t *dbt = dup_i32(bt, (size_t)n_seq * max_pages), *dlens = dup_i32(lens, n_seq);
  void *dout = dpoison((size_t)n_seq * out_stride, dt);
  const size_t wsb = cosy_k_paged_decode_workspace(n_seq, nqh, nkh, max_ctx);
  void *dws = wsb ? dmalloc(wsb) : NULL;
  if (dws) CK(cudaMemset(dws, 0, wsb)); /* the contract: zeroed once */
  /* four calls on one workspace: the splits merged through clusters (where the device has them)
   * and through the workspace, each plain and as a programmatic dependent; every call must leave
   * the split counters at zero for the next; the output is poisoned in between */
  float *outs[4] = {NULL};
  for (int call = 0; call < 4; ++call) {
    if (call) {
      dfree(dout);
      dout = dpoison((size_t)n_seq * out_stride, dt);
    }
    cosy_kdev dev = g_dev;
    dev.clusters = call < 2 ? g_dev.clusters : 0;
    CK(cosy_k_paged_decode(0, dt, dq, q_stride, dkc, dvc, dbt, max_pages, dlens, n_seq, nqh, nkh,
                           hd, page_size, max_ctx, (float)scale, dout, out_stride, dws, wsb,
                           call & 1, &dev));
    outs[call] = download(dout, (size_t)n_seq * out_stride, dt);
  }
  float *out = outs[3];
  double *ref = dalloc_host((size_t)n_seq * out_stride);
  const float **kr = malloc((max_ctx ? max_ctx : 1) * sizeof *kr);
  const float **vr = malloc((max_ctx ? max_ctx : 1) * sizeof *vr);
  for (int s = 0; s < n_seq; ++s)
    for (int h = 0; h < nqh; ++h) {
      const int kvh = h / (nqh / nkh);
      for (int t = 0; t < lens[s]; ++t) {
        const size_t row =
            (size_t)bt[(size_t)s * max_pages + t / page_size] * page_size + t % page_size;
        kr[t] = kc + row * per + (size_t)kvh * hd;
        vr[t] = vc + row * per + (size_t)kvh * hd;
      }
      attn_row_ref(q + (size_t)s * q_stride + (size_t)h * hd, kr, vr, lens[s], scale,
                   ref + (size_t)s * out_stride + (size_t)h * hd);
    }
  char sz[96], ls[48] = "";
  for (int s = 0; s < n_seq && s < 4; ++s)
    snprintf(ls + strlen(ls), sizeof ls - strlen(ls), "%s%d", s ? "," : "", lens[s]);
  snprintf(sz, sizeof sz, "seqs=%d lens=%s%s page=%d maxctx=%d %s", n_seq, ls,
           n_seq > 4 ? ",.." : "", page_size, max_ctx, dtn(dt));
  for (int call = 0; call < 4; ++call) {
    char nm[64];
    snprintf(nm, sizeof nm, "paged_decode%s%s", call < 2 && g_dev.clusters ? " [clusters]" : "",
             call & 1 ? " [pdl]" : "");
    check(nm, sz, outs[call], ref, (size_t)n_seq * out_stride, dt == BF16 ? 1e-2 : 1e-5);
    if (call != 3) free(outs[call]);
  }
  free(kc), free(vc), free(q), free(perm), free(bt), free(out), free(ref), free(kr), free(vr);
  dfree(dkc), dfree(dvc), dfree(dq), dfree(dbt), dfree(dlens), dfree(dout), dfree(dws);
}

/* One workspace shared by calls of different batch sizes (the decode graphs of the LLM's
 * buckets share one), merged through the workspace (no clusters): the calls use the first
 * n_seq sequences of one set, larger, smaller, larger again; each must match the reference.
 * (A split-counter region that moved with n_seq was overwritten by a smaller call's partials,
 * and the next larger call merged before all its splits had arrived.) */
static void check_paged_decode_shared_ws(cosy_kdtype dt) {
  enum { NS = 16, NCALL = 5 };
  const int calls[NCALL] = {16, 4, 16, 8, 2};
  const int nqh = 14, nkh = 2, hd = 64, q_stride = nqh * hd, out_stride = nqh * hd;
  const int page_size = 16, max_ctx = 200, max_pages = (max_ctx + page_size - 1) / page_size;
  const double scale = 0.125;
  int lens[NS];
  for (int s = 0; s < NS; ++s) lens[s] = 65 + rnd_int(max_ctx - 65); /* 2..4 splits of 64 */
  const int n_pages = NS * max_pages;
  const size_t per = (size_t)nkh * hd, ncache = (size_t)n_pages * page_size * per;
  float *kc = fill(ncache, -1.f, 1.f), *vc = fill(ncache, -1.f, 1.f);
  float *q = fill((size_t)NS * q_stride, -1.5f, 1.5f);
  int32_t *bt = malloc((size_t)NS * max_pages * sizeof *bt);
  for (int s = 0; s < NS; ++s) /* sequence s owns pages s, s + NS, s + 2 NS, ... */
    for (int p = 0; p < max_pages; ++p) bt[(size_t)s * max_pages + p] = s + p * NS;
  void *dkc = dup_dt(kc, ncache, dt), *dvc = dup_dt(vc, ncache, dt);
  void *dq = dup_dt(q, (size_t)NS * q_stride, dt);
  int32_t *dbt = dup_i32(bt, (size_t)NS * max_pages), *dlens = dup_i32(lens, NS);
  size_t wsb = 0;
  for (int c = 0; c < NCALL; ++c) {
    const size_t w = cosy_k_paged_decode_workspace(calls[c], nqh, nkh, max_ctx);
    if (w > wsb) wsb = w;
  }
  void *dws = dmalloc(wsb);
  CK(cudaMemset(dws, 0, wsb)); /* the contract: zeroed once */
  double *ref = dalloc_host((size_t)NS * out_stride);
  const float *kr[200], *vr[200];
  for (int s = 0; s < NS; ++s)
    for (int h = 0; h < nqh; ++h) {
      const int kvh = h / (nqh / nkh);
      for (int t = 0; t < lens[s]; ++t) {
        const size_t row =
            (size_t)bt[(size_t)s * max_pages + t / page_size] * page_size + t % page_size;
        kr[t] = kc + row * per + (size_t)kvh * hd;
        vr[t] = vc + row * per + (size_t)kvh * hd;
      }
      attn_row_ref(q + (size_t)s * q_stride + (size_t)h * hd, kr, vr, lens[s], scale,
                   ref + (size_t)s * out_stride + (size_t)h * hd);
    }
  cosy_kdev dev = g_dev;
  dev.clusters = 0;
  for (int c = 0; c < NCALL; ++c) {
    const int n = calls[c];
    void *dout = dpoison((size_t)n * out_stride, dt);
    CK(cosy_k_paged_decode(0, dt, dq, q_stride, dkc, dvc, dbt, max_pages, dlens, n, nqh, nkh, hd,
                           page_size, max_ctx, (float)scale, dout, out_stride, dws, wsb, 0, &dev));
    float *out = download(dout, (size_t)n * out_stride, dt);
    char sz[96];
    snprintf(sz, sizeof sz, "call %d of 16,4,16,8,2: seqs=%d maxctx=%d %s", c + 1, n, max_ctx,
             dtn(dt));
    check("paged_decode [shared workspace]", sz, out, ref, (size_t)n * out_stride,
          dt == BF16 ? 1e-2 : 1e-5);
    free(out);
    dfree(dout);
  }
  free(kc), free(vc), free(q), free(bt), free(ref);
  dfree(dkc), dfree(dvc), dfree(dq), dfree(dbt), dfree(dlens), dfree(dws);
}

/* causal prefill; q/k/v inside one fused buffer [L][stride]; stride 1152 (aligned, tensor-core
 * path for bf16) or an odd one (scalar path) */
static void check_prefill(int Lq, int Lk, int stride_extra, cosy_kdtype dt) {
  const int nqh = 14, nkh = 2, hd = 64;
  const int stride = (nqh + 2 * nkh) * hd + stride_extra, out_stride = nqh * hd;
  const double scale = 0.125;
  /* queries: a separate buffer of Lq rows, same stride; k/v of Lk rows */
  float *qb = fill((size_t)Lq * stride, -1.5f, 1.5f), *kvb = fill((size_t)Lk * stride, -1.5f, 1.5f);
  char *dq = dup_dt(qb, (size_t)Lq * stride, dt), *dkv = dup_dt(kvb, (size_t)Lk * stride, dt);
  void *dout = dpoison((size_t)Lq * out_stride, dt);
  const size_t koff = (size_t)nqh * hd, voff = (size_t)(nqh + nkh) * hd;
  CK(cosy_k_attn_prefill(0, dt, dq, stride, dkv + koff * dts(dt), dkv + voff * dts(dt), stride,
                         dout, out_stride, Lq, Lk, nqh, nkh, hd, (float)scale));
  float *out = download(dout, (size_t)Lq * out_stride, dt);
  double *ref = dalloc_host((size_t)Lq * out_stride);
  const float **kr = malloc(Lk * sizeof *kr), **vr = malloc(Lk * sizeof *vr);
  for (int h = 0; h < nqh; ++h) {
    const int kvh = h / (nqh / nkh);
    for (int j = 0; j < Lk; ++j) {
      kr[j] = kvb + (size_t)j * stride + koff + (size_t)kvh * hd;
      vr[j] = kvb + (size_t)j * stride + voff + (size_t)kvh * hd;
    }
    for (int i = 0; i < Lq; ++i)
      attn_row_ref(qb + (size_t)i * stride + (size_t)h * hd, kr, vr, i + (Lk - Lq) + 1, scale,
                   ref + (size_t)i * out_stride + (size_t)h * hd);
  }
  char sz[96];
  snprintf(sz, sizeof sz, "Lq=%d Lk=%d 14/2 heads stride=%d %s", Lq, Lk, stride, dtn(dt));
  check("attn_prefill", sz, out, ref, (size_t)Lq * out_stride, dt == BF16 ? 1e-2 : 1e-5);
  free(qb), free(kvb), free(out), free(ref), free(kr), free(vr);
  dfree(dq), dfree(dkv), dfree(dout);
}

static void check_dit_attn(int B, int N, int chunk, int stride_extra, cosy_kdtype dt) {
  const int nh = 16, hd = 64, in_stride = nh * hd + stride_extra, out_stride = nh * hd;
  const double scale = 0.125;
  const size_t nin = (size_t)B * N * in_stride, nout = (size_t)B * N * out_stride;
  float *q = fill(nin, -1.5f, 1.5f), *k = fill(nin, -1.5f, 1.5f), *v = fill(nin, -1.f, 1.f);
  void *dq = dup_dt(q, nin, dt), *dk = dup_dt(k, nin, dt), *dv = dup_dt(v, nin, dt);
  void *dout = dpoison(nout, dt);
  CK(cosy_k_attn_dit(0, dt, dq, dk, dv, in_stride, dout, out_stride, B, N, nh, hd, chunk,
                     (float)scale));
  float *out = download(dout, nout, dt);
  double *ref = dalloc_host(nout);
  const float **kr = malloc(N * sizeof *kr), **vr = malloc(N * sizeof *vr);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < nh; ++h) {
      for (int j = 0; j < N; ++j) {
        kr[j] = k + ((size_t)b * N + j) * in_stride + (size_t)h * hd;
        vr[j] = v + ((size_t)b * N + j) * in_stride + (size_t)h * hd;
      }
      for (int i = 0; i < N; ++i) {
        int nk = chunk > 0 ? (i / chunk + 1) * chunk : N;
        if (nk > N) nk = N;
        attn_row_ref(q + ((size_t)b * N + i) * in_stride + (size_t)h * hd, kr, vr, nk, scale,
                     ref + ((size_t)b * N + i) * out_stride + (size_t)h * hd);
      }
    }
  char sz[96];
  snprintf(sz, sizeof sz, "B=%d N=%d 16 heads %s stride=%d %s", B, N,
           chunk ? "chunk=50" : "full", in_stride, dtn(dt));
  check("attn_dit", sz, out, ref, nout, dt == BF16 ? 1e-2 : 1e-5);
  free(q), free(k), free(v), free(out), free(ref), free(kr), free(vr);
  dfree(dq), dfree(dk), dfree(dv), dfree(dout);
}

static void test_attention(void **state) {
  (void)state;
  begin_test(5);
  check_kv_append(1, 16, 4, BF16);
  check_kv_append(37, 16, 8, F32);
  check_kv_append(300, 32, 12, BF16);

  const int lens_a[] = {1, 17, 300};
  const int lens_b[] = {300, 1, 17, 0, 33};
  for (int ps = 16; ps <= 32; ps += 16)
    for (int t = 0; t < 2; ++t) {
      const cosy_kdtype dt = t ? BF16 : F32;
      check_paged_decode(3, lens_a, ps, dt, 300);   /* several splits */
      check_paged_decode(3, lens_a, ps, dt, 320);   /* max_ctx above the longest */
      check_paged_decode(5, lens_b, ps, dt, 300);   /* includes an empty sequence */
      check_paged_decode(1, lens_a + 1, ps, dt, 17); /* one split */
    }
  {
    int lens64[64];
    for (int s = 0; s < 64; ++s) lens64[s] = 1 + rnd_int(1000);
    lens64[0] = 1000;
    check_paged_decode(64, lens64, 16, BF16, 1000);
    const int one[] = {1000};
    check_paged_decode(1, one, 32, BF16, 1000);
    check_paged_decode(1, one, 16, F32, 1000);
  }
  check_paged_decode_shared_ws(F32);
  check_paged_decode_shared_ws(BF16);

  const int Ls[] = {1, 17, 300};
  for (int a = 0; a < 3; ++a) {
    check_prefill(Ls[a], Ls[a], 0, BF16);
    check_prefill(Ls[a], Ls[a], 0, F32);
  }
  check_prefill(37, 100, 0, BF16); /* chunk after cached tokens */
  check_prefill(37, 100, 0, F32);
  check_prefill(65, 65, 1, BF16); /* unaligned stride: scalar path */
  check_prefill(129, 200, 0, BF16);

  const int Ns[] = {1, 37, 175, 400};
  for (int a = 0; a < 4; ++a) {
    check_dit_attn(2, Ns[a], 50, 0, BF16);
    check_dit_attn(2, Ns[a], 0, 0, BF16);
  }
  check_dit_attn(2, 175, 50, 0, F32);
  check_dit_attn(1, 37, 0, 0, F32);
  check_dit_attn(2, 101, 50, 3, BF16); /* unaligned: scalar path */
  check_dit_attn(2, 64, 50, 1024 * 2, BF16); /* q,k,v rows inside a wider buffer */
  end_test();
}

/* ---------------------------------------------------------------------------------------------
 * gemm.cu */

static cosy_gemm *g_gemm;

static void check_gemm(int M, int N, int K, cosy_kdtype abdt, cosy_kdtype ydt, int with_bias,
                       int accumulate, int ldx_extra, int ldy_extra) {
  const int ldx = K + ldx_extra, ldy = N + ldy_extra;
  const size_t nx = (size_t)M * ldx, nw = (size_t)N * K, ny = (size_t)M * ldy;
  float *x = fill(nx, -1.f, 1.f), *w = fill(nw, -1.f, 1.f), *bias = fill(N, -1.f, 1.f);
  float *y0 = fill(ny, -1.f, 1.f);
  void *dx = dup_dt(x, nx, abdt), *dw = dup_dt(w, nw, abdt);
  float *db = dup_dt(bias, N, F32);
  void *dy = accumulate ? dup_dt(y0, ny, ydt) : dpoison(ny, ydt);
  if (!accumulate && ldy_extra) {
    /* only the first N columns are written: poison those, give the gap a defined value */
    for (size_t e = 0; e < ny; ++e) y0[e] = (int)(e % (size_t)ldy) < N ? NAN : 0.f;
    to_dev(dy, y0, ny, ydt);
  }
  CK(cosy_k_gemm(g_gemm, 0, M, N, K, abdt, dx, ldx, dw, with_bias ? db : NULL, ydt, dy, ldy,
                 accumulate));
  float *y = download(dy, ny, ydt);
  double *ref = dalloc_host(ny);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < ldy; ++n) {
      double acc = 0;
      if (n < N) {
        for (int k = 0; k < K; ++k) acc += (double)x[(size_t)m * ldx + k] * w[(size_t)n * K + k];
        if (with_bias) acc += bias[n];
      }
      if (accumulate || n >= N) acc += y0[(size_t)m * ldy + n];
      ref[(size_t)m * ldy + n] = acc;
    }
  const double tol = ydt == BF16 ? 1e-2 : abdt == BF16 ? 1e-4 : 1e-5;
  char sz[96];
  snprintf(sz, sizeof sz, "M=%d N=%d K=%d %s->%s%s%s%s", M, N, K, dtn(abdt), dtn(ydt),
           with_bias ? " +bias" : "", accumulate ? " +=y" : "",
           (ldx_extra || ldy_extra) ? " strided" : "");
  check("gemm", sz, y, ref, ny, tol);
  free(x), free(w), free(bias), free(y0), free(y), free(ref);
  dfree(dx), dfree(dw), dfree(db), dfree(dy);
}

static void test_gemm(void **state) {
  (void)state;
  begin_test(6);
  CK(cosy_gemm_create(&g_gemm, 0));
  const int shapes[][3] = {{1, 896, 896}, {3, 4864, 896}, {37, 896, 4864}, {37, 6761, 896},
                           {5, 80, 1024}, {64, 1152, 896}};
  for (int a = 0; a < 6; ++a) {
    const int M = shapes[a][0], N = shapes[a][1], K = shapes[a][2];
    check_gemm(M, N, K, BF16, BF16, 0, 0, 0, 0);
    check_gemm(M, N, K, BF16, F32, 1, 0, 0, 0);
    check_gemm(M, N, K, F32, F32, a % 2, 0, 0, 0);
  }
  check_gemm(37, 1024, 1024, BF16, BF16, 1, 0, 0, 0);
  check_gemm(37, 1024, 1024, BF16, F32, 0, 1, 0, 0);
  check_gemm(3, 896, 896, BF16, F32, 1, 1, 0, 0);
  check_gemm(17, 896, 896, F32, F32, 1, 1, 0, 0);
  check_gemm(7, 128, 896, BF16, BF16, 1, 0, 896 + 64, 1024); /* x, y inside wider rows */
  check_gemm(7, 128, 896, F32, F32, 0, 0, 8, 8);
  check_gemm(7, 128, 896, BF16, BF16, 1, 0, 0, 0); /* same shape again: cached plan */
  cosy_gemm_destroy(g_gemm);
  g_gemm = NULL;
  end_test();
}

/* ---------------------------------------------------------------------------------------------
 * sample.cu */

/* out[i] = x[i] - max - log(sum_j exp(x[j] - max)) in double (-inf entries stay -inf) */
static void log_softmax_ref(const float *x, int n, double *out) {
  double m = -INFINITY, s = 0;
  for (int i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int i = 0; i < n; ++i) s += exp((double)x[i] - m);
  for (int i = 0; i < n; ++i) out[i] = (double)x[i] - m - log(s);
}

static void check_log_softmax(int rows, int n, int stride_extra, cosy_kdtype idt) {
  const int stride = n + stride_extra;
  const size_t nin = (size_t)rows * stride, nout = (size_t)rows * n;
  float *x = fill(nin, -8.f, 8.f);
  void *dx = dup_dt(x, nin, idt);
  float *dout = dpoison(nout, F32);
  CK(cosy_k_log_softmax(0, idt, dx, stride, dout, rows, n));
  float *out = download(dout, nout, F32);
  double *ref = dalloc_host(nout);
  for (int r = 0; r < rows; ++r) log_softmax_ref(x + (size_t)r * stride, n, ref + (size_t)r * n);
  char sz[96];
  snprintf(sz, sizeof sz, "rows=%d n=%d stride=%d %s->f32", rows, n, stride, dtn(idt));
  check("log_softmax", sz, out, ref, nout, 1e-5);
  free(x), free(out), free(ref);
  dfree(dx), dfree(dout);
}

static const float *g_sort_vals;
static int cmp_desc_stable(const void *a, const void *b) {
  const int i = *(const int *)a, j = *(const int *)b;
  const float vi = g_sort_vals[i], vj = g_sort_vals[j];
  if (vi > vj) return -1;
  if (vi < vj) return 1;
  return i < j ? -1 : i > j;
}

static void check_topk(int rows, int n, int k, int ties) {
  const int stride = n + 3;
  float *x = fill((size_t)rows * stride, -10.f, 2.f);
  if (ties) /* coarse values: many equal entries, so the index order of ties is exercised */
    for (size_t e = 0; e < (size_t)rows * stride; ++e) x[e] = floorf(x[e] * 2.f) / 2.f;
  float *dx = dup_dt(x, (size_t)rows * stride, F32);
  float *dv = dpoison((size_t)rows * k, F32);
  int32_t *di = dmalloc((size_t)rows * k * 4);
  CK(cudaMemset(di, 0xFF, (size_t)rows * k * 4));
  CK(cosy_k_topk(0, dx, stride, rows, n, k, dv, di));
  float *v = download(dv, (size_t)rows * k, F32);
  int32_t *idx = malloc((size_t)rows * k * 4);
  CK(cudaMemcpy(idx, di, (size_t)rows * k * 4, cudaMemcpyDeviceToHost));
  int *order = malloc(n * sizeof *order);
  size_t mismatches = 0;
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < n; ++i) order[i] = i;
    g_sort_vals = x + (size_t)r * stride;
    qsort(order, n, sizeof *order, cmp_desc_stable);
    for (int j = 0; j < k; ++j)
      if (idx[(size_t)r * k + j] != order[j] || v[(size_t)r * k + j] != g_sort_vals[order[j]])
        mismatches++;
  }
  char sz[96];
  snprintf(sz, sizeof sz, "rows=%d n=%d k=%d%s (mismatches as err)", rows, n, k,
           ties ? " ties" : "");
  report("topk", sz, (double)mismatches, 0.0, count_nan(v, (size_t)rows * k));
  free(x), free(v), free(idx), free(order);
  dfree(dx), dfree(dv), dfree(di);
}

/* cosy_k_llm_gemv (llm_extra.h) against a double-precision loop: M rows, W [N][K] bf16, every
 * prologue / epilogue. QKV_ROPE uses 14 q + 2 k + 2 v heads (N = 1152) and checks q, and the
 * K/V cache rows of the tokens with a slot (one token has none when M > 1). */
static void check_gemv(int M, int N, int K, cosy_llm_gemv_in in, cosy_llm_gemv_out out,
                       int with_bias, int pdl) {
  const int nqh = 14, nkh = 2, n_slots = 16;
  float *x = fill((size_t)M * K, -1.f, 1.f);
  for (int m = 0; m < M; ++m) /* rows of different scale, as residual streams have */
    for (int k = 0; k < K; ++k) x[(size_t)m * K + k] *= 1.f + 3.f * (float)m;
  float *w = fill((size_t)N * K, -0.1f, 0.1f);
  float *nw = fill((size_t)K, 0.5f, 1.5f);
  float *bias = with_bias ? fill((size_t)N, -0.5f, 0.5f) : NULL;
  const int P = out == COSY_GEMV_SILU_MUL || out == COSY_GEMV_QKV_ROPE ? N / 2 : N;
  const int ny = out == COSY_GEMV_QKV_ROPE ? nqh * 64 : P;
  float *y0 = fill((size_t)M * ny, -1.f, 1.f);
  int32_t pos[8], slots[8];
  float invf[32];
  for (int i = 0; i < 32; ++i) invf[i] = (float)pow(1e6, -2.0 * i / 64.0);
  for (int m = 0; m < M; ++m) {
    pos[m] = rnd_int(2000);
    slots[m] = (m * 5 + 3) % n_slots;
  }
  if (M > 1) slots[M - 1] = -1;
  void *dx = dup_dt(x, (size_t)M * K, F32), *dw = dup_dt(w, (size_t)N * K, BF16);
  void *dnw = dup_dt(nw, (size_t)K, F32), *db = bias ? dup_dt(bias, (size_t)N, F32) : NULL;
  void *dy = out == COSY_GEMV_ADD_F32 ? dup_dt(y0, (size_t)M * ny, F32)
                                      : dpoison((size_t)M * ny, F32);
  const size_t ncache = (size_t)n_slots * nkh * 64;
  void *dkc = dpoison(ncache, F32), *dvc = dpoison(ncache, F32);
  int32_t *dpos = dup_i32(pos, (size_t)M), *dslots = dup_i32(slots, (size_t)M);
  void *dinv = dup_dt(invf, 32, F32);
  cosy_llm_gemv_args ga;
  memset(&ga, 0, sizeof ga);
  ga.M = M, ga.N = N, ga.K = K, ga.in_mode = in, ga.x = dx, ga.ldx = K, ga.norm_w = dnw;
  ga.eps = 1e-6f, ga.w = dw, ga.bias = db, ga.out_mode = out, ga.y = dy, ga.ldy = ny;
  ga.n_qh = nqh, ga.n_kh = nkh, ga.pos = dpos, ga.slots = dslots, ga.inv_freq = dinv;
  ga.k_cache = dkc, ga.v_cache = dvc, ga.pdl = pdl;
  CK(cosy_k_llm_gemv(0, &ga));
  float *y = download(dy, (size_t)M * ny, F32);
  float *kc = download(dkc, ncache, F32), *vc = download(dvc, ncache, F32);

  /* reference */
  double *dot = dalloc_host((size_t)M * N), *ref = dalloc_host((size_t)M * ny);
  double *kref = dalloc_host(ncache), *vref = dalloc_host(ncache);
  for (int m = 0; m < M; ++m) {
    const float *xr = x + (size_t)m * K;
    double ss = 0.0;
    for (int k = 0; k < K; ++k) ss += (double)xr[k] * xr[k];
    const double r = in == COSY_GEMV_IN_RMSNORM ? 1.0 / sqrt(ss / K + 1e-6) : 1.0;
    for (int n = 0; n < N; ++n) {
      double acc = bias ? bias[n] : 0.0;
      for (int k = 0; k < K; ++k) {
        const double xn = in == COSY_GEMV_IN_RMSNORM ? nw[k] * (xr[k] * r) : xr[k];
        acc += xn * w[(size_t)n * K + k];
      }
      dot[(size_t)m * N + n] = acc;
    }
  }
  size_t nref = (size_t)M * ny, nk = 0;
  float *kv_out = NULL;
  double *kv_ref = NULL;
  for (int m = 0; m < M; ++m) {
    const double *d = dot + (size_t)m * N;
    double *rr = ref + (size_t)m * ny;
    if (out == COSY_GEMV_STORE_F32) {
      for (int n = 0; n < N; ++n) rr[n] = d[n];
    } else if (out == COSY_GEMV_ADD_F32) {
      for (int n = 0; n < N; ++n) rr[n] = y0[(size_t)m * ny + n] + d[n];
    } else if (out == COSY_GEMV_SILU_MUL) {
      for (int j = 0; j < P; ++j) rr[j] = d[j] / (1.0 + exp(-d[j])) * d[P + j];
    } else {
      for (int h = 0; h < nqh + 2 * nkh; ++h)
        for (int i = 0; i < 32; ++i) {
          double x1 = d[h * 64 + i], x2 = d[h * 64 + i + 32];
          if (h < nqh + nkh) {
            const double a = (double)((float)pos[m] * invf[i]);
            const double t1 = x1 * cos(a) - x2 * sin(a), t2 = x2 * cos(a) + x1 * sin(a);
            x1 = t1, x2 = t2;
          }
          if (h < nqh) {
            rr[h * 64 + i] = x1, rr[h * 64 + i + 32] = x2;
          } else if (slots[m] >= 0) {
            const int kvh = h < nqh + nkh ? h - nqh : h - nqh - nkh;
            double *c = (h < nqh + nkh ? kref : vref) + ((size_t)slots[m] * nkh + kvh) * 64;
            c[i] = x1, c[i + 32] = x2;
          }
        }
    }
  }
  if (out == COSY_GEMV_QKV_ROPE) { /* compare the written cache rows only */
    kv_out = malloc(sizeof(float) * 2 * ncache);
    kv_ref = dalloc_host(2 * ncache);
    for (int m = 0; m < M; ++m) {
      if (slots[m] < 0) continue;
      const size_t o = (size_t)slots[m] * nkh * 64;
      for (int e = 0; e < nkh * 64; ++e) {
        kv_out[nk] = kc[o + e], kv_ref[nk++] = kref[o + e];
        kv_out[nk] = vc[o + e], kv_ref[nk++] = vref[o + e];
      }
    }
  }
  char sz[96];
  static const char *ins[] = {"f32", "rmsnorm"};
  static const char *outs[] = {"store", "add", "silu*up", "qkv+rope"};
  snprintf(sz, sizeof sz, "M=%d N=%d K=%d %s->%s%s%s", M, N, K, ins[in], outs[out],
           bias ? " +bias" : "", pdl ? " pdl" : "");
  check("llm_gemv", sz, y, ref, nref, 1e-4);
  if (out == COSY_GEMV_QKV_ROPE) check("llm_gemv (k/v cache)", sz, kv_out, kv_ref, nk, 1e-4);
  free(x), free(w), free(nw), free(bias), free(y0), free(y), free(kc), free(vc), free(dot);
  free(ref), free(kref), free(vref), free(kv_out), free(kv_ref);
  dfree(dx), dfree(dw), dfree(dnw), dfree(db), dfree(dy), dfree(dkc), dfree(dvc), dfree(dpos);
  dfree(dslots), dfree(dinv);
}

/* Row groups (groups > 1): R = 8 * G rows in one call give, row for row, the bits of the same row
 * computed alone (M = 1): the decode step's batch invariance. Mismatching floats are the error
 * (tolerance 0). */
static void check_gemv_groups(int G, int N, int K, cosy_llm_gemv_in in, cosy_llm_gemv_out out) {
  const int M = 8, R = M * G, nqh = 14, nkh = 2, n_slots = 2 * R;
  float *x = fill((size_t)R * K, -1.f, 1.f);
  for (int m = 0; m < R; ++m)
    for (int k = 0; k < K; ++k) x[(size_t)m * K + k] *= 1.f + 0.1f * (float)m;
  float *w = fill((size_t)N * K, -0.1f, 0.1f);
  float *nw = fill((size_t)K, 0.5f, 1.5f);
  const int P = out == COSY_GEMV_SILU_MUL || out == COSY_GEMV_QKV_ROPE ? N / 2 : N;
  const int ny = out == COSY_GEMV_QKV_ROPE ? nqh * 64 : P;
  int32_t *pos = malloc(sizeof(int32_t) * (size_t)R), *slots = malloc(sizeof(int32_t) * (size_t)R);
  float invf[32];
  for (int i = 0; i < 32; ++i) invf[i] = (float)pow(1e6, -2.0 * i / 64.0);
  for (int m = 0; m < R; ++m) {
    pos[m] = rnd_int(2000);
    slots[m] = m;
  }
  void *dx = dup_dt(x, (size_t)R * K, F32), *dw = dup_dt(w, (size_t)N * K, BF16);
  void *dnw = dup_dt(nw, (size_t)K, F32);
  void *dy = dpoison((size_t)R * ny, F32), *dy1 = dpoison((size_t)R * ny, F32);
  const size_t ncache = (size_t)n_slots * nkh * 64;
  void *dkc = dpoison(ncache, F32), *dvc = dpoison(ncache, F32);
  int32_t *dpos = dup_i32(pos, (size_t)R), *dslots = dup_i32(slots, (size_t)R);
  void *dinv = dup_dt(invf, 32, F32);
  cosy_llm_gemv_args ga;
  memset(&ga, 0, sizeof ga);
  ga.M = M, ga.groups = G, ga.N = N, ga.K = K, ga.in_mode = in, ga.x = dx, ga.ldx = K;
  ga.norm_w = dnw, ga.eps = 1e-6f, ga.w = dw, ga.out_mode = out, ga.y = dy, ga.ldy = ny;
  ga.n_qh = nqh, ga.n_kh = nkh, ga.pos = dpos, ga.slots = dslots, ga.inv_freq = dinv;
  ga.k_cache = dkc, ga.v_cache = dvc, ga.pdl = 1;
  CK(cosy_k_llm_gemv(0, &ga));
  for (int m = 0; m < R; ++m) { /* each row alone */
    ga.M = 1, ga.groups = 1;
    ga.x = (const float *)dx + (size_t)m * K;
    ga.y = (float *)dy1 + (size_t)m * ny;
    ga.pos = dpos + m, ga.slots = dslots + m;
    CK(cosy_k_llm_gemv(0, &ga));
  }
  float *y = download(dy, (size_t)R * ny, F32), *y1 = download(dy1, (size_t)R * ny, F32);
  size_t bad = 0;
  for (size_t i = 0; i < (size_t)R * ny; ++i) bad += memcmp(&y[i], &y1[i], sizeof *y) != 0;
  static const char *outs[] = {"store", "add", "silu*up", "qkv+rope"};
  char sz[96];
  snprintf(sz, sizeof sz, "%d groups of 8 vs rows alone, N=%d K=%d %s (mismatches as err)", G, N, K,
           outs[out]);
  report("llm_gemv groups", sz, (double)bad, 0.0, count_nan(y, (size_t)R * ny));
  free(x), free(w), free(nw), free(pos), free(slots), free(y), free(y1);
  dfree(dx), dfree(dw), dfree(dnw), dfree(dy), dfree(dy1), dfree(dkc), dfree(dvc), dfree(dpos);
  dfree(dslots), dfree(dinv);
}

static void test_llm_gemv(void **state) {
  (void)state;
  begin_test(9);
  const int Ms[] = {1, 2, 4, 8};
  for (int a = 0; a < 4; ++a) {
    const int M = Ms[a];
    check_gemv(M, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE, 1, a & 1);
    check_gemv(M, 896, 896, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 0, 1);
    check_gemv(M, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 0, 1);
    check_gemv(M, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 0, 0);
    check_gemv(M, 6761, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32, 0, 1);
  }
  check_gemv(1, 37, 72, COSY_GEMV_IN_F32, COSY_GEMV_STORE_F32, 1, 0);     /* tiny, odd N */
  check_gemv(2, 130, 8192, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 1, 0); /* K limit */
  check_gemv_groups(4, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE);
  check_gemv_groups(3, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL);
  check_gemv_groups(2, 6761, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32);
  end_test();
}

/* RAS sampling on the GPU against cosy_sample_ras on the same log-prob rows: the same token and
 * the same generator state afterwards. rows x trials draws; each row gets its own parameters
 * (temperature, top_p, top_k, window, tau_r, ignore_eos) and a history that sometimes holds the
 * likely tokens, so the repetition redraw runs often; peaked and flat rows, ties included. */
static void check_ras(int rows, int n, int trials, int top_k_max, int flat) {
  float *lp = malloc(sizeof(float) * (size_t)rows * n);
  float *scratch = malloc(sizeof(float) * COSY_SAMPLE_SCRATCH(n));
  cosy_k_ras_row *hr = calloc((size_t)rows, sizeof *hr);
  cosy_rng *cr = calloc((size_t)rows, sizeof *cr);
  assert_true(lp && scratch && hr && cr);
  float *dlp = dmalloc(sizeof(float) * (size_t)rows * n), *dlo = dmalloc(sizeof(float) * (size_t)rows * n);
  float *lgt = malloc(sizeof(float) * (size_t)rows * n), *glp = malloc(sizeof(float) * (size_t)rows * n);
  assert_true(lgt && glp);
  cosy_k_ras_row *dr = dmalloc(sizeof *hr * (size_t)rows);
  int mismatch = 0, redraws = 0, total = 0;
  double max_dlogp = 0.0, *lref = dalloc_host((size_t)n);
  for (int t = 0; t < trials; ++t) {
    for (int r = 0; r < rows; ++r) {
      float *x = lp + (size_t)r * n;
      const float scale = flat ? 0.05f : 1.f + 6.f * (float)rnd(0.f, 1.f);
      double mx = -1e30, sum = 0.0;
      for (int i = 0; i < n; ++i) {
        x[i] = scale * rnd(-3.f, 3.f);
        if (flat && i % 7 == 0) x[i] = 0.25f; /* exact ties */
        if (x[i] > mx) mx = x[i];
      }
      for (int i = 0; i < n; ++i) sum += exp((double)x[i] - mx);
      for (int i = 0; i < n; ++i) x[i] = (float)((double)x[i] - mx - log(sum));
      if (r % 11 == 5) x[rnd_int(n)] = -INFINITY; /* masked entries are legal */
      cosy_k_ras_row *w = &hr[r];
      memset(w, 0, sizeof *w);
      cosy_rng_seed(&cr[r], rng_next());
      memcpy(w->rng, cr[r].s, sizeof w->rng);
      w->temperature = (r % 3 == 1) ? 0.7f : 1.0f;
      w->top_p = (r % 4 == 2) ? 1.0f : 0.8f;
      w->top_k = 1 + rnd_int(top_k_max);
      if (r % 5 == 0) w->top_k = top_k_max;
      w->win_size = (r % 6 == 3) ? 0 : 1 + rnd_int(COSY_K_RAS_MAX_HIST);
      if (r % 2 == 0) w->win_size = 10;
      w->tau_r = (r % 7 == 4) ? 0.5f : 0.1f;
      w->n_allowed = (r % 2 == 1 && n > 6561) ? 6561 : n;
      const int nh = w->win_size ? rnd_int(w->win_size + 1) : 0;
      w->n_hist = nh;
      for (int i = 0; i < nh; ++i) {
        int best = 0; /* the likeliest id, often: forces the redraw */
        for (int j = 1; j < n; ++j)
          if (x[j] > x[best]) best = j;
        w->hist[i] = rnd_int(3) ? best : rnd_int(n);
      }
    }
    /* the kernel gets logits (log-probs plus a per-row offset) and must give back the
     * log-probs (its log_softmax) and sample from them */
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < n; ++i) lgt[(size_t)r * n + i] = lp[(size_t)r * n + i] + (float)(r % 5);
    CK(cudaMemcpy(dlp, lgt, sizeof(float) * (size_t)rows * n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dr, hr, sizeof *hr * (size_t)rows, cudaMemcpyHostToDevice));
    CK(cudaMemset(dlo, 0xFF, sizeof(float) * (size_t)rows * n));
    CK(cosy_k_ras_sample(0, dlp, n, rows, n, dlo, dr));
    cosy_k_ras_row *out = malloc(sizeof *out * (size_t)rows);
    assert_non_null(out);
    CK(cudaMemcpy(out, dr, sizeof *out * (size_t)rows, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(glp, dlo, sizeof(float) * (size_t)rows * n, cudaMemcpyDeviceToHost));
    for (int r = 0; r < rows; ++r) { /* double log_softmax of the logits given */
      log_softmax_ref(lgt + (size_t)r * n, n, lref);
      for (int i = 0; i < n; ++i) {
        const double want = lref[i], got = glp[(size_t)r * n + i];
        const double d = isinf(want) && isinf(got) && (want < 0) == (got < 0) ? 0.0 : fabs(got - want);
        if (!(d <= max_dlogp)) max_dlogp = isnan(d) ? INFINITY : d;
      }
    }
    for (int r = 0; r < rows; ++r) {
      const cosy_k_ras_row *w = &hr[r];
      cosy_sampling sp = {w->temperature, w->top_p, w->top_k, w->win_size, w->tau_r};
      cosy_rng probe = cr[r];
      const int32_t want = cosy_sample_ras(glp + (size_t)r * n, n, w->hist, w->n_hist, &sp,
                                           w->n_allowed < n, &cr[r], scratch);
      cosy_rng_uniform(&probe); /* one draw: no redraw happened iff the states now agree */
      redraws += memcmp(probe.s, cr[r].s, sizeof probe.s) != 0;
      mismatch += out[r].token != want || out[r].status != 0 ||
                  memcmp(out[r].rng, cr[r].s, sizeof cr[r].s) != 0;
      total++;
    }
    free(out);
  }
  char sz[96];
  snprintf(sz, sizeof sz, "%d draws n=%d k<=%d %s (%d redraws)", total, n, top_k_max,
           flat ? "flat+ties" : "peaked", redraws);
  report("ras_sample", sz, (double)mismatch, 0.0, 0);
  report("ras_sample log_softmax", "max abs vs double", max_dlogp, 1e-4, 0);
  if (!flat && trials * rows >= 64 && redraws == 0) report("ras_sample redraws", sz, 1.0, 0.0, 0);
  free(lp), free(scratch), free(hr), free(cr), free(lgt), free(glp), free(lref);
  dfree(dlp), dfree(dr), dfree(dlo);
}

static void test_sample(void **state) {
  (void)state;
  begin_test(7);
  const int rows[] = {1, 3, 64};
  for (int a = 0; a < 3; ++a) {
    check_log_softmax(rows[a], 6761, 0, F32);
    check_log_softmax(rows[a], 6761, 7, BF16);
  }
  check_log_softmax(2, 1, 0, F32);
  const int ks[] = {1, 25, 64};
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) check_topk(rows[a], 6761, ks[b], b == 1);
  check_topk(2, 6761, 25, 1);
  check_topk(3, 20000, 64, 1); /* larger than the register path */
  check_topk(2, 64, 64, 0);    /* k == n */
  check_topk(1, 5, 3, 0);
  check_ras(64, 6761, 8, 25, 0);
  check_ras(64, 6761, 4, 25, 1);
  check_ras(16, 6761, 2, COSY_K_RAS_MAX_K, 0);
  check_ras(8, 100, 4, 100, 0); /* k == n for some rows */
  check_ras(4, 1, 2, 1, 0);
  end_test();
}

/* ---------------------------------------------------------------------------------------------
 * argument checks: launchers refuse what a caller could get wrong */

static void test_args(void **state) {
  (void)state;
  begin_test(8);
  int bad = 0;
  float *d = dmalloc(4096);
  bad += cosy_k_rmsnorm(0, F32, NULL, d, F32, d, 1, 896, 1e-6f) != cudaErrorInvalidValue;
  bad += cosy_k_rmsnorm(0, F32, d, d, F32, d, -1, 896, 1e-6f) != cudaErrorInvalidValue;
  bad += cosy_k_rmsnorm(0, (cosy_kdtype)7, d, d, F32, d, 1, 8, 1e-6f) != cudaErrorInvalidValue;
  bad += cosy_k_rmsnorm(0, F32, NULL, NULL, F32, NULL, 0, 896, 1e-6f) != cudaSuccess;
  bad += cosy_k_rope_neox(0, F32, d, 10, 1, NULL, 0, 0, (const int32_t *)d, 1, 64, 1e6f, NULL) !=
         cudaErrorInvalidValue; /* stride < heads * hd */
  bad += cosy_k_topk(0, d, 100, 1, 100, 65, d, (int32_t *)d) != cudaErrorInvalidValue;
  bad += cosy_k_topk(0, d, 100, 1, 10, 11, d, (int32_t *)d) != cudaErrorInvalidValue;
  bad += cosy_k_attn_dit(0, BF16, d, d, d, 1024, d, 1024, 1, 4, 16, 128, 0, 0.125f) !=
         cudaErrorInvalidValue; /* head_dim 128 */
  bad += cosy_k_attn_prefill(0, BF16, d, 1152, d, d, 1152, d, 896, 5, 4, 14, 2, 64, 0.125f) !=
         cudaErrorInvalidValue; /* Lq > Lk */
  const size_t ws = cosy_k_paged_decode_workspace(4, 14, 2, 1000);
  bad += ws == 0; /* long contexts are split */
  bad += cosy_k_paged_decode(0, BF16, d, 1152, d, d, (const int32_t *)d, 63, (const int32_t *)d, 4,
                             14, 2, 64, 16, 1000, 0.125f, d, 896, d, ws - 1, 0, &g_dev) !=
         cudaErrorInvalidValue; /* workspace too small */
  bad += cosy_k_paged_decode(0, BF16, d, 1152, d, d, (const int32_t *)d, 10, (const int32_t *)d, 4,
                             14, 2, 64, 16, 1000, 0.125f, d, 896, d, 4096, 0, &g_dev) !=
         cudaErrorInvalidValue; /* max_ctx beyond max_pages * page_size */
  bad += cosy_k_embed(0, F32, d, 10, 8, (const int32_t *)d, 1, F32, d, 4, NULL) !=
         cudaErrorInvalidValue; /* out_stride < dim */
  bad += cosy_k_gemm(NULL, 0, 1, 1, 1, F32, d, 1, d, NULL, F32, d, 1, 0) != cudaErrorInvalidValue;
  bad += cosy_k_ras_sample(0, d, 9000, 1, 9000, NULL, (cosy_k_ras_row *)d) != cudaErrorInvalidValue;
  bad += cosy_k_ras_sample(0, d, 10, 1, 20, NULL, (cosy_k_ras_row *)d) != cudaErrorInvalidValue;
  bad += cosy_k_ras_supported(6761, 25, 10) != 1;
  bad += cosy_k_ras_supported(6761, COSY_K_RAS_MAX_K + 1, 10) != 0;
  {
    cosy_llm_gemv_args ga;
    memset(&ga, 0, sizeof ga);
    ga.M = 3, ga.N = 8, ga.K = 8, ga.x = d, ga.ldx = 8, ga.w = (const cosy_bf16 *)d, ga.y = d;
    ga.ldy = 8;
    bad += cosy_k_llm_gemv(0, &ga) != cudaErrorInvalidValue; /* M = 3 */
    ga.M = 1, ga.K = 8200, ga.ldx = 8200;
    bad += cosy_k_llm_gemv(0, &ga) != cudaErrorInvalidValue; /* K > 8192 */
    ga.K = 8, ga.ldx = 8, ga.out_mode = COSY_GEMV_ADD_F32, ga.in_mode = COSY_GEMV_IN_RMSNORM;
    ga.norm_w = d;
    bad += cosy_k_llm_gemv(0, &ga) != cudaErrorNotSupported; /* a combination not built */
  }
  report("argument checks", "21 calls with bad arguments", (double)bad, 0.0, 0);
  dfree(d);
  end_test();
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIP: no CUDA device (%s)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 0;
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
  /* the description the launchers that need one get (lib/gpu/gpu.c builds the engine's; this
   * test also runs without the library, bench/device_kernels.sh) */
  g_dev.device = 0;
  cudaDeviceGetAttribute(&g_dev.cc_major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&g_dev.n_sm, cudaDevAttrMultiProcessorCount, 0);
  int cl = 0;
  cudaDeviceGetAttribute(&cl, cudaDevAttrClusterLaunch, 0);
  cudaGetLastError();
  g_dev.clusters = g_dev.cc_major >= 9 && cl;
  g_dev.pdl = g_dev.cc_major >= 9;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_args),  cmocka_unit_test(test_norm),      cmocka_unit_test(test_rope),
      cmocka_unit_test(test_act),   cmocka_unit_test(test_embed),     cmocka_unit_test(test_gemm),
      cmocka_unit_test(test_sample), cmocka_unit_test(test_attention),
      cmocka_unit_test(test_llm_gemv),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif /* COSY_WITH_CUDA */
