/* main.c — the lynxgen command line: runs the passes in order and writes the
 * output directory atomically (a failed run leaves nothing behind). */
#define _XOPEN_SOURCE 700
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "analysis/analyze.h"
#include "analysis/lint.h"
#include "diag.h"
#include "emit/emit.h"
#include "escape.h"
#include "frontend/frontend.h"
#include "ir.h"
#include "planning/layout.h"
#include "planning/memplan.h"
#include "planning/overlap.h"
#include "planning/passes.h"
#include "planning/plan.h"
#include "planning/search.h"
#include "planning/simulate.h"
#include "report/manifest.h"
#include "report/output_dir.h"
#include "report/report.h"
#include "report/trace.h"
#include "usage.h"
#include "verify/verify.h"

enum { EXIT_USER_ERROR = 1, EXIT_USAGE = 2 };

typedef struct {
  const char *model_path;
  const char *output_dir;
  bool dump_ir, plan, json, explain, cuda_graph, unfused, unrolled;
  bool allow_oom_plan; /* a plan that does not fit is written (what-if studies) */
  lx_target target;
  lx_recompute_policy policy;
  bool policy_given; /* --policy: else the plan search weighs the policies too */
  lx_partition_kind partition;
  bool no_offload; /* --no-offload */
  const char *profile;
  double gpu_memory_bytes; /* 0: the datasheet's */
  double max_memory_bytes; /* lynxgen's own address space (--max-memory) */
  double search_seconds;   /* the plan search's time budget (--search-time) */
  int trace_events;        /* trace.json's most instruction events (--trace-events; 0: all) */
  struct {
    lx_field field;
    int value;
  } overrides[LX_F_COUNT]; /* one per field: a repeated option replaces the earlier value */
  int n_overrides;
  char override_text[LX_F_COUNT][64]; /* "command line --tp", where overrides[i]'s errors point */
} options;

static _Noreturn void usage_error(const char *fmt, const char *arg) {
  fputs("lynxgen: ", stderr);
  fprintf(stderr, fmt, arg);
  fputs("\nTry 'lynxgen --help'.\n", stderr);
  exit(EXIT_USAGE);
}

/* An integer in [least, INT_MAX]: least is 1, or 0 where 0 means "no limit". */
static int parse_integer(const char *option, const char *arg, int least) {
  char *end;
  errno = 0;
  long v = strtol(arg, &end, 10);
  if (errno || *end || end == arg || v < least || v > INT_MAX) {
    char msg[128];
    snprintf(msg, sizeof msg, "%s needs a %s integer (at most %d), got '%%s'", option,
             least ? "positive" : "non-negative", INT_MAX);
    usage_error(msg, arg);
  }
  return (int)v;
}

static int parse_count(const char *option, const char *arg) { return parse_integer(option, arg, 1); }

/* "auto" leaves the schedule open, whatever the model file says: the plan search picks it. */
static int parse_schedule(const char *arg) {
  if (!strcmp(arg, "auto")) return LX_SCHEDULE_OPEN;
  for (int s = LX_SCHEDULE_GPIPE; s < LX_SCHEDULE_COUNT; s++)
    if (!strcmp(arg, lx_schedule_name((lx_schedule)s))) return s;
  usage_error("unknown schedule '%s' (auto, gpipe, 1f1b, zb-h1, 2bw or interleaved)", arg);
}

/* A number in (0, 10^6] of `unit`s. */
static double parse_amount(const char *option, const char *arg, const char *unit) {
  char *end;
  double v = strtod(arg, &end);
  if (*end || end == arg || !(v > 0) || v > 1e6) {
    char msg[128];
    snprintf(msg, sizeof msg, "%s needs a positive number of %s (at most 10^6), got '%%s'", option, unit);
    usage_error(msg, arg);
  }
  return v;
}

/* The option getopt_long just refused: a short one by its letter (inside a
 * cluster such as -vq, argv[optind - 1] is still the argument before), a
 * long one as written. */
