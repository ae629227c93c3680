/* Overlapped recomputation's policies (gen/planning/policy.c, the window
 * matching of stage_problem.c, the partition DP of partition.c) on small
 * stage problems checked by brute force or by hand:
 *   - with unlimited memory every planned policy keeps everything;
 *   - checkmate is the cheapest on-demand choice that fits (brute force),
 *     its MILP reports the optimum it proves, and a search cut short by
 *     the work limit still fits;
 *   - lynx-heu's decisions fit every budget it says they fit, and are the
 *     brute-force optimum (it scores every choice by its matching);
 *     lynx-opt is within 3% of that optimum, feasible and never
 *     worse than lynx-heu; with windows of zero length it equals checkmate;
 *     it prices each instance's prefetch by the room before its backward;
 *   - the window placement (op by op, over consecutive windows) is valid,
 *     equals a plain reference, serves all that any placement can for ops
 *     of equal length, and never less than whole instances could;
 *   - the partition DP finds the bottleneck exhaustive search finds.
 * The schedules built from these decisions: test_lynx_schedules.c. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lynx_model.h"
#include "planning/overlap.h"
#include "planning/passes.h"
#include "planning/plan.h"
#include "planning/stage_problem.h"

/* ---- a stage problem with hand-made windows -------------------------------------- */

/* Two layers, three micro-batches; instance (l, m) may use windows in
 * [lo, due). Window capacities in multiples of one layer's recompute time. */
static void hand_windows(lx_stage_problem *pr, lx_window *w, int n_windows, double scale) {
  static int lo[6], due[6];
  for (int i = 0; i < 6; i++) {
    lo[i] = 2 * (i % 3) + (i / 3);
    due[i] = lo[i] + 3;
  }
  for (int k = 0; k < n_windows; k++)
    w[k] = (lx_window){.kind = LX_WINDOW_TP_BACKWARD,
                       .after = k,
                       .length = scale * (k % 3 + 1),
                       .capacity = scale * (k % 3 + 1)};
  pr->windows = w;
  pr->n_windows = n_windows;
  pr->n_instances = 6;
  pr->lo = malloc(sizeof lo), pr->due = malloc(sizeof due);
  memcpy(pr->lo, lo, sizeof lo), memcpy(pr->due, due, sizeof due);
}

/* A problem of hand_windows freed, its windows being the caller's. */
static void free_hand_problem(lx_stage_problem *pr, lx_cost_model *cm, lx_ir *ir) {
  pr->windows = NULL, pr->n_windows = 0;
  lx_stage_problem_free(pr);
  lx_cost_model_free(cm);
  lx_ir_free(ir);
}

static double layer_recompute_s(const lx_stage_problem *pr) {
  double t = 0;
  for (int i = 0; i < pr->n_ops; i++)
    t += pr->recompute_s[i];
  return t;
}

/* The in-window seconds of window set w, matched once per set (the brute
 * force meets each set many times); `served` holds -1 where not yet matched,
 * indexed by w's bits among the windowable ops. */
static double served_once(const lx_stage_problem *pr, lx_opmask w, double *served, int *window_of) {
  size_t key = 0;
  for (int i = 0, bit = 0; i < pr->n_ops; i++)
    if (pr->windowable[i]) key |= (size_t)((w >> i) & 1) << bit++;
  if (served[key] < 0) served[key] = lx_assign_windows(pr, w, window_of);
  return served[key];
}

/* The exposed time of decisions d with their window set's in-window
 * seconds, or -1 where they do not fit the device or the host. */
static double exposed_if_fits(const lx_stage_problem *pr, const lx_op_decision *d, double served) {
  lx_opmask rc, in_windows;
  lx_offload of;
  lx_decisions_to_masks(pr, d, &rc, &in_windows, &of);
  if (lx_policy_bytes(pr, d) > pr->avail_bytes || !lx_host_fits(pr, of)) return -1;
  return lx_exposed_of(pr, rc, served) + lx_offload_cost(pr, of);
}

/* Splits, tried: each op recomputed on demand that may be split, with each
 * number of pieces offloaded, in d; the least exposed time of those that fit
 * (or `best`; *split set where a split is better). */
static double best_split(const lx_stage_problem *pr, lx_op_decision *d, double served, double best,
                         bool *split) {
  for (int j = 0; j < pr->n_ops; j++) {
    if (!pr->splittable[j] || !d[j].recompute || d[j].in_window) continue;
    for (int k = 1; k < LX_TOKEN_PIECES; k++) {
      d[j].offload = true, d[j].host_pieces = k;
      double t = exposed_if_fits(pr, d, served);
      if (t >= 0 && (best < 0 || t < best * (1 - 1e-12))) best = t, *split = true;
    }
    d[j].offload = false, d[j].host_pieces = 0;
  }
  return best;
}

/* The best realised choice over every keep / on-demand / window / offload
 * assignment of the droppable ops that is valid and fits (offload where the
 * problem allows it: pr->host_bytes_per_s > 0), and over every token-wise
 * split of one of its on-demand ops (overlap.h); with `windows` false, only
 * keep / on demand. Returns the least exposed time, or -1 if nothing fits;
 * *split: whether the best choice splits an op (NULL: not asked). */
