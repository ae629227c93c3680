/* lx_command_line.h — the run's options, as a stage program takes them: the
 * model file's training settings under the command line's flags, checked
 * against each other and against the checkpoints they name, the paths the
 * run will write tried before step 1, the data opened, and --preflight, which
 * the launch scripts run before the job. Valid C11 and C++17.
 *
 * A part of lx_loop.h, after the stage file's definitions (lx_stage.h). */
#ifndef LX_COMMAND_LINE_H
#define LX_COMMAND_LINE_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_checkpoint.h"
#include "lx_data.h"
#include "lx_metrics.h"
#include "lx_options.h"
#include "lx_safetensors.h"
#include "lx_stage.h"
#include "lx_state.h"
#include "lx_stop.h"
#include "lx_watchdog.h"

/* Checked before the first step rather than at the first save. */
static void require_llmc_checkpoints(const char *path) {
  if (!GPT2_CHECKPOINT || !CHECKPOINT_FP32)
    lx_die("%s: this model is not llm.c's GPT-2 (or this is a double build); checkpoints are llm.c's format",
           path);
}

static void require_hf_checkpoints(const char *path) {
  if (!HF_CHECKPOINT || !CHECKPOINT_FP32)
    lx_die("%s: this model is neither transformers' GPT-2 nor its Llama (or this is a double build): it has "
           "no Hugging Face checkpoint",
           path);
}

/* --init reads either format: the file says which. */
static void require_init_checkpoint(const char *path) {
  if (lx_hf_is_checkpoint(path))
    require_hf_checkpoints(path);
  else
    require_llmc_checkpoints(path);
}

/* The model file's training settings (its TRAINING_* macros): the defaults
 * the command line overrides and --help shows. Only the result is read
 * afterwards, so a flag changes everything the setting decides. */
static lx_run_options model_defaults(lx_program program) {
  lx_run_options o = lx_run_options_default(program);
  lx_train_settings *t = &o.train;
  t->steps = TRAINING_STEPS, t->warmup = TRAINING_WARMUP, t->lr_schedule = TRAINING_LR_SCHEDULE;
  t->seed = TRAINING_SEED;
  t->lr = TRAINING_LR, t->min_lr = TRAINING_MIN_LR;
  t->beta1 = TRAINING_BETA1, t->beta2 = TRAINING_BETA2, t->eps = TRAINING_EPS;
  t->weight_decay = TRAINING_WEIGHT_DECAY, t->grad_clip = TRAINING_GRAD_CLIP;
  o.train_data = TRAINING_TRAIN_DATA;
  o.val_data = TRAINING_VAL_DATA;
  o.val_interval = TRAINING_VAL_INTERVAL;
  o.checkpoint_every = TRAINING_CHECKPOINT_INTERVAL;
  o.watchdog_s = lx_watchdog_default_s(PREDICTED_STEP_SECONDS, program == LX_PROGRAM_CPU);
  if (program == LX_PROGRAM_CUDA) o.comm = "nccl";
  return o;
}

/* --steps 0 evaluates the weights it starts from: it needs data to evaluate
 * them on (or an export to do instead), and saves no training state, which
 * would only copy the one it started from. */
static void check_validation_only(const lx_run_options *o) {
  if (o->train.steps > 0) return;
  if (!o->val_data && !o->export_checkpoint && !o->export_hf)
    lx_usage_error(
        "--steps 0 only validates: give --val-data GLOB (the model file names no validation data)");
  if (o->save_checkpoint) lx_usage_error("--steps 0 trains nothing: --save would have no new state to write");
}

/* Two of the files the run writes, or one it writes and one it reads, that
 * are one file would destroy one of them (--export-llmc over --save's state
 * at the end; --metrics, written in place, into a checkpoint). Two
 * exceptions: --save at --resume's file continues that run, and an export
 * over --init's weights replaces them with the trained ones, as asked. */
static void check_distinct_files(const lx_run_options *o) {
  char *hf_weights = o->export_hf ? lx_hf_join(o->export_hf, "model.safetensors") : NULL,
       *hf_config = o->export_hf ? lx_hf_join(o->export_hf, "config.json") : NULL;
  const struct {
    const char *flag, *path;
    int written;
  } files[] = {{"--save", o->save_checkpoint, 1},
               {"--export-llmc", o->export_checkpoint, 1},
               {"--export-hf", hf_weights, 1},
               {"--export-hf", hf_config, 1},
               {"--metrics", o->train.steps > 0 ? o->metrics_path : NULL, 1},
               {"--profile", o->profile_path, 1},
               {"--resume", o->resume_checkpoint, 0},
               {"--init", o->init_checkpoint, 0}};
  int n = (int)(sizeof files / sizeof files[0]);
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      const char *a = files[i].flag, *b = files[j].flag;
      int continues = !strcmp(a, "--save") && !strcmp(b, "--resume");
      int replaces_init = !strncmp(a, "--export", 8) && !strcmp(b, "--init");
      if (!files[i].path || !files[j].path || !files[i].written || continues || replaces_init) continue;
      if (lx_same_file(files[i].path, files[j].path))
        lx_usage_error("%s %s and %s %s are one file: one would destroy the other; give each its own path", a,
                       files[i].path, b, files[j].path);
    }
  free(hf_weights), free(hf_config);
}

