/* campplus.c - CPU reference of CAM++ and the Kaldi fbank; the math and shapes are in
 * campplus.h. Activations are frame-major ([T][C], channels innermost; the head's images
 * [F][T][C]) so every convolution is an im2col + ref_nn_linear. */
#include "ref/campplus.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ref/fft.h"
#include "ref/nn.h"
#include "ref/s3tok.h" /* ref_fe_tensor */
#include "util.h"

#define FB_BINS 80
#define FB_WIN 400
#define FB_HOP 160
#define FB_NFFT 512

typedef struct cam_layer {
  const float *bn_s, *bn_t, *l1_w, *l1_b, *loc_w, *c1_w, *c1_b, *c2_w, *c2_b;
} cam_layer;

struct ref_campplus {
  int F, M, C0, G, Bn, E, seg, nl[3], k[3], d[3];
  const float *hw[12], *hb[12]; /* head convs in the order of HEAD below */
  const float *td_w, *td_b;
  cam_layer *lay[3];
  const float *tr_s[3], *tr_t[3], *tr_w[3], *tr_b[3];
  const float *de_w, *de_b;
};

static const char *const HEAD[12] = {
    "head.conv1",          "head.layer1.0.conv1", "head.layer1.0.conv2", "head.layer1.0.shortcut",
    "head.layer1.1.conv1", "head.layer1.1.conv2", "head.layer2.0.conv1", "head.layer2.0.conv2",
    "head.layer2.0.shortcut", "head.layer2.1.conv1", "head.layer2.1.conv2", "head.conv2"};

/* ------------------------------------------------------------------------------- fbank */

/* the frame-independent part (mel banks, window, FFT plan), made once per process and then
 * read-only; a failed setup (no memory) is tried again by the next call */
typedef struct fb_setup {
  cosy_rfft_plan *plan;
  float win[FB_WIN];
  float mb[FB_BINS * (FB_NFFT / 2 + 1)];
  int lo[FB_BINS], hi[FB_BINS]; /* non-zero span of each bank: the sums skip exact zeros only */
} fb_setup;

static pthread_mutex_t g_fb_mu = PTHREAD_MUTEX_INITIALIZER;
static fb_setup *g_fb;

static cosy_status fb_get(const fb_setup **out) {
  cosy_status st = COSY_OK;
  pthread_mutex_lock(&g_fb_mu);
  if (!g_fb) {
    const int NB = FB_NFFT / 2 + 1;
    fb_setup *u = (fb_setup *)cosy_calloc(1, sizeof *u);
    if (!u) st = COSY_ERR_NO_MEMORY;
    if (!st) st = cosy_rfft_plan_create(FB_NFFT, &u->plan);
    if (!st) {
      const double lo = 1127.0 * log(1.0 + 20.0 / 700.0), hi = 1127.0 * log(1.0 + 8000.0 / 700.0);
      const float flo = (float)lo, delta = (float)((hi - lo) / (FB_BINS + 1));
      for (int m = 0; m < FB_BINS; m++) {
        float left = flo + (float)m * delta, centre = flo + (float)(m + 1) * delta,
              right = flo + (float)(m + 2) * delta;
        for (int k = 0; k < FB_NFFT / 2; k++) {
          float f = 31.25f * (float)k;
          float mel = 1127.0f * logf(1.0f + f / 700.0f);
          float up = (mel - left) / (centre - left), down = (right - mel) / (right - centre);
          float v = up < down ? up : down;
          u->mb[(size_t)m * NB + k] = v > 0.0f ? v : 0.0f;
        }
      }
      for (int m = 0; m < FB_BINS; m++) {
        const float *row = u->mb + (size_t)m * NB;
        u->lo[m] = 0, u->hi[m] = 0;
        for (int k = 0; k < NB; k++)
          if (row[k] != 0.0f) {
            if (u->hi[m] == 0) u->lo[m] = k;
            u->hi[m] = k + 1;
          }
      }
      for (int i = 0; i < FB_WIN; i++)
        u->win[i] =
            powf((float)(0.5 - 0.5 * cos(2.0 * 3.14159265358979323846 * i / (FB_WIN - 1))), 0.85f);
      g_fb = u;
    } else if (u) {
      cosy_rfft_plan_free(u->plan);
      free(u);
    }
  }
  *out = g_fb;
  pthread_mutex_unlock(&g_fb_mu);
  return st;
}

