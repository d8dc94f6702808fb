/* conv.cu - the HiFT vocoder's convolutions: causal conv1d on tensor cores (fp32 storage,
 * TF32 or 3xTF32 products, fp32 accumulation) and the fp64 convs + classifier of the F0 predictor.
 *
 * Math: kernels_hift.h (cosy_hift_conv): a PyTorch Conv1d over a zero-extended input, with
 * optional nearest upsampling of the input (CausalConv1dUpsample), stride (source downs),
 * dilation (resblocks), left zeros (causal 'left' padding) or a valid length shorter than the
 * read range (the 'right' look-ahead zeros when final), ReflectionPad1d((1,0)) of the output, a
 * pre-activation fused into the input load (leaky ReLU, Snake, or the mean of three resblock
 * outputs then leaky ReLU) and up to two residual adds fused into the store.
 *
 * Implicit GEMM. out[co][t] = sum over the reduction (ci, j) of W[co][ci][j] X[ci][p(t) s + j d - P]
 * is a GEMM with M = co, N = time, K = ci * k. The weights are packed host-side as
 * wp[j][co_pad][ci_pad] so that one tap j and 8 input channels form one k8 step of
 * mma.sync.m16n8k8 (TF32 in, fp32 accumulate). The input is not expanded (no im2col): for each
 * chunk of 8 input channels a block stages the "strip" of input columns its 64 output steps read
 * under all k taps (63 stride + (k-1) dil + 1 columns), applying the pre-activation once per
 * staged value, and the B fragments of tap j read the strip at column n stride + j dil.
 *
 * Thread mapping: 128 threads = 4 warps in a 2 (co) x 2 (time) grid; each warp owns 32 co x 32
 * time steps = 2 x 4 mma tiles (32 fp32 accumulators per thread). A block computes 64 co x 64 time
 * of one conv; grid = (time tiles, co tiles, conv index) so that up to 3 independent convs
 * (the three resblocks of a stage) share one launch. Per chunk of 8 input channels: the weight
 * slab k x 64 x 8 goes to shared memory by cp.async (16 B), the strip by plain loads + the
 * activation; one barrier, k mma steps, one barrier. Shared rows are padded (weights 12 floats,
 * strip pitch = 8 mod 32) so that the fragment loads hit 32 distinct banks.
 *
 * Numerics: operands are rounded to TF32 (cvt.rna) at fragment load; in 3xTF32 mode each operand
 * is split into big = tf32(x) and small = tf32(x - big) and the product is big*small + small*big +
 * big*big, which restores fp32-level accuracy (error ~1e-6 relative) at three times the tensor
 * work. The activations use accurate sinf and IEEE division without contraction, as the CPU
 * reference writes them; the accumulation order differs from the reference (fp32 sums).
 *
 * F0 predictor (fp64): a plain tiled kernel, 32 co x 32 time per block of 128 threads, each
 * thread 2 co x 4 time steps, 16 input channels per shared-memory chunk, DFMA accumulation
 * starting from the bias; ELU (expm1) fused. The classifier sums the channels in ascending order
 * per time step (one thread per step) and rounds |.| to fp32. */
#include <stdint.h>

#include "kcommon.cuh"
#include "kernels_hift.h"

