/* gpu.c - device context, memory budget, uploads, CUDA error mapping; see gpu.h. */
#include "gpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define RUNTIME_RESERVE COSY_GPU_RUNTIME_RESERVE

uint16_t cosy_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* ---- injected CUDA failures (test only; gpu.h) ------------------------------------------------ */

#define FAULT_MAX_SITES 1024
#define FAULT_SITE_LEN 64
static int g_cf_on;                 /* atomic: counting (0 = off, the fast path) */
static pthread_mutex_t g_cf_mu = PTHREAD_MUTEX_INITIALIZER;
static long long g_cf_at, g_cf_count, g_cf_fired_at;
static int g_cf_kind, g_cf_fired;
static char g_cf_failed[FAULT_SITE_LEN];
static char g_cf_site[FAULT_MAX_SITES][FAULT_SITE_LEN];
static long long g_cf_first[FAULT_MAX_SITES];
static int g_cf_n_sites;

static cudaError_t fault_error(int kind) {
  switch (kind) {
    case COSY_GPU_FAULT_OOM: return cudaErrorMemoryAllocation;
    case COSY_GPU_FAULT_LOST: return cudaErrorIllegalAddress;
    default: return cudaErrorLaunchOutOfResources;
  }
}

void cosy_gpu_fault_arm(long long n, int kind) {
  pthread_mutex_lock(&g_cf_mu);
  g_cf_at = n > 0 ? n : 0;
  g_cf_kind = kind;
  g_cf_count = g_cf_fired_at = 0;
  g_cf_fired = 0;
  g_cf_failed[0] = 0;
  g_cf_n_sites = 0;
  __atomic_store_n(&g_cf_on, n >= 0, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&g_cf_mu);
}

int cosy_gpu_fault_armed(void) { return __atomic_load_n(&g_cf_on, __ATOMIC_RELAXED); }

long long cosy_gpu_fault_calls(void) {
  pthread_mutex_lock(&g_cf_mu);
  long long n = g_cf_count;
  pthread_mutex_unlock(&g_cf_mu);
  return n;
}

int cosy_gpu_fault_fired(char *site, size_t cap) {
  pthread_mutex_lock(&g_cf_mu);
  int f = g_cf_fired;
  if (site && cap) snprintf(site, cap, "%s", g_cf_failed);
  pthread_mutex_unlock(&g_cf_mu);
  return f;
}

int cosy_gpu_fault_sites(long long *first, char (*names)[64], int cap) {
  pthread_mutex_lock(&g_cf_mu);
  int n = g_cf_n_sites;
  for (int i = 0; i < n && i < cap; i++) {
    if (first) first[i] = g_cf_first[i];
    if (names) snprintf(names[i], 64, "%s", g_cf_site[i]);
  }
  pthread_mutex_unlock(&g_cf_mu);
  return n;
}

cosy_status cosy_gpu_fault_from_knob(const char *v) {
  if (!v || !*v) return COSY_OK;
  char *end = NULL;
  long long n = strtoll(v, &end, 10);
  int kind = COSY_GPU_FAULT_LAUNCH;
  if (end == v || n < 0) goto bad;
  if (*end == ':') {
    const char *k = end + 1;
    if (!strcmp(k, "launch")) kind = COSY_GPU_FAULT_LAUNCH;
    else if (!strcmp(k, "oom")) kind = COSY_GPU_FAULT_OOM;
    else if (!strcmp(k, "lost")) kind = COSY_GPU_FAULT_LOST;
    else goto bad;
  } else if (*end) {
    goto bad;
  }
  cosy_gpu_fault_arm(n, kind);
  return COSY_OK;
bad:
  return cosy_err(COSY_ERR_INVALID_ARG,
                  "COSY_CUDA_FAULT=%s: expected <n>[:launch|oom|lost] (n >= 0; 0 = count only)", v);
}

/* the checked call `what` with result e: counted; the armed one (and, after a sticky failure,
 * every later one) reports the injected error */
