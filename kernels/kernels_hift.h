/* kernels_hift.h - launchers of the HiFT vocoder kernels (internal; plain C, callable from C and
 * C++). kernels/conv.cu (causal conv1d on tensor cores, the fp64 F0 predictor convs), stft.cu
 * (STFT of the source, iSTFT of the output), source.cu (default noise, SineGen2 phase, source
 * signal). The math each kernel reproduces is lib/ref/hift.c's; see the header comment of each
 * .cu file for the thread mapping and numerics.
 *
 * Conventions (as kernels.h): the first argument is the stream, launches are asynchronous, the
 * return value is cudaErrorInvalidValue for arguments a caller could get wrong, else
 * cudaGetLastError() after the launch; nothing here allocates, synchronizes, prints or exits.
 * Activations are channels-first fp32 rows: "[C][ld]" is C rows, ld floats apart. */
#ifndef COSY_KERNELS_HIFT_H
#define COSY_KERNELS_HIFT_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kdevice.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ============================== conv.cu ====================================================== */

/* Pre-activation applied to every input value as it is loaded (after zero padding: each of these
 * maps 0 to 0, so padding before or after the activation is the same). */
typedef enum cosy_hift_act {
  COSY_HACT_NONE = 0,
  COSY_HACT_LEAKY = 1,       /* v > 0 ? v : slope v */
  COSY_HACT_SNAKE = 2,       /* v + 1/(alpha[ci] + 1e-9) sin(alpha[ci] v)^2 */
  COSY_HACT_MEAN3_LEAKY = 3  /* m = ((in + in2) + in3) / 3 (fp32, in that order), then leaky */
} cosy_hift_act;

/* Arithmetic of the conv's products (accumulation is always fp32):
 *   TF32:   operands rounded to TF32 (10-bit mantissa, round-to-nearest), one mma per product;
 *           relative error of a dot product ~ 3e-4.
 *   3XTF32: each operand split into big + small TF32 parts, big*big + big*small + small*big
 *           (three mma): fp32-level accuracy (~1e-6), three times the tensor work. */
typedef enum cosy_hift_prec {
  COSY_HPREC_TF32 = 0,
  COSY_HPREC_3XTF32 = 1,
  /* TF32 for weights the caller has already rounded to TF32 (cosy_hift_tf32_round): the kernel
   * does not round them again at each fragment load; the same bits as COSY_HPREC_TF32 with the
   * unrounded weights (the rounding is the same: to nearest, ties away from zero) */
  COSY_HPREC_TF32_ROUNDED = 2,
  /* fp16 operands (mma.sync m16n8k16, fp32 accumulation; kernels/conv.cu conv2_kernel, OpF16): the
   * weights from wh / wh_scale (cosy_hift_conv_pack_f16: fp16 with an exact power-of-two scale
   * per output channel, undone in fp32 before the bias), the activations rounded to fp16 (to
   * nearest even, saturated to +-65504, NaN kept) when staged; a saturated activation sets the
   * conv's flag (cosy_hift_conv.sat). Operands of 11 significant bits as TF32's,
   * so the error of a dot product is TF32's (~3e-4 relative) at twice the tensor rate and half
   * the fragment loads per product. The activations must stay within +-65504 (larger ones are
   * clamped there, never inf); values below 6.1e-5 in magnitude keep an absolute error <= 2^-25
   * (fp16 subnormals). Not bit-identical to the TF32 kernels (another rounding, another order).
   * A launch it cannot take (a strip and one tap beyond dev->smem_block) runs TF32 from wp when
   * every conv has it, else cudaErrorInvalidValue. */
  COSY_HPREC_F16 = 3
} cosy_hift_prec;

/* Round n floats (host) to TF32 in place exactly as the tensor-core path does (cvt.rna.tf32.f32:
 * 10 mantissa bits, to nearest, ties away from zero; infinities and NaNs unchanged), for weights
 * given to the convs with COSY_HPREC_TF32_ROUNDED. */
void cosy_hift_tf32_round(float *x, size_t n);

/* Tile of the conv kernel: weights are packed in blocks of these. */
#define COSY_HCONV_MAXG 16 /* independent convs in one launch (cosy_k_hift_conv's n) */
#define COSY_HCONV_BM 64 /* output channels per block (co_pad is a multiple) */
#define COSY_HCONV_CK 8  /* input channels per reduction step (ci_pad is a multiple) */
#define COSY_HCONV_CKH 16 /* input channels per reduction step of COSY_HPREC_F16 (wh's ci pad) */

