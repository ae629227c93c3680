/* The static memory plan's two faces agree: the printers write every offset
 * as the affine expression lx_place_of gives for one reference instance of a
 * graph (constant + slot * per_slot + layer * per_layer + parity term), and
 * the verifier and the memory check use lx_locate for each instance. For every
 * tensor of every stage, layer and micro-batch, the expression evaluated at
 * that instance must be the located offset — except the three places that
 * depend on whether a layer is the stage's first or last, which the printers
 * compute in small functions from the first and last layer's expressions. */
#include <stdlib.h>
#include <string.h>

#include "analysis/analyze.h"
#include "check.h"
#include "diag.h"
#include "emit/emit_names.h"
#include "frontend/frontend.h"
#include "planning/layout.h"
#include "planning/memplan.h"
#include "planning/overlap.h"
#include "planning/passes.h"
#include "planning/plan.h"

/* The printed expression at a layer, which is the stage's slot-th and in its chunk-th chunk: the
 * emitted helpers' arithmetic (stash_slot, stash_layer, chunk_stash, the chunk table), written out. */
static int64_t evaluate(const lx_stage_layout *l, const lx_stage *st, const lx_place_expr *e, int layer,
                        int slot, int chunk, int mb, int slots) {
  int64_t at =
      e->constant + (int64_t)((layer + e->parity_add) % 2) * e->parity_stride + (int64_t)chunk * e->per_chunk;
  if (!e->chunk_stash) return at + (int64_t)(mb % slots) * e->per_slot + (int64_t)slot * e->per_layer;
  return at + l->chunk_layer_base[chunk] +
         (int64_t)(mb % l->chunk_slots[chunk]) * l->chunk_slot_bytes[chunk] +
         (int64_t)(layer - st->chunks[chunk].first_layer) * e->per_layer;
}

/* The reference layer the printers use for this tensor at this layer: the
 * stage's first layer, except in the layer-boundary functions, which
 * return each group of layers whose places print alike (chunk edges, the
 * stage's edges, the rest) the place of its first layer. */
static int reference_layer(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_ref t) {
  const lx_stage *st = &p->stages[s];
  const lx_graph *g = &p->ir->block;
  if (t.graph != LX_GRAPH_BLOCK) return -1;
  bool output_side = (t.role == LX_T_OUTPUT || t.role == LX_T_GRAD) && t.op == g->output;
  bool input_grad = t.role == LX_T_GRAD && g->ops[t.op].kind == LX_OP_INPUT;
  if (!output_side && !input_grad) return st->chunks[0].first_layer;
  lx_tensor_ref at = t;
  at.mb = 0;
  lx_place_expr own = lx_place_of(p, s, l, at);
  for (int k = 0;; k++) {
    at.layer = lx_slot_layer(st, k);
    lx_place_expr e = lx_place_of(p, s, l, at);
    if (emit_same_place(&e, &own)) return at.layer;
  }
}

static int mismatches;

static void check_tensor(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_ref t) {
  lx_tensor_ref reference = t;
  reference.layer = reference_layer(p, s, l, t);
  reference.mb = 0;
  lx_place_expr e = lx_place_of(p, s, l, reference);
  bool block = t.graph == LX_GRAPH_BLOCK;
  int layer = block ? t.layer : 0;
  int slot = block ? lx_layer_slot(&p->stages[s], layer) : 0,
      chunk = block ? lx_chunk_of(&p->stages[s], layer) : 0;
  lx_span located = lx_locate(p, s, l, t);
  int64_t printed = evaluate(l, &p->stages[s], &e, layer, slot, chunk, t.mb, lx_place_slots(l, &e));
  if (printed != located.offset && mismatches++ < 5)
    printf("     stage %d graph %d layer %d op %d mb %d role %d: expression %lld, located %lld\n", s, t.graph,
           t.layer, t.op, t.mb, t.role, (long long)printed, (long long)located.offset);
}

static void check_op(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_ref t) {
  const lx_op *op = &lx_graph_of(p->ir, t.graph)->ops[t.op];
  bool activation = op->out.dtype != LX_DTYPE_INT32 && !op->out.scalar;
  if (!op->out.scalar) check_tensor(p, s, l, (t.role = LX_T_OUTPUT, t));
  if (activation) check_tensor(p, s, l, (t.role = LX_T_GRAD, t));
  if (t.graph == LX_GRAPH_BLOCK && p->stages[s].decisions[t.op].recompute)
    check_tensor(p, s, l, (t.role = LX_T_RECOMPUTED, t));
  for (int k = 0; k < op->n_saved; k++)
    if (op->saved[k].kind == LX_SAVE_INTERNAL) check_tensor(p, s, l, (t.role = LX_T_INTERNAL, t.index = k, t));
  for (int k = 0; k < LX_MAX_OP_PARAMS; k++)
    if (l->places[t.graph][t.op].param_elements[k] > 0)
      check_tensor(p, s, l, (t.role = LX_T_PARAM, t.index = k, t));
}

