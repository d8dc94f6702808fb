/* test_gpu_hift.c - the GPU HiFT vocoder (lib/gpu/hift.c, kernels/conv.cu, stft.cu, source.cu)
 * against plain CPU loops, the CPU reference (lib/ref/hift.c) and the golden data.
 *
 * Kernels, on fresh random data (fixed seeds, never zeros; outputs poisoned with NaN first; every
 * element inside the output must be written and every element outside left alone):
 *   conv (cosy_k_hift_conv) vs a CPU double loop, in TF32 and 3xTF32 (one warp group, and the
 *     split reduction over two warp groups forced), for every mode the vocoder
 *     uses: dilation, left padding, stride (source downs k30/s15, k6/s3, k1), nearest upsampling,
 *     ReflectionPad1d((1,0)), right look-ahead (zeros or context, columns past the valid length
 *     must not be read), Snake / leaky / mean-of-3 pre-activations, one and two residuals, the
 *     fused Snake output (with and without the plain output), co not a multiple of 64, a grouped
 *     launch of three convs.
 *     Tolerances (relative L2): TF32 2e-3 (operands rounded to 10 mantissa bits: ~3e-4 measured),
 *     3xTF32 3e-5 (fp32 level: 2e-7 .. 1e-5 measured, the largest for k16 x 96 channels).
 *   conv f16 (test_kernel_conv_f16): COSY_HPREC_F16 (fp16 operands) vs the CPU loop beside TF32
 *     on the same data, for every conv kind the vocoder launches, with weights of 1e-6 and
 *     activations of 1e3 .. 1e4 (the per-channel weight scale) and up to 1e5 (saturation at
 *     65504, against a clamping reference): within 2x TF32's error (and TOL_TF32); the tile
 *     variants and fewer taps per slab give the same bits; a NaN input stays NaN; the TF32
 *     fallback on a device too small for it, the refusal without fp32 weights; the host
 *     packing's scale. The saturation flag (cosy_hift_conv.sat): set by exactly the saturating
 *     runs (never by TF32), at the threshold (65488 not, the next float, 65504, -inf yes, NaN
 *     not), and in a launch of three convs only for the one whose input exceeds 65504.
 *   conv2 (test_kernel_conv2): every cosy_hift_conv_kernel choice (the wide-tile conv2_kernel
 *     variants and the per-launch automatic one) in TF32 and TF32 with host-rounded weights, for
 *     k 1/3/5/7/11/16, dilations 1/3/5, upsampling, reflect, look-ahead, Snake/leaky inputs,
 *     residuals, the Snake output, co/ci off the tiles, n_out 1 .. 5000: vs the CPU loop (2e-3),
 *     bit for bit vs the old kernel's unsplit launch, the kernel that ran as expected (the
 *     mean-of-3 input and the strided downs fall back to the old kernel); a full launch of
 *     COSY_HCONV_MAXG mixed convs gives each conv the old kernel's bits alone (batch invariance).
 *   conv64 (F0 predictor, fp64) vs a CPU double loop: 1e-12.
 *   grouped conv64 / classifier (cosy_k_hift_conv64_group, _f0_classify_group) vs one launch per
 *     job: bit-identical (memcmp), over COSY_HCONV64_MAXG + 5 jobs of different lengths (two
 *     launches a layer) and the full-size predictor on 64 jobs (both ways timed, printed);
 *     nothing written outside the jobs' outputs; refused arguments launch nothing.
 *   STFT vs ref_hift_stft: 1e-6 (the same fp64 operations: bit-identical expected, the count of
 *     differing values is printed); STFT -> raw iSTFT round trip: 1e-6; iSTFT head + clamp vs a
 *     CPU double loop written like the reference: 1e-5.
 *   default noise (cosy_k_hift_noise) vs ref_hift_default_noise: bit-identical (memcmp).
 *   source (gpu_hift_source, default and injected noise) vs ref_hift_source on random f0 with
 *     voiced and unvoiced frames: 1e-6 (bit-identical expected; mismatches are counted).
 * Small golden model (tu_small_model(), ../shared/golden/hift):
 *   f0 final/non-final vs golden f0 and f0_f64: 1e-3; vs ref_hift_f0: 1e-6 (fp64 in another
 *     summation order, rounded to fp32: bit-identical in practice; differing values counted).
 *   source with the golden rand_ini/sine_waves injected vs golden s: 1e-2.
 *   decode from golden final/s and nonfinal/s vs golden wav: 2e-2 (TF32 printed; 3xTF32 and F16
 *     asserted, F16's error printed beside TF32's), and vs ref_hift_decode (printed); in TF32 the
 *     waveform under every cosy_hift_conv_kernel choice is bit-identical to the old kernel's;
 *     each precision's waveform digest (FNV-1a of its bits) is printed, to compare two builds.
 *   end-to-end infer (default noise) vs ref_hift_infer: printed only (phase sensitive); lengths,
 *     finiteness and the +-0.99 clamp are asserted.
 *   argument checks and cancellation.
 * COSY_FULL_MODEL=path (the full-size model): decode parity vs ref_hift_decode at T = 20, final
 * and non-final (2e-2), f0/source/infer vs the CPU reference (printed), and timing of
 * gpu_hift_infer at T = 100 non-final (the first W1 chunk) and T = 224 final (4.5 s of audio):
 * median of 15 runs after 3 warm-ups, CUDA events on the stream and host wall time, for both
 * conv precisions.
 * Streaming kernels: cosy_k_hift_sine_at / cosy_k_hift_source_at over 3 calls (phase sums carried
 *   on the device, absolute frame base) vs one call: bit-identical.
 * Streaming (gpu_hift_stream_run), small model, a gpu_hift of 256 frames: six streams with
 *   different chunkings (1-frame chunks then 10s with a final T_new = 0 call, random 1..12, 50 then
 *   70 final, one final chunk of 64, 33 then 17 final, 5/7/9/11/13 then a final T_new = 0 call)
 *   batched per round (the F0 predictors of a batch's jobs share their launches): every
 *   non-final prefix vs gpu_hift_infer(so far, 0) (2e-3 rel L2), each concatenation vs the CPU
 *   whole-mel ref_hift_infer (2e-2, the decode bound) and vs the GPU whole-mel gpu_hift_infer
 *   (2e-3: the same kernels on other lengths; only reduction splits may differ), and batch
 *   invariance (each job run alone, and the batch on a gpu_hift of 120 frames that must split it
 *   in two: bit-identical, differing samples counted). Each comparison prints rel L2, max
 *   abs and where the largest difference is (sample, mel frame, which call returned it), so one
 *   run locates a window or state error (an error confined to the samples just after a call
 *   boundary points at the left context; one growing along the utterance at the phase sums).
 *   Arguments (same stream twice, NULL mel, window over max_frames, finalized stream), cancel
 *   (nothing returned, the stream goes on and still matches), an empty final call.
 * The F16 guard (test_f16_guard; gpu_hift_set_f16_guard): a mel scaled x 2e4 (conv_pre's inputs
 *   beyond fp16's 65504) decodes to the TF32 decode's bits with one fallback, the unscaled golden
 *   mel to the unguarded F16 bits with none; in streaming batches of 4 streams, one scaled, the
 *   scaled stream gets its TF32 decode alone bit for bit, the others their F16 decode alone bit
 *   for bit, with one fallback per call of the scaled stream and none without it.
 *   With COSY_FULL_MODEL: chunks 50/100/60 vs the whole-mel GPU runs (2e-2) and the time of each
 *   stream call against the whole-mel re-run.
 * Without a CUDA device (or built without CUDA) everything skips; on a device a wrong result
 * fails. COSY_TEST_FILTER=<test function name> (a cmocka glob) runs only the matching tests. */
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
#include "ref/hift.h"
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

#include "gpu/gpu.h"
#include "gpu/hift.h"
#include "kernels_hift.h"

#define T_NONFINAL TU_HIFT_T_NONFINAL
#define MAX_FRAMES_SMALL 64
#define TOL_TF32 2e-3
#define TOL_3X 3e-5

typedef struct fixture {
  int have_dev;
  cosy_gpu *g;
  cosy_model *m;
  ref_hift *ref;
  gpu_hift *h;
  float *mel;
  int T;
  float *mel_nf;
  float *rand_ini, *sine_waves;
  int64_t n_rows;
  int nh;
} fixture;

/* ---- helpers --------------------------------------------------------------------------------- */

static uint64_t rng_s = 0x9E3779B97F4A7C15ull;
static void rng_seed(uint64_t s) { rng_s = s * 0x9E3779B97F4A7C15ull + 12345; }
static double urand(void) { /* [0, 1) */
  rng_s ^= rng_s << 13, rng_s ^= rng_s >> 7, rng_s ^= rng_s << 17;
  return (double)(rng_s >> 11) * (1.0 / 9007199254740992.0);
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)urand(); }
static void fill(float *p, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) p[i] = frand(lo, hi);
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

static void *dev_upload(const void *host, size_t bytes) {
  void *d = NULL;
  if (cudaMalloc(&d, bytes ? bytes : 4) != cudaSuccess) return NULL;
  if (bytes && cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
    cudaFree(d);
    return NULL;
  }
  return d;
}
static float *dev_nan(size_t n) { /* poisoned with 0xFF bytes (NaN) */
  void *d = NULL;
  if (cudaMalloc(&d, n * sizeof(float) + 4) != cudaSuccess) return NULL;
  cudaMemset(d, 0xFF, n * sizeof(float) + 4);
  cudaDeviceSynchronize(); /* the library's stream does not wait for the legacy stream */
  return (float *)d;
}

static int check_line(const char *what, double err, double tol) {
  const int ok = err <= tol; /* NaN fails */
  print_message("%-52s rel L2 %.3e  tol %.0e  %s\n", what, err, tol, ok ? "PASS" : "FAIL");
  return ok;
}

static double rel_l2_d(const float *a, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - ref[i];
    num += d * d, den += ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static size_t count_diff(const float *a, const float *b, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++) c += memcmp(a + i, b + i, sizeof(float)) != 0;
  return c;
}

static int all_finite(const float *a, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(a[i])) return 0;
  return 1;
}

/* ---- fixture --------------------------------------------------------------------------------- */

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  *state = fx;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return 0; /* no device: everything skips */
  }
  fx->have_dev = 1;
  if (cosy_gpu_create(0, 0.5f, tu_knobs(), &fx->g) != COSY_OK ||
      cosy_k_hift_conv_prepare(&fx->g->dev) != cudaSuccess) {
    fprintf(stderr, "cosy_gpu_create failed: %s\n", cosy_last_error());
    return -1;
  }
  const char *model = tu_small_model();
  if (!model || !tu_shared_dir()) return 0;
  if (cosy_model_load(model, &fx->m) != COSY_OK || ref_hift_create(fx->m, &fx->ref) != COSY_OK ||
      gpu_hift_create(fx->g, fx->m, MAX_FRAMES_SMALL, &fx->h) != COSY_OK) {
    fprintf(stderr, "small model setup failed: %s\n", cosy_last_error());
    return -1;
  }
  fx->nh = fx->m->hp.nb_harmonics + 1;
  tu_hift_inputs in;
  if (tu_golden_hift_inputs(fx->nh, &in)) return -1;
  fx->mel = in.mel;
  fx->T = in.T;
  fx->mel_nf = in.mel_nf;
  fx->rand_ini = in.rand_ini;
  fx->sine_waves = in.sine_waves;
  fx->n_rows = in.n_rows;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  gpu_hift_free(fx->h);
  ref_hift_free(fx->ref);
  cosy_model_free(fx->m);
  cosy_gpu_free(fx->g);
  free(fx->mel), free(fx->mel_nf), free(fx->rand_ini), free(fx->sine_waves);
  free(fx);
  return 0;
}

#define NEED_DEV(fx) TU_REQUIRE((fx)->have_dev, "no CUDA device")
#define NEED_MODEL(fx) \
  TU_REQUIRE((fx)->h, "no CUDA device, golden data or test model (make build/test/small-f32.gguf)")

/* ---- conv kernel vs CPU ---------------------------------------------------------------------- */

typedef struct conv_case {
  const char *name;
  int ci, co, k, dil, stride, pad, up, act, reflect, len_in, ld_extra, n_out, res, res2;
  int oact; /* 0: out only; 1: out + out_act (Snake); 2: out_act only */
} conv_case;

static float act_host(int act, float v, float m2, float m3, float slope, float a) {
  switch (act) {
    case COSY_HACT_LEAKY:
      return v > 0 ? v : v * slope;
    case COSY_HACT_SNAKE: {
      float sv = sinf(v * a);
      return v + (1.0f / (a + 1e-9f)) * (sv * sv);
    }
    case COSY_HACT_MEAN3_LEAKY: {
      float m = ((v + m2) + m3) / 3.0f;
      return m > 0 ? m : m * slope;
    }
    default:
      return v;
  }
}

/* test_kernel_conv_f16's data scales (1 elsewhere): conv_prepare multiplies the weights by
 * g_conv_wmul, the valid inputs by g_conv_xmul and the bias and residuals by both (so that the
 * products keep their share of the output); with g_conv_clamp the reference clamps each
 * activated input to +-65504 (the F16 kernel's saturation) */
static float g_conv_wmul = 1.0f, g_conv_xmul = 1.0f;
static int g_conv_clamp;

/* the conv of kernels_hift.h in double, from host arrays (w [co][ci][k]) */
static void cpu_conv(const conv_case *cc, const float *in, const float *in2, const float *in3,
                     int ld_in, float slope, const float *alpha, const float *w, const float *b,
                     const float *res, const float *res2, double *out) {
  const long Lu = (long)cc->len_in * cc->up;
  for (int o = 0; o < cc->co; o++)
    for (int t = 0; t < cc->n_out; t++) {
      long p = cc->reflect ? (t == 0 ? 1 : t - 1) : t;
      double acc = b[o];
      for (int i = 0; i < cc->ci; i++)
        for (int j = 0; j < cc->k; j++) {
          long u = p * cc->stride + (long)j * cc->dil - cc->pad;
          if (u < 0 || u >= Lu) continue;
          size_t off = (size_t)i * ld_in + (size_t)(u / cc->up);
          float x = act_host(cc->act, in[off], in2 ? in2[off] : 0, in3 ? in3[off] : 0, slope,
                             alpha ? alpha[i] : 1.0f);
          if (g_conv_clamp) x = x > 65504.0f ? 65504.0f : x < -65504.0f ? -65504.0f : x;
          acc += (double)w[((size_t)o * cc->ci + i) * cc->k + j] * x;
        }
      if (res) acc += res[(size_t)o * cc->n_out + t];
      if (res2) acc += res2[(size_t)o * cc->n_out + t];
      out[(size_t)o * cc->n_out + t] = acc;
    }
}

typedef struct conv_run {
  float *in, *in2, *in3, *alpha, *w, *b, *res, *res2, *wp, *oalpha; /* host */
  float *d_in, *d_in2, *d_in3, *d_alpha, *d_wp, *d_b, *d_res, *d_res2, *d_out, *d_oact, *d_oalpha;
  uint16_t *d_wh; /* COSY_HPREC_F16 weights (cosy_hift_conv_pack_f16) and their scales */
  float *d_whs;
  int *d_sat; /* the conv's F16 saturation flag (desc.sat), cleared by conv_poison */
  int ld_in, ld_out, co_rows, co_pad, ci_pad;
  double *ref;
  cosy_hift_conv desc;
} conv_run;

static void conv_prepare(const conv_case *cc, conv_run *r) {
  memset(r, 0, sizeof *r);
  r->ld_in = cc->len_in + cc->ld_extra;
  const size_t nin = (size_t)cc->ci * r->ld_in;
  r->in = malloc(nin * sizeof(float));
  fill(r->in, nin, -2.0f, 2.0f);
  /* columns past the valid length: huge values, which must never be read */
  for (int i = 0; i < cc->ci; i++)
    for (int t = cc->len_in; t < r->ld_in; t++) r->in[(size_t)i * r->ld_in + t] = 1e30f;
  if (cc->act == COSY_HACT_MEAN3_LEAKY) {
    r->in2 = malloc(nin * sizeof(float)), r->in3 = malloc(nin * sizeof(float));
    fill(r->in2, nin, -2.0f, 2.0f), fill(r->in3, nin, -2.0f, 2.0f);
  }
  if (cc->act == COSY_HACT_SNAKE) {
    r->alpha = malloc(cc->ci * sizeof(float));
    fill(r->alpha, cc->ci, 0.5f, 1.5f);
  }
  const size_t nw = (size_t)cc->co * cc->ci * cc->k;
  r->w = malloc(nw * sizeof(float));
  const float sc = 1.0f / sqrtf((float)(cc->ci * cc->k));
  fill(r->w, nw, -sc, sc);
  r->b = malloc(cc->co * sizeof(float));
  fill(r->b, cc->co, -0.1f, 0.1f);
  const size_t no = (size_t)cc->co * cc->n_out;
  if (cc->res) r->res = malloc(no * sizeof(float)), fill(r->res, no, -1.0f, 1.0f);
  if (cc->res2) r->res2 = malloc(no * sizeof(float)), fill(r->res2, no, -1.0f, 1.0f);
  if (g_conv_wmul != 1.0f || g_conv_xmul != 1.0f) {
    const float ox = g_conv_wmul * g_conv_xmul;
    for (size_t i = 0; i < nw; i++) r->w[i] *= g_conv_wmul;
    for (int c = 0; c < cc->co; c++) r->b[c] *= ox;
    for (size_t i = 0; cc->res && i < no; i++) r->res[i] *= ox;
    for (size_t i = 0; cc->res2 && i < no; i++) r->res2[i] *= ox;
    for (int i = 0; i < cc->ci; i++)
      for (int t = 0; t < cc->len_in; t++) {
        const size_t o = (size_t)i * r->ld_in + t;
        r->in[o] *= g_conv_xmul;
        if (r->in2) r->in2[o] *= g_conv_xmul, r->in3[o] *= g_conv_xmul;
      }
  }
  r->co_pad = cosy_hift_conv_pad(cc->co, COSY_HCONV_BM);
  r->ci_pad = cosy_hift_conv_pad(cc->ci, COSY_HCONV_CK);
  r->wp = malloc((size_t)cc->k * r->co_pad * r->ci_pad * sizeof(float));
  cosy_hift_conv_pack(r->w, cc->co, cc->ci, cc->k, r->wp);
  r->ref = malloc(no * sizeof(double));
  cpu_conv(cc, r->in, r->in2, r->in3, r->ld_in, 0.1f, r->alpha, r->w, r->b, r->res, r->res2,
           r->ref);
  /* device copies; the output has 3 extra rows and 5 extra columns that must stay NaN */
  r->d_in = dev_upload(r->in, nin * sizeof(float));
  if (r->in2) r->d_in2 = dev_upload(r->in2, nin * 4), r->d_in3 = dev_upload(r->in3, nin * 4);
  if (r->alpha) r->d_alpha = dev_upload(r->alpha, cc->ci * sizeof(float));
  r->d_wp = dev_upload(r->wp, (size_t)cc->k * r->co_pad * r->ci_pad * sizeof(float));
  r->d_b = dev_upload(r->b, cc->co * sizeof(float));
  if (r->res) r->d_res = dev_upload(r->res, no * sizeof(float));
  if (r->res2) r->d_res2 = dev_upload(r->res2, no * sizeof(float));
  r->ld_out = cc->n_out + 5, r->co_rows = cc->co + 3;
  r->d_out = dev_nan((size_t)r->co_rows * r->ld_out);
  if (cc->oact) {
    r->oalpha = malloc(cc->co * sizeof(float));
    fill(r->oalpha, cc->co, 0.5f, 1.5f);
    r->d_oalpha = dev_upload(r->oalpha, cc->co * sizeof(float));
    r->d_oact = dev_nan((size_t)r->co_rows * r->ld_out);
  }
  cosy_hift_conv *c = &r->desc;
  memset(c, 0, sizeof *c);
  c->in = r->d_in, c->in2 = r->d_in2, c->in3 = r->d_in3, c->ld_in = r->ld_in;
  c->len_in = cc->len_in, c->ci = cc->ci, c->up = cc->up, c->act = cc->act, c->slope = 0.1f;
  c->alpha = r->d_alpha, c->wp = r->d_wp, c->bias = r->d_b, c->co = cc->co;
  c->co_pad = r->co_pad, c->ci_pad = r->ci_pad, c->k = cc->k, c->dil = cc->dil;
  c->stride = cc->stride, c->pad_left = cc->pad, c->reflect = cc->reflect;
  c->out = cc->oact == 2 ? NULL : r->d_out, c->ld_out = r->ld_out, c->n_out = cc->n_out;
  if (cc->oact) {
    c->out_act = r->d_oact, c->ld_out_act = r->ld_out, c->oact = COSY_HACT_SNAKE;
    c->oalpha = r->d_oalpha; /* oalpha_inv NULL: computed in the kernel */
  }
  c->res = r->d_res, c->ld_res = cc->n_out, c->res2 = r->d_res2, c->ld_res2 = cc->n_out;
  /* the fp16 weights of COSY_HPREC_F16 */
  {
    const size_t nh = (size_t)cc->k * r->co_pad * cosy_hift_conv_pad(cc->ci, COSY_HCONV_CKH);
    uint16_t *wh = malloc(nh * sizeof(uint16_t));
    float *whs = malloc(cc->co * sizeof(float));
    cosy_hift_conv_pack_f16(r->w, cc->co, cc->ci, cc->k, wh, whs);
    r->d_wh = dev_upload(wh, nh * sizeof(uint16_t));
    r->d_whs = dev_upload(whs, cc->co * sizeof(float));
    c->wh = r->d_wh, c->wh_scale = r->d_whs;
    free(wh), free(whs);
    const int zero = 0;
    r->d_sat = dev_upload(&zero, sizeof zero);
    c->sat = r->d_sat;
  }
}

