/* flow.c - CPU fp32 reference of the CosyVoice3 flow decoder (docs/model.md section 6).
 *
 * ref_flow_infer (CausalMaskedDiffWithDiT.inference), with T = n_prompt + n_gen tokens:
 *   e    = W_spk . (spk / max(||spk||_2, 1e-12)) + b_spk                       [80]
 *   x_t  = E[tok_t]  (tokens are validated to lie in [0, 6561): clamp(min=0) is a no-op)  [T][80]
 *   PreLookaheadLayer on the first T' = T (finalize) or T-3 (not finalize) tokens:
 *     xp   = x[0..T'-1] then 3 rows: zeros (finalize) or the 3 context tokens x[T-3..T-1]
 *     h1_t = leaky_relu_0.01(b1 + sum_{k<4} W1[:, :, k] . xp[t+k])                 [T'][P]
 *     h2_t = b2 + sum_{k<3} W2[:, :, k] . h1[t+k-2]   (h1[<0] = 0: left pad 2)     [T'][80]
 *     pre_t = h2_t + x_t
 *   mu[c][n] = pre[n/2][c]  (repeat_interleave x2)                          [80][N], N = 2T'
 *   cond[c][n] = prompt_mel[n][c] for n < n_prompt_frames, else 0                     [80][N]
 *   Euler / CFG solver (10 steps, cosine schedule, fp32 as upstream):
 *     s_i = (float)i * 0.1f (i < 5) or 1 - (10-i)*0.1f (i >= 5)   (torch.linspace(0,1,11), fp32)
 *     ts_i = 1 - cosf((s_i * 0.5f) * (float)pi)
 *     x = noise[:, :N]; t = ts_0; dt = ts_1 - ts_0
 *     per step k = 1..10: v  = DiT(x, mu, t, e, cond)   v_u = DiT(x, 0, t, 0, 0)
 *                         x = x + dt * ((1+cfg)*v - cfg*v_u);  t = t + dt;  dt = ts_{k+1} - t
 *   return x[:, n_prompt_frames:]                                                      [80][N-M1]
 *
 * DiT estimator (per batch row; internal layout frame-major [N][D]):
 *   tE   = W_t2 . silu(W_t1 . [sin(a), cos(a)] + b_t1) + b_t2,
 *          a_i = (1000 t) * exp(-i ln(1e4)/127),
 *          i < 128                                                                  [D]
 *   h    = W_in . [x_n, cond_n, mu_n, spks] + b_in                                  [N][D]
 *   h    = h + Mish(conv2(pad30(Mish(conv1(pad30(h))))))  (grouped conv, k 31, left pad)
 *   22 blocks: [sh_a, sc_a, g_a, sh_m, sc_m, g_m] = W_ada . silu(tE) + b_ada
 *          n = LN(h) (1 + sc_a) + sh_a;  q, k, v = W n + b;  RoPE(q, k) on channels 0..63 only
 *          (interleaved pairs, angle = pos * 10000^(-2i/64), pos = 0..N-1);  a = softmax(q k^T / 8
 *          masked) v per head;  h += g_a * (W_o a + b_o);  n = LN(h) (1 + sc_m) + sh_m;
 *          h += g_m * (W_2 gelu_tanh(W_1 n + b_1) + b_2)
 *   [scale, shift] = W_no . silu(tE) + b_no   (scale FIRST);  n = LN(h) (1 + scale) + shift
 *   out  = (W_po . n + b_po) transposed to [80][N]
 *   LN: no affine, eps 1e-6 (statistics accumulated in double). Mask: streaming -> row i attends
 *   keys j < min(N, (i/50 + 1)*50); else all keys.
 *
 * Choices: convolutions are computed as Linear layers over contiguous windows of the frame-major
 * activations (weights permuted to [out][k][in] at create time); the Linear kernel blocks rows by
 * 4 and outputs by 2 with 4 partial sums per dot product (vectorizable without -ffast-math), and
 * tiles the outputs so a weight tile stays in cache. Attention works on blocks of 16 query rows
 * of one head (scores = a small product against the keys, then P.V with shared key/value loads);
 * masked keys get weight exactly 0. OpenMP is used when the build enables it (results do not
 * depend on the thread count). Tokens outside [0, 6561) are rejected rather than clamped.
 * The time-schedule and CFG arithmetic follow upstream's fp32 operation order. */
#include "ref/flow.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hot.h"
#include "util.h"

#ifdef _OPENMP
#include <omp.h>
#define OMP_FOR _Pragma("omp parallel for schedule(static)")
#define OMP_FOR_DYN _Pragma("omp parallel for schedule(dynamic, 16)")
static int n_threads(void) { return omp_get_max_threads(); }
static int thread_id(void) { return omp_get_thread_num(); }
#else
#define OMP_FOR
#define OMP_FOR_DYN
static int n_threads(void) { return 1; }
static int thread_id(void) { return 0; }
#endif

#define HEAD_DIM 64       /* DiT head size (checked at create) */
enum { QB = 16 };         /* attention query rows per block */

typedef struct dit_block {
  float *ada_w, *ada_b; /* [6D][D], [6D] */
  float *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b; /* [D][D], [D] */
  float *ff1_w, *ff1_b; /* [F][D], [F] */
  float *ff2_w, *ff2_b; /* [D][F], [D] */
} dit_block;

