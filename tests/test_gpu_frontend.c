/* test_gpu_frontend.c - the voice front end on the GPU: kernels/frontend.cu, lib/gpu/frontend.c and
 * the GPU engine's cosy_voice_from_audio.
 *
 * Kernels: each launcher of kernels/kernels_frontend.h against a plain C loop written here from the
 *   header's formula, on random data with odd sizes and row strides (im2col and flatten: equal bit
 *   for bit; layernorm, GELU, FSMN, segment context (each segment's sum over seg, the partial last
 *   one too), statistics: max abs error <= 1e-5 relative to
 *   the data's scale; FSQ: equal wherever the host's value is not within 1e-5 of a rounding
 *   boundary), and the argument checks.
 * Models (small random models of tests/data/frontend, $COSY_TEST_FE_MODEL) on the golden features
 *   (golden/frontend/whisper_logmel.npy, kaldi_fbank_cmn.npy of the shared data):
 *   speech tokenizer, 348 and 301 frames: tokens equal to the golden ones except where the golden
 *     FSQ projection sits within 1e-3 of a rounding boundary, and at most 1% of them; FSQ
 *     projection, encoder output, conv2 and block 0 rel L2 <= 1e-4 (fp32 throughout);
 *   CAM++ on a short (80 fbank frames, 0.8 s), two medium (250, 346) and a long (1100, 11 s) input
 *     (test_ref_frontend.c's cases): embedding vs campplus_small.onnx under onnxruntime 1.18.0
 *     rel L2 <= 1e-4 (the partial last segment window divided by 100, lib/ref/campplus.h), stats
 *     rel L2 <= 1e-4 vs PyTorch with the same pooling, head / tdnn (346) rel L2 <= 1e-4;
 *   gpu_fe_run (both in one job) == the two halves run alone.
 * Engine: a GPU engine's cosy_voice_from_audio of audio/zero_shot_prompt.wav: tokens == golden (as
 *   above), embedding rel L2 <= 1e-2 vs golden, the prompt mel bit-equal to a CPU engine's voice
 *   (the same CPU code); two clones made while a synthesis streams equal the clone made alone;
 *   bad input gets the CPU engine's statuses.
 * Full size (COSY_FULL_FE_MODEL: a model file with the real front-end geometry, e.g.
 *   tools/make_model.py --preset full --frontend full): GPU vs the CPU reference on the 16 kHz
 *   golden prompt (tokens as above, against the CPU's projection; embedding rel L2 <= 1e-2), then
 *   the time of gpu_fe_run on 10 s of features (TIMING lines).
 * Without a CUDA device (or built without CUDA) everything skips with the reason. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "audio.h"
#include "cosyvoice.h"
#include "engine.h"
#include "model.h"
#include "ref/campplus.h"
#include "ref/s3tok.h"
#include "testutil.h"
#include "util.h"

#ifndef COSY_WITH_CUDA

static void test_skip(void **state) {
  (void)state;
  print_message("SKIP: built without CUDA\n");
  skip();
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_skip)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* COSY_WITH_CUDA */

#include <cuda_runtime_api.h>

#include "gpu/frontend.h"
#include "gpu/gpu.h"
#include "kernels_frontend.h"

#define TOL_NET 1e-4
#define TOL_EMB 1e-2
#define TOL_EMB_ORT 1e-4 /* the network on the golden features vs onnxruntime 1.18.0 */
#define FSQ_NEAR 1e-3 /* a token may differ only where the reference sits this close to a boundary */
#define MAX_MEL_SMALL 1200 /* the long CAM++ case has 1100 fbank frames */
#define PROMPT_TEXT "You are a helpful assistant.<|endofprompt|>希望你以后能够做的比我还好呦。"

typedef struct fixture {
  int have_dev;
  cosy_gpu *g;
  cosy_model *m;
  gpu_fe *fe;
} fixture;

/* ---- helpers --------------------------------------------------------------------------------- */

static uint64_t rng_s = 0x9E3779B97F4A7C15ull;
static void rng_seed(uint64_t s) { rng_s = s * 0x9E3779B97F4A7C15ull + 12345; }
static double urand(void) {
  rng_s ^= rng_s << 13, rng_s ^= rng_s >> 7, rng_s ^= rng_s << 17;
  return (double)(rng_s >> 11) * (1.0 / 9007199254740992.0);
}
static void fill(float *p, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * (float)urand();
}

