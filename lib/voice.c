/* voice.c - voices: creation from features, reference counting, voice files.
 *
 * A voice file is a small GGUF v3 file (docs/model-format.md, "Voice files"):
 *   key  general.architecture           string  "cosyvoice3-voice"
 *   key  cosyvoice.voice.format_version u32     1
 *   key  cosyvoice.voice.prompt_text    string  transcript of the prompt audio (UTF-8, may be "")
 *   tensor voice.speech_tokens     i32 [P]       prompt speech tokens (absent when P = 0)
 *   tensor voice.mel               f32 [2P][80]  prompt mel, frame-major (absent when P = 0)
 *   tensor voice.speaker_embedding f32 [192]
 * (shapes in PyTorch order; GGUF's ne[] lists them innermost first). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "gguf.h"
#include "tokenizer.h"
#include "util.h"

#define VOICE_FORMAT_VERSION 1
#define MEL 80
#define SPK 192

void voice_ref(cosy_voice *v) { __atomic_add_fetch(&v->refs, 1, __ATOMIC_SEQ_CST); }

void voice_unref(cosy_voice *v) {
  if (__atomic_sub_fetch(&v->refs, 1, __ATOMIC_SEQ_CST) != 0) return;
  free(v->prompt_text);
  free(v->speech_tokens);
  free(v->mel);
  free(v);
}

cosy_status voice_check(cosy_engine *e, const char *prompt_text, const int32_t *tokens,
                        int32_t n_tokens, const float *mel, int32_t n_mel_frames, const float *spk,
                        const char *file) {
  const cosy_status bad = file ? COSY_ERR_MODEL_FORMAT : COSY_ERR_INVALID_ARG;
  const cosy_status bad_text = file ? COSY_ERR_MODEL_FORMAT : COSY_ERR_TEXT;
  const char *in = file ? file : "voice", *sep = ": ";
  for (int32_t i = 0; i < n_tokens; i++)
    if (tokens[i] < 0 || tokens[i] >= 6561)
      return cosy_err(bad, "%s%sspeech token %d at index %d is outside [0, 6561)", in, sep,
                      tokens[i], i);
  /* the official front end aligns tokens and mel: token_len = min(frames / 2, n_tokens) */
  int32_t n = n_tokens;
  if (n_mel_frames / 2 < n) n = n_mel_frames / 2;
  for (int64_t i = 0; i < (int64_t)2 * n * MEL; i++)
    if (!isfinite(mel[i]))
      return cosy_err(bad, "%s%sprompt mel value %lld (frame %lld, bin %lld) is not finite", in,
                      sep, (long long)i, (long long)(i / MEL), (long long)(i % MEL));
  double norm = 0;
  for (int i = 0; i < SPK; i++) {
    if (!isfinite(spk[i]))
      return cosy_err(bad, "%s%sspeaker embedding value %d is not finite", in, sep, i);
    norm += (double)spk[i] * spk[i];
  }
  if (norm == 0) return cosy_err(bad, "%s%sspeaker embedding is all zeros", in, sep);
  const char *pt = prompt_text ? prompt_text : "";
  const size_t len = strlen(pt);
  if (len > COSY_TEXT_MAX_BYTES)
    return cosy_err(bad_text, "%s%sthe prompt text%s is %zu bytes, more than COSY_TEXT_MAX_BYTES (%d)",
                    in, sep, file ? "" : " (prompt_text, or the transcript)", len,
                    COSY_TEXT_MAX_BYTES);
  if (!e || !e->tok) return COSY_OK;
  /* the prompt as the LLM gets it (lib/sched_jobs.c sched_job_prepare) */
  const int eop = strstr(pt, COSY_EOP) != NULL;
  const size_t pre = eop ? 0 : strlen(COSY_SYSTEM_PREFIX COSY_EOP);
  char *full = (char *)cosy_malloc(pre + len + 1);
  if (!full) return COSY_ERR_NO_MEMORY;
  memcpy(full, COSY_SYSTEM_PREFIX COSY_EOP, pre);
  memcpy(full + pre, pt, len + 1);
  int32_t *ids = NULL, nid = 0;
  cosy_status st = cosy_tokenize(e->tok, full, pre + len, &ids, &nid);
  free(full);
  free(ids);
  /* a text the tokenizer refuses is the file's fault; running out of memory is not */
  if (st && file && st != COSY_ERR_NO_MEMORY)
    return cosy_err(COSY_ERR_MODEL_FORMAT, "%s: prompt text: %s", file, cosy_last_error());
  if (st) return st;
  if (nid > COSY_LLM_MAX_TEXT_TOKENS)
    return cosy_err(bad_text,
                    "%s%sthe prompt text%s has %d text tokens (with the system prefix), more "
                    "than COSY_LLM_MAX_TEXT_TOKENS (%d)",
                    in, sep, file ? "" : " (prompt_text, or the transcript)", nid,
                    COSY_LLM_MAX_TEXT_TOKENS);
  return COSY_OK;
}