/* Fine-tuning's parameters, stage by stage: every trained tensor (its every
 * layer) lies in the first param_elements of the params region, every frozen
 * one in the frozen_elements from frozen_first, no two overlap, the buckets
 * tile the trained part alone, and the gradients are the trained part's. */
static void check_frozen_regions(const char *path, int pp, bool lora_fa) {
  lx_ir ir;
  lx_ir_init(&ir);
  lx_diag_set_sink(NULL);
  bool ok = lx_parse_model(path, NULL, 0, &ir) == 0;
  ir.plan.pp = pp;
  ir.training.lora_fa = lora_fa;
  ok = ok && lx_analyze(&ir) == 0 && ir.finetune;
  lx_cost_model cm;
  ok = ok && lx_cost_model_init(&cm, &ir, NULL);
  lx_pipeline pipe;
  lx_plan_options options = {.policy = LX_RECOMPUTE_NONE, .partition = LX_PARTITION_UNIFORM, .cm = &cm};
  ok = ok && lx_plan_pipeline(&ir, &options, &pipe);
  CHECK(ok, "%s pp=%d%s plans a fine-tuning run", path, pp, lora_fa ? " LoRA-FA" : "");
  if (!ok) return;
  for (int s = 0; s < pipe.pp; s++) {
    lx_stage_layout l;
    lx_layout_stage(&pipe, s, 2, true, &l);
    int64_t region = l.region_offset[LX_REGION_PARAMS], total = l.frozen_first + l.frozen_elements;
    char *owner = calloc((size_t)total, 1); /* 1 trained, 2 frozen */
    int misplaced = 0, overlaps = 0, trained = 0, frozen = 0;
    const lx_stage *st = &pipe.stages[s];
    for (int g = 0; g < LX_GRAPH_COUNT; g++) {
      bool present = g == LX_GRAPH_PROLOGUE   ? st->has_prologue
                     : g == LX_GRAPH_EPILOGUE ? st->has_epilogue
                                              : true;
      int count = g == LX_GRAPH_BLOCK ? st->n_layers : 1;
      const lx_graph *graph = lx_graph_of(&ir, (lx_graph_id)g);
      for (int c = 0; present && c < count; c++)
        for (int i = 0; i < graph->n_ops; i++)
          for (int k = 0; k < LX_MAX_OP_PARAMS; k++) {
            if (l.places[g][i].param_elements[k] <= 0) continue;
            int layer = g == LX_GRAPH_BLOCK ? lx_slot_layer(st, c) : -1;
            lx_span span =
                lx_locate(&pipe, s, &l, (lx_tensor_ref){(lx_graph_id)g, layer, i, 0, LX_T_PARAM, k});
            int64_t first = (span.offset - region) / l.param_elt, n = span.bytes / l.param_elt;
            bool is_trained = lx_param_trained(&ir, &graph->ops[i], k);
            int64_t lo = is_trained ? 0 : l.frozen_first, hi = is_trained ? l.param_elements : total;
            misplaced += first < lo || first + n > hi;
            for (int64_t e = first; e >= 0 && e < first + n && e < total; e++) {
              overlaps += owner[e] != 0;
              owner[e] = is_trained ? 1 : 2;
            }
            trained += is_trained, frozen += !is_trained;
          }
    }
    int64_t bucketed = 0;
    for (int b = 0; b < l.n_buckets; b++)
      bucketed += l.buckets[b].elements;
    CHECK(!misplaced && !overlaps && trained > 0 && frozen > 0,
          "%s pp=%d%s stage %d: %d trained tensors in the first %lld elements, %d frozen from %lld on, none "
          "overlapping (%d misplaced, %d overlapping elements)",
          path, pp, lora_fa ? " LoRA-FA" : "", s, trained, (long long)l.param_elements, frozen,
          (long long)l.frozen_first, misplaced, overlaps);
    CHECK(bucketed == l.param_elements && l.region_bytes[LX_REGION_GRADS] >= l.param_elements * 4 &&
              l.region_bytes[LX_REGION_GRADS] < (l.param_elements + l.frozen_elements) * 4,
          "%s pp=%d%s stage %d: the buckets (%lld elements) and the gradients cover the trained part alone",
          path, pp, lora_fa ? " LoRA-FA" : "", s, (long long)bucketed);
    free(owner);
    lx_layout_free(&l);
  }
  lx_pipeline_free(&pipe);
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
}

