/* hift.c - CPU reference of CausalHiFTGenerator.inference (docs/model.md section 8). See hift.h for the
 * interface, lengths and the default noise generator.
 *
 * Math (channels-first [C][T] rows everywhere; "conv" = PyTorch Conv1d, no padding of its own):
 *
 *  F0 predictor (all fp64, the weights widened from the file's fp32):
 *    h = ELU(conv0(mel ++ 3 right frames))    conv0: 80->Cc, k4; the 3 right frames are zeros when
 *                                             finalize, else the last 3 mel frames are context only
 *    h = ELU(conv_j(0,0 ++ h)), j = 2,4,6,8  Cc->Cc, k3, 2 zeros on the left
 *    f0 = |classifier . h + b|                -> rounded to fp32
 *
 *  Source (SineGen2 causal, eval; fp32 like the reference, sample i in frame k = i / 480):
 *    fn_h  = f0[k] * (h+1)                    h = 0..nb
 *    rad_h(i) = (fn_h / 24000) mod 1  (+ rand_ini[h] at i == 0)
 *    radd_h[k] = 0.5 rad_h(480k+239) + 0.5 rad_h(480k+240)   (F.interpolate linear, x1/480,
 *                align_corners=False: both taps lie in frame k, so radd = rad of frame k and
 *                rand_ini, which only touches sample 0, never reaches the output)
 *    ph_h[k] = fp32(sum_{j<=k} radd_h[j]) * 2 * pi * 480   (torch's CPU cumsum accumulates fp32
 *                input in double and rounds each output to fp32; then fp32 multiplies in that order)
 *    sine_h(i) = 0.1 * sin(ph_h[k])           (nearest upsampling: constant within a frame)
 *    uv = f0[k] > 10;  noise_amp = uv ? 0.003 : 0.1/3
 *    x_h(i) = sine_h(i) * uv + noise_amp * U[i][h]         (U uniform [0,1): sine_waves buffer)
 *    s(i) = tanh(l_linear . x(i) + b)
 *    The constants are the model's nsf_alpha (0.1), nsf_sigma (0.003), voiced_threshold (10).
 *
 *  Decode (fp32; accumulations of the small STFT/iSTFT in double):
 *    S = STFT(s) = [re; im] [18][F]: n_fft 16, hop 4, periodic Hann (fp32 values), center=True
 *        with reflect padding of 8, onesided; F = len(s)/4 + 1
 *    x = conv_pre(mel ++ 4 right frames)      80->C, k5; zeros when finalize, else the last 4 of
 *                                             the T-3 frames are context (-> T-7 frames) and S
 *                                             drops its last 480 frames
 *    stage i = 0,1,2 (rates r = 8,5,3, kernels k = 16,11,7, channels c -> c/2):
 *      x = conv_up(zeros(k-1) ++ repeat_each(leaky_relu(x, 0.1), r))
 *      if i == 2: x = [x[1], x...]           (ReflectionPad1d((1,0)) -> 120 T + 1 frames)
 *      x += ResBlock_src_i(conv_down_i(zeros(sd-1) ++ S, stride sd))   sd = 15, 3, 1 ; k = 2 sd or 1
 *      x = (RB_3i(x) + RB_3i+1(x) + RB_3i+2(x)) / 3
 *    ResBlock(k, dilations d = 1,3,5): for each d: x += conv2(0^(k-1) ++ snake2(conv1_d(0^((k-1)d)
 *      ++ snake1(x))))    snake(v) = v + 1/(alpha + 1e-9) * sin(alpha v)^2, alpha per channel
 *    x = conv_post(zeros(6) ++ leaky_relu(x, 0.01))    64->18, k7
 *    mag = min(exp(x[0:9]), 100); ph = sin(x[9:18]); X = mag cos(ph) + i mag sin(ph)
 *    y = ISTFT(X): per frame irfft (imaginary parts of DC and Nyquist ignored, 1/16 scale) times
 *        the window, overlap-add with hop 4, divided by the overlap-added squared window, the
 *        first 8 samples dropped, length 4 (F-1) = 480 T' (T' = T or T-7)
 *    non-final: drop the last 480 samples; then clamp to +-audio_limit.
 *
 * Choices: nearest upsampling uses integer division (torch computes floor(i * fp32(1/r)), which
 * equals i / r for r = 8, 5, 3, 480 over any length reachable here, checked up to 7.2M); the
 * convolutions are direct (no im2col), blocked over 4 output channels and 64 time steps with the
 * time loop innermost. */
#include "ref/hift.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h" /* cosy_splitmix64, shared with kernels/source.cu */
#include "hot.h"
#include "util.h"

#define HIFT_PI 3.14159265358979323846
#define HIFT_MAX_FRAMES 2000000 /* ~11 hours; far beyond any real call */
#define N_STAGES 3
#define N_DIL 3

typedef struct conv_f { float *w, *b; int co, ci, k; } conv_f;   /* w [co][ci][k] */
typedef struct conv_d { double *w, *b; int co, ci, k; } conv_d;  /* fp64 copy */

typedef struct resblock {
  conv_f c1[N_DIL], c2[N_DIL];
  float *a1[N_DIL], *a2[N_DIL]; /* snake alphas [ch] */
  int k;
} resblock;

struct ref_hift {
  int C, Cc, nb, mel, n_fft, hop, look_right, frame_samples, n_bins;
  int up_rates[N_STAGES], down_stride[N_STAGES], dil[N_DIL];
  float sine_amp, noise_std, voiced_thr, lrelu, audio_limit;
  int sample_rate;
  conv_d cond[5];
  double *cls_w, cls_b;
  float *lin_w, lin_b;
  conv_f conv_pre, ups[N_STAGES], downs[N_STAGES], conv_post;
  resblock srb[N_STAGES], rb[3 * N_STAGES];
};

/* ---- weights -------------------------------------------------------------------------------- */


static cosy_status load_conv(const cosy_model *m, conv_f *c, int co, int ci, int k,
                             const char *base) {
  c->co = co, c->ci = ci, c->k = k;
  /* cosy_model_get_f32 tells a missing tensor (COSY_ERR_MODEL_FORMAT) from an allocation that
   * failed (COSY_ERR_NO_MEMORY); cosy_model_f32's NULL does not */
  cosy_status st = cosy_model_get_f32(m, &c->w, "%s.weight", base);
  if (!st) st = cosy_model_get_f32(m, &c->b, "%s.bias", base);
  return st;
}

static cosy_status load_conv_d(const cosy_model *m, conv_d *c, int co, int ci, int k,
                               const char *base) {
  conv_f f = {0};
  cosy_status st = load_conv(m, &f, co, ci, k, base);
  if (st == COSY_OK) {
    size_t nw = (size_t)co * ci * k;
    c->co = co, c->ci = ci, c->k = k;
    c->w = cosy_malloc(nw * sizeof(double));
    c->b = cosy_malloc((size_t)co * sizeof(double));
    if (!c->w || !c->b) st = COSY_ERR_NO_MEMORY;
    else {
      for (size_t i = 0; i < nw; i++) c->w[i] = f.w[i];
      for (int i = 0; i < co; i++) c->b[i] = f.b[i];
    }
  }
  free(f.w);
  free(f.b);
  return st;
}

