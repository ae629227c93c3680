/* simulate.c — one training iteration, event by event.
 *
 * Streams advance in order. A stream's head runs as soon as it can: a WAIT
 * once its RECORD has happened, a SEND together with the matching RECV on the
 * peer stage (NCCL point-to-point is a rendezvous), anything else when the
 * stream is free. If no head can run before all streams are done, the
 * schedule deadlocks: a generator bug, reported with the stuck heads. */
#include "planning/simulate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "planning/passes.h"

typedef struct {
  const lx_pipeline *p;
  lx_timing_fn timing;
  void *timing_ctx;
  double interference;        /* recompute-stream slowdown while it shares the GPU with NCCL */
  int measured;               /* the step whose busy times count (an unrolled pipeline's), or -1: all */
  int *next[LX_STREAM_COUNT]; /* per stage: index of the head */
  double *free_at[LX_STREAM_COUNT];
  double **record_time; /* per stage, per event; < 0 until recorded */
  lx_simulation *out;
} sim_state;

static const lx_instr *head(const sim_state *s, int stage, lx_stream k) {
  const lx_instr_list *list = &s->p->stages[stage].streams[k];
  int i = s->next[k][stage];
  return i < list->count ? &list->items[i] : NULL;
}

/* Does `in` count in the step measured (-1: every step counts)? */
static bool in_step(const lx_instr *in, int measured) { return measured < 0 || in->step == measured; }

static void finish(sim_state *s, int stage, lx_stream k, double start, double end) {
  int i = s->next[k][stage]++;
  lx_instr_kind kind = s->p->stages[stage].streams[k].items[i].kind;
  s->out->stages[stage].times[k][i] = (lx_interval){start, end};
  bool counted = in_step(&s->p->stages[stage].streams[k].items[i], s->measured);
  if (kind != LX_I_WAIT && kind != LX_I_RECORD && counted) s->out->stages[stage].busy[k] += end - start;
  s->free_at[k][stage] = end;
}

static double duration(sim_state *s, int stage, lx_stream k, const lx_instr *in) {
  double t = s->timing(s->timing_ctx, s->p, stage, in);
  return k == LX_STREAM_RECOMPUTE ? t * s->interference : t;
}

static bool is_send(lx_instr_kind k) { return k == LX_I_SEND_ACT || k == LX_I_SEND_GRAD; }

/* A send runs with its receive: both streams busy for the transfer. */
static bool try_transfer(sim_state *s, int stage, const lx_instr *send) {
  const lx_instr *recv = head(s, send->peer, LX_STREAM_RECV);
  if (!recv || !lx_transfer_matches(s->p, stage, send, recv)) return false;
  double start = s->free_at[LX_STREAM_SEND][stage];
  if (s->free_at[LX_STREAM_RECV][send->peer] > start) start = s->free_at[LX_STREAM_RECV][send->peer];
  double end = start + duration(s, stage, LX_STREAM_SEND, send);
  finish(s, stage, LX_STREAM_SEND, start, end);
  finish(s, send->peer, LX_STREAM_RECV, start, end);
  return true;
}

static bool try_head(sim_state *s, int stage, lx_stream k) {
  const lx_instr *in = head(s, stage, k);
  if (!in) return false;
  double free = s->free_at[k][stage];
  switch (in->kind) {
  case LX_I_RECORD:
    s->record_time[stage][in->event] = free;
    finish(s, stage, k, free, free);
    return true;
  case LX_I_WAIT: {
    double t = s->record_time[stage][in->event];
    if (t < 0) return false;
    finish(s, stage, k, free, t > free ? t : free);
    return true;
  }
  case LX_I_RECV_ACT:
  case LX_I_RECV_GRAD: return false; /* runs with its send */
  default:
    if (is_send(in->kind)) return try_transfer(s, stage, in);
    finish(s, stage, k, free, free + duration(s, stage, k, in));
    return true;
  }
}

static bool all_done(const sim_state *s) {
  for (int st = 0; st < s->p->pp; st++)
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      if (head(s, st, k)) return false;
  return true;
}

