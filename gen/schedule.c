/* schedule.c — per-stage instruction lists of a pipeline schedule.
 *
 * Each stage runs its micro-batches' forwards F(m) and backwards B(m) on the
 * compute stream in the order of the schedule (GPipe: all F then all B;
 * 1F1B: p - s - 1 warm-up forwards, then F and B alternating, then the
 * remaining B). Receives, sends and collectives sit on their own streams,
 * tied to the compute stream by RECORD/WAIT event pairs, so that the compute
 * stream's idle intervals are explicit: the windows recomputation can use. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "diag.h"
#include "memplan.h"
#include "overlap.h"
#include "passes.h"

typedef struct {
  const lx_ir *ir;
  lx_pipeline *pipe;
  lx_stage *st;
  int tp, dp;
  bool dp_pending; /* bucket all-reduces the optimizer step must wait for */
  /* per micro-batch: events recorded when its stash slot is free again and
   * when its outgoing buffers have been sent; -1 until recorded */
  int *slot_free, *act_sent, *grad_sent;
  /* window placement: FWD/BWD emitted so far (minus one), the next window
   * to open, per window the layer instances it recomputes (CSR, in the
   * order they are due), and per instance the event its recompute records */
  int ordinal, next_window;
  int *window_start, *window_items, *recomputed;
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

bool lx_sequence_parallel(const lx_ir *ir) { return ir->plan.sequence_parallel && ir->plan.tp > 1; }

/* Megatron's pairs: a row-parallel (or vocabulary-parallel) output is a
 * partial sum, and so is a column-parallel op's input gradient; with
 * sequence parallelism the sums are reduce-scatters into sequence shards
 * and whole tensors are gathered from shards where an op reads them. */
lx_tp_collectives lx_tp_collectives_of(const lx_ir *ir, const lx_op *op, bool backward) {
  lx_tp_collectives c = {.reduce = LX_COLL_ALLREDUCE};
  if (!ir->plan.tp || ir->plan.tp < 2) return c;
  bool sp = lx_sequence_parallel(ir), column = op->tp_role == LX_TP_COLUMN, row = op->needs_tp_allreduce;
  c.gather_before = sp && (column || (backward && row));
  c.reduce_after = backward ? column : row;
  if (sp) c.reduce = LX_COLL_REDUCE_SCATTER;
  return c;
}

static int64_t input_bytes(const lx_graph *g, const lx_op *op) { return g->ops[op->inputs[0]].out_bytes; }

/* Bytes of the whole tensor a collective of op moves: under sequence
 * parallelism its sequence shard on every rank. */
static int64_t whole_bytes(const builder *b, int64_t shard_bytes) {
  return lx_sequence_parallel(b->ir) ? shard_bytes * b->tp : shard_bytes;
}

static void tp_collective(builder *b, lx_instr at, int64_t bytes, bool backward, lx_tp_collective coll) {
  sync_streams(b, LX_STREAM_COMPUTE, LX_STREAM_TP);
  emit(b, LX_STREAM_TP,
       (lx_instr){.kind = LX_I_ALLREDUCE_TP,
                  .graph = at.graph,
                  .layer = at.layer,
                  .op = at.op,
                  .mb = at.mb,
                  .bytes = bytes,
                  .backward = backward,
                  .recomputed = at.kind == LX_I_RECOMPUTE,
                  .coll = coll});
  sync_streams(b, LX_STREAM_TP, LX_STREAM_COMPUTE);
}

/* What a gather before op collects: its input, or in the backward of a
 * row-parallel op its output's gradient. */
static int64_t gathered_bytes(const builder *b, const lx_graph *g, const lx_op *op, bool backward) {
  bool output_grad = backward && op->tp_role != LX_TP_COLUMN;
  return whole_bytes(b, output_grad ? op->out_bytes : input_bytes(g, op));
}

static int instance_of(const builder *b, int layer, int mb) {
  return (layer - b->st->first_layer) * b->pipe->micro_batches + mb;
}

/* In-window recompute of a layer instance: the ops the policy put in
 * windows, on the recompute stream (they need no all-reduce: lynx.h). */
