/* gemm.cu - y = x W^T (+ bias) (+ y) through cuBLASLt; y = gelu_tanh(x W^T + bias).
 *
 * Math: y[m][n] = sum_k x[m][k] W[n][k] + bias[n] (+ y[m][n] when accumulate), fp32 accumulation
 *   (CUBLAS_COMPUTE_32F, scale type fp32: for fp32 inputs this is true fp32, not TF32).
 * Shapes: x [M][ldx] (K used), W [N][K] (a PyTorch Linear weight [out][in], row-major), bias [N]
 *   fp32, y [M][ldy] (N used). Supported types: x, W bf16 -> y bf16 or fp32; x, W fp32 -> y fp32.
 * Mapping to column-major cuBLAS: the row-major W [N][K] is the column-major K x N matrix W^T,
 *   x [M][K] is the column-major K x M matrix x^T and y [M][N] the column-major N x M y^T, so
 *   y^T = op_T(W^T) x^T: A = W (transa = T, lda = K), B = x (transb = N, ldb = ldx),
 *   C = D = y (ldc = ldy). This "TN" form is cuBLASLt's preferred layout.
 * Bias: for fp32 outputs fused as CUBLASLT_EPILOGUE_BIAS (cuBLASLt takes the bias in the output
 *   type); for bf16 outputs, or where the fused form is refused, the product runs without
 *   epilogue and cosy_k_add_bias (act.cu) adds the fp32 bias afterwards on the same stream
 *   (one more pass over y, and y is rounded to bf16 twice).
 * GELU (cosy_k_gemm_gelu): y = gelu_tanh(x W^T + bias) as CUBLASLT_EPILOGUE_GELU_BIAS (GELU
 *   without bias: CUBLASLT_EPILOGUE_GELU): bias add and GELU in fp32 on the accumulator, one
 *   rounding at the store. cuBLASLt's GELU is the tanh approximation, the DiT feed-forward's
 *   (lib/ref/flow.c gelu_tanh; tests/test_kernels.c tells the two forms apart on the output).
 *   The bias: first the fp32 one (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE CUDA_R_32F), exact; where
 *   cuBLASLt offers no algorithm for that (cublasLt.h documents the bias in the output type
 *   apart from the IMMA and fp8 cases) and the caller passed the same bias stored in the
 *   output type (bias_y), that one (bf16 for a bf16 y: the bias rounded to bf16 once, a
 *   relative 2^-9 of the bias, no larger than the extra rounding of y that the two-launch form
 *   has; counted by cosy_gemm_epi_bias_y). Where cuBLASLt offers neither (or refuses the fused
 *   form at run time), or cosy_gemm_set_gelu_epi turned it off, the product runs without
 *   epilogue and cosy_k_add_bias_gelu (act.cu) applies the fp32 bias and GELU afterwards (two
 *   launches, bf16 y rounded twice); each such plan is counted (cosy_gemm_epi_fallbacks). The
 *   epilogue is part of the plan key and of the cached algorithms' key, so the fused and the
 *   plain forms of a shape never share a plan. A fused form the heuristic offers nothing for at
 *   a bucket is remembered as such (AlgoEntry.none), so it is not asked again for each new M of
 *   the bucket (on the H200 the fp32 bias with a bf16 output is refused: without this, two
 *   queries at every new M after cosy_gemm_prewarm_gelu; test_kernels test_gemm counts them).
 * Plans: matmul/layout descriptors and the heuristic's algorithm are cached per shape, types,
 *   strides, accumulate flag and pointer alignments (a small ring of PLAN_CACHE entries), so a
 *   steady-state call does no heuristic query and nothing that breaks CUDA graph capture.
 * Algorithms by row bucket: under load nearly every flow batch and LLM prefill piece has a row
 *   count M not seen before, and a heuristic query costs ~1.8 ms of host time (H100, measured by
 *   `test_kernels --bench gemm`) on the caller's critical path, for each of a call's shapes. So
 *   for M > 64 the algorithm is the heuristic's choice for the bucket of M, the next power of
 *   two: one query per bucket and shape, kept in a ring of ALGO_CACHE entries, checked for the
 *   actual M with cublasLtMatmulAlgoCheck (if it does not fit, the heuristic is asked for M
 *   itself); a new M then costs ~0.1 ms. cosy_gemm_prewarm makes a shape's queries for all
 *   buckets up front (engine creation). The algorithm stays a fixed function of the shape: the
 *   same M always runs the same kernel. Rows of one bucket share one kernel and tiling, so a
 *   row's value is the same whichever M of the bucket computes it (tests/test_kernels.c); rows
 *   computed in calls of different buckets may round differently. An algorithm chosen for up to
 *   twice the rows runs a flow batch ~10% slower on the GPU than the per-M choice
 *   (test_gpu_flow's batch timing), which the saved host time more than repays in W1; four
 *   buckets per octave won that GPU time back but not W1's latency, and moved the full-size
 *   model's first-chunk schedules apart (bench/RESULTS.md).
 *   For measurements (cosy_gemm_set_bucket, bench/bench_kernels.c): mode 0 asks the heuristic
 *   for every M; 3 uses four buckets per octave (64, 80, 96, 112, 128, 160, ...); 1 one
 *   algorithm for every M > 64 of a shape, the heuristic's choice at M = 4096: a row's value
 *   then never depends on M (batch invariant by construction), at a measured cost in W1 at
 *   C = 64 (bench/HISTORY.md).
 * Batch-invariant GEMMs (cosy_k_gemm_inv, the batch-invariant LLM's prefill): one algorithm for
 *   every M of a shape, the heuristic's first candidate without split-K at M = M_INV (2048)
 *   rows, so each output is one tile's K loop in one order whatever M; checked for
 *   each M with cublasLtMatmulAlgoCheck (a misfit falls back to the heuristic for that M and is
 *   counted: cosy_gemm_inv_fallbacks; tests/test_kernels.c demands 0 for the LLM's shapes).
 * The handle owns a device workspace (default 32 MiB) allocated once by cosy_gemm_create.
 */
