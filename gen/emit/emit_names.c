/* emit_names.c — the tensors of a stage file by name (emit_names.h). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "emit/emit_names.h"

#include "alloc.h"
#include "escape.h"
#include "planning/passes.h"

enum { BASE_MAX = 96, NAME_MAX_CHARS = BASE_MAX + 16 }; /* a base name, then a suffix */

typedef struct {
  char name[NAME_MAX_CHARS];
  lx_tensor_ref ref; /* the first use's: what the comment describes */
  lx_place_expr place;
} named_tensor;

/* The helpers that compute a term of an address; each is printed with the
 * stride its first use had, and a term with another stride is printed as
 * arithmetic. The stash region's slot and layer helpers come in the order
 * of its pools (lx_slot_pool). */
typedef enum {
  STASH_SLOT,
  HELD_SLOT,
  WEIGHT_GRAD_SLOT,
  STASH_LAYER,
  HELD_LAYER,
  WEIGHT_GRAD_LAYER,
  PARAM_LAYER,
  FROZEN_LAYER,
  PIPE_SLOT,
  HELPER_COUNT
} helper;

_Static_assert(HELD_SLOT == STASH_SLOT + LX_POOL_HELD &&
                   WEIGHT_GRAD_SLOT == STASH_SLOT + LX_POOL_WEIGHT_GRAD &&
                   HELD_LAYER == STASH_LAYER + LX_POOL_HELD &&
                   WEIGHT_GRAD_LAYER == STASH_LAYER + LX_POOL_WEIGHT_GRAD,
               "one slot and one layer helper per pool, in the pools' order");

static const struct {
  const char *name, *arg, *variable, *why;
} helpers[HELPER_COUNT] = {
    {"stash_slot", "mb", "(mb % SLOTS)",
     "micro-batch mb's stash slot: what its forward keeps for its backward"},
    {"held_slot", "mb", "(mb % HELD_SLOTS)",
     "micro-batch mb's held slot: the inputs its W passes read, kept from its forward"},
    {"weight_grad_slot", "mb", "(mb % WEIGHT_GRAD_SLOTS)",
     "micro-batch mb's weight-gradient slot: the output gradients its W passes read"},
    {"stash_layer", "layer", "(layer - FIRST_LAYER)", "a layer's part of a stash slot"},
    {"held_layer", "layer", "(layer - FIRST_LAYER)", "a layer's part of a held slot"},
    {"weight_grad_layer", "layer", "(layer - FIRST_LAYER)", "a layer's part of a weight-gradient slot"},
    {"param_layer", "layer", "(layer - FIRST_LAYER)", "a layer's parameters (and gradients: GRAD_OF)"},
    {"frozen_layer", "layer", "(layer - FIRST_LAYER)", "a layer's frozen parameters (fine-tuning)"},
    {"pipe_slot", "mb", "(mb % SLOTS)", "micro-batch mb's buffers to and from the neighbouring stages"},
};

/* Under 2BW a step's micro-batches share slots with the next step's, which
 * run ahead: the slot follows the micro-batch's number in the run (RUN_MB). */
static bool steps_overlap(const lx_printer *pr) { return pr->p->kind == LX_SCHEDULE_2BW; }

/* Under interleaved 1F1B a stage's layers are not consecutive: a layer's
 * place among them comes from the chunk table (emit_chunk_table). */
static bool chunked(const lx_printer *pr) { return pr->st->n_chunks > 1; }

static const char *helper_variable(const lx_printer *pr, helper h) {
  static const char *run_numbered[HELPER_COUNT] = {
      [STASH_SLOT] = "(RUN_MB(mb) % SLOTS)",
      [PIPE_SLOT] = "(RUN_MB(mb) % SLOTS)",
  };
  if (chunked(pr) && h >= STASH_LAYER && h <= FROZEN_LAYER) return "layer_slot(layer)";
  return steps_overlap(pr) && run_numbered[h] ? run_numbered[h] : helpers[h].variable;
}

