/* search.c — plan search: when the model file leaves tp, pp, dp, the
 * micro-batch or the schedule open, try every feasible combination for the cluster and keep
 * the fastest that fits (PipeDream-2BW's planner, with recompute-aware
 * partitioning and the recompute policy in the loop).
 *
 * Each candidate is a working copy of the analysed IR (the model file is
 * parsed once) with the open fields set and analysed again, since analysis
 * depends on tp and the micro-batch; then partition + policy + schedule, the
 * memory model and a simulation. */
#define _POSIX_C_SOURCE 200809L
#include "planning/search.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "analysis/analyze.h"
#include "diag.h"
#include "planning/memplan.h"
#include "planning/simulate.h"

static bool divides(int a, int b) { return a > 0 && b % a == 0; }

/* Candidates report their own errors; a search reports only its verdict.
 * The sink to give back to unmute, which also forgets what was counted. */
static FILE *mute_diagnostics(void) {
  FILE *quiet = fopen("/dev/null", "w");
  lx_diag_set_sink(quiet);
  return quiet;
}

static void unmute_diagnostics(FILE *quiet) {
  lx_diag_set_sink(NULL);
  if (quiet) fclose(quiet);
  lx_diag_reset(); /* a search starts from a model without errors */
}

/* The candidate's peak (the memory plan's), its 2BW weight copy, and whether it fits. */
static void record_memory(lx_candidate *c, const lx_pipeline *pipe, const lx_stage_memory *memory,
                          double capacity) {
  int elt = lx_dtype_bytes(pipe->ir->training.dtype);
  c->micro_batches = pipe->micro_batches;
  for (int s = 0; s < pipe->pp; s++) {
    if ((double)memory[s].peak > c->peak_bytes) c->peak_bytes = (double)memory[s].peak;
    double copy = c->schedule == LX_SCHEDULE_2BW ? (double)pipe->stages[s].params_per_rank * elt : 0;
    if (copy > c->versions_bytes) c->versions_bytes = copy;
  }
  c->fits = c->peak_bytes <= capacity;
  if (!c->fits)
    snprintf(c->why, sizeof c->why, "does not fit: %.1f GiB > %.1f GiB", c->peak_bytes / (1 << 30),
             capacity / (1 << 30));
}

/* The candidate's step time, MFU and most recompute of a stage, from a simulation (false: it deadlocked). */
static bool record_time(lx_candidate *c, const lx_pipeline *pipe, const lx_cost_model *cm) {
  lx_simulation sim;
  bool ok = lx_simulate_training(pipe, cm, NULL, NULL, NULL, &sim); /* the peak is the memory plan's */
  if (ok) {
    c->time_s = sim.iteration_time;
    c->mfu = sim.mfu;
    for (int s = 0; s < pipe->pp; s++)
      if (sim.stages[s].recompute_time > c->recompute_s) c->recompute_s = sim.stages[s].recompute_time;
  }
  lx_simulation_free(&sim);
  return ok;
}

/* What a candidate must beat to be worth planning: the best plan's time,
 * and a floor under the candidate's own time on the even split (its block,
 * keeping everything there), slower than that. Zeros: plan it. */
typedef struct {
  double best_s, even_floor_s;
} lx_bar;

/* Whether keeping everything on every other split the candidate's plan
 * would try is no faster than the bar's best either: its plan cannot be. */
static bool below_bar(const lx_ir *ir, const lx_plan_options *options, lx_bar bar, lx_candidate *c) {
  if (bar.best_s <= 0) return false;
  double uneven = lx_uneven_keep_all_time(ir, options);
  double floor = uneven < bar.even_floor_s ? uneven : bar.even_floor_s;
  if (!(floor > bar.best_s)) return false;
  c->time_floor_s = floor;
  snprintf(c->why, sizeof c->why,
           "no faster than %.1f ms, keeping everything whole on each split it would try", 1e3 * floor);
  return true;
}

