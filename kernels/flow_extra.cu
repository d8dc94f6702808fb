/* flow_extra.cu - the flow decoder's (DiT's) own kernels: fused gated residual + AdaLN LayerNorm,
 * input-row combine, the causal grouped conv position embedding (+ Mish), the constant input
 * rows, the PreLookahead residual/repeat, and the CFG Euler step. Launchers in flow_extra.h.
 *
 * Math: see flow_extra.h (and ../shared/spec/cosyvoice3.md section 3.4).
 *
 * Thread mapping
 *   resid_ln: one warp per (b, n) row, 4 rows per 128-thread block. Lane l holds elements
 *     c*128 + 4l .. +3 (c < D/128, rounded up) in registers as float4, so the row is read once
 *     (h, a, gate, scale, shift as 16-byte loads), h written once, y written once as bf16x4.
 *     Mean, then the centred sum of squares (two passes over the registers), by warp shuffles.
 *   add_rows, pack_cond, mu, euler: one thread per element (float4 for add_rows), grid-stride.
 *   conv_pos, tensor-core path (cin = 64): implicit GEMM per group. A block of 128 threads
 *     (4 warps) computes a tile of 64 frames x 64 output channels of one group g and batch row
 *     b: out[n][o] = sum_k sum_i X[n + k][i] W_k[o][i] with X the 64 + K - 1 input rows
 *     n0 - (K-1) .. n0 + 63 of group g (zero outside [0, N)), staged once in shared memory;
 *     the K weight taps W_k [64 o][64 i] stream through a 2-stage cp.async double buffer. Warp w
 *     owns frames 16w..16w+15 and all 64 outputs: 8 m16n8 accumulators, mma.sync.m16n8k16
 *     (bf16 in, fp32 accumulate), A fragments read straight from the staged rows (row r + k for
 *     tap k), B fragments from the tap's [o][i] rows. Shared rows are padded to 72 elements
 *     (144 B = 36 words: the 8 rows x 4 word-columns of a fragment load hit 32 distinct banks).
 *     Epilogue: + bias, Mish, bf16x2 store or fp32x2 read-add-write of h.
 *   conv_pos, generic path: one thread per output element, fp32 loops over k and i.
 * Numerics: fp32 statistics and accumulation; Mish with expf/log1pf/tanhf (accurate versions);
 *   the Euler step uses explicitly rounded fp32 operations (no FMA contraction), as upstream.
 */
#include "flow_extra.h"

#include "kcommon.cuh"

using namespace cosyk;

