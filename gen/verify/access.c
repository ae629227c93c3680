/* access.c — the tensors an instruction touches (see access.h). */
#include "verify/access.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "planning/passes.h"

typedef struct {
  lx_access *out;
  int n, max;
  const lx_stage *st;
  const lx_instr *in; /* the instruction whose accesses these are */
} access_list;

static void put_access(access_list *list, lx_access a) {
  if (list->n < list->max) list->out[list->n] = a;
  list->n++;
}

static bool token_split_output(const lx_stage *st, lx_tensor_ref t) {
  return t.graph == LX_GRAPH_BLOCK && (t.role == LX_T_OUTPUT || t.role == LX_T_RECOMPUTED) && st->decisions &&
         lx_token_split(&st->decisions[t.op]);
}

/* The pieces of a head-split op's tensors (lx_rows) that `in` touches: a
 * RECOMPUTE of some pieces writes theirs; 0 where the tensor is not one. */
static int head_pieces(const lx_stage *st, const lx_instr *in, lx_access a, int *first, int *end) {
  lx_tensor_ref t = a.tensor;
  bool made = t.role == LX_T_OUTPUT || t.role == LX_T_RECOMPUTED || t.role == LX_T_INTERNAL;
  if (a.target != LX_TARGET_TENSOR || t.graph != LX_GRAPH_BLOCK || !made || !st->decisions) return 0;
  const lx_op_decision *d = &st->decisions[t.op];
  if (!d->recompute || !d->in_window || lx_window_pieces(d) < 2) return 0;
  bool part = in->kind == LX_I_RECOMPUTE && in->op == t.op && in->pieces > 0 && a.mode != LX_ACCESS_READ;
  *first = part ? in->piece_first : 0;
  *end = part ? in->piece_end : d->window_pieces;
  return d->window_pieces;
}

/* A token-split op's output is two values (lx_rows): its RECOMPUTE writes the
 * rows it recomputes, the host copies move the others, everything else
 * touches both. A head-split op's tensors are a value per piece. */
static void add(access_list *list, lx_access a) {
  int first, end;
  if (head_pieces(list->st, list->in, a, &first, &end)) {
    for (int k = first; k < end; k++)
      a.rows = LX_ROWS_HEAD_PIECE + k, put_access(list, a);
    return;
  }
  if (a.target != LX_TARGET_TENSOR || !token_split_output(list->st, a.tensor)) {
    put_access(list, a);
    return;
  }
  const lx_instr *in = list->in;
  bool host_copy = in->kind == LX_I_OFFLOAD || in->kind == LX_I_PREFETCH;
  bool remade = in->kind == LX_I_RECOMPUTE && in->op == a.tensor.op && a.mode != LX_ACCESS_READ;
  if (!remade) a.rows = LX_ROWS_HOSTED, put_access(list, a);
  if (!host_copy) a.rows = LX_ROWS_RECOMPUTED, put_access(list, a);
}

static void add_tensor(access_list *list, lx_tensor_ref t, lx_access_mode mode) {
  add(list, (lx_access){.target = LX_TARGET_TENSOR, .tensor = t, .mode = mode});
}

static void add_region(access_list *list, const lx_stage_layout *l, lx_region r, lx_access_mode mode) {
  if (l->region_bytes[r] > 0) add(list, (lx_access){.target = LX_TARGET_REGION, .region = r, .mode = mode});
}

static lx_tensor_ref ref(const lx_instr *in, int op, lx_tensor_role role, int index) {
  return (lx_tensor_ref){in->graph, in->layer, op, in->mb, role, index};
}

lx_tensor_ref lx_boundary_ref(const lx_pipeline *p, int stage, lx_tensor_role role, int chunk, int mb) {
  const lx_stage *st = &p->stages[stage];
  /* lx_locate ignores the op of a boundary buffer; name the block's output of
   * the chunk's last layer so that the reference is valid and unique */
  return (lx_tensor_ref){
      LX_GRAPH_BLOCK, lx_chunk_last_layer(&st->chunks[chunk]), p->ir->block.output, mb, role, 0};
}

/* The first embedding of the prologue: the table a tied LM head shares. */
static int embedding_op(const lx_ir *ir) {
  for (int i = 0; i < ir->prologue.n_ops; i++)
    if (ir->prologue.ops[i].kind == LX_OP_EMBEDDING) return i;
  return -1;
}

/* Parameter k (ir.h LX_PARAM_*) that op `in->op` computes with: its own, or
 * for a tied LM head that holds no copy (it shares the stage with the
 * embedding) the table. False where the op has none, and for its gradient
 * (`grad`) where it is frozen. */
