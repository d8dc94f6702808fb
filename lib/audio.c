/* audio.c - WAV I/O, sample-rate conversion and the flow's prompt mel (docs/model.md section 5).
 *
 * WAV reading. The whole file (at most COSY_WAV_MAX_BYTES) is read into memory and parsed with
 * every offset checked against the buffer: "RIFF" <size> "WAVE", then chunks <id><u32 size><body>
 * padded to even length. The RIFF size must fit in the file (0xFFFFFFFF, the placeholder of
 * streaming writers, means "to the end of the file", and then so does a data size of 0xFFFFFFFF);
 * bytes after the RIFF end are ignored. Every chunk must fit inside the RIFF body (the pad byte of
 * the last chunk may be missing); exactly one "fmt " (>= 16 bytes; >= 40 for
 * WAVE_FORMAT_EXTENSIBLE, whose sub-format GUID must be the standard PCM or IEEE-float one) and one
 * "data" chunk are required; other chunks are skipped. block_align must equal
 * channels * bits / 8; a partial frame at the end of the data is dropped.
 * Decoding: int8 unsigned (x - 128) / 128, int16 x / 2^15, int24 x / 2^23, int32 x / 2^31 (the
 * container width; a smaller wValidBitsPerSample is left-justified so the scale is the same),
 * float32/float64 as they are. Channels are mixed by their mean (sum in double / channels), as
 * CosyVoice's load_wav does. Malformed files are COSY_ERR_MODEL_FORMAT, valid but unsupported
 * encodings (A-law, ADPCM, 12-bit, ...) COSY_ERR_UNSUPPORTED, open/read failures COSY_ERR_IO.
 *
 * WAV writing: mono; 16-bit PCM (round-to-nearest of x * 32768, clipped to [-32768, 32767],
 * NaN -> 0, so k / 32768 round-trips exactly) or 32-bit float (format 3, fmt size 18, fact chunk).
 *
 * Resampling: libsamplerate, SRC_SINC_BEST_QUALITY, constant ratio rate_out / rate_in. The output
 * of n input samples is defined to be ceil(n * rate_out / rate_in) samples long (torchaudio's
 * Resample length, so frame counts match the official front end): libsamplerate's flushed output
 * is cut or zero-padded to that length. libsamplerate is zero-phase (output sample k sits at input
 * time k * rate_in / rate_out, like torchaudio's), but its filter differs from torchaudio's
 * (sinc_interp_hann, width 6, rolloff 0.99), so resampled audio matches the reference only
 * approximately. The streaming resampler feeds the same SRC state chunk by chunk; its samples
 * equal the one-shot result (libsamplerate's output does not depend on how input is split, and
 * mid-stream it never produces samples beyond what the final length keeps, since it waits for
 * half a filter of look-ahead).
 *
 * torchaudio-compatible resampler (cosy_resample_sinc_hann; used by cosy_audio_to_mel and the voice
 * front end because the official load_wav resamples with torchaudio.transforms.Resample's defaults:
 * sinc_interp_hann, lowpass_filter_width 6, rolloff 0.99). With g = gcd(rate_in, rate_out),
 * o = rate_in / g, v = rate_out / g, lpw = 6, base = min(o, v) * 0.99, width = ceil(lpw o / base):
 *   t       = clamp(((k - width) / o + f32(-i / v)) * base, -lpw, lpw)
 *   h_i[k]  = sinc(pi t) * (cos(pi t / (2 lpw))^2 * base / o)      (sinc(0) = 1)
 *   (k = 0 .. 2 width + o - 1, phase i = 0 .. v-1; kernel in double, stored as float)
 *   y[b v + i] = sum_k h_i[k] x[b o + k - width]   (zeros outside x; sum in double)
 * cut to ceil(n v / o) samples. f32(-i / v) is the phase offset rounded to float32: Resample builds
 * it as an integer range divided by v in the default float32 dtype before adding it to the float64
 * tap positions, and the rest of its kernel is float64. Mirroring that keeps the output within an
 * fp32 ulp of the official one (tests/data/resample); with the exact offset, samples move by up to
 * 5e-6 where v is not a power of two (22.05 and 44.1 kHz input), the speech tokenizer's log-mel by
 * up to 2.4e-4. (torchaudio.functional.resample computes the whole kernel in the waveform's
 * float32 and differs from Resample by ~1e-5; load_wav does not use it.) Only the taps where
 * |t| < lpw are stored (the rest are 0 up to ~1e-33), so co-prime rates (o, v in the thousands)
 * stay cheap.
 *
 * Prompt mel (matcha mel_spectrogram as CosyVoice3's feat_extractor, docs/model.md section 5), x at 24 kHz,
 * N samples (N >= 721: torch's reflect pad needs N > 720):
 *   xp    = reflect_pad(x, 720, 720)          xp[-j] = x[j], xp[N-1+j] = x[N-1-j]
 *   T     = 1 + (N + 1440 - 1920) / 480 = floor(N / 480)
 *   w[i]  = 0.5 - 0.5 cos(2 pi i / 1920)       periodic Hann, i < 1920
 *   S[t][k] = | sum_i w[i] xp[480 t + i] e^{-2 pi i k i / 1920} |  with |z| = sqrt(re^2 + im^2 + 1e-9),
 *             k = 0 .. 960 (one real FFT per frame, fp32, cosy_rfft_exec in ref/fft.c)
 *   M[t][m] = ln(max(1e-5, sum_k fb[m][k] S[t][k]))    fb = librosa slaney mel, 80 x 961,
 *             sr 24000, n_fft 1920, fmin 0, fmax 12000 (sum accumulated in double)
 * Output frame-major [T][80] (the official [1, T, 80]).
 *
 * Mel filterbank (librosa.filters.mel, htk=False, norm='slaney'), all in double:
 *   hz->mel: m = f / (200/3) below 1000 Hz, else 15 + ln(f / 1000) / (ln(6.4) / 27); mel->hz inverse
 *   fftfreqs[k] = k * (1 / (n_fft * (1 / sr)))    (numpy rfftfreq)
 *   mel_f = mel_to_hz(linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))  (numpy linspace:
 *           start + i * step, last point exactly stop)
 *   w[m][k] = max(0, min((fftfreqs[k] - mel_f[m]) / (mel_f[m+1] - mel_f[m]),
 *                        (mel_f[m+2] - fftfreqs[k]) / (mel_f[m+2] - mel_f[m+1])))
 *   fb[m][k] = float(double(float(w[m][k])) * 2 / (mel_f[m+2] - mel_f[m]))
 *   (librosa stores w in its float32 array before the in-place slaney scaling; mirrored here.)
 */
