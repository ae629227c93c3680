/* lx_cuda_shards.h — the parts of the parameters a CUDA rank holds and
 * updates, as on the CPU target (templates/cpu/lx_main.h): the initial values
 * of its tensor-parallel shards, its ZeRO-1 shares of the gradient buckets,
 * the tied embedding's gradient sum, the global gradient norm and the
 * optimizer step, and the checkpoints of lx_weights.h (from and to the fp32
 * masters). Host C++, included by lx_cuda_main.h once the stage has defined
 * its parameter and bucket tables, and lx_loop.h. */
#ifndef LX_CUDA_SHARDS_H
#define LX_CUDA_SHARDS_H

/* host[i] = element first + i of the whole tensor p's normal init. Each
 * value is a pure function of its index, so the host's cores share the
 * work (a billion draws take a minute on one) and the bits stay the same. */
static inline void draw_normal(lx_bf16 *host, long long n, const lx_param_tensor *p, long long first) {
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < n; i++)
    host[i] = __float2bfloat16(
        (float)(p->init_std * lx_rng_normal(seed, (uint64_t)p->stream, (uint64_t)(first + i))));
}

/* Every tensor-parallel rank holds all of it: split 0, and split 3 (its
 * gradient a sum over the ranks' sequence shards). */
static inline bool replicated(const lx_param_tensor *p) { return p->split == 0 || p->split == 3; }

/* A rank draws the values its shard has in the whole tensor, so that every
 * tensor-parallel degree starts from the same model: split 1 takes rows of
 * each piece (column-parallel), split 2 a slice of every row (row-parallel). */
static inline void init_tensor(lx_bf16 *w, const lx_param_tensor *p) {
  if (p->init_std <= 0) {
    for (long long i = 0; i < p->elements; i++)
      w[i] = __float2bfloat16((float)p->init_value);
  } else if (replicated(p)) {
    draw_normal(w, p->elements, p, 0);
  } else if (p->split == 1) {
    for (int k = 0; k < p->pieces; k++) {
      long long rows = p->piece_rows[k], first_row = p->piece_row[k] + TP_RANK * rows;
      draw_normal(w, rows * p->row_elements, p, first_row * p->row_elements);
      w += rows * p->row_elements;
    }
  } else {
    for (long long row = 0; row < p->elements / p->row_elements; row++)
      draw_normal(w + row * p->row_elements, p->row_elements, p,
                  row * p->whole_row + TP_RANK * p->row_elements);
  }
}

/* ZeRO-1: the part of a bucket this replica updates (all of it without
 * ZeRO). NCCL's in-place reduce-scatter leaves replica r's summed share at
 * its own place in the bucket (recvbuff = sendbuff + r * count), so a share's
 * gradients sit beside its weights; its master weights and moments start at
 * the bucket's shard_first in the optimizer regions. */
typedef struct {
  long long own_first, own_elements, state_first;
} lx_share;

static inline lx_share share_of(const lx_param_bucket *b) {
  long long chunk = b->elements / ZERO_SHARDS;
  return lx_share{b->first + (ZERO_SHARDS > 1 ? replica * chunk : 0), chunk, b->shard_first};
}

/* Tensor t's elements [*lo, *hi) of the params (and grads) region within
 * this replica's share of its bucket; returns *lo's index in the optimizer
 * regions (master, adam_m, adam_v). */
static inline long long owned_part(const lx_param_tensor *t, long long *lo, long long *hi) {
  *lo = *hi = t->element;
  for (int b = 0; b < PARAM_BUCKETS; b++) {
    const lx_param_bucket *bucket = &param_buckets[b];
    if (t->element < bucket->first || t->element >= bucket->first + bucket->elements) continue;
    lx_share s = share_of(bucket);
    long long end = t->element + t->elements, own_end = s.own_first + s.own_elements;
    *lo = t->element > s.own_first ? t->element : s.own_first;
    *hi = end < own_end ? end : own_end;
    if (*hi < *lo) *hi = *lo;
    return s.state_first + (*lo - s.own_first);
  }
  lx_cuda_fail_at(__FILE__, __LINE__, "owned_part", "plan", "a parameter tensor is in no bucket");
  return 0;
}

