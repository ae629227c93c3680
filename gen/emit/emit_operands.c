/* emit_operands.c — what both printers say the same way: where a tensor of
 * an instruction lives (C text from the static memory plan), the operands of
 * one op, its shapes, the parameter table and the training settings. The
 * targets differ only in the element types they name (lx_printer). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "emit/emit_formats.h"
#include "emit/emit_names.h"
#include "emit/emit_operands.h"
#include "emit/emit_walk.h"
#include "escape.h"

/* ---- expressions ----------------------------------------------------------- */

lx_printer emit_printer(const lx_program *prog, int s, FILE *out, const char *act_type,
                        const char *lse_type) {
  const lx_pipeline *p = prog->pipe;
  return (lx_printer){.out = out,
                      .p = p,
                      .ir = p->ir,
                      .s = s,
                      .st = &p->stages[s],
                      .l = &prog->layouts[s],
                      .act_type = act_type,
                      .lse_type = lse_type,
                      .reroll = !prog->unrolled,
                      .predicted_step_s = prog->predicted_step_s};
}

lx_tensor_ref emit_ref(const lx_printer *pr, lx_graph_id g, int op, lx_tensor_role role, int index) {
  return (lx_tensor_ref){g, g == LX_GRAPH_BLOCK ? pr->st->chunks[0].first_layer : -1, op, 0, role, index};
}

/* Three places of a block depend on whether the layer is the stage's first
 * or last, not affinely on the layer: its output (the next layer's input, or
 * what leaves the stage), that output's gradient, and its input's gradient.
 * The stage file computes them in small functions (emit_block_boundaries). */
static const char *emit_boundary_function(const lx_printer *pr, lx_tensor_ref t) {
  if (t.graph != LX_GRAPH_BLOCK) return NULL;
  const lx_graph *g = &pr->ir->block;
  if (t.role == LX_T_OUTPUT && t.op == g->output) return "layer_output";
  if (t.role == LX_T_GRAD && t.op == g->output) return "layer_output_grad";
  if (t.role == LX_T_GRAD && g->ops[t.op].kind == LX_OP_INPUT) return "layer_input_grad";
  return NULL;
}

const char *emit_at(const lx_printer *pr, char *buf, size_t size, lx_tensor_ref t) {
  const char *function = emit_boundary_function(pr, t);
  if (function) {
    snprintf(buf, size, "%s(layer, mb)", function);
    return buf;
  }
  return emit_tensor_call(pr, t, buf, size);
}

/* Layer `layer` of the stage in a printed condition: by name where the
 * stage's layers are consecutive. */
static void layer_name(const lx_stage *st, int layer, char *buf, size_t size) {
  int first = st->chunks[0].first_layer, last = first + st->n_layers - 1;
  if (st->n_chunks == 1 && layer == first)
    snprintf(buf, size, "FIRST_LAYER");
  else if (st->n_chunks == 1 && layer == last)
    snprintf(buf, size, "FIRST_LAYER + LAYERS - 1");
  else
    snprintf(buf, size, "%d", layer);
}

/* The place as one layer sees it; layers whose places print alike share
 * one expression. The function returns each group's under a condition on
 * the layer, and the group of `common` (the stage's first layer for what
 * leaves a layer, its last for what enters one) unconditionally. */
static void print_boundary_function(const lx_printer *pr, const char *name, const char *what,
                                    lx_tensor_role role, int op, bool at_first) {
  const lx_stage *st = pr->st;
  int n = st->n_layers, common = at_first ? n - 1 : 0;
  lx_place_expr *places = lx_malloc(sizeof *places * (size_t)n);
  bool uses_mb = false, uses_layer = false;
  for (int k = 0; k < n; k++) {
    places[k] = lx_place_of(pr->p, pr->s, pr->l,
                            (lx_tensor_ref){LX_GRAPH_BLOCK, lx_slot_layer(st, k), op, 0, role, 0});
    uses_mb |= places[k].per_slot != 0;
    uses_layer |= places[k].per_layer || places[k].parity_stride || places[k].per_chunk;
  }
  for (int k = 0; k < n; k++) /* a condition on the layer */
    uses_layer |= !emit_same_place(&places[k], &places[common]);
  char file[LX_TEXT_MAX], text[256], layer[32];
  fprintf(pr->out, "/* (BOUNDARY_ELEMENTS): %s  %s:%d */\nstatic %s *%s(int layer, int mb) {\n%s%s", what,
          emit_file_name(pr->ir->model_path, file), pr->ir->block.src.line, pr->act_type, name,
          uses_layer ? "" : "  (void)layer;\n", uses_mb ? "" : "  (void)mb;\n");
  for (int k = 0; k < n; k++) {
    bool printed = emit_same_place(&places[k], &places[common]);
    for (int j = 0; j < k; j++)
      printed |= emit_same_place(&places[j], &places[k]);
    if (printed) continue; /* the common group, or one already printed */
    fputs("  if (", pr->out);
    for (int j = k, sep = 0; j < n; j++)
      if (emit_same_place(&places[j], &places[k])) {
        layer_name(st, lx_slot_layer(st, j), layer, sizeof layer);
        fprintf(pr->out, "%slayer == %s", sep++ ? " || " : "", layer);
      }
    emit_place_address(pr, &places[k], text, sizeof text);
    fprintf(pr->out, ") return (%s *)%s;\n", pr->act_type, text);
  }
  emit_place_address(pr, &places[common], text, sizeof text);
  fprintf(pr->out, "  return (%s *)%s;\n}\n", pr->act_type, text);
  free(places);
}