static bool param_of(const lx_pipeline *p, int stage, const lx_stage_layout *l, const lx_instr *in, int k,
                     bool grad, lx_tensor_ref *out) {
  const lx_op *op = &lx_graph_of(p->ir, in->graph)->ops[in->op];
  if (l->places[in->graph][in->op].param_elements[k] > 0) {
    *out = (lx_tensor_ref){in->graph, in->layer, in->op, -1, LX_T_PARAM, k};
    return !grad || lx_param_trained(p->ir, op, k);
  }
  bool tied_head = op->kind == LX_OP_LM_HEAD && k == 0 && p->stages[stage].has_prologue;
  if (!tied_head || embedding_op(p->ir) < 0) return false;
  *out = (lx_tensor_ref){LX_GRAPH_PROLOGUE, -1, embedding_op(p->ir), -1, LX_T_PARAM, 0};
  return !grad || lx_param_trained(p->ir, &p->ir->prologue.ops[embedding_op(p->ir)], 0);
}

/* A backward reads an input it keeps, or makes again piece by piece: a
 * frozen matmul (fine-tuning) keeps none, its gradient needs only W. */
static bool backward_reads_input(const lx_graph *g, int i, int k) {
  int producer = g->ops[i].inputs[k];
  return lx_op_saves(g, i, producer) || lx_chunk_local(g, producer);
}

/* Integer tensors (tokens, targets) have no gradient. */
static bool has_gradient(const lx_op *producer) { return producer->out.dtype != LX_DTYPE_INT32; }

/* Sequence parallelism: an op with an all-gather before it reads the whole
 * gathered tensor instead of its shard, one with a reduce-scatter after it
 * writes the whole partial result instead. */
static lx_tensor_ref gathered(const lx_instr *in, int index) {
  return ref(in, in->op, LX_T_SP_GATHERED, index);
}
static lx_tensor_ref whole(const lx_instr *in, int index) { return ref(in, in->op, LX_T_SP_WHOLE, index); }

static int saved_index(const lx_op *op, const char *what) {
  for (int k = 0; k < op->n_saved; k++)
    if (op->saved[k].kind == LX_SAVE_INTERNAL && !strcmp(op->saved[k].what, what)) return k;
  return -1;
}

/* The tensor of operand o, around the op's tensor-parallel collectives. */
static bool operand_tensor(const lx_pipeline *p, int stage, const lx_instr *in, const lx_operand *o,
                           bool backward, lx_tensor_ref *t) {
  const lx_graph *g = lx_graph_of(p->ir, in->graph);
  const lx_op *op = &g->ops[in->op];
  lx_tp_collectives c = lx_tp_collectives_of(p->ir, op, backward);
  bool column = op->tp_role == LX_TP_COLUMN, scattered = c.reduce_after && c.reduce == LX_COLL_REDUCE_SCATTER;
  switch (o->kind) {
  case LX_OPND_IN:
    if (backward && !backward_reads_input(g, in->op, o->index)) return false;
    *t = o->index == 0 && c.gather_before && column ? gathered(in, 0)
                                                    : ref(in, op->inputs[o->index], LX_T_OUTPUT, 0);
    return true;
  case LX_OPND_OUT:
    if (op->out.scalar) return false;
    if (in->kind == LX_I_RECOMPUTE && in->graph == LX_GRAPH_BLOCK &&
        lx_recomputes_internals_only(g, p->stages[stage].decisions, in->op))
      return false; /* its output is kept: the recompute makes the probabilities alone */
    *t = backward                     ? ref(in, in->op, LX_T_OUTPUT, 0)
         : scattered                  ? whole(in, 0)
         : in->kind == LX_I_RECOMPUTE ? ref(in, in->op, LX_T_RECOMPUTED, 0)
                                      : ref(in, in->op, LX_T_OUTPUT, 0);
    return true;
  case LX_OPND_SAVED: {
    int k = saved_index(op, o->saved);
    if (k >= 0) *t = ref(in, in->op, LX_T_INTERNAL, k);
    return k >= 0;
  }
  case LX_OPND_DOUT:
    if (op->out.scalar) return false; /* the loss seeds the backward: no buffer */
    *t = c.gather_before && !column ? gathered(in, 1) : ref(in, in->op, LX_T_GRAD, 0);
    return true;
  case LX_OPND_DIN:
    if (!has_gradient(&g->ops[op->inputs[o->index]])) return false;
    *t = o->index == 0 && scattered ? whole(in, 1) : ref(in, op->inputs[o->index], LX_T_GRAD, 0);
    return true;
  default: return false;
  }
}

