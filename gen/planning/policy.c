/* policy.c — which ops of a stage's layers to keep, recompute on demand or
 * recompute in a window: checkmate, lynx-heu and lynx-opt (see lynx.h for
 * the model they share).
 *
 * Choices are per op and the same for every layer of a stage (a stage's
 * layers are identical, and the static layout gives each op one place per
 * layer). A recompute of an op drops everything it saves: the op runs
 * anyway, so keeping part of it only costs memory. That makes the
 * op-level choice exact for checkmate's tensor-level question too.
 * stage_problem.c holds the problem, its sets of ops and the window matching
 * that every policy is measured by. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <glpk.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "planning/passes.h"
#include "planning/stage_problem.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- a choice, and how to compare two ---------------------------------------- */

typedef struct {
  lx_opmask rc, w, of; /* recomputed, of them in windows; offloaded */
  double exposed;
  bool valid;
} choice;

static int compare_choices(const lx_stage_problem *pr, const choice *a, const choice *b) {
  if (a->valid != b->valid) return a->valid ? -1 : 1;
  double scale = a->exposed > b->exposed ? a->exposed : b->exposed;
  if (a->exposed < b->exposed - 1e-12 * scale) return -1;
  if (b->exposed < a->exposed - 1e-12 * scale) return 1;
  double ra = lx_seconds_of(pr, a->rc), rb = lx_seconds_of(pr, b->rc);
  if (ra != rb) return ra < rb ? -1 : 1;
  int64_t oa = lx_offloaded_bytes(pr, a->of), ob = lx_offloaded_bytes(pr, b->of);
  if (oa != ob) return oa < ob ? -1 : 1;
  int64_t ma = lx_memory_of(pr, a->rc, a->w, a->of), mb = lx_memory_of(pr, b->rc, b->w, b->of);
  return (ma > mb) - (ma < mb);
}

static bool fits(const lx_stage_problem *pr, lx_opmask rc, lx_opmask w, lx_opmask of) {
  return lx_memory_of(pr, rc, w, of) <= pr->avail_bytes && lx_host_fits(pr, of);
}

/* The choice with its windows assigned for real. */
static choice realize(const lx_matcher *m, lx_opmask rc, lx_opmask w, lx_opmask of, int *window_of) {
  const lx_stage_problem *pr = m->pr;
  double served = lx_match_windows(m, w, window_of);
  return (choice){rc, w, of, lx_exposed_of(pr, rc, served) + lx_offload_stall(pr, of), fits(pr, rc, w, of)};
}

/* ---- offload: the fewest bytes that make a choice fit --------------------------------- */

/* What offloading op i saves on the device: its stash in every stashed layer, less its
 * place in the window buffers. */
static int64_t offload_gain(const lx_stage_problem *pr, int i) {
  return pr->stashed_layers * pr->drop_bytes[i] - (int64_t)pr->window_buffers * pr->offload_bytes[i];
}

/* The offloadable ops that gain memory, largest copy first (*n of them). */
static int *offload_candidates(const lx_stage_problem *pr, int *n) {
  int *ops = lx_malloc(sizeof(int) * (size_t)(pr->n_ops + 1));
  *n = 0;
  for (int i = 0; pr->host_bytes_per_s > 0 && i < pr->n_ops; i++)
    if (pr->offload_bytes[i] > 0 && offload_gain(pr, i) > 0) ops[(*n)++] = i;
  for (int a = 1; a < *n; a++)
    for (int b = a; b > 0 && pr->offload_bytes[ops[b]] > pr->offload_bytes[ops[b - 1]]; b--) {
      int t = ops[b];
      ops[b] = ops[b - 1];
      ops[b - 1] = t;
    }
  return ops;
}

/* The offload set, among the ops rc does not recompute, that makes (rc, w) fit the device
 * with the fewest bytes copied (the copies' cost grows with their bytes alone): none where it
 * fits already; else the better of the smallest op that closes the deficit alone and the
 * largest-first greedy cover pruned smallest-first. False where nothing closes it. */