namespace {

constexpr int EW_THREADS = 256;

__device__ __forceinline__ float mish_f(float z) { return z * tanhf(log1pf(expf(z))); }

inline bool al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* ------------------------------------------------------------------------------------------ */
/* gated residual + LayerNorm + AdaLN modulation                                               */

constexpr int LN_WARPS = 4;
constexpr int LN_MAXC = 16; /* D <= 16 * 128 */

__device__ __forceinline__ float4 ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ void st4(float *p, float4 v) { *reinterpret_cast<float4 *>(p) = v; }

template <bool HAS_A>
__global__ void __launch_bounds__(LN_WARPS * 32)
resid_ln_kernel(float *__restrict__ h, const float *__restrict__ a, const float *__restrict__ gate,
                const float *__restrict__ scale, const float *__restrict__ shift,
                int64_t mbs, bf16 *__restrict__ y, int rows, int N, int D, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int64_t b = row / N;
  float *hr = h + row * D;
  const int64_t mo = b * mbs;
  float4 v[LN_MAXC];
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < LN_MAXC; ++c) {
    const int i = c * 128 + lane * 4;
    v[c] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (i < D) {
      float4 x = ld4(hr + i);
      if (HAS_A) {
        const float4 g = ld4(gate + mo + i), av = ld4(a + row * D + i);
        x.x += g.x * av.x;
        x.y += g.y * av.y;
        x.z += g.z * av.z;
        x.w += g.w * av.w;
        st4(hr + i, x);
      }
      v[c] = x;
      s += (x.x + x.y) + (x.z + x.w);
    }
  }
  const float mean = warp_sum(s) / (float)D;
  float q = 0.f;
#pragma unroll
  for (int c = 0; c < LN_MAXC; ++c) {
    const int i = c * 128 + lane * 4;
    if (i < D) {
      const float d0 = v[c].x - mean, d1 = v[c].y - mean, d2 = v[c].z - mean, d3 = v[c].w - mean;
      q += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
    }
  }
  const float r = rsqrtf(warp_sum(q) / (float)D + eps);
  bf16 *yr = y + row * D;
#pragma unroll
  for (int c = 0; c < LN_MAXC; ++c) {
    const int i = c * 128 + lane * 4;
    if (i < D) {
      const float4 sc = ld4(scale + mo + i), sh = ld4(shift + mo + i);
      const float o0 = (v[c].x - mean) * r * (1.f + sc.x) + sh.x;
      const float o1 = (v[c].y - mean) * r * (1.f + sc.y) + sh.y;
      const float o2 = (v[c].z - mean) * r * (1.f + sc.z) + sh.z;
      const float o3 = (v[c].w - mean) * r * (1.f + sc.w) + sh.w;
      __nv_bfloat162 p0 = __floats2bfloat162_rn(o0, o1), p1 = __floats2bfloat162_rn(o2, o3);
      uint2 u;
      u.x = *reinterpret_cast<uint32_t *>(&p0);
      u.y = *reinterpret_cast<uint32_t *>(&p1);
      *reinterpret_cast<uint2 *>(yr + i) = u;
    }
  }
}

/* ------------------------------------------------------------------------------------------ */
/* elementwise                                                                                 */

__global__ void __launch_bounds__(EW_THREADS)
add_rows_kernel(const float *__restrict__ xp, int64_t xp_bs, const float *__restrict__ hc,
                float *__restrict__ h, bf16 *__restrict__ hb, int64_t per_row4, int64_t total4) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total4;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = e / per_row4, w = e % per_row4;
    const float4 x = ld4(xp + b * xp_bs + 4 * w), c = ld4(hc + 4 * e);
    const float4 o = make_float4(x.x + c.x, x.y + c.y, x.z + c.z, x.w + c.w);
    st4(h + 4 * e, o);
    __nv_bfloat162 p0 = __floats2bfloat162_rn(o.x, o.y), p1 = __floats2bfloat162_rn(o.z, o.w);
    uint2 u;
    u.x = *reinterpret_cast<uint32_t *>(&p0);
    u.y = *reinterpret_cast<uint32_t *>(&p1);
    *reinterpret_cast<uint2 *>(hb + 4 * e) = u;
  }
}

__global__ void __launch_bounds__(EW_THREADS)
pack_cond_kernel(float *__restrict__ out, const float *__restrict__ cond,
                 const float *__restrict__ mu, const float *__restrict__ spk, int N, int M) {
  const int64_t total = (int64_t)N * 3 * M;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t n = e / (3 * M);
    const int j = (int)(e % (3 * M));
    float v;
    if (j < M) v = cond ? cond[n * M + j] : 0.f;
    else if (j < 2 * M) v = mu ? mu[n * M + (j - M)] : 0.f;
    else v = spk ? spk[j - 2 * M] : 0.f;
    out[e] = v;
  }
}

__global__ void __launch_bounds__(EW_THREADS)
mu_kernel(float *__restrict__ mu, const float *__restrict__ pre, const float *__restrict__ xe,
          int ratio, int N, int M) {
  const int64_t total = (int64_t)N * M;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t n = e / M;
    const int c = (int)(e % M);
    const int64_t t = n / ratio;
    mu[e] = pre[t * M + c] + xe[t * M + c];
  }
}

