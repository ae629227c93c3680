/* op_signature.h — the operands of each op's kernels, in call order.
 *
 * One row per op kind (and attention implementation) names the tensors its
 * forward and its backward kernel take. It is the single source of both the
 * verifier's access lists (gen/verify/access.c) and the pointer arguments the CPU
 * and CUDA printers pass (gen/emit/emit_operands.c): what is verified is what is
 * emitted. An operand that an instance lacks (a bias the op does not have, the
 * gradient of token ids, a dropout mask at dropout 0) is NULL in the call and
 * no access. tests/unit/test_op_signature.c checks every row against what
 * analysis saves for the backward (ir.h lx_saved). */
#ifndef LX_OP_SIGNATURE_H
#define LX_OP_SIGNATURE_H

#include <stdbool.h>

#include "ir.h"

typedef enum {
  LX_OPND_END,    /* ends a row's list */
  LX_OPND_IN,     /* the output of input `index` */
  LX_OPND_OUT,    /* the op's output (in a backward: the saved output) */
  LX_OPND_WEIGHT, /* parameter 0 (a tied LM head: the embedding's table) */
  LX_OPND_BIAS,   /* parameter 1 */
  LX_OPND_SAVED,  /* the op's saved buffer named `saved` (ir.h lx_saved.what) */
  LX_OPND_DOUT,   /* the gradient of the output */
  LX_OPND_DIN,    /* the gradient of input `index` */
  LX_OPND_DWEIGHT,
  LX_OPND_DBIAS,
  LX_OPND_ADAPTER, /* LoRA adapter `index`: 0 A (projection down), 1 B (up) */
  LX_OPND_DADAPTER /* its gradient: absent where frozen (LoRA-FA's A) */
} lx_operand_kind;

typedef struct {
  lx_operand_kind kind;
  int index;         /* IN, DIN, ADAPTER, DADAPTER */
  const char *saved; /* SAVED */
} lx_operand;

enum { LX_MAX_OPERANDS = 11 };

/* A row lists the operands a kernel writes or adds into first, then those
 * it reads (a kernel's scratch is its target's context's, not an operand). */
typedef struct {
  const char *name;   /* the op kind's name (ir.json, messages, emitted comments) */
  const char *kernel; /* both targets' kernels: lx_<kernel>_forward, lx_<kernel>_backward */
  lx_operand forward[LX_MAX_OPERANDS + 1], backward[LX_MAX_OPERANDS + 1]; /* each ends with LX_OPND_END */
  /* An element-wise op, y = f(x) of one activation, width and split unchanged,
   * is its row and its two kernels, nothing else: the model language's
   * function `name` (frontend.c), its shape, FLOPs and saved input
   * (analyze.c) and its kernels' sizes (emit_op.c) follow from the row. */
  struct {
    bool is;
    double flops_forward, flops_backward; /* per element */
  } elementwise;
  /* The backward kernel can write its input gradients instead of adding to
   * them (its last arguments, LX_GRAD_WRITE or LX_GRAD_ADD, one per DIN
   * operand in order): where it is a gradient's only contribution, nothing
   * zeroes that buffer first (lx_writes_input_gradient). */
  bool din_writes;
} lx_op_signature;

/* The row of an op kind (materialised attention's, for attention). */
const lx_op_signature *lx_op_kind_signature(lx_op_kind kind);
/* The element-wise op kind whose model-language function is `name`, or
 * LX_OP_KIND_COUNT. */
lx_op_kind lx_elementwise_kind(const char *name);

/* The row of an op (flash and materialised attention have one each, and a
 * linear with a LoRA adapter its own). */
const lx_op_signature *lx_op_signature_of(const lx_op *op);

/* The operands of op's forward or backward kernel, ending with LX_OPND_END. */
const lx_operand *lx_op_operands(const lx_op *op, bool backward);

/* What part of a backward kernel an instruction runs: all of it, or under
 * zero bubble the input gradient (B) and the parameter gradients (W) apart.
 * The same kernel runs either, with the other part's operands NULL. */
typedef enum { LX_PART_WHOLE, LX_PART_INPUT, LX_PART_WEIGHT } lx_kernel_part;
bool lx_operand_in_part(lx_operand_kind kind, lx_kernel_part part);

/* Whether an operand is a parameter's gradient, and which parameter
 * (ir.h LX_PARAM_*) a parameter operand or its gradient is. */
bool lx_operand_is_param_grad(lx_operand_kind kind);
int lx_operand_param(const lx_operand *o);

/* How a kernel uses an operand: a forward writes its output and saved
 * buffers and reads the rest; a backward adds into the gradients of its
 * inputs and parameters and reads the rest. */
typedef enum {
  LX_ACCESS_READ,
  LX_ACCESS_WRITE,     /* overwrites the whole tensor */
  LX_ACCESS_ACCUMULATE /* adds into it: a gradient contribution, an all-reduce */
} lx_access_mode;
lx_access_mode lx_operand_mode(lx_operand_kind kind, bool backward);

#endif
