/* emit_cpu.c — the CPU printer: one C11 + OpenMP + OpenBLAS + MPI program per
 * pipeline stage, calling the kernels of templates/cpu/.
 *
 * The program computes in `real` (float; double with -DLX_DOUBLE for gradient
 * checks). The arena is laid out for the model's dtype; every offset is
 * scaled by REAL_SCALE = sizeof(real) / that dtype's size, which keeps every
 * buffer apart and aligned whatever `real` is. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "emit.h"
#include "passes.h"

typedef struct {
  FILE *out;
  const lx_pipeline *p;
  const lx_ir *ir;
  int s;
  const lx_stage *st;
  const lx_stage_layout *l;
} printer;

/* ---- expressions ----------------------------------------------------------- */

static lx_tensor_ref ref(const printer *pr, lx_graph_id g, int op, lx_tensor_role role, int index) {
  return (lx_tensor_ref){g, g == LX_GRAPH_BLOCK ? pr->st->first_layer : -1, op, 0, role, index};
}

/* The C byte offset of a tensor, for the instance `layer`, `mb` of its graph. */
static void offset_text(const printer *pr, lx_tensor_ref t, char *buf, size_t size) {
  lx_place_expr e = lx_place_of(pr->p, pr->s, pr->l, t);
  lx_place_expr_print(&e, buf, size);
}

/* Three places of a block depend on whether the layer is the stage's first
 * or last, not affinely on the layer: its output (the next layer's input, or
 * what leaves the stage), that output's gradient, and its input's gradient.
 * The stage file computes them in small functions (print_block_boundaries). */
static const char *boundary_function(const printer *pr, lx_tensor_ref t) {
  if (t.graph != LX_GRAPH_BLOCK) return NULL;
  const lx_graph *g = &pr->ir->block;
  if (t.role == LX_T_OUTPUT && t.op == g->output) return "block_output";
  if (t.role == LX_T_GRAD && t.op == g->output) return "block_output_grad";
  if (t.role == LX_T_GRAD && g->ops[t.op].kind == LX_OP_INPUT) return "block_input_grad";
  return NULL;
}

/* "((real *)AT(offset expression))" */
static const char *at(const printer *pr, char *buf, size_t size, const char *type, lx_tensor_ref t) {
  const char *function = boundary_function(pr, t);
  if (function) {
    snprintf(buf, size, "((%s *)%s(layer, mb))", type, function);
    return buf;
  }
  char offset[256];
  offset_text(pr, t, offset, sizeof offset);
  snprintf(buf, size, "((%s *)AT(%s))", type, offset);
  return buf;
}

static void print_boundary_function(const printer *pr, const char *name, lx_tensor_role role, int op, bool at_first) {
  const lx_stage *st = pr->st;
  int first = st->first_layer, last = first + st->n_layers - 1;
  int special = at_first ? first : last;
  int other = st->n_layers > 1 ? (at_first ? last : first) : special;
  char special_text[256], other_text[256];
  offset_text(pr, (lx_tensor_ref){LX_GRAPH_BLOCK, special, op, 0, role, 0}, special_text, sizeof special_text);
  offset_text(pr, (lx_tensor_ref){LX_GRAPH_BLOCK, other, op, 0, role, 0}, other_text, sizeof other_text);
  fprintf(pr->out, "static void *%s(int layer, int mb) {\n  (void)mb;\n  return layer == %s ? AT(%s) : AT(%s);\n}\n",
          name, at_first ? "FIRST_LAYER" : "FIRST_LAYER + LAYERS - 1", special_text, other_text);
}

static void print_block_boundaries(const printer *pr) {
  if (pr->st->n_layers == 0) return;
  int output = pr->ir->block.output;
  fprintf(pr->out, "\n/* A layer's output is the next layer's input, or leaves the stage after its\n"
                   " * last layer; gradients at the stage's edges come from and go to the\n"
                   " * pipeline's buffers, between layers they alternate in the boundary region. */\n");
  print_boundary_function(pr, "block_output", LX_T_OUTPUT, output, false);
  print_boundary_function(pr, "block_output_grad", LX_T_GRAD, output, false);
  print_boundary_function(pr, "block_input_grad", LX_T_GRAD, 0, true);
}

enum { PTR = 320 };

typedef struct {
  char out[PTR], in[2][PTR], w[PTR], b[PTR], dout[PTR], din[2][PTR], internal[LX_MAX_SAVED][PTR];
  char dw[PTR + 16], db[PTR + 16]; /* GRAD_OF(w), GRAD_OF(b) */
} operands;

static const lx_op *op_at(const printer *pr, lx_graph_id g, int i) { return &lx_graph_of(pr->ir, g)->ops[i]; }

static bool input_is_tokens(const printer *pr, lx_graph_id g, const lx_op *op, int k) {
  return op_at(pr, g, op->inputs[k])->out.dtype == LX_DTYPE_INT32;
}

/* The tied LM head on the embedding's own stage reads the embedding table. */
static lx_tensor_ref head_weight(const printer *pr, lx_graph_id g, int i) {
  if (pr->l->places[g][i].param_elements[0] > 0) return ref(pr, g, i, LX_T_PARAM, 0);
  const lx_graph *pro = &pr->ir->prologue;
  for (int k = 0; k < pro->n_ops; k++)
    if (pro->ops[k].kind == LX_OP_EMBEDDING) return ref(pr, LX_GRAPH_PROLOGUE, k, LX_T_PARAM, 0);
  return ref(pr, g, i, LX_T_PARAM, 0);
}

