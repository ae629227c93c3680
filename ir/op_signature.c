/* op_signature.c — the operand table (see op_signature.h). */
#include "op_signature.h"

#include <stddef.h>
#include <string.h>

/* clang-format off */
#define IN(k)       {LX_OPND_IN, (k), NULL}
#define OUT         {LX_OPND_OUT, 0, NULL}
#define W           {LX_OPND_WEIGHT, 0, NULL}
#define B           {LX_OPND_BIAS, 0, NULL}
#define SAVED(what) {LX_OPND_SAVED, 0, (what)}
#define DOUT        {LX_OPND_DOUT, 0, NULL}
#define DIN(k)      {LX_OPND_DIN, (k), NULL}
#define DW          {LX_OPND_DWEIGHT, 0, NULL}
#define DB          {LX_OPND_DBIAS, 0, NULL}
#define AD(k)       {LX_OPND_ADAPTER, (k), NULL}
#define DAD(k)      {LX_OPND_DADAPTER, (k), NULL}
/* clang-format on */

/* A row: ROW(name, kernel, forward operands, backward operands), then what
 * sets it apart: element-wise. */
#define ROW(name_, kernel_, fwd, bwd) .name = name_, .kernel = kernel_, .forward = {fwd}, .backward = {bwd}
#define OPS(...) __VA_ARGS__
#define ELEMENTWISE(flops_fwd, flops_bwd) .elementwise = {true, (flops_fwd), (flops_bwd)}
#define DIN_WRITES .din_writes = true

/* Indexed by lx_op_kind; materialised attention here, flash attention below. */
static const lx_op_signature rows[LX_OP_KIND_COUNT] = {
    [LX_OP_INPUT] = {.name = "input"},
    [LX_OP_EMBEDDING] = {ROW("embedding", "embedding", OPS(OUT, IN(0), W), OPS(DW, DOUT, IN(0)))},
    [LX_OP_POSITION_EMBEDDING] = {ROW("position_embedding", "position_embedding", OPS(OUT, W),
                                      OPS(DW, DOUT))},
    [LX_OP_LAYERNORM] = {ROW("layernorm", "layernorm", OPS(OUT, IN(0), W, B),
                             OPS(DIN(0), DW, DB, DOUT, IN(0), W))},
    [LX_OP_RMSNORM] = {ROW("rmsnorm", "rmsnorm", OPS(OUT, IN(0), W), OPS(DIN(0), DW, DOUT, IN(0), W))},
    /* dX = dY W: a GEMM that adds (beta 1) or writes (beta 0) */
    [LX_OP_LINEAR] = {ROW("linear", "linear", OPS(OUT, IN(0), W, B), OPS(DIN(0), DW, DB, DOUT, IN(0), W)),
                      DIN_WRITES},
    /* the probabilities saved; the backward draws the dropout mask again */
    [LX_OP_ATTENTION] = {ROW("attention", "attention", OPS(OUT, SAVED("softmax"), IN(0)),
                             OPS(DIN(0), DOUT, IN(0), SAVED("softmax")))},
    [LX_OP_ROPE] = {ROW("rope", "rope", OPS(OUT, IN(0)), OPS(DIN(0), DOUT))},
    /* GPT-2's tanh approximation: ~10 operations forward, ~20 backward */
    [LX_OP_GELU] = {ROW("gelu", "gelu", OPS(OUT, IN(0)), OPS(DIN(0), DOUT, IN(0))), ELEMENTWISE(10, 20),
                    DIN_WRITES},
    /* x sigmoid(x): ~5 operations forward, ~10 backward (the sigmoid again) */
    [LX_OP_SILU] = {ROW("silu", "silu", OPS(OUT, IN(0)), OPS(DIN(0), DOUT, IN(0))), ELEMENTWISE(5, 10),
                    DIN_WRITES},
    [LX_OP_SWIGLU] = {ROW("swiglu", "swiglu", OPS(OUT, IN(0)), OPS(DIN(0), DOUT, IN(0))), DIN_WRITES},
    /* nothing saved: the backward draws the mask again */
    [LX_OP_DROPOUT] = {ROW("dropout", "dropout", OPS(OUT, IN(0)), OPS(DIN(0), DOUT)), DIN_WRITES},
    /* a mode for each input's gradient: the residual stream's has other terms, the branch's often not */
    [LX_OP_ADD] = {ROW("add", "add", OPS(OUT, IN(0), IN(1)), OPS(DIN(0), DIN(1), DOUT)), DIN_WRITES},
    /* the LM head is a linear without bias: its bias operands are NULL */
    [LX_OP_LM_HEAD] = {ROW("lm_head", "linear", OPS(OUT, IN(0), W, B), OPS(DIN(0), DW, DB, DOUT, IN(0), W)),
                       DIN_WRITES},
    /* the loss is a number summed outside the arena, and seeds the backward */
    [LX_OP_CROSS_ENTROPY] = {ROW("cross_entropy", "cross_entropy", OPS(SAVED("lse"), IN(0), IN(1)),
                                 OPS(DIN(0), IN(0), SAVED("lse"), IN(1))),
                             DIN_WRITES},
};