struct lx_tensor_names {
  named_tensor *v;
  int n, cap;
  int64_t stride[HELPER_COUNT]; /* 0: not used */
};

lx_tensor_names *emit_names_new(void) { return lx_calloc(1, sizeof(lx_tensor_names)); }

void emit_names_free(lx_tensor_names *names) {
  if (!names) return;
  free(names->v);
  free(names);
}

bool emit_sequence_sharded(const lx_printer *pr, lx_shape s) {
  return lx_sequence_parallel(pr->ir) && !s.split && s.dtype != LX_DTYPE_INT32 && !s.scalar;
}

/* ---- names ------------------------------------------------------------------- */

/* The model file's variable when no other op of the graph was assigned to
 * it, else the op's own unique name ("layernorm_1"). */
static const char *op_name(const lx_graph *g, int i) {
  const lx_op *op = &g->ops[i];
  if (!op->var[0]) return op->name;
  for (int k = 0; k < g->n_ops; k++)
    if (k != i && !strcmp(g->ops[k].var, op->var)) return op->name;
  return op->var;
}

static void base_name(const lx_printer *pr, lx_tensor_ref t, char *buf, size_t size) {
  const lx_graph *g = lx_graph_of(pr->ir, t.graph);
  const lx_op *op = &g->ops[t.op];
  const char *name = op_name(g, t.op);
  switch (t.role) {
  case LX_T_OUTPUT: snprintf(buf, size, "%s_%s", g->name, name); break;
  case LX_T_RECOMPUTED: snprintf(buf, size, "%s_%s_recomputed", g->name, name); break;
  case LX_T_INTERNAL: snprintf(buf, size, "%s_%s_%s", g->name, name, op->saved[t.index].what); break;
  case LX_T_GRAD: snprintf(buf, size, "%s_%s_grad", g->name, name); break;
  case LX_T_HOST:
    if (t.index == 0)
      snprintf(buf, size, "%s_%s_host", g->name, name);
    else
      snprintf(buf, size, "%s_%s_%s_host", g->name, name, op->saved[t.index - 1].what);
    break;
  case LX_T_PARAM: snprintf(buf, size, "%s_%s_%s", g->name, name, lx_param_name(t.index)); break;
  case LX_T_SEND_ACT: snprintf(buf, size, "send_activation"); break;
  case LX_T_SEND_GRAD: snprintf(buf, size, "send_input_grad"); break;
  case LX_T_RECV_GRAD: snprintf(buf, size, "recv_output_grad"); break;
  case LX_T_SP_GATHERED: snprintf(buf, size, "sp_gathered"); break;
  case LX_T_SP_WHOLE: snprintf(buf, size, "sp_whole"); break;
  }
}

/* The log-sum-exp is fp32 on every target, token ids are int; the rest are
 * activations (or weights) of the target's type. */
static const char *element_type(const lx_printer *pr, lx_tensor_ref t) {
  const lx_op *op = &lx_graph_of(pr->ir, t.graph)->ops[t.op];
  if (t.role == LX_T_INTERNAL && !strcmp(op->saved[t.index].what, "lse")) return pr->lse_type;
  if (t.role == LX_T_OUTPUT && op->out.dtype == LX_DTYPE_INT32) return "int";
  return pr->act_type;
}

bool emit_same_place(const lx_place_expr *a, const lx_place_expr *b) {
  return a->region == b->region && a->constant == b->constant && a->per_slot == b->per_slot &&
         a->per_layer == b->per_layer && a->parity_stride == b->parity_stride &&
         (a->parity_add - b->parity_add) % 2 == 0 && a->per_chunk == b->per_chunk &&
         a->chunk_stash == b->chunk_stash && a->wrap == b->wrap;
}

/* The registered tensor at place e named `base` (or `base_2`, ... when that
 * name is another place's: a model variable may look like a derived name). */
