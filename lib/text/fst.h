/* fst.h - weighted finite-state transducers over bytes (tropical semiring) for text
 * normalization: a reader of OpenFst binary "vector" FSTs and the one-best rewrite of a string.
 *
 * cosy_fst_rewrite(T, s) computes what OpenFst's Compose(A(s), T) followed by ShortestPath(n = 1)
 * computes, A(s) being the linear acceptor of the bytes of s, and returns the output labels of
 * that path (label 0 = epsilon is dropped), including OpenFst's choice among paths of equal
 * weight. fst.c's header comment gives the algorithm. */
#ifndef COSY_TEXT_FST_H
#define COSY_TEXT_FST_H

#include <stddef.h>
#include <stdint.h>

#include "cosyvoice.h"

typedef struct cosy_fst cosy_fst;
/* Scratch memory for rewrites, reused between calls; one thread at a time. */
typedef struct cosy_fst_ws cosy_fst_ws;
cosy_fst_ws *cosy_fst_ws_new(void); /* NULL when out of memory */
void cosy_fst_ws_free(cosy_fst_ws *w);

/* Parse an OpenFst binary FST of type "vector" and arc type "standard" (tropical float weights)
 * from buf[0..n) (copied; buf may be released afterwards). Every state's arcs must be sorted by
 * input label. COSY_ERR_MODEL_FORMAT (message names `what`) when the data is not such an FST. */
cosy_status cosy_fst_load(const void *buf, size_t n, const char *what, cosy_fst **out);
void cosy_fst_free(cosy_fst *f);
/* Host bytes the loaded FST holds. */
size_t cosy_fst_bytes(const cosy_fst *f);

/* One-best rewrite of in[0..n): *out (malloc'd, NUL-terminated, *out_len bytes) holds the output
 * labels of the best path, "" when the FST accepts no path for the input (as OpenFst gives an
 * empty FST then). COSY_ERR_TEXT when the composition would exceed max_states states (0 = the
 * default, 2M: about 8,000 bytes of English text in one pass), COSY_ERR_NO_MEMORY when allocation
 * fails. ws may be NULL (scratch allocated for the call). The FST is read-only: threads may share
 * it, each with its own ws. Scratch memory: about 40 bytes per composed state plus 12 per
 * composed arc (the grammars make 100..200 states per input byte); a ws keeps it for the next
 * call unless it exceeds 512k states (about 30 MB). */
cosy_status cosy_fst_rewrite(const cosy_fst *f, cosy_fst_ws *ws, const char *in, size_t n,
                             size_t max_states, char **out, size_t *out_len);

#endif
