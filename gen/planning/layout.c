/* layout.c — the static memory plan of one stage (see layout.h). */
#include "planning/layout.h"

#include "alloc.h"
#include "planning/passes.h"

#include <stdlib.h>

enum { ALIGN = 256 }; /* GPU allocation granularity; also a multiple of every cache line */

static int64_t aligned(int64_t bytes) { return (bytes + ALIGN - 1) / ALIGN * ALIGN; }

static int64_t take(int64_t *cursor, int64_t bytes) {
  int64_t at = *cursor;
  *cursor += aligned(bytes);
  return at;
}

const char *lx_region_name(lx_region r) {
  static const char *names[] = {"params", "previous", "master", "grads",    "adam_m",
                                "adam_v", "stash",    "work",   "boundary", "host"};
  _Static_assert(sizeof names / sizeof names[0] == LX_REGION_COUNT, "one name per region");
  return (size_t)r < LX_REGION_COUNT ? names[r] : "?";
}

/* The parameter elements op holds per tp rank, trained and frozen. */
static int64_t held_params(const lx_op *op) { return op->params_per_rank + op->frozen_per_rank; }

/* Parameter tensors of an op, in elements per tp rank (ir.h LX_PARAM_*). */
static void param_shapes(const lx_ir *ir, const lx_graph *g, const lx_op *op, int64_t out[LX_MAX_OP_PARAMS]) {
  for (int k = 0; k < LX_MAX_OP_PARAMS; k++)
    out[k] = 0;
  int tp = ir->plan.tp;
  int64_t w = op->out.width;
  switch (op->kind) {
  case LX_OP_LAYERNORM: out[0] = out[1] = w; break;
  case LX_OP_RMSNORM: out[0] = w; break;
  case LX_OP_LINEAR: {
    int64_t bias = op->has_bias ? (op->tp_role == LX_TP_COLUMN ? w / tp : w) : 0;
    out[LX_PARAM_LORA_A] = (int64_t)op->lora_rank * lx_rank_width(ir, g->ops[op->inputs[0]].out);
    out[LX_PARAM_LORA_B] = (int64_t)op->lora_rank * lx_rank_width(ir, op->out);
    out[0] = held_params(op) - bias - out[LX_PARAM_LORA_A] - out[LX_PARAM_LORA_B];
    out[1] = bias;
    break;
  }
  case LX_OP_LM_HEAD: /* a tied head on a later stage than the embedding keeps its own copy */
    out[0] =
        held_params(op) ? held_params(op) : (int64_t)ir->padded_vocab / tp * g->ops[op->inputs[0]].out.width;
    break;
  default: out[0] = held_params(op); break;
  }
}

/* The tied LM head reads the embedding's table directly when both are on
 * the same stage; otherwise its stage holds a copy whose gradient is summed
 * with the embedding's. */
static bool head_owns_table(const lx_pipeline *p, int s, const lx_op *op) {
  return op->kind == LX_OP_LM_HEAD && held_params(op) == 0 && !p->stages[s].has_prologue;
}

/* The embedding table of tied embeddings, or the last stage's copy of it. */
static bool is_tied_table(const lx_pipeline *p, int s, const lx_op *op) {
  return p->ir->model.tied_embeddings && (op->kind == LX_OP_EMBEDDING || head_owns_table(p, s, op));
}

static int64_t op_max(int64_t a, int64_t b) { return a > b ? a : b; }

static int64_t round_up(int64_t n, int multiple) { return (n + multiple - 1) / multiple * multiple; }

/* Where a graph's parameters go: the trained ones ([0]) and the frozen ones
 * ([1]) each from their cursor on, offsets counted from the graph's start. */
typedef struct {
  int64_t start[2], cursor[2];
} param_cursors;

/* The tied table's tensors (tied_pass) or all the others; offsets are within
 * the graph's (first layer's) blocks. */
static void place_param_tensors(const lx_pipeline *p, int s, const lx_graph *g, lx_op_place *places,
                                param_cursors *c, bool tied_pass) {
  for (int i = 0; i < g->n_ops; i++) {
    const lx_op *op = &g->ops[i];
    if (is_tied_table(p, s, op) != tied_pass) continue;
    int64_t shapes[LX_MAX_OP_PARAMS];
    param_shapes(p->ir, g, op, shapes);
    if (op->kind == LX_OP_LM_HEAD && !held_params(op) && !head_owns_table(p, s, op)) shapes[0] = 0;
    for (int k = 0; k < LX_MAX_OP_PARAMS; k++) {
      int frozen = !lx_param_trained(p->ir, op, k);
      places[i].param_elements[k] = shapes[k];
      places[i].param_offset[k] = shapes[k] ? c->cursor[frozen] - c->start[frozen] : -1;
      c->cursor[frozen] += shapes[k] + (shapes[k] % (ALIGN / 4) ? ALIGN / 4 - shapes[k] % (ALIGN / 4) : 0);
    }
  }
}

/* A graph's parameter block: the tied table first, then the rest, the trained
 * part padded to a multiple of `shards` elements (ZeRO-1 splits every bucket
 * evenly). Returns the elements of the table's trained part (0 if none). */