#include "audio.h"

#include <math.h>
#include <pthread.h>
#include <samplerate.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/fft.h"
#include "util.h"

/* ====================================================================== little-endian helpers */

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const unsigned char *p) {
  return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32);
}
static void wr16(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v & 0xff);
  p[1] = (unsigned char)((v >> 8) & 0xff);
}
static void wr32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)((v >> (8 * i)) & 0xff);
}

/* ================================================================================ WAV read */

#define WAV_FMT_PCM 1
#define WAV_FMT_FLOAT 3
#define WAV_FMT_EXTENSIBLE 0xFFFE
#define WAV_MAX_CHANNELS 1024

/* tail of the KSDATAFORMAT_SUBTYPE_* GUIDs: xxxx0000-0000-0010-8000-00aa00389b71 */
static const unsigned char k_guid_tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                              0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};

static cosy_status read_whole_file(const char *path, unsigned char **buf, int64_t *size) {
  *buf = NULL;
  *size = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return cosy_err(COSY_ERR_IO, "cannot open '%s'", path);
  if (fseek(f, 0, SEEK_END) != 0) {
    fclose(f);
    return cosy_err(COSY_ERR_IO, "cannot seek in '%s'", path);
  }
  long sz = ftell(f);
  if (sz < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return cosy_err(COSY_ERR_IO, "cannot get the size of '%s'", path);
  }
  if ((int64_t)sz > COSY_WAV_MAX_BYTES) {
    fclose(f);
    return cosy_err(COSY_ERR_IO, "'%s' is %ld bytes; WAV files above %lld bytes are not read", path,
                    sz, (long long)COSY_WAV_MAX_BYTES);
  }
  unsigned char *b = (unsigned char *)cosy_malloc((size_t)sz + 1);
  if (!b) {
    fclose(f);
    return COSY_ERR_NO_MEMORY;
  }
  size_t got = sz > 0 ? fread(b, 1, (size_t)sz, f) : 0;
  int bad = ferror(f) || got != (size_t)sz;
  fclose(f);
  if (bad) {
    free(b);
    return cosy_err(COSY_ERR_IO, "cannot read '%s' (%zu of %ld bytes)", path, got, sz);
  }
  *buf = b;
  *size = sz;
  return COSY_OK;
}

typedef struct {
  int have;
  uint32_t tag;  /* 1 or 3 after resolving EXTENSIBLE */
  uint32_t channels, rate, block_align, bits;
} wav_fmt;

static cosy_status parse_fmt(const char *path, const unsigned char *c, uint32_t size, wav_fmt *fmt) {
  if (size < 16)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s': fmt chunk is %u bytes (need at least 16)", path,
                    size);
  uint32_t tag = rd16(c);
  fmt->channels = rd16(c + 2);
  fmt->rate = rd32(c + 4);
  fmt->block_align = rd16(c + 12);
  fmt->bits = rd16(c + 14);
  if (tag == WAV_FMT_EXTENSIBLE) {
    if (size < 40)
      return cosy_err(COSY_ERR_MODEL_FORMAT,
                      "'%s': WAVE_FORMAT_EXTENSIBLE fmt chunk is %u bytes (need 40)", path, size);
    uint32_t cb = rd16(c + 16), valid = rd16(c + 18);
    if (cb < 22)
      return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s': WAVE_FORMAT_EXTENSIBLE cbSize %u (need 22)",
                      path, cb);
    if (valid > fmt->bits)
      return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s': %u valid bits in a %u-bit container", path,
                      valid, fmt->bits);
    if (memcmp(c + 26, k_guid_tail, sizeof k_guid_tail) != 0)
      return cosy_err(COSY_ERR_UNSUPPORTED, "'%s': unknown WAVE_FORMAT_EXTENSIBLE sub-format GUID",
                      path);
    tag = rd16(c + 24);
  }
  fmt->tag = tag;
  if (tag != WAV_FMT_PCM && tag != WAV_FMT_FLOAT)
    return cosy_err(COSY_ERR_UNSUPPORTED,
                    "'%s': WAV encoding 0x%04x is not supported (only PCM and IEEE float)", path,
                    tag);
  if (tag == WAV_FMT_PCM && fmt->bits != 8 && fmt->bits != 16 && fmt->bits != 24 &&
      fmt->bits != 32)
    return cosy_err(COSY_ERR_UNSUPPORTED, "'%s': %u-bit integer PCM is not supported", path,
                    fmt->bits);
  if (tag == WAV_FMT_FLOAT && fmt->bits != 32 && fmt->bits != 64)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s': %u-bit IEEE float samples", path, fmt->bits);
  if (fmt->channels == 0)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s': 0 channels", path);
  if (fmt->channels > WAV_MAX_CHANNELS)
    return cosy_err(COSY_ERR_UNSUPPORTED, "'%s': %u channels (at most %d)", path, fmt->channels,
                    WAV_MAX_CHANNELS);
  if (fmt->rate == 0 || fmt->rate > (uint32_t)INT32_MAX)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s': sample rate %u", path, fmt->rate);
  if (fmt->block_align != fmt->channels * (fmt->bits / 8))
    return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s': block align %u != %u channels x %u bits / 8",
                    path, fmt->block_align, fmt->channels, fmt->bits);
  fmt->have = 1;
  return COSY_OK;
}

