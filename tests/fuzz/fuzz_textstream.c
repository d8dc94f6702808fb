/* fuzz_textstream.c - libFuzzer target: text streamed into a request (COSY_SYNTH_TEXT_STREAM,
 * cosy_request_push_text / cosy_request_end_text; lib/textstream.c, lib/sched_llm.c), on the CPU
 * with the demo model (tools/make_model.py --preset demo; COSY_FUZZ_MODEL picks another), a
 * 2-token voice made from the demo voice's features and 8 to 20 speech tokens, so one execution
 * is one short streamed synthesis. One engine per process, made in LLVMFuzzerInitialize.
 *
 * Input: 5 bytes of knobs, then the text. A NUL byte ends a push: the text is cut into pushes at
 * its NULs (two NULs in a row push "", a no-op), so a piece is any bytes but NUL (invalid UTF-8,
 * a UTF-8 character or a BPE word cut anywhere).
 *   byte 0: bit 0 COSY_SYNTH_NO_TEXT_NORMALIZATION; bit 1 the first piece goes to
 *           cosy_request_submit (else its text is NULL and the piece is pushed); bit 2 pull
 *           (cosy_request_read polled between pushes and to the end; else a push callback);
 *           bits 3-4 the end: 0 cosy_request_end_text after piece E, 1 after the last piece,
 *           2 never (cancel, then wait), 3 never (cosy_request_release at once, which cancels);
 *           bit 5 cosy_request_cancel after piece C; bit 6 one push of NULL (after piece 0);
 *           bit 7 a 1 ms cosy_request_wait after each push (the LLM catches up and then waits
 *           for text, the scheduler's pause path)
 *   byte 1: max_tokens = 8 + b % 13 (at most 10 text tokens); with bit 7 set, 200 (100 text
 *           tokens) and a cancel after the last piece (long texts committed, ended or not,
 *           without the cost of speaking them); byte 2: seed; byte 3: E; byte 4: C
 *
 * Checks (abort on violation):
 *   - every push / end_text returns a documented status for the request's state: after a cancel
 *     COSY_ERR_CANCELLED; after a successful end_text COSY_ERR_INVALID_ARG; otherwise COSY_OK,
 *     COSY_ERR_TEXT, or COSY_ERR_INVALID_ARG only once the request has finished (it may reach
 *     max_tokens before the text ends); a NULL piece COSY_ERR_INVALID_ARG;
 *   - a COSY_ERR_TEXT push is justified (the bytes so far are not a UTF-8 prefix, or the same
 *     text pushed at once into a fresh request is refused too) and not taken: the request's
 *     pending bytes and committed ids are unchanged, and a push that commits nothing ("x" after
 *     complete UTF-8) is then accepted;
 *   - the committed text ids depend only on the accepted text, never on the cut: without
 *     normalization they equal cosy_tokenize of the committed prefix of the text; with it, those
 *     of the accepted text pushed in one piece into a fresh request (and ended alike), with the
 *     same bytes left pending;
 *   - the request always ends: cosy_request_wait (20 s) gives COSY_OK, COSY_ERR_TEXT (only for
 *     an ended text without tokens, and always then) or COSY_ERR_CANCELLED (only after a
 *     cancel); stats say done, at most max_tokens speech tokens; audio finite, within [-1, 1];
 *     a pull stream ends with the final status or COSY_OK and 0 samples;
 *   - no sanitizer report, no leak (LeakSanitizer after every input). */
#include "fuzz_common.h"

#include <math.h>
#include <pthread.h>

#include "cosyvoice.h"
#include "fuzz_engine.h"
#include "engine.h"    /* struct cosy_request (pending bytes, committed ids), struct cosy_voice */
#include "tokenizer.h" /* cosy_tokenize, cosy_utf8_invalid_at */

/* libFuzzer makes inputs of at most 1024 bytes (tests/fuzz/fuzz.mk); the saved regressions may be
 * longer (tens of thousands of one-byte pushes: a push must cost O(its bytes)) */
#define FUZZ_TS_MAX_INPUT (3 * COSY_TEXT_MAX_BYTES)
#define WAIT_MS 20000 /* below libFuzzer's -timeout=30, so this check reports a hang first */

static cosy_engine *g_eng;
static float g_spk[192];
static float g_mel[8 * 80];
static int32_t g_tok[4];
static cosy_voice *g_voice;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_engine_and_short_voice("Hi.<|endofprompt|>Hello.", &g_eng, &g_voice, g_spk, g_mel,
                              g_tok);
  return 0;
}

