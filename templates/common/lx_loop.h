/* lx_loop.h — the training loop of an emitted stage program, CPU or CUDA:
 * the learning-rate schedule, the per-step report, validation, checkpoints
 * every interval and a stop on a signal. Its parts: what it asks of the
 * stage file and the target (lx_stage.h), the command line
 * (lx_command_line.h), the weights in llm.c's and Hugging Face's formats
 * (lx_weights.h) and the training state (lx_resume.h). Valid C11 and C++17.
 *
 * Included by the target's main (lx_main.h, lx_cuda_main.h) once the stage
 * file has defined what lx_stage.h lists. */
#ifndef LX_LOOP_H
#define LX_LOOP_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_command_line.h"
#include "lx_data.h"
#include "lx_lr_schedule.h"
#include "lx_metrics.h"
#include "lx_real_text.h"
#include "lx_resume.h"
#include "lx_stage.h"
#include "lx_stop.h"
#include "lx_watchdog.h"
#include "lx_weights.h"

#include <math.h>

/* ---- the loop ----------------------------------------------------------------------- */

/* Is it time for something done every `interval` steps (0: never)? */
static int every(int step, int interval) { return interval > 0 && step % interval == 0; }

/* Whether the next step runs on this one's pipeline, so that under 2BW its
 * first forwards start in this one's drain: not after the last step, nor
 * where validation or a checkpoint comes between, nor once a stop signal
 * came (asked here, before the step: a step that started the next one
 * cannot be the last). Without 2BW every step drains. Collective. */
static int next_step_follows(const lx_run_options *o, int step, int validates, int *stop) {
  if (!STEPS_OVERLAP || step >= o->train.steps || validates) return 0;
  if (o->save_checkpoint && every(step, o->checkpoint_every)) return 0;
  *stop = lx_stop_requested();
  return !*stop;
}

/* A non-finite loss or gradient norm (known alike on every rank) ends the
 * run before anything is saved; the message names the checkpoint that
 * stays only where there is one. */
static void require_finite(const lx_run_options *o, int step, double loss, double grad_norm) {
  if (isfinite(loss) && isfinite(grad_norm)) return;
  char loss_text[32], norm_text[32], kept[LX_WHY_BYTES] = "";
  lx_format_real(loss_text, sizeof loss_text, loss);
  lx_format_real(norm_text, sizeof norm_text, grad_norm);
  lx_describe_kept_checkpoint(o->save_checkpoint, kept, sizeof kept);
  lx_fail_all("the loss is %s and the gradient norm %s at step %d: stopping without saving%s", loss_text,
              norm_text, step, kept);
}

static void announce_stop(const lx_run_options *o, int signal, int step) {
  if (lx_world_rank() != 0) return;
  printf("lynx: %s (%s): stopped after step %d of %d",
         signal == LX_STOP_UNRECORDED ? "cannot record the run" : "asked to stop", lx_signal_name(signal),
         step, o->train.steps);
  if (o->save_checkpoint) printf("; saved, continue with --resume %s", o->save_checkpoint);
  printf("\n");
  fflush(stdout);
}

/* A stop asked while the job started, before its first step: nothing was
 * trained, so nothing is saved, exported or recorded (a checkpoint holds a
 * step from 1 on; the metrics file stays as it was). The run continues
 * from where it was: the checkpoint it resumed, or the start. */
static int stop_before_training(const lx_run_options *o, int signal, int done) {
  if (lx_world_rank() != 0) return 0;
  printf("lynx: asked to stop (%s): stopped before step %d of %d, nothing trained", lx_signal_name(signal),
         done + 1, o->train.steps);
  if (o->resume_checkpoint) printf("; continue with --resume %s", o->resume_checkpoint);
  printf("\n");
  fflush(stdout);
  return 0;
}

/* --steps 0: the weights it starts from (initialised, --init or --resume)
 * evaluated on o->val_batches batches of the validation data, the loss
 * printed by the reporting rank, in the digits that read back as it (as the
 * metrics file has it); no optimizer step, no metrics line, no training
 * state saved; --export-llmc and --export-hf still write the weights. */
