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

/* ============================================================================ real transform */

#define RFFT_MAX_STAGES 40

typedef struct rstage {
  int p;         /* radix */
  int32_t mm, s; /* sub-length L / p, stride (product of the earlier radices) */
  float *tw;     /* [mm][p - 1][2]: W_L^{j t}, j < mm, t = 1 .. p-1, L = p mm */
} rstage;

struct cosy_rfft_plan {
  int32_t n, m; /* n reals, m = n / 2 complex */
  int nst;
  rstage st[RFFT_MAX_STAGES];
  float *post;                /* [m][2]: W_n^k, k < m */
  cosy_fft_plan *cplx;        /* fallback when m is not 2-, 3-, 5-smooth */
};

void cosy_rfft_plan_free(cosy_rfft_plan *p) {
  if (!p) return;
  for (int i = 0; i < p->nst; i++) free(p->st[i].tw);
  free(p->post);
  cosy_fft_plan_free(p->cplx);
  free(p);
}

int64_t cosy_rfft_scratch_floats(const cosy_rfft_plan *p) {
  return p ? (p->cplx ? 4 : 2) * (int64_t)p->n : 0;
}

cosy_status cosy_rfft_plan_create(int32_t n, cosy_rfft_plan **out) {
  if (!out) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_rfft_plan_create: out is NULL");
  *out = NULL;
  if (n < 2 || n > COSY_FFT_MAX_N || (n & 1))
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_rfft_plan_create: length %d is not even or outside [2, %d]", (int)n,
                    COSY_FFT_MAX_N);
  cosy_rfft_plan *p = (cosy_rfft_plan *)cosy_calloc(1, sizeof *p);
  if (!p) return COSY_ERR_NO_MEMORY;
  p->n = n;
  p->m = n / 2;
  int32_t fac[RFFT_MAX_STAGES], nf = 0, rest = p->m;
  while (rest % 4 == 0) { fac[nf++] = 4; rest /= 4; }
  while (rest % 2 == 0) { fac[nf++] = 2; rest /= 2; }
  while (rest % 3 == 0) { fac[nf++] = 3; rest /= 3; }
  while (rest % 5 == 0) { fac[nf++] = 5; rest /= 5; }
  cosy_status st = COSY_OK;
  if (rest != 1) { /* another prime: the complex plan on all n points */
    if ((st = cosy_fft_plan_create(n, &p->cplx))) goto fail;
    *out = p;
    return COSY_OK;
  }
  p->post = (float *)cosy_malloc((size_t)p->m * 2 * sizeof(float));
  if (!p->post) { st = COSY_ERR_NO_MEMORY; goto fail; }
  for (int32_t k = 0; k < p->m; k++) {
    double a = -2.0 * FFT_PI * (double)k / (double)n;
    p->post[2 * k] = (float)cos(a);
    p->post[2 * k + 1] = (float)sin(a);
  }
  int32_t L = p->m, s = 1;
  for (int i = 0; i < nf; i++) {
    rstage *g = &p->st[p->nst];
    g->p = fac[i];
    g->mm = L / fac[i];
    g->s = s;
    g->tw = (float *)cosy_malloc((size_t)g->mm * (size_t)(g->p - 1) * 2 * sizeof(float));
    if (!g->tw) { st = COSY_ERR_NO_MEMORY; goto fail; }
    p->nst++;
    for (int32_t j = 0; j < g->mm; j++)
      for (int t = 1; t < g->p; t++) {
        /* W_L^{j t}, the exponent reduced mod L first so that the angle stays exact */
        double a = -2.0 * FFT_PI * (double)(((int64_t)j * t) % L) / (double)L;
        float *w = g->tw + ((size_t)j * (g->p - 1) + (t - 1)) * 2;
        w[0] = (float)cos(a);
        w[1] = (float)sin(a);
      }
    L = g->mm;
    s *= fac[i];
  }
  *out = p;
  return COSY_OK;
fail:
  cosy_rfft_plan_free(p);
  return st;
}

/* One Stockham DIF stage (see fft.h): for j < mm, q < s,
 *   a_r = src[q + s (j + r mm)],  b_t = sum_r a_r W_p^{r t},  dst[q + s (p j + t)] = b_t W_L^{j t}
 * complex elements interleaved (re, im). */