static void check_pcm(const float *pcm, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    FUZZ_CHECK(isfinite(pcm[i]) && fabsf(pcm[i]) <= 1.0f, "sample %lld is %g", (long long)i,
               (double)pcm[i]);
}

static int32_t on_chunk(void *user, const cosy_chunk *c) {
  check_pcm(c->pcm, c->n_samples);
  ++*(int *)user;
  return 0;
}

/* ---- the accepted text and the request's text state --------------------------------------- */

typedef struct text_buf {
  char *s;
  size_t n, cap;
} text_buf;

static void tb_add(text_buf *t, const char *s, size_t n) {
  if (t->n + n + 1 > t->cap) {
    t->cap = (t->n + n + 1) * 2;
    t->s = (char *)realloc(t->s, t->cap);
    FUZZ_CHECK(t->s != NULL, "out of memory");
  }
  memcpy(t->s + t->n, s, n);
  t->n += n;
  t->s[t->n] = 0;
}

/* s[0..n) is UTF-8 up to a trailing incomplete character (lib/textstream.c's rule, by hand):
 * 2 = complete, 1 = ends inside a character, 0 = invalid */
static int utf8_prefix(const char *text, size_t n) {
  const unsigned char *s = (const unsigned char *)text;
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    int need = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
             : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!need) return 0;
    for (int k = 1; k < need; k++) {
      if (i + (size_t)k >= n) return 1;
      unsigned d = s[i + (size_t)k], lo = 0x80, hi = 0xBF;
      if (k == 1 && c == 0xE0) lo = 0xA0;
      if (k == 1 && c == 0xED) hi = 0x9F;
      if (k == 1 && c == 0xF0) lo = 0x90;
      if (k == 1 && c == 0xF4) hi = 0x8F;
      if (d < lo || d > hi) return 0;
    }
    i += (size_t)need;
  }
  return 2;
}

typedef struct snap {
  size_t len;
  size_t kept; /* bytes of raw: all len, or (a push's quick snapshot of a long pending text)
                  its first and last SNAP_PART / 2 */
  char *raw;
  int n_ids;
  int32_t *ids;
  int ended;
} snap;

/* a push's before / after snapshots keep at most this many pending bytes (the long saved inputs
 * push one byte at a time onto tens of kB: copying it all at each push would make the harness
 * itself quadratic) */
#define SNAP_PART 4096

/* the request's pending bytes and committed ids (pending bytes: the pushing thread's, i.e. ours);
 * full = 0: at most SNAP_PART of the pending bytes */
static void snap_take(cosy_request *r, snap *s, int full) {
  s->len = r->tx_len;
  s->kept = full || s->len <= SNAP_PART ? s->len : SNAP_PART;
  s->raw = (char *)malloc(s->kept + 1);
  FUZZ_CHECK(s->raw != NULL, "out of memory");
  if (s->kept == s->len) {
    if (s->len) memcpy(s->raw, r->tx_raw, s->len);
  } else {
    memcpy(s->raw, r->tx_raw, SNAP_PART / 2);
    memcpy(s->raw + SNAP_PART / 2, r->tx_raw + s->len - SNAP_PART / 2, SNAP_PART / 2);
  }
  pthread_mutex_lock(&r->mu);
  s->n_ids = r->tx_n;
  s->ids = (int32_t *)malloc((size_t)(s->n_ids + 1) * sizeof *s->ids);
  FUZZ_CHECK(s->ids != NULL, "out of memory");
  if (s->n_ids) memcpy(s->ids, r->tx_ids, (size_t)s->n_ids * sizeof *s->ids);
  s->ended = r->tx_ended;
  pthread_mutex_unlock(&r->mu);
}

static void snap_free(snap *s) {
  free(s->raw);
  free(s->ids);
}

static int snap_same(const snap *a, const snap *b) {
  return a->len == b->len && a->kept == b->kept && !memcmp(a->raw, b->raw, a->kept) &&
         a->n_ids == b->n_ids &&
         !memcmp(a->ids, b->ids, (size_t)a->n_ids * sizeof *a->ids) && a->ended == b->ended;
}

/* The reference: text (NUL-free, n bytes) pushed in one piece into a fresh streamed request that
 * never reaches the scheduler (lib/textstream.c only), then ended when end. Returns the status
 * of the push, or of the end; the state is left in *out. */
