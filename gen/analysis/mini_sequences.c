/* mini_sequences.c — which ops run in mini-sequences (see mini_sequences.h).
 *
 * MsT (Luo et al. 2024, section 3) runs two parts of a transformer over the
 * rows in M consecutive pieces: the LM head with the cross-entropy that alone
 * reads its logits, and each MLP (a linear, the element-wise activation that
 * alone reads it, the linear that alone reads that). Their forward makes one
 * piece of the intermediates (the logits, the MLP's 4h-wide hidden) at a
 * time; their backward makes each piece again and takes its gradients at
 * once. So those tensors and their gradients exist one piece at a time, for
 * one more forward of the ops that make them. Token-wise math makes any cut
 * exact: every row depends on its own row of the input alone. */
#include "analysis/mini_sequences.h"

#include "diag.h"
#include "op_signature.h"

/* Whether op `reader` is the only op that reads op `producer`. */
static bool only_reader(const lx_graph *g, int producer, int reader) {
  for (int c = 0; c < g->n_ops; c++)
    for (int k = 0; k < g->ops[c].n_inputs; k++)
      if (g->ops[c].inputs[k] == producer && c != reader) return false;
  return true;
}

/* Whether op i reads op i - 1 alone, its only reader: the next link of a
 * chain written in one expression. */
static bool reads_previous(const lx_graph *g, int i) {
  return i > 0 && g->ops[i].inputs[0] == i - 1 && only_reader(g, i - 1, i);
}

static bool activation(const lx_op *op) {
  return op->kind == LX_OP_SWIGLU || lx_op_signature_of(op)->elementwise.is;
}

/* A linear of an MLP in pieces; one with a LoRA adapter runs whole. */
static bool plain_linear(const lx_op *op) { return op->kind == LX_OP_LINEAR && !op->lora_rank; }

/* The norm in front of a chain's first op, read by it alone, joins the chain
 * (its output, the matmul's input, is then never whole either) without
 * tensor parallelism: with it, the column-parallel matmul's input gradient
 * is a partial sum until the all-reduce after the run, which the norm's
 * backward must not read before. */
static int with_norm(const lx_ir *ir, const lx_graph *g, int first) {
  const lx_op *norm = first > 0 ? &g->ops[first - 1] : NULL;
  bool is_norm = norm && (norm->kind == LX_OP_LAYERNORM || norm->kind == LX_OP_RMSNORM);
  return is_norm && reads_previous(g, first) && ir->plan.tp == 1 ? first - 1 : first;
}

/* The first op of the chain of kinds that ends at op `last`, or -1: the LM
 * head and its loss, or linear -> activation -> linear, each with the norm in front. */
static int chain_start(const lx_ir *ir, const lx_graph *g, int last) {
  const lx_op *op = &g->ops[last];
  if (op->kind == LX_OP_CROSS_ENTROPY && reads_previous(g, last) && g->ops[last - 1].kind == LX_OP_LM_HEAD)
    return with_norm(ir, g, last - 1);
  if (plain_linear(op) && reads_previous(g, last) && activation(&g->ops[last - 1]) &&
      reads_previous(g, last - 1) && plain_linear(&g->ops[last - 2]))
    return with_norm(ir, g, last - 2);
  return -1;
}

void lx_mark_mini_sequences(const lx_ir *ir, lx_graph *g) {
  int m = ir->plan.mini_sequences;
  bool head = false;
  for (int i = 0; i < g->n_ops; i++)
    g->ops[i].chunks = 1;
  if (m < 2) return;
  for (int i = 0; i < g->n_ops; i++) {
    int first = chain_start(ir, g, i);
    if (first < 0 || g->ops[first].chunks > 1) continue;
    for (int j = first; j <= i; j++)
      g->ops[j].chunks = m;
    head |= g->ops[i].kind == LX_OP_CROSS_ENTROPY;
  }
  lx_srcloc at =
      ir->locs.field[LX_F_MINI_SEQUENCES].file ? ir->locs.field[LX_F_MINI_SEQUENCES] : ir->locs.plan;
  if (g == &ir->epilogue && !head)
    lx_error(at,
             "mini_sequences (%d) cuts the LM head and its loss into pieces, but epilogue() has no lm_head() "
             "read by cross_entropy() alone, in one expression",
             m);
  if (g == &ir->epilogue && ir->model.seq_len % m) /* once: every graph's pieces cut the same rows */
    lx_error(at, "mini_sequences (%d) does not divide seq_len (%d)", m, ir->model.seq_len);
}
