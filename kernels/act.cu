/* act.cu - elementwise activations and residual updates.
 *
 * Math
 *   silu_mul:       y = silu(gate) * up, silu(x) = x / (1 + exp(-x))       (Qwen2 MLP)
 *   silu:           y = silu(x)                                           (DiT: SiLU(t_emb))
 *   gelu_tanh:      y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))    (DiT feed-forward)
 *   mish:           y = x tanh(softplus(x)), softplus(x) = log(1 + e^x)   (DiT conv pos-embed;
 *                   for x > 20 softplus is taken as x, the same value in fp32, avoiding e^x)
 *   leaky_relu:     y = x > 0 ? x : slope x     (slope 0.01 pre-lookahead/HiFT end, 0.1 HiFT)
 *   snake:          y = x + 1/(alpha_c + 1e-9) sin(alpha_c x)^2           (HiFT, alpha per channel)
 *   gated_residual: h += gate[b][d] * a                                    (DiT AdaLN gates)
 *   add_bias:       y[r][c] += bias[c]
 *   add_bias_gelu:  y[r][c] = gelu_tanh(y[r][c] + bias[c])   (gemm.cu's GELU fallback)
 * Shapes: see kernels.h. Thread mapping: one thread per element, grid-stride loops (grid capped
 *   so huge tensors still launch). Numerics: fp32 math with accurate expf/tanhf/sinf (no
 *   fast-math); one rounding at a bf16 store.
 */
#include "kcommon.cuh"

using namespace cosyk;

namespace {

constexpr int ACT_THREADS = 256;
constexpr unsigned ACT_MAX_BLOCKS = 65535u * 8u;

struct OpSilu {
  float slope;
  __device__ float operator()(float x) const { return x / (1.f + expf(-x)); }
};
struct OpGelu {
  float slope;
  __device__ float operator()(float x) const {
    const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.f + tanhf(k0 * (x + 0.044715f * x * x * x)));
  }
};
struct OpMish {
  float slope;
  __device__ float operator()(float x) const {
    const float sp = x > 20.f ? x : log1pf(expf(x));
    return x * tanhf(sp);
  }
};
struct OpLeaky {
  float slope;
  __device__ float operator()(float x) const { return x > 0.f ? x : x * slope; }
};

template <typename Op, typename TI, typename TO>
__global__ void __launch_bounds__(ACT_THREADS)
unary_kernel(const TI *x, TO *y, int64_t n, Op op) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    st(y + i, op(ld(x + i)));
}

template <typename TI, typename TO>
__global__ void __launch_bounds__(ACT_THREADS)
silu_mul_kernel(const TI *gate, const TI *up, int in_stride, TO *y, int rows, int n) {
  const int64_t total = (int64_t)rows * n;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / n, i = e % n;
    const float g = ld(gate + r * in_stride + i), u = ld(up + r * in_stride + i);
    st(y + e, g / (1.f + expf(-g)) * u);
  }
}

template <typename TI, typename TO>
__global__ void __launch_bounds__(ACT_THREADS)
snake_kernel(const TI *x, TO *y, const float *__restrict__ alpha, int B, int C, int T,
             int channels_last) {
  const int64_t total = (int64_t)B * C * T;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int c = channels_last ? (int)(e % C) : (int)((e / T) % C);
    const float a = alpha[c];
    const float v = ld(x + e);
    const float sn = sinf(a * v);
    st(y + e, v + sn * sn / (a + 1e-9f));
  }
}

template <typename TH, typename TA>
__global__ void __launch_bounds__(ACT_THREADS)
gated_residual_kernel(TH *h, const TA *a, const float *__restrict__ gate, int gate_stride, int N,
                      int D, int64_t total) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int d = (int)(e % D);
    const int64_t b = e / ((int64_t)N * D);
    st(h + e, ld(h + e) + gate[b * gate_stride + d] * ld(a + e));
  }
}

template <typename T>
__global__ void __launch_bounds__(ACT_THREADS)
add_bias_kernel(T *y, int stride, const float *__restrict__ bias, int rows, int cols) {
  const int64_t total = (int64_t)rows * cols;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / cols;
    const int c = (int)(e % cols);
    T *p = y + r * stride + c;
    st(p, ld(p) + bias[c]);
  }
}

template <typename T>
__global__ void __launch_bounds__(ACT_THREADS)
add_bias_gelu_kernel(T *y, int stride, const float *__restrict__ bias, int rows, int cols) {
  const int64_t total = (int64_t)rows * cols;
  const OpGelu gelu{0.f};
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / cols;
    const int c = (int)(e % cols);
    T *p = y + r * stride + c;
    st(p, gelu(ld(p) + (bias ? bias[c] : 0.f)));
  }
}

template <typename Op>
cudaError_t launch_unary(cudaStream_t s, cosy_kdtype in_dt, const void *x, cosy_kdtype out_dt,
                         void *y, int64_t n, Op op) {
  if (!cosyk_dt_ok(in_dt) || !cosyk_dt_ok(out_dt) || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!x || !y) return cudaErrorInvalidValue;
  const unsigned blocks = cosyk_blocks(n, ACT_THREADS, ACT_MAX_BLOCKS);
  COSYK_DT_CASE(in_dt, TI, COSYK_DT_CASE(out_dt, TO, {
    unary_kernel<Op, TI, TO><<<blocks, ACT_THREADS, 0, s>>>((const TI *)x, (TO *)y, n, op);
  }))
  return cudaGetLastError();
}

} /* namespace */

extern "C" size_t cosy_kdtype_size(cosy_kdtype dt) {
  switch (dt) {
  case COSY_KDT_F32: return 4;
  case COSY_KDT_BF16: return 2;
  }
  return 0;
}