static const char *offending_option(char **argv, int optind_now) {
  static char letter[3] = "-?";
  if (optopt > 0 && optopt < 0x7f && isprint(optopt)) {
    letter[1] = (char)optopt;
    return letter;
  }
  return argv[optind_now - 1];
}

static double parse_gib(const char *option, const char *arg) {
  return parse_amount(option, arg, "GiB") * 1024 * 1024 * 1024;
}

static lx_recompute_policy parse_policy(const char *arg) {
  for (int p = 0; p < LX_RECOMPUTE_POLICY_COUNT; p++)
    if (!strcmp(arg, lx_recompute_policy_name((lx_recompute_policy)p))) return (lx_recompute_policy)p;
  usage_error("unknown recompute policy '%s' (none, full, selective, checkmate, lynx-heu or lynx-opt)", arg);
}

static void add_override(options *o, lx_field field, const char *option, int value) {
  int i = 0;
  while (i < o->n_overrides && o->overrides[i].field != field)
    i++;
  if (i == o->n_overrides) o->n_overrides++;
  snprintf(o->override_text[i], sizeof o->override_text[i], "command line %s", option);
  o->overrides[i].field = field;
  o->overrides[i].value = value;
}

static options parse_options(int argc, char **argv) {
  enum {
    OPT_DUMP_IR = 256,
    OPT_TARGET,
    OPT_PLAN,
    OPT_JSON,
    OPT_POLICY,
    OPT_PROFILE,
    OPT_GPU_MEMORY,
    OPT_TP,
    OPT_PP,
    OPT_DP,
    OPT_MICRO,
    OPT_GLOBAL,
    OPT_SCHEDULE,
    OPT_VIRTUAL_STAGES,
    OPT_SP,
    OPT_ZERO,
    OPT_MINI_SEQUENCES,
    OPT_LORA_FA,
    OPT_VERSION,
    OPT_PARTITION,
    OPT_EXPLAIN,
    OPT_CUDA_GRAPH,
    OPT_UNFUSED,
    OPT_TRACE_EVENTS,
    OPT_UNROLLED,
    OPT_NO_OFFLOAD,
    OPT_ALLOW_OOM,
    OPT_MAX_MEMORY,
    OPT_SEARCH_TIME
  };
  static const struct option longopts[] = {{"output", required_argument, 0, 'o'},
                                           {"dump-ir", no_argument, 0, OPT_DUMP_IR},
                                           {"target", required_argument, 0, OPT_TARGET},
                                           {"plan", no_argument, 0, OPT_PLAN},
                                           {"json", no_argument, 0, OPT_JSON},
                                           {"policy", required_argument, 0, OPT_POLICY},
                                           {"profile", required_argument, 0, OPT_PROFILE},
                                           {"gpu-memory", required_argument, 0, OPT_GPU_MEMORY},
                                           {"tp", required_argument, 0, OPT_TP},
                                           {"pp", required_argument, 0, OPT_PP},
                                           {"dp", required_argument, 0, OPT_DP},
                                           {"micro-batch", required_argument, 0, OPT_MICRO},
                                           {"global-batch", required_argument, 0, OPT_GLOBAL},
                                           {"schedule", required_argument, 0, OPT_SCHEDULE},
                                           {"virtual-stages", required_argument, 0, OPT_VIRTUAL_STAGES},
                                           {"sequence-parallel", no_argument, 0, OPT_SP},
                                           {"zero", no_argument, 0, OPT_ZERO},
                                           {"mini-sequences", required_argument, 0, OPT_MINI_SEQUENCES},
                                           {"lora-fa", no_argument, 0, OPT_LORA_FA},
                                           {"partition", required_argument, 0, OPT_PARTITION},
                                           {"explain", no_argument, 0, OPT_EXPLAIN},
                                           {"cuda-graph", no_argument, 0, OPT_CUDA_GRAPH},
                                           {"no-epilogue-fusion", no_argument, 0, OPT_UNFUSED},
                                           {"unrolled-step", no_argument, 0, OPT_UNROLLED},
                                           {"no-offload", no_argument, 0, OPT_NO_OFFLOAD},
                                           {"allow-oom-plan", no_argument, 0, OPT_ALLOW_OOM},
                                           {"max-memory", required_argument, 0, OPT_MAX_MEMORY},
                                           {"search-time", required_argument, 0, OPT_SEARCH_TIME},
                                           {"trace-events", required_argument, 0, OPT_TRACE_EVENTS},
                                           {"help", no_argument, 0, 'h'},
                                           {"version", no_argument, 0, OPT_VERSION},
                                           {0, 0, 0, 0}};
  options o = {.target = LX_TARGET_CUDA,
               .partition = LX_PARTITION_BEST,
               .max_memory_bytes = DEFAULT_MAX_MEMORY_GIB * (double)(1 << 30),
               .search_seconds = DEFAULT_SEARCH_SECONDS,
               .trace_events = DEFAULT_TRACE_EVENTS};
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'o': o.output_dir = optarg; break;
    case OPT_DUMP_IR: o.dump_ir = true; break;
    case OPT_PLAN: o.plan = true; break;
    case OPT_TARGET:
      if (!strcmp(optarg, "cpu"))
        o.target = LX_TARGET_CPU;
      else if (!strcmp(optarg, "cuda"))
        o.target = LX_TARGET_CUDA;
      else
        usage_error("unknown target '%s' (cuda or cpu)", optarg);
      break;
    case OPT_JSON: o.json = true; break;
    case OPT_ALLOW_OOM: o.allow_oom_plan = true; break;
    case OPT_MAX_MEMORY:
      o.max_memory_bytes = parse_gib("--max-memory", optarg);
      if (o.max_memory_bytes < MIN_MAX_MEMORY_GIB * (double)(1 << 30)) /* libclang's failure would abort */
        usage_error("--max-memory needs at least " TEXT_OF(MIN_MAX_MEMORY_GIB) " GiB to start, got '%s'",
                    optarg);
      break;
    case OPT_SEARCH_TIME: o.search_seconds = parse_amount("--search-time", optarg, "seconds"); break;
    case OPT_TRACE_EVENTS: o.trace_events = parse_integer("--trace-events", optarg, 0); break;
    case OPT_POLICY:
      o.policy = parse_policy(optarg);
      o.policy_given = true;
      break;
    case OPT_PROFILE: o.profile = optarg; break;
    case OPT_GPU_MEMORY: o.gpu_memory_bytes = parse_gib("--gpu-memory", optarg); break;
    case OPT_EXPLAIN: o.explain = true; break;
    case OPT_CUDA_GRAPH: o.cuda_graph = true; break;
    case OPT_UNFUSED: o.unfused = true; break;
    case OPT_UNROLLED: o.unrolled = true; break;
    case OPT_NO_OFFLOAD: o.no_offload = true; break;
    case OPT_PARTITION:
      if (!strcmp(optarg, "dp"))
        o.partition = LX_PARTITION_DP;
      else if (!strcmp(optarg, "uniform"))
        o.partition = LX_PARTITION_UNIFORM;
      else if (!strcmp(optarg, "best"))
        o.partition = LX_PARTITION_BEST;
      else
        usage_error("unknown partition '%s' (best, uniform or dp)", optarg);
      break;
    case OPT_TP: add_override(&o, LX_F_TP, "--tp", parse_count("--tp", optarg)); break;
    case OPT_PP: add_override(&o, LX_F_PP, "--pp", parse_count("--pp", optarg)); break;
    case OPT_DP: add_override(&o, LX_F_DP, "--dp", parse_count("--dp", optarg)); break;
    case OPT_MICRO:
      add_override(&o, LX_F_MICRO_BATCH, "--micro-batch", parse_count("--micro-batch", optarg));
      break;
    case OPT_GLOBAL:
      add_override(&o, LX_F_GLOBAL_BATCH, "--global-batch", parse_count("--global-batch", optarg));
      break;
    case OPT_SCHEDULE: add_override(&o, LX_F_SCHEDULE, "--schedule", parse_schedule(optarg)); break;
    case OPT_VIRTUAL_STAGES:
      add_override(&o, LX_F_VIRTUAL_STAGES, "--virtual-stages", parse_count("--virtual-stages", optarg));
      break;
    case OPT_SP: add_override(&o, LX_F_SEQ_PARALLEL, "--sequence-parallel", 1); break;
    case OPT_ZERO: add_override(&o, LX_F_ZERO, "--zero", 1); break;
    case OPT_MINI_SEQUENCES:
      add_override(&o, LX_F_MINI_SEQUENCES, "--mini-sequences", parse_count("--mini-sequences", optarg));
      break;
    case OPT_LORA_FA: add_override(&o, LX_F_LORA_FA, "--lora-fa", 1); break;
    case 'h': fputs(lx_usage_text, stdout); exit(0);
    case OPT_VERSION: puts("lynxgen 0.1"); exit(0);
    case ':': usage_error("option '%s' needs a value", offending_option(argv, optind));
    default:
      usage_error("unknown, ambiguous or misused option '%s' (lynxgen --help lists them)",
                  offending_option(argv, optind));
    }
  }
  if (optind == argc) usage_error("%s", "no model file given");
  if (optind + 1 < argc) usage_error("more than one model file given ('%s')", argv[optind + 1]);
  o.model_path = argv[optind];
  if (!o.dump_ir && !o.output_dir && !o.plan)
    usage_error("%s", "nothing to do: give -o DIR, --plan or --dump-ir");
  if (o.json && !o.plan) usage_error("%s", "--json goes with --plan");
  if (o.dump_ir && o.plan) /* stdout would hold the IR's JSON and the plan after it: neither parses */
    usage_error("%s", "--dump-ir and --plan both print on stdout: give one at a time");
  if (o.cuda_graph && o.target != LX_TARGET_CUDA) usage_error("%s", "--cuda-graph goes with the cuda target");
  if (o.unfused && o.target != LX_TARGET_CUDA)
    usage_error("%s", "--no-epilogue-fusion goes with the cuda target");
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
    case LX_F_VIRTUAL_STAGES: ir->plan.virtual_stages = v; break;
    case LX_F_SEQ_PARALLEL: ir->plan.sequence_parallel = v; break;
    case LX_F_ZERO: ir->plan.zero = v; break;
    case LX_F_MINI_SEQUENCES: ir->plan.mini_sequences = v; break;
    case LX_F_LORA_FA: ir->training.lora_fa = v; break;
    default: break;
    }
    ir->locs.field[o->overrides[i].field] = (lx_srcloc){o->override_text[i], 0, 0, NULL};
  }
}