/* Plans the candidate: its peak, whether it fits, and where `timed` its time. */
static void plan_candidate(const lx_ir *ir, const lx_plan_options *options, lx_candidate *c, bool timed) {
  lx_pipeline pipe;
  if (!lx_plan_pipeline(ir, options, &pipe)) {
    snprintf(c->why, sizeof c->why, "cannot be scheduled (fewer micro-batches than stages?)");
    return;
  }
  lx_stage_memory *memory = lx_calloc((size_t)pipe.pp, sizeof *memory);
  lx_plan_memory(&pipe, memory);
  record_memory(c, &pipe, memory, options->cm->gpu.memory_bytes);
  if (timed && !record_time(c, &pipe, options->cm)) {
    c->fits = false;
    snprintf(c->why, sizeof c->why, "its simulation deadlocked (a bug in lynxgen)");
  }
  for (int s = 0; s < pipe.pp; s++)
    lx_stage_memory_free(&memory[s]);
  free(memory);
  lx_pipeline_free(&pipe);
}

/* Runs one candidate on a working copy of the analysed `ir`: its peak and
 * whether it fits, and where `timed` its time (the longest-sequence table
 * asks only whether it fits); why it failed, if it did, or why it could not
 * beat `bar` (then not planned); *memory_bytes: the GPU memory it was
 * measured against (unless NULL). */
static void evaluate(const lx_ir *analysed, const lx_search_request *req, lx_candidate *c, bool timed,
                     lx_bar bar, double *memory_bytes) {
  lx_ir ir;
  lx_ir_working_copy(&ir, analysed);
  ir.plan.tp = c->tp, ir.plan.pp = c->pp, ir.plan.dp = c->dp, ir.plan.micro_batch = c->micro_batch;
  ir.plan.schedule = c->schedule;
  ir.plan.virtual_stages = c->virtual_stages;
  ir.plan.mini_sequences = c->mini_sequences;
  if (req->seq_len) ir.model.seq_len = req->seq_len;
  lx_cost_model cm;
  bool ok = lx_analyze(&ir) == 0 && lx_cost_model_init(&cm, &ir, req->profile);
  if (!ok) {
    snprintf(c->why, sizeof c->why, "invalid for this model");
    lx_ir_free_working_copy(&ir);
    return;
  }
  if (req->gpu_memory_bytes > 0) cm.gpu.memory_bytes = req->gpu_memory_bytes;
  if (memory_bytes) *memory_bytes = cm.gpu.memory_bytes;
  double floor = (double)lx_static_bytes_floor(&ir, c->schedule);
  lx_plan_options options = {.policy = c->policy,
                             .partition = req->partition,
                             .no_offload = req->no_offload,
                             .cm = &cm,
                             .mip_work_limit = req->mip_work_limit};
  if (floor > cm.gpu.memory_bytes) { /* no partition, policy or simulation changes that */
    c->static_floor_bytes = floor;
    snprintf(c->why, sizeof c->why, "does not fit: weights, gradients and AdamW state alone");
  } else if (!below_bar(&ir, &options, bar, c)) {
    plan_candidate(&ir, &options, c, timed);
  }
  lx_cost_model_free(&cm);
  lx_ir_free_working_copy(&ir);
}

/* What is known of a candidate, the most first: simulated, bounded in time
 * (dominated), bounded in memory (too large), nothing (invalid); and the
 * figure it is ranked by among its kind. */
static int known(const lx_candidate *c, double *figure) {
  if (c->time_s > 0) return *figure = c->time_s, 0;
  if (c->time_floor_s > 0) return *figure = c->time_floor_s, 1;
  if (c->static_floor_bytes > 0) return *figure = c->static_floor_bytes, 2;
  return *figure = 0, 3;
}

static int by_time(const void *a, const void *b) {
  const lx_candidate *x = a, *y = b;
  if (x->comparison != y->comparison) return x->comparison ? 1 : -1; /* what may be chosen first */
  if (x->fits != y->fits) return x->fits ? -1 : 1;
  double fx, fy;
  int kx = known(x, &fx), ky = known(y, &fy);
  if (kx != ky) return kx - ky;
  if (fx != fy) return fx < fy ? -1 : 1;
  if (x->schedule != y->schedule)
    return (int)x->schedule - (int)y->schedule; /* a tie: the simpler schedule, */
  return (int)x->policy - (int)y->policy;       /* then the simpler policy */
}

