/* test_gpu_flow.c - the GPU flow decoder (lib/gpu/flow.c; resid_ln of kernels/dit_elementwise.cu
 * and kernels/conv_pos.cu directly) against the CPU reference (lib/ref/flow.c) and the golden
 * data of the official model.
 *
 * Small golden model (tu_small_model(), ../shared/golden/flow):
 *   kernels:   conv position embedding (tensor-core path at the full-size geometry C 1024,
 *              16 groups, k 31, and the generic path at C 128) and the fused residual + AdaLN
 *              LayerNorm (D 1024, per-row and shared modulation rows), on random data, vs a
 *              double-precision host computation.
 *   estimator: gpu_flow_estimator(a/est0_*_in) vs a/est0_out and vs ref_flow_estimator; the same
 *              inputs with the streaming mask vs the reference.
 *   FLOW(a), FLOW(b), FLOW(c) (the golden data's three flow calls): gpu_flow_infer vs ref_flow_infer and vs
 *              the golden mel.npy; ff1's fused bias + GELU epilogue taken (no plan refused by
 *              cuBLASLt).
 *   graphs:    first call of an N (direct launches) == second (graph captured) == replays ==
 *              graphs off; two N values alternating (graph cache).
 *   arguments: the reference's checks, max_frames, cancellation, tiny calls.
 *   batch cache: packed batches (gpu_flow_batch) with the block cache vs gpu_flow_infer and the
 *              reference, chunk by chunk; again with the attention's keys split over 4 blocks
 *              and with the part count per segment (gpu_flow_set_attn_split 4 and
 *              GPU_FLOW_ATTN_AUTO; where the device has clusters).
 * Full-size random model (environment COSY_FULL_MODEL = path, e.g. from
 *   `python3 tools/make_model.py --preset full -o full.gguf`):
 *   estimator (B 2, N 90, streaming) and a streaming non-final call (20 prompt + 28 new tokens:
 *   N = 90) vs the CPU reference (run in a second thread while the GPU computes its side);
 *   timing of W1-like first chunks (87 prompt tokens with a smooth random prompt mel, streaming,
 *   non-final) at N = 250, 350, 500: median of 5 calls after a warm-up, with the achieved
 *   TFLOP/s by docs/model.md section 9's count: 20 * (N * 378.0M + 90112 * N^2 + 0.284G) FLOP per call.
 * Tolerances: relative L2 <= 2e-2 for every mel / estimator comparison (bf16 weights and
 *   activations, fp32 accumulation, fp32 Euler state); kernels: 1e-2 (bf16 output) or 1e-4
 *   (fp32 output from bf16 inputs); graph replay vs first call: 1e-6 (expected bit-identical).
 * Without CUDA (CPU-only build) or without a device every test skips. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model.h"
#include "ref/flow.h"
#include "testutil.h"
#include "util.h"

#ifndef COSY_WITH_CUDA

static void test_no_cuda(void **state) {
  (void)state;
  print_message("SKIP: built without CUDA\n");
  skip();
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_cuda)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

#include <pthread.h>

#include "conv_pos.h"
#include "dit_elementwise.h"
#include "gpu/flow.h"
#include "gpu/gpu.h"

#define TOL 2e-2
#define MAX_FRAMES_SMALL 256
#define MAX_FRAMES_FULL 512

typedef struct fixture {
  cosy_model *m;
  ref_flow *rf;
  cosy_gpu *g;
  gpu_flow *gf;
  int32_t *tokens; /* prompt (60) then flow tokens (60) */
  int n_prompt, n_flow;
  float *prompt_feat; /* [2P][80] */
  float *spk;         /* [192] */
  const char *why;    /* reason to skip */
} fixture;

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  *state = fx;
  if (!fx) return -1;
  cosy_status st = cosy_gpu_create(0, 0.9f, tu_knobs(), &fx->g);
  if (st != COSY_OK) {
    fx->why = "no CUDA device";
    fprintf(stderr, "cosy_gpu_create: %s\n", cosy_last_error());
    fx->g = NULL;
    return 0;
  }
  const char *model = tu_small_model();
  if (!model || !tu_shared_dir()) {
    fx->why = "golden data or test model absent";
    return 0;
  }
  if (cosy_model_load(model, &fx->m) != COSY_OK) {
    fprintf(stderr, "model load failed: %s\n", cosy_last_error());
    return -1;
  }
  if (ref_flow_create(fx->m, &fx->rf) != COSY_OK) {
    fprintf(stderr, "ref_flow_create failed: %s\n", cosy_last_error());
    return -1;
  }
  if (gpu_flow_create(fx->g, fx->m, MAX_FRAMES_SMALL, &fx->gf) != COSY_OK) {
    fprintf(stderr, "gpu_flow_create failed: %s\n", cosy_last_error());
    return -1;
  }
  tu_flow_inputs in;
  if (tu_golden_flow_inputs(&in)) return -1;
  fx->tokens = in.tokens;
  fx->n_prompt = in.n_prompt;
  fx->n_flow = in.n_flow;
  fx->prompt_feat = in.prompt_feat;
  fx->spk = in.spk;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  if (!fx) return 0;
  gpu_flow_free(fx->gf);
  cosy_gpu_free(fx->g);
  ref_flow_free(fx->rf);
  cosy_model_free(fx->m);
  free(fx->tokens);
  free(fx->prompt_feat);
  free(fx->spk);
  free(fx);
  return 0;
}

#define REQUIRE_FIXTURE(fx) TU_REQUIRE((fx)->gf != NULL, "%s", (fx)->why ? (fx)->why : "no fixture")

/* ---------------------------------------------------------------------------------------------
 * helpers */

static int all_finite(const float *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(p[i])) return 0;
  return 1;
}

/* one line per check: name, measured error, tolerance, PASS/FAIL; returns 1 on pass */
static int report(const char *name, const float *got, const float *ref, size_t n, double tol) {
  double e = tu_rel_l2(got, ref, n), mx = tu_max_abs_diff(got, ref, n);
  int fin = all_finite(got, n);
  int ok = fin && e <= tol;
  print_message("  %-40s rel L2 %.3e  max abs %.3e  (tol %.0e)  %s%s\n", name, e, mx, tol,
                ok ? "PASS" : "FAIL", fin ? "" : " [non-finite values]");
  return ok;
}

static float *golden(const char *rel, size_t n) {
  int nd;
  int64_t sh[8];
  float *p = tu_npy_f32(tu_shared(rel), &nd, sh);
  assert_non_null(p);
  assert_int_equal((int64_t)n, tu_numel(nd, sh));
  return p;
}

static float *nan_buf(size_t n) {
  float *p = malloc(n * sizeof *p);
  assert_non_null(p);
  for (size_t i = 0; i < n; i++) p[i] = NAN;
  return p;
}

