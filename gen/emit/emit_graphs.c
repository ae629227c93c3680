/* emit_graphs.c — a stage's graph functions (see emit_graphs.h). */
#include "emit/emit_graphs.h"

/* "static void forward_block(const lx_ctx *ctx, int layer, int mb) {": `what`
 * is forward, recompute, backward or weights; outside the block, layer is the stage's
 * first (an accessor of the prologue or epilogue may name it). */
static void print_head(const lx_printer *pr, const char *what, lx_graph_id g) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  char file[LX_TEXT_MAX];
  fprintf(pr->out,
          "\n/* %s of %s() (%s:%d) for one micro-batch. */\nstatic void %s_%s(const lx_ctx *ctx, %s) {\n",
          what, graph->name, emit_file_name(graph->src.file, file), graph->src.line, what, graph->name,
          g == LX_GRAPH_BLOCK ? "int layer, int mb" : "int mb");
  if (g != LX_GRAPH_BLOCK) fputs("  const int layer = FIRST_LAYER;\n  (void)layer;\n", pr->out);
}

void emit_zero_grads(const lx_printer *pr, lx_graph_id g, const char *zero_format) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  char buf[PTR];
  for (int i = 0; i < graph->n_ops; i++) {
    const lx_op *op = &graph->ops[i];
    if (i == graph->output || op->out.dtype == LX_DTYPE_INT32 || op->out.scalar) continue;
    lx_place_expr e = lx_place_of(pr->p, pr->s, pr->l, emit_ref(pr, g, i, LX_T_GRAD, 0));
    emit_at(pr, buf, sizeof buf, emit_ref(pr, g, i, LX_T_GRAD, 0));
    fprintf(pr->out, zero_format, buf, (long long)e.bytes);
  }
}

/* Always printed: the step and the forward-only pass call it. */
static void print_forward_function(const lx_printer *pr, const lx_graph_printer *gp, lx_graph_id g) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  print_head(pr, "forward", g);
  for (int i = 0; i < graph->n_ops; i++)
    if (graph->ops[i].kind != LX_OP_INPUT) {
      gp->collective(pr, g, i, false, LX_T_OUTPUT, true);
      gp->forward_op(pr, g, i, LX_T_OUTPUT);
      gp->collective(pr, g, i, false, LX_T_OUTPUT, false);
    }
  fputs("}\n", pr->out);
}

/* On demand, before the layer's backward: what the policy dropped comes back. */
static void print_recompute_function(const lx_printer *pr, const lx_graph_printer *gp) {
  if (!emit_function_called(pr, LX_I_RECOMPUTE, LX_GRAPH_BLOCK)) return;
  print_head(pr, "recompute", LX_GRAPH_BLOCK);
  for (int i = 0; i < pr->ir->block.n_ops; i++)
    if (pr->st->decisions[i].recompute) {
      gp->collective(pr, LX_GRAPH_BLOCK, i, false, LX_T_RECOMPUTED, true);
      gp->forward_op(pr, LX_GRAPH_BLOCK, i, LX_T_RECOMPUTED);
      gp->collective(pr, LX_GRAPH_BLOCK, i, false, LX_T_RECOMPUTED, false);
    }
  fputs("}\n", pr->out);
}

static void print_backward_function(const lx_printer *pr, const lx_graph_printer *gp, lx_graph_id g) {
  if (!emit_function_called(pr, LX_I_BWD, g)) return;
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  print_head(pr, "backward", g);
  emit_zero_grads(pr, g, gp->zero_format);
  for (int i = graph->n_ops - 1; i >= 0; i--)
    if (graph->ops[i].kind != LX_OP_INPUT) {
      gp->collective(pr, g, i, true, LX_T_OUTPUT, true);
      gp->backward_op(pr, g, i);
      gp->collective(pr, g, i, true, LX_T_OUTPUT, false);
    }
  fputs("}\n", pr->out);
}

/* Zero bubble's W pass of a layer: the parameter gradients its backward left
 * out, from the inputs and output gradients kept in the stash region's held
 * and weight-gradient pools. */
static void print_weights_function(const lx_printer *pr, const lx_graph_printer *gp) {
  if (!emit_function_called(pr, LX_I_BWD_WEIGHT, LX_GRAPH_BLOCK)) return;
  lx_printer weights = *pr;
  weights.weight_pass = true;
  print_head(pr, "weights", LX_GRAPH_BLOCK);
  for (int i = pr->ir->block.n_ops - 1; i >= 0; i--)
    if (lx_defers_weight_grad(pr->ir, pr->st, LX_GRAPH_BLOCK, i)) {
      gp->collective(&weights, LX_GRAPH_BLOCK, i, true, LX_T_OUTPUT, true);
      gp->backward_op(&weights, LX_GRAPH_BLOCK, i);
    }
  fputs("}\n", pr->out);
}

void emit_graph_functions(const lx_printer *pr, const lx_graph_printer *gp) {
  if (pr->st->has_prologue) {
    print_forward_function(pr, gp, LX_GRAPH_PROLOGUE);
    print_backward_function(pr, gp, LX_GRAPH_PROLOGUE);
  }
  if (pr->st->n_layers > 0) {
    print_forward_function(pr, gp, LX_GRAPH_BLOCK);
    print_recompute_function(pr, gp);
    print_backward_function(pr, gp, LX_GRAPH_BLOCK);
    print_weights_function(pr, gp);
  }
  if (pr->st->has_epilogue) {
    print_forward_function(pr, gp, LX_GRAPH_EPILOGUE);
    print_backward_function(pr, gp, LX_GRAPH_EPILOGUE);
  }
}
