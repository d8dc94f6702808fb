/* tokenizer.h - the text tokenizer: Qwen2 byte-level BPE plus CosyVoice3's added special tokens
 * (docs/model.md section 2), reading its vocabulary and merges from the model file.
 *
 * cosy_tokenize(text) = for each stretch of text between added special tokens (matched atomically
 * on the raw text, leftmost-longest; each gives its own id): NFC, the Qwen2 pre-tokenizer split,
 * GPT-2 byte-to-unicode mapping of each piece's UTF-8 bytes, BPE merges by rank, vocabulary ids.
 * No BOS/EOS is added. Details and choices are in tokenizer.c's header comment.
 *
 * The tokenizer copies what it needs from the model: it may outlive the model. It is immutable
 * after creation, so any number of threads may call cosy_tokenize on one tokenizer at once. */
#ifndef COSY_TOKENIZER_H
#define COSY_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "cosyvoice.h"
#include "model.h"

typedef struct cosy_tokenizer cosy_tokenizer;

/* Build the vocabulary and merge hash maps from m->tokens / token_types / merges.
 * COSY_ERR_MODEL_FORMAT when the data is unusable (a byte token missing, a merge naming unknown
 * tokens, a special token that is not UTF-8). */
cosy_status cosy_tokenizer_create(const cosy_model *m, cosy_tokenizer **out);
void cosy_tokenizer_free(cosy_tokenizer *t);

/* Token ids of text[0..len) (need not be NUL-terminated; NUL bytes are ordinary characters).
 * On success *ids is malloc'd (release with free(); never NULL, even when *n_ids is 0 for empty
 * text). On failure *ids = NULL, *n_ids = 0: COSY_ERR_INVALID_ARG for NULL arguments or
 * len > 1 GiB, COSY_ERR_TEXT for invalid UTF-8 (the message gives the byte offset). */
cosy_status cosy_tokenize(const cosy_tokenizer *t, const char *text, size_t len, int32_t **ids,
                          int32_t *n_ids);

/* Id of the token whose string is exactly `token` (NUL-terminated; a vocabulary string, i.e. in
 * byte-level form for BPE tokens, or a special token such as "<|endofprompt|>"), or -1. */
int32_t cosy_tokenizer_find(const cosy_tokenizer *t, const char *token);

/* Internal, for tests: the canonical ordering step of NFC on d[0..m) (each run of non-starters
 * sorted stably by combining class; cosy_work.ccc_ops counts its work), 0 or -1 when out of
 * memory; and the canonical combining class the tokenizer uses for c. */
int cosy_canonical_order(uint32_t *d, size_t m);
int cosy_ccc(uint32_t c);

/* Number of tokens in the vocabulary (ids 0 .. n-1). */
int32_t cosy_tokenizer_n_tokens(const cosy_tokenizer *t);

#endif
