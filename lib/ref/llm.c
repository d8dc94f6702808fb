/* llm.c - CPU fp32 reference of the CosyVoice3 Qwen2 speech-token LLM; the math is in llm.h.
 *
 * Shapes: x [n][H] residual stream of the n new positions; q [n][nh*hd]; the KV cache holds
 * k, v [layers][max_positions][nkv*hd] (k stored after RoPE). Weights are PyTorch Linear
 * [out][in] row-major, so every projection is out[t][o] = dot(W[o], x[t]) (+ b[o]): the loop over
 * output rows is outermost (parallel, one streaming pass over W per tile of 32 positions).
 * Dot products use 8 fp32 partial sums; softmax / RMSNorm sums are accumulated in double. The
 * results are fp32 and agree with the PyTorch reference to rounding (see tests/test_ref_llm.c).
 * OpenMP pragmas are active only when built with -fopenmp. */
#include "ref/llm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hot.h"
#include "util.h"

#ifdef _OPENMP
#  define COSY_OMP_FOR _Pragma("omp parallel for schedule(static)")
#else
#  define COSY_OMP_FOR
#endif

#define TILE_T 32 /* positions per pass over a weight matrix */

typedef struct ref_layer {
  float *wq, *bq, *wk, *bk, *wv, *bv, *wo, *wg, *wu, *wd, *ln1, *ln2;
} ref_layer;

struct ref_llm {
  int H, nl, nh, nkv, hd, inter, text_vocab, speech_vocab, speech_tokens, endofprompt_id;
  float eps;
  float *inv_freq; /* [hd/2] */
  const gguf_tensor *embed_tokens; /* [text_vocab][H] in the model file, any supported type */
  ref_layer *layers;
  float *norm, *speech_emb, *head; /* [H], [speech_vocab][H], [speech_vocab][H] */
};

struct ref_kv {
  int max, len, nl, kvdim;
  float *k, *v; /* [nl][max][kvdim] */
};

static const int32_t silent_tokens[] = {1, 2, 28, 29, 55, 248, 494, 2241, 2242, 2322, 2323};
#define MAX_SILENT_RUN 5

/* ---- create / free ---------------------------------------------------------------------------- */

void ref_llm_free(ref_llm *l) {
  if (!l) return;
  if (l->layers) {
    for (int i = 0; i < l->nl; i++) {
      ref_layer *y = &l->layers[i];
      float *all[] = {y->wq, y->bq, y->wk, y->bk, y->wv, y->bv,
                      y->wo, y->wg, y->wu, y->wd, y->ln1, y->ln2};
      for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) free(all[j]);
    }
    free(l->layers);
  }
  free(l->inv_freq);
  free(l->norm);
  free(l->speech_emb);
  free(l->head);
  free(l);
}