#define CU(call)                                                                    \
  do {                                                                              \
    cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) {                                                        \
      print_message("CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, \
                    __LINE__, #call);                                               \
      fail();                                                                       \
    }                                                                               \
  } while (0)

static float *dup_dev(const float *h, size_t n) {
  float *d = NULL;
  CU(cudaMalloc((void **)&d, (n ? n : 1) * sizeof(float)));
  if (n) CU(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}
static float *dev_zero(size_t n) {
  float *d = NULL;
  CU(cudaMalloc((void **)&d, (n ? n : 1) * sizeof(float)));
  CU(cudaMemset(d, 0, (n ? n : 1) * sizeof(float)));
  return d;
}
static float *to_host(const float *d, size_t n) {
  float *h = malloc((n ? n : 1) * sizeof(float));
  CU(cudaDeviceSynchronize());
  CU(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

/* max |a - ref| / max(1, max |ref|) */
static double scaled_err(const float *a, const float *ref, size_t n) {
  double m = 0, s = 1;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - ref[i]);
    if (d > m || d != d) m = d != d ? INFINITY : d;
    if (fabs(ref[i]) > s) s = fabs(ref[i]);
  }
  return m / s;
}

static void expect_close(const char *what, const float *a, const float *ref, size_t n, double tol) {
  double e = scaled_err(a, ref, n);
  print_message("%-44s scaled max err %.3g (limit %.0e)\n", what, e, tol);
  assert_true(e <= tol);
}

static int have_device(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return 0;
  }
  return 1;
}

#define REQUIRE_DEV(fx) TU_REQUIRE((fx)->have_dev, "no CUDA device")

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  *state = fx;
  if (!have_device()) return 0;
  fx->have_dev = 1;
  if (cosy_gpu_create(0, 0.5f, tu_knobs(), &fx->g) != COSY_OK) {
    fprintf(stderr, "cosy_gpu_create failed: %s\n", cosy_last_error());
    return -1;
  }
  const char *model = tu_fe_model();
  if (!model) return 0;
  if (cosy_model_load(model, &fx->m) != COSY_OK ||
      gpu_fe_create(fx->g, fx->m, MAX_MEL_SMALL, &fx->fe) != COSY_OK) {
    fprintf(stderr, "front-end setup failed: %s\n", cosy_last_error());
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  gpu_fe_free(fx->fe);
  cosy_gpu_free(fx->g);
  cosy_model_free(fx->m);
  free(fx);
  return 0;
}

/* ---- kernels --------------------------------------------------------------------------------- */

static void test_k_im2col(void **state) {
  fixture *fx = *state;
  REQUIRE_DEV(fx);
  rng_seed(1);
  /* 1-D, channels-first [Ci][Ti] */
  {
    const int Ti = 37, Ci = 5, k = 3, s = 2, d = 1, p = 1, To = (Ti - 1) / 2 + 1;
    float *x = malloc(sizeof(float) * Ti * Ci);
    fill(x, (size_t)Ti * Ci, -1, 1);
    float *dx = dup_dev(x, (size_t)Ti * Ci), *dc = dev_zero((size_t)To * Ci * k);
    CU(cosy_k_fe_im2col1d(NULL, dx, 1, Ti, Ti, Ci, To, k, s, d, p, dc));
    float *c = to_host(dc, (size_t)To * Ci * k);
    int bad = 0;
    for (int t = 0; t < To; t++)
      for (int ci = 0; ci < Ci; ci++)
        for (int j = 0; j < k; j++) {
          int tt = t * s + j * d - p;
          float want = tt < 0 || tt >= Ti ? 0.f : x[ci * Ti + tt];
          bad += c[(t * Ci + ci) * k + j] != want;
        }
    print_message("im2col1d channels-first: %d wrong\n", bad);
    assert_int_equal(bad, 0);
    free(x), free(c), cudaFree(dx), cudaFree(dc);
  }
  /* 1-D, frame-major rows of a wider buffer, dilation 2 */
  {
    const int Ti = 23, Ci = 7, ld = 9, k = 3, s = 1, d = 2, p = 2, To = Ti;
    float *x = malloc(sizeof(float) * Ti * ld);
    fill(x, (size_t)Ti * ld, -1, 1);
    float *dx = dup_dev(x, (size_t)Ti * ld), *dc = dev_zero((size_t)To * Ci * k);
    CU(cosy_k_fe_im2col1d(NULL, dx, ld, 1, Ti, Ci, To, k, s, d, p, dc));
    float *c = to_host(dc, (size_t)To * Ci * k);
    int bad = 0;
    for (int t = 0; t < To; t++)
      for (int ci = 0; ci < Ci; ci++)
        for (int j = 0; j < k; j++) {
          int tt = t * s + j * d - p;
          float want = tt < 0 || tt >= Ti ? 0.f : x[tt * ld + ci];
          bad += c[(t * Ci + ci) * k + j] != want;
        }
    print_message("im2col1d frame-major, dilation 2: %d wrong\n", bad);
    assert_int_equal(bad, 0);
    free(x), free(c), cudaFree(dx), cudaFree(dc);
  }
  /* 2-D, images [Fi][T][Ci], 3x3 stride (2, 1), rows [1, 4) of Fo = 5 */
  {
    const int Fi = 10, T = 13, Ci = 3, k = 3, sf = 2, fo0 = 1, nfo = 3, K = Ci * k * k;
    float *x = malloc(sizeof(float) * Fi * T * Ci);
    fill(x, (size_t)Fi * T * Ci, -1, 1);
    float *dx = dup_dev(x, (size_t)Fi * T * Ci), *dc = dev_zero((size_t)nfo * T * K);
    CU(cosy_k_fe_im2col2d(NULL, dx, (int64_t)T * Ci, Ci, 1, Fi, T, Ci, k, sf, fo0, nfo, dc, K));
    float *c = to_host(dc, (size_t)nfo * T * K);
    int bad = 0;
    for (int fo = fo0; fo < fo0 + nfo; fo++)
      for (int t = 0; t < T; t++)
        for (int ci = 0; ci < Ci; ci++)
          for (int kf = 0; kf < k; kf++)
            for (int kt = 0; kt < k; kt++) {
              int f = fo * sf + kf - 1, tt = t + kt - 1;
              float want = f < 0 || f >= Fi || tt < 0 || tt >= T ? 0.f : x[(f * T + tt) * Ci + ci];
              bad += c[((fo - fo0) * T + t) * K + (ci * k + kf) * k + kt] != want;
            }
    print_message("im2col2d [F][T][C], stride (2,1), row chunk: %d wrong\n", bad);
    assert_int_equal(bad, 0);
    free(x), free(c), cudaFree(dx), cudaFree(dc);
  }
  /* 2-D, an fbank [T][F] as a one-channel image, all rows, rows padded from 9 to 12 columns
   * (the padding starts out as NaN and must become 0) */
  {
    const int F = 12, T = 9, k = 3, ldc = 12;
    float *x = malloc(sizeof(float) * F * T);
    fill(x, (size_t)F * T, -1, 1);
    float *dx = dup_dev(x, (size_t)F * T), *dc = dev_zero((size_t)F * T * ldc);
    CU(cudaMemset(dc, 0xff, sizeof(float) * F * T * ldc));
    CU(cosy_k_fe_im2col2d(NULL, dx, 1, F, 1, F, T, 1, k, 1, 0, F, dc, ldc));
    float *c = to_host(dc, (size_t)F * T * ldc);
    int bad = 0;
    for (int fo = 0; fo < F; fo++)
      for (int t = 0; t < T; t++) {
        for (int kf = 0; kf < 3; kf++)
          for (int kt = 0; kt < 3; kt++) {
            int f = fo + kf - 1, tt = t + kt - 1;
            float want = f < 0 || f >= F || tt < 0 || tt >= T ? 0.f : x[tt * F + f];
            bad += c[(fo * T + t) * ldc + kf * 3 + kt] != want;
          }
        for (int j = 9; j < ldc; j++) bad += c[(fo * T + t) * ldc + j] != 0.f;
      }
    print_message("im2col2d fbank layout, padded rows: %d wrong\n", bad);
    assert_int_equal(cosy_k_fe_im2col2d(NULL, dx, 1, F, 1, F, T, 1, k, 1, 0, F, dc, 8),
                     cudaErrorInvalidValue);
    assert_int_equal(bad, 0);
    free(x), free(c), cudaFree(dx), cudaFree(dc);
  }
}

static void test_k_layernorm_act(void **state) {
  fixture *fx = *state;
  REQUIRE_DEV(fx);
  rng_seed(2);
  const int R = 5, D = 300;
  float *x = malloc(sizeof(float) * R * D), *w = malloc(sizeof(float) * D),
        *b = malloc(sizeof(float) * D), *ref = malloc(sizeof(float) * R * D);
  fill(x, (size_t)R * D, -3, 5);
  fill(w, D, 0.5f, 1.5f);
  fill(b, D, -0.2f, 0.2f);
  for (int r = 0; r < R; r++) {
    double s = 0, ss = 0;
    for (int i = 0; i < D; i++) s += x[r * D + i];
    double mean = s / D;
    for (int i = 0; i < D; i++) ss += (x[r * D + i] - mean) * (x[r * D + i] - mean);
    double rstd = 1.0 / sqrt(ss / D + 1e-5);
    for (int i = 0; i < D; i++) ref[r * D + i] = (float)((x[r * D + i] - mean) * rstd * w[i] + b[i]);
  }
  float *dx = dup_dev(x, (size_t)R * D), *dw = dup_dev(w, D), *db = dup_dev(b, D);
  CU(cosy_k_fe_layernorm(NULL, dx, dw, db, dx, R, D, 1e-5f)); /* in place */
  float *y = to_host(dx, (size_t)R * D);
  expect_close("layernorm (in place)", y, ref, (size_t)R * D, 1e-5);
  free(y);
  /* activations on a strided [7][11] block of rows 13 apart */
  const int rows = 7, cols = 11, ld = 13, ldy = 12;
  float *a = malloc(sizeof(float) * rows * ld), *a2 = malloc(sizeof(float) * rows * ld);
  fill(a, (size_t)rows * ld, -4, 4);
  fill(a2, (size_t)rows * ld, -4, 4);
  float *da = dup_dev(a, (size_t)rows * ld), *da2 = dup_dev(a2, (size_t)rows * ld);
  float *dy = dev_zero((size_t)rows * ldy);
  float *want = malloc(sizeof(float) * rows * ldy);
  for (int op = 0; op < 3; op++) {
    CU(cosy_k_fe_act(NULL, (cosy_fe_act)op, da, da2, ld, dy, ldy, rows, cols));
    float *got = to_host(dy, (size_t)rows * ldy);
    memcpy(want, got, sizeof(float) * rows * ldy); /* the untouched columns compare equal */
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < cols; c++) {
        double v = a[r * ld + c];
        if (op == COSY_FE_GELU) v = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
        else {
          if (op == COSY_FE_ADD_RELU) v = (double)(a[r * ld + c] + a2[r * ld + c]);
          v = v > 0 ? v : 0;
        }
        want[r * ldy + c] = (float)v;
      }
    const char *nm[3] = {"act GELU (erf)", "act ReLU", "act add + ReLU"};
    expect_close(nm[op], got, want, (size_t)rows * ldy, op == COSY_FE_GELU ? 1e-6 : 0.0);
    free(got);
  }
  free(x), free(w), free(b), free(ref), free(a), free(a2), free(want);
  cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(da), cudaFree(da2), cudaFree(dy);
}

static void test_k_fsmn_fsq(void **state) {
  fixture *fx = *state;
  REQUIRE_DEV(fx);
  rng_seed(3);
  const int N = 20, C = 7, K = 5, ldx = 9, ldv = 21;
  float *x = malloc(sizeof(float) * N * ldx), *v = malloc(sizeof(float) * N * ldv),
        *w = malloc(sizeof(float) * C * K);
  fill(x, (size_t)N * ldx, -1, 1);
  fill(v, (size_t)N * ldv, -1, 1);
  fill(w, (size_t)C * K, -0.5f, 0.5f);
  float *want = malloc(sizeof(float) * N * ldx);
  memcpy(want, x, sizeof(float) * N * ldx);
  for (int t = 0; t < N; t++)
    for (int c = 0; c < C; c++) {
      double acc = v[t * ldv + c];
      for (int j = 0; j < K; j++) {
        int tt = t + j - (K - 1) / 2;
        if (tt >= 0 && tt < N) acc += (double)w[c * K + j] * v[tt * ldv + c];
      }
      want[t * ldx + c] = (float)(x[t * ldx + c] + acc);
    }
  float *dx = dup_dev(x, (size_t)N * ldx), *dv = dup_dev(v, (size_t)N * ldv), *dw = dup_dev(w, (size_t)C * K);
  CU(cosy_k_fe_fsmn_add(NULL, dx, ldx, dv, ldv, dw, N, C, K));
  float *got = to_host(dx, (size_t)N * ldx);
  expect_close("fsmn_add (strided v, residual)", got, want, (size_t)N * ldx, 1e-5);
  free(got), free(x), free(v), free(w), free(want), cudaFree(dx), cudaFree(dv), cudaFree(dw);
  /* FSQ */
  const int NT = 1000;
  const float scale = 0.999f;
  float *p = malloc(sizeof(float) * NT * 8);
  fill(p, (size_t)NT * 8, -3, 3);
  float *dp = dup_dev(p, (size_t)NT * 8);
  int32_t *dt = NULL, *tok = malloc(sizeof(int32_t) * NT);
  CU(cudaMalloc((void **)&dt, sizeof(int32_t) * NT));
  CU(cosy_k_fe_fsq(NULL, dp, scale, NT, dt));
  CU(cudaDeviceSynchronize());
  CU(cudaMemcpy(tok, dt, sizeof(int32_t) * NT, cudaMemcpyDeviceToHost));
  int bad = 0, near = 0;
  for (int t = 0; t < NT; t++) {
    int32_t id = 0, p3 = 1;
    int close = 0;
    for (int i = 0; i < 8; i++) {
      float u = tanhf(p[t * 8 + i]) * scale;
      close |= fabsf(fabsf(u) - 0.5f) < 1e-5f;
      id += (int32_t)(rintf(u) + 1.0f) * p3;
      p3 *= 3;
    }
    near += close;
    if (!close) bad += tok[t] != id;
    assert_true(tok[t] >= 0 && tok[t] < 6561);
  }
  print_message("fsq: %d of %d tokens differ (%d near a boundary, not counted)\n", bad, NT, near);
  assert_int_equal(bad, 0);
  free(p), free(tok), cudaFree(dp), cudaFree(dt);
}

static void test_k_cam(void **state) {
  fixture *fx = *state;
  REQUIRE_DEV(fx);
  rng_seed(4);
  /* bn_relu: [T][C] of a wider X into a contiguous H */
  const int T = 250, C = 40, ldx = 50, seg = 100, G = 6, ldo = 17;
  float *x = malloc(sizeof(float) * T * ldx), *sc = malloc(sizeof(float) * C),
        *sh = malloc(sizeof(float) * C);
  fill(x, (size_t)T * ldx, -2, 2);
  fill(sc, C, 0.5f, 1.5f);
  fill(sh, C, -0.3f, 0.3f);
  float *dx = dup_dev(x, (size_t)T * ldx), *dsc = dup_dev(sc, C), *dsh = dup_dev(sh, C);
  /* zero-padded to Cp columns of rows ldp apart (the padding starts out as NaN) */
  const int Cp = C + 5, ldp = C + 7;
  float *dhp = NULL;
  CU(cudaMalloc((void **)&dhp, sizeof(float) * T * ldp));
  CU(cudaMemset(dhp, 0xff, sizeof(float) * T * ldp));
  CU(cosy_k_fe_bn_relu(NULL, dx, ldx, dsc, dsh, dhp, ldp, T, C, Cp));
  float *hp = to_host(dhp, (size_t)T * ldp), *wantp = malloc(sizeof(float) * T * ldp);
  memcpy(wantp, hp, sizeof(float) * T * ldp);
  for (int t = 0; t < T; t++)
    for (int c = 0; c < Cp; c++) {
      double v = c < C ? (double)x[t * ldx + c] * sc[c] + sh[c] : 0.0;
      wantp[t * ldp + c] = (float)(v > 0 ? v : 0);
    }
  for (int t = 0; t < T; t++) /* the columns past Cp are untouched (NaN) */
    for (int c = Cp; c < ldp; c++) assert_true(isnan(hp[t * ldp + c]));
  for (int t = 0; t < T; t++)
    for (int c = Cp; c < ldp; c++) hp[t * ldp + c] = wantp[t * ldp + c] = 0.f;
  expect_close("bn_relu (zero-padded columns)", hp, wantp, (size_t)T * ldp, 1e-6);
  free(hp), free(wantp), cudaFree(dhp);
  float *dh = dev_zero((size_t)T * C);
  CU(cosy_k_fe_bn_relu(NULL, dx, ldx, dsc, dsh, dh, C, T, C, C));
  float *h = to_host(dh, (size_t)T * C), *want = malloc(sizeof(float) * T * C);
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C; c++) {
      double v = (double)x[t * ldx + c] * sc[c] + sh[c];
      want[t * C + c] = (float)(v > 0 ? v : 0);
    }
  expect_close("bn_relu", h, want, (size_t)T * C, 1e-6);
  /* seg_ctx of h: 3 segments, the last of 50 frames (its sum divided by seg all the same) */
  const int nseg = (T + seg - 1) / seg;
  float *dctx = dev_zero((size_t)nseg * C);
  CU(cosy_k_fe_seg_ctx(NULL, dh, T, C, seg, dctx));
  float *ctx = to_host(dctx, (size_t)nseg * C), *wctx = malloc(sizeof(float) * nseg * C);
  for (int c = 0; c < C; c++) {
    double all = 0;
    for (int t = 0; t < T; t++) all += h[t * C + c];
    for (int g = 0; g < nseg; g++) {
      int t0 = g * seg, t1 = t0 + seg < T ? t0 + seg : T;
      double s = 0;
      for (int t = t0; t < t1; t++) s += h[t * C + c];
      wctx[g * C + c] = (float)(all / T + s / seg);
    }
  }
  expect_close("seg_ctx (global + segment means)", ctx, wctx, (size_t)nseg * C, 1e-6);
  /* cam_mask into columns of a wider buffer */
  float *y = malloc(sizeof(float) * T * G), *lg = malloc(sizeof(float) * nseg * G);
  fill(y, (size_t)T * G, -1, 1);
  fill(lg, (size_t)nseg * G, -4, 4);
  float *dy = dup_dev(y, (size_t)T * G), *dl = dup_dev(lg, (size_t)nseg * G);
  float *dout = dev_zero((size_t)T * ldo);
  CU(cosy_k_fe_cam_mask(NULL, dy, dl, seg, dout, ldo, T, G));
  float *out = to_host(dout, (size_t)T * ldo), *wout = calloc((size_t)T * ldo, sizeof(float));
  for (int t = 0; t < T; t++)
    for (int g = 0; g < G; g++)
      wout[t * ldo + g] = (float)(y[t * G + g] / (1.0 + exp(-(double)lg[(t / seg) * G + g])));
  expect_close("cam_mask (sigmoid of the segment's logit)", out, wout, (size_t)T * ldo, 1e-6);
  /* stats of relu(x) over the first C channels of rows ldx apart */
  float *dst = dev_zero((size_t)2 * C);
  CU(cosy_k_fe_stats(NULL, dx, ldx, T, C, dst));
  float *st = to_host(dst, (size_t)2 * C), wst[80];
  for (int c = 0; c < C; c++) {
    double s = 0, ss = 0;
    for (int t = 0; t < T; t++) s += x[t * ldx + c] > 0 ? x[t * ldx + c] : 0;
    double mean = s / T;
    for (int t = 0; t < T; t++) {
      double d = (x[t * ldx + c] > 0 ? x[t * ldx + c] : 0) - mean;
      ss += d * d;
    }
    wst[c] = (float)mean;
    wst[C + c] = (float)sqrt(ss / (T - 1));
  }
  expect_close("stats (mean, unbiased std of relu)", st, wst, (size_t)2 * C, 1e-6);
  /* flatten [F][T][M] -> [T][M*F] */
  const int F = 5, Tf = 7, M = 4;
  float *im = malloc(sizeof(float) * F * Tf * M);
  fill(im, (size_t)F * Tf * M, -1, 1);
  float *dim = dup_dev(im, (size_t)F * Tf * M), *dfl = dev_zero((size_t)F * Tf * M);
  CU(cosy_k_fe_flatten(NULL, dim, F, Tf, M, dfl));
  float *fl = to_host(dfl, (size_t)F * Tf * M);
  int bad = 0;
  for (int f = 0; f < F; f++)
    for (int t = 0; t < Tf; t++)
      for (int m = 0; m < M; m++) bad += fl[t * M * F + m * F + f] != im[(f * Tf + t) * M + m];
  print_message("flatten: %d wrong\n", bad);
  assert_int_equal(bad, 0);
  /* argument checks */
  assert_int_equal(cosy_k_fe_seg_ctx(NULL, dh, 100 * (COSY_FE_MAX_SEGS + 1), C, 100, dctx),
                   cudaErrorInvalidValue);
  assert_int_equal(cosy_k_fe_stats(NULL, dx, ldx, 1, C, dst), cudaErrorInvalidValue);
  assert_int_equal(cosy_k_fe_act(NULL, COSY_FE_ADD_RELU, dx, NULL, ldx, dx, ldx, 2, 2),
                   cudaErrorInvalidValue);
  assert_int_equal(cosy_k_fe_bn_relu(NULL, dx, 3, dsc, dsh, dh, C, T, C, C), cudaErrorInvalidValue);
  assert_int_equal(cosy_k_fe_bn_relu(NULL, dx, ldx, dsc, dsh, dh, C, T, C, C - 1),
                   cudaErrorInvalidValue);
  assert_int_equal(cosy_k_fe_bn_relu(NULL, dx, ldx, dsc, dsh, dh, C, T, C, C + 1),
                   cudaErrorInvalidValue); /* ldy < C_pad */
  assert_int_equal(cosy_k_fe_im2col1d(NULL, dx, 1, 1, 10, 1, 5, 0, 1, 1, 0, dh), cudaErrorInvalidValue);
  assert_int_equal(cosy_k_fe_fsq(NULL, NULL, 1.f, 4, NULL), cudaErrorInvalidValue);
  assert_int_equal(cosy_k_fe_flatten(NULL, dim, 0, Tf, M, dfl), cudaSuccess);
  free(x), free(sc), free(sh), free(h), free(want), free(ctx), free(wctx), free(y), free(lg);
  free(out), free(wout), free(st), free(im), free(fl);
  cudaFree(dx), cudaFree(dsc), cudaFree(dsh), cudaFree(dh), cudaFree(dctx), cudaFree(dy);
  cudaFree(dl), cudaFree(dout), cudaFree(dst), cudaFree(dim), cudaFree(dfl);
}

