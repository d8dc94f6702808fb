/* bench_kernels.c - times the CUDA kernels of kernels/kernels.h at the model's real sizes.
 *
 * Method (../.library METHOD: measure the two ceilings, then each kernel against them):
 *   1. Ceilings, measured here: device-to-device copy bandwidth (cudaMemcpyAsync of 512 MiB,
 *      counting bytes read + written) and a large bf16 GEMM (8192^3 through cosy_k_gemm, i.e.
 *      cuBLASLt, random data).
 *   2. Every kernel at the sizes the model runs: LLM decode at batch 1 and 64 (hidden 896,
 *      14/2 heads of 64, MLP 4864, speech vocab 6761, paged KV with 16-token pages at context 200
 *      and 1000), an LLM prefill of 300 tokens, and the DiT at N = 400 and 1000 frames with the
 *      CFG batch of 2 (dim 1024, 16 heads, ff 2048, block-causal chunks of 50).
 *   Timing: after warm-up, a batch of calls sized to ~1 ms is timed with CUDA events two ways:
 *   launched back-to-back on a stream ("us strm", includes launch gaps) and captured once into a
 *   CUDA graph and replayed ("us graph", how the engine runs its steps); the rates use the faster
 *   of the two (a graph's memcpy node runs slower than cudaMemcpyAsync, seen on an H200).
 *   Each is the median over 15 batches, per call. Inputs are random (never
 *   zeros). Where one call's inputs would fit in L2, the call cycles through enough copies of the
 *   large inputs (weights, KV caches) to exceed 3x the L2 size, so the numbers are DRAM numbers.
 *   Bytes counted = each input read once + each output written once; FLOPs = 2 x MACs.
 *   Reported: us per call, GB/s and % of the copy ceiling, TFLOP/s and % of the GEMM ceiling.
 * Output: progress lines while running, then the table last. Exit status 0 unless a CUDA call
 * fails. Without a device (or built without CUDA) it prints SKIP and exits 0.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef COSY_WITH_CUDA

int main(void) {
  printf("SKIP: built without CUDA\n");
  return 0;
}

#else

#include <cuda_runtime_api.h>

#include "kernels.h"
#include "llm_extra.h"

#define F32 COSY_KDT_F32
#define BF16 COSY_KDT_BF16

#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "CUDA error '%s' at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__,   \
              __LINE__, #call);                                                              \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static uint32_t rng32(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (uint32_t)((g_rng * 0x2545F4914F6CDD1Dull) >> 32);
}
static float rnd(float lo, float hi) { return lo + (hi - lo) * (float)(rng32() >> 8) / 16777216.f; }
static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static size_t dts(cosy_kdtype dt) { return dt == BF16 ? 2 : 4; }

static size_t g_dev_bytes; /* allocated so far */
static void *dalloc(size_t bytes) {
  void *p = NULL;
  CK(cudaMalloc(&p, bytes ? bytes : 16));
  g_dev_bytes += bytes;
  return p;
}
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
static int32_t *dints(const int32_t *h, size_t n) {
  int32_t *d = dalloc(n * 4);
  CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
  return d;
}

/* ---------------------------------------------------------------------------------------------
 * one benchmarked call: run(op, set) launches it on op->stream using rotation set `set` */

#define MAXP 10
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