static double brute_force(const lx_stage_problem *pr, bool windows, bool *split) {
  int ops[64], n = 0, windowable = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    if (pr->drop_bytes[i] > 0) ops[n++] = i;
    windowable += pr->windowable[i];
  }
  int choices = !windows ? 2 : pr->host_bytes_per_s > 0 ? 4 : 3;
  long total = 1;
  for (int k = 0; k < n; k++)
    total *= choices;
  lx_op_decision *d = calloc((size_t)pr->n_ops, sizeof *d);
  int *window_of = malloc(sizeof(int) * lx_placement_entries(pr));
  double *served = malloc(sizeof(double) << windowable);
  for (size_t k = 0; k < (size_t)1 << windowable; k++)
    served[k] = -1;
  double best = -1;
  bool best_splits = false;
  for (long code = 0; code < total; code++) {
    memset(d, 0, sizeof *d * (size_t)pr->n_ops);
    long c = code;
    bool valid = true;
    for (int k = 0; k < n; k++, c /= choices) {
      int v = (int)(c % choices);
      d[ops[k]].drop_output = d[ops[k]].drop_internals = v == 1 || v == 2;
      d[ops[k]].in_window = v == 2;
      d[ops[k]].offload = v == 3;
      valid &= v != 3 || pr->offload_bytes[ops[k]] > 0;
    }
    lx_recompute_closure(pr->block, d);
    lx_opmask w = 0;
    for (int i = 0; i < pr->n_ops && valid; i++) {
      valid = !(d[i].offload && d[i].recompute);
      if (!d[i].in_window) continue;
      valid = pr->windowable[i] && d[i].recompute;
      w |= (lx_opmask)1 << i;
      for (int k = 0; valid && k < pr->block->ops[i].n_inputs; k++) {
        int j = pr->block->ops[i].inputs[k];
        if ((d[j].recompute && !d[j].in_window) || d[j].offload) valid = false; /* overlap.h */
      }
    }
    if (!valid || lx_policy_bytes(pr, d) > pr->avail_bytes) continue; /* a split takes more */
    double in_window = served_once(pr, w, served, window_of), t = exposed_if_fits(pr, d, in_window);
    if (t >= 0 && (best < 0 || t < best * (1 - 1e-12))) best = t, best_splits = false;
    if (windows && pr->host_bytes_per_s > 0) best = best_split(pr, d, in_window, best, &best_splits);
  }
  if (split) *split = best_splits;
  free(d);
  free(window_of);
  free(served);
  return best;
}

static double solve(const lx_ir *ir, lx_recompute_policy policy, const lx_stage_problem *pr,
                    lx_op_decision *d, bool *ok, lx_policy_stats *stats) {
  int *window_of = malloc(sizeof(int) * lx_placement_entries(pr));
  *ok = lx_policy_solve(ir, policy, pr, d, window_of, stats);
  double t = lx_policy_exposed(pr, d, window_of);
  free(window_of);
  return t;
}

static int recomputed_ops(const lx_stage_problem *pr, const lx_op_decision *d) {
  int n = 0;
  for (int i = 0; i < pr->n_ops; i++)
    n += d[i].recompute;
  return n;
}

/* The policies against brute force on one stage. `host_link` scales the
 * host link: 0 allows no offload; else copying the block's largest
 * offloadable op takes host_link x a layer's forward, so that offload is
 * free for small tensors and costs for large ones. */