static cosy_status reference(const char *text, size_t n, uint32_t flags, int max_tokens, int end,
                             snap *out) {
  cosy_request *r = (cosy_request *)calloc(1, sizeof *r);
  FUZZ_CHECK(r != NULL, "out of memory");
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->engine = g_eng;
  cosy_synth_params_init(&r->params, sizeof r->params);
  r->params.flags = flags;
  r->params.max_tokens = max_tokens;
  r->text_stream = 1;
  r->state = REQ_RUNNING;
  r->tx_max = max_tokens / 2;
  char *s = (char *)malloc(n + 1);
  FUZZ_CHECK(s != NULL, "out of memory");
  memcpy(s, text, n);
  s[n] = 0;
  cosy_status st = textstream_push(r, s);
  if (!st && end) st = textstream_end(r);
  free(s);
  snap_take(r, out, 1);
  free(r->tx_raw);
  free(r->tx_ids);
  free(r->tx_units); /* the marks' units (lib/request.c frees the same for a real request) */
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r);
  return st;
}

/* ---- the target ----------------------------------------------------------------------------- */

typedef struct run {
  cosy_request *req;
  uint32_t flags;
  int max_tokens;
  int pull, yield;
  int ended, cancelled;
  text_buf acc;      /* the text accepted so far */
  int64_t n_pulled;
  cosy_status pull_end; /* a pull read's final answer (COSY_OK with 0 samples, or the failure) */
  int pull_done;
} run;

static int req_done(cosy_request *r) { return cosy_request_wait(r, 0) != COSY_ERR_TIMEOUT; }

static void poll_audio(run *u, int32_t timeout_ms) {
  if (!u->pull || u->pull_done) return;
  float buf[2048];
  for (;;) {
    int64_t got = -1;
    cosy_status st = cosy_request_read(u->req, buf, 2048, &got, timeout_ms);
    if (st == COSY_ERR_TIMEOUT) {
      FUZZ_CHECK(got == 0 && timeout_ms >= 0, "read: timeout with %lld samples", (long long)got);
      return;
    }
    if (st != COSY_OK || got == 0) {
      FUZZ_CHECK(got == 0, "read: %d with %lld samples", st, (long long)got);
      u->pull_done = 1;
      u->pull_end = st;
      return;
    }
    check_pcm(buf, got);
    u->n_pulled += got;
  }
}

/* push one piece (NULL allowed) and check the answer against the state */
static void push(run *u, const char *piece) {
  snap before;
  snap_take(u->req, &before, 0);
  const int was_done = req_done(u->req);
  cosy_status st = cosy_request_push_text(u->req, piece);
  const char *err = st ? cosy_last_error() : "";
  if (!piece) {
    FUZZ_CHECK(st == COSY_ERR_INVALID_ARG, "push(NULL): %d: %s", st, err);
  } else if (u->cancelled) {
    FUZZ_CHECK(st == COSY_ERR_CANCELLED, "push after cancel: %d: %s", st, err);
  } else if (u->ended) {
    FUZZ_CHECK(st == COSY_ERR_INVALID_ARG, "push after end_text: %d: %s", st, err);
  } else if (st == COSY_ERR_INVALID_ARG) {
    FUZZ_CHECK(req_done(u->req), "push refused (%s) on a running request", err);
  } else if (st == COSY_OK) {
    FUZZ_CHECK(!was_done, "push accepted by a finished request");
    tb_add(&u->acc, piece, strlen(piece));
  } else {
    FUZZ_CHECK(st == COSY_ERR_TEXT, "push: undocumented status %d: %s", st, err);
    FUZZ_CHECK(piece[0], "push(\"\") refused: %s", err);
    /* justified: not a UTF-8 prefix, or refused when the same text comes at once */
    text_buf all = {0};
    tb_add(&all, u->acc.s ? u->acc.s : "", u->acc.n);
    tb_add(&all, piece, strlen(piece));
    if (utf8_prefix(all.s, all.n)) {
      snap ref;
      cosy_status rs = reference(all.s, all.n, u->flags, u->max_tokens, 0, &ref);
      snap_free(&ref);
      FUZZ_CHECK(rs == COSY_ERR_TEXT, "push refused (%s) but the text at once gives %d", err, rs);
    }
    free(all.s);
    /* not taken */
    snap after;
    snap_take(u->req, &after, 0);
    FUZZ_CHECK(snap_same(&before, &after), "a refused push changed the request (%zu -> %zu "
               "pending bytes, %d -> %d ids)", before.len, after.len, before.n_ids, after.n_ids);
    snap_free(&after);
    /* and the request still takes text: "x" after complete UTF-8 commits nothing */
    if (utf8_prefix(u->acc.s ? u->acc.s : "", u->acc.n) == 2) {
      st = cosy_request_push_text(u->req, "x");
      FUZZ_CHECK(st == COSY_OK || (st == COSY_ERR_INVALID_ARG && req_done(u->req)),
                 "push(\"x\") after a refused push: %d: %s", st, cosy_last_error());
      if (st == COSY_OK) tb_add(&u->acc, "x", 1);
    }
  }
  snap_free(&before);
}

