/* emit_graphs.c — a stage's graph functions (see emit_graphs.h). */
#include "emit/emit_graphs.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "emit/emit_fusion.h"
#include "verify/access.h"

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
    /* a chunk-local gradient is zeroed for each piece; one that its consumer or a fused call writes, never */
    if (i == graph->output || op->out.dtype == LX_DTYPE_INT32 || op->out.scalar || lx_chunk_local(graph, i) ||
        lx_gradient_written_by_consumer(pr->ir, graph, i) || emit_fusion_writes_gradient(pr, g, i))
      continue;
    lx_place_expr e = lx_place_of(pr->p, pr->s, pr->l, emit_ref(pr, g, i, LX_T_GRAD, 0));
    emit_at(pr, buf, sizeof buf, emit_ref(pr, g, i, LX_T_GRAD, 0));
    fprintf(pr->out, zero_format, buf, (long long)e.bytes);
  }
}

/* ---- the ops of a run, mini-sequences as one loop over the pieces ---------------- */

/* The run's ops in its order: forward order, a backward's reversed. */
typedef struct {
  lx_graph_id g;
  const int *ops;
  int n;
  lx_instr_kind kind;
  bool with_collectives; /* a graph function's body: each op's collectives complete around it */
} op_run;

static bool is_backward(lx_instr_kind k) { return k == LX_I_BWD || k == LX_I_BWD_WEIGHT; }

/* Sequence parallelism: the whole input gradient a column-parallel backward
 * adds into (reduce-scattered after it) starts at zero. */
static void zero_whole_gradient(const lx_printer *pr, const lx_graph_printer *gp, lx_graph_id g, int i) {
  char buf[PTR];
  long long bytes;
  if (!pr->weight_pass && emit_whole_gradient(pr, g, i, buf, &bytes))
    fprintf(pr->out, gp->zero_format, buf, bytes);
}

/* Prints text (what a nested printer wrote, freed here) one level deeper, and
 * closes the block it is in. */
static void close_block(const lx_printer *pr, char *text) {
  for (char *line = text, *end; *line; line = end + 1) {
    end = strchr(line, '\n');
    fprintf(pr->out, "  %.*s\n", (int)(end - line), line);
  }
  free(text);
  fputs("  }\n", pr->out);
}

/* A token-split op's recomputation: its rows from lx_token_hosted(d, BT) on;
 * the others come back from host memory (PREFETCH). */
static void print_recomputed_rows(const lx_printer *pr, const lx_graph_printer *gp, lx_graph_id g, int i) {
  const lx_op *op = &lx_graph_of(pr->ir, g)->ops[i];
  const lx_op_decision *d = &pr->st->decisions[i];
  fprintf(
      pr->out,
      "  { /* token-wise (MEMO): rows [0, %d BT / %d) of %s came back from host memory; the rest again */\n"
      "    const size_t first_row = (size_t)%d * (BT / %d);\n"
      "    const int piece_rows = BT - (int)first_row;\n",
      d->host_pieces, LX_TOKEN_PIECES, op->var[0] ? op->var : op->name, d->host_pieces, LX_TOKEN_PIECES);
  char *text = NULL;
  size_t size = 0;
  lx_printer rows = *pr;
  rows.out = lx_memory_stream(&text, &size);
  rows.rows_op = op;
  gp->forward_op(&rows, g, i, LX_T_RECOMPUTED);
  fclose(rows.out);
  close_block(pr, text);
}

static void print_op(const lx_printer *pr, const lx_graph_printer *gp, const op_run *r, int i) {
  bool backward = is_backward(r->kind);
  if (r->kind == LX_I_RECOMPUTE && r->g == LX_GRAPH_BLOCK && lx_token_split(&pr->st->decisions[i])) {
    print_recomputed_rows(pr, gp, r->g, i); /* no collective: lx_token_splittable */
    return;
  }
  lx_tensor_role role = r->kind == LX_I_RECOMPUTE ? LX_T_RECOMPUTED : LX_T_OUTPUT;
  if (r->with_collectives) gp->collective(pr, r->g, i, backward, role, true);
  if (backward && !pr->in_pieces) zero_whole_gradient(pr, gp, r->g, i); /* pieces: once, before them */
  if (backward)
    gp->backward_op(pr, r->g, i);
  else
    gp->forward_op(pr, r->g, i, role);
  if (r->with_collectives && r->kind != LX_I_BWD_WEIGHT) /* a W pass makes no input gradient */
    gp->collective(pr, r->g, i, backward, role, false);
}

