/* stage_problem.c — a stage's recompute problem (stage_problem.h, overlap.h):
 * its ops, their costs and bytes, sets of them, and the matching of window
 * work to the stage's idle windows that every policy measures by. */
#include "planning/stage_problem.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "planning/passes.h"

static bool has(lx_opmask m, int i) { return (m >> i) & 1; }

/* ---- the problem ------------------------------------------------------------ */

/* Ops with a tensor-parallel collective around their forward stay out of
 * windows: the recompute stream issues no communication. */
static bool has_tp_collective(const lx_ir *ir, const lx_op *op) {
  lx_tp_collectives c = lx_tp_collectives_of(ir, op, false);
  return c.gather_before || c.reduce_after;
}

/* The pieces op i may be cut into: as many as divide its kv heads, each priced by its own calls. */
static void set_piece_options(lx_stage_problem *pr, const lx_ir *ir, const lx_cost_model *cm, int i) {
  int most = lx_head_pieces_max(ir, i);
  for (int p = 1; p <= LX_MAX_PIECES && p <= most; p++)
    if (most % p == 0)
      pr->piece_options_s[i][p] = lx_cost_op_fwd_heads(cm, ir, &ir->block, &ir->block.ops[i], most / p);
}

void lx_stage_problem_init(lx_stage_problem *pr, const lx_ir *ir, const lx_cost_model *cm, int n_layers,
                           int64_t stashed_layers, int micro_batches, int64_t avail_bytes) {
  const lx_graph *g = &ir->block;
  size_t n = (size_t)g->n_ops;
  *pr = (lx_stage_problem){.block = g,
                           .n_ops = g->n_ops,
                           .n_layers = n_layers,
                           .stashed_layers = stashed_layers,
                           .micro_batches = micro_batches,
                           .avail_bytes = avail_bytes,
                           .window_buffers = 2};
  pr->recompute_s = lx_calloc(n, sizeof(double));
  pr->drop_bytes = lx_calloc(n, sizeof(int64_t));
  pr->windowable = lx_calloc(n, sizeof(bool));
  pr->offload_bytes = lx_calloc(n, sizeof(int64_t));
  pr->splittable = lx_calloc(n, sizeof(bool));
  pr->pieces = lx_malloc(sizeof(int) * (n + 1));
  pr->piece_options_s = lx_calloc(n + 1, sizeof *pr->piece_options_s);
  pr->host_bytes_per_s = cm->gpu.host_bytes_per_s;
  pr->host_avail_bytes = (int64_t)(0.75 * cm->gpu.host_memory_bytes); /* the rest: OS, data, pinned limits */
  for (int i = 0; i < g->n_ops; i++) {
    const lx_op *op = &g->ops[i];
    if (op->kind != LX_OP_INPUT) {
      pr->layer_fwd_s += lx_cost_op_fwd(cm, ir, g, op);
      pr->layer_bwd_s += lx_cost_op_bwd(cm, ir, g, op);
    }
    pr->kept_all += lx_saved_bytes(g, i); /* lx_kept_bytes with nothing dropped */
    if (lx_offloadable(g, i)) pr->offload_bytes[i] = lx_saved_bytes(g, i);
    pr->splittable[i] = lx_token_splittable(ir, i);
    pr->pieces[i] = 1;
    if (lx_never_dropped(g, i)) continue;
    pr->recompute_s[i] = lx_cost_op_fwd(cm, ir, g, op);
    set_piece_options(pr, ir, cm, i);
    pr->drop_bytes[i] = lx_saved_bytes(g, i);
    pr->windowable[i] = lx_output_saved(g, i) && !has_tp_collective(ir, op);
  }
}

