/* flow.c - the flow decoder on the GPU (see flow.h; the math is lib/ref/flow.c's, docs/model.md section 6).
 *
 * Per call (gpu_flow_infer), with T = n_prompt + n_gen tokens, T' the tokens used, N = 2 T':
 *   host:   e = W_spk . (spk / max(||spk||, 1e-12)) + b_spk (fp32, double accumulation);
 *           tokens validated in [0, vocab)
 *   device, once per call (eager launches):
 *     xe = E[tokens] (fp32 gather; finalize: 3 zero rows appended)                  [T'+3][80]
 *     h1 = leaky_0.01(b1 + sum_{k<4} xe[t+k] W1_k^T)   (4 accumulating fp32 GEMMs) [2 zero + T'][P]
 *     pre = b2 + sum_{k<3} h1[t+k] W2_k^T                (3 accumulating fp32 GEMMs)   [T'][80]
 *     mu[n] = pre[n/2] + xe[n/2]                                                        [N][80]
 *     cond = prompt_mel then zeros; x = noise[:, :N] (kept frame-major [N][80], fp32)
 *     hc[r] = W_in[:, 80:320] . [cond, mu, e] + b_in  for CFG row r = 0, and W_in . 0 + b_in
 *             for row 1 (one fp32 GEMM over both rows)                               [2][N][D]
 *   the 10 Euler steps (a CUDA graph per (N, streaming), cached; or direct launches):
 *     xp = x W_in[:, 0:80]^T (fp32 GEMM, shared by both rows); h = xp + hc[r]; hb = bf16(h)
 *     h += Mish(conv2(Mish(conv1(hb))))   (grouped causal conv k31, kernels/conv_pos.cu)
 *     22 blocks, B = 2 rows of N frames as one batch of 2N rows:
 *       n = bf16(LN(h) (1 + sc_a) + sh_a)   (fused with the previous block's h += g_m (f + b_2))
 *       qkv = n W_qkv^T (one bf16 GEMM, [2N][3D]); + b_qkv and interleaved RoPE on channels
 *             0..63 of q and k (one fused kernel; cos/sin table made on the host in fp32)
 *       a = attention (16 heads x 64, full or block-causal 50: cosy_k_attn_dit, bf16 tensor
 *           cores, fp32 softmax)
 *       o = a W_o^T (fp32 out); h += g_a (o + b_o); n = bf16(LN(h) (1 + sc_m) + sh_m)  (fused)
 *       f = gelu_tanh(n W_1^T + b_1) (one bf16 GEMM with cuBLASLt's GELU + bias epilogue, the
 *           bias in bf16 where cuBLASLt refuses fp32 (an H200 does)); o = f W_2^T (fp32)
 *     h += g_m (o + b_2); n = LN(h) (1 + scale) + shift (final AdaLN, scale first);
 *     v = n W_po^T + b_po (fp32)
 *     x = x + dt (c1 v[0] - c2 v[1])   (fp32; c1 = 1 + cfg, c2 = cfg)
 *   return x[n_prompt_frames:] transposed to [80][N - n_prompt_frames] (host).
 *
 * Choices:
 *  - AdaLN vectors depend on t alone, and the t of each Euler step is fixed by the schedule
 *    (computed on the host in fp32 exactly as the reference does), so the modulation vectors of
 *    every block and of norm_out for all 10 steps are computed once at create: time embedding
 *    (sinusoid on the host, MLP as fp32 GEMMs, SiLU), then ONE bf16 GEMM of the 10 rows against
 *    the stacked [22*6D + 2D][D] AdaLN weights -> an fp32 table [10][22*6D + 2D]. Both CFG rows
 *    use the step's row (mod_bstride 0). gpu_flow_estimator (arbitrary t per row) computes its
 *    rows the same way per call.
 *  - The input projection is split: the cond/mu/spk columns are constant over the steps
 *    (computed once per call), only the 80 x columns are multiplied per step.
 *  - Residual stream h, Euler state x, velocity v, the o / ff2 GEMM outputs: fp32. GEMM inputs
 *    (normalized activations, attention output, FF hidden): bf16. Weights: bf16 for the DiT
 *    matrices and the conv position embedding; fp32 for the time MLP, input projection,
 *    PreLookahead and the token embedding (all small).
 *  - Biases of the block GEMMs are added by the kernels that follow them (qkv: with RoPE; o and
 *    ff2: in the residual + LayerNorm kernel), so no separate bias pass runs. ff1's bias and GELU
 *    are the GEMM's epilogue (CUBLASLT_EPILOGUE_GELU_BIAS with the fp32 bias, or its bf16 copy
 *    where cuBLASLt refuses the fp32 one, as on an H200; kernels/gemm.cu): one launch instead
 *    of two per block, and the hidden f rounded to bf16 once (from the fp32 accumulator)
 *    instead of twice (GEMM output, then after bias + GELU; W2 on an H200 289.4 / 290.8x against
 *    286.0x with the two launches, bench/HISTORY.md); where cuBLASLt refuses the fused form, gemm.cu
 *    runs the GEMM and its own bias + GELU kernel and counts it (gpu_flow_ff1_fallbacks; the
 *    bf16 bias: gpu_flow_ff1_bias_bf16).
 *  - CUDA graphs: the 10 steps of a gpu_flow_infer call read only buffers fixed at create plus
 *    per-call data written before the launch, so a graph captured for (N, streaming) is replayed
 *    for every later call with the same key (LRU cache of GRAPH_CACHE graphs); the first call of
 *    a key runs with direct launches, its second call captures. A packed batch (gpu_flow_batch)
 *    keeps its whole plan (row maps, page tables, attention tiles) in device buffers uploaded
 *    before the steps, and what depends on the step (modulation row, pool offsets of the step's
 *    cached rows, dt) is copied into fixed device slots before each step, so ONE graph of one
 *    Euler step (~270 launches) serves all 10 steps of the call and every later call of the same
 *    sizes (new frames, ext rows, tiles, virtual rows). It is captured at the sizes' first call:
 *    under load nearly every batch has new sizes, and one step captures and instantiates in a
 *    few ms while direct launches of 10 steps leave the GPU waiting on the launch path (48 W1
 *    first chunks on an H100, test_gpu_flow: 114-119 ms at the sizes' first call, 94-102 ms
 *    replayed, 107-114 ms with graphs off; 135 ms when the first call launched directly).
 *    Capture uses the gpu's stream in
 *    relaxed mode; if capture fails, the launches go straight to the stream from then on. No
 *    host synchronization inside the loop either way.
 *    The graphs reference the cosy_gpu's GEMM workspace: do not run other work that uses it on
 *    another stream concurrently.
 *  - COSY_FLOW_PDL=1 (default off, a measurement knob): the flow's own elementwise kernels
 *    (resid_ln, qkv_post*, bias_gelu) are launched with programmatic dependent launch where the
 *    device has it (kernels/dit_elementwise.h `pdl`; each waits before touching memory), inside
 *    the step graphs too, so that their launch overlaps the end of the GEMM or attention before.
 *  - gpu_flow_estimator runs the batch two rows at a time with direct launches.
 *  - Work buffers are poisoned with NaN (0xFF bytes) at create: anything read before written
 *    shows up in the tests.
 */
#include "gpu/flow.h"
#include "ref/flow.h" /* flow_check_call, flow_cosine_schedule, flow_time_sinusoid, flow_prompt_only_blocks */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_pos.h"
#include "dit_elementwise.h"
#include "euler.h"
#include "flow_pack.h"
#include "util.h"

#define HEAD_DIM 64
#define LN_EPS 1e-6f
#define GRAPH_CACHE 128
/* A packed batch's sizes, rounded up to these multiples before its step graph is looked up (see
 * "Padded sizes" above batch_run): new frames (so 2 Tn rows are a multiple of 128), ext rows,
 * attention tiles */
#define PAD_TN 64
#define PAD_TE 128
#define PAD_TILES 8
#define PF 50 /* frames per cache page of a packed batch (= the attention block) */
#define ROWS 2 /* CFG batch */
#define MAX_MEL 256
#define SEEN_KEYS 32

typedef struct gblk {
  cosy_bf16 *qkv_w, *o_w, *ff1_w, *ff2_w; /* [3D][D], [D][D], [F][D], [D][F] */
  float *qkv_b, *o_b, *ff1_b, *ff2_b;
  cosy_bf16 *ff1_bh; /* ff1_b in bf16: the epilogue's bias where cuBLASLt refuses the fp32 one */
} gblk;

/* What a captured graph depends on: gpu_flow_infer's (N, streaming), or a packed batch's sizes
 * (batch = 1: N new frames, Te ext rows, attention tiles, virtual rows); everything else a call
 * varies lives in device buffers written before the launch. */
typedef struct gkey {
  int N, streaming, batch, Te, n_tiles, n_virt;
  int n_items, csize; /* the attention's cluster items and size (COSY_FLOW_ATTN_SPLIT=auto) */
  int tq;              /* the attention's query tile (64; 128: COSY_FLOW_ATTN_V2) */
} gkey;

/* What one Euler step of a packed batch reads that depends on the step k (lib/gpu/flow.c
 * batch_run copies step k's entry and modulation row into the "current" slots before the step,
 * so that one captured graph of a step serves all of them): the pool offsets of step k's x rows
 * (k PF M) and K/V rows (k depth 4 PF D), and its dt. */
typedef struct flow_step {
  int64_t xoff, kvoff;
  float dt, pad_;
} flow_step;

typedef struct ggraph {
  gkey key;
  cudaGraphExec_t exec; /* NULL: free slot */
  uint64_t used;
} ggraph;

struct gpu_flow {
  cosy_gpu *g;
  cudaStream_t s;
  int M, spk_dim, vocab, la, P, D, depth, heads, hd, F, cpk, cpg, chunk, ratio, S, noise_frames;
  float cfg, c1, c2;
  int max_frames, max_tok;
  int64_t TOT; /* modulation row: depth * 6D + 2D */
  /* host */
  float *h_spk_w, *h_spk_b; /* [M][spk_dim], [M] */
  float *t_step, *dt_step;  /* [S] */
  /* device weights */
  float *emb;                 /* [vocab][M] */
  float *pre1_w, *pre1_b;     /* taps [la+1][P][M], [P] */
  float *pre2_w, *pre2_b;     /* taps [3][M][P], [M] */
  float *t1_w, *t1_b, *t2_w, *t2_b;
  float *inx_w, *inr_w, *in_b; /* [D][M] (x columns), [D][3M] (cond, mu, spk), [D] */
  cosy_bf16 *cp_w[2];         /* [D][K][D/G] */
  float *cp_b[2];
  cosy_bf16 *ada_w; /* [TOT][D]: block l chunks at l*6D, norm_out at depth*6D */
  float *ada_b;     /* [TOT] */
  gblk *blk;
  cosy_bf16 *po_w; /* [M][D] */
  float *po_b;
  float *noise_fm; /* [noise_frames][M] */
  float *rope_cs;  /* [max_frames][hd/2][2]: cos, sin of n * inv_freq[i] */
  float *mod_tab;  /* [S][TOT] */
  float *mod_est;  /* [ROWS][TOT] */
  float *mod_cur;  /* [TOT]: the modulation row of the batch's current step */
  flow_step *step_tab, *step_cur; /* [S], [1] (device) */
  /* time embedding scratch */
  int te_rows;
  float *sinus, *te1, *te2; /* [te_rows][256], [te_rows][D] x 2 */
  cosy_bf16 *teb;           /* [te_rows][D] */
  /* per-call / per-step work */
  int32_t *ids;                        /* [max_tok] */
  float *xe, *h1, *pre;                /* [max_tok][M], [max_tok + 2][P], [max_tok][M] */
  float *xin, *mu, *cond, *spk;        /* [ROWS][Nmax][M] x 3, [ROWS][M] */
  float *inp;                          /* [ROWS][Nmax][3M] */
  float *hc, *h, *xo;                  /* [ROWS][Nmax][D] fp32 (xo: xp, then o / ff2 out) */
  float *v;                            /* [ROWS][Nmax][M] */
  cosy_bf16 *hb, *nb, *att, *qkv, *ffb; /* [ROWS][Nmax][D] x 3, [..][3D], [..][F] */
  float *host_out;                     /* pinned [ROWS][Nmax][M] */
  ggraph graphs[GRAPH_CACHE];
  void *fc; /* batched calls: page pool, packed buffers, plan (gpu_flow_pool) */
  uint64_t clock;
  int use_graph;
  struct {
    gkey key;
    uint64_t used;
  } seen[SEEN_KEYS]; /* keys run once without a graph: captured at their second call */
  /* COSY_FLOW_TIMING=path: one line per packed batch (measurement aid; batch_run) */
  FILE *timing;
  cudaEvent_t tev[2];
  double cap_ms;  /* capture + instantiation time of graph_run calls since the batch began */
  int n_cap, n_hit, n_direct;
  /* COSY_FLOW_ATTN_SPLIT: 2..8 key parts per attention query tile of a packed batch; 0 off;
   * GPU_FLOW_ATTN_AUTO: the part count per segment (cosy_k_attn_dit_paged_auto) */
  int attn_split;
  /* COSY_FLOW_ATTN_V2: 64 or 128, the query tile of cosy_k_attn_dit_paged_v2;
   * GPU_FLOW_ATTN_V2_AUTO: chosen per batch; 0 off */
  int attn_v2;
  /* 1 (default): a packed batch's sizes padded (PAD_TN, PAD_TE, PAD_TILES); COSY_FLOW_PAD=0 off */
  int pad;
  /* COSY_FLOW_PDL (cosy_gpu.flow_pdl) where the device has programmatic dependent launch: the
   * flow's own elementwise kernels (resid_ln, qkv_post*, bias_gelu) launched as programmatic
   * dependents of the kernel before them (kernels/dit_elementwise.h) */
  int pdl;
  /* the v2 attention's K/V pipeline: 0 the kernel's rule (4 tiles where the grid leaves SMs
   * idle: a small call's chain of L2 round trips), 2 double buffers everywhere (COSY_FLOW_DEEP=0,
   * cosy_gpu.flow_shallow) */
  int stages;
};