static int64_t place_params(const lx_pipeline *p, int s, lx_graph_id gid, lx_op_place *places,
                            param_cursors *c, int shards) {
  const lx_graph *g = lx_graph_of(p->ir, gid);
  c->start[0] = c->cursor[0], c->start[1] = c->cursor[1];
  place_param_tensors(p, s, g, places, c, true);
  c->cursor[0] = c->start[0] + round_up(c->cursor[0] - c->start[0], shards);
  int64_t table = c->cursor[0] - c->start[0];
  place_param_tensors(p, s, g, places, c, false);
  c->cursor[0] = c->start[0] + round_up(c->cursor[0] - c->start[0], shards);
  return table;
}

static void add_bucket(lx_stage_layout *out, lx_graph_id gid, int layer, bool tied, int64_t first,
                       int64_t elements) {
  if (elements <= 0) return;
  out->buckets = lx_realloc(out->buckets, sizeof *out->buckets * (size_t)(out->n_buckets + 1));
  out->buckets[out->n_buckets++] = (lx_param_bucket){gid, layer, tied, first, elements, first};
}

/* The buckets of the `copies` instances of a graph (a block's: the stage's
 * layers in order) whose first block starts at `start`, and where each
 * replica's optimizer shard of them goes. */
static void add_graph_buckets(lx_stage_layout *out, const lx_stage *st, lx_graph_id gid, int copies,
                              int64_t start, int64_t block, int64_t table) {
  for (int c = 0; c < copies; c++) {
    int layer = gid == LX_GRAPH_BLOCK ? lx_slot_layer(st, c) : -1;
    add_bucket(out, gid, layer, true, start + c * block, table);
    add_bucket(out, gid, layer, false, start + c * block + table, block - table);
  }
}

typedef struct {
  int64_t slot, recompute, forward, grads, window, host;
  int64_t pool[LX_POOL_COUNT]; /* the held and weight-gradient pools' parts of a layer (pool[0] unused) */
} cursors;

/* Whether a W pass of the stage reads the output of op `producer`. */
static bool read_by_weight_pass(const lx_pipeline *p, int s, lx_graph_id gid, int producer) {
  const lx_graph *g = lx_graph_of(p->ir, gid);
  for (int c = 0; c < g->n_ops; c++)
    if (lx_op_saves(g, c, producer) && lx_defers_weight_grad(p->ir, &p->stages[s], gid, c)) return true;
  return false;
}

/* Block decisions apply to the block; prologue and epilogue keep everything. */
static void place_activations(const lx_pipeline *p, int s, lx_graph_id gid, lx_op_place *places, cursors *c) {
  const lx_graph *g = lx_graph_of(p->ir, gid);
  const lx_op_decision *d = gid == LX_GRAPH_BLOCK ? p->stages[s].decisions : NULL;
  for (int i = 0; i < g->n_ops; i++) {
    const lx_op *op = &g->ops[i];
    lx_op_place *pl = &places[i];
    pl->item_offset = pl->output_work_offset = pl->grad_offset = -1;
    bool saved = lx_last_saver(g, i) >= 0 || op->kind == LX_OP_INPUT; /* inputs are where callers write */
    /* an offloaded op's saved tensors are where in-window recompute would put them */
    pl->offloaded = d && d[i].offload;
    bool dropped = d && (d[i].drop_output || pl->offloaded) && op->kind != LX_OP_INPUT;
    pl->in_window = d && (d[i].in_window || pl->offloaded);
    int64_t *regenerated = pl->in_window ? &c->window : &c->recompute;
    pl->item_held = saved && !dropped && read_by_weight_pass(p, s, gid, i);
    if (saved && !dropped)
      pl->item_offset = take(pl->item_held ? &c->pool[LX_POOL_HELD] : &c->slot, op->out_bytes);
    else if (saved)
      pl->output_work_offset = take(regenerated, op->out_bytes);
    else if (lx_chunk_local(g, i)) /* the backward makes it again, beside the gradients */
      pl->output_work_offset = take(&c->recompute, lx_resident_bytes(g, i));
    else if (i != g->output && !op->out.scalar)
      pl->output_work_offset = take(&c->forward, op->out_bytes);
    pl->output_recomputed = (saved && dropped) || lx_chunk_local(g, i);
    bool remade = d && d[i].recompute && !lx_recomputes_internals_only(g, d, i);
    pl->scratch_offset = remade && pl->item_offset >= 0 ? take(regenerated, op->out_bytes) : -1;
    pl->internals_in_work = d && (d[i].drop_internals || pl->offloaded);
    for (int k = 0; k < op->n_saved; k++)
      if (op->saved[k].kind == LX_SAVE_INTERNAL)
        pl->internal_offset[k] = take(pl->internals_in_work ? regenerated : &c->slot, op->saved[k].bytes);
    for (int k = 0; k <= LX_MAX_SAVED; k++)
      pl->host_offset[k] = -1;
    if (pl->offloaded && saved) pl->host_offset[0] = take(&c->host, lx_host_copy_bytes(g, &d[i], i));
    for (int k = 0; pl->offloaded && k < op->n_saved; k++)
      if (op->saved[k].kind == LX_SAVE_INTERNAL) pl->host_offset[k + 1] = take(&c->host, op->saved[k].bytes);
    bool has_grad =
        op->kind != LX_OP_INPUT && i != g->output && op->out.dtype != LX_DTYPE_INT32 && !op->out.scalar;
    pl->grad_in_pool = has_grad && lx_defers_weight_grad(p->ir, &p->stages[s], gid, i);
    if (has_grad)
      pl->grad_offset =
          take(pl->grad_in_pool ? &c->pool[LX_POOL_WEIGHT_GRAD] : &c->grads, lx_resident_bytes(g, i));
  }
}