#define PARAMS ((lx_bf16 *)(arena + REGION_params))
#define MASTER ((float *)(arena + REGION_master))

/* Waits for the host-to-device copies made so far: cudaMemcpy from pageable
 * memory may return before its data lands, on the legacy stream, which the
 * program's non-blocking streams do not wait for. */
static inline void uploads_landed(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

/* Weights drawn on the host from the CPU target's streams, copied as bf16
 * (fine-tuning's frozen ones too); the fp32 masters of this replica's shares
 * of the trained ones start from those bf16 values. */
static inline void init_params(void) {
  size_t bytes = (size_t)ALL_PARAM_ELEMENTS * sizeof(lx_bf16);
  lx_bf16 *host = (lx_bf16 *)malloc(bytes > 0 ? bytes : 1);
  if (!host) lx_cuda_fail_at(__FILE__, __LINE__, "malloc", "host", "out of memory");
  for (int t = 0; t < ALL_PARAM_TENSORS; t++)
    init_tensor(host + param_tensors[t].element, &param_tensors[t]);
  CUDA_CHECK(cudaMemcpy(PARAMS, host, bytes, cudaMemcpyHostToDevice));
  uploads_landed();
  free(host);
  for (int t = 0; t < PARAM_TENSORS; t++) {
    long long lo, hi, state = owned_part(&param_tensors[t], &lo, &hi);
    lx_cuda_master_from_params(MASTER + state, PARAMS + lo, (size_t)(hi - lo), streams[STREAM_COMPUTE]);
  }
}

/* ---- checkpoints: llm.c's fp32 weights are the masters --------------------- */

/* Between this replica's fp32 master shares and weights (PARAM_ELEMENTS, at
 * their params-region indices), in either direction. */
static inline void copy_masters(float *weights, cudaMemcpyKind direction) {
  int upload = direction == cudaMemcpyHostToDevice;
  for (int t = 0; t < PARAM_TENSORS; t++) {
    long long lo, hi, state = owned_part(&param_tensors[t], &lo, &hi);
    float *master = MASTER + state, *host = weights + lo;
    if (hi > lo)
      CUDA_CHECK(cudaMemcpy(upload ? master : host, upload ? host : master, (size_t)(hi - lo) * sizeof(float),
                            direction));
  }
}

/* n weights between the host's fp32 and a bf16 array of the arena (the
 * live weights, or 2BW's previous ones), rounded on the way in. */
static inline void copy_bf16_weights(lx_bf16 *device, float *host, long long n, cudaMemcpyKind direction) {
  size_t bytes = (size_t)n * sizeof(lx_bf16);
  lx_bf16 *rounded = (lx_bf16 *)LX_MALLOC(bytes > 0 ? bytes : 1);
  if (direction == cudaMemcpyHostToDevice) {
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < n; i++) rounded[i] = __float2bfloat16(host[i]);
    CUDA_CHECK(cudaMemcpy(device, rounded, bytes, cudaMemcpyHostToDevice));
  } else {
    CUDA_CHECK(cudaMemcpy(rounded, device, bytes, cudaMemcpyDeviceToHost));
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < n; i++) host[i] = __bfloat162float(rounded[i]);
  }
  free(rounded);
}

/* The file's fp32 weights become the masters as they are and, rounded, the
 * bf16 weights; the optimizer state stays zero. Fine-tuning reads the frozen
 * base alone (elements PARAM_ELEMENTS on): the adapters keep init_params's values. */
