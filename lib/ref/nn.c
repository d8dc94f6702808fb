/* nn.c - dense kernels of the front-end CPU references; see nn.h. On x86 CPUs with AVX2 and FMA
 * the linear layer uses 8-lane fused multiply-adds (selected at run time); elsewhere the portable
 * 4-partial-sum kernel. The two differ in rounding only (~1e-7 relative). */
#include "ref/nn.h"

#include <math.h>
#include <stdlib.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define NN_X86 1
#endif

#ifdef _OPENMP
#define OMP_FOR _Pragma("omp parallel for schedule(static)")
/* only worth a parallel region for a few million multiply-adds or more (CAM++ makes many small
 * calls); `big` is a local of the caller */
#define OMP_FOR_BIG _Pragma("omp parallel for schedule(static) if(big)")
#else
#define OMP_FOR
#define OMP_FOR_BIG
#endif

static inline int imin(int a, int b) { return a < b ? a : b; }

static float dot4(const float *restrict a, const float *restrict b, int n) {
  float s[4] = {0, 0, 0, 0};
  int k = 0;
  for (; k + 4 <= n; k += 4)
    for (int l = 0; l < 4; l++) s[l] += a[k + l] * b[k + l];
  for (; k < n; k++) s[0] += a[k] * b[k];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/* 4 input rows x 2 weight rows; the same summation order as dot4 */
static void kern4x2(float *restrict out, size_t os, const float *restrict in, size_t is, int K,
                    const float *restrict w0, const float *restrict w1, const float *b) {
  float acc[4][2][4] = {{{0}}};
  const float *a0 = in, *a1 = in + is, *a2 = in + 2 * is, *a3 = in + 3 * is;
  int k = 0;
  for (; k + 4 <= K; k += 4)
    for (int l = 0; l < 4; l++) {
      float x0 = a0[k + l], x1 = a1[k + l], x2 = a2[k + l], x3 = a3[k + l];
      float y0 = w0[k + l], y1 = w1[k + l];
      acc[0][0][l] += x0 * y0;
      acc[0][1][l] += x0 * y1;
      acc[1][0][l] += x1 * y0;
      acc[1][1][l] += x1 * y1;
      acc[2][0][l] += x2 * y0;
      acc[2][1][l] += x2 * y1;
      acc[3][0][l] += x3 * y0;
      acc[3][1][l] += x3 * y1;
    }
  const float *a[4] = {a0, a1, a2, a3};
  for (; k < K; k++)
    for (int r = 0; r < 4; r++) {
      acc[r][0][0] += a[r][k] * w0[k];
      acc[r][1][0] += a[r][k] * w1[k];
    }
  for (int r = 0; r < 4; r++)
    for (int o = 0; o < 2; o++) {
      float s = (acc[r][o][0] + acc[r][o][1]) + (acc[r][o][2] + acc[r][o][3]);
      out[r * os + o] = s + (b ? b[o] : 0.0f);
    }
}

#ifdef NN_X86
/* AVX2 + FMA: 4 input rows x 2 weight rows, 8 lanes per accumulator (k mod 8), fused multiply-add;
 * lanes summed pairwise at the end. Used when the CPU has both (checked once at run time). */
__attribute__((target("avx2,fma"))) static float hsum8(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_movehdup_ps(a));
  return _mm_cvtss_f32(a);
}

