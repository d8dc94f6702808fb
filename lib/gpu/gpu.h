/* gpu.h - the device context shared by the GPU stages (lib/gpu/ sources; built only with CUDA=1).
 *
 * One cosy_gpu per engine: the CUDA device, the main stream, the cuBLASLt GEMM context, and the
 * memory budget. Every device allocation of the engine goes through cosy_gpu_alloc, which
 * refuses to exceed budget = gpu_memory_fraction x total device memory (minus what the CUDA
 * context itself holds), so the engine never takes more than its share. All buffers are planned
 * at engine creation; nothing is allocated per step.
 *
 * Errors: cosy_gpu_check maps a cudaError_t to COSY_ERR_CUDA, or to COSY_ERR_DEVICE_LOST for
 * sticky errors (illegal address, launch failure, ...) after which the engine must be destroyed;
 * the CUDA message goes to cosy_last_error(). Nothing here aborts. */
#ifndef COSY_GPU_H
#define COSY_GPU_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cosyvoice.h"
#include "kdevice.h"
#include "kernels.h"
#include "knobs.h"
#include "model.h"

/* Device memory kept out of the budget for what cuBLAS and the CUDA runtime allocate on their
 * own (handles, module loads, graph instantiation): budget = fraction x total - this. */
#define COSY_GPU_RUNTIME_RESERVE ((size_t)256 << 20)

typedef struct cosy_gpu {
  int device;
  cosy_kdev dev;             /* the device as the launchers see it (kdevice.h; a child: a copy) */
  cudaStream_t stream;       /* main stream of the engine */
  cosy_gemm *gemm;           /* cuBLASLt context bound to `stream`'s thread of use */
  size_t total;              /* device memory */
  size_t budget;             /* bytes the engine may hold */
  size_t share;              /* gpu_memory_fraction x total (the fraction's budget, before the
                                runtime reserve) */
  size_t free_at_create;     /* free device memory when the context was made */
  float fraction;            /* gpu_memory_fraction */
  int budget_from_free;      /* 1: free memory, less than the fraction's share, set the budget */
  size_t used;               /* bytes held through cosy_gpu_alloc */
  size_t aside;              /* bytes of the budget kept from allocations (cosy_gpu_set_aside) */
  int n_sm;                  /* dev.n_sm */
  char name[256];            /* dev.name */
  void **allocs;             /* every allocation, freed by cosy_gpu_free */
  size_t n_allocs, cap_allocs;
  struct cosy_gpu *parent;   /* a child context shares its parent's budget and allocations */
  cudaStream_t stream_urgent; /* child: a second stream of the highest priority (above the
                                 parent's); NULL in a parent */
  int gemm_san_init;         /* COSY_GEMM_SAN_INIT (cosy_knobs): every GEMM context of this
                                context and its children clears outputs first (test only) */
  int gemm_bucket;           /* COSY_GEMM_BUCKET (cosy_knobs; -1: the default rule) */
  int flow_pdl;              /* COSY_FLOW_PDL=1 (cosy_knobs): the flow's elementwise kernels
                                with programmatic dependent launch where dev.pdl (flow.c) */
  int flow_shallow;          /* COSY_FLOW_DEEP=0 (cosy_knobs): the v2 attention with 2 stages
                                on every grid (flow.c; the kernel's rule else) */
  int llm_attn_early;        /* COSY_LLM_ATTN_EARLY (cosy_knobs; on): the LLM's decode attention
                                with COSY_K_DECODE_EARLY where allowed (llm.c attention) */
  int llm_xfrag;             /* COSY_LLM_XFRAG (cosy_knobs; -1 auto): the decode step's tensor-core
                                kernels with x's fragments once per block (llm.c, gemv.h
                                xfrag) */
  int llm_gemvb;             /* COSY_LLM_GEMVB (cosy_knobs; on): the LLM's tensor-core decode
                                GEMVs above 8 rows with the weights as mma's B operand
                                (cosy_llm_gemv_args.gemvb; lib/gpu/llm.c) */
} cosy_gpu;

