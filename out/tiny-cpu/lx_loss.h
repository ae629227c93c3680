/* lx_loss.h — fused softmax + cross-entropy, the mean over tokens.
 *
 * The forward saves the log-sum-exp of each row (gen/analysis/analyze.c: logits,
 * targets and lse), so the backward forms softmax = exp(logit - lse) without
 * a second max/sum pass and without a (BT, V) probability tensor.
 * Logit rows may be padded to Vp >= V columns (llm.c pads the vocabulary to
 * a multiple of 128): the padding takes no part and gets no gradient (zeros
 * where the backward writes it, LX_GRAD_WRITE). */
#ifndef LX_LOSS_H
#define LX_LOSS_H

#include "lx_common.h"

static inline real lx_logsumexp_row(const real *x, // (V)
                                    int V) {
  real max = -INFINITY;
  for (int v = 0; v < V; v++)
    if (x[v] > max) max = x[v];
  lx_acc sum = 0;
  for (int v = 0; v < V; v++)
    sum += lx_exp(x[v] - max);
  return (real)(max + log(sum));
}

/* `rows` of the micro-batch's BT rows (MsT mini-sequences): returns their summed loss / BT. */
static inline real lx_cross_entropy_forward_rows(const lx_ctx *ctx,
                                                 real *lse,          // (rows)
                                                 const real *logits, // (rows, Vp)
                                                 const int *targets, // (rows)
                                                 int rows, int BT, int V, int Vp) {
  LX_CHECK(V > 0 && V <= Vp && rows <= BT);
#pragma omp parallel for num_threads(ctx->threads)
  for (int r = 0; r < rows; r++)
    lse[r] = lx_logsumexp_row(logits + (size_t)r * Vp, V);
  lx_acc total = 0; /* in row order: the loss is the same for any thread count */
  for (int r = 0; r < rows; r++) {
    LX_CHECK(targets[r] >= 0 && targets[r] < V);
    total += lse[r] - logits[(size_t)r * Vp + targets[r]];
  }
  return (real)(total / BT);
}

/* Returns the mean of -log softmax(logits[r])[targets[r]] over the BT rows. */
static inline real lx_cross_entropy_forward(const lx_ctx *ctx,
                                            real *lse,          // (BT)
                                            const real *logits, // (BT, Vp)
                                            const int *targets, // (BT)
                                            int BT, int V, int Vp) {
  return lx_cross_entropy_forward_rows(ctx, lse, logits, targets, BT, BT, V, Vp);
}

/* dlogits += dloss / BT * (softmax(logits) - onehot(target)). dloss is the
 * gradient of the training objective with respect to this mean loss: 1 for
 * one micro-batch, 1 / micro_batches when a step averages several. */
/* Valid columns of a vocabulary slice [first, first + Vr): not the padding past V. */
static inline int lx_vocab_valid(int V, int Vr, int first) {
  return first >= V ? 0 : V - first < Vr ? V - first : Vr;
}

/* The same on a slice of the vocabulary (a tensor-parallel rank's columns
 * first .. first + Vr - 1), given the whole rows' log-sum-exp, for `rows` of
 * the BT rows. LX_GRAD_WRITE writes the rows whole: the padding columns get
 * zeros, which the LM head's backward reads. */
static inline void lx_cross_entropy_backward_slice_rows(const lx_ctx *ctx,
                                                        real *dlogits,      // (rows, Vr)
                                                        const real *logits, // (rows, Vr)
                                                        const real *lse,    // (rows)
                                                        const int *targets, // (rows)
                                                        real dloss, int rows, int BT, int V, int Vr,
                                                        int first, lx_grad_mode mode) {
  int valid = lx_vocab_valid(V, Vr, first);
  real scale = dloss / BT;
#pragma omp parallel for num_threads(ctx->threads)
  for (int r = 0; r < rows; r++) {
    const real *x = logits + (size_t)r * Vr;
    real *dx = dlogits + (size_t)r * Vr;
    for (int v = 0; v < valid; v++) {
      real grad = scale * (lx_exp(x[v] - lse[r]) - (first + v == targets[r] ? 1 : 0));
      dx[v] = mode == LX_GRAD_ADD ? dx[v] + grad : grad;
    }
    for (int v = valid; v < Vr && mode == LX_GRAD_WRITE; v++)
      dx[v] = 0;
  }
}

/* The slice's gradient for all BT rows. */
static inline void lx_cross_entropy_backward_slice(const lx_ctx *ctx,
                                                   real *dlogits,      // (BT, Vr)
                                                   const real *logits, // (BT, Vr)
                                                   const real *lse,    // (BT)
                                                   const int *targets, // (BT)
                                                   real dloss, int BT, int V, int Vr, int first,
                                                   lx_grad_mode mode) {
  lx_cross_entropy_backward_slice_rows(ctx, dlogits, logits, lse, targets, dloss, BT, BT, V, Vr, first, mode);
}

/* The whole vocabulary's gradient for `rows` of the BT rows. */
static inline void lx_cross_entropy_backward_rows(const lx_ctx *ctx,
                                                  real *dlogits,      // (rows, Vp)
                                                  const real *logits, // (rows, Vp)
                                                  const real *lse,    // (rows)
                                                  const int *targets, // (rows)
                                                  real dloss, int rows, int BT, int V, int Vp,
                                                  lx_grad_mode mode) {
  lx_cross_entropy_backward_slice_rows(ctx, dlogits, logits, lse, targets, dloss, rows, BT, V, Vp, 0, mode);
}

static inline void lx_cross_entropy_backward(const lx_ctx *ctx,
                                             real *dlogits,      // (BT, Vp)
                                             const real *logits, // (BT, Vp)
                                             const real *lse,    // (BT)
                                             const int *targets, // (BT)
                                             real dloss, int BT, int V, int Vp, lx_grad_mode mode) {
  lx_cross_entropy_backward_rows(ctx, dlogits, logits, lse, targets, dloss, BT, BT, V, Vp, mode);
}

#endif