/* The backward recomputes the probabilities from the saved log-sum-exp; cuDNN's
 * writes dqkv (under LX_GRAD_ADD lynx's kernels run it instead). */
static const lx_op_signature flash_attention = {ROW("attention", "flash_attention",
                                                    OPS(OUT, SAVED("lse"), IN(0)),
                                                    OPS(DIN(0), DOUT, IN(0), OUT, SAVED("lse"))),
                                                DIN_WRITES};

/* LoRA: the base product and the adapter's, u = x A^T kept in lora_down for
 * dB; dA needs x, LoRA-FA (A frozen) does not: its x is NULL. */
static const lx_op_signature lora_linear = {
    ROW("linear", "lora_linear", OPS(OUT, SAVED("lora_down"), IN(0), W, B, AD(0), AD(1)),
        OPS(DIN(0), DW, DB, DAD(0), DAD(1), DOUT, IN(0), SAVED("lora_down"), W, AD(0), AD(1))),
    DIN_WRITES};

static const lx_op_signature unknown = {.name = "?"};

const lx_op_signature *lx_op_kind_signature(lx_op_kind kind) {
  return (unsigned)kind < LX_OP_KIND_COUNT ? &rows[kind] : &unknown;
}

lx_op_kind lx_elementwise_kind(const char *name) {
  for (int k = 0; k < LX_OP_KIND_COUNT; k++)
    if (rows[k].elementwise.is && !strcmp(rows[k].name, name)) return (lx_op_kind)k;
  return LX_OP_KIND_COUNT;
}

const lx_op_signature *lx_op_signature_of(const lx_op *op) {
  if (op->kind == LX_OP_ATTENTION && op->attention_impl == LX_ATTN_FLASH) return &flash_attention;
  if (op->kind == LX_OP_LINEAR && op->lora_rank) return &lora_linear;
  return lx_op_kind_signature(op->kind);
}

const lx_operand *lx_op_operands(const lx_op *op, bool backward) {
  const lx_op_signature *s = lx_op_signature_of(op);
  return backward ? s->backward : s->forward;
}

bool lx_operand_is_param_grad(lx_operand_kind kind) {
  return kind == LX_OPND_DWEIGHT || kind == LX_OPND_DBIAS || kind == LX_OPND_DADAPTER;
}

int lx_operand_param(const lx_operand *o) {
  switch (o->kind) {
  case LX_OPND_BIAS:
  case LX_OPND_DBIAS: return LX_PARAM_BIAS;
  case LX_OPND_ADAPTER:
  case LX_OPND_DADAPTER: return LX_PARAM_LORA_A + o->index;
  default: return LX_PARAM_WEIGHT;
  }
}

/* W needs the products' other factors (inputs, saved tensors) and the output
 * gradient; B everything but the parameter gradients. */
bool lx_operand_in_part(lx_operand_kind kind, lx_kernel_part part) {
  bool parameter_grad = lx_operand_is_param_grad(kind);
  switch (part) {
  case LX_PART_INPUT: return !parameter_grad && kind != LX_OPND_IN; /* dX = dY W: the input is W's */
  case LX_PART_WEIGHT:
    return parameter_grad || (kind != LX_OPND_DIN && kind != LX_OPND_WEIGHT && kind != LX_OPND_BIAS);
  default: return true;
  }
}

lx_access_mode lx_operand_mode(lx_operand_kind kind, bool backward) {
  switch (kind) {
  case LX_OPND_OUT:
  case LX_OPND_SAVED: return backward ? LX_ACCESS_READ : LX_ACCESS_WRITE;
  case LX_OPND_DIN:
  case LX_OPND_DWEIGHT:
  case LX_OPND_DBIAS:
  case LX_OPND_DADAPTER: return LX_ACCESS_ACCUMULATE;
  default: return LX_ACCESS_READ;
  }
}
