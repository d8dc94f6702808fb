/* normalize.c - text normalization as the official front end does it (normalize.h): wetext TN
 * (tagger FST -> token parser / reorder -> verbalizer FST), the Chinese post-processing rules,
 * inflect-style number spelling for other text, and the minimal fallback without grammars.
 *
 * Python semantics reproduced on UTF-8 bytes: str.strip() strips the characters str.isspace()
 * accepts; str.replace of one valid UTF-8 string by another is a byte replace; the token parser's
 * structural characters are ASCII, so reading bytes instead of code points gives the same tokens.
 *
 * Token parser / reorder (wetext's TokenParser): the tagger output is a sequence of tokens
 * `name { key: "value" ... }`; values are read up to the next unescaped '"' (a backslash and the
 * character after it are both kept). Each token is written back as `name {` + ` key: "value"` for
 * each key + ` }`, tokens joined by one space, values escaped again ('\' -> '\\', '"' -> '\"').
 * Keys keep their order, except for the token names with a canonical order (zh: date year month
 * day; fraction denominator numerator; measure denominator numerator value; money value currency;
 * time noon hour minute second. en: date preserve_order text day month year; money integer_part
 * fractional_part quantity currency_maj), whose listed keys come first in that order and then the
 * others in their order, unless the token has preserve_order: "true". A key given twice is listed
 * twice with its last value.
 *
 * spell_out_number (inflect 7 number_to_words of a run of digits, default arguments): the run's
 * decimal digits (other str.isdigit() characters such as '²' are dropped; none left = "0"); value
 * 0 -> "zero", 1 -> "one"; otherwise, leading zeros removed, groups of three digits from the right
 * get "H hundred and TU" + the scale word of their index (thousand, million, ... decillion), the
 * leading one or two digits "TU" + their scale word, all joined by ", ", and when the last group
 * is a single word after the last ", " that ", " becomes " and " (so 2024 -> "two thousand and
 * twenty-four", 1000001 -> "one million and one", 123456789 -> "one hundred and twenty-three
 * million, four hundred and fifty-six thousand, seven hundred and eighty-nine"). normalize.c
 * builds inflect's intermediate string (with its doubled spaces) and applies its clean-up steps in
 * the same order, so the wording is the same. Runs of more than 36 significant digits (inflect
 * raises an exception: no scale word) are read digit by digit. */
#include "text/normalize.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "text/fst.h"
#include "text/text_unicode.h"
#include "tokenizer.h"
#include "util.h"

const char *const cosy_tn_grammar_keys[COSY_TN_N_GRAMMARS] = {
    "cosyvoice.text.zh_tn_tagger", "cosyvoice.text.zh_tn_verbalizer",
    "cosyvoice.text.en_tn_tagger", "cosyvoice.text.en_tn_verbalizer"};

struct cosy_text_norm {
  cosy_fst *g[COSY_TN_N_GRAMMARS]; /* all NULL: minimal */
  const struct cosy_tokenizer *tok;
  /* idle rewrite scratch spaces (one is taken per call in progress) */
  pthread_mutex_t mu;
  cosy_fst_ws **pool;
  int n_pool, cap_pool;
};

/* ---------------------------------------------------------------------------------------------
 * growable strings */

typedef struct sb {
  char *p;
  size_t n, cap;
  int oom;
} sb;

static void sb_add(sb *b, const char *s, size_t k) {
  if (b->oom) return;
  if (b->n + k + 1 > b->cap) {
    size_t c = b->cap ? b->cap : 64;
    while (c < b->n + k + 1) c *= 2;
    char *np = (char *)cosy_realloc(b->p, c);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = c;
  }
  memcpy(b->p + b->n, s, k);
  b->n += k;
  b->p[b->n] = '\0';
}
static void sb_str(sb *b, const char *s) { sb_add(b, s, strlen(s)); }
static void sb_ch(sb *b, char c) { sb_add(b, &c, 1); }
/* the string (never NULL unless out of memory) */
static char *sb_take(sb *b) {
  if (b->oom) {
    free(b->p);
    return NULL;
  }
  if (!b->p) sb_add(b, "", 0);
  if (b->oom) return NULL;
  return b->p;
}