static void end_text(run *u) {
  cosy_status st = cosy_request_end_text(u->req);
  const char *err = st ? cosy_last_error() : "";
  if (u->cancelled) {
    FUZZ_CHECK(st == COSY_ERR_CANCELLED, "end_text after cancel: %d: %s", st, err);
  } else if (u->ended) {
    FUZZ_CHECK(st == COSY_ERR_INVALID_ARG, "second end_text: %d: %s", st, err);
  } else if (st == COSY_ERR_INVALID_ARG) {
    FUZZ_CHECK(req_done(u->req), "end_text refused (%s) on a running request", err);
  } else if (st == COSY_ERR_TEXT) {
    const char *a = u->acc.s ? u->acc.s : "";
    if (utf8_prefix(a, u->acc.n) == 2) {
      snap ref;
      cosy_status rs = reference(a, u->acc.n, u->flags, u->max_tokens, 1, &ref);
      snap_free(&ref);
      FUZZ_CHECK(rs == COSY_ERR_TEXT, "end_text refused (%s) but the text at once gives %d", err,
                 rs);
    }
    /* the text is not ended: a push would still be taken; give up instead */
    cosy_request_cancel(u->req);
    u->cancelled = 1;
  } else {
    FUZZ_CHECK(st == COSY_OK, "end_text: undocumented status %d: %s", st, err);
    u->ended = 1;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 5 || size > FUZZ_TS_MAX_INPUT) return 0;
  const uint8_t k0 = data[0];
  run u;
  memset(&u, 0, sizeof u);
  u.flags = COSY_SYNTH_TEXT_STREAM | ((k0 & 1) ? COSY_SYNTH_NO_TEXT_NORMALIZATION : 0);
  u.max_tokens = (data[1] & 0x80) ? 200 : 8 + data[1] % 13;
  const int long_text = data[1] >> 7;
  u.pull = (k0 >> 2) & 1;
  u.yield = k0 >> 7;
  const int to_submit = (k0 >> 1) & 1, end_mode = (k0 >> 3) & 3, cancel_at = (k0 & 32) ? data[4] : -1;
  const int null_push = (k0 >> 6) & 1;
  const int end_at = end_mode == 0 ? data[3] : end_mode == 1 ? 1 << 30 : -1;

  /* the pieces: the text cut at its NULs */
  const size_t n = size - 5;
  char *text = (char *)malloc(n + 1);
  memcpy(text, data + 5, n);
  text[n] = 0;
  int n_pieces = 1;
  for (size_t i = 0; i < n; i++) n_pieces += text[i] == 0;
  const char **pieces = (const char **)malloc((size_t)n_pieces * sizeof *pieces);
  for (int i = 0, at = 0; i < n_pieces; i++) {
    pieces[i] = text + at;
    at += (int)strlen(text + at) + 1;
  }

  cosy_synth_params sp;
  cosy_synth_params_init(&sp, sizeof sp);
  sp.flags = u.flags;
  sp.max_tokens = u.max_tokens;
  sp.seed = 1 + data[2];
  int chunks = 0, first = 0;
  cosy_status st = COSY_ERR_INTERNAL;
  if (to_submit) {
    st = cosy_request_submit(g_eng, g_voice, pieces[0], &sp, u.pull ? NULL : on_chunk, &chunks,
                             &u.req);
    if (st == COSY_OK) {
      tb_add(&u.acc, pieces[0], strlen(pieces[0]));
      first = 1;
    } else {
      /* refused as a first push would be: the piece is invalid or too long */
      FUZZ_CHECK(st == COSY_ERR_TEXT && u.req == NULL && pieces[0][0], "submit: %d: %s", st,
                 cosy_last_error());
    }
  }
  if (!u.req) {
    st = cosy_request_submit(g_eng, g_voice, NULL, &sp, u.pull ? NULL : on_chunk, &chunks, &u.req);
    FUZZ_CHECK(st == COSY_OK && u.req, "submit: %d: %s", st, cosy_last_error());
  }

  for (int i = 0; i < n_pieces; i++) {
    if (!(i == 0 && first)) push(&u, pieces[i]);
    if (null_push && i == 0) push(&u, NULL);
    if (i == cancel_at) {
      cosy_request_cancel(u.req);
      u.cancelled = 1;
    }
    if (i == end_at || (i == n_pieces - 1 && end_at > i)) end_text(&u);
    if (u.yield) (void)cosy_request_wait(u.req, 1);
    poll_audio(&u, 0);
  }

  if (long_text && !u.cancelled) {
    cosy_request_cancel(u.req);
    u.cancelled = 1;
  }
  if (end_mode == 3 && !u.ended) { /* never ended: release cancels, must not hang or leak */
    cosy_request_release(u.req);
    free(pieces);
    free(text);
    free(u.acc.s);
    return 0;
  }
  if (!u.ended && !u.cancelled) {
    cosy_request_cancel(u.req);
    u.cancelled = 1;
  }
  st = cosy_request_wait(u.req, WAIT_MS);
  FUZZ_CHECK(st != COSY_ERR_TIMEOUT, "the request did not end in %d ms (ended %d, cancelled %d)",
             WAIT_MS, u.ended, u.cancelled);
  const char *err = st ? cosy_last_error() : "";
  snap got;
  snap_take(u.req, &got, 1);
  FUZZ_CHECK(st == COSY_OK || st == COSY_ERR_TEXT || (st == COSY_ERR_CANCELLED && u.cancelled),
             "request ended with %d: %s", st, err);
  FUZZ_CHECK(st != COSY_ERR_TEXT || got.n_ids == 0, "COSY_ERR_TEXT with %d text ids: %s",
             got.n_ids, err);
  if (u.ended && !u.cancelled && got.n_ids == 0)
    FUZZ_CHECK(st == COSY_ERR_TEXT, "an ended text without tokens ended with %d", st);
  FUZZ_CHECK(got.ended == u.ended, "tx_ended %d, end_text said %d", got.ended, u.ended);
  if (u.pull) {
    poll_audio(&u, WAIT_MS);
    FUZZ_CHECK(u.pull_done && (u.pull_end == st || u.pull_end == COSY_OK),
               "pull stream ended with %d, the request with %d", u.pull_end, st);
  }
  cosy_request_stats rs;
  cosy_request_stats_init(&rs, sizeof rs);
  FUZZ_CHECK(cosy_request_get_stats(u.req, &rs) == COSY_OK && rs.done == 1, "stats");
  FUZZ_CHECK(rs.n_speech_tokens <= u.max_tokens, "%d speech tokens, max_tokens %d",
             rs.n_speech_tokens, u.max_tokens);

  /* the committed ids depend only on the accepted text */
  const char *a = u.acc.s ? u.acc.s : "";
  FUZZ_CHECK(got.len <= u.acc.n && !memcmp(got.raw, a + u.acc.n - got.len, got.len),
             "the pending bytes are not the end of the accepted text");
  if (u.flags & COSY_SYNTH_NO_TEXT_NORMALIZATION) {
    int32_t *ids = NULL, nids = 0;
    FUZZ_CHECK(cosy_tokenize(g_eng->tok, a, u.acc.n - got.len, &ids, &nids) == COSY_OK,
               "tokenize the committed text: %s", cosy_last_error());
    FUZZ_CHECK(nids == got.n_ids && !memcmp(ids, got.ids, (size_t)nids * sizeof *ids),
               "streamed ids (%d) differ from the committed text's (%d), %zu bytes committed",
               got.n_ids, nids, u.acc.n - got.len);
    free(ids);
  }
  if (getenv("COSY_FUZZ_VERBOSE"))
    fprintf(stderr, "textstream: %d pieces, %zu bytes accepted, %d ids, %zu pending, ended %d, "
            "cancelled %d, status %d, %d speech tokens, %lld samples\n", n_pieces, u.acc.n,
            got.n_ids, got.len, u.ended, u.cancelled, st, rs.n_speech_tokens,
            (long long)rs.n_samples);
  snap ref;
  cosy_status rst = reference(a, u.acc.n, u.flags, u.max_tokens, u.ended, &ref);
  FUZZ_CHECK(rst == COSY_OK, "the accepted text at once: %d: %s", rst, cosy_last_error());
  FUZZ_CHECK(snap_same(&ref, &got),
             "streamed state (%d ids, %zu pending) differs from the text at once (%d ids, %zu "
             "pending)", got.n_ids, got.len, ref.n_ids, ref.len);
  snap_free(&ref);
  snap_free(&got);
  cosy_request_release(u.req);
  free(pieces);
  free(text);
  free(u.acc.s);
  return 0;
}
