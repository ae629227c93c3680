/* stage_problem.h — the recompute problem of one stage as sets of ops, and
 * the earliest-deadline-first matching of window work to idle windows
 * (stage_problem.c). What the policies of policy.c share; the problem's
 * public life cycle and measures are in overlap.h. */
#ifndef LX_STAGE_PROBLEM_H
#define LX_STAGE_PROBLEM_H

#include <stdint.h>

#include "planning/overlap.h"

enum { LX_TIERS = 24 };

/* The instances in order of release (lo), the windows in tiers, and the
 * matching's scratch: what every matching of one stage problem shares, so a
 * policy that tries many recompute sets sorts and filters once. lynx-heu
 * matches a few hundred window sets a stage, and a long pipeline has tens
 * of thousands of windows, most of them tensor-parallel all-reduces too
 * short for the ops at hand: tier t lists, in time order, the windows with
 * room for min_s x 2^t seconds, so a matching whose shortest op takes r
 * seconds walks the highest tier with min_s x 2^t <= r and skips only
 * windows it could not use. */
typedef struct {
  const lx_stage_problem *pr;
  int *order, *heap, *held;
  int *progress; /* per instance: how many of the window ops the matching has placed */
  int *tier[LX_TIERS], n_tier[LX_TIERS];
  double min_s; /* the shortest windowable op's recompute; 0: none */
} lx_matcher;

/* Sorts v[0..n) in place and returns its running sums (n + 1 of them, the
 * caller frees them): sum[k] = v[k] + ... + v[n - 1] (from_end) or
 * v[0] + ... + v[k - 1]. */
double *lx_sorted_sums(double *v, int n, bool from_end);
/* The first of the n sorted values that is at least x. */
int lx_first_at_least(const double *v, int n, double x);
/* The first of pr's windows (sorted by `after`) at or after position `after`. */
int lx_first_window(const lx_stage_problem *pr, int after);

/* What a stage offloads: the ops of `whole` entirely, and op `split` (-1:
 * none; it is recomputed on demand, overlap.h) token-wise, its first
 * `pieces` of LX_TOKEN_PIECES row pieces. */
typedef struct {
  lx_opmask whole;
  int split, pieces;
} lx_offload;

extern const lx_offload lx_no_offload;
static inline lx_offload lx_offload_whole(lx_opmask whole) { return (lx_offload){whole, -1, 0}; }

/* A recomputed op needs its inputs: a producer whose output nobody keeps
 * runs again too. Inputs precede their users: one backward sweep. */
lx_opmask lx_close_recompute(const lx_stage_problem *pr, lx_opmask rc);

/* The ops of rc that may run in a window: windowable, and every recomputed
 * producer they read runs in the window before them. */
lx_opmask lx_window_candidates(const lx_stage_problem *pr, lx_opmask rc);

/* Whether every op of rc that an op of w reads is in w too. */
bool lx_window_closed(const lx_stage_problem *pr, lx_opmask rc, lx_opmask w);

/* The ops whose outputs the ops of w read: none of them may be offloaded, or
 * the recompute in a window would wait for the copy back (overlap.h). */
lx_opmask lx_window_inputs(const lx_stage_problem *pr, lx_opmask w);

double lx_seconds_of(const lx_stage_problem *pr, lx_opmask m);

/* Block activation bytes of recompute set rc (w of it in windows) and
 * offload `of`: the stash of kept tensors plus the window buffers. */
int64_t lx_memory_of(const lx_stage_problem *pr, lx_opmask rc, lx_opmask w, lx_offload of);

/* What one layer instance of `of` copies each way; the compute stream's
 * seconds per iteration that its copies cost, less the recompute its split
 * op saves (overlap.h); whether its host copies fit the host memory. */
int64_t lx_offloaded_bytes(const lx_stage_problem *pr, lx_offload of);
double lx_offload_cost(const lx_stage_problem *pr, lx_offload of);
bool lx_host_fits(const lx_stage_problem *pr, lx_offload of);

void lx_masks_to_decisions(const lx_stage_problem *pr, lx_opmask rc, lx_opmask w, lx_offload of,
                           lx_op_decision *d);

void lx_decisions_to_masks(const lx_stage_problem *pr, const lx_op_decision *d, lx_opmask *rc, lx_opmask *w,
                           lx_offload *of);

lx_matcher lx_matcher_init(const lx_stage_problem *pr);

void lx_matcher_free(lx_matcher *m);

/* Windows in time order; each takes the window ops (the set w, in op
 * order) of the admissible instances that are due first, op after op, as
 * many as fit: an instance may run its first ops in one window and the next
 * ones in later windows (op-granular placement), and what no window took on
 * demand. Fills window_of (may be NULL; lx_placement_entries: the window of
 * each instance's op, or -1) and returns the in-window seconds served,
 * summed over the instances. When an instance's ops fit one window whole
 * this is the earliest-deadline-first matching of equal jobs, which serves
 * as many as any assignment can. */
double lx_match_windows(const lx_matcher *m, lx_opmask w, int *window_of);

/* The in-window seconds a placement serves (window_of may be NULL). */
double lx_covered_seconds(const lx_stage_problem *pr, const int *window_of);

/* N x the seconds of rc (on demand and in windows) - what the windows served. */
double lx_exposed_of(const lx_stage_problem *pr, lx_opmask rc, double covered_s);

/* ---- window_room.c: the most the windows can serve a window set ---------- */

typedef struct {
  int rank[64];        /* per op: its place by recompute time, shortest first */
  double sorted_s[64]; /* the ops' recompute times in that order */
  double fitting[66];  /* [g + 1]: the capacity of the windows that fit the op of rank g */
  /* group g: the instances whose largest admissible window fits the g shortest ops; their windows'
   * capacity summed (room), in increasing order, and the sums below each */
  double *room[65], *below[65];
  int count[65], groups;
} lx_window_room;

lx_window_room lx_window_room_init(const lx_stage_problem *pr);
void lx_window_room_free(lx_window_room *r);
/* At least what lx_match_windows serves window set w, summed over the instances. */
double lx_most_served(const lx_stage_problem *pr, const lx_window_room *r, lx_opmask w);

#endif
