/* kdevice.h - the description of one CUDA device as the kernel launchers see it (plain C).
 *
 * One per engine, read at engine creation (lib/gpu/gpu.c, cosy_gpu_create) and copied into every
 * context of the engine; the launchers whose choice depends on the device take a pointer to it
 * (kernels_hift.h cosy_k_hift_conv*, kernels.h cosy_k_paged_decode) instead of asking the CUDA
 * runtime or caching a device fact in a static, so two engines on two different GPUs of one
 * process each get their own answers. A test profile (COSY_GPU_PROFILE, lib/gpu/gpu.h) can make
 * the description smaller than the hardware (less shared memory, no clusters, no programmatic
 * dependent launch, fewer SMs): every launcher then sizes its work to the description, and the
 * ones with dynamic shared memory refuse (cudaErrorInvalidValue) a launch that would ask for more
 * than smem_block, so a run under a profile proves that its kernels fit such a device. */
#ifndef COSY_KDEVICE_H
#define COSY_KDEVICE_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cosy_kdev {
  int device;           /* CUDA ordinal */
  int cc_major, cc_minor; /* compute capability (a profile's, when one is applied) */
  int n_sm;             /* multiprocessors */
  size_t smem_block;    /* shared memory one block may use (static + dynamic, after the opt-in of
                           cudaFuncAttributeMaxDynamicSharedMemorySize) */
  size_t smem_sm;       /* shared memory of one multiprocessor */
  size_t smem_block_hw; /* the hardware's smem_block (>= smem_block): what the opt-in attribute is
                           set to, the same value for every engine on the device */
  size_t l2_bytes;      /* L2 cache */
  size_t total_mem;     /* device memory */
  int clusters;         /* thread-block clusters with distributed shared memory (9.0 and newer) */
  int pdl;              /* programmatic dependent launch (9.0 and newer) */
  char name[96];        /* the device's name */
  char profile[16];     /* the test profile applied ("" = the device as it is) */
} cosy_kdev;

/* Whether this build carries code the current device can run (machine code for its
 * architecture or PTX it can compile): cudaSuccess, or cudaErrorNoKernelImageForDevice. Also
 * makes the CUDA runtime load the module (kernels/device.cu). */
cudaError_t cosy_k_device_image_check(void);

#ifdef __cplusplus
}
#endif

#endif
