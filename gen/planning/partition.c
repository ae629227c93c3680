/* partition.c — which layers each pipeline stage holds: Megatron's even
 * split, or a DP over layer boundaries that balances the stages' time
 * including the recompute each needs under its own memory budget (stage i
 * of 1F1B stashes min(p - i, m) micro-batches, so early stages have less
 * room per layer and recompute more: they should hold fewer layers). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "planning/overlap.h"
#include "planning/passes.h"

void lx_partition_uniform(int layers, int pp, int *first_layer) {
  int base = layers / pp, extra = layers % pp;
  first_layer[0] = 0;
  for (int s = 0; s < pp; s++)
    first_layer[s + 1] = first_layer[s] + base + (s < extra ? 1 : 0);
}

/* ---- the DP ------------------------------------------------------------------ */

/* Layers are alike, so a stage's cost depends on how many it holds, not
 * which: each (stage, count) is evaluated once, when the DP first asks
 * (stage_cost_memo), not once per split point. */
typedef struct {
  lx_stage_cost_fn cost;
  void *ctx;
  int counts;   /* counts 1 .. counts - 1 are tabulated */
  double *memo; /* [stage][count]; NAN: not yet asked */
} stage_costs;

static double stage_cost_memo(stage_costs *t, int stage, int count) {
  double *c = &t->memo[(size_t)stage * (size_t)t->counts + (size_t)count];
  if (isnan(*c)) *c = t->cost(t->ctx, stage, count);
  return *c;
}

/* best[s][l]: the least bottleneck of layers [0, l) on stages [0, s). */
double lx_partition_dp(int layers, int pp, lx_stage_cost_fn cost, void *ctx, int *first_layer) {
  if (pp < 1 || layers < pp) return -1;
  int width = layers + 1;
  stage_costs t = {cost, ctx, layers - pp + 2, NULL};
  t.memo = lx_malloc(sizeof(double) * (size_t)pp * (size_t)t.counts);
  for (size_t i = 0; i < (size_t)pp * (size_t)t.counts; i++)
    t.memo[i] = NAN;
  double *best = lx_malloc(sizeof(double) * (size_t)(pp + 1) * (size_t)width);
  int *from = lx_malloc(sizeof(int) * (size_t)(pp + 1) * (size_t)width);
  for (int i = 0; i < (pp + 1) * width; i++)
    best[i] = -1, from[i] = -1;
  best[0] = 0; /* no layers on no stages */
  for (int s = 1; s <= pp; s++)
    for (int l = s; l <= layers - (pp - s); l++)
      for (int k = s - 1; k < l; k++) {
        double before = best[(s - 1) * width + k];
        if (before < 0) continue;
        double c = stage_cost_memo(&t, s - 1, l - k);
        if (c < 0) continue;
        double b = before > c ? before : c;
        if (best[s * width + l] < 0 || b < best[s * width + l])
          best[s * width + l] = b, from[s * width + l] = k;
      }
  double result = best[pp * width + layers];
  if (result >= 0) {
    first_layer[pp] = layers;
    for (int s = pp; s > 0; s--)
      first_layer[s - 1] = from[s * width + first_layer[s]];
  }
  free(t.memo);
  free(best);
  free(from);
  return result;
}

/* ---- the recompute-aware stage cost ---------------------------------------------- */

static double graph_time(const lx_ir *ir, const lx_cost_model *cm, const lx_graph *g, double *window_s) {
  int tp = ir->plan.tp;
  double t = 0;
  for (int i = 0; i < g->n_ops; i++) {
    const lx_op *op = &g->ops[i];
    if (op->kind == LX_OP_INPUT) continue;
    t += lx_cost_op_fwd(cm, ir, g, op) + lx_cost_op_bwd(cm, ir, g, op);
    if (tp > 1 && (op->needs_tp_allreduce || op->kind == LX_OP_EMBEDDING))
      t += lx_cost_allreduce(cm, op->out_bytes, tp, false);
    if (tp > 1 && op->tp_role == LX_TP_COLUMN) {
      double ar = lx_cost_allreduce(cm, g->ops[op->inputs[0]].out_bytes, tp, false);
      t += ar;
      if (window_s) *window_s += ar / cm->interference; /* the backward all-reduces of the layer above */
    }
  }
  return t;
}

/* The biggest working set one instruction holds: an output and its inputs. */
static int64_t transient_bytes(const lx_graph *g) {
  int64_t most = 0;
  for (int i = 0; i < g->n_ops; i++) {
    int64_t b = 2 * g->ops[i].out_bytes;
    for (int k = 0; k < g->ops[i].n_inputs; k++)
      b += g->ops[g->ops[i].inputs[k]].out_bytes;
    if (b > most) most = b;
  }
  return most;
}

static int64_t static_per_param(const lx_ir *ir) {
  int elt = lx_dtype_bytes(ir->training.dtype);
  return elt + (elt < 4 ? 4 : 0) + 4 + 8; /* weights (+ master), grads, AdamW moments: as memplan.c */
}

