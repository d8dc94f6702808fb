/* kharness.h - the kernel harness shared by the kernel tests (tests/test_kernels.c) and the kernel
 * benchmark (bench/bench_kernels.c), which are one program: build/tests/test_kernels runs the
 * tests by default and the benchmark with --bench (docs/kernels.md).
 *
 * 1. helpers both sides use: the random generator, bf16 conversion, device allocation, upload and
 *    download in a storage type, the device description the launchers take, the device probe;
 * 2. the registry (tests/kregistry.c): one entry per launcher family with the launchers it
 *    covers, its test, its benchmark (or why there is none) and the ceiling its benchmark rows
 *    are judged against. The test program and the benchmark iterate over it, and
 *    tools/check_kernel_registry.sh (make check-kernels, run by make test) fails when a
 *    cosy_k_* launcher declared in a kernels header is in no entry.
 *
 * CUDA errors in the helpers go to kh_on_error (set by the caller: the tests fail the current
 * test, the benchmark exits); the default prints and exits 1. */
#ifndef COSY_KHARNESS_H
#define COSY_KHARNESS_H

#include <stddef.h>
#include <stdint.h>

/* ---- the registry (usable without CUDA: tools and the SKIP path read it) ------------------- */

typedef enum {
  KH_CEIL_NONE = 0, /* nothing timed */
  KH_CEIL_HBM,      /* memory bound: judged by GB/s against the copy ceiling (%copy, %hbm) */
  KH_CEIL_BF16,     /* compute bound: judged by TFLOP/s against the GEMM ceiling (%gemm, %bf16) */
  KH_CEIL_BOTH      /* rows of both kinds (e.g. attention: decode is bytes, prefill is FLOPs) */
} kh_ceiling;

/* a benchmark scenario: the model sizes one group of benchmark rows runs at */
/* KH_SCN_DIT_CALLS: the packed flow's small calls (bench/bench_kernels.c add_dit_calls) */
typedef enum {
  KH_SCN_LLM_DECODE,
  KH_SCN_PREFILL,
  KH_SCN_DIT,
  KH_SCN_DIT_CALLS,
  KH_SCN_ACT,
  KH_SCN_VOC
} kh_scn_kind;
typedef struct {
  const char *group; /* the table's group column */
  kh_scn_kind kind;
  int n; /* batch (decode), tokens (prefill), frames (DiT), 1000 jobs + mel frames (vocoder) */
} kh_scn;

typedef struct {
  const char *name;             /* family name (the test is test_<name>; --bench NAME selects) */
  const char *const *launchers; /* NULL-terminated; "cosy_k_fe_*" covers a prefix */
  void (*test)(void **state);   /* cmocka test in tests/test_kernels.c, or NULL ... */
  const char *test_name;        /* its name ("test_norm") */
  const char *test_elsewhere;   /* ... with the test that covers the family instead */
  void (*bench)(const kh_scn *s); /* adds this family's rows of one scenario, or NULL ... */
  const char *no_bench;           /* ... with the reason */
  kh_ceiling ceiling;
} kh_entry;

extern const kh_entry kh_registry[];
extern const int kh_n_registry;
const char *kh_ceiling_name(kh_ceiling c);
/* 1 when filter is NULL/empty or equals the family name or one of its launchers */
int kh_entry_selected(const kh_entry *e, const char *filter);

/* ---- helpers (CUDA builds) ------------------------------------------------------------------ */
#ifdef COSY_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels.h"

/* the families' tests (tests/test_kernels.c), their benchmarks and the benchmark's main
 * (bench/bench_kernels.c); the registry names them */
void test_args(void **state);
void test_norm(void **state);
void test_rope(void **state);
void test_act(void **state);
void test_embed(void **state);
void test_gemm(void **state);
void test_sample(void **state);
void test_attention(void **state);
void test_paged_prefill(void **state);
void test_llm_gemv(void **state);
void test_dit_elementwise(void **state);
void test_flow_pack(void **state);
void test_attn_dit_paged(void **state);
void test_llm_step_ops(void **state);
void bench_norm(const kh_scn *s);
void bench_rope(const kh_scn *s);
void bench_act(const kh_scn *s);
void bench_embed(const kh_scn *s);
void bench_gemm(const kh_scn *s);
void bench_sample(const kh_scn *s);
void bench_attention(const kh_scn *s);
void bench_paged_prefill(const kh_scn *s);
void bench_llm_gemv(const kh_scn *s);
void bench_dit_elementwise(const kh_scn *s);
void bench_resid_ln(const kh_scn *s);
void bench_conv_pos(const kh_scn *s);
void bench_flow_pack(const kh_scn *s);
void bench_attn_dit_paged(const kh_scn *s);
void bench_hift(const kh_scn *s);
void bench_llm_step_ops(const kh_scn *s);
/* times the selected families (filter: a family or launcher name; NULL all); exit status */
int kh_run_bench(const char *filter);

extern void (*kh_on_error)(void);
void kh_cuda_error(cudaError_t e, const char *file, int line, const char *expr);
#define KH_CK(call)                                                   \
  do {                                                                \
    cudaError_t e_ = (call);                                          \
    if (e_ != cudaSuccess) kh_cuda_error(e_, __FILE__, __LINE__, #call); \
  } while (0)

/* xorshift64* generator; kh_rnd is uniform in [lo, hi) from the top 24 bits */
void kh_rng_seed(uint64_t s); /* state = s * golden + 12345 (the tests' per-test seeds) */
void kh_rng_set(uint64_t state);
uint64_t kh_rng_next(void);
float kh_rnd(float lo, float hi);
int kh_rnd_int(int n);

uint16_t kh_f2bf(float f); /* round to nearest even; NaN stays NaN */
float kh_bf2f(uint16_t b);
float kh_round_dt(float v, cosy_kdtype dt);
const char *kh_dtn(cosy_kdtype dt);
size_t kh_dts(cosy_kdtype dt);

extern size_t kh_dev_bytes;          /* device bytes allocated through kh_dmalloc */
void *kh_dmalloc(size_t bytes);      /* cudaMalloc (16 bytes for 0) */
void kh_dfree(void *p);              /* NULL is fine */
void kh_to_dev(void *d, float *h, size_t n, cosy_kdtype dt); /* h rounded in place to dt */
void kh_from_dev(float *h, const void *d, size_t n, cosy_kdtype dt); /* synchronizes first */
int32_t *kh_dup_i32(const int32_t *h, size_t n);

/* 0 and a "SKIP: no CUDA device (...)" line when there is none; else the device count */
int kh_device_probe(void);
/* the description the launchers that take one get (lib/gpu/gpu.c builds the engine's; this
 * program also builds without the library, bench/device_kernels.sh) */
void kh_describe_device(cosy_kdev *d, int device);
#endif

#endif