static double decode_sample(const unsigned char *p, const wav_fmt *fmt) {
  if (fmt->tag == WAV_FMT_FLOAT) {
    if (fmt->bits == 32) {
      uint32_t u = rd32(p);
      float f;
      memcpy(&f, &u, sizeof f);
      return (double)f;
    }
    uint64_t u = rd64(p);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
  }
  switch (fmt->bits) {
    case 8: return ((double)p[0] - 128.0) / 128.0;
    case 16: {
      int32_t v = (int32_t)rd16(p);
      if (v & 0x8000) v -= 0x10000;
      return (double)v / 32768.0;
    }
    case 24: {
      int32_t v = (int32_t)(p[0] | (p[1] << 8) | (p[2] << 16));
      if (v & 0x800000) v -= 0x1000000;
      return (double)v / 8388608.0;
    }
    default: {
      int64_t v = (int64_t)rd32(p);
      if (v & 0x80000000LL) v -= 0x100000000LL;
      return (double)v / 2147483648.0;
    }
  }
}

static cosy_status parse_wav(const char *path, const unsigned char *b, int64_t size, float **pcm,
                             int64_t *n, int32_t *sample_rate) {
  if (size < 12)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s' is %lld bytes: too short for a WAV file", path,
                    (long long)size);
  if (memcmp(b, "RIFF", 4) != 0 || memcmp(b + 8, "WAVE", 4) != 0) {
    if ((memcmp(b, "RF64", 4) == 0 || memcmp(b, "RIFX", 4) == 0) && memcmp(b + 8, "WAVE", 4) == 0)
      return cosy_err(COSY_ERR_UNSUPPORTED, "'%s': %.4s WAV files are not supported", path,
                      (const char *)b);
    return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s' is not a RIFF/WAVE file", path);
  }
  uint32_t riff = rd32(b + 4);
  int placeholder = (riff == 0xFFFFFFFFu);
  int64_t end = placeholder ? size : 8 + (int64_t)riff;
  if (end > size)
    return cosy_err(COSY_ERR_MODEL_FORMAT,
                    "'%s': RIFF size says %lld bytes but the file has %lld (truncated?)", path,
                    (long long)end, (long long)size);
  if (end < 12)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s': RIFF size %u is too small", path, riff);

  wav_fmt fmt;
  memset(&fmt, 0, sizeof fmt);
  int have_data = 0;
  int64_t data_off = 0, data_size = 0;
  int64_t pos = 12;
  while (pos < end) {
    if (end - pos < 8)
      return cosy_err(COSY_ERR_MODEL_FORMAT,
                      "'%s': truncated chunk header at offset %lld (%lld bytes left)", path,
                      (long long)pos, (long long)(end - pos));
    const unsigned char *id = b + pos;
    int64_t csize = rd32(b + pos + 4);
    int64_t body = pos + 8;
    if (placeholder && memcmp(id, "data", 4) == 0 && csize == 0xFFFFFFFFLL) csize = end - body;
    if (csize > end - body)
      return cosy_err(COSY_ERR_MODEL_FORMAT,
                      "'%s': chunk '%c%c%c%c' at offset %lld claims %lld bytes but only %lld "
                      "remain (truncated or corrupt)",
                      path, id[0] >= 32 && id[0] < 127 ? id[0] : '?',
                      id[1] >= 32 && id[1] < 127 ? id[1] : '?',
                      id[2] >= 32 && id[2] < 127 ? id[2] : '?',
                      id[3] >= 32 && id[3] < 127 ? id[3] : '?', (long long)pos,
                      (long long)csize, (long long)(end - body));
    if (memcmp(id, "fmt ", 4) == 0) {
      if (fmt.have) return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s': two fmt chunks", path);
      cosy_status st = parse_fmt(path, b + body, (uint32_t)csize, &fmt);
      if (st != COSY_OK) return st;
    } else if (memcmp(id, "data", 4) == 0) {
      if (have_data) return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s': two data chunks", path);
      have_data = 1;
      data_off = body;
      data_size = csize;
    }
    pos = body + csize + (csize & 1);
    if (pos > end) pos = end; /* missing pad byte after the last chunk */
  }
  if (!fmt.have) return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s': no fmt chunk", path);
  if (!have_data) return cosy_err(COSY_ERR_MODEL_FORMAT, "'%s': no data chunk", path);

  const int64_t frames = data_size / fmt.block_align;
  const int64_t bps = fmt.bits / 8;
  float *out = (float *)cosy_malloc((size_t)(frames > 0 ? frames : 1) * sizeof(float));
  if (!out) return COSY_ERR_NO_MEMORY;
  const unsigned char *d = b + data_off;
  for (int64_t i = 0; i < frames; i++) {
    const unsigned char *fr = d + i * fmt.block_align;
    if (fmt.channels == 1) {
      out[i] = (float)decode_sample(fr, &fmt);
    } else {
      double acc = 0.0;
      for (uint32_t c = 0; c < fmt.channels; c++) acc += decode_sample(fr + c * bps, &fmt);
      out[i] = (float)(acc / (double)fmt.channels);
    }
  }
  *pcm = out;
  *n = frames;
  *sample_rate = (int32_t)fmt.rate;
  return COSY_OK;
}