static cosy_status load_resblock(const cosy_model *m, resblock *r, int ch, int k, const char *pfx,
                                 int idx) {
  char base[128];
  cosy_status st;
  r->k = k;
  for (int j = 0; j < N_DIL; j++) {
    snprintf(base, sizeof base, "hift.%s.%d.convs1.%d", pfx, idx, j);
    if ((st = load_conv(m, &r->c1[j], ch, ch, k, base))) return st;
    snprintf(base, sizeof base, "hift.%s.%d.convs2.%d", pfx, idx, j);
    if ((st = load_conv(m, &r->c2[j], ch, ch, k, base))) return st;
    if ((st = cosy_model_get_f32(m, &r->a1[j], "hift.%s.%d.activations1.%d.alpha", pfx, idx, j)))
      return st;
    if ((st = cosy_model_get_f32(m, &r->a2[j], "hift.%s.%d.activations2.%d.alpha", pfx, idx, j)))
      return st;
  }
  return COSY_OK;
}

static void free_conv(conv_f *c) { free(c->w), free(c->b); }

static void free_resblock(resblock *r) {
  for (int j = 0; j < N_DIL; j++) {
    free_conv(&r->c1[j]), free_conv(&r->c2[j]);
    free(r->a1[j]), free(r->a2[j]);
  }
}

void ref_hift_free(ref_hift *h) {
  if (!h) return;
  for (int i = 0; i < 5; i++) free(h->cond[i].w), free(h->cond[i].b);
  free(h->cls_w);
  free(h->lin_w);
  free_conv(&h->conv_pre);
  free_conv(&h->conv_post);
  for (int i = 0; i < N_STAGES; i++) {
    free_conv(&h->ups[i]), free_conv(&h->downs[i]);
    free_resblock(&h->srb[i]);
  }
  for (int i = 0; i < 3 * N_STAGES; i++) free_resblock(&h->rb[i]);
  free(h);
}

cosy_status ref_hift_create(const cosy_model *m, ref_hift **out) {
  if (!out) return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_create: out is NULL");
  *out = NULL;
  if (!m) return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_create: model is NULL");
  const cosy_hparams *hp = &m->hp;
  if (hp->n_fft != 16 || hp->hop != 4 || hp->conv_pre_look_right != 4 || hp->mel_dim <= 0 ||
      hp->hift_ch % 8 || hp->hift_ch <= 0 || hp->hift_cond_ch <= 0 || hp->nb_harmonics < 0 ||
      hp->up_rates[0] * hp->up_rates[1] * hp->up_rates[2] * hp->hop != 480)
    return cosy_err(COSY_ERR_MODEL_FORMAT,
                    "ref_hift_create: unsupported HiFT geometry (n_fft %d, hop %d, look-right %d, "
                    "channels %d, rates %d,%d,%d)",
                    hp->n_fft, hp->hop, hp->conv_pre_look_right, hp->hift_ch, hp->up_rates[0],
                    hp->up_rates[1], hp->up_rates[2]);
  ref_hift *h = cosy_calloc(1, sizeof *h);
  if (!h) return COSY_ERR_NO_MEMORY;
  cosy_status st = COSY_OK;
  char base[128];
  h->C = hp->hift_ch, h->Cc = hp->hift_cond_ch, h->nb = hp->nb_harmonics, h->mel = hp->mel_dim;
  h->n_fft = hp->n_fft, h->hop = hp->hop, h->look_right = hp->conv_pre_look_right;
  h->n_bins = hp->n_fft / 2 + 1;
  h->frame_samples = hp->up_rates[0] * hp->up_rates[1] * hp->up_rates[2] * hp->hop;
  h->sine_amp = hp->nsf_alpha, h->noise_std = hp->nsf_sigma, h->voiced_thr = hp->voiced_threshold;
  h->lrelu = hp->lrelu_slope, h->audio_limit = hp->audio_limit, h->sample_rate = hp->sample_rate;
  for (int j = 0; j < N_DIL; j++) h->dil[j] = hp->rb_dilations[j];

  /* F0 predictor */
  if ((st = load_conv_d(m, &h->cond[0], h->Cc, h->mel, 4, "hift.f0_predictor.condnet.0"))) goto fail;
  for (int j = 1; j < 5; j++) {
    snprintf(base, sizeof base, "hift.f0_predictor.condnet.%d", 2 * j);
    if ((st = load_conv_d(m, &h->cond[j], h->Cc, h->Cc, 3, base))) goto fail;
  }
  {
    float *w = NULL, *b = NULL;
    st = cosy_model_get_f32(m, &w, "hift.f0_predictor.classifier.weight");
    if (!st) st = cosy_model_get_f32(m, &b, "hift.f0_predictor.classifier.bias");
    if (!st && !(h->cls_w = cosy_malloc((size_t)h->Cc * sizeof(double)))) st = COSY_ERR_NO_MEMORY;
    if (!st) {
      for (int c = 0; c < h->Cc; c++) h->cls_w[c] = w[c];
      h->cls_b = b[0];
    }
    free(w), free(b);
    if (st) goto fail;
  }
  /* source */
  {
    float *b = NULL;
    st = cosy_model_get_f32(m, &b, "hift.m_source.l_linear.bias");
    if (!st) st = cosy_model_get_f32(m, &h->lin_w, "hift.m_source.l_linear.weight");
    if (st) {
      free(b);
      goto fail;
    }
    h->lin_b = b[0];
    free(b);
  }
  /* decoder */
  if ((st = load_conv(m, &h->conv_pre, h->C, h->mel, h->look_right + 1, "hift.conv_pre"))) goto fail;
  int ch = h->C;
  for (int i = 0; i < N_STAGES; i++) {
    int co = ch / 2, sd = 1;
    for (int j = i + 1; j < N_STAGES; j++) sd *= hp->up_rates[j];
    h->up_rates[i] = hp->up_rates[i];
    h->down_stride[i] = sd;
    snprintf(base, sizeof base, "hift.ups.%d", i);
    if ((st = load_conv(m, &h->ups[i], co, ch, hp->up_kernels[i], base))) goto fail;
    snprintf(base, sizeof base, "hift.source_downs.%d", i);
    if ((st = load_conv(m, &h->downs[i], co, 2 * h->n_bins, sd == 1 ? 1 : 2 * sd, base))) goto fail;
    if ((st = load_resblock(m, &h->srb[i], co, hp->src_rb_kernels[i], "source_resblocks", i)))
      goto fail;
    for (int r = 0; r < 3; r++)
      if ((st = load_resblock(m, &h->rb[3 * i + r], co, hp->rb_kernels[r], "resblocks", 3 * i + r)))
        goto fail;
    ch = co;
  }
  if ((st = load_conv(m, &h->conv_post, 2 * h->n_bins, ch, 7, "hift.conv_post"))) goto fail;
  *out = h;
  return COSY_OK;
fail:
  ref_hift_free(h);
  return st;
}

/* ---- convolution kernels -------------------------------------------------------------------- */

#define TILE 64
#define CO_BLOCK 4

/* the weights, bias and output rows of a conv_f32 / conv_f32_strided call (lib/hot.h) */
static void san_conv(const conv_f *c, float *out, size_t old, size_t n) {
  cosy_san_weights(c->w, sizeof(float) * (size_t)c->co * c->ci * c->k);
  cosy_san_weights(c->b, sizeof(float) * (size_t)c->co);
  cosy_san_write(out, cosy_span_f32((size_t)c->co, n, old));
}

