/* The schedule, memory plan and simulator against closed forms:
 * GPipe and 1F1B with uniform stages and no communication take exactly
 * (m + p - 1) * (tf + tb) (Narayanan et al. 2021, sec. 2.2), the bubble is
 * (p - 1) / (m + p - 1) of the iteration, a point-to-point latency alpha
 * adds 2 (p - 1) alpha under GPipe and (m + 1) alpha under two-stage 1F1B
 * (at least 2 (p - 1) alpha deeper), stage i of 1F1B stashes min(p - i, m)
 * micro-batches (ZB-H1's later stages p, from a forward to its W pass),
 * ZB-H1's iteration has the zero-bubble paper's closed form, PipeDream-2BW's
 * steady-state step is m (tf + tb), with no bubble, and its memory plan is
 * 1F1B's plus a second copy of the stage's weights, and the
 * recompute policies keep the bytes Korthikanti et al. give (full: 2sbh,
 * selective: sbh(10 + 24/t)). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "analysis/analyze.h"
#include "check.h"
#include "diag.h"
#include "frontend/frontend.h"
#include "planning/memplan.h"
#include "planning/passes.h"
#include "planning/plan.h"
#include "planning/simulate.h"

static const char *model_text =
    "#include <lynx.h>\n"
    "#ifndef V\n" /* check_uneven_floor's model is larger */
    "#define V 128\n"
    "#define H 64\n"
    "#define S 32\n"
    "#define L 8\n"
    "#endif\n"
    "static const struct lx_model model = {.vocab = V, .seq_len = S, .layers = L, .hidden = H, .heads = 4,\n"
    "  .dropout = 0.1};\n"
    "static const struct lx_cluster cluster = {.gpu = GPU_A100_80GB, .gpus_per_node = 8};\n"
    "static const struct lx_parallel parallel = {.micro_batch = 2};\n"
    "tensor prologue(tensor t) { return add(embedding(t, V, H), position_embedding(t, H)); }\n"
    "tensor block(tensor x) {\n"
    "  tensor a = attention(linear(layernorm(x), 3 * H), 4, 4);\n"
    "  x = add(x, dropout(linear(a, H)));\n"
    "  return add(x, dropout(linear(gelu(linear(layernorm(x), 4 * H)), H)));\n"
    "}\n"
    "tensor epilogue(tensor x, tensor y) { return cross_entropy(lm_head(layernorm(x), V), y); }\n";

/* Model `text` under that plan, analysed; virtual_stages 0: the default. */
static bool load_text(lx_ir *ir, const char *text, int pp, int micro_batches, lx_schedule schedule,
                      int virtual_stages, int tp) {
  lx_ir_init(ir);
  if (lx_parse_model("pipeline.model", text, strlen(text), ir)) return false;
  ir->plan.pp = pp;
  ir->plan.tp = tp;
  ir->plan.global_batch = micro_batches * 2;
  ir->plan.schedule = schedule;
  ir->plan.virtual_stages = virtual_stages;
  return lx_analyze(ir) == 0;
}

/* The model above, its attention() a flash_attention() when flash; virtual_stages 0: the default. */
static bool load_chunked(lx_ir *ir, int pp, int micro_batches, lx_schedule schedule, int virtual_stages,
                         int tp, bool flash) {
  char text[2048];
  const char *at = strstr(model_text, "attention(");
  snprintf(text, sizeof text, "%.*s%s%s", (int)(at - model_text), model_text, flash ? "flash_" : "", at);
  return load_text(ir, text, pp, micro_batches, schedule, virtual_stages, tp);
}

/* The model above, its attention() a flash_attention() when flash. */
static bool load_model(lx_ir *ir, int pp, int micro_batches, lx_schedule schedule, int tp, bool flash) {
  return load_chunked(ir, pp, micro_batches, schedule, 0, tp, flash);
}

static bool load(lx_ir *ir, int pp, int micro_batches, lx_schedule schedule, int tp) {
  return load_model(ir, pp, micro_batches, schedule, tp, false);
}

/* Uniform stages: the whole forward (tf) on the stage's first block op, the
 * whole backward (tb) on it too (under interleaved 1F1B tf / V and tb / V
 * on each of its V chunks' first op); everything else free, transfers take
 * alpha. */
