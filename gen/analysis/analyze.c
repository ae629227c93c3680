/* analyze.c — shape inference and per-op numbers, after the configs' values
 * (config_values.c).
 *
 * After the front end has read a model file, this pass decides whether it
 * describes a model that can be trained, and annotates every op with what the
 * later passes price and place: output shape and bytes, FLOPs forward and
 * backward, the bytes it keeps for its backward, and its parameters, all per
 * tensor-parallel rank for one micro-batch in the training dtype.
 *
 * Memory accounting follows Korthikanti et al. 2022: 16-bit activations,
 * 1-byte dropout masks, small buffers (LayerNorm mean and 1/std) not kept —
 * the emitted LayerNorm backward recomputes them from the saved input. */
#include "analysis/analyze.h"
#include "analysis/config_values.h"
#include "analysis/mini_sequences.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "diag.h"
#include "op_signature.h"

/* ---- shapes and numbers -------------------------------------------------- */

typedef struct {
  lx_ir *ir;
  lx_graph *g;
  int64_t b, s, t; /* micro-batch, sequence, tensor-parallel degree */
  bool sp;         /* sequence parallelism: replicated activations are sharded too */
  int elt;         /* bytes per activation element */
} shape_ctx;

static const lx_shape TOKENS = {.width = 1, .dtype = LX_DTYPE_INT32};

static int64_t rank_width(const shape_ctx *c, lx_shape s) { return lx_rank_width(c->ir, s); }

/* Bytes of one activation tensor on one tp rank. */
static int64_t tensor_bytes(const shape_ctx *c, lx_shape s) {
  if (s.scalar) return 4;
  int64_t bytes = c->b * c->s * rank_width(c, s) * lx_dtype_bytes(s.dtype);
  return c->sp && !s.split && s.dtype != LX_DTYPE_INT32 ? bytes / c->t : bytes;
}

static const lx_shape *input_shape(const shape_ctx *c, const lx_op *op, int k) {
  return &c->g->ops[op->inputs[k]].out;
}

static void save(lx_op *op, lx_save_kind kind, int input, const char *what, int64_t bytes) {
  op->saved[op->n_saved++] = (lx_saved){kind, input, what, bytes};
}

/* A chunk-local input (mini-sequences) is not kept: the backward makes its pieces again. */
static void save_input(const shape_ctx *c, lx_op *op, int k) {
  if (!lx_chunk_local(c->g, op->inputs[k]))
    save(op, LX_SAVE_INPUT, k, "input", tensor_bytes(c, *input_shape(c, op, k)));
}

static lx_shape activation(int width, bool split, const shape_ctx *c) {
  return (lx_shape){.width = width, .split = split, .dtype = c->ir->training.dtype};
}

static bool expect_activation(const shape_ctx *c, lx_op *op, int k) {
  const lx_shape *in = input_shape(c, op, k);
  if (in->dtype == LX_DTYPE_INT32 || in->scalar) {
    lx_error(op->src, "%s() expects activations as argument %d, got %s", lx_op_kind_name(op->kind), k + 1,
             in->scalar ? "the loss" : "token ids");
    return false;
  }
  return true;
}

static bool expect_tokens(const shape_ctx *c, lx_op *op, int k) {
  if (input_shape(c, op, k)->dtype != LX_DTYPE_INT32) {
    lx_error(op->src, "%s() expects token ids as argument %d", lx_op_kind_name(op->kind), k + 1);
    return false;
  }
  return true;
}

static bool expect_replicated(const shape_ctx *c, lx_op *op) {
  if (input_shape(c, op, 0)->split) {
    lx_error(op->src,
             "%s() needs its whole input on every tensor-parallel rank; this input is split (it comes "
             "from a column-parallel linear)",
             lx_op_kind_name(op->kind));
    return false;
  }
  return true;
}

static bool divisible_by_tp(const shape_ctx *c, lx_op *op, int64_t n, const char *what) {
  if (n % c->t) {
    lx_error(op->src, "%s (%lld) of %s() is not divisible by tp (%lld)", what, (long long)n,
             lx_op_kind_name(op->kind), (long long)c->t);
    return false;
  }
  return true;
}

