/* lx_cuda_parallel.h — the communicators of a CUDA stage program and the
 * collectives inside its ops (host C++, included by stageN.cu).
 *
 * World ranks are laid out as on the CPU target (templates/cpu/lx_mpi.h):
 * rank = tp_rank + tp * (dp_rank + dp * stage), tensor-parallel fastest, so
 * that a tensor-parallel group shares a node and a stage's ranks are
 * contiguous (run.sh starts them as one app context). Each group is an MPI
 * sub-communicator and an lx_comm over the same ranks (lx_cuda_comm.h: NCCL,
 * or host memory with --comm host): tensor-parallel (the stage's ranks of one
 * replica), data-parallel (the stage's ranks of one tp_rank), the pipeline
 * (one rank per stage, same tp_rank and dp_rank), with several stages the
 * tied embedding's (the first and last stages of the pipeline), and the
 * pipeline's channels, which carry its sends and receives (below). */
#ifndef LX_CUDA_PARALLEL_H
#define LX_CUDA_PARALLEL_H

#include "lx_cuda_api.h"
#include "lx_cuda_comm.h"
#include "lx_mpi_errors.h"

static int tp_rank; /* this rank's place in its tensor-parallel group */
#define TP_RANK tp_rank
static lx_comm tp_comm, tied_comm;
static int has_tied_comm; /* the first or last of several stages */
static MPI_Comm dp_group; /* the data-parallel group in MPI: losses are averaged over it */
static MPI_Comm pp_group; /* the pipeline in MPI: the last stage tells the others the loss */

/* The pipeline's point-to-point channels (lynxgen's lx_channel, schedule.h):
 * a communicator of two ranks, sender first, per direction of each link
 * between neighbouring stages and per kind of message. NCCL runs the
 * operations of one communicator in the order they were issued, whatever
 * their streams: over one communicator for the whole pipeline, 1F1B's
 * gradient receives, posted first, would hold back the activation sends
 * their data waits for, and the stages would deadlock. A stage uses each
 * channel from one stream (lynxgen's verifier checks it), so that each
 * communicator's order is that stream's. */
enum { ACT_TO_NEXT, ACT_FROM_PREVIOUS, GRAD_TO_PREVIOUS, GRAD_FROM_NEXT, CHANNELS };
static lx_comm channels[CHANNELS]; /* size 0: not one of this stage's */

/* Every channel of the pipeline, in the same order on every rank:
 * activations from stage s to s + 1, then gradients from s + 1 to s, and
 * where `ring` (interleaved 1F1B) also between the last stage and the
 * first. Each is split off the pipeline's MPI group, which every stage takes
 * part in; the NCCL communicators of this rank's are then made together. */
static inline void lx_cuda_channels_start(int stage, int stages, int ring) {
  ncclUniqueId ids[CHANNELS];
  int links = stages < 2 ? 0 : ring ? stages : stages - 1;
  for (int grad = 0; grad <= 1; grad++)
    for (int link = 0; link < links; link++) {
      int first = link, second = (link + 1) % stages; /* activations go first to second */
      int sender = grad ? second : first, receiver = grad ? first : second;
      int role = stage == sender     ? (grad ? GRAD_TO_PREVIOUS : ACT_TO_NEXT)
                 : stage == receiver ? (grad ? GRAD_FROM_NEXT : ACT_FROM_PREVIOUS)
                                     : -1;
      MPI_Comm group;
      LX_MPI_CHECK(MPI_Comm_split(pp_group, role >= 0 ? 0 : MPI_UNDEFINED, stage == sender ? 0 : 1, &group));
      if (role >= 0) channels[role] = lx_comm_join(group, &ids[role]);
    }
  lx_comm_group_start();
  for (int c = 0; c < CHANNELS; c++)
    if (channels[c].size > 0) lx_comm_connect(&channels[c], &ids[c]);
  lx_comm_group_end();
}

/* This rank's groups; *replica and *tp are its dp_rank and tp_rank, and the
 * pipeline and data-parallel communicators go to *pipeline and *dp. */
