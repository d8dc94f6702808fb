/* conv.cu - the HiFT vocoder's convolutions: causal conv1d on tensor cores (fp32 storage,
 * TF32, 3xTF32 or fp16-operand products, fp32 accumulation) and the fp64 convs + classifier of
 * the F0 predictor.
 *
 * Math: kernels_hift.h (cosy_hift_conv): a PyTorch Conv1d over a zero-extended input, with
 * optional nearest upsampling of the input (CausalConv1dUpsample), stride (source downs),
 * dilation (resblocks), left zeros (causal 'left' padding) or a valid length shorter than the
 * read range (the 'right' look-ahead zeros when final), ReflectionPad1d((1,0)) of the output, a
 * pre-activation fused into the input load (leaky ReLU, Snake, or the mean of three resblock
 * outputs then leaky ReLU), up to two residual adds and a Snake of the result (the next conv's
 * input, so that each Snake is computed once per value) fused into the store.
 *
 * Implicit GEMM. out[co][t] = sum over (ci, j) of W[co][ci][j] X[ci][p(t) s + j d - P] is a GEMM
 * with M = co, N = time, K = ci * k. The weights are packed host-side as wp[j][co_pad][ci_pad]
 * so that one tap j and 8 input channels form one k8 step of mma.sync.m16n8k8 (TF32 in, fp32
 * accumulate). The input is not expanded (no im2col): for each chunk of 8 input channels a block
 * stages the "strip" of input columns its 64 output steps read under all k taps
 * (63 stride + (k-1) dil + 1 columns), activated once per staged value, and the B fragments of
 * tap j read the strip at column n stride + j dil.
 *
 * Thread mapping: 128 threads = 4 warps in a 2 (co) x 2 (time) grid; each warp owns 32 co x 32
 * time steps = 2 x 4 mma tiles (32 fp32 accumulators per thread). A block computes 64 co x 64 time
 * of one conv; grid = (time tiles, co tiles, conv index) so that up to 16 independent convs
 * (the three resblocks of a stage; in streaming, those of every job of a batch) share one
 * launch. Per chunk of 8 input channels: the weight slab k x 64 x 8 goes to shared memory by
 * cp.async (16 B); the strip values (one column per thread, all 8 rows; a plain loop for the
 * long strided strips of the source downs) were loaded into registers during the previous
 * chunk's mma and are now activated, rounded to TF32 (3xTF32: split into big and small planes)
 * and stored column-major (a column's 8 channels in a row); then k mma steps. The fragments are
 * read with ldmatrix (8 rows of 4 fp32 = one 8x8 b16 matrix): per tap and warp one x4 load per
 * 16-row m tile of A and two for the four n tiles of B. Weight rows (8 floats) and the strip's
 * column rows have their 16-byte halves swapped in every other group of 4 rows, so that 8
 * consecutive rows hit 32 distinct banks.
 * One slab and one strip a block, two barriers per chunk (copy, stage, wait, barrier, mma,
 * barrier). A pipelined variant (two slabs and strips, the next chunk's weights copied during
 * the current chunk's products, one barrier a chunk) was measured slower on an H100 (full-size
 * vocoder T = 224 TF32 4.51 against 4.28 ms; bench/RESULTS.md): the kernel is bound by the issue
 * of its non-mma instructions (fragment loads, conversions, copies, the activations), not by the
 * copy latency, which four blocks an SM already hide.
 * When a launch has fewer than 3 blocks per SM (stage 0: 256 channels x 8 T steps) the block
 * doubles to two warp groups that take alternate chunks and add their partial sums through
 * shared memory at the end (split-K inside the block, deterministic).
 * Shared memory fits the device (kdevice.h smem_block): when the slab of all k taps and the strip
 * exceed it (the k 30, stride 15 source down needs ~91 KB in TF32, ~121 KB in 3xTF32; an 8.6 /
 * 8.9 / 12.0 GPU allows 99 KB per block), the slab holds kt < k taps and each chunk runs
 * ceil(k / kt) tap groups: the strip is staged once, then per group the slab is loaded
 * (cp.async), one barrier, kt mma steps, one barrier. The products and their order per output
 * are the same for every kt (the taps are
 * still added in order j = 0 .. k-1), so the result does not depend on the device.
 *
 * Numerics: operands are rounded to TF32 (cvt.rna; the activations once, when staged; the weights
 * at fragment load, or once by the caller, on the host, with COSY_HPREC_TF32_ROUNDED: the same
 * rounding, so the same bits, and 8 conversions fewer per 8 mma of a warp); in 3xTF32 mode each
 * operand is split into big = tf32(x) and
 * small = tf32(x - big) and the product is big*small + small*big + big*big, which restores
 * fp32-level accuracy (error ~1e-6 relative) at three times the tensor work. The activations use
 * IEEE arithmetic without contraction, as the CPU reference writes them, and in the TF32 kernels
 * an accurate sinf for the Snake; the fp16 kernels (below), whose activations are rounded to fp16
 * before any product uses them, take the Snake's sine from the SFU after a two-part range
 * reduction (snake<true>: error ~1e-7 against the fp16 rounding's 2^-11 relative). The
 * accumulation order differs from the reference (fp32 sums).
 *
 * Measured (H200, full-size HiFT, T = 224): the convs reach ~25 TFLOP/s of useful fp32 work in
 * 3xTF32 (~75 TFLOP/s of TF32 mma issue) and ~38 in TF32; they are bound by instruction issue
 * and latency of the mma.sync path, not by memory.
 * Counted (docs/kernels.md, "The vocoder's convolutions"; SASS for sm_90): this kernel issues
 * ~9-13 instructions per HMMA (k 11 .. k 3): per tap 33.5 for 8 HMMA (the swizzled B addresses
 * are recomputed at every tap), ~27 per weight cp.async (index division and 64-bit multiplies),
 * ~95 per chunk for the staged column. A launch's floors: docs/kernels.md (a streaming call of
 * 100 frames: 62 GFLOP, ~125 us at the H200's TF32 rate).
 *
 * conv2_kernel<OP, NTW, M3> (below; cosy_hift_conv_kernel picks it): the same implicit GEMM
 * with a 32 x 64 (NTW 8, W128: 64 x 128 block) or 32 x 32 (NTW 4, W64: 64 x 64 block) warp
 * tile, a padded strip addressed incrementally and one cp.async per tap from a running pointer;
 * one slab and one strip, two barriers a chunk, as here: ~3-6 instructions per HMMA. One
 * template, two operand precisions OP (a traits struct: the weights' type and pitch, the
 * channels per chunk, how a staged column is converted, which mma is issued, the epilogue's
 * weight scale):
 *   - OpTf32<PREC> (TF32, TF32_ROUNDED): mma m16n8k8 TF32, 8 channels a chunk; the same
 *     products in the same order per output as this kernel, so the same bits as this kernel
 *     unsplit; launches it does not handle (3xTF32, mean-of-3, split, long strips, tap groups)
 *     fall back to this kernel.
 *   - OpF16 (COSY_HPREC_F16): fp16 operands and mma.sync m16n8k16 with fp32 accumulation (16
 *     input channels per chunk: half the fragment loads, staged columns, weight copies and
 *     barriers per product of the TF32 kernels, twice the tensor rate), the weights scaled per
 *     output channel by an exact power of two on the host (undone in the epilogue) and the
 *     activations saturated to +-65504 when staged, which sets the conv's flag
 *     (cosy_hift_conv.sat; the numerics and the range the inputs must stay in: conv2_kernel's
 *     comment). It takes every launch of the vocoder (mean-of-3 inputs: M3, NTW 4; strided
 *     downs; tap groups); the F0 predictor's convs stay fp64 (below). Its bits
 *     differ from the TF32 kernels'; they do not depend on the tile (W128 / W64) or the taps per
 *     slab (tests/test_gpu_hift.c test_kernel_conv_f16).
 * conv3_kernel<NTW, S> (below; the F16 launches whose convs carry an xh workspace, where
 * conv3_prefer says): conv2_kernel<OpF16> with the input staged beforehand by
 * conv_stage_f16_kernel (activated once, fp16, time-major) and copied by cp.async through a ring
 * of S shared-memory stages, one barrier a chunk; the same bits as conv2_kernel<OpF16>.
 * All three end in the same epilogue (store_tile: bias, residuals, stores, the fused Snake
 * output; its full-tile cases compiled apart in store_tile_full, the same operations). The
 * engine's choice is the one line `int g_conv_kernel = ...` below
 * (COSY_HCONV_K_AUTO: W128 or W64 per launch by the rule in conv2_auto; docs/kernels.md), and
 * for F16 `int g_conv_staged = ...` (COSY_HCONV_STAGED_AUTO: conv3_prefer).
 *
 * F0 predictor (fp64): the same implicit GEMM on the fp64 tensor cores (mma.sync m8n8k4),
 * 32 co x 32 time per block of 4 warps, accumulation from the bias, ELU (expm1) fused. The
 * classifier sums 8 channel slices per time step and adds them in order; |.| rounded to fp32.
 * The fp64 results differ from the CPU's sequential sums by ~1e-16 relative, which the rounding
 * of f0 to fp32 hides (f0 bit-identical in practice).
 * Grouped F0 launches (cosy_k_hift_conv64_group, cosy_k_hift_f0_classify_group; the streaming
 * vocoder runs the predictor of every job of a batch together): up to 64 jobs of one layer per
 * launch, each job its own input [ci][ld_in] (len_in valid columns), output [co][ld_out] and
 * n_out, the weights, ci, co, k and pad_left shared. The job table (64 x 32 bytes; classifier
 * 64 x 24) is a __grid_constant__ parameter under 4 KB. Conv grid = (time tiles of the longest
 * job, co tiles, job); classifier grid = (time tiles of the longest job, job); the blocks past a
 * job's own tiles return before their first barrier. A block of a job runs the very code of the
 * single launch (conv64_block, f0_classify_block) with that job's arguments: same products, same
 * order, so each job's values are bit-identical to its launch alone, for any grouping or split
 * into launches. Measured (H100, full-size predictor 80 -> 512 -> 4 x 512, 64 jobs of 40 .. 110
 * frames, 4750 in all; test_gpu_hift test_kernel_conv64_group): 3.4 ms grouped, 18.5 ms with one
 * launch per job and layer (~64 blocks each: the GPU mostly idle). */
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kcommon.cuh"
#include "kernels_hift.h"

