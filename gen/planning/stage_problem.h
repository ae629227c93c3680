/* stage_problem.h — the recompute problem of one stage as sets of ops, and
 * the earliest-deadline-first matching of window work to idle windows
 * (stage_problem.c). What the policies of policy.c share; the problem's
 * public life cycle and measures are in overlap.h. */
#ifndef LX_STAGE_PROBLEM_H
#define LX_STAGE_PROBLEM_H

#include <stdint.h>

#include "planning/overlap.h"

typedef uint64_t lx_opmask; /* a set of block ops; blocks have fewer than 64 */

enum { LX_TIERS = 24 };

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
  int *tier[LX_TIERS], n_tier[LX_TIERS];
  double min_s; /* the shortest windowable op's recompute; 0: none */
} lx_matcher;

bool lx_output_saved(const lx_graph *g, int i);


/* A recomputed op needs its inputs: a producer whose output nobody keeps
 * runs again too. Inputs precede their users: one backward sweep. */
lx_opmask lx_close_recompute(const lx_stage_problem *pr, lx_opmask rc);

/* The ops of rc that may run in a window: windowable, and every recomputed
 * producer they read runs in the window before them. */
lx_opmask lx_window_candidates(const lx_stage_problem *pr, lx_opmask rc);

bool lx_window_closed(const lx_stage_problem *pr, lx_opmask rc, lx_opmask w);

double lx_seconds_of(const lx_stage_problem *pr, lx_opmask m);

/* Block activation bytes: the stash of kept tensors plus the window buffers. */
int64_t lx_memory_of(const lx_stage_problem *pr, lx_opmask rc, lx_opmask w);

void lx_masks_to_decisions(const lx_stage_problem *pr, lx_opmask rc, lx_opmask w, lx_op_decision *d);

void lx_decisions_to_masks(const lx_stage_problem *pr, const lx_op_decision *d, lx_opmask *rc, lx_opmask *w);

lx_matcher lx_matcher_init(const lx_stage_problem *pr);

void lx_matcher_free(lx_matcher *m);

/* Windows in time order; each takes the admissible instances that are due
 * first, as many as fit. For equal-sized jobs with release times and
 * deadlines on a line this serves as many as any assignment can. A window
 * too short to take one instance changes nothing: the next one that can
 * releases and expires the same instances (deadlines differ, so the heap
 * pops the same ones whatever the order of pushes). */
int lx_match_windows(const lx_matcher *m, double window_s, int *window_of);

int lx_served_count(const lx_stage_problem *pr, const int *window_of);

double lx_exposed_of(const lx_stage_problem *pr, lx_opmask rc, lx_opmask w, int served);

#endif