/* ---- the output directory ------------------------------------------------ */

/* Everything the passes produce, for the writers. */
typedef struct {
  lx_ir ir;
  lx_pipeline pipe;
  lx_stage_memory *memory;
  lx_stage_layout *layouts; /* one per stage, for the target */
  lx_target target;
  bool cuda_graph; /* run.sh passes --cuda-graph to the CUDA programs */
  bool unfused;    /* --no-epilogue-fusion */
  bool unrolled;   /* --unrolled-step */
  int trace_events; /* --trace-events */
  lx_cost_model cost;
  lx_simulation sim;
  lx_report report;
} products;

typedef void (*writer)(const products *, FILE *);

static bool write_file(const char *dir, const char *name, writer fill, const products *out) {
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fill(out, f);
  return fclose(f) == 0;
}

static void write_ir(const products *out, FILE *f) { lx_ir_print_json(&out->ir, f); }
static void write_plan(const products *out, FILE *f) { lx_print_plan_text(&out->report, f); }
static void write_trace(const products *out, FILE *f) {
  lx_write_trace_json(&out->sim, out->trace_events, f);
}
static void write_schedule(const products *out, FILE *f) { lx_write_schedule_svg(&out->sim, f); }
static void write_memory(const products *out, FILE *f) {
  lx_write_memory_svg(&out->sim, out->memory, out->report.capacity_bytes, f);
}