cosy_status ref_kaldi_fbank_check(int64_t n, int32_t *T) {
  *T = 0;
  if (n < FB_WIN)
    return cosy_err(COSY_ERR_INVALID_ARG, "fbank: %lld samples at 16 kHz (need >= %d)",
                    (long long)n, FB_WIN);
  if ((n - FB_WIN) / FB_HOP + 1 > (1 << 24))
    return cosy_err(COSY_ERR_INVALID_ARG, "fbank: audio too long");
  *T = (int32_t)(1 + (n - FB_WIN) / FB_HOP);
  return COSY_OK;
}

cosy_status ref_kaldi_fbank_frames(const float *x, int64_t n, int32_t t0, int32_t t1, float *fb) {
  (void)n;
  const fb_setup *u;
  cosy_status st = fb_get(&u);
  if (st) return st;
  const int NB = FB_NFFT / 2 + 1;
  float fr[FB_WIN], buf[FB_NFFT], spec[FB_NFFT + 2], scratch[2 * FB_NFFT];
  double pw[FB_NFFT / 2 + 1];
  for (int i = FB_WIN; i < FB_NFFT; i++) buf[i] = 0.0f;
  for (int32_t t = t0; t < t1; t++) {
    const float *s = x + (int64_t)t * FB_HOP;
    double mean = 0;
    for (int i = 0; i < FB_WIN; i++) mean += s[i];
    float fm = (float)(mean / FB_WIN);
    for (int i = 0; i < FB_WIN; i++) fr[i] = s[i] - fm;
    buf[0] = (fr[0] - 0.97f * fr[0]) * u->win[0];
    for (int i = 1; i < FB_WIN; i++) buf[i] = (fr[i] - 0.97f * fr[i - 1]) * u->win[i];
    cosy_rfft_exec(u->plan, buf, spec, scratch);
    /* |X|^2 in double (torch: |X| then squared in fp32; the two differ by an ulp) */
    for (int k = 0; k < NB; k++)
      pw[k] = (double)spec[2 * k] * spec[2 * k] + (double)spec[2 * k + 1] * spec[2 * k + 1];
    float *o = fb + (size_t)t * FB_BINS;
    for (int m = 0; m < FB_BINS; m++) {
      const float *row = u->mb + (size_t)m * NB;
      double acc = 0;
      for (int k = u->lo[m]; k < u->hi[m]; k++) acc += (double)row[k] * pw[k];
      float e = (float)acc;
      o[m] = logf(e > FLT_EPSILON ? e : FLT_EPSILON);
    }
  }
  return COSY_OK;
}

cosy_status ref_kaldi_fbank(const float *x, int64_t n, float **fb_out, int32_t *Tout) {
  *fb_out = NULL;
  *Tout = 0;
  int32_t T;
  cosy_status st = ref_kaldi_fbank_check(n, &T);
  if (st) return st;
  float *out = (float *)cosy_malloc((size_t)T * FB_BINS * sizeof(float));
  if (!out) return COSY_ERR_NO_MEMORY;
  if ((st = ref_kaldi_fbank_frames(x, n, 0, T, out))) {
    free(out);
    return st;
  }
  *fb_out = out;
  *Tout = T;
  return COSY_OK;
}

/* ------------------------------------------------------------------------------- weights */

void ref_campplus_free(ref_campplus *c) {
  if (!c) return;
  for (int b = 0; b < 3; b++) free(c->lay[b]);
  free(c);
}

