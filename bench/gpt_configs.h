/* gpt_configs.h — the GPT configurations of examples/ the planning
 * benchmarks predict (bench/lynx_policies.c, bench/schedules.c), on
 * DGX-A100-80GB and DGX-H100 clusters and on the same GPUs joined by PCIe
 * inside a node (PCIe 4 for the A100, 5 for the H100), as planned, with 4x
 * the micro-batch, and with sequence 4096 and 8192. */
#ifndef LX_BENCH_GPT_CONFIGS_H
#define LX_BENCH_GPT_CONFIGS_H

#include <stdbool.h>
#include <string.h>
#include <time.h>

#include <stdio.h>

#include "analysis/analyze.h"
#include "analysis/cost.h"
#include "frontend/frontend.h"
#include "planning/passes.h"

typedef struct {
  const char *file;
  int tp, pp, dp, micro_batch;
} config;

static const config configs[] = {
    {"examples/gpt13b.model", 1, 4, 2, 4},  {"examples/gpt-2.7b.model", 2, 4, 1, 2},
    {"examples/gpt-7b.model", 2, 4, 2, 2},  {"examples/gpt-13b.model", 4, 4, 1, 1},
    {"examples/gpt-20b.model", 4, 8, 1, 1}, {"examples/gpt-23b.model", 4, 8, 1, 1},
};

typedef struct {
  const char *name;
  lx_gpu gpu;
  lx_link intra, inter;
} cluster_kind;

static const cluster_kind clusters[] = {
    {"A100-80GB", LX_GPU_A100_80GB, LX_LINK_NVLINK3, LX_LINK_IB_HDR},
    {"H100", LX_GPU_H100_80GB, LX_LINK_NVLINK4, LX_LINK_IB_NDR},
    {"A100-80GB PCIe", LX_GPU_A100_80GB, LX_LINK_PCIE4, LX_LINK_IB_HDR},
    {"H100 PCIe", LX_GPU_H100_80GB, LX_LINK_PCIE5, LX_LINK_IB_NDR},
};

typedef enum { VARIANT_PLAN, VARIANT_BIG_MICRO, VARIANT_SEQ4096, VARIANT_SEQ8192, VARIANT_COUNT } variant;
static const char *variant_names[] = {"plan", "micro x4", "seq 4096", "seq 8192"};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static bool load(const config *c, const cluster_kind *k, variant v, lx_ir *ir) {
  lx_ir_init(ir);
  if (lx_parse_model(c->file, NULL, 0, ir)) return false;
  ir->cluster.gpu = k->gpu;
  ir->cluster.intra_node_link = k->intra;
  ir->cluster.inter_node_link = k->inter;
  ir->plan.tp = c->tp, ir->plan.pp = c->pp, ir->plan.dp = c->dp;
  ir->plan.micro_batch = c->micro_batch * (v == VARIANT_BIG_MICRO ? 4 : 1);
  if (v == VARIANT_SEQ4096) ir->model.seq_len = 4096;
  if (v == VARIANT_SEQ8192) ir->model.seq_len = 8192;
  ir->cluster.nodes = (c->tp * c->pp * c->dp + ir->cluster.gpus_per_node - 1) / ir->cluster.gpus_per_node;
  return lx_analyze(ir) == 0;
}

static const char *short_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* fn on the analysed IR and cost model of a configuration, cluster and
 * variant, after a heading line. */
typedef void (*config_fn)(lx_ir *ir, const lx_cost_model *cm, void *ctx);

static void run_config(const config *c, const cluster_kind *k, variant v, config_fn fn, void *ctx) {
  lx_ir ir;
  if (!load(c, k, v, &ir)) {
    printf("%s: does not load\n", c->file);
    return;
  }
  lx_cost_model cm;
  lx_cost_model_init(&cm, &ir, NULL);
  printf("\n%s on %s, tp %d x pp %d x dp %d, micro-batch %d, seq %d (%s), %d micro-batches\n",
         short_name(c->file), k->name, c->tp, c->pp, c->dp, ir.plan.micro_batch, ir.model.seq_len,
         variant_names[v], lx_micro_batches(&ir));
  fn(&ir, &cm, ctx);
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
}

/* Every configuration whose model file's name holds argv[1] (all without
 * one), then the summary's heading; returns how many ran. */
static int run_configs(int argc, char **argv, config_fn fn, void *ctx) {
  const char *only = argc > 1 ? argv[1] : NULL;
  double start = now_s();
  int n = 0;
  for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
    if (only && !strstr(configs[i].file, only)) continue;
    for (size_t k = 0; k < sizeof clusters / sizeof clusters[0]; k++)
      for (int v = 0; v < VARIANT_COUNT; v++, n++)
        run_config(&configs[i], &clusters[k], (variant)v, fn, ctx);
  }
  printf("\nsummary over %d configurations (%.0f s):\n", n, now_s() - start);
  return n;
}

#endif