/* A backward's piece starts from zeroed gradients of the chunk-local
 * tensors, and each op first makes again the pieces it reads that the ops
 * before it did not (lx_made_again, what its access list says). */
static void print_piece_body(const lx_printer *pr, const lx_graph_printer *gp, const op_run *r, int from,
                             int to) {
  const lx_graph *graph = lx_graph_of(pr->ir, r->g);
  bool backward = is_backward(r->kind);
  for (int k = from; backward && k < to; k++)
    if (lx_chunk_local(graph, r->ops[k])) {
      char buf[PTR];
      emit_at(pr, buf, sizeof buf, emit_ref(pr, r->g, r->ops[k], LX_T_GRAD, 0));
      fprintf(pr->out, gp->zero_format, buf, (long long)lx_resident_bytes(graph, r->ops[k]));
    }
  int *made = lx_malloc(sizeof *made * (size_t)graph->n_ops);
  for (int k = from; k < to; k++) {
    for (int j = 0, n = backward ? lx_made_again(graph, r->ops[k], made) : 0; j < n; j++) {
      const lx_op *op = &graph->ops[made[j]];
      fprintf(pr->out, "  /* the piece's %s again, for the backward: */\n", op->var[0] ? op->var : op->name);
      gp->forward_op(pr, r->g, made[j], LX_T_OUTPUT);
    }
    print_op(pr, gp, r, r->ops[k]);
  }
  free(made);
}

/* Ops [from, to) of the run run in mini-sequences: one loop over the pieces,
 * each a run of the ops on its rows (emit_operands.c offsets the operands
 * that are whole tensors; the chunk-local ones hold one piece). The
 * collectives around them complete outside the loop. */
static void print_pieces(const lx_printer *pr, const lx_graph_printer *gp, const op_run *r, int from,
                         int to) {
  const lx_graph *graph = lx_graph_of(pr->ir, r->g);
  int m = graph->ops[r->ops[from]].chunks;
  lx_tensor_role role = r->kind == LX_I_RECOMPUTE ? LX_T_RECOMPUTED : LX_T_OUTPUT;
  op_run inner = *r;
  inner.with_collectives = false;
  for (int k = from; r->with_collectives && k < to; k++)
    gp->collective(pr, r->g, r->ops[k], is_backward(r->kind), role, true);
  for (int k = from; is_backward(r->kind) && k < to; k++)
    zero_whole_gradient(pr, gp, r->g, r->ops[k]);
  fprintf(pr->out, "  /* mini-sequences (MsT): %d pieces of BT / %d rows;", m, m);
  for (int k = from, n = 0; k < to; k++)
    if (lx_chunk_local(graph, r->ops[k])) {
      const lx_op *op = &graph->ops[r->ops[k]];
      fprintf(pr->out, "%s %s", n++ ? "," : "", op->var[0] ? op->var : op->name);
    }
  fputs(" never whole */\n", pr->out);
  fprintf(pr->out, "  for (int piece = 0; piece < %d; piece++) {\n", m);
  fprintf(pr->out,
          "    const int piece_rows = BT / %d;\n    const size_t first_row = (size_t)piece * piece_rows;\n",
          m);
  char *text = NULL;
  size_t size = 0;
  lx_printer piece = *pr;
  piece.out = lx_memory_stream(&text, &size);
  piece.in_pieces = true;
  print_piece_body(&piece, gp, &inner, from, to);
  fclose(piece.out);
  close_block(pr, text);
  for (int k = from; r->with_collectives && r->kind != LX_I_BWD_WEIGHT && k < to; k++)
    gp->collective(pr, r->g, r->ops[k], is_backward(r->kind), role, false);
}

static void print_run(const lx_printer *pr, const lx_graph_printer *gp, const op_run *r) {
  const lx_graph *graph = lx_graph_of(pr->ir, r->g);
  for (int k = 0, end; k < r->n; k = end) {
    end = k + 1;
    if (graph->ops[r->ops[k]].chunks < 2) {
      print_op(pr, gp, r, r->ops[k]);
      continue;
    }
    while (end < r->n && graph->ops[r->ops[end]].chunks > 1)
      end++;
    print_pieces(pr, gp, r, k, end);
  }
}