namespace {

constexpr int BM = COSY_HCONV_BM; /* 64 output channels */
constexpr int BN = 64;            /* time steps */
constexpr int CK = COSY_HCONV_CK; /* 8 input channels per reduction step */
constexpr int NT = 128;
constexpr int MAXG = COSY_HCONV_MAXG;
constexpr int MAXK = 32;
constexpr int RED_FLOATS = 32 * NT; /* the KS = 2 reduction: 32 accumulators per thread */

struct ConvGroup {
  cosy_hift_conv c[MAXG];
  int kt[MAXG]; /* taps per weight slab (k: all at once) */
};
/* passed by value as a __grid_constant__ kernel parameter: stay within the classic 4 KB */
static_assert(sizeof(ConvGroup) <= 4000, "ConvGroup exceeds the kernel parameter space");

__host__ __device__ inline int strip_len(int k, int dil, int stride) {
  return (BN - 1) * stride + (k - 1) * dil + 1 + 2; /* +2: the reflect column */
}
/* the strip is stored column-major, a column's CK = 8 channels in a row of XP = 8 floats, its
 * two 16-byte halves (channels 0-3, 4-7) swapped in columns with bit 2 set, so that the 16-byte
 * rows of 8 consecutive columns an ldmatrix reads hit 32 distinct banks */
constexpr int XP = CK;
/* the float offset of half h (channels 4h .. 4h + 3) of strip column col */
__host__ __device__ inline int sx_off(int col, int h) {
  return col * XP + ((h ^ (col >> 2)) & 1) * 4;
}
/* the weight slab [kt][BM][CK] is swizzled the same way: row r (tap (r / BM), output channel
 * r % BM) has its halves swapped when bit 2 of r is set (no padding: 8 consecutive rows of one
 * half, as one ldmatrix reads them, hit 32 distinct banks) */
__host__ __device__ inline int sw_off(int row, int h) { return sx_off(row, h); }
/* strip planes: tf32(x), and for 3xTF32 also tf32(x - tf32(x)) */
__host__ __device__ constexpr int conv_planes(int prec) {
  return prec == COSY_HPREC_3XTF32 ? 2 : 1;
}
/* one weight slab of kt taps [kt][BM][CK] + the strip [planes][strip_len][XP] */
inline size_t conv_smem(int kt, int k, int dil, int stride, int planes) {
  return ((size_t)kt * BM * CK + (size_t)planes * strip_len(k, dil, stride) * XP) * sizeof(float);
}

__device__ __forceinline__ uint32_t tf32_bits(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

/* four 8x8 matrices of 16-bit elements from shared memory (ldmatrix), here 8 rows x 4 fp32:
 * lane l gives the 16-byte aligned address of row l % 8 of matrix l / 8; r[i] is matrix i's
 * fragment: thread t holds row t / 4, fp32 column t % 4 */
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const float *p) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
  const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Snake: v + inv sin(a v)^2 (inv = 1 / (a + 1e-9) per channel). FS = false: sinf (accurate to
 * ~1 ulp, ~40 instructions with its range reduction), as the CPU reference; the TF32 kernels.
 * FS = true: the fp16-operand kernels (OpF16, conv3, conv_stage_f16), where the value is rounded
 * to fp16 (relative 2^-11) before any product uses it: y = a v reduced to [-pi, pi] by k =
 * rint(y / 2pi) against 2pi in two parts (hi = fp32(2pi), lo = 2pi - hi; exact enough for |k| <
 * 2^12), then the SFU's sine (__sinf: absolute error < 2^-21.4 on [-pi, pi]), ~8 instructions.
 * The sine's error is then ~1e-7 absolute, relative ~1e-6 on the result for the values the
 * vocoder sees, far below the fp16 rounding that follows (docs/kernels.md, "The Snake in the
 * fp16 kernels"). The same operations in every fp16 kernel, so their bits agree. */
template <bool FS = false>
__device__ __forceinline__ float snake(float v, float a, float inv) {
  const float y = __fmul_rn(v, a);
  float sv;
  if (FS) {
    const float k = rintf(__fmul_rn(y, 0.159154943091895336f));
    float r = __fmaf_rn(-k, 6.28318548202514648f, y); /* hi = fp32(2pi) */
    r = __fmaf_rn(k, 1.74845553146951719e-7f, r);     /* 2pi = hi - 1.748e-7 */
    sv = __sinf(r);
  } else {
    sv = sinf(y);
  }
  return __fadd_rn(v, __fmul_rn(inv, __fmul_rn(sv, sv)));
}

/* the pre-activation of input value (ci, column uu) */
template <bool FS = false>
__device__ __forceinline__ float load_act(const cosy_hift_conv &c, int act, int ci, int uu) {
  const size_t off = (size_t)ci * (size_t)c.ld_in + (size_t)uu;
  float v = c.in[off];
  switch (act) {
    case COSY_HACT_LEAKY:
      v = v > 0.f ? v : __fmul_rn(v, c.slope);
      break;
    case COSY_HACT_SNAKE: {
      const float a = c.alpha[ci];
      const float inv = c.alpha_inv ? c.alpha_inv[ci] : __fdiv_rn(1.0f, __fadd_rn(a, 1e-9f));
      v = snake<FS>(v, a, inv);
      break;
    }
    case COSY_HACT_MEAN3_LEAKY: {
      const float m = __fdiv_rn(__fadd_rn(__fadd_rn(v, c.in2[off]), c.in3[off]), 3.0f);
      v = m > 0.f ? m : __fmul_rn(m, c.slope);
      break;
    }
    default:
      break;
  }
  return v;
}

/* KS = 1: one group of 4 warps; KS = 2: two groups (256 threads) that take alternate chunks of 8
 * input channels, each with its own shared-memory region, and add their partial sums at the end
 * through shared memory (group 1's into group 0's: a fixed order, deterministic). M3: some conv
 * of the launch reads the mean of three inputs (registers for the two extra prefetches). */
/* the activation of a prefetched value v (v2, v3: the other two means); a zero (padding) value
 * stays zero under every mode */
template <bool FS = false>
__device__ __forceinline__ float apply_act(const cosy_hift_conv &c, int act, int ci, bool row_ok,
                                           float v, float v2, float v3) {
  switch (act) {
    case COSY_HACT_LEAKY:
      return v > 0.f ? v : __fmul_rn(v, c.slope);
    case COSY_HACT_SNAKE: {
      if (!row_ok) return 0.f;
      const float a = c.alpha[ci];
      const float inv = c.alpha_inv ? c.alpha_inv[ci] : __fdiv_rn(1.0f, __fadd_rn(a, 1e-9f));
      return snake<FS>(v, a, inv);
    }
    case COSY_HACT_MEAN3_LEAKY: {
      const float m = __fdiv_rn(__fadd_rn(__fadd_rn(v, v2), v3), 3.0f);
      return m > 0.f ? m : __fmul_rn(m, c.slope);
    }
    default:
      return v;
  }
}

/* whether p (a row start) and the row pitch ld keep every even column 8-byte aligned (NULL: yes) */
__device__ __forceinline__ bool pair_ok(const void *p, int ld) {
  return (((size_t)p & 7) | ((size_t)ld & 1)) == 0;
}

/* r[e] = p[e] for the ne (1 or 2) valid steps (0 for the other); vec: both at once as one float2 */
__device__ __forceinline__ void load_pair(float (&r)[2], const float *p, bool vec, int ne) {
  if (vec) {
    const float2 q = *reinterpret_cast<const float2 *>(p);
    r[0] = q.x, r[1] = q.y;
  } else {
    r[0] = p[0];
    r[1] = ne > 1 ? p[1] : 0.f;
  }
}

/* o[e] = v[e] for the ne valid steps; vec: one float2 store */
__device__ __forceinline__ void put_pair(float *o, const float (&v)[2], bool vec, int ne) {
  if (vec)
    *reinterpret_cast<float2 *>(o) = make_float2(v[0], v[1]);
  else
    for (int e = 0; e < ne; e++) o[e] = v[e];
}

/* store_tile's full-tile case: every row of the warp's 32 is an output channel, every one of its
 * 8 NTW steps an output step, and every tensor float2-aligned (pair_ok), with the tensors it
 * touches fixed at compile time (RES: res, OUT: out, SNK: out_act = Snake(v); no res2), so that
 * a pair is its arithmetic, its loads and its stores, without the general case's per-pair bounds,
 * pointer and flag tests (the staged Snake convs spent over half their issue slots there). The
 * same operations on the same values as the general case. */
template <int NTW, bool FS, bool RES, bool OUT, bool SNK>
__device__ __forceinline__ void store_tile_full(const cosy_hift_conv &c,
                                                const float (&acc)[2][NTW][4], int co0, int tb,
                                                int wm, int g, const float *osc) {
  constexpr int GH = NTW == 8 ? 1 : 2;
  const float *const bias = c.bias;
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int h0 = 0; h0 < 2; h0 += GH) {
      float2 r[GH][NTW];
      float pb[GH], psc[GH], poa[GH], pinv[GH];
#pragma unroll
      for (int hh = 0; hh < GH; hh++) {
        const int co = co0 + wm * 32 + mt * 16 + g + (h0 + hh) * 8;
        pb[hh] = bias ? bias[co] : 0.f;
        psc[hh] = osc ? osc[co] : 1.f;
        if (SNK) {
          poa[hh] = c.oalpha[co];
          pinv[hh] =
              c.oalpha_inv ? c.oalpha_inv[co] : __fdiv_rn(1.0f, __fadd_rn(poa[hh], 1e-9f));
        }
        if (RES) {
          const float *rp = c.res + (size_t)co * c.ld_res + tb;
#pragma unroll
          for (int nt = 0; nt < NTW; nt++)
            r[hh][nt] = *reinterpret_cast<const float2 *>(rp + nt * 8);
        }
      }
#pragma unroll
      for (int hh = 0; hh < GH; hh++) {
        const int h = h0 + hh;
        const int co = co0 + wm * 32 + mt * 16 + g + h * 8;
        float *const op = OUT ? c.out + (size_t)co * c.ld_out + tb : nullptr;
        float *const ap = SNK ? c.out_act + (size_t)co * c.ld_out_act + tb : nullptr;
#pragma unroll
        for (int nt = 0; nt < NTW; nt++) {
          float v[2] = {acc[mt][nt][h * 2], acc[mt][nt][h * 2 + 1]};
#pragma unroll
          for (int e = 0; e < 2; e++) {
            if (osc) v[e] = __fmul_rn(v[e], psc[hh]);
            v[e] = __fadd_rn(v[e], pb[hh]);
          }
          if (RES) v[0] = __fadd_rn(v[0], r[hh][nt].x), v[1] = __fadd_rn(v[1], r[hh][nt].y);
          if (OUT) *reinterpret_cast<float2 *>(op + nt * 8) = make_float2(v[0], v[1]);
          if (SNK)
            *reinterpret_cast<float2 *>(ap + nt * 8) = make_float2(
                snake<FS>(v[0], poa[hh], pinv[hh]), snake<FS>(v[1], poa[hh], pinv[hh]));
        }
      }
    }
}

/* The epilogue of every kernel (conv_tc_kernel: NTW = 4; conv2_kernel: NTW = 4 or 8; osc: the
 * F16 conv2_kernel's per-output-channel weight scale [co], multiplied first), bias,
 * residuals, the stores and the fused post-activation of one warp's accumulators acc[mt][nt][e]
 * (m tile mt of 16 rows, n tile nt of 8 time steps, mma c element e) of the 32 co x 8 NTW time
 * steps from co0 + 32 wm, t0 + 8 NTW wn; g = lane / 4, tq = lane % 4. Per value, in order:
 * v = acc (x osc[co]) + bias[co] (+ res) (+ res2); out = v; out_act = oact(v).
 * A thread's two elements e = 0, 1 are the adjacent time steps t, t + 1 (t even). Where every
 * tensor the epilogue touches is 8-byte aligned at even columns (pair_ok: its base and an even
 * pitch) and both steps are valid, they are read and written as one float2 (a warp's row of 8
 * steps: one 32-byte sector instead of two half-used ones); otherwise one float at a time.
 * Latency: the descriptor's fields are read into registers once (each read of c is a constant
 * load with a register index, and the compiler repeated them after every store); the per-row
 * parameters (bias, scale, Snake's alpha) of all four rows, then the residuals of a group of
 * rows (both rows of an m tile at NTW = 4, one row at NTW = 8: registers) are loaded before any
 * of the group's stores, so their latencies overlap instead of one load's latency for each pair
 * (the compiler cannot move a load above a store that may alias it; here no load reads what
 * this thread stores before it, and no other thread stores what it reads). The values and the
 * operations on them are the same either way. */
template <int NTW, bool FS = false>
__device__ __forceinline__ void store_tile(const cosy_hift_conv &c, const float (&acc)[2][NTW][4],
                                           int co0, int t0, int wm, int wn, int g, int tq,
                                           const float *osc = nullptr) {
  constexpr int WN = 8 * NTW; /* the warp's time steps */
  constexpr int GH = NTW == 8 ? 1 : 2; /* rows h of an m tile whose residuals load together */
  const float *const res = c.res, *const res2 = c.res2, *const bias = c.bias;
  float *const out = c.out, *const oact = c.out_act;
  const int ld_res = c.ld_res, ld_res2 = c.ld_res2, ld_out = c.ld_out, ld_oact = c.ld_out_act;
  const int n_out = c.n_out, co_n = c.co;
  const bool snk = oact && c.oact == COSY_HACT_SNAKE;
  const bool pairs = pair_ok(out, ld_out) && pair_ok(res, ld_res) && pair_ok(res2, ld_res2) &&
                     pair_ok(oact, ld_oact);
  const int tb = t0 + wn * WN + 2 * tq; /* even */
  /* the full-tile cases the vocoder's convs make (the resblocks' first and second convs, plain
   * convs), each compiled apart: store_tile_full */
  if (pairs && !res2 && co0 + wm * 32 + 32 <= co_n && t0 + wn * WN + WN <= n_out &&
      (!oact || snk)) {
    if (!res && !out && snk)
      return store_tile_full<NTW, FS, false, false, true>(c, acc, co0, tb, wm, g, osc);
    if (res && out && snk)
      return store_tile_full<NTW, FS, true, true, true>(c, acc, co0, tb, wm, g, osc);
    if (res && out && !oact)
      return store_tile_full<NTW, FS, true, true, false>(c, acc, co0, tb, wm, g, osc);
    if (!res && out && !oact)
      return store_tile_full<NTW, FS, false, true, false>(c, acc, co0, tb, wm, g, osc);
  }
  float pb[2][2], psc[2][2], poa[2][2], pinv[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int co = co0 + wm * 32 + mt * 16 + g + h * 8;
      const bool ok = co < co_n;
      pb[mt][h] = bias && ok ? bias[co] : 0.f;
      psc[mt][h] = osc && ok ? osc[co] : 1.f; /* F16: the weights' power-of-two scale, undone */
      poa[mt][h] = snk && ok ? c.oalpha[co] : 0.f;
      pinv[mt][h] = snk && ok && c.oalpha_inv ? c.oalpha_inv[co] : 0.f;
    }
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int h0 = 0; h0 < 2; h0 += GH) {
      float r1[GH][NTW][2], r2[GH][NTW][2];
#pragma unroll
      for (int hh = 0; hh < GH; hh++) {
        const int co = co0 + wm * 32 + mt * 16 + g + (h0 + hh) * 8;
#pragma unroll
        for (int nt = 0; nt < NTW; nt++) {
          const int t = tb + nt * 8;
          const bool ok = co < co_n && t < n_out;
          const int ne = t + 1 < n_out ? 2 : 1;
          const bool vec = pairs && ne == 2;
          r1[hh][nt][0] = r1[hh][nt][1] = r2[hh][nt][0] = r2[hh][nt][1] = 0.f;
          if (res && ok) load_pair(r1[hh][nt], res + (size_t)co * ld_res + t, vec, ne);
          if (res2 && ok) load_pair(r2[hh][nt], res2 + (size_t)co * ld_res2 + t, vec, ne);
        }
      }
#pragma unroll
      for (int hh = 0; hh < GH; hh++) {
        const int h = h0 + hh;
        const int co = co0 + wm * 32 + mt * 16 + g + h * 8;
        if (co >= co_n) continue;
        const float b = pb[mt][h], sc = psc[mt][h], oa = poa[mt][h];
        const float oinv =
            snk ? (c.oalpha_inv ? pinv[mt][h] : __fdiv_rn(1.0f, __fadd_rn(oa, 1e-9f))) : 0.f;
#pragma unroll
        for (int nt = 0; nt < NTW; nt++) {
          const int t = tb + nt * 8;
          if (t >= n_out) continue;
          float v[2] = {acc[mt][nt][h * 2], acc[mt][nt][h * 2 + 1]};
          const int ne = t + 1 < n_out ? 2 : 1;
          const bool vec = pairs && ne == 2;
#pragma unroll
          for (int e = 0; e < 2; e++) {
            if (osc) v[e] = __fmul_rn(v[e], sc);
            v[e] = __fadd_rn(v[e], b);
            if (res) v[e] = __fadd_rn(v[e], r1[hh][nt][e]);
            if (res2) v[e] = __fadd_rn(v[e], r2[hh][nt][e]);
          }
          if (out) put_pair(out + (size_t)co * ld_out + t, v, vec, ne);
          if (oact) {
            float w[2];
#pragma unroll
            for (int e = 0; e < 2; e++) w[e] = snk ? snake<FS>(v[e], oa, oinv) : v[e];
            put_pair(oact + (size_t)co * ld_oact + t, w, vec, ne);
          }
        }
      }
    }
}

