/* schedule.c — names and containers of the schedule IR. */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"

#define NAME_OF(table, value)                                                                                \
  ((size_t)(value) < sizeof(table) / sizeof(table)[0] && (table)[value] ? (table)[value] : "?")

const char *lx_stream_name(lx_stream s) {
  static const char *names[] = {"compute", "recompute", "send", "recv", "tp", "dp", "offload", "prefetch"};
  _Static_assert(sizeof names / sizeof names[0] == LX_STREAM_COUNT, "one name per stream");
  return NAME_OF(names, s);
}

const char *lx_instr_kind_name(lx_instr_kind k) {
  static const char *names[] = {"FWD",          "BWD",          "BWD_WEIGHT",     "RECOMPUTE",
                                "SEND_ACT",     "RECV_ACT",     "SEND_GRAD",      "RECV_GRAD",
                                "ALLREDUCE_TP", "ALLREDUCE_DP", "OPTIMIZER_STEP", "LOAD",
                                "OFFLOAD",      "PREFETCH",     "RECORD",         "WAIT"};
  _Static_assert(sizeof names / sizeof names[0] == LX_I_KIND_COUNT, "one name per instruction");
  return NAME_OF(names, k);
}

const char *lx_recompute_policy_name(lx_recompute_policy p) {
  static const char *names[] = {"none", "full", "selective", "checkmate", "lynx-heu", "lynx-opt"};
  _Static_assert(sizeof names / sizeof names[0] == LX_RECOMPUTE_POLICY_COUNT, "one name per policy");
  return NAME_OF(names, p);
}

const char *lx_window_kind_name(lx_window_kind k) {
  static const char *names[] = {"tp-forward", "tp-backward", "activation", "gradient",
                                "warm-up",    "cool-down",   "other"};
  _Static_assert(sizeof names / sizeof names[0] == LX_WINDOW_KIND_COUNT, "one name per window kind");
  return NAME_OF(names, k);
}

lx_instr *lx_instr_append(lx_instr_list *list, lx_instr instr) {
  if (list->count == list->cap) {
    list->cap = list->cap ? 2 * list->cap : 64;
    list->items = lx_realloc(list->items, sizeof *list->items * (size_t)list->cap);
  }
  list->items[list->count] = instr;
  return &list->items[list->count++];
}

void lx_pipeline_free(lx_pipeline *p) {
  for (int s = 0; p->stages && s < p->pp; s++) {
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      free(p->stages[s].streams[k].items);
    free(p->stages[s].decisions);
    free(p->stages[s].windows);
    free(p->stages[s].window_of);
  }
  free(p->stages);
  memset(p, 0, sizeof *p);
}

int lx_host_slots(const lx_pipeline *p, const lx_stage *st, int stash_slots) {
  return st->n_chunks > 1 ? lx_micro_batch_ids(p) : stash_slots;
}

bool lx_token_split(const lx_op_decision *d) {
  return d->offload && d->recompute && d->host_pieces > 0 && d->host_pieces < LX_TOKEN_PIECES;
}

int64_t lx_token_hosted(const lx_op_decision *d, int64_t amount) {
  return lx_token_split(d) ? amount / LX_TOKEN_PIECES * d->host_pieces : 0;
}

double lx_instr_fraction(const lx_stage *st, const lx_instr *in) {
  if (in->kind != LX_I_RECOMPUTE || in->graph != LX_GRAPH_BLOCK || !st->decisions) return 1;
  if (in->pieces > 0) return (double)(in->piece_end - in->piece_first) / in->pieces;
  const lx_op_decision *d = &st->decisions[in->op];
  return lx_token_split(d) ? (double)(LX_TOKEN_PIECES - d->host_pieces) / LX_TOKEN_PIECES : 1;
}

int lx_window_pieces(const lx_op_decision *d) { return d->window_pieces > 1 ? d->window_pieces : 1; }

