/* kharness.c - the helpers of tests/kharness.h (the registry is tests/kregistry.c). */
#include "kharness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kh_ceiling_name(kh_ceiling c) {
  switch (c) {
  case KH_CEIL_HBM: return "hbm";
  case KH_CEIL_BF16: return "bf16";
  case KH_CEIL_BOTH: return "hbm+bf16";
  default: return "-";
  }
}

int kh_entry_selected(const kh_entry *e, const char *filter) {
  if (!filter || !*filter || !strcmp(filter, e->name)) return 1;
  for (const char *const *l = e->launchers; *l; ++l)
    if (!strcmp(filter, *l)) return 1;
  return 0;
}

#ifdef COSY_WITH_CUDA

static void kh_exit(void) { exit(1); }
void (*kh_on_error)(void) = kh_exit;

void kh_cuda_error(cudaError_t e, const char *file, int line, const char *expr) {
  printf("CUDA error '%s' at %s:%d: %s\n", cudaGetErrorString(e), file, line, expr);
  fflush(stdout);
  kh_on_error();
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
void kh_rng_seed(uint64_t s) { g_rng = s * 0x9E3779B97F4A7C15ull + 12345u; }
void kh_rng_set(uint64_t state) { g_rng = state; }
uint64_t kh_rng_next(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545F4914F6CDD1Dull;
}
float kh_rnd(float lo, float hi) {
  return lo + (hi - lo) * (float)((kh_rng_next() >> 40) * (1.0 / 16777216.0));
}
int kh_rnd_int(int n) { return (int)(kh_rng_next() % (uint64_t)n); }

uint16_t kh_f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
float kh_bf2f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
float kh_round_dt(float v, cosy_kdtype dt) { return dt == COSY_KDT_BF16 ? kh_bf2f(kh_f2bf(v)) : v; }
const char *kh_dtn(cosy_kdtype dt) { return dt == COSY_KDT_BF16 ? "bf16" : "f32"; }
size_t kh_dts(cosy_kdtype dt) { return dt == COSY_KDT_BF16 ? 2 : 4; }

size_t kh_dev_bytes;
void *kh_dmalloc(size_t bytes) {
  void *p = NULL;
  KH_CK(cudaMalloc(&p, bytes ? bytes : 16));
  kh_dev_bytes += bytes;
  return p;
}
void kh_dfree(void *p) {
  if (p) KH_CK(cudaFree(p));
}

static void *host_alloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    printf("out of host memory (%zu bytes)\n", bytes);
    kh_on_error();
  }
  return p;
}
void kh_to_dev(void *d, float *h, size_t n, cosy_kdtype dt) {
  if (dt == COSY_KDT_BF16) {
    uint16_t *t = host_alloc(n * 2);
    for (size_t i = 0; i < n; ++i) {
      t[i] = kh_f2bf(h[i]);
      h[i] = kh_bf2f(t[i]);
    }
    KH_CK(cudaMemcpy(d, t, n * 2, cudaMemcpyHostToDevice));
    free(t);
  } else {
    KH_CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
  }
}
void kh_from_dev(float *h, const void *d, size_t n, cosy_kdtype dt) {
  KH_CK(cudaDeviceSynchronize());
  if (dt == COSY_KDT_BF16) {
    uint16_t *t = host_alloc(n * 2);
    KH_CK(cudaMemcpy(t, d, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) h[i] = kh_bf2f(t[i]);
    free(t);
  } else {
    KH_CK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
  }
}
int32_t *kh_dup_i32(const int32_t *h, size_t n) {
  int32_t *d = kh_dmalloc(n * 4);
  KH_CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
  return d;
}

int kh_device_probe(void) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIP: no CUDA device (%s)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 0;
  }
  return n;
}

void kh_describe_device(cosy_kdev *d, int device) {
  memset(d, 0, sizeof *d);
  d->device = device;
  cudaDeviceGetAttribute(&d->cc_major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&d->cc_minor, cudaDevAttrComputeCapabilityMinor, device);
  cudaDeviceGetAttribute(&d->n_sm, cudaDevAttrMultiProcessorCount, device);
  int cl = 0;
  cudaDeviceGetAttribute(&cl, cudaDevAttrClusterLaunch, device);
  cudaGetLastError();
  d->clusters = d->cc_major >= 9 && cl;
  d->pdl = d->cc_major >= 9;
  int optin = 0, per_sm = 0;
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  cudaGetLastError();
  if (optin < 48 * 1024) optin = 48 * 1024; /* as lib/gpu/gpu.c: 48 KB without the opt-in */
  d->smem_block = d->smem_block_hw = (size_t)optin;
  d->smem_sm = (size_t)(per_sm > 0 ? per_sm : optin);
}

#endif /* COSY_WITH_CUDA */
