/* test_longtext.c - long text: the official front end's text_normalize(split=True) cuts the text
 * into segments (split_paragraph, ~60-80 tokens each) and each is synthesized in turn within one
 * request (same prompt, fresh LLM context, fresh flow and vocoder states; segment k draws from
 * seed + k). On the CPU engine with the small golden model and voice:
 *   - a long multi-sentence text gives more than one segment;
 *   - its audio equals, sample for sample, the concatenation of blocking synthesis of each
 *     segment's normalized text alone (COSY_SYNTH_NO_TEXT_NORMALIZATION, seed + k), for the
 *     blocking call, push streaming and pull streaming of the long text: one continuous stream
 *     (chunk offsets contiguous, COSY_CHUNK_LAST once, on the last chunk);
 *   - the request's statistics add the segments up; a cancel during a later segment ends the
 *     request with COSY_ERR_CANCELLED; with COSY_SYNTH_NO_TEXT_NORMALIZATION the text is one
 *     utterance (no split, as the official code with text_frontend=False).
 * Long text within what one utterance may take (docs/scheduler.md section 8):
 *   - the ~2,000-character paragraph of bench/text/en_long.txt is cut into several segments by a
 *     normalizer without grammars (whitespace only, then split_paragraph), the pieces in order
 *     giving the text back;
 *   - sched_utt_check at its bounds (flow frames, LLM positions, the one-shot vocoder call), the
 *     largest max_tokens it names fitting exactly, the status per cause;
 *   - with the GPU engine's per-utterance capacity (COSY_GPU_UTT_FRAMES, lib/engine.h) put on the
 *     CPU engine, the paragraph is accepted with default parameters and a 3.5 s or a 30 s voice
 *     (every segment's default ceiling fits), while with the 3000 frames the GPU flow held before
 *     it fails at submission with COSY_ERR_TEXT naming a segment and max_tokens;
 *   - a later segment that cannot fit fails the request at submission, before any audio, with
 *     that segment named; a max_tokens or a one-shot speed that cannot fit is COSY_ERR_INVALID_ARG. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cosyvoice.h"
#include "engine.h"
#include "testutil.h"
#include "text/normalize.h"
#include "tokenizer.h"

typedef struct fx {
  cosy_engine *e;
  cosy_voice *v;
} fx;

static const char *LONG =
    "The quick brown fox jumps over the lazy dog while seven wizards quietly hum a cheerful "
    "tune. The morning train was late again, so she walked along the river instead of waiting "
    "on the cold platform. Birds were singing in the tall trees, and a gentle wind carried the "
    "smell of fresh bread from the bakery on the corner. By the time she reached the old stone "
    "bridge, the sun had finally broken through the clouds. She stopped for a moment to watch "
    "the boats drifting slowly downstream, then hurried on towards the office.";

/* the golden voice (testutil) */
static cosy_voice *golden_voice(cosy_engine *e) {
  return tu_golden_voice(e, "You are a helpful assistant.<|endofprompt|>希望你以后能够做的比我还好呦。");
}

static int setup(void **state) {
  static fx f;
  memset(&f, 0, sizeof f);
  *state = &f;
  const char *model = tu_small_model();
  if (!model || !tu_shared_dir()) return 0;
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  c.model_path = model;
  c.device = COSY_DEVICE_CPU;
  c.max_active = 4;
  if (cosy_engine_create(&c, &f.e)) {
    fprintf(stderr, "engine: %s\n", cosy_last_error());
    return -1;
  }
  f.v = golden_voice(f.e);
  return f.v ? 0 : -1;
}

static int teardown(void **state) {
  fx *f = (fx *)*state;
  cosy_voice_release(f->v);
  cosy_engine_destroy(f->e);
  return 0;
}

#define NEED(f)                                                          \
  do {                                                                   \
    if (!(f)->e) {                                                       \
      print_message("SKIP: no small golden model / shared data\n");      \
      skip();                                                            \
    }                                                                    \
  } while (0)

