/* lx_options.h — the command line of an emitted training program, CPU or
 * CUDA: one parser, the flags of both targets, each program accepting those
 * that apply to it (--gradcheck on the CPU; --cuda-graph and --profile with
 * CUDA).
 *
 * The emitted main() fills an lx_run_options with the defaults of its model
 * file (lx_run_options_default() gives the generic ones to start from), then
 * lets the command line override them:
 *
 *   lx_run_options o = lx_run_options_default(LX_PROGRAM_CPU);
 *   o.train.steps = 200; o.train_data = "data/train_*.bin";    // from the model file
 *   lx_parse_run_options(argc, argv, &o);                // after MPI_Init
 *
 * Every rank parses the same arguments and reaches the same verdict; only
 * rank 0 prints it. --help prints every option with its current default and
 * exits 0; a bad flag or value (out of the model language's range, which
 * lx_run_option_table repeats) exits 2. Valid C11 and C++17. */
#ifndef LX_OPTIONS_H
#define LX_OPTIONS_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_mpi_errors.h"

#include "lx_lr_schedule.h"
#include "lx_real_text.h"

#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The program that parses: the flags it accepts and --help shows. */
typedef enum { LX_PROGRAM_CPU, LX_PROGRAM_CUDA } lx_program;

/* The settings that decide the losses of a run: a training-state checkpoint
 * records them (lx_state.h) and --resume refuses to continue under others.
 * Fixed-width fields: the checkpoint holds this struct as it is. */
typedef struct {
  int32_t steps;       /* optimizer steps: the schedule's length; 0: validate only */
  int32_t warmup;      /* steps of linear warm-up */
  int32_t lr_schedule; /* LX_SCHED_* */
  int32_t unused;
  uint64_t seed;       /* initialisation and dropout */
  double lr, min_lr;   /* the schedule's peak and final learning rate */
  double beta1, beta2, eps, weight_decay; /* AdamW */
  double grad_clip;    /* bound of the global gradient norm; 0: no clipping */
} lx_train_settings;

typedef struct {
  lx_program program;          /* whose flags apply */
  lx_train_settings train;     /* the one copy of the run's hyperparameters */
  const char *train_data;      /* glob of token shards */
  const char *val_data;        /* glob of token shards; NULL: no validation */
  const char *init_checkpoint; /* llm.c or Hugging Face weights; NULL: random initialisation */
  const char *save_checkpoint; /* the training state (lx_state.h); NULL: save nothing */
  const char *resume_checkpoint; /* continue the run that saved this state; NULL: start */
  int auto_resume;               /* resume from save_checkpoint where it exists (a requeued job) */
  const char *export_checkpoint; /* llm.c GPT-2 weights after the last step; NULL: none */
  const char *export_hf;         /* a Hugging Face checkpoint directory, likewise */
  int checkpoint_every;          /* save the state every this many steps too; 0: only at the end */
  const char *metrics_path;    /* JSON lines, one per step */
  int val_interval;            /* validate every this many steps; 0: only never */
  int val_batches;             /* batches per validation */
  int print_every;             /* a progress line every this many steps */
  int gradcheck;               /* CPU: check gradients by finite differences, then exit */
  int gradcheck_samples;       /* CPU: elements checked per parameter tensor */
  int cuda_graph;              /* CUDA: issue each step as one CUDA graph */
  const char *profile_path;    /* CUDA: time every op and write this profile; NULL: no */
  const char *comm;            /* CUDA: the communication backend, nccl (the default) or host */
  double watchdog_s;           /* a rank without progress this long ends the job; 0: never */
} lx_run_options;

/* The model language's defaults (analyze.c), for a caller without a model file. */
static inline lx_run_options lx_run_options_default(lx_program program) {
  lx_run_options o;
  memset(&o, 0, sizeof o); /* NULL paths, switches off */
  o.program = program;
  o.train.steps = 100;
  o.train.lr_schedule = LX_SCHED_COSINE;
  o.train.seed = 1337;
  o.train.lr = 3e-4, o.train.min_lr = 3e-5;
  o.train.beta1 = 0.9, o.train.beta2 = 0.95, o.train.eps = 1e-8, o.train.weight_decay = 0.1;
  o.train.grad_clip = 1.0;
  o.train_data = "data/train_*.bin";
  o.metrics_path = "metrics.jsonl";
  o.val_batches = 8;
  o.print_every = 1;
  o.gradcheck_samples = 8;
  return o;
}