cosy_status ref_llm_create(const cosy_model *m, ref_llm **out) {
  if (!out) return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_create: NULL out");
  *out = NULL;
  if (!m) return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_create: NULL model");
  const cosy_hparams *hp = &m->hp;
  if (hp->llm_heads < 1 || hp->llm_kv_heads < 1 || hp->llm_heads % hp->llm_kv_heads != 0 ||
      hp->llm_head_dim < 2 || hp->llm_head_dim % 2 != 0 || hp->llm_hidden < 1 ||
      hp->llm_layers < 1 || hp->llm_inter < 1 || hp->speech_vocab <= hp->speech_tokens + 2 ||
      hp->speech_tokens != COSY_SPEECH_TOKENS)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "ref_llm_create: inconsistent LLM hyperparameters");

  cosy_status st = COSY_ERR_NO_MEMORY;
  ref_llm *l = cosy_calloc(1, sizeof *l);
  if (!l) return COSY_ERR_NO_MEMORY;
  l->H = hp->llm_hidden;
  l->nl = hp->llm_layers;
  l->nh = hp->llm_heads;
  l->nkv = hp->llm_kv_heads;
  l->hd = hp->llm_head_dim;
  l->inter = hp->llm_inter;
  l->text_vocab = hp->text_vocab;
  l->speech_vocab = hp->speech_vocab;
  l->speech_tokens = hp->speech_tokens;
  l->endofprompt_id = hp->endofprompt_id;
  l->eps = hp->rms_eps;

  l->embed_tokens = cosy_model_tensor(m, "llm.embed_tokens.weight");
  if (!l->embed_tokens) {
    st = COSY_ERR_MODEL_FORMAT;
    goto fail;
  }
  if (gguf_type_size(l->embed_tokens->type) == 0 ||
      l->embed_tokens->nbytes <
          (size_t)l->text_vocab * (size_t)l->H * gguf_type_size(l->embed_tokens->type)) {
    st = cosy_err(COSY_ERR_MODEL_FORMAT,
                  "ref_llm_create: llm.embed_tokens.weight has an unusable type or size");
    goto fail;
  }

  l->inv_freq = cosy_malloc(sizeof(float) * (size_t)(l->hd / 2));
  if (!l->inv_freq) goto fail;
  for (int i = 0; i < l->hd / 2; i++)
    l->inv_freq[i] = (float)(1.0 / pow((double)hp->rope_theta, (double)(2 * i) / (double)l->hd));

  l->layers = cosy_calloc((size_t)l->nl, sizeof *l->layers);
  if (!l->layers) goto fail;
  for (int i = 0; i < l->nl; i++) {
    ref_layer *y = &l->layers[i];
    if ((st = cosy_model_get_f32(m, &y->wq, "llm.layers.%d.self_attn.q_proj.weight", i)) ||
        (st = cosy_model_get_f32(m, &y->bq, "llm.layers.%d.self_attn.q_proj.bias", i)) ||
        (st = cosy_model_get_f32(m, &y->wk, "llm.layers.%d.self_attn.k_proj.weight", i)) ||
        (st = cosy_model_get_f32(m, &y->bk, "llm.layers.%d.self_attn.k_proj.bias", i)) ||
        (st = cosy_model_get_f32(m, &y->wv, "llm.layers.%d.self_attn.v_proj.weight", i)) ||
        (st = cosy_model_get_f32(m, &y->bv, "llm.layers.%d.self_attn.v_proj.bias", i)) ||
        (st = cosy_model_get_f32(m, &y->wo, "llm.layers.%d.self_attn.o_proj.weight", i)) ||
        (st = cosy_model_get_f32(m, &y->wg, "llm.layers.%d.mlp.gate_proj.weight", i)) ||
        (st = cosy_model_get_f32(m, &y->wu, "llm.layers.%d.mlp.up_proj.weight", i)) ||
        (st = cosy_model_get_f32(m, &y->wd, "llm.layers.%d.mlp.down_proj.weight", i)) ||
        (st = cosy_model_get_f32(m, &y->ln1, "llm.layers.%d.input_layernorm.weight", i)) ||
        (st = cosy_model_get_f32(m, &y->ln2, "llm.layers.%d.post_attention_layernorm.weight", i)))
      goto fail;
  }
  if ((st = cosy_model_get_f32(m, &l->norm, "llm.norm.weight")) ||
      (st = cosy_model_get_f32(m, &l->speech_emb, "llm.speech_embedding.weight")) ||
      (st = cosy_model_get_f32(m, &l->head, "llm.llm_decoder.weight")))
    goto fail;
  *out = l;
  return COSY_OK;
fail:
  ref_llm_free(l);
  return st;
}

int ref_llm_hidden(const ref_llm *l) { return l ? l->H : 0; }
int ref_llm_speech_vocab(const ref_llm *l) { return l ? l->speech_vocab : 0; }

/* ---- KV cache --------------------------------------------------------------------------------- */

cosy_status ref_kv_create(const ref_llm *l, int max_positions, ref_kv **out) {
  if (!out) return cosy_err(COSY_ERR_INVALID_ARG, "ref_kv_create: NULL out");
  *out = NULL;
  if (!l) return cosy_err(COSY_ERR_INVALID_ARG, "ref_kv_create: NULL llm");
  if (max_positions < 1 || max_positions > (1 << 24))
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_kv_create: max_positions %d out of range",
                    max_positions);
  ref_kv *kv = cosy_calloc(1, sizeof *kv);
  if (!kv) return COSY_ERR_NO_MEMORY;
  kv->max = max_positions;
  kv->nl = l->nl;
  kv->kvdim = l->nkv * l->hd;
  size_t n = (size_t)kv->nl * (size_t)max_positions * (size_t)kv->kvdim;
  kv->k = cosy_malloc(n * sizeof(float));
  kv->v = cosy_malloc(n * sizeof(float));
  if (!kv->k || !kv->v) {
    ref_kv_free(kv);
    return COSY_ERR_NO_MEMORY;
  }
  *out = kv;
  return COSY_OK;
}

