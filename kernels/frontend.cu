/* frontend.cu - the voice front end's kernels: the speech tokenizer v3 and CAM++ on the GPU
 * (lib/gpu/frontend.c), whose convolutions are im2col + cuBLASLt GEMMs (gemm.cu) and whose
 * attention and rotary embedding are attention.cu's and rope.cu's. The math of each launcher is in
 * kernels/kernels_frontend.h; the models' math in lib/ref/s3tok.h and lib/ref/campplus.h.
 *
 * Shapes (full-size models, 10 s of audio): log-mel [128][1000] -> conv1 cols [500][384] ->
 *   conv2 cols [250][3840] -> 12 blocks of x [250][1280]; fbank [998][80] -> head images
 *   [80..10][998][32] (im2col chunks of output frequency rows) -> flatten [998][320] -> tdnn cols
 *   [499][1600] -> dense blocks x [499][<= 1024] (bottleneck 128, growth 32, 5 segments).
 *
 * Thread mapping
 *   im2col1d / im2col2d / act / fsmn_add / bn_relu / cam_mask / flatten: one thread per output
 *     element (grid-stride loops, 256 threads a block), the output index running fastest along
 *     the innermost dimension, so stores are coalesced; the reads of im2col hit L1/L2 (every
 *     input value is read k or k*k times by neighbouring threads).
 *   layernorm: one block of 256 threads per row, two passes (mean, then the centred sum of
 *     squares) over the row re-read from L1/L2; each thread writes only the elements it read, so
 *     y == x is safe.
 *   fsq: one thread per token (8 values).
 *   seg_ctx / stats: one block of 32 x 16 threads per 32 channels; thread (c, r) walks rows
 *     r, r + 16, ... of its channel, the 16 partial sums are added in shared memory (in double).
 * Numerics: fp32 storage; the reductions of seg_ctx and stats accumulate in double as the CPU
 *   reference does; GELU uses erff, the sigmoid expf, the FSQ tanhf and rintf (half to even, like
 *   torch.round). Results differ from the reference only by rounding order (~1e-7 relative).
 */
#include "kernels_frontend.h"
#include "kcommon.cuh"

using namespace cosyk;

namespace {

constexpr int TPB = 256;
constexpr unsigned GRID_CAP = 1u << 16;

__global__ void im2col1d_kernel(const float *__restrict__ x, int64_t ts, int64_t cs, int Ti, int Ci,
                                int To, int k, int stride, int dil, int pad,
                                float *__restrict__ cols) {
  const int64_t row = (int64_t)Ci * k, n = (int64_t)To * row;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int t = (int)(i / row);
    const int r = (int)(i - (int64_t)t * row);
    const int ci = r / k, j = r - ci * k;
    const int tt = t * stride + j * dil - pad;
    cols[i] = (tt < 0 || tt >= Ti) ? 0.f : x[(int64_t)tt * ts + (int64_t)ci * cs];
  }
}

__global__ void im2col2d_kernel(const float *__restrict__ x, int64_t fs, int64_t ts, int64_t cs,
                                int Fi, int T, int Ci, int k, int sf, int fo0, int n_fo,
                                float *__restrict__ cols, int ldc) {
  const int kk = k * k, p = k / 2, K = Ci * kk;
  const int64_t n = (int64_t)n_fo * T * ldc;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t rr = i / ldc;
    const int r = (int)(i - rr * ldc);
    if (r >= K) {
      cols[i] = 0.f;
      continue;
    }
    const int fo = fo0 + (int)(rr / T), t = (int)(rr % T);
    const int ci = r / kk, q = r - ci * kk, kf = q / k, kt = q - kf * k;
    const int f = fo * sf + kf - p, tt = t + kt - p;
    cols[i] = (f < 0 || f >= Fi || tt < 0 || tt >= T)
                  ? 0.f
                  : x[(int64_t)f * fs + (int64_t)tt * ts + (int64_t)ci * cs];
  }
}