/* ---- models on the golden data ----------------------------------------------------------------- */

static float *load_local(const char *name, int64_t want) {
  int nd;
  int64_t sh[8];
  float *v = tu_npy_f32(tu_fe_file(name), &nd, sh);
  if (v && want >= 0 && tu_numel(nd, sh) != want) {
    fprintf(stderr, "%s: %lld elements, expected %lld\n", name, (long long)tu_numel(nd, sh),
            (long long)want);
    free(v);
    return NULL;
  }
  return v;
}

static double check(const char *what, const float *a, const float *ref, size_t n, double tol) {
  double rel = tu_rel_l2(a, ref, n), mad = tu_max_abs_diff(a, ref, n);
  print_message("%-44s rel L2 %.3g, max abs %.3g (limit rel %.0e)\n", what, rel, mad, tol);
  assert_true(rel <= tol);
  return rel;
}

/* Tokens vs reference tokens whose FSQ projection (before tanh) is ref_proj [N][8]: a token may
 * differ only where the reference's |scale tanh(h)| is within FSQ_NEAR of 0.5, and at most 1% of
 * them may. Returns the number that differ. */
static int check_tokens(const char *what, const int32_t *tok, const int32_t *ref, const float *ref_proj,
                        int N, float scale) {
  int mism = 0, unexplained = 0;
  for (int i = 0; i < N; i++) {
    if (tok[i] == ref[i]) continue;
    mism++;
    float margin = INFINITY;
    for (int d = 0; d < 8; d++) {
      float m = fabsf(fabsf(tanhf(ref_proj[i * 8 + d]) * scale) - 0.5f);
      if (m < margin) margin = m;
    }
    if (!(margin < FSQ_NEAR)) unexplained++;
  }
  print_message("%s: %d of %d tokens differ, %d of them not at an FSQ boundary (limits: %d, 0)\n",
                what, mism, N, unexplained, N / 100);
  assert_int_equal(unexplained, 0);
  assert_true(mism <= N / 100);
  return mism;
}

