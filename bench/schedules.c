/* schedules — predicted iteration time, bubble and peak memory of every
 * pipeline schedule under the recompute policies, on the GPT configurations
 * of examples/ (bench/gpt_configs.h), on DGX-A100 and DGX-H100 clusters.
 *
 *   make bench-schedules                 all configurations
 *   .build/bench/schedules 7b            only models whose file name contains "7b"
 *
 * Per configuration, schedule and policy: the iteration, the bubble (the
 * compute stream's idle share), the largest stage peak and whether it fits;
 * per configuration, ZB-H1's, interleaved 1F1B's (2 chunks per stage) and
 * PipeDream-2BW's speedups over 1F1B under
 * the fastest policy that fits each, and which synchronous schedule and
 * policy is fastest of those that fit (2BW, which trains with a delayed
 * update, is compared but never "fastest"). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "diag.h"
#include "planning/memplan.h"
#include "planning/passes.h"
#include "planning/plan.h"
#include "planning/simulate.h"

#include "gpt_configs.h"

static const lx_schedule schedules[] = {LX_SCHEDULE_GPIPE, LX_SCHEDULE_1F1B, LX_SCHEDULE_ZB_H1,
                                        LX_SCHEDULE_2BW, LX_SCHEDULE_INTERLEAVED};
enum {
  SCHEDULES = sizeof schedules / sizeof schedules[0],
  ONE_F_ONE_B = 1,
  ZB_H1 = 2,
  TWO_BW = 3,
  INTERLEAVED = 4,
};
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
  ir->plan.virtual_stages = schedule == LX_SCHEDULE_INTERLEAVED ? 2 : 1;
  lx_pipeline p;
  lx_plan_options opts = {.policy = policy, .partition = LX_PARTITION_UNIFORM, .cm = cm};
  bool planned = lx_plan_pipeline(ir, &opts, &p);
  ir->plan.virtual_stages = 1;
  if (!planned) return o;
  lx_stage_memory *mem = calloc((size_t)p.pp, sizeof *mem);
  lx_plan_memory(&p, mem);
  lx_simulation sim;
  o.ok = lx_simulate_training(&p, cm, NULL, NULL, NULL, &sim);
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
  int wins, runs;
  double best_gain, sum_gain;
} gains;

typedef struct {
  gains zb, two_bw, interleaved; /* against 1F1B */
} summary;

/* Schedule s against 1F1B, each with its fastest policy that fits. */
static void compare(const outcome (*out)[POLICIES], int s, gains *g) {
  int one = fastest_fitting(out[ONE_F_ONE_B]), other = fastest_fitting(out[s]);
  if (one < 0 || other < 0) return;
  double gain = out[ONE_F_ONE_B][one].time / out[s][other].time - 1;
  printf("  %s (%s) vs 1f1b (%s), each with its fastest policy that fits: %+.2f%% throughput\n",
         lx_schedule_name(schedules[s]), lx_recompute_policy_name(policies[other]),
         lx_recompute_policy_name(policies[one]), 100 * gain);
  g->runs++;
  g->wins += gain > 1e-9;
  g->sum_gain += gain;
  if (gain > g->best_gain) g->best_gain = gain;
}

static void print_config(lx_ir *ir, const lx_cost_model *cm, void *ctx) {
  summary *sum = ctx;
  printf("  %-11s %-10s %11s %7s %9s %5s\n", "schedule", "policy", "iteration", "bubble", "peak GiB", "fits");
  outcome out[SCHEDULES][POLICIES];
  for (int s = 0; s < SCHEDULES; s++)
    for (int p = 0; p < POLICIES; p++) {
      out[s][p] = run_plan(ir, cm, schedules[s], policies[p]);
      const outcome *o = &out[s][p];
      printf("  %-11s %-10s %8.1f ms %6.1f%% %9.2f %5s\n", lx_schedule_name(schedules[s]),
             lx_recompute_policy_name(policies[p]), o->time * 1e3, 100 * o->bubble,
             (double)o->peak / (1 << 30), o->fits ? "yes" : "NO");
    }
  int best_s = -1, best_p = -1;
  for (int s = 0; s < SCHEDULES; s++) {
    int p = fastest_fitting(out[s]);
    if (s != TWO_BW && p >= 0 && (best_s < 0 || out[s][p].time < out[best_s][best_p].time))
      best_s = s, best_p = p;
  }
  compare(out, ZB_H1, &sum->zb);
  compare(out, TWO_BW, &sum->two_bw);
  compare(out, INTERLEAVED, &sum->interleaved);
  if (best_s >= 0)
    printf("  fastest synchronous schedule that fits: %s with %s\n", lx_schedule_name(schedules[best_s]),
           lx_recompute_policy_name(policies[best_p]));
  else
    printf("  nothing fits\n");
}

static void print_gains(const char *schedule, const gains *g) {
  printf("  %s faster than 1f1b (fastest fitting policy of each): in %d of %d, by %.2f%% on average, at most "
         "%.2f%%\n",
         schedule, g->wins, g->runs, g->runs ? 100 * g->sum_gain / g->runs : 0, 100 * g->best_gain);
}

int main(int argc, char **argv) {
  summary sum = {0};
  run_configs(argc, argv, print_config, &sum);
  print_gains("zb-h1", &sum.zb);
  print_gains("2bw", &sum.two_bw);
  print_gains("interleaved", &sum.interleaved);
  return lx_error_count() ? 1 : 0;
}
