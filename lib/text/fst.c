/* fst.c - OpenFst binary vector-FST reader and the one-best rewrite of a byte string (fst.h).
 *
 * File format (OpenFst VectorFst::Write, little-endian): int32 magic 2125659606; the FST type and
 * the arc type as strings (int32 length + bytes; "vector" and "standard" are required); int32
 * version; int32 flags (symbol tables, bits 0x1 | 0x2, are refused); uint64 properties; int64
 * start state; int64 number of states; int64 number of arcs (not used); then per state: float
 * final weight (+inf = not final), int64 arc count, and that many arcs of int32 input label,
 * int32 output label, float weight, int32 next state.
 *
 * What cosy_fst_rewrite computes, step by step as OpenFst does it (Compose with the default
 * options, then ShortestPath(nshortest = 1) with its automatic queue):
 *   1. The composition C of the string acceptor with T: its states are pairs (i, q) of a string
 *      position and a state of T, discovered breadth first from (0, start). The arcs of (i, q),
 *      in this order, are those of q in T whose input label is 0 (epsilon; C stays at i) or the
 *      byte s[i] (C moves to i + 1), in T's arc order (T is input-label sorted, so the epsilon
 *      arcs come first: this is the order OpenFst's sorted matcher yields them in). (n, q) is
 *      final with T's final weight of q. States that cannot reach a final state are removed
 *      (Connect).
 *   2. Queue choice: if every remaining arc has weight 0 (tropical one) the queue is LIFO;
 *      otherwise C is acyclic (T has no cycle of input-epsilon arcs, which the loader does not
 *      check but the rewrite detects: COSY_ERR_UNSUPPORTED) and states are taken in the
 *      topological order given by a depth-first search from the start state that follows arcs
 *      in order: reverse finishing order.
 *   3. Single-source shortest distance with parent pointers: a state's distance and parent
 *      change only when a strictly smaller distance arrives (float sums, d + w, in path order);
 *      the final state kept is the first, in queue order, with a strictly smaller total.
 *   4. The path is read back from the kept final state and its output labels (minus epsilons)
 *      are the result.
 * Ties between paths of equal weight are therefore broken exactly as OpenFst breaks them. */
#include "text/fst.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define FST_MAGIC 2125659606
#define DEFAULT_MAX_STATES ((size_t)2 << 20)

typedef struct fst_arc {
  int32_t il, ol;
  float w;
  int32_t next;
} fst_arc;

struct cosy_fst {
  int32_t start, n_states;
  float *final;      /* [n_states], +inf = not final */
  uint32_t *off;     /* [n_states + 1] first arc of each state */
  uint32_t *neps;    /* [n_states] input-epsilon arcs (a prefix of the state's arcs) */
  fst_arc *arcs;
  size_t n_arcs;
  /* states with many arcs, all labels bytes: tab + 257 * tab_of[q] gives, for each byte b, the
   * first arc (relative to off[q]) whose input label is >= b; others: tab_of[q] = UINT32_MAX */
  uint32_t *tab_of;
  uint16_t *tab;
  size_t n_tab;
};

#define TAB_MIN_ARCS 16

/* ---------------------------------------------------------------------------------------------
 * reading */

typedef struct rd {
  const uint8_t *p;
  size_t n, o;
  int bad;
} rd;

static int rd_take(rd *r, void *dst, size_t k) {
  if (r->bad || r->n - r->o < k) {
    r->bad = 1;
    return 0;
  }
  memcpy(dst, r->p + r->o, k);
  r->o += k;
  return 1;
}

static int rd_str(rd *r, char *dst, size_t cap) {
  int32_t len;
  if (!rd_take(r, &len, 4) || len < 0 || (size_t)len >= cap) {
    r->bad = 1;
    return 0;
  }
  if (!rd_take(r, dst, (size_t)len)) return 0;
  dst[len] = '\0';
  return 1;
}

void cosy_fst_free(cosy_fst *f) {
  if (!f) return;
  free(f->final);
  free(f->off);
  free(f->neps);
  free(f->arcs);
  free(f->tab_of);
  free(f->tab);
  free(f);
}

size_t cosy_fst_bytes(const cosy_fst *f) {
  if (!f) return 0;
  return sizeof *f + (size_t)f->n_states * (sizeof(float) + 3 * sizeof(uint32_t)) +
         sizeof(uint32_t) + f->n_arcs * sizeof(fst_arc) + f->n_tab * 257 * sizeof(uint16_t);
}