static void run_s3(fixture *fx, const char *tag, int T) {
  float *full = tu_load_f32("golden/frontend/whisper_logmel.npy", 128 * 348);
  assert_non_null(full);
  float *mel = malloc((size_t)128 * T * sizeof(float));
  for (int c = 0; c < 128; c++) memcpy(mel + (size_t)c * T, full + (size_t)c * 348, T * sizeof(float));
  char nm[128];
  snprintf(nm, sizeof nm, "s3_%s_tokens.npy", tag);
  int nd;
  int64_t sh[8];
  int32_t *rt = tu_npy_i32(tu_fe_file(nm), &nd, sh);
  assert_non_null(rt);
  const int N = (int)sh[0], S = fx->m->hp.s3_state;
  float *proj = malloc((size_t)N * 8 * sizeof(float)), *enc = malloc((size_t)N * S * sizeof(float));
  float *c2 = malloc((size_t)N * S * sizeof(float)), *b0 = malloc((size_t)N * S * sizeof(float));
  int32_t *tok, nt;
  assert_int_equal(gpu_fe_s3tok(fx->fe, mel, T, &tok, &nt, proj, enc, c2, b0), COSY_OK);
  assert_int_equal(nt, N);
  snprintf(nm, sizeof nm, "s3_%s_proj.npy", tag);
  float *r = load_local(nm, (int64_t)N * 8);
  assert_non_null(r);
  char what[96];
  snprintf(what, sizeof what, "GPU speech tokens (%s, %d frames)", tag, T);
  check_tokens(what, tok, rt, r, N, fx->m->hp.s3_fsq_scale);
  check("GPU FSQ projection", proj, r, (size_t)N * 8, TOL_NET);
  free(r);
  snprintf(nm, sizeof nm, "s3_%s_encoder_out.npy", tag);
  r = load_local(nm, (int64_t)N * S);
  assert_non_null(r);
  check("GPU encoder output", enc, r, (size_t)N * S, TOL_NET);
  free(r);
  if (!strcmp(tag, "full")) {
    r = load_local("s3_full_conv2_pre_gelu.npy", (int64_t)N * S);
    assert_non_null(r);
    check("GPU conv2 (before GELU)", c2, r, (size_t)N * S, TOL_NET);
    free(r);
    r = load_local("s3_full_block0.npy", (int64_t)N * S);
    assert_non_null(r);
    check("GPU block 0 output", b0, r, (size_t)N * S, TOL_NET);
    free(r);
  }
  free(tok), free(rt), free(proj), free(enc), free(c2), free(b0), free(mel), free(full);
}