void lx_instr_kv_heads(const lx_instr *in, int kv_heads, int *first, int *end) {
  *first = in->pieces > 0 ? in->piece_first * (kv_heads / in->pieces) : 0;
  *end = in->pieces > 0 ? in->piece_end * (kv_heads / in->pieces) : kv_heads;
}

int lx_micro_batch_ids(const lx_pipeline *p) {
  int steps = p->steps > 1 ? p->steps : 1;
  return p->micro_batches * (steps + (p->kind == LX_SCHEDULE_2BW));
}

/* The events of a stage whose RECORD step k leaves out (fill or ahead). */
static bool *skipped_records(const lx_stage *st, bool fill, bool ahead) {
  bool *skipped = lx_calloc((size_t)st->n_events + 1, sizeof *skipped);
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    for (int i = 0; i < st->streams[k].count; i++) {
      const lx_instr *in = &st->streams[k].items[i];
      if (in->kind == LX_I_RECORD && ((in->fill && !fill) || (in->ahead && !ahead)))
        skipped[in->event] = true;
    }
  return skipped;
}

/* A skipped instruction is gone; so is a WAIT for what it would have
 * recorded, which the previous step, done by now, recorded instead. */
static void append_step(const lx_stage *st, int k, bool fill, bool ahead, int micro_batches, lx_stage *out) {
  bool *skipped = skipped_records(st, fill, ahead);
  for (int s = 0; s < LX_STREAM_COUNT; s++)
    for (int i = 0; i < st->streams[s].count; i++) {
      lx_instr in = st->streams[s].items[i];
      if ((in.fill && !fill) || (in.ahead && !ahead)) continue;
      if (in.kind == LX_I_WAIT && skipped[in.event]) continue;
      if (in.kind == LX_I_RECORD || in.kind == LX_I_WAIT) in.event += k * st->n_events;
      if (in.mb >= 0) in.mb += k * micro_batches;
      in.step = k;
      lx_instr_append(&out->streams[s], in);
    }
  free(skipped);
}

/* The programs end a step (k) with every stream drained and the host
 * reading the loss: no instruction of the next step starts before all of
 * this one are done. Events `first` on are the barrier's. */
static void append_barrier(lx_stage *st, int k, int first) {
  lx_instr mark = {.layer = -1, .mb = -1, .step = k};
  for (int s = 1; s < LX_STREAM_COUNT; s++) {
    mark.event = first + s;
    mark.kind = LX_I_RECORD;
    lx_instr_append(&st->streams[s], mark);
    mark.kind = LX_I_WAIT;
    lx_instr_append(&st->streams[LX_STREAM_COMPUTE], mark);
  }
  mark.event = first;
  mark.kind = LX_I_RECORD;
  lx_instr_append(&st->streams[LX_STREAM_COMPUTE], mark);
  mark.kind = LX_I_WAIT;
  for (int s = 1; s < LX_STREAM_COUNT; s++)
    lx_instr_append(&st->streams[s], mark);
}

void lx_unroll_steps(const lx_pipeline *p, int steps, const bool *fill, const bool *ahead, lx_pipeline *out) {
  *out = *p;
  out->steps = steps;
  out->stages = lx_calloc((size_t)p->pp, sizeof *out->stages);
  for (int s = 0; s < p->pp; s++) {
    lx_stage *st = &out->stages[s];
    *st = p->stages[s];
    memset(st->streams, 0, sizeof st->streams);
    int events = p->stages[s].n_events;
    st->n_events = steps * (events + LX_STREAM_COUNT);
    for (int k = 0; k < steps; k++) {
      append_step(&p->stages[s], k, fill[k], ahead[k], p->micro_batches, st);
      if (k + 1 < steps) append_barrier(st, k, steps * events + k * LX_STREAM_COUNT);
    }
  }
}

void lx_unrolled_free(lx_pipeline *p) {
  for (int s = 0; p->stages && s < p->pp; s++)
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      free(p->stages[s].streams[k].items);
  free(p->stages);
  memset(p, 0, sizeof *p);
}

