/* frontend.c - the speech tokenizer v3 and CAM++ on the GPU; design in gpu/frontend.h, the math in
 * ref/s3tok.h and ref/campplus.h (this file follows ref/s3tok.c and ref/campplus.c step by step,
 * with the same activation layouts: frame-major [T][C], the CAM++ head's images [F][T][C]). */
#include "gpu/frontend.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_frontend.h"
#include "util.h"

#define NMEL 128
#define HD 64
#define COLS_MIN ((size_t)1 << 23) /* floats of the im2col buffer (32 MiB) */
#define GEMM_WS ((size_t)4 << 20)

typedef struct s3_blk {
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *o_w, *o_b, *fsmn, *ln2_w, *ln2_b, *m1_w, *m1_b, *m2_w,
      *m2_b;
} s3_blk;

typedef struct cam_lay {
  float *bn_s, *bn_t, *l1_w, *l1_b, *loc_w, *c1_w, *c1_b, *c2_w, *c2_b;
} cam_lay;

struct gpu_fe {
  cosy_gpu *g;
  cosy_gemm *gemm;
  int max_mel;
  /* speech tokenizer */
  int S, H, L, K;
  float eps, theta, fsq;
  float *c1_w, *c1_b, *c2_w, *c2_b, *pd_w, *pd_b, *invf;
  s3_blk *blk;
  /* CAM++ */
  int F, M, C0, G, Bn, E, seg, nl[3], k[3], d[3], Cmax;
  int Cpad[3]; /* a dense block's widest input: every layer's linear1 reads this many columns */
  float *hw[12], *hb[12], *td_w, *td_b, *tr_s[3], *tr_t[3], *tr_w[3], *tr_b[3], *de_w, *de_b;
  cam_lay *lay[3];
  /* workspace */
  size_t cols_cap;
  float *mel, *cols, *y1, *x, *h, *qkv, *att, *mlp, *pr;
  int32_t *tok, *pos;
  float *fb, *A, *B, *R, *X, *Hh, *H2, *Y, *ctx, *cc, *mk, *st2, *emb;
  /* pinned staging */
  float *h_in, *h_emb;
  int32_t *h_tok;
};

static const char *const HEAD[12] = {
    "head.conv1",          "head.layer1.0.conv1", "head.layer1.0.conv2", "head.layer1.0.shortcut",
    "head.layer1.1.conv1", "head.layer1.1.conv2", "head.layer2.0.conv1", "head.layer2.0.conv2",
    "head.layer2.0.shortcut", "head.layer2.1.conv1", "head.layer2.1.conv2", "head.conv2"};

/* ---- layout: a bump allocator run twice (sizes, then copies) -------------------------------- */

typedef struct wload {
  const cosy_model *m;
  char *base;      /* NULL: sizing pass */
  size_t off;      /* bytes */
  cosy_status st;
} wload;

static void *wl_take(wload *L, size_t bytes) {
  size_t off = L->off;
  L->off += (bytes + 255) & ~(size_t)255;
  return L->base ? (void *)(L->base + off) : NULL;
}

/* n floats copied from src (NULL: zeros) */
static float *wl_put(wload *L, const float *src, size_t n) {
  float *d = (float *)wl_take(L, n * sizeof(float));
  if (d && !L->st) {
    cudaError_t e = src ? cudaMemcpy(d, src, n * sizeof(float), cudaMemcpyHostToDevice)
                        : cudaMemset(d, 0, n * sizeof(float));
    if (e != cudaSuccess) L->st = cosy_gpu_check(e, "uploading the front-end weights");
  }
  return d;
}

/* rows x cols floats from src into rows of ld floats, the columns past cols zero */
static float *wl_put_rows(wload *L, const float *src, size_t rows, size_t cols, size_t ld) {
  float *d = (float *)wl_take(L, rows * ld * sizeof(float));
  if (d && !L->st) {
    cudaError_t e = cudaMemset(d, 0, rows * ld * sizeof(float));
    if (e == cudaSuccess)
      e = cudaMemcpy2D(d, ld * sizeof(float), src, cols * sizeof(float), cols * sizeof(float), rows,
                       cudaMemcpyHostToDevice);
    if (e != cudaSuccess) L->st = cosy_gpu_check(e, "uploading the front-end weights");
  }
  return d;
}

/* the model tensor `name` (F32, exactly n elements) */
static float *wl_tensor(wload *L, size_t n, const char *fmt, ...) COSY_PRINTF(3, 4);
static const float *wl_find(wload *L, size_t n, const char *name) {
  const gguf_tensor *t = cosy_model_tensor(L->m, name);
  if (!t || t->type != GGML_F32 || t->nbytes != n * sizeof(float)) {
    if (!L->st)
      L->st = cosy_err(COSY_ERR_MODEL_FORMAT, "front-end tensor %s: %s", name,
                       !t ? "missing" : t->type != GGML_F32 ? "not f32" : "unexpected size");
    return NULL;
  }
  return (const float *)t->data;
}

