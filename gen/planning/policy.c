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
#include "planning/glpk_errors.h"
#include "planning/passes.h"
#include "planning/stage_problem.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- a choice, and how to compare two ---------------------------------------- */

typedef struct {
  lx_opmask rc, w; /* recomputed, of them in windows */
  lx_offload of;
  double exposed;
  bool valid;
} choice;

static bool same_offload(lx_offload a, lx_offload b) {
  return a.whole == b.whole && a.split == b.split && a.pieces == b.pieces;
}

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

static bool fits(const lx_stage_problem *pr, lx_opmask rc, lx_opmask w, lx_offload of) {
  return lx_memory_of(pr, rc, w, of) <= pr->avail_bytes && lx_host_fits(pr, of);
}

/* The choice with its windows assigned for real. */
static choice realize(const lx_matcher *m, lx_opmask rc, lx_opmask w, lx_offload of, int *window_of) {
  const lx_stage_problem *pr = m->pr;
  double served = lx_match_windows(m, w, window_of);
  return (choice){rc, w, of, lx_exposed_of(pr, rc, served) + lx_offload_cost(pr, of), fits(pr, rc, w, of)};
}

/* ---- offload: the fewest bytes that make a choice fit --------------------------------- */

/* What offloading op i saves on the device: its stash in every stashed layer, less its
 * place in the window buffers. */
static int64_t offload_gain(const lx_stage_problem *pr, int i) {
  return pr->stashed_layers * pr->drop_bytes[i] - (int64_t)pr->window_buffers * pr->offload_bytes[i];
}

/* Whether op a goes before op b: the larger copy first, then the larger gain, so that
 * interchangeable ops stand side by side. */
static bool copies_before(const lx_stage_problem *pr, int a, int b) {
  if (pr->offload_bytes[a] != pr->offload_bytes[b]) return pr->offload_bytes[a] > pr->offload_bytes[b];
  return offload_gain(pr, a) > offload_gain(pr, b);
}

/* The ops lynx-heu may offload, largest copy first. Ops of the same copy and gain are
 * interchangeable: next[k] is the first op after ops[k] and its twins. */
typedef struct {
  int *ops, *next, n;
} offload_ops;

/* The offloadable ops that gain memory. */
static offload_ops offload_candidates(const lx_stage_problem *pr) {
  offload_ops off = {lx_malloc(sizeof(int) * (size_t)(pr->n_ops + 1)),
                     lx_malloc(sizeof(int) * (size_t)(pr->n_ops + 1)), 0};
  int *ops = off.ops;
  for (int i = 0; pr->host_bytes_per_s > 0 && i < pr->n_ops; i++)
    if (pr->offload_bytes[i] > 0 && offload_gain(pr, i) > 0) ops[off.n++] = i;
  for (int a = 1; a < off.n; a++)
    for (int b = a; b > 0 && copies_before(pr, ops[b], ops[b - 1]); b--) {
      int t = ops[b];
      ops[b] = ops[b - 1];
      ops[b - 1] = t;
    }
  for (int k = off.n - 1; k >= 0; k--) {
    bool twin = k + 1 < off.n && !copies_before(pr, ops[k], ops[k + 1]);
    off.next[k] = twin ? off.next[k + 1] : k + 1;
  }
  return off;
}

static void free_offload_ops(offload_ops *off) {
  free(off->ops);
  free(off->next);
}

/* The least-bytes cover, by branch and bound over off->ops[k..n): a set whose gains
 * reach `need`, with fewer bytes than *best_bytes. left[k]: the gain of ops[k..n) that
 * are allowed. A cover that leaves an op out and takes a later twin is no better than
 * one that takes it, so leaving it out leaves out its twins (off->next). Without that,
 * a layer of many equal ops had its covers tried in every order. */
typedef struct {
  const lx_stage_problem *pr;
  const offload_ops *off;
  lx_opmask allowed;
  int64_t left[65];
  int64_t best_bytes;
  lx_opmask best;
} cover_search;

