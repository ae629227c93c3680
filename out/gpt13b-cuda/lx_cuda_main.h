/* lx_cuda_main.h — the training loop of a CUDA stage program, included at
 * the end of stageN.cu (which defines the schedule, run_schedule, the
 * parameter table and the sizes). tp x dp MPI ranks per stage, one per GPU
 * (lx_cuda_parallel.h says which rank is which).
 *
 *   --steps N         optimizer steps (default: the model file's)
 *   --lr X            peak learning rate
 *   --cuda-graph      issue the forwards and backwards of a step (NCCL calls
 *                     included) as one CUDA graph: captured on the second
 *                     step and replayed; re-captured into the same executable
 *                     graph each step when dropout draws depend on the step
 *   --profile FILE    time every op with CUDA events (steps 2 on) and write
 *                     FILE in the profile format of docs/cost-model.md, for
 *                     `lynxgen MODEL --profile FILE`
 * Prints "step N loss X lr Y (Z ms, T tokens/s)" on the last stage. */
#ifndef LX_CUDA_MAIN_H
#define LX_CUDA_MAIN_H

#include "lx_cuda_shards.h"
#include <unistd.h>

#define MPI_CHECK(call)                                                                                      \
  do {                                                                                                       \
    int lx_mpi_status_ = (call);                                                                             \
    if (lx_mpi_status_ != MPI_SUCCESS) lx_cuda_fail_at(__FILE__, __LINE__, #call, "MPI", "call failed");     \
  } while (0)

/* The GPU of this rank: its index among the ranks of its node. */
static int local_rank(void) {
  const char *names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
  for (int i = 0; i < 3; i++)
    if (getenv(names[i])) return atoi(getenv(names[i]));
  return 0;
}

/* Synthetic data: token i of global micro-batch mb, a pure function of the
 * seed, so that every stage draws the same pairs without sending them. */
static void draw_batches(void) {
  for (int mb = 0; mb < MICRO_BATCHES; mb++)
    for (int i = 0; i <= BT; i++)
      host_batches[(size_t)mb * (BT + 1) + i] =
          (int)(lx_rng_bits(seed, 0x10ad + (uint64_t)GLOBAL_MB(mb), (uint64_t)i) % (uint64_t)V);
}

/* The step's forwards and backwards, eagerly or as a CUDA graph: the capture
 * starts on the compute stream, which every other stream first waits for, so
 * that all of them are captured; run_schedule joins them back at its end. */
static cudaGraphExec_t step_graph;
static void issue_step(int step, int use_graph) {
  cudaStream_t s = streams[STREAM_COMPUTE];
  if (!use_graph) {
    run_schedule(step);
    return;
  }
  if (!step_graph || DROPOUT > 0) { /* dropout masks name the step: capture it again */
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CUDA_CHECK(cudaEventRecord(stream_done[STREAM_COMPUTE], s));
    for (int k = 1; k < STREAM_COUNT; k++) CUDA_CHECK(cudaStreamWaitEvent(streams[k], stream_done[STREAM_COMPUTE], 0));
    run_schedule(step);
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExecUpdateResultInfo info;
    if (step_graph && cudaGraphExecUpdate(step_graph, graph, &info) != cudaSuccess) {
      (void)cudaGetLastError(); /* the update failed: instantiate afresh */
      CUDA_CHECK(cudaGraphExecDestroy(step_graph));
      step_graph = NULL;
    }
    if (!step_graph) CUDA_CHECK(cudaGraphInstantiate(&step_graph, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
  }
  CUDA_CHECK(cudaGraphLaunch(step_graph, s));
}

/* Waits for the end of a step without hanging: polls the event and NCCL's
 * asynchronous error state; an NCCL error, or a step still running after
 * LX_WATCHDOG_S seconds (default 600; a peer that died or stalls), aborts the
 * communicator and stops every rank with the call, file and line. */
static void wait_step(cudaEvent_t stop) {
  const char *limit_text = getenv("LX_WATCHDOG_S");
  double limit = limit_text ? atof(limit_text) : 600.0, start = MPI_Wtime();
  for (;;) {
    cudaError_t status = cudaEventQuery(stop);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) CUDA_CHECK(status);
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(pipeline_comm, &async));
    if (async != ncclSuccess) {
      (void)ncclCommAbort(pipeline_comm);
      lx_cuda_fail_at(__FILE__, __LINE__, "ncclCommGetAsyncError(pipeline_comm)", "NCCL", ncclGetErrorString(async));
    }
    if (MPI_Wtime() - start > limit) {
      (void)ncclCommAbort(pipeline_comm);
      lx_cuda_fail_at(__FILE__, __LINE__, "cudaEventQuery(step end)", "watchdog",
                      "the step did not finish within LX_WATCHDOG_S seconds: communicator aborted");
    }
    usleep(100);
  }
}

/* Adds the step's measured launches to their ops' totals (after it synced). */
static void profile_collect(int keep) {
  for (int i = 0; i < prof_used && keep; i++) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, prof_events[2 * i], prof_events[2 * i + 1]));
    prof_totals[prof_slot_of[i] / 2].ms[prof_slot_of[i] % 2] += ms;
    prof_totals[prof_slot_of[i] / 2].calls[prof_slot_of[i] % 2]++;
  }
  prof_used = 0;
}