typedef struct {
  double tf, tb, tw, alpha; /* tw: the W part of a backward, in tb's place where the stage defers it */
} uniform_timing;

/* The first block op whose W pass the stage defers. */
static int first_deferred(const lx_ir *ir, const lx_stage *st) {
  for (int i = 0; i < ir->block.n_ops; i++)
    if (lx_defers_weight_grad(ir, st, LX_GRAPH_BLOCK, i)) return i;
  return -1;
}

static double uniform(void *ctx, const lx_pipeline *p, int stage, const lx_instr *in) {
  const uniform_timing *u = ctx;
  const lx_stage *st = &p->stages[stage];
  int chunk = in->graph == LX_GRAPH_BLOCK ? lx_chunk_of(st, in->layer) : -1;
  bool first_op = chunk >= 0 && in->op == 1 && in->layer == st->chunks[chunk].first_layer;
  switch (in->kind) {
  case LX_I_FWD: return first_op ? u->tf / st->n_chunks : 0;
  case LX_I_BWD: return first_op ? (u->tb + (st->weight_lag ? 0 : u->tw)) / st->n_chunks : 0;
  case LX_I_BWD_WEIGHT:
    return in->layer == st->chunks[0].first_layer && in->op == first_deferred(p->ir, st) ? u->tw : 0;
  case LX_I_SEND_ACT:
  case LX_I_SEND_GRAD: return u->alpha;
  default: return 0;
  }
}

static void check_closed_forms(lx_schedule schedule, int p, int m) {
  lx_ir ir;
  CHECK(load(&ir, p, m, schedule, 1), "model loads (p=%d m=%d)", p, m);
  lx_pipeline pipe;
  CHECK(lx_build_pipeline(&ir, LX_RECOMPUTE_NONE, &pipe), "pipeline builds");
  const char *name = lx_schedule_name(schedule);
  uniform_timing u = {1.0, 2.0, 0, 0};
  lx_simulation sim;
  CHECK(lx_simulate(&pipe, NULL, uniform, &u, NULL, &sim), "%s p=%d m=%d simulates without deadlock", name, p, m);
  double want = (m + p - 1) * (u.tf + u.tb);
  CHECK_CLOSE(sim.iteration_time, want, 1e-12, "%s p=%d m=%d: iteration = (m+p-1)(tf+tb) = %g", name, p, m, want);
  double bubble = (double)(p - 1) / (m + p - 1);
  CHECK_CLOSE(sim.bubble_fraction, bubble, 1e-12, "%s p=%d m=%d: bubble = (p-1)/(m+p-1) = %.4f", name, p, m, bubble);
  lx_simulation_free(&sim);
  if (schedule == LX_SCHEDULE_GPIPE) {
    u.alpha = 0.25;
    CHECK(lx_simulate(&pipe, NULL, uniform, &u, NULL, &sim), "simulates with latency");
    double shifted = want + 2 * (p - 1) * u.alpha;
    CHECK_CLOSE(sim.iteration_time, shifted, 1e-12, "gpipe p=%d m=%d: latency alpha adds 2(p-1)alpha -> %g", p, m,
                shifted);
    lx_simulation_free(&sim);
  }
  if (schedule == LX_SCHEDULE_1F1B && p == 2) {
    /* Two stages, as Megatron-LM runs them: the last stage posts the receive
     * of micro-batch k+1's activation together with the send of k's gradient
     * (send_backward_recv_forward), so each of its forwards after the first
     * waits alpha; the first activation arrives alpha late and the last
     * gradient returns alpha late: (m - 1) alpha + 2 alpha. (Deeper pipelines
     * overlap part of these waits with the upstream stages' slack; their
     * shift has no closed form as simple, and is bounded below.) */
    u.alpha = 0.25;
    CHECK(lx_simulate(&pipe, NULL, uniform, &u, NULL, &sim), "simulates with latency");
    double shifted = want + (m + 1) * u.alpha;
    CHECK_CLOSE(sim.iteration_time, shifted, 1e-12, "1f1b p=2 m=%d: latency alpha adds (m+1)alpha -> %g (got %g)", m,
                shifted, sim.iteration_time);
    lx_simulation_free(&sim);
  }
  if (schedule == LX_SCHEDULE_1F1B && p > 2) {
    /* at least the fill and the drain: the first micro-batch's activation
     * travels p - 1 links down, the last gradient p - 1 links back */
    u.alpha = 0.25;
    CHECK(lx_simulate(&pipe, NULL, uniform, &u, NULL, &sim), "simulates with latency");
    CHECK(sim.iteration_time >= want + 2 * (p - 1) * u.alpha - 1e-12,
          "1f1b p=%d m=%d: latency alpha adds at least 2(p-1)alpha (%g -> %g)", p, m, want, sim.iteration_time);
    lx_simulation_free(&sim);
  }
  lx_pipeline_free(&pipe);
  lx_ir_free(&ir);
}

