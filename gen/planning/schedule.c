/* schedule.c — per-stage instruction lists of a pipeline schedule.
 *
 * Each stage runs its micro-batches' forwards F(m) and backwards B(m) on the
 * compute stream in the order of the schedule (GPipe: all F then all B;
 * 1F1B: p - s - 1 warm-up forwards, then F and B alternating, then the
 * remaining B; ZB-H1: 1F1B whose block linears leave their weight gradients
 * to W passes that run weight_lag micro-batches late, so that the drain,
 * where stage s waits for gradients, has W to fill it; PipeDream-2BW: 1F1B
 * that does not drain, the next step's warm-up forwards running in this
 * step's drain). Receives, sends and
 * collectives sit on their own streams, tied to the compute stream by
 * RECORD/WAIT event pairs, so that the compute stream's idle intervals are
 * explicit: the windows recomputation can use. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "diag.h"
#include "planning/memplan.h"
#include "planning/overlap.h"
#include "planning/passes.h"

typedef struct {
  const lx_ir *ir;
  lx_pipeline *pipe;
  lx_stage *st;
  int tp, dp;
  bool dp_pending; /* bucket all-reduces the optimizer step must wait for */
  /* per chunk and micro-batch (chunk * ids + mb): events recorded when its
   * stash slot is free again, when its outgoing buffers have been sent, and
   * when its W passes are done (its held and weight-gradient slots free);
   * -1 until recorded */
  int *slot_free, *act_sent, *grad_sent, *weights_done;
  int ids; /* micro-batch numbers per chunk (lx_micro_batch_ids) */
  /* window placement: FWD/BWD emitted so far (minus one), the next window
   * to open, per window the layer instances it recomputes (CSR, in the
   * order they are due), and per instance the event its recompute records */
  int ordinal, next_window;
  int *window_start, *window_items, *recomputed;
  /* offload: per layer parity and block op, the event of the last OFFLOAD that read the op's
   * place in that parity's window buffer; per instance, the event of its PREFETCH; per
   * compute position (FWD/BWD ordinal, CSR) the instances whose prefetch starts after it
   * (NULL in the first build, which finds the positions) */
  int *offloaded, *prefetched;
  int *prefetch_start, *prefetch_items, n_positions;
  bool fill, ahead; /* 2BW: what the instructions emitted now belong to (lx_instr) */
} builder;

static void emit(builder *b, lx_stream s, lx_instr in) {
  in.fill = b->fill;
  in.ahead = b->ahead;
  lx_instr_append(&b->st->streams[s], in);
}

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

/* The event of chunk v's micro-batch mb in one of the per-micro-batch arrays. */
static int *event_of(const builder *b, int *events, int v, int mb) { return &events[v * b->ids + mb]; }

/* Buffers of micro-batch mb of chunk v reuse those of mb - slots: wait
 * until that one is done with them (`done` holds its events, -1 if there
 * was none). */
static void wait_for_slot(builder *b, lx_stream on, int *done, int v, int mb, int slots) {
  int previous = mb - slots;
  if (slots > 0 && previous >= 0 && *event_of(b, done, v, previous) >= 0)
    wait_for(b, on, *event_of(b, done, v, previous));
}

/* The pipeline buffers of chunk v's mb, slots of the stage's count. */
static void wait_for_reuse(builder *b, lx_stream on, int *done, int v, int mb) {
  wait_for_slot(b, on, done, v, mb, b->st->stashed_micro_batches);
}

/* Chunk v's stash slot of mb, of the chunk's own count. */
static void wait_for_stash(builder *b, lx_stream on, int v, int mb) {
  wait_for_slot(b, on, b->slot_free, v, mb, b->st->chunk_slots[v]);
}

/* Chunk v's neighbours: the prologue before chunk 0 of the first stage, the
 * epilogue after the last chunk of the last stage; the other chunks receive
 * from and send to the neighbouring stages (around the ring under
 * interleaved 1F1B: the last stage's chunk v feeds the first stage's v + 1). */
