/* s3tok.c - CPU reference of the speech tokenizer v3 and the whisper log-mel; the math and
 * shapes are in s3tok.h. */
#include "ref/s3tok.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio.h"
#include "ref/fft.h"
#include "ref/nn.h"
#include "util.h"

#define NMEL 128
#define NFFT 400
#define NBIN (NFFT / 2 + 1)
#define HD 64

typedef struct s3_block {
  const float *ln1_w, *ln1_b, *q_w, *q_b, *k_w, *v_w, *v_b, *o_w, *o_b, *fsmn; /* fsmn [S][K] */
  const float *ln2_w, *ln2_b, *m1_w, *m1_b, *m2_w, *m2_b;
} s3_block;

struct ref_s3tok {
  int S, H, L, K;
  float eps, theta, fsq;
  const float *c1_w, *c1_b, *c2_w, *c2_b; /* [S][128*3], [S][S*3] (torch layout [o][i][k]) */
  s3_block *blk;
  const float *pd_w, *pd_b; /* [8][S], [8] */
};

/* ------------------------------------------------------------------------------- log-mel */

/* the frame-independent part (filterbank, window, FFT plan), made once per process and then
 * read-only; a failed setup (no memory) is tried again by the next call */
typedef struct lm_setup {
  cosy_rfft_plan *plan;
  float win[NFFT];
  float fb[NMEL * NBIN];
  int lo[NMEL], hi[NMEL]; /* non-zero span of each filter: the sums skip exact zeros only */
} lm_setup;

static pthread_mutex_t g_lm_mu = PTHREAD_MUTEX_INITIALIZER;
static lm_setup *g_lm;

static cosy_status lm_get(const lm_setup **out) {
  cosy_status st = COSY_OK;
  pthread_mutex_lock(&g_lm_mu);
  if (!g_lm) {
    lm_setup *u = (lm_setup *)cosy_calloc(1, sizeof *u);
    if (!u) st = COSY_ERR_NO_MEMORY;
    if (!st) st = cosy_mel_filterbank(S3TOK_SR, NFFT, NMEL, 0.0, 0.0, u->fb);
    if (!st) st = cosy_rfft_plan_create(NFFT, &u->plan);
    if (!st) {
      for (int m = 0; m < NMEL; m++) {
        const float *row = u->fb + (size_t)m * NBIN;
        u->lo[m] = 0, u->hi[m] = 0;
        for (int k = 0; k < NBIN; k++)
          if (row[k] != 0.0f) {
            if (u->hi[m] == 0) u->lo[m] = k;
            u->hi[m] = k + 1;
          }
      }
      for (int i = 0; i < NFFT; i++)
        u->win[i] = (float)(0.5 - 0.5 * cos(2.0 * 3.14159265358979323846 * i / NFFT));
      g_lm = u;
    } else if (u) {
      cosy_rfft_plan_free(u->plan);
      free(u);
    }
  }
  *out = g_lm;
  pthread_mutex_unlock(&g_lm_mu);
  return st;
}

cosy_status ref_whisper_logmel_check(int64_t n, int32_t *T) {
  *T = 0;
  if (n < 2 * S3TOK_HOP + 81)
    return cosy_err(COSY_ERR_INVALID_ARG, "speech tokenizer: %lld samples at 16 kHz is too short",
                    (long long)n);
  if (n > (int64_t)S3TOK_HOP * (1 << 24))
    return cosy_err(COSY_ERR_INVALID_ARG, "speech tokenizer: audio too long");
  *T = (int32_t)(n / S3TOK_HOP);
  return COSY_OK;
}