cosy_status cosy_wav_read(const char *path, float **pcm, int64_t *n, int32_t *sample_rate) {
  if (pcm) *pcm = NULL;
  if (n) *n = 0;
  if (sample_rate) *sample_rate = 0;
  if (!path || !pcm || !n || !sample_rate)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_wav_read: NULL argument");
  unsigned char *buf;
  int64_t size;
  cosy_status st = read_whole_file(path, &buf, &size);
  if (st != COSY_OK) return st;
  st = parse_wav(path, buf, size, pcm, n, sample_rate);
  free(buf);
  return st;
}

/* =============================================================================== WAV write */

cosy_status cosy_wav_write(const char *path, const float *pcm, int64_t n, int32_t sample_rate,
                           int float32) {
  if (!path || (!pcm && n > 0))
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_wav_write: NULL argument");
  if (n < 0) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_wav_write: n = %lld", (long long)n);
  if (sample_rate <= 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_wav_write: sample rate %d", (int)sample_rate);
  const int64_t bps = float32 ? 4 : 2;
  const int64_t hdr = float32 ? 58 : 44;
  if (n > (0xFFFFFFFFLL - hdr) / bps)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_wav_write: %lld samples do not fit a WAV file (4 GiB limit)",
                    (long long)n);
  const uint32_t data_bytes = (uint32_t)(n * bps);
  unsigned char h[58];
  size_t hl = 0;
  memcpy(h, "RIFF", 4);
  wr32(h + 4, (uint32_t)(hdr - 8) + data_bytes);
  memcpy(h + 8, "WAVE", 4);
  memcpy(h + 12, "fmt ", 4);
  if (float32) {
    wr32(h + 16, 18);
    wr16(h + 20, WAV_FMT_FLOAT);
  } else {
    wr32(h + 16, 16);
    wr16(h + 20, WAV_FMT_PCM);
  }
  wr16(h + 22, 1);
  wr32(h + 24, (uint32_t)sample_rate);
  wr32(h + 28, (uint32_t)sample_rate * (uint32_t)bps);
  wr16(h + 32, (uint32_t)bps);
  wr16(h + 34, (uint32_t)(bps * 8));
  hl = 36;
  if (float32) {
    wr16(h + 36, 0); /* cbSize */
    memcpy(h + 38, "fact", 4);
    wr32(h + 42, 4);
    wr32(h + 46, (uint32_t)n);
    hl = 50;
  }
  memcpy(h + hl, "data", 4);
  wr32(h + hl + 4, data_bytes);
  hl += 8;

  FILE *f = fopen(path, "wb");
  if (!f) return cosy_err(COSY_ERR_IO, "cannot create '%s'", path);
  int bad = fwrite(h, 1, hl, f) != hl;
  unsigned char blk[4096 * 4];
  for (int64_t i = 0; i < n && !bad;) {
    int64_t m = n - i < 4096 ? n - i : 4096;
    for (int64_t j = 0; j < m; j++) {
      float x = pcm[i + j];
      if (float32) {
        uint32_t u;
        memcpy(&u, &x, sizeof u);
        wr32(blk + 4 * j, u);
      } else {
        float s = x * 32768.0f;
        int32_t v;
        if (!(s == s)) v = 0;
        else if (s >= 32767.0f) v = 32767;
        else if (s <= -32768.0f) v = -32768;
        else v = (int32_t)lrintf(s);
        wr16(blk + 2 * j, (uint32_t)(uint16_t)(int16_t)v);
      }
    }
    size_t bytes = (size_t)(m * bps);
    if (fwrite(blk, 1, bytes, f) != bytes) bad = 1;
    i += m;
  }
  if (fclose(f) != 0) bad = 1;
  if (bad) return cosy_err(COSY_ERR_IO, "cannot write '%s'", path);
  return COSY_OK;
}

/* ============================================================================== resampling */

#define RS_MAX_RATE 10000000
#define RS_PIECE (1 << 20) /* frames per src_process call */

struct cosy_resampler {
  int32_t rate_in, rate_out;
  double ratio;
  SRC_STATE *src; /* NULL when rate_in == rate_out */
  int64_t total_in, total_out;
  int ended;
};

int64_t cosy_resample_length(int64_t n, int32_t rate_in, int32_t rate_out) {
  if (n < 0 || rate_in <= 0 || rate_out <= 0) return -1;
  if (rate_in == rate_out) return n;
  if (n > (INT64_MAX - rate_in) / rate_out) return -1;
  return (n * rate_out + rate_in - 1) / rate_in;
}

static cosy_status check_rates(const char *fn, int32_t rate_in, int32_t rate_out) {
  if (rate_in <= 0 || rate_out <= 0 || rate_in > RS_MAX_RATE || rate_out > RS_MAX_RATE)
    return cosy_err(COSY_ERR_INVALID_ARG, "%s: sample rates %d -> %d outside [1, %d]", fn,
                    (int)rate_in, (int)rate_out, RS_MAX_RATE);
  if (rate_in != rate_out && !src_is_valid_ratio((double)rate_out / (double)rate_in))
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "%s: conversion ratio %d / %d outside libsamplerate's [1/256, 256]", fn,
                    (int)rate_out, (int)rate_in);
  return COSY_OK;
}

cosy_status cosy_resampler_create(int32_t rate_in, int32_t rate_out, cosy_resampler **out) {
  if (!out) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_resampler_create: out is NULL");
  *out = NULL;
  cosy_status st = check_rates("cosy_resampler_create", rate_in, rate_out);
  if (st != COSY_OK) return st;
  cosy_resampler *r = (cosy_resampler *)cosy_calloc(1, sizeof *r);
  if (!r) return COSY_ERR_NO_MEMORY;
  r->rate_in = rate_in;
  r->rate_out = rate_out;
  r->ratio = (double)rate_out / (double)rate_in;
  if (rate_in != rate_out) {
    int err = 0;
    r->src = src_new(SRC_SINC_BEST_QUALITY, 1, &err);
    if (!r->src) {
      free(r);
      /* with a valid converter type, src_new only fails when out of memory */
      return cosy_err(COSY_ERR_NO_MEMORY, "libsamplerate src_new: %s", src_strerror(err));
    }
  }
  *out = r;
  return COSY_OK;
}

