/* lx_cuda_train.h — the state a CUDA stage program shares between its
 * generated part (stageN.cu) and the training loop (lx_cuda_main.h). Host
 * C++; the random streams are the CPU target's (lx_rng.h), so dropout masks
 * and initial weights name the same draws on both targets. */
#ifndef LX_CUDA_TRAIN_H
#define LX_CUDA_TRAIN_H

#include <math.h>
#include <string.h>

#include "lx_rng.h"

typedef struct {
  const char *name;
  long long element;  /* first element in the params region */
  long long elements;
  double init_std;    /* > 0: normal(0, std); 0: the constant below */
  double init_value;
  int decay;          /* AdamW weight decay applies */
  long long stream;   /* init random stream: names the parameter, whatever the stage */
  long long file_element;
  int writes_file;
  int tied;
  int split; /* tensor-parallel shard: templates/cpu/lx_train.h */
  long long row_elements, whole_row;
  int pieces;
  long long piece_row[3], piece_rows[3];
} lx_param_tensor;

typedef struct {
  long long first, elements, shard_first;
} lx_param_bucket;

typedef struct {
  int max_seq_len, vocab, layers, heads, channels, padded_vocab;
} lx_gpt2_header;

/* One cudaStream_t per schedule stream (ir/schedule.h's order). */
enum { STREAM_COMPUTE, STREAM_RECOMPUTE, STREAM_SEND, STREAM_RECV, STREAM_TP, STREAM_DP, STREAM_COUNT };

static char *arena;
static int replica;
static uint64_t seed;
static int current_step;
static cudaStream_t streams[STREAM_COUNT];
static cudaEvent_t *events;                  /* one per schedule event */
static cudaEvent_t stream_done[STREAM_COUNT]; /* joins the streams at the end of a step */
static float *scratch_of[STREAM_COUNT];      /* kernel scratch, one per stream: streams run concurrently */
static float *losses;                        /* (MICRO_BATCHES) on the device */
static lx_cuda_matmul_context *matmul;
static ncclComm_t pipeline_comm, dp_comm;

static inline uint64_t lx_rng_stream_id(int step, int micro_batch, int layer, int op) {
  return lx_rng_stream((uint64_t)step, (uint64_t)micro_batch, (uint64_t)layer, (uint64_t)op);
}

/* Synthetic data: token i of global micro-batch mb, a pure function of the
 * seed, so that every stage draws the same pairs without sending them. */
static void lx_cuda_load(int *tokens, int *targets, int global_mb, int bt, int vocab, cudaStream_t stream) {
  static int *host;
  if (!host) CUDA_CHECK(cudaMallocHost((void **)&host, sizeof(int) * (size_t)(bt + 1)));
  CUDA_CHECK(cudaStreamSynchronize(stream)); /* the previous copy has left the buffer */
  for (int i = 0; i <= bt; i++) host[i] = (int)(lx_rng_bits(seed, 0x10ad + (uint64_t)global_mb, (uint64_t)i) % (uint64_t)vocab);
  if (tokens) CUDA_CHECK(cudaMemcpyAsync(tokens, host, sizeof(int) * (size_t)bt, cudaMemcpyHostToDevice, stream));
  if (targets) CUDA_CHECK(cudaMemcpyAsync(targets, host + 1, sizeof(int) * (size_t)bt, cudaMemcpyHostToDevice, stream));
}

#endif