static bool cover_deficit(const lx_stage_problem *pr, const int *ops, int n, lx_opmask rc, lx_opmask w,
                          lx_opmask *of) {
  *of = 0;
  int64_t deficit = lx_memory_of(pr, rc, w, 0) - pr->avail_bytes, gained = 0;
  if (deficit <= 0) return true;
  lx_opmask single = 0, greedy = 0;
  for (int k = 0; k < n; k++) {
    int i = ops[k];
    if ((rc >> i) & 1) continue;
    if (offload_gain(pr, i) >= deficit) single = (lx_opmask)1 << i; /* the last such is the smallest */
    if (gained < deficit) greedy |= (lx_opmask)1 << i, gained += offload_gain(pr, i);
  }
  if (gained < deficit) return false;
  for (int k = n - 1; k >= 0; k--) {
    int i = ops[k];
    if (((greedy >> i) & 1) && gained - offload_gain(pr, i) >= deficit)
      greedy &= ~((lx_opmask)1 << i), gained -= offload_gain(pr, i);
  }
  *of = single && lx_offloaded_bytes(pr, single) < lx_offloaded_bytes(pr, greedy) ? single : greedy;
  return lx_host_fits(pr, *of);
}

/* Everything that can be dropped: the last resort. */
static lx_opmask drop_everything(const lx_stage_problem *pr) {
  lx_opmask rc = 0;
  for (int i = 0; i < pr->n_ops; i++)
    if (pr->drop_bytes[i] > 0) rc |= (lx_opmask)1 << i;
  return lx_close_recompute(pr, rc);
}

/* ---- lynx-heu ---------------------------------------------------------------------- */

enum { MAX_ENUM_OPS = 16, MAX_ENUM_WINDOW_OPS = 10 };

/* The in-window seconds the matching serves, per window set: many recompute
 * sets share one (a matching walks every window it could use). Open
 * addressing on the set's bits. */
typedef struct {
  const lx_matcher *m;
  lx_opmask *keys;
  double *served;
  bool *used;
  int cap, n;
} served_memo;

static served_memo memo_init(const lx_matcher *m, int cap) {
  served_memo memo = {.m = m, .cap = cap};
  memo.keys = lx_calloc((size_t)memo.cap, sizeof *memo.keys);
  memo.served = lx_calloc((size_t)memo.cap, sizeof *memo.served);
  memo.used = lx_calloc((size_t)memo.cap, sizeof *memo.used);
  return memo;
}

static void memo_free(served_memo *memo) {
  free(memo->keys);
  free(memo->served);
  free(memo->used);
}

static int memo_slot(const served_memo *memo, lx_opmask w) {
  uint64_t h = w * 0x9e3779b97f4a7c15ull;
  int k = (int)(h >> 40) & (memo->cap - 1);
  while (memo->used[k] && memo->keys[k] != w)
    k = (k + 1) & (memo->cap - 1);
  return k;
}

static void memo_grow(served_memo *memo) {
  served_memo bigger = memo_init(memo->m, 2 * memo->cap);
  bigger.n = memo->n;
  for (int k = 0; k < memo->cap; k++)
    if (memo->used[k]) {
      int at = memo_slot(&bigger, memo->keys[k]);
      bigger.used[at] = true, bigger.keys[at] = memo->keys[k], bigger.served[at] = memo->served[k];
    }
  memo_free(memo);
  *memo = bigger;
}

static double served_of(served_memo *memo, lx_opmask w) {
  if (!w) return 0;
  int k = memo_slot(memo, w);
  if (memo->used[k]) return memo->served[k];
  double served = lx_match_windows(memo->m, w, NULL);
  memo->used[k] = true, memo->keys[k] = w, memo->served[k] = served;
  if (2 * ++memo->n > memo->cap) memo_grow(memo);
  return served;
}

/* The ops lynx-heu may offload, largest first. */
typedef struct {
  int *ops, n;
} offload_ops;