#define REQUIRE_FE(fx)                                                                          \
  do {                                                                                          \
    REQUIRE_DEV(fx);                                                                            \
    TU_REQUIRE(tu_shared_dir(), "shared reference data not found (set COSY_SHARED)");           \
    TU_REQUIRE((fx)->fe, "front-end test model not found (make test builds build/test/small-fe-f32.gguf)"); \
  } while (0)

static void test_s3tok_golden(void **state) {
  fixture *fx = *state;
  REQUIRE_FE(fx);
  run_s3(fx, "full", 348);
  run_s3(fx, "cut301", 301);
}

/* the CAM++ input of a case: T frames, frame t = the golden mean-removed fbank's frame t mod 346,
 * re-centred over the T frames (as the official call on audio of that length); the whole prompt
 * (T = 346) as it is (tools/golden_frontend.py cam_input) */
static float *golden_fbank(int T) {
  float *full = tu_load_f32("golden/frontend/kaldi_fbank_cmn.npy", 346 * 80);
  float *x = full ? malloc((size_t)T * 80 * sizeof(float)) : NULL;
  if (!x) {
    free(full);
    return NULL;
  }
  for (int t = 0; t < T; t++) memcpy(x + (size_t)t * 80, full + (size_t)(t % 346) * 80, 80 * sizeof(float));
  free(full);
  if (T != 346)
    for (int m = 0; m < 80; m++) {
      double s = 0;
      for (int t = 0; t < T; t++) s += x[(size_t)t * 80 + m];
      float mean = (float)(s / T);
      for (int t = 0; t < T; t++) x[(size_t)t * 80 + m] -= mean;
    }
  return x;
}