static void recompute_in_window(builder *b, int inst) {
  const lx_graph *g = &b->ir->block;
  int layer = b->st->first_layer + inst / b->pipe->micro_batches, mb = inst % b->pipe->micro_batches;
  for (int i = 0; i < g->n_ops; i++)
    if (b->st->decisions[i].recompute && b->st->decisions[i].in_window)
      emit(b, LX_STREAM_RECOMPUTE,
           (lx_instr){.kind = LX_I_RECOMPUTE, .graph = LX_GRAPH_BLOCK, .layer = layer, .op = i, .mb = mb});
  b->recomputed[inst] = record(b, LX_STREAM_RECOMPUTE);
}

/* A FWD or BWD is on the compute stream: if a window opens after it, the
 * recompute stream starts there (an event recorded now, before the
 * compute stream goes on to wait for its communication). */
static void pass_emitted(builder *b) {
  b->ordinal++;
  const lx_stage *st = b->st;
  if (!st->window_of) return;
  while (b->next_window < st->n_windows && st->windows[b->next_window].after < b->ordinal)
    b->next_window++;
  int w = b->next_window;
  if (w == st->n_windows || st->windows[w].after != b->ordinal ||
      b->window_start[w] == b->window_start[w + 1])
    return;
  sync_streams(b, LX_STREAM_COMPUTE, LX_STREAM_RECOMPUTE);
  for (int k = b->window_start[w]; k < b->window_start[w + 1]; k++)
    recompute_in_window(b, b->window_items[k]);
}

static void run_forward_op(builder *b, lx_instr_kind kind, lx_graph_id gid, int layer, int i, int mb) {
  const lx_graph *g = lx_graph_of(b->ir, gid);
  const lx_op *op = &g->ops[i];
  lx_instr in = {.kind = kind, .graph = gid, .layer = layer, .op = i, .mb = mb};
  lx_tp_collectives c = lx_tp_collectives_of(b->ir, op, false);
  if (c.gather_before) tp_collective(b, in, gathered_bytes(b, g, op, false), false, LX_COLL_ALLGATHER);
  emit(b, LX_STREAM_COMPUTE, in);
  if (kind == LX_I_FWD) pass_emitted(b);
  if (c.reduce_after) tp_collective(b, in, whole_bytes(b, op->out_bytes), false, c.reduce);
}

static void run_backward_op(builder *b, lx_graph_id gid, int layer, int i, int mb) {
  const lx_graph *g = lx_graph_of(b->ir, gid);
  const lx_op *op = &g->ops[i];
  lx_instr in = {.kind = LX_I_BWD, .graph = gid, .layer = layer, .op = i, .mb = mb};
  lx_tp_collectives c = lx_tp_collectives_of(b->ir, op, true);
  if (c.gather_before) tp_collective(b, in, gathered_bytes(b, g, op, true), true, LX_COLL_ALLGATHER);
  emit(b, LX_STREAM_COMPUTE, in);
  pass_emitted(b);
  if (c.reduce_after) tp_collective(b, in, whole_bytes(b, input_bytes(g, op)), true, c.reduce);
}

static void forward_graph(builder *b, lx_graph_id gid, int layer, int mb) {
  const lx_graph *g = lx_graph_of(b->ir, gid);
  for (int i = 0; i < g->n_ops; i++)
    if (g->ops[i].kind != LX_OP_INPUT) run_forward_op(b, LX_I_FWD, gid, layer, i, mb);
}

/* Parameters per rank of the tied embedding table in graph gid of the stage:
 * the prologue's table, or the last stage's copy for its LM head. */
static int64_t tied_table_params(const lx_ir *ir, const lx_stage *st, lx_graph_id gid) {
  if (!ir->model.tied_embeddings) return 0;
  const lx_graph *g = lx_graph_of(ir, gid);
  for (int i = 0; i < g->n_ops; i++) {
    const lx_op *op = &g->ops[i];
    if (gid == LX_GRAPH_PROLOGUE && op->kind == LX_OP_EMBEDDING) return op->params_per_rank;
    if (gid == LX_GRAPH_EPILOGUE && op->kind == LX_OP_LM_HEAD && !st->has_prologue)
      return (int64_t)ir->padded_vocab / ir->plan.tp * g->ops[op->inputs[0]].out.width;
  }
  return 0;
}

static int64_t graph_params(const lx_ir *ir, const lx_stage *st, lx_graph_id gid) {
  int64_t copy = gid == LX_GRAPH_EPILOGUE ? tied_table_params(ir, st, gid) : 0;
  return lx_graph_of(ir, gid)->params_per_rank + copy;
}

