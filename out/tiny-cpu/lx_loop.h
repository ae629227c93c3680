/* lx_loop.h — the training loop of an emitted stage program, CPU or CUDA:
 * the command line with the model file's defaults, the data, the learning-
 * rate schedule, the per-step report, validation and checkpoints (those of
 * the training state in lx_resume.h). Valid C11 and C++17.
 *
 * Included by the target's main (lx_main.h, lx_cuda_main.h) once the stage
 * file has defined its sizes (STAGE, STAGES, MICRO_BATCHES, B, T, BT, V,
 * TENSOR_PARALLEL, DATA_PARALLEL), TRAINING_* settings, TP_RANK, replica,
 * param_tensors, GPT2_CHECKPOINT and gpt2_header, HF_CHECKPOINT and (when
 * 1) hf_tensors, hf_parts and HF_CONFIG, and LX_TARGET_NORM_EPS (its norms'
 * epsilon, which config.json states). The target then defines
 * the functions declared below, the only steps that differ. Every rank
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
#include "lx_safetensors.h"
#include "lx_state.h"
#include "lx_stop.h"
#include "lx_watchdog.h"

#include <math.h>

/* Fine-tuning's programs define them: the first PARAM_TENSORS of
 * param_tensors are trained, the rest frozen (elements PARAM_ELEMENTS to
 * ALL_PARAM_ELEMENTS of the params region), read from --init and never changed. */
#ifndef FINETUNE
#define FINETUNE 0
#define ALL_PARAM_TENSORS PARAM_TENSORS
#define ALL_PARAM_ELEMENTS PARAM_ELEMENTS
#endif

#if FINETUNE
/* The adapted weights W + scale B A into weights (fp32 at params-region
 * indices, every tensor of the stage): what --export-llmc and --export-hf
 * write, the base model with the adapters merged in. A rank merges its
 * shard: W's rows and columns are B's rows and A's columns on the rank. */
static void merge_adapters(float *weights) {
  for (int i = 0; i < LORA_ADAPTERS; i++) {
    const lx_lora_adapter *a = &lora_adapters[i];
    const lx_param_tensor *down_t = &param_tensors[a->lora_a], *up_t = &param_tensors[a->lora_b];
    const float *down = weights + down_t->element, *up = weights + up_t->element;
    long long rows = up_t->elements / a->rank, cols = down_t->elements / a->rank;
    float *w = weights + param_tensors[a->weight].element;
    for (long long o = 0; o < rows; o++)
      for (long long r = 0; r < a->rank; r++) {
        float s = (float)(a->scale * up[o * a->rank + r]);
        for (long long c = 0; c < cols; c++)
          w[o * cols + c] += s * down[r * cols + c];
      }
  }
}
#endif

/* PipeDream-2BW programs define it: consecutive steps overlap, the next
 * one's first forwards running in this one's drain, and the weights have a
 * second version (the one before the last update) that the steps use. */
#ifndef STEPS_OVERLAP
#define STEPS_OVERLAP 0
#endif

/* One optimizer step at learning rate lr under the run's AdamW and clip
 * settings: the mean loss of its micro-batches over the replicas, and the
 * global gradient norm, known on every rank. `continues`: the next step
 * follows on this one's pipeline (under 2BW it starts in this one's drain). */
static double train_step(const lx_train_settings *train, int step, double lr, double *grad_norm, int continues);
/* The mean loss of `batches` forward-only steps on val from its start. */
static double validation_loss(lx_loader *val, int batches, int step);
/* Collective: the weights as llm.c's GPT-2 checkpoint at llmc
 * (write_checkpoint) and as a Hugging Face checkpoint in directory hf
 * (write_hf_checkpoint); NULL: not that one. */
static void export_weights(const char *llmc, const char *hf);
/* The elements [*lo, *hi) of tensor t (params-region indices, within the
 * whole tensor it is called with) that this rank writes into a checkpoint;
 * together the ranks write each element once. */