static void report_deadlock(const sim_state *s) {
  fprintf(stderr, "lynxgen: internal error: the schedule deadlocks; stuck stream heads:\n");
  for (int st = 0; st < s->p->pp; st++)
    for (int k = 0; k < LX_STREAM_COUNT; k++) {
      const lx_instr *in = head(s, st, k);
      if (!in) continue;
      char text[160];
      lx_instr_describe(s->p->ir, in, text, sizeof text);
      fprintf(stderr, "  stage %d %s: %s\n", st, lx_stream_name((lx_stream)k), text);
    }
}

/* ---- memory over time ------------------------------------------------------ */

typedef struct {
  double time;
  int order; /* at equal times, releases (0) come before allocations (1) */
  int64_t bytes, transient;
  int mb_delta;
} memory_event;

static int by_time(const void *a, const void *b) {
  const memory_event *x = a, *y = b;
  if (x->time != y->time) return x->time < y->time ? -1 : 1;
  return x->order - y->order;
}

/* The end of the sorted run of events that starts at i. */
static int run_end(const memory_event *ev, int i, int n) {
  while (i + 1 < n && by_time(&ev[i], &ev[i + 1]) <= 0)
    i++;
  return i + 1;
}

/* Sorts the events by time, stably: a natural merge sort, which merges
 * neighbouring sorted runs until one is left. The events come in a few long
 * runs (track_memory), so this takes a few passes where a general sort of
 * millions of them takes twenty. */
static void sort_runs(memory_event *ev, int n) {
  memory_event *buf = lx_malloc(sizeof *buf * (size_t)(n ? n : 1)), *from = ev, *to = buf;
  for (int runs = 2; runs > 1;) {
    runs = 0;
    for (int i = 0; i < n; runs++) {
      int mid = run_end(from, i, n), end = mid < n ? run_end(from, mid, n) : n;
      for (int a = i, b = mid, o = i; o < end; o++)
        to[o] = b == end || (a < mid && by_time(&from[a], &from[b]) <= 0) ? from[a++] : from[b++];
      i = end;
    }
    memory_event *t = from;
    from = to, to = t;
  }
  if (from != ev) memcpy(ev, from, sizeof *ev * (size_t)n);
  free(buf);
}

/* Index, per micro-batch, of its last backward or W pass on a stream (-1 if none): one pass. */
static int *last_backwards(const lx_instr_list *list, int micro_batches) {
  int *last = lx_malloc(sizeof(int) * (size_t)(micro_batches ? micro_batches : 1));
  for (int mb = 0; mb < micro_batches; mb++)
    last[mb] = -1;
  for (int i = 0; i < list->count; i++)
    if (list->items[i].kind == LX_I_BWD || list->items[i].kind == LX_I_BWD_WEIGHT)
      last[list->items[i].mb] = i;
  return last;
}

/* Replays the stage's allocations in simulated time. A stream runs its
 * instructions in order, so along it the times they start (allocations)
 * never decrease, nor those they end (releases): laid out per stream, its
 * allocations and then its releases, the events are a few sorted runs. At
 * equal times the sort keeps that order, stream by stream, instruction by
 * instruction. */