static float *wl_tensor(wload *L, size_t n, const char *fmt, ...) {
  char name[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  const float *src = wl_find(L, n, name);
  if (!src) return (float *)wl_take(L, n * sizeof(float));
  return wl_put(L, src, n);
}

/* a [rows][cols] model tensor into rows of ld floats (zero past cols) */
static float *wl_tensor_rows(wload *L, size_t rows, size_t cols, size_t ld, const char *fmt, ...)
    COSY_PRINTF(5, 6);
static float *wl_tensor_rows(wload *L, size_t rows, size_t cols, size_t ld, const char *fmt, ...) {
  char name[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  const float *src = wl_find(L, rows * cols, name);
  if (!src) return (float *)wl_take(L, rows * ld * sizeof(float));
  return wl_put_rows(L, src, rows, cols, ld);
}

static cosy_status geometry(gpu_fe *f, const cosy_model *m, int max_mel) {
  const cosy_hparams *h = &m->hp;
  if (!h->has_s3tok || !h->has_campplus)
    return cosy_err(COSY_ERR_UNSUPPORTED, "the model file has no %s",
                    !h->has_s3tok ? "speech tokenizer" : "CAM++ model");
  f->max_mel = max_mel;
  f->S = h->s3_state, f->H = h->s3_heads, f->L = h->s3_layers, f->K = h->s3_fsmn_kernel;
  f->eps = h->s3_ln_eps, f->theta = h->s3_rope_theta, f->fsq = h->s3_fsq_scale;
  f->F = h->cam_feat_dim, f->M = h->cam_m_channels, f->C0 = h->cam_init_channels;
  f->G = h->cam_growth, f->Bn = h->cam_bn_channels, f->E = h->cam_embedding, f->seg = h->cam_seg_len;
  int C = f->C0;
  f->Cmax = C;
  for (int b = 0; b < 3; b++) {
    f->nl[b] = h->cam_layers[b], f->k[b] = h->cam_kernels[b], f->d[b] = h->cam_dilations[b];
    int cb = C + f->nl[b] * f->G;
    f->Cpad[b] = C + (f->nl[b] > 0 ? f->nl[b] - 1 : 0) * f->G;
    if (cb > f->Cmax) f->Cmax = cb;
    C = cb / 2;
  }
  const int T2 = (max_mel - 1) / 2 + 1;
  if (max_mel < 4 || f->S <= 0 || f->H * HD != f->S || f->L <= 0 || f->K <= 0 || f->K % 2 == 0 ||
      f->F % 8 || f->M <= 0 || f->Bn % 2 || f->G <= 0 || f->seg <= 0 || f->E <= 0 || f->E > 192 ||
      (T2 + f->seg - 1) / f->seg > COSY_FE_MAX_SEGS || h->s3_mels != NMEL)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "front-end geometry not supported on the GPU");
  for (int b = 0; b < 3; b++)
    if (f->k[b] <= 0 || f->k[b] % 2 == 0 || f->d[b] <= 0)
      return cosy_err(COSY_ERR_MODEL_FORMAT, "CAM++ kernel sizes not supported on the GPU");
  return COSY_OK;
}

static void weights(gpu_fe *f, wload *L) {
  const int S = f->S, K = f->K, F4 = 4 * S;
  const size_t SS = (size_t)S * S;
  f->c1_w = wl_tensor(L, (size_t)S * NMEL * 3, "s3tok.conv1.weight");
  f->c1_b = wl_tensor(L, (size_t)S, "s3tok.conv1.bias");
  f->c2_w = wl_tensor(L, (size_t)S * S * 3, "s3tok.conv2.weight");
  f->c2_b = wl_tensor(L, (size_t)S, "s3tok.conv2.bias");
  f->pd_w = wl_tensor(L, (size_t)8 * S, "s3tok.project_down.weight");
  f->pd_b = wl_tensor(L, 8, "s3tok.project_down.bias");
  for (int i = 0; i < f->L; i++) {
    s3_blk *b = &f->blk[i];
    b->ln1_w = wl_tensor(L, S, "s3tok.blocks.%d.attn_ln.weight", i);
    b->ln1_b = wl_tensor(L, S, "s3tok.blocks.%d.attn_ln.bias", i);
    /* fused q | k | v (S*S floats each: consecutive 256-byte aligned pieces are contiguous) */
    b->qkv_w = wl_tensor(L, SS, "s3tok.blocks.%d.attn.query.weight", i);
    wl_tensor(L, SS, "s3tok.blocks.%d.attn.key.weight", i);
    wl_tensor(L, SS, "s3tok.blocks.%d.attn.value.weight", i);
    b->qkv_b = wl_tensor(L, S, "s3tok.blocks.%d.attn.query.bias", i);
    wl_put(L, NULL, S); /* the key has no bias */
    wl_tensor(L, S, "s3tok.blocks.%d.attn.value.bias", i);
    b->o_w = wl_tensor(L, SS, "s3tok.blocks.%d.attn.out.weight", i);
    b->o_b = wl_tensor(L, S, "s3tok.blocks.%d.attn.out.bias", i);
    b->fsmn = wl_tensor(L, (size_t)S * K, "s3tok.blocks.%d.attn.fsmn.weight", i);
    b->ln2_w = wl_tensor(L, S, "s3tok.blocks.%d.mlp_ln.weight", i);
    b->ln2_b = wl_tensor(L, S, "s3tok.blocks.%d.mlp_ln.bias", i);
    b->m1_w = wl_tensor(L, (size_t)F4 * S, "s3tok.blocks.%d.mlp.0.weight", i);
    b->m1_b = wl_tensor(L, F4, "s3tok.blocks.%d.mlp.0.bias", i);
    b->m2_w = wl_tensor(L, (size_t)S * F4, "s3tok.blocks.%d.mlp.2.weight", i);
    b->m2_b = wl_tensor(L, S, "s3tok.blocks.%d.mlp.2.bias", i);
  }
  {
    float invf[HD / 2]; /* as ref_s3tok_encode: fp32 1 / theta^(2d/64) */
    for (int d = 0; d < HD / 2; d++) invf[d] = 1.0f / powf(f->theta, (float)(2 * d) / (float)HD);
    f->invf = wl_put(L, invf, HD / 2);
  }
  /* CAM++ */
  const int M = f->M;
  for (int i = 0; i < 12; i++) {
    const int ci = i == 0 ? 1 : M, k = (i == 3 || i == 8) ? 1 : 3, taps = ci * k * k;
    /* rows padded to a multiple of 4 floats (the first conv's 9 taps): 16-byte aligned GEMM rows */
    f->hw[i] = wl_tensor_rows(L, (size_t)M, (size_t)taps, (size_t)((taps + 3) & ~3),
                              "campplus.%s.weight", HEAD[i]);
    f->hb[i] = wl_tensor(L, (size_t)M, "campplus.%s.bias", HEAD[i]);
  }
  const int HC = M * (f->F / 8);
  f->td_w = wl_tensor(L, (size_t)f->C0 * HC * 5, "campplus.tdnn.weight");
  f->td_b = wl_tensor(L, (size_t)f->C0, "campplus.tdnn.bias");
  int C = f->C0;
  for (int b = 0; b < 3; b++) {
    for (int j = 0; j < f->nl[b]; j++) {
      cam_lay *y = &f->lay[b][j];
      const int Cin = C + j * f->G;
      y->bn_s = wl_tensor(L, Cin, "campplus.block%d.%d.bn1.scale", b + 1, j);
      y->bn_t = wl_tensor(L, Cin, "campplus.block%d.%d.bn1.shift", b + 1, j);
      /* zero-padded to the block's widest input: one GEMM shape per block (cuBLASLt plans are
       * cached per shape) instead of one per layer */
      y->l1_w = wl_tensor_rows(L, (size_t)f->Bn, (size_t)Cin, (size_t)f->Cpad[b],
                               "campplus.block%d.%d.linear1.weight", b + 1, j);
      y->l1_b = wl_tensor(L, f->Bn, "campplus.block%d.%d.linear1.bias", b + 1, j);
      y->loc_w = wl_tensor(L, (size_t)f->G * f->Bn * f->k[b], "campplus.block%d.%d.local.weight",
                           b + 1, j);
      y->c1_w = wl_tensor(L, (size_t)(f->Bn / 2) * f->Bn, "campplus.block%d.%d.cam1.weight", b + 1, j);
      y->c1_b = wl_tensor(L, f->Bn / 2, "campplus.block%d.%d.cam1.bias", b + 1, j);
      y->c2_w = wl_tensor(L, (size_t)f->G * (f->Bn / 2), "campplus.block%d.%d.cam2.weight", b + 1, j);
      y->c2_b = wl_tensor(L, f->G, "campplus.block%d.%d.cam2.bias", b + 1, j);
    }
    C += f->nl[b] * f->G;
    f->tr_s[b] = wl_tensor(L, C, "campplus.transit%d.bn.scale", b + 1);
    f->tr_t[b] = wl_tensor(L, C, "campplus.transit%d.bn.shift", b + 1);
    f->tr_w[b] = wl_tensor(L, (size_t)(C / 2) * C, "campplus.transit%d.linear.weight", b + 1);
    f->tr_b[b] = wl_tensor(L, C / 2, "campplus.transit%d.linear.bias", b + 1);
    C /= 2;
  }
  f->de_w = wl_tensor(L, (size_t)f->E * 2 * C, "campplus.dense.weight");
  f->de_b = wl_tensor(L, f->E, "campplus.dense.bias");
}

static void workspace(gpu_fe *f, wload *L) {
  const int Tm = f->max_mel, T1 = (Tm - 1) / 2 + 1, N = (T1 - 1) / 2 + 1, S = f->S;
  const int T2 = (Tm - 1) / 2 + 1, nseg = (T2 + f->seg - 1) / f->seg, HC = f->M * (f->F / 8);
  size_t cols = COLS_MIN, c;
  if ((c = (size_t)T1 * NMEL * 3) > cols) cols = c;
  if ((c = (size_t)N * S * 3) > cols) cols = c;
  if ((c = (size_t)T2 * HC * 5) > cols) cols = c;
  if ((c = (size_t)Tm * ((f->M * 9 + 3) & ~3)) > cols) cols = c;
  for (int b = 0; b < 3; b++)
    if ((c = (size_t)T2 * f->Bn * f->k[b]) > cols) cols = c;
  f->cols_cap = cols;
#define TAKE(ptr, type, n) ptr = (type *)wl_take(L, (size_t)(n) * sizeof(type))
  TAKE(f->cols, float, cols);
  TAKE(f->mel, float, (size_t)NMEL * Tm);
  TAKE(f->y1, float, (size_t)T1 * S);
  TAKE(f->x, float, (size_t)N * S);
  TAKE(f->h, float, (size_t)N * S);
  TAKE(f->qkv, float, (size_t)N * 3 * S);
  TAKE(f->att, float, (size_t)N * S);
  TAKE(f->mlp, float, (size_t)N * 4 * S);
  TAKE(f->pr, float, (size_t)N * 8);
  TAKE(f->tok, int32_t, N);
  TAKE(f->pos, int32_t, N);
  const size_t img = (size_t)f->F * Tm * f->M;
  TAKE(f->fb, float, (size_t)Tm * f->F);
  TAKE(f->A, float, img);
  TAKE(f->B, float, img);
  TAKE(f->R, float, img);
  TAKE(f->X, float, (size_t)T2 * f->Cmax);
  TAKE(f->Hh, float, (size_t)T2 * f->Cmax);
  TAKE(f->H2, float, (size_t)T2 * f->Bn);
  TAKE(f->Y, float, (size_t)T2 * f->G);
  TAKE(f->ctx, float, (size_t)nseg * f->Bn);
  TAKE(f->cc, float, (size_t)nseg * (f->Bn / 2));
  TAKE(f->mk, float, (size_t)nseg * f->G);
  TAKE(f->st2, float, (size_t)2 * f->Cmax);
  TAKE(f->emb, float, f->E);
#undef TAKE
}

static cosy_status alloc_tables(gpu_fe *f) {
  f->blk = (s3_blk *)cosy_calloc((size_t)f->L, sizeof *f->blk);
  if (!f->blk) return COSY_ERR_NO_MEMORY;
  for (int b = 0; b < 3; b++) {
    f->lay[b] = (cam_lay *)cosy_calloc((size_t)(f->nl[b] > 0 ? f->nl[b] : 1), sizeof(cam_lay));
    if (!f->lay[b]) return COSY_ERR_NO_MEMORY;
  }
  return COSY_OK;
}

static void free_tables(gpu_fe *f) {
  free(f->blk);
  for (int b = 0; b < 3; b++) free(f->lay[b]);
}

/* weights and workspace bytes (both passes of the layout without copying) */
static cosy_status sizes(gpu_fe *f, const cosy_model *m, size_t *wbytes, size_t *wsbytes) {
  wload L = {m, NULL, 0, COSY_OK};
  weights(f, &L);
  if (L.st) return L.st;
  *wbytes = L.off;
  wload W = {m, NULL, 0, COSY_OK};
  workspace(f, &W);
  *wsbytes = W.off;
  return COSY_OK;
}

size_t gpu_fe_bytes(const cosy_model *m, int max_mel) {
  gpu_fe f;
  memset(&f, 0, sizeof f);
  size_t wb = 0, wsb = 0;
  cosy_status st = geometry(&f, m, max_mel);
  if (!st) st = alloc_tables(&f);
  if (!st) st = sizes(&f, m, &wb, &wsb);
  free_tables(&f);
  cosy_err_clear();
  return st ? 0 : wb + wsb + GEMM_WS;
}

void gpu_fe_free(gpu_fe *f) {
  if (!f) return;
  if (f->g && f->g->stream) cudaStreamSynchronize(f->g->stream);
  if (f->gemm) cosy_gemm_destroy(f->gemm);
  cosy_gpu_host_free(f->h_in);
  cosy_gpu_host_free(f->h_emb);
  cosy_gpu_host_free(f->h_tok);
  free_tables(f);
  free(f);
}

cosy_status gpu_fe_create(cosy_gpu *g, const cosy_model *m, int max_mel, gpu_fe **out) {
  *out = NULL;
  gpu_fe *f = (gpu_fe *)cosy_calloc(1, sizeof *f);
  if (!f) return COSY_ERR_NO_MEMORY;
  f->g = g;
  cosy_status st;
  size_t wb = 0, wsb = 0;
  void *wbase = NULL, *wsbase = NULL;
  if ((st = geometry(f, m, max_mel)) || (st = alloc_tables(f)) || (st = sizes(f, m, &wb, &wsb)))
    goto fail;
  if (wb + wsb + GEMM_WS > cosy_gpu_left(g)) {
    st = cosy_err(COSY_ERR_GPU_NO_MEMORY,
                  "the GPU front end needs %.1f MiB but %.1f MiB of the budget is left",
                  (double)(wb + wsb + GEMM_WS) / 1048576.0, (double)cosy_gpu_left(g) / 1048576.0);
    goto fail;
  }
  if ((st = cosy_gpu_alloc(g, wb, "front-end weights", &wbase)) ||
      (st = cosy_gpu_alloc(g, wsb, "front-end workspace", &wsbase)))
    goto fail;
  {
    wload L = {m, (char *)wbase, 0, COSY_OK};
    weights(f, &L);
    if ((st = L.st)) goto fail;
    wload W = {m, (char *)wsbase, 0, COSY_OK};
    workspace(f, &W);
  }
  {
    const int N = ((f->max_mel - 1) / 2 + 1 - 1) / 2 + 1;
    int32_t *pos = (int32_t *)cosy_malloc((size_t)N * sizeof *pos);
    if (!pos) {
      st = COSY_ERR_NO_MEMORY;
      goto fail;
    }
    for (int i = 0; i < N; i++) pos[i] = i;
    st = cosy_gpu_check(cudaMemcpy(f->pos, pos, (size_t)N * sizeof *pos, cudaMemcpyHostToDevice),
                        "front-end positions");
    free(pos);
    if (st) goto fail;
  }
  if ((st = cosy_gpu_check(cosy_gemm_create(&f->gemm, GEMM_WS), "cuBLASLt init (front end)")))
    goto fail;
  cosy_gemm_set_san_init(f->gemm, g->gemm_san_init);
  {
    cosy_gpu *root = g;
    while (root->parent) root = root->parent;
    root->used += GEMM_WS; /* the handle's workspace, outside cosy_gpu_alloc */
  }
  if ((st = cosy_gpu_host_alloc((size_t)(NMEL + f->F) * f->max_mel * sizeof(float),
                                (void **)&f->h_in)) ||
      (st = cosy_gpu_host_alloc(192 * sizeof(float), (void **)&f->h_emb)) ||
      (st = cosy_gpu_host_alloc((size_t)f->max_mel * sizeof(int32_t), (void **)&f->h_tok)))
    goto fail;
  *out = f;
  return COSY_OK;
fail:
  gpu_fe_free(f);
  return st;
}

/* ---- forward --------------------------------------------------------------------------------- */

/* a failure, or an injected one (cosy_gpu_check counts every result while COSY_CUDA_FAULT is
 * armed) */
#define CK(call)                                                          \
  do {                                                                    \
    cudaError_t e_ = (call);                                              \
    if (e_ != cudaSuccess || cosy_gpu_fault_armed()) {                    \
      cosy_status ck_ = fe_fail(f, e_, #call);                            \
      if (ck_ != COSY_OK) return ck_;                                     \
    }                                                                     \
  } while (0)

static cosy_status fe_fail(gpu_fe *f, cudaError_t e, const char *what) {
  int cb = cosy_gemm_last_cublas_status(f->gemm);
  char msg[200];
  snprintf(msg, sizeof msg, "front end: %.150s%s", what, cb ? " (cuBLAS)" : "");
  return cosy_gpu_check(e, msg);
}

static cudaError_t gm(gpu_fe *f, int M, int N, int K, const float *x, int ldx, const float *w,
                      const float *b, float *y, int ldy, int acc) {
  return cosy_k_gemm(f->gemm, f->g->stream, M, N, K, COSY_KDT_F32, x, ldx, w, b, COSY_KDT_F32, y,
                     ldy, acc);
}

/* device -> host for the optional outputs (waits for the stream) */
static cosy_status dl(gpu_fe *f, void *host, const void *dev, size_t bytes) {
  CK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, f->g->stream));
  CK(cudaStreamSynchronize(f->g->stream));
  return COSY_OK;
}

