/* campplus.h - CPU reference of the CAM++ speaker embedding (the official campplus.onnx; the
 * public PyTorch architecture is 3D-Speaker's CAMPPlus) and its input, the Kaldi fbank.
 *
 * Features (ref_kaldi_fbank; torchaudio.compliance.kaldi.fbank with num_mel_bins 80, dither 0,
 * 16 kHz, all other options at their defaults), x[0..n) at 16 kHz, n >= 400:
 *   T = 1 + (n - 400) / 160 frames (snip_edges); frame t is x[160 t .. 160 t + 400)
 *   f  = frame - mean(frame)                                  (remove_dc_offset)
 *   f[i] -= 0.97 f[i-1] for i = 399 .. 1, f[0] -= 0.97 f[0]   (preemphasis, replicate edge)
 *   f[i] *= (0.5 - 0.5 cos(2 pi i / 399))^0.85                (povey window)
 *   P[k] = |FFT_512(f zero-padded to 512)[k]|^2, k = 0 .. 256   (fp32 real FFT, cosy_rfft_exec;
 *          the square sum re^2 + im^2 in double)
 *   E[m] = ln(max(sum_k mb[m][k] P[k], FLT_EPSILON))          m = 0 .. 79
 *   Kaldi mel banks (fp32 like torchaudio): mel(f) = 1127 ln(1 + f / 700), low 20 Hz, high
 *   8000 Hz, delta = (mel(8000) - mel(20)) / 81; bank m spans left = mel(20) + m delta, centre
 *   + delta, right + 2 delta; mb[m][k] = max(0, min((mel(k 31.25) - left) / (centre - left),
 *   (right - mel(k 31.25)) / (right - centre))) for k < 256, mb[m][256] = 0.
 *   -> [T][80] frame-major. The official call (_extract_spk_embedding) then subtracts the mean over
 *   time of each bin: ref_campplus_embed takes that mean-removed fbank.
 *
 * Network (ref_campplus_embed), fbank [T][80] -> 192, M = 32 head channels, F = 80:
 *   head (FCM) on the [F][T] plane, channels-first images [C][F][T]:
 *     conv1 3x3 (1 -> M, pad 1) + ReLU; layer1, layer2: two BasicResBlocks each, the first with
 *     frequency stride 2: y = ReLU(conv2 3x3(ReLU(conv1 3x3 stride (2,1)(x))) + shortcut(x)),
 *     shortcut = 1x1 stride (2,1) conv (first block) or identity; conv2 3x3 stride (2,1) + ReLU.
 *     -> F/8 = 10 frequency rows; flattened to M*F/8 = 320 channels (index c * 10 + f) x T.
 *   every BatchNorm that follows a convolution is folded into it (the convs carry a bias);
 *   the others are y = x * scale + shift (model file, tools/frontend_convert.py).
 *   tdnn: Conv1d(320 -> C0, k 5, stride 2, pad 2) + ReLU                   T2 = (T - 1) / 2 + 1
 *   3 dense blocks b (n_b layers, kernel k_b, dilation d_b) of CAM dense layers (growth G,
 *   bottleneck Bn), the input x [Cin][T2] growing by G channels per layer:
 *     h  = ReLU(bn1(x));  h = ReLU(linear1 h + b)                            [Bn][T2]
 *     y  = local conv (k_b, dilation d_b, pad d_b (k_b - 1) / 2, no bias) of h  [G][T2]
 *     ctx[t] = mean_t' h[t'] + (sum of h over t's segment) / 100 (segments of 100 frames; the
 *              last one may be shorter and its sum is still divided by 100, see below)
 *     m  = sigmoid(cam2 ReLU(cam1 ctx + b1) + b2)                            [G][T2]
 *     x  = concat(x, y * m)
 *   transit b: x = linear(ReLU(bn(x))) + bias  (C -> C / 2); after transit 3 a ReLU (its BN is
 *   folded into transit 3).
 *   stats: [mean_t x ; sqrt(sum_t (x - mean)^2 / (T2 - 1))]                  2 C (double)
 *   embedding = dense stats + bias (its affine-free BN folded)               192
 *
 * Segment pooling of the last, partial segment. The PyTorch model pools with avg_pool1d(kernel 100,
 * stride 100, ceil_mode=True), which campplus.onnx holds as AveragePool(kernel 100, strides 100,
 * pads 0, ceil_mode 1, count_include_pad 1). The official front end runs that file under
 * onnxruntime 1.18.0 (the version CosyVoice's requirements pin), whose AveragePool divides the
 * window that hangs over the end by the full kernel size, as if the overhang were zero padding that
 * counts; PyTorch and later onnxruntime releases divide by the frames the window holds. The
 * embeddings the released model was trained and shipped with come from 1.18.0, so this is what is
 * computed here (and on the GPU, kernels/frontend.cu). On audio whose frame count after the tdnn
 * is not a multiple of 100 the two differ, the more the shorter the audio and the emptier the last
 * window: embedding rel L2 1.3e-2 at 0.8 s, 1.4e-3 at 11 s on the random test model
 * (tests/data/frontend/info.json). There is no option for the real-length average: nothing in the
 * official pipeline computes it.
 */
#ifndef COSY_REF_CAMPPLUS_H
#define COSY_REF_CAMPPLUS_H

#include <stdint.h>

#include "cosyvoice.h"
#include "model.h"

typedef struct ref_campplus ref_campplus; /* read-only after create */

/* COSY_ERR_UNSUPPORTED (message set) when the model file has no CAM++ model. The weights are
 * used in place (the file's F32 data): m must outlive the ref_campplus. */
cosy_status ref_campplus_create(const cosy_model *m, ref_campplus **out);
void ref_campplus_free(ref_campplus *c);

/* Kaldi fbank of 16 kHz audio: *fb malloc'd [*T][80]. n >= 400. */
cosy_status ref_kaldi_fbank(const float *x, int64_t n, float **fb, int32_t *T);
/* The same in pieces: the length check (*T frames, or COSY_ERR_INVALID_ARG), then frames
 * [t0, t1) into fb[t * 80 ..] (the others untouched; frames are independent, so threads may split
 * them and the result does not depend on the split). */
cosy_status ref_kaldi_fbank_check(int64_t n, int32_t *T);
cosy_status ref_kaldi_fbank_frames(const float *x, int64_t n, int32_t t0, int32_t t1, float *fb);

/* Embedding [192] of a mean-removed fbank [T][80], T >= 4 (at least 2 frames after the tdnn).
 * Optional outputs (NULL to skip): head [320][T] (channel index c*10+f), tdnn [C0][T2],
 * stats [2 C3]. */
cosy_status ref_campplus_embed(const ref_campplus *c, const float *fbank, int32_t T, float *emb,
                               float *head, float *tdnn, float *stats);

#endif