__global__ void __launch_bounds__(EW_THREADS)
euler_kernel(float *__restrict__ x, const float *__restrict__ vc, const float *__restrict__ vu,
             int64_t n, float dt, float c1, float c2) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const float d = __fsub_rn(__fmul_rn(c1, vc[e]), __fmul_rn(c2, vu[e]));
    x[e] = __fadd_rn(x[e], __fmul_rn(dt, d));
  }
}

/* ------------------------------------------------------------------------------------------ */
/* conv position embedding                                                                     */

__global__ void __launch_bounds__(EW_THREADS)
conv_pos_generic_kernel(const bf16 *__restrict__ x, const bf16 *__restrict__ w,
                        const float *__restrict__ bias, bf16 *__restrict__ y,
                        float *__restrict__ h, int B, int N, int C, int G, int K) {
  const int cin = C / G;
  const int64_t total = (int64_t)B * N * C;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int c = (int)(e % C);
    const int64_t bn = e / C;
    const int n = (int)(bn % N);
    const int64_t b = bn / N;
    const int g = c / cin;
    float acc = bias[c];
    for (int k = 0; k < K; ++k) {
      const int fr = n + k - (K - 1);
      if (fr < 0) continue;
      const bf16 *xr = x + ((b * N + fr) * C + (int64_t)g * cin);
      const bf16 *wr = w + ((int64_t)c * K + k) * cin;
      for (int i = 0; i < cin; ++i) acc += ld(xr + i) * ld(wr + i);
    }
    const float m = mish_f(acc);
    if (y) st(y + e, m);
    else h[e] += m;
  }
}

constexpr int CV_CIN = 64;   /* channels per group (in = out) on the tensor-core path */
constexpr int CV_TM = 64;    /* frames per block */
constexpr int CV_LD = 72;    /* padded shared row length (elements) */
constexpr int CV_THREADS = 128;
constexpr int CV_KMAX = 64;

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
  const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int NW> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(NW));
}

__device__ __forceinline__ uint32_t lds32(const bf16 *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}

