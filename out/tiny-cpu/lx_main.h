/* lx_main.h — the CPU side of an emitted stage program's training loop,
 * included last: the stage file has defined its shapes (enums), its arena
 * layout (REGION_*), its graph functions, run_schedule, run_forward,
 * load_micro_batch and the tables param_tensors and param_buckets before
 * this point. The loop itself, its options, data, metrics and checkpoints
 * are lx_loop.h's, shared with the CUDA programs; here are the steps it
 * takes on the CPU and the gradient check. tp x dp ranks run each stage's
 * program (lx_mpi.h says which rank is which). */
#ifndef LX_MAIN_H
#define LX_MAIN_H

#include <omp.h>
#include <string.h>

#define CHECKPOINT_FP32 (sizeof(real) == sizeof(float)) /* not in the gradient check's double build */
#define LX_TARGET_NORM_EPS LX_NORM_EPS
#include "lx_loop.h"

#define ADAM_M ((real *)AT(REGION_adam_m))
#define ADAM_V ((real *)AT(REGION_adam_v))
#define PREVIOUS_WEIGHTS ((real *)AT(REGION_previous)) /* 2BW: the weights before the last update */

/* The tied embedding lives on the first stage and, as a copy, on the last:
 * their gradients are summed so both copies take the same steps. */
static MPI_Comm tied_comm = MPI_COMM_NULL;

/* ---- the arena ----------------------------------------------------------------- */

/* Poison: every byte 0xFF, a NaN as float or double and -1 as int, so that
 * a read of memory the plan says is dead poisons the loss. */
#define LX_POISON_BYTE 0xFF

static void allocate_arena(void) {
  size_t bytes = (size_t)ARENA_BYTES * REAL_SCALE;
  arena = (char *)aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!arena) lx_die("cannot allocate the %zu-byte arena of stage %d", bytes, STAGE);
  memset(arena, LX_POISON_BYTE, bytes);
  if (HOST_ARENA_BYTES > 0) { /* offloaded activations: the GPU target's pinned host memory */
    size_t host_bytes = (size_t)HOST_ARENA_BYTES * REAL_SCALE;
    host_arena = (char *)aligned_alloc(4096, (host_bytes + 4095) / 4096 * 4096);
    if (!host_arena) lx_die("cannot allocate the %zu-byte host arena of stage %d", host_bytes, STAGE);
    memset(host_arena, LX_POISON_BYTE, host_bytes);
  }
}

#ifdef LX_CHECK_MEMORY
#define LX_POISON(offset, bytes) memset(AT(offset), LX_POISON_BYTE, (size_t)(bytes) * REAL_SCALE)
#else
#define LX_POISON(offset, bytes) ((void)0)
#endif

/* ---- parameters ---------------------------------------------------------------- */

static int replicated(const lx_param_tensor *t) { return t->split == 0 || t->split == 3; }

/* A rank draws the values its share has in the whole tensor, so that every
 * tensor-parallel degree trains the same model from the same start. */
static void initialize_normal(const lx_param_tensor *t, uint64_t seed) {
  real *w = PARAMS + t->element;
  if (replicated(t)) {
    lx_init_normal(&kernel_ctx, w, (size_t)t->elements, t->init_std, seed, (uint64_t)t->stream);
  } else if (t->split == 1) {
    for (int k = 0; k < t->pieces; k++) {
      long long rows = t->piece_rows[k], first_row = t->piece_row[k] + TP_RANK * rows;
      lx_init_normal_at(&kernel_ctx, w, (size_t)(rows * t->row_elements), t->init_std, seed, (uint64_t)t->stream,
                        (uint64_t)(first_row * t->row_elements));
      w += rows * t->row_elements;
    }
  } else {
    for (long long row = 0; row < t->elements / t->row_elements; row++)
      lx_init_normal_at(&kernel_ctx, w + row * t->row_elements, (size_t)t->row_elements, t->init_std, seed,
                        (uint64_t)t->stream, (uint64_t)(row * t->whole_row + TP_RANK * t->row_elements));
  }
}

static void clear_optimizer_state(void) {
  memset(ADAM_M, 0, (size_t)OPTIMIZER_ELEMENTS * sizeof(real));
  memset(ADAM_V, 0, (size_t)OPTIMIZER_ELEMENTS * sizeof(real));
}