/* speech tokenizer on f->mel [128][T] -> f->tok [N] */
static cosy_status s3_enqueue(gpu_fe *f, int T, float *proj, float *enc, float *conv2,
                              float *block0) {
  cudaStream_t s = f->g->stream;
  const int S = f->S, H = f->H, T1 = (T - 1) / 2 + 1, N = (T1 - 1) / 2 + 1;
  CK(cosy_k_fe_im2col1d(s, f->mel, 1, T, T, NMEL, T1, 3, 2, 1, 1, f->cols));
  CK(gm(f, T1, S, NMEL * 3, f->cols, NMEL * 3, f->c1_w, f->c1_b, f->y1, S, 0));
  CK(cosy_k_fe_act(s, COSY_FE_GELU, f->y1, NULL, S, f->y1, S, T1, S));
  CK(cosy_k_fe_im2col1d(s, f->y1, S, 1, T1, S, N, 3, 2, 1, 1, f->cols));
  CK(gm(f, N, S, S * 3, f->cols, S * 3, f->c2_w, f->c2_b, f->x, S, 0));
  cosy_status st;
  if (conv2 && (st = dl(f, conv2, f->x, (size_t)N * S * sizeof(float)))) return st;
  CK(cosy_k_fe_act(s, COSY_FE_GELU, f->x, NULL, S, f->x, S, N, S));
  const float qs = 1.0f / sqrtf(sqrtf((float)HD));
  for (int l = 0; l < f->L; l++) {
    const s3_blk *b = &f->blk[l];
    CK(cosy_k_fe_layernorm(s, f->x, b->ln1_w, b->ln1_b, f->h, N, S, f->eps));
    CK(gm(f, N, 3 * S, S, f->h, S, b->qkv_w, b->qkv_b, f->qkv, 3 * S, 0));
    /* x += v + fsmn(v) (the un-rotated v), then RoPE on q and k, attention, x += out proj */
    CK(cosy_k_fe_fsmn_add(s, f->x, S, f->qkv + 2 * S, 3 * S, b->fsmn, N, S, f->K));
    CK(cosy_k_rope_neox(s, COSY_KDT_F32, f->qkv, 3 * S, H, f->qkv + S, 3 * S, H, f->pos, N, HD,
                        f->theta, f->invf));
    CK(cosy_k_attn_dit(s, COSY_KDT_F32, f->qkv, f->qkv + S, f->qkv + 2 * S, 3 * S, f->att, S, 1,
                       N, H, HD, 0, qs * qs));
    CK(gm(f, N, S, S, f->att, S, b->o_w, b->o_b, f->x, S, 1));
    CK(cosy_k_fe_layernorm(s, f->x, b->ln2_w, b->ln2_b, f->h, N, S, f->eps));
    CK(gm(f, N, 4 * S, S, f->h, S, b->m1_w, b->m1_b, f->mlp, 4 * S, 0));
    CK(cosy_k_fe_act(s, COSY_FE_GELU, f->mlp, NULL, 4 * S, f->mlp, 4 * S, N, 4 * S));
    CK(gm(f, N, S, 4 * S, f->mlp, 4 * S, b->m2_w, b->m2_b, f->x, S, 1));
    if (l == 0 && block0 && (st = dl(f, block0, f->x, (size_t)N * S * sizeof(float)))) return st;
  }
  if (enc && (st = dl(f, enc, f->x, (size_t)N * S * sizeof(float)))) return st;
  CK(gm(f, N, 8, S, f->x, S, f->pd_w, f->pd_b, f->pr, 8, 0));
  CK(cosy_k_fe_fsq(s, f->pr, f->fsq, N, f->tok));
  if (proj && (st = dl(f, proj, f->pr, (size_t)N * 8 * sizeof(float)))) return st;
  return COSY_OK;
}