/* Every chain-closed window subset of one recompute set that fits (with the
 * offload that closes its deficit), scored by the matching. A set whose
 * windows could not beat the best so far even if they served all of it (its
 * on-demand part and its copies alone are as slow) is not matched: the
 * exposed time only grows from that bound, with the same tie-breaks. */
static void consider_windows(const lx_stage_problem *pr, served_memo *memo, const offload_ops *off,
                             lx_opmask rc, choice *best) {
  lx_opmask cand = pr->n_windows ? lx_window_candidates(pr, rc) : 0;
  int n_cand = __builtin_popcountll(cand);
  double n = (double)pr->n_layers * pr->micro_batches;
  for (lx_opmask w = cand;; w = (w - 1) & cand) {
    bool enumerable = n_cand <= MAX_ENUM_WINDOW_OPS || w == cand || w == 0;
    lx_opmask of;
    if (enumerable && lx_window_closed(pr, rc, w) && cover_deficit(pr, off->ops, off->n, rc, w, &of)) {
      double copies = lx_offload_stall(pr, of);
      choice bound = {rc, w, of, n * lx_seconds_of(pr, rc & ~w) + copies, true};
      if (compare_choices(pr, &bound, best) < 0) {
        choice c = {rc, w, of, lx_exposed_of(pr, rc, served_of(memo, w)) + copies, true};
        if (compare_choices(pr, &c, best) < 0) *best = c;
      }
    }
    if (w == 0) break;
  }
}

/* Ops worth dropping, cheapest recompute per byte first. */
static int droppable_ops(const lx_stage_problem *pr, int *ops) {
  int n = 0;
  for (int i = 0; i < pr->n_ops; i++)
    if (pr->drop_bytes[i] > 0) ops[n++] = i;
  for (int a = 1; a < n; a++)
    for (int b = a; b > 0; b--) {
      double x = pr->recompute_s[ops[b]] / (double)pr->drop_bytes[ops[b]];
      double y = pr->recompute_s[ops[b - 1]] / (double)pr->drop_bytes[ops[b - 1]];
      if (x >= y) break;
      int t = ops[b];
      ops[b] = ops[b - 1];
      ops[b - 1] = t;
    }
  return n;
}

/* One layer decides for all: every subset of the droppable ops (or, for
 * unusually large blocks, the prefixes by recompute time per byte), every
 * window subset of each, each with the offload that makes it fit and scored
 * by the matching of its window set and its copies; the best is assigned to
 * windows for real. Nothing fits: drop everything (the repair), and report it. */
static bool solve_heu(const lx_stage_problem *pr, lx_op_decision *d, int *window_of) {
  int *ops = lx_malloc(sizeof(int) * (size_t)pr->n_ops);
  int n = droppable_ops(pr, ops);
  offload_ops off;
  off.ops = offload_candidates(pr, &off.n);
  lx_matcher m = lx_matcher_init(pr);
  served_memo memo = memo_init(&m, 256);
  lx_opmask all = drop_everything(pr);
  choice best = {all, 0, 0, lx_exposed_of(pr, all, 0), fits(pr, all, 0, 0)};
  bool enumerate = n <= MAX_ENUM_OPS;
  uint64_t subsets = enumerate ? (uint64_t)1 << n : (uint64_t)n + 1;
  for (uint64_t k = 0; k < subsets; k++) {
    lx_opmask rc = 0, of;
    for (int j = 0; j < n; j++)
      if (enumerate ? (k >> j) & 1 : (uint64_t)j < k) rc |= (lx_opmask)1 << ops[j];
    rc = lx_close_recompute(pr, rc);
    if (cover_deficit(pr, off.ops, off.n, rc, 0, &of)) consider_windows(pr, &memo, &off, rc, &best);
  }
  free(ops);
  free(off.ops);
  realize(&m, best.rc, best.w, best.of, window_of);
  memo_free(&memo);
  lx_matcher_free(&m);
  lx_masks_to_decisions(pr, best.rc, best.w, best.of, d);
  return best.valid;
}