/* The schedules a plan of pp stages may take: the model's, or if it left
 * the schedule open 1F1B and (with more than one stage) ZB-H1 and
 * interleaved 1F1B, all three the same training. A requested 2BW comes
 * with 1F1B, for comparison. */
static int schedules_for(const lx_ir *ir, int pp, lx_schedule *out) {
  if (ir->plan.schedule == LX_SCHEDULE_2BW) return out[0] = LX_SCHEDULE_2BW, out[1] = LX_SCHEDULE_1F1B, 2;
  if (!ir->open_plan.schedule) return out[0] = ir->plan.schedule, 1;
  out[0] = LX_SCHEDULE_1F1B, out[1] = LX_SCHEDULE_ZB_H1, out[2] = LX_SCHEDULE_INTERLEAVED;
  return pp > 1 ? 3 : 1;
}

/* Chunks per stage: the plan's under a requested interleaved schedule, 2 where the search tries it. */
static int virtual_stages_for(const lx_ir *ir, lx_schedule schedule) {
  if (schedule != LX_SCHEDULE_INTERLEAVED) return 1;
  return ir->open_plan.schedule ? 2 : ir->plan.virtual_stages;
}

/* The recompute policies a candidate may take: the requested one, or where
 * none was, the fixed ones and Lynx's heuristic (lynx-opt solves a MILP per
 * stage: too slow to repeat over the whole search). */
static int policies_for(const lx_search_request *req, lx_recompute_policy *out) {
  if (!req->search_policies) return out[0] = req->policy, 1;
  out[0] = LX_RECOMPUTE_NONE, out[1] = LX_RECOMPUTE_SELECTIVE, out[2] = LX_RECOMPUTE_FULL;
  out[3] = LX_RECOMPUTE_LYNX_HEU;
  return 4;
}

/* The pieces the LM head, its loss and the MLPs may run in: the plan's, or
 * where open whole, and in 4 or 16 pieces (MsT) where each holds at least
 * MIN_PIECE_TOKENS of the sequence, fewer making the GEMMs inefficient. */
enum { MIN_PIECE_TOKENS = 128 };
static int mini_sequences_for(const lx_ir *ir, int *out) {
  if (!ir->open_plan.mini_sequences) return out[0] = ir->plan.mini_sequences, 1;
  int n = 0, s = ir->model.seq_len;
  for (int m = 1; m <= 16; m *= 4)
    if (s % m == 0 && (m == 1 || s / m >= MIN_PIECE_TOKENS)) out[n++] = m;
  return n;
}

/* tp inside a node and dividing the heads; pp at most the layers; dp the
 * rest of the cluster; micro-batches dividing the replica's batch; the
 * schedules; the policies. Returns their number; fills `out` unless it is NULL. */
static int enumerate(const lx_ir *ir, const lx_search_request *req, lx_candidate *out) {
  const lx_plan *p = &ir->plan;
  const lx_open_plan *open = &ir->open_plan;
  int gpus = ir->cluster.nodes * ir->cluster.gpus_per_node, n = 0;
  static const int micro_batches[] = {1, 2, 4, 8, 16};
  for (int tp = 1; tp <= ir->cluster.gpus_per_node; tp++) {
    if ((!open->tp && tp != p->tp) || !divides(tp, ir->model.heads) || !divides(tp, ir->model.kv_heads) ||
        !divides(tp, gpus))
      continue;
    for (int pp = 1; pp <= ir->model.layers && tp * pp <= gpus; pp++) {
      if ((!open->pp && pp != p->pp) || !divides(tp * pp, gpus)) continue;
      int dp = open->dp ? gpus / (tp * pp) : p->dp;
      if (tp * pp * dp > gpus) continue;
      for (size_t k = 0; k < sizeof micro_batches / sizeof micro_batches[0]; k++) {
        int b = micro_batches[k];
        if ((!open->micro_batch && b != p->micro_batch) || !divides(b * dp, p->global_batch)) continue;
        if ((p->global_batch ? p->global_batch / (b * dp) : pp) < pp) continue;
        lx_schedule schedules[3];
        lx_recompute_policy policies[4];
        int pieces[3], n_policies = policies_for(req, policies), n_pieces = mini_sequences_for(ir, pieces);
        for (int s = 0, count = schedules_for(ir, pp, schedules); s < count; s++)
          for (int q = 0; q < n_policies; q++)
            for (int m = 0; m < n_pieces;
                 m++, n++) /* whole first: pieces are tried only where it falls short */
              if (out)
                out[n] = (lx_candidate){.tp = tp,
                                        .pp = pp,
                                        .dp = dp,
                                        .micro_batch = b,
                                        .schedule = schedules[s],
                                        .virtual_stages = virtual_stages_for(ir, schedules[s]),
                                        .mini_sequences = pieces[m],
                                        .policy = policies[q],
                                        .comparison =
                                            schedules[s] != schedules[0] && schedules[0] == LX_SCHEDULE_2BW};
      }
    }
  }
  return n;
}