/* out[o][t] = b[o] + sum_{i,j} w[o][i][j] * in[i][t + j*dil], t in [0, n). The input rows (ld
 * floats apart) must hold n + (k-1)*dil values: callers materialize any padding. */
COSY_HOT static void conv_f32(const conv_f *c, const float *in, size_t ild, int dil, float *out,
                              size_t old, size_t n) {
  const int CI = c->ci, K = c->k;
  cosy_san_read(in, cosy_span_f32((size_t)CI, n ? n + (size_t)(K - 1) * dil : 0, ild));
  san_conv(c, out, old, n);
  for (size_t t0 = 0; t0 < n; t0 += TILE) {
    size_t nt = n - t0 < TILE ? n - t0 : TILE;
    int o = 0;
    for (; o + CO_BLOCK <= c->co; o += CO_BLOCK) {
      float acc[CO_BLOCK][TILE];
      for (int r = 0; r < CO_BLOCK; r++)
        for (int t = 0; t < TILE; t++) acc[r][t] = c->b[o + r];
      for (int i = 0; i < CI; i++)
        for (int j = 0; j < K; j++) {
          const float *x = in + (size_t)i * ild + t0 + (size_t)j * dil;
          const float w0 = c->w[((size_t)(o + 0) * CI + i) * K + j];
          const float w1 = c->w[((size_t)(o + 1) * CI + i) * K + j];
          const float w2 = c->w[((size_t)(o + 2) * CI + i) * K + j];
          const float w3 = c->w[((size_t)(o + 3) * CI + i) * K + j];
          if (nt == TILE) { /* fixed trip count: vectorizes at -O2 */
            for (int t = 0; t < TILE; t++) {
              float v = x[t];
              acc[0][t] += w0 * v, acc[1][t] += w1 * v, acc[2][t] += w2 * v, acc[3][t] += w3 * v;
            }
          } else {
            for (size_t t = 0; t < nt; t++) {
              float v = x[t];
              acc[0][t] += w0 * v, acc[1][t] += w1 * v, acc[2][t] += w2 * v, acc[3][t] += w3 * v;
            }
          }
        }
      for (int r = 0; r < CO_BLOCK; r++) memcpy(out + (size_t)(o + r) * old + t0, acc[r], nt * 4);
    }
    for (; o < c->co; o++) {
      float acc[TILE];
      for (size_t t = 0; t < nt; t++) acc[t] = c->b[o];
      for (int i = 0; i < CI; i++)
        for (int j = 0; j < K; j++) {
          const float *x = in + (size_t)i * ild + t0 + (size_t)j * dil;
          const float w = c->w[((size_t)o * CI + i) * K + j];
          for (size_t t = 0; t < nt; t++) acc[t] += w * x[t];
        }
      memcpy(out + (size_t)o * old + t0, acc, nt * 4);
    }
  }
}

/* Strided variant (source_downs only: 18 input channels): out[o][t] = b[o] +
 * sum_{i,j} w[o][i][j] * in[i][t*stride + j]. */
COSY_HOT static void conv_f32_strided(const conv_f *c, const float *in, size_t ild, int stride,
                                      float *out, size_t old, size_t n) {
  const int CI = c->ci, K = c->k;
  cosy_san_read(in, cosy_span_f32((size_t)CI, n ? (n - 1) * (size_t)stride + K : 0, ild));
  san_conv(c, out, old, n);
  for (int o = 0; o < c->co; o++)
    for (size_t t = 0; t < n; t++) {
      float acc = c->b[o];
      for (int i = 0; i < CI; i++) {
        const float *x = in + (size_t)i * ild + t * (size_t)stride;
        const float *w = c->w + ((size_t)o * CI + i) * K;
        for (int j = 0; j < K; j++) acc += w[j] * x[j];
      }
      out[(size_t)o * old + t] = acc;
    }
}

/* fp64 version of conv_f32 (F0 predictor), dilation 1. */
static void conv_f64(const conv_d *c, const double *in, size_t ild, double *out, size_t old,
                     size_t n) {
  const int CI = c->ci, K = c->k;
  for (size_t t0 = 0; t0 < n; t0 += TILE) {
    size_t nt = n - t0 < TILE ? n - t0 : TILE;
    int o = 0;
    for (; o + CO_BLOCK <= c->co; o += CO_BLOCK) {
      double acc[CO_BLOCK][TILE];
      for (int r = 0; r < CO_BLOCK; r++)
        for (int t = 0; t < TILE; t++) acc[r][t] = c->b[o + r];
      for (int i = 0; i < CI; i++)
        for (int j = 0; j < K; j++) {
          const double *x = in + (size_t)i * ild + t0 + (size_t)j;
          const double w0 = c->w[((size_t)(o + 0) * CI + i) * K + j];
          const double w1 = c->w[((size_t)(o + 1) * CI + i) * K + j];
          const double w2 = c->w[((size_t)(o + 2) * CI + i) * K + j];
          const double w3 = c->w[((size_t)(o + 3) * CI + i) * K + j];
          if (nt == TILE) {
            for (int t = 0; t < TILE; t++) {
              double v = x[t];
              acc[0][t] += w0 * v, acc[1][t] += w1 * v, acc[2][t] += w2 * v, acc[3][t] += w3 * v;
            }
          } else {
            for (size_t t = 0; t < nt; t++) {
              double v = x[t];
              acc[0][t] += w0 * v, acc[1][t] += w1 * v, acc[2][t] += w2 * v, acc[3][t] += w3 * v;
            }
          }
        }
      for (int r = 0; r < CO_BLOCK; r++)
        memcpy(out + (size_t)(o + r) * old + t0, acc[r], nt * sizeof(double));
    }
    for (; o < c->co; o++) {
      double acc[TILE];
      for (size_t t = 0; t < nt; t++) acc[t] = c->b[o];
      for (int i = 0; i < CI; i++)
        for (int j = 0; j < K; j++) {
          const double *x = in + (size_t)i * ild + t0 + (size_t)j;
          const double w = c->w[((size_t)o * CI + i) * K + j];
          for (size_t t = 0; t < nt; t++) acc[t] += w * x[t];
        }
      memcpy(out + (size_t)o * old + t0, acc, nt * sizeof(double));
    }
  }
}

/* ---- argument checks -------------------------------------------------------------------------- */

static int cancelled(const volatile int *cancel) { return cancel && *cancel; }

static cosy_status check_T(const char *fn, int T, int finalize, int min_nonfinal) {
  int lo = finalize ? 1 : min_nonfinal;
  if (T < lo || T > HIFT_MAX_FRAMES)
    return cosy_err(COSY_ERR_INVALID_ARG, "%s: T = %d mel frames out of range [%d, %d] (%s)", fn, T,
                    lo, HIFT_MAX_FRAMES, finalize ? "final" : "non-final");
  return COSY_OK;
}

/* ---- F0 predictor ------------------------------------------------------------------------------ */

static double elu(double x) { return x > 0 ? x : expm1(x); }