/* One causal conv1d (PyTorch Conv1d semantics on a zero-extended, optionally upsampled input):
 *
 *   X[ci][u]  = act(in[ci][u / up])  for 0 <= u < len_in * up, else 0      (nearest upsample x up)
 *   p(t)      = t                          (reflect = 0)
 *             = t - 1, and p(0) = 1        (reflect = 1: ReflectionPad1d((1,0)) of the output)
 *   v[co][t]  = bias[co] + sum_{ci, j} w[co][ci][j] X[ci][p(t) stride + j dil - pad_left]
 *               (+ res[co][t]) (+ res2[co][t])                             for t < n_out
 *   out[co][t] = v  (if out),   out_act[co][t] = oact(v) (if out_act: the next conv's input)
 *
 * pad_left zeros on the left (causal 'left' padding, or the stride-1 pad of the source downs);
 * the right side is the zero extension beyond len_in ('right' look-ahead padding when final: the
 * caller passes len_in = the valid frames). Weights are PACKED by cosy_hift_conv_pack:
 * wp[j][co_pad][ci_pad] (padding zero), co_pad a multiple of COSY_HCONV_BM, ci_pad of
 * COSY_HCONV_CK. bias [co] fp32. reflect needs stride 1. out may equal res or res2 (in-place
 * residual: each element is read before it is written by the
 * same thread); out/out_act must not alias in/in2/in3. 1 <= k <= 32, stride, dil, up >= 1. */
typedef struct cosy_hift_conv {
  const float *in, *in2, *in3; /* [ci][ld_in]; in2/in3 only for COSY_HACT_MEAN3_LEAKY */
  int ld_in, len_in, ci, up;
  int act;                     /* cosy_hift_act of the input */
  float slope;                 /* leaky slope */
  const float *alpha;          /* snake alpha [ci] */
  const float *alpha_inv;      /* 1/(alpha + 1e-9) [ci] in fp32 (precomputed), or NULL */
  const float *wp;             /* packed weights [k][co_pad][ci_pad] */
  const float *bias;           /* [co] or NULL */
  int co, co_pad, ci_pad, k, dil, stride, pad_left, reflect;
  float *out;                  /* [co][ld_out] or NULL (then out_act is needed) */
  int ld_out, n_out;
  const float *res, *res2;     /* [co][ld_res], [co][ld_res2] or NULL */
  int ld_res, ld_res2;
  float *out_act;              /* [co][ld_out_act] or NULL: oact(v), fused post-activation */
  int ld_out_act;
  int oact;                    /* COSY_HACT_NONE or COSY_HACT_SNAKE (per output channel) */
  const float *oalpha, *oalpha_inv; /* [co] for oact = COSY_HACT_SNAKE */
  /* COSY_HPREC_F16 only (else ignored): the fp16 weights [k][co_pad][cosy_hift_conv_pad(ci,
   * COSY_HCONV_CKH)] (16-byte aligned) and the scale [co] that undoes their per-channel power
   * of two (cosy_hift_conv_pack_f16); wp may then be NULL (no TF32 fallback) */
  const uint16_t *wh;
  const float *wh_scale;
  /* COSY_HPREC_F16 only (else ignored), may be NULL: a device int that the launch sets to 1 when
   * some activation it stages as an fp16 operand becomes +-65504, fp16's largest finite value:
   * every |x| > 65504 (saturated there, where TF32 keeps fp32's range; +-inf included) and the
   * values in (65488, 65504] that round to it (checked on the packed operands: cheaper, and on
   * the safe side); NaN never. Left alone otherwise, never cleared by the kernel. Convs of one
   * launch may share an int or have their own (the vocoder: one per job of a batch). The fp16
   * weights cannot saturate (each channel's largest is scaled into [0.5, 1):
   * cosy_hift_conv_pack_f16). */
  int *sat;
  /* COSY_HPREC_F16 only (else ignored), may be NULL: a device buffer of
   * cosy_hift_conv_xh_halves(this) halves (16-byte aligned) that the launch may use for the
   * staged kernel (kernels/conv.cu conv3_kernel): a first kernel writes the activated input there
   * in fp16, time-major (xh[u][ci], ci padded to 16 with zeros), then the conv copies its strips
   * from it by cp.async through a ring of shared-memory stages. The same bits as without it.
   * Convs of one launch need distinct buffers; the buffer must not be in use by another stream
   * while the launch runs. */
  uint16_t *xh;
} cosy_hift_conv;
/* the halves a conv's xh needs: len_in * (ci rounded up to 16) */
size_t cosy_hift_conv_xh_halves(const cosy_hift_conv *c);
/* Whether an F16 launch whose convs all have xh runs the staged kernel: COSY_HCONV_STAGED_AUTO
 * (the default) where it is the faster one (kernels/conv.cu conv3_prefer: Snake and mean-of-3
 * inputs, the leaky one on 64 x 64 tiles), ALWAYS wherever it can, OFF never (the
 * register-staged conv2_kernel). Every choice gives the same bits. Process-wide, for the tests
 * and the benchmark; returns the previous mode (other values leave it). */