static void conv_release(conv_run *r) {
  free(r->in), free(r->in2), free(r->in3), free(r->alpha), free(r->w), free(r->b), free(r->res);
  free(r->res2), free(r->wp), free(r->ref), free(r->oalpha);
  cudaFree(r->d_oact), cudaFree(r->d_oalpha);
  cudaFree(r->d_in), cudaFree(r->d_in2), cudaFree(r->d_in3), cudaFree(r->d_alpha);
  cudaFree(r->d_wp), cudaFree(r->d_b), cudaFree(r->d_res), cudaFree(r->d_res2), cudaFree(r->d_out);
  cudaFree(r->d_wh), cudaFree(r->d_whs), cudaFree(r->d_sat);
}

/* download out (which = 0) or out_act (which = 1), check the written/untouched regions, return
 * the relative error against the CPU result (Snake of it for out_act) */
static double conv_check_one(const conv_case *cc, conv_run *r, int which, int *layout_ok) {
  const size_t nall = (size_t)r->co_rows * r->ld_out;
  float *o = malloc(nall * sizeof(float));
  cudaMemcpy(o, which ? r->d_oact : r->d_out, nall * sizeof(float), cudaMemcpyDeviceToHost);
  double *ref = r->ref, *sref = NULL;
  if (which) {
    sref = malloc((size_t)cc->co * cc->n_out * sizeof(double));
    for (int c = 0; c < cc->co; c++)
      for (int t = 0; t < cc->n_out; t++) {
        float v = (float)r->ref[(size_t)c * cc->n_out + t], a = r->oalpha[c];
        sref[(size_t)c * cc->n_out + t] = act_host(COSY_HACT_SNAKE, v, 0, 0, 0, a);
      }
    ref = sref;
  }
  float *packed = malloc((size_t)cc->co * cc->n_out * sizeof(float));
  int ok = 1;
  for (int c = 0; c < r->co_rows; c++)
    for (int t = 0; t < r->ld_out; t++) {
      float v = o[(size_t)c * r->ld_out + t];
      if (c < cc->co && t < cc->n_out) {
        if (!isfinite(v)) ok = 0;
        packed[(size_t)c * cc->n_out + t] = v;
      } else if (!isnan(v)) ok = 0; /* outside: must stay poisoned */
    }
  double e = rel_l2_d(packed, ref, (size_t)cc->co * cc->n_out);
  free(o), free(packed), free(sref);
  *layout_ok = ok;
  return e;
}

static double conv_check(const conv_case *cc, conv_run *r, int *layout_ok) {
  double e = 0;
  *layout_ok = 1;
  if (cc->oact != 2) e = conv_check_one(cc, r, 0, layout_ok);
  else { /* out is NULL: the poisoned buffer must be untouched */
    float v;
    cudaMemcpy(&v, r->d_out, sizeof v, cudaMemcpyDeviceToHost);
    *layout_ok = isnan(v);
  }
  if (cc->oact) {
    int lay2 = 0;
    double e2 = conv_check_one(cc, r, 1, &lay2);
    *layout_ok &= lay2;
    e = e2 > e ? e2 : e;
  }
  return e;
}

/* both outputs of a conv run (out, out_act where present), host copies */
static float *conv_download(const conv_run *r) {
  const size_t nall = (size_t)r->co_rows * r->ld_out;
  float *o = calloc(2 * nall, sizeof(float));
  if (r->desc.out) cudaMemcpy(o, r->d_out, nall * sizeof(float), cudaMemcpyDeviceToHost);
  if (r->d_oact) cudaMemcpy(o + nall, r->d_oact, nall * sizeof(float), cudaMemcpyDeviceToHost);
  return o;
}

/* poison both outputs of a conv run (0xFF bytes: NaN), so that conv_check sees what a launch
 * wrote and what it left alone */
static void conv_poison(const conv_run *r) {
  const size_t nall = (size_t)r->co_rows * r->ld_out;
  CU(cudaMemset(r->d_out, 0xFF, nall * sizeof(float)));
  if (r->d_oact) CU(cudaMemset(r->d_oact, 0xFF, nall * sizeof(float)));
  if (r->d_sat) CU(cudaMemset(r->d_sat, 0, sizeof(int)));
}

/* the conv's saturation flag (desc.sat) after its launch */
static int conv_sat(const conv_run *r) {
  int v = -1;
  CU(cudaMemcpy(&v, r->d_sat, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

/* whether the outputs of the n conv runs r[] (conv_download) are the bits of want[0 .. n-1] */
static int conv_same(const conv_run *r, int n, float *const *want) {
  int same = 1;
  for (int i = 0; i < n; i++) {
    float *o = conv_download(&r[i]);
    same &= !memcmp(o, want[i], 2 * (size_t)r[i].co_rows * r[i].ld_out * sizeof(float));
    free(o);
  }
  return same;
}

/* COSY_HPREC_TF32_ROUNDED with the weights rounded on the host (cosy_hift_tf32_round) gives the
 * bits of COSY_HPREC_TF32 with the unrounded weights (the vocoder runs the former) */
static int conv_rounded_same(fixture *fx, const conv_case *cc, conv_run *r) {
  const size_t np = (size_t)cc->k * r->co_pad * r->ci_pad;
  float *wr = malloc(np * sizeof(float));
  assert_non_null(wr);
  memcpy(wr, r->wp, np * sizeof(float));
  cosy_hift_tf32_round(wr, np);
  size_t changed = 0;
  for (size_t i = 0; i < np; i++) changed += memcmp(&wr[i], &r->wp[i], 4) != 0;
  float *d_wr = dev_upload(wr, np * sizeof(float));
  float *base = NULL;
  int same = 0;
  for (int v = 0; v < 2; v++) {
    cosy_hift_conv d = r->desc;
    if (v) d.wp = d_wr;
    conv_poison(r);
    CU(cosy_k_hift_conv(fx->g->stream, &fx->g->dev, &d, 1,
                        v ? COSY_HPREC_TF32_ROUNDED : COSY_HPREC_TF32));
    CU(cudaStreamSynchronize(fx->g->stream));
    if (v)
      same = conv_same(r, 1, &base);
    else
      base = conv_download(r);
  }
  printf("  conv %s: TF32 with weights rounded on the host (%zu of %zu changed by the rounding): %s\n",
         cc->name, changed, np, same ? "bit-identical" : "DIFFERS");
  free(wr), free(base);
  cudaFree(d_wr);
  return same && changed > 0;
}

/* The weight slab split into tap groups (a device with less shared memory per block: the ~99 KB
 * of the ada profile, and 72 KB, which splits the k30 s15 source down into 6 groups of 5 taps)
 * gives the same bits as the engine's own device, in 3xTF32 with one warp group; a device that
 * cannot hold the strip and one tap refuses the launch. */
static int conv_taps_invariant(fixture *fx, const conv_case *cc, conv_run *r) {
  cosy_kdev small[2] = {fx->g->dev, fx->g->dev};
  assert_int_equal(cosy_gpu_apply_profile(&small[0], "ada"), COSY_OK);
  small[1].smem_block = 72 * 1024;
  float *base = NULL;
  int ok = 1;
  for (int v = 0; v < 3; v++) {
    const cosy_kdev *d = v == 0 ? &fx->g->dev : &small[v - 1];
    int kt = 0, split = -1;
    const size_t smem =
        cosy_k_hift_conv_plan(d, &r->desc, 1, 1, COSY_HPREC_3XTF32, &kt, &split);
    assert_true(smem > 0 && smem <= d->smem_block && split == 0);
    conv_poison(r);
    CU(cosy_k_hift_conv_split(fx->g->stream, d, &r->desc, 1, COSY_HPREC_3XTF32, 1));
    CU(cudaStreamSynchronize(fx->g->stream));
    if (v == 0) {
      base = conv_download(r);
      continue;
    }
    const int same = conv_same(r, 1, &base);
    printf("  conv %s on %zu KB per block: %d of %d taps per slab, %zu KB: %s\n", cc->name,
           d->smem_block / 1024, kt, cc->k, smem / 1024, same ? "bit-identical" : "DIFFERS");
    ok &= same;
  }
  free(base);
  /* the strip alone: one tap short of what the conv needs */
  cosy_kdev tiny = fx->g->dev;
  int kt0 = 0;
  tiny.smem_block =
      cosy_k_hift_conv_plan(&fx->g->dev, &r->desc, 1, 1, COSY_HPREC_TF32, &kt0, NULL) -
      (size_t)kt0 * COSY_HCONV_BM * COSY_HCONV_CK * sizeof(float);
  assert_int_equal(cosy_k_hift_conv_plan(&tiny, &r->desc, 1, 1, COSY_HPREC_TF32, NULL, NULL), 0);
  assert_int_equal(cosy_k_hift_conv_split(fx->g->stream, &tiny, &r->desc, 1, 0, 1),
                   cudaErrorInvalidValue);
  return ok;
}

/* The conv kinds the vocoder launches, in the order test_kernel_conv (f16 0: 13 cases) and
 * test_kernel_conv_f16 (f16 1: 15) draw their random data in: the resblocks' k 3/7/11 at
 * dilations 1/3/5 (Snake input, residuals, the fused Snake output), the source downs k30 s15 /
 * k6 s3 / k1 (long strided strips), the upsampling with the leaky and mean-of-3 inputs and the
 * reflect column, conv_pre's right zeros / context, conv_post's co 18 and a long stage-2 conv.
 * The F16 test adds the k3 d3 and the 256-channel k7 d1 resblock convs, takes the full-size
 * channels of the downs, ups0 (with a residual) and conv_pre, and a shorter stage-2 conv (3000
 * steps, 5000 in the TF32 test). Returns the count (<= CONV_KINDS_MAX). */
#define CONV_KINDS_MAX 16
static int conv_kinds(int f16, conv_case *c) {
  /* fields: name, ci, co, k, dil, stride, pad, up, act, reflect, len_in, ld_extra, n_out, res,
   * res2, oact */
  const conv_case stage2 = {"k11 d5 snake long (stage 2)", 64, 64, 11, 5, 1, 50, 1,
                            COSY_HACT_SNAKE, 0, f16 ? 3000 : 5000, 0, f16 ? 3000 : 5000, 1, 0, 0};
  int n = 0;
  c[n++] = (conv_case){"k3 d1 snake +res +snake out", 64, 64, 3, 1, 1, 2, 1, COSY_HACT_SNAKE, 0,
                       300, 0, 300, 1, 0, 1};
  if (f16)
    c[n++] = (conv_case){"k3 d3 snake", 128, 128, 3, 3, 1, 6, 1, COSY_HACT_SNAKE, 0, 700, 0, 700,
                         0, 0, 0};
  c[n++] = (conv_case){"k7 d5 snake +res +res2 co40", 72, 40, 7, 5, 1, 30, 1, COSY_HACT_SNAKE, 0,
                       517, 0, 517, 1, 1, 0};
  if (f16)
    c[n++] = (conv_case){"k7 d1 +res +snake out", 256, 256, 7, 1, 1, 6, 1, COSY_HACT_NONE, 0, 400,
                         0, 400, 1, 0, 1};
  c[n++] = (conv_case){"k11 d3 ci24 co130 snake out only", 24, 130, 11, 3, 1, 30, 1,
                       COSY_HACT_NONE, 0, 200, 0, 200, 0, 0, 2};
  if (f16) c[n++] = stage2;
  c[n++] = (conv_case){"down k30 s15 pad14", 18, f16 ? 256 : 96, 30, 1, 15, 14, 1, COSY_HACT_NONE,
                       0, 361, 0, 24, 0, 0, 0};
  c[n++] = (conv_case){"down k6 s3 pad2", 18, f16 ? 128 : 64, 6, 1, 3, 2, 1, COSY_HACT_NONE, 0,
                       361, 0, 120, 0, 0, 0};
  c[n++] = (conv_case){"down k1", 18, 64, 1, 1, 1, 0, 1, COSY_HACT_NONE, 0, 361, 0, 361, 0, 0, 0};
  c[n++] = f16 ? (conv_case){"up x8 k16 leaky (ups0)", 512, 256, 16, 1, 1, 15, 8,
                             COSY_HACT_LEAKY, 0, 37, 0, 296, 1, 0, 0}
               : (conv_case){"up x8 k16 leaky", 96, 48, 16, 1, 1, 15, 8, COSY_HACT_LEAKY, 0, 37,
                             0, 296, 0, 0, 0};
  c[n++] = (conv_case){"up x5 k11 mean3-leaky", 64, 64, 11, 1, 1, 10, 5, COSY_HACT_MEAN3_LEAKY, 0,
                       41, 3, 205, 0, 0, 0};
  c[n++] = (conv_case){"up x3 k7 reflect mean3-leaky +res", 32, 64, 7, 1, 1, 6, 3,
                       COSY_HACT_MEAN3_LEAKY, 1, 50, 0, 151, 1, 0, 0};
  c[n++] = (conv_case){"k5 right zeros (conv_pre final)", 80, f16 ? 512 : 128, 5, 1, 1, 0, 1,
                       COSY_HACT_NONE, 0, 30, 3, 30, 0, 0, 0};
  c[n++] = (conv_case){"k5 right context (conv_pre non-final)", 80, 128, 5, 1, 1, 0, 1,
                       COSY_HACT_NONE, 0, 34, 0, 30, 0, 0, 0};
  c[n++] = (conv_case){"k7 mean3-leaky 0.1 (conv_post-like) co18", 64, 18, 7, 1, 1, 6, 1,
                       COSY_HACT_MEAN3_LEAKY, 0, 777, 0, 777, 0, 0, 0};
  if (!f16) c[n++] = stage2;
  return n;
}

static void test_kernel_conv(void **state) {
  fixture *fx = *state;
  NEED_DEV(fx);
  conv_case cases[CONV_KINDS_MAX];
  const int nc = conv_kinds(0, cases);
  int all_ok = 1;
  rng_seed(101);
  for (int i = 0; i < nc; i++) {
    conv_run r;
    conv_prepare(&cases[i], &r);
    assert_non_null(r.d_out);
    /* TF32 (automatic split choice), 3xTF32 with one warp group, 3xTF32 with the split
     * reduction forced (two warp groups) */
    for (int v = 0; v < 3; v++) {
      const int prec = v ? COSY_HPREC_3XTF32 : COSY_HPREC_TF32;
      cosy_hift_conv_tuning(v == 0 ? 0 : v);
      conv_poison(&r);
      CU(cudaDeviceSynchronize());
      CU(cosy_k_hift_conv(fx->g->stream, &fx->g->dev, &r.desc, 1, prec));
      CU(cudaStreamSynchronize(fx->g->stream));
      int lay = 0;
      double e = conv_check(&cases[i], &r, &lay);
      char name[128];
      snprintf(name, sizeof name, "conv %s [%s]%s", cases[i].name,
               v == 0 ? "TF32" : v == 1 ? "3xTF32" : "3xTF32 split", lay ? "" : " LAYOUT");
      all_ok &= check_line(name, e, prec ? TOL_3X : TOL_TF32) && lay;
    }
    cosy_hift_conv_tuning(0);
    all_ok &= conv_taps_invariant(fx, &cases[i], &r);
    all_ok &= conv_rounded_same(fx, &cases[i], &r);
    conv_release(&r);
  }
  /* a grouped launch: three resblock convs (k 3, 7, 11, dilation 3) in one call */
  {
    conv_case g3[3] = {
        {"g k3", 64, 64, 3, 3, 1, 6, 1, COSY_HACT_SNAKE, 0, 1000, 0, 1000, 1, 0, 0},
        {"g k7", 64, 64, 7, 3, 1, 18, 1, COSY_HACT_SNAKE, 0, 1000, 0, 1000, 1, 0, 0},
        {"g k11", 64, 64, 11, 3, 1, 30, 1, COSY_HACT_SNAKE, 0, 1000, 0, 1000, 1, 0, 0},
    };
    conv_run r[3];
    cosy_hift_conv d[3];
    for (int i = 0; i < 3; i++) conv_prepare(&g3[i], &r[i]), d[i] = r[i].desc;
    for (int prec = 0; prec < 2; prec++) {
      for (int i = 0; i < 3; i++) conv_poison(&r[i]);
      CU(cudaDeviceSynchronize());
      CU(cosy_k_hift_conv(fx->g->stream, &fx->g->dev, d, 3, prec));
      CU(cudaStreamSynchronize(fx->g->stream));
      for (int i = 0; i < 3; i++) {
        int lay = 0;
        double e = conv_check(&g3[i], &r[i], &lay);
        char name[128];
        snprintf(name, sizeof name, "conv grouped %s [%s]%s", g3[i].name, prec ? "3xTF32" : "TF32",
                 lay ? "" : " LAYOUT");
        all_ok &= check_line(name, e, prec ? TOL_3X : TOL_TF32) && lay;
      }
    }
    for (int i = 0; i < 3; i++) conv_release(&r[i]);
  }
  /* a full launch (COSY_HCONV_MAXG convs of mixed kernel sizes, dilations, lengths and epilogues,
   * as the streaming vocoder groups its jobs' convs) gives each conv the bits it gets alone when
   * the reduction is never split; one conv more is refused */
  {
    enum { NG = COSY_HCONV_MAXG };
    conv_case gc[NG];
    conv_run r[NG];
    cosy_hift_conv d[NG + 1];
    const int ks[3] = {3, 7, 11}, ds[3] = {1, 3, 5};
    for (int i = 0; i < NG; i++) {
      const int k = ks[i % 3], dl = ds[(i / 3) % 3], len = 200 + 97 * i;
      const conv_case c = {"grp", 64, 64, k, dl, 1, (k - 1) * dl, 1,
                           i % 2 ? COSY_HACT_SNAKE : COSY_HACT_NONE, 0, len, 0, len, i % 2, 0,
                           i % 4 == 0};
      gc[i] = c;
      conv_prepare(&gc[i], &r[i]);
      assert_non_null(r[i].d_out);
      d[i] = r[i].desc;
    }
    d[NG] = d[0];
    /* TF32, 3xTF32 and F16 (whose tile the launch's size may change: the same bits) */
    const int gprec[3] = {COSY_HPREC_TF32, COSY_HPREC_3XTF32, COSY_HPREC_F16};
    for (int pi = 0; pi < 3; pi++) {
      const int prec = gprec[pi];
      float *alone[NG];
      for (int i = 0; i < NG; i++) {
        CU(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, &d[i], 1, prec, 1));
        CU(cudaStreamSynchronize(fx->g->stream));
        alone[i] = conv_download(&r[i]);
        conv_poison(&r[i]);
      }
      CU(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, d, NG, prec, 1));
      CU(cudaStreamSynchronize(fx->g->stream));
      const int same = conv_same(r, NG, alone);
      for (int i = 0; i < NG; i++) free(alone[i]);
      printf("  conv: %d convs in one launch vs each alone [%s]: %s\n", NG,
             prec == COSY_HPREC_3XTF32 ? "3xTF32" : prec == COSY_HPREC_F16 ? "F16" : "TF32",
             same ? "bit-identical" : "DIFFERS");
      all_ok &= same;
    }
    assert_int_equal(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, d, NG + 1, 0, 1),
                     cudaErrorInvalidValue);
    cudaGetLastError();
    for (int i = 0; i < NG; i++) conv_release(&r[i]);
  }
  /* invalid arguments are refused */
  {
    cosy_hift_conv bad;
    memset(&bad, 0, sizeof bad);
    assert_int_equal(cosy_k_hift_conv(fx->g->stream, &fx->g->dev, &bad, 1, 0),
                     cudaErrorInvalidValue);
    assert_int_equal(cosy_k_hift_conv(fx->g->stream, &fx->g->dev, NULL, 1, 0),
                     cudaErrorInvalidValue);
    assert_int_equal(cosy_k_hift_conv(fx->g->stream, NULL, &bad, 1, 0), cudaErrorInvalidValue);
    cudaGetLastError();
  }
  assert_true(all_ok);
}

/* COSY_HPREC_F16 (conv2_kernel<OpF16>) against the CPU loop, beside TF32 on the same data: fp16
 * operands have TF32's 11 significant bits, so the F16 error must be TF32's size: at most
 * F16_VS_TF32 times TF32's error on the same conv (+ 1e-6 for convs whose error is at fp32 level)
 * and within TOL_TF32. Every conv kind the vocoder launches (conv_kinds: k 3/7/11 at dilations
 * 1/3/5, the upsampling ups k16/k11/k7 with leaky and mean-of-3 inputs and the reflect column, the
 * source downs k30 s15 / k6 s3 / k1 (strips longer than the prefetch registers), conv_pre's right
 * zeros / context, conv_post's co 18, a long stage-2 conv), with data scaled so that fp16 without
 * the weight scale would fail: weights of 1e-6 (fp16 subnormals or zero unscaled) and activations
 * of 1e3 .. 1e4; then activations up to 1e5 (beyond fp16's 65504) against a reference that clamps
 * them there (saturation: finite outputs, never inf). Also: the tile variants (W128 / W64 /
 * automatic) give the same bits; fewer taps per slab (the "ada" profile's 99 KB and 72 KB per
 * block) give the same bits; a NaN input gives NaN exactly in the outputs that read it; a device
 * too small for the F16 strip runs TF32 from wp (cosy_hift_conv_f16_runs 0) or, without wp, refuses
 * the launch (-1, cudaErrorInvalidValue). */
#define F16_VS_TF32 2.0

