/* stream_wav.c - stream an utterance into a WAV file as the audio arrives (push callback).
 *
 *   stream_wav MODEL.gguf VOICE.gguf OUT.wav "Text to say." [SEED]
 *
 * Built against the INSTALLED library only (no internal headers):
 *   cc -std=c11 stream_wav.c $(pkg-config --cflags --libs cosyvoice) -o stream_wav
 *
 * How it works: the WAV header (RIFF/WAVE, PCM 16-bit mono) is written first with the two size
 * fields set to 0; every chunk the engine pushes is converted to 16-bit and appended from the
 * callback (which runs on an engine thread, so it only converts, writes and returns); when the
 * request has ended, the RIFF size (offset 4) and the data size (offset 40) are patched.
 * A player reading the file while it grows sees valid audio up to what has been written.
 *
 * It prints the time to first audio measured here (submit -> first callback) and by the library
 * (cosy_request_stats.ttfb_s), and the real-time factor = wall time / audio duration. */
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

static void put_u32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}
static void put_u16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}

/* 44-byte canonical header; data_bytes may be 0 (patched later) */
static int write_wav_header(FILE *f, int32_t rate, uint32_t data_bytes) {
  unsigned char h[44];
  memcpy(h, "RIFF", 4);
  put_u32(h + 4, 36 + data_bytes);
  memcpy(h + 8, "WAVEfmt ", 8);
  put_u32(h + 16, 16);                /* fmt chunk size */
  put_u16(h + 20, 1);                 /* PCM */
  put_u16(h + 22, 1);                 /* mono */
  put_u32(h + 24, (uint32_t)rate);
  put_u32(h + 28, (uint32_t)rate * 2); /* byte rate */
  put_u16(h + 32, 2);                 /* block align */
  put_u16(h + 34, 16);                /* bits per sample */
  memcpy(h + 36, "data", 4);
  put_u32(h + 40, data_bytes);
  return fwrite(h, 1, sizeof h, f) == sizeof h ? 0 : -1;
}

typedef struct sink {
  FILE *f;
  double t_submit, t_first;
  int64_t samples;
  int32_t rate;
  int chunks, io_error;
} sink;

/* Runs on an engine thread: convert, append, return. Non-zero cancels the request. */
static int32_t on_chunk(void *user, const cosy_chunk *c) {
  sink *s = (sink *)user;
  if (s->chunks == 0) s->t_first = now_s();
  s->chunks++;
  s->rate = c->sample_rate;
  int16_t tmp[1024];
  for (int64_t i = 0; i < c->n_samples; i += 1024) {
    int64_t m = c->n_samples - i < 1024 ? c->n_samples - i : 1024;
    for (int64_t j = 0; j < m; j++) {
      float x = c->pcm[i + j];
      x = x > 1.0f ? 1.0f : x < -1.0f ? -1.0f : x;
      float y = x * 32767.0f;
      tmp[j] = (int16_t)(y >= 0 ? y + 0.5f : y - 0.5f);
    }
    /* WAV is little-endian; so is every machine this library supports */
    if (fwrite(tmp, sizeof tmp[0], (size_t)m, s->f) != (size_t)m) {
      s->io_error = 1;
      return 1;
    }
  }
  s->samples += c->n_samples;
  fflush(s->f); /* so that a reader of the growing file sees this chunk */
  return 0;
}

static int fail(const char *what, cosy_status st) {
  fprintf(stderr, "stream_wav: %s: %s (%s)\n", what, cosy_status_str(st), cosy_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s MODEL.gguf VOICE.gguf OUT.wav \"Text to say.\" [SEED]\n", argv[0]);
    return 2;
  }
  const char *model = argv[1], *voice_path = argv[2], *out = argv[3], *text = argv[4];
  uint64_t seed = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;

  printf("libcosyvoice %s\n", cosy_version_string());
  cosy_engine_config cfg;
  cosy_engine_config_init(&cfg, sizeof cfg);
  cfg.model_path = model;
  cfg.device = COSY_DEVICE_CPU;
  cosy_engine *eng;
  cosy_status st = cosy_engine_create(&cfg, &eng);
  if (st) return fail(model, st);
  cosy_voice *voice;
  if ((st = cosy_voice_load(eng, voice_path, &voice))) {
    cosy_engine_destroy(eng);
    return fail(voice_path, st);
  }

  sink s = {0};
  s.rate = cosy_engine_sample_rate(eng);
  s.f = fopen(out, "wb");
  if (!s.f || write_wav_header(s.f, s.rate, 0)) {
    perror(out);
    cosy_voice_release(voice);
    cosy_engine_destroy(eng);
    return 1;
  }

  cosy_synth_params sp;
  cosy_synth_params_init(&sp, sizeof sp);
  sp.seed = seed;
  cosy_request *req;
  s.t_submit = now_s();
  st = cosy_request_submit(eng, voice, text, &sp, on_chunk, &s, &req);
  if (st == COSY_OK) {
    /* The callback does the work; this thread just waits for the end. */
    st = cosy_request_wait(req, -1);
    double t_end = now_s();
    cosy_request_stats rs;
    cosy_request_stats_init(&rs, sizeof rs);
    cosy_status st2 = cosy_request_get_stats(req, &rs);
    cosy_request_release(req);
    if (st) fail("synthesis", st);
    if (st2) fail("stats", st2);
    double audio_s = s.rate > 0 ? (double)s.samples / s.rate : 0;
    double wall = t_end - s.t_submit;
    printf("%d chunks, %lld samples at %d Hz (%.2f s of audio), %d speech tokens\n", s.chunks,
           (long long)s.samples, s.rate, audio_s, rs.n_speech_tokens);
    printf("TTFB %.3f s (library: %.3f s), total %.3f s, RTF %.3f\n",
           s.chunks ? s.t_first - s.t_submit : 0.0, rs.ttfb_s, wall,
           audio_s > 0 ? wall / audio_s : 0.0);
  } else {
    fail("submit", st);
  }

  /* patch the sizes now that the length is known */
  uint32_t data_bytes = (uint32_t)(s.samples * 2);
  unsigned char b[4];
  int bad = s.io_error;
  put_u32(b, 36 + data_bytes);
  bad |= fseek(s.f, 4, SEEK_SET) != 0 || fwrite(b, 1, 4, s.f) != 4;
  put_u32(b, data_bytes);
  bad |= fseek(s.f, 40, SEEK_SET) != 0 || fwrite(b, 1, 4, s.f) != 4;
  bad |= fclose(s.f) != 0;
  if (bad) fprintf(stderr, "stream_wav: writing %s failed\n", out);
  else printf("wrote %s\n", out);

  cosy_voice_release(voice);
  cosy_engine_destroy(eng);
  return st || bad ? 1 : 0;
}
