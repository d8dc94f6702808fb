/* cosyvoice-say - text to WAV with libcosyvoice.
 *
 *   cosyvoice-say -m model.gguf -v voice.gguf -o out.wav "Text to say."
 *   echo "Text" | cosyvoice-say -m model.gguf -v voice.gguf -o out.wav -
 *   cosyvoice-say -m model.gguf --prompt-wav p.wav --prompt-text "..." --save-voice v.gguf \
 *                 -o out.wav "Text"          (clones the voice: cosy_voice_from_audio)
 *   cosyvoice-say -m model.gguf --prompt-wav p.wav --prompt-text "..." --prompt-tokens t.txt \
 *                 --speaker s.txt --save-voice v.gguf -o out.wav "Text"  (precomputed features)
 *   cosyvoice-say -m model.gguf -v voice.gguf -o - "Text" | aplay    (WAV on standard output;
 *                 --raw: 16-bit little-endian PCM, written chunk by chunk with --stream)
 *
 * Every option is checked, and the text, prompt WAV and feature files are read, before the model
 * is loaded: a mistake is reported at once with the option it concerns (exit status 2 for usage
 * errors, 1 for unreadable inputs and library failures). Prints per-stage times, time to first
 * audio and the real-time factor on stderr (with --speed, which makes the whole utterance in one
 * blocking call, only the total: the library reports no stage times for it). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "audio.h" /* cosy_wav_read / cosy_wav_write (library-internal helpers) */
#include "cosyvoice.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: cosyvoice-say -m MODEL (voice) [options] [-o OUT] (TEXT | -f FILE | -)\n"
          "  TEXT, -f FILE or - (standard input): what to say\n"
          "voice (one of):\n"
          "  -v, --voice FILE         voice file (made with --save-voice or tools/make_model.py)\n"
          "  --prompt-wav WAV         prompt audio, 0.5..30 s at 16k..192k Hz: the voice is cloned\n"
          "                           from it (speech tokens, speaker embedding and mel; needs a\n"
          "                           model converted with the front-end models)\n"
          "    --prompt-text TEXT     its transcript (required with --prompt-wav)\n"
          "    --prompt-tokens FILE   instead: its speech tokens (whitespace-separated ints, 25 Hz;\n"
          "                           with --speaker)\n"
          "  --speaker FILE           a 192-d speaker embedding (whitespace-separated floats)\n"
          "  --save-voice FILE        write the voice made from the prompt options\n"
          "options:\n"
          "  --mode zero-shot|cross-lingual|instruct   (default zero-shot; any case, and with\n"
          "                           _ for -: cross_lingual)\n"
          "  --instruct TEXT          style instruction (--mode instruct)\n"
          "  --seed N                 sampling seed, an integer >= 0 (default 1; 0 = clock)\n"
          "  --rate HZ                output sample rate 8000..48000 (default 24000)\n"
          "  --speed X                0.5..2.0: the whole utterance at once (not with --stream)\n"
          "  --max-tokens N           cap on speech tokens (0 = the model's rule)\n"
          "  --stream                 stream: print each chunk as it arrives\n"
          "  --device N               CUDA device, -1 = CPU (default -1)\n"
          "  --threads N              CPU threads (0 = all cores)\n"
          "  --no-normalize           give the text to the tokenizer as is\n"
          "  -o, --output FILE        output (default out.wav): a 16-bit PCM WAV; - = standard\n"
          "                           output (for a pipe: cosyvoice-say ... -o - | aplay)\n"
          "  --raw                    write raw 16-bit little-endian mono PCM instead of WAV (with\n"
          "                           --stream and -o -, each chunk is written as it arrives)\n"
          "  -h, --help               this help\n"
          "  --version                the library's version and build\n");
}

/* a usage error: what is wrong, where the options are listed, exit status 2 */
static int bad_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("cosyvoice-say: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs(" (cosyvoice-say --help lists the options)\n", stderr);
  return 2;
}