namespace {

constexpr int BM = COSY_HCONV_BM; /* 64 output channels */
constexpr int BN = 64;            /* time steps */
constexpr int CK = COSY_HCONV_CK; /* 8 input channels per reduction step */
constexpr int NT = 128;
constexpr int WP = CK + 4; /* weight row pitch (floats): conflict-free A fragments */
constexpr int MAXG = 3;
constexpr int MAXK = 32;
constexpr int SMEM_CAP = 200 * 1024;

struct ConvGroup {
  cosy_hift_conv c[MAXG];
};

__host__ __device__ inline int strip_len(int k, int dil, int stride) {
  return (BN - 1) * stride + (k - 1) * dil + 1 + 2; /* +2: the reflect column */
}
__host__ __device__ inline int strip_pitch(int sl) { return ((sl + 31) & ~31) + 8; }

__device__ __forceinline__ uint32_t tf32_bits(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
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
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
}

/* the pre-activation of input value (ci, column uu) */
__device__ __forceinline__ float load_act(const cosy_hift_conv &c, int ci, int uu) {
  const size_t off = (size_t)ci * (size_t)c.ld_in + (size_t)uu;
  float v = c.in[off];
  switch (c.act) {
    case COSY_HACT_LEAKY:
      v = v > 0.f ? v : __fmul_rn(v, c.slope);
      break;
    case COSY_HACT_SNAKE: {
      const float a = c.alpha[ci];
      const float inv = __fdiv_rn(1.0f, __fadd_rn(a, 1e-9f));
      const float sv = sinf(__fmul_rn(v, a));
      v = __fadd_rn(v, __fmul_rn(inv, __fmul_rn(sv, sv)));
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

template <int PREC>
__global__ void __launch_bounds__(NT) conv_tc_kernel(const __grid_constant__ ConvGroup grp) {
  const cosy_hift_conv &c = grp.c[blockIdx.z];
  const int t0 = blockIdx.x * BN;
  const int co0 = blockIdx.y * BM;
  if (t0 >= c.n_out || co0 >= c.co) return;

  extern __shared__ float4 smem_raw[];
  float *smem = reinterpret_cast<float *>(smem_raw);
  const int K = c.k, dil = c.dil, stride = c.stride;
  const int SL = strip_len(K, dil, stride), SLP = strip_pitch(SL);
  float *sW = smem;               /* [K][BM][WP] */
  float *sX = smem + K * BM * WP; /* [CK][SLP] */

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1;
  const int g = lane >> 2, tq = lane & 3;

  /* strip column 0 is the logical output position p0 at tap 0 */
  const int p0 = c.reflect ? t0 - 1 : t0;
  const long long ubase = (long long)p0 * stride - c.pad_left;
  const long long Lu = (long long)c.len_in * c.up;

  int colofs[4];
#pragma unroll
  for (int nt = 0; nt < 4; nt++) {
    const int n = wn * 32 + nt * 8 + g;
    colofs[nt] = (c.reflect && t0 == 0 && n == 0) ? 2 : n * stride;
  }

  float acc[2][4][4];
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0.f;

  for (int ci0 = 0; ci0 < c.ci_pad; ci0 += CK) {
    /* weight slab: K*BM rows of 8 floats, two 16-byte copies each */
    const int nW = K * BM * 2;
    for (int i = tid; i < nW; i += NT) {
      const int half = i & 1, row = i >> 1; /* row = j * BM + m */
      const int j = row / BM, m = row - j * BM;
      const float *src =
          c.wp + ((size_t)j * c.co_pad + (size_t)(co0 + m)) * c.ci_pad + ci0 + half * 4;
      cp_async16(sW + row * WP + half * 4, src);
    }
    /* input strip with the activation */
    for (int i = tid; i < CK * SL; i += NT) {
      const int r = i / SL, col = i - r * SL;
      const int ci = ci0 + r;
      const long long u = ubase + col;
      float v = 0.f;
      if (ci < c.ci && u >= 0 && u < Lu) {
        const int uu = c.up == 1 ? (int)u : (int)(u / c.up);
        v = load_act(c, ci, uu);
      }
      sX[r * SLP + col] = v;
    }
    cp_async_wait_all();
    __syncthreads();

    for (int j = 0; j < K; j++) {
      const float *w = sW + j * BM * WP;
      const float *x = sX + j * dil;
      float af[2][4], bf[4][2];
#pragma unroll
      for (int mt = 0; mt < 2; mt++) {
        const int row = wm * 32 + mt * 16 + g;
        af[mt][0] = w[row * WP + tq];
        af[mt][1] = w[(row + 8) * WP + tq];
        af[mt][2] = w[row * WP + tq + 4];
        af[mt][3] = w[(row + 8) * WP + tq + 4];
      }
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        bf[nt][0] = x[tq * SLP + colofs[nt]];
        bf[nt][1] = x[(tq + 4) * SLP + colofs[nt]];
      }
      uint32_t ab[2][4], bb[4][2];
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int e = 0; e < 4; e++) ab[mt][e] = tf32_bits(af[mt][e]);
#pragma unroll
      for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) bb[nt][e] = tf32_bits(bf[nt][e]);
      if (PREC == COSY_HPREC_3XTF32) {
        uint32_t as[2][4], bs[4][2];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
          for (int e = 0; e < 4; e++)
            as[mt][e] = tf32_bits(__fsub_rn(af[mt][e], __uint_as_float(ab[mt][e])));
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
          for (int e = 0; e < 2; e++)
            bs[nt][e] = tf32_bits(__fsub_rn(bf[nt][e], __uint_as_float(bb[nt][e])));
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
    __syncthreads();
  }

  /* epilogue: bias, residuals, store */
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int co = co0 + wm * 32 + mt * 16 + g + h * 8;
      if (co >= c.co) continue;
      const float b = c.bias ? c.bias[co] : 0.f;
#pragma unroll
      for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const int t = t0 + wn * 32 + nt * 8 + 2 * tq + e;
          if (t >= c.n_out) continue;
          float v = __fadd_rn(acc[mt][nt][h * 2 + e], b);
          if (c.res) v = __fadd_rn(v, c.res[(size_t)co * c.ld_res + t]);
          if (c.res2) v = __fadd_rn(v, c.res2[(size_t)co * c.ld_res2 + t]);
          c.out[(size_t)co * c.ld_out + t] = v;
        }
    }
}

/* ---- fp64 F0 predictor --------------------------------------------------------------------- */

constexpr int F_BM = 32, F_BT = 32, F_CK = 16, F_NT = 128, F_MAXK = 4;

__device__ __forceinline__ double ld_d(const float *p) { return (double)*p; }
__device__ __forceinline__ double ld_d(const double *p) { return *p; }

template <typename TI>
__global__ void __launch_bounds__(F_NT)
conv64_kernel(const TI *__restrict__ in, int ld_in, int len_in, int ci_n,
              const float *__restrict__ w, const float *__restrict__ bias, int co_n, int K, int P,
              double *__restrict__ out, int ld_out, int n_out) {
  __shared__ double sW[F_CK][F_MAXK][F_BM];
  __shared__ double sX[F_CK][F_BT + F_MAXK];
  const int t0 = blockIdx.x * F_BT, co0 = blockIdx.y * F_BM;
  const int tid = threadIdx.x;
  const int tco = tid >> 3; /* 0..15: channels co0 + 2 tco + {0,1} */
  const int tt = tid & 7;   /* steps t0 + tt + 8 e, e < 4 */
  double acc[2][4];
#pragma unroll
  for (int m = 0; m < 2; m++) {
    const int co = co0 + 2 * tco + m;
    const double b = co < co_n ? (double)bias[co] : 0.0;
#pragma unroll
    for (int e = 0; e < 4; e++) acc[m][e] = b;
  }
  const int SL = F_BT + K - 1;
  for (int ci0 = 0; ci0 < ci_n; ci0 += F_CK) {
    for (int i = tid; i < F_CK * K * F_BM; i += F_NT) {
      const int m = i % F_BM, rest = i / F_BM, j = rest % K, r = rest / K;
      const int co = co0 + m, ci = ci0 + r;
      sW[r][j][m] = (co < co_n && ci < ci_n) ? (double)w[((size_t)co * ci_n + ci) * K + j] : 0.0;
    }
    for (int i = tid; i < F_CK * SL; i += F_NT) {
      const int r = i / SL, col = i - r * SL;
      const int ci = ci0 + r, u = t0 + col - P;
      sX[r][col] = (ci < ci_n && u >= 0 && u < len_in) ? ld_d(in + (size_t)ci * ld_in + u) : 0.0;
    }
    __syncthreads();
    const int rmax = ci_n - ci0 < F_CK ? ci_n - ci0 : F_CK;
    for (int r = 0; r < rmax; r++)
      for (int j = 0; j < K; j++) {
        const double w0 = sW[r][j][2 * tco], w1 = sW[r][j][2 * tco + 1];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const double x = sX[r][tt + 8 * e + j];
          acc[0][e] = fma(w0, x, acc[0][e]);
          acc[1][e] = fma(w1, x, acc[1][e]);
        }
      }
    __syncthreads();
  }
#pragma unroll
  for (int m = 0; m < 2; m++) {
    const int co = co0 + 2 * tco + m;
    if (co >= co_n) continue;
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int t = t0 + tt + 8 * e;
      if (t >= n_out) continue;
      const double v = acc[m][e];
      out[(size_t)co * ld_out + t] = v > 0.0 ? v : expm1(v);
    }
  }
}