static void shape_input(shape_ctx *c, lx_op *op) {
  bool tokens = !strcmp(c->g->name, "prologue") || (op->param == 1 && !strcmp(c->g->name, "epilogue"));
  op->out = tokens ? TOKENS : activation(c->ir->model.hidden, false, c);
}

/* A matmul's backward over its forward: its input's and its weight's
 * gradients, or (fine-tuning, its weight frozen) its input's alone. */
static double matmul_backward_factor(const lx_ir *ir) { return ir->finetune ? 1 : 2; }

/* Fine-tuning keeps no input for a weight gradient, but LoRA's for dA. */
static void save_input_for_weight(const shape_ctx *c, lx_op *op) {
  if (lx_matmul_reads_input(c->ir, op)) save_input(c, op, 0);
}

static void shape_embedding(shape_ctx *c, lx_op *op) {
  if (!expect_tokens(c, op, 0)) return;
  op->out = activation(op->out_width, false, c);
  op->params = (int64_t)op->table_rows * op->out_width;
  op->params_per_rank = (int64_t)c->ir->padded_vocab / c->t * op->out_width;
  op->tp_role = LX_TP_VOCAB;
  op->needs_tp_allreduce = c->t > 1;
  if (op->table_rows != c->ir->model.vocab)
    lx_error(op->src, "embedding() vocab (%d) differs from the model's vocab (%d)", op->table_rows,
             c->ir->model.vocab);
  save_input_for_weight(c, op); /* token ids, for the scatter-add of the weight gradient */
  op->flops_bwd = c->ir->finetune ? 0 : (double)(c->b * c->s * op->out_width);
}

static void shape_position_embedding(shape_ctx *c, lx_op *op) {
  if (!expect_tokens(c, op, 0)) return;
  op->out = activation(op->out_width, false, c);
  op->params = op->params_per_rank = c->s * op->out_width;
  op->flops_fwd = (double)(c->b * c->s * op->out_width);
  op->flops_bwd = c->ir->finetune ? 0 : op->flops_fwd;
}

static void shape_norm(shape_ctx *c, lx_op *op, int params_per_channel, double flops_per_element) {
  if (!expect_activation(c, op, 0) || !expect_replicated(c, op)) return;
  op->out = *input_shape(c, op, 0);
  op->params = op->params_per_rank = (int64_t)params_per_channel * op->out.width;
  save_input(c, op, 0);
  double elements = (double)(c->b * c->s * op->out.width);
  op->flops_fwd = flops_per_element * elements;
  op->flops_bwd = 2 * op->flops_fwd;
}

/* LoRA's adapters of a linear (k in, n out; k_rank, n_rank per tp rank):
 * u = x A^T (rank r), y += (alpha / r) u B^T. The backward takes
 * dB = s g^T u, du = s g B, dA = du^T x and adds du A to the input gradient.
 * Both keep u; LoRA keeps x too, for dA, which LoRA-FA freezes. Under tensor
 * parallelism A and B split as the linear does, with no collective of their
 * own: a column-parallel linear's B holds its output rows (A whole, its
 * gradient a sum over the ranks), a row-parallel one's A its input columns
 * (u a partial sum, added into the partial output the all-reduce sums; B
 * whole, its gradient a sum over the ranks). */
static void add_adapter(shape_ctx *c, lx_op *op, int64_t k, int64_t n, int64_t k_rank, int64_t n_rank) {
  int64_t r = op->lora_rank;
  if (r > k || r > n)
    lx_error(op->src, "lora() rank %lld exceeds the linear's %s width %lld", (long long)r,
             r > k ? "input" : "output", (long long)(r > k ? k : n));
  double rows = (double)(c->b * c->s), down = 2.0 * rows * (double)(r * k_rank),
         up = 2.0 * rows * (double)(r * n_rank);
  op->params += r * (k + n);
  op->params_per_rank += r * (k_rank + n_rank);
  op->flops_fwd += down + up;
  op->flops_bwd += 2 * up + down; /* dB, du; du A */
  save(op, LX_SAVE_INTERNAL, 0, "lora_down", c->b * c->s * r * c->elt);
  if (!c->ir->training.lora_fa) op->flops_bwd += down; /* dA */
}