/* ---- the table of flags: it drives parsing, validation, --help and --resume's check ---- */

typedef enum { LX_OPT_INT, LX_OPT_U64, LX_OPT_REAL, LX_OPT_TEXT, LX_OPT_SCHEDULE, LX_OPT_SWITCH } lx_option_kind;
typedef enum { LX_FOR_BOTH, LX_FOR_CPU, LX_FOR_CUDA } lx_option_programs;

typedef struct {
  const char *flag, *arg; /* "--steps", "N"; arg NULL: a switch */
  lx_option_kind kind;
  size_t offset;          /* of the field in lx_run_options */
  double min, max;        /* a number's range; the model language's where it has one */
  int open_min, open_max; /* the bound itself is out */
  lx_option_programs programs;
  const char *help;       /* one line of --help */
} lx_option;

#define LX_OPT_AT(field) offsetof(lx_run_options, field)
#define LX_OPT_STEPS (1 << 30) /* the model language's bound: int step counters cannot overflow */

static inline const lx_option *lx_run_option_table(int *n) {
  static const lx_option table[] = {
      {"--steps", "N", LX_OPT_INT, LX_OPT_AT(train.steps), 0, INT_MAX, 0, 0, LX_FOR_BOTH,
       "optimizer steps; 0: validate (and export) only"},
      {"--data", "GLOB", LX_OPT_TEXT, LX_OPT_AT(train_data), 0, 0, 0, 0, LX_FOR_BOTH,
       "training token shards (`lynxgen tokenize`)"},
      {"--val-data", "GLOB", LX_OPT_TEXT, LX_OPT_AT(val_data), 0, 0, 0, 0, LX_FOR_BOTH,
       "validation token shards"},
      {"--eval-interval", "N", LX_OPT_INT, LX_OPT_AT(val_interval), 0, INT_MAX, 0, 0, LX_FOR_BOTH,
       "validate every N steps, 0 = never"},
      {"--val-batches", "N", LX_OPT_INT, LX_OPT_AT(val_batches), 1, INT_MAX, 0, 0, LX_FOR_BOTH,
       "batches per validation"},
      {"--init", "CKPT", LX_OPT_TEXT, LX_OPT_AT(init_checkpoint), 0, 0, 0, 0, LX_FOR_BOTH,
       "start from these weights: llm.c or safetensors (fine-tuning: the frozen base)"},
      {"--save", "CKPT", LX_OPT_TEXT, LX_OPT_AT(save_checkpoint), 0, 0, 0, 0, LX_FOR_BOTH,
       "the training state, at the end and on SIGTERM (fine-tuning: adapters)"},
      {"--checkpoint-every", "N", LX_OPT_INT, LX_OPT_AT(checkpoint_every), 0, INT_MAX, 0, 0, LX_FOR_BOTH,
       "--save every N steps too, 0 = only at the end"},
      {"--resume", "CKPT", LX_OPT_TEXT, LX_OPT_AT(resume_checkpoint), 0, 0, 0, 0, LX_FOR_BOTH,
       "continue the run that saved CKPT exactly"},
      {"--auto-resume", NULL, LX_OPT_SWITCH, LX_OPT_AT(auto_resume), 0, 0, 0, 0, LX_FOR_BOTH,
       "--resume --save's CKPT where it exists, else start"},
      {"--export-llmc", "CKPT", LX_OPT_TEXT, LX_OPT_AT(export_checkpoint), 0, 0, 0, 0, LX_FOR_BOTH,
       "write llm.c GPT-2 weights at the end (adapters merged)"},
      {"--export-hf", "DIR", LX_OPT_TEXT, LX_OPT_AT(export_hf), 0, 0, 0, 0, LX_FOR_BOTH,
       "write DIR/model.safetensors + config.json at the end"},
      {"--seed", "N", LX_OPT_U64, LX_OPT_AT(train.seed), 0, 0, 0, 0, LX_FOR_BOTH,
       "seed of the initialisation and dropout"},
      {"--lr", "X", LX_OPT_REAL, LX_OPT_AT(train.lr), 0, INFINITY, 1, 1, LX_FOR_BOTH,
       "peak learning rate of the schedule"},
      {"--min-lr", "X", LX_OPT_REAL, LX_OPT_AT(train.min_lr), 0, INFINITY, 0, 1, LX_FOR_BOTH,
       "learning rate at the last step, <= --lr"},
      {"--warmup", "N", LX_OPT_INT, LX_OPT_AT(train.warmup), 0, LX_OPT_STEPS, 0, 0, LX_FOR_BOTH,
       "steps of linear warm-up to --lr"},
      {"--lr-schedule", "NAME", LX_OPT_SCHEDULE, LX_OPT_AT(train.lr_schedule), 0, 0, 0, 0, LX_FOR_BOTH,
       "decay after warm-up: constant, cosine, linear"},
      {"--beta1", "X", LX_OPT_REAL, LX_OPT_AT(train.beta1), 0, 1, 0, 1, LX_FOR_BOTH,
       "AdamW's first-moment decay"},
      {"--beta2", "X", LX_OPT_REAL, LX_OPT_AT(train.beta2), 0, 1, 0, 1, LX_FOR_BOTH,
       "AdamW's second-moment decay"},
      /* a normal float in fp32 and bf16, or AdamW could divide 0 by 0 */
      {"--eps", "X", LX_OPT_REAL, LX_OPT_AT(train.eps), 0x1p-126, 1, 0, 0, LX_FOR_BOTH, "AdamW's epsilon"},
      {"--weight-decay", "X", LX_OPT_REAL, LX_OPT_AT(train.weight_decay), 0, 1, 0, 0, LX_FOR_BOTH,
       "AdamW decay of weights and embeddings"},
      {"--grad-clip", "X", LX_OPT_REAL, LX_OPT_AT(train.grad_clip), 0, 1e6, 0, 0, LX_FOR_BOTH,
       "bound of the global gradient norm, 0 = off"},
      {"--metrics", "FILE", LX_OPT_TEXT, LX_OPT_AT(metrics_path), 0, 0, 0, 0, LX_FOR_BOTH,
       "one JSON line per step"},
      {"--print-every", "N", LX_OPT_INT, LX_OPT_AT(print_every), 1, INT_MAX, 0, 0, LX_FOR_BOTH,
       "a progress line every N steps"},
      {"--watchdog", "SECONDS", LX_OPT_REAL, LX_OPT_AT(watchdog_s), 0, 1e9, 0, 0, LX_FOR_BOTH,
       "end the job when a rank is stuck, 0 = off"},
      {"--gradcheck", NULL, LX_OPT_SWITCH, LX_OPT_AT(gradcheck), 0, 0, 0, 0, LX_FOR_CPU,
       "check gradients by finite differences, exit"},
      {"--gradcheck-samples", "N", LX_OPT_INT, LX_OPT_AT(gradcheck_samples), 1, INT_MAX, 0, 0, LX_FOR_CPU,
       "elements checked per parameter tensor"},
      {"--cuda-graph", NULL, LX_OPT_SWITCH, LX_OPT_AT(cuda_graph), 0, 0, 0, 0, LX_FOR_CUDA,
       "issue each step as one CUDA graph, replayed"},
      {"--profile", "FILE", LX_OPT_TEXT, LX_OPT_AT(profile_path), 0, 0, 0, 0, LX_FOR_CUDA,
       "time every op, write a `lynxgen --profile`"},
      {"--comm", "NAME", LX_OPT_TEXT, LX_OPT_AT(comm), 0, 0, 0, 0, LX_FOR_CUDA,
       "nccl, or host: via host memory (ranks share a GPU)"},
  };
  *n = (int)(sizeof table / sizeof table[0]);
  return table;
}