/* The largest whole tensor the stage's ops gather or reduce-scatter (their
 * inputs and outputs are sequence shards of it). */
static int64_t sp_buffer_bytes(const lx_pipeline *p, int s) {
  const lx_ir *ir = p->ir;
  const lx_stage *st = &p->stages[s];
  if (!lx_sequence_parallel(ir)) return 0;
  bool present[LX_GRAPH_COUNT] = {st->has_prologue, st->n_layers > 0, st->has_epilogue};
  int64_t most = 0;
  for (int gid = 0; gid < LX_GRAPH_COUNT; gid++) {
    const lx_graph *g = lx_graph_of(ir, (lx_graph_id)gid);
    for (int i = 0; present[gid] && i < g->n_ops; i++) {
      const lx_op *op = &g->ops[i];
      lx_tp_collectives f = lx_tp_collectives_of(ir, op, false);
      if (!f.gather_before && !f.reduce_after) continue;
      /* a column-parallel op gathers its input (and reduces its gradient), the others reduce their output */
      const lx_op *whole = op->tp_role == LX_TP_COLUMN ? &g->ops[op->inputs[0]] : op;
      most = op_max(most, whole->out_bytes * ir->plan.tp);
    }
  }
  return most;
}

static bool block_in_pieces(const lx_graph *block) {
  for (int i = 0; i < block->n_ops; i++)
    if (block->ops[i].chunks > 1) return true;
  return false;
}

/* Interleaved 1F1B: chunk v's pool of slots, each its layers with the
 * prologue's part before them (chunk 0 of the first stage) or the
 * epilogue's after them (the last chunk of the last stage). Returns the
 * bytes of all pools. `whole` is the bytes of a slot of the whole stage. */
static int64_t place_chunk_pools(const lx_stage *st, int64_t whole, lx_stage_layout *out) {
  int64_t prologue = out->graph_slot_offset[LX_GRAPH_BLOCK] - out->graph_slot_offset[LX_GRAPH_PROLOGUE];
  int64_t epilogue = whole - out->graph_slot_offset[LX_GRAPH_EPILOGUE], cursor = 0;
  for (int v = 0; v < st->n_chunks; v++) {
    int64_t before = v == 0 ? prologue : 0, after = v == st->n_chunks - 1 ? epilogue : 0;
    out->chunk_slots[v] = st->chunk_slots[v];
    out->chunk_slot_bytes[v] = aligned(before + st->chunks[v].n_layers * out->layer_slot_bytes + after);
    out->chunk_pool_offset[v] = cursor;
    out->chunk_layer_base[v] = cursor + before;
    cursor += out->chunk_slots[v] * out->chunk_slot_bytes[v];
  }
  return cursor;
}

/* The stash region: the stash slots (under interleaved 1F1B, each chunk's
 * pool), then the held and the weight-gradient pools, whose slots hold
 * every block layer of the stage. */
static void place_pools(const lx_stage *st, int64_t whole, lx_stage_layout *out) {
  int counts[LX_POOL_COUNT] = {out->slots, st->held_micro_batches, st->weight_grad_micro_batches};
  int64_t cursor = 0;
  for (int pool = 0; pool < LX_POOL_COUNT; pool++) {
    int64_t slot =
        pool == LX_POOL_STASH ? out->slot_bytes : aligned(st->n_layers * out->pool_layer_bytes[pool]);
    out->pool_slots[pool] = slot > 0 ? counts[pool] : 0;
    out->pool_offset[pool] = cursor;
    out->pool_slot_bytes[pool] = slot;
    bool chunked = pool == LX_POOL_STASH && st->n_chunks > 1;
    cursor += chunked ? place_chunk_pools(st, whole, out) : out->pool_slots[pool] * slot;
  }
}

/* Whether the stage's chunks send activations (and receive their gradients)
 * to a next stage, and receive activations (sending their gradients) from a
 * previous one: under interleaved 1F1B every stage does both. */
static bool sends_forward(const lx_pipeline *p, int s) { return s + 1 < p->pp || p->virtual_stages > 1; }
static bool receives_forward(const lx_pipeline *p, int s) { return s > 0 || p->virtual_stages > 1; }

/* Per chunk and slot: [send act][recv grad] where it sends forward, then [send grad]. */
static int per_slot_buffers(const lx_pipeline *p, int s) {
  return (sends_forward(p, s) ? 2 : 0) + (receives_forward(p, s) ? 1 : 0);
}