static void gather_operands(const printer *pr, lx_graph_id g, int i, lx_tensor_role out_role, operands *o) {
  const lx_op *op = op_at(pr, g, i);
  memset(o, 0, sizeof *o);
  at(pr, o->out, PTR, "real", ref(pr, g, i, out_role, 0));
  at(pr, o->dout, PTR, "real", ref(pr, g, i, LX_T_GRAD, 0));
  for (int k = 0; k < op->n_inputs; k++) {
    bool tokens = input_is_tokens(pr, g, op, k);
    at(pr, o->in[k], PTR, tokens ? "int" : "real", ref(pr, g, op->inputs[k], LX_T_OUTPUT, 0));
    if (tokens) snprintf(o->din[k], PTR, "NULL");
    else at(pr, o->din[k], PTR, "real", ref(pr, g, op->inputs[k], LX_T_GRAD, 0));
  }
  lx_tensor_ref w = op->kind == LX_OP_LM_HEAD ? head_weight(pr, g, i) : ref(pr, g, i, LX_T_PARAM, 0);
  const lx_op_place *pl = &pr->l->places[g][i];
  snprintf(o->w, PTR, "NULL");
  snprintf(o->b, PTR, "NULL");
  snprintf(o->dw, sizeof o->dw, "NULL");
  snprintf(o->db, sizeof o->db, "NULL");
  if (pl->param_elements[0] > 0 || op->kind == LX_OP_LM_HEAD) {
    at(pr, o->w, PTR, "real", w);
    snprintf(o->dw, sizeof o->dw, "GRAD_OF(%s)", o->w);
  }
  if (pl->param_elements[1] > 0) {
    at(pr, o->b, PTR, "real", ref(pr, g, i, LX_T_PARAM, 1));
    snprintf(o->db, sizeof o->db, "GRAD_OF(%s)", o->b);
  }
  for (int k = 0; k < op->n_saved; k++)
    if (op->saved[k].kind == LX_SAVE_INTERNAL)
      at(pr, o->internal[k], PTR, !strcmp(op->saved[k].what, "dropout_mask") ? "uint8_t" : "real",
         ref(pr, g, i, LX_T_INTERNAL, k));
}

static const char *internal_named(const lx_op *op, const operands *o, const char *what) {
  for (int k = 0; k < op->n_saved; k++)
    if (op->saved[k].kind == LX_SAVE_INTERNAL && !strcmp(op->saved[k].what, what)) return o->internal[k];
  return "NULL";
}

/* ---- shapes of one op, as C expressions ----------------------------------- */

static int tp_of(const printer *pr) { return pr->ir->plan.tp ? pr->ir->plan.tp : 1; }

static int rank_width(const printer *pr, lx_shape s) { return (int)lx_rank_width(pr->ir, s); }

static int in_width(const printer *pr, lx_graph_id g, const lx_op *op) {
  return rank_width(pr, op_at(pr, g, op->inputs[0])->out);
}

static void attention_dims(const printer *pr, lx_graph_id g, const lx_op *op, char *buf, size_t size) {
  int groups = op->heads + 2 * op->kv_heads;
  int d = op_at(pr, g, op->inputs[0])->out.width / groups;
  int t = op_at(pr, g, op->inputs[0])->out.split ? tp_of(pr) : 1;
  snprintf(buf, size, "B, T, %d, %d, %d", op->heads / t, op->kv_heads / t, d);
}

/* ---- forward --------------------------------------------------------------- */

static void print_rng_stream(const printer *pr, lx_graph_id g, int i) {
  fprintf(pr->out, "lx_rng_stream(current_step, GLOBAL_MB(mb), %s, %d)", g == LX_GRAPH_BLOCK ? "layer + 1" : g == LX_GRAPH_PROLOGUE ? "0" : "MODEL_LAYERS + 1", i);
}

static void print_forward_op(const printer *pr, lx_graph_id g, int i, lx_tensor_role out_role) {
  const lx_op *op = op_at(pr, g, i);
  operands o;
  gather_operands(pr, g, i, out_role, &o);
  FILE *f = pr->out;
  int w = rank_width(pr, op->out);
  char dims[96];
  fprintf(f, "  /* %s = %s(...)  %s:%d */\n", op->var[0] ? op->var : op->name, lx_op_kind_name(op->kind), lx_file_name(op->src.file),
          op->src.line);
  switch (op->kind) {
  case LX_OP_EMBEDDING: fprintf(f, "  lx_embedding_forward(%s, %s, %s, B, T, %d, VP);\n", o.out, o.in[0], o.w, w); break;
  case LX_OP_POSITION_EMBEDDING: fprintf(f, "  lx_position_embedding_forward(%s, %s, B, T, %d);\n", o.out, o.w, w); break;
  case LX_OP_LAYERNORM: fprintf(f, "  lx_layernorm_forward(%s, %s, %s, %s, BT, %d);\n", o.out, o.in[0], o.w, o.b, w); break;
  case LX_OP_RMSNORM: fprintf(f, "  lx_rmsnorm_forward(%s, %s, %s, BT, %d);\n", o.out, o.in[0], o.w, w); break;
  case LX_OP_LINEAR:
    fprintf(f, "  lx_linear_forward(%s, %s, %s, %s, BT, %d, %d);\n", o.out, o.in[0], o.w, o.b, in_width(pr, g, op), w);
    break;
  case LX_OP_LM_HEAD:
    fprintf(f, "  lx_linear_forward(%s, %s, %s, NULL, BT, %d, VP / %d);\n", o.out, o.in[0], o.w, in_width(pr, g, op),
            tp_of(pr));
    break;
  case LX_OP_ATTENTION:
    attention_dims(pr, g, op, dims, sizeof dims);
    if (op->attention_impl == LX_ATTN_FLASH)
      fprintf(f, "  lx_flash_attention_forward(%s, %s, %s, %s, DROPOUT, seed, ", o.out, internal_named(op, &o, "lse"),
              o.in[0], dims);
    else
      fprintf(f, "  lx_attention_forward(%s, %s, %s, %s, %s, %s, DROPOUT, seed, ", o.out, internal_named(op, &o, "softmax"),
              internal_named(op, &o, "dropout_output"), internal_named(op, &o, "dropout_mask"), o.in[0], dims);
    print_rng_stream(pr, g, i);
    fputs(");\n", f);
    break;
  case LX_OP_ROPE:
    attention_dims(pr, g, op, dims, sizeof dims);
    fprintf(f, "  lx_rope_forward(%s, %s, %s, 10000.0);\n", o.out, o.in[0], dims);
    break;
  case LX_OP_GELU: fprintf(f, "  lx_gelu_forward(%s, %s, (size_t)BT * %d);\n", o.out, o.in[0], w); break;
  case LX_OP_SWIGLU: fprintf(f, "  lx_swiglu_forward(%s, %s, BT, %d);\n", o.out, o.in[0], w); break;
  case LX_OP_DROPOUT:
    fprintf(f, "  lx_dropout_forward(%s, %s, %s, (size_t)BT * %d, DROPOUT, seed, ", o.out,
            internal_named(op, &o, "dropout_mask"), o.in[0], w);
    print_rng_stream(pr, g, i);
    fputs(");\n", f);
    break;
  case LX_OP_ADD: fprintf(f, "  lx_add_forward(%s, %s, %s, (size_t)BT * %d);\n", o.out, o.in[0], o.in[1], w); break;
  case LX_OP_CROSS_ENTROPY:
    fprintf(f, "  loss_sum += lx_cross_entropy_forward(%s, %s, %s, BT, V, VP);\n", internal_named(op, &o, "lse"),
            o.in[0], o.in[1]);
    break;
  case LX_OP_INPUT:
  case LX_OP_KIND_COUNT: break;
  }
}