/* ---------------------------------------------------------------------------------------------
 * small helpers */

#define CK(expr, what)                                           \
  do {                                                           \
    cosy_status st_ = cosy_gpu_check((expr), (what));            \
    if (st_ != COSY_OK) return st_;                              \
  } while (0)

static cosy_status gemm_status(gpu_flow *f, cudaError_t e, int M, int N, int K,
                               const char *what) {
  cosy_status st = cosy_gpu_check(e, what); /* also on success: injected failures count it */
  if (st == COSY_OK) return COSY_OK;
  int cb = e == cudaSuccess ? 0 : cosy_gemm_last_cublas_status(f->g->gemm);
  if (cb)
    return cosy_err(st, "%s: GEMM %dx%dx%d failed: CUDA %s, cuBLAS status %d", what, M, N, K,
                    cudaGetErrorName(e), cb);
  return st;
}

static cosy_status gemm(gpu_flow *f, int M, int N, int K, cosy_kdtype ab, const void *x, int ldx,
                        const void *w, const float *bias, cosy_kdtype ydt, void *y, int ldy,
                        int accumulate, const char *what) {
  return gemm_status(
      f, cosy_k_gemm(f->g->gemm, f->s, M, N, K, ab, x, ldx, w, bias, ydt, y, ldy, accumulate), M,
      N, K, what);
}

/* bf16 block GEMM without bias (the kernels that follow add it) */
static cosy_status bgemm(gpu_flow *f, int M, int N, int K, const cosy_bf16 *x, int ldx,
                         const cosy_bf16 *w, cosy_kdtype ydt, void *y, int ldy, const char *what) {
  return gemm(f, M, N, K, COSY_KDT_BF16, x, ldx, w, NULL, ydt, y, ldy, 0, what);
}

/* ffb = gelu_tanh(nb W_1^T + b_1) for `rows` rows: one GEMM with the GELU + bias epilogue */
static cosy_status ff1(gpu_flow *f, const gblk *b, int rows) {
  const int D = f->D, F = f->F;
  return gemm_status(f,
                     cosy_k_gemm_gelu(f->g->gemm, f->s, rows, F, D, COSY_KDT_BF16, f->nb, D,
                                      b->ff1_w, b->ff1_b, b->ff1_bh, COSY_KDT_BF16, f->ffb, F),
                     rows, F, D, "flow: ff1 + bias + gelu");
}

static cosy_status alloc(gpu_flow *f, size_t bytes, const char *what, void **out) {
  return cosy_gpu_alloc(f->g, bytes, what, out);
}

/* host fp32 -> device bf16 at dst (n elements) */
static cosy_status put_bf16(void *dst, const float *src, size_t n, const char *what) {
  uint16_t *tmp = (uint16_t *)cosy_malloc(n * sizeof *tmp);
  if (!tmp) return COSY_ERR_NO_MEMORY;
  for (size_t i = 0; i < n; i++) tmp[i] = cosy_f32_to_bf16(src[i]);
  cosy_status st = cosy_gpu_check(cudaMemcpy(dst, tmp, n * 2, cudaMemcpyHostToDevice), what);
  free(tmp);
  return st;
}


/* tensor -> device (dt) */
static cosy_status up(gpu_flow *f, const cosy_model *m, cosy_kdtype dt, void **dst,
                      const char *name) {
  if (!cosy_model_tensor(m, name))
    return cosy_err(COSY_ERR_MODEL_FORMAT, "gpu flow: tensor %s missing from the model", name);
  return cosy_gpu_upload_tensor(f->g, m, name, dt, dst, NULL);
}

/* Conv1d weight [O][I][K] -> device [K][O][I] (one contiguous Linear weight per tap), fp32 */
static cosy_status up_taps(gpu_flow *f, const cosy_model *m, const char *name, int O, int I,
                           int K, float **dst) {
  float *w;
  cosy_status st0 = cosy_model_get_f32(m, &w, "%s", name);
  if (st0) return st0;
  float *p = (float *)cosy_malloc((size_t)O * I * K * sizeof *p);
  if (!p) {
    free(w);
    return COSY_ERR_NO_MEMORY;
  }
  for (int o = 0; o < O; o++)
    for (int i = 0; i < I; i++)
      for (int k = 0; k < K; k++) p[((size_t)k * O + o) * I + i] = w[((size_t)o * I + i) * K + k];
  cosy_status st = cosy_gpu_upload_f32(f->g, p, (size_t)O * I * K, COSY_KDT_F32, name, (void **)dst);
  free(w);
  free(p);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * time embedding -> AdaLN modulation rows: dst[r][0..TOT) for t[r], r < R (R <= te_rows) */
static cosy_status time_mod(gpu_flow *f, int R, const float *t, float *dst) {
  const int D = f->D, TF = FLOW_TIME_FREQ_DIM;
  float *sin_h = (float *)cosy_malloc((size_t)R * TF * sizeof(float));
  if (!sin_h) return COSY_ERR_NO_MEMORY;
  for (int r = 0; r < R; r++) flow_time_sinusoid(t[r], sin_h + (size_t)r * TF);
  cosy_status st = cosy_gpu_check(cudaMemcpyAsync(f->sinus, sin_h, (size_t)R * TF * 4,
                                                  cudaMemcpyHostToDevice, f->s),
                                  "flow: time embedding upload");
  free(sin_h);
  if (st) return st;
  if ((st = gemm(f, R, D, TF, COSY_KDT_F32, f->sinus, TF, f->t1_w, f->t1_b,
                 COSY_KDT_F32, f->te1, D, 0, "flow: time_mlp.0")))
    return st;
  CK(cosy_k_silu(f->s, COSY_KDT_F32, f->te1, COSY_KDT_F32, f->te1, (int64_t)R * D), "flow: silu");
  if ((st = gemm(f, R, D, D, COSY_KDT_F32, f->te1, D, f->t2_w, f->t2_b, COSY_KDT_F32, f->te2, D, 0,
                 "flow: time_mlp.2")))
    return st;
  CK(cosy_k_silu(f->s, COSY_KDT_F32, f->te2, COSY_KDT_BF16, f->teb, (int64_t)R * D),
     "flow: silu");
  return gemm(f, R, (int)f->TOT, D, COSY_KDT_BF16, f->teb, D, f->ada_w, f->ada_b, COSY_KDT_F32,
              dst, (int)f->TOT, 0, "flow: AdaLN modulation");
}

/* ---------------------------------------------------------------------------------------------
 * the DiT estimator over R rows of N frames. Inputs: x rows in f->xin ([N][M] shared by every
 * row when x_shared, else [R][N][M]), the constant input part in f->hc [R][N][D], modulation
 * rows mod (+ r * mbs). Output: f->v [R][N][M] fp32. Launches only (graph-capturable). */
static cosy_status dit(gpu_flow *f, int R, int N, int streaming, int x_shared, const float *mod,
                       int64_t mbs) {
  const int D = f->D, M = f->M, F = f->F, rows = R * N;
  const int64_t D6 = 6 * (int64_t)D;
  cudaStream_t s = f->s;
  const int pdl = f->pdl; /* COSY_FLOW_PDL */
  cosy_status st;
  /* input projection (x columns) + constant part; bf16 copy for the conv */
  if ((st = gemm(f, x_shared ? N : rows, D, M, COSY_KDT_F32, f->xin, M, f->inx_w, NULL,
                 COSY_KDT_F32, f->xo, D, 0, "flow: input proj")))
    return st;
  CK(cosy_k_flow_add_rows(s, f->xo, x_shared ? 0 : (int64_t)N * D, f->hc, f->h, f->hb, R, N, D),
     "flow: input rows");
  /* conv position embedding: h += Mish(conv2(Mish(conv1(h)))) */
  CK(cosy_k_flow_conv_pos(s, f->hb, f->cp_w[0], f->cp_b[0], f->nb, NULL, R, N, D, f->cpg, f->cpk),
     "flow: conv_pos 1");
  CK(cosy_k_flow_conv_pos(s, f->nb, f->cp_w[1], f->cp_b[1], NULL, f->h, R, N, D, f->cpg, f->cpk),
     "flow: conv_pos 2");
  const float scale = 1.0f / sqrtf((float)f->hd);
  for (int l = 0; l < f->depth; l++) {
    const gblk *b = &f->blk[l];
    const float *md = mod + l * D6; /* shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp */
    if (l == 0)
      CK(cosy_k_flow_resid_ln(s, f->h, NULL, NULL, NULL, md + D, md, mbs, f->nb, R, N, D, LN_EPS,
                              pdl),
         "flow: norm");
    else /* h += gate_mlp(l-1) * (ff2 out + ff2 bias of block l-1) */
      CK(cosy_k_flow_resid_ln(s, f->h, f->xo, f->blk[l - 1].ff2_b, md - D6 + 5 * D, md + D, md,
                              mbs, f->nb, R, N, D, LN_EPS, pdl),
         "flow: residual + norm");
    /* the GEMMs leave their biases to the kernels that follow (fused epilogues) */
    if ((st = bgemm(f, rows, 3 * D, D, f->nb, D, b->qkv_w, COSY_KDT_BF16, f->qkv, 3 * D,
                    "flow: qkv")))
      return st;
    CK(cosy_k_flow_qkv_post(s, f->qkv, b->qkv_b, f->rope_cs, R, N, D, f->hd, pdl),
       "flow: qkv bias + rope");
    CK(cosy_k_attn_dit(s, COSY_KDT_BF16, f->qkv, f->qkv + D, f->qkv + 2 * D, 3 * D, f->att, D, R,
                       N, f->heads, f->hd, streaming ? f->chunk : 0, scale),
       "flow: attention");
    if ((st = bgemm(f, rows, D, D, f->att, D, b->o_w, COSY_KDT_F32, f->xo, D, "flow: attn out")))
      return st;
    CK(cosy_k_flow_resid_ln(s, f->h, f->xo, b->o_b, md + 2 * D, md + 4 * D, md + 3 * D, mbs,
                            f->nb, R, N, D, LN_EPS, pdl),
       "flow: residual + norm");
    if ((st = ff1(f, b, rows))) return st;
    if ((st = bgemm(f, rows, D, F, f->ffb, F, b->ff2_w, COSY_KDT_F32, f->xo, D, "flow: ff2")))
      return st;
  }
  /* final: h += gate_mlp * ff; AdaLN (scale first, then shift); proj_out */
  const float *mo = mod + f->depth * D6;
  CK(cosy_k_flow_resid_ln(s, f->h, f->xo, f->blk[f->depth - 1].ff2_b, mo - D6 + 5 * D, mo, mo + D,
                          mbs, f->nb, R, N, D, LN_EPS, pdl),
     "flow: final norm");
  return gemm(f, rows, M, D, COSY_KDT_BF16, f->nb, D, f->po_w, f->po_b, COSY_KDT_F32, f->v, M, 0,
              "flow: proj_out");
}

/* the S Euler steps of a call (x in f->xin row 0, hc ready): launches only */
static cosy_status euler_steps(gpu_flow *f, int N, int streaming, int first, int last) {
  const int64_t MN = (int64_t)f->M * N;
  for (int k = first; k < last; k++) {
    cosy_status st = dit(f, ROWS, N, streaming, 1, f->mod_tab + k * f->TOT, 0);
    if (st) return st;
    CK(cosy_k_flow_euler(f->s, f->xin, f->v, f->v + MN, MN, f->dt_step[k], NULL, f->c1, f->c2),
       "flow: euler");
  }
  return COSY_OK;
}

static void drop_graphs(gpu_flow *f) {
  for (int i = 0; i < GRAPH_CACHE; i++) {
    if (f->graphs[i].exec) cudaGraphExecDestroy(f->graphs[i].exec);
    memset(&f->graphs[i], 0, sizeof f->graphs[i]);
  }
}

void gpu_flow_set_graphs(gpu_flow *f, int enable) {
  if (!f) return;
  if (f->s) cudaStreamSynchronize(f->s);
  drop_graphs(f);
  memset(f->seen, 0, sizeof f->seen);
  f->use_graph = enable ? 1 : 0;
}

/* Run fn(f, arg) (launches only) through the graph cache under key: replay a graph captured for
 * the key, capture one (at the key's first call when capture_now, else at its second), or launch
 * directly (first call of a key without capture_now, graphs off, or capture not possible). */
typedef cosy_status (*enqueue_fn)(gpu_flow *f, const void *arg);

static cosy_status graph_run(gpu_flow *f, const gkey *key, enqueue_fn fn, const void *arg,
                             int capture_now) {
  if (!f->use_graph) return fn(f, arg);
  ggraph *slot = NULL;
  for (int i = 0; i < GRAPH_CACHE; i++)
    if (f->graphs[i].exec && memcmp(&f->graphs[i].key, key, sizeof *key) == 0) {
      slot = &f->graphs[i];
      break;
    }
  if (!slot) {
    /* a key seen for the first time runs with direct launches (capture + instantiation cost
     * more than one call's launches); its second call captures the graph */
    int seen = -1, lru = 0;
    for (int i = 0; i < SEEN_KEYS; i++) {
      if (f->seen[i].used && memcmp(&f->seen[i].key, key, sizeof *key) == 0) seen = i;
      if (f->seen[i].used < f->seen[lru].used) lru = i;
    }
    if (seen < 0 && !capture_now) {
      f->seen[lru].key = *key;
      f->seen[lru].used = ++f->clock;
      f->n_direct++;
      return fn(f, arg);
    }
    if (seen >= 0) f->seen[seen].used = 0; /* the graph cache takes over */
    const double tc0 = cosy_now();
    cudaGraph_t graph = NULL;
    cosy_status st =
        cosy_gpu_capture_begin(f->s, cudaStreamCaptureModeRelaxed, "flow: begin graph capture");
    if (st) return st;
    st = fn(f, arg);
    cudaError_t e = cudaStreamEndCapture(f->s, &graph);
    if (st) {
      if (graph) cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      return st;
    }
    cudaGraphExec_t exec = NULL;
    if (e == cudaSuccess) {
      e = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
    }
    if (e != cudaSuccess) {
      /* capture not possible here (e.g. a library call that cannot be captured): from now on
       * run the launches directly */
      (void)cudaGetLastError();
      f->use_graph = 0;
      return fn(f, arg);
    }
    slot = &f->graphs[0];
    for (int i = 0; i < GRAPH_CACHE; i++) {
      if (!f->graphs[i].exec) {
        slot = &f->graphs[i];
        break;
      }
      if (f->graphs[i].used < slot->used) slot = &f->graphs[i];
    }
    if (slot->exec) cudaGraphExecDestroy(slot->exec);
    slot->exec = exec;
    slot->key = *key;
    f->cap_ms += 1e3 * (cosy_now() - tc0);
    f->n_cap++;
  } else {
    f->n_hit++;
  }
  slot->used = ++f->clock;
  CK(cudaGraphLaunch(slot->exec, f->s), "flow: graph launch");
  return COSY_OK;
}

typedef struct infer_args {
  int N, streaming;
} infer_args;

static cosy_status infer_enqueue(gpu_flow *f, const void *arg) {
  const infer_args *a = (const infer_args *)arg;
  return euler_steps(f, a->N, a->streaming, 0, f->S);
}

static cosy_status run_steps(gpu_flow *f, int N, int streaming, const volatile int *cancel) {
  if (!f->use_graph) {
    for (int k = 0; k < f->S; k++) {
      if (cancel && *cancel) return cosy_err(COSY_ERR_CANCELLED, "flow decoding cancelled");
      cosy_status st = euler_steps(f, N, streaming, k, k + 1);
      if (st) return st;
    }
    return COSY_OK;
  }
  if (cancel && *cancel) return cosy_err(COSY_ERR_CANCELLED, "flow decoding cancelled");
  gkey key;
  memset(&key, 0, sizeof key);
  key.N = N;
  key.streaming = streaming;
  infer_args a = {N, streaming};
  return graph_run(f, &key, infer_enqueue, &a, 0);
}

/* ---------------------------------------------------------------------------------------------
 * create / free */

typedef struct gflow_cache gflow_cache;
static void fc_free(void *fc);

void gpu_flow_free(gpu_flow *f) {
  if (!f) return;
  if (f->s) cudaStreamSynchronize(f->s);
  drop_graphs(f);
  if (f->timing) {
    fclose(f->timing);
    cudaEventDestroy(f->tev[0]);
    cudaEventDestroy(f->tev[1]);
  }
  free(f->h_spk_w);
  free(f->h_spk_b);
  free(f->t_step);
  free(f->dt_step);
  free(f->blk);
  cosy_gpu_host_free(f->host_out);
  fc_free(f->fc);
  free(f);
}

cosy_status gpu_flow_create(cosy_gpu *g, const cosy_model *m, int max_frames, gpu_flow **out) {
  if (!out) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_flow_create: out is NULL");
  *out = NULL;
  if (!g || !m) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_flow_create: NULL argument");
  const cosy_hparams *hp = &m->hp;
  if (hp->dit_head_dim != HEAD_DIM || hp->dit_heads * hp->dit_head_dim != hp->dit_dim ||
      hp->conv_pos_groups < 1 || hp->dit_dim % hp->conv_pos_groups || hp->conv_pos_kernel < 1 ||
      hp->chunk_frames < 1 || hp->token_mel_ratio < 1 || hp->n_timesteps < 1 ||
      hp->mel_dim < 1 || hp->mel_dim % 4 || hp->mel_dim > MAX_MEL || hp->pre_lookahead < 0 || hp->dit_dim % 4 ||
      hp->dit_dim > 4096 || hp->dit_dim % 8 || hp->dit_ff % 8 || hp->dit_depth < 1 || hp->dit_ff < 1 || hp->pre_channels < 1 || hp->noise_frames < 1)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "gpu_flow_create: unsupported flow geometry");
  if (max_frames < 1 || max_frames > hp->noise_frames)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_flow_create: max_frames %d not in [1, %d]",
                    max_frames, hp->noise_frames);
  gpu_flow *f = (gpu_flow *)cosy_calloc(1, sizeof *f);
  if (!f) return COSY_ERR_NO_MEMORY;
  f->g = g;
  f->pad = 1;
  f->pdl = g->flow_pdl && g->dev.pdl;
  f->stages = g->flow_shallow ? 2 : 0;
  f->s = g->stream;
  f->M = hp->mel_dim;
  f->spk_dim = hp->spk_dim;
  f->vocab = hp->flow_vocab;
  f->la = hp->pre_lookahead;
  f->P = hp->pre_channels;
  f->D = hp->dit_dim;
  f->depth = hp->dit_depth;
  f->heads = hp->dit_heads;
  f->hd = hp->dit_head_dim;
  f->F = hp->dit_ff;
  f->cpk = hp->conv_pos_kernel;
  f->cpg = hp->conv_pos_groups;
  f->chunk = hp->chunk_frames;
  f->ratio = hp->token_mel_ratio;
  f->S = hp->n_timesteps;
  f->noise_frames = hp->noise_frames;
  f->cfg = hp->cfg_rate;
  f->c1 = (float)(1.0 + (double)f->cfg);
  f->c2 = f->cfg;
  f->max_frames = max_frames;
  f->max_tok = max_frames / f->ratio + f->la + 1;
  f->use_graph = 1;
  const int M = f->M, D = f->D, P = f->P, F = f->F, S = f->S;
  const int64_t D6 = 6 * (int64_t)D;
  f->TOT = f->depth * D6 + 2 * (int64_t)D;
  cosy_status st = COSY_OK;
  float *tmp = NULL, *tmp2 = NULL, *tmp3 = NULL;