static void track_memory(const lx_pipeline *p, int stage, const lx_stage_memory *m, lx_stage_timeline *tl) {
  const lx_stage *st = &p->stages[stage];
  int n = 0;
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    n += 2 * st->streams[k].count;
  memory_event *ev = lx_malloc(sizeof *ev * (size_t)(n ? n : 1));
  bool *started = lx_calloc((size_t)lx_micro_batch_ids(p), sizeof *started);
  n = 0;
  for (int k = 0; k < LX_STREAM_COUNT; k++) {
    int *last = last_backwards(&st->streams[k], lx_micro_batch_ids(p));
    int count = st->streams[k].count;
    for (int i = 0; i < count; i++) {
      const lx_instr *in = &st->streams[k].items[i];
      lx_memory_delta d = lx_instr_memory(p->ir, m, in);
      int starts_mb = in->kind == LX_I_FWD && !started[in->mb];
      if (starts_mb) started[in->mb] = true;
      int ends_mb = (in->kind == LX_I_BWD || in->kind == LX_I_BWD_WEIGHT) && last[in->mb] == i;
      ev[n + i] = (memory_event){tl->times[k][i].start, 1, d.alloc, d.transient, starts_mb};
      ev[n + count + i] = (memory_event){tl->times[k][i].end, 0, -d.release, 0, -ends_mb};
    }
    n += 2 * count;
    free(last);
  }
  sort_runs(ev, n);
  int64_t live = 0, peak = 0;
  int in_flight = 0;
  for (int i = 0; i < n; i++) {
    live += ev[i].bytes;
    if (live + ev[i].transient > peak) peak = live + ev[i].transient;
    in_flight += ev[i].mb_delta;
    if (in_flight > tl->max_in_flight) tl->max_in_flight = in_flight;
  }
  tl->peak_bytes = lx_static_bytes(m) + peak;
  free(ev);
  free(started);
}

/* ---- summary ------------------------------------------------------------- */

static void summarize_stage(const lx_pipeline *p, int stage, int measured, lx_stage_timeline *tl) {
  const lx_instr_list *compute = &p->stages[stage].streams[LX_STREAM_COMPUTE];
  for (int i = 0; i < compute->count; i++) {
    if (!in_step(&compute->items[i], measured)) continue;
    lx_instr_kind kind = compute->items[i].kind;
    lx_interval t = tl->times[LX_STREAM_COMPUTE][i];
    if (kind == LX_I_FWD || kind == LX_I_BWD || kind == LX_I_BWD_WEIGHT) tl->compute_time += t.end - t.start;
    if (kind == LX_I_RECOMPUTE) tl->recompute_time += t.end - t.start;
    if (kind == LX_I_WAIT) tl->exposed_comm_time += t.end - t.start;
  }
  tl->recompute_time += tl->busy[LX_STREAM_RECOMPUTE];
}

/* FLOPs of a compute instruction: a W pass has the forward's (lx_cost_op_weight_grad). */
static double instr_flops(const lx_pipeline *p, const lx_stage *st, const lx_instr *in) {
  const lx_op *op = &lx_graph_of(p->ir, in->graph)->ops[in->op];
  switch (in->kind) {
  case LX_I_FWD:
  case LX_I_RECOMPUTE:
  case LX_I_BWD_WEIGHT: return op->flops_fwd * lx_instr_fraction(st, in);
  case LX_I_BWD:
    return op->flops_bwd - (lx_defers_weight_grad(p->ir, st, in->graph, in->op) ? op->flops_fwd : 0);
  default: return 0;
  }
}

static double executed_flops(const lx_pipeline *p, int measured) {
  double flops = 0;
  for (int s = 0; s < p->pp; s++)
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      for (int i = 0; i < p->stages[s].streams[k].count; i++)
        if (in_step(&p->stages[s].streams[k].items[i], measured))
          flops += instr_flops(p, &p->stages[s], &p->stages[s].streams[k].items[i]);
  return flops; /* per tp rank and replica */
}

static void summarize(const lx_pipeline *p, const lx_cost_model *cm, int measured, lx_simulation *out) {
  double idle = 0;
  for (int s = 0; s < p->pp; s++) {
    summarize_stage(p, s, measured, &out->stages[s]);
    if (out->iteration_time > 0) idle += 1 - out->stages[s].busy[LX_STREAM_COMPUTE] / out->iteration_time;
  }
  out->bubble_fraction = idle / p->pp;
  const lx_ir *ir = p->ir;
  int b = ir->plan.micro_batch, dp = ir->plan.dp;
  int tp = ir->plan.tp;
  double sequences = (double)p->micro_batches * b * dp;
  if (out->iteration_time <= 0) return;
  out->tokens_per_s = sequences * ir->model.seq_len / out->iteration_time;
  if (!cm) return;
  double peak = ir->training.dtype == LX_DTYPE_FP32 ? cm->gpu.fp32_flops : cm->gpu.tensor_flops;
  double gpus = (double)tp * p->pp * dp;
  out->mfu = ir->model_flops_per_sequence * sequences / (out->iteration_time * gpus * peak);
  out->hfu = executed_flops(p, measured) / (out->iteration_time * p->pp * peak);
}