/* The fastest fitting candidate so far, for the out-of-memory error. */
static const lx_candidate *best_so_far;

static void note_best_so_far(void) {
  if (best_so_far)
    fprintf(stderr,
            "lynxgen: note: the best plan the search had found: tp %d, pp %d, dp %d, micro-batch %d, %s "
            "(%.1f ms)\n",
            best_so_far->tp, best_so_far->pp, best_so_far->dp, best_so_far->micro_batch,
            lx_schedule_name(best_so_far->schedule), 1e3 * best_so_far->time_s);
  else
    fputs("lynxgen: note: the plan search had found no plan that fits yet\n", stderr);
}

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Whether candidate c, which does not fit, comes closer than `closest`: a
 * planned peak beats a static floor (a floor is not a peak), the least wins. */
static bool closer(const lx_candidate *c, const lx_candidate *closest) {
  if (c->peak_bytes > 0) return closest->peak_bytes == 0 || c->peak_bytes < closest->peak_bytes;
  return c->static_floor_bytes > 0 && closest->peak_bytes == 0 &&
         (closest->static_floor_bytes == 0 || c->static_floor_bytes < closest->static_floor_bytes);
}

/* enumerate() lists each plan and schedule's candidates together (a
 * block), first the one that keeps everything whole (policy none, the
 * fewest pieces) where the policies are open. On the same split of the
 * layers, recomputation and pieces only add work to a step, so no candidate
 * of the block that splits the layers evenly, as that one does, runs faster
 * (one whose split balances its recomputation may). */
static bool same_block(const lx_candidate *a, const lx_candidate *b) {
  return a->tp == b->tp && a->pp == b->pp && a->dp == b->dp && a->micro_batch == b->micro_batch &&
         a->schedule == b->schedule;
}

static int block_first(const lx_candidate *all, int i) {
  while (i > 0 && same_block(&all[i - 1], &all[i]))
    i--;
  return i;
}

/* The block's first where it keeps everything and was simulated, else NULL. */
static const lx_candidate *unconstrained(const lx_candidate *all, int i) {
  const lx_candidate *first = &all[block_first(all, i)];
  return first->policy == LX_RECOMPUTE_NONE && first->time_s > 0 ? first : NULL;
}

/* Why all[i] need not be tried (into its why), or false: its pieces would
 * only add forwards where whole it fits without recomputation, or on the
 * even split its block keeping everything is already slower than the best,
 * or fits (so that it could only tie). */
static bool dominated(const lx_ir *ir, const lx_search_request *req, lx_candidate *all, int i,
                      const lx_candidate *best) {
  lx_candidate *c = &all[i];
  /* enumerate() puts the whole sibling of an open plan's pieces just before them */
  const lx_candidate *whole = ir->open_plan.mini_sequences && c->mini_sequences > 1 ? c - 1 : NULL;
  while (whole && whole->mini_sequences > 1)
    whole--;
  if (whole && whole->fits && whole->recompute_s == 0) {
    snprintf(c->why, sizeof c->why, "in pieces only slower: whole, it fits without recomputation");
    return true;
  }
  bool even = lx_partition_for(req->partition, c->policy, c->pp) == LX_PARTITION_UNIFORM;
  const lx_candidate *keep = c->comparison || !even ? NULL : unconstrained(all, i);
  if (!keep || keep == c || !(keep->fits || (best && keep->time_s > best->time_s))) return false;
  c->time_floor_s = keep->time_s;
  snprintf(c->why, sizeof c->why, "no faster than %.1f ms, keeping everything whole%s", 1e3 * keep->time_s,
           keep->fits ? ", which fits" : "");
  return true;
}