void emit_block_boundaries(const lx_printer *pr) {
  if (pr->st->n_layers == 0) return;
  int output = pr->ir->block.output;
  fprintf(pr->out, "\n/* A layer's output is the next layer's input, or leaves the stage after its\n"
                   " * last layer; gradients at the stage's edges come from and go to the\n"
                   " * pipeline's buffers, between layers they alternate in the boundary region. */\n");
  print_boundary_function(pr, "layer_output",
                          "block()'s output, the next layer's input or what leaves the stage", LX_T_OUTPUT,
                          output, false);
  print_boundary_function(pr, "layer_output_grad", "d block()'s output", LX_T_GRAD, output, false);
  print_boundary_function(pr, "layer_input_grad", "d block()'s input", LX_T_GRAD, 0, true);
}

const lx_op *emit_op_at(const lx_printer *pr, lx_graph_id g, int i) {
  return &lx_graph_of(pr->ir, g)->ops[i];
}

/* The instruction a printed call of op i stands for: the instance the C
 * variables `layer` and `mb` name where the text is used. */
static lx_instr printed_instr(const lx_printer *pr, lx_graph_id g, int i, lx_tensor_role out_role,
                              bool backward) {
  lx_instr_kind kind = !backward         ? (out_role == LX_T_RECOMPUTED ? LX_I_RECOMPUTE : LX_I_FWD)
                       : pr->weight_pass ? LX_I_BWD_WEIGHT
                                         : LX_I_BWD;
  return (lx_instr){
      .kind = kind, .graph = g, .layer = g == LX_GRAPH_BLOCK ? pr->st->chunks[0].first_layer : -1, .op = i};
}

/* Inside a loop over mini-sequences, the elements per row of an operand of
 * a chunked op that is a whole tensor (an input, a gradient, the loss's
 * per-row log-sum-exp): its pointer moves to the piece's first row. 0 for
 * parameters and for the chunk-local tensors, which hold the piece alone. */
static int64_t piece_row_elements(const lx_printer *pr, lx_graph_id g, int i, const lx_operand *o,
                                  const lx_access *a) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  const lx_op *op = &graph->ops[i];
  if (!emit_in_piece(pr, op) || a->target != LX_TARGET_TENSOR) return 0;
  if ((a->tensor.role == LX_T_OUTPUT || a->tensor.role == LX_T_GRAD) && lx_chunk_local(graph, a->tensor.op))
    return 0;
  switch (o->kind) {
  case LX_OPND_IN:
  case LX_OPND_DIN: return lx_rank_width(pr->ir, graph->ops[op->inputs[o->index]].out);
  case LX_OPND_OUT:
  case LX_OPND_DOUT: return lx_rank_width(pr->ir, op->out);
  case LX_OPND_SAVED: /* fp32 per row: the log-sum-exp */
    return op->saved[a->tensor.index].bytes / ((int64_t)pr->ir->plan.micro_batch * pr->ir->model.seq_len * 4);
  default: return 0;
  }
}

/* The tensor verified for the operand (access.c), as C text; "NULL" where
 * the op lacks it, or the part of the kernel the instruction runs does not
 * use it. */
static void operand_text(const lx_printer *pr, lx_graph_id g, int i, lx_tensor_role out_role, bool backward,
                         const lx_operand *o, char *buf, size_t size) {
  lx_instr in = printed_instr(pr, g, i, out_role, backward);
  lx_access a;
  if (!lx_operand_in_part(o->kind, lx_instr_part(pr->ir, pr->st, &in)) ||
      !lx_operand_access(pr->p, pr->s, pr->l, &in, o, &a)) {
    snprintf(buf, size, "NULL");
    return;
  }
  char at[PTR];
  emit_at(pr, at, sizeof at, a.tensor);
  int n = snprintf(buf, size, a.target == LX_TARGET_PARAM_GRAD ? "GRAD_OF(%s)" : "%s", at);
  int64_t row = piece_row_elements(pr, g, i, o, &a);
  if (row > 0 && n > 0 && (size_t)n < size) {
    char offset[48];
    snprintf(offset, sizeof offset, row > 1 ? " + first_row * %lld" : " + first_row", (long long)row);
    snprintf(buf + n, size - (size_t)n, "%s", offset);
  }
}

/* A row-parallel output is a sum over the ranks: one of them adds the bias. */
static bool bias_on_rank_zero(const lx_printer *pr, const lx_op *op, const lx_operand *o, bool backward) {
  return o->kind == LX_OPND_BIAS && !backward && emit_tp(pr) > 1 && op->tp_role == LX_TP_ROW;
}

/* The pointer arguments of op i's forward or backward kernel in the order of
 * its row of the operand table (op_signature.h), comma-separated. A
 * row-parallel linear's bias is added by tensor-parallel rank 0 only. */
static void kernel_operands(const lx_printer *pr, lx_graph_id g, int i, lx_tensor_role out_role,
                            bool backward, char *buf, size_t size, bool *writes) {
  const lx_op *op = emit_op_at(pr, g, i);
  size_t used = 0;
  buf[0] = 0;
  *writes = false;
  for (const lx_operand *o = lx_op_operands(op, backward); o->kind != LX_OPND_END; o++) {
    char text[PTR + 32], shown[PTR + 64];
    operand_text(pr, g, i, out_role, backward, o, text, sizeof text);
    *writes |= lx_operand_mode(o->kind, backward) != LX_ACCESS_READ && strcmp(text, "NULL");
    if (bias_on_rank_zero(pr, op, o, backward) && strcmp(text, "NULL"))
      snprintf(shown, sizeof shown, "TP_RANK == 0 ? %s : NULL", text);
    else
      snprintf(shown, sizeof shown, "%s", text);
    used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", shown);
    if (used >= size) return;
  }
}

void emit_kernel_call(const lx_printer *pr, lx_graph_id g, int i, lx_tensor_role out_role, bool backward,
                      lx_kernel_call *c) {
  c->op = emit_op_at(pr, g, i);
  kernel_operands(pr, g, i, out_role, backward, c->args, sizeof c->args, &c->writes);
  c->width = emit_rank_width(pr, c->op->out);
  c->sharded = emit_sequence_sharded(pr, c->op->out);
  c->rows = emit_rows(pr, c->op);
}

