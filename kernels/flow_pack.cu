/* flow_pack.cu - moving rows between the flow's packed batch and its per-request cache pages.
 *
 * A batched flow call packs the frames it computes for several requests into one set of rows
 * (lib/gpu/flow.c describes the layout). Per-request state lives in fixed-size cache pages of
 * one pool: for each 50-frame block, the K and V rows of every (Euler step, layer, CFG row) and
 * the Euler state x of every step. These kernels copy rows between the two by per-row offsets
 * the host computes once per call; a negative offset means "no such row".
 *
 * Math: plain copies (and zeros); no arithmetic.
 *   x_gather:   dst[e][:] = pool[src[e] + step_off + :]   (src[e] >= 0: a cached row)
 *               dst[e][:] = xnew[-2 - src[e]][:]           (src[e] <= -2: a row of this call)
 *               dst[e][:] = 0                              (src[e] == -1: before frame 0)
 *   x_store:    pool[dst[i] + step_off + :] = xnew[i][:]   for dst[i] >= 0
 *   kv_store:   pool[dst[i] + layer_off + c]         = qkv[i][D + c]   (K)
 *               pool[dst[i] + layer_off + v_off + c] = qkv[i][2D + c]  (V), c < D, dst[i] >= 0
 *   rows_gather: dst[i][:] = src[map[i]][:]  (fp32 rows)
 *   rows_zero:  x[rows[i]][:] = 0            (bf16 rows)
 * Step offsets read on the device: x_gather, x_store and kv_store add *dev_off (when dev_off is
 *   not NULL) to step_off / layer_off, read once per thread at run time. A CUDA graph captured
 *   for one Euler step thus serves every step: the host writes the step's offset into dev_off
 *   before each replay (lib/gpu/flow.c).
 * Shapes: M (mel) and D (model width) columns; offsets in elements of the pool's type.
 * Thread mapping: one thread per 4 fp32 / 8 bf16 elements (16-byte accesses), grid-stride; the
 *   row of a thread is its element index divided by the row's vector count. */
#include "flow_pack.h"

#include "kcommon.cuh"

using namespace cosyk;

namespace {

constexpr int PK_THREADS = 256;

__global__ void __launch_bounds__(PK_THREADS)
x_gather_kernel(float *__restrict__ dst, const int64_t *__restrict__ src,
                const float *__restrict__ pool, int64_t step_off, const int64_t *__restrict__ dev_off,
                const float *__restrict__ xnew, int M, int64_t total) {
  if (dev_off) step_off += *dev_off;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = e / M;
    const int c = (int)(e % M);
    const int64_t o = src[row];
    float v = 0.f;
    if (o >= 0)
      v = pool[o + step_off + c];
    else if (o <= -2)
      v = xnew[(-2 - o) * M + c];
    dst[e] = v;
  }
}

__global__ void __launch_bounds__(PK_THREADS)
x_store_kernel(float *__restrict__ pool, const int64_t *__restrict__ dst, int64_t step_off,
               const int64_t *__restrict__ dev_off, const float *__restrict__ xnew, int M,
               int64_t total) {
  if (dev_off) step_off += *dev_off;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = e / M;
    const int64_t o = dst[row];
    if (o >= 0) pool[o + step_off + e % M] = xnew[e];
  }
}

__global__ void __launch_bounds__(PK_THREADS)
kv_store_kernel(bf16 *__restrict__ pool, const int64_t *__restrict__ dst, int64_t layer_off,
                const int64_t *__restrict__ dev_off, int64_t v_off, const bf16 *__restrict__ qkv,
                int D, int64_t total8) {
  if (dev_off) layer_off += *dev_off;
  const int per8 = D / 8;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total8;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = e / per8;
    const int c = (int)(e % per8) * 8;
    const int64_t o = dst[row];
    if (o < 0) continue;
    const bf16 *r = qkv + row * 3 * (int64_t)D;
    *reinterpret_cast<uint4 *>(pool + o + layer_off + c) =
        *reinterpret_cast<const uint4 *>(r + D + c);
    *reinterpret_cast<uint4 *>(pool + o + layer_off + v_off + c) =
        *reinterpret_cast<const uint4 *>(r + 2 * D + c);
  }
}