#define COSY_HCONV_STAGED_OFF 0
#define COSY_HCONV_STAGED_AUTO 1
#define COSY_HCONV_STAGED_ALWAYS 2
int cosy_hift_conv_staged(int mode);
/* whether cosy_k_hift_conv_split(.., convs, n, COSY_HPREC_F16, ..) would run the staged kernel on
 * dev under the current mode (host only): 1 yes, 0 no */
int cosy_hift_conv_staged_runs(const cosy_kdev *dev, const cosy_hift_conv *convs, int n);

/* Pack a PyTorch Conv1d weight w[co][ci][k] (host) into wp[k][co_pad][ci_pad] (host, zeroed
 * padding). co_pad/ci_pad: the rounded-up sizes (cosy_hift_conv_pad). */
void cosy_hift_conv_pack(const float *w, int co, int ci, int k, float *wp);
int cosy_hift_conv_pad(int n, int multiple);
/* Pack w[co][ci][k] (host) for COSY_HPREC_F16: wh[k][co_pad][ci_pad16] IEEE fp16 bits (host,
 * ci_pad16 = cosy_hift_conv_pad(ci, COSY_HCONV_CKH), zeroed padding) of w[o][i][j] 2^-e_o, where
 * 2^e_o is the power of two with max_{i,j} |w[o][i][j]| in [2^(e_o - 1), 2^e_o) (e_o = 0 for an
 * all-zero or non-finite channel), and wh_scale[o] = 2^e_o (co floats). The scaling is exact and
 * puts each channel's largest weight in [0.5, 1), so that small weights stay fp16 normals; the
 * rounding to fp16 is to nearest, ties to even. */
void cosy_hift_conv_pack_f16(const float *w, int co, int ci, int k, uint16_t *wh,
                             float *wh_scale);

/* Run n (1..COSY_HCONV_MAXG) independent convs in one launch (they must not depend on each other). The tensor
 * cores do the products (mma.sync m16n8k8 TF32; m16n8k16 fp16 for COSY_HPREC_F16); prec picks
 * TF32, 3xTF32 or F16 (cosy_hift_prec). Thread mapping: a
 * block of 128 threads computes 64 output channels x 64 time steps of one conv; grid
 * (time tiles, channel tiles, conv). Shared memory: kt * 64 * 8 + planes * 8 * strip floats
 * (strip = 63 stride + (k-1) dil + 3 input columns; planes 1 for TF32, 2 for 3xTF32): ~8 KB
 * (k 3) .. ~121 KB (k 30, stride 15, 3xTF32) with kt = k;
 * where that exceeds dev->smem_block the weight slab holds kt < k taps at a time
 * (same result; conv.cu). COSY_HPREC_F16: kt * 64 * 16 halves + a strip of (16 NTW - 1) stride +
 * (k-1) dil + 3 columns of 48 bytes (NTW 8 or 4: the tile, kernels/conv.cu conv2_kernel), the
 * same bytes per tap as TF32 for twice the input channels per chunk; never split.
 * cudaErrorInvalidValue when not even one tap fits. dev: the device the
 * stream belongs to (kdevice.h); cosy_k_hift_conv_prepare must have run for it. */
cudaError_t cosy_k_hift_conv(cudaStream_t s, const cosy_kdev *dev, const cosy_hift_conv *convs,
                             int n, int prec);
/* Allows the conv kernels the device's shared memory per block (dev->smem_block_hw, the same
 * value for every engine on the device; the CUDA function attribute is per device): once per
 * device before the first conv on it, with that device current. */
