/* model.c - load and validate a libcosyvoice model file; see model.h and docs/model-format.md. */
#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ---- numeric conversion ----------------------------------------------------------------- */

float cosy_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float cosy_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else { /* subnormal */
      float f = ldexpf((float)man, -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

void cosy_to_f32(const void *src, uint32_t type, float *dst, size_t n) {
  const uint16_t *h = (const uint16_t *)src;
  switch (type) {
    case GGML_F32: memcpy(dst, src, n * 4); break;
    case GGML_BF16: for (size_t i = 0; i < n; i++) dst[i] = cosy_bf16_to_f32(h[i]); break;
    case GGML_F16: for (size_t i = 0; i < n; i++) dst[i] = cosy_f16_to_f32(h[i]); break;
    default: memset(dst, 0, n * 4); break;
  }
}

/* ---- expected tensor table ---------------------------------------------------------------- */

typedef struct want {
  char name[96];
  int n_dims;
  int64_t shape[4]; /* PyTorch order */
  int weight;       /* 1: stored in the file's weight type; 0: f32 */
} want;

typedef struct wantlist {
  want *v;
  size_t n, cap;
  int oom;
} wantlist;

static void add(wantlist *l, int weight, int nd, int64_t a, int64_t b, int64_t c, const char *fmt,
                ...) COSY_PRINTF(7, 8);
static void add(wantlist *l, int weight, int nd, int64_t a, int64_t b, int64_t c, const char *fmt,
                ...) {
  if (l->oom) return;
  if (l->n == l->cap) {
    size_t nc = l->cap ? 2 * l->cap : 512;
    want *nv = (want *)cosy_realloc(l->v, nc * sizeof *nv);
    if (!nv) { l->oom = 1; return; }
    l->v = nv;
    l->cap = nc;
  }
  want *w = &l->v[l->n++];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->name, sizeof w->name, fmt, ap);
  va_end(ap);
  w->n_dims = nd;
  w->shape[0] = a; w->shape[1] = b; w->shape[2] = c; w->shape[3] = 1;
  /* only LLM / flow tensors of 2+ dims use the weight type */
  w->weight = weight && nd >= 2;
}
#define V(l, n, ...) add(l, 1, 1, n, 1, 1, __VA_ARGS__)
#define M(l, r, c, ...) add(l, 1, 2, r, c, 1, __VA_ARGS__)
#define C3(l, o, i, k, ...) add(l, 1, 3, o, i, k, __VA_ARGS__)

static void expected_llm(const cosy_hparams *h, wantlist *l) {
  int H = h->llm_hidden, q = h->llm_heads * h->llm_head_dim, kv = h->llm_kv_heads * h->llm_head_dim;
  M(l, h->text_vocab, H, "llm.embed_tokens.weight");
  for (int i = 0; i < h->llm_layers; i++) {
    M(l, q, H, "llm.layers.%d.self_attn.q_proj.weight", i);
    V(l, q, "llm.layers.%d.self_attn.q_proj.bias", i);
    M(l, kv, H, "llm.layers.%d.self_attn.k_proj.weight", i);
    V(l, kv, "llm.layers.%d.self_attn.k_proj.bias", i);
    M(l, kv, H, "llm.layers.%d.self_attn.v_proj.weight", i);
    V(l, kv, "llm.layers.%d.self_attn.v_proj.bias", i);
    M(l, H, q, "llm.layers.%d.self_attn.o_proj.weight", i);
    M(l, h->llm_inter, H, "llm.layers.%d.mlp.gate_proj.weight", i);
    M(l, h->llm_inter, H, "llm.layers.%d.mlp.up_proj.weight", i);
    M(l, H, h->llm_inter, "llm.layers.%d.mlp.down_proj.weight", i);
    V(l, H, "llm.layers.%d.input_layernorm.weight", i);
    V(l, H, "llm.layers.%d.post_attention_layernorm.weight", i);
  }
  V(l, H, "llm.norm.weight");
  M(l, h->speech_vocab, H, "llm.speech_embedding.weight");
  M(l, h->speech_vocab, H, "llm.llm_decoder.weight");
}

static void expected_flow(const cosy_hparams *h, wantlist *l) {
  int D = h->dit_dim, mel = h->mel_dim, P = h->pre_channels, cin = D / h->conv_pos_groups;
  M(l, h->flow_vocab, mel, "flow.input_embedding.weight");
  M(l, mel, h->spk_dim, "flow.spk_embed_affine_layer.weight");
  V(l, mel, "flow.spk_embed_affine_layer.bias");
  C3(l, P, mel, h->pre_lookahead + 1, "flow.pre_lookahead_layer.conv1.weight");
  V(l, P, "flow.pre_lookahead_layer.conv1.bias");
  C3(l, mel, P, 3, "flow.pre_lookahead_layer.conv2.weight");
  V(l, mel, "flow.pre_lookahead_layer.conv2.bias");
  M(l, D, 256, "flow.dit.time_embed.time_mlp.0.weight");
  V(l, D, "flow.dit.time_embed.time_mlp.0.bias");
  M(l, D, D, "flow.dit.time_embed.time_mlp.2.weight");
  V(l, D, "flow.dit.time_embed.time_mlp.2.bias");
  M(l, D, 4 * mel, "flow.dit.input_embed.proj.weight");
  V(l, D, "flow.dit.input_embed.proj.bias");
  for (int c = 1; c <= 2; c++) {
    C3(l, D, cin, h->conv_pos_kernel, "flow.dit.input_embed.conv_pos_embed.conv%d.0.weight", c);
    V(l, D, "flow.dit.input_embed.conv_pos_embed.conv%d.0.bias", c);
  }
  for (int i = 0; i < h->dit_depth; i++) {
    M(l, 6 * D, D, "flow.dit.transformer_blocks.%d.attn_norm.linear.weight", i);
    V(l, 6 * D, "flow.dit.transformer_blocks.%d.attn_norm.linear.bias", i);
    static const char *qkvo[] = {"to_q", "to_k", "to_v", "to_out.0"};
    for (int j = 0; j < 4; j++) {
      M(l, D, D, "flow.dit.transformer_blocks.%d.attn.%s.weight", i, qkvo[j]);
      V(l, D, "flow.dit.transformer_blocks.%d.attn.%s.bias", i, qkvo[j]);
    }
    M(l, h->dit_ff, D, "flow.dit.transformer_blocks.%d.ff.ff.0.0.weight", i);
    V(l, h->dit_ff, "flow.dit.transformer_blocks.%d.ff.ff.0.0.bias", i);
    M(l, D, h->dit_ff, "flow.dit.transformer_blocks.%d.ff.ff.2.weight", i);
    V(l, D, "flow.dit.transformer_blocks.%d.ff.ff.2.bias", i);
  }
  M(l, 2 * D, D, "flow.dit.norm_out.linear.weight");
  V(l, 2 * D, "flow.dit.norm_out.linear.bias");
  M(l, mel, D, "flow.dit.proj_out.weight");
  V(l, mel, "flow.dit.proj_out.bias");
  add(l, 0, 2, mel, h->noise_frames, 1, "flow.noise");
}

static void expected_hift(const cosy_hparams *h, wantlist *l) {
  int C = h->hift_ch, Cc = h->hift_cond_ch, nf = h->n_fft / 2 + 1;
  add(l, 0, 2, 1, h->nb_harmonics + 1, 1, "hift.m_source.l_linear.weight");
  add(l, 0, 1, 1, 1, 1, "hift.m_source.l_linear.bias");
  add(l, 0, 3, C, h->mel_dim, h->conv_pre_look_right + 1, "hift.conv_pre.weight");
  add(l, 0, 1, C, 1, 1, "hift.conv_pre.bias");
  add(l, 0, 3, Cc, h->mel_dim, 4, "hift.f0_predictor.condnet.0.weight");
  add(l, 0, 1, Cc, 1, 1, "hift.f0_predictor.condnet.0.bias");
  for (int j = 2; j <= 8; j += 2) {
    add(l, 0, 3, Cc, Cc, 3, "hift.f0_predictor.condnet.%d.weight", j);
    add(l, 0, 1, Cc, 1, 1, "hift.f0_predictor.condnet.%d.bias", j);
  }
  add(l, 0, 2, 1, Cc, 1, "hift.f0_predictor.classifier.weight");
  add(l, 0, 1, 1, 1, 1, "hift.f0_predictor.classifier.bias");
  int ch = C;
  for (int i = 0; i < 3; i++) {
    int co = ch / 2;
    int stride = 1;
    for (int j = i + 1; j < 3; j++) stride *= h->up_rates[j];
    add(l, 0, 3, co, ch, h->up_kernels[i], "hift.ups.%d.weight", i);
    add(l, 0, 1, co, 1, 1, "hift.ups.%d.bias", i);
    add(l, 0, 3, co, 2 * nf, stride == 1 ? 1 : 2 * stride, "hift.source_downs.%d.weight", i);
    add(l, 0, 1, co, 1, 1, "hift.source_downs.%d.bias", i);
    for (int pass = 0; pass < 2; pass++) {
      int nk = pass == 0 ? 1 : 3;
      for (int r = 0; r < nk; r++) {
        const char *pfx = pass == 0 ? "source_resblocks" : "resblocks";
        int idx = pass == 0 ? i : 3 * i + r;
        int k = pass == 0 ? h->src_rb_kernels[i] : h->rb_kernels[r];
        for (int cv = 1; cv <= 2; cv++)
          for (int j = 0; j < 3; j++) {
            add(l, 0, 3, co, co, k, "hift.%s.%d.convs%d.%d.weight", pfx, idx, cv, j);
            add(l, 0, 1, co, 1, 1, "hift.%s.%d.convs%d.%d.bias", pfx, idx, cv, j);
            add(l, 0, 1, co, 1, 1, "hift.%s.%d.activations%d.%d.alpha", pfx, idx, cv, j);
          }
      }
    }
    ch = co;
  }
  add(l, 0, 3, 2 * nf, ch, 7, "hift.conv_post.weight");
  add(l, 0, 1, 2 * nf, 1, 1, "hift.conv_post.bias");
}

/* front end (optional): shapes as tools/frontend_convert.py writes them */
static void expected_s3tok(const cosy_hparams *h, wantlist *l) {
  if (!h->has_s3tok) return;
  int S = h->s3_state;
  add(l, 0, 3, S, h->s3_mels, 3, "s3tok.conv1.weight");
  add(l, 0, 1, S, 1, 1, "s3tok.conv1.bias");
  add(l, 0, 3, S, S, 3, "s3tok.conv2.weight");
  add(l, 0, 1, S, 1, 1, "s3tok.conv2.bias");
  for (int i = 0; i < h->s3_layers; i++) {
    static const char *vec[] = {"attn_ln.weight", "attn_ln.bias", "attn.query.bias",
                                "attn.value.bias", "attn.out.bias", "mlp_ln.weight", "mlp_ln.bias",
                                "mlp.2.bias"};
    static const char *mat[] = {"attn.query.weight", "attn.key.weight", "attn.value.weight",
                                "attn.out.weight"};
    for (int j = 0; j < 8; j++) add(l, 0, 1, S, 1, 1, "s3tok.blocks.%d.%s", i, vec[j]);
    for (int j = 0; j < 4; j++) add(l, 0, 2, S, S, 1, "s3tok.blocks.%d.%s", i, mat[j]);
    add(l, 0, 2, S, h->s3_fsmn_kernel, 1, "s3tok.blocks.%d.attn.fsmn.weight", i);
    add(l, 0, 2, 4 * S, S, 1, "s3tok.blocks.%d.mlp.0.weight", i);
    add(l, 0, 1, 4 * S, 1, 1, "s3tok.blocks.%d.mlp.0.bias", i);
    add(l, 0, 2, S, 4 * S, 1, "s3tok.blocks.%d.mlp.2.weight", i);
  }
  add(l, 0, 2, 8, S, 1, "s3tok.project_down.weight");
  add(l, 0, 1, 8, 1, 1, "s3tok.project_down.bias");
}

static void add4(wantlist *l, int64_t a, int64_t b, int64_t c, int64_t d, const char *name) {
  add(l, 0, 3, a, b, c, "%s", name);
  if (!l->oom) { l->v[l->n - 1].n_dims = 4; l->v[l->n - 1].shape[3] = d; }
}

static void expected_campplus(const cosy_hparams *h, wantlist *l) {
  if (!h->has_campplus) return;
  static const char *convs[] = {"head.conv1", "head.layer1.0.conv1", "head.layer1.0.conv2",
                                "head.layer1.0.shortcut", "head.layer1.1.conv1",
                                "head.layer1.1.conv2", "head.layer2.0.conv1", "head.layer2.0.conv2",
                                "head.layer2.0.shortcut", "head.layer2.1.conv1",
                                "head.layer2.1.conv2", "head.conv2"};
  int M = h->cam_m_channels, G = h->cam_growth, Bn = h->cam_bn_channels;
  char nm[96];
  for (int i = 0; i < 12; i++) {
    int k = strstr(convs[i], "shortcut") ? 1 : 3;
    snprintf(nm, sizeof nm, "campplus.%s.weight", convs[i]);
    add4(l, M, i == 0 ? 1 : M, k, k, nm);
    add(l, 0, 1, M, 1, 1, "campplus.%s.bias", convs[i]);
  }
  add(l, 0, 3, h->cam_init_channels, M * (h->cam_feat_dim / 8), 5, "campplus.tdnn.weight");
  add(l, 0, 1, h->cam_init_channels, 1, 1, "campplus.tdnn.bias");
  int C = h->cam_init_channels;
  for (int b = 0; b < 3; b++) {
    for (int j = 0; j < h->cam_layers[b]; j++) {
      int cin = C + j * G;
      add(l, 0, 1, cin, 1, 1, "campplus.block%d.%d.bn1.scale", b + 1, j);
      add(l, 0, 1, cin, 1, 1, "campplus.block%d.%d.bn1.shift", b + 1, j);
      add(l, 0, 2, Bn, cin, 1, "campplus.block%d.%d.linear1.weight", b + 1, j);
      add(l, 0, 1, Bn, 1, 1, "campplus.block%d.%d.linear1.bias", b + 1, j);
      add(l, 0, 3, G, Bn, h->cam_kernels[b], "campplus.block%d.%d.local.weight", b + 1, j);
      add(l, 0, 2, Bn / 2, Bn, 1, "campplus.block%d.%d.cam1.weight", b + 1, j);
      add(l, 0, 1, Bn / 2, 1, 1, "campplus.block%d.%d.cam1.bias", b + 1, j);
      add(l, 0, 2, G, Bn / 2, 1, "campplus.block%d.%d.cam2.weight", b + 1, j);
      add(l, 0, 1, G, 1, 1, "campplus.block%d.%d.cam2.bias", b + 1, j);
    }
    C += h->cam_layers[b] * G;
    add(l, 0, 1, C, 1, 1, "campplus.transit%d.bn.scale", b + 1);
    add(l, 0, 1, C, 1, 1, "campplus.transit%d.bn.shift", b + 1);
    add(l, 0, 2, C / 2, C, 1, "campplus.transit%d.linear.weight", b + 1);
    add(l, 0, 1, C / 2, 1, 1, "campplus.transit%d.linear.bias", b + 1);
    C /= 2;
  }
  add(l, 0, 2, h->cam_embedding, 2 * C, 1, "campplus.dense.weight");
  add(l, 0, 1, h->cam_embedding, 1, 1, "campplus.dense.bias");
}

/* ---- hyperparameters ---------------------------------------------------------------------- */

static cosy_status get_int(const gguf_file *f, const char *key, int lo, int hi, int *out) {
  uint32_t v;
  cosy_status st = gguf_get_u32(f, key, &v);
  if (st) return st;
  if ((int64_t)v < lo || (int64_t)v > hi)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "key %s = %u is outside [%d, %d]", key, v, lo, hi);
  *out = (int)v;
  return COSY_OK;
}