static cudaError_t fault_filter(cudaError_t e, const char *what) {
  pthread_mutex_lock(&g_cf_mu);
  if (!g_cf_on) { /* disarmed meanwhile */
    pthread_mutex_unlock(&g_cf_mu);
    return e;
  }
  const long long k = ++g_cf_count;
  const char *w = what ? what : "?";
  int i = 0;
  while (i < g_cf_n_sites && strncmp(g_cf_site[i], w, FAULT_SITE_LEN - 1)) i++;
  if (i == g_cf_n_sites && i < FAULT_MAX_SITES) {
    snprintf(g_cf_site[i], FAULT_SITE_LEN, "%s", w);
    g_cf_first[i] = k;
    g_cf_n_sites++;
  }
  if (e == cudaSuccess && g_cf_at > 0 &&
      (k == g_cf_at || (g_cf_fired && g_cf_kind == COSY_GPU_FAULT_LOST))) {
    if (!g_cf_fired) {
      g_cf_fired = 1;
      g_cf_fired_at = k;
      snprintf(g_cf_failed, sizeof g_cf_failed, "%s", w);
    }
    e = fault_error(g_cf_kind);
  }
  pthread_mutex_unlock(&g_cf_mu);
  return e;
}

static int fault_injected(cudaError_t e) {
  if (!cosy_gpu_fault_armed()) return 0;
  pthread_mutex_lock(&g_cf_mu);
  int f = g_cf_fired && e == fault_error(g_cf_kind);
  pthread_mutex_unlock(&g_cf_mu);
  return f;
}

cosy_status cosy_gpu_check(cudaError_t e, const char *what) {
  if (__builtin_expect(cosy_gpu_fault_armed(), 0)) e = fault_filter(e, what);
  if (e == cudaSuccess) return COSY_OK;
  cosy_status st = COSY_ERR_CUDA;
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorDevicesUnavailable:
    case cudaErrorLaunchTimeout:
      st = COSY_ERR_DEVICE_LOST;
      break;
    case cudaErrorMemoryAllocation:
      st = COSY_ERR_GPU_NO_MEMORY;
      break;
    default:
      break;
  }
  return cosy_err(st, "%s: CUDA error %d (%s): %s%s", what, (int)e, cudaGetErrorName(e),
                  cudaGetErrorString(e), fault_injected(e) ? " (injected: COSY_CUDA_FAULT)" : "");
}

cosy_status cosy_gpu_sync(cosy_gpu *g, const char *what) {
  cosy_status st = cosy_gpu_check(cudaGetLastError(), what);
  if (st) return st;
  return cosy_gpu_check(cudaStreamSynchronize(g->stream), what);
}

void cosy_gpu_drain(cosy_gpu *g) {
  if (!g) return;
  if (g->stream) (void)cudaStreamSynchronize(g->stream);
  if (g->stream_urgent && g->stream_urgent != g->stream)
    (void)cudaStreamSynchronize(g->stream_urgent);
  (void)cudaGetLastError();
}

/* ---- the device description (kdevice.h) ------------------------------------------------------ */

typedef struct gpu_profile {
  const char *name;
  int cc_major, cc_minor, n_sm;
  size_t smem_block, smem_sm, l2;
  int clusters, pdl;
  int as_is; /* h100: the device as it is */
} gpu_profile;

#define KB ((size_t)1024)
#define MB ((size_t)1 << 20)
static const gpu_profile profiles[] = {
    {"a100", 8, 0, 108, 163 * KB, 164 * KB, 40 * MB, 0, 0, 0},
    {"ada", 8, 9, 58, 99 * KB, 100 * KB, 48 * MB, 0, 0, 0},
    {"rtx5090", 12, 0, 170, 99 * KB, 100 * KB, 96 * MB, 1, 1, 0},
    {"h100", 0, 0, 0, 0, 0, 0, 1, 1, 1},
    {"t4", 7, 5, 40, 64 * KB, 64 * KB, 4 * MB, 0, 0, 0}, /* below 8.0: create must refuse it */
};

