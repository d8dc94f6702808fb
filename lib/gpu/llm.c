/* llm.c - the speech-token LLM on the GPU; the math, precision and design are in llm.h.
 *
 * Buffers (all planned in gpu_llm_create / gpu_llm_reserve_kv, nothing allocated per step;
 * R = max(decode bucket max, max_prefill) rows, B = decode bucket max, Kx = max(H, q, I)):
 *   weights  per layer wqkv [q+2kv][H], wo [H][q], wgu [2I][H], wd [H][I] bf16; bqkv, ln1, ln2
 *            fp32; final norm fp32; speech_embedding and llm_decoder [V][H] bf16; inv_freq [32]
 *   acts     h [R][H] fp32 (residual), xs [2R][Kx] bf16 (hi rows then lo rows of a GEMM input),
 *            y2 fp32 (a GEMM's 2M output rows: max(2R x max(q+2kv, 2I, H), 2B x V)),
 *            q/att [R][q] fp32, act [B][I] fp32, logits/logp [B][V] fp32
 *   step     d_in [3][B] (tokens, slots, positions; the only per-step upload), d_pos/d_slot/
 *            d_lens [B], d_bt [B][pages_per_seq], paged-decode workspace (max over buckets)
 *   prefill  d_pf: positions [max_prefill], cache slots [max_prefill], then the attention's
 *            segment table [B] (kernels.h cosy_k_prefill_seg) and tile list [2][P/16 + B] (one
 *            upload with the positions per forward pass)
 *   tables   d_bt_all [max_open][pages_per_seq]: block table of every open sequence, written at
 *            seq_open (its pages never change while it is open)
 *   KV       one fp32 allocation: layer i's K pool at kv + 2i * pool, V pool at kv + (2i+1) *
 *            pool, pool = pages * page_size * kv elements; a page id indexes every pool.
 *            Which pages are free and which sequence holds which: kv_pool.h (host only).
 *   pinned   h_in [3][B], h_pf (as d_pf), h_emb [max_prefill][H], h_logp [B][V],
 *            h_ras [B] (sampling rows; d_ras is their device copy).
 * Layer schedules
 *   gemv (decode buckets <= gemv_max; 5 kernels per layer, attention included; buckets above 8
 *   rows run as groups of 8 rows in one grid, so every row is computed the same way whatever
 *   the batch, at the cost measured at GPU_LLM_GEMV_DEFAULT):
 *     gemv[rmsnorm(h) -> qkv + bias, RoPE, q out, K/V to cache]; paged attention -> att (one
 *     launch, splits merged by the last block); gemv[att -> h += o];
 *     gemv[rmsnorm(h) -> silu(gate) * up -> act]; gemv[act -> h += down]
 *     (all launched as programmatic dependents on sm_90, so each weight stream starts early)
 *   tc (the batch-invariant LLM, gpu_llm_set_tc; the default where the device runs it, see
 *   GPU_LLM_TC_DEFAULT): every decode bucket on the same 5-kernel schedule with the tensor-core
 *   kernels of kernels/gemv.cu (cosy_k_llm_gemv_tc: a row's sums never depend on the other
 *   rows), and layers_split's GEMMs (the prefill) on cosy_k_gemm_inv (one algorithm per shape
 *   for every row count), so a sequence's logits are the same alone or packed with any others.
 * Sampling: gpu_llm_sample runs RAS (kernels.h cosy_k_ras_sample) on the logp rows the last
 *   prefill / decode left, so a generation step moves ~100 bytes each way instead of the logp
 *   row (27 KB) and the host does no per-token vocabulary work.
 *   split (prefill, larger decode buckets; cuBLASLt on hi/lo bf16 pairs, see bf16_split.h):
 *     norm_split(h += pending delta) -> GEMM qkv (2M rows) -> rope_append(hi + lo + bias) ->
 *     attention -> split(att) -> GEMM o -> norm_split(h += o) -> GEMM gate|up -> silu_split ->
 *     GEMM down -> (pending delta, added by the next norm_split).
 *     Prefill attention (one sequence or several packed) is one cosy_k_paged_prefill launch per
 *     layer over all segments, reading K/V from the cache pages through d_bt_all.
 * Decode graphs: graphs[bucket][ctx bucket], captured with cudaStreamCaptureModeThreadLocal right
 * after a step of that shape ran eagerly (which also warms up cuBLASLt's plans and module loading
 * outside the capture): once the KV cache is reserved (gpu_llm_reserve_kv) for every batch bucket
 * of the two shortest context buckets (precapture: steps over padding rows only), later lazily
 * for the others.
 */
#include "gpu/llm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bf16_split.h"
#include "gemv.h"
#include "gpu/kv_pool.h"
#include "kernels.h"
#include "paged_kv.h"
#include "util.h"

#define HD 64
#define MAX_BUCKETS 11 /* batch buckets 1 .. 1024 (lib/engine.h COSY_GPU_MAX_ACTIVE) */
#define MIN_CTX_BUCKET 256
#define MAX_CTX_BUCKETS 8
#define ATTN_SCALE 0.125f /* 1/sqrt(64) */
#define GPU_LLM_TC_DEFAULT 1 /* 1: the batch-invariant LLM by default (every decode bucket on
                                the tensor-core fused path, kernels/gemv.cu gemv_tc; prefill
                                GEMMs on one algorithm per shape), so a request's tokens do not
                                depend on what else runs. On an H100 (bench/RESULTS.md,
                                2026-11-28 (eighth)) its decode step takes 0.86-0.88 ms at batch
                                1 and 2.05-2.10 at 64 against 0.62 / 1.73 ms for the mixed path
                                (skinny GEMM up to 4 rows, cuBLASLt above; gpu_llm_set_tc(l, 0),
                                COSY_LLM_DECODE=mixed): W1 C = 1 RTF 0.028 against 0.024, C = 64
                                2-4% less throughput, and late second chunks in every run until
                                the scheduler's yield to playback (lib/sched_llm.c), with which
                                none and 5-9% less throughput than the mixed path */
#define GPU_LLM_GEMV_DEFAULT 4 /* largest decode bucket on the fused skinny-GEMM path by
                                  default (H100: batch 8 1.39 ms that way vs 1.21 ms through
                                  cuBLASLt). Every bucket can run there in groups of 8 rows
                                  (gpu_llm_set_tuning(l, 256, -1)), which makes the step batch-
                                  invariant, but each group streams the weights again: batch 16
                                  2.42 ms, batch 64 8.12 ms (vs 1.29 / 1.81 ms), W1 at C = 64
                                  132x instead of 187x real time (bench/RESULTS.md) */

typedef struct gl_layer {
  cosy_bf16 *wqkv, *wo, *wgu, *wd;
  float *bqkv, *ln1, *ln2;
} gl_layer;

struct gpu_llm {
  cosy_gpu *g;
  const cosy_model *m;
  const gguf_tensor *embed_tokens, *speech_emb_t;
  int H, nl, nh, nkv, inter, qd, kvd, qkvd, V, text_vocab, speech_tokens, endofprompt_id;
  float eps;
  int max_seqs, n_buckets, max_bucket, max_prefill, max_rows;
  int n_ctxb, ctxb[MAX_CTX_BUCKETS];
  int pages_per_seq;
  int gemv_max, pdl;
  int tc; /* 1: every decode bucket on the tensor-core fused path (cosy_k_llm_gemv_tc) */
  gl_layer *layers;
  float *norm, *inv_freq;
  cosy_bf16 *speech_emb, *head;
  /* activations */
  float *h, *y2, *q, *att, *act, *logits, *logp;
  cosy_bf16 *xs;
  size_t xs_bytes; /* of xs; also the tensor-core decode kernels' split rows of x */
  int32_t *d_in, *d_pos, *d_slot, *d_lens, *d_bt, *d_pf, *d_bt_all;
  int pf_ints;             /* int32s of d_pf / h_pf */
  int seg_cap, tile_cap;   /* prefill attention: segments and tiles a forward pass may have */
  void *dec_ws;
  size_t dec_ws_bytes;
  /* pinned host */
  int32_t *h_in, *h_pf;
  float *h_emb, *h_logp;
  cosy_k_ras_row *h_ras, *d_ras; /* [B] sampling rows: pinned staging, device */
  int logp_rows;                 /* rows of logits left by the last prefill / decode (0: none) */
  int logp_valid;                /* logp holds their log_softmax (else only logits do) */
  /* KV cache */
  float *kv;
  size_t kv_bytes, page_bytes, pool_elems;
  /* pages and sequences (host bookkeeping; d_bt_all is the device copy of pool.bt) */
  kv_pool pool;
  int max_open;
  unsigned *stamp, stamp_gen;
  /* decode graphs */
  cudaGraphExec_t graphs[MAX_BUCKETS][MAX_CTX_BUCKETS];
  /* COSY_LLM_PREFILL_TIMING=path (measurement aid, read at create): one line per packed
   * prefill: sequences, positions, host preparation, launch enqueue, device time and wall
   * time of the call (ms) */
  FILE *pf_timing;
  cudaEvent_t pf_ev[2];
};