/* The bar for all[i], which dominated() let through: the best plan so far
 * where its block keeping everything on the even split is slower (then
 * all[i] splits the layers unevenly too), else zeros. */
static lx_bar bar_for(const lx_candidate *all, int i, const lx_candidate *best) {
  const lx_candidate *keep = unconstrained(all, i);
  if (!best || all[i].comparison || !keep || keep == &all[i] || !(keep->time_s > best->time_s))
    return (lx_bar){0};
  return (lx_bar){best->time_s, keep->time_s};
}

typedef struct {
  double key; /* the block's unconstrained time; 0: the first of its block; DBL_MIN: a block without one */
  int index;
} lx_search_turn;

static int by_turn(const void *a, const void *b) {
  const lx_search_turn *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->index - y->index;
}

/* The order to try candidates in: every block's first, then the others,
 * blocks whose first was fastest first (where the best will be, and after
 * it every block that keeps everything slower is dominated), each block in
 * enumerate()'s order. Called again once the firsts were tried. */
static void order_turns(const lx_candidate *all, lx_search_turn *turns, int n) {
  for (int k = 0; k < n; k++) {
    int i = turns[k].index, first = block_first(all, i);
    const lx_candidate *keep = unconstrained(all, i);
    turns[k].key = i == first ? 0 : keep ? keep->time_s : DBL_MIN;
  }
  qsort(turns, (size_t)n, sizeof *turns, by_turn);
}

/* Moves the candidates tried to the front (in their order); returns their number. */
static int tried_first(lx_candidate *all, int n, const bool *tried) {
  lx_candidate *copy = lx_calloc((size_t)n, sizeof *copy);
  int front = 0, back = n;
  for (int i = n - 1; i >= 0; i--)
    if (!tried[i]) copy[--back] = all[i];
  for (int i = 0; i < n; i++)
    if (tried[i]) copy[front++] = all[i];
  memcpy(all, copy, sizeof *all * (size_t)n);
  free(copy);
  return front;
}

/* Evaluates candidates (order_turns') until the time budget runs out. */
static void try_candidates(const lx_ir *ir, const lx_search_request *req, lx_candidate *all,
                           lx_search_stats *stats) {
  double start = seconds_now();
  lx_candidate best = {0};
  int n = stats->feasible;
  lx_search_turn *turns = lx_calloc((size_t)n + 1, sizeof *turns);
  bool *tried = lx_calloc((size_t)n + 1, sizeof *tried);
  for (int k = 0; k < n; k++)
    turns[k].index = k;
  order_turns(all, turns, n);
  int firsts = 0;
  while (firsts < n && turns[firsts].key == 0)
    firsts++;
  lx_on_out_of_memory(note_best_so_far);
  for (int k = 0; k < n; k++) {
    if (k == firsts) order_turns(all, turns + firsts, n - firsts);
    if (req->time_budget_s > 0 && seconds_now() - start > req->time_budget_s) {
      stats->out_of_time = true;
      break;
    }
    int i = turns[k].index;
    lx_candidate *c = &all[i];
    tried[i] = true;
    if (dominated(ir, req, all, i, best_so_far)) {
      stats->dominated++;
      continue;
    }
    evaluate(ir, req, c, true, bar_for(all, i, best_so_far), &stats->memory_bytes);
    if (c->time_floor_s > 0)
      stats->dominated++, stats->dominated_uneven++;
    else if (c->static_floor_bytes > 0)
      stats->too_large++;
    else if (c->peak_bytes > 0)
      stats->planned++;
    else
      stats->invalid++;
    if (c->fits && !c->comparison && (!best_so_far || c->time_s < best.time_s))
      best = *c, best_so_far = &best;
    if (!c->comparison && closer(c, &stats->closest)) stats->closest = *c;
  }
  lx_on_out_of_memory(NULL);
  best_so_far = NULL;
  stats->tried = tried_first(all, n, tried);
  free(turns), free(tried);
}

