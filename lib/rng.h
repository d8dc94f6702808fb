/* rng.h - the project's two integer generators, one implementation each, shared by the CPU
 * reference, the GPU host code and the CUDA kernels (the functions are __host__ __device__ when
 * nvcc compiles them), so every path draws the same numbers.
 *
 * splitmix64: the finalizer mix(z) = z' ^ (z' >> 31) of z += 0x9E3779B97F4A7C15 (two
 *   xor-shift-multiply rounds). Used as a counter-based hash by the vocoder's noise
 *   (lib/ref/hift.h, kernels/source.cu) and to fill the xoshiro state from a seed.
 *
 * xoshiro256** (Blackman & Vigna 2018), the speech-token sampler's generator (RAS,
 *   lib/ref/sampling.h, kernels/sample.cu): the 256-bit state is filled by four successive
 *   splitmix64 outputs of a counter started at the seed; cosy_rng_uniform() = (next() >> 11) *
 *   2^-53, a double in [0, 1) with 53 random bits. The sequence for a given seed is fixed forever
 *   (tests/test_sampling.c pins it). */
#ifndef COSY_RNG_H
#define COSY_RNG_H

#include <stdint.h>

#if defined(__CUDACC__)
#define COSY_RNG_FN static __host__ __device__ __forceinline__
#else
#define COSY_RNG_FN static inline
#endif

#define COSY_SPLITMIX64_GAMMA 0x9E3779B97F4A7C15ull /* the golden-ratio increment */

/* splitmix64's output for the counter value z (before the increment). */
COSY_RNG_FN uint64_t cosy_splitmix64(uint64_t z) {
  z += COSY_SPLITMIX64_GAMMA;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

typedef struct cosy_rng {
  uint64_t s[4];
} cosy_rng;

/* Seed the generator (any seed, 0 included, is valid). */
COSY_RNG_FN void cosy_rng_seed(cosy_rng *r, uint64_t seed) {
  if (!r) return;
  for (int i = 0; i < 4; i++) r->s[i] = cosy_splitmix64(seed + (uint64_t)i * COSY_SPLITMIX64_GAMMA);
}

COSY_RNG_FN uint64_t cosy_rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* Next raw 64-bit output of xoshiro256**. */
COSY_RNG_FN uint64_t cosy_rng_next(cosy_rng *r) {
  uint64_t *s = r->s;
  const uint64_t result = cosy_rng_rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = cosy_rng_rotl(s[3], 45);
  return result;
}

/* Uniform double in [0, 1). */
COSY_RNG_FN double cosy_rng_uniform(cosy_rng *r) {
  return (double)(cosy_rng_next(r) >> 11) * 0x1.0p-53;
}

#endif