static const named_tensor *find_or_add(lx_tensor_names *names, const char *base, lx_tensor_ref t,
                                       const lx_place_expr *e) {
  for (int suffix = 1;; suffix++) {
    char name[NAME_MAX_CHARS];
    if (suffix == 1)
      snprintf(name, sizeof name, "%s", base);
    else
      snprintf(name, sizeof name, "%s_%d", base, suffix);
    bool taken = false;
    for (int k = 0; k < names->n; k++) {
      if (strcmp(names->v[k].name, name)) continue;
      if (emit_same_place(&names->v[k].place, e)) return &names->v[k];
      taken = true;
    }
    if (taken) continue;
    if (names->n == names->cap) {
      names->cap = names->cap ? 2 * names->cap : 64;
      names->v = lx_realloc(names->v, sizeof *names->v * (size_t)names->cap);
    }
    named_tensor *added = &names->v[names->n++];
    snprintf(added->name, sizeof added->name, "%s", name);
    added->ref = t;
    added->place = *e;
    return added;
  }
}

static bool uses_layer(const lx_place_expr *e) {
  return e->per_layer || e->parity_stride || e->per_chunk || e->chunk_stash;
}

static bool uses_mb(const lx_place_expr *e) { return e->per_slot || e->versioned || e->chunk_stash; }

static void parameters(const lx_place_expr *e, bool declare, char *buf, size_t size) {
  const char *layer = declare ? "int layer" : "layer", *mb = declare ? "int mb" : "mb";
  if (uses_layer(e) && uses_mb(e))
    snprintf(buf, size, "%s, %s", layer, mb);
  else if (uses_layer(e))
    snprintf(buf, size, "%s", layer);
  else if (uses_mb(e))
    snprintf(buf, size, "%s", mb);
  else
    snprintf(buf, size, "%s", declare ? "void" : "");
}

const char *emit_tensor_call(const lx_printer *pr, lx_tensor_ref t, char *buf, size_t size) {
  char base[BASE_MAX], args[32];
  lx_place_expr e = lx_place_of(pr->p, pr->s, pr->l, t);
  if (t.role == LX_T_RECOMPUTED) { /* a scratch copy only when the output is also kept */
    lx_tensor_ref output = t;
    output.role = LX_T_OUTPUT;
    lx_place_expr kept = lx_place_of(pr->p, pr->s, pr->l, output);
    if (emit_same_place(&kept, &e)) t = output;
  }
  base_name(pr, t, base, sizeof base);
  const named_tensor *n = find_or_add(pr->names, base, t, &e);
  parameters(&e, false, args, sizeof args);
  snprintf(buf, size, "%s(%s)", n->name, args);
  return buf;
}

/* ---- addresses ----------------------------------------------------------------- */

/* " + helper(arg)" when the term's stride is the helper's, else the arithmetic. */
static int term(const lx_printer *pr, helper h, bool applies, int64_t stride, char *buf, size_t size) {
  lx_tensor_names *names = pr->names;
  if (!stride) return 0;
  if (applies && (!names->stride[h] || names->stride[h] == stride)) {
    names->stride[h] = stride;
    return snprintf(buf, size, " + %s(%s)", helpers[h].name, helpers[h].arg);
  }
  return snprintf(buf, size, " + %s * %lldLL", helper_variable(pr, h), (long long)stride);
}