static inline void load_checkpoint(const char *path) {
  float *weights = (float *)LX_CALLOC((size_t)ALL_PARAM_ELEMENTS, sizeof(float));
  read_checkpoint(path, weights);
  long long first = FINETUNE ? PARAM_ELEMENTS : 0;
  copy_bf16_weights(PARAMS + first, weights + first, ALL_PARAM_ELEMENTS - first, cudaMemcpyHostToDevice);
  if (!FINETUNE) copy_masters(weights, cudaMemcpyHostToDevice);
  uploads_landed();
  free(weights);
}

/* Each replica writes the masters it updates; without ZeRO-1 they are equal
 * on every replica, and the first writes them, as it writes fine-tuning's
 * frozen weights (in no bucket). */
static void saved_part(const lx_param_tensor *t, long long *lo, long long *hi) {
  if (t >= param_tensors + PARAM_TENSORS) {
    *lo = t->element, *hi = replica > 0 ? *lo : t->element + t->elements;
    return;
  }
  owned_part(t, lo, hi);
  if (ZERO_SHARDS == 1 && replica > 0) *hi = *lo;
}

/* Between steps: the step that updated the masters has finished. */
static void export_weights(const char *llmc, const char *hf) {
  float *weights = (float *)LX_CALLOC((size_t)ALL_PARAM_ELEMENTS, sizeof(float));
#if FINETUNE /* the model the steps compute with: the bf16 base and adapters (whole on every replica), merged */
  copy_bf16_weights(PARAMS, weights, ALL_PARAM_ELEMENTS, cudaMemcpyDeviceToHost);
  merge_adapters(weights);
#else
  copy_masters(weights, cudaMemcpyDeviceToHost);
#endif
  if (llmc) write_checkpoint(llmc, weights);
  if (hf) write_hf_checkpoint(hf, weights);
  free(weights);
}

/* ---- the training state (--save, --resume): fp32 masters and moments ---------- */

/* Host copies of this rank's fp32 weights (PARAM_ELEMENTS: the masters of
 * its shares at their params-region indices), moments (the arena's) and,
 * under 2BW, previous weights (the bf16 ones the steps compute with). */
static float *state_host[4];

#define PREVIOUS_WEIGHTS ((lx_bf16 *)(arena + REGION_previous)) /* 2BW: the weights before the last update */

