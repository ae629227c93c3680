/* op_signature.c — the operand table (see op_signature.h). */
#include "op_signature.h"

#include <stddef.h>

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
/* clang-format on */

/* Indexed by lx_op_kind; materialised attention here, flash attention below. */
static const lx_op_signature rows[LX_OP_KIND_COUNT] = {
    [LX_OP_EMBEDDING] = {"embedding", {OUT, IN(0), W}, {DW, DOUT, IN(0)}, false, false},
    [LX_OP_POSITION_EMBEDDING] = {"position_embedding", {OUT, W}, {DW, DOUT}, false, false},
    [LX_OP_LAYERNORM] = {"layernorm", {OUT, IN(0), W, B}, {DIN(0), DW, DB, DOUT, IN(0), W}, false, true},
    [LX_OP_RMSNORM] = {"rmsnorm", {OUT, IN(0), W}, {DIN(0), DW, DOUT, IN(0), W}, false, true},
    [LX_OP_LINEAR] = {"linear", {OUT, IN(0), W, B}, {DIN(0), DW, DB, DOUT, IN(0), W}, false, true},
    [LX_OP_ATTENTION] = {"attention",
                         {OUT, SAVED("softmax"), SAVED("dropout_output"), SAVED("dropout_mask"), IN(0)},
                         {DIN(0), DOUT, IN(0), SAVED("softmax"), SAVED("dropout_output"),
                          SAVED("dropout_mask")},
                         true,
                         true},
    [LX_OP_ROPE] = {"rope", {OUT, IN(0)}, {DIN(0), DOUT}, false, false},
    [LX_OP_GELU] = {"gelu", {OUT, IN(0)}, {DIN(0), DOUT, IN(0)}, false, false},
    [LX_OP_SWIGLU] = {"swiglu", {OUT, IN(0)}, {DIN(0), DOUT, IN(0)}, false, false},
    [LX_OP_DROPOUT] =
        {"dropout", {OUT, SAVED("dropout_mask"), IN(0)}, {DIN(0), DOUT, SAVED("dropout_mask")}, false, false},
    [LX_OP_ADD] = {"add", {OUT, IN(0), IN(1)}, {DIN(0), DIN(1), DOUT}, false, false},
    /* the LM head is a linear without bias: its bias operands are NULL */
    [LX_OP_LM_HEAD] = {"linear", {OUT, IN(0), W, B}, {DIN(0), DW, DB, DOUT, IN(0), W}, false, true},
    /* the loss is a number summed outside the arena, and seeds the backward */
    [LX_OP_CROSS_ENTROPY] =
        {"cross_entropy", {SAVED("lse"), IN(0), IN(1)}, {DIN(0), IN(0), SAVED("lse"), IN(1)}, true, false},
};

/* The backward recomputes the probabilities from the saved log-sum-exp. */
static const lx_op_signature flash_attention = {
    "flash_attention", {OUT, SAVED("lse"), IN(0)}, {DIN(0), DOUT, IN(0), OUT, SAVED("lse")}, false, true};

static const lx_op_signature no_operands = {
    NULL, {{LX_OPND_END, 0, NULL}}, {{LX_OPND_END, 0, NULL}}, false, false};

const lx_op_signature *lx_op_signature_of(const lx_op *op) {
  if (op->kind == LX_OP_ATTENTION && op->attention_impl == LX_ATTN_FLASH) return &flash_attention;
  if (op->kind >= LX_OP_KIND_COUNT || !rows[op->kind].kernel) return &no_operands; /* an input */
  return &rows[op->kind];
}

const lx_operand *lx_op_operands(const lx_op *op, bool backward) {
  const lx_op_signature *s = lx_op_signature_of(op);
  return backward ? s->backward : s->forward;
}

lx_access_mode lx_operand_mode(lx_operand_kind kind, bool backward) {
  switch (kind) {
  case LX_OPND_OUT:
  case LX_OPND_SAVED: return backward ? LX_ACCESS_READ : LX_ACCESS_WRITE;
  case LX_OPND_DIN:
  case LX_OPND_DWEIGHT:
  case LX_OPND_DBIAS: return LX_ACCESS_ACCUMULATE;
  default: return LX_ACCESS_READ;
  }
}