/* ---- backward -------------------------------------------------------------- */

static void print_backward_op(const printer *pr, lx_graph_id g, int i) {
  const lx_op *op = op_at(pr, g, i);
  operands o;
  gather_operands(pr, g, i, LX_T_OUTPUT, &o);
  FILE *f = pr->out;
  int w = rank_width(pr, op->out);
  char dims[96];
  fprintf(f, "  /* d %s(...)  %s:%d */\n", lx_op_kind_name(op->kind), lx_file_name(op->src.file), op->src.line);
  switch (op->kind) {
  case LX_OP_EMBEDDING: fprintf(f, "  lx_embedding_backward(%s, %s, %s, B, T, %d, VP);\n", o.dw, o.dout, o.in[0], w); break;
  case LX_OP_POSITION_EMBEDDING: fprintf(f, "  lx_position_embedding_backward(%s, %s, B, T, %d);\n", o.dw, o.dout, w); break;
  case LX_OP_LAYERNORM:
    fprintf(f, "  lx_layernorm_backward(%s, %s, %s, %s, %s, %s, BT, %d);\n", o.din[0], o.dw, o.db, o.dout, o.in[0], o.w, w);
    break;
  case LX_OP_RMSNORM:
    fprintf(f, "  lx_rmsnorm_backward(%s, %s, %s, %s, %s, BT, %d);\n", o.din[0], o.dw, o.dout, o.in[0], o.w, w);
    break;
  case LX_OP_LINEAR:
    fprintf(f, "  lx_linear_backward(%s, %s, %s, %s, %s, %s, BT, %d, %d);\n", o.din[0], o.dw, o.db, o.dout, o.in[0],
            o.w, in_width(pr, g, op), w);
    break;
  case LX_OP_LM_HEAD:
    fprintf(f, "  lx_linear_backward(%s, %s, NULL, %s, %s, %s, BT, %d, VP / %d);\n", o.din[0], o.dw, o.dout, o.in[0],
            o.w, in_width(pr, g, op), tp_of(pr));
    break;
  case LX_OP_ATTENTION:
    attention_dims(pr, g, op, dims, sizeof dims);
    if (op->attention_impl == LX_ATTN_FLASH) {
      fprintf(f, "  lx_flash_attention_backward(%s, %s, %s, %s, %s, %s, DROPOUT, seed, ", o.din[0], o.dout, o.in[0],
              o.out, internal_named(op, &o, "lse"), dims);
      print_rng_stream(pr, g, i);
      fputs(");\n", f);
    } else {
      fprintf(f, "  lx_attention_backward(%s, %s, %s, %s, %s, %s, %s, DROPOUT);\n", o.din[0], o.dout, o.in[0],
              internal_named(op, &o, "softmax"), internal_named(op, &o, "dropout_output"),
              internal_named(op, &o, "dropout_mask"), dims);
    }
    break;
  case LX_OP_ROPE:
    attention_dims(pr, g, op, dims, sizeof dims);
    fprintf(f, "  lx_rope_backward(%s, %s, %s, 10000.0);\n", o.din[0], o.dout, dims);
    break;
  case LX_OP_GELU: fprintf(f, "  lx_gelu_backward(%s, %s, %s, (size_t)BT * %d);\n", o.din[0], o.dout, o.in[0], w); break;
  case LX_OP_SWIGLU: fprintf(f, "  lx_swiglu_backward(%s, %s, %s, BT, %d);\n", o.din[0], o.dout, o.in[0], w); break;
  case LX_OP_DROPOUT:
    fprintf(f, "  lx_dropout_backward(%s, %s, %s, (size_t)BT * %d, DROPOUT);\n", o.din[0], o.dout,
            internal_named(op, &o, "dropout_mask"), w);
    break;
  case LX_OP_ADD: fprintf(f, "  lx_add_backward(%s, %s, %s, (size_t)BT * %d);\n", o.din[0], o.din[1], o.dout, w); break;
  case LX_OP_CROSS_ENTROPY:
    fprintf(f, "  lx_cross_entropy_backward(%s, %s, %s, %s, LOSS_SCALE, BT, V, VP);\n", o.din[0], o.in[0],
            internal_named(op, &o, "lse"), o.in[1]);
    break;
  case LX_OP_INPUT:
  case LX_OP_KIND_COUNT: break;
  }
}