static void search_cover(cover_search *c, int k, int64_t need, int64_t bytes, lx_opmask chosen) {
  if (need <= 0) {
    if (bytes < c->best_bytes) c->best_bytes = bytes, c->best = chosen;
    return;
  }
  if (k == c->off->n || c->left[k] < need || bytes >= c->best_bytes) return;
  int i = c->off->ops[k];
  bool allowed = (c->allowed >> i) & 1;
  if (allowed)
    search_cover(c, k + 1, need - offload_gain(c->pr, i), bytes + c->pr->offload_bytes[i],
                 chosen | (lx_opmask)1 << i);
  search_cover(c, allowed ? c->off->next[k] : k + 1, need, bytes, chosen);
}

/* The offload set, among the ops rc does not recompute and w does not read, that makes (rc, w) fit the
 * device, beside op `split` (-1: none) split token-wise, with the fewest bytes copied (the copies' cost grows
 * with their bytes alone, and so does the host memory they take): none where it fits already. An exact
 * knapsack cover, by branch and bound. False where nothing closes the deficit, or its host copies do not fit.
 */
static bool cover_deficit(const lx_stage_problem *pr, const offload_ops *off, lx_opmask rc, lx_opmask w,
                          int split, lx_opmask *of) {
  *of = 0;
  lx_offload placed = {0, split, split >= 0}; /* the split op's window buffers, whatever its pieces */
  int64_t deficit = lx_memory_of(pr, rc, w, placed) - pr->avail_bytes;
  if (deficit <= 0) return true;
  cover_search c = {
      .pr = pr, .off = off, .allowed = ~(rc | lx_window_inputs(pr, w)), .best_bytes = INT64_MAX};
  const int *ops = off->ops;
  c.left[off->n] = 0;
  for (int k = off->n - 1; k >= 0; k--)
    c.left[k] = c.left[k + 1] + (((c.allowed >> ops[k]) & 1) ? offload_gain(pr, ops[k]) : 0);
  if (c.left[0] < deficit) return false;
  search_cover(&c, 0, deficit, 0, 0);
  *of = c.best;
  return c.best_bytes < INT64_MAX && lx_host_fits(pr, lx_offload_whole(*of));
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

/* Per window set w, the best recompute and offload sets that use it, scored
 * as if the windows served nothing (`exposed` holds N x r(rc) + copies: the
 * matching of w subtracts the same seconds from all of them, so they compare
 * alike before it). Open addressing on the set's bits. */
typedef struct {
  lx_opmask *keys;
  choice *best;
  bool *used;
  int cap, n;
  double bound; /* the least score offered: no choice is more exposed than it */
} window_sets;

static window_sets sets_init(int cap) {
  window_sets t = {.cap = cap, .bound = INFINITY};
  t.keys = lx_calloc((size_t)cap, sizeof *t.keys);
  t.best = lx_calloc((size_t)cap, sizeof *t.best);
  t.used = lx_calloc((size_t)cap, sizeof *t.used);
  return t;
}

static void sets_free(window_sets *t) {
  free(t->keys);
  free(t->best);
  free(t->used);
}

static int sets_slot(const window_sets *t, lx_opmask w) {
  uint64_t h = w * 0x9e3779b97f4a7c15ull;
  int k = (int)(h >> 40) & (t->cap - 1);
  while (t->used[k] && t->keys[k] != w)
    k = (k + 1) & (t->cap - 1);
  return k;
}

static void sets_put(window_sets *t, int k, choice c) { t->used[k] = true, t->keys[k] = c.w, t->best[k] = c; }

static void sets_offer(const lx_stage_problem *pr, window_sets *t, choice c) {
  if (c.exposed < t->bound) t->bound = c.exposed;
  int k = sets_slot(t, c.w);
  if (t->used[k]) {
    if (compare_choices(pr, &c, &t->best[k]) < 0) t->best[k] = c;
    return;
  }
  sets_put(t, k, c);
  if (2 * ++t->n <= t->cap) return;
  window_sets bigger = sets_init(2 * t->cap);
  bigger.n = t->n, bigger.bound = t->bound;
  for (int j = 0; j < t->cap; j++)
    if (t->used[j]) sets_put(&bigger, sets_slot(&bigger, t->keys[j]), t->best[j]);
  sets_free(t);
  *t = bigger;
}

/* The best offload of (rc, w), scored as if the windows served nothing: no
 * split, or the token-wise split (overlap.h) of one on-demand op with each
 * number of pieces, each with the least cover of what the device lacks. False
 * where none fits. */
static bool best_offload(const lx_stage_problem *pr, const offload_ops *off, lx_opmask rc, lx_opmask w,
                         choice *best) {
  double n = (double)pr->n_layers * pr->micro_batches, recompute = n * lx_seconds_of(pr, rc);
  lx_opmask whole;
  bool found = cover_deficit(pr, off, rc, w, -1, &whole);
  if (found)
    *best = (choice){rc, w, lx_offload_whole(whole), recompute + lx_offload_cost(pr, lx_offload_whole(whole)),
                     true};
  for (lx_opmask m = pr->host_bytes_per_s > 0 ? rc & ~w : 0; m; m &= m - 1) {
    int i = __builtin_ctzll(m);
    if (!pr->splittable[i] || !cover_deficit(pr, off, rc, w, i, &whole)) continue;
    for (int k = 1; k < LX_TOKEN_PIECES; k++) {
      lx_offload of = {whole, i, k};
      if (!lx_host_fits(pr, of)) break;
      choice c = {rc, w, of, recompute + lx_offload_cost(pr, of), true};
      if (!found || c.exposed < best->exposed - 1e-12 * best->exposed) *best = c, found = true;
    }
  }
  return found;
}

/* The most recompute a token-wise split of one op of m saves per instance. */
static double most_split(const lx_stage_problem *pr, lx_opmask m) {
  double most = 0;
  for (; pr->host_bytes_per_s > 0 && m; m &= m - 1) {
    int i = __builtin_ctzll(m);
    if (pr->splittable[i] && pr->recompute_s[i] > most) most = pr->recompute_s[i];
  }
  return most * (LX_TOKEN_PIECES - 1) / LX_TOKEN_PIECES;
}

/* Every chain-closed window subset of one recompute set that fits (with the
 * offload that closes its deficit, and its best split), offered to its
 * window set. A choice that could not beat the least score offered so far
 * even if its windows served all of them (its on-demand part, less the most
 * a split could save, is as slow) is not. */
static void consider_windows(const lx_stage_problem *pr, window_sets *sets, const offload_ops *off,
                             lx_opmask rc) {
  lx_opmask cand = pr->n_windows ? lx_window_candidates(pr, rc) : 0;
  int n_cand = __builtin_popcountll(cand);
  double n = (double)pr->n_layers * pr->micro_batches;
  double split = n * most_split(pr, rc);
  double unwindowable = n * lx_seconds_of(pr, rc & ~cand) - split; /* on demand whatever the windows */
  if (unwindowable > sets->bound + 1e-12 * unwindowable) return;
  bool enumerable = n_cand <= MAX_ENUM_WINDOW_OPS; /* else all of cand in windows, or none */
  for (lx_opmask w = cand;; w = enumerable ? (w - 1) & cand : 0) {
    double on_demand = n * lx_seconds_of(pr, rc & ~w) - split;
    choice c;
    if (on_demand <= sets->bound + 1e-12 * on_demand && lx_window_closed(pr, rc, w) &&
        best_offload(pr, off, rc, w, &c))
      sets_offer(pr, sets, c);
    if (w == 0) break;
  }
}

/* A window set's best choice, with what its windows could serve at most. */
typedef struct {
  double lower; /* its score if its windows served all they could (lx_most_served) */
  choice c;
} window_candidate;

static int by_lower_bound(const void *x, const void *y) {
  const window_candidate *a = x, *b = y;
  if (a->lower != b->lower) return a->lower < b->lower ? -1 : 1;
  return (a->c.w > b->c.w) - (a->c.w < b->c.w); /* the same order every run */
}

/* Whether a choice whose exposed time is at least `lower` cannot beat best:
 * it is no faster, and were it as fast, it would lose the tie (its recompute,
 * offload and memory, which the matching does not change). */
static bool cannot_win(const lx_stage_problem *pr, double lower, const choice *c, const choice *best) {
  if (!best->valid || lower < best->exposed) return false;
  choice tied = *c;
  tied.exposed = best->exposed;
  return compare_choices(pr, &tied, best) >= 0;
}

/* Best first: window sets in order of their lower bound, each matched for
 * real, until no bound left can beat the best found; a set that could at
 * most tie the best and would lose the tie is not matched. Each set is
 * matched at most once. */
static choice match_best_first(const lx_stage_problem *pr, const lx_matcher *m, const window_sets *sets,
                               choice best) {
  window_candidate *cand = lx_malloc(sizeof *cand * (size_t)(sets->n + 1));
  int count = 0;
  lx_window_room room = lx_window_room_init(pr);
  for (int k = 0; k < sets->cap; k++)
    if (sets->used[k]) {
      const choice *c = &sets->best[k];
      cand[count++] = (window_candidate){c->exposed - lx_most_served(pr, &room, c->w), *c};
    }
  lx_window_room_free(&room);
  qsort(cand, (size_t)count, sizeof *cand, by_lower_bound);
  for (int k = 0; k < count; k++) {
    if (best.valid && cand[k].lower > best.exposed + 1e-12 * cand[k].lower) break;
    if (cannot_win(pr, cand[k].lower, &cand[k].c, &best)) continue;
    choice c = cand[k].c;
    double served = c.w ? lx_match_windows(m, c.w, NULL) : 0;
    c.exposed = lx_exposed_of(pr, c.rc, served) + lx_offload_cost(pr, c.of);
    if (compare_choices(pr, &c, &best) < 0) best = c;
  }
  free(cand);
  return best;
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
 * window subset of each, each with the offload that makes it fit; per window
 * set the best of them, and the window sets matched best first (what the
 * matching serves is the same for every choice of one window set). The best
 * is assigned to windows for real. Nothing fits: drop everything (the
 * repair), and report it. */
static bool solve_heu(const lx_stage_problem *pr, lx_op_decision *d, int *window_of) {
  int *ops = lx_malloc(sizeof(int) * (size_t)pr->n_ops);
  int n = droppable_ops(pr, ops);
  offload_ops off = offload_candidates(pr);
  lx_matcher m = lx_matcher_init(pr);
  window_sets sets = sets_init(256);
  lx_opmask all = drop_everything(pr);
  choice best = {all, 0, lx_no_offload, lx_exposed_of(pr, all, 0), fits(pr, all, 0, lx_no_offload)};
  if (best.valid) sets.bound = best.exposed;
  bool enumerate = n <= MAX_ENUM_OPS;
  uint64_t subsets = enumerate ? (uint64_t)1 << n : (uint64_t)n + 1;
  for (uint64_t k = 0; k < subsets; k++) {
    lx_opmask rc = 0, of;
    for (int j = 0; j < n; j++)
      if (enumerate ? (k >> j) & 1 : (uint64_t)j < k) rc |= (lx_opmask)1 << ops[j];
    rc = lx_close_recompute(pr, rc);
    if (cover_deficit(pr, &off, rc, 0, -1, &of)) consider_windows(pr, &sets, &off, rc);
  }
  best = match_best_first(pr, &m, &sets, best);
  free(ops);
  free_offload_ops(&off);
  realize(&m, best.rc, best.w, best.of, window_of);
  sets_free(&sets);
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

/* What the search callback tracks: the gap it last saw and the work it may do. */
typedef struct {
  double gap;
  int work_limit; /* simplex iterations */
} mip_watch;

static void watch_search(glp_tree *tree, void *info) {
  mip_watch *w = info;
  int why = glp_ios_reason(tree);
  if (why == GLP_IBINGO || why == GLP_ISELECT) w->gap = glp_ios_mip_gap(tree);
  if (why == GLP_ISELECT && glp_get_it_cnt(glp_ios_get_prob(tree)) > w->work_limit) glp_ios_terminate(tree);
}

/* Solves the MIP in lp; returns its status text and the final gap. The
 * search is bounded by simplex iterations, not by the clock, so that the
 * same input gives the same plan on any machine and under any load. GLPK
 * reports optimal only once its tree is exhausted (gap 0); a search stopped
 * by the gap tolerance or the work limit leaves a feasible incumbent, whose
 * gap is the one watch_search saw last. `cuts`: GLPK's Gomory cuts, for
 * checkmate's MILP: one layer's ops, a knapsack row whose LP bound a layer of
 * many equal ops left loose (one MILP branched for 10 s without them, a
 * hundredth of a second with). Not for lynx-opt's, which has rows per instance
 * and window (tens of thousands), where making cuts at every node cost more
 * than they saved (a GPT-13B plan: 38 s without, 178 s with). GLPK's other
 * cuts add nothing here, and its cover cuts abort the process on a problem
 * with no row they apply to (glp_cov_init: "invalid number of columns"). */
static const char *solve_mip(glp_prob *lp, triplets *t, int work_limit, bool cuts, double *gap) {
  glp_load_matrix(lp, t->n, t->ia, t->ja, t->ar);
  glp_iocp parm;
  glp_init_iocp(&parm); /* no time limit (tm_lim): see above */
  parm.presolve = GLP_ON;
  parm.msg_lev = GLP_MSG_OFF;
  parm.mip_gap = 1e-6;
  if (cuts) parm.gmi_cuts = GLP_ON;
  mip_watch watch = {0, work_limit > 0 ? work_limit : LX_MIP_WORK_LIMIT};
  parm.cb_func = watch_search;
  parm.cb_info = &watch;
  glp_term_out(GLP_OFF);
  int err = glp_intopt(lp, &parm);
  int status = glp_mip_status(lp);
  *gap = status == GLP_FEAS ? watch.gap : 0; /* proven, or no incumbent to measure */
  if (status == GLP_OPT) return "optimal";
  if (status == GLP_FEAS && err == GLP_EMIPGAP) return "optimal (within the gap tolerance)";
  if (status == GLP_FEAS) return err == GLP_ESTOP ? "feasible (work limit)" : "feasible";
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
  int *split, *pieces; /* the token-wise split: whether op i is the split op, and its offloaded pieces */
} op_columns;

static int add_integer(glp_prob *lp, double cost, int upper) {
  int c = glp_add_cols(lp, 1);
  glp_set_col_kind(lp, c, GLP_IV);
  glp_set_col_bnds(lp, c, GLP_DB, 0, upper);
  glp_set_obj_coef(lp, c, cost);
  return c;
}

/* Row z >= slope x c - offset, with c = sum of / bandwidth the copy seconds
 * of a layer (the split op's pieces copy b_i / P each). */
static void add_copy_row(const lx_stage_problem *pr, glp_prob *lp, triplets *t, const op_columns *c, int z,
                         double slope, double offset) {
  int r = add_row(lp, GLP_LO, -ms(offset), 0);
  put(t, r, z, 1);
  for (int i = 0; i < pr->n_ops; i++) {
    double copy_s = (double)pr->offload_bytes[i] / pr->host_bytes_per_s;
    if (c->of[i]) put(t, r, c->of[i], -slope * ms(copy_s));
    if (c->pieces[i]) put(t, r, c->pieces[i], -slope * ms(copy_s) / LX_TOKEN_PIECES);
  }
}

/* The offload columns' copy cost, as lx_offload_cost prices it, each
 * direction a continuous z >= 0 at unit cost: the copies out z >= N (c - f)
 * (f: a layer's forward); the prefetches, per instance beyond its room,
 * z >= sum over instances of max(0, c - room), which is convex in c: z at
 * least each of its linear pieces, j c - (the j smallest rooms), taken where
 * the rooms step (without rooms, N (c - b), b a layer's backward). Host
 * memory bounds what they hold. At most one op is split, one it recomputes
 * on demand (y_i <= rc_i - w_i), and each of its pieces saves N r_i / P of
 * recompute. */
static void add_offload_cost(const lx_stage_problem *pr, glp_prob *lp, triplets *t, const op_columns *c) {
  double n = (double)pr->n_layers * pr->micro_batches;
  int one_split = add_row(lp, GLP_UP, -1e30, 1); /* sum y <= 1 */
  for (int i = 0; i < pr->n_ops; i++) {
    if (!c->split[i]) continue;
    put(t, one_split, c->split[i], 1);
    int r = add_row(lp, GLP_UP, -1e30, 0); /* pieces - (P - 1) y <= 0 */
    put(t, r, c->pieces[i], 1), put(t, r, c->split[i], -(LX_TOKEN_PIECES - 1));
    r = add_row(lp, GLP_UP, -1e30, 0); /* y - rc + w <= 0 */
    put(t, r, c->split[i], 1), put(t, r, c->rc[i], -1), put(t, r, c->w[i], 1);
    glp_set_obj_coef(lp, c->pieces[i], -n * ms(pr->recompute_s[i]) / LX_TOKEN_PIECES);
  }
  add_copy_row(pr, lp, t, c, add_continuous(lp, 1, -1), n, n * pr->layer_fwd_s);
  int back = add_continuous(lp, 1, -1);
  if (!pr->room_s) add_copy_row(pr, lp, t, c, back, n, n * pr->layer_bwd_s);
  for (int j = 1; pr->room_s && j <= pr->n_instances; j++)
    if (j == pr->n_instances || pr->room_s[j] > pr->room_s[j - 1])
      add_copy_row(pr, lp, t, c, back, j, pr->room_below[j]);
  int r = add_row(lp, GLP_UP, -1e30, mib(pr->host_avail_bytes)); /* S L sum o b_i <= host */
  for (int i = 0; i < pr->n_ops; i++) {
    if (c->of[i]) put(t, r, c->of[i], (double)pr->stashed_layers * mib(pr->offload_bytes[i]));
    if (c->pieces[i])
      put(t, r, c->pieces[i], (double)pr->stashed_layers * mib(pr->offload_bytes[i]) / LX_TOKEN_PIECES);
  }
}

/* rc, w and offload columns, the closure rows (a recomputed op's unsaved
 * inputs run again; a window op's recomputed inputs run in the window too;
 * an op is recomputed or offloaded, not both) and the memory row. `windows`
 * false fixes every w at 0, `offload` false every offload column. */
static op_columns add_op_model(const lx_stage_problem *pr, glp_prob *lp, triplets *t, double rc_cost,
                               double w_cost, bool windows, bool offload) {
  const lx_graph *g = pr->block;
  size_t n = (size_t)pr->n_ops;
  op_columns c = {lx_calloc(n, sizeof(int)), lx_calloc(n, sizeof(int)), lx_calloc(n, sizeof(int)),
                  lx_calloc(n, sizeof(int)), lx_calloc(n, sizeof(int))};
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
    if (offload && pr->splittable[i])
      c.split[i] = add_binary(lp, 0, true), c.pieces[i] = add_integer(lp, 0, LX_TOKEN_PIECES - 1);
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
      if (c.of[j]) { /* w_i + o_j <= 1: a window op reads nothing that comes back from host memory */
        r = add_row(lp, GLP_UP, -1e9, 1);
        put(t, r, c.w[i], 1), put(t, r, c.of[j], 1);
      }
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
      if (c.split[i]) put(t, r, c.split[i], pr->window_buffers * mib(pr->offload_bytes[i]));
    }
  }
  return c;
}

static void free_columns(op_columns *c) {
  free(c->rc);
  free(c->w);
  free(c->of);
  free(c->split);
  free(c->pieces);
}

static bool column_set(glp_prob *lp, int column) { return column && glp_mip_col_val(lp, column) > 0.5; }

static void read_masks(const lx_stage_problem *pr, glp_prob *lp, op_columns c, lx_opmask *rc, lx_opmask *w,
                       lx_offload *of) {
  *rc = *w = 0;
  *of = lx_no_offload;
  for (int i = 0; i < pr->n_ops; i++) {
    if (column_set(lp, c.rc[i])) *rc |= (lx_opmask)1 << i;
    if (column_set(lp, c.w[i])) *w |= (lx_opmask)1 << i;
    if (column_set(lp, c.of[i])) of->whole |= (lx_opmask)1 << i;
    int pieces = c.pieces[i] ? (int)lround(glp_mip_col_val(lp, c.pieces[i])) : 0;
    if (column_set(lp, c.split[i]) && pieces > 0) of->split = i, of->pieces = pieces;
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
  const char *status = solve_mip(lp, &t, pr->work_limit, true, &stats->gap);
  lx_opmask rc = drop_everything(pr), w = 0;
  lx_offload of = lx_no_offload;
  int ok = glp_mip_status(lp);
  if (ok == GLP_OPT || ok == GLP_FEAS) read_masks(pr, lp, c, &rc, &w, &of);
  rc = lx_close_recompute(pr, rc);
  lx_matcher m = lx_matcher_init(pr);
  choice best = realize(&m, rc, 0, lx_no_offload, window_of);
  lx_matcher_free(&m);
  lx_masks_to_decisions(pr, best.rc, 0, lx_no_offload, d);
  stats->status = status;
  free_columns(&c);
  free_triplets(&t);
  glp_delete_prob(lp);
  return best.valid;
}

/* ---- lynx-opt -------------------------------------------------------------------------- */

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
    for (int w = lx_first_window(pr, pr->lo[inst]); w < pr->n_windows && pr->windows[w].after < pr->due[inst];
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
  const char *status = solve_mip(lp, &t, pr->work_limit, false, &stats->gap);
  int ok = glp_mip_status(lp);
  lx_opmask rc = drop_everything(pr), w = 0;
  lx_offload of = lx_no_offload;
  if (ok == GLP_OPT || ok == GLP_FEAS) read_masks(pr, lp, c, &rc, &w, &of);
  rc = lx_close_recompute(pr, rc);
  of.whole &= ~rc;
  if (!lx_window_closed(pr, rc, w)) w = 0;
  if (of.split >= 0 && (!((rc >> of.split) & 1) || ((w >> of.split) & 1))) of.split = -1, of.pieces = 0;
  lx_matcher m = lx_matcher_init(pr);
  choice milp = realize(&m, rc, w, of, window_of);
  stats->milp_s = milp.exposed;
  bool heu_ok = solve_heu(pr, d, window_of);
  lx_opmask hrc, hw;
  lx_offload hof;
  lx_decisions_to_masks(pr, d, &hrc, &hw, &hof);
  choice heu = {hrc, hw, hof, lx_policy_exposed(pr, d, window_of), heu_ok};
  choice best = compare_choices(pr, &milp, &heu) <= 0 ? milp : heu;
  bool milp_won = best.rc == milp.rc && best.w == milp.w && same_offload(best.of, milp.of);
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
  lx_glpk_guard();
  *stats = (lx_policy_stats){.budget_bytes = pr->avail_bytes, .status = "fixed"};
  int *scratch = window_of ? window_of : lx_malloc(sizeof(int) * lx_placement_entries(pr));
  bool ok;
  bool planned =
      policy == LX_RECOMPUTE_CHECKMATE || policy == LX_RECOMPUTE_LYNX_HEU || policy == LX_RECOMPUTE_LYNX_OPT;
  if (planned &&
      fits(pr, 0, 0, lx_no_offload)) { /* keeping everything fits: nothing is exposed and nothing beats it */
    lx_masks_to_decisions(pr, 0, 0, lx_no_offload, d);
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