cosy_status cosy_gpu_apply_profile(cosy_kdev *d, const char *name) {
  if (!name || !*name) return COSY_OK;
  const gpu_profile *p = NULL;
  for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++)
    if (!strcmp(name, profiles[i].name)) p = &profiles[i];
  if (!p)
    return cosy_err(COSY_ERR_INVALID_ARG,
                    "COSY_GPU_PROFILE=%s: unknown test profile (a100, ada, rtx5090, h100 or t4)", name);
  snprintf(d->profile, sizeof d->profile, "%s", p->name);
  if (p->as_is) return COSY_OK;
  d->cc_major = p->cc_major;
  d->cc_minor = p->cc_minor;
  if (p->n_sm < d->n_sm) d->n_sm = p->n_sm;
  if (p->smem_block < d->smem_block) d->smem_block = p->smem_block;
  if (p->smem_sm < d->smem_sm) d->smem_sm = p->smem_sm;
  if (p->l2 < d->l2_bytes) d->l2_bytes = p->l2;
  d->clusters = d->clusters && p->clusters;
  d->pdl = d->pdl && p->pdl;
  return COSY_OK;
}

cosy_status cosy_gpu_describe(int device, const char *profile, cosy_kdev *d) {
  memset(d, 0, sizeof *d);
  d->device = device;
  struct {
    enum cudaDeviceAttr a;
    int *v;
  } q[] = {{cudaDevAttrComputeCapabilityMajor, &d->cc_major},
           {cudaDevAttrComputeCapabilityMinor, &d->cc_minor},
           {cudaDevAttrMultiProcessorCount, &d->n_sm}};
  for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
    cosy_status st = cosy_gpu_check(cudaDeviceGetAttribute(q[i].v, q[i].a, device),
                                    "cudaDeviceGetAttribute");
    if (st) return st;
  }
  int optin = 0, per_sm = 0, l2 = 0, clusters = 0;
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
#if CUDART_VERSION >= 12000
  if (cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, device) != cudaSuccess)
    clusters = 0;
#endif
  (void)cudaGetLastError(); /* an attribute this driver does not know is not an error */
  if (optin < 48 * 1024) optin = 48 * 1024; /* every device allows 48 KB without the opt-in */
  d->smem_block = d->smem_block_hw = (size_t)optin;
  d->smem_sm = (size_t)(per_sm > 0 ? per_sm : optin);
  d->l2_bytes = (size_t)(l2 > 0 ? l2 : 0);
  d->clusters = d->cc_major >= 9 && clusters != 0;
  d->pdl = d->cc_major >= 9;
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
    snprintf(d->name, sizeof d->name, "%.95s", prop.name);
    d->total_mem = prop.totalGlobalMem;
  }
  (void)cudaGetLastError();
  return cosy_gpu_apply_profile(d, profile);
}

/* COSY_ERR_UNSUPPORTED for a device the library cannot serve, naming what is missing */
static cosy_status check_supported(const cosy_kdev *d) {
  if (d->cc_major < 8)
    return cosy_err(COSY_ERR_UNSUPPORTED,
                    "GPU %d (%s) has compute capability %d.%d; libcosyvoice needs 8.0 or newer "
                    "(Ampere: bf16 and TF32 tensor-core mma.sync, cp.async, more than 64 KB of "
                    "shared memory per block for the vocoder)",
                    d->device, d->name, d->cc_major, d->cc_minor);
  cudaError_t e = cosy_k_device_image_check();
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return cosy_err(COSY_ERR_UNSUPPORTED,
                    "GPU %d (%s, compute capability %d.%d): this build of libcosyvoice (%s) has no "
                    "code it can run (%s); rebuild with CUDA_ARCHS=native or a list that includes "
                    "%d%d (README: Build and install)",
                    d->device, d->name, d->cc_major, d->cc_minor, cosy_version_string(),
                    cudaGetErrorString(e), d->cc_major, d->cc_minor);
  }
  return COSY_OK;
}

/* Why there is no GPU to run on, in the user's terms: no device, no NVIDIA driver, or a driver
 * older than this build's CUDA runtime (cudaGetDeviceCount reports a missing libcuda as
 * cudaErrorInsufficientDriver, whose own text "CUDA driver version is insufficient for CUDA
 * runtime version" reads as an upgrade request on a machine that has no GPU at all). */