template <int PREC, int KS, bool M3>
__global__ void __launch_bounds__(NT * KS, 4 / KS)
    conv_tc_kernel(const __grid_constant__ ConvGroup grp, int region_floats) {
  const cosy_hift_conv &c = grp.c[blockIdx.z];
  const int t0 = blockIdx.x * BN;
  const int co0 = blockIdx.y * BM;
  if (t0 >= c.n_out || co0 >= c.co) return;

  extern __shared__ float4 smem_raw[];
  const int kg = KS == 1 ? 0 : (int)threadIdx.x / NT;
  float *smem = reinterpret_cast<float *>(smem_raw) + kg * region_floats;
  const int K = c.k, dil = c.dil, stride = c.stride, act = c.act, KT = grp.kt[blockIdx.z];
  const int SL = strip_len(K, dil, stride);
  /* the region: the weight slab [KT][BM][CK] (taps j0 .. j0 + KT - 1), then the strip's PL
   * planes [SL][XP] (tf32(x), and for 3xTF32 tf32(x - tf32(x))), column-major */
  constexpr int PL = conv_planes(PREC);
  float *const sW = smem, *const sX = smem + KT * BM * CK;

  const int tid = (int)threadIdx.x - kg * NT, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1;
  const int g = lane >> 2, tq = lane & 3;

  /* strip column 0 is the logical output position p0 at tap 0 */
  const int p0 = c.reflect ? t0 - 1 : t0;
  const long long ubase = (long long)p0 * stride - c.pad_left;
  const long long Lu = (long long)c.len_in * c.up;

  /* B fragments by ldmatrix: two x4 loads give the 4 n tiles x (channels 0-3, 4-7); lane l
   * addresses strip column bcol + j dil (tap j) of n = wn 32 + 8 (2 h + (l / 16)) + l % 8, half
   * (l / 8) % 2 (x4 load h = 0, 1) */
  int bcol[2];
  const int bhalf = (lane >> 3) & 1;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int n = wn * 32 + (2 * h + (lane >> 4)) * 8 + (lane & 7);
    bcol[h] = (c.reflect && t0 == 0 && n == 0) ? 2 : n * stride;
  }
  /* A fragments by ldmatrix: one x4 load per m tile; lane l addresses weight row
   * m0 + l % 8 + 8 ((l / 8) % 2), channels 4 (l / 16): matrices (rows g, g + 8) x (k tq, tq + 4)
   * in the order of the mma's a0..a3 */
  int aofs[2];
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
    aofs[mt] = sw_off(wm * 32 + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);

  float acc[2][4][4];
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0.f;

  const int n_chunks = c.ci_pad / CK;
  /* Strips of at most NT columns (every conv but the strided source downs): each thread owns one
   * column of the 8 rows; the next chunk's values are loaded into registers while the current
   * chunk is multiplied (all 8 (x3 for the mean) loads in flight at once). */
  const bool fast = SL <= NT;
  const bool mean3 = M3 && act == COSY_HACT_MEAN3_LEAKY;
  const int u_col = (int)(ubase + tid); /* this thread's strip column, as an input index */
  const bool col_ok = tid < SL && ubase + tid >= 0 && ubase + tid < Lu;
  const int uu_col = col_ok ? (c.up == 1 ? u_col : u_col / c.up) : 0;
  float pv[CK], pv2[CK], pv3[CK];
  auto prefetch = [&](int chunk) {
#pragma unroll
    for (int r = 0; r < CK; r++) {
      const int ci = chunk * CK + r;
      pv[r] = 0.f;
      if (M3) pv2[r] = pv3[r] = 0.f;
      if (col_ok && ci < c.ci) {
        const size_t off = (size_t)ci * (size_t)c.ld_in + (size_t)uu_col;
        pv[r] = c.in[off];
        if (M3 && mean3) pv2[r] = c.in2[off], pv3[r] = c.in3[off];
      }
    }
  };
  /* weight slab of taps [j0, j1) of `chunk` into dst: (j1 - j0) * BM rows of 8 floats, two
   * 16-byte copies each, one commit group (empty when the chunk is past the end) */
  auto load_w = [&](int chunk, int j0, int j1, float *dst) {
    const int nW = chunk < n_chunks ? (j1 - j0) * BM * 2 : 0;
    const int ci0 = chunk * CK;
    for (int i = tid; i < nW; i += NT) {
      const int half = i & 1, row = i >> 1; /* row = (j - j0) * BM + m */
      const int j = j0 + row / BM, m = row % BM;
      const float *src =
          c.wp + ((size_t)j * c.co_pad + (size_t)(co0 + m)) * c.ci_pad + ci0 + half * 4;
      cp_async16(dst + sw_off(row, half), src);
    }
    cp_async_commit();
  };
  /* the strip of `chunk` with the activation, as TF32 planes (so that the fragment loads need no
   * conversion); for fast strips from the prefetched registers, then the next chunk of this warp
   * group is prefetched (in flight during the mma that follows) */
  auto stage = [&](int chunk, float *x) {
    const int ci0 = chunk * CK;
    const bool active = chunk < n_chunks;
    if (fast) {
      if (active && tid < SL) {
        float v[CK], big[CK], sm[CK];
#pragma unroll
        for (int r = 0; r < CK; r++) {
          const int ci = ci0 + r;
          v[r] = apply_act(c, act, ci, ci < c.ci, pv[r], M3 ? pv2[r] : 0.f, M3 ? pv3[r] : 0.f);
          big[r] = __uint_as_float(tf32_bits(v[r]));
          if (PL == 2) sm[r] = __uint_as_float(tf32_bits(__fsub_rn(v[r], big[r])));
        }
        /* a whole column (8 channels): two 16-byte stores per plane */
        const int sw = (tid >> 2) & 1;
        float4 *d = reinterpret_cast<float4 *>(x + tid * XP);
        d[sw] = make_float4(big[0], big[1], big[2], big[3]);
        d[sw ^ 1] = make_float4(big[4], big[5], big[6], big[7]);
        if (PL == 2) {
          float4 *e = reinterpret_cast<float4 *>(x + SL * XP + tid * XP);
          e[sw] = make_float4(sm[0], sm[1], sm[2], sm[3]);
          e[sw ^ 1] = make_float4(sm[4], sm[5], sm[6], sm[7]);
        }
      }
      if (chunk + KS < n_chunks) prefetch(chunk + KS);
    } else {
      for (int r = 0; r < (active ? CK : 0); r++) {
        const int ci = ci0 + r;
        const bool row_ok = ci < c.ci;
        for (int col = tid; col < SL; col += NT) {
          const long long u = ubase + col;
          float v = 0.f;
          if (row_ok && u >= 0 && u < Lu) {
            const int uu = c.up == 1 ? (int)u : (int)(u / c.up);
            v = load_act(c, act, ci, uu);
          }
          const int idx = sx_off(col, r >> 2) + (r & 3);
          const float big = __uint_as_float(tf32_bits(v));
          x[idx] = big;
          if (PL == 2) x[SL * XP + idx] = __uint_as_float(tf32_bits(__fsub_rn(v, big)));
        }
      }
    }
  };
  /* taps [j0, j1) of a staged chunk: slab w holds taps j0.., x the strip */
  auto mma_taps = [&](const float *ws, const float *x, int j0, int j1) {
#pragma unroll 2
    for (int j = j0; j < j1; j++) {
      const float *w = ws + (j - j0) * BM * CK;
      const int jd = j * dil;
      float af[2][4];
      uint32_t bb[4][2], bs[4][2];
#pragma unroll
      for (int mt = 0; mt < 2; mt++) {
        uint32_t r4[4];
        ldsm4(r4, w + aofs[mt]);
#pragma unroll
        for (int e = 0; e < 4; e++) af[mt][e] = __uint_as_float(r4[e]);
      }
#pragma unroll
      for (int h = 0; h < 2; h++) {
        uint32_t r4[4];
        const int xo = sx_off(bcol[h] + jd, bhalf);
        ldsm4(r4, x + xo);
        bb[2 * h][0] = r4[0], bb[2 * h][1] = r4[1];
        bb[2 * h + 1][0] = r4[2], bb[2 * h + 1][1] = r4[3];
        if (PL == 2) {
          ldsm4(r4, x + SL * XP + xo);
          bs[2 * h][0] = r4[0], bs[2 * h][1] = r4[1], bs[2 * h + 1][0] = r4[2],
          bs[2 * h + 1][1] = r4[3];
        }
      }
      uint32_t ab[2][4]; /* the weights as TF32 (already so with COSY_HPREC_TF32_ROUNDED) */
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          ab[mt][e] = PREC == COSY_HPREC_TF32_ROUNDED ? __float_as_uint(af[mt][e])
                                                      : tf32_bits(af[mt][e]);
      if (PL == 2) {
        uint32_t as[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
          for (int e = 0; e < 4; e++)
            as[mt][e] = tf32_bits(__fsub_rn(af[mt][e], __uint_as_float(ab[mt][e])));
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
          for (int nt = 0; nt < 4; nt++) {
            mma_tf32(acc[mt][nt], as[mt], bb[nt]);
            mma_tf32(acc[mt][nt], ab[mt], bs[nt]);
          }
      }
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++) mma_tf32(acc[mt][nt], ab[mt], bb[nt]);
    }
  };

  if (fast && kg < n_chunks) prefetch(kg);
  for (int it = 0; it * KS < n_chunks; it++) {
    const int chunk = it * KS + kg;
    const bool active = chunk < n_chunks;
    load_w(chunk, 0, KT < K ? KT : K, sW);
    stage(chunk, sX);
    cp_async_wait<0>();
    __syncthreads();
    /* tap groups (one when the slab holds all K taps); both warp groups make every barrier */
    for (int j0 = 0;;) {
      const int j1 = j0 + KT < K ? j0 + KT : K;
      if (active) mma_taps(sW, sX, j0, j1);
      __syncthreads(); /* the slab (and, after the last group, the strip) may be overwritten */
      j0 = j1;
      if (j0 >= K) break;
      load_w(chunk, j0, j0 + KT < K ? j0 + KT : K, sW);
      cp_async_wait<0>();
      __syncthreads();
    }
  }

  if (KS == 2) { /* group 1 hands its partial sums to group 0 (its region is free now) */
    float *red = reinterpret_cast<float *>(smem_raw) + region_floats;
    if (kg == 1) {
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
          for (int e = 0; e < 4; e++) red[((mt * 4 + nt) * 4 + e) * NT + tid] = acc[mt][nt][e];
    }
    __syncthreads();
    if (kg == 1) return;
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
      for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          acc[mt][nt][e] = __fadd_rn(acc[mt][nt][e], red[((mt * 4 + nt) * 4 + e) * NT + tid]);
  }

  store_tile<4>(c, acc, co0, t0, wm, wn, g, tq);
}

/* ---- the wide-tile kernel (conv2: TF32 and fp16 operands) ------------------------------------ */

/* conv2_kernel<OP, NTW, M3>: the same GEMM view as conv_tc_kernel with fewer instructions per
 * mma, for two operand precisions OP (the traits below: OpTf32<PREC>, OpF16):
 *   - warp tile 32 co x 8 NTW time (NTW = 8: 32 x 64, 16 mma per tap from 2 A and 4 B ldmatrix
 *     x4; the old kernel's 32 x 32 needs 2 + 2 for 8 mma); block 64 co x 16 NTW time (128 for
 *     NTW = 8), 4 warps (2 co x 2 time), so every weight slab copied to shared memory serves
 *     twice the time steps;
 *   - the strip is stored with a padded column pitch of XS = 12 floats (48 bytes: 8 consecutive
 *     columns, as one ldmatrix matrix reads them, fall in 8 distinct 16-byte bank groups for any
 *     odd stride) instead of the XOR swizzle, so a tap's B address is the previous tap's plus
 *     dil XS floats: the tap loop is ldmatrix + mma + one add, no swizzle arithmetic;
 *   - each thread copies the same weight row (m = tid / 2, half tid % 2) of every tap: one
 *     cp.async per tap from a running pointer, no division or 64-bit multiply per copy.
 * One slab and one strip a block, two barriers per chunk (copy, stage, prefetch, wait, barrier,
 * mma, barrier), the old kernel's schedule. A double-buffered version (two slabs and two strips,
 * the next chunk's weights copied during the current chunk's products, one barrier a chunk) was
 * as fast or slower in every launch of the vocoder on an H200 (the k 16 upsampling of 16
 * requests: 555 against 350 us; bench/RESULTS.md, session of 2026-11-28 (tenth), call c) and was
 * removed.
 * Each thread stages strip columns tid and tid + 128 (CPT = 2 at NTW = 8: strips of up to 256
 * columns, every stride-1 conv of the vocoder), the next chunk's values prefetched into
 * registers. A chunk is OP::CKC input channels = one k step of OP's mma at one tap; a strip
 * column holds them in 32 bytes of its 48-byte pitch, a weight slab row [kt][BM][32 bytes] the
 * same.
 *
 * OpTf32<PREC> (COSY_HPREC_TF32, COSY_HPREC_TF32_ROUNDED): mma.sync m16n8k8 TF32, CKC = 8
 * channels (8 floats) a chunk; the products and their per-output order are conv_tc_kernel's with
 * KS = 1, so the values are bit-identical to that kernel's unsplit launch. The activations are
 * rounded to TF32 when staged, the weights at fragment load (ROUNDED: already by the caller).
 * Not handled (OP::GENERAL false; the launcher falls back to conv_tc_kernel, whose values are
 * the same bits): 3xTF32, the mean-of-3 input, the split reduction, longer strips (the strided
 * source downs), slabs that do not hold all k taps in the device's shared memory.
 *
 * OpF16 (COSY_HPREC_F16): fp16 operands and mma.sync.m16n8k16 (f16 x f16, fp32 accumulation):
 * one k16 step = one tap and CKC = CKH = 16 input channels, so every ldmatrix, staged column,
 * weight copy and barrier serves twice the reduction of the TF32 kernels (and the tensor rate is
 * twice TF32's).
 *   - Layouts: a weight row of 16 halves is 32 bytes, as a TF32 slab row of 8 floats, and a strip
 *     column of 16 halves is 32 bytes in the same 48-byte pitch (XS = 12 floats); the m16n8k16
 *     fragments (a0..a3: rows g / g + 8 x k 2tq, 2tq + 1 / 2tq + 8, 2tq + 9; b0, b1: k 2tq, 2tq + 1
 *     / 2tq + 8, 2tq + 9 x n g) are the same 8x8 b16 matrices of the same 16-byte row halves as
 *     the m16n8k8 TF32 fragments, so aofs / bofs / the ldmatrix calls are the TF32 ones and the
 *     tap loop is ldmatrix + mma + one add (no conversion: the weights are fp16 in memory, the
 *     activations are converted once when staged).
 *   - Weights: packed on the host by cosy_hift_conv_pack_f16: wh[j][co_pad][ci_pad16] fp16,
 *     ci_pad16 = ci rounded up to 16, each output channel multiplied by an exact power of two
 *     2^e (its largest |w| in [0.5, 1); wh_scale[co] = 2^-e), so that small weights keep fp16's
 *     11 significant bits (normal from 6.1e-5 of the channel's largest weight down); the
 *     epilogue multiplies the fp32 sum by wh_scale[co] (exact) before the bias.
 *   - Activations: the pre-activation in fp32 as the TF32 kernels compute it, then rounded to
 *     fp16 (cvt.rn.satfinite: to nearest even, saturating to +-65504, fp16's largest finite
 *     value; NaN stays NaN): a value never becomes inf from range. Precision: 11 significant bits
 *     (as TF32) for |x| >= 6.1e-5, an absolute error <= 2^-25 below (subnormals). The inputs
 *     must therefore stay within +-65504 to be exact to that rounding; the vocoder's stay orders
 *     of magnitude below: the mel (log, |.| ~ 10), the 18 STFT rows of a tanh-bounded source
 *     (|.| <= 8: a Hann-windowed 16-point DFT of values in [-1, 1]) and the hidden activations
 *     (the golden model's largest conv input is ~31: tests/test_tools.py
 *     test_hift_fp16_emulation, which also emulates the decode with these roundings: 1.40e-2
 *     from the golden waveform against TF32's 1.53e-2). tests/test_gpu_hift.c
 *     test_kernel_conv_f16 checks activations up to 1e4 with weights down to 1e-6, and the
 *     saturation beyond 65504.
 *   - Saturation flag (cosy_hift_conv.sat, kernels_hift.h): each thread keeps the running max of
 *     the magnitudes of the fp16 operands it stages (on the packed f16x2 registers: per column
 *     of 16, 4 VHMNMX on sm_90, 8 HMNMX2 on sm_80; the fp32 values would take 16 FMNMX) and, at
 *     the end, stores 1 to c.sat when it saw +-65504 (an activation clamped there, or one in
 *     (65488, 65504] rounded to it). The vocoder recomputes a flagged job in TF32
 *     (lib/gpu/hift.c, "Saturation"). The TF32 instantiations ignore it (OP::SAT false).
 *   - The products: each w' x rounds to fp16 operands (relative 2^-11, as TF32's 10-bit
 *     mantissa), the product and sums are fp32 in the tensor core: the error of a conv output is
 *     that of the TF32 kernels (~3e-4 relative; the test compares both against the CPU). The
 *     accumulation order differs from the TF32 kernels' (16 channels per k step), so the bits do
 *     too.
 *   - Handles every launch the vocoder makes (OP::GENERAL true): any pre-activation (the
 *     mean-of-3 input, M3, with NTW = 4 only: three prefetched values per column), any strip
 *     length (strips longer than the CPT NT columns the prefetch registers cover, the strided
 *     source downs, are staged by a loop over the columns), and tap groups (kt < k taps per slab
 *     when all k do not fit dev->smem_block; per chunk: the strip staged once, then per group
 *     the slab copied, one barrier, kt mma steps, one barrier: conv_tc_kernel's schedule). It
 *     never splits the reduction over two warp groups. */
