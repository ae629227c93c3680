/* lx_loss.h — fused softmax + cross-entropy, the mean over tokens.
 *
 * The forward saves the log-sum-exp of each row (gen/analyze.c: logits,
 * targets and lse), so the backward forms softmax = exp(logit - lse) without
 * a second max/sum pass and without a (BT, V) probability tensor.
 * Logit rows may be padded to Vp >= V columns (llm.c pads the vocabulary to
 * a multiple of 128): the padding takes no part and gets no gradient. */
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

/* Returns the mean of -log softmax(logits[r])[targets[r]] over the BT rows. */
static inline real lx_cross_entropy_forward(real *lse,          // (BT)
                                            const real *logits, // (BT, Vp)
                                            const int *targets, // (BT)
                                            int BT, int V, int Vp) {
  LX_CHECK(V > 0 && V <= Vp);
#pragma omp parallel for
  for (int r = 0; r < BT; r++)
    lse[r] = lx_logsumexp_row(logits + (size_t)r * Vp, V);
  lx_acc total = 0; /* in row order: the loss is the same for any thread count */
  for (int r = 0; r < BT; r++) {
    LX_CHECK(targets[r] >= 0 && targets[r] < V);
    total += lse[r] - logits[(size_t)r * Vp + targets[r]];
  }
  return (real)(total / BT);
}

/* dlogits += dloss / BT * (softmax(logits) - onehot(target)). dloss is the
 * gradient of the training objective with respect to this mean loss: 1 for
 * one micro-batch, 1 / micro_batches when a step averages several. */
static inline void lx_cross_entropy_backward(real *dlogits,      // (BT, Vp)
                                             const real *logits, // (BT, Vp)
                                             const real *lse,    // (BT)
                                             const int *targets, // (BT)
                                             real dloss, int BT, int V, int Vp) {
  real scale = dloss / BT;
#pragma omp parallel for
  for (int r = 0; r < BT; r++) {
    const real *x = logits + (size_t)r * Vp;
    real *dx = dlogits + (size_t)r * Vp;
    for (int v = 0; v < V; v++)
      dx[v] += scale * (lx_exp(x[v] - lse[r]) - (v == targets[r] ? 1 : 0));
  }
}

#endif