static void params(cosy_synth_params *p, uint64_t seed) {
  cosy_synth_params_init(p, sizeof *p);
  p->seed = seed;
  p->max_tokens = 90; /* per segment: several chunks each, quick */
}

typedef struct pushbuf {
  float *pcm;
  int64_t n, cap;
  int chunks, lasts, bad_offset, last_not_at_end;
} pushbuf;

static int32_t on_chunk(void *user, const cosy_chunk *c) {
  pushbuf *b = (pushbuf *)user;
  if (c->offset != b->n) b->bad_offset = 1;
  if (b->lasts) b->last_not_at_end = 1; /* a chunk after the COSY_CHUNK_LAST one */
  if (b->n + c->n_samples > b->cap) {
    b->cap = (b->n + c->n_samples) * 2 + 1024;
    b->pcm = (float *)realloc(b->pcm, (size_t)b->cap * sizeof *b->pcm);
  }
  memcpy(b->pcm + b->n, c->pcm, (size_t)c->n_samples * sizeof *c->pcm);
  b->n += c->n_samples;
  b->chunks++;
  if (c->flags & COSY_CHUNK_LAST) b->lasts++;
  return 0;
}

static void test_segments_concatenate(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  char **seg = NULL;
  int n_seg = 0;
  assert_int_equal(cosy_text_split(f->e->tn, LONG, 0, &seg, &n_seg), COSY_OK);
  print_message("%d segments\n", n_seg);
  assert_true(n_seg > 1);
  /* the reference: each segment alone, blocking, its normalized text as is, seed 100 + k */
  float *ref = NULL;
  int64_t n_ref = 0;
  int32_t ref_tokens = 0;
  for (int k = 0; k < n_seg; k++) {
    cosy_synth_params p;
    params(&p, 100 + (uint64_t)k);
    p.flags = COSY_SYNTH_NO_TEXT_NORMALIZATION;
    cosy_request *r;
    pushbuf b = {0};
    assert_int_equal(cosy_request_submit(f->e, f->v, seg[k], &p, on_chunk, &b, &r), COSY_OK);
    assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
    cosy_request_stats rs;
    cosy_request_stats_init(&rs, sizeof rs);
    cosy_request_get_stats(r, &rs);
    ref_tokens += rs.n_speech_tokens;
    cosy_request_release(r);
    print_message("segment %d: \"%.40s...\" %lld samples\n", k, seg[k], (long long)b.n);
    assert_true(b.n > 0);
    ref = (float *)realloc(ref, (size_t)(n_ref + b.n) * sizeof *ref);
    memcpy(ref + n_ref, b.pcm, (size_t)b.n * sizeof *ref);
    n_ref += b.n;
    free(b.pcm);
  }
  cosy_text_segments_free(seg, n_seg);
  cosy_synth_params p;
  params(&p, 100);
  /* blocking */
  float *blk;
  int64_t n_blk;
  assert_int_equal(cosy_synthesize(f->e, f->v, LONG, &p, &blk, &n_blk), COSY_OK);
  assert_int_equal(n_blk, n_ref);
  assert_memory_equal(blk, ref, (size_t)n_ref * sizeof *ref);
  /* push: one continuous stream, contiguous offsets, one last chunk at the end */
  pushbuf b = {0};
  cosy_request *r;
  assert_int_equal(cosy_request_submit(f->e, f->v, LONG, &p, on_chunk, &b, &r), COSY_OK);
  assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
  cosy_request_stats rs;
  cosy_request_stats_init(&rs, sizeof rs);
  cosy_request_get_stats(r, &rs);
  cosy_request_release(r);
  assert_int_equal(b.n, n_ref);
  assert_memory_equal(b.pcm, ref, (size_t)n_ref * sizeof *ref);
  assert_false(b.bad_offset);
  assert_int_equal(b.lasts, 1);
  assert_false(b.last_not_at_end);
  assert_int_equal(rs.n_speech_tokens, ref_tokens);
  assert_int_equal(rs.n_samples, n_ref);
  print_message("long text: %lld samples in %d chunks == the %d segments one after the other\n",
                (long long)b.n, b.chunks, n_seg);
  free(b.pcm);
  /* pull */
  assert_int_equal(cosy_request_submit(f->e, f->v, LONG, &p, NULL, NULL, &r), COSY_OK);
  float *got = (float *)malloc((size_t)n_ref * sizeof *got);
  int64_t n_got = 0, k;
  cosy_status st;
  float buf[3000];
  while ((st = cosy_request_read(r, buf, 3000, &k, -1)) == COSY_OK && k > 0) {
    assert_true(n_got + k <= n_ref);
    memcpy(got + n_got, buf, (size_t)k * sizeof *buf);
    n_got += k;
  }
  assert_int_equal(st, COSY_OK);
  cosy_request_release(r);
  assert_int_equal(n_got, n_ref);
  assert_memory_equal(got, ref, (size_t)n_ref * sizeof *ref);
  free(got);
  free(blk);
  free(ref);
}