/* deterministic uniform [-1, 1) */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float urand(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng_state >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static float bf16_round(float x) {
  uint16_t b = cosy_f32_to_bf16(x);
  uint32_t u = (uint32_t)b << 16;
  float r;
  memcpy(&r, &u, 4);
  return r;
}

static double mish_d(double z) { return z * tanh(log1p(exp(z))); }

#define CUDA_OK(x) assert_int_equal((int)(x), (int)cudaSuccess)

/* ---------------------------------------------------------------------------------------------
 * kernels on random data */

static int conv_case(int B, int N, int C, int G, int K, int add) {
  const int cin = C / G;
  const size_t nx = (size_t)B * N * C, nw = (size_t)C * K * cin;
  float *x = malloc(nx * 4), *w = malloc(nw * 4), *bias = malloc((size_t)C * 4);
  float *h0 = malloc(nx * 4), *ref = malloc(nx * 4), *got = malloc(nx * 4);
  uint16_t *xb = malloc(nx * 2), *wb = malloc(nw * 2), *yb = malloc(nx * 2);
  assert_true(x && w && bias && h0 && ref && got && xb && wb && yb);
  const float ws = 1.0f / sqrtf((float)(K * cin));
  for (size_t i = 0; i < nx; i++) {
    x[i] = bf16_round(urand());
    xb[i] = cosy_f32_to_bf16(x[i]);
    h0[i] = urand();
  }
  for (size_t i = 0; i < nw; i++) {
    w[i] = bf16_round(urand() * 2.0f * ws);
    wb[i] = cosy_f32_to_bf16(w[i]);
  }
  for (int c = 0; c < C; c++) bias[c] = 0.1f * urand();
  for (int b = 0; b < B; b++)
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++) {
        int g = c / cin;
        double acc = bias[c];
        for (int k = 0; k < K; k++) {
          int fr = n + k - (K - 1);
          if (fr < 0) continue;
          for (int i = 0; i < cin; i++)
            acc += (double)x[((size_t)b * N + fr) * C + g * cin + i] *
                   w[((size_t)c * K + k) * cin + i];
        }
        size_t e = ((size_t)b * N + n) * C + c;
        ref[e] = (float)(mish_d(acc) + (add ? h0[e] : 0.0));
      }
  void *dx, *dw, *db, *dy;
  CUDA_OK(cudaMalloc(&dx, nx * 2));
  CUDA_OK(cudaMalloc(&dw, nw * 2));
  CUDA_OK(cudaMalloc(&db, (size_t)C * 4));
  CUDA_OK(cudaMalloc(&dy, nx * 4));
  CUDA_OK(cudaMemcpy(dx, xb, nx * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dw, wb, nw * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db, bias, (size_t)C * 4, cudaMemcpyHostToDevice));
  if (add) CUDA_OK(cudaMemcpy(dy, h0, nx * 4, cudaMemcpyHostToDevice));
  else CUDA_OK(cudaMemset(dy, 0xFF, nx * 2)); /* NaN poison */
  CUDA_OK(cosy_k_flow_conv_pos(0, (const cosy_bf16 *)dx, (const cosy_bf16 *)dw, (const float *)db,
                               add ? NULL : (cosy_bf16 *)dy, add ? (float *)dy : NULL, B, N, C, G,
                               K));
  CUDA_OK(cudaDeviceSynchronize());
  if (add) {
    CUDA_OK(cudaMemcpy(got, dy, nx * 4, cudaMemcpyDeviceToHost));
  } else {
    CUDA_OK(cudaMemcpy(yb, dy, nx * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < nx; i++) {
      uint32_t u = (uint32_t)yb[i] << 16;
      memcpy(&got[i], &u, 4);
    }
  }
  char name[96];
  snprintf(name, sizeof name, "conv_pos C%d G%d K%d N%d %s", C, G, K, N, add ? "add" : "bf16");
  int ok = report(name, got, ref, nx, add ? 1e-4 : 1e-2);
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(db);
  cudaFree(dy);
  free(x);
  free(w);
  free(bias);
  free(h0);
  free(ref);
  free(got);
  free(xb);
  free(wb);
  free(yb);
  return ok;
}

static int resid_ln_case(int B, int N, int D, int shared_mod, int with_a) {
  const size_t n = (size_t)B * N * D;
  const int64_t mbs = shared_mod ? 0 : 6 * (int64_t)D;
  const size_t nmod = (size_t)(shared_mod ? 1 : B) * 6 * D;
  float *h = malloc(n * 4), *a = malloc(n * 4), *mod = malloc(nmod * 4);
  float *ref_h = malloc(n * 4), *ref_y = malloc(n * 4), *got_h = malloc(n * 4),
        *got_y = malloc(n * 4);
  uint16_t *yb = malloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    h[i] = 3.0f * urand() + 0.5f;
    a[i] = urand();
  }
  for (size_t i = 0; i < nmod; i++) mod[i] = 0.5f * urand();
  /* chunks: gate at 2D, scale at D, shift at 0; the a bias: chunk 3 of row 0 */
  for (int b = 0; b < B; b++)
    for (int t = 0; t < N; t++) {
      const float *md = mod + (size_t)b * mbs;
      size_t r = ((size_t)b * N + t) * D;
      double s = 0, q = 0;
      for (int d = 0; d < D; d++) {
        ref_h[r + d] = with_a ? h[r + d] + md[2 * D + d] * (a[r + d] + mod[3 * D + d]) : h[r + d];
        s += ref_h[r + d];
      }
      double mean = s / D;
      for (int d = 0; d < D; d++) q += (ref_h[r + d] - mean) * (ref_h[r + d] - mean);
      double rs = 1.0 / sqrt(q / D + 1e-6);
      for (int d = 0; d < D; d++)
        ref_y[r + d] = (float)((ref_h[r + d] - mean) * rs * (1.0 + md[D + d]) + md[d]);
    }
  void *dh, *da, *dm, *dy;
  CUDA_OK(cudaMalloc(&dh, n * 4));
  CUDA_OK(cudaMalloc(&da, n * 4));
  CUDA_OK(cudaMalloc(&dm, nmod * 4));
  CUDA_OK(cudaMalloc(&dy, n * 2));
  CUDA_OK(cudaMemcpy(dh, h, n * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(da, a, n * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dm, mod, nmod * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dy, 0xFF, n * 2));
  float *m0 = (float *)dm;
  CUDA_OK(cosy_k_flow_resid_ln(0, (float *)dh, with_a ? (const float *)da : NULL,
                               with_a ? m0 + 3 * D : NULL, m0 + 2 * D, m0 + D, m0, mbs,
                               (cosy_bf16 *)dy, B, N, D, 1e-6f, 0));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(got_h, dh, n * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(yb, dy, n * 2, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)yb[i] << 16;
    memcpy(&got_y[i], &u, 4);
  }
  char name[96];
  snprintf(name, sizeof name, "resid_ln D%d %s%s: h", D, shared_mod ? "shared mod" : "row mod",
           with_a ? " +res" : "");
  int ok = report(name, got_h, ref_h, n, 1e-6);
  snprintf(name, sizeof name, "resid_ln D%d %s%s: y", D, shared_mod ? "shared mod" : "row mod",
           with_a ? " +res" : "");
  ok &= report(name, got_y, ref_y, n, 1e-2);
  cudaFree(dh);
  cudaFree(da);
  cudaFree(dm);
  cudaFree(dy);
  free(h);
  free(a);
  free(mod);
  free(ref_h);
  free(ref_y);
  free(got_h);
  free(got_y);
  free(yb);
  return ok;
}

static void test_kernels(void **state) {
  fixture *fx = *state;
  TU_REQUIRE(fx->g != NULL, "no CUDA device");
  CUDA_OK(cudaSetDevice(fx->g->device));
  int ok = 1;
  ok &= conv_case(2, 130, 1024, 16, 31, 0); /* tensor-core path, 3 frame tiles, ragged end */
  ok &= conv_case(2, 130, 1024, 16, 31, 1);
  ok &= conv_case(1, 20, 1024, 16, 31, 0); /* fewer frames than taps */
  ok &= conv_case(2, 70, 128, 16, 31, 0);  /* generic path (8 channels per group) */
  ok &= conv_case(2, 70, 128, 16, 31, 1);
  ok &= resid_ln_case(2, 9, 1024, 1, 1);
  ok &= resid_ln_case(2, 9, 1024, 0, 1);
  ok &= resid_ln_case(2, 5, 128, 0, 0);
  assert_true(ok);
}

/* ---------------------------------------------------------------------------------------------
 * estimator */

static void test_estimator(void **state) {
  fixture *fx = *state;
  REQUIRE_FIXTURE(fx);
  const int B = 2, N = 240;
  size_t n = (size_t)B * 80 * N;
  float *x = golden("golden/flow/a/est0_x_in.npy", n);
  float *mu = golden("golden/flow/a/est0_mu_in.npy", n);
  float *cond = golden("golden/flow/a/est0_cond_in.npy", n);
  float *t = golden("golden/flow/a/est0_t_in.npy", 2);
  float *spks = golden("golden/flow/a/est0_spks_in.npy", 2 * 80);
  float *gold = golden("golden/flow/a/est0_out.npy", n);
  float *ref = nan_buf(n), *out = nan_buf(n);
  int ok = 1;
  cosy_status st = gpu_flow_estimator(fx->gf, B, N, x, mu, t, spks, cond, 0, out);
  if (st) print_message("gpu_flow_estimator: %s\n", cosy_last_error());
  assert_int_equal(st, COSY_OK);
  assert_int_equal(ref_flow_estimator(fx->rf, B, N, x, mu, t, spks, cond, 0, ref), COSY_OK);
  ok &= report("estimator(a/est0_in) vs golden", out, gold, n, TOL);
  ok &= report("estimator(a/est0_in) vs CPU ref", out, ref, n, TOL);
  ok &= report("  (CPU ref vs golden, for scale)", ref, gold, n, 1e-4);
  /* streaming mask, and a single row (odd batch) with a different t */
  for (size_t i = 0; i < n; i++) out[i] = ref[i] = NAN;
  assert_int_equal(gpu_flow_estimator(fx->gf, B, N, x, mu, t, spks, cond, 1, out), COSY_OK);
  assert_int_equal(ref_flow_estimator(fx->rf, B, N, x, mu, t, spks, cond, 1, ref), COSY_OK);
  ok &= report("estimator streaming vs CPU ref", out, ref, n, TOL);
  float t1 = 0.61f;
  assert_int_equal(gpu_flow_estimator(fx->gf, 1, N, x, mu, &t1, spks, cond, 1, out), COSY_OK);
  assert_int_equal(ref_flow_estimator(fx->rf, 1, N, x, mu, &t1, spks, cond, 1, ref), COSY_OK);
  ok &= report("estimator B=1 t=0.61 streaming vs CPU ref", out, ref, n / 2, TOL);
  free(x);
  free(mu);
  free(cond);
  free(t);
  free(spks);
  free(gold);
  free(ref);
  free(out);
  assert_true(ok);
}

/* ---------------------------------------------------------------------------------------------
 * full inference on the golden calls */

static int flow_case(fixture *fx, const char *tag, int n_gen, int streaming, int finalize,
                     const char *golden_mel) {
  float *gm = NULL, *rm = NULL;
  int gn = -1, rn = -2;
  double t0 = cosy_now();
  cosy_status st = gpu_flow_infer(fx->gf, fx->tokens, fx->n_prompt, n_gen, fx->prompt_feat,
                                  2 * fx->n_prompt, fx->spk, streaming, finalize, NULL, &gm, &gn);
  double t1 = cosy_now();
  if (st) print_message("gpu_flow_infer: %s\n", cosy_last_error());
  assert_int_equal(st, COSY_OK);
  assert_int_equal(ref_flow_infer(fx->rf, fx->tokens, fx->n_prompt, n_gen, fx->prompt_feat,
                                  2 * fx->n_prompt, fx->spk, streaming, finalize, NULL, &rm, &rn,
                                  NULL),
                   COSY_OK);
  print_message("  FLOW(%s): %d frames out (GPU %.1f ms, first call of its N, CPU %.2f s)\n", tag,
                gn, (t1 - t0) * 1e3, cosy_now() - t1);
  /* ff1's bias + GELU: cuBLASLt's epilogue, which cuBLASLt must have taken for every plan */
  print_message("  FLOW(%s): ff1 bias + GELU fused into the GEMM, %ld plans refused by cuBLASLt, "
                "%ld with the bias in bf16\n",
                tag, gpu_flow_ff1_fallbacks(fx->gf), gpu_flow_ff1_bias_bf16(fx->gf));
  assert_int_equal(gpu_flow_ff1_fallbacks(fx->gf), 0);
  assert_int_equal(gn, rn);
  size_t n = (size_t)80 * gn;
  float *gold = golden(golden_mel, n);
  char name[64];
  snprintf(name, sizeof name, "FLOW(%s) mel vs golden", tag);
  int ok = report(name, gm, gold, n, TOL);
  snprintf(name, sizeof name, "FLOW(%s) mel vs CPU ref", tag);
  ok &= report(name, gm, rm, n, TOL);
  free(gold);
  free(gm);
  free(rm);
  return ok;
}

static void test_flow_a(void **state) {
  fixture *fx = *state;
  REQUIRE_FIXTURE(fx);
  assert_true(flow_case(fx, "a", fx->n_flow, 0, 1, "golden/flow/a/mel.npy"));
}

static void test_flow_b(void **state) {
  fixture *fx = *state;
  REQUIRE_FIXTURE(fx);
  assert_true(flow_case(fx, "b", fx->n_flow, 1, 1, "golden/flow/b/mel.npy"));
}

static void test_flow_c(void **state) {
  fixture *fx = *state;
  REQUIRE_FIXTURE(fx);
  assert_true(flow_case(fx, "c", 43, 1, 0, "golden/flow/c/mel.npy"));
}

/* direct launches (first call of a key) == captured graph (second call) == replays; alternating
 * N values use the caches */
static void test_graphs(void **state) {
  fixture *fx = *state;
  REQUIRE_FIXTURE(fx);
  enum { NC = 7 };
  float *m[NC] = {0};
  int nf[NC];
  const int gen[NC] = {60, 43, 60, 43, 60, 43, 60};
  const int fin[NC] = {1, 0, 1, 0, 1, 0, 1};
  gpu_flow_set_graphs(fx->gf, 1);
  for (int i = 0; i < NC; i++) {
    if (i == NC - 1) gpu_flow_set_graphs(fx->gf, 0);
    cosy_status st = gpu_flow_infer(fx->gf, fx->tokens, fx->n_prompt, gen[i], fx->prompt_feat,
                                    2 * fx->n_prompt, fx->spk, 1, fin[i], NULL, &m[i], &nf[i]);
    if (st) print_message("gpu_flow_infer: %s\n", cosy_last_error());
    assert_int_equal(st, COSY_OK);
  }
  gpu_flow_set_graphs(fx->gf, 1);
  int ok = 1;
  assert_int_equal(nf[0], nf[2]);
  assert_int_equal(nf[1], nf[3]);
  size_t n0 = (size_t)80 * nf[0], n1 = (size_t)80 * nf[1];
  ok &= report("captured graph vs direct launches (N 240)", m[2], m[0], n0, 1e-6);
  ok &= report("captured graph vs direct launches (N 200)", m[3], m[1], n1, 1e-6);
  ok &= report("graph replay vs direct launches (N 240)", m[4], m[0], n0, 1e-6);
  ok &= report("graph replay vs direct launches (N 200)", m[5], m[1], n1, 1e-6);
  ok &= report("graphs off vs direct launches (N 240)", m[6], m[0], n0, 1e-6);
  for (int i = 0; i < NC; i++) free(m[i]);
  assert_true(ok);
}

static void test_invalid(void **state) {
  fixture *fx = *state;
  REQUIRE_FIXTURE(fx);
  float *mel = (float *)1;
  int nf = 7, P = fx->n_prompt;
  const float *pm = fx->prompt_feat;
  const float *sp = fx->spk;
  const int32_t *tk = fx->tokens;
  gpu_flow *f = fx->gf;
#define INFER(tok, np, ng, pmel, npf, spk, fin) \
  gpu_flow_infer(f, tok, np, ng, pmel, npf, spk, 0, fin, NULL, &mel, &nf)
  assert_int_equal(INFER(tk, P, 5, pm, 2 * P - 2, sp, 1), COSY_ERR_INVALID_ARG); /* frames */
  print_message("  e.g. \"%s\"\n", cosy_last_error());
  assert_null(mel);
  assert_int_equal(nf, 0);
  assert_int_equal(INFER(tk, -1, 5, pm, 0, sp, 1), COSY_ERR_INVALID_ARG);
  assert_int_equal(INFER(tk, P, -5, pm, 2 * P, sp, 1), COSY_ERR_INVALID_ARG);
  assert_int_equal(INFER(tk, P, 2, pm, 2 * P, sp, 0), COSY_ERR_INVALID_ARG); /* < 3 lookahead */
  assert_int_equal(INFER(tk, 0, 0, NULL, 0, sp, 1), COSY_ERR_INVALID_ARG);    /* nothing */
  assert_int_equal(INFER(NULL, P, 5, pm, 2 * P, sp, 1), COSY_ERR_INVALID_ARG);
  assert_int_equal(INFER(tk, P, 5, NULL, 2 * P, sp, 1), COSY_ERR_INVALID_ARG);
  assert_int_equal(INFER(tk, P, 5, pm, 2 * P, NULL, 1), COSY_ERR_INVALID_ARG);
  assert_int_equal(INFER(tk, P, 70, pm, 2 * P, sp, 1), COSY_ERR_INVALID_ARG); /* > max_frames */
  print_message("  e.g. \"%s\"\n", cosy_last_error());
  int32_t bad[4] = {1, 2, 6561, 4};
  assert_int_equal(INFER(bad, 0, 4, NULL, 0, sp, 1), COSY_ERR_INVALID_ARG);
  bad[2] = -1;
  assert_int_equal(INFER(bad, 0, 4, NULL, 0, sp, 1), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_flow_infer(f, tk, P, 5, pm, 2 * P, sp, 0, 1, NULL, NULL, &nf),
                   COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_flow_infer(NULL, tk, P, 5, pm, 2 * P, sp, 0, 1, NULL, &mel, &nf),
                   COSY_ERR_INVALID_ARG);
#undef INFER
  /* cancellation before the steps, graphs on and off */
  volatile int cancel = 1;
  assert_int_equal(gpu_flow_infer(f, tk, 0, 4, NULL, 0, sp, 0, 1, &cancel, &mel, &nf),
                   COSY_ERR_CANCELLED);
  assert_null(mel);
  gpu_flow_set_graphs(f, 0);
  assert_int_equal(gpu_flow_infer(f, tk, 0, 4, NULL, 0, sp, 0, 1, &cancel, &mel, &nf),
                   COSY_ERR_CANCELLED);
  gpu_flow_set_graphs(f, 1);
  /* tiny valid calls (vs the reference): no prompt, 4 tokens -> 8 frames; non-final with exactly
   * 3 new tokens -> 0 frames */
  float *rm = NULL;
  int rn = 0;
  assert_int_equal(gpu_flow_infer(f, tk, 0, 4, NULL, 0, sp, 1, 1, NULL, &mel, &nf), COSY_OK);
  assert_int_equal(nf, 8);
  assert_int_equal(ref_flow_infer(fx->rf, tk, 0, 4, NULL, 0, sp, 1, 1, NULL, &rm, &rn, NULL),
                   COSY_OK);
  int ok = report("tiny call (4 tokens, 8 frames) vs CPU ref", mel, rm, (size_t)80 * 8, TOL);
  free(mel);
  free(rm);
  assert_int_equal(gpu_flow_infer(f, tk, 2, 3, pm, 4, sp, 1, 0, NULL, &mel, &nf), COSY_OK);
  assert_int_equal(nf, 0);
  assert_non_null(mel);
  free(mel);

  float x[80 * 4], t[1] = {0.5f}, o[80 * 4];
  memset(x, 0, sizeof x);
  assert_int_equal(gpu_flow_estimator(f, 0, 1, x, x, t, x, x, 0, o), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_flow_estimator(f, 1, 0, x, x, t, x, x, 0, o), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_flow_estimator(f, 1, MAX_FRAMES_SMALL + 1, x, x, t, x, x, 0, o),
                   COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_flow_estimator(f, 1, 1, NULL, x, t, x, x, 0, o), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_flow_estimator(f, 1, 1, x, x, t, x, x, 0, o), COSY_OK);
  assert_true(all_finite(o, 80));
  gpu_flow *g2 = NULL;
  assert_int_equal(gpu_flow_create(fx->g, fx->m, 0, &g2), COSY_ERR_INVALID_ARG);
  assert_null(g2);
  assert_int_equal(gpu_flow_create(fx->g, fx->m, 15001, &g2), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_flow_create(NULL, fx->m, 100, &g2), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_flow_create(fx->g, fx->m, 100, NULL), COSY_ERR_INVALID_ARG);
  gpu_flow_free(NULL);
  gpu_flow_set_graphs(NULL, 1);
  assert_true(ok);
}

/* ---------------------------------------------------------------------------------------------
 * full-size model: parity on a short call, W1 timing */

typedef struct cpu_job {
  const ref_flow *rf;
  const int32_t *tokens;
  int n_prompt, n_gen;
  const float *pmel, *spk;
  int est_N;
  const float *ex, *emu, *et, *espk, *econd;
  float *est_out;
  float *mel;
  int n_frames;
  cosy_status st_est, st_inf;
  double secs;
} cpu_job;

static void *cpu_worker(void *arg) {
  cpu_job *j = arg;
  double t0 = cosy_now();
  j->st_est = ref_flow_estimator(j->rf, 2, j->est_N, j->ex, j->emu, j->et, j->espk, j->econd, 1,
                                 j->est_out);
  j->st_inf = ref_flow_infer(j->rf, j->tokens, j->n_prompt, j->n_gen, j->pmel, 2 * j->n_prompt,
                             j->spk, 1, 0, NULL, &j->mel, &j->n_frames, NULL);
  j->secs = cosy_now() - t0;
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void test_full_model(void **state) {
  fixture *fx = *state;
  const char *path = getenv("COSY_FULL_MODEL");
  TU_REQUIRE(path && *path, "COSY_FULL_MODEL not set");
  TU_REQUIRE(fx->g != NULL, "no CUDA device");
  cosy_model *m = NULL;
  ref_flow *rf = NULL;
  gpu_flow *gf = NULL;
  double t0 = cosy_now();
  assert_int_equal(cosy_model_load(path, &m), COSY_OK);
  cosy_status st = gpu_flow_create(fx->g, m, MAX_FRAMES_FULL, &gf);
  if (st) print_message("gpu_flow_create: %s\n", cosy_last_error());
  assert_int_equal(st, COSY_OK);
  double t1 = cosy_now();
  assert_int_equal(ref_flow_create(m, &rf), COSY_OK);
  print_message("  full model: gpu_flow_create %.2f s, ref_flow_create %.2f s, GPU memory used "
                "by the engine %.0f MiB\n",
                t1 - t0, cosy_now() - t1, (double)fx->g->used / 1048576.0);

  /* inputs: random tokens, smooth random prompt mel, random speaker */
  enum { PW = 87, PMAX = 200 };
  int32_t tok[PW + 200];
  for (int i = 0; i < PW + 200; i++) tok[i] = (int32_t)((urand() + 1.0f) * 3280.0f) % 6561;
  float *pmel = malloc((size_t)2 * PW * 80 * sizeof(float));
  for (int n = 0; n < 2 * PW; n++)
    for (int c = 0; c < 80; c++)
      pmel[n * 80 + c] = -5.0f + 2.0f * sinf(0.05f * n + 0.13f * c) + 0.8f * cosf(0.011f * n * c) +
                         0.2f * urand();
  float spk[192];
  for (int i = 0; i < 192; i++) spk[i] = urand();

  /* CPU reference jobs in a second thread: estimator (B 2, N 90, streaming) and a short call */
  const int EN = 90, SP = 20, SG = 28;
  size_t en = (size_t)2 * 80 * EN;
  float *ex = malloc(en * 4), *emu = malloc(en * 4), *econd = malloc(en * 4), espk[160];
  float et[2] = {0.35f, 0.35f};
  for (size_t i = 0; i < en; i++) {
    int row = (int)(i / ((size_t)80 * EN));
    size_t ci = i % ((size_t)80 * EN);
    int c = (int)(ci / EN), n = (int)(ci % EN);
    ex[i] = urand() * 1.5f;
    emu[i] = row ? 0.0f : 0.7f * sinf(0.2f * n + c) + 0.3f * urand();
    econd[i] = (row || n >= 40) ? 0.0f : pmel[n * 80 + c];
  }
  for (int i = 0; i < 160; i++) espk[i] = i < 80 ? 2.0f * urand() : 0.0f;
  cpu_job job = {.rf = rf, .tokens = tok, .n_prompt = SP, .n_gen = SG, .pmel = pmel, .spk = spk,
                 .est_N = EN, .ex = ex, .emu = emu, .et = et, .espk = espk, .econd = econd};
  job.est_out = nan_buf(en);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, cpu_worker, &job), 0);

  /* GPU: the same two computations */
  float *gest = nan_buf(en);
  st = gpu_flow_estimator(gf, 2, EN, ex, emu, et, espk, econd, 1, gest);
  if (st) print_message("gpu_flow_estimator: %s\n", cosy_last_error());
  assert_int_equal(st, COSY_OK);
  float *gmel = NULL;
  int gn = 0;
  st = gpu_flow_infer(gf, tok, SP, SG, pmel, 2 * SP, spk, 1, 0, NULL, &gmel, &gn);
  if (st) print_message("gpu_flow_infer: %s\n", cosy_last_error());
  assert_int_equal(st, COSY_OK);

  assert_int_equal(pthread_join(th, NULL), 0);
  print_message("  (CPU reference jobs: %.1f s)\n", job.secs);
  assert_int_equal(job.st_est, COSY_OK);
  assert_int_equal(job.st_inf, COSY_OK);
  int ok = report("full: estimator B2 N90 streaming vs CPU", gest, job.est_out, en, TOL);
  assert_int_equal(gn, job.n_frames);
  ok &= report("full: infer 20+28 tok (N 90) vs CPU", gmel, job.mel, (size_t)80 * gn, TOL);

  /* timing (after the CPU thread is done): W1 first chunk, 87 prompt tokens, streaming,
   * non-final */
  const int Ns[3] = {250, 350, 500};
  for (int k = 0; k < 3; k++) {
    const int N = Ns[k], ng = N / 2 - PW + 3;
    float *mel = NULL;
    int nf = 0;
    double cold[2];
    for (int r = 0; r < 2; r++) { /* 1st: direct launches; 2nd: graph capture + launch */
      double c0 = cosy_now();
      st = gpu_flow_infer(gf, tok, PW, ng, pmel, 2 * PW, spk, 1, 0, NULL, &mel, &nf);
      cold[r] = cosy_now() - c0;
      if (st) print_message("gpu_flow_infer: %s\n", cosy_last_error());
      assert_int_equal(st, COSY_OK);
      assert_int_equal(nf, N - 2 * PW);
      int fin = all_finite(mel, (size_t)80 * nf);
      free(mel);
      assert_true(fin);
    }
    double c0;
    double ts[5];
    for (int r = 0; r < 5; r++) {
      c0 = cosy_now();
      st = gpu_flow_infer(gf, tok, PW, ng, pmel, 2 * PW, spk, 1, 0, NULL, &mel, &nf);
      ts[r] = cosy_now() - c0;
      assert_int_equal(st, COSY_OK);
      free(mel);
    }
    qsort(ts, 5, sizeof ts[0], cmp_double);
    double flop = 20.0 * ((double)N * 378.0e6 + 90112.0 * (double)N * N + 0.284e9);
    double eager = 0;
    if (k == 0) { /* the same call with direct launches, for comparison */
      gpu_flow_set_graphs(gf, 0);
      double e3[3];
      for (int r = 0; r < 3; r++) {
        c0 = cosy_now();
        st = gpu_flow_infer(gf, tok, PW, ng, pmel, 2 * PW, spk, 1, 0, NULL, &mel, &nf);
        e3[r] = cosy_now() - c0;
        assert_int_equal(st, COSY_OK);
        free(mel);
      }
      qsort(e3, 3, sizeof e3[0], cmp_double);
      eager = e3[1];
      gpu_flow_set_graphs(gf, 1);
    }
    print_message("  TIMING flow W1 chunk N=%d (%d prompt + %d tokens, streaming): median %.2f ms "
                  "(min %.2f, max %.2f) = %.0f TFLOP/s of %.2f TFLOP; 1st call %.1f ms (direct "
                  "launches), 2nd %.1f ms (graph capture)%s",
                  N, PW, ng, ts[2] * 1e3, ts[0] * 1e3, ts[4] * 1e3, flop / ts[2] / 1e12, flop / 1e12,
                  cold[0] * 1e3, cold[1] * 1e3, eager > 0 ? "" : "\n");
    if (eager > 0) print_message("; without graphs %.2f ms\n", eager * 1e3);
  }


  /* timing of packed batches (gpu_flow_batch) of W1-like requests of one voice (87 prompt
   * tokens): first chunks of 13 tokens (frames [0, 26), n_gen 16) and of 38 tokens (the default
   * schedule: [0, 76), n_gen 41) for NB requests at once, each four times on freshly opened
   * requests (1st: new sizes, the step graph captured; 2nd and 3rd: replayed; 4th: graphs off,
   * direct launches), and the second chunk
   * of the short schedule ([26, 76), n_gen 41); printed, not checked (a benchmark) */
  {
    gpu_flow *gb = NULL; /* the engine's geometry: 3000 frames a batch */
    st = gpu_flow_create(fx->g, m, 3000, &gb);
    if (!st) { /* up to 110 pages; a smaller device (a test profile) times fewer requests */
      size_t want = (size_t)110 * gpu_flow_page_bytes(gb), left = cosy_gpu_left(fx->g);
      left = left > ((size_t)256 << 20) ? left - ((size_t)256 << 20) : 0;
      st = gpu_flow_pool(gb, want < left ? want : left);
    }
    if (st) print_message("gpu_flow_create / pool: %s\n", cosy_last_error());
    assert_int_equal(st, COSY_OK);
    const int pages = gpu_flow_pages_total(gb);
    int NB = (pages - 6) / 2;
    if (NB > 48) NB = 48;
    if (NB < 1) NB = 1;
    gpu_flow_req *q[49];
    gpu_flow_call c[48];
    float *out = nan_buf((size_t)48 * 76 * 80);
    /* the voice's prompt-only blocks first (a request of the voice seen before starts after them) */
    assert_int_equal(gpu_flow_req_open(gb, tok, PW, pmel, spk, 100, &q[48]), COSY_OK);
    memset(c, 0, sizeof c);
    c[0] = (gpu_flow_call){q[48], tok, 16, 0, 0, 0, 26, out};
    assert_int_equal(gpu_flow_batch(gb, c, 1, NULL), COSY_OK);
    const struct { const char *what; int n_gen, from, nf; } kinds[2] = {
        {"first chunk of 13 tokens (56 frames computed)", 16, 0, 26},
        {"first chunk of 38 tokens (106 frames computed)", 41, 0, 76}};
    for (int k = 0; k < 2; k++) {
      double tr[4];
      float *first = nan_buf((size_t)NB * 76 * 80);
      for (int r = 0; r < 4; r++) {
        if (r == 3) gpu_flow_set_graphs(gb, 0);
        for (int i = 0; i < NB; i++) assert_int_equal(gpu_flow_req_open(gb, tok, PW, pmel, spk, 100, &q[i]), COSY_OK);
        for (int i = 0; i < NB; i++)
          c[i] = (gpu_flow_call){q[i], tok, kinds[k].n_gen, 0, 0, kinds[k].from, kinds[k].nf,
                                 out + (size_t)i * 76 * 80};
        double c0 = cosy_now();
        st = gpu_flow_batch(gb, c, NB, NULL);
        tr[r] = cosy_now() - c0;
        if (st) print_message("gpu_flow_batch: %s\n", cosy_last_error());
        assert_int_equal(st, COSY_OK);
        /* captured, replayed and direct launches: the same bits */
        if (r == 0) memcpy(first, out, (size_t)NB * 76 * 80 * sizeof(float));
        else {
          double d = 0;
          for (int i = 0; i < NB; i++) {
            const double di = tu_max_abs_diff(out + (size_t)i * 76 * 80, first + (size_t)i * 76 * 80,
                                              (size_t)kinds[k].nf * 80);
            if (!(di <= d)) d = di;
          }
          if (d != 0.0) print_message("  flow batch run %d vs run 0: max abs %.3g\n", r, d);
          assert_true(d == 0.0);
        }
        if (k == 0 && r == 2) { /* their second chunk: frames [26, 76) */
          for (int i = 0; i < NB; i++)
            c[i] = (gpu_flow_call){q[i], tok, 41, 0, 0, 26, 50, out + (size_t)i * 76 * 80};
          double s0 = cosy_now();
          assert_int_equal(gpu_flow_batch(gb, c, NB, NULL), COSY_OK);
          print_message("  TIMING flow batch of %d second chunks of 25 tokens (after a short first): %.1f ms (new sizes)\n",
                        NB, (cosy_now() - s0) * 1e3);
        }
        for (int i = 0; i < NB; i++) gpu_flow_req_close(gb, q[i]);
      }
      gpu_flow_set_graphs(gb, 1);
      free(first);
      print_message("  TIMING flow batch of %d %s: %.1f ms (new sizes: step graph captured), %.1f / "
                    "%.1f (replayed) = %.2f ms a request; %.1f ms without graphs\n",
                    NB, kinds[k].what, tr[0] * 1e3, tr[1] * 1e3, tr[2] * 1e3, tr[2] * 1e3 / NB,
                    tr[3] * 1e3);
    }
    gpu_flow_req_close(gb, q[48]);
    gpu_flow_free(gb);
    free(out);
  }

  {
    /* the same without the mel offset: error relative to the deviation from the mean */
    size_t n = (size_t)80 * gn;
    double mean = 0;
    for (size_t i = 0; i < n; i++) mean += job.mel[i];
    mean /= (double)n;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
      a[i] = (float)(gmel[i] - mean);
      b[i] = (float)(job.mel[i] - mean);
    }
    report("  (same, mean removed: information)", a, b, n, 1.0);
    free(a);
    free(b);
  }
  free(job.mel);
  free(job.est_out);
  free(gest);
  free(gmel);
  free(ex);
  free(emu);
  free(econd);
  free(pmel);
  gpu_flow_free(gf);
  ref_flow_free(rf);
  cosy_model_free(m);
  assert_true(ok);
}