static double conv_run_prec(fixture *fx, const cosy_kdev *dev, const conv_case *cc, conv_run *r,
                            int prec, int *lay) {
  conv_poison(r);
  CU(cudaDeviceSynchronize());
  CU(cosy_k_hift_conv_split(fx->g->stream, dev, &r->desc, 1, prec, 1));
  CU(cudaStreamSynchronize(fx->g->stream));
  return conv_check(cc, r, lay);
}

static void test_kernel_conv_f16(void **state) {
  fixture *fx = *state;
  NEED_DEV(fx);
  conv_case cases[CONV_KINDS_MAX];
  const int nc = conv_kinds(1, cases);
  assert_int_equal(cases[6].stride, 15); /* the indices the checks below take */
  assert_int_equal(cases[12].n_out, 30);
  /* data scales: weights x activations; the last one saturates (|x| up to 1e5, clamped) */
  const struct { float wmul, xmul; const char *name; } sc[] = {
      {1.0f, 1.0f, "unit"}, {1e-6f, 1.0f, "w 1e-6"}, {1.0f, 1e3f, "x 1e3"},
      {1e-6f, 1e4f, "w 1e-6 x 1e4"}, {1.0f, 5e4f, "x 1e5 saturated"}};
  const int nsc = (int)(sizeof sc / sizeof sc[0]);
  cosy_kdev small[2] = {fx->g->dev, fx->g->dev};
  assert_int_equal(cosy_gpu_apply_profile(&small[0], "ada"), COSY_OK);
  small[1].smem_block = 72 * 1024;
  int all_ok = 1;
  rng_seed(161);
  for (int s = 0; s < nsc; s++)
    for (int i = 0; i < nc; i++) {
      const int sat = sc[s].xmul > 1e4f;
      if (s > 0 && s < nsc - 1 && i % 3 != s % 3) continue; /* the scaled data on a third each */
      if (sat && cases[i].act != COSY_HACT_NONE && cases[i].act != COSY_HACT_LEAKY) continue;
      g_conv_wmul = sc[s].wmul, g_conv_xmul = sc[s].xmul, g_conv_clamp = sat;
      conv_run r;
      conv_prepare(&cases[i], &r);
      g_conv_wmul = g_conv_xmul = 1.0f, g_conv_clamp = 0;
      assert_non_null(r.d_out);
      assert_int_equal(cosy_hift_conv_f16_runs(&fx->g->dev, &r.desc, 1), 1);
      int lay = 0, lay16 = 0;
      const double etf = sat ? 0 : conv_run_prec(fx, &fx->g->dev, &cases[i], &r, COSY_HPREC_TF32,
                                                 &lay);
      const int flag_tf = sat ? 0 : conv_sat(&r); /* TF32 never sets it */
      const double e16 = conv_run_prec(fx, &fx->g->dev, &cases[i], &r, COSY_HPREC_F16, &lay16);
      const int flag16 = conv_sat(&r);
      if (flag16 != sat || flag_tf != 0)
        print_message("  conv f16 %s [%s]: saturation flag F16 %d (want %d), TF32 %d (want 0) "
                      "WRONG\n",
                      cases[i].name, sc[s].name, flag16, sat, flag_tf);
      all_ok &= flag16 == sat && flag_tf == 0;
      char name[160];
      snprintf(name, sizeof name, "conv f16 %s [%s]%s", cases[i].name, sc[s].name,
               lay16 ? "" : " LAYOUT");
      if (sat) {
        all_ok &= check_line(name, e16, TOL_TF32) && lay16;
      } else {
        const double lim = F16_VS_TF32 * etf + 1e-6 < TOL_TF32 ? F16_VS_TF32 * etf + 1e-6
                                                                : TOL_TF32;
        print_message("  TF32 on the same data: rel L2 %.3e (F16 / TF32 %.2f, limit %.3e)\n", etf,
                      etf > 0 ? e16 / etf : 0.0, lim);
        all_ok &= check_line(name, e16, lim) && lay16 && lay;
      }
      if (s == 0) {
        /* the tile variants and fewer taps per slab: the same bits */
        float *base = conv_download(&r);
        const int kv[3] = {COSY_HCONV_K_W128, COSY_HCONV_K_W64, COSY_HCONV_K_OLD};
        for (int v = 0; v < 3 + 2; v++) {
          const cosy_kdev *d = v < 3 ? &fx->g->dev : &small[v - 3];
          const int saved = cosy_hift_conv_kernel(v < 3 ? kv[v] : COSY_HCONV_K_AUTO);
          int kt = 0, split = -1;
          const size_t smem = cosy_k_hift_conv_plan(d, &r.desc, 1, 1, COSY_HPREC_F16, &kt, &split);
          const int runs = cosy_hift_conv_f16_runs(d, &r.desc, 1);
          conv_run_prec(fx, d, &cases[i], &r, COSY_HPREC_F16, &lay16);
          cosy_hift_conv_kernel(saved);
          const int same = conv_same(&r, 1, &base);
          print_message("  conv f16 %s: kernel %d on %zu KB per block (%s, %d of %d taps per "
                        "slab, %zu KB): %s\n", cases[i].name, v < 3 ? kv[v] : COSY_HCONV_K_AUTO,
                        d->smem_block / 1024, runs == 1 ? "F16" : "NOT F16", kt, cases[i].k,
                        smem / 1024, same ? "bit-identical" : "DIFFERS");
          all_ok &= same && runs == 1 && smem > 0 && smem <= d->smem_block && split == 0;
        }
        free(base);
      }
      conv_release(&r);
    }
  /* a device too small for the F16 strip: TF32 from wp, or refused without wp */
  {
    const conv_case cc = cases[6]; /* the k30 s15 down: the longest strip */
    conv_run r;
    conv_prepare(&cc, &r);
    int kt = 0;
    const size_t smem =
        cosy_k_hift_conv_plan(&fx->g->dev, &r.desc, 1, 1, COSY_HPREC_F16, &kt, NULL);
    cosy_kdev tiny = fx->g->dev;
    tiny.smem_block = smem - (size_t)kt * COSY_HCONV_BM * COSY_HCONV_CKH * 2 + 1024;
    assert_int_equal(cosy_hift_conv_f16_runs(&tiny, &r.desc, 1), 0);
    int lay = 0;
    const double e = conv_run_prec(fx, &tiny, &cc, &r, COSY_HPREC_F16, &lay);
    all_ok &= check_line("conv f16 on a device too small for it: the TF32 fallback", e, TOL_TF32) &&
              lay;
    r.desc.wp = NULL;
    assert_int_equal(cosy_hift_conv_f16_runs(&tiny, &r.desc, 1), -1);
    assert_int_equal(cosy_k_hift_conv_split(fx->g->stream, &tiny, &r.desc, 1, COSY_HPREC_F16, 1),
                     cudaErrorInvalidValue);
    assert_int_equal(cosy_hift_conv_f16_runs(&fx->g->dev, &r.desc, 1), 1); /* wp not needed */
    r.desc.wh = NULL;
    assert_int_equal(cosy_hift_conv_f16_runs(&fx->g->dev, &r.desc, 1), -1);
    assert_int_equal(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, &r.desc, 1,
                                            COSY_HPREC_F16, 1),
                     cudaErrorInvalidValue);
    conv_release(&r);
  }
  /* a NaN input stays NaN (the saturation is for magnitudes only): exactly the outputs whose
   * window holds it are NaN, the others finite */
  {
    const conv_case cc = cases[12]; /* k5, pad 0, n_out 30 */
    conv_run r;
    conv_prepare(&cc, &r);
    const float nan = NAN;
    const int tn = 10;
    CU(cudaMemcpy(r.d_in + (size_t)3 * r.ld_in + tn, &nan, sizeof nan, cudaMemcpyHostToDevice));
    conv_poison(&r);
    CU(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, &r.desc, 1, COSY_HPREC_F16, 1));
    CU(cudaStreamSynchronize(fx->g->stream));
    float *o = malloc((size_t)r.co_rows * r.ld_out * sizeof(float));
    CU(cudaMemcpy(o, r.d_out, (size_t)r.co_rows * r.ld_out * sizeof(float),
                  cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int c = 0; c < cc.co; c++)
      for (int t = 0; t < cc.n_out; t++) {
        const int hit = t <= tn && t + cc.k - 1 >= tn;
        bad += hit != (isnan(o[(size_t)c * r.ld_out + t]) != 0);
      }
    print_message("  conv f16 NaN input: %d outputs wrong (NaN expected exactly where the window "
                  "holds it)\n", bad);
    all_ok &= bad == 0;
    free(o);
    conv_release(&r);
  }
  /* the saturation flag (cosy_hift_conv.sat) at the threshold: set when an operand's fp16 value
   * is +-65504, fp16's largest (kernels_hift.h): one input of a conv_pre-like conv set to 65000
   * and 65488 (rounds to 65472, ties to even: not flagged), the next float above 65488 (rounds to
   * 65504), 65504, the next float above it (saturated), -1e5, -inf (flagged), NaN (not: it stays
   * NaN); then a launch of three convs, each with its own flag, where only the middle one has an
   * input beyond 65504: only its flag is set, and each conv's outputs are the bits of its launch
   * alone */
  {
    const conv_case cc = cases[12]; /* k5, pad 0, n_out 30, no pre-activation */
    const struct { float v; int want; const char *name; } th[] = {
        {65000.0f, 0, "65000"}, {65488.0f, 0, "65488"},
        {nextafterf(65488.0f, INFINITY), 1, "65488 + 1 ulp"}, {65504.0f, 1, "65504"},
        {nextafterf(65504.0f, INFINITY), 1, "65504 + 1 ulp"}, {-1e5f, 1, "-1e5"},
        {-INFINITY, 1, "-inf"}, {NAN, 0, "NaN"}};
    for (int q = 0; q < (int)(sizeof th / sizeof th[0]); q++) {
      conv_run r;
      conv_prepare(&cc, &r);
      CU(cudaMemcpy(r.d_in + (size_t)7 * r.ld_in + 11, &th[q].v, sizeof(float),
                    cudaMemcpyHostToDevice));
      conv_poison(&r);
      CU(cudaDeviceSynchronize());
      CU(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, &r.desc, 1, COSY_HPREC_F16, 1));
      CU(cudaStreamSynchronize(fx->g->stream));
      const int f = conv_sat(&r);
      print_message("  conv f16 saturation flag, one input %s: %d (want %d)%s\n", th[q].name, f,
                    th[q].want, f == th[q].want ? "" : " WRONG");
      all_ok &= f == th[q].want;
      conv_release(&r);
    }
    conv_run g[3];
    float *alone[3];
    cosy_hift_conv d[3];
    for (int q = 0; q < 3; q++) {
      conv_prepare(&cc, &g[q]);
      if (q == 1) {
        const float big = 1e5f;
        CU(cudaMemcpy(g[q].d_in + (size_t)2 * g[q].ld_in + 20, &big, sizeof big,
                      cudaMemcpyHostToDevice));
      }
      conv_poison(&g[q]);
      CU(cudaDeviceSynchronize());
      CU(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, &g[q].desc, 1, COSY_HPREC_F16, 1));
      CU(cudaStreamSynchronize(fx->g->stream));
      alone[q] = conv_download(&g[q]);
      d[q] = g[q].desc;
    }
    for (int q = 0; q < 3; q++) conv_poison(&g[q]);
    CU(cudaDeviceSynchronize());
    CU(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, d, 3, COSY_HPREC_F16, 1));
    CU(cudaStreamSynchronize(fx->g->stream));
    const int f0 = conv_sat(&g[0]), f1 = conv_sat(&g[1]), f2 = conv_sat(&g[2]);
    const int same = conv_same(g, 3, alone);
    const int flags_ok = f0 == 0 && f1 == 1 && f2 == 0;
    print_message("  conv f16 launch of 3 convs, the second saturating: flags %d %d %d (want 0 1 "
                  "0)%s, outputs %s\n", f0, f1, f2, flags_ok ? "" : " WRONG",
                  same ? "bit-identical to alone" : "DIFFER FROM ALONE");
    all_ok &= flags_ok && same;
    for (int q = 0; q < 3; q++) conv_release(&g[q]), free(alone[q]);
  }
  /* the host packing: a channel's largest |w| lands in [0.5, 1), its scale is the exact power of
   * two, small weights stay normal, zero and padding stay zero */
  {
    const float w[2 * 3 * 1] = {3e-6f, -1e-6f, 2.5e-7f, 0.0f, 0.0f, 0.0f};
    uint16_t wh[COSY_HCONV_BM * COSY_HCONV_CKH];
    float whs[2];
    cosy_hift_conv_pack_f16(w, 2, 3, 1, wh, whs);
    /* 3e-6 = 0.786 x 2^-18: scale 2^-18, stored 0.786 (fp16 exponent field 14) */
    assert_true(whs[0] == ldexpf(1.0f, -18) && whs[1] == 1.0f);
    assert_true((wh[0] & 0x7c00) >= 0x3800 && (wh[0] & 0x7c00) < 0x3c00); /* [0.5, 1) */
    assert_true((wh[2] & 0x7c00) != 0 && (wh[2] & 0x8000) == 0); /* 2.5e-7 2^18: normal */
    assert_true((wh[1] & 0x8000) != 0);                          /* the sign */
    assert_true(wh[3] == 0 && wh[COSY_HCONV_CKH] == 0 && wh[COSY_HCONV_CKH + 1] == 0);
  }
  assert_true(all_ok);
}

/* The staged F16 kernel (conv_stage_f16_kernel + conv3_kernel, kernels/conv.cu), which runs
 * where every conv of a launch has its xh workspace: for every conv kind the vocoder launches
 * (conv_kinds(1)), on unit data and, for the inputs without Snake, on data beyond fp16's range,
 * its outputs are the bits of the register-staged conv2_kernel<OpF16> (COSY_HCONV_STAGED_OFF
 * on the same descriptor) and its saturation flag is the same, with the workspace poisoned with
 * NaN halves first (so a slot read before it is written would show); under both tiles (W128,
 * W64) and the "ada" profile's smaller shared memory (2 stages instead of 3, or conv2 where the
 * ring does not fit) the same bits (COSY_HCONV_STAGED_ALWAYS: every stride-1 kind runs staged on
 * this device); the default rule (COSY_HCONV_STAGED_AUTO) runs it for the Snake and mean-of-3
 * inputs and never for those without an activation, with the same bits. Then 16 convs
 * of mixed kernel sizes in one staged launch, each with its own workspace, give each conv the bits
 * of conv2 alone. */
static uint16_t *xh_alloc(conv_run *r) {
  uint16_t *x = NULL;
  const size_t n = cosy_hift_conv_xh_halves(&r->desc);
  CU(cudaMalloc((void **)&x, (n ? n : 8) * sizeof(uint16_t)));
  CU(cudaMemset(x, 0xFF, (n ? n : 8) * sizeof(uint16_t)));
  r->desc.xh = x;
  return x;
}

static void test_kernel_conv_staged(void **state) {
  fixture *fx = *state;
  NEED_DEV(fx);
  conv_case cases[CONV_KINDS_MAX];
  const int nc = conv_kinds(1, cases);
  cosy_kdev ada = fx->g->dev;
  assert_int_equal(cosy_gpu_apply_profile(&ada, "ada"), COSY_OK);
  int all_ok = 1;
  rng_seed(171);
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < nc; i++) {
      if (s == 1 && cases[i].act != COSY_HACT_NONE && cases[i].act != COSY_HACT_LEAKY) continue;
      g_conv_xmul = s ? 5e4f : 1.0f, g_conv_clamp = s;
      conv_run r;
      conv_prepare(&cases[i], &r);
      g_conv_xmul = 1.0f, g_conv_clamp = 0;
      uint16_t *xh = xh_alloc(&r);
      const int prev = cosy_hift_conv_staged(COSY_HCONV_STAGED_OFF);
      assert_int_equal(cosy_hift_conv_staged_runs(&fx->g->dev, &r.desc, 1), 0);
      int lay = 0;
      conv_run_prec(fx, &fx->g->dev, &cases[i], &r, COSY_HPREC_F16, &lay);
      float *base = conv_download(&r);
      const int flag2 = conv_sat(&r);
      const int kv[3] = {COSY_HCONV_K_AUTO, COSY_HCONV_K_W128, COSY_HCONV_K_W64};
      for (int v = 0; v < 5; v++) {
        /* v 0-3: wherever the staged kernel can run; 4: the default rule (conv3_prefer) */
        cosy_hift_conv_staged(v < 4 ? COSY_HCONV_STAGED_ALWAYS : COSY_HCONV_STAGED_AUTO);
        const cosy_kdev *d = v == 3 ? &ada : &fx->g->dev;
        const int saved = cosy_hift_conv_kernel(v < 3 ? kv[v] : COSY_HCONV_K_AUTO);
        const int act = cases[i].act;
        const int runs = cosy_hift_conv_staged_runs(d, &r.desc, 1);
        const size_t smem = cosy_k_hift_conv_plan(d, &r.desc, 1, 1, COSY_HPREC_F16, NULL, NULL);
        CU(cudaMemset(xh, 0xFF, cosy_hift_conv_xh_halves(&r.desc) * sizeof(uint16_t)));
        conv_run_prec(fx, d, &cases[i], &r, COSY_HPREC_F16, &lay);
        cosy_hift_conv_kernel(saved);
        const int same = conv_same(&r, 1, &base), flag3 = conv_sat(&r);
        /* where it must run: always-mode on this device, stride 1; the default rule: the Snake
         * and mean-of-3 inputs, never without an activation (leaky: by the tile) */
        const int snake_m3 = act == COSY_HACT_SNAKE || act == COSY_HACT_MEAN3_LEAKY;
        const int route_ok = v < 3    ? runs || cases[i].stride != 1
                             : v == 4 ? act == COSY_HACT_LEAKY ||
                                            runs == (snake_m3 && cases[i].stride == 1)
                                      : 1;
        const int ok = same && flag3 == flag2 && route_ok && smem > 0 && smem <= d->smem_block;
        print_message("  conv staged %s [%s] kernel %d%s: %s (%zu KB), %s, flag %d (conv2 %d)%s\n",
                      cases[i].name, s ? "x 1e5 saturated" : "unit", v < 3 ? kv[v] : 3,
                      v < 3 ? "" : v == 3 ? " ada" : " default rule", runs ? "staged" : "conv2",
                      smem / 1024, same ? "bit-identical to conv2" : "DIFFERS FROM CONV2", flag3,
                      flag2, ok ? "" : " WRONG");
        all_ok &= ok;
      }
      cosy_hift_conv_staged(prev);
      free(base);
      CU(cudaFree(xh));
      r.desc.xh = NULL;
      conv_release(&r);
    }
  /* 16 convs in one staged launch: each conv2's bits alone */
  {
    enum { NG = COSY_HCONV_MAXG };
    conv_case gc[NG];
    conv_run r[NG];
    cosy_hift_conv d[NG];
    float *alone[NG];
    uint16_t *xh[NG];
    const int ks[3] = {3, 7, 11}, ds[3] = {1, 3, 5};
    const int prev = cosy_hift_conv_staged(COSY_HCONV_STAGED_OFF);
    for (int i = 0; i < NG; i++) {
      const int k = ks[i % 3], dl = ds[(i / 3) % 3], len = 200 + 97 * i;
      const conv_case c = {"grp", 64, 64, k, dl, 1, (k - 1) * dl, 1,
                           i % 2 ? COSY_HACT_SNAKE : COSY_HACT_NONE, 0, len, 0, len, i % 2, 0,
                           i % 4 == 0};
      gc[i] = c;
      conv_prepare(&gc[i], &r[i]);
      xh[i] = xh_alloc(&r[i]);
      d[i] = r[i].desc;
      CU(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, &d[i], 1, COSY_HPREC_F16, 1));
      CU(cudaStreamSynchronize(fx->g->stream));
      alone[i] = conv_download(&r[i]);
      conv_poison(&r[i]);
    }
    cosy_hift_conv_staged(COSY_HCONV_STAGED_ALWAYS);
    const int runs = cosy_hift_conv_staged_runs(&fx->g->dev, d, NG);
    CU(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, d, NG, COSY_HPREC_F16, 1));
    CU(cudaStreamSynchronize(fx->g->stream));
    const int same = conv_same(r, NG, alone);
    print_message("  conv staged: %d convs in one launch (%s) vs conv2 alone: %s\n", NG,
                  runs ? "staged" : "NOT STAGED", same ? "bit-identical" : "DIFFERS");
    all_ok &= same && runs;
    cosy_hift_conv_staged(prev);
    for (int i = 0; i < NG; i++) {
      free(alone[i]);
      CU(cudaFree(xh[i]));
      r[i].desc.xh = NULL;
      conv_release(&r[i]);
    }
  }
  assert_true(all_ok);
}

/* conv2_kernel (the wide-tile variants of cosy_hift_conv_kernel) against the CPU loop and bit
 * for bit against conv_tc_kernel's unsplit launch, for every shape class the vocoder launches:
 * k 1/3/5/7/11/16, dilations 1/3/5, nearest upsampling with the leaky input, ReflectionPad1d,
 * right look-ahead zeros/context, Snake input, residuals, the fused Snake output, co and ci not
 * multiples of the tiles, n_out from 1 to 5000 (odd, shorter than one tile, one past a tile).
 * Launches it does not handle (mean-of-3 input, the strided downs' long strips) must fall back to
 * the old kernel (cosy_hift_conv_kernel_for says which ran). Then batch invariance: a full launch
 * of COSY_HCONV_MAXG mixed convs under each variant gives each conv the old kernel's bits alone. */
