/* cosyvoice-say - text to WAV with libcosyvoice.
 *
 *   cosyvoice-say -m model.gguf -v voice.gguf -o out.wav "Text to say."
 *   echo "Text" | cosyvoice-say -m model.gguf -v voice.gguf -o out.wav -
 *   cosyvoice-say -m model.gguf --prompt-wav p.wav --prompt-text "..." --save-voice v.gguf \
 *                 -o out.wav "Text"          (clones the voice: cosy_voice_from_audio)
 *   cosyvoice-say -m model.gguf --prompt-wav p.wav --prompt-text "..." --prompt-tokens t.txt \
 *                 --speaker s.txt --save-voice v.gguf -o out.wav "Text"  (precomputed features)
 *
 * Prints per-stage times, time to first audio and the real-time factor on stderr. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audio.h" /* cosy_wav_read / cosy_wav_write (library-internal helpers) */
#include "cosyvoice.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: cosyvoice-say -m MODEL [voice] [options] [-o OUT.wav] (TEXT | -f FILE | -)\n"
          "voice (one of):\n"
          "  -v, --voice FILE         voice file (made with --save-voice or tools/make_model.py)\n"
          "  --prompt-wav WAV         prompt audio, 0.5..30 s at 16k..192k Hz: the voice is cloned\n"
          "                           from it (speech tokens, speaker embedding and mel; needs a\n"
          "                           model converted with the front-end models)\n"
          "    --prompt-text TEXT     its transcript\n"
          "    --prompt-tokens FILE   instead: its speech tokens (whitespace-separated ints, 25 Hz)\n"
          "    --speaker FILE         and its 192-d speaker embedding (whitespace-separated floats)\n"
          "  --save-voice FILE        write the voice made from the prompt options\n"
          "options:\n"
          "  --mode zero-shot|cross-lingual|instruct   (default zero-shot)\n"
          "  --instruct TEXT          style instruction (instruct mode)\n"
          "  --seed N                 sampling seed (default 1; 0 = clock)\n"
          "  --rate HZ                output sample rate 8000..48000 (default 24000)\n"
          "  --speed X                0.5..2.0 (blocking only)\n"
          "  --max-tokens N           cap on speech tokens\n"
          "  --stream                 stream: print each chunk as it arrives\n"
          "  --device N               CUDA device, -1 = CPU (default -1)\n"
          "  --threads N              CPU threads\n"
          "  --no-normalize           give the text to the tokenizer as is\n"
          "  -o FILE                  output WAV (16-bit PCM; default out.wav)\n");
}

static char *read_all(FILE *f) {
  size_t cap = 4096, n = 0;
  char *s = malloc(cap);
  if (!s) return NULL;
  for (;;) {
    if (n + 4096 > cap) {
      char *ns = realloc(s, cap *= 2);
      if (!ns) { free(s); return NULL; }
      s = ns;
    }
    size_t k = fread(s + n, 1, 4096, f);
    n += k;
    if (k == 0) break;
  }
  s[n] = '\0';
  return s;
}

static int read_numbers(const char *path, int want_float, void **out, int *n) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "cosyvoice-say: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  int cap = 256, k = 0;
  void *v = malloc((size_t)cap * 4);
  for (;;) {
    if (k == cap) v = realloc(v, (size_t)(cap *= 2) * 4);
    if (!v) { fclose(f); return -1; }
    int ok = want_float ? fscanf(f, "%f", &((float *)v)[k]) : fscanf(f, "%d", &((int32_t *)v)[k]);
    if (ok != 1) break;
    k++;
  }
  int bad = !feof(f);
  fclose(f);
  if (bad) {
    fprintf(stderr, "cosyvoice-say: %s: not a list of numbers (stopped after %d)\n", path, k);
    free(v);
    return -1;
  }
  *out = v;
  *n = k;
  return 0;
}

typedef struct sink {
  float *pcm;
  int64_t n, cap;
  int stream;
  double t0;
} sink;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int32_t on_chunk(void *user, const cosy_chunk *c) {
  sink *s = user;
  if (s->n + c->n_samples > s->cap) {
    int64_t nc = s->cap ? s->cap : 48000;
    while (nc < s->n + c->n_samples) nc *= 2;
    float *np = realloc(s->pcm, (size_t)nc * sizeof *np);
    if (!np) return 1;
    s->pcm = np;
    s->cap = nc;
  }
  memcpy(s->pcm + s->n, c->pcm, (size_t)c->n_samples * sizeof *c->pcm);
  s->n += c->n_samples;
  if (s->stream)
    fprintf(stderr, "  chunk at %7.3f s: %7lld samples (%.2f s of audio)%s\n", now() - s->t0,
            (long long)c->n_samples, (double)c->n_samples / c->sample_rate,
            (c->flags & COSY_CHUNK_LAST) ? " [last]" : "");
  return 0;
}