struct ref_flow {
  int mel, spk_dim, vocab, la, P, D, depth, heads, hd, ff, cpk, cpg, chunk, ratio, n_steps;
  int noise_frames;
  float cfg;
  float *emb;            /* [vocab][mel] */
  float *spk_w, *spk_b;  /* [mel][spk_dim], [mel] */
  float *pre1_w, *pre1_b; /* permuted [P][la+1][mel], [P] */
  float *pre2_w, *pre2_b; /* permuted [mel][3][P], [mel] */
  float *t1_w, *t1_b, *t2_w, *t2_b; /* [D][256], [D][D] */
  float *in_w, *in_b;    /* [D][4 mel] */
  float *cp_w[2], *cp_b[2]; /* permuted [D][cpk][D/cpg], [D] */
  dit_block *blk;        /* [depth] */
  float *no_w, *no_b;    /* [2D][D], [2D] */
  float *po_w, *po_b;    /* [mel][D], [mel] */
  float *noise;          /* [mel][noise_frames] */
  float *inv_freq;       /* [hd/2] */
};

/* ---------------------------------------------------------------------------------------------
 * numeric kernels */

static inline int imin(int a, int b) { return a < b ? a : b; }

/* dot product with 4 partial sums (lets the compiler use SIMD without reassociation flags) */
COSY_HOT static float dot(const float *restrict a, const float *restrict b, int n) {
  float s[4] = {0, 0, 0, 0};
  int k = 0;
  for (; k + 4 <= n; k += 4)
    for (int l = 0; l < 4; l++) s[l] += a[k + l] * b[k + l];
  for (; k < n; k++) s[0] += a[k] * b[k];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/* 4 rows x 2 outputs micro-kernel: out[r][o] = b[o] + in_r . W_o (W_1 = W_0 + ws) */
COSY_HOT static void kern4x2(float *restrict out, size_t os, const float *restrict in,
                             size_t is, int K, const float *restrict W, size_t ws,
                             const float *restrict b) {
  float acc[4][2][4] = {{{0}}};
  const float *a0 = in, *a1 = in + is, *a2 = in + 2 * is, *a3 = in + 3 * is;
  const float *w0 = W, *w1 = W + ws;
  int k = 0;
  for (; k + 4 <= K; k += 4) {
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
  }
  for (; k < K; k++) {
    const float *a[4] = {a0, a1, a2, a3};
    for (int r = 0; r < 4; r++) {
      acc[r][0][0] += a[r][k] * w0[k];
      acc[r][1][0] += a[r][k] * w1[k];
    }
  }
  for (int r = 0; r < 4; r++)
    for (int o = 0; o < 2; o++) {
      float s = (acc[r][o][0] + acc[r][o][1]) + (acc[r][o][2] + acc[r][o][3]);
      out[r * os + o] = s + (b ? b[o] : 0.0f);
    }
}

/* Serial: out[r*os + o] = b[o] + sum_{k<K} in[r*is + k] * W[o*ws + k], r < rows, o < O.
 * b may be NULL. Rows go 4 at a time against 2 weight rows. */
COSY_HOT static void linear_serial(float *out, size_t os, const float *in, size_t is, int rows,
                                   int K, const float *W, size_t ws, const float *b, int O) {
  for (int r = 0; r < rows; r += 4) {
    const float *inr = in + (size_t)r * is;
    float *outr = out + (size_t)r * os;
    int o = 0;
    if (rows - r >= 4)
      for (; o + 2 <= O; o += 2)
        kern4x2(outr + o, os, inr, is, K, W + (size_t)o * ws, ws, b ? b + o : NULL);
    for (; o < O; o++)
      for (int rr = 0; rr < imin(4, rows - r); rr++)
        outr[(size_t)rr * os + o] =
            dot(inr + (size_t)rr * is, W + (size_t)o * ws, K) + (b ? b[o] : 0.0f);
  }
}

/* out[r*os + o] = b[o] + sum_k in[r*is + k] * W[o*K + k]   for r < rows, o < O (W: [O][K]).
 * Tiles of 32 weight rows (kept in cache while all rows stream past) are the parallel unit. */
static void linear(float *out, size_t os, const float *in, size_t is, int rows, int K,
                   const float *W, const float *b, int O) {
  enum { OT = 32 };
  int ntile = (O + OT - 1) / OT;
  /* linear_serial's footprint, once for all tiles (lib/hot.h) */
  cosy_san_read(in, cosy_span_f32((size_t)rows, (size_t)K, is));
  cosy_san_weights(W, sizeof(float) * (size_t)O * K);
  if (b) cosy_san_weights(b, sizeof(float) * (size_t)(rows > 0 ? O : 0));
  cosy_san_write(out, cosy_span_f32((size_t)rows, (size_t)O, os));
  OMP_FOR
  for (int tile = 0; tile < ntile; tile++) {
    int o0 = tile * OT, o1 = imin(O, o0 + OT);
    linear_serial(out + o0, os, in, is, rows, K, W + (size_t)o0 * K, (size_t)K, b ? b + o0 : NULL,
                  o1 - o0);
  }
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float mish(float x) { return x * tanhf(log1pf(expf(x))); }
static inline float gelu_tanh(float x) {
  const float k = 0.7978845608028654f; /* sqrt(2/pi) */
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

/* y[n] = LN(x[n]) * (1 + scale) + shift over D channels; LN without affine, eps 1e-6 */
COSY_HOT static void ln_modulate(float *y, const float *x, int N, int D, const float *scale,
                                 const float *shift) {
  cosy_san_read(x, sizeof(float) * (size_t)N * D);
  cosy_san_read(scale, sizeof(float) * (size_t)D);
  cosy_san_read(shift, sizeof(float) * (size_t)D);
  cosy_san_write(y, sizeof(float) * (size_t)N * D);
  OMP_FOR
  for (int n = 0; n < N; n++) {
    const float *xn = x + (size_t)n * D;
    float *yn = y + (size_t)n * D;
    double s = 0, ss = 0;
    for (int c = 0; c < D; c++) s += xn[c];
    double mean = s / D;
    for (int c = 0; c < D; c++) {
      double d = xn[c] - mean;
      ss += d * d;
    }
    float fm = (float)mean, rstd = (float)(1.0 / sqrt(ss / D + 1e-6));
    for (int c = 0; c < D; c++) yn[c] = (xn[c] - fm) * rstd * (1.0f + scale[c]) + shift[c];
  }
}

/* ---------------------------------------------------------------------------------------------
 * weights */


/* [O][I][K] (PyTorch Conv1d) -> [O][K][I] so a conv is a dot over a contiguous frame window */
static cosy_status permute_conv(float **w, int O, int I, int K) {
  size_t n = (size_t)O * I * K;
  float *p = (float *)cosy_malloc(n * sizeof *p);
  if (!p) return COSY_ERR_NO_MEMORY;
  for (int o = 0; o < O; o++)
    for (int i = 0; i < I; i++)
      for (int k = 0; k < K; k++)
        p[((size_t)o * K + k) * I + i] = (*w)[((size_t)o * I + i) * K + k];
  free(*w);
  *w = p;
  return COSY_OK;
}

void ref_flow_free(ref_flow *f) {
  if (!f) return;
  float **all[] = {&f->emb,   &f->spk_w,   &f->spk_b, &f->pre1_w,  &f->pre1_b,  &f->pre2_w,
                   &f->pre2_b, &f->t1_w,   &f->t1_b,  &f->t2_w,    &f->t2_b,    &f->in_w,
                   &f->in_b,   &f->cp_w[0], &f->cp_b[0], &f->cp_w[1], &f->cp_b[1], &f->no_w,
                   &f->no_b,   &f->po_w,   &f->po_b,  &f->noise,   &f->inv_freq};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(*all[i]);
  if (f->blk) {
    for (int i = 0; i < f->depth; i++) {
      dit_block *b = &f->blk[i];
      float *bw[] = {b->ada_w, b->ada_b, b->q_w,   b->q_b,   b->k_w,   b->k_b,   b->v_w,
                     b->v_b,   b->o_w,   b->o_b,   b->ff1_w, b->ff1_b, b->ff2_w, b->ff2_b};
      for (size_t j = 0; j < sizeof bw / sizeof bw[0]; j++) free(bw[j]);
    }
    free(f->blk);
  }
  free(f);
}

cosy_status ref_flow_create(const cosy_model *m, ref_flow **out) {
  if (!out) return cosy_err(COSY_ERR_INVALID_ARG, "ref_flow_create: out is NULL");
  *out = NULL;
  if (!m) return cosy_err(COSY_ERR_INVALID_ARG, "ref_flow_create: model is NULL");
  const cosy_hparams *h = &m->hp;
  if (h->dit_head_dim != HEAD_DIM || h->dit_heads * h->dit_head_dim != h->dit_dim ||
      h->dit_dim % h->conv_pos_groups || h->conv_pos_kernel < 1 || h->chunk_frames < 1 ||
      h->token_mel_ratio < 1 || h->n_timesteps < 1 || h->mel_dim < 1 || h->pre_lookahead < 0)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "ref_flow_create: unsupported flow geometry");
  ref_flow *f = (ref_flow *)cosy_calloc(1, sizeof *f);
  if (!f) return COSY_ERR_NO_MEMORY;
  f->mel = h->mel_dim;
  f->spk_dim = h->spk_dim;
  f->vocab = h->flow_vocab;
  f->la = h->pre_lookahead;
  f->P = h->pre_channels;
  f->D = h->dit_dim;
  f->depth = h->dit_depth;
  f->heads = h->dit_heads;
  f->hd = h->dit_head_dim;
  f->ff = h->dit_ff;
  f->cpk = h->conv_pos_kernel;
  f->cpg = h->conv_pos_groups;
  f->chunk = h->chunk_frames;
  f->ratio = h->token_mel_ratio;
  f->n_steps = h->n_timesteps;
  f->noise_frames = h->noise_frames;
  f->cfg = h->cfg_rate;
  cosy_status st;
#define LD(dst, ...)                                         \
  do {                                                       \
    if ((st = cosy_model_get_f32(m, &(dst), __VA_ARGS__)) != COSY_OK) goto fail; \
  } while (0)
  LD(f->emb, "flow.input_embedding.weight");
  LD(f->spk_w, "flow.spk_embed_affine_layer.weight");
  LD(f->spk_b, "flow.spk_embed_affine_layer.bias");
  LD(f->pre1_w, "flow.pre_lookahead_layer.conv1.weight");
  LD(f->pre1_b, "flow.pre_lookahead_layer.conv1.bias");
  LD(f->pre2_w, "flow.pre_lookahead_layer.conv2.weight");
  LD(f->pre2_b, "flow.pre_lookahead_layer.conv2.bias");
  LD(f->t1_w, "flow.dit.time_embed.time_mlp.0.weight");
  LD(f->t1_b, "flow.dit.time_embed.time_mlp.0.bias");
  LD(f->t2_w, "flow.dit.time_embed.time_mlp.2.weight");
  LD(f->t2_b, "flow.dit.time_embed.time_mlp.2.bias");
  LD(f->in_w, "flow.dit.input_embed.proj.weight");
  LD(f->in_b, "flow.dit.input_embed.proj.bias");
  for (int c = 0; c < 2; c++) {
    LD(f->cp_w[c], "flow.dit.input_embed.conv_pos_embed.conv%d.0.weight", c + 1);
    LD(f->cp_b[c], "flow.dit.input_embed.conv_pos_embed.conv%d.0.bias", c + 1);
    if ((st = permute_conv(&f->cp_w[c], f->D, f->D / f->cpg, f->cpk))) goto fail;
  }
  if ((st = permute_conv(&f->pre1_w, f->P, f->mel, f->la + 1))) goto fail;
  if ((st = permute_conv(&f->pre2_w, f->mel, f->P, 3))) goto fail;
  f->blk = (dit_block *)cosy_calloc((size_t)f->depth, sizeof *f->blk);
  if (!f->blk) {
    st = COSY_ERR_NO_MEMORY;
    goto fail;
  }
  for (int i = 0; i < f->depth; i++) {
    dit_block *b = &f->blk[i];
    const char *p = "flow.dit.transformer_blocks";
    LD(b->ada_w, "%s.%d.attn_norm.linear.weight", p, i);
    LD(b->ada_b, "%s.%d.attn_norm.linear.bias", p, i);
    LD(b->q_w, "%s.%d.attn.to_q.weight", p, i);
    LD(b->q_b, "%s.%d.attn.to_q.bias", p, i);
    LD(b->k_w, "%s.%d.attn.to_k.weight", p, i);
    LD(b->k_b, "%s.%d.attn.to_k.bias", p, i);
    LD(b->v_w, "%s.%d.attn.to_v.weight", p, i);
    LD(b->v_b, "%s.%d.attn.to_v.bias", p, i);
    LD(b->o_w, "%s.%d.attn.to_out.0.weight", p, i);
    LD(b->o_b, "%s.%d.attn.to_out.0.bias", p, i);
    LD(b->ff1_w, "%s.%d.ff.ff.0.0.weight", p, i);
    LD(b->ff1_b, "%s.%d.ff.ff.0.0.bias", p, i);
    LD(b->ff2_w, "%s.%d.ff.ff.2.weight", p, i);
    LD(b->ff2_b, "%s.%d.ff.ff.2.bias", p, i);
  }
  LD(f->no_w, "flow.dit.norm_out.linear.weight");
  LD(f->no_b, "flow.dit.norm_out.linear.bias");
  LD(f->po_w, "flow.dit.proj_out.weight");
  LD(f->po_b, "flow.dit.proj_out.bias");
  LD(f->noise, "flow.noise");
#undef LD
  /* x-transformers RotaryEmbedding(64): inv_freq = 1 / 10000^(arange(0,64,2)/64) in fp32 */
  f->inv_freq = (float *)cosy_malloc((size_t)(f->hd / 2) * sizeof(float));
  if (!f->inv_freq) {
    st = COSY_ERR_NO_MEMORY;
    goto fail;
  }
  for (int i = 0; i < f->hd / 2; i++)
    f->inv_freq[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)f->hd);
  *out = f;
  return COSY_OK;
fail:
  ref_flow_free(f);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * DiT estimator */

typedef struct dit_ws {
  int N;
  float *inp;   /* [N][4 mel] */
  float *h;     /* [N][D] */
  float *n;     /* [N][D] */
  float *q, *k, *v, *a; /* [N][D] */
  float *ff;    /* [N][F] */
  float *cpad;  /* [cpg][N + cpk - 1][D/cpg] */
  float *rope;  /* [N][hd/2][2] cos, sin */
  float *att;   /* [threads][QB][N] attention scores */
  float *mod;   /* [6D] */
  float *te;    /* [D] time embedding after silu */
  float *tmp;   /* [max(D, 256)] */
  int threads;
} dit_ws;

static void ws_free(dit_ws *w) {
  float *all[] = {w->inp, w->h, w->n, w->q, w->k, w->v, w->a, w->ff, w->cpad, w->rope,
                  w->att, w->mod, w->te, w->tmp};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
  memset(w, 0, sizeof *w);
}

static cosy_status ws_alloc(const ref_flow *f, int N, dit_ws *w) {
  memset(w, 0, sizeof *w);
  w->N = N;
  w->threads = n_threads();
  size_t nD = (size_t)N * f->D, cin = (size_t)(f->D / f->cpg);
  int tdim = f->D > FLOW_TIME_FREQ_DIM ? f->D : FLOW_TIME_FREQ_DIM;
  if (!(w->inp = cosy_malloc((size_t)N * 4 * f->mel * sizeof(float))) ||
      !(w->h = cosy_malloc(nD * sizeof(float))) || !(w->n = cosy_malloc(nD * sizeof(float))) ||
      !(w->q = cosy_malloc(nD * sizeof(float))) || !(w->k = cosy_malloc(nD * sizeof(float))) ||
      !(w->v = cosy_malloc(nD * sizeof(float))) || !(w->a = cosy_malloc(nD * sizeof(float))) ||
      !(w->ff = cosy_malloc((size_t)N * f->ff * sizeof(float))) ||
      !(w->cpad = cosy_calloc((size_t)f->cpg * (N + f->cpk - 1) * cin, sizeof(float))) ||
      !(w->rope = cosy_malloc((size_t)N * f->hd * sizeof(float))) ||
      !(w->att = cosy_malloc((size_t)w->threads * QB * N * sizeof(float))) ||
      !(w->mod = cosy_malloc((size_t)6 * f->D * sizeof(float))) ||
      !(w->te = cosy_malloc((size_t)f->D * sizeof(float))) ||
      !(w->tmp = cosy_malloc((size_t)tdim * sizeof(float)))) {
    ws_free(w);
    return COSY_ERR_NO_MEMORY;
  }
  /* RoPE table: angle = pos * inv_freq[i] in fp32 */
  for (int n = 0; n < N; n++)
    for (int i = 0; i < f->hd / 2; i++) {
      float ang = (float)n * f->inv_freq[i];
      w->rope[((size_t)n * (f->hd / 2) + i) * 2] = cosf(ang);
      w->rope[((size_t)n * (f->hd / 2) + i) * 2 + 1] = sinf(ang);
    }
  return COSY_OK;
}

/* grouped causal conv (left pad cpk-1) + Mish: y[N][D] = Mish(conv(x[N][D])) */
static void conv_pos(const ref_flow *f, dit_ws *w, const float *x, float *y, int c) {
  int N = w->N, D = f->D, G = f->cpg, K = f->cpk, cin = D / G;
  size_t rows = (size_t)N + K - 1;
  /* per-group frame-major copy with K-1 leading zero rows (those stay zero from calloc) */
  for (int g = 0; g < G; g++) {
    float *dst = w->cpad + (size_t)g * rows * cin + (size_t)(K - 1) * cin;
    for (int n = 0; n < N; n++) memcpy(dst + (size_t)n * cin, x + (size_t)n * D + (size_t)g * cin,
                                       (size_t)cin * sizeof(float));
  }
  /* group g: out channels g*cin.. of y = windows of K*cin contiguous floats . [cin][K*cin] */
  cosy_san_read(w->cpad, sizeof(float) * (size_t)G * rows * cin); /* linear_serial's footprint */
  cosy_san_weights(f->cp_w[c], sizeof(float) * (size_t)G * cin * K * cin);
  cosy_san_weights(f->cp_b[c], sizeof(float) * (size_t)D);
  cosy_san_write(y, sizeof(float) * (size_t)N * D);
  OMP_FOR
  for (int g = 0; g < G; g++)
    linear_serial(y + (size_t)g * cin, D, w->cpad + (size_t)g * rows * cin, cin, N, K * cin,
                  f->cp_w[c] + (size_t)g * cin * K * cin, (size_t)K * cin,
                  f->cp_b[c] + (size_t)g * cin, cin);
  OMP_FOR
  for (int n = 0; n < N; n++)
    for (int o = 0; o < D; o++) y[(size_t)n * D + o] = mish(y[(size_t)n * D + o]);
}

static void rope_apply(const ref_flow *f, const dit_ws *w, float *x) {
  int half = f->hd / 2;
  for (int n = 0; n < w->N; n++) {
    float *r = x + (size_t)n * f->D; /* channels 0..hd-1 only (= head 0) */
    const float *cs = w->rope + (size_t)n * half * 2;
    for (int i = 0; i < half; i++) {
      float c = cs[2 * i], s = cs[2 * i + 1], a = r[2 * i], b = r[2 * i + 1];
      r[2 * i] = a * c - b * s;
      r[2 * i + 1] = b * c + a * s;
    }
  }
}

/* softmax(q k^T / sqrt(hd), masked) v per head, for blocks of QB query rows: the scores of a
 * block are a small matrix product (keys shared by the rows), and so is P.V. */
COSY_HOT static void attention(const ref_flow *f, dit_ws *w, int streaming) {
  int N = w->N, D = f->D, H = f->heads, hd = f->hd, chunk = f->chunk;
  float scale = 1.0f / sqrtf((float)hd);
  int nblk = (N + QB - 1) / QB;
  long total = (long)H * nblk;
  const size_t span = cosy_span_f32((size_t)N, (size_t)H * hd, (size_t)D);
  cosy_san_read(w->q, span);
  cosy_san_read(w->k, span);
  cosy_san_read(w->v, span);
  cosy_san_write(w->a, span);
  OMP_FOR_DYN
  for (long idx = 0; idx < total; idx++) {
    int hh = (int)(idx / nblk), i0 = (int)(idx % nblk) * QB, nq = imin(QB, N - i0);
    float *s = w->att + (size_t)thread_id() * QB * N; /* [nq][lmax] */
    int lim[QB], lmax = 0;
    for (int r = 0; r < nq; r++) {
      lim[r] = streaming ? imin(N, ((i0 + r) / chunk + 1) * chunk) : N;
      if (lim[r] > lmax) lmax = lim[r];
    }
    const float *q = w->q + (size_t)i0 * D + (size_t)hh * hd;
    const float *k = w->k + (size_t)hh * hd, *v = w->v + (size_t)hh * hd;
    cosy_san_write(s, sizeof(float) * (size_t)nq * lmax);
    linear_serial(s, (size_t)lmax, q, (size_t)D, nq, hd, k, (size_t)D, NULL, lmax);
    for (int r = 0; r < nq; r++) {
      float *sr = s + (size_t)r * lmax, mx = -INFINITY;
      for (int j = 0; j < lim[r]; j++) {
        sr[j] *= scale;
        if (sr[j] > mx) mx = sr[j];
      }
      double sum = 0;
      for (int j = 0; j < lim[r]; j++) {
        sr[j] = expf(sr[j] - mx);
        sum += sr[j];
      }
      float inv = (float)(1.0 / sum);
      for (int j = 0; j < lim[r]; j++) sr[j] *= inv;
      for (int j = lim[r]; j < lmax; j++) sr[j] = 0.0f; /* masked: weight exactly 0 */
    }
    float acc[QB][HEAD_DIM];
    for (int r = 0; r < nq; r++)
      for (int c = 0; c < hd; c++) acc[r][c] = 0.0f;
    for (int j = 0; j < lmax; j++) {
      const float *vj = v + (size_t)j * D;
      for (int r = 0; r < nq; r++) {
        float p = s[(size_t)r * lmax + j];
        for (int c = 0; c < HEAD_DIM; c++) acc[r][c] += p * vj[c];
      }
    }
    for (int r = 0; r < nq; r++)
      memcpy(w->a + (size_t)(i0 + r) * D + (size_t)hh * hd, acc[r], (size_t)hd * sizeof(float));
  }
}

/* One batch row. x, mu, cond: [mel][N] channels-first; mu/cond/spks NULL = zeros.
 * out: [mel][N]. */
static void dit_row(const ref_flow *f, dit_ws *w, const float *x, const float *mu, float t,
                    const float *spks, const float *cond, int streaming, float *out) {
  int N = w->N, D = f->D, M = f->mel, F = f->ff;
  size_t nD = (size_t)N * D;
  /* time embedding: sinusoidal (scale 1000) -> Linear -> SiLU -> Linear; then SiLU for AdaLN */
  float *sinus = w->tmp;
  flow_time_sinusoid(t, sinus);
  float *h1 = w->mod; /* scratch, D floats */
  linear(h1, 0, sinus, 0, 1, FLOW_TIME_FREQ_DIM, f->t1_w, f->t1_b, D);
  for (int i = 0; i < D; i++) h1[i] = silu(h1[i]);
  linear(w->te, 0, h1, 0, 1, D, f->t2_w, f->t2_b, D);
  for (int i = 0; i < D; i++) w->te[i] = silu(w->te[i]);

  /* input projection of [x, cond, mu, spks] */
  for (int n = 0; n < N; n++) {
    float *r = w->inp + (size_t)n * 4 * M;
    for (int c = 0; c < M; c++) {
      r[c] = x[(size_t)c * N + n];
      r[M + c] = cond ? cond[(size_t)c * N + n] : 0.0f;
      r[2 * M + c] = mu ? mu[(size_t)c * N + n] : 0.0f;
      r[3 * M + c] = spks ? spks[c] : 0.0f;
    }
  }
  linear(w->h, D, w->inp, 4 * M, N, 4 * M, f->in_w, f->in_b, D);
  /* causal conv position embedding + residual */
  conv_pos(f, w, w->h, w->n, 0);
  conv_pos(f, w, w->n, w->a, 1);
  for (size_t i = 0; i < nD; i++) w->h[i] += w->a[i];

  for (int l = 0; l < f->depth; l++) {
    const dit_block *b = &f->blk[l];
    float *mod = w->mod;
    linear(mod, 0, w->te, 0, 1, D, b->ada_w, b->ada_b, 6 * D);
    const float *sh_a = mod, *sc_a = mod + D, *g_a = mod + 2 * D;
    const float *sh_m = mod + 3 * D, *sc_m = mod + 4 * D, *g_m = mod + 5 * D;
    ln_modulate(w->n, w->h, N, D, sc_a, sh_a);
    linear(w->q, D, w->n, D, N, D, b->q_w, b->q_b, D);
    linear(w->k, D, w->n, D, N, D, b->k_w, b->k_b, D);
    linear(w->v, D, w->n, D, N, D, b->v_w, b->v_b, D);
    rope_apply(f, w, w->q);
    rope_apply(f, w, w->k);
    attention(f, w, streaming);
    linear(w->n, D, w->a, D, N, D, b->o_w, b->o_b, D);
    for (int n = 0; n < N; n++)
      for (int c = 0; c < D; c++) w->h[(size_t)n * D + c] += g_a[c] * w->n[(size_t)n * D + c];
    ln_modulate(w->n, w->h, N, D, sc_m, sh_m);
    linear(w->ff, F, w->n, D, N, D, b->ff1_w, b->ff1_b, F);
    OMP_FOR
    for (int n = 0; n < N; n++)
      for (int c = 0; c < F; c++) w->ff[(size_t)n * F + c] = gelu_tanh(w->ff[(size_t)n * F + c]);
    linear(w->n, D, w->ff, F, N, F, b->ff2_w, b->ff2_b, D);
    for (int n = 0; n < N; n++)
      for (int c = 0; c < D; c++) w->h[(size_t)n * D + c] += g_m[c] * w->n[(size_t)n * D + c];
  }
  /* final AdaLN: scale first, then shift */
  linear(w->mod, 0, w->te, 0, 1, D, f->no_w, f->no_b, 2 * D);
  ln_modulate(w->n, w->h, N, D, w->mod, w->mod + D);
  float *o = w->inp; /* [N][M] */
  linear(o, M, w->n, D, N, D, f->po_w, f->po_b, M);
  for (int c = 0; c < M; c++)
    for (int n = 0; n < N; n++) out[(size_t)c * N + n] = o[(size_t)n * M + c];
}

cosy_status ref_flow_estimator(const ref_flow *f, int B, int N, const float *x, const float *mu,
                               const float *t, const float *spks, const float *cond, int streaming,
                               float *out) {
  if (!f || !x || !mu || !t || !spks || !cond || !out)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_flow_estimator: NULL argument");
  if (B < 1 || B > 1024)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_flow_estimator: batch %d not in [1, 1024]", B);
  if (N < 1 || N > f->noise_frames)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_flow_estimator: N = %d frames not in [1, %d]", N,
                    f->noise_frames);
  dit_ws w;
  cosy_status st = ws_alloc(f, N, &w);
  if (st) return st;
  size_t per = (size_t)f->mel * N;
  for (int b = 0; b < B; b++)
    dit_row(f, &w, x + b * per, mu + b * per, t[b], spks + (size_t)b * f->mel, cond + b * per,
            streaming, out + b * per);
  ws_free(&w);
  return COSY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * inference */

int flow_prompt_only_blocks(int P, int ratio, int lookahead, int block) {
  const int last = ratio * (P - lookahead) - 1; /* the last prompt-only frame */
  return last - (block - 1) >= 0 ? (last - (block - 1)) / block + 1 : 0;
}

void flow_cosine_schedule(int n, float *ts) {
  const float pi = 3.14159265358979323846f;
  float step = 1.0f / (float)n;
  int halfway = (n + 1) / 2;
  for (int i = 0; i <= n; i++) {
    float s = i < halfway ? step * (float)i : 1.0f - step * (float)(n - i);
    ts[i] = 1.0f - cosf(s * 0.5f * pi);
  }
}

void flow_time_sinusoid(float t, float *out) {
  const int half = FLOW_TIME_FREQ_DIM / 2;
  const float lnf = (float)(-log(FLOW_TIME_MAX_PERIOD) / (half - 1));
  const float ts = FLOW_TIME_SCALE * t;
  for (int i = 0; i < half; i++) {
    float a = ts * expf((float)i * lnf);
    out[i] = sinf(a);
    out[half + i] = cosf(a);
  }
}

cosy_status flow_check_call(const char *who, int vocab, int ratio, int lookahead, int max_frames,
                            const int32_t *tokens, int n_prompt, int n_gen,
                            const float *prompt_mel, int n_prompt_frames, const float *spk,
                            int finalize, int *n_used) {
  if (!spk) return cosy_err(COSY_ERR_INVALID_ARG, "%s: NULL speaker embedding", who);
  if (n_prompt < 0 || n_gen < 0 || n_prompt_frames < 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "%s: negative length (n_prompt %d, n_gen %d, "
                    "prompt frames %d)", who, n_prompt, n_gen, n_prompt_frames);
  long n_all = (long)n_prompt + n_gen;
  if (!finalize && n_gen < lookahead)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "%s: a non-final call needs at least %d new tokens (look-ahead), got %d", who,
                    lookahead, n_gen);
  long n_used_l = finalize ? n_all : n_all - lookahead;
  if (n_used_l < 1) return cosy_err(COSY_ERR_INVALID_ARG, "%s: no tokens to decode", who);
  if (n_used_l * ratio > max_frames)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "%s: %ld tokens give %ld mel frames, more than the %d supported", who,
                    n_used_l, n_used_l * ratio, max_frames);
  if (!tokens) return cosy_err(COSY_ERR_INVALID_ARG, "%s: tokens is NULL", who);
  for (long i = 0; i < n_all; i++)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return cosy_err(COSY_ERR_INVALID_ARG, "%s: token %ld = %d not in [0, %d)", who, i,
                      (int)tokens[i], vocab);
  if (n_prompt_frames != ratio * n_prompt)
    return cosy_err(COSY_ERR_INVALID_ARG, "%s: %d prompt mel frames for %d prompt tokens (need %d)",
                    who, n_prompt_frames, n_prompt, ratio * n_prompt);
  if (n_prompt_frames > 0 && !prompt_mel)
    return cosy_err(COSY_ERR_INVALID_ARG, "%s: prompt_mel is NULL", who);
  *n_used = (int)n_used_l;
  return COSY_OK;
}