/* every result goes through cosy_gpu_check (its injected failures count every checked call) */
#define CK(expr, what)                                      \
  do {                                                      \
    cosy_status ck_ = cosy_gpu_check((expr), (what));       \
    if (ck_ != COSY_OK) return ck_;                         \
  } while (0)

/* ---- weights ---------------------------------------------------------------------------------- */

/* Tensor `name` must be a [rows][K] matrix of a convertible type. */
static const gguf_tensor *get_matrix(const cosy_model *m, const char *name, int rows, int K,
                                     cosy_status *st) {
  const gguf_tensor *t = cosy_model_tensor(m, name);
  if (!t) {
    *st = COSY_ERR_MODEL_FORMAT;
    return NULL;
  }
  size_t es = gguf_type_size(t->type);
  if (es == 0 || t->nbytes != (size_t)rows * (size_t)K * es) {
    *st = cosy_err(COSY_ERR_MODEL_FORMAT, "gpu_llm: %s is not a [%d][%d] matrix of a usable type",
                   name, rows, K);
    return NULL;
  }
  return t;
}

/* Stack the named [rows_i][K] tensors into one bf16 device matrix (bf16 data is copied as is,
 * other types converted row by row; no fp32 copy of a whole tensor). */
static cosy_status upload_stack(gpu_llm *l, int K, int n, char names[][128], const int *rows,
                                cosy_bf16 **out, const char *what) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += (size_t)rows[i];
  uint16_t *buf = cosy_malloc(total * (size_t)K * 2);
  float *tmp = cosy_malloc(sizeof(float) * (size_t)K);
  cosy_status st = COSY_OK;
  if (!buf || !tmp) {
    st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  size_t r0 = 0;
  for (int i = 0; i < n; i++) {
    const gguf_tensor *t = get_matrix(l->m, names[i], rows[i], K, &st);
    if (!t) goto done;
    uint16_t *dst = buf + r0 * (size_t)K;
    if (t->type == GGML_BF16) {
      memcpy(dst, t->data, (size_t)rows[i] * (size_t)K * 2);
    } else {
      size_t es = gguf_type_size(t->type);
      for (int r = 0; r < rows[i]; r++) {
        cosy_to_f32((const uint8_t *)t->data + (size_t)r * (size_t)K * es, t->type, tmp,
                    (size_t)K);
        for (int k = 0; k < K; k++) dst[(size_t)r * K + k] = cosy_f32_to_bf16(tmp[k]);
      }
    }
    r0 += (size_t)rows[i];
  }
  void *d = NULL;
  if ((st = cosy_gpu_alloc(l->g, total * (size_t)K * 2, what, &d))) goto done;
  st = cosy_gpu_check(cudaMemcpy(d, buf, total * (size_t)K * 2, cudaMemcpyHostToDevice), what);
  *out = (cosy_bf16 *)d;
done:
  free(buf);
  free(tmp);
  return st;
}

/* Concatenate the named fp32 vectors of lengths len[i] into one fp32 device vector. */
static cosy_status upload_vecs(gpu_llm *l, int n, char names[][128], const int *len, float **out,
                               const char *what) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += (size_t)len[i];
  float *buf = cosy_malloc(sizeof(float) * total);
  if (!buf) return COSY_ERR_NO_MEMORY;
  cosy_status st = COSY_OK;
  size_t o = 0;
  for (int i = 0; i < n; i++) {
    const gguf_tensor *t = get_matrix(l->m, names[i], 1, len[i], &st);
    if (!t) goto done;
    cosy_to_f32(t->data, t->type, buf + o, (size_t)len[i]);
    o += (size_t)len[i];
  }
  void *d = NULL;
  if ((st = cosy_gpu_upload_f32(l->g, buf, total, COSY_KDT_F32, what, &d))) goto done;
  *out = (float *)d;
done:
  free(buf);
  return st;
}

static cosy_status upload_layer(gpu_llm *l, int i) {
  gl_layer *y = &l->layers[i];
  char nm[3][128];
  int rows[3];
  cosy_status st;
  snprintf(nm[0], 128, "llm.layers.%d.self_attn.q_proj.weight", i);
  snprintf(nm[1], 128, "llm.layers.%d.self_attn.k_proj.weight", i);
  snprintf(nm[2], 128, "llm.layers.%d.self_attn.v_proj.weight", i);
  rows[0] = l->qd;
  rows[1] = rows[2] = l->kvd;
  if ((st = upload_stack(l, l->H, 3, nm, rows, &y->wqkv, "LLM q|k|v weight"))) return st;
  snprintf(nm[0], 128, "llm.layers.%d.self_attn.q_proj.bias", i);
  snprintf(nm[1], 128, "llm.layers.%d.self_attn.k_proj.bias", i);
  snprintf(nm[2], 128, "llm.layers.%d.self_attn.v_proj.bias", i);
  if ((st = upload_vecs(l, 3, nm, rows, &y->bqkv, "LLM q|k|v bias"))) return st;
  snprintf(nm[0], 128, "llm.layers.%d.self_attn.o_proj.weight", i);
  rows[0] = l->H;
  if ((st = upload_stack(l, l->qd, 1, nm, rows, &y->wo, "LLM o_proj"))) return st;
  snprintf(nm[0], 128, "llm.layers.%d.mlp.gate_proj.weight", i);
  snprintf(nm[1], 128, "llm.layers.%d.mlp.up_proj.weight", i);
  rows[0] = rows[1] = l->inter;
  if ((st = upload_stack(l, l->H, 2, nm, rows, &y->wgu, "LLM gate|up"))) return st;
  snprintf(nm[0], 128, "llm.layers.%d.mlp.down_proj.weight", i);
  rows[0] = l->H;
  if ((st = upload_stack(l, l->inter, 1, nm, rows, &y->wd, "LLM down_proj"))) return st;
  snprintf(nm[0], 128, "llm.layers.%d.input_layernorm.weight", i);
  rows[0] = l->H;
  if ((st = upload_vecs(l, 1, nm, rows, &y->ln1, "LLM input_layernorm"))) return st;
  snprintf(nm[0], 128, "llm.layers.%d.post_attention_layernorm.weight", i);
  return upload_vecs(l, 1, nm, rows, &y->ln2, "LLM post_attention_layernorm");
}

/* ---- create / free ---------------------------------------------------------------------------- */

/* rows of one gemv group: buckets above GEMV_GROUP run as groups of GEMV_GROUP rows */
#define GEMV_GROUP 8
static int gemv_rows(int b) { return b < GEMV_GROUP ? b : GEMV_GROUP; }

static int bucket_ok_for_gemv(const gpu_llm *l, int b) {
  const int m = gemv_rows(b);
  return b % m == 0 && cosy_k_llm_gemv_supported(m, l->H) &&
         cosy_k_llm_gemv_supported(m, l->qd) && cosy_k_llm_gemv_supported(m, l->inter);
}

static void drop_graphs(gpu_llm *l) {
  for (int i = 0; i < MAX_BUCKETS; i++)
    for (int j = 0; j < MAX_CTX_BUCKETS; j++)
      if (l->graphs[i][j]) {
        cudaGraphExecDestroy(l->graphs[i][j]);
        l->graphs[i][j] = NULL;
      }
}

static int tc_ok(const gpu_llm *l) {
  return cosy_k_llm_gemv_tc_supported(l->qkvd, l->H, COSY_GEMV_QKV_ROPE) &&
         cosy_k_llm_gemv_tc_supported(l->H, l->qd, COSY_GEMV_ADD_F32) &&
         cosy_k_llm_gemv_tc_supported(2 * l->inter, l->H, COSY_GEMV_SILU_MUL) &&
         cosy_k_llm_gemv_tc_supported(l->H, l->inter, COSY_GEMV_ADD_F32) &&
         cosy_k_llm_gemv_tc_supported(l->V, l->H, COSY_GEMV_STORE_F32) &&
         l->g->dev.cc_major >= 8;
}

int gpu_llm_set_tc(gpu_llm *l, int on) {
  if (!l) return 0;
  if (l->g && l->g->stream) cudaStreamSynchronize(l->g->stream);
  drop_graphs(l);
  l->tc = on && tc_ok(l) ? 1 : 0;
  return l->tc;
}

int gpu_llm_tc(const gpu_llm *l) { return l ? l->tc : 0; }

void gpu_llm_set_prefill_timing(gpu_llm *l, const char *path) {
  /* one line per packed prefill (a measurement aid; none if this fails) */
  if (!l || l->pf_timing || !path || !*path) return;
  if (cudaEventCreate(&l->pf_ev[0]) == cudaSuccess) {
    if (cudaEventCreate(&l->pf_ev[1]) == cudaSuccess && (l->pf_timing = fopen(path, "w")))
      setvbuf(l->pf_timing, NULL, _IOLBF, 0);
    if (!l->pf_timing) {
      cudaEventDestroy(l->pf_ev[0]);
      cudaEventDestroy(l->pf_ev[1]); /* (a failed create leaves it NULL: a no-op) */
    }
  }
}