#define TRY(x)                        \
  do {                                \
    if ((st = (x)) != COSY_OK) goto fail; \
  } while (0)
#define HOST(dst, ...)                                                 \
  do {                                                                 \
    if ((st = cosy_model_get_f32(m, &(dst), __VA_ARGS__)) != COSY_OK) goto fail; \
  } while (0)

  /* host-side copies */
  HOST(f->h_spk_w, "flow.spk_embed_affine_layer.weight");
  HOST(f->h_spk_b, "flow.spk_embed_affine_layer.bias");
  /* schedule: the t fed to the estimator at each step and the dt applied after it */
  f->t_step = (float *)cosy_malloc((size_t)S * sizeof(float));
  f->dt_step = (float *)cosy_malloc((size_t)S * sizeof(float));
  tmp = (float *)cosy_malloc((size_t)(S + 1) * sizeof(float));
  f->blk = (gblk *)cosy_calloc((size_t)f->depth, sizeof *f->blk);
  if (!f->t_step || !f->dt_step || !tmp || !f->blk) {
    st = COSY_ERR_NO_MEMORY;
    goto fail;
  }
  flow_cosine_schedule(S, tmp);
  {
    float t = tmp[0], dt = tmp[1] - tmp[0];
    for (int step = 1; step <= S; step++) {
      f->t_step[step - 1] = t;
      f->dt_step[step - 1] = dt;
      t = t + dt;
      if (step < S) dt = tmp[step + 1] - t;
    }
  }
  free(tmp);
  tmp = NULL;

  /* weights */
  TRY(up(f, m, COSY_KDT_F32, (void **)&f->emb, "flow.input_embedding.weight"));
  TRY(up_taps(f, m, "flow.pre_lookahead_layer.conv1.weight", P, M, f->la + 1, &f->pre1_w));
  TRY(up(f, m, COSY_KDT_F32, (void **)&f->pre1_b, "flow.pre_lookahead_layer.conv1.bias"));
  TRY(up_taps(f, m, "flow.pre_lookahead_layer.conv2.weight", M, P, 3, &f->pre2_w));
  TRY(up(f, m, COSY_KDT_F32, (void **)&f->pre2_b, "flow.pre_lookahead_layer.conv2.bias"));
  TRY(up(f, m, COSY_KDT_F32, (void **)&f->t1_w, "flow.dit.time_embed.time_mlp.0.weight"));
  TRY(up(f, m, COSY_KDT_F32, (void **)&f->t1_b, "flow.dit.time_embed.time_mlp.0.bias"));
  TRY(up(f, m, COSY_KDT_F32, (void **)&f->t2_w, "flow.dit.time_embed.time_mlp.2.weight"));
  TRY(up(f, m, COSY_KDT_F32, (void **)&f->t2_b, "flow.dit.time_embed.time_mlp.2.bias"));
  TRY(up(f, m, COSY_KDT_F32, (void **)&f->in_b, "flow.dit.input_embed.proj.bias"));
  {
    HOST(tmp, "flow.dit.input_embed.proj.weight"); /* [D][4M]: x, cond, mu, spk */
    tmp2 = (float *)cosy_malloc((size_t)D * 3 * M * sizeof(float));
    tmp3 = (float *)cosy_malloc((size_t)D * M * sizeof(float));
    if (!tmp2 || !tmp3) {
      st = COSY_ERR_NO_MEMORY;
      goto fail;
    }
    for (int o = 0; o < D; o++) {
      memcpy(tmp3 + (size_t)o * M, tmp + (size_t)o * 4 * M, (size_t)M * sizeof(float));
      memcpy(tmp2 + (size_t)o * 3 * M, tmp + (size_t)o * 4 * M + M, (size_t)3 * M * sizeof(float));
    }
    TRY(cosy_gpu_upload_f32(g, tmp3, (size_t)D * M, COSY_KDT_F32, "flow input proj",
                            (void **)&f->inx_w));
    TRY(cosy_gpu_upload_f32(g, tmp2, (size_t)D * 3 * M, COSY_KDT_F32, "flow input proj",
                            (void **)&f->inr_w));
    free(tmp);
    free(tmp2);
    free(tmp3);
    tmp = tmp2 = tmp3 = NULL;
  }
  for (int c = 0; c < 2; c++) {
    const int cin = D / f->cpg, K = f->cpk;
    HOST(tmp, "flow.dit.input_embed.conv_pos_embed.conv%d.0.weight", c + 1); /* [D][cin][K] */
    tmp2 = (float *)cosy_malloc((size_t)D * cin * K * sizeof(float));
    if (!tmp2) {
      st = COSY_ERR_NO_MEMORY;
      goto fail;
    }
    for (int o = 0; o < D; o++)
      for (int i = 0; i < cin; i++)
        for (int k = 0; k < K; k++)
          tmp2[((size_t)o * K + k) * cin + i] = tmp[((size_t)o * cin + i) * K + k];
    TRY(cosy_gpu_upload_f32(g, tmp2, (size_t)D * cin * K, COSY_KDT_BF16, "flow conv_pos",
                            (void **)&f->cp_w[c]));
    free(tmp);
    free(tmp2);
    tmp = tmp2 = NULL;
    char nm[128];
    snprintf(nm, sizeof nm, "flow.dit.input_embed.conv_pos_embed.conv%d.0.bias", c + 1);
    TRY(up(f, m, COSY_KDT_F32, (void **)&f->cp_b[c], nm));
  }
  /* AdaLN weights of every block + norm_out, stacked */
  TRY(alloc(f, (size_t)f->TOT * D * 2, "flow AdaLN weights", (void **)&f->ada_w));
  tmp3 = (float *)cosy_malloc((size_t)f->TOT * sizeof(float));
  if (!tmp3) {
    st = COSY_ERR_NO_MEMORY;
    goto fail;
  }
  for (int l = 0; l <= f->depth; l++) {
    const int last = l == f->depth;
    const int64_t rows = last ? 2 * (int64_t)D : D6;
    if (last) {
      HOST(tmp, "flow.dit.norm_out.linear.weight");
      HOST(tmp2, "flow.dit.norm_out.linear.bias");
    } else {
      HOST(tmp, "flow.dit.transformer_blocks.%d.attn_norm.linear.weight", l);
      HOST(tmp2, "flow.dit.transformer_blocks.%d.attn_norm.linear.bias", l);
    }
    TRY(put_bf16((uint16_t *)f->ada_w + (size_t)l * D6 * D, tmp, (size_t)rows * D,
                 "flow AdaLN weights"));
    memcpy(tmp3 + (size_t)l * D6, tmp2, (size_t)rows * sizeof(float));
    free(tmp);
    free(tmp2);
    tmp = tmp2 = NULL;
  }
  TRY(cosy_gpu_upload_f32(g, tmp3, (size_t)f->TOT, COSY_KDT_F32, "flow AdaLN bias",
                          (void **)&f->ada_b));
  free(tmp3);
  tmp3 = NULL;
  /* blocks */
  {
    const char *pb = "flow.dit.transformer_blocks";
    const char *qkvn[3] = {"to_q", "to_k", "to_v"};
    float *wq = (float *)cosy_malloc((size_t)3 * D * D * sizeof(float));
    float *bq = (float *)cosy_malloc((size_t)3 * D * sizeof(float));
    if (!wq || !bq) {
      free(wq);
      free(bq);
      st = COSY_ERR_NO_MEMORY;
      goto fail;
    }
    for (int l = 0; l < f->depth && !st; l++) {
      gblk *b = &f->blk[l];
      for (int j = 0; j < 3 && !st; j++) {
        float *w = NULL, *bb = NULL;
        st = cosy_model_get_f32(m, &w, "%s.%d.attn.%s.weight", pb, l, qkvn[j]);
        if (!st) st = cosy_model_get_f32(m, &bb, "%s.%d.attn.%s.bias", pb, l, qkvn[j]);
        if (!st) {
          memcpy(wq + (size_t)j * D * D, w, (size_t)D * D * sizeof(float));
          memcpy(bq + (size_t)j * D, bb, (size_t)D * sizeof(float));
        }
        free(w);
        free(bb);
      }
      if (!st)
        st = cosy_gpu_upload_f32(g, wq, (size_t)3 * D * D, COSY_KDT_BF16, "flow qkv",
                                 (void **)&b->qkv_w);
      if (!st)
        st = cosy_gpu_upload_f32(g, bq, (size_t)3 * D, COSY_KDT_F32, "flow qkv",
                                 (void **)&b->qkv_b);
      char nm[160];
#define UPB(field, dt, suffix)                                              \
  if (!st) {                                                                \
    snprintf(nm, sizeof nm, "%s.%d.%s", pb, l, suffix);                     \
    st = up(f, m, dt, (void **)&b->field, nm);                              \
  }
      UPB(o_w, COSY_KDT_BF16, "attn.to_out.0.weight")
      UPB(o_b, COSY_KDT_F32, "attn.to_out.0.bias")
      UPB(ff1_w, COSY_KDT_BF16, "ff.ff.0.0.weight")
      UPB(ff1_b, COSY_KDT_F32, "ff.ff.0.0.bias")
      UPB(ff1_bh, COSY_KDT_BF16, "ff.ff.0.0.bias")
      UPB(ff2_w, COSY_KDT_BF16, "ff.ff.2.weight")
      UPB(ff2_b, COSY_KDT_F32, "ff.ff.2.bias")
#undef UPB
    }
    free(wq);
    free(bq);
    if (st) goto fail;
  }
  TRY(up(f, m, COSY_KDT_BF16, (void **)&f->po_w, "flow.dit.proj_out.weight"));
  TRY(up(f, m, COSY_KDT_F32, (void **)&f->po_b, "flow.dit.proj_out.bias"));
  /* noise [M][noise_frames] -> frame-major [noise_frames][M] */
  {
    HOST(tmp, "flow.noise");
    size_t nf = (size_t)f->noise_frames;
    tmp2 = (float *)cosy_malloc(nf * M * sizeof(float));
    if (!tmp2) {
      st = COSY_ERR_NO_MEMORY;
      goto fail;
    }
    for (int c = 0; c < M; c++)
      for (size_t n = 0; n < nf; n++) tmp2[n * M + c] = tmp[(size_t)c * nf + n];
    TRY(cosy_gpu_upload_f32(g, tmp2, nf * M, COSY_KDT_F32, "flow noise", (void **)&f->noise_fm));
    free(tmp);
    free(tmp2);
    tmp = tmp2 = NULL;
  }
  /* RoPE table: inv_freq as x-transformers computes it (fp32), angle n * inv_freq in fp32 */
  {
    const int half = f->hd / 2;
    float invf[HEAD_DIM / 2];
    for (int i = 0; i < half; i++) invf[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)f->hd);
    tmp = (float *)cosy_malloc((size_t)max_frames * half * 2 * sizeof(float));
    if (!tmp) {
      st = COSY_ERR_NO_MEMORY;
      goto fail;
    }
    for (int n = 0; n < max_frames; n++)
      for (int i = 0; i < half; i++) {
        float ang = (float)n * invf[i];
        tmp[((size_t)n * half + i) * 2] = cosf(ang);
        tmp[((size_t)n * half + i) * 2 + 1] = sinf(ang);
      }
    TRY(cosy_gpu_upload_f32(g, tmp, (size_t)max_frames * half * 2, COSY_KDT_F32, "flow rope",
                            (void **)&f->rope_cs));
    free(tmp);
    tmp = NULL;
  }

  /* buffers */
  {
    const size_t NR = (size_t)ROWS * max_frames;
    f->te_rows = S > ROWS ? S : ROWS;
    struct {
      void **p;
      size_t bytes;
      const char *what;
    } plan[] = {
        {(void **)&f->mod_tab, (size_t)S * f->TOT * 4, "flow modulation table"},
        {(void **)&f->mod_est, (size_t)ROWS * f->TOT * 4, "flow modulation rows"},
        {(void **)&f->mod_cur, (size_t)f->TOT * 4, "flow modulation row"},
        {(void **)&f->step_tab, (size_t)(S + 1) * sizeof(flow_step), "flow step table"},
        {(void **)&f->sinus, (size_t)f->te_rows * FLOW_TIME_FREQ_DIM * 4, "flow time embedding"},
        {(void **)&f->te1, (size_t)f->te_rows * D * 4, "flow time embedding"},
        {(void **)&f->te2, (size_t)f->te_rows * D * 4, "flow time embedding"},
        {(void **)&f->teb, (size_t)f->te_rows * D * 2, "flow time embedding"},
        {(void **)&f->ids, (size_t)f->max_tok * 4, "flow tokens"},
        {(void **)&f->xe, (size_t)f->max_tok * M * 4, "flow token embeddings"},
        {(void **)&f->h1, (size_t)(f->max_tok + 2) * P * 4, "flow pre-lookahead"},
        {(void **)&f->pre, (size_t)f->max_tok * M * 4, "flow pre-lookahead"},
        {(void **)&f->xin, NR * M * 4, "flow x"},
        {(void **)&f->mu, NR * M * 4, "flow mu"},
        {(void **)&f->cond, NR * M * 4, "flow cond"},
        {(void **)&f->spk, (size_t)ROWS * M * 4, "flow spk"},
        {(void **)&f->inp, NR * 3 * M * 4, "flow input rows"},
        {(void **)&f->hc, NR * D * 4, "flow input rows"},
        {(void **)&f->h, NR * D * 4, "flow residual"},
        {(void **)&f->xo, NR * D * 4, "flow projections"},
        {(void **)&f->v, NR * M * 4, "flow velocity"},
        {(void **)&f->hb, NR * D * 2, "flow activations"},
        {(void **)&f->nb, NR * D * 2, "flow activations"},
        {(void **)&f->att, NR * D * 2, "flow attention"},
        {(void **)&f->qkv, NR * 3 * D * 2, "flow qkv"},
        {(void **)&f->ffb, NR * F * 2, "flow feed-forward"},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
      TRY(alloc(f, plan[i].bytes, plan[i].what, plan[i].p));
      /* poison: NaN in fp32 and bf16 */
      TRY(cosy_gpu_check(cudaMemsetAsync(*plan[i].p, 0xFF, plan[i].bytes, f->s), "flow poison"));
    }
    TRY(cosy_gpu_host_alloc(NR * M * sizeof(float), (void **)&f->host_out));
  }

  /* the modulation table of the fixed schedule; the per-step offsets of a packed batch */
  TRY(time_mod(f, S, f->t_step, f->mod_tab));
  f->step_cur = f->step_tab + S;
  {
    flow_step *st_h = (flow_step *)cosy_calloc((size_t)S, sizeof *st_h);
    if (!st_h) {
      st = COSY_ERR_NO_MEMORY;
      goto fail;
    }
    for (int k = 0; k < S; k++) {
      st_h[k].xoff = (int64_t)k * PF * M;
      st_h[k].kvoff = (int64_t)k * f->depth * 4 * PF * D;
      st_h[k].dt = f->dt_step[k];
    }
    cudaError_t e = cudaMemcpyAsync(f->step_tab, st_h, (size_t)S * sizeof *st_h,
                                    cudaMemcpyHostToDevice, f->s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(f->s);
    free(st_h);
    TRY(cosy_gpu_check(e, "flow step table"));
  }
  TRY(cosy_gpu_sync(g, "gpu_flow_create"));
  *out = f;
  return COSY_OK;
fail:
  free(tmp);
  free(tmp2);
  free(tmp3);
  gpu_flow_free(f);
  return st;
#undef TRY
#undef HOST
}