/* k x k conv, stride (sf, 1), pad k/2, of an image read through strides -> y [Fo][T][Co] */
static cosy_status conv2d(gpu_fe *f, float *y, const float *x, int64_t fs, int64_t ts, int64_t cs,
                          int Fi, int T, int Ci, int Co, int k, int sf, const float *W,
                          const float *b) {
  const int Fo = (Fi + 2 * (k / 2) - k) / sf + 1, K = (Ci * k * k + 3) & ~3; /* W's padding */
  const int per = (int)(f->cols_cap / ((size_t)T * K));
  if (per < 1) return cosy_err(COSY_ERR_INTERNAL, "front end: im2col buffer too small");
  for (int fo0 = 0; fo0 < Fo; fo0 += per) {
    const int n = Fo - fo0 < per ? Fo - fo0 : per;
    CK(cosy_k_fe_im2col2d(f->g->stream, x, fs, ts, cs, Fi, T, Ci, k, sf, fo0, n, f->cols, K));
    CK(gm(f, n * T, Co, K, f->cols, K, W, b, y + (size_t)fo0 * T * Co, Co, 0));
  }
  return COSY_OK;
}

#define CS(call)                    \
  do {                              \
    cosy_status s_ = (call);        \
    if (s_) return s_;              \
  } while (0)