static cosy_status get_flt(const gguf_file *f, const char *key, float lo, float hi, float *out) {
  cosy_status st = gguf_get_f32(f, key, out);
  if (st) return st;
  if (!(*out >= lo && *out <= hi))
    return cosy_err(COSY_ERR_MODEL_FORMAT, "key %s = %g is outside [%g, %g]", key, (double)*out,
                    (double)lo, (double)hi);
  return COSY_OK;
}

static cosy_status get_arr3(const gguf_file *f, const char *key, int lo, int hi, int out[3]) {
  uint32_t v[3];
  uint64_t n;
  cosy_status st = gguf_get_arr_u32(f, key, v, 3, &n);
  if (st) return st;
  if (n != 3) return cosy_err(COSY_ERR_MODEL_FORMAT, "key %s has %llu values, expected 3", key,
                              (unsigned long long)n);
  for (int i = 0; i < 3; i++) {
    if ((int64_t)v[i] < lo || (int64_t)v[i] > hi)
      return cosy_err(COSY_ERR_MODEL_FORMAT, "key %s[%d] = %u is outside [%d, %d]", key, i, v[i],
                      lo, hi);
    out[i] = (int)v[i];
  }
  return COSY_OK;
}

static cosy_status read_hparams(const gguf_file *f, cosy_hparams *h) {
  cosy_status st;
  gguf_str s;
  if ((st = gguf_get_str(f, "general.architecture", &s))) return st;
  if (s.n != 10 || memcmp(s.p, "cosyvoice3", 10) != 0)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "general.architecture is \"%.*s\", expected \"cosyvoice3\"",
                    (int)(s.n > 64 ? 64 : s.n), s.p);
  uint32_t ver;
  if ((st = gguf_get_u32(f, "cosyvoice.format_version", &ver))) return st;
  if (ver != COSY_MODEL_FORMAT_VERSION)
    return cosy_err(COSY_ERR_MODEL_VERSION,
                    "model format version %u is not supported by this library (it reads version %d); "
                    "re-convert the model with this release's cosyvoice-convert",
                    ver, COSY_MODEL_FORMAT_VERSION);
  if ((st = gguf_get_str(f, "cosyvoice.weight_dtype", &s))) return st;
  if (s.n == 3 && !memcmp(s.p, "f32", 3)) h->weight_type = GGML_F32;
  else if (s.n == 3 && !memcmp(s.p, "f16", 3)) h->weight_type = GGML_F16;
  else if (s.n == 4 && !memcmp(s.p, "bf16", 4)) h->weight_type = GGML_BF16;
  else return cosy_err(COSY_ERR_MODEL_FORMAT, "cosyvoice.weight_dtype \"%.*s\" is not f32/f16/bf16",
                       (int)(s.n > 16 ? 16 : s.n), s.p);
