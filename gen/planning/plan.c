/* plan.c — the planning loop: the layers of each stage (partition.c), the
 * recompute policy of each (recompute.c for the fixed ones, policy.c for
 * checkmate and Lynx, with budgets from the memory model and windows from a
 * simulation), the instruction lists (schedule.c), and the repair rounds
 * where the plan still overflows. The modules it calls do not call it back. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "planning/plan.h"

#include "alloc.h"
#include "diag.h"
#include "planning/memplan.h"
#include "planning/passes.h"
#include "planning/simulate.h"

static int64_t graph_params(const lx_graph *g, bool frozen) {
  return frozen ? g->frozen_per_rank : g->params_per_rank;
}

/* The trained (or, `frozen`, the frozen) parameters per rank of a stage's graphs. */
static int64_t stage_params(const lx_ir *ir, const lx_stage *st, bool frozen) {
  return (st->has_prologue ? graph_params(&ir->prologue, frozen) : 0) +
         st->n_layers * graph_params(&ir->block, frozen) +
         (st->has_epilogue ? graph_params(&ir->epilogue, frozen) : 0);
}

static bool check_plan(const lx_ir *ir, lx_schedule kind, int pp, int micro_batches) {
  lx_srcloc at = lx_relation_loc(
      ir, ir->locs.plan,
      (const lx_field[]){LX_F_SCHEDULE, LX_F_PP, LX_F_GLOBAL_BATCH, LX_F_MICRO_BATCH, LX_F_DP, LX_F_COUNT});
  if (kind == LX_SCHEDULE_INTERLEAVED && micro_batches % pp) {
    lx_error(
        at,
        "schedule interleaved runs micro-batches in groups of pp: %d micro-batches per iteration are not a "
        "multiple of the %d pipeline stages",
        micro_batches, pp);
    return false;
  }
  if (micro_batches < pp) {
    lx_error(at, "%d micro-batches per iteration are fewer than the %d pipeline stages", micro_batches, pp);
    return false;
  }
  return true;
}

/* Stages over the layer split `first` (model chunk c holds layers
 * [first[c], first[c + 1]); stage s chunks s, s + pp, ...), each with the
 * decisions of a fixed policy. */
static void init_stages(const lx_ir *ir, lx_recompute_policy fixed, const int *first, lx_pipeline *out) {
  int pp = out->pp;
  out->stages = lx_calloc((size_t)pp, sizeof *out->stages);
  for (int s = 0; s < pp; s++) {
    lx_stage *st = &out->stages[s];
    *st = (lx_stage){
        .index = s, .n_chunks = out->virtual_stages, .has_prologue = s == 0, .has_epilogue = s == pp - 1};
    for (int v = 0; v < st->n_chunks; v++) {
      int c = v * pp + s;
      st->chunks[v] = (lx_chunk){first[c], first[c + 1] - first[c]};
      st->n_layers += st->chunks[v].n_layers;
    }
    st->params_per_rank = stage_params(ir, st, false);
    st->frozen_per_rank = stage_params(ir, st, true);
    lx_chunk_stashes(out->kind, pp, out->virtual_stages, s, out->micro_batches, st->chunk_slots);
    for (int v = 0; v < st->n_chunks; v++) /* the pipeline buffers' slots: the busiest chunk's */
      if (st->chunk_slots[v] > st->stashed_micro_batches) st->stashed_micro_batches = st->chunk_slots[v];
    st->decisions = lx_calloc((size_t)ir->block.n_ops, sizeof *st->decisions);
    lx_recompute_fixed(ir, fixed, st->decisions);
    st->stats.status = "fixed";
  }
}

static bool fixed_policy(lx_recompute_policy p) { return p <= LX_RECOMPUTE_SELECTIVE; }

/* ---- planned policies ------------------------------------------------------- */

/* Bytes a stage's block activations may take: capacity minus the static
 * bytes and what the stage needs besides (prologue / epilogue stash,
 * transient working set, one layer of on-demand regenerated tensors). */
