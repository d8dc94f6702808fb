/* bench_kernels.c - times the CUDA kernels (kernels/kernels.h and the ops' own headers) at the
 * model's real sizes (the HiFT and front-end kernels are timed only inside whole runs:
 * bench_w1.c, bench_voice.c). Part of the kernel harness (tests/kharness.h): no main of its own,
 * it runs as `build/tests/test_kernels --bench [NAME]` (NAME: a family or launcher of the registry,
 * tests/kregistry.c); each family's bench_<name> adds its rows of one scenario (a group below).
 *
 * Method: measure the two ceilings, then each kernel against them:
 *   1. Ceilings, measured here: device-to-device copy bandwidth (cudaMemcpyAsync of 512 MiB,
 *      counting bytes read + written) and a large bf16 GEMM (8192^3 through cosy_k_gemm, i.e.
 *      cuBLASLt, random data); then the host time a GEMM call pays when its row count is new
 *      (plan building: a heuristic query per M, or per power-of-two bucket, the default).
 *   2. Every kernel at the sizes the model runs: LLM decode at batch 1, 16 and 64 (hidden 896,
 *      14/2 heads of 64, MLP 4864, speech vocab 6761, paged KV with 16-token pages at context 200
 *      and 1000), an LLM prefill of 300 tokens (and the fp32 paged prefill attention of packed
 *      prompts: 1 x 300, 8 x 120, 64 x 126), and the DiT at N = 116 (a single request's first
 *      chunk with its 60 context frames), 400 and 1000 frames with the CFG batch of 2 (dim 1024,
 *      16 heads, ff 2048, block-causal chunks of 50).
 *   Timing: after warm-up, a batch of calls sized to ~1 ms is timed with CUDA events two ways:
 *   launched back-to-back on a stream ("us strm", includes launch gaps) and captured once into a
 *   CUDA graph and replayed ("us graph", how the engine runs its steps); the rates use the faster
 *   of the two (a graph's memcpy node runs slower than cudaMemcpyAsync, seen on an H200).
 *   Each is the median over 15 batches, per call. Inputs are random (never
 *   zeros). Where one call's inputs would fit in L2, the call cycles through enough copies of the
 *   large inputs (weights, KV caches) to exceed 3x the L2 size, so the numbers are DRAM numbers
 *   (BENCH_L2=1: no copies, the inputs stay in L2 between calls: what a call costs when its
 *   weights were brought into L2 beforehand).
 *   Bytes counted = each input read once + each output written once; FLOPs = 2 x MACs.
 *   Reported: us per call, GB/s and % of the copy ceiling (%copy) and of the data sheet's HBM
 *   bandwidth (%hbm: 3.35 TB/s for an H100 SXM), TFLOP/s and % of the GEMM ceiling (%gemm) and
 *   of the data sheet's dense bf16 tensor rate (%bf16: 989 TFLOP/s); BENCH_PEAK_GBS and
 *   BENCH_PEAK_TFLOPS set the data-sheet numbers of another GPU.
 *   The decode attention also runs behind the q|k|v projection that writes its q and newest
 *   K/V rows, as the decode step runs the pair (rows "qkv+attn pdl" and "qkv+attn early": the
 *   pair's time, the attention a programmatic dependent of the projection, without and with
 *   cosy_k_paged_decode's early loads).
 *   Groups: the LLM decode step at batch 1, 16, 64 and 224 (incl. the step kernels of paged_kv.h
 *   and bf16_split.h), a prefill of 300 tokens, the DiT at 116, 400 and 1000 frames (incl.
 *   dit_elementwise.h, conv_pos.h, euler.h, flow_pack.h and the paged DiT attention of a
 *   streaming call), and the element-wise activations ("act").
 * Output: progress lines while running, then the table last. Exit status 0 unless a CUDA call
 * fails. Without a device (or built without CUDA) it prints SKIP and exits 0. Row order: the
 * scenarios in turn and, in each, the families in the registry's order.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef COSY_WITH_CUDA

typedef int cosy_bench_kernels_without_cuda; /* tests/test_kernels.c says SKIP */

#else

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes" /* cublasLt.h: cublasLtLoggerForceDisable() */
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <cuda_runtime_api.h>

#include "bf16_split.h"
#include "conv_pos.h"
#include "dit_elementwise.h"
#include "euler.h"
#include "flow_pack.h"
#include "gemv.h"
#include "kernels.h"
#include "kernels_hift.h"
#include "kharness.h"
#include "paged_kv.h"

#define F32 COSY_KDT_F32
#define BF16 COSY_KDT_BF16

/* the shared helpers of tests/kharness.c under the names used here; a CUDA error exits 1 */
#define CK(call) KH_CK(call)
#define rnd kh_rnd
#define f2bf kh_f2bf
#define dts kh_dts
#define dalloc kh_dmalloc
#define dints kh_dup_i32
#define g_dev_bytes kh_dev_bytes
static uint32_t rng32(void) { return (uint32_t)(kh_rng_next() >> 32); }

/* bt[0..n) = a random permutation of the page ids 0..n-1 (scattered pages) */
static void scatter_pages(int32_t *bt, int n) {
  for (int i = 0; i < n; ++i) bt[i] = i;
  for (int i = n - 1; i > 0; --i) {
    const int j = (int)(rng32() % (uint32_t)(i + 1));
    const int32_t t = bt[i];
    bt[i] = bt[j];
    bt[j] = t;
  }
}

/* the rows of one family: the scenario adders below (add_dit, add_flow_ops) take the family */
#define FAM(f) (!strcmp(fam, f))

/* n random elements of dt in [lo, hi). Values come from a pool of 2^22 uniform draws read from
 * a random start (fast for the hundreds of MB of rotated weights; data need not be independent
 * across copies, only at different addresses). */
#define POOL ((size_t)1 << 22)
static float *g_pool;
static void *drand(size_t n, cosy_kdtype dt, float lo, float hi) {
  if (!g_pool) {
    g_pool = malloc(POOL * sizeof *g_pool);
    if (!g_pool) exit(1);
    for (size_t i = 0; i < POOL; ++i) g_pool[i] = rnd(0.f, 1.f);
  }
  void *d = dalloc(n * dts(dt));
  const size_t chunk = (size_t)1 << 22;
  void *h = malloc(chunk * 4);
  if (!h) exit(1);
  size_t start = rng32() % POOL;
  for (size_t off = 0; off < n; off += chunk) {
    const size_t m = n - off < chunk ? n - off : chunk;
    for (size_t i = 0; i < m; ++i) {
      const float v = lo + (hi - lo) * g_pool[(start + off + i) % POOL];
      if (dt == BF16)
        ((uint16_t *)h)[i] = f2bf(v);
      else
        ((float *)h)[i] = v;
    }
    CK(cudaMemcpy((char *)d + off * dts(dt), h, m * dts(dt), cudaMemcpyHostToDevice));
  }
  free(h);
  return d;
}

/* ---------------------------------------------------------------------------------------------
 * one benchmarked call: run(op, set) launches it on op->stream using rotation set `set` */

#define MAXP 16
typedef struct bench_op bench_op;
struct bench_op {
  const char *group, *name;
  char size[64];
  double bytes, flops; /* per call */
  int nrot;            /* rotation sets of the rotated pointers */
  void *p[MAXP];       /* device pointers */
  size_t rot[MAXP];    /* byte stride between rotation sets (0: shared) */
  int i[12];
  float f[4];
  cudaError_t (*run)(bench_op *op, int set);
  double us;        /* the faster of the two below; the rates are computed from it */
  double us_stream; /* back-to-back launches on a stream */
  double us_graph;  /* the same calls replayed from a CUDA graph; -1: not capturable */
};

static cudaStream_t g_stream;
static cosy_kdev g_dev; /* the device as described to the launchers (COSY_GPU_PROFILE applies) */
static cosy_gemm *g_gemm;
static size_t g_l2;
static double g_copy_gbs, g_gemm_tfs;
/* the data-sheet ceilings (H100 SXM: 3.35 TB/s HBM3, 989 TFLOP/s dense bf16 tensor); other GPUs:
 * BENCH_PEAK_GBS / BENCH_PEAK_TFLOPS */
static double g_peak_gbs = 3350.0, g_peak_tfs = 989.0;

static void *P(const bench_op *op, int k, int set) {
  return (char *)op->p[k] + (size_t)(set % op->nrot) * op->rot[k];
}
/* rotation sets so that `bytes` of rotated data per set span > 3x L2 (at most 256 sets) */
static int rot_sets(size_t bytes) {
  if (bytes == 0 || getenv("BENCH_L2")) return 1; /* BENCH_L2=1: one set, L2-resident inputs */
  size_t n = (3 * g_l2) / bytes + 1;
  if (n > 256) n = 256;
  return (int)n;
}
/* allocate nrot random sets of n elements; returns base, sets the stride */
static void *drand_rot(int nrot, size_t n, cosy_kdtype dt, float lo, float hi, size_t *stride) {
  *stride = (n * dts(dt) + 255) / 256 * 256;
  const size_t per = *stride / dts(dt);
  return drand(per * (size_t)nrot, dt, lo, hi);
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* median over trials of the time per call, in microseconds: `per` back-to-back launches on the
 * stream between two events (includes launch gaps) */
static double time_stream(bench_op *op, int per, int *set) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  enum { TRIALS = 15 };
  double t[TRIALS];
  for (int tr = 0; tr < TRIALS; ++tr) {
    float ms = 0;
    CK(cudaEventRecord(e0, g_stream));
    for (int k = 0; k < per; ++k) CK(op->run(op, (*set)++));
    CK(cudaEventRecord(e1, g_stream));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t[tr] = 1000.0 * ms / per;
  }
  qsort(t, TRIALS, sizeof t[0], cmp_double);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return t[TRIALS / 2];
}

/* the same `per` calls captured once in a CUDA graph and replayed (how the engine runs decode
 * steps); -1 when capture is refused */
static double time_graph(bench_op *op, int per, int *set) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  if (cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  int ok = 1;
  for (int k = 0; k < per && ok; ++k) ok = op->run(op, (*set)++) == cudaSuccess;
  if (cudaStreamEndCapture(g_stream, &graph) != cudaSuccess || !ok ||
      cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    return -1;
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaGraphLaunch(exec, g_stream));
  CK(cudaStreamSynchronize(g_stream));
  enum { TRIALS = 15 };
  double t[TRIALS];
  for (int tr = 0; tr < TRIALS; ++tr) {
    float ms = 0;
    CK(cudaEventRecord(e0, g_stream));
    CK(cudaGraphLaunch(exec, g_stream));
    CK(cudaEventRecord(e1, g_stream));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t[tr] = 1000.0 * ms / per;
  }
  qsort(t, TRIALS, sizeof t[0], cmp_double);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  return t[TRIALS / 2];
}

/* warm-up, size the batch to ~1 ms, then time on the stream and as a graph */
static void time_op(bench_op *op) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  int set = 0;
  for (int w = 0; w < 3; ++w) CK(op->run(op, set++));
  CK(cudaStreamSynchronize(g_stream));
  CK(cudaEventRecord(e0, g_stream));
  for (int w = 0; w < 5; ++w) CK(op->run(op, set++));
  CK(cudaEventRecord(e1, g_stream));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  int per = (int)(1.0 / (ms / 5 + 1e-6));
  if (per < 1) per = 1;
  if (per > 1000) per = 1000;
  if (op->nrot > 1 && per < op->nrot && ms / 5 < 0.05) per = op->nrot; /* cycle all sets */
  op->us_stream = time_stream(op, per, &set);
  op->us_graph = time_graph(op, per, &set);
  op->us = op->us_graph > 0 && op->us_graph < op->us_stream ? op->us_graph : op->us_stream;
}

#define MAXOPS 2048 /* rows of one run: the whole table (LLM groups of 1-224 rows, with BENCH_TCB_SHAPES), the vocoder's variants */
static bench_op g_ops[MAXOPS];
static int g_nops;

static bench_op *new_op(const char *group, const char *name) {
  if (g_nops >= MAXOPS) { /* the whole table, or the vocoder's variants, ran past 320 once */
    fprintf(stderr, "bench_kernels: more than %d rows (%s %s): raise MAXOPS\n", MAXOPS, group,
            name);
    exit(1);
  }
  bench_op *op = &g_ops[g_nops++];
  memset(op, 0, sizeof *op);
  op->group = group;
  op->name = name;
  op->nrot = 1;
  return op;
}

static void print_row(const bench_op *op) {
  const double gbs = op->bytes / (op->us * 1e-6) / 1e9;
  const double tfs = op->flops / (op->us * 1e-6) / 1e12;
  char g[16];
  if (op->us_graph > 0)
    snprintf(g, sizeof g, "%.2f", op->us_graph);
  else
    snprintf(g, sizeof g, "n/a");
  printf("%-8s %-17s %-31s %8s %8.2f %7.0f %5.0f%% %5.0f%%", op->group, op->name, op->size, g,
         op->us_stream, gbs, 100.0 * gbs / g_copy_gbs, 100.0 * gbs / g_peak_gbs);
  if (op->flops > 0)
    printf(" %7.1f %5.1f%% %5.1f%%\n", tfs, 100.0 * tfs / g_gemm_tfs, 100.0 * tfs / g_peak_tfs);
  else
    printf(" %7s %6s %6s\n", "-", "-", "-");
}
static void print_header(void) {
  printf("%-8s %-17s %-31s %8s %8s %7s %6s %6s %7s %6s %6s\n", "group", "op", "size", "us graph",
         "us strm", "GB/s", "%copy", "%hbm", "TFLOP/s", "%gemm", "%bf16");
}

/* BENCH_FILTER=substring: time only the ops whose "group op size" contains it (e.g. for a
 * profiler run); the ceilings are always measured */
static int op_selected(const bench_op *op) {
  const char *f = getenv("BENCH_FILTER");
  if (!f || !*f) return 1;
  char all[160];
  snprintf(all, sizeof all, "%s %s %s", op->group, op->name, op->size);
  return strstr(all, f) != NULL;
}

static void run_op(bench_op *op) {
  if (!op_selected(op)) {
    op->us = -1;
    return;
  }
  time_op(op);
  print_row(op);
}

/* ---------------------------------------------------------------------------------------------
 * op runners */

static cudaError_t r_gemm(bench_op *o, int s) {
  /* i: M N K ab y bias?; p0 x, p1 W (rotated), p2 y, p3 bias */
  return cosy_k_gemm(g_gemm, g_stream, o->i[0], o->i[1], o->i[2], (cosy_kdtype)o->i[3],
                     P(o, 0, s), o->i[2], P(o, 1, s), o->i[5] ? P(o, 3, s) : NULL,
                     (cosy_kdtype)o->i[4], P(o, 2, s), o->i[1], 0);
}
static void add_gemm(const char *group, const char *name, int M, int N, int K, cosy_kdtype ydt,
                     int bias) {
  bench_op *o = new_op(group, name);
  snprintf(o->size, sizeof o->size, "%dx%dx%d bf16->%s", M, N, K, ydt == BF16 ? "bf16" : "f32");
  o->i[0] = M, o->i[1] = N, o->i[2] = K, o->i[3] = BF16, o->i[4] = ydt, o->i[5] = bias;
  const size_t wbytes = (size_t)N * K * 2;
  o->nrot = rot_sets(wbytes + (size_t)M * K * 2);
  o->p[0] = drand_rot(o->nrot, (size_t)M * K, BF16, -1.f, 1.f, &o->rot[0]);
  o->p[1] = drand_rot(o->nrot, (size_t)N * K, BF16, -0.05f, 0.05f, &o->rot[1]);
  o->p[2] = dalloc((size_t)M * N * dts(ydt));
  o->p[3] = drand(N, F32, -0.1f, 0.1f);
  o->bytes = (double)wbytes + (double)M * K * 2 + (double)M * N * dts(ydt) + (bias ? N * 4 : 0);
  o->flops = 2.0 * M * N * K;
  o->run = r_gemm;
  run_op(o);
}