#define GI(key, lo, hi, dst) if ((st = get_int(f, key, lo, hi, dst))) return st
#define GF(key, lo, hi, dst) if ((st = get_flt(f, key, lo, hi, dst))) return st
  GI("cosyvoice.llm.hidden_size", 64, 16384, &h->llm_hidden);
  GI("cosyvoice.llm.n_layers", 1, 256, &h->llm_layers);
  GI("cosyvoice.llm.n_heads", 1, 256, &h->llm_heads);
  GI("cosyvoice.llm.n_kv_heads", 1, 256, &h->llm_kv_heads);
  GI("cosyvoice.llm.head_dim", 64, 64, &h->llm_head_dim);
  GI("cosyvoice.llm.intermediate_size", 1, 65536, &h->llm_inter);
  GI("cosyvoice.llm.text_vocab_size", 256, 1 << 20, &h->text_vocab);
  GI("cosyvoice.llm.speech_vocab_size", 6565, 65536, &h->speech_vocab);
  GI("cosyvoice.llm.speech_token_size", 6561, 6561, &h->speech_tokens);
  GF("cosyvoice.llm.rope_theta", 1.0f, 1e9f, &h->rope_theta);
  GF("cosyvoice.llm.rms_norm_eps", 0.0f, 1e-2f, &h->rms_eps);
  if (h->llm_heads % h->llm_kv_heads)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "llm heads %d are not a multiple of kv heads %d",
                    h->llm_heads, h->llm_kv_heads);
  GI("cosyvoice.flow.mel_dim", 80, 80, &h->mel_dim);
  GI("cosyvoice.flow.spk_embed_dim", 192, 192, &h->spk_dim);
  GI("cosyvoice.flow.vocab_size", 6561, 6561, &h->flow_vocab);
  GI("cosyvoice.flow.pre_lookahead_len", 3, 3, &h->pre_lookahead);
  GI("cosyvoice.flow.pre_channels", 1, 16384, &h->pre_channels);
  GI("cosyvoice.flow.dit_dim", 64, 16384, &h->dit_dim);
  GI("cosyvoice.flow.dit_depth", 1, 256, &h->dit_depth);
  GI("cosyvoice.flow.dit_heads", 1, 256, &h->dit_heads);
  GI("cosyvoice.flow.dit_head_dim", 64, 64, &h->dit_head_dim);
  GI("cosyvoice.flow.dit_ff_dim", 1, 65536, &h->dit_ff);
  GI("cosyvoice.flow.conv_pos_kernel", 1, 255, &h->conv_pos_kernel);
  GI("cosyvoice.flow.conv_pos_groups", 1, 1024, &h->conv_pos_groups);
  GI("cosyvoice.flow.static_chunk_size", 50, 50, &h->chunk_frames);
  GI("cosyvoice.flow.token_mel_ratio", 2, 2, &h->token_mel_ratio);
  GI("cosyvoice.flow.n_timesteps", 1, 1000, &h->n_timesteps);
  GI("cosyvoice.flow.noise_frames", 100, 1 << 20, &h->noise_frames);
  GF("cosyvoice.flow.cfg_rate", 0.0f, 10.0f, &h->cfg_rate);
  if (h->dit_heads * h->dit_head_dim != h->dit_dim || h->dit_dim % h->conv_pos_groups)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "flow geometry: dim %d != heads %d x 64 or not %d groups",
                    h->dit_dim, h->dit_heads, h->conv_pos_groups);
  GI("cosyvoice.hift.base_channels", 8, 8192, &h->hift_ch);
  GI("cosyvoice.hift.cond_channels", 1, 8192, &h->hift_cond_ch);
  GI("cosyvoice.hift.nb_harmonics", 1, 64, &h->nb_harmonics);
  GI("cosyvoice.hift.sample_rate", 24000, 24000, &h->sample_rate);
  GI("cosyvoice.hift.istft_n_fft", 16, 16, &h->n_fft);
  GI("cosyvoice.hift.istft_hop", 4, 4, &h->hop);
  GI("cosyvoice.hift.conv_pre_look_right", 4, 4, &h->conv_pre_look_right);
  if ((st = get_arr3(f, "cosyvoice.hift.upsample_rates", 1, 64, h->up_rates))) return st;
  if ((st = get_arr3(f, "cosyvoice.hift.upsample_kernel_sizes", 1, 255, h->up_kernels))) return st;
  if ((st = get_arr3(f, "cosyvoice.hift.resblock_kernel_sizes", 1, 255, h->rb_kernels))) return st;
  if ((st = get_arr3(f, "cosyvoice.hift.resblock_dilations", 1, 255, h->rb_dilations))) return st;
  if ((st = get_arr3(f, "cosyvoice.hift.source_resblock_kernel_sizes", 1, 255, h->src_rb_kernels)))
    return st;
  if (h->up_rates[0] * h->up_rates[1] * h->up_rates[2] * h->hop != 480 || h->up_rates[2] != 3 ||
      h->up_rates[1] != 5 || h->hift_ch % 8)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "hift geometry: upsample rates %d,%d,%d (need 8,5,3) or "
                    "channels %d (need a multiple of 8)",
                    h->up_rates[0], h->up_rates[1], h->up_rates[2], h->hift_ch);
  GF("cosyvoice.hift.nsf_alpha", 0.0f, 10.0f, &h->nsf_alpha);
  GF("cosyvoice.hift.nsf_sigma", 0.0f, 10.0f, &h->nsf_sigma);
  GF("cosyvoice.hift.voiced_threshold", 0.0f, 1e4f, &h->voiced_threshold);
  GF("cosyvoice.hift.lrelu_slope", 0.0f, 1.0f, &h->lrelu_slope);
  GF("cosyvoice.hift.audio_limit", 0.0f, 1.0f, &h->audio_limit);
  GI("tokenizer.ggml.eos_token_id", 0, h->text_vocab - 1, &h->eos_id);
  GI("cosyvoice.tokenizer.endofprompt_id", 0, h->text_vocab - 1, &h->endofprompt_id);
  /* optional front end: present when its first key is */
  if (gguf_find_kv(f, "cosyvoice.s3tok.n_state")) {
    h->has_s3tok = 1;
    GI("cosyvoice.s3tok.n_mels", 128, 128, &h->s3_mels);
    GI("cosyvoice.s3tok.n_state", 64, 16384, &h->s3_state);
    GI("cosyvoice.s3tok.n_head", 1, 256, &h->s3_heads);
    GI("cosyvoice.s3tok.n_layer", 1, 256, &h->s3_layers);
    GI("cosyvoice.s3tok.fsmn_kernel", 1, 255, &h->s3_fsmn_kernel);
    GF("cosyvoice.s3tok.ln_eps", 0.0f, 1e-2f, &h->s3_ln_eps);
    GF("cosyvoice.s3tok.rope_theta", 1.0f, 1e9f, &h->s3_rope_theta);
    GF("cosyvoice.s3tok.fsq_scale", 0.5f, 1.0f, &h->s3_fsq_scale);
    if (h->s3_heads * 64 != h->s3_state)
      return cosy_err(COSY_ERR_MODEL_FORMAT, "speech tokenizer: width %d is not heads %d x 64",
                      h->s3_state, h->s3_heads);
  }
  if (gguf_find_kv(f, "cosyvoice.campplus.feat_dim")) {
    h->has_campplus = 1;
    GI("cosyvoice.campplus.feat_dim", 80, 80, &h->cam_feat_dim);
    GI("cosyvoice.campplus.m_channels", 1, 1024, &h->cam_m_channels);
    GI("cosyvoice.campplus.init_channels", 2, 8192, &h->cam_init_channels);
    GI("cosyvoice.campplus.growth_rate", 1, 1024, &h->cam_growth);
    GI("cosyvoice.campplus.bn_channels", 2, 8192, &h->cam_bn_channels);
    GI("cosyvoice.campplus.embedding_size", 192, 192, &h->cam_embedding);
    GI("cosyvoice.campplus.n_blocks", 3, 3, &h->cam_layers[0]);
    GI("cosyvoice.campplus.seg_len", 1, 10000, &h->cam_seg_len);
    if ((st = get_arr3(f, "cosyvoice.campplus.block_layers", 1, 256, h->cam_layers))) return st;
    if ((st = get_arr3(f, "cosyvoice.campplus.block_kernels", 1, 31, h->cam_kernels))) return st;
    if ((st = get_arr3(f, "cosyvoice.campplus.block_dilations", 1, 64, h->cam_dilations)))
      return st;
    int C = h->cam_init_channels;
    for (int b = 0; b < 3; b++) {
      C += h->cam_layers[b] * h->cam_growth;
      if (C % 2 || h->cam_kernels[b] % 2 == 0)
        return cosy_err(COSY_ERR_MODEL_FORMAT, "CAM++: block %d has %d channels (odd) or an even "
                        "kernel %d", b + 1, C, h->cam_kernels[b]);
      C /= 2;
    }
    if (h->cam_bn_channels % 2)
      return cosy_err(COSY_ERR_MODEL_FORMAT, "CAM++: odd bottleneck width %d", h->cam_bn_channels);
  }
