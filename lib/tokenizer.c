/* tokenizer.c - Qwen2 byte-level BPE with CosyVoice3's added special tokens (spec section 1.3).
 *
 * What it computes (= HF tokenizers: AddedVocabulary split, NFC normalizer, Split pre-tokenizer with
 * the Qwen2 regex, ByteLevel mapping, BPE model):
 *
 *   1. Added special tokens (token types 3 "control" and 4 "user-defined", e.g. <|endoftext|>,
 *      <|endofprompt|>, [breath], <strong>) are found in the RAW text, leftmost match first and the
 *      longest one at that position; each yields its own id and is never merged with neighbours.
 *   2. Every stretch of text between them is NFC-normalised (canonical decomposition, canonical
 *      ordering, canonical composition incl. Hangul; tables in unicode_data.c) and cut into pieces
 *      by the Qwen2 pre-tokenizer regex, whose alternatives are tried in order at each position:
 *        A1 (?i:'s|'t|'re|'ve|'m|'ll|'d)
 *        A2 [^\r\n\p{L}\p{N}]?\p{L}+
 *        A3 \p{N}                       (one digit-class character per piece)
 *        A4 ' '?[^\s\p{L}\p{N}]+[\r\n]*
 *        A5 \s*[\r\n]+                  (= up to and including the last CR/LF of a whitespace run)
 *        A6 \s+(?!\S)                   (a whitespace run, minus its last char if a non-space follows)
 *        A7 \s+
 *      The regex is hand-compiled below (match_piece); its greedy/backtracking outcome is spelled
 *      out per alternative. \p{L} = general category L*, \p{N} = N*, \s = the Unicode White_Space
 *      property (the 25 code points below; what Oniguruma's \s means for Unicode text). Case
 *      folding in A1 covers ASCII and U+017F (long s, which simple-folds to 's').
 *   3. Each piece's UTF-8 bytes become the symbols b -> id(byte_to_unicode(b)) (GPT-2 mapping), then
 *      BPE: repeatedly merge the adjacent pair with the lowest merge rank, ties to the leftmost pair
 *      (a binary heap of candidate pairs, stale entries skipped), until no pair has a merge. Symbols
 *      are token ids throughout: merge "l r" is stored as (id(l), id(r)) -> (rank, id(l r)).
 *
 * Choices: a merge whose parts or result are not in the vocabulary, or a merge line without exactly
 * one space, makes create fail (HF refuses such files too); duplicate merges keep the lowest rank;
 * duplicate token strings map to the lowest id. All 256 byte tokens must exist. Invalid UTF-8 input
 * is refused (COSY_ERR_TEXT with the byte offset) rather than replaced. Unicode data are Python's
 * (see unicode_data.h for the version); HF's Rust crates may use a slightly newer Unicode version,
 * which only matters for code points assigned in between.
 *
 * Thread safety: the tokenizer is immutable after create; cosy_tokenize allocates its own scratch. */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "unicode_data.h"
#include "util.h"

#define MAX_TEXT_BYTES ((size_t)1 << 30)
#define MAX_SPECIAL_LEN 256 /* longer type-3/4 tokens are not matched as special tokens */

struct cosy_tokenizer {
  int32_t n_tokens;
  char *arena;          /* all token strings, back to back */
  size_t *tok_off;      /* [n_tokens + 1] offsets into arena */
  int32_t *vmap;        /* vocabulary hash: slot -> id, -1 empty (linear probing) */
  uint32_t vmask;
  uint64_t *pkey;       /* merge hash: (left id << 32 | right id), UINT64_MAX empty */
  int32_t *prank, *pres; /* rank and result id of each slot */
  uint32_t pmask;
  int32_t byte_id[256]; /* token id of each single byte */
  uint8_t *special;     /* [n_tokens] 1 = added special token (type 3 or 4) */
  uint8_t spec_first[256];  /* 1 = some special token starts with this byte */
  int n_spec_lens;
  int spec_lens[MAX_SPECIAL_LEN]; /* distinct special token lengths, longest first */
};

/* ---------------------------------------------------------------------------------------------
 * hashing */

static uint32_t hash_bytes(const char *s, size_t n) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
  return h;
}

static uint32_t hash_pair(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return (uint32_t)k;
}