static void *P(const bench_op *op, int k, int set) {
  return (char *)op->p[k] + (size_t)(set % op->nrot) * op->rot[k];
}
/* rotation sets so that `bytes` of rotated data per set span > 3x L2 (at most 256 sets) */
static int rot_sets(size_t bytes) {
  if (bytes == 0) return 1;
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

#define MAXOPS 96
static bench_op g_ops[MAXOPS];
static int g_nops;

static bench_op *new_op(const char *group, const char *name) {
  if (g_nops >= MAXOPS) exit(1);
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
  printf("%-8s %-17s %-31s %8s %8.2f %7.0f %5.0f%%", op->group, op->name, op->size, g,
         op->us_stream, gbs, 100.0 * gbs / g_copy_gbs);
  if (op->flops > 0)
    printf(" %7.1f %5.1f%%\n", tfs, 100.0 * tfs / g_gemm_tfs);
  else
    printf(" %7s %6s\n", "-", "-");
}
static void print_header(void) {
  printf("%-8s %-17s %-31s %8s %8s %7s %6s %7s %6s\n", "group", "op", "size", "us graph",
         "us strm", "GB/s", "%copy", "TFLOP/s", "%gemm");
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

static cudaError_t r_kv_append(bench_op *o, int s) {
  char *kv = P(o, 0, s);
  return cosy_k_kv_append(g_stream, BF16, kv + 896 * 2, kv + 1024 * 2, 1152, P(o, 1, s), o->i[0],
                          P(o, 2, s), P(o, 3, s), 2, 64);
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
  for (int i = 0; i < n_pages; ++i) bt[i] = i;
  for (int i = n_pages - 1; i > 0; --i) { /* scattered pages */
    const int j = (int)(rng32() % (uint32_t)(i + 1));
    const int32_t t = bt[i];
    bt[i] = bt[j];
    bt[j] = t;
  }
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
static void add_kv_append(const char *group, int B) {
  bench_op *o = new_op(group, "kv_append");
  snprintf(o->size, sizeof o->size, "%d tok, 2 kv heads bf16", B);
  o->i[0] = B;
  o->p[0] = drand((size_t)B * 1152, BF16, -1.f, 1.f);
  int32_t *slots = malloc((size_t)B * 4);
  for (int b = 0; b < B; ++b) slots[b] = b * 37 + 5;
  o->p[1] = dints(slots, (size_t)B);
  free(slots);
  o->p[2] = dalloc((size_t)B * 37 * 128 * 2 + 4096);
  o->p[3] = dalloc((size_t)B * 37 * 128 * 2 + 4096);
  o->bytes = B * (4.0 * 128 * 2 + 4);
  o->run = r_kv_append;
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

/* the decode path's own kernels: the fused skinny GEMM (llm_extra.h) and RAS sampling */
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
  return cosy_k_llm_gemv(g_stream, &ga);
}
static void add_llm_gemv(const char *group, const char *name, int M, int N, int K,
                         cosy_llm_gemv_in in, cosy_llm_gemv_out out) {
  bench_op *o = new_op(group, name);
  const int ny = out == COSY_GEMV_QKV_ROPE ? 14 * 64 : out == COSY_GEMV_SILU_MUL ? N / 2 : N;
  snprintf(o->size, sizeof o->size, "%dx%dx%d bf16 W, f32 x/y", M, N, K);
  o->i[0] = M, o->i[1] = N, o->i[2] = K, o->i[3] = in, o->i[4] = out, o->i[5] = ny;
  const size_t wbytes = (size_t)N * K * 2;
  o->nrot = rot_sets(wbytes);
  o->p[1] = drand_rot(o->nrot, (size_t)N * K, BF16, -0.05f, 0.05f, &o->rot[1]);
  o->p[0] = drand((size_t)M * K, F32, -1.f, 1.f);
  o->p[2] = drand((size_t)K, F32, 0.5f, 1.5f);
  o->p[3] = drand((size_t)M * ny, F32, -1.f, 1.f);
  int32_t pos[8], slots[8];
  for (int m = 0; m < 8; ++m) pos[m] = 100 + m, slots[m] = m;
  o->p[4] = dints(pos, 8);
  o->p[5] = dints(slots, 8);
  o->p[6] = drand(32, F32, 0.f, 1.f);
  o->p[7] = drand(16 * 2 * 64, F32, -1.f, 1.f);
  o->p[8] = drand(16 * 2 * 64, F32, -1.f, 1.f);
  o->bytes = (double)wbytes + (double)M * K * 4 + (double)M * ny * 4 * (out == COSY_GEMV_ADD_F32 ? 2 : 1);
  o->flops = 2.0 * M * N * K;
  o->run = r_llm_gemv;
  run_op(o);
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

static cudaError_t r_prefill(bench_op *o, int s) {
  char *qkv = P(o, 0, s);
  return cosy_k_attn_prefill(g_stream, BF16, qkv, 1152, qkv + 896 * 2, qkv + 1024 * 2, 1152,
                             P(o, 1, s), 896, o->i[0], o->i[0], 14, 2, 64, 0.125f);
}
static void add_prefill(const char *group, int L) {
  bench_op *o = new_op(group, "attn_prefill");
  snprintf(o->size, sizeof o->size, "L=%d causal 14/2 heads bf16", L);
  o->i[0] = L;
  o->p[0] = drand((size_t)L * 1152, BF16, -1.f, 1.f);
  o->p[1] = dalloc((size_t)L * 896 * 2);
  o->bytes = L * (1152.0 + 896) * 2;
  o->flops = 14.0 * 64 * 2 * 2 * ((double)L * (L + 1) / 2);
  o->run = r_prefill;
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
static void add_dit(const char *group, int N) {
  const size_t act = (size_t)2 * N * 1024;
  bench_op *o = new_op(group, "layernorm_mod");
  snprintf(o->size, sizeof o->size, "2x%dx1024 bf16", N);
  o->i[0] = N;
  o->p[0] = drand(act, BF16, -2.f, 2.f);
  o->p[1] = drand(2 * 6144, F32, -0.5f, 0.5f);
  o->p[2] = dalloc(act * 2);
  o->bytes = act * 4.0 + 2 * 2048 * 4.0;
  o->run = r_lnmod;
  run_op(o);

  o = new_op(group, "rope_interleaved");
  snprintf(o->size, sizeof o->size, "q,k 2x%dx1024 (ch 0..63) bf16", N);
  o->i[0] = N;
  o->p[0] = drand(act, BF16, -1.f, 1.f);
  o->p[1] = drand(act, BF16, -1.f, 1.f);
  o->bytes = 2.0 * 2 * N * 64 * 2 * 2;
  o->run = r_rope_il;
  run_op(o);

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

  add_gemm(group, "gemm qkvo", 2 * N, 1024, 1024, BF16, 1);
  add_gemm(group, "gemm ff1", 2 * N, 2048, 1024, BF16, 1);
  add_gemm(group, "gemm ff2", 2 * N, 1024, 2048, BF16, 1);
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

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int ndev = 0;
  const cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("SKIP: no CUDA device (%s)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 0;
  }
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
    int cl = 0;
    cudaDeviceGetAttribute(&cl, cudaDevAttrClusterLaunch, 0);
    cudaGetLastError();
    g_dev.cc_major = prop.major, g_dev.cc_minor = prop.minor, g_dev.n_sm = prop.multiProcessorCount;
    g_dev.clusters = prop.major >= 9 && cl, g_dev.pdl = prop.major >= 9;
    const char *pr = getenv("COSY_GPU_PROFILE");
    if (pr && (!strcmp(pr, "a100") || !strcmp(pr, "ada"))) {
      g_dev.clusters = g_dev.pdl = 0;
      printf("COSY_GPU_PROFILE=%s: no clusters, no programmatic dependent launch\n", pr);
    }
  }
  CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  CK(cosy_gemm_create(&g_gemm, 0));

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
  CK(cudaFree(cp->p[0]));
  CK(cudaFree(cp->p[1]));
  CK(cudaFree(gm->p[0]));
  CK(cudaFree(gm->p[1]));
  CK(cudaFree(gm->p[2]));
  cp->p[0] = cp->p[1] = gm->p[0] = gm->p[1] = gm->p[2] = NULL;

  print_header();
  for (int bi = 0; bi < 2; ++bi) {
    const int B = bi ? 64 : 1;
    const char *grp = bi ? "llm b64" : "llm b1";
    add_embed(grp, B);
    add_norms_llm(grp, B);
    add_gemm(grp, "gemm qkv", B, 1152, 896, BF16, 1);
    add_gemm(grp, "gemm o 896x896", B, 896, 896, BF16, 0);
    add_gemm(grp, "gemm up 4864x896", B, 4864, 896, BF16, 0);
    add_gemm(grp, "gemm gate|up", B, 9728, 896, BF16, 0);
    add_gemm(grp, "gemm down", B, 896, 4864, BF16, 0);
    add_gemm(grp, "gemm head 6761", B, 6761, 896, F32, 0);
    add_rope_neox(grp, B);
    add_kv_append(grp, B);
    add_paged(grp, B, 200);
    add_paged(grp, B, 1000);
    add_silu_mul(grp, B, 4864);
    add_sampling(grp, B);
    add_ras(grp, B);
    if (B <= 8) { /* the fused skinny GEMMs of the decode path (batches <= 4 by default) */
      add_llm_gemv(grp, "gemv rmsnorm+qkv+rope", B, 1152, 896, COSY_GEMV_IN_RMSNORM,
                   COSY_GEMV_QKV_ROPE);
      add_llm_gemv(grp, "gemv o (+= h)", B, 896, 896, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32);
      add_llm_gemv(grp, "gemv rmsnorm+gate|up+silu", B, 9728, 896, COSY_GEMV_IN_RMSNORM,
                   COSY_GEMV_SILU_MUL);
      add_llm_gemv(grp, "gemv down (+= h)", B, 896, 4864, COSY_GEMV_IN_F32, COSY_GEMV_ADD_F32);
      add_llm_gemv(grp, "gemv rmsnorm+head", B, 6761, 896, COSY_GEMV_IN_RMSNORM,
                   COSY_GEMV_STORE_F32);
    }
  }
  add_prefill("prefill", 300);
  add_gemm("prefill", "gemm qkv", 300, 1152, 896, BF16, 1);
  add_gemm("prefill", "gemm down", 300, 896, 4864, BF16, 0);
  add_dit("dit 400", 400);
  add_dit("dit 1000", 1000);
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
