/* audio.h - WAV I/O, sample-rate conversion and the flow's prompt mel (docs/model.md section 5) - internal API.
 *
 * Every function returns a cosy_status and sets cosy_last_error() on failure. Memory handed back
 * through float ** out-pointers is malloc'd: free it with free() (cosy_free).
 * See audio.c for the maths and the choices made.
 */
#ifndef COSY_AUDIO_H
#define COSY_AUDIO_H

#include <stdint.h>

#include "cosyvoice.h"

/* ---------------------------------------------------------------------------------- WAV files */

/* Largest WAV file cosy_wav_read accepts (bytes). */
#define COSY_WAV_MAX_BYTES ((int64_t)2 << 30)

/* Read a RIFF/WAVE file: PCM 8 (unsigned), 16, 24, 32-bit integer or IEEE float 32/64-bit, plain
 * or WAVE_FORMAT_EXTENSIBLE, any number of channels (mixed to mono by their mean). Integers are
 * scaled by 1/2^(bits-1) (8-bit: (x-128)/128), as soundfile/torchaudio do; float samples are
 * passed through unchanged. *pcm is malloc'd (non-NULL even when *n == 0).
 * Errors: COSY_ERR_IO (cannot open/read), COSY_ERR_MODEL_FORMAT (not a WAV, corrupt or truncated
 * chunk, unsupported encoding), COSY_ERR_INVALID_ARG (NULL argument). */
cosy_status cosy_wav_read(const char *path, float **pcm, int64_t *n, int32_t *sample_rate);

/* Write a mono WAV: float32 == 0 -> 16-bit PCM (round(x * 32768) clipped to [-32768, 32767], NaN
 * -> 0); float32 != 0 -> 32-bit IEEE float (format 3, with a fact chunk). n >= 0; the data must fit
 * a 32-bit RIFF size; sample_rate in [1, 2^31). */
cosy_status cosy_wav_write(const char *path, const float *pcm, int64_t n, int32_t sample_rate,
                           int float32);

/* ---------------------------------------------------------------------------- resampling */

/* Output length of a conversion of n samples: ceil(n * rate_out / rate_in), the length
 * torchaudio.transforms.Resample returns. */
int64_t cosy_resample_length(int64_t n, int32_t rate_in, int32_t rate_out);

/* One-shot conversion with libsamplerate SRC_SINC_BEST_QUALITY. Rates in [1, 10^7] and
 * rate_out / rate_in within [1/256, 256]. *n_out = cosy_resample_length(n, ...) (libsamplerate's
 * output is cut or zero-padded at the end to that length). Same rates: a plain copy.
 * *out is malloc'd (non-NULL even when *n_out == 0). */
cosy_status cosy_resample(const float *in, int64_t n, int32_t rate_in, int32_t rate_out,
                          float **out, int64_t *n_out);

/* torchaudio.transforms.Resample(rate_in, rate_out) with its defaults (sinc_interp_hann,
 * lowpass_filter_width 6, rolloff 0.99), which CosyVoice's load_wav uses: a band-limited
 * polyphase FIR, kernel computed as Resample does (double, the phase offsets float32; audio.c) and
 * stored as float, sums in double: within an fp32 ulp of torchaudio's output. Rates in
 * [1000, 1000000]. *n_out = cosy_resample_length(n, ...). This is what cosy_audio_to_mel uses, so
 * that non-24 kHz prompts give the official mel (libsamplerate's sharper filter removes the
 * 10.9-12 kHz content torchaudio's filter keeps, moving the top two mel bands by up to ~5 in log). */
cosy_status cosy_resample_sinc_hann(const float *in, int64_t n, int32_t rate_in, int32_t rate_out,
                                    float **out, int64_t *n_out);
/* The same on up to `threads` threads (kernel phases and output ranges split; the same samples
 * whatever the count). */
cosy_status cosy_resample_sinc_hann_mt(const float *in, int64_t n, int32_t rate_in,
                                       int32_t rate_out, int threads, float **out,
                                       int64_t *n_out);

/* Streaming conversion: feed any chunking of the input, get exactly what cosy_resample gives for
 * the whole input (same samples, same total length). Output lags the input by the filter's half
 * length until end_of_input flushes it. One object per stream; not thread-safe. */
typedef struct cosy_resampler cosy_resampler;

cosy_status cosy_resampler_create(int32_t rate_in, int32_t rate_out, cosy_resampler **out);
/* Bound on the samples the next process call with n_in input samples can write. */
int64_t cosy_resampler_max_out(const cosy_resampler *r, int64_t n_in);
/* Convert in[0..n_in) (in may be NULL when n_in == 0); end_of_input != 0 marks the last call,
 * which flushes the filter and pads/cuts the stream to cosy_resample_length(total input).
 * Writes *n_out samples to out; out_cap must be >= cosy_resampler_max_out(r, n_in).
 * After the last call only cosy_resampler_reset or _free are allowed. */
cosy_status cosy_resampler_process(cosy_resampler *r, const float *in, int64_t n_in,
                                   int end_of_input, float *out, int64_t out_cap, int64_t *n_out);
/* Start a new stream with the same rates. */
cosy_status cosy_resampler_reset(cosy_resampler *r);
void cosy_resampler_free(cosy_resampler *r);

/* ---------------------------------------------------------------------------- prompt mel */

#define COSY_MEL_SR 24000
#define COSY_MEL_N_FFT 1920
#define COSY_MEL_HOP 480
#define COSY_MEL_BINS 80
#define COSY_MEL_MAX_SECONDS 1800  /* 30 minutes */
#define COSY_MEL_MAX_ABS 65536.0f  /* largest |sample| cosy_audio_to_mel takes (full scale 1.0) */

/* librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk=False, norm='slaney') (slaney mel scale,
 * slaney area normalisation), computed in double like librosa and rounded to float as librosa's
 * float32 result is. fmax <= 0 means sr / 2. fb is [n_mels][n_fft / 2 + 1], caller-allocated.
 * n_fft in [2, 1<<20], n_mels in [1, 1024], 0 <= fmin < fmax <= sr / 2. */
cosy_status cosy_mel_filterbank(int32_t sr, int32_t n_fft, int32_t n_mels, double fmin,
                                double fmax, float *fb);

/* The prompt mel of 24 kHz audio (no resampling, no argument screening beyond NULL/length):
 * n >= 721 samples; *n_frames = floor(n / 480); *mel is [*n_frames][80] malloc'd.
 * cosy_audio_to_mel (cosyvoice.h) checks its arguments, resamples to 24 kHz with
 * cosy_resample_sinc_hann (as the official load_wav does) and calls this. */
cosy_status cosy_mel_24k(const float *pcm, int64_t n, float **mel, int32_t *n_frames);
/* The same in pieces: the length check (*n_frames, or COSY_ERR_INVALID_ARG), then frames
 * [t0, t1) into mel[t * 80 ..] (the others untouched; frames are independent, so threads may
 * split them and the result does not depend on the split). The filterbank, window and FFT plan
 * are made once per process. */
cosy_status cosy_mel_24k_check(int64_t n, int32_t *n_frames);
cosy_status cosy_mel_24k_frames(const float *pcm, int64_t n, int32_t t0, int32_t t1, float *mel);

#endif
