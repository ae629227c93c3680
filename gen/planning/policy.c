/* policy.c — which ops of a stage's layers to keep, recompute on demand or
 * recompute in a window: checkmate, lynx-heu and lynx-opt (see lynx.h for
 * the model they share).
 *
 * Choices are per op and the same for every layer of a stage (a stage's
 * layers are identical, and the static layout gives each op one place per
 * layer). A recompute of an op drops everything it saves: the op runs
 * anyway, so keeping part of it only costs memory. That makes the
 * op-level choice exact for checkmate's tensor-level question too. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <glpk.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "planning/overlap.h"
#include "planning/passes.h"

typedef uint64_t opmask; /* a set of block ops; blocks have fewer than 64 */

static bool has(opmask m, int i) { return (m >> i) & 1; }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the problem ------------------------------------------------------------ */

/* Ops with a tensor-parallel collective around their forward stay out of
 * windows: the recompute stream issues no communication. */
static bool has_tp_collective(const lx_ir *ir, const lx_op *op) {
  lx_tp_collectives c = lx_tp_collectives_of(ir, op, false);
  return c.gather_before || c.reduce_after;
}

static bool output_saved(const lx_graph *g, int i) { return lx_last_saver(g, i) >= 0; }

/* What dropping everything op i saves frees, measured with lx_kept_bytes so
 * that a tensor saved by several ops is counted once, as the plan does. */
static int64_t drop_bytes_of(const lx_graph *g, int i, lx_op_decision *scratch) {
  memset(scratch, 0, sizeof *scratch * (size_t)g->n_ops);
  int64_t all = lx_kept_bytes(g, scratch);
  scratch[i].drop_output = scratch[i].drop_internals = true;
  return all - lx_kept_bytes(g, scratch);
}

void lx_stage_problem_init(lx_stage_problem *pr, const lx_ir *ir, const lx_cost_model *cm, int n_layers,
                           int stashed, int micro_batches, int64_t avail_bytes) {
  const lx_graph *g = &ir->block;
  size_t n = (size_t)g->n_ops;
  *pr = (lx_stage_problem){.block = g,
                           .n_ops = g->n_ops,
                           .n_layers = n_layers,
                           .stashed = stashed,
                           .micro_batches = micro_batches,
                           .avail_bytes = avail_bytes,
                           .window_buffers = 2,
                           .time_limit_s = 20};
  pr->recompute_s = lx_calloc(n, sizeof(double));
  pr->drop_bytes = lx_calloc(n, sizeof(int64_t));
  pr->windowable = lx_calloc(n, sizeof(bool));
  lx_op_decision *scratch = lx_calloc(n, sizeof *scratch);
  pr->kept_all = lx_kept_bytes(g, scratch);
  for (int i = 0; i < g->n_ops; i++) {
    const lx_op *op = &g->ops[i];
    if (op->kind == LX_OP_INPUT) continue; /* the layer input is the checkpoint */
    pr->recompute_s[i] = lx_cost_op_fwd(cm, ir, g, op);
    pr->drop_bytes[i] = drop_bytes_of(g, i, scratch);
    pr->windowable[i] = output_saved(g, i) && !has_tp_collective(ir, op);
  }
  free(scratch);
}

void lx_stage_problem_set_windows(lx_stage_problem *pr, const lx_pipeline *p, int s) {
  const lx_stage *st = &p->stages[s];
  free(pr->lo);
  free(pr->due);
  pr->windows = st->windows;
  pr->n_windows = st->n_windows;
  pr->n_instances = st->n_layers * p->micro_batches;
  pr->lo = lx_malloc(sizeof(int) * (size_t)(pr->n_instances + 1));
  pr->due = lx_malloc(sizeof(int) * (size_t)(pr->n_instances + 1));
  lx_instance_bounds(p, s, pr->lo, pr->due);
}

void lx_stage_problem_free(lx_stage_problem *pr) {
  free(pr->recompute_s);
  free(pr->drop_bytes);
  free(pr->windowable);
  free(pr->lo);
  free(pr->due);
  memset(pr, 0, sizeof *pr);
}

/* ---- sets of ops ---------------------------------------------------------- */

static bool is_input(const lx_stage_problem *pr, int i) { return pr->block->ops[i].kind == LX_OP_INPUT; }

/* A recomputed op needs its inputs: a producer whose output nobody keeps
 * runs again too. Inputs precede their users: one backward sweep. */