void emit_gather_operands(const lx_printer *pr, lx_graph_id g, int i, lx_tensor_role out_role, bool backward,
                          lx_operands *o) {
  const lx_op *op = emit_op_at(pr, g, i);
#define OPERAND(field, kind, index)                                                                          \
  operand_text(pr, g, i, out_role, backward, &(lx_operand){kind, index, NULL}, field, sizeof field)
  OPERAND(o->out, LX_OPND_OUT, 0);
  OPERAND(o->dout, LX_OPND_DOUT, 0);
  OPERAND(o->w, LX_OPND_WEIGHT, 0);
  OPERAND(o->b, LX_OPND_BIAS, 0);
  OPERAND(o->dw, LX_OPND_DWEIGHT, 0);
  OPERAND(o->db, LX_OPND_DBIAS, 0);
  for (int k = 0; k < LX_MAX_OP_INPUTS; k++) {
    snprintf(o->in[k], PTR, "NULL");
    snprintf(o->din[k], PTR, "NULL");
    if (k >= op->n_inputs) continue;
    OPERAND(o->in[k], LX_OPND_IN, k);
    OPERAND(o->din[k], LX_OPND_DIN, k);
  }
#undef OPERAND
}

/* ---- shapes of one op, as C expressions ----------------------------------- */

int emit_tp(const lx_printer *pr) { return pr->ir->plan.tp; }

bool emit_in_piece(const lx_printer *pr, const lx_op *op) { return pr->in_pieces && op->chunks > 1; }

/* Under sequence parallelism a matmul reads the gathered whole input, or
 * writes the whole partial output it reduce-scatters: all rows. */
const char *emit_rows(const lx_printer *pr, const lx_op *op) {
  bool matmul = op->kind == LX_OP_LINEAR || op->kind == LX_OP_LM_HEAD;
  if (emit_in_piece(pr, op)) return "piece_rows";
  return emit_sequence_sharded(pr, op->out) && !matmul ? "SEQ_ROWS" : "BT";
}

int emit_rank_width(const lx_printer *pr, lx_shape s) { return (int)lx_rank_width(pr->ir, s); }

int emit_in_width(const lx_printer *pr, lx_graph_id g, const lx_op *op) {
  return emit_rank_width(pr, emit_op_at(pr, g, op->inputs[0])->out);
}

void emit_attention_dims(const lx_printer *pr, lx_graph_id g, const lx_op *op, char *buf, size_t size) {
  int groups = op->heads + 2 * op->kv_heads;
  int d = emit_op_at(pr, g, op->inputs[0])->out.width / groups;
  int t = emit_op_at(pr, g, op->inputs[0])->out.split ? emit_tp(pr) : 1;
  snprintf(buf, size, "B, T, %d, %d, %d", op->heads / t, op->kv_heads / t, d);
}

/* The graph function a run of FWD, BWD, BWD_WEIGHT or RECOMPUTE calls. */
const char *emit_run_function(lx_instr_kind k) {
  return k == LX_I_FWD          ? "forward"
         : k == LX_I_BWD        ? "backward"
         : k == LX_I_BWD_WEIGHT ? "weights"
                                : "recompute";
}

/* Whether op i is in the body of the graph function a run of `kind` calls. */
static bool in_function_body(const lx_printer *pr, lx_instr_kind kind, lx_graph_id g, int i) {
  if (lx_graph_of(pr->ir, g)->ops[i].kind == LX_OP_INPUT) return false;
  if (kind == LX_I_RECOMPUTE) return pr->st->decisions[i].recompute;
  if (kind == LX_I_BWD_WEIGHT) return lx_defers_weight_grad(pr->ir, pr->st, g, i);
  return true;
}

/* Is the run exactly the body of its graph function (all ops of the instance,
 * in order; for recompute, all the ops the stage recomputes; for weights, all
 * whose weight gradients wait)? */
bool emit_run_is_function(const lx_printer *pr, const lx_instr *run, int count) {
  const lx_graph *g = lx_graph_of(pr->ir, run->graph);
  /* The function completes a tensor-parallel collective around its first
   * or last op inside; the schedule issues those as instructions of their
   * own (a collective between two ops splits the run anyway). A W pass
   * has none. */
  bool backward = run->kind == LX_I_BWD || run->kind == LX_I_BWD_WEIGHT;
  lx_tp_collectives first = lx_tp_collectives_of(pr->ir, &g->ops[run[0].op], backward);
  lx_tp_collectives last = lx_tp_collectives_of(pr->ir, &g->ops[run[count - 1].op], backward);
  if (run->kind != LX_I_BWD_WEIGHT && (first.gather_before || last.reduce_after)) return false;
  int n = 0;
  for (int j = 0; j < g->n_ops; j++) {
    int i = backward ? g->n_ops - 1 - j : j;
    if (!in_function_body(pr, run->kind, run->graph, i)) continue;
    if (n >= count || run[n].op != i) return false;
    n++;
  }
  return n == count;
}

bool emit_function_called(const lx_printer *pr, lx_instr_kind kind, lx_graph_id g) {
  for (int k = 0; k < LX_STREAM_COUNT; k++) {
    const lx_instr_list *list = &pr->st->streams[k];
    for (int at = 0, end; at < list->count; at = end) {
      for (end = at + 1; end < list->count && lx_walk_same_run(&list->items[end], &list->items[at]);)
        end++;
      const lx_instr *run = &list->items[at];
      if (run->kind == kind && run->graph == g && emit_run_is_function(pr, run, end - at)) return true;
    }
  }
  return false;
}

/* A transfer of the forward-only pass inside a block that names the
 * chunk's first layer (its buffers are the chunk's); `format` takes the
 * buffer and the peer stage. */