static uint32_t pow2_at_least(size_t n) {
  uint32_t c = 16;
  while (c < n) c <<= 1;
  return c;
}

static int32_t vocab_lookup(const cosy_tokenizer *t, const char *s, size_t n) {
  for (uint32_t i = hash_bytes(s, n) & t->vmask;; i = (i + 1) & t->vmask) {
    int32_t id = t->vmap[i];
    if (id < 0) return -1;
    size_t off = t->tok_off[id], len = t->tok_off[id + 1] - off;
    if (len == n && memcmp(t->arena + off, s, n) == 0) return id;
  }
}

static int pair_lookup(const cosy_tokenizer *t, int32_t a, int32_t b, int32_t *rank,
                       int32_t *res) {
  uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  for (uint32_t i = hash_pair(k) & t->pmask;; i = (i + 1) & t->pmask) {
    if (t->pkey[i] == UINT64_MAX) return 0;
    if (t->pkey[i] == k) {
      *rank = t->prank[i];
      *res = t->pres[i];
      return 1;
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * Unicode helpers */

enum { C_OTHER = 0, C_L = 1, C_N = 2, C_WS = 3, C_CRLF = 4 };

static uint32_t range_lookup(const cosy_uc_range *r, int n, uint32_t cp) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (cp < r[mid].lo) hi = mid - 1;
    else if (cp > r[mid].hi) lo = mid + 1;
    else return r[mid].v;
  }
  return 0;
}

static int is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

static uint8_t char_class(uint32_t c) {
  if (c == '\r' || c == '\n') return C_CRLF;
  if (is_white_space(c)) return C_WS;
  if (c < 0x80) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return C_L;
    if (c >= '0' && c <= '9') return C_N;
    return C_OTHER;
  }
  return (uint8_t)range_lookup(cosy_uc_class, cosy_uc_n_class, c);
}

static int ccc_of(uint32_t c) {
  return c < 0x300 ? 0 : (int)range_lookup(cosy_uc_ccc, cosy_uc_n_ccc, c);
}

/* Hangul (Unicode ch. 3.12) */
#define H_SBASE 0xAC00u
#define H_LBASE 0x1100u
#define H_VBASE 0x1161u
#define H_TBASE 0x11A7u
#define H_LCOUNT 19u
#define H_VCOUNT 21u
#define H_TCOUNT 28u
#define H_NCOUNT (H_VCOUNT * H_TCOUNT)
#define H_SCOUNT (H_LCOUNT * H_NCOUNT)

static const cosy_uc_dec *decomp_of(uint32_t c) {
  int lo = 0, hi = cosy_uc_n_decomp - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (c < cosy_uc_decomp[mid].cp) hi = mid - 1;
    else if (c > cosy_uc_decomp[mid].cp) lo = mid + 1;
    else return &cosy_uc_decomp[mid];
  }
  return NULL;
}

/* composite of a + b, or 0 */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= H_LBASE && a < H_LBASE + H_LCOUNT && b >= H_VBASE && b < H_VBASE + H_VCOUNT)
    return H_SBASE + ((a - H_LBASE) * H_VCOUNT + (b - H_VBASE)) * H_TCOUNT;
  if (a >= H_SBASE && a < H_SBASE + H_SCOUNT && (a - H_SBASE) % H_TCOUNT == 0 && b > H_TBASE &&
      b < H_TBASE + H_TCOUNT)
    return a + (b - H_TBASE);
  int lo = 0, hi = cosy_uc_n_comp - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    const cosy_uc_pair *p = &cosy_uc_comp[mid];
    if (a < p->a || (a == p->a && b < p->b)) hi = mid - 1;
    else if (a > p->a || b > p->b) lo = mid + 1;
    else return p->c;
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * growable scratch owned by one cosy_tokenize call */

typedef struct {
  void *p;
  size_t cap; /* elements */
} vec;

static int vec_reserve(vec *v, size_t n, size_t elem) {
  if (n <= v->cap) return 0;
  size_t cap = v->cap ? v->cap : 64;
  while (cap < n) cap *= 2;
  void *p = realloc(v->p, cap * elem);
  if (!p) {
    cosy_err(COSY_ERR_NO_MEMORY, "tokenizer: out of memory (%zu bytes)", cap * elem);
    return -1;
  }
  v->p = p;
  v->cap = cap;
  return 0;
}