/* ---- entry points -------------------------------------------------------- */

static void rank_layout(const lx_pipeline *p, int stage, int *node) {
  const lx_ir *ir = p->ir;
  int tp = ir->plan.tp, dp = ir->plan.dp;
  *node = stage * tp * dp / ir->cluster.gpus_per_node; /* ranks: tp fastest, then dp, then pp */
}

/* What the cost model charges each op of the three graphs' forward,
 * backward and weight gradient: asked once per simulation, since every
 * micro-batch's instructions repeat the same ops. */
typedef struct {
  const lx_cost_model *cm;
  double *fwd[LX_GRAPH_COUNT], *bwd[LX_GRAPH_COUNT], *weight_grad[LX_GRAPH_COUNT];
} op_costs;

static op_costs tabulate_op_costs(const lx_cost_model *cm, const lx_ir *ir) {
  op_costs t = {.cm = cm};
  for (int gid = 0; gid < LX_GRAPH_COUNT; gid++) {
    const lx_graph *g = lx_graph_of(ir, (lx_graph_id)gid);
    size_t n = (size_t)g->n_ops + 1;
    t.fwd[gid] = lx_malloc(n * sizeof(double));
    t.bwd[gid] = lx_malloc(n * sizeof(double));
    t.weight_grad[gid] = lx_malloc(n * sizeof(double));
    for (int i = 0; i < g->n_ops; i++) {
      t.fwd[gid][i] = lx_cost_op_fwd(cm, ir, g, &g->ops[i]);
      t.bwd[gid][i] = lx_cost_op_bwd(cm, ir, g, &g->ops[i]);
      t.weight_grad[gid][i] = lx_cost_op_weight_grad(cm, ir, g, &g->ops[i]);
    }
  }
  return t;
}

static void free_op_costs(op_costs *t) {
  for (int gid = 0; gid < LX_GRAPH_COUNT; gid++)
    free(t->fwd[gid]), free(t->bwd[gid]), free(t->weight_grad[gid]);
}

static double instr_cost(const op_costs *costs, const lx_pipeline *p, int stage, const lx_instr *in) {
  const lx_cost_model *cm = costs->cm;
  const lx_ir *ir = p->ir;
  int tp = ir->plan.tp, dp = ir->plan.dp;
  switch (in->kind) {
  case LX_I_FWD:
  case LX_I_RECOMPUTE: {
    const lx_graph *g = lx_graph_of(ir, in->graph);
    const lx_op *op = &g->ops[in->op];
    bool internals = in->kind == LX_I_RECOMPUTE && in->graph == LX_GRAPH_BLOCK &&
                     lx_recomputes_internals_only(g, p->stages[stage].decisions, in->op);
    double share = internals ? lx_cost_internals_share(cm, ir, g, op) : 1;
    if (in->pieces > 0) { /* a head-split op's pieces: their own kernels' blocks */
      int first, end;
      lx_instr_kv_heads(in, lx_head_pieces_max(ir, in->op), &first, &end);
      return share * lx_cost_op_fwd_heads(cm, ir, g, op, end - first);
    }
    return share * costs->fwd[in->graph][in->op] * lx_instr_fraction(&p->stages[stage], in);
  }
  case LX_I_BWD: {
    bool deferred = lx_defers_weight_grad(ir, &p->stages[stage], in->graph, in->op);
    return costs->bwd[in->graph][in->op] - (deferred ? costs->weight_grad[in->graph][in->op] : 0);
  }
  case LX_I_BWD_WEIGHT: return costs->weight_grad[in->graph][in->op];
  case LX_I_SEND_ACT:
  case LX_I_SEND_GRAD:
  case LX_I_RECV_ACT:
  case LX_I_RECV_GRAD: {
    int a, b;
    rank_layout(p, stage, &a);
    rank_layout(p, in->peer, &b);
    return lx_cost_p2p(cm, in->bytes, a != b);
  }
  case LX_I_ALLREDUCE_TP:
    if (in->coll == LX_COLL_REDUCE_SCATTER) return lx_cost_reduce_scatter(cm, in->bytes, tp, false);
    if (in->coll == LX_COLL_ALLGATHER) return lx_cost_all_gather(cm, in->bytes, tp, false);
    return lx_cost_allreduce(cm, in->bytes, tp, false);
  case LX_I_ALLREDUCE_DP: return lx_cost_allreduce(cm, in->bytes, dp, tp * dp > ir->cluster.gpus_per_node);
  case LX_I_OFFLOAD:
  case LX_I_PREFETCH: return lx_cost_host_copy(cm, in->bytes);
  case LX_I_OPTIMIZER_STEP: {
    /* AdamW streams weights, master weights, gradients and both moments */
    double bytes = (double)p->stages[stage].params_per_rank * 36;
    return bytes / (cm->gpu.hbm_bytes_per_s * cm->memory_efficiency) + cm->launch_s;
  }
  default: return 0;
  }
}