static const struct {
  const char *name;
  writer fill;
} output_files[] = {
    {"plan.txt", write_plan},     {"trace.json", write_trace}, {"schedule.svg", write_schedule},
    {"memory.svg", write_memory}, {"ir.json", write_ir},
};

static bool write_text(const char *dir, const char *name, const char *text, unsigned long length) {
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fwrite(text, 1, length, f);
  return fclose(f) == 0;
}

static lx_program program_of(const products *out) {
  return (lx_program){.pipe = &out->pipe,
                      .layouts = out->layouts,
                      .target = out->target,
                      .cuda_graph = out->cuda_graph,
                      .unfused = out->unfused,
                      .unrolled = out->unrolled,
                      .predicted_step_s = out->sim.iteration_time};
}

static int program_stage; /* which stage write_stage prints; writers take only the products */

static void write_stage(const products *out, FILE *f) {
  lx_program prog = program_of(out);
  if (out->target == LX_TARGET_CUDA)
    lx_emit_stage_cuda(&prog, program_stage, f);
  else
    lx_emit_stage_cpu(&prog, program_stage, f);
}

static void write_makefile(const products *out, FILE *f) {
  lx_program prog = program_of(out);
  lx_emit_makefile(&prog, f);
}

static void write_run_script(const products *out, FILE *f) {
  lx_program prog = program_of(out);
  lx_emit_run_script(&prog, f);
}

