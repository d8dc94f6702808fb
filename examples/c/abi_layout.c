/* abi_layout.c - print the size of every public struct of cosyvoice.h and the offset and size of
 * each of its fields, as the C compiler lays them out:
 *
 *   struct cosy_engine_config 56
 *   field cosy_engine_config struct_size 0 4
 *   ...
 *
 * The Python and Rust examples' tests compile and run this to check that their mirrors of the
 * structs (ctypes.Structure, #[repr(C)]) match the installed header field for field; a field the
 * header gains and the list below lacks still shows up as a size mismatch.
 *   cc abi_layout.c $(pkg-config --cflags cosyvoice) -o abi_layout */
#include <cosyvoice.h>
#include <stddef.h>
#include <stdio.h>

#define S(T) printf("struct %s %zu\n", #T, sizeof(T));
#define F(T, f) printf("field %s %s %zu %zu\n", #T, #f, offsetof(T, f), sizeof(((T *)0)->f));

int main(void) {
  S(cosy_engine_config)
  F(cosy_engine_config, struct_size) F(cosy_engine_config, flags)
  F(cosy_engine_config, model_path) F(cosy_engine_config, device)
  F(cosy_engine_config, gpu_memory_fraction) F(cosy_engine_config, max_active)
  F(cosy_engine_config, max_queued) F(cosy_engine_config, cpu_threads)
  F(cosy_engine_config, log_level) F(cosy_engine_config, log_fn) F(cosy_engine_config, log_user)
  F(cosy_engine_config, first_chunk_wait_max) F(cosy_engine_config, vocoder_precision)

  S(cosy_engine_stats)
  F(cosy_engine_stats, struct_size) F(cosy_engine_stats, reserved)
  F(cosy_engine_stats, weights_bytes) F(cosy_engine_stats, kv_bytes)
  F(cosy_engine_stats, workspace_bytes) F(cosy_engine_stats, device_bytes_total)
  F(cosy_engine_stats, kv_pages_total) F(cosy_engine_stats, kv_pages_used)
  F(cosy_engine_stats, active) F(cosy_engine_stats, queued)
  F(cosy_engine_stats, requests_done) F(cosy_engine_stats, audio_samples_out)
  F(cosy_engine_stats, llm_steps) F(cosy_engine_stats, llm_step_rows) F(cosy_engine_stats, flow_calls)
  F(cosy_engine_stats, flow_jobs) F(cosy_engine_stats, vocoder_calls) F(cosy_engine_stats, vocoder_jobs)
  F(cosy_engine_stats, flow_pages_total) F(cosy_engine_stats, flow_pages_used)

  S(cosy_voice_features)
  F(cosy_voice_features, struct_size) F(cosy_voice_features, reserved)
  F(cosy_voice_features, prompt_text) F(cosy_voice_features, speech_tokens)
  F(cosy_voice_features, n_speech_tokens) F(cosy_voice_features, n_mel_frames)
  F(cosy_voice_features, mel) F(cosy_voice_features, speaker_embedding)
  F(cosy_voice_features, speaker_dim) F(cosy_voice_features, reserved2)

  S(cosy_synth_params)
  F(cosy_synth_params, struct_size) F(cosy_synth_params, flags) F(cosy_synth_params, mode)
  F(cosy_synth_params, sample_rate) F(cosy_synth_params, instruct_text)
  F(cosy_synth_params, speed) F(cosy_synth_params, temperature) F(cosy_synth_params, top_p)
  F(cosy_synth_params, top_k) F(cosy_synth_params, seed)
  F(cosy_synth_params, first_chunk_tokens) F(cosy_synth_params, max_tokens)
  F(cosy_synth_params, min_tokens) F(cosy_synth_params, reserved)

  S(cosy_chunk)
  F(cosy_chunk, struct_size) F(cosy_chunk, flags) F(cosy_chunk, pcm) F(cosy_chunk, n_samples)
  F(cosy_chunk, offset) F(cosy_chunk, sample_rate) F(cosy_chunk, reserved)

  S(cosy_request_stats)
  F(cosy_request_stats, struct_size) F(cosy_request_stats, reserved)
  F(cosy_request_stats, ttfb_s) F(cosy_request_stats, total_s) F(cosy_request_stats, llm_s)
  F(cosy_request_stats, flow_s) F(cosy_request_stats, vocoder_s)
  F(cosy_request_stats, n_samples) F(cosy_request_stats, n_text_tokens)
  F(cosy_request_stats, n_speech_tokens) F(cosy_request_stats, n_chunks)
  F(cosy_request_stats, done)

  S(cosy_text_mark)
  F(cosy_text_mark, struct_size) F(cosy_text_mark, reserved) F(cosy_text_mark, text_begin)
  F(cosy_text_mark, text_end) F(cosy_text_mark, sample) F(cosy_text_mark, text_token)
  F(cosy_text_mark, speech_token)
  return 0;
}