/* Returns the highest stage's planned peak. */
static int64_t check_memory(lx_schedule schedule, int p, int m, lx_recompute_policy policy) {
  lx_ir ir;
  load(&ir, p, m, schedule, 1);
  lx_pipeline pipe;
  lx_build_pipeline(&ir, policy, &pipe);
  lx_stage_memory *mem = calloc((size_t)p, sizeof *mem);
  lx_plan_memory(&pipe, mem);
  lx_cost_model cm;
  lx_cost_model_init(&cm, &ir, NULL);
  lx_simulation sim;
  lx_simulate(&pipe, &cm, NULL, NULL, mem, &sim);
  const char *name = lx_schedule_name(schedule), *pol = lx_recompute_policy_name(policy);
  for (int s = 0; s < p; s++) {
    int held = schedule == LX_SCHEDULE_GPIPE ? m : schedule == LX_SCHEDULE_ZB_H1 && s > 0 ? p : p - s;
    int want = held < m ? held : m;
    CHECK(mem[s].stashed_micro_batches == want && sim.stages[s].max_in_flight == want,
          "%s/%s p=%d m=%d stage %d stashes %d micro-batches (plan %d, simulated %d)", name, pol, p, m, s, want,
          mem[s].stashed_micro_batches, sim.stages[s].max_in_flight);
    CHECK(sim.stages[s].peak_bytes == mem[s].peak, "%s/%s stage %d: simulated peak %lld = planned peak %lld", name,
          pol, s, (long long)sim.stages[s].peak_bytes, (long long)mem[s].peak);
  }
  lx_simulation_free(&sim);
  /* the plan search's floor, taken before any partition: the stages' average static bytes, at most the most
   */
  int64_t held = 0, most = 0, floor = lx_static_bytes_floor(&ir, schedule);
  for (int s = 0; s < p; s++) {
    held += mem[s].weights + mem[s].grads + mem[s].optimizer;
    if (lx_static_bytes(&mem[s]) > most) most = lx_static_bytes(&mem[s]);
  }
  CHECK(floor == held / p && floor <= most,
        "%s/%s p=%d: static floor %lld = the stages' average %lld <= most %lld", name, pol, p,
        (long long)floor, (long long)(held / p), (long long)most);
  int64_t highest = 0;
  for (int s = 0; s < p; s++) {
    if (mem[s].peak > highest) highest = mem[s].peak;
    lx_stage_memory_free(&mem[s]);
  }
  free(mem);
  lx_cost_model_free(&cm);
  lx_pipeline_free(&pipe);
  lx_ir_free(&ir);
  return highest;
}