void lx_partition_model_init(lx_partition_model *m, const lx_ir *ir, const lx_cost_model *cm,
                             lx_recompute_policy policy) {
  memset(m, 0, sizeof *m);
  m->ir = ir, m->cm = cm, m->policy = policy;
  m->pp = ir->plan.pp;
  m->micro_batches = lx_micro_batches(ir);
  m->layer_s = graph_time(ir, cm, &ir->block, &m->layer_window_s);
  m->prologue_s = graph_time(ir, cm, &ir->prologue, NULL);
  m->epilogue_s = graph_time(ir, cm, &ir->epilogue, NULL);
  int64_t per = static_per_param(ir);
  int64_t frozen = lx_dtype_bytes(ir->training.dtype); /* fine-tuning's frozen weights: no more */
  m->static_per_layer = ir->block.params_per_rank * per + ir->block.frozen_per_rank * frozen;
  m->static_prologue = ir->prologue.params_per_rank * per + ir->prologue.frozen_per_rank * frozen;
  m->static_epilogue = ir->epilogue.params_per_rank * per + ir->epilogue.frozen_per_rank * frozen;
  m->capacity = (int64_t)cm->gpu.memory_bytes;
  int64_t transient = transient_bytes(&ir->block);
  if (transient_bytes(&ir->epilogue) > transient) transient = transient_bytes(&ir->epilogue);
  if (transient_bytes(&ir->prologue) > transient) transient = transient_bytes(&ir->prologue);
  m->reserve_middle = transient + ir->block.activation_bytes;
  m->reserve_first = m->reserve_middle;
  m->reserve_last = m->reserve_middle;
  for (int k = 0; k < 2; k++)
    lx_stage_problem_init(&m->layers[k], ir, cm, 1, 1, 1, INT64_MAX);
  m->outputs_may_stay = lx_stage_problem_keep_outputs(&m->layers[1], ir, cm);
  if (policy == LX_RECOMPUTE_CHECKMATE) m->layer_window_s = 0; /* on demand only */
}

void lx_partition_model_free(lx_partition_model *m) {
  for (int k = 0; k < 2; k++)
    lx_stage_problem_free(&m->layers[k]);
}

/* The stage's exposed recompute per micro-batch under its budget: the
 * policy on a one-micro-batch problem `pr` of `count` layer instances, each
 * able to use the layer's own backward all-reduces (what the layer below
 * uses under the schedule's parity rule), pooled into one window. */
static double problem_exposed(lx_partition_model *m, lx_stage_problem *pr, int stashed, int count,
                              int64_t avail, bool *fits) {
  pr->n_layers = count, pr->stashed_layers = (int64_t)stashed * count, pr->micro_batches = 1,
  pr->avail_bytes = avail;
  lx_window w = {.kind = LX_WINDOW_TP_BACKWARD, .after = 0, .capacity = count * m->layer_window_s};
  int *lo = lx_calloc((size_t)count, sizeof(int)), *due = lx_malloc(sizeof(int) * (size_t)count);
  for (int i = 0; i < count; i++)
    due[i] = 1;
  int *saved_lo = pr->lo, *saved_due = pr->due;
  pr->lo = lo, pr->due = due, pr->n_instances = count;
  pr->windows = m->layer_window_s > 0 ? &w : NULL;
  pr->n_windows = m->layer_window_s > 0 ? 1 : 0;
  int *window_of = lx_malloc(sizeof(int) * lx_placement_entries(pr));
  lx_op_decision *d = lx_calloc((size_t)pr->n_ops, sizeof *d);
  lx_policy_stats stats;
  /* lynx-opt's partition uses heu's answer: the DP needs thousands of these */
  lx_recompute_policy p = m->policy == LX_RECOMPUTE_LYNX_OPT ? LX_RECOMPUTE_LYNX_HEU : m->policy;
  *fits = lx_policy_solve(m->ir, p, pr, d, window_of, &stats);
  pr->lo = saved_lo, pr->due = saved_due, pr->windows = NULL, pr->n_windows = 0, pr->n_instances = 0;
  free(lo);
  free(due);
  free(window_of);
  free(d);
  return stats.exposed_s;
}

/* ... the less of the two ways to recompute an attention (plan.c's
 * solve_stage tries both too). */
static double stage_exposed(lx_partition_model *m, int stashed, int count, int64_t avail, bool *fits) {
  double exposed = problem_exposed(m, &m->layers[0], stashed, count, avail, fits);
  bool kept_fits = false;
  double kept =
      m->outputs_may_stay ? problem_exposed(m, &m->layers[1], stashed, count, avail, &kept_fits) : 0;
  if (kept_fits && (!*fits || kept < exposed)) exposed = kept, *fits = true;
  return exposed;
}

double lx_partition_stage_cost(void *model, int stage, int count) {
  lx_partition_model *m = model;
  bool is_first = stage == 0, is_last = stage == m->pp - 1;
  lx_schedule kind = m->ir->plan.schedule ? m->ir->plan.schedule : LX_SCHEDULE_1F1B;
  int stashed = lx_stashed_micro_batches(
      kind, m->pp, m->ir->plan.virtual_stages > 1 ? m->ir->plan.virtual_stages : 1, stage, m->micro_batches);
  int64_t static_bytes =
      count * m->static_per_layer + (is_first ? m->static_prologue : 0) + (is_last ? m->static_epilogue : 0);
  int64_t other = (is_first ? (int64_t)stashed * m->ir->prologue.activation_bytes : 0) +
                  (is_last ? (int64_t)stashed * m->ir->epilogue.activation_bytes : 0) + m->reserve_middle;
  int64_t avail = m->capacity - static_bytes - other;
  if (avail <= 0) return -1;
  bool fits;
  double exposed = stage_exposed(m, stashed, count, avail, &fits);
  if (!fits) return -1;
  return count * m->layer_s + exposed + (is_first ? m->prologue_s : 0) + (is_last ? m->epilogue_s : 0);
}