/* A bucket of parameter gradients is final once the last micro-batch's
 * backward of its graph instance is done: its all-reduce across the dp
 * replicas starts then and overlaps the rest of the backward. The tied
 * embedding table (and the last stage's copy of it) is a bucket of its own,
 * so that under ZeRO-1 both copies are sharded alike. */
static void reduce_bucket(builder *b, lx_graph_id gid, int layer, bool tied, int64_t params) {
  if (b->dp < 2 || params <= 0) return;
  sync_streams(b, LX_STREAM_COMPUTE, LX_STREAM_DP);
  emit(b, LX_STREAM_DP,
       (lx_instr){.kind = LX_I_ALLREDUCE_DP,
                  .graph = gid,
                  .layer = layer,
                  .mb = -1,
                  .tied = tied,
                  .bytes = params * 4});
  b->dp_pending = true;
}

static void reduce_graph_buckets(builder *b, lx_graph_id gid, int layer) {
  int64_t table = gid == LX_GRAPH_BLOCK ? 0 : tied_table_params(b->ir, b->st, gid);
  reduce_bucket(b, gid, layer, true, table);
  reduce_bucket(b, gid, layer, false, graph_params(b->ir, b->st, gid) - table);
}

static void backward_graph(builder *b, lx_graph_id gid, int layer, int mb) {
  const lx_graph *g = lx_graph_of(b->ir, gid);
  for (int i = g->n_ops - 1; i >= 0; i--)
    if (g->ops[i].kind != LX_OP_INPUT) run_backward_op(b, gid, layer, i, mb);
  if (mb == b->pipe->micro_batches - 1) reduce_graph_buckets(b, gid, layer);
}

/* On demand: the dropped tensors of layer `layer` come back just before its
 * backward, on the critical path (Megatron's full and selective recompute).
 * What a window recomputed is waited for instead; in-window ops of an
 * instance that got no window run here too. */
static void recompute_layer(builder *b, int layer, int mb) {
  const lx_graph *g = &b->ir->block;
  int inst = instance_of(b, layer, mb);
  bool windowed = b->st->window_of && b->st->window_of[inst] >= 0;
  if (windowed) wait_for(b, LX_STREAM_COMPUTE, b->recomputed[inst]);
  for (int i = 0; i < g->n_ops; i++)
    if (b->st->decisions[i].recompute && !(windowed && b->st->decisions[i].in_window))
      run_forward_op(b, LX_I_RECOMPUTE, LX_GRAPH_BLOCK, layer, i, mb);
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
  if (b->dp_pending) sync_streams(b, LX_STREAM_DP, LX_STREAM_COMPUTE);
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
  int b = p->micro_batch, dp = p->dp;
  int pp = p->pp;
  return p->global_batch ? p->global_batch / (b * dp) : pp;
}

static int64_t stage_params(const lx_ir *ir, const lx_stage *st) {
  return (st->has_prologue ? ir->prologue.params_per_rank : 0) + st->n_layers * ir->block.params_per_rank +
         (st->has_epilogue ? ir->epilogue.params_per_rank : 0);
}

/* Per window, the instances it recomputes, in the order they are due. */
static void index_window_items(builder *b) {
  const lx_stage *st = b->st;
  int n = st->n_layers * b->pipe->micro_batches;
  b->window_start = lx_calloc((size_t)st->n_windows + 2, sizeof(int));
  b->window_items = lx_malloc(sizeof(int) * (size_t)(n + 1));
  b->recomputed = lx_malloc(sizeof(int) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    b->recomputed[i] = -1;
    if (st->window_of && st->window_of[i] >= 0) b->window_start[st->window_of[i] + 1]++;
  }
  for (int w = 0; w < st->n_windows; w++)
    b->window_start[w + 1] += b->window_start[w];
  int *fill = lx_calloc((size_t)st->n_windows + 1, sizeof(int));
  /* backward order (both schedules): by micro-batch, then from the top layer down */
  for (int mb = 0; mb < b->pipe->micro_batches; mb++)
    for (int l = st->n_layers - 1; l >= 0; l--) {
      int inst = l * b->pipe->micro_batches + mb, w = st->window_of ? st->window_of[inst] : -1;
      if (w >= 0) b->window_items[b->window_start[w] + fill[w]++] = inst;
    }
  free(fill);
}