int64_t cosy_resampler_max_out(const cosy_resampler *r, int64_t n_in) {
  if (!r || n_in < 0 || r->ended) return 0;
  if (n_in > INT64_MAX - r->total_in) return -1;
  int64_t len = cosy_resample_length(r->total_in + n_in, r->rate_in, r->rate_out);
  return len < 0 ? -1 : len - r->total_out;
}

cosy_status cosy_resampler_process(cosy_resampler *r, const float *in, int64_t n_in,
                                   int end_of_input, float *out, int64_t out_cap, int64_t *n_out) {
  if (n_out) *n_out = 0;
  if (!r || !n_out || (n_in > 0 && !in))
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_resampler_process: NULL argument");
  if (n_in < 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_resampler_process: n_in = %lld", (long long)n_in);
  if (r->ended)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_resampler_process: the stream already ended (call cosy_resampler_reset)");
  const int64_t bound = cosy_resampler_max_out(r, n_in);
  if (bound < 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_resampler_process: stream too long");
  if (out_cap < bound || (bound > 0 && !out))
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_resampler_process: output capacity %lld < %lld (cosy_resampler_max_out)",
                    (long long)out_cap, (long long)bound);
  float dummy = 0.0f;
  if (!out) out = &dummy;

  if (!r->src) { /* same rate */
    if (n_in > 0) memmove(out, in, (size_t)n_in * sizeof(float));
    r->total_in += n_in;
    r->total_out += n_in;
    r->ended = end_of_input != 0;
    *n_out = n_in;
    return COSY_OK;
  }

  /* bound is the exact remaining length at the end, an upper bound before */
  int64_t produced = 0, left = n_in;
  const float *ip = in;
  for (;;) {
    const int64_t piece = left < RS_PIECE ? left : RS_PIECE;
    int64_t room = bound - produced;
    if (room > RS_PIECE) room = RS_PIECE;
    if (end_of_input && left == 0 && room == 0) break;
    SRC_DATA d;
    memset(&d, 0, sizeof d);
    d.data_in = piece > 0 ? ip : &dummy;
    d.input_frames = (long)piece;
    d.data_out = out + produced;
    d.output_frames = (long)room;
    d.end_of_input = (end_of_input && piece == left) ? 1 : 0;
    d.src_ratio = r->ratio;
    int err = src_process(r->src, &d);
    if (err != 0)
      return cosy_err(COSY_ERR_INTERNAL, "libsamplerate src_process: %s", src_strerror(err));
    ip += d.input_frames_used;
    left -= d.input_frames_used;
    produced += d.output_frames_gen;
    if (left == 0 && !end_of_input) break;
    if (left == 0 && end_of_input && d.output_frames_gen == 0) break;
    if (d.input_frames_used == 0 && d.output_frames_gen == 0)
      return cosy_err(COSY_ERR_INTERNAL,
                      "cosy_resampler_process: libsamplerate made no progress (%lld in left, "
                      "room %lld)",
                      (long long)left, (long long)room);
  }
  if (end_of_input) {
    for (; produced < bound; produced++) out[produced] = 0.0f; /* pad to ceil(n * ratio) */
    r->ended = 1;
  }
  r->total_in += n_in;
  r->total_out += produced;
  *n_out = produced;
  return COSY_OK;
}

cosy_status cosy_resampler_reset(cosy_resampler *r) {
  if (!r) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_resampler_reset: NULL");
  if (r->src) {
    int err = src_reset(r->src);
    if (err != 0)
      return cosy_err(COSY_ERR_INTERNAL, "libsamplerate src_reset: %s", src_strerror(err));
  }
  r->total_in = r->total_out = 0;
  r->ended = 0;
  return COSY_OK;
}

void cosy_resampler_free(cosy_resampler *r) {
  if (!r) return;
  if (r->src) src_delete(r->src);
  free(r);
}

cosy_status cosy_resample(const float *in, int64_t n, int32_t rate_in, int32_t rate_out,
                          float **out, int64_t *n_out) {
  if (out) *out = NULL;
  if (n_out) *n_out = 0;
  if (!out || !n_out || (n > 0 && !in))
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_resample: NULL argument");
  if (n < 0) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_resample: n = %lld", (long long)n);
  cosy_status st = check_rates("cosy_resample", rate_in, rate_out);
  if (st != COSY_OK) return st;
  const int64_t len = cosy_resample_length(n, rate_in, rate_out);
  if (len < 0 || (uint64_t)len > SIZE_MAX / sizeof(float))
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_resample: %lld samples is too long", (long long)n);
  float *o = (float *)cosy_malloc((size_t)(len > 0 ? len : 1) * sizeof(float));
  if (!o) return COSY_ERR_NO_MEMORY;
  cosy_resampler *r;
  st = cosy_resampler_create(rate_in, rate_out, &r);
  if (st != COSY_OK) {
    free(o);
    return st;
  }
  int64_t got = 0;
  st = cosy_resampler_process(r, in, n, 1, o, len, &got);
  cosy_resampler_free(r);
  if (st != COSY_OK) {
    free(o);
    return st;
  }
  if (got != len) {
    free(o);
    return cosy_err(COSY_ERR_INTERNAL, "cosy_resample: %lld samples instead of %lld",
                    (long long)got, (long long)len);
  }
  *out = o;
  *n_out = len;
  return COSY_OK;
}

/* ===================================================== torchaudio-compatible sinc resampler */

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* the kernel of one rate pair and the output range of one worker */
typedef struct sinc_job {
  const float *in;
  int64_t n, len, orig, nw, width, span;
  double lpw, base;
  int64_t *k0, *kn;
  float *w, *o;
} sinc_job;

/* phases [i0, i1) of the kernel (see the header comment) */
static void sinc_kernel(sinc_job *j, int64_t i0, int64_t i1) {
  const double PI = 3.14159265358979323846, lpw = j->lpw, base = j->base;
  const int64_t orig = j->orig, nw = j->nw, width = j->width, span = j->span;
  const int64_t K = 2 * width + orig; /* full kernel length */
  for (int64_t i = i0; i < i1; i++) {
    const double c = (double)i / (double)nw; /* kernel centre, in input samples / orig */
    int64_t lo = width + (int64_t)floor((double)orig * (c - lpw / base)) - 1;
    if (lo < 0) lo = 0;
    int64_t hi = lo + span;
    if (hi > K) hi = K;
    j->k0[i] = lo;
    j->kn[i] = hi - lo;
    /* the phase offset -i / nw in float32, as torchaudio's Resample makes it (an integer arange
     * divided by an int: float32), the rest in double (header comment) */
    const double ph = (double)(-(float)i / (float)nw);
    for (int64_t k = lo; k < hi; k++) {
      double t = (ph + (double)(k - width) / (double)orig) * base;
      if (t < -lpw) t = -lpw;
      if (t > lpw) t = lpw;
      const double cw = cos(t * PI / lpw / 2.0);
      const double win = cw * cw;
      t *= PI;
      const double sinc = t == 0.0 ? 1.0 : sin(t) / t;
      j->w[i * span + (k - lo)] = (float)(sinc * (win * (base / (double)orig)));
    }
  }
}

/* outputs [j0, j1): y[b nw + i] = sum_k xpad[b orig + k] w_i[k], xpad[m] = x[m - width] */
static void sinc_apply(const sinc_job *s, int64_t j0, int64_t j1) {
  const int64_t nw = s->nw, n = s->n, orig = s->orig, width = s->width, span = s->span;
  const float *restrict in = s->in, *restrict w = s->w;
  const int64_t *restrict k0 = s->k0, *restrict kn = s->kn;
  float *restrict o = s->o;
  for (int64_t j = j0; j < j1; j++) {
    const int64_t b = j / nw, i = j % nw;
    const int64_t m0 = b * orig + k0[i] - width; /* x index of tap k0[i] */
    const float *wi = w + i * span;
    double acc = 0.0;
    int64_t a = 0, e = kn[i];
    if (m0 < 0) a = -m0;
    if (m0 + e > n) e = n - m0;
    for (int64_t k = a; k < e; k++) acc += (double)wi[k] * (double)in[m0 + k];
    o[j] = (float)acc;
  }
}

static void sinc_kernel_worker(void *arg, int i, int n) {
  sinc_job *j = (sinc_job *)arg;
  sinc_kernel(j, j->nw * i / n, j->nw * (i + 1) / n);
}

static void sinc_apply_worker(void *arg, int i, int n) {
  const sinc_job *j = (const sinc_job *)arg;
  sinc_apply(j, j->len * i / n, j->len * (i + 1) / n);
}

cosy_status cosy_resample_sinc_hann_mt(const float *in, int64_t n, int32_t rate_in,
                                       int32_t rate_out, int threads, float **out,
                                       int64_t *n_out) {
  if (out) *out = NULL;
  if (n_out) *n_out = 0;
  if (!out || !n_out || (n > 0 && !in))
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_resample_sinc_hann: NULL argument");
  if (n < 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_resample_sinc_hann: n = %lld", (long long)n);
  if (rate_in < 1000 || rate_out < 1000 || rate_in > 1000000 || rate_out > 1000000)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_resample_sinc_hann: sample rates %d -> %d outside [1000, 1000000]",
                    (int)rate_in, (int)rate_out);
  const int64_t len = cosy_resample_length(n, rate_in, rate_out);
  if (len < 0 || (uint64_t)len > SIZE_MAX / sizeof(float))
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_resample_sinc_hann: %lld samples is too long",
                    (long long)n);
  float *o = (float *)cosy_malloc((size_t)(len > 0 ? len : 1) * sizeof(float));
  if (!o) return COSY_ERR_NO_MEMORY;
  if (rate_in == rate_out) {
    if (n > 0) memcpy(o, in, (size_t)n * sizeof(float));
    *out = o;
    *n_out = n;
    return COSY_OK;
  }
  sinc_job j;
  memset(&j, 0, sizeof j);
  const int64_t g = gcd64(rate_in, rate_out);
  j.in = in, j.n = n, j.len = len, j.o = o;
  j.orig = rate_in / g, j.nw = rate_out / g;
  j.lpw = 6.0;
  j.base = (double)(j.orig < j.nw ? j.orig : j.nw) * 0.99; /* rolloff 0.99 */
  j.width = (int64_t)ceil(j.lpw * (double)j.orig / j.base);
  /* non-zero span of phase i: |(-i/nw + (k - width)/orig) * base| < lpw, plus one tap of margin */
  j.span = (int64_t)ceil(2.0 * j.lpw * (double)j.orig / j.base) + 3;
  j.k0 = (int64_t *)cosy_malloc((size_t)j.nw * sizeof(int64_t));
  j.kn = (int64_t *)cosy_malloc((size_t)j.nw * sizeof(int64_t));
  j.w = (float *)cosy_malloc((size_t)j.nw * (size_t)j.span * sizeof(float));
  if (!j.k0 || !j.kn || !j.w) {
    free(j.k0);
    free(j.kn);
    free(j.w);
    free(o);
    return COSY_ERR_NO_MEMORY;
  }
  /* threads: only where each has a fair share (phases of the kernel, thousands of outputs) */
  int tk = threads, ta = threads;
  if (tk > j.nw / 64) tk = (int)(j.nw / 64);
  if (ta > len / 4096) ta = (int)(len / 4096);
  if (tk > 1) cosy_parallel(tk, sinc_kernel_worker, &j);
  else sinc_kernel(&j, 0, j.nw);
  if (ta > 1) cosy_parallel(ta, sinc_apply_worker, &j);
  else sinc_apply(&j, 0, len);
  free(j.k0);
  free(j.kn);
  free(j.w);
  *out = o;
  *n_out = len;
  return COSY_OK;
}