/* CAM++ on f->fb [T][F] (mean removed) -> f->emb [E] */
static cosy_status cam_enqueue(gpu_fe *f, int T, float *head_out, float *tdnn_out,
                               float *stats_out) {
  cudaStream_t s = f->g->stream;
  const int F = f->F, M = f->M, G = f->G, Bn = f->Bn, Cmax = f->Cmax, T2 = (T - 1) / 2 + 1;
  const int nseg = (T2 + f->seg - 1) / f->seg;
  /* head: the fbank is the one-channel image x(f, t) = fb[t][f] */
  CS(conv2d(f, f->B, f->fb, 1, F, 1, F, T, 1, M, 3, 1, f->hw[0], f->hb[0]));
  CK(cosy_k_fe_act(s, COSY_FE_RELU, f->B, NULL, M, f->B, M, F * T, M));
  int Fc = F, wi = 1;
  float *cur = f->B, *tmp = f->A, *R = f->R;
  const int64_t fs = (int64_t)T * M;
  for (int layer = 0; layer < 2; layer++)
    for (int blk = 0; blk < 2; blk++) {
      const int sf = blk == 0 ? 2 : 1, Fo = (Fc + 2 - 3) / sf + 1;
      CS(conv2d(f, tmp, cur, fs, M, 1, Fc, T, M, M, 3, sf, f->hw[wi], f->hb[wi]));
      CK(cosy_k_fe_act(s, COSY_FE_RELU, tmp, NULL, M, tmp, M, Fo * T, M));
      CS(conv2d(f, R, tmp, fs, M, 1, Fo, T, M, M, 3, 1, f->hw[wi + 1], f->hb[wi + 1]));
      if (blk == 0) {
        CS(conv2d(f, tmp, cur, fs, M, 1, Fc, T, M, M, 1, sf, f->hw[wi + 2], f->hb[wi + 2]));
        CK(cosy_k_fe_act(s, COSY_FE_ADD_RELU, R, tmp, M, cur, M, Fo * T, M));
        wi += 3;
      } else {
        CK(cosy_k_fe_act(s, COSY_FE_ADD_RELU, R, cur, M, cur, M, Fo * T, M));
        wi += 2;
      }
      Fc = Fo;
    }
  {
    const int Fo = (Fc + 2 - 3) / 2 + 1;
    CS(conv2d(f, tmp, cur, fs, M, 1, Fc, T, M, M, 3, 2, f->hw[11], f->hb[11]));
    Fc = Fo;
    CK(cosy_k_fe_act(s, COSY_FE_RELU, tmp, NULL, M, tmp, M, Fc * T, M));
  }
  const int HC = M * Fc;
  CK(cosy_k_fe_flatten(s, tmp, Fc, T, M, R));
  if (head_out) {
    float *hbuf = (float *)cosy_malloc((size_t)T * HC * sizeof(float));
    if (!hbuf) return COSY_ERR_NO_MEMORY;
    cosy_status st = dl(f, hbuf, R, (size_t)T * HC * sizeof(float));
    if (!st)
      for (int t = 0; t < T; t++)
        for (int ch = 0; ch < HC; ch++) head_out[(size_t)ch * T + t] = hbuf[(size_t)t * HC + ch];
    free(hbuf);
    if (st) return st;
  }
  /* tdnn -> X [T2][C0] (row stride Cmax) */
  CK(cosy_k_fe_im2col1d(s, R, HC, 1, T, HC, T2, 5, 2, 1, 2, f->cols));
  CK(gm(f, T2, f->C0, HC * 5, f->cols, HC * 5, f->td_w, f->td_b, f->X, Cmax, 0));
  CK(cosy_k_fe_act(s, COSY_FE_RELU, f->X, NULL, Cmax, f->X, Cmax, T2, f->C0));
  if (tdnn_out) {
    float *tb = (float *)cosy_malloc((size_t)T2 * Cmax * sizeof(float));
    if (!tb) return COSY_ERR_NO_MEMORY;
    cosy_status st = dl(f, tb, f->X, (size_t)T2 * Cmax * sizeof(float));
    if (!st)
      for (int t = 0; t < T2; t++)
        for (int ch = 0; ch < f->C0; ch++) tdnn_out[(size_t)ch * T2 + t] = tb[(size_t)t * Cmax + ch];
    free(tb);
    if (st) return st;
  }
  int C = f->C0;
  for (int b = 0; b < 3; b++) {
    const int kb = f->k[b], db = f->d[b];
    for (int j = 0; j < f->nl[b]; j++) {
      const cam_lay *y = &f->lay[b][j];
      const int Cin = C + j * G;
      const int Cp = f->Cpad[b];
      CK(cosy_k_fe_bn_relu(s, f->X, Cmax, y->bn_s, y->bn_t, f->Hh, Cp, T2, Cin, Cp));
      CK(gm(f, T2, Bn, Cp, f->Hh, Cp, y->l1_w, y->l1_b, f->H2, Bn, 0));
      CK(cosy_k_fe_act(s, COSY_FE_RELU, f->H2, NULL, Bn, f->H2, Bn, T2, Bn));
      CK(cosy_k_fe_im2col1d(s, f->H2, Bn, 1, T2, Bn, T2, kb, 1, db, db * (kb - 1) / 2, f->cols));
      CK(gm(f, T2, G, Bn * kb, f->cols, Bn * kb, y->loc_w, NULL, f->Y, G, 0));
      CK(cosy_k_fe_seg_ctx(s, f->H2, T2, Bn, f->seg, f->ctx));
      CK(gm(f, nseg, Bn / 2, Bn, f->ctx, Bn, y->c1_w, y->c1_b, f->cc, Bn / 2, 0));
      CK(cosy_k_fe_act(s, COSY_FE_RELU, f->cc, NULL, Bn / 2, f->cc, Bn / 2, nseg, Bn / 2));
      CK(gm(f, nseg, G, Bn / 2, f->cc, Bn / 2, y->c2_w, y->c2_b, f->mk, G, 0));
      CK(cosy_k_fe_cam_mask(s, f->Y, f->mk, f->seg, f->X + Cin, Cmax, T2, G));
    }
    C += f->nl[b] * G;
    CK(cosy_k_fe_bn_relu(s, f->X, Cmax, f->tr_s[b], f->tr_t[b], f->Hh, C, T2, C, C));
    CK(gm(f, T2, C / 2, C, f->Hh, C, f->tr_w[b], f->tr_b[b], f->X, Cmax, 0));
    C /= 2;
  }
  CK(cosy_k_fe_stats(s, f->X, Cmax, T2, C, f->st2));
  if (stats_out) CS(dl(f, stats_out, f->st2, (size_t)2 * C * sizeof(float)));
  CK(gm(f, 1, f->E, 2 * C, f->st2, 2 * C, f->de_w, f->de_b, f->emb, f->E, 0));
  return COSY_OK;
}