/* The parameters of op on a tp rank that fine-tuning trains: the adapters LoRA-FA does not freeze. */
static int64_t trained_per_rank(const shape_ctx *c, const lx_op *op) {
  if (!op->lora_rank) return 0;
  int64_t r = op->lora_rank, n = rank_width(c, op->out), k = rank_width(c, *input_shape(c, op, 0));
  return c->ir->training.lora_fa ? r * n : r * (k + n);
}

static void shape_linear(shape_ctx *c, lx_op *op) {
  if (!expect_activation(c, op, 0)) return;
  const lx_shape in = *input_shape(c, op, 0);
  int64_t k = in.width, n = op->out_width, bias = op->has_bias ? n : 0;
  op->tp_role = in.split ? LX_TP_ROW : LX_TP_COLUMN;
  if (op->tp_role == LX_TP_COLUMN && !divisible_by_tp(c, op, n, "output width")) return;
  op->out = activation(op->out_width, !in.split, c);
  op->params = k * n + bias;
  op->params_per_rank = op->tp_role == LX_TP_COLUMN ? (k * n + bias) / c->t : k * n / c->t + bias;
  op->needs_tp_allreduce = op->tp_role == LX_TP_ROW && c->t > 1;
  save_input_for_weight(c, op);
  int64_t k_rank = rank_width(c, in), n_rank = rank_width(c, op->out);
  double rows = (double)(c->b * c->s);
  op->is_matmul = true;
  op->flops_fwd = 2.0 * rows * (double)k_rank * (double)n_rank;
  op->flops_bwd = matmul_backward_factor(c->ir) * op->flops_fwd;
  op->model_flops_fwd = 2.0 * rows * (double)k * (double)n;
  if (op->lora_rank) add_adapter(c, op, k, n, k_rank, n_rank);
}

/* q, k and v packed along the width: (heads + 2 * kv_heads) * head_dim. */
static bool check_qkv(shape_ctx *c, lx_op *op, int *head_dim) {
  if (!expect_activation(c, op, 0)) return false;
  const lx_shape in = *input_shape(c, op, 0);
  if (op->heads % op->kv_heads) {
    lx_error(op->src, "kv_heads (%d) do not divide heads (%d)", op->kv_heads, op->heads);
    return false;
  }
  const lx_model_config *m = &c->ir->model;
  if (op->heads != m->heads || op->kv_heads != m->kv_heads) { /* first: it explains a width that follows */
    lx_error(
        op->src,
        "%s() has %d heads and %d kv_heads; the model config says %d and %d (kv_heads defaults to heads): "
        "the call and .heads, .kv_heads of struct lx_model must agree",
        lx_op_kind_name(op->kind), op->heads, op->kv_heads, m->heads, m->kv_heads);
    return false;
  }
  int groups = op->heads + 2 * op->kv_heads;
  if (in.width % groups) {
    lx_error(op->src,
             "shape mismatch: %s() input width %d is not (heads + 2 * kv_heads) x head_dim = %d x head_dim",
             lx_op_kind_name(op->kind), in.width, groups);
    return false;
  }
  if (in.split &&
      (!divisible_by_tp(c, op, op->heads, "heads") || !divisible_by_tp(c, op, op->kv_heads, "kv_heads")))
    return false;
  *head_dim = in.width / groups;
  return true;
}

