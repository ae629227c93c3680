/* schedules — predicted iteration time, bubble and peak memory of every
 * pipeline schedule under the recompute policies, on the GPT configurations
 * of examples/ (bench/gpt_configs.h), on DGX-A100 and DGX-H100 clusters.
 *
 *   make bench-schedules                 all configurations
 *   .build/bench/schedules 7b            only models whose file name contains "7b"
 *
 * Per configuration, schedule and policy: the iteration, the bubble (the
 * compute stream's idle share), the largest stage peak and whether it fits;
 * per configuration, ZB-H1's speedup over 1F1B under the fastest policy that
 * fits each, and which schedule and policy is fastest of those that fit. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "diag.h"
#include "planning/memplan.h"
#include "planning/passes.h"
#include "planning/plan.h"
#include "planning/simulate.h"

#include "gpt_configs.h"

static const lx_schedule schedules[] = {LX_SCHEDULE_GPIPE, LX_SCHEDULE_1F1B, LX_SCHEDULE_ZB_H1};
enum { SCHEDULES = sizeof schedules / sizeof schedules[0] };
static const lx_recompute_policy policies[] = {LX_RECOMPUTE_NONE, LX_RECOMPUTE_FULL, LX_RECOMPUTE_SELECTIVE,
                                               LX_RECOMPUTE_LYNX_HEU};
enum { POLICIES = sizeof policies / sizeof policies[0] };

typedef struct {
  double time, bubble;
  int64_t peak;
  bool fits, ok;
} outcome;

static outcome run_plan(lx_ir *ir, const lx_cost_model *cm, lx_schedule schedule,
                        lx_recompute_policy policy) {
  outcome o = {0};
  ir->plan.schedule = schedule;
  lx_pipeline p;
  lx_plan_options opts = {.policy = policy, .partition = LX_PARTITION_UNIFORM, .cm = cm};
  if (!lx_plan_pipeline(ir, &opts, &p)) return o;
  lx_stage_memory *mem = calloc((size_t)p.pp, sizeof *mem);
  lx_plan_memory(&p, mem);
  lx_simulation sim;
  o.ok = lx_simulate(&p, cm, NULL, NULL, NULL, &sim);
  o.time = sim.iteration_time;
  o.bubble = sim.bubble_fraction;
  o.fits = true;
  for (int s = 0; s < p.pp; s++) {
    if (mem[s].peak > o.peak) o.peak = mem[s].peak;
    o.fits &= (double)mem[s].peak <= cm->gpu.memory_bytes;
    lx_stage_memory_free(&mem[s]);
  }
  free(mem);
  lx_simulation_free(&sim);
  lx_pipeline_free(&p);
  return o;
}

/* The fastest policy of a schedule that fits, or -1. */
static int fastest_fitting(const outcome *row) {
  int best = -1;
  for (int k = 0; k < POLICIES; k++)
    if (row[k].ok && row[k].fits && (best < 0 || row[k].time < row[best].time)) best = k;
  return best;
}

typedef struct {
  int zb_wins;
  double best_zb_gain, sum_zb_gain;
} summary;

static void print_config(lx_ir *ir, const lx_cost_model *cm, void *ctx) {
  summary *sum = ctx;
  printf("  %-8s %-10s %11s %7s %9s %5s\n", "schedule", "policy", "iteration", "bubble", "peak GiB", "fits");
  outcome out[SCHEDULES][POLICIES];
  for (int s = 0; s < SCHEDULES; s++)
    for (int p = 0; p < POLICIES; p++) {
      out[s][p] = run_plan(ir, cm, schedules[s], policies[p]);
      const outcome *o = &out[s][p];
      printf("  %-8s %-10s %8.1f ms %6.1f%% %9.2f %5s\n", lx_schedule_name(schedules[s]),
             lx_recompute_policy_name(policies[p]), o->time * 1e3, 100 * o->bubble,
             (double)o->peak / (1 << 30), o->fits ? "yes" : "NO");
    }
  int one = fastest_fitting(out[1]), zb = fastest_fitting(out[2]);
  int best_s = -1, best_p = -1;
  for (int s = 0; s < SCHEDULES; s++) {
    int p = fastest_fitting(out[s]);
    if (p >= 0 && (best_s < 0 || out[s][p].time < out[best_s][best_p].time)) best_s = s, best_p = p;
  }
  if (one >= 0 && zb >= 0) {
    double gain = out[1][one].time / out[2][zb].time - 1;
    printf("  zb-h1 (%s) vs 1f1b (%s), each with its fastest policy that fits: %+.2f%% throughput\n",
           lx_recompute_policy_name(policies[zb]), lx_recompute_policy_name(policies[one]), 100 * gain);
    sum->zb_wins += gain > 1e-9;
    sum->sum_zb_gain += gain;
    if (gain > sum->best_zb_gain) sum->best_zb_gain = gain;
  }
  if (best_s >= 0)
    printf("  fastest that fits: %s with %s\n", lx_schedule_name(schedules[best_s]),
           lx_recompute_policy_name(policies[best_p]));
  else
    printf("  nothing fits\n");
}

int main(int argc, char **argv) {
  summary sum = {0};
  int runs = run_configs(argc, argv, print_config, &sum);
  printf(
      "  zb-h1 faster than 1f1b (fastest fitting policy of each): %d, by %.2f%% on average, at most %.2f%%\n",
      sum.zb_wins, runs ? 100 * sum.sum_zb_gain / runs : 0, 100 * sum.best_zb_gain);
  return lx_error_count() ? 1 : 0;
}