static void print_forward_transfer(const lx_printer *pr, const char *format, lx_tensor_role role, int v,
                                   bool to_next) {
  const lx_stage *st = pr->st;
  char buf[PTR], layer[16], peer[16];
  lx_tensor_ref t = {LX_GRAPH_BLOCK, st->chunks[v].first_layer, 0, 0, role, 0};
  lx_place_expr e = lx_place_of(pr->p, pr->s, pr->l, t);
  if (st->n_chunks == 1)
    snprintf(peer, sizeof peer, "%s", to_next ? "STAGE + 1" : "STAGE - 1");
  else
    snprintf(peer, sizeof peer, "%d", (pr->s + (to_next ? 1 : pr->p->pp - 1)) % pr->p->pp);
  emit_at(pr, buf, sizeof buf, t);
  bool names_layer = role == LX_T_OUTPUT || e.per_chunk;
  if (names_layer)
    fprintf(pr->out, "    {\n      const int layer = %s;\n      (void)layer;\n      ",
            emit_chunk_layer(pr, v, layer, sizeof layer));
  else
    fputs("    ", pr->out);
  fprintf(pr->out, format, buf, peer);
  fputs(names_layer ? "\n    }\n" : "\n", pr->out);
}

void emit_forward_only_chunks(const lx_printer *pr, const char *recv_format, const char *send_format) {
  const lx_stage *st = pr->st;
  FILE *f = pr->out;
  for (int v = 0; v < st->n_chunks; v++) {
    const lx_chunk *c = &st->chunks[v];
    bool prologue = v == 0 && st->has_prologue, epilogue = v == st->n_chunks - 1 && st->has_epilogue;
    if (!prologue) print_forward_transfer(pr, recv_format, LX_T_OUTPUT, v, false);
    if (prologue) fprintf(f, "    forward_prologue(ctx, mb);\n");
    if (st->n_chunks == 1 && c->n_layers)
      fprintf(f, "    for (int layer = FIRST_LAYER; layer < FIRST_LAYER + LAYERS; layer++) "
                 "forward_block(ctx, layer, mb);\n");
    else if (c->n_layers)
      fprintf(f, "    for (int layer = %d; layer <= %d; layer++) forward_block(ctx, layer, mb);\n",
              c->first_layer, lx_chunk_last_layer(c));
    if (epilogue)
      fprintf(f, "    forward_epilogue(ctx, mb);\n");
    else
      print_forward_transfer(pr, send_format, LX_T_SEND_ACT, v, true);
  }
}

const char *emit_chunk_layer(const lx_printer *pr, int chunk, char *buf, size_t size) {
  if (pr->st->n_chunks == 1) return "FIRST_LAYER";
  snprintf(buf, size, "%d", pr->st->chunks[chunk].first_layer);
  return buf;
}

const char *emit_layer_text(const lx_instr *in, char *buf, size_t size) {
  if (in->layer < 0) return "FIRST_LAYER";
  snprintf(buf, size, "%d", in->layer);
  return buf;
}

/* ---- sequence parallelism ---- */

bool emit_whole_gradient(const lx_printer *pr, lx_graph_id g, int i, char *buf, long long *bytes) {
  lx_tp_collectives c = lx_tp_collectives_of(pr->ir, emit_op_at(pr, g, i), true);
  if (!c.reduce_after || c.reduce != LX_COLL_REDUCE_SCATTER) return false;
  lx_tensor_ref whole = emit_ref(pr, g, i, LX_T_SP_WHOLE, 1);
  emit_at(pr, buf, PTR, whole);
  *bytes = (long long)lx_place_of(pr->p, pr->s, pr->l, whole).bytes;
  return true;
}

void emit_tp_collective_operands(const lx_printer *pr, lx_graph_id g, int i, bool backward,
                                 lx_tp_collective coll, lx_tensor_role role, lx_tp_operands *t) {
  const lx_op *op = emit_op_at(pr, g, i);
  bool column = op->tp_role == LX_TP_COLUMN, input_side = coll == LX_COLL_ALLGATHER ? column : backward;
  lx_tensor_ref shard = coll == LX_COLL_ALLGATHER ? (column ? emit_ref(pr, g, op->inputs[0], LX_T_OUTPUT, 0)
                                                            : emit_ref(pr, g, i, LX_T_GRAD, 0))
                        : backward                ? emit_ref(pr, g, op->inputs[0], LX_T_GRAD, 0)
                                                  : emit_ref(pr, g, i, role, 0);
  emit_at(pr, t->shard, PTR, shard);
  t->width = input_side ? emit_in_width(pr, g, op) : emit_rank_width(pr, op->out);
  t->rows = coll == LX_COLL_ALLREDUCE ? "BT" : "SEQ_ROWS";
  if (coll == LX_COLL_ALLGATHER) emit_at(pr, t->whole, PTR, emit_ref(pr, g, i, LX_T_SP_GATHERED, !column));
  if (coll == LX_COLL_REDUCE_SCATTER) emit_at(pr, t->whole, PTR, emit_ref(pr, g, i, LX_T_SP_WHOLE, backward));
}

void emit_blocking_collective(const lx_printer *pr, lx_graph_id g, int i, bool backward, lx_tensor_role role,
                              bool before, lx_tp_call_printer print, const char *arg) {
  const lx_op *op = emit_op_at(pr, g, i);
  lx_tp_collectives c = lx_tp_collectives_of(pr->ir, op, backward);
  if (before && backward) {
    lx_instr in = printed_instr(pr, g, i, role, true);
    c.gather_before = lx_backward_gathers(pr->ir, op, lx_instr_part(pr->ir, pr->st, &in));
  }
  if (before ? !c.gather_before : !c.reduce_after) return;
  lx_tp_collective coll = before ? LX_COLL_ALLGATHER : c.reduce;
  lx_tp_operands t;
  emit_tp_collective_operands(pr, g, i, backward, coll, role, &t);
  fputs("  ", pr->out);
  print(pr->out, coll, &t, arg);
}

