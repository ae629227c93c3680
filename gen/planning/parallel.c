/* parallel.c — facts of the parallel plan every pass reads: micro-batches
 * per step, whether sequence parallelism is in effect, and the
 * tensor-parallel collectives around an op (passes.h). */
#include "planning/passes.h"

bool lx_sequence_parallel(const lx_ir *ir) { return ir->plan.sequence_parallel && ir->plan.tp > 1; }

/* Megatron's pairs: a row-parallel (or vocabulary-parallel) output is a
 * partial sum, and so is a column-parallel op's input gradient; with
 * sequence parallelism the sums are reduce-scatters into sequence shards
 * and whole tensors are gathered from shards where an op reads them. */
lx_tp_collectives lx_tp_collectives_of(const lx_ir *ir, const lx_op *op, bool backward) {
  lx_tp_collectives c = {.reduce = LX_COLL_ALLREDUCE};
  if (!ir->plan.tp || ir->plan.tp < 2) return c;
  bool sp = lx_sequence_parallel(ir), column = op->tp_role == LX_TP_COLUMN, row = op->needs_tp_allreduce;
  c.gather_before = sp && (column || (backward && row));
  c.reduce_after = backward ? column : row;
  if (sp) c.reduce = LX_COLL_REDUCE_SCATTER;
  return c;
}

int lx_micro_batches(const lx_ir *ir) {
  const lx_plan *p = &ir->plan;
  int b = p->micro_batch, dp = p->dp;
  int pp = p->pp;
  return p->global_batch ? p->global_batch / (b * dp) : pp;
}