/* What each policy keeps per layer, against Korthikanti et al.'s forms. */
static void check_policies(int tp) {
  lx_ir ir;
  load(&ir, 1, 1, LX_SCHEDULE_1F1B, tp);
  const lx_graph *g = &ir.block;
  lx_op_decision *d = calloc((size_t)g->n_ops, sizeof *d);
  double s = ir.model.seq_len, b = 2, h = ir.model.hidden;
  lx_recompute_fixed(&ir, LX_RECOMPUTE_NONE, d);
  CHECK(lx_kept_bytes(g, d) == g->activation_bytes, "tp=%d none keeps every saved byte (%lld)", tp,
        (long long)g->activation_bytes);
  lx_recompute_fixed(&ir, LX_RECOMPUTE_FULL, d);
  CHECK(lx_kept_bytes(g, d) == (int64_t)(2 * s * b * h), "tp=%d full keeps 2sbh = %.0f (got %lld)", tp,
        2 * s * b * h, (long long)lx_kept_bytes(g, d));
  /* the layer's output is the next layer's kept input: no need to rerun it; nor the dropouts, which
   * keep nothing (their backward draws the mask again) and whose outputs no op keeps */
  int recomputed = 0, dropouts = 0;
  for (int i = 0; i < g->n_ops; i++)
    recomputed += d[i].recompute, dropouts += g->ops[i].kind == LX_OP_DROPOUT;
  CHECK(
      dropouts == 2 && recomputed == g->n_ops - 2 - dropouts && !d[g->output].recompute,
      "tp=%d full recomputes every op of the layer but the one making its output and the %d dropouts (%d of "
      "%d)",
      tp, dropouts, recomputed, g->n_ops - 2 - dropouts);
  lx_recompute_fixed(&ir, LX_RECOMPUTE_SELECTIVE, d);
  double want = s * b * h * (8 + 24.0 / tp); /* Korthikanti's 10 + 24/t less the two s b h dropout masks */
  CHECK(lx_kept_bytes(g, d) == (int64_t)want, "tp=%d selective keeps sbh(8 + 24/t) = %.0f (got %lld)", tp,
        want, (long long)lx_kept_bytes(g, d));
  recomputed = 0;
  for (int i = 0; i < g->n_ops; i++) recomputed += d[i].recompute && g->ops[i].kind == LX_OP_ATTENTION;
  CHECK(recomputed == 1, "tp=%d selective recomputes the attention core", tp);
  free(d);
  lx_ir_free(&ir);
}

/* A flash attention keeps no s x s internals: selective, which drops only
 * those, recomputes nothing and keeps what none keeps. */
static void check_selective_flash(int tp) {
  lx_ir ir;
  CHECK(load_model(&ir, 1, 1, LX_SCHEDULE_1F1B, tp, true), "the flash_attention model loads");
  const lx_graph *g = &ir.block;
  lx_op_decision *d = calloc((size_t)g->n_ops, sizeof *d);
  lx_recompute_fixed(&ir, LX_RECOMPUTE_NONE, d);
  int64_t none = lx_kept_bytes(g, d);
  lx_recompute_fixed(&ir, LX_RECOMPUTE_SELECTIVE, d);
  int recomputed = 0;
  for (int i = 0; i < g->n_ops; i++)
    recomputed += d[i].recompute;
  CHECK(
      recomputed == 0 && lx_kept_bytes(g, d) == none,
      "tp=%d flash_attention: selective recomputes nothing (%d ops) and keeps what none keeps (%lld of %lld)",
      tp, recomputed, (long long)lx_kept_bytes(g, d), (long long)none);
  free(d);
  lx_ir_free(&ir);
}

/* ZB-H1 (Qi et al. 2024, sec. 3.1): stage s defers its W passes by s
 * micro-batches. The drain's chain of gradients then carries B alone, and
 * the deferred W passes fill the waits along it; with tw <= tb the iteration
 * is m(tf+tb+tw) + (p-1)(tf+tb-tw), where 1F1B (whole backwards of tb+tw)
 * takes (m+p-1)(tf+tb+tw): a third of its bubble when tf = tb = tw. */
static void check_zero_bubble(int p, int m, double tf, double tb, double tw) {
  lx_ir ir;
  CHECK(load(&ir, p, m, LX_SCHEDULE_ZB_H1, 1), "model loads (p=%d m=%d)", p, m);
  lx_pipeline pipe;
  CHECK(lx_build_pipeline(&ir, LX_RECOMPUTE_NONE, &pipe), "pipeline builds");
  uniform_timing u = {tf, tb, tw, 0};
  lx_simulation sim;
  CHECK(lx_simulate(&pipe, NULL, uniform, &u, NULL, &sim), "zb-h1 p=%d m=%d simulates without deadlock", p,
        m);
  double want = m * (tf + tb + tw) + (p - 1) * (tf + tb - tw);
  CHECK_CLOSE(sim.iteration_time, want, 1e-12,
              "zb-h1 p=%d m=%d tf=%g tb=%g tw=%g: iteration = m(tf+tb+tw) + "
              "(p-1)(tf+tb-tw) = %g",
              p, m, tf, tb, tw, want);
  if (tf == tb && tb == tw) {
    double bubble = sim.iteration_time - m * (tf + tb + tw), one_f_one_b = (p - 1) * (tf + tb + tw);
    CHECK_CLOSE(bubble, one_f_one_b / 3, 1e-12,
                "zb-h1 p=%d m=%d, tf = tb = tw: the bubble %g is a third of 1F1B's %g", p, m, bubble,
                one_f_one_b);
  }
  lx_simulation_free(&sim);
  lx_pipeline_free(&pipe);
  lx_ir_free(&ir);
}