void emit_place_address(const lx_printer *pr, const lx_place_expr *e, char *buf, size_t size) {
  int64_t offset = e->constant - pr->l->region_offset[e->region];
  int n = e->versioned ? snprintf(buf, size, "AT(weights_of(mb) + %lldLL", (long long)offset)
          : e->region == LX_REGION_HOST
              ? snprintf(buf, size, "HOST_AT(%lldLL", (long long)offset)
              : snprintf(buf, size, "AT(REGION_%s + %lldLL", lx_region_name(e->region), (long long)offset);
  bool slot_helper = e->region == LX_REGION_STASH || e->region == LX_REGION_BOUNDARY;
  helper slot = e->region == LX_REGION_STASH ? STASH_SLOT + (helper)e->pool : PIPE_SLOT;
  helper layer = e->frozen                       ? FROZEN_LAYER
                 : e->region == LX_REGION_PARAMS ? PARAM_LAYER
                                                 : STASH_LAYER + (helper)e->pool;
  if (e->chunk_stash) /* interleaved: the layer's chunk's pool (emit_chunk_table) */
    n += snprintf(buf + n, size - (size_t)n, " + chunk_stash(layer, mb)");
  else if (e->wrap) /* a chunk's own slot count */
    n += snprintf(buf + n, size - (size_t)n, " + (mb %% %d) * %lldLL", e->wrap, (long long)e->per_slot);
  else
    n += term(pr, slot, slot_helper, e->per_slot, buf + n, size - (size_t)n);
  if (!e->chunk_stash)
    n += term(pr, layer, e->region == LX_REGION_PARAMS || e->region == LX_REGION_STASH, e->per_layer, buf + n,
              size - (size_t)n);
  if (e->parity_stride)
    n += snprintf(buf + n, size - (size_t)n, " + ((layer + %d) %% 2) * %lldLL", e->parity_add % 2,
                  (long long)e->parity_stride);
  if (e->per_chunk)
    n += snprintf(buf + n, size - (size_t)n, " + chunk_of(layer) * %lldLL", (long long)e->per_chunk);
  snprintf(buf + n, size - (size_t)n, ")");
}

/* ---- the printed accessors ---------------------------------------------------- */

/* "(B, T, 192)" of an activation on this rank; other tensors by size. */
static void shape_text(const lx_printer *pr, const named_tensor *n, char *buf, size_t size) {
  lx_tensor_ref t = n->ref;
  const lx_op *op = &lx_graph_of(pr->ir, t.graph)->ops[t.op];
  switch (t.role) {
  case LX_T_OUTPUT:
  case LX_T_RECOMPUTED:
  case LX_T_GRAD:
    if (op->out.scalar)
      snprintf(buf, size, "a scalar");
    else if (op->out.dtype == LX_DTYPE_INT32)
      snprintf(buf, size, "(B, T)");
    else if (emit_sequence_sharded(pr, op->out))
      snprintf(buf, size, "(SEQ_ROWS, %lld)", (long long)lx_rank_width(pr->ir, op->out));
    else
      snprintf(buf, size, "(B, T, %lld)", (long long)lx_rank_width(pr->ir, op->out));
    return;
  case LX_T_PARAM:
    snprintf(buf, size, "%lld elements", (long long)(pr->l->places[t.graph][t.op].param_elements[t.index]));
    return;
  case LX_T_SEND_ACT:
  case LX_T_SEND_GRAD:
  case LX_T_RECV_GRAD: snprintf(buf, size, "(BOUNDARY_ELEMENTS)"); return;
  default: snprintf(buf, size, "%lld bytes", (long long)n->place.bytes);
  }
}