__device__ __forceinline__ void mma_bf16(float *d, uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <bool ADD>
__global__ void __launch_bounds__(CV_THREADS)
conv_pos_tc_kernel(const bf16 *__restrict__ x, const bf16 *__restrict__ w,
                   const float *__restrict__ bias, bf16 *__restrict__ y, float *__restrict__ h,
                   int N, int C, int K) {
  extern __shared__ __align__(16) unsigned char cv_smem[];
  bf16 *ws = reinterpret_cast<bf16 *>(cv_smem);       /* [2][64][CV_LD] */
  bf16 *xs = ws + 2 * CV_CIN * CV_LD;                  /* [CV_TM + K - 1][CV_LD] */
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n0 = blockIdx.x * CV_TM, g = blockIdx.y;
  const int64_t b = blockIdx.z;
  const int xrows = CV_TM + K - 1;

  /* stage the input rows n0-(K-1) .. n0+63 of group g (zeros outside [0, N)) */
  for (int idx = tid; idx < xrows * 8; idx += CV_THREADS) {
    const int r = idx >> 3, c = idx & 7;
    const int fr = n0 - (K - 1) + r;
    bf16 *dst = xs + r * CV_LD + c * 8;
    if (fr >= 0 && fr < N)
      cp_async16(dst, x + ((b * N + fr) * C + (int64_t)g * CV_CIN + c * 8));
    else
      *reinterpret_cast<uint4 *>(dst) = make_uint4(0u, 0u, 0u, 0u);
  }
  const bf16 *wg = w + (int64_t)g * CV_CIN * K * CV_CIN; /* [64 o][K][64 i] */
  auto load_tap = [&](int k, int buf) {
    bf16 *wb = ws + buf * CV_CIN * CV_LD;
    for (int idx = tid; idx < CV_CIN * 8; idx += CV_THREADS) {
      const int o = idx >> 3, c = idx & 7;
      cp_async16(wb + o * CV_LD + c * 8, wg + ((int64_t)o * K + k) * CV_CIN + c * 8);
    }
  };
  load_tap(0, 0);
  cp_async_commit();

  float acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  const int m0 = warp * 16;
  for (int k = 0; k < K; ++k) {
    if (k + 1 < K) {
      load_tap(k + 1, (k + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16 *wb = ws + (k & 1) * CV_CIN * CV_LD;
    const bf16 *xa = xs + (m0 + (lane >> 2) + k) * CV_LD + (lane & 3) * 2;
    const bf16 *wbl = wb + (lane >> 2) * CV_LD + (lane & 3) * 2;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const int c0 = ks * 16;
      const uint32_t a0 = lds32(xa + c0), a1 = lds32(xa + 8 * CV_LD + c0);
      const uint32_t a2 = lds32(xa + c0 + 8), a3 = lds32(xa + 8 * CV_LD + c0 + 8);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const bf16 *wr = wbl + nt * 8 * CV_LD + c0;
        mma_bf16(acc[nt], a0, a1, a2, a3, lds32(wr), lds32(wr + 8));
      }
    }
    __syncthreads(); /* the buffer of tap k is refilled at iteration k + 1 */
  }

  /* epilogue: bias + Mish; rows m0 + lane/4 (+8), columns nt*8 + 2*(lane%4) (+1) */
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int n = n0 + m0 + (lane >> 2) + half * 8;
    if (n >= N) continue;
    const int64_t rowoff = (b * N + n) * C + (int64_t)g * CV_CIN;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int col = nt * 8 + (lane & 3) * 2;
      const float b0 = bias[g * CV_CIN + col], b1 = bias[g * CV_CIN + col + 1];
      const float m0v = mish_f(acc[nt][half * 2] + b0), m1v = mish_f(acc[nt][half * 2 + 1] + b1);
      if (ADD) {
        float2 *hp = reinterpret_cast<float2 *>(h + rowoff + col);
        float2 cur = *hp;
        cur.x += m0v;
        cur.y += m1v;
        *hp = cur;
      } else {
        *reinterpret_cast<__nv_bfloat162 *>(y + rowoff + col) = __floats2bfloat162_rn(m0v, m1v);
      }
    }
  }
}

} /* namespace */

/* ------------------------------------------------------------------------------------------ */
/* launchers                                                                                   */