#undef GI
#undef GF
  return COSY_OK;
}

static cosy_status read_tokenizer(cosy_model *m) {
  const gguf_file *f = m->f;
  cosy_hparams *h = &m->hp;
  gguf_str s;
  cosy_status st;
  if ((st = gguf_get_str(f, "tokenizer.ggml.model", &s))) return st;
  if (s.n != 4 || memcmp(s.p, "gpt2", 4))
    return cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer.ggml.model is not \"gpt2\" (byte-level BPE)");
  const gguf_kv *kt = gguf_find_kv(f, "tokenizer.ggml.tokens");
  const gguf_kv *ky = gguf_find_kv(f, "tokenizer.ggml.token_type");
  const gguf_kv *km = gguf_find_kv(f, "tokenizer.ggml.merges");
  if (!kt || !ky || !km)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer: key tokenizer.ggml.%s is missing",
                    !kt ? "tokens" : !ky ? "token_type" : "merges");
  if (kt->n < 256 || kt->n > (uint64_t)h->text_vocab)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer: %llu tokens for a text embedding of %d rows",
                    (unsigned long long)kt->n, h->text_vocab);
  if (ky->n != kt->n || ky->type != GGUF_T_ARRAY || ky->arr_type != GGUF_T_INT32)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer: token_type must be %llu i32 values",
                    (unsigned long long)kt->n);
  h->n_tokens = (int)kt->n;
  h->n_merges = (int)km->n;
  m->tokens = (gguf_str *)cosy_calloc(kt->n, sizeof *m->tokens);
  m->merges = (gguf_str *)cosy_calloc(km->n ? km->n : 1, sizeof *m->merges);
  m->token_types = (int32_t *)cosy_calloc(kt->n, sizeof *m->token_types);
  if (!m->tokens || !m->merges || !m->token_types) return COSY_ERR_NO_MEMORY;
  uint64_t n;
  if ((st = gguf_get_arr_str(f, "tokenizer.ggml.tokens", m->tokens, kt->n, &n))) return st;
  if ((st = gguf_get_arr_str(f, "tokenizer.ggml.merges", m->merges, km->n, &n))) return st;
  memcpy(m->token_types, ky->data, kt->n * 4);
  for (int i = 0; i < h->n_tokens; i++)
    if (m->tokens[i].n == 0)
      return cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer: token %d is empty", i);
  if (h->eos_id >= h->n_tokens || h->endofprompt_id >= h->n_tokens)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer: eos/endofprompt ids beyond the vocabulary");
  return COSY_OK;
}