static cosy_status check_T(const gpu_fe *f, int32_t T, int min, const char *what) {
  if (T < min || T > f->max_mel)
    return cosy_err(COSY_ERR_INVALID_ARG, "GPU front end: %d %s frames (%d .. %d)", (int)T, what,
                    min, f->max_mel);
  return COSY_OK;
}

cosy_status gpu_fe_s3tok(gpu_fe *f, const float *logmel, int32_t T, int32_t **tokens,
                         int32_t *n_tokens, float *proj, float *enc, float *conv2, float *block0) {
  *tokens = NULL;
  *n_tokens = 0;
  CS(check_T(f, T, 1, "log-mel"));
  const int N = ((T - 1) / 2 + 1 - 1) / 2 + 1;
  CK(cudaMemcpyAsync(f->mel, logmel, (size_t)NMEL * T * sizeof(float), cudaMemcpyHostToDevice,
                     f->g->stream));
  CS(s3_enqueue(f, T, proj, enc, conv2, block0));
  int32_t *tok = (int32_t *)cosy_malloc((size_t)N * sizeof *tok);
  if (!tok) return COSY_ERR_NO_MEMORY;
  cosy_status st = dl(f, tok, f->tok, (size_t)N * sizeof *tok);
  if (st) {
    free(tok);
    return st;
  }
  *tokens = tok;
  *n_tokens = N;
  return COSY_OK;
}