static void initialize_parameters(uint64_t seed) {
  for (int i = 0; i < ALL_PARAM_TENSORS; i++) {
    const lx_param_tensor *t = &param_tensors[i];
    if (t->init_std > 0) initialize_normal(t, seed);
    else lx_init_constant(&kernel_ctx, PARAMS + t->element, (size_t)t->elements, (real)t->init_value);
  }
  clear_optimizer_state();
}

/* ZeRO-1: the part of each bucket this replica updates (all of it without
 * ZeRO). After the reduce-scatter its summed gradients sit at the bucket's
 * start (MPI's in-place convention), its optimizer state at shard_first. */
typedef struct {
  long long own_first, own_elements; /* in the params region */
  long long grad_first, state_first; /* where element own_first's gradient and moments are */
} lx_share;

static lx_share share_of(const lx_param_bucket *b) {
  long long chunk = b->elements / ZERO_SHARDS, own = b->first + (ZERO_SHARDS > 1 ? replica * chunk : 0);
  return (lx_share){own, chunk, b->first, b->shard_first};
}

/* The bucket holding params element e (every tensor lies in one). */
static const lx_param_bucket *bucket_of(long long e) {
  for (int b = 0; b < PARAM_BUCKETS; b++)
    if (e >= param_buckets[b].first && e < param_buckets[b].first + param_buckets[b].elements) return &param_buckets[b];
  lx_die("params element %lld is in no bucket", e);
}

/* Tensor t's elements [*lo, *hi) within this replica's share of its bucket;
 * returns their gradient's index in GRADS (and *state, their moments'). */
static long long owned_part(const lx_param_tensor *t, long long *lo, long long *hi, long long *state) {
  lx_share s = share_of(bucket_of(t->element));
  *lo = t->element > s.own_first ? t->element : s.own_first;
  long long end = t->element + t->elements, own_end = s.own_first + s.own_elements;
  *hi = end < own_end ? end : own_end;
  if (*hi < *lo) *hi = *lo;
  *state = s.state_first + (*lo - s.own_first);
  return s.grad_first + (*lo - s.own_first);
}

/* 2BW: the live weights become the previous version, the one the next step
 * computes with. At the start (W(-1) = W(0)) the first two steps take their
 * gradients at the initial weights. */
static void keep_previous_weights(void) {
  if (STEPS_OVERLAP) memcpy(PREVIOUS_WEIGHTS, PARAMS, (size_t)PARAM_ELEMENTS * sizeof(real));
}

static void load_checkpoint(const char *path) {
  read_checkpoint(path, (float *)PARAMS);
  clear_optimizer_state();
}

/* Replicas hold equal weights: the first one writes them. */
static void saved_part(const lx_param_tensor *t, long long *lo, long long *hi) {
  (void)t;
  if (replica > 0) *hi = *lo;
}

static void export_weights(const char *llmc, const char *hf) {
  float *weights = (float *)PARAMS;
#if FINETUNE /* a copy of the base with the adapters merged in: the frozen weights stay as they are */
  weights = (float *)LX_MALLOC(sizeof(float) * (size_t)ALL_PARAM_ELEMENTS);
  memcpy(weights, PARAMS, sizeof(float) * (size_t)ALL_PARAM_ELEMENTS);
  merge_adapters(weights);
#endif
  if (llmc) write_checkpoint(llmc, weights);
  if (hf) write_hf_checkpoint(hf, weights);
  if (weights != (float *)PARAMS) free(weights);
}

/* The arena holds the whole state, in place: the weights (the tied copy
 * too) and this replica's share of the AdamW moments. */
static void state_arrays(float *arrays[4], int saving) {
  (void)saving;
  if (!CHECKPOINT_FP32)
    lx_die("--save and --resume: the double build (the gradient check) has no training state");
  arrays[0] = (float *)PARAMS, arrays[1] = (float *)ADAM_M, arrays[2] = (float *)ADAM_V;
  arrays[3] = STEPS_OVERLAP ? (float *)PREVIOUS_WEIGHTS : NULL;
}

static long long moments_of(const lx_param_tensor *t, long long *lo, long long *hi) {
  long long state = 0;
  owned_part(t, lo, hi, &state);
  return state;
}

static void state_restored(void) {}

/* The tensors only: the gaps between them hold the arena's poison (NaN). */
static int weights_finite(void) {
  for (int i = 0; i < ALL_PARAM_TENSORS; i++)
    for (long long e = 0; e < param_tensors[i].elements; e++)
      if (!isfinite(PARAMS[param_tensors[i].element + e])) return 0;
  return 1;
}