cosy_status voice_create(cosy_engine *e, const char *prompt_text, const int32_t *tokens,
                         int32_t n_tokens, const float *mel, int32_t n_mel_frames, const float *spk,
                         cosy_voice **out) {
  *out = NULL;
  cosy_status st = voice_check(e, prompt_text, tokens, n_tokens, mel, n_mel_frames, spk, NULL);
  if (st) return st;
  int32_t n = n_tokens;
  if (n_mel_frames / 2 < n) n = n_mel_frames / 2;
  cosy_voice *v = (cosy_voice *)cosy_calloc(1, sizeof *v);
  if (!v) return COSY_ERR_NO_MEMORY;
  v->refs = 1;
  v->engine = e;
  v->n_tokens = n;
  v->prompt_text = cosy_strdup(prompt_text ? prompt_text : "");
  v->speech_tokens = (int32_t *)cosy_malloc((size_t)(n ? n : 1) * sizeof *v->speech_tokens);
  v->mel = (float *)cosy_malloc((size_t)(n ? 2 * n * MEL : 1) * sizeof *v->mel);
  if (!v->prompt_text || !v->speech_tokens || !v->mel) {
    voice_unref(v);
    return COSY_ERR_NO_MEMORY;
  }
  if (n) {
    memcpy(v->speech_tokens, tokens, (size_t)n * sizeof *tokens);
    memcpy(v->mel, mel, (size_t)2 * n * MEL * sizeof *mel);
  }
  memcpy(v->spk, spk, sizeof v->spk);
  *out = v;
  return COSY_OK;
}

/* ---- files --------------------------------------------------------------------------------- */

static const gguf_tensor *voice_tensor(const gguf_file *f, const char *name, uint32_t type,
                                       int n_dims, int64_t d0, int64_t d1, cosy_status *st) {
  const gguf_tensor *t = gguf_find_tensor(f, name);
  if (!t) {
    *st = cosy_err(COSY_ERR_MODEL_FORMAT, "voice file: tensor %s is missing", name);
    return NULL;
  }
  /* torch order [d0][d1] -> ne = {d1, d0} */
  int ok = t->type == type && (int)t->n_dims == n_dims;
  if (ok && n_dims == 1) ok = t->ne[0] == d0;
  if (ok && n_dims == 2) ok = t->ne[0] == d1 && t->ne[1] == d0;
  if (!ok) {
    *st = cosy_err(COSY_ERR_MODEL_FORMAT, "voice file: tensor %s has the wrong shape or type", name);
    return NULL;
  }
  return t;
}