static int64_t activation_budget(const lx_ir *ir, const lx_cost_model *cm, const lx_pipeline *keep_all,
                                 const lx_stage_memory *m, int s) {
  const lx_stage *st = &keep_all->stages[s];
  lx_op_decision *none = lx_calloc((size_t)ir->block.n_ops, sizeof *none);
  int64_t block = lx_stashed_layers(st) * lx_kept_bytes(&ir->block, none);
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
  int mip_work_limit;
  bool no_offload;
  int64_t *budget;
} planner;

/* Offload copies a layer instance's tensors back before its backward in the
 * same step: not under 2BW, whose next step's first forwards run in this
 * step, nor where W passes read what the backward leaves (zero bubble). */
static bool may_offload(const planner *pl) {
  lx_schedule k = pl->pipe->kind;
  return !pl->no_offload && (k == LX_SCHEDULE_GPIPE || k == LX_SCHEDULE_1F1B || k == LX_SCHEDULE_INTERLEAVED);
}

/* One policy's answer for a stage. */
typedef struct {
  lx_op_decision *decisions;
  int *window_of;
  lx_policy_stats stats;
  bool fits, keeps_outputs;
} stage_solution;

/* `policy` on stage s, where recomputing an attention drops its output too
 * or (keep_outputs) keeps it and makes the probabilities alone. NULL
 * decisions where no op can keep its output (the variant is the other). */
static stage_solution solve_variant(const planner *pl, int s, lx_recompute_policy policy, bool with_windows,
                                    bool keep_outputs) {
  const lx_stage *st = &pl->pipe->stages[s];
  stage_solution x = {.keeps_outputs = keep_outputs};
  lx_stage_problem pr;
  lx_stage_problem_init(&pr, pl->ir, pl->cm, st->n_layers, lx_stashed_layers(st), pl->pipe->micro_batches,
                        pl->budget[s]);
  pr.work_limit = pl->mip_work_limit;
  if (!may_offload(pl)) pr.host_bytes_per_s = 0;
  if (!keep_outputs || lx_stage_problem_keep_outputs(&pr, pl->ir, pl->cm)) {
    if (with_windows) lx_stage_problem_set_windows(&pr, pl->pipe, s);
    x.decisions = lx_calloc((size_t)pl->ir->block.n_ops, sizeof *x.decisions);
    x.window_of = with_windows ? lx_calloc(lx_placement_entries(&pr), sizeof(int)) : NULL;
    x.fits = lx_policy_solve(pl->ir, policy, &pr, x.decisions, x.window_of, &x.stats);
  }
  lx_stage_problem_free(&pr);
  return x;
}

static void free_solution(stage_solution *x) {
  free(x->decisions);
  free(x->window_of);
}

/* Whether a beats b: it fits where b does not, or both fit and a exposes
 * less recompute. */
static bool solution_beats(const stage_solution *a, const stage_solution *b) {
  if (!a->decisions) return false;
  if (a->fits != b->fits) return a->fits;
  return a->fits && a->stats.exposed_s < b->stats.exposed_s * (1 - 1e-9);
}

/* Whether stage s's decisions keep an attention's output where they recompute it. */
static bool keeps_outputs(const planner *pl, int s) {
  for (int i = 0; i < pl->ir->block.n_ops; i++)
    if (lx_recomputes_internals_only(&pl->ir->block, pl->pipe->stages[s].decisions, i)) return true;
  return false;
}

/* The policy on stage s in both variants of a materialised attention's
 * recompute (drop its output too, or keep it), the one that exposes less
 * standing; lynx-opt's MILP runs once, on the variant lynx-heu prefers.
 * Without `both` (a solve again under the same budget) the variant of the
 * stage's decisions alone. The plan's search time is every solve's, repairs
 * included. */