/* ---------------------------------------------------------------------------------------------
 * inference */

/* row 0 of the constant input part: pack [cond, mu, spk] (row 1: zeros), hc = W_r . inp + b */
static cosy_status const_rows(gpu_flow *f, int R, int N, const float *const *cond,
                              const float *const *mu, const float *const *spk) {
  const int M = f->M;
  for (int r = 0; r < R; r++)
    CK(cosy_k_flow_pack_cond(f->s, f->inp + (size_t)r * N * 3 * M, cond[r], mu[r], spk[r], N, M),
       "flow: input rows");
  return gemm(f, R * N, f->D, 3 * M, COSY_KDT_F32, f->inp, 3 * M, f->inr_w, f->in_b, COSY_KDT_F32,
              f->hc, f->D, 0, "flow: input proj (constant part)");
}

/* mu [N = ratio n_used][M] in f->mu from the token ids in f->ids (n_all of them): token
 * embedding (finalize: zero rows up to n_used + la), PreLookahead conv1 (k = la+1) -> leaky relu ->
 * conv2 (k 3, left pad 2) -> + x, repeated ratio times. Launches only. */
static cosy_status prelookahead(gpu_flow *f, int n_all, int n_used) {
  const int M = f->M, la = f->la, P = f->P, N = f->ratio * n_used;
  cudaStream_t s = f->s;
  cosy_status st;
  CK(cosy_k_embed(s, COSY_KDT_F32, f->emb, f->vocab, M, f->ids, n_all, COSY_KDT_F32, f->xe, M,
                  NULL),
     "flow: embedding");
  if (n_used + la > n_all)
    CK(cudaMemsetAsync(f->xe + (size_t)n_all * M, 0, (size_t)(n_used + la - n_all) * M * 4, s),
       "flow: memset");
  CK(cudaMemsetAsync(f->h1, 0, (size_t)2 * P * 4, s), "flow: memset");
  for (int k = 0; k <= la; k++)
    if ((st = gemm(f, n_used, P, M, COSY_KDT_F32, f->xe + (size_t)k * M, M,
                   f->pre1_w + (size_t)k * P * M, k == 0 ? f->pre1_b : NULL, COSY_KDT_F32,
                   f->h1 + (size_t)2 * P, P, k > 0, "flow: pre-lookahead conv1")))
      return st;
  CK(cosy_k_leaky_relu(s, COSY_KDT_F32, f->h1 + (size_t)2 * P, COSY_KDT_F32, f->h1 + (size_t)2 * P,
                       (int64_t)n_used * P, 0.01f),
     "flow: leaky relu");
  for (int k = 0; k < 3; k++)
    if ((st = gemm(f, n_used, M, P, COSY_KDT_F32, f->h1 + (size_t)k * P, P,
                   f->pre2_w + (size_t)k * M * P, k == 0 ? f->pre2_b : NULL, COSY_KDT_F32, f->pre,
                   M, k > 0, "flow: pre-lookahead conv2")))
      return st;
  CK(cosy_k_flow_mu(s, f->mu, f->pre, f->xe, f->ratio, N, M), "flow: mu");
  return COSY_OK;
}

cosy_status gpu_flow_infer(gpu_flow *f, const int32_t *tokens, int n_prompt, int n_gen,
                           const float *prompt_mel, int n_prompt_frames, const float *spk,
                           int streaming, int finalize, const volatile int *cancel, float **mel,
                           int *n_frames) {
  if (mel) *mel = NULL;
  if (n_frames) *n_frames = 0;
  if (!f || !mel || !n_frames)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_flow_infer: NULL argument");
  const int M = f->M, la = f->la;
  int n_used;
  cosy_status cst = flow_check_call("gpu_flow_infer", f->vocab, f->ratio, la, f->max_frames,
                                    tokens, n_prompt, n_gen, prompt_mel, n_prompt_frames, spk,
                                    finalize, &n_used);
  if (cst) return cst;
  const long n_all = (long)n_prompt + n_gen;
  const int N = f->ratio * n_used;
  const int n_out = N - n_prompt_frames;
  f->s = f->g->stream; /* the context's current stream (the backend may swap in its urgent one) */
  cudaStream_t s = f->s;
  cosy_status st;

  /* speaker: F.normalize then affine (host, fp32 result) */
  float eh[MAX_MEL];
  {
    double ss = 0;
    for (int i = 0; i < f->spk_dim; i++) ss += (double)spk[i] * spk[i];
    float nrm = (float)sqrt(ss);
    if (nrm < 1e-12f) nrm = 1e-12f;
    for (int o = 0; o < M; o++) {
      double acc = 0;
      const float *w = f->h_spk_w + (size_t)o * f->spk_dim;
      for (int i = 0; i < f->spk_dim; i++) acc += (double)w[i] * (double)(spk[i] / nrm);
      eh[o] = (float)acc + f->h_spk_b[o];
    }
  }
  /* uploads first (pageable copies wait for the stream) */
  CK(cudaMemcpyAsync(f->spk, eh, (size_t)M * 4, cudaMemcpyHostToDevice, s), "flow: upload");
  CK(cudaMemcpyAsync(f->ids, tokens, (size_t)n_all * 4, cudaMemcpyHostToDevice, s),
     "flow: upload");
  if (n_prompt_frames > 0)
    CK(cudaMemcpyAsync(f->cond, prompt_mel, (size_t)n_prompt_frames * M * 4,
                       cudaMemcpyHostToDevice, s),
       "flow: upload");
  if ((st = prelookahead(f, (int)n_all, n_used))) return st;
  /* cond = prompt mel (uploaded above) then zeros; x = noise[:, :N] */
  if (N > n_prompt_frames)
    CK(cudaMemsetAsync(f->cond + (size_t)n_prompt_frames * M, 0, (size_t)n_out * M * 4, s),
       "flow: memset");
  CK(cudaMemcpyAsync(f->xin, f->noise_fm, (size_t)N * M * 4, cudaMemcpyDeviceToDevice, s),
     "flow: noise");
  {
    const float *cd[ROWS] = {f->cond, NULL}, *mu[ROWS] = {f->mu, NULL}, *sp[ROWS] = {f->spk, NULL};
    if ((st = const_rows(f, ROWS, N, cd, mu, sp))) return st;
  }
  /* the Euler / CFG loop */
  if ((st = run_steps(f, N, streaming ? 1 : 0, cancel))) {
    cudaStreamSynchronize(s);
    return st;
  }
  float *res = (float *)cosy_malloc((size_t)M * (n_out > 0 ? n_out : 1) * sizeof(float));
  if (!res) {
    cudaStreamSynchronize(s);
    return COSY_ERR_NO_MEMORY;
  }
  if (n_out > 0 &&
      (st = cosy_gpu_check(cudaMemcpyAsync(f->host_out, f->xin + (size_t)n_prompt_frames * M,
                                           (size_t)n_out * M * 4, cudaMemcpyDeviceToHost, s),
                           "flow: download"))) {
    cudaStreamSynchronize(s);
    free(res);
    return st;
  }
  if ((st = cosy_gpu_sync(f->g, "gpu_flow_infer"))) {
    free(res);
    return st;
  }
  for (int n = 0; n < n_out; n++)
    for (int c = 0; c < M; c++) res[(size_t)c * n_out + n] = f->host_out[(size_t)n * M + c];
  *mel = res;
  *n_frames = n_out;
  return COSY_OK;
}