static opmask close_recompute(const lx_stage_problem *pr, opmask rc) {
  const lx_graph *g = pr->block;
  for (int i = g->n_ops - 1; i >= 0; i--) {
    if (!has(rc, i)) continue;
    for (int k = 0; k < g->ops[i].n_inputs; k++) {
      int j = g->ops[i].inputs[k];
      if (!has(rc, j) && !is_input(pr, j) && !output_saved(g, j)) rc |= (opmask)1 << j;
    }
  }
  return rc;
}

/* The ops of rc that may run in a window: windowable, and every recomputed
 * producer they read runs in the window before them. */
static opmask window_candidates(const lx_stage_problem *pr, opmask rc) {
  const lx_graph *g = pr->block;
  opmask w = 0;
  for (int i = 0; i < g->n_ops; i++) {
    if (!has(rc, i) || !pr->windowable[i]) continue;
    bool ok = true;
    for (int k = 0; k < g->ops[i].n_inputs; k++) {
      int j = g->ops[i].inputs[k];
      if (has(rc, j) && !has(w, j)) ok = false;
    }
    if (ok) w |= (opmask)1 << i;
  }
  return w;
}

static bool window_closed(const lx_stage_problem *pr, opmask rc, opmask w) {
  const lx_graph *g = pr->block;
  for (int i = 0; i < g->n_ops; i++)
    for (int k = 0; has(w, i) && k < g->ops[i].n_inputs; k++)
      if (has(rc, g->ops[i].inputs[k]) && !has(w, g->ops[i].inputs[k])) return false;
  return true;
}

/* The ops of a set in increasing order (the sums below add in op order, so
 * they are the same numbers however often they are taken). */
static int next_op(opmask *m) {
  int i = __builtin_ctzll(*m);
  *m &= *m - 1;
  return i;
}

static double seconds_of(const lx_stage_problem *pr, opmask m) {
  double t = 0;
  while (m)
    t += pr->recompute_s[next_op(&m)];
  return t;
}

static int64_t bytes_of(const lx_stage_problem *pr, opmask m) {
  int64_t b = 0;
  while (m)
    b += pr->drop_bytes[next_op(&m)];
  return b;
}

/* Block activation bytes: the stash of kept tensors plus the window buffers. */
static int64_t memory_of(const lx_stage_problem *pr, opmask rc, opmask w) {
  return (int64_t)pr->stashed * pr->n_layers * (pr->kept_all - bytes_of(pr, rc)) +
         (int64_t)pr->window_buffers * bytes_of(pr, w);
}

static void masks_to_decisions(const lx_stage_problem *pr, opmask rc, opmask w, lx_op_decision *d) {
  for (int i = 0; i < pr->n_ops; i++)
    d[i] = (lx_op_decision){.drop_output = has(rc, i), .drop_internals = has(rc, i), .in_window = has(w, i)};
  lx_recompute_closure(pr->block, d);
  for (int i = 0; i < pr->n_ops; i++)
    d[i].in_window &= d[i].recompute;
}

static void decisions_to_masks(const lx_stage_problem *pr, const lx_op_decision *d, opmask *rc, opmask *w) {
  *rc = *w = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    if (d[i].recompute) *rc |= (opmask)1 << i;
    if (d[i].recompute && d[i].in_window) *w |= (opmask)1 << i;
  }
}

/* ---- windows: an earliest-deadline-first matching ------------------------- */

typedef struct {
  int *items, n;
  const int *key;
} heap;

static void heap_swap(heap *h, int a, int b) {
  int t = h->items[a];
  h->items[a] = h->items[b];
  h->items[b] = t;
}

static void heap_push(heap *h, int v) {
  int i = h->n++;
  h->items[i] = v;
  while (i > 0 && h->key[h->items[(i - 1) / 2]] > h->key[h->items[i]]) {
    heap_swap(h, i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
}

static int heap_pop(heap *h) {
  int top = h->items[0], i = 0;
  h->items[0] = h->items[--h->n];
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->n && h->key[h->items[l]] < h->key[h->items[m]]) m = l;
    if (r < h->n && h->key[h->items[r]] < h->key[h->items[m]]) m = r;
    if (m == i) return top;
    heap_swap(h, i, m);
    i = m;
  }
}

static const int *sort_keys; /* qsort has no context argument in C11 */