/* Select the device, read its description (cosy_gpu_describe, with the test profile
 * knobs->gpu_profile), create the stream and the GEMM context, fix the budget. knobs: the
 * environment knobs (lib/knobs.h; the engine's, or a test's cosy_knobs_read); NULL: none.
 * COSY_ERR_UNSUPPORTED, with a message naming what is missing, for a device below compute
 * capability 8.0 or one this build carries no code for. */
cosy_status cosy_gpu_create(int device, float fraction, const cosy_knobs *knobs, cosy_gpu **out);

/* Fill *d from the CUDA runtime's attributes of `device`, then apply the test profile `profile`
 * (the knob COSY_GPU_PROFILE; NULL or "": none; COSY_ERR_INVALID_ARG for an unknown name):
 *   a100     compute capability 8.0, 163 KB of shared memory per block (164 KB per SM), 108 SMs,
 *            40 MB of L2, no thread-block clusters, no programmatic dependent launch
 *   ada      8.9, 99 KB per block (100 KB per SM), 58 SMs (an L4; an RTX 4090 has 128), 48 MB of
 *            L2, no clusters, no programmatic dependent launch
 *   rtx5090  12.0, 99 KB per block (100 KB per SM), 170 SMs, 96 MB of L2, clusters and
 *            programmatic dependent launch
 *   h100     the device as it is (the name is recorded)
 *   t4       7.5, 64 KB, 40 SMs, neither: a GPU below 8.0, which create refuses (its test)
 * A profile only takes away: each size is the smaller of the profile's and the device's, a
 * feature stays only when both have it; the compute capability becomes the profile's. Memory is
 * not changed (gpu_memory_fraction sets the budget). For tests and measurements on a large GPU:
 * the kernels then choose the variants a smaller GPU would get. */
cosy_status cosy_gpu_describe(int device, const char *profile, cosy_kdev *d);
/* The profile applied to a description (used by cosy_gpu_describe; tests apply one to a
 * description of their own). NULL or "" leaves *d as it is. */
cosy_status cosy_gpu_apply_profile(cosy_kdev *d, const char *profile);
/* A second context on the same device with its own stream (lower priority than the parent's)
 * and its own GEMM context, drawing on the parent's budget: stages that run concurrently with
 * the parent's work (the flow and the vocoder beside the LLM) use one. It also holds a stream of
 * higher priority than the parent's (stream_urgent) for work that must go first (the first
 * chunk of an utterance); swap it into `stream` for such a call. Free it before the parent. */
cosy_status cosy_gpu_create_child(cosy_gpu *parent, cosy_gpu **out);
/* Free every allocation made through the context, then the context. NULL is a no-op. */
void cosy_gpu_free(cosy_gpu *g);

/* Map a CUDA status to a cosy_status with a message naming `what`. cudaSuccess -> COSY_OK (unless
 * an injected failure is due, below). Call it on every result, successful or not. */
cosy_status cosy_gpu_check(cudaError_t e, const char *what);
/* Injected CUDA failures (test only: tests/test_gpu_fault.c, docs/testing.md). Every call of
 * cosy_gpu_check counts as one checked CUDA operation (every GPU call of the engine goes through
 * it: allocations, copies, kernel launches, graph launches, stream synchronizations); when armed,
 * the n-th one reports a failure although the operation succeeded:
 *   COSY_GPU_FAULT_LAUNCH  cudaErrorLaunchOutOfResources -> COSY_ERR_CUDA (a failed launch)
 *   COSY_GPU_FAULT_OOM     cudaErrorMemoryAllocation     -> COSY_ERR_GPU_NO_MEMORY
 *   COSY_GPU_FAULT_LOST    cudaErrorIllegalAddress       -> COSY_ERR_DEVICE_LOST, and sticky:
 *                          every later checked operation fails the same way (as after a real
 *                          sticky error) until the next arm
 * The message of an injected failure ends with "(injected: COSY_CUDA_FAULT)". The count is
 * process-wide (all engines, all threads). The knob COSY_CUDA_FAULT=<n>[:kind] (kind launch
 * (default), oom or lost; n = 0 counts only) arms it at each engine creation on the GPU
 * (cosy_gpu_fault_from_knob, called first thing there), so n counts from the start of
 * cosy_engine_create. Disarmed (the default) cosy_gpu_check costs one relaxed atomic load. */