cosy_status cosy_resample_sinc_hann(const float *in, int64_t n, int32_t rate_in, int32_t rate_out,
                                    float **out, int64_t *n_out) {
  return cosy_resample_sinc_hann_mt(in, n, rate_in, rate_out, 1, out, n_out);
}

/* ============================================================================ mel filterbank */

static const double k_mel_fsp = 200.0 / 3.0;
static const double k_mel_min_log_hz = 1000.0;
static const double k_mel_min_log_mel = 15.0; /* 1000 / (200/3) */

static double mel_logstep(void) { return log(6.4) / 27.0; }

static double hz_to_mel(double f) {
  if (f >= k_mel_min_log_hz) return k_mel_min_log_mel + log(f / k_mel_min_log_hz) / mel_logstep();
  return f / k_mel_fsp;
}

static double mel_to_hz(double m) {
  if (m >= k_mel_min_log_mel) return k_mel_min_log_hz * exp(mel_logstep() * (m - k_mel_min_log_mel));
  return k_mel_fsp * m;
}

cosy_status cosy_mel_filterbank(int32_t sr, int32_t n_fft, int32_t n_mels, double fmin,
                                double fmax, float *fb) {
  if (!fb) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_mel_filterbank: fb is NULL");
  if (sr <= 0 || n_fft < 2 || n_fft > (1 << 20) || n_mels < 1 || n_mels > 1024)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_mel_filterbank: sr %d, n_fft %d, n_mels %d",
                    (int)sr, (int)n_fft, (int)n_mels);
  if (fmax <= 0.0) fmax = (double)sr / 2.0;
  if (!(fmin >= 0.0) || !(fmin < fmax) || fmax > (double)sr / 2.0)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_mel_filterbank: fmin %g, fmax %g, sr %d", fmin,
                    fmax, (int)sr);
  const int32_t nb = n_fft / 2 + 1;
  const int32_t np = n_mels + 2;
  double *mel_f = (double *)cosy_malloc((size_t)np * sizeof(double));
  if (!mel_f) return COSY_ERR_NO_MEMORY;
  const double mlo = hz_to_mel(fmin), mhi = hz_to_mel(fmax);
  const double step = (mhi - mlo) / (double)(np - 1);
  for (int32_t i = 0; i < np; i++) mel_f[i] = mel_to_hz(i == np - 1 ? mhi : mlo + (double)i * step);
  const double fval = 1.0 / ((double)n_fft * (1.0 / (double)sr));
  for (int32_t m = 0; m < n_mels; m++) {
    const double d0 = mel_f[m + 1] - mel_f[m], d1 = mel_f[m + 2] - mel_f[m + 1];
    const double enorm = 2.0 / (mel_f[m + 2] - mel_f[m]);
    for (int32_t k = 0; k < nb; k++) {
      const double f = (double)k * fval;
      const double lower = -(mel_f[m] - f) / d0;
      const double upper = (mel_f[m + 2] - f) / d1;
      double w = lower < upper ? lower : upper;
      if (!(w > 0.0)) w = 0.0;
      fb[(size_t)m * nb + k] = (float)((double)(float)w * enorm);
    }
  }
  free(mel_f);
  return COSY_OK;
}