cosy_status cosy_fst_load(const void *buf, size_t n, const char *what, cosy_fst **out) {
  *out = NULL;
  rd r = {(const uint8_t *)buf, n, 0, 0};
  int32_t magic = 0, version = 0, flags = 0;
  uint64_t props = 0;
  int64_t start = -1, ns = 0, na = 0;
  char type[64], arctype[64];
  if (!buf || !rd_take(&r, &magic, 4) || magic != FST_MAGIC)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "%s: not an OpenFst binary FST (bad magic)", what);
  if (!rd_str(&r, type, sizeof type) || !rd_str(&r, arctype, sizeof arctype) ||
      !rd_take(&r, &version, 4) || !rd_take(&r, &flags, 4) || !rd_take(&r, &props, 8) ||
      !rd_take(&r, &start, 8) || !rd_take(&r, &ns, 8) || !rd_take(&r, &na, 8))
    return cosy_err(COSY_ERR_MODEL_FORMAT, "%s: FST header truncated", what);
  (void)props;
  (void)na;
  if (strcmp(type, "vector") != 0 || strcmp(arctype, "standard") != 0)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "%s: FST of type %s/%s (expected vector/standard)",
                    what, type, arctype);
  if (flags & 3)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "%s: FST with symbol tables is not supported", what);
  if (ns < 1 || ns > (1 << 26) || start < 0 || start >= ns)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "%s: FST has %lld states, start %lld", what,
                    (long long)ns, (long long)start);
  cosy_fst *f = (cosy_fst *)cosy_calloc(1, sizeof *f);
  if (!f) return COSY_ERR_NO_MEMORY;
  f->start = (int32_t)start;
  f->n_states = (int32_t)ns;
  /* arcs take 16 bytes each in the file: the remaining size bounds their count */
  size_t cap_arcs = (n - r.o) / 16 + 1;
  f->final = (float *)cosy_malloc((size_t)ns * sizeof(float));
  f->off = (uint32_t *)cosy_malloc(((size_t)ns + 1) * sizeof(uint32_t));
  f->neps = (uint32_t *)cosy_malloc((size_t)ns * sizeof(uint32_t));
  f->arcs = (fst_arc *)cosy_malloc(cap_arcs * sizeof(fst_arc));
  if (!f->final || !f->off || !f->neps || !f->arcs) {
    cosy_fst_free(f);
    return COSY_ERR_NO_MEMORY;
  }
  size_t k = 0;
  for (int64_t s = 0; s < ns; s++) {
    float fw;
    int64_t narcs;
    if (!rd_take(&r, &fw, 4) || !rd_take(&r, &narcs, 8) || narcs < 0 ||
        (uint64_t)narcs > (r.n - r.o) / 16) {
      cosy_fst_free(f);
      return cosy_err(COSY_ERR_MODEL_FORMAT, "%s: FST truncated at state %lld", what,
                      (long long)s);
    }
    f->final[s] = fw;
    f->off[s] = (uint32_t)k;
    uint32_t ne = 0;
    for (int64_t a = 0; a < narcs; a++) {
      fst_arc *arc = &f->arcs[k];
      rd_take(&r, &arc->il, 4);
      rd_take(&r, &arc->ol, 4);
      rd_take(&r, &arc->w, 4);
      rd_take(&r, &arc->next, 4);
      if (arc->next < 0 || arc->next >= ns || arc->il < 0 || arc->ol < 0 || isnan(arc->w)) {
        cosy_fst_free(f);
        return cosy_err(COSY_ERR_MODEL_FORMAT, "%s: FST state %lld arc %lld is invalid", what,
                        (long long)s, (long long)a);
      }
      if (a > 0 && arc->il < f->arcs[k - 1].il) {
        cosy_fst_free(f);
        return cosy_err(COSY_ERR_MODEL_FORMAT,
                        "%s: FST state %lld: arcs not sorted by input label", what, (long long)s);
      }
      if (arc->il == 0) ne++;
      k++;
      if (k > UINT32_MAX - 1) {
        cosy_fst_free(f);
        return cosy_err(COSY_ERR_MODEL_FORMAT, "%s: FST too large", what);
      }
    }
    f->neps[s] = ne;
  }
  f->off[ns] = (uint32_t)k;
  f->n_arcs = k;
  if (r.o != n) {
    cosy_fst_free(f);
    return cosy_err(COSY_ERR_MODEL_FORMAT, "%s: %zu trailing bytes after the FST", what, n - r.o);
  }
  fst_arc *shrunk = (fst_arc *)cosy_realloc(f->arcs, (k ? k : 1) * sizeof(fst_arc));
  if (shrunk) f->arcs = shrunk;
  /* byte lookup tables for the states with many arcs */
  size_t nt = 0;
  f->tab_of = (uint32_t *)cosy_malloc((size_t)ns * sizeof(uint32_t));
  if (!f->tab_of) {
    cosy_fst_free(f);
    return COSY_ERR_NO_MEMORY;
  }
  for (int64_t q = 0; q < ns; q++) {
    uint32_t na_q = f->off[q + 1] - f->off[q];
    int ok = na_q > TAB_MIN_ARCS && na_q < 65535 && (na_q == 0 || f->arcs[f->off[q + 1] - 1].il <= 255);
    f->tab_of[q] = ok ? (uint32_t)nt++ : UINT32_MAX;
  }
  if (nt) {
    f->tab = (uint16_t *)cosy_malloc(nt * 257 * sizeof(uint16_t));
    if (!f->tab) {
      cosy_fst_free(f);
      return COSY_ERR_NO_MEMORY;
    }
    f->n_tab = nt;
    for (int64_t q = 0; q < ns; q++) {
      if (f->tab_of[q] == UINT32_MAX) continue;
      uint16_t *t = f->tab + (size_t)f->tab_of[q] * 257;
      uint32_t a = f->off[q], e = f->off[q + 1], rel = 0;
      for (int b = 0; b <= 256; b++) {
        while (a + rel < e && f->arcs[a + rel].il < b) rel++;
        t[b] = (uint16_t)rel;
      }
    }
  }
  *out = f;
  return COSY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * rewrite */

