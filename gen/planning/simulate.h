/* simulate.h — discrete-event simulation of one training iteration.
 *
 * Every stage's streams run their instruction lists in order; an instruction
 * starts when its stream is free and its dependencies are met: WAIT after the
 * matching RECORD, a SEND and its RECV together (a rendezvous, as NCCL
 * point-to-point is), collectives when issued. Durations come from a timing
 * function (the cost model by default; tests pass closed-form ones). */
#ifndef LX_SIMULATE_H
#define LX_SIMULATE_H

#include "analysis/cost.h"
#include "planning/memplan.h"
#include "schedule.h"

typedef struct {
  double start, end; /* seconds from the iteration's start */
} lx_interval;

/* Seconds that instruction `in` of stage `stage` takes. */
typedef double (*lx_timing_fn)(void *ctx, const lx_pipeline *p, int stage, const lx_instr *in);

typedef struct {
  lx_interval *times[LX_STREAM_COUNT]; /* parallel to the stage's instruction lists */
  double busy[LX_STREAM_COUNT];        /* seconds each stream spends in instructions */
  double compute_time;                 /* FWD + BWD on the compute stream */
  double recompute_time;               /* RECOMPUTE, on either stream */
  double exposed_comm_time;            /* compute stream idle waiting on a stream of communication */
  int max_in_flight;                   /* micro-batches with activations alive at once (with memory) */
  int64_t peak_bytes;                  /* static + activations + transient, at its most (with memory) */
} lx_stage_timeline;

typedef struct {
  const lx_pipeline *pipe;
  lx_stage_timeline *stages;
  double iteration_time;
  double bubble_fraction; /* idle share of the compute streams over the iteration */
  double tokens_per_s, mfu, hfu;
  bool deadlocked; /* a generator bug; the heads of the stuck streams were reported */
  bool unrolled;   /* pipe is the simulation's own, unrolled over several steps (2BW) */
  int measured;    /* then: the step whose times are the iteration's */
} lx_simulation;

/* Simulates p with the given timing (NULL: the cost model `cm`), applying
 * the memory deltas of `memory` (one per stage) to find each stage's peak in
 * time; NULL: times only (what the planner and the plan search need). */
bool lx_simulate(const lx_pipeline *p, const lx_cost_model *cm, lx_timing_fn timing, void *timing_ctx,
                 const lx_stage_memory *memory, lx_simulation *out);
/* The same for the steady state of training: p itself, or for a schedule
 * whose steps overlap (2BW) p unrolled over several steps, with
 * iteration_time, the busy times and the rates those of one step in the
 * middle, and pipe the unrolled pipeline (what traces draw). */
bool lx_simulate_training(const lx_pipeline *p, const lx_cost_model *cm, lx_timing_fn timing,
                          void *timing_ctx, const lx_stage_memory *memory, lx_simulation *out);
void lx_simulation_free(lx_simulation *sim);

/* Per instruction of stage s's compute stream in p, its interval in `sim`
 * of p (malloc'd): of p itself, or, unrolled, in the measured step, zero
 * for what a step with a full pipeline does not run (2BW's fill and the
 * waits for it). */
lx_interval *lx_compute_times(const lx_simulation *sim, const lx_pipeline *p, int s);

#endif