static void explain_search(const lx_ir *ir, const lx_search_request *req, const lx_candidate *all,
                           const lx_search_stats *stats, FILE *explain) {
  fprintf(explain, "plan search: %d candidates for %d GPUs, global batch %d, recompute %s\n", stats->feasible,
          ir->cluster.nodes * ir->cluster.gpus_per_node, ir->plan.global_batch,
          req->search_policies ? "none, selective, full or lynx-heu (no --policy given)"
                               : lx_recompute_policy_name(req->policy));
  if (stats->out_of_time) fprintf(explain, "  (its time budget ran out after %d of them)\n", stats->tried);
  fprintf(explain,
          "  %d planned and simulated; %d could not be faster (keeping everything whole, their layout and "
          "schedule are slower than a plan found on every split of the layers they would try, or fit on the "
          "even split; %d of them would try a recompute-aware split), %d could not fit (weights, gradients "
          "and AdamW state alone), %d were invalid\n",
          stats->planned, stats->dominated, stats->dominated_uneven, stats->too_large, stats->invalid);
  fprintf(explain, "  %-4s %-4s %-4s %-6s %-11s %-9s %-5s %12s %10s %7s  %s\n", "tp", "pp", "dp", "micro",
          "schedule", "recompute", "mini", "iteration", "peak GiB", "MFU", "verdict");
  /* the best that may be chosen, then the best of those listed for comparison (sorted after them) */
  for (int i = 0, listed[2] = {0, 0}; i < stats->tried; i++) {
    const lx_candidate *c = &all[i];
    if (listed[c->comparison]++ >= (c->comparison ? 4 : 12)) continue;
    char verdict[128];
    if (i == 0 && c->fits && !c->comparison)
      snprintf(verdict, sizeof verdict, "chosen");
    else if (c->comparison && c->fits)
      snprintf(verdict, sizeof verdict, "synchronous, for comparison: %+.1f%% against the chosen 2bw",
               100 * (c->time_s / all[0].time_s - 1));
    else if (c->fits)
      snprintf(verdict, sizeof verdict, "%.1f%% slower", 100 * (c->time_s / all[0].time_s - 1));
    else
      snprintf(verdict, sizeof verdict, "%s", c->why);
    char iteration[16] = "-", peak[16] = "-", mfu[16] = "-"; /* a bound where that is what is known */
    if (c->time_s > 0 || c->time_floor_s > 0)
      snprintf(iteration, sizeof iteration, "%s%.1f",
               c->time_s > 0 ? "" : ">=", 1e3 * (c->time_s + c->time_floor_s));
    if (c->peak_bytes > 0 || c->static_floor_bytes > 0)
      snprintf(peak, sizeof peak, "%s%.2f", c->peak_bytes > 0 ? "" : ">",
               (c->peak_bytes + c->static_floor_bytes) / (1 << 30));
    if (c->time_s > 0) snprintf(mfu, sizeof mfu, "%.1f%%", 100 * c->mfu);
    fprintf(explain, "  %-4d %-4d %-4d %-6d %-11s %-9s %-5d %9s ms %10s %7s  %s\n", c->tp, c->pp, c->dp,
            c->micro_batch, lx_schedule_name(c->schedule), lx_recompute_policy_name(c->policy),
            c->mini_sequences, iteration, peak, mfu, verdict);
  }
}

bool lx_search_plan(const lx_ir *ir, const lx_search_request *req, lx_candidate *best, lx_search_stats *stats,
                    FILE *explain) {
  int n = enumerate(ir, req, NULL);
  lx_candidate *all = lx_calloc((size_t)n + 1, sizeof *all);
  *stats = (lx_search_stats){.feasible = enumerate(ir, req, all)};
  FILE *quiet = mute_diagnostics();
  try_candidates(ir, req, all, stats);
  unmute_diagnostics(quiet);
  qsort(all, (size_t)stats->tried, sizeof *all, by_time);
  if (explain) explain_search(ir, req, all, stats, explain);
  bool found = stats->tried > 0 && all[0].fits && !all[0].comparison;
  if (found) *best = all[0];
  free(all);
  return found;
}