cosy_status gpu_flow_estimator(gpu_flow *f, int B, int N, const float *x, const float *mu,
                               const float *t, const float *spks, const float *cond,
                               int streaming, float *out) {
  if (!f || !x || !mu || !t || !spks || !cond || !out)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_flow_estimator: NULL argument");
  if (B < 1 || B > 1024)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_flow_estimator: batch %d not in [1, 1024]", B);
  if (N < 1 || N > f->max_frames)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_flow_estimator: N = %d frames not in [1, %d]", N,
                    f->max_frames);
  const int M = f->M;
  const size_t per = (size_t)M * N;
  f->s = f->g->stream;
  cudaStream_t s = f->s;
  cosy_status st = COSY_OK;
  float *tr = (float *)cosy_malloc(3 * per * sizeof(float));
  if (!tr) return COSY_ERR_NO_MEMORY;
  for (int b0 = 0; b0 < B && !st; b0 += ROWS) {
    const int R = B - b0 < ROWS ? B - b0 : ROWS;
    const float *cd[ROWS], *mp[ROWS], *sp[ROWS];
    for (int r = 0; r < R && !st; r++) {
      const size_t off = (size_t)(b0 + r) * per;
      /* [M][N] -> [N][M] */
      for (int c = 0; c < M; c++)
        for (int n = 0; n < N; n++) {
          tr[(size_t)n * M + c] = x[off + (size_t)c * N + n];
          tr[per + (size_t)n * M + c] = mu[off + (size_t)c * N + n];
          tr[2 * per + (size_t)n * M + c] = cond[off + (size_t)c * N + n];
        }
      /* pageable host -> device copies return once the source has been staged */
      st = cosy_gpu_check(cudaMemcpyAsync(f->xin + r * per, tr, per * 4, cudaMemcpyHostToDevice, s),
                          "flow: upload");
      if (!st)
        st = cosy_gpu_check(
            cudaMemcpyAsync(f->mu + r * per, tr + per, per * 4, cudaMemcpyHostToDevice, s),
            "flow: upload");
      if (!st)
        st = cosy_gpu_check(
            cudaMemcpyAsync(f->cond + r * per, tr + 2 * per, per * 4, cudaMemcpyHostToDevice, s),
            "flow: upload");
      if (!st)
        st = cosy_gpu_check(cudaMemcpyAsync(f->spk + (size_t)r * M, spks + (size_t)(b0 + r) * M,
                                            (size_t)M * 4, cudaMemcpyHostToDevice, s),
                            "flow: upload");
      cd[r] = f->cond + r * per;
      mp[r] = f->mu + r * per;
      sp[r] = f->spk + (size_t)r * M;
    }
    if (!st) st = time_mod(f, R, t + b0, f->mod_est);
    if (!st) st = const_rows(f, R, N, cd, mp, sp);
    if (!st) st = dit(f, R, N, streaming ? 1 : 0, 0, f->mod_est, f->TOT);
    if (!st)
      st = cosy_gpu_check(cudaMemcpyAsync(f->host_out, f->v, (size_t)R * per * 4,
                                          cudaMemcpyDeviceToHost, s),
                          "flow: download");
    if (!st) st = cosy_gpu_sync(f->g, "gpu_flow_estimator");
    for (int r = 0; r < R && !st; r++)
      for (int n = 0; n < N; n++)
        for (int c = 0; c < M; c++)
          out[(size_t)(b0 + r) * per + (size_t)c * N + n] = f->host_out[r * per + (size_t)n * M + c];
  }
  if (st) cudaStreamSynchronize(s);
  free(tr);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * Batched calls with per-request caches (gpu_flow_batch; flow.h gives the contract).
 *
 * Why it is exact: with the block-causal mask, frame i attends to frames < (i/50 + 1) 50, the
 * convolutional position embedding is causal (2 convolutions of K = 31: 60 frames of left
 * context), and every other layer works frame by frame; the noise of frame i is column i of a
 * fixed buffer, cond/mu/spk of a frame do not change once the 3 look-ahead tokens after it exist.
 * So every quantity of a frame in a complete 50-frame block (the K/V rows of every layer, CFG row
 * and Euler step, the Euler state x of every step) is the same in every later block-causal call
 * of the request. A call that starts at block boundary s therefore computes only frames
 * [s, N): their queries attend to the cached K/V of frames < s and to this call's K/V of frames
 * >= s, and their position embedding reads the cached x of frames s-60 .. s-1 (recomputing the
 * input projection of those 60 rows, which is cheaper than caching 1024-wide rows).
 *
 * Cache pages: one pool of fixed pages (gpu_flow_pool), each holding one 50-frame block of one
 * request: K and V [S][depth][2 rows][2][50][D] bf16, then x [S][50][M] fp32 (the state entering
 * each Euler step). A request takes pages as its calls commit blocks; when the pool is empty the
 * request simply keeps the blocks it has and its later calls recompute from there (slower, never
 * a failure). Pages go back at gpu_flow_req_close.
 *
 * Packed layout of one batched call over jobs j (n_j = N_j - s_j new frames):
 *   new rows  [2][Tn]      CFG row r, job j's frame s_j + i at r Tn + base_j + i (Tn = sum n_j)
 *   ext rows  [2][Te]      job j's frames s_j - 60 .. N_j - 1 at r Te + ebase_j + e
 *                          (Te = sum (60 + n_j); frames < 0 are "virtual": zero rows that stand
 *                          for the convolution's zero padding at the utterance start)
 * Per Euler step: x of the ext rows gathered (cache / this call / zero) -> input projection ->
 * h = xp + hc[r] -> conv position embedding over the ext rows (virtual rows zeroed before each
 * convolution; 60 real rows before every new row, so neighbouring jobs never mix) -> the new rows
 * gathered -> 22 blocks on the 2 Tn new rows (RoPE at each row's absolute frame; K/V of committed
 * frames stored to the pages; paged attention) -> velocity -> Euler update of the new rows. */

#define CTX 60          /* left context of the position embedding: 2 (K - 1) */
#define BATCH_JOBS 64
#define MAX_SEG_TILES(tn, nj) ((tn) / 64 * 2 + 4 * (nj) + 2)

struct gpu_flow_req {
  const int32_t *ptok;   /* prompt tokens (the caller's) */
  const float *pmel;     /* prompt mel frame-major [2P][M] (the caller's) */
  int P;
  float eh[MAX_MEL];     /* speaker: normalize + affine */
  int *pages, n_pages, cap_pages;
  int cached;            /* frames [0, cached) are in the pages */
  uint64_t key;          /* the prompt's identity (hash of tokens, mel and speaker) */
  int shared;            /* blocks [0, shared) are the voice's shared pages */
};

/* Blocks that depend on the prompt alone are the same for every request of a voice: frame i of
 * block b needs tokens up to i/2 + 3, so block b is prompt-only when 50 b + 49 <= 2 P - 7. The
 * first request of a voice that commits them registers its pages here; later requests start
 * their first call after them. Pages are reference-counted (requests + the table). */
#define VOICE_SLOTS 64
typedef struct voice_blocks {
  uint64_t key;
  int n, pages[64];
} voice_blocks;

struct gflow_cache {
  unsigned char *pool;   /* n_pages * page_bytes */
  size_t page_bytes;
  int64_t kv_elems;      /* bf16 elements of K/V per page */
  int n_pages;
  int *free_list, n_free;
  /* ext buffers */
  int te_max, tn_max;
  float *X, *xp, *hext, *hcx, *inp, *xnew, *condb;
  cosy_bf16 *hbx, *nbx;
  /* plan (device + pinned host mirror) */
  int64_t *d_src, *h_src, *d_xdst, *h_xdst, *d_kvdst, *h_kvdst;
  int32_t *d_pos, *h_pos, *d_map, *h_map, *d_virt, *h_virt, *d_tiles, *h_tiles, *d_ptab, *h_ptab;
  int32_t *d_items, *h_items; /* the auto attention's cluster items (cosy_k_dit_auto_items) */
  cosy_k_dit_seg *d_segs, *h_segs;
  float *h_xout, *h_condb;
  int ptab_cap, tiles_cap, items_cap;
  int *refs;             /* per page */
  voice_blocks voices[VOICE_SLOTS];
  int n_voices, voice_clock;
};

static gflow_cache *FC(gpu_flow *f) { return (gflow_cache *)f->fc; }

/* The pool is changed by one thread at a time (the caller's lock: batches and closes); n_free
 * is also read without that lock (gpu_flow_pages_free: engine stats must not wait for a batch,
 * which holds the lock until the device is done), so its stores are atomic. */
static void page_unref(gflow_cache *c, int pg) {
  if (--c->refs[pg] == 0) {
    c->free_list[c->n_free] = pg;
    __atomic_store_n(&c->n_free, c->n_free + 1, __ATOMIC_RELAXED);
  }
}

/* a free page (refs 1), dropping an unused voice's blocks when none is left; -1 if none */
static int page_take(gflow_cache *c) {
  if (c->n_free == 0)
    for (int v = 0; v < c->n_voices; v++) {
      voice_blocks *vb = &c->voices[v];
      int unused = 1;
      for (int i = 0; i < vb->n; i++) unused &= c->refs[vb->pages[i]] == 1;
      if (!unused) continue;
      for (int i = 0; i < vb->n; i++) page_unref(c, vb->pages[i]);
      c->voices[v] = c->voices[--c->n_voices];
      break;
    }
  if (c->n_free == 0) return -1;
  const int pg = c->free_list[c->n_free - 1];
  __atomic_store_n(&c->n_free, c->n_free - 1, __ATOMIC_RELAXED);
  c->refs[pg] = 1;
  return pg;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static void fc_free(void *p) {
  gflow_cache *c = (gflow_cache *)p;
  if (!c) return;
  cosy_gpu_host_free(c->h_src);
  free(c->free_list);
  free(c->refs);
  free(c);
}

size_t gpu_flow_page_bytes(const gpu_flow *f) {
  const int64_t kv = (int64_t)f->S * f->depth * 2 * 2 * PF * f->D;
  return (size_t)kv * 2 + (size_t)f->S * PF * f->M * 4;
}

static cosy_status fc_alloc(gpu_flow *f, size_t bytes, const char *what, void **p) {
  return cosy_gpu_alloc(f->g, bytes ? bytes : 16, what, p);
}

/* The GEMM plans of every row bucket of a packed batch's GEMMs (and of the per-request
 * PreLookahead), with the pointers the calls use, so that a batch of new sizes pays no cuBLASLt
 * heuristic query (kernels/gemm.cu; ~1.8 ms of host time per shape on an H100), each algorithm
 * launched once on these (still unused) buffers so that its kernel is loaded. */
static cosy_status prewarm_gemms(gpu_flow *f) {
  gflow_cache *c = FC(f);
  cosy_gemm *gm = f->g->gemm;
  const int M = f->M, D = f->D, F = f->F, P = f->P, rows = 2 * c->tn_max;
  const cosy_kdtype bf = COSY_KDT_BF16, f32 = COSY_KDT_F32;
  const gblk *b = &f->blk[0];
  cudaStream_t s = f->s;
  cudaError_t e =
      cosy_gemm_prewarm(gm, s, c->te_max, D, M, f32, c->X, M, f->inx_w, NULL, f32, c->xp, D, 0);
  if (e == cudaSuccess)
    e = cosy_gemm_prewarm(gm, s, 2 * c->te_max, D, 3 * M, f32, c->inp, 3 * M, f->inr_w, f->in_b,
                          f32, c->hcx, D, 0);
  if (e == cudaSuccess)
    e = cosy_gemm_prewarm(gm, s, rows, 3 * D, D, bf, f->nb, D, b->qkv_w, NULL, bf, f->qkv, 3 * D,
                          0);
  if (e == cudaSuccess)
    e = cosy_gemm_prewarm(gm, s, rows, D, D, bf, f->att, D, b->o_w, NULL, f32, f->xo, D, 0);
  if (e == cudaSuccess) /* the plans ff1 uses (the epilogue is in the key) */
    e = cosy_gemm_prewarm_gelu(gm, s, rows, F, D, bf, f->nb, D, b->ff1_w, b->ff1_b, b->ff1_bh, bf,
                               f->ffb, F);
  if (e == cudaSuccess)
    e = cosy_gemm_prewarm(gm, s, rows, D, F, bf, f->ffb, F, b->ff2_w, NULL, f32, f->xo, D, 0);
  if (e == cudaSuccess)
    e = cosy_gemm_prewarm(gm, s, rows, M, D, bf, f->nb, D, f->po_w, f->po_b, f32, f->v, M, 0);
  /* the PreLookahead's rows: n_used <= max_frames / ratio = max_tok - la - 1 (its x views start
   * k <= la rows into xe, which holds max_tok) */
  const int nu_max = f->max_tok - f->la - 1;
  for (int k = 0; k <= f->la && e == cudaSuccess; k++)
    e = cosy_gemm_prewarm(gm, s, nu_max, P, M, f32, f->xe + (size_t)k * M, M,
                          f->pre1_w + (size_t)k * P * M, k == 0 ? f->pre1_b : NULL, f32,
                          f->h1 + (size_t)2 * P, P, k > 0);
  for (int k = 0; k < 3 && e == cudaSuccess; k++)
    e = cosy_gemm_prewarm(gm, s, nu_max, M, P, f32, f->h1 + (size_t)k * P, P,
                          f->pre2_w + (size_t)k * M * P, k == 0 ? f->pre2_b : NULL, f32, f->pre, M,
                          k > 0);
  return cosy_gpu_check(e, "flow GEMM plans");
}

void gpu_flow_set_timing(gpu_flow *f, const char *path) {
  /* batch_run's timing lines (a measurement aid; none if this fails) */
  if (!f || f->timing || !path || !path[0]) return;
  if (cudaEventCreate(&f->tev[0]) == cudaSuccess) {
    if (cudaEventCreate(&f->tev[1]) != cudaSuccess) {
      cudaEventDestroy(f->tev[0]);
    } else if (!(f->timing = fopen(path, "w"))) {
      cudaEventDestroy(f->tev[0]);
      cudaEventDestroy(f->tev[1]);
    }
  }
}

void gpu_flow_set_pad(gpu_flow *f, int on) {
  if (f) f->pad = on != 0;
}

long gpu_flow_ff1_fallbacks(const gpu_flow *f) {
  return f ? cosy_gemm_epi_fallbacks(f->g->gemm) : 0;
}

long gpu_flow_ff1_bias_bf16(const gpu_flow *f) {
  return f ? cosy_gemm_epi_bias_y(f->g->gemm) : 0;
}

int gpu_flow_set_attn_split(gpu_flow *f, int n_split) {
  if (!f) return 0;
  const int ok = (n_split == GPU_FLOW_ATTN_AUTO ||
                  (n_split >= 2 && n_split <= COSY_K_DIT_SPLIT_MAX)) &&
                 f->g->dev.clusters;
  f->attn_split = ok ? n_split : 0;
  return f->attn_split;
}

int gpu_flow_set_attn_v2(gpu_flow *f, int tile_q) {
  if (!f) return 0;
  f->attn_v2 = tile_q == COSY_K_DIT_TILE || tile_q == COSY_K_DIT_TILE_WIDE ||
                       tile_q == GPU_FLOW_ATTN_V2_AUTO
                   ? tile_q
                   : 0;
  return f->attn_v2;
}

cosy_status gpu_flow_pool(gpu_flow *f, size_t bytes) {
  if (!f) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_flow_pool: NULL");
  if (f->fc) return cosy_err(COSY_ERR_INVALID_ARG, "gpu_flow_pool: called twice");
  if (2 * (f->cpk - 1) > CTX)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "gpu_flow_pool: position convolution kernel %d > %d",
                    f->cpk, CTX / 2 + 1);
  gflow_cache *c = (gflow_cache *)cosy_calloc(1, sizeof *c);
  if (!c) return COSY_ERR_NO_MEMORY;
  f->fc = c;
  const int M = f->M, D = f->D;
  c->page_bytes = gpu_flow_page_bytes(f);
  c->kv_elems = (int64_t)f->S * f->depth * 2 * 2 * PF * D;
  c->tn_max = f->max_frames;
  c->te_max = f->max_frames + CTX * BATCH_JOBS;
  const int ptab_cap = BATCH_JOBS * (f->max_frames / PF + 2);
  const int tiles_cap = 2 * MAX_SEG_TILES(c->tn_max, BATCH_JOBS) + PAD_TILES;
  const int items_cap = tiles_cap * f->heads; /* at most one cluster item per (tile, head) */
  c->ptab_cap = ptab_cap;
  c->tiles_cap = tiles_cap;
  c->items_cap = items_cap;
  const size_t TE = (size_t)c->te_max, TN = (size_t)c->tn_max;
  struct {
    void **p;
    size_t bytes;
    const char *what;
  } plan[] = {
      {(void **)&c->X, TE * M * 4, "flow batch x"},
      {(void **)&c->xp, TE * D * 4, "flow batch projection"},
      {(void **)&c->hext, 2 * TE * D * 4, "flow batch rows"},
      {(void **)&c->hcx, 2 * TE * D * 4, "flow batch rows"},
      {(void **)&c->inp, 2 * TE * 3 * M * 4, "flow batch input rows"},
      {(void **)&c->hbx, 2 * TE * D * 2, "flow batch rows"},
      {(void **)&c->nbx, 2 * TE * D * 2, "flow batch rows"},
      {(void **)&c->xnew, TN * M * 4, "flow batch x"},
      {(void **)&c->condb, TE * M * 4, "flow batch cond"},
      {(void **)&c->d_src, TE * 8, "flow plan"},
      {(void **)&c->d_xdst, TN * 8, "flow plan"},
      {(void **)&c->d_kvdst, 2 * TN * 8, "flow plan"},
      {(void **)&c->d_pos, 2 * TN * 4, "flow plan"},
      {(void **)&c->d_map, 2 * TN * 4, "flow plan"},
      {(void **)&c->d_virt, 2 * CTX * BATCH_JOBS * 4, "flow plan"},
      {(void **)&c->d_tiles, (size_t)tiles_cap * 2 * 4, "flow plan"},
      {(void **)&c->d_items, (size_t)items_cap * 2 * 4, "flow plan"},
      {(void **)&c->d_ptab, (size_t)ptab_cap * 4, "flow plan"},
      {(void **)&c->d_segs, (2 * BATCH_JOBS + 1) * sizeof(cosy_k_dit_seg), "flow plan"},
  };
  cosy_status st;
  for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++)
    if ((st = fc_alloc(f, plan[i].bytes, plan[i].what, plan[i].p))) return st;
  /* pinned host mirrors: one block */
  size_t hb = TE * 8 + TN * 8 + 2 * TN * 8 + 2 * TN * 4 * 2 + 2 * CTX * BATCH_JOBS * 4 +
              (size_t)tiles_cap * 8 + (size_t)items_cap * 8 + (size_t)ptab_cap * 4 +
              (2 * BATCH_JOBS + 1) * sizeof(cosy_k_dit_seg) +
              TN * M * 4 + TE * M * 4 + 64 * 16;
  unsigned char *h;
  if ((st = cosy_gpu_host_alloc(hb, (void **)&h))) return st;
  c->h_src = (int64_t *)h;
  c->h_xdst = c->h_src + TE;
  c->h_kvdst = c->h_xdst + TN;
  c->h_pos = (int32_t *)(c->h_kvdst + 2 * TN);
  c->h_map = c->h_pos + 2 * TN;
  c->h_virt = c->h_map + 2 * TN;
  c->h_tiles = c->h_virt + 2 * CTX * BATCH_JOBS;
  c->h_items = c->h_tiles + (size_t)tiles_cap * 2;
  c->h_ptab = c->h_items + (size_t)items_cap * 2;
  c->h_segs = (cosy_k_dit_seg *)(((uintptr_t)(c->h_ptab + ptab_cap) + 15) & ~(uintptr_t)15);
  c->h_xout = (float *)(((uintptr_t)(c->h_segs + 2 * BATCH_JOBS + 1) + 15) & ~(uintptr_t)15);
  c->h_condb = c->h_xout + TN * M;
  /* the pages: what is left of `bytes` after the buffers */
  const size_t left = cosy_gpu_left(f->g);
  size_t want = bytes ? bytes : left;
  if (want > left) want = left;
  c->n_pages = (int)(want / c->page_bytes);
  if (c->n_pages > 0) {
    if ((st = fc_alloc(f, (size_t)c->n_pages * c->page_bytes, "flow cache pages", (void **)&c->pool)))
      return st;
  }
  c->free_list = (int *)cosy_malloc(sizeof(int) * (size_t)(c->n_pages > 0 ? c->n_pages : 1));
  c->refs = (int *)cosy_calloc((size_t)(c->n_pages > 0 ? c->n_pages : 1), sizeof(int));
  if (!c->free_list || !c->refs) return COSY_ERR_NO_MEMORY;
  for (int i = 0; i < c->n_pages; i++) c->free_list[i] = c->n_pages - 1 - i;
  c->n_free = c->n_pages;
  return prewarm_gemms(f);
}