/* PipeDream-2BW (Narayanan et al. 2021): the next step's first forwards run
 * in this step's drain, so in the steady state (the third of four steps
 * simulated back to back) every stage computes all the time: a step takes
 * m (tf + tb), against 1F1B's (m + p - 1)(tf + tb). Its memory plan is
 * 1F1B's on every stage plus one more copy of the stage's weights (in the
 * training dtype; the fp32 masters are not copied). */
static void check_2bw(int p, int m, double tf, double tb) {
  lx_ir ir;
  CHECK(load(&ir, p, m, LX_SCHEDULE_2BW, 1), "model loads (p=%d m=%d)", p, m);
  lx_pipeline pipe;
  CHECK(lx_build_pipeline(&ir, LX_RECOMPUTE_NONE, &pipe), "2bw pipeline builds");
  uniform_timing u = {tf, tb, 0, 0};
  lx_simulation sim;
  CHECK(lx_simulate_training(&pipe, NULL, uniform, &u, NULL, &sim),
        "2bw p=%d m=%d simulates without deadlock", p, m);
  CHECK_CLOSE(sim.iteration_time, m * (tf + tb), 1e-12,
              "2bw p=%d m=%d tf=%g tb=%g: a steady step = m(tf+tb) = %g", p, m, tf, tb, m * (tf + tb));
  CHECK(sim.unrolled && sim.pipe->steps == 4, "2bw p=%d m=%d: the simulation holds four steps", p, m);
  lx_simulation_free(&sim);
  lx_ir one_f_one_b_ir;
  CHECK(load(&one_f_one_b_ir, p, m, LX_SCHEDULE_1F1B, 1), "model loads (p=%d m=%d)", p, m);
  lx_pipeline one_f_one_b;
  CHECK(lx_build_pipeline(&one_f_one_b_ir, LX_RECOMPUTE_NONE, &one_f_one_b), "1f1b pipeline builds");
  lx_stage_memory *a = lx_calloc((size_t)p, sizeof *a), *b = lx_calloc((size_t)p, sizeof *b);
  lx_plan_memory(&pipe, a);
  lx_plan_memory(&one_f_one_b, b);
  for (int s = 0; s < p; s++) {
    int64_t second_copy = pipe.stages[s].params_per_rank * lx_dtype_bytes(ir.training.dtype);
    CHECK(a[s].peak == b[s].peak + second_copy,
          "2bw p=%d m=%d stage %d: modeled peak %lld = 1F1B's %lld + the second weight version %lld", p, m, s,
          (long long)a[s].peak, (long long)b[s].peak, (long long)second_copy);
    lx_stage_memory_free(&a[s]);
    lx_stage_memory_free(&b[s]);
  }
  free(a);
  free(b);
  lx_pipeline_free(&one_f_one_b);
  lx_ir_free(&one_f_one_b_ir);
  lx_pipeline_free(&pipe);
  lx_ir_free(&ir);
}

/* Interleaved 1F1B (Narayanan et al., SC 2021, sec. 2.2): with each stage's
 * work split over V chunks of uniform layers, the bubble shrinks V-fold:
 * an iteration takes m (tf + tb) + (p - 1)(tf + tb) / V, a bubble of
 * (p - 1) / (V m) of the ideal time, against 1F1B's (p - 1) / m. Each
 * chunk holds layers/(p V) consecutive layers, chunk v of stage s being the
 * model's v p + s-th. */