/* The flag of the program that parses; NULL: it has no such flag. */
static inline const lx_option *lx_find_option(lx_program program, const char *flag) {
  int n = 0;
  const lx_option *table = lx_run_option_table(&n);
  for (int i = 0; i < n; i++) {
    int applies = table[i].programs == LX_FOR_BOTH ||
                  table[i].programs == (program == LX_PROGRAM_CPU ? LX_FOR_CPU : LX_FOR_CUDA);
    if (applies && !strcmp(table[i].flag, flag)) return &table[i];
  }
  return NULL;
}

/* Whether opt is one of the settings that decide the losses (in lx_train_settings). */
static inline int lx_option_decides_losses(const lx_option *opt) {
  return opt->offset >= LX_OPT_AT(train) && opt->offset < LX_OPT_AT(train) + sizeof(lx_train_settings);
}

/* The bytes of a setting's field (a number: int, uint64_t or double). */
static inline size_t lx_setting_size(const lx_option *opt) {
  return opt->kind == LX_OPT_U64 || opt->kind == LX_OPT_REAL ? 8 : sizeof(int);
}

/* Rank 0 of the job, or 0 outside MPI (a test that never called MPI_Init). */
static inline int lx_options_rank(void) {
  int initialized = 0, finalized = 0, rank = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

static inline LX_NORETURN LX_PRINTF(1, 2) void lx_usage_error(const char *fmt, ...) {
  if (lx_options_rank() == 0) {
    va_list args;
    va_start(args, fmt);
    fputs("lynx: ", stderr);
    vfprintf(stderr, fmt, args);
    fputs(" (see --help)\n", stderr);
    va_end(args);
  }
  lx_mpi_exit(LX_EXIT_USAGE);
}

static inline const char *lx_or_none(const char *s) { return s ? s : "none"; }

/* The value of opt in o as --help and error messages show it. */
static inline void lx_option_text(const lx_option *opt, const lx_run_options *o,
                                  char *out, // (cap)
                                  size_t cap) {
  const void *field = (const char *)o + opt->offset;
  switch (opt->kind) {
  case LX_OPT_INT: snprintf(out, cap, "%d", *(const int *)field); break;
  case LX_OPT_U64: snprintf(out, cap, "%" PRIu64, *(const uint64_t *)field); break;
  case LX_OPT_REAL: lx_format_real(out, cap, *(const double *)field); break;
  case LX_OPT_TEXT: snprintf(out, cap, "%s", lx_or_none(*(const char *const *)field)); break;
  case LX_OPT_SCHEDULE: snprintf(out, cap, "%s", lx_lr_schedule_label(*(const int *)field)); break;
  case LX_OPT_SWITCH: snprintf(out, cap, "%s", *(const int *)field ? "on" : "off"); break;
  }
}

static inline void lx_print_run_options_help(const char *program, const lx_run_options *o) {
  printf("usage: %s [options]   (normally started by run.sh: tp x dp ranks per stage)\n"
         "\n"
         "Trains the model it was generated for. Options [with their defaults]:\n",
         program);
  int n = 0;
  const lx_option *table = lx_run_option_table(&n);
  for (int i = 0; i < n; i++) {
    if (lx_find_option(o->program, table[i].flag) != &table[i]) continue;
    char usage[40], value[4096 + 8];
    const char *arg = table[i].arg;
    snprintf(usage, sizeof usage, "%s%s%s", table[i].flag, arg ? " " : "", arg ? arg : "");
    lx_option_text(&table[i], o, value, sizeof value);
    printf("  %-22s%-46s [%s]\n", usage, table[i].help, value);
  }
  printf("  %-22s%s\n", "--help", "this text");
}

/* ">= 0", "> 0", "in [0, 1)": opt's range in its error message. */
static inline void lx_range_text(const lx_option *opt,
                                 char *out, // (cap)
                                 size_t cap) {
  char lo[32], hi[32];
  lx_format_real(lo, sizeof lo, opt->min);
  lx_format_real(hi, sizeof hi, opt->max);
  if (opt->max == INFINITY || opt->max == INT_MAX)
    snprintf(out, cap, "%s %s", opt->open_min ? ">" : ">=", lo);
  else
    snprintf(out, cap, "in %c%s, %s%c", opt->open_min ? '(' : '[', lo, hi, opt->open_max ? ')' : ']');
}

static inline int lx_in_range(const lx_option *opt, double v) {
  int above_min = opt->open_min ? v > opt->min : v >= opt->min;
  int below_max = opt->open_max ? v < opt->max : v <= opt->max;
  return above_min && below_max;
}

static inline LX_NORETURN void lx_bad_number(const lx_option *opt, const char *what, const char *value) {
  char range[80];
  lx_range_text(opt, range, sizeof range);
  lx_usage_error("%s wants %s %s, not '%s'", opt->flag, what, range, value);
}

static inline int lx_parse_int_option(const lx_option *opt, const char *value) {
  char *end = NULL;
  errno = 0;
  long v = strtol(value, &end, 10);
  if (!*value || *end || errno == ERANGE || v > INT_MAX || !lx_in_range(opt, (double)v))
    lx_bad_number(opt, "an integer", value);
  return (int)v;
}

static inline double lx_parse_real_option(const lx_option *opt, const char *value) {
  char *end = NULL;
  errno = 0;
  double v = strtod(value, &end);
  if (!*value || *end || errno == ERANGE || !isfinite(v) || !lx_in_range(opt, v))
    lx_bad_number(opt, "a number", value);
  return v;
}

static inline uint64_t lx_parse_u64_option(const char *flag, const char *value) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(value, &end, 10);
  if (!isdigit((unsigned char)*value) || *end || errno == ERANGE) /* strtoull takes " -1" as 2^64 - 1 */
    lx_usage_error("%s wants a non-negative integer, not '%s'", flag, value);
  return (uint64_t)v;
}