static void solve_stage(planner *pl, int s, lx_recompute_policy policy, bool with_windows, bool both) {
  lx_stage *st = &pl->pipe->stages[s];
  lx_recompute_policy judge = policy == LX_RECOMPUTE_LYNX_OPT && both ? LX_RECOMPUTE_LYNX_HEU : policy;
  stage_solution best = solve_variant(pl, s, judge, with_windows, !both && keeps_outputs(pl, s));
  double searched = st->stats.search_s + best.stats.search_s;
  if (both) {
    stage_solution kept = solve_variant(pl, s, judge, with_windows, true);
    searched += kept.stats.search_s;
    if (solution_beats(&kept, &best)) {
      stage_solution t = best;
      best = kept, kept = t;
    }
    free_solution(&kept);
  }
  if (judge != policy) {
    bool keep_outputs = best.keeps_outputs;
    free_solution(&best);
    best = solve_variant(pl, s, policy, with_windows, keep_outputs);
    searched += best.stats.search_s;
  }
  memcpy(st->decisions, best.decisions, sizeof *st->decisions * (size_t)pl->ir->block.n_ops);
  free(best.decisions);
  free(st->window_of);
  st->window_of = best.window_of;
  st->stats = best.stats;
  st->stats.search_s = searched;
  lx_schedule_stage(pl->ir, pl->pipe, s);
}

/* Budgets from the keep-everything plan of the same split. */
static void compute_budgets(planner *pl) {
  lx_stage_memory *mem = lx_calloc((size_t)(pl->pipe->pp > 0 ? pl->pipe->pp : 1), sizeof *mem);
  lx_plan_memory(pl->pipe, mem);
  for (int s = 0; s < pl->pipe->pp; s++) {
    pl->budget[s] = activation_budget(pl->ir, pl->cm, pl->pipe, &mem[s], s);
    lx_stage_memory_free(&mem[s]);
  }
  free(mem);
}

static double pipeline_time(const lx_pipeline *p, const lx_cost_model *cm) {
  lx_simulation sim;
  lx_simulate_training(p, cm, NULL, NULL, NULL, &sim);
  double t = sim.iteration_time;
  lx_simulation_free(&sim);
  return t;
}

static double simulated_time(planner *pl) { return pipeline_time(pl->pipe, pl->cm); }

/* Windows come from the schedule with checkmate's on-demand recompute; its
 * iteration time is what the windowed plan must beat. One simulation gives
 * both: simulating is most of a plan's time on long pipelines. Under 2BW
 * both are the steady state's, where the pipeline never drains. */
static double measure_windows(planner *pl) {
  lx_simulation sim;
  lx_simulate_training(pl->pipe, pl->cm, NULL, NULL, NULL, &sim);
  for (int s = 0; s < pl->pipe->pp; s++) {
    lx_interval *times = lx_compute_times(&sim, pl->pipe, s);
    lx_find_windows(pl->pipe, s, times, pl->cm->interference);
    free(times);
  }
  double t = sim.iteration_time;
  lx_simulation_free(&sim);
  return t;
}

/* Whether stage s places recompute in one of the windows marked. */
static bool uses_any(const lx_pipeline *p, int s, const bool *marked) {
  const lx_stage *st = &p->stages[s];
  size_t n = st->window_of ? lx_placement_size(p, st) : 0;
  for (size_t e = 0; e < n; e++)
    if (st->window_of[e] >= 0 && marked[st->window_of[e]]) return true;
  return false;
}

/* Windows were measured on the on-demand schedule; once recompute moves
 * into them, stages speed up and the waits of the stages that wait for them
 * shrink. Each round simulates the plan, shortens the windows that idle less
 * now, and solves again each stage that had placed work in one of them, so
 * that every in-window recompute the plan names starts in its window. */
static void shrink_windows(planner *pl) {
  for (int round = 0; round < 3; round++) {
    lx_simulation sim;
    lx_simulate_training(pl->pipe, pl->cm, NULL, NULL, NULL, &sim);
    bool again = false;
    for (int s = 0; s < pl->pipe->pp; s++) {
      lx_stage *st = &pl->pipe->stages[s];
      bool *shrunk = lx_calloc((size_t)st->n_windows + 1, sizeof *shrunk);
      lx_interval *times = lx_compute_times(&sim, pl->pipe, s);
      if (lx_shrink_windows(pl->pipe, s, times, pl->cm->interference, shrunk) &&
          uses_any(pl->pipe, s, shrunk)) {
        solve_stage(pl, s, pl->policy, true, false); /* the same budget */
        again = true;
      }
      free(times);
      free(shrunk);
    }
    lx_simulation_free(&sim);
    if (!again) return;
  }
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
        solve_stage(pl, s, pl->policy, pl->policy != LX_RECOMPUTE_CHECKMATE, true);
        again = true;
      }
      lx_stage_memory_free(&mem[s]);
    }
    free(mem);
    if (!again) return;
  }
}