typedef struct cancel_at {
  int64_t n, at;
} cancel_at;

static int32_t cancel_cb(void *user, const cosy_chunk *c) {
  cancel_at *a = (cancel_at *)user;
  a->n += c->n_samples;
  return a->n >= a->at;
}

static void test_cancel_and_no_split(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  cosy_synth_params p;
  params(&p, 100);
  /* cancelled in a later segment (after more audio than the first segment's 90 tokens) */
  cancel_at a = {0, 90 * 960 + 1};
  cosy_request *r;
  assert_int_equal(cosy_request_submit(f->e, f->v, LONG, &p, cancel_cb, &a, &r), COSY_OK);
  assert_int_equal(cosy_request_wait(r, -1), COSY_ERR_CANCELLED);
  cosy_request_release(r);
  /* released while running: nothing leaks (ASan) */
  assert_int_equal(cosy_request_submit(f->e, f->v, LONG, &p, NULL, NULL, &r), COSY_OK);
  cosy_request_release(r);
  /* without normalization: one utterance */
  p.flags = COSY_SYNTH_NO_TEXT_NORMALIZATION;
  p.max_tokens = 100;
  float *pcm;
  int64_t n;
  assert_int_equal(cosy_synthesize(f->e, f->v, LONG, &p, &pcm, &n), COSY_OK);
  assert_true(n > 0 && n <= 100 * 960);
  cosy_free(pcm);
}

/* ---- what one utterance may take ---------------------------------------------------------- */

/* bench/text/en_long.txt: one line, eight sentences said twice (~2,000 characters) */
static char *read_paragraph(void) {
  FILE *fp = fopen(tu_tests_file("../bench/text/en_long.txt"), "rb");
  if (!fp) return NULL;
  char *buf = (char *)calloc(1, 1 << 16);
  size_t n = fread(buf, 1, (1 << 16) - 1, fp);
  fclose(fp);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
  return buf;
}

static int n_tokens(const fx *f, const char *s) {
  int32_t *ids = NULL, n = 0;
  if (cosy_tokenize(f->e->tok, s, strlen(s), &ids, &n)) return -1;
  free(ids);
  return n;
}

