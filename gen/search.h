/* search.h — plan search over the parallel plan fields a model leaves open. */
#ifndef LX_SEARCH_H
#define LX_SEARCH_H

#include <stdio.h>

#include "overlap.h"

typedef struct {
  lx_recompute_policy policy;
  lx_partition_kind partition;
  const char *profile;     /* NULL: the datasheet model */
  double gpu_memory_bytes; /* 0: the datasheet's */
  int global_batch;        /* sequences per step; the search needs it */
} lx_search_request;

typedef struct {
  int tp, pp, dp, micro_batch;
  double time_s, mfu, peak_bytes;
  bool fits;
  char why[96]; /* why it lost, when it cannot run */
} lx_candidate;

/* Tries every feasible (tp, pp, dp, micro_batch) the analysed `ir` leaves
 * open (its set fields stay fixed); prints the best candidates and why the
 * others lost to `explain` (may be NULL). Returns the number of candidates
 * tried, 0 when none fits; `best` is the fastest that fits. */
int lx_search_plan(const lx_ir *ir, const lx_search_request *req, lx_candidate *best, FILE *explain);

#endif
