/* Compiled with -std=c99 -pedantic -Wall -Wextra -Werror (make check-header): the public header
 * must be clean C99. Touches every type and function so nothing is left unparsed. */
#include "cosyvoice.h"

int main(void);
int main(void) {
  cosy_engine_config c;
  cosy_synth_params p;
  cosy_voice_features f;
  cosy_engine_stats s;
  cosy_request_stats rs;
  cosy_chunk ch;
  cosy_engine *e = 0;
  cosy_voice *v = 0;
  cosy_request *r = 0;
  cosy_engine_config_init(&c, sizeof c);
  cosy_synth_params_init(&p, sizeof p);
  cosy_voice_features_init(&f, sizeof f);
  cosy_engine_stats_init(&s, sizeof s);
  cosy_request_stats_init(&rs, sizeof rs);
  (void)ch;
  (void)cosy_version_number();
  (void)cosy_version_string();
  (void)cosy_status_str(COSY_ERR_INTERNAL);
  (void)cosy_last_error();
  (void)cosy_engine_create(&c, &e);
  (void)cosy_engine_sample_rate(e);
  (void)cosy_engine_get_stats(e, &s);
  (void)cosy_voice_load(e, "x", &v);
  (void)cosy_voice_save(v, "x");
  (void)cosy_voice_from_features(e, &f, &v);
  (void)cosy_voice_from_audio(e, 0, 0, 0, 0, &v);
  (void)cosy_audio_to_mel(0, 0, 0, 0, 0);
  (void)cosy_synthesize(e, v, "x", &p, 0, 0);
  (void)cosy_request_submit(e, v, "x", &p, 0, 0, &r);
  (void)cosy_request_read(r, 0, 0, 0, 0);
  (void)cosy_request_get_stats(r, &rs);
  cosy_request_cancel(r);
  (void)cosy_request_wait(r, 0);
  cosy_request_release(r);
  cosy_voice_release(v);
  cosy_engine_destroy(e);
  cosy_free(0);
  return COSY_VERSION_NUMBER > 0 ? 0 : 1;
}
