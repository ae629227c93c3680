/* lx_cuda_rng.cuh — the counter-based generator of templates/cpu/lx_rng.h,
 * bit for bit, on host and device.
 *
 * Every random number is a pure function of (seed, stream, index); the
 * dropout decision compares the top 32 bits with an integer threshold, so
 * a mask drawn here equals the CPU mask exactly, and a recomputed forward
 * (on any stream, in any window) regenerates it without saving anything. */
#ifndef LX_CUDA_RNG_CUH
#define LX_CUDA_RNG_CUH

#include "lx_cuda_common.cuh"

#define LX_CUDA_GOLDEN_GAMMA 0x9E3779B97F4A7C15ull

__host__ __device__ inline uint64_t lx_cuda_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The per-(seed, stream) key: computed once on the host by the launchers and
 * passed to kernels, so a kernel pays one mix per element. */
__host__ __device__ inline uint64_t lx_cuda_rng_key(uint64_t seed, uint64_t stream) {
  return lx_cuda_mix64(lx_cuda_mix64(seed + LX_CUDA_GOLDEN_GAMMA) + stream * 0xD1B54A32D192ED03ull);
}

__host__ __device__ inline uint64_t lx_cuda_rng_bits_keyed(uint64_t key, uint64_t index) {
  return lx_cuda_mix64(key + (index + 1) * LX_CUDA_GOLDEN_GAMMA);
}

/* p in [0, 1): elements whose top 32 random bits fall below p * 2^32 drop. */
LX_CUDA_API uint32_t lx_cuda_dropout_threshold(double p) {
  LX_CUDA_REQUIRE(p >= 0 && p < 1);
  return (uint32_t)(p * 4294967296.0);
}

__host__ __device__ inline bool lx_cuda_dropout_keep(uint64_t key, uint64_t index, uint32_t threshold) {
  return (uint32_t)(lx_cuda_rng_bits_keyed(key, index) >> 32) >= threshold;
}

#endif