static void write_slurm_script(const products *out, FILE *f) {
  lx_program prog = program_of(out);
  lx_emit_slurm_script(&prog, f);
}

static bool write_templates(const char *dir, const lx_template *templates, int count) {
  for (int t = 0; t < count; t++)
    if (!write_text(dir, templates[t].name, templates[t].text, templates[t].length)) return false;
  return true;
}

/* The target's runnable program: sources, templates, Makefile, run.sh. */
static bool write_program(const char *dir, const products *out) {
  for (int s = 0; s < out->pipe.pp; s++) {
    char name[32];
    snprintf(name, sizeof name, out->target == LX_TARGET_CUDA ? "stage%d.cu" : "stage%d.c", s);
    program_stage = s;
    if (!write_file(dir, name, write_stage, out)) return false;
  }
  const lx_template *own = out->target == LX_TARGET_CUDA ? lx_cuda_templates : lx_cpu_templates;
  int own_count = out->target == LX_TARGET_CUDA ? lx_cuda_template_count : lx_cpu_template_count;
  if (!write_templates(dir, lx_common_templates, lx_common_template_count) ||
      !write_templates(dir, own, own_count))
    return false;
  char run[PATH_MAX + 64];
  snprintf(run, sizeof run, "%s/run.sh", dir);
  if (out->target == LX_TARGET_CUDA) {
    char slurm[PATH_MAX + 64];
    snprintf(slurm, sizeof slurm, "%s/run-slurm.sh", dir);
    if (!write_file(dir, "run-slurm.sh", write_slurm_script, out) || chmod(slurm, 0755) != 0) return false;
  }
  return write_file(dir, "Makefile", write_makefile, out) &&
         write_file(dir, "run.sh", write_run_script, out) && chmod(run, 0755) == 0;
}

/* Fills the fresh directory that becomes -o DIR (gen/report/output_dir.c). */
static bool write_all(const char *dir, const void *products_) {
  const products *out = products_;
  for (size_t i = 0; i < sizeof output_files / sizeof output_files[0]; i++)
    if (!write_file(dir, output_files[i].name, output_files[i].fill, out)) return false;
  if (!write_program(dir, out)) return false;
  return lx_write_manifest(dir, out->ir.model_path);
}

static int write_output(const char *dir, const products *out) {
  switch (lx_write_output_dir(dir, write_all, out)) {
  case LX_OUTPUT_WRITTEN: break;
  case LX_OUTPUT_FAILED: return EXIT_USER_ERROR;
  case LX_OUTPUT_REFUSED: return EXIT_USAGE;
  }
  char name[LX_TEXT_MAX];
  printf("wrote %s: plan.txt trace.json schedule.svg memory.svg ir.json manifest.txt, the stage programs, "
         "Makefile and run.sh\n",
         lx_text(dir, name, sizeof name));
  return 0;
}