__global__ void __launch_bounds__(PK_THREADS)
rows_gather_kernel(float *__restrict__ dst, const float *__restrict__ src,
                   const int32_t *__restrict__ map, int D, int64_t total4) {
  const int per4 = D / 4;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total4;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = e / per4;
    const int c = (int)(e % per4) * 4;
    *reinterpret_cast<float4 *>(dst + row * D + c) =
        *reinterpret_cast<const float4 *>(src + (int64_t)map[row] * D + c);
  }
}

__global__ void __launch_bounds__(PK_THREADS)
rows_zero_kernel(bf16 *__restrict__ x, const int32_t *__restrict__ rows, int D, int64_t total8) {
  const int per8 = D / 8;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total8;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = rows[e / per8];
    const int c = (int)(e % per8) * 8;
    *reinterpret_cast<uint4 *>(x + row * D + c) = make_uint4(0u, 0u, 0u, 0u);
  }
}

inline bool a16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

} /* namespace */

extern "C" cudaError_t cosy_k_flow_x_gather(cudaStream_t s, float *dst, const int64_t *src,
                                            const float *pool, int64_t step_off,
                                            const int64_t *dev_off, const float *xnew, int rows,
                                            int M) {
  if (rows < 0 || M <= 0 || step_off < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (!dst || !src) return cudaErrorInvalidValue;
  const int64_t total = (int64_t)rows * M;
  x_gather_kernel<<<cosyk_blocks(total, PK_THREADS, 4096u), PK_THREADS, 0, s>>>(
      dst, src, pool, step_off, dev_off, xnew, M, total);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_flow_x_store(cudaStream_t s, float *pool, const int64_t *dst,
                                           int64_t step_off, const int64_t *dev_off,
                                           const float *xnew, int rows, int M) {
  if (rows < 0 || M <= 0 || step_off < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (!pool || !dst || !xnew) return cudaErrorInvalidValue;
  const int64_t total = (int64_t)rows * M;
  x_store_kernel<<<cosyk_blocks(total, PK_THREADS, 4096u), PK_THREADS, 0, s>>>(
      pool, dst, step_off, dev_off, xnew, M, total);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_flow_kv_store(cudaStream_t s, cosy_bf16 *pool, const int64_t *dst,
                                            int64_t layer_off, const int64_t *dev_off,
                                            int64_t v_off, const cosy_bf16 *qkv, int rows, int D) {
  if (rows < 0 || D <= 0 || D % 8 || layer_off < 0 || layer_off % 8 || v_off % 8)
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (!pool || !dst || !qkv || !a16(pool) || !a16(qkv)) return cudaErrorInvalidValue;
  const int64_t total8 = (int64_t)rows * (D / 8);
  kv_store_kernel<<<cosyk_blocks(total8, PK_THREADS, 4096u), PK_THREADS, 0, s>>>(
      (bf16 *)pool, dst, layer_off, dev_off, v_off, (const bf16 *)qkv, D, total8);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_rows_gather_f32(cudaStream_t s, float *dst, const float *src,
                                              const int32_t *map, int rows, int D) {
  if (rows < 0 || D <= 0 || D % 4) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (!dst || !src || !map || !a16(dst) || !a16(src)) return cudaErrorInvalidValue;
  const int64_t total4 = (int64_t)rows * (D / 4);
  rows_gather_kernel<<<cosyk_blocks(total4, PK_THREADS, 4096u), PK_THREADS, 0, s>>>(
      dst, src, map, D, total4);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_rows_zero_bf16(cudaStream_t s, cosy_bf16 *x, const int32_t *rows,
                                             int n_rows, int D) {
  if (n_rows < 0 || D <= 0 || D % 8) return cudaErrorInvalidValue;
  if (n_rows == 0) return cudaSuccess;
  if (!x || !rows || !a16(x)) return cudaErrorInvalidValue;
  const int64_t total8 = (int64_t)n_rows * (D / 8);
  rows_zero_kernel<<<cosyk_blocks(total8, PK_THREADS, 4096u), PK_THREADS, 0, s>>>(
      (bf16 *)x, rows, D, total8);
  return cudaGetLastError();
}
