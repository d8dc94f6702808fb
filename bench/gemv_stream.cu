/* gemv_stream.cu - how fast the batch-1 decode GEMV's weight stream can be, apart from its
 * arithmetic: the grid and loads of gemv_tc_kernel at one row (kernels/gemv.cu: 8 warps a block,
 * a warp owns a 16-row weight tile and one of KS parts of K, 4 k-blocks of 32 in flight in
 * registers, refilled as used) with nothing but an XOR of the loaded words (or, with the mma
 * chain, the 4 mma a k-block of the real kernel on constant x fragments), for three layouts of
 * the same bytes:
 *   rows   the weights as the model stores them, W [N][K] row-major: lane (g, t) loads 16 bytes
 *          of rows g and g + 8 of its tile at k = 32 kb + 8 t (a warp load touches 8 rows x 64
 *          bytes), what gemv_tc does today
 *   frag   each (tile, k-block)'s 1 KB stored contiguously in load order (lane l's 16 bytes of
 *          half h at byte 512 h + 16 l): a warp load is 512 contiguous bytes
 *   part   as frag, and a warp's k-blocks (kb = p, p + KS, ...) next to each other: its whole
 *          stream (nc KB) contiguous
 * each with D = 4 k-blocks in flight a warp (the kernel's) and D = 8 (all of a gate|up warp's 7).
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -o build/dev/gemv_stream bench/gemv_stream.cu
 *   build/dev/gemv_stream [N K KS]     (default: 9728 896 4, gate|up of the full model)
 *
 * Per layout, with and without the mma chain: us a launch, replayed from a CUDA graph of 50
 * launches (median of 7 graphs), the weights rotated through 8 copies (139 MB for gate|up, so
 * they come from DRAM) and, "L2", one copy every launch; and the GB/s that means. An empty
 * kernel with the same grid gives the launch floor.
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));       \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

constexpr int NW = 8, ITER = 50, COPIES = 8;

struct P {
  const uint4 *w; /* the copy this launch reads */
  int N, K, KS, KB, tiles;
  uint32_t *out; /* one word a warp (never 0 in practice; keeps the loads alive) */
};

__device__ __forceinline__ void mma(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                    uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* the 16-byte word lane (g, t) loads for half h of k-block c of its part, in layout L */
template <int L>
__device__ __forceinline__ size_t word(const P &p, int tile, int kp, int c, int h, int lane) {
  const int kb = kp + p.KS * c;
  if (L == 0) { /* rows: row tile*16 + 8h + g, k = 32 kb + 8 t */
    const int g = lane >> 2, t = lane & 3;
    return ((size_t)(tile * 16 + 8 * h + g) * p.K + (size_t)kb * 32 + 8 * t) / 8;
  }
  if (L == 1) return (((size_t)tile * p.KB + kb) * 2 + h) * 32 + lane; /* frag */
  const int nc = (p.KB + p.KS - 1) / p.KS;                              /* part */
  return ((((size_t)tile * p.KS + kp) * nc + c) * 2 + h) * 32 + lane;
}

template <int L, bool MMA, int D>
__global__ void __launch_bounds__(NW * 32, 3) stream_kernel(P p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int kp = warp % p.KS, tile = (blockIdx.x * NW + warp) / p.KS;
  if (tile >= p.tiles) return;
  const int nc = kp < p.KB ? (p.KB - kp + p.KS - 1) / p.KS : 0;
  uint4 wa[D], wb[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    wa[d] = d < nc ? __ldcs(p.w + word<L>(p, tile, kp, d, 0, lane)) : make_uint4(0, 0, 0, 0);
    wb[d] = d < nc ? __ldcs(p.w + word<L>(p, tile, kp, d, 1, lane)) : make_uint4(0, 0, 0, 0);
  }
  uint32_t x = 0;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t h0 = 0x3f803f80u ^ lane, h1 = 0x3f003f00u ^ lane; /* constant "x fragments" */
  for (int c0 = 0; c0 < nc; c0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int c = c0 + d;
      if (c < nc) {
        if (MMA) {
          mma(acc, wa[d].x, wb[d].x, wa[d].y, wb[d].y, h0, h1);
          mma(acc, wa[d].z, wb[d].z, wa[d].w, wb[d].w, h0, h1);
          mma(acc, wa[d].x, wb[d].x, wa[d].y, wb[d].y, h1, h0);
          mma(acc, wa[d].z, wb[d].z, wa[d].w, wb[d].w, h1, h0);
        } else {
          x ^= wa[d].x ^ wa[d].y ^ wa[d].z ^ wa[d].w ^ wb[d].x ^ wb[d].y ^ wb[d].z ^ wb[d].w;
        }
        if (c + D < nc) {
          wa[d] = __ldcs(p.w + word<L>(p, tile, kp, c + D, 0, lane));
          wb[d] = __ldcs(p.w + word<L>(p, tile, kp, c + D, 1, lane));
        }
      }
    }
  }
  if (MMA) x = __float_as_uint(acc[0] + acc[1] + acc[2] + acc[3]);
  x = __reduce_xor_sync(0xffffffffu, x);
  if (lane == 0) p.out[blockIdx.x * NW + warp] = x | 1u;
}

