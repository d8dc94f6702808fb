/* s3tok.h - CPU reference of the speech tokenizer v3 (the official speech_tokenizer_v3.onnx; the
 * public PyTorch architecture is S3TokenizerV3) and its input features, the whisper log-mel.
 *
 * Features (ref_whisper_logmel), 16 kHz mono x[0..n), n >= 201:
 *   xp        = reflect_pad(x, 200, 200)                 (torch.stft center=True, pad_mode reflect)
 *   w[i]      = 0.5 - 0.5 cos(2 pi i / 400)              periodic Hann, i < 400
 *   X[t][k]   = sum_i w[i] xp[160 t + i] e^{-2 pi i k i / 400},  t = 0 .. n/160 - 1 (the last
 *               STFT frame, t = n/160, is dropped), k = 0 .. 200        (fp32 FFT, ref/fft.c)
 *   P[t][k]   = re^2 + im^2
 *   M[m][t]   = sum_k fb[m][k] P[t][k]   fb = librosa slaney mel, 128 x 201, sr 16000, n_fft 400
 *               (cosy_mel_filterbank; whisper's mel_filters.npz "mel_128"), summed in double
 *   L         = log10(max(M, 1e-10));  L = max(L, max over all (m, t) of L - 8);  out = (L + 4) / 4
 *   -> [128][T] channels-first, T = n / 160 (100 frames per second).
 *   (fp32 real FFT, cosy_rfft_exec; the filterbank, window and plan are made once per process.)
 *   Frames are independent: ref_whisper_logmel_frames computes any range of them (threads may
 *   split the frames; the result does not depend on the split), ref_whisper_logmel_finish the
 *   floor and scaling from the max over all frames.
 *
 * Tokenizer (ref_s3tok_encode), mel [128][T] -> T4 tokens (25 Hz), S = width, H = S / 64 heads:
 *   conv1  Conv1d(128 -> S, k 3, stride 2, pad 1) + GELU        T1 = (T - 1) / 2 + 1
 *   conv2  Conv1d(S -> S, k 3, stride 2, pad 1) + GELU          T4 = (T1 - 1) / 2 + 1
 *   L blocks (pre-LN), x [T4][S]:
 *     h = LN(x) (attn_ln, eps)
 *     q = h Wq^T + bq,  k = h Wk^T (no bias),  v = h Wv^T + bv            each [T4][H][64]
 *     rotary on q and k (NeoX halves): for d < 32, f_d = 1 / theta^(2d/64) (fp32),
 *       a = t f_d (fp32), c = cos a, s = sin a;
 *       q'[d] = q[d] c - q[d+32] s,  q'[d+32] = q[d+32] c + q[d] s        (same for k)
 *     fsmn[t][c] = v[t][c] + sum_{j<K} Wf[c][j] v[t + j - (K-1)/2][c]   (depthwise, zero pad; on
 *                  the un-rotated v)
 *     attention per head: softmax_j((q'_t 64^-1/4) . (k'_j 64^-1/4)) v_j  (no mask: one
 *       unpadded utterance)
 *     x = x + (att Wo^T + bo) + fsmn
 *     x = x + W2 GELU(W1 LN(x) + b1) + b2                                 (mlp_ln; 4S hidden)
 *   FSQ: h = x Wp^T + bp [T4][8]; d_i = round_half_even(tanh(h_i) * fsq_scale) + 1 in {0, 1, 2};
 *        token = sum_i d_i 3^i  in [0, 6561).
 * GELU is exact (erf). LN statistics in double. Linear layers: ref/nn.h.
 *
 * The official call (_extract_speech_token) refuses audio longer than 30 s and passes the whole
 * log-mel with its length; s3tok_check_length enforces the same limit. */
#ifndef COSY_REF_S3TOK_H
#define COSY_REF_S3TOK_H

#include <stdint.h>

#include "cosyvoice.h"
#include "model.h"

#define S3TOK_SR 16000
#define S3TOK_HOP 160
#define S3TOK_MAX_SECONDS 30

typedef struct ref_s3tok ref_s3tok; /* read-only after create */

/* COSY_ERR_UNSUPPORTED (message set) when the model file has no speech tokenizer. The weights
 * are used in place (the file's F32 data): m must outlive the ref_s3tok. */
cosy_status ref_s3tok_create(const cosy_model *m, ref_s3tok **out);
/* *dst = the data of a front-end tensor (F32, in the mapped file); printf-style name. */
cosy_status ref_fe_tensor(const cosy_model *m, const float **dst, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void ref_s3tok_free(ref_s3tok *s);

/* Whisper log-mel of 16 kHz audio: *mel = malloc'd [128][*T], *T = n / 160. n >= 401. */
cosy_status ref_whisper_logmel(const float *x, int64_t n, float **mel, int32_t *T);
/* The same in pieces: the length check (*T = n / 160 frames, or COSY_ERR_INVALID_ARG); frames
 * [t0, t1) of the log10 mel before the floor into mel[m * T + t] (the other frames untouched),
 * *max_out = their largest value (-inf for none); then, once every frame is done, the floor at
 * (max over all frames - 8) and (L + 4) / 4. */
cosy_status ref_whisper_logmel_check(int64_t n, int32_t *T);
cosy_status ref_whisper_logmel_frames(const float *x, int64_t n, int32_t t0, int32_t t1,
                                      float *mel, float *max_out);
void ref_whisper_logmel_finish(float *mel, int32_t T, float lmax);

/* Tokens of a log-mel [128][T] (T >= 1): *tokens malloc'd [*n_tokens]. Optional outputs (NULL to
 * skip), caller-allocated for T4 rows: proj [T4][8] (FSQ projection before tanh), enc [T4][S]
 * (encoder output), conv2 [T4][S] (conv2 before its GELU), block0 [T4][S]. */
cosy_status ref_s3tok_encode(const ref_s3tok *s, const float *mel, int32_t T, int32_t **tokens,
                             int32_t *n_tokens, float *proj, float *enc, float *conv2,
                             float *block0);
int ref_s3tok_width(const ref_s3tok *s);

#endif