static void state_arrays(float *arrays[4], int saving) {
  const size_t sizes[4] = {(size_t)PARAM_ELEMENTS, (size_t)OPTIMIZER_ELEMENTS, (size_t)OPTIMIZER_ELEMENTS,
                           (size_t)PARAM_ELEMENTS};
  for (int i = 0; i < 3 + STEPS_OVERLAP; i++)
    if (!state_host[i]) state_host[i] = (float *)LX_CALLOC(sizes[i] > 0 ? sizes[i] : 1, sizeof(float));
  if (saving) {
    copy_masters(state_host[0], cudaMemcpyDeviceToHost);
    CUDA_CHECK(cudaMemcpy(state_host[1], arena + REGION_adam_m, sizes[1] * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(state_host[2], arena + REGION_adam_v, sizes[2] * 4, cudaMemcpyDeviceToHost));
    if (STEPS_OVERLAP) copy_bf16_weights(PREVIOUS_WEIGHTS, state_host[3], PARAM_ELEMENTS, cudaMemcpyDeviceToHost);
  }
  for (int i = 0; i < 4; i++) arrays[i] = state_host[i];
}

static long long moments_of(const lx_param_tensor *t, long long *lo, long long *hi) {
  return owned_part(t, lo, hi);
}

/* The fp32 masters of this replica's shares, as state_arrays copied them. */
static int weights_finite(void) {
  for (int t = 0; t < PARAM_TENSORS; t++) {
    long long lo, hi;
    owned_part(&param_tensors[t], &lo, &hi);
    for (long long e = lo; e < hi; e++)
      if (!std::isfinite(state_host[0][e])) return 0;
  }
  return 1;
}

/* A resume read every weight of the rank: the masters of its shares, and
 * the bf16 weights rounded from them (as every step makes them). */
static void state_restored(void) {
  copy_bf16_weights(PARAMS, state_host[0], PARAM_ELEMENTS, cudaMemcpyHostToDevice);
  copy_masters(state_host[0], cudaMemcpyHostToDevice);
  CUDA_CHECK(cudaMemcpy(arena + REGION_adam_m, state_host[1], (size_t)OPTIMIZER_ELEMENTS * 4,
                        cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(arena + REGION_adam_v, state_host[2], (size_t)OPTIMIZER_ELEMENTS * 4,
                        cudaMemcpyHostToDevice));
  if (STEPS_OVERLAP) copy_bf16_weights(PREVIOUS_WEIGHTS, state_host[3], PARAM_ELEMENTS, cudaMemcpyHostToDevice);
  uploads_landed();
}

/* 2BW: the live weights become the previous version, the one the next step computes with. */
static void keep_previous_weights(cudaStream_t s) {
  if (STEPS_OVERLAP)
    CUDA_CHECK(cudaMemcpyAsync(PREVIOUS_WEIGHTS, PARAMS, (size_t)PARAM_ELEMENTS * PARAM_ELT,
                               cudaMemcpyDeviceToDevice, s));
}

/* PipeDream-2BW: the version the steps compute with starts as the live one
 * (W(-1) = W(0): the first two steps take gradients at the initial weights). */
static void start_weight_versions(void) {
  keep_previous_weights(streams[STREAM_COMPUTE]);
  CUDA_CHECK(cudaStreamSynchronize(streams[STREAM_COMPUTE]));
}

/* ---- the optimizer step ---------------------------------------------------- */

/* The table on the first stage and its copy on the last take the same
 * steps: their gradients (this replica's shares of them) are summed. */
static inline void sum_tied_gradients(float *grads, cudaStream_t s) {
  for (int t = 0; has_tied_comm && t < PARAM_TENSORS; t++) {
    long long lo, hi;
    owned_part(&param_tensors[t], &lo, &hi);
    if (param_tensors[t].tied && hi > lo)
      lx_comm_all_reduce(grads + lo, grads + lo, (size_t)(hi - lo), LX_COMM_F32, LX_COMM_SUM, &tied_comm, s);
  }
}

/* Sequence parallelism: a row-wise op's parameter gradient is a sum over the
 * tensor-parallel ranks' rows (of this replica's share, under ZeRO-1). */
static inline void sum_sequence_parallel_gradients(float *grads, cudaStream_t s) {
  for (int t = 0; t < PARAM_TENSORS; t++) {
    long long lo, hi;
    owned_part(&param_tensors[t], &lo, &hi);
    if (param_tensors[t].split == 3 && hi > lo)
      lx_comm_all_reduce(grads + lo, grads + lo, (size_t)(hi - lo), LX_COMM_F32, LX_COMM_SUM, &tp_comm, s);
  }
}

/* *total = the squared norm of the whole model's gradient, every element
 * counted once: not the tied copy, not a replicated tensor's copies on other
 * tp ranks, not (without ZeRO) the other replicas' equal gradients. Summed
 * per rank in table order, then over the tp, dp and pipeline groups (together
 * every rank): the same number on every rank, in a fixed order for a plan. */
static inline void global_grad_norm_squared(float *total, const float *grads, cudaStream_t s) {
  CUDA_CHECK(cudaMemsetAsync(total, 0, sizeof(float), s));
  for (int i = 0; i < PARAM_TENSORS; i++) {
    const lx_param_tensor *t = &param_tensors[i];
    if ((t->tied && !t->writes_file) || (replicated(t) && TP_RANK > 0) || (ZERO_SHARDS == 1 && replica > 0))
      continue;
    long long lo, hi;
    owned_part(t, &lo, &hi);
    if (hi > lo)
      lx_cuda_grad_norm_squared(total, lx_scratch(&ctx_of[STREAM_COMPUTE], lx_cuda_grad_norm_scratch_floats()),
                                grads + lo, (size_t)(hi - lo), 1, s);
  }
  lx_comm_all_reduce(total, total, 1, LX_COMM_F32, LX_COMM_SUM, &tp_comm, s);
  lx_comm_all_reduce(total, total, 1, LX_COMM_F32, LX_COMM_SUM, &dp_comm, s);
  lx_comm_all_reduce(total, total, 1, LX_COMM_F32, LX_COMM_SUM, &pipeline_comm, s);
}

/* What `losses` holds: each micro-batch's loss, then the optimizer step's
 * squared gradient norm and clip factor. */
enum { LOSS_SLOTS = MICRO_BATCHES + 2 };
#define NORM_SQUARED (losses + MICRO_BATCHES)
#define CLIP_FACTOR (losses + MICRO_BATCHES + 1)

/* Tied and sequence-parallel sums, the global norm and its clip factor, AdamW (the run's settings) on this replica's
 * share of every tensor; under ZeRO-1 the replicas then hand each other
 * their updated bf16 shares (in-place all-gather). step counts from 1. */
static inline void optimizer_step(const lx_train_settings *train, int step, double lr) {
  cudaStream_t s = streams[STREAM_COMPUTE];
  float *grads = (float *)(arena + REGION_grads), *clip = CLIP_FACTOR;
  keep_previous_weights(s); /* 2BW: W(t+1) = W(t) - update(gradient at W(t-1)) */
  sum_tied_gradients(grads, s);
  sum_sequence_parallel_gradients(grads, s);
  global_grad_norm_squared(NORM_SQUARED, grads, s);
  lx_cuda_grad_clip_factor(clip, NORM_SQUARED, train->grad_clip, s);
  for (int t = 0; t < PARAM_TENSORS; t++) {
    const lx_param_tensor *p = &param_tensors[t];
    long long lo, hi, state = owned_part(p, &lo, &hi);
    if (hi > lo)
      lx_cuda_adamw_tensor(PARAMS + lo, MASTER + state, grads + lo, (float *)(arena + REGION_adam_m) + state,
                           (float *)(arena + REGION_adam_v) + state, clip, (size_t)(hi - lo), lr,
                           train->beta1, train->beta2, train->eps, p->decay ? train->weight_decay : 0.0,
                           step, s);
  }
  for (int b = 0; ZERO_SHARDS > 1 && b < PARAM_BUCKETS; b++) {
    lx_share share = share_of(&param_buckets[b]);
    lx_comm_all_gather(PARAMS + share.own_first, PARAMS + param_buckets[b].first, (size_t)share.own_elements,
                       LX_COMM_BF16, &dp_comm, s);
  }
  CUDA_CHECK(cudaMemsetAsync(grads, 0, (size_t)PARAM_ELEMENTS * 4, s));
}

/* The mean loss of the step's micro-batches (or of a forward-only pass's)
 * over the replicas, on every rank: the last stage computed it; the tensor-
 * parallel ranks of a replica have the same. Call once the pass finished. */
static inline double step_loss(void) {
  float host_losses[MICRO_BATCHES];
  CUDA_CHECK(cudaMemcpy(host_losses, losses, sizeof host_losses, cudaMemcpyDeviceToHost));
  double loss = 0;
  for (int mb = 0; mb < MICRO_BATCHES; mb++)
    loss += host_losses[mb] / MICRO_BATCHES;
  double sum = 0;
  LX_MPI_CHECK(MPI_Allreduce(&loss, &sum, 1, MPI_DOUBLE, MPI_SUM, dp_group));
  loss = sum / DATA_PARALLEL;
  LX_MPI_CHECK(MPI_Bcast(&loss, 1, MPI_DOUBLE, STAGES - 1, pp_group));
  return loss;
}

/* The global gradient norm of the last optimizer step (the same on every rank). */
static inline double step_grad_norm(void) {
  float norm_squared = 0;
  CUDA_CHECK(cudaMemcpy(&norm_squared, NORM_SQUARED, sizeof norm_squared, cudaMemcpyDeviceToHost));
  return sqrt((double)norm_squared);
}

#endif