/* What the tensor is, in the model file's words. */
static void describe(const lx_printer *pr, const named_tensor *n, char *buf, size_t size) {
  lx_tensor_ref t = n->ref;
  const lx_graph *g = lx_graph_of(pr->ir, t.graph);
  const lx_op *op = &g->ops[t.op];
  char file[LX_TEXT_MAX];
  const char *kind = lx_op_kind_name(op->kind), *var = op->var[0] ? op->var : op->name;
  int line = op->src.line;
  lx_text(lx_file_name(pr->ir->model_path), file, sizeof file);
  /* the neighbouring stages: around the ring under interleaved 1F1B */
  int next = (pr->s + 1) % pr->p->pp, previous = (pr->s + pr->p->pp - 1) % pr->p->pp;
  const char *whose = chunked(pr) ? "the chunk's" : "the";
  switch (t.role) {
  case LX_T_SEND_ACT: snprintf(buf, size, "%s activation sent to stage %d", whose, next); return;
  case LX_T_SEND_GRAD: snprintf(buf, size, "%s input gradient sent to stage %d", whose, previous); return;
  case LX_T_RECV_GRAD: snprintf(buf, size, "%s output gradient from stage %d", whose, next); return;
  case LX_T_SP_GATHERED:
    snprintf(buf, size, "sequence parallelism: a whole tensor gathered from shards");
    return;
  case LX_T_SP_WHOLE: snprintf(buf, size, "sequence parallelism: a whole tensor to reduce-scatter"); return;
  case LX_T_OUTPUT:
    if (op->kind == LX_OP_INPUT)
      snprintf(buf, size, "%s, an argument of %s()  %s:%d", var, g->name, file, line);
    else
      snprintf(buf, size, "%s = %s(...)  %s:%d", var, kind, file, line);
    return;
  case LX_T_RECOMPUTED: snprintf(buf, size, "%s = %s(...), recomputed  %s:%d", var, kind, file, line); return;
  case LX_T_GRAD: snprintf(buf, size, "d %s = %s(...)  %s:%d", var, kind, file, line); return;
  case LX_T_HOST:
    if (t.index == 0)
      snprintf(buf, size, "host copy of %s = %s(...), offloaded  %s:%d", var, kind, file, line);
    else
      snprintf(buf, size, "host copy of the %s of %s = %s(...), offloaded  %s:%d",
               op->saved[t.index - 1].what, var, kind, file, line);
    return;
  case LX_T_INTERNAL:
    snprintf(buf, size, "the %s of %s = %s(...)  %s:%d", op->saved[t.index].what, var, kind, file, line);
    return;
  case LX_T_PARAM:
    snprintf(buf, size, "the %s%s of %s = %s(...)  %s:%d",
             lx_param_trained(pr->ir, op, t.index) ? "" : "frozen ", lx_param_name(t.index), var, kind, file,
             line);
    return;
  }
}

static int by_place(const void *a, const void *b) {
  const named_tensor *x = a, *y = b;
  if (x->place.region != y->place.region)
    return (int)x->place.region - (int)y->place.region; /* arena order */
  if (x->place.constant != y->place.constant) return x->place.constant < y->place.constant ? -1 : 1;
  return strcmp(x->name, y->name);
}

static const char *region_heading(lx_region r) {
  switch (r) {
  case LX_REGION_PARAMS: return "parameters, per layer of the stage";
  case LX_REGION_STASH: return "kept from a micro-batch's forward to its backward: per stash slot and layer";
  case LX_REGION_WORK: return "work: alive inside one forward or backward (or from a window to the backward)";
  case LX_REGION_BOUNDARY: return "pipeline buffers per slot, and the gradients between layers";
  default: return lx_region_name(r);
  }
}

static void print_helpers(const lx_printer *pr) {
  for (int h = 0; h < HELPER_COUNT; h++)
    if (pr->names->stride[h])
      fprintf(pr->out, "/* %s */\nstatic int64_t %s(int %s) { return %s * %lldLL; }\n", helpers[h].why,
              helpers[h].name, helpers[h].arg, helper_variable(pr, h), (long long)pr->names->stride[h]);
}

/* How a micro-batch's number reads: its step and its number in that step's
 * whole batch (dropout masks are drawn by both), and under 2BW its number
 * in the run and the weights it computes with. */