void emit_partial_run(const lx_printer *pr, const lx_graph_printer *gp, const lx_instr *run, int count) {
  if (run->kind == LX_I_BWD && lx_starts_instance_backward(lx_graph_of(pr->ir, run->graph), run->op))
    emit_zero_grads(pr, run->graph, gp->zero_format);
  int *ops = lx_malloc(sizeof *ops * (size_t)count);
  for (int n = 0; n < count; n++)
    ops[n] = run[n].op;
  lx_printer weights = *pr;
  weights.weight_pass = run->kind == LX_I_BWD_WEIGHT;
  if (run->pieces) { /* lx_walk_same_run: alone in its run */
    weights.head_pieces = run;
    fprintf(pr->out,
            "  /* pieces [%d, %d) of %d of its kv heads; the others run in other windows or on demand */\n",
            run->piece_first, run->piece_end, run->pieces);
  }
  print_run(&weights, gp, &(op_run){run->graph, ops, count, run->kind, false});
  free(ops);
}

/* ---- graph functions ------------------------------------------------------------------ */

/* The function of graph g for `kind`: the ops `in_body` takes, in the order they run. */
static void print_function_body(const lx_printer *pr, const lx_graph_printer *gp, lx_graph_id g,
                                lx_instr_kind kind,
                                bool (*in_body)(const lx_printer *pr, lx_graph_id g, int i)) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  int *ops = lx_malloc(sizeof *ops * (size_t)graph->n_ops), n = 0;
  for (int j = 0; j < graph->n_ops; j++) {
    int i = is_backward(kind) ? graph->n_ops - 1 - j : j;
    if (graph->ops[i].kind != LX_OP_INPUT && in_body(pr, g, i)) ops[n++] = i;
  }
  print_run(pr, gp, &(op_run){g, ops, n, kind, true});
  free(ops);
  fputs("}\n", pr->out);
}

static bool every_op(const lx_printer *pr, lx_graph_id g, int i) { return (void)pr, (void)g, (void)i, true; }
static bool recomputed(const lx_printer *pr, lx_graph_id g, int i) {
  return (void)g, pr->st->decisions[i].recompute;
}
static bool weight_deferred(const lx_printer *pr, lx_graph_id g, int i) {
  return lx_defers_weight_grad(pr->ir, pr->st, g, i);
}

/* Always printed: the step and the forward-only pass call it. */
static void print_forward_function(const lx_printer *pr, const lx_graph_printer *gp, lx_graph_id g) {
  print_head(pr, "forward", g);
  print_function_body(pr, gp, g, LX_I_FWD, every_op);
}

/* On demand, before the layer's backward: what the policy dropped comes back. */
static void print_recompute_function(const lx_printer *pr, const lx_graph_printer *gp) {
  if (!emit_function_called(pr, LX_I_RECOMPUTE, LX_GRAPH_BLOCK)) return;
  print_head(pr, "recompute", LX_GRAPH_BLOCK);
  /* what it reads may all be in the window buffers (offloaded and prefetched), which the layer alone places */
  fputs("  (void)mb;\n", pr->out);
  print_function_body(pr, gp, LX_GRAPH_BLOCK, LX_I_RECOMPUTE, recomputed);
}

static void print_backward_function(const lx_printer *pr, const lx_graph_printer *gp, lx_graph_id g) {
  if (!emit_function_called(pr, LX_I_BWD, g)) return;
  print_head(pr, "backward", g);
  emit_zero_grads(pr, g, gp->zero_format);
  print_function_body(pr, gp, g, LX_I_BWD, every_op);
}

/* Zero bubble's W pass of a layer: the parameter gradients its backward left
 * out, from the inputs and output gradients kept in the stash region's held
 * and weight-gradient pools. */
static void print_weights_function(const lx_printer *pr, const lx_graph_printer *gp) {
  if (!emit_function_called(pr, LX_I_BWD_WEIGHT, LX_GRAPH_BLOCK)) return;
  lx_printer weights = *pr;
  weights.weight_pass = true;
  print_head(pr, "weights", LX_GRAPH_BLOCK);
  print_function_body(&weights, gp, LX_GRAPH_BLOCK, LX_I_BWD_WEIGHT, weight_deferred);
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