static void check_policies(int tp, double host_link, int *optima_split) {
  bool costly = host_link < 0;
  host_link = fabs(host_link);
  lx_ir ir;
  CHECK(load(&ir, 2, 1, tp, 3, LX_SCHEDULE_1F1B), "tp=%d: the model loads", tp);
  lx_cost_model cm;
  lx_cost_model_init(&cm, &ir, NULL);
  lx_stage_problem pr;
  lx_stage_problem_init(&pr, &ir, &cm, 2, 2 * 3, 3, INT64_MAX); /* 3 micro-batches of 2 layers kept */
  int64_t largest = 0;
  for (int i = 0; i < pr.n_ops; i++)
    if (pr.offload_bytes[i] > largest) largest = pr.offload_bytes[i];
  pr.host_bytes_per_s = host_link > 0 ? (double)largest / (host_link * pr.layer_fwd_s) : 0;
  char mode[64] = "";
  if (host_link > 0)
    snprintf(mode, sizeof mode, " with offload%s (copies %.2f layers)", costly ? ", a costly op" : "",
             host_link);
  int splittable = -1; /* the largest */
  for (int i = 0; i < pr.n_ops; i++)
    if (pr.splittable[i] && (splittable < 0 || pr.offload_bytes[i] > pr.offload_bytes[splittable]))
      splittable = i;
  if (costly && splittable >= 0) { /* its whole copy outlasts host_link layers' forward */
    pr.recompute_s[splittable] = pr.layer_fwd_s;
    pr.host_bytes_per_s = (double)pr.offload_bytes[splittable] / (host_link * pr.layer_fwd_s);
  }
  lx_window w[8];
  hand_windows(&pr, w, 8, costly ? 0 : layer_recompute_s(&pr) * 0.3); /* costly: all on demand */
  lx_op_decision *d = calloc((size_t)pr.n_ops, sizeof *d);
  lx_policy_stats stats;
  bool ok;
  static const lx_recompute_policy planned[] = {LX_RECOMPUTE_CHECKMATE, LX_RECOMPUTE_LYNX_HEU,
                                                LX_RECOMPUTE_LYNX_OPT};
  for (int k = 0; k < 3; k++) {
    double t = solve(&ir, planned[k], &pr, d, &ok, &stats);
    CHECK(ok && t == 0 && recomputed_ops(&pr, d) == 0, "tp=%d%s unlimited memory: %s keeps everything", tp,
          mode, lx_recompute_policy_name(planned[k]));
  }
  /* budgets from everything-dropped to nearly everything kept */
  lx_op_decision *all = calloc((size_t)pr.n_ops, sizeof *all);
  lx_recompute_fixed(&ir, LX_RECOMPUTE_FULL, all);
  int64_t least = lx_policy_bytes(&pr, all), most = pr.stashed_layers * pr.kept_all;
  for (int step = 0; step <= 6; step++) {
    pr.avail_bytes = least + (most - least) * step / 7;
    double cm_t = solve(&ir, LX_RECOMPUTE_CHECKMATE, &pr, d, &ok, &stats);
    double cm_want = brute_force(&pr, false, NULL);
    CHECK(ok && lx_policy_bytes(&pr, d) <= pr.avail_bytes, "tp=%d%s budget %d/7: checkmate fits", tp, mode,
          step);
    CHECK_CLOSE(cm_t, cm_want, 1e-9, "tp=%d%s budget %d/7: checkmate is the brute-force optimum on demand",
                tp, mode, step);
    CHECK(!strncmp(stats.status, "optimal", 7) && stats.gap <= 1e-6,
          "tp=%d%s budget %d/7: checkmate's MILP reports it is optimal with no gap (%s, gap %g)", tp, mode,
          step, stats.status, stats.gap);
    double heu = solve(&ir, LX_RECOMPUTE_LYNX_HEU, &pr, d, &ok, &stats);
    CHECK(ok && lx_policy_bytes(&pr, d) <= pr.avail_bytes,
          "tp=%d%s budget %d/7: lynx-heu respects the budget", tp, mode, step);
    double opt = solve(&ir, LX_RECOMPUTE_LYNX_OPT, &pr, d, &ok, &stats);
    CHECK(ok && lx_policy_bytes(&pr, d) <= pr.avail_bytes,
          "tp=%d%s budget %d/7: lynx-opt is feasible (%s, gap %g)", tp, mode, step, stats.status, stats.gap);
    CHECK(opt <= heu * (1 + 1e-9) + 1e-15,
          "tp=%d%s budget %d/7: lynx-opt %.3g s no worse than lynx-heu %.3g s", tp, mode, step, opt, heu);
    CHECK(heu <= cm_t * (1 + 1e-9) + 1e-15,
          "tp=%d%s budget %d/7: lynx-heu %.3g s no worse than checkmate %.3g s", tp, mode, step, heu, cm_t);
    bool split;
    double best = brute_force(&pr, true, &split);
    if (split) {
      (*optima_split)++;
      solve(&ir, LX_RECOMPUTE_LYNX_HEU, &pr, d, &ok, &stats);
      bool heu_splits = false;
      for (int i = 0; i < pr.n_ops; i++)
        heu_splits |= lx_token_split(&d[i]);
      CHECK(heu_splits, "tp=%d%s budget %d/7: the optimum splits an op token-wise, and so does lynx-heu", tp,
            mode, step);
    }
    CHECK_CLOSE(
        heu, best, 1e-9,
        "tp=%d%s budget %d/7: lynx-heu, which scores every choice by its matching, is the brute-force "
        "optimum",
        tp, mode, step);
    CHECK(best >= 0 && opt <= best * 1.03 + 1e-12 && opt >= best * (1 - 1e-9) - 1e-15,
          "tp=%d%s budget %d/7: lynx-opt %.4g s within 3%% of the brute-force optimum %.4g s", tp, mode, step,
          opt, best);
  }
  /* The MILPs stop on work, not on the clock: allowed one simplex iteration,
   * checkmate's search stops wherever it must branch, and its plan still fits. */
  int stopped = 0;
  pr.work_limit = 1;
  for (int step = 0; step <= 6; step++) {
    pr.avail_bytes = least + (most - least) * step / 7;
    solve(&ir, LX_RECOMPUTE_CHECKMATE, &pr, d, &ok, &stats);
    stopped += !strcmp(stats.status, "feasible (work limit)") || !strcmp(stats.status, "no solution");
    CHECK(ok && lx_policy_bytes(&pr, d) <= pr.avail_bytes,
          "tp=%d%s budget %d/7, one simplex iteration: checkmate still fits (%s)", tp, mode, step,
          stats.status);
  }
  pr.work_limit = 0;
  CHECK(stopped > 0, "tp=%d%s: one simplex iteration stops checkmate's search (%d of 7 budgets)", tp, mode,
        stopped);
  /* windows of zero length and no offload: lynx-opt is checkmate */
  for (int k = 0; host_link == 0 && k < 8; k++)
    w[k].length = w[k].capacity = 0;
  for (int step = 0; host_link == 0 && step <= 6; step += 2) {
    pr.avail_bytes = least + (most - least) * step / 7;
    double cm_t = solve(&ir, LX_RECOMPUTE_CHECKMATE, &pr, d, &ok, &stats);
    double opt = solve(&ir, LX_RECOMPUTE_LYNX_OPT, &pr, d, &ok, &stats);
    CHECK_CLOSE(opt, cm_t, 1e-9, "tp=%d%s budget %d/7, zero-length windows: lynx-opt equals checkmate", tp,
                mode, step);
  }
  free(all);
  free(d);
  lx_stage_problem_free(&pr);
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
}

