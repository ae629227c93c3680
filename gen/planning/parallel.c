/* parallel.c — facts of the parallel plan every pass reads: micro-batches
 * per step, whether sequence parallelism is in effect, the
 * tensor-parallel collectives around an op, and the pipeline schedule's
 * per-stage facts (slots, zero bubble's weight lag and split backwards)
 * (passes.h). */
#include "planning/passes.h"

#include <stdlib.h>

#include "alloc.h"

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

int lx_weight_lag(lx_schedule kind, int s) { return kind == LX_SCHEDULE_ZB_H1 ? s : 0; }

static lx_chunk_pass virtual_pass(int pp, int v, int k, bool backward) {
  int chunk = k % (pp * v) / pp;
  return (lx_chunk_pass){backward, backward ? v - 1 - chunk : chunk, k / (pp * v) * pp + k % pp};
}

void lx_interleaved_order(int pp, int virtual_stages, int s, int micro_batches, lx_chunk_pass *order) {
  int total = micro_batches * virtual_stages, n = 0;
  int warmup = micro_batches == pp ? total : 2 * (pp - s - 1) + (virtual_stages - 1) * pp;
  if (warmup > total) warmup = total;
  for (int k = 0; k < warmup; k++)
    order[n++] = virtual_pass(pp, virtual_stages, k, false);
  for (int k = 0; k < total - warmup; k++) {
    order[n++] = virtual_pass(pp, virtual_stages, warmup + k, false);
    order[n++] = virtual_pass(pp, virtual_stages, k, true);
  }
  for (int k = total - warmup; k < total; k++)
    order[n++] = virtual_pass(pp, virtual_stages, k, true);
}

/* The most micro-batches each chunk of the stage holds between forward and backward. */
static void interleaved_stash(int pp, int virtual_stages, int s, int micro_batches, int *most) {
  int n = 2 * micro_batches * virtual_stages, held[LX_MAX_VIRTUAL_STAGES] = {0};
  lx_chunk_pass *order = lx_malloc(sizeof *order * (size_t)n);
  lx_interleaved_order(pp, virtual_stages, s, micro_batches, order);
  for (int v = 0; v < virtual_stages; v++)
    most[v] = 0;
  for (int i = 0; i < n; i++) {
    int *h = &held[order[i].chunk];
    *h += order[i].backward ? -1 : 1;
    if (*h > most[order[i].chunk]) most[order[i].chunk] = *h;
  }
  free(order);
}

void lx_chunk_stashes(lx_schedule kind, int pp, int virtual_stages, int s, int micro_batches,
                      int *per_chunk) {
  if (kind == LX_SCHEDULE_INTERLEAVED) {
    interleaved_stash(pp, virtual_stages, s, micro_batches, per_chunk);
    return;
  }
  int held = kind == LX_SCHEDULE_GPIPE ? micro_batches : pp - s;
  per_chunk[0] = held < micro_batches ? held : micro_batches;
}

int lx_stashed_micro_batches(lx_schedule kind, int pp, int virtual_stages, int s, int micro_batches) {
  int per_chunk[LX_MAX_VIRTUAL_STAGES], most = 0;
  int chunks = kind == LX_SCHEDULE_INTERLEAVED ? virtual_stages : 1;
  lx_chunk_stashes(kind, pp, virtual_stages, s, micro_batches, per_chunk);
  for (int v = 0; v < chunks; v++)
    if (per_chunk[v] > most) most = per_chunk[v];
  return most;
}

int64_t lx_stashed_layers(const lx_stage *st) {
  int64_t n = 0;
  for (int v = 0; v < st->n_chunks; v++)
    n += (int64_t)st->chunk_slots[v] * st->chunks[v].n_layers;
  return n;
}

bool lx_defers_weight_grad(const lx_ir *ir, const lx_stage *st, lx_graph_id graph, int op) {
  if (st->weight_lag == 0 || graph != LX_GRAPH_BLOCK) return false;
  const lx_op *o = &ir->block.ops[op];
  /* in mini-sequences a piece's input exists only inside the backward; fine-tuning's
   * adapter gradients are small, and its frozen linears have none */
  return o->kind == LX_OP_LINEAR && o->chunks < 2 && !st->decisions[o->inputs[0]].drop_output &&
         !ir->finetune;
}

bool lx_backward_gathers(const lx_ir *ir, const lx_op *op, lx_kernel_part part) {
  /* a column-parallel op's is its input, for its weight's gradient */
  if (op->tp_role == LX_TP_COLUMN && !lx_matmul_reads_input(ir, op)) return false;
  return lx_tp_collectives_of(ir, op, true).gather_before &&
         !(part == LX_PART_INPUT && op->tp_role == LX_TP_COLUMN);
}

lx_kernel_part lx_instr_part(const lx_ir *ir, const lx_stage *st, const lx_instr *in) {
  if (in->kind == LX_I_BWD_WEIGHT) return LX_PART_WEIGHT;
  if (in->kind == LX_I_BWD && lx_defers_weight_grad(ir, st, in->graph, in->op)) return LX_PART_INPUT;
  return LX_PART_WHOLE;
}