__global__ void __launch_bounds__(TPB)
layernorm_kernel(const float *x, const float *__restrict__ w, const float *__restrict__ b, float *y,
                 int D, float eps) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const float *xr = x + row * D;
  float *yr = y + row * D;
  float s = 0.f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s, red) / (float)D;
  float ss = 0.f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    const float d = xr[i] - mean;
    ss += d * d;
  }
  const float rstd = rsqrtf(block_sum(ss, red) / (float)D + eps);
  for (int i = threadIdx.x; i < D; i += blockDim.x) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}

__global__ void act_kernel(int op, const float *x, const float *x2, int64_t ldx, float *y,
                           int64_t ldy, int rows, int cols) {
  const int64_t n = (int64_t)rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    float v = x[r * ldx + c];
    if (op == COSY_FE_GELU) {
      v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    } else {
      if (op == COSY_FE_ADD_RELU) v += x2[r * ldx + c];
      v = v > 0.f ? v : 0.f;
    }
    y[r * ldy + c] = v;
  }
}

__global__ void fsmn_add_kernel(float *__restrict__ x, int64_t ldx, const float *__restrict__ v,
                                int64_t ldv, const float *__restrict__ w, int N, int C, int K) {
  const int64_t n = (int64_t)N * C;
  const int lp = (K - 1) / 2;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int t = (int)(i / C), c = (int)(i - (int64_t)t * C);
    const float *wc = w + (int64_t)c * K;
    float acc = 0.f;
    for (int j = 0; j < K; j++) {
      const int tt = t + j - lp;
      if (tt >= 0 && tt < N) acc += wc[j] * v[(int64_t)tt * ldv + c];
    }
    x[(int64_t)t * ldx + c] += acc + v[(int64_t)t * ldv + c];
  }
}

__global__ void fsq_kernel(const float *__restrict__ p, float scale, int N,
                           int32_t *__restrict__ tokens) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= N) return;
  int32_t id = 0, p3 = 1;
  for (int i = 0; i < 8; i++) {
    const float z = rintf(tanhf(p[(int64_t)t * 8 + i]) * scale) + 1.f;
    id += (int32_t)z * p3;
    p3 *= 3;
  }
  tokens[t] = id;
}

__global__ void bn_relu_kernel(const float *__restrict__ x, int64_t ldx,
                               const float *__restrict__ sc, const float *__restrict__ sh,
                               float *__restrict__ y, int64_t ldy, int T, int C, int C_pad) {
  const int64_t n = (int64_t)T * C_pad;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = i / C_pad;
    const int c = (int)(i - t * C_pad);
    float v = 0.f;
    if (c < C) {
      v = x[t * ldx + c] * sc[c] + sh[c];
      v = v > 0.f ? v : 0.f;
    }
    y[t * ldy + c] = v;
  }
}

/* sum over rows [t0, t1) of channel c (row stride ld) by the 16 thread rows of the block; every
 * thread of column threadIdx.x gets the sum. relu: sum max(v, 0); mean_sub: sum (max(v,0)-m)^2. */
