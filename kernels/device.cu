/* device.cu - whether this build can run on the current device (kdevice.h).
 *
 * Math: none. One empty kernel, never launched: cudaFuncGetAttributes on it fails with
 * cudaErrorNoKernelImageForDevice when the library carries neither machine code for the device's
 * architecture nor PTX the driver can compile for it (the targets are CUDA_ARCHS of the Makefile,
 * listed by cosy_version_string), so engine creation can say so instead of the first request
 * failing. Shapes / thread mapping: none. */
#include "kdevice.h"

namespace {
__global__ void image_probe_kernel(int *p) {
  if (p) *p = 0;
}
} /* namespace */

extern "C" cudaError_t cosy_k_device_image_check(void) {
  cudaFuncAttributes a;
  return cudaFuncGetAttributes(&a, image_probe_kernel);
}