#define CMUL_STORE(o, br, bi, w)                     \
  do {                                               \
    (o)[0] = (br) * (w)[0] - (bi) * (w)[1];          \
    (o)[1] = (br) * (w)[1] + (bi) * (w)[0];          \
  } while (0)

static void rstage_run(const rstage *g, const float *restrict src, float *restrict dst) {
  const int32_t mm = g->mm, s = g->s;
  const size_t rs = 2 * (size_t)s * (size_t)mm; /* float step between the a_r */
  switch (g->p) {
    case 4:
      for (int32_t j = 0; j < mm; j++) {
        const float *w = g->tw + (size_t)j * 6;
        for (int32_t q = 0; q < s; q++) {
          const float *a = src + 2 * ((size_t)q + (size_t)s * j);
          float *o = dst + 2 * ((size_t)q + (size_t)s * 4 * j);
          const float a0r = a[0], a0i = a[1], a1r = a[rs], a1i = a[rs + 1];
          const float a2r = a[2 * rs], a2i = a[2 * rs + 1], a3r = a[3 * rs], a3i = a[3 * rs + 1];
          const float s02r = a0r + a2r, s02i = a0i + a2i, d02r = a0r - a2r, d02i = a0i - a2i;
          const float s13r = a1r + a3r, s13i = a1i + a3i, d13r = a1r - a3r, d13i = a1i - a3i;
          /* b1 = d02 - i d13, b3 = d02 + i d13 */
          o[0] = s02r + s13r;
          o[1] = s02i + s13i;
          CMUL_STORE(o + 2 * (size_t)s, d02r + d13i, d02i - d13r, w);
          CMUL_STORE(o + 4 * (size_t)s, s02r - s13r, s02i - s13i, w + 2);
          CMUL_STORE(o + 6 * (size_t)s, d02r - d13i, d02i + d13r, w + 4);
        }
      }
      break;
    case 2:
      for (int32_t j = 0; j < mm; j++) {
        const float *w = g->tw + (size_t)j * 2;
        for (int32_t q = 0; q < s; q++) {
          const float *a = src + 2 * ((size_t)q + (size_t)s * j);
          float *o = dst + 2 * ((size_t)q + (size_t)s * 2 * j);
          const float a0r = a[0], a0i = a[1], a1r = a[rs], a1i = a[rs + 1];
          o[0] = a0r + a1r;
          o[1] = a0i + a1i;
          CMUL_STORE(o + 2 * (size_t)s, a0r - a1r, a0i - a1i, w);
        }
      }
      break;
    case 3: {
      const float c = 0.86602540378443864676f; /* sin(2 pi / 3) */
      for (int32_t j = 0; j < mm; j++) {
        const float *w = g->tw + (size_t)j * 4;
        for (int32_t q = 0; q < s; q++) {
          const float *a = src + 2 * ((size_t)q + (size_t)s * j);
          float *o = dst + 2 * ((size_t)q + (size_t)s * 3 * j);
          const float a0r = a[0], a0i = a[1], a1r = a[rs], a1i = a[rs + 1];
          const float a2r = a[2 * rs], a2i = a[2 * rs + 1];
          const float sr = a1r + a2r, si = a1i + a2i, dr = a1r - a2r, di = a1i - a2i;
          const float mr = a0r - 0.5f * sr, mi = a0i - 0.5f * si;
          /* b1 = m - i c d, b2 = m + i c d */
          o[0] = a0r + sr;
          o[1] = a0i + si;
          CMUL_STORE(o + 2 * (size_t)s, mr + c * di, mi - c * dr, w);
          CMUL_STORE(o + 4 * (size_t)s, mr - c * di, mi + c * dr, w + 2);
        }
      }
      break;
    }
    default: { /* 5 */
      const float c1 = 0.30901699437494742410f, c2 = -0.80901699437494742410f; /* cos 2pi/5, 4pi/5 */
      const float s1 = 0.95105651629515357212f, s2 = 0.58778525229247312917f; /* sin 2pi/5, 4pi/5 */
      for (int32_t j = 0; j < mm; j++) {
        const float *w = g->tw + (size_t)j * 8;
        for (int32_t q = 0; q < s; q++) {
          const float *a = src + 2 * ((size_t)q + (size_t)s * j);
          float *o = dst + 2 * ((size_t)q + (size_t)s * 5 * j);
          const float a0r = a[0], a0i = a[1], a1r = a[rs], a1i = a[rs + 1];
          const float a2r = a[2 * rs], a2i = a[2 * rs + 1], a3r = a[3 * rs], a3i = a[3 * rs + 1];
          const float a4r = a[4 * rs], a4i = a[4 * rs + 1];
          const float s14r = a1r + a4r, s14i = a1i + a4i, d14r = a1r - a4r, d14i = a1i - a4i;
          const float s23r = a2r + a3r, s23i = a2i + a3i, d23r = a2r - a3r, d23i = a2i - a3i;
          const float m1r = a0r + c1 * s14r + c2 * s23r, m1i = a0i + c1 * s14i + c2 * s23i;
          const float m2r = a0r + c2 * s14r + c1 * s23r, m2i = a0i + c2 * s14i + c1 * s23i;
          const float e1r = s1 * d14r + s2 * d23r, e1i = s1 * d14i + s2 * d23i;
          const float e2r = s2 * d14r - s1 * d23r, e2i = s2 * d14i - s1 * d23i;
          /* b1 = m1 - i e1, b4 = m1 + i e1, b2 = m2 - i e2, b3 = m2 + i e2 */
          o[0] = a0r + s14r + s23r;
          o[1] = a0i + s14i + s23i;
          CMUL_STORE(o + 2 * (size_t)s, m1r + e1i, m1i - e1r, w);
          CMUL_STORE(o + 4 * (size_t)s, m2r + e2i, m2i - e2r, w + 2);
          CMUL_STORE(o + 6 * (size_t)s, m2r - e2i, m2i + e2r, w + 4);
          CMUL_STORE(o + 8 * (size_t)s, m1r - e1i, m1i + e1r, w + 6);
        }
      }
      break;
    }
  }
}