/* Python str.strip(): a malloc'd copy without leading/trailing isspace() characters */
static char *py_strip(const char *s, size_t n) {
  size_t a = 0, e = n;
  while (a < e) {
    uint32_t cp;
    int k = cosy_tu_decode(s + a, e - a, &cp);
    if (!cosy_tu_is_space(cp)) break;
    a += (size_t)k;
  }
  while (e > a) {
    size_t b = e - 1;
    while (b > a && ((uint8_t)s[b] & 0xC0) == 0x80) b--;
    uint32_t cp;
    cosy_tu_decode(s + b, e - b, &cp);
    if (!cosy_tu_is_space(cp)) break;
    e = b;
  }
  char *r = (char *)cosy_malloc(e - a + 1);
  if (!r) return NULL;
  memcpy(r, s + a, e - a);
  r[e - a] = '\0';
  return r;
}

/* str.replace(from, to) on a malloc'd string; frees s; NULL when out of memory */
static char *py_replace(char *s, const char *from, const char *to) {
  if (!s) return NULL;
  size_t fl = strlen(from);
  if (!strstr(s, from)) return s;
  sb b = {0};
  const char *p = s, *q;
  while ((q = strstr(p, from))) {
    sb_add(&b, p, (size_t)(q - p));
    sb_str(&b, to);
    p = q + fl;
  }
  sb_str(&b, p);
  free(s);
  return sb_take(&b);
}

