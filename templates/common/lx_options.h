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
 *   o.steps = 200; o.train_data = "data/train_*.bin";    // from the model file
 *   lx_parse_run_options(argc, argv, &o);                // after MPI_Init
 *
 * Every rank parses the same arguments and reaches the same verdict; only
 * rank 0 prints it. --help prints every option with its current default and
 * exits 0; a bad flag or value exits 2. Valid C11 and C++17. */
#ifndef LX_OPTIONS_H
#define LX_OPTIONS_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_mpi_errors.h"

#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

/* The program that parses: the flags it accepts and --help shows. */
typedef enum { LX_PROGRAM_CPU, LX_PROGRAM_CUDA } lx_program;

typedef struct {
  lx_program program;          /* whose flags apply */
  int steps;                   /* optimizer steps */
  const char *train_data;      /* glob of token shards */
  const char *val_data;        /* glob of token shards; NULL: no validation */
  const char *init_checkpoint; /* llm.c GPT-2 weights; NULL: random initialisation */
  const char *save_checkpoint; /* the training state (lx_state.h); NULL: save nothing */
  const char *resume_checkpoint; /* continue the run that saved this state; NULL: start */
  const char *export_checkpoint; /* llm.c GPT-2 weights after the last step; NULL: none */
  int checkpoint_every;          /* save the state every this many steps too; 0: only at the end */
  const char *metrics_path;    /* JSON lines, one per step */
  int val_interval;            /* validate every this many steps; 0: only never */
  int val_batches;             /* batches per validation */
  uint64_t seed;               /* initialisation and dropout */
  double lr;                   /* peak learning rate of the schedule */
  int print_every;             /* a progress line every this many steps */
  int gradcheck;               /* CPU: check gradients by finite differences, then exit */
  int gradcheck_samples;       /* CPU: elements checked per parameter tensor */
  int cuda_graph;              /* CUDA: issue each step as one CUDA graph */
  const char *profile_path;    /* CUDA: time every op and write this profile; NULL: no */
} lx_run_options;

static inline lx_run_options lx_run_options_default(lx_program program) {
  lx_run_options o;
  memset(&o, 0, sizeof o); /* NULL paths, switches off */
  o.program = program;
  o.steps = 100;
  o.train_data = "data/train_*.bin";
  o.metrics_path = "metrics.jsonl";
  o.val_batches = 8;
  o.seed = 1337;
  o.lr = 3e-4;
  o.print_every = 1;
  o.gradcheck_samples = 8;
  return o;
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

static inline void lx_print_run_options_help(const char *program, const lx_run_options *o) {
  printf("usage: %s [options]   (normally started by run.sh: tp x dp ranks per stage)\n"
         "\n"
         "Trains the model it was generated for. Options [with their defaults]:\n"
         "  --steps N          optimizer steps (0: load, evaluate, save)    [%d]\n"
         "  --data GLOB        training token shards (`lynxgen tokenize`)   [%s]\n"
         "  --val-data GLOB    validation token shards                      [%s]\n"
         "  --eval-interval N  validate every N steps, 0 = never            [%d]\n"
         "  --val-batches N    batches per validation                       [%d]\n"
         "  --init CKPT        start from this llm.c GPT-2 checkpoint       [%s]\n"
         "  --save CKPT        save the training state (weights, AdamW\n"
         "                     moments, step, data position) at the end,\n"
         "                     every --checkpoint-every steps, on SIGTERM   [%s]\n"
         "  --checkpoint-every N  save every N steps, 0 = only at the end   [%d]\n"
         "  --resume CKPT      continue the run that saved CKPT exactly     [%s]\n"
         "  --export-llmc CKPT write llm.c GPT-2 weights at the end         [%s]\n"
         "  --seed N           seed of the initialisation and dropout       [%" PRIu64 "]\n"
         "  --lr X             peak learning rate of the schedule           [%g]\n"
         "  --metrics FILE     one JSON line per step                       [%s]\n"
         "  --print-every N    a progress line every N steps                [%d]\n",
         program, o->steps, lx_or_none(o->train_data), lx_or_none(o->val_data), o->val_interval,
         o->val_batches, lx_or_none(o->init_checkpoint), lx_or_none(o->save_checkpoint), o->checkpoint_every,
         lx_or_none(o->resume_checkpoint), lx_or_none(o->export_checkpoint), o->seed, o->lr,
         lx_or_none(o->metrics_path), o->print_every);
  if (o->program == LX_PROGRAM_CPU)
    printf("  --gradcheck        check gradients by finite differences, exit  [%s]\n"
           "  --gradcheck-samples N  elements checked per parameter tensor    [%d]\n",
           o->gradcheck ? "on" : "off", o->gradcheck_samples);
  else
    printf("  --cuda-graph       issue each step as one CUDA graph, replayed  [%s]\n"
           "  --profile FILE     time every op, write a `lynxgen --profile`   [%s]\n",
           o->cuda_graph ? "on" : "off", lx_or_none(o->profile_path));
  printf("  --help             this text\n");
}

static inline int lx_parse_int_option(const char *flag, const char *value, int min) {
  char *end = NULL;
  errno = 0;
  long v = strtol(value, &end, 10);
  if (!*value || *end || errno == ERANGE || v < min || v > INT_MAX)
    lx_usage_error("%s wants an integer >= %d, not '%s'", flag, min, value);
  return (int)v;
}

static inline double lx_parse_positive_option(const char *flag, const char *value) {
  char *end = NULL;
  errno = 0;
  double v = strtod(value, &end);
  if (!*value || *end || errno == ERANGE || !(v > 0))
    lx_usage_error("%s wants a number > 0, not '%s'", flag, value);
  return v;
}

static inline uint64_t lx_parse_u64_option(const char *flag, const char *value) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(value, &end, 10);
  if (!*value || *value == '-' || *value == '+' || *end || errno == ERANGE)
    lx_usage_error("%s wants a non-negative integer, not '%s'", flag, value);
  return (uint64_t)v;
}

