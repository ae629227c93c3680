/* plan.h — the planning loop (plan.c): partition -> policy -> schedule ->
 * memory and simulation -> repair. The entry point of planning. */
#ifndef LX_PLAN_H
#define LX_PLAN_H

#include "planning/overlap.h"

/* How the layers are split over the stages: evenly (Megatron's split), by
 * the recompute-aware DP (partition.c), or, for the planned policies
 * (checkmate, lynx-heu, lynx-opt) at pp > 1, both and the faster plan that
 * fits (`best`, lynxgen's default; the others plan the even split). */
typedef enum { LX_PARTITION_UNIFORM, LX_PARTITION_DP, LX_PARTITION_BEST } lx_partition_kind;

typedef struct {
  lx_recompute_policy policy;
  lx_partition_kind partition;
  bool no_offload;         /* the Lynx policies keep, recompute on demand or in windows only */
  const lx_cost_model *cm; /* NULL: the datasheet model of the IR's cluster */
  int mip_work_limit;      /* simplex iterations of one MILP; 0: LX_MIP_WORK_LIMIT (overlap.h) */
} lx_plan_options;

/* The partition `partition` becomes for `policy` on pp stages: `best`
 * plans the even split for the fixed policies (none, full, selective) and
 * for one stage. */
lx_partition_kind lx_partition_for(lx_partition_kind partition, lx_recompute_policy policy, int pp);

/* Partition, per-stage policy, schedule with recompute placed where the
 * policy put it. Returns false after a diagnostic. */
bool lx_plan_pipeline(const lx_ir *ir, const lx_plan_options *o, lx_pipeline *out);

/* A floor under the time of o's plan off the even split: the least
 * simulated time keeping everything (policy none, the IR's pieces) on each
 * other split the plan tries, since on one split recomputation, windows and
 * offload only add work to a step. INFINITY where it tries only the even
 * split; 0 where no plan can be made. Needs o->cm. */
double lx_uneven_keep_all_time(const lx_ir *ir, const lx_plan_options *o);

/* lx_plan_pipeline with `policy`, uniform stages and the datasheet's costs
 * (the shortcut of tests and tools). */
bool lx_build_pipeline(const lx_ir *ir, lx_recompute_policy policy, lx_pipeline *out);

#endif