/* ---- GLPK ------------------------------------------------------------------------------ */

typedef struct {
  int *ia, *ja;
  double *ar;
  int n, cap;
} triplets;

static void put(triplets *t, int row, int col, double v) {
  if (t->n + 1 >= t->cap) {
    t->cap = t->cap ? 2 * t->cap : 256;
    t->ia = lx_realloc(t->ia, sizeof(int) * (size_t)t->cap);
    t->ja = lx_realloc(t->ja, sizeof(int) * (size_t)t->cap);
    t->ar = lx_realloc(t->ar, sizeof(double) * (size_t)t->cap);
  }
  ++t->n; /* GLPK counts from 1 */
  t->ia[t->n] = row, t->ja[t->n] = col, t->ar[t->n] = v;
}

static int add_row(glp_prob *lp, int type, double lo, double hi) {
  int r = glp_add_rows(lp, 1);
  glp_set_row_bnds(lp, r, type, lo, hi);
  return r;
}

static int add_binary(glp_prob *lp, double cost, bool allowed) {
  int c = glp_add_cols(lp, 1);
  glp_set_col_kind(lp, c, GLP_BV);
  if (!allowed) glp_set_col_bnds(lp, c, GLP_FX, 0, 0);
  glp_set_obj_coef(lp, c, cost);
  return c;
}

static int add_continuous(glp_prob *lp, double cost, double upper) {
  int c = glp_add_cols(lp, 1);
  glp_set_col_bnds(lp, c, upper >= 0 ? GLP_DB : GLP_LO, 0, upper >= 0 ? upper : 0);
  glp_set_obj_coef(lp, c, cost);
  return c;
}

static void watch_gap(glp_tree *tree, void *info) {
  int why = glp_ios_reason(tree);
  if (why == GLP_IBINGO || why == GLP_ISELECT) *(double *)info = glp_ios_mip_gap(tree);
}

/* Solves the MIP in lp; returns its status text and the final gap. */
static const char *solve_mip(glp_prob *lp, triplets *t, double time_limit_s, double *gap) {
  glp_load_matrix(lp, t->n, t->ia, t->ja, t->ar);
  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.presolve = GLP_ON;
  parm.msg_lev = GLP_MSG_OFF;
  parm.tm_lim = time_limit_s > 0 ? (int)(time_limit_s * 1e3) : 20000;
  parm.mip_gap = 1e-6;
  parm.cb_func = watch_gap;
  parm.cb_info = gap;
  *gap = 0;
  glp_term_out(GLP_OFF);
  int err = glp_intopt(lp, &parm);
  int status = glp_mip_status(lp);
  if (status == GLP_OPT) return *gap = *gap > parm.mip_gap ? *gap : 0, "optimal";
  if (status == GLP_FEAS) return err == GLP_ETMLIM ? "feasible (time limit)" : "feasible";
  return status == GLP_NOFEAS ? "infeasible" : "no solution";
}

static void free_triplets(triplets *t) {
  free(t->ia);
  free(t->ja);
  free(t->ar);
}

/* Units that keep the coefficients near 1: milliseconds and MiB. */
static double ms(double s) { return s * 1e3; }
static double mib(int64_t b) { return (double)b / (1 << 20); }

typedef struct {
  int *rc, *w, *of; /* columns per op, 0 where none */
} op_columns;

/* The offload columns' copy cost: per direction, a continuous z >= N (c - f)
 * with c = sum of / bandwidth the copy seconds of a layer (and f its forward,
 * or its backward), z >= 0, at unit cost; host memory bounds what they hold. */