static cudaError_t r_rmsnorm(bench_op *o, int s) {
  return cosy_k_rmsnorm(g_stream, BF16, P(o, 0, s), P(o, 1, s), BF16, P(o, 2, s), o->i[0],
                        o->i[1], 1e-6f);
}
static cudaError_t r_add_rmsnorm(bench_op *o, int s) {
  return cosy_k_add_rmsnorm(g_stream, F32, P(o, 0, s), BF16, P(o, 3, s), P(o, 1, s), BF16,
                            P(o, 2, s), o->i[0], o->i[1], 1e-6f);
}
static void add_norms_llm(const char *group, int B) {
  bench_op *o = new_op(group, "rmsnorm");
  snprintf(o->size, sizeof o->size, "%dx896 bf16", B);
  o->i[0] = B, o->i[1] = 896;
  o->p[0] = drand((size_t)B * 896, BF16, -2.f, 2.f);
  o->p[1] = drand(896, F32, 0.5f, 1.5f);
  o->p[2] = dalloc((size_t)B * 896 * 2);
  o->bytes = B * 896.0 * 4 + 896 * 4;
  o->run = r_rmsnorm;
  run_op(o);
  o = new_op(group, "add_rmsnorm");
  snprintf(o->size, sizeof o->size, "%dx896 h f32, d/y bf16", B);
  o->i[0] = B, o->i[1] = 896;
  o->p[0] = drand((size_t)B * 896, F32, -2.f, 2.f);
  o->p[1] = drand(896, F32, 0.5f, 1.5f);
  o->p[2] = dalloc((size_t)B * 896 * 2);
  o->p[3] = drand((size_t)B * 896, BF16, -0.01f, 0.01f);
  o->bytes = B * 896.0 * (4 + 4 + 2 + 2) + 896 * 4;
  o->run = r_add_rmsnorm;
  run_op(o);
}

static cudaError_t r_rope_neox(bench_op *o, int s) {
  char *qkv = P(o, 0, s);
  return cosy_k_rope_neox(g_stream, BF16, qkv, 1152, 14, qkv + 896 * 2, 1152, 2, P(o, 1, s),
                          o->i[0], 64, 1e6f, NULL);
}
static void add_rope_neox(const char *group, int n_tok) {
  bench_op *o = new_op(group, "rope_neox");
  snprintf(o->size, sizeof o->size, "%d tok, 14q+2k heads bf16", n_tok);
  o->i[0] = n_tok;
  o->p[0] = drand((size_t)n_tok * 1152, BF16, -1.f, 1.f);
  int32_t *pos = malloc(n_tok * 4);
  for (int t = 0; t < n_tok; ++t) pos[t] = 100 + t;
  o->p[1] = dints(pos, n_tok);
  free(pos);
  o->bytes = n_tok * (16.0 * 64 * 2 * 2 + 4);
  o->run = r_rope_neox;
  run_op(o);
}

static cudaError_t r_paged(bench_op *o, int s) {
  /* i: n_seq max_pages max_ctx page; p0 q, p1 kc, p2 vc (rotated), p3 bt, p4 lens, p5 out, p6 ws */
  return cosy_k_paged_decode(g_stream, BF16, P(o, 0, s), 1152, P(o, 1, s), P(o, 2, s), P(o, 3, s),
                             o->i[1], P(o, 4, s), o->i[0], 14, 2, 64, o->i[3], o->i[2], 0.125f,
                             P(o, 5, s), 896, P(o, 6, s), (size_t)o->i[4] * 16, 0, &g_dev);
}
static void add_paged(const char *group, int B, int ctx) {
  const int page = 16, max_pages = (ctx + page - 1) / page, n_pages = B * max_pages;
  const size_t per_tok = 2 * 64; /* elements of one token row of K (2 kv heads) */
  bench_op *o = new_op(group, "paged_decode");
  snprintf(o->size, sizeof o->size, "B=%d ctx=%d page=16 bf16", B, ctx);
  o->i[0] = B, o->i[1] = max_pages, o->i[2] = ctx, o->i[3] = page;
  const size_t cache_elems = (size_t)n_pages * page * per_tok;
  o->nrot = rot_sets(2 * cache_elems * 2);
  o->p[0] = drand((size_t)B * 1152, BF16, -1.f, 1.f);
  o->p[1] = drand_rot(o->nrot, cache_elems, BF16, -1.f, 1.f, &o->rot[1]);
  o->p[2] = drand_rot(o->nrot, cache_elems, BF16, -1.f, 1.f, &o->rot[2]);
  int32_t *bt = malloc((size_t)n_pages * 4), *lens = malloc((size_t)B * 4);
  scatter_pages(bt, n_pages);
  for (int b = 0; b < B; ++b) lens[b] = ctx;
  o->p[3] = dints(bt, (size_t)n_pages);
  o->p[4] = dints(lens, (size_t)B);
  free(bt), free(lens);
  o->p[5] = dalloc((size_t)B * 896 * 2);
  const size_t ws = cosy_k_paged_decode_workspace(B, 14, 2, ctx);
  o->i[4] = (int)((ws + 15) / 16);
  o->p[6] = dalloc(ws ? ws : 16);
  CK(cudaMemset(o->p[6], 0, ws ? ws : 16)); /* the split counters start at zero */
  o->bytes = (double)B * ctx * per_tok * 2 * 2 + B * 896.0 * 2 * 2 + (double)n_pages * 4;
  o->flops = (double)B * 14 * ctx * 64 * 2 * 2;
  o->run = r_paged;
  run_op(o);
}

/* the decode step's pair q|k|v projection -> attention (lib/gpu/llm.c layers_gemv on the
 * batch-invariant path): cosy_k_llm_gemv_tc (QKV_ROPE, fp32 cache: q and the newest K/V rows)
 * then cosy_k_paged_decode as its programmatic dependent, plain or with COSY_K_DECODE_EARLY
 * (i[5]); the pair's time, so the rows with and without the flag measure its gain where the
 * device has programmatic dependent launch */
static cudaError_t r_paged_chain(bench_op *o, int s) {
  /* i: n_seq max_pages max_ctx page ws16 flags; p0 x, p1 w (rotated), p2 norm_w, p3 bias, p4 q,
   * p5 pos, p6 slots, p7 inv_freq, p8 kc, p9 vc (rotated), p10 bt, p11 lens, p12 out, p13 ws,
   * p14 the gemv_tc split workspace */
  const int B = o->i[0];
  cosy_llm_gemv_args ga;
  memset(&ga, 0, sizeof ga);
  ga.M = B, ga.N = 1152, ga.K = 896, ga.in_mode = COSY_GEMV_IN_RMSNORM, ga.x = P(o, 0, s);
  ga.ldx = 896, ga.norm_w = P(o, 2, s), ga.eps = 1e-6f, ga.w = P(o, 1, s), ga.bias = P(o, 3, s);
  ga.out_mode = COSY_GEMV_QKV_ROPE, ga.y = P(o, 4, s), ga.ldy = 896, ga.n_qh = 14, ga.n_kh = 2;
  ga.pos = P(o, 5, s), ga.slots = P(o, 6, s), ga.inv_freq = P(o, 7, s);
  ga.k_cache = P(o, 8, s), ga.v_cache = P(o, 9, s), ga.pdl = 1;
  ga.xs = B > 8 ? P(o, 14, s) : NULL; /* as the LLM passes them */
  ga.xs_bytes = B > 8 ? cosy_k_llm_gemv_tc_workspace(B, 896) : 0;
  ga.clusters = g_dev.clusters, ga.smem_max = (int)g_dev.smem_block;
  const cudaError_t e = cosy_k_llm_gemv_tc(g_stream, &ga);
  if (e != cudaSuccess) return e;
  return cosy_k_paged_decode(g_stream, F32, P(o, 4, s), 896, P(o, 8, s), P(o, 9, s), P(o, 10, s),
                             o->i[1], P(o, 11, s), B, 14, 2, 64, o->i[3], o->i[2], 0.125f,
                             P(o, 12, s), 896, P(o, 13, s), (size_t)o->i[4] * 16,
                             1 | o->i[5], &g_dev);
}
/* ctx > 0: every sequence ctx tokens long; ctx = 0: W2's mix, lengths 100..380 spread over the
 * batch under the context bucket of 512 (the grid's splits past a sequence's end are empty).
 * fl: cosy_k_paged_decode's flags besides bit 1 (0 or COSY_K_DECODE_EARLY) */
static void add_paged_chain(const char *group, int B, int ctx, int fl) {
  const int mixed = ctx == 0, max_ctx = mixed ? 512 : ctx;
  const int page = 16, max_pages = (max_ctx + page - 1) / page, n_pages = B * max_pages;
  const size_t per_tok = 2 * 64;
  bench_op *o = new_op(group, fl & COSY_K_DECODE_EARLY ? "qkv+attn early" : "qkv+attn pdl");
  if (mixed)
    snprintf(o->size, sizeof o->size, "B=%d ctx=100..380/512 page=16 f32 cache", B);
  else
    snprintf(o->size, sizeof o->size, "B=%d ctx=%d page=16 f32 cache", B, ctx);
  o->i[0] = B, o->i[1] = max_pages, o->i[2] = max_ctx, o->i[3] = page, o->i[5] = fl;
  const size_t cache_elems = (size_t)n_pages * page * per_tok, wn = (size_t)1152 * 896;
  o->nrot = rot_sets(wn * 2 + 2 * cache_elems * 4);
  o->p[0] = drand((size_t)B * 896, F32, -1.f, 1.f);
  o->p[1] = drand_rot(o->nrot, wn, BF16, -0.05f, 0.05f, &o->rot[1]);
  o->p[2] = drand(896, F32, 0.5f, 1.5f);
  o->p[3] = drand(1152, F32, -0.5f, 0.5f);
  o->p[4] = dalloc((size_t)B * 896 * 4);
  int32_t *bt = malloc((size_t)n_pages * 4), *lens = malloc((size_t)B * 4);
  int32_t *pos = malloc((size_t)B * 4), *slots = malloc((size_t)B * 4);
  if (!bt || !lens || !pos || !slots) exit(1);
  scatter_pages(bt, n_pages);
  double toks = 0;
  for (int b = 0; b < B; ++b) {
    lens[b] = mixed ? 100 + (b * 131) % 281 : ctx, pos[b] = lens[b] - 1;
    slots[b] = bt[(size_t)b * max_pages + pos[b] / page] * page + pos[b] % page;
    toks += lens[b];
  }
  o->p[5] = dints(pos, (size_t)B);
  o->p[6] = dints(slots, (size_t)B);
  o->p[7] = drand(32, F32, 0.f, 1.f);
  o->p[8] = drand_rot(o->nrot, cache_elems, F32, -1.f, 1.f, &o->rot[8]);
  o->p[9] = drand_rot(o->nrot, cache_elems, F32, -1.f, 1.f, &o->rot[9]);
  o->p[10] = dints(bt, (size_t)n_pages);
  o->p[11] = dints(lens, (size_t)B);
  free(bt), free(lens), free(pos), free(slots);
  o->p[12] = dalloc((size_t)B * 896 * 4);
  const size_t ws = cosy_k_paged_decode_workspace(B, 14, 2, max_ctx);
  o->i[4] = (int)((ws + 15) / 16);
  o->p[13] = dalloc(ws ? ws : 16);
  CK(cudaMemset(o->p[13], 0, ws ? ws : 16)); /* the split counters start at zero */
  const size_t xsb = cosy_k_llm_gemv_tc_workspace(B, 896);
  o->p[14] = dalloc(xsb ? xsb : 16);
  o->bytes = (double)wn * 2 + toks * per_tok * 4 * 2 + B * 896.0 * 4 * 3 + (double)n_pages * 4;
  o->flops = 2.0 * B * 1152 * 896 + toks * 14 * 64 * 2 * 2;
  o->run = r_paged_chain;
  run_op(o);
}

static cudaError_t r_silu_mul(bench_op *o, int s) {
  char *gu = P(o, 0, s);
  return cosy_k_silu_mul(g_stream, BF16, gu, gu + (size_t)o->i[1] * 2, 2 * o->i[1], BF16,
                         P(o, 1, s), o->i[0], o->i[1]);
}
static void add_silu_mul(const char *group, int rows, int n) {
  bench_op *o = new_op(group, "silu_mul");
  snprintf(o->size, sizeof o->size, "%dx%d bf16 (fused gate|up)", rows, n);
  o->i[0] = rows, o->i[1] = n;
  o->p[0] = drand((size_t)rows * 2 * n, BF16, -3.f, 3.f);
  o->p[1] = dalloc((size_t)rows * n * 2);
  o->bytes = rows * (double)n * 2 * 3;
  o->run = r_silu_mul;
  run_op(o);
}

static cudaError_t r_lsm(bench_op *o, int s) {
  return cosy_k_log_softmax(g_stream, F32, P(o, 0, s), 6761, P(o, 1, s), o->i[0], 6761);
}
static cudaError_t r_topk(bench_op *o, int s) {
  return cosy_k_topk(g_stream, P(o, 1, s), 6761, o->i[0], 6761, o->i[1], P(o, 2, s),
                     P(o, 3, s));
}
static void add_sampling(const char *group, int B) {
  bench_op *o = new_op(group, "log_softmax");
  snprintf(o->size, sizeof o->size, "%dx6761 f32", B);
  o->i[0] = B;
  o->p[0] = drand((size_t)B * 6761, F32, -10.f, 10.f);
  o->p[1] = dalloc((size_t)B * 6761 * 4);
  o->bytes = B * 6761.0 * 8;
  o->run = r_lsm;
  run_op(o);
  bench_op *t = new_op(group, "topk k=25");
  snprintf(t->size, sizeof t->size, "%dx6761 f32", B);
  t->i[0] = B, t->i[1] = 25;
  t->p[1] = o->p[1];
  t->p[2] = dalloc((size_t)B * 25 * 4);
  t->p[3] = dalloc((size_t)B * 25 * 4);
  t->bytes = B * 6761.0 * 4 + B * 25.0 * 8;
  t->run = r_topk;
  run_op(t);
}