cosy_status ref_campplus_create(const cosy_model *m, ref_campplus **out) {
  *out = NULL;
  const cosy_hparams *h = &m->hp;
  if (!h->has_campplus)
    return cosy_err(COSY_ERR_UNSUPPORTED,
                    "the model file has no CAM++ speaker model (campplus.*): convert it with "
                    "cosyvoice-convert (the released folder's campplus.onnx)");
  ref_campplus *c = (ref_campplus *)cosy_calloc(1, sizeof *c);
  if (!c) return COSY_ERR_NO_MEMORY;
  c->F = h->cam_feat_dim, c->M = h->cam_m_channels, c->C0 = h->cam_init_channels;
  c->G = h->cam_growth, c->Bn = h->cam_bn_channels, c->E = h->cam_embedding, c->seg = h->cam_seg_len;
  for (int b = 0; b < 3; b++)
    c->nl[b] = h->cam_layers[b], c->k[b] = h->cam_kernels[b], c->d[b] = h->cam_dilations[b];
  cosy_status st;
#define G(dst, ...) if ((st = ref_fe_tensor(m, &(dst), __VA_ARGS__))) goto fail
  for (int i = 0; i < 12; i++) {
    G(c->hw[i], "campplus.%s.weight", HEAD[i]);
    G(c->hb[i], "campplus.%s.bias", HEAD[i]);
  }
  G(c->td_w, "campplus.tdnn.weight");
  G(c->td_b, "campplus.tdnn.bias");
  for (int b = 0; b < 3; b++) {
    c->lay[b] = (cam_layer *)cosy_calloc((size_t)c->nl[b], sizeof(cam_layer));
    if (!c->lay[b]) { st = COSY_ERR_NO_MEMORY; goto fail; }
    for (int j = 0; j < c->nl[b]; j++) {
      cam_layer *L = &c->lay[b][j];
      G(L->bn_s, "campplus.block%d.%d.bn1.scale", b + 1, j);
      G(L->bn_t, "campplus.block%d.%d.bn1.shift", b + 1, j);
      G(L->l1_w, "campplus.block%d.%d.linear1.weight", b + 1, j);
      G(L->l1_b, "campplus.block%d.%d.linear1.bias", b + 1, j);
      G(L->loc_w, "campplus.block%d.%d.local.weight", b + 1, j);
      G(L->c1_w, "campplus.block%d.%d.cam1.weight", b + 1, j);
      G(L->c1_b, "campplus.block%d.%d.cam1.bias", b + 1, j);
      G(L->c2_w, "campplus.block%d.%d.cam2.weight", b + 1, j);
      G(L->c2_b, "campplus.block%d.%d.cam2.bias", b + 1, j);
    }
    G(c->tr_s[b], "campplus.transit%d.bn.scale", b + 1);
    G(c->tr_t[b], "campplus.transit%d.bn.shift", b + 1);
    G(c->tr_w[b], "campplus.transit%d.linear.weight", b + 1);
    G(c->tr_b[b], "campplus.transit%d.linear.bias", b + 1);
  }
  G(c->de_w, "campplus.dense.weight");
  G(c->de_b, "campplus.dense.bias");
#undef G
  *out = c;
  return COSY_OK;
fail:
  ref_campplus_free(c);
  return st;
}

/* ------------------------------------------------------------------------------- forward */

static inline float relu(float v) { return v > 0.0f ? v : 0.0f; }

/* 2-D conv (k x k, pad k/2, stride (sf, 1)) of x [Fi][T][Ci] -> y [Fo][T][Co], W [Co][Ci][k][k].
 * cols: scratch [T][Ci k k]. */