static void add_offload_cost(const lx_stage_problem *pr, glp_prob *lp, triplets *t, const op_columns *c) {
  double n = (double)pr->n_layers * pr->micro_batches;
  double overlapped[2] = {pr->layer_fwd_s, pr->layer_bwd_s};
  for (int k = 0; k < 2; k++) { /* z - N sum o c_i >= -N f */
    int r = add_row(lp, GLP_LO, -n * ms(overlapped[k]), 0);
    put(t, r, add_continuous(lp, 1, -1), 1);
    for (int i = 0; i < pr->n_ops; i++)
      if (c->of[i]) put(t, r, c->of[i], -n * ms((double)pr->offload_bytes[i] / pr->host_bytes_per_s));
  }
  int r = add_row(lp, GLP_UP, -1e30, mib(pr->host_avail_bytes)); /* S L sum o b_i <= host */
  for (int i = 0; i < pr->n_ops; i++)
    if (c->of[i]) put(t, r, c->of[i], (double)pr->stashed_layers * mib(pr->offload_bytes[i]));
}

/* rc, w and offload columns, the closure rows (a recomputed op's unsaved
 * inputs run again; a window op's recomputed inputs run in the window too;
 * an op is recomputed or offloaded, not both) and the memory row. `windows`
 * false fixes every w at 0, `offload` false every offload column. */
static op_columns add_op_model(const lx_stage_problem *pr, glp_prob *lp, triplets *t, double rc_cost,
                               double w_cost, bool windows, bool offload) {
  const lx_graph *g = pr->block;
  size_t n = (size_t)pr->n_ops;
  op_columns c = {lx_calloc(n, sizeof(int)), lx_calloc(n, sizeof(int)), lx_calloc(n, sizeof(int))};
  offload &= pr->host_bytes_per_s > 0;
  for (int i = 0; i < pr->n_ops; i++) {
    if (offload && pr->offload_bytes[i] > 0) c.of[i] = add_binary(lp, 0, true);
    if (lx_never_dropped(pr->block, i)) continue;
    c.rc[i] = add_binary(lp, rc_cost * ms(pr->recompute_s[i]), true);
    c.w[i] = add_binary(lp, w_cost * ms(pr->recompute_s[i]), windows && pr->windowable[i]);
    int r = add_row(lp, GLP_UP, 0, 0); /* w <= rc */
    put(t, r, c.w[i], 1), put(t, r, c.rc[i], -1);
    if (c.of[i]) { /* o + rc <= 1 */
      r = add_row(lp, GLP_UP, -1e9, 1);
      put(t, r, c.of[i], 1), put(t, r, c.rc[i], 1);
    }
  }
  if (offload) add_offload_cost(pr, lp, t, &c);
  for (int i = 0; i < pr->n_ops; i++)
    for (int k = 0; !lx_never_dropped(pr->block, i) && k < g->ops[i].n_inputs; k++) {
      int j = g->ops[i].inputs[k];
      if (lx_never_dropped(pr->block, j)) continue;
      if (!lx_output_saved(g, j)) { /* rc_i <= rc_j */
        int r = add_row(lp, GLP_UP, 0, 0);
        put(t, r, c.rc[i], 1), put(t, r, c.rc[j], -1);
      }
      int r = add_row(lp, GLP_UP, -1e9, 1); /* w_i + rc_j - w_j <= 1 */
      put(t, r, c.w[i], 1), put(t, r, c.rc[j], 1), put(t, r, c.w[j], -1);
    }
  if (pr->avail_bytes < INT64_MAX) { /* S L (K - sum rc d - sum o d) + B (sum w d + sum o b) <= avail */
    double per = (double)pr->stashed_layers;
    int r = add_row(lp, GLP_UP, -1e30, mib(pr->avail_bytes) - per * mib(pr->kept_all));
    for (int i = 0; i < pr->n_ops; i++) {
      if (c.rc[i] && pr->drop_bytes[i] > 0) {
        put(t, r, c.rc[i], -per * mib(pr->drop_bytes[i]));
        put(t, r, c.w[i], pr->window_buffers * mib(pr->drop_bytes[i]));
      }
      if (c.of[i])
        put(t, r, c.of[i], -per * mib(pr->drop_bytes[i]) + pr->window_buffers * mib(pr->offload_bytes[i]));
    }
  }
  return c;
}

static void free_columns(op_columns *c) {
  free(c->rc);
  free(c->w);
  free(c->of);
}

