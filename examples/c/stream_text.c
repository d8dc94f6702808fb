/* stream_text.c - text streamed in AND audio streamed out: the words of a text are pushed one at
 * a time (as a chat model would produce them) while the audio is pulled into a WAV file.
 *
 *   stream_text MODEL.gguf VOICE.gguf OUT.wav "Text to say." [DELAY_MS [SEED]]
 *
 * Built against the INSTALLED library only:
 *   cc -std=c11 stream_text.c $(pkg-config --cflags --libs cosyvoice) -lpthread -o stream_text
 *
 * How it works: the request is submitted with COSY_SYNTH_TEXT_STREAM and no text; a second
 * thread pushes the words with cosy_request_push_text (DELAY_MS apart, default 50) and then calls
 * cosy_request_end_text; meanwhile this thread pulls the audio with cosy_request_read and appends
 * it to the WAV file. The LLM waits whenever the text it needs has not arrived yet; the audio
 * depends only on the text, not on how it was cut or when it came. (A cosy_request is used by one
 * thread at a time: the pusher thread only pushes and ends the text, this one only reads; the
 * two calls touch separate parts of the request and are safe together.) */
#define _POSIX_C_SOURCE 200809L
#include <cosyvoice.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct pusher {
  cosy_request *req;
  const char *text;
  int delay_ms;
  cosy_status st;
} pusher;

static void *push_words(void *arg) {
  pusher *p = (pusher *)arg;
  const char *s = p->text;
  while (*s && !p->st) {
    const char *sp = strchr(s + 1, ' '); /* a word with its leading space */
    size_t n = sp ? (size_t)(sp - s) : strlen(s);
    char word[512];
    if (n >= sizeof word) n = sizeof word - 1;
    memcpy(word, s, n);
    word[n] = 0;
    p->st = cosy_request_push_text(p->req, word);
    s += n;
    struct timespec ts = {p->delay_ms / 1000, (long)(p->delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  if (!p->st) p->st = cosy_request_end_text(p->req);
  if (p->st) fprintf(stderr, "stream_text: pushing: %s (%s)\n", cosy_status_str(p->st), cosy_last_error());
  return NULL;
}

static void put32(FILE *f, uint32_t v) {
  unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                        (unsigned char)(v >> 24)};
  fwrite(b, 1, 4, f);
}
static void put16(FILE *f, uint16_t v) {
  unsigned char b[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
  fwrite(b, 1, 2, f);
}

static void wav_header(FILE *f, int32_t rate, uint32_t data_bytes) {
  fwrite("RIFF", 1, 4, f);
  put32(f, 36 + data_bytes);
  fwrite("WAVEfmt ", 1, 8, f);
  put32(f, 16);
  put16(f, 1);
  put16(f, 1);
  put32(f, (uint32_t)rate);
  put32(f, (uint32_t)rate * 2);
  put16(f, 2);
  put16(f, 16);
  fwrite("data", 1, 4, f);
  put32(f, data_bytes);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s MODEL.gguf VOICE.gguf OUT.wav \"Text to say.\" [DELAY_MS [SEED]]\n", argv[0]);
    return 2;
  }
  int delay_ms = argc > 5 ? atoi(argv[5]) : 50;
  uint64_t seed = argc > 6 ? strtoull(argv[6], NULL, 10) : 1;
  cosy_engine_config cfg;
  cosy_engine_config_init(&cfg, sizeof cfg);
  cfg.model_path = argv[1];
  cfg.device = COSY_DEVICE_CPU;
  cosy_engine *eng;
  cosy_voice *voice;
  cosy_status st = cosy_engine_create(&cfg, &eng);
  if (st) {
    fprintf(stderr, "stream_text: %s: %s\n", argv[1], cosy_last_error());
    return 1;
  }
  if ((st = cosy_voice_load(eng, argv[2], &voice))) {
    fprintf(stderr, "stream_text: %s: %s\n", argv[2], cosy_last_error());
    cosy_engine_destroy(eng);
    return 1;
  }
  FILE *f = fopen(argv[3], "wb");
  if (!f) {
    perror(argv[3]);
    return 1;
  }
  const int32_t rate = cosy_engine_sample_rate(eng);
  wav_header(f, rate, 0);

  cosy_synth_params sp;
  cosy_synth_params_init(&sp, sizeof sp);
  sp.seed = seed;
  sp.flags = COSY_SYNTH_TEXT_STREAM; /* the text comes through cosy_request_push_text */
  cosy_request *req;
  if ((st = cosy_request_submit(eng, voice, NULL, &sp, NULL, NULL, &req))) {
    fprintf(stderr, "stream_text: submit: %s\n", cosy_last_error());
    return 1;
  }
  pusher p = {req, argv[4], delay_ms, COSY_OK};
  pthread_t th;
  pthread_create(&th, NULL, push_words, &p);
  float buf[4800];
  int16_t pcm[4800];
  int64_t got, total = 0;
  while ((st = cosy_request_read(req, buf, 4800, &got, -1)) == COSY_OK && got > 0) {
    for (int64_t i = 0; i < got; i++) {
      float x = buf[i] > 1.0f ? 1.0f : buf[i] < -1.0f ? -1.0f : buf[i];
      pcm[i] = (int16_t)(x * 32767.0f);
    }
    fwrite(pcm, 2, (size_t)got, f);
    total += got;
  }
  if (st) fprintf(stderr, "stream_text: synthesis: %s (%s)\n", cosy_status_str(st), cosy_last_error());
  pthread_join(th, NULL);
  cosy_request_release(req);
  fseek(f, 0, SEEK_SET);
  wav_header(f, rate, (uint32_t)(total * 2));
  fclose(f);
  printf("%lld samples (%.2f s) from text pushed word by word, %d ms apart; wrote %s\n",
         (long long)total, (double)total / rate, delay_ms, argv[3]);
  cosy_voice_release(voice);
  cosy_engine_destroy(eng);
  return st || p.st ? 1 : 0;
}
