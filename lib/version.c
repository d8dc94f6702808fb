/* version.c - cosy_version_number and cosy_version_string: the library's version and how it was
 * built (the Makefile passes the CUDA toolkit release and GPU targets as COSY_CUDA_BUILD). At the
 * bottom of the host code with util.c: the GPU context names the build in its messages. */
#include "cosyvoice.h"

COSY_API uint32_t cosy_version_number(void) { return COSY_VERSION_NUMBER; }

#define STR2(x) #x
#define STR(x) STR2(x)
/* the Makefile passes the toolkit release and the GPU targets it compiled (CUDA_ARCHS) */
#if defined(COSY_WITH_CUDA) && !defined(COSY_CUDA_BUILD)
#define COSY_CUDA_BUILD "cuda"
#endif
COSY_API const char *cosy_version_string(void) {
#ifdef COSY_WITH_CUDA
  return STR(COSY_VERSION_MAJOR) "." STR(COSY_VERSION_MINOR) "." STR(COSY_VERSION_PATCH)
      " (" COSY_CUDA_BUILD ")";
#else
  return STR(COSY_VERSION_MAJOR) "." STR(COSY_VERSION_MINOR) "." STR(COSY_VERSION_PATCH)
      " (cpu only)";
#endif
}