static double cost_model_timing(void *ctx, const lx_pipeline *p, int stage, const lx_instr *in) {
  return instr_cost(ctx, p, stage, in);
}

/* The time from the end of the step before `measured` to the end of it:
 * where a stage's optimizer steps end (the last instruction of each of its
 * steps), the longest such gap over the stages. */
static double step_time(const lx_pipeline *p, const lx_simulation *sim, int measured) {
  double longest = 0;
  for (int s = 0; s < p->pp; s++) {
    const lx_instr_list *compute = &p->stages[s].streams[LX_STREAM_COMPUTE];
    double before = 0, end = 0;
    for (int i = 0; i < compute->count; i++) {
      if (compute->items[i].kind != LX_I_OPTIMIZER_STEP) continue;
      if (compute->items[i].step == measured - 1) before = sim->stages[s].times[LX_STREAM_COMPUTE][i].end;
      if (compute->items[i].step == measured) end = sim->stages[s].times[LX_STREAM_COMPUTE][i].end;
    }
    if (end - before > longest) longest = end - before;
  }
  return longest;
}

static bool simulate(const lx_pipeline *p, const lx_cost_model *cm, lx_timing_fn timing, void *timing_ctx,
                     const lx_stage_memory *memory, int measured, lx_simulation *out) {
  *out = (lx_simulation){.pipe = p, .stages = lx_calloc((size_t)p->pp, sizeof *out->stages)};
  op_costs costs = {0};
  if (!timing) costs = tabulate_op_costs(cm, p->ir);
  sim_state s = {.p = p,
                 .timing = timing ? timing : cost_model_timing,
                 .timing_ctx = timing ? timing_ctx : (void *)&costs,
                 .interference = cm && !timing ? cm->interference : 1,
                 .measured = measured,
                 .out = out};
  s.record_time = lx_calloc((size_t)p->pp, sizeof *s.record_time);
  for (int k = 0; k < LX_STREAM_COUNT; k++) {
    s.next[k] = lx_calloc((size_t)p->pp, sizeof(int));
    s.free_at[k] = lx_calloc((size_t)p->pp, sizeof(double));
  }
  for (int st = 0; st < p->pp; st++) {
    s.record_time[st] = lx_malloc(sizeof(double) * (size_t)(p->stages[st].n_events + 1));
    for (int e = 0; e <= p->stages[st].n_events; e++)
      s.record_time[st][e] = -1;
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      out->stages[st].times[k] = lx_calloc((size_t)p->stages[st].streams[k].count + 1, sizeof(lx_interval));
  }
  bool progress = true;
  while (progress) {
    progress = false;
    for (int st = 0; st < p->pp; st++)
      for (int k = 0; k < LX_STREAM_COUNT; k++)
        while (try_head(&s, st, (lx_stream)k))
          progress = true;
  }
  out->deadlocked = !all_done(&s);
  if (out->deadlocked) report_deadlock(&s);
  for (int st = 0; st < p->pp; st++)
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      if (s.free_at[k][st] > out->iteration_time) out->iteration_time = s.free_at[k][st];
  if (measured >= 0) out->iteration_time = step_time(p, out, measured);
  for (int st = 0; memory && st < p->pp; st++)
    track_memory(p, st, &memory[st], &out->stages[st]);
  summarize(p, timing ? NULL : cm, measured, out);
  for (int k = 0; k < LX_STREAM_COUNT; k++) {
    free(s.next[k]);
    free(s.free_at[k]);
  }
  for (int st = 0; st < p->pp; st++)
    free(s.record_time[st]);
  free(s.record_time);
  free_op_costs(&costs);
  return !out->deadlocked;
}

