/* textstream.c - the caller's side of text streaming (COSY_SYNTH_TEXT_STREAM): text pushed piece
 * by piece with cosy_request_push_text is committed to text token ids, on the caller's thread,
 * as soon as what is committed cannot change with more text; the LLM thread (sched_llm.c) takes
 * the ids one at a time (docs/scheduler.md section 7).
 *
 * Commit rules (both depend only on the bytes pushed so far, never on how they were cut into
 * pushes, so any way of pushing the same text gives the same ids):
 *   - text normalization on (the default): by sentence. A sentence ends after . ! ? ; followed by
 *     a white-space character, after 。！？；… (fullwidth ！？；), or at a line break; the
 *     sentence (surrounding white space trimmed) is normalized alone (cosy_text_normalize) and
 *     tokenized; a sentence that followed white space in the pushed text gets one leading space
 *     back when its normalized text starts with an ASCII character. What follows the last
 *     sentence end waits for more text or cosy_request_end_text.
 *   - COSY_SYNTH_NO_TEXT_NORMALIZATION: by word. Text is cut before a space (U+0020) that follows
 *     a non-space character, or before ASCII / CJK punctuation that follows a letter, and never
 *     within 19 bytes after an unclosed '[' or '<' (a special token such as [breath] or
 *     <|endofprompt|> may be in the making). The Qwen2 pre-tokenizer never joins the two sides of
 *     such a cut and NFC never composes across it, so tokenizing the pieces gives the ids of
 *     tokenizing the whole text.
 * A trailing incomplete UTF-8 sequence is kept for the next push (a character cut between two
 * pushes); anything else that is not UTF-8 fails the push with COSY_ERR_TEXT and leaves the
 * request as it was.
 *
 * Cost: a push costs O(its bytes), whatever is pending. The pending bytes are validated once
 * (only the new bytes and the at most 3 of a cut character before them), and the search for the
 * next sentence end or word cut resumes where the previous push left it (r->tx_scan): every
 * position before it is decided, except a '.' at the very end that waits for the next
 * character. Whether a position is a cut depends only on the bytes before it and its own
 * character, so resuming finds exactly the cuts a search from the start would. Committed bytes
 * are normalized and tokenized once. Limits (cosyvoice.h): at most COSY_TEXT_MAX_BYTES pushed
 * in all, checked before the bytes are read; the committed ids at most r->tx_max. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "text/normalize.h"
#include "tokenizer.h"
#include "unicode_data.h"
#include "util.h"

void sched_wake_llm(cosy_engine *e);

/* decode one code point at s[i] (valid UTF-8 assumed); returns its length */
static int utf8_cp(const unsigned char *s, size_t n, size_t i, uint32_t *cp) {
  unsigned c = s[i];
  int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  if (i + (size_t)len > n) len = (int)(n - i);
  uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < len; k++) v = (v << 6) | (s[i + k] & 0x3F);
  *cp = v;
  return len;
}

static int is_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

static int uc_class(uint32_t c) {
  int lo = 0, hi = cosy_uc_n_class - 1;
  while (lo <= hi) {
    int m = (lo + hi) / 2;
    if (c < cosy_uc_class[m].lo) hi = m - 1;
    else if (c > cosy_uc_class[m].hi) lo = m + 1;
    else return (int)cosy_uc_class[m].v;
  }
  return 0;
}