static void fmt_shape(char *buf, size_t cap, int nd, const int64_t *torch_shape) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < nd && o < cap; i++)
    o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? "x" : "", (long long)torch_shape[i]);
}

static cosy_status check_tensors(cosy_model *m) {
  wantlist l = {0};
  expected_llm(&m->hp, &l);
  expected_flow(&m->hp, &l);
  expected_hift(&m->hp, &l);
  expected_s3tok(&m->hp, &l);
  expected_campplus(&m->hp, &l);
  cosy_status st = COSY_OK;
  if (l.oom) { st = cosy_err(COSY_ERR_NO_MEMORY, "out of memory"); goto done; }
  for (size_t i = 0; i < l.n && !st; i++) {
    const want *w = &l.v[i];
    const gguf_tensor *t = gguf_find_tensor(m->f, w->name);
    uint32_t type = w->weight ? m->hp.weight_type : GGML_F32;
    char ws[64], fs[64];
    fmt_shape(ws, sizeof ws, w->n_dims, w->shape);
    if (!t) {
      st = cosy_err(COSY_ERR_MODEL_FORMAT, "tensor %s (%s %s) is missing from the model file",
                    w->name, ws, gguf_type_name(type));
      break;
    }
    int64_t fshape[4];
    for (uint32_t d = 0; d < t->n_dims; d++) fshape[d] = t->ne[t->n_dims - 1 - d];
    fmt_shape(fs, sizeof fs, (int)t->n_dims, fshape);
    int ok = (int)t->n_dims == w->n_dims;
    for (int d = 0; ok && d < w->n_dims; d++) ok = fshape[d] == w->shape[d];
    if (!ok || t->type != type)
      st = cosy_err(COSY_ERR_MODEL_FORMAT, "tensor %s: expected %s %s, file has %s %s", w->name, ws,
                    gguf_type_name(type), fs, gguf_type_name(t->type));
  }
  if (!st && m->f->n_tensors != l.n) {
    /* every expected tensor is present, so something else is there too: name it */
    for (uint64_t i = 0; i < m->f->n_tensors; i++) {
      int found = 0;
      for (size_t j = 0; j < l.n && !found; j++) found = !strcmp(l.v[j].name, m->f->tensors[i].name);
      if (!found) {
        st = cosy_err(COSY_ERR_MODEL_FORMAT, "tensor %s is not part of this model format",
                      m->f->tensors[i].name);
        break;
      }
    }
  }
done:
  free(l.v);
  return st;
}