static void print_summary(const products *out) {
  const lx_ir *ir = &out->ir;
  const lx_simulation *sim = &out->sim;
  char name[LX_TEXT_MAX], params[LX_BYTES_TEXT], peak[LX_BYTES_TEXT], capacity[LX_BYTES_TEXT];
  printf("%s: %s parameters, %d stages, %d micro-batches, recompute %s\n",
         lx_text(ir->model_path, name, sizeof name), lx_count_text((double)ir->params_total, params),
         out->pipe.pp, out->pipe.micro_batches, lx_recompute_policy_name(out->pipe.policy));
  printf("  predicted iteration %.1f ms, bubble %.1f%%, %.0f tokens/s, MFU %.1f%%\n",
         sim->iteration_time * 1e3, 100 * sim->bubble_fraction, sim->tokens_per_s, 100 * sim->mfu);
  for (int s = 0; s < out->pipe.pp; s++)
    printf("  stage %d peak memory %s of %s\n", s, lx_bytes_text((double)out->memory[s].peak, peak),
           lx_bytes_text(out->report.capacity_bytes, capacity));
}

static bool plan_is_open(const lx_open_plan *p) { return p->tp || p->pp || p->dp || p->micro_batch; }

static lx_search_request search_request(const options *opts) {
  return (lx_search_request){.policy = opts->policy,
                             .search_policies = !opts->policy_given,
                             .partition = opts->partition,
                             .no_offload = opts->no_offload,
                             .profile = opts->profile,
                             .gpu_memory_bytes = opts->gpu_memory_bytes,
                             .time_budget_s = opts->search_seconds};
}

/* When the model leaves parallel-plan fields open, the plan search picks them
 * (and the recompute policy, unless --policy gave it); the IR is then
 * analysed again for the chosen plan. */
/* The open fields of the plan, in prose: "dp and micro_batch". */
static void name_open_fields(const lx_open_plan *o, char *out, size_t cap) {
  const char *names[] = {"tp", "pp", "dp", "micro_batch"};
  bool open[] = {o->tp, o->pp, o->dp, o->micro_batch};
  int left = open[0] + open[1] + open[2] + open[3];
  out[0] = '\0';
  for (int k = 0; k < 4; k++) {
    if (!open[k]) continue;
    const char *sep = out[0] == '\0' ? "" : --left == 1 ? " and " : ", ";
    snprintf(out + strlen(out), cap - strlen(out), "%s%s", sep, names[k]);
  }
}