cosy_status voice_load_file(cosy_engine *e, const char *path, cosy_voice **out) {
  gguf_file *f;
  cosy_status st = gguf_open(path, "voice", &f);
  if (st) return st;
  gguf_str arch, text;
  uint32_t ver;
  if ((st = gguf_get_str(f, "general.architecture", &arch))) goto done;
  if (arch.n != 16 || memcmp(arch.p, "cosyvoice3-voice", 16) != 0) {
    st = cosy_err(COSY_ERR_MODEL_FORMAT, "%s is not a voice file (architecture \"%.*s\")", path,
                  (int)(arch.n > 40 ? 40 : arch.n), arch.p);
    goto done;
  }
  if ((st = gguf_get_u32(f, "cosyvoice.voice.format_version", &ver))) goto done;
  if (ver != VOICE_FORMAT_VERSION) {
    st = cosy_err(COSY_ERR_MODEL_VERSION, "%s: voice format version %u is not supported (need %d)",
                  path, ver, VOICE_FORMAT_VERSION);
    goto done;
  }
  if ((st = gguf_get_str(f, "cosyvoice.voice.prompt_text", &text))) goto done;
  /* the prompt text's limits, each with its own message (the length first: nothing beyond it
   * is read) */
  if (text.n > COSY_TEXT_MAX_BYTES) {
    st = cosy_err(COSY_ERR_MODEL_FORMAT,
                  "%s: the prompt text is %llu bytes, more than COSY_TEXT_MAX_BYTES (%d)", path,
                  (unsigned long long)text.n, COSY_TEXT_MAX_BYTES);
    goto done;
  }
  const char *nul = (const char *)memchr(text.p, 0, (size_t)text.n);
  if (nul) {
    st = cosy_err(COSY_ERR_MODEL_FORMAT, "%s: the prompt text holds a NUL byte (at byte %lld)",
                  path, (long long)(nul - text.p));
    goto done;
  }
  long bad_at = cosy_utf8_invalid_at(text.p, (size_t)text.n);
  if (bad_at >= 0) {
    st = cosy_err(COSY_ERR_MODEL_FORMAT, "%s: the prompt text is not valid UTF-8 (byte %ld)", path,
                  bad_at);
    goto done;
  }
  const gguf_tensor *tok = gguf_find_tensor(f, "voice.speech_tokens");
  int64_t P = tok ? tok->ne[0] : 0;
  if (P > 3000) {
    st = cosy_err(COSY_ERR_MODEL_FORMAT, "%s: %lld prompt tokens (max 3000)", path, (long long)P);
    goto done;
  }
  const gguf_tensor *mel = NULL, *spk;
  if (P > 0) {
    if (!(tok = voice_tensor(f, "voice.speech_tokens", GGML_I32, 1, P, 0, &st))) goto done;
    if (!(mel = voice_tensor(f, "voice.mel", GGML_F32, 2, 2 * P, MEL, &st))) goto done;
  }
  if (!(spk = voice_tensor(f, "voice.speaker_embedding", GGML_F32, 1, SPK, 0, &st))) goto done;
  /* the tensors are copied out of the file before use: a file may place them at any offset
   * (its general.alignment can be 1), and int32/float reads need natural alignment */
  char *pt = (char *)cosy_malloc((size_t)text.n + 1);
  int32_t *tk = (int32_t *)cosy_malloc(sizeof(int32_t) * (size_t)(P ? P : 1));
  float *ml = (float *)cosy_malloc(sizeof(float) * (size_t)(P ? 2 * P * MEL : 1));
  float *sp = (float *)cosy_malloc(sizeof(float) * SPK);
  if (!pt || !tk || !ml || !sp) {
    st = COSY_ERR_NO_MEMORY;
  } else {
    memcpy(pt, text.p, (size_t)text.n);
    pt[text.n] = '\0';
    if (P) {
      memcpy(tk, tok->data, sizeof(int32_t) * (size_t)P);
      memcpy(ml, mel->data, sizeof(float) * (size_t)(2 * P * MEL));
    }
    memcpy(sp, spk->data, sizeof(float) * SPK);
    /* bad values in a file are a corrupt file (COSY_ERR_MODEL_FORMAT), not a bad argument */
    st = voice_check(e, pt, P ? tk : NULL, (int32_t)P, P ? ml : NULL, (int32_t)(2 * P), sp, path);
    if (!st)
      st = voice_create(e, pt, P ? tk : NULL, (int32_t)P, P ? ml : NULL, (int32_t)(2 * P), sp,
                        out);
  }
  free(pt);
  free(tk);
  free(ml);
  free(sp);
done:
  gguf_close(f);
  return st;
}