__device__ double col_sum(const float *h, int64_t ld, int c, bool valid, int t0, int t1, int mode,
                          double m, double (*red)[32]) {
  double acc = 0.0;
  if (valid) {
    for (int t = t0 + threadIdx.y; t < t1; t += blockDim.y) {
      double v = h[(int64_t)t * ld + c];
      if (mode >= 1) v = v > 0.0 ? v : 0.0;
      if (mode == 2) v = (v - m) * (v - m);
      acc += v;
    }
  }
  __syncthreads();
  red[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  double s = 0.0;
  for (int r = 0; r < (int)blockDim.y; r++) s += red[r][threadIdx.x];
  return s;
}

__global__ void seg_ctx_kernel(const float *__restrict__ h, int T, int C, int seg,
                               float *__restrict__ ctx) {
  __shared__ double red[16][32];
  __shared__ double segs[COSY_FE_MAX_SEGS][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const bool valid = c < C;
  const int nseg = (T + seg - 1) / seg;
  double total = 0.0;
  for (int g = 0; g < nseg; g++) {
    const int t0 = g * seg, t1 = t0 + seg < T ? t0 + seg : T;
    const double s = col_sum(h, C, c, valid, t0, t1, 0, 0.0, red);
    total += s;
    if (threadIdx.y == 0) segs[g][threadIdx.x] = s / (double)seg; /* also the partial last one */
  }
  __syncthreads();
  if (!valid) return;
  const float mean = (float)(total / (double)T);
  for (int g = threadIdx.y; g < nseg; g += blockDim.y)
    ctx[(int64_t)g * C + c] = mean + (float)segs[g][threadIdx.x];
}

__global__ void cam_mask_kernel(const float *__restrict__ y, const float *__restrict__ logit,
                                int seg, float *__restrict__ out, int64_t ldo, int T, int G) {
  const int64_t n = (int64_t)T * G;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int t = (int)(i / G), g = (int)(i - (int64_t)t * G);
    const float m = 1.f / (1.f + expf(-logit[(int64_t)(t / seg) * G + g]));
    out[(int64_t)t * ldo + g] = y[i] * m;
  }
}

__global__ void stats_kernel(const float *__restrict__ x, int64_t ldx, int T, int C,
                             float *__restrict__ st) {
  __shared__ double red[16][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const bool valid = c < C;
  const double mean = col_sum(x, ldx, c, valid, 0, T, 1, 0.0, red) / (double)T;
  const double ss = col_sum(x, ldx, c, valid, 0, T, 2, mean, red);
  if (valid && threadIdx.y == 0) {
    st[c] = (float)mean;
    st[C + c] = (float)sqrt(ss / (double)(T - 1));
  }
}

__global__ void flatten_kernel(const float *__restrict__ in, int F, int T, int M,
                               float *__restrict__ out) {
  const int64_t row = (int64_t)M * F, n = (int64_t)T * row;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = i / row;
    const int r = (int)(i - t * row), m = r / F, f = r - m * F;
    out[i] = in[((int64_t)f * T + t) * M + m];
  }
}

unsigned blocks_for(int64_t n) { return cosyk_blocks(n, TPB, GRID_CAP); }

} /* namespace */