/* The flags that take no value, of the program that parses; NULL: none. */
static inline int *lx_run_switch(lx_run_options *o, const char *flag) {
  if (o->program == LX_PROGRAM_CPU && !strcmp(flag, "--gradcheck")) return &o->gradcheck;
  if (o->program == LX_PROGRAM_CUDA && !strcmp(flag, "--cuda-graph")) return &o->cuda_graph;
  return NULL;
}

/* Applies one flag with its value; returns 0 for a flag the program does
 * not have. */
static inline int lx_apply_run_option(lx_run_options *o, const char *flag, const char *value) {
  int cpu = o->program == LX_PROGRAM_CPU;
  if (!strcmp(flag, "--steps"))
    o->steps = lx_parse_int_option(flag, value, 0);
  else if (!strcmp(flag, "--data"))
    o->train_data = value;
  else if (!strcmp(flag, "--val-data"))
    o->val_data = value;
  else if (!strcmp(flag, "--init"))
    o->init_checkpoint = value;
  else if (!strcmp(flag, "--save"))
    o->save_checkpoint = value;
  else if (!strcmp(flag, "--checkpoint-every"))
    o->checkpoint_every = lx_parse_int_option(flag, value, 0);
  else if (!strcmp(flag, "--resume"))
    o->resume_checkpoint = value;
  else if (!strcmp(flag, "--export-llmc"))
    o->export_checkpoint = value;
  else if (!strcmp(flag, "--eval-interval"))
    o->val_interval = lx_parse_int_option(flag, value, 0);
  else if (!strcmp(flag, "--val-batches"))
    o->val_batches = lx_parse_int_option(flag, value, 1);
  else if (!strcmp(flag, "--seed"))
    o->seed = lx_parse_u64_option(flag, value);
  else if (!strcmp(flag, "--lr"))
    o->lr = lx_parse_positive_option(flag, value);
  else if (!strcmp(flag, "--metrics"))
    o->metrics_path = value;
  else if (!strcmp(flag, "--print-every"))
    o->print_every = lx_parse_int_option(flag, value, 1);
  else if (cpu && !strcmp(flag, "--gradcheck-samples"))
    o->gradcheck_samples = lx_parse_int_option(flag, value, 1);
  else if (!cpu && !strcmp(flag, "--profile"))
    o->profile_path = value;
  else
    return 0;
  return 1;
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
    int *on = lx_run_switch(o, flag);
    if (on && equals) lx_usage_error("%s takes no value", flag);
    if (on) {
      *on = 1;
      continue;
    }
    if (equals)
      value = equals + 1;
    else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
      value = argv[++i];
    else {
      lx_run_options probe = *o; /* is it a known flag that lacks its value? */
      if (lx_apply_run_option(&probe, flag, "1")) lx_usage_error("%s needs a value", flag);
      lx_usage_error("unknown option '%s'", flag);
    }
    if (!lx_apply_run_option(o, flag, value)) lx_usage_error("unknown option '%s'", flag);
  }
}

#endif