int gpu_flow_req_pages(const gpu_flow_req *q) { return q ? q->n_pages : 0; }
int gpu_flow_pages_total(const gpu_flow *f) { return f && f->fc ? ((gflow_cache *)f->fc)->n_pages : 0; }
int gpu_flow_pages_free(const gpu_flow *f) {
  return f && f->fc ? __atomic_load_n(&((gflow_cache *)f->fc)->n_free, __ATOMIC_RELAXED) : 0;
}
int gpu_flow_pages_voice(const gpu_flow *f) {
  if (!f || !f->fc) return 0;
  const gflow_cache *c = (const gflow_cache *)f->fc;
  int n = 0;
  for (int v = 0; v < c->n_voices; v++) n += c->voices[v].n;
  return n;
}

cosy_status gpu_flow_req_open(gpu_flow *f, const int32_t *prompt_tokens, int n_prompt,
                              const float *prompt_mel, const float *spk, int max_gen,
                              gpu_flow_req **out) {
  *out = NULL;
  if (!f || !f->fc || (n_prompt > 0 && (!prompt_tokens || !prompt_mel)) || !spk || n_prompt < 0 ||
      max_gen < 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_flow_req_open: bad argument");
  const int frames = f->ratio * (n_prompt + max_gen + f->la);
  if (frames > f->max_frames)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "prompt (%d tokens) + up to %d speech tokens need %d mel frames; the GPU flow "
                    "holds at most %d (%d s) per utterance: lower max_tokens or split the text",
                    n_prompt, max_gen, frames, f->max_frames, f->max_frames / 50);
  gpu_flow_req *q = (gpu_flow_req *)cosy_calloc(1, sizeof *q);
  if (!q) return COSY_ERR_NO_MEMORY;
  q->cap_pages = f->max_frames / PF + 1;
  q->pages = (int *)cosy_malloc(sizeof(int) * (size_t)q->cap_pages);
  if (!q->pages) {
    free(q);
    return COSY_ERR_NO_MEMORY;
  }
  q->ptok = prompt_tokens;
  q->pmel = prompt_mel;
  q->P = n_prompt;
  double ss = 0;
  for (int i = 0; i < f->spk_dim; i++) ss += (double)spk[i] * spk[i];
  float nrm = (float)sqrt(ss);
  if (nrm < 1e-12f) nrm = 1e-12f;
  for (int o = 0; o < f->M; o++) {
    double acc = 0;
    const float *w = f->h_spk_w + (size_t)o * f->spk_dim;
    for (int i = 0; i < f->spk_dim; i++) acc += (double)w[i] * (double)(spk[i] / nrm);
    q->eh[o] = (float)acc + f->h_spk_b[o];
  }
  uint64_t h = fnv(0xcbf29ce484222325ull, &n_prompt, sizeof n_prompt);
  h = fnv(h, prompt_tokens, sizeof(int32_t) * (size_t)n_prompt);
  h = fnv(h, prompt_mel, sizeof(float) * (size_t)f->ratio * n_prompt * f->M);
  q->key = fnv(h, q->eh, sizeof(float) * (size_t)f->M);
  *out = q;
  return COSY_OK;
}

void gpu_flow_req_close(gpu_flow *f, gpu_flow_req *q) {
  if (!q) return;
  gflow_cache *c = f ? FC(f) : NULL;
  if (c)
    for (int i = 0; i < q->n_pages; i++) page_unref(c, q->pages[i]);
  free(q->pages);
  free(q);
}

/* one batch whose packed sizes fit the buffers (gpu_flow_batch splits) */
/* The S Euler steps of a packed batch (launches only; the plan is in c's device buffers). */
typedef struct batch_args {
  int Tn, Te, n_virt, n_tiles;
  int n_items, csize; /* COSY_FLOW_ATTN_SPLIT=auto: the attention's cluster items and size */
  int tq;             /* the query tile of the tile list (64, or 128 with COSY_FLOW_ATTN_V2) */
} batch_args;

/* One Euler step of a packed batch (launches only). Whatever depends on the step k is read on
 * the device from f->mod_cur (its modulation row) and f->step_cur (its pool offsets and dt),
 * which batch_run fills before each step: the launches are the same for every step, so one
 * captured graph serves all S of them. */