static bool choose_open_plan(const options *opts, lx_ir *ir, lx_recompute_policy *policy) {
  if (!plan_is_open(&ir->open_plan) && !ir->open_plan.schedule) return true;
  if (plan_is_open(&ir->open_plan) && !ir->plan.global_batch) {
    char open[64];
    name_open_fields(&ir->open_plan, open, sizeof open);
    lx_error(ir->locs.plan,
             "the plan search needs global_batch (sequences per step) to choose %s: set .global_batch in "
             "struct lx_parallel or pass --global-batch N",
             open);
    return false;
  }
  lx_search_request req = search_request(opts);
  lx_candidate best;
  lx_search_stats stats;
  bool found = lx_search_plan(ir, &req, &best, &stats, opts->explain ? stdout : NULL);
  if (stats.out_of_time) {
    char plan[128] = "none that fits";
    if (found)
      snprintf(plan, sizeof plan, "tp %d, pp %d, dp %d, micro-batch %d, %s, %d mini-sequence%s (%.1f ms)",
               best.tp, best.pp, best.dp, best.micro_batch, lx_schedule_name(best.schedule),
               best.mini_sequences, best.mini_sequences == 1 ? "" : "s", 1e3 * best.time_s);
    lx_error(ir->locs.plan,
             "the plan search's time budget (--search-time %g s) ran out after %d of %d candidates; the best "
             "found so far: %s; set the open fields, or give it more time",
             opts->search_seconds, stats.tried, stats.feasible, plan);
    return false;
  }
  if (!found) {
    const lx_candidate *c = &stats.closest;
    char closest[256] = "", peak[LX_BYTES_TEXT], capacity[LX_BYTES_TEXT];
    if (c->peak_bytes > 0)
      snprintf(
          closest, sizeof closest,
          ": the closest, tp %d x pp %d x dp %d, micro-batch %d, %s, recompute %s, %d mini-sequence%s, needs "
          "%s of the GPU's %s",
          c->tp, c->pp, c->dp, c->micro_batch, lx_schedule_name(c->schedule),
          lx_recompute_policy_name(c->policy), c->mini_sequences, c->mini_sequences == 1 ? "" : "s",
          lx_bytes_text(c->peak_bytes, peak), lx_bytes_text(stats.memory_bytes, capacity));
    else if (c->static_floor_bytes > 0)
      snprintf(
          closest, sizeof closest,
          ": the least demanding, tp %d x pp %d x dp %d, needs more than %s of the GPU's %s for its weights, "
          "gradients and AdamW state alone",
          c->tp, c->pp, c->dp, lx_bytes_text(c->static_floor_bytes, peak),
          lx_bytes_text(stats.memory_bytes, capacity));
    lx_error(ir->locs.plan,
             "no parallel plan for the open fields fits this cluster's memory%s (--explain lists the "
             "candidates and what each needs)",
             closest);
    return false;
  }
  ir->plan.tp = best.tp, ir->plan.pp = best.pp, ir->plan.dp = best.dp,
  ir->plan.micro_batch = best.micro_batch, ir->plan.schedule = best.schedule;
  ir->plan.virtual_stages = best.virtual_stages;
  ir->plan.mini_sequences = best.mini_sequences;
  *policy = best.policy;
  return lx_analyze(ir) == 0;
}

/* --explain on the plan: the longest sequence each recompute policy and
 * mini-sequence count trains; under 2BW what it gains or costs against 1F1B,
 * policy by policy. */
static void explain_plan(const options *opts, const lx_ir *ir) {
  if (!opts->explain) return;
  lx_search_request req = search_request(opts);
  lx_explain_longest_sequence(ir, &req, stdout);
  if (ir->plan.schedule == LX_SCHEDULE_2BW) lx_explain_2bw(ir, &req, stdout);
}

/* A stage whose modeled peak exceeds the GPU's memory would run out of it:
 * an error unless the user asks for the plan anyway. */
static void check_plan_fits(const options *opts, const products *out) {
  for (int s = 0; s < out->pipe.pp && !opts->allow_oom_plan; s++)
    if ((double)out->memory[s].peak > out->report.capacity_bytes) {
      char peak[LX_BYTES_TEXT], capacity[LX_BYTES_TEXT];
      lx_error(
          out->ir.locs.plan,
          "the plan does not fit: stage %d needs %s of the GPU's %s%s (recompute more with --policy, use "
          "more stages, or pass --allow-oom-plan to write it anyway)",
          s, lx_bytes_text((double)out->memory[s].peak, peak),
          lx_bytes_text(out->report.capacity_bytes, capacity),
          opts->gpu_memory_bytes > 0 ? ", as --gpu-memory sets it" : "");
      return;
    }
}

/* Front end and analysis; then, unless only the IR is wanted, the schedule,
 * its memory and its simulation. Returns the exit status. */