static int has_cjk(const char *s) {
  size_t n = strlen(s);
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    i += (size_t)cosy_tu_decode(s + i, n - i, &cp);
    if (cp >= 0x4E00 && cp <= 0x9FFF) return 1;
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * token parser / reorder */

typedef struct tkey {
  const char *k, *v; /* slices of the input */
  size_t kn, vn;
} tkey;

typedef struct tp {
  const char *s;
  size_t n, i;
  int eos;
} tp;

static int tp_read(tp *t) {
  if (t->i + 1 < t->n) {
    t->i++;
    return 1;
  }
  t->eos = 1;
  return 0;
}
/* bytes read since position a (all of them up to the end once the end is reached) */
static size_t tp_span(const tp *t, size_t a) { return (t->eos ? t->n : t->i) - a; }
static int tp_is(const tp *t, char c) { return !t->eos && t->s[t->i] == c; }
static int tp_ws(tp *t) {
  int not_eos = !t->eos;
  while (not_eos && t->s[t->i] == ' ') not_eos = tp_read(t);
  return not_eos;
}
static void tp_char(tp *t, char c) {
  if (tp_is(t, c)) tp_read(t);
}
static int is_key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

typedef struct ordspec {
  const char *name;
  const char *keys[6];
} ordspec;

static const ordspec ZH_ORDERS[] = {
    {"date", {"year", "month", "day", NULL}},
    {"fraction", {"denominator", "numerator", NULL}},
    {"measure", {"denominator", "numerator", "value", NULL}},
    {"money", {"value", "currency", NULL}},
    {"time", {"noon", "hour", "minute", "second", NULL}},
    {NULL, {NULL}}};
static const ordspec EN_ORDERS[] = {
    {"date", {"preserve_order", "text", "day", "month", "year", NULL}},
    {"money", {"integer_part", "fractional_part", "quantity", "currency_maj", NULL}},
    {NULL, {NULL}}};

static int slice_eq(const char *a, size_t an, const char *b) {
  return strlen(b) == an && memcmp(a, b, an) == 0;
}

/* the last value of key k among keys[0..nk), or -1 */
static int last_of(const tkey *keys, int nk, const char *k, size_t kn) {
  int r = -1;
  for (int i = 0; i < nk; i++)
    if (keys[i].kn == kn && memcmp(keys[i].k, k, kn) == 0) r = i;
  return r;
}

static void put_kv(sb *b, const tkey *key, const tkey *val) {
  sb_ch(b, ' ');
  sb_add(b, key->k, key->kn);
  sb_str(b, ": \"");
  for (size_t i = 0; i < val->vn; i++) {
    char c = val->v[i];
    if (c == '\\') sb_str(b, "\\\\");
    else if (c == '"') sb_str(b, "\\\"");
    else sb_ch(b, c);
  }
  sb_ch(b, '"');
}

static void emit_token(sb *b, int first, const char *name, size_t nn, const tkey *keys, int nk,
                       const ordspec *orders) {
  if (!first) sb_ch(b, ' ');
  sb_add(b, name, nn);
  sb_str(b, " {");
  const ordspec *spec = NULL;
  for (const ordspec *o = orders; o->name; o++)
    if (slice_eq(name, nn, o->name)) spec = o;
  if (spec) {
    int po = last_of(keys, nk, "preserve_order", 14);
    if (po >= 0 && slice_eq(keys[po].v, keys[po].vn, "true")) spec = NULL;
  }
  if (!spec) {
    for (int i = 0; i < nk; i++) put_kv(b, &keys[i], &keys[last_of(keys, nk, keys[i].k, keys[i].kn)]);
  } else {
    for (int j = 0; spec->keys[j]; j++) {
      int i = last_of(keys, nk, spec->keys[j], strlen(spec->keys[j]));
      if (i >= 0) put_kv(b, &keys[i], &keys[i]);
    }
    for (int i = 0; i < nk; i++) {
      int canon = 0;
      for (int j = 0; spec->keys[j]; j++)
        if (slice_eq(keys[i].k, keys[i].kn, spec->keys[j])) canon = 1;
      if (!canon) put_kv(b, &keys[i], &keys[last_of(keys, nk, keys[i].k, keys[i].kn)]);
    }
  }
  sb_str(b, " }");
}

/* wetext TokenParser(lang, "tn").reorder(s); NULL when out of memory */
static char *reorder(const char *s, int zh) {
  size_t n = strlen(s);
  sb b = {0};
  if (n == 0) return sb_take(&b);
  tp t = {s, n, 0, 0};
  tkey *keys = NULL;
  int nk = 0, capk = 0, first = 1;
  while (tp_ws(&t)) {
    size_t ns = t.i;
    while (!t.eos && is_key_char(s[t.i])) tp_read(&t);
    size_t nn = tp_span(&t, ns);
    const char *name = s + ns;
    tp_char(&t, ' ');
    tp_char(&t, '{');
    tp_char(&t, ' ');
    nk = 0;
    while (tp_ws(&t)) {
      if (tp_is(&t, '}')) {
        tp_char(&t, '}');
        break;
      }
      size_t ks = t.i, k_eos = (size_t)t.eos;
      while (!t.eos && is_key_char(s[t.i])) tp_read(&t);
      size_t kn = k_eos ? 0 : tp_span(&t, ks);
      tp_char(&t, ':');
      tp_char(&t, ' ');
      tp_char(&t, '"');
      size_t vs = t.i, v_eos = (size_t)t.eos; /* Python loops forever on a value cut by the end */
      while (!t.eos && s[t.i] != '"') {
        int esc = s[t.i] == '\\';
        tp_read(&t);
        if (esc && !t.eos) tp_read(&t);
      }
      size_t vn = v_eos ? 0 : tp_span(&t, vs);
      tp_char(&t, '"');
      if (nk == capk) {
        capk = capk ? capk * 2 : 8;
        tkey *nkp = (tkey *)cosy_realloc(keys, (size_t)capk * sizeof(tkey));
        if (!nkp) {
          free(keys);
          free(b.p);
          return NULL;
        }
        keys = nkp;
      }
      keys[nk].k = s + ks;
      keys[nk].kn = kn;
      keys[nk].v = s + vs;
      keys[nk].vn = vn;
      nk++;
    }
    emit_token(&b, first, name, nn, keys, nk, zh ? ZH_ORDERS : EN_ORDERS);
    first = 0;
  }
  free(keys);
  return sb_take(&b);
}

/* ---------------------------------------------------------------------------------------------
 * wetext normalize */

#define POOL_MAX 4 /* idle scratch spaces kept; more calls at once allocate their own */

static cosy_fst_ws *ws_take(cosy_text_norm *tn) {
  cosy_fst_ws *w = NULL;
  pthread_mutex_lock(&tn->mu);
  if (tn->n_pool > 0) w = tn->pool[--tn->n_pool];
  pthread_mutex_unlock(&tn->mu);
  return w ? w : cosy_fst_ws_new();
}

static void ws_give(cosy_text_norm *tn, cosy_fst_ws *w) {
  if (!w) return;
  pthread_mutex_lock(&tn->mu);
  if (tn->n_pool < POOL_MAX && tn->n_pool == tn->cap_pool) {
    int c = tn->cap_pool ? tn->cap_pool * 2 : 4;
    cosy_fst_ws **np = (cosy_fst_ws **)cosy_realloc(tn->pool, (size_t)c * sizeof *np);
    if (np) {
      tn->pool = np;
      tn->cap_pool = c;
    }
  }
  if (tn->n_pool < POOL_MAX && tn->n_pool < tn->cap_pool) {
    tn->pool[tn->n_pool++] = w;
    w = NULL;
  }
  pthread_mutex_unlock(&tn->mu);
  cosy_fst_ws_free(w);
}

static cosy_status rewrite(const cosy_text_norm *tnc, const cosy_fst *f, const char *in,
                           char **out) {
  cosy_text_norm *tn = (cosy_text_norm *)tnc; /* the pool is the only mutable part */
  char *r;
  size_t n;
  cosy_fst_ws *w = ws_take(tn);
  cosy_status st = cosy_fst_rewrite(f, w, in, strlen(in), 0, &r, &n);
  ws_give(tn, w);
  if (st) return st;
  *out = py_strip(r, n);
  free(r);
  return *out ? COSY_OK : cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
}

/* one wetext pass over stripped text with the zh or en grammars */
static cosy_status tn_pass(const cosy_text_norm *tn, const char *prep, int zh, char **out) {
  const cosy_fst *tagger = tn->g[zh ? 0 : 2], *verb = tn->g[zh ? 1 : 3];
  char *tagged = NULL, *ordered = NULL, *spoken = NULL;
  *out = NULL;
  cosy_status st = rewrite(tn, tagger, prep, &tagged);
  if (st) goto done;
  if (!tagged[0]) { /* no tagging (wetext's parser would assert): keep the text */
    if (!(*out = cosy_strdup(prep))) st = COSY_ERR_NO_MEMORY;
    goto done;
  }
  if (!(ordered = reorder(tagged, zh))) {
    st = cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
    goto done;
  }
  if ((st = rewrite(tn, verb, ordered, &spoken))) goto done;
  *out = spoken; /* postprocess: strip (already stripped) */
  spoken = NULL;
done:
  free(tagged);
  free(ordered);
  free(spoken);
  return st;
}

/* end of the next piece of a long text starting at a: after the last '\n' in the window, else
 * after the last sentence end (". ", "! ", "? ", "; ", "。", "！", "？", "；"), else after the last
 * space, else at a character boundary; never before the window's middle */
static size_t piece_end(const char *s, size_t n, size_t a) {
  size_t e = a + COSY_TN_PASS_BYTES;
  if (e >= n) return n;
  size_t mid = a + COSY_TN_PASS_BYTES / 2;
  for (size_t i = e; i > mid; i--)
    if (s[i - 1] == '\n') return i;
  for (size_t i = e; i > mid + 1; i--) {
    if (s[i - 1] == ' ' && strchr(".!?;", s[i - 2])) return i;
    if (i >= a + 3 && (!memcmp(s + i - 3, "\xE3\x80\x82", 3) ||  /* 。 */
                       !memcmp(s + i - 3, "\xEF\xBC\x81", 3) ||  /* ！ */
                       !memcmp(s + i - 3, "\xEF\xBC\x9F", 3) ||  /* ？ */
                       !memcmp(s + i - 3, "\xEF\xBC\x9B", 3)))   /* ； */
      return i;
  }
  for (size_t i = e; i > mid; i--)
    if (s[i - 1] == ' ') return i;
  while (e > a + 1 && ((uint8_t)s[e] & 0xC0) == 0x80) e--;
  return e;
}

cosy_status cosy_text_wetext(const cosy_text_norm *tn, const char *text, char **out) {
  *out = NULL;
  if (!cosy_text_norm_is_full(tn))
    return cosy_err(COSY_ERR_UNSUPPORTED, "text normalization grammars are not loaded");
  char *prep = py_strip(text, strlen(text));
  if (!prep) return cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
  /* language "auto": zh when a CJK ideograph is present or the text is all digits */
  int zh = has_cjk(prep), any_dec = 0, all_digit = prep[0] != '\0';
  size_t n = strlen(prep);
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    i += (size_t)cosy_tu_decode(prep + i, n - i, &cp);
    if (!cosy_tu_is_digit(cp)) all_digit = 0;
    if (cosy_tu_decimal(cp) >= 0) any_dec = 1;
  }
  zh = zh || all_digit;
  /* should_normalize: zh only when a decimal digit (re \d) is present; en when not empty */
  if (zh ? !any_dec : n == 0) {
    *out = prep;
    return COSY_OK;
  }
  if (n <= COSY_TN_PASS_BYTES) {
    cosy_status st = tn_pass(tn, prep, zh, out);
    free(prep);
    return st;
  }
  /* longer text: piece by piece, the language chosen for the whole text; the whitespace between
   * two pieces is kept as the grammars treat it (zh: as is; en: newlines dropped) */
  sb b = {0};
  cosy_status st = COSY_OK;
  size_t last_end = 0; /* just after the last non-space character of the text done so far */
  for (size_t a = 0; a < n && !st;) {
    size_t e = piece_end(prep, n, a);
    char *piece = py_strip(prep + a, e - a), *o = NULL;
    if (!piece) {
      st = cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
      break;
    }
    if (piece[0]) {
      size_t first = a;
      while (prep[first] != piece[0] || memcmp(prep + first, piece, strlen(piece)) != 0) first++;
      if (!(st = tn_pass(tn, piece, zh, &o))) {
        if (b.n)
          for (size_t i = last_end; i < first; i++)
            if (zh || prep[i] != '\n') sb_ch(&b, prep[i]);
        sb_str(&b, o);
        last_end = first + strlen(piece);
      }
    }
    free(piece);
    free(o);
    a = e;
  }
  free(prep);
  if (st) {
    free(b.p);
    return st;
  }
  if (!(*out = sb_take(&b))) return cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
  return COSY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * spell_out_number */

static const char *const UNIT[] = {"", "one", "two", "three", "four", "five", "six", "seven",
                                   "eight", "nine"};
static const char *const TEEN[] = {"ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen",
                                   "sixteen", "seventeen", "eighteen", "nineteen"};
static const char *const TEN[] = {"", "", "twenty", "thirty", "forty", "fifty", "sixty",
                                  "seventy", "eighty", "ninety"};
static const char *const MILL[] = {" ", " thousand", " million", " billion", " trillion",
                                   " quadrillion", " quintillion", " sextillion", " septillion",
                                   " octillion", " nonillion", " decillion"};

static void tenfn(sb *b, int t, int u, int m) {
  if (t != 1) {
    sb_str(b, TEN[t]);
    if (t && u) sb_ch(b, '-');
    sb_str(b, UNIT[u]);
  } else {
    sb_str(b, TEEN[u]);
  }
  sb_str(b, MILL[m]);
}

static int is_ws(char c) { return c == ' ' || (c >= 9 && c <= 13); }

/* "\s+," -> "," */
static void collapse_ws_comma(sb *b) {
  size_t o = 0;
  for (size_t i = 0; i < b->n;) {
    if (is_ws(b->p[i])) {
      size_t j = i;
      while (j < b->n && is_ws(b->p[j])) j++;
      if (j < b->n && b->p[j] == ',') {
        i = j;
        continue;
      }
      while (i < j) b->p[o++] = b->p[i++];
      continue;
    }
    b->p[o++] = b->p[i++];
  }
  b->n = o;
  if (b->p) b->p[o] = '\0';
}

/* inflect number_to_words of the decimal digit values d[0..n) */
static void number_words(sb *out, const int *d, size_t n) {
  size_t a = 0;
  while (a < n && d[a] == 0) a++;
  if (a == n) {
    sb_str(out, "zero");
    return;
  }
  if (a == n - 1 && d[a] == 1) {
    sb_str(out, "one");
    return;
  }
  size_t L = n - a;
  if (L > 36) { /* inflect raises: read digit by digit */
    for (size_t i = 0; i < n; i++) {
      if (i) sb_ch(out, ' ');
      sb_str(out, d[i] ? UNIT[d[i]] : "zero");
    }
    return;
  }
  const int *v = d + a;
  size_t groups = L / 3, lead = L % 3;
  sb b = {0};
  if (lead == 2) {
    tenfn(&b, v[0], v[1], (int)groups);
    sb_str(&b, ", ");
  } else if (lead == 1) {
    sb_str(&b, UNIT[v[0]]);
    sb_str(&b, MILL[groups]);
    sb_str(&b, ", ");
  }
  for (size_t g = 0; g < groups; g++) {
    const int *p = v + lead + 3 * g;
    int m = (int)(groups - 1 - g), h = p[0], t = p[1], u = p[2];
    if (h) {
      sb_str(&b, UNIT[h]);
      sb_str(&b, " hundred");
      if (t || u) sb_str(&b, " and ");
      tenfn(&b, t, u, 0);
      sb_str(&b, MILL[m]);
      sb_str(&b, ", ");
    } else if (t || u) {
      tenfn(&b, t, u, 0);
      sb_str(&b, MILL[m]);
      sb_str(&b, ", ");
    }
  }
  if (b.oom) {
    free(b.p);
    out->oom = 1;
    return;
  }
  /* _handle_chunk's clean-up */
  if (b.n >= 2 && b.p[b.n - 2] == ',' && b.p[b.n - 1] == ' ') b.p[b.n -= 2] = '\0';
  collapse_ws_comma(&b);
  /* ", (\S+)\s+\Z" -> " and \1" */
  if (b.n) {
    size_t e = b.n;
    while (e > 0 && is_ws(b.p[e - 1])) e--;
    if (e < b.n) {
      size_t w = e;
      while (w > 0 && !is_ws(b.p[w - 1])) w--;
      if (w < e && w >= 2 && b.p[w - 1] == ' ' && b.p[w - 2] == ',') {
        /* leftmost match: an earlier ", " whose rest is \S+\s+ would need the word to hold
         * ", ", impossible; so this is the match */
        sb r = {0};
        sb_add(&r, b.p, w - 2);
        sb_str(&r, " and ");
        sb_add(&r, b.p + w, e - w);
        free(b.p);
        b = r;
      }
    }
  }
  collapse_ws_comma(&b);
  /* "\s+" -> " ", strip */
  int sp = 0, any = 0;
  for (size_t i = 0; i < b.n; i++) {
    if (is_ws(b.p[i])) {
      sp = 1;
      continue;
    }
    if (sp && any) sb_ch(out, ' ');
    sp = 0;
    any = 1;
    sb_ch(out, b.p[i]);
  }
  if (b.oom) out->oom = 1;
  free(b.p);
}

char *cosy_text_spell_out_numbers(const char *text) {
  size_t n = strlen(text);
  sb out = {0};
  int *d = NULL;
  size_t nd = 0, capd = 0;
  int in_run = 0;
  for (size_t i = 0; i <= n;) {
    uint32_t cp = 0;
    int k = i < n ? cosy_tu_decode(text + i, n - i, &cp) : 0;
    int dig = i < n && cosy_tu_is_digit(cp);
    if (dig) {
      in_run = 1;
      int v = cosy_tu_decimal(cp);
      if (v >= 0) { /* NON_DIGIT drops the isdigit() characters that are not decimal */
        if (nd == capd) {
          capd = capd ? capd * 2 : 32;
          int *nd2 = (int *)cosy_realloc(d, capd * sizeof(int));
          if (!nd2) {
            free(d);
            free(out.p);
            return NULL;
          }
          d = nd2;
        }
        d[nd++] = v;
      }
    } else {
      if (in_run) {
        if (nd == 0) sb_str(&out, "zero");
        else number_words(&out, d, nd);
        nd = 0;
        in_run = 0;
      }
      if (i < n) sb_add(&out, text + i, (size_t)k);
    }
    if (i == n) break;
    i += (size_t)k;
  }
  free(d);
  return sb_take(&out);
}

/* ---------------------------------------------------------------------------------------------
 * the front end */

static char *minimal(const char *in) {
  size_t n = strlen(in);
  char *out = (char *)cosy_malloc(n + 1);
  if (!out) return NULL;
  if (strstr(in, "<|") && strstr(in, "|>")) {
    memcpy(out, in, n + 1);
    return out;
  }
  size_t o = 0;
  int space = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)in[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
      space = 1;
      continue;
    }
    if (space && o > 0) out[o++] = ' ';
    space = 0;
    out[o++] = (char)c;
  }
  out[o] = '\0';
  return out;
}