/* ---- 2BW against 1F1B, policy by policy ----------------------------------------------- */

static lx_candidate on_plan(const lx_ir *ir, lx_schedule schedule, lx_recompute_policy policy) {
  const lx_plan *p = &ir->plan;
  return (lx_candidate){.tp = p->tp,
                        .pp = p->pp,
                        .dp = p->dp,
                        .micro_batch = p->micro_batch,
                        .schedule = schedule,
                        .virtual_stages = 1,
                        .mini_sequences = p->mini_sequences,
                        .policy = policy};
}

/* Why 2BW wins or loses against 1F1B (sync) under one policy: 1F1B fills
 * and drains the pipeline every step, on equal stages (p - 1) / (m + p - 1)
 * of it. */
static void verdict_2bw(const lx_candidate *sync, const lx_candidate *bw, char *buf, size_t size) {
  int p = sync->pp, m = sync->micro_batches;
  double gib = 1 << 30;
  if (!bw->fits && !sync->fits)
    snprintf(buf, size, "neither fits");
  else if (!bw->fits)
    snprintf(buf, size, "2bw does not fit: its second weight version (%.2f GiB) tips the fullest stage over",
             bw->versions_bytes / gib);
  else if (!sync->fits)
    snprintf(buf, size, "only 2bw fits");
  else if (bw->time_s <= sync->time_s)
    snprintf(buf, size,
             "2bw %.1f%% faster: it does not drain between steps (1f1b fills and drains every step: "
             "(p-1)/(m+p-1) = %.1f%% of it on equal stages)",
             100 * (1 - bw->time_s / sync->time_s), m + p > 1 ? 100.0 * (p - 1) / (m + p - 1) : 0);
  else
    snprintf(buf, size,
             "2bw %.1f%% slower: its second weight version (%.2f GiB) leaves less for activations, so a "
             "stage recomputes %.1f ms a step (1f1b: %.1f ms)",
             100 * (bw->time_s / sync->time_s - 1), bw->versions_bytes / gib, 1e3 * bw->recompute_s,
             1e3 * sync->recompute_s);
}

void lx_explain_2bw(const lx_ir *ir, const lx_search_request *req, FILE *explain) {
  fprintf(explain,
          "2bw against 1f1b at tp %d x pp %d x dp %d, micro-batch %d, under each recompute policy:\n",
          ir->plan.tp, ir->plan.pp, ir->plan.dp, ir->plan.micro_batch);
  fprintf(explain, "  %-10s %12s %9s %12s %9s  %s\n", "policy", "1f1b", "peak GiB", "2bw", "peak GiB",
          "verdict");
  for (int k = 0; k < LX_RECOMPUTE_POLICY_COUNT; k++) {
    lx_search_request one = *req;
    one.policy = (lx_recompute_policy)k;
    lx_candidate sync = on_plan(ir, LX_SCHEDULE_1F1B, one.policy),
                 bw = on_plan(ir, LX_SCHEDULE_2BW, one.policy);
    FILE *quiet = mute_diagnostics();
    evaluate(ir, &one, &sync, true, (lx_bar){0}, NULL);
    evaluate(ir, &one, &bw, true, (lx_bar){0}, NULL);
    unmute_diagnostics(quiet);
    char verdict[224];
    verdict_2bw(&sync, &bw, verdict, sizeof verdict);
    fprintf(explain, "  %-10s %9.1f ms %9.2f %9.1f ms %9.2f  %s\n", lx_recompute_policy_name(one.policy),
            1e3 * sync.time_s, sync.peak_bytes / (1 << 30), 1e3 * bw.time_s, bw.peak_bytes / (1 << 30),
            verdict);
  }
}

/* ---- the longest sequence that fits ------------------------------------------------------- */

/* Whether the plan fits at `seq_len` under the candidate's policy and pieces. */
static bool fits_at(const lx_ir *ir, const lx_search_request *req, lx_candidate c, int seq_len) {
  lx_search_request at = *req;
  at.seq_len = seq_len;
  evaluate(ir, &at, &c, false, (lx_bar){0}, NULL);
  return c.fits;
}