static cosy_status batch_step_enqueue(gpu_flow *f, const void *arg) {
  const batch_args *a = (const batch_args *)arg;
  gflow_cache *c = FC(f);
  const int M = f->M, D = f->D, F = f->F;
  const int Tn = a->Tn, Te = a->Te, n_virt = a->n_virt, n_tiles = a->n_tiles;
  cudaStream_t s = f->s;
  const int pdl = f->pdl; /* COSY_FLOW_PDL */
  cosy_status st;
  const int rows = 2 * Tn;
  const int64_t D6 = 6 * (int64_t)D;
  const float scale = 1.0f / sqrtf((float)f->hd);
  const int64_t blk_stride = (int64_t)2 * 2 * PF * D; /* one (step, layer) slice of a page */
  const float *mod = f->mod_cur;
  const int64_t *xoff = &f->step_cur->xoff, *kvoff = &f->step_cur->kvoff;
  if (c->pool) /* a budget with no cache pages: every block is recomputed, nothing stored */
    CK(cosy_k_flow_x_store(s, (float *)c->pool, c->d_xdst, 0, xoff, c->xnew, Tn, M),
       "flow: x store");
  CK(cosy_k_flow_x_gather(s, c->X, c->d_src, (const float *)c->pool, 0, xoff, c->xnew, Te, M),
     "flow: x gather");
  if ((st = gemm(f, Te, D, M, COSY_KDT_F32, c->X, M, f->inx_w, NULL, COSY_KDT_F32, c->xp, D, 0,
                 "flow: input proj")))
    return st;
  CK(cosy_k_flow_add_rows(s, c->xp, 0, c->hcx, c->hext, c->hbx, 2, Te, D), "flow: input rows");
  CK(cosy_k_rows_zero_bf16(s, c->hbx, c->d_virt, n_virt, D), "flow: zero rows");
  CK(cosy_k_flow_conv_pos(s, c->hbx, f->cp_w[0], f->cp_b[0], c->nbx, NULL, 2, Te, D, f->cpg, f->cpk),
     "flow: conv_pos 1");
  CK(cosy_k_rows_zero_bf16(s, c->nbx, c->d_virt, n_virt, D), "flow: zero rows");
  CK(cosy_k_flow_conv_pos(s, c->nbx, f->cp_w[1], f->cp_b[1], NULL, c->hext, 2, Te, D, f->cpg,
                          f->cpk),
     "flow: conv_pos 2");
  CK(cosy_k_rows_gather_f32(s, f->h, c->hext, c->d_map, rows, D), "flow: new rows");
  for (int l = 0; l < f->depth; l++) {
    const gblk *b = &f->blk[l];
    const float *md = mod + l * D6;
    if (l == 0)
      CK(cosy_k_flow_resid_ln(s, f->h, NULL, NULL, NULL, md + D, md, 0, f->nb, 1, rows, D, LN_EPS,
                              pdl),
         "flow: norm");
    else
      CK(cosy_k_flow_resid_ln(s, f->h, f->xo, f->blk[l - 1].ff2_b, md - D6 + 5 * D, md + D, md, 0,
                              f->nb, 1, rows, D, LN_EPS, pdl),
         "flow: residual + norm");
    if ((st = bgemm(f, rows, 3 * D, D, f->nb, D, b->qkv_w, COSY_KDT_BF16, f->qkv, 3 * D, "flow: qkv")))
      return st;
    const int64_t layer_off = (int64_t)l * blk_stride; /* + the step's kvoff, on the device */
    if (c->pool) /* bias + RoPE, and the committed rows' K/V into their cache pages */
      CK(cosy_k_flow_qkv_post_store(s, f->qkv, b->qkv_b, f->rope_cs, c->d_pos, rows, D, f->hd,
                                    (cosy_bf16 *)c->pool, c->d_kvdst, layer_off, kvoff,
                                    (int64_t)PF * D, pdl),
         "flow: qkv bias + rope + kv store");
    else
      CK(cosy_k_flow_qkv_post_pos(s, f->qkv, b->qkv_b, f->rope_cs, c->d_pos, rows, D, f->hd,
                                  pdl),
         "flow: qkv bias + rope");
    if (f->attn_split == GPU_FLOW_ATTN_AUTO) /* parts per segment (COSY_FLOW_ATTN_SPLIT=auto) */
      CK(cosy_k_attn_dit_paged_auto(s, f->qkv, D, f->heads, c->d_segs, c->d_tiles, c->d_items,
                                    a->n_items, a->csize, (const cosy_bf16 *)c->pool,
                                    (int64_t)(c->page_bytes / 2), layer_off, kvoff, PF, c->d_ptab,
                                    f->att, f->chunk, scale, &f->g->dev),
         "flow: attention (parts per segment)");
    else if (f->attn_split) /* each query tile's keys over attn_split blocks (COSY_FLOW_ATTN_SPLIT) */
      CK(cosy_k_attn_dit_paged_split(s, f->qkv, D, f->heads, c->d_segs, c->d_tiles, n_tiles,
                                     (const cosy_bf16 *)c->pool, (int64_t)(c->page_bytes / 2),
                                     layer_off, kvoff, PF, c->d_ptab, f->att, f->chunk, scale,
                                     f->attn_split, &f->g->dev),
         "flow: attention (split keys)");
    else if (f->attn_v2) /* COSY_FLOW_ATTN_V2: tiles of a->tq queries (the plan's list) */
      CK(cosy_k_attn_dit_paged_v2_stages(s, f->qkv, D, f->heads, c->d_segs, c->d_tiles, n_tiles,
                                         (const cosy_bf16 *)c->pool,
                                         (int64_t)(c->page_bytes / 2), layer_off, kvoff, PF,
                                         c->d_ptab, f->att, f->chunk, scale, a->tq, f->stages,
                                         &f->g->dev),
         "flow: attention (v2)");
    else
      CK(cosy_k_attn_dit_paged(s, f->qkv, D, f->heads, c->d_segs, c->d_tiles, n_tiles,
                               (const cosy_bf16 *)c->pool, (int64_t)(c->page_bytes / 2),
                               layer_off, kvoff, PF, c->d_ptab, f->att, f->chunk, scale),
         "flow: attention");
    if ((st = bgemm(f, rows, D, D, f->att, D, b->o_w, COSY_KDT_F32, f->xo, D, "flow: attn out")))
      return st;
    CK(cosy_k_flow_resid_ln(s, f->h, f->xo, b->o_b, md + 2 * D, md + 4 * D, md + 3 * D, 0, f->nb,
                            1, rows, D, LN_EPS, pdl),
       "flow: residual + norm");
    if ((st = ff1(f, b, rows))) return st;
    if ((st = bgemm(f, rows, D, F, f->ffb, F, b->ff2_w, COSY_KDT_F32, f->xo, D, "flow: ff2")))
      return st;
  }
  const float *mo = mod + f->depth * D6;
  CK(cosy_k_flow_resid_ln(s, f->h, f->xo, f->blk[f->depth - 1].ff2_b, mo - D6 + 5 * D, mo, mo + D,
                          0, f->nb, 1, rows, D, LN_EPS, pdl),
     "flow: final norm");
  if ((st = gemm(f, rows, M, D, COSY_KDT_BF16, f->nb, D, f->po_w, f->po_b, COSY_KDT_F32, f->v, M,
                 0, "flow: proj_out")))
    return st;
  CK(cosy_k_flow_euler(s, c->xnew, f->v, f->v + (size_t)Tn * M, (int64_t)Tn * M, 0.f,
                       &f->step_cur->dt, f->c1, f->c2),
     "flow: euler");
  return COSY_OK;
}

/* Padded sizes. A step graph is keyed by its batch's sizes (new frames Tn, ext rows Te,
 * attention tiles, virtual rows), and under load nearly every batch's exact sizes are new: a
 * live-user run of 41 s at 224 users (bench/RESULTS.md, 2026-11-28 (eleventh) call a) captured a
 * graph in 771 of its 1615 batches, and such a batch took ~4-5 ms more device time than one of
 * the same size that replayed (capture, instantiation, the new graph's upload, new GEMM plans).
 * So the steps run at Tn rounded up to PAD_TN, Te to PAD_TE and the tile count to PAD_TILES
 * (the same log replayed through an LRU of 128 keys: 79 captures instead of 770). The padding
 * rows are computed and thrown away, and touch nothing else: a padding ext row is a zero frame
 * (src -1) after the batch's last job, so the causal position convolutions of the real rows never
 * read it; a padding new row gathers the last ext row, stores no x and no K/V (destination -1),
 * is in no attention tile and no segment's keys, and is not downloaded; a padding tile belongs to
 * an extra segment with no query and no key (its block does nothing). Rows are independent in
 * every GEMM, norm and elementwise kernel, and rounding up to a multiple of 128 rows never
 * crosses a power of two of 128 or more, so a GEMM of more than 64 rows keeps its row bucket
 * (kernels/gemm.cu) and so its kernel: a real row's bits are the same padded or not (a GEMM of
 * at most 64 rows, which has a kernel per row count, now runs the 128-row bucket's). The cost is
 * rows the tile grids mostly ran anyway (the GEMMs' 128-row tiles). Sizes already at the
 * buffers' capacity stay as they are. COSY_FLOW_PAD=0 (gpu_flow_set_pad) turns it off. */
static int pad_up(int x, int m, int cap) {
  const int p = (x + m - 1) / m * m;
  return p <= cap ? p : x;
}