/* the decode path's own kernels: the fused skinny GEMM (gemv.h) and RAS sampling */
static cudaError_t r_llm_gemv(bench_op *o, int s) {
  cosy_llm_gemv_args ga;
  memset(&ga, 0, sizeof ga);
  ga.M = o->i[0], ga.N = o->i[1], ga.K = o->i[2];
  ga.in_mode = (cosy_llm_gemv_in)o->i[3];
  ga.out_mode = (cosy_llm_gemv_out)o->i[4];
  ga.x = P(o, 0, s), ga.ldx = ga.K, ga.norm_w = P(o, 2, s), ga.eps = 1e-6f;
  ga.w = P(o, 1, s), ga.y = P(o, 3, s), ga.ldy = o->i[5];
  ga.n_qh = 14, ga.n_kh = 2, ga.pos = P(o, 4, s), ga.slots = P(o, 5, s);
  ga.inv_freq = P(o, 6, s), ga.k_cache = P(o, 7, s), ga.v_cache = P(o, 8, s);
  /* tc 1 as the LLM passes it: x split once beyond 8 rows; tc 2 without the workspace (every
   * block splits its k-blocks; the decode step measured slower so, bench/HISTORY.md) */
  ga.xs = o->i[6] == 1 || o->i[6] == 3 ? P(o, 9, s) : NULL;
  ga.xs_bytes = ga.xs ? cosy_k_llm_gemv_tc_workspace(ga.M, ga.K) : 0;
  ga.gemvb = o->i[6] == 3; /* tc 3: the B-operand kernel (COSY_LLM_GEMVB) */
  ga.clusters = g_dev.clusters;
  ga.smem_max = (int)g_dev.smem_block; /* as the LLM passes it */
  ga.smem_sm = (int)g_dev.smem_sm;
  ga.xfrag = o->i[7]; /* x's fragments once per block (COSY_LLM_XFRAG's path) */
  ga.tcb_shape = o->i[8]; /* gemv_tcb's block shape forced (BENCH_TCB_SHAPES rows) */
  return o->i[6] ? cosy_k_llm_gemv_tc(g_stream, &ga) : cosy_k_llm_gemv(g_stream, &ga);
}
static void add_llm_gemv_s(const char *group, const char *name, int M, int N, int K,
                           cosy_llm_gemv_in in, cosy_llm_gemv_out out, int tc, int xf, int shape) {
  bench_op *o = new_op(group, name);
  const int ny = out == COSY_GEMV_QKV_ROPE ? 14 * 64 : out == COSY_GEMV_SILU_MUL ? N / 2 : N;
  snprintf(o->size, sizeof o->size, "%dx%dx%d bf16 W, f32 x/y", M, N, K);
  o->i[0] = M, o->i[1] = N, o->i[2] = K, o->i[3] = in, o->i[4] = out, o->i[5] = ny, o->i[6] = tc;
  o->i[7] = xf, o->i[8] = shape;
  const size_t wbytes = (size_t)N * K * 2;
  o->nrot = rot_sets(wbytes);
  o->p[1] = drand_rot(o->nrot, (size_t)N * K, BF16, -0.05f, 0.05f, &o->rot[1]);
  o->p[0] = drand((size_t)M * K, F32, -1.f, 1.f);
  o->p[2] = drand((size_t)K, F32, 0.5f, 1.5f);
  o->p[3] = drand((size_t)M * ny, F32, -1.f, 1.f);
  int32_t pos[256], slots[256];
  const int np = M < 256 ? (M > 8 ? M : 8) : 256;
  for (int m = 0; m < np; ++m) pos[m] = 100 + m, slots[m] = m;
  o->p[4] = dints(pos, np);
  o->p[5] = dints(slots, np);
  o->p[6] = drand(32, F32, 0.f, 1.f);
  o->p[7] = drand((size_t)(np > 16 ? np : 16) * 2 * 64, F32, -1.f, 1.f);
  o->p[8] = drand((size_t)(np > 16 ? np : 16) * 2 * 64, F32, -1.f, 1.f);
  if (tc == 1 || tc == 3) o->p[9] = drand(cosy_k_llm_gemv_tc_workspace(M, K) / 4, F32, -1.f, 1.f);
  o->bytes = (double)wbytes + (double)M * K * 4 + (double)M * ny * 4 * (out == COSY_GEMV_ADD_F32 ? 2 : 1);
  o->flops = 2.0 * M * N * K;
  o->run = r_llm_gemv;
  run_op(o);
}
static void add_llm_gemv(const char *group, const char *name, int M, int N, int K,
                         cosy_llm_gemv_in in, cosy_llm_gemv_out out, int tc, int xf) {
  add_llm_gemv_s(group, name, M, N, K, in, out, tc, xf, 0);
}
static cudaError_t r_ras(bench_op *o, int s) {
  return cosy_k_ras_sample(g_stream, P(o, 0, s), 6761, o->i[0], 6761, P(o, 1, s), P(o, 2, s));
}
static void add_ras(const char *group, int B) {
  bench_op *o = new_op(group, "ras_sample");
  snprintf(o->size, sizeof o->size, "%dx6761 logits, k 25, p 0.8", B);
  o->i[0] = B;
  o->p[0] = drand((size_t)B * 6761, F32, -8.f, 8.f);
  o->p[1] = dalloc((size_t)B * 6761 * 4);
  cosy_k_ras_row *rows = calloc((size_t)B, sizeof *rows);
  if (!rows) exit(1);
  for (int b = 0; b < B; ++b) {
    for (int j = 0; j < 4; ++j) rows[b].rng[j] = 0x9E3779B97F4A7C15ull * (uint64_t)(b * 4 + j + 1);
    rows[b].temperature = 1.f, rows[b].top_p = 0.8f, rows[b].tau_r = 0.1f;
    rows[b].top_k = 25, rows[b].win_size = 10, rows[b].n_allowed = 6761, rows[b].n_hist = 10;
    for (int j = 0; j < 10; ++j) rows[b].hist[j] = (b * 131 + j * 977) % 6561;
  }
  o->p[2] = dalloc((size_t)B * sizeof *rows);
  CK(cudaMemcpy(o->p[2], rows, (size_t)B * sizeof *rows, cudaMemcpyHostToDevice));
  free(rows);
  o->bytes = B * 6761.0 * 8;
  o->run = r_ras;
  run_op(o);
}

static cudaError_t r_embed(bench_op *o, int s) {
  return cosy_k_embed(g_stream, BF16, P(o, 0, s), 6761, 896, P(o, 1, s), o->i[0], BF16,
                      P(o, 2, s), 896, NULL);
}
static void add_embed(const char *group, int B) {
  bench_op *o = new_op(group, "embed");
  snprintf(o->size, sizeof o->size, "%d ids of 6761x896 bf16", B);
  o->i[0] = B;
  o->p[0] = drand((size_t)6761 * 896, BF16, -1.f, 1.f);
  int32_t *ids = malloc((size_t)B * 4);
  for (int b = 0; b < B; ++b) ids[b] = (int32_t)(rng32() % 6761u);
  o->p[1] = dints(ids, (size_t)B);
  free(ids);
  o->p[2] = dalloc((size_t)B * 896 * 2);
  o->bytes = B * 896.0 * 2 * 2;
  o->run = r_embed;
  run_op(o);
}

static cudaError_t r_paged_prefill(bench_op *o, int s) {
  /* i: n_seg n_tiles pages_per_seq; p0 q, p1 k pool, p2 v pool (rotated), p3 bt, p4 segs,
   * p5 tiles, p6 out */
  return cosy_k_paged_prefill(g_stream, P(o, 0, s), 896, P(o, 1, s), P(o, 2, s), P(o, 3, s),
                              o->i[2], P(o, 4, s), o->i[0], P(o, 5, s), o->i[1], 14, 2, 64, 16,
                              0.125f, P(o, 6, s), 896, &g_dev);
}
/* n_seg whole prompts of L positions each in one call (the packed prefill of a burst) */
static void add_paged_prefill(const char *group, int n_seg, int L) {
  const int page = 16, pps = (L + page - 1) / page, n_pages = n_seg * pps, rows = n_seg * L;
  bench_op *o = new_op(group, "paged_prefill");
  snprintf(o->size, sizeof o->size, "%d x %d causal 14/2 f32 page 16", n_seg, L);
  const size_t pool = (size_t)n_pages * page * 128;
  o->nrot = rot_sets((size_t)rows * 896 * 4 + 2 * pool * 4);
  o->p[0] = drand_rot(o->nrot, (size_t)rows * 896, F32, -1.f, 1.f, &o->rot[0]);
  o->p[1] = drand_rot(o->nrot, pool, F32, -1.f, 1.f, &o->rot[1]);
  o->p[2] = drand_rot(o->nrot, pool, F32, -1.f, 1.f, &o->rot[2]);
  int32_t *bt = malloc((size_t)n_pages * 4), *segs = malloc((size_t)n_seg * 16);
  int32_t *tiles = malloc((size_t)n_seg * (L / COSY_K_PREFILL_TILE + 1) * 8);
  if (!bt || !segs || !tiles) exit(1);
  scatter_pages(bt, n_pages);
  int nt = 0;
  for (int g = 0; g < n_seg; ++g) {
    segs[4 * g] = g * L, segs[4 * g + 1] = L, segs[4 * g + 2] = L, segs[4 * g + 3] = g;
    for (int t0 = 0; t0 < L; t0 += COSY_K_PREFILL_TILE) tiles[2 * nt] = g, tiles[2 * nt + 1] = t0, ++nt;
  }
  o->i[0] = n_seg, o->i[1] = nt, o->i[2] = pps;
  o->p[3] = dints(bt, (size_t)n_pages);
  o->p[4] = dints(segs, (size_t)n_seg * 4);
  o->p[5] = dints(tiles, (size_t)nt * 2);
  free(bt), free(segs), free(tiles);
  o->p[6] = dalloc((size_t)rows * 896 * 4);
  o->bytes = rows * 896.0 * 4 * 2 + (double)n_seg * L * 128 * 4 * 2;
  o->flops = (double)n_seg * 14 * 64 * 2 * 2 * ((double)L * (L + 1) / 2);
  o->run = r_paged_prefill;
  run_op(o);
}

static cudaError_t r_lnmod(bench_op *o, int s) {
  const float *emb = P(o, 1, s);
  return cosy_k_layernorm_mod(g_stream, BF16, P(o, 0, s), BF16, P(o, 2, s), emb + 1024, emb,
                              6144, 2, o->i[0], 1024, 1e-6f);
}
static cudaError_t r_rope_il(bench_op *o, int s) {
  return cosy_k_rope_interleaved(g_stream, BF16, P(o, 0, s), P(o, 1, s), 1024, 2, o->i[0], 64,
                                 1e4f, NULL);
}
static cudaError_t r_dit_attn(bench_op *o, int s) {
  return cosy_k_attn_dit(g_stream, BF16, P(o, 0, s), P(o, 1, s), P(o, 2, s), 1024, P(o, 3, s),
                         1024, 2, o->i[0], 16, 64, o->i[1], 0.125f);
}
static cudaError_t r_gelu(bench_op *o, int s) {
  return cosy_k_gelu_tanh(g_stream, BF16, P(o, 0, s), BF16, P(o, 1, s), (int64_t)o->i[0]);
}
static cudaError_t r_gated(bench_op *o, int s) {
  const float *g = P(o, 2, s);
  return cosy_k_gated_residual(g_stream, BF16, P(o, 0, s), BF16, P(o, 1, s), g + 2048, 6144, 2,
                               o->i[0], 1024);
}
static void add_dit(const char *group, int N, const char *fam) {
  const size_t act = (size_t)2 * N * 1024;
  bench_op *o;
  if (FAM("norm")) {
    o = new_op(group, "layernorm_mod");
    snprintf(o->size, sizeof o->size, "2x%dx1024 bf16", N);
    o->i[0] = N;
    o->p[0] = drand(act, BF16, -2.f, 2.f);
    o->p[1] = drand(2 * 6144, F32, -0.5f, 0.5f);
    o->p[2] = dalloc(act * 2);
    o->bytes = act * 4.0 + 2 * 2048 * 4.0;
    o->run = r_lnmod;
    run_op(o);

  }
  if (FAM("rope")) {
    o = new_op(group, "rope_interleaved");
    snprintf(o->size, sizeof o->size, "q,k 2x%dx1024 (ch 0..63) bf16", N);
    o->i[0] = N;
    o->p[0] = drand(act, BF16, -1.f, 1.f);
    o->p[1] = drand(act, BF16, -1.f, 1.f);
    o->bytes = 2.0 * 2 * N * 64 * 2 * 2;
    o->run = r_rope_il;
    run_op(o);

  }
  if (FAM("attention")) {
    for (int m = 0; m < 2; ++m) {
      o = new_op(group, m ? "attn_dit full" : "attn_dit chunk50");
      snprintf(o->size, sizeof o->size, "2x%dx16x64 bf16", N);
      o->i[0] = N, o->i[1] = m ? 0 : 50;
      o->p[0] = drand(act, BF16, -1.f, 1.f);
      o->p[1] = drand(act, BF16, -1.f, 1.f);
      o->p[2] = drand(act, BF16, -1.f, 1.f);
      o->p[3] = dalloc(act * 2);
      double pairs = 0; /* allowed (query, key) pairs */
      for (int i = 0; i < N; ++i) {
        int nk = m ? N : (i / 50 + 1) * 50;
        pairs += nk > N ? N : nk;
      }
      o->bytes = act * 2.0 * 4;
      o->flops = 2.0 * 16 * pairs * 64 * 2 * 2;
      o->run = r_dit_attn;
      run_op(o);
  }

  }
  if (FAM("act")) {
    o = new_op(group, "gelu_tanh");
    snprintf(o->size, sizeof o->size, "2x%dx2048 bf16", N);
    o->i[0] = 2 * N * 2048;
    o->p[0] = drand((size_t)o->i[0], BF16, -3.f, 3.f);
    o->p[1] = dalloc((size_t)o->i[0] * 2);
    o->bytes = o->i[0] * 4.0;
    o->run = r_gelu;
    run_op(o);

    o = new_op(group, "gated_residual");
    snprintf(o->size, sizeof o->size, "2x%dx1024 bf16", N);
    o->i[0] = N;
    o->p[0] = drand(act, BF16, -1.f, 1.f);
    o->p[1] = drand(act, BF16, -0.01f, 0.01f);
    o->p[2] = drand(2 * 6144, F32, -0.5f, 0.5f);
    o->bytes = act * 6.0;
    o->run = r_gated;
    run_op(o);

  }
  if (FAM("gemm")) {
    add_gemm(group, "gemm qkvo", 2 * N, 1024, 1024, BF16, 1);
    add_gemm(group, "gemm ff1", 2 * N, 2048, 1024, BF16, 1);
    add_gemm(group, "gemm ff2", 2 * N, 1024, 2048, BF16, 1);
  }
}

/* ---------------------------------------------------------------------------------------------
 * the element-wise activations (kernels.h act.cu) at a DiT-sized tensor */

static cudaError_t r_unary(bench_op *o, int s) {
  const int64_t n = (int64_t)o->i[1];
  switch (o->i[0]) {
  case 0: return cosy_k_silu(g_stream, BF16, P(o, 0, s), BF16, P(o, 1, s), n);
  case 1: return cosy_k_mish(g_stream, BF16, P(o, 0, s), BF16, P(o, 1, s), n);
  default: return cosy_k_leaky_relu(g_stream, BF16, P(o, 0, s), BF16, P(o, 1, s), n, 0.1f);
  }
}
static cudaError_t r_snake(bench_op *o, int s) {
  return cosy_k_snake(g_stream, F32, P(o, 0, s), F32, P(o, 1, s), P(o, 2, s), 1, o->i[0],
                      o->i[1], 0);
}
static cudaError_t r_add_bias(bench_op *o, int s) {
  return cosy_k_add_bias(g_stream, BF16, P(o, 0, s), o->i[1], P(o, 1, s), o->i[0], o->i[1]);
}
static void add_act(const char *group) {
  static const char *names[3] = {"silu", "mish", "leaky_relu"};
  const int n = 2 * 1000 * 1024;
  for (int k = 0; k < 3; ++k) {
    bench_op *o = new_op(group, names[k]);
    snprintf(o->size, sizeof o->size, "2x1000x1024 bf16");
    o->i[0] = k, o->i[1] = n;
    o->p[0] = drand((size_t)n, BF16, -3.f, 3.f);
    o->p[1] = dalloc((size_t)n * 2);
    o->bytes = n * 4.0;
    o->run = r_unary;
    run_op(o);
  }
  bench_op *o = new_op(group, "snake");
  snprintf(o->size, sizeof o->size, "[512][4800] f32 (HiFT stage 0)");
  o->i[0] = 512, o->i[1] = 4800;
  o->p[0] = drand((size_t)512 * 4800, F32, -2.f, 2.f);
  o->p[1] = dalloc((size_t)512 * 4800 * 4);
  o->p[2] = drand(512, F32, 0.2f, 2.f);
  o->bytes = 512 * 4800.0 * 8 + 512 * 4;
  o->run = r_snake;
  run_op(o);
  o = new_op(group, "add_bias");
  snprintf(o->size, sizeof o->size, "2000x1024 bf16");
  o->i[0] = 2000, o->i[1] = 1024;
  o->p[0] = drand((size_t)2000 * 1024, BF16, -1.f, 1.f);
  o->p[1] = drand(1024, F32, -0.1f, 0.1f);
  o->bytes = 2000 * 1024.0 * 4 + 1024 * 4;
  o->run = r_add_bias;
  run_op(o);
}

/* ---------------------------------------------------------------------------------------------
 * the LLM's step kernels (paged_kv.h, bf16_split.h) */