static bool chunk_has_prologue(const builder *b, int v) { return v == 0 && b->st->has_prologue; }
static bool chunk_has_epilogue(const builder *b, int v) {
  return v == b->st->n_chunks - 1 && b->st->has_epilogue;
}
static int next_stage(const builder *b) { return (b->st->index + 1) % b->pipe->pp; }
static int previous_stage(const builder *b) { return (b->st->index + b->pipe->pp - 1) % b->pipe->pp; }

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
  return lx_layer_slot(b->st, layer) * b->pipe->micro_batches + mb;
}

/* Whether op i reads a tensor that comes back from host memory. */
static bool reads_offloaded(const builder *b, int i) {
  const lx_op *op = &b->ir->block.ops[i];
  for (int k = 0; k < op->n_inputs; k++)
    if (b->st->decisions[op->inputs[k]].offload) return true;
  return false;
}

/* What of op i of instance inst window w runs (w -1: what runs on demand),
 * into `in`, its RECOMPUTE: a head-split op's pieces placed there, which are
 * consecutive (the matching places them in order), named unless they are
 * all of them. False where w runs none of it. */
static bool recompute_at(const builder *b, int inst, int i, int w, lx_instr *in) {
  int pieces = lx_window_pieces(&b->st->decisions[i]), first = 0;
  if (!b->st->decisions[i].in_window) return w < 0;
  while (first < pieces && lx_piece_window(b->pipe, b->st, inst, i, first) != w)
    first++;
  int end = first;
  while (end < pieces && lx_piece_window(b->pipe, b->st, inst, i, end) == w)
    end++;
  if (first == end) return false;
  if (end - first < pieces) in->piece_first = first, in->piece_end = end, in->pieces = pieces;
  return true;
}

static lx_instr recompute_of(const builder *b, int inst, int i) {
  int layer = lx_slot_layer(b->st, inst / b->pipe->micro_batches), mb = inst % b->pipe->micro_batches;
  return (lx_instr){.kind = LX_I_RECOMPUTE, .graph = LX_GRAPH_BLOCK, .layer = layer, .op = i, .mb = mb};
}

/* The part of a layer instance's in-window recompute that window w runs:
 * its ops (or pieces) placed there, on the recompute stream (they need no
 * all-reduce: overlap.h). The backward waits for the event of the instance's last part
 * (the recompute stream runs in order). */
static void recompute_in_window(builder *b, int inst, int w) {
  const lx_graph *g = &b->ir->block;
  bool waited = false;
  for (int i = 0; i < g->n_ops; i++) {
    lx_instr in = recompute_of(b, inst, i);
    if (!b->st->decisions[i].recompute || !recompute_at(b, inst, i, w, &in)) continue;
    if (!waited && b->prefetched[inst] >= 0 && reads_offloaded(b, i)) /* its input, back from host memory */
      wait_for(b, LX_STREAM_RECOMPUTE, b->prefetched[inst]), waited = true;
    emit(b, LX_STREAM_RECOMPUTE, in);
  }
  b->recomputed[inst] = record(b, LX_STREAM_RECOMPUTE);
}

/* OFFLOAD or PREFETCH of block op i's saved tensors (layer, mb), on its stream. */
static void host_copy(builder *b, lx_instr_kind kind, int layer, int i, int mb) {
  lx_instr in = {.kind = kind, .graph = LX_GRAPH_BLOCK, .layer = layer, .op = i, .mb = mb};
  in.bytes = lx_host_copy_bytes(&b->ir->block, &b->st->decisions[i], i);
  emit(b, kind == LX_I_OFFLOAD ? LX_STREAM_OFFLOAD : LX_STREAM_PREFETCH, in);
}

/* Layer instance inst's offloaded tensors come back from host memory into
 * the window buffer of its layer's parity, on the prefetch stream, as soon as
 * no other instance needs that buffer (after the last pass of its parity
 * before its backward, lx_instance_bounds) and every offload that reads the
 * buffer is done, inst's own among them (the offload stream runs in order:
 * the latest of those events orders them all; later offloads from the other
 * parity's buffer need not hold it up); the backward, and recomputation that
 * reads them, wait for it. */
