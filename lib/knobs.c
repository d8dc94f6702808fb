/* knobs.c - the one place the library reads its environment knobs (lib/knobs.h, docs/knobs.md). */
#define _POSIX_C_SOURCE 200809L
#include "knobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the value of `name`, "" when unset */
static const char *env(const char *name) {
  const char *v = getenv(name);
  return v ? v : "";
}

static void copy(char *dst, size_t cap, const char *name) { snprintf(dst, cap, "%s", env(name)); }

void cosy_knobs_read(cosy_knobs *k) {
  memset(k, 0, sizeof *k);
  copy(k->cuda_fault, sizeof k->cuda_fault, "COSY_CUDA_FAULT");
  copy(k->gpu_profile, sizeof k->gpu_profile, "COSY_GPU_PROFILE");
  k->gemm_san_init = env("COSY_GEMM_SAN_INIT")[0] == '1';
  k->flow_recompute = !strcmp(env("COSY_FLOW_CACHE"), "0");
  const char *gb = env("COSY_GEMM_BUCKET");
  k->gemm_bucket = gb[0] >= '0' && gb[0] <= '3' && !gb[1] ? gb[0] - '0' : -1;
  k->flow_pdl = !strcmp(env("COSY_FLOW_PDL"), "1");
  k->flow_shallow = !strcmp(env("COSY_FLOW_DEEP"), "0");
  k->llm_attn_early = strcmp(env("COSY_LLM_ATTN_EARLY"), "0") != 0;
  const char *dm = env("COSY_LLM_DECODE");
  k->llm_decode = !strcmp(dm, "tc")      ? COSY_KNOB_LLM_TC
                  : !strcmp(dm, "mixed") ? COSY_KNOB_LLM_MIXED
                                         : COSY_KNOB_LLM_DEFAULT;
  const char *vt = env("COSY_SCHED_VOCODER_THREAD");
  k->vocoder_thread = (vt[0] == '0' || vt[0] == '1' || vt[0] == '2') && !vt[1] ? vt[0] - '0' : -1;
  copy(k->text_trace, sizeof k->text_trace, "COSY_TEXT_TRACE");
  copy(k->sched_trace, sizeof k->sched_trace, "COSY_SCHED_TRACE");
  copy(k->flow_timing, sizeof k->flow_timing, "COSY_FLOW_TIMING");
  copy(k->prefill_timing, sizeof k->prefill_timing, "COSY_LLM_PREFILL_TIMING");
  const int ms = atoi(env("COSY_SCHED_MAX_STREAMS"));
  k->max_streams = ms > 0 ? ms : 0;
  const int ff = atoi(env("COSY_SCHED_FLOW_FRAMES"));
  k->flow_frames = ff > 0 ? ff : 0; /* lib/sched_t2w.c keeps the lower of it and its own cap */
  k->sched_yield = !strcmp(env("COSY_SCHED_YIELD"), "1");
  const char *fp = env("COSY_SCHED_FIRST_PAUSE");
  k->first_pause = fp[0] >= '0' && fp[0] <= '9' ? atoi(fp) : -1;
  const int tp = atoi(env("COSY_TEST_FLOW_PAGES"));
  k->test_flow_pages = tp > 0 ? tp : 0;
  const char *fg = env("COSY_SCHED_FLOW_GATE");
  k->flow_gate = (fg[0] == '0' || fg[0] == '1') && !fg[1] ? fg[0] - '0' : -1;
  const char *wv = env("COSY_SCHED_WAVE");
  k->wave = wv[0] >= '0' && wv[0] <= '9' ? atoi(wv) : -1;
  const char *as = env("COSY_FLOW_ATTN_SPLIT");
  const int asn = as[0] >= '1' && as[0] <= '8' && !as[1] ? as[0] - '0' : 0;
  k->flow_attn_split = !strcmp(as, "auto") ? -1 : asn == 1 ? 4 : asn;
  k->flow_nopad = !strcmp(env("COSY_FLOW_PAD"), "0");
  const char *xf = env("COSY_LLM_XFRAG");
  k->llm_xfrag = !strcmp(xf, "0") ? 0 : !strcmp(xf, "1") ? 1 : !strcmp(xf, "2") ? 2 : -1;
  k->llm_gemvb = strcmp(env("COSY_LLM_GEMVB"), "0") != 0;
  k->hift_staged = strcmp(env("COSY_HIFT_STAGED"), "0") != 0;
  const char *av = env("COSY_FLOW_ATTN_V2");
  k->flow_attn_v2 = !strcmp(av, "128")   ? 128
                    : !strcmp(av, "auto") ? 1 /* GPU_FLOW_ATTN_V2_AUTO (lib/gpu/flow.h) */
                    : !strcmp(av, "0") || !strcmp(av, "off") ? 0 /* the one-block kernel */
                                          : 64; /* 64, the default */
}