cosy_status ref_hift_f0(const ref_hift *h, const float *mel, int T, int finalize, float *f0) {
  if (!h || !mel || !f0)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_f0: NULL %s",
                    !h ? "model" : !mel ? "mel" : "f0");
  cosy_status st = check_T("ref_hift_f0", T, finalize, 4);
  if (st) return st;
  const int M = h->mel, Cc = h->Cc, P = 2;
  const size_t Tf = finalize ? (size_t)T : (size_t)T - 3; /* output frames */
  const size_t ld0 = Tf + 3, ld = Tf + P;
  double *x0 = cosy_malloc((size_t)M * ld0 * sizeof(double));
  double *a = cosy_calloc((size_t)Cc * ld, sizeof(double));
  double *b = cosy_calloc((size_t)Cc * ld, sizeof(double));
  if (!x0 || !a || !b) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  /* condnet.0: the mel followed by 3 right frames (zeros, or the context frames of mel) */
  for (int c = 0; c < M; c++) {
    double *row = x0 + (size_t)c * ld0;
    for (size_t t = 0; t < ld0; t++) row[t] = t < (size_t)T ? mel[(size_t)c * T + t] : 0.0;
  }
  /* a and b keep their 2 leading zero columns: each layer writes behind them */
  conv_f64(&h->cond[0], x0, ld0, a + P, ld, Tf);
  for (size_t i = 0; i < (size_t)Cc * ld; i++) a[i] = elu(a[i]); /* elu(0) = 0 keeps the pad */
  for (int j = 1; j < 5; j++) {
    conv_f64(&h->cond[j], a, ld, b + P, ld, Tf);
    for (int c = 0; c < Cc; c++)
      for (size_t t = 0; t < Tf; t++) b[(size_t)c * ld + P + t] = elu(b[(size_t)c * ld + P + t]);
    double *tmp = a;
    a = b, b = tmp;
  }
  for (size_t t = 0; t < Tf; t++) {
    double acc = h->cls_b;
    for (int c = 0; c < Cc; c++) acc += h->cls_w[c] * a[(size_t)c * ld + P + t];
    f0[t] = (float)fabs(acc);
  }
done:
  free(x0), free(a), free(b);
  return st;
}

/* ---- noise generator and source ---------------------------------------------------------------- */

#define NOISE_KEY_ROWS 0x5EED51AE00000000ull
#define NOISE_KEY_INI 0x5EED1A1700000000ull

static float u24(uint64_t x) {
  return (float)(cosy_splitmix64(x) >> 40) * (1.0f / 16777216.0f);
}

void ref_hift_default_noise(int nb, int64_t first_row, int64_t n_rows, float *rand_ini,
                            float *rows) {
  if (nb < 0 || first_row < 0 || n_rows < 0) return;
  const uint64_t nh = (uint64_t)nb + 1;
  if (rand_ini) {
    rand_ini[0] = 0.0f;
    for (int k = 1; k <= nb; k++) rand_ini[k] = u24(NOISE_KEY_INI ^ (uint64_t)k);
  }
  if (rows)
    for (int64_t r = 0; r < n_rows; r++)
      for (uint64_t k = 0; k < nh; k++)
        rows[(uint64_t)r * nh + k] = u24(NOISE_KEY_ROWS ^ ((uint64_t)(first_row + r) * nh + k));
}

/* Frames [k0, k0 + n) of the source: f0 [n] holds their f0, s [n R] gets their samples. cum [nh]:
 * the fp64 phase running sums after frame k0 - 1 (zeros when k0 = 0), updated to those after
 * frame k0 + n - 1. The sample indices (noise rows, the rand_ini taps) are absolute, so any split
 * of the frames into calls gives the same samples bit for bit. noise: rows are absolute too. */
static cosy_status source_frames(const ref_hift *h, const float *f0, int64_t k0, int n,
                                 const ref_hift_noise *noise, double *cum, float *s) {
  const int nh = h->nb + 1, R = h->frame_samples;
  float *ini = cosy_malloc((size_t)nh * sizeof(float));
  float *sine = cosy_malloc((size_t)nh * sizeof(float));
  float *row = cosy_malloc((size_t)nh * sizeof(float));
  if (!ini || !sine || !row) {
    free(ini), free(sine), free(row);
    return COSY_ERR_NO_MEMORY;
  }
  if (noise) memcpy(ini, noise->rand_ini, (size_t)nh * sizeof(float));
  else ref_hift_default_noise(h->nb, 0, 0, ini, NULL);
  const float sr = (float)h->sample_rate, pi_f = (float)HIFT_PI, up = (float)R;
  const float amp = h->sine_amp, namp_unvoiced = amp / 3.0f;
  /* the two taps of the linear x1/R downsampling of output frame k: R k + R/2 - 1 and R k + R/2 */
  for (int kk = 0; kk < n; kk++) {
    const int64_t k = k0 + kk;
    const float f = f0[kk];
    for (int hh = 0; hh < nh; hh++) {
      const float fn = f * (float)(hh + 1);
      const int64_t i0 = k * R + R / 2 - 1, i1 = i0 + 1;
      float r0 = fmodf(fn / sr, 1.0f), r1 = r0;
      if (i0 == 0) r0 += ini[hh];
      if (i1 == 0) r1 += ini[hh];
      const float radd = 0.5f * r0 + 0.5f * r1;
      cum[hh] += (double)radd;
      float ph = (float)cum[hh];
      ph = ph * 2.0f;
      ph = ph * pi_f;
      ph = ph * up;
      sine[hh] = (float)sin((double)ph) * amp;
    }
    const float uv = f > h->voiced_thr ? 1.0f : 0.0f;
    const float namp = uv > 0 ? h->noise_std : namp_unvoiced;
    for (int j = 0; j < R; j++) {
      const int64_t i = k * R + j;
      const float *u = row;
      if (noise) u = noise->sine_waves + (size_t)i * nh;
      else ref_hift_default_noise(h->nb, i, 1, NULL, row);
      double acc = h->lin_b;
      for (int hh = 0; hh < nh; hh++) {
        const float x = sine[hh] * uv + namp * u[hh];
        acc += (double)h->lin_w[hh] * x;
      }
      s[(size_t)kk * R + j] = (float)tanh((double)(float)acc);
    }
  }
  free(ini), free(sine), free(row);
  return COSY_OK;
}

cosy_status ref_hift_source(const ref_hift *h, const float *f0, int T_f0,
                            const ref_hift_noise *noise, float *s) {
  if (!h || !f0 || !s)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_source: NULL %s",
                    !h ? "model" : !f0 ? "f0" : "s");
  if (T_f0 < 1 || T_f0 > HIFT_MAX_FRAMES)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_source: T_f0 = %d out of range [1, %d]", T_f0,
                    HIFT_MAX_FRAMES);
  const int nh = h->nb + 1, R = h->frame_samples;
  const int64_t L = (int64_t)T_f0 * R;
  if (noise && (!noise->rand_ini || !noise->sine_waves || noise->n_rows < L))
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "ref_hift_source: injected noise needs rand_ini, sine_waves and >= %lld rows "
                    "(has %lld)",
                    (long long)L, (long long)noise->n_rows);
  double *cum = cosy_calloc((size_t)nh, sizeof(double));
  if (!cum) return COSY_ERR_NO_MEMORY;
  cosy_status st = source_frames(h, f0, 0, T_f0, noise, cum, s);
  free(cum);
  return st;
}

/* ---- STFT / iSTFT ------------------------------------------------------------------------------ */

static void dft_tables(double cs[16], double sn[16]) {
  for (int n = 0; n < 16; n++) cs[n] = cos(2.0 * HIFT_PI * n / 16.0), sn[n] = sin(2.0 * HIFT_PI * n / 16.0);
}

