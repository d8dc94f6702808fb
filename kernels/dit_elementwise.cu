/* dit_elementwise.cu - the DiT's fused elementwise kernels (lib/gpu/flow.c): gated residual +
 * AdaLN LayerNorm, the QKV epilogue (bias + interleaved RoPE), input-row combine, the constant
 * input rows and the PreLookahead residual/repeat (ff1's bias + GELU is its GEMM's epilogue,
 * kernels/gemm.cu cosy_k_gemm_gelu). Launchers in dit_elementwise.h.
 *
 * Math: see dit_elementwise.h (and docs/model.md section 6.3, the DiT).
 *
 * Thread mapping
 *   resid_ln: one block per (b, n) row with D/4 threads (rounded up to a warp; 256 for D 1024):
 *     thread t holds elements 4t..4t+3 in registers, so the row is read once (h, a, bias, gate,
 *     scale, shift as 16-byte loads), h written once, y written once as bf16x4. Mean, then the
 *     centred sum of squares, by block reductions (two-pass in registers).
 *   qkv_post: 8 bf16 (16 bytes) per thread, bias as two float4 loads; it rotates
 *     the 4 pairs of a thread that fall in the first rot columns of q or k (cos/sin table);
 *     qkv_post_store also writes a thread's 8 K or V values to the row's cache page slot.
 *   add_rows, pack_cond, mu: one thread per element (float4 for add_rows), grid-stride.
 * Numerics: fp32 statistics and arithmetic, bf16 outputs rounded once at the store.
 * PDL: resid_ln and qkv_post* take `pdl`; non-zero launches them as programmatic
 *   dependents of the previous kernel on the stream (cudaLaunchAttributeProgrammaticStream
 *   Serialization, sm_90; the caller passes it only where the device has it, kdevice.h), so that
 *   their launch overlaps the predecessor's tail. Each of these kernels waits (griddepcontrol.wait)
 *   as its first statement, before it reads or writes any global memory: everything it touches
 *   is then as in a plain stream-ordered launch (the predecessor complete, its writes visible,
 *   nothing of it still reading). It then lets its own dependents launch at once
 *   (launch_dependents): a dependent that waits the same way is safe by construction. In a
 *   plain launch both are no-ops.
 */
#include "dit_elementwise.h"

#include <string.h>

#include "kcommon.cuh"

using namespace cosyk;

namespace {

constexpr int EW_THREADS = 256;
constexpr unsigned EW_MAX_BLOCKS = 4096u; /* grid-stride loops: at most this many blocks */

inline bool al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* first statement of a kernel that its launcher may launch with pdl (launch_pdl, kcommon.cuh) */
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_trigger();
}

/* ------------------------------------------------------------------------------------------ */
/* gated residual + LayerNorm + AdaLN modulation                                               */

constexpr int LN_MAXD = 4096; /* one float4 per thread, <= 1024 threads */

__device__ __forceinline__ float4 ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ void st4(float *p, float4 v) { *reinterpret_cast<float4 *>(p) = v; }

