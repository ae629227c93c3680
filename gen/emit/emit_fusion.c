/* emit_fusion.c — the pairs of ops the CUDA printer issues as one call.
 *
 * Forward: a linear and the gelu of its output become one cuBLASLt matmul
 * with the GELU epilogue (the linear's output kept as its aux matrix), and a
 * residual add and the norm of its sum one pass over each row. Backward: the
 * gelu's input gradient is written by the next linear's input-gradient
 * matmul (DGELU epilogue) where the gelu output feeds that linear alone and
 * the gelu is its input's only consumer, so that gradient has no other term.
 *
 * Each fused call writes both ops' outputs where the first op stands in the
 * schedule, so a pair fuses only where every instance of it, in every stream,
 * runs back to back in one run (nothing can come between the two writes),
 * with no tensor-parallel collective between the ops, and, in the block, with
 * both ops kept or both recomputed: a recomputation repeats the forward call
 * for call, so its values are the forward's exactly (the GELU epilogue
 * rounds to bf16 after the gelu, the separate kernel before). Neither may be
 * token-split: its recomputation runs on some rows only. */
#include <stdlib.h>

#include "alloc.h"
#include "emit/emit_fusion.h"
#include "emit/emit_walk.h"

/* Instructions of an op not followed at once by their partner. */
enum { SPLIT_AFTER_FORWARD = 1, SPLIT_AFTER_BACKWARD = 2 };

static unsigned char *zeroed_flags(int n) {
  unsigned char *flags = lx_calloc((size_t)n + 1, 1);
  if (!flags) {
    fputs("lynxgen: out of memory\n", stderr);
    exit(1);
  }
  return flags;
}

bool emit_fused(const lx_printer *pr, lx_graph_id g, int i, int flags) {
  return pr->fusion[g] && i >= 0 && i < lx_graph_of(pr->ir, g)->n_ops && (pr->fusion[g][i] & flags);
}

bool emit_fusion_writes_gradient(const lx_printer *pr, lx_graph_id g, int p) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  int gelu = p + 1; /* a DGELU linear's gelu is the op before it, its input the op before that */
  return gelu < graph->n_ops && graph->ops[gelu].kind == LX_OP_GELU && graph->ops[gelu].inputs[0] == p &&
         emit_fused(pr, g, gelu + 1, LX_FUSE_DGELU);
}

/* The readers of op i's output: its uses, and the next graph where it is the output. */
static int consumers(const lx_graph *graph, int i) { return lx_uses(graph, i) + (graph->output == i); }

/* No tensor-parallel collective between op `first` and op `second`, which
 * runs right after it (in the forward or in the backward). */
static bool nothing_between(const lx_printer *pr, const lx_op *first, const lx_op *second, bool backward) {
  return !lx_tp_collectives_of(pr->ir, first, backward).reduce_after &&
         !lx_tp_collectives_of(pr->ir, second, backward).gather_before;
}

/* A width on this rank that cuBLASLt's aux matrix takes: its leading dimension a multiple of 8. */
static bool aux_width(const lx_printer *pr, const lx_op *gelu) { return emit_rank_width(pr, gelu->out) % 8 == 0; }

/* Op i + 1 of the graph, of one of the kinds, reading op i's output. */
static bool next_reads(const lx_graph *graph, int i, lx_op_kind kind, lx_op_kind other) {
  if (i + 1 >= graph->n_ops) return false;
  const lx_op *next = &graph->ops[i + 1];
  return (next->kind == kind || next->kind == other) && next->n_inputs > 0 && next->inputs[0] == i;
}

static int forward_fusion(const lx_printer *pr, const lx_graph *graph, int i) {
  const lx_op *op = &graph->ops[i], *next = i + 1 < graph->n_ops ? &graph->ops[i + 1] : NULL;
  /* a LoRA linear's adapter adds to the product: no epilogue of the base GEMM may follow it */
  if (op->kind == LX_OP_LINEAR && !op->lora_rank && next_reads(graph, i, LX_OP_GELU, LX_OP_GELU) &&
      aux_width(pr, next) && nothing_between(pr, op, next, false))
    return LX_FUSE_GELU;
  if (op->kind == LX_OP_ADD && next_reads(graph, i, LX_OP_LAYERNORM, LX_OP_RMSNORM) &&
      nothing_between(pr, op, next, false))
    return LX_FUSE_RESIDUAL_NORM;
  return 0;
}

static int backward_fusion(const lx_printer *pr, const lx_graph *graph, int i) {
  const lx_op *op = &graph->ops[i];
  if (op->kind != LX_OP_LINEAR || op->lora_rank || i == 0 || op->inputs[0] != i - 1) return 0;
  const lx_op *gelu = &graph->ops[i - 1];
  bool sole_terms = consumers(graph, i - 1) == 1 && consumers(graph, gelu->inputs[0]) == 1;
  return gelu->kind == LX_OP_GELU && aux_width(pr, gelu) && sole_terms && nothing_between(pr, op, gelu, true)
             ? LX_FUSE_DGELU
             : 0;
}

/* Marks every op one of whose FWD or RECOMPUTE instructions is not followed
 * at once, in the same run, by the next op of its instance (or, for BWD, by
 * the op before it). */
static void mark_split_pairs(const lx_stage *st, unsigned char *split[LX_GRAPH_COUNT]) {
  for (int k = 0; k < LX_STREAM_COUNT; k++) {
    const lx_instr_list *list = &st->streams[k];
    for (int at = 0; at < list->count; at++) {
      const lx_instr *in = &list->items[at], *next = at + 1 < list->count ? &list->items[at + 1] : NULL;
      bool backward = in->kind == LX_I_BWD;
      if (!backward && in->kind != LX_I_FWD && in->kind != LX_I_RECOMPUTE) continue;
      bool partner_next = next && lx_walk_same_run(next, in) && next->op == in->op + (backward ? -1 : 1);
      if (!partner_next) split[in->graph][in->op] |= backward ? SPLIT_AFTER_BACKWARD : SPLIT_AFTER_FORWARD;
    }
  }
}

void emit_plan_fusions(const lx_printer *pr, bool fuse, unsigned char *fusion[LX_GRAPH_COUNT]) {
  unsigned char *split[LX_GRAPH_COUNT];
  for (int g = 0; g < LX_GRAPH_COUNT; g++) {
    int n = lx_graph_of(pr->ir, (lx_graph_id)g)->n_ops;
    fusion[g] = zeroed_flags(n);
    split[g] = zeroed_flags(n);
  }
  mark_split_pairs(pr->st, split);
  for (int g = 0; g < LX_GRAPH_COUNT && fuse; g++) {
    const lx_graph *graph = lx_graph_of(pr->ir, (lx_graph_id)g);
    for (int i = 0; i < graph->n_ops; i++) {
      const lx_op_decision *d = g == LX_GRAPH_BLOCK && i + 1 < graph->n_ops ? &pr->st->decisions[i] : NULL;
      bool same_decision =
          !d || (d[0].recompute == d[1].recompute && !lx_token_split(&d[0]) && !lx_token_split(&d[1]));
      if (same_decision && !(split[g][i] & SPLIT_AFTER_FORWARD)) fusion[g][i] |= forward_fusion(pr, graph, i);
      if (!(split[g][i] & SPLIT_AFTER_BACKWARD)) fusion[g][i] |= backward_fusion(pr, graph, i);
    }
  }
  emit_free_fusions(split);
}

void emit_free_fusions(unsigned char *fusion[LX_GRAPH_COUNT]) {
  for (int g = 0; g < LX_GRAPH_COUNT; g++)
    free(fusion[g]);
}