/* Memory grows with the sequence: double until it does not fit, then bisect. */
static int longest_sequence(const lx_ir *ir, const lx_search_request *req, lx_candidate c) {
  int fits = 0, fails = LX_SEQUENCE_STEP;
  while (fails <= (1 << 22) && fits_at(ir, req, c, fails))
    fits = fails, fails *= 2;
  while (fails - fits > LX_SEQUENCE_STEP) {
    int mid = (fits + fails) / 2 / LX_SEQUENCE_STEP * LX_SEQUENCE_STEP;
    if (fits_at(ir, req, c, mid))
      fits = mid;
    else
      fails = mid;
  }
  return fits;
}

/* What each stage holds at its peak does not grow past 2 pp micro-batches a
 * step under 1F1B, ZB-H1 and 2BW (a stage holds at most pp); GPipe and
 * interleaved 1F1B hold more the more there are. Fewer make each try fast. */
static void fewer_micro_batches(lx_ir *ir) {
  lx_plan *p = &ir->plan;
  int enough = 2 * p->pp * p->micro_batch * p->dp;
  if (p->schedule != LX_SCHEDULE_GPIPE && p->schedule != LX_SCHEDULE_INTERLEAVED && p->global_batch > enough)
    p->global_batch = enough;
}

static const int pieces[] = {1, 4, 16};

/* One row per recompute policy, each led by `label` (fine-tuning's LoRA or LoRA-FA). */
static void longest_rows(const lx_ir *analysed, const lx_search_request *req, const char *label,
                         FILE *explain) {
  static const lx_recompute_policy policies[] = {LX_RECOMPUTE_NONE, LX_RECOMPUTE_SELECTIVE, LX_RECOMPUTE_FULL,
                                                 LX_RECOMPUTE_LYNX_HEU};
  lx_ir ir_fewer;
  lx_ir_working_copy(&ir_fewer, analysed);
  fewer_micro_batches(&ir_fewer);
  const lx_ir *ir = &ir_fewer;
  FILE *quiet = mute_diagnostics();
  for (size_t q = 0; q < sizeof policies / sizeof policies[0]; q++) {
    fprintf(explain, "  %s%-10s", label, lx_recompute_policy_name(policies[q]));
    for (size_t m = 0; m < sizeof pieces / sizeof pieces[0]; m++) {
      lx_candidate c = on_plan(ir, ir->plan.schedule, policies[q]);
      c.virtual_stages = ir->plan.virtual_stages, c.mini_sequences = pieces[m];
      int longest = longest_sequence(ir, req, c);
      if (longest)
        fprintf(explain, " %12d", longest);
      else
        fprintf(explain, " %12s", "none fits");
    }
    fputc('\n', explain);
  }
  unmute_diagnostics(quiet);
  lx_ir_free_working_copy(&ir_fewer);
}

void lx_explain_longest_sequence(const lx_ir *analysed, const lx_search_request *req, FILE *explain) {
  fprintf(explain,
          "longest sequence that fits at tp %d x pp %d x dp %d, micro-batch %d, %s (multiples of %d tokens; "
          "the memory model's):\n  %s%-10s",
          analysed->plan.tp, analysed->plan.pp, analysed->plan.dp, analysed->plan.micro_batch,
          lx_schedule_name(analysed->plan.schedule), LX_SEQUENCE_STEP, analysed->finetune ? "        " : "",
          "recompute");
  for (size_t m = 0; m < sizeof pieces / sizeof pieces[0]; m++)
    if (pieces[m] == 1)
      fprintf(explain, " %12s", "whole");
    else
      fprintf(explain, " %5d pieces", pieces[m]);
  fputc('\n', explain);
  if (!analysed->finetune) {
    longest_rows(analysed, req, "", explain);
    return;
  }
  /* fine-tuning: LoRA and LoRA-FA train differently, so the search keeps the model's; both are shown */
  lx_ir tuned;
  lx_ir_working_copy(&tuned, analysed);
  for (int fa = 0; fa <= 1; fa++) {
    tuned.training.lora_fa = fa;
    longest_rows(&tuned, req, fa ? "LoRA-FA " : "LoRA    ", explain);
  }
  lx_ir_free_working_copy(&tuned);
}
