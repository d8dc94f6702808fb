/* fuzz_api.c - libFuzzer target: the public entry points that take text (cosy_synthesize,
 * cosy_request_submit + cosy_request_read / cancel, cosy_voice_from_features' prompt text), on
 * the CPU with the demo model (tools/make_model.py --preset demo) and a few speech tokens, so one
 * execution is a whole, short synthesis.
 *
 * Input: 6 bytes of knobs, then the text; a NUL byte in the text ends it and what follows is the
 * instruct text (instruct mode) or the prompt text of a voice made from features.
 *   byte 0: bit 0 pull streaming (else blocking), bits 1-2 mode (3 = voice from features,
 *           zero-shot), bit 3 COSY_SYNTH_NO_TEXT_NORMALIZATION, bit 4 output at 16 kHz,
 *           bit 5 cancel after the first read, bit 6 speed 1.5 (blocking only), bit 7 a push
 *           callback that stops after its first chunk (streaming)
 *   byte 1: max_tokens = 1 + b % 8; byte 2: min_tokens = b % 10 (capped by max_tokens)
 *   byte 3: top_k = 1 + b % 50; byte 4: temperature = (1 + b % 8) / 4; byte 5: seed
 * Checks: the status is COSY_OK or a documented refusal of the input (COSY_ERR_TEXT,
 * COSY_ERR_INVALID_ARG, COSY_ERR_CANCELLED after a cancel); audio is finite and within [-1, 1]
 * at the native rate; streams end with COSY_OK and n_read == 0. */
#include "fuzz_common.h"

#include <math.h>

#include "cosyvoice.h"
#include "fuzz_engine.h"

#define FUZZ_API_MAX_INPUT 512

static cosy_engine *g_eng;
static float g_spk[192];
static float g_mel[8 * 80];
static int32_t g_tok[4];
static cosy_voice *g_voice; /* made from features: 2 prompt tokens keep the flow's input short */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_engine_and_short_voice("Hi.", &g_eng, &g_voice, g_spk, g_mel, g_tok);
  return 0;
}

static int32_t stop_after_one(void *user, const cosy_chunk *c) {
  int *calls = (int *)user;
  for (int64_t i = 0; i < c->n_samples; i++)
    FUZZ_CHECK(isfinite(c->pcm[i]), "pushed sample %lld is %g", (long long)i, (double)c->pcm[i]);
  return ++*calls >= 1;
}

static void check_pcm(const float *pcm, int64_t n, int native) {
  for (int64_t i = 0; i < n; i++) {
    FUZZ_CHECK(isfinite(pcm[i]), "sample %lld is %g", (long long)i, (double)pcm[i]);
    if (native) FUZZ_CHECK(fabsf(pcm[i]) <= 1.0f, "sample %lld is %g", (long long)i, (double)pcm[i]);
  }
}

static int refusal(cosy_status st) { return st == COSY_ERR_TEXT || st == COSY_ERR_INVALID_ARG; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 6 || size > FUZZ_API_MAX_INPUT) return 0;
  uint8_t k0 = data[0];
  cosy_synth_params sp;
  cosy_synth_params_init(&sp, sizeof sp);
  int pull = k0 & 1, mode = (k0 >> 1) & 3, cancel = (k0 >> 5) & 1;
  int push_stop = k0 >> 7;
  sp.flags = (k0 & 8) ? COSY_SYNTH_NO_TEXT_NORMALIZATION : 0;
  sp.sample_rate = (k0 & 16) ? 16000 : 0;
  sp.max_tokens = 1 + data[1] % 8;
  sp.min_tokens = data[2] % 10;
  if (sp.min_tokens > sp.max_tokens) sp.min_tokens = sp.max_tokens;
  sp.top_k = 1 + data[3] % 50;
  sp.temperature = (float)(1 + data[4] % 8) / 4.0f;
  sp.seed = 1 + data[5];
  /* text and the second string: NUL-terminated copies of the rest */
  size_t n = size - 6;
  char *text = (char *)malloc(n + 2);
  memcpy(text, data + 6, n);
  text[n] = text[n + 1] = '\0';
  const char *second = text + strlen(text) + 1;
  if (second > text + n) second = text + n;

  const cosy_voice *voice = g_voice;
  cosy_voice *own = NULL;
  if (mode == COSY_MODE_INSTRUCT) sp.instruct_text = second;
  if (mode == 3) {
    cosy_voice_features vf;
    cosy_voice_features_init(&vf, sizeof vf);
    vf.prompt_text = second;
    vf.speech_tokens = g_tok;
    vf.n_speech_tokens = 3;
    vf.mel = g_mel;
    vf.n_mel_frames = 7; /* one more than the tokens need: cut by the library */
    vf.speaker_embedding = g_spk;
    cosy_status st = cosy_voice_from_features(g_eng, &vf, &own);
    if (st != COSY_OK) {
      FUZZ_CHECK(refusal(st) && own == NULL, "voice from features: %d: %s", st, cosy_last_error());
      free(text);
      return 0;
    }
    voice = own;
    mode = COSY_MODE_ZERO_SHOT;
  }
  sp.mode = mode;
  if (!pull && !push_stop) {
    if (k0 & 64) sp.speed = 1.5f;
    float *pcm = NULL;
    int64_t ns = -1;
    cosy_status st = cosy_synthesize(g_eng, voice, text, &sp, &pcm, &ns);
    if (st == COSY_OK) {
      FUZZ_CHECK(pcm != NULL && ns >= 0, "synthesize: %lld samples", (long long)ns);
      check_pcm(pcm, ns, sp.sample_rate == 0);
      cosy_free(pcm);
    } else {
      FUZZ_CHECK(refusal(st) && pcm == NULL, "synthesize: %d: %s", st, cosy_last_error());
    }
  } else {
    int calls = 0;
    cosy_request *req = NULL;
    cosy_status st = cosy_request_submit(g_eng, voice, text, &sp, pull ? NULL : stop_after_one,
                                         &calls, &req);
    if (st != COSY_OK) {
      FUZZ_CHECK(refusal(st) && req == NULL, "submit: %d: %s", st, cosy_last_error());
    } else if (pull) {
      float buf[4096];
      int64_t got = 0;
      for (int reads = 0;; reads++) {
        st = cosy_request_read(req, buf, 4096, &got, -1);
        if (st != COSY_OK || got == 0) break;
        check_pcm(buf, got, sp.sample_rate == 0);
        if (cancel && reads == 0) cosy_request_cancel(req);
      }
      FUZZ_CHECK(st == COSY_OK || refusal(st) || (cancel && st == COSY_ERR_CANCELLED),
                 "read: %d: %s", st, cosy_last_error());
      cosy_request_stats rs;
      cosy_request_stats_init(&rs, sizeof rs);
      FUZZ_CHECK(cosy_request_get_stats(req, &rs) == COSY_OK && rs.done == 1, "stats");
      cosy_request_release(req);
    } else {
      st = cosy_request_wait(req, -1);
      FUZZ_CHECK(st == COSY_OK || refusal(st) || st == COSY_ERR_CANCELLED, "wait: %d: %s", st,
                 cosy_last_error());
      FUZZ_CHECK(calls <= 1, "%d chunks pushed after a stop", calls);
      cosy_request_release(req);
    }
  }
  cosy_voice_release(own);
  free(text);
  return 0;
}