void ref_kv_free(ref_kv *kv) {
  if (!kv) return;
  free(kv->k);
  free(kv->v);
  free(kv);
}

int ref_kv_len(const ref_kv *kv) { return kv ? kv->len : 0; }
void ref_kv_reset(ref_kv *kv) {
  if (kv) kv->len = 0;
}

/* ---- input embedding -------------------------------------------------------------------------- */

void ref_llm_embed_speech(const ref_llm *l, int32_t token, float *out) {
  if (!l || !out) return;
  if (token < 0 || token >= l->speech_vocab) {
    memset(out, 0, sizeof(float) * (size_t)l->H);
    return;
  }
  memcpy(out, l->speech_emb + (size_t)token * (size_t)l->H, sizeof(float) * (size_t)l->H);
}

static void embed_text(const ref_llm *l, int32_t id, float *out) {
  const gguf_tensor *t = l->embed_tokens;
  size_t es = gguf_type_size(t->type);
  const uint8_t *row = (const uint8_t *)t->data + (size_t)id * (size_t)l->H * es;
  cosy_to_f32(row, t->type, out, (size_t)l->H);
}

static cosy_status check_ids(const int32_t *ids, int n, int lim, const char *what) {
  if (n < 0 || n > (1 << 20))
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_build_input: %s length %d out of range", what, n);
  if (n > 0 && !ids)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_build_input: NULL %s with length %d", what, n);
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= lim)
      return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_build_input: %s[%d] = %d not in [0, %d)",
                      what, i, (int)ids[i], lim);
  return COSY_OK;
}

cosy_status ref_llm_build_input(const ref_llm *l, const int32_t *prompt_text, int n_prompt_text,
                                const int32_t *tts_text, int n_tts_text,
                                const int32_t *prompt_speech, int n_prompt_speech, float **emb,
                                int *L) {
  if (!emb || !L) return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_build_input: NULL output");
  *emb = NULL;
  *L = 0;
  if (!l) return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_build_input: NULL llm");
  cosy_status st;
  if ((st = check_ids(prompt_text, n_prompt_text, l->text_vocab, "prompt text")) != COSY_OK ||
      (st = check_ids(tts_text, n_tts_text, l->text_vocab, "tts text")) != COSY_OK ||
      (st = check_ids(prompt_speech, n_prompt_speech, l->speech_tokens, "prompt speech")) !=
          COSY_OK)
    return st;
  int has_eop = 0;
  for (int i = 0; i < n_prompt_text; i++) has_eop |= prompt_text[i] == l->endofprompt_id;
  for (int i = 0; i < n_tts_text; i++) has_eop |= tts_text[i] == l->endofprompt_id;
  if (!has_eop)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "ref_llm_build_input: the text holds no <|endofprompt|> (id %d)",
                    l->endofprompt_id);

  int n = 1 + n_prompt_text + n_tts_text + 1 + n_prompt_speech;
  const size_t H = (size_t)l->H;
  float *e = cosy_malloc(sizeof(float) * (size_t)n * H);
  if (!e) return COSY_ERR_NO_MEMORY;
  float *row = e;
  ref_llm_embed_speech(l, l->speech_tokens, row); /* sos = 6561 */
  row += H;
  for (int i = 0; i < n_prompt_text; i++, row += H) embed_text(l, prompt_text[i], row);
  for (int i = 0; i < n_tts_text; i++, row += H) embed_text(l, tts_text[i], row);
  ref_llm_embed_speech(l, l->speech_tokens + 2, row); /* task_id = 6563 */
  row += H;
  for (int i = 0; i < n_prompt_speech; i++, row += H) ref_llm_embed_speech(l, prompt_speech[i], row);
  *emb = e;
  *L = n;
  return COSY_OK;
}