static void test_split_without_grammars(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  char *para = read_paragraph();
  assert_non_null(para);
  print_message("paragraph: %zu characters\n", strlen(para));
  assert_true(strlen(para) >= 1900);
  /* a normalizer without grammars (whatever the test model holds), English lengths in tokens */
  const void *bufs[COSY_TN_N_GRAMMARS] = {0};
  const size_t sizes[COSY_TN_N_GRAMMARS] = {0};
  cosy_text_norm *tn = NULL;
  assert_int_equal(cosy_text_norm_create_from_buffers(bufs, sizes, f->e->tok, &tn), COSY_OK);
  assert_false(cosy_text_norm_is_full(tn));
  char **seg = NULL;
  int n_seg = 0;
  assert_int_equal(cosy_text_split(tn, para, 0, &seg, &n_seg), COSY_OK);
  const int total = n_tokens(f, para);
  int longest_sentence = 0;
  for (const char *a = para; *a;) { /* sentences end at '.' here */
    const char *b = strchr(a, '.');
    b = b ? b + 1 : a + strlen(a);
    char *t = strndup(a, (size_t)(b - a));
    const int k = n_tokens(f, t);
    free(t);
    if (k > longest_sentence) longest_sentence = k;
    a = b;
  }
  print_message("%d tokens, longest sentence %d tokens: %d segments\n", total, longest_sentence,
                n_seg);
  /* split_paragraph: a segment closes once it is past 60 tokens and the next sentence would take
   * it past 80, and a last piece under 20 joins the one before: so no segment is longer than
   * 60 + the longest sentence + 19, and there are at least total / that many */
  const int bound = 60 + longest_sentence + 19;
  assert_true(n_seg > 1);
  assert_true(n_seg * bound >= total);
  size_t at = 0;
  for (int k = 0; k < n_seg; k++) {
    const int nt = n_tokens(f, seg[k]);
    print_message("segment %d: %d tokens\n", k, nt);
    assert_true(nt > 0 && nt <= bound);
    assert_true(seg[k][strlen(seg[k]) - 1] == '.');
    assert_memory_equal(para + at, seg[k], strlen(seg[k])); /* the pieces in order = the text */
    at += strlen(seg[k]);
  }
  assert_int_equal(at, strlen(para));
  cosy_text_segments_free(seg, n_seg);
  /* the engine's own front end cuts it too (the test model may or may not hold grammars) */
  assert_int_equal(cosy_text_split(f->e->tn, para, 0, &seg, &n_seg), COSY_OK);
  assert_true(n_seg > 1);
  cosy_text_segments_free(seg, n_seg);
  cosy_text_norm_free(tn);
  free(para);
}

static cosy_utt_caps gpu_caps(void) {
  cosy_utt_caps c = {COSY_GPU_UTT_FRAMES, COSY_GPU_VOC_FRAMES, COSY_GPU_UTT_POSITIONS, "the GPU flow"};
  return c;
}