#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#include "kcommon.cuh"

namespace {

constexpr int PLAN_CACHE = 64;
constexpr int ALGO_CACHE = 1024; /* a few shapes x ~30 buckets (COSY_GEMM_BUCKET=3) fit */
constexpr int BUCKET_MIN = 64; /* M up to this is queried as it is */
constexpr int M_REF = 4096;    /* the row count the shared algorithm is chosen for */
constexpr int M_INV = 2048;    /* the row count cosy_k_gemm_inv's algorithm is chosen for */
constexpr int INV_CANDIDATES = 16; /* heuristic results searched for one without split-K */

struct PlanKey {
  int M, N, K, ldx, ldy;
  int ab_dt, y_dt, has_bias, accumulate;
  int align_x, align_w, align_y, align_b;
  int inv; /* cosy_k_gemm_inv: one split-K-free algorithm for every M of the shape */
  int gelu; /* cosy_k_gemm_gelu: y = gelu_tanh(x W^T + bias); 1 fused epilogue tried (fp32 bias,
             * then bias_y), 2 never (cosy_gemm_set_gelu_epi(g, 0)), 3 bias_y only (mode 2);
             * 0 plain cosy_k_gemm */
  int align_by; /* bias_y's alignment, 0 without */
};

/* the epilogue a plan runs (Plan.bias_fused, AlgoEntry.fused, plan_build's fuse) */
enum { EPI_NONE = 0, EPI_BIAS = 1, EPI_GELU_BIAS = 2, EPI_GELU = 3, EPI_GELU_BIAS_Y = 4 };

/* the heuristic's algorithm for a shape at a bucket's row count (key with M = the bucket) and
 * fused-bias choice */
struct AlgoEntry {
  PlanKey bkey;
  int fused, valid;
  int none; /* a fused epilogue the heuristic offered nothing for at the bucket: not asked again
             * for any M of the bucket (the fp32 bias of a bf16 GELU output, which cuBLASLt
             * refuses, would otherwise cost a query at each new M) */
  cublasLtMatmulAlgo_t algo;
};

/* the row count whose algorithm serves M: mode 2 (default) the next power of two; mode 3 the
 * smallest of 64, 80, 96, 112, 128, 160, ... (4, 5, 6 or 7 times a power of two) >= M; mode 1
 * m_ref for every M > 64; mode 0 M itself */
int next_bucket(int mode, int b) {
  if (mode == 2) return 2 * b;
  int p = 1;
  while (p * 8 <= b) p *= 2; /* b = q p with q in 4..7 */
  return b + p;
}
int m_bucket(int mode, int m_ref, int M) {
  if (M <= BUCKET_MIN || mode == 0) return M;
  if (mode == 1) return m_ref;
  int b = BUCKET_MIN;
  while (b < M && b < (1 << 29)) b = next_bucket(mode, b);
  return b;
}

struct Plan {
  PlanKey key;
  int valid;
  int bias_fused; /* EPI_*; EPI_NONE: bias (if any) and GELU (if any) applied afterwards */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
};

int ptr_align(const void *p) {
  const uintptr_t u = (uintptr_t)p;
  int a = 1;
  while (a < 256 && (u % (uintptr_t)(a * 2)) == 0) a *= 2;
  return a;
}

cudaError_t map_status(cublasStatus_t st) {
  switch (st) {
  case CUBLAS_STATUS_SUCCESS: return cudaSuccess;
  case CUBLAS_STATUS_ALLOC_FAILED: return cudaErrorMemoryAllocation;
  case CUBLAS_STATUS_INVALID_VALUE: return cudaErrorInvalidValue;
  case CUBLAS_STATUS_NOT_SUPPORTED:
  case CUBLAS_STATUS_ARCH_MISMATCH: return cudaErrorNotSupported;
  default: return cudaErrorUnknown;
  }
}

cudaDataType_t cuda_type(cosy_kdtype dt) { return dt == COSY_KDT_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

} /* namespace */

struct cosy_gemm {
  cublasLtHandle_t lt;
  void *ws;
  size_t ws_bytes;
  int last_cublas;
  int next; /* ring position for replacement */
  int san_init; /* cosy_gemm_set_san_init: clear outputs before plain GEMMs (test only) */
  int bucket;   /* 2: algorithms per power-of-two bucket of M (cosy_gemm_set_bucket: 0 per M, 1
                 * one for all M > 64, 3 four buckets per octave; measurement only) */
  int m_ref;    /* mode 1's row count (M_REF) */
  int m_inv;    /* cosy_k_gemm_inv's row count (M_INV) */
  long inv_fallbacks; /* cosy_k_gemm_inv calls whose shared algorithm did not fit their M */
  long epi_fallbacks; /* GELU plans run as plain GEMM + cosy_k_add_bias_gelu (refused fused) */
  long epi_bias_y;    /* GELU plans fused with the bias in the output type (fp32 bias refused) */
  int gelu_epi;       /* 1 (default): try the fused GELU epilogue; 0: never; 2: only with bias_y
                       * (cosy_gemm_set_gelu_epi; tests) */
  long queries; /* heuristic queries so far (cosy_gemm_heuristic_queries) */
  int warm;     /* 1: cosy_gemm_prewarm also launches each bucket's algorithm once, so that its
                 * kernel is loaded before the first real call (without it the first C = 64
                 * burst of a fresh engine had p95 320-355 ms instead of 295-306: bench/HISTORY.md) */
  Plan plans[PLAN_CACHE];
  AlgoEntry algos[ALGO_CACHE];
  int algo_next;
};

namespace {

void plan_free(Plan *p) {
  if (!p->valid) return;
  cublasLtMatrixLayoutDestroy(p->a);
  cublasLtMatrixLayoutDestroy(p->b);
  cublasLtMatrixLayoutDestroy(p->c);
  cublasLtMatmulDescDestroy(p->desc);
  p->valid = 0;
}

#define LT_TRY(expr)                          \
  do {                                        \
    cublasStatus_t st_ = (expr);              \
    if (st_ != CUBLAS_STATUS_SUCCESS) {       \
      g->last_cublas = (int)st_;              \
      plan_destroy_partial(&p);               \
      return map_status(st_);                 \
    }                                         \
  } while (0)

struct PartialPlan {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulPreference_t pref;
};

void plan_destroy_partial(PartialPlan *p) {
  if (p->pref) cublasLtMatmulPreferenceDestroy(p->pref);
  if (p->a) cublasLtMatrixLayoutDestroy(p->a);
  if (p->b) cublasLtMatrixLayoutDestroy(p->b);
  if (p->c) cublasLtMatrixLayoutDestroy(p->c);
  if (p->desc) cublasLtMatmulDescDestroy(p->desc);
  memset(p, 0, sizeof *p);
}

/* Build descriptors and pick an algorithm for the epilogue fuse_bias (EPI_*); *found = 0 when
 * the heuristic offers none. */
cudaError_t plan_build(cosy_gemm *g, const PlanKey &k, int fuse_bias, const float *bias,
                       Plan *out, int *found) {
  PartialPlan p;
  memset(&p, 0, sizeof p);
  *found = 0;
  const cudaDataType_t ab = cuda_type((cosy_kdtype)k.ab_dt), yt = cuda_type((cosy_kdtype)k.y_dt);
  LT_TRY(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LT_TRY(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT_TRY(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (fuse_bias == EPI_GELU) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_GELU;
    LT_TRY(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  } else if (fuse_bias) {
    const cublasLtEpilogue_t epi = fuse_bias == EPI_BIAS ? CUBLASLT_EPILOGUE_BIAS
                                                         : CUBLASLT_EPILOGUE_GELU_BIAS;
    /* EPI_GELU_BIAS_Y: `bias` is then the caller's copy in the output type */
    const int32_t bt = fuse_bias == EPI_GELU_BIAS_Y ? (int32_t)cuda_type((cosy_kdtype)k.y_dt)
                                                    : (int32_t)CUDA_R_32F;
    LT_TRY(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    LT_TRY(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                          sizeof bt));
    /* the heuristic uses the pointer's value to judge its alignment */
    LT_TRY(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                          sizeof bias));
  }
  LT_TRY(cublasLtMatrixLayoutCreate(&p.a, ab, (uint64_t)k.K, (uint64_t)k.N, (int64_t)k.K));
  LT_TRY(cublasLtMatrixLayoutCreate(&p.b, ab, (uint64_t)k.K, (uint64_t)k.M, (int64_t)k.ldx));
  LT_TRY(cublasLtMatrixLayoutCreate(&p.c, yt, (uint64_t)k.N, (uint64_t)k.M, (int64_t)k.ldy));
  LT_TRY(cublasLtMatmulPreferenceCreate(&p.pref));
  const uint64_t ws = g->ws_bytes;
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &ws, sizeof ws));
  const uint32_t al_a = (uint32_t)k.align_w, al_b = (uint32_t)k.align_x,
                 al_c = (uint32_t)k.align_y;
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                              &al_a, sizeof al_a));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                              &al_b, sizeof al_b));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                              &al_c, sizeof al_c));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                              &al_c, sizeof al_c));
  cublasLtMatmulHeuristicResult_t res;
  int n_res = 0;
  memset(&res, 0, sizeof res);
  /* the bucket's algorithm, from the ring or from one query at M = the bucket, if it also
   * serves this M (checked); else the heuristic for M itself */
  const int mb = k.inv ? g->m_inv : m_bucket(g->bucket, g->m_ref, k.M);
  int have = 0;
  if (k.inv || (g->bucket != 0 && k.M > BUCKET_MIN)) {
    PlanKey bk = k;
    bk.M = mb;
    AlgoEntry *hit = nullptr;
    for (int i = 0; i < ALGO_CACHE; ++i)
      if (g->algos[i].valid && g->algos[i].fused == fuse_bias &&
          memcmp(&g->algos[i].bkey, &bk, sizeof bk) == 0) {
        hit = &g->algos[i];
        break;
      }
    if (!hit) {
      cublasLtMatrixLayout_t lb = nullptr, lc = nullptr;
      cublasStatus_t s1 = cublasLtMatrixLayoutCreate(&lb, ab, (uint64_t)k.K, (uint64_t)mb, (int64_t)k.ldx);
      if (s1 == CUBLAS_STATUS_SUCCESS)
        s1 = cublasLtMatrixLayoutCreate(&lc, yt, (uint64_t)k.N, (uint64_t)mb, (int64_t)k.ldy);
      if (s1 == CUBLAS_STATUS_SUCCESS && !k.inv) {
        g->queries++;
        s1 = cublasLtMatmulAlgoGetHeuristic(g->lt, p.desc, p.a, lb, lc, lc, p.pref, 1, &res, &n_res);
      } else if (s1 == CUBLAS_STATUS_SUCCESS) {
        /* the first candidate without split-K: each output is one tile's K loop, in the
         * same order for every M */
        cublasLtMatmulHeuristicResult_t cand[INV_CANDIDATES];
        int nc = 0;
        memset(cand, 0, sizeof cand);
        g->queries++;
        s1 = cublasLtMatmulAlgoGetHeuristic(g->lt, p.desc, p.a, lb, lc, lc, p.pref,
                                            INV_CANDIDATES, cand, &nc);
        n_res = 0;
        for (int i = 0; s1 == CUBLAS_STATUS_SUCCESS && i < nc; ++i) {
          int32_t splitk = 1;
          size_t wr = 0;
          if (cublasLtMatmulAlgoConfigGetAttribute(&cand[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                   &splitk, sizeof splitk, &wr) !=
              CUBLAS_STATUS_SUCCESS)
            continue;
          if (splitk <= 1) {
            res = cand[i];
            n_res = 1;
            break;
          }
        }
      }
      if (lb) cublasLtMatrixLayoutDestroy(lb);
      if (lc) cublasLtMatrixLayoutDestroy(lc);
      /* a fused form refused at the bucket, whatever the status (cuBLASLt answers the fp32
       * bias of a bf16 output with an error status, not with zero results), is remembered */
      if ((s1 == CUBLAS_STATUS_SUCCESS && n_res >= 1) || (fuse_bias && !k.inv)) {
        if (s1 != CUBLAS_STATUS_SUCCESS) n_res = 0;
        hit = &g->algos[g->algo_next];
        g->algo_next = (g->algo_next + 1) % ALGO_CACHE;
        hit->bkey = bk;
        hit->fused = fuse_bias;
        hit->none = n_res < 1;
        if (!hit->none) hit->algo = res.algo;
        hit->valid = 1;
      }
    }
    if (hit && hit->none) { /* the fused form is not offered for this bucket */
      plan_destroy_partial(&p);
      return cudaSuccess; /* *found stays 0 */
    }
    if (hit) {
      cublasLtMatmulHeuristicResult_t chk;
      memset(&chk, 0, sizeof chk);
      if (cublasLtMatmulAlgoCheck(g->lt, p.desc, p.a, p.b, p.c, p.c, &hit->algo, &chk) ==
              CUBLAS_STATUS_SUCCESS &&
          chk.state == CUBLAS_STATUS_SUCCESS && chk.workspaceSize <= g->ws_bytes) {
        res.algo = hit->algo;
        have = 1;
      }
    }
  }
  if (!have && k.inv) g->inv_fallbacks++;
  if (!have) {
    n_res = 0;
    memset(&res, 0, sizeof res);
    g->queries++;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(g->lt, p.desc, p.a, p.b, p.c, p.c, p.pref, 1, &res, &n_res);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && n_res < 1)) {
      plan_destroy_partial(&p);
      return cudaSuccess; /* *found stays 0 */
    }
    LT_TRY(st);
  }
  cublasLtMatmulPreferenceDestroy(p.pref);
  out->key = k;
  out->valid = 1;
  out->bias_fused = fuse_bias;
  out->desc = p.desc;
  out->a = p.a;
  out->b = p.b;
  out->c = p.c;
  out->algo = res.algo;
  *found = 1;
  return cudaSuccess;
}

} /* namespace */

