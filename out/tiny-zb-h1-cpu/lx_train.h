/* lx_train.h — what every emitted CPU stage program declares before its
 * tables: the parameter-table row (lx_params.h) and the blocking sends of
 * its forward-only passes. The training loop itself is lx_main.h, included
 * at the end of the stage file once its functions and tables exist. */
#ifndef LX_TRAIN_H
#define LX_TRAIN_H

#include "lx_params.h"

/* The context every kernel takes first (lx_common.h): one for the whole
 * program, all of OpenMP's threads (main sets it). */
static lx_ctx kernel_ctx;

/* Blocking point-to-point, for the forward-only passes (validation, gradient
 * checks) that have no schedule to overlap with. */
static inline void lx_send(const real *buf, // (n)
                           int64_t n, int peer, int kind, int micro_batch) {
  MPI_Request request;
  lx_isend(buf, n, peer, kind, micro_batch, &request);
  lx_wait(&request);
}

static inline void lx_recv(real *buf, // (n)
                           int64_t n, int peer, int kind, int micro_batch) {
  MPI_Request request;
  lx_irecv(buf, n, peer, kind, micro_batch, &request);
  lx_wait(&request);
}

#endif
