/* lx_rng.h — a counter-based random number generator.
 *
 * Every random number is a pure function of (seed, stream, index): no state
 * is carried from one call to the next. That is what recomputation needs: a
 * dropout recomputed before its backward, on another stream or in another
 * window, regenerates the identical mask, and a model cut into any number of
 * pipeline stages draws the same numbers as the unpartitioned one. It also
 * makes every loop over elements trivially parallel.
 *
 * The bits of (seed, stream, index) are output number index + 1 of a
 * SplitMix64 generator (Steele, Lea, Flood 2014) whose starting state is a
 * hash of (seed, stream). Decisions taken from the bits (dropout keep/drop)
 * compare integers, so the float build, the double build and a CUDA twin
 * written with the same integer arithmetic agree exactly. Shared by both
 * targets' host code (the CUDA programs draw their initial weights here). */
#ifndef LX_RNG_H
#define LX_RNG_H

#include "lx_check.h"

#include <math.h>
#include <stdint.h>

#define LX_GOLDEN_GAMMA 0x9E3779B97F4A7C15ull

/* The SplitMix64 output function (Stafford's "Mix13"): full avalanche, so
 * neighbouring counters give unrelated bits. */
static inline uint64_t lx_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline uint64_t lx_rng_key(uint64_t seed, uint64_t stream) {
  return lx_mix64(lx_mix64(seed + LX_GOLDEN_GAMMA) + stream * 0xD1B54A32D192ED03ull);
}

/* 64 random bits, a pure function of its arguments. */
static inline uint64_t lx_rng_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return lx_mix64(lx_rng_key(seed, stream) + (index + 1) * LX_GOLDEN_GAMMA);
}

/* Names one use of randomness, so that no two ops, layers, micro-batches or
 * steps share masks. layer is the global layer index, never a stage-local
 * one, or a different pipeline depth would draw different masks. */
static inline uint64_t lx_rng_stream(uint64_t step, uint64_t micro_batch, uint64_t layer, uint64_t op) {
  uint64_t h = lx_mix64(step + LX_GOLDEN_GAMMA);
  h = lx_mix64(h ^ (micro_batch + 2 * LX_GOLDEN_GAMMA));
  h = lx_mix64(h ^ (layer + 3 * LX_GOLDEN_GAMMA));
  return lx_mix64(h ^ (op + 4 * LX_GOLDEN_GAMMA));
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double lx_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return (double)(lx_rng_bits(seed, stream, index) >> 11) * 0x1.0p-53;
}

/* Standard normal by Box-Muller from counters 2*index and 2*index + 1. Only
 * the cosine branch is used, so each index owns its own pair of uniforms and
 * the value stays a pure function of index. */
static inline double lx_rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = ((double)(lx_rng_bits(seed, stream, 2 * index) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
  double u2 = lx_rng_uniform(seed, stream, 2 * index + 1);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

/* An element is dropped when the top 32 bits of its random word fall below
 * p * 2^32; an integer comparison, identical in every build. */
static inline uint32_t lx_dropout_threshold(double p) {
  LX_CHECK(p >= 0 && p < 1);
  return (uint32_t)(p * 4294967296.0);
}

static inline int lx_dropout_keep(uint64_t seed, uint64_t stream, uint64_t index, uint32_t threshold) {
  return (uint32_t)(lx_rng_bits(seed, stream, index) >> 32) >= threshold;
}

#endif
