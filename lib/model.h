/* model.h - the libcosyvoice model file: hyperparameters, validated tensor table, tokenizer data.
 *
 * cosy_model_load() maps a GGUF file (docs/model-format.md), reads the hyperparameters, builds the
 * list of every tensor the three models need from them, and checks each one's presence, shape
 * and dtype; a file with a missing, misshapen, wrongly typed or unexpected tensor is refused with
 * a message that names it. Tensor shapes below are given in PyTorch order (outermost first). */
#ifndef COSY_MODEL_H
#define COSY_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "cosyvoice.h"
#include "gguf.h"

#define COSY_MODEL_FORMAT_VERSION 1

typedef struct cosy_hparams {
  /* LLM (Qwen2) */
  int llm_hidden, llm_layers, llm_heads, llm_kv_heads, llm_head_dim, llm_inter;
  int text_vocab, speech_vocab /* 6761 */, speech_tokens /* 6561 */;
  float rope_theta, rms_eps;
  /* flow */
  int mel_dim /* 80 */, spk_dim /* 192 */, flow_vocab /* 6561 */, pre_lookahead /* 3 */;
  int pre_channels, dit_dim, dit_depth, dit_heads, dit_head_dim, dit_ff;
  int conv_pos_kernel, conv_pos_groups, chunk_frames /* 50 */, token_mel_ratio /* 2 */;
  int n_timesteps /* 10 */, noise_frames /* 15000 */;
  float cfg_rate;
  /* HiFT */
  int hift_ch, hift_cond_ch, nb_harmonics, sample_rate, n_fft, hop, conv_pre_look_right;
  int up_rates[3], up_kernels[3], rb_kernels[3], rb_dilations[3], src_rb_kernels[3];
  float nsf_alpha, nsf_sigma, voiced_threshold, lrelu_slope, audio_limit;
  /* tokenizer */
  int n_tokens, n_merges, eos_id, endofprompt_id;
  /* front end (optional: has_* = 0 when the file has no such model; docs/model-format.md 2.6) */
  int has_s3tok, s3_mels /* 128 */, s3_state, s3_heads, s3_layers, s3_fsmn_kernel;
  float s3_ln_eps, s3_rope_theta, s3_fsq_scale;
  int has_campplus, cam_feat_dim /* 80 */, cam_m_channels, cam_init_channels, cam_growth;
  int cam_bn_channels, cam_embedding /* 192 */, cam_seg_len /* 100 */;
  int cam_layers[3], cam_kernels[3], cam_dilations[3];
  uint32_t weight_type; /* GGML_* of the LLM/flow matrices */
} cosy_hparams;

typedef struct cosy_model {
  gguf_file *f;
  cosy_hparams hp;
  gguf_str *tokens;        /* [n_tokens] views into the file */
  int32_t *token_types;    /* [n_tokens]: 1 normal, 3 control, 4 user-defined (added special) */
  gguf_str *merges;        /* [n_merges] "left right" */
} cosy_model;

cosy_status cosy_model_load(const char *path, cosy_model **out);
/* validate an already parsed file (tests); takes ownership of f on success and failure */
cosy_status cosy_model_from_gguf(gguf_file *f, cosy_model **out);
void cosy_model_free(cosy_model *m);

/* The tensor (validated at load), or NULL with COSY_ERR_MODEL_FORMAT set when absent. */
const gguf_tensor *cosy_model_tensor(const cosy_model *m, const char *name);
/* A malloc'd float32 copy of a tensor (converted from bf16/f16), or NULL with the error set.
 * The caller frees it. printf-style name. */
float *cosy_model_f32(const cosy_model *m, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The same as a status: *out = fp32 copy (caller frees); COSY_ERR_MODEL_FORMAT when the tensor
 * is absent, COSY_ERR_NO_MEMORY when the copy cannot be allocated (message set either way). */
cosy_status cosy_model_get_f32(const cosy_model *m, float **out, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Convert n elements of a tensor's data to float32. */
void cosy_to_f32(const void *src, uint32_t ggml_type, float *dst, size_t n);
float cosy_bf16_to_f32(uint16_t h);
float cosy_f16_to_f32(uint16_t h);

#endif
