/* The operand table (ir/op_signature.h) against what it must agree with:
 * - every op kind has a row, with a kernel in both targets' templates;
 * - a row lists what its kernel writes or adds into before what it reads
 *   (the printers put a workspace between the two);
 * - on real models, the backward kernel reads exactly what analysis saves
 *   for it (the bytes the memory plan keeps), and the forward kernel writes
 *   every buffer of the op's own that is saved. A row that reads a tensor
 *   nobody keeps, or a saved tensor no kernel reads, fails here. */
#include <stdlib.h>
#include <string.h>

#include "analysis/analyze.h"
#include "check.h"
#include "diag.h"
#include "frontend/frontend.h"
#include "op_signature.h"
#include "schedule.h"

static bool lists_writes_first(const lx_operand *row, bool backward) {
  bool reading = false;
  for (const lx_operand *o = row; o->kind != LX_OPND_END; o++) {
    bool read = lx_operand_mode(o->kind, backward) == LX_ACCESS_READ;
    if (reading && !read) return false;
    reading |= read;
  }
  return true;
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return buf;
}

/* Does one of the files declare `name(const lx_ctx *ctx, `: the kernel with
 * its target's context first? */
static bool declared(const char *const *files, const char *name) {
  char call[96];
  snprintf(call, sizeof call, "%s(const lx_ctx *ctx,", name);
  for (int k = 0; files[k]; k++) {
    const char *text = read_text(files[k]);
    if (text && strstr(text, call)) return true;
  }
  return false;
}

static const char *const cpu_templates[] = {"templates/cpu/lx_embedding.h",
                                            "templates/cpu/lx_norm.h",
                                            "templates/cpu/lx_matmul.h",
                                            "templates/cpu/lx_attention.h",
                                            "templates/cpu/lx_elementwise.h",
                                            "templates/cpu/lx_loss.h",
                                            NULL};
static const char *const cuda_templates[] = {"templates/cuda/lx_cuda_api.h", NULL};

static void check_row(const lx_op *op) {
  const lx_op_signature *sig = lx_op_signature_of(op);
  const char *kind = lx_op_kind_name(op->kind);
  CHECK(sig->kernel && sig->forward[0].kind != LX_OPND_END && sig->backward[0].kind != LX_OPND_END,
        "%s%s: a row with a kernel and operands in both passes", kind,
        op->attention_impl == LX_ATTN_FLASH ? " (flash)" : "");
  if (!sig->kernel) return;
  CHECK(lists_writes_first(sig->forward, false) && lists_writes_first(sig->backward, true),
        "%s: each pass lists what it writes before what it reads", sig->kernel);
  for (int backward = 0; backward < 2; backward++) {
    const char *pass = backward ? "backward" : "forward";
    char name[64];
    snprintf(name, sizeof name, "lx_%s_%s", sig->kernel, pass);
    CHECK(declared(cpu_templates, name) && declared(cuda_templates, name),
          "%s, its context first, is in both targets' templates", name);
  }
}

static void check_every_kind(void) {
  for (int k = 0; k < LX_OP_KIND_COUNT; k++) {
    lx_op op = {.kind = (lx_op_kind)k};
    if (k == LX_OP_INPUT) {
      CHECK(lx_op_operands(&op, false)->kind == LX_OPND_END && lx_op_operands(&op, true)->kind == LX_OPND_END,
            "an input has no kernel");
      continue;
    }
    check_row(&op);
    if (k == LX_OP_ATTENTION) {
      op.attention_impl = LX_ATTN_FLASH;
      check_row(&op);
    }
  }
}

static bool row_has(const lx_operand *row, lx_operand_kind kind, int index, const char *saved) {
  for (const lx_operand *o = row; o->kind != LX_OPND_END; o++)
    if (o->kind == kind && (kind != LX_OPND_IN || o->index == index) &&
        (kind != LX_OPND_SAVED || !strcmp(o->saved, saved)))
      return true;
  return false;
}

static bool saves(const lx_op *op, lx_save_kind kind, int input, const char *what) {
  for (int k = 0; k < op->n_saved; k++) {
    const lx_saved *sv = &op->saved[k];
    if (sv->kind == kind && (kind != LX_SAVE_INPUT || sv->input == input) &&
        (kind != LX_SAVE_INTERNAL || !strcmp(sv->what, what)))
      return true;
  }
  return false;
}

/* Is every saved tensor an operand of the backward (and an internal one of
 * the forward), and every tensor the backward reads saved? Returns the
 * number of disagreements. */
static int disagreements(const lx_op *op) {
  const lx_operand *fwd = lx_op_operands(op, false), *bwd = lx_op_operands(op, true);
  int bad = 0;
  for (int k = 0; k < op->n_saved; k++) {
    const lx_saved *sv = &op->saved[k];
    if (sv->kind == LX_SAVE_INPUT) bad += !row_has(bwd, LX_OPND_IN, sv->input, NULL);
    if (sv->kind == LX_SAVE_OUTPUT) bad += !row_has(bwd, LX_OPND_OUT, 0, NULL);
    if (sv->kind == LX_SAVE_INTERNAL)
      bad += !row_has(bwd, LX_OPND_SAVED, 0, sv->what) + !row_has(fwd, LX_OPND_SAVED, 0, sv->what);
  }
  for (const lx_operand *o = bwd; o->kind != LX_OPND_END; o++) {
    if (o->kind == LX_OPND_IN) bad += !saves(op, LX_SAVE_INPUT, o->index, NULL);
    if (o->kind == LX_OPND_OUT) bad += !saves(op, LX_SAVE_OUTPUT, 0, NULL);
    /* a named buffer the op does not have (no mask at dropout 0) is NULL */
  }
  return bad;
}

static void check_model(const char *path) {
  lx_ir ir;
  lx_ir_init(&ir);
  lx_diag_set_sink(NULL);
  bool ok = lx_parse_model(path, NULL, 0, &ir) == 0 && lx_analyze(&ir) == 0;
  CHECK(ok, "%s analyses", path);
  if (!ok) return;
  for (lx_graph_id g = LX_GRAPH_PROLOGUE; g < LX_GRAPH_COUNT; g++) {
    const lx_graph *graph = lx_graph_of(&ir, g);
    for (int i = 0; i < graph->n_ops; i++) {
      const lx_op *op = &graph->ops[i];
      if (op->kind == LX_OP_INPUT) continue;
      int bad = disagreements(op);
      CHECK(bad == 0, "%s %s.%s: its kernels' operands are what it saves (%d disagreements)", path,
            graph->name, op->name, bad);
    }
  }
  lx_ir_free(&ir);
}

/* A row that reads an input nobody keeps is caught (the check can fail). */
static void check_detects_unsaved_read(void) {
  lx_op gelu = {.kind = LX_OP_GELU, .n_inputs = 1};
  CHECK(disagreements(&gelu) == 1,
        "a gelu that saves nothing but whose backward reads its input: 1 disagreement");
}

int main(void) {
  check_every_kind();
  check_detects_unsaved_read();
  check_model("examples/tiny.model");    /* dropout 0: no masks */
  check_model("examples/gpt-13b.model"); /* dropout ops and masks, materialised attention */
  check_model("examples/llama.model");   /* flash attention, rope, rmsnorm, swiglu */
  return check_exit_status();
}
