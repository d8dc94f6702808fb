/* split.c - long text cut into the pieces the official front end synthesizes one by one
 * (split_paragraph with token_max_n 80, token_min_n 60, merge_len 20, comma_split False) and
 * the punctuation-only test (is_only_punctuation); declared in normalize.h.
 *
 * split_paragraph(text, lang):
 *   1. enders: zh "。？！；：、.?!;", en ".?!;:". If the last character is not an ender, "。"
 *      (zh) or "." (en) is appended.
 *   2. Sentences: at each ender, the text since the previous cut plus the ender becomes a
 *      sentence when that text is not empty; an ender directly followed by '"' or '”' takes that
 *      quote into the last sentence too (and the cut moves past it).
 *   3. Sentences are merged greedily: a running piece is closed before a sentence when
 *      length(piece + sentence) > 80 and length(piece) > 60. The last piece is appended to the one
 *      before it when length(last) < 20, else kept.
 *   Lengths: zh counts characters (code points); en counts tokens of the model's tokenizer
 *   (cosy_tokenize, as the official code counts tokenizer.encode ids; bytes when no tokenizer).
 * Where Python raises (empty text; a closing quote right after an ender that made no sentence,
 * with no sentence before it) the library returns no pieces, resp. keeps the quote as a sentence
 * of its own.
 *
 * is_only_punctuation(text): every character is in a Unicode category P* or S* (the `regex`
 * module's \p{P} / \p{S}; table in text_unicode.c); true for "". */
#include <stdlib.h>
#include <string.h>

#include "text/normalize.h"
#include "text/text_unicode.h"
#include "tokenizer.h"
#include "util.h"

int cosy_text_is_only_punctuation(const char *text) {
  size_t n = strlen(text);
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    i += (size_t)cosy_tu_decode(text + i, n - i, &cp);
    if (!cosy_tu_is_punct(cp)) return 0;
  }
  return 1;
}

static int is_ender(uint32_t cp, int zh) {
  if (cp == '.' || cp == '?' || cp == '!' || cp == ';') return 1;
  if (!zh) return cp == ':';
  return cp == 0x3002 || cp == 0xFF1F || cp == 0xFF01 || cp == 0xFF1B || cp == 0xFF1A ||
         cp == 0x3001;
}

typedef struct piece {
  size_t a, e; /* byte range; sentences are contiguous in the text except for skipped parts */
} piece;

typedef struct lenctx {
  int zh;
  const struct cosy_tokenizer *tok;
  cosy_status st;
} lenctx;

static long measure(lenctx *c, const char *s, size_t n) {
  if (c->zh) {
    long k = 0;
    for (size_t i = 0; i < n; i++) k += ((uint8_t)s[i] & 0xC0) != 0x80;
    return k;
  }
  if (!c->tok) return (long)n;
  int32_t *ids = NULL, nid = 0;
  cosy_status st = cosy_tokenize(c->tok, s, n, &ids, &nid);
  free(ids);
  if (st && !c->st) c->st = st;
  return nid;
}

