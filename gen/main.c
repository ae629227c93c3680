/* main.c — the lynxgen command line: runs the passes in order and writes the
 * output directory atomically (a failed run leaves nothing behind). */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analyze.h"
#include "diag.h"
#include "frontend.h"
#include "ir.h"

enum { EXIT_USER_ERROR = 1, EXIT_USAGE = 2 };

#define OUTPUT_MARKER ".lynxgen"

static const char usage_text[] =
    "usage: lynxgen MODEL [options]\n"
    "\n"
    "Reads a model description (a C subset, see docs/model-language.md), checks it,\n"
    "and builds the IR that the scheduling and emission passes work on.\n"
    "\n"
    "Output:\n"
    "  -o, --output DIR       write the artifacts into DIR: ir.json (the IR, as\n"
    "                         --dump-ir prints it). DIR is written whole or not at\n"
    "                         all; an existing DIR is replaced only if lynxgen wrote it.\n"
    "      --dump-ir          print the IR as JSON on stdout (schema: docs/ir.md)\n"
    "\n"
    "Parallel plan (override the model file's struct lx_parallel):\n"
    "      --tp N             tensor-parallel degree (inside a node)\n"
    "      --pp N             pipeline stages\n"
    "      --dp N             data-parallel replicas\n"
    "      --micro-batch N    sequences per micro-batch\n"
    "      --global-batch N   sequences per optimizer step\n"
    "      --schedule S       gpipe | 1f1b | 2bw | interleaved\n"
    "      --sequence-parallel  Megatron sequence parallelism\n"
    "\n"
    "  -h, --help             this text\n"
    "      --version          the version\n"
    "\n"
    "Exit status: 0 success, 1 an error in the model file (reported as\n"
    "file:line:col: error: ...), 2 a usage error.\n"
    "\n"
    "Example:\n"
    "  lynxgen examples/gpt13b.model -o build/\n"
    "  lynxgen examples/gpt13b.model --tp 2 --dump-ir | python3 -m json.tool\n";

typedef struct {
  const char *model_path;
  const char *output_dir;
  bool dump_ir;
  struct {
    lx_field field;
    const char *text; /* "--tp 2", for diagnostics */
    int value;
  } overrides[8];
  int n_overrides;
  char override_text[8][64];
} options;

static _Noreturn void usage_error(const char *fmt, const char *arg) {
  fputs("lynxgen: ", stderr);
  fprintf(stderr, fmt, arg);
  fputs("\nTry 'lynxgen --help'.\n", stderr);
  exit(EXIT_USAGE);
}

static int parse_count(const char *option, const char *arg) {
  char *end;
  errno = 0;
  long v = strtol(arg, &end, 10);
  if (errno || *end || end == arg || v < 1 || v > INT_MAX) {
    char msg[128];
    snprintf(msg, sizeof msg, "%s needs a positive integer, got '%%s'", option);
    usage_error(msg, arg);
  }
  return (int)v;
}

static int parse_schedule(const char *arg) {
  for (int s = LX_SCHEDULE_GPIPE; s <= LX_SCHEDULE_INTERLEAVED; s++)
    if (!strcmp(arg, lx_schedule_name((lx_schedule)s))) return s;
  usage_error("unknown schedule '%s' (gpipe, 1f1b, 2bw or interleaved)", arg);
}

static void add_override(options *o, lx_field field, const char *option, int value) {
  int i = o->n_overrides++;
  snprintf(o->override_text[i], sizeof o->override_text[i], "command line %s", option);
  o->overrides[i].field = field;
  o->overrides[i].text = o->override_text[i];
  o->overrides[i].value = value;
}

static options parse_options(int argc, char **argv) {
  enum { OPT_DUMP_IR = 256, OPT_TP, OPT_PP, OPT_DP, OPT_MICRO, OPT_GLOBAL, OPT_SCHEDULE, OPT_SP, OPT_VERSION };
  static const struct option longopts[] = {
      {"output", required_argument, 0, 'o'},      {"dump-ir", no_argument, 0, OPT_DUMP_IR},
      {"tp", required_argument, 0, OPT_TP},       {"pp", required_argument, 0, OPT_PP},
      {"dp", required_argument, 0, OPT_DP},       {"micro-batch", required_argument, 0, OPT_MICRO},
      {"global-batch", required_argument, 0, OPT_GLOBAL},
      {"schedule", required_argument, 0, OPT_SCHEDULE},
      {"sequence-parallel", no_argument, 0, OPT_SP},
      {"help", no_argument, 0, 'h'},              {"version", no_argument, 0, OPT_VERSION},
      {0, 0, 0, 0}};
  options o = {0};
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'o': o.output_dir = optarg; break;
    case OPT_DUMP_IR: o.dump_ir = true; break;
    case OPT_TP: add_override(&o, LX_F_TP, "--tp", parse_count("--tp", optarg)); break;
    case OPT_PP: add_override(&o, LX_F_PP, "--pp", parse_count("--pp", optarg)); break;
    case OPT_DP: add_override(&o, LX_F_DP, "--dp", parse_count("--dp", optarg)); break;
    case OPT_MICRO: add_override(&o, LX_F_MICRO_BATCH, "--micro-batch", parse_count("--micro-batch", optarg)); break;
    case OPT_GLOBAL:
      add_override(&o, LX_F_GLOBAL_BATCH, "--global-batch", parse_count("--global-batch", optarg));
      break;
    case OPT_SCHEDULE: add_override(&o, LX_F_SCHEDULE, "--schedule", parse_schedule(optarg)); break;
    case OPT_SP: add_override(&o, LX_F_SEQ_PARALLEL, "--sequence-parallel", 1); break;
    case 'h': fputs(usage_text, stdout); exit(0);
    case OPT_VERSION: puts("lynxgen 0.1"); exit(0);
    case ':': usage_error("option '%s' needs a value", argv[optind - 1]);
    default: usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind == argc) usage_error("%s", "no model file given");
  if (optind + 1 < argc) usage_error("more than one model file given ('%s')", argv[optind + 1]);
  o.model_path = argv[optind];
  if (!o.dump_ir && !o.output_dir) usage_error("%s", "nothing to do: give -o DIR or --dump-ir");
  return o;
}