bool lx_simulate(const lx_pipeline *p, const lx_cost_model *cm, lx_timing_fn timing, void *timing_ctx,
                 const lx_stage_memory *memory, lx_simulation *out) {
  return simulate(p, cm, timing, timing_ctx, memory, -1, out);
}

/* 2BW's steps overlap: four of them, the pipeline filling in the first and
 * draining in the last, and the third measured, in the steady state. */
enum { STEPS_2BW = 4, MEASURED_2BW = 2 };

bool lx_simulate_training(const lx_pipeline *p, const lx_cost_model *cm, lx_timing_fn timing,
                          void *timing_ctx, const lx_stage_memory *memory, lx_simulation *out) {
  if (p->kind != LX_SCHEDULE_2BW) return lx_simulate(p, cm, timing, timing_ctx, memory, out);
  static const bool fill[STEPS_2BW] = {true, false, false, false},
                    ahead[STEPS_2BW] = {true, true, true, false};
  lx_pipeline *steps = lx_malloc(sizeof *steps);
  lx_unroll_steps(p, STEPS_2BW, fill, ahead, steps);
  bool ok = simulate(steps, cm, timing, timing_ctx, memory, MEASURED_2BW, out);
  out->unrolled = true;
  out->measured = MEASURED_2BW;
  return ok;
}

/* Is u, of step k of p's unrolled lists (lx_unroll_steps), instruction `in` of p? */
static bool same_instr(const lx_pipeline *p, int s, int k, const lx_instr *in, const lx_instr *u) {
  int events = p->stages[s].n_events;
  bool event = in->kind == LX_I_RECORD || in->kind == LX_I_WAIT;
  return u->step == k && u->kind == in->kind && u->graph == in->graph && u->layer == in->layer &&
         u->op == in->op && u->mb == (in->mb >= 0 ? in->mb + k * p->micro_batches : in->mb) &&
         (!event || u->event == in->event + k * events);
}

lx_interval *lx_compute_times(const lx_simulation *sim, const lx_pipeline *p, int s) {
  const lx_instr_list *mine = &p->stages[s].streams[LX_STREAM_COMPUTE];
  const lx_instr_list *theirs = &sim->pipe->stages[s].streams[LX_STREAM_COMPUTE];
  const lx_interval *times = sim->stages[s].times[LX_STREAM_COMPUTE];
  lx_interval *out = lx_calloc((size_t)mine->count + 1, sizeof *out);
  for (int i = 0, j = 0; i < mine->count; i++) {
    if (!sim->unrolled) {
      out[i] = times[i];
      continue;
    }
    while (j < theirs->count && theirs->items[j].step < sim->measured)
      j++;
    if (j < theirs->count && same_instr(p, s, sim->measured, &mine->items[i], &theirs->items[j]))
      out[i] = times[j++];
  }
  return out;
}

void lx_simulation_free(lx_simulation *sim) {
  for (int st = 0; sim->stages && st < sim->pipe->pp; st++)
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      free(sim->stages[st].times[k]);
  free(sim->stages);
  sim->stages = NULL;
  if (sim->unrolled) {
    lx_pipeline *steps = (lx_pipeline *)sim->pipe;
    lx_unrolled_free(steps);
    free(steps);
    sim->unrolled = false;
  }
}
