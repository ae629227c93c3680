/* input_gradients.c — which activation gradients their one contribution
 * writes instead of adding to a zeroed buffer (passes.h). A gradient buffer
 * is zeroed at the start of its graph instance's backward and each consumer's
 * backward adds its part; where a single backward kernel makes the whole
 * gradient and can write it (op_signature.h's din_writes: a GEMM with beta 0,
 * the loss, attention, the element-wise ops and the add), the zeroing and the
 * read of the zeros go. Both printers and the verifier ask these two functions. */
#include "op_signature.h"
#include "planning/passes.h"

bool lx_writes_input_gradient(const lx_ir *ir, const lx_graph *g, int i, int k) {
  const lx_op *op = &g->ops[i];
  if (!lx_op_signature_of(op)->din_writes || k >= op->n_inputs || op->chunks > 1) return false;
  int p = op->inputs[k];
  const lx_op *producer = &g->ops[p];
  /* the graph's output gradient comes from the next graph; a piece's is zeroed per piece */
  if (p == g->output || producer->out.dtype == LX_DTYPE_INT32 || producer->out.scalar || lx_chunk_local(g, p))
    return false;
  /* sequence parallelism: the kernel adds into the whole buffer, reduce-scattered into p's gradient after */
  lx_tp_collectives c = lx_tp_collectives_of(ir, op, true);
  if (c.reduce_after && c.reduce == LX_COLL_REDUCE_SCATTER) return false;
  return lx_uses(g, p) == 1;
}

bool lx_gradient_written_by_consumer(const lx_ir *ir, const lx_graph *g, int p) {
  for (int i = 0; i < g->n_ops; i++)
    for (int k = 0; k < g->ops[i].n_inputs; k++)
      if (g->ops[i].inputs[k] == p) return lx_writes_input_gradient(ir, g, i, k);
  return false;
}