static void shape_attention(shape_ctx *c, lx_op *op) {
  int d;
  if (!check_qkv(c, op, &d)) return;
  const lx_shape in = *input_shape(c, op, 0);
  op->out = activation(op->heads * d, in.split, c);
  op->tp_role = in.split ? LX_TP_SPLIT_ELEMENTWISE : LX_TP_REPLICATED;
  int64_t heads_rank = in.split ? op->heads / c->t : op->heads;
  int64_t scores = c->b * heads_rank * c->s * c->s; /* one s x s matrix per head */
  save_input(c, op, 0);
  if (op->attention_impl == LX_ATTN_MATERIALIZED) {
    /* the probabilities only: the backward draws the dropout mask again from
     * its counters and forms the dropped probabilities a block at a time */
    save(op, LX_SAVE_INTERNAL, 0, "softmax", scores * c->elt);
  } else {
    save(op, LX_SAVE_OUTPUT, 0, "output", tensor_bytes(c, op->out));
    save(op, LX_SAVE_INTERNAL, 0, "lse", c->b * heads_rank * c->s * 4);
  }
  op->is_matmul = true;
  op->flops_fwd = 4.0 * (double)scores * d; /* Q K^T and P V */
  /* a flash backward recomputes Q K^T: 2.5x the forward instead of 2x */
  op->flops_bwd = (op->attention_impl == LX_ATTN_FLASH ? 2.5 : 2.0) * op->flops_fwd;
  op->model_flops_fwd = 4.0 * (double)(c->b * op->heads * c->s * c->s) * d;
}

static void shape_rope(shape_ctx *c, lx_op *op) {
  int d;
  if (!check_qkv(c, op, &d)) return;
  op->out = *input_shape(c, op, 0);
  op->tp_role = op->out.split ? LX_TP_SPLIT_ELEMENTWISE : LX_TP_REPLICATED;
  /* the backward is the inverse rotation: nothing saved */
  op->flops_fwd = op->flops_bwd = 3.0 * (double)(c->b * c->s * rank_width(c, op->out));
}

static void shape_elementwise(shape_ctx *c, lx_op *op, double fwd_per_element, double bwd_per_element) {
  if (!expect_activation(c, op, 0)) return;
  op->out = *input_shape(c, op, 0);
  op->tp_role = op->out.split ? LX_TP_SPLIT_ELEMENTWISE : LX_TP_REPLICATED;
  double elements = (double)(c->b * c->s * rank_width(c, op->out));
  op->flops_fwd = fwd_per_element * elements;
  op->flops_bwd = bwd_per_element * elements;
}

/* An element-wise op of the operand table: its FLOPs from its row, and it
 * saves the inputs its backward reads. */
static void shape_elementwise_row(shape_ctx *c, lx_op *op) {
  const lx_op_signature *sig = lx_op_signature_of(op);
  shape_elementwise(c, op, sig->elementwise.flops_forward, sig->elementwise.flops_backward);
  for (const lx_operand *o = sig->backward; op->out.dtype && o->kind != LX_OPND_END; o++)
    if (o->kind == LX_OPND_IN) save_input(c, op, o->index);
}

static void shape_swiglu(shape_ctx *c, lx_op *op) {
  shape_elementwise(c, op, 6, 12);
  if (!op->out.dtype) return;
  if (op->out.width % 2 || (op->out.split && (op->out.width / 2) % c->t)) {
    if (op->out.split && c->t > 1)
      lx_error(
          op->src,
          "shape mismatch: swiglu() of a tensor split over tp needs a width that is a multiple of 2 x tp "
          "= %d (each rank holds w / (2 tp) gate and w / (2 tp) up columns), got %d",
          2 * (int)c->t, op->out.width);
    else
      lx_error(op->src, "shape mismatch: swiglu() needs an even width (its gate and up halves), got %d",
               op->out.width);
    op->out.dtype = LX_DTYPE_NONE;
    return;
  }
  op->out.width /= 2;
  save_input(c, op, 0);
}

/* Nothing saved: the backward draws the forward's mask again from its counters. */
static void shape_dropout(shape_ctx *c, lx_op *op) { shape_elementwise(c, op, 2, 1); }

static void shape_add(shape_ctx *c, lx_op *op) {
  if (!expect_activation(c, op, 0) || !expect_activation(c, op, 1)) return;
  const lx_shape *a = input_shape(c, op, 0), *b = input_shape(c, op, 1);
  if (a->width == b->width && a->split != b->split) {
    lx_error(
        op->src,
        "shape mismatch: add() of a tensor split over tp and a whole one, both of width %d: the %s comes "
        "from a column-parallel linear, which another linear of it (row-parallel) makes whole",
        a->width, a->split ? "first" : "second");
    return;
  }
  if (a->width != b->width) {
    lx_error(op->src, "shape mismatch: add() of width %d%s and width %d%s", a->width,
             a->split ? " (split over tp)" : "", b->width, b->split ? " (split over tp)" : "");
    return;
  }
  shape_elementwise(c, op, 1, 0);
}