void gpu_llm_set_tuning(gpu_llm *l, int gemv_max, int pdl) {
  if (!l) return;
  if (l->g && l->g->stream) cudaStreamSynchronize(l->g->stream);
  drop_graphs(l);
  if (gemv_max < 0) {
    gemv_max = 0;
    for (int b = 1; b <= GPU_LLM_GEMV_DEFAULT && b <= l->max_bucket; b *= 2)
      if (bucket_ok_for_gemv(l, b)) gemv_max = b;
  }
  l->gemv_max = gemv_max;
  if (pdl < 0) pdl = l->g->dev.pdl; /* the engine's device description (kdevice.h) */
  l->pdl = pdl && l->g->dev.pdl ? 1 : 0;
}

void gpu_llm_free(gpu_llm *l) {
  if (!l) return;
  if (l->g && l->g->stream) cudaStreamSynchronize(l->g->stream);
  drop_graphs(l);
  cosy_gpu_host_free(l->h_in);
  cosy_gpu_host_free(l->h_pf);
  cosy_gpu_host_free(l->h_emb);
  cosy_gpu_host_free(l->h_logp);
  cosy_gpu_host_free(l->h_ras);
  free(l->layers);
  kv_pool_free(&l->pool);
  free(l->stamp);
  if (l->pf_timing) {
    fclose(l->pf_timing);
    cudaEventDestroy(l->pf_ev[0]);
    cudaEventDestroy(l->pf_ev[1]);
  }
  free(l);
}

static cosy_status dalloc(gpu_llm *l, size_t bytes, const char *what, void *out) {
  void *p = NULL;
  cosy_status st = cosy_gpu_alloc(l->g, bytes, what, &p);
  memcpy(out, &p, sizeof p);
  return st;
}

static cosy_status precapture(gpu_llm *l);

cosy_status gpu_llm_create(cosy_gpu *g, const cosy_model *m, int max_seqs, int max_prefill,
                           gpu_llm **out) {
  if (!out) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_create: NULL out");
  *out = NULL;
  if (!g || !m) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_create: NULL device or model");
  if (max_seqs < 1 || max_seqs > (1 << (MAX_BUCKETS - 1)))
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_create: max_seqs %d not in [1, %d]", max_seqs,
                    1 << (MAX_BUCKETS - 1));
  if (max_prefill < 1 || max_prefill > GPU_LLM_MAX_CTX)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_create: max_prefill %d not in [1, %d]",
                    max_prefill, GPU_LLM_MAX_CTX);
  const cosy_hparams *hp = &m->hp;
  if (hp->llm_head_dim != HD)
    return cosy_err(COSY_ERR_UNSUPPORTED, "gpu_llm_create: head_dim %d (the kernels need 64)",
                    hp->llm_head_dim);
  if (hp->llm_heads < 1 || hp->llm_kv_heads < 1 || hp->llm_heads % hp->llm_kv_heads != 0 ||
      hp->llm_heads / hp->llm_kv_heads > 8 || hp->llm_hidden < 8 || hp->llm_hidden % 8 != 0 ||
      hp->llm_inter < 8 || hp->llm_inter % 8 != 0 || hp->llm_layers < 1 ||
      hp->speech_vocab <= hp->speech_tokens + 2 || hp->speech_tokens < 1 || hp->text_vocab < 1)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "gpu_llm_create: unsupported LLM hyperparameters");

  gpu_llm *l = cosy_calloc(1, sizeof *l);
  if (!l) return COSY_ERR_NO_MEMORY;
  cosy_status st = COSY_ERR_NO_MEMORY;
  l->g = g;
  l->m = m;
  l->H = hp->llm_hidden;
  l->nl = hp->llm_layers;
  l->nh = hp->llm_heads;
  l->nkv = hp->llm_kv_heads;
  l->inter = hp->llm_inter;
  l->qd = l->nh * HD;
  l->kvd = l->nkv * HD;
  l->qkvd = l->qd + 2 * l->kvd;
  l->V = hp->speech_vocab;
  l->text_vocab = hp->text_vocab;
  l->speech_tokens = hp->speech_tokens;
  l->endofprompt_id = hp->endofprompt_id;
  l->eps = hp->rms_eps;
  l->max_seqs = max_seqs;
  l->max_bucket = 1;
  l->n_buckets = 1;
  while (l->max_bucket < max_seqs) {
    l->max_bucket *= 2;
    l->n_buckets++;
  }
  l->max_prefill = max_prefill;
  l->max_rows = l->max_bucket > max_prefill ? l->max_bucket : max_prefill;
  for (int c = MIN_CTX_BUCKET; l->n_ctxb < MAX_CTX_BUCKETS; c *= 2) {
    l->ctxb[l->n_ctxb++] = c < GPU_LLM_MAX_CTX ? c : GPU_LLM_MAX_CTX;
    if (c >= GPU_LLM_MAX_CTX) break;
  }
  l->pages_per_seq = (GPU_LLM_MAX_CTX + GPU_LLM_PAGE_SIZE - 1) / GPU_LLM_PAGE_SIZE;
  l->max_open = 4 * max_seqs > 16 ? 4 * max_seqs : 16;

  l->embed_tokens = get_matrix(m, "llm.embed_tokens.weight", l->text_vocab, l->H, &st);
  if (!l->embed_tokens) goto fail;
  l->speech_emb_t = get_matrix(m, "llm.speech_embedding.weight", l->V, l->H, &st);
  if (!l->speech_emb_t) goto fail;

  st = COSY_ERR_NO_MEMORY;
  l->layers = cosy_calloc((size_t)l->nl, sizeof *l->layers);
  l->stamp = cosy_calloc((size_t)l->max_open, sizeof *l->stamp);
  if (!l->layers || !l->stamp ||
      kv_pool_init(&l->pool, l->max_open, l->pages_per_seq, GPU_LLM_PAGE_SIZE))
    goto fail;

  /* weights */
  for (int i = 0; i < l->nl; i++)
    if ((st = upload_layer(l, i))) goto fail;
  {
    char nm[1][128];
    int rows[1] = {l->V};
    snprintf(nm[0], 128, "llm.speech_embedding.weight");
    if ((st = upload_stack(l, l->H, 1, nm, rows, &l->speech_emb, "LLM speech_embedding")))
      goto fail;
    snprintf(nm[0], 128, "llm.llm_decoder.weight");
    if ((st = upload_stack(l, l->H, 1, nm, rows, &l->head, "LLM llm_decoder"))) goto fail;
    snprintf(nm[0], 128, "llm.norm.weight");
    rows[0] = l->H;
    if ((st = upload_vecs(l, 1, nm, rows, &l->norm, "LLM final norm"))) goto fail;
    float inv[HD / 2];
    for (int i = 0; i < HD / 2; i++) /* as lib/ref/llm.c */
      inv[i] = (float)(1.0 / pow((double)hp->rope_theta, (double)(2 * i) / (double)HD));
    void *d = NULL;
    if ((st = cosy_gpu_upload_f32(g, inv, HD / 2, COSY_KDT_F32, "RoPE inv_freq", &d))) goto fail;
    l->inv_freq = (float *)d;
  }

  /* activations */
  {
    const size_t R = (size_t)l->max_rows, B = (size_t)l->max_bucket, P = (size_t)max_prefill;
    const size_t H = (size_t)l->H, I = (size_t)l->inter;
    size_t kx = H > (size_t)l->qd ? H : (size_t)l->qd;
    if (I > kx) kx = I;
    size_t ny = (size_t)l->qkvd > 2 * I ? (size_t)l->qkvd : 2 * I;
    if (H > ny) ny = H;
    size_t y2n = 2 * R * ny;
    if (2 * B * (size_t)l->V > y2n) y2n = 2 * B * (size_t)l->V;
    size_t ws = 0;
    for (int b = 1; b <= l->max_bucket; b *= 2)
      for (int c = 0; c < l->n_ctxb; c++) {
        size_t w = cosy_k_paged_decode_workspace(b, l->nh, l->nkv, l->ctxb[c]);
        if (w > ws) ws = w;
      }
    l->dec_ws_bytes = ws;
    l->seg_cap = l->max_bucket;
    l->tile_cap = max_prefill / COSY_K_PREFILL_TILE + l->seg_cap; /* sum of ceil(n / 16) */
    l->pf_ints = 2 * max_prefill + 4 * l->seg_cap + 2 * l->tile_cap;
    l->xs_bytes = 2 * R * kx * 2;
    if ((st = dalloc(l, R * H * 4, "LLM h", &l->h)) ||
        (st = dalloc(l, l->xs_bytes, "LLM hi/lo activations", &l->xs)) ||
        (st = dalloc(l, y2n * 4, "LLM GEMM outputs", &l->y2)) ||
        (st = dalloc(l, R * l->qd * 4, "LLM q", &l->q)) ||
        (st = dalloc(l, R * l->qd * 4, "LLM att", &l->att)) ||
        (st = dalloc(l, B * I * 4, "LLM act", &l->act)) ||
        (st = dalloc(l, B * l->V * 4, "LLM logits", &l->logits)) ||
        (st = dalloc(l, B * l->V * 4, "LLM logp", &l->logp)) ||
        (st = dalloc(l, 3 * B * 4, "LLM step input", &l->d_in)) ||
        (st = dalloc(l, B * 4, "LLM positions", &l->d_pos)) ||
        (st = dalloc(l, B * 4, "LLM slots", &l->d_slot)) ||
        (st = dalloc(l, B * 4, "LLM lengths", &l->d_lens)) ||
        (st = dalloc(l, B * l->pages_per_seq * 4, "LLM step block tables", &l->d_bt)) ||
        (st = dalloc(l, (size_t)l->pf_ints * 4, "LLM prefill positions", &l->d_pf)) ||
        (st = dalloc(l, (size_t)l->max_open * l->pages_per_seq * 4, "LLM block tables",
                     &l->d_bt_all)) ||
        (st = dalloc(l, ws ? ws : 256, "LLM attention workspace", &l->dec_ws)))
      goto fail;
    if ((st = cosy_gpu_check(cudaMemset(l->d_bt_all, 0, (size_t)l->max_open * l->pages_per_seq * 4),
                             "gpu_llm_create")) ||
        (st = cosy_gpu_check(cudaMemset(l->dec_ws, 0, ws ? ws : 256), "gpu_llm_create")))
      goto fail;
    void *p;
    if ((st = cosy_gpu_host_alloc(3 * B * 4, &p))) goto fail;
    l->h_in = p;
    if ((st = cosy_gpu_host_alloc((size_t)l->pf_ints * 4, &p))) goto fail;
    l->h_pf = p;
    if ((st = cosy_gpu_host_alloc(P * H * 4, &p))) goto fail;
    l->h_emb = p;
    if ((st = cosy_gpu_host_alloc(B * l->V * 4, &p))) goto fail;
    l->h_logp = p;
    if ((st = cosy_gpu_host_alloc(B * sizeof(cosy_k_ras_row), &p))) goto fail;
    l->h_ras = p;
    if ((st = dalloc(l, B * sizeof(cosy_k_ras_row), "LLM sampling rows", &l->d_ras))) goto fail;
  }
  l->tc = GPU_LLM_TC_DEFAULT && tc_ok(l);
  {
    /* the GEMM plans of layers_split (hi/lo rows: 2 per position), so that a prefill piece of
     * a new size pays no heuristic query (kernels/gemm.cu): the one batch-invariant plan per
     * shape (l->tc), else those of every row bucket */
    const gl_layer *y = &l->layers[0];
    const int rows = l->tc ? -1 : 2 * l->max_rows, H = l->H, I = l->inter, qd = l->qd;
    cosy_gemm *gm = l->g->gemm;
    cudaStream_t s = l->g->stream;
    const cosy_kdtype bf = COSY_KDT_BF16, f32 = COSY_KDT_F32;
    const char *what = "LLM GEMM plans";
    if ((st = cosy_gpu_check(cosy_gemm_prewarm(gm, s, rows, l->qkvd, H, bf, l->xs, H, y->wqkv,
                                               NULL, f32, l->y2, l->qkvd, 0),
                             what)) ||
        (st = cosy_gpu_check(cosy_gemm_prewarm(gm, s, rows, H, qd, bf, l->xs, qd, y->wo, NULL,
                                               f32, l->y2, H, 0),
                             what)) ||
        (st = cosy_gpu_check(cosy_gemm_prewarm(gm, s, rows, 2 * I, H, bf, l->xs, H, y->wgu, NULL,
                                               f32, l->y2, 2 * I, 0),
                             what)) ||
        (st = cosy_gpu_check(cosy_gemm_prewarm(gm, s, rows, H, I, bf, l->xs, I, y->wd, NULL, f32,
                                               l->y2, H, 0),
                             what)) ||
        (l->tc && (st = cosy_gpu_check(cosy_gemm_prewarm(gm, s, -1, l->V, H, bf, l->xs, H,
                                                         l->head, NULL, f32, l->y2, l->V, 0),
                                       what))))
      goto fail;
  }
  gpu_llm_set_tuning(l, -1, -1);
  *out = l;
  return COSY_OK;