__global__ void empty_kernel(P p) {
  if (threadIdx.x == 0 && blockIdx.x == 0 && p.N < 0) p.out[0] = 0;
}

template <class F>
static float time_graph(cudaStream_t s, F launch) {
  std::vector<float> us;
  for (int r = 0; r < 7; ++r) {
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < ITER; ++i) launch(i);
    CK(cudaStreamEndCapture(s, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    CK(cudaGraphLaunch(ge, s)); /* warm */
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1000.f / ITER);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(gr));
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

int main(int argc, char **argv) {
  P p{};
  p.N = argc > 1 ? atoi(argv[1]) : 9728;
  p.K = argc > 2 ? atoi(argv[2]) : 896;
  p.KS = argc > 3 ? atoi(argv[3]) : 4;
  if (p.N % 16 || p.K % 32 || p.KS < 1 || p.KS > NW || NW % p.KS) {
    fprintf(stderr, "gemv_stream: N %% 16, K %% 32 and KS in {1, 2, 4, 8} please\n");
    return 2;
  }
  p.KB = p.K / 32;
  p.tiles = p.N / 16;
  const size_t words = (size_t)p.N * p.K / 8, bytes = words * 16;
  uint4 *w;
  CK(cudaMalloc(&w, bytes * COPIES));
  CK(cudaMemset(w, 0x3c, bytes * COPIES));
  const int blocks = (p.tiles * p.KS + NW - 1) / NW;
  CK(cudaMalloc(&p.out, (size_t)blocks * NW * 4));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  printf("gemv_stream: W %d x %d bf16 (%.2f MB), K parts %d, %d blocks of %d warps, %d k-blocks a "
         "part at most\n", p.N, p.K, bytes / 1e6, p.KS, blocks, NW, (p.KB + p.KS - 1) / p.KS);
  const float e = time_graph(s, [&](int) { empty_kernel<<<blocks, NW * 32, 0, s>>>(p); });
  printf("  %-22s %8.2f us\n", "empty kernel", e);
  static const char *names[3] = {"rows", "frag", "part"};
  for (int dd = 0; dd < 2; ++dd)
    for (int l = 0; l < 3; ++l)
      for (int m = 0; m < 2; ++m)
        for (int l2 = 0; l2 < 2; ++l2) {
          auto run = [&](int i) {
            P q = p;
            q.w = w + (l2 ? 0 : (size_t)(i % COPIES) * words);
            const dim3 gb(blocks), tb(NW * 32);
#define SK(L_, D_)                                                                           \
  (m ? stream_kernel<L_, true, D_><<<gb, tb, 0, s>>>(q) : stream_kernel<L_, false, D_><<<gb, tb, 0, s>>>(q))
            if (dd == 0) {
              if (l == 0) SK(0, 4);
              if (l == 1) SK(1, 4);
              if (l == 2) SK(2, 4);
            } else {
              if (l == 0) SK(0, 8);
              if (l == 1) SK(1, 8);
              if (l == 2) SK(2, 8);
            }
#undef SK
          };
          const float us = time_graph(s, run);
          CK(cudaGetLastError());
          printf("  D%d %-5s %-9s %-3s %8.2f us %8.0f GB/s\n", dd ? 8 : 4, names[l], m ? "mma" : "xor",
                 l2 ? "L2" : "", us, bytes / (us * 1e3));
        }
  CK(cudaFree(w));
  CK(cudaFree(p.out));
  return 0;
}