/* periodic Hann, computed in double and stored as fp32 (scipy get_window(...).astype(f32)) */
static void hann16(float w[16]) {
  for (int n = 0; n < 16; n++) w[n] = (float)(0.5 - 0.5 * cos(2.0 * HIFT_PI * n / 16.0));
}

/* re/im rows have ld floats; frames [0, F) with F <= n/4 + 1 are written. */
static void stft16(const float *s, int64_t n, float *re, float *im, size_t ld, int64_t F) {
  double cs[16], sn[16];
  float w[16];
  dft_tables(cs, sn);
  hann16(w);
  for (int64_t f = 0; f < F; f++) {
    double xw[16];
    for (int j = 0; j < 16; j++) {
      int64_t i = f * 4 + j - 8;
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
      xw[j] = (double)s[i] * w[j];
    }
    for (int k = 0; k < 9; k++) {
      double a = 0, b = 0;
      for (int j = 0; j < 16; j++) {
        a += xw[j] * cs[(k * j) & 15];
        b -= xw[j] * sn[(k * j) & 15];
      }
      re[(size_t)k * ld + f] = (float)a;
      im[(size_t)k * ld + f] = (float)b;
    }
  }
}

cosy_status ref_hift_stft(const float *s, int64_t n, float *re, float *im) {
  if (!s || !re || !im) return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_stft: NULL argument");
  if (n < 9 || n % 4 || n > (int64_t)HIFT_MAX_FRAMES * 480)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_stft: length %lld (need >= 9, multiple of 4)",
                    (long long)n);
  int64_t F = n / 4 + 1;
  stft16(s, n, re, im, (size_t)F, F);
  return COSY_OK;
}

/* X: re/im rows [9][F] (ld F) -> y [4 (F-1)] */
static cosy_status istft16(const float *re, const float *im, int64_t F, float *y) {
  double cs[16], sn[16];
  float w[16];
  dft_tables(cs, sn);
  hann16(w);
  const int64_t n_ola = 16 + 4 * (F - 1);
  double *ola = cosy_calloc((size_t)n_ola, sizeof(double));
  double *env = cosy_calloc((size_t)n_ola, sizeof(double));
  if (!ola || !env) {
    free(ola), free(env);
    return COSY_ERR_NO_MEMORY;
  }
  for (int64_t f = 0; f < F; f++) {
    double xr[9], xi[9];
    for (int k = 0; k < 9; k++) xr[k] = re[(size_t)k * F + f], xi[k] = im[(size_t)k * F + f];
    for (int j = 0; j < 16; j++) {
      double v = xr[0] + ((j & 1) ? -xr[8] : xr[8]);
      for (int k = 1; k < 8; k++) v += 2.0 * (xr[k] * cs[(k * j) & 15] - xi[k] * sn[(k * j) & 15]);
      v *= 1.0 / 16.0;
      ola[f * 4 + j] += v * w[j];
      env[f * 4 + j] += (double)w[j] * w[j];
    }
  }
  for (int64_t t = 0; t < 4 * (F - 1); t++) y[t] = (float)(ola[t + 8] / env[t + 8]);
  free(ola), free(env);
  return COSY_OK;
}

/* ---- decoder pieces -------------------------------------------------------------------------- */

static float snake(float v, float a, float inv) {
  float sv = sinf(v * a);
  return v + inv * (sv * sv);
}

/* In place on x [C][n] (ld n): the causal ResBlock. pad: scratch of C * (n + (k-1)*max_d) floats,
 * tmp: C * n floats. */
static void resblock_run(const resblock *r, const int dil[N_DIL], float *x, size_t n, float *pad,
                         float *tmp) {
  const int C = r->c1[0].co, K = r->k;
  for (int j = 0; j < N_DIL; j++) {
    /* snake1 into a buffer with (K-1)*d leading zeros, conv1 (dilation d) -> tmp */
    size_t P = (size_t)(K - 1) * dil[j], ld = n + P;
    for (int c = 0; c < C; c++) {
      float a = r->a1[j][c], inv = 1.0f / (a + 1e-9f);
      float *dst = pad + (size_t)c * ld;
      const float *src = x + (size_t)c * n;
      memset(dst, 0, P * sizeof(float));
      for (size_t t = 0; t < n; t++) dst[P + t] = snake(src[t], a, inv);
    }
    conv_f32(&r->c1[j], pad, ld, dil[j], tmp, n, n);
    /* snake2, conv2 (dilation 1) -> tmp, then x += tmp */
    P = (size_t)(K - 1), ld = n + P;
    for (int c = 0; c < C; c++) {
      float a = r->a2[j][c], inv = 1.0f / (a + 1e-9f);
      float *dst = pad + (size_t)c * ld;
      const float *src = tmp + (size_t)c * n;
      memset(dst, 0, P * sizeof(float));
      for (size_t t = 0; t < n; t++) dst[P + t] = snake(src[t], a, inv);
    }
    conv_f32(&r->c2[j], pad, ld, 1, tmp, n, n);
    for (size_t i = 0; i < (size_t)C * n; i++) x[i] = tmp[i] + x[i];
  }
}

static size_t resblock_pad_need(const resblock *r, const int dil[N_DIL], size_t n) {
  int md = 1;
  for (int j = 0; j < N_DIL; j++) md = dil[j] > md ? dil[j] : md;
  return (size_t)r->c1[0].co * (n + (size_t)(r->k - 1) * md);
}