static bool column_set(glp_prob *lp, int column) { return column && glp_mip_col_val(lp, column) > 0.5; }

static void read_masks(const lx_stage_problem *pr, glp_prob *lp, op_columns c, lx_opmask *rc, lx_opmask *w,
                       lx_opmask *of) {
  *rc = *w = *of = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    if (column_set(lp, c.rc[i])) *rc |= (lx_opmask)1 << i;
    if (column_set(lp, c.w[i])) *w |= (lx_opmask)1 << i;
    if (column_set(lp, c.of[i])) *of |= (lx_opmask)1 << i;
  }
}

/* A tie-break weight: among equally exposed choices, less recompute. */
static const double TIE = 1e-6;

/* ---- checkmate ------------------------------------------------------------------------- */

/* The cheapest recompute (all of it on demand) whose kept bytes fit: an
 * exact ILP (Jain et al., Checkmate, restricted to one layer's ops, which
 * every layer of the stage shares). */
static bool solve_checkmate(const lx_stage_problem *pr, lx_op_decision *d, int *window_of,
                            lx_policy_stats *stats) {
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  triplets t = {0};
  op_columns c = add_op_model(pr, lp, &t, 1, 0, false, false);
  const char *status = solve_mip(lp, &t, pr->time_limit_s, &stats->gap);
  lx_opmask rc = drop_everything(pr), w = 0, of = 0;
  int ok = glp_mip_status(lp);
  if (ok == GLP_OPT || ok == GLP_FEAS) read_masks(pr, lp, c, &rc, &w, &of);
  rc = lx_close_recompute(pr, rc);
  lx_matcher m = lx_matcher_init(pr);
  choice best = realize(&m, rc, 0, 0, window_of);
  lx_matcher_free(&m);
  lx_masks_to_decisions(pr, best.rc, 0, 0, d);
  stats->status = status;
  free_columns(&c);
  free_triplets(&t);
  glp_delete_prob(lp);
  return best.valid;
}

/* ---- lynx-opt -------------------------------------------------------------------------- */