int lx_chunk_last_layer(const lx_chunk *c) { return c->first_layer + c->n_layers - 1; }

int lx_peer_chunk(const lx_pipeline *p, int sender, const lx_instr *send) {
  if (send->kind == LX_I_SEND_ACT && sender == p->pp - 1) return send->chunk + 1;
  if (send->kind == LX_I_SEND_GRAD && sender == 0) return send->chunk - 1;
  return send->chunk;
}

bool lx_transfer_matches(const lx_pipeline *p, int sender, const lx_instr *send, const lx_instr *recv) {
  lx_instr_kind want = send->kind == LX_I_SEND_ACT ? LX_I_RECV_ACT : LX_I_RECV_GRAD;
  return recv->kind == want && recv->mb == send->mb && recv->peer == sender &&
         recv->chunk == lx_peer_chunk(p, sender, send);
}

lx_channel lx_transfer_channel(lx_instr_kind kind) {
  switch (kind) {
  case LX_I_SEND_ACT: return LX_CHANNEL_ACT_TO_NEXT;
  case LX_I_RECV_ACT: return LX_CHANNEL_ACT_FROM_PREVIOUS;
  case LX_I_SEND_GRAD: return LX_CHANNEL_GRAD_TO_PREVIOUS;
  case LX_I_RECV_GRAD: return LX_CHANNEL_GRAD_FROM_NEXT;
  default: return LX_CHANNEL_COUNT; /* not a transfer */
  }
}

const char *lx_channel_name(lx_channel channel) {
  static const char *names[] = {"ACT_TO_NEXT", "ACT_FROM_PREVIOUS", "GRAD_TO_PREVIOUS", "GRAD_FROM_NEXT"};
  _Static_assert(sizeof names / sizeof names[0] == LX_CHANNEL_COUNT, "one name per channel");
  return NAME_OF(names, channel);
}

int lx_channel_peer(const lx_pipeline *p, int stage, lx_channel channel) {
  bool next = channel == LX_CHANNEL_ACT_TO_NEXT || channel == LX_CHANNEL_GRAD_FROM_NEXT;
  return (stage + (next ? 1 : p->pp - 1)) % p->pp;
}

void lx_chunk_ranges(const lx_stage *st, char *buf, size_t size) {
  int used = 0;
  buf[0] = '\0';
  for (int v = 0; v < st->n_chunks && used >= 0 && (size_t)used < size; v++) {
    const lx_chunk *c = &st->chunks[v];
    const char *sep = v ? ", " : "";
    if (c->n_layers == 1 && st->n_chunks > 1)
      used += snprintf(buf + used, size - (size_t)used, "%s%d", sep, c->first_layer);
    else
      used +=
          snprintf(buf + used, size - (size_t)used, "%s%d-%d", sep, c->first_layer, lx_chunk_last_layer(c));
  }
}

bool lx_next_instance(const lx_stage *st, lx_graph_id graph, int layer, lx_graph_id *next_graph,
                      int *next_layer) {
  int v = graph == LX_GRAPH_BLOCK ? lx_chunk_of(st, layer) : -1;
  if (graph == LX_GRAPH_PROLOGUE && st->chunks[0].n_layers > 0)
    return *next_graph = LX_GRAPH_BLOCK, *next_layer = st->chunks[0].first_layer, true;
  if (v >= 0 && layer < lx_chunk_last_layer(&st->chunks[v]))
    return *next_graph = LX_GRAPH_BLOCK, *next_layer = layer + 1, true;
  if (graph != LX_GRAPH_EPILOGUE && st->has_epilogue && (v < 0 || v == st->n_chunks - 1))
    return *next_graph = LX_GRAPH_EPILOGUE, *next_layer = -1, true;
  return false;
}

