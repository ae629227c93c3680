/* emit_op.h — one op's kernel call, printed the same way for both targets.
 *
 * The kernel's name and pointer arguments come from the operand table
 * (op_signature.h, through emit_kernel_call), its sizes from the op's
 * shapes on this rank. What differs between the CPU and the CUDA templates
 * is in one small table per target. */
#ifndef LX_EMIT_OP_H
#define LX_EMIT_OP_H

#include "emit/emit_operands.h"

typedef struct {
  const char *prefix;    /* the kernels' names: "lx_" (templates/cpu) or "lx_cuda_" (templates/cuda) */
  const char *matmul;    /* what a matmul kernel takes first: "" or "matmul, " (the cuBLASLt handle) */
  const char *workspace; /* a kernel's reduction scratch: NULL (CPU kernels have none) or "scratch" */
  const char *loss;      /* before a loss kernel: "loss_sum += " (it returns the sum) or "" */
  const char *loss_into; /* a loss kernel's first argument: "" or "losses + mb, " (it writes the sum) */
  const char *tp_group;  /* a tensor-parallel loss's communicator */
  const char *rng;       /* the function that names a random stream */
  const char *last;      /* after the last argument: "" or ", stream" */
} lx_kernel_target;

extern const lx_kernel_target lx_cpu_kernels, lx_cuda_kernels;

/* The call of op i's forward (out_role LX_T_OUTPUT, or LX_T_RECOMPUTED for a
 * RECOMPUTE) or backward kernel, one statement. */
void emit_op_call(const lx_printer *pr, const lx_kernel_target *t, lx_graph_id g, int i, lx_tensor_role out_role,
                  bool backward);

#endif
