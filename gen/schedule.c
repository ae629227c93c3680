/* schedule.c — per-stage instruction lists of a pipeline schedule.
 *
 * Each stage runs its micro-batches' forwards F(m) and backwards B(m) on the
 * compute stream in the order of the schedule (GPipe: all F then all B;
 * 1F1B: p - s - 1 warm-up forwards, then F and B alternating, then the
 * remaining B). Receives, sends and collectives sit on their own streams,
 * tied to the compute stream by RECORD/WAIT event pairs, so that the compute
 * stream's idle intervals are explicit: the windows recomputation can use. */
#include <stdlib.h>

#include "diag.h"
#include "passes.h"

typedef struct {
  const lx_ir *ir;
  lx_pipeline *pipe;
  lx_stage *st;
  int tp;
  /* per micro-batch: events recorded when its stash slot is free again and
   * when its outgoing buffers have been sent; -1 until recorded */
  int *slot_free, *act_sent, *grad_sent;
} builder;

static void emit(builder *b, lx_stream s, lx_instr in) { lx_instr_append(&b->st->streams[s], in); }

static int record(builder *b, lx_stream on) {
  int e = b->st->n_events++;
  emit(b, on, (lx_instr){.kind = LX_I_RECORD, .event = e, .layer = -1, .mb = -1});
  return e;
}

static void wait_for(builder *b, lx_stream on, int event) {
  emit(b, on, (lx_instr){.kind = LX_I_WAIT, .event = event, .layer = -1, .mb = -1});
}

/* `to` waits until everything issued so far on `from` is done. */
static void sync_streams(builder *b, lx_stream from, lx_stream to) { wait_for(b, to, record(b, from)); }

/* Buffers of micro-batch mb reuse those of mb - slots: wait until that one
 * is done with them (`done` holds its events, -1 if there was none). */
static void wait_for_reuse(builder *b, lx_stream on, const int *done, int mb) {
  int previous = mb - b->st->stashed_micro_batches;
  if (previous >= 0 && done[previous] >= 0) wait_for(b, on, done[previous]);
}

static bool forward_allreduce(const builder *b, const lx_op *op) {
  return b->tp > 1 && (op->needs_tp_allreduce || op->kind == LX_OP_EMBEDDING);
}

/* Megatron's conjugate: a column-parallel op's input gradient is summed. */
static bool backward_allreduce(const builder *b, const lx_op *op) {
  return b->tp > 1 && op->tp_role == LX_TP_COLUMN;
}

static int64_t input_bytes(const lx_graph *g, const lx_op *op) { return g->ops[op->inputs[0]].out_bytes; }

static void tp_allreduce(builder *b, lx_instr at, int64_t bytes, bool backward) {
  sync_streams(b, LX_STREAM_COMPUTE, LX_STREAM_TP);
  emit(b, LX_STREAM_TP,
       (lx_instr){.kind = LX_I_ALLREDUCE_TP,
                  .graph = at.graph,
                  .layer = at.layer,
                  .op = at.op,
                  .mb = at.mb,
                  .bytes = bytes,
                  .backward = backward});
  sync_streams(b, LX_STREAM_TP, LX_STREAM_COMPUTE);
}

static void run_forward_op(builder *b, lx_instr_kind kind, lx_graph_id gid, int layer, int i, int mb) {
  const lx_graph *g = lx_graph_of(b->ir, gid);
  const lx_op *op = &g->ops[i];
  lx_instr in = {.kind = kind, .graph = gid, .layer = layer, .op = i, .mb = mb};
  emit(b, LX_STREAM_COMPUTE, in);
  if (forward_allreduce(b, op)) tp_allreduce(b, in, op->out_bytes, false);
}

static void run_backward_op(builder *b, lx_graph_id gid, int layer, int i, int mb) {
  const lx_graph *g = lx_graph_of(b->ir, gid);
  const lx_op *op = &g->ops[i];
  lx_instr in = {.kind = LX_I_BWD, .graph = gid, .layer = layer, .op = i, .mb = mb};
  emit(b, LX_STREAM_COMPUTE, in);
  if (backward_allreduce(b, op)) tp_allreduce(b, in, input_bytes(g, op), true);
}

static void forward_graph(builder *b, lx_graph_id gid, int layer, int mb) {
  const lx_graph *g = lx_graph_of(b->ir, gid);
  for (int i = 0; i < g->n_ops; i++)
    if (g->ops[i].kind != LX_OP_INPUT) run_forward_op(b, LX_I_FWD, gid, layer, i, mb);
}