void emit_boundary_sizes(const lx_printer *pr) {
  if (lx_sequence_parallel(pr->ir))
    fprintf(
        pr->out,
        "  SEQ_ROWS = BT / TENSOR_PARALLEL, /* sequence parallelism: this rank's rows of (B, T) */\n"
        "  BOUNDARY_ELEMENTS = SEQ_ROWS * C, /* what crosses a stage boundary: a sequence shard */\n};\n\n");
  else
    fprintf(pr->out, "  BOUNDARY_ELEMENTS = BT * C, /* what crosses a stage boundary: (B, T, C) */\n};\n\n");
}

/* The epilogue's input op that holds the targets. */
static int targets_op(const lx_ir *ir) {
  for (int i = 0; i < ir->epilogue.n_ops; i++)
    if (ir->epilogue.ops[i].kind == LX_OP_INPUT && ir->epilogue.ops[i].param == 1) return i;
  return -1;
}

void emit_load_operands(const lx_printer *pr, const char *absent, char tokens[PTR], char targets[PTR]) {
  snprintf(tokens, PTR, "%s", absent);
  snprintf(targets, PTR, "%s", absent);
  if (pr->st->has_prologue) emit_at(pr, tokens, PTR, emit_ref(pr, LX_GRAPH_PROLOGUE, 0, LX_T_OUTPUT, 0));
  if (pr->st->has_epilogue)
    emit_at(pr, targets, PTR, emit_ref(pr, LX_GRAPH_EPILOGUE, targets_op(pr->ir), LX_T_OUTPUT, 0));
}

/* Does op i's output reach a residual add, through dropout at most? GPT-2
 * scales the initial weights of such projections by 1 / sqrt(2 L). */
static bool feeds_residual_add(const lx_graph *g, int i) {
  for (int c = i + 1; c < g->n_ops; c++) {
    const lx_op *user = &g->ops[c];
    for (int k = 0; k < user->n_inputs; k++) {
      if (user->inputs[k] != i) continue;
      if (user->kind == LX_OP_ADD || (user->kind == LX_OP_DROPOUT && feeds_residual_add(g, c))) return true;
    }
  }
  return false;
}

/* ---- the parameter table ---------------------------------------------------------- */

/* Init streams name the parameter, not the stage: every pipeline depth draws
 * the same weights, and a tied head's copy the embedding's. */
static long long init_stream(lx_graph_id g, int layer, int op, int k) {
  return ((long long)g * 100003 + layer + 1) * 64 + op * 2 + k + 1;
}

static int embedding_op(const lx_ir *ir) {
  for (int i = 0; i < ir->prologue.n_ops; i++)
    if (ir->prologue.ops[i].kind == LX_OP_EMBEDDING) return i;
  return 0;
}

/* ---- tensor-parallel shards ------------------------------------------------------ */

/* Where a rank's part of a parameter sits in the whole tensor (lx_train.h). */
typedef struct {
  int split; /* 0 replicated, 1 runs of whole rows, 2 a slice of every row's columns, 3 replicated with
                partial gradients (sequence parallelism) */
  long long row_elements, whole_row;
  int pieces;
  long long piece_row[3], piece_rows[3];
} param_shard;

/* The row groups of a column-parallel output that its consumer reads as
 * separate tensors (attention's q, k, v; swiglu's gate and up): each is
 * split over the ranks on its own. */
static int column_groups(const lx_graph *g, int i, long long rows, long long first[3], long long count[3]) {
  for (int c = i + 1; c < g->n_ops; c++) {
    const lx_op *user = &g->ops[c];
    if (user->n_inputs < 1 || user->inputs[0] != i) continue;
    if (user->kind == LX_OP_ATTENTION || user->kind == LX_OP_ROPE) {
      long long d = rows / (user->heads + 2LL * user->kv_heads);
      first[0] = 0, count[0] = user->heads * d;
      first[1] = count[0], count[1] = user->kv_heads * d;
      first[2] = first[1] + count[1], count[2] = count[1];
      return 3;
    }
    if (user->kind == LX_OP_SWIGLU) {
      first[0] = 0, first[1] = count[0] = count[1] = rows / 2;
      return 2;
    }
  }
  first[0] = 0, count[0] = rows;
  return 1;
}

static param_shard shard_of(const lx_printer *pr, lx_graph_id gid, int i, int k) {
  const lx_graph *g = lx_graph_of(pr->ir, gid);
  const lx_op *op = &g->ops[i];
  int tp = emit_tp(pr);
  param_shard sh = {.row_elements = 1};
  bool vocab = op->kind == LX_OP_EMBEDDING || op->kind == LX_OP_LM_HEAD;
  bool row_wise =
      op->kind == LX_OP_LAYERNORM || op->kind == LX_OP_RMSNORM || op->kind == LX_OP_POSITION_EMBEDDING;
  /* LoRA: the adapter's factor on the linear's whole side (a column-parallel
   * linear's A, a row-parallel one's B) is replicated and its gradient a
   * partial sum on each rank (analyze.c, add_adapter) */
  bool whole_factor = k == (op->tp_role == LX_TP_ROW ? LX_PARAM_LORA_B : LX_PARAM_LORA_A);
  if ((row_wise && lx_sequence_parallel(pr->ir)) || (tp > 1 && op->lora_rank && whole_factor)) {
    sh.split = 3; /* replicated, its gradient summed over the ranks (their sequence shards' parts) */
    return sh;
  }
  if (tp == 1 || !(vocab || op->kind == LX_OP_LINEAR) || (op->tp_role == LX_TP_ROW && k == 1)) return sh;
  long long in_width = vocab ? 0 : emit_op_at(pr, gid, op->inputs[0])->out.width;
  if (op->tp_role == LX_TP_ROW) { /* W's and A's input columns */
    sh.split = 2, sh.whole_row = in_width, sh.row_elements = in_width / tp;
    return sh;
  }
  sh.split = 1;
  if (vocab) {
    sh.row_elements =
        op->kind == LX_OP_EMBEDDING ? op->out.width : emit_op_at(pr, gid, op->inputs[0])->out.width;
    sh.pieces = 1, sh.piece_row[0] = 0, sh.piece_rows[0] = pr->ir->padded_vocab / tp;
    return sh;
  }
  sh.row_elements = k == LX_PARAM_WEIGHT   ? in_width
                    : k == LX_PARAM_LORA_B ? op->lora_rank
                                           : 1; /* B's output rows */
  sh.pieces = column_groups(g, i, op->out.width, sh.piece_row, sh.piece_rows);
  for (int p = 0; p < sh.pieces; p++)
    sh.piece_rows[p] /= tp;
  return sh;
}