__attribute__((target("avx2,fma"))) static void kern4x2_avx2(float *restrict out, size_t os,
                                                             const float *restrict in, size_t is,
                                                             int K, const float *restrict w0,
                                                             const float *restrict w1,
                                                             const float *b) {
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
         a30 = a00, a31 = a00;
  const float *i0 = in, *i1 = in + is, *i2 = in + 2 * is, *i3 = in + 3 * is;
  int k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 y0 = _mm256_loadu_ps(w0 + k), y1 = _mm256_loadu_ps(w1 + k);
    __m256 x = _mm256_loadu_ps(i0 + k);
    a00 = _mm256_fmadd_ps(x, y0, a00);
    a01 = _mm256_fmadd_ps(x, y1, a01);
    x = _mm256_loadu_ps(i1 + k);
    a10 = _mm256_fmadd_ps(x, y0, a10);
    a11 = _mm256_fmadd_ps(x, y1, a11);
    x = _mm256_loadu_ps(i2 + k);
    a20 = _mm256_fmadd_ps(x, y0, a20);
    a21 = _mm256_fmadd_ps(x, y1, a21);
    x = _mm256_loadu_ps(i3 + k);
    a30 = _mm256_fmadd_ps(x, y0, a30);
    a31 = _mm256_fmadd_ps(x, y1, a31);
  }
  float s[4][2] = {{hsum8(a00), hsum8(a01)}, {hsum8(a10), hsum8(a11)},
                   {hsum8(a20), hsum8(a21)}, {hsum8(a30), hsum8(a31)}};
  const float *ir[4] = {i0, i1, i2, i3};
  for (int r = 0; r < 4; r++) {
    for (int kk = k; kk < K; kk++) {
      s[r][0] += ir[r][kk] * w0[kk];
      s[r][1] += ir[r][kk] * w1[kk];
    }
    out[r * os] = s[r][0] + (b ? b[0] : 0.0f);
    out[r * os + 1] = s[r][1] + (b ? b[1] : 0.0f);
  }
}

__attribute__((target("avx2,fma"))) static float dot_avx2(const float *restrict a,
                                                          const float *restrict w, int K) {
  __m256 acc = _mm256_setzero_ps();
  int k = 0;
  for (; k + 8 <= K; k += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(w + k), acc);
  float s = hsum8(acc);
  for (; k < K; k++) s += a[k] * w[k];
  return s;
}

/* rows x 16 outputs against a packed weight tile Wp [K][16] (zero-padded beyond nout): 4 rows at
 * a time, one accumulator per (row, output), summed over k in order with fused multiply-adds. */
__attribute__((target("avx2,fma"))) static void tile16_avx2(float *out, size_t os, const float *in,
                                                            size_t is, int rows, int K,
                                                            const float *Wp, const float *b,
                                                            int nout) {
  for (int r = 0; r < rows; r += 4) {
    const int nr = rows - r < 4 ? rows - r : 4;
    const float *a0 = in + (size_t)r * is;
    const float *a1 = in + (size_t)(r + (nr > 1 ? 1 : 0)) * is;
    const float *a2 = in + (size_t)(r + (nr > 2 ? 2 : 0)) * is;
    const float *a3 = in + (size_t)(r + (nr > 3 ? 3 : 0)) * is;
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
           c30 = c00, c31 = c00;
    for (int k = 0; k < K; k++) {
      __m256 w0 = _mm256_loadu_ps(Wp + (size_t)k * 16), w1 = _mm256_loadu_ps(Wp + (size_t)k * 16 + 8);
      __m256 x = _mm256_broadcast_ss(a0 + k);
      c00 = _mm256_fmadd_ps(x, w0, c00);
      c01 = _mm256_fmadd_ps(x, w1, c01);
      x = _mm256_broadcast_ss(a1 + k);
      c10 = _mm256_fmadd_ps(x, w0, c10);
      c11 = _mm256_fmadd_ps(x, w1, c11);
      x = _mm256_broadcast_ss(a2 + k);
      c20 = _mm256_fmadd_ps(x, w0, c20);
      c21 = _mm256_fmadd_ps(x, w1, c21);
      x = _mm256_broadcast_ss(a3 + k);
      c30 = _mm256_fmadd_ps(x, w0, c30);
      c31 = _mm256_fmadd_ps(x, w1, c31);
    }
    float t[4][16];
    _mm256_storeu_ps(t[0], c00), _mm256_storeu_ps(t[0] + 8, c01);
    _mm256_storeu_ps(t[1], c10), _mm256_storeu_ps(t[1] + 8, c11);
    _mm256_storeu_ps(t[2], c20), _mm256_storeu_ps(t[2] + 8, c21);
    _mm256_storeu_ps(t[3], c30), _mm256_storeu_ps(t[3] + 8, c31);
    for (int rr = 0; rr < nr; rr++)
      for (int j = 0; j < nout; j++) out[(size_t)(r + rr) * os + j] = t[rr][j] + (b ? b[j] : 0.0f);
  }
}