static cosy_status no_gpu(int device, cudaError_t e, int n) {
  (void)cudaGetLastError();
  int rt = 0, drv = 0;
  (void)cudaRuntimeGetVersion(&rt);
  (void)cudaDriverGetVersion(&drv);   /* 0 when no driver is loaded */
  const char *cpu = "use device -1 (COSY_DEVICE_CPU) to run on the CPU";
  if (e == cudaErrorInsufficientDriver && drv == 0)
    return cosy_err(COSY_ERR_CUDA,
                    "device %d: no NVIDIA GPU driver is installed (libcuda.so.1 not found), so "
                    "there is no GPU to run on; %s", device, cpu);
  if (e == cudaErrorInsufficientDriver)
    return cosy_err(COSY_ERR_CUDA,
                    "device %d: the NVIDIA driver supports CUDA up to %d.%d, this libcosyvoice "
                    "was built with CUDA %d.%d: update the driver, or %s", device, drv / 1000,
                    drv % 1000 / 10, rt / 1000, rt % 1000 / 10, cpu);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0))
    return cosy_err(COSY_ERR_CUDA, "device %d: no CUDA GPU found (the NVIDIA driver sees none); %s",
                    device, cpu);
  return cosy_err(COSY_ERR_CUDA, "device %d: no CUDA GPU is usable: CUDA error %d (%s): %s; %s",
                  device, (int)e, cudaGetErrorName(e), cudaGetErrorString(e), cpu);
}

