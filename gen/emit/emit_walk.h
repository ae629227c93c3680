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

#include <stdio.h>

#include "schedule.h"

/* 2BW: what an instruction runs under (lx_instr's fill and ahead). */
typedef enum { LX_GUARD_NONE, LX_GUARD_FILL, LX_GUARD_AHEAD } lx_guard;

/* Where the hooks print, and the walker's `if` around guarded instructions:
 * while one is open, *out is a buffer that becomes its body. */
typedef struct {
  FILE **out;
  lx_guard open;
  FILE *outer;
  char *text;
  size_t size;
} lx_walk_guard;

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
  lx_walk_guard *guard; /* its out is the printer's output, which the hooks print to */
  /* Before a guard opens or closes: what the printer must not leave open across it; may be NULL. */
  void (*guard_changes)(void *ctx);
} lx_walk_hooks;

/* Do a and b belong to one run: the same pass of one graph instance and micro-batch? */
bool lx_walk_same_run(const lx_instr *a, const lx_instr *b);

/* Issues every instruction of the stage's streams through the hooks, once;
 * the compute stream's OPTIMIZER_STEP is left to the caller (it runs after
 * the schedule). */
void lx_walk_stage(const lx_stage *st, const lx_walk_hooks *hooks);

#endif