/* replace_blank: a ' ' stays only between two ASCII non-space characters (Python's text[i-1]
 * for i = 0 is the last character; a final ' ', where Python raises, is dropped) */
static char *replace_blank(char *s) {
  if (!s) return NULL;
  size_t n = strlen(s);
  /* code point boundaries */
  uint32_t *cps = (uint32_t *)cosy_malloc((n + 1) * sizeof(uint32_t));
  size_t *st = (size_t *)cosy_malloc((n + 1) * sizeof(size_t));
  if (!cps || !st) {
    free(cps);
    free(st);
    free(s);
    return NULL;
  }
  size_t m = 0;
  for (size_t i = 0; i < n;) {
    st[m] = i;
    i += (size_t)cosy_tu_decode(s + i, n - i, &cps[m]);
    m++;
  }
  st[m] = n;
  sb b = {0};
  for (size_t i = 0; i < m; i++) {
    if (cps[i] == ' ') {
      if (i + 1 >= m) continue;
      uint32_t nx = cps[i + 1], pv = cps[i ? i - 1 : m - 1];
      if (nx < 128 && nx != ' ' && pv < 128 && pv != ' ') sb_ch(&b, ' ');
    } else {
      sb_add(&b, s + st[i], st[i + 1] - st[i]);
    }
  }
  free(cps);
  free(st);
  free(s);
  return sb_take(&b);
}

