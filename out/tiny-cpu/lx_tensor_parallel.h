/* lx_tensor_parallel.h — the vocabulary-parallel cross-entropy of Megatron-LM
 * for the emitted CPU programs: each tensor-parallel rank holds the logits of
 * its slice of the vocabulary, so a row's maximum, its sum of exponentials
 * and its target's logit are all-reduced over the tensor-parallel group
 * instead of gathering the whole (BT, V) logits on one rank. */
#ifndef LX_TENSOR_PARALLEL_H
#define LX_TENSOR_PARALLEL_H

#include "lx_loss.h"
#include "lx_mpi.h"

/* Returns the share of the mean loss of `rows` of the micro-batch's BT rows
 * (the same on every rank of comm) and keeps each row's log-sum-exp for the
 * backward. */
static inline real
lx_cross_entropy_forward_tp_rows(const lx_ctx *ctx,
                                 real *lse,          // (rows)
                                 const real *logits, // (rows, Vr): columns first .. first + Vr - 1
                                 const int *targets, // (rows)
                                 int rows, int BT, int V, int Vr, int first, MPI_Comm comm) {
  LX_CHECK(rows <= BT);
  int valid = lx_vocab_valid(V, Vr, first);
  real *row_max = (real *)LX_MALLOC(sizeof(real) * (size_t)rows); // (rows)
  real *picked = (real *)LX_MALLOC(sizeof(real) * (size_t)rows);  // (rows): the target's logit, 0 elsewhere
#pragma omp parallel for num_threads(ctx->threads)
  for (int r = 0; r < rows; r++) {
    const real *x = logits + (size_t)r * Vr;
    real max = -INFINITY;
    for (int v = 0; v < valid; v++)
      if (x[v] > max) max = x[v];
    row_max[r] = max;
    LX_CHECK(targets[r] >= 0 && targets[r] < V);
    int t = targets[r] - first;
    picked[r] = t >= 0 && t < valid ? x[t] : 0;
  }
  lx_watchdog_waiting("the vocabulary-parallel logits' row maxima over the %s group", lx_comm_name(comm));
  LX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, row_max, rows, LX_MPI_REAL, MPI_MAX, comm));
  lx_watchdog_done_waiting();
#pragma omp parallel for num_threads(ctx->threads)
  for (int r = 0; r < rows; r++) {
    const real *x = logits + (size_t)r * Vr;
    lx_acc sum = 0;
    for (int v = 0; v < valid; v++)
      sum += lx_exp(x[v] - row_max[r]);
    lse[r] = (real)sum;
  }
  lx_allreduce_sum(lse, rows, comm);
  lx_allreduce_sum(picked, rows, comm);
  lx_acc total = 0; /* in row order: the loss is the same for any thread count */
  for (int r = 0; r < rows; r++) {
    lse[r] = (real)(row_max[r] + log((lx_acc)lse[r]));
    total += lse[r] - picked[r];
  }
  free(row_max);
  free(picked);
  return (real)(total / BT);
}

/* Returns the mean loss of the BT rows (the same on every rank of comm) and
 * keeps each row's log-sum-exp for the backward. */
static inline real
lx_cross_entropy_forward_tp(const lx_ctx *ctx,
                            real *lse,          // (BT)
                            const real *logits, // (BT, Vr): columns first .. first + Vr - 1
                            const int *targets, // (BT)
                            int BT, int V, int Vr, int first, MPI_Comm comm) {
  return lx_cross_entropy_forward_tp_rows(ctx, lse, logits, targets, BT, BT, V, Vr, first, comm);
}

#endif