constexpr int XS = 12;
constexpr int CKH = COSY_HCONV_CKH; /* 16 input channels per k step of the fp16 operands */

__host__ __device__ inline int conv2_strip_len(int ntw, int k, int dil, int stride) {
  return (16 * ntw - 1) * stride + (k - 1) * dil + 1 + 2;
}
/* the weight slab of kt taps [kt][BM][32 bytes: CK floats or CKH halves] + the strip
 * [strip_len][XS] */
inline size_t conv2_smem(int ntw, int kt, int k, int dil, int stride) {
  return ((size_t)kt * BM * CK + (size_t)conv2_strip_len(ntw, k, dil, stride) * XS) *
         sizeof(float);
}

/* two values to fp16 in one f16x2 register (lo: the lower channel, as mma reads it), to nearest
 * even, with .satfinite: a magnitude beyond 65504 becomes +-65504 (never inf), NaN stays NaN
 * (PTX ISA 8.1, sm_80 on; one conversion for both, no separate clamp) */
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ __half2 u32_h2(uint32_t u) {
  __half2 h;
  memcpy(&h, &u, sizeof h);
  return h;
}
__device__ __forceinline__ uint32_t h2_u32(__half2 h) {
  uint32_t u;
  memcpy(&u, &h, sizeof u);
  return u;
}

__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* The operand precisions of conv2_kernel: W, the weights' element in memory; CKC, the input
 * channels of a chunk (one mma k step, 32 bytes); GENERAL, whether the kernel handles tap groups,
 * strips longer than its prefetch registers and the mean-of-3 input (else the launcher never
 * gives it those); weights / ci_pad, the packed weights and their channel pitch; out_scale, the
 * per-output-channel factor the epilogue applies first (none: nullptr); round, what an activated
 * fp32 value becomes when staged (TF32: rounded to TF32; F16: unchanged, put_col converts);
 * put_col, one strip column of CKC staged values stored (two 16-byte stores; F16: converted to
 * fp16 in pairs); prep_a, the A fragments after their ldmatrix (TF32: rounded unless the host
 * did); mma, one m16 x n8 x CKC product. */
template <int PREC> struct OpTf32 {
  using W = float;
  static constexpr bool FAST_SNAKE = false; /* sinf, as the reference (the TF32 kernels' bits) */
  static constexpr int CKC = CK;
  static constexpr bool GENERAL = false;
  static constexpr bool SAT = false;
  static __device__ __forceinline__ const W *weights(const cosy_hift_conv &c) { return c.wp; }
  static __device__ __forceinline__ int ci_pad(const cosy_hift_conv &c) { return c.ci_pad; }
  static __device__ __forceinline__ const float *out_scale(const cosy_hift_conv &) {
    return nullptr;
  }
  static __device__ __forceinline__ float round(float v) { return __uint_as_float(tf32_bits(v)); }
  static __device__ __forceinline__ void put_col(float *x, const float (&v)[CKC], uint32_t &) {
    float4 *d = reinterpret_cast<float4 *>(x);
    d[0] = make_float4(v[0], v[1], v[2], v[3]);
    d[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
  /* the weights as TF32 (already so with COSY_HPREC_TF32_ROUNDED) */
  static __device__ __forceinline__ void prep_a(uint32_t (&ab)[2][4]) {
    if (PREC != COSY_HPREC_TF32_ROUNDED) {
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int e = 0; e < 4; e++) ab[mt][e] = tf32_bits(__uint_as_float(ab[mt][e]));
    }
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    mma_tf32(c, a, b);
  }
};

struct OpF16 {
  using W = uint16_t;
  static constexpr bool FAST_SNAKE = true; /* snake<true>: the value is rounded to fp16 */
  static constexpr int CKC = CKH;
  static constexpr bool GENERAL = true;
  static constexpr bool SAT = true;
  static __device__ __forceinline__ const W *weights(const cosy_hift_conv &c) { return c.wh; }
  /* ci_pad16: wh's pitch (cosy_hift_conv_pack_f16) */
  static __device__ __forceinline__ int ci_pad(const cosy_hift_conv &c) {
    return (c.ci + CKH - 1) / CKH * CKH;
  }
  static __device__ __forceinline__ const float *out_scale(const cosy_hift_conv &c) {
    return c.wh_scale;
  }
  static __device__ __forceinline__ float round(float v) { return v; } /* when stored */
  /* amax: the running max of the staged fp16 operands' magnitudes (an f16x2's bits, each half
   * its own max; __hmax2 ignores NaN), for the saturation flag at conv2_kernel's end: on the
   * packed values, one VHMNMX (sm_90: 3-input, |.| operands) or HMNMX2 (sm_80) per two or one
   * registers, 4 or 8 instructions per staged column of 16 */
  static __device__ __forceinline__ void put_col(float *x, const float (&v)[CKC], uint32_t &amax) {
    uint32_t p[CKC / 2];
#pragma unroll
    for (int r = 0; r < CKC / 2; r++) p[r] = pack_f16x2(v[2 * r], v[2 * r + 1]);
    uint4 *d = reinterpret_cast<uint4 *>(x);
    d[0] = make_uint4(p[0], p[1], p[2], p[3]);
    d[1] = make_uint4(p[4], p[5], p[6], p[7]);
    __half2 m = u32_h2(amax);
#pragma unroll
    for (int r = 0; r < CKC / 2; r++) m = __hmax2(m, __habs2(u32_h2(p[r])));
    amax = h2_u32(m);
  }
  static __device__ __forceinline__ void prep_a(uint32_t (&)[2][4]) {}
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    mma_f16(c, a, b);
  }
};

/* The fragment addresses of conv2_kernel and conv3_kernel (the same layouts): B, ldmatrix x4 h
 * (h < NTW / 2) gives n tiles 2h, 2h + 1 x (the column's 16-byte halves 0, 1); lane l addresses
 * strip column n stride (+ j dil at tap j) of n = wn WN + 8 (2 h + l / 16) + l % 8, half
 * (l / 8) % 2 (the reflect column: 2); A as conv_tc_kernel (the slab layout is the same) */
template <int NTW>
__device__ __forceinline__ void conv2_frag_offsets(const cosy_hift_conv &c, int t0, int stride,
                                                   int wm, int wn, int lane, int (&bofs)[NTW / 2],
                                                   int (&aofs)[2]) {
  constexpr int WN = 8 * NTW;
#pragma unroll
  for (int h = 0; h < NTW / 2; h++) {
    const int n = wn * WN + (2 * h + (lane >> 4)) * 8 + (lane & 7);
    const int col = (c.reflect && t0 == 0 && n == 0) ? 2 : n * stride;
    bofs[h] = col * XS + ((lane >> 3) & 1) * 4;
  }
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
    aofs[mt] = sw_off(wm * 32 + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);
}

/* The tap loop of conv2_kernel and conv3_kernel: taps [j0, j1) of one chunk, the slab ws holding
 * them from its row 0 and the strip xs; per tap 2 + NTW / 2 ldmatrix x4 and 2 NTW mma into acc
 * (the same products in the same order in both kernels) */
template <class OP, int NTW>
__device__ __forceinline__ void conv2_mma_taps(float (&acc)[2][NTW][4], const float *ws,
                                               const float *xs, int j0, int j1, int dxs,
                                               const int (&aofs)[2], const int (&bofs)[NTW / 2]) {
  const float *xb = xs + j0 * dxs;
#pragma unroll 2
  for (int j = j0; j < j1; j++, ws += BM * CK, xb += dxs) {
    uint32_t ab[2][4], bb[NTW][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++) ldsm4(ab[mt], ws + aofs[mt]);
#pragma unroll
    for (int h = 0; h < NTW / 2; h++) {
      uint32_t r4[4];
      ldsm4(r4, xb + bofs[h]);
      bb[2 * h][0] = r4[0], bb[2 * h][1] = r4[1];
      bb[2 * h + 1][0] = r4[2], bb[2 * h + 1][1] = r4[3];
    }
    OP::prep_a(ab);
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
      for (int nt = 0; nt < NTW; nt++) OP::mma(acc[mt][nt], ab[mt], bb[nt]);
  }
}

template <class OP, int NTW, bool M3>
__global__ void __launch_bounds__(NT, NTW == 8 ? 3 : 4)
    conv2_kernel(const __grid_constant__ ConvGroup grp) {
  static_assert(!M3 || (OP::GENERAL && NTW == 4), "the mean-of-3 input: general OP, NTW 4");
  using W = typename OP::W;
  constexpr int CKC = OP::CKC;
  constexpr int BN2 = 16 * NTW; /* block time steps */
  const cosy_hift_conv &c = grp.c[blockIdx.z];
  const int t0 = blockIdx.x * BN2;
  const int co0 = blockIdx.y * BM;
  if (t0 >= c.n_out || co0 >= c.co) return;

  extern __shared__ float4 smem_raw[];
  /* taps per slab: the launch's (tap groups) or all K */
  const int K = c.k, dil = c.dil, stride = c.stride, act = c.act;
  const int KT = OP::GENERAL ? grp.kt[blockIdx.z] : K;
  const int SL = conv2_strip_len(NTW, K, dil, stride);
  float *const sW = reinterpret_cast<float *>(smem_raw); /* [KT][BM][32 bytes] */
  float *const sX = sW + KT * BM * CK;                   /* [SL][XS], 32 bytes a column */

  const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1;
  const int g = lane >> 2, tq = lane & 3;

  const int p0 = c.reflect ? t0 - 1 : t0;
  const long long ubase = (long long)p0 * stride - c.pad_left;
  const long long Lu = (long long)c.len_in * c.up;

  int bofs[NTW / 2], aofs[2];
  conv2_frag_offsets<NTW>(c, t0, stride, wm, wn, lane, bofs, aofs);

  float acc[2][NTW][4];
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int nt = 0; nt < NTW; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0.f;

  const int n_chunks = OP::ci_pad(c) / CKC;
  uint32_t amax = 0; /* OP::SAT: the largest |staged fp16 operand| of this thread, f16x2 bits */
  /* the strip columns of this thread: tid and tid + NT; strips of up to CPT NT columns are
   * prefetched into registers (always so when !OP::GENERAL: the launcher's condition) */
  constexpr int CPT = NTW == 8 ? 2 : 1;
  const bool fast = !OP::GENERAL || SL <= CPT * NT;
  const bool mean3 = M3 && act == COSY_HACT_MEAN3_LEAKY;
  bool col_ok[CPT];
  int uu_col[CPT];
#pragma unroll
  for (int q = 0; q < CPT; q++) {
    const int col = tid + q * NT;
    const long long u = ubase + col;
    col_ok[q] = fast && col < SL && u >= 0 && u < Lu;
    uu_col[q] = col_ok[q] ? (c.up == 1 ? (int)u : (int)(u / c.up)) : 0;
  }
  constexpr int M3R = M3 ? CKC : 1;
  float pv[CPT][CKC], pv2[M3R], pv3[M3R];
  auto prefetch = [&](int chunk) {
    const int ci0 = chunk * CKC;
#pragma unroll
    for (int r = 0; r < CKC; r++) {
      const int ci = ci0 + r;
      const float *row = c.in + (size_t)ci * (size_t)c.ld_in;
      const size_t off = (size_t)ci * (size_t)c.ld_in; /* M3: in2, in3 */
#pragma unroll
      for (int q = 0; q < CPT; q++) pv[q][r] = col_ok[q] && ci < c.ci ? row[uu_col[q]] : 0.f;
      if (M3) {
        const bool ok = mean3 && col_ok[0] && ci < c.ci;
        pv2[M3 ? r : 0] = ok ? c.in2[off + uu_col[0]] : 0.f;
        pv3[M3 ? r : 0] = ok ? c.in3[off + uu_col[0]] : 0.f;
      }
    }
  };
  /* the weights: this thread's row m = tid / 2, 16-byte half tid % 2 (channels CKC / 2 half ..)
   * of every tap */
  constexpr int W16 = 16 / (int)sizeof(W); /* weights per 16 bytes */
  const int wm_row = tid >> 1, whalf = tid & 1;
  const W *const wsrc =
      OP::weights(c) + (size_t)(co0 + wm_row) * (size_t)OP::ci_pad(c) + (size_t)(whalf * W16);
  const size_t wtap = (size_t)c.co_pad * (size_t)OP::ci_pad(c);
  const int wdst = sw_off(wm_row, whalf);
  /* taps [j0, j1) of `chunk` into the slab from its row 0, one commit group */
  auto load_w = [&](int chunk, int j0, int j1) {
    const W *src = wsrc + (size_t)chunk * CKC + (size_t)j0 * wtap;
    float *d = sW + wdst;
    for (int j = j0; j < j1; j++, src += wtap, d += BM * CK) cp_async16(d, src);
    cp_async_commit();
  };
  auto stage = [&](int chunk) {
    const int ci0 = chunk * CKC;
    if (fast) {
#pragma unroll
      for (int q = 0; q < CPT; q++) {
        const int col = tid + q * NT;
        if (col < SL) {
          /* the activation chosen once per column, not per value (the same operations) */
          float v[CKC];
          if (act == COSY_HACT_NONE) {
#pragma unroll
            for (int r = 0; r < CKC; r++) v[r] = OP::round(pv[q][r]);
          } else if (act == COSY_HACT_LEAKY) {
#pragma unroll
            for (int r = 0; r < CKC; r++)
              v[r] = OP::round(pv[q][r] > 0.f ? pv[q][r] : __fmul_rn(pv[q][r], c.slope));
          } else {
#pragma unroll
            for (int r = 0; r < CKC; r++) {
              const int ci = ci0 + r;
              v[r] = OP::round(apply_act<OP::FAST_SNAKE>(c, act, ci, ci < c.ci, pv[q][r],
                                         M3 ? pv2[M3 ? r : 0] : 0.f, M3 ? pv3[M3 ? r : 0] : 0.f));
            }
          }
          OP::put_col(sX + col * XS, v, amax);
        }
      }
    } else { /* OP::GENERAL only: the long strips, a loop over the columns */
      for (int col = tid; col < SL; col += NT) {
        const long long u = ubase + col;
        const bool ok = u >= 0 && u < Lu;
        const int uu = ok ? (c.up == 1 ? (int)u : (int)(u / c.up)) : 0;
        float v[CKC];
#pragma unroll
        for (int r = 0; r < CKC; r++) {
          const int ci = ci0 + r;
          v[r] = OP::round(ok && ci < c.ci ? load_act<OP::FAST_SNAKE>(c, act, ci, uu) : 0.f);
        }
        OP::put_col(sX + col * XS, v, amax);
      }
    }
  };
  const int dxs = dil * XS;
  /* taps [j0, j1): the slab holds them from its row 0 */
  auto mma_taps = [&](int j0, int j1) {
    conv2_mma_taps<OP, NTW>(acc, sW, sX, j0, j1, dxs, aofs, bofs);
  };

  const int kt1 = KT < K ? KT : K;
  if (fast) prefetch(0);
  for (int chunk = 0; chunk < n_chunks; chunk++) {
    load_w(chunk, 0, kt1);
    stage(chunk);
    if (fast && chunk + 1 < n_chunks) prefetch(chunk + 1);
    cp_async_wait<0>();
    __syncthreads();
    if (!OP::GENERAL) { /* the slab holds all K taps */
      mma_taps(0, K);
      __syncthreads(); /* the slab and the strip may be overwritten */
    } else {
      for (int j0 = 0;;) { /* tap groups (one when the slab holds all K taps) */
        const int j1 = j0 + kt1 < K ? j0 + kt1 : K;
        mma_taps(j0, j1);
        __syncthreads(); /* the slab (and, after the last group, the strip) may be overwritten */
        j0 = j1;
        if (j0 >= K) break;
        load_w(chunk, j0, j0 + kt1 < K ? j0 + kt1 : K);
        cp_async_wait<0>();
        __syncthreads();
      }
    }
  }

  /* OP::SAT: a staged operand at fp16's largest magnitude 0x7bff = 65504 (an activation beyond
   * it, saturated there, +-inf included; or one in (65488, 65504] that rounds to it) flags the
   * conv (c.sat: its job's int, kernels_hift.h); a plain store of 1 by any thread that saw one */
  if (OP::SAT && ((amax & 0xffffu) >= 0x7bffu || (amax >> 16) >= 0x7bffu) && c.sat) *c.sat = 1;
  store_tile<NTW, OP::FAST_SNAKE>(c, acc, co0, t0, wm, wn, g, tq, OP::out_scale(c));
}

