/* emit_params.c — the tables of a stage's parameters both targets print
 * (templates/common/lx_params.h): every parameter tensor (the trained ones
 * first, fine-tuning's frozen ones after), where a rank's tensor-parallel
 * share sits in the whole tensor, the data-parallel buckets, the LoRA
 * adapters that exports merge, and the tensors' rows in Hugging Face's
 * checkpoints (see emit_operands.h, emit_param_table). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "emit/emit_formats.h"
#include "emit/emit_operands.h"
#include "escape.h"

/* Does op i's output reach a residual add, through dropout at most? GPT-2
 * scales the initial weights of such projections by 1 / sqrt(2 L). */
static bool feeds_residual_add(const lx_graph *g, int i) {
  for (int c = i + 1; c < g->n_ops; c++) {
    const lx_op *user = &g->ops[c];
    for (int k = 0; k < user->n_inputs; k++) {
      if (user->inputs[k] != i) continue;
      if (user->kind == LX_OP_ADD || (user->kind == LX_OP_DROPOUT && feeds_residual_add(g, c))) return true;
    }
  }
  return false;
}

/* ---- the parameter table ---------------------------------------------------------- */

/* Init streams name the parameter, not the stage: every pipeline depth draws
 * the same weights, and a tied head's copy the embedding's. */
static long long init_stream(lx_graph_id g, int layer, int op, int k) {
  return ((long long)g * 100003 + layer + 1) * 64 + op * 2 + k + 1;
}

static int embedding_op(const lx_ir *ir) {
  for (int i = 0; i < ir->prologue.n_ops; i++)
    if (ir->prologue.ops[i].kind == LX_OP_EMBEDDING) return i;
  return 0;
}

/* ---- tensor-parallel shards ------------------------------------------------------ */

/* Where a rank's part of a parameter sits in the whole tensor (lx_train.h). */
typedef struct {
  int split; /* 0 replicated, 1 runs of whole rows, 2 a slice of every row's columns, 3 replicated with
                partial gradients (sequence parallelism) */
  long long row_elements, whole_row;
  int pieces;
  long long piece_row[3], piece_rows[3];
} param_shard;

/* The row groups of a column-parallel output that its consumer reads as
 * separate tensors (attention's q, k, v; swiglu's gate and up): each is
 * split over the ranks on its own. */
static int column_groups(const lx_graph *g, int i, long long rows, long long first[3], long long count[3]) {
  for (int c = i + 1; c < g->n_ops; c++) {
    const lx_op *user = &g->ops[c];
    if (user->n_inputs < 1 || user->inputs[0] != i) continue;
    if (user->kind == LX_OP_ATTENTION || user->kind == LX_OP_ROPE) {
      long long d = rows / (user->heads + 2LL * user->kv_heads);
      first[0] = 0, count[0] = user->heads * d;
      first[1] = count[0], count[1] = user->kv_heads * d;
      first[2] = first[1] + count[1], count[2] = count[1];
      return 3;
    }
    if (user->kind == LX_OP_SWIGLU) {
      first[0] = 0, first[1] = count[0] = count[1] = rows / 2;
      return 2;
    }
  }
  first[0] = 0, count[0] = rows;
  return 1;
}