/* Gradients accumulate (+=): zero every one this graph instance produces. */
static void print_zero_grads(const printer *pr, lx_graph_id g) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  char buf[PTR];
  for (int i = 0; i < graph->n_ops; i++) {
    const lx_op *op = &graph->ops[i];
    if (i == graph->output || op->out.dtype == LX_DTYPE_INT32 || op->out.scalar) continue;
    lx_place_expr e = lx_place_of(pr->p, pr->s, pr->l, ref(pr, g, i, LX_T_GRAD, 0));
    at(pr, buf, sizeof buf, "char", ref(pr, g, i, LX_T_GRAD, 0));
    fprintf(pr->out, "  memset(%s, 0, %lld * REAL_SCALE);\n", buf, (long long)e.bytes);
  }
}

/* ---- graph functions -------------------------------------------------------- */

static const char *graph_params(lx_graph_id g) { return g == LX_GRAPH_BLOCK ? "int layer, int mb" : "int mb"; }

static void print_function_head(const printer *pr, const char *what, lx_graph_id g) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  fprintf(pr->out, "\n/* %s of %s() (%s:%d) for one micro-batch. */\nstatic void %s_%s(%s) {\n", what, graph->name,
          lx_file_name(graph->src.file), graph->src.line, what, graph->name, graph_params(g));
  if (g != LX_GRAPH_BLOCK) fputs("  const int layer = FIRST_LAYER;\n  (void)layer;\n", pr->out);
}

static void print_forward_function(const printer *pr, lx_graph_id g) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  print_function_head(pr, "forward", g);
  for (int i = 0; i < graph->n_ops; i++)
    if (graph->ops[i].kind != LX_OP_INPUT) print_forward_op(pr, g, i, LX_T_OUTPUT);
  fputs("}\n", pr->out);
}

static bool any_recompute(const printer *pr) {
  for (int i = 0; i < pr->ir->block.n_ops; i++)
    if (pr->st->decisions[i].recompute) return true;
  return false;
}

/* On demand, before the layer's backward: what the policy dropped comes back. */
static void print_recompute_function(const printer *pr) {
  if (!any_recompute(pr)) return;
  print_function_head(pr, "recompute", LX_GRAPH_BLOCK);
  for (int i = 0; i < pr->ir->block.n_ops; i++)
    if (pr->st->decisions[i].recompute) print_forward_op(pr, LX_GRAPH_BLOCK, i, LX_T_RECOMPUTED);
  fputs("}\n", pr->out);
}

static void print_backward_function(const printer *pr, lx_graph_id g) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  print_function_head(pr, "backward", g);
  print_zero_grads(pr, g);
  for (int i = graph->n_ops - 1; i >= 0; i--)
    if (graph->ops[i].kind != LX_OP_INPUT) print_backward_op(pr, g, i);
  fputs("}\n", pr->out);
}

/* ---- the step: the schedule's streams, merged --------------------------------- */

typedef struct {
  int stream;  /* that recorded it; -1 until recorded */
  int request; /* the last non-blocking operation before it on that stream; -1 for none */
} event_state;

typedef struct {
  const printer *pr;
  int next[LX_STREAM_COUNT];
  int last_request[LX_STREAM_COUNT];
  event_state *events;
  bool *waited;
  int requests;
} step_walk;

static const lx_instr *head_of(const step_walk *w, int k) {
  const lx_instr_list *list = &w->pr->st->streams[k];
  return w->next[k] < list->count ? &list->items[w->next[k]] : NULL;
}

static void print_wait(step_walk *w, int request) {
  if (w->waited[request]) return;
  fprintf(w->pr->out, "  lx_wait(&requests[%d]);\n", request);
  w->waited[request] = true;
}

static void print_comm(step_walk *w, int k, const lx_instr *in) {
  FILE *f = w->pr->out;
  char buf[PTR], what[128];
  lx_instr_describe(w->pr->ir, in, what, sizeof what);
  const printer *pr = w->pr;
  lx_tensor_ref t = ref(pr, LX_GRAPH_BLOCK, 0, LX_T_SEND_ACT, 0);
  switch (in->kind) {
  case LX_I_SEND_ACT: t.role = LX_T_SEND_ACT; break;
  case LX_I_SEND_GRAD: t.role = LX_T_SEND_GRAD; break;
  case LX_I_RECV_GRAD: t.role = LX_T_RECV_GRAD; break;
  default: t.role = LX_T_OUTPUT; break; /* RECV_ACT: the first layer's input */
  }
  bool send = in->kind == LX_I_SEND_ACT || in->kind == LX_I_SEND_GRAD;
  fprintf(f, "  {\n    const int mb = %d, layer = FIRST_LAYER;  /* %s */\n    (void)layer;\n", in->mb, what);
  fprintf(f, "    lx_%s(%s, BOUNDARY_ELEMENTS, %d, LX_TAG_%s, mb, &requests[%d]);\n  }\n", send ? "isend" : "irecv",
          at(pr, buf, sizeof buf, "real", t), in->peer,
          in->kind == LX_I_SEND_ACT || in->kind == LX_I_RECV_ACT ? "ACTIVATION" : "GRADIENT",
          w->requests);
  w->last_request[k] = w->requests++;
}

static int print_run(step_walk *w, int k, int at_index);

/* Issues what the other streams can issue now: communication is posted, and
 * recomputation placed in a window runs as soon as the window opens. */
