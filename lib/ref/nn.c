/* nn.c - dense kernels of the front-end CPU references; see nn.h. */
#include "ref/nn.h"

#include <math.h>

#ifdef _OPENMP
#define OMP_FOR _Pragma("omp parallel for schedule(static)")
#else
#define OMP_FOR
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

void ref_nn_linear(float *out, size_t os, const float *in, size_t is, int rows, int K,
                   const float *W, const float *b, int O) {
  enum { OT = 32 };
  int ntile = (O + OT - 1) / OT;
  OMP_FOR
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