static cudaError_t r_decode_prep(bench_op *o, int s) {
  const int n = o->i[0];
  return cosy_k_llm_decode_prep(g_stream, P(o, 0, s), n, P(o, 1, s), 6761, 896, P(o, 2, s), 63,
                                n, 16, P(o, 3, s), P(o, 4, s), (int32_t *)P(o, 4, s) + n,
                                (int32_t *)P(o, 4, s) + 2 * n, P(o, 5, s), 63);
}
static cudaError_t r_rope_append(bench_op *o, int s) {
  const float *qkv = P(o, 0, s);
  return cosy_k_llm_rope_append(g_stream, qkv, qkv + (size_t)o->i[0] * 1152, 1152, P(o, 1, s),
                                o->i[0], 14, 2, P(o, 2, s), P(o, 3, s), P(o, 4, s), P(o, 5, s),
                                896, P(o, 6, s), P(o, 7, s));
}
static cudaError_t r_norm_split(bench_op *o, int s) {
  const int M = o->i[0];
  const float *d = P(o, 1, s);
  cosy_bf16 *hl = P(o, 3, s);
  return cosy_k_llm_norm_split(g_stream, P(o, 0, s), d, d + (size_t)M * 896, P(o, 2, s), 1e-6f,
                               hl, hl + (size_t)M * 896, M, 896);
}
static cudaError_t r_split(bench_op *o, int s) {
  const int M = o->i[0], K = o->i[1];
  cosy_bf16 *hl = P(o, 1, s);
  return cosy_k_llm_split(g_stream, P(o, 0, s), K, hl, hl + (size_t)M * K, M, K);
}
static cudaError_t r_silu_split(bench_op *o, int s) {
  const int M = o->i[0], I = o->i[1];
  const float *gu = P(o, 0, s);
  cosy_bf16 *hl = P(o, 1, s);
  return cosy_k_llm_silu_split(g_stream, gu, gu + (size_t)M * 2 * I, I, hl, hl + (size_t)M * I,
                               M);
}
static cudaError_t r_llm_add(bench_op *o, int s) {
  const float *a = P(o, 0, s);
  return cosy_k_llm_add(g_stream, a, a + o->i[0], P(o, 1, s), o->i[0]);
}
/* B rows: decode_prep, rope_append, norm_split, split, silu_split, add at the LLM's widths */
static void add_llm_step_ops(const char *group, int B) {
  bench_op *o = new_op(group, "llm_decode_prep");
  snprintf(o->size, sizeof o->size, "%d rows, H 896, bt 63", B);
  o->i[0] = B;
  int32_t *in = malloc((size_t)3 * B * 4), *bt = malloc((size_t)B * 63 * 4);
  if (!in || !bt) exit(1);
  for (int b = 0; b < B; ++b) in[b] = (int32_t)(rng32() % 6561u), in[B + b] = b, in[2 * B + b] = 150 + b;
  for (int j = 0; j < B * 63; ++j) bt[j] = j;
  o->p[0] = dints(in, (size_t)3 * B);
  o->p[2] = dints(bt, (size_t)B * 63);
  free(in), free(bt);
  o->p[1] = drand((size_t)6761 * 896, BF16, -1.f, 1.f);
  o->p[3] = dalloc((size_t)B * 896 * 4);
  o->p[4] = dalloc((size_t)B * 3 * 4);
  o->p[5] = dalloc((size_t)B * 63 * 4);
  o->bytes = B * (3 * 4.0 + 896 * 2 + 63 * 4 + 896 * 4 + 3 * 4 + 63 * 4);
  o->run = r_decode_prep;
  run_op(o);

  o = new_op(group, "llm_rope_append");
  snprintf(o->size, sizeof o->size, "%d tok hi+lo+bias 14/2 f32", B);
  o->i[0] = B;
  o->p[0] = drand((size_t)B * 1152 * 2, F32, -1.f, 1.f);
  o->p[1] = drand(1152, F32, -0.1f, 0.1f);
  int32_t *pos = malloc((size_t)B * 4);
  if (!pos) exit(1);
  for (int b = 0; b < B; ++b) pos[b] = 150 + b;
  o->p[2] = dints(pos, (size_t)B);
  for (int b = 0; b < B; ++b) pos[b] = b * 37 + 5;
  o->p[3] = dints(pos, (size_t)B);
  free(pos);
  o->p[4] = drand(32, F32, 0.f, 1.f);
  o->p[5] = dalloc((size_t)B * 896 * 4);
  o->p[6] = dalloc((size_t)(B * 37 + 8) * 128 * 4);
  o->p[7] = dalloc((size_t)(B * 37 + 8) * 128 * 4);
  o->bytes = B * (1152.0 * 4 * 2 + 1152 * 4 + 8) + 1152 * 4 + 128;
  o->run = r_rope_append;
  run_op(o);

  o = new_op(group, "llm_norm_split");
  snprintf(o->size, sizeof o->size, "%dx896 h+=d+lo, hi/lo bf16", B);
  o->i[0] = B;
  o->p[0] = drand((size_t)B * 896, F32, -1.f, 1.f);
  o->p[1] = drand((size_t)B * 896 * 2, F32, -0.01f, 0.01f);
  o->p[2] = drand(896, F32, 0.5f, 1.5f);
  o->p[3] = dalloc((size_t)B * 896 * 4);
  o->bytes = B * 896.0 * (4 + 4 + 4 + 4 + 2 + 2) + 896 * 4;
  o->run = r_norm_split;
  run_op(o);

  o = new_op(group, "llm_split");
  snprintf(o->size, sizeof o->size, "%dx896 f32 -> hi/lo bf16", B);
  o->i[0] = B, o->i[1] = 896;
  o->p[0] = drand((size_t)B * 896, F32, -1.f, 1.f);
  o->p[1] = dalloc((size_t)B * 896 * 4);
  o->bytes = B * 896.0 * 8;
  o->run = r_split;
  run_op(o);

  o = new_op(group, "llm_silu_split");
  snprintf(o->size, sizeof o->size, "%dx4864 (gu hi+lo f32)", B);
  o->i[0] = B, o->i[1] = 4864;
  o->p[0] = drand((size_t)B * 2 * 4864 * 2, F32, -3.f, 3.f);
  o->p[1] = dalloc((size_t)B * 4864 * 4);
  o->bytes = B * 4864.0 * (16 + 4);
  o->run = r_silu_split;
  run_op(o);

  o = new_op(group, "llm_add");
  snprintf(o->size, sizeof o->size, "%dx896 f32", B);
  o->i[0] = B * 896;
  o->p[0] = drand((size_t)B * 896 * 2, F32, -1.f, 1.f);
  o->p[1] = dalloc((size_t)B * 896 * 4);
  o->bytes = B * 896.0 * 12;
  o->run = r_llm_add;
  run_op(o);
}
/* ---------------------------------------------------------------------------------------------
 * the flow's own kernels (dit_elementwise.h, conv_pos.h, euler.h, flow_pack.h, attn_dit_paged) at the DiT's sizes: CFG
 * batch of 2, dim 1024, 16 heads, ff 2048, mel 80, conv position embedding K 31 in 16 groups */

static cudaError_t r_resid_ln(bench_op *o, int s) {
  const float *m = P(o, 2, s);
  return cosy_k_flow_resid_ln(g_stream, P(o, 0, s), P(o, 1, s), m + 3 * 1024, m + 2 * 1024,
                              m + 1024, m, 6 * 1024, P(o, 3, s), 2, o->i[0], 1024, 1e-6f, 0);
}
static cudaError_t r_qkv_post(bench_op *o, int s) {
  return cosy_k_flow_qkv_post(g_stream, P(o, 0, s), P(o, 1, s), P(o, 2, s), 2, o->i[0], 1024, 64,
                              0);
}
static cudaError_t r_add_rows(bench_op *o, int s) {
  return cosy_k_flow_add_rows(g_stream, P(o, 0, s), 0, P(o, 1, s), P(o, 2, s), P(o, 3, s), 2,
                              o->i[0], 1024);
}
static cudaError_t r_conv_pos(bench_op *o, int s) {
  return cosy_k_flow_conv_pos(g_stream, P(o, 0, s), P(o, 1, s), P(o, 2, s), P(o, 3, s), NULL, 2,
                              o->i[0], 1024, 16, 31);
}
static cudaError_t r_euler(bench_op *o, int s) {
  const float *v = P(o, 1, s);
  return cosy_k_flow_euler(g_stream, P(o, 0, s), v, v + o->i[0], o->i[0], 0.1f, NULL, 1.7f, 0.7f);
}
static cudaError_t r_pack_cond(bench_op *o, int s) {
  const float *in = P(o, 1, s);
  return cosy_k_flow_pack_cond(g_stream, P(o, 0, s), in, in + (size_t)o->i[0] * 80,
                               in + (size_t)o->i[0] * 160, o->i[0], 80);
}
static cudaError_t r_mu(bench_op *o, int s) {
  const float *in = P(o, 1, s);
  return cosy_k_flow_mu(g_stream, P(o, 0, s), in, in + (size_t)o->i[0] * 40, 2, o->i[0], 80);
}
static cudaError_t r_x_gather(bench_op *o, int s) {
  return cosy_k_flow_x_gather(g_stream, P(o, 0, s), P(o, 1, s), P(o, 2, s), 0, NULL, P(o, 3, s),
                              o->i[0], 80);
}
static cudaError_t r_x_store(bench_op *o, int s) {
  return cosy_k_flow_x_store(g_stream, P(o, 2, s), P(o, 1, s), 0, NULL, P(o, 3, s), o->i[0], 80);
}
static cudaError_t r_flow_kv_store(bench_op *o, int s) {
  return cosy_k_flow_kv_store(g_stream, P(o, 2, s), P(o, 1, s), 0, NULL, 1024, P(o, 0, s), o->i[0],
                              1024);
}
static cudaError_t r_rows_gather(bench_op *o, int s) {
  return cosy_k_rows_gather_f32(g_stream, P(o, 0, s), P(o, 1, s), P(o, 2, s), o->i[0], 1024);
}
static cudaError_t r_rows_zero(bench_op *o, int s) {
  return cosy_k_rows_zero_bf16(g_stream, P(o, 0, s), P(o, 1, s), o->i[0], 1024);
}
static cudaError_t r_dit_paged(bench_op *o, int s) {
  if (o->i[1] <= -2) /* cosy_k_attn_dit_paged_v2: -2 64-query tiles, -3 128 (the list p[2]);
                      * -6, -7: 64 with 2 / 4 stages */
    return cosy_k_attn_dit_paged_v2_stages(
        g_stream, P(o, 0, s), 1024, 16, P(o, 1, s), P(o, 2, s), o->i[0], P(o, 3, s),
        (int64_t)4 * 50 * 1024, 0, NULL, 50, P(o, 4, s), P(o, 5, s), 50, 0.125f,
        o->i[1] == -3 ? COSY_K_DIT_TILE_WIDE : COSY_K_DIT_TILE,
        o->i[1] == -6 ? 2 : o->i[1] == -7 ? 4 : 0, &g_dev);
  if (o->i[1] < 0) /* the part count per segment: i[2] cluster items (p[6]) of i[3] blocks */
    return cosy_k_attn_dit_paged_auto(g_stream, P(o, 0, s), 1024, 16, P(o, 1, s), P(o, 2, s),
                                      P(o, 6, s), o->i[2], o->i[3], P(o, 3, s),
                                      (int64_t)4 * 50 * 1024, 0, NULL, 50, P(o, 4, s),
                                      P(o, 5, s), 50, 0.125f, &g_dev);
  if (o->i[1] > 0) /* the split kernel at i[1] parts a query tile */
    return cosy_k_attn_dit_paged_split(g_stream, P(o, 0, s), 1024, 16, P(o, 1, s), P(o, 2, s),
                                       o->i[0], P(o, 3, s), (int64_t)4 * 50 * 1024, 0, NULL, 50,
                                       P(o, 4, s), P(o, 5, s), 50, 0.125f, o->i[1], &g_dev);
  return cosy_k_attn_dit_paged(g_stream, P(o, 0, s), 1024, 16, P(o, 1, s), P(o, 2, s), o->i[0],
                               P(o, 3, s), (int64_t)4 * 50 * 1024, 0, NULL, 50, P(o, 4, s), P(o, 5, s),
                               50, 0.125f);
}
static void add_flow_ops(const char *group, int N, const char *fam) {
  const size_t act = (size_t)2 * N * 1024;
  bench_op *o;
  if (FAM("resid_ln")) {
    o = new_op(group, "flow_resid_ln");
    snprintf(o->size, sizeof o->size, "2x%dx1024 h,a f32 -> y bf16", N);
    o->i[0] = N;
    o->p[0] = drand(act, F32, -2.f, 2.f);
    o->p[1] = drand(act, F32, -1.f, 1.f);
    o->p[2] = drand(2 * 6 * 1024, F32, -0.5f, 0.5f); /* a modulation row per CFG row */
    o->p[3] = dalloc(act * 2);
    o->bytes = act * (4.0 + 4 + 4 + 2) + 2 * 4 * 1024 * 4.0;
    o->run = r_resid_ln;
    run_op(o);

  }
  if (FAM("dit_elementwise")) {
    o = new_op(group, "flow_qkv_post");
    snprintf(o->size, sizeof o->size, "2x%dx3072 bf16 +bias, rope 64", N);
    o->i[0] = N;
    o->p[0] = drand(act * 3, BF16, -1.f, 1.f);
    o->p[1] = drand(3072, F32, -0.1f, 0.1f);
    o->p[2] = drand((size_t)N * 32 * 2, F32, -1.f, 1.f);
    o->bytes = act * 3 * 4.0 + 3072 * 4.0 + N * 64 * 4.0;
    o->run = r_qkv_post;
    run_op(o);

    o = new_op(group, "flow_add_rows");
    snprintf(o->size, sizeof o->size, "2x%dx1024 (xp shared)", N);
    o->i[0] = N;
    o->p[0] = drand((size_t)N * 1024, F32, -1.f, 1.f);
    o->p[1] = drand(act, F32, -1.f, 1.f);
    o->p[2] = dalloc(act * 4);
    o->p[3] = dalloc(act * 2);
    o->bytes = N * 1024 * 4.0 + act * (4.0 + 4 + 2);
    o->run = r_add_rows;
    run_op(o);

  }
  if (FAM("conv_pos")) {
    o = new_op(group, "flow_conv_pos");
    snprintf(o->size, sizeof o->size, "2x%dx1024 G16 K31 +mish bf16", N);
    o->i[0] = N;
    o->p[0] = drand(act, BF16, -1.f, 1.f);
    o->p[1] = drand((size_t)1024 * 31 * 64, BF16, -0.02f, 0.02f);
    o->p[2] = drand(1024, F32, -0.1f, 0.1f);
    o->p[3] = dalloc(act * 2);
    o->bytes = act * 4.0 + 1024 * 31 * 64 * 2.0 + 1024 * 4;
    o->flops = 2.0 * act * 31 * 64;
    o->run = r_conv_pos;
    run_op(o);
  }
  if (FAM("dit_elementwise")) {
    o = new_op(group, "flow_euler");
    snprintf(o->size, sizeof o->size, "%dx80 f32, CFG", N);
    o->i[0] = N * 80;
    o->p[0] = drand((size_t)N * 80, F32, -1.f, 1.f);
    o->p[1] = drand((size_t)N * 80 * 2, F32, -1.f, 1.f);
    o->bytes = N * 80 * 4.0 * 4;
    o->run = r_euler;
    run_op(o);

    o = new_op(group, "flow_pack_cond");
    snprintf(o->size, sizeof o->size, "%dx3x80 f32", N);
    o->i[0] = N;
    o->p[0] = dalloc((size_t)N * 240 * 4);
    o->p[1] = drand((size_t)N * 160 + 80, F32, -1.f, 1.f);
    o->bytes = N * 80 * 4.0 * 5;
    o->run = r_pack_cond;
    run_op(o);

    o = new_op(group, "flow_mu");
    snprintf(o->size, sizeof o->size, "%dx80 f32, ratio 2", N);
    o->i[0] = N;
    o->p[0] = dalloc((size_t)N * 80 * 4);
    o->p[1] = drand((size_t)N * 80 + 80, F32, -1.f, 1.f);
    o->bytes = N * 80 * 4.0 * 2;
    o->run = r_mu;
    run_op(o);

  }

  /* packed-batch rows against cache pages: N rows, x in pages of 50 frames x 80 */
  if (FAM("flow_pack")) {
      int64_t *src = malloc((size_t)2 * N * 8);
      int32_t *map = malloc((size_t)2 * N * 4);
      if (!src || !map) exit(1);
      for (int r = 0; r < 2 * N; ++r) src[r] = (int64_t)((r * 7) % (2 * N)) * 80, map[r] = (r * 7) % (2 * N);
      o = new_op(group, "flow_x_gather");
      snprintf(o->size, sizeof o->size, "%d rows of 80 f32", N);
      o->i[0] = N;
      o->p[0] = dalloc((size_t)N * 80 * 4);
      o->p[1] = dalloc((size_t)N * 8);
      CK(cudaMemcpy(o->p[1], src, (size_t)N * 8, cudaMemcpyHostToDevice));
      o->p[2] = drand((size_t)2 * N * 80, F32, -1.f, 1.f);
      o->p[3] = o->p[2];
      o->bytes = N * (80 * 8.0 + 8);
      o->run = r_x_gather;
      run_op(o);

      o = new_op(group, "flow_x_store");
      snprintf(o->size, sizeof o->size, "%d rows of 80 f32", N);
      o->i[0] = N;
      o->p[1] = dalloc((size_t)N * 8);
      CK(cudaMemcpy(o->p[1], src, (size_t)N * 8, cudaMemcpyHostToDevice));
      o->p[2] = drand((size_t)2 * N * 80, F32, -1.f, 1.f);
      o->p[3] = drand((size_t)N * 80, F32, -1.f, 1.f);
      o->bytes = N * (80 * 8.0 + 8);
      o->run = r_x_store;
      run_op(o);

      for (int r = 0; r < 2 * N; ++r) src[r] = (int64_t)((r * 7) % (2 * N)) * 2048;
      o = new_op(group, "flow_kv_store");
      snprintf(o->size, sizeof o->size, "2x%d rows, K+V of 1024 bf16", N);
      o->i[0] = 2 * N;
      o->p[0] = drand(act * 3, BF16, -1.f, 1.f);
      o->p[1] = dalloc((size_t)2 * N * 8);
      CK(cudaMemcpy(o->p[1], src, (size_t)2 * N * 8, cudaMemcpyHostToDevice));
      o->p[2] = dalloc(act * 2 * 2);
      o->bytes = act * 2 * 2 * 2.0 + 2 * N * 8.0;
      o->run = r_flow_kv_store;
      run_op(o);

      o = new_op(group, "rows_gather_f32");
      snprintf(o->size, sizeof o->size, "2x%d rows of 1024", N);
      o->i[0] = 2 * N;
      o->p[0] = dalloc(act * 4);
      o->p[1] = drand(act, F32, -1.f, 1.f);
      o->p[2] = dints(map, (size_t)2 * N);
      o->bytes = act * 8.0 + 2 * N * 4.0;
      o->run = r_rows_gather;
      run_op(o);

      o = new_op(group, "rows_zero_bf16");
      snprintf(o->size, sizeof o->size, "%d of 2x%d rows of 1024", N, N);
      o->i[0] = N;
      o->p[0] = dalloc(act * 2);
      o->p[1] = dints(map, (size_t)N);
      o->bytes = N * 1024 * 2.0 + N * 4.0;
      o->run = r_rows_zero;
      run_op(o);
      free(src), free(map);
  }

  /* the streaming call's attention: the last 50-frame block of each CFG row (50 queries) over
   * N - 50 cached frames in pages + its own 50 */
  if (FAM("attn_dit_paged")) {
      const int cached = N - 50, np = (cached + 49) / 50;
      o = new_op(group, "attn_dit_paged");
      snprintf(o->size, sizeof o->size, "2x50 q, %d cached, 16x64 bf16", cached);
      cosy_k_dit_seg segs[2];
      memset(segs, 0, sizeof segs);
      int32_t tiles[4] = {0, 0, 1, 0}, *ptab = malloc((size_t)(np ? np : 1) * 4);
      if (!ptab) exit(1);
      for (int j = 0; j < np; ++j) ptab[j] = j;
      for (int g = 0; g < 2; ++g) {
        segs[g].q_row0 = 50 * g, segs[g].n_q = 50, segs[g].cached = cached, segs[g].Lk = N;
        segs[g].ptab0 = 0, segs[g].row = g;
      }
      o->i[0] = 2;
      o->p[0] = drand((size_t)100 * 3072, BF16, -1.f, 1.f);
      o->p[1] = dalloc(sizeof segs);
      CK(cudaMemcpy(o->p[1], segs, sizeof segs, cudaMemcpyHostToDevice));
      o->p[2] = dints(tiles, 4);
      o->p[3] = drand((size_t)(np ? np : 1) * 4 * 50 * 1024, BF16, -1.f, 1.f);
      o->p[4] = dints(ptab, (size_t)(np ? np : 1));
      o->p[5] = dalloc((size_t)100 * 1024 * 2);
      free(ptab);
      o->bytes = 2.0 * N * 1024 * 2 * 2 + 100 * 1024 * 2.0 * 2;
      o->flops = 2.0 * 16 * 50 * N * 64 * 2;
      o->run = r_dit_paged;
      run_op(o);
      /* cosy_k_attn_dit_paged_v2 on the same inputs (50 queries: one tile at 64 or 128) */
      for (int v = 0; v < 2; ++v) {
        bench_op *o2 = new_op(group, v ? "attn_dit_v2 128" : "attn_dit_v2 64");
        memcpy(o2->size, o->size, sizeof o2->size);
        memcpy(o2->p, o->p, sizeof o->p);
        o2->i[0] = 2;
        o2->i[1] = v ? -3 : -2;
        o2->bytes = o->bytes;
        o2->flops = o->flops;
        o2->run = r_dit_paged;
        run_op(o2);
      }
  }
}