/* By key, then by index: the same order whatever qsort's stability. */
static int by_key(const void *a, const void *b) {
  int i = *(const int *)a, j = *(const int *)b, x = sort_keys[i], y = sort_keys[j];
  return x != y ? (x > y) - (x < y) : (i > j) - (i < j);
}

enum { TIERS = 24 };

/* The instances in order of release (lo), the windows in tiers, and a
 * heap's room: what every matching of one stage problem shares, so a policy
 * that tries many recompute sets sorts and filters once. lynx-heu matches a
 * few dozen times a stage, and a long pipeline has tens of thousands of
 * windows, most of them tensor-parallel all-reduces too short for the
 * recompute at hand: tier t lists, in time order, the windows with a slot
 * for min_s x 2^t seconds, so a matching of r seconds walks the highest
 * tier with min_s x 2^t <= r and skips only windows it could not use. */
typedef struct {
  const lx_stage_problem *pr;
  int *order, *heap;
  int *tier[TIERS], n_tier[TIERS];
  double min_s; /* the shortest windowable op's recompute; 0: none */
} matcher;

/* How many recomputations of window_s fit the window; a window that could
 * hold more than an int counts (4096 layers of 2^24-wide linears) holds INT_MAX. */
static int slots_of(const lx_window *w, double window_s) {
  double slots = w->capacity / window_s + 1e-9;
  return slots < INT_MAX ? (int)slots : INT_MAX;
}

static double shortest_window_op(const lx_stage_problem *pr) {
  double min_s = 0;
  for (int i = 0; i < pr->n_ops; i++)
    if (pr->windowable[i] && pr->recompute_s[i] > 0 && (min_s == 0 || pr->recompute_s[i] < min_s))
      min_s = pr->recompute_s[i];
  return min_s;
}

/* Tier t from tier t - 1 (or from every window): those with a slot at min_s x 2^t. */
static void build_tiers(matcher *m) {
  const lx_stage_problem *pr = m->pr;
  for (int t = 0; t < TIERS; t++) {
    m->tier[t] = lx_malloc(sizeof(int) * (size_t)(pr->n_windows + 1));
    int from = t ? m->n_tier[t - 1] : pr->n_windows;
    double r = ldexp(m->min_s, t);
    m->n_tier[t] = 0;
    for (int k = 0; k < from && m->min_s > 0; k++) {
      int w = t ? m->tier[t - 1][k] : k;
      if (slots_of(&pr->windows[w], r) > 0) m->tier[t][m->n_tier[t]++] = w;
    }
  }
}

static matcher matcher_init(const lx_stage_problem *pr) {
  size_t n = (size_t)(pr->n_instances > 0 ? pr->n_instances : 0) + 1;
  matcher m = {.pr = pr, .order = lx_malloc(sizeof(int) * n), .heap = lx_malloc(sizeof(int) * n)};
  for (int i = 0; i < pr->n_instances; i++)
    m.order[i] = i;
  sort_keys = pr->lo;
  if (pr->n_instances > 0) qsort(m.order, (size_t)pr->n_instances, sizeof *m.order, by_key);
  m.min_s = shortest_window_op(pr);
  build_tiers(&m);
  return m;
}

static void matcher_free(matcher *m) {
  free(m->order);
  free(m->heap);
  for (int t = 0; t < TIERS; t++)
    free(m->tier[t]);
}

/* The highest tier whose windows include every one with a slot for window_s; -1: none does. */
static int tier_for(const matcher *m, double window_s) {
  if (m->min_s <= 0 || window_s < m->min_s) return -1;
  int t = 0;
  while (t + 1 < TIERS && ldexp(m->min_s, t + 1) <= window_s)
    t++;
  return t;
}

/* The first of windows list[k..n) (all windows when list is NULL; both in
 * time order) at or after position `after`: when no instance waits, the
 * windows before the next release have nothing to take (stretches of a
 * schedule where no backward is near, e.g. GPipe's forwards). */
static int first_at(const lx_stage_problem *pr, const int *list, int k, int n, int after) {
  while (k < n) {
    int mid = k + (n - k) / 2;
    if (pr->windows[list ? list[mid] : mid].after < after)
      k = mid + 1;
    else
      n = mid;
  }
  return k;
}

