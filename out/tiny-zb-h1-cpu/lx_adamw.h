/* lx_adamw.h — the optimizer step: global gradient norm and clipping, AdamW
 * (Loshchilov & Hutter 2019). The learning-rate schedule is lx_loop.h's,
 * shared with the CUDA programs. */
#ifndef LX_ADAMW_H
#define LX_ADAMW_H

#include "lx_common.h"

typedef struct {
  double beta1, beta2, eps;
  double weight_decay; /* pass 0 for tensors that take no decay (biases, norms) */
} lx_adamw_hparams;

/* Decoupled weight decay: the decay shrinks the parameter directly and is not
 * folded into the gradient, so Adam's normalisation does not rescale it.
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p)
 * step t counts from 1. The arrays never overlap: simd lets the compiler
 * use vector lanes (which round exactly as scalar code, so the result stays
 * free of the thread count) where it may ignore errno (-fno-math-errno);
 * otherwise the sqrt keeps the loop scalar. */
static inline void lx_adamw_update(const lx_ctx *ctx,
                                   real *params,      // (N)
                                   const real *grads, // (N)
                                   real *m,           // (N) first moment, zero before step 1
                                   real *v,           // (N) second moment, zero before step 1
                                   size_t N, double lr, lx_adamw_hparams hp, int step) {
  LX_CHECK(step >= 1);
  real b1 = (real)hp.beta1, b2 = (real)hp.beta2;
  real correction1 = (real)(1.0 - pow(hp.beta1, step)), correction2 = (real)(1.0 - pow(hp.beta2, step));
  real lr_r = (real)lr, eps = (real)hp.eps, wd = (real)hp.weight_decay;
#pragma omp parallel for simd num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++) {
    real g = grads[i];
    real mi = b1 * m[i] + (1 - b1) * g, vi = b2 * v[i] + (1 - b2) * g * g;
    m[i] = mi, v[i] = vi;
    real m_hat = mi / correction1, v_hat = vi / correction2;
    params[i] -= lr_r * (m_hat / (lx_sqrt(v_hat) + eps) + wd * params[i]);
  }
}

/* Fixed chunks, summed in chunk order: the norm does not depend on the
 * thread count. Squared, so that the caller can add the sums of several
 * tensors (and all-reduce them over pipeline stages) before the sqrt. */
#define LX_NORM_CHUNKS 64

static inline double lx_grad_norm_squared(const lx_ctx *ctx,
                                          const real *grads, // (N)
                                          size_t N) {
  double partial[LX_NORM_CHUNKS];
  size_t chunk = (N + LX_NORM_CHUNKS - 1) / LX_NORM_CHUNKS;
#pragma omp parallel for num_threads(ctx->threads)
  for (int c = 0; c < LX_NORM_CHUNKS; c++) {
    size_t lo = (size_t)c * chunk, hi = lo + chunk < N ? lo + chunk : N;
    double s = 0;
    for (size_t i = lo; i < hi; i++)
      s += (double)grads[i] * grads[i];
    partial[c] = s;
  }
  double total = 0;
  for (int c = 0; c < LX_NORM_CHUNKS; c++)
    total += partial[c];
  return total;
}

/* The factor that brings the global norm down to max_norm; 1 when it is
 * already below, or when max_norm is 0 (clipping disabled). */
static inline double lx_grad_clip_factor(double global_norm, double max_norm) {
  if (max_norm <= 0 || global_norm <= max_norm) return 1.0;
  return max_norm / (global_norm + 1e-6);
}

static inline void lx_scale(const lx_ctx *ctx,
                            real *x, // (N)
                            size_t N, double factor) {
  if (factor == 1.0) return;
  real f = (real)factor;
#pragma omp parallel for simd num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++)
    x[i] *= f;
}

#endif