/* Every stage's measured ops, gathered on rank 0, which writes the file:
 * one `op` line per op that ran forward and backward, mean times in ms. */
static void profile_write(const char *path, int rank, int ranks) {
  char *text = (char *)malloc((size_t)PROF_SLOTS * 512 + 1);
  if (!text) lx_cuda_fail_at(__FILE__, __LINE__, "malloc", "host", "out of memory");
  int length = 0;
  for (int t = 0; t < PROF_SLOTS; t++) {
    const lx_prof_total *p = &prof_totals[t];
    if (!prof_ops[t].key || !p->calls[0] || !p->calls[1]) continue;
    length += snprintf(text + length, 512, "op %s %.6f %.6f%s  # %s, stage %d, %lld + %lld launches\n",
                       prof_ops[t].key, p->ms[0] / p->calls[0], p->ms[1] / p->calls[1], prof_ops[t].attrs,
                       prof_ops[t].what, STAGE, p->calls[0], p->calls[1]);
  }
  int *lengths = (int *)calloc((size_t)ranks, sizeof(int)), *offsets = (int *)calloc((size_t)ranks, sizeof(int));
  if (!lengths || !offsets) lx_cuda_fail_at(__FILE__, __LINE__, "calloc", "host", "out of memory");
  MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths, 1, MPI_INT, 0, MPI_COMM_WORLD));
  int total = 0;
  for (int r = 0; r < ranks; r++) offsets[r] = total, total += lengths[r];
  char *all = (char *)malloc((size_t)total + 1);
  if (!all) lx_cuda_fail_at(__FILE__, __LINE__, "malloc", "host", "out of memory");
  MPI_CHECK(MPI_Gatherv(text, length, MPI_CHAR, all, lengths, offsets, MPI_CHAR, 0, MPI_COMM_WORLD));
  if (rank == 0) {
    FILE *f = fopen(path, "w");
    if (!f) lx_cuda_fail_at(__FILE__, __LINE__, "fopen", "host", path);
    fprintf(f, "# measured by the CUDA program of %s (B = %d, T = %d), mean ms per micro-batch\n", MODEL_FILE, B, T);
    fwrite(all, 1, (size_t)total, f);
    if (fclose(f) != 0) lx_cuda_fail_at(__FILE__, __LINE__, "fclose", "host", path);
    printf("profile: %s\n", path);
  }
  free(all);
  free(lengths);
  free(offsets);
  free(text);
}

static double learning_rate(int step, int steps, double lr) {
  if (TRAINING_WARMUP > 0 && step < TRAINING_WARMUP) return lr * (step + 1) / TRAINING_WARMUP;
  if (TRAINING_LR_SCHEDULE == 0 || steps <= TRAINING_WARMUP) return lr;
  double progress = (double)(step - TRAINING_WARMUP) / (steps - TRAINING_WARMUP);
  return TRAINING_MIN_LR + 0.5 * (lr - TRAINING_MIN_LR) * (1 + cos(3.14159265358979323846 * progress));
}