/* (Re)builds the instruction lists of stage s from its decisions and windows. */
static void schedule_one(const lx_ir *ir, lx_pipeline *p, int s) {
  lx_stage *st = &p->stages[s];
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    st->streams[k].count = 0;
  st->n_events = 0;
  builder b = {.ir = ir, .pipe = p, .st = st, .tp = ir->plan.tp, .dp = ir->plan.dp, .ordinal = -1};
  int *events = lx_malloc(sizeof(int) * 3 * (size_t)p->micro_batches);
  for (int i = 0; i < 3 * p->micro_batches; i++)
    events[i] = -1;
  b.slot_free = events;
  b.act_sent = events + p->micro_batches;
  b.grad_sent = events + 2 * p->micro_batches;
  index_window_items(&b);
  schedule_stage(&b);
  free(events);
  free(b.window_start);
  free(b.window_items);
  free(b.recomputed);
}

static bool check_plan(const lx_ir *ir, lx_schedule kind, int pp, int micro_batches) {
  if (kind != LX_SCHEDULE_GPIPE && kind != LX_SCHEDULE_1F1B) {
    lx_error(ir->locs.field[LX_F_SCHEDULE], "schedule '%s' is not implemented yet (gpipe and 1f1b are)",
             lx_schedule_name(kind));
    return false;
  }
  if (micro_batches < pp) {
    lx_error(ir->locs.plan, "%d micro-batches per iteration are fewer than the %d pipeline stages",
             micro_batches, pp);
    return false;
  }
  return true;
}

/* Stages over the layer split `first`, each with the decisions of a fixed policy. */
static void init_stages(const lx_ir *ir, lx_recompute_policy fixed, const int *first, lx_pipeline *out) {
  int pp = out->pp;
  out->stages = lx_calloc((size_t)pp, sizeof *out->stages);
  for (int s = 0; s < pp; s++) {
    lx_stage *st = &out->stages[s];
    *st = (lx_stage){.index = s,
                     .first_layer = first[s],
                     .n_layers = first[s + 1] - first[s],
                     .has_prologue = s == 0,
                     .has_epilogue = s == pp - 1};
    st->params_per_rank = stage_params(ir, st);
    st->stashed_micro_batches = out->kind == LX_SCHEDULE_GPIPE
                                    ? out->micro_batches
                                    : (pp - s < out->micro_batches ? pp - s : out->micro_batches);
    st->decisions = lx_calloc((size_t)ir->block.n_ops, sizeof *st->decisions);
    lx_recompute_fixed(ir, fixed, st->decisions);
    st->stats.status = "fixed";
  }
}

static bool fixed_policy(lx_recompute_policy p) { return p <= LX_RECOMPUTE_SELECTIVE; }

/* ---- planned policies ------------------------------------------------------- */

int64_t lx_stage_activation_budget(const lx_ir *ir, const lx_cost_model *cm, const lx_pipeline *keep_all,
                                   const lx_stage_memory *m, int s) {
  const lx_stage *st = &keep_all->stages[s];
  lx_op_decision *none = lx_calloc((size_t)ir->block.n_ops, sizeof *none);
  int64_t block = (int64_t)st->stashed_micro_batches * st->n_layers * lx_kept_bytes(&ir->block, none);
  free(none);
  /* besides the block's stash: static bytes, the prologue / epilogue stash,
   * the transient working set, and one layer regenerated on demand */
  int64_t other = m->peak - block + ir->block.activation_bytes;
  return (int64_t)cm->gpu.memory_bytes - other;
}

typedef struct {
  const lx_ir *ir;
  const lx_cost_model *cm;
  lx_pipeline *pipe;
  lx_recompute_policy policy;
  double time_limit_s;
  int64_t *budget;
} planner;

static void solve_stage(planner *pl, int s, lx_recompute_policy policy, bool with_windows) {
  lx_stage *st = &pl->pipe->stages[s];
  lx_stage_problem pr;
  lx_stage_problem_init(&pr, pl->ir, pl->cm, st->n_layers, st->stashed_micro_batches, pl->pipe->micro_batches,
                        pl->budget[s]);
  pr.time_limit_s = pl->time_limit_s;
  if (with_windows) lx_stage_problem_set_windows(&pr, pl->pipe, s);
  free(st->window_of);
  st->window_of =
      with_windows ? lx_calloc((size_t)(pr.n_instances > 0 ? pr.n_instances : 0) + 1, sizeof(int)) : NULL;
  double searched = st->stats.search_s; /* the plan's search time is every solve's, repairs included */
  lx_policy_solve(pl->ir, policy, &pr, st->decisions, st->window_of, &st->stats);
  st->stats.search_s += searched;
  lx_stage_problem_free(&pr);
  schedule_one(pl->ir, pl->pipe, s);
}