void cosy_rfft_exec(const cosy_rfft_plan *p, const float *x, float *out, float *scratch) {
  const int32_t m = p->m;
  if (p->cplx) { /* fallback: complex transform of (x, 0), all n bins into scratch */
    float *in = scratch, *full = scratch + 2 * (size_t)p->n;
    for (int32_t j = 0; j < p->n; j++) in[2 * j] = x[j], in[2 * j + 1] = 0.0f;
    cosy_fft_exec(p->cplx, in, full, 0);
    memcpy(out, full, (size_t)(m + 1) * 2 * sizeof(float));
    out[1] = out[2 * (size_t)m + 1] = 0.0f; /* DC and Nyquist of real input are real */
    return;
  }
  float *b0 = scratch, *b1 = scratch + 2 * (size_t)m;
  const float *src = x; /* x[2j], x[2j+1] = z[j] */
  float *dst = b0;
  if (p->nst == 0) {
    memcpy(b0, x, 2 * (size_t)m * sizeof(float));
    src = b0;
  }
  for (int i = 0; i < p->nst; i++) {
    rstage_run(&p->st[i], src, dst);
    src = dst;
    dst = dst == b0 ? b1 : b0;
  }
  const float *Z = src;
  /* X[0] and X[m] from Z[0]: E = Re Z0, O = Im Z0 */
  const float z0r = Z[0], z0i = Z[1];
  out[0] = z0r + z0i;
  out[1] = 0.0f;
  out[2 * (size_t)m] = z0r - z0i;
  out[2 * (size_t)m + 1] = 0.0f;
  for (int32_t k = 1; k < m; k++) {
    const float zr = Z[2 * k], zi = Z[2 * k + 1];
    const float cr = Z[2 * (m - k)], ci = -Z[2 * (m - k) + 1]; /* conj Z[m - k] */
    const float er = 0.5f * (zr + cr), ei = 0.5f * (zi + ci);
    const float dr = 0.5f * (zr - cr), di = 0.5f * (zi - ci);
    const float or_ = di, oi = -dr; /* O = -i d */
    const float wr = p->post[2 * k], wi = p->post[2 * k + 1];
    out[2 * k] = er + or_ * wr - oi * wi;
    out[2 * k + 1] = ei + or_ * wi + oi * wr;
  }
}
