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

void emit_host_arena(const lx_printer *pr, const char *scaled) {
  fprintf(pr->out,
          "/* The host arena: what offloaded ops save, in host memory (plan.txt); 0 bytes: none */\n"
          "#define HOST_ARENA_BYTES %lldLL\nstatic char *host_arena;\n"
          "#define HOST_AT(offset) ((void *)(host_arena + %s))\n",
          (long long)pr->l->region_bytes[LX_REGION_HOST], scaled);
}

int emit_host_copies(const lx_printer *pr, const lx_instr *in, emit_host_copy out[LX_MAX_SAVED + 1]) {
  const lx_op_place *pl = &pr->l->places[in->graph][in->op];
  int n = 0;
  for (int k = 0; k <= LX_MAX_SAVED; k++) {
    if (pl->host_offset[k] < 0) continue;
    lx_tensor_ref device =
        emit_ref(pr, in->graph, in->op, k == 0 ? LX_T_OUTPUT : LX_T_INTERNAL, k ? k - 1 : 0);
    lx_tensor_ref host = emit_ref(pr, in->graph, in->op, LX_T_HOST, k);
    emit_at(pr, out[n].device, PTR, device);
    emit_at(pr, out[n].host, PTR, host);
    out[n++].bytes = (long long)lx_place_of(pr->p, pr->s, pr->l, host).bytes;
  }
  return n;
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

bool emit_in_piece(const lx_printer *pr, const lx_op *op) {
  return (pr->in_pieces && op->chunks > 1) || op == pr->rows_op;
}

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
  if (run->pieces) return false; /* some of a head-split op's heads */
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

/* BOUNDARY_ELEMENTS is 64-bit: (B, T, C) may pass int's range (16 x 16384 x
 * 8192 = 2^31), which an enum constant cannot hold. */
void emit_boundary_sizes(const lx_printer *pr) {
  if (lx_sequence_parallel(pr->ir))
    fprintf(pr->out,
            "  SEQ_ROWS = BT / TENSOR_PARALLEL, /* sequence parallelism: this rank's rows of (B, T) */\n};\n"
            "/* what crosses a stage boundary: a sequence shard */\n"
            "#define BOUNDARY_ELEMENTS ((int64_t)SEQ_ROWS * C)\n\n");
  else
    fprintf(
        pr->out,
        "};\n#define BOUNDARY_ELEMENTS ((int64_t)BT * C) /* what crosses a stage boundary: (B, T, C) */\n\n");
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

void emit_string_macro(FILE *f, const char *name, const char *value) {
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
  emit_string_macro(f, "TRAINING_TRAIN_DATA", t->train_data ? t->train_data : "data/train_*.bin");
  emit_string_macro(f, "TRAINING_VAL_DATA", t->val_data);
  if (pr->ir->finetune)
    fprintf(f, "#define LORA_DROPOUT %.17g /* of the adapters' input */\n", t->lora_dropout);
  fprintf(f,
          "#define PREDICTED_STEP_SECONDS %.3g /* on the modeled GPU (plan.txt): the watchdog's default */\n",
          pr->predicted_step_s);
}
