/* fuzz_plan.h — the pieces of the plan fuzzer (fuzz_plan.c). */
#ifndef LX_FUZZ_PLAN_H
#define LX_FUZZ_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "analysis/cost.h"
#include "planning/overlap.h"
#include "planning/plan.h"
#include "schedule.h"

/* lynxgen's scheduling options, from the input's `// fuzz-options:` line
 * (fuzz_plan_options.c; written by mutate_options.c). */
typedef struct {
  lx_recompute_policy policy;
  lx_partition_kind partition;
  double gpu_memory_bytes; /* 0: the datasheet's */
  bool cuda_graph, unfused, unrolled;
  bool no_offload; /* lynxgen --no-offload */
} fuzz_options;

fuzz_options fuzz_plan_options(const uint8_t *data, size_t size);

/* fuzz_emit.c: the memory plan, the simulation, the layout and the verifier
 * for both targets, and every file lynxgen would write, printed to memory.
 * Aborts the run on a generator bug (a deadlocked simulation, a verifier
 * violation, an empty file). */
void fuzz_emit_plan(const lx_pipeline *pipe, const lx_cost_model *cm, const fuzz_options *o);

#endif
