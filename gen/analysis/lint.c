/* lint.c — warnings about what is valid but likely not meant (lint.h). */
#include "analysis/lint.h"

#include "diag.h"

/* A GPT block copied into a grouped-query model keeps its qkv linear 3 x
 * hidden wide: valid, since the width splits into heads + 2 kv_heads heads,
 * but of another head size than hidden / heads, so another model than meant
 * (and of other parameter counts than the published one). */
static void lint_qkv_width(const lx_ir *ir, const lx_graph *g) {
  const lx_model_config *m = &ir->model;
  for (int i = 0; i < g->n_ops; i++) {
    const lx_op *op = &g->ops[i];
    if (op->kind != LX_OP_ATTENTION || op->kv_heads >= op->heads) continue;
    int width = g->ops[op->inputs[0]].out.width, groups = op->heads + 2 * op->kv_heads;
    if (width != 3 * m->hidden || width % groups) continue;
    lx_warning(
        op->src,
        "%s() with %d kv_heads of %d heads is fed a qkv 3 x hidden = %d wide, which makes its head size "
        "%d, not hidden / heads = %d: grouped-query attention's qkv is (heads + 2 x kv_heads) x head size "
        "= %d wide",
        lx_op_kind_name(op->kind), op->kv_heads, op->heads, width, width / groups, m->hidden / m->heads,
        groups * (m->hidden / m->heads));
  }
}

/* The programs' learning rate climbs for warmup_steps: past the run's last
 * step it never reaches lr (the programs' --warmup and --steps may still
 * change either). */
static void lint_warmup(const lx_ir *ir) {
  const lx_training *t = &ir->training;
  if (t->warmup_steps <= t->steps) return;
  lx_warning(
      ir->locs.field[LX_F_WARMUP],
      "warmup_steps (%d) is more than steps (%d%s): the learning rate never reaches lr (%g), and ends at "
      "%g",
      t->warmup_steps, t->steps, ir->locs.field[LX_F_STEPS].file ? "" : ", the default", t->lr,
      t->lr * t->steps / t->warmup_steps);
}

void lx_lint(const lx_ir *ir) {
  lint_qkv_width(ir, &ir->block);
  lint_warmup(ir);
}
