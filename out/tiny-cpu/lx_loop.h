/* lx_loop.h — the training loop of an emitted stage program, CPU or CUDA:
 * the command line with the model file's defaults, the data, the learning-
 * rate schedule, the per-step report, validation and checkpoints. Valid C11
 * and C++17.
 *
 * Included by the target's main (lx_main.h, lx_cuda_main.h) once the stage
 * file has defined its sizes (STAGE, STAGES, MICRO_BATCHES, B, T, BT, V,
 * TENSOR_PARALLEL, DATA_PARALLEL), TRAINING_* settings, TP_RANK, replica,
 * param_tensors, GPT2_CHECKPOINT and gpt2_header. The target then defines
 * the four functions declared below, the only steps that differ. Every rank
 * runs the same loop, so each collective inside them is reached by all. */
#ifndef LX_LOOP_H
#define LX_LOOP_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_checkpoint.h"
#include "lx_data.h"
#include "lx_lr_schedule.h"
#include "lx_metrics.h"
#include "lx_options.h"
#include "lx_params.h"

#include <math.h>

/* One optimizer step at learning rate lr: the mean loss of its micro-batches
 * over the replicas, and the global gradient norm, known on every rank. */
static double train_step(int step, double lr, double *grad_norm);
/* The mean loss of `batches` forward-only steps on val from its start. */
static double validation_loss(lx_loader *val, int batches, int step);
/* Collective: the model as llm.c's GPT-2 checkpoint at path (write_checkpoint). */
static void save_checkpoint(const char *path);
/* The elements [*lo, *hi) of tensor t (params-region indices, within the
 * whole tensor it is called with) that this rank writes into a checkpoint;
 * together the ranks write each element once. */
static void saved_part(const lx_param_tensor *t, long long *lo, long long *hi);

/* ---- the command line ---------------------------------------------------------------- */

/* A double build (the CPU's gradient check) defines it 0: llm.c's files hold fp32. */
#ifndef CHECKPOINT_FP32
#define CHECKPOINT_FP32 1
#endif

/* Checked before the first step rather than at the first save. */
static void require_checkpoints(const char *path) {
  if (!GPT2_CHECKPOINT || !CHECKPOINT_FP32)
    lx_die("%s: this model is not llm.c's GPT-2 (or this is a double build); checkpoints are llm.c's format",
           path);
  if (TENSOR_PARALLEL > 1)
    lx_die("%s: checkpoints of tensor-parallel programs are not written or read yet", path);
}

/* The model file's training settings, overridden by the command line. */
static lx_run_options model_run_options(lx_program program, int argc, char **argv) {
  lx_run_options o = lx_run_options_default(program);
  o.steps = TRAINING_STEPS;
  o.train_data = TRAINING_TRAIN_DATA;
  o.val_data = TRAINING_VAL_DATA;
  o.val_interval = TRAINING_VAL_INTERVAL;
  o.seed = TRAINING_SEED;
  o.lr = TRAINING_LR;
  lx_parse_run_options(argc, argv, &o);
  lx_metrics_set_print_every(o.print_every);
  if (o.init_checkpoint) require_checkpoints(o.init_checkpoint);
  if (o.save_checkpoint) require_checkpoints(o.save_checkpoint);
  return o;
}

/* ---- data -------------------------------------------------------------------------- */

/* Replica r reads windows r, r + DATA_PARALLEL, ... (lx_data.h): the same
 * tokens per micro-batch on either target, whatever the pipeline depth. */
static lx_loader *open_training_data(const lx_run_options *o) {
  return lx_loader_open(o->train_data, B, T, V, replica, DATA_PARALLEL, "training data");
}

/* NULL: no validation. */
static lx_loader *open_validation_data(const lx_run_options *o) {
  if (!o->val_data || o->val_interval <= 0) return NULL;
  return lx_loader_open(o->val_data, B, T, V, replica, DATA_PARALLEL, "validation data");
}

/* ---- checkpoints -------------------------------------------------------------------- */

/* The stage's slices of the file: reading, every tensor the file holds (the
 * last stage's tied copy of wte too); writing, the parts this rank writes. */
static int checkpoint_slices(lx_ckpt_slice *out, // (PARAM_TENSORS)
                             int writing) {
  int n = 0;
  for (int i = 0; i < PARAM_TENSORS; i++) {
    const lx_param_tensor *t = &param_tensors[i];
    if (t->file_element < 0 || (writing && !t->writes_file)) continue;
    long long lo = t->element, hi = t->element + t->elements;
    if (writing) saved_part(t, &lo, &hi);
    if (hi <= lo) continue;
    lx_ckpt_slice *s = &out[n++];
    s->name = t->name;
    s->file_element = t->file_element + (lo - t->element);
    s->param_element = lo;
    s->elements = hi - lo;
  }
  return n;
}

/* The stage's weights from the checkpoint at path, as fp32 at their
 * params-region indices. */
static void read_checkpoint(const char *path, float *weights /* (PARAM_ELEMENTS) */) {
  lx_ckpt_slice slices[PARAM_TENSORS];
  int n = checkpoint_slices(slices, 0);
  lx_checkpoint_load(path, &gpt2_header, slices, n, weights);
}

/* Collective over every rank: each writes its saved parts of weights. */
static void write_checkpoint(const char *path, const float *weights /* (PARAM_ELEMENTS) */) {
  lx_ckpt_slice slices[PARAM_TENSORS];
  int n = checkpoint_slices(slices, 1);
  lx_checkpoint_save_all(path, &gpt2_header, slices, n, weights, MPI_COMM_WORLD);
}

/* ---- the loop ----------------------------------------------------------------------- */

/* Is it time for something done every `interval` steps (0: never)? */
static int every(int step, int interval) { return interval > 0 && step % interval == 0; }

/* Steps 1 to o->steps, each reported by one rank (the last stage's tp rank 0
 * of replica 0, which knows the loss); validation every o->val_interval
 * steps when val is open; a checkpoint every TRAINING_CHECKPOINT_INTERVAL
 * steps and after the last, so a crash loses at most an interval. */
static void train(const lx_run_options *o, lx_loader *val) {
  int reports = STAGE == STAGES - 1 && TP_RANK == 0 && replica == 0;
  if (reports) lx_metrics_open(o->metrics_path);
  for (int step = 1; step <= o->steps; step++) {
    double lr =
        lx_learning_rate(step, TRAINING_WARMUP, o->steps, o->lr, TRAINING_MIN_LR, TRAINING_LR_SCHEDULE);
    double start = lx_now_ms(), grad_norm = 0;
    double loss = train_step(step, lr, &grad_norm);
    double ms = lx_now_ms() - start;
    double val_loss = val && every(step, o->val_interval) ? validation_loss(val, o->val_batches, step) : NAN;
    if (reports)
      lx_metrics_step(step, o->steps, loss, val_loss, lr, grad_norm, ms,
                      (double)MICRO_BATCHES * BT * DATA_PARALLEL / (ms / 1e3));
    if (!isfinite(loss)) lx_die("stage %d: the loss is %g at step %d", STAGE, loss, step);
    if (o->save_checkpoint && step < o->steps && every(step, TRAINING_CHECKPOINT_INTERVAL))
      save_checkpoint(o->save_checkpoint);
  }
  if (o->save_checkpoint) save_checkpoint(o->save_checkpoint);
  if (reports) lx_metrics_close();
}

#endif