/* Budgets from the keep-everything plan of the same split. */
static void compute_budgets(planner *pl) {
  lx_stage_memory *mem = lx_calloc((size_t)(pl->pipe->pp > 0 ? pl->pipe->pp : 1), sizeof *mem);
  lx_plan_memory(pl->pipe, mem);
  for (int s = 0; s < pl->pipe->pp; s++) {
    pl->budget[s] = lx_stage_activation_budget(pl->ir, pl->cm, pl->pipe, &mem[s], s);
    lx_stage_memory_free(&mem[s]);
  }
  free(mem);
}

/* Windows come from the schedule with checkmate's on-demand recompute; its
 * iteration time is what the windowed plan must beat. One simulation gives
 * both: simulating is most of a plan's time on long pipelines. */
static double measure_windows(planner *pl) {
  lx_simulation sim;
  lx_simulate(pl->pipe, pl->cm, NULL, NULL, NULL, &sim);
  for (int s = 0; s < pl->pipe->pp; s++)
    lx_find_windows(pl->pipe, s, &sim, pl->cm->interference);
  double t = sim.iteration_time;
  lx_simulation_free(&sim);
  return t;
}

/* The model's reserve is an estimate: where the plan still overflows, the
 * stage's budget shrinks by the excess and the policy runs again. */
static void repair(planner *pl) {
  for (int round = 0; round < 3; round++) {
    lx_stage_memory *mem = lx_calloc((size_t)(pl->pipe->pp > 0 ? pl->pipe->pp : 1), sizeof *mem);
    lx_plan_memory(pl->pipe, mem);
    bool again = false;
    for (int s = 0; s < pl->pipe->pp; s++) {
      int64_t excess = mem[s].peak - (int64_t)pl->cm->gpu.memory_bytes;
      if (excess > 0 && pl->budget[s] > 0) {
        pl->budget[s] -= excess + (1 << 20);
        solve_stage(pl, s, pl->policy, pl->policy != LX_RECOMPUTE_CHECKMATE);
        again = true;
      }
      lx_stage_memory_free(&mem[s]);
    }
    free(mem);
    if (!again) return;
  }
}

static double simulated_time(planner *pl) {
  lx_simulation sim;
  lx_simulate(pl->pipe, pl->cm, NULL, NULL, NULL, &sim);
  double t = sim.iteration_time;
  lx_simulation_free(&sim);
  return t;
}

static bool fits_memory(planner *pl) {
  int pp = pl->pipe->pp;
  lx_stage_memory *mem = lx_calloc((size_t)(pp > 0 ? pp : 1), sizeof *mem);
  lx_plan_memory(pl->pipe, mem);
  bool fits = true;
  for (int s = 0; s < pp; s++) {
    fits &= mem[s].peak <= (int64_t)pl->cm->gpu.memory_bytes;
    lx_stage_memory_free(&mem[s]);
  }
  free(mem);
  return fits;
}

/* Megatron's selective plan drops the attention core's internals but keeps
 * its output: a point of the decision space that the Lynx policies' per-op
 * search (an op recomputed drops all it saves) does not enumerate. Where it
 * fits and is faster than their plan, it stands. */
static void consider_selective(planner *pl) {
  if (pl->policy != LX_RECOMPUTE_LYNX_HEU && pl->policy != LX_RECOMPUTE_LYNX_OPT) return;
  int pp = pl->pipe->pp, n = pl->ir->block.n_ops;
  double planned = simulated_time(pl);
  lx_op_decision *kept = lx_malloc(sizeof *kept * (size_t)(pp * n + 1));
  int **windows = lx_malloc(sizeof *windows * (size_t)(pp + 1));
  for (int s = 0; s < pp; s++) {
    lx_stage *st = &pl->pipe->stages[s];
    memcpy(kept + s * n, st->decisions, sizeof *kept * (size_t)n);
    windows[s] = st->window_of;
    st->window_of = NULL;
    lx_recompute_fixed(pl->ir, LX_RECOMPUTE_SELECTIVE, st->decisions);
    schedule_one(pl->ir, pl->pipe, s);
  }
  bool better = fits_memory(pl) && simulated_time(pl) < planned;
  for (int s = 0; s < pp; s++) {
    lx_stage *st = &pl->pipe->stages[s];
    if (better) {
      free(windows[s]);
      st->stats.status = "Megatron's selective plan (faster than the per-op plan)";
      continue;
    }
    memcpy(st->decisions, kept + s * n, sizeof *kept * (size_t)n);
    st->window_of = windows[s];
    schedule_one(pl->ir, pl->pipe, s);
  }
  free(kept);
  free(windows);
}