/* re.sub(r'[，,、]+$', '。', s) */
static char *trailing_commas(char *s) {
  if (!s) return NULL;
  size_t e = strlen(s), k = e;
  for (;;) {
    if (k >= 1 && s[k - 1] == ',') k -= 1;
    else if (k >= 3 && (memcmp(s + k - 3, "\xEF\xBC\x8C", 3) == 0 ||
                        memcmp(s + k - 3, "\xE3\x80\x81", 3) == 0)) k -= 3;
    else break;
  }
  if (k == e) return s;
  char *r = (char *)cosy_malloc(k + 4);
  if (!r) {
    free(s);
    return NULL;
  }
  memcpy(r, s, k);
  memcpy(r + k, "\xE3\x80\x82", 4);
  free(s);
  return r;
}

/* text_normalize up to (not including) split_paragraph; *zh = the branch taken */
static cosy_status front(const cosy_text_norm *tn, const char *in, char **out, int *zh) {
  *out = NULL;
  *zh = 0;
  char *t = py_strip(in, strlen(in)), *w = NULL;
  if (!t) return cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
  cosy_status st;
  *zh = has_cjk(t);
  if ((st = cosy_text_wetext(tn, t, &w))) {
    free(t);
    return st;
  }
  free(t);
  if (*zh) {
    w = py_replace(w, "\n", "");
    w = replace_blank(w);
    w = py_replace(w, "\xC2\xB2", "\xE5\xB9\xB3\xE6\x96\xB9"); /* ² -> 平方 */
    w = py_replace(w, "\xC2\xB3", "\xE7\xAB\x8B\xE6\x96\xB9"); /* ³ -> 立方 */
    w = py_replace(w, ".", "\xE3\x80\x82");                      /* . -> 。 */
    w = py_replace(w, " - ", "\xEF\xBC\x8C");                    /* " - " -> ， */
    w = py_replace(w, "\xEF\xBC\x88", "");                       /* （ */
    w = py_replace(w, "\xEF\xBC\x89", "");                       /* ） */
    w = py_replace(w, "\xE3\x80\x90", "");                       /* 【 */
    w = py_replace(w, "\xE3\x80\x91", "");                       /* 】 */
    w = py_replace(w, "`", "");
    w = py_replace(w, "\xE2\x80\x94\xE2\x80\x94", " ");          /* —— -> " " */
    w = trailing_commas(w);
  } else {
    char *s = cosy_text_spell_out_numbers(w);
    free(w);
    w = s;
  }
  if (!w) return cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
  *out = w;
  return COSY_OK;
}