bool lx_operand_access(const lx_pipeline *p, int stage, const lx_stage_layout *l, const lx_instr *in,
                       const lx_operand *o, lx_access *out) {
  bool backward = in->kind == LX_I_BWD || in->kind == LX_I_BWD_WEIGHT;
  *out = (lx_access){.target = LX_TARGET_TENSOR, .mode = lx_operand_mode(o->kind, backward)};
  if (o->kind == LX_OPND_DIN &&
      lx_writes_input_gradient(p->ir, lx_graph_of(p->ir, in->graph), in->op, o->index))
    out->mode = LX_ACCESS_WRITE; /* the gradient's one contribution, written */
  switch (o->kind) {
  case LX_OPND_WEIGHT:
  case LX_OPND_BIAS:
  case LX_OPND_ADAPTER: return param_of(p, stage, l, in, lx_operand_param(o), false, &out->tensor);
  case LX_OPND_DWEIGHT:
  case LX_OPND_DBIAS:
  case LX_OPND_DADAPTER:
    out->target = LX_TARGET_PARAM_GRAD;
    return param_of(p, stage, l, in, lx_operand_param(o), true, &out->tensor);
  default: return operand_tensor(p, stage, in, o, backward, &out->tensor);
  }
}

static bool listed(const int *set, int n, int j) {
  for (int k = 0; k < n; k++)
    if (set[k] == j) return true;
  return false;
}

/* The operands of the kernel the instruction runs, those of the part it
 * runs (op_signature.h), but an input among `made`: the instruction has just
 * made its piece again, itself. */
static void operand_accesses(const lx_pipeline *p, int stage, const lx_stage_layout *l, const lx_instr *in,
                             const int *made, int n_made, access_list *list) {
  const lx_op *op = &lx_graph_of(p->ir, in->graph)->ops[in->op];
  lx_kernel_part part = lx_instr_part(p->ir, &p->stages[stage], in);
  bool backward = in->kind == LX_I_BWD || in->kind == LX_I_BWD_WEIGHT;
  for (const lx_operand *o = lx_op_operands(op, backward); o->kind != LX_OPND_END; o++) {
    lx_access a;
    if (o->kind == LX_OPND_IN && listed(made, n_made, op->inputs[o->index])) continue;
    if (lx_operand_in_part(o->kind, part) && lx_operand_access(p, stage, l, in, o, &a)) add(list, a);
  }
}

/* A FWD, RECOMPUTE, BWD or BWD_WEIGHT touches its kernel's operands. In
 * mini-sequences a backward first makes the pieces of chunk-local inputs
 * again (lx_made_again): their forwards' operands too. */
static void kernel_accesses(const lx_pipeline *p, int stage, const lx_stage_layout *l, const lx_instr *in,
                            access_list *list) {
  const lx_graph *g = lx_graph_of(p->ir, in->graph);
  if (in->kind != LX_I_BWD || g->ops[in->op].chunks < 2) {
    operand_accesses(p, stage, l, in, NULL, 0, list);
    return;
  }
  int *made = lx_malloc(sizeof *made * (size_t)g->n_ops), n_made = lx_made_again(g, in->op, made);
  for (int k = 0; k < n_made; k++) {
    lx_instr producer = *in;
    producer.kind = LX_I_FWD, producer.op = made[k];
    operand_accesses(p, stage, l, &producer, made, k, list); /* its inputs made before it */
  }
  operand_accesses(p, stage, l, in, made, n_made, list);
  free(made);
}

/* The gradient buffers a graph instance's backward accumulates into: every
 * float activation's but the graph output's (that one is the next graph's
 * input gradient, or arrives from the next stage). */
static bool has_gradient_buffer(const lx_graph *g, int i) {
  const lx_op *op = &g->ops[i];
  return i != g->output && has_gradient(op) && !op->out.scalar;
}

/* The backward of a graph instance runs its ops last to first; the first
 * one zeroes the instance's gradient buffers before anything adds to them. */
bool lx_starts_instance_backward(const lx_graph *g, int i) {
  for (int j = g->n_ops - 1; j > i; j--)
    if (g->ops[j].kind != LX_OP_INPUT) return false;
  return true;
}

static void backward_accesses(const lx_pipeline *p, int stage, const lx_stage_layout *l, const lx_instr *in,
                              access_list *list) {
  const lx_graph *g = lx_graph_of(p->ir, in->graph);
  if (lx_starts_instance_backward(g, in->op))
    for (int j = 0; j < g->n_ops; j++)
      if (has_gradient_buffer(g, j) && !lx_gradient_written_by_consumer(p->ir, g, j))
        add_tensor(list, ref(in, j, LX_T_GRAD, 0), LX_ACCESS_WRITE);
  kernel_accesses(p, stage, l, in, list);
}

