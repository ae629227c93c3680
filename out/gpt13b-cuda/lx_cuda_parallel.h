/* lx_cuda_parallel.h — the communicators of a CUDA stage program and the
 * collectives inside its ops (host C++, included by stageN.cu).
 *
 * World ranks are laid out as on the CPU target (templates/cpu/lx_mpi.h):
 * rank = tp_rank + tp * (dp_rank + dp * stage), tensor-parallel fastest, so
 * that a tensor-parallel group shares a node and a stage's ranks are
 * contiguous (run.sh starts them as one app context). Each group is an MPI
 * sub-communicator, and an NCCL communicator over the same ranks (the unique
 * id broadcast over the MPI one): tensor-parallel (the stage's ranks of one
 * replica), data-parallel (the stage's ranks of one tp_rank), the pipeline
 * (one rank per stage, same tp_rank and dp_rank: pipeline peers are stage
 * numbers) and, with several stages, the tied embedding's (the first and
 * last stages of the pipeline). */
#ifndef LX_CUDA_PARALLEL_H
#define LX_CUDA_PARALLEL_H

#include "lx_cuda_api.h"
#include "lx_mpi_errors.h"

static int tp_rank; /* this rank's place in its tensor-parallel group */
#define TP_RANK tp_rank
static ncclComm_t tp_comm, tied_comm;
static int has_tied_comm; /* the first or last of several stages */
static MPI_Comm dp_group; /* the data-parallel group in MPI: losses are averaged over it */
static MPI_Comm pp_group; /* the pipeline in MPI: the last stage tells the others the loss */

/* An NCCL communicator over the ranks of an MPI one. */
static inline ncclComm_t lx_cuda_nccl_comm(MPI_Comm group) {
  int rank = 0, size = 1;
  LX_MPI_CHECK(MPI_Comm_rank(group, &rank));
  LX_MPI_CHECK(MPI_Comm_size(group, &size));
  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  LX_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, group));
  ncclComm_t comm;
  NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  return comm;
}

/* This rank's groups; *replica and *tp are its dp_rank and tp_rank, and the
 * pipeline and data-parallel communicators go to *pipeline and *dp. */
static inline void lx_cuda_groups_start(int world_rank, int tp, int dp, int stage, int stages, int *replica,
                                        ncclComm_t *pipeline, ncclComm_t *data_parallel) {
  tp_rank = world_rank % tp;
  *replica = world_rank / tp % dp;
  if (world_rank / (tp * dp) != stage) {
    fprintf(stderr, "lynx: world rank %d belongs to stage %d but runs the program of stage %d; use run.sh\n",
            world_rank, world_rank / (tp * dp), stage);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Comm tp_group, tied_group;
  LX_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, stage * dp + *replica, tp_rank, &tp_group));
  LX_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, stage * tp + tp_rank, *replica, &dp_group));
  LX_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, *replica * tp + tp_rank, stage, &pp_group));
  has_tied_comm = stages > 1 && (stage == 0 || stage == stages - 1);
  LX_MPI_CHECK(MPI_Comm_split(pp_group, has_tied_comm ? 0 : MPI_UNDEFINED, stage, &tied_group));
  tp_comm = lx_cuda_nccl_comm(tp_group);
  *data_parallel = lx_cuda_nccl_comm(dp_group);
  *pipeline = lx_cuda_nccl_comm(pp_group);
  if (has_tied_comm) tied_comm = lx_cuda_nccl_comm(tied_group);
}

static inline void lx_cuda_groups_finish(ncclComm_t pipeline, ncclComm_t data_parallel) {
  NCCL_CHECK(ncclCommDestroy(tp_comm));
  NCCL_CHECK(ncclCommDestroy(data_parallel));
  NCCL_CHECK(ncclCommDestroy(pipeline));
  if (has_tied_comm) NCCL_CHECK(ncclCommDestroy(tied_comm));
}

/* The vocabulary-parallel cross-entropy (lx_cuda_vocab.cuh): loss[0] = the
 * mean loss of the BT rows, the same on every rank of comm, and lse saved for
 * the backward. The all-reduces run on ctx->stream, in order with the kernels;
 * ctx->scratch holds 3 BT floats (row maxima, target logits, row losses). */
static inline void lx_cross_entropy_forward_tp(const lx_ctx *ctx,
                                               float *loss,           // (1)
                                               float *lse,            // (BT)
                                               const lx_bf16 *logits, // (BT, Vr)
                                               const int *targets,    // (BT)
                                               int BT, int V, int Vr, int first, ncclComm_t comm) {
  float *row_max = ctx->scratch, *picked = ctx->scratch + BT, *losses = ctx->scratch + 2 * (size_t)BT;
  lx_cuda_vocab_cross_entropy_max(row_max, picked, logits, targets, BT, V, Vr, first, ctx->stream);
  NCCL_CHECK(ncclAllReduce(row_max, row_max, (size_t)BT, ncclFloat32, ncclMax, comm, ctx->stream));
  lx_cuda_vocab_cross_entropy_sum(lse, logits, row_max, BT, V, Vr, first, ctx->stream);
  NCCL_CHECK(ncclAllReduce(lse, lse, (size_t)BT, ncclFloat32, ncclSum, comm, ctx->stream));
  NCCL_CHECK(ncclAllReduce(picked, picked, (size_t)BT, ncclFloat32, ncclSum, comm, ctx->stream));
  lx_cuda_vocab_cross_entropy_finish(loss, lse, losses, row_max, picked, BT, ctx->stream);
}

#endif
