/* ir.c — construction, names and the structural validator of the IR. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "op_signature.h"

void lx_ir_init(lx_ir *ir) {
  memset(ir, 0, sizeof *ir);
  ir->prologue.name = "prologue";
  ir->block.name = "block";
  ir->epilogue.name = "epilogue";
  ir->prologue.output = ir->block.output = ir->epilogue.output = -1;
}

void lx_ir_free(lx_ir *ir) {
  for (lx_srcnote *n = ir->notes, *next; n; n = next) {
    next = n->owned_next;
    free(n->file);
    free(n->text);
    free(n);
  }
  free(ir->model_path);
  free(ir->training.train_data);
  free(ir->training.val_data);
  free(ir->prologue.ops);
  free(ir->block.ops);
  free(ir->epilogue.ops);
  memset(ir, 0, sizeof *ir);
}

static void copy_ops(lx_graph *g) {
  lx_op *ops = lx_calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *ops);
  if (g->n_ops) memcpy(ops, g->ops, sizeof *ops * (size_t)g->n_ops);
  g->ops = ops;
  g->cap_ops = g->n_ops;
}

void lx_ir_working_copy(lx_ir *copy, const lx_ir *src) {
  *copy = *src;
  copy_ops(&copy->prologue);
  copy_ops(&copy->block);
  copy_ops(&copy->epilogue);
}

void lx_ir_free_working_copy(lx_ir *copy) {
  free(copy->prologue.ops);
  free(copy->block.ops);
  free(copy->epilogue.ops);
  memset(copy, 0, sizeof *copy);
}

lx_op *lx_graph_add(lx_graph *g, lx_op_kind kind) {
  if (g->n_ops == g->cap_ops) {
    g->cap_ops = g->cap_ops ? 2 * g->cap_ops : 16;
    g->ops = lx_realloc(g->ops, sizeof *g->ops * (size_t)g->cap_ops);
  }
  lx_op *op = &g->ops[g->n_ops++];
  memset(op, 0, sizeof *op);
  op->kind = kind;
  int ordinal = 0;
  for (int i = 0; i < g->n_ops - 1; i++)
    ordinal += g->ops[i].kind == kind;
  snprintf(op->name, sizeof op->name, "%s_%d", lx_op_kind_name(kind), ordinal);
  return op;
}

#define NAME_OF(table, value)                                                                                \
  ((size_t)(value) < sizeof(table) / sizeof(table)[0] && (table)[value] ? (table)[value] : "?")

const char *lx_op_kind_name(lx_op_kind kind) { return lx_op_kind_signature(kind)->name; }

const char *lx_gpu_name(lx_gpu gpu) {
  static const char *names[] = {
      NULL,        "V100-SXM2-32GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB",
      "GH200-96GB"};
  return NAME_OF(names, gpu);
}

const char *lx_link_name(lx_link link) {
  static const char *names[] = {NULL, "nvlink2", "nvlink3", "nvlink4", "pcie4", "pcie5", "ib-hdr", "ib-ndr"};
  return NAME_OF(names, link);
}

const char *lx_schedule_name(lx_schedule schedule) {
  static const char *names[] = {"open", "gpipe", "1f1b", "2bw", "interleaved", "zb-h1"};
  return NAME_OF(names, schedule);
}

const char *lx_dtype_name(lx_dtype dtype) {
  static const char *names[] = {NULL, "bf16", "fp16", "fp32", "int32"};
  return NAME_OF(names, dtype);
}

const char *lx_lr_schedule_name(lx_lr_schedule s) {
  static const char *names[] = {NULL, "constant", "cosine", "linear"};
  return NAME_OF(names, s);
}

const char *lx_tp_role_name(lx_tp_role role) {
  static const char *names[] = {"replicated", "column", "row", "split", "vocab"};
  return NAME_OF(names, role);
}

const char *lx_file_name(const char *path) {
  if (!path) return "";
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

int64_t lx_rank_width(const lx_ir *ir, lx_shape s) {
  int64_t tp = ir->plan.tp;
  if (s.scalar) return 1;
  int64_t width = s.vocab ? ir->padded_vocab : s.width;
  return s.split ? width / tp : width;
}

int lx_dtype_bytes(lx_dtype dtype) {
  switch (dtype) {
  case LX_DTYPE_BF16:
  case LX_DTYPE_FP16: return 2;
  case LX_DTYPE_FP32:
  case LX_DTYPE_INT32: return 4;
  default: return 0;
  }
}

bool lx_op_saves(const lx_graph *g, int c, int producer) {
  for (int k = 0; k < g->ops[c].n_saved; k++) {
    const lx_saved *sv = &g->ops[c].saved[k];
    if ((sv->kind == LX_SAVE_INPUT && g->ops[c].inputs[sv->input] == producer) ||
        (sv->kind == LX_SAVE_OUTPUT && c == producer))
      return true;
  }
  return false;
}

bool lx_param_trained(const lx_ir *ir, const lx_op *op, int k) {
  if (!ir->finetune) return true;
  return op->lora_rank && (k == LX_PARAM_LORA_B || (k == LX_PARAM_LORA_A && !ir->training.lora_fa));
}

const char *lx_param_name(int k) {
  static const char *names[LX_MAX_OP_PARAMS] = {"weight", "bias", "lora_a", "lora_b"};
  return (unsigned)k < LX_MAX_OP_PARAMS ? names[k] : "?";
}

bool lx_matmul_reads_input(const lx_ir *ir, const lx_op *op) {
  return !ir->finetune || op->chunks > 1 || (op->lora_rank && !ir->training.lora_fa);
}

double lx_lora_scale(const lx_op *op) { return op->lora_rank ? (double)op->lora_alpha / op->lora_rank : 0; }

int lx_uses(const lx_graph *g, int i) {
  int uses = 0;
  for (int c = i + 1; c < g->n_ops; c++)
    for (int k = 0; k < g->ops[c].n_inputs; k++)
      uses += g->ops[c].inputs[k] == i;
  return uses;
}

bool lx_chunk_local(const lx_graph *g, int i) {
  if (g->ops[i].chunks < 2 || i == g->output) return false;
  for (int c = i + 1; c < g->n_ops; c++)
    for (int k = 0; k < g->ops[c].n_inputs; k++)
      if (g->ops[c].inputs[k] == i && g->ops[c].chunks < 2) return false;
  return true;
}

/* Chunks split the micro-batch's rows evenly (analysis: seq_len % chunks == 0). */
int64_t lx_resident_bytes(const lx_graph *g, int i) {
  const lx_op *op = &g->ops[i];
  return lx_chunk_local(g, i) ? op->out_bytes / op->chunks : op->out_bytes;
}