static void backward_graph(builder *b, lx_graph_id gid, int layer, int mb) {
  const lx_graph *g = lx_graph_of(b->ir, gid);
  for (int i = g->n_ops - 1; i >= 0; i--)
    if (g->ops[i].kind != LX_OP_INPUT) run_backward_op(b, gid, layer, i, mb);
}

/* On demand: the dropped tensors of layer `layer` come back just before its
 * backward, on the critical path (Megatron's full and selective recompute). */
static void recompute_layer(builder *b, int layer, int mb) {
  const lx_graph *g = &b->ir->block;
  for (int i = 0; i < g->n_ops; i++)
    if (b->st->decisions[i].recompute) run_forward_op(b, LX_I_RECOMPUTE, LX_GRAPH_BLOCK, layer, i, mb);
}

/* The epilogue's second parameter: the targets. */
static int targets_input(const lx_ir *ir) {
  for (int i = 0; i < ir->epilogue.n_ops; i++)
    if (ir->epilogue.ops[i].kind == LX_OP_INPUT && ir->epilogue.ops[i].param == 1) return i;
  return 0;
}

static int64_t boundary_bytes(const builder *b) { return b->ir->block.ops[0].out_bytes; }

static void forward_micro_batch(builder *b, int mb) {
  lx_stage *st = b->st;
  if (!st->has_epilogue) wait_for_reuse(b, LX_STREAM_COMPUTE, b->act_sent, mb);
  if (st->index > 0) {
    wait_for_reuse(b, LX_STREAM_RECV, b->slot_free, mb);
    emit(
        b, LX_STREAM_RECV,
        (lx_instr){
            .kind = LX_I_RECV_ACT, .mb = mb, .peer = st->index - 1, .bytes = boundary_bytes(b), .layer = -1});
    sync_streams(b, LX_STREAM_RECV, LX_STREAM_COMPUTE);
  }
  if (st->has_prologue)
    emit(b, LX_STREAM_COMPUTE,
         (lx_instr){.kind = LX_I_LOAD, .graph = LX_GRAPH_PROLOGUE, .op = 0, .mb = mb, .layer = -1});
  if (st->has_epilogue)
    emit(b, LX_STREAM_COMPUTE,
         (lx_instr){.kind = LX_I_LOAD,
                    .graph = LX_GRAPH_EPILOGUE,
                    .op = targets_input(b->ir),
                    .mb = mb,
                    .layer = -1});
  if (st->has_prologue) forward_graph(b, LX_GRAPH_PROLOGUE, -1, mb);
  for (int l = st->first_layer; l < st->first_layer + st->n_layers; l++)
    forward_graph(b, LX_GRAPH_BLOCK, l, mb);
  if (st->has_epilogue) {
    forward_graph(b, LX_GRAPH_EPILOGUE, -1, mb);
  } else {
    sync_streams(b, LX_STREAM_COMPUTE, LX_STREAM_SEND);
    emit(
        b, LX_STREAM_SEND,
        (lx_instr){
            .kind = LX_I_SEND_ACT, .mb = mb, .peer = st->index + 1, .bytes = boundary_bytes(b), .layer = -1});
    b->act_sent[mb] = record(b, LX_STREAM_SEND);
  }
}

static void backward_micro_batch(builder *b, int mb) {
  lx_stage *st = b->st;
  if (st->index > 0) wait_for_reuse(b, LX_STREAM_COMPUTE, b->grad_sent, mb);
  if (!st->has_epilogue) {
    wait_for_reuse(b, LX_STREAM_RECV, b->slot_free, mb);
    emit(b, LX_STREAM_RECV,
         (lx_instr){.kind = LX_I_RECV_GRAD,
                    .mb = mb,
                    .peer = st->index + 1,
                    .bytes = boundary_bytes(b),
                    .layer = -1});
    sync_streams(b, LX_STREAM_RECV, LX_STREAM_COMPUTE);
  } else {
    backward_graph(b, LX_GRAPH_EPILOGUE, -1, mb);
  }
  for (int l = st->first_layer + st->n_layers - 1; l >= st->first_layer; l--) {
    recompute_layer(b, l, mb);
    backward_graph(b, LX_GRAPH_BLOCK, l, mb);
  }
  if (st->has_prologue) backward_graph(b, LX_GRAPH_PROLOGUE, -1, mb);
  if (st->index > 0) {
    sync_streams(b, LX_STREAM_COMPUTE, LX_STREAM_SEND);
    emit(b, LX_STREAM_SEND,
         (lx_instr){.kind = LX_I_SEND_GRAD,
                    .mb = mb,
                    .peer = st->index - 1,
                    .bytes = boundary_bytes(b),
                    .layer = -1});
    b->grad_sent[mb] = record(b, LX_STREAM_SEND);
  }
  b->slot_free[mb] = record(b, LX_STREAM_COMPUTE);
}

