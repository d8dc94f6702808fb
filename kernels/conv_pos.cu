/* conv_pos.cu - the DiT's convolutional position embedding: causal grouped Conv1d + bias + Mish
 * on frame-major rows (lib/gpu/flow.c). Launcher in conv_pos.h.
 *
 * Math: see conv_pos.h (and docs/model.md section 6.3, the DiT).
 *
 * Thread mapping
 *   tensor-core path (cin = 64): implicit GEMM per group. A block of 128 threads
 *     (4 warps) computes a tile of 64 frames x 64 output channels of one group g and batch row
 *     b: out[n][o] = sum_k sum_i X[n + k][i] W_k[o][i] with X the 64 + K - 1 input rows
 *     n0 - (K-1) .. n0 + 63 of group g (zero outside [0, N)), staged once in shared memory;
 *     the K weight taps W_k [64 o][64 i] stream through a 2-stage cp.async double buffer. Warp w
 *     owns frames 16w..16w+15 and all 64 outputs: 8 m16n8 accumulators, mma.sync.m16n8k16
 *     (bf16 in, fp32 accumulate), A fragments read straight from the staged rows (row r + k for
 *     tap k), B fragments from the tap's [o][i] rows. Shared rows are padded to 72 elements
 *     (144 B = 36 words: the 8 rows x 4 word-columns of a fragment load hit 32 distinct banks).
 *     Epilogue: + bias, Mish, bf16x2 store or fp32x2 read-add-write of h.
 *   generic path: one thread per output element, fp32 loops over k and i.
 * Numerics: fp32 accumulation; Mish with expf/log1pf/tanhf (accurate versions).
 */
#include "conv_pos.h"

#include "kcommon.cuh"

using namespace cosyk;

namespace {

constexpr int EW_THREADS = 256;         /* generic path: threads per block */
constexpr unsigned GRID_MAX = 65535u;   /* generic path: at most this many blocks (grid-stride) */
constexpr int GRID_YZ_MAX = 65535;      /* CUDA's limit of gridDim.y / gridDim.z */

__device__ __forceinline__ float mish_f(float z) { return z * tanhf(log1pf(expf(z))); }

inline bool al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

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

extern "C" cudaError_t cosy_k_flow_conv_pos(cudaStream_t s, const cosy_bf16 *x,
                                            const cosy_bf16 *w, const float *bias, cosy_bf16 *y,
                                            float *h, int B, int N, int C, int G, int K) {
  if (B < 0 || B > GRID_YZ_MAX || N < 0 || C <= 0 || G <= 0 || C % G || K <= 0 || (!y == !h))
    return cudaErrorInvalidValue;
  if ((int64_t)B * N == 0) return cudaSuccess;
  if (!x || !w || !bias) return cudaErrorInvalidValue;
  const int cin = C / G;
  if (cin == CV_CIN && K <= CV_KMAX && al16(x) && al16(w) && G <= GRID_YZ_MAX &&
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
  conv_pos_generic_kernel<<<cosyk_blocks(total, EW_THREADS, GRID_MAX), EW_THREADS, 0, s>>>(
      (const bf16 *)x, (const bf16 *)w, bias, (bf16 *)y, h, B, N, C, G, K);
  return cudaGetLastError();
}
