/* trace_draw.h — what trace.json (trace_json.c), schedule.svg (schedule_svg.c)
 * and memory.svg (memory_svg.c) share: how instructions are painted, their
 * simulated intervals, the windows as the simulation ran them, names,
 * axes. Defined in trace.c. */
#ifndef LX_TRACE_DRAW_H
#define LX_TRACE_DRAW_H

#include <stdbool.h>
#include <stdio.h>

#include "planning/simulate.h"

/* What a trace viewer groups by ("cat") and what the SVGs colour by. */
typedef enum {
  PAINT_FORWARD,
  PAINT_AHEAD, /* 2BW: a forward of the next step, run in this one's drain */
  PAINT_BACKWARD,
  PAINT_WEIGHTS, /* zero bubble's W passes */
  PAINT_RECOMPUTE,
  PAINT_P2P,
  PAINT_TP,
  PAINT_DP,
  PAINT_OPTIMIZER,
  PAINT_HOST, /* offload and prefetch copies to and from host memory */
  PAINT_NONE, /* RECORD/WAIT: they take no time of their own */
  PAINT_COUNT
} lx_paint;

lx_paint lx_paint_of(const lx_instr *in);

bool lx_is_finite(double x);
/* The interval of instruction i of a stream, or NULL when the simulation did
 * not reach it (a deadlock) or the stream has no times. */
const lx_interval *lx_interval_of(const lx_simulation *sim, int stage, int stream, int i);
/* Seconds the drawings span: the iteration, or the last end seen where the
 * simulation stopped early. Never zero, so scales stay finite. */
double lx_drawn_span(const lx_simulation *sim);

/* "tiny" for "examples/tiny.model" (at most size - 1 bytes of it). */
void lx_model_name(const lx_ir *ir, char *buf, size_t size);
/* A micro-batch as the drawings show it: where the pipeline is unrolled over
 * several steps (2BW), its number in its step; else itself. */
int lx_shown_mb(const lx_pipeline *p, int mb);
/* lx_instr_describe of an instruction as drawn: unrolled, "... mb1 (step 2)". */
void lx_describe_shown(const lx_pipeline *p, const lx_instr *in, char *buf, size_t size);
/* "layers 2-3" */
void lx_layer_range(const lx_stage *st, char *buf, size_t size);
/* "GPipe", "1F1B", ... */
const char *lx_schedule_label(lx_schedule k);
/* A plan's tp or dp: 1 where the model file left it open. */
int lx_plan_or_one(int v);

/* A planned policy's windows as the simulation ran them: from the end of the
 * FWD/BWD a window follows to the start of the compute stream's next FWD/BWD
 * (the recompute stream starts there; the schedule may have moved since the
 * windows were measured, so these are the simulated times, not the measured
 * ones), and how many layer instances recompute in each. */
typedef struct {
  double start, end;
  int instances;
  bool reached; /* the simulation ran the FWD/BWD it follows */
} lx_window_span;

/* Stage s's spans (free them), or NULL when it places no recompute in windows. */
lx_window_span *lx_window_spans(const lx_simulation *sim, int s);

/* A 1-2-5 step that divides `range` into about `parts` intervals. */
double lx_nice_step(double range, int parts);
/* Decimals that tell ticks `step` apart: 0 for 5, 1 for 0.5, 2 for 0.02. */
int lx_step_decimals(double step);
/* The SVG element and its white background. */
void lx_put_svg_open(FILE *out, int width, int height);

#endif