/* --auto-resume: the job's one command line both starts the run and, once
 * --save's checkpoint exists (a job requeued after preemption), continues
 * it; resuming, the state holds the weights that --init started from (but
 * for fine-tuning's frozen base). */
static void resolve_auto_resume(lx_run_options *o) {
  if (!o->auto_resume) return;
  if (!o->save_checkpoint)
    lx_usage_error("--auto-resume continues from --save's checkpoint: give --save CKPT");
  if (o->resume_checkpoint)
    lx_usage_error("--auto-resume resumes from --save's checkpoint where it exists: not with --resume");
  if (access(o->save_checkpoint, F_OK) != 0) return; /* the job's first run */
  o->resume_checkpoint = o->save_checkpoint;
  if (!FINETUNE) o->init_checkpoint = NULL;
}

/* The model file's training settings, overridden by the command line and
 * checked against each other (no MPI: --preflight runs without it). */
static lx_run_options parsed_run_options(lx_program program, int argc, char **argv) {
  lx_run_options o = model_defaults(program);
  lx_parse_run_options(argc, argv, &o);
  lx_metrics_set_print_every(o.print_every);
  resolve_auto_resume(&o);
  if (o.init_checkpoint && o.resume_checkpoint && !FINETUNE)
    lx_usage_error("--init starts a run from llm.c weights, --resume continues one: not both");
  check_validation_only(&o);
#ifndef LX_DOUBLE /* float's rounding swamps a central difference */
  if (o.gradcheck)
    lx_usage_error("--gradcheck needs the double-precision programs: make gradcheck (run.sh then runs them)");
#endif
  if (o.init_checkpoint && lx_state_is_checkpoint(o.init_checkpoint))
    lx_usage_error(
        "--init %s: it is a training state (written by --save), not weights: continue its run with "
        "--resume %s",
        o.init_checkpoint, o.init_checkpoint);
  if (o.init_checkpoint) require_init_checkpoint(o.init_checkpoint);
  if (o.export_checkpoint) require_llmc_checkpoints(o.export_checkpoint);
  if (o.export_hf) require_hf_checkpoints(o.export_hf);
  check_distinct_files(&o);
  return o;
}

/* Why this run may not save its training state at o->save_checkpoint (into
 * why; empty: it may): lx_probe_save_path's reasons, and a file there that
 * this run does not resume. Its first save would replace that file: a run
 * started without --resume by mistake would destroy the one it was meant to
 * continue. */
static void probe_state_save(const lx_run_options *o, char *why, size_t cap) {
  const char *path = o->save_checkpoint;
  lx_probe_save_path(path, why, cap);
  if (why[0] || access(path, F_OK) != 0) return;
  if (o->resume_checkpoint && lx_same_file(path, o->resume_checkpoint)) return;
  snprintf(why, cap,
           "%s exists and this run %s: its first save would replace it (continue the run that saved it with "
           "--resume %s, or save elsewhere)",
           path, o->resume_checkpoint ? "resumes another checkpoint" : "starts afresh", path);
}

/* The run's settings, with the paths it will save to tried by rank 0. The
 * watchdog starts once --watchdog is read, before the first collective
 * (the save paths' verdict): from there on a peer that never arrives, or a
 * stalled read while loading, ends the job instead of holding it. */
static lx_run_options model_run_options(lx_program program, int argc, char **argv) {
  lx_run_options o = parsed_run_options(program, argc, argv);
  lx_watchdog_start(o.watchdog_s, lx_world_rank(), STAGE);
  if (o.save_checkpoint) {
    char why[LX_WHY_BYTES] = "";
    if (lx_world_rank() == 0) probe_state_save(&o, why, sizeof why);
    lx_share_save_verdict("--save", o.save_checkpoint, why);
  }
  if (o.checkpoint_every > 0 && !o.save_checkpoint && o.train.steps > 0 && lx_world_rank() == 0)
    fprintf(stderr,
            "lynx: warning: checkpoints every %d steps go nowhere without --save CKPT: a crash loses "
            "the whole run\n",
            o.checkpoint_every);
  if (o.export_checkpoint) lx_check_save_path("--export-llmc", o.export_checkpoint, lx_probe_save_path);
  if (o.export_hf) lx_check_save_path("--export-hf", o.export_hf, lx_hf_probe_dir); /* makes the directory */
  lx_catch_stop_signals(); /* again: MPI_Init may have installed handlers of its own */
  return o;
}