bool lx_is_chunk_entry(const lx_stage *st, lx_graph_id graph, int layer) {
  if (graph == LX_GRAPH_PROLOGUE) return st->has_prologue;
  int v = graph == LX_GRAPH_BLOCK ? lx_chunk_of(st, layer) : -1;
  return v >= 0 && layer == st->chunks[v].first_layer && !(v == 0 && st->has_prologue);
}

bool lx_is_chunk_exit(const lx_stage *st, lx_graph_id graph, int layer) {
  if (graph == LX_GRAPH_EPILOGUE) return st->has_epilogue;
  int v = graph == LX_GRAPH_BLOCK ? lx_chunk_of(st, layer) : -1;
  return v >= 0 && layer == lx_chunk_last_layer(&st->chunks[v]) &&
         !(v == st->n_chunks - 1 && st->has_epilogue);
}

int lx_instr_chunk(const lx_stage *st, const lx_instr *in) {
  switch (in->kind) {
  case LX_I_SEND_ACT:
  case LX_I_RECV_ACT:
  case LX_I_SEND_GRAD:
  case LX_I_RECV_GRAD: return in->chunk;
  default: break;
  }
  int v = in->graph == LX_GRAPH_BLOCK ? lx_chunk_of(st, in->layer) : -1;
  if (v >= 0) return v;
  return in->graph == LX_GRAPH_EPILOGUE && in->mb >= 0 ? st->n_chunks - 1 : 0;
}

int lx_chunk_of(const lx_stage *st, int layer) {
  for (int v = 0; v < st->n_chunks; v++)
    if (layer >= st->chunks[v].first_layer && layer <= lx_chunk_last_layer(&st->chunks[v])) return v;
  return -1;
}

int lx_layer_slot(const lx_stage *st, int layer) {
  int before = 0;
  for (int v = 0; v < st->n_chunks; v++) {
    const lx_chunk *c = &st->chunks[v];
    if (layer >= c->first_layer && layer <= lx_chunk_last_layer(c)) return before + layer - c->first_layer;
    before += c->n_layers;
  }
  return -1;
}

/* An instance's placement entries, and where op `op`'s first piece is among them. */
static size_t placement_units(const lx_stage *st, int op) {
  size_t units = 0;
  for (int i = 0; i < op; i++)
    units += st->decisions ? (size_t)lx_window_pieces(&st->decisions[i]) : 1;
  return units;
}

size_t lx_placement_size(const lx_pipeline *p, const lx_stage *st) {
  return (size_t)st->n_layers * (size_t)p->micro_batches * placement_units(st, p->ir->block.n_ops);
}

int lx_piece_window(const lx_pipeline *p, const lx_stage *st, int inst, int op, int piece) {
  if (!st->window_of || inst < 0 || inst >= st->n_layers * p->micro_batches) return -1;
  size_t per_instance = placement_units(st, p->ir->block.n_ops);
  return st->window_of[(size_t)inst * per_instance + placement_units(st, op) + (size_t)piece];
}

int lx_recompute_window(const lx_pipeline *p, const lx_stage *st, int inst, int op) {
  return lx_piece_window(p, st, inst, op, 0);
}

int lx_instance_windows(const lx_pipeline *p, const lx_stage *st, int inst, int *windows) {
  int n = 0;
  for (int i = 0, last = -1; i < p->ir->block.n_ops; i++)
    for (int k = 0; k < lx_window_pieces(&st->decisions[i]); k++) {
      int w = lx_piece_window(p, st, inst, i, k);
      if (w > last && w < st->n_windows) windows[n++] = last = w;
    }
  return n;
}

int *lx_instances_per_window(const lx_pipeline *p, const lx_stage *st) {
  if (!st->window_of || st->n_windows <= 0) return NULL;
  int *n = lx_calloc((size_t)st->n_windows, sizeof *n), *windows = lx_malloc(sizeof *windows * LX_MAX_PLACED);
  for (int inst = 0; inst < st->n_layers * p->micro_batches; inst++)
    for (int k = 0, used = lx_instance_windows(p, st, inst, windows); k < used; k++)
      n[windows[k]]++;
  free(windows);
  return n;
}