static bool pipeline_fits(const lx_pipeline *p, const lx_cost_model *cm) {
  int pp = p->pp;
  lx_stage_memory *mem = lx_calloc((size_t)(pp > 0 ? pp : 1), sizeof *mem);
  lx_plan_memory(p, mem);
  bool fits = true;
  for (int s = 0; s < pp; s++) {
    fits &= mem[s].peak <= (int64_t)cm->gpu.memory_bytes;
    lx_stage_memory_free(&mem[s]);
  }
  free(mem);
  return fits;
}

static bool fits_memory(planner *pl) { return pipeline_fits(pl->pipe, pl->cm); }

/* The stages' decisions, windows placement and policy statistics, kept
 * while an alternative plan is tried. */
typedef struct {
  lx_op_decision *decisions;
  int **window_of;
  lx_policy_stats *stats;
} plan_snapshot;

/* A copy: the stages keep their own, which an alternative replaces where it
 * plans the stage again. */
static plan_snapshot take_snapshot(planner *pl) {
  int pp = pl->pipe->pp, n = pl->ir->block.n_ops;
  plan_snapshot k = {lx_malloc(sizeof *k.decisions * (size_t)(pp * n + 1)),
                     lx_malloc(sizeof *k.window_of * (size_t)(pp + 1)),
                     lx_malloc(sizeof *k.stats * (size_t)(pp + 1))};
  for (int s = 0; s < pp; s++) {
    lx_stage *st = &pl->pipe->stages[s];
    memcpy(k.decisions + s * n, st->decisions, sizeof *k.decisions * (size_t)n);
    k.window_of[s] = NULL;
    if (st->window_of) {
      size_t bytes = sizeof(int) * lx_placement_size(pl->pipe, st);
      k.window_of[s] = lx_malloc(bytes + sizeof(int));
      memcpy(k.window_of[s], st->window_of, bytes);
    }
    k.stats[s] = st->stats;
  }
  return k;
}

/* The alternative stands where it fits and is faster than `planned` (its
 * stages then say `why`); else the snapshot's plan comes back. */
static void keep_faster(planner *pl, plan_snapshot k, double planned, const char *why) {
  bool better = fits_memory(pl) && simulated_time(pl) < planned;
  for (int s = 0; s < pl->pipe->pp; s++) {
    lx_stage *st = &pl->pipe->stages[s];
    if (better) {
      free(k.window_of[s]);
      st->stats.status = why;
      continue;
    }
    memcpy(st->decisions, k.decisions + s * pl->ir->block.n_ops,
           sizeof *k.decisions * (size_t)pl->ir->block.n_ops);
    free(st->window_of);
    st->window_of = k.window_of[s];
    double searched = st->stats.search_s; /* the alternative's search counts too */
    st->stats = k.stats[s];
    st->stats.search_s = searched;
    lx_schedule_stage(pl->ir, pl->pipe, s);
  }
  free(k.decisions);
  free(k.window_of);
  free(k.stats);
}

static bool lynx_policy(const planner *pl) {
  return pl->policy == LX_RECOMPUTE_LYNX_HEU || pl->policy == LX_RECOMPUTE_LYNX_OPT;
}

/* Megatron's selective plan drops the attention core's internals but keeps
 * its output: a point of the decision space that the Lynx policies' per-op
 * search (an op recomputed drops all it saves) does not enumerate. Where it
 * fits and is faster than their plan, it stands (it recomputes on demand:
 * no windows). */