static int run_passes(const options *opts, products *out) {
  lx_ir *ir = &out->ir;
  lx_ir_init(ir);
  if (lx_parse_model(opts->model_path, NULL, 0, ir) == 0) {
    apply_overrides(opts, ir);
    if (lx_analyze(ir) == 0) lx_lint(ir);
  }
  if (lx_error_count() == 0 && lx_ir_validate(ir) != 0) return 3; /* a generator bug, already printed */
  bool schedule = lx_error_count() == 0 && (opts->plan || opts->output_dir);
  lx_recompute_policy policy = opts->policy;
  if (schedule && !choose_open_plan(opts, ir, &policy)) {
    fprintf(stderr, "lynxgen: %d error%s\n", lx_error_count(), lx_error_count() == 1 ? "" : "s");
    return EXIT_USER_ERROR;
  }
  if (schedule) explain_plan(opts, ir);
  lx_plan_options plan = {
      .policy = policy, .partition = opts->partition, .no_offload = opts->no_offload, .cm = &out->cost};
  bool costed = schedule && lx_cost_model_init(&out->cost, ir, opts->profile);
  if (costed && opts->gpu_memory_bytes > 0) out->cost.gpu.memory_bytes = opts->gpu_memory_bytes;
  if (costed && lx_plan_pipeline(ir, &plan, &out->pipe)) {
    out->memory = lx_calloc((size_t)out->pipe.pp, sizeof *out->memory);
    lx_plan_memory(&out->pipe, out->memory);
    if (!lx_simulate_training(&out->pipe, &out->cost, NULL, NULL, out->memory, &out->sim)) return 3;
    out->report = (lx_report){.pipe = &out->pipe,
                              .memory = out->memory,
                              .sim = &out->sim,
                              .capacity_bytes = out->cost.gpu.memory_bytes};
    out->target = opts->target;
    out->cuda_graph = opts->cuda_graph;
    out->unfused = opts->unfused;
    out->unrolled = opts->unrolled;
    out->trace_events = opts->trace_events;
    out->layouts = lx_calloc((size_t)out->pipe.pp, sizeof *out->layouts);
    for (int s = 0; s < out->pipe.pp; s++)
      lx_layout_stage(&out->pipe, s, lx_target_param_elt(&out->pipe, opts->target),
                      lx_target_master_copy(&out->pipe, opts->target), &out->layouts[s]);
    out->report.layouts = out->layouts;
    if (lx_verify(&out->pipe, out->layouts) != 0) return 3; /* a generator bug, already printed */
    check_plan_fits(opts, out);
  }
  if (lx_error_count() > 0) {
    fprintf(stderr, "lynxgen: %d error%s\n", lx_error_count(), lx_error_count() == 1 ? "" : "s");
    return EXIT_USER_ERROR;
  }
  return 0;
}

static void free_products(products *out) {
  lx_simulation_free(&out->sim);
  for (int s = 0; out->layouts && s < out->pipe.pp; s++)
    lx_layout_free(&out->layouts[s]);
  free(out->layouts);
  for (int s = 0; out->memory && s < out->pipe.pp; s++)
    lx_stage_memory_free(&out->memory[s]);
  free(out->memory);
  lx_cost_model_free(&out->cost);
  lx_pipeline_free(&out->pipe);
  lx_ir_free(&out->ir);
}

/* Allocations past the budget fail, and end in alloc.h's out-of-memory error
 * (the plan search then names the best plan it had). A lower limit that the
 * shell set stays. */
static void limit_memory(double bytes) {
  struct rlimit now;
  if (getrlimit(RLIMIT_AS, &now) != 0) return;
  rlim_t budget = (rlim_t)bytes;
  if (now.rlim_cur != RLIM_INFINITY && now.rlim_cur <= budget) return;
  now.rlim_cur = budget;
  setrlimit(RLIMIT_AS, &now);
}

int lx_tokenize_main(int argc, char **argv); /* gen/tokenize.c */

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "tokenize")) return lx_tokenize_main(argc - 1, argv + 1);
  options opts = parse_options(argc, argv);
  limit_memory(opts.max_memory_bytes);
  products out = {0};
  int status = run_passes(&opts, &out);
  if (status == 0) {
    if (opts.dump_ir) lx_ir_print_json(&out.ir, stdout);
    out.report.search_times = true;
    if (opts.plan) (opts.json ? lx_print_plan_json : lx_print_plan_text)(&out.report, stdout);
    out.report.search_times = false;
    if (opts.output_dir && (status = write_output(opts.output_dir, &out)) == 0) print_summary(&out);
  }
  free_products(&out);
  return status;
}
