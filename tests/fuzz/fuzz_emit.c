/* fuzz_emit.c — everything after the schedule, as lynxgen -o runs it, with
 * the files printed to memory instead of a directory (fuzz_plan.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "emit/emit.h"
#include "fuzz_plan.h"
#include "planning/layout.h"
#include "planning/memplan.h"
#include "planning/simulate.h"
#include "report/report.h"
#include "report/trace.h"
#include "verify/verify.h"

static void fail(const char *why, const char *what) {
  fprintf(stderr, "fuzz_plan: %s: %s\n", why, what);
  abort();
}

/* What one printer needs, and which file it prints. */
typedef struct {
  const lx_program *prog;
  const lx_report *report;
  int stage;
} sources;

typedef void (*printer)(const sources *, FILE *);

/* Prints one file to memory; lynxgen never writes an empty one. */
static void print_file(const char *name, printer print, const sources *in) {
  char *text = NULL;
  size_t length = 0;
  FILE *f = open_memstream(&text, &length);
  if (!f) abort();
  print(in, f);
  fclose(f);
  free(text);
  if (length == 0) fail("an empty file", name);
}

static void cpu_stage(const sources *in, FILE *f) { lx_emit_stage_cpu(in->prog, in->stage, f); }
static void cuda_stage(const sources *in, FILE *f) { lx_emit_stage_cuda(in->prog, in->stage, f); }
static void makefile(const sources *in, FILE *f) { lx_emit_makefile(in->prog, f); }
static void run_script(const sources *in, FILE *f) { lx_emit_run_script(in->prog, f); }
static void slurm_script(const sources *in, FILE *f) { lx_emit_slurm_script(in->prog, f); }
static void plan_text(const sources *in, FILE *f) { lx_print_plan_text(in->report, f); }
static void plan_json(const sources *in, FILE *f) { lx_print_plan_json(in->report, f); }
static void trace_json(const sources *in, FILE *f) { lx_write_trace_json(in->report->sim, 0, f); }
static void schedule_svg(const sources *in, FILE *f) { lx_write_schedule_svg(in->report->sim, f); }
static void memory_svg(const sources *in, FILE *f) {
  lx_write_memory_svg(in->report->sim, in->report->memory, in->report->capacity_bytes, f);
}
static void ir_json(const sources *in, FILE *f) { lx_ir_print_json(in->report->pipe->ir, f); }

/* The target's arena per stage, verified, and its program; for the CUDA
 * target (lynxgen's default) also the plan, trace and pictures. */
static void emit_target(const lx_pipeline *pipe, lx_report *report, const fuzz_options *o, lx_target target) {
  lx_stage_layout *layouts = calloc((size_t)pipe->pp, sizeof *layouts);
  for (int s = 0; s < pipe->pp; s++)
    lx_layout_stage(pipe, s, lx_target_param_elt(pipe, target), lx_target_master_copy(pipe, target),
                    &layouts[s]);
  if (lx_verify(pipe, layouts) != 0)
    fail("the verifier found a generator bug", target == LX_TARGET_CPU ? "cpu" : "cuda");
  lx_program prog = {.pipe = pipe,
                     .layouts = layouts,
                     .target = target,
                     .cuda_graph = o->cuda_graph && target == LX_TARGET_CUDA,
                     .unfused = o->unfused && target == LX_TARGET_CUDA,
                     .unrolled = o->unrolled};
  report->layouts = layouts;
  sources in = {&prog, report, 0};
  for (in.stage = 0; in.stage < pipe->pp; in.stage++)
    print_file("a stage program", target == LX_TARGET_CPU ? cpu_stage : cuda_stage, &in);
  print_file("Makefile", makefile, &in);
  print_file("run.sh", run_script, &in);
  if (target == LX_TARGET_CUDA) {
    static const struct {
      const char *name;
      printer print;
    } files[] = {{"run-slurm.sh", slurm_script},
                 {"plan.txt", plan_text},
                 {"plan json", plan_json},
                 {"trace.json", trace_json},
                 {"schedule.svg", schedule_svg},
                 {"memory.svg", memory_svg},
                 {"ir.json", ir_json}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
      print_file(files[i].name, files[i].print, &in);
  }
  for (int s = 0; s < pipe->pp; s++)
    lx_layout_free(&layouts[s]);
  free(layouts);
}

void fuzz_emit_plan(const lx_pipeline *pipe, const lx_cost_model *cm, const fuzz_options *o) {
  lx_stage_memory *memory = calloc((size_t)pipe->pp, sizeof *memory);
  lx_plan_memory(pipe, memory);
  lx_simulation sim = {0};
  if (!lx_simulate(pipe, cm, NULL, NULL, memory, &sim))
    fail("the simulation of a planned schedule", "deadlocked");
  lx_report report = {.pipe = pipe,
                      .memory = memory,
                      .sim = &sim,
                      .capacity_bytes = cm->gpu.memory_bytes,
                      .search_times = true}; /* --plan's text, the longer one */
  emit_target(pipe, &report, o, LX_TARGET_CPU);
  emit_target(pipe, &report, o, LX_TARGET_CUDA);
  lx_simulation_free(&sim);
  for (int s = 0; s < pipe->pp; s++)
    lx_stage_memory_free(&memory[s]);
  free(memory);
}