/* ---- the staged kernel (conv3: fp16 operands from a pre-staged input) ------------------------ */

/* conv3_kernel<NTW, S>: conv2_kernel<OpF16, NTW> with its input staged beforehand. conv2 builds
 * each chunk's strip from fp32 global loads in registers, the activation (leaky ReLU, Snake with
 * an accurate sinf, the mean of three) and the fp16 conversion, between two barriers, once per
 * block that reads the column: in a block of 4 warps that work leaves the tensor cores idle, and
 * the Snake convs ran at 3-4% of their rate (docs/kernels.md). Here a first kernel
 * (conv_stage_f16_kernel) computes every activated input value once, in fp32 with conv2's
 * operations, rounds it to fp16 exactly as conv2 does (cvt.rn.satfinite; the saturation flag
 * there) and writes it time-major, xh[u][ci] (ci padded to 16 with zeros), so that the 16
 * channels of a chunk at one input step are 32 contiguous bytes: a strip column is two 16-byte
 * cp.async, the zero columns (before the input, past its end) two zero-filling ones. The conv
 * then runs a ring of S shared-memory stages (each a weight slab of all k taps and a strip, the
 * layouts of conv2: slab rows of 32 bytes with halves swapped in every other group of 4, strip
 * columns at a 48-byte pitch): chunk c + S - 1 is copied while chunk c is multiplied, one
 * barrier a chunk, and each thread only issues copies and the tap loop (ldmatrix + mma, conv2's
 * code). The products and their order per output are conv2's (chunk of 16 channels outer, tap
 * inner, the same fp16 operands), so the values are bit-identical to conv2_kernel<OpF16>'s
 * (tests/test_gpu_hift.c test_kernel_conv_f16). Handles launches whose slabs hold all k taps
 * and whose strips have at most CONV3_MAXCOL columns; the rest run conv2. */
constexpr int CONV3_MAXCOL = 320;
constexpr int CONV3_CPT = (2 * CONV3_MAXCOL + NT - 1) / NT; /* strip copies per thread */
constexpr int STG_T = 128;                                  /* prep kernel: time steps a block */

__device__ __forceinline__ void cp_async16_zero(void *smem, const void *gmem) {
  const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, 0;\n" ::"r"(sa), "l"(gmem));
}

/* conv_stage_f16_kernel: xh[u][ci0 .. ci0 + 15] of conv blockIdx.z for u = blockIdx.x STG_T +
 * threadIdx.x, ci0 = 16 blockIdx.y: the 16 values of load_act (conv2's activation; 0 for padded
 * channels), packed as conv2's put_col packs them; the saturation flag as conv2 sets it */
__global__ void __launch_bounds__(STG_T) conv_stage_f16_kernel(const __grid_constant__ ConvGroup grp) {
  const cosy_hift_conv &c = grp.c[blockIdx.z];
  const int u = (int)(blockIdx.x * STG_T + threadIdx.x);
  const int ci0 = (int)blockIdx.y * CKH;
  const int cip = (c.ci + CKH - 1) / CKH * CKH;
  if (u >= c.len_in || ci0 >= cip) return;
  uint32_t p[CKH / 2];
#pragma unroll
  for (int r = 0; r < CKH / 2; r++) {
    const int a = ci0 + 2 * r, b = a + 1;
    const float lo = a < c.ci ? load_act<true>(c, c.act, a, u) : 0.f;
    const float hi = b < c.ci ? load_act<true>(c, c.act, b, u) : 0.f;
    p[r] = pack_f16x2(lo, hi);
  }
  uint4 *d = reinterpret_cast<uint4 *>(c.xh + (size_t)u * (size_t)cip + (size_t)ci0);
  d[0] = make_uint4(p[0], p[1], p[2], p[3]);
  d[1] = make_uint4(p[4], p[5], p[6], p[7]);
  __half2 m = u32_h2(0u);
#pragma unroll
  for (int r = 0; r < CKH / 2; r++) m = __hmax2(m, __habs2(u32_h2(p[r])));
  const uint32_t amax = h2_u32(m);
  if (((amax & 0xffffu) >= 0x7bffu || (amax >> 16) >= 0x7bffu) && c.sat) *c.sat = 1;
}

template <int NTW, int S>
__global__ void __launch_bounds__(NT, NTW == 8 ? 2 : 4)
    conv3_kernel(const __grid_constant__ ConvGroup grp) {
  constexpr int BN2 = 16 * NTW;
  const cosy_hift_conv &c = grp.c[blockIdx.z];
  const int t0 = blockIdx.x * BN2;
  const int co0 = blockIdx.y * BM;
  if (t0 >= c.n_out || co0 >= c.co) return;

  extern __shared__ float4 smem_raw[];
  const int K = c.k, dil = c.dil, stride = c.stride;
  const int SL = conv2_strip_len(NTW, K, dil, stride);
  const int stage_floats = K * BM * CK + SL * XS;
  float *const smem = reinterpret_cast<float *>(smem_raw);

  const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1;
  const int g = lane >> 2, tq = lane & 3;
  const int cip = (c.ci + CKH - 1) / CKH * CKH;

  const int p0 = c.reflect ? t0 - 1 : t0;
  const long long ubase = (long long)p0 * stride - c.pad_left;
  const long long Lu = (long long)c.len_in * c.up;

  int bofs[NTW / 2], aofs[2];
  conv2_frag_offsets<NTW>(c, t0, stride, wm, wn, lane, bofs, aofs);

  float acc[2][NTW][4];
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int nt = 0; nt < NTW; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0.f;

  /* this thread's strip copies i = tid + q NT (column i / 2, 16-byte half i % 2): the source
   * row (input step) of each, or -1 for a zero column, fixed for every chunk */
  int srow[CONV3_CPT];
#pragma unroll
  for (int q = 0; q < CONV3_CPT; q++) {
    const int i = tid + q * NT, col = i >> 1;
    const long long u = ubase + col;
    srow[q] = col < SL && u >= 0 && u < Lu ? (c.up == 1 ? (int)u : (int)(u / c.up)) : -1;
  }
  const int wm_row = tid >> 1, whalf = tid & 1;
  const uint16_t *const wsrc = c.wh + (size_t)(co0 + wm_row) * (size_t)cip + (size_t)(whalf * 8);
  const size_t wtap = (size_t)c.co_pad * (size_t)cip;
  const int wdst = sw_off(wm_row, whalf);
  const int n_chunks = cip / CKH;

  auto issue = [&](int chunk, int buf) {
    float *const sW = smem + buf * stage_floats;
    float *const sX = sW + K * BM * CK;
    const uint16_t *src = wsrc + (size_t)chunk * CKH;
    float *d = sW + wdst;
    for (int j = 0; j < K; j++, src += wtap, d += BM * CK) cp_async16(d, src);
#pragma unroll
    for (int q = 0; q < CONV3_CPT; q++) {
      const int i = tid + q * NT, col = i >> 1;
      if (col < SL) {
        float *dx = sX + col * XS + (i & 1) * 4;
        if (srow[q] >= 0)
          cp_async16(dx, c.xh + (size_t)srow[q] * (size_t)cip + (size_t)(chunk * CKH + (i & 1) * 8));
        else
          cp_async16_zero(dx, c.xh);
      }
    }
  };
  const int dxs = dil * XS;

#pragma unroll
  for (int s = 0; s < S - 1; s++) {
    if (s < n_chunks) issue(s, s);
    cp_async_commit();
  }
  for (int chunk = 0; chunk < n_chunks; chunk++) {
    cp_async_wait<S - 2>();
    __syncthreads(); /* chunk's stage is in; every warp is done with chunk - 1's */
    const int nc = chunk + S - 1;
    if (nc < n_chunks) issue(nc, nc % S);
    cp_async_commit();
    const float *ws = smem + (chunk % S) * stage_floats;
    conv2_mma_taps<OpF16, NTW>(acc, ws, ws + K * BM * CK, 0, K, dxs, aofs, bofs);
  }
  cp_async_wait<0>();
  store_tile<NTW, true>(c, acc, co0, t0, wm, wn, g, tq, c.wh_scale);
}

/* ---- fp64 F0 predictor --------------------------------------------------------------------- */

/* GEMM view as the TF32 kernel: M = co, N = time, K = (ci, tap); one k4 step = 4 input channels
 * at one tap. Block: 128 threads = 4 warps in a 2 (co) x 2 (time) grid, warp tile 16 co x 16
 * time = 2 x 2 mma m8n8k4 (fp64 tensor cores), block tile 32 co x 32 time; 16 input channels per
 * shared-memory chunk, the next chunk's global loads issued into registers before the current
 * chunk's mma (software pipelining: the loads' latency hides behind the math). Fragments (PTX
 * m8n8k4 .f64): a0 = A[g][q], b0 = B[q][g], c = C[g][2q], C[g][2q+1] with g = lane / 4,
 * q = lane % 4. Shared rows are padded (weights 20 doubles, strip pitch = 4 mod 16) so that each
 * half-warp's 64-bit loads hit distinct banks. */
constexpr int F_BM = 32, F_BT = 32, F_CK = 16, F_NT = 128, F_MAXK = 4;
constexpr int F_WP = F_CK + 4;                                 /* 20 */
constexpr int F_SL = F_BT + F_MAXK - 1;                        /* 35 */
constexpr int F_SP = ((F_SL + 15) / 16) * 16 + 4;              /* 52 */
constexpr int F_WREG = (F_MAXK * F_BM * F_CK + F_NT - 1) / F_NT; /* 16 weights per thread */
constexpr int F_XREG = (F_CK * F_SL + F_NT - 1) / F_NT;          /* 5 inputs per thread */

__device__ __forceinline__ double ld_d(const float *p) { return (double)*p; }
__device__ __forceinline__ double ld_d(const double *p) { return *p; }

__device__ __forceinline__ void mma_f64(double (&c)[2], double a, double b) {
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
               : "+d"(c[0]), "+d"(c[1])
               : "d"(a), "d"(b));
}

/* the block (blockIdx.x: time tile, blockIdx.y: channel tile) of one conv; the single and the
 * grouped kernel run this same code, so a job's values do not depend on which launched it */
template <typename TI>
__device__ __forceinline__ void conv64_block(const TI *__restrict__ in, int ld_in, int len_in,
                                             int ci_n, const float *__restrict__ w,
                                             const float *__restrict__ bias, int co_n, int K,
                                             int P, double *__restrict__ out, int ld_out,
                                             int n_out) {
  __shared__ double sW[F_MAXK][F_BM][F_WP];
  __shared__ double sX[F_CK][F_SP];
  const int t0 = blockIdx.x * F_BT, co0 = blockIdx.y * F_BM;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1, g = lane >> 2, q = lane & 3;
  const int SL = F_BT + K - 1, nw = K * F_BM * F_CK, nx = F_CK * SL;
  double acc[2][2][2];
#pragma unroll
  for (int mt = 0; mt < 2; mt++) {
    const int co = co0 + wm * 16 + mt * 8 + g;
    const double b = co < co_n ? (double)bias[co] : 0.0;
#pragma unroll
    for (int nt = 0; nt < 2; nt++) acc[mt][nt][0] = acc[mt][nt][1] = b;
  }
  float wr[F_WREG];
  double xr[F_XREG];
  /* element i of the weight chunk: (j, m, r) with r fastest; of the strip: (r, col) */
  auto load = [&](int ci0) {
#pragma unroll
    for (int it = 0; it < F_WREG; it++) {
      const int i = tid + it * F_NT;
      const int r = i % F_CK, rest = i / F_CK, m = rest % F_BM, j = rest / F_BM;
      const int co = co0 + m, ci = ci0 + r;
      wr[it] = (i < nw && co < co_n && ci < ci_n) ? w[((size_t)co * ci_n + ci) * K + j] : 0.0f;
    }
#pragma unroll
    for (int it = 0; it < F_XREG; it++) {
      const int i = tid + it * F_NT;
      const int r = i / SL, col = i - r * SL;
      const int ci = ci0 + r, u = t0 + col - P;
      xr[it] = (i < nx && ci < ci_n && u >= 0 && u < len_in) ? ld_d(in + (size_t)ci * ld_in + u)
                                                             : 0.0;
    }
  };
  load(0);
  for (int ci0 = 0; ci0 < ci_n; ci0 += F_CK) {
#pragma unroll
    for (int it = 0; it < F_WREG; it++) {
      const int i = tid + it * F_NT;
      if (i < nw) {
        const int r = i % F_CK, rest = i / F_CK, m = rest % F_BM, j = rest / F_BM;
        sW[j][m][r] = (double)wr[it];
      }
    }
#pragma unroll
    for (int it = 0; it < F_XREG; it++) {
      const int i = tid + it * F_NT;
      if (i < nx) sX[i / SL][i % SL] = xr[it];
    }
    __syncthreads();
    if (ci0 + F_CK < ci_n) load(ci0 + F_CK); /* in flight during the mma below */
    for (int j = 0; j < K; j++)
#pragma unroll
      for (int ks = 0; ks < F_CK / 4; ks++) {
        double a[2], b[2];
#pragma unroll
        for (int mt = 0; mt < 2; mt++) a[mt] = sW[j][wm * 16 + mt * 8 + g][ks * 4 + q];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) b[nt] = sX[ks * 4 + q][wn * 16 + nt * 8 + g + j];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
          for (int nt = 0; nt < 2; nt++) mma_f64(acc[mt][nt], a[mt], b[nt]);
      }
    __syncthreads();
  }