void lx_layout_stage(const lx_pipeline *p, int s, int param_elt, bool master_copy, lx_stage_layout *out) {
  const lx_ir *ir = p->ir;
  const lx_stage *st = &p->stages[s];
  int dp = ir->plan.dp;
  *out = (lx_stage_layout){.param_elt = param_elt,
                           .activation_elt = lx_dtype_bytes(ir->training.dtype),
                           .slots = st->stashed_micro_batches,
                           .shards = ir->plan.zero ? dp : 1};
  static const lx_graph_id order[] = {LX_GRAPH_PROLOGUE, LX_GRAPH_BLOCK, LX_GRAPH_EPILOGUE};
  bool present[LX_GRAPH_COUNT] = {st->has_prologue, st->n_layers > 0, st->has_epilogue};
  param_cursors params = {{0, 0}, {0, 0}};
  cursors c = {0};
  for (int k = 0; k < LX_GRAPH_COUNT; k++) {
    lx_graph_id gid = order[k];
    const lx_graph *g = lx_graph_of(ir, gid);
    out->places[gid] = lx_calloc((size_t)g->n_ops, sizeof(lx_op_place));
    int64_t slot_before = c.slot;
    cursors graph_work = {0}; /* offsets within the graph's part of a slot */
    int64_t table = place_params(p, s, gid, out->places[gid], &params, out->shards);
    int64_t params_before = params.start[0], trained = params.cursor[0] - params.start[0],
            frozen = params.cursor[1] - params.start[1];
    place_activations(p, s, gid, out->places[gid], &graph_work);
    out->graph_param_offset[gid] = params_before;
    out->graph_frozen_offset[gid] = params.start[1];
    out->graph_slot_offset[gid] = slot_before;
    int copies = gid == LX_GRAPH_BLOCK ? st->n_layers : 1;
    if (!present[gid]) copies = 0;
    if (gid == LX_GRAPH_BLOCK) {
      out->host_layer_bytes = graph_work.host;
      out->layer_param_elements = trained;
      out->layer_frozen_elements = frozen;
      out->layer_slot_bytes = graph_work.slot;
      for (int pool = LX_POOL_HELD; pool < LX_POOL_COUNT; pool++)
        out->pool_layer_bytes[pool] = graph_work.pool[pool];
    }
    add_graph_buckets(out, st, gid, copies, params_before, trained, table);
    params.cursor[0] = params_before + copies * trained;
    params.cursor[1] = params.start[1] + copies * frozen;
    c.slot = slot_before + copies * graph_work.slot;
    /* work buffers are per graph instance: one layer at a time */
    if (present[gid]) {
      if (graph_work.recompute > c.recompute) c.recompute = graph_work.recompute;
      if (graph_work.forward > c.forward) c.forward = graph_work.forward;
      if (graph_work.grads > c.grads) c.grads = graph_work.grads;
      if (graph_work.window > c.window) c.window = graph_work.window;
    }
  }
  out->param_elements = params.cursor[0];
  out->frozen_first = params.cursor[0];
  out->frozen_elements = params.cursor[1];
  for (int b = 0; b < out->n_buckets; b++) {
    out->buckets[b].shard_first = out->optimizer_elements;
    out->optimizer_elements += out->buckets[b].elements / out->shards;
  }
  out->slot_bytes = aligned(c.slot);
  place_pools(st, c.slot, out);
  out->forward_work_bytes = c.forward;
  out->backward_work_bytes = c.recompute + c.grads;
  out->recompute_work_bytes = c.recompute;
  out->window_work_offset = c.recompute + (c.forward > c.grads ? c.forward : c.grads);
  out->window_buffer_bytes = aligned(c.window);
  out->boundary_bytes = ir->block.ops[0].out_bytes;
  out->sp_buffer_bytes = aligned(sp_buffer_bytes(p, s));
  out->sp_buffer_offset[0] = out->window_work_offset + 2 * out->window_buffer_bytes;
  out->sp_buffer_offset[1] = out->sp_buffer_offset[0] + out->sp_buffer_bytes;
  out->sp_buffer_offset[2] = out->sp_buffer_offset[1] + out->sp_buffer_bytes;
  out->sp_grad_buffer = out->sp_buffer_bytes > 0 && st->n_layers > 0 && block_in_pieces(&ir->block);
  out->boundary_grad_offset[0] = 0;
  out->boundary_grad_offset[1] = aligned(out->boundary_bytes);
  out->send_offset = 2 * aligned(out->boundary_bytes);
  out->chunk_send_bytes = (int64_t)per_slot_buffers(p, s) * out->slots * aligned(out->boundary_bytes);

  int64_t fp32_optimizer = out->optimizer_elements * 4;
  int64_t sizes[LX_REGION_COUNT] = {
      [LX_REGION_PARAMS] = (out->param_elements + out->frozen_elements) * param_elt,
      [LX_REGION_PREVIOUS] = p->kind == LX_SCHEDULE_2BW ? out->param_elements * param_elt : 0,
      [LX_REGION_MASTER] = master_copy ? fp32_optimizer : 0,
      [LX_REGION_GRADS] = out->param_elements * 4,
      [LX_REGION_ADAM_M] = fp32_optimizer,
      [LX_REGION_ADAM_V] = fp32_optimizer,
      [LX_REGION_STASH] = out->pool_offset[LX_POOL_COUNT - 1] +
                          out->pool_slots[LX_POOL_COUNT - 1] * out->pool_slot_bytes[LX_POOL_COUNT - 1],
      [LX_REGION_WORK] = out->sp_buffer_offset[2] + (out->sp_grad_buffer ? out->sp_buffer_bytes : 0),
      [LX_REGION_BOUNDARY] = out->send_offset + st->n_chunks * out->chunk_send_bytes,
  };
  out->host_slots = lx_host_slots(p, st, out->slots);
  out->host_slot_bytes = aligned(st->n_layers * out->host_layer_bytes);
  sizes[LX_REGION_HOST] = out->host_layer_bytes > 0 ? out->host_slots * out->host_slot_bytes : 0;
  int64_t cursor = 0;
  for (int r = 0; r < LX_REGION_COUNT; r++) {
    if (r == LX_REGION_HOST) out->total = cursor;
    out->region_offset[r] = cursor;
    out->region_bytes[r] = aligned(sizes[r]);
    cursor += out->region_bytes[r];
  }
}