static void run_cam(fixture *fx, const char *tag, int T) {
  float *fb = golden_fbank(T);
  assert_non_null(fb);
  const int T2 = (T - 1) / 2 + 1, C0 = fx->m->hp.cam_init_channels;
  float emb[192], *head = malloc((size_t)320 * T * sizeof(float));
  float *tdnn = malloc((size_t)C0 * T2 * sizeof(float)), stats[4096];
  assert_int_equal(gpu_fe_campplus(fx->fe, fb, T, emb, head, tdnn, stats), COSY_OK);
  char nm[128], what[96];
  snprintf(nm, sizeof nm, "cam_%s_embedding.npy", tag);
  float *r = load_local(nm, 192);
  assert_non_null(r);
  snprintf(what, sizeof what, "GPU CAM++ embedding, %d frames (onnxruntime 1.18.0)", T);
  check(what, emb, r, 192, TOL_EMB_ORT);
  free(r);
  snprintf(nm, sizeof nm, "cam_%s_stats.npy", tag);
  int nd;
  int64_t sh[8];
  r = tu_npy_f32(tu_fe_file(nm), &nd, sh);
  assert_non_null(r);
  assert_true(sh[0] <= 4096);
  check("GPU CAM++ pooled stats", stats, r, (size_t)sh[0], TOL_NET);
  free(r);
  if (!strcmp(tag, "full")) {
    r = load_local("cam_full_head.npy", (int64_t)320 * T);
    assert_non_null(r);
    check("GPU CAM++ head [320][T]", head, r, (size_t)320 * T, TOL_NET);
    free(r);
    r = tu_npy_f32(tu_fe_file("cam_full_tdnn.npy"), &nd, sh);
    assert_non_null(r);
    assert_int_equal(sh[0], C0);
    assert_int_equal(sh[1], T2);
    check("GPU CAM++ tdnn", tdnn, r, (size_t)C0 * T2, TOL_NET);
    free(r);
  }
  free(head), free(tdnn), free(fb);
}

static void test_campplus_golden(void **state) {
  fixture *fx = *state;
  REQUIRE_FE(fx);
  run_cam(fx, "short", 80);
  run_cam(fx, "cut250", 250);
  run_cam(fx, "full", 346);
  run_cam(fx, "long", 1100);
}

/* both models in one job == each alone; errors for bad lengths */
static void test_run_combined(void **state) {
  fixture *fx = *state;
  REQUIRE_FE(fx);
  float *mel = tu_load_f32("golden/frontend/whisper_logmel.npy", 128 * 348);
  float *fb = golden_fbank(346);
  assert_non_null(mel);
  assert_non_null(fb);
  int32_t *t1, n1, *t2, n2;
  float e1[192], e2[192];
  assert_int_equal(gpu_fe_s3tok(fx->fe, mel, 348, &t1, &n1, NULL, NULL, NULL, NULL), COSY_OK);
  assert_int_equal(gpu_fe_campplus(fx->fe, fb, 346, e1, NULL, NULL, NULL), COSY_OK);
  for (int rep = 0; rep < 2; rep++) {
    assert_int_equal(gpu_fe_run(fx->fe, mel, 348, fb, 346, &t2, &n2, e2), COSY_OK);
    assert_int_equal(n2, n1);
    assert_memory_equal(t1, t2, sizeof(int32_t) * (size_t)n1);
    double r = tu_rel_l2(e2, e1, 192);
    print_message("gpu_fe_run (run %d) vs the halves alone: tokens equal, embedding rel L2 %.3g\n",
                  rep, r);
    assert_true(r <= 1e-6);
    free(t2);
  }
  assert_int_equal(gpu_fe_run(fx->fe, mel, 0, fb, 346, &t2, &n2, e2), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_fe_run(fx->fe, mel, 348, fb, 3, &t2, &n2, e2), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_fe_run(fx->fe, mel, MAX_MEL_SMALL + 1, fb, 346, &t2, &n2, e2),
                   COSY_ERR_INVALID_ARG);
  assert_null(t2);
  free(t1), free(mel), free(fb);
}

/* ---- the GPU engine ---------------------------------------------------------------------------- */