/* The window ops of w in op order. */
static int window_units(const lx_stage_problem *pr, lx_opmask w, int *units, double *secs) {
  int n = 0;
  for (int i = 0; i < pr->n_ops; i++)
    for (int k = 0; (w >> i) & 1 && k < pr->pieces[i]; k++)
      units[n] = lx_first_unit(pr, i) + k, secs[n++] = lx_unit_seconds(pr, i);
  return n;
}

static int *placed(const lx_stage_problem *pr, int *window_of, int inst, int unit) {
  return &window_of[(size_t)inst * (size_t)lx_stage_units(pr) + (size_t)unit];
}

/* The matching as first written, window by window over every window and
 * instance: each window gives its room to the admissible instances in the
 * order they are due, each taking its next ops (or pieces of them) while
 * they fit. The fast one (a sort per stage, windows in tiers by capacity,
 * stretches with nothing released skipped, a heap) must place exactly the
 * same ops. */
static double reference_assignment(const lx_stage_problem *pr, lx_opmask w, int *window_of) {
  int units[LX_MAX_PLACED], n, progress[64] = {0};
  double secs[LX_MAX_PLACED];
  n = window_units(pr, w, units, secs);
  bool taken[64];
  double served = 0;
  for (size_t e = 0; e + 1 < lx_placement_entries(pr); e++)
    window_of[e] = -1;
  for (int k = 0; k < pr->n_windows; k++) {
    int at = pr->windows[k].after;
    double left = pr->windows[k].capacity;
    memset(taken, 0, sizeof taken);
    for (;;) {
      int pick = -1;
      for (int i = 0; i < pr->n_instances; i++)
        if (!taken[i] && progress[i] < n && pr->lo[i] <= at && at < pr->due[i] &&
            (pick < 0 || pr->due[i] < pr->due[pick]))
          pick = i;
      if (pick < 0) break;
      taken[pick] = true;
      for (; progress[pick] < n && secs[progress[pick]] <= left * (1 + 1e-9); progress[pick]++) {
        left -= secs[progress[pick]];
        served += secs[progress[pick]];
        *placed(pr, window_of, pick, units[progress[pick]]) = k;
      }
    }
  }
  return served;
}

/* Whether a placement is one the schedule can run: each instance's window
 * ops (piece by piece) in windows of its admissible range, never decreasing
 * in op order, a prefix of them placed (the rest on demand), nothing else
 * placed, no window over its capacity. The in-window seconds it serves go
 * to *served. */
static bool placement_valid(const lx_stage_problem *pr, lx_opmask w, const int *window_of, double *served) {
  double used[256] = {0};
  bool ok = pr->n_windows <= 256;
  *served = 0;
  for (int i = 0; i < pr->n_instances; i++)
    for (int j = 0, last = 0, on_demand = 0; j < pr->n_ops; j++)
      for (int piece = 0; piece < pr->pieces[j]; piece++) {
        int k = *placed(pr, (int *)window_of, i, lx_first_unit(pr, j) + piece);
        if (!((w >> j) & 1)) {
          ok &= k < 0;
          continue;
        }
        if (k < 0) {
          on_demand = 1;
          continue;
        }
        ok &= !on_demand && k >= last && k < pr->n_windows && pr->windows[k].after >= pr->lo[i] &&
              pr->windows[k].after < pr->due[i];
        last = k;
        used[k] += lx_unit_seconds(pr, j);
        *served += lx_unit_seconds(pr, j);
      }
  for (int k = 0; k < pr->n_windows && ok; k++)
    ok &= used[k] <= pr->windows[k].capacity * (1 + 1e-9);
  return ok;
}

static unsigned next_random(unsigned *state) {
  *state = *state * 1103515245u + 12345u;
  return (*state >> 8) & 0xffffff;
}

/* The block's window-capable ops, up to `most` of them, from the first. */
static lx_opmask first_window_ops(const lx_stage_problem *pr, int most) {
  lx_opmask w = 0;
  for (int i = 0; i < pr->n_ops && most > 0; i++)
    if (pr->windowable[i] && pr->recompute_s[i] > 0) w |= (lx_opmask)1 << i, most--;
  return w;
}

/* Whether instance i's ops (or pieces) run in more than one window. */
static bool spans_windows(const lx_stage_problem *pr, const int *window_of, int i) {
  int first = -1;
  for (int u = 0; u < lx_stage_units(pr); u++) {
    int k = *placed(pr, (int *)window_of, i, u);
    if (k >= 0 && first >= 0 && k != first) return true;
    if (k >= 0) first = k;
  }
  return false;
}

/* Random windows (many far shorter than any op, as tensor-parallel
 * all-reduces are, and some long) and instances with distinct deadlines. */