static param_shard shard_of(const lx_printer *pr, lx_graph_id gid, int i, int k) {
  const lx_graph *g = lx_graph_of(pr->ir, gid);
  const lx_op *op = &g->ops[i];
  int tp = emit_tp(pr);
  param_shard sh = {.row_elements = 1};
  bool vocab = op->kind == LX_OP_EMBEDDING || op->kind == LX_OP_LM_HEAD;
  bool row_wise =
      op->kind == LX_OP_LAYERNORM || op->kind == LX_OP_RMSNORM || op->kind == LX_OP_POSITION_EMBEDDING;
  /* LoRA: the adapter's factor on the linear's whole side (a column-parallel
   * linear's A, a row-parallel one's B) is replicated and its gradient a
   * partial sum on each rank (analyze.c, add_adapter) */
  bool whole_factor = k == (op->tp_role == LX_TP_ROW ? LX_PARAM_LORA_B : LX_PARAM_LORA_A);
  if ((row_wise && lx_sequence_parallel(pr->ir)) || (tp > 1 && op->lora_rank && whole_factor)) {
    sh.split = 3; /* replicated, its gradient summed over the ranks (their sequence shards' parts) */
    return sh;
  }
  if (tp == 1 || !(vocab || op->kind == LX_OP_LINEAR) || (op->tp_role == LX_TP_ROW && k == 1)) return sh;
  long long in_width = vocab ? 0 : emit_op_at(pr, gid, op->inputs[0])->out.width;
  if (op->tp_role == LX_TP_ROW) { /* W's and A's input columns */
    sh.split = 2, sh.whole_row = in_width, sh.row_elements = in_width / tp;
    return sh;
  }
  sh.split = 1;
  if (vocab) {
    sh.row_elements =
        op->kind == LX_OP_EMBEDDING ? op->out.width : emit_op_at(pr, gid, op->inputs[0])->out.width;
    sh.pieces = 1, sh.piece_row[0] = 0, sh.piece_rows[0] = pr->ir->padded_vocab / tp;
    return sh;
  }
  sh.row_elements = k == LX_PARAM_WEIGHT   ? in_width
                    : k == LX_PARAM_LORA_B ? op->lora_rank
                                           : 1; /* B's output rows */
  sh.pieces = column_groups(g, i, op->out.width, sh.piece_row, sh.piece_rows);
  for (int p = 0; p < sh.pieces; p++)
    sh.piece_rows[p] /= tp;
  return sh;
}

/* The embedding table a tied head reads too: the first and the last stage
 * sum its gradients (an untied table has no copy to sum with). */
static bool is_tied_table(const lx_ir *ir, const lx_op *op) {
  return op->kind == LX_OP_EMBEDDING && ir->model.tied_embeddings;
}

/* The rows of the stage's parameters in the Hugging Face checkpoint
 * (emit_formats.h), collected while the parameter table is printed. */
typedef struct {
  int param, tensor, layer;
  long long first_row;
} hf_part;

/* The rows of a LoRA linear's parameters (-1: none), for lora_adapters. */
typedef struct {
  lx_graph_id graph;
  int layer, op, row[LX_MAX_OP_PARAMS];
} adapter_rows;

typedef struct {
  bool gpt2;
  bool frozen; /* the pass that prints the frozen parameters, after the trained ones */
  int params;  /* rows printed so far */
  hf_part *parts;
  int n_parts, cap_parts;
  adapter_rows *adapters;
  int n_adapters;
} param_rows;

/* Row `row` is parameter k of LoRA linear i of graph g's instance `layer`. */
static void note_adapter_row(param_rows *rows, lx_graph_id g, int layer, int i, int k, int row) {
  int a = 0;
  while (a < rows->n_adapters &&
         !(rows->adapters[a].graph == g && rows->adapters[a].layer == layer && rows->adapters[a].op == i))
    a++;
  if (a == rows->n_adapters) {
    rows->adapters = lx_realloc(rows->adapters, sizeof *rows->adapters * (size_t)(a + 1));
    rows->adapters[a] = (adapter_rows){g, layer, i, {-1, -1, -1, -1}};
    rows->n_adapters++;
  }
  rows->adapters[a].row[k] = row;
}

static void add_hf_parts(const lx_printer *pr, param_rows *rows, lx_graph_id g, int layer, int i, int k) {
  int tensor[EMIT_HF_MAX_PARTS];
  long long first_row[EMIT_HF_MAX_PARTS];
  int n = emit_hf_parts(pr->ir, g, i, k, tensor, first_row);
  for (int p = 0; p < n; p++) {
    if (rows->n_parts == rows->cap_parts) {
      rows->cap_parts = rows->cap_parts ? 2 * rows->cap_parts : 64;
      rows->parts = lx_realloc(rows->parts, sizeof *rows->parts * (size_t)rows->cap_parts);
    }
    rows->parts[rows->n_parts++] = (hf_part){rows->params, tensor[p], layer, first_row[p]};
  }
}

/* A parameter's name in the tables and the training state: graph, layer, op,
 * weight, bias, lora_a or lora_b. */
