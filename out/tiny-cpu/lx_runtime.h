/* lx_runtime.h — everything an emitted CPU training program needs besides
 * its kernels (lx_kernels.h), one concern per header:
 *   lx_errors.h      lx_die: a user error, one line, exit 1
 *   lx_mpi.h         start-up, LX_MPI_CHECK, non-blocking send/recv, all-reduce
 *   lx_options.h     the command line (--steps, --data, ... --help)
 *   lx_data.h        llm.c token shards and the data-parallel batch loader
 *   lx_checkpoint.h  llm.c GPT-2 checkpoints, read and written per stage
 *   lx_metrics.h     the per-step line on stdout and the JSON-lines file
 *
 * Include it first, before lx_kernels.h or any system header: it defines
 * _POSIX_C_SOURCE for glob, pread and pwrite under -std=c11. Build with
 * mpicc; link -lm. */
#ifndef LX_RUNTIME_H
#define LX_RUNTIME_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_checkpoint.h"
#include "lx_common.h"
#include "lx_data.h"
#include "lx_metrics.h"
#include "lx_mpi.h"
#include "lx_options.h"

#include <time.h>

/* Wall-clock milliseconds on a monotonic clock, for step timing. */
static inline double lx_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* The checkpoint protocol of lx_checkpoint.h, collective over comm: every
 * rank passes its own slices; rank 0 of comm creates and commits. */
static inline void lx_checkpoint_save_all(const char *path, const lx_gpt2_header *h,
                                          const lx_ckpt_slice *slices, // (n)
                                          int n,
                                          const float *params, // (stage parameter count)
                                          MPI_Comm comm) {
  int rank = 0;
  LX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  if (rank == 0) lx_checkpoint_create(path, h);
  LX_MPI_CHECK(MPI_Barrier(comm)); /* PATH.tmp exists at full size */
  lx_checkpoint_save(path, h, slices, n, params, rank == 0);
  LX_MPI_CHECK(MPI_Barrier(comm)); /* every slice is on disk */
  if (rank == 0) lx_checkpoint_commit(path);
  LX_MPI_CHECK(MPI_Barrier(comm)); /* nobody reads PATH before the rename */
}

#endif