cudaError_t cosy_k_hift_conv_prepare(const cosy_kdev *dev);
/* When a launch has fewer than 3 blocks per SM (dev->n_sm; the 256-channel stage-0 convs) and
 * every conv has >= 4 chunks of 8 input channels, the block doubles to 256 threads: two warp
 * groups reduce alternate chunks and add their partial sums through shared memory
 * (deterministic), when two regions fit dev->smem_block. Tuning override for measurements: 0
 * automatic (default), 1 never, 2 always. Process-wide. */
void cosy_hift_conv_tuning(int split_mode);
/* cosy_k_hift_conv with the split chosen by the caller for this launch only: 0 automatic (as
 * above), 1 never, 2 always (when the shared memory allows). A conv's values depend only on its
 * own descriptor and the split, not on the other convs of the launch nor on the device: callers
 * that need results independent of the grouping (the streaming vocoder's batches) pass 1.
 * cosy_k_hift_conv is this with the process-wide mode of cosy_hift_conv_tuning. */
cudaError_t cosy_k_hift_conv_split(cudaStream_t s, const cosy_kdev *dev,
                                   const cosy_hift_conv *convs, int n, int prec, int split_mode);
/* The plan of such a launch on dev in precision prec, launching nothing (host only): the dynamic
 * shared memory it asks for (0: the arguments are invalid or it cannot fit dev), the taps per
 * weight slab of each conv (kt[n], optional) and whether the block splits (optional). For
 * COSY_HPREC_F16: the F16 kernel's plan (never split), or the TF32 fallback's. */
size_t cosy_k_hift_conv_plan(const cosy_kdev *dev, const cosy_hift_conv *convs, int n,
                             int split_mode, int prec, int *kt, int *split);

/* Which kernel runs the convs (kernels/conv.cu; process-wide, for the benchmark and the tests;
 * the engine's default is one line there, g_conv_kernel). Every choice gives the same bits for
 * every conv (the same products in the same order per output); a launch the chosen kernel does
 * not handle (3xTF32, a mean-of-3 input, a split reduction, a strip longer than 256 columns, a
 * weight slab of all k taps that does not fit dev->smem_block) runs COSY_HCONV_K_OLD.
 *   COSY_HCONV_K_OLD   block 64 co x 64 time, warp 32 x 32, swizzled strip, two barriers a chunk
 *                      (the split reduction, the tap groups, 3xTF32)
 *   COSY_HCONV_K_W128  block 64 x 128, warp 32 x 64, padded strip, incremental addresses, one
 *                      slab and strip (two barriers a chunk)
 *   COSY_HCONV_K_W64   the same with block 64 x 64, warp 32 x 32
 *   COSY_HCONV_K_AUTO  (the engine's default) per launch W128 when an input has >= 256 channels
 *                      and its 64 x 128 tiles give every SM two blocks, else W64 (measured
 *                      fastest per launch: kernels/conv.cu); for F16 also W128 where every
 *                      conv's halo (k - 1) dil is >= 8 columns (conv2_f16_auto) */
#define COSY_HCONV_K_OLD 0
#define COSY_HCONV_K_W128 1
#define COSY_HCONV_K_W64 2
#define COSY_HCONV_K_AUTO 3
/* sets the kernel choice (out-of-range values leave it), returns the previous one */
int cosy_hift_conv_kernel(int which);
/* the kernel (COSY_HCONV_K_*) that cosy_k_hift_conv_split(.., convs, n, prec, split_mode) runs on
 * dev under the current choice (COSY_HCONV_K_AUTO resolved); -1 when the launch would be refused
 * (host only, launches nothing). COSY_HPREC_F16: W128 or W64 for the F16 kernel's tile (it has
 * no "old" variant: COSY_HCONV_K_OLD chooses W64 there; a mean-of-3 input runs W64), or what the
 * TF32 fallback runs, see cosy_hift_conv_f16_runs. */
int cosy_hift_conv_kernel_for(const cosy_kdev *dev, const cosy_hift_conv *convs, int n, int prec,
                              int split_mode);
/* whether cosy_k_hift_conv(_split)(.., COSY_HPREC_F16) runs these convs in fp16 on dev (1), falls
 * back to TF32 (0) or refuses them (-1) (host only) */
int cosy_hift_conv_f16_runs(const cosy_kdev *dev, const cosy_hift_conv *convs, int n);