const lx_param_bucket *lx_find_bucket(const lx_stage_layout *l, lx_graph_id graph, int layer, bool tied) {
  for (int b = 0; b < l->n_buckets; b++)
    if (l->buckets[b].graph == graph && l->buckets[b].layer == layer && l->buckets[b].tied == tied)
      return &l->buckets[b];
  return NULL;
}

void lx_layout_free(lx_stage_layout *l) {
  for (int g = 0; g < LX_GRAPH_COUNT; g++)
    free(l->places[g]);
  free(l->buckets);
}

/* ---- locating tensors ------------------------------------------------------ */

/* Every location is affine in the instruction's micro-batch slot and layer:
 * constant + (mb % slots) * per_slot + (layer's slot in the stage) * per_layer
 *   + ((layer + parity_add) % 2) * parity_stride,
 * which lx_locate evaluates and lx_locate_expr prints as C. */

static lx_place_expr fixed(lx_region r, int64_t offset, int64_t bytes) {
  return (lx_place_expr){.region = r, .constant = offset, .bytes = bytes};
}

/* A block instance's terms in `layer`; prologue and epilogue have none. */
static bool varies_by_layer(lx_tensor_ref t) { return t.graph == LX_GRAPH_BLOCK; }

/* Interleaved 1F1B: a block layer's stash in its chunk's pool; the
 * prologue's in chunk 0's slots, the epilogue's in the last chunk's. */
static lx_place_expr in_chunk_slot(const lx_stage *st, const lx_stage_layout *l, lx_tensor_ref t,
                                   int64_t inner, lx_region r, int64_t bytes) {
  int64_t base = l->region_offset[LX_REGION_STASH] + inner;
  if (t.graph == LX_GRAPH_BLOCK) {
    lx_place_expr e = fixed(r, base, bytes);
    e.chunk_stash = true;
    e.per_layer = l->layer_slot_bytes;
    return e;
  }
  int v = t.graph == LX_GRAPH_PROLOGUE ? 0 : st->n_chunks - 1;
  int64_t at = t.graph == LX_GRAPH_PROLOGUE
                   ? l->chunk_pool_offset[0]
                   : l->chunk_layer_base[v] + st->chunks[v].n_layers * l->layer_slot_bytes;
  lx_place_expr e = fixed(r, base + at, bytes);
  e.per_slot = l->chunk_slot_bytes[v];
  e.wrap = l->chunk_slots[v];
  return e;
}

static lx_place_expr in_slot(const lx_stage *st, const lx_stage_layout *l, lx_tensor_ref t, int64_t inner,
                             lx_region r, int64_t bytes) {
  if (st->n_chunks > 1) return in_chunk_slot(st, l, t, inner, r, bytes);
  lx_place_expr e =
      fixed(r, l->region_offset[LX_REGION_STASH] + l->graph_slot_offset[t.graph] + inner, bytes);
  e.per_slot = l->slot_bytes;
  e.per_layer = varies_by_layer(t) ? l->layer_slot_bytes : 0;
  return e;
}

/* In the held or weight-gradient pool (block layers only). */
static lx_place_expr in_pool(const lx_stage_layout *l, lx_slot_pool pool, int64_t inner, int64_t bytes) {
  lx_place_expr e =
      fixed(LX_REGION_STASH, l->region_offset[LX_REGION_STASH] + l->pool_offset[pool] + inner, bytes);
  e.per_slot = l->pool_slot_bytes[pool];
  e.per_layer = l->pool_layer_bytes[pool];
  e.pool = pool;
  return e;
}

int lx_most_slots(const lx_stage_layout *l) {
  int slots = 0;
  for (int pool = 0; pool < LX_POOL_COUNT; pool++)
    if (l->pool_slots[pool] > slots) slots = l->pool_slots[pool];
  return slots;
}

int lx_place_slots(const lx_stage_layout *l, const lx_place_expr *e) {
  if (e->wrap) return e->wrap;
  return e->per_slot && l->pool_slots[e->pool] > 0 ? l->pool_slots[e->pool] : 1;
}

/* Boundary gradients alternate with the pipeline position of the graph
 * instance: prologue 0, layer l at l + 1, epilogue after the last layer. */