__global__ void f0_classify_kernel(const double *__restrict__ h, int ld_h, int c_n,
                                   const float *__restrict__ w, double b, float *__restrict__ f0,
                                   int n) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  double acc = b;
  for (int c = 0; c < c_n; c++)
    acc = __dadd_rn(acc, __dmul_rn((double)w[c], h[(size_t)c * ld_h + t]));
  f0[t] = (float)fabs(acc);
}

template <int PREC>
cudaError_t launch_conv(cudaStream_t s, const ConvGroup &grp, int n, dim3 grid, size_t smem) {
  static bool attr_set = false; /* benign race: every thread sets the same value */
  if (!attr_set) {
    cudaError_t e = cudaFuncSetAttribute(conv_tc_kernel<PREC>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_CAP);
    if (e != cudaSuccess) return e;
    attr_set = true;
  }
  conv_tc_kernel<PREC><<<grid, NT, smem, s>>>(grp);
  return cudaGetLastError();
}

} /* namespace */

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

extern "C" cudaError_t cosy_k_hift_conv(cudaStream_t s, const cosy_hift_conv *convs, int n,
                                        int prec) {
  if (!convs || n < 1 || n > MAXG) return cudaErrorInvalidValue;
  if (prec != COSY_HPREC_TF32 && prec != COSY_HPREC_3XTF32) return cudaErrorInvalidValue;
  ConvGroup grp;
  int max_tiles_t = 0, max_tiles_c = 0;
  size_t smem = 0;
  for (int i = 0; i < n; i++) {
    const cosy_hift_conv &c = convs[i];
    if (!c.in || !c.wp || !c.out || c.ci < 1 || c.co < 1 || c.k < 1 || c.k > MAXK ||
        c.dil < 1 || c.stride < 1 || c.up < 1 || c.pad_left < 0 || c.len_in < 0 ||
        c.n_out < 0 || c.ld_in < 1 || c.ld_out < 1 || c.ci_pad < c.ci || c.ci_pad % CK ||
        c.co_pad < c.co || c.co_pad % BM || (c.reflect && c.stride != 1) ||
        (c.act == COSY_HACT_SNAKE && !c.alpha) ||
        (c.act == COSY_HACT_MEAN3_LEAKY && (!c.in2 || !c.in3)) || c.act < 0 || c.act > 3 ||
        (c.res && c.ld_res < 1) || (c.res2 && c.ld_res2 < 1) ||
        (long long)c.len_in * c.up > 0x7fffffffLL)
      return cudaErrorInvalidValue;
    grp.c[i] = c;
    const int SL = strip_len(c.k, c.dil, c.stride);
    const size_t bytes = ((size_t)c.k * BM * WP + (size_t)CK * strip_pitch(SL)) * sizeof(float);
    if (bytes > (size_t)SMEM_CAP) return cudaErrorInvalidValue;
    smem = bytes > smem ? bytes : smem;
    const int tt = (c.n_out + BN - 1) / BN, tc = (c.co + BM - 1) / BM;
    max_tiles_t = tt > max_tiles_t ? tt : max_tiles_t;
    max_tiles_c = tc > max_tiles_c ? tc : max_tiles_c;
  }
  for (int i = n; i < MAXG; i++) grp.c[i] = convs[0];
  if (max_tiles_t == 0) return cudaSuccess;
  if (max_tiles_c > 65535) return cudaErrorInvalidValue;
  dim3 grid((unsigned)max_tiles_t, (unsigned)max_tiles_c, (unsigned)n);
  return prec == COSY_HPREC_3XTF32 ? launch_conv<COSY_HPREC_3XTF32>(s, grp, n, grid, smem)
                                   : launch_conv<COSY_HPREC_TF32>(s, grp, n, grid, smem);
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
  f0_classify_kernel<<<(unsigned)((n + 127) / 128), 128, 0, s>>>(h, ld_h, c, w, (double)b, f0, n);
  return cudaGetLastError();
}
