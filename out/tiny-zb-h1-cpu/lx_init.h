/* lx_init.h — GPT-2 initialization from a seed.
 *
 * Weights ~ normal(0, 0.02); the projections that write into the residual
 * stream (attention output, MLP output) ~ normal(0, 0.02 / sqrt(2 L)), so the
 * stream's variance does not grow with depth (Radford et al. 2019). Biases
 * are 0, norm scales 1. Element i of a tensor is lx_rng_normal(seed, stream, i)
 * with the tensor's own stream id, so a tensor's values do not depend on
 * which pipeline stage holds it or on what was initialised before it. */
#ifndef LX_INIT_H
#define LX_INIT_H

#include "lx_common.h"
#include "lx_rng.h"

#define LX_GPT2_INIT_STD 0.02

/* The standard deviation of a weight; layers is the model's total L. */
static inline double lx_gpt2_init_std(int is_residual_projection, int layers) {
  return is_residual_projection ? LX_GPT2_INIT_STD / sqrt(2.0 * layers) : LX_GPT2_INIT_STD;
}

/* w[i] = the value of element first + i of the whole tensor named by stream. */
static inline void lx_init_normal_at(const lx_ctx *ctx,
                                     real *w, // (N)
                                     size_t N, double std, uint64_t seed, uint64_t stream, uint64_t first) {
#pragma omp parallel for num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++)
    w[i] = (real)(std * lx_rng_normal(seed, stream, first + i));
}

static inline void lx_init_normal(const lx_ctx *ctx,
                                  real *w, // (N)
                                  size_t N, double std, uint64_t seed, uint64_t stream) {
  lx_init_normal_at(ctx, w, N, std, seed, stream, 0);
}

static inline void lx_init_constant(const lx_ctx *ctx,
                                    real *w, // (N)
                                    size_t N, real value) {
#pragma omp parallel for num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++)
    w[i] = value;
}

#endif