static void conv2d(float *y, const float *x, int Fi, int T, int Ci, int Co, int k, int sf,
                   const float *W, const float *b, float *cols) {
  const int Fo = (Fi + 2 * (k / 2) - k) / sf + 1, p = k / 2, K = Ci * k * k;
  for (int fo = 0; fo < Fo; fo++) {
    for (int t = 0; t < T; t++) {
      float *cr = cols + (size_t)t * K;
      for (int ci = 0; ci < Ci; ci++)
        for (int kf = 0; kf < k; kf++) {
          int f = fo * sf + kf - p;
          for (int kt = 0; kt < k; kt++) {
            int tt = t + kt - p;
            cr[(ci * k + kf) * k + kt] =
                (f < 0 || f >= Fi || tt < 0 || tt >= T) ? 0.0f : x[((size_t)f * T + tt) * Ci + ci];
          }
        }
    }
    ref_nn_linear(y + (size_t)fo * T * Co, Co, cols, K, T, K, W, b, Co);
  }
}

/* 1-D conv over frame-major x [Ti][Ci] (row stride xs), kernel k, stride s, dilation d,
 * pad d (k-1)/2 -> y [To][Co] (row stride ys); W [Co][Ci][k]; cols scratch [To][Ci k]. */
static void conv1d(float *y, size_t ys, const float *x, size_t xs, int Ti, int Ci, int To, int k,
                   int s, int d, const float *W, const float *b, int Co, float *cols) {
  const int p = d * (k - 1) / 2, K = Ci * k;
  for (int t = 0; t < To; t++) {
    float *cr = cols + (size_t)t * K;
    for (int ci = 0; ci < Ci; ci++)
      for (int j = 0; j < k; j++) {
        int tt = t * s + j * d - p;
        cr[ci * k + j] = (tt < 0 || tt >= Ti) ? 0.0f : x[(size_t)tt * xs + ci];
      }
  }
  ref_nn_linear(y, ys, cols, K, To, K, W, b, Co);
}