/* punctuation that starts a cut: never a letter, digit, mark or space, never composes */
static int is_cut_punct(uint32_t c) {
  if (c < 0x80) return c > 0x20 && c < 0x7F && !(c >= '0' && c <= '9') &&
                       !((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
  return (c >= 0x2010 && c <= 0x2027) || (c >= 0x3001 && c <= 0x303F) ||
         (c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20) ||
         (c >= 0xFF3B && c <= 0xFF40) || (c >= 0xFF5B && c <= 0xFF65);
}

/* no special token ([..] or <..>, at most 19 bytes) can span position b (bytes before base are
 * not looked at: they were committed at a cut) */
static int bracket_free(const char *s, size_t base, size_t b) {
  size_t k0 = b > base + 19 ? b - 19 : base;
  for (size_t k = b; k-- > k0;) {
    if (s[k] == ']' || s[k] == '>') return 1;
    if (s[k] == '[' || s[k] == '<') return 0;
  }
  return 1;
}

/* Word cuts: scan s[*pos..n) (complete UTF-8) for cuts, *prev / *have_prev the code point before
 * *pos; *cut is the last cut found (left as it was when none). Ends with *pos = n. */
static void word_scan(const char *text, size_t n, size_t *pos, uint32_t *prev, int *have_prev,
                      size_t *cut) {
  const unsigned char *s = (const unsigned char *)text;
  const size_t from = *pos;
  for (size_t i = from; i < n;) {
    uint32_t c;
    int len = utf8_cp(s, n, i, &c);
    if (*have_prev && bracket_free(text, 0, i)) {
      if (c == 0x20 && !is_space(*prev)) *cut = i;
      else if (is_cut_punct(c) && uc_class(*prev) == 1) *cut = i;
    }
    *prev = c;
    *have_prev = 1;
    i += (size_t)len;
  }
  *pos = n;
  cosy_work.text_scan += n - from;
}

/* The last word cut in s[0..n) (0 when none): see the top of the file. */
size_t textstream_word_cut(const char *text, size_t n) {
  size_t pos = 0, cut = 0;
  uint32_t prev = 0;
  int have_prev = 0;
  word_scan(text, n, &pos, &prev, &have_prev, &cut);
  return cut;
}

/* Sentence ends: scan s[*pos..n) (complete UTF-8; the sentence began at base) for the end of the
 * sentence. Returns it (and *pos = it), or 0 when none is complete yet: *pos is then where the
 * next search resumes (n, or a '.' ! ? ; at the very end, which needs the next character). */
static size_t sentence_scan(const char *text, size_t base, size_t *pos, size_t n) {
  const unsigned char *s = (const unsigned char *)text;
  const size_t from = *pos;
  size_t i = from, found = 0;
  while (i < n) {
    uint32_t c;
    int len = utf8_cp(s, n, i, &c);
    size_t end = i + (size_t)len;
    if (bracket_free(text, base, i)) {
      if (c == '\n' || c == 0x3002 || c == 0xFF01 || c == 0xFF1F || c == 0xFF1B || c == 0x2026) {
        found = end;
        break;
      }
      if (c == '.' || c == '!' || c == '?' || c == ';') {
        if (end == n) break; /* undecided: resume here */
        uint32_t d;
        utf8_cp(s, n, end, &d);
        if (is_space(d)) {
          found = end;
          break;
        }
      }
    }
    i = end;
  }
  *pos = found ? found : i;
  cosy_work.text_scan += *pos - from;
  return found;
}

/* The end of the first sentence in s[0..n) (0 when none is complete yet). */
size_t textstream_sentence_end(const char *text, size_t n) {
  size_t pos = 0;
  return sentence_scan(text, 0, &pos, n);
}

/* Length of the complete part of s[0..n): n when valid, the start of a trailing incomplete
 * sequence when only that is missing, or -1 when s holds invalid UTF-8. */
static long utf8_complete(const char *text, size_t n) {
  long bad = cosy_utf8_invalid_at(text, n);
  if (bad < 0) return (long)n;
  const unsigned char *s = (const unsigned char *)text;
  unsigned c = s[bad];
  int need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  size_t have = n - (size_t)bad;
  if (!need || have >= (size_t)need) return -1;
  for (size_t k = 1; k < have; k++) {
    unsigned d = s[bad + k];
    unsigned lo = 0x80, hi = 0xBF;
    if (k == 1 && c == 0xE0) lo = 0xA0;
    if (k == 1 && c == 0xED) hi = 0x9F;
    if (k == 1 && c == 0xF0) lo = 0x90;
    if (k == 1 && c == 0xF4) hi = 0x8F;
    if (d < lo || d > hi) return -1;
  }
  return bad;
}

static cosy_status ids_append(int32_t **ids, int *n, int *cap, const int32_t *add, int na) {
  if (*n + na > *cap) {
    int nc = *cap ? *cap : 64;
    while (nc < *n + na) nc *= 2;
    int32_t *p = (int32_t *)cosy_realloc(*ids, (size_t)nc * sizeof *p);
    if (!p) return COSY_ERR_NO_MEMORY;
    *ids = p;
    *cap = nc;
  }
  if (na) memcpy(*ids + *n, add, (size_t)na * sizeof *add);
  *n += na;
  return COSY_OK;
}

/* the ids of one committed piece s[0..n) appended to (ids, nn, cap) */
static cosy_status piece_ids(cosy_request *r, const char *s, size_t n, int *any, int32_t **ids,
                             int *nn, int *cap) {
  cosy_engine *e = r->engine;
  int32_t *t = NULL, nt = 0;
  cosy_status st;
  if (r->params.flags & COSY_SYNTH_NO_TEXT_NORMALIZATION) {
    if ((st = cosy_tokenize(e->tok, s, n, &t, &nt))) return st;
  } else {
    size_t a = 0, b = n;
    while (a < b && (s[a] == ' ' || s[a] == '\t' || s[a] == '\n' || s[a] == '\r')) a++;
    while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\n' || s[b - 1] == '\r')) b--;
    if (a == b) return COSY_OK;
    char *in = (char *)cosy_malloc(b - a + 1), *norm = NULL;
    if (!in) return COSY_ERR_NO_MEMORY;
    memcpy(in, s + a, b - a);
    in[b - a] = 0;
    st = cosy_text_normalize(e->tn, in, 0, &norm);
    free(in);
    if (st) return st;
    if (!norm[0]) {
      free(norm);
      return COSY_OK;
    }
    const int space = a > 0 && *any && (unsigned char)norm[0] < 0x80;
    size_t ln = strlen(norm);
    char *sp = (char *)cosy_malloc(ln + 2);
    if (!sp) {
      free(norm);
      return COSY_ERR_NO_MEMORY;
    }
    sp[0] = ' ';
    memcpy(sp + 1, norm, ln + 1);
    free(norm);
    st = cosy_tokenize(e->tok, space ? sp : sp + 1, space ? ln + 1 : ln, &t, &nt);
    free(sp);
    if (st) return st;
  }
  if (nt > 0) *any = 1;
  st = ids_append(ids, nn, cap, t, nt);
  free(t);
  return st;
}

/* the first word cut in s(a..n) (n when none; a is 0 or a cut): the cuts word_scan finds. A
 * position's cut depends only on the bytes before it back to the last bracket character
 * (bracket_free), which a cut at a or earlier already decided, so scanning from a (base 0 of the
 * pending text) finds the same cuts as the scan that resumed across pushes. */
size_t textstream_next_word_cut(const char *text, size_t a, size_t n) {
  const unsigned char *s = (const unsigned char *)text;
  uint32_t prev;
  size_t i = a + (size_t)utf8_cp(s, n, a, &prev);
  while (i < n) {
    uint32_t c;
    int len = utf8_cp(s, n, i, &c);
    if (bracket_free(text, 0, i) &&
        ((c == 0x20 && !is_space(prev)) || (is_cut_punct(c) && uc_class(prev) == 1)))
      break;
    prev = c;
    i += (size_t)len;
  }
  cosy_work.text_scan += i - a;
  return i < n ? i : n;
}

/* the units of one commit (marks): the end of each (in tx_raw) and its first id in the commit */
typedef struct lunit {
  size_t end;
  int tok0;
} lunit;

/* one committed piece s[a..b): its ids appended; a unit when it gave any */
static cosy_status piece_unit(cosy_request *r, const char *s, size_t a, size_t b, int *any,
                              int32_t **ids, int *nn, int *cap, lunit **u, int *nu, int *ucap) {
  const int n0 = *nn;
  cosy_status st = piece_ids(r, s + a, b - a, any, ids, nn, cap);
  if (st || *nn == n0) return st;
  if (*nu == *ucap) {
    int nc = *ucap ? *ucap * 2 : 16;
    lunit *p = (lunit *)cosy_realloc(*u, (size_t)nc * sizeof *p);
    if (!p) return COSY_ERR_NO_MEMORY;
    *u = p;
    *ucap = nc;
  }
  (*u)[*nu].end = b;
  (*u)[(*nu)++].tok0 = n0;
  return COSY_OK;
}

/* Commit what can be committed of r->tx_raw[0..tx_ok) (all of it when final); all or nothing:
 * on failure the request's text state is as it was. */
static cosy_status commit(cosy_request *r, int final) {
  if (final && r->tx_ok != r->tx_len)
    return cosy_err(COSY_ERR_TEXT, "the text ends inside a UTF-8 character");
  const size_t complete = r->tx_ok, scan0 = r->tx_scan, cut0 = r->tx_cut;
  const uint32_t prev0 = r->tx_prev;
  const int have_prev0 = r->tx_have_prev;
  int32_t *ids = NULL;
  int n = 0, cap = 0, any = r->tx_any;
  lunit *u = NULL; /* the units committed (marks) */
  int nu = 0, ucap = 0;
  size_t used = 0;
  cosy_status st = COSY_OK;
  const char *s = r->tx_raw ? r->tx_raw : ""; /* NULL until a non-empty push */
  if (r->params.flags & COSY_SYNTH_NO_TEXT_NORMALIZATION) {
    word_scan(s, complete, &r->tx_scan, &r->tx_prev, &r->tx_have_prev, &r->tx_cut);
    used = final ? complete : r->tx_cut;
    /* word by word (the ids are those of s[0..used) in one piece: the cuts never change them) */
    for (size_t a = 0; a < used && !st;) {
      size_t b = textstream_next_word_cut(s, a, used);
      st = piece_unit(r, s, a, b, &any, &ids, &n, &cap, &u, &nu, &ucap);
      a = b;
    }
  } else {
    for (;;) {
      size_t end = sentence_scan(s, used, &r->tx_scan, complete);
      if (!end && final && used < complete) end = r->tx_scan = complete;
      if (!end) break;
      if ((st = piece_unit(r, s, used, end, &any, &ids, &n, &cap, &u, &nu, &ucap))) break;
      used = end;
    }
  }
  cosy_work.text_scan += used;
  if (!st && (n > 0 || final)) {
    pthread_mutex_lock(&r->mu);
    if (r->tx_n + n > r->tx_max) {
      st = cosy_err(COSY_ERR_TEXT,
                    "too much text for one streamed request: %d text tokens, at most %d (%s)",
                    r->tx_n + n, r->tx_max,
                    r->tx_max == COSY_LLM_MAX_TEXT_TOKENS ? "COSY_LLM_MAX_TEXT_TOKENS"
                                                          : "max_tokens / 2");
    } else if (r->tx_n_units + nu > r->tx_cap_units) {
      int nc = r->tx_cap_units ? r->tx_cap_units : 16;
      while (nc < r->tx_n_units + nu) nc *= 2;
      struct tx_unit *p = (struct tx_unit *)cosy_realloc(r->tx_units, (size_t)nc * sizeof *p);
      if (!p) st = COSY_ERR_NO_MEMORY;
      else {
        r->tx_units = p;
        r->tx_cap_units = nc;
      }
    }
    const int tok_at = r->tx_n;
    if (!st) st = ids_append(&r->tx_ids, &r->tx_n, &r->tx_cap_ids, ids, n);
    if (!st) {
      /* a unit's range starts where the previous one's ended: the bytes of pieces without
       * tokens join the next unit (and, at the end, the last one) */
      for (int i = 0; i < nu; i++) {
        struct tx_unit *t = &r->tx_units[r->tx_n_units++];
        t->b0 = r->tx_n_units > 1 ? t[-1].b1 : 0;
        t->b1 = (int64_t)(r->tx_base + u[i].end);
        t->tok0 = tok_at + u[i].tok0;
        t->speech = -1;
      }
      if (final && r->tx_n_units > 0) r->tx_units[r->tx_n_units - 1].b1 = (int64_t)(r->tx_base + complete);
    }
    pthread_mutex_unlock(&r->mu);
  }
  free(ids);
  free(u);
  if (st) {
    r->tx_scan = scan0;
    r->tx_cut = cut0;
    r->tx_prev = prev0;
    r->tx_have_prev = have_prev0;
    return st;
  }
  r->tx_any = any;
  if (used) {
    memmove(r->tx_raw, r->tx_raw + used, r->tx_len - used);
    cosy_work.text_scan += r->tx_len - used;
    r->tx_len -= used;
    r->tx_ok -= used;
    r->tx_scan -= used;
    r->tx_cut = 0; /* the commit ended at the last cut */
    r->tx_base += used;
  }
  return COSY_OK;
}

/* the request can take text (r->mu held) */
static cosy_status check_open(cosy_request *r, const char *what) {
  if (!r->text_stream)
    return cosy_err(COSY_ERR_INVALID_ARG, "%s: the request was not submitted with COSY_SYNTH_TEXT_STREAM", what);
  if (__atomic_load_n(&r->cancel, __ATOMIC_SEQ_CST) || r->final_status == COSY_ERR_CANCELLED)
    return cosy_err(COSY_ERR_CANCELLED, "%s: the request was cancelled", what);
  if (r->state == REQ_DONE)
    return cosy_err(COSY_ERR_INVALID_ARG, "%s: the request has finished (%s)", what,
                    cosy_status_str(r->final_status));
  if (r->tx_ended)
    return cosy_err(COSY_ERR_INVALID_ARG, "%s: the text was ended (cosy_request_end_text)", what);
  return COSY_OK;
}

cosy_status textstream_push(cosy_request *r, const char *utf8) {
  pthread_mutex_lock(&r->mu);
  cosy_status st = check_open(r, "cosy_request_push_text");
  pthread_mutex_unlock(&r->mu);
  if (st) return st;
  const size_t room = COSY_TEXT_MAX_BYTES - r->tx_total;
  size_t n = strnlen(utf8, room + 1);
  if (n > room)
    return cosy_err(COSY_ERR_TEXT,
                    "cosy_request_push_text: the streamed text would exceed COSY_TEXT_MAX_BYTES "
                    "(%d bytes in all): %zu bytes taken so far, this push has more than %zu; it "
                    "was not taken",
                    COSY_TEXT_MAX_BYTES, r->tx_total, room);
  if (n == 0) return COSY_OK;
  if (r->tx_len + n + 1 > r->tx_cap) {
    size_t nc = r->tx_cap ? r->tx_cap : 256;
    while (nc < r->tx_len + n + 1) nc *= 2;
    char *p = (char *)cosy_realloc(r->tx_raw, nc);
    if (!p) return COSY_ERR_NO_MEMORY;
    r->tx_raw = p;
    r->tx_cap = nc;
  }
  const size_t old = r->tx_len, old_ok = r->tx_ok;
  memcpy(r->tx_raw + old, utf8, n);
  r->tx_len += n;
  r->tx_raw[r->tx_len] = 0;
  /* only what follows the complete part can be new: a cut character's bytes and this push */
  long complete = utf8_complete(r->tx_raw + old_ok, r->tx_len - old_ok);
  cosy_work.text_scan += r->tx_len - old_ok;
  if (complete < 0) {
    r->tx_len = old;
    r->tx_raw[old] = 0;
    return cosy_err(COSY_ERR_TEXT, "the pushed text is not valid UTF-8; it was not taken");
  }
  r->tx_ok = old_ok + (size_t)complete;
  if ((st = commit(r, 0))) {
    r->tx_len = old; /* the push is undone: the request is as it was */
    r->tx_ok = old_ok;
    r->tx_raw[old] = 0;
    return st;
  }
  r->tx_total += n;
  sched_wake_llm(r->engine);
  return COSY_OK;
}

cosy_status textstream_end(cosy_request *r) {
  pthread_mutex_lock(&r->mu);
  cosy_status st = check_open(r, "cosy_request_end_text");
  pthread_mutex_unlock(&r->mu);
  if (st) return st;
  if ((st = commit(r, 1))) return st;
  pthread_mutex_lock(&r->mu);
  r->tx_ended = 1;
  pthread_mutex_unlock(&r->mu);
  sched_wake_llm(r->engine);
  return COSY_OK;
}