/* The packed flow's attention on small calls (the live workload's flow batches: 1-3 jobs, two
 * CFG segments each, 50-200 new frames over 110-1000 keys; a job's keys are its cached frames
 * in pages of 50 then its new ones, streaming block-causal), and on the loaded batches of the
 * offline workload (16 and 22 jobs of 100-200 new frames over 300-1000 keys), the one-block
 * kernel against the split kernel at 2, 4 and 8 parts a query tile, the part count per segment
 * (cosy_k_attn_dit_paged_auto; both where the device has clusters) and
 * cosy_k_attn_dit_paged_v2 at 64- and 128-query tiles: rows "attn_dit_paged",
 * "attn_dit_split N", "attn_dit_auto", "attn_dit_v2 64" and "attn_dit_v2 128" of the group
 * "dit call". */
#define DIT_CALL_JOBS 22
typedef struct dit_call {
  int jobs, nq[DIT_CALL_JOBS], cached[DIT_CALL_JOBS];
  char label[48];
} dit_call;
static void add_dit_calls(const char *group) {
  static const dit_call small[] = {
      {1, {56}, {150}, "1 job 56q 206k"}, /* a single request's first call (W1 C = 1) */
      {1, {98}, {300}, "1 job 98q 398k"},  /* ... and about its last */
      {1, {60}, {50}, "1 job 60q 110k"},
      {1, {100}, {300}, "1 job 100q 400k"},
      {1, {50}, {650}, "1 job 50q 700k"},
      {1, {50}, {950}, "1 job 50q 1000k"},
      {1, {200}, {800}, "1 job 200q 1000k"},
      {2, {150, 100}, {0, 500}, "2 jobs 150q 150k, 100q 600k"},
      {3, {200, 100, 50}, {0, 400, 950}, "3 jobs 200,100,50q 200..1000k"},
  };
  enum { NSMALL = sizeof small / sizeof small[0], NCALLS = NSMALL + 2 };
  dit_call calls[NCALLS];
  memcpy(calls, small, sizeof small);
  for (int c = 0; c < 2; ++c) { /* loaded: 16 and 22 jobs, 100/150/200 new frames each over a
                                 * cache of 200..850 frames, keys <= 1000 */
    dit_call *d = &calls[NSMALL + c];
    memset(d, 0, sizeof *d);
    d->jobs = c ? 22 : 16;
    for (int j = 0; j < d->jobs; ++j) {
      d->nq[j] = 100 + 50 * ((j * 5 + c) % 3);
      int cached = 200 + 50 * ((j * 7 + 3 * c) % 14);
      if (cached + d->nq[j] > 1000) cached = 1000 - d->nq[j];
      d->cached[j] = cached / 50 * 50;
    }
    snprintf(d->label, sizeof d->label, "%d jobs 100-200q 300-1000k", d->jobs);
  }
  static const char *names[] = {"attn_dit_paged",  "attn_dit_split 2",   "attn_dit_split 4",
                                "attn_dit_split 8", "attn_dit_auto",      "attn_dit_v2 64",
                                "attn_dit_v2 128",  "attn_dit_v2 64 s2", "attn_dit_v2 64 s4"};
  /* -1: the part count per segment; -2, -3: v2 at 64 / 128-query tiles (the launcher's K/V
   * pipeline); -6, -7: v2 at 64 with 2 / 4 stages forced */
  static const int nsplit[] = {0, 2, 4, 8, -1, -2, -3, -6, -7};
  enum { MAXSEG = 2 * DIT_CALL_JOBS, MAXT = MAXSEG * 4, MAXPG = DIT_CALL_JOBS * 20 };
  cosy_k_dit_seg *segs = calloc(MAXSEG, sizeof *segs);
  int32_t *tiles = malloc(MAXT * 2 * 4), *tiles128 = malloc(MAXT * 2 * 4);
  int32_t *ptab = malloc(MAXPG * 4), *items = malloc((size_t)MAXT * 16 * 2 * 4);
  if (!segs || !tiles || !tiles128 || !ptab || !items) exit(1);
  for (size_t c = 0; c < NCALLS; ++c) {
    memset(segs, 0, MAXSEG * sizeof *segs);
    int nq_all = 0, n_pages = 0, n_tiles = 0, n_tiles128 = 0;
    double pairs = 0, kv_bytes = 0;
    for (int j = 0; j < calls[c].jobs; ++j) nq_all += calls[c].nq[j];
    for (int j = 0, row0 = 0; j < calls[c].jobs; ++j) {
      const int nq = calls[c].nq[j], cached = calls[c].cached[j], np = cached / 50;
      for (int k = 0; k < np; ++k) ptab[n_pages + k] = n_pages + k;
      for (int r = 0; r < 2; ++r) {
        cosy_k_dit_seg *g = &segs[2 * j + r];
        g->q_row0 = r * nq_all + row0, g->n_q = nq, g->cached = cached, g->Lk = cached + nq;
        g->ptab0 = n_pages, g->row = r;
        for (int t = 0; t < nq; t += COSY_K_DIT_TILE) {
          tiles[2 * n_tiles] = 2 * j + r;
          tiles[2 * n_tiles + 1] = t;
          n_tiles++;
        }
        for (int t = 0; t < nq; t += COSY_K_DIT_TILE_WIDE) {
          tiles128[2 * n_tiles128] = 2 * j + r;
          tiles128[2 * n_tiles128 + 1] = t;
          n_tiles128++;
        }
        for (int i = 0; i < nq; ++i) { /* keys seen: block-causal in blocks of 50 */
          const int e = ((cached + i) / 50 + 1) * 50;
          pairs += e < cached + nq ? e : cached + nq;
        }
        kv_bytes += 2.0 * (cached + nq) * 1024 * 2;
      }
      n_pages += np;
      row0 += nq;
    }
    void *dq = drand((size_t)2 * nq_all * 3072, BF16, -1.f, 1.f);
    void *dsegs = dalloc(MAXSEG * sizeof *segs);
    CK(cudaMemcpy(dsegs, segs, MAXSEG * sizeof *segs, cudaMemcpyHostToDevice));
    void *dtiles = dints(tiles, (size_t)2 * n_tiles);
    void *dtiles128 = dints(tiles128, (size_t)2 * n_tiles128);
    void *dpool = drand((size_t)(n_pages ? n_pages : 1) * 4 * 50 * 1024, BF16, -1.f, 1.f);
    void *dptab = dints(ptab, (size_t)(n_pages ? n_pages : 1));
    void *dout = dalloc((size_t)2 * nq_all * 1024 * 2);
    int csize = 0;
    const int n_items = cosy_k_dit_auto_items(segs, 2 * calls[c].jobs, tiles, n_tiles, 16, items,
                                              MAXT * 16, &csize);
    if (n_items < 0) {
      fprintf(stderr, "dit call: cosy_k_dit_auto_items failed\n");
      exit(1);
    }
    void *ditems = dints(items, (size_t)2 * n_items);
    for (size_t v = 0; v < sizeof nsplit / sizeof nsplit[0]; ++v) {
      if (nsplit[v] >= -1 && nsplit[v] && !g_dev.clusters) continue; /* the split kernels need
                                                                          * clusters */
      bench_op *o = new_op(group, names[v]);
      snprintf(o->size, sizeof o->size, "%s", calls[c].label);
      o->i[0] = nsplit[v] == -3 ? n_tiles128 : n_tiles;
      o->i[1] = nsplit[v];
      o->p[0] = dq, o->p[1] = dsegs, o->p[2] = nsplit[v] == -3 ? dtiles128 : dtiles;
      o->p[3] = dpool, o->p[4] = dptab;
      o->p[5] = dout;
      o->p[6] = ditems;
      o->i[2] = n_items;
      o->i[3] = csize;
      o->bytes = kv_bytes + 2.0 * nq_all * 1024 * 2 * 2;
      o->flops = 2.0 * 16 * pairs * 64 * 2;
      o->run = r_dit_paged;
      run_op(o);
    }
  }
  free(segs), free(tiles), free(tiles128), free(ptab), free(items);
}

/* ---------------------------------------------------------------------------------------------
 * the vocoder's convolutions (kernels_hift.h, kernels/conv.cu): the launches lib/gpu/hift.c makes
 * for the full-size HiFT (512 channels, ups 512->256->128->64 at rates 8, 5, 3, resblock kernels
 * 3/7/11 with dilations 1/3/5) on Tx = the mel frames a call decodes (non-final T = 100: Tx = 93;
 * final T = 224: Tx = 224), in TF32 with the weights rounded on the host as the engine runs them,
 * reductions never split (the streaming vocoder's mode), under each kernel of
 * cosy_hift_conv_kernel (the rows "old" .. "auto"; "old auto": the old kernel with the automatic
 * split, as the whole-utterance decode runs it). Scenario "voc b16": a batch of 16 streaming
 * requests, each launch holding one conv of each (hift.c groups a batch's resblocks by kernel
 * size). FLOPs: 2 x the useful MACs (unpadded channels); bytes: input, weights, outputs,
 * residual once. After each shape a line "conv cmp" gives every kernel's us against the old one,
 * and after each scenario the sums ("conv sum"): the lines to read to pick the engine's kernel.
 * The rows "f16 w128" .. "f16 auto" run the same launches with fp16 operands (COSY_HPREC_F16,
 * conv2_kernel<OpF16>: its tile per kernel choice, never split; "(ran tf32)" if it fell back); the
 * "conv cmp" line ends with "f16/tf32 x": the default TF32 choice's ("auto") us over F16's
 * ("f16 auto"). The launches TF32 runs on the old kernel under every choice (the ups 1/2 and
 * conv_post with their mean-of-3 inputs, the strided source downs) follow the others in each
 * scenario ("extra"); "conv sum" covers the shapes before them (as in earlier sessions) and
 * "conv sum all" every shape: the F16 against TF32 comparison of a whole vocoder call. The row
 * "f16 staged" runs "f16 auto"'s launches with an xh workspace per conv and
 * COSY_HCONV_STAGED_ALWAYS, so the staged kernel (kernels/conv.cu conv3_kernel, after its staging
 * kernel: both in the time) runs where it can ("ran conv2" where not; "default staged|conv2":
 * what the engine's rule, conv3_prefer, runs); "staged/f16 x" ends each "conv cmp" and "conv sum
 * all" line. */
#define HC_NV 9 /* old (never split), w128, w64, auto, old auto, f16 w128, f16 w64, f16 auto,
                 f16 staged */
#define HC_STAGED 8
#define HC_TF32_AUTO 3
#define HC_F16_AUTO 7
/* indexed by the COSY_HCONV_K_* value for the first four (the name of what "auto" ran) */
static const char *const hc_vname[HC_NV] = {"old",      "w128",    "w64",    "auto",
                                            "old auto", "f16 w128", "f16 w64", "f16 auto",
                                            "f16 staged"};
static const int hc_kernel[HC_NV] = {COSY_HCONV_K_OLD,  COSY_HCONV_K_W128, COSY_HCONV_K_W64,
                                     COSY_HCONV_K_AUTO, COSY_HCONV_K_OLD,  COSY_HCONV_K_W128,
                                     COSY_HCONV_K_W64,  COSY_HCONV_K_AUTO, COSY_HCONV_K_AUTO};