static cosy_status batch_run(gpu_flow *f, gpu_flow_call *calls, int n) {
  gflow_cache *c = FC(f);
  const int M = f->M, D = f->D, la = f->la;
  cudaStream_t s = f->s = f->g->stream;
  const double tt0 = cosy_now();
  double tt_plan = 0, tt_pre = 0, tt_enq = 0;
  int n_new = 0;
  f->cap_ms = 0;
  f->n_cap = f->n_hit = f->n_direct = 0;
  if (f->timing) {
    CK(cudaEventRecord(f->tev[0], s), "flow: timing event");
    for (int j = 0; j < n; j++) n_new += calls[j].q->n_pages == 0;
  }
  const int ctx = 2 * (f->cpk - 1); /* left context of the two causal position convolutions */
  cosy_status st;
  int s_j[BATCH_JOBS], N_j[BATCH_JOBS], store_to[BATCH_JOBS], nb[BATCH_JOBS], eb[BATCH_JOBS];
  int Tn = 0, Te = 0, n_virt = 0, n_ptab = 0, n_tiles = 0;
  /* plan: starts, pages, offsets */
  for (int j = 0; j < n; j++) {
    gpu_flow_call *k = &calls[j];
    gpu_flow_req *q = k->q;
    if (q->n_pages == 0 && !k->full)
      for (int v = 0; v < c->n_voices; v++)
        if (c->voices[v].key == q->key) { /* the voice's prompt-only blocks */
          for (int i = 0; i < c->voices[v].n; i++) {
            q->pages[i] = c->voices[v].pages[i];
            c->refs[q->pages[i]]++;
          }
          q->n_pages = q->shared = c->voices[v].n;
          q->cached = PF * q->n_pages;
          break;
        }
    int n_used = k->finalize ? q->P + k->n_gen : q->P + k->n_gen - la;
    N_j[j] = f->ratio * n_used;
    const int want0 = f->ratio * q->P + k->frame_from; /* first frame asked for */
    int s0 = k->full ? 0 : (q->cached < want0 ? q->cached : want0);
    s0 -= s0 % PF;
    s_j[j] = s0;
    int commit = k->full || k->finalize ? s0 : want0 + k->n_frames;
    commit -= commit % PF;
    if (commit > N_j[j]) commit = N_j[j] - N_j[j] % PF;
    /* pages for blocks [s0/PF, commit/PF) */
    int need = commit / PF;
    while (q->n_pages < need) {
      const int pg = page_take(c);
      if (pg < 0) break;
      q->pages[q->n_pages++] = pg;
    }
    store_to[j] = commit < q->n_pages * PF ? commit : q->n_pages * PF;
    if (store_to[j] < s0) store_to[j] = s0;
    nb[j] = Tn;
    eb[j] = Te;
    Tn += N_j[j] - s0;
    Te += ctx + N_j[j] - s0;
  }
  /* the sizes the steps run at (padded; see "Padded sizes" above): the rows past Tn / Te */
  const int TnP = f->pad ? pad_up(Tn, PAD_TN, c->tn_max) : Tn;
  const int TeP = f->pad ? pad_up(Te, PAD_TE, c->te_max) : Te;
  const int64_t page_f = (int64_t)(c->page_bytes / 4); /* page size in floats */
  const int64_t traj_f = c->kv_elems / 2;              /* floats before a page's x rows */
  /* the attention's query tile: 64; COSY_FLOW_ATTN_V2 (without the split) 128, or with "auto"
   * 128 when blocks of 8 warps over 128-query tiles hold no more warps than blocks of 4 over
   * 64-query tiles (2 T128 <= T64 over the batch's segments: e.g. 100 or 200 new frames, not
   * 50 or 150); a row's bits do not depend on it */
  int tq = COSY_K_DIT_TILE;
  if (f->attn_v2 && !f->attn_split) {
    if (f->attn_v2 == GPU_FLOW_ATTN_V2_AUTO) {
      int t64 = 0, t128 = 0;
      for (int j = 0; j < n; j++) {
        t64 += (N_j[j] - s_j[j] + COSY_K_DIT_TILE - 1) / COSY_K_DIT_TILE;
        t128 += (N_j[j] - s_j[j] + COSY_K_DIT_TILE_WIDE - 1) / COSY_K_DIT_TILE_WIDE;
      }
      tq = 2 * t128 <= t64 ? COSY_K_DIT_TILE_WIDE : COSY_K_DIT_TILE;
    } else {
      tq = f->attn_v2;
    }
  }
  for (int j = 0; j < n; j++) {
    gpu_flow_req *q = calls[j].q;
    const int nj = N_j[j] - s_j[j];
    for (int e = 0; e < ctx + nj; e++) {
      const int fr = s_j[j] - ctx + e;
      int64_t src;
      if (fr < 0) {
        src = -1;
        c->h_virt[n_virt++] = eb[j] + e;
        c->h_virt[n_virt++] = TeP + eb[j] + e;
      } else if (e < ctx) {
        src = (int64_t)q->pages[fr / PF] * page_f + traj_f + (int64_t)(fr % PF) * M;
      } else {
        src = -2 - (int64_t)(nb[j] + e - ctx);
      }
      c->h_src[eb[j] + e] = src;
      /* cond: the prompt mel on the prompt frames */
      float *cd = c->h_condb + (size_t)(eb[j] + e) * M;
      if (fr >= 0 && fr < f->ratio * q->P)
        memcpy(cd, q->pmel + (size_t)fr * M, (size_t)M * 4);
      else
        memset(cd, 0, (size_t)M * 4);
    }
    for (int i = 0; i < nj; i++) {
      const int fr = s_j[j] + i;
      const int stored = fr < store_to[j];
      c->h_xdst[nb[j] + i] =
          stored ? (int64_t)q->pages[fr / PF] * page_f + traj_f + (int64_t)(fr % PF) * M : -1;
      for (int r = 0; r < 2; r++) {
        const int row = r * TnP + nb[j] + i;
        c->h_pos[row] = fr;
        c->h_map[row] = r * TeP + eb[j] + ctx + i;
        c->h_kvdst[row] = stored ? (int64_t)q->pages[fr / PF] * (int64_t)(c->page_bytes / 2) +
                                       (int64_t)(2 * r) * PF * D + (int64_t)(fr % PF) * D
                                 : -1;
      }
    }
    const int p0 = n_ptab;
    for (int i = 0; i < q->n_pages; i++) c->h_ptab[n_ptab++] = q->pages[i];
    for (int r = 0; r < 2; r++) {
      cosy_k_dit_seg *g = &c->h_segs[2 * j + r];
      g->q_row0 = r * TnP + nb[j];
      g->n_q = nj;
      g->cached = s_j[j];
      g->Lk = N_j[j];
      g->ptab0 = p0;
      g->row = r;
      g->full = calls[j].full;
      g->pad_ = 0;
      for (int t = 0; t < nj; t += tq) {
        c->h_tiles[2 * n_tiles] = 2 * j + r;
        c->h_tiles[2 * n_tiles + 1] = t;
        n_tiles++;
      }
    }
  }
  /* the padding: ext rows of zeros, new rows that store nothing, empty attention tiles */
  for (int e = Te; e < TeP; e++) {
    c->h_src[e] = -1;
    memset(c->h_condb + (size_t)e * M, 0, (size_t)M * 4);
  }
  for (int i = Tn; i < TnP; i++) {
    c->h_xdst[i] = -1;
    for (int r = 0; r < 2; r++) {
      const int row = r * TnP + i;
      c->h_pos[row] = 0;
      c->h_map[row] = r * TeP + TeP - 1;
      c->h_kvdst[row] = -1;
    }
  }
  int n_segs = 2 * n;
  if (f->pad && n_tiles % PAD_TILES) {
    cosy_k_dit_seg *g = &c->h_segs[n_segs++]; /* no query, no key */
    memset(g, 0, sizeof *g);
    g->full = 1;
    while (n_tiles % PAD_TILES) {
      c->h_tiles[2 * n_tiles] = n_segs - 1;
      c->h_tiles[2 * n_tiles + 1] = 0;
      n_tiles++;
    }
  }
  int n_items = 0, csize = 0;
  if (f->attn_split == GPU_FLOW_ATTN_AUTO) {
    n_items = cosy_k_dit_auto_items(c->h_segs, n_segs, c->h_tiles, n_tiles, f->heads, c->h_items,
                                    c->items_cap, &csize);
    if (n_items < 0) /* cannot happen: items_cap holds one item per (tile, head) */
      return cosy_err(COSY_ERR_INTERNAL, "flow: attention items exceed %d", c->items_cap);
  }
  tt_plan = cosy_now();
  /* uploads (pinned, async) */
#define UP(d, h, cnt) \
  CK(cudaMemcpyAsync((d), (h), (size_t)(cnt) * sizeof *(h), cudaMemcpyHostToDevice, s), "flow: plan upload")
  UP(c->d_src, c->h_src, TeP);
  UP(c->d_xdst, c->h_xdst, TnP);
  UP(c->d_kvdst, c->h_kvdst, 2 * TnP);
  UP(c->d_pos, c->h_pos, 2 * TnP);
  UP(c->d_map, c->h_map, 2 * TnP);
  if (n_virt) UP(c->d_virt, c->h_virt, n_virt);
  UP(c->d_tiles, c->h_tiles, 2 * n_tiles);
  if (n_items) UP(c->d_items, c->h_items, 2 * n_items);
  if (n_ptab) UP(c->d_ptab, c->h_ptab, n_ptab);
  UP(c->d_segs, c->h_segs, n_segs);
  UP(c->condb, c->h_condb, (size_t)TeP * M);
#undef UP
  /* constant rows: row 0 = [cond, mu, spk] of the ext frames (mu from each job's tokens), row 1
   * zeros; hc = W_r . inp + b */
  CK(cudaMemsetAsync(c->inp, 0, (size_t)2 * TeP * 3 * M * 4, s), "flow: memset");
  for (int j = 0; j < n; j++) {
    gpu_flow_call *k = &calls[j];
    gpu_flow_req *q = k->q;
    const long n_all = (long)q->P + k->n_gen;
    const int n_used = N_j[j] / f->ratio;
    if (q->P) CK(cudaMemcpyAsync(f->ids, q->ptok, (size_t)q->P * 4, cudaMemcpyHostToDevice, s), "flow: upload");
    CK(cudaMemcpyAsync(f->ids + q->P, k->tokens + q->P, (size_t)k->n_gen * 4, cudaMemcpyHostToDevice, s),
       "flow: upload");
    CK(cudaMemcpyAsync(f->spk + (size_t)0, q->eh, (size_t)M * 4, cudaMemcpyHostToDevice, s),
       "flow: upload");
    if ((st = prelookahead(f, (int)n_all, n_used))) return st;
    const int e0 = s_j[j] >= ctx ? 0 : ctx - s_j[j]; /* first real ext row */
    const int fr0 = s_j[j] - ctx + e0;
    CK(cosy_k_flow_pack_cond(s, c->inp + (size_t)(eb[j] + e0) * 3 * M,
                             c->condb + (size_t)(eb[j] + e0) * M, f->mu + (size_t)fr0 * M, f->spk,
                             N_j[j] - fr0, M),
       "flow: input rows");
  }
  if ((st = gemm(f, 2 * TeP, D, 3 * M, COSY_KDT_F32, c->inp, 3 * M, f->inr_w, f->in_b,
                 COSY_KDT_F32, c->hcx, D, 0, "flow: input proj (constant part)")))
    return st;
  /* x_0 of the new rows: the noise at their absolute frames */
  for (int j = 0; j < n; j++)
    CK(cudaMemcpyAsync(c->xnew + (size_t)nb[j] * M, f->noise_fm + (size_t)s_j[j] * M,
                       (size_t)(N_j[j] - s_j[j]) * M * 4, cudaMemcpyDeviceToDevice, s),
       "flow: noise");
  if (TnP > Tn)
    CK(cudaMemsetAsync(c->xnew + (size_t)Tn * M, 0, (size_t)(TnP - Tn) * M * 4, s), "flow: memset");
  tt_pre = cosy_now();
  {
    gkey key;
    memset(&key, 0, sizeof key);
    key.batch = 1;
    key.N = TnP;
    key.Te = TeP;
    key.n_tiles = n_tiles;
    key.n_virt = n_virt;
    key.n_items = n_items;
    key.csize = csize;
    key.tq = tq;
    const batch_args ba = {TnP, TeP, n_virt, n_tiles, n_items, csize, tq};
    /* S steps: step k's modulation row and offsets into the current slots, then the step (a
     * graph captured at the key's first call: one step's ~270 launches capture and instantiate
     * in a few ms, which the other S - 1 replays repay) */
    for (int k = 0; k < f->S; k++) {
      CK(cudaMemcpyAsync(f->mod_cur, f->mod_tab + k * f->TOT, (size_t)f->TOT * 4,
                         cudaMemcpyDeviceToDevice, s),
         "flow: step row");
      CK(cudaMemcpyAsync(f->step_cur, f->step_tab + k, sizeof(flow_step), cudaMemcpyDeviceToDevice,
                         s),
         "flow: step offsets");
      if ((st = graph_run(f, &key, batch_step_enqueue, &ba, 1))) return st;
    }
  }
  tt_enq = cosy_now();
  if (f->timing) CK(cudaEventRecord(f->tev[1], s), "flow: timing event");
  CK(cudaMemcpyAsync(c->h_xout, c->xnew, (size_t)Tn * M * 4, cudaMemcpyDeviceToHost, s),
     "flow: download");
  if ((st = cosy_gpu_sync(f->g, "gpu_flow_batch"))) return st;
  if (f->timing) {
    float gms = 0;
    (void)cudaEventElapsedTime(&gms, f->tev[0], f->tev[1]);
    const double t1 = cosy_now();
    /* jobs, of them first calls, new frames, ext rows, tiles; graph steps hit / captured /
     * direct; host ms: plan, constant part enqueued, steps enqueued (capture included), wall;
     * capture + instantiation ms; device ms (first launch to last step's end) */
    fprintf(f->timing, "%.4f batch %d %d %d %d %d  %d %d %d  %.3f %.3f %.3f %.3f  %.3f  %.3f\n", tt0,
            n, n_new, Tn, Te, n_tiles, f->n_hit, f->n_cap, f->n_direct, 1e3 * (tt_plan - tt0),
            1e3 * (tt_pre - tt_plan), 1e3 * (tt_enq - tt_pre), 1e3 * (t1 - tt0), f->cap_ms, gms);
    fflush(f->timing);
  }
  for (int j = 0; j < n; j++) {
    gpu_flow_call *k = &calls[j];
    gpu_flow_req *q = k->q;
    const int from = f->ratio * q->P + k->frame_from - s_j[j];
    memcpy(k->mel, c->h_xout + (size_t)(nb[j] + from) * M, (size_t)k->n_frames * M * 4);
    if (!k->full && !k->finalize) q->cached = store_to[j];
    /* a first call that stored the prompt-only blocks gives them to the voice table */
    const int nb_voice = flow_prompt_only_blocks(q->P, f->ratio, f->la, PF);
    const int have = q->cached / PF < nb_voice ? q->cached / PF : nb_voice;
    if (have > 0 && q->shared == 0 && have <= 64 && c->n_voices < VOICE_SLOTS) {
      int known = 0;
      for (int v = 0; v < c->n_voices; v++) known |= c->voices[v].key == q->key;
      if (!known) {
        voice_blocks *vb = &c->voices[c->n_voices++];
        vb->key = q->key;
        vb->n = have;
        for (int i = 0; i < have; i++) {
          vb->pages[i] = q->pages[i];
          c->refs[q->pages[i]]++;
        }
        q->shared = have;
      }
    }
  }
  return COSY_OK;
}

cosy_status gpu_flow_batch(gpu_flow *f, gpu_flow_call *calls, int n, const volatile int *cancel) {
  if (!f || !f->fc || (n > 0 && !calls) || n < 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "gpu_flow_batch: bad argument");
  gflow_cache *c = FC(f);
  /* checks; then groups that fit the packed buffers */
  for (int j = 0; j < n; j++) {
    gpu_flow_call *k = &calls[j];
    gpu_flow_req *q = k->q;
    int n_used;
    if (!q || !k->tokens || !k->mel)
      return cosy_err(COSY_ERR_INVALID_ARG, "gpu_flow_batch: call %d: NULL argument", j);
    cosy_status st = flow_check_call("gpu_flow_batch", f->vocab, f->ratio, f->la, f->max_frames,
                                     k->tokens, q->P, k->n_gen, q->pmel, f->ratio * q->P, q->eh,
                                     k->finalize, &n_used);
    if (st) return st;
    if (k->frame_from < 0 || k->n_frames < 0 ||
        f->ratio * q->P + k->frame_from + k->n_frames > f->ratio * n_used)
      return cosy_err(COSY_ERR_INVALID_ARG, "gpu_flow_batch: call %d asks for frames [%d, %d) of %d",
                      j, k->frame_from, k->frame_from + k->n_frames, f->ratio * (n_used - q->P));
  }
  int j0 = 0;
  while (j0 < n) {
    if (cancel && *cancel) return cosy_err(COSY_ERR_CANCELLED, "flow decoding cancelled");
    int tn = 0, j1 = j0;
    while (j1 < n && j1 - j0 < BATCH_JOBS) {
      gpu_flow_call *k = &calls[j1];
      const int la = k->finalize ? 0 : f->la;
      int N = f->ratio * (k->q->P + k->n_gen - la);
      int s0 = k->full ? 0 : k->q->cached;
      int want0 = f->ratio * k->q->P + k->frame_from;
      if (s0 > want0) s0 = want0;
      s0 -= s0 % PF;
      if (j1 > j0 && tn + (N - s0) > c->tn_max) break;
      tn += N - s0;
      j1++;
    }
    cosy_status st = batch_run(f, calls + j0, j1 - j0);
    if (st) {
      cudaStreamSynchronize(f->s);
      return st;
    }
    j0 = j1;
  }
  return COSY_OK;
}