/* batched calls with block caches (gpu_flow_batch) against single calls (gpu_flow_infer, which
 * recomputes the prefix) and the CPU reference: the first chunk (from scratch), then the last
 * (block-causal, finalize) from the cached blocks; two identical requests in one batch must each
 * equal the request alone (batch invariance of the packed path) */
/* The packed batches with the block cache; split > 0: their attention with split keys
 * (gpu_flow_set_attn_split, the knob COSY_FLOW_ATTN_SPLIT), skipped where the device has no
 * thread-block clusters; v2 64, 128 or GPU_FLOW_ATTN_V2_AUTO: by cosy_k_attn_dit_paged_v2 with
 * query tiles of v2 (gpu_flow_set_attn_v2, the knob COSY_FLOW_ATTN_V2). */
static void batch_cache_case(fixture *fx, int split, int v2) {
  gpu_flow *gf = NULL;
  assert_int_equal(gpu_flow_create(fx->g, fx->m, 2 * MAX_FRAMES_SMALL, &gf), COSY_OK);
  if (v2) {
    assert_int_equal(gpu_flow_set_attn_v2(gf, v2), v2);
    print_message("  attention v2, %s-query tiles:\n",
                  v2 == GPU_FLOW_ATTN_V2_AUTO ? "auto" : v2 == 64 ? "64" : "128");
  }
  if (split && gpu_flow_set_attn_split(gf, split) != split) {
    print_message("  attention split %d (-1: auto): not on this device (no clusters), skipped\n",
                  split);
    gpu_flow_free(gf);
    return;
  }
  if (split) print_message("  attention split %d (-1: auto):\n", split);
  assert_int_equal(gpu_flow_pool(gf, 32 * gpu_flow_page_bytes(gf)), COSY_OK);
  print_message("  flow pool: %d pages of %.1f MiB\n", gpu_flow_pages_total(gf),
                gpu_flow_page_bytes(gf) / 1048576.0);
  const int P = fx->n_prompt, G = fx->n_flow;
  const int pad = (25 - P % 25) % 25, hop = 25 + pad;
  gpu_flow_req *q[3];
  for (int i = 0; i < 3; i++)
    assert_int_equal(gpu_flow_req_open(gf, fx->tokens, P, fx->prompt_feat, fx->spk, G, &q[i]),
                     COSY_OK);
  /* chunk 1: frames [0, 2 hop) of generated, from n_gen = hop + 3 */
  const int n1 = 2 * hop;
  float *m1 = nan_buf((size_t)3 * n1 * 80);
  gpu_flow_call c[3];
  memset(c, 0, sizeof c);
  for (int i = 0; i < 3; i++) {
    c[i].q = q[i];
    c[i].tokens = fx->tokens;
    c[i].n_gen = hop + 3;
    c[i].frame_from = 0;
    c[i].n_frames = n1;
    c[i].mel = m1 + (size_t)i * n1 * 80;
  }
  cosy_status st = gpu_flow_batch(gf, c, 1, NULL); /* q[0] alone */
  if (st) print_message("gpu_flow_batch: %s\n", cosy_last_error());
  assert_int_equal(st, COSY_OK);
  assert_int_equal(gpu_flow_batch(gf, c + 1, 2, NULL), COSY_OK); /* q[1], q[2] together */
  float *gm = NULL, *rm = NULL;
  int gn = 0, rn = 0;
  assert_int_equal(gpu_flow_infer(gf, fx->tokens, P, hop + 3, fx->prompt_feat, 2 * P, fx->spk, 1, 0,
                                  NULL, &gm, &gn),
                   COSY_OK);
  assert_int_equal(ref_flow_infer(fx->rf, fx->tokens, P, hop + 3, fx->prompt_feat, 2 * P, fx->spk,
                                  1, 0, NULL, &rm, &rn, NULL),
                   COSY_OK);
  assert_true(gn >= n1 && rn == gn);
  /* the single calls are channels-first [80][gn]: take frames [0, n1) frame-major */
  float *g1 = nan_buf((size_t)n1 * 80), *r1 = nan_buf((size_t)n1 * 80);
  for (int t = 0; t < n1; t++)
    for (int k = 0; k < 80; k++) {
      g1[(size_t)t * 80 + k] = gm[(size_t)k * gn + t];
      r1[(size_t)t * 80 + k] = rm[(size_t)k * rn + t];
    }
  int ok = report("BATCH chunk 1 vs gpu_flow_infer", m1, g1, (size_t)n1 * 80, TOL);
  ok &= report("BATCH chunk 1 vs CPU ref", m1, r1, (size_t)n1 * 80, TOL);
  /* q[1] and q[2] started after the voice's prompt-only blocks that q[0] computed */
  print_message("  voice table: %d pages after the first call\n", gpu_flow_pages_voice(gf));
  assert_true(gpu_flow_pages_voice(gf) > 0);
  ok &= report("BATCH chunk 1 (voice blocks shared) vs gpu_flow_infer", m1 + (size_t)n1 * 80, g1,
               (size_t)n1 * 80, TOL);
  const double inv = tu_max_abs_diff(m1 + (size_t)n1 * 80, m1, (size_t)n1 * 80);
  const double inv2 = tu_max_abs_diff(m1 + (size_t)2 * n1 * 80, m1, (size_t)n1 * 80);
  print_message("  BATCH chunk 1: in a batch of 2 (from the voice blocks) vs alone: max abs %.3g / %.3g\n",
                inv, inv2);
  free(gm);
  free(rm);
  {
    /* the same batch of two (from the voice blocks) with graphs off: the captured step graph
     * (replayed for the 10 steps, with the step's offsets and row copied in before each) and
     * direct launches give the same bits */
    gpu_flow_req *qq[2];
    float *mo = nan_buf((size_t)2 * n1 * 80);
    gpu_flow_call cc[2];
    memset(cc, 0, sizeof cc);
    for (int i = 0; i < 2; i++) {
      assert_int_equal(gpu_flow_req_open(gf, fx->tokens, P, fx->prompt_feat, fx->spk, G, &qq[i]),
                       COSY_OK);
      cc[i] = c[1 + i];
      cc[i].q = qq[i];
      cc[i].mel = mo + (size_t)i * n1 * 80;
    }
    gpu_flow_set_graphs(gf, 0);
    assert_int_equal(gpu_flow_batch(gf, cc, 2, NULL), COSY_OK);
    gpu_flow_set_graphs(gf, 1);
    const double d = tu_max_abs_diff(mo, m1 + (size_t)n1 * 80, (size_t)2 * n1 * 80);
    print_message("  BATCH chunk 1, batch of 2: graphs off vs the step graph: max abs %.3g\n", d);
    ok &= d == 0.0;
    for (int i = 0; i < 2; i++) gpu_flow_req_close(gf, qq[i]);
    /* and at the exact sizes (gpu_flow_set_pad 0, the knob COSY_FLOW_PAD=0) instead of the
     * padded ones: the padding rows change nothing in the real rows (more than 64 rows here) */
    for (int i = 0; i < 2; i++) {
      assert_int_equal(gpu_flow_req_open(gf, fx->tokens, P, fx->prompt_feat, fx->spk, G, &qq[i]),
                       COSY_OK);
      cc[i].q = qq[i];
    }
    for (size_t i = 0; i < (size_t)2 * n1 * 80; i++) mo[i] = NAN;
    gpu_flow_set_pad(gf, 0);
    assert_int_equal(gpu_flow_batch(gf, cc, 2, NULL), COSY_OK);
    gpu_flow_set_pad(gf, 1);
    const double dp = tu_max_abs_diff(mo, m1 + (size_t)n1 * 80, (size_t)2 * n1 * 80);
    print_message("  BATCH chunk 1, batch of 2: exact sizes vs padded: max abs %.3g\n", dp);
    ok &= dp == 0.0 && all_finite(mo, (size_t)2 * n1 * 80);
    for (int i = 0; i < 2; i++) gpu_flow_req_close(gf, qq[i]);
    free(mo);
  }
  /* the last call: every token, finalize, block-causal, from the cached blocks */
  const int n2 = 2 * (G - hop);
  float *m2 = nan_buf((size_t)3 * n2 * 80);
  for (int i = 0; i < 3; i++) {
    c[i].n_gen = G;
    c[i].finalize = 1;
    c[i].frame_from = n1;
    c[i].n_frames = n2;
    c[i].mel = m2 + (size_t)i * n2 * 80;
  }
  assert_int_equal(gpu_flow_batch(gf, c, 1, NULL), COSY_OK);
  assert_int_equal(gpu_flow_batch(gf, c + 1, 2, NULL), COSY_OK);
  assert_int_equal(gpu_flow_infer(gf, fx->tokens, P, G, fx->prompt_feat, 2 * P, fx->spk, 1, 1,
                                  NULL, &gm, &gn),
                   COSY_OK);
  assert_int_equal(ref_flow_infer(fx->rf, fx->tokens, P, G, fx->prompt_feat, 2 * P, fx->spk, 1, 1,
                                  NULL, &rm, &rn, NULL),
                   COSY_OK);
  assert_true(gn == n1 + n2 && rn == gn);
  float *g2 = nan_buf((size_t)n2 * 80), *r2 = nan_buf((size_t)n2 * 80);
  for (int t = 0; t < n2; t++)
    for (int k = 0; k < 80; k++) {
      g2[(size_t)t * 80 + k] = gm[(size_t)k * gn + n1 + t];
      r2[(size_t)t * 80 + k] = rm[(size_t)k * rn + n1 + t];
    }
  ok &= report("BATCH last (cached) vs gpu_flow_infer", m2, g2, (size_t)n2 * 80, TOL);
  ok &= report("BATCH last (cached) vs CPU ref", m2, r2, (size_t)n2 * 80, TOL);
  print_message("  BATCH last: in a batch of 2 vs alone: max abs %.3g / %.3g\n",
                tu_max_abs_diff(m2 + (size_t)n2 * 80, m2, (size_t)n2 * 80),
                tu_max_abs_diff(m2 + (size_t)2 * n2 * 80, m2, (size_t)n2 * 80));
  /* three chunks (first, a middle one from the cache, the last from the cache) on a longer
   * utterance: the golden tokens plus 60 more */
  {
    const int G3 = G + 60;
    int32_t *t3 = (int32_t *)malloc(sizeof(int32_t) * (size_t)(P + G3));
    memcpy(t3, fx->tokens, sizeof(int32_t) * (size_t)(P + G));
    for (int i = 0; i < 60; i++) t3[P + G + i] = (i * 7919 + 17) % 6561;
    gpu_flow_req *q3 = NULL;
    assert_int_equal(gpu_flow_req_open(gf, t3, P, fx->prompt_feat, fx->spk, G3, &q3), COSY_OK);
    const int offs[4] = {0, hop, hop + 50, G3};
    for (int ch = 0; ch < 3; ch++) {
      const int fin = ch == 2, ngen = fin ? G3 : offs[ch + 1] + 3;
      const int nf = 2 * (offs[ch + 1] - offs[ch]);
      float *mm = nan_buf((size_t)nf * 80), *gg = NULL;
      gpu_flow_call c3;
      memset(&c3, 0, sizeof c3);
      c3.q = q3;
      c3.tokens = t3;
      c3.n_gen = ngen;
      c3.finalize = fin;
      c3.frame_from = 2 * offs[ch];
      c3.n_frames = nf;
      c3.mel = mm;
      assert_int_equal(gpu_flow_batch(gf, &c3, 1, NULL), COSY_OK);
      int n3 = 0;
      assert_int_equal(gpu_flow_infer(gf, t3, P, ngen, fx->prompt_feat, 2 * P, fx->spk, 1, fin,
                                      NULL, &gg, &n3),
                       COSY_OK);
      float *g3 = nan_buf((size_t)nf * 80);
      for (int t = 0; t < nf; t++)
        for (int k = 0; k < 80; k++) g3[(size_t)t * 80 + k] = gg[(size_t)k * n3 + 2 * offs[ch] + t];
      char nm[64];
      snprintf(nm, sizeof nm, "BATCH3 chunk %d vs gpu_flow_infer", ch);
      ok &= report(nm, mm, g3, (size_t)nf * 80, TOL);
      free(mm);
      free(gg);
      free(g3);
    }
    gpu_flow_req_close(gf, q3);
    free(t3);
  }
  for (int i = 0; i < 3; i++) gpu_flow_req_close(gf, q[i]);
  assert_int_equal(gpu_flow_pages_free(gf), gpu_flow_pages_total(gf) - gpu_flow_pages_voice(gf));
  free(gm);
  free(rm);
  free(g1);
  free(r1);
  free(g2);
  free(r2);
  free(m1);
  free(m2);
  gpu_flow_free(gf);
  assert_true(ok);
}