static void check_interleaved(int p, int v, int m, double tf, double tb) {
  lx_ir ir;
  CHECK(load_chunked(&ir, p, m, LX_SCHEDULE_INTERLEAVED, v, 1, false), "model loads (p=%d V=%d m=%d)", p, v,
        m);
  lx_pipeline pipe;
  CHECK(lx_build_pipeline(&ir, LX_RECOMPUTE_NONE, &pipe), "interleaved pipeline builds");
  int per_chunk = ir.model.layers / (p * v);
  bool chunks_right = true;
  for (int s = 0; s < p; s++)
    for (int c = 0; c < v; c++)
      chunks_right &= pipe.stages[s].n_chunks == v && pipe.stages[s].chunks[c].n_layers == per_chunk &&
                      pipe.stages[s].chunks[c].first_layer == (c * p + s) * per_chunk;
  CHECK(chunks_right, "interleaved p=%d V=%d: stage s holds model chunks s, s + p, ... of %d layers", p, v,
        per_chunk);
  uniform_timing u = {tf, tb, 0, 0};
  lx_simulation sim;
  CHECK(lx_simulate(&pipe, NULL, uniform, &u, NULL, &sim),
        "interleaved p=%d V=%d m=%d simulates without deadlock", p, v, m);
  double ideal = m * (tf + tb), want = ideal + (p - 1) * (tf + tb) / v;
  CHECK_CLOSE(sim.iteration_time, want, 1e-12,
              "interleaved p=%d V=%d m=%d tf=%g tb=%g: iteration = m(tf+tb) + (p-1)(tf+tb)/V = %g (got %g)",
              p, v, m, tf, tb, want, sim.iteration_time);
  CHECK_CLOSE((sim.iteration_time - ideal) / ideal, (double)(p - 1) / (v * m), 1e-12,
              "interleaved p=%d V=%d m=%d: bubble = (p-1)/(V m) = %.4f of the ideal time", p, v, m,
              (double)(p - 1) / (v * m));
  lx_simulation_free(&sim);
  lx_pipeline_free(&pipe);
  lx_ir_free(&ir);
}

/* The first layer of each stage's chunk (pp + 1 entries, one chunk a stage). */
static void stage_split(const lx_pipeline *p, int *first) {
  for (int s = 0; s < p->pp; s++)
    first[s] = p->stages[s].chunks[0].first_layer;
  first[p->pp] = p->stages[p->pp - 1].chunks[0].first_layer + p->stages[p->pp - 1].chunks[0].n_layers;
}

/* The plan search's floor under lynx-heu off the even split: the least time
 * keeping everything on lynx-heu's and checkmate's recompute-aware splits,
 * where they are not the even one. Here each is planned on its own
 * (`--partition dp`), its decisions replaced by none's and its stages
 * scheduled again, then simulated. Returns how many uneven splits there were. */
static int check_uneven_floor(int p, double memory_bytes) {
  lx_ir ir;
  char text[2048]; /* a vocabulary of 8192: the last stage's LM head weighs as much as a layer or two */
  snprintf(text, sizeof text, "#define V 8192\n#define H 256\n#define S 256\n#define L 6\n%s", model_text);
  CHECK(load_text(&ir, text, p, 8, LX_SCHEDULE_1F1B, 0, 1), "the 6-layer model of vocabulary 8192 analyses");
  lx_cost_model cm;
  lx_cost_model_init(&cm, &ir, NULL);
  cm.gpu.memory_bytes = memory_bytes;
  int *even = malloc(sizeof(int) * (size_t)(p + 1)), *first = malloc(sizeof(int) * (size_t)(p + 1));
  lx_partition_uniform(ir.model.layers, p, even);
  double least = INFINITY;
  int uneven = 0;
  const lx_recompute_policy policies[] = {LX_RECOMPUTE_LYNX_HEU, LX_RECOMPUTE_CHECKMATE};
  for (int k = 0; k < 2; k++) {
    lx_plan_options o = {.policy = policies[k], .partition = LX_PARTITION_DP, .cm = &cm};
    lx_pipeline pipe;
    lx_plan_pipeline(&ir, &o, &pipe);
    stage_split(&pipe, first);
    if (memcmp(first, even, sizeof(int) * (size_t)(p + 1))) {
      uneven++;
      for (int s = 0; s < p; s++) {
        lx_recompute_fixed(&ir, LX_RECOMPUTE_NONE, pipe.stages[s].decisions);
        free(pipe.stages[s].window_of);
        pipe.stages[s].window_of = NULL;
        lx_schedule_stage(&ir, &pipe, s);
      }
      lx_simulation sim;
      lx_simulate_training(&pipe, &cm, NULL, NULL, NULL, &sim);
      if (sim.iteration_time < least) least = sim.iteration_time;
      lx_simulation_free(&sim);
    }
    lx_pipeline_free(&pipe);
  }
  lx_plan_options best = {.policy = LX_RECOMPUTE_LYNX_HEU, .partition = LX_PARTITION_BEST, .cm = &cm};
  double floor = lx_uneven_keep_all_time(&ir, &best);
  CHECK(floor == least,
        "p=%d, %.0f bytes: lynx-heu's floor off the even split %.9g s = keeping everything on its %d uneven "
        "splits, planned directly, %.9g s",
        p, memory_bytes, floor, uneven, least);
  free(even), free(first);
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
  return uneven;
}