cosy_status cosy_text_split_paragraph(const char *text, int lang_zh,
                                      const struct cosy_tokenizer *tok, char ***segments,
                                      int *n) {
  *segments = NULL;
  *n = 0;
  size_t tl = strlen(text);
  if (tl == 0) {
    *segments = (char **)cosy_malloc(sizeof(char *));
    return *segments ? COSY_OK : cosy_err(COSY_ERR_NO_MEMORY, "out of memory");
  }
  /* 1. the text with its final ender */
  size_t last = tl - 1;
  while (last > 0 && ((uint8_t)text[last] & 0xC0) == 0x80) last--;
  uint32_t lc;
  cosy_tu_decode(text + last, tl - last, &lc);
  const char *add = is_ender(lc, lang_zh) ? "" : (lang_zh ? "\xE3\x80\x82" : ".");
  size_t n_all = tl + strlen(add);
  char *t = (char *)cosy_malloc(n_all + 1);
  if (!t) return cosy_err(COSY_ERR_NO_MEMORY, "out of memory");
  memcpy(t, text, tl);
  memcpy(t + tl, add, strlen(add) + 1);

  /* 2. sentences as strings (a popped sentence may get its quote appended) */
  char **utt = NULL;
  size_t nu = 0, capu = 0;
  char **fin = NULL;
  size_t nf = 0;
  char *cur = NULL;
  cosy_status st = COSY_OK;
  size_t stp = 0;
  for (size_t i = 0; i < n_all;) {
    uint32_t cp;
    int k = cosy_tu_decode(t + i, n_all - i, &cp);
    if (is_ender(cp, lang_zh)) {
      if (nu + 1 >= capu) {
        capu = capu ? capu * 2 : 16;
        char **nuv = (char **)cosy_realloc(utt, capu * sizeof(char *));
        if (!nuv) goto oom;
        utt = nuv;
      }
      if (i > stp) {
        size_t len = i + (size_t)k - stp;
        char *s = (char *)cosy_malloc(len + 1);
        if (!s) goto oom;
        memcpy(s, t + stp, len);
        s[len] = '\0';
        utt[nu++] = s;
      }
      size_t nx = i + (size_t)k;
      uint32_t q = 0;
      int qk = 0;
      if (nx < n_all) qk = cosy_tu_decode(t + nx, n_all - nx, &q);
      if (nx < n_all && (q == '"' || q == 0x201D)) {
        if (nu == 0) { /* Python raises here: keep the quote as a sentence */
          char *s = (char *)cosy_malloc((size_t)qk + 1);
          if (!s) goto oom;
          memcpy(s, t + nx, (size_t)qk);
          s[qk] = '\0';
          utt[nu++] = s;
        } else {
          size_t ol = strlen(utt[nu - 1]);
          char *s = (char *)cosy_realloc(utt[nu - 1], ol + (size_t)qk + 1);
          if (!s) goto oom;
          memcpy(s + ol, t + nx, (size_t)qk);
          s[ol + (size_t)qk] = '\0';
          utt[nu - 1] = s;
        }
        stp = nx + (size_t)qk;
        i = nx + (size_t)qk; /* Python's loop still visits the quote: it is not an ender */
        continue;
      }
      stp = nx;
    }
    i += (size_t)k;
  }

  /* 3. merge */
  lenctx lc2 = {lang_zh, tok, COSY_OK};
  fin = (char **)cosy_malloc((nu + 1) * sizeof(char *));
  cur = (char *)cosy_calloc(1, 1);
  if (!fin || !cur) goto oom;
  for (size_t u = 0; u < nu; u++) {
    size_t cl = strlen(cur), ul = strlen(utt[u]);
    char *both = (char *)cosy_malloc(cl + ul + 1);
    if (!both) goto oom;
    memcpy(both, cur, cl);
    memcpy(both + cl, utt[u], ul + 1);
    if (measure(&lc2, both, cl + ul) > 80 && measure(&lc2, cur, cl) > 60) {
      fin[nf++] = cur;
      memcpy(both, utt[u], ul + 1);
    } else {
      free(cur);
    }
    cur = both;
  }
  if (cur[0]) {
    if (measure(&lc2, cur, strlen(cur)) < 20 && nf > 0) {
      size_t a = strlen(fin[nf - 1]), b = strlen(cur);
      char *s = (char *)cosy_realloc(fin[nf - 1], a + b + 1);
      if (!s) goto oom;
      memcpy(s + a, cur, b + 1);
      fin[nf - 1] = s;
      free(cur);
    } else {
      fin[nf++] = cur;
    }
  } else {
    free(cur);
  }
  cur = NULL;
  if (lc2.st) {
    st = lc2.st;
    goto fail;
  }
  for (size_t u = 0; u < nu; u++) free(utt[u]);
  free(utt);
  free(t);
  *segments = fin;
  *n = (int)nf;
  return COSY_OK;
oom:
  st = cosy_err(COSY_ERR_NO_MEMORY, "text split: out of memory");
fail:
  for (size_t u = 0; u < nu; u++) free(utt[u]);
  free(utt);
  for (size_t u = 0; u < nf; u++) free(fin[u]);
  free(fin);
  free(cur);
  free(t);
  return st;
}