extern "C" cudaError_t cosy_gemm_create(cosy_gemm **out, size_t workspace_bytes) {
  if (!out) return cudaErrorInvalidValue;
  *out = nullptr;
  cosy_gemm *g = (cosy_gemm *)calloc(1, sizeof *g);
  if (!g) return cudaErrorMemoryAllocation;
  g->ws_bytes = workspace_bytes ? workspace_bytes : ((size_t)32 << 20);
  cublasStatus_t st = cublasLtCreate(&g->lt);
  if (st != CUBLAS_STATUS_SUCCESS) {
    free(g);
    return map_status(st);
  }
  cudaError_t e = cudaMalloc(&g->ws, g->ws_bytes);
  /* zeroed once: the split-K partial sums that cuBLASLt's kernels leave here are written with
   * bulk (TMA) stores on sm_90, which compute-sanitizer's initcheck does not see; zeroing makes
   * the workspace initialized in its eyes (no effect on results) */
  if (e == cudaSuccess) e = cudaMemset(g->ws, 0, g->ws_bytes);
  if (e != cudaSuccess) {
    if (g->ws) cudaFree(g->ws);
    cublasLtDestroy(g->lt);
    free(g);
    return e;
  }
  g->bucket = 2;
  g->m_ref = M_REF;
  g->m_inv = M_INV;
  g->warm = 1;
  g->gelu_epi = 1;
  *out = g;
  return cudaSuccess;
}