static void consider_selective(planner *pl) {
  if (!lynx_policy(pl)) return;
  double planned = simulated_time(pl);
  plan_snapshot k = take_snapshot(pl);
  for (int s = 0; s < pl->pipe->pp; s++) {
    free(pl->pipe->stages[s].window_of);
    pl->pipe->stages[s].window_of = NULL;
    lx_recompute_fixed(pl->ir, LX_RECOMPUTE_SELECTIVE, pl->pipe->stages[s].decisions);
    lx_schedule_stage(pl->ir, pl->pipe, s);
  }
  keep_faster(pl, k, planned, "Megatron's selective plan (faster than the per-op plan)");
}

static bool stage_offloads(const planner *pl, int s) {
  for (int i = 0; i < pl->ir->block.n_ops; i++)
    if (pl->pipe->stages[s].decisions[i].offload) return true;
  return false;
}

static bool offloads(const planner *pl) {
  for (int s = 0; s < pl->pipe->pp; s++)
    if (stage_offloads(pl, s)) return true;
  return false;
}

/* The policies charge a layer's copies only beyond what the layer overlaps,
 * as if every copy started when its admissible range opens; the simulation
 * can find prefetches that still wait. Where the same policy without offload
 * is faster, its plan stands. A stage that offloads nothing keeps its plan:
 * the policy found it best among choices that include every one without
 * offload. */
static void consider_no_offload(planner *pl) {
  if (!lynx_policy(pl) || !offloads(pl)) return;
  double planned = simulated_time(pl);
  plan_snapshot k = take_snapshot(pl);
  pl->no_offload = true;
  for (int s = 0; s < pl->pipe->pp; s++)
    if (stage_offloads(pl, s)) solve_stage(pl, s, pl->policy, true, true);
  repair(pl);
  pl->no_offload = false;
  keep_faster(pl, k, planned, "the policy's plan without offload (faster than the one that offloads)");
}

static void plan_policy(planner *pl) {
  int pp = pl->pipe->pp;
  for (int s = 0; s < pp; s++)
    lx_schedule_stage(pl->ir, pl->pipe, s);
  compute_budgets(pl);
  bool recomputes = false;
  for (int s = 0; s < pp; s++) {
    solve_stage(pl, s, LX_RECOMPUTE_CHECKMATE, false, true);
    for (int i = 0; i < pl->ir->block.n_ops; i++)
      recomputes |= pl->pipe->stages[s].decisions[i].recompute;
  }
  if (pl->policy != LX_RECOMPUTE_CHECKMATE &&
      recomputes) { /* with nothing to recompute, windows cannot help */
    double on_demand = measure_windows(pl);
    for (int s = 0; s < pp; s++)
      solve_stage(pl, s, pl->policy, true, true);
    repair(pl);
    shrink_windows(pl);
    /* if the plan still lost, checkmate's on-demand plan (a choice within
     * the policy's space) stands */
    if (simulated_time(pl) > on_demand) {
      for (int s = 0; s < pp; s++)
        solve_stage(pl, s, LX_RECOMPUTE_CHECKMATE, false, true);
      for (int s = 0; s < pp; s++)
        pl->pipe->stages[s].stats.status = "checkmate's plan (windows did not pay)";
    }
  }
  repair(pl);
  consider_no_offload(pl);
  consider_selective(pl);
}

/* Interleaved 1F1B: the layers of stage s (stage_first) go to its chunks
 * s, s + pp, ... in nearly equal parts, the earlier chunks taking one more;
 * chunk c holds [first[c], first[c + 1]). False where a stage has fewer
 * layers than chunks. */
static bool split_into_chunks(const int *stage_first, int pp, int virtual_stages, int *first) {
  int *count = lx_malloc(sizeof *count * (size_t)(pp * virtual_stages));
  bool fits = true;
  for (int s = 0; s < pp; s++) {
    int n = stage_first[s + 1] - stage_first[s];
    fits &= n >= virtual_stages;
    for (int v = 0; v < virtual_stages; v++)
      count[v * pp + s] = n / virtual_stages + (v < n % virtual_stages ? 1 : 0);
  }
  first[0] = 0;
  for (int c = 0; c < pp * virtual_stages; c++)
    first[c + 1] = first[c] + count[c];
  free(count);
  return fits;
}

/* The layers of each model chunk (pp x virtual_stages + 1 entries): an even
 * split, or the recompute-aware DP's split of the stages, chunked. */