static void check_assignment_random(const lx_ir *ir, const lx_cost_model *cm) {
  lx_stage_problem pr;
  lx_stage_problem_init(&pr, ir, cm, 2, 2 * 3, 3, INT64_MAX); /* 3 micro-batches of 2 layers kept */
  double min_s = 0;
  for (int i = 0; i < pr.n_ops; i++)
    if (pr.windowable[i] && pr.recompute_s[i] > 0 && (min_s == 0 || pr.recompute_s[i] < min_s))
      min_s = pr.recompute_s[i];
  enum { N = 60, W = 200 };
  lx_window w[W];
  int lo[N], due[N], same = 0, cases = 0, valid = 0, split = 0, bounded = 0, below_all = 0;
  size_t most_entries = (size_t)N * (size_t)(pr.n_ops + 3) + 1;
  int *fast = malloc(sizeof(int) * most_entries), *slow = malloc(sizeof(int) * most_entries);
  double served = 0;
  unsigned seed = 7;
  pr.lo = realloc(pr.lo, sizeof lo), pr.due = realloc(pr.due, sizeof due);
  for (int c = 0; c < 200; c++, cases++) {
    for (int k = 0; k < W; k++) {
      double size =
          next_random(&seed) % 4 ? 0.3 * (next_random(&seed) % 100) / 100 : 1 + next_random(&seed) % 20;
      w[k] = (lx_window){.kind = LX_WINDOW_TP_BACKWARD, .after = k * 3, .capacity = min_s * size};
    }
    for (int i = 0; i < N; i++) {
      due[i] = 3 * W * i / N + 1 + (int)(next_random(&seed) % 2); /* distinct, increasing */
      lo[i] = due[i] - 1 - (int)(next_random(&seed) % (c % 2 ? 40 : 400));
    }
    memcpy(pr.lo, lo, sizeof lo), memcpy(pr.due, due, sizeof due);
    pr.windows = w, pr.n_windows = W, pr.n_instances = N;
    lx_opmask ops = first_window_ops(&pr, 1 + (int)(next_random(&seed) % 5));
    int cut = __builtin_ctzll(ops); /* in a third of the cases in 2 or 4 pieces (a head split) */
    pr.pieces[cut] = c % 3 == 0 ? 1 : c % 3 == 1 ? 2 : 4;
    size_t entries = lx_placement_entries(&pr) - 1;
    double got = lx_assign_windows(&pr, ops, fast), want = reference_assignment(&pr, ops, slow), check;
    same += fabs(got - want) <= 1e-12 * want && !memcmp(fast, slow, sizeof(int) * entries);
    valid += placement_valid(&pr, ops, fast, &check) && fabs(check - got) <= 1e-9 * got;
    for (int i = 0; i < N; i++)
      split += spans_windows(&pr, fast, i);
    served += got;
    lx_window_room room = lx_window_room_init(&pr); /* lynx-heu's bound on what the matching serves */
    double most = lx_most_served(&pr, &room, ops);
    bounded += most >= got * (1 - 1e-12);
    below_all += most < N * lx_seconds_of(&pr, ops) * (1 - 1e-9);
    lx_window_room_free(&room);
    pr.pieces[cut] = 1;
  }
  CHECK(same == cases && valid == cases && served > 0 && split > 0,
        "window placement equals the plain earliest-deadline-first matching on %d random cases, an op in 2 "
        "or 4 "
        "pieces in two thirds (%d agree, %d "
        "valid, %.3g s served, %d instances spread over several windows)",
        cases, same, valid, served, split);
  CHECK(bounded == cases && below_all > 0,
        "the bound lynx-heu prunes window sets by is at least what the matching serves on all %d cases (%d), "
        "and below every instance's window ops in %d",
        cases, bounded, below_all);
  free(fast);
  free(slow);
  pr.windows = NULL, pr.n_windows = 0;
  lx_stage_problem_free(&pr);
}

/* The most in-window seconds any valid placement of the n jobs of secs
 * (w's ops, or their pieces, in order) serves: exhaustive over each
 * instance's prefix and non-decreasing windows. */
static double best_placement(const lx_stage_problem *pr, const double *secs, int n, int inst, int j, int from,
                             double *left) {
  if (inst == pr->n_instances) return 0;
  double best = best_placement(pr, secs, n, inst + 1, 0, 0, left); /* the rest on demand */
  if (j == n) return best;
  double s = secs[j];
  for (int k = from; k < pr->n_windows; k++) {
    int at = pr->windows[k].after;
    if (at < pr->lo[inst] || at >= pr->due[inst] || s > left[k] * (1 + 1e-9)) continue;
    left[k] -= s;
    double got = s + best_placement(pr, secs, n, inst, j + 1, k, left);
    left[k] += s;
    if (got > best) best = got;
  }
  return best;
}

/* The most instances whole placements serve (each instance's ops in one
 * window, of s seconds in all): exhaustive. */
static int best_whole(const lx_stage_problem *pr, double s, int inst, double *left) {
  if (inst == pr->n_instances) return 0;
  int best = best_whole(pr, s, inst + 1, left); /* on demand */
  for (int k = 0; k < pr->n_windows; k++) {
    int at = pr->windows[k].after;
    if (at < pr->lo[inst] || at >= pr->due[inst] || s > left[k] * (1 + 1e-9)) continue;
    left[k] -= s;
    int n = 1 + best_whole(pr, s, inst + 1, left);
    left[k] += s;
    if (n > best) best = n;
  }
  return best;
}

/* Op times of the block's first n window ops set to `times` (ops of equal
 * length, or not). */
static lx_opmask with_op_times(lx_stage_problem *pr, int n, const double *times) {
  lx_opmask w = first_window_ops(pr, n);
  for (int i = 0, j = 0; i < pr->n_ops; i++)
    if ((w >> i) & 1) pr->recompute_s[i] = times[j++];
  return w;
}

/* A head-split op (lx_stage_problem.pieces): an op of 4 s cut into 4
 * pieces of 1 s, beside ops of 1 s, in windows of 1-3 s. Unit jobs again,
 * so the matching serves the exhaustive best; whole, the op fits no window,
 * and the ops after it (placed in op order) none either. */