static void prefetch_instance(builder *b, int inst) {
  const lx_graph *g = &b->ir->block;
  int layer = lx_slot_layer(b->st, inst / b->pipe->micro_batches), mb = inst % b->pipe->micro_batches;
  sync_streams(b, LX_STREAM_COMPUTE, LX_STREAM_PREFETCH);
  int read_out = -1; /* event ids grow as they are recorded */
  for (int i = 0; i < g->n_ops; i++) {
    int e = b->st->decisions[i].offload ? b->offloaded[(layer % 2) * g->n_ops + i] : -1;
    if (e > read_out) read_out = e;
  }
  if (read_out >= 0) wait_for(b, LX_STREAM_PREFETCH, read_out);
  for (int i = 0; i < g->n_ops; i++)
    if (b->st->decisions[i].offload) host_copy(b, LX_I_PREFETCH, layer, i, mb);
  b->prefetched[inst] = record(b, LX_STREAM_PREFETCH);
}

static void start_prefetches(builder *b) {
  if (!b->prefetch_start || b->ordinal >= b->n_positions) return;
  bool fill = b->fill, ahead = b->ahead;
  b->fill = b->ahead = false; /* it serves this step's backward */
  for (int k = b->prefetch_start[b->ordinal]; k < b->prefetch_start[b->ordinal + 1]; k++)
    prefetch_instance(b, b->prefetch_items[k]);
  b->fill = fill, b->ahead = ahead;
}

/* A FWD or BWD is on the compute stream (windows.c counts only those): the
 * prefetches that may start after it start, and if a window opens after it,
 * the recompute stream starts there (an event recorded now, before the
 * compute stream goes on to wait for its communication). */
static void pass_emitted(builder *b) {
  b->ordinal++;
  const lx_stage *st = b->st;
  start_prefetches(b);
  if (!st->window_of) return;
  while (b->next_window < st->n_windows && st->windows[b->next_window].after < b->ordinal)
    b->next_window++;
  int w = b->next_window;
  if (w == st->n_windows || st->windows[w].after != b->ordinal ||
      b->window_start[w] == b->window_start[w + 1])
    return;
  /* a window's recompute serves this step's backwards: it runs whether or
   * not the 2BW forward it follows does */
  bool fill = b->fill, ahead = b->ahead;
  b->fill = b->ahead = false;
  sync_streams(b, LX_STREAM_COMPUTE, LX_STREAM_RECOMPUTE);
  for (int k = b->window_start[w]; k < b->window_start[w + 1]; k++)
    recompute_in_window(b, b->window_items[k], w);
  b->fill = fill, b->ahead = ahead;
}

static void run_forward_op(builder *b, lx_instr_kind kind, lx_graph_id gid, int layer, int i, int mb) {
  const lx_graph *g = lx_graph_of(b->ir, gid);
  const lx_op *op = &g->ops[i];
  lx_instr in = {.kind = kind, .graph = gid, .layer = layer, .op = i, .mb = mb};
  lx_tp_collectives c = lx_tp_collectives_of(b->ir, op, false);
  bool offload = kind == LX_I_FWD && gid == LX_GRAPH_BLOCK && b->st->decisions[i].offload;
  int *copying = offload ? &b->offloaded[(layer % 2) * g->n_ops + i] : NULL;
  if (copying && *copying >= 0) wait_for(b, LX_STREAM_COMPUTE, *copying); /* its place, still being copied */
  if (c.gather_before) tp_collective(b, in, gathered_bytes(b, g, op, false), false, LX_COLL_ALLGATHER);
  emit(b, LX_STREAM_COMPUTE, in);
  if (offload) { /* what it saves goes to host memory now */
    sync_streams(b, LX_STREAM_COMPUTE, LX_STREAM_OFFLOAD);
    host_copy(b, LX_I_OFFLOAD, layer, i, mb);
    *copying = record(b, LX_STREAM_OFFLOAD);
  }
  if (kind == LX_I_FWD) pass_emitted(b);
  if (c.reduce_after) tp_collective(b, in, whole_bytes(b, op->out_bytes), false, c.reduce);
}