template <bool HAS_A>
__global__ void __launch_bounds__(1024)
resid_ln_kernel(float *__restrict__ h, const float *__restrict__ a,
                const float *__restrict__ abias, const float *__restrict__ gate,
                const float *__restrict__ scale, const float *__restrict__ shift, int64_t mbs,
                bf16 *__restrict__ y, int N, int D, float eps) {
  pdl_enter();
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const int64_t mo = (row / N) * mbs;
  const int i = threadIdx.x * 4;
  const bool act = i < D;
  float *hr = h + row * D;
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (act) {
    v = ld4(hr + i);
    if (HAS_A) {
      const float4 g = ld4(gate + mo + i);
      float4 av = ld4(a + row * D + i);
      if (abias) {
        const float4 ab = ld4(abias + i);
        av.x += ab.x;
        av.y += ab.y;
        av.z += ab.z;
        av.w += ab.w;
      }
      v.x += g.x * av.x;
      v.y += g.y * av.y;
      v.z += g.z * av.z;
      v.w += g.w * av.w;
      st4(hr + i, v);
    }
  }
  const float mean = block_sum((v.x + v.y) + (v.z + v.w), red) / (float)D;
  const float d0 = v.x - mean, d1 = v.y - mean, d2 = v.z - mean, d3 = v.w - mean;
  const float q = act ? (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3) : 0.f;
  const float r = rsqrtf(block_sum(q, red) / (float)D + eps);
  if (act) {
    const float4 sc = ld4(scale + mo + i), sh = ld4(shift + mo + i);
    __nv_bfloat162 p0 = __floats2bfloat162_rn(d0 * r * (1.f + sc.x) + sh.x,
                                              d1 * r * (1.f + sc.y) + sh.y);
    __nv_bfloat162 p1 = __floats2bfloat162_rn(d2 * r * (1.f + sc.z) + sh.z,
                                              d3 * r * (1.f + sc.w) + sh.w);
    uint2 u;
    u.x = *reinterpret_cast<uint32_t *>(&p0);
    u.y = *reinterpret_cast<uint32_t *>(&p1);
    *reinterpret_cast<uint2 *>(y + row * D + i) = u;
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

} /* namespace */

/* ------------------------------------------------------------------------------------------ */
/* launchers                                                                                   */

extern "C" cudaError_t cosy_k_flow_resid_ln(cudaStream_t s, float *h, const float *a,
                                            const float *abias, const float *gate,
                                            const float *scale, const float *shift,
                                            int64_t mod_bstride, cosy_bf16 *y, int B, int N,
                                            int D, float eps, int pdl) {
  if (B < 0 || N < 0 || D <= 0 || D % 4 || D > LN_MAXD || mod_bstride < 0 || mod_bstride % 4 ||
      !(eps >= 0.f))
    return cudaErrorInvalidValue;
  const int64_t rows = (int64_t)B * N;
  if (rows == 0) return cudaSuccess;
  if (!h || !y || !scale || !shift || (a && !gate) || rows > 0x7fffffff) return cudaErrorInvalidValue;
  if (!al16(h) || !al16(scale) || !al16(shift) || ((uintptr_t)y & 7u) ||
      (a && (!al16(a) || !al16(gate) || (abias && !al16(abias)))))
    return cudaErrorInvalidValue;
  const int threads = ((D / 4 + 31) / 32) * 32;
  if (a)
    return launch_pdl(resid_ln_kernel<true>, dim3((unsigned)rows), threads, 0, s, pdl, h, a,
                      abias, gate, scale, shift, mod_bstride, (bf16 *)y, N, D, eps);
  return launch_pdl(resid_ln_kernel<false>, dim3((unsigned)rows), threads, 0, s, pdl, h,
                    (const float *)nullptr, (const float *)nullptr, (const float *)nullptr, scale,
                    shift, mod_bstride, (bf16 *)y, N, D, eps);
}

namespace {

/* + bias on the fused QKV rows, then interleaved RoPE on the first rot columns of q and k */
/* where qkv_post_store also writes the K and V columns of a row (KvStore.dst[row] >= 0): the
 * flow cache's page rows (kernels/flow_pack.cu kv_store, which this saves a launch and a read) */
struct KvStore {
  bf16 *pool;
  const int64_t *dst, *dev_off;
  int64_t layer_off, v_off;
};

template <bool STORE>
__global__ void __launch_bounds__(256)
qkv_post_kernel(bf16 *__restrict__ qkv, const float *__restrict__ bias,
                const float2 *__restrict__ cs, const int32_t *__restrict__ pos, int N, int D,
                int rot, int64_t total8, KvStore kv) {
  pdl_enter();
  const int per8 = 3 * D / 8;
  if (STORE && kv.dev_off) kv.layer_off += *kv.dev_off;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total8;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = e / per8;
    const int c = (int)(e % per8) * 8;
    uint4 u = reinterpret_cast<uint4 *>(qkv)[e];
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
    const float4 b0 = ld4(bias + c), b1 = ld4(bias + c + 4);
    const float bb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
    float v[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&w[j]));
      v[2 * j] = f.x + bb[2 * j];
      v[2 * j + 1] = f.y + bb[2 * j + 1];
    }
    const int cc = c < D ? c : c - D; /* column inside q or k */
    if (c < 2 * D && cc < rot) {
      const int half = rot / 2;
      const float2 *t = cs + (pos ? (int64_t)pos[row] : row % N) * half + cc / 2;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 r = t[j];
        const float a0 = v[2 * j], a1 = v[2 * j + 1];
        v[2 * j] = a0 * r.x - a1 * r.y;
        v[2 * j + 1] = a1 * r.x + a0 * r.y;
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      __nv_bfloat162 p = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
      w[j] = *reinterpret_cast<uint32_t *>(&p);
    }
    const uint4 out = make_uint4(w[0], w[1], w[2], w[3]);
    reinterpret_cast<uint4 *>(qkv)[e] = out;
    if (STORE && c >= D) {
      const int64_t o = kv.dst[row];
      if (o >= 0) {
        const int64_t col = c < 2 * D ? c - D : kv.v_off + c - 2 * D; /* K, or V after v_off */
        *reinterpret_cast<uint4 *>(kv.pool + o + kv.layer_off + col) = out;
      }
    }
  }
}

} /* namespace */