fail:
  gpu_llm_free(l);
  return st;
}

/* ---- KV cache and sequences ------------------------------------------------------------------- */

cosy_status gpu_llm_reserve_kv(gpu_llm *l, size_t bytes, size_t reserve) {
  if (!l) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_reserve_kv: NULL llm");
  if (l->kv) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_reserve_kv: the KV cache is already reserved");
  l->page_bytes = (size_t)l->nl * 2 * GPU_LLM_PAGE_SIZE * (size_t)l->kvd * sizeof(float);
  if (bytes == 0) {
    size_t left = cosy_gpu_left(l->g);
    bytes = left > reserve ? left - reserve : 0;
  }
  size_t pages = bytes / l->page_bytes;
  if (pages > (size_t)1 << 26) pages = (size_t)1 << 26; /* slots stay int32 */
  if (pages < 1)
    return cosy_err(COSY_ERR_GPU_NO_MEMORY,
                    "gpu_llm_reserve_kv: %zu bytes hold no KV page (%zu bytes each)", bytes,
                    l->page_bytes);
  cosy_status st = kv_pool_set_pages(&l->pool, (int)pages);
  if (st) return st;
  void *d = NULL;
  if ((st = cosy_gpu_alloc(l->g, pages * l->page_bytes, "LLM KV cache", &d))) {
    kv_pool_set_pages(&l->pool, 0); /* back to no pages: a later reserve may try again */
    return st;
  }
  l->kv = d;
  l->kv_bytes = pages * l->page_bytes;
  l->pool_elems = pages * GPU_LLM_PAGE_SIZE * (size_t)l->kvd;
  return precapture(l); /* the decode graphs read the cache pages: captured once they exist */
}

int gpu_llm_pages_total(const gpu_llm *l) { return l ? l->pool.pages_total : 0; }
int gpu_llm_pages_free(const gpu_llm *l) { return l ? l->pool.n_free : 0; }
size_t gpu_llm_kv_bytes(const gpu_llm *l) { return l ? l->kv_bytes : 0; }
int gpu_llm_speech_vocab(const gpu_llm *l) { return l ? l->V : 0; }
int gpu_llm_hidden(const gpu_llm *l) { return l ? l->H : 0; }

static float *kpool(const gpu_llm *l, int layer) {
  return l->kv + (size_t)(2 * layer) * l->pool_elems;
}
static float *vpool(const gpu_llm *l, int layer) {
  return l->kv + (size_t)(2 * layer + 1) * l->pool_elems;
}

static int seq_ok(const gpu_llm *l, int seq) { return l && kv_pool_seq_ok(&l->pool, seq); }

cosy_status gpu_llm_seq_open(gpu_llm *l, int max_len, int *seq) {
  if (!l || !seq) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_seq_open: NULL argument");
  *seq = -1;
  if (max_len < 1 || max_len > GPU_LLM_MAX_CTX)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_seq_open: max_len %d not in [1, %d]", max_len,
                    GPU_LLM_MAX_CTX);
  if (!l->kv) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_seq_open: no KV cache reserved");
  int s;
  cosy_status st = kv_pool_open(&l->pool, max_len, &s);
  if (st) return st;
  st = cosy_gpu_check(cudaMemcpyAsync(l->d_bt_all + (size_t)s * l->pages_per_seq,
                                      kv_pool_block_table(&l->pool, s),
                                      sizeof(int32_t) * l->pool.seqs[s].n_pages,
                                      cudaMemcpyHostToDevice, l->g->stream),
                      "gpu_llm_seq_open");
  if (st) {
    kv_pool_close(&l->pool, s);
    return st;
  }
  *seq = s;
  return COSY_OK;
}

void gpu_llm_seq_close(gpu_llm *l, int seq) {
  if (l) kv_pool_close(&l->pool, seq);
}

int gpu_llm_seq_len(const gpu_llm *l, int seq) {
  return seq_ok(l, seq) ? l->pool.seqs[seq].len : -1;
}

static int32_t slot_of(const gpu_llm *l, int seq, int pos) {
  return kv_pool_slot(&l->pool, seq, pos);
}

/* ---- input embedding -------------------------------------------------------------------------- */

static void tensor_row(const gguf_tensor *t, int row, int H, float *out) {
  size_t es = gguf_type_size(t->type);
  cosy_to_f32((const uint8_t *)t->data + (size_t)row * (size_t)H * es, t->type, out, (size_t)H);
}

