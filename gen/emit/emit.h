/* emit.h — the printers: the schedule IR as a program per pipeline stage.
 *
 * Both targets walk the same instruction lists. A run of consecutive FWD (or
 * BWD, or RECOMPUTE) instructions of one graph instance and micro-batch on
 * the compute stream becomes one call of that graph's function, whose body
 * prints the ops in the order the run lists them; instructions of the other
 * streams become non-blocking communication, and a compute-stream WAIT on
 * them a wait. Every offset comes from the static memory plan (layout.h). */
#ifndef LX_EMIT_H
#define LX_EMIT_H

#include <stdio.h>

#include "planning/layout.h"
#include "schedule.h"

typedef enum { LX_TARGET_CPU, LX_TARGET_CUDA } lx_target;

/* What the printers need; owned by the caller. */
typedef struct {
  const lx_pipeline *pipe;
  const lx_stage_layout *layouts; /* one per stage, laid out for the target */
  lx_target target;
  bool cuda_graph; /* CUDA: run.sh and run-slurm.sh pass --cuda-graph */
  bool unfused;    /* CUDA: no cuBLASLt epilogue fusions (--no-epilogue-fusion) */
  bool unrolled;   /* the step printed in full, no loops (--unrolled-step) */
  double predicted_step_s; /* the simulator's iteration time: the watchdog's default derives from it */
} lx_program;

/* The source of stage `s`. */
void lx_emit_stage_cpu(const lx_program *prog, int s, FILE *out);
void lx_emit_stage_cuda(const lx_program *prog, int s, FILE *out);
/* The Makefile and run.sh of the emitted directory. */
void lx_emit_makefile(const lx_program *prog, FILE *out);
void lx_emit_run_script(const lx_program *prog, FILE *out);
/* CUDA only: run-slurm.sh, the srun variant of run.sh. */
void lx_emit_slurm_script(const lx_program *prog, FILE *out);
/* The element size a target lays weights and activations out with. */
int lx_target_param_elt(const lx_pipeline *p, lx_target target);
bool lx_target_master_copy(const lx_pipeline *p, lx_target target);

/* Template headers, embedded at build time (build/templates.c). */
typedef struct {
  const char *name; /* "lx_kernels.h" */
  const char *text;
  unsigned long length;
} lx_template;

/* common: the host runtime of both targets (templates/common) */
extern const lx_template lx_common_templates[];
extern const int lx_common_template_count;
extern const lx_template lx_cpu_templates[];
extern const int lx_cpu_template_count;
extern const lx_template lx_cuda_templates[];
extern const int lx_cuda_template_count;

#endif