cosy_status cosy_model_from_gguf(gguf_file *f, cosy_model **out) {
  *out = NULL;
  cosy_model *m = (cosy_model *)cosy_calloc(1, sizeof *m);
  if (!m) {
    gguf_close(f);
    return cosy_err(COSY_ERR_NO_MEMORY, "out of memory");
  }
  m->f = f;
  cosy_status st = read_hparams(f, &m->hp);
  if (!st) st = read_tokenizer(m);
  if (!st) st = check_tensors(m);
  if (st) {
    cosy_model_free(m);
    return st;
  }
  *out = m;
  return COSY_OK;
}

cosy_status cosy_model_load(const char *path, cosy_model **out) {
  gguf_file *f;
  *out = NULL;
  cosy_status st = gguf_open(path, "model", &f);
  if (st) return st;
  st = cosy_model_from_gguf(f, out);
  if (st) {
    /* prefix the path so the caller knows which file */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", cosy_last_error());
    cosy_err(st, "%s: %s", path, msg);
  }
  return st;
}

void cosy_model_free(cosy_model *m) {
  if (!m) return;
  gguf_close(m->f);
  free(m->tokens);
  free(m->merges);
  free(m->token_types);
  free(m);
}

const gguf_tensor *cosy_model_tensor(const cosy_model *m, const char *name) {
  const gguf_tensor *t = gguf_find_tensor(m->f, name);
  if (!t) cosy_err(COSY_ERR_MODEL_FORMAT, "tensor %s is not in the model", name);
  return t;
}

float *cosy_model_f32(const cosy_model *m, const char *fmt, ...) {
  char name[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  const gguf_tensor *t = cosy_model_tensor(m, name);
  if (!t) return NULL;
  size_t n = t->nbytes / gguf_type_size(t->type);
  float *out = (float *)cosy_malloc(n * sizeof *out);
  if (out) cosy_to_f32(t->data, t->type, out, n);
  return out;
}

cosy_status cosy_model_get_f32(const cosy_model *m, float **out, const char *fmt, ...) {
  char name[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  if (!cosy_model_tensor(m, name)) {
    *out = NULL;
    return COSY_ERR_MODEL_FORMAT;
  }
  *out = cosy_model_f32(m, "%s", name);
  return *out ? COSY_OK : COSY_ERR_NO_MEMORY;
}