cosy_status ref_whisper_logmel_frames(const float *x, int64_t n, int32_t t0, int32_t t1,
                                      float *mel, float *max_out) {
  const lm_setup *u;
  cosy_status st = lm_get(&u);
  if (st) return st;
  const int32_t T = (int32_t)(n / S3TOK_HOP);
  const int pad = NFFT / 2;
  float buf[NFFT], spec[NFFT + 2], scratch[2 * NFFT];
  double pw[NBIN];
  float lmax = -INFINITY;
  for (int32_t t = t0; t < t1; t++) {
    const int64_t start = (int64_t)t * S3TOK_HOP - pad;
    if (start >= 0 && start + NFFT <= n) {
      const float *xs = x + start;
      for (int i = 0; i < NFFT; i++) buf[i] = u->win[i] * xs[i];
    } else {
      for (int i = 0; i < NFFT; i++) {
        int64_t j = start + i;
        if (j < 0) j = -j;
        else if (j >= n) j = 2 * (n - 1) - j;
        buf[i] = u->win[i] * x[j];
      }
    }
    cosy_rfft_exec(u->plan, buf, spec, scratch);
    for (int k = 0; k < NBIN; k++) {
      float re = spec[2 * k], im = spec[2 * k + 1];
      pw[k] = (double)(re * re + im * im);
    }
    for (int m = 0; m < NMEL; m++) {
      const float *row = u->fb + (size_t)m * NBIN;
      double acc = 0;
      for (int k = u->lo[m]; k < u->hi[m]; k++) acc += (double)row[k] * pw[k];
      float v = (float)acc;
      v = log10f(v > 1e-10f ? v : 1e-10f);
      mel[(size_t)m * T + t] = v;
      if (v > lmax) lmax = v;
    }
  }
  *max_out = lmax;
  return COSY_OK;
}

void ref_whisper_logmel_finish(float *mel, int32_t T, float lmax) {
  const float floor_v = lmax - 8.0f;
  for (size_t i = 0; i < (size_t)NMEL * T; i++) {
    float v = mel[i] > floor_v ? mel[i] : floor_v;
    mel[i] = (v + 4.0f) / 4.0f;
  }
}

cosy_status ref_whisper_logmel(const float *x, int64_t n, float **mel, int32_t *Tout) {
  *mel = NULL;
  *Tout = 0;
  int32_t T;
  cosy_status st = ref_whisper_logmel_check(n, &T);
  if (st) return st;
  float *out = (float *)cosy_malloc((size_t)NMEL * T * sizeof(float));
  if (!out) return COSY_ERR_NO_MEMORY;
  float lmax;
  if ((st = ref_whisper_logmel_frames(x, n, 0, T, out, &lmax))) {
    free(out);
    return st;
  }
  ref_whisper_logmel_finish(out, T, lmax);
  *mel = out;
  *Tout = T;
  return COSY_OK;
}

/* ------------------------------------------------------------------------------- weights */

void ref_s3tok_free(ref_s3tok *s) {
  if (!s) return;
  free(s->blk);
  free(s);
}

/* the tensor's data in the mapped file: front-end tensors are F32 (checked by the loader) */
cosy_status ref_fe_tensor(const cosy_model *m, const float **dst, const char *fmt, ...) {
  char name[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  const gguf_tensor *t = cosy_model_tensor(m, name);
  if (!t) return COSY_ERR_MODEL_FORMAT;
  if (t->type != GGML_F32)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "tensor %s is not f32", name);
  *dst = (const float *)t->data;
  return COSY_OK;
}

int ref_s3tok_width(const ref_s3tok *s) { return s->S; }