static cosy_status check_in(const cosy_text_norm *tn, const char *utf8, uint32_t flags) {
  if (!utf8) return cosy_err(COSY_ERR_INVALID_ARG, "text is NULL");
  long bad = cosy_utf8_invalid_at(utf8, strlen(utf8));
  if (bad >= 0) return cosy_err(COSY_ERR_TEXT, "text is not valid UTF-8 (byte %ld)", bad);
  if ((flags & COSY_TN_REQUIRE_FULL) && !cosy_text_norm_is_full(tn))
    return cosy_err(COSY_ERR_UNSUPPORTED,
                    "full text normalization needs the wetext grammars in the model file "
                    "(cosyvoice-convert packs those of the installed wetext wheel; "
                    "docs/model-format.md section 9)");
  return COSY_OK;
}

cosy_status cosy_text_normalize(const cosy_text_norm *tn, const char *utf8, uint32_t flags,
                                char **out) {
  *out = NULL;
  cosy_status st = check_in(tn, utf8, flags);
  if (st) return st;
  if (!cosy_text_norm_is_full(tn) || (strstr(utf8, "<|") && strstr(utf8, "|>"))) {
    *out = cosy_text_norm_is_full(tn) ? cosy_strdup(utf8) : minimal(utf8);
    return *out ? COSY_OK : cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
  }
  int zh;
  return front(tn, utf8, out, &zh);
}

