/* normalize.h - the official CosyVoice3 text front end (frontend.text_normalize, wetext branch)
 * in C: normalization, long-text splitting and the punctuation-only filter.
 *
 * cosy_text_normalize(tn, text) = text_normalize(text, split=False):
 *   - text holding both "<|" and "|>" is returned unchanged;
 *   - otherwise the text is stripped (Python str.strip) and, when it holds a CJK ideograph
 *     (U+4E00..U+9FFF): wetext TN (language picked as wetext's "auto" does, erhua kept), "\n"
 *     removed, replace_blank, replace_corner_mark, "." -> "。", " - " -> "，", remove_bracket, a
 *     trailing run of "，" "," "、" -> "。"; else: wetext TN, then spell_out_number (inflect's
 *     number_to_words wording for every run of digits).
 * cosy_text_split(tn, text) = text_normalize(text, split=True): the same text cut by
 *   split_paragraph (token_max_n 80, token_min_n 60, merge_len 20, comma_split False; zh lengths
 *   in characters, en lengths in tokens of the model's tokenizer) with the pieces that are only
 *   punctuation or symbols dropped (is_only_punctuation).
 *
 * wetext TN (normalize.c) = strip; tagger FST one-best rewrite (fst.h), strip; token parser
 * reorder; verbalizer FST rewrite, strip. The four FSTs come from the model file (keys
 * cosyvoice.text.*, docs/model-format.md section 9). Without them the normalizer is "minimal":
 * whitespace runs become one space and the ends are trimmed (text with "<|" and "|>" untouched),
 * and splitting cuts that text as above (split_paragraph, punctuation filter; English lengths in
 * bytes when there is no tokenizer); COSY_TN_REQUIRE_FULL makes these calls fail with
 * COSY_ERR_UNSUPPORTED instead. Where the library deliberately differs from the Python code
 * (inputs on which it raises an exception) is listed in tests/data/text/README.md.
 *
 * A normalizer's grammars are immutable after creation and any number of threads may use it at
 * once: each call takes a scratch space from the normalizer's pool (a mutex guards the pool) and
 * gives it back. */
#ifndef COSY_TEXT_NORMALIZE_H
#define COSY_TEXT_NORMALIZE_H

#include <stddef.h>
#include <stdint.h>

#include "cosyvoice.h"
#include "gguf.h"

struct cosy_tokenizer;
typedef struct cosy_text_norm cosy_text_norm;

/* The grammar keys of the model file, in the order of the `bufs` argument below. */
#define COSY_TN_N_GRAMMARS 4
extern const char *const cosy_tn_grammar_keys[COSY_TN_N_GRAMMARS];

/* From the model file (f may lack the grammar keys: the normalizer is then minimal; when some but
 * not all are present, or one is not a valid FST, COSY_ERR_MODEL_FORMAT). tok is used for the
 * English split lengths and must outlive the normalizer (NULL: lengths are counted in bytes). */
cosy_status cosy_text_norm_create(const gguf_file *f, const struct cosy_tokenizer *tok,
                                  cosy_text_norm **out);
/* From four OpenFst files in memory (zh tagger, zh verbalizer, en tagger, en verbalizer, the
 * order of cosy_tn_grammar_keys), copied; all NULL gives the minimal normalizer. */
cosy_status cosy_text_norm_create_from_buffers(const void *const bufs[COSY_TN_N_GRAMMARS],
                                               const size_t sizes[COSY_TN_N_GRAMMARS],
                                               const struct cosy_tokenizer *tok,
                                               cosy_text_norm **out);
void cosy_text_norm_free(cosy_text_norm *tn);
/* 1 when the grammars are loaded (full normalization), 0 when minimal (also for tn == NULL). */
int cosy_text_norm_is_full(const cosy_text_norm *tn);
/* Host bytes held by the normalizer (the decoded grammars). */
size_t cosy_text_norm_bytes(const cosy_text_norm *tn);

#define COSY_TN_REQUIRE_FULL 0x1u /* COSY_ERR_UNSUPPORTED instead of the minimal rule */

/* Normalize UTF-8 text (split=False). *out is malloc'd (free()). tn may be NULL (minimal).
 * COSY_ERR_TEXT for invalid UTF-8; COSY_ERR_NO_MEMORY. An empty result is not an error here. */
cosy_status cosy_text_normalize(const cosy_text_norm *tn, const char *utf8, uint32_t flags,
                                char **out);
/* Normalize and split (split=True). *segments is a malloc'd array of *n malloc'd strings, freed
 * with cosy_text_segments_free; *n may be 0 (nothing to say). */
cosy_status cosy_text_split(const cosy_text_norm *tn, const char *utf8, uint32_t flags,
                            char ***segments, int *n);
void cosy_text_segments_free(char **segments, int n);

/* Pieces used by the above, exposed for tests. */
/* split_paragraph(text, lang) without the punctuation filter; lang_zh 1 = "zh", 0 = "en". */
cosy_status cosy_text_split_paragraph(const char *text, int lang_zh,
                                      const struct cosy_tokenizer *tok, char ***segments, int *n);
/* is_only_punctuation: every character in Unicode categories P* or S* (also for ""). */
int cosy_text_is_only_punctuation(const char *text);
/* spell_out_number (inflect number_to_words for each run of str.isdigit() characters). */
char *cosy_text_spell_out_numbers(const char *text);
/* Text longer than this (bytes, after stripping) is normalized in pieces of at most this size,
 * cut after a newline, a sentence end or a space (the language is still chosen on the whole
 * text); shorter text is normalized in one pass, as wetext does. This bounds the scratch memory
 * of one call to about 20 MB (the English tagger makes ~150 composed states per byte). */
#define COSY_TN_PASS_BYTES 2048
/* wetext Normalizer().normalize(text) (TN, lang "auto", erhua kept); needs the grammars. */
cosy_status cosy_text_wetext(const cosy_text_norm *tn, const char *text, char **out);

#endif
