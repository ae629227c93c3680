/* lx_cuda_main.h — the training loop of a CUDA stage program, included at
 * the end of stageN.cu (which defines the schedule, run_schedule, the
 * parameter table and the sizes). tp x dp MPI ranks per stage, one per GPU
 * (lx_cuda_parallel.h says which rank is which).
 *
 *   --steps N   optimizer steps (default: the model file's)
 *   --lr X      peak learning rate
 * Prints "step N loss X lr Y (Z ms)" on the last stage, as the CPU target. */
#ifndef LX_CUDA_MAIN_H
#define LX_CUDA_MAIN_H

#include "lx_cuda_shards.h"

/* The GPU of this rank: its index among the ranks of its node. */
static int local_rank(void) {
  const char *names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
  for (int i = 0; i < 3; i++)
    if (getenv(names[i])) return atoi(getenv(names[i]));
  return 0;
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
  int steps = TRAINING_STEPS;
  double lr = TRAINING_LR;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--lr")) lr = atof(argv[i + 1]);
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
    run_schedule(step);
    optimizer_step(step, step_lr, clip);
    CUDA_CHECK(cudaEventRecord(stop, streams[STREAM_COMPUTE]));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0, host_losses[MICRO_BATCHES];
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaMemcpy(host_losses, losses, sizeof host_losses, cudaMemcpyDeviceToHost));
    double loss = step_loss(host_losses);
    if (STAGE == STAGES - 1 && TP_RANK == 0 && replica == 0)
      printf("step %d loss %.6f lr %.6g (%.1f ms)\n", step + 1, loss, step_lr, ms);
    fflush(stdout);
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  lx_cuda_groups_finish(pipeline_comm, dp_comm);
  MPI_CHECK(MPI_Finalize());
  return 0;
}

#endif
