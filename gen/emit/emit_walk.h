/* emit_walk.h — the order in which a printer issues one stage's streams.
 *
 * Both printers turn a stage's per-stream instruction lists into one
 * sequential host program. The walker decides the order: the compute stream
 * in its own order, and before each of its instructions, everything the other
 * streams can issue (their WAITs satisfied by events already recorded). So a
 * RECORD is always issued before every WAIT on its event, and a printer only
 * says how each instruction reads in its target (the hooks). */
#ifndef LX_EMIT_WALK_H
#define LX_EMIT_WALK_H

#include "schedule.h"

typedef struct {
  void *ctx; /* the printer's state, passed to every hook */
  /* A run of FWD, BWD or RECOMPUTE of one graph instance and micro-batch on
   * `stream`: `count` consecutive instructions starting at `first`. */
  void (*run)(void *ctx, lx_stream stream, const lx_instr *first, int count);
  /* LOAD of micro-batch first->mb: once for its consecutive LOADs (inputs, targets). */
  void (*load)(void *ctx, const lx_instr *first);
  /* SEND/RECV/ALLREDUCE (or any other instruction) on a stream other than compute. */
  void (*comm)(void *ctx, lx_stream stream, const lx_instr *in);
  void (*record)(void *ctx, lx_stream stream, const lx_instr *in);
  /* `stream` waits for in->event, recorded earlier on `recorded_on`. */
  void (*wait)(void *ctx, lx_stream stream, const lx_instr *in, lx_stream recorded_on);
} lx_walk_hooks;

/* Do a and b belong to one run: the same pass of one graph instance and micro-batch? */
bool lx_walk_same_run(const lx_instr *a, const lx_instr *b);

/* Issues every instruction of the stage's streams through the hooks, once;
 * the compute stream's OPTIMIZER_STEP is left to the caller (it runs after
 * the schedule). */
void lx_walk_stage(const lx_stage *st, const lx_walk_hooks *hooks);

#endif