static cosy_status check_ids(const int32_t *ids, int n, int lim, const char *what) {
  if (n < 0 || n > (1 << 20))
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_build_input: %s length %d out of range", what, n);
  if (n > 0 && !ids)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_build_input: NULL %s with length %d", what, n);
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= lim)
      return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_build_input: %s[%d] = %d not in [0, %d)",
                      what, i, (int)ids[i], lim);
  return COSY_OK;
}

cosy_status gpu_llm_build_input(const gpu_llm *l, const int32_t *prompt_text, int n_pt,
                                const int32_t *tts_text, int n_tt, const int32_t *prompt_speech,
                                int n_ps, float **emb, int *L) {
  if (!emb || !L) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_build_input: NULL output");
  *emb = NULL;
  *L = 0;
  if (!l) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_build_input: NULL llm");
  cosy_status st;
  if ((st = check_ids(prompt_text, n_pt, l->text_vocab, "prompt text")) ||
      (st = check_ids(tts_text, n_tt, l->text_vocab, "tts text")) ||
      (st = check_ids(prompt_speech, n_ps, l->speech_tokens, "prompt speech")))
    return st;
  int has_eop = 0;
  for (int i = 0; i < n_pt; i++) has_eop |= prompt_text[i] == l->endofprompt_id;
  for (int i = 0; i < n_tt; i++) has_eop |= tts_text[i] == l->endofprompt_id;
  if (!has_eop)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "gpu_llm_build_input: the text holds no <|endofprompt|> (id %d)",
                    l->endofprompt_id);
  const int n = 1 + n_pt + n_tt + 1 + n_ps;
  const size_t H = (size_t)l->H;
  float *e = cosy_malloc(sizeof(float) * (size_t)n * H);
  if (!e) return COSY_ERR_NO_MEMORY;
  float *row = e;
  tensor_row(l->speech_emb_t, l->speech_tokens, l->H, row); /* sos = 6561 */
  row += H;
  for (int i = 0; i < n_pt; i++, row += H) tensor_row(l->embed_tokens, prompt_text[i], l->H, row);
  for (int i = 0; i < n_tt; i++, row += H) tensor_row(l->embed_tokens, tts_text[i], l->H, row);
  tensor_row(l->speech_emb_t, l->speech_tokens + 2, l->H, row); /* task_id = 6563 */
  row += H;
  for (int i = 0; i < n_ps; i++, row += H) tensor_row(l->speech_emb_t, prompt_speech[i], l->H, row);
  *emb = e;
  *L = n;
  return COSY_OK;
}

cosy_status gpu_llm_embed_items(const gpu_llm *l, const int32_t *items, int n, float **emb) {
  *emb = NULL;
  if (!l || n < 1 || n > (1 << 24) || !items)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_embed_items: bad arguments (n %d)", n);
  for (int i = 0; i < n; i++)
    if (items[i] >= l->text_vocab || (items[i] < 0 && -1 - items[i] >= l->V))
      return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_embed_items: item %d = %d out of range", i,
                      (int)items[i]);
  const size_t H = (size_t)l->H;
  float *e = cosy_malloc(sizeof(float) * (size_t)n * H);
  if (!e) return COSY_ERR_NO_MEMORY;
  for (int i = 0; i < n; i++) {
    if (items[i] >= 0) tensor_row(l->embed_tokens, items[i], l->H, e + i * H);
    else tensor_row(l->speech_emb_t, -1 - items[i], l->H, e + i * H);
  }
  *emb = e;
  return COSY_OK;
}

/* ---- layer schedules -------------------------------------------------------------------------- */

/* Where the M rows' attention reads its keys: a prefill of one or several sequences (segments
 * and tiles of cosy_k_paged_prefill, already uploaded in d_pf by prefill_plan) or a decode bucket
 * (paged, ctx = the context bucket). */
typedef struct attn_plan {
  int decode;
  int n_seg, n_tiles; /* prefill */
  int ctx;            /* decode */
  int pdl;            /* decode: launch as a programmatic dependent (the skinny-GEMM path) */
} attn_plan;

/* the prefill attention's segment table and tile list inside h_pf / d_pf (after the positions
 * and slots) */
static cosy_k_prefill_seg *pf_segs(const gpu_llm *l, int32_t *base) {
  return (cosy_k_prefill_seg *)(base + 2 * (size_t)l->max_prefill);
}
static int32_t *pf_tiles(const gpu_llm *l, int32_t *base) {
  return base + 2 * (size_t)l->max_prefill + 4 * (size_t)l->seg_cap;
}

/* Fills h_pf's segment table and tile list for n sequences packed in one forward pass (segment i:
 * rows [row0[i], row0[i] + rows[i]) of sequence seqs[i], keys 0..Lk[i]-1) and returns the int32s
 * of h_pf to upload. n <= seg_cap, sum of rows <= max_prefill (the callers check). */
static int prefill_plan(gpu_llm *l, int n, const int *seqs, const int *row0, const int *rows,
                        const int *Lk, attn_plan *ap) {
  cosy_k_prefill_seg *sg = pf_segs(l, l->h_pf);
  int32_t *tiles = pf_tiles(l, l->h_pf);
  int nt = 0;
  for (int i = 0; i < n; i++) {
    sg[i].row0 = row0[i];
    sg[i].n = rows[i];
    sg[i].Lk = Lk[i];
    sg[i].seq = seqs[i];
    for (int t0 = 0; t0 < rows[i]; t0 += COSY_K_PREFILL_TILE) {
      tiles[2 * nt] = i;
      tiles[2 * nt + 1] = t0;
      nt++;
    }
  }
  memset(ap, 0, sizeof *ap);
  ap->n_seg = n;
  ap->n_tiles = nt;
  return 2 * l->max_prefill + 4 * l->seg_cap + 2 * nt;
}

static cosy_status attention(gpu_llm *l, int layer, int M, const attn_plan *ap) {
  cudaStream_t s = l->g->stream;
  float *kc = kpool(l, layer), *vc = vpool(l, layer);
  if (ap->decode) {
    /* COSY_LLM_ATTN_EARLY (cosy_gpu.llm_attn_early): the attention's loads that the q|k|v
     * projection cannot affect (lengths, block tables, the older tokens' K rows) issued before
     * its griddepcontrol.wait. Only behind cosy_k_llm_gemv_tc (l->tc), which triggers its
     * dependents after its own wait (kernels/gemv.cu, gemv_knobs().trigger 1: p.late), so every
     * kernel before it (decode_prep's lengths and tables among them) has completed when the
     * attention starts; the skinny gemv triggers at its start, so not behind it. */
    int pdl = l->pdl && ap->pdl;
    if (pdl && l->tc && l->g->llm_attn_early) pdl |= COSY_K_DECODE_EARLY;
    CK(cosy_k_paged_decode(s, COSY_KDT_F32, l->q, l->qd, kc, vc, l->d_bt,
                           ap->ctx / GPU_LLM_PAGE_SIZE, l->d_lens, M, l->nh, l->nkv, HD,
                           GPU_LLM_PAGE_SIZE, ap->ctx, ATTN_SCALE, l->att, l->qd, l->dec_ws,
                           l->dec_ws_bytes, pdl, &l->g->dev),
       "LLM decode attention");
    return COSY_OK;
  }
  /* every segment in one launch; a row's result does not depend on the other segments */
  CK(cosy_k_paged_prefill(s, l->q, l->qd, kc, vc, l->d_bt_all, l->pages_per_seq,
                          pf_segs(l, l->d_pf), ap->n_seg, pf_tiles(l, l->d_pf), ap->n_tiles,
                          l->nh, l->nkv, HD, GPU_LLM_PAGE_SIZE, ATTN_SCALE, l->att, l->qd,
                          &l->g->dev),
     "LLM prefill attention");
  return COSY_OK;
}

/* A GEMM of layers_split / head_split: with l->tc (the batch-invariant LLM) one cuBLASLt
 * algorithm for every row count of the shape (cosy_k_gemm_inv), so a prefill row's result does
 * not depend on the pieces packed with it; else the algorithm of the row count's bucket. */
static cudaError_t llm_gemm(const gpu_llm *l, cosy_gemm *gm, cudaStream_t s, int M, int N, int K,
                            cosy_kdtype ab, const void *x, int ldx, const void *w,
                            const float *bias, cosy_kdtype yt, void *y, int ldy, int acc) {
  return (l->tc ? cosy_k_gemm_inv : cosy_k_gemm)(gm, s, M, N, K, ab, x, ldx, w, bias, yt, y, ldy,
                                                 acc);
}

/* The layers over M rows of h through cuBLASLt on hi/lo pairs. pos/slots: device [M]. On return
 * the last layer's down projection is still pending in y2 (hi rows, then lo rows at + M*H). */