extern "C" void cosy_gemm_set_san_init(cosy_gemm *g, int on) {
  if (g) g->san_init = on != 0;
}

extern "C" void cosy_gemm_set_gelu_epi(cosy_gemm *g, int mode) {
  if (g && mode >= 0 && mode <= 2) g->gelu_epi = mode;
}

extern "C" void cosy_gemm_set_bucket(cosy_gemm *g, int mode) {
  if (g && mode >= 0 && mode <= 3) g->bucket = mode;
}

extern "C" void cosy_gemm_destroy(cosy_gemm *g) {
  if (!g) return;
  for (int i = 0; i < PLAN_CACHE; ++i) plan_free(&g->plans[i]);
  if (g->ws) cudaFree(g->ws);
  if (g->lt) cublasLtDestroy(g->lt);
  free(g);
}

extern "C" int cosy_gemm_last_cublas_status(const cosy_gemm *g) { return g ? g->last_cublas : 0; }

extern "C" long cosy_gemm_heuristic_queries(const cosy_gemm *g) { return g ? g->queries : 0; }

extern "C" long cosy_gemm_inv_fallbacks(const cosy_gemm *g) { return g ? g->inv_fallbacks : 0; }

extern "C" long cosy_gemm_epi_fallbacks(const cosy_gemm *g) { return g ? g->epi_fallbacks : 0; }