#pragma unroll
  for (int mt = 0; mt < 2; mt++) {
    const int co = co0 + wm * 16 + mt * 8 + g;
    if (co >= co_n) continue;
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int t = t0 + wn * 16 + nt * 8 + 2 * q + e;
        if (t >= n_out) continue;
        const double v = acc[mt][nt][e];
        out[(size_t)co * ld_out + t] = v > 0.0 ? v : expm1(v);
      }
  }
}

template <typename TI>
__global__ void __launch_bounds__(F_NT)
conv64_kernel(const TI *__restrict__ in, int ld_in, int len_in, int ci_n,
              const float *__restrict__ w, const float *__restrict__ bias, int co_n, int K, int P,
              double *__restrict__ out, int ld_out, int n_out) {
  conv64_block<TI>(in, ld_in, len_in, ci_n, w, bias, co_n, K, P, out, ld_out, n_out);
}

/* the grouped launch: one job per blockIdx.z, the layer's weights shared; blocks past a job's
 * last time tile (the grid is sized for the longest job) return at once */
constexpr int F_MAXG = COSY_HCONV64_MAXG;
struct F0ConvJob {
  const void *in; /* const float * or const double *: the kernel's TI */
  double *out;
  int ld_in, len_in, ld_out, n_out;
};
struct F0ConvGroup {
  const float *w, *bias;
  int ci, co, K, P;
  F0ConvJob j[F_MAXG];
};
/* passed by value as a __grid_constant__ kernel parameter: stay within the classic 4 KB */
static_assert(sizeof(F0ConvGroup) <= 4000, "F0ConvGroup exceeds the kernel parameter space");

template <typename TI>
__global__ void __launch_bounds__(F_NT) conv64_group_kernel(const __grid_constant__ F0ConvGroup g) {
  const F0ConvJob &jb = g.j[blockIdx.z];
  if ((int)blockIdx.x * F_BT >= jb.n_out) return; /* the whole block: before any barrier */
  conv64_block<TI>(static_cast<const TI *>(jb.in), jb.ld_in, jb.len_in, g.ci, g.w, g.bias, g.co,
                   g.K, g.P, jb.out, jb.ld_out, jb.n_out);
}

/* classifier: block = 32 time steps x 8 channel slices; slice partial sums (channels ascending)
 * in shared memory, added in slice order */
constexpr int C_T = 32, C_S = 8;

__device__ __forceinline__ void f0_classify_block(const double *__restrict__ h, int ld_h, int c_n,
                                                  const float *__restrict__ w, double b,
                                                  float *__restrict__ f0, int n) {
  __shared__ double part[C_S][C_T];
  const int tl = threadIdx.x % C_T, sl = threadIdx.x / C_T;
  const int t = blockIdx.x * C_T + tl;
  const int per = (c_n + C_S - 1) / C_S;
  const int c_lo = sl * per, c_hi = c_lo + per < c_n ? c_lo + per : c_n;
  double acc = 0.0;
  if (t < n)
    for (int c = c_lo; c < c_hi; c++)
      acc = __dadd_rn(acc, __dmul_rn((double)w[c], h[(size_t)c * ld_h + t]));
  part[sl][tl] = acc;
  __syncthreads();
  if (sl == 0 && t < n) {
    double s = b;
    for (int k = 0; k < C_S; k++) s = __dadd_rn(s, part[k][tl]);
    f0[t] = (float)fabs(s);
  }
}

__global__ void __launch_bounds__(C_T * C_S)
f0_classify_kernel(const double *__restrict__ h, int ld_h, int c_n, const float *__restrict__ w,
                   double b, float *__restrict__ f0, int n) {
  f0_classify_block(h, ld_h, c_n, w, b, f0, n);
}

struct F0ClsJob {
  const double *h;
  float *f0;
  int ld_h, n;
};
struct F0ClsGroup {
  const float *w;
  double b;
  int c;
  F0ClsJob j[F_MAXG];
};
static_assert(sizeof(F0ClsGroup) <= 4000, "F0ClsGroup exceeds the kernel parameter space");

__global__ void __launch_bounds__(C_T * C_S)
f0_classify_group_kernel(const __grid_constant__ F0ClsGroup g) {
  const F0ClsJob &jb = g.j[blockIdx.y];
  if ((int)blockIdx.x * C_T >= jb.n) return; /* the whole block: before the barrier */
  f0_classify_block(jb.h, jb.ld_h, g.c, g.w, g.b, jb.f0, jb.n);
}

int g_conv_split = 0; /* cosy_hift_conv_tuning: 0 auto, 1 never split, 2 always split */

/* The engine's conv kernel (cosy_hift_conv_kernel): COSY_HCONV_K_OLD (conv_tc_kernel), one of
 * the conv2_kernel variants (W128, W64) or the per-launch choice between them (AUTO). THE DEFAULT
 * IS THIS ONE LINE. The values are the same bits either way (tests/test_gpu_hift.c
 * test_kernel_conv2), so the choice is one of speed only. */
int g_conv_kernel = COSY_HCONV_K_AUTO;

/* COSY_HCONV_K_AUTO: the 64 x 128 tiles from this many blocks per SM (3 fit one), below it the
 * 64 x 64 ones (twice the blocks: a launch of a few short convs fills more SMs) */
constexpr int CONV2_AUTO_BLOCKS = 2;