static void choose_partition(const lx_ir *ir, lx_recompute_policy policy, const lx_cost_model *cm, int pp,
                             int v, int *first) {
  lx_partition_uniform(ir->model.layers, pp * v, first);
  if (pp < 2) return;
  lx_partition_model m;
  lx_partition_model_init(&m, ir, cm, policy);
  int *dp = lx_malloc(sizeof(int) * (size_t)(pp + 1));
  int *chunked = lx_malloc(sizeof(int) * (size_t)(pp * v + 1));
  if (lx_partition_dp(ir->model.layers, pp, lx_partition_stage_cost, &m, dp) >= 0 &&
      split_into_chunks(dp, pp, v, chunked))
    for (int c = 0; c <= pp * v; c++)
      first[c] = chunked[c];
  free(dp);
  free(chunked);
  lx_partition_model_free(&m);
}

/* The chunks' first layers of a pipeline of pp stages of v chunks: pp v + 1 entries. */
static int *new_split(int pp, int v) { return lx_malloc(sizeof(int) * (size_t)(pp * v + 1)); }

/* The pipeline whose model chunks begin at first[] (plan_split's layers). */
static void plan_split(const lx_ir *ir, const lx_plan_options *o, const int *first, const lx_cost_model *cm,
                       lx_pipeline *out) {
  int pp = ir->plan.pp, chunks = pp * out->virtual_stages;
  int *even = new_split(pp, out->virtual_stages);
  lx_partition_uniform(ir->model.layers, chunks, even);
  out->balanced_split = memcmp(even, first, sizeof(int) * (size_t)(chunks + 1)) != 0;
  free(even);
  init_stages(ir, fixed_policy(o->policy) ? o->policy : LX_RECOMPUTE_NONE, first, out);
  if (fixed_policy(o->policy)) {
    for (int s = 0; s < pp; s++)
      lx_schedule_stage(ir, out, s);
  } else {
    planner pl = {
        ir, cm, out, o->policy, o->mip_work_limit, o->no_offload, lx_calloc((size_t)pp, sizeof(int64_t))};
    plan_policy(&pl);
    free(pl.budget);
  }
}

/* Whether plan a beats plan b: it fits where b does not, or both fit (or
 * neither) and a is faster. Ties go to b. */
static bool beats(const lx_pipeline *a, const lx_pipeline *b, const lx_cost_model *cm) {
  bool fa = pipeline_fits(a, cm), fb = pipeline_fits(b, cm);
  if (fa != fb) return fa;
  return pipeline_time(a, cm) < pipeline_time(b, cm);
}

/* The splits a plan tries (pp v + 1 first layers each, all different; returns
 * how many): under `best` the even split and the recompute-aware splits of
 * the policy and of checkmate, under `dp` the policy's, else the even one.
 * Where the first stages must recompute most (1F1B stashes p - i
 * micro-batches on stage i), fewer layers there often pay. The Lynx
 * policies also try checkmate's split: their stage costs count on windows
 * that the schedule may not offer, and on checkmate's split their decisions
 * can be checkmate's, so they do not lose to it. */
static int plan_splits(const lx_ir *ir, const lx_plan_options *o, const lx_cost_model *cm, int pp, int v,
                       int *splits[3]) {
  lx_partition_kind partition = lx_partition_for(o->partition, o->policy, pp);
  if (partition == LX_PARTITION_DP) return choose_partition(ir, o->policy, cm, pp, v, splits[0]), 1;
  lx_partition_uniform(ir->model.layers, pp * v, splits[0]);
  if (partition == LX_PARTITION_UNIFORM) return 1;
  int n = 1;
  lx_recompute_policy policies[] = {o->policy, LX_RECOMPUTE_CHECKMATE};
  for (int k = 0; k < 2; k++) {
    choose_partition(ir, policies[k], cm, pp, v, splits[n]);
    bool seen = false;
    for (int j = 0; j < n; j++)
      seen |= !memcmp(splits[j], splits[n], sizeof(int) * (size_t)(pp * v + 1));
    n += !seen;
  }
  return n;
}