cosy_status ref_s3tok_create(const cosy_model *m, ref_s3tok **out) {
  *out = NULL;
  const cosy_hparams *h = &m->hp;
  if (!h->has_s3tok)
    return cosy_err(COSY_ERR_UNSUPPORTED,
                    "the model file has no speech tokenizer (s3tok.*): convert it with "
                    "cosyvoice-convert (the released folder's speech_tokenizer_v3.onnx)");
  ref_s3tok *s = (ref_s3tok *)cosy_calloc(1, sizeof *s);
  if (!s) return COSY_ERR_NO_MEMORY;
  s->S = h->s3_state, s->H = h->s3_heads, s->L = h->s3_layers, s->K = h->s3_fsmn_kernel;
  s->eps = h->s3_ln_eps, s->theta = h->s3_rope_theta, s->fsq = h->s3_fsq_scale;
  cosy_status st;
#define G(dst, ...) if ((st = ref_fe_tensor(m, &(dst), __VA_ARGS__))) goto fail
  G(s->c1_w, "s3tok.conv1.weight");
  G(s->c1_b, "s3tok.conv1.bias");
  G(s->c2_w, "s3tok.conv2.weight");
  G(s->c2_b, "s3tok.conv2.bias");
  G(s->pd_w, "s3tok.project_down.weight");
  G(s->pd_b, "s3tok.project_down.bias");
  s->blk = (s3_block *)cosy_calloc((size_t)s->L, sizeof *s->blk);
  if (!s->blk) { st = COSY_ERR_NO_MEMORY; goto fail; }
  for (int i = 0; i < s->L; i++) {
    s3_block *b = &s->blk[i];
    G(b->ln1_w, "s3tok.blocks.%d.attn_ln.weight", i);
    G(b->ln1_b, "s3tok.blocks.%d.attn_ln.bias", i);
    G(b->q_w, "s3tok.blocks.%d.attn.query.weight", i);
    G(b->q_b, "s3tok.blocks.%d.attn.query.bias", i);
    G(b->k_w, "s3tok.blocks.%d.attn.key.weight", i);
    G(b->v_w, "s3tok.blocks.%d.attn.value.weight", i);
    G(b->v_b, "s3tok.blocks.%d.attn.value.bias", i);
    G(b->o_w, "s3tok.blocks.%d.attn.out.weight", i);
    G(b->o_b, "s3tok.blocks.%d.attn.out.bias", i);
    G(b->fsmn, "s3tok.blocks.%d.attn.fsmn.weight", i);
    G(b->ln2_w, "s3tok.blocks.%d.mlp_ln.weight", i);
    G(b->ln2_b, "s3tok.blocks.%d.mlp_ln.bias", i);
    G(b->m1_w, "s3tok.blocks.%d.mlp.0.weight", i);
    G(b->m1_b, "s3tok.blocks.%d.mlp.0.bias", i);
    G(b->m2_w, "s3tok.blocks.%d.mlp.2.weight", i);
    G(b->m2_b, "s3tok.blocks.%d.mlp.2.bias", i);
  }
#undef G
  *out = s;
  return COSY_OK;
fail:
  ref_s3tok_free(s);
  return st;
}

/* ------------------------------------------------------------------------------- forward */

/* y = LN(x) over D (stats in double), eps */
static void layer_norm(float *y, const float *x, int N, int D, const float *w, const float *b,
                       float eps) {
  for (int n = 0; n < N; n++) {
    const float *xn = x + (size_t)n * D;
    float *yn = y + (size_t)n * D;
    double s = 0, ss = 0;
    for (int c = 0; c < D; c++) s += xn[c];
    double mean = s / D;
    for (int c = 0; c < D; c++) ss += (xn[c] - mean) * (xn[c] - mean);
    double rstd = 1.0 / sqrt(ss / D + eps);
    for (int c = 0; c < D; c++) yn[c] = (float)((xn[c] - mean) * rstd) * w[c] + b[c];
  }
}

/* Conv1d(k 3, stride 2, pad 1) of a channels-first input in [Cin][Tin] (or frame-major
 * [Tin][Cin] when frame_major) -> out [Tout][Cout]; cols is scratch [Tout][Cin*3]. */
static void conv_s2(float *out, const float *in, int Cin, int Tin, int frame_major, int Tout,
                    const float *W, const float *b, int Cout, float *cols) {
  for (int t = 0; t < Tout; t++) {
    float *c = cols + (size_t)t * Cin * 3;
    for (int ci = 0; ci < Cin; ci++)
      for (int k = 0; k < 3; k++) {
        int j = 2 * t + k - 1;
        c[ci * 3 + k] = (j < 0 || j >= Tin) ? 0.0f
                        : frame_major ? in[(size_t)j * Cin + ci] : in[(size_t)ci * Tin + j];
      }
  }
  ref_nn_linear(out, (size_t)Cout, cols, (size_t)Cin * 3, Tout, Cin * 3, W, b, Cout);
}