typedef struct {
  int32_t rank, pos, lid, rid;
} heap_ent;

typedef struct {
  vec cp, nfc, cls, bytes;      /* uint32_t, uint32_t, uint8_t, uint8_t */
  vec sid, snext, sprev;        /* int32_t symbols of one piece */
  vec heap;                     /* heap_ent */
  vec out;                      /* int32_t result */
  size_t n_out;
} work;

static void work_free(work *w) {
  free(w->cp.p);
  free(w->nfc.p);
  free(w->cls.p);
  free(w->bytes.p);
  free(w->sid.p);
  free(w->snext.p);
  free(w->sprev.p);
  free(w->heap.p);
}

static int out_push(work *w, int32_t id) {
  if (vec_reserve(&w->out, w->n_out + 1, sizeof(int32_t))) return -1;
  ((int32_t *)w->out.p)[w->n_out++] = id;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * NFC of cps[0..n) into w->nfc; returns the new length or -1 */

static long nfc(work *w, const uint32_t *cps, size_t n) {
  size_t m = 0;
  /* 1. full canonical decomposition */
  for (size_t i = 0; i < n; i++) {
    uint32_t c = cps[i];
    if (vec_reserve(&w->nfc, m + 4, sizeof(uint32_t))) return -1;
    uint32_t *d = (uint32_t *)w->nfc.p;
    const cosy_uc_dec *e;
    if (c >= H_SBASE && c < H_SBASE + H_SCOUNT) {
      uint32_t s = c - H_SBASE;
      d[m++] = H_LBASE + s / H_NCOUNT;
      d[m++] = H_VBASE + (s % H_NCOUNT) / H_TCOUNT;
      if (s % H_TCOUNT) d[m++] = H_TBASE + s % H_TCOUNT;
    } else if (c >= 0xC0 && (e = decomp_of(c)) != NULL) {
      if (vec_reserve(&w->nfc, m + e->len, sizeof(uint32_t))) return -1;
      d = (uint32_t *)w->nfc.p;
      for (int k = 0; k < e->len; k++) d[m++] = cosy_uc_decomp_cps[e->off + k];
    } else {
      d[m++] = c;
    }
  }
  uint32_t *d = (uint32_t *)w->nfc.p;
  /* 2. canonical ordering: stable sort of each run of non-starters by combining class */
  for (size_t i = 1; i < m; i++) {
    int ci = ccc_of(d[i]);
    if (ci == 0) continue;
    size_t j = i;
    uint32_t c = d[i];
    while (j > 0 && ccc_of(d[j - 1]) > ci) {
      d[j] = d[j - 1];
      j--;
    }
    d[j] = c;
  }
  /* 3. canonical composition */
  if (m == 0) return 0;
  size_t starter = 0, o = 1;
  int last = ccc_of(d[0]) ? 256 : 0; /* a leading non-starter composes with nothing */
  for (size_t i = 1; i < m; i++) {
    uint32_t c = d[i];
    int cc = ccc_of(c);
    uint32_t comp = (last == 0 || last < cc) ? compose_pair(d[starter], c) : 0;
    if (comp && !(last != 0 && cc == 0)) {
      d[starter] = comp;
      continue;
    }
    if (cc == 0) starter = o;
    last = cc;
    d[o++] = c;
  }
  return (long)o;
}

/* ---------------------------------------------------------------------------------------------
 * pre-tokenizer: end of the piece that starts at i (see the header comment) */

static int fold_ascii(uint32_t c) {
  if (c == 0x17F) return 's';
  if (c >= 'A' && c <= 'Z') return (int)(c + 32);
  return c < 0x80 ? (int)c : -1;
}

static size_t match_piece(const uint32_t *cp, const uint8_t *cls, size_t n, size_t i) {
  /* A1 */
  if (cp[i] == '\'' && i + 1 < n) {
    int a = fold_ascii(cp[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      int b = fold_ascii(cp[i + 2]);
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  /* A2 */
  size_t j = n;
  if (cls[i] == C_L) j = i;
  else if (cls[i] != C_N && cls[i] != C_CRLF && i + 1 < n && cls[i + 1] == C_L) j = i + 1;
  if (j < n) {
    while (j < n && cls[j] == C_L) j++;
    return j;
  }
  /* A3 */
  if (cls[i] == C_N) return i + 1;
  /* A4 */
  j = (cp[i] == ' ' && i + 1 < n && cls[i + 1] == C_OTHER) ? i + 1 : i;
  if (cls[j] == C_OTHER) {
    while (j < n && cls[j] == C_OTHER) j++;
    while (j < n && (cp[j] == '\r' || cp[j] == '\n')) j++;
    return j;
  }
  /* cls[i] is whitespace from here on */
  size_t k = i, last_crlf = n;
  while (k < n && (cls[k] == C_WS || cls[k] == C_CRLF)) {
    if (cls[k] == C_CRLF) last_crlf = k;
    k++;
  }
  if (last_crlf < n) return last_crlf + 1; /* A5 */
  if (k == n || k - i == 1) return k;      /* A6 at the end, or A7 */
  return k - 1;                            /* A6: leave one space for the next piece */
}

/* ---------------------------------------------------------------------------------------------
 * BPE of one piece's bytes */

static int heap_less(const heap_ent *a, const heap_ent *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(work *w, size_t *nh, heap_ent e) {
  if (vec_reserve(&w->heap, *nh + 1, sizeof(heap_ent))) return -1;
  heap_ent *h = (heap_ent *)w->heap.p;
  size_t i = (*nh)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!heap_less(&e, &h[p])) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = e;
  return 0;
}

static heap_ent heap_pop(work *w, size_t *nh) {
  heap_ent *h = (heap_ent *)w->heap.p;
  heap_ent top = h[0], e = h[--(*nh)];
  size_t i = 0, n = *nh;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && heap_less(&h[c + 1], &h[c])) c++;
    if (!heap_less(&h[c], &e)) break;
    h[i] = h[c];
    i = c;
  }
  if (n) h[i] = e;
  return top;
}

static int try_pair(const cosy_tokenizer *t, work *w, size_t *nh, int32_t pos) {
  const int32_t *id = (const int32_t *)w->sid.p, *nx = (const int32_t *)w->snext.p;
  if (pos < 0 || nx[pos] < 0) return 0;
  int32_t rank, res;
  if (!pair_lookup(t, id[pos], id[nx[pos]], &rank, &res)) return 0;
  heap_ent e = {rank, pos, id[pos], id[nx[pos]]};
  return heap_push(w, nh, e);
}

static int bpe_piece(const cosy_tokenizer *t, work *w, const uint8_t *b, size_t n) {
  if (n == 1) return out_push(w, t->byte_id[b[0]]);
  if (vec_reserve(&w->sid, n, sizeof(int32_t)) || vec_reserve(&w->snext, n, sizeof(int32_t)) ||
      vec_reserve(&w->sprev, n, sizeof(int32_t)))
    return -1;
  int32_t *id = (int32_t *)w->sid.p, *nx = (int32_t *)w->snext.p, *pv = (int32_t *)w->sprev.p;
  for (size_t i = 0; i < n; i++) {
    id[i] = t->byte_id[b[i]];
    nx[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
    pv[i] = (int32_t)i - 1;
  }
  size_t nh = 0;
  for (size_t i = 0; i + 1 < n; i++)
    if (try_pair(t, w, &nh, (int32_t)i)) return -1;
  while (nh) {
    heap_ent e = heap_pop(w, &nh);
    id = (int32_t *)w->sid.p;
    int32_t r = nx[e.pos];
    if (id[e.pos] != e.lid || r < 0 || id[r] != e.rid) continue; /* stale */
    int32_t rank, res;
    pair_lookup(t, e.lid, e.rid, &rank, &res);
    id[e.pos] = res;
    id[r] = -1;
    nx[e.pos] = nx[r];
    if (nx[r] >= 0) pv[nx[r]] = e.pos;
    if (try_pair(t, w, &nh, pv[e.pos]) || try_pair(t, w, &nh, e.pos)) return -1;
  }
  for (int32_t i = 0; i >= 0; i = nx[i])
    if (out_push(w, id[i])) return -1;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * one stretch of text without special tokens */

static int encode_utf8(uint32_t c, uint8_t *o) {
  if (c < 0x80) { o[0] = (uint8_t)c; return 1; }
  if (c < 0x800) { o[0] = (uint8_t)(0xC0 | c >> 6); o[1] = (uint8_t)(0x80 | (c & 0x3F)); return 2; }
  if (c < 0x10000) {
    o[0] = (uint8_t)(0xE0 | c >> 12);
    o[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
    o[2] = (uint8_t)(0x80 | (c & 0x3F));
    return 3;
  }
  o[0] = (uint8_t)(0xF0 | c >> 18);
  o[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
  o[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
  o[3] = (uint8_t)(0x80 | (c & 0x3F));
  return 4;
}

/* s is valid UTF-8 (checked by the caller) */
static int encode_stretch(const cosy_tokenizer *t, work *w, const uint8_t *s, size_t len) {
  if (len == 0) return 0;
  if (vec_reserve(&w->cp, len, sizeof(uint32_t))) return -1;
  uint32_t *cps = (uint32_t *)w->cp.p;
  size_t n = 0;
  int need_nfc = 0;
  for (size_t i = 0; i < len;) {
    uint32_t c = s[i];
    int k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (k > 1) c &= 0x3Fu >> (k - 1);
    for (int j = 1; j < k; j++) c = (c << 6) | (s[i + j] & 0x3F);
    i += (size_t)k;
    cps[n++] = c;
    if (c >= 0x300) need_nfc = 1; /* below U+0300 every string is already NFC */
  }
  if (need_nfc) {
    long m = nfc(w, cps, n);
    if (m < 0) return -1;
    cps = (uint32_t *)w->nfc.p;
    n = (size_t)m;
  }
  if (vec_reserve(&w->cls, n, 1)) return -1;
  uint8_t *cls = (uint8_t *)w->cls.p;
  for (size_t i = 0; i < n; i++) cls[i] = char_class(cps[i]);
  for (size_t i = 0; i < n;) {
    size_t e = match_piece(cps, cls, n, i);
    if (vec_reserve(&w->bytes, 4 * (e - i), 1)) return -1;
    uint8_t *b = (uint8_t *)w->bytes.p;
    size_t nb = 0;
    for (size_t k = i; k < e; k++) nb += (size_t)encode_utf8(cps[k], b + nb);
    if (bpe_piece(t, w, b, nb)) return -1;
    i = e;
  }
  return 0;
}

/* length of the longest special token at s[0..n), or 0 */
static size_t match_special(const cosy_tokenizer *t, const char *s, size_t n) {
  for (int k = 0; k < t->n_spec_lens; k++) {
    size_t L = (size_t)t->spec_lens[k];
    if (L > n) continue;
    int32_t id = vocab_lookup(t, s, L);
    if (id >= 0 && t->special[id]) return L;
  }
  return 0;
}

cosy_status cosy_tokenize(const cosy_tokenizer *t, const char *text, size_t len, int32_t **ids,
                          int32_t *n_ids) {
  if (ids) *ids = NULL;
  if (n_ids) *n_ids = 0;
  if (!t || !text || !ids || !n_ids)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_tokenize: NULL %s",
                    !t ? "tokenizer" : !text ? "text" : !ids ? "ids" : "n_ids");
  if (len > MAX_TEXT_BYTES)
    return cosy_err(COSY_ERR_INVALID_ARG, "cosy_tokenize: text of %zu bytes (at most %zu)", len,
                    MAX_TEXT_BYTES);
  long bad = cosy_utf8_invalid_at(text, len);
  if (bad >= 0)
    return cosy_err(COSY_ERR_TEXT, "text is not valid UTF-8 at byte offset %ld (byte 0x%02X)",
                    bad, (unsigned)(uint8_t)text[bad]);
  work w;
  memset(&w, 0, sizeof w);
  int fail = vec_reserve(&w.out, 16, sizeof(int32_t));
  size_t start = 0;
  for (size_t i = 0; i < len && !fail;) {
    size_t L = t->spec_first[(uint8_t)text[i]] ? match_special(t, text + i, len - i) : 0;
    if (!L) {
      i++;
      continue;
    }
    fail = encode_stretch(t, &w, (const uint8_t *)text + start, i - start) ||
           out_push(&w, vocab_lookup(t, text + i, L));
    i += L;
    start = i;
  }
  if (!fail) fail = encode_stretch(t, &w, (const uint8_t *)text + start, len - start);
  work_free(&w);
  if (fail) {
    free(w.out.p);
    return COSY_ERR_NO_MEMORY;
  }
  *ids = (int32_t *)w.out.p;
  *n_ids = (int32_t)w.n_out;
  return COSY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * construction */

/* GPT-2 byte -> unicode code point: printable Latin-1 bytes map to themselves, the other 68 bytes
 * to U+0100.. in byte order. */
static uint32_t byte_to_unicode(int b) {
  if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
    return (uint32_t)b;
  int n = 0;
  for (int x = 0; x < b; x++)
    if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) n++;
  return 256u + (uint32_t)n;
}

void cosy_tokenizer_free(cosy_tokenizer *t) {
  if (!t) return;
  free(t->arena);
  free(t->tok_off);
  free(t->vmap);
  free(t->pkey);
  free(t->prank);
  free(t->pres);
  free(t->special);
  free(t);
}

static cosy_status build_vocab(cosy_tokenizer *t, const cosy_model *m) {
  int32_t n = t->n_tokens;
  size_t total = 0;
  for (int32_t i = 0; i < n; i++) {
    if (!m->tokens[i].p && m->tokens[i].n)
      return cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer: token %d has no data", (int)i);
    if (m->tokens[i].n > MAX_TEXT_BYTES)
      return cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer: token %d is %llu bytes long", (int)i,
                      (unsigned long long)m->tokens[i].n);
    total += (size_t)m->tokens[i].n;
  }
  t->arena = (char *)cosy_malloc(total ? total : 1);
  t->tok_off = (size_t *)cosy_malloc(((size_t)n + 1) * sizeof(size_t));
  t->special = (uint8_t *)cosy_calloc((size_t)n, 1);
  uint32_t cap = pow2_at_least(2 * (size_t)n);
  t->vmask = cap - 1;
  t->vmap = (int32_t *)cosy_malloc(cap * sizeof(int32_t));
  if (!t->arena || !t->tok_off || !t->special || !t->vmap) return COSY_ERR_NO_MEMORY;
  memset(t->vmap, 0xFF, cap * sizeof(int32_t));
  size_t off = 0;
  for (int32_t i = 0; i < n; i++) {
    size_t len = (size_t)m->tokens[i].n;
    t->tok_off[i] = off;
    if (len) memcpy(t->arena + off, m->tokens[i].p, len);
    off += len;
  }
  t->tok_off[n] = off;
  for (int32_t i = 0; i < n; i++) {
    const char *s = t->arena + t->tok_off[i];
    size_t len = t->tok_off[i + 1] - t->tok_off[i];
    uint32_t h = hash_bytes(s, len) & t->vmask;
    int dup = 0;
    for (; t->vmap[h] >= 0; h = (h + 1) & t->vmask) {
      int32_t o = t->vmap[h];
      if (t->tok_off[o + 1] - t->tok_off[o] == len && !memcmp(t->arena + t->tok_off[o], s, len)) {
        dup = 1;
        break;
      }
    }
    if (!dup) t->vmap[h] = i;
  }
  return COSY_OK;
}

static cosy_status build_specials(cosy_tokenizer *t, const cosy_model *m) {
  for (int32_t i = 0; i < t->n_tokens; i++) {
    if (m->token_types[i] != 3 && m->token_types[i] != 4) continue;
    size_t len = t->tok_off[i + 1] - t->tok_off[i];
    const char *s = t->arena + t->tok_off[i];
    if (len == 0 || len > MAX_SPECIAL_LEN) continue; /* cannot be matched in text */
    if (cosy_utf8_invalid_at(s, len) >= 0)
      return cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer: special token %d is not valid UTF-8",
                      (int)i);
    if (vocab_lookup(t, s, len) != i) continue; /* a duplicate string: the first id wins */
    t->special[i] = 1;
    t->spec_first[(uint8_t)s[0]] = 1;
    int k = 0;
    while (k < t->n_spec_lens && t->spec_lens[k] > (int)len) k++;
    if (k < t->n_spec_lens && t->spec_lens[k] == (int)len) continue;
    memmove(&t->spec_lens[k + 1], &t->spec_lens[k], (size_t)(t->n_spec_lens - k) * sizeof(int));
    t->spec_lens[k] = (int)len;
    t->n_spec_lens++;
  }
  return COSY_OK;
}

static cosy_status build_merges(cosy_tokenizer *t, const cosy_model *m) {
  int32_t nm = m->hp.n_merges;
  uint32_t cap = pow2_at_least(2 * (size_t)nm);
  t->pmask = cap - 1;
  t->pkey = (uint64_t *)cosy_malloc(cap * sizeof(uint64_t));
  t->prank = (int32_t *)cosy_malloc(cap * sizeof(int32_t));
  t->pres = (int32_t *)cosy_malloc(cap * sizeof(int32_t));
  if (!t->pkey || !t->prank || !t->pres) return COSY_ERR_NO_MEMORY;
  memset(t->pkey, 0xFF, cap * sizeof(uint64_t));
  char buf[1024];
  for (int32_t r = 0; r < nm; r++) {
    const char *s = m->merges[r].p;
    size_t len = (size_t)m->merges[r].n, sp = len;
    if (!s) len = 0;
    for (size_t k = 0; k < len; k++)
      if (s[k] == ' ') {
        if (sp != len) { sp = len; break; } /* two spaces */
        sp = k;
      }
    if (sp == len || sp == 0 || sp + 1 == len || len > sizeof buf)
      return cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer: merge %d is not \"left right\"", (int)r);
    int32_t a = vocab_lookup(t, s, sp), b = vocab_lookup(t, s + sp + 1, len - sp - 1);
    memcpy(buf, s, sp);
    memcpy(buf + sp, s + sp + 1, len - sp - 1);
    int32_t c = vocab_lookup(t, buf, len - 1);
    if (a < 0 || b < 0 || c < 0)
      return cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer: merge %d (\"%.*s\") names a token that "
                      "is not in the vocabulary", (int)r, (int)(len < 200 ? len : 200), s);
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t h = hash_pair(k) & t->pmask;
    while (t->pkey[h] != UINT64_MAX && t->pkey[h] != k) h = (h + 1) & t->pmask;
    if (t->pkey[h] == k) continue; /* duplicate merge: keep the lower rank */
    t->pkey[h] = k;
    t->prank[h] = r;
    t->pres[h] = c;
  }
  return COSY_OK;
}

cosy_status cosy_tokenizer_create(const cosy_model *m, cosy_tokenizer **out) {
  if (out) *out = NULL;
  if (!m || !out) return cosy_err(COSY_ERR_INVALID_ARG, "cosy_tokenizer_create: NULL argument");
  if (m->hp.n_tokens <= 0 || m->hp.n_merges < 0 || !m->tokens || !m->token_types ||
      (m->hp.n_merges > 0 && !m->merges))
    return cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer: the model has no vocabulary (%d tokens)",
                    m->hp.n_tokens);
  if (m->hp.n_tokens > (1 << 28) || m->hp.n_merges > (1 << 28))
    return cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer: absurd sizes (%d tokens, %d merges)",
                    m->hp.n_tokens, m->hp.n_merges);
  cosy_tokenizer *t = (cosy_tokenizer *)cosy_calloc(1, sizeof *t);
  if (!t) return COSY_ERR_NO_MEMORY;
  t->n_tokens = m->hp.n_tokens;
  cosy_status st = build_vocab(t, m);
  for (int b = 0; b < 256 && !st; b++) {
    uint8_t u[4];
    int k = encode_utf8(byte_to_unicode(b), u);
    t->byte_id[b] = vocab_lookup(t, (const char *)u, (size_t)k);
    if (t->byte_id[b] < 0)
      st = cosy_err(COSY_ERR_MODEL_FORMAT, "tokenizer: the token of byte 0x%02X (\"%.*s\") is "
                    "missing", b, k, (const char *)u);
  }
  if (!st) st = build_specials(t, m);
  if (!st) st = build_merges(t, m);
  if (st) {
    cosy_tokenizer_free(t);
    return st;
  }
  *out = t;
  return COSY_OK;
}

int32_t cosy_tokenizer_find(const cosy_tokenizer *t, const char *token) {
  if (!t || !token) return -1;
  return vocab_lookup(t, token, strlen(token));
}

int32_t cosy_tokenizer_n_tokens(const cosy_tokenizer *t) { return t ? t->n_tokens : 0; }
