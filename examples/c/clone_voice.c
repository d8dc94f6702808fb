/* clone_voice.c - make a voice from a recording, save it, and say something with it.
 *
 *   clone_voice MODEL.gguf PROMPT.wav "What the prompt says." VOICE_OUT.gguf OUT.wav "Text to say."
 *
 * Built against the INSTALLED library only (no internal headers):
 *   cc -std=c11 clone_voice.c $(pkg-config --cflags --libs cosyvoice) -o clone_voice
 *
 * Steps: read the WAV (16-bit PCM or 32-bit float, any rate from 16 to 192 kHz, channels mixed
 * by their mean: a small reader below, the library takes plain float samples); clone the voice
 * with cosy_voice_from_audio (0.5 to 30 s of audio; the model file must hold the front-end models,
 * see docs/usage.md); save it with cosy_voice_save, so that later runs load the file
 * (cosy_voice_load) instead of cloning again, which is what this program then does; synthesize
 * with the loaded voice and write a 16-bit WAV. */
#define _POSIX_C_SOURCE 200809L
#include <cosyvoice.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint32_t get_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t get_u16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A RIFF/WAVE file of 16-bit PCM or 32-bit float samples as mono floats in [-1, 1].
 * Returns 0 and malloc'd *pcm, or -1 with a message on stderr. */
static int read_wav(const char *path, float **pcm, int64_t *n, int32_t *rate) {
  *rate = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return -1;
  }
  unsigned char *b = NULL;
  long size = 0;
  if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (b = malloc((size_t)size)) && fread(b, 1, (size_t)size, f) != (size_t)size) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (!b || size < 12 || memcmp(b, "RIFF", 4) || memcmp(b + 8, "WAVE", 4)) {
    fprintf(stderr, "%s: not a readable RIFF/WAVE file\n", path);
    free(b);
    return -1;
  }
  unsigned format = 0, channels = 0, bits = 0;
  const unsigned char *data = NULL;
  long data_len = 0;
  for (long off = 12; off + 8 <= size;) {
    long len = (long)get_u32(b + off + 4);
    if (len > size - off - 8) len = size - off - 8; /* truncated last chunk */
    const unsigned char *body = b + off + 8;
    if (!memcmp(b + off, "fmt ", 4) && len >= 16) {
      format = get_u16(body);
      channels = get_u16(body + 2);
      *rate = (int32_t)get_u32(body + 4);
      bits = get_u16(body + 14);
      if (format == 0xFFFE && len >= 26) format = get_u16(body + 24); /* extensible */
    } else if (!memcmp(b + off, "data", 4)) {
      data = body;
      data_len = len;
    }
    off += 8 + len + (len & 1);
  }
  const unsigned width = format == 1 && bits == 16 ? 2 : format == 3 && bits == 32 ? 4 : 0;
  if (!data || channels == 0 || width == 0) {
    fprintf(stderr, "%s: format %u, %u-bit, %u channels: this reader takes 16-bit PCM or 32-bit "
                    "float\n", path, format, bits, channels);
    free(b);
    return -1;
  }
  *n = data_len / (long)(width * channels);
  *pcm = malloc(sizeof(float) * (size_t)(*n > 0 ? *n : 1));
  for (int64_t i = 0; *pcm && i < *n; i++) {
    double sum = 0;
    for (unsigned c = 0; c < channels; c++) {
      const unsigned char *p = data + (size_t)i * width * channels + (size_t)c * width;
      if (width == 2) {
        sum += (int16_t)get_u16(p) / 32768.0;
      } else {
        uint32_t u = get_u32(p);
        float x;
        memcpy(&x, &u, 4);
        sum += x;
      }
    }
    (*pcm)[i] = (float)(sum / channels);
  }
  free(b);
  return *pcm ? 0 : -1;
}

static int write_wav(const char *path, const float *x, int64_t n, int32_t rate) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  unsigned char h[44];
  memcpy(h, "RIFF", 4);
  put_u32(h + 4, (uint32_t)(36 + 2 * n));
  memcpy(h + 8, "WAVEfmt ", 8);
  put_u32(h + 16, 16);
  h[20] = 1, h[21] = 0, h[22] = 1, h[23] = 0; /* PCM, mono */
  put_u32(h + 24, (uint32_t)rate);
  put_u32(h + 28, (uint32_t)rate * 2);
  h[32] = 2, h[33] = 0, h[34] = 16, h[35] = 0; /* block align 2, 16 bits */
  memcpy(h + 36, "data", 4);
  put_u32(h + 40, (uint32_t)(2 * n));
  int ok = fwrite(h, 1, 44, f) == 44;
  for (int64_t i = 0; ok && i < n; i++) {
    float v = x[i] > 1.0f ? 1.0f : x[i] < -1.0f ? -1.0f : x[i];
    int16_t s = (int16_t)(v * 32767.0f + (v >= 0 ? 0.5f : -0.5f));
    unsigned char le[2] = {(unsigned char)(s & 0xff), (unsigned char)((uint16_t)s >> 8)};
    ok = fwrite(le, 1, 2, f) == 2;
  }
  return fclose(f) == 0 && ok ? 0 : -1;
}

static int fail(const char *what, cosy_status st) {
  fprintf(stderr, "clone_voice: %s: %s (%s)\n", what, cosy_status_str(st), cosy_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: %s MODEL.gguf PROMPT.wav \"transcript\" VOICE_OUT.gguf OUT.wav "
                    "\"Text to say.\"\n", argv[0]);
    return 2;
  }
  const char *model = argv[1], *wav = argv[2], *transcript = argv[3], *voice_path = argv[4];
  const char *out = argv[5], *text = argv[6];
  float *pcm;
  int64_t n;
  int32_t rate = 0;
  if (read_wav(wav, &pcm, &n, &rate)) return 1;

  cosy_engine_config cfg;
  cosy_engine_config_init(&cfg, sizeof cfg);
  cfg.model_path = model;
  cfg.device = COSY_DEVICE_CPU; /* a CUDA ordinal (0) runs the front-end models on the GPU */
  cosy_engine *eng;
  cosy_status st = cosy_engine_create(&cfg, &eng);
  if (st) return fail(model, st);

  /* clone once ... */
  cosy_voice *voice;
  double t0 = now_s();
  if ((st = cosy_voice_from_audio(eng, pcm, n, rate, transcript, &voice))) return fail(wav, st);
  printf("cloned a voice from %.2f s of audio at %d Hz in %.3f s\n", (double)n / rate, (int)rate,
         now_s() - t0);
  free(pcm);
  st = cosy_voice_save(voice, voice_path);
  cosy_voice_release(voice);
  if (st) return fail(voice_path, st);

  /* ... and reuse it: load the saved voice and say something */
  if ((st = cosy_voice_load(eng, voice_path, &voice))) return fail(voice_path, st);
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.seed = 1;
  float *audio;
  int64_t n_audio;
  if ((st = cosy_synthesize(eng, voice, text, &p, &audio, &n_audio))) return fail("synthesize", st);
  const int32_t sr = cosy_engine_sample_rate(eng);
  if (write_wav(out, audio, n_audio, sr)) {
    fprintf(stderr, "clone_voice: cannot write %s\n", out);
    return 1;
  }
  printf("saved the voice to %s; said %.2f s of audio with it into %s\n", voice_path,
         (double)n_audio / sr, out);
  cosy_free(audio);
  cosy_voice_release(voice);
  cosy_engine_destroy(eng);
  return 0;
}