/* Windows in time order; each takes the admissible instances that are due
 * first, as many as fit. For equal-sized jobs with release times and
 * deadlines on a line this serves as many as any assignment can. A window
 * too short to take one instance changes nothing: the next one that can
 * releases and expires the same instances (deadlines differ, so the heap
 * pops the same ones whatever the order of pushes). */
static int match(const matcher *m, double window_s, int *window_of) {
  const lx_stage_problem *pr = m->pr;
  for (int i = 0; i < pr->n_instances; i++)
    window_of[i] = -1;
  if (window_s <= 0 || pr->n_windows == 0 || pr->n_instances == 0) return 0;
  int t = tier_for(m, window_s), n_windows = t >= 0 ? m->n_tier[t] : pr->n_windows;
  const int *list = t >= 0 ? m->tier[t] : NULL;
  heap h = {m->heap, 0, pr->due};
  int next = 0, served = 0;
  for (int k = 0; k < n_windows && (h.n || next < pr->n_instances); k++) {
    if (!h.n) k = first_at(pr, list, k, n_windows, pr->lo[m->order[next]]); /* nothing waits before then */
    if (k >= n_windows) break;
    int w = list ? list[k] : k, at = pr->windows[w].after, slots = slots_of(&pr->windows[w], window_s);
    if (slots <= 0) continue;
    while (next < pr->n_instances && pr->lo[m->order[next]] <= at) {
      if (pr->due[m->order[next]] > at) heap_push(&h, m->order[next]);
      next++;
    }
    while (h.n && pr->due[h.items[0]] <= at)
      heap_pop(&h); /* too late for them now */
    for (; slots > 0 && h.n; slots--, served++)
      window_of[heap_pop(&h)] = w;
  }
  return served;
}

int lx_assign_windows(const lx_stage_problem *pr, double window_s, int *window_of) {
  matcher m = matcher_init(pr);
  int served = match(&m, window_s, window_of);
  matcher_free(&m);
  return served;
}

static int served_count(const lx_stage_problem *pr, const int *window_of) {
  int n = 0;
  for (int i = 0; window_of && i < pr->n_instances; i++)
    n += window_of[i] >= 0;
  return n;
}

static double exposed_of(const lx_stage_problem *pr, opmask rc, opmask w, int served) {
  double n = (double)pr->n_layers * pr->micro_batches;
  return n * seconds_of(pr, rc & ~w) + (n - served) * seconds_of(pr, w);
}

double lx_policy_exposed(const lx_stage_problem *pr, const lx_op_decision *d, const int *window_of) {
  opmask rc, w;
  decisions_to_masks(pr, d, &rc, &w);
  return exposed_of(pr, rc, w, served_count(pr, window_of));
}

int64_t lx_policy_bytes(const lx_stage_problem *pr, const lx_op_decision *d) {
  opmask rc, w;
  decisions_to_masks(pr, d, &rc, &w);
  return memory_of(pr, rc, w);
}

/* ---- a choice, and how to compare two ---------------------------------------- */

typedef struct {
  opmask rc, w;
  double exposed;
  bool valid;
} choice;

static int compare_choices(const lx_stage_problem *pr, const choice *a, const choice *b) {
  if (a->valid != b->valid) return a->valid ? -1 : 1;
  double scale = a->exposed > b->exposed ? a->exposed : b->exposed;
  if (a->exposed < b->exposed - 1e-12 * scale) return -1;
  if (b->exposed < a->exposed - 1e-12 * scale) return 1;
  double ra = seconds_of(pr, a->rc), rb = seconds_of(pr, b->rc);
  if (ra != rb) return ra < rb ? -1 : 1;
  int64_t ma = memory_of(pr, a->rc, a->w), mb = memory_of(pr, b->rc, b->w);
  return (ma > mb) - (ma < mb);
}

static bool fits(const lx_stage_problem *pr, opmask rc, opmask w) {
  return memory_of(pr, rc, w) <= pr->avail_bytes;
}

/* The choice with its windows assigned for real. */
static choice realize(const matcher *m, opmask rc, opmask w, int *window_of) {
  const lx_stage_problem *pr = m->pr;
  int served = match(m, w ? seconds_of(pr, w) : 0, window_of);
  return (choice){rc, w, exposed_of(pr, rc, w, served), fits(pr, rc, w)};
}