static cosy_status layers_split(gpu_llm *l, int M, const int32_t *pos, const int32_t *slots,
                                const attn_plan *ap) {
  cudaStream_t s = l->g->stream;
  cosy_gemm *gm = l->g->gemm;
  const int H = l->H, I = l->inter, qd = l->qd;
  const size_t m = (size_t)M;
  cosy_bf16 *xs = l->xs;
  float *y2 = l->y2;
  const float *pend = NULL;
  cosy_status st;
  for (int i = 0; i < l->nl; i++) {
    const gl_layer *y = &l->layers[i];
    CK(cosy_k_llm_norm_split(s, l->h, pend, pend ? pend + m * H : NULL, y->ln1, l->eps, xs,
                             xs + m * H, M, H),
       "LLM norm");
    CK(llm_gemm(l, gm, s, 2 * M, l->qkvd, H, COSY_KDT_BF16, xs, H, y->wqkv, NULL, COSY_KDT_F32,
                y2, l->qkvd, 0),
       "LLM q|k|v GEMM");
    CK(cosy_k_llm_rope_append(s, y2, y2 + m * l->qkvd, l->qkvd, y->bqkv, M, l->nh, l->nkv, pos,
                              slots, l->inv_freq, l->q, qd, kpool(l, i), vpool(l, i)),
       "LLM rope/append");
    if ((st = attention(l, i, M, ap))) return st;
    CK(cosy_k_llm_split(s, l->att, qd, xs, xs + m * qd, M, qd), "LLM split");
    CK(llm_gemm(l, gm, s, 2 * M, H, qd, COSY_KDT_BF16, xs, qd, y->wo, NULL, COSY_KDT_F32, y2, H,
                0),
       "LLM o_proj GEMM");
    CK(cosy_k_llm_norm_split(s, l->h, y2, y2 + m * H, y->ln2, l->eps, xs, xs + m * H, M, H),
       "LLM norm");
    CK(llm_gemm(l, gm, s, 2 * M, 2 * I, H, COSY_KDT_BF16, xs, H, y->wgu, NULL, COSY_KDT_F32, y2,
                2 * I, 0),
       "LLM gate|up GEMM");
    CK(cosy_k_llm_silu_split(s, y2, y2 + m * 2 * I, I, xs, xs + m * I, M), "LLM silu");
    CK(llm_gemm(l, gm, s, 2 * M, H, I, COSY_KDT_BF16, xs, I, y->wd, NULL, COSY_KDT_F32, y2, H, 0),
       "LLM down_proj GEMM");
    pend = y2;
  }
  return COSY_OK;
}

/* Final norm (adding the pending down projection) and log-probs of M rows whose h starts at
 * h0 and pending delta at d (hi rows) / d_lo (lo rows); log-probs to l->logp [M][V]. */
static cosy_status head_split(gpu_llm *l, float *h0, const float *d, const float *d_lo, int M) {
  cudaStream_t s = l->g->stream;
  const int H = l->H, V = l->V;
  const size_t m = (size_t)M;
  CK(cosy_k_llm_norm_split(s, h0, d, d_lo, l->norm, l->eps, l->xs, l->xs + m * H, M, H),
     "LLM final norm");
  CK(llm_gemm(l, l->g->gemm, s, 2 * M, V, H, COSY_KDT_BF16, l->xs, H, l->head, NULL,
              COSY_KDT_F32, l->y2, V, 0),
     "LLM head GEMM");
  CK(cosy_k_llm_add(s, l->y2, l->y2 + m * V, l->logits, (int64_t)m * V), "LLM logits");
  CK(cosy_k_log_softmax(s, COSY_KDT_F32, l->logits, V, l->logp, M, V), "LLM log_softmax");
  return COSY_OK;
}

/* One fused projection of the decode step over b rows: the tensor-core kernel over all rows
 * (l->tc), or the skinny GEMM in groups of at most 8 rows. */
static cudaError_t run_gemv(const gpu_llm *l, cudaStream_t s, cosy_llm_gemv_args *ga, int b) {
  if (l->tc) {
    ga->M = b;
    ga->groups = 1;
    ga->xs = l->xs; /* free during a decode step (the prefill's hi/lo activations) */
    ga->xs_bytes = l->xs_bytes;
    ga->clusters = l->g->dev.clusters; /* the K split of every call of this engine */
    ga->smem_sm = (int)l->g->dev.smem_sm;
    /* x's fragments once per block (COSY_LLM_XFRAG; the same bits as per warp). Auto (-1, the
     * default): at one row for K up to 1024 (q|k|v, o, gate|up, head), where it paid on an H200
     * (the kernels 8-24% faster, the step 0.729 against 0.794 ms); not for down (K = 4864:
     * 7.6 against 7.0 us) nor at 4 or 8 rows (steps 0.857 / 0.999 against 0.850 / 0.911 ms):
     * bench/RESULTS.md, 2026-11-29 (sixteenth) */
    const int xf = l->g->llm_xfrag;
    ga->xfrag = xf >= 0 ? xf : b == 1 && ga->K <= 1024;
    ga->gemvb = l->g->llm_gemvb; /* COSY_LLM_GEMVB: the B-operand kernel above 8 rows */
    return cosy_k_llm_gemv_tc(s, ga);
  }
  ga->M = gemv_rows(b);
  ga->groups = b / gemv_rows(b);
  return cosy_k_llm_gemv(s, ga);
}

/* The decode layers of b rows on the fused skinny-GEMM path, then the log-probs. */
static cosy_status layers_gemv(gpu_llm *l, int b, const attn_plan *ap) {
  cudaStream_t s = l->g->stream;
  const int H = l->H, I = l->inter;
  cosy_llm_gemv_args ga;
  cosy_status st;
  for (int i = 0; i < l->nl; i++) {
    const gl_layer *y = &l->layers[i];
    memset(&ga, 0, sizeof ga);
    ga.N = l->qkvd;
    ga.K = H;
    ga.in_mode = COSY_GEMV_IN_RMSNORM;
    ga.x = l->h;
    ga.ldx = H;
    ga.norm_w = y->ln1;
    ga.eps = l->eps;
    ga.w = y->wqkv;
    ga.bias = y->bqkv;
    ga.out_mode = COSY_GEMV_QKV_ROPE;
    ga.y = l->q;
    ga.ldy = l->qd;
    ga.n_qh = l->nh;
    ga.n_kh = l->nkv;
    ga.pos = l->d_pos;
    ga.slots = l->d_slot;
    ga.inv_freq = l->inv_freq;
    ga.k_cache = kpool(l, i);
    ga.v_cache = vpool(l, i);
    ga.pdl = l->pdl;
    ga.smem_max = (int)l->g->dev.smem_block;
    CK(run_gemv(l, s, &ga, b), "LLM q|k|v (gemv)");
    if ((st = attention(l, i, b, ap))) return st;
    memset(&ga, 0, sizeof ga);
    ga.N = H;
    ga.K = l->qd;
    ga.in_mode = COSY_GEMV_IN_F32;
    ga.x = l->att;
    ga.ldx = l->qd;
    ga.w = y->wo;
    ga.out_mode = COSY_GEMV_ADD_F32;
    ga.y = l->h;
    ga.ldy = H;
    ga.pdl = l->pdl;
    ga.smem_max = (int)l->g->dev.smem_block;
    CK(run_gemv(l, s, &ga, b), "LLM o_proj (gemv)");
    memset(&ga, 0, sizeof ga);
    ga.N = 2 * I;
    ga.K = H;
    ga.in_mode = COSY_GEMV_IN_RMSNORM;
    ga.x = l->h;
    ga.ldx = H;
    ga.norm_w = y->ln2;
    ga.eps = l->eps;
    ga.w = y->wgu;
    ga.out_mode = COSY_GEMV_SILU_MUL;
    ga.y = l->act;
    ga.ldy = I;
    ga.pdl = l->pdl;
    ga.smem_max = (int)l->g->dev.smem_block;
    CK(run_gemv(l, s, &ga, b), "LLM gate|up (gemv)");
    memset(&ga, 0, sizeof ga);
    ga.N = H;
    ga.K = I;
    ga.in_mode = COSY_GEMV_IN_F32;
    ga.x = l->act;
    ga.ldx = I;
    ga.w = y->wd;
    ga.out_mode = COSY_GEMV_ADD_F32;
    ga.y = l->h;
    ga.ldy = H;
    ga.pdl = l->pdl;
    ga.smem_max = (int)l->g->dev.smem_block;
    CK(run_gemv(l, s, &ga, b), "LLM down_proj (gemv)");
  }
  memset(&ga, 0, sizeof ga);
  ga.N = l->V;
  ga.K = H;
  ga.in_mode = COSY_GEMV_IN_RMSNORM;
  ga.x = l->h;
  ga.ldx = H;
  ga.norm_w = l->norm;
  ga.eps = l->eps;
  ga.w = l->head;
  ga.out_mode = COSY_GEMV_STORE_F32;
  ga.y = l->logits;
  ga.ldy = l->V;
  ga.pdl = l->pdl;
  ga.smem_max = (int)l->g->dev.smem_block;
  CK(run_gemv(l, s, &ga, b), "LLM head (gemv)");
  return COSY_OK; /* logits; the sampling kernel (or gpu_llm_decode's download) takes the
                     log_softmax */
}