cosy_status ref_llm_embed_items(const ref_llm *l, const int32_t *items, int n, float **emb) {
  *emb = NULL;
  if (!l || n < 1 || n > (1 << 24) || !items)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_embed_items: bad arguments (n %d)", n);
  for (int i = 0; i < n; i++)
    if (items[i] >= l->text_vocab || (items[i] < 0 && -1 - items[i] >= l->speech_vocab))
      return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_embed_items: item %d = %d out of range", i,
                      (int)items[i]);
  const size_t H = (size_t)l->H;
  float *e = cosy_malloc(sizeof(float) * (size_t)n * H);
  if (!e) return COSY_ERR_NO_MEMORY;
  for (int i = 0; i < n; i++) {
    if (items[i] >= 0) embed_text(l, items[i], e + i * H);
    else ref_llm_embed_speech(l, -1 - items[i], e + i * H);
  }
  *emb = e;
  return COSY_OK;
}

/* ---- numeric helpers -------------------------------------------------------------------------- */

COSY_HOT static inline float dot(const float *a, const float *b, int n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; i++) r += a[i] * b[i];
  return r;
}

/* out[t][o] = dot(W[o], x[t]) + b[o] for t < n, o < O (x [n][I], W [O][I]) */
COSY_HOT static void matmul(float *out, const float *x, const float *W, const float *b, int n,
                            int I, int O) {
  cosy_san_read(x, sizeof(float) * (size_t)n * I);
  cosy_san_weights(W, sizeof(float) * (size_t)O * I);
  if (b) cosy_san_weights(b, sizeof(float) * (size_t)O);
  cosy_san_write(out, sizeof(float) * (size_t)n * O);
  for (int t0 = 0; t0 < n; t0 += TILE_T) {
    int t1 = t0 + TILE_T < n ? t0 + TILE_T : n;
    COSY_OMP_FOR
    for (int o = 0; o < O; o++) {
      const float *w = W + (size_t)o * (size_t)I;
      float bo = b ? b[o] : 0.0f;
      for (int t = t0; t < t1; t++) out[(size_t)t * O + o] = dot(w, x + (size_t)t * I, I) + bo;
    }
  }
}

/* y[t] = w * (x[t] * rsqrt(mean(x[t]^2) + eps)) */
static void rmsnorm(float *y, const float *x, const float *w, int n, int H, float eps) {
  for (int t = 0; t < n; t++) {
    const float *xr = x + (size_t)t * H;
    float *yr = y + (size_t)t * H;
    double ss = 0.0;
    for (int i = 0; i < H; i++) ss += (double)xr[i] * xr[i];
    float var = (float)(ss / H);
    float r = 1.0f / sqrtf(var + eps);
    for (int i = 0; i < H; i++) yr[i] = w[i] * (xr[i] * r);
  }
}

/* NeoX rotation of one head vector v[hd] with cos/sin tables [hd/2] */
static void rope(float *v, const float *cs, const float *sn, int hd) {
  int half = hd / 2;
  for (int i = 0; i < half; i++) {
    float x1 = v[i], x2 = v[i + half];
    v[i] = x1 * cs[i] - x2 * sn[i];
    v[i + half] = x2 * cs[i] + x1 * sn[i];
  }
}

/* logp[i] = (x[i] - max) - log(sum exp(x - max)) */
static void log_softmax(float *logp, const float *x, int n) {
  float mx = -INFINITY;
  for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  double s = 0.0;
  for (int i = 0; i < n; i++) s += exp((double)(x[i] - mx));
  float lse = (float)log(s);
  for (int i = 0; i < n; i++) logp[i] = (x[i] - mx) - lse;
}

/* ---- forward ---------------------------------------------------------------------------------- */

