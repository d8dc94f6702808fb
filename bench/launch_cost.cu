/* launch_cost.cu - what one dependent stage costs on this GPU, with nothing else to do: the floor
 * under each kernel of the LLM's decode step (lib/gpu/llm.c: ~120 dependent kernels a step).
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -o build/dev/launch_cost bench/launch_cost.cu
 *   build/dev/launch_cost [blocks]     (default: 2 blocks of 256 threads per SM)
 *
 * A stage: every block reads one value each of the previous stage's blocks wrote (block b reads
 * block (b + 1) % n's), adds one, writes its own: a true all-to-all dependency, as the decode
 * step's projections have (each reads a whole row of x that all blocks of the last one wrote).
 * Ways, each 200 stages, µs a stage (median of 9 runs):
 *   graph        200 kernels captured into a CUDA graph, each a plain launch after the last
 *   graph+pdl    the same with programmatic dependent launch (the next grid launched at once,
 *                its blocks waiting in griddepcontrol.wait): what the decode step does
 *   persistent   one cooperative kernel, all blocks resident, a grid barrier between stages
 *                (one atomic counter and a generation word, sense reversal): what a persistent
 *                decode kernel would pay instead
 * Check: the last stage's values must equal the stage count (printed "ok" / "WRONG").
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,                \
              cudaGetErrorString(e_));                                         \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

constexpr int STAGES = 200;

__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/* stage s: buf[s & 1][b] = buf[(s - 1) & 1][(b + 1) % n] + 1 */
__global__ void stage_kernel(int *buf, int n, int s, int pdl) {
  if (pdl) {
    pdl_trigger();
    pdl_wait();
  }
  if (threadIdx.x == 0) {
    const int b = blockIdx.x;
    const int *src = buf + ((s - 1) & 1) * n;
    buf[(s & 1) * n + b] = (s == 0 ? 0 : __ldcg(src + (b + 1) % n)) + 1;
  }
}

/* all blocks resident; bar[0] the arrival count, bar[1] the generation */
__device__ __forceinline__ void grid_barrier(unsigned *bar, unsigned n) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned *gen = bar + 1;
    const unsigned g = *gen;
    __threadfence();
    if (atomicAdd(bar, 1u) == n - 1) {
      bar[0] = 0;
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      while (*gen == g) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

__global__ void persistent_kernel(int *buf, int n, unsigned *bar) {
  for (int s = 0; s < STAGES; ++s) {
    if (threadIdx.x == 0) {
      const int b = blockIdx.x;
      const int *src = buf + ((s - 1) & 1) * n;
      buf[(s & 1) * n + b] = (s == 0 ? 0 : __ldcg(src + (b + 1) % n)) + 1;
    }
    grid_barrier(bar, (unsigned)n);
  }
}

static bool check(const int *dbuf, int n) {
  std::vector<int> h(n);
  CK(cudaMemcpy(h.data(), dbuf + ((STAGES - 1) & 1) * n, sizeof(int) * n, cudaMemcpyDeviceToHost));
  for (int v : h)
    if (v != STAGES) return false;
  return true;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char **argv) {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int n = argc > 1 ? atoi(argv[1]) : 2 * prop.multiProcessorCount;
  int *buf;
  unsigned *bar;
  CK(cudaMalloc(&buf, sizeof(int) * 2 * n));
  CK(cudaMalloc(&bar, sizeof(unsigned) * 2));
  CK(cudaMemset(bar, 0, sizeof(unsigned) * 2));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  printf("device %s, %d SMs; %d blocks of 256 threads a stage, %d stages\n", prop.name,
         prop.multiProcessorCount, n, STAGES);

  for (int pdl = 0; pdl <= 1; ++pdl) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int s = 0; s < STAGES; ++s) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(n);
      cfg.blockDim = dim3(256);
      cfg.stream = st;
      cudaLaunchAttribute at[1];
      at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      at[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = at;
      cfg.numAttrs = pdl && s > 0 ? 1 : 0;
      CK(cudaLaunchKernelEx(&cfg, stage_kernel, buf, n, s, pdl));
    }
    CK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    std::vector<double> t;
    for (int r = 0; r < 10; ++r) {
      CK(cudaEventRecord(e0, st));
      CK(cudaGraphLaunch(ge, st));
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r > 0) t.push_back(ms * 1e3 / STAGES);
    }
    printf("%-12s %6.2f us a stage  %s\n", pdl ? "graph+pdl" : "graph", median(t),
           check(buf, n) ? "ok" : "WRONG");
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
  }

  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel, 256, 0));
  if (per_sm * prop.multiProcessorCount < n) {
    printf("persistent   skipped: %d blocks cannot all be resident\n", n);
    return 0;
  }
  std::vector<double> t;
  for (int r = 0; r < 10; ++r) {
    void *args[] = {&buf, (void *)&n, &bar};
    CK(cudaEventRecord(e0, st));
    CK(cudaLaunchCooperativeKernel((const void *)persistent_kernel, dim3(n), dim3(256), args, 0, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r > 0) t.push_back(ms * 1e3 / STAGES);
  }
  printf("%-12s %6.2f us a stage  %s\n", "persistent", median(t), check(buf, n) ? "ok" : "WRONG");
  return 0;
}
