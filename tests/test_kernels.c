/* test_kernels.c - every CUDA launcher of kernels/kernels.h, gemv.h, paged_kv.h, bf16_split.h,
 * dit_elementwise.h, euler.h and flow_pack.h against a plain CPU reference (the HiFT and
 * front-end launchers, kernels_hift.h and kernels_frontend.h, and dit_elementwise.h's resid_ln
 * and conv_pos.h: tests/test_gpu_hift.c, test_gpu_frontend.c, test_gpu_flow.c; docs/kernels.md
 * lists which test covers which launcher).
 *
 * Each check draws fresh random inputs (fixed seed, never zeros), uploads them in the storage
 * type under test (the host copy is rounded to the stored values, so the reference sees exactly
 * what the GPU sees), poisons outputs with NaN (0xFF bytes), runs the launcher, synchronizes, and
 * compares with a reference computed in double:
 *   err = ||out - ref||_2 / ||ref||_2, and every output element must have been written (no NaN).
 * Tolerances (relative L2), per op and output type:
 *   fp32 outputs of fp32 math ............................................. 1e-5
 *   (one or two fp32 additions: 1e-6; hi + lo bf16 pairs of bf16_split.h, exact to ~2^-17: 1e-5)
 *   bf16 outputs (one rounding at the store, ~2e-3 expected) .............. 1e-2
 *   gemm bf16 inputs -> fp32 output (fp32 accumulation; ~1e-6 expected) ... 1e-4
 *   gemm_gelu fp32 output (cuBLASLt's GELU epilogue may use a fast tanh) .. 1e-3
 *   attention with bf16 data (P rounded to bf16 on the tensor-core path) .. 1e-2
 *   copies (embedding, kv append, flow_pack.cu, kv gather, decode prep), top-k exact (0)
 * One line per check: op, size, rel-L2, tolerance, PASS/FAIL.
 *
 * This is the kernel harness's program (tests/kharness.h, docs/kernels.md): the tests are the
 * registry's (tests/kregistry.c) in its order; `test_kernels NAME` runs one family's (or the
 * family of launcher NAME), `--bench [NAME]` runs the benchmark of bench/bench_kernels.c instead,
 * `--list` prints the registry. Without a CUDA device the program
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

#include "kharness.h"

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
#define assert_true(c)                                       \
  do {                                                       \
    if (!(c)) {                                              \
      printf("assertion failed: %s\n", #c);                  \
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

/* the registry as a table (--list; also without CUDA) */
static void list_registry(void) {
  printf("%-18s %-30s %-28s %s\n", "family", "test", "bench", "ceiling");
  for (int i = 0; i < kh_n_registry; ++i) {
    const kh_entry *e = &kh_registry[i];
    char t[64];
    snprintf(t, sizeof t, "%s%s", e->test_elsewhere ? "" : "test_",
             e->test_elsewhere ? e->test_elsewhere : e->name);
    printf("%-18s %-30s %-28s %s\n", e->name, t, e->no_bench ? e->no_bench : "yes",
           kh_ceiling_name(e->ceiling));
    printf("    ");
    for (const char *const *l = e->launchers; *l; ++l) printf(" %s", *l);
    printf("\n");
  }
}

static const char usage[] =
    "usage: test_kernels [NAME]            run the tests (of the family or launcher NAME)\n"
    "       test_kernels --bench [NAME]    time the kernels (of the family or launcher NAME)\n"
    "       test_kernels --list            the registry: families, launchers, tests, benchmarks\n";

/* the command line: 0 run, 1 exit 0 (listed), 2 bad usage */
static int parse_args(int argc, char **argv, int *bench, const char **filter) {
  *bench = 0, *filter = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--bench")) {
      *bench = 1;
    } else if (!strcmp(argv[i], "--list")) {
      list_registry();
      return 1;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("%s", usage);
      return 1;
    } else if (argv[i][0] != '-' && !*filter) {
      *filter = argv[i];
    } else {
      fprintf(stderr, "%s", usage);
      return 2;
    }
  }
  if (*filter) {
    int any = 0;
    for (int i = 0; i < kh_n_registry; ++i) any |= kh_entry_selected(&kh_registry[i], *filter);
    if (!any) {
      fprintf(stderr, "no family or launcher '%s' in the registry (--list)\n", *filter);
      return 2;
    }
  }
  return 0;
}

#ifndef COSY_WITH_CUDA

int main(int argc, char **argv) {
  int bench;
  const char *filter;
  const int a = parse_args(argc, argv, &bench, &filter);
  if (a) return a == 1 ? 0 : 2;
  printf("SKIP: built without CUDA\n");
  return 0;
}

#else

#include <math.h>

#include <cuda_runtime_api.h>

#include "bf16_split.h"
#include "dit_elementwise.h"
#include "euler.h"
#include "flow_pack.h"
#include "gemv.h"
#include "kernels.h"
#include "paged_kv.h"
#include "ref/sampling.h"

/* ---------------------------------------------------------------------------------------------
 * helpers: the shared ones of tests/kharness.c under the names the checks use, and the ones only
 * the checks need */

#define CK(call) KH_CK(call)
#define F32 COSY_KDT_F32
#define BF16 COSY_KDT_BF16
#define rng_seed kh_rng_seed
#define rng_next kh_rng_next
#define rnd kh_rnd
#define rnd_int kh_rnd_int
#define f2bf kh_f2bf
#define bf2f kh_bf2f
#define round_dt kh_round_dt
#define dtn kh_dtn
#define dts kh_dts
#define dmalloc kh_dmalloc
#define dfree kh_dfree
#define to_dev kh_to_dev
#define from_dev kh_from_dev
#define dup_i32 kh_dup_i32