/* ---- prefill ---------------------------------------------------------------------------------- */

cosy_status gpu_llm_prefill(gpu_llm *l, int seq, const float *emb, int L, float *logp_last) {
  if (!l || !emb) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_prefill: NULL llm or input");
  if (!seq_ok(l, seq))
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_prefill: sequence %d is not open", seq);
  kv_seq *sq = kv_pool_seq(&l->pool, seq);
  if (L < 1 || L > sq->max_len - sq->len)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "gpu_llm_prefill: %d positions do not fit the sequence (%d of %d used)", L,
                    sq->len, sq->max_len);
  cudaStream_t s = l->g->stream;
  const int H = l->H;
  cosy_status st;
  l->logp_rows = 0;
  for (int done = 0; done < L;) {
    const int n = L - done < l->max_prefill ? L - done : l->max_prefill;
    const int p0 = sq->len + done;
    memcpy(l->h_emb, emb + (size_t)done * H, sizeof(float) * (size_t)n * H);
    for (int t = 0; t < n; t++) {
      l->h_pf[t] = p0 + t;
      l->h_pf[l->max_prefill + t] = slot_of(l, seq, p0 + t);
    }
    attn_plan ap;
    const int row0 = 0, Lk = p0 + n;
    const int up = prefill_plan(l, 1, &seq, &row0, &n, &Lk, &ap);
    CK(cudaMemcpyAsync(l->h, l->h_emb, sizeof(float) * (size_t)n * H, cudaMemcpyHostToDevice, s),
       "LLM prefill upload");
    CK(cudaMemcpyAsync(l->d_pf, l->h_pf, sizeof(int32_t) * (size_t)up, cudaMemcpyHostToDevice,
                       s),
       "LLM prefill upload");
    if ((st = layers_split(l, n, l->d_pf, l->d_pf + l->max_prefill, &ap))) return st;
    done += n;
    if (done == L) { /* the last position's log-probs stay in logp row 0 for gpu_llm_sample */
      const size_t last = (size_t)(n - 1) * H;
      if ((st = head_split(l, l->h + last, l->y2 + last, l->y2 + (size_t)n * H + last, 1)))
        return st;
      if (logp_last)
        CK(cudaMemcpyAsync(l->h_logp, l->logp, sizeof(float) * (size_t)l->V,
                           cudaMemcpyDeviceToHost, s),
           "LLM prefill download");
    }
    /* the pinned staging buffers are reused by the next chunk */
    if ((st = cosy_gpu_sync(l->g, "LLM prefill"))) return st;
  }
  if (logp_last) memcpy(logp_last, l->h_logp, sizeof(float) * (size_t)l->V);
  sq->len += L;
  l->logp_rows = 1;
  l->logp_valid = 1;
  return COSY_OK;
}

cosy_status gpu_llm_prefill_batch(gpu_llm *l, int n, const int *seqs, const float *const *embs,
                                  const int *Ls, const int *want, int *n_want) {
  if (n_want) *n_want = 0;
  if (!l || n < 1 || !seqs || !embs || !Ls || !want)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_prefill_batch: bad arguments");
  if (n > l->max_bucket)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_prefill_batch: %d sequences > %d", n,
                    l->max_bucket);
  int total = 0;
  for (int j = 0; j < n; j++) {
    if (!seq_ok(l, seqs[j]) || !embs[j])
      return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_prefill_batch: sequence %d is not open",
                      seqs[j]);
    for (int i = 0; i < j; i++)
      if (seqs[i] == seqs[j])
        return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_prefill_batch: sequence %d given twice",
                        seqs[j]);
    const kv_seq *sq = kv_pool_seq(&l->pool, seqs[j]);
    if (Ls[j] < 1 || Ls[j] > sq->max_len - sq->len)
      return cosy_err(COSY_ERR_INVALID_ARG,
                      "gpu_llm_prefill_batch: %d positions do not fit sequence %d (%d of %d used)",
                      Ls[j], seqs[j], sq->len, sq->max_len);
    total += Ls[j];
  }
  if (total > l->max_prefill)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_prefill_batch: %d positions > %d per call",
                    total, l->max_prefill);
  cudaStream_t s = l->g->stream;
  const int H = l->H;
  int row0[1 << (MAX_BUCKETS - 1)], Lk[1 << (MAX_BUCKETS - 1)];
  cosy_status st;
  const double tw0 = l->pf_timing ? cosy_now() : 0;
  double tw1 = 0, tw2 = 0;
  l->logp_rows = 0;
  for (int j = 0, r = 0; j < n; r += Ls[j], j++) {
    const int p0 = kv_pool_seq(&l->pool, seqs[j])->len;
    row0[j] = r;
    Lk[j] = p0 + Ls[j];
    memcpy(l->h_emb + (size_t)r * H, embs[j], sizeof(float) * (size_t)Ls[j] * H);
    for (int t = 0; t < Ls[j]; t++) {
      l->h_pf[r + t] = p0 + t;
      l->h_pf[l->max_prefill + r + t] = slot_of(l, seqs[j], p0 + t);
    }
  }
  attn_plan ap;
  const int up = prefill_plan(l, n, seqs, row0, Ls, Lk, &ap);
  CK(cudaMemcpyAsync(l->h, l->h_emb, sizeof(float) * (size_t)total * H, cudaMemcpyHostToDevice, s),
     "LLM prefill upload");
  CK(cudaMemcpyAsync(l->d_pf, l->h_pf, sizeof(int32_t) * (size_t)up, cudaMemcpyHostToDevice, s),
     "LLM prefill upload");
  if (l->pf_timing) {
    tw1 = cosy_now();
    cudaEventRecord(l->pf_ev[0], s);
  }
  if ((st = layers_split(l, total, l->d_pf, l->d_pf + l->max_prefill, &ap))) return st;
  if (l->pf_timing) {
    tw2 = cosy_now();
    cudaEventRecord(l->pf_ev[1], s);
  }
  /* the wanted sequences' last rows (h, pending hi and lo deltas) move to rows 0..nw-1; row
   * k's source is at or after row k, so earlier moves never overwrite a later source */
  const size_t hb = sizeof(float) * (size_t)H, M = (size_t)total;
  int nw = 0;
  for (int j = 0; j < n; j++) {
    if (!want[j]) continue;
    const size_t src = (size_t)(row0[j] + Ls[j] - 1);
    if (src != (size_t)nw) {
      CK(cudaMemcpyAsync(l->h + nw * (size_t)H, l->h + src * H, hb, cudaMemcpyDeviceToDevice, s),
         "LLM prefill rows");
      CK(cudaMemcpyAsync(l->y2 + nw * (size_t)H, l->y2 + src * H, hb, cudaMemcpyDeviceToDevice, s),
         "LLM prefill rows");
      CK(cudaMemcpyAsync(l->y2 + (M + nw) * H, l->y2 + (M + src) * H, hb,
                         cudaMemcpyDeviceToDevice, s),
         "LLM prefill rows");
    }
    nw++;
  }
  if (nw && (st = head_split(l, l->h, l->y2, l->y2 + M * H, nw))) return st;
  /* the pinned staging buffers are reused by the next call */
  if ((st = cosy_gpu_sync(l->g, "LLM prefill"))) return st;
  if (l->pf_timing) {
    float gms = -1.f;
    if (cudaEventElapsedTime(&gms, l->pf_ev[0], l->pf_ev[1]) != cudaSuccess) gms = -1.f;
    fprintf(l->pf_timing, "%.4f prefill %d %d prep %.3f enqueue %.3f gpu %.3f wall %.3f\n", tw0, n,
            total, (tw1 - tw0) * 1e3, (tw2 - tw1) * 1e3, gms, (cosy_now() - tw0) * 1e3);
  }
  for (int j = 0; j < n; j++) kv_pool_seq(&l->pool, seqs[j])->len += Ls[j];
  l->logp_rows = nw;
  l->logp_valid = 1;
  if (n_want) *n_want = nw;
  return COSY_OK;
}

/* ---- decode ----------------------------------------------------------------------------------- */

/* Everything of one decode step for a bucket of b rows and context bucket ctx (d_in already
 * uploaded); graph-capturable (fixed pointers and sizes). */
static cosy_status decode_enqueue(gpu_llm *l, int b, int ctx) {
  cudaStream_t s = l->g->stream;
  CK(cosy_k_llm_decode_prep(s, l->d_in, b, l->speech_emb, l->V, l->H, l->d_bt_all,
                            l->pages_per_seq, l->max_open, GPU_LLM_PAGE_SIZE, l->h, l->d_pos,
                            l->d_slot, l->d_lens, l->d_bt, ctx / GPU_LLM_PAGE_SIZE),
     "LLM decode prep");
  const int gemv = l->tc || (b <= l->gemv_max && bucket_ok_for_gemv(l, b));
  const attn_plan ap = {1, 0, 0, ctx, gemv};
  if (gemv) return layers_gemv(l, b, &ap);
  cosy_status st = layers_split(l, b, l->d_pos, l->d_slot, &ap);
  if (st) return st;
  return head_split(l, l->h, l->y2, l->y2 + (size_t)b * l->H, b);
}