static void check_head_pieces(lx_stage_problem *pr, int *window_of) {
  static const double times[] = {4, 1, 1};
  for (int n = 1; n <= 3; n++) {
    lx_opmask ops_w = with_op_times(pr, n, times);
    int first = __builtin_ctzll(ops_w), units[LX_MAX_PLACED], k;
    double whole = lx_assign_windows(pr, ops_w, window_of), secs[LX_MAX_PLACED], left[8], check;
    pr->pieces[first] = 4;
    int *cut = malloc(sizeof(int) * lx_placement_entries(pr));
    k = window_units(pr, ops_w, units, secs);
    for (int j = 0; j < pr->n_windows; j++)
      left[j] = pr->windows[j].capacity;
    double want = best_placement(pr, secs, k, 0, 0, 0, left), got = lx_assign_windows(pr, ops_w, cut);
    bool valid = placement_valid(pr, ops_w, cut, &check) && fabs(check - got) <= 1e-9 * got;
    int spread = 0;
    for (int i = 0; i < pr->n_instances; i++)
      spread += spans_windows(pr, cut, i);
    CHECK(valid && whole == 0 && got > 0 && fabs(got - want) <= 1e-9 * want && spread > 0,
          "%d ops of 4 s (in 4 pieces of its heads), 1 s, 1 s (windows of 1-3 s): the placement is valid and "
          "serves the exhaustive best %.3g s (%.3g s; whole, nothing), %d instances over several windows",
          k - 3, want, got, spread);
    lx_window_room room = lx_window_room_init(pr);
    double most = lx_most_served(pr, &room, ops_w);
    CHECK(most >= got * (1 - 1e-12),
          "with %d ops, one in 4 pieces: lynx-heu's bound %.3g s is at least what "
          "the matching serves (%.3g s)",
          k - 3, most, got);
    lx_window_room_free(&room);
    pr->pieces[first] = 1;
    free(cut);
  }
}

/* Against exhaustive placement on a small case: ops of one length (unit
 * jobs: earliest deadline first is optimal, split or not), and of lengths
 * that do not divide the windows, where the matching still serves at least
 * what whole instances (one window each) could. */
static void check_assignment(void) {
  lx_ir ir;
  load(&ir, 2, 1, 2, 3, LX_SCHEDULE_1F1B);
  lx_cost_model cm;
  lx_cost_model_init(&cm, &ir, NULL);
  lx_stage_problem pr;
  lx_stage_problem_init(&pr, &ir, &cm, 2, 2 * 3, 3, INT64_MAX); /* 3 micro-batches of 2 layers kept */
  lx_window w[8];
  hand_windows(&pr, w, 8, 1);
  int *window_of = malloc(sizeof(int) * lx_placement_entries(&pr));
  static const double shapes[][3] = {{1, 1, 1},      {0.5, 0.5, 0.5}, {1.5, 1.5, 1.5}, {0.5, 1, 0.25},
                                     {1.25, 0.5, 1}, {2, 0.75, 0.5},  {0.75, 1.5, 2.5}};
  for (int c = 0; c < 7; c++)
    for (int n = 1; n <= 3; n++) {
      lx_opmask ops_w = with_op_times(&pr, n, shapes[c]);
      int units[LX_MAX_PLACED], k;
      double secs[LX_MAX_PLACED], left[8], whole_left[8], s = 0;
      k = window_units(&pr, ops_w, units, secs);
      for (int j = 0; j < 8; j++)
        left[j] = whole_left[j] = w[j].capacity;
      for (int j = 0; j < k; j++)
        s += secs[j];
      double want = best_placement(&pr, secs, k, 0, 0, 0, left),
             got = lx_assign_windows(&pr, ops_w, window_of), check;
      bool valid = placement_valid(&pr, ops_w, window_of, &check) && fabs(check - got) <= 1e-9 * got;
      bool equal_ops = c < 3 || k == 1;
      double whole = s * best_whole(&pr, s, 0, whole_left);
      CHECK(valid && got <= want * (1 + 1e-9) && got >= whole * (1 - 1e-9) &&
                (!equal_ops || got >= want * (1 - 1e-9)),
            "%d ops of %.2f, %.2f, %.2f s (windows of 1-3 s): the placement is valid and serves %.3g s, at "
            "most the exhaustive best %.3g s%s and at least what whole instances could (%.3g s)",
            k, shapes[c][0], k > 1 ? shapes[c][1] : 0, k > 2 ? shapes[c][2] : 0, got, want,
            equal_ops ? " (equal ops: all of it)" : "", whole);
    }
  check_head_pieces(&pr, window_of);
  check_assignment_random(&ir, &cm);
  free(window_of);
  lx_stage_problem_free(&pr);
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
}

/* ---- the partition DP ---------------------------------------------------------------- */

typedef struct {
  double table[8][17]; /* [stage][count]; < 0: does not fit */
  int asked[8][17];    /* how often the DP asked for each */
} cost_table;

static double table_cost(void *ctx, int stage, int count) {
  cost_table *t = ctx;
  t->asked[stage][count]++;
  return t->table[stage][count];
}

/* The least bottleneck over every split of [first, layers) into stages [stage, pp). */
static double exhaustive(lx_stage_cost_fn cost, void *ctx, int layers, int pp, int stage, int first) {
  if (stage == pp) return first == layers ? 0 : -1;
  double best = -1;
  for (int count = 1; first + count <= layers - (pp - stage - 1); count++) {
    double c = cost(ctx, stage, count);
    double rest = c < 0 ? -1 : exhaustive(cost, ctx, layers, pp, stage + 1, first + count);
    if (rest < 0) continue;
    double b = c > rest ? c : rest;
    if (best < 0 || b < best) best = b;
  }
  return best;
}