static void saved_part(const lx_param_tensor *t, long long *lo, long long *hi);
/* This rank's training state in host memory, as fp32 (lx_state.h): its
 * weights at their params-region indices (arrays[0], PARAM_ELEMENTS; the
 * CUDA program's fp32 masters, of the shares it updates), the AdamW
 * moments it holds (arrays[1], arrays[2]: OPTIMIZER_ELEMENTS, at
 * moments_of's indices), and under 2BW the previous weights (arrays[3],
 * PARAM_ELEMENTS; else NULL). saving: fill them with the current values first. */
static void state_arrays(float *arrays[4], int saving);
/* The elements [*lo, *hi) of t whose moments this rank holds (its replica's
 * share under ZeRO-1); returns where the moments of *lo are. */
static long long moments_of(const lx_param_tensor *t, long long *lo, long long *hi);
/* After a resume filled the arrays: make them the state the steps use. */
static void state_restored(void);
/* After state_arrays(..., 1): is every weight this rank saves finite? */
static int weights_finite(void);

/* ---- the command line ---------------------------------------------------------------- */

/* A double build (the CPU's gradient check) defines it 0: llm.c's files hold fp32. */
#ifndef CHECKPOINT_FP32
#define CHECKPOINT_FP32 1
#endif

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
    lx_usage_error("--steps 0 only validates: give --val-data GLOB (the model file names no validation data)");
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

/* The run's settings, with the paths it will save to tried by rank 0. */
static lx_run_options model_run_options(lx_program program, int argc, char **argv) {
  lx_run_options o = parsed_run_options(program, argc, argv);
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
  lx_catch_stop_signals();
  return o;
}

/* ---- data -------------------------------------------------------------------------- */

/* Replica r reads windows r, r + DATA_PARALLEL, ... (lx_data.h): the same
 * tokens per micro-batch on either target, whatever the pipeline depth. */
static lx_loader *open_training_data(const lx_run_options *o) {
  return lx_loader_open(o->train_data, B, T, V, replica, DATA_PARALLEL, "training data");
}

/* NULL: no validation (--steps 0 validates whatever the interval). */
static lx_loader *open_validation_data(const lx_run_options *o) {
  if (!o->val_data || (o->val_interval <= 0 && o->train.steps > 0)) return NULL;
  return lx_loader_open(o->val_data, B, T, V, replica, DATA_PARALLEL, "validation data");
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

static void preflight_readable(const char *flag, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) lx_die("%s %s: cannot read it: %s", flag, path, strerror(errno));
  fclose(f);
}

/* `stageN --preflight ARGS`, without MPI, as run.sh and run-slurm.sh call it
 * before they start the job: the options as the run would take them, the
 * data it would read, the checkpoints it would read and the paths it would
 * write; a failure is the run's own message and status. Prints what one rank
 * of this stage needs of `memory` (the launch script adds the stages' up). */
static int preflight(lx_program program, int argc, char **argv, long long rank_bytes, const char *memory) {
  lx_run_options o = parsed_run_options(program, argc, argv);
  lx_loader_close(open_training_data(&o));
  lx_loader *val = open_validation_data(&o);
  if (val) lx_loader_close(val);
  if (o.init_checkpoint) preflight_readable("--init", o.init_checkpoint);
  if (o.resume_checkpoint) preflight_readable("--resume", o.resume_checkpoint);
  if (o.save_checkpoint) preflight_state_save(&o);
  if (o.export_checkpoint) preflight_save_path("--export-llmc", o.export_checkpoint, lx_probe_save_path);
  if (o.export_hf) preflight_save_path("--export-hf", o.export_hf, lx_hf_probe_dir);
  if (o.metrics_path && o.train.steps > 0) preflight_writable("--metrics", o.metrics_path);
  if (o.profile_path) preflight_writable("--profile", o.profile_path);
  printf("preflight: stage %d: options, data and checkpoint paths ok; a rank needs %lld bytes of %s memory\n",
         STAGE, rank_bytes, memory);
  return 0;
}

/* ---- checkpoints -------------------------------------------------------------------- */

/* Tensor parallelism: the run of this rank's elements of t that starts at
 * local element e (counted from t->element) and is contiguous in the whole
 * tensor too (row-major, as all ranks together hold it): to the end of a
 * row (split 2, columns) or of a run of rows (split 1); returns its end and
 * puts its place in the whole tensor into *whole. */
