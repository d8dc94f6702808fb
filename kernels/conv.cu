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
 * F0 predictor (fp64): the same implicit GEMM on the fp64 tensor cores (mma.sync m8n8k4),
 * 32 co x 32 time per block of 4 warps, accumulation from the bias, ELU (expm1) fused. The
 * classifier sums 8 channel slices per time step and adds them in order; |.| rounded to fp32.
 * The fp64 results differ from the CPU's sequential sums by ~1e-16 relative, which the rounding
 * of f0 to fp32 hides (f0 bit-identical in practice). */
#include <stdint.h>

#include "kcommon.cuh"
#include "kernels_hift.h"

namespace {

constexpr int BM = COSY_HCONV_BM; /* 64 output channels */
constexpr int BN = 64;            /* time steps */
constexpr int CK = COSY_HCONV_CK; /* 8 input channels per reduction step */
constexpr int NT = 128;
constexpr int WP = CK + 4; /* weight row pitch (floats): conflict-free A fragments */
constexpr int MAXG = 4;
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
      const float inv = c.alpha_inv ? c.alpha_inv[ci] : __fdiv_rn(1.0f, __fadd_rn(a, 1e-9f));
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
#pragma unroll 2
    for (int r = 0; r < CK; r++) {
      const int ci = ci0 + r;
      const bool row_ok = ci < c.ci;
      for (int col = tid; col < SL; col += NT) {
        const long long u = ubase + col;
        float v = 0.f;
        if (row_ok && u >= 0 && u < Lu) {
          const int uu = c.up == 1 ? (int)u : (int)(u / c.up);
          v = load_act(c, ci, uu);
        }
        sX[r * SLP + col] = v;
      }
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

/* GEMM view as the TF32 kernel: M = co, N = time, K = (ci, tap); one k4 step = 4 input channels
 * at one tap. Block: 128 threads = 4 warps in a 2 (co) x 2 (time) grid, warp tile 16 co x 16
 * time = 2 x 2 mma m8n8k4 (fp64 tensor cores), block tile 32 co x 32 time; 8 input channels per
 * shared-memory chunk. Fragments (PTX m8n8k4 .f64): a0 = A[g][q], b0 = B[q][g],
 * c = C[g][2q], C[g][2q+1] with g = lane / 4, q = lane % 4. Shared rows are padded (weights 12
 * doubles, strip pitch = 4 mod 16) so that each half-warp's 64-bit loads hit distinct banks. */
constexpr int F_BM = 32, F_BT = 32, F_CK = 8, F_NT = 128, F_MAXK = 4;
constexpr int F_WP = F_CK + 4;                                 /* 12 */
constexpr int F_SL = F_BT + F_MAXK - 1;                        /* 35 */
constexpr int F_SP = ((F_SL + 15) / 16) * 16 + 4;              /* 52 */

__device__ __forceinline__ double ld_d(const float *p) { return (double)*p; }
__device__ __forceinline__ double ld_d(const double *p) { return *p; }

__device__ __forceinline__ void mma_f64(double (&c)[2], double a, double b) {
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
               : "+d"(c[0]), "+d"(c[1])
               : "d"(a), "d"(b));
}

template <typename TI>
__global__ void __launch_bounds__(F_NT)
conv64_kernel(const TI *__restrict__ in, int ld_in, int len_in, int ci_n,
              const float *__restrict__ w, const float *__restrict__ bias, int co_n, int K, int P,
              double *__restrict__ out, int ld_out, int n_out) {
  __shared__ double sW[F_MAXK][F_BM][F_WP];
  __shared__ double sX[F_CK][F_SP];
  const int t0 = blockIdx.x * F_BT, co0 = blockIdx.y * F_BM;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1, g = lane >> 2, q = lane & 3;
  double acc[2][2][2];
#pragma unroll
  for (int mt = 0; mt < 2; mt++) {
    const int co = co0 + wm * 16 + mt * 8 + g;
    const double b = co < co_n ? (double)bias[co] : 0.0;
#pragma unroll
    for (int nt = 0; nt < 2; nt++) acc[mt][nt][0] = acc[mt][nt][1] = b;
  }
  const int SL = F_BT + K - 1;
  for (int ci0 = 0; ci0 < ci_n; ci0 += F_CK) {
    for (int i = tid; i < K * F_BM * F_CK; i += F_NT) {
      const int r = i % F_CK, rest = i / F_CK, m = rest % F_BM, j = rest / F_BM;
      const int co = co0 + m, ci = ci0 + r;
      sW[j][m][r] = (co < co_n && ci < ci_n) ? (double)w[((size_t)co * ci_n + ci) * K + j] : 0.0;
    }
    for (int i = tid; i < F_CK * SL; i += F_NT) {
      const int r = i / SL, col = i - r * SL;
      const int ci = ci0 + r, u = t0 + col - P;
      sX[r][col] = (ci < ci_n && u >= 0 && u < len_in) ? ld_d(in + (size_t)ci * ld_in + u) : 0.0;
    }
    __syncthreads();
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

/* classifier: block = 32 time steps x 8 channel slices; slice partial sums (channels ascending)
 * in shared memory, added in slice order */
constexpr int C_T = 32, C_S = 8;

__global__ void __launch_bounds__(C_T * C_S)
f0_classify_kernel(const double *__restrict__ h, int ld_h, int c_n, const float *__restrict__ w,
                   double b, float *__restrict__ f0, int n) {
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
  f0_classify_kernel<<<(unsigned)((n + C_T - 1) / C_T), C_T * C_S, 0, s>>>(h, ld_h, c, w,
                                                                             (double)b, f0, n);
  return cudaGetLastError();
}