static void advance_streams(step_walk *w) {
  for (int k = 0; k < LX_STREAM_COUNT; k++) {
    if (k == LX_STREAM_COMPUTE) continue;
    const lx_instr *in;
    while ((in = head_of(w, k))) {
      if (in->kind == LX_I_WAIT) {
        event_state *e = &w->events[in->event];
        if (e->stream < 0) break;
        if (e->request >= 0 && e->stream != k) print_wait(w, e->request);
      } else if (in->kind == LX_I_RECORD) {
        w->events[in->event] = (event_state){k, w->last_request[k]};
      } else if (in->kind == LX_I_FWD || in->kind == LX_I_BWD || in->kind == LX_I_RECOMPUTE) {
        w->next[k] = print_run(w, k, w->next[k]);
        continue;
      } else {
        print_comm(w, k, in);
      }
      w->next[k]++;
    }
  }
}

static bool same_run(const lx_instr *a, const lx_instr *b) {
  return a->kind == b->kind && a->graph == b->graph && a->layer == b->layer && a->mb == b->mb;
}

static const char *run_function(lx_instr_kind k) {
  return k == LX_I_FWD ? "forward" : k == LX_I_BWD ? "backward" : "recompute";
}

/* Is the run exactly the body of its graph function (all ops of the instance,
 * in order; for recompute, all the ops the stage recomputes)? */
static bool run_is_function(const printer *pr, const lx_instr *run, int count) {
  const lx_graph *g = lx_graph_of(pr->ir, run->graph);
  int n = 0;
  for (int j = 0; j < g->n_ops; j++) {
    int i = run->kind == LX_I_BWD ? g->n_ops - 1 - j : j;
    bool in_body = g->ops[i].kind != LX_OP_INPUT && (run->kind != LX_I_RECOMPUTE || pr->st->decisions[i].recompute);
    if (!in_body) continue;
    if (n >= count || run[n].op != i) return false;
    n++;
  }
  return n == count;
}

/* Part of a graph's recomputation, where the schedule put it: the ops inline. */
static void print_partial_run(const printer *pr, const lx_instr *run, int count) {
  fprintf(pr->out, "  {\n    const int layer = %d, mb = %d;\n    (void)layer, (void)mb;\n", run->layer, run->mb);
  for (int n = 0; n < count; n++) print_forward_op(pr, run->graph, run[n].op, LX_T_RECOMPUTED);
  fprintf(pr->out, "  }\n");
}

/* A run of FWD/BWD/RECOMPUTE of one graph instance on stream k: one call of
 * its graph function, or its ops inline when it is only part of the body. */
static int print_run(step_walk *w, int k, int at_index) {
  const lx_instr_list *list = &w->pr->st->streams[k];
  const lx_instr *first = &list->items[at_index];
  int end = at_index;
  while (end < list->count && same_run(&list->items[end], first)) end++;
  const char *graph = lx_graph_of(w->pr->ir, first->graph)->name;
  if (first->kind == LX_I_RECOMPUTE && !run_is_function(w->pr, first, end - at_index))
    print_partial_run(w->pr, first, end - at_index);
  else if (first->graph == LX_GRAPH_BLOCK)
    fprintf(w->pr->out, "  %s_%s(%d, %d);\n", run_function(first->kind), graph, first->layer, first->mb);
  else
    fprintf(w->pr->out, "  %s_%s(%d);\n", run_function(first->kind), graph, first->mb);
  return end;
}

static void print_step(const printer *pr) {
  const lx_instr_list *compute = &pr->st->streams[LX_STREAM_COMPUTE];
  int comm = 0; /* non-blocking operations: everything but events on the other streams */
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    for (int i = 0; k != LX_STREAM_COMPUTE && i < pr->st->streams[k].count; i++)
      comm += pr->st->streams[k].items[i].kind != LX_I_RECORD && pr->st->streams[k].items[i].kind != LX_I_WAIT;
  step_walk w = {.pr = pr, .events = calloc((size_t)pr->st->n_events + 1, sizeof(event_state)),
                 .waited = calloc((size_t)comm + 1, sizeof(bool))};
  for (int e = 0; e <= pr->st->n_events; e++) w.events[e] = (event_state){-1, -1};
  for (int k = 0; k < LX_STREAM_COUNT; k++) w.last_request[k] = -1;
  fprintf(pr->out, "\n/* One optimizer step's forwards and backwards, in the order of the schedule\n"
                   " * (%s, plan.txt): the compute stream, with the communication streams'\n"
                   " * operations posted as soon as their waits allow. */\nstatic void run_schedule(int step) {\n"
                   "  current_step = step;\n  MPI_Request requests[%d];\n",
          lx_schedule_name(pr->p->kind), comm > 0 ? comm : 1);
  int i = 0;
  while (i < compute->count) {
    advance_streams(&w);
    const lx_instr *in = &compute->items[i];
    switch (in->kind) {
    case LX_I_FWD:
    case LX_I_BWD:
    case LX_I_RECOMPUTE: i = print_run(&w, LX_STREAM_COMPUTE, i); continue;
    case LX_I_LOAD:
      fprintf(pr->out, "  load_micro_batch(%d);\n", in->mb);
      while (i < compute->count && compute->items[i].kind == LX_I_LOAD && compute->items[i].mb == in->mb) i++;
      continue;
    case LX_I_WAIT: {
      event_state *e = &w.events[in->event];
      if (e->request >= 0) print_wait(&w, e->request);
      break;
    }
    case LX_I_RECORD: w.events[in->event] = (event_state){LX_STREAM_COMPUTE, -1}; break;
    default: break; /* the optimizer step runs after the schedule, see train_step */
    }
    i++;
  }
  advance_streams(&w);
  fprintf(pr->out, "  for (int r = 0; r < %d; r++) lx_wait(&requests[r]);\n}\n", w.requests);
  free(w.events);
  free(w.waited);
}