extern "C" long cosy_gemm_epi_bias_y(const cosy_gemm *g) { return g ? g->epi_bias_y : 0; }

namespace {

PlanKey make_key(int M, int N, int K, cosy_kdtype ab_dt, const void *x, int ldx, const void *w,
                 const float *bias, cosy_kdtype y_dt, const void *y, int ldy, int accumulate,
                 int gelu = 0, const void *bias_y = nullptr) {
  PlanKey key;
  memset(&key, 0, sizeof key);
  key.M = M;
  key.N = N;
  key.K = K;
  key.ldx = ldx;
  key.ldy = ldy;
  key.ab_dt = ab_dt;
  key.y_dt = y_dt;
  key.has_bias = bias != nullptr;
  key.accumulate = accumulate ? 1 : 0;
  key.align_x = ptr_align(x);
  key.align_w = ptr_align(w);
  key.align_y = ptr_align(y);
  key.align_b = bias ? ptr_align(bias) : 0;
  key.gelu = gelu;
  key.align_by = bias_y ? ptr_align(bias_y) : 0;
  return key;
}

/* the cached plan of key, else a new one in the ring's next slot */
cudaError_t get_plan(cosy_gemm *g, const PlanKey &key, const float *bias, Plan **out,
                     const void *bias_y = nullptr) {
  *out = nullptr;
  for (int i = 0; i < PLAN_CACHE; ++i) {
    if (g->plans[i].valid && memcmp(&g->plans[i].key, &key, sizeof key) == 0) {
      *out = &g->plans[i];
      return cudaSuccess;
    }
  }
  Plan *slot = &g->plans[g->next];
  g->next = (g->next + 1) % PLAN_CACHE;
  plan_free(slot);
  int found = 0;
  cudaError_t e = cudaSuccess;
  /* cuBLASLt wants the bias in the output type: fuse only for fp32 outputs, and treat any
   * refusal of the fused form as "not offered". GELU: the fused form with the fp32 bias for
   * either output type (offered or not is cuBLASLt's answer; a refusal is counted) */
  if (key.gelu == 1 || key.gelu == 3) {
    if (key.gelu == 1 &&
        plan_build(g, key, bias ? EPI_GELU_BIAS : EPI_GELU, bias, slot, &found) != cudaSuccess)
      found = 0;
    if (!found && bias && bias_y) {
      if (plan_build(g, key, EPI_GELU_BIAS_Y, (const float *)bias_y, slot, &found) !=
          cudaSuccess)
        found = 0;
      if (found) g->epi_bias_y++;
    }
    if (!found) g->epi_fallbacks++;
  } else if (key.gelu) {
    /* cosy_gemm_set_gelu_epi(g, 0): the plain form (not counted) */
  } else if (bias && key.y_dt == COSY_KDT_F32) {
    if (plan_build(g, key, EPI_BIAS, bias, slot, &found) != cudaSuccess) found = 0;
  }
  if (!found) e = plan_build(g, key, 0, nullptr, slot, &found);
  if (e != cudaSuccess) return e;
  if (!found) {
    g->last_cublas = (int)CUBLAS_STATUS_NOT_SUPPORTED;
    return cudaErrorNotSupported;
  }
  *out = slot;
  return cudaSuccess;
}

} /* namespace */