static inline int lx_parse_schedule_option(const char *flag, const char *value) {
  for (int kind = LX_SCHED_CONSTANT; kind <= LX_SCHED_LINEAR; kind++)
    if (!strcmp(value, lx_lr_schedule_label(kind))) return kind;
  lx_usage_error("%s wants constant, cosine or linear, not '%s'", flag, value);
}

/* What a text option names, for its error message: "path", "glob", "name". */
static inline const char *lx_text_kind(const lx_option *opt) {
  return !strcmp(opt->arg, "GLOB") ? "glob" : !strcmp(opt->arg, "NAME") ? "name" : "path";
}

/* Sets opt's field in o from its value on the command line (not a switch). */
static inline void lx_apply_run_option(const lx_option *opt, lx_run_options *o, const char *value) {
  void *field = (char *)o + opt->offset;
  switch (opt->kind) {
  case LX_OPT_INT: *(int *)field = lx_parse_int_option(opt, value); break;
  case LX_OPT_U64: *(uint64_t *)field = lx_parse_u64_option(opt->flag, value); break;
  case LX_OPT_REAL: *(double *)field = lx_parse_real_option(opt, value); break;
  case LX_OPT_TEXT:
    if (!*value) lx_usage_error("%s wants a %s, not an empty one", opt->flag, lx_text_kind(opt));
    *(const char **)field = value;
    break;
  case LX_OPT_SCHEDULE: *(int *)field = lx_parse_schedule_option(opt->flag, value); break;
  case LX_OPT_SWITCH: *(int *)field = 1; break;
  }
}