/* ---- data -------------------------------------------------------------------------- */

/* Replica r reads windows r, r + DATA_PARALLEL, ... (lx_data.h): the same
 * tokens per micro-batch on either target, whatever the pipeline depth. */
static lx_loader *open_training_data(const lx_run_options *o) {
  return lx_loader_open(o->train_data, B, T, V, replica, DATA_PARALLEL, "training data");
}

/* Whether the run validates: --steps 0 does whatever the interval, a
 * training run where a step of it is a multiple of the interval. */
static int validates(const lx_run_options *o) {
  return o->train.steps == 0 || (o->val_interval > 0 && o->val_interval <= o->train.steps);
}

/* NULL: no validation. Each replica validates on --val-batches windows of
 * its own, all different, whose tokens are checked here: its own, or with
 * every_replica (the preflight) every replica's. */
static lx_loader *open_validation_data(const lx_run_options *o, int every_replica) {
  if (!o->val_data || !validates(o)) return NULL;
  lx_loader *val = lx_loader_open(o->val_data, B, T, V, replica, DATA_PARALLEL, "validation data");
  long long per_replica = (long long)(val->windows / DATA_PARALLEL);
  if (o->val_batches > per_replica) {
    char each[96] = "";
    if (DATA_PARALLEL > 1)
      snprintf(each, sizeof each, ", %lld for each of %d replicas", per_replica, DATA_PARALLEL);
    lx_die("validation data: '%s' holds %lld batch%s of B*T+1 = %lld tokens%s: --val-batches %d would count "
           "some twice (give --val-batches %lld or fewer, or more validation data)",
           o->val_data, (long long)val->windows, val->windows == 1 ? "" : "es", (long long)B * T + 1, each,
           o->val_batches, per_replica);
  }
  lx_loader_check_first(val, o->val_batches, every_replica);
  return val;
}

/* ---- preflight: what the launch scripts check before they start the job ------------- */

static void preflight_save_path(const char *flag, const char *path, lx_save_probe probe) {
  char why[LX_WHY_BYTES];
  probe(path, why, sizeof why);
  if (why[0]) lx_die("%s %s: cannot save there: %s", flag, path, why);
}

static void preflight_state_save(const lx_run_options *o) {
  char why[LX_WHY_BYTES];
  probe_state_save(o, why, sizeof why);
  if (why[0]) lx_die("--save %s: cannot save there: %s", o->save_checkpoint, why);
}

/* A report written in place (--metrics, --profile). */
static void preflight_writable(const char *flag, const char *path) {
  char why[LX_WHY_BYTES];
  lx_probe_writable(path, why, sizeof why);
  if (why[0]) lx_die("%s %s: cannot write it: %s", flag, path, why);
}

/* A file, or where directory_ok a directory (of safetensors: its reader checks them). */
static void preflight_readable(const char *flag, const char *path, int directory_ok) {
  struct stat st;
  if (directory_ok && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return;
  char why[128];
  int fd = lx_open_data_file(path, why, sizeof why);
  if (fd < 0) lx_die("%s %s: cannot read it: %s", flag, path, why);
  close(fd);
}

/* `stageN --preflight ARGS`, without MPI, as run.sh and run-slurm.sh call it
 * before they start the job: the options as the run would take them, the
 * data it would read, the checkpoints it would read and the paths it would
 * write; a failure is the run's own message and status. Prints what one rank
 * of this stage needs of `memory` (the launch script adds the stages' up). */
static int preflight(lx_program program, int argc, char **argv, long long rank_bytes, const char *memory) {
  lx_run_options o = parsed_run_options(program, argc, argv);
  lx_loader_close(open_training_data(&o));
  lx_loader *val = open_validation_data(&o, 1);
  if (val) lx_loader_close(val);
  if (o.init_checkpoint) preflight_readable("--init", o.init_checkpoint, 1);
  if (o.resume_checkpoint) preflight_readable("--resume", o.resume_checkpoint, 0);
  if (o.save_checkpoint) preflight_state_save(&o);
  if (o.export_checkpoint) preflight_save_path("--export-llmc", o.export_checkpoint, lx_probe_save_path);
  if (o.export_hf) preflight_save_path("--export-hf", o.export_hf, lx_hf_probe_dir);
  if (o.metrics_path && o.train.steps > 0) preflight_writable("--metrics", o.metrics_path);
  if (o.profile_path) preflight_writable("--profile", o.profile_path);
  printf("preflight: stage %d: options, data and checkpoint paths ok; a rank needs %lld bytes of %s memory\n",
         STAGE, rank_bytes, memory);
  return 0;
}

#endif