static const int hc_prec[HC_NV] = {COSY_HPREC_TF32_ROUNDED, COSY_HPREC_TF32_ROUNDED,
                                   COSY_HPREC_TF32_ROUNDED, COSY_HPREC_TF32_ROUNDED,
                                   COSY_HPREC_TF32_ROUNDED, COSY_HPREC_F16,
                                   COSY_HPREC_F16,          COSY_HPREC_F16, COSY_HPREC_F16};
static const int hc_split[HC_NV] = {1, 1, 1, 1, 0, 1, 1, 1, 1}; /* "old auto": automatic split */
static double hc_sum[HC_NV], hc_sum_all[HC_NV];
static int hc_extra; /* the shapes that follow are the "extra" ones (only in "conv sum all") */

static cudaError_t r_hconv(bench_op *o, int s) {
  (void)s;
  cosy_hift_conv_kernel(o->i[0]);
  cosy_hift_conv_staged(o->i[4]);
  return cosy_k_hift_conv_split(g_stream, &g_dev, (const cosy_hift_conv *)o->p[0], o->i[1],
                                o->i[3], o->i[2]);
}

/* one launch of n convs ci -> co (kernel k[i % nk], dilation dil, stride, up) from len_in input
 * columns to n_out outputs; act the input's (the mean of three inputs: three input buffers);
 * res: a residual; oact: the fused Snake output; reflect: the ReflectionPad1d((1,0)) output */
static void add_hconv_s(const char *group, const char *name, int n, int ci, int co, const int *k,
                        int nk, int dil, int stride, int up, int act, int reflect, int len_in,
                        int n_out, int res, int oact) {
  cosy_hift_conv *d = calloc((size_t)n, sizeof *d), *d3 = calloc((size_t)n, sizeof *d3);
  if (!d || !d3) exit(1);
  double flops = 0, bytes = 0;
  const int co_pad = cosy_hift_conv_pad(co, COSY_HCONV_BM), ci_pad = cosy_hift_conv_pad(ci, 8);
  float *alpha = drand((size_t)ci, F32, 0.5f, 1.5f), *oalpha = drand((size_t)co, F32, 0.5f, 1.5f);
  float *bias = drand((size_t)co, F32, -0.1f, 0.1f);
  /* rows at a pitch of 8 floats, as the streaming vocoder lays out its stages (lib/gpu/hift.c
   * STAGE_PITCH): the epilogue's paired accesses (kernels/conv.cu store_tile) apply */
  const int ldi = (len_in + 7) / 8 * 8, ldo = (n_out + 7) / 8 * 8;
  for (int i = 0; i < n; i++) {
    cosy_hift_conv *c = &d[i];
    const int kk = k[i % nk];
    c->in = drand((size_t)ci * ldi, F32, -1.f, 1.f);
    if (act == COSY_HACT_MEAN3_LEAKY) {
      c->in2 = drand((size_t)ci * ldi, F32, -1.f, 1.f);
      c->in3 = drand((size_t)ci * ldi, F32, -1.f, 1.f);
    }
    c->ld_in = ldi, c->len_in = len_in, c->ci = ci, c->up = up, c->act = act, c->slope = 0.1f;
    c->alpha = alpha;
    c->wp = drand((size_t)kk * co_pad * ci_pad, F32, -0.05f, 0.05f);
    c->bias = bias, c->co = co, c->co_pad = co_pad, c->ci_pad = ci_pad, c->k = kk, c->dil = dil;
    c->stride = stride, c->pad_left = stride > 1 ? stride - 1 : (kk - 1) * dil;
    c->reflect = reflect, c->n_out = n_out, c->ld_out = ldo;
    { /* the fp16 weights (their values do not matter for the time) */
      const int cip16 = cosy_hift_conv_pad(ci, COSY_HCONV_CKH);
      const size_t nw = (size_t)kk * co * ci, nh = (size_t)kk * co_pad * cip16;
      float *w = malloc(nw * sizeof(float)), *whs = malloc((size_t)co * sizeof(float));
      uint16_t *wh = malloc(nh * sizeof(uint16_t));
      if (!w || !whs || !wh) exit(1);
      for (size_t q = 0; q < nw; q++) w[q] = ((float)(rng32() >> 8) / 16777216.0f - 0.5f) * 0.1f;
      cosy_hift_conv_pack_f16(w, co, ci, kk, wh, whs);
      void *dwh = dalloc(nh * sizeof(uint16_t)), *dwhs = dalloc((size_t)co * sizeof(float));
      CK(cudaMemcpy(dwh, wh, nh * sizeof(uint16_t), cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dwhs, whs, (size_t)co * sizeof(float), cudaMemcpyHostToDevice));
      c->wh = dwh, c->wh_scale = dwhs;
      free(w), free(whs), free(wh);
    }
    c->out = dalloc((size_t)co * ldo * 4);
    d3[i].xh = dalloc((cosy_hift_conv_xh_halves(c) + 8) * sizeof(uint16_t)); /* "f16 staged" */
    if (res) c->res = drand((size_t)co * ldo, F32, -1.f, 1.f), c->ld_res = ldo;
    if (oact) {
      c->out_act = dalloc((size_t)co * ldo * 4), c->ld_out_act = ldo;
      c->oact = COSY_HACT_SNAKE, c->oalpha = oalpha;
    }
    flops += 2.0 * co * ci * kk * (double)n_out;
    bytes += 4.0 * ((double)ci * len_in + (double)kk * co * ci +
                    (double)co * n_out * (1 + (res != 0) + (oact != 0)));
  }
  for (int i = 0; i < n; i++) { /* the staged row: the same convs with their xh workspaces */
    uint16_t *xh = d3[i].xh;
    d3[i] = d[i];
    d3[i].xh = xh;
  }
  double us[HC_NV];
  for (int v = 0; v < HC_NV; v++) {
    bench_op *o = new_op(group, name);
    snprintf(o->size, sizeof o->size, "%dx %d>%d k%d%s d%d L%d %s", n, ci, co, k[0],
             nk > 1 ? "/.." : "", dil, n_out, hc_vname[v]);
    o->p[0] = v == HC_STAGED ? d3 : d;
    o->i[0] = hc_kernel[v], o->i[1] = n, o->i[2] = hc_split[v], o->i[3] = hc_prec[v];
    o->i[4] = v == HC_STAGED ? COSY_HCONV_STAGED_ALWAYS : COSY_HCONV_STAGED_AUTO;
    o->flops = flops, o->bytes = bytes;
    o->run = r_hconv;
    run_op(o);
    us[v] = o->us;
  }
  cosy_hift_conv_kernel(COSY_HCONV_K_OLD);
  if (us[0] <= 0) return; /* not selected (BENCH_FILTER) */
  printf("conv cmp %-8s %-16s %dx %d>%d k%d%s d%d L%d: old %.1f us %.1f TFLOP/s (%.1f%% of "
         "TF32 %.0f)", group, name, n, ci, co, k[0], nk > 1 ? "/.." : "", dil, n_out, us[0],
         flops / us[0] * 1e-6, 100.0 * flops / us[0] * 1e-6 / (g_peak_tfs / 2), g_peak_tfs / 2);
  for (int v = 1; v < HC_NV; v++) {
    const int which = hc_kernel[v], f16 = hc_prec[v] == COSY_HPREC_F16;
    cosy_hift_conv_kernel(which);
    const int got = cosy_hift_conv_kernel_for(&g_dev, d, n, hc_prec[v], 1);
    const int ran_tf32 = f16 && cosy_hift_conv_f16_runs(&g_dev, d, n) != 1;
    if (v == HC_STAGED) {
      cosy_hift_conv_staged(COSY_HCONV_STAGED_ALWAYS);
      const int ran = cosy_hift_conv_staged_runs(&g_dev, d3, n);
      cosy_hift_conv_staged(COSY_HCONV_STAGED_AUTO);
      printf(" | %s %.1f (x%.2f%s; default %s)", hc_vname[v], us[v], us[0] / us[v],
             ran ? "" : ", ran conv2", cosy_hift_conv_staged_runs(&g_dev, d3, n) ? "staged" : "conv2");
      continue;
    }
    printf(" | %s %.1f (x%.2f%s%s%s%s)", hc_vname[v], us[v], us[0] / us[v],
           !f16 && v != 4 && got == COSY_HCONV_K_OLD ? ", ran old" : "",
           ran_tf32 ? ", ran tf32" : "", which == COSY_HCONV_K_AUTO && got > 0 ? ": " : "",
           which == COSY_HCONV_K_AUTO && got > 0 ? hc_vname[got] : "");
  }
  cosy_hift_conv_kernel(COSY_HCONV_K_OLD);
  printf(" | f16/tf32 x%.2f | staged/f16 x%.2f\n",
         us[HC_F16_AUTO] > 0 ? us[HC_TF32_AUTO] / us[HC_F16_AUTO] : 0.0,
         us[HC_STAGED] > 0 ? us[HC_F16_AUTO] / us[HC_STAGED] : 0.0);
  for (int v = 0; v < HC_NV; v++) {
    if (!hc_extra) hc_sum[v] += us[v];
    hc_sum_all[v] += us[v];
  }
}

static void add_hconv(const char *group, const char *name, int n, int ci, int co, const int *k,
                      int nk, int dil, int up, int act, int len_in, int n_out, int res, int oact) {
  add_hconv_s(group, name, n, ci, co, k, nk, dil, 1, up, act, 0, len_in, n_out, res, oact);
}

/* the decoder's launches of one call (jobs = 1) or of a batch of `jobs` streaming calls at Tx
 * frames: conv_pre, ups 0 and per stage the resblocks' first conv1 (Snake input), conv1 at
 * dilation 5 and conv2 (+ residual, Snake output); then the "extra" launches on which TF32 runs
 * the old kernel under every choice: the ups 1/2 and conv_post (mean-of-3 input, + residual,
 * reflect) and the strided source downs */
static void add_voc(const char *group, int Tx, int jobs) {
  static const int k3[3] = {3, 7, 11}, k_3[1] = {3}, k_7[1] = {7}, k_11[1] = {11};
  const int ch[4] = {512, 256, 128, 64}, L[3] = {8 * Tx, 40 * Tx, 120 * Tx + 1};
  for (int v = 0; v < HC_NV; v++) hc_sum[v] = hc_sum_all[v] = 0;
  hc_extra = 0;
  const int n1 = jobs;
  add_hconv(group, "conv_pre k5", n1, 80, 512, (const int[]){5}, 1, 1, 1, COSY_HACT_NONE, Tx + 4,
            Tx, 0, 0);
  add_hconv(group, "ups0 x8 k16", n1, 512, 256, (const int[]){16}, 1, 1, 8, COSY_HACT_LEAKY, Tx,
            L[0], 1, 0);
  for (int st = 0; st < 3; st++) {
    char *nm[3];
    for (int q = 0; q < 3; q++) nm[q] = malloc(32);
    snprintf(nm[0], 32, "rb%d c1 d1 snake", st);
    snprintf(nm[1], 32, "rb%d c1 d5", st);
    snprintf(nm[2], 32, "rb%d c2 +res", st);
    const int c = ch[st + 1];
    if (jobs == 1) { /* the three resblocks side by side */
      add_hconv(group, nm[0], 3, c, c, k3, 3, 1, 1, COSY_HACT_SNAKE, L[st], L[st], 0, 1);
      add_hconv(group, nm[1], 3, c, c, k3, 3, 5, 1, COSY_HACT_NONE, L[st], L[st], 0, 1);
      add_hconv(group, nm[2], 3, c, c, k3, 3, 1, 1, COSY_HACT_NONE, L[st], L[st], 1, 1);
    } else { /* a batch's launches hold one kernel size */
      add_hconv(group, nm[0], jobs, c, c, k_3, 1, 1, 1, COSY_HACT_SNAKE, L[st], L[st], 0, 1);
      add_hconv(group, nm[1], jobs, c, c, k_11, 1, 5, 1, COSY_HACT_NONE, L[st], L[st], 0, 1);
      add_hconv(group, nm[2], jobs, c, c, k_7, 1, 1, 1, COSY_HACT_NONE, L[st], L[st], 1, 1);
    }
  }
  /* extra: the launches TF32 runs on the old kernel (mean-of-3 inputs, strided downs) */
  hc_extra = 1;
  add_hconv_s(group, "ups1 x5 k11 mean3", n1, 256, 128, (const int[]){11}, 1, 1, 1, 5,
              COSY_HACT_MEAN3_LEAKY, 0, L[0], L[1], 1, 0);
  add_hconv_s(group, "ups2 x3 k7 mean3 refl", n1, 128, 64, (const int[]){7}, 1, 1, 1, 3,
              COSY_HACT_MEAN3_LEAKY, 1, L[1], L[2], 1, 0);
  add_hconv_s(group, "conv_post k7 mean3", n1, 64, 18, (const int[]){7}, 1, 1, 1, 1,
              COSY_HACT_MEAN3_LEAKY, 0, L[2], L[2], 0, 0);
  add_hconv_s(group, "down0 k30 s15", n1, 18, 256, (const int[]){30}, 1, 1, 15, 1,
              COSY_HACT_NONE, 0, L[2], L[0], 0, 0);
  add_hconv_s(group, "down1 k6 s3", n1, 18, 128, (const int[]){6}, 1, 1, 3, 1, COSY_HACT_NONE, 0,
              L[2], L[1], 0, 0);
  add_hconv_s(group, "down2 k1", n1, 18, 64, (const int[]){1}, 1, 1, 1, 1, COSY_HACT_NONE, 0,
              L[2], L[2], 0, 0);
  hc_extra = 0;
  if (hc_sum[0] > 0) {
    printf("conv sum %-8s (the shapes above but the extra ones, us):", group);
    for (int v = 0; v < HC_NV; v++)
      printf(" | %s %.1f (x%.2f)", hc_vname[v], hc_sum[v], hc_sum[0] / hc_sum[v]);
    printf("\n");
    printf("conv sum all %-8s (every shape above, us):", group);
    for (int v = 0; v < HC_NV; v++)
      printf(" | %s %.1f (x%.2f)", hc_vname[v], hc_sum_all[v], hc_sum_all[0] / hc_sum_all[v]);
    printf(" | f16/tf32 x%.2f | staged/f16 x%.2f\n",
           hc_sum_all[HC_TF32_AUTO] / hc_sum_all[HC_F16_AUTO],
           hc_sum_all[HC_F16_AUTO] / hc_sum_all[HC_STAGED]);
  }
}

/* ---------------------------------------------------------------------------------------------
 * ceilings */

static cudaError_t r_copy(bench_op *o, int s) {
  (void)s;
  return cudaMemcpyAsync(o->p[1], o->p[0], (size_t)o->f[0], cudaMemcpyDeviceToDevice, g_stream);
}
static cudaError_t r_gemm_ceiling(bench_op *o, int s) {
  (void)s;
  const int n = o->i[0];
  return cosy_k_gemm(g_gemm, g_stream, n, n, n, BF16, o->p[0], n, o->p[1], NULL, BF16, o->p[2], n,
                     0);
}

/* Host time of a cosy_k_gemm call whose row count M is new to the handle (a plan is built: with
 * cosy_gemm_set_bucket(g, 0) a heuristic query per M, by default one per power-of-two bucket)
 * against a call with a cached plan: the cost a flow batch or LLM prefill piece of new size pays per GEMM
 * shape before its launches. 24 new M in [1000, 4000), N = 3072, K = 1024, bf16. */
