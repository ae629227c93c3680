/* lx_cuda_main.h — the CUDA side of a stage program's training loop,
 * included at the end of stageN.cu (which defines the schedule,
 * run_schedule, run_forward, the parameter table and the sizes). tp x dp MPI
 * ranks per stage, one per GPU (lx_cuda_parallel.h says which rank is which).
 *
 * The loop is the CPU program's (templates/common/lx_loop.h): the same
 * command line (--help lists it), the same token shards read in the same
 * window order per replica, the same learning-rate schedule, metrics.jsonl
 * and progress line, validation and llm.c checkpoints (of the fp32 master
 * weights). Here are the steps it takes on the GPU. Each step's tokens are
 * read into pinned host memory before the step is issued, so a step never
 * waits for the host. The CUDA options:
 *   --cuda-graph      issue the forwards and backwards of a step (NCCL calls
 *                     included) as one CUDA graph: captured on the second
 *                     step and replayed; re-captured into the same executable
 *                     graph each step when dropout draws depend on the step
 *   --profile FILE    time every op with CUDA events (steps 2 on) and write
 *                     FILE in the profile format of docs/cost-model.md, for
 *                     `lynxgen MODEL --profile FILE` */
#ifndef LX_CUDA_MAIN_H
#define LX_CUDA_MAIN_H

#ifndef LORA_RANK /* fine-tuning's programs define them: their adapters' largest rank and input */
#define LORA_RANK 0
#define LORA_WIDTH 0
#define LORA_DROPOUT 0
#endif

#define LX_TARGET_NORM_EPS LX_CUDA_NORM_EPS
#include "lx_loop.h"

#include "lx_cuda_shards.h"
#include <unistd.h>

#include <algorithm> /* std::max of the scratch needs */

/* The GPU of this rank: its index among the ranks of its node. */
static int local_rank(void) {
  const char *names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
  for (int i = 0; i < 3; i++)
    if (getenv(names[i])) return atoi(getenv(names[i]));
  return 0;
}

/* The step's forwards and backwards, eagerly or as a CUDA graph: the capture
 * starts on the compute stream, which every other stream first waits for, so
 * that all of them are captured; run_schedule joins them back at its end. */
static cudaGraphExec_t step_graph;
/* The capture step_graph's nodes were last set from. NCCL ties what a
 * captured call needs to the captured graph (a CUDA user object), and CUDA
 * does not say that an update hands it to the executable graph: the capture
 * lives until the next replaces it, when the step that ran it has finished
 * (finish_pass). */
static cudaGraph_t step_capture;
static void issue_step(int step, int ahead, int as_graph) {
  cudaStream_t s = streams[STREAM_COMPUTE];
  if (!as_graph) {
    run_schedule(step, ahead);
    return;
  }
  /* dropout masks name the step, and 2BW's slots and fill follow it: capture it again */
  if (!step_graph || DROPOUT > 0 || STEPS_OVERLAP) {
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CUDA_CHECK(cudaEventRecord(stream_done[STREAM_COMPUTE], s));
    for (int k = 1; k < STREAM_COUNT; k++) CUDA_CHECK(cudaStreamWaitEvent(streams[k], stream_done[STREAM_COMPUTE], 0));
    run_schedule(step, ahead);
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExecUpdateResultInfo info;
    if (step_graph && cudaGraphExecUpdate(step_graph, graph, &info) != cudaSuccess) {
      (void)cudaGetLastError(); /* the update failed: instantiate afresh */
      CUDA_CHECK(cudaGraphExecDestroy(step_graph));
      step_graph = NULL;
    }
    if (!step_graph) CUDA_CHECK(cudaGraphInstantiate(&step_graph, graph, 0));
    if (step_capture) CUDA_CHECK(cudaGraphDestroy(step_capture));
    step_capture = graph;
  }
  CUDA_CHECK(cudaGraphLaunch(step_graph, s));
}

