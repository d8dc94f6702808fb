/* flow.h - CPU reference (fp32) of the CosyVoice3 flow decoder CausalMaskedDiffWithDiT
 * (docs/model.md section 6): speaker projection, token embedding, PreLookaheadLayer, the 10-step cosine
 * Euler CFM solver with classifier-free guidance, and the DiT velocity estimator.
 *
 * Layouts: mel tensors handed to the caller are CHANNELS-FIRST [80][N] (as PyTorch's [B,80,N]);
 * the prompt mel given in is frame-major [n_prompt_frames][80] (as the voice stores it).
 * A ref_flow holds fp32 copies of every flow weight and the fixed noise; it is read-only after
 * ref_flow_create and may be shared by any number of threads (each call allocates its own
 * scratch). */
#ifndef COSY_REF_FLOW_H
#define COSY_REF_FLOW_H

#include <stdint.h>

#include "cosyvoice.h"
#include "model.h"

typedef struct ref_flow ref_flow; /* fp32 weights; read-only after create; shareable by threads */

/* Copy (and convert to fp32) every "flow.*" tensor of m. m may be freed afterwards. */
cosy_status ref_flow_create(const cosy_model *m, ref_flow **out);
/* NULL is a no-op. */
void ref_flow_free(ref_flow *f);

typedef struct ref_flow_debug { /* optional outputs for tests; any pointer may be NULL */
  float *spk_proj;      /* [80] */
  float *pre_lookahead; /* [n_tok_used][80] (n_tok_used = n_prompt+n_gen, minus 3 if !finalize) */
  float *mu;            /* [80][N] */
  float *x_steps;       /* [n_timesteps][80][N]: x after each Euler step */
  float *t_steps;       /* [n_timesteps]: t fed to the estimator at each step */
  float *est0_out;      /* [2][80][N]: first estimator call output (row 0 cond, row 1 uncond) */
} ref_flow_debug;

/* CausalMaskedDiffWithDiT.inference.
 * tokens: n_prompt prompt speech tokens followed by n_gen new tokens, each in [0, 6561).
 * prompt_mel: [n_prompt_frames][80] frame-major (n_prompt_frames must equal 2*n_prompt; may be
 * NULL when it is 0). spk: [192]. streaming: block-causal 50-frame attention mask (else full).
 * finalize: 0 = the last 3 tokens are only look-ahead context (needs n_gen >= 3).
 * Output *mel is malloc'd (free()), CHANNELS-FIRST [80][*n_frames], prompt frames removed;
 * *n_frames = 2*(n_prompt+n_gen - (finalize ? 0 : 3)) - n_prompt_frames (may be 0).
 * cancel: optional flag polled before every Euler step (non-zero -> COSY_ERR_CANCELLED).
 * dbg: optional intermediate outputs (see ref_flow_debug), may be NULL. */
cosy_status ref_flow_infer(const ref_flow *f, const int32_t *tokens, int n_prompt, int n_gen,
                           const float *prompt_mel, int n_prompt_frames, const float *spk,
                           int streaming, int finalize, const volatile int *cancel, float **mel,
                           int *n_frames, ref_flow_debug *dbg);

/* The flow's ODE time schedule and its time embedding: one implementation, used by ref_flow_infer
 * and the GPU flow (which computes both on the host and uploads them).
 *   flow_cosine_schedule: ts[0..n] = 1 - cos(s_i * 0.5 * pi), s = linspace(0, 1, n + 1) in fp32
 *     as torch computes it (from both ends: s_i = i / n below the middle, 1 - (n - i) / n above).
 *   flow_time_sinusoid: out[0..FLOW_TIME_FREQ_DIM) = [sin(a_0..a_127), cos(a_0..a_127)],
 *     a_i = (FLOW_TIME_SCALE t) * exp(-i ln(10000) / 127) in fp32. */
#define FLOW_TIME_FREQ_DIM 256 /* sinusoidal time embedding width (half 128) */
#define FLOW_TIME_SCALE 1000.0f
#define FLOW_TIME_MAX_PERIOD 10000.0
void flow_cosine_schedule(int n, float *ts);
void flow_time_sinusoid(float t, float *out);

/* The DiT estimator alone (for tests and the GPU parity harness): batch B, layouts as in the
 * golden files: x, mu, cond: [B][80][N]; t: [B]; spks: [B][80]; out: [B][80][N].
 * The padding mask is taken as all ones. */
/* The argument contract of a flow call, shared by ref_flow_infer and the GPU flow so both refuse
 * the same inputs with the same messages (`who` prefixes them): lengths, look-ahead, token range,
 * prompt mel frames, and at most max_frames frames. *n_used = tokens decoded (prompt included). */
cosy_status flow_check_call(const char *who, int vocab, int ratio, int lookahead, int max_frames,
                            const int32_t *tokens, int n_prompt, int n_gen,
                            const float *prompt_mel, int n_prompt_frames, const float *spk,
                            int finalize, int *n_used);

/* The blocks of `block` frames at the start of an utterance that depend on the prompt alone
 * (docs/scheduler.md section 3): frame i reads tokens up to i / ratio + lookahead, so the frames
 * i <= ratio (P - lookahead) - 1 see prompt tokens only, and a block is prompt-only when its last
 * frame is one of them (for the model's ratio 2 and look-ahead 3: 50 b + 49 <= 2 P - 7). Every
 * request of a voice computes the same values there; the GPU flow shares them per voice and the
 * scheduler leaves them out of a first chunk's frame count. 0 when none is. */
int flow_prompt_only_blocks(int P, int ratio, int lookahead, int block);

cosy_status ref_flow_estimator(const ref_flow *f, int B, int N, const float *x, const float *mu,
                               const float *t, const float *spks, const float *cond, int streaming,
                               float *out);

#endif
