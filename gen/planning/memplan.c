/* memplan.c — the bytes each stage holds, instruction by instruction. */
#include "planning/memplan.h"

#include <stdlib.h>

#include "alloc.h"
#include "planning/passes.h"

/* Bytes per parameter: the training-dtype copy (two under 2BW) (+ an fp32 master copy when it
 * is 16-bit), an fp32 gradient, and AdamW's two fp32 moments. ZeRO-1 keeps
 * the master and the moments of one dp replica's share only. */
/* Trained parameters have a gradient, AdamW moments and (16-bit) an fp32
 * master; fine-tuning's frozen ones the weights alone. */
static void static_bytes(const lx_ir *ir, lx_schedule kind, int64_t params, int64_t frozen,
                         lx_stage_memory *m) {
  int elt = lx_dtype_bytes(ir->training.dtype);
  int64_t shards = ir->plan.zero && ir->plan.dp > 1 ? ir->plan.dp : 1;
  int64_t share = (params + shards - 1) / shards;
  int versions = kind == LX_SCHEDULE_2BW ? 2 : 1; /* 2BW keeps the previous weights too */
  m->weights = versions * params * elt + (elt < 4 ? share * 4 : 0) + frozen * elt;
  m->grads = params * 4;
  m->optimizer = share * 8;
}

static int first_computing_op(const lx_graph *g) {
  for (int i = 0; i < g->n_ops; i++)
    if (g->ops[i].kind != LX_OP_INPUT) return i;
  return 0;
}

/* The op whose backward or W pass is the last to need the tensor op
 * `producer` makes: its last saver, unless a saver defers its weight gradient
 * (every W of a micro-batch follows all its backwards, in the backwards'
 * order): then the last such. *weight says which. */
static int releaser(const lx_ir *ir, const lx_stage *st, lx_graph_id gid, const lx_graph *g, int producer,
                    int last_saver, bool *weight) {
  *weight = false;
  int last = last_saver;
  for (int c = g->n_ops - 1; c >= 0; c--)
    if (lx_op_saves(g, c, producer) && lx_defers_weight_grad(ir, st, gid, c)) *weight = true, last = c;
  return last;
}

/* The gradients of the output and the inputs, and in mini-sequences the
 * pieces the backward makes again. */
static int64_t backward_working_set(const lx_graph *g, int i) {
  const lx_op *op = &g->ops[i];
  int64_t bytes = lx_resident_bytes(g, i);
  for (int k = 0; k < op->n_inputs; k++)
    if (g->ops[op->inputs[k]].out.dtype != LX_DTYPE_INT32) bytes += lx_resident_bytes(g, op->inputs[k]);
  if (op->chunks < 2) return bytes;
  int *made = lx_malloc(sizeof *made * (size_t)g->n_ops);
  for (int j = 0, n = lx_made_again(g, i, made); j < n; j++)
    bytes += lx_resident_bytes(g, made[j]);
  free(made);
  return bytes;
}

/* What lx_instr_memory answers besides the items: the working sets, and the
 * output gradient a deferred weight gradient holds; no decision changes them. */
static void working_sets(const lx_ir *ir, const lx_stage *st, lx_graph_id gid, const lx_graph *g,
                         lx_graph_memory *gm) {
  for (int i = 0; i < g->n_ops; i++) {
    gm->transient_fwd[i] = lx_output_saved(g, i) ? 0 : lx_resident_bytes(g, i);
    gm->transient_bwd[i] = backward_working_set(g, i);
    gm->alloc_bwd[i] = lx_defers_weight_grad(ir, st, gid, i) ? g->ops[i].out_bytes : 0;
  }
}

/* decisions == NULL keeps everything (prologue and epilogue are not recomputed).
 * What an in-window op regenerates lives in the window buffers, which are
 * static (layout.h): it is counted once, in *window, not per instruction. */