/* Waits for the end of a step (or a forward-only pass) without hanging: polls the event and NCCL's
 * asynchronous error state; an NCCL error aborts the communicator and stops every rank with the
 * call, file and line, and a peer that died or stalls leaves the step unfinished until the
 * watchdog (--watchdog, lx_watchdog.h) ends the job. */
static void wait_step(cudaEvent_t stop) {
  lx_watchdog_waiting("the end of the step's kernels and NCCL calls on the GPU");
  for (;;) {
    cudaError_t status = cudaEventQuery(stop);
    if (status == cudaSuccess) break;
    if (status != cudaErrorNotReady) CUDA_CHECK(status);
    lx_cuda_check_comms(&pipeline_comm, &dp_comm);
    usleep(100);
  }
  lx_watchdog_done_waiting();
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

/* The most a profile line can take: a key of under 128 bytes and attributes
 * of under 96 (print_profile_table's buffers), the op's place cut to 255,
 * two %.6f of a double (at most 317 bytes each), a stage and two counts. */
#define PROF_LINE_MAX 2048

/* Every stage's measured ops, gathered on rank 0, which writes the file:
 * one `op` line per op that ran forward and backward, mean times in ms. */
static void profile_write(const char *path, int rank, int ranks) {
  char *text = (char *)malloc((size_t)PROF_SLOTS * PROF_LINE_MAX + 1);
  if (!text) lx_cuda_fail_at(__FILE__, __LINE__, "malloc", "host", "out of memory");
  int length = 0;
  for (int t = 0; t < PROF_SLOTS; t++) {
    const lx_prof_total *p = &prof_totals[t];
    if (!prof_ops[t].key || !p->calls[0] || !p->calls[1]) continue;
    char what[256];
    length +=
        snprintf(text + length, PROF_LINE_MAX, "op %s %.6f %.6f%s  # %s, stage %d, %lld + %lld launches\n",
                 prof_ops[t].key, p->ms[0] / p->calls[0], p->ms[1] / p->calls[1], prof_ops[t].attrs,
                 lx_one_line(prof_ops[t].what, what, sizeof what), STAGE, p->calls[0], p->calls[1]);
  }
  int *lengths = (int *)calloc((size_t)ranks, sizeof(int)), *offsets = (int *)calloc((size_t)ranks, sizeof(int));
  if (!lengths || !offsets) lx_cuda_fail_at(__FILE__, __LINE__, "calloc", "host", "out of memory");
  LX_MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths, 1, MPI_INT, 0, MPI_COMM_WORLD));
  int total = 0;
  for (int r = 0; r < ranks; r++) offsets[r] = total, total += lengths[r];
  char *all = (char *)malloc((size_t)total + 1);
  if (!all) lx_cuda_fail_at(__FILE__, __LINE__, "malloc", "host", "out of memory");
  LX_MPI_CHECK(MPI_Gatherv(text, length, MPI_CHAR, all, lengths, offsets, MPI_CHAR, 0, MPI_COMM_WORLD));
  if (rank == 0) {
    FILE *f = fopen(path, "w");
    if (!f) lx_cuda_fail_at(__FILE__, __LINE__, "fopen", "host", path);
    char model[256];
    fprintf(f, "# measured by the CUDA program of %s (B = %d, T = %d), mean ms per micro-batch\n",
            lx_one_line(MODEL_FILE, model, sizeof model), B, T);
    fwrite(all, 1, (size_t)total, f);
    if (fclose(f) != 0) lx_cuda_fail_at(__FILE__, __LINE__, "fclose", "host", path);
    printf("profile: %s\n", path);
  }
  free(all);
  free(lengths);
  free(offsets);
  free(text);
}

/* Device memory in use before this rank allocated anything (the CUDA
 * context, and other processes sharing the GPU), and what it allocates
 * beyond the arena: what the first step's report measures against. */
static long long used_at_start, allocated_beyond_arena;

static long long device_bytes_in_use(void) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return (long long)(total_bytes - free_bytes);
}