static void test_batch_cache(void **state) {
  fixture *fx = *state;
  if (fx->why) skip();
  batch_cache_case(fx, 0, 0);
}

/* the same with the attention's keys split over 4 blocks a query tile */
static void test_batch_cache_split(void **state) {
  fixture *fx = *state;
  if (fx->why) skip();
  batch_cache_case(fx, 4, 0);
}

/* the same with the part count chosen per segment from its key count (COSY_FLOW_ATTN_SPLIT=auto) */
static void test_batch_cache_auto(void **state) {
  fixture *fx = *state;
  if (fx->why) skip();
  batch_cache_case(fx, GPU_FLOW_ATTN_AUTO, 0);
}

/* the same with cosy_k_attn_dit_paged_v2 (COSY_FLOW_ATTN_V2) at 64- and 128-query tiles and
 * with the tile chosen per batch */
static void test_batch_cache_v2(void **state) {
  fixture *fx = *state;
  if (fx->why) skip();
  batch_cache_case(fx, 0, 64);
  batch_cache_case(fx, 0, 128);
  batch_cache_case(fx, 0, GPU_FLOW_ATTN_V2_AUTO);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernels),   cmocka_unit_test(test_estimator),
      cmocka_unit_test(test_flow_a),    cmocka_unit_test(test_flow_b),
      cmocka_unit_test(test_flow_c),    cmocka_unit_test(test_graphs),
      cmocka_unit_test(test_invalid),   cmocka_unit_test(test_batch_cache),
      cmocka_unit_test(test_batch_cache_split), cmocka_unit_test(test_batch_cache_auto),
      cmocka_unit_test(test_batch_cache_v2),
      cmocka_unit_test(test_full_model),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

#endif /* COSY_WITH_CUDA */