static long long shard_run(const lx_param_tensor *t, long long e, long long *whole) {
  if (t->split == 1) {
    long long first = 0;
    for (int k = 0; k < t->pieces; k++) {
      long long size = t->piece_rows[k] * t->row_elements;
      if (e < first + size) {
        *whole = (t->piece_row[k] + TP_RANK * t->piece_rows[k]) * t->row_elements + (e - first);
        return first + size;
      }
      first += size;
    }
    LX_FATAL("element past the pieces of a tensor-parallel tensor");
  }
  if (t->split == 2) {
    long long row = e / t->row_elements, column = e % t->row_elements;
    *whole = row * t->whole_row + TP_RANK * t->row_elements + column;
    return (row + 1) * t->row_elements;
  }
  *whole = e; /* replicated: the whole tensor */
  return t->elements;
}

/* The elements [*lo, *hi) of t (params-region indices) that this rank
 * moves: reading, all it holds; writing, its saved part, none of a tied
 * copy (the first stage writes the table) nor of a replicated tensor on tp
 * ranks but the first. Returns whether there are any. */
static int moved_part(const lx_param_tensor *t, int writing, long long *lo, long long *hi) {
  int replicated = t->split == 0 || t->split == 3;
  *lo = t->element, *hi = t->element + t->elements;
  if (writing && (!t->writes_file || (replicated && TP_RANK > 0))) return 0;
  if (writing) saved_part(t, lo, hi);
  return *hi > *lo;
}

/* This stage's slices of llm.c's file: per parameter tensor with a place in
 * it, the runs of the rank's elements [lo, hi) that are contiguous in both
 * (a tensor-parallel shard is rows of the file's, or a column block of each
 * row); reading, every tensor the file holds (the last stage's tied copy of
 * wte too); writing, only the parts this rank saves, a replicated tensor by
 * tp rank 0. Returns them, malloc'd, and their number in *n. */
static lx_ckpt_slice *checkpoint_slices(int writing, int *n) {
  int cap = ALL_PARAM_TENSORS;
  lx_ckpt_slice *out = (lx_ckpt_slice *)LX_MALLOC(sizeof(lx_ckpt_slice) * (size_t)cap);
  *n = 0;
  for (int i = 0; i < ALL_PARAM_TENSORS; i++) {
    const lx_param_tensor *t = &param_tensors[i];
    long long lo, hi;
    if (t->file_element < 0 || !moved_part(t, writing, &lo, &hi)) continue;
    for (long long e = lo - t->element; e < hi - t->element;) {
      long long whole = 0, end = shard_run(t, e, &whole);
      if (end > hi - t->element) end = hi - t->element;
      if (*n == cap) out = (lx_ckpt_slice *)realloc(out, sizeof(lx_ckpt_slice) * (size_t)(cap *= 2));
      if (!out) LX_FATAL("out of memory");
      lx_ckpt_slice *slice = &out[(*n)++];
      slice->name = t->name, slice->file_element = t->file_element + whole;
      slice->param_element = t->element + e, slice->elements = end - e;
      e = end;
    }
  }
  return out;
}

/* The stage's weights from the checkpoint at path (llm.c's or a Hugging
 * Face checkpoint), as fp32 at their params-region indices. */
static void read_hf_checkpoint(const char *path, float *weights);
static void read_checkpoint(const char *path, float *weights /* (ALL_PARAM_ELEMENTS) */) {
  if (lx_hf_is_checkpoint(path)) {
    read_hf_checkpoint(path, weights);
    return;
  }
  int n = 0;
  lx_ckpt_slice *slices = checkpoint_slices(0, &n);
  lx_checkpoint_load(path, &gpt2_header, slices, n, weights);
  free(slices);
}

/* Collective over every rank: each writes its saved parts of weights. */
static void write_checkpoint(const char *path, const float *weights /* (ALL_PARAM_ELEMENTS) */) {
  int n = 0;
  lx_ckpt_slice *slices = checkpoint_slices(1, &n);
  lx_checkpoint_save_all(path, &gpt2_header, slices, n, weights, MPI_COMM_WORLD);
  free(slices);
}

/* ---- Hugging Face checkpoints (lx_safetensors.h) --------------------------------------- */