/* An all-reduce sums a tensor in place; under sequence parallelism a
 * reduce-scatter makes the shard from the whole partial tensor and an
 * all-gather the whole tensor from the shards. */
static void allreduce_tp_accesses(const lx_pipeline *p, const lx_instr *in, access_list *list) {
  const lx_op *op = &lx_graph_of(p->ir, in->graph)->ops[in->op];
  lx_tensor_ref reduced = in->backward     ? ref(in, op->inputs[0], LX_T_GRAD, 0)
                          : in->recomputed ? ref(in, in->op, LX_T_RECOMPUTED, 0)
                                           : ref(in, in->op, LX_T_OUTPUT, 0);
  bool column = op->tp_role == LX_TP_COLUMN;
  switch (in->coll) {
  case LX_COLL_ALLREDUCE: add_tensor(list, reduced, LX_ACCESS_ACCUMULATE); break;
  case LX_COLL_REDUCE_SCATTER:
    add_tensor(list, whole(in, in->backward), LX_ACCESS_READ);
    add_tensor(list, reduced, LX_ACCESS_WRITE);
    break;
  case LX_COLL_ALLGATHER: {
    bool output_grad = in->backward && !column;
    add_tensor(list, output_grad ? ref(in, in->op, LX_T_GRAD, 0) : ref(in, op->inputs[0], LX_T_OUTPUT, 0),
               LX_ACCESS_READ);
    add_tensor(list, gathered(in, output_grad), LX_ACCESS_WRITE);
    break;
  }
  }
}

/* An offloaded op's saved tensors and their host copies: OFFLOAD reads the
 * tensors and writes the copies, PREFETCH the other way. */
static void host_copy_accesses(const lx_stage_layout *l, const lx_instr *in, access_list *list) {
  const lx_op_place *pl = &l->places[in->graph][in->op];
  bool offload = in->kind == LX_I_OFFLOAD;
  for (int k = 0; k <= LX_MAX_SAVED; k++) {
    if (pl->host_offset[k] < 0) continue;
    lx_tensor_ref device = k == 0 ? ref(in, in->op, LX_T_OUTPUT, 0) : ref(in, in->op, LX_T_INTERNAL, k - 1);
    add_tensor(list, device, offload ? LX_ACCESS_READ : LX_ACCESS_WRITE);
    add_tensor(list, ref(in, in->op, LX_T_HOST, k), offload ? LX_ACCESS_WRITE : LX_ACCESS_READ);
  }
}

/* The bucket's gradients, and nothing else of the region. */
static void allreduce_dp_accesses(const lx_stage_layout *l, const lx_instr *in, access_list *list) {
  const lx_param_bucket *b = lx_find_bucket(l, in->graph, in->layer, in->tied);
  if (!b) return;
  lx_span span = {LX_REGION_GRADS, l->region_offset[LX_REGION_GRADS] + b->first * 4, b->elements * 4};
  add(list, (lx_access){.target = LX_TARGET_SPAN, .span = span, .mode = LX_ACCESS_ACCUMULATE});
}

static void optimizer_accesses(const lx_stage_layout *l, access_list *list) {
  add_region(list, l, LX_REGION_GRADS, LX_ACCESS_READ);
  static const lx_region updated[] = {LX_REGION_PARAMS, LX_REGION_MASTER, LX_REGION_ADAM_M, LX_REGION_ADAM_V};
  for (size_t k = 0; k < sizeof updated / sizeof updated[0]; k++)
    add_region(list, l, updated[k], LX_ACCESS_WRITE);
}