/* ---- data, evaluation, parameters ---------------------------------------------- */

static int targets_op(const lx_ir *ir) {
  for (int i = 0; i < ir->epilogue.n_ops; i++)
    if (ir->epilogue.ops[i].kind == LX_OP_INPUT && ir->epilogue.ops[i].param == 1) return i;
  return -1;
}

/* Each stage draws every micro-batch from its own loader, so stages agree on
 * the data without sending tokens; only the first keeps inputs, the last targets. */
static void print_load(const printer *pr) {
  char tokens[PTR], targets[PTR];
  snprintf(tokens, PTR, "scratch_tokens");
  snprintf(targets, PTR, "scratch_tokens");
  if (pr->st->has_prologue) at(pr, tokens, PTR, "int", ref(pr, LX_GRAPH_PROLOGUE, 0, LX_T_OUTPUT, 0));
  if (pr->st->has_epilogue) at(pr, targets, PTR, "int", ref(pr, LX_GRAPH_EPILOGUE, targets_op(pr->ir), LX_T_OUTPUT, 0));
  if (!pr->st->has_prologue || !pr->st->has_epilogue)
    fprintf(pr->out, "\n/* the half of each (inputs, targets) pair this stage does not use */\nstatic int scratch_tokens[BT];\n");
  fprintf(pr->out, "\n/* LOAD: micro-batch mb's tokens (B, T) and targets (B, T). */\n"
                   "static lx_loader *loader;\n"
                   "static void load_micro_batch(int mb) {\n  (void)mb;\n  lx_loader_next(loader, %s, %s);\n}\n",
          tokens, targets);
}

/* Forward only, micro-batch after micro-batch, for validation and gradient checks. */
static void print_eval(const printer *pr) {
  FILE *f = pr->out;
  char buf[PTR];
  fprintf(f, "\n/* Forward only: validation loss and gradient checks. */\nstatic void run_forward(int step) {\n"
             "  current_step = step;\n  for (int mb = 0; mb < MICRO_BATCHES; mb++) {\n    load_micro_batch(mb);\n");
  if (pr->s > 0)
    fprintf(f, "    {\n      const int layer = FIRST_LAYER;\n      lx_recv(%s, BOUNDARY_ELEMENTS, STAGE - 1, LX_TAG_USER, mb);\n    }\n",
            at(pr, buf, sizeof buf, "real", ref(pr, LX_GRAPH_BLOCK, 0, LX_T_OUTPUT, 0)));
  if (pr->st->has_prologue) fprintf(f, "    forward_prologue(mb);\n");
  if (pr->st->n_layers) fprintf(f, "    for (int layer = FIRST_LAYER; layer < FIRST_LAYER + LAYERS; layer++) forward_block(layer, mb);\n");
  if (pr->st->has_epilogue) fprintf(f, "    forward_epilogue(mb);\n");
  else
    fprintf(f, "    lx_send(%s, BOUNDARY_ELEMENTS, STAGE + 1, LX_TAG_USER, mb);\n",
            at(pr, buf, sizeof buf, "real", ref(pr, LX_GRAPH_BLOCK, 0, LX_T_SEND_ACT, 0)));
  fprintf(f, "  }\n}\n");
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

/* ---- llm.c's GPT-2 checkpoint: which file tensor a parameter is ------------------ */

/* The block of a GPT-2 in llm.c's order: ln1, qkv, attproj, ln2, fc, fcproj. */
static const lx_op_kind gpt2_block_params[] = {LX_OP_LAYERNORM, LX_OP_LINEAR, LX_OP_LINEAR,
                                               LX_OP_LAYERNORM, LX_OP_LINEAR, LX_OP_LINEAR};

static int param_ops(const lx_graph *g, int *ops, int max) {
  int n = 0;
  for (int i = 0; i < g->n_ops; i++)
    if (g->ops[i].params > 0 || g->ops[i].kind == LX_OP_LM_HEAD) {
      if (n < max) ops[n] = i;
      n++;
    }
  return n;
}

static bool is_gpt2(const lx_ir *ir) {
  int ops[8];
  if (param_ops(&ir->block, ops, 8) != 6 || !ir->model.tied_embeddings) return false;
  for (int k = 0; k < 6; k++)
    if (ir->block.ops[ops[k]].kind != gpt2_block_params[k] || !ir->block.ops[ops[k]].has_bias) return false;
  int pro[4], epi[4];
  return param_ops(&ir->prologue, pro, 4) == 2 && ir->prologue.ops[pro[0]].kind == LX_OP_EMBEDDING &&
         ir->prologue.ops[pro[1]].kind == LX_OP_POSITION_EMBEDDING && param_ops(&ir->epilogue, epi, 4) == 2 &&
         ir->epilogue.ops[epi[0]].kind == LX_OP_LAYERNORM && ir->epilogue.ops[epi[1]].kind == LX_OP_LM_HEAD;
}

/* Element offset of a parameter in llm.c's file, or -1. */
static long long gpt2_file_element(const lx_ir *ir, lx_graph_id g, int layer, int op, int k) {
  long long C = ir->model.hidden, L = ir->model.layers, Vp = ir->padded_vocab, T = ir->model.seq_len;
  long long per_layer[12] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
  int ops[8], n;
  if (g == LX_GRAPH_PROLOGUE) {
    n = param_ops(&ir->prologue, ops, 8);
    return ops[0] == op ? 0 : Vp * C;
  }
  long long base = Vp * C + T * C;
  if (g == LX_GRAPH_EPILOGUE) {
    n = param_ops(&ir->epilogue, ops, 8);
    if (op == ops[1]) return 0; /* the tied head is wte */
    long long end = base;
    for (int t = 0; t < 12; t++) end += L * per_layer[t];
    return end + k * C;
  }
  n = param_ops(&ir->block, ops, 8);
  int index = 0;
  while (index < n && ops[index] != op) index++;
  int tensor = 2 * index + k;
  for (int t = 0; t < tensor; t++) base += L * per_layer[t];
  return base + layer * per_layer[tensor];
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

static void print_param_row(const printer *pr, lx_graph_id g, int layer, int i, int k, bool gpt2) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  const lx_op *op = &graph->ops[i];
  const lx_op_place *pl = &pr->l->places[g][i];
  if (pl->param_elements[k] <= 0) return;
  lx_span span = lx_locate(pr->p, pr->s, pr->l, (lx_tensor_ref){g, layer, i, 0, LX_T_PARAM, k});
  long long element = (span.offset - pr->l->region_offset[LX_REGION_PARAMS]) / pr->l->param_elt;
  bool weight = k == 0 && op->kind != LX_OP_LAYERNORM && op->kind != LX_OP_RMSNORM;
  bool tied_copy = op->kind == LX_OP_LM_HEAD && op->params_per_rank == 0;
  bool residual_projection = op->kind == LX_OP_LINEAR && feeds_residual_add(graph, i);
  double std = !weight ? 0 : residual_projection ? 0.02 / sqrt(2.0 * pr->ir->model.layers) : 0.02;
  double constant = !weight && k == 0 ? 1 : 0; /* norm scales start at one, biases and shifts at zero */
  long long stream = tied_copy ? init_stream(LX_GRAPH_PROLOGUE, -1, embedding_op(pr->ir), 0) : init_stream(g, layer, i, k);
  long long file = gpt2 ? gpt2_file_element(pr->ir, g, layer, i, k) : -1;
  fprintf(pr->out, "  {\"%s%s%d %s.%s\", %lldLL, %lldLL, %.17g, %g, %d, %lldLL, %lldLL, %d, %d},\n",
          graph->name, g == LX_GRAPH_BLOCK ? " layer " : "", g == LX_GRAPH_BLOCK ? layer : 0, op->name,
          k ? "bias" : "weight", element, (long long)pl->param_elements[k], std, constant, weight ? 1 : 0, stream,
          file, tied_copy ? 0 : 1, tied_copy || op->kind == LX_OP_EMBEDDING ? 1 : 0);
}

static void print_param_rows(const printer *pr, lx_graph_id g, int layer, bool gpt2) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  for (int i = 0; i < graph->n_ops; i++)
    for (int k = 0; k < 2; k++) print_param_row(pr, g, layer, i, k, gpt2);
}