cosy_status ref_s3tok_encode(const ref_s3tok *s, const float *mel, int32_t T, int32_t **tokens,
                             int32_t *n_tokens, float *proj, float *enc, float *conv2_out,
                             float *block0) {
  *tokens = NULL;
  *n_tokens = 0;
  if (T < 1 || T > (1 << 20))
    return cosy_err(COSY_ERR_INVALID_ARG, "speech tokenizer: %d mel frames", (int)T);
  const int S = s->S, H = s->H, K = s->K, F4 = 4 * S;
  const int T1 = (T - 1) / 2 + 1, N = (T1 - 1) / 2 + 1;
  size_t big = (size_t)N * (F4 > 3 * S ? F4 : 3 * S);
  size_t c1 = (size_t)T1 * NMEL * 3;
  if (c1 > big) big = c1;
  float *x = (float *)cosy_malloc((size_t)N * S * sizeof(float));
  float *h = (float *)cosy_malloc((size_t)N * S * sizeof(float));
  float *q = (float *)cosy_malloc((size_t)N * S * sizeof(float));
  float *k = (float *)cosy_malloc((size_t)N * S * sizeof(float));
  float *v = (float *)cosy_malloc((size_t)N * S * sizeof(float));
  float *a = (float *)cosy_malloc((size_t)N * S * sizeof(float));
  float *y1 = (float *)cosy_malloc((size_t)T1 * S * sizeof(float));
  float *scr = (float *)cosy_malloc(big * sizeof(float));
  float *cs = (float *)cosy_malloc((size_t)N * HD * sizeof(float)); /* [N][32] cos, [N][32] sin */
  float *pr = (float *)cosy_malloc((size_t)N * 8 * sizeof(float));
  float *sc = (float *)cosy_malloc((size_t)N * N * sizeof(float));
  float *kc = (float *)cosy_malloc((size_t)N * HD * sizeof(float));
  float *vt = (float *)cosy_malloc((size_t)N * HD * sizeof(float));
  int32_t *tok = (int32_t *)cosy_malloc((size_t)N * sizeof(int32_t));
  cosy_status st = COSY_OK;
  if (!x || !h || !q || !k || !v || !a || !y1 || !scr || !cs || !pr || !tok || !sc || !kc || !vt) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  /* convs */
  conv_s2(y1, mel, NMEL, T, 0, T1, s->c1_w, s->c1_b, S, scr);
  ref_nn_gelu(y1, (size_t)T1 * S);
  conv_s2(x, y1, S, T1, 1, N, s->c2_w, s->c2_b, S, scr);
  if (conv2_out) memcpy(conv2_out, x, (size_t)N * S * sizeof(float));
  ref_nn_gelu(x, (size_t)N * S);
  /* rotary table (fp32 as torch computes it) */
  float *cosv = cs, *sinv = cs + (size_t)N * (HD / 2);
  for (int d = 0; d < HD / 2; d++) {
    float inv = 1.0f / powf(s->theta, (float)(2 * d) / (float)HD);
    for (int t = 0; t < N; t++) {
      float ang = (float)t * inv;
      cosv[(size_t)t * (HD / 2) + d] = (float)cos((double)ang);
      sinv[(size_t)t * (HD / 2) + d] = (float)sin((double)ang);
    }
  }
  const float qs = 1.0f / sqrtf(sqrtf((float)HD)); /* 64^-0.25 */
  for (int l = 0; l < s->L; l++) {
    const s3_block *b = &s->blk[l];
    layer_norm(h, x, N, S, b->ln1_w, b->ln1_b, s->eps);
    ref_nn_linear(q, S, h, S, N, S, b->q_w, b->q_b, S);
    ref_nn_linear(k, S, h, S, N, S, b->k_w, NULL, S);
    ref_nn_linear(v, S, h, S, N, S, b->v_w, b->v_b, S);
    /* FSMN memory on the un-rotated v -> h (h is free now) */
    const int lp = (K - 1) / 2;
    for (int t = 0; t < N; t++)
      for (int c = 0; c < S; c++) {
        float acc = 0.0f;
        const float *w = b->fsmn + (size_t)c * K;
        for (int j = 0; j < K; j++) {
          int tt = t + j - lp;
          if (tt >= 0 && tt < N) acc += w[j] * v[(size_t)tt * S + c];
        }
        h[(size_t)t * S + c] = acc + v[(size_t)t * S + c];
      }
    /* rotary + scale on q, k */
    for (int t = 0; t < N; t++)
      for (int hh = 0; hh < H; hh++) {
        float *qv = q + (size_t)t * S + hh * HD, *kv = k + (size_t)t * S + hh * HD;
        for (int d = 0; d < HD / 2; d++) {
          float c = cosv[(size_t)t * (HD / 2) + d], sn = sinv[(size_t)t * (HD / 2) + d];
          float q0 = qv[d], q1 = qv[d + HD / 2], k0 = kv[d], k1 = kv[d + HD / 2];
          qv[d] = (q0 * c + (-q1) * sn) * qs;
          qv[d + HD / 2] = (q1 * c + q0 * sn) * qs;
          kv[d] = (k0 * c + (-k1) * sn) * qs;
          kv[d + HD / 2] = (k1 * c + k0 * sn) * qs;
        }
      }
    /* attention (full, no mask) -> a; per head: scores = q_h k_h^T, softmax, times v_h */
    for (int hh = 0; hh < H; hh++) {
      for (int t = 0; t < N; t++)
        for (int d = 0; d < HD; d++) {
          kc[(size_t)t * HD + d] = k[(size_t)t * S + hh * HD + d];
          vt[(size_t)d * N + t] = v[(size_t)t * S + hh * HD + d];
        }
      ref_nn_linear(sc, (size_t)N, q + hh * HD, (size_t)S, N, HD, kc, NULL, N);
      for (int t = 0; t < N; t++) {
        float *row = sc + (size_t)t * N, mx = -INFINITY;
        for (int j = 0; j < N; j++) mx = row[j] > mx ? row[j] : mx;
        double sum = 0;
        for (int j = 0; j < N; j++) {
          row[j] = expf(row[j] - mx);
          sum += row[j];
        }
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < N; j++) row[j] *= inv;
      }
      ref_nn_linear(a + hh * HD, (size_t)S, sc, (size_t)N, N, N, vt, NULL, HD);
    }
    ref_nn_linear(q, S, a, S, N, S, b->o_w, b->o_b, S); /* q = out projection */
    for (size_t i = 0; i < (size_t)N * S; i++) x[i] += q[i] + h[i];
    layer_norm(h, x, N, S, b->ln2_w, b->ln2_b, s->eps);
    ref_nn_linear(scr, F4, h, S, N, S, b->m1_w, b->m1_b, F4);
    ref_nn_gelu(scr, (size_t)N * F4);
    ref_nn_linear(q, S, scr, F4, N, F4, b->m2_w, b->m2_b, S);
    for (size_t i = 0; i < (size_t)N * S; i++) x[i] += q[i];
    if (l == 0 && block0) memcpy(block0, x, (size_t)N * S * sizeof(float));
  }
  if (enc) memcpy(enc, x, (size_t)N * S * sizeof(float));
  ref_nn_linear(pr, 8, x, S, N, S, s->pd_w, s->pd_b, 8);
  for (int t = 0; t < N; t++) {
    int32_t id = 0, p3 = 1;
    for (int i = 0; i < 8; i++) {
      float z = rintf(tanhf(pr[(size_t)t * 8 + i]) * s->fsq) + 1.0f;
      id += (int32_t)z * p3;
      p3 *= 3;
    }
    tok[t] = id;
  }
  if (proj) memcpy(proj, pr, (size_t)N * 8 * sizeof(float));
  *tokens = tok;
  *n_tokens = N;
  tok = NULL;
done:
  free(x), free(h), free(q), free(k), free(v), free(a), free(y1), free(scr), free(cs), free(pr);
  free(tok), free(sc), free(kc), free(vt);
  return st;
}
