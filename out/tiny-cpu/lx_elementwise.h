/* lx_elementwise.h — gelu, swiglu, silu, residual add and dropout.
 *
 * gelu, swiglu and silu save their input; add saves nothing; dropout saves a
 * 1-byte mask (gen/analysis/analyze.c). Every loop is over independent elements. */
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

/* Element i is kept iff lx_dropout_keep(seed, stream, i): recomputing this
 * forward with the same (seed, stream) regenerates the same mask bit for bit.
 * mask may be NULL when p == 0 (the IR then saves none). */
/* Element i draws counter first + i: a sequence shard of a tensor (sequence
 * parallelism) draws the whole tensor's mask for its rows. */
static inline void lx_dropout_forward_at(const lx_ctx *ctx,
                                         real *out,       // (N)
                                         uint8_t *mask,   // (N) or NULL
                                         const real *inp, // (N)
                                         size_t N, double p, uint64_t seed, uint64_t stream, uint64_t first) {
  uint32_t threshold = lx_dropout_threshold(p);
  real scale = (real)(1.0 / (1.0 - p));
#pragma omp parallel for num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++) {
    int keep = lx_dropout_keep(seed, stream, first + i, threshold);
    if (mask) mask[i] = (uint8_t)keep;
    out[i] = keep ? inp[i] * scale : 0;
  }
}

static inline void lx_dropout_forward(const lx_ctx *ctx,
                                      real *out,       // (N)
                                      uint8_t *mask,   // (N) or NULL
                                      const real *inp, // (N)
                                      size_t N, double p, uint64_t seed, uint64_t stream) {
  lx_dropout_forward_at(ctx, out, mask, inp, N, p, seed, stream, 0);
}

static inline void lx_dropout_backward(const lx_ctx *ctx,
                                       real *dinp,          // (N)
                                       const real *dout,    // (N)
                                       const uint8_t *mask, // (N), or NULL when p == 0
                                       size_t N, double p, lx_grad_mode mode) {
  LX_CHECK(mask || p == 0);
  real scale = (real)(1.0 / (1.0 - p));
#pragma omp parallel for num_threads(ctx->threads)
  for (size_t i = 0; i < N; i++) {
    if (!mask || mask[i])
      dinp[i] = lx_grad_into(dinp + i, dout[i] * scale, mode);
    else if (mode == LX_GRAD_WRITE)
      dinp[i] = 0; /* a dropped element's gradient, written */
  }
}

#endif