static void print_param_table(const printer *pr) {
  bool gpt2 = is_gpt2(pr->ir);
  fprintf(pr->out, "\n/* Every parameter tensor of the stage: name, element offset in the params\n"
                   " * region, elements, init std (0: constant), init constant, weight decay,\n"
                   " * init stream, element in llm.c's GPT-2 checkpoint (-1: none), whether this\n"
                   " * stage writes it there, whether it is the tied embedding table. */\n"
                   "static const lx_param_tensor param_tensors[] = {\n");
  if (pr->st->has_prologue) print_param_rows(pr, LX_GRAPH_PROLOGUE, -1, gpt2);
  for (int l = pr->st->first_layer; l < pr->st->first_layer + pr->st->n_layers; l++)
    print_param_rows(pr, LX_GRAPH_BLOCK, l, gpt2);
  if (pr->st->has_epilogue) print_param_rows(pr, LX_GRAPH_EPILOGUE, -1, gpt2);
  fprintf(pr->out, "};\nenum { PARAM_TENSORS = sizeof param_tensors / sizeof param_tensors[0] };\n");
  fprintf(pr->out, "#define GPT2_CHECKPOINT %d\n", gpt2 ? 1 : 0);
  fprintf(pr->out, "static const lx_gpt2_header gpt2_header = {%d, %d, %d, %d, %d, %d};\n", pr->ir->model.seq_len,
          pr->ir->model.vocab, pr->ir->model.layers, pr->ir->model.heads, pr->ir->model.hidden, pr->ir->padded_vocab);
}