cosy_status cosy_gpu_create(int device, float fraction, const cosy_knobs *knobs, cosy_gpu **out) {
  *out = NULL;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) return no_gpu(device, e, n);
  if (device >= n)
    return cosy_err(COSY_ERR_INVALID_ARG, "CUDA device %d does not exist (%d present)", device, n);
  cosy_gpu *g = (cosy_gpu *)cosy_calloc(1, sizeof *g);
  if (!g) return COSY_ERR_NO_MEMORY;
  g->device = device;
  g->gemm_san_init = knobs && knobs->gemm_san_init;
  g->gemm_bucket = knobs ? knobs->gemm_bucket : -1;
  g->flow_pdl = knobs && knobs->flow_pdl;
  g->flow_shallow = knobs && knobs->flow_shallow;
  g->llm_attn_early = !knobs || knobs->llm_attn_early; /* the defaults without knobs: on, */
  g->llm_xfrag = knobs ? knobs->llm_xfrag : -1;         /* auto, */
  g->llm_gemvb = !knobs || knobs->llm_gemvb;           /* on */
  cosy_status st;
  if ((st = cosy_gpu_check(cudaSetDevice(device), "cudaSetDevice"))) goto fail;
  if ((st = cosy_gpu_describe(device, knobs ? knobs->gpu_profile : NULL, &g->dev))) goto fail;
  if ((st = check_supported(&g->dev))) goto fail;
  snprintf(g->name, sizeof g->name, "%s", g->dev.name);
  g->n_sm = g->dev.n_sm;
  size_t free_b = 0, total_b = 0;
  if ((st = cosy_gpu_check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo"))) goto fail;
  g->total = total_b;
  {
    size_t share = (size_t)((double)fraction * (double)total_b);
    /* the CUDA context already holds (total - free) in part; never plan beyond what is free */
    size_t cap = free_b > RUNTIME_RESERVE ? free_b - RUNTIME_RESERVE : 0;
    g->budget = share > RUNTIME_RESERVE ? share - RUNTIME_RESERVE : 0;
    g->share = share;
    g->free_at_create = free_b;
    g->fraction = fraction;
    g->budget_from_free = g->budget > cap;
    if (g->budget > cap) g->budget = cap;
  }
  {
    int lo = 0, hi = 0;
    cudaDeviceGetStreamPriorityRange(&lo, &hi);
    /* the parent (LLM) stream gets the second highest priority: its small decode kernels go
     * before the flow's and vocoder's, except a child's urgent stream (the highest) */
    const int prio = hi < lo ? hi + 1 : hi;
    if ((st = cosy_gpu_check(cudaStreamCreateWithPriority(&g->stream, cudaStreamNonBlocking, prio),
                             "cudaStreamCreate")))
      goto fail;
  }
  if ((st = cosy_gpu_check(cosy_gemm_create(&g->gemm, 32u << 20), "cuBLASLt init"))) goto fail;
  cosy_gemm_set_san_init(g->gemm, g->gemm_san_init);
  if (g->gemm_bucket >= 0) cosy_gemm_set_bucket(g->gemm, g->gemm_bucket);
  g->used += 32u << 20; /* the GEMM workspace */
  *out = g;
  return COSY_OK;
fail:
  cosy_gpu_free(g);
  return st;
}

static cosy_gpu *root_of(cosy_gpu *g) {
  while (g->parent) g = g->parent;
  return g;
}

cosy_status cosy_gpu_create_child(cosy_gpu *parent, cosy_gpu **out) {
  *out = NULL;
  cosy_gpu *g = (cosy_gpu *)cosy_calloc(1, sizeof *g);
  if (!g) return COSY_ERR_NO_MEMORY;
  cosy_gpu *root = root_of(parent);
  g->parent = root;
  g->device = root->device;
  g->dev = root->dev;
  g->total = root->total;
  g->budget = root->budget;
  g->n_sm = root->n_sm;
  g->gemm_san_init = root->gemm_san_init;
  g->gemm_bucket = root->gemm_bucket;
  g->flow_pdl = root->flow_pdl;
  g->flow_shallow = root->flow_shallow;
  g->llm_attn_early = root->llm_attn_early;
  g->llm_xfrag = root->llm_xfrag;
  g->llm_gemvb = root->llm_gemvb;
  memcpy(g->name, root->name, sizeof g->name);
  cosy_status st;
  int lo = 0, hi = 0;
  cudaDeviceGetStreamPriorityRange(&lo, &hi);
  if ((st = cosy_gpu_check(cudaStreamCreateWithPriority(&g->stream, cudaStreamNonBlocking, lo),
                           "cudaStreamCreate")) ||
      (st = cosy_gpu_check(
           cudaStreamCreateWithPriority(&g->stream_urgent, cudaStreamNonBlocking, hi),
           "cudaStreamCreate")))
    goto fail;
  if (cosy_gpu_left(root) < (32u << 20)) {
    st = cosy_err(COSY_ERR_GPU_NO_MEMORY, "no budget left for a second GEMM workspace");
    goto fail;
  }
  if ((st = cosy_gpu_check(cosy_gemm_create(&g->gemm, 32u << 20), "cuBLASLt init"))) goto fail;
  cosy_gemm_set_san_init(g->gemm, g->gemm_san_init);
  if (g->gemm_bucket >= 0) cosy_gemm_set_bucket(g->gemm, g->gemm_bucket);
  root->used += 32u << 20;
  *out = g;
  return COSY_OK;
fail:
  cosy_gpu_free(g);
  return st;
}

void cosy_gpu_free(cosy_gpu *g) {
  if (!g) return;
  if (g->parent) { /* a child: its memory belongs to the root */
    if (g->stream) cudaStreamSynchronize(g->stream);
    if (g->stream_urgent) cudaStreamSynchronize(g->stream_urgent);
    if (g->gemm) cosy_gemm_destroy(g->gemm);
    if (g->stream) cudaStreamDestroy(g->stream);
    if (g->stream_urgent && g->stream_urgent != g->stream) cudaStreamDestroy(g->stream_urgent);
    free(g);
    return;
  }
  if (g->stream) cudaStreamSynchronize(g->stream);
  for (size_t i = 0; i < g->n_allocs; i++) cudaFree(g->allocs[i]);
  free(g->allocs);
  if (g->gemm) cosy_gemm_destroy(g->gemm);
  if (g->stream) cudaStreamDestroy(g->stream);
  free(g);
}

size_t cosy_gpu_left(const cosy_gpu *g) {
  while (g->parent) g = g->parent;
  const size_t held = g->used + g->aside;
  return g->budget > held ? g->budget - held : 0;
}

void cosy_gpu_set_aside(cosy_gpu *g, size_t bytes) { root_of(g)->aside = bytes; }

cosy_status cosy_gpu_alloc(cosy_gpu *g, size_t bytes, const char *what, void **out) {
  *out = NULL;
  g = root_of(g);
  size_t b = (bytes + 255) & ~(size_t)255;
  if (b == 0) b = 256;
  if (b > cosy_gpu_left(g)) {
    /* the budget is the smaller of two: say which one this is, and what each holds */
    char src[192];
    if (g->budget_from_free)
      snprintf(src, sizeof src,
               "set by the %.2f GiB free on the device at engine creation, less than "
               "gpu_memory_fraction %.3f of %.2f GiB",
               (double)g->free_at_create / 1073741824.0, (double)g->fraction,
               (double)g->total / 1073741824.0);
    else
      snprintf(src, sizeof src, "gpu_memory_fraction %.3f of %.2f GiB; %.2f GiB was free",
               (double)g->fraction, (double)g->total / 1073741824.0,
               (double)g->free_at_create / 1073741824.0);
    return cosy_err(COSY_ERR_GPU_NO_MEMORY,
                    "%s needs %.1f MiB of GPU memory but only %.1f MiB of the engine's budget "
                    "of %.2f GiB (%s) is left",
                    what, (double)b / 1048576.0, (double)cosy_gpu_left(g) / 1048576.0,
                    (double)g->budget / 1073741824.0, src);
  }
  if (g->n_allocs == g->cap_allocs) {
    size_t nc = g->cap_allocs ? 2 * g->cap_allocs : 256;
    void **na = (void **)realloc(g->allocs, nc * sizeof *na);
    if (!na) return cosy_err(COSY_ERR_NO_MEMORY, "out of host memory");
    g->allocs = na;
    g->cap_allocs = nc;
  }
  void *p = NULL;
  cosy_status st = cosy_gpu_check(cudaMalloc(&p, b), what);
  if (st) {
    if (p) cudaFree(p); /* an injected failure (COSY_CUDA_FAULT) of a call that succeeded */
    return st;
  }
  g->allocs[g->n_allocs++] = p;
  g->used += b;
  *out = p;
  return COSY_OK;
}

cosy_status cosy_gpu_host_alloc(size_t bytes, void **out) {
  *out = NULL;
  cosy_status st = cosy_gpu_check(cudaMallocHost(out, bytes ? bytes : 1), "cudaMallocHost");
  if (st && *out) { /* an injected failure of a call that succeeded */
    cudaFreeHost(*out);
    *out = NULL;
  }
  return st;
}

cosy_status cosy_gpu_capture_begin(cudaStream_t s, enum cudaStreamCaptureMode mode,
                                   const char *what) {
  const cudaError_t e = cudaStreamBeginCapture(s, mode);
  cosy_status st = cosy_gpu_check(e, what);
  if (st && e == cudaSuccess) { /* an injected failure of a call that succeeded */
    cudaGraph_t graph = NULL;
    if (cudaStreamEndCapture(s, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
  }
  return st;
}

void cosy_gpu_host_free(void *p) {
  if (p) cudaFreeHost(p);
}

cosy_status cosy_gpu_upload_f32(cosy_gpu *g, const float *host, size_t n, cosy_kdtype dt,
                                const char *what, void **out) {
  size_t es = cosy_kdtype_size(dt);
  cosy_status st = cosy_gpu_alloc(g, n * es, what, out);
  if (st) return st;
  if (dt == COSY_KDT_F32)
    return cosy_gpu_check(cudaMemcpy(*out, host, n * 4, cudaMemcpyHostToDevice), what);
  uint16_t *tmp = (uint16_t *)cosy_malloc(n * 2);
  if (!tmp) return COSY_ERR_NO_MEMORY;
  for (size_t i = 0; i < n; i++) tmp[i] = cosy_f32_to_bf16(host[i]);
  st = cosy_gpu_check(cudaMemcpy(*out, tmp, n * 2, cudaMemcpyHostToDevice), what);
  free(tmp);
  return st;
}

cosy_status cosy_gpu_upload_tensor(cosy_gpu *g, const cosy_model *m, const char *name,
                                   cosy_kdtype dt, void **out, size_t *n_elems) {
  const gguf_tensor *t = cosy_model_tensor(m, name);
  if (!t) return COSY_ERR_MODEL_FORMAT;
  size_t n = t->nbytes / gguf_type_size(t->type);
  if (n_elems) *n_elems = n;
  if (dt == COSY_KDT_BF16 && t->type == GGML_BF16) { /* straight copy */
    cosy_status st = cosy_gpu_alloc(g, n * 2, name, out);
    if (st) return st;
    return cosy_gpu_check(cudaMemcpy(*out, t->data, n * 2, cudaMemcpyHostToDevice), name);
  }
  float *f = (float *)cosy_malloc(n * sizeof *f);
  if (!f) return COSY_ERR_NO_MEMORY;
  cosy_to_f32(t->data, t->type, f, n);
  cosy_status st = cosy_gpu_upload_f32(g, f, n, dt, name, out);
  free(f);
  return st;
}