/* After the first step, which allocates the library workspaces it needs
 * (cuDNN's per stream): two lines, so that a run shows its device memory
 * against the plan's arena (bench/gpu/collect.py reads it). */
static void report_device_memory(void) {
  double gib = 1073741824.0, in_use = (double)(device_bytes_in_use() - used_at_start);
  printf("stage %d: device memory after step 1: %.3f GiB more in use than at start (arena %.3f GiB + %.3f GiB\n"
         "  of scratch and workspaces allocated with it: %+.2f%% over the arena; ranks sharing the GPU count too)\n",
         STAGE, in_use / gib, ARENA_BYTES / gib, allocated_beyond_arena / gib, 100.0 * (in_use / ARENA_BYTES - 1));
}

/* ---- the steps lx_loop.h takes ----------------------------------------------- */

static lx_loader *training_data;
/* The micro-batches staged at once: a step's, and under 2BW the next one's,
 * whose first ones it runs ahead (a ring indexed by the run's numbering). */
#define STAGED_BATCHES ((1 + STEPS_OVERLAP) * MICRO_BATCHES)
static int use_graph;         /* --cuda-graph */
static cudaEvent_t pass_done; /* recorded on the compute stream after a step or a forward-only pass */

/* This stage's tokens of the next `count` micro-batches of `data`, the
 * first of them numbered `first` in the run (none on a middle stage, which
 * loads nothing). */
static void stage_tokens(lx_loader *data, long long first, int count) {
  if (LOADS_TOKENS) lx_cuda_stage_tokens(data, first, count, STAGED_BATCHES, BT);
}

/* The micro-batches of the run staged so far: 2BW's steps load the next
 * one's first micro-batches, so a step that goes on stages the next whole
 * step's tokens too (the loader reads them in the run's order). */
static long long staged_until;
static void stage_step_tokens(int step, int continues) {
  long long first = (long long)step * MICRO_BATCHES; /* RUN_MB's numbering */
  long long end = first + (continues && STEPS_OVERLAP ? 2 : 1) * MICRO_BATCHES;
  if (staged_until < first) staged_until = first; /* the first step of this process */
  stage_tokens(training_data, staged_until, (int)(end - staged_until));
  staged_until = end;
}

static void finish_pass(void) {
  CUDA_CHECK(cudaEventRecord(pass_done, streams[STREAM_COMPUTE]));
  wait_step(pass_done);
}

static double train_step(const lx_train_settings *train, int step, double lr, double *grad_norm, int continues) {
  stage_step_tokens(step, continues);
  static int issued; /* steps this process ran: a resumed run's first step is not step 1 */
  int first = issued++ == 0; /* counted whether or not a graph replays the step (--profile runs without) */
  issue_step(step, continues, use_graph && !first); /* the first eagerly: NCCL connects, cuBLASLt picks */
  optimizer_step(train, step, lr);
  finish_pass();
  if (prof_totals) profile_collect(!first); /* not the first: it pays for start-up */
  if (first) report_device_memory();
  *grad_norm = step_grad_norm();
  return step_loss();
}

static double validation_loss(lx_loader *val, int batches, int step) {
  lx_loader_reset(val);
  double sum = 0;
  for (int b = 0; b < batches; b++) {
    stage_tokens(val, STEPS_OVERLAP ? (long long)(step + 1) * MICRO_BATCHES : 0, MICRO_BATCHES); /* run_forward's */
    run_forward(step);
    finish_pass();
    sum += step_loss();
    lx_watchdog_progress(); /* a validation of many batches may outlast --watchdog */
  }
  if (prof_totals) profile_collect(0); /* the profile times training steps only */
  return sum / batches;
}

/* ---- main ------------------------------------------------------------------------- */