/* The settings checked together, once every flag is in. */
static inline void lx_check_run_options(const lx_run_options *o) {
  if (o->train.min_lr > o->train.lr)
    lx_usage_error("--min-lr %g is above --lr %g: the schedule decays from --lr down to --min-lr",
                   o->train.min_lr, o->train.lr);
}

/* Accepts "--flag value" and "--flag=value". */
static inline void lx_parse_run_options(int argc,
                                        char **argv, // (argc)
                                        lx_run_options *o) {
  const char *program = argc > 0 && argv[0] ? argv[0] : "train";
  for (int i = 1; i < argc; i++) {
    char *arg = argv[i];
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      if (lx_options_rank() == 0) lx_print_run_options_help(program, o);
      lx_mpi_exit(0);
    }
    if (strncmp(arg, "--", 2) != 0) lx_usage_error("unexpected argument '%s'", arg);
    char flag[64];
    const char *value = NULL, *equals = strchr(arg, '=');
    size_t flag_len = equals ? (size_t)(equals - arg) : strlen(arg);
    if (flag_len >= sizeof flag) lx_usage_error("unknown option '%s'", arg);
    memcpy(flag, arg, flag_len);
    flag[flag_len] = '\0';
    const lx_option *opt = lx_find_option(o->program, flag);
    if (!opt) lx_usage_error("unknown option '%s'", flag);
    if (opt->kind == LX_OPT_SWITCH && equals) lx_usage_error("%s takes no value", flag);
    if (opt->kind == LX_OPT_SWITCH || equals)
      value = equals ? equals + 1 : NULL;
    else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
      value = argv[++i];
    else
      lx_usage_error("%s needs a value", flag);
    lx_apply_run_option(opt, o, value);
  }
  lx_check_run_options(o);
}

#endif