static double host_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void bench_gemm_plans(void) {
  const int N = 3072, K = 1024, MMAX = 4000, n_new = 24;
  void *x = drand((size_t)MMAX * K, BF16, -1.f, 1.f), *w = drand((size_t)N * K, BF16, -1.f, 1.f);
  void *y = dalloc((size_t)MMAX * N * 2);
  double t_new[2] = {0, 0}, t_cached = 0;
  for (int mode = 0; mode < 2; mode++) { /* 0: per-M heuristic, 1: bucketed (the default) */
    cosy_gemm *g = NULL;
    CK(cosy_gemm_create(&g, 0));
    cosy_gemm_set_bucket(g, mode ? 2 : 0);
    CK(cosy_k_gemm(g, g_stream, 777, N, K, BF16, x, K, w, NULL, BF16, y, N, 0)); /* warm-up */
    CK(cudaStreamSynchronize(g_stream));
    for (int i = 0; i < n_new; i++) {
      const int M = 1000 + i * 125 + 3;
      double t0 = host_s();
      CK(cosy_k_gemm(g, g_stream, M, N, K, BF16, x, K, w, NULL, BF16, y, N, 0));
      t_new[mode] += host_s() - t0;
      CK(cudaStreamSynchronize(g_stream));
      if (mode == 1) {
        t0 = host_s();
        CK(cosy_k_gemm(g, g_stream, M, N, K, BF16, x, K, w, NULL, BF16, y, N, 0));
        t_cached += host_s() - t0;
        CK(cudaStreamSynchronize(g_stream));
      }
    }
    cosy_gemm_destroy(g);
  }
  printf("gemm plan host time for a new row count (24 M in [1000, 4000), %dx%d bf16): %.3f ms with "
         "a heuristic query per M, %.3f ms bucketed (default); %.3f ms with the plan cached\n\n",
         N, K, t_new[0] / n_new * 1e3, t_new[1] / n_new * 1e3, t_cached / n_new * 1e3);
  CK(cudaFree(x));
  CK(cudaFree(w));
  CK(cudaFree(y));
}

/* the median of five timings (sorts them) */
static float median5(float t[5]) {
  for (int a = 0; a < 5; a++)
    for (int b = a + 1; b < 5; b++)
      if (t[b] < t[a]) {
        const float x = t[a];
        t[a] = t[b], t[b] = x;
      }
  return t[2];
}

/* The flow's four block GEMMs (D 1024, ff 2048; bf16 in; qkv and ff1 bf16 out, ff1 with the bias
 * + GELU epilogue; o and ff2 fp32 out) at the row counts packed flow batches have (2 x new
 * frames), device time a call under each algorithm rule of cosy_gemm_set_bucket: 2 the default
 * (the algorithm chosen at the top of M's power-of-two bucket), 0 the heuristic's choice for M
 * itself, 3 four buckets per octave. Back-to-back launches on a stream, events around 20 calls
 * after a warm-up, the median of 5; one table, printed when BENCH_GEMM_ROWS is set. */
static void bench_gemm_rows(void) {
  static const int Ms[] = {240, 560, 800, 1120, 1500, 2000, 2600, 3000, 4000};
  static const int modes[] = {2, 0, 3};
  static const struct {
    const char *name;
    int N, K, f32_out, gelu;
  } sh[] = {{"qkv", 3072, 1024, 0, 0}, {"o", 1024, 1024, 1, 0}, {"ff1+gelu", 2048, 1024, 0, 1},
            {"ff2", 1024, 2048, 1, 0}};
  const int MMAX = 4000, NMAX = 3072, KMAX = 2048;
  void *x = drand((size_t)MMAX * KMAX, BF16, -1.f, 1.f);
  void *w = drand((size_t)NMAX * KMAX, BF16, -0.05f, 0.05f);
  void *bias = drand(NMAX, F32, -0.1f, 0.1f), *bias_y = drand(NMAX, BF16, -0.1f, 0.1f);
  void *y = dalloc((size_t)MMAX * NMAX * 4);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  printf("flow GEMMs by row count (us a call; TFLOP/s), algorithm rule 2 = bucket top (default), "
         "0 = per M, 3 = quarter octaves\n%-9s %5s", "gemm", "M");
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) printf("   rule %d (TF/s)", modes[m]);
  printf("\n");
  for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
    for (size_t j = 0; j < sizeof Ms / sizeof Ms[0]; j++) {
      const int M = Ms[j], N = sh[i].N, K = sh[i].K;
      printf("%-9s %5d", sh[i].name, M);
      for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        cosy_gemm *g = NULL;
        CK(cosy_gemm_create(&g, 0));
        cosy_gemm_set_bucket(g, modes[m]);
        float med[5];
        for (int r = -1; r < 5; r++) {
          CK(cudaEventRecord(e0, g_stream));
          for (int c = 0; c < 20; c++) {
            if (sh[i].gelu)
              CK(cosy_k_gemm_gelu(g, g_stream, M, N, K, BF16, x, K, w, (const float *)bias, bias_y,
                                  BF16, y, N));
            else
              CK(cosy_k_gemm(g, g_stream, M, N, K, BF16, x, K, w, NULL, sh[i].f32_out ? F32 : BF16,
                             y, N, 0));
          }
          CK(cudaEventRecord(e1, g_stream));
          CK(cudaEventSynchronize(e1));
          float ms = 0;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          if (r >= 0) med[r] = ms * 1e3f / 20;
        }
        const float t = median5(med);
        printf("  %7.2f (%5.0f)", t, 2.0 * M * N * K / (t * 1e-6) / 1e12);
        cosy_gemm_destroy(g);
      }
      printf("\n");
    }
  printf("\n");
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaFree(x));
  CK(cudaFree(w));
  CK(cudaFree(bias));
  CK(cudaFree(bias_y));
  CK(cudaFree(y));
}

/* The flow's four block GEMMs at the small row counts of a single request's streaming calls
 * (2 x 56 .. 2 x 156 rows): every candidate cuBLASLt's heuristic offers (up to 32, asked for M
 * itself), device time a call with the weights rotated over > 3x L2 (as the flow's 22 blocks
 * stream theirs from DRAM), 20 calls captured in a CUDA graph and replayed, median of 5; with the
 * candidate's tile, split-K, reduction scheme, stages and cluster shape (cublasLt.h's
 * CUBLASLT_ALGO_CONFIG_* enums) and, first, the engine's own choice through cosy_k_gemm. The
 * plain product (no bias, no GELU) for every shape: which kernel a small call should run.
 * Printed when BENCH_GEMM_ALGOS is set. */
static float time_graph20(cudaGraphExec_t ge, cudaEvent_t e0, cudaEvent_t e1) {
  float med[5];
  for (int r = -1; r < 5; r++) {
    CK(cudaEventRecord(e0, g_stream));
    CK(cudaGraphLaunch(ge, g_stream));
    CK(cudaEventRecord(e1, g_stream));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 0) med[r] = ms * 1e3f / 20;
  }
  return median5(med);
}
/* BENCH_GEMM_ALGOS=2: beyond the heuristic's list, every algorithm id the library has for
 * bf16 x bf16 -> ydt (fp32 compute) with each of its tiles, split-K 1, 2, 3, 4, 6, 8 and each
 * reduction scheme it supports (the first stages id that passes cublasLtMatmulAlgoCheck), timed as
 * above; the 12 fastest printed. */
static float time_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                       cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                       const cublasLtMatmulAlgo_t *algo, const void *x, const void *w,
                       size_t wbytes, int nrot, void *y, void *ws, size_t ws_bytes, cudaEvent_t e0,
                       cudaEvent_t e1) {
  const float one = 1.f, zero = 0.f;
  cudaGraph_t gr;
  cudaGraphExec_t ge;
  int ok = 1;
  CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeRelaxed));
  for (int c = 0; c < 20 && ok; c++) {
    const void *wc = (const char *)w + (size_t)(c % nrot) * wbytes;
    ok = cublasLtMatmul(lt, op, &one, wc, la, x, lb, &zero, y, lc, y, lc, algo, ws, ws_bytes,
                        g_stream) == CUBLAS_STATUS_SUCCESS;
  }
  CK(cudaStreamEndCapture(g_stream, &gr));
  float t = -1.f;
  if (ok && cudaGraphInstantiate(&ge, gr, 0) == cudaSuccess) {
    t = time_graph20(ge, e0, e1);
    CK(cudaGraphExecDestroy(ge));
  }
  CK(cudaGraphDestroy(gr));
  cudaGetLastError();
  return t;
}
static void gemm_algo_search(cublasLtHandle_t lt, cublasLtMatmulDesc_t op,
                             cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                             cublasLtMatrixLayout_t lc, const void *x, const void *w, size_t wbytes,
                             int nrot, void *y, void *ws, size_t ws_bytes, cudaDataType_t ydt,
                             cudaEvent_t e0, cudaEvent_t e1) {
  enum { MAXR = 4096 };
  static struct {
    float t;
    int id, tile, sk, red, stages;
  } rs[MAXR];
  int nr = 0, ids[256], nid = 0;
  cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, ydt, ydt,
                           256, ids, &nid);
  static const int sks[] = {1, 2, 3, 4, 6, 8};
  for (int a = 0; a < nid && nr < MAXR; a++) {
    cublasLtMatmulAlgo_t algo;
    if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, ydt,
                               ydt, ids[a], &algo) != CUBLAS_STATUS_SUCCESS)
      continue;
    size_t sz = 0;
    uint32_t tiles[128], stages[128];
    int ntile = 0, nstage = 0, sksup = 0;
    uint32_t redmask = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, sizeof tiles, &sz) ==
        CUBLAS_STATUS_SUCCESS)
      ntile = (int)(sz / sizeof tiles[0]);
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, sizeof stages, &sz) ==
        CUBLAS_STATUS_SUCCESS)
      nstage = (int)(sz / sizeof stages[0]);
    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &sksup, sizeof sksup, &sz);
    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &redmask,
                                      sizeof redmask, &sz);
    if (ntile == 0) tiles[ntile++] = 0;
    if (nstage == 0) stages[nstage++] = 0;
    printf("    algo id %d: %d tiles, %d stages, split-K %d, reductions 0x%x\n", ids[a], ntile, nstage,
           sksup, redmask);
    for (int ti = 0; ti < ntile; ti++)
      for (size_t ki = 0; ki < sizeof sks / sizeof sks[0]; ki++) {
        if (sks[ki] > 1 && !sksup) continue;
        for (int red = 0; red <= 4; red = red ? red * 2 : 1) {
          if ((sks[ki] == 1) != (red == 0)) continue;
          if (red && !(redmask & (uint32_t)red)) continue;
          for (int si = 0; si < nstage && nr < MAXR; si++) {
            const uint32_t tile = tiles[ti], st = stages[si], sk = (uint32_t)sks[ki], rd = (uint32_t)red;
            cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile);
            cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &st, sizeof st);
            cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof sk);
            cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &rd, sizeof rd);
            cublasLtMatmulHeuristicResult_t chk;
            memset(&chk, 0, sizeof chk);
            if (cublasLtMatmulAlgoCheck(lt, op, la, lb, lc, lc, &algo, &chk) != CUBLAS_STATUS_SUCCESS ||
                chk.workspaceSize > ws_bytes)
              continue;
            const float t = time_algo(lt, op, la, lb, lc, &algo, x, w, wbytes, nrot, y, ws, ws_bytes, e0, e1);
            if (t > 0) {
              rs[nr].t = t, rs[nr].id = ids[a], rs[nr].tile = (int)tile, rs[nr].sk = (int)sk;
              rs[nr].red = (int)rd, rs[nr].stages = (int)st;
              nr++;
            }
            break; /* the first stages id that passes */
          }
        }
      }
  }
  for (int i = 0; i < nr && i < 12; i++) { /* partial selection sort: the 12 fastest */
    int b = i;
    for (int j = i + 1; j < nr; j++)
      if (rs[j].t < rs[b].t) b = j;
    if (b != i) {
      const __typeof__(rs[0]) tmp = rs[i];
      rs[i] = rs[b], rs[b] = tmp;
    }
    printf("  search %2d: %7.2f us  algo %3d tile %3d splitk %d red %d stages %d\n", i, rs[i].t,
           rs[i].id, rs[i].tile, rs[i].sk, rs[i].red, rs[i].stages);
  }
  printf("  (%d configurations timed)\n", nr);
}
static void bench_gemm_algos(void) {
  static const int Ms[] = {112, 212, 312, 512};
  static const struct {
    const char *name;
    int N, K, f32_out;
  } sh[] = {{"qkv", 3072, 1024, 0}, {"o", 1024, 1024, 1}, {"ff1", 2048, 1024, 0},
            {"ff2", 1024, 2048, 1}};
  const int MMAX = 512, KMAX = 2048, NMAX = 3072, NC = 32;
  const size_t wbytes = (size_t)NMAX * KMAX * 2;
  int nrot = (int)((3 * g_l2) / wbytes + 1);
  if (nrot < 2) nrot = 2;
  void *x = drand((size_t)MMAX * KMAX, BF16, -1.f, 1.f);
  void *w = drand((size_t)nrot * NMAX * KMAX, BF16, -0.05f, 0.05f);
  void *y = dalloc((size_t)MMAX * NMAX * 4);
  size_t ws_bytes = (size_t)32 << 20;
  void *ws = dalloc(ws_bytes);
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    printf("gemm algos: cublasLtCreate failed\n");
    return;
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  printf("flow GEMMs at small M, every heuristic candidate (us a call, weights from DRAM, graph of 20)\n");
  for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
    for (size_t j = 0; j < sizeof Ms / sizeof Ms[0]; j++) {
      const int M = Ms[j], N = sh[i].N, K = sh[i].K;
      const cudaDataType_t ydt = sh[i].f32_out ? CUDA_R_32F : CUDA_R_16BF;
      const double wmb = (double)N * K * 2 / 1e6;
      /* the engine's choice */
      cudaGraph_t gr;
      cudaGraphExec_t ge;
      CK(cosy_k_gemm(g_gemm, g_stream, M, N, K, BF16, x, K, w, NULL, sh[i].f32_out ? F32 : BF16, y,
                     N, 0));
      CK(cudaStreamSynchronize(g_stream));
      CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeRelaxed));
      for (int c = 0; c < 20; c++)
        CK(cosy_k_gemm(g_gemm, g_stream, M, N, K, BF16, x, K, (const char *)w + (size_t)(c % nrot) * wbytes,
                       NULL, sh[i].f32_out ? F32 : BF16, y, N, 0));
      CK(cudaStreamEndCapture(g_stream, &gr));
      CK(cudaGraphInstantiate(&ge, gr, 0));
      const float t_eng = time_graph20(ge, e0, e1);
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(gr));
      printf("%-4s M %4d N %4d K %4d (%.1f MB of weights, floor %.2f us at 4.8 TB/s): engine %.2f us\n",
             sh[i].name, M, N, K, wmb, wmb / 4.8, t_eng);
      /* the candidates (TN as gemm.cu: A = W^T op T, B = x^T, C = D = y^T) */
      cublasLtMatmulDesc_t op;
      cublasLtMatrixLayout_t la, lb, lc;
      const cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
      cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA);
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB);
      cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K);
      cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K);
      cublasLtMatrixLayoutCreate(&lc, ydt, N, M, N);
      cublasLtMatmulPreference_t pref;
      cublasLtMatmulPreferenceCreate(&pref);
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                           sizeof ws_bytes);
      cublasLtMatmulHeuristicResult_t res[NC];
      int nres = 0;
      cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, NC, res, &nres);
      for (int a = 0; a < nres; a++) {
        int cfg[8] = {0};
        static const cublasLtMatmulAlgoConfigAttributes_t at[8] = {
            CUBLASLT_ALGO_CONFIG_ID,           CUBLASLT_ALGO_CONFIG_TILE_ID,
            CUBLASLT_ALGO_CONFIG_SPLITK_NUM,   CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
            CUBLASLT_ALGO_CONFIG_STAGES_ID,    CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
            CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION};
        for (int q = 0; q < 8; q++) {
          uint32_t v = 0;
          size_t wr = 0;
          cublasLtMatmulAlgoConfigGetAttribute(&res[a].algo, at[q], &v, sizeof v, &wr);
          cfg[q] = (int)v;
        }
        if (res[a].workspaceSize > ws_bytes) continue;
        const float t = time_algo(lt, op, la, lb, lc, &res[a].algo, x, w, wbytes, nrot, y, ws,
                                  ws_bytes, e0, e1);
        printf("  cand %2d: %7.2f us  algo %3d tile %3d splitk %2d red %d stages %3d cluster %2d swz %d "
               "custom %d waves %.2f ws %zu\n",
               a, t, cfg[0], cfg[1], cfg[2], cfg[3], cfg[4], cfg[5], cfg[6], cfg[7],
               res[a].wavesCount, res[a].workspaceSize);
      }
      if (atoi(getenv("BENCH_GEMM_ALGOS")) >= 2 && M <= 212)
        gemm_algo_search(lt, op, la, lb, lc, x, w, wbytes, nrot, y, ws, ws_bytes, ydt, e0, e1);
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatmulDescDestroy(op);
    }
  printf("\n");
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  cublasLtDestroy(lt);
  CK(cudaFree(x));
  CK(cudaFree(w));
  CK(cudaFree(y));
  CK(cudaFree(ws));
}