static void check_partition(void) {
  cost_table *t = malloc(sizeof *t);
  srand(7);
  for (int trial = 0; trial < 20; trial++) {
    int layers = 6 + trial % 9, pp = 2 + trial % 5;
    for (int s = 0; s < 8; s++)
      for (int c = 0; c < 17; c++)
        t->table[s][c] = rand() % 10 == 0 ? -1 : c * (1 + s % 3) + (rand() % 100) / 37.0;
    memset(t->asked, 0, sizeof t->asked);
    int first[9];
    double dp = lx_partition_dp(layers, pp, table_cost, t, first);
    int most_asked = 0;
    for (int s = 0; s < 8; s++)
      for (int c = 0; c < 17; c++)
        most_asked = t->asked[s][c] > most_asked ? t->asked[s][c] : most_asked;
    CHECK(most_asked == 1, "%d layers on %d stages: the DP asks each stage's cost of a count once (most: %d)",
          layers, pp, most_asked);
    double want = exhaustive(table_cost, t, layers, pp, 0, 0);
    double achieved = 0;
    for (int s = 0; dp >= 0 && s < pp; s++) {
      double c = table_cost(t, s, first[s + 1] - first[s]);
      if (c > achieved) achieved = c;
    }
    CHECK(dp == want && (dp < 0 || (achieved == dp && first[0] == 0 && first[pp] == layers)),
          "random costs, %d layers on %d stages: DP bottleneck %g = exhaustive %g", layers, pp, dp, want);
  }
  free(t);
  /* the recompute-aware cost of a real model, squeezed so that stages differ */
  lx_ir ir;
  load(&ir, 10, 4, 2, 8, LX_SCHEDULE_1F1B);
  lx_cost_model cm;
  lx_cost_model_init(&cm, &ir, NULL);
  for (int k = 0; k < 3; k++) {
    lx_recompute_policy pol = k == 0 ? LX_RECOMPUTE_CHECKMATE : LX_RECOMPUTE_LYNX_HEU;
    lx_partition_model m;
    lx_partition_model_init(&m, &ir, &cm, pol);
    int64_t per_layer = m.static_per_layer + 4 * ir.block.activation_bytes;
    m.capacity = m.reserve_middle + m.static_prologue + m.static_epilogue + (k + 3) * per_layer;
    int first[5];
    double dp = lx_partition_dp(10, 4, lx_partition_stage_cost, &m, first);
    double want = exhaustive(lx_partition_stage_cost, &m, 10, 4, 0, 0);
    CHECK(dp == want,
          "%s, capacity %d layers' worth: DP bottleneck %.6g s = exhaustive %.6g s (split %d %d %d %d)",
          lx_recompute_policy_name(pol), k + 3, dp, want, first[1] - first[0], first[2] - first[1],
          first[3] - first[2], first[4] - first[3]);
    lx_partition_model_free(&m);
  }
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
}

/* Prefetches priced per instance: half the instances have no room before
 * their backward (a layer's forward has just overwritten the window buffer,
 * as at the top of a 1F1B stage), half two layers' backward. A copy shorter
 * than a layer's backward hides in it (what lynx-opt priced before) but
 * stalls every instance without room. lynx-opt's MILP, which prices the
 * copies as lx_offload_cost does, finds the brute-force optimum itself at
 * every budget and host link (an MILP that saw those copies as free would
 * offload where recomputing is cheaper). */
static void check_opt_prefetch_rooms(void) {
  lx_ir ir;
  CHECK(load(&ir, 2, 1, 1, 3, LX_SCHEDULE_1F1B), "the model loads");
  lx_cost_model cm;
  lx_cost_model_init(&cm, &ir, NULL);
  lx_stage_problem pr;
  lx_stage_problem_init(&pr, &ir, &cm, 2, 2 * 3, 3, INT64_MAX);
  int64_t largest = 0;
  for (int i = 0; i < pr.n_ops; i++)
    if (pr.offload_bytes[i] > largest) largest = pr.offload_bytes[i];
  lx_window w[8];
  hand_windows(&pr, w, 8, 0); /* no window time: everything recomputed runs on demand */
  pr.room_s = malloc(sizeof(double) * 6);
  for (int i = 0; i < 6; i++)
    pr.room_s[i] = i < 3 ? 0 : 2 * pr.layer_bwd_s;
  pr.room_below = lx_sorted_sums(pr.room_s, 6, false);
  lx_op_decision *d = calloc((size_t)pr.n_ops, sizeof *d), *all = calloc((size_t)pr.n_ops, sizeof *all);
  lx_recompute_fixed(&ir, LX_RECOMPUTE_FULL, all);
  int64_t least = lx_policy_bytes(&pr, all), most = pr.stashed_layers * pr.kept_all;
  int optimal = 0, cases = 0, offloading = 0;
  for (int link = 0; link < 4; link++) /* the largest op's copy takes 1/8 to 1 layer's backward */
    for (int step = 1; step <= 6; step++, cases++) {
      pr.host_bytes_per_s = (double)largest / (pr.layer_bwd_s / (1 << (3 - link)));
      pr.avail_bytes = least + (most - least) * step / 7;
      lx_policy_stats stats;
      bool ok;
      double best = brute_force(&pr, true, NULL);
      solve(&ir, LX_RECOMPUTE_LYNX_OPT, &pr, d, &ok, &stats);
      optimal += ok && fabs(stats.milp_s - best) <= 1e-9 * best + 1e-15;
      for (int i = 0; i < pr.n_ops; i++)
        offloading += d[i].offload;
    }
  CHECK(optimal == cases && offloading > 0,
        "copies priced per instance's room: lynx-opt's MILP alone is the brute-force optimum in %d of %d "
        "cases (%d offloaded ops over them)",
        optimal, cases, offloading);
  free(d);
  free(all);
  free_hand_problem(&pr, &cm, &ir);
}