static const char *param_name(const lx_ir *ir, lx_graph_id g, int layer, int i, int k, char name[128]) {
  const lx_graph *graph = lx_graph_of(ir, g);
  snprintf(name, 128, "%s%s%d %s.%s", graph->name, g == LX_GRAPH_BLOCK ? " layer " : "",
           g == LX_GRAPH_BLOCK ? layer : 0, graph->ops[i].name, lx_param_name(k));
  return name;
}

/* The whole parameter as every plan holds it: rows of cols, the vocabulary
 * unpadded (the padding's rows depend on tp), so that a training state
 * moves between plans (lx_state.h). */
static void whole_shape(const lx_printer *pr, lx_graph_id g, const lx_op *op, int k, long long shape[2]) {
  long long vocab = pr->ir->model.vocab;
  long long in = op->n_inputs ? emit_op_at(pr, g, op->inputs[0])->out.width : 0;
  switch (op->kind) {
  case LX_OP_LINEAR:
    shape[0] = k == LX_PARAM_LORA_A ? op->lora_rank : op->out.width;
    shape[1] = k == LX_PARAM_BIAS ? 1 : k == LX_PARAM_LORA_B ? op->lora_rank : in;
    return;
  case LX_OP_EMBEDDING: shape[0] = vocab, shape[1] = op->out.width; return;
  case LX_OP_POSITION_EMBEDDING: shape[0] = pr->ir->model.seq_len, shape[1] = op->out.width; return;
  case LX_OP_LM_HEAD: shape[0] = vocab, shape[1] = in; return;
  default: shape[0] = op->out.width, shape[1] = 1; /* a norm's scale or shift */
  }
}

/* The normal deviation a weight starts from (GPT-2's, scaled down on the
 * residual projections), 0 where it starts from a constant. A LoRA adapter's
 * A has PEFT's kaiming-uniform variance, 1 / (3 in); its B starts at zero,
 * so the adapted model starts as the base model. */
static double init_std(const lx_printer *pr, const lx_graph *graph, int i, int k) {
  const lx_op *op = &graph->ops[i];
  if (k == LX_PARAM_LORA_A) return 1 / sqrt(3.0 * graph->ops[op->inputs[0]].out.width);
  bool weight = k == LX_PARAM_WEIGHT && op->kind != LX_OP_LAYERNORM && op->kind != LX_OP_RMSNORM;
  bool residual_projection = op->kind == LX_OP_LINEAR && feeds_residual_add(graph, i);
  return !weight ? 0 : residual_projection ? 0.02 / sqrt(2.0 * pr->ir->model.layers) : 0.02;
}

static void print_param_row(const lx_printer *pr, param_rows *rows, lx_graph_id g, int layer, int i, int k) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  const lx_op *op = &graph->ops[i];
  const lx_op_place *pl = &pr->l->places[g][i];
  if (pl->param_elements[k] <= 0 || lx_param_trained(pr->ir, op, k) == rows->frozen) return;
  lx_span span = lx_locate(pr->p, pr->s, pr->l, (lx_tensor_ref){g, layer, i, 0, LX_T_PARAM, k});
  long long element = (span.offset - pr->l->region_offset[LX_REGION_PARAMS]) / pr->l->param_elt;
  bool weight = k != LX_PARAM_BIAS && op->kind != LX_OP_LAYERNORM && op->kind != LX_OP_RMSNORM;
  bool tied_copy = op->kind == LX_OP_LM_HEAD && op->params_per_rank + op->frozen_per_rank == 0;
  double std = init_std(pr, graph, i, k);
  /* norm scales start at one; biases, shifts and adapters' B at zero */
  double constant = std == 0 && k == LX_PARAM_WEIGHT && !weight ? 1 : 0;
  long long stream =
      tied_copy ? init_stream(LX_GRAPH_PROLOGUE, -1, embedding_op(pr->ir), 0) : init_stream(g, layer, i, k);
  long long file = rows->gpt2 && k < LX_PARAM_LORA_A ? emit_llmc_element(pr->ir, g, layer, i, k) : -1;
  param_shard sh = shard_of(pr, g, i, k);
  long long shape[2];
  whole_shape(pr, g, op, k, shape);
  char name[128];
  fprintf(pr->out, "  {\"%s\", %lldLL, %lldLL, %.17g, %g, %d, %lldLL, %lldLL, %d, %d, %d",
          param_name(pr->ir, g, layer, i, k, name), element, (long long)pl->param_elements[k], std, constant,
          weight ? 1 : 0, stream, file, tied_copy ? 0 : 1, tied_copy || is_tied_table(pr->ir, op) ? 1 : 0,
          sh.split);
  fprintf(pr->out, ", %lldLL, %lldLL, %d, {%lldLL, %lldLL, %lldLL}, {%lldLL, %lldLL, %lldLL}",
          sh.row_elements, sh.whole_row, sh.pieces, sh.piece_row[0], sh.piece_row[1], sh.piece_row[2],
          sh.piece_rows[0], sh.piece_rows[1], sh.piece_rows[2]);
  fprintf(pr->out, ", %lldLL, %lldLL},\n", shape[0], shape[1]);
  add_hf_parts(pr, rows, g, layer, i, k);
  if (op->lora_rank) note_adapter_row(rows, g, layer, i, k, rows->params);
  rows->params++;
}