extern "C" cudaError_t cosy_k_flow_qkv_post(cudaStream_t s, cosy_bf16 *qkv, const float *bias,
                                            const float *cos_sin, int B, int N, int D,
                                            int rot_dim, int pdl) {
  if (B < 0 || N < 0 || D <= 0 || D % 8 || rot_dim < 0 || rot_dim % 8 || rot_dim > D)
    return cudaErrorInvalidValue;
  const int64_t total8 = (int64_t)B * N * 3 * D / 8;
  if (total8 == 0) return cudaSuccess;
  if (!qkv || !bias || (rot_dim && !cos_sin) || !al16(qkv) || !al16(bias) ||
      ((uintptr_t)cos_sin & 7u))
    return cudaErrorInvalidValue;
  return launch_pdl(qkv_post_kernel<false>, dim3(cosyk_blocks(total8, 256, 8192u)), 256, 0, s, pdl,
                    (bf16 *)qkv, bias, reinterpret_cast<const float2 *>(cos_sin),
                    (const int32_t *)nullptr, N, D, rot_dim, total8, KvStore{});
}

extern "C" cudaError_t cosy_k_flow_qkv_post_pos(cudaStream_t s, cosy_bf16 *qkv, const float *bias,
                                                const float *cos_sin, const int32_t *pos,
                                                int rows, int D, int rot_dim, int pdl) {
  if (rows < 0 || D <= 0 || D % 8 || rot_dim < 0 || rot_dim % 8 || rot_dim > D)
    return cudaErrorInvalidValue;
  const int64_t total8 = (int64_t)rows * 3 * D / 8;
  if (total8 == 0) return cudaSuccess;
  if (!qkv || !bias || !pos || (rot_dim && !cos_sin) || !al16(qkv) || !al16(bias) ||
      ((uintptr_t)cos_sin & 7u))
    return cudaErrorInvalidValue;
  return launch_pdl(qkv_post_kernel<false>, dim3(cosyk_blocks(total8, 256, 8192u)), 256, 0, s, pdl,
                    (bf16 *)qkv, bias, reinterpret_cast<const float2 *>(cos_sin), pos, rows, D,
                    rot_dim, total8, KvStore{});
}

extern "C" cudaError_t cosy_k_flow_qkv_post_store(cudaStream_t s, cosy_bf16 *qkv, const float *bias,
                                                  const float *cos_sin, const int32_t *pos,
                                                  int rows, int D, int rot_dim, cosy_bf16 *pool,
                                                  const int64_t *dst, int64_t layer_off,
                                                  const int64_t *dev_off, int64_t v_off,
                                                  int pdl) {
  if (rows < 0 || D <= 0 || D % 8 || rot_dim < 0 || rot_dim % 8 || rot_dim > D || layer_off < 0 ||
      layer_off % 8 || v_off < 0 || v_off % 8)
    return cudaErrorInvalidValue;
  const int64_t total8 = (int64_t)rows * 3 * D / 8;
  if (total8 == 0) return cudaSuccess;
  if (!qkv || !bias || !pos || (rot_dim && !cos_sin) || !pool || !dst || !al16(qkv) ||
      !al16(bias) || !al16(pool) || ((uintptr_t)cos_sin & 7u))
    return cudaErrorInvalidValue;
  const KvStore kv = {(bf16 *)pool, dst, dev_off, layer_off, v_off};
  return launch_pdl(qkv_post_kernel<true>, dim3(cosyk_blocks(total8, 256, 8192u)), 256, 0, s, pdl,
                    (bf16 *)qkv, bias, reinterpret_cast<const float2 *>(cos_sin), pos, rows, D,
                    rot_dim, total8, kv);
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
  add_rows_kernel<<<cosyk_blocks(total4, EW_THREADS, EW_MAX_BLOCKS), EW_THREADS, 0, s>>>(
      xp, xp_bstride, hc, h, (bf16 *)hb, per / 4, total4);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_flow_pack_cond(cudaStream_t s, float *out, const float *cond,
                                             const float *mu, const float *spk, int N, int M) {
  if (N < 0 || M <= 0) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!out) return cudaErrorInvalidValue;
  const int64_t total = (int64_t)N * 3 * M;
  pack_cond_kernel<<<cosyk_blocks(total, EW_THREADS, EW_MAX_BLOCKS), EW_THREADS, 0, s>>>(
      out, cond, mu, spk, N, M);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_flow_mu(cudaStream_t s, float *mu, const float *pre,
                                      const float *xe, int ratio, int N, int M) {
  if (N < 0 || M <= 0 || ratio <= 0) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!mu || !pre || !xe) return cudaErrorInvalidValue;
  const int64_t total = (int64_t)N * M;
  mu_kernel<<<cosyk_blocks(total, EW_THREADS, EW_MAX_BLOCKS), EW_THREADS, 0, s>>>(
      mu, pre, xe, ratio, N, M);
  return cudaGetLastError();
}