/* ---------------------------------------------------------------------------------------------
 * the families' benchmarks (tests/kregistry.c names them): each adds its rows of one scenario */

void bench_norm(const kh_scn *s) {
  if (s->kind == KH_SCN_LLM_DECODE) add_norms_llm(s->group, s->n);
  if (s->kind == KH_SCN_DIT) add_dit(s->group, s->n, "norm");
}
void bench_rope(const kh_scn *s) {
  if (s->kind == KH_SCN_LLM_DECODE) add_rope_neox(s->group, s->n);
  if (s->kind == KH_SCN_DIT) add_dit(s->group, s->n, "rope");
}
void bench_act(const kh_scn *s) {
  if (s->kind == KH_SCN_LLM_DECODE) add_silu_mul(s->group, s->n, 4864);
  if (s->kind == KH_SCN_DIT) add_dit(s->group, s->n, "act");
  if (s->kind == KH_SCN_ACT) add_act(s->group);
}
void bench_embed(const kh_scn *s) {
  if (s->kind == KH_SCN_LLM_DECODE) add_embed(s->group, s->n);
}
void bench_gemm(const kh_scn *s) {
  const char *grp = s->group;
  const int B = s->n;
  if (s->kind == KH_SCN_LLM_DECODE) {
    add_gemm(grp, "gemm qkv", B, 1152, 896, BF16, 1);
    add_gemm(grp, "gemm o 896x896", B, 896, 896, BF16, 0);
    add_gemm(grp, "gemm up 4864x896", B, 4864, 896, BF16, 0);
    add_gemm(grp, "gemm gate|up", B, 9728, 896, BF16, 0);
    add_gemm(grp, "gemm down", B, 896, 4864, BF16, 0);
    add_gemm(grp, "gemm head 6761", B, 6761, 896, F32, 0);
  }
  if (s->kind == KH_SCN_PREFILL) {
    add_gemm(grp, "gemm qkv", s->n, 1152, 896, BF16, 1);
    add_gemm(grp, "gemm down", s->n, 896, 4864, BF16, 0);
  }
  if (s->kind == KH_SCN_DIT) add_dit(grp, s->n, "gemm");
}
void bench_sample(const kh_scn *s) {
  if (s->kind != KH_SCN_LLM_DECODE) return;
  add_sampling(s->group, s->n);
  add_ras(s->group, s->n);
}
void bench_attention(const kh_scn *s) {
  if (s->kind == KH_SCN_LLM_DECODE) {
    add_paged(s->group, s->n, 200);
    add_paged(s->group, s->n, 1000);
    /* with the q|k|v projection before it (the pair's time), plain and with the early loads;
     * contexts 200, 1000 and W2's mix (0) */
    static const int ctxs[] = {200, 1000, 0};
    for (int c = 0; c < 3; ++c)
      for (int early = 0; early < 2; ++early)
        add_paged_chain(s->group, s->n, ctxs[c], early ? COSY_K_DECODE_EARLY : 0);
  }
  if (s->kind == KH_SCN_DIT) add_dit(s->group, s->n, "attention");
}
void bench_paged_prefill(const kh_scn *s) {
  if (s->kind != KH_SCN_PREFILL) return;
  add_paged_prefill(s->group, 1, s->n);  /* one prompt of the scenario's length */
  add_paged_prefill(s->group, 8, 120);   /* test_gpu_llm's packed prefill */
  add_paged_prefill(s->group, 64, 126);  /* a burst of 64 requests */
}
void bench_llm_gemv(const kh_scn *s) {
  const char *grp = s->group;
  const int B = s->n;
  /* the fused GEMMs of the decode path: the tensor-core kernel (every batch, the default) and
   * the CUDA-core skinny GEMM (batches <= 8) */
  if (s->kind != KH_SCN_LLM_DECODE || B > 256) return;
  /* tc 1: the tensor-core kernel as the decode step runs it (beyond 8 rows x split once by its
   * own kernel, the row counted in the time); tc 2 ("nosplit", beyond 8 rows only): every block
   * splits its k-blocks; tc 3 ("gemv_tcb", beyond 8 rows only): tc 1 with the weights as mma's
   * B operand (COSY_LLM_GEMVB=1); tc 0: the CUDA-core kernel (up to 8 rows). The "xfrag" rows:
   * the same calls with x's fragments once per block (args xfrag 1, COSY_LLM_XFRAG; where x is
   * split in the blocks: tc 1 up to 8 rows, tc 2 beyond), beside the per-warp rows they
   * replace; "xfrag2" (up to 8 rows): xfrag 2, the same without staging x in shared memory */
  static const char *const nm[7][5] = {
      {"gemv rmsnorm+qkv+rope", "gemv o (+= h)", "gemv rmsnorm+gate|up+silu", "gemv down (+= h)",
       "gemv rmsnorm+head"},
      {"gemv_tc rmsnorm+qkv+rope", "gemv_tc o (+= h)", "gemv_tc rmsnorm+gate|up+silu",
       "gemv_tc down (+= h)", "gemv_tc rmsnorm+head"},
      {"gemv_tc nosplit qkv", "gemv_tc nosplit o", "gemv_tc nosplit gate|up",
       "gemv_tc nosplit down", "gemv_tc nosplit head"},
      {"gemv_tc xfrag qkv", "gemv_tc xfrag o", "gemv_tc xfrag gate|up", "gemv_tc xfrag down",
       "gemv_tc xfrag head"},
      {"gemv_tc nosplit xfrag qkv", "gemv_tc nosplit xfrag o", "gemv_tc nosplit xfrag gate|up",
       "gemv_tc nosplit xfrag down", "gemv_tc nosplit xfrag head"},
      {"gemv_tc xfrag2 qkv", "gemv_tc xfrag2 o", "gemv_tc xfrag2 gate|up", "gemv_tc xfrag2 down",
       "gemv_tc xfrag2 head"},
      {"gemv_tcb rmsnorm+qkv+rope", "gemv_tcb o (+= h)", "gemv_tcb rmsnorm+gate|up+silu",
       "gemv_tcb down (+= h)", "gemv_tcb rmsnorm+head"}};
  /* the model's five decode matrices, in nm's column order */
  static const char *const mat[5] = {"qkv", "o", "gate|up", "down", "head"};
  static const int mn[5] = {1152, 896, 9728, 896, 6761}, mk[5] = {896, 896, 896, 4864, 896};
  static const cosy_llm_gemv_in mi[5] = {COSY_GEMV_IN_RMSNORM, COSY_GEMV_IN_F32, COSY_GEMV_IN_RMSNORM,
                                         COSY_GEMV_IN_F32, COSY_GEMV_IN_RMSNORM};
  static const cosy_llm_gemv_out mo[5] = {COSY_GEMV_QKV_ROPE, COSY_GEMV_ADD_F32, COSY_GEMV_SILU_MUL,
                                          COSY_GEMV_ADD_F32, COSY_GEMV_STORE_F32};
  const int order[7] = {1, 3, 5, 6, 2, 4, 0}; /* rows of nm */
  for (int oi = 0; oi < 7; ++oi) {
    const int r = order[oi], tc = r == 6 ? 3 : r == 3 || r == 5 ? 1 : r == 4 ? 2 : r;
    const int xf = r == 5 ? 2 : r == 3 || r == 4;
    if ((tc == 0 && B > 8) || ((tc == 2 || tc == 3) && B <= 8) || ((r == 3 || r == 5) && B > 8))
      continue;
    for (int m = 0; m < 5; ++m) add_llm_gemv(grp, nm[r][m], B, mn[m], mk[m], mi[m], mo[m], tc, xf);
  }
  /* BENCH_TCB_SHAPES=1: gemv_tcb under each block shape forced (args tcb_shape; the rule of
   * kernels/gemv.cu tcb_shape picks among them) */
  const char *sh = getenv("BENCH_TCB_SHAPES");
  if (B > 8 && sh && *sh && strcmp(sh, "0")) {
    static char names[5][3][32]; /* the table keeps the name pointers until it prints */
    for (int m = 0; m < 5; ++m)
      for (int shape = 1; shape <= 3; ++shape) {
        char *name = names[m][shape - 1];
        snprintf(name, sizeof names[m][shape - 1], "gemv_tcb shape %d %s", shape, mat[m]);
        add_llm_gemv_s(grp, name, B, mn[m], mk[m], mi[m], mo[m], 3, 0, shape);
      }
  }
}
void bench_llm_step_ops(const kh_scn *s) {
  if (s->kind == KH_SCN_LLM_DECODE) add_llm_step_ops(s->group, s->n);
  if (s->kind == KH_SCN_PREFILL) add_llm_step_ops(s->group, s->n);
}
void bench_dit_elementwise(const kh_scn *s) {
  if (s->kind == KH_SCN_DIT) add_flow_ops(s->group, s->n, "dit_elementwise");
}
void bench_resid_ln(const kh_scn *s) {
  if (s->kind == KH_SCN_DIT) add_flow_ops(s->group, s->n, "resid_ln");
}
void bench_conv_pos(const kh_scn *s) {
  if (s->kind == KH_SCN_DIT) add_flow_ops(s->group, s->n, "conv_pos");
}
void bench_flow_pack(const kh_scn *s) {
  if (s->kind == KH_SCN_DIT) add_flow_ops(s->group, s->n, "flow_pack");
}
void bench_attn_dit_paged(const kh_scn *s) {
  if (s->kind == KH_SCN_DIT) add_flow_ops(s->group, s->n, "attn_dit_paged");
  if (s->kind == KH_SCN_DIT_CALLS) add_dit_calls(s->group);
}
void bench_hift(const kh_scn *s) {
  if (s->kind != KH_SCN_VOC) return;
  static int prepared;
  if (!prepared) {
    CK(cosy_k_hift_conv_prepare(&g_dev));
    prepared = 1;
  }
  const int jobs = s->n / 1000, T = s->n % 1000; /* n = 1000 jobs + mel frames */
  add_voc(s->group, T == 224 ? T : T - 7, jobs ? jobs : 1);
}

/* the scenarios, in the table's order */
static const kh_scn g_scns[] = {
    {"llm b1", KH_SCN_LLM_DECODE, 1}, {"llm b16", KH_SCN_LLM_DECODE, 16},
    {"llm b32", KH_SCN_LLM_DECODE, 32}, {"llm b48", KH_SCN_LLM_DECODE, 48},
    {"llm b64", KH_SCN_LLM_DECODE, 64},   {"llm b96", KH_SCN_LLM_DECODE, 96},
    {"llm b128", KH_SCN_LLM_DECODE, 128}, {"llm b224", KH_SCN_LLM_DECODE, 224}, /* ~W2's rows */
    {"prefill", KH_SCN_PREFILL, 300},
    {"dit 116", KH_SCN_DIT, 116}, /* a single request's first chunk: 56 new frames + 60 context */
    {"dit 400", KH_SCN_DIT, 400},
    {"dit 1000", KH_SCN_DIT, 1000},   {"dit call", KH_SCN_DIT_CALLS, 0},
    {"act", KH_SCN_ACT, 0},
    /* the vocoder (n = 1000 jobs + mel frames): a non-final call of 100 frames, a final call of
     * 224, a batch of 16 non-final calls of 100 */
    {"voc s100", KH_SCN_VOC, 100},    {"voc f224", KH_SCN_VOC, 224},
    {"voc b16", KH_SCN_VOC, 16100},
};

int kh_run_bench(const char *filter) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!kh_device_probe()) return 0;
  kh_rng_set(0x243F6A8885A308D3ull);
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0, mem_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0);
  g_l2 = (size_t)prop.l2CacheSize;
  printf("device: %s, sm_%d%d, %d SMs, L2 %.0f MB, %.1f GB, clock %.0f MHz\n", prop.name,
         prop.major, prop.minor, prop.multiProcessorCount, g_l2 / 1e6, prop.totalGlobalMem / 1e9,
         clock_khz / 1e3);
  /* the description of the launchers that take one (lib/gpu/gpu.c's cosy_gpu_describe builds the
   * engine's; this program also builds without the library, bench/device_kernels.sh): the
   * profiles without clusters and programmatic dependent launch (a100, ada) take them away */
  {
    kh_describe_device(&g_dev, 0);
    const char *pr = getenv("COSY_GPU_PROFILE");
    if (pr && (!strcmp(pr, "a100") || !strcmp(pr, "ada"))) {
      g_dev.clusters = g_dev.pdl = 0;
      printf("COSY_GPU_PROFILE=%s: no clusters, no programmatic dependent launch\n", pr);
    }
  }
  CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  CK(cosy_gemm_create(&g_gemm, 0));
  if (getenv("BENCH_PEAK_GBS")) g_peak_gbs = atof(getenv("BENCH_PEAK_GBS"));
  if (getenv("BENCH_PEAK_TFLOPS")) g_peak_tfs = atof(getenv("BENCH_PEAK_TFLOPS"));
  printf("data-sheet ceilings (%%hbm, %%bf16 columns): %.0f GB/s, %.0f TFLOP/s\n", g_peak_gbs,
         g_peak_tfs);

  /* ceilings */
  bench_op *cp = new_op("ceiling", "d2d copy");
  const size_t cbytes = (size_t)512 << 20;
  snprintf(cp->size, sizeof cp->size, "512 MiB");
  cp->p[0] = drand(cbytes / 4, F32, -1.f, 1.f);
  cp->p[1] = dalloc(cbytes);
  cp->f[0] = (float)cbytes;
  cp->bytes = 2.0 * cbytes;
  cp->run = r_copy;
  time_op(cp);
  g_copy_gbs = cp->bytes / (cp->us * 1e-6) / 1e9;

  bench_op *gm = new_op("ceiling", "gemm bf16");
  const int gn = 8192;
  snprintf(gm->size, sizeof gm->size, "%dx%dx%d bf16->bf16", gn, gn, gn);
  gm->i[0] = gn;
  gm->p[0] = drand((size_t)gn * gn, BF16, -1.f, 1.f);
  gm->p[1] = drand((size_t)gn * gn, BF16, -1.f, 1.f);
  gm->p[2] = dalloc((size_t)gn * gn * 2);
  gm->flops = 2.0 * gn * gn * gn;
  gm->bytes = 3.0 * gn * gn * 2;
  gm->run = r_gemm_ceiling;
  time_op(gm);
  g_gemm_tfs = gm->flops / (gm->us * 1e-6) / 1e12;
  printf("ceilings: copy %.0f GB/s (read+write), bf16 gemm %.0f TFLOP/s\n\n", g_copy_gbs,
         g_gemm_tfs);
  bench_gemm_plans();
  if (getenv("BENCH_GEMM_ROWS")) bench_gemm_rows();
  if (getenv("BENCH_GEMM_ALGOS")) bench_gemm_algos();
  CK(cudaFree(cp->p[0]));
  CK(cudaFree(cp->p[1]));
  CK(cudaFree(gm->p[0]));
  CK(cudaFree(gm->p[1]));
  CK(cudaFree(gm->p[2]));
  cp->p[0] = cp->p[1] = gm->p[0] = gm->p[1] = gm->p[2] = NULL;

  print_header();
  for (size_t k = 0; k < sizeof g_scns / sizeof g_scns[0]; ++k)
    for (int i = 0; i < kh_n_registry; ++i) {
      const kh_entry *e = &kh_registry[i];
      if (e->bench && kh_entry_selected(e, filter)) e->bench(&g_scns[k]);
    }
  CK(cudaStreamSynchronize(g_stream));

  printf("\n==== kernel table (%s; copy ceiling %.0f GB/s, gemm ceiling %.0f TFLOP/s; "
         "median us per call; device memory used %.1f GB) ====\n",
         prop.name, g_copy_gbs, g_gemm_tfs, g_dev_bytes / 1e9);
  print_header();
  for (int i = 0; i < g_nops; ++i)
    if (g_ops[i].us > 0) print_row(&g_ops[i]);
  cosy_gemm_destroy(g_gemm);
  CK(cudaStreamDestroy(g_stream));
  return 0;
}

#endif /* COSY_WITH_CUDA */
