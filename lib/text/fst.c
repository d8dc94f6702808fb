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
#define DEFAULT_MAX_STATES ((size_t)4 << 20)

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
};

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
  free(f);
}

size_t cosy_fst_bytes(const cosy_fst *f) {
  if (!f) return 0;
  return sizeof *f + (size_t)f->n_states * (sizeof(float) + 2 * sizeof(uint32_t)) +
         sizeof(uint32_t) + f->n_arcs * sizeof(fst_arc);
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
  fst_arc *shrunk = (fst_arc *)realloc(f->arcs, (k ? k : 1) * sizeof(fst_arc));
  if (shrunk) f->arcs = shrunk;
  *out = f;
  return COSY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * rewrite */

typedef struct comp {
  /* states */
  int32_t *pos, *q;
  uint32_t *arc0; /* first composed arc of each expanded state */
  size_t ns, cap_s;
  /* arcs */
  int32_t *an, *ao;
  float *aw;
  size_t na, cap_a;
  /* hash (pos, q) -> state */
  uint64_t *hk;
  int32_t *hv;
  size_t hmask;
} comp;

static void comp_free(comp *c) {
  free(c->pos);
  free(c->q);
  free(c->arc0);
  free(c->an);
  free(c->ao);
  free(c->aw);
  free(c->hk);
  free(c->hv);
}

static uint64_t mix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

static int grow(void **p, size_t *cap, size_t need, size_t elt) {
  if (need <= *cap) return 1;
  size_t c = *cap ? *cap : 256;
  while (c < need) c *= 2;
  void *np = realloc(*p, c * elt);
  if (!np) return 0;
  *p = np;
  *cap = c;
  return 1;
}

static int hash_rehash(comp *c, size_t newcap) {
  uint64_t *hk = (uint64_t *)malloc(newcap * sizeof(uint64_t));
  int32_t *hv = (int32_t *)malloc(newcap * sizeof(int32_t));
  if (!hk || !hv) {
    free(hk);
    free(hv);
    return 0;
  }
  memset(hk, 0xff, newcap * sizeof(uint64_t));
  size_t mask = newcap - 1;
  if (c->hk) {
    for (size_t i = 0; i <= c->hmask; i++) {
      if (c->hk[i] == UINT64_MAX) continue;
      size_t j = mix64(c->hk[i]) & mask;
      while (hk[j] != UINT64_MAX) j = (j + 1) & mask;
      hk[j] = c->hk[i];
      hv[j] = c->hv[i];
    }
  }
  free(c->hk);
  free(c->hv);
  c->hk = hk;
  c->hv = hv;
  c->hmask = mask;
  return 1;
}

/* id of state (pos, q), adding it when new; -1 on allocation failure, -2 over the limit */
static int32_t comp_state(comp *c, int32_t pos, int32_t q, size_t max_states) {
  uint64_t key = ((uint64_t)(uint32_t)pos << 32) | (uint32_t)q;
  size_t j = mix64(key) & c->hmask;
  while (c->hk[j] != UINT64_MAX) {
    if (c->hk[j] == key) return c->hv[j];
    j = (j + 1) & c->hmask;
  }
  if (c->ns >= max_states) return -2;
  size_t cap = c->cap_s;
  if (!grow((void **)&c->pos, &cap, c->ns + 2, sizeof(int32_t))) return -1;
  cap = c->cap_s;
  if (!grow((void **)&c->q, &cap, c->ns + 2, sizeof(int32_t))) return -1;
  cap = c->cap_s;
  if (!grow((void **)&c->arc0, &cap, c->ns + 2, sizeof(uint32_t))) return -1;
  c->cap_s = cap;
  int32_t id = (int32_t)c->ns++;
  c->pos[id] = pos;
  c->q[id] = q;
  c->hk[j] = key;
  c->hv[j] = id;
  if (c->ns * 2 > c->hmask + 1 && !hash_rehash(c, (c->hmask + 1) * 2)) return -1;
  return id;
}

static int comp_arc(comp *c, int32_t next, int32_t ol, float w) {
  size_t cap = c->cap_a;
  if (!grow((void **)&c->an, &cap, c->na + 1, sizeof(int32_t))) return 0;
  cap = c->cap_a;
  if (!grow((void **)&c->ao, &cap, c->na + 1, sizeof(int32_t))) return 0;
  cap = c->cap_a;
  if (!grow((void **)&c->aw, &cap, c->na + 1, sizeof(float))) return 0;
  c->cap_a = cap;
  c->an[c->na] = next;
  c->ao[c->na] = ol;
  c->aw[c->na] = w;
  c->na++;
  return 1;
}

/* first arc of state q with input label lab (q's arcs are sorted by input label), or end */
static uint32_t lower_bound(const cosy_fst *f, int32_t q, int32_t lab) {
  uint32_t lo = f->off[q] + f->neps[q], hi = f->off[q + 1];
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (f->arcs[mid].il < lab) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

cosy_status cosy_fst_rewrite(const cosy_fst *f, const char *in, size_t n, size_t max_states,
                             char **out, size_t *out_len) {
  *out = NULL;
  if (out_len) *out_len = 0;
  if (!max_states) max_states = DEFAULT_MAX_STATES;
  if (n > (size_t)INT32_MAX - 1) return cosy_err(COSY_ERR_TEXT, "text too long to normalize");
  const uint8_t *s = (const uint8_t *)in;
  comp c;
  memset(&c, 0, sizeof c);
  cosy_status st = COSY_OK;
  int32_t *stack = NULL, *order = NULL, *par = NULL;
  uint32_t *sidx = NULL, *pidx = NULL;
  uint8_t *color = NULL, *live = NULL;
  float *dist = NULL;
  char *res = NULL;
  if (!hash_rehash(&c, 1024)) goto oom;
  if (comp_state(&c, 0, f->start, max_states) < 0) goto oom;

  /* 1. expand breadth first */
  for (size_t id = 0; id < c.ns; id++) {
    c.arc0[id] = (uint32_t)c.na;
    int32_t pos = c.pos[id], q = c.q[id];
    uint32_t a = f->off[q], e = a + f->neps[q];
    for (; a < e; a++) {
      int32_t t = comp_state(&c, pos, f->arcs[a].next, max_states);
      if (t == -2) goto toobig;
      if (t < 0 || !comp_arc(&c, t, f->arcs[a].ol, f->arcs[a].w)) goto oom;
    }
    if ((size_t)pos < n) {
      int32_t lab = s[pos];
      uint32_t end = f->off[q + 1];
      for (a = lower_bound(f, q, lab); a < end && f->arcs[a].il == lab; a++) {
        int32_t t = comp_state(&c, pos + 1, f->arcs[a].next, max_states);
        if (t == -2) goto toobig;
        if (t < 0 || !comp_arc(&c, t, f->arcs[a].ol, f->arcs[a].w)) goto oom;
      }
    }
  }
  c.arc0[c.ns] = (uint32_t)c.na;
  if (c.na > UINT32_MAX - 1) goto toobig;

  /* 2. depth-first search: finishing order, co-accessibility, cycle check */
  size_t ns = c.ns;
  stack = (int32_t *)malloc(ns * sizeof(int32_t));
  sidx = (uint32_t *)malloc(ns * sizeof(uint32_t));
  order = (int32_t *)malloc(ns * sizeof(int32_t));
  color = (uint8_t *)calloc(ns, 1);
  live = (uint8_t *)calloc(ns, 1);
  if (!stack || !sidx || !order || !color || !live) goto oom;
  size_t sp = 0, nfin = 0;
  stack[sp] = 0;
  sidx[sp++] = c.arc0[0];
  color[0] = 1;
  while (sp) {
    int32_t v = stack[sp - 1];
    uint32_t a = sidx[sp - 1];
    if (a < c.arc0[v + 1]) {
      int32_t t = c.an[a];
      sidx[sp - 1] = a + 1;
      if (color[t] == 0) {
        color[t] = 1;
        stack[sp] = t;
        sidx[sp++] = c.arc0[t];
      } else if (color[t] == 1) {
        st = cosy_err(COSY_ERR_UNSUPPORTED, "text normalization: grammar has an input-epsilon cycle");
        goto done;
      }
      continue;
    }
    /* finish v */
    color[v] = 2;
    int l = (size_t)c.pos[v] == n && f->final[c.q[v]] != INFINITY;
    for (uint32_t b = c.arc0[v]; !l && b < c.arc0[v + 1]; b++) l = live[c.an[b]];
    live[v] = (uint8_t)l;
    order[nfin++] = v;
    sp--;
  }
  res = (char *)malloc(n * 4 + 64);
  if (!live[0]) { /* no path: OpenFst gives an empty FST, the rewrite is "" */
    if (!res) goto oom;
    res[0] = '\0';
    *out = res;
    res = NULL;
    goto done;
  }

  /* 3. queue discipline and shortest distance */
  int weighted = 0;
  for (size_t v = 0; v < ns && !weighted; v++) {
    if (!live[v]) continue;
    for (uint32_t b = c.arc0[v]; b < c.arc0[v + 1]; b++)
      if (live[c.an[b]] && c.aw[b] != 0.0f && c.aw[b] != INFINITY) {
        weighted = 1;
        break;
      }
  }
  dist = (float *)malloc(ns * sizeof(float));
  par = (int32_t *)malloc(ns * sizeof(int32_t));
  pidx = (uint32_t *)malloc(ns * sizeof(uint32_t));
  if (!dist || !par || !pidx || !res) goto oom;
  for (size_t v = 0; v < ns; v++) {
    dist[v] = INFINITY;
    par[v] = -1;
  }
  dist[0] = 0.0f;
  float fdist = INFINITY;
  int32_t fpar = -1;
#define RELAX(v, ENQ)                                                                 \
  do {                                                                                \
    float sd = dist[v];                                                               \
    if ((size_t)c.pos[v] == n && f->final[c.q[v]] != INFINITY) {                      \
      float tot = sd + f->final[c.q[v]];                                              \
      if (tot < fdist) {                                                              \
        fdist = tot;                                                                  \
        fpar = (v);                                                                   \
      }                                                                               \
    }                                                                                 \
    for (uint32_t b = c.arc0[v]; b < c.arc0[(v) + 1]; b++) {                          \
      int32_t t = c.an[b];                                                            \
      if (!live[t]) continue;                                                         \
      float wt = sd + c.aw[b];                                                        \
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
      if (!live[v] || dist[v] == INFINITY) continue;
      RELAX(v, (void)0);
    }
  } else {
    /* LIFO queue: `color` now marks enqueued states */
    memset(color, 0, ns);
    sp = 0;
    stack[sp++] = 0;
    color[0] = 1;
    while (sp) {
      int32_t v = stack[--sp];
      color[v] = 0;
      RELAX(v, if (!color[t]) {
        color[t] = 1;
        stack[sp++] = t;
      });
    }
  }
#undef RELAX
  if (fpar < 0) {
    res[0] = '\0';
    *out = res;
    res = NULL;
    goto done;
  }

  /* 4. read the path back */
  size_t len = 0, cap = n * 4 + 64;
  for (int32_t v = fpar; v != 0; v = par[v]) {
    int32_t ol = c.ao[pidx[v]];
    if (ol == 0) continue;
    if (len + 1 >= cap) {
      cap *= 2;
      char *nr = (char *)realloc(res, cap);
      if (!nr) goto oom;
      res = nr;
    }
    res[len++] = (char)(uint8_t)ol;
  }
  for (size_t i = 0, j = len; i + 1 < j; i++, j--) {
    char tmp = res[i];
    res[i] = res[j - 1];
    res[j - 1] = tmp;
  }
  res[len] = '\0';
  *out = res;
  if (out_len) *out_len = len;
  res = NULL;
  goto done;

oom:
  st = cosy_err(COSY_ERR_NO_MEMORY, "text normalization: out of memory");
  goto done;
toobig:
  st = cosy_err(COSY_ERR_TEXT, "text normalization: the text is too long for one pass (more than "
                "%zu grammar states)", max_states);
done:
  free(res);
  free(stack);
  free(sidx);
  free(order);
  free(color);
  free(live);
  free(dist);
  free(par);
  free(pidx);
  comp_free(&c);
  return st;
}
