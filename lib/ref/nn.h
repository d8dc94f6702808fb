/* nn.h - small dense kernels shared by the front-end CPU references (s3tok.c, campplus.c).
 *
 * ref_nn_linear: out[r*os + o] = b[o] + sum_{k<K} in[r*is + k] * W[o*K + k]  (r < rows, o < O;
 * W row-major [O][K]; b may be NULL). fp32 products and sums; each dot product uses 4 partial sums
 * (k mod 4), combined as (s0 + s1) + (s2 + s3), then the bias is added. Tiles of output
 * channels are the OpenMP parallel unit (OPENMP=1 builds; calls under 4M multiply-adds stay
 * serial), so results do not depend on the number of threads. With AVX2 + FMA (checked at run
 * time) the sums are fused multiply-adds instead: for 16 rows or more one accumulator per output
 * in k order over 16-output packed weight tiles, else 8 lanes (k mod 8) summed at the end
 * (nn.c). */
#ifndef COSY_REF_NN_H
#define COSY_REF_NN_H

#include <stddef.h>

void ref_nn_linear(float *out, size_t os, const float *in, size_t is, int rows, int K,
                   const float *W, const float *b, int O);

/* exact GELU 0.5 x (1 + erf(x / sqrt 2)) (PyTorch's default), in place over n values */
void ref_nn_gelu(float *x, size_t n);

#endif
