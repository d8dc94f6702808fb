/* kcommon.cuh - device helpers shared by the kernel files (internal; CUDA C++ only).
 *
 * Typed loads/stores that convert to and from fp32 (bf16 rounding: nearest-even), warp and block
 * reductions, programmatic dependent launch, the launch helpers (launch_ex: clusters and/or
 * programmatic dependent launch; launch_pdl) and the dtype dispatch macro the launchers use. */
#ifndef COSY_KCOMMON_CUH
#define COSY_KCOMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

namespace cosyk {

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
__device__ __forceinline__ void st(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* the value v takes once stored as T */
template <typename T> __device__ __forceinline__ float round_to(float v);
template <> __device__ __forceinline__ float round_to<float>(float v) { return v; }
template <> __device__ __forceinline__ float round_to<bf16>(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
 * `red` is __shared__ float[32]; the call contains barriers, so all threads must make it. */
__device__ __forceinline__ float block_sum(float v, float *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads(); /* red may still be read by a previous call */
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < nw ? red[lane] : 0.f;
  return warp_sum(t);
}
__device__ __forceinline__ float block_max(float v, float *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < nw ? red[lane] : -INFINITY;
  return warp_max(t);
}

/* Programmatic dependent launch (sm_90; no-ops elsewhere and in plain launches): let the next
 * kernel on the stream launch now / wait until the previous kernel has completed and its writes
 * are visible. */
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* kern<<<grid, block, dyn, s>>>(args...) through cudaLaunchKernelEx, in thread-block clusters of
 * `cluster` blocks when that is not (1, 1, 1) (cudaLaunchAttributeClusterDimension; the device
 * must have clusters, cosy_kdev.clusters) and as a programmatic dependent of the previous kernel
 * on s when pdl (cudaLaunchAttributeProgrammaticStreamSerialization; the kernel must pdl_wait()
 * before it touches what an earlier kernel writes or reads); with neither, no attribute. The
 * launch error, then cudaGetLastError(). */
template <typename... P, typename... A>
inline cudaError_t launch_ex(cudaStream_t s, dim3 grid, dim3 block, size_t dyn, dim3 cluster,
                             int pdl, void (*kern)(P...), A... args) {
  cudaLaunchConfig_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = dyn;
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  int na = 0;
  if (cluster.x * cluster.y * cluster.z > 1) {
    attr[na].id = cudaLaunchAttributeClusterDimension;
    attr[na].val.clusterDim.x = cluster.x;
    attr[na].val.clusterDim.y = cluster.y;
    attr[na].val.clusterDim.z = cluster.z;
    na++;
  }
  if (pdl) {
    attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[na].val.programmaticStreamSerializationAllowed = 1;
    na++;
  }
  cfg.attrs = attr;
  cfg.numAttrs = na;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kern, args...);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

/* kern<<<grid, threads, dyn, s>>>(args...), as a programmatic dependent of the previous kernel on
 * s when pdl (launch_ex without clusters; a plain launch without pdl); the launch error, then
 * cudaGetLastError() */
template <typename... P, typename... A>
inline cudaError_t launch_pdl(void (*kern)(P...), dim3 grid, int threads, size_t dyn,
                              cudaStream_t s, int pdl, A... args) {
  if (!pdl) {
    kern<<<grid, threads, dyn, s>>>(args...);
    return cudaGetLastError();
  }
  return launch_ex(s, grid, dim3(threads), dyn, dim3(1, 1, 1), 1, kern, args...);
}

} /* namespace cosyk */

/* Dispatch a runtime cosy_kdtype to a type alias T inside the braces; an unknown value returns
 * cudaErrorInvalidValue from the enclosing launcher. */
#define COSYK_DT_CASE(dt, T, ...)                          \
  switch (dt) {                                            \
  case COSY_KDT_F32: {                                     \
    typedef float T;                                       \
    __VA_ARGS__                                            \
  } break;                                                 \
  case COSY_KDT_BF16: {                                    \
    typedef cosyk::bf16 T;                                 \
    __VA_ARGS__                                            \
  } break;                                                 \
  default:                                                 \
    return cudaErrorInvalidValue;                          \
  }

static inline bool cosyk_dt_ok(cosy_kdtype dt) {
  return dt == COSY_KDT_F32 || dt == COSY_KDT_BF16;
}

static inline unsigned cosyk_blocks(int64_t n, int threads, unsigned cap) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > (int64_t)cap) b = cap;
  return (unsigned)b;
}

#endif