extern "C" cudaError_t cosy_k_fe_im2col1d(cudaStream_t s, const float *x, int64_t ts, int64_t cs,
                                          int Ti, int Ci, int To, int k, int stride, int dil,
                                          int pad, float *cols) {
  if (Ti < 0 || Ci < 0 || To < 0 || k <= 0 || stride <= 0 || dil <= 0 || pad < 0)
    return cudaErrorInvalidValue;
  if ((int64_t)To * Ci == 0) return cudaSuccess;
  if (!x || !cols) return cudaErrorInvalidValue;
  im2col1d_kernel<<<blocks_for((int64_t)To * Ci * k), TPB, 0, s>>>(x, ts, cs, Ti, Ci, To, k, stride,
                                                                    dil, pad, cols);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_fe_im2col2d(cudaStream_t s, const float *x, int64_t fs, int64_t ts,
                                          int64_t cs, int Fi, int T, int Ci, int k, int sf,
                                          int fo0, int n_fo, float *cols, int ldc) {
  if (Fi < 0 || T < 0 || Ci < 0 || k <= 0 || sf <= 0 || fo0 < 0 || n_fo < 0 ||
      (int64_t)ldc < (int64_t)Ci * k * k)
    return cudaErrorInvalidValue;
  if ((int64_t)n_fo * T * Ci == 0) return cudaSuccess;
  if (!x || !cols) return cudaErrorInvalidValue;
  im2col2d_kernel<<<blocks_for((int64_t)n_fo * T * ldc), TPB, 0, s>>>(
      x, fs, ts, cs, Fi, T, Ci, k, sf, fo0, n_fo, cols, ldc);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_fe_layernorm(cudaStream_t s, const float *x, const float *w,
                                           const float *b, float *y, int rows, int D, float eps) {
  if (rows < 0 || D <= 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (!x || !w || !b || !y) return cudaErrorInvalidValue;
  layernorm_kernel<<<rows, TPB, 0, s>>>(x, w, b, y, D, eps);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_fe_act(cudaStream_t s, cosy_fe_act op, const float *x,
                                     const float *x2, int64_t ldx, float *y, int64_t ldy, int rows,
                                     int cols) {
  if (rows < 0 || cols < 0 || ldx < cols || ldy < cols ||
      (op != COSY_FE_GELU && op != COSY_FE_RELU && op != COSY_FE_ADD_RELU))
    return cudaErrorInvalidValue;
  if ((int64_t)rows * cols == 0) return cudaSuccess;
  if (!x || !y || (op == COSY_FE_ADD_RELU && !x2)) return cudaErrorInvalidValue;
  act_kernel<<<blocks_for((int64_t)rows * cols), TPB, 0, s>>>((int)op, x, x2, ldx, y, ldy, rows,
                                                               cols);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_fe_fsmn_add(cudaStream_t s, float *x, int64_t ldx, const float *v,
                                          int64_t ldv, const float *w, int N, int C, int K) {
  if (N < 0 || C < 0 || K <= 0 || ldx < C || ldv < C) return cudaErrorInvalidValue;
  if ((int64_t)N * C == 0) return cudaSuccess;
  if (!x || !v || !w) return cudaErrorInvalidValue;
  fsmn_add_kernel<<<blocks_for((int64_t)N * C), TPB, 0, s>>>(x, ldx, v, ldv, w, N, C, K);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_fe_fsq(cudaStream_t s, const float *p, float scale, int N,
                                     int32_t *tokens) {
  if (N < 0) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!p || !tokens) return cudaErrorInvalidValue;
  fsq_kernel<<<(N + TPB - 1) / TPB, TPB, 0, s>>>(p, scale, N, tokens);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_fe_bn_relu(cudaStream_t s, const float *x, int64_t ldx,
                                         const float *sc, const float *sh, float *y, int64_t ldy,
                                         int T, int C, int C_pad) {
  if (T < 0 || C < 0 || C_pad < C || ldx < C || ldy < C_pad) return cudaErrorInvalidValue;
  if ((int64_t)T * C_pad == 0) return cudaSuccess;
  if (!x || !sc || !sh || !y) return cudaErrorInvalidValue;
  bn_relu_kernel<<<blocks_for((int64_t)T * C_pad), TPB, 0, s>>>(x, ldx, sc, sh, y, ldy, T, C,
                                                                 C_pad);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_fe_seg_ctx(cudaStream_t s, const float *h, int T, int C, int seg,
                                         float *ctx) {
  if (T < 0 || C < 0 || seg <= 0 || (T + (int64_t)seg - 1) / seg > COSY_FE_MAX_SEGS)
    return cudaErrorInvalidValue;
  if ((int64_t)T * C == 0) return cudaSuccess;
  if (!h || !ctx) return cudaErrorInvalidValue;
  seg_ctx_kernel<<<(C + 31) / 32, dim3(32, 16), 0, s>>>(h, T, C, seg, ctx);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_fe_cam_mask(cudaStream_t s, const float *y, const float *logit,
                                          int seg, float *out, int64_t ldo, int T, int G) {
  if (T < 0 || G < 0 || seg <= 0 || ldo < G) return cudaErrorInvalidValue;
  if ((int64_t)T * G == 0) return cudaSuccess;
  if (!y || !logit || !out) return cudaErrorInvalidValue;
  cam_mask_kernel<<<blocks_for((int64_t)T * G), TPB, 0, s>>>(y, logit, seg, out, ldo, T, G);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_fe_stats(cudaStream_t s, const float *x, int64_t ldx, int T, int C,
                                       float *st) {
  if (T < 2 || C < 0 || ldx < C) return cudaErrorInvalidValue;
  if (C == 0) return cudaSuccess;
  if (!x || !st) return cudaErrorInvalidValue;
  stats_kernel<<<(C + 31) / 32, dim3(32, 16), 0, s>>>(x, ldx, T, C, st);
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_fe_flatten(cudaStream_t s, const float *in, int F, int T, int M,
                                         float *out) {
  if (F < 0 || T < 0 || M < 0) return cudaErrorInvalidValue;
  if ((int64_t)F * T * M == 0) return cudaSuccess;
  if (!in || !out) return cudaErrorInvalidValue;
  flatten_kernel<<<blocks_for((int64_t)F * T * M), TPB, 0, s>>>(in, F, T, M, out);
  return cudaGetLastError();
}