/* First window at or after position `after` (windows are sorted). */
static int first_window(const lx_stage_problem *pr, int after) {
  int lo = 0, hi = pr->n_windows;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (pr->windows[mid].after < after)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The MILP: op choices as in checkmate plus window ops; per instance, its
 * in-window seconds RW = sum r_i w_i flow into its admissible windows (x)
 * or run on demand (o); per window, what flows in fits its capacity.
 *   min N sum r_i (rc_i - w_i) + sum o + tie
 * The flow may split an op across windows, which the schedule splits only
 * at op boundaries: a relaxation, so the decisions are then assigned for
 * real, and compared with lynx-heu's: the better of the two is kept (the
 * MILP is warm-started by heu's incumbent, in effect). */
static bool solve_opt(const lx_stage_problem *pr, lx_op_decision *d, int *window_of, lx_policy_stats *stats) {
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  triplets t = {0};
  double n = (double)pr->n_layers * pr->micro_batches;
  op_columns c = add_op_model(pr, lp, &t, n + TIE, -n, true, true);
  int *window_row = lx_calloc((size_t)pr->n_windows + 1, sizeof(int));
  for (int inst = 0; inst < pr->n_instances && pr->n_windows; inst++) {
    int r = add_row(lp, GLP_FX, 0, 0); /* sum x + o - RW = 0 */
    put(&t, r, add_continuous(lp, 1, -1), 1);
    for (int i = 0; i < pr->n_ops; i++)
      if (c.w[i] && pr->windowable[i]) put(&t, r, c.w[i], -ms(pr->recompute_s[i]));
    for (int w = first_window(pr, pr->lo[inst]); w < pr->n_windows && pr->windows[w].after < pr->due[inst];
         w++) {
      if (pr->lo[inst] < 0) break;
      if (!window_row[w]) window_row[w] = add_row(lp, GLP_UP, -1e30, ms(pr->windows[w].capacity));
      int x = add_continuous(lp, 0, -1);
      put(&t, r, x, 1), put(&t, window_row[w], x, 1);
    }
  }
  if (!pr->n_windows) /* no windows: every window op runs on demand */
    for (int i = 0; i < pr->n_ops; i++)
      if (c.w[i]) glp_set_col_bnds(lp, c.w[i], GLP_FX, 0, 0);
  const char *status = solve_mip(lp, &t, pr->time_limit_s, &stats->gap);
  int ok = glp_mip_status(lp);
  lx_opmask rc = drop_everything(pr), w = 0, of = 0;
  if (ok == GLP_OPT || ok == GLP_FEAS) read_masks(pr, lp, c, &rc, &w, &of);
  rc = lx_close_recompute(pr, rc);
  of &= ~rc;
  if (!lx_window_closed(pr, rc, w)) w = 0;
  lx_matcher m = lx_matcher_init(pr);
  choice milp = realize(&m, rc, w, of, window_of);
  bool heu_ok = solve_heu(pr, d, window_of);
  lx_opmask hrc, hw, hof;
  lx_decisions_to_masks(pr, d, &hrc, &hw, &hof);
  choice heu = {hrc, hw, hof, lx_policy_exposed(pr, d, window_of), heu_ok};
  choice best = compare_choices(pr, &milp, &heu) <= 0 ? milp : heu;
  bool milp_won = best.rc == milp.rc && best.w == milp.w && best.of == milp.of;
  stats->status = milp_won ? status : "heuristic incumbent (MILP no better)";
  realize(&m, best.rc, best.w, best.of, window_of);
  lx_matcher_free(&m);
  lx_masks_to_decisions(pr, best.rc, best.w, best.of, d);
  free(window_row);
  free_columns(&c);
  free_triplets(&t);
  glp_delete_prob(lp);
  return best.valid;
}

/* ---- entry point ------------------------------------------------------------------------ */

bool lx_policy_solve(const lx_ir *ir, lx_recompute_policy policy, const lx_stage_problem *pr,
                     lx_op_decision *d, int *window_of, lx_policy_stats *stats) {
  double start = now_s();
  *stats = (lx_policy_stats){.budget_bytes = pr->avail_bytes, .status = "fixed"};
  int *scratch = window_of ? window_of : lx_malloc(sizeof(int) * lx_placement_entries(pr));
  bool ok;
  bool planned =
      policy == LX_RECOMPUTE_CHECKMATE || policy == LX_RECOMPUTE_LYNX_HEU || policy == LX_RECOMPUTE_LYNX_OPT;
  if (planned && fits(pr, 0, 0, 0)) { /* keeping everything fits: nothing is exposed and nothing beats it */
    lx_masks_to_decisions(pr, 0, 0, 0, d);
    lx_assign_windows(pr, 0, scratch);
    stats->status = "optimal (everything kept)";
    policy = LX_RECOMPUTE_POLICY_COUNT; /* done */
  }
  switch (policy) {
  case LX_RECOMPUTE_POLICY_COUNT: ok = true; break;
  case LX_RECOMPUTE_CHECKMATE: ok = solve_checkmate(pr, d, scratch, stats); break;
  case LX_RECOMPUTE_LYNX_HEU:
    ok = solve_heu(pr, d, scratch);
    stats->status = "heuristic";
    break;
  case LX_RECOMPUTE_LYNX_OPT: ok = solve_opt(pr, d, scratch, stats); break;
  default:
    lx_recompute_fixed(ir, policy, d);
    lx_assign_windows(pr, 0, scratch);
    ok = lx_policy_bytes(pr, d) <= pr->avail_bytes;
    break;
  }
  stats->search_s = now_s() - start;
  stats->exposed_s = lx_policy_exposed(pr, d, scratch);
  stats->window_s = lx_covered_seconds(pr, scratch);
  stats->used_bytes = lx_policy_bytes(pr, d);
  if (!window_of) free(scratch);
  return ok;
}