cosy_status ref_hift_decode_ex(const ref_hift *h, const float *mel, int T, const float *s,
                               int finalize, const volatile int *cancel, ref_hift_debug *dbg,
                               float **wav, int64_t *n) {
  if (wav) *wav = NULL;
  if (n) *n = 0;
  if (!h || !mel || !s || !wav || !n)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_decode: NULL %s",
                    !h ? "model" : !mel ? "mel" : !s ? "s" : !wav ? "wav" : "n");
  cosy_status st = check_T("ref_hift_decode", T, finalize, 9);
  if (st) return st;
  const int M = h->mel, C = h->C, R = h->frame_samples, NB = h->n_bins, LR = h->look_right;
  const int ups_total = R / h->hop; /* 120 STFT frames per mel frame */
  const size_t Tm = finalize ? (size_t)T : (size_t)T - 3;        /* mel frames decoded */
  const size_t Tx = finalize ? (size_t)T : (size_t)T - 3 - LR;   /* conv_pre output frames */
  const int64_t Ls = (int64_t)Tm * R;                            /* samples of s */
  const size_t F = (size_t)ups_total * Tx + 1;                   /* STFT frames used */
  const size_t SP = (size_t)h->down_stride[0] - 1;               /* largest down-sampling pad */
  const size_t ldS = SP + F;

  float *S = NULL, *xin = NULL, *x = NULL, *y = NULL, *up = NULL, *src = NULL, *acc = NULL,
        *rbx = NULL, *pad = NULL, *tmp = NULL, *post = NULL, *Xr = NULL, *Xi = NULL, *out = NULL;
  /* scratch sizes: the largest stage */
  size_t need_up = 0, need_x = 0, need_pad = 0;
  {
    size_t len = Tx;
    int ch = C;
    for (int i = 0; i < N_STAGES; i++) {
      size_t lin = len * h->up_rates[i] + (size_t)h->ups[i].k - 1;
      size_t lout = len * h->up_rates[i] + (i == N_STAGES - 1);
      if ((size_t)ch * lin > need_up) need_up = (size_t)ch * lin;
      if ((size_t)(ch / 2) * lout > need_x) need_x = (size_t)(ch / 2) * lout;
      size_t p = resblock_pad_need(&h->srb[i], h->dil, lout);
      for (int r = 0; r < 3; r++) {
        size_t q = resblock_pad_need(&h->rb[3 * i + r], h->dil, lout);
        p = q > p ? q : p;
      }
      if (p > need_pad) need_pad = p;
      len = lout, ch /= 2;
    }
    if ((size_t)C * Tx > need_x) need_x = (size_t)C * Tx;
    if ((size_t)ch * (len + (size_t)h->conv_post.k - 1) > need_pad)
      need_pad = (size_t)ch * (len + (size_t)h->conv_post.k - 1);
  }
  S = cosy_calloc((size_t)2 * NB * ldS, sizeof(float));
  xin = cosy_malloc((size_t)M * (Tm + (finalize ? LR : 0)) * sizeof(float));
  x = cosy_malloc(need_x * sizeof(float));
  y = cosy_malloc(need_x * sizeof(float));
  up = cosy_malloc(need_up * sizeof(float));
  src = cosy_malloc(need_x * sizeof(float));
  acc = cosy_malloc(need_x * sizeof(float));
  rbx = cosy_malloc(need_x * sizeof(float));
  tmp = cosy_malloc(need_x * sizeof(float));
  pad = cosy_malloc(need_pad * sizeof(float));
  if (!S || !xin || !x || !y || !up || !src || !acc || !rbx || !tmp || !pad) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }

  /* STFT of s: rows 0..8 real, 9..17 imaginary, behind SP zero columns */
  stft16(s, Ls, S + SP, S + (size_t)NB * ldS + SP, ldS, (int64_t)F);
  if (dbg)
    for (int k = 0; k < NB; k++) {
      if (dbg->s_stft_real) memcpy(dbg->s_stft_real + k * F, S + k * ldS + SP, F * sizeof(float));
      if (dbg->s_stft_imag)
        memcpy(dbg->s_stft_imag + k * F, S + (NB + k) * ldS + SP, F * sizeof(float));
    }
  if (cancelled(cancel)) goto cancel;

  /* conv_pre: mel[:, :Tm] (+ LR zero frames when final; else its last LR frames are context) */
  {
    const size_t ld = Tm + (finalize ? LR : 0);
    for (int c = 0; c < M; c++)
      for (size_t t = 0; t < ld; t++) xin[c * ld + t] = t < Tm ? mel[(size_t)c * T + t] : 0.0f;
    conv_f32(&h->conv_pre, xin, ld, 1, x, Tx, Tx);
    if (dbg && dbg->conv_pre) memcpy(dbg->conv_pre, x, (size_t)C * Tx * sizeof(float));
  }

  size_t len = Tx;
  int ch = C;
  for (int i = 0; i < N_STAGES; i++) {
    if (cancelled(cancel)) goto cancel;
    const int r = h->up_rates[i], K = h->ups[i].k, co = ch / 2, last = i == N_STAGES - 1;
    const size_t lin = len * r + (size_t)K - 1, lout = len * r + (size_t)last;
    /* leaky_relu, nearest x r, K-1 zeros on the left */
    for (int c = 0; c < ch; c++) {
      float *dst = up + (size_t)c * lin;
      const float *srow = x + (size_t)c * len;
      memset(dst, 0, (size_t)(K - 1) * sizeof(float));
      for (size_t t = 0; t < len * r; t++) {
        float v = srow[t / r];
        dst[K - 1 + t] = v > 0 ? v : v * h->lrelu;
      }
    }
    conv_f32(&h->ups[i], up, lin, 1, y + last, lout, len * r);
    if (last) /* ReflectionPad1d((1, 0)): prepend the (original) sample 1 */
      for (int c = 0; c < co; c++) y[(size_t)c * lout] = y[(size_t)c * lout + 2];
    /* source branch: down-sample S with sd-1 zeros on the left, then its resblock */
    {
      const int sd = h->down_stride[i], kd = h->downs[i].k;
      const size_t off = SP - (size_t)(sd - 1), avail = F + (size_t)(sd - 1);
      if (avail < (size_t)kd || (avail - kd) / sd + 1 != lout) {
        st = cosy_err(COSY_ERR_INTERNAL, "ref_hift_decode: stage %d source length mismatch", i);
        goto done;
      }
      if (sd == 1) conv_f32(&h->downs[i], S + off, ldS, 1, src, lout, lout);
      else conv_f32_strided(&h->downs[i], S + off, ldS, sd, src, lout, lout);
      resblock_run(&h->srb[i], h->dil, src, lout, pad, tmp);
      for (size_t k = 0; k < (size_t)co * lout; k++) y[k] = y[k] + src[k];
    }
    /* mean of the 3 resblocks */
    for (int rr = 0; rr < 3; rr++) {
      if (cancelled(cancel)) goto cancel;
      float *dst = rr == 0 ? acc : rbx;
      memcpy(dst, y, (size_t)co * lout * sizeof(float));
      resblock_run(&h->rb[3 * i + rr], h->dil, dst, lout, pad, tmp);
      if (rr > 0)
        for (size_t k = 0; k < (size_t)co * lout; k++) acc[k] = acc[k] + rbx[k];
    }
    for (size_t k = 0; k < (size_t)co * lout; k++) x[k] = acc[k] / 3.0f;
    len = lout, ch = co;
  }
  if (cancelled(cancel)) goto cancel;

  /* leaky_relu 0.01, 6 zeros on the left, conv_post -> [18][F] */
  {
    const int K = h->conv_post.k;
    const size_t ld = len + (size_t)K - 1;
    for (int c = 0; c < ch; c++) {
      float *dst = pad + (size_t)c * ld;
      memset(dst, 0, (size_t)(K - 1) * sizeof(float));
      for (size_t t = 0; t < len; t++) {
        float v = x[(size_t)c * len + t];
        dst[K - 1 + t] = v > 0 ? v : v * 0.01f;
      }
    }
    post = cosy_malloc((size_t)2 * NB * len * sizeof(float));
    if (!post) {
      st = COSY_ERR_NO_MEMORY;
      goto done;
    }
    conv_f32(&h->conv_post, pad, ld, 1, post, len, len);
  }
  /* magnitude / phase -> complex spectrum */
  Xr = cosy_malloc((size_t)NB * F * sizeof(float));
  Xi = cosy_malloc((size_t)NB * F * sizeof(float));
  if (!Xr || !Xi) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  for (size_t k = 0; k < (size_t)NB * F; k++) {
    float mag = expf(post[k]);
    float ph = sinf(post[(size_t)NB * F + k]);
    if (dbg && dbg->magnitude) dbg->magnitude[k] = mag;
    if (dbg && dbg->phase) dbg->phase[k] = ph;
    mag = mag > 100.0f ? 100.0f : mag;
    Xr[k] = mag * cosf(ph);
    Xi[k] = mag * sinf(ph);
  }
  {
    const int64_t ny = 4 * ((int64_t)F - 1); /* = R * Tx */
    const int64_t nout = finalize ? ny : ny - R;
    out = cosy_malloc((size_t)ny * sizeof(float));
    if (!out) {
      st = COSY_ERR_NO_MEMORY;
      goto done;
    }
    if ((st = istft16(Xr, Xi, (int64_t)F, out))) goto done;
    const float lim = h->audio_limit;
    for (int64_t t = 0; t < nout; t++) out[t] = out[t] > lim ? lim : out[t] < -lim ? -lim : out[t];
    *wav = out, *n = nout;
    out = NULL;
  }
  goto done;
