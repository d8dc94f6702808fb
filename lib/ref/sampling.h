/* sampling.h - the RAS speech-token sampler (docs/model.md section 4) on the host, used by the CPU
 * reference and the GPU path's host fallback (sampling runs on the host over a [n_vocab] log-prob
 * row). The GPU samples with kernels/sample.cu's cosy_k_ras_sample, the same algorithm step by
 * step with the same generator, tested to give the same tokens and generator states. The
 * parameters (cosy_sampling), their defaults and named constants are lib/sampling.h; the
 * generator (xoshiro256**, cosy_rng) is lib/rng.h.
 *
 * Token streams can never match the official implementation bit for bit (it uses CUDA
 * torch.multinomial); only the distribution is reproduced.
 *
 * RAS (repetition aware sampling), given logp[n_vocab] (the log_softmax of the speech head):
 *   1. x_i = logp_i / temperature (temperature 1 = official). If ignore_eos, x_i = -inf for every
 *      id >= COSY_SPEECH_TOKENS (6561), i.e. all stop ids 6561..n_vocab-1 are masked. CHOICE:
 *      HEAD upstream masks only 6561 (sos, a bug); masking all stop ids while i < min_len was
 *      upstream's evident intent (its code before 0e62489). We do that (docs/model.md 4).
 *   2. p = softmax(x) (fp32 values, sum in double).
 *   3. nucleus: order ids by p descending, ties by ascending id (= torch's stable sort); take
 *      them in that order while (cum < top_p && taken < top_k), cum += p (fp32 running sum as in
 *      upstream), so the token whose probability crosses top_p IS included. Draw one of the
 *      taken ids with probability proportional to p (multinomial normalises).
 *   4. repetition check: c = number of occurrences of that id in the last win_size entries of
 *      history. If c >= win_size * tau_r (computed in float: 10 * 0.1f == 1.0f, so with the
 *      defaults one occurrence triggers), set p[id] = 0 and draw from the full remaining
 *      distribution p (no top-k / top-p; the ignore_eos mask still applies). If that
 *      distribution has no mass left, the nucleus id is kept (upstream would raise an error).
 *      win_size 0 disables the check; tau_r 0 makes every draw a resample (as upstream).
 *   Uniform draws: one per multinomial; a draw u*sum is matched against the running sum in
 *   double, the first id whose running sum exceeds it wins (ids with p = 0 are never chosen).
 */
#ifndef COSY_REF_SAMPLING_H
#define COSY_REF_SAMPLING_H

#include <stddef.h>
#include <stdint.h>

#include "../sampling.h" /* lib/sampling.h: the parameters (this folder has a sampling.h too) */

/* Scratch floats cosy_sample_ras needs for a vocabulary of n_vocab: 2 * n_vocab. */
#define COSY_SAMPLE_SCRATCH(n_vocab) (2 * (size_t)(n_vocab))

/* RAS sampling of one token (see the top of this file). logp [n_vocab] is not modified;
 * history [n_history] holds the tokens generated so far (may be NULL when n_history is 0);
 * scratch holds at least COSY_SAMPLE_SCRATCH(n_vocab) floats (n_vocab < 2^24). Returns the token
 * id, or -1 with cosy_last_error() set on invalid arguments or a row without any finite entry. */
int32_t cosy_sample_ras(const float *logp, int n_vocab, const int32_t *history, int n_history,
                        const cosy_sampling *s, int ignore_eos, cosy_rng *rng, float *scratch);

#endif