/* ============================================================================== prompt mel */

/* the frame-independent part (filterbank, window, FFT plan), made once per process and then
 * read-only; a failed setup (no memory) is tried again by the next call */
typedef struct mel_setup {
  cosy_rfft_plan *plan;
  float win[COSY_MEL_N_FFT];
  float fb[COSY_MEL_BINS * (COSY_MEL_N_FFT / 2 + 1)];
  int32_t lo[COSY_MEL_BINS], hi[COSY_MEL_BINS]; /* non-zero span of each filter */
} mel_setup;

static pthread_mutex_t g_mel_mu = PTHREAD_MUTEX_INITIALIZER;
static mel_setup *g_mel;

static cosy_status mel_get(const mel_setup **out) {
  const int32_t NF = COSY_MEL_N_FFT, NB = NF / 2 + 1, NM = COSY_MEL_BINS;
  cosy_status st = COSY_OK;
  pthread_mutex_lock(&g_mel_mu);
  if (!g_mel) {
    mel_setup *u = (mel_setup *)cosy_calloc(1, sizeof *u);
    if (!u) st = COSY_ERR_NO_MEMORY;
    if (!st) st = cosy_mel_filterbank(COSY_MEL_SR, NF, NM, 0.0, 0.0, u->fb);
    if (!st) st = cosy_rfft_plan_create(NF, &u->plan);
    if (!st) {
      for (int32_t m = 0; m < NM; m++) {
        const float *row = u->fb + (size_t)m * NB;
        int32_t a = 0, b = NB;
        while (a < NB && row[a] == 0.0f) a++;
        while (b > a && row[b - 1] == 0.0f) b--;
        u->lo[m] = a;
        u->hi[m] = b;
      }
      for (int32_t i = 0; i < NF; i++)
        u->win[i] = (float)(0.5 - 0.5 * cos(2.0 * 3.14159265358979323846 * (double)i / (double)NF));
      g_mel = u;
    } else if (u) {
      cosy_rfft_plan_free(u->plan);
      free(u);
    }
  }
  *out = g_mel;
  pthread_mutex_unlock(&g_mel_mu);
  return st;
}