/* Everything that can be dropped: the last resort. */
static opmask drop_everything(const lx_stage_problem *pr) {
  opmask rc = 0;
  for (int i = 0; i < pr->n_ops; i++)
    if (pr->drop_bytes[i] > 0) rc |= (opmask)1 << i;
  return close_recompute(pr, rc);
}

/* ---- lynx-heu ---------------------------------------------------------------------- */

enum { GRID = 16, TOP = 8, MAX_ENUM_OPS = 16, MAX_ENUM_WINDOW_OPS = 10 };

/* Instances served as a function of the in-window seconds per instance, on
 * a geometric grid: read at the next grid point up, it never promises more
 * than the exact matching gives. A point is matched when first read (a
 * matching walks every window; many points are never read). */
typedef struct {
  double r[GRID];
  int served[GRID]; /* -1: not matched yet */
  int n;
  const matcher *m;
  int *scratch;
} served_curve;

static void build_curve(const matcher *m, served_curve *c, int *scratch) {
  const lx_stage_problem *pr = m->pr;
  double lo = 0, hi = 0;
  for (int i = 0; i < pr->n_ops; i++)
    if (pr->windowable[i] && pr->recompute_s[i] > 0) {
      hi += pr->recompute_s[i];
      if (lo == 0 || pr->recompute_s[i] < lo) lo = pr->recompute_s[i];
    }
  *c = (served_curve){.n = 0, .m = m, .scratch = scratch};
  if (hi <= 0 || pr->n_windows == 0) return;
  double ratio = GRID > 1 && hi > lo ? pow(hi / lo, 1.0 / (GRID - 1)) : 1;
  for (int g = 0; g < GRID; g++) {
    c->r[g] = g == GRID - 1 ? hi : lo * pow(ratio, g);
    c->served[g] = -1;
  }
  c->n = GRID;
}

static int served_estimate(served_curve *c, double r) {
  if (r <= 0) return 0;
  for (int g = 0; g < c->n; g++)
    if (c->r[g] >= r * (1 - 1e-12)) {
      if (c->served[g] < 0) c->served[g] = match(c->m, c->r[g], c->scratch);
      return c->served[g];
    }
  return 0;
}

typedef struct {
  choice best[TOP];
  int n;
} shortlist;

static void shortlist_add(const lx_stage_problem *pr, shortlist *s, choice c) {
  int at = s->n < TOP ? s->n++ : TOP;
  if (at == TOP && compare_choices(pr, &c, &s->best[TOP - 1]) >= 0) return;
  if (at == TOP) at = TOP - 1;
  s->best[at] = c;
  for (; at > 0 && compare_choices(pr, &s->best[at], &s->best[at - 1]) < 0; at--) {
    choice t = s->best[at];
    s->best[at] = s->best[at - 1];
    s->best[at - 1] = t;
  }
}

/* Every chain-closed window subset of one recompute set that fits, scored
 * with the served curve. */