static inline void lx_cuda_groups_start(int world_rank, int tp, int dp, int stage, int stages, int ring,
                                        int *replica, lx_comm *pipeline, lx_comm *data_parallel) {
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
  tp_comm = lx_comm_create(tp_group);
  *data_parallel = lx_comm_create(dp_group);
  *pipeline = lx_comm_create(pp_group);
  if (has_tied_comm) tied_comm = lx_comm_create(tied_group);
  lx_cuda_channels_start(stage, stages, ring);
}

static inline void lx_cuda_groups_finish(lx_comm *pipeline, lx_comm *data_parallel) {
  lx_comm_destroy(&tp_comm);
  lx_comm_destroy(data_parallel);
  lx_comm_destroy(pipeline);
  if (has_tied_comm) lx_comm_destroy(&tied_comm);
  for (int c = 0; c < CHANNELS; c++)
    if (channels[c].size > 0) lx_comm_destroy(&channels[c]);
}

/* An NCCL error raised asynchronously on any of the rank's communicators (a
 * peer gone) stops every rank with the communicator's name. */
static inline void lx_cuda_check_comms(lx_comm *pipeline, lx_comm *data_parallel) {
  lx_comm_check_async(pipeline, "ncclCommGetAsyncError(pipeline_comm)");
  lx_comm_check_async(data_parallel, "ncclCommGetAsyncError(dp_comm)");
  lx_comm_check_async(&tp_comm, "ncclCommGetAsyncError(tp_comm)");
  lx_comm_check_async(&tied_comm, "ncclCommGetAsyncError(tied_comm)");
  for (int c = 0; c < CHANNELS; c++)
    lx_comm_check_async(&channels[c], "ncclCommGetAsyncError(channels[c])");
}

/* The vocabulary-parallel cross-entropy (lx_cuda_vocab.cuh) of `rows` of a
 * micro-batch's BT rows (mini-sequences, MsT): loss[0] = (accumulate ?
 * loss[0] : 0) + their summed loss / BT, the same on every rank of comm, and
 * lse saved for the backward. The all-reduces run on ctx->stream, in order
 * with the kernels; ctx->scratch holds 3 * rows floats (row maxima, target
 * logits, row losses). */
static inline void lx_cross_entropy_forward_tp_rows(const lx_ctx *ctx,
                                                    float *loss,           // (1)
                                                    int accumulate,        // 1: add to loss[0]
                                                    float *lse,            // (rows)
                                                    const lx_bf16 *logits, // (rows, Vr)
                                                    const int *targets,    // (rows)
                                                    int rows, int BT, int V, int Vr, int first,
                                                    lx_comm *comm) {
  float *row_max = lx_scratch(ctx, 3 * (size_t)rows), *picked = row_max + rows, *losses = row_max + 2 * (size_t)rows;
  lx_cuda_vocab_cross_entropy_max(row_max, picked, logits, targets, rows, V, Vr, first, ctx->stream);
  lx_comm_all_reduce(row_max, row_max, (size_t)rows, LX_COMM_F32, LX_COMM_MAX, comm, ctx->stream);
  lx_cuda_vocab_cross_entropy_sum(lse, logits, row_max, rows, V, Vr, first, ctx->stream);
  lx_comm_all_reduce(lse, lse, (size_t)rows, LX_COMM_F32, LX_COMM_SUM, comm, ctx->stream);
  lx_comm_all_reduce(picked, picked, (size_t)rows, LX_COMM_F32, LX_COMM_SUM, comm, ctx->stream);
  lx_cuda_vocab_cross_entropy_finish(loss, accumulate, lse, losses, row_max, picked, rows, BT, ctx->stream);
}

/* The same over all BT rows: loss[0] = their mean loss; scratch 3 BT floats. */
static inline void lx_cross_entropy_forward_tp(const lx_ctx *ctx,
                                               float *loss,           // (1)
                                               float *lse,            // (BT)
                                               const lx_bf16 *logits, // (BT, Vr)
                                               const int *targets,    // (BT)
                                               int BT, int V, int Vr, int first, lx_comm *comm) {
  lx_cross_entropy_forward_tp_rows(ctx, loss, 0, lse, logits, targets, BT, BT, V, Vr, first, comm);
}

#endif
