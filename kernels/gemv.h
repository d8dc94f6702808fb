/* gemv.h - the fused skinny GEMM of the GPU LLM's decode steps (kernels/gemv.cu; plain C
 * launcher): M in {1, 2, 4, 8} rows of fp32 activations times bf16 weights, optionally fused with
 * the RMSNorm of its input and with the layer's epilogue (residual add, SiLU gate, RoPE + KV
 * append to the pages of paged_kv.h); optional programmatic dependent launch. Used by
 * lib/gpu/llm.c.
 *
 * Conventions: those of kernels.h (stream first, asynchronous, cudaErrorInvalidValue for bad
 * arguments, else cudaGetLastError() after the launch; nothing allocates, synchronizes, prints or
 * exits; zero rows is a no-op). head_dim is fixed at 64 (Qwen2-0.5B geometry).
 *
 * Paged KV cache layout (as kernels.h): per layer one K and one V array
 *   cache[page][page_size][n_kh][64] fp32; token t of a sequence sits at cache row
 *   slot = block_table[t / page_size] * page_size + t % page_size.
 */
#ifndef COSY_GEMV_H
#define COSY_GEMV_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cosy_llm_gemv_in {
  COSY_GEMV_IN_F32 = 0,     /* x [M][ldx] fp32 */
  COSY_GEMV_IN_RMSNORM = 1  /* x [M][ldx] fp32; uses norm_w[k] * (x[m][k] * rsqrt(mean_k x^2 + eps)) */
} cosy_llm_gemv_in;

typedef enum cosy_llm_gemv_out {
  COSY_GEMV_STORE_F32 = 0,  /* y[m][n] = dot + bias[n]                      (y fp32 [M][ldy]) */
  COSY_GEMV_ADD_F32 = 1,    /* y[m][n] += dot + bias[n]                     (y fp32, residual) */
  COSY_GEMV_SILU_MUL = 2,   /* W = [gate; up] (N = 2I rows): y[m][j] = silu(g_j) * u_j, j < I,
                               g_j = dot_j + bias[j], u_j = dot_{I+j} + bias[I+j] (y fp32
                               [M][ldy]) */
  COSY_GEMV_QKV_ROPE = 3    /* W = [q; k; v] (N = (n_qh + 2 n_kh) * 64): + bias, RoPE on q/k,
                               q -> y fp32 [M][ldy], k/v -> fp32 paged cache rows slots[m] (as
                               cosy_k_llm_rope_append of paged_kv.h, with pos/slots/inv_freq) */
} cosy_llm_gemv_out;

typedef struct cosy_llm_gemv_args {
  int M, N, K;              /* M in {1, 2, 4, 8} rows; W [N][K] bf16 (K % 8 == 0, 16-B rows) */
  int groups;               /* 0 or 1: M rows; G > 1: G groups of M rows (rows g*M .. g*M+M-1
                               of x, y, pos and slots), one grid; a row's result does not depend
                               on M or G (the same reduction order), so the decode step is batch-
                               invariant when every bucket runs here */
  cosy_llm_gemv_in in_mode;
  const float *x;           /* 16-byte aligned, ldx % 4 == 0 */
  int ldx;
  const float *norm_w;      /* [K], IN_RMSNORM only (16-byte aligned) */
  float eps;
  const cosy_bf16 *w;
  const float *bias;        /* [N] or NULL */
  cosy_llm_gemv_out out_mode;
  float *y;
  int ldy;
  /* QKV_ROPE only */
  int n_qh, n_kh;
  const int32_t *pos, *slots;
  const float *inv_freq;    /* [32] */
  float *k_cache, *v_cache;
  /* 1: launch as a programmatic dependent of the previous kernel on the stream (the weight
   * stream starts before that kernel has finished; everything it produced is read only after
   * griddepcontrol.wait). Needs sm_90; ignored (plain launch) elsewhere. */
  int pdl;
  /* cosy_k_llm_gemv_tc only: shared memory (bytes, static + dynamic) one block may use, the
   * device's opt-in limit (kdevice.h smem_block); 0 = 48 KB. Where a block's rows of x fit, they
   * are staged there (speed only: the result is the same either way). */
  int smem_max;
  /* cosy_k_llm_gemv_tc only: device workspace (16-byte aligned) of at least
   * cosy_k_llm_gemv_tc_workspace(R, K) bytes, or NULL. Given for more than 8 rows, a
   * first small kernel RMSNorms and splits each row of x there once, instead of every block
   * doing it for its k-blocks (speed only: the same bits; smaller or NULL: done in the blocks). */
  void *xs;
  size_t xs_bytes;
  /* cosy_k_llm_gemv_tc only: 1 when the device runs thread-block clusters (kdevice.h clusters):
   * a weight tile's K may then be split over up to 4 blocks (32 parts) instead of 8 warps of one
   * block. It changes the K split, so every call of one engine passes the same value. */
  int clusters;
  /* cosy_k_llm_gemv_tc only: shared memory (bytes) of one multiprocessor (kdevice.h smem_sm);
   * 0 = smem_max's value. Bounds the in-block x fragments (xfrag). */
  int smem_sm;
  /* cosy_k_llm_gemv_tc only (the engine sets it at one row for K <= 1024; COSY_LLM_XFRAG): 1 =
   * where x is split in the blocks (up to 8 rows, or more without the workspace xs), each block
   * computes its rows' x fragments (RMSNorm'd, split into hi/lo) once into shared memory and its
   * warps load them, instead of every warp computing its own for each k-block; used only where
   * the fragments fit (smem_max per block, smem_sm for the blocks an SM keeps; else the per-warp
   * path); 2 = the same without staging the rows of x in shared memory first (the RMSNorm
   * statistics and the fragments read x in place). Speed only: the same bits either way. 0 (or
   * any other value) = the per-warp path. */
  int xfrag;
  /* cosy_k_llm_gemv_tc only (the engine's default; the knob COSY_LLM_GEMVB=0 clears it): 1:
   * above 8 rows with the workspace, the variant with the weights as mma's B operand and x as
   * its A operand (kernels/gemv.cu gemv_tcb_kernel; x split in that kernel's fragment order).
   * The same sums in the same mma sequence; the bits may differ from the default kernel where
   * the tensor core orders the transposed product differently (the engine's batch invariance
   * holds either way: tests). 0: gemv_tc_kernel, x as the B operand. */
  int gemvb;
  /* cosy_k_llm_gemv_tc with gemvb above 8 rows, a measurement aid (the kernel table): 0 = the
   * block shape the launcher chooses by epilogue and rows; 1 = 16-row blocks, 2 = 32-row blocks
   * with two weight tiles a warp, 3 = 32-row blocks with one. Speed only: the same bits. */
  int tcb_shape;
} cosy_llm_gemv_args;

