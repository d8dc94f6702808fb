/* fft.c - small mixed-radix complex FFT (see fft.h for the definition and the data layout).
 *
 * Algorithm (fast path, n = p1 * p2 * ... with every p in {4, 2, 3, 5}): recursive out-of-place
 * decimation in time. A sub-transform of length L = p * m reading x[0], x[s], x[2s], ... is
 *     Y_q = DFT_m(x[q + p j], j = 0..m-1)                      for q = 0..p-1 (recursion)
 *     X[k + t m] = sum_q W_L^{q k} Y_q[k] * W_p^{q t}           k < m, t < p (one butterfly)
 * with W_L = exp(-2 pi i / L) = W_n^(n/L), so every twiddle is an entry of one table
 * W_n^r, r = 0..n-1 (computed in double, stored as fp32). Y_q is written to out[q m .. q m + m)
 * and the butterfly works in place on out. The inverse uses the conjugate twiddles (and +i in
 * the radix-4 butterfly). Radix-4 and radix-2 butterflies are written out; radix 3 and 5 use a
 * small generic butterfly through the table. Factor order: all 4s, then 2, 3s, 5s.
 * Other lengths: direct DFT, O(n^2), accumulated in double.
 */
#include "ref/fft.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define FFT_MAX_FACTORS 64
#define FFT_PI 3.14159265358979323846

struct cosy_fft_plan {
  int32_t n;
  int fast;                    /* 1: mixed radix; 0: direct DFT */
  int nfac;
  int32_t fac[FFT_MAX_FACTORS];
  float *tw;                   /* [n][2]: exp(-2 pi i r / n) */
};

cosy_status cosy_fft_plan_create(int32_t n, cosy_fft_plan **out) {
  if (!out) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_fft_plan_create: out is NULL");
  *out = NULL;
  if (n < 1 || n > COSY_FFT_MAX_N)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_fft_plan_create: length %d outside [1, %d]",
                    (int)n, COSY_FFT_MAX_N);
  cosy_fft_plan *p = (cosy_fft_plan *)cosy_calloc(1, sizeof *p);
  if (!p) return COSY_ERR_NO_MEMORY;
  p->n = n;
  p->tw = (float *)cosy_malloc((size_t)n * 2 * sizeof(float));
  if (!p->tw) {
    free(p);
    return COSY_ERR_NO_MEMORY;
  }
  for (int32_t r = 0; r < n; r++) {
    double a = -2.0 * FFT_PI * (double)r / (double)n;
    p->tw[2 * r] = (float)cos(a);
    p->tw[2 * r + 1] = (float)sin(a);
  }
  /* factor into 4, 2, 3, 5 */
  int32_t rest = n;
  while (rest % 4 == 0) { p->fac[p->nfac++] = 4; rest /= 4; }
  while (rest % 2 == 0) { p->fac[p->nfac++] = 2; rest /= 2; }
  while (rest % 3 == 0) { p->fac[p->nfac++] = 3; rest /= 3; }
  while (rest % 5 == 0) { p->fac[p->nfac++] = 5; rest /= 5; }
  p->fast = (rest == 1 && n > 1);
  *out = p;
  return COSY_OK;
}

void cosy_fft_plan_free(cosy_fft_plan *p) {
  if (!p) return;
  free(p->tw);
  free(p);
}

int32_t cosy_fft_plan_size(const cosy_fft_plan *p) { return p ? p->n : 0; }
int cosy_fft_plan_is_fast(const cosy_fft_plan *p) { return p ? p->fast : 0; }

/* twiddle W_n^r (conjugated when inverse) */
static inline void tw_get(const cosy_fft_plan *p, int64_t r, int inverse, float *wr, float *wi) {
  *wr = p->tw[2 * r];
  *wi = inverse ? -p->tw[2 * r + 1] : p->tw[2 * r + 1];
}

/* out[0 .. 2L) = DFT_L of in[0], in[s], ... (complex elements, stride s in elements). fac points
 * at this level's radix; tws = n / L (twiddle table stride). */