/* -- writer -- */
static int put(FILE *fp, const void *p, size_t n) { return fwrite(p, 1, n, fp) == n ? 0 : -1; }
static int put_u32(FILE *fp, uint32_t v) { return put(fp, &v, 4); }
static int put_u64(FILE *fp, uint64_t v) { return put(fp, &v, 8); }
static int put_str(FILE *fp, const char *s, size_t n) { return put_u64(fp, n) || put(fp, s, n); }
static int put_kv_str(FILE *fp, const char *k, const char *v) {
  return put_str(fp, k, strlen(k)) || put_u32(fp, GGUF_T_STRING) || put_str(fp, v, strlen(v));
}
static int put_tinfo(FILE *fp, const char *name, int nd, int64_t d0, int64_t d1, uint32_t type,
                     uint64_t off) {
  if (put_str(fp, name, strlen(name)) || put_u32(fp, (uint32_t)nd)) return -1;
  if (nd == 1) return put_u64(fp, (uint64_t)d0) || put_u32(fp, type) || put_u64(fp, off);
  return put_u64(fp, (uint64_t)d1) || put_u64(fp, (uint64_t)d0) || put_u32(fp, type) ||
         put_u64(fp, off);
}
static int pad_to(FILE *fp, long align) {
  long pos = ftell(fp);
  if (pos < 0) return -1;
  static const char z[32] = {0};
  long n = (align - pos % align) % align;
  return put(fp, z, (size_t)n);
}

cosy_status voice_save_file(const cosy_voice *v, const char *path) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
    return cosy_err(COSY_ERR_INVALID_ARG, "voice path too long");
  FILE *fp = fopen(tmp, "wb");
  if (!fp) return cosy_err(COSY_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
  int64_t P = v->n_tokens;
  uint64_t nt = P ? 3 : 1;
  size_t tok_b = (size_t)P * 4, mel_b = (size_t)P * 2 * MEL * 4, spk_b = SPK * 4;
  size_t tok_pad = (tok_b + 31) / 32 * 32, mel_pad = (mel_b + 31) / 32 * 32;
  int bad = put(fp, "GGUF", 4) || put_u32(fp, 3) || put_u64(fp, nt) || put_u64(fp, 4) ||
            put_str(fp, "general.alignment", 17) || put_u32(fp, GGUF_T_UINT32) || put_u32(fp, 32) ||
            put_kv_str(fp, "general.architecture", "cosyvoice3-voice") ||
            put_str(fp, "cosyvoice.voice.format_version", 30) || put_u32(fp, GGUF_T_UINT32) ||
            put_u32(fp, VOICE_FORMAT_VERSION) ||
            put_kv_str(fp, "cosyvoice.voice.prompt_text", v->prompt_text);
  uint64_t off = 0;
  if (!bad && P) {
    bad = put_tinfo(fp, "voice.speech_tokens", 1, P, 0, GGML_I32, off) ||
          put_tinfo(fp, "voice.mel", 2, 2 * P, MEL, GGML_F32, off + tok_pad);
    off += tok_pad + mel_pad;
  }
  if (!bad) bad = put_tinfo(fp, "voice.speaker_embedding", 1, SPK, 0, GGML_F32, off);
  if (!bad) bad = pad_to(fp, 32);
  if (!bad && P) {
    bad = put(fp, v->speech_tokens, tok_b) || pad_to(fp, 32) || put(fp, v->mel, mel_b) ||
          pad_to(fp, 32);
  }
  if (!bad) bad = put(fp, v->spk, spk_b) || pad_to(fp, 32);
  if (fclose(fp) != 0) bad = 1;
  if (bad) {
    remove(tmp);
    return cosy_err(COSY_ERR_IO, "error writing voice file %s", path);
  }
  if (rename(tmp, path) != 0) {
    remove(tmp);
    return cosy_err(COSY_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
  }
  return COSY_OK;
}