/* lynx_model.h's GPT whose feed-forward is a chain of three equal linear + gelu pairs. */
static const char *twin_model_text =
    "#include <lynx.h>\n"
    "#define H 128\n"
    "static const struct lx_model model = {.vocab = 256, .seq_len = 64, .layers = 8, .hidden = H, .heads = "
    "4};\n"
    "static const struct lx_cluster cluster = {.gpu = GPU_A100_80GB, .nodes = 4, .gpus_per_node = 8};\n"
    "static const struct lx_parallel parallel = {.micro_batch = 2};\n"
    "tensor prologue(tensor t) { return add(embedding(t, 256, H), position_embedding(t, H)); }\n"
    "tensor block(tensor x) {\n"
    "  tensor h = gelu(linear(layernorm(x), 2 * H));\n"
    "  h = gelu(linear(h, 2 * H));\n"
    "  h = gelu(linear(h, 2 * H));\n"
    "  return add(x, linear(h, H));\n"
    "}\n"
    "tensor epilogue(tensor x, tensor y) { return cross_entropy(lm_head(layernorm(x), 256), y); }\n";

/* Ops that are interchangeable to the offload search: three equal linear + gelu pairs.
 * Leaving one out of an offload cover, lynx-heu's search leaves out its twins after it
 * (a cover with a later twin instead is no better); it still finds the brute-force
 * optimum at every budget and host link, and offloads in some. */
static void check_twin_offload(void) {
  lx_ir ir;
  CHECK(load_text(&ir, twin_model_text, 2, 1, 1, 3, LX_SCHEDULE_1F1B), "the model with twin ops loads");
  lx_cost_model cm;
  lx_cost_model_init(&cm, &ir, NULL);
  lx_stage_problem pr;
  lx_stage_problem_init(&pr, &ir, &cm, 2, 2 * 3, 3, INT64_MAX);
  int64_t largest = 0;
  int twins = 0;
  for (int i = 0; i < pr.n_ops; i++) {
    if (pr.offload_bytes[i] > largest) largest = pr.offload_bytes[i];
    for (int j = i + 1; j < pr.n_ops; j++)
      twins += pr.offload_bytes[i] > 0 && pr.offload_bytes[i] == pr.offload_bytes[j] &&
               pr.drop_bytes[i] == pr.drop_bytes[j];
  }
  CHECK(twins >= 3, "the block has ops of equal copy and gain (%d pairs)", twins);
  lx_window w[8];
  hand_windows(&pr, w, 8, 0); /* no window time: what is not kept or offloaded runs on demand */
  lx_op_decision *d = calloc((size_t)pr.n_ops, sizeof *d), *all = calloc((size_t)pr.n_ops, sizeof *all);
  lx_recompute_fixed(&ir, LX_RECOMPUTE_FULL, all);
  int64_t least = lx_policy_bytes(&pr, all), most = pr.stashed_layers * pr.kept_all;
  int offloading = 0;
  for (int link = 0; link < 2; link++) /* the largest op's copy takes 1/4 or 1 layer's backward */
    for (int step = 1; step <= 5; step += 2) {
      pr.host_bytes_per_s = (double)largest / (pr.layer_bwd_s / (link ? 1 : 4));
      pr.avail_bytes = least + (most - least) * step / 7;
      lx_policy_stats stats;
      bool ok;
      double heu = solve(&ir, LX_RECOMPUTE_LYNX_HEU, &pr, d, &ok, &stats);
      double best = brute_force(&pr, true, NULL);
      for (int i = 0; i < pr.n_ops; i++)
        offloading += d[i].offload;
      CHECK(ok && lx_policy_bytes(&pr, d) <= pr.avail_bytes,
            "twin ops, link %d, budget %d/7: lynx-heu respects the budget", link, step);
      CHECK_CLOSE(heu, best, 1e-9, "twin ops, link %d, budget %d/7: lynx-heu is the brute-force optimum",
                  link, step);
    }
  CHECK(offloading > 0, "twin ops: lynx-heu offloads at some budgets (%d ops over them)", offloading);
  free(d);
  free(all);
  free_hand_problem(&pr, &cm, &ir);
}

int main(void) {
  int optima_split = 0;
  for (int tp = 1; tp <= 2; tp++) {
    check_policies(tp, 0, &optima_split);
    check_policies(tp, 0.5, &optima_split); /* the largest op's copies hide behind half a layer */
    check_policies(tp, 3, &optima_split);   /* ... cost two layers' forward, more than the backward */
    /* the largest op that may split costs a layer's forward, its copies 1.5 and 2.5 layers; no windows */
    check_policies(tp, -1.5, &optima_split);
    check_policies(tp, -2.5, &optima_split);
  }
  CHECK(optima_split > 0, "the brute-force optimum splits an op token-wise at %d of the budgets",
        optima_split);
  check_opt_prefetch_rooms();
  check_twin_offload();
  check_assignment();
  check_partition();
  return check_exit_status();
}