static void fft_rec(const cosy_fft_plan *p, float *out, const float *in, int64_t s,
                    const int32_t *fac, int64_t L, int inverse) {
  const int32_t r = fac[0];
  const int64_t m = L / r;
  const int64_t tws = p->n / L;
  if (m == 1) {
    for (int32_t q = 0; q < r; q++) {
      out[2 * q] = in[2 * q * s];
      out[2 * q + 1] = in[2 * q * s + 1];
    }
  } else {
    for (int32_t q = 0; q < r; q++) fft_rec(p, out + 2 * q * m, in + 2 * q * s, s * r, fac + 1, m,
                                            inverse);
  }

  for (int64_t k = 0; k < m; k++) {
    /* a_q = out[q m + k] * W_L^{q k} */
    float ar[5], ai[5];
    for (int32_t q = 0; q < r; q++) {
      float xr = out[2 * (q * m + k)], xi = out[2 * (q * m + k) + 1];
      if (q == 0 || k == 0) {
        ar[q] = xr;
        ai[q] = xi;
      } else {
        float wr, wi;
        tw_get(p, (int64_t)q * k * tws, inverse, &wr, &wi);
        ar[q] = xr * wr - xi * wi;
        ai[q] = xr * wi + xi * wr;
      }
    }
    if (r == 2) {
      out[2 * k] = ar[0] + ar[1];
      out[2 * k + 1] = ai[0] + ai[1];
      out[2 * (m + k)] = ar[0] - ar[1];
      out[2 * (m + k) + 1] = ai[0] - ai[1];
    } else if (r == 4) {
      /* forward: W_4 = -i; y1 = a0 - i a1 - a2 + i a3, y3 = a0 + i a1 - a2 - i a3 */
      float s02r = ar[0] + ar[2], s02i = ai[0] + ai[2];
      float d02r = ar[0] - ar[2], d02i = ai[0] - ai[2];
      float s13r = ar[1] + ar[3], s13i = ai[1] + ai[3];
      float d13r = ar[1] - ar[3], d13i = ai[1] - ai[3];
      /* -i * d13 = (d13i, -d13r); +i * d13 = (-d13i, d13r) */
      float jr = inverse ? -d13i : d13i, ji = inverse ? d13r : -d13r;
      out[2 * k] = s02r + s13r;
      out[2 * k + 1] = s02i + s13i;
      out[2 * (m + k)] = d02r + jr;
      out[2 * (m + k) + 1] = d02i + ji;
      out[2 * (2 * m + k)] = s02r - s13r;
      out[2 * (2 * m + k) + 1] = s02i - s13i;
      out[2 * (3 * m + k)] = d02r - jr;
      out[2 * (3 * m + k) + 1] = d02i - ji;
    } else {
      /* radix 3 or 5: y_t = sum_q a_q W_r^{q t}, W_r^j = W_n^{j n / r} */
      const int64_t base = p->n / r;
      for (int32_t t = 0; t < r; t++) {
        float yr = ar[0], yi = ai[0];
        for (int32_t q = 1; q < r; q++) {
          float wr, wi;
          tw_get(p, (int64_t)((q * t) % r) * base, inverse, &wr, &wi);
          yr += ar[q] * wr - ai[q] * wi;
          yi += ar[q] * wi + ai[q] * wr;
        }
        out[2 * (t * m + k)] = yr;
        out[2 * (t * m + k) + 1] = yi;
      }
    }
  }
}

cosy_status cosy_fft_exec(const cosy_fft_plan *p, const float *in, float *out, int inverse) {
  if (!p || !in || !out) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_fft_exec: NULL argument");
  const int64_t n = p->n;
  uintptr_t ib = (uintptr_t)in, ob = (uintptr_t)out, bytes = (uintptr_t)(2 * n * sizeof(float));
  if (ib < ob + bytes && ob < ib + bytes)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_fft_exec: in and out overlap");
  if (n == 1) {
    out[0] = in[0];
    out[1] = in[1];
    return COSY_OK;
  }
  if (p->fast) {
    fft_rec(p, out, in, 1, p->fac, n, inverse);
    return COSY_OK;
  }
  for (int64_t k = 0; k < n; k++) {
    double sr = 0.0, si = 0.0;
    for (int64_t j = 0; j < n; j++) {
      float wr, wi;
      tw_get(p, (j * k) % n, inverse, &wr, &wi);
      double xr = in[2 * j], xi = in[2 * j + 1];
      sr += xr * wr - xi * wi;
      si += xr * wi + xi * wr;
    }
    out[2 * k] = (float)sr;
    out[2 * k + 1] = (float)si;
  }
  return COSY_OK;
}
