/* lx_cuda_train.h — the state a CUDA stage program shares between its
 * generated part (stageN.cu) and the training loop (lx_cuda_main.h). Host
 * C++; the parameter tables, the token loader and the random streams are the
 * CPU target's (templates/common), so a CUDA run reads the tokens of a CPU
 * run, and dropout masks and initial weights name the same draws. */
#ifndef LX_CUDA_TRAIN_H
#define LX_CUDA_TRAIN_H

#include <math.h>
#include <string.h>

#include "lx_checkpoint.h" /* lx_gpt2_header, of the stage's table */
#include "lx_cuda_comm.h"
#include "lx_data.h"
#include "lx_params.h"
#include "lx_rng.h"

/* One cudaStream_t per schedule stream (ir/schedule.h's order). */
enum {
  STREAM_COMPUTE, STREAM_RECOMPUTE, STREAM_SEND, STREAM_RECV, STREAM_TP, STREAM_DP,
  STREAM_OFFLOAD, STREAM_PREFETCH, /* activation copies to pinned host memory and back */
  STREAM_COUNT
};

static char *arena;
static int replica;
static uint64_t seed;
static int current_step;
static cudaStream_t streams[STREAM_COUNT];
static cudaEvent_t *events;                  /* one per schedule event */
static cudaEvent_t stream_done[STREAM_COUNT]; /* joins the streams at the end of a step */
/* The kernels' context on each stream (lx_cuda_context.h): the stream, the
 * one matmul context, and the stream's own scratch (streams run concurrently). */
static lx_ctx ctx_of[STREAM_COUNT];
static float *losses; /* on the device: lx_cuda_shards.h's LOSS_SLOTS */
static lx_comm pipeline_comm, dp_comm;

/* The step's tokens, (micro-batch, inputs and targets, BT) in pinned host
 * memory: read before the step is issued (lx_cuda_stage_tokens), copied in
 * by its LOADs, so the step itself never waits for the host and can be a
 * CUDA graph. */
static int *host_batches;

/* The loader's next `count` batches, as the CPU program's LOADs take them
 * one by one: the run's micro-batch first + i is the loader's i-th next
 * window, at slot (first + i) % slots of the ring host_batches. */
static inline void lx_cuda_stage_tokens(lx_loader *loader, long long first, int count, int slots, int bt) {
  for (int i = 0; i < count; i++) {
    int *inputs = host_batches + (size_t)((first + i) % slots) * 2 * (size_t)bt;
    lx_loader_next(loader, inputs, inputs + bt);
  }
}

/* slot: the micro-batch's staged slot (its number in the run, modulo). */
static inline void lx_cuda_load(int *tokens, int *targets, int slot, int bt, cudaStream_t stream) {
  const int *inputs = host_batches + (size_t)slot * 2 * (size_t)bt;
  size_t bytes = sizeof(int) * (size_t)bt;
  if (tokens) CUDA_CHECK(cudaMemcpyAsync(tokens, inputs, bytes, cudaMemcpyHostToDevice, stream));
  if (targets) CUDA_CHECK(cudaMemcpyAsync(targets, inputs + bt, bytes, cudaMemcpyHostToDevice, stream));
}

/* --profile FILE: a pair of timing events around every op's launches (steps
 * issued eagerly, after the first); lx_cuda_main.h sums them per op and
 * writes the profile file that `lynxgen --profile` reads. */
typedef struct {
  const char *key;   /* the profile line's fields before the times; NULL: not an op that runs */
  const char *attrs; /* and after them (seq=, heads=, impl= of attention) */
  const char *what;  /* graph, variable and model-file line, for the comment */
} lx_prof_op;
typedef struct {
  double ms[2]; /* forward (and recompute), backward */
  long long calls[2];
} lx_prof_total;
static lx_prof_total *prof_totals; /* NULL: not profiling */
static cudaEvent_t *prof_events;   /* (start, stop) per measured launch of the step */
static int *prof_slot_of;          /* slot * 2 + backward of each pair */
static int prof_used, prof_cap;

static inline void lx_prof_begin(int slot, int backward, cudaStream_t stream) {
  if (!prof_totals) return;
  if (prof_used == prof_cap) {
    int cap = prof_cap ? 2 * prof_cap : 1024;
    prof_events = (cudaEvent_t *)realloc(prof_events, sizeof(cudaEvent_t) * 2 * (size_t)cap);
    prof_slot_of = (int *)realloc(prof_slot_of, sizeof(int) * (size_t)cap);
    if (!prof_events || !prof_slot_of) lx_cuda_fail_at(__FILE__, __LINE__, "realloc", "host", "out of memory");
    for (int e = 2 * prof_cap; e < 2 * cap; e++) CUDA_CHECK(cudaEventCreate(&prof_events[e]));
    prof_cap = cap;
  }
  prof_slot_of[prof_used] = slot * 2 + backward;
  CUDA_CHECK(cudaEventRecord(prof_events[2 * prof_used], stream));
  prof_used++;
}

static inline void lx_prof_end(cudaStream_t stream) {
  if (prof_totals) CUDA_CHECK(cudaEventRecord(prof_events[2 * prof_used - 1], stream));
}

#endif
