/* window_room.c — the most a stage's windows can serve a window set: the
 * bound by which lynx-heu matches its window sets best first (policy.c),
 * so that only the sets that can still win are matched for real.
 *
 * Two bounds, the smaller holds. The windows: a set's ops (or their pieces)
 * run whole in one window each, so windows with less room than its shortest
 * piece serve it nothing and the others at most their capacity (summed once
 * per op rank, the ops sorted by a piece's recompute time). The instances:
 * the matching (lx_match_windows) runs an instance's window ops in op order,
 * so once an op's piece fits none of the instance's admissible windows,
 * neither it nor any op after it is served there; an instance is served at
 * most that prefix of the set, and at most the capacity of its admissible
 * windows.
 * Instances are grouped by how many ops (shortest first) fit their largest
 * window; within a group their rooms are sorted with running sums, so a set
 * is bounded in O(ops x (ops + log instances)). */
#include <math.h>
#include <stdlib.h>

#include "alloc.h"
#include "planning/stage_problem.h"

/* The windows' capacities by position in a bottom-up segment tree (leaves
 * at [n, 2n)), for the largest of a range of them. */
static double *range_max_init(const lx_stage_problem *pr) {
  int n = pr->n_windows;
  double *tree = lx_malloc(sizeof(double) * (size_t)(2 * n + 1));
  for (int k = 0; k < n; k++)
    tree[n + k] = pr->windows[k].capacity;
  for (int k = n - 1; k > 0; k--)
    tree[k] = fmax(tree[2 * k], tree[2 * k + 1]);
  return tree;
}

/* The largest capacity of windows [a, b) of n; 0 where there are none. */
static double largest(const double *tree, int n, int a, int b) {
  double most = 0;
  for (a += n, b += n; a < b; a /= 2, b /= 2) {
    if (a & 1) most = fmax(most, tree[a++]);
    if (b & 1) most = fmax(most, tree[--b]);
  }
  return most;
}

/* Ops by the recompute time of one piece (a head-split op's pieces run one
 * window each), shortest first (ties by index): each op's place. */
static void rank_ops(const lx_stage_problem *pr, lx_window_room *r) {
  int *order = lx_malloc(sizeof(int) * (size_t)(pr->n_ops + 1));
  for (int i = 0; i < pr->n_ops; i++) {
    int k = i;
    for (; k > 0 && lx_unit_seconds(pr, order[k - 1]) > lx_unit_seconds(pr, i); k--)
      order[k] = order[k - 1];
    order[k] = i;
  }
  for (int k = 0; k < pr->n_ops; k++) {
    r->rank[order[k]] = k;
    r->sorted_s[k] = lx_unit_seconds(pr, order[k]);
  }
  free(order);
}

/* How many ops (shortest first) fit a window of `capacity`: generous by the matching's tolerance. */
static int ops_fitting(const lx_window_room *r, int n_ops, double capacity) {
  int g = 0;
  while (g < n_ops && r->sorted_s[g] <= capacity * (1 + 1e-9))
    g++;
  return g;
}

lx_window_room lx_window_room_init(const lx_stage_problem *pr) {
  lx_window_room r = {.groups = pr->n_ops + 1};
  rank_ops(pr, &r);
  double *by_position = lx_malloc(sizeof(double) * (size_t)(pr->n_windows + 1));
  by_position[0] = 0;
  for (int k = 0; k < pr->n_windows; k++) {
    double capacity = pr->windows[k].capacity;
    by_position[k + 1] = by_position[k] + capacity;
    r.fitting[ops_fitting(&r, pr->n_ops, capacity)] += capacity;
  }
  for (int g = pr->n_ops - 1; g >= 0; g--) /* a window that fits g + 1 ops fits the g-th */
    r.fitting[g] += r.fitting[g + 1];
  double *tree = range_max_init(pr);
  int *group = lx_malloc(sizeof(int) * (size_t)(pr->n_instances + 1));
  double *room = lx_malloc(sizeof(double) * (size_t)(pr->n_instances + 1));
  for (int i = 0; i < pr->n_instances; i++) {
    bool admits = pr->n_windows && pr->due[i] >= 0; /* lo < 0: from the first window on */
    int a = admits ? lx_first_window(pr, pr->lo[i]) : 0, b = admits ? lx_first_window(pr, pr->due[i]) : 0;
    room[i] = by_position[b] - by_position[a];
    group[i] = ops_fitting(&r, pr->n_ops, largest(tree, pr->n_windows, a, b));
    r.count[group[i]]++;
  }
  for (int g = 0; g <= pr->n_ops; g++) {
    r.room[g] = lx_malloc(sizeof(double) * (size_t)(r.count[g] + 1));
    r.count[g] = 0;
  }
  for (int i = 0; i < pr->n_instances; i++)
    r.room[group[i]][r.count[group[i]]++] = room[i];
  for (int g = 0; g <= pr->n_ops; g++)
    r.below[g] = lx_sorted_sums(r.room[g], r.count[g], false);
  free(tree);
  free(group);
  free(room);
  free(by_position);
  return r;
}

void lx_window_room_free(lx_window_room *r) {
  for (int g = 0; g < r->groups; g++) {
    free(r->room[g]);
    free(r->below[g]);
  }
}

double lx_most_served(const lx_stage_problem *pr, const lx_window_room *r, lx_opmask w) {
  int shortest = pr->n_ops; /* the rank of w's shortest op */
  double instances = 0;
  for (lx_opmask m = w; m; m &= m - 1)
    if (r->rank[__builtin_ctzll(m)] < shortest) shortest = r->rank[__builtin_ctzll(m)];
  for (int g = 1; g < r->groups; g++) {
    if (!r->count[g]) continue;
    double prefix = 0; /* w's ops, in op order, up to the first that fits none of the group's windows */
    for (lx_opmask m = w; m && r->rank[__builtin_ctzll(m)] < g; m &= m - 1)
      prefix += pr->recompute_s[__builtin_ctzll(m)];
    int k = lx_first_at_least(r->room[g], r->count[g], prefix);
    instances += r->below[g][k] + prefix * (r->count[g] - k); /* sum of min(prefix, room) */
  }
  double windows = shortest < pr->n_ops ? r->fitting[shortest + 1] : 0;
  return instances < windows ? instances : windows;
}