/* strict numbers: the whole value must be one number within [lo, hi] */
static int parse_int(const char *opt, const char *v, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || errno == ERANGE || x < lo || x > hi) {
    bad_usage("%s %s: expected an integer in %lld..%lld", opt, v, lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

static int parse_float(const char *opt, const char *v, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (!*v || *end || errno == ERANGE || !(x >= lo && x <= hi)) {
    bad_usage("%s %s: expected a number in %g..%g", opt, v, lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

/* 16-bit PCM as cosy_wav_write makes it: lrintf(x * 32768) clipped, NaN -> 0; little-endian */
static void to_pcm16(const float *x, int64_t n, unsigned char *out) {
  for (int64_t i = 0; i < n; i++) {
    float v = x[i] * 32768.0f;
    long s = !(v == v) ? 0 : v >= 32767.0f ? 32767 : v <= -32768.0f ? -32768 : lrintf(v);
    out[2 * i] = (unsigned char)(s & 0xff);
    out[2 * i + 1] = (unsigned char)((s >> 8) & 0xff);
  }
}

static int write_pcm16(FILE *f, const float *x, int64_t n) {
  unsigned char buf[8192];
  for (int64_t i = 0; i < n; i += 4096) {
    int64_t k = n - i < 4096 ? n - i : 4096;
    to_pcm16(x + i, k, buf);
    if (fwrite(buf, 2, (size_t)k, f) != (size_t)k) return -1;
  }
  return 0;
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* a complete 16-bit mono WAV (its sizes known: the audio is all there) */
static int write_wav16(FILE *f, const float *x, int64_t n, int rate) {
  if (n > (int64_t)(0xFFFFFFFFu - 36) / 2) return -1;
  unsigned char h[44] = "RIFF____WAVEfmt ____\1\0\1\0________\2\0\20\0data____";
  put32(h + 4, (uint32_t)(36 + 2 * n));
  put32(h + 16, 16);
  put32(h + 24, (uint32_t)rate);
  put32(h + 28, (uint32_t)rate * 2);
  put32(h + 40, (uint32_t)(2 * n));
  if (fwrite(h, 1, 44, f) != 44) return -1;
  return write_pcm16(f, x, n);
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
  FILE *raw_out;   /* streaming raw PCM to standard output: each chunk written as it arrives */
  int write_failed;
  double t0;
} sink;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int32_t on_chunk(void *user, const cosy_chunk *c) {
  sink *s = user;
  if (s->raw_out) {
    if (write_pcm16(s->raw_out, c->pcm, c->n_samples) || fflush(s->raw_out)) {
      s->write_failed = 1;
      return 1;   /* the reader went away: cancel */
    }
    s->n += c->n_samples;
  } else {
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
  }
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

/* a mode name as the Python package's parse_mode takes it: '-' or '_', any case */
static int parse_mode(const char *m) {
  char k[16];
  size_t n = strlen(m);
  if (n >= sizeof k) return -1;
  for (size_t i = 0; i <= n; i++) {
    char c = m[i];
    k[i] = c == '_' ? '-' : (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
  }
  if (!strcmp(k, "zero-shot")) return COSY_MODE_ZERO_SHOT;
  if (!strcmp(k, "cross-lingual")) return COSY_MODE_CROSS_LINGUAL;
  if (!strcmp(k, "instruct")) return COSY_MODE_INSTRUCT;
  return -1;
}

int main(int argc, char **argv) {
  const char *model = NULL, *voice_path = NULL, *out = "out.wav", *text_file = NULL;
  const char *prompt_wav = NULL, *prompt_text = NULL, *prompt_tokens = NULL, *speaker = NULL;
  const char *save_voice = NULL, *mode_arg = "zero-shot", *instruct = NULL, *text_arg = NULL;
  long long seed = 1, rate = 0, device = -1, threads = 0, max_tokens = 0;
  double speed = 0;
  int stream = 0, no_norm = 0, raw = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
#define ARG() (i + 1 < argc ? argv[++i] : (exit(bad_usage("%s needs a value", a)), ""))
#define NUM(lo, hi, dst) do { if (parse_int(a, ARG(), lo, hi, &(dst))) return 2; } while (0)
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = ARG();
    else if (!strcmp(a, "-v") || !strcmp(a, "--voice")) voice_path = ARG();
    else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = ARG();
    else if (!strcmp(a, "-f") || !strcmp(a, "--file")) text_file = ARG();
    else if (!strcmp(a, "--prompt-wav")) prompt_wav = ARG();
    else if (!strcmp(a, "--prompt-text")) prompt_text = ARG();
    else if (!strcmp(a, "--prompt-tokens")) prompt_tokens = ARG();
    else if (!strcmp(a, "--speaker")) speaker = ARG();
    else if (!strcmp(a, "--save-voice")) save_voice = ARG();
    else if (!strcmp(a, "--mode")) mode_arg = ARG();
    else if (!strcmp(a, "--instruct")) instruct = ARG();
    else if (!strcmp(a, "--seed")) NUM(0, INT64_MAX, seed);
    else if (!strcmp(a, "--rate")) NUM(8000, 48000, rate);
    else if (!strcmp(a, "--speed")) { if (parse_float(a, ARG(), 0.5, 2.0, &speed)) return 2; }
    else if (!strcmp(a, "--max-tokens")) NUM(0, INT32_MAX, max_tokens);
    else if (!strcmp(a, "--device")) NUM(-1, 1023, device);
    else if (!strcmp(a, "--threads")) NUM(0, 1024, threads);
    else if (!strcmp(a, "--stream")) stream = 1;
    else if (!strcmp(a, "--raw")) raw = 1;
    else if (!strcmp(a, "--no-normalize")) no_norm = 1;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
    else if (!strcmp(a, "--version")) { printf("%s\n", cosy_version_string()); return 0; }
    else if (a[0] == '-' && a[1]) return bad_usage("unknown option %s", a);
    else if (!text_arg) text_arg = a;
    else return bad_usage("more than one text argument (%s, then %s): quote the text", text_arg, a);
#undef NUM
#undef ARG
  }

  /* every option is checked before the model is loaded */
  int mode = parse_mode(mode_arg);
  if (mode < 0)
    return bad_usage("--mode %s: expected zero-shot, cross-lingual or instruct", mode_arg);
  if (!model) return bad_usage("no model: give -m MODEL.gguf");
  if (voice_path && (prompt_wav || prompt_text || prompt_tokens || speaker || save_voice))
    return bad_usage("-v %s is a ready voice: --%s makes another; give one or the other",
                     voice_path, prompt_wav ? "prompt-wav" : prompt_text ? "prompt-text" :
                     prompt_tokens ? "prompt-tokens" : speaker ? "speaker" : "save-voice");
  if (prompt_text && !prompt_wav && !speaker)
    return bad_usage("--prompt-text is the transcript of --prompt-wav: give the recording too");
  if (!voice_path && !prompt_wav && !speaker)
    return bad_usage("no voice: give -v VOICE.gguf, or --prompt-wav WAV --prompt-text TEXT to "
                     "clone one from a recording");
  if (prompt_wav && !prompt_text)
    return bad_usage("--prompt-wav %s needs --prompt-text: the transcript of the recording",
                     prompt_wav);
  if (prompt_tokens && !speaker)
    return bad_usage("--prompt-tokens needs --speaker (the voice's speaker embedding)");
  if (!text_arg && !text_file) return bad_usage("no text: give TEXT, -f FILE, or - to read standard input");
  if (text_arg && text_file)
    return bad_usage("two texts: the argument \"%s\" and -f %s; give one", text_arg, text_file);
  if (mode == COSY_MODE_INSTRUCT && !instruct)
    return bad_usage("--mode instruct needs --instruct TEXT (the style instruction)");
  if (instruct && mode != COSY_MODE_INSTRUCT)
    return bad_usage("--instruct is used by --mode instruct only; add --mode instruct");
  if (speed != 0 && speed != 1 && stream)
    return bad_usage("--speed %g makes the whole utterance at once (the library changes the "
                     "speed of complete audio only): it cannot --stream; drop one of them", speed);
  int to_stdout = !strcmp(out, "-");
  if (to_stdout && isatty(STDOUT_FILENO))
    return bad_usage("-o -: standard output is a terminal; pipe or redirect the audio (for "
                     "example -o - | aplay, or -o - > out.wav)");
  if (!to_stdout) {   /* the output's folder exists: found out now, not after the synthesis */
    char *dir = strdup(out);
    if (!dir) return 1;
    char *slash = strrchr(dir, '/');
    if (slash) {
      slash[slash == dir ? 1 : 0] = '\0';
      if (access(dir, W_OK)) {
        fprintf(stderr, "cosyvoice-say: -o %s: cannot write into %s: %s\n", out, dir, strerror(errno));
        free(dir);
        return 1;
      }
    }
    free(dir);
  }

  /* the inputs are read before the model is loaded, so that a bad one is reported at once */
  const char *files[][2] = {{"-m", model}, {"-v", voice_path}, {"--prompt-wav", prompt_wav},
                            {"--prompt-tokens", prompt_tokens}, {"--speaker", speaker},
                            {"-f", text_file}};
  for (size_t k = 0; k < sizeof files / sizeof files[0]; k++)
    if (files[k][1] && access(files[k][1], R_OK)) {
      fprintf(stderr, "cosyvoice-say: %s %s: %s\n", files[k][0], files[k][1], strerror(errno));
      return 1;
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
  float *prompt_pcm = NULL;
  int64_t prompt_n = 0;
  int32_t prompt_sr = 0;
  cosy_status st;
  if (prompt_wav && (st = cosy_wav_read(prompt_wav, &prompt_pcm, &prompt_n, &prompt_sr))) {
    fprintf(stderr, "cosyvoice-say: --prompt-wav %s: %s: %s\n", prompt_wav,
            st == COSY_ERR_MODEL_FORMAT ? "not a WAV file this program reads" : cosy_status_str(st),
            cosy_last_error());
    return 1;
  }
  float *spk = NULL;
  int32_t *tok = NULL;
  int n_tok = 0, n_spk = 0;
  if (prompt_tokens && read_numbers(prompt_tokens, 0, (void **)&tok, &n_tok)) return 1;
  if (speaker && read_numbers(speaker, 1, (void **)&spk, &n_spk)) return 1;

  cosy_engine_config cfg;
  cosy_engine_config_init(&cfg, sizeof cfg);
  cfg.model_path = model;
  cfg.device = (int32_t)device;
  cfg.cpu_threads = (int32_t)threads;
  cosy_engine *eng;
  double t0 = now();
  st = cosy_engine_create(&cfg, &eng);
  if (st) return fail("loading the model", st);
  fprintf(stderr, "model loaded in %.2f s (%s)\n", now() - t0, cosy_version_string());

  cosy_voice *voice = NULL;
  if (voice_path) {
    if ((st = cosy_voice_load(eng, voice_path, &voice))) return fail(voice_path, st);
  } else if (prompt_wav && !speaker) {
    double tv = now();
    st = cosy_voice_from_audio(eng, prompt_pcm, prompt_n, prompt_sr, prompt_text, &voice);
    if (st) return fail("cloning the voice", st);
    fprintf(stderr, "voice cloned from %s (%.2f s of audio at %d Hz) in %.3f s\n", prompt_wav,
            (double)prompt_n / prompt_sr, (int)prompt_sr, now() - tv);
  } else {
    cosy_voice_features vf;
    cosy_voice_features_init(&vf, sizeof vf);
    float *mel = NULL;
    int32_t frames = 0;
    if (prompt_wav && (st = cosy_audio_to_mel(prompt_pcm, prompt_n, prompt_sr, &mel, &frames)))
      return fail("prompt mel", st);
    vf.prompt_text = prompt_text ? prompt_text : "";
    vf.speech_tokens = tok;
    vf.n_speech_tokens = n_tok;
    vf.mel = mel;
    vf.n_mel_frames = frames;
    vf.speaker_embedding = spk;
    vf.speaker_dim = n_spk;
    st = cosy_voice_from_features(eng, &vf, &voice);
    cosy_free(mel);
    if (st) return fail("making the voice", st);
  }
  free(prompt_pcm);
  free(tok);
  free(spk);
  if (save_voice && (st = cosy_voice_save(voice, save_voice))) return fail(save_voice, st);

  cosy_synth_params sp;
  cosy_synth_params_init(&sp, sizeof sp);
  sp.mode = mode;
  sp.instruct_text = instruct;
  sp.seed = (uint64_t)seed;
  sp.sample_rate = (int32_t)rate;
  sp.speed = (float)speed;
  sp.max_tokens = (int32_t)max_tokens;
  if (no_norm) sp.flags |= COSY_SYNTH_NO_TEXT_NORMALIZATION;
  int out_rate = rate ? (int)rate : cosy_engine_sample_rate(eng);

  sink s = {0};
  s.stream = stream;
  s.raw_out = to_stdout && raw && stream ? stdout : NULL;
  s.t0 = now();
  cosy_request_stats rs;
  cosy_request_stats_init(&rs, sizeof rs);
  int blocking = speed != 0 && speed != 1;
  if (blocking) {
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
    if (s.write_failed) {
      fprintf(stderr, "cosyvoice-say: writing to standard output: %s\n", strerror(errno));
      return 1;
    }
    if (st) return fail("synthesis", st);
  }
  double audio_s = (double)s.n / out_rate;
  if (blocking)   /* cosy_synthesize reports no per-stage times: only what was measured here */
    fprintf(stderr, "speed %.2f: the whole utterance at once in %.3f s\n", speed, rs.total_s);
  else
    fprintf(stderr,
            "text tokens %d, speech tokens %d, chunks %d\n"
            "llm %.3f s | flow %.3f s | vocoder %.3f s | first audio %.3f s | total %.3f s\n",
            rs.n_text_tokens, rs.n_speech_tokens, rs.n_chunks, rs.llm_s, rs.flow_s, rs.vocoder_s,
            rs.ttfb_s, rs.total_s);
  fprintf(stderr, "audio %.2f s at %d Hz, RTF %.3f\n", audio_s, out_rate,
          audio_s > 0 ? rs.total_s / audio_s : 0.0);
  if (!s.raw_out) {
    if (to_stdout || raw) {
      FILE *f = to_stdout ? stdout : fopen(out, "wb");
      if (!f) { fprintf(stderr, "cosyvoice-say: cannot create %s: %s\n", out, strerror(errno)); return 1; }
      int bad = raw ? write_pcm16(f, s.pcm, s.n) : write_wav16(f, s.pcm, s.n, out_rate);
      bad |= to_stdout ? fflush(f) : fclose(f);
      if (bad) {
        fprintf(stderr, "cosyvoice-say: writing %s: %s\n", to_stdout ? "standard output" : out,
                strerror(errno));
        return 1;
      }
    } else if ((st = cosy_wav_write(out, s.pcm, s.n, out_rate, 0))) {
      return fail(out, st);
    }
  }
  fprintf(stderr, "wrote %s (%s, %lld samples)\n", to_stdout ? "standard output" : out,
          raw ? "raw 16-bit PCM" : "16-bit WAV", (long long)s.n);
  free(s.pcm);
  free(text);
  cosy_voice_release(voice);
  cosy_engine_destroy(eng);
  return 0;
}