int main(int argc, char **argv) {
  MPI_CHECK(MPI_Init(&argc, &argv));
  int rank = 0, ranks = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &ranks));
  int steps = TRAINING_STEPS, use_graph = 0;
  double lr = TRAINING_LR;
  const char *profile = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--cuda-graph")) use_graph = 1;
    else if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--lr")) lr = atof(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--profile")) profile = argv[++i];
    else {
      if (rank == 0) fprintf(stderr, "%s: unknown option '%s' (--steps N, --lr X, --cuda-graph, --profile FILE)\n", argv[0], argv[i]);
      MPI_Finalize();
      return 2;
    }
  }
  if (use_graph && profile) {
    if (rank == 0) fprintf(stderr, "%s: --profile times ops one by one: not with --cuda-graph\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  CUDA_CHECK(cudaSetDevice(devices > 0 ? local_rank() % devices : 0));
  if (ranks != STAGES * TENSOR_PARALLEL * DATA_PARALLEL) {
    if (rank == 0)
      fprintf(
          stderr,
          "lynx: error: this program was generated for %d ranks (tp %d x pp %d x dp %d) but runs with %d; "
          "use run.sh\n",
          STAGES * TENSOR_PARALLEL * DATA_PARALLEL, TENSOR_PARALLEL, STAGES, DATA_PARALLEL, ranks);
    MPI_CHECK(MPI_Finalize());
    return 1;
  }
  lx_cuda_groups_start(rank, TENSOR_PARALLEL, DATA_PARALLEL, STAGE, STAGES, &replica, &pipeline_comm,
                       &dp_comm);
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  printf("stage %d: arena %.3f GiB predicted by the plan, %.3f GiB free on the device\n", STAGE,
         ARENA_BYTES / 1073741824.0, free_bytes / 1073741824.0);
  CUDA_CHECK(cudaMalloc((void **)&arena, ARENA_BYTES));
  CUDA_CHECK(cudaMemset(arena, 0, ARENA_BYTES));
  for (int k = 0; k < STREAM_COUNT; k++) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&streams[k], cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&stream_done[k], cudaEventDisableTiming));
    size_t floats = lx_cuda_attention_scratch_floats(B, T, 256) + lx_cuda_norm_backward_scratch_floats(BT, VP) +
                    lx_cuda_bias_backward_scratch_floats(BT, 4 * C) + (size_t)BT + lx_cuda_grad_norm_scratch_floats();
    CUDA_CHECK(cudaMalloc((void **)&scratch_of[k], floats * sizeof(float)));
  }
  events = (cudaEvent_t *)calloc(EVENTS, sizeof(cudaEvent_t));
  for (int e = 0; e < EVENTS; e++) CUDA_CHECK(cudaEventCreateWithFlags(&events[e], cudaEventDisableTiming));
  CUDA_CHECK(cudaMalloc((void **)&losses, (MICRO_BATCHES + 1) * sizeof(float)));
  CUDA_CHECK(cudaMallocHost((void **)&host_batches, sizeof(int) * (size_t)MICRO_BATCHES * (BT + 1)));
  if (profile) prof_totals = (lx_prof_total *)calloc(PROF_SLOTS, sizeof(lx_prof_total));
  matmul = lx_cuda_matmul_create();
  seed = TRAINING_SEED;
  init_params();
  float *clip = losses + MICRO_BATCHES;
  for (int step = 0; step < steps; step++) {
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start, streams[STREAM_COMPUTE]));
    double step_lr = learning_rate(step, steps, lr);
    draw_batches();
    issue_step(step, use_graph && step > 0); /* the first step eagerly: NCCL connects, cuBLASLt picks */
    optimizer_step(step, step_lr, clip);
    CUDA_CHECK(cudaEventRecord(stop, streams[STREAM_COMPUTE]));
    wait_step(stop);
    if (prof_totals) profile_collect(step > 0);
    float ms = 0, host_losses[MICRO_BATCHES];
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaMemcpy(host_losses, losses, sizeof host_losses, cudaMemcpyDeviceToHost));
    double loss = step_loss(host_losses);
    if (STAGE == STAGES - 1 && TP_RANK == 0 && replica == 0)
      printf("step %d loss %.6f lr %.6g (%.1f ms, %.0f tokens/s)\n", step + 1, loss, step_lr, ms,
             (double)MICRO_BATCHES * DATA_PARALLEL * BT * 1000.0 / ms);
    fflush(stdout);
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  if (prof_totals) profile_write(profile, rank, ranks);
  lx_cuda_groups_finish(pipeline_comm, dp_comm);
  MPI_CHECK(MPI_Finalize());
  return 0;
}

#endif