/* The embedding table a tied head reads too: the first and the last stage
 * sum its gradients (an untied table has no copy to sum with). */
static bool is_tied_table(const lx_ir *ir, const lx_op *op) {
  return op->kind == LX_OP_EMBEDDING && ir->model.tied_embeddings;
}

/* The rows of the stage's parameters in the Hugging Face checkpoint
 * (emit_formats.h), collected while the parameter table is printed. */
typedef struct {
  int param, tensor, layer;
  long long first_row;
} hf_part;

/* The rows of a LoRA linear's parameters (-1: none), for lora_adapters. */
typedef struct {
  lx_graph_id graph;
  int layer, op, row[LX_MAX_OP_PARAMS];
} adapter_rows;

typedef struct {
  bool gpt2;
  bool frozen; /* the pass that prints the frozen parameters, after the trained ones */
  int params;  /* rows printed so far */
  hf_part *parts;
  int n_parts, cap_parts;
  adapter_rows *adapters;
  int n_adapters;
} param_rows;

/* Row `row` is parameter k of LoRA linear i of graph g's instance `layer`. */
static void note_adapter_row(param_rows *rows, lx_graph_id g, int layer, int i, int k, int row) {
  int a = 0;
  while (a < rows->n_adapters &&
         !(rows->adapters[a].graph == g && rows->adapters[a].layer == layer && rows->adapters[a].op == i))
    a++;
  if (a == rows->n_adapters) {
    rows->adapters = lx_realloc(rows->adapters, sizeof *rows->adapters * (size_t)(a + 1));
    rows->adapters[a] = (adapter_rows){g, layer, i, {-1, -1, -1, -1}};
    rows->n_adapters++;
  }
  rows->adapters[a].row[k] = row;
}

static void add_hf_parts(const lx_printer *pr, param_rows *rows, lx_graph_id g, int layer, int i, int k) {
  int tensor[EMIT_HF_MAX_PARTS];
  long long first_row[EMIT_HF_MAX_PARTS];
  int n = emit_hf_parts(pr->ir, g, i, k, tensor, first_row);
  for (int p = 0; p < n; p++) {
    if (rows->n_parts == rows->cap_parts) {
      rows->cap_parts = rows->cap_parts ? 2 * rows->cap_parts : 64;
      rows->parts = lx_realloc(rows->parts, sizeof *rows->parts * (size_t)rows->cap_parts);
    }
    rows->parts[rows->n_parts++] = (hf_part){rows->params, tensor[p], layer, first_row[p]};
  }
}

/* A parameter's name in the tables and the training state: graph, layer, op,
 * weight, bias, lora_a or lora_b. */
static const char *param_name(const lx_ir *ir, lx_graph_id g, int layer, int i, int k, char name[128]) {
  const lx_graph *graph = lx_graph_of(ir, g);
  snprintf(name, 128, "%s%s%d %s.%s", graph->name, g == LX_GRAPH_BLOCK ? " layer " : "",
           g == LX_GRAPH_BLOCK ? layer : 0, graph->ops[i].name, lx_param_name(k));
  return name;
}

/* The whole parameter as every plan holds it: rows of cols, the vocabulary
 * unpadded (the padding's rows depend on tp), so that a training state
 * moves between plans (lx_state.h). */
static void whole_shape(const lx_printer *pr, lx_graph_id g, const lx_op *op, int k, long long shape[2]) {
  long long vocab = pr->ir->model.vocab;
  long long in = op->n_inputs ? emit_op_at(pr, g, op->inputs[0])->out.width : 0;
  switch (op->kind) {
  case LX_OP_LINEAR:
    shape[0] = k == LX_PARAM_LORA_A ? op->lora_rank : op->out.width;
    shape[1] = k == LX_PARAM_BIAS ? 1 : k == LX_PARAM_LORA_B ? op->lora_rank : in;
    return;
  case LX_OP_EMBEDDING: shape[0] = vocab, shape[1] = op->out.width; return;
  case LX_OP_POSITION_EMBEDDING: shape[0] = pr->ir->model.seq_len, shape[1] = op->out.width; return;
  case LX_OP_LM_HEAD: shape[0] = vocab, shape[1] = in; return;
  default: shape[0] = op->out.width, shape[1] = 1; /* a norm's scale or shift */
  }
}

/* The normal deviation a weight starts from (GPT-2's, scaled down on the
 * residual projections), 0 where it starts from a constant. A LoRA adapter's
 * A has PEFT's kaiming-uniform variance, 1 / (3 in); its B starts at zero,
 * so the adapted model starts as the base model. */
static double init_std(const lx_printer *pr, const lx_graph *graph, int i, int k) {
  const lx_op *op = &graph->ops[i];
  if (k == LX_PARAM_LORA_A) return 1 / sqrt(3.0 * graph->ops[op->inputs[0]].out.width);
  bool weight = k == LX_PARAM_WEIGHT && op->kind != LX_OP_LAYERNORM && op->kind != LX_OP_RMSNORM;
  bool residual_projection = op->kind == LX_OP_LINEAR && feeds_residual_add(graph, i);
  return !weight ? 0 : residual_projection ? 0.02 / sqrt(2.0 * pr->ir->model.layers) : 0.02;
}