cosy_status ref_llm_forward(const ref_llm *l, ref_kv *kv, const float *emb, int n,
                            float *logp_all, float *logp_last, float *h_layer0, float *h_norm) {
  if (!l || !kv || !emb)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_forward: NULL llm, cache or input");
  if (n < 1) return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_forward: n = %d < 1", n);
  if (kv->nl != l->nl || kv->kvdim != l->nkv * l->hd)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_forward: cache made for another model");
  if (n > kv->max - kv->len)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "ref_llm_forward: %d positions do not fit the cache (%d of %d used)", n,
                    kv->len, kv->max);

  const int H = l->H, hd = l->hd, half = hd / 2, nh = l->nh, qd = nh * hd, kvd = kv->kvdim;
  const int group = nh / l->nkv, p0 = kv->len, ctx = p0 + n, I = l->inter, V = l->speech_vocab;
  const int big = qd > H ? qd : H;
  const float scale = 1.0f / sqrtf((float)hd);

  float *x = cosy_malloc(sizeof(float) * (size_t)n * H);
  float *xn = cosy_malloc(sizeof(float) * (size_t)n * big);
  float *q = cosy_malloc(sizeof(float) * (size_t)n * qd);
  float *att = cosy_malloc(sizeof(float) * (size_t)n * qd);
  float *g = cosy_malloc(sizeof(float) * (size_t)n * I);
  float *u = cosy_malloc(sizeof(float) * (size_t)n * I);
  float *cs = cosy_malloc(sizeof(float) * (size_t)n * hd); /* per position: cos[half], sin[half] */
  float *sc = cosy_malloc(sizeof(float) * (size_t)nh * ctx);
  float *logits = cosy_malloc(sizeof(float) * (size_t)V);
  cosy_status st = COSY_OK;
  if (!x || !xn || !q || !att || !g || !u || !cs || !sc || !logits) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  memcpy(x, emb, sizeof(float) * (size_t)n * H);
  for (int t = 0; t < n; t++) {
    float pos = (float)(p0 + t);
    for (int i = 0; i < half; i++) {
      float a = pos * l->inv_freq[i];
      cs[(size_t)t * hd + i] = cosf(a);
      cs[(size_t)t * hd + half + i] = sinf(a);
    }
  }

  for (int li = 0; li < l->nl; li++) {
    const ref_layer *y = &l->layers[li];
    float *kc = kv->k + (size_t)li * kv->max * kvd, *vc = kv->v + (size_t)li * kv->max * kvd;

    /* attention block */
    rmsnorm(xn, x, y->ln1, n, H, l->eps);
    matmul(q, xn, y->wq, y->bq, n, H, qd);
    matmul(kc + (size_t)p0 * kvd, xn, y->wk, y->bk, n, H, kvd);
    matmul(vc + (size_t)p0 * kvd, xn, y->wv, y->bv, n, H, kvd);
    for (int t = 0; t < n; t++) {
      const float *c = cs + (size_t)t * hd, *s = c + half;
      for (int h = 0; h < nh; h++) rope(q + (size_t)t * qd + h * hd, c, s, hd);
      for (int h = 0; h < l->nkv; h++) rope(kc + (size_t)(p0 + t) * kvd + h * hd, c, s, hd);
    }
    /* what dot() (COSY_HOT: unchecked in the sanitizer builds, lib/hot.h) reads below: the
     * queries of the n positions and the cached keys of positions 0 .. p0+n-1 */
    cosy_san_read(q, sizeof(float) * (size_t)n * qd);
    cosy_san_read(kc, sizeof(float) * (size_t)(p0 + n) * kvd);
    for (int t = 0; t < n; t++) {
      const int npos = p0 + t + 1; /* causal: positions 0 .. p0+t */
      COSY_OMP_FOR
      for (int h = 0; h < nh; h++) {
        const float *qh = q + (size_t)t * qd + h * hd;
        const int kh = h / group;
        float *sh = sc + (size_t)h * ctx;
        float mx = -INFINITY;
        for (int j = 0; j < npos; j++) {
          sh[j] = dot(qh, kc + (size_t)j * kvd + kh * hd, hd) * scale;
          mx = sh[j] > mx ? sh[j] : mx;
        }
        double sum = 0.0;
        for (int j = 0; j < npos; j++) {
          sh[j] = expf(sh[j] - mx);
          sum += sh[j];
        }
        const float inv = (float)(1.0 / sum);
        float *oh = att + (size_t)t * qd + h * hd;
        for (int d = 0; d < hd; d++) oh[d] = 0.0f;
        for (int j = 0; j < npos; j++) {
          const float pj = sh[j] * inv, *vj = vc + (size_t)j * kvd + kh * hd;
          for (int d = 0; d < hd; d++) oh[d] += pj * vj[d];
        }
      }
    }
    matmul(xn, att, y->wo, NULL, n, qd, H);
    for (size_t i = 0; i < (size_t)n * H; i++) x[i] += xn[i];

    /* MLP block */
    rmsnorm(xn, x, y->ln2, n, H, l->eps);
    matmul(g, xn, y->wg, NULL, n, H, I);
    matmul(u, xn, y->wu, NULL, n, H, I);
    for (size_t i = 0; i < (size_t)n * I; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    matmul(xn, g, y->wd, NULL, n, I, H);
    for (size_t i = 0; i < (size_t)n * H; i++) x[i] += xn[i];

    if (li == 0 && h_layer0) memcpy(h_layer0, x, sizeof(float) * (size_t)n * H);
  }

  rmsnorm(xn, x, l->norm, n, H, l->eps);
  if (h_norm) memcpy(h_norm, xn, sizeof(float) * (size_t)n * H);
  for (int t = logp_all ? 0 : n - 1; t < n && (logp_all || logp_last); t++) {
    matmul(logits, xn + (size_t)t * H, l->head, NULL, 1, H, V);
    if (logp_all) log_softmax(logp_all + (size_t)t * V, logits, V);
    if (logp_last && t == n - 1) {
      if (logp_all)
        memcpy(logp_last, logp_all + (size_t)t * V, sizeof(float) * (size_t)V);
      else
        log_softmax(logp_last, logits, V);
    }
  }
  kv->len += n;

done:
  free(x);
  free(xn);
  free(q);
  free(att);
  free(g);
  free(u);
  free(cs);
  free(sc);
  free(logits);
  return st;
}