static int by_value(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

double *lx_sorted_sums(double *v, int n, bool from_end) {
  qsort(v, (size_t)n, sizeof *v, by_value);
  double *sum = lx_malloc(sizeof(double) * (size_t)(n + 1));
  if (from_end) {
    sum[n] = 0;
    for (int k = n - 1; k >= 0; k--)
      sum[k] = sum[k + 1] + v[k];
  } else {
    sum[0] = 0;
    for (int k = 0; k < n; k++)
      sum[k + 1] = sum[k] + v[k];
  }
  return sum;
}

/* First window at or after position `after` (windows are sorted). */
int lx_first_window(const lx_stage_problem *pr, int after) {
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

int lx_first_at_least(const double *v, int n, double x) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (v[mid] < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The instances' prefetch room (overlap.h), sorted, with its running sums. */
static void set_prefetch_room(lx_stage_problem *pr) {
  free(pr->room_s);
  free(pr->room_below);
  int ops = 0;
  for (int i = 0; i < pr->n_ops; i++)
    ops += pr->block->ops[i].kind != LX_OP_INPUT;
  double op_s = (pr->layer_fwd_s + pr->layer_bwd_s) / (2.0 * (ops > 0 ? ops : 1));
  pr->room_s = lx_malloc(sizeof(double) * (size_t)(pr->n_instances + 1));
  for (int i = 0; i < pr->n_instances; i++) {
    int between = pr->lo[i] >= 0 ? pr->due[i] - pr->lo[i] - 1 : 0;
    pr->room_s[i] = (between > 0 ? between : 0) * op_s;
  }
  pr->room_below = lx_sorted_sums(pr->room_s, pr->n_instances, false);
}

/* The capacity of the stage's typical window: the median. */
static double median_capacity(const lx_stage_problem *pr) {
  if (pr->n_windows == 0) return 0;
  double *capacity = lx_malloc(sizeof *capacity * (size_t)pr->n_windows);
  for (int k = 0; k < pr->n_windows; k++)
    capacity[k] = pr->windows[k].capacity;
  qsort(capacity, (size_t)pr->n_windows, sizeof *capacity, by_value);
  double median = capacity[pr->n_windows / 2];
  free(capacity);
  return median;
}

/* A window op too long for the typical window is cut into the fewest pieces
 * that fit it, so that the many short windows (tensor-parallel all-reduces)
 * take its pieces one after another; where no cut fits, it stays whole
 * (each piece launches kernels of its own). */
static void pick_pieces(lx_stage_problem *pr) {
  double typical = median_capacity(pr);
  int units = pr->n_ops;
  for (int i = 0; i < pr->n_ops; i++) {
    if (!pr->windowable[i] || pr->recompute_s[i] <= typical) continue;
    for (int p = 2; p <= LX_MAX_PIECES; p++)
      if (pr->piece_options_s[i][p] > 0 && pr->piece_options_s[i][p] <= typical &&
          units + p - 1 <= LX_MAX_PLACED) {
        pr->pieces[i] = p, pr->recompute_s[i] = p * pr->piece_options_s[i][p], units += p - 1;
        break;
      }
  }
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
  set_prefetch_room(pr);
  pick_pieces(pr);
}

bool lx_stage_problem_keep_outputs(lx_stage_problem *pr, const lx_ir *ir, const lx_cost_model *cm) {
  const lx_graph *g = pr->block;
  for (int i = 0; i < g->n_ops; i++) {
    const lx_op *op = &g->ops[i];
    if (lx_never_dropped(g, i) || !lx_output_saved(g, i) || !lx_recompute_may_keep_output(op)) continue;
    double share = lx_cost_internals_share(cm, ir, g, op);
    pr->recompute_s[i] *= share;
    for (int p = 0; p <= LX_MAX_PIECES; p++)
      pr->piece_options_s[i][p] *= share;
    pr->drop_bytes[i] = lx_internal_bytes(op);
    pr->outputs_kept |= (lx_opmask)1 << i;
  }
  return pr->outputs_kept != 0;
}

void lx_stage_problem_free(lx_stage_problem *pr) {
  free(pr->recompute_s);
  free(pr->drop_bytes);
  free(pr->windowable);
  free(pr->offload_bytes);
  free(pr->splittable);
  free(pr->pieces);
  free(pr->piece_options_s);
  free(pr->lo);
  free(pr->due);
  free(pr->room_s);
  free(pr->room_below);
  memset(pr, 0, sizeof *pr);
}

/* ---- sets of ops ---------------------------------------------------------- */

/* A recomputed op needs its inputs: a producer whose output nobody keeps
 * runs again too. Inputs precede their users: one backward sweep. */
lx_opmask lx_close_recompute(const lx_stage_problem *pr, lx_opmask rc) {
  const lx_graph *g = pr->block;
  for (int i = g->n_ops - 1; i >= 0; i--) {
    if (!has(rc, i)) continue;
    for (int k = 0; k < g->ops[i].n_inputs; k++) {
      int j = g->ops[i].inputs[k];
      if (!has(rc, j) && !lx_never_dropped(pr->block, j) && !lx_output_saved(g, j)) rc |= (lx_opmask)1 << j;
    }
  }
  return rc;
}

/* The ops of rc that may run in a window: windowable, and every recomputed
 * producer they read runs in the window before them. */
lx_opmask lx_window_candidates(const lx_stage_problem *pr, lx_opmask rc) {
  const lx_graph *g = pr->block;
  lx_opmask w = 0;
  for (int i = 0; i < g->n_ops; i++) {
    if (!has(rc, i) || !pr->windowable[i]) continue;
    bool ok = true;
    for (int k = 0; k < g->ops[i].n_inputs; k++) {
      int j = g->ops[i].inputs[k];
      if (has(rc, j) && !has(w, j)) ok = false;
    }
    if (ok) w |= (lx_opmask)1 << i;
  }
  return w;
}

/* The ops of a set in increasing order (the sums below add in op order, so
 * they are the same numbers however often they are taken). */
static int next_op(lx_opmask *m) {
  int i = __builtin_ctzll(*m);
  *m &= *m - 1;
  return i;
}

bool lx_window_closed(const lx_stage_problem *pr, lx_opmask rc, lx_opmask w) {
  return !(lx_window_inputs(pr, w) & rc & ~w);
}

/* The searches call this for every window set they weigh: it visits w's ops alone. */
lx_opmask lx_window_inputs(const lx_stage_problem *pr, lx_opmask w) {
  const lx_graph *g = pr->block;
  lx_opmask read = 0;
  for (lx_opmask m = w; m;) {
    const lx_op *op = &g->ops[next_op(&m)];
    for (int k = 0; k < op->n_inputs; k++)
      read |= (lx_opmask)1 << op->inputs[k];
  }
  return read;
}

double lx_seconds_of(const lx_stage_problem *pr, lx_opmask m) {
  double t = 0;
  while (m)
    t += pr->recompute_s[next_op(&m)];
  return t;
}

static int64_t bytes_of(const lx_stage_problem *pr, lx_opmask m) {
  int64_t b = 0;
  while (m)
    b += pr->drop_bytes[next_op(&m)];
  return b;
}

const lx_offload lx_no_offload = {0, -1, 0};

int64_t lx_offloaded_bytes(const lx_stage_problem *pr, lx_offload of) {
  lx_op_decision split = {.offload = true, .recompute = true, .host_pieces = of.pieces};
  int64_t b = of.split >= 0 ? lx_token_hosted(&split, pr->offload_bytes[of.split]) : 0;
  while (of.whole)
    b += pr->offload_bytes[next_op(&of.whole)];
  return b;
}

/* Block activation bytes: the stash of kept tensors plus the window buffers
 * (which hold the offloaded tensors too, the split one whole). */
int64_t lx_memory_of(const lx_stage_problem *pr, lx_opmask rc, lx_opmask w, lx_offload of) {
  int64_t split = of.split >= 0 ? pr->offload_bytes[of.split] : 0;
  return pr->stashed_layers * (pr->kept_all - bytes_of(pr, rc) - bytes_of(pr, of.whole)) +
         (int64_t)pr->window_buffers *
             (bytes_of(pr, w) + lx_offloaded_bytes(pr, lx_offload_whole(of.whole)) + split);
}

/* What the prefetches of copy seconds each cost the backwards: the sum over
 * instances of max(0, copy - room), from the sorted rooms. */
static double prefetch_stall(const lx_stage_problem *pr, double copy) {
  double n = (double)pr->n_layers * pr->micro_batches;
  if (!pr->room_s) return n * (copy > pr->layer_bwd_s ? copy - pr->layer_bwd_s : 0);
  int short_of = lx_first_at_least(pr->room_s, pr->n_instances, copy); /* instances with less room */
  return short_of * copy - pr->room_below[short_of];
}

double lx_offload_cost(const lx_stage_problem *pr, lx_offload of) {
  if (!of.whole && of.split < 0) return 0;
  double n = (double)pr->n_layers * pr->micro_batches;
  double copy = (double)lx_offloaded_bytes(pr, of) / pr->host_bytes_per_s;
  double out = n * (copy > pr->layer_fwd_s ? copy - pr->layer_fwd_s : 0);
  double saved = of.split >= 0 ? n * pr->recompute_s[of.split] * of.pieces / LX_TOKEN_PIECES : 0;
  return out + prefetch_stall(pr, copy) - saved;
}

bool lx_host_fits(const lx_stage_problem *pr, lx_offload of) {
  return pr->stashed_layers * lx_offloaded_bytes(pr, of) <= pr->host_avail_bytes;
}

void lx_masks_to_decisions(const lx_stage_problem *pr, lx_opmask rc, lx_opmask w, lx_offload of,
                           lx_op_decision *d) {
  for (int i = 0; i < pr->n_ops; i++)
    d[i] = (lx_op_decision){.drop_output = has(rc, i) && !has(pr->outputs_kept, i),
                            .drop_internals = has(rc, i),
                            .in_window = has(w, i)};
  lx_recompute_closure(pr->block, d);
  for (int i = 0; i < pr->n_ops; i++) {
    d[i].in_window &= d[i].recompute;
    d[i].offload = has(of.whole, i) && !d[i].recompute && pr->offload_bytes[i] > 0;
    d[i].window_pieces = pr->pieces[i] > 1 ? pr->pieces[i] : 0; /* the placement's layout, windowed or not */
  }
  if (of.split >= 0 && d[of.split].recompute && pr->splittable[of.split] && of.pieces > 0 &&
      of.pieces < LX_TOKEN_PIECES) {
    d[of.split].offload = true, d[of.split].in_window = false;
    d[of.split].host_pieces = of.pieces;
  }
}

void lx_decisions_to_masks(const lx_stage_problem *pr, const lx_op_decision *d, lx_opmask *rc, lx_opmask *w,
                           lx_offload *of) {
  *rc = *w = 0;
  *of = lx_no_offload;
  for (int i = 0; i < pr->n_ops; i++) {
    if (d[i].recompute) *rc |= (lx_opmask)1 << i;
    if (d[i].recompute && d[i].in_window) *w |= (lx_opmask)1 << i;
    if (d[i].offload && !d[i].recompute) of->whole |= (lx_opmask)1 << i;
    if (lx_token_split(&d[i])) of->split = i, of->pieces = d[i].host_pieces;
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

/* Whether an op of op_s seconds fits in `left` seconds of a window (up to
 * rounding: a window measured as k ops long takes k). */
static bool fits_in(double op_s, double left) { return op_s <= left * (1 + 1e-9); }

static double shortest_window_op(const lx_stage_problem *pr) {
  double min_s = 0;
  for (int i = 0; i < pr->n_ops; i++)
    if (pr->windowable[i] && pr->recompute_s[i] > 0 && (min_s == 0 || lx_unit_seconds(pr, i) < min_s))
      min_s = lx_unit_seconds(pr, i);
  return min_s;
}

/* Tier t from tier t - 1 (or from every window): those with a slot at min_s x 2^t. */
static void build_tiers(lx_matcher *m) {
  const lx_stage_problem *pr = m->pr;
  for (int t = 0; t < LX_TIERS; t++) {
    m->tier[t] = lx_malloc(sizeof(int) * (size_t)(pr->n_windows + 1));
    int from = t ? m->n_tier[t - 1] : pr->n_windows;
    double r = ldexp(m->min_s, t);
    m->n_tier[t] = 0;
    for (int k = 0; k < from && m->min_s > 0; k++) {
      int w = t ? m->tier[t - 1][k] : k;
      if (fits_in(r, pr->windows[w].capacity)) m->tier[t][m->n_tier[t]++] = w;
    }
  }
}

lx_matcher lx_matcher_init(const lx_stage_problem *pr) {
  size_t n = (size_t)(pr->n_instances > 0 ? pr->n_instances : 0) + 1;
  lx_matcher m = {.pr = pr,
                  .order = lx_malloc(sizeof(int) * n),
                  .heap = lx_malloc(sizeof(int) * n),
                  .held = lx_malloc(sizeof(int) * n),
                  .progress = lx_malloc(sizeof(int) * n)};
  for (int i = 0; i < pr->n_instances; i++)
    m.order[i] = i;
  sort_keys = pr->lo;
  if (pr->n_instances > 0) qsort(m.order, (size_t)pr->n_instances, sizeof *m.order, by_key);
  m.min_s = shortest_window_op(pr);
  build_tiers(&m);
  return m;
}

void lx_matcher_free(lx_matcher *m) {
  free(m->order);
  free(m->heap);
  free(m->held);
  free(m->progress);
  for (int t = 0; t < LX_TIERS; t++)
    free(m->tier[t]);
}

/* The highest tier whose windows include every one with room for op_s; -1: none does. */
static int tier_for(const lx_matcher *m, double op_s) {
  if (m->min_s <= 0 || op_s < m->min_s) return -1;
  int t = 0;
  while (t + 1 < LX_TIERS && ldexp(m->min_s, t + 1) <= op_s)
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

int lx_first_unit(const lx_stage_problem *pr, int op) {
  int units = 0;
  for (int i = 0; i < op; i++)
    units += pr->pieces[i];
  return units;
}

int lx_stage_units(const lx_stage_problem *pr) { return lx_first_unit(pr, pr->n_ops); }

double lx_unit_seconds(const lx_stage_problem *pr, int op) { return pr->recompute_s[op] / pr->pieces[op]; }

size_t lx_placement_entries(const lx_stage_problem *pr) {
  return (size_t)(pr->n_instances > 0 ? pr->n_instances : 0) * (size_t)lx_stage_units(pr) + 1;
}

/* The window ops' pieces of a matching, in op order: their placement
 * entries in an instance's and their seconds. */
typedef struct {
  int n, units, unit[LX_MAX_PLACED];
  double s[LX_MAX_PLACED], shortest;
} op_sequence;

static op_sequence sequence_of(const lx_stage_problem *pr, lx_opmask w) {
  op_sequence q = {.n = 0, .units = lx_stage_units(pr)};
  for (lx_opmask m = w; m;) {
    int i = next_op(&m);
    for (int k = 0, first = lx_first_unit(pr, i); k < pr->pieces[i]; k++) {
      q.unit[q.n] = first + k, q.s[q.n++] = lx_unit_seconds(pr, i);
      if (q.n == 1 || lx_unit_seconds(pr, i) < q.shortest) q.shortest = lx_unit_seconds(pr, i);
    }
  }
  return q;
}

/* Window `win` (`left` seconds of it) takes the next ops of the waiting
 * instances, due first; those with ops left wait on. Returns the seconds it took. */
static double serve_window(const lx_matcher *m, heap *h, const op_sequence *q, int win, int *window_of) {
  double left = m->pr->windows[win].capacity, served = 0;
  int n_held = 0;
  while (h->n && fits_in(q->shortest, left)) {
    int inst = heap_pop(h), j = m->progress[inst];
    for (; j < q->n && fits_in(q->s[j], left); j++) {
      left -= q->s[j], served += q->s[j];
      if (window_of) window_of[(size_t)inst * (size_t)q->units + (size_t)q->unit[j]] = win;
    }
    m->progress[inst] = j;
    if (j < q->n) m->held[n_held++] = inst;
  }
  for (int k = 0; k < n_held; k++)
    heap_push(h, m->held[k]);
  return served;
}

/* Every op of every instance on demand. */
static void clear_placement(const lx_stage_problem *pr, int *window_of) {
  size_t entries = lx_placement_entries(pr) - 1;
  for (size_t e = 0; window_of && e < entries; e++)
    window_of[e] = -1;
}

double lx_match_windows(const lx_matcher *m, lx_opmask w, int *window_of) {
  const lx_stage_problem *pr = m->pr;
  clear_placement(pr, window_of);
  op_sequence q = sequence_of(pr, w);
  if (q.n == 0 || pr->n_windows == 0 || pr->n_instances == 0) return 0;
  for (int i = 0; i < pr->n_instances; i++)
    m->progress[i] = 0;
  int t = tier_for(m, q.shortest), n_windows = t >= 0 ? m->n_tier[t] : pr->n_windows;
  const int *list = t >= 0 ? m->tier[t] : NULL;
  heap h = {m->heap, 0, pr->due};
  int next = 0;
  double served = 0;
  for (int k = 0; k < n_windows && (h.n || next < pr->n_instances); k++) {
    if (!h.n) k = first_at(pr, list, k, n_windows, pr->lo[m->order[next]]); /* nothing waits before then */
    if (k >= n_windows) break;
    int win = list ? list[k] : k, at = pr->windows[win].after;
    if (!fits_in(q.shortest, pr->windows[win].capacity)) continue;
    while (next < pr->n_instances && pr->lo[m->order[next]] <= at) {
      if (pr->due[m->order[next]] > at) heap_push(&h, m->order[next]);
      next++;
    }
    while (h.n && pr->due[h.items[0]] <= at)
      heap_pop(&h); /* too late for them now: what is left runs on demand */
    served += serve_window(m, &h, &q, win, window_of);
  }
  return served;
}

double lx_assign_windows(const lx_stage_problem *pr, lx_opmask w, int *window_of) {
  if (!w) { /* nothing to place: no matcher to build */
    clear_placement(pr, window_of);
    return 0;
  }
  lx_matcher m = lx_matcher_init(pr);
  double served = lx_match_windows(&m, w, window_of);
  lx_matcher_free(&m);
  return served;
}

double lx_covered_seconds(const lx_stage_problem *pr, const int *window_of) {
  double s = 0;
  size_t units = (size_t)lx_stage_units(pr);
  for (int i = 0; window_of && i < pr->n_instances; i++)
    for (int k = 0, unit = 0; k < pr->n_ops; k++)
      for (int piece = 0; piece < pr->pieces[k]; piece++, unit++)
        if (window_of[(size_t)i * units + (size_t)unit] >= 0) s += lx_unit_seconds(pr, k);
  return s;
}

double lx_exposed_of(const lx_stage_problem *pr, lx_opmask rc, double covered_s) {
  double n = (double)pr->n_layers * pr->micro_batches, exposed = n * lx_seconds_of(pr, rc) - covered_s;
  return exposed > 0 ? exposed : 0;
}

double lx_policy_exposed(const lx_stage_problem *pr, const lx_op_decision *d, const int *window_of) {
  lx_opmask rc, w;
  lx_offload of;
  lx_decisions_to_masks(pr, d, &rc, &w, &of);
  return lx_exposed_of(pr, rc, lx_covered_seconds(pr, window_of)) + lx_offload_cost(pr, of);
}

int64_t lx_policy_bytes(const lx_stage_problem *pr, const lx_op_decision *d) {
  lx_opmask rc, w;
  lx_offload of;
  lx_decisions_to_masks(pr, d, &rc, &w, &of);
  return lx_memory_of(pr, rc, w, of);
}
