/* lx_options.h — the command line of an emitted training program.
 *
 * The emitted main() fills an lx_run_options with the defaults of its model
 * file (lx_run_options_default() gives the generic ones to start from), then
 * lets the command line override them:
 *
 *   lx_run_options o = lx_run_options_default();
 *   o.steps = 200; o.train_data = "data/train_*.bin";    // from the model file
 *   lx_parse_run_options(argc, argv, &o);                // after lx_mpi_start
 *
 * Every rank parses the same arguments and reaches the same verdict; only
 * rank 0 prints it. --help prints every option with its current default and
 * exits 0; a bad flag or value exits 2. */
#ifndef LX_OPTIONS_H
#define LX_OPTIONS_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_mpi.h"

#include <inttypes.h>
#include <limits.h>
#include <stdint.h>

typedef struct {
  int steps;                   /* optimizer steps */
  const char *train_data;      /* glob of token shards */
  const char *val_data;        /* glob of token shards; NULL: no validation */
  const char *init_checkpoint; /* NULL: random initialisation */
  const char *save_checkpoint; /* NULL: save nothing */
  const char *metrics_path;    /* JSON lines, one per step */
  int val_interval;            /* validate every this many steps; 0: only never */
  int val_batches;             /* batches per validation */
  uint64_t seed;               /* initialisation and dropout */
  int gradcheck;               /* check gradients by finite differences, then exit */
  int gradcheck_samples;       /* elements checked per parameter tensor */
  int print_every;             /* a progress line every this many steps */
} lx_run_options;

static inline lx_run_options lx_run_options_default(void) {
  return (lx_run_options){.steps = 100,
                          .train_data = "data/train_*.bin",
                          .val_data = NULL,
                          .init_checkpoint = NULL,
                          .save_checkpoint = NULL,
                          .metrics_path = "metrics.jsonl",
                          .val_interval = 0,
                          .val_batches = 8,
                          .seed = 1337,
                          .gradcheck = 0,
                          .gradcheck_samples = 8,
                          .print_every = 1};
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
         "  --save CKPT        write a checkpoint after the last step       [%s]\n"
         "  --seed N           seed of the initialisation and dropout       [%" PRIu64 "]\n"
         "  --metrics FILE     one JSON line per step                       [%s]\n"
         "  --print-every N    a progress line every N steps                [%d]\n"
         "  --gradcheck        check gradients by finite differences, exit  [%s]\n"
         "  --gradcheck-samples N  elements checked per parameter tensor    [%d]\n"
         "  --help             this text\n",
         program, o->steps, lx_or_none(o->train_data), lx_or_none(o->val_data), o->val_interval,
         o->val_batches, lx_or_none(o->init_checkpoint), lx_or_none(o->save_checkpoint), o->seed,
         lx_or_none(o->metrics_path), o->print_every, o->gradcheck ? "on" : "off", o->gradcheck_samples);
}

static inline int lx_parse_int_option(const char *flag, const char *value, int min) {
  char *end = NULL;
  errno = 0;
  long v = strtol(value, &end, 10);
  if (!*value || *end || errno == ERANGE || v < min || v > INT_MAX)
    lx_usage_error("%s wants an integer >= %d, not '%s'", flag, min, value);
  return (int)v;
}

static inline uint64_t lx_parse_u64_option(const char *flag, const char *value) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(value, &end, 10);
  if (!*value || *value == '-' || *value == '+' || *end || errno == ERANGE)
    lx_usage_error("%s wants a non-negative integer, not '%s'", flag, value);
  return (uint64_t)v;
}

/* Applies one flag with its value (NULL for --gradcheck); returns 0 for an
 * unknown flag. */
static inline int lx_apply_run_option(lx_run_options *o, const char *flag, const char *value) {
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
  else if (!strcmp(flag, "--eval-interval"))
    o->val_interval = lx_parse_int_option(flag, value, 0);
  else if (!strcmp(flag, "--val-batches"))
    o->val_batches = lx_parse_int_option(flag, value, 1);
  else if (!strcmp(flag, "--seed"))
    o->seed = lx_parse_u64_option(flag, value);
  else if (!strcmp(flag, "--metrics"))
    o->metrics_path = value;
  else if (!strcmp(flag, "--print-every"))
    o->print_every = lx_parse_int_option(flag, value, 1);
  else if (!strcmp(flag, "--gradcheck-samples"))
    o->gradcheck_samples = lx_parse_int_option(flag, value, 1);
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
    if (!strcmp(arg, "--gradcheck")) {
      o->gradcheck = 1;
      continue;
    }
    if (!strncmp(arg, "--gradcheck=", 12)) lx_usage_error("--gradcheck takes no value");
    if (strncmp(arg, "--", 2) != 0) lx_usage_error("unexpected argument '%s'", arg);
    char flag[64];
    const char *value = NULL, *equals = strchr(arg, '=');
    size_t flag_len = equals ? (size_t)(equals - arg) : strlen(arg);
    if (flag_len >= sizeof flag) lx_usage_error("unknown option '%s'", arg);
    memcpy(flag, arg, flag_len);
    flag[flag_len] = '\0';
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