static bool prologue_has_embedding(const lx_ir *ir, int vocab) {
  for (int i = 0; i < ir->prologue.n_ops; i++)
    if (ir->prologue.ops[i].kind == LX_OP_EMBEDDING && ir->prologue.ops[i].table_rows == vocab) return true;
  return false;
}

static void shape_lm_head(shape_ctx *c, lx_op *op) {
  if (!expect_activation(c, op, 0) || !expect_replicated(c, op)) return;
  const lx_ir *ir = c->ir;
  int64_t h = input_shape(c, op, 0)->width;
  if (op->out_width != ir->model.vocab) {
    lx_error(op->src, "lm_head() vocab (%d) differs from the model's vocab (%d)", op->out_width,
             ir->model.vocab);
    return;
  }
  if (ir->model.tied_embeddings && !prologue_has_embedding(ir, op->out_width)) {
    lx_error(op->src, "tied lm_head() needs an embedding() of the same vocabulary in prologue()");
    return;
  }
  op->out = activation(op->out_width, true, c);
  op->out.vocab = true;
  op->tp_role = LX_TP_COLUMN; /* split over the vocabulary */
  int64_t v_rank = ir->padded_vocab / c->t;
  op->params = ir->model.tied_embeddings ? 0 : op->out_width * h;
  op->params_per_rank = ir->model.tied_embeddings ? 0 : v_rank * h;
  save_input_for_weight(c, op);
  op->is_matmul = true;
  op->flops_fwd = 2.0 * (double)(c->b * c->s) * (double)h * (double)v_rank;
  op->flops_bwd = matmul_backward_factor(ir) * op->flops_fwd;
  op->model_flops_fwd = 2.0 * (double)(c->b * c->s) * (double)h * op->out_width;
}

static void shape_cross_entropy(shape_ctx *c, lx_op *op) {
  if (!expect_activation(c, op, 0) || !expect_tokens(c, op, 1)) return;
  if (input_shape(c, op, 0)->width != c->ir->model.vocab) {
    lx_error(op->src, "shape mismatch: cross_entropy() needs logits of width vocab (%d), got %d",
             c->ir->model.vocab, input_shape(c, op, 0)->width);
    return;
  }
  op->out = (lx_shape){.scalar = true, .dtype = LX_DTYPE_FP32};
  op->tp_role = LX_TP_SPLIT_ELEMENTWISE; /* vocab-parallel: max and sum all-reduced */
  save_input(c, op, 0);
  save_input(c, op, 1);
  save(op, LX_SAVE_INTERNAL, 0, "lse", c->b * c->s * 4);
  double logits = (double)(c->b * c->s * (c->ir->padded_vocab / c->t));
  op->flops_fwd = 5 * logits;
  op->flops_bwd = 2 * logits;
}

static double larger(double a, double b) { return a > b ? a : b; }

/* What a stage could hold at most, in bytes, for its sums to stay exact in
 * int64_t with room for the later passes' own additions. */
#define TOO_MANY_BYTES 0x1p60

/* Byte, element and parameter counts are int64_t products of widths up to
 * 2^30, micro-batches and sequence lengths up to 2^20: an op no machine could
 * hold is rejected before they are multiplied, so that they cannot overflow. */
static bool sizes_fit(const shape_ctx *c, const lx_op *op) {
  const double limit = 0x1p52;
  double width = larger(op->out_width, op->table_rows);
  for (int k = 0; k < op->n_inputs; k++)
    width = larger(width, c->g->ops[op->inputs[k]].out.width);
  if (op->kind == LX_OP_EMBEDDING || op->kind == LX_OP_LM_HEAD || op->kind == LX_OP_CROSS_ENTROPY)
    width = larger(width, c->ir->padded_vocab);
  double per_token = larger(width, ((double)op->heads + op->kv_heads) * (double)c->s); /* attention scores */
  double activation_bytes = (double)c->b * (double)c->s * per_token * 8;
  double params = width * width;
  if (activation_bytes <= limit && params <= limit) return true;
  lx_error(op->src, "%s() is too large: about %.3g bytes of activations per micro-batch and %.3g parameters",
           lx_op_kind_name(op->kind), activation_bytes, params);
  return false;
}