/* The plan on each of plan_splits' splits: the one that fits and is faster
 * stands (the earlier split where they tie). */
static void plan_each_split(const lx_ir *ir, const lx_plan_options *o, const lx_cost_model *cm,
                            const lx_pipeline *shape, lx_pipeline *out) {
  int pp = shape->pp, v = shape->virtual_stages;
  int *splits[3] = {new_split(pp, v), new_split(pp, v), new_split(pp, v)};
  int n = plan_splits(ir, o, cm, pp, v, splits);
  *out = *shape;
  plan_split(ir, o, splits[0], cm, out);
  for (int k = 1; k < n; k++) {
    lx_pipeline other = *shape;
    plan_split(ir, o, splits[k], cm, &other);
    if (beats(&other, out, cm)) {
      lx_pipeline_free(out);
      *out = other;
    } else {
      lx_pipeline_free(&other);
    }
  }
  for (int k = 0; k < 3; k++)
    free(splits[k]);
}

lx_partition_kind lx_partition_for(lx_partition_kind partition, lx_recompute_policy policy, int pp) {
  return partition == LX_PARTITION_BEST && (fixed_policy(policy) || pp < 2) ? LX_PARTITION_UNIFORM
                                                                            : partition;
}

/* The pipeline's shape under the IR's plan, before a split or policy. */
static lx_pipeline pipeline_shape(const lx_ir *ir, lx_recompute_policy policy) {
  const lx_plan *plan = &ir->plan;
  return (lx_pipeline){.ir = ir,
                       .pp = plan->pp,
                       .micro_batches = lx_micro_batches(ir),
                       .virtual_stages = plan->virtual_stages > 1 ? plan->virtual_stages : 1,
                       .kind = plan->schedule ? plan->schedule : LX_SCHEDULE_1F1B,
                       .policy = policy};
}

bool lx_plan_pipeline(const lx_ir *ir, const lx_plan_options *o, lx_pipeline *out) {
  lx_pipeline shape = pipeline_shape(ir, o->policy);
  *out = shape;
  if (!check_plan(ir, shape.kind, shape.pp, shape.micro_batches)) return false;
  lx_cost_model own;
  const lx_cost_model *cm = o->cm;
  bool needs_costs =
      !fixed_policy(o->policy) || lx_partition_for(o->partition, o->policy, shape.pp) != LX_PARTITION_UNIFORM;
  if (!cm && needs_costs) {
    if (!lx_cost_model_init(&own, ir, NULL)) return false;
    cm = &own;
  }
  plan_each_split(ir, o, cm, &shape, out);
  if (cm == &own) lx_cost_model_free(&own);
  return true;
}

double lx_uneven_keep_all_time(const lx_ir *ir, const lx_plan_options *o) {
  lx_pipeline shape = pipeline_shape(ir, LX_RECOMPUTE_NONE);
  int pp = shape.pp, v = shape.virtual_stages;
  if (!check_plan(ir, shape.kind, pp, shape.micro_batches)) return 0;
  int *splits[3] = {new_split(pp, v), new_split(pp, v), new_split(pp, v)}, *even = new_split(pp, v);
  int n = plan_splits(ir, o, o->cm, pp, v, splits);
  lx_partition_uniform(ir->model.layers, pp * v, even);
  lx_plan_options keep_all = {.policy = LX_RECOMPUTE_NONE};
  double least = INFINITY;
  for (int k = 0; k < n; k++) {
    if (!memcmp(splits[k], even, sizeof(int) * (size_t)(pp * v + 1))) continue;
    lx_pipeline p = shape;
    plan_split(ir, &keep_all, splits[k], o->cm, &p);
    double t = pipeline_time(&p, o->cm);
    lx_pipeline_free(&p);
    if (t < least) least = t;
  }
  for (int k = 0; k < 3; k++)
    free(splits[k]);
  free(even);
  return least;
}

bool lx_build_pipeline(const lx_ir *ir, lx_recompute_policy policy, lx_pipeline *out) {
  lx_plan_options o = {.policy = policy, .partition = LX_PARTITION_UNIFORM};
  return lx_plan_pipeline(ir, &o, out);
}