static void print_param_row(const lx_printer *pr, param_rows *rows, lx_graph_id g, int layer, int i, int k) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  const lx_op *op = &graph->ops[i];
  const lx_op_place *pl = &pr->l->places[g][i];
  if (pl->param_elements[k] <= 0 || lx_param_trained(pr->ir, op, k) == rows->frozen) return;
  lx_span span = lx_locate(pr->p, pr->s, pr->l, (lx_tensor_ref){g, layer, i, 0, LX_T_PARAM, k});
  long long element = (span.offset - pr->l->region_offset[LX_REGION_PARAMS]) / pr->l->param_elt;
  bool weight = k != LX_PARAM_BIAS && op->kind != LX_OP_LAYERNORM && op->kind != LX_OP_RMSNORM;
  bool tied_copy = op->kind == LX_OP_LM_HEAD && op->params_per_rank + op->frozen_per_rank == 0;
  double std = init_std(pr, graph, i, k);
  /* norm scales start at one; biases, shifts and adapters' B at zero */
  double constant = std == 0 && k == LX_PARAM_WEIGHT && !weight ? 1 : 0;
  long long stream =
      tied_copy ? init_stream(LX_GRAPH_PROLOGUE, -1, embedding_op(pr->ir), 0) : init_stream(g, layer, i, k);
  long long file = rows->gpt2 && k < LX_PARAM_LORA_A ? emit_llmc_element(pr->ir, g, layer, i, k) : -1;
  param_shard sh = shard_of(pr, g, i, k);
  long long shape[2];
  whole_shape(pr, g, op, k, shape);
  char name[128];
  fprintf(pr->out, "  {\"%s\", %lldLL, %lldLL, %.17g, %g, %d, %lldLL, %lldLL, %d, %d, %d",
          param_name(pr->ir, g, layer, i, k, name), element, (long long)pl->param_elements[k], std, constant,
          weight ? 1 : 0, stream, file, tied_copy ? 0 : 1, tied_copy || is_tied_table(pr->ir, op) ? 1 : 0,
          sh.split);
  fprintf(pr->out, ", %lldLL, %lldLL, %d, {%lldLL, %lldLL, %lldLL}, {%lldLL, %lldLL, %lldLL}",
          sh.row_elements, sh.whole_row, sh.pieces, sh.piece_row[0], sh.piece_row[1], sh.piece_row[2],
          sh.piece_rows[0], sh.piece_rows[1], sh.piece_rows[2]);
  fprintf(pr->out, ", %lldLL, %lldLL},\n", shape[0], shape[1]);
  add_hf_parts(pr, rows, g, layer, i, k);
  if (op->lora_rank) note_adapter_row(rows, g, layer, i, k, rows->params);
  rows->params++;
}

static void print_param_rows(const lx_printer *pr, param_rows *rows, lx_graph_id g, int layer) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  for (int i = 0; i < graph->n_ops; i++)
    for (int k = 0; k < LX_MAX_OP_PARAMS; k++)
      print_param_row(pr, rows, g, layer, i, k);
}

/* Which rows of which parameter each Hugging Face tensor of the stage is. */
static void print_hf_parts(const lx_printer *pr, const param_rows *rows) {
  emit_hf_model(pr->out, pr->ir);
  if (!rows->n_parts) return;
  fprintf(pr->out, "\n/* The stage's parameters in that checkpoint: parameter (param_tensors),\n"
                   " * tensor (hf_tensors), its layer (-1: none), the parameter's row where the\n"
                   " * tensor's rows start. */\nstatic const lx_hf_part hf_parts[] = {\n");
  for (int p = 0; p < rows->n_parts; p++)
    fprintf(pr->out, "  {%d, %d, %d, %lldLL},\n", rows->parts[p].param, rows->parts[p].tensor,
            rows->parts[p].layer, rows->parts[p].first_row);
  fprintf(pr->out, "};\nenum { HF_PARTS = %d };\n", rows->n_parts);
}

static void print_string_macro(FILE *f, const char *name, const char *value);

/* The data-parallel buckets of the params region (layout.h), in its order. */
static void print_bucket_table(const lx_printer *pr) {
  const lx_stage_layout *l = pr->l;
  fprintf(pr->out, "\n/* Gradient buckets reduced across the dp replicas at once: first element,\n"
                   " * elements, and (ZeRO-1) where this replica's share of their optimizer\n"
                   " * state starts. */\nstatic const lx_param_bucket param_buckets[] = {\n");
  for (int b = 0; b < l->n_buckets; b++)
    fprintf(pr->out, "  {%lldLL, %lldLL, %lldLL},\n", (long long)l->buckets[b].first,
            (long long)l->buckets[b].elements, (long long)l->buckets[b].shard_first);
  if (!l->n_buckets) fputs("  {0, 0, 0},\n", pr->out);
  /* a long long literal: an enum of a big model's element count would not be an int */
  fprintf(pr->out, "};\nenum { PARAM_BUCKETS = %d, ZERO_SHARDS = %d };\n#define OPTIMIZER_ELEMENTS %lldLL\n",
          l->n_buckets, l->shards, (long long)l->optimizer_elements);
}

/* Fine-tuning's adapters, which the exported weights merge (lx_params.h). */
static void print_adapter_table(const lx_printer *pr, const param_rows *rows) {
  fprintf(
      pr->out,
      "#define FINETUNE 1\n/* The LoRA adapters: the rows of the weight, A and B, rank, alpha / rank. */\n"
      "static const lx_lora_adapter lora_adapters[] = {\n");
  for (int a = 0; a < rows->n_adapters; a++) {
    const adapter_rows *r = &rows->adapters[a];
    const lx_op *op = &lx_graph_of(pr->ir, r->graph)->ops[r->op];
    fprintf(pr->out, "  {%d, %d, %d, %d, %.17g},\n", r->row[LX_PARAM_WEIGHT], r->row[LX_PARAM_LORA_A],
            r->row[LX_PARAM_LORA_B], op->lora_rank, lx_lora_scale(op));
  }
  if (!rows->n_adapters) fputs("  {0, 0, 0, 0, 0},\n", pr->out);
  fprintf(pr->out, "};\nenum { LORA_ADAPTERS = %d };\n", rows->n_adapters);
}