static void apply_overrides(const options *o, lx_ir *ir) {
  for (int i = 0; i < o->n_overrides; i++) {
    int v = o->overrides[i].value;
    switch (o->overrides[i].field) {
    case LX_F_TP: ir->plan.tp = v; break;
    case LX_F_PP: ir->plan.pp = v; break;
    case LX_F_DP: ir->plan.dp = v; break;
    case LX_F_MICRO_BATCH: ir->plan.micro_batch = v; break;
    case LX_F_GLOBAL_BATCH: ir->plan.global_batch = v; break;
    case LX_F_SCHEDULE: ir->plan.schedule = (lx_schedule)v; break;
    case LX_F_SEQ_PARALLEL: ir->plan.sequence_parallel = v; break;
    default: break;
    }
    ir->locs.field[o->overrides[i].field] = (lx_srcloc){o->overrides[i].text, 0, 0};
  }
}

/* ---- the output directory ------------------------------------------------ */

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st, (void)type, (void)ftw;
  return remove(path);
}

static bool remove_tree(const char *path) { return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0; }

static bool is_replaceable(const char *dir) {
  char marker[PATH_MAX];
  snprintf(marker, sizeof marker, "%s/" OUTPUT_MARKER, dir);
  return access(marker, F_OK) == 0 || rmdir(dir) == 0; /* ours, or empty */
}

static bool write_file(const char *dir, const char *name, void (*fill)(const lx_ir *, FILE *), const lx_ir *ir) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fill(ir, f);
  return fclose(f) == 0;
}

static void fill_marker(const lx_ir *ir, FILE *f) {
  (void)ir;
  fputs("This directory was written by lynxgen; lynxgen may replace it.\n", f);
}

/* Writes everything into DIR.tmp, then renames: readers never see a partial
 * directory, and a failure leaves the previous one untouched. */
static int write_output(const char *dir, const lx_ir *ir) {
  char target[PATH_MAX], tmp[PATH_MAX + 16];
  snprintf(target, sizeof target, "%s", dir);
  for (size_t n = strlen(target); n > 1 && target[n - 1] == '/'; n--) target[n - 1] = '\0';
  dir = target;
  snprintf(tmp, sizeof tmp, "%s.lynxgen-tmp", dir);
  remove_tree(tmp);
  if (mkdir(tmp, 0777) != 0) {
    fprintf(stderr, "lynxgen: cannot create %s: %s\n", tmp, strerror(errno));
    return EXIT_USER_ERROR;
  }
  bool ok = write_file(tmp, OUTPUT_MARKER, fill_marker, ir) && write_file(tmp, "ir.json", lx_ir_print_json, ir);
  if (ok && access(dir, F_OK) == 0) {
    if (!is_replaceable(dir)) {
      fprintf(stderr, "lynxgen: %s exists and was not written by lynxgen; not replacing it\n", dir);
      remove_tree(tmp);
      return EXIT_USAGE;
    }
    remove_tree(dir);
  }
  if (!ok || rename(tmp, dir) != 0) {
    fprintf(stderr, "lynxgen: cannot write %s: %s\n", dir, strerror(errno));
    remove_tree(tmp);
    return EXIT_USER_ERROR;
  }
  return 0;
}

static void print_summary(const lx_ir *ir, const char *dir) {
  const lx_model_config *m = &ir->model;
  printf("%s: %d layers, hidden %d, %d heads, seq %d, vocab %d\n", ir->model_path, m->layers, m->hidden, m->heads,
         m->seq_len, m->vocab);
  printf("  parameters        %.3f B (%.1f M per layer)\n", (double)ir->params_total / 1e9,
         (double)ir->block.params / 1e6);
  printf("  activations/layer %.1f MiB (micro-batch %d, tp %d, %s)\n", (double)ir->block.activation_bytes / 1048576.0,
         ir->plan.micro_batch ? ir->plan.micro_batch : 1, ir->plan.tp ? ir->plan.tp : 1,
         lx_dtype_name(ir->training.dtype));
  printf("  model FLOPs       %.3f TFLOP per sequence (forward + backward)\n", ir->model_flops_per_sequence / 1e12);
  printf("wrote %s/ir.json\n", dir);
}

int main(int argc, char **argv) {
  options opts = parse_options(argc, argv);
  lx_ir ir;
  lx_ir_init(&ir);
  int status = 0;
  if (lx_parse_model(opts.model_path, NULL, 0, &ir) == 0) {
    apply_overrides(&opts, &ir);
    lx_analyze(&ir);
  }
  if (lx_error_count() > 0) {
    fprintf(stderr, "lynxgen: %d error%s\n", lx_error_count(), lx_error_count() == 1 ? "" : "s");
    status = EXIT_USER_ERROR;
  } else if (lx_ir_validate(&ir) != 0) {
    status = 3; /* a generator bug, already printed */
  } else {
    if (opts.dump_ir) lx_ir_print_json(&ir, stdout);
    if (opts.output_dir) {
      status = write_output(opts.output_dir, &ir);
      if (status == 0) print_summary(&ir, opts.output_dir);
    }
  }
  lx_ir_free(&ir);
  return status;
}