cancel:
  st = cosy_err(COSY_ERR_CANCELLED, "ref_hift_decode: cancelled");
done:
  free(S), free(xin), free(x), free(y), free(up), free(src), free(acc), free(rbx), free(pad),
      free(tmp), free(post), free(Xr), free(Xi), free(out);
  return st;
}

cosy_status ref_hift_decode(const ref_hift *h, const float *mel, int T, const float *s, int finalize,
                            float **wav, int64_t *n) {
  return ref_hift_decode_ex(h, mel, T, s, finalize, NULL, NULL, wav, n);
}

cosy_status ref_hift_infer(const ref_hift *h, const float *mel, int T, int finalize,
                           const ref_hift_noise *noise, const volatile int *cancel, float **wav,
                           int64_t *n) {
  if (wav) *wav = NULL;
  if (n) *n = 0;
  if (!h || !mel || !wav || !n)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_infer: NULL %s",
                    !h ? "model" : !mel ? "mel" : !wav ? "wav" : "n");
  cosy_status st = check_T("ref_hift_infer", T, finalize, 9);
  if (st) return st;
  const int Tf = finalize ? T : T - 3;
  float *f0 = cosy_malloc((size_t)Tf * sizeof(float));
  float *s = cosy_malloc((size_t)Tf * h->frame_samples * sizeof(float));
  if (!f0 || !s) st = COSY_ERR_NO_MEMORY;
  if (!st) st = ref_hift_f0(h, mel, T, finalize, f0);
  if (!st && cancelled(cancel)) st = cosy_err(COSY_ERR_CANCELLED, "ref_hift_infer: cancelled");
  if (!st) st = ref_hift_source(h, f0, Tf, noise, s);
  if (!st && cancelled(cancel)) st = cosy_err(COSY_ERR_CANCELLED, "ref_hift_infer: cancelled");
  if (!st) st = ref_hift_decode_ex(h, mel, T, s, finalize, cancel, NULL, wav, n);
  free(f0), free(s);
  return st;
}

/* ---- streaming (see hift.h for the math and the context) ------------------------------------- */

static int rb_reach(int k, const int dil[N_DIL]) { /* left reach of a causal ResBlock */
  int s = 0;
  for (int d = 0; d < N_DIL; d++) s += (k - 1) * dil[d] + (k - 1);
  return s;
}

cosy_status ref_hift_stream_context(const cosy_hparams *hp, int *f0_ctx, int *dec_ctx) {
  if (!hp || !f0_ctx || !dec_ctx)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_stream_context: NULL argument");
  const int hop = hp->hop, nfft = hp->n_fft, ups = hp->up_rates[0] * hp->up_rates[1] * hp->up_rates[2];
  if (hop < 1 || nfft < 2 || ups < 1)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "ref_hift_stream_context: bad geometry");
  const int R = ups * hop;
  /* STFT frame f reads samples 4f - 8 .. 4f + 7: clean once 4f - 8 >= 0 */
  const int cS = (nfft / 2 + hop - 1) / hop;
  int64_t cx = 0; /* first clean index of the current stage input (conv_pre: looks right only) */
  for (int i = 0; i < N_STAGES; i++) {
    int sd = 1, mx = 0;
    for (int j = i + 1; j < N_STAGES; j++) sd *= hp->up_rates[j];
    int64_t cup = cx * hp->up_rates[i] + hp->up_kernels[i] - 1 + (i == N_STAGES - 1);
    /* source down: output t reads S frames t sd - (sd - 1) .. : clean once that is >= cS */
    int64_t csrc = (cS + sd - 1 + sd - 1) / sd + rb_reach(hp->src_rb_kernels[i], hp->rb_dilations);
    for (int r = 0; r < 3; r++) {
      int q = rb_reach(hp->rb_kernels[r], hp->rb_dilations);
      mx = q > mx ? q : mx;
    }
    cx = (cup > csrc ? cup : csrc) + mx;
  }
  const int64_t cpost = cx + 7 - 1;                      /* conv_post k7 */
  const int64_t samples = hop * cpost + nfft / 2 - hop;  /* iSTFT: first clean output sample */
  *f0_ctx = 4 * (3 - 1);                                 /* condnet.2/4/6/8: k3, 2 left each */
  *dec_ctx = (int)((samples + R - 1) / R);
  return COSY_OK;
}

struct ref_hift_stream {
  int mel_dim, nh, R, f0_ctx, dec_ctx, finished;
  int64_t T;       /* mel frames received */
  int64_t f0_done; /* frames whose f0 and source are computed (f0 is final for them) */
  int64_t sent;    /* samples returned */
  int64_t mel_lo;  /* mel holds frames [mel_lo, T), frame-major */
  int64_t s_lo;    /* s holds the source of frames [s_lo, f0_done) */
  float *mel, *s;
  int64_t mel_cap, s_cap; /* capacities in frames */
  double *cum;            /* [nh] phase running sums after frame f0_done - 1 */
};

cosy_status ref_hift_stream_create(const ref_hift *h, ref_hift_stream **out) {
  if (!out) return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_stream_create: out is NULL");
  *out = NULL;
  if (!h) return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_stream_create: model is NULL");
  ref_hift_stream *st = cosy_calloc(1, sizeof *st);
  if (!st) return COSY_ERR_NO_MEMORY;
  st->mel_dim = h->mel, st->nh = h->nb + 1, st->R = h->frame_samples;
  cosy_hparams hp;
  memset(&hp, 0, sizeof hp);
  hp.n_fft = h->n_fft, hp.hop = h->hop;
  for (int i = 0; i < N_STAGES; i++) {
    hp.up_rates[i] = h->up_rates[i], hp.up_kernels[i] = h->ups[i].k;
    hp.src_rb_kernels[i] = h->srb[i].k, hp.rb_kernels[i] = h->rb[i].k;
  }
  for (int j = 0; j < N_DIL; j++) hp.rb_dilations[j] = h->dil[j];
  cosy_status s = ref_hift_stream_context(&hp, &st->f0_ctx, &st->dec_ctx);
  st->cum = cosy_calloc((size_t)st->nh, sizeof(double));
  if (!s && !st->cum) s = COSY_ERR_NO_MEMORY;
  if (s) {
    ref_hift_stream_free(st);
    return s;
  }
  *out = st;
  return COSY_OK;
}

void ref_hift_stream_free(ref_hift_stream *st) {
  if (!st) return;
  free(st->mel), free(st->s), free(st->cum);
  free(st);
}