static lx_place_expr boundary_grad(const lx_pipeline *p, const lx_stage_layout *l, lx_tensor_ref t,
                                   int shift) {
  int64_t base = l->region_offset[LX_REGION_BOUNDARY];
  int64_t stride = l->boundary_grad_offset[1];
  if (varies_by_layer(t)) {
    lx_place_expr e = fixed(LX_REGION_BOUNDARY, base, l->boundary_bytes);
    e.parity_add = 1 + shift;
    e.parity_stride = stride;
    return e;
  }
  int pos = t.graph == LX_GRAPH_PROLOGUE ? 0 : p->ir->model.layers + 1;
  return fixed(LX_REGION_BOUNDARY, base + ((pos + shift) % 2) * stride, l->boundary_bytes);
}

/* Where the output of a graph's last op goes: the next graph's input, or
 * where its chunk ends, the outgoing activation. */
static lx_tensor_ref next_graph_input(const lx_pipeline *p, int s, lx_tensor_ref t) {
  lx_graph_id g;
  int layer;
  if (lx_next_instance(&p->stages[s], t.graph, t.layer, &g, &layer))
    return (lx_tensor_ref){g, layer, 0, t.mb, LX_T_OUTPUT, 0};
  return (lx_tensor_ref){LX_GRAPH_BLOCK, t.layer, 0, t.mb, LX_T_SEND_ACT, 0};
}

static lx_place_expr place(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_ref t);

/* A block layer's stash in its chunk's pool (chunk_stash) as the fixed
 * place it is at `layer`: its chunk's slots, its place among them. */
static lx_place_expr at_chunk_layer(const lx_stage *st, const lx_stage_layout *l, lx_place_expr e,
                                    int layer) {
  int c = lx_chunk_of(st, layer);
  e.constant += l->chunk_layer_base[c] + (layer - st->chunks[c].first_layer) * e.per_layer;
  e.per_slot = l->chunk_slot_bytes[c];
  e.wrap = l->chunk_slots[c];
  e.per_layer = 0;
  e.chunk_stash = false;
  return e;
}

/* The place of tensor `to`, written in terms of the layer of `from`. */
static lx_place_expr rebased(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_ref from,
                             lx_tensor_ref to) {
  lx_place_expr e = place(p, s, l, to);
  if (varies_by_layer(from) && varies_by_layer(to)) {
    int delta = to.layer - from.layer;
    e.constant += delta * e.per_layer;
    e.parity_add += delta;
  } else if (varies_by_layer(to)) { /* fixed layer seen from a prologue or epilogue */
    const lx_stage *st = &p->stages[s];
    if (e.chunk_stash) e = at_chunk_layer(st, l, e, to.layer);
    e.constant +=
        lx_layer_slot(st, to.layer) * e.per_layer + ((to.layer + e.parity_add) % 2) * e.parity_stride;
    e.per_layer = e.parity_stride = e.parity_add = 0;
  }
  return e;
}

static lx_place_expr slot_buffer(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_role role) {
  int64_t block = role == LX_T_SEND_ACT ? 0 : role == LX_T_RECV_GRAD ? 1 : (sends_forward(p, s) ? 2 : 0);
  int64_t stride = aligned(l->boundary_bytes);
  lx_place_expr e = fixed(LX_REGION_BOUNDARY,
                          l->region_offset[LX_REGION_BOUNDARY] + l->send_offset + block * l->slots * stride,
                          l->boundary_bytes);
  e.per_slot = stride;
  e.per_chunk = p->virtual_stages > 1 ? l->chunk_send_bytes : 0;
  return e;
}

static lx_place_expr place_grad(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_ref t) {
  const lx_graph *g = lx_graph_of(p->ir, t.graph);
  const lx_op *op = &g->ops[t.op];
  const lx_stage *st = &p->stages[s];
  if (op->kind == LX_OP_INPUT && t.graph == LX_GRAPH_BLOCK && lx_is_chunk_entry(st, t.graph, t.layer))
    return slot_buffer(p, s, l, LX_T_SEND_GRAD);
  if (t.op == g->output && lx_is_chunk_exit(st, t.graph, t.layer))
    return slot_buffer(p, s, l, LX_T_RECV_GRAD);
  if (op->kind == LX_OP_INPUT) return boundary_grad(p, l, t, 0);
  if (t.op == g->output) return boundary_grad(p, l, t, 1);
  if (l->places[t.graph][t.op].grad_in_pool)
    return in_pool(l, LX_POOL_WEIGHT_GRAD, l->places[t.graph][t.op].grad_offset, op->out_bytes);
  return fixed(LX_REGION_WORK,
               l->region_offset[LX_REGION_WORK] + l->recompute_work_bytes +
                   l->places[t.graph][t.op].grad_offset,
               lx_resident_bytes(g, t.op));
}

/* A regenerated tensor of an op: in the recompute part of work, or in the
 * window buffer of the layer's parity. */