cosy_status gpu_fe_campplus(gpu_fe *f, const float *fbank, int32_t T, float *emb, float *head,
                            float *tdnn, float *stats) {
  CS(check_T(f, T, 4, "fbank"));
  CK(cudaMemcpyAsync(f->fb, fbank, (size_t)T * f->F * sizeof(float), cudaMemcpyHostToDevice,
                     f->g->stream));
  CS(cam_enqueue(f, T, head, tdnn, stats));
  return dl(f, emb, f->emb, (size_t)f->E * sizeof(float));
}

static cosy_status run(gpu_fe *f, const float *logmel, int32_t T_lm, const float *fbank,
                       int32_t T_fb, int32_t **tokens, int32_t *n_tokens, float *emb) {
  cudaStream_t s = f->g->stream;
  const int N = ((T_lm - 1) / 2 + 1 - 1) / 2 + 1;
  const size_t n_lm = (size_t)NMEL * T_lm, n_fb = (size_t)T_fb * f->F;
  /* the previous call's copies out of the staging buffers are complete (it synchronized) */
  memcpy(f->h_in, logmel, n_lm * sizeof(float));
  memcpy(f->h_in + n_lm, fbank, n_fb * sizeof(float));
  CK(cudaMemcpyAsync(f->mel, f->h_in, n_lm * sizeof(float), cudaMemcpyHostToDevice, s));
  CK(cudaMemcpyAsync(f->fb, f->h_in + n_lm, n_fb * sizeof(float), cudaMemcpyHostToDevice, s));
  CS(s3_enqueue(f, T_lm, NULL, NULL, NULL, NULL));
  CS(cam_enqueue(f, T_fb, NULL, NULL, NULL));
  CK(cudaMemcpyAsync(f->h_tok, f->tok, (size_t)N * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  CK(cudaMemcpyAsync(f->h_emb, f->emb, (size_t)f->E * sizeof(float), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  int32_t *tok = (int32_t *)cosy_malloc((size_t)N * sizeof *tok);
  if (!tok) return COSY_ERR_NO_MEMORY;
  memcpy(tok, f->h_tok, (size_t)N * sizeof *tok);
  memcpy(emb, f->h_emb, (size_t)f->E * sizeof(float));
  *tokens = tok;
  *n_tokens = N;
  return COSY_OK;
}

cosy_status gpu_fe_run(gpu_fe *f, const float *logmel, int32_t T_lm, const float *fbank,
                       int32_t T_fb, int32_t **tokens, int32_t *n_tokens, float *emb) {
  *tokens = NULL;
  *n_tokens = 0;
  CS(check_T(f, T_lm, 1, "log-mel"));
  CS(check_T(f, T_fb, 4, "fbank"));
  cosy_status st = run(f, logmel, T_lm, fbank, T_fb, tokens, n_tokens, emb);
  /* a failure mid-way may leave copies in flight from the staging buffers: let them end */
  if (st) cudaStreamSynchronize(f->g->stream);
  return st;
}