/* fp64 conv of the F0 predictor with ELU (fp64 tensor cores: mma.sync m8n8k4 f64):
 *   out[co][t] = elu(bias[co] + sum_{ci,j} w[co][ci][j] X[ci][t + j - pad_left])   t < n_out
 *   X[ci][u] = in[ci][u] for 0 <= u < len_in, else 0;  elu(v) = v > 0 ? v : expm1(v)
 * in: fp32 (in_f32, e.g. the mel) or fp64 (in_f64), exactly one non-NULL, [ci][ld_in];
 * w [co][ci][k] fp32 (the file's values, widened exactly), bias [co] fp32; out fp64 [co][ld_out].
 * Accumulation in fp64 (the order differs from the CPU's: ~1e-16 relative). k <= 4. */
cudaError_t cosy_k_hift_conv64(cudaStream_t s, const float *in_f32, const double *in_f64,
                               int ld_in, int len_in, int ci, const float *w, const float *bias,
                               int co, int k, int pad_left, double *out, int ld_out, int n_out);

/* F0 classifier: f0[t] = (float)|b + sum_c w[c] h[c][t]| (fp64; 8 partial sums over channel
 * slices added in order).
 * h [c][ld_h] fp64, w [c] fp32, f0 [n] fp32. */
cudaError_t cosy_k_hift_f0_classify(cudaStream_t s, const double *h, int ld_h, int c,
                                    const float *w, float b, float *f0, int n);

/* Grouped F0 predictor (the streaming vocoder: every job of a batch in one launch per layer).
 * One job's input and output of a cosy_k_hift_conv64 layer; the layer's weights, sizes, k and
 * pad_left are the group's. */
#define COSY_HCONV64_MAXG 64 /* jobs per launch of the grouped F0 launchers (more: several) */
typedef struct cosy_hift_conv64 {
  const float *in_f32;  /* [ci][ld_in] fp32 input (the mel) ...                              */
  const double *in_f64; /* ... or fp64: exactly one non-NULL, the same one for every job      */
  int ld_in, len_in;
  double *out;          /* [co][ld_out] fp64, t < n_out */
  int ld_out, n_out;
} cosy_hift_conv64;

/* cosy_k_hift_conv64 for n >= 1 jobs that share ci, w, bias, co, k and pad_left, in launches of
 * up to COSY_HCONV64_MAXG jobs (grid: time tiles of the longest job, channel tiles, job). Each
 * output value is computed exactly as cosy_k_hift_conv64 computes it for that job alone (the
 * same products in the same order): bit-identical, whatever the other jobs and the split into
 * launches. The jobs must not write each other's inputs or outputs. Every job is checked before
 * anything is launched (cudaErrorInvalidValue: as cosy_k_hift_conv64's checks, or jobs mixing
 * fp32 and fp64 inputs). */
cudaError_t cosy_k_hift_conv64_group(cudaStream_t s, const cosy_hift_conv64 *jobs, int n, int ci,
                                     const float *w, const float *bias, int co, int k,
                                     int pad_left);

/* One job of the grouped classifier: h [c][ld_h] fp64 -> f0 [n] fp32. */
typedef struct cosy_hift_f0cls {
  const double *h;
  int ld_h, n;
  float *f0;
} cosy_hift_f0cls;

/* cosy_k_hift_f0_classify for n_jobs >= 1 jobs sharing c, w and b, in launches of up to
 * COSY_HCONV64_MAXG jobs; bit-identical to the job alone. Checked before any launch. */
cudaError_t cosy_k_hift_f0_classify_group(cudaStream_t s, const cosy_hift_f0cls *jobs, int n_jobs,
                                          int c, const float *w, float b);

/* ============================== source.cu ==================================================== */

/* The default noise generator of ref_hift_default_noise (bit-identical): rows[r][h] =
 * u24(0x5EED51AE00000000 ^ ((first_row + r) * (nb+1) + h)) for r < n_rows, h <= nb; rand_ini
 * (may be NULL) [nb+1]. */
cudaError_t cosy_k_hift_noise(cudaStream_t s, int nb, int64_t first_row, int64_t n_rows,
                              float *rand_ini, float *rows);