static cosy_engine *engine_on(const char *model, int device) {
  cosy_engine_config cfg;
  cosy_engine_config_init(&cfg, sizeof cfg);
  cfg.model_path = model;
  cfg.device = device;
  if (device >= 0) cfg.gpu_memory_fraction = 0.3f;
  cosy_engine *e = NULL;
  if (cosy_engine_create(&cfg, &e) != COSY_OK) {
    fprintf(stderr, "engine: %s\n", cosy_last_error());
    return NULL;
  }
  return e;
}

static void check_golden_voice(const cosy_voice *v) {
  int nd;
  int64_t sh[8];
  int32_t *rt = tu_npy_i32(tu_fe_file("s3_full_tokens.npy"), &nd, sh);
  float *rp = load_local("s3_full_proj.npy", -1);
  assert_non_null(rt);
  assert_non_null(rp);
  const int N = (int)sh[0];
  assert_int_equal(v->n_tokens, N);
  check_tokens("GPU engine voice tokens vs golden", v->speech_tokens, rt, rp, N, 0.999f);
  float *emb = load_local("cam_full_embedding.npy", 192);
  assert_non_null(emb);
  check("GPU engine voice embedding vs golden", v->spk, emb, 192, TOL_EMB);
  free(rt), free(rp), free(emb);
}

typedef struct job {
  cosy_engine *e;
  const float *pcm;
  int64_t n;
  int32_t sr;
  cosy_voice *voice;
  float *wav;
  int64_t n_wav;
  cosy_status st;
} job;

static void *clone_job(void *arg) {
  job *j = arg;
  for (int i = 0; i < 2 && !j->st; i++) {
    if (j->voice) cosy_voice_release(j->voice);
    j->voice = NULL;
    j->st = cosy_voice_from_audio(j->e, j->pcm, j->n, j->sr, PROMPT_TEXT, &j->voice);
  }
  return NULL;
}

static void *synth_job(void *arg) {
  job *j = arg;
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.seed = 11;
  p.max_tokens = 60;
  p.min_tokens = 60;
  j->st = cosy_synthesize(j->e, j->voice, "Hello there, this is a longer sentence.", &p, &j->wav,
                          &j->n_wav);
  return NULL;
}

static void test_engine_voice(void **state) {
  fixture *fx = *state;
  REQUIRE_FE(fx);
  const char *model = tu_fe_model();
  cosy_engine *eg = engine_on(model, 0), *ec = engine_on(model, COSY_DEVICE_CPU);
  assert_non_null(eg);
  assert_non_null(ec);
  assert_string_equal(eg->be->name, "gpu");
  float *pcm;
  int64_t n;
  int32_t sr;
  assert_int_equal(cosy_wav_read(tu_shared("audio/zero_shot_prompt.wav"), &pcm, &n, &sr), COSY_OK);
  cosy_voice *vg, *vc;
  assert_int_equal(cosy_voice_from_audio(eg, pcm, n, sr, PROMPT_TEXT, &vg), COSY_OK); /* warm */
  cosy_voice_release(vg);
  double t0 = cosy_now();
  assert_int_equal(cosy_voice_from_audio(eg, pcm, n, sr, PROMPT_TEXT, &vg), COSY_OK);
  double t1 = cosy_now();
  assert_int_equal(cosy_voice_from_audio(ec, pcm, n, sr, PROMPT_TEXT, &vc), COSY_OK);
  print_message("TIMING voice from %.2f s of 24 kHz audio: GPU engine %.2f ms, CPU engine %.2f ms "
                "(small front end)\n", (double)n / sr, 1e3 * (t1 - t0), 1e3 * (cosy_now() - t1));
  check_golden_voice(vg);
  assert_int_equal(vg->n_tokens, vc->n_tokens);
  assert_memory_equal(vg->speech_tokens, vc->speech_tokens, sizeof(int32_t) * (size_t)vg->n_tokens);
  assert_memory_equal(vg->mel, vc->mel, sizeof(float) * 80 * 2 * (size_t)vg->n_tokens);
  check("GPU engine embedding vs CPU engine", vg->spk, vc->spk, 192, TOL_NET);
  assert_string_equal(vg->prompt_text, PROMPT_TEXT);
  /* two clones while a synthesis streams on the same engine: the same voices as alone. A first
   * synthesis gives the voice's prompt-only flow blocks to the engine's voice table, so the two
   * compared below both reuse them (a first use computes them in a differently shaped batch,
   * which rounds differently: docs/scheduler.md on batch invariance) */
  job w = {eg, NULL, 0, 0, vg, NULL, 0, COSY_OK};
  synth_job(&w);
  assert_int_equal(w.st, COSY_OK);
  cosy_free(w.wav);
  job s = {eg, NULL, 0, 0, vg, NULL, 0, COSY_OK};
  job c[2] = {{eg, pcm, n, sr, NULL, NULL, 0, COSY_OK}, {eg, pcm, n, sr, NULL, NULL, 0, COSY_OK}};
  pthread_t ts, tc[2];
  assert_int_equal(pthread_create(&ts, NULL, synth_job, &s), 0);
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&tc[i], NULL, clone_job, &c[i]), 0);
  pthread_join(ts, NULL);
  for (int i = 0; i < 2; i++) pthread_join(tc[i], NULL);
  assert_int_equal(s.st, COSY_OK);
  assert_true(s.n_wav > 0);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(c[i].st, COSY_OK);
    assert_int_equal(c[i].voice->n_tokens, vg->n_tokens);
    assert_memory_equal(c[i].voice->speech_tokens, vg->speech_tokens,
                        sizeof(int32_t) * (size_t)vg->n_tokens);
    double r = tu_rel_l2(c[i].voice->spk, vg->spk, 192);
    print_message("clone %d beside a synthesis: tokens equal, embedding rel L2 %.3g vs alone\n", i, r);
    assert_true(r <= 1e-6);
    cosy_voice_release(c[i].voice);
  }
  /* the synthesis beside the clones == alone */
  job s2 = {eg, NULL, 0, 0, vg, NULL, 0, COSY_OK};
  synth_job(&s2);
  assert_int_equal(s2.st, COSY_OK);
  assert_int_equal(s2.n_wav, s.n_wav);
  double rw = tu_rel_l2(s.wav, s2.wav, (size_t)s.n_wav);
  print_message("synthesis beside two clones vs alone: rel L2 %.3g (limit 1e-3)\n", rw);
  assert_true(rw <= 1e-3);
  cosy_free(s.wav), cosy_free(s2.wav);
  /* bad input: the CPU engine's statuses */
  float *z = calloc(16000, sizeof(float));
  cosy_voice *v = NULL;
  assert_int_equal(cosy_voice_from_audio(eg, z, 16000, 16000, "", &v), COSY_ERR_INVALID_ARG);
  assert_non_null(strstr(cosy_last_error(), "silent"));
  assert_int_equal(cosy_voice_from_audio(eg, pcm, 100, sr, "", &v), COSY_ERR_INVALID_ARG);
  assert_int_equal(cosy_voice_from_audio(eg, pcm, n, 8000, "", &v), COSY_ERR_INVALID_ARG);
  assert_null(v);
  free(z);
  cosy_voice_release(vg);
  cosy_voice_release(vc);
  free(pcm);
  cosy_engine_destroy(eg);
  cosy_engine_destroy(ec);
}