static void test_utt_check_bounds(void **state) {
  (void)state;
  const cosy_utt_caps c = gpu_caps();
  cosy_utt u;
  memset(&u, 0, sizeof u);
  u.seg = 2;
  u.n_segs = 5;
  u.n_chars = 377;
  u.text_tokens = 79;
  u.prompt_tokens = 750;
  u.speed = 1.0f;
  u.token_mel_ratio = 2;
  u.lookahead = 3;
  const int input = 1000; /* LLM input positions */
  /* flow: 2 (P + g + 3) <= frames */
  const int g_flow = c.flow_frames / 2 - u.prompt_tokens - u.lookahead;
  u.max_gen = g_flow;
  u.llm_positions = input + u.max_gen;
  assert_int_equal(sched_utt_check(&c, &u), COSY_OK);
  assert_true(2 * (u.prompt_tokens + u.max_gen + u.lookahead) <= c.flow_frames);
  u.max_gen = g_flow + 1;
  u.llm_positions = input + u.max_gen;
  assert_int_equal(sched_utt_check(&c, &u), COSY_ERR_TEXT); /* the default ceiling: the text's */
  char want[64];
  snprintf(want, sizeof want, "at most %d", g_flow);
  print_message("%s\n", cosy_last_error());
  assert_non_null(strstr(cosy_last_error(), "segment 3 of 5 (377 characters, 79 text tokens)"));
  assert_non_null(strstr(cosy_last_error(), want));
  assert_non_null(strstr(cosy_last_error(), "max_tokens"));
  u.max_tokens = g_flow + 1; /* the caller's max_tokens: an argument */
  assert_int_equal(sched_utt_check(&c, &u), COSY_ERR_INVALID_ARG);
  assert_non_null(strstr(cosy_last_error(), "max_tokens"));
  assert_non_null(strstr(cosy_last_error(), want));
  /* a voice that leaves no room */
  u.max_tokens = 0;
  u.prompt_tokens = c.flow_frames / 2;
  u.max_gen = 1;
  u.llm_positions = input + 1;
  assert_int_equal(sched_utt_check(&c, &u), COSY_ERR_INVALID_ARG);
  assert_non_null(strstr(cosy_last_error(), "shorter voice"));
  /* LLM positions: input + g <= positions */
  u.prompt_tokens = 87;
  const int in_big = c.llm_positions - 100;
  u.max_gen = 100;
  u.llm_positions = in_big + u.max_gen;
  assert_int_equal(sched_utt_check(&c, &u), COSY_OK);
  u.max_gen = 101;
  u.llm_positions = in_big + u.max_gen;
  assert_int_equal(sched_utt_check(&c, &u), COSY_ERR_TEXT);
  assert_non_null(strstr(cosy_last_error(), "LLM"));
  assert_non_null(strstr(cosy_last_error(), "at most 100"));
  /* an input that fills the sequence by itself: the text's, even with max_tokens set */
  u.max_tokens = 10;
  u.max_gen = 10;
  u.llm_positions = c.llm_positions + u.max_gen;
  assert_int_equal(sched_utt_check(&c, &u), COSY_ERR_TEXT);
  assert_non_null(strstr(cosy_last_error(), "cut the text"));
  u.max_tokens = 0;
  /* one-shot at speed 0.5: the whole mel, (int)(2 g / 0.5) frames, in one vocoder call */
  u.one_shot = 1;
  u.speed = 0.5f;
  u.max_tokens = 0;
  int g_voc = 0;
  while ((int)(2.0 * (g_voc + 1) / 0.5) <= c.voc_frames) g_voc++;
  u.max_gen = g_voc;
  u.llm_positions = input + u.max_gen;
  assert_int_equal(sched_utt_check(&c, &u), COSY_OK);
  u.max_gen = g_voc + 1;
  u.llm_positions = input + u.max_gen;
  assert_int_equal(sched_utt_check(&c, &u), COSY_ERR_INVALID_ARG);
  snprintf(want, sizeof want, "at most %d", g_voc);
  assert_non_null(strstr(cosy_last_error(), "vocoder"));
  assert_non_null(strstr(cosy_last_error(), want));
  /* no limits (the CPU reference's flow and vocoder) */
  cosy_utt_caps none = {0, 0, 0, "the CPU reference"};
  u.max_gen = 1 << 20;
  u.llm_positions = input + u.max_gen;
  assert_int_equal(sched_utt_check(&none, &u), COSY_OK);
}

/* a voice of n prompt tokens (random ids), its mel the golden prompt's tiled to 2 n frames */
static cosy_voice *voice_of(cosy_engine *e, int n) {
  tu_flow_inputs in;
  if (tu_golden_flow_inputs(&in)) return NULL;
  int32_t *tok = (int32_t *)malloc(sizeof *tok * (size_t)n);
  float *mel = (float *)malloc(sizeof *mel * (size_t)n * 2 * 80);
  uint64_t x = 12345;
  for (int i = 0; i < n; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    tok[i] = (int32_t)((x >> 33) % 6561);
  }
  const int pf = 2 * in.n_prompt;
  for (int t = 0; t < 2 * n; t++) memcpy(mel + (size_t)t * 80, in.prompt_feat + (size_t)(t % pf) * 80, 80 * sizeof *mel);
  cosy_voice_features vf;
  cosy_voice_features_init(&vf, sizeof vf);
  vf.prompt_text = "You are a helpful assistant.<|endofprompt|>希望你以后能够做的比我还好呦。";
  vf.speech_tokens = tok;
  vf.n_speech_tokens = n;
  vf.mel = mel;
  vf.n_mel_frames = 2 * n;
  vf.speaker_embedding = in.spk;
  cosy_voice *v = NULL;
  if (cosy_voice_from_features(e, &vf, &v)) fprintf(stderr, "voice: %s\n", cosy_last_error());
  free(tok);
  free(mel);
  tu_flow_inputs_free(&in);
  return v;
}