static void shape_op(shape_ctx *c, lx_op *op) {
  if (!sizes_fit(c, op)) return;
  switch (op->kind) {
  case LX_OP_INPUT: shape_input(c, op); break;
  case LX_OP_EMBEDDING: shape_embedding(c, op); break;
  case LX_OP_POSITION_EMBEDDING: shape_position_embedding(c, op); break;
  case LX_OP_LAYERNORM: shape_norm(c, op, 2, 8); break;
  case LX_OP_RMSNORM: shape_norm(c, op, 1, 4); break;
  case LX_OP_LINEAR: shape_linear(c, op); break;
  case LX_OP_ATTENTION: shape_attention(c, op); break;
  case LX_OP_ROPE: shape_rope(c, op); break;
  case LX_OP_SWIGLU: shape_swiglu(c, op); break;
  case LX_OP_DROPOUT: shape_dropout(c, op); break;
  case LX_OP_ADD: shape_add(c, op); break;
  case LX_OP_LM_HEAD: shape_lm_head(c, op); break;
  case LX_OP_CROSS_ENTROPY: shape_cross_entropy(c, op); break;
  default:
    if (lx_op_signature_of(op)->elementwise.is) shape_elementwise_row(c, op);
    break;
  }
  if (c->ir->finetune && op->out.dtype) { /* the base model is frozen: only adapters train */
    int64_t trained = trained_per_rank(c, op);
    op->frozen_per_rank = op->params_per_rank - trained;
    op->params_per_rank = trained;
  }
  op->out_bytes = op->out.dtype ? tensor_bytes(c, op->out) : 0;
}

/* A tensor saved by several ops is held once, charged to the first saver. */
static void charge_saved_bytes(lx_graph *g) {
  bool *charged = lx_calloc((size_t)(g->n_ops > 0 ? g->n_ops : 1), sizeof *charged);
  for (int i = 0; i < g->n_ops; i++) {
    lx_op *op = &g->ops[i];
    op->saved_bytes = 0;
    for (int k = 0; k < op->n_saved; k++) {
      const lx_saved *sv = &op->saved[k];
      int tensor = sv->kind == LX_SAVE_INPUT ? op->inputs[sv->input] : sv->kind == LX_SAVE_OUTPUT ? i : -1;
      if (tensor >= 0 && charged[tensor]) continue;
      if (tensor >= 0) charged[tensor] = true;
      op->saved_bytes += sv->bytes;
    }
  }
  free(charged);
}

static void check_all_used(const lx_graph *g) {
  bool *used = lx_calloc((size_t)g->n_ops, sizeof *used);
  used[g->output] = true;
  for (int i = g->n_ops - 1; i >= 0; i--)
    for (int k = 0; used[i] && k < g->ops[i].n_inputs; k++)
      used[g->ops[i].inputs[k]] = true;
  for (int i = 0; i < g->n_ops; i++)
    if (!used[i] && g->ops[i].kind != LX_OP_INPUT)
      lx_error(g->ops[i].src, "the result of %s() never reaches the value %s() returns",
               lx_op_kind_name(g->ops[i].kind), g->name);
  free(used);
}

/* What a function returns is checked at the call that made it, or, for a
 * parameter returned as it is, at the return (not at the parameter). */
static void check_output(const shape_ctx *c) {
  const lx_graph *g = c->g;
  const lx_op *out = &g->ops[g->output];
  lx_srcloc at = out->kind == LX_OP_INPUT && g->returned_at.line ? g->returned_at : out->src;
  if (!strcmp(g->name, "epilogue")) {
    if (!out->out.scalar) lx_error(at, "epilogue() must return the loss, the result of cross_entropy()");
    return;
  }
  int h = c->ir->model.hidden;
  if (out->out.dtype == LX_DTYPE_INT32 || out->out.scalar || out->out.width != h || out->out.split)
    lx_error(
        at,
        "%s() must return activations of width hidden (%d), whole on every rank; this is %s of width %d%s",
        g->name, h, out->out.dtype == LX_DTYPE_INT32 ? "token ids" : "a tensor", out->out.width,
        out->out.split ? " split over tp" : "");
}