/* Marks the chunk-local producers op i reads, and theirs. */
static void mark_needed(const lx_graph *g, int i, bool *needed) {
  for (int k = 0; k < g->ops[i].n_inputs; k++) {
    int j = g->ops[i].inputs[k];
    if (!lx_chunk_local(g, j) || needed[j]) continue;
    needed[j] = true;
    mark_needed(g, j, needed);
  }
}

int lx_made_again(const lx_graph *g, int i, int *out) {
  if (g->ops[i].chunks < 2) return 0;
  bool *needed = lx_calloc((size_t)g->n_ops, sizeof *needed),
       *before = lx_calloc((size_t)g->n_ops, sizeof *before);
  mark_needed(g, i, needed);
  for (int j = i + 1; j < g->n_ops && g->ops[j].chunks > 1; j++) /* the run's later ops go backward first */
    mark_needed(g, j, before);
  int n = 0;
  for (int j = 0; j < g->n_ops; j++)
    if (needed[j] && !before[j]) out[n++] = j;
  free(needed);
  free(before);
  return n;
}

lx_srcloc lx_field_loc(const lx_ir *ir, lx_field f, lx_srcloc fallback) {
  return ir->locs.field[f].file ? ir->locs.field[f] : fallback;
}

lx_srcloc lx_relation_loc(const lx_ir *ir, lx_srcloc fallback, const lx_field *fields) {
  for (const lx_field *f = fields; *f != LX_F_COUNT; f++)
    if (ir->locs.field[*f].file && ir->locs.field[*f].line == 0) return ir->locs.field[*f];
  return fallback;
}

int lx_last_saver(const lx_graph *g, int producer) {
  for (int c = 0; c < g->n_ops; c++)
    if (lx_op_saves(g, c, producer)) return c;
  return -1;
}

static int validate_graph(const lx_graph *g) {
  int problems = 0;
  int64_t saved = 0, params = 0;
  for (int i = 0; i < g->n_ops; i++) {
    const lx_op *op = &g->ops[i];
    for (int k = 0; k < op->n_inputs; k++)
      if (op->inputs[k] < 0 || op->inputs[k] >= i) {
        fprintf(stderr, "lynxgen: IR bug: %s.%s input %d is op %d\n", g->name, op->name, k, op->inputs[k]);
        problems++;
      }
    if (op->out.dtype == LX_DTYPE_NONE || (!op->out.scalar && op->out.width <= 0)) {
      fprintf(stderr, "lynxgen: IR bug: %s.%s has no shape\n", g->name, op->name);
      problems++;
    }
    saved += op->saved_bytes;
    params += op->params;
  }
  if (g->output < 0 || g->output >= g->n_ops) {
    fprintf(stderr, "lynxgen: IR bug: %s has no output\n", g->name);
    problems++;
  }
  if (saved != g->activation_bytes || params != g->params) {
    fprintf(stderr, "lynxgen: IR bug: %s totals do not add up\n", g->name);
    problems++;
  }
  return problems;
}

int lx_ir_validate(const lx_ir *ir) {
  return validate_graph(&ir->prologue) + validate_graph(&ir->block) + validate_graph(&ir->epilogue);
}
