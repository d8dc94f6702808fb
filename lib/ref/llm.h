/* llm.h - CPU fp32 reference of the CosyVoice3 speech-token LLM (docs/model.md sections 3 and 4).
 *
 * Model (Qwen2 decoder, H = hidden, nh/nkv q/kv heads of hd = 64, I = intermediate):
 *   lm_input = [sos, E_text(prompt text ids ++ tts text ids), task_id, E_speech(prompt tokens)]
 *              sos = speech_embedding[6561], task_id = speech_embedding[6563]
 *   per layer:  h += Wo · attn(rope(Wq·n1(h) + bq), rope(Wk·n1(h) + bk), Wv·n1(h) + bv)
 *               h += Wd · (silu(Wg·n2(h)) * (Wu·n2(h)))
 *   RMSNorm n(x) = w * (x * rsqrt(mean(x^2) + eps)), fp32; NeoX RoPE (rotate_half), inv_freq
 *   theta^(-2i/hd), angle = pos * inv_freq in fp32; GQA (q head j reads kv head j / (nh/nkv));
 *   causal attention with scale 1/sqrt(hd); final norm; logp = log_softmax(llm_decoder · h).
 *   The Qwen text lm_head is never computed (unused upstream).
 *
 * Decode loop (ref_llm_generate), docs/model.md section 3: the whole lm_input is one prefill, then one token
 * per step with the KV cache; the next input is speech_embedding[token]; sampling by RAS with
 * all stop ids masked while i < min_len (see sampling.h); stop at the first id >= 6561 (not
 * emitted) or after max_len tokens. Silent-token filter of CosyVoice3's llm_job: a run of
 * consecutive silent tokens {1, 2, 28, 29, 55, 248, 494, 2241, 2242, 2322, 2323} reaches the
 * callback only up to 5 long; further ones are dropped there but still fed back to the LLM and
 * kept in the RAS history.
 *
 * Memory: all layer weights, the final norm, speech_embedding and llm_decoder are fp32 copies
 * owned by the ref_llm. The text embedding (151936 rows for the real model) is NOT copied: rows are
 * converted on demand from the model file, so the cosy_model must outlive the ref_llm.
 * A ref_llm is read-only after creation and may be shared by threads, each with its own ref_kv.
 */
#ifndef COSY_REF_LLM_H
#define COSY_REF_LLM_H

#include <stdint.h>

#include "cosyvoice.h"
#include "model.h"
#include "ref/sampling.h"

typedef struct ref_llm ref_llm;
typedef struct ref_kv ref_kv;

/* Load the LLM weights of m as fp32. m must stay alive as long as the ref_llm. */
cosy_status ref_llm_create(const cosy_model *m, ref_llm **out);
void ref_llm_free(ref_llm *l);
int ref_llm_hidden(const ref_llm *l);       /* H */
int ref_llm_speech_vocab(const ref_llm *l); /* rows of the speech head (6761) */

/* A KV cache for one sequence of up to max_positions positions. */
cosy_status ref_kv_create(const ref_llm *l, int max_positions, ref_kv **out);
void ref_kv_free(ref_kv *kv);
int ref_kv_len(const ref_kv *kv);       /* positions already stored */
void ref_kv_reset(ref_kv *kv);          /* forget all positions */

/* lm_input = [sos, text (prompt text ids then tts text ids), task_id, prompt speech tokens].
 * *emb is malloc'd [*L][H] (free() it). Text ids must lie in [0, text_vocab) and, as upstream
 * asserts, contain <|endofprompt|>; speech tokens in [0, 6561). Either list may be empty (NULL
 * with n = 0). */
cosy_status ref_llm_build_input(const ref_llm *l, const int32_t *prompt_text, int n_prompt_text,
                                const int32_t *tts_text, int n_tts_text,
                                const int32_t *prompt_speech, int n_prompt_speech, float **emb,
                                int *L);

/* Embeddings of a list of items (text streaming builds its input piece by piece): item >= 0 is a
 * text id (text embedding row), item < 0 is the speech-embedding row -1 - item (so sos is
 * -1 - 6561, task_id -1 - 6563). *emb is malloc'd [n][H]. COSY_ERR_INVALID_ARG for an id out of
 * range. */
cosy_status ref_llm_embed_items(const ref_llm *l, const int32_t *items, int n, float **emb);

/* out[H] = speech_embedding[token]; a token outside [0, speech_vocab) gives zeros. */
void ref_llm_embed_speech(const ref_llm *l, int32_t token, float *out);

/* Append n positions (inputs emb [n][H]) at positions ref_kv_len(kv) .. +n-1. Optional outputs
 * (NULL = skip): logp_all [n][speech_vocab], logp_last [speech_vocab] (of the last position),
 * h_layer0 [n][H] (residual stream after decoder layer 0), h_norm [n][H] (after the final norm).
 * Fails without touching kv when the cache would overflow. */
cosy_status ref_llm_forward(const ref_llm *l, ref_kv *kv, const float *emb, int n,
                            float *logp_all, float *logp_last, float *h_layer0, float *h_norm);

/* The silent-token filter, one token at a time: *run is the length of the current run of
 * silent tokens (start at 0). Returns 1 when token goes on to the flow, 0 when it is dropped. */
int ref_silent_pass(int *run, int32_t token);

/* Called with each token passed on to the flow (after the silent filter); a non-zero return
 * stops generation (cancel). */
typedef int (*ref_token_fn)(void *user, int32_t token);

/* Run the decode loop over lm_input [L][H] (see the top of this file). min_len / max_len come
 * from the caller (upstream: 2x / 20x the tts text token count). fn may be NULL. *n_generated
 * (may be NULL) gets the number of tokens the LLM produced before the stop id, dropped silent
 * tokens included. Returns COSY_ERR_CANCELLED when fn asked to stop. */
cosy_status ref_llm_generate(const ref_llm *l, const float *lm_input, int L, int min_len,
                             int max_len, const cosy_sampling *s, cosy_rng *rng, ref_token_fn fn,
                             void *user, int *n_generated);

#endif
