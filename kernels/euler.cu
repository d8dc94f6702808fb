/* euler.cu - the flow's ODE step: explicit Euler with classifier-free guidance (lib/gpu/flow.c,
 * the CFM solver over the cosine schedule of lib/ref/flow.c). Launcher in euler.h.
 *
 * Math: x[i] += dt * (c1 * vc[i] - c2 * vu[i]) (euler.h).
 * Thread mapping: one thread per element, grid-stride.
 * Numerics: explicitly rounded fp32 operations (no FMA contraction), in upstream's order, so the
 *   step is bit-identical to lib/ref/flow.c's.
 */
#include "euler.h"

#include "kcommon.cuh"

using namespace cosyk;

namespace {

constexpr int EW_THREADS = 256;
constexpr unsigned EW_MAX_BLOCKS = 4096u; /* grid-stride loop: at most this many blocks */

__global__ void __launch_bounds__(EW_THREADS)
euler_kernel(float *__restrict__ x, const float *__restrict__ vc, const float *__restrict__ vu,
             int64_t n, float dt, const float *__restrict__ dev_dt, float c1, float c2) {
  if (dev_dt) dt = *dev_dt;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const float d = __fsub_rn(__fmul_rn(c1, vc[e]), __fmul_rn(c2, vu[e]));
    x[e] = __fadd_rn(x[e], __fmul_rn(dt, d));
  }
}

} /* namespace */

extern "C" cudaError_t cosy_k_flow_euler(cudaStream_t s, float *x, const float *vc,
                                         const float *vu, int64_t n, float dt,
                                         const float *dev_dt, float c1, float c2) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!x || !vc || !vu) return cudaErrorInvalidValue;
  euler_kernel<<<cosyk_blocks(n, EW_THREADS, EW_MAX_BLOCKS), EW_THREADS, 0, s>>>(
      x, vc, vu, n, dt, dev_dt, c1, c2);
  return cudaGetLastError();
}
