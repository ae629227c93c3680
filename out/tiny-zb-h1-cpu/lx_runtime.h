/* lx_runtime.h — everything an emitted CPU training program needs besides
 * its kernels (lx_kernels.h) and its loop (lx_loop.h, included by
 * lx_main.h), one concern per header; all but lx_mpi.h are templates/common's,
 * which the CUDA programs use too:
 *   lx_errors.h      lx_die: a user error, one line, exit 1
 *   lx_mpi.h         start-up, non-blocking send/recv, all-reduce (LX_MPI_CHECK:
 *                    lx_mpi_errors.h)
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

#endif