cosy_status ref_hift_stream_set_context(ref_hift_stream *st, int f0_ctx, int dec_ctx) {
  if (!st || f0_ctx < 0 || dec_ctx < 0 || st->T > 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_stream_set_context: bad argument");
  st->f0_ctx = f0_ctx, st->dec_ctx = dec_ctx;
  return COSY_OK;
}

/* make room for n floats-per-frame x frames in *buf (capacity *cap frames) */
static cosy_status grow(float **buf, int64_t *cap, int64_t frames, int per_frame) {
  if (frames <= *cap) return COSY_OK;
  int64_t nc = *cap * 2 > frames ? *cap * 2 : frames;
  if (nc < 64) nc = 64;
  float *p = cosy_realloc(*buf, (size_t)nc * per_frame * sizeof(float));
  if (!p) return COSY_ERR_NO_MEMORY;
  *buf = p, *cap = nc;
  return COSY_OK;
}

/* after a trim: give back most of a capacity well above what is kept (a large chunk's) */
static void shrink(float **buf, int64_t *cap, int64_t frames, int per_frame) {
  const int64_t want = frames + 64;
  if (*cap <= 2 * want) return;
  float *p = cosy_realloc(*buf, (size_t)want * per_frame * sizeof(float));
  if (p) *buf = p, *cap = want;
}

cosy_status ref_hift_stream_run(const ref_hift *h, ref_hift_stream *st, const float *mel_new,
                                int T_new, int finalize, const volatile int *cancel, float **wav,
                                int64_t *n) {
  if (wav) *wav = NULL;
  if (n) *n = 0;
  if (!h || !st || !wav || !n || (T_new > 0 && !mel_new))
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_stream_run: NULL %s",
                    !h ? "model" : !st ? "stream" : !wav ? "wav" : !n ? "n" : "mel");
  if (st->finished)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_stream_run: the stream was finalized");
  if (T_new < 0 || st->T + T_new > HIFT_MAX_FRAMES)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_stream_run: T_new = %d (total %lld, max %d)",
                    T_new, (long long)st->T, HIFT_MAX_FRAMES);
  if (h->mel != st->mel_dim || h->nb + 1 != st->nh)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_hift_stream_run: stream of another model");
  const int M = st->mel_dim, R = st->R;
  cosy_status s = COSY_OK;
  float *cf = NULL, *f0 = NULL, *w = NULL, *out = NULL;
  /* 1. keep the new frames */
  if ((s = grow(&st->mel, &st->mel_cap, st->T + T_new - st->mel_lo, M))) return s;
  if (T_new > 0)
    memcpy(st->mel + (size_t)(st->T - st->mel_lo) * M, mel_new, (size_t)T_new * M * sizeof(float));
  st->T += T_new;
  const int64_t T = st->T;
  if (cancelled(cancel)) goto cancel;

  /* 2. f0 and source of the frames that became final: [f0_done, Tf) */
  const int64_t Tf = finalize ? T : (T > 3 ? T - 3 : 0);
  if (Tf > st->f0_done) {
    const int64_t b = st->f0_done > st->f0_ctx ? st->f0_done - st->f0_ctx : 0;
    const int Tw = (int)(T - b), nf = (int)(Tf - b), nnew = (int)(Tf - st->f0_done);
    cf = cosy_malloc((size_t)M * Tw * sizeof(float));
    f0 = cosy_malloc((size_t)nf * sizeof(float));
    if (!cf || !f0) {
      s = COSY_ERR_NO_MEMORY;
      goto done;
    }
    for (int t = 0; t < Tw; t++)
      for (int c = 0; c < M; c++)
        cf[(size_t)c * Tw + t] = st->mel[(size_t)(b - st->mel_lo + t) * M + c];
    if ((s = ref_hift_f0(h, cf, Tw, finalize, f0))) goto done;
    if ((s = grow(&st->s, &st->s_cap, Tf - st->s_lo, R))) goto done;
    /* source_frames updates cum only when it succeeds, on a copy */
    double cum[64];
    if (st->nh > 64) {
      s = cosy_err(COSY_ERR_MODEL_FORMAT, "ref_hift_stream_run: too many harmonics");
      goto done;
    }
    memcpy(cum, st->cum, (size_t)st->nh * sizeof(double));
    if ((s = source_frames(h, f0 + (st->f0_done - b), st->f0_done, nnew, NULL, cum,
                           st->s + (size_t)(st->f0_done - st->s_lo) * R)))
      goto done;
    memcpy(st->cum, cum, (size_t)st->nh * sizeof(double));
    st->f0_done = Tf;
    free(cf), free(f0);
    cf = f0 = NULL;
    if (cancelled(cancel)) goto cancel;
  }

  /* 3. decode the window [a, T) and keep the samples from st->sent on */
  const int64_t N = finalize ? T * R : (T > 8 ? (T - 8) * R : 0);
  int64_t nout = 0;
  if (N > st->sent) {
    int64_t a = st->sent / R - st->dec_ctx;
    if (a < 0) a = 0;
    if (a < st->s_lo || a < st->mel_lo) {
      s = cosy_err(COSY_ERR_INTERNAL, "ref_hift_stream_run: window start %lld before the history",
                   (long long)a);
      goto done;
    }
    const int Tw = (int)(T - a);
    cf = cosy_malloc((size_t)M * Tw * sizeof(float));
    if (!cf) {
      s = COSY_ERR_NO_MEMORY;
      goto done;
    }
    for (int t = 0; t < Tw; t++)
      for (int c = 0; c < M; c++)
        cf[(size_t)c * Tw + t] = st->mel[(size_t)(a - st->mel_lo + t) * M + c];
    int64_t nw = 0;
    s = ref_hift_decode_ex(h, cf, Tw, st->s + (size_t)(a - st->s_lo) * R, finalize, cancel, NULL,
                           &w, &nw);
    if (s) goto done;
    if (a * R + nw != N) {
      s = cosy_err(COSY_ERR_INTERNAL, "ref_hift_stream_run: window output %lld != %lld",
                   (long long)(a * R + nw), (long long)N);
      goto done;
    }
    nout = N - st->sent;
    out = cosy_malloc((size_t)nout * sizeof(float));
    if (!out) {
      s = COSY_ERR_NO_MEMORY;
      goto done;
    }
    memcpy(out, w + (st->sent - a * R), (size_t)nout * sizeof(float));
  } else {
    out = cosy_malloc(sizeof(float));
    if (!out) {
      s = COSY_ERR_NO_MEMORY;
      goto done;
    }
  }
  /* commit */
  st->sent += nout;
  if (finalize) st->finished = 1;
  *wav = out, *n = nout;
  out = NULL;
  /* 4. drop the history no later call reads: f0 windows start at f0_done - f0_ctx, decode
   * windows at sent / R - dec_ctx */
  {
    int64_t a = st->sent / R - st->dec_ctx, b = st->f0_done - st->f0_ctx;
    a = a < 0 ? 0 : a, b = b < 0 ? 0 : b;
    const int64_t mlo = a < b ? a : b;
    if (mlo > st->mel_lo) {
      memmove(st->mel, st->mel + (size_t)(mlo - st->mel_lo) * M,
              (size_t)(T - mlo) * M * sizeof(float));
      st->mel_lo = mlo;
    }
    if (a > st->s_lo) {
      memmove(st->s, st->s + (size_t)(a - st->s_lo) * R,
              (size_t)(st->f0_done - a) * R * sizeof(float));
      st->s_lo = a;
    }
    shrink(&st->mel, &st->mel_cap, T - st->mel_lo, M);
    shrink(&st->s, &st->s_cap, st->f0_done - st->s_lo, R);
  }
  goto done;
cancel:
  s = cosy_err(COSY_ERR_CANCELLED, "ref_hift_stream_run: cancelled");
done:
  free(cf), free(f0), free(w), free(out);
  return s;
}