static int g_failures; /* failed checks in the current cmocka test */
/* the device as the launchers that take a description see it (filled in main) */
static cosy_kdev g_dev;

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
/* device buffer of n elements of dt filled with NaN */
static void *dpoison(size_t n, cosy_kdtype dt) {
  void *p = dmalloc(n * dts(dt));
  CK(cudaMemset(p, 0xFF, n * dts(dt)));
  return p;
}
static void *dup_dt(float *h, size_t n, cosy_kdtype dt) {
  void *d = dmalloc(n * dts(dt));
  to_dev(d, h, n, dt);
  return d;
}
static float *download(const void *d, size_t n, cosy_kdtype dt) {
  float *h = malloc((n ? n : 1) * sizeof *h);
  assert_non_null(h);
  from_dev(h, d, n, dt);
  return h;
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

void test_norm(void **state) {
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

void test_rope(void **state) {
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

void test_act(void **state) {
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

void test_embed(void **state) {
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

/* n_seq sequences with the given lengths; pages shuffled over a pool bigger than needed */
/* the double reference of n_seq decode rows over the host caches (defined below) */
static void paged_decode_ref(int n_seq, const int *lens, const float *q, int q_stride,
                             const float *kc, const float *vc, const int32_t *bt, int max_pages,
                             int page_size, double scale, double *ref, int out_stride);

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
  paged_decode_ref(n_seq, lens, q, q_stride, kc, vc, bt, max_pages, page_size, scale, ref,
                   out_stride);
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
  free(kc), free(vc), free(q), free(perm), free(bt), free(out), free(ref);
  dfree(dkc), dfree(dvc), dfree(dq), dfree(dbt), dfree(dlens), dfree(dout), dfree(dws);
}

/* The same sequences under every context bucket the LLM uses (256 .. 2048: 4 .. 32 splits of 64,
 * merged through clusters up to 8 splits where the device has them, else through the
 * workspace), with and without clusters: every output bit-identical to the first call's. A
 * request's attention then does not depend on the longest sequence of its batch. (fp32, as the
 * LLM's cache; mismatching floats are the error.) */
static void check_paged_decode_ctx_invariant(void) {
  enum { NS = 5 };
  const int lens[NS] = {1, 63, 64, 65, 250};
  const int nqh = 14, nkh = 2, hd = 64, q_stride = 1152, out_stride = nqh * hd, ps = 16;
  const int ctxs[] = {256, 512, 1024, 2048};
  const int max_pages = 2048 / ps;
  const size_t per = (size_t)nkh * hd, ncache = (size_t)NS * max_pages * ps * per;
  float *kc = fill(ncache, -1.f, 1.f), *vc = fill(ncache, -1.f, 1.f);
  float *q = fill((size_t)NS * q_stride, -3.f, 3.f);
  int32_t *bt = malloc(sizeof(int32_t) * NS * max_pages);
  for (int i = 0; i < NS * max_pages; ++i) bt[i] = (i * 7 + 3) % (NS * max_pages);
  void *dkc = dup_dt(kc, ncache, F32), *dvc = dup_dt(vc, ncache, F32);
  void *dq = dup_dt(q, (size_t)NS * q_stride, F32);
  int32_t *dbt = dup_i32(bt, (size_t)NS * max_pages), *dlens = dup_i32(lens, NS);
  const size_t wsb = cosy_k_paged_decode_workspace(NS, nqh, nkh, 2048);
  void *dws = dmalloc(wsb);
  CK(cudaMemset(dws, 0, wsb));
  float *first = NULL;
  size_t bad = 0;
  int calls = 0;
  for (int c = 0; c < 4; ++c)
    for (int cl = 0; cl < 2; ++cl) {
      cosy_kdev dev = g_dev;
      dev.clusters = cl ? 0 : g_dev.clusters;
      void *dout = dpoison((size_t)NS * out_stride, F32);
      /* the block table's row stride stays max_pages; a smaller bucket reads only its prefix */
      CK(cosy_k_paged_decode(0, F32, dq, q_stride, dkc, dvc, dbt, max_pages, dlens, NS, nqh, nkh,
                             hd, ps, ctxs[c], 0.125f, dout, out_stride, dws, wsb, cl, &dev));
      float *out = download(dout, (size_t)NS * out_stride, F32);
      dfree(dout);
      if (!first) {
        first = out;
      } else {
        for (size_t i = 0; i < (size_t)NS * out_stride; ++i)
          bad += memcmp(&out[i], &first[i], sizeof *out) != 0;
        free(out);
      }
      calls++;
    }
  char sz[96];
  snprintf(sz, sizeof sz, "%d calls, ctx 256..2048, clusters on/off (mismatches as err)", calls);
  report("paged_decode ctx buckets", sz, (double)bad, 0.0, count_nan(first, (size_t)NS * out_stride));
  free(kc), free(vc), free(q), free(bt), free(first);
  dfree(dkc), dfree(dvc), dfree(dq), dfree(dbt), dfree(dlens), dfree(dws);
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
  paged_decode_ref(NS, lens, q, q_stride, kc, vc, bt, max_pages, page_size, scale, ref,
                   out_stride);
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

/* the double reference of n_seq decode rows over the host caches (bt rows of max_pages) */
static void paged_decode_ref(int n_seq, const int *lens, const float *q, int q_stride,
                             const float *kc, const float *vc, const int32_t *bt, int max_pages,
                             int page_size, double scale, double *ref, int out_stride) {
  const int nqh = 14, nkh = 2, hd = 64;
  const size_t per = (size_t)nkh * hd;
  int maxl = 1;
  for (int s = 0; s < n_seq; ++s) maxl = lens[s] > maxl ? lens[s] : maxl;
  const float **kr = malloc((size_t)maxl * sizeof *kr), **vr = malloc((size_t)maxl * sizeof *vr);
  assert_non_null(kr);
  assert_non_null(vr);
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
  free(kr), free(vr);
}

/* how a decode call of max_ctx merges its splits on this device description */
static const char *dec_merge_name(int max_ctx, int clusters) {
  const int splits = (max_ctx + 63) / 64;
  return splits <= 1 ? "1 split" : splits <= 8 && clusters ? "cluster merge" : "global merge";
}

/* The early loads (cosy_k_paged_decode's COSY_K_DECODE_EARLY) without a racing predecessor:
 * the same random sequences (pages shuffled) with and without the flag, with clusters (where the
 * device has them) and without, each launch plain and as a programmatic dependent: every output
 * of the flag bit-identical to the plain kernel's of the same launch (mismatching floats are the
 * error), and within the attention's tolerance of the double reference. The newest token
 * (len - 1), whose K row is loaded after the wait, is in whichever split len puts it. */
static void check_paged_decode_early(int n_seq, const int *lens, int page_size, cosy_kdtype dt,
                                     int max_ctx) {
  const int nqh = 14, nkh = 2, hd = 64, q_stride = 1152, out_stride = nqh * hd;
  const double scale = 0.125;
  const int max_pages = (max_ctx + page_size - 1) / page_size;
  const int n_pages = n_seq * max_pages + 3;
  const size_t per = (size_t)nkh * hd, ncache = (size_t)n_pages * page_size * per;
  const size_t nout = (size_t)n_seq * out_stride;
  float *kc = fill(ncache, -1.f, 1.f), *vc = fill(ncache, -1.f, 1.f);
  float *q = fill((size_t)n_seq * q_stride, -1.5f, 1.5f);
  int32_t *bt = malloc((size_t)n_pages * sizeof *bt);
  assert_non_null(bt);
  for (int i = 0; i < n_pages; ++i) bt[i] = i;
  for (int i = n_pages - 1; i > 0; --i) {
    const int j = rnd_int(i + 1);
    const int32_t t = bt[i];
    bt[i] = bt[j];
    bt[j] = t;
  }
  void *dkc = dup_dt(kc, ncache, dt), *dvc = dup_dt(vc, ncache, dt); /* rounds kc, vc to dt */
  void *dq = dup_dt(q, (size_t)n_seq * q_stride, dt);
  int32_t *dbt = dup_i32(bt, (size_t)n_seq * max_pages), *dlens = dup_i32(lens, n_seq);
  const size_t wsb = cosy_k_paged_decode_workspace(n_seq, nqh, nkh, max_ctx);
  void *dws = wsb ? dmalloc(wsb) : NULL;
  if (dws) CK(cudaMemset(dws, 0, wsb));
  double *ref = dalloc_host(nout);
  paged_decode_ref(n_seq, lens, q, q_stride, kc, vc, bt, max_pages, page_size, scale, ref,
                   out_stride);
  size_t bad = 0, nan = 0;
  double err = 0;
  char merges[64] = "";
  for (int cl = 0; cl < 2; ++cl) {
    cosy_kdev dev = g_dev;
    dev.clusters = cl ? 0 : g_dev.clusters;
    if (cl && !g_dev.clusters) break; /* the same launches again */
    snprintf(merges + strlen(merges), sizeof merges - strlen(merges), "%s%s", cl ? "/" : "",
             dec_merge_name(max_ctx, dev.clusters));
    for (int pdl = 0; pdl < 2; ++pdl) {
      float *o[2];
      for (int early = 0; early < 2; ++early) {
        void *dout = dpoison(nout, dt);
        CK(cosy_k_paged_decode(0, dt, dq, q_stride, dkc, dvc, dbt, max_pages, dlens, n_seq, nqh,
                               nkh, hd, page_size, max_ctx, (float)scale, dout, out_stride, dws,
                               wsb, pdl | (early ? COSY_K_DECODE_EARLY : 0), &dev));
        o[early] = download(dout, nout, dt);
        dfree(dout);
      }
      for (size_t i = 0; i < nout; ++i) bad += memcmp(&o[0][i], &o[1][i], sizeof o[0][i]) != 0;
      nan += count_nan(o[1], nout);
      const double e = rel_l2(o[1], ref, nout);
      err = e > err || isnan(e) ? e : err;
      free(o[0]), free(o[1]);
    }
  }
  char sz[112], ls[40] = "";
  for (int s = 0; s < n_seq && s < 4; ++s)
    snprintf(ls + strlen(ls), sizeof ls - strlen(ls), "%s%d", s ? "," : "", lens[s]);
  snprintf(sz, sizeof sz, "seqs=%d lens=%s%s page=%d maxctx=%d %s %s", n_seq, ls,
           n_seq > 4 ? ",.." : "", page_size, max_ctx, dtn(dt), merges);
  report("paged_decode [early]", sz, err, dt == BF16 ? 1e-2 : 1e-5, nan);
  report("paged_decode [early] bits", sz, (double)bad, 0.0, 0);
  free(kc), free(vc), free(q), free(bt), free(ref);
  dfree(dkc), dfree(dvc), dfree(dq), dfree(dbt), dfree(dlens), dfree(dws);
}

/* The case the early loads exist for: the q|k|v projection (cosy_k_llm_gemv_tc, QKV_ROPE: q and
 * each sequence's newest K and V rows written by its epilogue; its dependents triggered after its
 * own griddepcontrol.wait) launched right before the attention, which is its programmatic
 * dependent, on a stream of their own, as the LLM's decode step runs them (lib/gpu/llm.c
 * layers_gemv). Before each chain the caches are restored with the newest rows NaN and q is
 * poisoned (NaN), so an attention that read either before the projection wrote it would give
 * NaN or other bits. Several rounds (the race depends on timing), each the plain chain, then the
 * flagged one: every output bit-identical to the first plain one, which is checked against the
 * double reference over what the projection wrote (q and the caches downloaded afterwards). */
static void check_paged_decode_early_race(int n_seq, const int *lens, int max_ctx, int clusters) {
  enum { ROUNDS = 12 };
  const int nqh = 14, nkh = 2, hd = 64, H = 896, N = 1152, ps = 16, q_stride = nqh * hd;
  const int out_stride = nqh * hd, max_pages = (max_ctx + ps - 1) / ps;
  const int n_pages = n_seq * max_pages;
  const double scale = 0.125;
  const size_t per = (size_t)nkh * hd, ncache = (size_t)n_pages * ps * per;
  const size_t nout = (size_t)n_seq * out_stride;
  float *x = fill((size_t)n_seq * H, -1.f, 1.f), *w = fill((size_t)N * H, -0.1f, 0.1f);
  float *nw = fill((size_t)H, 0.5f, 1.5f), *bias = fill((size_t)N, -0.5f, 0.5f);
  float *kc = fill(ncache, -1.f, 1.f), *vc = fill(ncache, -1.f, 1.f);
  float invf[32];
  for (int i = 0; i < 32; ++i) invf[i] = (float)pow(1e6, -2.0 * i / 64.0);
  int32_t *bt = malloc((size_t)n_pages * sizeof *bt), pos[16], slots[16];
  assert_non_null(bt);
  assert_true(n_seq <= 16);
  for (int i = 0; i < n_pages; ++i) bt[i] = (i * 7 + 3) % n_pages; /* a permutation (no count
                                                                     * here is a multiple of 7) */
  for (int s = 0; s < n_seq; ++s) {
    pos[s] = lens[s] - 1;
    slots[s] = bt[(size_t)s * max_pages + pos[s] / ps] * ps + pos[s] % ps;
    for (size_t e = 0; e < per; ++e) /* the newest rows: NaN until the projection writes them */
      kc[(size_t)slots[s] * per + e] = vc[(size_t)slots[s] * per + e] = NAN;
  }
  void *dx = dup_dt(x, (size_t)n_seq * H, F32), *dw = dup_dt(w, (size_t)N * H, BF16);
  void *dnw = dup_dt(nw, (size_t)H, F32), *db = dup_dt(bias, (size_t)N, F32);
  void *dinv = dup_dt(invf, 32, F32);
  void *dkc0 = dup_dt(kc, ncache, F32), *dvc0 = dup_dt(vc, ncache, F32);
  void *dkc = dmalloc(ncache * 4), *dvc = dmalloc(ncache * 4), *dq = dmalloc(nout * 4);
  int32_t *dpos = dup_i32(pos, (size_t)n_seq), *dslots = dup_i32(slots, (size_t)n_seq);
  int32_t *dbt = dup_i32(bt, (size_t)n_pages), *dlens = dup_i32(lens, n_seq);
  const size_t wsb = cosy_k_paged_decode_workspace(n_seq, nqh, nkh, max_ctx);
  void *dws = wsb ? dmalloc(wsb) : NULL;
  if (dws) CK(cudaMemset(dws, 0, wsb));
  void *dout = dmalloc(nout * 4);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cosy_llm_gemv_args ga;
  memset(&ga, 0, sizeof ga);
  ga.M = n_seq, ga.N = N, ga.K = H, ga.in_mode = COSY_GEMV_IN_RMSNORM, ga.x = dx, ga.ldx = H;
  ga.norm_w = dnw, ga.eps = 1e-6f, ga.w = dw, ga.bias = db, ga.out_mode = COSY_GEMV_QKV_ROPE;
  ga.y = dq, ga.ldy = q_stride, ga.n_qh = nqh, ga.n_kh = nkh, ga.pos = dpos, ga.slots = dslots;
  ga.inv_freq = dinv, ga.k_cache = dkc, ga.v_cache = dvc, ga.pdl = 1;
  ga.smem_max = (int)g_dev.smem_block, ga.clusters = g_dev.clusters; /* as the LLM passes them */
  cosy_kdev dev = g_dev;
  dev.clusters = clusters && g_dev.clusters;
  float *first = NULL;
  size_t bad = 0, nan = 0;
  for (int r = 0; r < ROUNDS; ++r)
    for (int early = 0; early < 2; ++early) {
      CK(cudaMemcpyAsync(dkc, dkc0, ncache * 4, cudaMemcpyDeviceToDevice, st));
      CK(cudaMemcpyAsync(dvc, dvc0, ncache * 4, cudaMemcpyDeviceToDevice, st));
      CK(cudaMemsetAsync(dq, 0xFF, nout * 4, st));
      CK(cudaMemsetAsync(dout, 0xFF, nout * 4, st));
      CK(cosy_k_llm_gemv_tc(st, &ga));
      CK(cosy_k_paged_decode(st, F32, dq, q_stride, dkc, dvc, dbt, max_pages, dlens, n_seq, nqh,
                             nkh, hd, ps, max_ctx, (float)scale, dout, out_stride, dws, wsb,
                             1 | (early ? COSY_K_DECODE_EARLY : 0), &dev));
      CK(cudaStreamSynchronize(st));
      float *o = download(dout, nout, F32);
      nan += count_nan(o, nout);
      if (!first) {
        first = o;
        continue;
      }
      for (size_t i = 0; i < nout; ++i) bad += memcmp(&o[i], &first[i], sizeof o[i]) != 0;
      free(o);
    }
  /* the reference over what the projection wrote (the last chain's q and caches) */
  float *hq = download(dq, nout, F32);
  float *hk = download(dkc, ncache, F32), *hv = download(dvc, ncache, F32);
  double *ref = dalloc_host(nout);
  paged_decode_ref(n_seq, lens, hq, q_stride, hk, hv, bt, max_pages, ps, scale, ref, out_stride);
  char sz[112], ls[40] = "";
  for (int s = 0; s < n_seq && s < 4; ++s)
    snprintf(ls + strlen(ls), sizeof ls - strlen(ls), "%s%d", s ? "," : "", lens[s]);
  snprintf(sz, sizeof sz, "behind gemv_tc x%d: seqs=%d lens=%s%s maxctx=%d %s%s", ROUNDS, n_seq,
           ls, n_seq > 4 ? ",.." : "", max_ctx, dec_merge_name(max_ctx, dev.clusters),
           g_dev.pdl ? "" : " (no pdl)");
  check("paged_decode [early pdl]", sz, first, ref, nout, 1e-5);
  report("paged_decode [early pdl] bits", sz, (double)bad, 0.0, nan);
  CK(cudaStreamDestroy(st));
  free(x), free(w), free(nw), free(bias), free(kc), free(vc), free(bt), free(first);
  free(hq), free(hk), free(hv), free(ref);
  dfree(dx), dfree(dw), dfree(dnw), dfree(db), dfree(dinv), dfree(dkc0), dfree(dvc0);
  dfree(dkc), dfree(dvc), dfree(dq), dfree(dpos), dfree(dslots), dfree(dbt), dfree(dlens);
  dfree(dws), dfree(dout);
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

void test_attention(void **state) {
  (void)state;
  begin_test(5);
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
  check_paged_decode_ctx_invariant();
  /* the early loads (COSY_K_DECODE_EARLY): len 1; the newest token last of split 0 (64) and first
   * of splits 1 and 2 (65, 129); page boundaries (16, 17, 32, 33); one, several and 64 rows;
   * each merge; fp32 and bf16 caches */
  for (int t = 0; t < 2; ++t) {
    const cosy_kdtype dt = t ? BF16 : F32;
    static const int one[][1] = {{1}, {16}, {17}, {64}, {65}, {128}, {129}, {1000}};
    for (int i = 0; i < 4; ++i) check_paged_decode_early(1, one[i], 16, dt, 64);
    for (int i = 0; i < 8; ++i) check_paged_decode_early(1, one[i], 16, dt, i < 7 ? 512 : 1000);
    check_paged_decode_early(1, one[7], 32, dt, 1024); /* 16 splits */
    const int lens7[] = {1, 16, 17, 64, 65, 128, 129}, lens5[] = {0, 33, 64, 129, 500};
    check_paged_decode_early(7, lens7, 16, dt, 256);
    check_paged_decode_early(7, lens7, 32, dt, 129);
    check_paged_decode_early(5, lens5, 16, dt, 512);
    check_paged_decode_early(5, lens5, 32, dt, 1000);
    const int lens3[] = {33, 1, 64};
    check_paged_decode_early(3, lens3, 16, dt, 64); /* one split, several rows */
    int lens64[64];
    for (int s = 0; s < 64; ++s) lens64[s] = 1 + rnd_int(1000);
    check_paged_decode_early(64, lens64, 16, dt, 1000);
  }
  /* behind the q|k|v projection that writes the newest rows (the LLM's order) */
  {
    const int la[] = {1, 64, 65, 300}, lb[] = {1, 17, 64}, lc[] = {129, 1000};
    check_paged_decode_early_race(4, la, 512, 1);
    check_paged_decode_early_race(4, la, 512, 0);
    check_paged_decode_early_race(3, lb, 64, 1);
    check_paged_decode_early_race(2, lc, 1024, 1);
  }

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

static double *to_double(const float *a, size_t n) {
  double *d = dalloc_host(n);
  for (size_t i = 0; i < n; ++i) d[i] = a[i];
  return d;
}

/* Rows of one bucket (kernels/gemm.cu: one algorithm per power-of-two bucket of M): the first
 * rows of calls with M = 1100, 1500 and 1999 equal the same rows of one call of M = 2048, bit for
 * bit, for the flow's and the LLM's shapes; and those four calls made one heuristic query per
 * shape (bias or not: two at most), not one per M. */
static void check_gemm_rows(int N, int K, cosy_kdtype abdt, cosy_kdtype ydt, int with_bias) {
  const int MB = 2048, ms[3] = {1100, 1500, 1999};
  const long q0 = cosy_gemm_heuristic_queries(g_gemm);
  const size_t nx = (size_t)MB * K, nw = (size_t)N * K, ny = (size_t)MB * N;
  float *x = fill(nx, -1.f, 1.f), *w = fill(nw, -1.f, 1.f), *bias = fill(N, -1.f, 1.f);
  void *dx = dup_dt(x, nx, abdt), *dw = dup_dt(w, nw, abdt);
  float *db = dup_dt(bias, N, F32);
  void *dyb = dpoison(ny, ydt);
  CK(cosy_k_gemm(g_gemm, 0, MB, N, K, abdt, dx, K, dw, with_bias ? db : NULL, ydt, dyb, N, 0));
  float *yb = download(dyb, ny, ydt);
  for (int i = 0; i < 3; ++i) {
    const int M = ms[i];
    void *dy = dpoison((size_t)M * N, ydt);
    CK(cosy_k_gemm(g_gemm, 0, M, N, K, abdt, dx, K, dw, with_bias ? db : NULL, ydt, dy, N, 0));
    float *y = download(dy, (size_t)M * N, ydt);
    double *ref = to_double(yb, (size_t)M * N);
    char sz[96];
    snprintf(sz, sizeof sz, "M=%d in M=%d: N=%d K=%d %s->%s%s", M, MB, N, K, dtn(abdt), dtn(ydt),
             with_bias ? " +bias" : "");
    check("gemm rows", sz, y, ref, (size_t)M * N, 0.0);
    free(y), free(ref);
    dfree(dy);
  }
  const long nq = cosy_gemm_heuristic_queries(g_gemm) - q0;
  char sq[96];
  snprintf(sq, sizeof sq, "N=%d K=%d: %ld heuristic queries for 4 row counts", N, K, nq);
  report("gemm plans", sq, nq <= 2 ? 0.0 : 1.0, 0.0, 0);
  free(x), free(w), free(bias), free(yb);
  dfree(dx), dfree(dw), dfree(db), dfree(dyb);
}

/* cosy_k_gemm_inv: the rows of calls with M = 1, 2, 37, 252, 1100 and 4096 equal the same rows
 * of a call with M = 2048, bit for bit (one split-K-free algorithm for every M: the LLM's
 * prefill), the first call of the smaller ones equals the CPU reference, and no call fell back
 * to a per-M algorithm. */
static void check_gemm_inv(int N, int K) {
  const int MB = 4096, ms[6] = {1, 2, 37, 252, 1100, 2048};
  const size_t nx = (size_t)MB * K, nw = (size_t)N * K, ny = (size_t)MB * N;
  float *x = fill(nx, -1.f, 1.f), *w = fill(nw, -1.f, 1.f);
  void *dx = dup_dt(x, nx, BF16), *dw = dup_dt(w, nw, BF16);
  void *dyb = dpoison(ny, F32);
  const long f0 = cosy_gemm_inv_fallbacks(g_gemm);
  CK(cosy_k_gemm_inv(g_gemm, 0, MB, N, K, BF16, dx, K, dw, NULL, F32, dyb, N, 0));
  float *yb = download(dyb, ny, F32);
  for (int i = 0; i < 6; ++i) {
    const int M = ms[i];
    void *dy = dpoison((size_t)M * N, F32);
    CK(cosy_k_gemm_inv(g_gemm, 0, M, N, K, BF16, dx, K, dw, NULL, F32, dy, N, 0));
    float *y = download(dy, (size_t)M * N, F32);
    double *ref = to_double(yb, (size_t)M * N);
    char sz[96];
    snprintf(sz, sizeof sz, "M=%d in M=%d: N=%d K=%d bf16->f32", M, MB, N, K);
    check("gemm_inv rows", sz, y, ref, (size_t)M * N, 0.0);
    if (i == 2) { /* against the CPU: bf16-rounded inputs, fp32 accumulation */
      float *xb = download(dx, (size_t)M * K, BF16), *wb = download(dw, nw, BF16);
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          double acc = 0;
          for (int k = 0; k < K; ++k) acc += (double)xb[(size_t)m * K + k] * wb[(size_t)n * K + k];
          ref[(size_t)m * N + n] = acc;
        }
      snprintf(sz, sizeof sz, "M=%d N=%d K=%d bf16->f32 vs CPU", M, N, K);
      check("gemm_inv", sz, y, ref, (size_t)M * N, 1e-5);
      free(xb), free(wb);
    }
    free(y), free(ref);
    dfree(dy);
  }
  const long nf = cosy_gemm_inv_fallbacks(g_gemm) - f0;
  char sq[96];
  snprintf(sq, sizeof sq, "N=%d K=%d: %ld calls off the shared algorithm", N, K, nf);
  report("gemm_inv plans", sq, (double)nf, 0.0, 0);
  free(x), free(w), free(yb);
  dfree(dx), dfree(dw), dfree(dyb);
}

/* cosy_k_gemm_gelu: y = gelu_tanh(x W^T + bias) against double, in cosy_gemm_set_gelu_epi's mode
 * `fused`: 1 the default (the fused cuBLASLt epilogue with the fp32 bias, else with the bias in
 * y's type; for bf16 outputs one of the two must have been taken: no new
 * cosy_gemm_epi_fallbacks), 2 the fused form with the bias in y's type forced (bf16 for a bf16
 * y: the reference keeps the fp32 bias, the difference is below the bf16 tolerance), 0 the
 * fallback forced (GEMM + cosy_k_add_bias_gelu).
 * W is scaled by 1.7/sqrt(K) so the pre-activations (about N(0, 0.6) plus a bias in [-1, 1]) lie
 * where GELU is curved. Which GELU (fp32 outputs): the output minus the erf-GELU reference,
 * projected on the difference of the two forms (tanh - erf; rel-L2 ~2e-4 here, far above an fp32
 * output's error, ~3e-8 in a simulation; bf16 rounding, ~2e-3, would swamp it at these sizes):
 * a = 1 for the tanh form, 0 for erf; |a - 1| <= 0.25 required. */
static double gelu_tanh_d(double u) {
  return 0.5 * u * (1.0 + tanh(0.7978845608028654 * (u + 0.044715 * u * u * u)));
}
static double gelu_erf_d(double u) { return 0.5 * u * (1.0 + erf(u / sqrt(2.0))); }

static void check_gemm_gelu(int M, int N, int K, cosy_kdtype ydt, int with_bias, int fused,
                            int ldy_extra) {
  const int ldy = N + ldy_extra;
  const size_t nx = (size_t)M * K, nw = (size_t)N * K, ny = (size_t)M * ldy;
  const float a = 1.7f / sqrtf((float)K);
  float *x = fill(nx, -1.f, 1.f), *w = fill(nw, -a, a), *bias = fill(N, -1.f, 1.f);
  void *dx = dup_dt(x, nx, BF16), *dw = dup_dt(w, nw, BF16);
  float *db = dup_dt(bias, N, F32);
  float *bias_y = malloc((size_t)N * sizeof *bias_y);
  assert_non_null(bias_y);
  memcpy(bias_y, bias, (size_t)N * sizeof *bias_y);
  void *dby = dup_dt(bias_y, N, ydt); /* rounds bias_y, not bias */
  void *dy = dpoison(ny, ydt);
  cosy_gemm_set_gelu_epi(g_gemm, fused);
  const long f0 = cosy_gemm_epi_fallbacks(g_gemm), y0 = cosy_gemm_epi_bias_y(g_gemm);
  CK(cosy_k_gemm_gelu(g_gemm, 0, M, N, K, BF16, dx, K, dw, with_bias ? db : NULL,
                      with_bias ? dby : NULL, ydt, dy, ldy));
  CK(cudaDeviceSynchronize());
  const long nf = cosy_gemm_epi_fallbacks(g_gemm) - f0, nby = cosy_gemm_epi_bias_y(g_gemm) - y0;
  cosy_gemm_set_gelu_epi(g_gemm, 1);
  float *yw = download(dy, ny, ydt);
  const size_t n = (size_t)M * N;
  float *y = malloc(n * sizeof *y);
  assert_non_null(y);
  double *ref = dalloc_host(n), *dif = dalloc_host(n);
  double num = 0, den = 0;
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < N; ++j) {
      double u = with_bias ? bias[j] : 0.0;
      for (int k = 0; k < K; ++k) u += (double)x[(size_t)m * K + k] * w[(size_t)j * K + k];
      const size_t e = (size_t)m * N + j;
      y[e] = yw[(size_t)m * ldy + j];
      ref[e] = gelu_tanh_d(u);
      dif[e] = ref[e] - gelu_erf_d(u);
      num += ((double)y[e] - gelu_erf_d(u)) * dif[e];
      den += dif[e] * dif[e];
    }
  char sz[96];
  snprintf(sz, sizeof sz, "M=%d N=%d K=%d bf16->%s%s%s %s", M, N, K, dtn(ydt),
           with_bias ? " +bias" : "", ldy_extra ? " strided" : "",
           !fused ? "fallback" : nf ? "REFUSED" : nby ? "fused, bias in y type" : "fused");
  /* fp32 outputs: 1e-3 leaves room for a fast tanh in cuBLASLt's epilogue */
  check("gemm_gelu", sz, y, ref, n, ydt == BF16 ? 1e-2 : 1e-3);
  const double form = den > 0 ? num / den : 0.0;
  if (ydt == F32) report("gemm_gelu tanh form", sz, fabs(form - 1.0), 0.25, 0);
  if (fused && ydt == BF16) /* the flow's form: cuBLASLt must take the fused epilogue */
    report("gemm_gelu fused", sz, (double)nf, 0.0, 0);
  if (fused == 2 && ydt == BF16) /* and the forced bias_y form must have been that one */
    report("gemm_gelu bias_y", sz, nf == 0 && nby == 1 ? 0.0 : 1.0, 0.0, 0);
  size_t gap_bad = 0; /* the columns between N and ldy stay untouched (poisoned) */
  for (int m = 0; m < M; ++m)
    for (int j = N; j < ldy; ++j) gap_bad += !isnan(yw[(size_t)m * ldy + j]);
  if (ldy_extra) report("gemm_gelu ldy gap", sz, (double)gap_bad, 0.0, 0);
  free(x), free(w), free(bias), free(bias_y), free(yw), free(y), free(ref), free(dif);
  dfree(dx), dfree(dw), dfree(db), dfree(dby), dfree(dy);
}

void test_gemm(void **state) {
  (void)state;
  begin_test(6);
  CK(cosy_gemm_create(&g_gemm, 0));
  /* COSY_GEMM_SAN_INIT=1 (docs/knobs.md; bench/device_run.sh sanitize, initcheck): outputs
   * cleared before each GEMM, as the library does for that knob */
  const char *san = getenv("COSY_GEMM_SAN_INIT");
  cosy_gemm_set_san_init(g_gemm, san && san[0] == '1');
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
  /* the flow's block GEMMs, input projection and output projection; the LLM's */
  check_gemm_rows(3072, 1024, BF16, BF16, 0);
  check_gemm_rows(1024, 1024, BF16, F32, 0);
  check_gemm_rows(2048, 1024, BF16, BF16, 0);
  check_gemm_rows(1024, 2048, BF16, F32, 0);
  check_gemm_rows(1024, 80, F32, F32, 0);
  check_gemm_rows(80, 1024, BF16, F32, 1);
  check_gemm_rows(1152, 896, BF16, BF16, 1);
  check_gemm_rows(896, 896, BF16, F32, 0);
  check_gemm_rows(9728, 896, BF16, BF16, 0);
  check_gemm_rows(896, 4864, BF16, F32, 0);
  /* the LLM's prefill GEMMs (hi/lo rows) */
  check_gemm_inv(1152, 896);
  check_gemm_inv(896, 896);
  check_gemm_inv(9728, 896);
  check_gemm_inv(896, 4864);
  check_gemm_inv(6761, 896);
  /* and the small test model's */
  check_gemm_inv(256, 128);
  check_gemm_inv(128, 128);
  check_gemm_inv(768, 128);
  check_gemm_inv(128, 384);
  check_gemm_inv(6761, 128);
  { /* cosy_gemm_prewarm: after it, calls of any row count up to M_max query nothing */
    const int N = 640, K = 512, MM = 3000;
    float *x = fill((size_t)MM * K, -1.f, 1.f), *w = fill((size_t)N * K, -1.f, 1.f);
    float *bias = fill(N, -1.f, 1.f);
    void *dx = dup_dt(x, (size_t)MM * K, BF16), *dw = dup_dt(w, (size_t)N * K, BF16);
    float *db = dup_dt(bias, N, F32);
    void *dy = dpoison((size_t)MM * N, F32);
    /* prewarm launches each bucket's algorithm on its x and y (zeroed first): scratch buffers of
     * the same alignment, so that the calls below hit the plans it built */
    void *sx = dup_dt(x, (size_t)MM * K, BF16), *sy = dpoison((size_t)MM * N, F32);
    CK(cosy_gemm_prewarm(g_gemm, 0, MM, N, K, BF16, sx, K, dw, db, F32, sy, N, 0));
    CK(cudaDeviceSynchronize());
    dfree(sx), dfree(sy);
    const long q0 = cosy_gemm_heuristic_queries(g_gemm);
    const int ms[4] = {65, 100, 700, 2999};
    for (int i = 0; i < 4; ++i)
      CK(cosy_k_gemm(g_gemm, 0, ms[i], N, K, BF16, dx, K, dw, db, F32, dy, N, 0));
    const long nq = cosy_gemm_heuristic_queries(g_gemm) - q0;
    char sq[96];
    snprintf(sq, sizeof sq, "after prewarm to %d: %ld queries for M = 65..2999", MM, nq);
    report("gemm prewarm", sq, nq == 0 ? 0.0 : 1.0, 0.0, 0);
    float *y = download(dy, (size_t)300 * N, F32); /* the last call's first rows vs the CPU */
    double *ref = dalloc_host((size_t)300 * N);
    for (int m = 0; m < 300; ++m)
      for (int n = 0; n < N; ++n) {
        double acc = bias[n];
        for (int k = 0; k < K; ++k) acc += (double)x[(size_t)m * K + k] * w[(size_t)n * K + k];
        ref[(size_t)m * N + n] = acc;
      }
    check("gemm", "after prewarm: M=2999 N=640 K=512 bf16->f32 +bias", y, ref, (size_t)300 * N,
          1e-4);
    free(x), free(w), free(bias), free(y), free(ref);
    dfree(dx), dfree(dw), dfree(db), dfree(dy);
  }
  /* cosy_k_gemm_gelu: the flow's ff1 shape (N = 4096, K = 1024), M not a multiple of 8, a
   * bucketed M; fused, forced bias_y form and forced fallback; fp32 outputs, strided y */
  check_gemm_gelu(1, 4096, 1024, BF16, 1, 1, 0);
  check_gemm_gelu(37, 4096, 1024, BF16, 1, 1, 0);
  check_gemm_gelu(203, 4096, 1024, BF16, 1, 1, 0);
  check_gemm_gelu(37, 4096, 1024, BF16, 1, 0, 0);
  check_gemm_gelu(203, 4096, 1024, BF16, 1, 0, 0);
  check_gemm_gelu(37, 4096, 1024, BF16, 1, 2, 0);
  check_gemm_gelu(203, 4096, 1024, BF16, 1, 2, 0);
  check_gemm_gelu(77, 1024, 512, F32, 1, 1, 0);
  check_gemm_gelu(77, 1024, 512, F32, 1, 0, 0);
  check_gemm_gelu(13, 640, 512, F32, 0, 1, 24);
  check_gemm_gelu(13, 640, 512, BF16, 1, 1, 64);
  { /* cosy_gemm_prewarm_gelu: after it, cosy_k_gemm_gelu calls up to M_max query nothing */
    const int N = 1024, K = 256, MM = 600;
    const float a = 1.7f / sqrtf((float)K);
    float *x = fill((size_t)MM * K, -1.f, 1.f), *w = fill((size_t)N * K, -a, a);
    float *bias = fill(N, -1.f, 1.f);
    void *dx = dup_dt(x, (size_t)MM * K, BF16), *dw = dup_dt(w, (size_t)N * K, BF16);
    float *db = dup_dt(bias, N, F32);
    void *dy = dpoison((size_t)MM * N, BF16);
    void *sx = dup_dt(x, (size_t)MM * K, BF16), *sy = dpoison((size_t)MM * N, BF16);
    CK(cosy_gemm_prewarm_gelu(g_gemm, 0, MM, N, K, BF16, sx, K, dw, db, NULL, BF16, sy, N));
    CK(cudaDeviceSynchronize());
    dfree(sx), dfree(sy);
    const long q0 = cosy_gemm_heuristic_queries(g_gemm);
    const int ms[3] = {65, 300, 599};
    for (int i = 0; i < 3; ++i)
      CK(cosy_k_gemm_gelu(g_gemm, 0, ms[i], N, K, BF16, dx, K, dw, db, NULL, BF16, dy, N));
    const long nq = cosy_gemm_heuristic_queries(g_gemm) - q0;
    char sq[96];
    snprintf(sq, sizeof sq, "after prewarm_gelu to %d: %ld queries for M = 65..599", MM, nq);
    report("gemm_gelu prewarm", sq, nq == 0 ? 0.0 : 1.0, 0.0, 0);
    float *y = download(dy, (size_t)100 * N, BF16);
    double *ref = dalloc_host((size_t)100 * N);
    for (int m = 0; m < 100; ++m)
      for (int j = 0; j < N; ++j) {
        double u = bias[j];
        for (int k = 0; k < K; ++k) u += (double)x[(size_t)m * K + k] * w[(size_t)j * K + k];
        ref[(size_t)m * N + j] = gelu_tanh_d(u);
      }
    check("gemm_gelu", "after prewarm: M=599 N=1024 K=256 bf16->bf16 +bias", y, ref,
          (size_t)100 * N, 1e-2);
    free(x), free(w), free(bias), free(y), free(ref);
    dfree(dx), dfree(dw), dfree(db), dfree(dy);
  }
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

/* gemv_tc's K split across the blocks of a cluster: -1 as the device allows (kdevice.h
 * clusters), 0 never (at most 8 parts, as on devices without clusters) */
static int g_tc_clusters = -1;
/* gemv_tc's x fragments once per block (args xfrag, COSY_LLM_XFRAG): 0 per warp, 1 per block */
static int g_tc_xfrag = 0;
/* gemv_tcb's block shape (args tcb_shape): 0 the launcher's rule, 1-3 forced */
static int g_tcb_shape = 0;

/* cosy_k_llm_gemv (gemv.h) against a double-precision loop: M rows, W [N][K] bf16, every
 * prologue / epilogue. QKV_ROPE uses 14 q + 2 k + 2 v heads (N = 1152) and checks q, and the
 * K/V cache rows of the tokens with a slot (one token has none when M > 1). */
static void check_gemv_k(int M, int N, int K, cosy_llm_gemv_in in, cosy_llm_gemv_out out,
                         int with_bias, int pdl, int tc) {
  const int nqh = 14, nkh = 2, n_slots = M > 16 ? M : 16;
  float *x = fill((size_t)M * K, -1.f, 1.f);
  for (int m = 0; m < M; ++m) /* rows of different scale, as residual streams have */
    for (int k = 0; k < K; ++k) x[(size_t)m * K + k] *= 1.f + 3.f * (float)(m % 8);
  float *w = fill((size_t)N * K, -0.1f, 0.1f);
  float *nw = fill((size_t)K, 0.5f, 1.5f);
  float *bias = with_bias ? fill((size_t)N, -0.5f, 0.5f) : NULL;
  const int P = out == COSY_GEMV_SILU_MUL || out == COSY_GEMV_QKV_ROPE ? N / 2 : N;
  const int ny = out == COSY_GEMV_QKV_ROPE ? nqh * 64 : P;
  float *y0 = fill((size_t)M * ny, -1.f, 1.f);
  int32_t *pos = malloc(sizeof(int32_t) * (size_t)M), *slots = malloc(sizeof(int32_t) * (size_t)M);
  float invf[32];
  for (int i = 0; i < 32; ++i) invf[i] = (float)pow(1e6, -2.0 * i / 64.0);
  for (int m = 0; m < M; ++m) { /* distinct slots: the last row's write is the one compared */
    pos[m] = rnd_int(2000);
    slots[m] = M <= 16 ? (m * 5 + 3) % n_slots : m;
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
  ga.smem_max = (int)g_dev.smem_block; /* as the LLM passes it: rows staged where they fit */
  /* tc 1: with the split workspace (x split once per row beyond 8 rows), as the LLM runs it;
   * tc 2: without (every block splits its k-blocks); tc 3: as tc 1 with gemvb (beyond 8 rows
   * the kernel with the weights as mma's B operand, COSY_LLM_GEMVB) */
  const size_t nws = cosy_k_llm_gemv_tc_workspace(M, K);
  void *dws = tc == 1 || tc == 3 ? dpoison(nws / 4, F32) : NULL;
  ga.xs = dws, ga.xs_bytes = dws ? nws : 0;
  ga.gemvb = tc == 3;
  ga.clusters = g_tc_clusters < 0 ? g_dev.clusters : g_tc_clusters;
  ga.smem_sm = (int)g_dev.smem_sm, ga.xfrag = g_tc_xfrag, ga.tcb_shape = g_tcb_shape;
  const int xf_used = tc && cosy_k_llm_gemv_tc_xfrag_used(&ga);
  CK(tc ? cosy_k_llm_gemv_tc(0, &ga) : cosy_k_llm_gemv(0, &ga));
  if (dws) dfree(dws);
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
  snprintf(sz, sizeof sz, "M=%d N=%d K=%d %s->%s%s%s%s", M, N, K, ins[in], outs[out],
           bias ? " +bias" : "", pdl ? " pdl" : "",
           xf_used ? (g_tc_xfrag == 2 ? " xfrag 2" : " xfrag") : "");
  check(tc == 3 ? "llm_gemv_tcb" : tc ? "llm_gemv_tc" : "llm_gemv", sz, y, ref, nref, 1e-4);
  if (out == COSY_GEMV_QKV_ROPE)
    check(tc == 3 ? "llm_gemv_tcb (k/v)" : tc ? "llm_gemv_tc (k/v)" : "llm_gemv (k/v cache)", sz,
          kv_out, kv_ref, nk, 1e-4);
  free(x), free(w), free(nw), free(bias), free(y0), free(y), free(kc), free(vc), free(dot);
  free(ref), free(kref), free(vref), free(kv_out), free(kv_ref), free(pos), free(slots);
  dfree(dx), dfree(dw), dfree(dnw), dfree(db), dfree(dy), dfree(dkc), dfree(dvc), dfree(dpos);
  dfree(dslots), dfree(dinv);
}
static void check_gemv(int M, int N, int K, cosy_llm_gemv_in in, cosy_llm_gemv_out out,
                       int with_bias, int pdl) {
  check_gemv_k(M, N, K, in, out, with_bias, pdl, 0);
}

/* Row groups (groups > 1): R = 8 * G rows in one call give, row for row, the bits of the same row
 * computed alone (M = 1): the decode step's batch invariance. Mismatching floats are the error
 * (tolerance 0). */
static void check_gemv_groups_k(int G, int N, int K, cosy_llm_gemv_in in, cosy_llm_gemv_out out,
                                int tc, int R_tc) {
  const int M = 8, R = tc ? R_tc : M * G, nqh = 14, nkh = 2, n_slots = 2 * R;
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
  float *y0 = out == COSY_GEMV_ADD_F32 ? fill((size_t)R * ny, -1.f, 1.f) : NULL;
  void *dy = y0 ? dup_dt(y0, (size_t)R * ny, F32) : dpoison((size_t)R * ny, F32);
  void *dy1 = y0 ? dup_dt(y0, (size_t)R * ny, F32) : dpoison((size_t)R * ny, F32);
  free(y0);
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
  ga.smem_max = (int)g_dev.smem_block;
  if (tc) ga.M = R, ga.groups = 1;
  const size_t nws = cosy_k_llm_gemv_tc_workspace(R, K);
  /* tc 1: x split once per row; tc 3: the same for the B-operand kernel (gemvb), its rows alone
   * then run the default 8-row kernel: the engine's batch invariance with COSY_LLM_GEMVB=1 */
  void *dws = tc == 1 || tc == 3 ? dpoison(nws / 4, F32) : NULL;
  ga.xs = dws, ga.xs_bytes = dws ? nws : 0;
  ga.gemvb = tc == 3;
  ga.clusters = g_tc_clusters < 0 ? g_dev.clusters : g_tc_clusters;
  ga.smem_sm = (int)g_dev.smem_sm, ga.xfrag = g_tc_xfrag, ga.tcb_shape = g_tcb_shape;
  const int xf_used = tc && cosy_k_llm_gemv_tc_xfrag_used(&ga);
  CK(tc ? cosy_k_llm_gemv_tc(0, &ga) : cosy_k_llm_gemv(0, &ga));
  ga.xs = NULL, ga.xs_bytes = 0;
  for (int m = 0; m < R; ++m) { /* each row alone */
    ga.M = 1, ga.groups = 1;
    ga.x = (const float *)dx + (size_t)m * K;
    ga.y = (float *)dy1 + (size_t)m * ny;
    ga.pos = dpos + m, ga.slots = dslots + m;
    CK(tc ? cosy_k_llm_gemv_tc(0, &ga) : cosy_k_llm_gemv(0, &ga));
  }
  float *y = download(dy, (size_t)R * ny, F32), *y1 = download(dy1, (size_t)R * ny, F32);
  size_t bad = 0;
  for (size_t i = 0; i < (size_t)R * ny; ++i) bad += memcmp(&y[i], &y1[i], sizeof *y) != 0;
  static const char *outs[] = {"store", "add", "silu*up", "qkv+rope"};
  char sz[96];
  if (tc)
    snprintf(sz, sizeof sz, "%d rows%s vs rows alone, N=%d K=%d %s (mismatches as err)", R,
             tc == 3   ? " (gemvb)"
             : tc == 1 ? " (x split first)"
             : xf_used ? (g_tc_xfrag == 2 ? " (xfrag 2)" : " (xfrag)")
                       : "",
             N, K, outs[out]);
  else
    snprintf(sz, sizeof sz, "%d groups of 8 vs rows alone, N=%d K=%d %s (mismatches as err)", G,
             N, K, outs[out]);
  report(tc == 3 ? "llm_gemv_tcb rows" : tc ? "llm_gemv_tc rows" : "llm_gemv groups", sz, (double)bad, 0.0,
         count_nan(y, (size_t)R * ny));
  free(x), free(w), free(nw), free(pos), free(slots), free(y), free(y1);
  dfree(dx), dfree(dw), dfree(dnw), dfree(dy), dfree(dy1), dfree(dkc), dfree(dvc), dfree(dpos);
  dfree(dslots), dfree(dinv);
  if (dws) dfree(dws);
}
static void check_gemv_groups(int G, int N, int K, cosy_llm_gemv_in in, cosy_llm_gemv_out out) {
  check_gemv_groups_k(G, N, K, in, out, 0, 0);
}

/* gemv_tc's x fragments once per block (args xfrag 1, and 2: without staging x) against the
 * per-warp path of the same binary, bit for bit: M rows (tc 1: with the split workspace, which only rows beyond 8 use;
 * tc 2: without), random x, weights, RMSNorm weights, bias and residual; y and, for QKV_ROPE, the
 * K/V cache rows. Where the device's shared memory is that of an H100 / H200 (>= 200 KB an SM)
 * the in-block path must have run for K = 896 and, with clusters, for every K (without
 * clusters long K at many rows does not fit: there both calls take the per-warp path). */
static void check_gemv_xf(int M, int N, int K, cosy_llm_gemv_in in, cosy_llm_gemv_out out,
                          int with_bias, int tc) {
  const int nqh = 14, nkh = 2, n_slots = M > 16 ? M : 16;
  float *x = fill((size_t)M * K, -1.f, 1.f);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) x[(size_t)m * K + k] *= 1.f + 3.f * (float)(m % 8);
  float *w = fill((size_t)N * K, -0.1f, 0.1f);
  float *nw = fill((size_t)K, 0.5f, 1.5f);
  float *bias = with_bias ? fill((size_t)N, -0.5f, 0.5f) : NULL;
  const int P = out == COSY_GEMV_SILU_MUL || out == COSY_GEMV_QKV_ROPE ? N / 2 : N;
  const int ny = out == COSY_GEMV_QKV_ROPE ? nqh * 64 : P;
  float *y0 = fill((size_t)M * ny, -1.f, 1.f);
  int32_t *pos = malloc(sizeof(int32_t) * (size_t)M), *slots = malloc(sizeof(int32_t) * (size_t)M);
  assert_true(pos && slots);
  float invf[32];
  for (int i = 0; i < 32; ++i) invf[i] = (float)pow(1e6, -2.0 * i / 64.0);
  for (int m = 0; m < M; ++m) /* distinct slots */
    pos[m] = rnd_int(2000), slots[m] = M <= 16 ? (m * 5 + 3) % n_slots : m;
  void *dx = dup_dt(x, (size_t)M * K, F32), *dw = dup_dt(w, (size_t)N * K, BF16);
  void *dnw = dup_dt(nw, (size_t)K, F32), *db = bias ? dup_dt(bias, (size_t)N, F32) : NULL;
  int32_t *dpos = dup_i32(pos, (size_t)M), *dslots = dup_i32(slots, (size_t)M);
  void *dinv = dup_dt(invf, 32, F32);
  const size_t ncache = (size_t)n_slots * nkh * 64, nws = cosy_k_llm_gemv_tc_workspace(M, K);
  float *res[3][3];
  int used[3];
  for (int xf = 0; xf < 3; ++xf) {
    void *dy = out == COSY_GEMV_ADD_F32 ? dup_dt(y0, (size_t)M * ny, F32)
                                        : dpoison((size_t)M * ny, F32);
    void *dkc = dpoison(ncache, F32), *dvc = dpoison(ncache, F32);
    void *dws = tc == 1 ? dpoison(nws / 4, F32) : NULL;
    cosy_llm_gemv_args ga;
    memset(&ga, 0, sizeof ga);
    ga.M = M, ga.N = N, ga.K = K, ga.in_mode = in, ga.x = dx, ga.ldx = K, ga.norm_w = dnw;
    ga.eps = 1e-6f, ga.w = dw, ga.bias = db, ga.out_mode = out, ga.y = dy, ga.ldy = ny;
    ga.n_qh = nqh, ga.n_kh = nkh, ga.pos = dpos, ga.slots = dslots, ga.inv_freq = dinv;
    ga.k_cache = dkc, ga.v_cache = dvc, ga.pdl = 1;
    ga.smem_max = (int)g_dev.smem_block, ga.smem_sm = (int)g_dev.smem_sm;
    ga.xs = dws, ga.xs_bytes = dws ? nws : 0;
    ga.clusters = g_tc_clusters < 0 ? g_dev.clusters : g_tc_clusters;
    ga.xfrag = xf;
    used[xf] = cosy_k_llm_gemv_tc_xfrag_used(&ga);
    CK(cosy_k_llm_gemv_tc(0, &ga));
    res[xf][0] = download(dy, (size_t)M * ny, F32);
    res[xf][1] = download(dkc, ncache, F32);
    res[xf][2] = download(dvc, ncache, F32);
    dfree(dy), dfree(dkc), dfree(dvc);
    if (dws) dfree(dws);
  }
  size_t bad = 0;
  const size_t n[3] = {(size_t)M * ny, ncache, ncache};
  for (int xf = 1; xf < 3; ++xf)
    for (int j = 0; j < (out == COSY_GEMV_QKV_ROPE ? 3 : 1); ++j)
      for (size_t i = 0; i < n[j]; ++i) bad += memcmp(&res[0][j][i], &res[xf][j][i], 4) != 0;
  const int clusters = g_tc_clusters < 0 ? g_dev.clusters : g_tc_clusters;
  const int must = g_dev.smem_sm >= 200 * 1024 && (K <= 896 || clusters);
  /* xfrag 2 needs no more shared memory than 1 */
  const int wrong_path = used[0] || (must && !(used[1] && used[2])) || (used[1] && !used[2]);
  static const char *outs[] = {"store", "add", "silu*up", "qkv+rope"};
  char sz[120];
  snprintf(sz, sizeof sz, "%d rows%s N=%d K=%d %s%s%s: %s (mismatches as err)", M,
           tc == 2 ? " (no workspace)" : "", N, K, outs[out], bias ? " +bias" : "",
           clusters ? " [clusters]" : "",
           used[1] ? "in-block vs per-warp" : used[2] ? "in-block (unstaged) vs per-warp"
           : wrong_path ? "IN-BLOCK PATH NOT TAKEN" : "per-warp all (no fit)");
  report("llm_gemv_tc xfrag", sz, (double)bad + (wrong_path ? 1.0 : 0.0), 0.0,
         count_nan(res[1][0], n[0]) + count_nan(res[2][0], n[0]));
  for (int xf = 0; xf < 3; ++xf)
    for (int j = 0; j < 3; ++j) free(res[xf][j]);
  free(x), free(w), free(nw), free(bias), free(y0), free(pos), free(slots);
  dfree(dx), dfree(dw), dfree(dnw), dfree(db), dfree(dpos), dfree(dslots), dfree(dinv);
}

void test_llm_gemv(void **state) {
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
  /* the tensor-core kernel: every row block size (8, 16, 32 rows; several blocks; partial ones),
   * every epilogue; then rows together vs each row alone, bit for bit */
  const int Rs[] = {1, 3, 8, 13, 32, 64, 100};
  for (int a = 0; a < 7; ++a) {
    const int M = Rs[a];
    check_gemv_k(M, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE, 1, a & 1, 1);
    check_gemv_k(M, 896, 896, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, a & 1, 1, 1);
    check_gemv_k(M, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, a & 1, 1, 1);
    check_gemv_k(M, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 0, 0, 1);
    check_gemv_k(M, 6761, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32, 0, 1, 1);
  }
  /* without the split workspace: every block splits x itself (16-row blocks at any R) */
  check_gemv_k(40, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE, 1, 1, 2);
  check_gemv_k(13, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 0, 1, 2);
  check_gemv_k(100, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 0, 1, 2);
  check_gemv_k(1, 37, 72, COSY_GEMV_IN_F32, COSY_GEMV_STORE_F32, 1, 0, 1);     /* tiny, odd N */
  check_gemv_k(5, 48, 40, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 1, 0, 1);  /* K % 32 != 0 */
  check_gemv_k(13, 48, 40, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 1, 1, 1); /* split: part */
  check_gemv_k(45, 40, 72, COSY_GEMV_IN_F32, COSY_GEMV_STORE_F32, 1, 1, 1);    /* tiles, k-blocks */
  check_gemv_k(2, 130, 8192, COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32, 1, 0, 1); /* long K */
  /* 32 rows x 384 staged: 48 KB of dynamic shared memory beside the static arrays (the small
   * test model's down projection, which once failed to launch) */
  check_gemv_k(32, 128, 384, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 0, 1, 1);
  check_gemv_groups_k(0, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE, 1, 64);
  check_gemv_groups_k(0, 896, 896, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 1, 37);
  check_gemv_groups_k(0, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 1, 100);
  check_gemv_groups_k(0, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 1, 24);
  check_gemv_groups_k(0, 6761, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32, 1, 72);
  check_gemv_groups_k(0, 48, 40, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 1, 21);
  check_gemv_groups_k(0, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 2, 48);
  check_gemv_groups_k(0, 896, 896, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 2, 20);
  /* few tiles, long K: 32 K parts, over the 4 blocks of a cluster where the device has them
   * (partial tiles and row blocks, the residual's old values read early) */
  check_gemv_k(1, 40, 2048, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 1, 1, 1);
  check_gemv_k(13, 40, 2048, COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32, 1, 1, 1);
  check_gemv_k(40, 40, 2048, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 0, 1, 1);
  check_gemv_groups_k(0, 40, 2048, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 1, 21);
  /* the model's down projection at 64 rows (x split over 256-k chunks, 32 K parts over a
   * cluster), and a K split over a cluster with partial row blocks */
  check_gemv_groups_k(0, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 1, 64);
  check_gemv_groups_k(0, 40, 2048, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 1, 45);
  /* without clusters (at most 8 K parts in one block): the model's long-K matrix, rows
   * together vs alone */
  g_tc_clusters = 0;
  check_gemv_k(1, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 1, 1, 1);
  check_gemv_k(1, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE, 1, 1, 1);
  check_gemv_groups_k(0, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 1, 24);
  check_gemv_groups_k(0, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 1, 64); /* 8 parts */
  check_gemv_groups_k(0, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 1, 64);
  g_tc_clusters = -1;
  /* gemv_tcb under each block shape forced (the launcher's rule picks among them by matrix and
   * rows): the model's five matrices at 40 rows (a partial last block in each shape), rows
   * together vs each alone, bit for bit, and against the reference */
  for (g_tcb_shape = 1; g_tcb_shape <= 3; ++g_tcb_shape) {
    check_gemv_groups_k(0, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE, 3, 40);
    check_gemv_groups_k(0, 896, 896, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 3, 40);
    check_gemv_groups_k(0, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 3, 40);
    check_gemv_groups_k(0, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 3, 40);
    check_gemv_groups_k(0, 6761, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32, 3, 40);
    check_gemv_k(40, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 1, 1, 3);
  }
  g_tcb_shape = 0;
  /* x's fragments once per block (args xfrag): == the per-warp path bit for bit at 1, 2, 5 and
   * 8 rows and at 16 without the workspace, every prologue / epilogue (the model's five
   * matrices, K = 896 and 4864), with clusters (where the device has them) and without */
  for (int cl = 0; cl < 2; ++cl) {
    g_tc_clusters = cl ? -1 : 0;
    const int Xs[] = {1, 2, 5, 8, 16};
    for (int a = 0; a < 5; ++a) {
      const int M = Xs[a], tc = M > 8 ? 2 : 1;
      check_gemv_xf(M, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE, 1, tc);
      check_gemv_xf(M, 896, 896, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, a & 1, tc);
      check_gemv_xf(M, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, a & 1, tc);
      check_gemv_xf(M, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 0, tc);
      check_gemv_xf(M, 6761, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32, 1, tc);
    }
    check_gemv_xf(5, 48, 40, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 1, 1); /* K % 32 != 0 */
    /* 16-row blocks without the workspace: one partial, several with the last partial */
    check_gemv_xf(13, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 1, 2);
    check_gemv_xf(40, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE, 1, 2);
    check_gemv_xf(3, 40, 2048, COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32, 1, 1); /* 32 parts */
  }
  g_tc_clusters = -1;
  /* ... and against the double-precision reference, and rows together vs alone, with xfrag */
  g_tc_xfrag = 1;
  const int Ys[] = {1, 5, 8, 16};
  for (int a = 0; a < 4; ++a) {
    const int M = Ys[a], tc = M > 8 ? 2 : 1;
    check_gemv_k(M, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE, 1, 1, tc);
    check_gemv_k(M, 896, 896, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, a & 1, 1, tc);
    check_gemv_k(M, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 0, 1, tc);
    check_gemv_k(M, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 0, 0, tc);
    check_gemv_k(M, 6761, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32, 0, 1, tc);
  }
  check_gemv_groups_k(0, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 2, 16);
  check_gemv_groups_k(0, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE, 2, 16);
  check_gemv_groups_k(0, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 2, 16);
  g_tc_xfrag = 2; /* without staging x */
  check_gemv_k(1, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 0, 1, 1);
  check_gemv_k(8, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE, 1, 1, 1);
  check_gemv_groups_k(0, 6761, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32, 2, 16);
  g_tc_xfrag = 0;
  /* the variant with the weights as mma's B operand (gemvb, above 8 rows with the workspace;
   * 16- and 32-row blocks, partial ones): the model's five matrices against the double
   * reference, then rows together vs each row alone (the default kernel), bit for bit */
  const int Rb[] = {9, 16, 21, 32, 40, 64};
  for (int a = 0; a < 6; ++a) {
    const int M = Rb[a];
    check_gemv_k(M, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE, 1, a & 1, 3);
    check_gemv_k(M, 896, 896, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, a & 1, 1, 3);
    check_gemv_k(M, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, a & 1, 1, 3);
    check_gemv_k(M, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 0, a & 1, 3);
    check_gemv_k(M, 6761, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32, 0, 1, 3);
  }
  check_gemv_k(13, 48, 40, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 1, 1, 3); /* K % 32 != 0 */
  check_gemv_k(45, 40, 72, COSY_GEMV_IN_F32, COSY_GEMV_STORE_F32, 1, 1, 3);    /* partial tiles */
  check_gemv_k(40, 40, 2048, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 1, 1, 3);    /* 32 parts */
  const int Rbi[] = {9, 21, 40, 64};
  for (int a = 0; a < 4; ++a) {
    const int R = Rbi[a];
    check_gemv_groups_k(0, 1152, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_QKV_ROPE, 3, R);
    check_gemv_groups_k(0, 896, 896, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 3, R);
    check_gemv_groups_k(0, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 3, R);
    check_gemv_groups_k(0, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 3, R);
    check_gemv_groups_k(0, 6761, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_STORE_F32, 3, R);
  }
  check_gemv_groups_k(0, 48, 40, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 3, 21);
  /* without clusters (at most 8 K parts in one block) */
  g_tc_clusters = 0;
  check_gemv_k(21, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 1, 1, 3);
  check_gemv_k(64, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 0, 1, 3);
  check_gemv_groups_k(0, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 3, 24);
  check_gemv_groups_k(0, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32, 3, 64);
  check_gemv_groups_k(0, 9728, 896, COSY_GEMV_IN_RMSNORM, COSY_GEMV_SILU_MUL, 3, 40);
  g_tc_clusters = -1;
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

void test_sample(void **state) {
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
 * small helpers of the tests below (int and raw buffers) */

static void *dup_bytes(const void *h, size_t bytes) {
  void *d = dmalloc(bytes);
  CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  return d;
}
/* device int32 buffer filled with 0x7F7F7F7F (no launcher writes that value in these tests) */
static int32_t *dpoison_i32(size_t n) {
  int32_t *p = dmalloc(n * 4);
  CK(cudaMemset(p, 0x7F, n * 4));
  return p;
}
static int32_t *download_i32(const int32_t *d, size_t n) {
  int32_t *h = malloc((n ? n : 1) * 4);
  assert_non_null(h);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
  return h;
}
/* exact comparison of int32 outputs: reports the number of mismatches against tolerance 0 */
static void check_i32(const char *op, const char *size, const int32_t *got, const int32_t *ref,
                      size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += got[i] != ref[i];
  report(op, size, (double)bad, 0.0, 0);
}
/* random permutation of 0..n-1 */
static int32_t *rnd_perm(int n) {
  int32_t *p = malloc((n ? n : 1) * sizeof *p);
  assert_non_null(p);
  for (int i = 0; i < n; ++i) p[i] = i;
  for (int i = n - 1; i > 0; --i) {
    const int j = rnd_int(i + 1);
    const int32_t t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  return p;
}

/* ---------------------------------------------------------------------------------------------
 * dit_elementwise.cu and euler.cu: the DiT's element-wise kernels and the Euler step
 * (cosy_k_flow_resid_ln and conv_pos.cu's cosy_k_flow_conv_pos are checked in
 * tests/test_gpu_flow.c) */

/* cos/sin table [P][rot/2][2] of the interleaved RoPE, a = p / 10000^(2i/rot) */
static float *cos_sin_table(int P, int rot) {
  const int half = rot / 2;
  float *t = malloc((size_t)(P ? P : 1) * (half ? half : 1) * 2 * sizeof *t);
  assert_non_null(t);
  for (int p = 0; p < P; ++p)
    for (int i = 0; i < half; ++i) {
      const double a = p / pow(10000.0, 2.0 * i / rot);
      t[((size_t)p * half + i) * 2] = (float)cos(a);
      t[((size_t)p * half + i) * 2 + 1] = (float)sin(a);
    }
  return t;
}

/* qkv_post (B x N rows, position = n) or qkv_post_pos (rows = B * N, position = pos[row]) */
static void check_flow_qkv_post(int B, int N, int D, int rot, int with_pos) {
  const int rows = B * N, P = N + 13, half = rot / 2;
  const size_t n = (size_t)rows * 3 * D;
  float *x = fill(n, -2.f, 2.f), *bias = fill((size_t)3 * D, -0.5f, 0.5f);
  float *cs = cos_sin_table(P, rot);
  int32_t *pos = malloc((size_t)(rows ? rows : 1) * 4);
  assert_non_null(pos);
  for (int r = 0; r < rows; ++r) pos[r] = with_pos ? rnd_int(P) : r % N;
  void *dx = dup_dt(x, n, BF16), *db = dup_dt(bias, (size_t)3 * D, F32);
  void *dcs = dup_dt(cs, (size_t)P * half * 2, F32);
  int32_t *dpos = dup_i32(pos, (size_t)rows);
  if (with_pos)
    CK(cosy_k_flow_qkv_post_pos(0, dx, db, dcs, dpos, rows, D, rot, g_dev.pdl));
  else
    CK(cosy_k_flow_qkv_post(0, dx, db, dcs, B, N, D, rot, 0));
  float *out = download(dx, n, BF16);
  double *ref = dalloc_host(n);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < 3 * D; ++c) {
      const size_t e = (size_t)r * 3 * D + c;
      const int cc = c % D;
      if (c < 2 * D && cc < rot) {
        const int p0 = cc & ~1, i = cc / 2;
        const double a0 = (double)x[e - cc + p0] + bias[c - cc + p0];
        const double a1 = (double)x[e - cc + p0 + 1] + bias[c - cc + p0 + 1];
        const double co = cs[((size_t)pos[r] * half + i) * 2], si = cs[((size_t)pos[r] * half + i) * 2 + 1];
        ref[e] = cc & 1 ? a1 * co + a0 * si : a0 * co - a1 * si;
      } else {
        ref[e] = (double)x[e] + bias[c];
      }
    }
  char sz[96];
  snprintf(sz, sizeof sz, "%dx%dx3x%d rot=%d bf16%s", B, N, D, rot, with_pos ? " pos[]" : "");
  check(with_pos ? "flow_qkv_post_pos" : "flow_qkv_post", sz, out, ref, n, 1e-2);
  free(x), free(bias), free(cs), free(pos), free(out), free(ref);
  dfree(dx), dfree(db), dfree(dcs), dfree(dpos);
}

static void check_flow_add_rows(int B, int N, int D, int shared) {
  const size_t n = (size_t)B * N * D, nxp = shared ? (size_t)N * D : n;
  float *xp = fill(nxp, -2.f, 2.f), *hc = fill(n, -1.f, 1.f);
  void *dxp = dup_dt(xp, nxp, F32), *dhc = dup_dt(hc, n, F32);
  void *dh = dpoison(n, F32), *dhb = dpoison(n, BF16);
  CK(cosy_k_flow_add_rows(0, dxp, shared ? 0 : (int64_t)N * D, dhc, dh, dhb, B, N, D));
  float *h = download(dh, n, F32), *hb = download(dhb, n, BF16);
  double *ref = dalloc_host(n);
  for (size_t e = 0; e < n; ++e) ref[e] = (double)xp[shared ? e % ((size_t)N * D) : e] + hc[e];
  char sz[64];
  snprintf(sz, sizeof sz, "%dx%dx%d%s", B, N, D, shared ? " xp shared" : "");
  check("flow_add_rows: h f32", sz, h, ref, n, 1e-6);
  check("flow_add_rows: hb bf16", sz, hb, ref, n, 1e-2);
  free(xp), free(hc), free(h), free(hb), free(ref);
  dfree(dxp), dfree(dhc), dfree(dh), dfree(dhb);
}

/* mask: bit 0 cond, bit 1 mu, bit 2 spk given (else NULL = zeros) */
static void check_flow_pack_cond(int N, int M, int mask) {
  float *cond = fill((size_t)N * M, -2.f, 2.f), *mu = fill((size_t)N * M, -2.f, 2.f);
  float *spk = fill((size_t)M, -1.f, 1.f);
  void *dc = dup_dt(cond, (size_t)N * M, F32), *dm = dup_dt(mu, (size_t)N * M, F32);
  void *ds = dup_dt(spk, (size_t)M, F32), *dout = dpoison((size_t)N * 3 * M, F32);
  CK(cosy_k_flow_pack_cond(0, dout, mask & 1 ? dc : NULL, mask & 2 ? dm : NULL,
                           mask & 4 ? ds : NULL, N, M));
  float *out = download(dout, (size_t)N * 3 * M, F32);
  double *ref = dalloc_host((size_t)N * 3 * M);
  for (int f = 0; f < N; ++f)
    for (int c = 0; c < M; ++c) {
      double *r = ref + (size_t)f * 3 * M;
      r[c] = mask & 1 ? cond[(size_t)f * M + c] : 0.0;
      r[M + c] = mask & 2 ? mu[(size_t)f * M + c] : 0.0;
      r[2 * M + c] = mask & 4 ? spk[c] : 0.0;
    }
  char sz[64];
  snprintf(sz, sizeof sz, "N=%d M=%d cond%s mu%s spk%s", N, M, mask & 1 ? "" : "=0",
           mask & 2 ? "" : "=0", mask & 4 ? "" : "=0");
  check("flow_pack_cond", sz, out, ref, (size_t)N * 3 * M, 0.0);
  free(cond), free(mu), free(spk), free(out), free(ref);
  dfree(dc), dfree(dm), dfree(ds), dfree(dout);
}

static void check_flow_mu(int ratio, int N, int M) {
  const int rows = (N + ratio - 1) / ratio;
  float *pre = fill((size_t)rows * M, -2.f, 2.f), *xe = fill((size_t)rows * M, -2.f, 2.f);
  void *dp = dup_dt(pre, (size_t)rows * M, F32), *dx = dup_dt(xe, (size_t)rows * M, F32);
  void *dmu = dpoison((size_t)N * M, F32);
  CK(cosy_k_flow_mu(0, dmu, dp, dx, ratio, N, M));
  float *out = download(dmu, (size_t)N * M, F32);
  double *ref = dalloc_host((size_t)N * M);
  for (int f = 0; f < N; ++f)
    for (int c = 0; c < M; ++c)
      ref[(size_t)f * M + c] = (double)pre[(size_t)(f / ratio) * M + c] + xe[(size_t)(f / ratio) * M + c];
  char sz[64];
  snprintf(sz, sizeof sz, "ratio=%d N=%d M=%d", ratio, N, M);
  check("flow_mu", sz, out, ref, (size_t)N * M, 1e-6);
  free(pre), free(xe), free(out), free(ref);
  dfree(dp), dfree(dx), dfree(dmu);
}

/* The step-offset arguments of the flow's cache kernels (dev_off): split an offset `off` into a
 * host part and a device part (a multiple of 8, about half of it; NULL when that is 0), so the
 * tests check that the kernels add the two. */
static const int64_t *dev_part(int64_t off, int64_t *host_part) {
  const int64_t d = (off / 16) * 8;
  *host_part = off - d;
  if (d == 0) return NULL;
  return (const int64_t *)dup_bytes(&d, sizeof d);
}

static void check_flow_euler(int64_t n, float dt, float c1, float c2, int use_dev) {
  float *x = fill((size_t)n, -2.f, 2.f), *vc = fill((size_t)n, -3.f, 3.f);
  float *vu = fill((size_t)n, -3.f, 3.f);
  void *dx = dup_dt(x, (size_t)n, F32), *dvc = dup_dt(vc, (size_t)n, F32);
  void *dvu = dup_dt(vu, (size_t)n, F32);
  /* use_dev: dt comes from device memory (the argument is then a wrong value, to be ignored) */
  void *ddt = use_dev ? dup_bytes(&dt, sizeof dt) : NULL;
  CK(cosy_k_flow_euler(0, dx, dvc, dvu, n, use_dev ? dt + 1.f : dt, (const float *)ddt, c1, c2));
  if (ddt) dfree(ddt);
  float *out = download(dx, (size_t)n, F32);
  double *ref = dalloc_host((size_t)n);
  for (int64_t i = 0; i < n; ++i)
    ref[i] = (double)x[i] + (double)dt * ((double)c1 * vc[i] - (double)c2 * vu[i]);
  char sz[64];
  snprintf(sz, sizeof sz, "n=%lld dt=%.4g cfg %.2g/%.2g", (long long)n, dt, c1, c2);
  check("flow_euler", sz, out, ref, (size_t)n, 1e-5);
  free(x), free(vc), free(vu), free(out), free(ref);
  dfree(dx), dfree(dvc), dfree(dvu);
}

/* qkv_post_store == qkv_post_pos then kv_store, bit for bit (both tested against references
 * above and in test_flow_pack): the qkv rows and the whole pool, layer offset partly on the
 * device as the flow's captured step passes it */
static void check_flow_qkv_post_store(int rows, int D, int rot, int n_slots, int64_t layer_off) {
  const int P = rows + 13, half = rot / 2;
  const size_t n = (size_t)rows * 3 * D, npool = (size_t)n_slots * 2 * D + (size_t)layer_off;
  float *x = fill(n, -2.f, 2.f), *bias = fill((size_t)3 * D, -0.5f, 0.5f);
  float *pool = fill(npool, -2.f, 2.f), *cs = cos_sin_table(P, rot);
  int32_t *pos = malloc((size_t)rows * 4), *perm = rnd_perm(n_slots);
  int64_t *dst = malloc((size_t)rows * sizeof *dst);
  assert_non_null(pos);
  assert_non_null(dst);
  for (int r = 0; r < rows; ++r) {
    pos[r] = rnd_int(P);
    dst[r] = rnd_int(5) == 0 ? -1 : (int64_t)perm[r] * 2 * D;
  }
  void *dx1 = dup_dt(x, n, BF16), *dx2 = dup_dt(x, n, BF16), *db = dup_dt(bias, (size_t)3 * D, F32);
  void *dp1 = dup_dt(pool, npool, BF16), *dp2 = dup_dt(pool, npool, BF16);
  void *dcs = dup_dt(cs, (size_t)P * (half ? half : 1) * 2, F32);
  int32_t *dpos = dup_i32(pos, (size_t)rows);
  void *ddst = dup_bytes(dst, (size_t)rows * sizeof *dst);
  int64_t host_off;
  const int64_t *doff = dev_part(layer_off, &host_off);
  CK(cosy_k_flow_qkv_post_pos(0, dx1, db, dcs, dpos, rows, D, rot, g_dev.pdl));
  CK(cosy_k_flow_kv_store(0, dp1, ddst, host_off, doff, D, dx1, rows, D));
  CK(cosy_k_flow_qkv_post_store(0, dx2, db, dcs, dpos, rows, D, rot, dp2, ddst, host_off, doff, D,
                                g_dev.pdl)); /* PDL after kv_store (where the device has it) */
  float *q1 = download(dx1, n, BF16), *q2 = download(dx2, n, BF16);
  float *p1 = download(dp1, npool, BF16), *p2 = download(dp2, npool, BF16);
  double *rq = to_double(q1, n), *rp = to_double(p1, npool);
  char sz[96];
  snprintf(sz, sizeof sz, "%d rows, D=%d, rot=%d: qkv", rows, D, rot);
  check("flow_qkv_post_store", sz, q2, rq, n, 0.0);
  snprintf(sz, sizeof sz, "%d rows, D=%d, %d slots: pool", rows, D, n_slots);
  check("flow_qkv_post_store", sz, p2, rp, npool, 0.0);
  if (doff) dfree((void *)doff);
  free(x), free(bias), free(pool), free(cs), free(pos), free(perm), free(dst);
  free(q1), free(q2), free(p1), free(p2), free(rq), free(rp);
  dfree(dx1), dfree(dx2), dfree(db), dfree(dp1), dfree(dp2), dfree(dcs), dfree(dpos), dfree(ddst);
}

void test_dit_elementwise(void **state) {
  (void)state;
  begin_test(11);
  check_flow_qkv_post(2, 37, 1024, 64, 0); /* the DiT: rot = head 0 */
  check_flow_qkv_post(1, 5, 64, 64, 0);
  check_flow_qkv_post(2, 50, 128, 24, 0);
  check_flow_qkv_post(1, 73, 1024, 64, 1); /* packed rows, positions from pos[] */
  check_flow_qkv_post(1, 9, 256, 0, 1);    /* bias only */
  check_flow_qkv_post_store(100, 1024, 64, 150, 8 * 1024 * 3);
  check_flow_qkv_post_store(9, 64, 64, 12, 0);
  check_flow_add_rows(2, 37, 1024, 1);
  check_flow_add_rows(2, 37, 1024, 0);
  check_flow_add_rows(1, 3, 4, 0);
  for (int mask = 0; mask < 8; ++mask) check_flow_pack_cond(17, 80, mask);
  check_flow_pack_cond(250, 80, 7);
  check_flow_mu(2, 200, 80);
  check_flow_mu(2, 7, 80); /* odd N: the last source row is used once */
  check_flow_mu(3, 31, 5);
  check_flow_euler(2 * 80 * 250, 0.1f, 1.7f, 0.7f, 0);
  check_flow_euler(5, -0.03125f, 1.f, 0.f, 0);
  check_flow_euler(2 * 80 * 106, 0.0421f, 1.7f, 0.7f, 1);
  end_test();
}

/* ---------------------------------------------------------------------------------------------
 * flow_pack.cu: rows between a packed batch and the flow's cache pages (exact copies) */

static void check_flow_x_gather(int rows, int M, int n_pool_rows, int n_new, int64_t step_off) {
  const size_t npool = (size_t)n_pool_rows * M + (size_t)step_off;
  float *pool = fill(npool, -2.f, 2.f), *xnew = fill((size_t)n_new * M, -2.f, 2.f);
  int64_t *src = malloc((size_t)rows * sizeof *src);
  assert_non_null(src);
  for (int r = 0; r < rows; ++r) {
    const int kind = rnd_int(3);
    src[r] = kind == 0 ? (int64_t)rnd_int(n_pool_rows) * M : kind == 1 ? -1 : -2 - rnd_int(n_new);
  }
  void *dpool = dup_dt(pool, npool, F32), *dnew = dup_dt(xnew, (size_t)n_new * M, F32);
  void *dsrc = dup_bytes(src, (size_t)rows * sizeof *src);
  void *ddst = dpoison((size_t)rows * M, F32);
  int64_t host_off;
  const int64_t *doff = dev_part(step_off, &host_off);
  CK(cosy_k_flow_x_gather(0, ddst, dsrc, dpool, host_off, doff, dnew, rows, M));
  if (doff) dfree((void *)doff);
  float *out = download(ddst, (size_t)rows * M, F32);
  double *ref = dalloc_host((size_t)rows * M);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < M; ++c)
      ref[(size_t)r * M + c] = src[r] >= 0    ? pool[src[r] + step_off + c]
                               : src[r] == -1 ? 0.0
                                              : xnew[(size_t)(-2 - src[r]) * M + c];
  char sz[64];
  snprintf(sz, sizeof sz, "%d rows of %d, pool %d rows", rows, M, n_pool_rows);
  check("flow_x_gather", sz, out, ref, (size_t)rows * M, 0.0);
  free(pool), free(xnew), free(src), free(out), free(ref);
  dfree(dpool), dfree(dnew), dfree(dsrc), dfree(ddst);
}

static void check_flow_x_store(int rows, int M, int n_pool_rows, int64_t step_off) {
  const size_t npool = (size_t)n_pool_rows * M + (size_t)step_off;
  float *pool = fill(npool, -2.f, 2.f), *xnew = fill((size_t)rows * M, -2.f, 2.f);
  int32_t *perm = rnd_perm(n_pool_rows);
  int64_t *dst = malloc((size_t)rows * sizeof *dst);
  assert_non_null(dst);
  for (int r = 0; r < rows; ++r) dst[r] = rnd_int(4) == 0 ? -1 : (int64_t)perm[r] * M;
  void *dpool = dup_dt(pool, npool, F32), *dnew = dup_dt(xnew, (size_t)rows * M, F32);
  void *ddst = dup_bytes(dst, (size_t)rows * sizeof *dst);
  int64_t host_off;
  const int64_t *doff = dev_part(step_off, &host_off);
  CK(cosy_k_flow_x_store(0, dpool, ddst, host_off, doff, dnew, rows, M));
  if (doff) dfree((void *)doff);
  float *out = download(dpool, npool, F32);
  double *ref = to_double(pool, npool);
  for (int r = 0; r < rows; ++r)
    if (dst[r] >= 0)
      for (int c = 0; c < M; ++c) ref[dst[r] + step_off + c] = xnew[(size_t)r * M + c];
  char sz[64];
  snprintf(sz, sizeof sz, "%d rows of %d into %d", rows, M, n_pool_rows);
  check("flow_x_store", sz, out, ref, npool, 0.0);
  free(pool), free(xnew), free(perm), free(dst), free(out), free(ref);
  dfree(dpool), dfree(dnew), dfree(ddst);
}

static void check_flow_kv_store(int rows, int D, int n_slots, int64_t layer_off) {
  /* a slot holds K (D) then V (D) elements: v_off = D */
  const size_t npool = (size_t)n_slots * 2 * D + (size_t)layer_off;
  float *pool = fill(npool, -2.f, 2.f), *qkv = fill((size_t)rows * 3 * D, -2.f, 2.f);
  int32_t *perm = rnd_perm(n_slots);
  int64_t *dst = malloc((size_t)rows * sizeof *dst);
  assert_non_null(dst);
  for (int r = 0; r < rows; ++r) dst[r] = rnd_int(5) == 0 ? -1 : (int64_t)perm[r] * 2 * D;
  void *dpool = dup_dt(pool, npool, BF16), *dq = dup_dt(qkv, (size_t)rows * 3 * D, BF16);
  void *ddst = dup_bytes(dst, (size_t)rows * sizeof *dst);
  int64_t host_off;
  const int64_t *doff = dev_part(layer_off, &host_off);
  CK(cosy_k_flow_kv_store(0, dpool, ddst, host_off, doff, D, dq, rows, D));
  if (doff) dfree((void *)doff);
  float *out = download(dpool, npool, BF16);
  double *ref = to_double(pool, npool);
  for (int r = 0; r < rows; ++r)
    if (dst[r] >= 0)
      for (int c = 0; c < D; ++c) {
        ref[dst[r] + layer_off + c] = qkv[(size_t)r * 3 * D + D + c];
        ref[dst[r] + layer_off + D + c] = qkv[(size_t)r * 3 * D + 2 * D + c];
      }
  char sz[64];
  snprintf(sz, sizeof sz, "%d rows, D=%d, %d slots bf16", rows, D, n_slots);
  check("flow_kv_store", sz, out, ref, npool, 0.0);
  free(pool), free(qkv), free(perm), free(dst), free(out), free(ref);
  dfree(dpool), dfree(dq), dfree(ddst);
}

static void check_rows_gather_f32(int rows, int D, int n_src) {
  float *src = fill((size_t)n_src * D, -2.f, 2.f);
  int32_t *map = malloc((size_t)rows * 4);
  assert_non_null(map);
  for (int r = 0; r < rows; ++r) map[r] = rnd_int(n_src);
  void *ds = dup_dt(src, (size_t)n_src * D, F32), *dd = dpoison((size_t)rows * D, F32);
  int32_t *dmap = dup_i32(map, (size_t)rows);
  CK(cosy_k_rows_gather_f32(0, dd, ds, dmap, rows, D));
  float *out = download(dd, (size_t)rows * D, F32);
  double *ref = dalloc_host((size_t)rows * D);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < D; ++c) ref[(size_t)r * D + c] = src[(size_t)map[r] * D + c];
  char sz[64];
  snprintf(sz, sizeof sz, "%d rows of %d from %d", rows, D, n_src);
  check("rows_gather_f32", sz, out, ref, (size_t)rows * D, 0.0);
  free(src), free(map), free(out), free(ref);
  dfree(ds), dfree(dd), dfree(dmap);
}

static void check_rows_zero_bf16(int n_rows, int D, int total) {
  float *x = fill((size_t)total * D, 0.5f, 2.f); /* nonzero everywhere */
  int32_t *perm = rnd_perm(total);
  void *dx = dup_dt(x, (size_t)total * D, BF16);
  int32_t *dr = dup_i32(perm, (size_t)n_rows);
  CK(cosy_k_rows_zero_bf16(0, dx, dr, n_rows, D));
  float *out = download(dx, (size_t)total * D, BF16);
  double *ref = to_double(x, (size_t)total * D);
  for (int i = 0; i < n_rows; ++i)
    for (int c = 0; c < D; ++c) ref[(size_t)perm[i] * D + c] = 0.0;
  char sz[64];
  snprintf(sz, sizeof sz, "%d of %d rows of %d", n_rows, total, D);
  check("rows_zero_bf16", sz, out, ref, (size_t)total * D, 0.0);
  free(x), free(perm), free(out), free(ref);
  dfree(dx), dfree(dr);
}

void test_flow_pack(void **state) {
  (void)state;
  begin_test(12);
  check_flow_x_gather(150, 80, 200, 60, 3 * 50 * 80);
  check_flow_x_gather(1, 80, 3, 1, 0);
  check_flow_x_gather(77, 5, 40, 10, 7);
  check_flow_x_store(150, 80, 200, 2 * 50 * 80);
  check_flow_x_store(3, 7, 5, 0);
  check_flow_kv_store(100, 1024, 150, 8 * 1024);
  check_flow_kv_store(9, 64, 12, 0);
  check_rows_gather_f32(100, 1024, 300);
  check_rows_gather_f32(3, 4, 2);
  check_rows_zero_bf16(10, 1024, 100);
  check_rows_zero_bf16(1, 8, 1);
  end_test();
}

/* ---------------------------------------------------------------------------------------------
 * cosy_k_attn_dit_paged: block-causal DiT attention over a packed batch with cached keys */

typedef struct dit_seg_case {
  int n_q, cached, Lk_less, row, full;
} dit_seg_case;

/* the one-block launcher (n_split 0), the split one (n_split >= 1), the one with the part
 * count per segment (n_split -1: its cluster items built from hsegs / htiles, the host copies
 * of segs / tiles, n_seg segments) with the test's device, or cosy_k_attn_dit_paged_v2
 * (through cosy_k_attn_dit_paged_v2_stages with the test's device: n_split -2: 64-query tiles,
 * the list tiles, the packed flow's rule (stages 0); -3: 128-query tiles, a list built here from
 * hsegs; -4, -5: the same with the deep K/V pipeline forced, stages 4) */
static cudaError_t dit_paged_call(int n_split, const void *qkv, int D, int n_heads,
                                  const void *segs, const int32_t *tiles, int n_tiles,
                                  const void *pool, int64_t page_elems, int64_t layer_off,
                                  const int64_t *dev_off, int page_frames, const int32_t *ptab,
                                  void *out, int chunk, float scale,
                                  const cosy_k_dit_seg *hsegs, int n_seg,
                                  const int32_t *htiles) {
  if (n_split == -1) { /* only -1: -2 and -3 are v2 (below) */
    const int cap = n_tiles * n_heads;
    int32_t *items = malloc((size_t)(cap > 0 ? cap : 1) * 2 * 4);
    assert_non_null(items);
    int csize = 0;
    const int n_items =
        cosy_k_dit_auto_items(hsegs, n_seg, htiles, n_tiles, n_heads, items, cap, &csize);
    assert_true(n_items >= 0);
    int32_t *ditems = dup_i32(items, (size_t)(n_items > 0 ? n_items : 1) * 2);
    const cudaError_t e = cosy_k_attn_dit_paged_auto(
        0, qkv, D, n_heads, segs, tiles, ditems, n_items, csize > 0 ? csize : 1, pool,
        page_elems, layer_off, dev_off, page_frames, ptab, out, chunk, scale, &g_dev);
    CK(cudaDeviceSynchronize()); /* before the items are freed */
    dfree(ditems);
    free(items);
    return e;
  }
  if (n_split == -2) /* the packed flow's call: the rule on the test's device */
    return cosy_k_attn_dit_paged_v2_stages(0, qkv, D, n_heads, segs, tiles, n_tiles, pool,
                                           page_elems, layer_off, dev_off, page_frames, ptab, out,
                                           chunk, scale, COSY_K_DIT_TILE, 0, &g_dev);
  if (n_split == -4)
    return cosy_k_attn_dit_paged_v2_stages(0, qkv, D, n_heads, segs, tiles, n_tiles, pool,
                                           page_elems, layer_off, dev_off, page_frames, ptab, out,
                                           chunk, scale, COSY_K_DIT_TILE, 4, &g_dev);
  if (n_split == -3 || n_split == -5) {
    int n = 0;
    for (int g = 0; g < n_seg; ++g)
      n += (hsegs[g].n_q + COSY_K_DIT_TILE_WIDE - 1) / COSY_K_DIT_TILE_WIDE;
    int32_t *t2 = malloc((size_t)(n > 0 ? n : 1) * 2 * 4);
    assert_non_null(t2);
    n = 0;
    for (int g = 0; g < n_seg; ++g)
      for (int t = 0; t < hsegs[g].n_q; t += COSY_K_DIT_TILE_WIDE)
        t2[2 * n] = g, t2[2 * n + 1] = t, ++n;
    int32_t *dt2 = dup_i32(t2, (size_t)(n > 0 ? n : 1) * 2);
    const cudaError_t e = cosy_k_attn_dit_paged_v2_stages(
        0, qkv, D, n_heads, segs, dt2, n, pool, page_elems, layer_off, dev_off, page_frames, ptab,
        out, chunk, scale, COSY_K_DIT_TILE_WIDE, n_split == -5 ? 4 : 0, &g_dev);
    CK(cudaDeviceSynchronize()); /* before the tiles are freed */
    dfree(dt2);
    free(t2);
    return e;
  }
  if (n_split == 0)
    return cosy_k_attn_dit_paged(0, qkv, D, n_heads, segs, tiles, n_tiles, pool, page_elems,
                                 layer_off, dev_off, page_frames, ptab, out, chunk, scale);
  return cosy_k_attn_dit_paged_split(0, qkv, D, n_heads, segs, tiles, n_tiles, pool, page_elems,
                                     layer_off, dev_off, page_frames, ptab, out, chunk, scale,
                                     n_split, &g_dev);
}

/* One packed batch against the fp64 reference, with the one-block kernel, with the split
 * kernel at 1, 2, 3, 4 and 8 parts a tile, with cosy_k_attn_dit_paged_v2 at 64- and 128-query
 * tiles ("v2 64", "v2 128": their rows must equal the one-block kernel's bit for bit: both run
 * dit_tile_step of kernels/attention.cu on every key tile a row sees) and with
 * the part count per segment ("auto"; it and the split where the device has clusters). Auto's
 * rows of a segment must also equal, bit for bit, those of the kernel it runs for that
 * segment: the one-block kernel at 1 part
 * (cosy_k_dit_auto_parts), the split kernel at 2, 4 or 8. alone >= 0: that
 * segment is also run by itself (its own one-entry segment table and tile list, so a different
 * segment index, tile count and grid) with each launcher, and its rows must be bit-identical to
 * the batch's: a segment's result does not depend on the rest of the batch. And by itself with
 * its last 30 queries left out (same keys), so that its last tile ends earlier: its other rows
 * stay bit-identical (a row's result does not depend on the rows that share its tile). */
static void check_attn_dit_paged(const dit_seg_case *cs, int n_seg, int n_heads, int page_frames,
                                 int chunk, int alone) {
  const int D = n_heads * 64, ld3 = 3 * D;
  const double scale = 0.125;
  /* page layout: [2 layers][2 CFG rows][K, V][page_frames][D]; the test reads layer 1 */
  const int64_t layer_elems = (int64_t)4 * page_frames * D;
  const int64_t page_elems = 2 * layer_elems, layer_off = layer_elems;
  int total_q = 0, n_pages = 0;
  for (int g = 0; g < n_seg; ++g) {
    total_q += cs[g].n_q;
    n_pages += (cs[g].cached + page_frames - 1) / page_frames;
  }
  const int n_pool_pages = n_pages + 3; /* some pages nobody reads */
  const size_t npool = (size_t)n_pool_pages * page_elems, nqkv = (size_t)total_q * ld3;
  float *pool = fill(npool, -1.5f, 1.5f), *qkv = fill(nqkv, -1.5f, 1.5f);
  int32_t *perm = rnd_perm(n_pool_pages);
  int32_t *ptab = calloc((size_t)(n_pages ? n_pages : 1), 4);
  cosy_k_dit_seg *segs = calloc((size_t)n_seg, sizeof *segs);
  int32_t *tiles = malloc((size_t)(total_q / COSY_K_DIT_TILE + n_seg + 1) * 2 * 4);
  int32_t *tiles1 = malloc((size_t)(total_q / COSY_K_DIT_TILE + n_seg + 1) * 2 * 4);
  int32_t *tiles2 = malloc((size_t)(total_q / COSY_K_DIT_TILE + n_seg + 1) * 2 * 4);
  assert_non_null(ptab);
  assert_non_null(segs);
  assert_non_null(tiles);
  assert_non_null(tiles1);
  assert_non_null(tiles2);
  int row0 = 0, p0 = 0, n_tiles = 0, n_tiles1 = 0, n_tiles2 = 0;
  for (int g = 0; g < n_seg; ++g) {
    segs[g].q_row0 = row0, segs[g].n_q = cs[g].n_q, segs[g].cached = cs[g].cached;
    segs[g].Lk = cs[g].cached + cs[g].n_q - cs[g].Lk_less;
    segs[g].ptab0 = p0, segs[g].row = cs[g].row, segs[g].full = cs[g].full;
    const int np = (cs[g].cached + page_frames - 1) / page_frames;
    for (int j = 0; j < np; ++j) ptab[p0 + j] = perm[p0 + j];
    for (int t0 = 0; t0 < cs[g].n_q; t0 += COSY_K_DIT_TILE) {
      tiles[2 * n_tiles] = g;
      tiles[2 * n_tiles + 1] = t0;
      ++n_tiles;
      if (g == alone) { /* the segment alone: entry 0 of its own table */
        tiles1[2 * n_tiles1] = 0;
        tiles1[2 * n_tiles1 + 1] = t0;
        ++n_tiles1;
        if (t0 < cs[g].n_q - 30) { /* ... and without its last 30 queries */
          tiles2[2 * n_tiles2] = 0;
          tiles2[2 * n_tiles2 + 1] = t0;
          ++n_tiles2;
        }
      }
    }
    row0 += cs[g].n_q, p0 += np;
  }
  void *dpool = dup_dt(pool, npool, BF16), *dqkv = dup_dt(qkv, nqkv, BF16);
  void *dsegs = dup_bytes(segs, (size_t)n_seg * sizeof *segs);
  int32_t *dtiles = dup_i32(tiles, (size_t)n_tiles * 2), *dptab = dup_i32(ptab, (size_t)(n_pages ? n_pages : 1));
  void *dsegs1 = alone >= 0 ? dup_bytes(&segs[alone], sizeof *segs) : NULL;
  int32_t *dtiles1 = alone >= 0 ? dup_i32(tiles1, (size_t)n_tiles1 * 2) : NULL;
  void *dsegs2 = NULL;
  int32_t *dtiles2 = NULL;
  if (alone >= 0) {
    assert_true(cs[alone].n_q > 30);
    cosy_k_dit_seg s2 = segs[alone];
    s2.n_q -= 30; /* Lk kept: the keys of the left-out queries' frames are still read */
    dsegs2 = dup_bytes(&s2, sizeof s2);
    dtiles2 = dup_i32(tiles2, (size_t)n_tiles2 * 2);
  }
  int64_t host_off;
  const int64_t *doff = dev_part(layer_off, &host_off);
  double *ref = dalloc_host((size_t)total_q * D);
  int max_lk = 1;
  for (int g = 0; g < n_seg; ++g) max_lk = segs[g].Lk > max_lk ? segs[g].Lk : max_lk;
  const float **kr = malloc((size_t)max_lk * sizeof *kr), **vr = malloc((size_t)max_lk * sizeof *vr);
  assert_non_null(kr);
  assert_non_null(vr);
  for (int g = 0; g < n_seg; ++g) {
    const cosy_k_dit_seg *sg = &segs[g];
    for (int h = 0; h < n_heads; ++h) {
      for (int f = 0; f < sg->Lk; ++f) {
        if (f < sg->cached) {
          const float *k = pool + (size_t)ptab[sg->ptab0 + f / page_frames] * page_elems +
                           layer_off + (size_t)(2 * sg->row) * page_frames * D +
                           (size_t)(f % page_frames) * D + (size_t)h * 64;
          kr[f] = k;
          vr[f] = k + (size_t)page_frames * D;
        } else {
          const float *r = qkv + (size_t)(sg->q_row0 + f - sg->cached) * ld3 + (size_t)h * 64;
          kr[f] = r + D;
          vr[f] = r + 2 * D;
        }
      }
      for (int i = 0; i < sg->n_q; ++i) {
        const int fi = sg->cached + i;
        int nk = sg->full ? sg->Lk : (fi / chunk + 1) * chunk;
        if (nk > sg->Lk) nk = sg->Lk;
        attn_row_ref(qkv + (size_t)(sg->q_row0 + i) * ld3 + (size_t)h * 64, kr, vr, nk, scale,
                     ref + (size_t)(sg->q_row0 + i) * D + (size_t)h * 64);
      }
    }
  }
  /* -2, -3: v2 at 64 / 128-query tiles (-4, -5: with 4 stages); -1: auto (last: the others are
   * its refs) */
  const int splits[] = {0, 1, 2, 3, 4, 8, -2, -3, -4, -5, -1};
  enum { NSPLITS = sizeof splits / sizeof splits[0] };
  float *outs[NSPLITS] = {NULL};
  for (size_t k = 0; k < NSPLITS; ++k) {
    const int ns = splits[k];
    char nm[40], sz[96];
    if (ns == -1)
      snprintf(nm, sizeof nm, "attn_dit_paged auto");
    else if (ns < -1)
      snprintf(nm, sizeof nm, "attn_dit_paged v2 %d%s", ns == -2 || ns == -4 ? 64 : 128,
               ns <= -4 ? " 4 stages" : "");
    else
      snprintf(nm, sizeof nm, ns ? "attn_dit_paged split %d" : "attn_dit_paged", ns);
    if ((ns >= 2 || ns == -1) && !g_dev.clusters) { /* refused without clusters */
      const cudaError_t e = dit_paged_call(ns, dqkv, D, n_heads, dsegs, dtiles, n_tiles, dpool,
                                           page_elems, host_off, doff, page_frames, dptab, dqkv,
                                           chunk, (float)scale, segs, n_seg, tiles);
      report(nm, "no clusters: cudaErrorNotSupported", e == cudaErrorNotSupported ? 0.0 : 1.0,
             0.0, 0);
      continue;
    }
    void *dout = dpoison((size_t)total_q * D, BF16);
    CK(dit_paged_call(ns, dqkv, D, n_heads, dsegs, dtiles, n_tiles, dpool, page_elems, host_off,
                      doff, page_frames, dptab, dout, chunk, (float)scale, segs, n_seg, tiles));
    float *out = download(dout, (size_t)total_q * D, BF16);
    snprintf(sz, sizeof sz, "%d segs, %d rows, %d heads, pages of %d", n_seg, total_q, n_heads,
             page_frames);
    check(nm, sz, out, ref, (size_t)total_q * D, 1e-2);
    if (ns < -1) { /* v2: the one-block kernel's bits (outs[0]), element for element */
      size_t bad = 0;
      for (size_t i = 0; i < (size_t)total_q * D; ++i)
        bad += memcmp(&out[i], &outs[0][i], sizeof *out) != 0;
      report(nm, "== attn_dit_paged, bit for bit (mismatches)", (double)bad, 0.0, 0);
    }
    if (ns == -1) { /* each segment's rows == those of the kernel auto runs for it */
      size_t bad = 0;
      char parts[64] = "";
      for (int g = 0; g < n_seg; ++g) {
        const int S = cosy_k_dit_auto_parts(segs[g].Lk);
        size_t r = 0;
        while (r < NSPLITS && splits[r] != (S == 1 ? 0 : S)) ++r;
        assert_true(r < NSPLITS && outs[r]);
        const size_t o0 = (size_t)segs[g].q_row0 * D, n1 = (size_t)segs[g].n_q * D;
        for (size_t i = 0; i < n1; ++i)
          bad += memcmp(&out[o0 + i], &outs[r][o0 + i], sizeof *out) != 0;
        const size_t len = strlen(parts);
        if (len + 4 < sizeof parts) snprintf(parts + len, sizeof parts - len, "%s%d", g ? "," : "", S);
      }
      snprintf(sz, sizeof sz, "parts %s: == 1-block / split S (mismatches)", parts);
      report(nm, sz, (double)bad, 0.0, 0);
    }
    for (int v = 0; alone >= 0 && v < 2; ++v) { /* alone; alone without 30 queries */
      void *dout1 = dpoison((size_t)total_q * D, BF16);
      cosy_k_dit_seg s2 = segs[alone];
      s2.n_q -= 30;
      CK(dit_paged_call(ns, dqkv, D, n_heads, v ? dsegs2 : dsegs1, v ? dtiles2 : dtiles1,
                        v ? n_tiles2 : n_tiles1, dpool, page_elems, host_off, doff, page_frames,
                        dptab, dout1, chunk, (float)scale, v ? &s2 : &segs[alone], 1,
                        v ? tiles2 : tiles1));
      float *out1 = download(dout1, (size_t)total_q * D, BF16);
      const size_t o0 = (size_t)segs[alone].q_row0 * D;
      const size_t n1 = (size_t)(segs[alone].n_q - (v ? 30 : 0)) * D;
      size_t bad = 0;
      for (size_t i = 0; i < n1; ++i) bad += memcmp(&out[o0 + i], &out1[o0 + i], sizeof *out) != 0;
      if (v)
        snprintf(sz, sizeof sz, "seg %d alone, %d of its queries (mismatches)", alone,
                 segs[alone].n_q - 30);
      else
        snprintf(sz, sizeof sz, "seg %d alone vs in %d segs (mismatches)", alone, n_seg);
      report(nm, sz, (double)bad, 0.0, count_nan(out1 + o0, n1));
      free(out1);
      dfree(dout1);
    }
    outs[k] = out;
    dfree(dout);
  }
  for (size_t k = 0; k < NSPLITS; ++k) free(outs[k]);
  if (doff) dfree((void *)doff);
  free(pool), free(qkv), free(perm), free(ptab), free(segs), free(tiles), free(tiles1);
  free(tiles2), free(ref), free(kr), free(vr);
  dfree(dpool), dfree(dqkv), dfree(dsegs), dfree(dtiles), dfree(dptab);
  if (alone >= 0) dfree(dsegs1), dfree(dtiles1), dfree(dsegs2), dfree(dtiles2);
}

void test_attn_dit_paged(void **state) {
  (void)state;
  begin_test(13);
  /* {n_q, cached, Lk below cached + n_q, CFG row, full} */
  const dit_seg_case a[] = {
      {75, 0, 0, 0, 0},    /* a first call: no cache, block-causal */
      {75, 0, 0, 1, 0},    /* its unconditional row */
      {50, 100, 0, 0, 0},  /* the next block after two cached ones */
      {50, 100, 0, 1, 0},
      {30, 50, 0, 0, 1},   /* full attention (the last call of an utterance) */
      {130, 120, 20, 1, 0} /* keys end before the last queries' block */
  };
  /* segment 0 alone without 30 queries: its tile's last query sees 50 keys, not 75 (one key
   * tile, not two) */
  check_attn_dit_paged(a, 6, 16, 50, 50, 0);
  const dit_seg_case b[] = {{1, 0, 0, 0, 0}, {64, 64, 0, 1, 0}, {65, 37, 0, 0, 1}};
  check_attn_dit_paged(b, 3, 2, 16, 50, 2);
  const dit_seg_case c[] = {{200, 250, 0, 0, 0}};
  check_attn_dit_paged(c, 1, 4, 50, 50, -1);
  /* the small calls of a live workload (1-3 jobs, 2 CFG rows each): up to 1000 keys (16 key
   * tiles, 2 per part at 8 parts), Lk not a multiple of a tile or of a part, cached + new keys,
   * streaming and full */
  const dit_seg_case d[] = {
      {100, 900, 0, 0, 0}, {100, 900, 0, 1, 0}, /* streaming: the last block sees 1000 keys */
      {60, 907, 0, 0, 1},  {60, 907, 0, 1, 1},  /* full, 967 keys */
      {130, 0, 0, 0, 0},   {130, 0, 0, 1, 0},   /* a first call, 3 query tiles */
  };
  /* segment 4 alone without 30 queries: its second tile's last query sees 100 keys, not 130
   * (two key tiles, not three) */
  check_attn_dit_paged(d, 6, 16, 50, 50, 4);
  /* the part count per segment (auto) on the calls of the bench's "dit call" group: one
   * segment of 50 queries over 1000 keys (8 parts), 60 over 110 (1 part: the one-block bits),
   * 200 over 1000 (4 query tiles, 8 parts each) */
  const dit_seg_case e1[] = {{50, 950, 0, 0, 0}};
  check_attn_dit_paged(e1, 1, 16, 50, 50, 0);
  const dit_seg_case e2[] = {{60, 50, 0, 1, 0}};
  check_attn_dit_paged(e2, 1, 16, 50, 50, 0);
  const dit_seg_case e3[] = {{200, 800, 0, 0, 0}};
  check_attn_dit_paged(e3, 1, 16, 50, 50, 0);
  /* a segment of 8 parts alone vs among six others of 1, 2, 4 and 8 parts (cached pages, CFG
   * rows, full and block-causal, keys ending early): clusters of 8 blocks holding 8 heads of a
   * short segment's tile, 4 x 2 parts, 2 x 4 parts or 1 x 8 */
  const dit_seg_case f[] = {
      {50, 950, 0, 0, 0},  /* 1000 keys: 8 parts */
      {60, 50, 0, 0, 0},   {60, 50, 0, 1, 0}, /* 110 keys: 1 part */
      {100, 300, 0, 1, 0}, /* 400 keys: 4 parts */
      {64, 200, 0, 0, 1},  /* 264 keys, full: 2 parts */
      {130, 0, 0, 1, 0},   /* a first call, 130 keys: 1 part */
      {90, 607, 17, 0, 0}, /* 680 keys, ending before the last queries' block: 8 parts */
  };
  check_attn_dit_paged(f, 7, 16, 50, 50, 0);
  /* 6 heads: a cluster of 8 with 4 heads of 2 parts (or 8 of 1) leaves its last group(s)
   * without a head; pages of 16 frames */
  const dit_seg_case h6[] = {{40, 960, 0, 0, 0}, {64, 200, 0, 1, 0}, {33, 17, 0, 0, 0}};
  check_attn_dit_paged(h6, 3, 6, 16, 50, 1);
  /* a loaded batch as the offline workload packs it (v2's 128-query tiles: 1 or 2 a segment,
   * warps without rows): jobs of 100-200 new frames over 300-1000 keys, both CFG rows, one full;
   * pages of 50 */
  const dit_seg_case l8[] = {
      {150, 300, 0, 0, 0}, {150, 300, 0, 1, 0}, {100, 850, 0, 0, 0}, {100, 850, 0, 1, 0},
      {200, 650, 0, 0, 0}, {200, 650, 0, 1, 0}, {128, 172, 0, 0, 1}, {129, 371, 0, 1, 0},
  };
  check_attn_dit_paged(l8, 8, 16, 50, 50, 4);
  /* pages of one frame and of 7 (the v2 kernel's page = f / page_frames by multiply-high: its
   * page_frames = 1 case, and a divisor of neither 64 nor 50) */
  const dit_seg_case p1[] = {{70, 30, 0, 0, 0}, {40, 45, 0, 1, 1}};
  check_attn_dit_paged(p1, 2, 2, 1, 50, 0);
  check_attn_dit_paged(p1, 2, 2, 7, 50, -1);
  end_test();
}

/* ---------------------------------------------------------------------------------------------
 * cosy_k_paged_prefill: the LLM's causal prefill attention over packed segments, K/V read from
 * scattered fp32 cache pages */

typedef struct pf_case {
  int n, Lk; /* query rows; keys (the rows are positions Lk - n .. Lk - 1) */
} pf_case;

static void check_paged_prefill(const pf_case *cs, int n_seg, int n_qh, int n_kh, int page_size,
                                int stride_pad) {
  const int qd = n_qh * 64, q_stride = qd + stride_pad, out_stride = qd + 2 * stride_pad;
  const size_t tok = (size_t)n_kh * 64; /* floats of one token's K (or V) row */
  const double scale = 0.125;
  int total = 0, pps = 1, used = 0;
  for (int g = 0; g < n_seg; ++g) {
    const int np = (cs[g].Lk + page_size - 1) / page_size;
    total += cs[g].n;
    used += np;
    pps = np + 1 > pps ? np + 1 : pps;
  }
  const int n_pages = used + 5, n_bt = n_seg + 2; /* pages and block-table rows nobody reads */
  const size_t pool = (size_t)n_pages * page_size * tok;
  /* two layers' K and V pools, as lib/gpu/llm.c lays them out; the test reads layer 1 */
  float *cache = fill(4 * pool, -1.5f, 1.5f), *q = fill((size_t)total * q_stride, -2.f, 2.f);
  const float *kc = cache + 2 * pool, *vc = cache + 3 * pool;
  int32_t *perm = rnd_perm(n_pages), *seq_of = rnd_perm(n_bt);
  int32_t *bt = malloc((size_t)n_bt * pps * 4);
  cosy_k_prefill_seg *segs = calloc((size_t)n_seg, sizeof *segs);
  int32_t *tiles = malloc((size_t)(total / COSY_K_PREFILL_TILE + n_seg + 1) * 2 * 4);
  assert_non_null(bt);
  assert_non_null(segs);
  assert_non_null(tiles);
  for (int i = 0; i < n_bt * pps; ++i) bt[i] = rnd_int(n_pages);
  int row0 = 0, p = 0, n_tiles = 0;
  for (int g = 0; g < n_seg; ++g) {
    segs[g].row0 = row0, segs[g].n = cs[g].n, segs[g].Lk = cs[g].Lk, segs[g].seq = seq_of[g];
    const int np = (cs[g].Lk + page_size - 1) / page_size;
    for (int j = 0; j < np; ++j) bt[(size_t)seq_of[g] * pps + j] = perm[p++];
    for (int t0 = 0; t0 < cs[g].n; t0 += COSY_K_PREFILL_TILE) {
      tiles[2 * n_tiles] = g;
      tiles[2 * n_tiles + 1] = t0;
      ++n_tiles;
    }
    row0 += cs[g].n;
  }
  for (int i = n_tiles - 1; i > 0; --i) { /* the tiles in a random order */
    const int j = rnd_int(i + 1);
    for (int c = 0; c < 2; ++c) {
      const int32_t t = tiles[2 * i + c];
      tiles[2 * i + c] = tiles[2 * j + c];
      tiles[2 * j + c] = t;
    }
  }
  float *dcache = dup_dt(cache, 4 * pool, F32), *dq = dup_dt(q, (size_t)total * q_stride, F32);
  int32_t *dbt = dup_i32(bt, (size_t)n_bt * pps), *dtiles = dup_i32(tiles, (size_t)n_tiles * 2);
  void *dsegs = dup_bytes(segs, (size_t)n_seg * sizeof *segs);
  const size_t nout = (size_t)total * out_stride;
  float *dout = dpoison(nout, F32);
  CK(cosy_k_paged_prefill(0, dq, q_stride, dcache + 2 * pool, dcache + 3 * pool, dbt, pps, dsegs,
                          n_seg, dtiles, n_tiles, n_qh, n_kh, 64, page_size, (float)scale, dout,
                          out_stride, &g_dev));
  float *out = download(dout, nout, F32);

  /* reference in double; the columns past n_qh * 64 must stay untouched (NaN) */
  float *got = malloc((size_t)total * qd * sizeof *got);
  double *ref = dalloc_host((size_t)total * qd);
  const float **kr = malloc((size_t)(pps * page_size) * sizeof *kr);
  const float **vr = malloc((size_t)(pps * page_size) * sizeof *vr);
  assert_non_null(got);
  assert_non_null(kr);
  assert_non_null(vr);
  size_t touched = 0;
  for (int r = 0; r < total; ++r) {
    memcpy(got + (size_t)r * qd, out + (size_t)r * out_stride, (size_t)qd * sizeof *got);
    for (int c = qd; c < out_stride; ++c) touched += !isnan(out[(size_t)r * out_stride + c]);
  }
  for (int g = 0; g < n_seg; ++g) {
    const cosy_k_prefill_seg *sg = &segs[g];
    for (int h = 0; h < n_qh; ++h) {
      const int kvh = h / (n_qh / n_kh);
      for (int j = 0; j < sg->Lk; ++j) {
        const size_t slot =
            (size_t)bt[(size_t)sg->seq * pps + j / page_size] * page_size + j % page_size;
        kr[j] = kc + slot * tok + (size_t)kvh * 64;
        vr[j] = vc + slot * tok + (size_t)kvh * 64;
      }
      for (int i = 0; i < sg->n; ++i) {
        const int r = sg->row0 + i, pos = sg->Lk - sg->n + i;
        attn_row_ref(q + (size_t)r * q_stride + (size_t)h * 64, kr, vr, pos + 1, scale,
                     ref + (size_t)r * qd + (size_t)h * 64);
      }
    }
  }
  char sz[96];
  snprintf(sz, sizeof sz, "%d segs, %d rows, %d/%d heads, page %d", n_seg, total, n_qh, n_kh,
           page_size);
  check("paged_prefill", sz, got, ref, (size_t)total * qd, 1e-5);
  report("paged_prefill: pad cols", sz, (double)touched, 0.0, 0);

  /* batch invariance: each segment alone (row 0 of fresh buffers, its own tiles only) gives the
   * packed call's bits */
  size_t differ = 0;
  for (int g = 0; g < n_seg; ++g) {
    cosy_k_prefill_seg one = segs[g];
    one.row0 = 0;
    int32_t t1[2 * (8192 / COSY_K_PREFILL_TILE)];
    int nt = 0;
    for (int t0 = 0; t0 < one.n; t0 += COSY_K_PREFILL_TILE) t1[2 * nt] = 0, t1[2 * nt + 1] = t0, ++nt;
    void *dseg1 = dup_bytes(&one, sizeof one);
    int32_t *dt1 = dup_i32(t1, (size_t)nt * 2);
    float *dq1 = dup_dt(q + (size_t)segs[g].row0 * q_stride, (size_t)one.n * q_stride, F32);
    float *dout1 = dpoison((size_t)one.n * out_stride, F32);
    CK(cosy_k_paged_prefill(0, dq1, q_stride, dcache + 2 * pool, dcache + 3 * pool, dbt, pps,
                            dseg1, 1, dt1, nt, n_qh, n_kh, 64, page_size, (float)scale, dout1,
                            out_stride, &g_dev));
    float *o1 = download(dout1, (size_t)one.n * out_stride, F32);
    for (int i = 0; i < one.n; ++i)
      for (int c = 0; c < qd; ++c) {
        const float a = o1[(size_t)i * out_stride + c];
        const float b = out[(size_t)(segs[g].row0 + i) * out_stride + c];
        differ += memcmp(&a, &b, sizeof a) != 0;
      }
    free(o1);
    dfree(dseg1), dfree(dt1), dfree(dq1), dfree(dout1);
  }
  report("paged_prefill: alone", "== packed, bitwise (differing values)", (double)differ, 0.0, 0);
  free(cache), free(q), free(perm), free(seq_of), free(bt), free(segs), free(tiles), free(out);
  free(got), free(ref), free(kr), free(vr);
  dfree(dcache), dfree(dq), dfree(dbt), dfree(dtiles), dfree(dsegs), dfree(dout);
}

void test_paged_prefill(void **state) {
  (void)state;
  begin_test(14);
  /* the LLM's geometry: 14 query heads on 2 kv heads, pages of 16 positions; whole prompts,
   * chunks after earlier context (n < Lk), single rows, tiles cut at 16 and not */
  const pf_case a[] = {{126, 126}, {1, 1},   {17, 50},   {16, 16}, {33, 200},
                       {64, 64},   {1, 300}, {100, 130}, {5, 37},  {16, 48}};
  check_paged_prefill(a, 10, 14, 2, 16, 0);
  const pf_case b[] = {{40, 40}, {7, 90}, {1, 33}}; /* 8 query heads on one kv head */
  check_paged_prefill(b, 3, 8, 1, 32, 4);
  const pf_case c[] = {{20, 20}, {19, 300}}; /* no GQA, padded strides */
  check_paged_prefill(c, 2, 2, 2, 16, 8);
  end_test();
}

/* ---------------------------------------------------------------------------------------------
 * paged_kv.cu and bf16_split.cu: the GPU LLM's step kernels (gemv.cu's cosy_k_llm_gemv:
 * test_llm_gemv above) */

static void check_llm_decode_prep(int n, int n_emb, int H, int n_slots, int bt_all_stride,
                                  int bt_stride, int page_size) {
  float *emb = fill((size_t)n_emb * H, -1.f, 1.f);
  int32_t *in = malloc((size_t)3 * n * 4), *bt_all = malloc((size_t)n_slots * bt_all_stride * 4);
  assert_non_null(in);
  assert_non_null(bt_all);
  for (int i = 0; i < n_slots * bt_all_stride; ++i) bt_all[i] = rnd_int(1000);
  for (int i = 0; i < n; ++i) {
    const int kind = rnd_int(8);
    in[i] = kind == 0 ? n_emb + rnd_int(5) : kind == 1 ? -1 - rnd_int(3) : rnd_int(n_emb);
    in[n + i] = kind == 2 ? -1 : kind == 3 ? n_slots + rnd_int(3) : rnd_int(n_slots);
    in[2 * n + i] = kind == 4 ? bt_all_stride * page_size + rnd_int(4) : rnd_int(bt_all_stride * page_size);
  }
  void *demb = dup_dt(emb, (size_t)n_emb * H, BF16);
  int32_t *din = dup_i32(in, (size_t)3 * n), *dbt_all = dup_i32(bt_all, (size_t)n_slots * bt_all_stride);
  void *dh = dpoison((size_t)n * H, F32);
  int32_t *dpos = dpoison_i32(n), *dslots = dpoison_i32(n), *dlens = dpoison_i32(n);
  int32_t *dbt = dpoison_i32((size_t)n * bt_stride);
  CK(cosy_k_llm_decode_prep(0, din, n, demb, n_emb, H, dbt_all, bt_all_stride, n_slots, page_size,
                            dh, dpos, dslots, dlens, dbt, bt_stride));
  float *h = download(dh, (size_t)n * H, F32);
  int32_t *pos = download_i32(dpos, n), *slots = download_i32(dslots, n);
  int32_t *lens = download_i32(dlens, n), *bt = download_i32(dbt, (size_t)n * bt_stride);
  double *rh = dalloc_host((size_t)n * H);
  int32_t *ri = malloc((size_t)n * (3 + bt_stride) * 4);
  assert_non_null(ri);
  int32_t *rpos = ri, *rslots = ri + n, *rlens = ri + 2 * n, *rbt = ri + 3 * n;
  for (int i = 0; i < n; ++i) {
    const int tok = in[i], seq = in[n + i], p = in[2 * n + i];
    const int real = seq >= 0 && seq < n_slots && p >= 0 && p < bt_all_stride * page_size;
    for (int d = 0; d < H; ++d)
      rh[(size_t)i * H + d] = real && tok >= 0 && tok < n_emb ? emb[(size_t)tok * H + d] : 0.0;
    for (int j = 0; j < bt_stride; ++j)
      rbt[(size_t)i * bt_stride + j] = real ? bt_all[(size_t)seq * bt_all_stride + j] : 0;
    rpos[i] = real ? p : 0;
    rslots[i] = real ? bt_all[(size_t)seq * bt_all_stride + p / page_size] * page_size + p % page_size : -1;
    rlens[i] = real ? p + 1 : 0;
  }
  char sz[96];
  snprintf(sz, sizeof sz, "n=%d H=%d slots=%d bt %d/%d page %d", n, H, n_slots, bt_stride,
           bt_all_stride, page_size);
  check("llm_decode_prep: h", sz, h, rh, (size_t)n * H, 0.0);
  check_i32("llm_decode_prep: pos", sz, pos, rpos, (size_t)n);
  check_i32("llm_decode_prep: slots", sz, slots, rslots, (size_t)n);
  check_i32("llm_decode_prep: lens", sz, lens, rlens, (size_t)n);
  check_i32("llm_decode_prep: bt", sz, bt, rbt, (size_t)n * bt_stride);
  free(emb), free(in), free(bt_all), free(h), free(pos), free(slots), free(lens), free(bt);
  free(rh), free(ri);
  dfree(demb), dfree(din), dfree(dbt_all), dfree(dh), dfree(dpos), dfree(dslots), dfree(dlens);
  dfree(dbt);
}

static void check_llm_rope_append(int n_tok, int n_qh, int n_kh, int stride_extra, int with_lo,
                                  int with_bias) {
  const int nh = n_qh + 2 * n_kh, stride = nh * 64 + stride_extra, q_stride = n_qh * 64 + 4;
  const int n_slots = n_tok + 9;
  const size_t nx = (size_t)n_tok * stride, ncache = (size_t)n_slots * n_kh * 64;
  float *qkv = fill(nx, -2.f, 2.f), *lo = fill(nx, -0.01f, 0.01f);
  float *bias = fill((size_t)nh * 64, -0.5f, 0.5f);
  float *kc = fill(ncache, -1.f, 1.f), *vc = fill(ncache, -1.f, 1.f);
  float inv[32];
  for (int i = 0; i < 32; ++i) inv[i] = (float)(1.0 / pow(1e6, 2.0 * i / 64));
  int32_t *pos = malloc((size_t)n_tok * 4), *perm = rnd_perm(n_slots);
  int32_t *slots = malloc((size_t)n_tok * 4);
  assert_non_null(pos);
  assert_non_null(slots);
  for (int t = 0; t < n_tok; ++t) {
    pos[t] = rnd_int(3000);
    slots[t] = rnd_int(6) == 0 ? -1 : perm[t];
  }
  void *dqkv = dup_dt(qkv, nx, F32), *dlo = dup_dt(lo, nx, F32);
  void *db = dup_dt(bias, (size_t)nh * 64, F32), *dinv = dup_dt(inv, 32, F32);
  void *dkc = dup_dt(kc, ncache, F32), *dvc = dup_dt(vc, ncache, F32);
  int32_t *dpos = dup_i32(pos, n_tok), *dslots = dup_i32(slots, n_tok);
  void *dq = dpoison((size_t)n_tok * q_stride, F32);
  CK(cosy_k_llm_rope_append(0, dqkv, with_lo ? dlo : NULL, stride, with_bias ? db : NULL, n_tok,
                            n_qh, n_kh, dpos, dslots, dinv, dq, q_stride, dkc, dvc));
  float *q = download(dq, (size_t)n_tok * q_stride, F32);
  float *okc = download(dkc, ncache, F32), *ovc = download(dvc, ncache, F32);
  double *rq = dalloc_host((size_t)n_tok * q_stride), *rk = to_double(kc, ncache);
  double *rv = to_double(vc, ncache);
  for (int t = 0; t < n_tok; ++t) {
    for (int c = n_qh * 64; c < q_stride; ++c) rq[(size_t)t * q_stride + c] = NAN; /* untouched */
    for (int hd = 0; hd < nh; ++hd) {
      double x[64];
      for (int d = 0; d < 64; ++d) {
        const size_t o = (size_t)t * stride + (size_t)hd * 64 + d;
        x[d] = (double)qkv[o] + (with_lo ? (double)lo[o] : 0.0) +
               (with_bias ? (double)bias[hd * 64 + d] : 0.0);
      }
      if (hd < n_qh + n_kh)
        for (int i = 0; i < 32; ++i) {
          const double a = (double)((float)pos[t] * inv[i]); /* the fp32 angle of the header */
          const double x1 = x[i], x2 = x[i + 32];
          x[i] = x1 * cos(a) - x2 * sin(a);
          x[i + 32] = x2 * cos(a) + x1 * sin(a);
        }
      double *dst = NULL;
      if (hd < n_qh)
        dst = rq + (size_t)t * q_stride + (size_t)hd * 64;
      else if (slots[t] >= 0)
        dst = (hd < n_qh + n_kh ? rk : rv) +
              ((size_t)slots[t] * n_kh + (hd < n_qh + n_kh ? hd - n_qh : hd - n_qh - n_kh)) * 64;
      if (dst)
        for (int d = 0; d < 64; ++d) dst[d] = x[d];
    }
  }
  /* q's padding columns were never written (NaN in both): compare only the head columns */
  double num = 0, den = 0;
  size_t unwritten = 0;
  for (int t = 0; t < n_tok; ++t)
    for (int c = 0; c < n_qh * 64; ++c) {
      const size_t e = (size_t)t * q_stride + c;
      if (isnan(q[e])) {
        ++unwritten;
        continue;
      }
      num += (q[e] - rq[e]) * (q[e] - rq[e]);
      den += rq[e] * rq[e];
    }
  char sz[96];
  snprintf(sz, sizeof sz, "%d tok %d/%d heads%s%s", n_tok, n_qh, n_kh, with_lo ? " +lo" : "",
           with_bias ? " +bias" : "");
  report("llm_rope_append: q", sz, sqrt(num / den), 1e-5, unwritten);
  check("llm_rope_append: k cache", sz, okc, rk, ncache, 1e-5);
  check("llm_rope_append: v cache", sz, ovc, rv, ncache, 1e-5);
  free(qkv), free(lo), free(bias), free(kc), free(vc), free(pos), free(perm), free(slots);
  free(q), free(okc), free(ovc), free(rq), free(rk), free(rv);
  dfree(dqkv), dfree(dlo), dfree(db), dfree(dinv), dfree(dkc), dfree(dvc), dfree(dpos);
  dfree(dslots), dfree(dq);
}

/* hi + lo (two bf16 buffers of n) as floats, and hi alone */
static void download_hilo(const void *dhi, const void *dlo, size_t n, float **sum, float **hi) {
  float *l = download(dlo, n, BF16);
  *hi = download(dhi, n, BF16);
  *sum = malloc((n ? n : 1) * sizeof **sum);
  assert_non_null(*sum);
  for (size_t i = 0; i < n; ++i) (*sum)[i] = (*hi)[i] + l[i];
  free(l);
}

static void check_llm_norm_split(int M, int H, int with_delta) {
  const size_t n = (size_t)M * H;
  float *h = fill(n, -2.f, 2.f), *d = fill(n, -0.5f, 0.5f), *dl = fill(n, -1e-3f, 1e-3f);
  float *w = fill((size_t)H, 0.5f, 1.5f);
  void *dh = dup_dt(h, n, F32), *dd = dup_dt(d, n, F32), *ddl = dup_dt(dl, n, F32);
  void *dw = dup_dt(w, (size_t)H, F32), *dhi = dpoison(n, BF16), *dlo = dpoison(n, BF16);
  CK(cosy_k_llm_norm_split(0, dh, with_delta ? dd : NULL, with_delta ? ddl : NULL, dw,
                           1e-6f, dhi, dlo, M, H));
  float *oh = download(dh, n, F32), *sum, *hi;
  download_hilo(dhi, dlo, n, &sum, &hi);
  double *rh = dalloc_host(n), *ry = dalloc_host(n);
  for (int m = 0; m < M; ++m) {
    double ss = 0;
    for (int i = 0; i < H; ++i) {
      const size_t e = (size_t)m * H + i;
      rh[e] = (double)h[e] + (with_delta ? (double)d[e] + dl[e] : 0.0);
      ss += rh[e] * rh[e];
    }
    const double r = 1.0 / sqrt(ss / H + 1e-6);
    for (int i = 0; i < H; ++i) ry[(size_t)m * H + i] = w[i] * rh[(size_t)m * H + i] * r;
  }
  char sz[64];
  snprintf(sz, sizeof sz, "%dx%d%s", M, H, with_delta ? " +delta" : "");
  check("llm_norm_split: h", sz, oh, rh, n, 1e-6);
  check("llm_norm_split: hi+lo", sz, sum, ry, n, 1e-5);
  check("llm_norm_split: hi", sz, hi, ry, n, 1e-2);
  free(h), free(d), free(dl), free(w), free(oh), free(sum), free(hi), free(rh), free(ry);
  dfree(dh), dfree(dd), dfree(ddl), dfree(dw), dfree(dhi), dfree(dlo);
}

static void check_llm_split(int M, int K, int ldx) {
  float *x = fill((size_t)M * ldx, -3.f, 3.f);
  void *dx = dup_dt(x, (size_t)M * ldx, F32);
  void *dhi = dpoison((size_t)M * K, BF16), *dlo = dpoison((size_t)M * K, BF16);
  CK(cosy_k_llm_split(0, dx, ldx, dhi, dlo, M, K));
  float *sum, *hi;
  download_hilo(dhi, dlo, (size_t)M * K, &sum, &hi);
  double *ref = dalloc_host((size_t)M * K);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) ref[(size_t)m * K + k] = x[(size_t)m * ldx + k];
  char sz[64];
  snprintf(sz, sizeof sz, "%dx%d ldx %d", M, K, ldx);
  check("llm_split: hi+lo", sz, sum, ref, (size_t)M * K, 1e-5);
  check("llm_split: hi", sz, hi, ref, (size_t)M * K, 1e-2);
  free(x), free(sum), free(hi), free(ref);
  dfree(dx), dfree(dhi), dfree(dlo);
}

static void check_llm_silu_split(int M, int I) {
  const size_t n = (size_t)M * 2 * I;
  float *gu = fill(n, -4.f, 4.f), *gl = fill(n, -1e-3f, 1e-3f);
  void *dgu = dup_dt(gu, n, F32), *dgl = dup_dt(gl, n, F32);
  void *dhi = dpoison((size_t)M * I, BF16), *dlo = dpoison((size_t)M * I, BF16);
  CK(cosy_k_llm_silu_split(0, dgu, dgl, I, dhi, dlo, M));
  float *sum, *hi;
  download_hilo(dhi, dlo, (size_t)M * I, &sum, &hi);
  double *ref = dalloc_host((size_t)M * I);
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < I; ++j) {
      const size_t o = (size_t)m * 2 * I + j;
      const double g = (double)gu[o] + gl[o], u = (double)gu[o + I] + gl[o + I];
      ref[(size_t)m * I + j] = silu_d(g) * u;
    }
  char sz[64];
  snprintf(sz, sizeof sz, "%dx%d", M, I);
  check("llm_silu_split: hi+lo", sz, sum, ref, (size_t)M * I, 1e-5);
  check("llm_silu_split: hi", sz, hi, ref, (size_t)M * I, 1e-2);
  free(gu), free(gl), free(sum), free(hi), free(ref);
  dfree(dgu), dfree(dgl), dfree(dhi), dfree(dlo);
}

static void check_llm_add(int64_t n) {
  float *a = fill((size_t)n, -2.f, 2.f), *b = fill((size_t)n, -2.f, 2.f);
  void *da = dup_dt(a, (size_t)n, F32), *db = dup_dt(b, (size_t)n, F32);
  void *dout = dpoison((size_t)n, F32);
  CK(cosy_k_llm_add(0, da, db, dout, n));
  float *out = download(dout, (size_t)n, F32);
  double *ref = dalloc_host((size_t)n);
  for (int64_t i = 0; i < n; ++i) ref[i] = (double)a[i] + b[i];
  char sz[32];
  snprintf(sz, sizeof sz, "n=%lld", (long long)n);
  check("llm_add", sz, out, ref, (size_t)n, 1e-6);
  free(a), free(b), free(out), free(ref);
  dfree(da), dfree(db), dfree(dout);
}

void test_llm_step_ops(void **state) {
  (void)state;
  begin_test(14);
  check_llm_decode_prep(64, 6761, 896, 70, 63, 63, 16);
  check_llm_decode_prep(5, 100, 64, 3, 8, 4, 32); /* bt_stride < bt_all_stride */
  check_llm_rope_append(1, 14, 2, 0, 1, 1);
  check_llm_rope_append(64, 14, 2, 0, 1, 1);
  check_llm_rope_append(300, 14, 2, 8, 0, 1);
  check_llm_rope_append(17, 14, 2, 0, 0, 0);
  check_llm_rope_append(9, 4, 4, 0, 1, 0);
  check_llm_norm_split(1, 896, 1);
  check_llm_norm_split(64, 896, 1);
  check_llm_norm_split(300, 896, 0);
  check_llm_norm_split(3, 100, 1);
  check_llm_split(300, 896, 896);
  check_llm_split(5, 4864, 4864 + 16);
  check_llm_silu_split(1, 4864);
  check_llm_silu_split(300, 4864);
  check_llm_silu_split(2, 3);
  check_llm_add(300 * 896);
  check_llm_add(1);
  end_test();
}

/* ---------------------------------------------------------------------------------------------
 * argument checks: launchers refuse what a caller could get wrong */

void test_args(void **state) {
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
  const size_t ws = cosy_k_paged_decode_workspace(4, 14, 2, 1000);
  bad += ws == 0; /* long contexts are split */
  bad += cosy_k_paged_decode(0, BF16, d, 1152, d, d, (const int32_t *)d, 63, (const int32_t *)d, 4,
                             14, 2, 64, 16, 1000, 0.125f, d, 896, d, ws - 1, 0, &g_dev) !=
         cudaErrorInvalidValue; /* workspace too small */
  bad += cosy_k_paged_decode(0, BF16, d, 1152, d, d, (const int32_t *)d, 10, (const int32_t *)d, 4,
                             14, 2, 64, 16, 1000, 0.125f, d, 896, d, 4096, 0, &g_dev) !=
         cudaErrorInvalidValue; /* max_ctx beyond max_pages * page_size */
  bad += cosy_k_paged_decode(0, BF16, d, 1152, d, d, (const int32_t *)d, 63, (const int32_t *)d, 4,
                             14, 2, 64, 16, 1000, 0.125f, d, 896, d, ws, 4 | COSY_K_DECODE_EARLY,
                             &g_dev) != cudaErrorInvalidValue; /* pdl: an unknown bit */
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
  bad += cosy_k_flow_qkv_post(0, (cosy_bf16 *)d, d, d, 1, 4, 100, 64, 0) !=
         cudaErrorInvalidValue; /* D % 8 */
  bad += cosy_k_flow_kv_store(0, (cosy_bf16 *)d + 1, (const int64_t *)d, 0, NULL, 64,
                              (const cosy_bf16 *)d, 1, 64) != cudaErrorInvalidValue; /* unaligned */
  bad += cosy_k_flow_euler(0, d, d, d, -1, 0.1f, NULL, 1.f, 0.f) != cudaErrorInvalidValue;
  bad += cosy_k_rows_gather_f32(0, d, d, (const int32_t *)d, 1, 6) != cudaErrorInvalidValue;
  bad += cosy_k_attn_dit_paged(0, (const cosy_bf16 *)d, 1024, 8, (const cosy_k_dit_seg *)d,
                               (const int32_t *)d, 1, (const cosy_bf16 *)d, 0, 0, NULL, 50,
                               (const int32_t *)d, (cosy_bf16 *)d, 50, 0.125f) !=
         cudaErrorInvalidValue; /* 8 heads of 64 != D */
  bad += cosy_k_attn_dit_paged_v2(0, (const cosy_bf16 *)d, 1024, 16, (const cosy_k_dit_seg *)d,
                                  (const int32_t *)d, 1, (const cosy_bf16 *)d, 0, 0, NULL, 50,
                                  (const int32_t *)d, (cosy_bf16 *)d, 50, 0.125f, 32) !=
         cudaErrorInvalidValue; /* tile_q neither 64 nor 128 */
  bad += cosy_k_attn_dit_paged_v2(0, (const cosy_bf16 *)d, 1024, 8, (const cosy_k_dit_seg *)d,
                                  (const int32_t *)d, 1, (const cosy_bf16 *)d, 0, 0, NULL, 50,
                                  (const int32_t *)d, (cosy_bf16 *)d, 50, 0.125f, 128) !=
         cudaErrorInvalidValue; /* 8 heads of 64 != D */
  bad += cosy_k_attn_dit_paged_v2_stages(0, (const cosy_bf16 *)d, 1024, 16,
                                         (const cosy_k_dit_seg *)d, (const int32_t *)d, 1,
                                         (const cosy_bf16 *)d, 0, 0, NULL, 50, (const int32_t *)d,
                                         (cosy_bf16 *)d, 50, 0.125f, 64, 3, &g_dev) !=
         cudaErrorInvalidValue; /* stages neither 0, 2 nor 4 */
  {
    const cosy_k_dit_seg *sg = (const cosy_k_dit_seg *)d;
    const int32_t *ti = (const int32_t *)d;
    const cosy_bf16 *bd = (const cosy_bf16 *)d;
    cosy_kdev nocl = g_dev;
    nocl.clusters = 0;
    bad += cosy_k_attn_dit_paged_split(0, bd, 1024, 16, sg, ti, 1, bd, 0, 0, NULL, 50, ti,
                                       (cosy_bf16 *)d, 50, 0.125f, 9, &g_dev) !=
           cudaErrorInvalidValue; /* 9 parts > COSY_K_DIT_SPLIT_MAX */
    bad += cosy_k_attn_dit_paged_split(0, bd, 1024, 16, sg, ti, 1, bd, 0, 0, NULL, 50, ti,
                                       (cosy_bf16 *)d, 50, 0.125f, 0, &g_dev) !=
           cudaErrorInvalidValue; /* 0 parts */
    bad += cosy_k_attn_dit_paged_split(0, bd, 1024, 8, sg, ti, 1, bd, 0, 0, NULL, 50, ti,
                                       (cosy_bf16 *)d, 50, 0.125f, 4, &g_dev) !=
           cudaErrorInvalidValue; /* 8 heads of 64 != D */
    bad += cosy_k_attn_dit_paged_split(0, bd, 1024, 16, sg, ti, 1, bd, 0, 0, NULL, 50, ti,
                                       (cosy_bf16 *)d, 50, 0.125f, 4, &nocl) !=
           cudaErrorNotSupported; /* no clusters */
    bad += cosy_k_attn_dit_paged_split(0, bd, 1024, 16, sg, ti, 1, bd, 0, 0, NULL, 50, ti,
                                       (cosy_bf16 *)d, 50, 0.125f, 4, NULL) !=
           cudaErrorNotSupported; /* no device description */
    /* the part count per segment: cluster size, items, heads, clusters */
    bad += cosy_k_attn_dit_paged_auto(0, bd, 1024, 16, sg, ti, ti, 1, 3, bd, 0, 0, NULL, 50, ti,
                                      (cosy_bf16 *)d, 50, 0.125f, &g_dev) !=
           cudaErrorInvalidValue; /* clusters of 3 */
    bad += cosy_k_attn_dit_paged_auto(0, bd, 1024, 16, sg, ti, NULL, 1, 8, bd, 0, 0, NULL, 50,
                                      ti, (cosy_bf16 *)d, 50, 0.125f, &g_dev) !=
           cudaErrorInvalidValue; /* no items */
    bad += cosy_k_attn_dit_paged_auto(0, bd, 1024, 16, sg, ti, ti, -1, 8, bd, 0, 0, NULL, 50,
                                      ti, (cosy_bf16 *)d, 50, 0.125f, &g_dev) !=
           cudaErrorInvalidValue; /* -1 items */
    bad += cosy_k_attn_dit_paged_auto(0, bd, 1024, 8, sg, ti, ti, 1, 8, bd, 0, 0, NULL, 50, ti,
                                      (cosy_bf16 *)d, 50, 0.125f, &g_dev) !=
           cudaErrorInvalidValue; /* 8 heads of 64 != D */
    bad += cosy_k_attn_dit_paged_auto(0, bd, 1024, 16, sg, ti, ti, 1, 8, bd, 0, 0, NULL, 50, ti,
                                      (cosy_bf16 *)d, 50, 0.125f, &nocl) !=
           cudaErrorNotSupported; /* no clusters */
    /* the host item list: a tile of a segment past n_segs, too little room, 0 heads */
    cosy_k_dit_seg hs[2];
    memset(hs, 0, sizeof hs);
    hs[0].n_q = 64, hs[0].Lk = 1000; /* 8 parts */
    hs[1].n_q = 64, hs[1].Lk = 100;  /* 1 part */
    const int32_t ht[4] = {0, 0, 1, 0};
    int32_t it[64];
    int cs = 0;
    bad += cosy_k_dit_auto_items(hs, 1, ht, 2, 16, it, 32, &cs) != -1;
    bad += cosy_k_dit_auto_items(hs, 2, ht, 2, 16, it, 17, &cs) != -1; /* needs 16 + 2 */
    bad += cosy_k_dit_auto_items(hs, 2, ht, 2, 0, it, 32, &cs) != -1;
    /* 16 clusters of 8 for the 8-part tile (one head each), 2 for the 1-part one (8 heads each) */
    bad += cosy_k_dit_auto_items(hs, 2, ht, 2, 16, it, 32, &cs) != 18 || cs != 8 ||
           it[2 * 15] != 0 || it[2 * 15 + 1] != 15 * 16 + 8 || it[2 * 16] != 1 ||
           it[2 * 16 + 1] != 0 * 16 + 1 || it[2 * 17 + 1] != 8 * 16 + 1;
    bad += cosy_k_dit_auto_parts(192) != 1 || cosy_k_dit_auto_parts(193) != 2 ||
           cosy_k_dit_auto_parts(0) != 1 || cosy_k_dit_auto_parts(641) != 8;
  }
  {
    const cosy_k_prefill_seg *sg = (const cosy_k_prefill_seg *)d;
    const int32_t *ti = (const int32_t *)d;
    cosy_kdev small = g_dev;
    small.smem_block = 48 * 1024;
    bad += cosy_k_paged_prefill(0, d, 896, d, d, ti, 63, sg, 1, ti, 1, 14, 2, 64, 16, 0.125f, d,
                                896, &small) != cudaErrorInvalidValue; /* 62 KB > 48 KB */
    bad += cosy_k_paged_prefill(0, d, 1152, d, d, ti, 63, sg, 1, ti, 1, 18, 2, 64, 16, 0.125f, d,
                                1152, &g_dev) != cudaErrorInvalidValue; /* 9 q heads a kv head */
    bad += cosy_k_paged_prefill(0, d, 898, d, d, ti, 63, sg, 1, ti, 1, 14, 2, 64, 16, 0.125f, d,
                                896, &g_dev) != cudaErrorInvalidValue; /* q_stride % 4 */
  }
  bad += cosy_k_llm_rope_append(0, d, NULL, 100, NULL, 1, 14, 2, (const int32_t *)d,
                                (const int32_t *)d, d, d, 896, d, d) !=
         cudaErrorInvalidValue; /* qkv_stride < 18 heads */
  bad += cosy_k_llm_norm_split(0, d, d, NULL, d, 1e-6f, (cosy_bf16 *)d, (cosy_bf16 *)d, 1, 896) !=
         cudaErrorInvalidValue; /* delta without delta_lo */
  bad += cosy_k_llm_decode_prep(0, (const int32_t *)d, 1, (const cosy_bf16 *)d, 10, 8,
                                (const int32_t *)d, 4, 1, 16, d, (int32_t *)d, (int32_t *)d,
                                (int32_t *)d, (int32_t *)d, 5) !=
         cudaErrorInvalidValue; /* bt_stride > bt_all_stride */
  bad += cosy_k_llm_gemv_supported(1, 896) != 1;
  bad += cosy_k_llm_gemv_supported(3, 896) != 0;
  bad += cosy_k_llm_gemv_supported(8, 8200) != 0;
  bad += cosy_k_llm_gemv_tc_xfrag_used(NULL) != 0; /* bad arguments: not used */
  bad += cosy_k_device_image_check() != cudaSuccess; /* this build runs on this device */
  report("argument checks", "42 calls (bad args, limits, image)", (double)bad, 0.0, 0);
  dfree(d);
  end_test();
}

static void tk_fail(void) { fail(); }

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  int bench;
  const char *filter;
  const int a = parse_args(argc, argv, &bench, &filter);
  if (a) return a == 1 ? 0 : 2;
  if (bench) return kh_run_bench(filter); /* bench/bench_kernels.c */
  if (!kh_device_probe()) return 0;
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
  kh_describe_device(&g_dev, 0);
  kh_on_error = tk_fail; /* a CUDA error in a helper fails the current test */
  /* one cmocka test per registry entry with a test here, in the registry's order */
  struct CMUnitTest tests[64];
  size_t n = 0;
  for (int i = 0; i < kh_n_registry && n < sizeof tests / sizeof tests[0]; ++i) {
    const kh_entry *e = &kh_registry[i];
    if (!e->test || !kh_entry_selected(e, filter)) continue;
    memset(&tests[n], 0, sizeof tests[n]);
    tests[n].name = e->test_name;
#ifdef COSY_TEST_NO_CMOCKA
    tests[n].fn = e->test;
#else
    tests[n].test_func = e->test;
#endif
    n++;
  }
#ifdef COSY_TEST_NO_CMOCKA
  return tk_run(tests, n);
#else
  return _cmocka_run_group_tests("test_kernels", tests, n, NULL, NULL);
#endif
}

#endif /* COSY_WITH_CUDA */