static void print_param_rows(const lx_printer *pr, param_rows *rows, lx_graph_id g, int layer) {
  const lx_graph *graph = lx_graph_of(pr->ir, g);
  for (int i = 0; i < graph->n_ops; i++)
    for (int k = 0; k < LX_MAX_OP_PARAMS; k++)
      print_param_row(pr, rows, g, layer, i, k);
}

/* Which rows of which parameter each Hugging Face tensor of the stage is. */
static void print_hf_parts(const lx_printer *pr, const param_rows *rows) {
  emit_hf_model(pr->out, pr->ir);
  if (!rows->n_parts) return;
  fprintf(pr->out, "\n/* The stage's parameters in that checkpoint: parameter (param_tensors),\n"
                   " * tensor (hf_tensors), its layer (-1: none), the parameter's row where the\n"
                   " * tensor's rows start. */\nstatic const lx_hf_part hf_parts[] = {\n");
  for (int p = 0; p < rows->n_parts; p++)
    fprintf(pr->out, "  {%d, %d, %d, %lldLL},\n", rows->parts[p].param, rows->parts[p].tensor,
            rows->parts[p].layer, rows->parts[p].first_row);
  fprintf(pr->out, "};\nenum { HF_PARTS = %d };\n", rows->n_parts);
}

/* The data-parallel buckets of the params region (layout.h), in its order. */
static void print_bucket_table(const lx_printer *pr) {
  const lx_stage_layout *l = pr->l;
  fprintf(pr->out, "\n/* Gradient buckets reduced across the dp replicas at once: first element,\n"
                   " * elements, and (ZeRO-1) where this replica's share of their optimizer\n"
                   " * state starts. */\nstatic const lx_param_bucket param_buckets[] = {\n");
  for (int b = 0; b < l->n_buckets; b++)
    fprintf(pr->out, "  {%lldLL, %lldLL, %lldLL},\n", (long long)l->buckets[b].first,
            (long long)l->buckets[b].elements, (long long)l->buckets[b].shard_first);
  if (!l->n_buckets) fputs("  {0, 0, 0},\n", pr->out);
  /* a long long literal: an enum of a big model's element count would not be an int */
  fprintf(pr->out, "};\nenum { PARAM_BUCKETS = %d, ZERO_SHARDS = %d };\n#define OPTIMIZER_ELEMENTS %lldLL\n",
          l->n_buckets, l->shards, (long long)l->optimizer_elements);
}