static int have_avx2(void) {
  static int v = -1;
  int c = __atomic_load_n(&v, __ATOMIC_RELAXED);
  if (c < 0) {
    __builtin_cpu_init();
    c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    __atomic_store_n(&v, c, __ATOMIC_RELAXED);
  }
  return c;
}
#endif

void ref_nn_linear(float *out, size_t os, const float *in, size_t is, int rows, int K,
                   const float *W, const float *b, int O) {
  enum { OT = 32 };
  const int big = (double)rows * K * O >= 4e6;
  (void)big;
#ifdef NN_X86
  if (have_avx2() && rows >= 16) { /* packed 16-output tiles: each weight read once per 4 rows */
    int ntile = (O + 15) / 16, bad = 0;
    OMP_FOR_BIG
    for (int tile = 0; tile < ntile; tile++) {
      int o0 = tile * 16, nout = imin(16, O - o0);
      /* plain malloc, not cosy_malloc (lib/util.h): a scratch per tile of every large linear, with
       * a fallback below when it fails, so fault injection does not count it */
      float *Wp = (float *)malloc((size_t)K * 16 * sizeof(float));
      if (!Wp) {
        __atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
        continue;
      }
      for (int k = 0; k < K; k++)
        for (int j = 0; j < 16; j++) Wp[(size_t)k * 16 + j] = j < nout ? W[(size_t)(o0 + j) * K + k] : 0.0f;
      tile16_avx2(out + o0, os, in, is, rows, K, Wp, b ? b + o0 : NULL, nout);
      free(Wp);
    }
    if (!bad) return;
  }
  if (have_avx2() && K >= 8) {
    int ntile = (O + OT - 1) / OT;
    OMP_FOR_BIG
    for (int tile = 0; tile < ntile; tile++) {
      int o0 = tile * OT, o1 = imin(O, o0 + OT);
      for (int r = 0; r < rows; r += 4) {
        const float *inr = in + (size_t)r * is;
        float *outr = out + (size_t)r * os;
        int o = o0;
        if (rows - r >= 4)
          for (; o + 2 <= o1; o += 2)
            kern4x2_avx2(outr + o, os, inr, is, K, W + (size_t)o * K, W + (size_t)(o + 1) * K,
                         b ? b + o : NULL);
        for (; o < o1; o++)
          for (int rr = 0; rr < imin(4, rows - r); rr++)
            outr[(size_t)rr * os + o] =
                dot_avx2(inr + (size_t)rr * is, W + (size_t)o * K, K) + (b ? b[o] : 0.0f);
      }
    }
    return;
  }
#endif
  int ntile = (O + OT - 1) / OT;
  OMP_FOR_BIG
  for (int tile = 0; tile < ntile; tile++) {
    int o0 = tile * OT, o1 = imin(O, o0 + OT);
    for (int r = 0; r < rows; r += 4) {
      const float *inr = in + (size_t)r * is;
      float *outr = out + (size_t)r * os;
      int o = o0;
      if (rows - r >= 4)
        for (; o + 2 <= o1; o += 2)
          kern4x2(outr + o, os, inr, is, K, W + (size_t)o * K, W + (size_t)(o + 1) * K,
                  b ? b + o : NULL);
      for (; o < o1; o++)
        for (int rr = 0; rr < imin(4, rows - r); rr++)
          outr[(size_t)rr * os + o] =
              dot4(inr + (size_t)rr * is, W + (size_t)o * K, K) + (b ? b[o] : 0.0f);
    }
  }
}

void ref_nn_gelu(float *x, size_t n) {
  OMP_FOR
  for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}