typedef struct cstate {
  int32_t pos, q;
  uint32_t a0, a1; /* composed arcs [a0, a1) */
} cstate;

typedef struct carc {
  int32_t next, ol;
  float w;
} carc;

/* Scratch memory of one rewrite at a time, kept between calls (no page faults, no regrowth). */
struct cosy_fst_ws {
  cstate *st;
  size_t cap_s;
  carc *arcs;
  size_t cap_a;
  /* state lookup: stamp[2 q + (pos & 1)] == epoch + pos + 1 when slot[...] holds (pos, q) */
  uint32_t *stamp, *slot;
  size_t cap_q;
  uint32_t epoch;
  int32_t *work, *nextw;
  size_t cap_w, cap_x;
  /* every composed state, position by position (each position's in creation order) */
  int32_t *lord;
  size_t cap_l;
  size_t *lstart; /* [n + 2] */
  size_t cap_ls;
  /* per composed state, for the search */
  int32_t *stack, *order, *par;
  uint32_t *sidx, *pidx;
  uint8_t *flag; /* bit 0 grey/enqueued, bit 1 black, bit 2 live */
  float *dist;
  size_t cap_d;
};

#define WS_KEEP_STATES ((size_t)1 << 19) /* larger scratch is released after the call */

cosy_fst_ws *cosy_fst_ws_new(void) { return (cosy_fst_ws *)cosy_calloc(1, sizeof(cosy_fst_ws)); }

static void ws_release_big(cosy_fst_ws *w) {
  free(w->st);
  free(w->arcs);
  free(w->stack);
  free(w->order);
  free(w->par);
  free(w->sidx);
  free(w->pidx);
  free(w->flag);
  free(w->dist);
  w->st = NULL;
  w->arcs = NULL;
  w->stack = w->order = w->par = NULL;
  w->sidx = w->pidx = NULL;
  w->flag = NULL;
  w->dist = NULL;
  w->cap_s = w->cap_a = w->cap_d = 0;
}

void cosy_fst_ws_free(cosy_fst_ws *w) {
  if (!w) return;
  ws_release_big(w);
  free(w->stamp);
  free(w->slot);
  free(w->work);
  free(w->nextw);
  free(w->lord);
  free(w->lstart);
  free(w);
}

static int grow(void **p, size_t *cap, size_t need, size_t elt) {
  if (need <= *cap) return 1;
  size_t c = *cap ? *cap : 1024;
  while (c < need) c *= 2;
  void *np = cosy_realloc(*p, c * elt);
  if (!np) return 0;
  *p = np;
  *cap = c;
  return 1;
}