/* Fine-tuning's adapters, which the exported weights merge (lx_params.h). */
static void print_adapter_table(const lx_printer *pr, const param_rows *rows) {
  fprintf(
      pr->out,
      "#define FINETUNE 1\n/* The LoRA adapters: the rows of the weight, A and B, rank, alpha / rank. */\n"
      "static const lx_lora_adapter lora_adapters[] = {\n");
  for (int a = 0; a < rows->n_adapters; a++) {
    const adapter_rows *r = &rows->adapters[a];
    const lx_op *op = &lx_graph_of(pr->ir, r->graph)->ops[r->op];
    fprintf(pr->out, "  {%d, %d, %d, %d, %.17g},\n", r->row[LX_PARAM_WEIGHT], r->row[LX_PARAM_LORA_A],
            r->row[LX_PARAM_LORA_B], op->lora_rank, lx_lora_scale(op));
  }
  if (!rows->n_adapters) fputs("  {0, 0, 0, 0, 0},\n", pr->out);
  fprintf(pr->out, "};\nenum { LORA_ADAPTERS = %d };\n", rows->n_adapters);
}

/* The table's first PARAM_TENSORS rows are the trained parameters (all of
 * them but in fine-tuning): the optimizer, the gradient norm and the training
 * state walk those; the frozen ones follow, read by the initialisation and
 * checkpoint files alone. */
static void print_frozen_counts(const lx_printer *pr, const param_rows *rows, int trained) {
  int all = rows->params;
  if (!pr->ir->finetune) {
    fprintf(pr->out, "};\nenum { PARAM_TENSORS = sizeof param_tensors / sizeof param_tensors[0] };\n");
    return;
  }
  fprintf(pr->out, "};\n/* fine-tuning: the first PARAM_TENSORS are trained, the rest frozen; the frozen\n"
                   " * elements follow the trained ones in the params region */\n");
  fprintf(pr->out, "enum { PARAM_TENSORS = %d, ALL_PARAM_TENSORS = %d };\n", trained, all);
  fprintf(pr->out, "#define ALL_PARAM_ELEMENTS %lldLL\n",
          (long long)(pr->l->frozen_first + pr->l->frozen_elements));
  print_adapter_table(pr, rows);
}

void emit_param_table(const lx_printer *pr) {
  param_rows rows = {.gpt2 = emit_is_gpt2(pr->ir)};
  fprintf(pr->out, "\n/* Every parameter tensor of the stage: name, element offset in the params\n"
                   " * region, elements, init std (0: constant), init constant, weight decay,\n"
                   " * init stream, element in llm.c's GPT-2 checkpoint (-1: none), whether this\n"
                   " * stage writes it there, whether it is the tied embedding table, and where\n"
                   " * this rank's share sits in the whole tensor (tensor parallelism: split,\n"
                   " * row elements, whole row, pieces, their first rows and row counts), and\n"
                   " * the whole tensor's rows and columns. */\n"
                   "static const lx_param_tensor param_tensors[] = {\n");
  int trained = 0;
  for (rows.frozen = false;; rows.frozen = true) {
    if (pr->st->has_prologue) print_param_rows(pr, &rows, LX_GRAPH_PROLOGUE, -1);
    for (int slot = 0; slot < pr->st->n_layers; slot++)
      print_param_rows(pr, &rows, LX_GRAPH_BLOCK, lx_slot_layer(pr->st, slot));
    if (pr->st->has_epilogue) print_param_rows(pr, &rows, LX_GRAPH_EPILOGUE, -1);
    if (rows.frozen) break;
    trained = rows.params;
  }
  print_frozen_counts(pr, &rows, trained);
  print_bucket_table(pr);
  fprintf(pr->out, "#define GPT2_CHECKPOINT %d\n", rows.gpt2 ? 1 : 0);
  fprintf(pr->out, "static const lx_gpt2_header gpt2_header = {%d, %d, %d, %d, %d, %d};\n",
          pr->ir->model.seq_len, pr->ir->model.vocab, pr->ir->model.layers, pr->ir->model.heads,
          pr->ir->model.hidden, pr->ir->padded_vocab);
  char tied[128];
  fprintf(pr->out,
          "/* The tied embedding table: its copy on the last stage is this tensor in a training state. */\n");
  emit_string_macro(pr->out, "TIED_TABLE_NAME",
                    pr->ir->model.tied_embeddings
                        ? param_name(pr->ir, LX_GRAPH_PROLOGUE, -1, embedding_op(pr->ir), 0, tied)
                        : NULL);
  print_hf_parts(pr, &rows);
  free(rows.parts);
  free(rows.adapters);
}