/* This rank's elements [lo, hi) (params-region indices) of parameter t
 * that are rows [first_row, first_row + io->rows) of the whole tensor,
 * between data (element e of t, counted from t->element, at
 * data[e - first]) and the io's file, in blocks (lx_tensor_segment). */
static void move_rows(lx_tensor_io *io, const lx_param_tensor *t, long long first_row, float *data,
                      long long first, long long lo, long long hi) {
  lx_tensor_blocks blocks;
  memset(&blocks, 0, sizeof blocks);
  for (long long e = lo - t->element; e < hi - t->element;) {
    long long whole = 0, end = shard_run(t, e, &whole);
    if (end > hi - t->element) end = hi - t->element;
    for (long long w = whole; w < whole + (end - e);) {
      long long row = w / io->cols, column = w % io->cols;
      long long n = io->cols - column < whole + (end - e) - w ? io->cols - column : whole + (end - e) - w;
      if (row >= first_row && row < first_row + io->rows)
        lx_tensor_segment(io, &blocks, data + e + (w - whole) - first, row - first_row, column, n);
      w += n;
    }
    e = end;
  }
  lx_tensor_flush(io, &blocks);
}

#if HF_CHECKPOINT
/* Rank 0: dir/config.json, committed like a checkpoint; the norms' epsilon
 * is the kernels'. */
static void write_hf_config(const char *dir) {
  cJSON *config = cJSON_Parse(HF_CONFIG);
  if (!config) LX_FATAL("the generated config.json does not parse");
  cJSON_AddNumberToObject(config, HF_NORM_EPS_KEY, LX_TARGET_NORM_EPS);
  char *text = cJSON_Print(config), *path = lx_hf_join(dir, "config.json"), *tmp = NULL;
  cJSON_Delete(config);
  FILE *f = fdopen(lx_checkpoint_create_tmp(path, 0, &tmp), "w");
  if (!f) lx_die("cannot create %s: %s", tmp, strerror(errno));
  if (fprintf(f, "%s\n", text) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0)
    lx_die("cannot write %s: %s", tmp, strerror(errno));
  lx_checkpoint_commit(path);
  free(text), free(path), free(tmp);
}

/* What write_hf_checkpoint hands lx_checkpoint_collective. */
typedef struct {
  const lx_hf_file_plan *plan;
  float *weights; /* (ALL_PARAM_ELEMENTS) */
} hf_export;

static void create_hf_file(const char *path, void *ctx) {
  lx_hf_create(path, ((const hf_export *)ctx)->plan);
}

/* This rank's rows of every tensor of the stage, into the open PATH.tmp. */
static void write_hf_parts(int fd, const char *tmp, void *ctx) {
  const hf_export *e = (const hf_export *)ctx;
  for (int i = 0; i < HF_PARTS; i++) {
    const lx_hf_part *part = &hf_parts[i];
    const lx_param_tensor *t = &param_tensors[part->param];
    long long lo, hi;
    if (!moved_part(t, 1, &lo, &hi)) continue;
    int64_t at = 8 + e->plan->header_bytes +
                 e->plan->offsets[part->tensor * HF_LAYERS + (part->layer > 0 ? part->layer : 0)];
    lx_tensor_io io = lx_hf_io(fd, tmp, 1, at, LX_FILE_F32, &hf_tensors[part->tensor]);
    move_rows(&io, t, part->first_row, e->weights + t->element, 0, lo, hi);
    lx_tensor_io_close(&io);
  }
}

/* Collective: the weights as dir/model.safetensors (F32) and its config.json. */
static void write_hf_checkpoint(const char *dir, float *weights /* (ALL_PARAM_ELEMENTS) */) {
  char *path = lx_hf_join(dir, "model.safetensors");
  lx_hf_file_plan plan = lx_hf_plan(hf_tensors, HF_TENSORS, HF_LAYERS);
  hf_export export_ctx = {&plan, weights};
  lx_checkpoint_collective(path, MPI_COMM_WORLD, create_hf_file, write_hf_parts, &export_ctx);
  if (lx_world_rank() == 0) write_hf_config(dir);
  LX_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); /* nobody reads config.json before its rename */
  lx_hf_plan_free(&plan);
  free(path);
}