/* 1 when cosy_k_llm_gemv supports M rows of K inputs (M in {1, 2, 4, 8}, K % 8 == 0,
 * 8 <= K <= 8192). */
int cosy_k_llm_gemv_supported(int M, int K);

/* 1 when cosy_k_llm_gemv_tc supports W [N][K] with that epilogue: K % 8 == 0, K >= 8; SILU_MUL
 * needs N % 16 == 0, QKV_ROPE N % 64 == 0. */
int cosy_k_llm_gemv_tc_supported(int N, int K, int out_mode);

/* The same operation on the tensor cores (sm_80+, mma.sync m16n8k16 bf16) for any number of rows
 * R = M * max(groups, 1) (M >= 1, no limit of 8; groups only multiplies the rows): x (after the
 * RMSNorm, fp32) is split per element into bf16 hi + lo (x = hi + lo to ~2^-17 relative) and
 * both are multiplied with the bf16 weights, fp32 accumulation. A warp owns 16 weight rows (the
 * two rows of a SiLU or RoPE pair sit in one warp, so the epilogue needs no exchange) and a
 * share of K fixed by N and K alone; every row of x is computed the same way whatever R, so
 * a row's result is bit-identical alone or among any others (batch-invariant, tested). Rows go
 * 8, 16 or 32 to a block; the weights are streamed once per block of rows. */
cudaError_t cosy_k_llm_gemv_tc(cudaStream_t s, const cosy_llm_gemv_args *a);

/* 1 when cosy_k_llm_gemv_tc with these arguments computes the x fragments once per block (args
 * xfrag set, x split in the blocks, the fragments fit its shared memory), 0 otherwise or for bad
 * arguments (a test and measurement aid; launches nothing). */
int cosy_k_llm_gemv_tc_xfrag_used(const cosy_llm_gemv_args *a);

/* Bytes of the workspace (args xs) with which cosy_k_llm_gemv_tc splits R rows of K inputs
 * once: R rounded up to 16 times K rounded up to 32, 4 bytes each (0 for R or K <= 0). */
size_t cosy_k_llm_gemv_tc_workspace(int R, int K);

/* y = epilogue(x W^T (+ bias)) for M in {1, 2, 4, 8} rows, see the modes above. W is read once
 * (streamed into registers first), x through the L1 cache; fp32 accumulation. Graph-capturable
 * (the grid depends only on M, N, K). Dummy rows are harmless (slots < 0 skip cache writes). */
cudaError_t cosy_k_llm_gemv(cudaStream_t s, const cosy_llm_gemv_args *a);

#ifdef __cplusplus
}
#endif

#endif
