/* knobs.h - the environment knobs (COSY_*) the library reads: all of them, read in one place
 * (lib/knobs.c) into one struct that its owner passes to whoever needs a value.
 *
 * The engine reads them once, at cosy_engine_create (cosy_engine.knobs), so that a program or a
 * test may set one before creating an engine; the GPU layer gets them as an argument of
 * cosy_gpu_create (lib/gpu/gpu.h); the kernels get values as launcher or handle arguments and
 * read no environment. None is a user setting of the public API: each is for a test or a
 * measurement, and docs/knobs.md lists them (name, default, who it is for, what it does) and the
 * knobs that were removed once their question was answered. tools/check_knobs.sh (make test)
 * fails on a getenv in lib/ or kernels/ outside lib/knobs.c and on a knob docs/knobs.md lacks. */
#ifndef COSY_KNOBS_H
#define COSY_KNOBS_H

#define COSY_KNOB_PATH 1024

/* COSY_LLM_DECODE */
enum { COSY_KNOB_LLM_DEFAULT = 0, COSY_KNOB_LLM_TC = 1, COSY_KNOB_LLM_MIXED = 2 };

typedef struct cosy_knobs {
  /* tests */
  char cuda_fault[64];          /* COSY_CUDA_FAULT: "n[:launch|oom|lost]" (lib/gpu/gpu.c), "" off */
  char gpu_profile[32];         /* COSY_GPU_PROFILE: a device profile (lib/gpu/gpu.c), "" none */
  int gemm_san_init;            /* COSY_GEMM_SAN_INIT=1: GEMM outputs cleared first (kernels/gemm.cu) */
  int gemm_bucket;              /* COSY_GEMM_BUCKET=0..3: the GEMMs' algorithm rule
                                   (cosy_gemm_set_bucket); -1 the default (2) */
  int flow_recompute;           /* COSY_FLOW_CACHE=0: the GPU flow recomputes every chunk's prefix */
  int flow_pdl;                 /* COSY_FLOW_PDL=1: the GPU flow's elementwise kernels with
                                   programmatic dependent launch (where the device has it) */
  int flow_shallow;             /* COSY_FLOW_DEEP=0: the flow's v2 attention keeps its double
                                   buffer on small grids too (the kernel's rule: 4 buffers) */
  int llm_attn_early;           /* COSY_LLM_ATTN_EARLY (on; "0" off): the batch-invariant LLM's
                                   decode attention issues its independent loads before waiting
                                   for the q|k|v projection (COSY_K_DECODE_EARLY, kernels.h) */
  int llm_decode;               /* COSY_LLM_DECODE=tc|mixed (COSY_KNOB_LLM_*) */
  int vocoder_thread;           /* COSY_SCHED_VOCODER_THREAD=0|1|2 (2: only for capped batches of
                                   later chunks, lib/sched_t2w.c); -1: the backend's choice */
  char text_trace[COSY_KNOB_PATH]; /* COSY_TEXT_TRACE: the text-streaming input schedule */
  /* measurements */
  char sched_trace[COSY_KNOB_PATH];  /* COSY_SCHED_TRACE: one line per backend call */
  char flow_timing[COSY_KNOB_PATH];  /* COSY_FLOW_TIMING: one line per packed flow batch */
  char prefill_timing[COSY_KNOB_PATH]; /* COSY_LLM_PREFILL_TIMING: one line per packed prefill */
  int max_streams;              /* COSY_SCHED_MAX_STREAMS=N (> 0): admission bound; 0 none */
  int flow_frames;              /* COSY_SCHED_FLOW_FRAMES=N (> 0): new frames a flow batch holds
                                   at most, never more than the scheduler's own cap (tests:
                                   batches cut short); 0 the default */
  int sched_yield;              /* COSY_SCHED_YIELD=1: the LLM yields to playback (lib/sched_llm.c
                                   yield_to_playback), the default until 2026-12-01; 0 off */
  int first_pause;              /* COSY_SCHED_FIRST_PAUSE=N (>= 0): the LLM's first-chunk pause only
                                   while 1..N requests decode (0: never); -1 default */
  int test_flow_pages;          /* COSY_TEST_FLOW_PAGES=N (> 0): the CPU backend counts flow cache
                                   pages as the GPU's pool would, N in all (tests of the page
                                   gate); 0: no pool */
  int flow_gate;                /* COSY_SCHED_FLOW_GATE=0|1: the flow's page gate (lib/sched_t2w.c:
                                   first chunks wait while the cache pages would not hold the
                                   blocks of the requests under way); -1 the default (on) */
  int wave;                     /* COSY_SCHED_WAVE=N (>= 0): the scheduler's wave rules apply while
                                   at least N requests await their first audio (sched_wave;
                                   0: always); -1 the default (SCHED_WAVE_MIN) */
  int flow_attn_split;          /* COSY_FLOW_ATTN_SPLIT: key parts per attention query tile of
                                   the packed flow (2..8; "1" means 4); -1 ("auto"): chosen per
                                   segment (lib/gpu/flow.h GPU_FLOW_ATTN_AUTO); 0 off */
  int flow_nopad;               /* COSY_FLOW_PAD=0: packed flow batches at their exact sizes */
  int llm_xfrag;                /* COSY_LLM_XFRAG=0|1|2: the batch-invariant decode kernel
                                   (gemv_tc) computes x's fragments once per block
                                   (cosy_llm_gemv_args xfrag; 2: without staging x; 0: per
                                   warp); -1 (unset, the default): auto, lib/gpu/llm.c */
  int flow_attn_v2;             /* COSY_FLOW_ATTN_V2=64|128|auto|0: the packed flow's attention by
                                   cosy_k_attn_dit_paged_v2 with query tiles of that size (64,
                                   the default; auto: 1, chosen per batch, lib/gpu/flow.h); 0 the
                                   one-block cosy_k_attn_dit_paged */
  int llm_gemvb;                /* COSY_LLM_GEMVB (on; "0" off): the decode GEMV above 8 rows with
                                   the weights as mma's B operand (cosy_llm_gemv_args.gemvb) */
  int hift_staged;              /* COSY_HIFT_STAGED (on; "0" off): the fp16 vocoder's convs
                                   from an input staged in fp16 beforehand (kernels/conv.cu
                                   conv3_kernel; gpu_hift_set_staged) */
} cosy_knobs;

/* Reads every knob from the environment now (unset or malformed: the default). */
void cosy_knobs_read(cosy_knobs *k);

#endif