static void finish_step(builder *b) {
  int dp = b->ir->plan.dp ? b->ir->plan.dp : 1;
  if (dp > 1) {
    sync_streams(b, LX_STREAM_COMPUTE, LX_STREAM_DP);
    emit(b, LX_STREAM_DP,
         (lx_instr){.kind = LX_I_ALLREDUCE_DP, .mb = -1, .layer = -1, .bytes = b->st->params_per_rank * 4});
    sync_streams(b, LX_STREAM_DP, LX_STREAM_COMPUTE);
  }
  emit(b, LX_STREAM_COMPUTE, (lx_instr){.kind = LX_I_OPTIMIZER_STEP, .mb = -1, .layer = -1});
}

static void schedule_stage(builder *b) {
  int m = b->pipe->micro_batches, p = b->pipe->pp, s = b->st->index;
  int warmup = b->pipe->kind == LX_SCHEDULE_GPIPE ? m : (p - s - 1 < m ? p - s - 1 : m);
  for (int mb = 0; mb < warmup; mb++)
    forward_micro_batch(b, mb);
  for (int i = 0; i < m - warmup; i++) {
    forward_micro_batch(b, warmup + i);
    backward_micro_batch(b, i);
  }
  for (int mb = m - warmup; mb < m; mb++)
    backward_micro_batch(b, mb);
  finish_step(b);
}

int lx_micro_batches(const lx_ir *ir) {
  const lx_plan *p = &ir->plan;
  int b = p->micro_batch ? p->micro_batch : 1, dp = p->dp ? p->dp : 1;
  int pp = p->pp ? p->pp : 1;
  return p->global_batch ? p->global_batch / (b * dp) : pp;
}

static int64_t stage_params(const lx_ir *ir, const lx_stage *st) {
  return (st->has_prologue ? ir->prologue.params_per_rank : 0) + st->n_layers * ir->block.params_per_rank +
         (st->has_epilogue ? ir->epilogue.params_per_rank : 0);
}

bool lx_build_pipeline(const lx_ir *ir, lx_recompute_policy policy, lx_pipeline *out) {
  const lx_plan *plan = &ir->plan;
  lx_schedule kind = plan->schedule ? plan->schedule : LX_SCHEDULE_1F1B;
  if (kind != LX_SCHEDULE_GPIPE && kind != LX_SCHEDULE_1F1B) {
    lx_error(ir->locs.field[LX_F_SCHEDULE], "schedule '%s' is not implemented yet (gpipe and 1f1b are)",
             lx_schedule_name(kind));
    return false;
  }
  int pp = plan->pp ? plan->pp : 1;
  *out = (lx_pipeline){
      .ir = ir, .pp = pp, .micro_batches = lx_micro_batches(ir), .kind = kind, .policy = policy};
  if (out->micro_batches < pp) {
    lx_error(ir->locs.plan, "%d micro-batches per iteration are fewer than the %d pipeline stages",
             out->micro_batches, pp);
    return false;
  }
  int *first = malloc(sizeof *first * (size_t)(pp + 1));
  lx_partition_uniform(ir->model.layers, pp, first);
  out->stages = calloc((size_t)pp, sizeof *out->stages);
  for (int s = 0; s < pp; s++) {
    lx_stage *st = &out->stages[s];
    *st = (lx_stage){.index = s,
                     .first_layer = first[s],
                     .n_layers = first[s + 1] - first[s],
                     .has_prologue = s == 0,
                     .has_epilogue = s == pp - 1};
    st->params_per_rank = stage_params(ir, st);
    st->stashed_micro_batches = kind == LX_SCHEDULE_GPIPE
                                    ? out->micro_batches
                                    : (pp - s < out->micro_batches ? pp - s : out->micro_batches);
    st->decisions = calloc((size_t)ir->block.n_ops, sizeof *st->decisions);
    lx_recompute_fixed(ir, policy, st->decisions);
    builder b = {.ir = ir, .pipe = out, .st = st, .tp = plan->tp ? plan->tp : 1};
    int *events = malloc(sizeof(int) * 3 * (size_t)out->micro_batches);
    for (int i = 0; i < 3 * out->micro_batches; i++)
      events[i] = -1;
    b.slot_free = events;
    b.act_sent = events + out->micro_batches;
    b.grad_sent = events + 2 * out->micro_batches;
    schedule_stage(&b);
    free(events);
  }
  free(first);
  return true;
}
