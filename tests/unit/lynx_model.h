/* lynx_model.h — the small GPT the overlapped-recomputation tests plan
 * (test_lynx_policies.c, test_lynx_schedules.c): 8 layers of width 128 and
 * 4 heads, with dropout, on a 4 x 8 A100 cluster; load() sets the layers,
 * the pipeline and tensor-parallel degrees, the micro-batches and the
 * schedule, then analyses it. */
#ifndef LYNX_MODEL_H
#define LYNX_MODEL_H

#include <stdbool.h>
#include <string.h>

#include "analysis/analyze.h"
#include "frontend/frontend.h"

static const char *model_text =
    "#include <lynx.h>\n"
    "#define H 128\n"
    "static const struct lx_model model = {.vocab = 256, .seq_len = 64, .layers = 8, .hidden = H, .heads = "
    "4,\n"
    "  .dropout = 0.1};\n"
    "static const struct lx_cluster cluster = {.gpu = GPU_A100_80GB, .nodes = 4, .gpus_per_node = 8};\n"
    "static const struct lx_parallel parallel = {.micro_batch = 2};\n"
    "tensor prologue(tensor t) { return add(embedding(t, 256, H), position_embedding(t, H)); }\n"
    "tensor block(tensor x) {\n"
    "  tensor a = attention(linear(layernorm(x), 3 * H), 4, 4);\n"
    "  x = add(x, dropout(linear(a, H)));\n"
    "  return add(x, dropout(linear(gelu(linear(layernorm(x), 4 * H)), H)));\n"
    "}\n"
    "tensor epilogue(tensor x, tensor y) { return cross_entropy(lm_head(layernorm(x), 256), y); }\n";

/* `text` parsed and analysed with these layers, degrees, micro-batches and schedule. */
static inline bool load_text(lx_ir *ir, const char *text, int layers, int pp, int tp, int micro_batches,
                             lx_schedule schedule) {
  lx_ir_init(ir);
  if (lx_parse_model("lynx.model", text, strlen(text), ir)) return false;
  ir->model.layers = layers;
  ir->plan.pp = pp;
  ir->plan.tp = tp;
  ir->plan.global_batch = micro_batches * 2;
  ir->plan.schedule = schedule;
  return lx_analyze(ir) == 0;
}

static inline bool load(lx_ir *ir, int layers, int pp, int tp, int micro_batches, lx_schedule schedule) {
  return load_text(ir, model_text, layers, pp, tp, micro_batches, schedule);
}

#endif