/* The arena, streams and their kernel contexts, events and buffers of this rank's GPU. */
static void allocate(void) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  used_at_start = (long long)(total_bytes - free_bytes);
  printf("stage %d: arena %.3f GiB predicted by the plan, %.3f GiB free on the device\n", STAGE,
         ARENA_BYTES / 1073741824.0, free_bytes / 1073741824.0);
  CUDA_CHECK(cudaMalloc((void **)&arena, ARENA_BYTES));
  CUDA_CHECK(cudaMemset(arena, 0, ARENA_BYTES));
  if (HOST_ARENA_BYTES > 0) { /* offloaded activations: pinned, so that copies overlap compute */
    printf("stage %d: host arena %.3f GiB of pinned host memory for offloaded activations\n", STAGE,
           HOST_ARENA_BYTES / 1073741824.0);
    CUDA_CHECK(cudaMallocHost((void **)&host_arena, HOST_ARENA_BYTES));
  }
  /* cuBLASLt's workspace holds a product's split-K partial sums while it runs: the compute and
   * recompute streams' products overlap, so each has its own; the other streams run no product
   * and name the compute stream's. */
  lx_cuda_matmul_context *compute_matmul = lx_cuda_matmul_create(),
                         *recompute_matmul = lx_cuda_matmul_create();
  /* Recomputation in a window must not slow the communication it hides behind, nor the
   * compute stream once the window closes: NCCL's kernels (tp, dp, pipeline streams) get the
   * SMs first, then the compute stream, and the recompute stream what they leave (the planner
   * charges that slowdown to the recompute: the cost model's interference factor). Smaller
   * numbers are higher priorities; the copy streams use copy engines, not SMs. */
  int least_priority = 0, greatest_priority = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  int above_least = least_priority > greatest_priority ? least_priority - 1 : least_priority;
  for (int k = 0; k < STREAM_COUNT; k++) {
    bool communicates = k == STREAM_SEND || k == STREAM_RECV || k == STREAM_TP || k == STREAM_DP;
    int priority = communicates ? greatest_priority : k == STREAM_COMPUTE ? above_least : least_priority;
    CUDA_CHECK(cudaStreamCreateWithPriority(&streams[k], cudaStreamNonBlocking, priority));
    CUDA_CHECK(cudaEventCreateWithFlags(&stream_done[k], cudaEventDisableTiming));
    /* a stream runs one kernel at a time: the largest need of any (FLASH_HEADS, WIDEST: the stage's); the
     * materialized attention's blocks of scores only where attentions run */
    bool attends = k == STREAM_COMPUTE || k == STREAM_RECOMPUTE;
    size_t floats = std::max({lx_cuda_flash_attention_scratch_floats(B, T, FLASH_HEADS),
                              attends ? lx_cuda_attention_scratch_floats(T, ATTENTION_KV_HEADS) : 0,
                              lx_cuda_norm_backward_scratch_floats(BT, WIDEST),
                              lx_cuda_bias_backward_scratch_floats(BT, WIDEST), 3 * (size_t)BT,
                              lx_cuda_grad_norm_scratch_floats(), lx_cuda_lora_scratch_floats(BT, LORA_RANK, LORA_DROPOUT > 0 ? LORA_WIDTH : 0)});
    float *scratch = NULL;
    CUDA_CHECK(cudaMalloc((void **)&scratch, floats * sizeof(float)));
    ctx_of[k] =
        lx_ctx{streams[k], k == STREAM_RECOMPUTE ? recompute_matmul : compute_matmul, scratch, floats};
  }
  events = (cudaEvent_t *)calloc(EVENTS, sizeof(cudaEvent_t));
  for (int e = 0; e < EVENTS; e++) CUDA_CHECK(cudaEventCreateWithFlags(&events[e], cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&pass_done, cudaEventDisableTiming));
  CUDA_CHECK(cudaMalloc((void **)&losses, LOSS_SLOTS * sizeof(float)));
  CUDA_CHECK(cudaMemset(losses, 0, LOSS_SLOTS * sizeof(float))); /* a middle stage's are never written */
  CUDA_CHECK(cudaMallocHost((void **)&host_batches, sizeof(int) * (size_t)STAGED_BATCHES * 2 * BT));
  allocated_beyond_arena = device_bytes_in_use() - used_at_start - ARENA_BYTES;
}