static int fail(const char *what, cosy_status st) {
  fprintf(stderr, "cosyvoice-say: %s: %s: %s\n", what, cosy_status_str(st), cosy_last_error());
  return 1;
}

int main(int argc, char **argv) {
  const char *model = NULL, *voice_path = NULL, *out = "out.wav", *text_file = NULL;
  const char *prompt_wav = NULL, *prompt_text = "", *prompt_tokens = NULL, *speaker = NULL;
  const char *save_voice = NULL, *mode = "zero-shot", *instruct = NULL, *text_arg = NULL;
  long long seed = 1;
  int rate = 0, stream = 0, device = -1, threads = 0, max_tokens = 0, no_norm = 0;
  float speed = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
#define ARG() (i + 1 < argc ? argv[++i] : (fprintf(stderr, "cosyvoice-say: %s needs a value\n", a), exit(2), ""))
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = ARG();
    else if (!strcmp(a, "-v") || !strcmp(a, "--voice")) voice_path = ARG();
    else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = ARG();
    else if (!strcmp(a, "-f") || !strcmp(a, "--file")) text_file = ARG();
    else if (!strcmp(a, "--prompt-wav")) prompt_wav = ARG();
    else if (!strcmp(a, "--prompt-text")) prompt_text = ARG();
    else if (!strcmp(a, "--prompt-tokens")) prompt_tokens = ARG();
    else if (!strcmp(a, "--speaker")) speaker = ARG();
    else if (!strcmp(a, "--save-voice")) save_voice = ARG();
    else if (!strcmp(a, "--mode")) mode = ARG();
    else if (!strcmp(a, "--instruct")) instruct = ARG();
    else if (!strcmp(a, "--seed")) seed = atoll(ARG());
    else if (!strcmp(a, "--rate")) rate = atoi(ARG());
    else if (!strcmp(a, "--speed")) speed = (float)atof(ARG());
    else if (!strcmp(a, "--max-tokens")) max_tokens = atoi(ARG());
    else if (!strcmp(a, "--device")) device = atoi(ARG());
    else if (!strcmp(a, "--threads")) threads = atoi(ARG());
    else if (!strcmp(a, "--stream")) stream = 1;
    else if (!strcmp(a, "--no-normalize")) no_norm = 1;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
    else if (!strcmp(a, "--version")) { printf("%s\n", cosy_version_string()); return 0; }
    else if (a[0] == '-' && a[1]) { fprintf(stderr, "cosyvoice-say: unknown option %s\n", a); usage(stderr); return 2; }
    else if (!text_arg) text_arg = a;
    else { fprintf(stderr, "cosyvoice-say: more than one text argument\n"); return 2; }
  }
  if (!model || (!voice_path && !speaker && !prompt_wav) || (!text_arg && !text_file)) {
    usage(stderr);
    return 2;
  }
  char *text = NULL;
  if (text_file || !strcmp(text_arg, "-")) {
    FILE *f = text_file ? fopen(text_file, "r") : stdin;
    if (!f) { fprintf(stderr, "cosyvoice-say: cannot open %s: %s\n", text_file, strerror(errno)); return 1; }
    text = read_all(f);
    if (text_file) fclose(f);
  } else {
    text = strdup(text_arg);
  }
  if (!text) return 1;

  cosy_engine_config cfg;
  cosy_engine_config_init(&cfg, sizeof cfg);
  cfg.model_path = model;
  cfg.device = device;
  cfg.cpu_threads = threads;
  cosy_engine *eng;
  double t0 = now();
  cosy_status st = cosy_engine_create(&cfg, &eng);
  if (st) return fail("loading the model", st);
  fprintf(stderr, "model loaded in %.2f s (%s)\n", now() - t0, cosy_version_string());

  cosy_voice *voice = NULL;
  if (voice_path) {
    if ((st = cosy_voice_load(eng, voice_path, &voice))) return fail(voice_path, st);
  } else if (prompt_wav && !speaker && !prompt_tokens) {
    float *pcm;
    int64_t n;
    int32_t sr;
    if ((st = cosy_wav_read(prompt_wav, &pcm, &n, &sr))) return fail(prompt_wav, st);
    double tv = now();
    st = cosy_voice_from_audio(eng, pcm, n, sr, prompt_text, &voice);
    free(pcm);
    if (st) return fail("cloning the voice", st);
    fprintf(stderr, "voice cloned from %s (%.2f s of audio at %d Hz) in %.3f s\n", prompt_wav,
            (double)n / sr, (int)sr, now() - tv);
    if (save_voice && (st = cosy_voice_save(voice, save_voice))) return fail(save_voice, st);
  } else {
    cosy_voice_features vf;
    cosy_voice_features_init(&vf, sizeof vf);
    float *mel = NULL, *spk = NULL;
    int32_t *tok = NULL;
    int n_tok = 0, n_spk = 0;
    int32_t frames = 0;
    if (prompt_wav) {
      float *pcm;
      int64_t n;
      int32_t sr;
      if ((st = cosy_wav_read(prompt_wav, &pcm, &n, &sr))) return fail(prompt_wav, st);
      st = cosy_audio_to_mel(pcm, n, sr, &mel, &frames);
      free(pcm);
      if (st) return fail("prompt mel", st);
    }
    if (prompt_tokens && read_numbers(prompt_tokens, 0, (void **)&tok, &n_tok)) return 1;
    if (read_numbers(speaker, 1, (void **)&spk, &n_spk)) return 1;
    vf.prompt_text = prompt_text;
    vf.speech_tokens = tok;
    vf.n_speech_tokens = n_tok;
    vf.mel = mel;
    vf.n_mel_frames = frames;
    vf.speaker_embedding = spk;
    vf.speaker_dim = n_spk;
    st = cosy_voice_from_features(eng, &vf, &voice);
    cosy_free(mel);
    free(tok);
    free(spk);
    if (st) return fail("making the voice", st);
    if (save_voice && (st = cosy_voice_save(voice, save_voice))) return fail(save_voice, st);
  }

  cosy_synth_params sp;
  cosy_synth_params_init(&sp, sizeof sp);
  if (!strcmp(mode, "zero-shot")) sp.mode = COSY_MODE_ZERO_SHOT;
  else if (!strcmp(mode, "cross-lingual")) sp.mode = COSY_MODE_CROSS_LINGUAL;
  else if (!strcmp(mode, "instruct")) sp.mode = COSY_MODE_INSTRUCT;
  else { fprintf(stderr, "cosyvoice-say: unknown mode %s\n", mode); return 2; }
  sp.instruct_text = instruct;
  sp.seed = (uint64_t)seed;
  sp.sample_rate = rate;
  sp.speed = speed;
  sp.max_tokens = max_tokens;
  if (no_norm) sp.flags |= COSY_SYNTH_NO_TEXT_NORMALIZATION;
  int out_rate = rate ? rate : cosy_engine_sample_rate(eng);

  sink s = {0};
  s.stream = stream;
  s.t0 = now();
  cosy_request_stats rs;
  cosy_request_stats_init(&rs, sizeof rs);
  if (speed != 0 && speed != 1) {
    float *pcm;
    int64_t n;
    if ((st = cosy_synthesize(eng, voice, text, &sp, &pcm, &n))) return fail("synthesis", st);
    s.pcm = pcm;
    s.n = n;
    rs.total_s = now() - s.t0;
  } else {
    cosy_request *req;
    if ((st = cosy_request_submit(eng, voice, text, &sp, on_chunk, &s, &req))) return fail("submit", st);
    st = cosy_request_wait(req, -1);
    cosy_request_get_stats(req, &rs);
    cosy_request_release(req);
    if (st) return fail("synthesis", st);
  }
  double audio_s = (double)s.n / out_rate;
  fprintf(stderr,
          "text tokens %d, speech tokens %d, chunks %d\n"
          "llm %.3f s | flow %.3f s | vocoder %.3f s | first audio %.3f s | total %.3f s\n"
          "audio %.2f s at %d Hz, RTF %.3f\n",
          rs.n_text_tokens, rs.n_speech_tokens, rs.n_chunks, rs.llm_s, rs.flow_s, rs.vocoder_s,
          rs.ttfb_s, rs.total_s, audio_s, out_rate, audio_s > 0 ? rs.total_s / audio_s : 0.0);
  st = cosy_wav_write(out, s.pcm, s.n, out_rate, 0);
  if (st) return fail(out, st);
  fprintf(stderr, "wrote %s\n", out);
  free(s.pcm);
  free(text);
  cosy_voice_release(voice);
  cosy_engine_destroy(eng);
  return 0;
}