namespace {
cudaError_t gemm_impl(cosy_gemm *g, cudaStream_t s, int M, int N, int K, cosy_kdtype ab_dt,
                      const void *x, int ldx, const void *w, const float *bias, cosy_kdtype y_dt,
                      void *y, int ldy, int accumulate, int inv, int gelu,
                      const void *bias_y = nullptr);

/* PlanKey.gelu of a GELU call under cosy_gemm.gelu_epi */
int gelu_key(int gelu_epi) { return gelu_epi == 1 ? 1 : gelu_epi == 2 ? 3 : 2; }

cudaError_t prewarm_impl(cosy_gemm *g, cudaStream_t s, int M_max, int N, int K,
                         cosy_kdtype ab_dt, const void *x, int ldx, const void *w,
                         const float *bias, cosy_kdtype y_dt, void *y, int ldy, int accumulate,
                         int gelu, const void *bias_y = nullptr) {
  if (gelu && g) gelu = gelu_key(g->gelu_epi);
  if (!g || M_max < -1 || N <= 0 || K <= 0 || !cosyk_dt_ok(ab_dt) || !cosyk_dt_ok(y_dt) ||
      ldx < K || ldy < N || !x || !w || !y)
    return cudaErrorInvalidValue;
  if (ab_dt == COSY_KDT_F32 && y_dt != COSY_KDT_F32) return cudaErrorNotSupported;
  if (M_max == -1) { /* cosy_k_gemm_inv's algorithm (one query for the shape) */
    PlanKey k =
        make_key(g->m_inv, N, K, ab_dt, x, ldx, w, bias, y_dt, y, ldy, accumulate, gelu, bias_y);
    k.inv = 1;
    Plan *p = nullptr;
    return get_plan(g, k, bias, &p, bias_y);
  }
  if (g->bucket == 0 || M_max <= BUCKET_MIN) return cudaSuccess;
  const int last = m_bucket(g->bucket, g->m_ref, M_max);
  for (int b = g->bucket == 1 ? g->m_ref : next_bucket(g->bucket, BUCKET_MIN); b <= last;
       b = next_bucket(g->bucket, b)) {
    Plan *p = nullptr;
    cudaError_t e = get_plan(g, make_key(b, N, K, ab_dt, x, ldx, w, bias, y_dt, y, ldy,
                                         accumulate, gelu, bias_y),
                             bias, &p, bias_y);
    if (e != cudaSuccess) return e;
    if (g->warm) {
      /* one launch of the bucket's algorithm at min(b, M_max) rows (same kernel), on zeroed
       * operands: CUDA loads a kernel at its first launch (lazy module loading, ~ms for
       * cuBLASLt's), which would otherwise fall on the first burst of requests */
      const int m = b < M_max ? b : M_max;
      const size_t ea = ab_dt == COSY_KDT_F32 ? 4 : 2, ey = y_dt == COSY_KDT_F32 ? 4 : 2;
      e = cudaMemsetAsync(const_cast<void *>(x), 0, ((size_t)(m - 1) * ldx + K) * ea, s);
      if (e == cudaSuccess) e = cudaMemsetAsync(y, 0, ((size_t)(m - 1) * ldy + N) * ey, s);
      if (e == cudaSuccess)
        e = gemm_impl(g, s, m, N, K, ab_dt, x, ldx, w, bias, y_dt, y, ldy, accumulate, 0, gelu,
                      bias_y);
      if (e != cudaSuccess) return e;
    }
    if (g->bucket == 1) break;
  }
  return cudaSuccess;
}
} /* namespace */