template <class OP, int NTW, bool M3> cudaError_t allow_smem2(int bytes) {
  return cudaFuncSetAttribute(conv2_kernel<OP, NTW, M3>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
template <int NTW> cudaError_t allow_smem2_all(int bytes) {
  cudaError_t e = allow_smem2<OpTf32<COSY_HPREC_TF32>, NTW, false>(bytes);
  return e ? e : allow_smem2<OpTf32<COSY_HPREC_TF32_ROUNDED>, NTW, false>(bytes);
}
template <int NTW>
cudaError_t launch_conv2(cudaStream_t s, const ConvGroup &grp, int prec, dim3 grid, size_t smem) {
  if (prec == COSY_HPREC_TF32_ROUNDED)
    conv2_kernel<OpTf32<COSY_HPREC_TF32_ROUNDED>, NTW, false><<<grid, NT, smem, s>>>(grp);
  else
    conv2_kernel<OpTf32<COSY_HPREC_TF32>, NTW, false><<<grid, NT, smem, s>>>(grp);
  return cudaGetLastError();
}
/* the tile width of a conv2 variant (n tiles of 8 time steps per warp) */
inline int conv2_ntw(int which) { return which == COSY_HCONV_K_W64 ? 4 : 8; }

template <int PREC, int KS, bool M3>
cudaError_t launch_conv(cudaStream_t s, const ConvGroup &grp, dim3 grid, int region_floats) {
  const size_t smem = (size_t)KS * region_floats * sizeof(float);
  conv_tc_kernel<PREC, KS, M3><<<grid, NT * KS, smem, s>>>(grp, region_floats);
  return cudaGetLastError();
}

template <int PREC>
cudaError_t launch_prec(cudaStream_t s, const ConvGroup &grp, dim3 grid, int reg, int split,
                        bool m3) {
  if (split)
    return m3 ? launch_conv<PREC, 2, true>(s, grp, grid, reg)
              : launch_conv<PREC, 2, false>(s, grp, grid, reg);
  return m3 ? launch_conv<PREC, 1, true>(s, grp, grid, reg)
            : launch_conv<PREC, 1, false>(s, grp, grid, reg);
}

template <int PREC, int KS, bool M3> cudaError_t allow_smem(int bytes) {
  return cudaFuncSetAttribute(conv_tc_kernel<PREC, KS, M3>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

/* the launch of n convs on `dev`: the taps per slab of each conv, the split, the floats of one
 * warp group's region and the grid; cudaErrorInvalidValue for bad descriptors or a conv whose
 * strip and one tap do not fit the device's shared memory */
struct ConvPlan {
  int kt[MAXG];
  int split, region_floats;
  bool m3;
  dim3 grid;
  size_t smem; /* dynamic shared memory of the launch */
};

cudaError_t plan_convs(const cosy_kdev *dev, const cosy_hift_conv *convs, int n, int split_mode,
                       int prec, ConvPlan *p) {
  if (!dev || !convs || n < 1 || n > MAXG || split_mode < 0 || split_mode > 2 ||
      (prec != COSY_HPREC_TF32 && prec != COSY_HPREC_3XTF32 && prec != COSY_HPREC_TF32_ROUNDED &&
       prec != COSY_HPREC_F16))
    return cudaErrorInvalidValue;
  const size_t cap = dev->smem_block;
  const int pl = conv_planes(prec);
  int max_tiles_t = 0, max_tiles_c = 0;
  long long active_blocks = 0;
  int min_chunks = 1 << 30;
  size_t smem = 0;
  p->m3 = false;
  for (int i = 0; i < n; i++) {
    const cosy_hift_conv &c = convs[i];
    if (!c.in || (prec == COSY_HPREC_F16 ? !c.wh || !c.wh_scale : !c.wp) || c.ci < 1 ||
        c.co < 1 || c.k < 1 || c.k > MAXK ||
        c.dil < 1 || c.stride < 1 || c.up < 1 || c.pad_left < 0 || c.len_in < 0 ||
        c.n_out < 0 || c.ld_in < 1 || (c.out && c.ld_out < 1) || c.ci_pad < c.ci || c.ci_pad % CK ||
        c.co_pad < c.co || c.co_pad % BM || (c.reflect && c.stride != 1) ||
        (c.act == COSY_HACT_SNAKE && !c.alpha) ||
        (c.act == COSY_HACT_MEAN3_LEAKY && (!c.in2 || !c.in3)) || c.act < 0 || c.act > 3 ||
        (c.res && c.ld_res < 1) || (c.res2 && c.ld_res2 < 1) || (!c.out && !c.out_act) ||
        (c.out_act &&
         (c.ld_out_act < 1 || (c.oact != COSY_HACT_NONE && c.oact != COSY_HACT_SNAKE) ||
          (c.oact == COSY_HACT_SNAKE && !c.oalpha))) ||
        (long long)c.len_in * c.up > 0x7fffffffLL)
      return cudaErrorInvalidValue;
    /* the most taps per slab that fit, then as even groups as that many groups allow */
    int kt = c.k;
    if (conv_smem(c.k, c.k, c.dil, c.stride, pl) > cap) {
      const size_t strip = conv_smem(0, c.k, c.dil, c.stride, pl);
      const size_t tap = (size_t)BM * CK * sizeof(float);
      if (strip + tap > cap) return cudaErrorInvalidValue;
      const int fit = (int)((cap - strip) / tap);
      const int groups = (c.k + fit - 1) / fit;
      kt = (c.k + groups - 1) / groups;
    }
    p->kt[i] = kt;
    const size_t bytes = conv_smem(kt, c.k, c.dil, c.stride, pl);
    smem = bytes > smem ? bytes : smem;
    const int tt = (c.n_out + BN - 1) / BN, tc = (c.co + BM - 1) / BM;
    max_tiles_t = tt > max_tiles_t ? tt : max_tiles_t;
    max_tiles_c = tc > max_tiles_c ? tc : max_tiles_c;
    active_blocks += (long long)tt * tc;
    p->m3 = p->m3 || c.act == COSY_HACT_MEAN3_LEAKY;
    min_chunks = c.ci_pad / CK < min_chunks ? c.ci_pad / CK : min_chunks;
  }
  for (int i = n; i < MAXG; i++) p->kt[i] = p->kt[0];
  if (max_tiles_c > 65535) return cudaErrorInvalidValue;
  p->grid = dim3((unsigned)max_tiles_t, (unsigned)max_tiles_c, (unsigned)n);
  /* split the reduction over two warp groups when the grid leaves the SMs short of warps (the
   * stage-0 convs: 256 channels x 8 T steps), and every conv has >= 4 chunks of input channels,
   * when two regions (each at least the reduction buffer) fit the device */
  int split = split_mode == 2;
  if (split_mode == 0) split = active_blocks < 3LL * dev->n_sm && min_chunks >= 4;
  const size_t region = split && smem < RED_FLOATS * sizeof(float) ? RED_FLOATS * sizeof(float)
                                                                   : smem;
  if (split && 2 * region > cap) split = 0;
  p->split = split;
  p->region_floats = (int)((split ? region : smem) / sizeof(float));
  p->smem = (size_t)(split ? 2 : 1) * (size_t)p->region_floats * sizeof(float);
  return p->smem <= cap ? cudaSuccess : cudaErrorInvalidValue;
}

/* COSY_HCONV_K_AUTO's choice for a launch (TF32 and F16): measured on an H200
 * (bench/RESULTS.md, session of 2026-11-28 (tenth), call c; `test_kernels --bench hift`): the
 * 64 x 128 tiles won only where the input has >= 256 channels and the launch gives every SM
 * CONV2_AUTO_BLOCKS blocks of them (stage 0 of a batch: 1.1-1.5x the old kernel), the 64 x 64
 * ones everywhere else (1.0-1.25x) */
int conv2_auto(const cosy_kdev *dev, const cosy_hift_conv *convs, int n) {
  long long blocks = 0;
  int ci_max = 0;
  for (int i = 0; i < n; i++) {
    blocks += (long long)((convs[i].n_out + 127) / 128) * ((convs[i].co + BM - 1) / BM);
    ci_max = convs[i].ci > ci_max ? convs[i].ci : ci_max;
  }
  return ci_max >= 256 && blocks >= (long long)CONV2_AUTO_BLOCKS * dev->n_sm ? COSY_HCONV_K_W128
                                                                            : COSY_HCONV_K_W64;
}

/* COSY_HCONV_K_AUTO's choice for an F16 conv2 launch: conv2_auto's, and also the 64 x 128 tiles
 * where every conv's halo (k - 1) dil is at least CONV2_F16_HALO columns and the launch gives
 * every SM CONV2_AUTO_BLOCKS blocks of them (the resblocks' dilated convs at 64 and 128 channels;
 * stride 1 only). A block stages 16 NTW + halo strip columns for 16 NTW outputs, so the wider tile
 * stages fewer columns and weight slabs per output at the cost of 3 blocks an SM instead of 4: on
 * an H200 after the float2 epilogue (bench/RESULTS.md, session of 2026-11-30 (twenty-fifth), call
 * c; `test_kernels --bench hift`, 16 requests) the two tiles are even at halo 6 (k7 d1: 148.6 /
 * 149.6 us at 128 channels) and 64 x 128 is 12-14% faster at halo 50 (k11 d5: 125.8 against 146.1
 * us, 113.5 against 128.7 at 64 channels); W2 399.9 / 396.2x against 395.8 / 394.6x (call d).
 * Strided convs (the source downs) keep 64 x 64 (the k30 s15 down of 16 requests: 177.9 us at 64 x
 * 128 against 111.0). The staged launches (conv3_plan) keep conv2_auto's choice (64 x 128 was
 * slower or even there). The tile does not change the values (tests/test_gpu_hift.c
 * test_kernel_conv_f16). */
constexpr int CONV2_F16_HALO = 8;
int conv2_f16_auto(const cosy_kdev *dev, const cosy_hift_conv *convs, int n) {
  const int w = conv2_auto(dev, convs, n);
  if (w == COSY_HCONV_K_W128) return w;
  long long blocks = 0;
  int halo_min = 1 << 30;
  for (int i = 0; i < n; i++) {
    blocks += (long long)((convs[i].n_out + 127) / 128) * ((convs[i].co + BM - 1) / BM);
    const int h = convs[i].stride == 1 ? (convs[i].k - 1) * convs[i].dil : 0;
    halo_min = h < halo_min ? h : halo_min;
  }
  return halo_min >= CONV2_F16_HALO && blocks >= (long long)CONV2_AUTO_BLOCKS * dev->n_sm
             ? COSY_HCONV_K_W128
             : COSY_HCONV_K_W64;
}

/* whether the TF32 conv2_kernel variant `which` runs this launch (see conv2_kernel: what OpTf32
 * does not handle), and then its grid and shared memory */
bool conv2_plan(const cosy_kdev *dev, const cosy_hift_conv *convs, int n, int prec,
                const ConvPlan &p, int *which_io, dim3 *grid, size_t *smem) {
  int which = *which_io;
  if (which <= COSY_HCONV_K_OLD || which > COSY_HCONV_K_AUTO || p.split || p.m3 ||
      (prec != COSY_HPREC_TF32 && prec != COSY_HPREC_TF32_ROUNDED))
    return false;
  if (which == COSY_HCONV_K_AUTO) which = conv2_auto(dev, convs, n);
  const int ntw = conv2_ntw(which);
  const int max_cols = (ntw == 8 ? 2 : 1) * NT;
  size_t bytes = 0;
  int tiles = 0;
  for (int i = 0; i < n; i++) {
    const cosy_hift_conv &c = convs[i];
    if (conv2_strip_len(ntw, c.k, c.dil, c.stride) > max_cols) return false;
    const size_t b = conv2_smem(ntw, c.k, c.k, c.dil, c.stride);
    bytes = b > bytes ? b : bytes;
    const int tt = (c.n_out + 16 * ntw - 1) / (16 * ntw);
    tiles = tt > tiles ? tt : tiles;
  }
  if (bytes > dev->smem_block) return false;
  *grid = dim3((unsigned)tiles, p.grid.y, p.grid.z);
  *smem = bytes;
  *which_io = which;
  return true;
}

/* The F16 launch (conv2_kernel<OpF16, ..>; p: plan_convs' for the same convs): the tile (NTW 8
 * or 4), the taps per slab of each conv, the grid and the shared memory; false when some conv
 * cannot run in it (a strip and one tap beyond dev->smem_block even at NTW = 4). The tile follows
 * the kernel choice (COSY_HCONV_K_AUTO: conv2_f16_auto; W128: NTW 8; W64 and OLD: NTW 4); a
 * mean-of-3 input takes NTW 4 (its prefetch registers), and so does a launch whose 64 x 128
 * strips do not fit. */
bool conv2_f16_plan(const cosy_kdev *dev, const cosy_hift_conv *convs, int n, const ConvPlan &p,
                    int *ntw_out, int *kt, dim3 *grid, size_t *smem) {
  const size_t cap = dev->smem_block;
  int which = g_conv_kernel;
  if (which == COSY_HCONV_K_AUTO) which = conv2_f16_auto(dev, convs, n);
  for (int ntw = which == COSY_HCONV_K_W128 && !p.m3 ? 8 : 4; ntw >= 4; ntw -= 4) {
    size_t bytes = 0;
    int tiles = 0, ok = 1;
    for (int i = 0; i < n && ok; i++) {
      const cosy_hift_conv &c = convs[i];
      int t = c.k;
      if (conv2_smem(ntw, c.k, c.k, c.dil, c.stride) > cap) {
        const size_t strip = conv2_smem(ntw, 0, c.k, c.dil, c.stride);
        const size_t tap = (size_t)BM * CK * sizeof(float);
        if (strip + tap > cap) {
          ok = 0;
          break;
        }
        const int fit = (int)((cap - strip) / tap);
        const int groups = (c.k + fit - 1) / fit;
        t = (c.k + groups - 1) / groups;
      }
      kt[i] = t;
      const size_t b = conv2_smem(ntw, t, c.k, c.dil, c.stride);
      bytes = b > bytes ? b : bytes;
      const int tt = (c.n_out + 16 * ntw - 1) / (16 * ntw);
      tiles = tt > tiles ? tt : tiles;
    }
    if (!ok) continue;
    for (int i = n; i < MAXG; i++) kt[i] = kt[0];
    *ntw_out = ntw;
    *grid = dim3((unsigned)tiles, p.grid.y, p.grid.z);
    *smem = bytes;
    return true;
  }
  return false;
}

/* what an F16 launch runs: 1 the F16 kernel (ntw, kt, grid, smem set), 0 TF32 (every conv has
 * its fp32 weights), -1 refused; p: plan_convs(.., COSY_HPREC_F16) */
int f16_route(const cosy_kdev *dev, const cosy_hift_conv *convs, int n, const ConvPlan &p,
              int *ntw, int *kt, dim3 *grid, size_t *smem) {
  if (conv2_f16_plan(dev, convs, n, p, ntw, kt, grid, smem)) return 1;
  for (int i = 0; i < n; i++)
    if (!convs[i].wp) return -1;
  return 0;
}

/* cosy_hift_conv_staged: COSY_HCONV_STAGED_AUTO (the default: where conv3_prefer says),
 * COSY_HCONV_STAGED_ALWAYS (wherever conv3_kernel can run) or COSY_HCONV_STAGED_OFF */
int g_conv_staged = COSY_HCONV_STAGED_AUTO;

/* COSY_HCONV_STAGED_AUTO's rule: the staged kernel where every conv of the launch has a Snake or
 * mean-of-3 input, or a leaky one with the 64 x 64 tile. Measured on an H200 (bench/RESULTS.md,
 * 2026-11-29 (seventeenth), call a; `test_kernels --bench hift`, rows "f16 staged"): 1.3-3.1x
 * conv2's speed where conv2 computes a Snake (accurate sinf) or a mean of three per staged value
 * (its register staging between barriers, repeated by every block that reads a column, is then
 * what the launch waits on), 1.4x for the leaky upsampling of one request (W64), but 0.6-1.0x
 * where the input needs no activation or the leaky one runs the 64 x 128 tile (a batch's ups 0):
 * there conv2's staging is cheap, the staging kernel is an extra pass over the input and the ring
 * of stages leaves fewer blocks per SM. */
bool conv3_prefer(const cosy_hift_conv *convs, int n, int ntw) {
  for (int i = 0; i < n; i++) {
    const int a = convs[i].act;
    if (a != COSY_HACT_SNAKE && a != COSY_HACT_MEAN3_LEAKY && !(a == COSY_HACT_LEAKY && ntw == 4))
      return false;
  }
  return true;
}

/* The staged F16 launch (conv_stage_f16_kernel, then conv3_kernel<ntw, S>): every conv has its
 * xh (16-byte aligned), a strip of at most CONV3_MAXCOL columns and a slab of all k taps, and
 * the mode allows it (AUTO: conv3_prefer); the tile as conv2's choice (COSY_HCONV_K_AUTO:
 * conv2_auto; W128: NTW 8; else NTW 4), S = 3 stages where two blocks of them fit an SM, else 2
 * where they fit dev->smem_block; sgrid: the staging kernel's grid (x 0: nothing to stage) */
bool conv3_plan(const cosy_kdev *dev, const cosy_hift_conv *convs, int n, int *ntw_out,
                int *S_out, dim3 *grid, size_t *smem, dim3 *sgrid) {
  if (g_conv_staged == COSY_HCONV_STAGED_OFF) return false;
  int which = g_conv_kernel;
  if (which == COSY_HCONV_K_AUTO) which = conv2_auto(dev, convs, n);
  const int ntw = which == COSY_HCONV_K_W128 ? 8 : 4;
  if (g_conv_staged == COSY_HCONV_STAGED_AUTO && !conv3_prefer(convs, n, ntw)) return false;
  size_t b = 0;
  int tiles = 0, max_len = 0, max_cb = 0;
  for (int i = 0; i < n; i++) {
    const cosy_hift_conv &c = convs[i];
    if (!c.xh || !c.wh || ((uintptr_t)c.xh & 15) ||
        conv2_strip_len(ntw, c.k, c.dil, c.stride) > CONV3_MAXCOL)
      return false;
    const size_t st = conv2_smem(ntw, c.k, c.k, c.dil, c.stride);
    b = st > b ? st : b;
    const int tt = (c.n_out + 16 * ntw - 1) / (16 * ntw);
    tiles = tt > tiles ? tt : tiles;
    max_len = c.len_in > max_len ? c.len_in : max_len;
    const int cb = (c.ci + CKH - 1) / CKH;
    max_cb = cb > max_cb ? cb : max_cb;
  }
  int S;
  if (3 * b <= dev->smem_block && 2 * (3 * b + 1024) <= dev->smem_sm)
    S = 3;
  else if (2 * b <= dev->smem_block)
    S = 2;
  else
    return false;
  *ntw_out = ntw;
  *S_out = S;
  *smem = (size_t)S * b;
  *grid = dim3((unsigned)tiles, (unsigned)((convs[0].co + BM - 1) / BM), (unsigned)n);
  for (int i = 1; i < n; i++)
    grid->y = (unsigned)((convs[i].co + BM - 1) / BM) > grid->y
                  ? (unsigned)((convs[i].co + BM - 1) / BM)
                  : grid->y;
  *sgrid = dim3((unsigned)((max_len + STG_T - 1) / STG_T), (unsigned)max_cb, (unsigned)n);
  return true;
}

template <int NTW, int S> cudaError_t allow_smem3(int bytes) {
  return cudaFuncSetAttribute(conv3_kernel<NTW, S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              bytes);
}

cudaError_t launch_conv3(cudaStream_t s, const ConvGroup &grp, int ntw, int S, dim3 grid,
                         size_t smem, dim3 sgrid) {
  if (sgrid.x > 0) conv_stage_f16_kernel<<<sgrid, STG_T, 0, s>>>(grp);
  if (ntw == 8)
    S == 3 ? conv3_kernel<8, 3><<<grid, NT, smem, s>>>(grp)
           : conv3_kernel<8, 2><<<grid, NT, smem, s>>>(grp);
  else
    S == 3 ? conv3_kernel<4, 3><<<grid, NT, smem, s>>>(grp)
           : conv3_kernel<4, 2><<<grid, NT, smem, s>>>(grp);
  return cudaGetLastError();
}

} /* namespace */

extern "C" size_t cosy_hift_conv_xh_halves(const cosy_hift_conv *c) {
  return c && c->len_in > 0 && c->ci > 0
             ? (size_t)c->len_in * (size_t)((c->ci + CKH - 1) / CKH * CKH)
             : 0;
}

extern "C" int cosy_hift_conv_staged(int mode) {
  const int prev = g_conv_staged;
  if (mode >= COSY_HCONV_STAGED_OFF && mode <= COSY_HCONV_STAGED_ALWAYS) g_conv_staged = mode;
  return prev;
}

extern "C" int cosy_hift_conv_staged_runs(const cosy_kdev *dev, const cosy_hift_conv *convs,
                                          int n) {
  ConvPlan p;
  if (plan_convs(dev, convs, n, 1, COSY_HPREC_F16, &p) != cudaSuccess) return 0;
  int ntw, S;
  dim3 grid, sgrid;
  size_t smem;
  return conv3_plan(dev, convs, n, &ntw, &S, &grid, &smem, &sgrid) ? 1 : 0;
}

extern "C" int cosy_hift_conv_f16_runs(const cosy_kdev *dev, const cosy_hift_conv *convs, int n) {
  ConvPlan p;
  if (plan_convs(dev, convs, n, 1, COSY_HPREC_F16, &p) != cudaSuccess) return -1;
  int ntw, kt[MAXG];
  dim3 grid;
  size_t smem;
  const int r = f16_route(dev, convs, n, p, &ntw, kt, &grid, &smem);
  if (r == 0 && plan_convs(dev, convs, n, 1, COSY_HPREC_TF32, &p) != cudaSuccess) return -1;
  return r;
}

extern "C" int cosy_hift_conv_kernel(int which) {
  const int prev = g_conv_kernel;
  g_conv_kernel = which >= COSY_HCONV_K_OLD && which <= COSY_HCONV_K_AUTO ? which : prev;
  return prev;
}

extern "C" int cosy_hift_conv_kernel_for(const cosy_kdev *dev, const cosy_hift_conv *convs, int n,
                                         int prec, int split_mode) {
  ConvPlan p;
  if (plan_convs(dev, convs, n, split_mode, prec, &p) != cudaSuccess) return -1;
  dim3 grid;
  size_t smem;
  if (prec == COSY_HPREC_F16) {
    int ntw, kt[MAXG];
    const int r = f16_route(dev, convs, n, p, &ntw, kt, &grid, &smem);
    if (r < 0) return -1;
    if (r == 1) return ntw == 8 ? COSY_HCONV_K_W128 : COSY_HCONV_K_W64;
    return cosy_hift_conv_kernel_for(dev, convs, n, COSY_HPREC_TF32, split_mode);
  }
  int which = g_conv_kernel;
  return conv2_plan(dev, convs, n, prec, p, &which, &grid, &smem) ? which : COSY_HCONV_K_OLD;
}

extern "C" int cosy_hift_conv_pad(int n, int multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

extern "C" void cosy_hift_conv_pack(const float *w, int co, int ci, int k, float *wp) {
  const int cop = cosy_hift_conv_pad(co, BM), cip = cosy_hift_conv_pad(ci, CK);
  for (int j = 0; j < k; j++)
    for (int o = 0; o < cop; o++)
      for (int i = 0; i < cip; i++)
        wp[((size_t)j * cop + o) * cip + i] =
            (o < co && i < ci) ? w[((size_t)o * ci + i) * k + j] : 0.0f;
}

/* IEEE fp16 bits of x, to nearest, ties to even; beyond the largest finite value saturated to
 * +-65504 (the activations' rule), infinities and NaN kept */
static uint16_t f16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a < 0x38800000u) /* below 2^-14: a subnormal (or 1024 ulps: the smallest normal) */
    return (uint16_t)(sign | (uint16_t)rintf(fabsf(x) * 16777216.0f));
  const uint32_t r = (a + 0xfffu + ((a >> 13) & 1u)) >> 13; /* to nearest even */
  const uint32_t h = r - ((127u - 15u) << 10);
  return (uint16_t)(sign | (h >= 0x7c00u ? 0x7bffu : h));
}

extern "C" void cosy_hift_conv_pack_f16(const float *w, int co, int ci, int k, uint16_t *wh,
                                        float *wh_scale) {
  const int cop = cosy_hift_conv_pad(co, BM), cip = cosy_hift_conv_pad(ci, CKH);
  for (int o = 0; o < cop; o++) {
    int ex = 0;
    if (o < co) {
      float m = 0.f;
      for (size_t i = 0; i < (size_t)ci * k; i++) {
        const float a = fabsf(w[(size_t)o * ci * k + i]);
        m = a > m ? a : m; /* NaN is skipped */
      }
      if (m > 0.f && isfinite(m)) frexpf(m, &ex); /* m = f 2^ex, f in [0.5, 1) */
      wh_scale[o] = ldexpf(1.0f, ex);
    }
    for (int j = 0; j < k; j++)
      for (int i = 0; i < cip; i++)
        wh[((size_t)j * cop + o) * cip + i] =
            (o < co && i < ci) ? f16_bits(ldexpf(w[((size_t)o * ci + i) * k + j], -ex)) : 0;
  }
}

extern "C" void cosy_hift_tf32_round(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    if ((u & 0x7f800000u) == 0x7f800000u) continue; /* inf, NaN */
    /* add half of the dropped 13 bits' weight to the magnitude, then drop them: to nearest, ties
     * away from zero (a carry into the exponent is the correct rounding up) */
    u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x[i], &u, 4);
  }
}