void cosy_text_segments_free(char **segments, int n) {
  if (!segments) return;
  for (int i = 0; i < n; i++) free(segments[i]);
  free(segments);
}

cosy_status cosy_text_split(const cosy_text_norm *tn, const char *utf8, uint32_t flags,
                            char ***segments, int *n) {
  *segments = NULL;
  *n = 0;
  cosy_status st = check_in(tn, utf8, flags);
  if (st) return st;
  char *t = NULL;
  char **seg = NULL;
  int ns = 0;
  int raw = strstr(utf8, "<|") && strstr(utf8, "|>");
  if (raw || !utf8[0]) {
    /* one segment, as the official code returns [text] */
    t = cosy_text_norm_is_full(tn) ? cosy_strdup(utf8) : minimal(utf8);
    seg = (char **)cosy_malloc(sizeof(char *));
    if (!t || !seg) {
      free(t);
      free(seg);
      return cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
    }
    if (t[0]) {
      seg[0] = t;
      *segments = seg;
      *n = 1;
    } else {
      free(t);
      *segments = seg;
    }
    return COSY_OK;
  }
  int zh;
  if (cosy_text_norm_is_full(tn)) {
    if ((st = front(tn, utf8, &t, &zh))) return st;
  } else { /* without grammars: the minimal rule, then the same splitting */
    if (!(t = minimal(utf8))) return cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
    zh = has_cjk(t);
  }
  st = cosy_text_split_paragraph(t, zh, tn ? tn->tok : NULL, &seg, &ns);
  free(t);
  if (st) return st;
  int k = 0;
  for (int i = 0; i < ns; i++) {
    if (cosy_text_is_only_punctuation(seg[i])) free(seg[i]);
    else seg[k++] = seg[i];
  }
  *segments = seg;
  *n = k;
  return COSY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * creation */

int cosy_text_norm_is_full(const cosy_text_norm *tn) { return tn && tn->g[0] != NULL; }

size_t cosy_text_norm_bytes(const cosy_text_norm *tn) {
  if (!tn) return 0;
  size_t b = sizeof *tn;
  for (int i = 0; i < COSY_TN_N_GRAMMARS; i++) b += cosy_fst_bytes(tn->g[i]);
  return b;
}

void cosy_text_norm_free(cosy_text_norm *tn) {
  if (!tn) return;
  for (int i = 0; i < COSY_TN_N_GRAMMARS; i++) cosy_fst_free(tn->g[i]);
  for (int i = 0; i < tn->n_pool; i++) cosy_fst_ws_free(tn->pool[i]);
  free(tn->pool);
  pthread_mutex_destroy(&tn->mu);
  free(tn);
}

cosy_status cosy_text_norm_create_from_buffers(const void *const bufs[COSY_TN_N_GRAMMARS],
                                               const size_t sizes[COSY_TN_N_GRAMMARS],
                                               const struct cosy_tokenizer *tok,
                                               cosy_text_norm **out) {
  *out = NULL;
  cosy_text_norm *tn = (cosy_text_norm *)cosy_calloc(1, sizeof *tn);
  if (!tn) return COSY_ERR_NO_MEMORY;
  pthread_mutex_init(&tn->mu, NULL);
  tn->tok = tok;
  int present = 0;
  for (int i = 0; i < COSY_TN_N_GRAMMARS; i++) present += bufs && bufs[i] != NULL;
  if (present != 0 && present != COSY_TN_N_GRAMMARS) {
    cosy_text_norm_free(tn);
    return cosy_err(COSY_ERR_MODEL_FORMAT, "text normalization: %d of the %d grammars present",
                    present, COSY_TN_N_GRAMMARS);
  }
  for (int i = 0; present && i < COSY_TN_N_GRAMMARS; i++) {
    cosy_status st = cosy_fst_load(bufs[i], sizes[i], cosy_tn_grammar_keys[i], &tn->g[i]);
    if (st) {
      cosy_text_norm_free(tn);
      return st;
    }
  }
  *out = tn;
  return COSY_OK;
}

cosy_status cosy_text_norm_create(const gguf_file *f, const struct cosy_tokenizer *tok,
                                  cosy_text_norm **out) {
  const void *bufs[COSY_TN_N_GRAMMARS] = {0};
  size_t sizes[COSY_TN_N_GRAMMARS] = {0};
  for (int i = 0; f && i < COSY_TN_N_GRAMMARS; i++) {
    const gguf_kv *kv = gguf_find_kv(f, cosy_tn_grammar_keys[i]);
    if (!kv) continue;
    if (kv->type != GGUF_T_ARRAY || (kv->arr_type != GGUF_T_UINT8 && kv->arr_type != GGUF_T_INT8))
      return cosy_err(COSY_ERR_MODEL_FORMAT, "model: %s is not an array of u8",
                      cosy_tn_grammar_keys[i]);
    bufs[i] = kv->data;
    sizes[i] = (size_t)kv->n;
  }
  return cosy_text_norm_create_from_buffers(bufs, sizes, tok, out);
}
