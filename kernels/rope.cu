/* rope.cu - rotary position embeddings, in place.
 *
 * Math
 *   NeoX / Qwen2 (rotate_half, non-interleaved), head size hd (64), theta 1e6:
 *     inv_freq[i] = 1 / theta^(2i/hd), a = pos * inv_freq[i]
 *     x1 = x[i], x2 = x[i + hd/2]  (i < hd/2)
 *     x[i] = x1 cos a - x2 sin a,   x[i + hd/2] = x2 cos a + x1 sin a
 *   Interleaved (x-transformers RotaryEmbedding + apply_rotary_pos_emb in the DiT), theta 1e4:
 *     inv_freq[i] = 1 / theta^(2i/rot_dim) (or the checkpoint's buffer), a = n * inv_freq[i] with
 *     n the frame index 0..N-1; pairs (2i, 2i+1) of the first rot_dim (64) channels of the whole
 *     1024-wide q/k row, i.e. head 0 only (the DiT applies RoPE before the head split):
 *     x[2i] = x[2i] cos a - x[2i+1] sin a,   x[2i+1] = x[2i+1] cos a + x[2i] sin a
 * Shapes: see kernels.h (strided rows so q and k can be rotated inside a fused QKV buffer).
 * Thread mapping: one thread per rotated pair: (token, head, i) for NeoX, (tensor, row, i) for the
 *   interleaved form; grid-stride loops.
 * Numerics: inv_freq is the caller's table (e.g. the DiT checkpoint's rotary_embed.inv_freq) or,
 *   when NULL, 1/theta^(2i/dim) evaluated in double and rounded once to fp32 (HF/x-transformers
 *   evaluate it in fp32 arithmetic; the two can differ by one ulp; pass a table computed the
 *   reference's way where bit-faithful angles matter). The angle is formed in fp32 as
 *   fp32(pos) * inv_freq (what HF and x-transformers do),
 *   then accurate sincosf (no fast-math intrinsics: angles reach ~3e4 rad); the rotation is fp32
 *   and rounded once at the store.
 */
#include "kcommon.cuh"

using namespace cosyk;

namespace {

constexpr int ROPE_THREADS = 256;

__device__ __forceinline__ float rope_inv_freq(const float *inv_freq, int i, int dim,
                                               float theta) {
  if (inv_freq) return inv_freq[i];
  return (float)(1.0 / pow((double)theta, (double)(2 * i) / (double)dim));
}

template <typename T>
__global__ void __launch_bounds__(ROPE_THREADS)
rope_neox_kernel(T *q, int q_stride, int n_qh, T *k, int k_stride, int n_kh,
                 const int32_t *__restrict__ pos, int n_tok, int hd, float theta,
                 const float *__restrict__ inv_freq) {
  const int half = hd / 2;
  const int nh = n_qh + n_kh;
  const int64_t total = (int64_t)n_tok * nh * half;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int i = (int)(e % half);
    const int hh = (int)((e / half) % nh);
    const int t = (int)(e / ((int64_t)half * nh));
    T *x = hh < n_qh ? q + (size_t)t * q_stride + (size_t)hh * hd
                     : k + (size_t)t * k_stride + (size_t)(hh - n_qh) * hd;
    const float a = (float)pos[t] * rope_inv_freq(inv_freq, i, hd, theta);
    float sn, cs;
    sincosf(a, &sn, &cs);
    const float x1 = ld(x + i), x2 = ld(x + i + half);
    st(x + i, x1 * cs - x2 * sn);
    st(x + i + half, x2 * cs + x1 * sn);
  }
}

template <typename T>
__global__ void __launch_bounds__(ROPE_THREADS)
rope_interleaved_kernel(T *x, T *x2, int stride, int B, int N, int rot_dim, float theta,
                        const float *__restrict__ inv_freq) {
  const int half = rot_dim / 2;
  const int nt = x2 ? 2 : 1;
  const int64_t rows = (int64_t)B * N;
  const int64_t total = rows * half * nt;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int i = (int)(e % half);
    const int64_t row = (e / half) % rows;
    const int which = (int)(e / ((int64_t)half * rows));
    const int n = (int)(row % N);
    T *p = (which ? x2 : x) + (size_t)row * stride + 2 * i;
    const float a = (float)n * rope_inv_freq(inv_freq, i, rot_dim, theta);
    float sn, cs;
    sincosf(a, &sn, &cs);
    const float a0 = ld(p), a1 = ld(p + 1);
    st(p, a0 * cs - a1 * sn);
    st(p + 1, a1 * cs + a0 * sn);
  }
}

} /* namespace */

extern "C" cudaError_t cosy_k_rope_neox(cudaStream_t s, cosy_kdtype dt, void *q, int q_stride,
                                        int n_qh, void *k, int k_stride, int n_kh,
                                        const int32_t *pos, int n_tok, int hd, float theta,
                                        const float *inv_freq) {
  if (!cosyk_dt_ok(dt) || n_tok < 0 || n_qh < 0 || n_kh < 0 || hd <= 0 || (hd & 1) || hd > 256)
    return cudaErrorInvalidValue;
  if (n_tok == 0 || n_qh + n_kh == 0) return cudaSuccess;
  if (!pos || (n_qh > 0 && (!q || q_stride < n_qh * hd)) ||
      (n_kh > 0 && (!k || k_stride < n_kh * hd)))
    return cudaErrorInvalidValue;
  if (!inv_freq && !(theta > 1.f)) return cudaErrorInvalidValue;
  const int64_t total = (int64_t)n_tok * (n_qh + n_kh) * (hd / 2);
  const unsigned blocks = cosyk_blocks(total, ROPE_THREADS, 65535u * 16u);
  COSYK_DT_CASE(dt, T, {
    rope_neox_kernel<T><<<blocks, ROPE_THREADS, 0, s>>>((T *)q, q_stride, n_qh, (T *)k, k_stride,
                                                        n_kh, pos, n_tok, hd, theta, inv_freq);
  })
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_rope_interleaved(cudaStream_t s, cosy_kdtype dt, void *x, void *x2,
                                               int stride, int B, int N, int rot_dim, float theta,
                                               const float *inv_freq) {
  if (!cosyk_dt_ok(dt) || B < 0 || N < 0 || rot_dim <= 0 || (rot_dim & 1) || stride < rot_dim)
    return cudaErrorInvalidValue;
  if ((int64_t)B * N == 0) return cudaSuccess;
  if (!x) return cudaErrorInvalidValue;
  if (!inv_freq && !(theta > 1.f)) return cudaErrorInvalidValue;
  const int64_t total = (int64_t)B * N * (rot_dim / 2) * (x2 ? 2 : 1);
  const unsigned blocks = cosyk_blocks(total, ROPE_THREADS, 65535u * 16u);
  COSYK_DT_CASE(dt, T, {
    rope_interleaved_kernel<T><<<blocks, ROPE_THREADS, 0, s>>>((T *)x, (T *)x2, stride, B, N,
                                                               rot_dim, theta, inv_freq);
  })
  return cudaGetLastError();
}