extern "C" cudaError_t cosy_k_hift_conv_prepare(const cosy_kdev *dev) {
  if (!dev || dev->smem_block_hw < 48 * 1024 || dev->smem_block_hw > 0x7fffffff)
    return cudaErrorInvalidValue;
  const int b = (int)dev->smem_block_hw;
  cudaError_t e;
  if ((e = allow_smem<COSY_HPREC_TF32, 1, false>(b)) || (e = allow_smem<COSY_HPREC_TF32, 1, true>(b)) ||
      (e = allow_smem<COSY_HPREC_TF32, 2, false>(b)) || (e = allow_smem<COSY_HPREC_TF32, 2, true>(b)) ||
      (e = allow_smem<COSY_HPREC_3XTF32, 1, false>(b)) ||
      (e = allow_smem<COSY_HPREC_3XTF32, 1, true>(b)) ||
      (e = allow_smem<COSY_HPREC_3XTF32, 2, false>(b)) ||
      (e = allow_smem<COSY_HPREC_3XTF32, 2, true>(b)) ||
      (e = allow_smem<COSY_HPREC_TF32_ROUNDED, 1, false>(b)) ||
      (e = allow_smem<COSY_HPREC_TF32_ROUNDED, 1, true>(b)) ||
      (e = allow_smem<COSY_HPREC_TF32_ROUNDED, 2, false>(b)) ||
      (e = allow_smem<COSY_HPREC_TF32_ROUNDED, 2, true>(b)) || (e = allow_smem2_all<8>(b)) ||
      (e = allow_smem2_all<4>(b)) || (e = allow_smem2<OpF16, 8, false>(b)) ||
      (e = allow_smem2<OpF16, 4, false>(b)) || (e = allow_smem2<OpF16, 4, true>(b)) ||
      (e = allow_smem3<8, 2>(b)) || (e = allow_smem3<8, 3>(b)) || (e = allow_smem3<4, 2>(b)) ||
      (e = allow_smem3<4, 3>(b)))
    return e;
  return cudaSuccess;
}

extern "C" size_t cosy_k_hift_conv_plan(const cosy_kdev *dev, const cosy_hift_conv *convs, int n,
                                        int split_mode, int prec, int *kt, int *split) {
  ConvPlan p;
  if (plan_convs(dev, convs, n, split_mode, prec, &p) != cudaSuccess) return 0;
  if (prec == COSY_HPREC_F16) {
    int ntw, kth[MAXG], S;
    dim3 grid, sgrid;
    size_t smem;
    if (conv3_plan(dev, convs, n, &ntw, &S, &grid, &smem, &sgrid)) {
      for (int i = 0; kt && i < n; i++) kt[i] = convs[i].k;
      if (split) *split = 0;
      return smem;
    }
    const int r = f16_route(dev, convs, n, p, &ntw, kth, &grid, &smem);
    if (r < 0) return 0;
    if (r == 0) return cosy_k_hift_conv_plan(dev, convs, n, split_mode, COSY_HPREC_TF32, kt, split);
    for (int i = 0; kt && i < n; i++) kt[i] = kth[i];
    if (split) *split = 0;
    return smem;
  }
  for (int i = 0; kt && i < n; i++) kt[i] = p.kt[i];
  if (split) *split = p.split;
  return p.smem;
}

extern "C" cudaError_t cosy_k_hift_conv(cudaStream_t s, const cosy_kdev *dev,
                                        const cosy_hift_conv *convs, int n, int prec) {
  return cosy_k_hift_conv_split(s, dev, convs, n, prec, g_conv_split);
}

extern "C" cudaError_t cosy_k_hift_conv_split(cudaStream_t s, const cosy_kdev *dev,
                                              const cosy_hift_conv *convs, int n, int prec,
                                              int split_mode) {
  if (prec != COSY_HPREC_TF32 && prec != COSY_HPREC_3XTF32 && prec != COSY_HPREC_TF32_ROUNDED &&
      prec != COSY_HPREC_F16)
    return cudaErrorInvalidValue;
  ConvPlan p;
  cudaError_t e = plan_convs(dev, convs, n, split_mode, prec, &p);
  if (e != cudaSuccess) return e; /* includes: more shared memory than dev allows */
  if (p.grid.x == 0) return cudaSuccess;
  ConvGroup grp;
  if (prec == COSY_HPREC_F16) {
    int ntw, kt[MAXG], S;
    dim3 grid, sgrid;
    size_t smem;
    if (conv3_plan(dev, convs, n, &ntw, &S, &grid, &smem, &sgrid)) {
      for (int i = 0; i < MAXG; i++) {
        grp.c[i] = convs[i < n ? i : 0];
        grp.kt[i] = convs[i < n ? i : 0].k;
      }
      return launch_conv3(s, grp, ntw, S, grid, smem, sgrid);
    }
    const int r = f16_route(dev, convs, n, p, &ntw, kt, &grid, &smem);
    if (r < 0) return cudaErrorInvalidValue;
    if (r == 0) return cosy_k_hift_conv_split(s, dev, convs, n, COSY_HPREC_TF32, split_mode);
    for (int i = 0; i < MAXG; i++) {
      grp.c[i] = convs[i < n ? i : 0];
      grp.kt[i] = kt[i];
    }
    if (ntw == 8)
      conv2_kernel<OpF16, 8, false><<<grid, NT, smem, s>>>(grp);
    else if (p.m3)
      conv2_kernel<OpF16, 4, true><<<grid, NT, smem, s>>>(grp);
    else
      conv2_kernel<OpF16, 4, false><<<grid, NT, smem, s>>>(grp);
    return cudaGetLastError();
  }
  for (int i = 0; i < MAXG; i++) {
    grp.c[i] = convs[i < n ? i : 0];
    grp.kt[i] = p.kt[i];
  }
  dim3 grid2;
  size_t smem2;
  int which = g_conv_kernel;
  if (conv2_plan(dev, convs, n, prec, p, &which, &grid2, &smem2))
    return conv2_ntw(which) == 4 ? launch_conv2<4>(s, grp, prec, grid2, smem2)
                                 : launch_conv2<8>(s, grp, prec, grid2, smem2);
  switch (prec) {
  case COSY_HPREC_3XTF32:
    return launch_prec<COSY_HPREC_3XTF32>(s, grp, p.grid, p.region_floats, p.split, p.m3);
  case COSY_HPREC_TF32_ROUNDED:
    return launch_prec<COSY_HPREC_TF32_ROUNDED>(s, grp, p.grid, p.region_floats, p.split, p.m3);
  default:
    return launch_prec<COSY_HPREC_TF32>(s, grp, p.grid, p.region_floats, p.split, p.m3);
  }
}

extern "C" void cosy_hift_conv_tuning(int split_mode) {
  g_conv_split = split_mode >= 0 && split_mode <= 2 ? split_mode : 0;
}

extern "C" cudaError_t cosy_k_hift_conv64(cudaStream_t s, const float *in_f32,
                                          const double *in_f64, int ld_in, int len_in, int ci,
                                          const float *w, const float *bias, int co, int k,
                                          int pad_left, double *out, int ld_out, int n_out) {
  if ((!in_f32) == (!in_f64) || !w || !bias || !out || ci < 1 || co < 1 || k < 1 ||
      k > F_MAXK || pad_left < 0 || len_in < 0 || n_out < 0 || ld_in < 1 || ld_out < 1)
    return cudaErrorInvalidValue;
  if (n_out == 0) return cudaSuccess;
  dim3 grid((unsigned)((n_out + F_BT - 1) / F_BT), (unsigned)((co + F_BM - 1) / F_BM));
  if (in_f32)
    conv64_kernel<float><<<grid, F_NT, 0, s>>>(in_f32, ld_in, len_in, ci, w, bias, co, k,
                                               pad_left, out, ld_out, n_out);
  else
    conv64_kernel<double><<<grid, F_NT, 0, s>>>(in_f64, ld_in, len_in, ci, w, bias, co, k,
                                                pad_left, out, ld_out, n_out);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_hift_f0_classify(cudaStream_t s, const double *h, int ld_h, int c,
                                               const float *w, float b, float *f0, int n) {
  if (!h || !w || !f0 || c < 1 || n < 0 || ld_h < 1) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  f0_classify_kernel<<<(unsigned)((n + C_T - 1) / C_T), C_T * C_S, 0, s>>>(h, ld_h, c, w,
                                                                             (double)b, f0, n);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_hift_conv64_group(cudaStream_t s, const cosy_hift_conv64 *jobs, int n,
                                                int ci, const float *w, const float *bias, int co,
                                                int k, int pad_left) {
  if (!jobs || n < 1 || !w || !bias || ci < 1 || co < 1 || k < 1 || k > F_MAXK || pad_left < 0 ||
      (co + F_BM - 1) / F_BM > 65535)
    return cudaErrorInvalidValue;
  const bool f32 = jobs[0].in_f32 != NULL;
  for (int i = 0; i < n; i++) {
    const cosy_hift_conv64 &jb = jobs[i];
    if ((!jb.in_f32) == (!jb.in_f64) || (jb.in_f32 != NULL) != f32 || !jb.out || jb.len_in < 0 ||
        jb.n_out < 0 || jb.ld_in < 1 || jb.ld_out < 1)
      return cudaErrorInvalidValue;
  }
  for (int i0 = 0; i0 < n; i0 += F_MAXG) {
    const int m = n - i0 < F_MAXG ? n - i0 : F_MAXG;
    F0ConvGroup g;
    memset(&g, 0, sizeof g);
    g.w = w, g.bias = bias, g.ci = ci, g.co = co, g.K = k, g.P = pad_left;
    int tiles = 0;
    for (int q = 0; q < m; q++) {
      const cosy_hift_conv64 &jb = jobs[i0 + q];
      F0ConvJob &d = g.j[q];
      d.in = f32 ? (const void *)jb.in_f32 : (const void *)jb.in_f64;
      d.out = jb.out, d.ld_in = jb.ld_in, d.len_in = jb.len_in;
      d.ld_out = jb.ld_out, d.n_out = jb.n_out;
      const int tt = (jb.n_out + F_BT - 1) / F_BT;
      tiles = tt > tiles ? tt : tiles;
    }
    if (tiles == 0) continue; /* no job of this launch has an output */
    const dim3 grid((unsigned)tiles, (unsigned)((co + F_BM - 1) / F_BM), (unsigned)m);
    if (f32)
      conv64_group_kernel<float><<<grid, F_NT, 0, s>>>(g);
    else
      conv64_group_kernel<double><<<grid, F_NT, 0, s>>>(g);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

extern "C" cudaError_t cosy_k_hift_f0_classify_group(cudaStream_t s, const cosy_hift_f0cls *jobs,
                                                     int n_jobs, int c, const float *w, float b) {
  if (!jobs || n_jobs < 1 || !w || c < 1) return cudaErrorInvalidValue;
  for (int i = 0; i < n_jobs; i++)
    if (!jobs[i].h || !jobs[i].f0 || jobs[i].n < 0 || jobs[i].ld_h < 1)
      return cudaErrorInvalidValue;
  for (int i0 = 0; i0 < n_jobs; i0 += F_MAXG) {
    const int m = n_jobs - i0 < F_MAXG ? n_jobs - i0 : F_MAXG;
    F0ClsGroup g;
    memset(&g, 0, sizeof g);
    g.w = w, g.b = (double)b, g.c = c;
    int tiles = 0;
    for (int q = 0; q < m; q++) {
      const cosy_hift_f0cls &jb = jobs[i0 + q];
      g.j[q].h = jb.h, g.j[q].f0 = jb.f0, g.j[q].ld_h = jb.ld_h, g.j[q].n = jb.n;
      const int tt = (jb.n + C_T - 1) / C_T;
      tiles = tt > tiles ? tt : tiles;
    }
    if (tiles == 0) continue;
    f0_classify_group_kernel<<<dim3((unsigned)tiles, (unsigned)m), C_T * C_S, 0, s>>>(g);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