static void test_kernel_conv2(void **state) {
  fixture *fx = *state;
  NEED_DEV(fx);
  /* fields as test_kernel_conv's; `fallback` (after the case): the old kernel must run */
  typedef struct {
    conv_case cc;
    int fallback;
  } c2_case;
  const c2_case cases[] = {
      {{"k1 ci18 (source down 2)", 18, 64, 1, 1, 1, 0, 1, COSY_HACT_NONE, 0, 361, 0, 361, 0, 0, 0},
       0},
      {{"k3 d1 snake +res +snake out", 64, 64, 3, 1, 1, 2, 1, COSY_HACT_SNAKE, 0, 300, 0, 300, 1, 0,
        1},
       0},
      {{"k3 d3 ci20 co130 out only", 20, 130, 3, 3, 1, 6, 1, COSY_HACT_NONE, 0, 257, 0, 257, 0, 0,
        2},
       0},
      {{"k3 d5 T1", 64, 64, 3, 5, 1, 10, 1, COSY_HACT_SNAKE, 0, 1, 0, 1, 1, 0, 0}, 0},
      {{"k7 d1 co40 T7", 72, 40, 7, 1, 1, 6, 1, COSY_HACT_SNAKE, 0, 7, 0, 7, 1, 0, 1}, 0},
      {{"k7 d3 +res +res2", 72, 40, 7, 3, 1, 18, 1, COSY_HACT_SNAKE, 0, 517, 0, 517, 1, 1, 0}, 0},
      {{"k7 d5 ci136 co192 T129", 136, 192, 7, 5, 1, 30, 1, COSY_HACT_NONE, 0, 129, 0, 129, 1, 0,
        1},
       0},
      {{"k11 d1 co64 T128", 64, 64, 11, 1, 1, 10, 1, COSY_HACT_NONE, 0, 128, 0, 128, 1, 0, 1}, 0},
      {{"k11 d3 ci24 co130", 24, 130, 11, 3, 1, 30, 1, COSY_HACT_SNAKE, 0, 200, 0, 200, 0, 0, 2},
       0},
      {{"k11 d5 snake long (stage 2)", 64, 64, 11, 5, 1, 50, 1, COSY_HACT_SNAKE, 0, 5000, 0, 5000,
        1, 0, 0},
       0},
      {{"up x8 k16 leaky +res (ups 0)", 96, 48, 16, 1, 1, 15, 8, COSY_HACT_LEAKY, 0, 37, 0, 296, 1,
        0, 0},
       0},
      {{"up x3 k7 reflect leaky +res", 32, 64, 7, 1, 1, 6, 3, COSY_HACT_LEAKY, 1, 50, 0, 151, 1, 0,
        0},
       0},
      {{"k5 right zeros (conv_pre final)", 80, 128, 5, 1, 1, 0, 1, COSY_HACT_NONE, 0, 30, 3, 30, 0,
        0, 0},
       0},
      {{"k5 right context (conv_pre non-final)", 80, 128, 5, 1, 1, 0, 1, COSY_HACT_NONE, 0, 34, 0,
        30, 0, 0, 0},
       0},
      {{"up x5 k11 mean3-leaky (falls back)", 64, 64, 11, 1, 1, 10, 5, COSY_HACT_MEAN3_LEAKY, 0, 41,
        3, 205, 0, 0, 0},
       1},
      {{"down k6 s3 (falls back)", 18, 64, 6, 1, 3, 2, 1, COSY_HACT_NONE, 0, 361, 0, 120, 0, 0, 0},
       1},
  };
  enum { NV = 3 };
  const int variants[NV] = {COSY_HCONV_K_W128, COSY_HCONV_K_W64, COSY_HCONV_K_AUTO};
  const char *vname[] = {"old", "w128", "w64", "auto"}; /* by COSY_HCONV_K_* */
  const int nc = (int)(sizeof cases / sizeof cases[0]);
  const int saved = cosy_hift_conv_kernel(COSY_HCONV_K_OLD);
  int all_ok = 1;
  rng_seed(202);
  for (int i = 0; i < nc; i++) {
    const conv_case *cc = &cases[i].cc;
    conv_run r;
    conv_prepare(cc, &r);
    assert_non_null(r.d_out);
    /* the weights rounded on the host, as the vocoder gives them (COSY_HPREC_TF32_ROUNDED) */
    const size_t np = (size_t)cc->k * r.co_pad * r.ci_pad;
    float *wr = malloc(np * sizeof(float));
    assert_non_null(wr);
    memcpy(wr, r.wp, np * sizeof(float));
    cosy_hift_tf32_round(wr, np);
    float *d_wr = dev_upload(wr, np * sizeof(float));
    for (int pr = 0; pr < 2; pr++) {
      const int prec = pr ? COSY_HPREC_TF32_ROUNDED : COSY_HPREC_TF32;
      cosy_hift_conv d = r.desc;
      if (pr) d.wp = d_wr;
      float *base = NULL;
      for (int v = -1; v < NV; v++) {
        const int which = v < 0 ? COSY_HCONV_K_OLD : variants[v];
        cosy_hift_conv_kernel(which);
        const int ran = cosy_hift_conv_kernel_for(&fx->g->dev, &d, 1, prec, 1);
        const int want_ok = cases[i].fallback ? ran == COSY_HCONV_K_OLD
                            : which == COSY_HCONV_K_AUTO
                                ? ran == COSY_HCONV_K_W128 || ran == COSY_HCONV_K_W64
                                : ran == which;
        conv_poison(&r);
        CU(cudaDeviceSynchronize());
        CU(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, &d, 1, prec, 1));
        CU(cudaStreamSynchronize(fx->g->stream));
        int lay = 0;
        const double e = conv_check(cc, &r, &lay);
        const int same = base ? conv_same(&r, 1, &base) : 1;
        char name[160];
        snprintf(name, sizeof name, "conv2 %s [%s %s]%s%s%s", cc->name, vname[which],
                 pr ? "TF32 rounded" : "TF32", lay ? "" : " LAYOUT",
                 same ? "" : " NOT BIT-IDENTICAL TO OLD", want_ok ? "" : " WRONG KERNEL");
        all_ok &= check_line(name, e, TOL_TF32) && lay && same && want_ok;
        if (!base) base = conv_download(&r); /* the old kernel's bits */
      }
      free(base);
    }
    cosy_hift_conv_kernel(COSY_HCONV_K_OLD);
    free(wr);
    cudaFree(d_wr);
    conv_release(&r);
  }
  /* batch invariance: COSY_HCONV_MAXG convs of mixed k, dilation, length, channels and
   * epilogues in one launch under each variant; each conv's bits = the old kernel's alone */
  {
    enum { NG = COSY_HCONV_MAXG };
    conv_case gc[NG];
    conv_run r[NG];
    cosy_hift_conv d[NG];
    const int ks[3] = {3, 7, 11}, ds[3] = {1, 3, 5}, chs[4] = {64, 128, 40, 256};
    for (int i = 0; i < NG; i++) {
      const int k = ks[i % 3], dl = ds[(i / 3) % 3], len = 37 + 131 * i, ch = chs[i % 4];
      const conv_case c = {"grp", ch, ch, k, dl, 1, (k - 1) * dl, 1,
                           i % 2 ? COSY_HACT_SNAKE : COSY_HACT_NONE, 0, len, 0, len, i % 2, 0,
                           i % 4 == 0};
      gc[i] = c;
      conv_prepare(&gc[i], &r[i]);
      assert_non_null(r[i].d_out);
      d[i] = r[i].desc;
    }
    float *alone[NG];
    cosy_hift_conv_kernel(COSY_HCONV_K_OLD);
    for (int i = 0; i < NG; i++) {
      CU(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, &d[i], 1, COSY_HPREC_TF32, 1));
      CU(cudaStreamSynchronize(fx->g->stream));
      alone[i] = conv_download(&r[i]);
    }
    for (int v = 0; v < NV; v++) {
      cosy_hift_conv_kernel(variants[v]);
      const int ran = cosy_hift_conv_kernel_for(&fx->g->dev, d, NG, COSY_HPREC_TF32, 1);
      for (int i = 0; i < NG; i++) conv_poison(&r[i]);
      CU(cudaDeviceSynchronize());
      CU(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, d, NG, COSY_HPREC_TF32, 1));
      CU(cudaStreamSynchronize(fx->g->stream));
      const int same = conv_same(r, NG, alone);
      const int want_ok = variants[v] == COSY_HCONV_K_AUTO
                              ? ran == COSY_HCONV_K_W128 || ran == COSY_HCONV_K_W64
                              : ran == variants[v];
      printf("  conv2 [%s]: %d convs in one launch vs each alone on the old kernel: %s%s\n",
             vname[variants[v]], NG, same ? "bit-identical" : "DIFFERS",
             want_ok ? "" : " (WRONG KERNEL)");
      all_ok &= same && want_ok;
    }
    cosy_hift_conv_kernel(COSY_HCONV_K_OLD);
    for (int i = 0; i < NG; i++) free(alone[i]), conv_release(&r[i]);
  }
  cosy_hift_conv_kernel(saved);
  assert_true(all_ok);
}

/* ---- the output pitch ------------------------------------------------------------------------ */

/* host rows [rows][n] -> a device copy with rows of P floats, NaN in the P - n columns past n */
static float *dev_pitched(const float *h, int rows, int n, int P) {
  float *t = malloc((size_t)rows * P * sizeof(float));
  assert_non_null(t);
  memset(t, 0xFF, (size_t)rows * P * sizeof(float));
  for (int c = 0; c < rows; c++) memcpy(t + (size_t)c * P, h + (size_t)c * n, n * sizeof(float));
  float *d = dev_upload(t, (size_t)rows * P * sizeof(float));
  free(t);
  return d;
}

/* run r's conv with its outputs and residuals in rows of P floats (fresh buffers, NaN where
 * nothing may be written); got [2][co][n_out]: out and out_act, packed (zeros where absent).
 * Returns whether the launch wrote every valid value (finite) and nothing else (NaN kept). */
static int conv_pitch_run(fixture *fx, const conv_case *cc, conv_run *r, int P, int prec,
                          float *got) {
  cosy_hift_conv d = r->desc;
  const size_t nall = (size_t)r->co_rows * P, npk = (size_t)cc->co * cc->n_out;
  float *o = dev_nan(nall), *oa = cc->oact ? dev_nan(nall) : NULL;
  float *rs = r->res ? dev_pitched(r->res, cc->co, cc->n_out, P) : NULL;
  float *rs2 = r->res2 ? dev_pitched(r->res2, cc->co, cc->n_out, P) : NULL;
  d.out = cc->oact == 2 ? NULL : o, d.ld_out = P;
  d.out_act = oa, d.ld_out_act = P;
  d.res = rs, d.ld_res = P, d.res2 = rs2, d.ld_res2 = P;
  if (r->d_sat) CU(cudaMemset(r->d_sat, 0, sizeof(int)));
  CU(cudaDeviceSynchronize());
  CU(cosy_k_hift_conv_split(fx->g->stream, &fx->g->dev, &d, 1, prec, 1));
  CU(cudaStreamSynchronize(fx->g->stream));
  float *h = malloc(nall * sizeof(float));
  assert_non_null(h);
  memset(got, 0, 2 * npk * sizeof(float));
  int ok = 1;
  for (int w = 0; w < 2; w++) {
    float *src = w ? oa : o;
    if (!src) continue;
    CU(cudaMemcpy(h, src, nall * sizeof(float), cudaMemcpyDeviceToHost));
    const int written = w ? 1 : d.out != NULL;
    for (int c = 0; c < r->co_rows; c++)
      for (int t = 0; t < P; t++) {
        const float v = h[(size_t)c * P + t];
        if (written && c < cc->co && t < cc->n_out) {
          ok &= isfinite(v) != 0;
          got[w * npk + (size_t)c * cc->n_out + t] = v;
        } else {
          ok &= isnan(v) != 0;
        }
      }
  }
  free(h);
  cudaFree(o), cudaFree(oa), cudaFree(rs), cudaFree(rs2);
  return ok;
}

/* The epilogue's paired float2 accesses (kernels/conv.cu store_tile: where the outputs and
 * residuals have an even pitch and 8-byte aligned rows) give the bits of its one-float accesses
 * (an odd pitch): every conv kind of the vocoder (conv_kinds, TF32 and F16 sets), in TF32, 3xTF32
 * and F16, under each kernel (OLD, W128, W64; F16 also staged), with the valid length odd or even
 * (the last column of an odd length is a lone float) and nothing written past the valid columns
 * or rows. The streaming vocoder lays its stage rows out at a pitch of 8 floats (lib/gpu/hift.c
 * STAGE_PITCH) for this. */
static void test_kernel_conv_pitch(void **state) {
  fixture *fx = *state;
  NEED_DEV(fx);
  const int kern[3] = {COSY_HCONV_K_OLD, COSY_HCONV_K_W128, COSY_HCONV_K_W64};
  const char *kname[3] = {"old", "w128", "w64"};
  int all_ok = 1, runs = 0;
  rng_seed(191);
  for (int f16 = 0; f16 < 2; f16++) {
    conv_case cases[CONV_KINDS_MAX];
    const int nc = conv_kinds(f16, cases);
    for (int i = 0; i < nc; i++) {
      conv_case cc = cases[i];
      if (i % 2) cc.n_out -= 1; /* odd and even valid lengths */
      if (cc.n_out < 1) continue;
      conv_run r;
      conv_prepare(&cc, &r);
      uint16_t *xh = f16 ? xh_alloc(&r) : NULL;
      const size_t npk = (size_t)cc.co * cc.n_out;
      float *a = malloc(2 * npk * sizeof(float)), *b = malloc(2 * npk * sizeof(float));
      assert_true(a && b);
      const int Pa = cc.n_out | 1;                /* odd: one float at a time */
      const int Pb = (cc.n_out + 7) / 8 * 8 + 8;  /* a multiple of 8: pairs */
      const int precs[3] = {COSY_HPREC_TF32, COSY_HPREC_3XTF32, COSY_HPREC_F16};
      for (int pi = f16 ? 2 : 0; pi < (f16 ? 3 : 2); pi++)
        for (int k = 0; k < 3; k++)
          for (int staged = 0; staged < (f16 ? 2 : 1); staged++) {
            const int pk = cosy_hift_conv_kernel(kern[k]);
            const int ps = cosy_hift_conv_staged(staged ? COSY_HCONV_STAGED_ALWAYS
                                                        : COSY_HCONV_STAGED_OFF);
            const int la = conv_pitch_run(fx, &cc, &r, Pa, precs[pi], a);
            const int lb = conv_pitch_run(fx, &cc, &r, Pb, precs[pi], b);
            cosy_hift_conv_kernel(pk), cosy_hift_conv_staged(ps);
            const int same = !memcmp(a, b, 2 * npk * sizeof(float));
            runs++;
            if (!(la && lb && same)) {
              all_ok = 0;
              printf("  FAIL conv %s n_out %d prec %d %s%s: pitch %d %s, pitch %d %s, %s\n",
                     cc.name, cc.n_out, precs[pi], kname[k], staged ? " staged" : "", Pa,
                     la ? "ok" : "BAD LAYOUT", Pb, lb ? "ok" : "BAD LAYOUT",
                     same ? "same bits" : "DIFFER");
            }
          }
      free(a), free(b);
      if (xh) cudaFree(xh);
      conv_release(&r);
    }
  }
  printf("  conv pitch: %d runs, odd pitch == pitch of 8 bit for bit, layouts kept: %s\n", runs,
         all_ok ? "yes" : "NO");
  assert_true(all_ok && runs > 0);
}

/* The launch plans of the full-size vocoder's convs (every conv of hift.c: conv_pre, ups, source
 * downs, resblocks and source resblocks grouped as the decoder launches them, conv_post) on an
 * H100 described by hand and under each test profile, in every split mode: each plan fits the
 * profile's shared memory per block, the k30 s15 source down takes all 30 taps at once only where
 * the slab fits (the H100), and a split is only planned where two regions fit. Host only: runs
 * without a device. */
static void test_conv_plan_profiles(void **state) {
  (void)state;
  cosy_kdev h100;
  memset(&h100, 0, sizeof h100);
  h100.cc_major = 9, h100.n_sm = 132, h100.smem_block = h100.smem_block_hw = 227 * 1024;
  h100.smem_sm = 228 * 1024, h100.clusters = h100.pdl = 1;
  const char *profiles[] = {"", "a100", "ada", "rtx5090", "h100"};
  const float *p = (const float *)(uintptr_t)256; /* never dereferenced: planning only */
  /* (k, dil, stride, up, ci, co, act, n_out) of each launch's convs; n = convs per launch */
  typedef struct {
    int n, k[3], dil[3], stride, up, ci, co, act, n_out;
  } launch;
  const int C = 512, rates[3] = {8, 5, 3}, upk[3] = {16, 11, 7}, rbk[3] = {3, 7, 11};
  const int srbk[3] = {7, 7, 11}, dil[3] = {1, 3, 5}, downs[3] = {15, 3, 1};
  launch L[64];
  int nl = 0, T = 224;
  L[nl++] = (launch){1, {5}, {1}, 1, 1, 80, C, COSY_HACT_NONE, T};
  for (int i = 0, ch = C; i < 3; i++, ch /= 2) {
    T *= rates[i];
    const int co = ch / 2;
    L[nl++] = (launch){1, {upk[i]}, {1}, 1, rates[i], ch, co, COSY_HACT_LEAKY, T};
    const int sd = downs[i];
    L[nl++] = (launch){1, {sd == 1 ? 1 : 2 * sd}, {1}, sd, 1, 18, co, COSY_HACT_NONE, T};
    for (int d = 0; d < 3; d++) {
      L[nl++] = (launch){3, {rbk[0], rbk[1], rbk[2]}, {dil[d], dil[d], dil[d]}, 1, 1, co, co,
                         COSY_HACT_SNAKE, T};
      L[nl++] = (launch){1, {srbk[i]}, {dil[d]}, 1, 1, co, co, COSY_HACT_SNAKE, T};
    }
  }
  L[nl++] = (launch){1, {7}, {1}, 1, 1, 64, 18, COSY_HACT_MEAN3_LEAKY, T};
  int bad = 0;
  for (size_t pi = 0; pi < sizeof profiles / sizeof profiles[0]; pi++) {
    cosy_kdev d = h100;
    assert_int_equal(cosy_gpu_apply_profile(&d, profiles[pi]), COSY_OK);
    size_t most = 0;
    int down_kt = 0;
    for (int li = 0; li < nl; li++)
      for (int mode = 0; mode <= 2; mode++) {
        cosy_hift_conv c[3];
        memset(c, 0, sizeof c);
        for (int j = 0; j < L[li].n; j++) {
          c[j].in = c[j].in2 = c[j].in3 = p, c[j].wp = p, c[j].alpha = p, c[j].out = (float *)p;
          c[j].len_in = L[li].n_out * L[li].stride / L[li].up, c[j].ld_in = c[j].len_in + 64;
          c[j].ld_out = L[li].n_out;
          c[j].ci = L[li].ci, c[j].co = L[li].co, c[j].up = L[li].up, c[j].act = L[li].act;
          c[j].k = L[li].k[j], c[j].dil = L[li].dil[j], c[j].stride = L[li].stride;
          c[j].ci_pad = cosy_hift_conv_pad(c[j].ci, COSY_HCONV_CK);
          c[j].co_pad = cosy_hift_conv_pad(c[j].co, COSY_HCONV_BM);
          c[j].n_out = L[li].n_out;
        }
        int kt[3] = {0}, split = -1;
        const size_t b =
            cosy_k_hift_conv_plan(&d, c, L[li].n, mode, COSY_HPREC_3XTF32, kt, &split);
        if (b == 0 || b > d.smem_block) {
          printf("  FAIL: profile '%s': launch %d (k %d) mode %d plans %zu bytes (allowed %zu)\n",
                 profiles[pi], li, c[0].k, mode, b, d.smem_block);
          bad++;
        }
        if (c[0].k == 30) down_kt = kt[0];
        most = b > most ? b : most;
        /* and in TF32 (one strip plane) */
        const size_t b1 = cosy_k_hift_conv_plan(&d, c, L[li].n, mode, COSY_HPREC_TF32, NULL, NULL);
        if (b1 == 0 || b1 > d.smem_block) bad++;
      }
    printf("  profile '%s': %zu KB per block; the largest conv launch asks %zu KB; the k30 s15 "
           "source down takes %d taps per slab\n",
           profiles[pi][0] ? profiles[pi] : "(h100 as described)", d.smem_block / 1024,
           most / 1024, down_kt);
    /* in 3xTF32 the down's 30 taps (30 x 64 x 8 floats) and its strip (2 planes x 977 columns x 8
     * floats) take 123968 bytes */
    if (d.smem_block >= 123968 ? down_kt != 30 : down_kt >= 30) bad++;
  }
  assert_int_equal(bad, 0);
}

/* ---- fp64 conv ------------------------------------------------------------------------------- */