void emit_micro_batch_macros(const lx_printer *pr) {
  FILE *f = pr->out;
  fprintf(f, "/* the micro-batch's number in the step of the whole batch: the loader gives\n"
             " * replica r windows r, r + DATA_PARALLEL, ... (lx_data.h) */\n");
  if (!steps_overlap(pr)) {
    fprintf(f, "#define GLOBAL_MB(mb) ((mb) * DATA_PARALLEL + replica)\n\n");
    return;
  }
  fprintf(f, "#define GLOBAL_MB(mb) (((mb) %% MICRO_BATCHES) * DATA_PARALLEL + replica)\n"
             "/* PipeDream-2BW: micro-batches MICRO_BATCHES on are the next step's, run ahead */\n"
             "#define STEP_OF(mb) (current_step + (mb) / MICRO_BATCHES)\n"
             "#define RUN_MB(mb) ((int64_t)current_step * MICRO_BATCHES + (mb))\n\n");
}

/* 2BW: the weights micro-batch mb computes with; its forward and backward
 * use the same ones. This step's micro-batches use the version before the
 * last update; the next step's, run ahead, the live one. */
void emit_weight_versions(const lx_printer *pr) {
  if (!steps_overlap(pr)) return;
  fprintf(pr->out, "#define STEPS_OVERLAP 1 /* PipeDream-2BW: lx_stage.h */\n"
                   "static int pipeline_filled; /* the next step's first forwards are done */\n");
  fprintf(pr->out, "\n/* PipeDream-2BW: the weights micro-batch mb computes with, the same in its forward\n"
                   " * and backward: this step's use the version before the last update, the next\n"
                   " * step's (run ahead) the live one. */\n"
                   "static int64_t weights_of(int mb) { return mb < MICRO_BATCHES ? REGION_previous : "
                   "REGION_params; }\n");
}

/* Each chunk's stash pool: where its first layer's part of slot 0 is, its
 * slots and their bytes (layout.h). */
static void print_chunk_pools(const lx_printer *pr) {
  const lx_stage_layout *l = pr->l;
  FILE *f = pr->out;
  fprintf(f, "/* each chunk's pool of stash slots: its first layer in slot 0, its slots, a slot's bytes */\n"
             "static const int64_t chunk_stash_base[CHUNKS] = {");
  for (int v = 0; v < pr->st->n_chunks; v++)
    fprintf(f, "%s%lldLL", v ? ", " : "", (long long)l->chunk_layer_base[v]);
  fprintf(f, "};\nstatic const int chunk_slots[CHUNKS] = {");
  for (int v = 0; v < pr->st->n_chunks; v++)
    fprintf(f, "%s%d", v ? ", " : "", l->chunk_slots[v]);
  fprintf(f, "};\nstatic const int64_t chunk_slot_bytes[CHUNKS] = {");
  for (int v = 0; v < pr->st->n_chunks; v++)
    fprintf(f, "%s%lldLL", v ? ", " : "", (long long)l->chunk_slot_bytes[v]);
  fprintf(f, "};\n");
}

void emit_chunk_table(const lx_printer *pr) {
  const lx_stage *st = pr->st;
  if (!chunked(pr)) return;
  FILE *f = pr->out;
  fprintf(f,
          "\n/* Interleaved 1F1B: the stage holds CHUNKS chunks of layers (plan.txt), model\n"
          " * chunks STAGE, STAGE + STAGES, ...; its parameters and stash hold their layers\n"
          " * one chunk after the other. */\nenum { CHUNKS = %d };\n",
          st->n_chunks);
  fprintf(f, "static const int chunk_first_layer[CHUNKS] = {");
  for (int v = 0; v < st->n_chunks; v++)
    fprintf(f, "%s%d", v ? ", " : "", st->chunks[v].first_layer);
  fprintf(f, "};\n/* the stage's layers before each chunk */\nstatic const int chunk_slot[CHUNKS] = {");
  for (int v = 0, before = 0; v < st->n_chunks; before += st->chunks[v].n_layers, v++)
    fprintf(f, "%s%d", v ? ", " : "", before);
  fprintf(f, "};\n");
  print_chunk_pools(pr);
  fprintf(f, "static int chunk_of(int layer) {\n"
             "  int v = CHUNKS - 1;\n"
             "  while (v > 0 && layer < chunk_first_layer[v])\n"
             "    v--;\n"
             "  return v;\n"
             "}\n"
             "/* where the layer sits among the stage's */\n"
             "static int layer_slot(int layer) { return chunk_slot[chunk_of(layer)] + layer - "
             "chunk_first_layer[chunk_of(layer)]; }\n");
  fprintf(f,
          "/* a block layer's part of its chunk's stash slot of micro-batch mb */\n"
          "static int64_t chunk_stash(int layer, int mb) {\n"
          "  int c = chunk_of(layer);\n"
          "  return chunk_stash_base[c] + (mb %% chunk_slots[c]) * chunk_slot_bytes[c] +\n"
          "         (int64_t)(layer - chunk_first_layer[c]) * %lldLL;\n"
          "}\n",
          (long long)pr->l->layer_slot_bytes);
}