/* ---- one optimizer step ----------------------------------------------------------- */

/* The table and its copy are buckets of their own, sharded alike: under
 * ZeRO-1 the replica's share of both is summed, where the reduce-scatter put it. */
static void sum_tied_gradients(void) {
  if (tied_comm == MPI_COMM_NULL) return;
  for (int i = 0; i < PARAM_TENSORS; i++)
    if (param_tensors[i].tied) {
      lx_share s = share_of(bucket_of(param_tensors[i].element));
      lx_allreduce_sum(GRADS + s.grad_first, ZERO_SHARDS > 1 ? s.own_elements : param_tensors[i].elements, tied_comm);
    }
}

/* Sequence parallelism: a row-wise op's parameter gradient is a sum over the
 * tensor-parallel ranks' rows (of this replica's share, under ZeRO-1). */
static void sum_sequence_parallel_gradients(void) {
  for (int i = 0; i < PARAM_TENSORS; i++)
    if (param_tensors[i].split == 3) {
      long long lo, hi, state;
      long long grad = owned_part(&param_tensors[i], &lo, &hi, &state);
      lx_allreduce_sum(GRADS + grad, hi - lo, groups.tp);
    }
}

/* The global gradient norm, summed tensor by tensor in the model's order
 * (init streams name tensors in that order), so that it is the same number
 * whatever the pipeline depth: the parts of a tensor are its tensor-parallel
 * shards and ZeRO-1 shares, in rank order. Each element counts once: the tied
 * copy, a replicated tensor's copies on other tp ranks and (without ZeRO)
 * the other replicas' equal gradients do not. */
static double global_grad_norm(void) {
  double local[PARAM_TENSORS][2];
  int n = 0;
  for (int i = 0; i < PARAM_TENSORS; i++) {
    const lx_param_tensor *t = &param_tensors[i];
    if ((t->tied && !t->writes_file) || (replicated(t) && TP_RANK > 0) || (ZERO_SHARDS == 1 && replica > 0))
      continue;
    long long lo, hi, state;
    long long grad = owned_part(t, &lo, &hi, &state);
    local[n][0] = (double)t->stream;
    local[n][1] = lx_grad_norm_squared(&kernel_ctx, GRADS + grad, (size_t)(hi - lo));
    n++;
  }
  enum { RANKS = STAGES * TENSOR_PARALLEL * DATA_PARALLEL };
  int counts[RANKS], displs[RANKS], total = 0;
  int mine = 2 * n;
  LX_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD));
  for (int r = 0; r < RANKS; r++) displs[r] = total, total += counts[r];
  double *all = (double *)LX_MALLOC(sizeof(double) * (size_t)(total + 2));
  LX_MPI_CHECK(MPI_Allgatherv(local, mine, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD));
  double sum = 0;
  for (int pass = 0; pass < total / 2; pass++) { /* the smallest stream not yet added, each time */
    int best = -1;
    for (int k = 0; k < total / 2; k++)
      if (all[2 * k] >= 0 && (best < 0 || all[2 * k] < all[2 * best])) best = k;
    sum += all[2 * best + 1];
    all[2 * best] = -1;
  }
  free(all);
  return sqrt(sum);
}

/* AdamW on this replica's share of every tensor, with the run's settings
 * (weight decay only on the tensors that decay: lx_param_tensor); under
 * ZeRO-1 the replicas then hand each other their updated shares. */
static void optimizer_step(const lx_train_settings *train, int step, double lr, double *grad_norm) {
  keep_previous_weights(); /* 2BW: W(t+1) = W(t) - update(gradient at W(t-1)) */
  sum_tied_gradients();
  sum_sequence_parallel_gradients();
  *grad_norm = global_grad_norm();
  if (train->grad_clip > 0) {
    double factor = lx_grad_clip_factor(*grad_norm, train->grad_clip);
    if (factor < 1) lx_scale(&kernel_ctx, GRADS, (size_t)PARAM_ELEMENTS, factor);
  }
  for (int i = 0; i < PARAM_TENSORS; i++) {
    const lx_param_tensor *t = &param_tensors[i];
    lx_adamw_hparams hp = {train->beta1, train->beta2, train->eps, t->decay ? train->weight_decay : 0};
    long long lo, hi, state;
    long long grad = owned_part(t, &lo, &hi, &state);
    lx_adamw_update(&kernel_ctx, PARAMS + lo, GRADS + grad, ADAM_M + state, ADAM_V + state, (size_t)(hi - lo), lr,
                    hp, step);
  }
  for (int b = 0; ZERO_SHARDS > 1 && b < PARAM_BUCKETS; b++)
    lx_allgather_chunks(PARAMS + param_buckets[b].first, param_buckets[b].elements / ZERO_SHARDS, groups.dp);
}