static lx_place_expr regenerated(const lx_stage_layout *l, const lx_op_place *pl, int64_t offset,
                                 int64_t bytes) {
  int64_t work = l->region_offset[LX_REGION_WORK];
  if (!pl->in_window) return fixed(LX_REGION_WORK, work + offset, bytes);
  lx_place_expr e = fixed(LX_REGION_WORK, work + l->window_work_offset + offset, bytes);
  e.parity_stride = l->window_buffer_bytes;
  return e;
}

static lx_place_expr place(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_ref t) {
  const lx_op *op = &lx_graph_of(p->ir, t.graph)->ops[t.op];
  const lx_op_place *pl = &l->places[t.graph][t.op];
  int64_t work = l->region_offset[LX_REGION_WORK];
  switch (t.role) {
  case LX_T_PARAM: {
    bool trained = lx_param_trained(p->ir, op, t.index);
    int64_t element = trained ? l->graph_param_offset[t.graph] + pl->param_offset[t.index]
                              : l->frozen_first + l->graph_frozen_offset[t.graph] + pl->param_offset[t.index];
    lx_place_expr e = fixed(LX_REGION_PARAMS, l->region_offset[LX_REGION_PARAMS] + element * l->param_elt,
                            pl->param_elements[t.index] * l->param_elt);
    int64_t layer_elements = trained ? l->layer_param_elements : l->layer_frozen_elements;
    e.per_layer = varies_by_layer(t) ? layer_elements * l->param_elt : 0;
    e.frozen = !trained;
    e.versioned = trained && l->region_bytes[LX_REGION_PREVIOUS] > 0; /* the frozen never change */
    return e;
  }
  case LX_T_INTERNAL:
    if (pl->internals_in_work)
      return regenerated(l, pl, pl->internal_offset[t.index], op->saved[t.index].bytes);
    return in_slot(&p->stages[s], l, t, pl->internal_offset[t.index], LX_REGION_STASH,
                   op->saved[t.index].bytes);
  case LX_T_GRAD: return place_grad(p, s, l, t);
  case LX_T_SEND_ACT:
  case LX_T_SEND_GRAD:
  case LX_T_RECV_GRAD: return slot_buffer(p, s, l, t.role);
  case LX_T_SP_GATHERED:
  case LX_T_SP_WHOLE: {
    const lx_graph *g = lx_graph_of(p->ir, t.graph);
    bool input = (t.role == LX_T_SP_GATHERED) == (t.index == 0);
    int64_t shard = input ? g->ops[op->inputs[0]].out_bytes : op->out_bytes;
    int buffer = t.role == LX_T_SP_WHOLE ? 1 : t.index == 1 && l->sp_grad_buffer ? 2 : 0;
    return fixed(LX_REGION_WORK, work + l->sp_buffer_offset[buffer], shard * p->ir->plan.tp);
  }
  case LX_T_HOST: { /* a token-wise split's copy: its first rows alone (it has no internals) */
    int64_t output = lx_host_copy_bytes(lx_graph_of(p->ir, t.graph), &p->stages[s].decisions[t.op], t.op);
    lx_place_expr e = fixed(LX_REGION_HOST, l->region_offset[LX_REGION_HOST] + pl->host_offset[t.index],
                            t.index == 0 ? output : op->saved[t.index - 1].bytes);
    e.per_slot = l->host_slot_bytes;
    e.wrap = l->host_slots;
    e.per_layer = l->host_layer_bytes;
    return e;
  }
  case LX_T_RECOMPUTED:
    if (pl->scratch_offset >= 0) return regenerated(l, pl, pl->scratch_offset, op->out_bytes);
    return place(p, s, l, (lx_tensor_ref){t.graph, t.layer, t.op, t.mb, LX_T_OUTPUT, 0});
  case LX_T_OUTPUT:
    if (pl->item_offset >= 0 && pl->item_held)
      return in_pool(l, LX_POOL_HELD, pl->item_offset, op->out_bytes);
    if (pl->item_offset >= 0)
      return in_slot(&p->stages[s], l, t, pl->item_offset, LX_REGION_STASH, op->out_bytes);
    if (pl->output_work_offset >= 0 && pl->output_recomputed)
      return regenerated(l, pl, pl->output_work_offset, lx_resident_bytes(lx_graph_of(p->ir, t.graph), t.op));
    if (pl->output_work_offset >= 0)
      return fixed(LX_REGION_WORK, work + l->recompute_work_bytes + pl->output_work_offset, op->out_bytes);
    return rebased(p, s, l, t, next_graph_input(p, s, t));
  }
  return fixed(LX_REGION_COUNT, -1, 0);
}

lx_place_expr lx_place_of(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_ref t) {
  return place(p, s, l, t);
}

lx_span lx_locate(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_ref t) {
  lx_place_expr e = place(p, s, l, t);
  const lx_stage *st = &p->stages[s];
  int layer = varies_by_layer(t) ? t.layer : 0, slot = varies_by_layer(t) ? lx_layer_slot(st, layer) : 0;
  int chunk = varies_by_layer(t) ? lx_chunk_of(st, layer) : 0;
  if (e.chunk_stash) e = at_chunk_layer(st, l, e, layer);
  int64_t offset = e.constant + (int64_t)(t.mb % lx_place_slots(l, &e)) * e.per_slot +
                   (int64_t)slot * e.per_layer + (int64_t)((layer + e.parity_add) % 2) * e.parity_stride +
                   (int64_t)chunk * e.per_chunk;
  return (lx_span){e.region, offset, e.bytes};
}