static lx_graph_memory graph_memory(const lx_ir *ir, const lx_stage *st, lx_graph_id gid,
                                    const lx_op_decision *d, int64_t *window, int64_t *host) {
  const lx_graph *g = lx_graph_of(ir, gid);
  size_t n = (size_t)g->n_ops;
  lx_graph_memory gm = {lx_calloc(n, sizeof(int64_t)), lx_calloc(n, sizeof(int64_t)),
                        lx_calloc(n, sizeof(int64_t)), lx_calloc(n, sizeof(int64_t)),
                        lx_calloc(n, sizeof(int64_t)), lx_calloc(n, sizeof(int64_t)),
                        lx_calloc(n, sizeof(int64_t))};
  working_sets(ir, st, gid, g, &gm);
  int start = first_computing_op(g);
  for (int i = 0; i < g->n_ops; i++) {
    const lx_op *op = &g->ops[i];
    bool windowed = d && d[i].in_window;
    int64_t internals = lx_internal_bytes(op);
    if (d && d[i].offload) { /* in the window buffers on the device, and (its rows that are) in host memory */
      *window += lx_saved_bytes(g, i);
      *host += lx_host_copy_bytes(g, &d[i], i);
      continue;
    }
    if (windowed && d[i].drop_internals)
      *window += internals;
    else if (d && d[i].drop_internals)
      gm.alloc_recompute[i] += internals, gm.free_bwd[i] += internals;
    else
      gm.alloc_fwd[i] += internals, gm.free_bwd[i] += internals;
    int saver = lx_last_saver(g, i);
    if (saver < 0) continue;
    int64_t bytes = lx_saved_output_bytes(g, i);
    bool by_weight;
    int last = releaser(ir, st, gid, g, i, saver, &by_weight);
    int producer_instr = op->kind == LX_OP_INPUT ? start : i; /* inputs arrive as the graph starts */
    if (windowed && !d[i].drop_output && d[i].recompute) *window += op->out_bytes; /* the scratch copy */
    if (windowed && d[i].drop_output) {
      *window += op->out_bytes;
      continue;
    }
    if (d && d[i].drop_output)
      gm.alloc_recompute[i] += bytes;
    else
      gm.alloc_fwd[producer_instr] += bytes;
    *(by_weight ? &gm.free_weight[last] : &gm.free_bwd[last]) += bytes;
  }
  return gm;
}

static void free_graph_memory(lx_graph_memory *gm) {
  free(gm->alloc_fwd);
  free(gm->alloc_recompute);
  free(gm->alloc_bwd);
  free(gm->free_bwd);
  free(gm->free_weight);
  free(gm->transient_fwd);
  free(gm->transient_bwd);
}

int64_t lx_static_bytes(const lx_stage_memory *m) {
  return m->weights + m->grads + m->optimizer + m->window_buffers;
}

int64_t lx_static_bytes_floor(const lx_ir *ir, lx_schedule kind) {
  const lx_graph *graphs[] = {&ir->prologue, &ir->block, &ir->epilogue};
  const int64_t copies[] = {1, ir->model.layers, 1};
  int64_t params = 0, frozen = 0;
  for (int g = 0; g < 3; g++)
    params += copies[g] * graphs[g]->params_per_rank, frozen += copies[g] * graphs[g]->frozen_per_rank;
  lx_stage_memory whole = {0};
  static_bytes(ir, kind, params, frozen, &whole); /* a ZeRO share rounded up once, not per stage: less */
  return lx_static_bytes(&whole) / ir->plan.pp;
}

lx_memory_delta lx_instr_memory(const lx_ir *ir, const lx_stage_memory *m, const lx_instr *in) {
  const lx_graph_memory *gm = &m->graphs[in->graph];
  int op = in->op;
  switch (in->kind) {
  case LX_I_FWD: return (lx_memory_delta){.alloc = gm->alloc_fwd[op], .transient = gm->transient_fwd[op]};
  case LX_I_RECOMPUTE:
    return (lx_memory_delta){.alloc = gm->alloc_recompute[op], .transient = gm->transient_fwd[op]};
  case LX_I_BWD_WEIGHT: /* the output's gradient too, held since the backward */
    return (lx_memory_delta){.release = gm->free_weight[op] + lx_graph_of(ir, in->graph)->ops[op].out_bytes};
  case LX_I_BWD:
    return (lx_memory_delta){
        .alloc = gm->alloc_bwd[op], .transient = gm->transient_bwd[op], .release = gm->free_bwd[op]};
  default: return (lx_memory_delta){0, 0, 0};
  }
}