cosy_status cosy_mel_24k_check(int64_t n, int32_t *n_frames) {
  *n_frames = 0;
  const int64_t pad = (COSY_MEL_N_FFT - COSY_MEL_HOP) / 2; /* 720 */
  if (n <= pad)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "prompt audio too short: %lld samples at 24 kHz (need more than %lld)",
                    (long long)n, (long long)pad);
  const int64_t T64 = n / COSY_MEL_HOP;
  if (T64 > INT32_MAX / COSY_MEL_BINS)
    return cosy_err(COSY_ERR_INVALID_ARG, "prompt audio too long: %lld samples", (long long)n);
  *n_frames = (int32_t)T64;
  return COSY_OK;
}

cosy_status cosy_mel_24k_frames(const float *x, int64_t n, int32_t t0, int32_t t1, float *mel) {
  const int32_t NF = COSY_MEL_N_FFT, NB = NF / 2 + 1, NM = COSY_MEL_BINS;
  const int64_t pad = (COSY_MEL_N_FFT - COSY_MEL_HOP) / 2;
  const mel_setup *u;
  cosy_status st = mel_get(&u);
  if (st) return st;
  float buf[COSY_MEL_N_FFT], spec[COSY_MEL_N_FFT + 2], scratch[2 * COSY_MEL_N_FFT];
  float mag[COSY_MEL_N_FFT / 2 + 1];
  for (int32_t t = t0; t < t1; t++) {
    const int64_t start = (int64_t)t * COSY_MEL_HOP - pad; /* index into x of window sample 0 */
    if (start >= 0 && start + NF <= n) {
      const float *xs = x + start;
      for (int32_t i = 0; i < NF; i++) buf[i] = u->win[i] * xs[i];
    } else {
      for (int32_t i = 0; i < NF; i++) {
        int64_t j = start + i;
        if (j < 0) j = -j;                   /* reflect (edge sample not repeated) */
        else if (j >= n) j = 2 * (n - 1) - j;
        buf[i] = u->win[i] * x[j];
      }
    }
    cosy_rfft_exec(u->plan, buf, spec, scratch);
    for (int32_t k = 0; k < NB; k++) {
      const float re = spec[2 * k], im = spec[2 * k + 1];
      mag[k] = sqrtf(re * re + im * im + 1e-9f);
    }
    float *o = mel + (size_t)t * NM;
    for (int32_t m = 0; m < NM; m++) {
      const float *row = u->fb + (size_t)m * NB;
      double acc = 0.0;
      for (int32_t k = u->lo[m]; k < u->hi[m]; k++) acc += (double)row[k] * (double)mag[k];
      float v = (float)acc;
      o[m] = logf(v < 1e-5f ? 1e-5f : v);
    }
  }
  return COSY_OK;
}

cosy_status cosy_mel_24k(const float *x, int64_t n, float **mel, int32_t *n_frames) {
  if (mel) *mel = NULL;
  if (n_frames) *n_frames = 0;
  if (!x || !mel || !n_frames) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_mel_24k: NULL argument");
  int32_t T;
  cosy_status st = cosy_mel_24k_check(n, &T);
  if (st) return st;
  float *out = (float *)cosy_malloc((size_t)T * COSY_MEL_BINS * sizeof(float));
  if (!out) return COSY_ERR_NO_MEMORY;
  if ((st = cosy_mel_24k_frames(x, n, 0, T, out))) {
    free(out);
    return st;
  }
  *mel = out;
  *n_frames = T;
  return COSY_OK;
}

COSY_API cosy_status cosy_audio_to_mel(const float *pcm, int64_t n_samples, int32_t sample_rate,
                                       float **mel, int32_t *n_frames) {
  if (mel) *mel = NULL;
  if (n_frames) *n_frames = 0;
  if (!pcm || !mel || !n_frames)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_audio_to_mel: NULL argument");
  if (sample_rate < 16000 || sample_rate > 192000)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_audio_to_mel: sample rate %d outside [16000, 192000]", (int)sample_rate);
  if (n_samples <= 0)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_audio_to_mel: n_samples = %lld",
                    (long long)n_samples);
  if (n_samples > (int64_t)COSY_MEL_MAX_SECONDS * sample_rate)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "cosy_audio_to_mel: %lld samples at %d Hz is longer than %d minutes",
                    (long long)n_samples, (int)sample_rate, COSY_MEL_MAX_SECONDS / 60);
  for (int64_t i = 0; i < n_samples; i++) {
    if (!isfinite(pcm[i]))
      return cosy_err(COSY_ERR_INVALID_ARG, "cosy_audio_to_mel: sample %lld is %s", (long long)i,
                      isnan(pcm[i]) ? "NaN" : "infinite");
    /* Finite but huge samples (a float WAV holding 7e31, found by tests/fuzz/fuzz_wav) overflow
     * the fp32 power spectrum and gave an infinite mel. COSY_MEL_MAX_ABS keeps every step finite
     * (|X| <= 1920 * 65536 per frame) and still takes int16-scaled floats. */
    if (fabsf(pcm[i]) > COSY_MEL_MAX_ABS)
      return cosy_err(COSY_ERR_INVALID_ARG,
                      "cosy_audio_to_mel: sample %lld is %g (at most %g; full scale is 1.0)",
                      (long long)i, (double)pcm[i], (double)COSY_MEL_MAX_ABS);
  }
  cosy_status st;
  if (sample_rate == COSY_MEL_SR) {
    st = cosy_mel_24k(pcm, n_samples, mel, n_frames);
  } else {
    float *x24 = NULL;
    int64_t n24 = 0;
    st = cosy_resample_sinc_hann(pcm, n_samples, sample_rate, COSY_MEL_SR, &x24, &n24);
    if (st != COSY_OK) return st;
    st = cosy_mel_24k(x24, n24, mel, n_frames);
    free(x24);
  }
  if (st == COSY_OK) cosy_err_clear();
  return st;
}