/* Every element of a parameter the file holds rows of starts at zero: rows
 * it does not hold (the vocabulary's padding) stay so, as in llm.c's files. */
static void read_hf_checkpoint(const char *path, float *weights /* (ALL_PARAM_ELEMENTS) */) {
  lx_hf_source src = lx_hf_source_open(path);
  for (int i = 0; i < HF_PARTS; i++) {
    const lx_param_tensor *t = &param_tensors[hf_parts[i].param];
    memset(weights + t->element, 0, sizeof(float) * (size_t)t->elements);
  }
  for (int i = 0; i < HF_PARTS; i++) {
    const lx_param_tensor *t = &param_tensors[hf_parts[i].param];
    lx_tensor_io io = lx_hf_find(&src, &hf_tensors[hf_parts[i].tensor], hf_parts[i].layer);
    move_rows(&io, t, hf_parts[i].first_row, weights + t->element, 0, t->element, t->element + t->elements);
    lx_tensor_io_close(&io);
  }
  lx_hf_source_close(&src);
}
#else
static void write_hf_checkpoint(const char *dir, float *weights) {
  (void)dir, (void)weights;
  LX_FATAL("no Hugging Face checkpoint for this model (require_hf_checkpoints)");
}
static void read_hf_checkpoint(const char *path, float *weights) {
  (void)path, (void)weights;
  LX_FATAL("no Hugging Face checkpoint for this model (require_init_checkpoint)");
}
#endif

#include "lx_resume.h" /* the training state: --save and --resume */

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
 * run before anything is saved. */
static void require_finite(const lx_run_options *o, int step, double loss, double grad_norm) {
  if (isfinite(loss) && isfinite(grad_norm)) return;
  lx_fail_all("the loss is %g and the gradient norm %g at step %d: stopping without saving%s%s", loss,
              grad_norm, step, o->save_checkpoint ? "; the last good checkpoint stays in " : "",
              o->save_checkpoint ? o->save_checkpoint : "");
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

/* --steps 0: the weights it starts from (initialised, --init or --resume)
 * evaluated on o->val_batches batches of the validation data, the loss
 * printed by the reporting rank; no optimizer step, no metrics line, no
 * training state saved; --export-llmc and --export-hf still write the weights. */
static void validate_only(const lx_run_options *o, lx_loader *data, lx_loader *val, int reports) {
  int done = o->resume_checkpoint ? resume_state(o, data) : 0;
  if (val) {
    double loss = validation_loss(val, o->val_batches, done);
    if (reports) printf("validation loss %.9g (%d batches, after step %d)\n", loss, o->val_batches, done);
  }
  if (o->export_checkpoint || o->export_hf) export_weights(o->export_checkpoint, o->export_hf);
}

/* Steps 1 (or the one after a resumed checkpoint) to o->train.steps, each reported
 * by one rank (the last stage's tp rank 0 of replica 0, which knows the
 * loss; a resumed run appends to the metrics file); validation every
 * o->val_interval steps when val is open; the state saved every
 * o->checkpoint_every steps, after the last and when a stop signal came,
 * so that a crash loses at most an interval. Returns the exit status: 1
 * when the run stopped because its metrics file could not be written. */
static int train(const lx_run_options *o, lx_loader *data, lx_loader *val) {
  int reports = STAGE == STAGES - 1 && TP_RANK == 0 && replica == 0;
  if (o->train.steps == 0) {
    validate_only(o, data, val, reports);
    return 0;
  }
  const lx_train_settings *t = &o->train;
  int done = o->resume_checkpoint ? resume_state(o, data) : 0, stop = 0;
  if (o->auto_resume && done > 0 && lx_world_rank() == 0)
    printf("lynx: --auto-resume: continuing %s after step %d\n", o->resume_checkpoint, done);
  if (done == t->steps && lx_world_rank() == 0)
    printf("lynx: %s is of a finished run (step %d of %d): nothing is left to train\n", o->resume_checkpoint,
           done, t->steps);
  if (reports) lx_metrics_open(o->metrics_path, done > 0);
  lx_watchdog_start(o->watchdog_s, lx_world_rank(), STAGE);
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