/* Strides print as long long literals: int micro-batch and layer indices
 * times a stride pass 2^31 bytes in arenas of big models. */
/* ---- how far each region is used ---------------------------------------------------- */

static void extend(const lx_stage_layout *l, lx_span span, int64_t extents[LX_REGION_COUNT]) {
  int64_t end = span.offset + span.bytes - l->region_offset[span.region];
  if (span.bytes > 0 && end > extents[span.region]) extents[span.region] = end;
}

static void extend_op(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_ref t,
                      int64_t *extents) {
  const lx_op *op = &lx_graph_of(p->ir, t.graph)->ops[t.op];
  const lx_op_place *pl = &l->places[t.graph][t.op];
  bool activation = op->out.dtype != LX_DTYPE_INT32 && !op->out.scalar;
  t.role = LX_T_OUTPUT;
  if (!op->out.scalar) extend(l, lx_locate(p, s, l, t), extents);
  t.role = LX_T_GRAD;
  if (activation) extend(l, lx_locate(p, s, l, t), extents);
  t.role = LX_T_RECOMPUTED;
  if (t.graph == LX_GRAPH_BLOCK && p->stages[s].decisions[t.op].recompute)
    extend(l, lx_locate(p, s, l, t), extents);
  for (int k = 0; k < op->n_saved; k++)
    if (op->saved[k].kind == LX_SAVE_INTERNAL) {
      t.role = LX_T_INTERNAL, t.index = k;
      extend(l, lx_locate(p, s, l, t), extents);
    }
  for (int k = 0; k < LX_MAX_OP_PARAMS; k++)
    if (pl->param_elements[k] > 0) {
      t.role = LX_T_PARAM, t.index = k;
      extend(l, lx_locate(p, s, l, t), extents);
    }
}

/* The whole tensors an op's sequence-parallel collectives gather into or
 * reduce-scatter from: a column-parallel op's input and its gradient, the
 * others' output and its gradient. */
static void extend_sequence_parallel(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_ref t,
                                     int64_t *extents) {
  const lx_op *op = &lx_graph_of(p->ir, t.graph)->ops[t.op];
  lx_tp_collectives c = lx_tp_collectives_of(p->ir, op, false);
  if (!lx_sequence_parallel(p->ir) || (!c.gather_before && !c.reduce_after)) return;
  bool column = op->tp_role == LX_TP_COLUMN;
  t.role = LX_T_SP_GATHERED, t.index = !column;
  extend(l, lx_locate(p, s, l, t), extents);
  t.role = LX_T_SP_WHOLE, t.index = column;
  extend(l, lx_locate(p, s, l, t), extents);
}

void lx_layout_extents(const lx_pipeline *p, int s, const lx_stage_layout *l,
                       int64_t extents[LX_REGION_COUNT]) {
  const lx_stage *st = &p->stages[s];
  for (int r = 0; r < LX_REGION_COUNT; r++)
    extents[r] = 0;
  for (int mb = 0; mb < lx_most_slots(l); mb++) {
    for (int g = 0; g < LX_GRAPH_COUNT; g++) {
      bool present = g == LX_GRAPH_PROLOGUE   ? st->has_prologue
                     : g == LX_GRAPH_EPILOGUE ? st->has_epilogue
                                              : true;
      int count = g == LX_GRAPH_BLOCK ? st->n_layers : 1;
      for (int k = 0; present && k < count; k++)
        for (int i = 0, layer = g == LX_GRAPH_BLOCK ? lx_slot_layer(st, k) : -1;
             i < lx_graph_of(p->ir, (lx_graph_id)g)->n_ops; i++) {
          extend_op(p, s, l, (lx_tensor_ref){(lx_graph_id)g, layer, i, mb, LX_T_OUTPUT, 0}, extents);
          extend_sequence_parallel(p, s, l, (lx_tensor_ref){(lx_graph_id)g, layer, i, mb, LX_T_OUTPUT, 0},
                                   extents);
        }
    }
    for (int v = 0; v < st->n_chunks;
         v++) /* the outgoing activation is also where a chunk's last layer writes */
      if (lx_is_chunk_exit(st, LX_GRAPH_BLOCK, lx_chunk_last_layer(&st->chunks[v])))
        extend(l,
               lx_locate(p, s, l,
                         (lx_tensor_ref){LX_GRAPH_BLOCK, st->chunks[v].first_layer, 0, mb, LX_T_SEND_ACT, 0}),
               extents);
  }
  /* the step clears every gradient and the start every optimizer state, padding included */
  extents[LX_REGION_GRADS] = l->param_elements * 4;
  extents[LX_REGION_ADAM_M] = extents[LX_REGION_ADAM_V] = l->optimizer_elements * 4;
  extents[LX_REGION_MASTER] = l->region_bytes[LX_REGION_MASTER] ? l->optimizer_elements * 4 : 0;
  extents[LX_REGION_PREVIOUS] =
      l->region_bytes[LX_REGION_PREVIOUS] ? extents[LX_REGION_PARAMS] : 0; /* a copy */
}