static void validate_only(const lx_run_options *o, lx_loader *data, lx_loader *val, int reports) {
  int done = o->resume_checkpoint ? resume_state(o, data) : 0;
  if (val) {
    char loss[32];
    lx_format_real(loss, sizeof loss, validation_loss(val, o->val_batches, done));
    if (reports) printf("validation loss %s (%d batches, after step %d)\n", loss, o->val_batches, done);
  }
  if (o->export_checkpoint || o->export_hf) export_weights(o->export_checkpoint, o->export_hf);
}

/* A warm-up that outlasts the run is allowed (a short test of a long run's
 * settings) but said: the learning rate never reaches --lr. */
static void warn_unfinished_warmup(const lx_train_settings *t) {
  if (t->warmup <= t->steps || lx_world_rank() != 0) return;
  double last = lx_learning_rate(t->steps, t->warmup, t->steps, t->lr, t->min_lr, t->lr_schedule);
  fprintf(
      stderr,
      "lynx: warning: --warmup %d is more than --steps %d: the learning rate never reaches --lr %g; it ends "
      "at %g\n",
      t->warmup, t->steps, t->lr, last);
}

/* Steps 1 (or the one after a resumed checkpoint) to o->train.steps, each reported
 * by one rank (the last stage's tp rank 0 of replica 0, which knows the
 * loss; a resumed run appends to the metrics file); validation every
 * o->val_interval steps when val is open; the state saved every
 * o->checkpoint_every steps, after the last and when a stop signal came
 * (one that came before the first step ends the run there, unsaved), so
 * that a crash loses at most an interval. Returns the exit status: 1
 * when the run stopped because its metrics file could not be written. */
static int train(const lx_run_options *o, lx_loader *data, lx_loader *val) {
  int reports = STAGE == STAGES - 1 && TP_RANK == 0 && replica == 0;
  if (o->train.steps == 0) {
    validate_only(o, data, val, reports);
    return 0;
  }
  const lx_train_settings *t = &o->train;
  warn_unfinished_warmup(t);
  int done = o->resume_checkpoint ? resume_state(o, data) : 0, stop = 0;
  if (o->auto_resume && done > 0 && lx_world_rank() == 0)
    printf("lynx: --auto-resume: continuing %s after step %d\n", o->resume_checkpoint, done);
  if (done == t->steps && lx_world_rank() == 0)
    printf("lynx: %s is of a finished run (step %d of %d): nothing is left to train\n", o->resume_checkpoint,
           done, t->steps);
  if (done < t->steps && (stop = lx_stop_requested()) != 0) return stop_before_training(o, stop, done);
  if (reports) lx_metrics_open(o->metrics_path, done > 0);
  for (int step = done + 1; step <= t->steps && !stop; step++) {
    double lr = lx_learning_rate(step, t->warmup, t->steps, t->lr, t->min_lr, t->lr_schedule);
    double start = lx_now_ms(), grad_norm = 0;
    int validates = val && every(step, o->val_interval);
    int continues = next_step_follows(o, step, validates, &stop);
    double loss = train_step(t, step, lr, &grad_norm, continues);
    double ms = lx_now_ms() - start;
    double val_loss = validates ? validation_loss(val, o->val_batches, step) : NAN;
    if (reports && lx_metrics_step(step, t->steps, loss, val_loss, lr, grad_norm, ms,
                                   (double)MICRO_BATCHES * BT * DATA_PARALLEL / (ms / 1e3)) != 0)
      lx_stop_unrecorded();
    require_finite(o, step, loss, grad_norm);
    lx_watchdog_progress();
    done = step;
    if (!continues) stop = lx_stop_requested();
    if (o->save_checkpoint && !stop && step < t->steps && every(step, o->checkpoint_every))
      save_state(o, data, step);
  }
  if (o->save_checkpoint) save_state(o, data, done);
  if (o->export_checkpoint || o->export_hf) export_weights(o->export_checkpoint, o->export_hf);
  if (stop) announce_stop(o, stop, done);
  if (reports) lx_metrics_close();
  return stop == LX_STOP_UNRECORDED ? LX_EXIT_ERROR : 0;
}

#endif