/* Under sequence parallelism: the whole tensor (part of) op's backward reads, gathered. */
static void gather_for_backward(builder *b, lx_instr in) {
  const lx_graph *g = lx_graph_of(b->ir, in.graph);
  const lx_op *op = &g->ops[in.op];
  if (lx_backward_gathers(b->ir, op, lx_instr_part(b->ir, b->st, &in)))
    tp_collective(b, in, gathered_bytes(b, g, op, true), true, LX_COLL_ALLGATHER);
}

/* Whether op i runs in mini-sequences, and so does the op after it: a
 * backward (last op first) that goes on a run of pieces. */
static bool continues_pieces(const lx_graph *g, int i) {
  return g->ops[i].chunks > 1 && i + 1 < g->n_ops && g->ops[i + 1].chunks > 1;
}

static void run_backward_op(builder *b, lx_graph_id gid, int layer, int i, int mb) {
  const lx_graph *g = lx_graph_of(b->ir, gid);
  const lx_op *op = &g->ops[i];
  lx_instr in = {.kind = LX_I_BWD, .graph = gid, .layer = layer, .op = i, .mb = mb};
  lx_tp_collectives c = lx_tp_collectives_of(b->ir, op, true);
  /* In mini-sequences the backwards of a run of chunked ops go piece by
   * piece together: what any of them gathers comes before the first. */
  for (int j = i; !continues_pieces(g, i) && j >= 0 && (j == i || continues_pieces(g, j)); j--) {
    lx_instr at = in;
    at.op = j;
    gather_for_backward(b, at);
  }
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
  if (!ir->model.tied_embeddings || ir->finetune) return 0; /* fine-tuning freezes the table */
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

/* A graph instance's gradients are final after its last micro-batch's
 * backward, or where the stage defers weight gradients, after its W pass. */
static void backward_graph(builder *b, lx_graph_id gid, int layer, int mb) {
  const lx_graph *g = lx_graph_of(b->ir, gid);
  for (int i = g->n_ops - 1; i >= 0; i--)
    if (g->ops[i].kind != LX_OP_INPUT) run_backward_op(b, gid, layer, i, mb);
  bool weights_later = gid == LX_GRAPH_BLOCK && b->st->weight_lag > 0;
  if (mb == b->pipe->micro_batches - 1 && !weights_later) reduce_graph_buckets(b, gid, layer);
}

/* Zero bubble's W pass of micro-batch mb: the parameter gradients its
 * backward left out, layer by layer from the top as the backward went (under
 * sequence parallelism each after gathering the whole tensor it reads from
 * its shard). Its held and weight-gradient slots are free after it. */
static void weight_pass(builder *b, int mb) {
  const lx_graph *g = &b->ir->block;
  const lx_stage *st = b->st;
  for (int k = st->n_layers - 1; k >= 0; k--) {
    int l = lx_slot_layer(st, k);
    for (int i = g->n_ops - 1; i >= 0; i--) {
      if (!lx_defers_weight_grad(b->ir, st, LX_GRAPH_BLOCK, i)) continue;
      lx_instr in = {.kind = LX_I_BWD_WEIGHT, .graph = LX_GRAPH_BLOCK, .layer = l, .op = i, .mb = mb};
      gather_for_backward(b, in);
      emit(b, LX_STREAM_COMPUTE, in);
    }
    if (mb == b->pipe->micro_batches - 1) reduce_graph_buckets(b, LX_GRAPH_BLOCK, l);
  }
  *event_of(b, b->weights_done, 0, mb) = record(b, LX_STREAM_COMPUTE);
}

/* On demand: the dropped tensors of layer `layer` come back just before its
 * backward, on the critical path (Megatron's full and selective recompute).
 * What windows recomputed is waited for instead; in-window ops that no
 * window took (the instance's last ones, or all) run here too. */
static void recompute_layer(builder *b, int layer, int mb) {
  const lx_graph *g = &b->ir->block;
  int inst = instance_of(b, layer, mb);
  if (b->prefetched[inst] >= 0) wait_for(b, LX_STREAM_COMPUTE, b->prefetched[inst]);
  if (b->recomputed[inst] >= 0) wait_for(b, LX_STREAM_COMPUTE, b->recomputed[inst]);
  for (int i = 0; i < g->n_ops; i++) {
    lx_instr in = recompute_of(b, inst, i);
    if (!b->st->decisions[i].recompute || !recompute_at(b, inst, i, -1, &in)) continue;
    if (in.pieces) /* a head-split op's last pieces: no collective (it is windowable) */
      emit(b, LX_STREAM_COMPUTE, in);
    else
      run_forward_op(b, LX_I_RECOMPUTE, LX_GRAPH_BLOCK, layer, i, mb);
  }
}

/* The epilogue's second parameter: the targets. */
static int targets_input(const lx_ir *ir) {
  for (int i = 0; i < ir->epilogue.n_ops; i++)
    if (ir->epilogue.ops[i].kind == LX_OP_INPUT && ir->epilogue.ops[i].param == 1) return i;
  return 0;
}

static int64_t boundary_bytes(const builder *b) { return b->ir->block.ops[0].out_bytes; }

/* A send or receive of chunk v's micro-batch mb to or from stage `peer`. */
static lx_instr transfer(const builder *b, lx_instr_kind kind, int peer, int v, int mb) {
  return (lx_instr){
      .kind = kind, .mb = mb, .peer = peer, .chunk = v, .bytes = boundary_bytes(b), .layer = -1};
}

/* The input activation of chunk v's mb, into its stash slot once free; the
 * compute stream waits for it (the event returned). */
static int receive_activation(builder *b, int v, int mb) {
  lx_stage *st = b->st;
  wait_for_stash(b, LX_STREAM_RECV, v, mb);
  wait_for_slot(b, LX_STREAM_RECV, b->weights_done, v, mb, st->held_micro_batches); /* a held first input */
  emit(b, LX_STREAM_RECV, transfer(b, LX_I_RECV_ACT, previous_stage(b), v, mb));
  return record(b, LX_STREAM_RECV);
}

/* Forward of chunk v's mb; its input is received first unless `received` already did. */
static void forward_micro_batch(builder *b, int v, int mb, bool received) {
  const lx_chunk *c = &b->st->chunks[v];
  bool prologue = chunk_has_prologue(b, v), epilogue = chunk_has_epilogue(b, v);
  if (!epilogue) wait_for_reuse(b, LX_STREAM_COMPUTE, b->act_sent, v, mb);
  if (!prologue && !received) wait_for(b, LX_STREAM_COMPUTE, receive_activation(b, v, mb));
  if (prologue)
    emit(b, LX_STREAM_COMPUTE,
         (lx_instr){.kind = LX_I_LOAD, .graph = LX_GRAPH_PROLOGUE, .op = 0, .mb = mb, .layer = -1});
  if (epilogue)
    emit(b, LX_STREAM_COMPUTE,
         (lx_instr){.kind = LX_I_LOAD,
                    .graph = LX_GRAPH_EPILOGUE,
                    .op = targets_input(b->ir),
                    .mb = mb,
                    .layer = -1});
  if (prologue) forward_graph(b, LX_GRAPH_PROLOGUE, -1, mb);
  for (int l = c->first_layer; l <= lx_chunk_last_layer(c); l++)
    forward_graph(b, LX_GRAPH_BLOCK, l, mb);
  if (epilogue) {
    forward_graph(b, LX_GRAPH_EPILOGUE, -1, mb);
  } else {
    sync_streams(b, LX_STREAM_COMPUTE, LX_STREAM_SEND);
    emit(b, LX_STREAM_SEND, transfer(b, LX_I_SEND_ACT, next_stage(b), v, mb));
    *event_of(b, b->act_sent, v, mb) = record(b, LX_STREAM_SEND);
  }
}

static void backward_micro_batch(builder *b, int v, int mb) {
  const lx_chunk *c = &b->st->chunks[v];
  bool prologue = chunk_has_prologue(b, v), epilogue = chunk_has_epilogue(b, v);
  if (!prologue) wait_for_reuse(b, LX_STREAM_COMPUTE, b->grad_sent, v, mb);
  if (!epilogue) {
    wait_for_reuse(b, LX_STREAM_RECV, b->slot_free, v, mb); /* its buffer: the pipeline's */
    emit(b, LX_STREAM_RECV, transfer(b, LX_I_RECV_GRAD, next_stage(b), v, mb));
    sync_streams(b, LX_STREAM_RECV, LX_STREAM_COMPUTE);
  } else {
    backward_graph(b, LX_GRAPH_EPILOGUE, -1, mb);
  }
  for (int l = lx_chunk_last_layer(c); l >= c->first_layer; l--) {
    recompute_layer(b, l, mb);
    backward_graph(b, LX_GRAPH_BLOCK, l, mb);
  }
  if (prologue) {
    backward_graph(b, LX_GRAPH_PROLOGUE, -1, mb);
  } else {
    sync_streams(b, LX_STREAM_COMPUTE, LX_STREAM_SEND);
    emit(b, LX_STREAM_SEND, transfer(b, LX_I_SEND_GRAD, previous_stage(b), v, mb));
    *event_of(b, b->grad_sent, v, mb) = record(b, LX_STREAM_SEND);
  }
  *event_of(b, b->slot_free, v, mb) = record(b, LX_STREAM_COMPUTE);
}

/* B of micro-batch mb, then the W pass that has waited weight_lag backwards. */
static void backward_then_weights(builder *b, int mb) {
  backward_micro_batch(b, 0, mb);
  if (b->st->weight_lag > 0 && mb - b->st->weight_lag >= 0) weight_pass(b, mb - b->st->weight_lag);
}

static void finish_step(builder *b) {
  if (b->dp_pending) sync_streams(b, LX_STREAM_DP, LX_STREAM_COMPUTE);
  emit(b, LX_STREAM_COMPUTE, (lx_instr){.kind = LX_I_OPTIMIZER_STEP, .mb = -1, .layer = -1});
}

/* PipeDream-2BW: 1F1B's warm-up forwards are the fill; in the steady part,
 * once this step's forwards are done, the next step's warm-up forwards take
 * their place (ahead), so that the drain has forwards to alternate with and
 * the pipeline never empties. The previous stage runs one warm-up forward
 * more: its last one ahead is this stage's first steady forward, received
 * at the end of the step (ahead) or in the fill, so that no message is in
 * flight between steps. The optimizer step ends the stage's part. */
static void schedule_2bw_stage(builder *b) {
  int m = b->pipe->micro_batches, warmup = b->pipe->pp - b->st->index - 1; /* m >= pp: plan.c */
  bool receives = b->st->index > 0;
  b->fill = true;
  for (int mb = 0; mb < warmup; mb++)
    forward_micro_batch(b, 0, mb, false);
  int first_input = receives ? receive_activation(b, 0, warmup) : -1;
  b->fill = false;
  for (int i = 0; i < m; i++) {
    b->ahead = warmup + i >= m;
    if (i == 0 && receives)
      wait_for(b, LX_STREAM_COMPUTE, first_input); /* a no-op where the fill did not run */
    forward_micro_batch(b, 0, warmup + i, i == 0);
    b->ahead = false;
    backward_micro_batch(b, 0, i);
  }
  b->ahead = true;
  if (receives) receive_activation(b, 0, m + warmup);
  b->ahead = false;
  finish_step(b);
}

/* The stage's passes under interleaved 1F1B (lx_interleaved_order); *n of them. */
static lx_chunk_pass *interleaved_passes(const builder *b, int *n) {
  const lx_pipeline *p = b->pipe;
  *n = 2 * p->micro_batches * p->virtual_stages;
  lx_chunk_pass *order = lx_malloc(sizeof *order * (size_t)*n);
  lx_interleaved_order(p->pp, p->virtual_stages, b->st->index, p->micro_batches, order);
  return order;
}

/* Megatron's interleaved 1F1B: the stage's chunks' forwards and backwards in its order. */
static void schedule_interleaved_stage(builder *b) {
  int n;
  lx_chunk_pass *order = interleaved_passes(b, &n);
  for (int i = 0; i < n; i++)
    if (order[i].backward)
      backward_micro_batch(b, order[i].chunk, order[i].mb);
    else
      forward_micro_batch(b, order[i].chunk, order[i].mb, false);
  free(order);
  finish_step(b);
}

static void schedule_stage(builder *b) {
  if (b->pipe->kind == LX_SCHEDULE_2BW) {
    schedule_2bw_stage(b);
    return;
  }
  if (b->pipe->kind == LX_SCHEDULE_INTERLEAVED) {
    schedule_interleaved_stage(b);
    return;
  }
  int m = b->pipe->micro_batches, p = b->pipe->pp, s = b->st->index;
  int warmup = b->pipe->kind == LX_SCHEDULE_GPIPE ? m : (p - s - 1 < m ? p - s - 1 : m);
  for (int mb = 0; mb < warmup; mb++)
    forward_micro_batch(b, 0, mb, false);
  for (int i = 0; i < m - warmup; i++) {
    forward_micro_batch(b, 0, warmup + i, false);
    backward_then_weights(b, i);
  }
  for (int mb = m - warmup; mb < m; mb++)
    backward_then_weights(b, mb);
  int lag = b->st->weight_lag;
  for (int mb = m - lag > 0 ? m - lag : 0; lag > 0 && mb < m; mb++)
    weight_pass(b, mb);
  finish_step(b);
}

/* The stage's backward passes in the order it runs them: by micro-batch,
 * or under interleaved 1F1B in its order over the chunks. */
static lx_chunk_pass *backward_order(const builder *b, int *count) {
  *count = 0;
  if (b->pipe->kind == LX_SCHEDULE_INTERLEAVED) {
    int n;
    lx_chunk_pass *order = interleaved_passes(b, &n);
    for (int i = 0; i < n; i++)
      if (order[i].backward) order[(*count)++] = order[i];
    return order;
  }
  lx_chunk_pass *order = lx_malloc(sizeof *order * (size_t)b->pipe->micro_batches);
  for (int mb = 0; mb < b->pipe->micro_batches; mb++)
    order[(*count)++] = (lx_chunk_pass){true, 0, mb};
  return order;
}

/* Per window, the instances it recomputes part of, in the order they are
 * due (an instance's windows never decrease in op order: one pass over its
 * ops lists each window once). */
static void index_window_items(builder *b) {
  const lx_stage *st = b->st;
  int n = st->n_layers * b->pipe->micro_batches;
  b->recomputed = lx_malloc(sizeof(int) * (size_t)(n + 1));
  for (int i = 0; i < n; i++)
    b->recomputed[i] = -1;
  b->window_start = lx_calloc((size_t)st->n_windows + 2, sizeof(int));
  int *parts = lx_instances_per_window(b->pipe, st);
  for (int w = 0; parts && w < st->n_windows; w++)
    b->window_start[w + 1] = b->window_start[w] + parts[w];
  free(parts);
  b->window_items = lx_malloc(sizeof(int) * (size_t)(b->window_start[st->n_windows] + 1));
  int *fill = lx_malloc(sizeof(int) * (size_t)(st->n_windows + 1));
  memcpy(fill, b->window_start, sizeof(int) * (size_t)(st->n_windows + 1));
  /* backward order: the chunks' backwards by the schedule, each from its top layer down */
  int m = b->pipe->micro_batches, passes = 0, windows[LX_MAX_PLACED];
  lx_chunk_pass *backwards = backward_order(b, &passes);
  for (int i = 0; i < passes; i++) {
    const lx_chunk *c = &st->chunks[backwards[i].chunk];
    for (int l = lx_chunk_last_layer(c); l >= c->first_layer; l--) {
      int inst = lx_layer_slot(st, l) * m + backwards[i].mb;
      for (int k = 0, used = lx_instance_windows(b->pipe, st, inst, windows); k < used; k++)
        b->window_items[fill[windows[k]]++] = inst;
    }
  }
  free(backwards);
  free(fill);
}

static int at_most(int a, int b) { return a < b ? a : b; }

/* Under ZB-H1, a stage whose decisions leave no weight gradient to defer
 * (full recompute drops every linear's input) runs 1F1B's whole backwards.
 * Where W passes lag, what they read lives longer than a backward: the
 * linears' inputs from the forward (the micro-batches in flight, plus the
 * lag) and their output gradients from the backward (the lag, plus one). */
static void settle_weight_lag(const lx_ir *ir, const lx_pipeline *p, lx_stage *st) {
  if (p->kind != LX_SCHEDULE_ZB_H1) return;
  st->weight_lag = lx_weight_lag(p->kind, st->index);
  bool defers = false;
  for (int i = 0; i < ir->block.n_ops; i++)
    defers |= lx_defers_weight_grad(ir, st, LX_GRAPH_BLOCK, i);
  if (!defers) st->weight_lag = 0;
  int lag = st->weight_lag, m = p->micro_batches;
  st->held_micro_batches = lag ? at_most(st->stashed_micro_batches + lag, m) : 0;
  st->weight_grad_micro_batches = lag ? at_most(lag + 1, m) : 0;
}

static int *minus_ones(int n) {
  int *v = lx_malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  for (int i = 0; i < n; i++)
    v[i] = -1;
  return v;
}

/* The stage's instruction lists; with prefetch positions (CSR over the
 * compute stream's passes) where it offloads. Returns the passes emitted. */
static int build(const lx_ir *ir, lx_pipeline *p, int s, int *prefetch_start, int *prefetch_items,
                 int n_positions) {
  lx_stage *st = &p->stages[s];
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    st->streams[k].count = 0;
  st->n_events = 0;
  builder b = {.ir = ir,
               .pipe = p,
               .st = st,
               .tp = ir->plan.tp,
               .dp = ir->plan.dp,
               .ordinal = -1,
               .prefetch_start = prefetch_start,
               .prefetch_items = prefetch_items,
               .n_positions = n_positions};
  b.ids = lx_micro_batch_ids(p);
  int per_array = st->n_chunks * b.ids;
  int *events = minus_ones(4 * per_array);
  b.slot_free = events;
  b.act_sent = events + per_array;
  b.grad_sent = events + 2 * per_array;
  b.weights_done = events + 3 * per_array;
  b.offloaded = minus_ones(2 * ir->block.n_ops);
  b.prefetched = minus_ones(st->n_layers * p->micro_batches);
  index_window_items(&b);
  schedule_stage(&b);
  free(events);
  free(b.offloaded);
  free(b.prefetched);
  free(b.window_start);
  free(b.window_items);
  free(b.recomputed);
  return b.ordinal + 1;
}

static bool offloads(const lx_ir *ir, const lx_stage *st) {
  for (int i = 0; i < ir->block.n_ops; i++)
    if (st->decisions[i].offload) return true;
  return false;
}

/* Where offloaded instances prefetch: the positions come from the lists
 * themselves (lx_instance_bounds), so a stage that offloads is built twice;
 * the passes are the same both times, only the copies are added. */
void lx_schedule_stage(const lx_ir *ir, lx_pipeline *p, int s) {
  lx_stage *st = &p->stages[s];
  settle_weight_lag(ir, p, st);
  int positions = build(ir, p, s, NULL, NULL, 0);
  if (!offloads(ir, st)) return;
  int n = st->n_layers * p->micro_batches;
  int *lo = lx_malloc(sizeof(int) * (size_t)n), *due = lx_malloc(sizeof(int) * (size_t)n);
  lx_instance_bounds(p, s, lo, due);
  int *start = lx_calloc((size_t)positions + 2, sizeof(int)), *items = lx_malloc(sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++)
    start[lo[i] + 2]++;
  for (int k = 0; k < positions; k++)
    start[k + 2] += start[k + 1];
  /* by position, and at one position in the order they are due */
  for (int i = 0; i < n; i++)
    items[start[lo[i] + 1]++] = i;
  for (int k = 0; k < positions; k++)
    for (int a = start[k] + 1; a < start[k + 1]; a++)
      for (int c = a; c > start[k] && due[items[c]] < due[items[c - 1]]; c--) {
        int t = items[c];
        items[c] = items[c - 1];
        items[c - 1] = t;
      }
  build(ir, p, s, start, items, positions);
  free(lo);
  free(due);
  free(start);
  free(items);
}