/* first arc of state q with input label lab (q's arcs are sorted by input label), or end */
static uint32_t lower_bound(const cosy_fst *f, int32_t q, int32_t lab) {
  if (f->tab_of[q] != UINT32_MAX) return f->off[q] + f->tab[(size_t)f->tab_of[q] * 257 + lab];
  uint32_t lo = f->off[q] + f->neps[q], hi = f->off[q + 1];
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (f->arcs[mid].il < lab) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

enum { R_OK = 0, R_OOM = -1, R_BIG = -2 };

/* add the arc to (pos, q) to the state being expanded; new states go to the work list */
static int add_arc(cosy_fst_ws *w, size_t *ns, size_t *na, int32_t pos, const fst_arc *fa,
                   size_t max_states, int32_t **list, size_t *ln, size_t *lcap) {
  size_t k = 2 * (size_t)fa->next + (size_t)(pos & 1);
  uint32_t key = w->epoch + (uint32_t)pos + 1;
  int32_t t;
  if (w->stamp[k] == key) {
    t = (int32_t)w->slot[k];
  } else {
    if (*ns >= max_states) return R_BIG;
    if (*ns + 1 > w->cap_s && !grow((void **)&w->st, &w->cap_s, *ns + 1, sizeof(cstate)))
      return R_OOM;
    if (*ln + 1 > *lcap && !grow((void **)list, lcap, *ln + 1, sizeof(int32_t))) return R_OOM;
    t = (int32_t)(*ns)++;
    w->st[t].pos = pos;
    w->st[t].q = fa->next;
    w->stamp[k] = key;
    w->slot[k] = (uint32_t)t;
    (*list)[(*ln)++] = t;
  }
  if (*na + 1 > w->cap_a && !grow((void **)&w->arcs, &w->cap_a, *na + 1, sizeof(carc)))
    return R_OOM;
  carc *c = &w->arcs[(*na)++];
  c->next = t;
  c->ol = fa->ol;
  c->w = fa->w;
  return R_OK;
}

static cosy_status rewrite_ws(const cosy_fst *f, cosy_fst_ws *w, const uint8_t *s, size_t n,
                              size_t max_states, char **out, size_t *out_len) {
  /* lookup arrays sized for this FST; a new epoch per call */
  size_t nq = 2 * (size_t)f->n_states;
  if (nq > w->cap_q) {
    free(w->stamp);
    free(w->slot);
    w->stamp = (uint32_t *)cosy_calloc(nq, sizeof(uint32_t));
    w->slot = (uint32_t *)cosy_malloc(nq * sizeof(uint32_t));
    w->cap_q = w->stamp && w->slot ? nq : 0;
    w->epoch = 0;
    if (!w->cap_q) return cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
  }
  if ((uint64_t)w->epoch + n + 2 >= UINT32_MAX) {
    memset(w->stamp, 0, w->cap_q * sizeof(uint32_t));
    w->epoch = 0;
  }
  size_t ns = 0, na = 0;
  int r = R_OK;
  if (!grow((void **)&w->st, &w->cap_s, 1, sizeof(cstate)) ||
      !grow((void **)&w->work, &w->cap_w, 1, sizeof(int32_t)))
    goto oom;
  w->st[0].pos = 0;
  w->st[0].q = f->start;
  w->stamp[2 * (size_t)f->start] = w->epoch + 1;
  w->slot[2 * (size_t)f->start] = 0;
  ns = 1;

  /* 1. expand position by position */
  size_t wn = 1, xn = 0, nl = 0, last = 0;
  w->work[0] = 0;
  if (!grow((void **)&w->lstart, &w->cap_ls, n + 2, sizeof(size_t))) goto oom;
  for (size_t pos = 0;; pos++) {
    xn = 0;
    for (size_t k = 0; k < wn; k++) {
      int32_t id = w->work[k], q = w->st[id].q;
      w->st[id].a0 = (uint32_t)na;
      uint32_t a = f->off[q], e = a + f->neps[q];
      for (; a < e; a++)
        if ((r = add_arc(w, &ns, &na, (int32_t)pos, &f->arcs[a], max_states, &w->work, &wn,
                         &w->cap_w)))
          goto fail;
      if (pos < n) {
        int32_t lab = s[pos];
        uint32_t end = f->off[q + 1];
        for (a = lower_bound(f, q, lab); a < end && f->arcs[a].il == lab; a++)
          if ((r = add_arc(w, &ns, &na, (int32_t)pos + 1, &f->arcs[a], max_states, &w->nextw,
                           &xn, &w->cap_x)))
            goto fail;
      }
      w->st[id].a1 = (uint32_t)na;
    }
    if (!grow((void **)&w->lord, &w->cap_l, nl + wn, sizeof(int32_t))) goto oom;
    w->lstart[pos] = nl;
    memcpy(w->lord + nl, w->work, wn * sizeof(int32_t));
    nl += wn;
    w->lstart[pos + 1] = nl;
    last = pos;
    if (pos >= n || xn == 0) break;
    int32_t *tw = w->work;
    size_t tc = w->cap_w;
    w->work = w->nextw;
    w->cap_w = w->cap_x;
    w->nextw = tw;
    w->cap_x = tc;
    wn = xn;
  }
  if (na > UINT32_MAX - 1) goto big;
  w->epoch += (uint32_t)n + 2;

  /* 2. co-accessibility, then a depth-first search for the finishing order */
  if (ns > w->cap_d) {
    size_t c = w->cap_d ? w->cap_d : 1024;
    while (c < ns) c *= 2;
    free(w->stack);
    free(w->order);
    free(w->par);
    free(w->sidx);
    free(w->pidx);
    free(w->flag);
    free(w->dist);
    w->stack = (int32_t *)cosy_malloc(c * sizeof(int32_t));
    w->order = (int32_t *)cosy_malloc(c * sizeof(int32_t));
    w->par = (int32_t *)cosy_malloc(c * sizeof(int32_t));
    w->sidx = (uint32_t *)cosy_malloc(c * sizeof(uint32_t));
    w->pidx = (uint32_t *)cosy_malloc(c * sizeof(uint32_t));
    w->flag = (uint8_t *)cosy_malloc(c);
    w->dist = (float *)cosy_malloc(c * sizeof(float));
    w->cap_d = c;
    if (!w->stack || !w->order || !w->par || !w->sidx || !w->pidx || !w->flag || !w->dist) {
      w->cap_d = 0;
      goto oom;
    }
  }
  const cstate *S = w->st;
  const carc *A = w->arcs;
  uint8_t *flag = w->flag;
  int32_t *stack = w->stack, *order = w->order;
  uint32_t *sidx = w->sidx;
  float *dist = w->dist;
  memset(flag, 0, ns);
  /* co-accessibility (bit 2), position by position from the end; within a position, passes
   * in reverse creation order until nothing changes (epsilon arcs stay in the position) */
  for (size_t pos = last + 1; pos-- > 0;) {
    const int32_t *L = w->lord + w->lstart[pos];
    size_t m = w->lstart[pos + 1] - w->lstart[pos];
    for (int changed = 1; changed;) {
      changed = 0;
      for (size_t k = m; k-- > 0;) {
        int32_t v = L[k];
        if (flag[v] & 4) continue;
        int l = pos == n && f->final[S[v].q] != INFINITY;
        for (uint32_t b = S[v].a0; !l && b < S[v].a1; b++) l = (flag[A[b].next] & 4) != 0;
        if (l) {
          flag[v] = 4;
          changed = 1;
        }
      }
    }
  }
  size_t cap_r = 256;
  char *res = (char *)cosy_malloc(cap_r);
  if (!res) goto oom;
  res[0] = '\0';
  *out = res;
  if (!(flag[0] & 4)) return COSY_OK; /* no path: OpenFst gives an empty FST, the rewrite is "" */
  /* depth-first search over the co-accessible states (the others, removed by Connect, change
   * nothing in the finishing order of these): finishing order, cycle check */
  size_t sp = 0, nfin = 0;
  stack[sp] = 0;
  sidx[sp++] = S[0].a0;
  flag[0] |= 1;
  while (sp) {
    int32_t v = stack[sp - 1];
    uint32_t a = sidx[sp - 1];
    if (a < S[v].a1) {
      int32_t t = A[a].next;
      sidx[sp - 1] = a + 1;
      uint8_t ft = flag[t];
      if (ft == 4) {
        flag[t] = 5;
        stack[sp] = t;
        sidx[sp++] = S[t].a0;
      } else if (ft == 5) {
        return cosy_err(COSY_ERR_UNSUPPORTED,
                        "text normalization: grammar has an input-epsilon cycle");
      }
      continue;
    }
    flag[v] = 6;
    dist[v] = INFINITY;
    order[nfin++] = v;
    sp--;
  }
  /* 3. queue discipline and shortest distance */
  int weighted = 0;
  for (size_t k = 0; k < nfin && !weighted; k++) {
    int32_t v = order[k];
    for (uint32_t b = S[v].a0; b < S[v].a1; b++)
      if ((flag[A[b].next] & 4) && A[b].w != 0.0f && A[b].w != INFINITY) {
        weighted = 1;
        break;
      }
  }
  int32_t *par = w->par;
  uint32_t *pidx = w->pidx;
  dist[0] = 0.0f;
  float fdist = INFINITY;
  int32_t fpar = -1;
#define RELAX(v, ENQ)                                                                 \
  do {                                                                                \
    float sd = dist[v];                                                               \
    if ((size_t)S[v].pos == n && f->final[S[v].q] != INFINITY) {                      \
      float tot = sd + f->final[S[v].q];                                              \
      if (tot < fdist) {                                                              \
        fdist = tot;                                                                  \
        fpar = (v);                                                                   \
      }                                                                               \
    }                                                                                 \
    for (uint32_t b = S[v].a0; b < S[v].a1; b++) {                                    \
      int32_t t = A[b].next;                                                          \
      if (!(flag[t] & 4)) continue;                                                   \
      float wt = sd + A[b].w;                                                         \
      if (wt < dist[t]) {                                                             \
        dist[t] = wt;                                                                 \
        par[t] = (v);                                                                 \
        pidx[t] = b;                                                                  \
        ENQ;                                                                          \
      }                                                                               \
    }                                                                                 \
  } while (0)
  if (weighted) {
    for (size_t k = nfin; k-- > 0;) {
      int32_t v = order[k];
      if (dist[v] == INFINITY) continue;
      RELAX(v, (void)0);
    }
  } else {
    /* LIFO queue; bit 0 marks enqueued states */
    for (size_t k = 0; k < nfin; k++) flag[order[k]] &= (uint8_t)~1u;
    sp = 0;
    stack[sp++] = 0;
    flag[0] |= 1;
    while (sp) {
      int32_t v = stack[--sp];
      flag[v] &= (uint8_t)~1u;
      RELAX(v, if (!(flag[t] & 1)) {
        flag[t] |= 1;
        stack[sp++] = t;
      });
    }
  }
#undef RELAX
  if (fpar < 0) return COSY_OK;

  /* 4. read the path back */
  size_t len = 0;
  for (int32_t v = fpar; v != 0; v = par[v]) {
    int32_t ol = A[pidx[v]].ol;
    if (ol == 0) continue;
    if (len + 2 > cap_r) {
      char *nr = (char *)cosy_realloc(res, cap_r *= 2);
      if (!nr) {
        free(res);
        *out = NULL;
        goto oom;
      }
      *out = res = nr;
    }
    res[len++] = (char)(uint8_t)ol;
  }
  for (size_t i = 0, j = len; i + 1 < j; i++, j--) {
    char tmp = res[i];
    res[i] = res[j - 1];
    res[j - 1] = tmp;
  }
  res[len] = '\0';
  if (out_len) *out_len = len;
  return COSY_OK;

fail:
  w->epoch += (uint32_t)n + 2;
  if (r == R_BIG) goto big;
oom:
  return cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
big:
  return cosy_err(COSY_ERR_TEXT, "text normalization: the text is too long for one pass (more "
                  "than %zu grammar states)", max_states);
}

cosy_status cosy_fst_rewrite(const cosy_fst *f, cosy_fst_ws *ws, const char *in, size_t n,
                             size_t max_states, char **out, size_t *out_len) {
  *out = NULL;
  if (out_len) *out_len = 0;
  if (!max_states) max_states = DEFAULT_MAX_STATES;
  if (n > (size_t)INT32_MAX - 4) return cosy_err(COSY_ERR_TEXT, "text too long to normalize");
  cosy_fst_ws *w = ws ? ws : cosy_fst_ws_new();
  if (!w) return cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
  cosy_status st = rewrite_ws(f, w, (const uint8_t *)in, n, max_states, out, out_len);
  if (st) {
    free(*out);
    *out = NULL;
  }
  if (!ws) cosy_fst_ws_free(w);
  else if (w->cap_s > WS_KEEP_STATES || w->cap_a > 2 * WS_KEEP_STATES) ws_release_big(w);
  return st;
}