cosy_status ref_flow_infer(const ref_flow *f, const int32_t *tokens, int n_prompt, int n_gen,
                           const float *prompt_mel, int n_prompt_frames, const float *spk,
                           int streaming, int finalize, const volatile int *cancel, float **mel,
                           int *n_frames, ref_flow_debug *dbg) {
  if (mel) *mel = NULL;
  if (n_frames) *n_frames = 0;
  if (!f || !mel || !n_frames)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_flow_infer: NULL argument");
  int M = f->mel, la = f->la, n_used;
  cosy_status cst = flow_check_call("ref_flow_infer", f->vocab, f->ratio, la, f->noise_frames,
                                    tokens, n_prompt, n_gen, prompt_mel, n_prompt_frames, spk,
                                    finalize, &n_used);
  if (cst) return cst;
  long n_all = (long)n_prompt + n_gen;
  int N = f->ratio * n_used;
  int n_out = N - n_prompt_frames; /* >= 0: n_used >= n_prompt since n_gen >= la when !finalize */

  cosy_status st = COSY_OK;
  size_t MN = (size_t)M * N;
  float *e = NULL, *sn = NULL, *xe = NULL, *h1 = NULL, *pre = NULL, *mu = NULL, *cond = NULL;
  float *x = NULL, *v = NULL, *vu = NULL, *res = NULL;
  dit_ws w = {0};
  int P = f->P, K1 = la + 1;
  if (!(e = cosy_malloc((size_t)M * sizeof(float))) ||
      !(sn = cosy_malloc((size_t)f->spk_dim * sizeof(float))) ||
      !(xe = cosy_calloc((size_t)(n_used + la), (size_t)M * sizeof(float))) ||
      !(h1 = cosy_calloc((size_t)(n_used + 2), (size_t)P * sizeof(float))) ||
      !(pre = cosy_malloc((size_t)n_used * M * sizeof(float))) ||
      !(mu = cosy_malloc(MN * sizeof(float))) || !(cond = cosy_calloc(MN, sizeof(float))) ||
      !(x = cosy_malloc(MN * sizeof(float))) || !(v = cosy_malloc(MN * sizeof(float))) ||
      !(vu = cosy_malloc(MN * sizeof(float))) ||
      !(res = cosy_malloc((size_t)M * (n_out > 0 ? n_out : 1) * sizeof(float)))) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  if ((st = ws_alloc(f, N, &w))) goto done;

  /* speaker: F.normalize (x / max(||x||, 1e-12)) then affine */
  {
    double ss = 0;
    for (int i = 0; i < f->spk_dim; i++) ss += (double)spk[i] * spk[i];
    float nrm = (float)sqrt(ss);
    if (nrm < 1e-12f) nrm = 1e-12f;
    for (int i = 0; i < f->spk_dim; i++) sn[i] = spk[i] / nrm;
    linear(e, 0, sn, 0, 1, f->spk_dim, f->spk_w, f->spk_b, M);
  }
  /* token embedding: rows 0..n_all-1, followed by zero rows up to n_used + la (finalize pad) */
  for (long i = 0; i < n_all; i++)
    memcpy(xe + (size_t)i * M, f->emb + (size_t)tokens[i] * M, (size_t)M * sizeof(float));
  /* PreLookaheadLayer: conv1 (k la+1) over the right-padded window, leaky relu, conv2 (k3) over
   * a window of 2 left-padded rows, residual */
  linear(h1 + (size_t)2 * P, P, xe, M, n_used, K1 * M, f->pre1_w, f->pre1_b, P);
  for (size_t i = (size_t)2 * P; i < (size_t)(n_used + 2) * P; i++)
    if (h1[i] < 0) h1[i] *= 0.01f;
  linear(pre, M, h1, P, n_used, 3 * P, f->pre2_w, f->pre2_b, M);
  for (size_t i = 0; i < (size_t)n_used * M; i++) pre[i] += xe[i];
  for (int n = 0; n < N; n++)
    for (int c = 0; c < M; c++) mu[(size_t)c * N + n] = pre[(size_t)(n / f->ratio) * M + c];
  for (int n = 0; n < n_prompt_frames; n++)
    for (int c = 0; c < M; c++) cond[(size_t)c * N + n] = prompt_mel[(size_t)n * M + c];
  for (int c = 0; c < M; c++)
    memcpy(x + (size_t)c * N, f->noise + (size_t)c * f->noise_frames, (size_t)N * sizeof(float));
  if (dbg) {
    if (dbg->spk_proj) memcpy(dbg->spk_proj, e, (size_t)M * sizeof(float));
    if (dbg->pre_lookahead) memcpy(dbg->pre_lookahead, pre, (size_t)n_used * M * sizeof(float));
    if (dbg->mu) memcpy(dbg->mu, mu, MN * sizeof(float));
  }

  /* Euler solver with CFG */
  {
    int S = f->n_steps;
    float ts_buf[64], *ts = ts_buf;
    float *ts_heap = NULL;
    if (S + 1 > 64) {
      if (!(ts_heap = cosy_malloc((size_t)(S + 1) * sizeof(float)))) {
        st = COSY_ERR_NO_MEMORY;
        goto done;
      }
      ts = ts_heap;
    }
    flow_cosine_schedule(S, ts);
    float t = ts[0], dt = ts[1] - ts[0];
    float c1 = (float)(1.0 + (double)f->cfg), c2 = f->cfg;
    for (int step = 1; step <= S; step++) {
      if (cancel && *cancel) {
        free(ts_heap);
        st = cosy_err(COSY_ERR_CANCELLED, "flow decoding cancelled");
        goto done;
      }
      dit_row(f, &w, x, mu, t, e, cond, streaming, v);
      dit_row(f, &w, x, NULL, t, NULL, NULL, streaming, vu);
      if (dbg && dbg->t_steps) dbg->t_steps[step - 1] = t;
      if (dbg && dbg->est0_out && step == 1) {
        memcpy(dbg->est0_out, v, MN * sizeof(float));
        memcpy(dbg->est0_out + MN, vu, MN * sizeof(float));
      }
      for (size_t i = 0; i < MN; i++) {
        float d = c1 * v[i] - c2 * vu[i];
        x[i] = x[i] + dt * d;
      }
      if (dbg && dbg->x_steps)
        memcpy(dbg->x_steps + (size_t)(step - 1) * MN, x, MN * sizeof(float));
      t = t + dt;
      if (step < S) dt = ts[step + 1] - t;
    }
    free(ts_heap);
  }
  for (int c = 0; c < M; c++)
    memcpy(res + (size_t)c * n_out, x + (size_t)c * N + n_prompt_frames,
           (size_t)n_out * sizeof(float));
  *mel = res;
  *n_frames = n_out;
  res = NULL;
done:
  ws_free(&w);
  free(e);
  free(sn);
  free(xe);
  free(h1);
  free(pre);
  free(mu);
  free(cond);
  free(x);
  free(v);
  free(vu);
  free(res);
  return st;
}