static bool is_backward(lx_instr_kind k) { return k == LX_I_BWD || k == LX_I_BWD_WEIGHT; }

/* Micro-batch mb is in flight from its first forward to its last backward (or W pass). */
static int *count_backwards(const lx_instr_list *list, int micro_batches) {
  int *n = lx_calloc((size_t)micro_batches, sizeof *n);
  for (int i = 0; i < list->count; i++)
    if (is_backward(list->items[i].kind)) n[list->items[i].mb]++;
  return n;
}

static void walk_program_order(const lx_pipeline *p, const lx_stage *st, lx_stage_memory *m) {
  const lx_instr_list *list = &st->streams[LX_STREAM_COMPUTE];
  int *backwards_left = count_backwards(list, lx_micro_batch_ids(p));
  bool *started = lx_calloc((size_t)lx_micro_batch_ids(p), sizeof *started);
  int64_t live = 0;
  int in_flight = 0;
  for (int i = 0; i < list->count; i++) {
    const lx_instr *in = &list->items[i];
    lx_memory_delta d = lx_instr_memory(p->ir, m, in);
    live += d.alloc;
    if (live + d.transient > m->activations_peak + m->transient_peak) {
      m->activations_peak = live;
      m->transient_peak = d.transient;
    }
    live -= d.release;
    if (in->kind == LX_I_FWD && !started[in->mb]) {
      started[in->mb] = true;
      if (++in_flight > m->stashed_micro_batches) m->stashed_micro_batches = in_flight;
    }
    if (is_backward(in->kind) && --backwards_left[in->mb] == 0) in_flight--;
  }
  m->peak = lx_static_bytes(m) + m->activations_peak + m->transient_peak;
  free(backwards_left);
  free(started);
}

static int64_t sum(const int64_t *v, int n) {
  int64_t s = 0;
  for (int i = 0; i < n; i++)
    s += v[i];
  return s;
}

void lx_plan_memory(const lx_pipeline *p, lx_stage_memory *out) {
  const lx_ir *ir = p->ir;
  for (int s = 0; s < p->pp; s++) {
    const lx_stage *st = &p->stages[s];
    lx_stage_memory *m = &out[s];
    *m = (lx_stage_memory){0};
    static_bytes(ir, p->kind, st->params_per_rank, st->frozen_per_rank, m);
    int64_t window = 0, host = 0;
    m->graphs[LX_GRAPH_PROLOGUE] = graph_memory(ir, st, LX_GRAPH_PROLOGUE, NULL, &window, &host);
    m->graphs[LX_GRAPH_BLOCK] = graph_memory(ir, st, LX_GRAPH_BLOCK, st->decisions, &window, &host);
    m->graphs[LX_GRAPH_EPILOGUE] = graph_memory(ir, st, LX_GRAPH_EPILOGUE, NULL, &window, &host);
    m->window_buffers = st->n_layers > 0 ? 2 * window : 0;
    m->kept_per_micro_batch = st->n_layers * sum(m->graphs[LX_GRAPH_BLOCK].alloc_fwd, ir->block.n_ops);
    if (st->has_prologue)
      m->kept_per_micro_batch += sum(m->graphs[LX_GRAPH_PROLOGUE].alloc_fwd, ir->prologue.n_ops);
    if (st->has_epilogue)
      m->kept_per_micro_batch += sum(m->graphs[LX_GRAPH_EPILOGUE].alloc_fwd, ir->epilogue.n_ops);
    walk_program_order(p, st, m);
    m->host_bytes = (int64_t)lx_host_slots(p, st, m->stashed_micro_batches) * st->n_layers * host;
  }
}

void lx_stage_memory_free(lx_stage_memory *m) {
  for (int g = 0; g < LX_GRAPH_COUNT; g++)
    free_graph_memory(&m->graphs[g]);
}