/* submit with default parameters and cancel at once: the request's status tells whether
 * submission accepted it (COSY_ERR_CANCELLED) or refused a segment (its own status) */
static cosy_status accepted(fx *f, cosy_voice *v, const char *text, const cosy_synth_params *p) {
  cosy_request *r;
  pushbuf b = {0};
  cosy_status st = cosy_request_submit(f->e, v, text, p, on_chunk, &b, &r);
  if (st) return st;
  cosy_request_cancel(r);
  st = cosy_request_wait(r, -1);
  cosy_request_release(r);
  free(b.pcm);
  return st;
}

static void test_paragraph_fits_gpu_capacity(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  char *para = read_paragraph();
  assert_non_null(para);
  const cosy_utt_caps saved = f->e->caps;
  f->e->caps = gpu_caps(); /* the GPU engine's per-utterance capacity, on the CPU engine */
  cosy_voice *v30 = voice_of(f->e, 750); /* 30 s */
  cosy_voice *v3 = voice_of(f->e, 87);   /* 3.5 s (bench_w1's) */
  assert_non_null(v30);
  assert_non_null(v3);
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p); /* defaults: max_tokens 0, 20 per text token */
  p.seed = 7;
  assert_int_equal(accepted(f, v3, para, &p), COSY_ERR_CANCELLED);
  assert_int_equal(accepted(f, v30, para, &p), COSY_ERR_CANCELLED);
  /* the 3000 frames (60 s) the GPU flow held before: refused at submission, a segment named */
  f->e->caps.flow_frames = 3000;
  float *pcm = NULL;
  int64_t n = 0;
  assert_int_equal(cosy_synthesize(f->e, v30, para, &p, &pcm, &n), COSY_ERR_TEXT);
  print_message("%s\n", cosy_last_error());
  assert_non_null(strstr(cosy_last_error(), "segment 1 of "));
  assert_non_null(strstr(cosy_last_error(), "text tokens"));
  assert_non_null(strstr(cosy_last_error(), "max_tokens"));
  f->e->caps = saved;
  cosy_voice_release(v30);
  cosy_voice_release(v3);
  free(para);
}