static int check_stage(const lx_pipeline *p, int s, const lx_stage_layout *l) {
  const lx_stage *st = &p->stages[s];
  int checked = 0;
  for (int mb = 0; mb < 2 * lx_most_slots(l) + 1 && mb < p->micro_batches; mb++)
    for (int g = 0; g < LX_GRAPH_COUNT; g++) {
      bool present = g == LX_GRAPH_PROLOGUE ? st->has_prologue : g == LX_GRAPH_EPILOGUE ? st->has_epilogue : true;
      int count = g == LX_GRAPH_BLOCK ? st->n_layers : 1;
      for (int k = 0; present && k < count; k++)
        for (int i = 0; i < lx_graph_of(p->ir, (lx_graph_id)g)->n_ops; i++, checked++)
          check_op(p, s, l,
                   (lx_tensor_ref){(lx_graph_id)g, g == LX_GRAPH_BLOCK ? lx_slot_layer(st, k) : -1, i, mb,
                                   LX_T_OUTPUT, 0});
    }
  return checked;
}

static void check_chunked(const char *path, int pp, lx_schedule schedule, int chunks,
                          lx_recompute_policy policy, double gpu_memory) {
  lx_ir ir;
  lx_ir_init(&ir);
  lx_diag_set_sink(NULL);
  bool ok = lx_parse_model(path, NULL, 0, &ir) == 0;
  ir.plan.pp = pp;
  if (schedule) ir.plan.schedule = schedule;
  ir.plan.virtual_stages = chunks;
  ir.cluster.gpus_per_node = 8; /* room for every depth tried here */
  ok = ok && lx_analyze(&ir) == 0;
  lx_cost_model cm;
  ok = ok && lx_cost_model_init(&cm, &ir, NULL);
  if (ok && gpu_memory > 0) cm.gpu.memory_bytes = gpu_memory;
  lx_pipeline pipe;
  lx_plan_options options = {.policy = policy, .partition = LX_PARTITION_UNIFORM, .cm = &cm};
  ok = ok && lx_plan_pipeline(&ir, &options, &pipe);
  CHECK(ok, "%s pp=%d %s %s plans", path, pp, lx_schedule_name(ir.plan.schedule),
        lx_recompute_policy_name(policy));
  if (!ok) return;
  mismatches = 0;
  int checked = 0;
  for (int s = 0; s < pipe.pp; s++) {
    for (int elt = 2; elt <= 4; elt += 2) {
      lx_stage_layout l;
      lx_layout_stage(&pipe, s, elt, elt == 2, &l);
      checked += check_stage(&pipe, s, &l);
      lx_layout_free(&l);
    }
  }
  CHECK(mismatches == 0,
        "%s pp=%d %s %s: the printed expression of every tensor (%d ops x roles x micro-batches) is its "
        "located offset (%d mismatches)",
        path, pp, lx_schedule_name(ir.plan.schedule), lx_recompute_policy_name(policy), checked, mismatches);
  lx_pipeline_free(&pipe);
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
}

static void check_schedule(const char *path, int pp, lx_schedule schedule, lx_recompute_policy policy,
                           double gpu_memory) {
  check_chunked(path, pp, schedule, 0, policy, gpu_memory);
}

static void check_interleaved(const char *path, int pp, int chunks, lx_recompute_policy policy,
                              double gpu_memory) {
  check_chunked(path, pp, LX_SCHEDULE_INTERLEAVED, chunks, policy, gpu_memory);
}

static void check_model(const char *path, int pp, lx_recompute_policy policy, double gpu_memory) {
  check_schedule(path, pp, LX_SCHEDULE_OPEN, policy, gpu_memory);
}

/* ZB-H1's pools, against what a W pass reads, summed here from the IR: per
 * layer the outputs of the block linears (their output gradients) and the
 * inputs they read; stage s holds p - s micro-batches from a forward to its
 * backward (1F1B's stash), p from a forward to its W pass (the inputs) and
 * s + 1 from a backward to its W pass (the output gradients). */