extern "C" cudaError_t cosy_k_silu(cudaStream_t s, cosy_kdtype in_dt, const void *x,
                                   cosy_kdtype out_dt, void *y, int64_t n) {
  return launch_unary(s, in_dt, x, out_dt, y, n, OpSilu{0.f});
}

extern "C" cudaError_t cosy_k_gelu_tanh(cudaStream_t s, cosy_kdtype in_dt, const void *x,
                                        cosy_kdtype out_dt, void *y, int64_t n) {
  return launch_unary(s, in_dt, x, out_dt, y, n, OpGelu{0.f});
}

extern "C" cudaError_t cosy_k_mish(cudaStream_t s, cosy_kdtype in_dt, const void *x,
                                   cosy_kdtype out_dt, void *y, int64_t n) {
  return launch_unary(s, in_dt, x, out_dt, y, n, OpMish{0.f});
}

extern "C" cudaError_t cosy_k_leaky_relu(cudaStream_t s, cosy_kdtype in_dt, const void *x,
                                         cosy_kdtype out_dt, void *y, int64_t n, float slope) {
  return launch_unary(s, in_dt, x, out_dt, y, n, OpLeaky{slope});
}

extern "C" cudaError_t cosy_k_silu_mul(cudaStream_t s, cosy_kdtype in_dt, const void *gate,
                                       const void *up, int in_stride, cosy_kdtype out_dt, void *y,
                                       int rows, int n) {
  if (!cosyk_dt_ok(in_dt) || !cosyk_dt_ok(out_dt) || rows < 0 || n < 0 || in_stride < n)
    return cudaErrorInvalidValue;
  if ((int64_t)rows * n == 0) return cudaSuccess;
  if (!gate || !up || !y) return cudaErrorInvalidValue;
  const unsigned blocks = cosyk_blocks((int64_t)rows * n, ACT_THREADS, ACT_MAX_BLOCKS);
  COSYK_DT_CASE(in_dt, TI, COSYK_DT_CASE(out_dt, TO, {
    silu_mul_kernel<TI, TO><<<blocks, ACT_THREADS, 0, s>>>((const TI *)gate, (const TI *)up,
                                                           in_stride, (TO *)y, rows, n);
  }))
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_snake(cudaStream_t s, cosy_kdtype in_dt, const void *x,
                                    cosy_kdtype out_dt, void *y, const float *alpha, int B, int C,
                                    int T, int channels_last) {
  if (!cosyk_dt_ok(in_dt) || !cosyk_dt_ok(out_dt) || B < 0 || C < 0 || T < 0)
    return cudaErrorInvalidValue;
  const int64_t total = (int64_t)B * C * T;
  if (total == 0) return cudaSuccess;
  if (!x || !y || !alpha) return cudaErrorInvalidValue;
  const unsigned blocks = cosyk_blocks(total, ACT_THREADS, ACT_MAX_BLOCKS);
  COSYK_DT_CASE(in_dt, TI, COSYK_DT_CASE(out_dt, TO, {
    snake_kernel<TI, TO><<<blocks, ACT_THREADS, 0, s>>>((const TI *)x, (TO *)y, alpha, B, C, T,
                                                        channels_last ? 1 : 0);
  }))
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_gated_residual(cudaStream_t s, cosy_kdtype h_dt, void *h,
                                             cosy_kdtype a_dt, const void *a, const float *gate,
                                             int gate_stride, int B, int N, int D) {
  if (!cosyk_dt_ok(h_dt) || !cosyk_dt_ok(a_dt) || B < 0 || N < 0 || D < 0)
    return cudaErrorInvalidValue;
  const int64_t total = (int64_t)B * N * D;
  if (total == 0) return cudaSuccess;
  if (!h || !a || !gate || gate_stride < D) return cudaErrorInvalidValue;
  const unsigned blocks = cosyk_blocks(total, ACT_THREADS, ACT_MAX_BLOCKS);
  COSYK_DT_CASE(h_dt, TH, COSYK_DT_CASE(a_dt, TA, {
    gated_residual_kernel<TH, TA><<<blocks, ACT_THREADS, 0, s>>>((TH *)h, (const TA *)a, gate,
                                                                 gate_stride, N, D, total);
  }))
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_add_bias(cudaStream_t s, cosy_kdtype dt, void *y, int stride,
                                       const float *bias, int rows, int cols) {
  if (!cosyk_dt_ok(dt) || rows < 0 || cols < 0 || stride < cols) return cudaErrorInvalidValue;
  if ((int64_t)rows * cols == 0) return cudaSuccess;
  if (!y || !bias) return cudaErrorInvalidValue;
  const unsigned blocks = cosyk_blocks((int64_t)rows * cols, ACT_THREADS, ACT_MAX_BLOCKS);
  COSYK_DT_CASE(dt, T, {
    add_bias_kernel<T><<<blocks, ACT_THREADS, 0, s>>>((T *)y, stride, bias, rows, cols);
  })
  return cudaGetLastError();
}

extern "C" cudaError_t cosy_k_add_bias_gelu(cudaStream_t s, cosy_kdtype dt, void *y, int stride,
                                            const float *bias, int rows, int cols) {
  if (!cosyk_dt_ok(dt) || rows < 0 || cols < 0 || stride < cols) return cudaErrorInvalidValue;
  if ((int64_t)rows * cols == 0) return cudaSuccess;
  if (!y) return cudaErrorInvalidValue;
  const unsigned blocks = cosyk_blocks((int64_t)rows * cols, ACT_THREADS, ACT_MAX_BLOCKS);
  COSYK_DT_CASE(dt, T, {
    add_bias_gelu_kernel<T><<<blocks, ACT_THREADS, 0, s>>>((T *)y, stride, bias, rows, cols);
  })
  return cudaGetLastError();
}