int main(void) {
  /* with 128 MiB the recompute-aware splits give the LM head's stage fewer layers; with 8 MiB, none */
  CHECK(check_uneven_floor(4, 128 << 20) > 0, "p=4, 128 MiB: a recompute-aware split is uneven");
  CHECK(check_uneven_floor(4, 8 << 20) == 0, "p=4, 8 MiB: the recompute-aware splits are even");
  check_interleaved(2, 2, 4, 1, 2);
  check_interleaved(4, 2, 8, 1, 2);
  check_interleaved(2, 4, 8, 1, 1);
  check_interleaved(4, 2, 4, 2, 3);
  check_interleaved(2, 2, 2, 1, 2);
  check_2bw(4, 8, 1, 2);
  check_2bw(4, 4, 1, 1);
  check_2bw(2, 5, 1, 2);
  check_2bw(8, 16, 2, 3);
  check_2bw(1, 3, 1, 2);
  check_zero_bubble(4, 8, 1, 1, 1);
  check_zero_bubble(4, 4, 1, 1, 1);
  check_zero_bubble(2, 8, 1, 1, 1);
  check_zero_bubble(8, 16, 1, 1, 1);
  check_zero_bubble(4, 8, 1, 1, 0.5);
  check_zero_bubble(4, 8, 1, 2, 1);
  check_zero_bubble(4, 8, 2, 1, 1);
  check_closed_forms(LX_SCHEDULE_GPIPE, 4, 8);
  check_closed_forms(LX_SCHEDULE_1F1B, 4, 8);
  check_closed_forms(LX_SCHEDULE_1F1B, 2, 2);
  check_closed_forms(LX_SCHEDULE_1F1B, 2, 8);
  check_closed_forms(LX_SCHEDULE_1F1B, 8, 16);
  check_closed_forms(LX_SCHEDULE_GPIPE, 1, 3);
  for (lx_recompute_policy pol = 0; pol < LX_RECOMPUTE_POLICY_COUNT; pol++) {
    check_memory(LX_SCHEDULE_1F1B, 4, 8, pol);
    check_memory(LX_SCHEDULE_GPIPE, 2, 4, pol);
  }
  check_memory(LX_SCHEDULE_1F1B, 4, 4, LX_RECOMPUTE_NONE);
  check_memory(LX_SCHEDULE_ZB_H1, 4, 8, LX_RECOMPUTE_LYNX_HEU);
  /* ZB-H1's later stages hold p micro-batches (from a forward to its W
   * pass), but after a B only what W reads (the linears' inputs and output
   * gradients), so no stage's peak passes the highest of 1F1B's (stage 0's,
   * whose lag is 0 and whose instructions are 1F1B's). */
  int64_t zb = check_memory(LX_SCHEDULE_ZB_H1, 4, 8, LX_RECOMPUTE_NONE);
  int64_t one_f_one_b = check_memory(LX_SCHEDULE_1F1B, 4, 8, LX_RECOMPUTE_NONE);
  CHECK(zb == one_f_one_b, "p=4 m=8: ZB-H1's highest stage peak %lld is 1F1B's %lld", (long long)zb,
        (long long)one_f_one_b);
  check_policies(1);
  check_policies(2);
  check_selective_flash(1);
  check_selective_flash(2);
  return check_exit_status();
}
