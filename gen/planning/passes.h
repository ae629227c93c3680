/* passes.h — the entry points of the passes after analysis, in pipeline
 * order. Each pass lives in its own file and reads only the IR and the
 * schedule IR (ir/ir.h, ir/schedule.h). */
#ifndef LX_PASSES_H
#define LX_PASSES_H

#include "schedule.h"

/* partition.c — Megatron-LM's even split of the layers over `pp` stages
 * (the first layers % pp stages take one more). first_layer has pp + 1
 * entries; stage s holds [first_layer[s], first_layer[s + 1]). */
void lx_partition_uniform(int layers, int pp, int *first_layer);

/* recompute.c — the decisions of a fixed policy for one block, then the
 * closure: an op whose dropped tensors must be regenerated runs again, and
 * so does every producer of an input that is no longer held. */
void lx_recompute_fixed(const lx_ir *ir, lx_recompute_policy policy, lx_op_decision *decisions);
void lx_recompute_closure(const lx_graph *block, lx_op_decision *decisions);
/* Bytes of one layer's activations kept from forward to backward, per
 * micro-batch and tp rank, under these decisions. */
int64_t lx_kept_bytes(const lx_graph *block, const lx_op_decision *decisions);

/* schedule.c — stage s's instruction lists of a pipeline schedule (GPipe
 * or 1F1B) from its recompute decisions and windows (rebuilt from scratch). */
void lx_schedule_stage(const lx_ir *ir, lx_pipeline *p, int s);
/* parallel.c — the plan's micro-batches per iteration and per replica. */
int lx_micro_batches(const lx_ir *ir);
/* The tensor-parallel collectives around op's forward (or backward): the
 * all-gather before it that sequence parallelism needs (of its input shards,
 * or in the backward of a row-parallel op its output gradient's), and the
 * reduction after it (its partial output; in the backward of a
 * column-parallel op, its input's partial gradient). */
typedef struct {
  bool gather_before, reduce_after;
  lx_tp_collective reduce; /* all-reduce, or reduce-scatter into the sequence shard */
} lx_tp_collectives;
lx_tp_collectives lx_tp_collectives_of(const lx_ir *ir, const lx_op *op, bool backward);
/* Sequence parallelism in effect (tp > 1): replicated activations are sequence shards. */
bool lx_sequence_parallel(const lx_ir *ir);

#endif