const char *emit_gradient_weights(const lx_printer *pr) { return steps_overlap(pr) ? "previous" : "params"; }

void emit_pool_slots(const lx_printer *pr) {
  const lx_stage_layout *l = pr->l;
  if (l->pool_slots[LX_POOL_HELD] || l->pool_slots[LX_POOL_WEIGHT_GRAD])
    fprintf(pr->out, "  HELD_SLOTS = %d, WEIGHT_GRAD_SLOTS = %d, /* zero bubble's W passes read these */\n",
            l->pool_slots[LX_POOL_HELD], l->pool_slots[LX_POOL_WEIGHT_GRAD]);
}

/* Does `code` call accessor `name` (the identifier, then its parenthesis)? */
static bool called(const char *code, const char *name) {
  size_t length = strlen(name);
  for (const char *at = strstr(code, name); at; at = strstr(at + 1, name)) {
    bool starts = at == code || !(isalnum((unsigned char)at[-1]) || at[-1] == '_');
    if (starts && at[length] == '(') return true;
  }
  return false;
}

void emit_names_print(const lx_printer *pr, const char *code) {
  lx_tensor_names *names = pr->names;
  int kept = 0;
  for (int k = 0; k < names->n; k++)
    if (called(code, names->v[k].name)) names->v[kept++] = names->v[k];
  names->n = kept;
  if (!names->n) return;
  qsort(names->v, (size_t)names->n, sizeof *names->v, by_place);
  char(*addresses)[256] = lx_calloc((size_t)names->n, sizeof *addresses);
  for (int k = 0; k < names->n; k++) /* first, so that the helpers are known */
    emit_place_address(pr, &names->v[k].place, addresses[k], sizeof addresses[k]);
  fprintf(pr->out, "\n/* The stage's tensors by name, at their places in the arena (plan.txt). */\n");
  print_helpers(pr);
  int region = -1;
  for (int k = 0; k < names->n; k++) {
    const named_tensor *n = &names->v[k];
    if ((int)n->place.region != region) {
      region = (int)n->place.region;
      fprintf(pr->out, "\n/* %s */\n", region_heading(n->place.region));
    }
    char shape[64], what[LX_TEXT_MAX + 256], params[32];
    shape_text(pr, n, shape, sizeof shape);
    describe(pr, n, what, sizeof what);
    parameters(&n->place, true, params, sizeof params);
    const char *type = element_type(pr, n->ref);
    char head[NAME_MAX_CHARS + 64];
    snprintf(head, sizeof head, "static %s *%s(%s) {", type, n->name, params);
    fprintf(pr->out, "/* %s: %s */\n", shape, what);
    if (strlen(head) + strlen(type) + strlen(addresses[k]) + 16 <= 120)
      fprintf(pr->out, "%s return (%s *)%s; }\n", head, type, addresses[k]);
    else
      fprintf(pr->out, "%s\n  return (%s *)%s;\n}\n", head, type, addresses[k]);
  }
  free(addresses);
}
