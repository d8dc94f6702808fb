/* fuzz_engine.h - the CPU engine and short voice that the engine-driving fuzz targets (api,
 * textstream) make once per process.
 *
 * The demo voice file must load; its 50 prompt tokens would make every run slow, so the runs
 * use a 2-token voice with its speaker embedding and the start of its mel, with the given
 * prompt text. The demo voice's first features stay in the caller's arrays (which outlive the
 * call), for voices a target makes later. */
#ifndef COSY_FUZZ_ENGINE_H
#define COSY_FUZZ_ENGINE_H

#include "cosyvoice.h"
#include "engine.h" /* struct cosy_voice: the demo voice's features */
#include "fuzz_common.h"

static inline void fuzz_engine_and_short_voice(const char *prompt_text, cosy_engine **eng,
                                               cosy_voice **voice, float spk[192],
                                               float mel[8 * 80], int32_t tok[4]) {
  cosy_engine_config cfg;
  cosy_engine_config_init(&cfg, sizeof cfg);
  cfg.model_path = fuzz_model_path();
  cfg.device = COSY_DEVICE_CPU;
  FUZZ_CHECK(cosy_engine_create(&cfg, eng) == COSY_OK, "%s", cosy_last_error());
  cosy_voice *demo;
  FUZZ_CHECK(cosy_voice_load(*eng, fuzz_voice_path(), &demo) == COSY_OK, "%s",
             cosy_last_error());
  memcpy(spk, demo->spk, 192 * sizeof *spk);
  memcpy(mel, demo->mel, 8 * 80 * sizeof *mel);
  memcpy(tok, demo->speech_tokens, 4 * sizeof *tok);
  cosy_voice_release(demo);
  cosy_voice_features vf;
  cosy_voice_features_init(&vf, sizeof vf);
  vf.prompt_text = prompt_text;
  vf.speech_tokens = tok;
  vf.n_speech_tokens = 2;
  vf.mel = mel;
  vf.n_mel_frames = 4;
  vf.speaker_embedding = spk;
  FUZZ_CHECK(cosy_voice_from_features(*eng, &vf, voice) == COSY_OK, "%s", cosy_last_error());
}

#endif