/* SineGen2 frame values of ref_hift_source (fp32 semantics of the reference):
 *   rad_h[k] = fmodf(f0[k] (h+1) / sr, 1)  (+ rand_ini[h] on the taps at sample 0: never, R > 2)
 *   radd = 0.5 rad + 0.5 rad;  cum = fp32(sum_{j<=k} radd[j]) accumulated in fp64 sequentially
 *   ph = ((cum * 2) * pi_f) * R;  sine[k][h] = (float)sin((double)ph) * amp
 * f0 [T] fp32, rand_ini [nb+1] (device) or NULL for the default generator's; sine [T][nb+1].
 * One block; one thread per harmonic runs the fp64 scan (exactly the reference's order). */
cudaError_t cosy_k_hift_sine(cudaStream_t s, const float *f0, int T, int nb, int R, float sr,
                             float amp, const float *rand_ini, float *sine);
/* The same for the frames [k_first, k_first + T) of a longer signal (streaming): f0 [T] and sine
 * [T][nb+1] hold those frames; the rand_ini taps use the absolute sample indices; cum_in [nb+1]
 * (device fp64, or NULL for zeros) holds the running sums after frame k_first - 1, cum_out
 * [nb+1] (device, may be NULL or equal cum_in) gets those after frame k_first + T - 1. Split
 * into calls this way, the values are bit-identical to one call over all frames.
 * cosy_k_hift_sine is this with k_first = 0 and no sums in or out. */
cudaError_t cosy_k_hift_sine_at(cudaStream_t s, const float *f0, int T, int nb, int R, float sr,
                                float amp, const float *rand_ini, int64_t k_first,
                                const double *cum_in, double *cum_out, float *sine);

/* The source samples i in [i0, i0 + n) (absolute sample index; frame k = i / R):
 *   uv = f0[k] > thr;  namp = uv ? sigma : amp_unvoiced
 *   x_h = sine[k][h] uv + namp U[i][h]     (fp32, no contraction)
 *   s[i - i0] = (float)tanh((double)(float)(lin_b + sum_h lin_w[h] x_h))   (fp64 sum, h ascending)
 * U: rows [n][nb+1] for the samples [i0, i0+n) (device), or NULL for the default generator.
 * lin_w [nb+1] fp32 (device). */
cudaError_t cosy_k_hift_source(cudaStream_t s, const float *f0, const float *sine, int nb, int R,
                               int64_t i0, int64_t n, const float *U, const float *lin_w,
                               float lin_b, float thr, float sigma, float amp_unvoiced,
                               float *out);
/* The same with f0 [.] and sine [.][nb+1] holding the frames from k_base on (row k - k_base for
 * absolute frame k; i0 / R >= k_base); cosy_k_hift_source is this with k_base = 0. */
cudaError_t cosy_k_hift_source_at(cudaStream_t s, const float *f0, const float *sine, int nb,
                                  int R, int64_t i0, int64_t n, int64_t k_base, const float *U,
                                  const float *lin_w, float lin_b, float thr, float sigma,
                                  float amp_unvoiced, float *out);

/* ============================== stft.cu ====================================================== */

/* STFT of ref_hift_stft (n_fft 16, hop 4, periodic Hann, center + reflect padding, onesided):
 * frames [0, F) of the signal x [n] (n >= 9; F <= n/4 + 1): re = rows [0, 9), im = rows [9, 18)
 * of out [18][ld_out]. fp64 DFT of the fp32 windowed samples, like the reference. */
cudaError_t cosy_k_hift_stft(cudaStream_t s, const float *x, int64_t n, int64_t F, float *out,
                             int ld_out);

/* The vocoder's output head and iSTFT:
 *   mag = min(expf(post[b][f]), 100), ph = sinf(post[9 + b][f]),  X = mag cos ph + i mag sin ph
 *   (raw = 1: no head, post holds Re X in rows [0, 9) and Im X in rows [9, 18): the plain iSTFT,
 *   for the round-trip test)
 *   y[t] = ola[t + 8] / env[t + 8], t < n_out (n_out <= 4 (F-1)): overlap-add (hop 4) of the
 *   per-frame irfft (1/16 scale, imaginary parts of bins 0 and 8 ignored) times the window,
 *   divided by the overlap-added squared window, in fp64 in the reference's order; then clamped to
 *   +-limit. post [18][ld_post] fp32 (conv_post output, F frames), y [n_out] fp32. */
cudaError_t cosy_k_hift_istft(cudaStream_t s, const float *post, int ld_post, int64_t F,
                              int64_t n_out, float limit, int raw, float *y);

#ifdef __cplusplus
}
#endif

#endif