static void print_string_macro(FILE *f, const char *name, const char *value) {
  fprintf(f, "#define %s ", name);
  if (!value) {
    fputs("NULL\n", f);
    return;
  }
  fputc('"', f);
  for (const char *c = value; *c; c++) fprintf(f, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
  fputs("\"\n", f);
}

/* The model file's training settings: the defaults run.sh's options override. */
static void print_training(const printer *pr) {
  const lx_training *t = &pr->ir->training;
  FILE *f = pr->out;
  fprintf(f, "\n/* training (struct lx_training of the model file) */\n");
  fprintf(f, "#define TRAINING_STEPS %d\n#define TRAINING_LR %.17g\n#define TRAINING_MIN_LR %.17g\n", t->steps, t->lr,
          t->min_lr);
  fprintf(f, "#define TRAINING_WARMUP %d\n#define TRAINING_LR_SCHEDULE %d\n", t->warmup_steps, (int)t->lr_schedule);
  fprintf(f, "#define TRAINING_BETA1 %.17g\n#define TRAINING_BETA2 %.17g\n#define TRAINING_EPS %.17g\n", t->beta1,
          t->beta2, t->eps);
  fprintf(f, "#define TRAINING_WEIGHT_DECAY %.17g\n#define TRAINING_GRAD_CLIP %.17g\n", t->weight_decay, t->grad_clip);
  fprintf(f, "#define TRAINING_SEED %d\n#define TRAINING_VAL_INTERVAL %d\n#define TRAINING_CHECKPOINT_INTERVAL %d\n",
          t->seed, t->val_interval, t->checkpoint_interval);
  print_string_macro(f, "TRAINING_TRAIN_DATA", t->train_data ? t->train_data : "data/train_*.bin");
  print_string_macro(f, "TRAINING_VAL_DATA", t->val_data);
}

/* ---- prelude of the file ------------------------------------------------------- */

static void print_header(const printer *pr) {
  const lx_ir *ir = pr->ir;
  const lx_stage *st = pr->st;
  FILE *f = pr->out;
  fprintf(f, "/* stage%d.c — pipeline stage %d of %d of %s:%s%s layers %d-%d%s.\n", pr->s, pr->s, pr->p->pp,
          lx_file_name(ir->model_path), st->has_prologue ? " prologue," : "", "", st->first_layer,
          st->first_layer + st->n_layers - 1, st->has_epilogue ? ", epilogue" : "");
  fprintf(f, " *\n * Generated by lynxgen from the schedule IR; plan.txt says what is kept, what\n"
             " * is recomputed and where every byte lives. Shapes, the arena layout and the\n"
             " * order of every instruction are compile-time facts here. Do not edit: change\n"
             " * the model file and generate again. */\n");
  fprintf(f, "#include \"lx_runtime.h\"\n#include \"lx_kernels.h\"\n#include \"lx_train.h\"\n\n");
  int dp = ir->plan.dp ? ir->plan.dp : 1;
  fprintf(f, "enum {\n  STAGE = %d, STAGES = %d, FIRST_LAYER = %d, LAYERS = %d, MODEL_LAYERS = %d,\n", pr->s, pr->p->pp,
          st->first_layer, st->n_layers, ir->model.layers);
  fprintf(f, "  MICRO_BATCHES = %d, SLOTS = %d, DATA_PARALLEL = %d,\n", pr->p->micro_batches, pr->l->slots, dp);
  fprintf(f, "  B = %d, T = %d, BT = B * T, C = %d, V = %d, VP = %d,\n", ir->plan.micro_batch ? ir->plan.micro_batch : 1,
          ir->model.seq_len, ir->model.hidden, ir->model.vocab, ir->padded_vocab);
  fprintf(f, "  BOUNDARY_ELEMENTS = BT * C, /* what crosses a stage boundary: (B, T, C) */\n};\n\n");
  fprintf(f, "#define DROPOUT %.17g\n", ir->model.dropout);
  fprintf(f, "#define LOSS_SCALE ((real)1 / (MICRO_BATCHES * DATA_PARALLEL)) /* d loss / d micro-batch loss */\n");
  fprintf(f, "#define GLOBAL_MB(mb) (replica * MICRO_BATCHES + (mb))\n\n");
  fprintf(f, "/* The arena: the static memory plan (plan.txt), in bytes of the model's dtype\n"
             " * (%s); REAL_SCALE stretches it to the element this build computes in. */\n",
          lx_dtype_name(ir->training.dtype));
  fprintf(f, "#define ARENA_BYTES %lldLL\n#define REAL_SCALE (sizeof(real) / %d)\n", (long long)pr->l->total,
          (int)pr->l->activation_elt);
  for (int r = 0; r < LX_REGION_COUNT; r++)
    fprintf(f, "#define REGION_%s %lldLL /* %lld bytes */\n", lx_region_name((lx_region)r),
            (long long)pr->l->region_offset[r], (long long)pr->l->region_bytes[r]);
  int64_t extents[LX_REGION_COUNT];
  lx_layout_extents(pr->p, pr->s, pr->l, extents);
  for (int r = 0; r < LX_REGION_COUNT; r++)
    fprintf(f, "#define EXTENT_%s %lldLL /* bytes its tensors reach */\n", lx_region_name((lx_region)r), (long long)extents[r]);
  fprintf(f, "#define PARAM_ELEMENTS %lldLL\n", (long long)pr->l->param_elements);
  fprintf(f, "static char *arena;\nstatic int replica;\nstatic double loss_sum;\nstatic uint64_t seed;\n"
             "static int current_step; /* dropout masks are drawn per step, micro-batch, layer and op */\n");
  print_training(pr);
  fprintf(f, "#define AT(offset) ((void *)(arena + (size_t)(offset) * REAL_SCALE))\n");
  fprintf(f, "/* a parameter's gradient sits at the same element in the grads region */\n");
  fprintf(f, "#define GRAD_OF(p) ((real *)((char *)(p) + (REGION_grads - REGION_params) * REAL_SCALE))\n");
}

bool lx_emit_stage_cpu(const lx_program *prog, int s, FILE *out) {
  const lx_pipeline *p = prog->pipe;
  const lx_ir *ir = p->ir;
  if ((ir->plan.tp && ir->plan.tp > 1) || (ir->plan.dp && ir->plan.dp > 1)) {
    lx_error(ir->locs.plan, "the CPU target prints pipeline parallelism only (tp = dp = 1); tensor and data "
                            "parallelism are not emitted yet");
    return false;
  }
  printer pr = {out, p, ir, s, &p->stages[s], &prog->layouts[s]};
  print_header(&pr);
  print_block_boundaries(&pr);
  if (pr.st->has_prologue) {
    print_forward_function(&pr, LX_GRAPH_PROLOGUE);
    print_backward_function(&pr, LX_GRAPH_PROLOGUE);
  }
  if (pr.st->n_layers > 0) {
    print_forward_function(&pr, LX_GRAPH_BLOCK);
    print_recompute_function(&pr);
    print_backward_function(&pr, LX_GRAPH_BLOCK);
  }
  if (pr.st->has_epilogue) {
    print_forward_function(&pr, LX_GRAPH_EPILOGUE);
    print_backward_function(&pr, LX_GRAPH_EPILOGUE);
  }
  print_load(&pr);
  print_step(&pr);
  print_eval(&pr);
  print_param_table(&pr);
  fprintf(out, "\n#include \"lx_main.h\"\n");
  return true;
}