bool lx_instance_split(const lx_pipeline *p, const lx_stage *st, int inst) {
  int first = -2; /* the first in-window piece's window, -1 on demand */
  for (int i = 0; i < p->ir->block.n_ops; i++) {
    if (!st->decisions[i].recompute || !st->decisions[i].in_window) continue;
    for (int k = 0; k < lx_window_pieces(&st->decisions[i]); k++) {
      int w = lx_piece_window(p, st, inst, i, k);
      if (first == -2)
        first = w;
      else if (w != first)
        return true;
    }
  }
  return false;
}

int lx_slot_layer(const lx_stage *st, int slot) {
  for (int v = 0; v < st->n_chunks; v++) {
    if (slot < st->chunks[v].n_layers) return st->chunks[v].first_layer + slot;
    slot -= st->chunks[v].n_layers;
  }
  return -1;
}

const lx_graph *lx_graph_of(const lx_ir *ir, lx_graph_id id) {
  return id == LX_GRAPH_PROLOGUE ? &ir->prologue : id == LX_GRAPH_BLOCK ? &ir->block : &ir->epilogue;
}

void lx_instr_describe(const lx_ir *ir, const lx_instr *in, char *buf, size_t size) {
  const char *kind = lx_instr_kind_name(in->kind);
  switch (in->kind) {
  case LX_I_FWD:
  case LX_I_BWD:
  case LX_I_BWD_WEIGHT:
  case LX_I_RECOMPUTE:
  case LX_I_OFFLOAD:
  case LX_I_PREFETCH:
  case LX_I_ALLREDUCE_TP: {
    const lx_graph *g = lx_graph_of(ir, in->graph);
    static const char *colls[] = {"ALLREDUCE_TP", "REDUCE_SCATTER_TP", "ALLGATHER_TP"};
    if (in->kind == LX_I_ALLREDUCE_TP) kind = colls[in->coll];
    char pieces[48] = "";
    if (in->pieces)
      snprintf(pieces, sizeof pieces, " kv pieces [%d, %d) of %d", in->piece_first, in->piece_end,
               in->pieces);
    if (in->layer >= 0)
      snprintf(buf, size, "%s%s %s.%s L%d mb%d%s", kind, in->backward ? "(bwd)" : "", g->name,
               g->ops[in->op].name, in->layer, in->mb, pieces);
    else
      snprintf(buf, size, "%s%s %s.%s mb%d", kind, in->backward ? "(bwd)" : "", g->name, g->ops[in->op].name,
               in->mb);
    break;
  }
  case LX_I_SEND_ACT:
  case LX_I_RECV_ACT:
  case LX_I_SEND_GRAD:
  case LX_I_RECV_GRAD:
    snprintf(buf, size, "%s mb%d %s stage %d", kind, in->mb,
             in->kind == LX_I_SEND_ACT || in->kind == LX_I_SEND_GRAD ? "to" : "from", in->peer);
    break;
  case LX_I_ALLREDUCE_DP: {
    const char *graph = lx_graph_of(ir, in->graph)->name;
    if (in->tied)
      snprintf(buf, size, "%s tied embedding", kind);
    else if (in->layer >= 0)
      snprintf(buf, size, "%s %s L%d", kind, graph, in->layer);
    else
      snprintf(buf, size, "%s %s", kind, graph);
    break;
  }
  case LX_I_RECORD:
  case LX_I_WAIT: snprintf(buf, size, "%s e%d", kind, in->event); break;
  case LX_I_LOAD:
    snprintf(buf, size, "LOAD %s mb%d", in->graph == LX_GRAPH_PROLOGUE ? "tokens" : "targets", in->mb);
    break;
  default: snprintf(buf, size, "%s", kind); break;
  }
}
