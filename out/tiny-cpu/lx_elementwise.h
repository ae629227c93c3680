/* lx_elementwise.h — gelu, swiglu, silu, residual add and dropout.
 *
 * gelu, swiglu and silu save their input; add and dropout save nothing
 * (gen/analysis/analyze.c): dropout's backward draws the forward's mask again.
 * Every loop is over independent elements. */
#ifndef LX_ELEMENTWISE_H
#define LX_ELEMENTWISE_H

#include "lx_common.h"
#include "lx_rng.h"

/* ---- gelu, tanh approximation (as GPT-2) ---------------------------------- */

#define LX_GELU_K 0.7978845608028654 /* sqrt(2 / pi) */
#define LX_GELU_C 0.044715

static inline void lx_gelu_forward(const lx_ctx *ctx,
                                   real *out,       // (N)
                                   const real *inp, // (N)
                                   size_t N) {
#pragma omp parallel for num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++) {
    real x = inp[i];
    out[i] = (real)0.5 * x * (1 + lx_tanh((real)LX_GELU_K * (x + (real)LX_GELU_C * x * x * x)));
  }
}

static inline void lx_gelu_backward(const lx_ctx *ctx,
                                    real *dinp,       // (N)
                                    const real *dout, // (N)
                                    const real *inp,  // (N)
                                    size_t N, lx_grad_mode mode) {
#pragma omp parallel for num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++) {
    real x = inp[i];
    real th = lx_tanh((real)LX_GELU_K * (x + (real)LX_GELU_C * x * x * x));
    real du_dx = (real)LX_GELU_K * (1 + 3 * (real)LX_GELU_C * x * x);
    real grad = (real)0.5 * (1 + th) + (real)0.5 * x * (1 - th * th) * du_dx;
    dinp[i] = lx_grad_into(dinp + i, grad * dout[i], mode);
  }
}

/* ---- swiglu: silu(gate) * up, gate and up the two halves of each row ---- */

static inline real lx_sigmoid(real x) { return 1 / (1 + lx_exp(-x)); }

static inline void lx_swiglu_forward(const lx_ctx *ctx,
                                     real *out,       // (BT, F)
                                     const real *inp, // (BT, 2F): gate | up
                                     int BT, int F) {
#pragma omp parallel for num_threads(ctx->threads)
  for (int r = 0; r < BT; r++) {
    const real *gate = inp + (size_t)r * 2 * F, *up = gate + F;
    real *y = out + (size_t)r * F;
    for (int i = 0; i < F; i++)
      y[i] = gate[i] * lx_sigmoid(gate[i]) * up[i];
  }
}

static inline void lx_swiglu_backward(const lx_ctx *ctx,
                                      real *dinp,       // (BT, 2F)
                                      const real *dout, // (BT, F)
                                      const real *inp,  // (BT, 2F)
                                      int BT, int F, lx_grad_mode mode) {
#pragma omp parallel for num_threads(ctx->threads)
  for (int r = 0; r < BT; r++) {
    const real *gate = inp + (size_t)r * 2 * F, *up = gate + F;
    real *dgate = dinp + (size_t)r * 2 * F, *dup = dgate + F;
    const real *dy = dout + (size_t)r * F;
    for (int i = 0; i < F; i++) {
      real s = lx_sigmoid(gate[i]);
      real dsilu = s * (1 + gate[i] * (1 - s));
      dgate[i] = lx_grad_into(dgate + i, dy[i] * up[i] * dsilu, mode);
      dup[i] = lx_grad_into(dup + i, dy[i] * gate[i] * s, mode);
    }
  }
}

/* ---- silu: x sigmoid(x) ------------------------------------------------------ */

static inline void lx_silu_forward(const lx_ctx *ctx,
                                   real *out,       // (N)
                                   const real *inp, // (N)
                                   size_t N) {
#pragma omp parallel for num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++)
    out[i] = inp[i] * lx_sigmoid(inp[i]);
}

static inline void lx_silu_backward(const lx_ctx *ctx,
                                    real *dinp,       // (N)
                                    const real *dout, // (N)
                                    const real *inp,  // (N)
                                    size_t N, lx_grad_mode mode) {
#pragma omp parallel for num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++) {
    real s = lx_sigmoid(inp[i]);
    dinp[i] = lx_grad_into(dinp + i, dout[i] * s * (1 + inp[i] * (1 - s)), mode);
  }
}

/* ---- residual add ----------------------------------------------------------- */

static inline void lx_add_forward(const lx_ctx *ctx,
                                  real *out,     // (N)
                                  const real *a, // (N)
                                  const real *b, // (N)
                                  size_t N) {
#pragma omp parallel for num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++)
    out[i] = a[i] + b[i];
}

/* da and db may be the same buffer (add(x, x), both LX_GRAD_ADD); each gets dout once. */
static inline void lx_add_backward(const lx_ctx *ctx,
                                   real *da,         // (N)
                                   real *db,         // (N)
                                   const real *dout, // (N)
                                   size_t N, lx_grad_mode mode_a, lx_grad_mode mode_b) {
#pragma omp parallel for num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++) {
    da[i] = lx_grad_into(da + i, dout[i], mode_a);
    db[i] = lx_grad_into(db + i, dout[i], mode_b);
  }
}

/* ---- dropout (inverted: kept elements scaled by 1 / (1 - p)) -------------- */

/* Element i is kept iff lx_dropout_keep(seed, stream, first + i): a pure
 * function of its counter, so that a recomputed forward and the backward
 * draw the forward's mask again, bit for bit, and nothing is stored. A
 * sequence shard of a tensor (sequence parallelism) draws the whole tensor's
 * mask for its rows from counter `first`. */
static inline void lx_dropout_forward_at(const lx_ctx *ctx,
                                         real *out,       // (N)
                                         const real *inp, // (N)
                                         size_t N, double p, uint64_t seed, uint64_t stream, uint64_t first) {
  uint32_t threshold = lx_dropout_threshold(p);
  real scale = (real)(1.0 / (1.0 - p));
#pragma omp parallel for num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++)
    out[i] = lx_dropout_keep(seed, stream, first + i, threshold) ? inp[i] * scale : 0;
}

static inline void lx_dropout_forward(const lx_ctx *ctx,
                                      real *out,       // (N)
                                      const real *inp, // (N)
                                      size_t N, double p, uint64_t seed, uint64_t stream) {
  lx_dropout_forward_at(ctx, out, inp, N, p, seed, stream, 0);
}

/* dinp += dout / (1 - p) where the forward's draw (the same seed, stream and
 * first) kept the element. */
static inline void lx_dropout_backward_at(const lx_ctx *ctx,
                                          real *dinp,       // (N)
                                          const real *dout, // (N)
                                          size_t N, double p, uint64_t seed, uint64_t stream, uint64_t first,
                                          lx_grad_mode mode) {
  uint32_t threshold = lx_dropout_threshold(p);
  real scale = (real)(1.0 / (1.0 - p));
#pragma omp parallel for num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++) {
    if (lx_dropout_keep(seed, stream, first + i, threshold))
      dinp[i] = lx_grad_into(dinp + i, dout[i] * scale, mode);
    else if (mode == LX_GRAD_WRITE)
      dinp[i] = 0; /* a dropped element's gradient, written */
  }
}

static inline void lx_dropout_backward(const lx_ctx *ctx,
                                       real *dinp,       // (N)
                                       const real *dout, // (N)
                                       size_t N, double p, uint64_t seed, uint64_t stream,
                                       lx_grad_mode mode) {
  lx_dropout_backward_at(ctx, dinp, dout, N, p, seed, stream, 0, mode);
}

#endif