cosy_status ref_campplus_embed(const ref_campplus *c, const float *fbank, int32_t T, float *emb,
                               float *head_out, float *tdnn_out, float *stats_out) {
  if (T < 4 || T > (1 << 22))
    return cosy_err(COSY_ERR_INVALID_ARG, "CAM++: %d fbank frames (need at least 4)", (int)T);
  const int F = c->F, M = c->M, G = c->G, Bn = c->Bn, T2 = (T - 1) / 2 + 1;
  const int nseg = (T2 + c->seg - 1) / c->seg;
  int Cmax = c->C0, C = c->C0;
  for (int b = 0; b < 3; b++) {
    int cb = C + c->nl[b] * G;
    if (cb > Cmax) Cmax = cb;
    C = cb / 2;
  }
  size_t head_sz = (size_t)F * T * M;
  size_t cols_sz = (size_t)T * M * 9;
  size_t c2 = (size_t)T2 * (M * (F / 8)) * 5;
  if (c2 > cols_sz) cols_sz = c2;
  size_t c3 = (size_t)T2 * Cmax * 11;
  for (int b = 0; b < 3; b++) {
    size_t c4 = (size_t)T2 * Bn * c->k[b];
    if (c4 > c3) c3 = c4;
  }
  if (c3 > cols_sz) cols_sz = c3;
  float *A = (float *)cosy_malloc(head_sz * sizeof(float));
  float *B = (float *)cosy_malloc(head_sz * sizeof(float));
  float *R = (float *)cosy_malloc(head_sz * sizeof(float));
  float *cols = (float *)cosy_malloc(cols_sz * sizeof(float));
  float *X = (float *)cosy_malloc((size_t)T2 * Cmax * sizeof(float));
  float *Hh = (float *)cosy_malloc((size_t)T2 * Cmax * sizeof(float));
  float *H2 = (float *)cosy_malloc((size_t)T2 * Bn * sizeof(float));
  float *Y = (float *)cosy_malloc((size_t)T2 * G * sizeof(float));
  float *ctx = (float *)cosy_malloc((size_t)nseg * Bn * sizeof(float));
  float *c1 = (float *)cosy_malloc((size_t)nseg * Bn * sizeof(float));
  float *mk = (float *)cosy_malloc((size_t)nseg * G * sizeof(float));
  double *acc = (double *)cosy_malloc((size_t)Bn * sizeof(double));
  float *st2 = (float *)cosy_malloc((size_t)2 * Cmax * sizeof(float));
  cosy_status st = COSY_OK;
  if (!A || !B || !R || !cols || !X || !Hh || !H2 || !Y || !ctx || !c1 || !mk || !acc || !st2) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  /* ---- head: x [F][T][1] */
  for (int f = 0; f < F; f++)
    for (int t = 0; t < T; t++) A[(size_t)f * T + t] = fbank[(size_t)t * F + f];
  conv2d(B, A, F, T, 1, M, 3, 1, c->hw[0], c->hb[0], cols);
  for (size_t i = 0; i < (size_t)F * T * M; i++) B[i] = relu(B[i]);
  int Fc = F, wi = 1;
  float *cur = B, *tmp = A;
  for (int layer = 0; layer < 2; layer++)
    for (int blk = 0; blk < 2; blk++) {
      int sf = blk == 0 ? 2 : 1, Fo = (Fc + 2 - 3) / sf + 1;
      conv2d(tmp, cur, Fc, T, M, M, 3, sf, c->hw[wi], c->hb[wi], cols); /* conv1 */
      for (size_t i = 0; i < (size_t)Fo * T * M; i++) tmp[i] = relu(tmp[i]);
      conv2d(R, tmp, Fo, T, M, M, 3, 1, c->hw[wi + 1], c->hb[wi + 1], cols); /* conv2 */
      if (blk == 0) {
        /* 1x1 stride (2,1) shortcut of cur -> tmp */
        conv2d(tmp, cur, Fc, T, M, M, 1, sf, c->hw[wi + 2], c->hb[wi + 2], cols);
        for (size_t i = 0; i < (size_t)Fo * T * M; i++) cur[i] = relu(R[i] + tmp[i]);
        wi += 3;
      } else {
        for (size_t i = 0; i < (size_t)Fo * T * M; i++) cur[i] = relu(R[i] + cur[i]);
        wi += 2;
      }
      Fc = Fo;
    }
  {
    int Fo = (Fc + 2 - 3) / 2 + 1;
    conv2d(tmp, cur, Fc, T, M, M, 3, 2, c->hw[11], c->hb[11], cols);
    Fc = Fo;
    for (size_t i = 0; i < (size_t)Fc * T * M; i++) tmp[i] = relu(tmp[i]);
  }
  /* flatten [Fc][T][M] -> frame-major [T][M * Fc], channel index c * Fc + f */
  const int HC = M * Fc;
  for (int f = 0; f < Fc; f++)
    for (int t = 0; t < T; t++)
      for (int m = 0; m < M; m++) R[(size_t)t * HC + m * Fc + f] = tmp[((size_t)f * T + t) * M + m];
  if (head_out)
    for (int t = 0; t < T; t++)
      for (int ch = 0; ch < HC; ch++) head_out[(size_t)ch * T + t] = R[(size_t)t * HC + ch];
  /* ---- tdnn -> X [T2][C0] (row stride Cmax) */
  conv1d(X, Cmax, R, HC, T, HC, T2, 5, 2, 1, c->td_w, c->td_b, c->C0, cols);
  for (int t = 0; t < T2; t++)
    for (int ch = 0; ch < c->C0; ch++) X[(size_t)t * Cmax + ch] = relu(X[(size_t)t * Cmax + ch]);
  if (tdnn_out)
    for (int t = 0; t < T2; t++)
      for (int ch = 0; ch < c->C0; ch++) tdnn_out[(size_t)ch * T2 + t] = X[(size_t)t * Cmax + ch];
  C = c->C0;
  for (int b = 0; b < 3; b++) {
    for (int j = 0; j < c->nl[b]; j++) {
      const cam_layer *L = &c->lay[b][j];
      const int Cin = C + j * G;
      for (int t = 0; t < T2; t++)
        for (int ch = 0; ch < Cin; ch++)
          Hh[(size_t)t * Cin + ch] = relu(X[(size_t)t * Cmax + ch] * L->bn_s[ch] + L->bn_t[ch]);
      ref_nn_linear(H2, Bn, Hh, Cin, T2, Cin, L->l1_w, L->l1_b, Bn);
      for (size_t i = 0; i < (size_t)T2 * Bn; i++) H2[i] = relu(H2[i]);
      conv1d(Y, G, H2, Bn, T2, Bn, T2, c->k[b], 1, c->d[b], L->loc_w, NULL, G, cols);
      /* context: global mean + segment sums / seg (the last, partial segment too: campplus.h) */
      for (int ch = 0; ch < Bn; ch++) acc[ch] = 0;
      for (int t = 0; t < T2; t++)
        for (int ch = 0; ch < Bn; ch++) acc[ch] += H2[(size_t)t * Bn + ch];
      for (int sgi = 0; sgi < nseg; sgi++) {
        int t0 = sgi * c->seg, t1 = t0 + c->seg < T2 ? t0 + c->seg : T2;
        for (int ch = 0; ch < Bn; ch++) {
          double s = 0;
          for (int t = t0; t < t1; t++) s += H2[(size_t)t * Bn + ch];
          ctx[(size_t)sgi * Bn + ch] = (float)(acc[ch] / T2) + (float)(s / c->seg);
        }
      }
      ref_nn_linear(c1, Bn / 2, ctx, Bn, nseg, Bn, L->c1_w, L->c1_b, Bn / 2);
      for (size_t i = 0; i < (size_t)nseg * (Bn / 2); i++) c1[i] = relu(c1[i]);
      ref_nn_linear(mk, G, c1, Bn / 2, nseg, Bn / 2, L->c2_w, L->c2_b, G);
      for (size_t i = 0; i < (size_t)nseg * G; i++) mk[i] = 1.0f / (1.0f + expf(-mk[i]));
      for (int t = 0; t < T2; t++) {
        const float *mr = mk + (size_t)(t / c->seg) * G;
        for (int g = 0; g < G; g++) X[(size_t)t * Cmax + Cin + g] = Y[(size_t)t * G + g] * mr[g];
      }
    }
    C += c->nl[b] * G;
    for (int t = 0; t < T2; t++)
      for (int ch = 0; ch < C; ch++)
        Hh[(size_t)t * C + ch] = relu(X[(size_t)t * Cmax + ch] * c->tr_s[b][ch] + c->tr_t[b][ch]);
    ref_nn_linear(X, Cmax, Hh, C, T2, C, c->tr_w[b], c->tr_b[b], C / 2);
    C /= 2;
  }
  /* out_nonlinear (BN folded into transit 3) + statistics pooling */
  for (int ch = 0; ch < C; ch++) {
    double s = 0;
    for (int t = 0; t < T2; t++) s += relu(X[(size_t)t * Cmax + ch]);
    double mean = s / T2, ss = 0;
    for (int t = 0; t < T2; t++) {
      double dd = relu(X[(size_t)t * Cmax + ch]) - mean;
      ss += dd * dd;
    }
    st2[ch] = (float)mean;
    st2[C + ch] = (float)sqrt(ss / (T2 - 1));
  }
  if (stats_out) memcpy(stats_out, st2, (size_t)2 * C * sizeof(float));
  ref_nn_linear(emb, c->E, st2, 2 * C, 1, 2 * C, c->de_w, c->de_b, c->E);
done:
  free(A), free(B), free(R), free(cols), free(X), free(Hh), free(H2), free(Y), free(ctx), free(c1);
  free(mk), free(acc), free(st2);
  return st;
}