/* ZeRO-1 leaves each replica the sums of its shares only: the whole summed
 * gradient, for the gradient check. */
static void gather_reduced_gradients(void) {
  for (int b = 0; ZERO_SHARDS > 1 && b < PARAM_BUCKETS; b++) {
    lx_share s = share_of(&param_buckets[b]);
    memmove(GRADS + s.own_first, GRADS + s.grad_first, (size_t)s.own_elements * sizeof(real));
    lx_allgather_chunks(GRADS + param_buckets[b].first, s.own_elements, groups.dp);
  }
}

/* The mean loss of the step's micro-batches over the replicas, known on the
 * last stage, for all. */
static double step_loss(void) {
  double loss = STAGE == STAGES - 1 ? loss_sum / MICRO_BATCHES : 0;
  loss = lx_allreduce_sum_double(loss, groups.dp) / DATA_PARALLEL;
  lx_watchdog_waiting("the step's loss from the last stage, stage %d", STAGES - 1);
  LX_MPI_CHECK(MPI_Bcast(&loss, 1, MPI_DOUBLE, STAGES - 1, groups.pp));
  lx_watchdog_done_waiting();
  return loss;
}

static double train_step(const lx_train_settings *train, int step, double lr, double *grad_norm, int continues) {
  memset(GRADS, 0, (size_t)PARAM_ELEMENTS * sizeof(real));
  loss_sum = 0;
  run_schedule(step, continues);
  double loss = step_loss();
  optimizer_step(train, step, lr, grad_norm);
  return loss;
}

static double validation_loss(lx_loader *val, int batches, int step) {
  lx_loader *train = loader;
  loader = val;
  lx_loader_reset(val);
  double sum = 0;
  for (int b = 0; b < batches; b++) {
    loss_sum = 0;
    run_forward(step);
    sum += step_loss();
    lx_watchdog_progress(); /* a validation of many batches may outlast --watchdog */
  }
  loader = train;
  return sum / batches;
}

/* ---- gradient check: central differences of the step's loss ---------------------- */

static double forward_loss(void) {
  lx_loader_reset(loader);
  loss_sum = 0;
  run_forward(1);
  return step_loss();
}

static void nudge(real *p, real value) {
  if (p) *p = value;
}

/* The last stage's copy of the tied embedding table. */
static real *tied_copy(void) {
  for (int j = 0; j < PARAM_TENSORS; j++)
    if (param_tensors[j].tied && !param_tensors[j].writes_file) return PARAMS + param_tensors[j].element;
  lx_die("stage %d has no copy of the tied embedding", STAGE);
}

/* Every rank takes part in every forward. The owner of a tensor (a stage's
 * tp rank of the first replica) perturbs it, and so does every other copy of
 * it: the other replicas' copies, a replicated tensor's copies on the other
 * tp ranks, and the last stage's tied copy of the embedding table. */
