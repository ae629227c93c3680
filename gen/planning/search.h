/* search.h — plan search over the parallel plan fields a model leaves open. */
#ifndef LX_SEARCH_H
#define LX_SEARCH_H

#include <stdio.h>

#include "planning/overlap.h"
#include "planning/plan.h"

typedef struct {
  lx_recompute_policy policy; /* the requested one; with search_policies, what candidates may take too */
  bool search_policies;       /* no --policy given: the search weighs none, selective, full and lynx-heu */
  lx_partition_kind partition;
  bool no_offload;         /* lynxgen --no-offload */
  const char *profile;     /* NULL: the datasheet model */
  double gpu_memory_bytes; /* 0: the datasheet's */
  double time_budget_s;    /* stop trying candidates after this long (lynxgen --search-time) */
  int seq_len;             /* 0: the model's; else a what-if sequence length */
  int mip_work_limit;      /* simplex iterations of one MILP; 0: LX_MIP_WORK_LIMIT (overlap.h) */
} lx_search_request;

typedef struct {
  int tp, pp, dp, micro_batch;
  lx_schedule schedule;
  int virtual_stages; /* chunks per stage: 1, or under interleaved 1F1B the plan's (2 where open) */
  int mini_sequences; /* pieces of the LM head, its loss and the MLPs (MsT): the plan's, or where open 1, 4 or
                         16 */
  lx_recompute_policy policy;
  bool comparison; /* the synchronous 1F1B beside a requested 2BW: listed, never chosen */
  double time_s, mfu, peak_bytes;
  double time_floor_s;       /* set where not planned: keeping everything, its layout is no faster */
  double static_floor_bytes; /* set where that floor alone exceeds the GPU's memory: not planned (peak 0) */
  int micro_batches;     /* a step's, per replica */
  double recompute_s;    /* the most recompute a stage runs in a step */
  double versions_bytes; /* 2BW: the second weight version on the stage that holds the most */
  bool fits;
  char why[96]; /* why it lost, when it cannot run */
} lx_candidate;

typedef struct {
  int tried, feasible; /* candidates evaluated, of those enumerated */
  int planned;         /* of those tried, planned and simulated; the others could not win: */
  int dominated;       /* no faster than a plan and schedule that keeps everything whole */
  int dominated_uneven; /* ... of them, on every split they would try (lx_uneven_keep_all_time) */
  int too_large;       /* static floor (lx_static_bytes_floor) over the GPU's memory */
  int invalid;         /* not a plan of this model, or not schedulable */
  bool out_of_time;    /* the time budget ran out before all were tried */
  lx_candidate closest; /* when none fits: the one of least peak memory, or where none was planned, of least
                           static floor (both 0: none could run) */
  double memory_bytes;  /* the GPU memory the candidates were measured against */
} lx_search_stats;

/* Tries every feasible (tp, pp, dp, micro_batch, schedule) the analysed `ir`
 * leaves open (its set fields stay fixed; an open schedule is 1F1B or, with
 * more than one stage, ZB-H1 or interleaved 1F1B of 2 chunks; a requested 2BW is weighed beside 1F1B, which
 * is listed but not chosen: 2BW changes what is trained), until the time
 * budget runs out; prints the best candidates and why the others lost to
 * `explain` (may be NULL).
 * Returns whether one that fits was found: `best`, the fastest that fits of
 * those tried. Should memory run out, the error names the best so far. */
bool lx_search_plan(const lx_ir *ir, const lx_search_request *req, lx_candidate *best, lx_search_stats *stats,
                    FILE *explain);

/* 2BW against 1F1B on the analysed `ir`'s plan, under every recompute
 * policy: their step times and peaks, and why 2BW wins or loses (its bubble
 * saved, or its second weight version's memory), to `explain`. */
void lx_explain_2bw(const lx_ir *ir, const lx_search_request *req, FILE *explain);

/* The longest sequence the analysed `ir`'s plan trains within the GPU's
 * memory under each recompute policy, whole and in mini-sequences (as the
 * MsT paper tabulates), to `explain`: the memory model's answer, in
 * multiples of LX_SEQUENCE_STEP tokens. */
enum { LX_SEQUENCE_STEP = 256 };
void lx_explain_longest_sequence(const lx_ir *ir, const lx_search_request *req, FILE *explain);

#endif
