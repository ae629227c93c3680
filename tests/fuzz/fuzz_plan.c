/* fuzz_plan.c — libFuzzer target for the plan pipeline.
 *
 * Each input is a model file, with lynxgen's scheduling options in an
 * optional `// fuzz-options:` comment (fuzz_plan_options.c). It goes
 * through the front end as in fuzz_frontend.c; an accepted model is then
 * planned as lynxgen -o plans it (gen/main.c run_passes): the plan search
 * when tp, pp, dp or the micro-batch are open, the cost model, partition,
 * recompute policy and schedule (lx_plan_pipeline), then the memory plan,
 * simulation, layout and verifier for both targets and every file printed
 * to memory (fuzz_emit.c). Properties: no crash, leak or undefined
 * behaviour; a rejection anywhere is located (file:line:col); the
 * simulation never deadlocks and the verifier never finds a generator bug
 * in an accepted plan.
 *
 * Bounded sizes, so that one input plans in well under a second: the time
 * to plan grows with layers x micro-batches x stages x ops per layer, and
 * the bugs that show at scale (overflowing sizes) are the analysis's,
 * which fuzz_frontend checks at the written values. So the model is
 * planned as if it had at most MAX_LAYERS layers, MAX_STAGES stages and
 * MAX_MICRO_BATCHES micro-batches per step (clamped before analysis: a
 * smaller value of the same field, itself a valid model file), and an input
 * with more than MAX_OPS ops, or with an open plan on more than
 * MAX_SEARCH_GPUS GPUs, only runs the front end. The MILPs get
 * MIP_WORK_LIMIT simplex iterations each instead of LX_MIP_WORK_LIMIT. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "analysis/analyze.h"
#include "diag.h"
#include "fuzz_model.h"
#include "fuzz_plan.h"
#include "planning/passes.h"
#include "planning/plan.h"
#include "planning/search.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_LAYERS = 4, MAX_STAGES = 4, MAX_MICRO_BATCHES = 4, MAX_OPS = 40, MAX_SEARCH_GPUS = 8 };
enum { MIP_WORK_LIMIT = 2000 };

static void fail(const char *why) {
  fprintf(stderr, "fuzz_plan: %s\n", why);
  abort();
}

static FILE *discarded; /* /dev/null */

static void clamp(int *field, int max) {
  if (*field > max) *field = max;
}

static void clamp_sizes(lx_ir *ir) {
  clamp(&ir->model.layers, MAX_LAYERS);
  clamp(&ir->plan.pp, MAX_STAGES);
  lx_plan *p = &ir->plan;
  int64_t per_micro_batch = (int64_t)(p->micro_batch > 0 ? p->micro_batch : 1) * (p->dp > 0 ? p->dp : 1);
  if (p->global_batch > 0 && p->global_batch / per_micro_batch > MAX_MICRO_BATCHES &&
      per_micro_batch * MAX_MICRO_BATCHES <=
          INT32_MAX) /* keeps a remainder: a non-dividing batch stays one */
    p->global_batch = (int)(per_micro_batch * MAX_MICRO_BATCHES + p->global_batch % per_micro_batch);
}

/* Checked before the plan search, which plans every candidate. */
static bool few_enough_ops(const lx_ir *ir) {
  return ir->prologue.n_ops + ir->block.n_ops + ir->epilogue.n_ops <= MAX_OPS;
}

static bool small_enough(const lx_ir *ir) { return lx_micro_batches(ir) <= MAX_MICRO_BATCHES; }

static bool plan_is_open(const lx_open_plan *p) { return p->tp || p->pp || p->dp || p->micro_batch; }

/* lynxgen's choose_open_plan: the search, then the model analysed again with
 * its choice. Returns false when the plan is not to be made (rejected, or
 * too large). */
static bool search_open_plan(const fuzz_options *o, lx_ir *ir) {
  if (!plan_is_open(&ir->open_plan)) return true;
  if ((int64_t)ir->cluster.nodes * ir->cluster.gpus_per_node > MAX_SEARCH_GPUS) return false;
  if (!ir->plan.global_batch) {
    lx_error(ir->locs.plan, "the plan search needs global_batch");
    return false;
  }
  lx_search_request req = {.policy = o->policy,
                           .partition = o->partition,
                           .no_offload = o->no_offload,
                           .gpu_memory_bytes = o->gpu_memory_bytes,
                           .mip_work_limit = MIP_WORK_LIMIT};
  lx_candidate chosen;
  lx_search_stats stats;
  bool found = lx_search_plan(ir, &req, &chosen, &stats, NULL);
  lx_diag_set_sink(discarded); /* the search hands diagnostics back to stderr */
  if (!found) {
    lx_error(ir->locs.plan, "no parallel plan for the open fields fits");
    return false;
  }
  ir->plan.tp = chosen.tp, ir->plan.pp = chosen.pp, ir->plan.dp = chosen.dp,
  ir->plan.micro_batch = chosen.micro_batch;
  return lx_analyze(ir) == 0;
}

/* The input as a file on tmpfs, at the path the front end is given. */
static const char *input_file(const uint8_t *data, size_t size) {
  static char path[64];
  if (!path[0]) snprintf(path, sizeof path, "/dev/shm/lynxgen-fuzz-%d.model", (int)getpid());
  if (!discarded && !(discarded = fopen("/dev/null", "w"))) fail("cannot open /dev/null");
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) fail("cannot write the input to /dev/shm");
  return path;
}

static void plan(const lx_ir *ir, const fuzz_options *o) {
  lx_cost_model cm;
  if (!lx_cost_model_init(&cm, ir, NULL)) fail("the cost model failed without a profile");
  if (o->gpu_memory_bytes > 0) cm.gpu.memory_bytes = o->gpu_memory_bytes;
  lx_plan_options options = {.policy = o->policy,
                             .partition = o->partition,
                             .no_offload = o->no_offload,
                             .cm = &cm,
                             .mip_work_limit = MIP_WORK_LIMIT};
  lx_pipeline pipe;
  if (lx_plan_pipeline(ir, &options, &pipe)) {
    fuzz_emit_plan(&pipe, &cm, o);
    lx_pipeline_free(&pipe);
  }
  lx_cost_model_free(&cm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_options o = fuzz_plan_options(data, size);
  const char *path = input_file(data, size);
  lx_ir ir;
  if (fuzz_front_end(path, data, size, clamp_sizes, &ir) && few_enough_ops(&ir) &&
      search_open_plan(&o, &ir) && small_enough(&ir))
    plan(&ir, &o);
  if (lx_error_count() > 0 && lx_located_error_count() == 0)
    fail("a plan was rejected without a located error");
  lx_ir_free(&ir);
  unlink(path);
  return 0;
}
