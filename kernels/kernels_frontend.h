/* kernels_frontend.h - launchers of the voice front end's CUDA kernels (kernels/frontend.cu; plain C,
 * callable from C and C++). Used by lib/gpu/frontend.c: the speech tokenizer v3 and CAM++ on the
 * GPU, whose math is lib/ref/s3tok.h and lib/ref/campplus.h.
 *
 * Conventions: those of kernels.h (first argument the stream, asynchronous launch; the return
 * value is cudaErrorInvalidValue for arguments a caller could get wrong, else cudaGetLastError()
 * after the launch; nothing allocates, synchronizes, prints or exits; zero rows is a valid no-op;
 * row-major tensors listed outermost first). Everything here is fp32 (storage and arithmetic).
 */
#ifndef COSY_FRONTEND_KERNELS_H
#define COSY_FRONTEND_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1-D im2col (a Conv1d as one GEMM with the weight [Co][Ci][k]):
 *   cols[t][ci*k + j] = x[tt*ts + ci*cs] with tt = t*stride + j*dil - pad, 0 when tt is outside
 *   [0, Ti); t < To, ci < Ci, j < k.
 * x is read through its strides: channels-first [Ci][Ti] is ts = 1, cs = Ti; frame-major rows of
 * a wider buffer [Ti][ld] are ts = ld, cs = 1. cols [To][Ci*k] contiguous. */
cudaError_t cosy_k_fe_im2col1d(cudaStream_t s, const float *x, int64_t ts, int64_t cs, int Ti,
                               int Ci, int To, int k, int stride, int dil, int pad, float *cols);

/* 2-D im2col of a k x k conv with stride (sf, 1) and padding k/2 on both axes, for output
 * frequency rows [fo0, fo0 + n_fo):
 *   cols[(fo - fo0)*T + t][(ci*k + kf)*k + kt] = x[f*fs + tt*ts + ci*cs]
 *   with f = fo*sf + kf - k/2, tt = t + kt - k/2 (0 outside [0, Fi) x [0, T)),
 *   cols[r][j] = 0 for Ci*k*k <= j < ldc (rows padded for the GEMM's alignment).
 * x is any layout through its strides (the head's images [F][T][C]: fs = T*C, ts = C, cs = 1;
 * an fbank [T][F] as a one-channel image: fs = 1, ts = F). cols [n_fo*T][ldc], ldc >= Ci*k*k. */
cudaError_t cosy_k_fe_im2col2d(cudaStream_t s, const float *x, int64_t fs, int64_t ts, int64_t cs,
                               int Fi, int T, int Ci, int k, int sf, int fo0, int n_fo,
                               float *cols, int ldc);

/* LayerNorm with affine: y[r][d] = (x[r][d] - mean_r) / sqrt(var_r + eps) * w[d] + b[d], mean and
 * biased var over d < D. x, y [rows][D] (y may equal x); w, b [D]. */
cudaError_t cosy_k_fe_layernorm(cudaStream_t s, const float *x, const float *w, const float *b,
                                float *y, int rows, int D, float eps);

typedef enum cosy_fe_act {
  COSY_FE_GELU = 0,     /* y = 0.5 x (1 + erf(x / sqrt(2)))  (exact GELU) */
  COSY_FE_RELU = 1,     /* y = max(x, 0) */
  COSY_FE_ADD_RELU = 2  /* y = max(x + x2, 0) */
} cosy_fe_act;

/* y[r][c] = op(x[r][c] (, x2[r][c])) for r < rows, c < cols; x and x2 rows ldx apart, y rows ldy
 * apart (y may equal x or x2). x2 only for COSY_FE_ADD_RELU. */
cudaError_t cosy_k_fe_act(cudaStream_t s, cosy_fe_act op, const float *x, const float *x2,
                          int64_t ldx, float *y, int64_t ldy, int rows, int cols);

/* FSMN memory of the speech tokenizer, added into the residual stream:
 *   x[t][c] += v[t][c] + sum_{j<K} w[c][j] v[t + j - (K-1)/2][c]   (zero outside [0, N))
 * x [N][ldx], v [N][ldv] (e.g. the v column block of a fused qkv), w [C][K]. */
cudaError_t cosy_k_fe_fsmn_add(cudaStream_t s, float *x, int64_t ldx, const float *v, int64_t ldv,
                               const float *w, int N, int C, int K);

/* FSQ: token[t] = sum_{i<8} (rint(tanh(p[t][i]) * scale) + 1) 3^i  (rint: half to even).
 * p [N][8], tokens [N] int32. */
cudaError_t cosy_k_fe_fsq(cudaStream_t s, const float *p, float scale, int N, int32_t *tokens);

/* y[t][c] = max(x[t][c] * sc[c] + sh[c], 0) for c < C, and y[t][c] = 0 for C <= c < C_pad (so a
 * GEMM can read C_pad columns against a weight whose columns past C are zero); x [T][ldx],
 * y [T][ldy] with ldy >= C_pad >= C, sc, sh [C]. */
cudaError_t cosy_k_fe_bn_relu(cudaStream_t s, const float *x, int64_t ldx, const float *sc,
                              const float *sh, float *y, int64_t ldy, int T, int C, int C_pad);

/* CAM context: ctx[g][c] = mean_{t<T} h[t][c] + (sum_{t in segment g} h[t][c]) / seg, segments
 * [g*seg, min((g+1)*seg, T)), g < ceil(T / seg) <= 64: the last segment, when shorter than seg, is
 * still divided by seg (campplus.onnx under onnxruntime 1.18.0; lib/ref/campplus.h).
 * h [T][C] contiguous, ctx [nseg][C]. */
#define COSY_FE_MAX_SEGS 64
cudaError_t cosy_k_fe_seg_ctx(cudaStream_t s, const float *h, int T, int C, int seg, float *ctx);

/* CAM mask: out[t][g] = y[t][g] * sigmoid(logit[t / seg][g]) with sigmoid(u) = 1 / (1 + e^-u).
 * y [T][G] contiguous, logit [nseg][G], out [T][ldo] (e.g. the new columns of a dense block). */
cudaError_t cosy_k_fe_cam_mask(cudaStream_t s, const float *y, const float *logit, int seg,
                               float *out, int64_t ldo, int T, int G);

/* Statistics pooling of relu(x): st[c] = mean_t r[t][c], st[C + c] = sqrt(sum_t (r - mean)^2 /
 * (T - 1)), r = max(x, 0); x [T][ldx], st [2C]. T >= 2. */
cudaError_t cosy_k_fe_stats(cudaStream_t s, const float *x, int64_t ldx, int T, int C, float *st);

/* Head flatten: out[t][m*F + f] = in[f][t][m]; in [F][T][M], out [T][M*F]. */
cudaError_t cosy_k_fe_flatten(cudaStream_t s, const float *in, int F, int T, int M, float *out);

#ifdef __cplusplus
}
#endif

#endif
