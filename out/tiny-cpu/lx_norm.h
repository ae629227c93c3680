/* lx_norm.h — layernorm and rmsnorm.
 *
 * The IR charges a norm only for its saved input (gen/analysis/analyze.c), so the
 * forward keeps no mean or rstd: the backward recomputes them from the input,
 * one cheap pass over a row, instead of holding 2 x (B, T) extra floats. */
#ifndef LX_NORM_H
#define LX_NORM_H

#include "lx_common.h"

#define LX_NORM_EPS 1e-5

typedef struct {
  real mean, rstd; /* rstd = 1 / sqrt(var + eps); rmsnorm leaves mean 0 */
} lx_row_stats;

static inline lx_row_stats lx_layernorm_stats(const real *x, // (C)
                                              int C) {
  lx_acc mean = 0, var = 0;
  for (int i = 0; i < C; i++)
    mean += x[i];
  mean /= C;
  /* two passes: the one-pass E[x^2] - E[x]^2 cancels badly in float */
  for (int i = 0; i < C; i++)
    var += (x[i] - mean) * (x[i] - mean);
  var /= C;
  return (lx_row_stats){(real)mean, (real)(1.0 / sqrt(var + LX_NORM_EPS))};
}

static inline lx_row_stats lx_rmsnorm_stats(const real *x, // (C)
                                            int C) {
  lx_acc ms = 0;
  for (int i = 0; i < C; i++)
    ms += (lx_acc)x[i] * x[i];
  ms /= C;
  return (lx_row_stats){0, (real)(1.0 / sqrt(ms + LX_NORM_EPS))};
}

/* ---- layernorm ------------------------------------------------------------ */

static inline void lx_layernorm_forward(const lx_ctx *ctx,
                                        real *out,          // (BT, C)
                                        const real *inp,    // (BT, C)
                                        const real *weight, // (C)
                                        const real *bias,   // (C)
                                        int BT, int C) {
#pragma omp parallel for num_threads(ctx->threads)
  for (int r = 0; r < BT; r++) {
    const real *x = inp + (size_t)r * C;
    real *y = out + (size_t)r * C;
    lx_row_stats s = lx_layernorm_stats(x, C);
    for (int i = 0; i < C; i++)
      y[i] = (x[i] - s.mean) * s.rstd * weight[i] + bias[i];
  }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = w * dout. */
static inline void lx_layernorm_backward_row(real *dx,           // (C)
                                             const real *dy,     // (C)
                                             const real *x,      // (C)
                                             const real *weight, // (C)
                                             int C) {
  lx_row_stats s = lx_layernorm_stats(x, C);
  lx_acc mean_g = 0, mean_gx = 0;
  for (int i = 0; i < C; i++) {
    real g = weight[i] * dy[i];
    mean_g += g;
    mean_gx += g * (x[i] - s.mean) * s.rstd;
  }
  mean_g /= C;
  mean_gx /= C;
  for (int i = 0; i < C; i++) {
    real xhat = (x[i] - s.mean) * s.rstd;
    dx[i] += s.rstd * (weight[i] * dy[i] - (real)mean_g - xhat * (real)mean_gx);
  }
}

static inline void lx_layernorm_backward(const lx_ctx *ctx,
                                         real *dinp,         // (BT, C)
                                         real *dweight,      // (C) or NULL (frozen)
                                         real *dbias,        // (C) or NULL (frozen)
                                         const real *dout,   // (BT, C)
                                         const real *inp,    // (BT, C)
                                         const real *weight, // (C)
                                         int BT, int C) {
#pragma omp parallel for num_threads(ctx->threads)
  for (int r = 0; r < BT; r++)
    lx_layernorm_backward_row(dinp + (size_t)r * C, dout + (size_t)r * C, inp + (size_t)r * C, weight, C);
  if (!dweight) return; /* fine-tuning: frozen */
  /* Parameter gradients sum over rows in row order on one thread: the sum
   * then never depends on the thread count. The statistics are recomputed
   * once more rather than kept in scratch memory the IR does not charge. */
  for (int r = 0; r < BT; r++) {
    const real *x = inp + (size_t)r * C, *dy = dout + (size_t)r * C;
    lx_row_stats s = lx_layernorm_stats(x, C);
    for (int i = 0; i < C; i++) {
      dweight[i] += dy[i] * (x[i] - s.mean) * s.rstd;
      dbias[i] += dy[i];
    }
  }
}

/* ---- rmsnorm -------------------------------------------------------------- */

static inline void lx_rmsnorm_forward(const lx_ctx *ctx,
                                      real *out,          // (BT, C)
                                      const real *inp,    // (BT, C)
                                      const real *weight, // (C)
                                      int BT, int C) {
#pragma omp parallel for num_threads(ctx->threads)
  for (int r = 0; r < BT; r++) {
    const real *x = inp + (size_t)r * C;
    real *y = out + (size_t)r * C;
    lx_row_stats s = lx_rmsnorm_stats(x, C);
    for (int i = 0; i < C; i++)
      y[i] = x[i] * s.rstd * weight[i];
  }
}

/* dx = rstd * (g - xhat * mean(g * xhat)) with g = w * dout, xhat = x * rstd. */
static inline void lx_rmsnorm_backward_row(real *dx,           // (C)
                                           const real *dy,     // (C)
                                           const real *x,      // (C)
                                           const real *weight, // (C)
                                           int C) {
  lx_row_stats s = lx_rmsnorm_stats(x, C);
  lx_acc mean_gx = 0;
  for (int i = 0; i < C; i++)
    mean_gx += weight[i] * dy[i] * x[i] * s.rstd;
  mean_gx /= C;
  for (int i = 0; i < C; i++)
    dx[i] += s.rstd * (weight[i] * dy[i] - x[i] * s.rstd * (real)mean_gx);
}

static inline void lx_rmsnorm_backward(const lx_ctx *ctx,
                                       real *dinp,         // (BT, C)
                                       real *dweight,      // (C) or NULL (frozen)
                                       const real *dout,   // (BT, C)
                                       const real *inp,    // (BT, C)
                                       const real *weight, // (C)
                                       int BT, int C) {
#pragma omp parallel for num_threads(ctx->threads)
  for (int r = 0; r < BT; r++)
    lx_rmsnorm_backward_row(dinp + (size_t)r * C, dout + (size_t)r * C, inp + (size_t)r * C, weight, C);
  if (!dweight) return; /* fine-tuning: frozen */
  for (int r = 0; r < BT; r++) { /* row order on one thread, as for layernorm */
    const real *x = inp + (size_t)r * C, *dy = dout + (size_t)r * C;
    lx_row_stats s = lx_rmsnorm_stats(x, C);
    for (int i = 0; i < C; i++)
      dweight[i] += dy[i] * x[i] * s.rstd;
  }
}

#endif