static void test_later_segment_refused_up_front(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  const cosy_utt_caps saved = f->e->caps;
  f->e->caps = gpu_caps();
  /* four ordinary sentences (one segment of more than 60 tokens), then one sentence without a
   * stop long enough that its default ceiling cannot fit */
  char text[8192];
  snprintf(text, sizeof text, "%s", LONG);
  strcat(text, " And then");
  for (int i = 0; i < 60; i++) strcat(text, " the fox ran on");
  strcat(text, ".");
  char **seg = NULL;
  int n_seg = 0;
  assert_int_equal(cosy_text_split(f->e->tn, text, 0, &seg, &n_seg), COSY_OK);
  assert_true(n_seg >= 2);
  const int last = n_tokens(f, seg[n_seg - 1]);
  const int fits = f->e->caps.flow_frames / 2 - f->v->n_tokens - 3; /* speech tokens at most */
  print_message("%d segments, the last %d tokens (ceiling %d, room for %d)\n", n_seg, last,
                20 * last, fits);
  assert_true(20 * last > fits);
  for (int k = 0; k + 1 < n_seg; k++) assert_true(20 * n_tokens(f, seg[k]) <= fits);
  cosy_text_segments_free(seg, n_seg);
  cosy_synth_params p;
  cosy_synth_params_init(&p, sizeof p);
  p.seed = 7;
  cosy_request *r;
  pushbuf b = {0};
  /* refused at submission: no request, no audio of the segments before it */
  r = NULL;
  assert_int_equal(cosy_request_submit(f->e, f->v, text, &p, on_chunk, &b, &r), COSY_ERR_TEXT);
  assert_null(r);
  assert_int_equal(b.n, 0);
  free(b.pcm);
  float *pcm = NULL;
  int64_t n = 0;
  assert_int_equal(cosy_synthesize(f->e, f->v, text, &p, &pcm, &n), COSY_ERR_TEXT);
  print_message("%s\n", cosy_last_error());
  char want[64];
  snprintf(want, sizeof want, "segment %d of %d", n_seg, n_seg);
  assert_non_null(strstr(cosy_last_error(), want));
  /* the caller's max_tokens that cannot fit: an argument error naming it */
  p.max_tokens = fits + 1;
  assert_int_equal(cosy_synthesize(f->e, f->v, "Hello there.", &p, &pcm, &n), COSY_ERR_INVALID_ARG);
  assert_non_null(strstr(cosy_last_error(), "max_tokens"));
  /* one-shot at half speed: the whole mel in one vocoder call of COSY_GPU_VOC_FRAMES */
  p.max_tokens = COSY_GPU_VOC_FRAMES / 4 + 1;
  p.speed = 0.5f;
  assert_int_equal(cosy_synthesize(f->e, f->v, "Hello there.", &p, &pcm, &n), COSY_ERR_INVALID_ARG);
  assert_non_null(strstr(cosy_last_error(), "vocoder"));
  f->e->caps = saved;
}

/* Each segment of a long text is tokenized once: at submission, where plan_segments checks the
 * limits of the later segments and keeps their ids (r->seg_ids), not again when their jobs are
 * prepared; r->seg_tokenized counts the tts texts tokenized for the request. The audio those
 * kept ids give is test_segments_concatenate's (equal to each segment synthesized alone). Zero-
 * shot and cross-lingual (whose tts text has the system prefix), push and pull. */
static void test_segments_tokenized_once(void **state) {
  fx *f = (fx *)*state;
  NEED(f);
  for (int mode = 0; mode < 2; mode++) {
    for (int pull = 0; pull < 2; pull++) {
      cosy_synth_params p;
      params(&p, 7);
      p.max_tokens = 30;
      if (mode) p.mode = COSY_MODE_CROSS_LINGUAL;
      cosy_request *r;
      pushbuf b = {0};
      assert_int_equal(cosy_request_submit(f->e, f->v, LONG, &p, pull ? NULL : on_chunk,
                                           pull ? NULL : &b, &r),
                       COSY_OK);
      if (pull) {
        float buf[3000];
        int64_t k;
        cosy_status st;
        while ((st = cosy_request_read(r, buf, 3000, &k, -1)) == COSY_OK && k > 0) b.n += k;
        assert_int_equal(st, COSY_OK);
      } else {
        assert_int_equal(cosy_request_wait(r, -1), COSY_OK);
      }
      assert_true(b.n > 0);
      assert_true(r->n_segs > 1);
      assert_int_equal(__atomic_load_n(&r->seg_tokenized, __ATOMIC_RELAXED), r->n_segs);
      for (int k = 1; k < r->n_segs; k++) assert_null(r->seg_ids[k]); /* each one taken */
      print_message("mode %d %s: %d segments, %d tokenizations\n", mode, pull ? "pull" : "push",
                    r->n_segs, r->seg_tokenized);
      cosy_request_release(r);
      free(b.pcm);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_segments_concatenate),
      cmocka_unit_test(test_cancel_and_no_split),
      cmocka_unit_test(test_split_without_grammars),
      cmocka_unit_test(test_utt_check_bounds),
      cmocka_unit_test(test_paragraph_fits_gpu_capacity),
      cmocka_unit_test(test_later_segment_refused_up_front),
      cmocka_unit_test(test_segments_tokenized_once),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