/* A column-parallel op's input gradient is summed over the tp ranks (or
 * reduce-scattered): it must be that op's alone, or the other uses' parts of
 * it would be summed t times. */
static void check_column_inputs(const lx_graph *g) {
  for (int i = 0; i < g->n_ops; i++) {
    const lx_op *op = &g->ops[i];
    if (op->tp_role != LX_TP_COLUMN || g->ops[op->inputs[0]].out.dtype == LX_DTYPE_INT32) continue;
    for (int j = 0; j < g->n_ops; j++)
      for (int k = 0; j != i && k < g->ops[j].n_inputs; k++)
        if (g->ops[j].inputs[k] == op->inputs[0]) {
          lx_error(
              g->ops[j].src,
              "under tensor parallelism the input of the column-parallel %s() at line %d must feed only it "
              "(its gradient is summed over the tp ranks); give %s() its own copy, e.g. a second layernorm",
              lx_op_kind_name(op->kind), op->src.line, lx_op_kind_name(g->ops[j].kind));
          return;
        }
  }
}

/* What an earlier analysis (under another plan) filled in, cleared. */
static void clear_analysis(lx_graph *g) {
  for (int i = 0; i < g->n_ops; i++)
    memset(&g->ops[i].out, 0, sizeof g->ops[i] - offsetof(lx_op, out));
  memset(&g->activation_bytes, 0, sizeof *g - offsetof(lx_graph, activation_bytes));
}

static void analyze_graph(lx_ir *ir, lx_graph *g) {
  clear_analysis(g);
  lx_mark_mini_sequences(ir, g);
  shape_ctx c = {.ir = ir,
                 .g = g,
                 .b = ir->plan.micro_batch,
                 .s = ir->model.seq_len,
                 .t = ir->plan.tp,
                 .sp = ir->plan.sequence_parallel,
                 .elt = lx_dtype_bytes(ir->training.dtype)};
  int errors_before = lx_error_count();
  for (int i = 0; i < g->n_ops; i++) {
    lx_op *op = &g->ops[i];
    bool inputs_ok = true;
    for (int k = 0; k < op->n_inputs; k++)
      inputs_ok &= g->ops[op->inputs[k]].out.dtype != LX_DTYPE_NONE;
    if (inputs_ok) shape_op(&c, op); /* a bad input was reported where it was made */
  }
  if (lx_error_count() != errors_before) return;
  for (int i = 0; i < g->n_ops; i++) /* in mini-sequences the backward runs the forward again */
    if (lx_chunk_local(g, i)) g->ops[i].flops_bwd += g->ops[i].flops_fwd;
  check_all_used(g);
  check_output(&c);
  if (c.t > 1) check_column_inputs(g);
  charge_saved_bytes(g);
  /* each op fits (sizes_fit); their sums are checked before they are added up */
  double saved = 0, params = 0;
  for (int i = 0; i < g->n_ops; i++) {
    saved += (double)g->ops[i].saved_bytes;
    params += (double)g->ops[i].params;
  }
  if (saved > TOO_MANY_BYTES || params > TOO_MANY_BYTES) {
    lx_error(g->src, "%s() is too large: about %.3g bytes saved per micro-batch and %.3g parameters", g->name,
             saved, params);
    return;
  }
  for (int i = 0; i < g->n_ops; i++) {
    const lx_op *op = &g->ops[i];
    g->activation_bytes += op->saved_bytes;
    g->params += op->params;
    g->params_per_rank += op->params_per_rank;
    g->frozen_per_rank += op->frozen_per_rank;
    g->flops_fwd += op->flops_fwd;
    g->flops_bwd += op->flops_bwd;
    g->model_flops_fwd += op->model_flops_fwd;
  }
}

/* The bytes a stage could hold, counted in double: the saved tensors of every
 * layer for every micro-batch of a step (GPipe keeps them all), and 20 bytes
 * per parameter (weights, gradients, fp32 master, two AdamW moments). The
 * later passes add such terms up in int64_t. */