/* --preflight on the launching node: its first GPU must hold a rank's arena
 * (a node without a GPU, a login node, cannot tell). */
static int preflight_gpu(int argc, char **argv) {
  int status = preflight(LX_PROGRAM_CUDA, argc, argv, ARENA_BYTES, "GPU");
  int devices = 0;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0 || cudaSetDevice(0) != cudaSuccess ||
      cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    printf("preflight: stage %d: no GPU visible here, its memory is not checked\n", STAGE);
    return status;
  }
  if ((long long)free_bytes < ARENA_BYTES)
    lx_die("preflight: GPU 0 has %.2f GiB free of %.2f GiB; a rank of stage %d needs %.2f GiB (its arena, plan.txt)",
           free_bytes / 1073741824.0, total_bytes / 1073741824.0, STAGE, ARENA_BYTES / 1073741824.0);
  return status;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--preflight")) return preflight_gpu(argc - 1, argv + 1);
  lx_start_catching_stop_signals(); /* before MPI_Init: a stop asked while the job starts is kept */
  int threads = MPI_THREAD_SINGLE; /* --comm host waits for messages on CUDA's host-function thread too */
  LX_MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &threads));
  int rank = 0, ranks = 1;
  LX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  LX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &ranks));
  lx_run_options o = model_run_options(LX_PROGRAM_CUDA, argc, argv); /* starts the watchdog */
  if (o.cuda_graph && o.profile_path) lx_usage_error("--profile times ops one by one: not with --cuda-graph");
  if (!lx_comm_choose(o.comm))
    lx_usage_error("--comm %s: the backends are nccl (the default) and host (through host memory, with MPI)",
                   o.comm);
  if (o.cuda_graph && lx_comm_kind == LX_COMM_HOST)
    lx_usage_error("--comm host waits on the host between kernels: not with --cuda-graph");
  if (lx_comm_kind == LX_COMM_HOST && threads < MPI_THREAD_MULTIPLE)
    lx_usage_error("--comm host needs an MPI library with MPI_THREAD_MULTIPLE; this one gives level %d", threads);
  use_graph = o.cuda_graph;
  if (ranks != STAGES * TENSOR_PARALLEL * DATA_PARALLEL) {
    if (rank == 0)
      fprintf(
          stderr,
          "lynx: error: this program was generated for %d ranks (tp %d x pp %d x dp %d) but runs with %d; "
          "use run.sh\n",
          STAGES * TENSOR_PARALLEL * DATA_PARALLEL, TENSOR_PARALLEL, STAGES, DATA_PARALLEL, ranks);
    lx_mpi_exit(LX_EXIT_ERROR);
  }
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  CUDA_CHECK(cudaSetDevice(devices > 0 ? local_rank() % devices : 0));
  lx_comm_host_start(STAGED_RECEIVES, sizeof(lx_bf16) * BOUNDARY_ELEMENTS);
  lx_cuda_groups_start(rank, TENSOR_PARALLEL, DATA_PARALLEL, STAGE, STAGES, PIPELINE_RING, &replica,
                       &pipeline_comm, &dp_comm);
  allocate();
  if (o.profile_path) prof_totals = (lx_prof_total *)calloc(PROF_SLOTS, sizeof(lx_prof_total));
  seed = o.train.seed;
  if (!o.init_checkpoint || FINETUNE) init_params(); /* fine-tuning: the adapters start here */
  if (o.init_checkpoint) load_checkpoint(o.init_checkpoint);
  start_weight_versions(); /* a resumed run reads both versions */
  training_data = open_training_data(&o);
  lx_loader *val = open_validation_data(&o, 0);
  int status = train(&o, training_data, val);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (prof_totals) profile_write(o.profile_path, rank, ranks);
  lx_loader_close(training_data);
  lx_loader_close(val);
  lx_cuda_groups_finish(&pipeline_comm, &dp_comm);
  lx_comm_host_stop();
  LX_MPI_CHECK(MPI_Finalize());
  return status;
}

#endif