static void consider_windows(const lx_stage_problem *pr, served_curve *c, opmask rc, shortlist *s) {
  double n = (double)pr->n_layers * pr->micro_batches, all = seconds_of(pr, rc);
  opmask cand = c->n ? window_candidates(pr, rc) : 0;
  int n_cand = __builtin_popcountll(cand);
  for (opmask w = cand;; w = (w - 1) & cand) {
    bool enumerable = n_cand <= MAX_ENUM_WINDOW_OPS || w == cand || w == 0;
    if (enumerable && window_closed(pr, rc, w) && fits(pr, rc, w)) {
      double rw = seconds_of(pr, w);
      shortlist_add(pr, s, (choice){rc, w, n * all - served_estimate(c, rw) * rw, true});
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

/* Instances served per in-window seconds, for the shortlist: its choices
 * often share a window set, and a matching walks every window. */
typedef struct {
  double window_s[TOP + 1];
  int served[TOP + 1], n;
} served_memo;

/* What realize says of a choice, without its assignment (scratch is overwritten). */
static choice score(const matcher *m, served_memo *memo, opmask rc, opmask w, int *scratch) {
  const lx_stage_problem *pr = m->pr;
  double window_s = w ? seconds_of(pr, w) : 0;
  int k = 0;
  while (k < memo->n && memo->window_s[k] != window_s)
    k++;
  int served = k < memo->n ? memo->served[k] : match(m, window_s, scratch);
  if (k == memo->n && k < TOP + 1) memo->window_s[memo->n] = window_s, memo->served[memo->n++] = served;
  return (choice){rc, w, exposed_of(pr, rc, w, served), fits(pr, rc, w)};
}

/* One layer decides for all: every subset of the droppable ops (or, for
 * unusually large blocks, the prefixes by recompute time per byte), every
 * window subset of each, scored by the served curve; the best few are
 * assigned to windows for real and the best of those wins. Nothing fits:
 * drop everything (the repair), and report it. */
static bool solve_heu(const lx_stage_problem *pr, lx_op_decision *d, int *window_of) {
  int *ops = lx_malloc(sizeof(int) * (size_t)pr->n_ops);
  int n = droppable_ops(pr, ops);
  served_curve curve;
  matcher m = matcher_init(pr);
  build_curve(&m, &curve, window_of);
  shortlist s = {.n = 0};
  bool enumerate = n <= MAX_ENUM_OPS;
  uint64_t subsets = enumerate ? (uint64_t)1 << n : (uint64_t)n + 1;
  for (uint64_t k = 0; k < subsets; k++) {
    opmask rc = 0;
    for (int j = 0; j < n; j++)
      if (enumerate ? (k >> j) & 1 : (uint64_t)j < k) rc |= (opmask)1 << ops[j];
    rc = close_recompute(pr, rc);
    if (fits(pr, rc, 0)) consider_windows(pr, &curve, rc, &s);
  }
  free(ops);
  served_memo memo = {.n = 0};
  choice best = score(&m, &memo, drop_everything(pr), 0, window_of);
  for (int i = 0; i < s.n; i++) {
    choice c = score(&m, &memo, s.best[i].rc, s.best[i].w, window_of);
    if (compare_choices(pr, &c, &best) < 0) best = c;
  }
  realize(&m, best.rc, best.w, window_of);
  matcher_free(&m);
  masks_to_decisions(pr, best.rc, best.w, d);
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
  int *rc, *w; /* columns per op, 0 where none */
} op_columns;

/* rc and w columns, the closure rows (a recomputed op's unsaved inputs run
 * again; a window op's recomputed inputs run in the window too) and the
 * memory row. `windows` false fixes every w at 0. */
static op_columns add_op_model(const lx_stage_problem *pr, glp_prob *lp, triplets *t, double rc_cost,
                               double w_cost, bool windows) {
  const lx_graph *g = pr->block;
  op_columns c = {lx_calloc((size_t)pr->n_ops, sizeof(int)), lx_calloc((size_t)pr->n_ops, sizeof(int))};
  for (int i = 0; i < pr->n_ops; i++) {
    if (is_input(pr, i)) continue;
    c.rc[i] = add_binary(lp, rc_cost * ms(pr->recompute_s[i]), true);
    c.w[i] = add_binary(lp, w_cost * ms(pr->recompute_s[i]), windows && pr->windowable[i]);
    int r = add_row(lp, GLP_UP, 0, 0); /* w <= rc */
    put(t, r, c.w[i], 1), put(t, r, c.rc[i], -1);
  }
  for (int i = 0; i < pr->n_ops; i++)
    for (int k = 0; !is_input(pr, i) && k < g->ops[i].n_inputs; k++) {
      int j = g->ops[i].inputs[k];
      if (is_input(pr, j)) continue;
      if (!output_saved(g, j)) { /* rc_i <= rc_j */
        int r = add_row(lp, GLP_UP, 0, 0);
        put(t, r, c.rc[i], 1), put(t, r, c.rc[j], -1);
      }
      int r = add_row(lp, GLP_UP, -1e9, 1); /* w_i + rc_j - w_j <= 1 */
      put(t, r, c.w[i], 1), put(t, r, c.rc[j], 1), put(t, r, c.w[j], -1);
    }
  if (pr->avail_bytes < INT64_MAX) { /* S L (K - sum rc d) + B sum w d <= avail */
    double per = (double)pr->stashed * pr->n_layers;
    int r = add_row(lp, GLP_UP, -1e30, mib(pr->avail_bytes) - per * mib(pr->kept_all));
    for (int i = 0; i < pr->n_ops; i++)
      if (c.rc[i] && pr->drop_bytes[i] > 0) {
        put(t, r, c.rc[i], -per * mib(pr->drop_bytes[i]));
        put(t, r, c.w[i], pr->window_buffers * mib(pr->drop_bytes[i]));
      }
  }
  return c;
}

static void read_masks(const lx_stage_problem *pr, glp_prob *lp, op_columns c, opmask *rc, opmask *w) {
  *rc = *w = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    if (c.rc[i] && glp_mip_col_val(lp, c.rc[i]) > 0.5) *rc |= (opmask)1 << i;
    if (c.w[i] && glp_mip_col_val(lp, c.w[i]) > 0.5) *w |= (opmask)1 << i;
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
  op_columns c = add_op_model(pr, lp, &t, 1, 0, false);
  const char *status = solve_mip(lp, &t, pr->time_limit_s, &stats->gap);
  opmask rc = drop_everything(pr), w = 0;
  int ok = glp_mip_status(lp);
  if (ok == GLP_OPT || ok == GLP_FEAS) read_masks(pr, lp, c, &rc, &w);
  rc = close_recompute(pr, rc);
  matcher m = matcher_init(pr);
  choice best = realize(&m, rc, 0, window_of);
  matcher_free(&m);
  masks_to_decisions(pr, best.rc, 0, d);
  stats->status = status;
  free(c.rc), free(c.w);
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
 * Letting an instance's window work spread over several windows makes this
 * a relaxation of the schedule (which gives each instance one window), so
 * the decisions are then assigned for real, and compared with lynx-heu's:
 * the better of the two is kept (the MILP is warm-started by heu's
 * incumbent, in effect). */
static bool solve_opt(const lx_stage_problem *pr, lx_op_decision *d, int *window_of, lx_policy_stats *stats) {
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  triplets t = {0};
  double n = (double)pr->n_layers * pr->micro_batches;
  op_columns c = add_op_model(pr, lp, &t, n + TIE, -n, true);
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
  opmask rc = drop_everything(pr), w = 0;
  if (ok == GLP_OPT || ok == GLP_FEAS) read_masks(pr, lp, c, &rc, &w);
  rc = close_recompute(pr, rc);
  if (!window_closed(pr, rc, w)) w = 0;
  matcher m = matcher_init(pr);
  choice milp = realize(&m, rc, w, window_of);
  bool heu_ok = solve_heu(pr, d, window_of);
  opmask hrc, hw;
  decisions_to_masks(pr, d, &hrc, &hw);
  choice heu = {hrc, hw, lx_policy_exposed(pr, d, window_of), heu_ok};
  choice best = compare_choices(pr, &milp, &heu) <= 0 ? milp : heu;
  stats->status = best.rc == milp.rc && best.w == milp.w ? status : "heuristic incumbent (MILP no better)";
  realize(&m, best.rc, best.w, window_of);
  matcher_free(&m);
  masks_to_decisions(pr, best.rc, best.w, d);
  free(window_row);
  free(c.rc), free(c.w);
  free_triplets(&t);
  glp_delete_prob(lp);
  return best.valid;
}

/* ---- entry point ------------------------------------------------------------------------ */

bool lx_policy_solve(const lx_ir *ir, lx_recompute_policy policy, const lx_stage_problem *pr,
                     lx_op_decision *d, int *window_of, lx_policy_stats *stats) {
  double start = now_s();
  *stats = (lx_policy_stats){.budget_bytes = pr->avail_bytes, .status = "fixed"};
  int *scratch = window_of ? window_of : lx_malloc(sizeof(int) * (size_t)(pr->n_instances + 1));
  bool ok;
  bool planned =
      policy == LX_RECOMPUTE_CHECKMATE || policy == LX_RECOMPUTE_LYNX_HEU || policy == LX_RECOMPUTE_LYNX_OPT;
  if (planned && fits(pr, 0, 0)) { /* keeping everything fits: nothing is exposed and nothing beats it */
    masks_to_decisions(pr, 0, 0, d);
    for (int i = 0; i < pr->n_instances; i++)
      scratch[i] = -1;
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
    for (int i = 0; i < pr->n_instances; i++)
      scratch[i] = -1;
    ok = lx_policy_bytes(pr, d) <= pr->avail_bytes;
    break;
  }
  stats->search_s = now_s() - start;
  stats->exposed_s = lx_policy_exposed(pr, d, scratch);
  opmask rc, w;
  decisions_to_masks(pr, d, &rc, &w);
  stats->window_s = (double)served_count(pr, scratch) * seconds_of(pr, w);
  stats->used_bytes = lx_policy_bytes(pr, d);
  if (!window_of) free(scratch);
  return ok;
}