extern "C" cudaError_t cosy_k_flow_resid_ln(cudaStream_t s, float *h, const float *a,
                                            const float *gate, const float *scale,
                                            const float *shift, int64_t mod_bstride,
                                            cosy_bf16 *y, int B, int N, int D, float eps) {
  if (B < 0 || N < 0 || D <= 0 || D % 4 || D > LN_MAXC * 128 || mod_bstride < 0 ||
      mod_bstride % 4 || !(eps >= 0.f))
    return cudaErrorInvalidValue;
  const int64_t rows = (int64_t)B * N;
  if (rows == 0) return cudaSuccess;
  if (!h || !y || !scale || !shift || (a && !gate) || rows > 0x7fffffff) return cudaErrorInvalidValue;
  if (!al16(h) || !al16(y) || !al16(scale) || !al16(shift) || (a && (!al16(a) || !al16(gate))))
    return cudaErrorInvalidValue;
  const unsigned blocks = (unsigned)((rows + LN_WARPS - 1) / LN_WARPS);
  if (a)
    resid_ln_kernel<true><<<blocks, LN_WARPS * 32, 0, s>>>(h, a, gate, scale, shift, mod_bstride,
                                                           (bf16 *)y, (int)rows, N, D, eps);
  else
    resid_ln_kernel<false><<<blocks, LN_WARPS * 32, 0, s>>>(h, a, gate, scale, shift, mod_bstride,
                                                            (bf16 *)y, (int)rows, N, D, eps);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_flow_add_rows(cudaStream_t s, const float *xp, int64_t xp_bstride,
                                            const float *hc, float *h, cosy_bf16 *hb, int B,
                                            int N, int D) {
  if (B < 0 || N < 0 || D <= 0 || D % 4 || xp_bstride < 0 || xp_bstride % 4)
    return cudaErrorInvalidValue;
  const int64_t per = (int64_t)N * D;
  if ((int64_t)B * per == 0) return cudaSuccess;
  if (!xp || !hc || !h || !hb || !al16(xp) || !al16(hc) || !al16(h) || ((uintptr_t)hb & 7u))
    return cudaErrorInvalidValue;
  const int64_t total4 = (int64_t)B * per / 4;
  add_rows_kernel<<<cosyk_blocks(total4, EW_THREADS, 4096u), EW_THREADS, 0, s>>>(
      xp, xp_bstride, hc, h, (bf16 *)hb, per / 4, total4);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_flow_conv_pos(cudaStream_t s, const cosy_bf16 *x,
                                            const cosy_bf16 *w, const float *bias, cosy_bf16 *y,
                                            float *h, int B, int N, int C, int G, int K) {
  if (B < 0 || B > 65535 || N < 0 || C <= 0 || G <= 0 || C % G || K <= 0 || (!y == !h))
    return cudaErrorInvalidValue;
  if ((int64_t)B * N == 0) return cudaSuccess;
  if (!x || !w || !bias) return cudaErrorInvalidValue;
  const int cin = C / G;
  if (cin == CV_CIN && K <= CV_KMAX && al16(x) && al16(w) && G <= 65535 &&
      (y ? ((uintptr_t)y & 3u) == 0 : ((uintptr_t)h & 7u) == 0)) {
    const size_t smem = (size_t)(2 * CV_CIN + CV_TM + K - 1) * CV_LD * sizeof(bf16);
    dim3 grid((unsigned)((N + CV_TM - 1) / CV_TM), (unsigned)G, (unsigned)B);
    if (h)
      conv_pos_tc_kernel<true><<<grid, CV_THREADS, smem, s>>>((const bf16 *)x, (const bf16 *)w,
                                                               bias, nullptr, h, N, C, K);
    else
      conv_pos_tc_kernel<false><<<grid, CV_THREADS, smem, s>>>(
          (const bf16 *)x, (const bf16 *)w, bias, (bf16 *)y, nullptr, N, C, K);
    return cudaGetLastError();
  }
  const int64_t total = (int64_t)B * N * C;
  conv_pos_generic_kernel<<<cosyk_blocks(total, EW_THREADS, 65535u), EW_THREADS, 0, s>>>(
      (const bf16 *)x, (const bf16 *)w, bias, (bf16 *)y, h, B, N, C, G, K);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_flow_pack_cond(cudaStream_t s, float *out, const float *cond,
                                             const float *mu, const float *spk, int N, int M) {
  if (N < 0 || M <= 0) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!out) return cudaErrorInvalidValue;
  const int64_t total = (int64_t)N * 3 * M;
  pack_cond_kernel<<<cosyk_blocks(total, EW_THREADS, 4096u), EW_THREADS, 0, s>>>(out, cond, mu,
                                                                                  spk, N, M);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_flow_mu(cudaStream_t s, float *mu, const float *pre,
                                      const float *xe, int ratio, int N, int M) {
  if (N < 0 || M <= 0 || ratio <= 0) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!mu || !pre || !xe) return cudaErrorInvalidValue;
  const int64_t total = (int64_t)N * M;
  mu_kernel<<<cosyk_blocks(total, EW_THREADS, 4096u), EW_THREADS, 0, s>>>(mu, pre, xe, ratio, N,
                                                                           M);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_flow_euler(cudaStream_t s, float *x, const float *vc,
                                         const float *vu, int64_t n, float dt, float c1,
                                         float c2) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!x || !vc || !vu) return cudaErrorInvalidValue;
  euler_kernel<<<cosyk_blocks(n, EW_THREADS, 4096u), EW_THREADS, 0, s>>>(x, vc, vu, n, dt, c1,
                                                                          c2);
  return cudaGetLastError();
}
