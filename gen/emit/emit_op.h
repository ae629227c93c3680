/* emit_op.h — one op's kernel call, printed the same way for both targets.
 *
 * The kernel's name and pointer arguments come from the operand table
 * (op_signature.h, through emit_kernel_call), its sizes from the op's
 * shapes on this rank. What differs between the CPU and the CUDA templates
 * is in one small table per target: every kernel takes the target's
 * context (`ctx`: the OpenMP pool, or a CUDA stream with its cuBLASLt
 * handle and scratch) first and has the same name and argument order on
 * both, so the table holds only what a target's program does around them. */
#ifndef LX_EMIT_OP_H
#define LX_EMIT_OP_H

#include "emit/emit_operands.h"

typedef struct {
  const char *loss;      /* before a loss kernel: "loss_sum += " (it returns the loss) or "" */
  const char *loss_into; /* a loss kernel's first pointer: "" or "losses + mb % MICRO_BATCHES, " (it writes
                            the loss) */
  const char *piece_loss_into; /* the same for one piece of a loss in mini-sequences */
  const char *tp_group;  /* a tensor-parallel loss's communicator */
} lx_kernel_target;

extern const lx_kernel_target lx_cpu_kernels, lx_cuda_kernels;

/* The call of op i's forward (out_role LX_T_OUTPUT, or LX_T_RECOMPUTED for a
 * RECOMPUTE) or backward kernel, one statement. */
void emit_op_call(const lx_printer *pr, const lx_kernel_target *t, lx_graph_id g, int i,
                  lx_tensor_role out_role, bool backward);
/* The last arguments of op i's backward where its kernel can write its input
 * gradients (op_signature.h's din_writes), one per DIN operand: ", LX_GRAD_WRITE"
 * where the op is that gradient's one contribution (lx_writes_input_gradient),
 * else ", LX_GRAD_ADD". */
void emit_grad_modes(const lx_printer *pr, lx_graph_id g, int i, char *buf, size_t size);

#endif