int lx_instr_access(const lx_pipeline *p, int stage, const lx_stage_layout *l, const lx_instr *in,
                    lx_access *out, int max) {
  access_list list = {out, 0, max, &p->stages[stage], in};
  const lx_stage *st = &p->stages[stage];
  switch (in->kind) {
  case LX_I_FWD:
  case LX_I_RECOMPUTE:
  case LX_I_BWD_WEIGHT: kernel_accesses(p, stage, l, in, &list); break;
  case LX_I_BWD: backward_accesses(p, stage, l, in, &list); break;
  case LX_I_LOAD: add_tensor(&list, ref(in, in->op, LX_T_OUTPUT, 0), LX_ACCESS_WRITE); break;
  case LX_I_SEND_ACT:
    add_tensor(&list, lx_boundary_ref(p, stage, LX_T_SEND_ACT, in->chunk, in->mb), LX_ACCESS_READ);
    break;
  case LX_I_SEND_GRAD:
    add_tensor(&list, lx_boundary_ref(p, stage, LX_T_SEND_GRAD, in->chunk, in->mb), LX_ACCESS_READ);
    break;
  case LX_I_RECV_GRAD:
    add_tensor(&list, lx_boundary_ref(p, stage, LX_T_RECV_GRAD, in->chunk, in->mb), LX_ACCESS_WRITE);
    break;
  case LX_I_RECV_ACT: /* into the input of the chunk's first layer */
    add_tensor(&list,
               (lx_tensor_ref){LX_GRAPH_BLOCK, st->chunks[in->chunk].first_layer, 0, in->mb, LX_T_OUTPUT, 0},
               LX_ACCESS_WRITE);
    break;
  case LX_I_ALLREDUCE_TP: allreduce_tp_accesses(p, in, &list); break;
  case LX_I_ALLREDUCE_DP: allreduce_dp_accesses(l, in, &list); break;
  case LX_I_OPTIMIZER_STEP: optimizer_accesses(l, &list); break;
  case LX_I_OFFLOAD:
  case LX_I_PREFETCH: host_copy_accesses(l, in, &list); break;
  default: break; /* RECORD, WAIT: no data */
  }
  return list.n;
}

lx_span lx_param_grad_span(const lx_pipeline *p, int stage, const lx_stage_layout *l, lx_tensor_ref param) {
  lx_span weights = lx_locate(p, stage, l, param);
  int64_t element = (weights.offset - l->region_offset[LX_REGION_PARAMS]) / l->param_elt;
  int64_t elements = weights.bytes / l->param_elt;
  return (lx_span){LX_REGION_GRADS, l->region_offset[LX_REGION_GRADS] + element * 4, elements * 4};
}

/* The rows of a tensor's span: a token split cuts it where its recomputed
 * rows start, a head split into its pieces' shares. */
static lx_span rows_of(const lx_pipeline *p, int stage, lx_span whole, const lx_access *a) {
  if (a->rows == LX_ROWS_ALL) return whole;
  const lx_op_decision *d = &p->stages[stage].decisions[a->tensor.op];
  if (a->rows >= LX_ROWS_HEAD_PIECE) {
    int64_t k = a->rows - LX_ROWS_HEAD_PIECE, share = whole.bytes / d->window_pieces;
    int64_t bytes = k == d->window_pieces - 1 ? whole.bytes - k * share : share;
    return (lx_span){whole.region, whole.offset + k * share, bytes};
  }
  int64_t hosted = lx_token_hosted(d, whole.bytes);
  if (a->rows == LX_ROWS_HOSTED) return (lx_span){whole.region, whole.offset, hosted};
  return (lx_span){whole.region, whole.offset + hosted, whole.bytes - hosted};
}

lx_span lx_access_span(const lx_pipeline *p, int stage, const lx_stage_layout *l, const lx_access *a) {
  switch (a->target) {
  case LX_TARGET_TENSOR: return rows_of(p, stage, lx_locate(p, stage, l, a->tensor), a);
  case LX_TARGET_PARAM_GRAD: return lx_param_grad_span(p, stage, l, a->tensor);
  case LX_TARGET_REGION: return (lx_span){a->region, l->region_offset[a->region], l->region_bytes[a->region]};
  case LX_TARGET_SPAN: return a->span;
  }
  return (lx_span){LX_REGION_COUNT, -1, 0};
}

void lx_tensor_describe(const lx_ir *ir, lx_tensor_ref t, char *buf, size_t size) {
  static const char *roles[] = {"output",    "internal",   "grad",        "param",    "send_act", "send_grad",
                                "recv_grad", "recomputed", "sp_gathered", "sp_whole", "host"};
  const char *role = (size_t)t.role < sizeof roles / sizeof roles[0] ? roles[t.role] : "?";
  if (t.role == LX_T_SEND_ACT || t.role == LX_T_SEND_GRAD || t.role == LX_T_RECV_GRAD) {
    snprintf(buf, size, "%s mb%d", role, t.mb);
    return;
  }
  const lx_graph *g = lx_graph_of(ir, t.graph);
  char layer[16] = "", mb[16] = "", index[16] = "";
  if (t.layer >= 0) snprintf(layer, sizeof layer, " L%d", t.layer);
  if (t.mb >= 0) snprintf(mb, sizeof mb, " mb%d", t.mb);
  if (t.role == LX_T_INTERNAL || t.role == LX_T_PARAM || t.role == LX_T_HOST)
    snprintf(index, sizeof index, " %d", t.index);
  snprintf(buf, size, "%s.%s%s%s %s%s", g->name, g->ops[t.op].name, layer, mb, role, index);
}