/* The table's first PARAM_TENSORS rows are the trained parameters (all of
 * them but in fine-tuning): the optimizer, the gradient norm and the training
 * state walk those; the frozen ones follow, read by the initialisation and
 * checkpoint files alone. */
static void print_frozen_counts(const lx_printer *pr, const param_rows *rows, int trained) {
  int all = rows->params;
  if (!pr->ir->finetune) {
    fprintf(pr->out, "};\nenum { PARAM_TENSORS = sizeof param_tensors / sizeof param_tensors[0] };\n");
    return;
  }
  fprintf(pr->out, "};\n/* fine-tuning: the first PARAM_TENSORS are trained, the rest frozen; the frozen\n"
                   " * elements follow the trained ones in the params region */\n");
  fprintf(pr->out, "enum { PARAM_TENSORS = %d, ALL_PARAM_TENSORS = %d };\n", trained, all);
  fprintf(pr->out, "#define ALL_PARAM_ELEMENTS %lldLL\n",
          (long long)(pr->l->frozen_first + pr->l->frozen_elements));
  print_adapter_table(pr, rows);
}

void emit_param_table(const lx_printer *pr) {
  param_rows rows = {.gpt2 = emit_is_gpt2(pr->ir)};
  fprintf(pr->out, "\n/* Every parameter tensor of the stage: name, element offset in the params\n"
                   " * region, elements, init std (0: constant), init constant, weight decay,\n"
                   " * init stream, element in llm.c's GPT-2 checkpoint (-1: none), whether this\n"
                   " * stage writes it there, whether it is the tied embedding table, and where\n"
                   " * this rank's share sits in the whole tensor (tensor parallelism: split,\n"
                   " * row elements, whole row, pieces, their first rows and row counts), and\n"
                   " * the whole tensor's rows and columns. */\n"
                   "static const lx_param_tensor param_tensors[] = {\n");
  int trained = 0;
  for (rows.frozen = false;; rows.frozen = true) {
    if (pr->st->has_prologue) print_param_rows(pr, &rows, LX_GRAPH_PROLOGUE, -1);
    for (int slot = 0; slot < pr->st->n_layers; slot++)
      print_param_rows(pr, &rows, LX_GRAPH_BLOCK, lx_slot_layer(pr->st, slot));
    if (pr->st->has_epilogue) print_param_rows(pr, &rows, LX_GRAPH_EPILOGUE, -1);
    if (rows.frozen) break;
    trained = rows.params;
  }
  print_frozen_counts(pr, &rows, trained);
  print_bucket_table(pr);
  fprintf(pr->out, "#define GPT2_CHECKPOINT %d\n", rows.gpt2 ? 1 : 0);
  fprintf(pr->out, "static const lx_gpt2_header gpt2_header = {%d, %d, %d, %d, %d, %d};\n",
          pr->ir->model.seq_len, pr->ir->model.vocab, pr->ir->model.layers, pr->ir->model.heads,
          pr->ir->model.hidden, pr->ir->padded_vocab);
  char tied[128];
  fprintf(pr->out,
          "/* The tied embedding table: its copy on the last stage is this tensor in a training state. */\n");
  print_string_macro(pr->out, "TIED_TABLE_NAME",
                     pr->ir->model.tied_embeddings
                         ? param_name(pr->ir, LX_GRAPH_PROLOGUE, -1, embedding_op(pr->ir), 0, tied)
                         : NULL);
  print_hf_parts(pr, &rows);
  free(rows.parts);
  free(rows.adapters);
}

static void print_string_macro(FILE *f, const char *name, const char *value) {
  fprintf(f, "#define %s ", name);
  if (!value) {
    fputs("NULL\n", f);
    return;
  }
  lx_put_c_string(f, value);
  fputc('\n', f);
}

const char *emit_file_name(const char *path, char name[LX_TEXT_MAX]) {
  return lx_text(lx_file_name(path), name, LX_TEXT_MAX);
}

/* The model file's training settings: the defaults run.sh's options override. */
void emit_training(const lx_printer *pr) {
  const lx_training *t = &pr->ir->training;
  FILE *f = pr->out;
  fprintf(f, "\n/* training (struct lx_training of the model file) */\n");
  fprintf(f, "#define TRAINING_STEPS %d\n#define TRAINING_LR %.17g\n#define TRAINING_MIN_LR %.17g\n",
          t->steps, t->lr, t->min_lr);
  fprintf(f, "#define TRAINING_WARMUP %d\n#define TRAINING_LR_SCHEDULE %d\n", t->warmup_steps,
          (int)t->lr_schedule);
  fprintf(f, "#define TRAINING_BETA1 %.17g\n#define TRAINING_BETA2 %.17g\n#define TRAINING_EPS %.17g\n",
          t->beta1, t->beta2, t->eps);
  fprintf(f, "#define TRAINING_WEIGHT_DECAY %.17g\n#define TRAINING_GRAD_CLIP %.17g\n", t->weight_decay,
          t->grad_clip);
  fprintf(
      f,
      "#define TRAINING_SEED %d\n#define TRAINING_VAL_INTERVAL %d\n#define TRAINING_CHECKPOINT_INTERVAL %d\n",
      t->seed, t->val_interval, t->checkpoint_interval);
  print_string_macro(f, "TRAINING_TRAIN_DATA", t->train_data ? t->train_data : "data/train_*.bin");
  print_string_macro(f, "TRAINING_VAL_DATA", t->val_data);
  if (pr->ir->finetune)
    fprintf(f, "#define LORA_DROPOUT %.17g /* of the adapters' input */\n", t->lora_dropout);
  fprintf(f,
          "#define PREDICTED_STEP_SECONDS %.3g /* on the modeled GPU (plan.txt): the watchdog's default */\n",
          pr->predicted_step_s);
}