enum { COSY_GPU_FAULT_LAUNCH = 1, COSY_GPU_FAULT_OOM = 2, COSY_GPU_FAULT_LOST = 3 };
/* n > 0: the n-th checked operation from now fails with `kind`; n = 0: count only; n < 0: off.
 * Resets the count, the sites and the fired flag. */
void cosy_gpu_fault_arm(long long n, int kind);
int cosy_gpu_fault_armed(void);
/* checked operations counted since the last arm */
long long cosy_gpu_fault_calls(void);
/* 1 once the armed failure was injected; site (optional) gets the `what` of that operation */
int cosy_gpu_fault_fired(char *site, size_t cap);
/* the distinct `what` strings seen since the last arm (in order of first use) and the index of
 * each one's first operation; returns how many (at most 1024 are kept) */
int cosy_gpu_fault_sites(long long *first, char (*names)[64], int cap);
/* arm from the knob COSY_CUDA_FAULT's value v (cosy_knobs.cuda_fault) when not empty;
 * COSY_ERR_INVALID_ARG for a malformed value */
cosy_status cosy_gpu_fault_from_knob(const char *v);

/* cosy_gpu_check(cudaGetLastError()) plus a synchronizing check of the stream when `sync`. */
cosy_status cosy_gpu_sync(cosy_gpu *g, const char *what);

/* cudaStreamBeginCapture through cosy_gpu_check. A failure reported for a capture that did
 * begin (an injected one, COSY_CUDA_FAULT) ends it again, or the stream would stay capturing
 * and every later call on it fail. */
cosy_status cosy_gpu_capture_begin(cudaStream_t s, enum cudaStreamCaptureMode mode,
                                   const char *what);

/* After a failed call: wait for what the context's streams still run (so nothing of the failed
 * call touches buffers that the next call reuses) and clear this thread's last CUDA error (a
 * non-sticky one would otherwise fail the next cosy_gpu_sync). Results ignored. */
void cosy_gpu_drain(cosy_gpu *g);

/* Allocate `bytes` of device memory within the budget (256-byte aligned). `what` names the
 * buffer in the COSY_ERR_GPU_NO_MEMORY message. The memory lives until cosy_gpu_free. */
cosy_status cosy_gpu_alloc(cosy_gpu *g, size_t bytes, const char *what, void **out);
/* Pinned host memory (not counted in the budget); freed with cosy_gpu_host_free. */
cosy_status cosy_gpu_host_alloc(size_t bytes, void **out);
void cosy_gpu_host_free(void *p);
/* Bytes left in the budget (less what is set aside). */
size_t cosy_gpu_left(const cosy_gpu *g);
/* Keep `bytes` of what is left out of reach of the allocations (of the context's root) until
 * the next call (0 ends it): a caller that hands "everything left" to one user first sets aside
 * what a later user needs. */
void cosy_gpu_set_aside(cosy_gpu *g, size_t bytes);

/* Upload a model tensor, converted to `dt` (bf16 rounding is round-to-nearest-even), into a new
 * budgeted allocation. *n_elems (optional) gets the element count. */
cosy_status cosy_gpu_upload_tensor(cosy_gpu *g, const cosy_model *m, const char *name,
                                   cosy_kdtype dt, void **out, size_t *n_elems);
/* Upload host fp32 data converted to dt into a new budgeted allocation. */
cosy_status cosy_gpu_upload_f32(cosy_gpu *g, const float *host, size_t n, cosy_kdtype dt,
                                const char *what, void **out);

/* fp32 -> bf16 bits, round to nearest even (NaN stays NaN). */
uint16_t cosy_f32_to_bf16(float f);

#endif