static int gradient_check(int samples) {
  lx_loader_reset(loader);
  memset(GRADS, 0, (size_t)PARAM_ELEMENTS * sizeof(real));
  loss_sum = 0;
  run_schedule(1, 0);
  sum_tied_gradients();
  sum_sequence_parallel_gradients();
  gather_reduced_gradients();
  /* central differences in double: truncation ~eps^2, rounding ~1e-16 * loss / eps */
  const double eps = 1e-5, tolerance = 1e-5, absolute = 1e-8;
  double worst = 0, worst_absolute = 0;
  int checked = 0, failed = 0;
  for (int owner_stage = 0; owner_stage < STAGES; owner_stage++)
    for (int owner_tp = 0; owner_tp < TENSOR_PARALLEL; owner_tp++) {
    int owner = owner_tp + TENSOR_PARALLEL * DATA_PARALLEL * owner_stage; /* its world rank */
    int is_owner = STAGE == owner_stage && TP_RANK == owner_tp && replica == 0;
    int tensors = PARAM_TENSORS;
    LX_MPI_CHECK(MPI_Bcast(&tensors, 1, MPI_INT, owner, MPI_COMM_WORLD));
    for (int i = 0; i < tensors; i++) {
      long long info[3] = {0, 0, 0}; /* elements, tied, replicated over tp */
      /* the last stage's tied copy is the embedding table: checked with it, by mirroring */
      if (is_owner && !(param_tensors[i].tied && !param_tensors[i].writes_file))
        info[0] = param_tensors[i].elements, info[1] = param_tensors[i].tied, info[2] = replicated(&param_tensors[i]);
      LX_MPI_CHECK(MPI_Bcast(info, 3, MPI_LONG_LONG, owner, MPI_COMM_WORLD));
      if (info[2] && owner_tp > 0) continue; /* checked on tp rank 0 */
      int holds = STAGE == owner_stage && (TP_RANK == owner_tp || info[2]);
      int holds_copy = info[1] && owner_stage == 0 && STAGES > 1 && STAGE == STAGES - 1 && TP_RANK == owner_tp;
      for (int k = 0; k < samples && k < info[0]; k++) {
        long long e = info[0] <= samples ? k : (k * 7919LL) % info[0];
        real *mine = holds ? PARAMS + param_tensors[i].element + e : NULL;
        real *copy = holds_copy ? tied_copy() + e : NULL;
        real mine_saved = mine ? *mine : 0, copy_saved = copy ? *copy : 0;
        nudge(mine, mine_saved + (real)eps), nudge(copy, copy_saved + (real)eps);
        double plus = forward_loss();
        nudge(mine, mine_saved - (real)eps), nudge(copy, copy_saved - (real)eps);
        double minus = forward_loss();
        nudge(mine, mine_saved), nudge(copy, copy_saved);
        if (is_owner) {
          double numeric = (plus - minus) / (2 * eps), analytic = GRADS[param_tensors[i].element + e];
          double difference = fabs(numeric - analytic), magnitude = fmax(fabs(numeric), fabs(analytic));
          double relative = difference / fmax(magnitude, 1e-30);
          if (magnitude >= 1e-6 && relative > worst) worst = relative; /* below, rounding dominates */
          if (difference > worst_absolute) worst_absolute = difference;
          if (relative > tolerance && difference > absolute) {
            failed++;
            printf("gradcheck: %s[%lld]: analytic %.10g numeric %.10g (relative error %.2e)\n", param_tensors[i].name,
                   e, analytic, numeric, relative);
          }
          checked++;
        }
      }
      lx_watchdog_progress(); /* a large model's check may outlast --watchdog; one tensor should not */
    }
  }
  double all_worst = worst, all_absolute = worst_absolute;
  int all_failed = failed;
  LX_MPI_CHECK(MPI_Allreduce(&worst, &all_worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  LX_MPI_CHECK(MPI_Allreduce(&worst_absolute, &all_absolute, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  LX_MPI_CHECK(MPI_Allreduce(&failed, &all_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  printf("gradcheck: stage %d tp rank %d replica %d checked %d elements; over all stages worst relative error %.3e (gradients >= 1e-6), "
         "worst absolute difference %.3e, %d failed (tolerance: relative %.0e or absolute %.0e)\n",
         STAGE, TP_RANK, replica, checked, all_worst, all_absolute, all_failed, tolerance, absolute);
  return all_failed == 0 ? 0 : 1;
}

/* ---- the plan's promise about memory ------------------------------------------------- */
#ifdef LX_CHECK_MEMORY

/* Each region must be written exactly up to the extent the plan gives it:
 * past it would overwrite a neighbour, short of it means the plan is wrong. */
static int check_memory_extents(void) {
  static const long long starts[] = {REGION_params, REGION_previous, REGION_master, REGION_grads, REGION_adam_m,
                                     REGION_adam_v, REGION_stash,    REGION_work,   REGION_boundary};
  static const long long planned[] = {EXTENT_params, EXTENT_previous, EXTENT_master, EXTENT_grads, EXTENT_adam_m,
                                      EXTENT_adam_v, EXTENT_stash,    EXTENT_work,   EXTENT_boundary};
  static const char *names[] = {"params", "previous", "master", "grads", "adam_m",
                                "adam_v", "stash",    "work",   "boundary"};
  enum { REGIONS = sizeof starts / sizeof *starts };
  int bad = 0;
  long long used_total = 0;
  for (int r = 0; r < REGIONS; r++) {
    long long end = r + 1 < REGIONS ? starts[r + 1] : ARENA_BYTES;
    long long last = -1;
    for (long long b = (end - starts[r]) * (long long)REAL_SCALE - 1; b >= 0; b--)
      if ((unsigned char)arena[starts[r] * REAL_SCALE + b] != LX_POISON_BYTE) {
        last = b;
        break;
      }
    long long measured = (last + 1 + (long long)REAL_SCALE - 1) / (long long)REAL_SCALE;
    used_total += measured;
    if (measured != planned[r]) {
      printf("memory: stage %d region %s: written up to %lld bytes, planned %lld\n", STAGE, names[r], measured,
             planned[r]);
      bad = 1;
    }
  }
  printf("memory: stage %d arena %lld bytes planned, %lld used by its regions, extents %s\n", STAGE,
         (long long)ARENA_BYTES, used_total, bad ? "DIFFER from the plan" : "as planned");
  return bad;
}

/* Fine-tuning: the frozen weights as the run started, to compare with at its end. */
static real *frozen_at_start;

static void keep_frozen_weights(void) {
  size_t n = (size_t)(ALL_PARAM_ELEMENTS - PARAM_ELEMENTS);
  frozen_at_start = (real *)LX_MALLOC(sizeof(real) * (n ? n : 1));
  memcpy(frozen_at_start, PARAMS + PARAM_ELEMENTS, sizeof(real) * n);
}

/* Every byte of the frozen weights (the gaps between them too) as it was. */
static int check_frozen_weights(void) {
  size_t n = (size_t)(ALL_PARAM_ELEMENTS - PARAM_ELEMENTS);
  int same = !memcmp(frozen_at_start, PARAMS + PARAM_ELEMENTS, sizeof(real) * n);
  if (FINETUNE)
    printf("frozen: stage %d, %zu elements %s\n", STAGE, n, same ? "bitwise unchanged" : "CHANGED during the run");
  free(frozen_at_start);
  return !same;
}
#endif

/* ---- main ------------------------------------------------------------------------- */

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--preflight")) /* run.sh, before it starts the job; both arenas */
    return preflight(LX_PROGRAM_CPU, argc - 1, argv + 1, (long long)((ARENA_BYTES + HOST_ARENA_BYTES) * REAL_SCALE),
                     "host");
  lx_start_catching_stop_signals(); /* before MPI_Init: a stop asked while the job starts is kept */
  int rank;
  lx_mpi_start(&argc, &argv, STAGES * TENSOR_PARALLEL * DATA_PARALLEL, &rank);
  kernel_ctx.threads = omp_get_max_threads();
  lx_run_options o = model_run_options(LX_PROGRAM_CPU, argc, argv); /* starts the watchdog */
  groups = lx_groups_start(rank, TENSOR_PARALLEL, DATA_PARALLEL, STAGE);
  replica = groups.dp_rank;
  int color = STAGE == 0 || STAGE == STAGES - 1 ? 0 : MPI_UNDEFINED;
  if (STAGES > 1) LX_MPI_CHECK(MPI_Comm_split(groups.pp, color, STAGE, &tied_comm));
  if (tied_comm != MPI_COMM_NULL) LX_MPI_CHECK(MPI_Comm_set_name(tied_comm, "tied-embedding (first and last stage)"));
  allocate_arena();
  seed = o.train.seed;
  if (!o.init_checkpoint || FINETUNE) initialize_parameters(o.train.seed); /* fine-tuning: the adapters */
  if (o.init_checkpoint) load_checkpoint(o.init_checkpoint);
  keep_previous_weights(); /* a resumed run reads both versions */
#ifdef LX_CHECK_MEMORY
  keep_frozen_weights();
#endif
  loader = open_training_data(&o);
  lx_loader *val = open_validation_data(&o, 0);
  if (o.gradcheck) {
    int status = gradient_check(o.gradcheck_samples);
    lx_mpi_finish();
    return status;
  }
  int status = train(&o, loader, val);
#ifdef LX_CHECK_MEMORY
  status |= check_memory_extents() | check_frozen_weights();
#endif
  lx_loader_close(loader);
  lx_loader_close(val);
  lx_mpi_finish();
  return status;
}

#endif