static void plan_policy(planner *pl) {
  int pp = pl->pipe->pp;
  for (int s = 0; s < pp; s++)
    schedule_one(pl->ir, pl->pipe, s);
  compute_budgets(pl);
  bool recomputes = false;
  for (int s = 0; s < pp; s++) {
    solve_stage(pl, s, LX_RECOMPUTE_CHECKMATE, false);
    for (int i = 0; i < pl->ir->block.n_ops; i++)
      recomputes |= pl->pipe->stages[s].decisions[i].recompute;
  }
  if (pl->policy != LX_RECOMPUTE_CHECKMATE &&
      recomputes) { /* with nothing to recompute, windows cannot help */
    double on_demand = measure_windows(pl);
    for (int s = 0; s < pp; s++)
      solve_stage(pl, s, pl->policy, true);
    repair(pl);
    /* windows measured on the on-demand schedule can shrink once other
     * stages speed up: if the plan lost, checkmate's on-demand plan (a
     * choice within the policy's space) stands */
    if (simulated_time(pl) > on_demand) {
      for (int s = 0; s < pp; s++)
        solve_stage(pl, s, LX_RECOMPUTE_CHECKMATE, false);
      for (int s = 0; s < pp; s++)
        pl->pipe->stages[s].stats.status = "checkmate's plan (windows did not pay)";
    }
  }
  repair(pl);
  consider_selective(pl);
}

static void choose_partition(const lx_ir *ir, const lx_plan_options *o, const lx_cost_model *cm, int pp,
                             int *first) {
  lx_partition_uniform(ir->model.layers, pp, first);
  if (o->partition != LX_PARTITION_DP || pp < 2) return;
  lx_partition_model m;
  lx_partition_model_init(&m, ir, cm, o->policy);
  int *dp = lx_malloc(sizeof(int) * (size_t)(pp + 1));
  if (lx_partition_dp(ir->model.layers, pp, lx_partition_stage_cost, &m, dp) >= 0)
    for (int s = 0; s <= pp; s++)
      first[s] = dp[s];
  free(dp);
  lx_partition_model_free(&m);
}

bool lx_plan_pipeline(const lx_ir *ir, const lx_plan_options *o, lx_pipeline *out) {
  const lx_plan *plan = &ir->plan;
  lx_schedule kind = plan->schedule ? plan->schedule : LX_SCHEDULE_1F1B;
  int pp = plan->pp;
  *out = (lx_pipeline){
      .ir = ir, .pp = pp, .micro_batches = lx_micro_batches(ir), .kind = kind, .policy = o->policy};
  if (!check_plan(ir, kind, pp, out->micro_batches)) return false;
  lx_cost_model own;
  const lx_cost_model *cm = o->cm;
  bool needs_costs = !fixed_policy(o->policy) || o->partition == LX_PARTITION_DP;
  if (!cm && needs_costs) {
    if (!lx_cost_model_init(&own, ir, NULL)) return false;
    cm = &own;
  }
  int *first = lx_malloc(sizeof *first * (size_t)(pp + 1));
  if (needs_costs)
    choose_partition(ir, o, cm, pp, first);
  else
    lx_partition_uniform(ir->model.layers, pp, first);
  init_stages(ir, fixed_policy(o->policy) ? o->policy : LX_RECOMPUTE_NONE, first, out);
  free(first);
  if (fixed_policy(o->policy)) {
    for (int s = 0; s < pp; s++)
      schedule_one(ir, out, s);
  } else {
    planner pl = {ir, cm, out, o->policy, o->opt_time_limit_s, lx_calloc((size_t)pp, sizeof(int64_t))};
    plan_policy(&pl);
    free(pl.budget);
  }
  if (cm == &own) lx_cost_model_free(&own);
  return true;
}

bool lx_build_pipeline(const lx_ir *ir, lx_recompute_policy policy, lx_pipeline *out) {
  lx_plan_options o = {.policy = policy, .partition = LX_PARTITION_UNIFORM};
  return lx_plan_pipeline(ir, &o, out);
}
