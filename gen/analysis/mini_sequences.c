/* mini_sequences.c — which ops run in mini-sequences (see mini_sequences.h).
 *
 * The LM head and the cross-entropy that alone reads its logits run over the
 * rows in M consecutive pieces: the forward makes one piece's logits, adds
 * its loss and keeps its rows' log-sum-exp; the backward makes the piece's
 * logits again and takes its gradients at once. So the (rows, vocabulary)
 * logits and their gradient exist one piece at a time, for one more LM head
 * forward (MsT, Luo et al. 2024, section 3). Token-wise math makes any cut
 * exact: every row of the logits depends on its own row of the input alone. */
#include "analysis/mini_sequences.h"

#include "diag.h"

/* The LM head that only op `loss` reads, or -1. */
static int lone_lm_head(const lx_graph *g, int loss) {
  int head = g->ops[loss].inputs[0];
  if (g->ops[head].kind != LX_OP_LM_HEAD) return -1;
  for (int c = 0; c < g->n_ops; c++)
    for (int k = 0; c != loss && k < g->ops[c].n_inputs; k++)
      if (g->ops[c].inputs[k] == head) return -1;
  return head;
}

void lx_mark_mini_sequences(const lx_ir *ir, lx_graph *g) {
  int m = ir->plan.mini_sequences;
  bool found = false;
  for (int i = 0; i < g->n_ops; i++)
    g->ops[i].chunks = 1;
  if (m < 2) return;
  for (int i = 0; i < g->n_ops; i++) {
    int head = g->ops[i].kind == LX_OP_CROSS_ENTROPY ? lone_lm_head(g, i) : -1;
    if (head < 0) continue;
    g->ops[i].chunks = g->ops[head].chunks = m;
    found = true;
  }
  lx_srcloc at =
      ir->locs.field[LX_F_MINI_SEQUENCES].file ? ir->locs.field[LX_F_MINI_SEQUENCES] : ir->locs.plan;
  if (g == &ir->epilogue && !found)
    lx_error(at,
             "mini_sequences (%d) cuts the LM head and its loss into pieces, but epilogue() has no lm_head() "
             "read by cross_entropy() alone",
             m);
  if (found && ir->model.seq_len % m)
    lx_error(at, "mini_sequences (%d) does not divide seq_len (%d)", m, ir->model.seq_len);
}