static void test_kernel_conv64(void **state) {
  fixture *fx = *state;
  NEED_DEV(fx);
  rng_seed(202);
  const struct {
    int ci, co, k, pad, len, n, f32in;
  } cs[] = {{80, 96, 4, 0, 50, 47, 1}, {80, 96, 4, 0, 50, 50, 1}, {96, 70, 3, 2, 61, 61, 0}};
  int ok = 1;
  for (int q = 0; q < 3; q++) {
    const int ci = cs[q].ci, co = cs[q].co, k = cs[q].k, P = cs[q].pad, len = cs[q].len,
              n = cs[q].n;
    float *inf = malloc(sizeof(float) * ci * len);
    double *ind = malloc(sizeof(double) * ci * len);
    float *w = malloc(sizeof(float) * co * ci * k), *b = malloc(sizeof(float) * co);
    fill(inf, (size_t)ci * len, -3, 3);
    for (int i = 0; i < ci * len; i++) ind[i] = inf[i] + 1e-9 * (i % 7); /* not fp32-exact */
    fill(w, (size_t)co * ci * k, -0.2f, 0.2f), fill(b, co, -0.5f, 0.5f);
    double *ref = malloc(sizeof(double) * co * n), *got = malloc(sizeof(double) * co * n);
    for (int o = 0; o < co; o++)
      for (int t = 0; t < n; t++) {
        double acc = b[o];
        for (int i = 0; i < ci; i++)
          for (int j = 0; j < k; j++) {
            int u = t + j - P;
            if (u < 0 || u >= len) continue;
            acc += (double)w[((size_t)o * ci + i) * k + j] *
                   (cs[q].f32in ? (double)inf[i * len + u] : ind[i * len + u]);
          }
        ref[o * n + t] = acc > 0 ? acc : expm1(acc);
      }
    void *d_in = cs[q].f32in ? dev_upload(inf, sizeof(float) * ci * len)
                             : dev_upload(ind, sizeof(double) * ci * len);
    float *d_w = dev_upload(w, sizeof(float) * co * ci * k), *d_b = dev_upload(b, 4 * co);
    double *d_out = NULL;
    CU(cudaMalloc((void **)&d_out, sizeof(double) * co * n));
    CU(cudaMemset(d_out, 0xFF, sizeof(double) * co * n));
    CU(cudaDeviceSynchronize());
    CU(cosy_k_hift_conv64(fx->g->stream, cs[q].f32in ? (const float *)d_in : NULL,
                          cs[q].f32in ? NULL : (const double *)d_in, len, len, ci, d_w, d_b, co,
                          k, P, d_out, n, n));
    CU(cudaStreamSynchronize(fx->g->stream));
    CU(cudaMemcpy(got, d_out, sizeof(double) * co * n, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (int i = 0; i < co * n; i++)
      num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
    char name[96];
    snprintf(name, sizeof name, "conv64 ci%d co%d k%d pad%d %s", ci, co, k, P,
             cs[q].f32in ? "fp32 in" : "fp64 in");
    ok &= check_line(name, sqrt(num / den), 1e-12);
    /* classifier on the same output */
    if (q == 2) {
      float *cw = malloc(sizeof(float) * co), f0[61], f0r[61];
      fill(cw, co, -0.3f, 0.3f);
      for (int t = 0; t < n; t++) {
        double acc = 0.25;
        for (int c = 0; c < co; c++) acc += (double)cw[c] * got[c * n + t];
        f0r[t] = (float)fabs(acc);
      }
      float *d_cw = dev_upload(cw, 4 * co), *d_f0 = dev_nan(n);
      CU(cosy_k_hift_f0_classify(fx->g->stream, d_out, n, co, d_cw, 0.25f, d_f0, n));
      CU(cudaStreamSynchronize(fx->g->stream));
      CU(cudaMemcpy(f0, d_f0, sizeof(float) * n, cudaMemcpyDeviceToHost));
      ok &= check_line("f0 classifier", tu_rel_l2(f0, f0r, n), 1e-7);
      cudaFree(d_cw), cudaFree(d_f0), free(cw);
    }
    cudaFree(d_in), cudaFree(d_w), cudaFree(d_b), cudaFree(d_out);
    free(inf), free(ind), free(w), free(b), free(ref), free(got);
  }
  assert_true(ok);
}

/* ---- grouped fp64 F0 launches ---------------------------------------------------------------- */

/* A chain of the F0 predictor's shape over nj jobs: conv64 k4 pad 0 (fp32 input [mel][ld_in],
 * T valid columns, the columns up to ld_in random too) -> nl x conv64 k3 pad 2 (fp64, ping-pong
 * between two buffers of one layout) -> classifier. Job j's activations are [Cc][ld_o] at o_act
 * (n = T, or T - 3 when not final, valid columns), its f0 n values at o_f0; random gaps between
 * the jobs and past each row stay poisoned. */
typedef struct f0chain {
  int nj, mel, Cc, nl;
  int *T, *n, *ld_in, *ld_o;
  size_t *o_in, *o_act, *o_f0, n_in, n_act, n_f0;
  float *d_in, *d_w[5], *d_b[5], *d_cw;
} f0chain;

/* lengths T uniform in [tmin, tmax], 40% final; the first nfix jobs take fix[j] = {T, final} */
static void f0chain_init(f0chain *c, int nj, int mel, int Cc, int nl, int tmin, int tmax,
                         const int (*fix)[2], int nfix) {
  memset(c, 0, sizeof *c);
  c->nj = nj, c->mel = mel, c->Cc = Cc, c->nl = nl;
  c->T = malloc(sizeof(int) * nj), c->n = malloc(sizeof(int) * nj);
  c->ld_in = malloc(sizeof(int) * nj), c->ld_o = malloc(sizeof(int) * nj);
  c->o_in = malloc(sizeof(size_t) * nj), c->o_act = malloc(sizeof(size_t) * nj);
  c->o_f0 = malloc(sizeof(size_t) * nj);
  for (int j = 0; j < nj; j++) {
    int T = tmin + (int)(urand() * (tmax - tmin + 1)), fin = urand() < 0.4;
    if (j < nfix) T = fix[j][0], fin = fix[j][1];
    c->T[j] = T, c->n[j] = fin ? T : (T > 3 ? T - 3 : 0);
    c->ld_in[j] = T + (int)(urand() * 6);
    c->ld_o[j] = c->n[j] + 1 + (int)(urand() * 4);
    c->o_in[j] = c->n_in + (size_t)(urand() * 40);
    c->n_in = c->o_in[j] + (size_t)mel * c->ld_in[j];
    c->o_act[j] = c->n_act + (size_t)(urand() * 40);
    c->n_act = c->o_act[j] + (size_t)Cc * c->ld_o[j];
    c->o_f0[j] = c->n_f0 + (size_t)(urand() * 8);
    c->n_f0 = c->o_f0[j] + (size_t)c->n[j];
  }
  c->n_act += 7, c->n_f0 += 7; /* a poisoned tail */
  float *in = calloc(c->n_in + 1, sizeof(float));
  fill(in, c->n_in, -3, 3);
  c->d_in = dev_upload(in, sizeof(float) * c->n_in);
  free(in);
  for (int l = 0; l <= nl; l++) {
    const int ci = l ? Cc : mel, k = l ? 3 : 4;
    const size_t nw = (size_t)Cc * ci * k;
    const float sc = 1.5f / sqrtf((float)(ci * k));
    float *w = malloc(sizeof(float) * nw), *b = malloc(sizeof(float) * Cc);
    fill(w, nw, -sc, sc), fill(b, Cc, -0.5f, 0.5f);
    c->d_w[l] = dev_upload(w, sizeof(float) * nw), c->d_b[l] = dev_upload(b, sizeof(float) * Cc);
    free(w), free(b);
  }
  float *cw = malloc(sizeof(float) * Cc);
  fill(cw, Cc, -0.3f, 0.3f);
  c->d_cw = dev_upload(cw, sizeof(float) * Cc);
  free(cw);
}

static void f0chain_free(f0chain *c) {
  free(c->T), free(c->n), free(c->ld_in), free(c->ld_o), free(c->o_in), free(c->o_act);
  free(c->o_f0);
  cudaFree(c->d_in), cudaFree(c->d_cw);
  for (int l = 0; l <= c->nl; l++) cudaFree(c->d_w[l]), cudaFree(c->d_b[l]);
}

/* the chain into a, b (activations, poisoned by the caller) and f0; grouped: the _group
 * launchers (every job in each launch), else one cosy_k_hift_conv64 / f0_classify per job and
 * layer, in the order hift.c ran them before the grouping. The last conv's output is in a when
 * nl is even, else in b. */
static cudaError_t f0chain_run(const f0chain *c, cudaStream_t s, int grouped, double *a, double *b,
                               float *f0) {
  const int nj = c->nj, Cc = c->Cc;
  cudaError_t e = cudaSuccess;
  if (grouped) {
    cosy_hift_conv64 *g = calloc((size_t)nj, sizeof *g);
    cosy_hift_f0cls *f = calloc((size_t)nj, sizeof *f);
    for (int j = 0; j < nj; j++) {
      g[j].in_f32 = c->d_in + c->o_in[j], g[j].ld_in = c->ld_in[j], g[j].len_in = c->T[j];
      g[j].out = a + c->o_act[j], g[j].ld_out = c->ld_o[j], g[j].n_out = c->n[j];
    }
    e = cosy_k_hift_conv64_group(s, g, nj, c->mel, c->d_w[0], c->d_b[0], Cc, 4, 0);
    double *x = a, *y = b;
    for (int l = 1; l <= c->nl && !e; l++) {
      for (int j = 0; j < nj; j++) {
        g[j].in_f32 = NULL, g[j].in_f64 = x + c->o_act[j];
        g[j].ld_in = c->ld_o[j], g[j].len_in = c->n[j], g[j].out = y + c->o_act[j];
      }
      e = cosy_k_hift_conv64_group(s, g, nj, Cc, c->d_w[l], c->d_b[l], Cc, 3, 2);
      double *t = x;
      x = y, y = t;
    }
    for (int j = 0; j < nj; j++) {
      f[j].h = x + c->o_act[j], f[j].ld_h = c->ld_o[j], f[j].n = c->n[j];
      f[j].f0 = f0 + c->o_f0[j];
    }
    if (!e) e = cosy_k_hift_f0_classify_group(s, f, nj, Cc, c->d_cw, 0.25f);
    free(g), free(f);
    return e;
  }
  for (int j = 0; j < nj && !e; j++) {
    const size_t o = c->o_act[j];
    const int n = c->n[j], ld = c->ld_o[j];
    e = cosy_k_hift_conv64(s, c->d_in + c->o_in[j], NULL, c->ld_in[j], c->T[j], c->mel,
                           c->d_w[0], c->d_b[0], Cc, 4, 0, a + o, ld, n);
    double *x = a, *y = b;
    for (int l = 1; l <= c->nl && !e; l++) {
      e = cosy_k_hift_conv64(s, NULL, x + o, ld, n, Cc, c->d_w[l], c->d_b[l], Cc, 3, 2, y + o, ld,
                             n);
      double *t = x;
      x = y, y = t;
    }
    if (!e) e = cosy_k_hift_f0_classify(s, x + o, ld, Cc, c->d_cw, 0.25f, f0 + c->o_f0[j], n);
  }
  return e;
}

/* device buffers of a chain's outputs, poisoned with 0xFF bytes */
typedef struct f0out {
  double *a, *b;
  float *f0;
} f0out;

static void f0out_alloc(const f0chain *c, f0out *o) {
  o->a = (double *)dev_nan(2 * c->n_act), o->b = (double *)dev_nan(2 * c->n_act);
  o->f0 = dev_nan(c->n_f0);
  assert_true(o->a && o->b && o->f0);
}

static void f0out_free(f0out *o) { cudaFree(o->a), cudaFree(o->b), cudaFree(o->f0); }

/* compare the two runs' buffers byte for byte (values and untouched gaps) and check that every
 * byte outside the jobs' outputs is still the poison (in the grouped run); prints one line */
static int f0chain_compare(const f0chain *c, const char *what, const f0out *g, const f0out *p) {
  const size_t na = c->n_act, nf = c->n_f0;
  unsigned char *in_job = calloc(na + nf, 1);
  for (int j = 0; j < c->nj; j++) {
    for (int r = 0; r < c->Cc; r++)
      memset(in_job + c->o_act[j] + (size_t)r * c->ld_o[j], 1, (size_t)c->n[j]);
    memset(in_job + na + c->o_f0[j], 1, (size_t)c->n[j]);
  }
  size_t diff = 0, stray = 0, unwritten = 0, nonfinite = 0, vals = 0;
  for (int buf = 0; buf < 3; buf++) {
    const int is_f0 = buf == 2;
    const size_t n = is_f0 ? nf : na, sz = is_f0 ? sizeof(float) : sizeof(double);
    unsigned char *hg = malloc(n * sz), *hp = malloc(n * sz);
    const void *dg = buf == 0 ? (const void *)g->a : buf == 1 ? (const void *)g->b : g->f0;
    const void *dp = buf == 0 ? (const void *)p->a : buf == 1 ? (const void *)p->b : p->f0;
    CU(cudaMemcpy(hg, dg, n * sz, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(hp, dp, n * sz, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
      const unsigned char *vg = hg + i * sz;
      int poison = 1;
      for (size_t k = 0; k < sz; k++) poison &= vg[k] == 0xFF;
      diff += memcmp(vg, hp + i * sz, sz) != 0;
      if (!in_job[(is_f0 ? na : 0) + i]) {
        stray += !poison;
        continue;
      }
      /* a, b: every job output was written by some layer (b only with nl >= 1) */
      const int written = is_f0 || buf == 0 || c->nl >= 1;
      if (!written) continue;
      vals++;
      unwritten += poison;
      const double v = is_f0 ? (double)*(const float *)vg : *(const double *)vg;
      nonfinite += !poison && !isfinite(v);
    }
    free(hg), free(hp);
  }
  free(in_job);
  print_message("%-44s %zu values: %zu differ from one launch per job, %zu unwritten, %zu not "
                "finite, %zu stray writes (all must be 0)\n",
                what, vals, diff, unwritten, nonfinite, stray);
  return diff == 0 && unwritten == 0 && nonfinite == 0 && stray == 0;
}

/* cosy_k_hift_conv64_group / cosy_k_hift_f0_classify_group vs one cosy_k_hift_conv64 /
 * cosy_k_hift_f0_classify launch per job, bit for bit, on random data:
 *   COSY_HCONV64_MAXG + 5 jobs (two launches per layer) of lengths 1 .. 90 (final and not; some
 *   with no output), 70 channels (a partial tile), two k3 layers; argument checks (nothing is
 *   launched when a job of the second launch is bad);
 *   the full-size predictor (80 -> 512 k4, 4 x 512 k3, classifier) on 64 jobs of 40 .. 110
 *   frames, both ways timed (printed only: CUDA events, the second of two runs). */
static void test_kernel_conv64_group(void **state) {
  fixture *fx = *state;
  NEED_DEV(fx);
  cudaStream_t s = fx->g->stream;
  int ok = 1;
  rng_seed(303);
  {
    f0chain c;
    /* non-final without output; final, shorter than the k4 window; the longest; non-final, two
     * tiles (33 outputs); another without output */
    const int fix[5][2] = {{1, 0}, {3, 1}, {90, 1}, {36, 0}, {3, 0}};
    f0chain_init(&c, COSY_HCONV64_MAXG + 5, 80, 70, 2, 1, 90, fix, 5);
    f0out g, p;
    f0out_alloc(&c, &g), f0out_alloc(&c, &p);
    /* argument checks first: nothing may be launched (the buffers stay poisoned) */
    {
      const int nj = c.nj;
      cosy_hift_conv64 *j = calloc((size_t)nj, sizeof *j);
      for (int q = 0; q < nj; q++) {
        j[q].in_f32 = c.d_in + c.o_in[q], j[q].ld_in = c.ld_in[q], j[q].len_in = c.T[q];
        j[q].out = g.a + c.o_act[q], j[q].ld_out = c.ld_o[q], j[q].n_out = c.n[q];
      }
      const float *w = c.d_w[0], *b = c.d_b[0];
      const cudaError_t BAD = cudaErrorInvalidValue;
      j[nj - 1].out = NULL; /* in the second launch */
      assert_int_equal(cosy_k_hift_conv64_group(s, j, nj, 80, w, b, 70, 4, 0), BAD);
      j[nj - 1].out = g.a + c.o_act[nj - 1];
      j[nj - 1].in_f64 = (const double *)g.b; /* both inputs */
      assert_int_equal(cosy_k_hift_conv64_group(s, j, nj, 80, w, b, 70, 4, 0), BAD);
      j[nj - 1].in_f32 = NULL; /* fp64 after fp32 jobs */
      assert_int_equal(cosy_k_hift_conv64_group(s, j, nj, 80, w, b, 70, 4, 0), BAD);
      j[nj - 1].in_f32 = c.d_in + c.o_in[nj - 1], j[nj - 1].in_f64 = NULL;
      j[nj - 1].ld_in = 0;
      assert_int_equal(cosy_k_hift_conv64_group(s, j, nj, 80, w, b, 70, 4, 0), BAD);
      j[nj - 1].ld_in = c.ld_in[nj - 1], j[nj - 1].n_out = -1;
      assert_int_equal(cosy_k_hift_conv64_group(s, j, nj, 80, w, b, 70, 4, 0), BAD);
      j[nj - 1].n_out = c.n[nj - 1];
      assert_int_equal(cosy_k_hift_conv64_group(s, j, 0, 80, w, b, 70, 4, 0), BAD);
      assert_int_equal(cosy_k_hift_conv64_group(s, NULL, nj, 80, w, b, 70, 4, 0), BAD);
      assert_int_equal(cosy_k_hift_conv64_group(s, j, nj, 80, w, b, 70, 5, 0), BAD);
      assert_int_equal(cosy_k_hift_conv64_group(s, j, nj, 80, w, NULL, 70, 4, 0), BAD);
      assert_int_equal(cosy_k_hift_conv64_group(s, j, nj, 80, w, b, 70, 4, -1), BAD);
      assert_int_equal(cosy_k_hift_conv64_group(s, j, nj, 0, w, b, 70, 4, 0), BAD);
      cosy_hift_f0cls *f = calloc((size_t)nj, sizeof *f);
      for (int q = 0; q < nj; q++) {
        f[q].h = g.a + c.o_act[q], f[q].ld_h = c.ld_o[q], f[q].n = c.n[q];
        f[q].f0 = g.f0 + c.o_f0[q];
      }
      f[nj - 1].f0 = NULL;
      assert_int_equal(cosy_k_hift_f0_classify_group(s, f, nj, 70, c.d_cw, 0.25f), BAD);
      f[nj - 1].f0 = g.f0 + c.o_f0[nj - 1], f[nj - 1].ld_h = 0;
      assert_int_equal(cosy_k_hift_f0_classify_group(s, f, nj, 70, c.d_cw, 0.25f), BAD);
      f[nj - 1].ld_h = c.ld_o[nj - 1];
      assert_int_equal(cosy_k_hift_f0_classify_group(s, f, 0, 70, c.d_cw, 0.25f), BAD);
      assert_int_equal(cosy_k_hift_f0_classify_group(s, f, nj, 0, c.d_cw, 0.25f), BAD);
      assert_int_equal(cosy_k_hift_f0_classify_group(s, f, nj, 70, NULL, 0.25f), BAD);
      CU(cudaStreamSynchronize(s));
      double *ha = malloc(sizeof(double) * c.n_act);
      CU(cudaMemcpy(ha, g.a, sizeof(double) * c.n_act, cudaMemcpyDeviceToHost));
      size_t touched = 0;
      for (size_t i = 0; i < c.n_act; i++) {
        uint64_t u;
        memcpy(&u, &ha[i], 8);
        touched += u != ~(uint64_t)0;
      }
      print_message("refused group launches: %zu values written (must be 0)\n", touched);
      ok &= touched == 0;
      free(ha), free(j), free(f);
    }
    CU(f0chain_run(&c, s, 1, g.a, g.b, g.f0));
    CU(f0chain_run(&c, s, 0, p.a, p.b, p.f0));
    CU(cudaStreamSynchronize(s));
    char what[96];
    snprintf(what, sizeof what, "conv64 group: %d jobs, 80 -> 70 -> 2 x 70, f0", c.nj);
    ok &= f0chain_compare(&c, what, &g, &p);
    f0out_free(&g), f0out_free(&p);
    f0chain_free(&c);
  }
  {
    f0chain c;
    f0chain_init(&c, 64, 80, 512, 4, 40, 110, NULL, 0);
    f0out g, p;
    f0out_alloc(&c, &g), f0out_alloc(&c, &p);
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    float ms[2] = {0, 0};
    for (int way = 0; way < 2; way++) {
      const f0out *o = way ? &p : &g;
      for (int rep = 0; rep < 2; rep++) {
        CU(cudaEventRecord(e0, s));
        CU(f0chain_run(&c, s, !way, o->a, o->b, o->f0));
        CU(cudaEventRecord(e1, s));
        CU(cudaEventSynchronize(e1));
        CU(cudaEventElapsedTime(&ms[way], e0, e1));
      }
    }
    int frames = 0;
    for (int j = 0; j < c.nj; j++) frames += c.T[j];
    print_message("F0 predictor, full size, 64 jobs (%d frames): grouped %.3f ms, one launch per "
                  "job %.3f ms (printed only)\n",
                  frames, ms[0], ms[1]);
    ok &= f0chain_compare(&c, "conv64 group: 64 jobs, 80 -> 512 -> 4 x 512, f0", &g, &p);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    f0out_free(&g), f0out_free(&p);
    f0chain_free(&c);
  }
  assert_true(ok);
}

/* ---- STFT / iSTFT ---------------------------------------------------------------------------- */

/* the reference's iSTFT with the output head (lib/ref/hift.c), in double, on post [18][F] */
static void cpu_istft(const float *post, int64_t F, int64_t n_out, float limit, int raw,
                      float *y) {
  const double pi = 3.14159265358979323846;
  double cs[16], sn[16], w[16];
  for (int n = 0; n < 16; n++)
    cs[n] = cos(2 * pi * n / 16), sn[n] = sin(2 * pi * n / 16),
    w[n] = (float)(0.5 - 0.5 * cos(2 * pi * n / 16));
  const int64_t n_ola = 16 + 4 * (F - 1);
  double *ola = calloc(n_ola, sizeof(double)), *env = calloc(n_ola, sizeof(double));
  for (int64_t f = 0; f < F; f++) {
    double xr[9], xi[9];
    for (int k = 0; k < 9; k++) {
      if (raw) {
        xr[k] = post[k * F + f], xi[k] = post[(9 + k) * F + f];
      } else {
        float mag = expf(post[k * F + f]), ph = sinf(post[(9 + k) * F + f]);
        mag = mag > 100.0f ? 100.0f : mag;
        xr[k] = mag * cosf(ph), xi[k] = mag * sinf(ph);
      }
    }
    for (int j = 0; j < 16; j++) {
      double v = xr[0] + ((j & 1) ? -xr[8] : xr[8]);
      for (int k = 1; k < 8; k++) v += 2.0 * (xr[k] * cs[(k * j) & 15] - xi[k] * sn[(k * j) & 15]);
      v /= 16.0;
      ola[f * 4 + j] += v * w[j];
      env[f * 4 + j] += w[j] * w[j];
    }
  }
  for (int64_t t = 0; t < n_out; t++) {
    float o = (float)(ola[t + 8] / env[t + 8]);
    y[t] = o > limit ? limit : o < -limit ? -limit : o;
  }
  free(ola), free(env);
}

static void test_kernel_stft(void **state) {
  fixture *fx = *state;
  NEED_DEV(fx);
  rng_seed(303);
  const int64_t n = 480 * 7, F = n / 4 + 1;
  float *x = malloc(sizeof(float) * n);
  fill(x, n, -1, 1);
  float *re = malloc(sizeof(float) * 9 * F), *im = malloc(sizeof(float) * 9 * F);
  assert_int_equal(ref_hift_stft(x, n, re, im), COSY_OK);
  float *d_x = dev_upload(x, sizeof(float) * n), *d_S = dev_nan(18 * F), *d_y = dev_nan(n + 8);
  CU(cosy_k_hift_stft(fx->g->stream, d_x, n, F, d_S, (int)F));
  CU(cudaStreamSynchronize(fx->g->stream));
  float *S = malloc(sizeof(float) * 18 * F);
  CU(cudaMemcpy(S, d_S, sizeof(float) * 18 * F, cudaMemcpyDeviceToHost));
  size_t dr = count_diff(S, re, 9 * F), di = count_diff(S + 9 * F, im, 9 * F);
  print_message("stft vs ref_hift_stft: %zu + %zu of %lld values differ in any bit\n", dr, di,
                (long long)(18 * F));
  int ok = check_line("stft real vs ref_hift_stft", tu_rel_l2(S, re, 9 * F), 1e-6);
  ok &= check_line("stft imag vs ref_hift_stft", tu_rel_l2(S + 9 * F, im, 9 * F), 1e-6);
  /* round trip: raw iSTFT of the STFT gives the signal back (limit 1e30: no clamp) */
  float *y = malloc(sizeof(float) * (n + 8));
  CU(cosy_k_hift_istft(fx->g->stream, d_S, (int)F, F, n, 1e30f, 1, d_y));
  CU(cudaStreamSynchronize(fx->g->stream));
  CU(cudaMemcpy(y, d_y, sizeof(float) * (n + 8), cudaMemcpyDeviceToHost));
  ok &= check_line("stft -> istft round trip", tu_rel_l2(y, x, n), 1e-6);
  ok &= isnan(y[n]); /* nothing written past n_out */
  /* the head: random conv_post output, non-final length, clamp at 0.99 */
  const int64_t F2 = 961, nout = 4 * (F2 - 1) - 480;
  float *post = malloc(sizeof(float) * 18 * F2), *yr = malloc(sizeof(float) * nout);
  fill(post, 9 * F2, -3.0f, 5.0f); /* log-magnitudes: some above log(100) -> clipped */
  fill(post + 9 * F2, 9 * F2, -6.0f, 6.0f);
  cpu_istft(post, F2, nout, 0.99f, 0, yr);
  float *d_post = dev_upload(post, sizeof(float) * 18 * F2), *d_y2 = dev_nan(nout + 8);
  float *y2 = malloc(sizeof(float) * (nout + 8));
  CU(cosy_k_hift_istft(fx->g->stream, d_post, (int)F2, F2, nout, 0.99f, 0, d_y2));
  CU(cudaStreamSynchronize(fx->g->stream));
  CU(cudaMemcpy(y2, d_y2, sizeof(float) * (nout + 8), cudaMemcpyDeviceToHost));
  int clamped = 0;
  for (int64_t t = 0; t < nout; t++) clamped += fabsf(yr[t]) == 0.99f;
  print_message("istft head: %d of %lld samples at the clamp\n", clamped, (long long)nout);
  ok &= check_line("istft head + clamp vs CPU loop", tu_rel_l2(y2, yr, nout), 1e-5);
  ok &= isnan(y2[nout]);
  cudaFree(d_x), cudaFree(d_S), cudaFree(d_y), cudaFree(d_post), cudaFree(d_y2);
  free(x), free(re), free(im), free(S), free(y), free(post), free(yr), free(y2);
  assert_true(ok);
}

/* ---- noise and source ------------------------------------------------------------------------ */

static void test_kernel_noise(void **state) {
  fixture *fx = *state;
  NEED_DEV(fx);
  const int nb = 8, nh = 9;
  const int64_t first = 4799, rows = 7000;
  float *ref = malloc(sizeof(float) * rows * nh), *got = malloc(sizeof(float) * rows * nh);
  float ini_r[9], ini_g[9];
  ref_hift_default_noise(nb, first, rows, ini_r, ref);
  float *d_rows = dev_nan(rows * nh), *d_ini = dev_nan(nh);
  CU(cosy_k_hift_noise(fx->g->stream, nb, first, rows, d_ini, d_rows));
  CU(cudaStreamSynchronize(fx->g->stream));
  CU(cudaMemcpy(got, d_rows, sizeof(float) * rows * nh, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(ini_g, d_ini, sizeof ini_g, cudaMemcpyDeviceToHost));
  size_t d = count_diff(got, ref, (size_t)rows * nh) + count_diff(ini_g, ini_r, nh);
  print_message("%-52s %zu of %lld values differ  %s\n", "default noise vs ref (bit-exact)", d,
                (long long)(rows * nh + nh), d == 0 ? "PASS" : "FAIL");
  cudaFree(d_rows), cudaFree(d_ini), free(ref), free(got);
  assert_int_equal(d, 0);
}

/* cosy_k_hift_sine_at / cosy_k_hift_source_at (the streaming source): the frames split into
 * three calls that carry the phase sums (device fp64) and use an absolute frame base give the
 * values of one call over all frames bit for bit (every differing value counted, the first
 * printed with its frame). */
static void test_kernel_source_split(void **state) {
  fixture *fx = *state;
  NEED_DEV(fx);
  const int T = 300, nb = 8, nh = 9, R = 480, cut[4] = {0, 1, 121, 300};
  float f0[300];
  rng_seed(808);
  for (int t = 0; t < T; t++) f0[t] = (t % 7 == 0) ? frand(0, 9.5f) : frand(60, 420);
  float lw[9];
  for (int h = 0; h < nh; h++) lw[h] = frand(-0.5f, 0.5f);
  float *d_f0 = dev_upload(f0, sizeof f0), *d_lw = dev_upload(lw, sizeof lw);
  float *d_all = dev_nan((size_t)T * nh), *d_part = dev_nan((size_t)T * nh);
  float *d_s_all = dev_nan((size_t)T * R), *d_s_part = dev_nan((size_t)T * R);
  double *d_cum = NULL;
  CU(cudaMalloc((void **)&d_cum, nh * sizeof(double)));
  cudaStream_t st = fx->g->stream;
  CU(cosy_k_hift_sine(st, d_f0, T, nb, R, 24000.f, 0.1f, NULL, d_all));
  CU(cosy_k_hift_source(st, d_f0, d_all, nb, R, 0, (int64_t)T * R, NULL, d_lw, 0.05f, 10.f,
                        0.003f, 0.1f / 3, d_s_all));
  for (int c = 0; c < 3; c++) {
    const int k0 = cut[c], n = cut[c + 1] - cut[c];
    CU(cosy_k_hift_sine_at(st, d_f0 + k0, n, nb, R, 24000.f, 0.1f, NULL, k0, c ? d_cum : NULL,
                           d_cum, d_part + (size_t)k0 * nh));
    CU(cosy_k_hift_source_at(st, d_f0 + k0, d_part + (size_t)k0 * nh, nb, R, (int64_t)k0 * R,
                             (int64_t)n * R, k0, NULL, d_lw, 0.05f, 10.f, 0.003f, 0.1f / 3,
                             d_s_part + (size_t)k0 * R));
  }
  CU(cudaStreamSynchronize(st));
  float *a = malloc(sizeof(float) * T * R), *b = malloc(sizeof(float) * T * R);
  CU(cudaMemcpy(a, d_all, sizeof(float) * T * nh, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(b, d_part, sizeof(float) * T * nh, cudaMemcpyDeviceToHost));
  size_t d1 = count_diff(a, b, (size_t)T * nh);
  for (size_t i = 0; i < (size_t)T * nh && d1; i++)
    if (memcmp(a + i, b + i, 4)) {
      print_message("  first differing sine value: frame %zu harmonic %zu: %.9g vs %.9g\n", i / nh,
                    i % nh, a[i], b[i]);
      break;
    }
  CU(cudaMemcpy(a, d_s_all, sizeof(float) * T * R, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(b, d_s_part, sizeof(float) * T * R, cudaMemcpyDeviceToHost));
  size_t d2 = count_diff(a, b, (size_t)T * R);
  for (size_t i = 0; i < (size_t)T * R && d2; i++)
    if (memcmp(a + i, b + i, 4)) {
      print_message("  first differing source sample: %zu (frame %zu): %.9g vs %.9g\n", i, i / R,
                    a[i], b[i]);
      break;
    }
  print_message("%-52s %zu + %zu values differ  %s\n", "sine/source in 3 calls vs 1 (bit-exact)",
                d1, d2, d1 + d2 == 0 ? "PASS" : "FAIL");
  cudaFree(d_f0), cudaFree(d_lw), cudaFree(d_all), cudaFree(d_part), cudaFree(d_s_all);
  cudaFree(d_s_part), cudaFree(d_cum), free(a), free(b);
  assert_int_equal(d1 + d2, 0);
}

static void test_source_random(void **state) {
  fixture *fx = *state;
  NEED_MODEL(fx);
  rng_seed(404);
  const int T = 37;
  float f0[37];
  for (int t = 0; t < T; t++) f0[t] = (t % 5 == 0) ? frand(0, 9.5f) : frand(60, 420);
  f0[3] = 10.0f; /* exactly at the threshold: unvoiced */
  const size_t L = (size_t)T * 480;
  float *sg = malloc(sizeof(float) * L), *sr = malloc(sizeof(float) * L);
  int ok = 1;
  for (int inj = 0; inj < 2; inj++) {
    ref_hift_noise nz = {fx->rand_ini, fx->sine_waves, fx->n_rows};
    const ref_hift_noise *np = inj ? &nz : NULL;
    for (size_t i = 0; i < L; i++) sg[i] = NAN;
    assert_int_equal(gpu_hift_source(fx->h, f0, T, np, sg), COSY_OK);
    assert_int_equal(ref_hift_source(fx->ref, f0, T, np, sr), COSY_OK);
    size_t d = count_diff(sg, sr, L);
    print_message("source (%s noise): %zu of %zu samples differ from ref, max abs %.3e\n",
                  inj ? "injected" : "default", d, L, tu_max_abs_diff(sg, sr, L));
    ok &= check_line(inj ? "source injected noise vs ref" : "source default noise vs ref",
                     tu_rel_l2(sg, sr, L), 1e-6);
  }
  free(sg), free(sr);
  assert_true(ok);
}

/* ---- golden small model ---------------------------------------------------------------------- */

static void test_f0_golden(void **state) {
  fixture *fx = *state;
  NEED_MODEL(fx);
  int nd;
  int64_t sh[8];
  double *ref64 = tu_npy_f64(tu_shared("golden/hift/final/f0_f64.npy"), &nd, sh);
  float *gold = tu_load_f32("golden/hift/final/f0.npy", fx->T);
  float *goldn = tu_load_f32("golden/hift/nonfinal/f0.npy", T_NONFINAL - 3);
  assert_non_null(ref64), assert_non_null(gold), assert_non_null(goldn);
  float f0[64], f0c[64], f0n[64], f0nc[64];
  for (int i = 0; i < 64; i++) f0[i] = f0n[i] = NAN;
  assert_int_equal(gpu_hift_f0(fx->h, fx->mel, fx->T, 1, f0), COSY_OK);
  assert_int_equal(ref_hift_f0(fx->ref, fx->mel, fx->T, 1, f0c), COSY_OK);
  assert_int_equal(gpu_hift_f0(fx->h, fx->mel_nf, T_NONFINAL, 0, f0n), COSY_OK);
  assert_int_equal(ref_hift_f0(fx->ref, fx->mel_nf, T_NONFINAL, 0, f0nc), COSY_OK);
  double num = 0, den = 0;
  for (int t = 0; t < fx->T; t++)
    num += (f0[t] - ref64[t]) * (f0[t] - ref64[t]), den += ref64[t] * ref64[t];
  int ok = check_line("f0 final vs golden f0_f64", sqrt(num / den), 1e-3);
  ok &= check_line("f0 final vs golden f0", tu_rel_l2(f0, gold, fx->T), 1e-3);
  ok &= check_line("f0 non-final vs golden", tu_rel_l2(f0n, goldn, T_NONFINAL - 3), 1e-3);
  print_message("f0 vs ref_hift_f0: final %zu of %d differ (max abs %.3e), non-final %zu differ\n",
                count_diff(f0, f0c, fx->T), fx->T, tu_max_abs_diff(f0, f0c, fx->T),
                count_diff(f0n, f0nc, T_NONFINAL - 3));
  ok &= check_line("f0 final vs ref_hift_f0", tu_rel_l2(f0, f0c, fx->T), 1e-6);
  ok &= check_line("f0 non-final vs ref_hift_f0", tu_rel_l2(f0n, f0nc, T_NONFINAL - 3), 1e-6);
  free(ref64), free(gold), free(goldn);
  assert_true(ok);
}

static void test_source_golden(void **state) {
  fixture *fx = *state;
  NEED_MODEL(fx);
  int ok = 1;
  for (int fin = 1; fin >= 0; fin--) {
    const int Tf = fin ? fx->T : T_NONFINAL - 3;
    float *f0 = tu_load_f32(fin ? "golden/hift/final/f0.npy" : "golden/hift/nonfinal/f0.npy", Tf);
    float *gold = tu_load_f32(fin ? "golden/hift/final/s.npy" : "golden/hift/nonfinal/s.npy",
                       (int64_t)Tf * 480);
    assert_non_null(f0), assert_non_null(gold);
    float *s = malloc(sizeof(float) * Tf * 480), *sc = malloc(sizeof(float) * Tf * 480);
    ref_hift_noise nz = {fx->rand_ini, fx->sine_waves, fx->n_rows};
    assert_int_equal(gpu_hift_source(fx->h, f0, Tf, &nz, s), COSY_OK);
    assert_int_equal(ref_hift_source(fx->ref, f0, Tf, &nz, sc), COSY_OK);
    ok &= check_line(fin ? "source final (golden noise) vs golden s"
                         : "source non-final (golden noise) vs golden s",
                     tu_rel_l2(s, gold, (size_t)Tf * 480), 1e-2);
    print_message("  vs ref_hift_source: %zu of %d samples differ, rel L2 %.3e\n",
                  count_diff(s, sc, (size_t)Tf * 480), Tf * 480,
                  tu_rel_l2(s, sc, (size_t)Tf * 480));
    free(f0), free(gold), free(s), free(sc);
  }
  assert_true(ok);
}

/* FNV-1a (64-bit) of n floats' bytes: a waveform's bits in one printed number, to compare two
 * builds' outputs (bench/device_run.sh step conv prints it per precision) */
static unsigned long long wav_digest(const float *w, int64_t n) {
  unsigned long long h = 1469598103934665603ULL;
  const unsigned char *b = (const unsigned char *)w;
  for (size_t i = 0; i < (size_t)n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

static void test_decode_golden(void **state) {
  fixture *fx = *state;
  NEED_MODEL(fx);
  int ok = 1;
  for (int fin = 1; fin >= 0; fin--) {
    const int T = fin ? fx->T : T_NONFINAL;
    const float *mel = fin ? fx->mel : fx->mel_nf;
    const int64_t ns = (int64_t)(fin ? T : T - 3) * 480, nw_want = (int64_t)(fin ? T : T - 8) * 480;
    float *s = tu_load_f32(fin ? "golden/hift/final/s.npy" : "golden/hift/nonfinal/s.npy", ns);
    float *gold = tu_load_f32(fin ? "golden/hift/final/wav.npy" : "golden/hift/nonfinal/wav.npy", nw_want);
    assert_non_null(s), assert_non_null(gold);
    float *wc = NULL;
    int64_t nc = 0;
    assert_int_equal(ref_hift_decode(fx->ref, mel, T, s, fin, &wc, &nc), COSY_OK);
    /* TF32 (printed), 3xTF32 (asserted), F16 (asserted within the same golden tolerance, its
     * error printed beside TF32's) */
    const int precs[3] = {COSY_HPREC_TF32, COSY_HPREC_3XTF32, COSY_HPREC_F16};
    double e_tf32 = 0;
    for (int pi = 0; pi < 3; pi++) {
      const int prec = precs[pi];
      assert_int_equal(gpu_hift_set_precision(fx->h, prec), COSY_OK);
      float *w = NULL;
      int64_t n = 0;
      assert_int_equal(gpu_hift_decode(fx->h, mel, T, s, fin, &w, &n), COSY_OK);
      assert_int_equal(n, nw_want);
      assert_true(all_finite(w, n));
      char name[96];
      snprintf(name, sizeof name, "decode %s [%s] vs golden wav", fin ? "final" : "non-final",
               prec == COSY_HPREC_3XTF32 ? "3xTF32" : prec == COSY_HPREC_F16 ? "F16" : "TF32");
      const double eg = tu_rel_l2(w, gold, n);
      if (prec == COSY_HPREC_TF32) e_tf32 = eg;
      if (prec == COSY_HPREC_3XTF32) ok &= check_line(name, eg, 2e-2);
      else if (prec == COSY_HPREC_F16) {
        ok &= check_line(name, eg, 2e-2);
        print_message("  golden rel L2: F16 %.3e, TF32 %.3e (F16 / TF32 %.2f)\n", eg, e_tf32,
                      e_tf32 > 0 ? eg / e_tf32 : 0.0);
      } else
        print_message("%-52s rel L2 %.3e  (info)\n", name, eg);
      print_message("  vs ref_hift_decode: rel L2 %.3e, max abs %.3e\n", tu_rel_l2(w, wc, n),
                    tu_max_abs_diff(w, wc, n));
      print_message("  decode %s [%s] waveform digest %016llx\n", fin ? "final" : "non-final",
                    prec == COSY_HPREC_3XTF32 ? "3xTF32" : prec == COSY_HPREC_F16 ? "F16" : "TF32",
                    wav_digest(w, n));
      /* TF32: the waveform under every conv kernel (cosy_hift_conv_kernel), the old one first,
       * is the bits of the default's above (so every kernel's are the old kernel's) */
      for (int kv = COSY_HCONV_K_OLD; prec == COSY_HPREC_TF32 && kv <= COSY_HCONV_K_AUTO;
           kv++) {
        const int saved = cosy_hift_conv_kernel(kv);
        float *w2 = NULL;
        int64_t n2 = 0;
        assert_int_equal(gpu_hift_decode(fx->h, mel, T, s, fin, &w2, &n2), COSY_OK);
        cosy_hift_conv_kernel(saved);
        const int same = n2 == n && !memcmp(w2, w, (size_t)n * sizeof(float));
        print_message("  decode %s [TF32] with conv kernel %d: %s\n", fin ? "final" : "non-final",
                      kv, same ? "bit-identical to the old kernel" : "DIFFERS FROM THE OLD KERNEL");
        ok &= same;
        free(w2);
      }
      free(w);
    }
    free(s), free(gold), free(wc);
  }
  assert_int_equal(gpu_hift_set_precision(fx->h, COSY_HPREC_3XTF32), COSY_OK);
  assert_true(ok);
}

static void test_infer_vs_ref(void **state) {
  fixture *fx = *state;
  NEED_MODEL(fx);
  for (int fin = 1; fin >= 0; fin--) {
    const int T = fin ? fx->T : T_NONFINAL;
    const float *mel = fin ? fx->mel : fx->mel_nf;
    float *w = NULL, *wc = NULL;
    int64_t n = 0, nc = 0;
    assert_int_equal(gpu_hift_infer(fx->h, mel, T, fin, NULL, &w, &n), COSY_OK);
    assert_int_equal(ref_hift_infer(fx->ref, mel, T, fin, NULL, NULL, &wc, &nc), COSY_OK);
    assert_int_equal(n, nc);
    assert_int_equal(n, (int64_t)(fin ? T : T - 8) * 480);
    assert_true(all_finite(w, n));
    for (int64_t i = 0; i < n; i++) assert_true(w[i] >= -0.99f && w[i] <= 0.99f);
    print_message("%-52s rel L2 %.3e  max abs %.3e  (info)\n",
                  fin ? "infer final vs ref_hift_infer" : "infer non-final vs ref_hift_infer",
                  tu_rel_l2(w, wc, n), tu_max_abs_diff(w, wc, n));
    free(w), free(wc);
  }
  /* the non-final output is the prefix of the final one (default noise is chunk independent) */
  float *wf = NULL, *wn = NULL;
  int64_t nf = 0, nn = 0;
  assert_int_equal(gpu_hift_infer(fx->h, fx->mel, fx->T, 1, NULL, &wf, &nf), COSY_OK);
  assert_int_equal(gpu_hift_infer(fx->h, fx->mel_nf, T_NONFINAL, 0, NULL, &wn, &nn), COSY_OK);
  double e = tu_max_abs_diff(wn, wf, (size_t)nn);
  print_message("%-52s max abs %.3e  tol 1e-3  %s\n", "infer non-final vs final prefix", e,
                e <= 1e-3 ? "PASS" : "FAIL");
  free(wf), free(wn);
  assert_true(e <= 1e-3);
}

static void test_args(void **state) {
  fixture *fx = *state;
  NEED_MODEL(fx);
  float f0[64], *wav = (float *)1;
  int64_t n = 7;
  float *s = calloc((size_t)MAX_FRAMES_SMALL * 480 + 480, sizeof(float));
  gpu_hift *tmp = (gpu_hift *)1;
  assert_int_equal(gpu_hift_create(NULL, fx->m, 8, &tmp), COSY_ERR_INVALID_ARG);
  assert_null(tmp);
  assert_int_equal(gpu_hift_create(fx->g, NULL, 8, &tmp), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_create(fx->g, fx->m, 0, &tmp), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_create(fx->g, fx->m, 8, NULL), COSY_ERR_INVALID_ARG);
  gpu_hift_free(NULL);
  assert_int_equal(gpu_hift_f0(NULL, fx->mel, fx->T, 1, f0), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_f0(fx->h, NULL, fx->T, 1, f0), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_f0(fx->h, fx->mel, fx->T, 1, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_f0(fx->h, fx->mel, 0, 1, f0), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_f0(fx->h, fx->mel, 3, 0, f0), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_f0(fx->h, fx->mel, MAX_FRAMES_SMALL + 1, 1, f0), COSY_ERR_INVALID_ARG);
  print_message("error text: %s\n", cosy_last_error());
  assert_int_equal(gpu_hift_source(fx->h, NULL, 4, NULL, s), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_source(fx->h, f0, 0, NULL, s), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_source(fx->h, f0, 4, NULL, NULL), COSY_ERR_INVALID_ARG);
  ref_hift_noise shortnz = {fx->rand_ini, fx->sine_waves, 480 * 4 - 1};
  assert_int_equal(gpu_hift_source(fx->h, f0, 4, &shortnz, s), COSY_ERR_INVALID_ARG);
  ref_hift_noise nonull = {NULL, fx->sine_waves, fx->n_rows};
  assert_int_equal(gpu_hift_source(fx->h, f0, 4, &nonull, s), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_decode(fx->h, fx->mel, 8, s, 0, &wav, &n), COSY_ERR_INVALID_ARG);
  assert_null(wav);
  assert_int_equal(n, 0);
  assert_int_equal(gpu_hift_decode(fx->h, fx->mel, fx->T, NULL, 1, &wav, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_decode(fx->h, fx->mel, fx->T, s, 1, NULL, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_decode(fx->h, fx->mel, fx->T, s, 1, &wav, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_infer(fx->h, fx->mel, 8, 0, NULL, &wav, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_infer(fx->h, NULL, fx->T, 1, NULL, &wav, &n), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_set_precision(fx->h, 7), COSY_ERR_INVALID_ARG);
  /* smallest valid sizes */
  assert_int_equal(gpu_hift_infer(fx->h, fx->mel_nf, 9, 0, NULL, &wav, &n), COSY_OK);
  assert_int_equal(n, 480);
  assert_true(all_finite(wav, n));
  free(wav);
  assert_int_equal(gpu_hift_infer(fx->h, fx->mel_nf, 1, 1, NULL, &wav, &n), COSY_OK);
  assert_int_equal(n, 480);
  for (int64_t i = 0; i < n; i++) assert_true(wav[i] >= -0.99f && wav[i] <= 0.99f);
  free(wav);
  /* cancellation */
  volatile int cancel = 1;
  wav = (float *)1;
  assert_int_equal(gpu_hift_infer(fx->h, fx->mel, fx->T, 1, &cancel, &wav, &n), COSY_ERR_CANCELLED);
  assert_null(wav);
  /* still usable afterwards */
  assert_int_equal(gpu_hift_infer(fx->h, fx->mel, fx->T, 1, NULL, &wav, &n), COSY_OK);
  free(wav);
  free(s);
}

static float *to_fm(const float *cf, int T);
static void stream_diag(const char *what, const float *got, const float *ref, int64_t n,
                        const int64_t *call_end, int n_calls);

/* ---- full-size model (COSY_FULL_MODEL) ------------------------------------------------------ */

/* a smooth pseudo-random log-mel [80][T] around -5 (range about [-10, 1]) */
static float *make_mel(int T, uint64_t seed) {
  float *mel = malloc(sizeof(float) * 80 * T);
  rng_seed(seed);
  float ph[80], fr[80], am[80];
  for (int c = 0; c < 80; c++)
    ph[c] = frand(0, 6.28f), fr[c] = frand(0.05f, 0.4f), am[c] = frand(0.5f, 2.5f);
  for (int c = 0; c < 80; c++)
    for (int t = 0; t < T; t++)
      mel[c * T + t] = -5.0f - 0.03f * c + am[c] * sinf(fr[c] * t + ph[c]) + frand(-0.3f, 0.3f);
  return mel;
}

static double rms(const float *x, int64_t n) {
  double q = 0;
  for (int64_t i = 0; i < n; i++) q += (double)x[i] * x[i];
  return n ? sqrt(q / n) : 0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void time_infer(fixture *fx, gpu_hift *h, const float *mel, int T, int fin,
                       const char *what) {
  enum { WARM = 3, RUNS = 15 };
  double ev[RUNS], wall[RUNS];
  cudaEvent_t e0, e1;
  CU(cudaEventCreate(&e0));
  CU(cudaEventCreate(&e1));
  for (int i = 0; i < WARM + RUNS; i++) {
    float *w = NULL;
    int64_t n = 0;
    CU(cudaEventRecord(e0, fx->g->stream));
    double t0 = cosy_now();
    assert_int_equal(gpu_hift_infer(h, mel, T, fin, NULL, &w, &n), COSY_OK);
    double t1 = cosy_now();
    CU(cudaEventRecord(e1, fx->g->stream));
    CU(cudaEventSynchronize(e1));
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, e0, e1));
    free(w);
    if (i >= WARM) ev[i - WARM] = ms, wall[i - WARM] = (t1 - t0) * 1e3;
  }
  qsort(ev, RUNS, sizeof(double), cmp_d);
  qsort(wall, RUNS, sizeof(double), cmp_d);
  print_message("TIMING gpu_hift_infer %-34s median %.3f ms (events), %.3f ms (wall); min %.3f "
                "max %.3f\n",
                what, ev[RUNS / 2], wall[RUNS / 2], ev[0], ev[RUNS - 1]);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
}

static void test_full_model(void **state) {
  fixture *fx = *state;
  NEED_DEV(fx);
  const char *path = getenv("COSY_FULL_MODEL");
  TU_REQUIRE(path && *path, "COSY_FULL_MODEL not set");
  cosy_model *m = NULL;
  ref_hift *ref = NULL;
  gpu_hift *h = NULL;
  assert_int_equal(cosy_model_load(path, &m), COSY_OK);
  assert_int_equal(ref_hift_create(m, &ref), COSY_OK);
  assert_int_equal(gpu_hift_create(fx->g, m, 224, &h), COSY_OK);
  print_message("full model: HiFT %d/%d channels\n", m->hp.hift_ch, m->hp.hift_cond_ch);
  int ok = 1;
  /* parity at T = 20: f0, source, decode (final and non-final), infer */
  const int T = 20;
  float *mel = make_mel(T, 77);
  for (int fin = 1; fin >= 0; fin--) {
    const int Tf = fin ? T : T - 3;
    float f0c[32], f0g[32];
    assert_int_equal(ref_hift_f0(ref, mel, T, fin, f0c), COSY_OK);
    assert_int_equal(gpu_hift_f0(h, mel, T, fin, f0g), COSY_OK);
    print_message("full f0 %s: median-ish f0 %.1f Hz, %zu of %d differ from ref, rel L2 %.3e\n",
                  fin ? "final" : "non-final", f0c[Tf / 2], count_diff(f0g, f0c, Tf), Tf,
                  tu_rel_l2(f0g, f0c, Tf));
    ok &= check_line(fin ? "full f0 final vs ref" : "full f0 non-final vs ref",
                     tu_rel_l2(f0g, f0c, Tf), 1e-6);
    float *s = malloc(sizeof(float) * Tf * 480), *sg = malloc(sizeof(float) * Tf * 480);
    assert_int_equal(ref_hift_source(ref, f0c, Tf, NULL, s), COSY_OK);
    assert_int_equal(gpu_hift_source(h, f0c, Tf, NULL, sg), COSY_OK);
    ok &= check_line("full source vs ref", tu_rel_l2(sg, s, (size_t)Tf * 480), 1e-6);
    float *wc = NULL;
    int64_t nc = 0;
    double t0 = cosy_now();
    assert_int_equal(ref_hift_decode(ref, mel, T, s, fin, &wc, &nc), COSY_OK);
    print_message("(CPU ref decode T=%d: %.2f s)\n", T, cosy_now() - t0);
    const int precs[3] = {COSY_HPREC_TF32, COSY_HPREC_3XTF32, COSY_HPREC_F16};
    for (int pi = 0; pi < 3; pi++) {
      const int prec = precs[pi];
      assert_int_equal(gpu_hift_set_precision(h, prec), COSY_OK);
      float *w = NULL;
      int64_t n = 0;
      assert_int_equal(gpu_hift_decode(h, mel, T, s, fin, &w, &n), COSY_OK);
      assert_int_equal(n, nc);
      char name[96];
      snprintf(name, sizeof name, "full decode T=20 %s [%s] vs ref", fin ? "final" : "non-final",
               prec == COSY_HPREC_3XTF32 ? "3xTF32" : prec == COSY_HPREC_F16 ? "F16" : "TF32");
      if (prec == COSY_HPREC_3XTF32) ok &= check_line(name, tu_rel_l2(w, wc, n), 2e-2);
      else
        print_message("%-52s rel L2 %.3e  (info)\n", name, tu_rel_l2(w, wc, n));
      print_message("  max abs %.3e, ref rms %.4f, output bits %016llx\n", tu_max_abs_diff(w, wc, n),
                    rms(wc, n), wav_digest(w, n));
      free(w);
    }
    assert_int_equal(gpu_hift_set_precision(h, COSY_HPREC_3XTF32), COSY_OK);
    float *wi = NULL, *wic = NULL;
    int64_t ni = 0, nic = 0;
    assert_int_equal(gpu_hift_infer(h, mel, T, fin, NULL, &wi, &ni), COSY_OK);
    assert_int_equal(ref_hift_infer(ref, mel, T, fin, NULL, NULL, &wic, &nic), COSY_OK);
    assert_int_equal(ni, nic);
    print_message("%-52s rel L2 %.3e  (info)\n", "full infer T=20 vs ref_hift_infer",
                  tu_rel_l2(wi, wic, ni));
    free(wi), free(wic), free(wc), free(s), free(sg);
  }
  free(mel);
  /* timing: the first W1 chunk (T = 100, non-final) and 4.5 s final (T = 224) */
  float *mel100 = make_mel(100, 5), *mel224 = make_mel(224, 6);
  const int tprec[3] = {COSY_HPREC_3XTF32, COSY_HPREC_TF32, COSY_HPREC_F16};
  for (int pi = 0; pi < 3; pi++) {
    const int prec = tprec[pi];
    const char *pn = prec == COSY_HPREC_3XTF32 ? "3xTF32" : prec == COSY_HPREC_F16 ? "F16" : "TF32";
    assert_int_equal(gpu_hift_set_precision(h, prec), COSY_OK);
    char what[64];
    snprintf(what, sizeof what, "T=100 non-final [%s]", pn);
    time_infer(fx, h, mel100, 100, 0, what);
    snprintf(what, sizeof what, "T=224 final [%s]", pn);
    time_infer(fx, h, mel224, 224, 1, what);
  }
  /* the output bits of a 224-frame final infer and of a 100-frame streaming one per precision */
  for (int pi = 0; pi < 3; pi++) {
    assert_int_equal(gpu_hift_set_precision(h, tprec[pi]), COSY_OK);
    for (int k = 0; k < 2; k++) {
      float *wo = NULL;
      int64_t no = 0;
      assert_int_equal(gpu_hift_infer(h, k ? mel224 : mel100, k ? 224 : 100, k, NULL, &wo, &no),
                       COSY_OK);
      print_message("full infer T=%d %s [%s]: %lld samples, output bits %016llx\n", k ? 224 : 100,
                    k ? "final" : "non-final",
                    tprec[pi] == COSY_HPREC_3XTF32 ? "3xTF32"
                    : tprec[pi] == COSY_HPREC_F16  ? "F16"
                                                   : "TF32",
                    (long long)no, wav_digest(wo, no));
      free(wo);
    }
  }
  free(mel100), free(mel224);
  /* streaming at full size: chunks 50, 100, 60 (final) vs the whole-mel GPU runs, and the time of
   * each stream call against the whole-mel re-run the caller would do instead; the streaming
   * convs never split (default) and split automatically (gpu_hift_set_stream_split) */
  for (int mode = 1; mode >= 0; mode--) {
    assert_int_equal(gpu_hift_set_precision(h, COSY_HPREC_3XTF32), COSY_OK);
    assert_int_equal(gpu_hift_set_stream_split(h, mode), COSY_OK);
    const int TS = 210, ch[3] = {50, 100, 60};
    float *cf = make_mel(TS, 8), *fm = to_fm(cf, TS), *out = malloc(sizeof(float) * TS * 480);
    int64_t n_out = 0, ends[3];
    gpu_hift_stream *st = NULL;
    assert_int_equal(gpu_hift_stream_create(h, &st), COSY_OK);
    int t = 0;
    for (int i = 0; i < 3; i++) {
      gpu_hift_job jb;
      memset(&jb, 0, sizeof jb);
      jb.st = st, jb.mel_new = fm + (size_t)t * 80, jb.T_new = ch[i], jb.finalize = i == 2;
      double t0 = cosy_now();
      assert_int_equal(gpu_hift_stream_run(h, &jb, 1, NULL), COSY_OK);
      double t1 = cosy_now();
      memcpy(out + n_out, jb.wav, sizeof(float) * jb.n), n_out += jb.n, ends[i] = n_out;
      free(jb.wav);
      t += ch[i];
      float *cw = malloc(sizeof(float) * 80 * t), *w = NULL;
      for (int c = 0; c < 80; c++) memcpy(cw + (size_t)c * t, cf + (size_t)c * TS, sizeof(float) * t);
      int64_t n = 0;
      double t2 = cosy_now();
      assert_int_equal(gpu_hift_infer(h, cw, t, i == 2, NULL, &w, &n), COSY_OK);
      double t3 = cosy_now();
      print_message("full stream [split %s] call %d (+%d -> T %d): stream %.2f ms, whole-mel "
                    "re-run %.2f ms (host wall, incl. copies; the first call includes warm-up)\n",
                    mode ? "never" : "auto", i, ch[i], t, 1e3 * (t1 - t0), 1e3 * (t3 - t2));
      assert_int_equal(n, n_out);
      char what[64];
      snprintf(what, sizeof what, "full stream after call %d vs GPU whole", i);
      stream_diag(what, out, w, n, ends, i + 1);
      ok &= check_line("  (asserted)", tu_rel_l2(out, w, (size_t)n), 2e-2);
      free(cw), free(w);
    }
    gpu_hift_stream_free(h, st);
    free(cf), free(fm), free(out);
  }
  assert_int_equal(gpu_hift_set_stream_split(h, 1), COSY_OK);
  gpu_hift_free(h);
  ref_hift_free(ref);
  cosy_model_free(m);
  assert_true(ok);
}

/* ---- streaming (gpu_hift_stream_run) --------------------------------------------------------- */

/* frame-major [T][80] copy of a channels-first [80][T] mel */
static float *to_fm(const float *cf, int T) {
  float *fm = malloc(sizeof(float) * 80 * (size_t)T);
  for (int t = 0; t < T; t++)
    for (int c = 0; c < 80; c++) fm[(size_t)t * 80 + c] = cf[(size_t)c * T + t];
  return fm;
}

/* Where got and ref differ most, and which call produced that sample (call_end[i] = samples
 * returned after call i). Prints one line. */
static void stream_diag(const char *what, const float *got, const float *ref, int64_t n,
                        const int64_t *call_end, int n_calls) {
  double worst = 0;
  int64_t wi = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (!(d <= worst)) worst = d, wi = i; /* NaN is the worst */
  }
  int call = 0;
  while (call < n_calls - 1 && call_end[call] <= wi) call++;
  const int64_t from = call ? call_end[call - 1] : 0;
  print_message("%-46s rel L2 %.3e  max abs %.3e at sample %lld (call %d, samples [%lld, %lld), "
                "mel frame %lld)\n",
                what, tu_rel_l2(got, ref, (size_t)n), worst, (long long)wi, call,
                (long long)from, (long long)call_end[call], (long long)(wi / 480));
}

#define S_STREAMS 6
#define S_MAXCALLS 80

typedef struct s_plan {
  int T, n_calls, chunks[S_MAXCALLS];
  float *mel_cf, *mel_fm;
  float *out; /* concatenated output */
  int64_t n_out, call_end[S_MAXCALLS];
} s_plan;

static void plan_init(s_plan *p, int T, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->T = T;
  p->mel_cf = make_mel(T, seed);
  p->mel_fm = to_fm(p->mel_cf, T);
  p->out = malloc(sizeof(float) * (size_t)T * 480 + 4);
}

/* Run the plans' calls: round r batches call r of every plan that has one (batched = 1), or runs
 * each job alone in the same order (batched = 0). Checks the lengths; with worst_prefix != NULL,
 * the prefix after every non-final call vs gpu_hift_infer(so far, 0) (the worst rel L2 is stored
 * there and each new worst is printed with its location). */
static void run_plans(gpu_hift *h, s_plan *p, int np, int batched, double *worst_prefix) {
  gpu_hift_stream *st[S_STREAMS];
  int t[S_STREAMS] = {0}, max_calls = 0;
  for (int i = 0; i < np; i++) {
    assert_int_equal(gpu_hift_stream_create(h, &st[i]), COSY_OK);
    p[i].n_out = 0;
    max_calls = p[i].n_calls > max_calls ? p[i].n_calls : max_calls;
  }
  if (worst_prefix) *worst_prefix = 0;
  for (int r = 0; r < max_calls; r++) {
    gpu_hift_job jobs[S_STREAMS];
    int idx[S_STREAMS], nj = 0;
    for (int i = 0; i < np; i++) {
      if (r >= p[i].n_calls) continue;
      memset(&jobs[nj], 0, sizeof jobs[nj]);
      jobs[nj].st = st[i];
      jobs[nj].T_new = p[i].chunks[r];
      jobs[nj].mel_new = jobs[nj].T_new ? p[i].mel_fm + (size_t)t[i] * 80 : NULL;
      jobs[nj].finalize = r == p[i].n_calls - 1;
      jobs[nj].wav = (float *)1, jobs[nj].n = -1;
      idx[nj++] = i;
    }
    if (batched) {
      cosy_status s = gpu_hift_stream_run(h, jobs, nj, NULL);
      if (s) print_message("gpu_hift_stream_run (round %d, %d jobs): %s\n", r, nj, cosy_last_error());
      assert_int_equal(s, COSY_OK);
    } else {
      for (int j = 0; j < nj; j++) {
        cosy_status s = gpu_hift_stream_run(h, &jobs[j], 1, NULL);
        if (s) print_message("gpu_hift_stream_run (round %d, job %d alone): %s\n", r, j,
                             cosy_last_error());
        assert_int_equal(s, COSY_OK);
      }
    }
    for (int j = 0; j < nj; j++) {
      s_plan *q = &p[idx[j]];
      const int i = idx[j];
      assert_non_null(jobs[j].wav);
      t[i] += jobs[j].T_new;
      const int fin = jobs[j].finalize;
      const int64_t want = fin ? (int64_t)t[i] * 480 : (t[i] > 8 ? (int64_t)(t[i] - 8) * 480 : 0);
      if (q->n_out + jobs[j].n != want)
        print_message("stream %d call %d: %lld samples in all, want %lld\n", i, r,
                      (long long)(q->n_out + jobs[j].n), (long long)want);
      assert_int_equal(q->n_out + jobs[j].n, want);
      memcpy(q->out + q->n_out, jobs[j].wav, sizeof(float) * (size_t)jobs[j].n);
      q->n_out += jobs[j].n;
      q->call_end[r] = q->n_out;
      free(jobs[j].wav);
      if (worst_prefix && !fin && t[i] >= 9) {
        float *cf = malloc(sizeof(float) * 80 * (size_t)t[i]), *w = NULL;
        for (int c = 0; c < 80; c++)
          memcpy(cf + (size_t)c * t[i], q->mel_cf + (size_t)c * q->T, sizeof(float) * t[i]);
        int64_t n = 0;
        assert_int_equal(gpu_hift_infer(h, cf, t[i], 0, NULL, &w, &n), COSY_OK);
        assert_int_equal(n, q->n_out);
        double e = tu_rel_l2(q->out, w, (size_t)n);
        if (!(e <= *worst_prefix)) {
          *worst_prefix = e;
          char what[96];
          snprintf(what, sizeof what, "  worst prefix so far: stream %d after call %d", i, r);
          stream_diag(what, q->out, w, n, q->call_end, r + 1);
        }
        free(cf), free(w);
      }
    }
  }
  for (int i = 0; i < np; i++) gpu_hift_stream_free(h, st[i]);
}

/* Several streams with different chunkings (1-frame chunks, random 1..12, 50/70 of the official
 * schedule, one final chunk, 33/17, growing 5..13; final calls with and without frames), batched
 * per round, so that each batch's grouped F0 launches carry jobs of different window lengths and
 * offsets, final and not, next to jobs that need no F0:
 *   concatenation vs the CPU whole-mel ref_hift_infer(final): 2e-2 rel L2 (the GPU decode's bound)
 *   concatenation vs the GPU whole-mel gpu_hift_infer(final): 2e-3 (same kernels, other lengths)
 *   each non-final prefix vs gpu_hift_infer(so far, 0): 2e-3 (worst printed with its location)
 *   batch invariance: every job run alone gives the same samples bit for bit (alone, its F0
 *   predictor is the only job of its grouped launches).
 * Each failing comparison names the stream, the call and the sample / mel frame of the largest
 * difference. */
static void test_stream(void **state) {
  fixture *fx = *state;
  NEED_MODEL(fx);
  gpu_hift *h = NULL;
  assert_int_equal(gpu_hift_create(fx->g, fx->m, 256, &h), COSY_OK);
  s_plan p[S_STREAMS];
  /* 0: twelve 1-frame chunks, then 10-frame chunks, final T_new = 0 */
  plan_init(&p[0], 72, 101);
  for (int i = 0; i < 12; i++) p[0].chunks[p[0].n_calls++] = 1;
  for (int t = 12; t < 72; t += 10) p[0].chunks[p[0].n_calls++] = 72 - t < 10 ? 72 - t : 10;
  p[0].chunks[p[0].n_calls++] = 0;
  /* 1: random 1..12 frames, the last data chunk final */
  plan_init(&p[1], 95, 102);
  rng_seed(7);
  for (int t = 0; t < 95;) {
    int c = 1 + (int)(urand() * 12);
    if (c > 95 - t) c = 95 - t;
    p[1].chunks[p[1].n_calls++] = c, t += c;
  }
  /* 2: the official schedule's first chunks: 50, then 70 final */
  plan_init(&p[2], 120, 103);
  p[2].chunks[0] = 50, p[2].chunks[1] = 70, p[2].n_calls = 2;
  /* 3: one final chunk */
  plan_init(&p[3], 64, 104);
  p[3].chunks[0] = 64, p[3].n_calls = 1;
  /* 4: 33, then 17 final */
  plan_init(&p[4], 50, 105);
  p[4].chunks[0] = 33, p[4].chunks[1] = 17, p[4].n_calls = 2;
  /* 5: 5, 7, 9, 11, 13, then a final T_new = 0 call */
  plan_init(&p[5], 45, 106);
  for (int i = 0; i < 5; i++) p[5].chunks[p[5].n_calls++] = 5 + 2 * i;
  p[5].chunks[p[5].n_calls++] = 0;

  double worst_prefix = 0;
  run_plans(h, p, S_STREAMS, 1, &worst_prefix);
  int ok = check_line("stream: worst non-final prefix vs gpu_hift_infer", worst_prefix, 2e-3);
  for (int i = 0; i < S_STREAMS; i++) {
    float *wc = NULL, *wg = NULL;
    int64_t nc = 0, ng = 0;
    assert_int_equal(ref_hift_infer(fx->ref, p[i].mel_cf, p[i].T, 1, NULL, NULL, &wc, &nc), COSY_OK);
    assert_int_equal(gpu_hift_infer(h, p[i].mel_cf, p[i].T, 1, NULL, &wg, &ng), COSY_OK);
    assert_int_equal(p[i].n_out, nc);
    assert_int_equal(p[i].n_out, ng);
    assert_true(all_finite(p[i].out, p[i].n_out));
    char what[96];
    snprintf(what, sizeof what, "stream %d (T %d, %d calls) vs CPU whole", i, p[i].T, p[i].n_calls);
    stream_diag(what, p[i].out, wc, nc, p[i].call_end, p[i].n_calls);
    ok &= check_line("  (asserted)", tu_rel_l2(p[i].out, wc, nc), 2e-2);
    snprintf(what, sizeof what, "stream %d (T %d, %d calls) vs GPU whole", i, p[i].T, p[i].n_calls);
    stream_diag(what, p[i].out, wg, ng, p[i].call_end, p[i].n_calls);
    ok &= check_line("  (asserted)", tu_rel_l2(p[i].out, wg, ng), 2e-3);
    print_message("  (GPU whole vs CPU whole: rel L2 %.3e)\n", tu_rel_l2(wg, wc, nc));
    free(wc), free(wg);
  }
  /* batch invariance: the same calls, each job alone; and batched again on a gpu_hift of 120
   * frames, too small for the first round's jobs together (split into two batches) */
  gpu_hift *h120 = NULL;
  assert_int_equal(gpu_hift_create(fx->g, fx->m, 120, &h120), COSY_OK);
  for (int pass = 0; pass < 2; pass++) {
    s_plan q[S_STREAMS];
    for (int i = 0; i < S_STREAMS; i++) {
      q[i] = p[i];
      q[i].out = malloc(sizeof(float) * (size_t)p[i].T * 480 + 4);
    }
    run_plans(pass ? h120 : h, q, S_STREAMS, pass, NULL);
    for (int i = 0; i < S_STREAMS; i++) {
      assert_int_equal(q[i].n_out, p[i].n_out);
      const size_t nd = count_diff(q[i].out, p[i].out, (size_t)p[i].n_out);
      char what[96];
      snprintf(what, sizeof what, "stream %d %s vs in the batch", i,
               pass ? "batched in 120-frame buffers" : "alone");
      if (nd) stream_diag(what, q[i].out, p[i].out, p[i].n_out, p[i].call_end, p[i].n_calls);
      print_message("%-56s %zu of %lld samples differ (must be 0)\n", what, nd,
                    (long long)p[i].n_out);
      ok &= nd == 0;
      free(q[i].out);
    }
  }
  gpu_hift_free(h120);
  for (int i = 0; i < S_STREAMS; i++) free(p[i].mel_cf), free(p[i].mel_fm), free(p[i].out);
  gpu_hift_free(h);
  assert_true(ok);
}

/* Arguments, the max_frames bound, a finalized stream, cancellation (nothing returned, the
 * stream stays usable and its output still matches). */
static void test_stream_args(void **state) {
  fixture *fx = *state;
  NEED_MODEL(fx);
  gpu_hift *h = fx->h; /* max_frames 64 */
  const int T = 60;
  float *cf = make_mel(T, 55), *fm = to_fm(cf, T);
  gpu_hift_stream *a = NULL, *b = NULL;
  assert_int_equal(gpu_hift_stream_create(NULL, &a), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_stream_create(h, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_stream_create(h, &a), COSY_OK);
  assert_int_equal(gpu_hift_stream_create(h, &b), COSY_OK);
  gpu_hift_stream_free(h, NULL);
  gpu_hift_job j[2];
  memset(j, 0, sizeof j);
  j[0].st = a, j[0].mel_new = fm, j[0].T_new = 10;
  j[1] = j[0];
  assert_int_equal(gpu_hift_stream_run(h, j, 2, NULL), COSY_ERR_INVALID_ARG); /* same stream */
  print_message("error text: %s\n", cosy_last_error());
  assert_null(j[0].wav);
  j[1].st = b, j[1].mel_new = NULL;
  assert_int_equal(gpu_hift_stream_run(h, j, 2, NULL), COSY_ERR_INVALID_ARG); /* NULL mel */
  j[1].mel_new = fm, j[1].T_new = 65;
  assert_int_equal(gpu_hift_stream_run(h, j, 2, NULL), COSY_ERR_INVALID_ARG); /* > max_frames */
  print_message("error text: %s\n", cosy_last_error());
  assert_int_equal(gpu_hift_stream_run(NULL, j, 1, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_stream_run(h, NULL, 1, NULL), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_stream_run(h, j, 0, NULL), COSY_OK);
  assert_int_equal(gpu_hift_set_stream_split(h, 3), COSY_ERR_INVALID_ARG);
  assert_int_equal(gpu_hift_set_stream_split(NULL, 1), COSY_ERR_INVALID_ARG);
  /* cancel: nothing returned, the frames are kept */
  volatile int cancel = 1;
  j[1].T_new = 20;
  assert_int_equal(gpu_hift_stream_run(h, j, 2, &cancel), COSY_ERR_CANCELLED);
  assert_null(j[0].wav), assert_null(j[1].wav);
  /* a: 10 frames kept by the cancelled call; go on: 10 more, then 40 final */
  float *out = malloc(sizeof(float) * T * 480);
  int64_t n = 0;
  cancel = 0;
  j[0].mel_new = fm + 10 * 80, j[0].T_new = 10, j[0].finalize = 0;
  assert_int_equal(gpu_hift_stream_run(h, j, 1, &cancel), COSY_OK);
  memcpy(out, j[0].wav, sizeof(float) * j[0].n), n += j[0].n;
  free(j[0].wav);
  j[0].mel_new = fm + 20 * 80, j[0].T_new = 40, j[0].finalize = 1;
  assert_int_equal(gpu_hift_stream_run(h, j, 1, &cancel), COSY_OK);
  memcpy(out + n, j[0].wav, sizeof(float) * j[0].n), n += j[0].n;
  free(j[0].wav);
  assert_int_equal(n, (int64_t)T * 480);
  float *wg = NULL;
  int64_t ng = 0;
  assert_int_equal(gpu_hift_infer(h, cf, T, 1, NULL, &wg, &ng), COSY_OK);
  const int64_t ends[2] = {(int64_t)12 * 480, n};
  stream_diag("stream after a cancel vs GPU whole", out, wg, n, ends, 2);
  const double e = tu_rel_l2(out, wg, (size_t)n);
  /* finalized: no more calls; an empty final call on a fresh stream returns 0 samples */
  j[0].T_new = 1;
  assert_int_equal(gpu_hift_stream_run(h, j, 1, NULL), COSY_ERR_INVALID_ARG);
  gpu_hift_stream_free(h, a);
  /* b: the cancelled batch kept its 20 frames too: a final call without frames returns them */
  j[1].st = b, j[1].mel_new = NULL, j[1].T_new = 0, j[1].finalize = 1;
  assert_int_equal(gpu_hift_stream_run(h, &j[1], 1, NULL), COSY_OK);
  assert_int_equal(j[1].n, (int64_t)20 * 480);
  assert_true(all_finite(j[1].wav, j[1].n));
  free(j[1].wav);
  gpu_hift_stream_free(h, b);
  /* an empty utterance: one final call without frames on a fresh stream */
  assert_int_equal(gpu_hift_stream_create(h, &b), COSY_OK);
  j[1].st = b;
  assert_int_equal(gpu_hift_stream_run(h, &j[1], 1, NULL), COSY_OK);
  assert_non_null(j[1].wav);
  assert_int_equal(j[1].n, 0);
  free(j[1].wav);
  gpu_hift_stream_free(h, b);
  free(out), free(wg), free(cf), free(fm);
  assert_true(check_line("stream after a cancel vs gpu_hift_infer", e, 2e-3));
}

/* ---- the F16 guard (gpu_hift_set_f16_guard; lib/gpu/hift.c, "Saturation") -------------------- */

#define G_STREAMS 4
#define G_SCALE 2e4f /* mel scale that takes conv_pre's inputs beyond fp16's 65504 */

static int64_t f16_fallbacks(const gpu_hift *h) {
  int64_t f = 0;
  gpu_hift_f16_stats(h, NULL, &f);
  return f;
}

/* COSY_HPREC_F16 with the guard, small model:
 *   whole utterance (gpu_hift_decode of the golden final mel and source): unscaled, nothing
 *   saturates: no fallback and the bits of the unguarded F16 decode; the mel x G_SCALE (its
 *   largest |value| printed and asserted beyond 65504): one fallback and the TF32 decode's bits
 *   (how far the unguarded, clamped F16 decode is from TF32 is printed);
 *   streaming (gpu_hift_stream_run, 4 streams, the second with its mel x G_SCALE, batched): one
 *   final call each (one batch: exactly 1 fallback), then two calls each (a non-final then a
 *   final one: 2 fallbacks, both calls of the scaled stream, its state carried across). Each
 *   unscaled stream's samples are its F16 decode alone bit for bit, the scaled stream's its TF32
 *   decode alone bit for bit (and its F16 decode alone under the guard: the same bits, one
 *   fallback a call); the unscaled streams alone and batched without the scaled one fall back 0
 *   times. */
static void test_f16_guard(void **state) {
  fixture *fx = *state;
  NEED_MODEL(fx);
  int ok = 1;
  {
    gpu_hift *h = fx->h;
    const int T = fx->T;
    const int64_t ns = (int64_t)T * 480;
    float *s = tu_load_f32("golden/hift/final/s.npy", ns);
    assert_non_null(s);
    float *big = malloc(sizeof(float) * 80 * (size_t)T), mx = 0;
    for (size_t i = 0; i < (size_t)80 * T; i++) {
      big[i] = fx->mel[i] * G_SCALE;
      mx = fabsf(big[i]) > mx ? fabsf(big[i]) : mx;
    }
    print_message("f16 guard: golden mel x %.0e: largest |value| %.3e (fp16's largest 65504)\n",
                  (double)G_SCALE, (double)mx);
    assert_true(mx > 65504.0f);
    for (int sc = 0; sc < 2; sc++) {
      float *w[3] = {NULL, NULL, NULL}; /* F16 guarded, F16 unguarded, TF32 */
      int64_t fb = -1;
      for (int v = 0; v < 3; v++) {
        int64_t n = 0;
        assert_int_equal(gpu_hift_set_precision(h, v == 2 ? COSY_HPREC_TF32 : COSY_HPREC_F16),
                         COSY_OK);
        assert_int_equal(gpu_hift_set_f16_guard(h, v == 0), COSY_OK);
        const int64_t f0 = f16_fallbacks(h);
        assert_int_equal(gpu_hift_decode(h, sc ? big : fx->mel, T, s, 1, &w[v], &n), COSY_OK);
        assert_int_equal(n, ns);
        if (v == 0) fb = f16_fallbacks(h) - f0;
        else assert_int_equal(f16_fallbacks(h), f0); /* unguarded, TF32: never counted */
      }
      const size_t d_off = count_diff(w[0], w[1], (size_t)ns);
      const size_t d_tf = count_diff(w[0], w[2], (size_t)ns);
      const size_t d_raw = count_diff(w[1], w[2], (size_t)ns);
      const int good = fb == sc && (sc ? d_tf : d_off) == 0;
      print_message("f16 guard: decode %s: %lld fallbacks (want %d); guarded F16 vs unguarded: "
                    "%zu samples differ, vs TF32: %zu (of %lld; must be 0 %s); unguarded F16 vs "
                    "TF32: %zu differ, rel L2 %.3e%s\n",
                    sc ? "mel x 2e4 (saturating)" : "golden (no saturation)", (long long)fb, sc,
                    d_off, d_tf, (long long)ns, sc ? "vs TF32" : "vs unguarded", d_raw,
                    tu_rel_l2(w[1], w[2], (size_t)ns), good ? "" : "  WRONG");
      ok &= good;
      for (int v = 0; v < 3; v++) free(w[v]);
    }
    assert_int_equal(gpu_hift_set_f16_guard(NULL, 1), COSY_ERR_INVALID_ARG);
    assert_int_equal(gpu_hift_set_f16_guard(h, 2), COSY_ERR_INVALID_ARG);
    assert_int_equal(gpu_hift_set_f16_guard(h, 1), COSY_OK);
    assert_int_equal(gpu_hift_set_precision(h, COSY_HPREC_3XTF32), COSY_OK);
    free(s), free(big);
  }
  gpu_hift *h = NULL;
  assert_int_equal(gpu_hift_create(fx->g, fx->m, 256, &h), COSY_OK);
  assert_int_equal(gpu_hift_set_precision(h, COSY_HPREC_F16), COSY_OK);
  const int Ts[G_STREAMS] = {64, 50, 45, 60}, SAT = 1;
  for (int calls = 1; calls <= 2; calls++) {
    s_plan p[G_STREAMS];
    for (int i = 0; i < G_STREAMS; i++) {
      plan_init(&p[i], Ts[i], 300 + (uint64_t)i);
      for (size_t k = 0; i == SAT && k < (size_t)80 * Ts[i]; k++)
        p[i].mel_cf[k] *= G_SCALE, p[i].mel_fm[k] *= G_SCALE;
      p[i].n_calls = calls;
      p[i].chunks[0] = calls == 1 ? Ts[i] : Ts[i] / 2;
      p[i].chunks[1] = Ts[i] - Ts[i] / 2;
    }
    int64_t f0 = f16_fallbacks(h);
    run_plans(h, p, G_STREAMS, 1, NULL);
    const int64_t fb = f16_fallbacks(h) - f0;
    print_message("f16 guard: %d streams batched, %d call(s) each, stream %d saturating: %lld "
                  "fallbacks (want %d)%s\n", G_STREAMS, calls, SAT, (long long)fb, calls,
                  fb == calls ? "" : "  WRONG");
    ok &= fb == calls;
    /* each alone: the unscaled ones in F16, the scaled one in TF32 and in guarded F16 */
    for (int v = 0; v < G_STREAMS + 1; v++) {
      const int i = v < G_STREAMS ? v : SAT, tf32 = v == SAT;
      s_plan q = p[i];
      q.out = malloc(sizeof(float) * (size_t)p[i].T * 480 + 4);
      assert_int_equal(gpu_hift_set_precision(h, tf32 ? COSY_HPREC_TF32 : COSY_HPREC_F16),
                       COSY_OK);
      f0 = f16_fallbacks(h);
      run_plans(h, &q, 1, 0, NULL);
      const int64_t fa = f16_fallbacks(h) - f0;
      const int64_t want = i == SAT && !tf32 ? calls : 0;
      assert_int_equal(q.n_out, p[i].n_out);
      const size_t nd = count_diff(q.out, p[i].out, (size_t)p[i].n_out);
      print_message("  stream %d alone in %-4s vs in the batch: %zu of %lld samples differ (must "
                    "be 0), %lld fallbacks (want %lld)%s\n", i, tf32 ? "TF32" : "F16", nd,
                    (long long)p[i].n_out, (long long)fa, (long long)want,
                    nd == 0 && fa == want ? "" : "  WRONG");
      ok &= nd == 0 && fa == want;
      free(q.out);
    }
    assert_int_equal(gpu_hift_set_precision(h, COSY_HPREC_F16), COSY_OK);
    /* the unscaled streams batched without the scaled one: no fallback, the same bits */
    s_plan u[G_STREAMS - 1];
    for (int i = 0, k = 0; i < G_STREAMS; i++)
      if (i != SAT) {
        u[k] = p[i];
        u[k++].out = malloc(sizeof(float) * (size_t)p[i].T * 480 + 4);
      }
    f0 = f16_fallbacks(h);
    run_plans(h, u, G_STREAMS - 1, 1, NULL);
    size_t nd = 0;
    for (int i = 0, k = 0; i < G_STREAMS; i++)
      if (i != SAT) {
        nd += count_diff(u[k].out, p[i].out, (size_t)p[i].n_out);
        free(u[k++].out);
      }
    const int64_t fu = f16_fallbacks(h) - f0;
    print_message("  the %d unscaled streams batched: %lld fallbacks (want 0), %zu samples differ "
                  "from the first batch (must be 0)%s\n", G_STREAMS - 1, (long long)fu, nd,
                  fu == 0 && nd == 0 ? "" : "  WRONG");
    ok &= fu == 0 && nd == 0;
    for (int i = 0; i < G_STREAMS; i++) free(p[i].mel_cf), free(p[i].mel_fm), free(p[i].out);
  }
  int64_t jobs = 0, fbs = 0;
  gpu_hift_f16_stats(h, &jobs, &fbs);
  print_message("f16 guard: %lld fallbacks in %lld guarded jobs on the streaming gpu_hift\n",
                (long long)fbs, (long long)jobs);
  gpu_hift_free(h);
  assert_true(ok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernel_conv),   cmocka_unit_test(test_kernel_conv_f16),
      cmocka_unit_test(test_kernel_conv_staged), cmocka_unit_test(test_kernel_conv_pitch),
      cmocka_unit_test(test_kernel_conv2),
      cmocka_unit_test(test_conv_plan_profiles),
      cmocka_unit_test(test_kernel_conv64),  cmocka_unit_test(test_kernel_conv64_group),
      cmocka_unit_test(test_kernel_stft),   cmocka_unit_test(test_kernel_noise),
      cmocka_unit_test(test_source_random), cmocka_unit_test(test_f0_golden),
      cmocka_unit_test(test_source_golden), cmocka_unit_test(test_decode_golden),
      cmocka_unit_test(test_infer_vs_ref),  cmocka_unit_test(test_args),
      cmocka_unit_test(test_full_model),    cmocka_unit_test(test_kernel_source_split),
      cmocka_unit_test(test_stream),
      cmocka_unit_test(test_stream_args),   cmocka_unit_test(test_f16_guard),
  };
  /* COSY_TEST_FILTER=test_stream (a cmocka glob): only those tests */
  const char *only = getenv("COSY_TEST_FILTER");
  if (only && *only) cmocka_set_test_filter(only);
  return cmocka_run_group_tests(tests, setup, teardown);
}

#endif /* COSY_WITH_CUDA */