static void check_totals(const lx_ir *ir) {
  const lx_plan *p = &ir->plan;
  double per_step = (double)p->micro_batch * p->dp;
  double micro_batches = p->global_batch ? p->global_batch / per_step : p->pp;
  double saved = (double)ir->prologue.activation_bytes +
                 (double)ir->model.layers * (double)ir->block.activation_bytes +
                 (double)ir->epilogue.activation_bytes;
  double bytes = micro_batches * saved + 20.0 * (double)ir->params_total;
  if (bytes > TOO_MANY_BYTES)
    lx_error(
        lx_field_loc(ir, LX_F_LAYERS, ir->locs.model),
        "the plan would keep about %.3g bytes (saved tensors of every micro-batch, weights and optimizer "
        "state), too many to count",
        bytes);
}

/* A graph's model FLOPs, forward and backward (Narayanan et al.): attention's
 * backward is twice its forward (it has no weights), a matmul's as
 * matmul_backward_factor says. */
static double model_flops(const lx_ir *ir, const lx_graph *g) {
  double flops = 0;
  for (int i = 0; i < g->n_ops; i++) {
    bool weights = g->ops[i].kind != LX_OP_ATTENTION;
    flops += g->ops[i].model_flops_fwd * (1 + (weights ? matmul_backward_factor(ir) : 2));
  }
  return flops;
}

/* The first linear with a lora() adapter, or NULL: the model is fine-tuned. */
static const lx_op *first_adapter(const lx_ir *ir) {
  const lx_graph *graphs[] = {&ir->prologue, &ir->block, &ir->epilogue};
  for (int g = 0; g < 3; g++)
    for (int i = 0; i < graphs[g]->n_ops; i++)
      if (graphs[g]->ops[i].lora_rank) return &graphs[g]->ops[i];
  return NULL;
}

/* LoRA-FA and LoRA's dropout need an adapter. */
static void check_finetune(const lx_ir *ir) {
  if (first_adapter(ir)) return;
  if (ir->training.lora_fa)
    lx_error(lx_field_loc(ir, LX_F_LORA_FA, ir->locs.training),
             "lora_fa freezes the A of lora() adapters, but no linear has one");
  if (ir->training.lora_dropout > 0)
    lx_error(lx_field_loc(ir, LX_F_LORA_DROPOUT, ir->locs.training),
             "lora_dropout drops the input of lora() adapters, but no linear has one");
}

int lx_analyze(lx_ir *ir) {
  int errors_before = lx_error_count();
  if (lx_check_config_values(ir) != 0) return lx_error_count() - errors_before;
  ir->finetune = first_adapter(ir) != NULL;
  check_finetune(ir);
  if (lx_error_count() != errors_before) return lx_error_count() - errors_before;
  int vocab_multiple = 128 * ir->plan.tp;
  ir->padded_vocab = (ir->model.vocab + vocab_multiple - 1) / vocab_multiple * vocab_multiple;
  analyze_graph(ir, &ir->prologue);
  analyze_graph(ir, &ir->block);
  analyze_graph(ir, &ir->epilogue);
  if (lx_error_count() != errors_before) return lx_error_count() - errors_before;
  int64_t layers = ir->model.layers;
  double params =
      (double)ir->prologue.params + (double)layers * (double)ir->block.params + (double)ir->epilogue.params;
  if (params > 0x1p62) { /* each graph fits (sizes_fit); the repeated block need not */
    lx_error(lx_field_loc(ir, LX_F_LAYERS, ir->locs.model),
             "the model would have %.3g parameters, too many to count", params);
    return lx_error_count() - errors_before;
  }
  ir->params_total = ir->prologue.params + layers * ir->block.params + ir->epilogue.params;
  check_totals(ir);
  double per_micro_batch = model_flops(ir, &ir->prologue) + (double)layers * model_flops(ir, &ir->block) +
                           model_flops(ir, &ir->epilogue);
  ir->model_flops_per_sequence = per_micro_batch / ir->plan.micro_batch;
  return lx_error_count() - errors_before;
}