static cosy_status capture(gpu_llm *l, int b, int ctx, cudaGraphExec_t *out) {
  cudaStream_t s = l->g->stream;
  cudaGraph_t graph = NULL;
  cosy_status st =
      cosy_gpu_capture_begin(s, cudaStreamCaptureModeThreadLocal, "LLM decode graph capture");
  if (st) {
    *out = NULL;
    return st;
  }
  st = decode_enqueue(l, b, ctx);
  cudaError_t e = cudaStreamEndCapture(s, &graph);
  if (st == COSY_OK) st = cosy_gpu_check(e, "LLM decode graph capture");
  if (st == COSY_OK && !graph)
    st = cosy_err(COSY_ERR_CUDA, "LLM decode graph capture produced no graph");
  if (st == COSY_OK)
    st = cosy_gpu_check(cudaGraphInstantiate(out, graph, 0), "LLM decode graph instantiate");
  if (graph) cudaGraphDestroy(graph);
  if (st) {
    if (*out) cudaGraphExecDestroy(*out); /* instantiated, but a failure was reported */
    *out = NULL;
    cudaGetLastError(); /* clear a non-sticky capture error */
  }
  return st;
}

/* The decode graphs of every batch bucket for the two shortest context buckets, captured when
 * the KV cache is reserved, each after one eager step over padding rows only (sequence -1: no cache row is read
 * or written), so that a first burst of requests does not wait for captures (~15 ms each on an
 * H100, one per new batch bucket as the burst's prefills join the decode batch). */
static cosy_status precapture(gpu_llm *l) {
  cudaStream_t s = l->g->stream;
  for (int ci = 0; ci < l->n_ctxb && ci < 2; ci++)
    for (int bi = 0, b = 1; bi < l->n_buckets; bi++, b *= 2) {
      if (l->graphs[bi][ci]) continue;
      for (int i = 0; i < b; i++) {
        l->h_in[i] = 0;
        l->h_in[b + i] = -1;
        l->h_in[2 * b + i] = 0;
      }
      CK(cudaMemcpyAsync(l->d_in, l->h_in, sizeof(int32_t) * 3 * (size_t)b,
                         cudaMemcpyHostToDevice, s),
         "LLM decode graphs");
      cosy_status st = decode_enqueue(l, b, l->ctxb[ci]);
      if (!st) st = cosy_gpu_sync(l->g, "LLM decode graphs");
      if (!st) st = capture(l, b, l->ctxb[ci], &l->graphs[bi][ci]);
      if (st) return st;
    }
  return COSY_OK;
}

cosy_status gpu_llm_decode(gpu_llm *l, const int *seqs, const int32_t *tokens, int n, float *logp) {
  if (!l || !seqs || !tokens)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_decode: NULL argument");
  if (n < 1 || n > l->max_seqs)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_decode: n = %d not in [1, %d]", n, l->max_seqs);
  if (++l->stamp_gen == 0) { /* wrapped: forget old stamps */
    memset(l->stamp, 0, sizeof(unsigned) * (size_t)l->max_open);
    l->stamp_gen = 1;
  }
  int max_ctx = 0;
  for (int i = 0; i < n; i++) {
    const int q = seqs[i];
    if (!seq_ok(l, q))
      return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_decode: sequence %d is not open", q);
    if (l->stamp[q] == l->stamp_gen)
      return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_decode: sequence %d appears twice", q);
    l->stamp[q] = l->stamp_gen;
    const kv_seq *sq = kv_pool_seq(&l->pool, q);
    if (sq->len >= sq->max_len)
      return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_decode: sequence %d is full (%d positions)",
                      q, sq->max_len);
    if (tokens[i] < 0 || tokens[i] >= l->V)
      return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_decode: token %d not in [0, %d)",
                      (int)tokens[i], l->V);
    if (sq->len + 1 > max_ctx) max_ctx = sq->len + 1;
  }
  int bi = 0, b = 1;
  while (b < n) {
    b *= 2;
    bi++;
  }
  int ci = 0;
  while (l->ctxb[ci] < max_ctx) ci++; /* max_len <= GPU_LLM_MAX_CTX = the last bucket */
  const int ctx = l->ctxb[ci];

  for (int i = 0; i < b; i++) {
    const int real = i < n;
    l->h_in[i] = real ? tokens[i] : 0;
    l->h_in[b + i] = real ? seqs[i] : -1;
    l->h_in[2 * b + i] = real ? kv_pool_seq(&l->pool, seqs[i])->len : 0;
  }
  cudaStream_t s = l->g->stream;
  CK(cudaMemcpyAsync(l->d_in, l->h_in, sizeof(int32_t) * 3 * (size_t)b, cudaMemcpyHostToDevice, s),
     "LLM decode upload");
  cosy_status st;
  l->logp_rows = 0;
  const int have_graph = l->graphs[bi][ci] != NULL;
  if (have_graph)
    CK(cudaGraphLaunch(l->graphs[bi][ci], s), "LLM decode graph launch");
  else if ((st = decode_enqueue(l, b, ctx)))
    return st;
  l->logp_valid = 0;
  if (logp) {
    CK(cosy_k_log_softmax(s, COSY_KDT_F32, l->logits, l->V, l->logp, n, l->V), "LLM log_softmax");
    l->logp_valid = 1;
    CK(cudaMemcpyAsync(l->h_logp, l->logp, sizeof(float) * (size_t)n * l->V,
                       cudaMemcpyDeviceToHost, s),
       "LLM decode download");
    if ((st = cosy_gpu_sync(l->g, "LLM decode step"))) return st;
    memcpy(logp, l->h_logp, sizeof(float) * (size_t)n * l->V);
  }
  for (int i = 0; i < n; i++) kv_pool_seq(&l->pool, seqs[i])->len++;
  l->logp_rows = n;
  if (!have_graph) return capture(l, b, ctx, &l->graphs[bi][ci]);
  return COSY_OK;
}

cosy_status gpu_llm_sample(gpu_llm *l, int n, cosy_k_ras_row *rows) {
  if (!l || !rows || n < 1) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_sample: bad arguments");
  if (n > l->logp_rows)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "gpu_llm_sample: %d rows asked, the last step left %d rows of log-probs", n,
                    l->logp_rows);
  if (!cosy_k_ras_supported(l->V, 1, 0))
    return cosy_err(COSY_ERR_UNSUPPORTED, "gpu_llm_sample: vocabulary of %d ids", l->V);
  for (int i = 0; i < n; i++)
    if (!cosy_k_ras_supported(l->V, rows[i].top_k, rows[i].win_size))
      return cosy_err(COSY_ERR_UNSUPPORTED, "gpu_llm_sample: top_k %d / window %d",
                      (int)rows[i].top_k, (int)rows[i].win_size);
  cudaStream_t s = l->g->stream;
  memcpy(l->h_ras, rows, sizeof *rows * (size_t)n);
  CK(cudaMemcpyAsync(l->d_ras, l->h_ras, sizeof *rows * (size_t)n, cudaMemcpyHostToDevice, s),
     "LLM sampling upload");
  CK(cosy_k_ras_sample(s, l->logits, l->V, n, l->V, l->logp, l->d_ras), "LLM sampling");
  l->logp_valid = 1;
  CK(cudaMemcpyAsync(l->h_ras, l->d_ras, sizeof *rows * (size_t)n, cudaMemcpyDeviceToHost, s),
     "LLM sampling download");
  cosy_status st = cosy_gpu_sync(l->g, "LLM sampling");
  if (st) return st;
  memcpy(rows, l->h_ras, sizeof *rows * (size_t)n);
  return COSY_OK;
}

cosy_status gpu_llm_logp(gpu_llm *l, int n, float *logp) {
  if (!l || !logp || n < 1 || n > l->logp_rows)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_llm_logp: bad arguments");
  if (!l->logp_valid) {
    CK(cosy_k_log_softmax(l->g->stream, COSY_KDT_F32, l->logits, l->V, l->logp, l->logp_rows,
                          l->V),
       "LLM log_softmax");
    l->logp_valid = 1;
  }
  CK(cudaMemcpyAsync(l->h_logp, l->logp, sizeof(float) * (size_t)n * l->V, cudaMemcpyDeviceToHost,
                     l->g->stream),
     "LLM log-prob download");
  cosy_status st = cosy_gpu_sync(l->g, "LLM log-prob download");
  if (st) return st;
  memcpy(logp, l->h_logp, sizeof(float) * (size_t)n * l->V);
  return COSY_OK;
}