static void check_zero_bubble_pools(int pp, int micro_batches) {
  lx_ir ir;
  lx_ir_init(&ir);
  bool ok = lx_parse_model("examples/tiny.model", NULL, 0, &ir) == 0;
  ir.plan.pp = pp, ir.plan.tp = ir.plan.dp = 1, ir.plan.schedule = LX_SCHEDULE_ZB_H1;
  ir.plan.global_batch = micro_batches * ir.plan.micro_batch;
  lx_pipeline pipe;
  ok = ok && lx_analyze(&ir) == 0 && lx_build_pipeline(&ir, LX_RECOMPUTE_NONE, &pipe);
  CHECK(ok, "tiny pp=%d zb-h1 with %d micro-batches builds", pp, micro_batches);
  if (!ok) return;
  const lx_graph *g = &ir.block;
  int64_t outputs = 0, inputs = 0;
  for (int i = 0; i < g->n_ops; i++) {
    if (g->ops[i].kind != LX_OP_LINEAR) continue;
    outputs += g->ops[i].out_bytes;
    inputs += g->ops[g->ops[i].inputs[0]].out_bytes; /* tiny's linears read distinct tensors */
  }
  for (int s = 1; s < pp; s++) {
    lx_stage_layout l;
    lx_layout_stage(&pipe, s, 4, false, &l);
    int n = pipe.stages[s].n_layers, m = micro_batches;
    int want_stash = pp - s < m ? pp - s : m, want_held = pp < m ? pp : m, want_grads = s + 1 < m ? s + 1 : m;
    CHECK(l.slots == want_stash && l.pool_slots[LX_POOL_HELD] == want_held &&
              l.pool_slots[LX_POOL_WEIGHT_GRAD] == want_grads,
          "zb-h1 pp=%d m=%d stage %d: %d stash, %d held and %d weight-gradient slots (want %d, %d, %d)", pp,
          m, s, l.slots, l.pool_slots[LX_POOL_HELD], l.pool_slots[LX_POOL_WEIGHT_GRAD], want_stash, want_held,
          want_grads);
    CHECK(l.pool_slot_bytes[LX_POOL_HELD] == n * inputs &&
              l.pool_slot_bytes[LX_POOL_WEIGHT_GRAD] == n * outputs,
          "zb-h1 pp=%d stage %d: a held slot is %lld bytes (the linears' inputs: %lld), a weight-gradient "
          "slot %lld "
          "(their outputs: %lld)",
          pp, s, (long long)l.pool_slot_bytes[LX_POOL_HELD], (long long)(n * inputs),
          (long long)l.pool_slot_bytes[LX_POOL_WEIGHT_GRAD], (long long)(n * outputs));
    lx_layout_free(&l);
  }
  lx_pipeline_free(&pipe);
  lx_ir_free(&ir);
}

int main(void) {
  const lx_recompute_policy policies[] = {LX_RECOMPUTE_NONE, LX_RECOMPUTE_FULL, LX_RECOMPUTE_SELECTIVE};
  for (size_t k = 0; k < sizeof policies / sizeof policies[0]; k++) {
    check_model("examples/tiny.model", 1, policies[k], 0);
    check_model("examples/tiny.model", 2, policies[k], 0);
    check_model("examples/tiny.model", 4, policies[k], 0);
    check_model("examples/gpt13b.model", 4, policies[k], 0);
  }
  /* windows: memory squeezed until the Lynx policies recompute in them */
  check_model("examples/tiny.model", 2, LX_RECOMPUTE_LYNX_HEU, 0.003 * 1024 * 1024 * 1024);
  check_model("examples/tiny.model", 2, LX_RECOMPUTE_LYNX_OPT, 0.003 * 1024 * 1024 * 1024);
  check_model("examples/llama.model", 4, LX_RECOMPUTE_SELECTIVE, 0);
  /* zero bubble: W passes read from the held and weight-gradient pools */
  check_schedule("examples/tiny.model", 4, LX_SCHEDULE_ZB_H1, LX_RECOMPUTE_NONE, 0);
  check_schedule("examples/gpt13b.model", 4, LX_SCHEDULE_ZB_H1, LX_RECOMPUTE_SELECTIVE, 0);
  check_schedule("examples/llama.model", 4, LX_SCHEDULE_ZB_H1, LX_RECOMPUTE_NONE, 0);
  check_schedule("examples/tiny.model", 2, LX_SCHEDULE_ZB_H1, LX_RECOMPUTE_LYNX_HEU,
                 0.003 * 1024 * 1024 * 1024);
  /* interleaved 1F1B: chunk pools of the stash, pipeline buffers per chunk */
  check_interleaved("examples/tiny.model", 2, 2, LX_RECOMPUTE_NONE, 0);
  check_interleaved("examples/llama.model", 2, 4, LX_RECOMPUTE_SELECTIVE, 0);
  check_interleaved("examples/gpt13b.model", 4, 3, LX_RECOMPUTE_FULL, 0);
  check_interleaved("examples/tiny.model", 2, 2, LX_RECOMPUTE_LYNX_HEU, 0.003 * 1024 * 1024 * 1024);
  check_zero_bubble_pools(4, 8);
  check_zero_bubble_pools(2, 5);
  /* fine-tuning: the adapters' places, the frozen weights after the trained ones */
  check_model("examples/tiny-lora.model", 2, LX_RECOMPUTE_NONE, 0);
  check_model("examples/tiny-lora.model", 1, LX_RECOMPUTE_FULL, 0);
  check_model("examples/gpt2-124m-lora-fa.model", 1, LX_RECOMPUTE_SELECTIVE, 0);
  for (int lora_fa = 0; lora_fa <= 1; lora_fa++) {
    check_frozen_regions("examples/tiny-lora.model", 2, lora_fa);
    check_frozen_regions("examples/gpt2-124m-lora-fa.model", 1, lora_fa);
  }
  return check_exit_status();
}