/* ---- generation ------------------------------------------------------------------------------- */

int ref_silent_pass(int *run, int32_t token) {
  for (size_t i = 0; i < sizeof silent_tokens / sizeof silent_tokens[0]; i++)
    if (silent_tokens[i] == token) {
      if (*run <= MAX_SILENT_RUN) ++*run; /* saturates: no overflow on endless runs */
      return *run <= MAX_SILENT_RUN;
    }
  *run = 0;
  return 1;
}

cosy_status ref_llm_generate(const ref_llm *l, const float *lm_input, int L, int min_len,
                             int max_len, const cosy_sampling *s, cosy_rng *rng, ref_token_fn fn,
                             void *user, int *n_generated) {
  if (n_generated) *n_generated = 0;
  if (!l || !lm_input || !rng)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_generate: NULL llm, input or rng");
  if (L < 1 || L > (1 << 20))
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_generate: input length %d out of range", L);
  if (max_len < 0 || max_len > (1 << 20) || min_len < 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "ref_llm_generate: bad min_len %d / max_len %d",
                    min_len, max_len);
  cosy_status st = cosy_sampling_check(s);
  if (st != COSY_OK) return st;
  if (max_len == 0) return COSY_OK;

  const int V = l->speech_vocab;
  ref_kv *kv = NULL;
  float *logp = cosy_malloc(sizeof(float) * (size_t)V);
  float *scratch = cosy_malloc(sizeof(float) * COSY_SAMPLE_SCRATCH(V));
  float *e = cosy_malloc(sizeof(float) * (size_t)l->H);
  int32_t *hist = cosy_malloc(sizeof(int32_t) * (size_t)max_len);
  if (!logp || !scratch || !e || !hist) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  if ((st = ref_kv_create(l, L + max_len, &kv)) != COSY_OK) goto done;
  if ((st = ref_llm_forward(l, kv, lm_input, L, NULL, logp, NULL, NULL)) != COSY_OK) goto done;

  int n = 0, silent_run = 0;
  for (int i = 0; i < max_len; i++) {
    int32_t tok = cosy_sample_ras(logp, V, hist, n, s, i < min_len, rng, scratch);
    if (tok < 0) {
      st = COSY_ERR_INTERNAL;
      goto done; /* message set by the sampler */
    }
    if (tok >= l->speech_tokens) break; /* stop id, not emitted */
    hist[n++] = tok;
    if (n_generated) *n_generated = n;
    if (ref_silent_pass(&silent_run, tok) && fn && fn(user, tok)) {
      st = cosy_err(COSY_ERR_CANCELLED, "ref_llm_generate: cancelled after %d tokens", n);
      goto done;
    }
    if (i + 1 == max_len) break;
    ref_llm_embed_speech(l, tok, e);
    if ((st = ref_llm_forward(l, kv, e, 1, NULL, logp, NULL, NULL)) != COSY_OK) goto done;
  }

done:
  ref_kv_free(kv);
  free(logp);
  free(scratch);
  free(e);
  free(hist);
  return st;
}