extern "C" cudaError_t cosy_gemm_prewarm(cosy_gemm *g, cudaStream_t s, int M_max, int N, int K,
                                         cosy_kdtype ab_dt, const void *x, int ldx, const void *w,
                                         const float *bias, cosy_kdtype y_dt, void *y, int ldy,
                                         int accumulate) {
  return prewarm_impl(g, s, M_max, N, K, ab_dt, x, ldx, w, bias, y_dt, y, ldy, accumulate, 0);
}

extern "C" cudaError_t cosy_gemm_prewarm_gelu(cosy_gemm *g, cudaStream_t s, int M_max, int N,
                                              int K, cosy_kdtype ab_dt, const void *x, int ldx,
                                              const void *w, const float *bias,
                                              const void *bias_y, cosy_kdtype y_dt, void *y,
                                              int ldy) {
  return prewarm_impl(g, s, M_max, N, K, ab_dt, x, ldx, w, bias, y_dt, y, ldy, 0, 1, bias_y);
}

namespace {
cudaError_t gemm_impl(cosy_gemm *g, cudaStream_t s, int M, int N, int K, cosy_kdtype ab_dt,
                      const void *x, int ldx, const void *w, const float *bias, cosy_kdtype y_dt,
                      void *y, int ldy, int accumulate, int inv, int gelu,
                      const void *bias_y) {
  if (!g || M < 0 || N < 0 || K < 0 || !cosyk_dt_ok(ab_dt) || !cosyk_dt_ok(y_dt))
    return cudaErrorInvalidValue;
  if (ab_dt == COSY_KDT_F32 && y_dt != COSY_KDT_F32) return cudaErrorNotSupported;
  if ((int64_t)M * N == 0) return cudaSuccess;
  if (K == 0 || ldx < K || ldy < N || !x || !w || !y) return cudaErrorInvalidValue;
  if (gelu) gelu = gelu_key(g->gelu_epi);

  PlanKey key =
      make_key(M, N, K, ab_dt, x, ldx, w, bias, y_dt, y, ldy, accumulate, gelu, bias_y);
  key.inv = inv;
  Plan *plan = nullptr;
  cudaError_t pe = get_plan(g, key, bias, &plan, bias_y);
  if (pe != cudaSuccess) return pe;
  if (plan->bias_fused == EPI_BIAS || plan->bias_fused == EPI_GELU_BIAS ||
      plan->bias_fused == EPI_GELU_BIAS_Y) {
    const void *bp = plan->bias_fused == EPI_GELU_BIAS_Y ? bias_y : (const void *)bias;
    cublasStatus_t st = cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
    if (st != CUBLAS_STATUS_SUCCESS) {
      g->last_cublas = (int)st;
      return map_status(st);
    }
  }
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  if (g->san_init && !accumulate) {
    const size_t es = y_dt == COSY_KDT_F32 ? 4 : 2;
    cudaError_t me = cudaMemset2DAsync(y, (size_t)ldy * es, 0, (size_t)N * es, (size_t)M, s);
    if (me != cudaSuccess) return me;
  }
  cublasStatus_t st = cublasLtMatmul(g->lt, plan->desc, &alpha, w, plan->a, x, plan->b, &beta, y,
                                     plan->c, y, plan->c, &plan->algo, g->ws, g->ws_bytes, s);
  if (st != CUBLAS_STATUS_SUCCESS && plan->bias_fused) {
    /* the fused form was offered but refused at run time: replace the plan by the plain one */
    g->last_cublas = (int)st;
    if (gelu) g->epi_fallbacks++;
    plan_free(plan);
    int found = 0;
    cudaError_t e = plan_build(g, key, 0, nullptr, plan, &found);
    if (e != cudaSuccess) return e;
    if (!found) return cudaErrorNotSupported;
    st = cublasLtMatmul(g->lt, plan->desc, &alpha, w, plan->a, x, plan->b, &beta, y, plan->c, y,
                        plan->c, &plan->algo, g->ws, g->ws_bytes, s);
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    g->last_cublas = (int)st;
    return map_status(st);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  if (gelu && !plan->bias_fused) return cosy_k_add_bias_gelu(s, y_dt, y, ldy, bias, M, N);
  if (bias && !plan->bias_fused) return cosy_k_add_bias(s, y_dt, y, ldy, bias, M, N);
  return cudaSuccess;
}
} /* namespace */

extern "C" cudaError_t cosy_k_gemm(cosy_gemm *g, cudaStream_t s, int M, int N, int K,
                                   cosy_kdtype ab_dt, const void *x, int ldx, const void *w,
                                   const float *bias, cosy_kdtype y_dt, void *y, int ldy,
                                   int accumulate) {
  return gemm_impl(g, s, M, N, K, ab_dt, x, ldx, w, bias, y_dt, y, ldy, accumulate, 0, 0);
}

extern "C" cudaError_t cosy_k_gemm_inv(cosy_gemm *g, cudaStream_t s, int M, int N, int K,
                                       cosy_kdtype ab_dt, const void *x, int ldx, const void *w,
                                       const float *bias, cosy_kdtype y_dt, void *y, int ldy,
                                       int accumulate) {
  return gemm_impl(g, s, M, N, K, ab_dt, x, ldx, w, bias, y_dt, y, ldy, accumulate, 1, 0);
}

extern "C" cudaError_t cosy_k_gemm_gelu(cosy_gemm *g, cudaStream_t s, int M, int N, int K,
                                        cosy_kdtype ab_dt, const void *x, int ldx, const void *w,
                                        const float *bias, const void *bias_y, cosy_kdtype y_dt,
                                        void *y, int ldy) {
  return gemm_impl(g, s, M, N, K, ab_dt, x, ldx, w, bias, y_dt, y, ldy, 0, 0, 1, bias_y);
}