/* ---- full size ------------------------------------------------------------------------------------ */

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void test_full_size(void **state) {
  fixture *fx = *state;
  REQUIRE_DEV(fx);
  const char *path = getenv("COSY_FULL_FE_MODEL");
  TU_REQUIRE(path && path[0], "COSY_FULL_FE_MODEL not set (a model with the full-size front end: "
                              "tools/make_model.py --preset full --frontend full)");
  TU_REQUIRE(tu_shared_dir(), "shared reference data not found (set COSY_SHARED)");
  cosy_model *m;
  assert_int_equal(cosy_model_load(path, &m), COSY_OK);
  cosy_gpu *g;
  assert_int_equal(cosy_gpu_create(0, 0.6f, tu_knobs(), &g), COSY_OK);
  gpu_fe *fe;
  const int max_mel = S3TOK_MAX_SECONDS * 100 + 8;
  print_message("GPU front end of the full-size models: %.1f MiB of device memory\n",
                (double)gpu_fe_bytes(m, max_mel) / 1048576.0);
  assert_int_equal(gpu_fe_create(g, m, max_mel, &fe), COSY_OK);
  ref_s3tok *s3;
  ref_campplus *cam;
  assert_int_equal(ref_s3tok_create(m, &s3), COSY_OK);
  assert_int_equal(ref_campplus_create(m, &cam), COSY_OK);
  /* GPU vs the CPU reference on the 16 kHz golden prompt's features */
  float *w16 = tu_load_f32("golden/frontend/wav16k.npy", 55680), *lm, *fb;
  assert_non_null(w16);
  int32_t Tl, Tf;
  assert_int_equal(ref_whisper_logmel(w16, 55680, &lm, &Tl), COSY_OK);
  assert_int_equal(ref_kaldi_fbank(w16, 55680, &fb, &Tf), COSY_OK);
  for (int mm = 0; mm < 80; mm++) {
    double s = 0;
    for (int t = 0; t < Tf; t++) s += fb[t * 80 + mm];
    for (int t = 0; t < Tf; t++) fb[t * 80 + mm] -= (float)(s / Tf);
  }
  const int N = ((Tl - 1) / 2 + 1 - 1) / 2 + 1, S = m->hp.s3_state;
  float *pc = malloc(sizeof(float) * N * 8), *pg = malloc(sizeof(float) * N * 8);
  float *ec = malloc(sizeof(float) * N * S), *eg = malloc(sizeof(float) * N * S);
  int32_t *tc, *tg, nc, ng;
  double t0 = cosy_now();
  assert_int_equal(ref_s3tok_encode(s3, lm, Tl, &tc, &nc, pc, ec, NULL, NULL), COSY_OK);
  print_message("CPU reference speech tokenizer, %d frames: %.2f s\n", Tl, cosy_now() - t0);
  assert_int_equal(gpu_fe_s3tok(fe, lm, Tl, &tg, &ng, pg, eg, NULL, NULL), COSY_OK);
  assert_int_equal(ng, nc);
  check_tokens("full-size GPU tokens vs CPU reference", tg, tc, pc, N, m->hp.s3_fsq_scale);
  check("full-size GPU encoder output vs CPU", eg, ec, (size_t)N * S, TOL_NET);
  check("full-size GPU FSQ projection vs CPU", pg, pc, (size_t)N * 8, TOL_NET);
  float embc[192], embg[192];
  assert_int_equal(ref_campplus_embed(cam, fb, Tf, embc, NULL, NULL, NULL), COSY_OK);
  assert_int_equal(gpu_fe_campplus(fe, fb, Tf, embg, NULL, NULL, NULL), COSY_OK);
  check("full-size GPU CAM++ embedding vs CPU", embg, embc, 192, TOL_EMB);
  free(tc), free(tg), free(pc), free(pg), free(ec), free(eg), free(lm), free(fb);
  /* the time of the models' job for 10 s of audio (the prompt tiled) */
  const int64_t n10 = 160000;
  float *x = malloc(sizeof(float) * n10);
  for (int64_t i = 0; i < n10; i++) x[i] = w16[i % 55680];
  assert_int_equal(ref_whisper_logmel(x, n10, &lm, &Tl), COSY_OK);
  assert_int_equal(ref_kaldi_fbank(x, n10, &fb, &Tf), COSY_OK);
  double ts[12];
  for (int r = 0; r < 12; r++) {
    t0 = cosy_now();
    assert_int_equal(gpu_fe_run(fe, lm, Tl, fb, Tf, &tg, &ng, embg), COSY_OK);
    ts[r] = cosy_now() - t0;
    free(tg);
  }
  qsort(ts + 2, 10, sizeof(double), cmp_d);
  print_message("TIMING gpu_fe_run, 10 s of audio (%d log-mel, %d fbank frames, %d tokens): first "
                "%.2f ms, best %.2f ms, median %.2f ms\n", Tl, Tf, ng, 1e3 * ts[0], 1e3 * ts[2],
                1e3 * ts[7]);
  free(x), free(lm), free(fb), free(w16);
  ref_s3tok_free(s3);
  ref_campplus_free(cam);
  gpu_fe_free(fe);
  cosy_gpu_free(g);
  cosy_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_k_im2col),        cmocka_unit_test(test_k_layernorm_act),
      cmocka_unit_test(test_k_fsmn_fsq),      cmocka_unit_test(test_k_cam),
      cmocka_unit_test(test_s3tok_golden),    cmocka_unit_test(test_campplus_golden),
      cmocka_unit_test(test_run_combined),    cmocka_unit_test(test_engine_voice),
      cmocka_unit_test(test_full_size),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

#endif /* COSY_WITH_CUDA */
