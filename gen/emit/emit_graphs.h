/* emit_graphs.h — a stage's graph functions, for either target: per graph
 * the stage holds, its forward, the block's recompute (when the schedule
 * calls it whole) and its backward (likewise), one op after the other with
 * the tensor-parallel collectives that must complete between them. Each
 * takes the target's kernel context first (`const lx_ctx *ctx`: the CPU's
 * thread pool, or a CUDA stream with its cuBLASLt handle and scratch) and
 * passes it to every kernel it calls. */
#ifndef LX_EMIT_GRAPHS_H
#define LX_EMIT_GRAPHS_H

#include "emit/emit_operands.h"

/* What a target prints of them. */
typedef struct {
  void (*forward_op)(const lx_printer *pr, lx_graph_id g, int i, lx_tensor_role out_role);
  void (*backward_op)(const lx_printer *pr, lx_graph_id g, int i);
  /* the collective before (an all-gather) or after (a reduction) op i, if any */
  void (*collective)(const lx_printer *pr, lx_graph_id g, int i, bool backward, lx_tensor_role role,
                     bool before);
  /* the statement that zeroes a gradient (printf: the buffer, its bytes in the
   * model's dtype): the backward's first statements, since gradients accumulate */
  const char *zero_format;
} lx_graph_printer;

void emit_graph_functions(const lx_printer *pr, const lx_graph_printer *gp);

/* A run of the step that is only part of its graph function's body
 * (between tensor-parallel collectives, or the recomputation a window took):
 * its ops inline, as the function prints them, and the instance's gradients
 * zeroed first where the run starts its backward. */
void emit_partial_run(const lx_printer *pr, const lx_graph_printer *gp, const lx_instr *run, int count);

/* Zeroes every gradient graph g's backward accumulates into (+=), with the
 * target's statement. */
void emit_zero_grads(const lx_printer *pr, lx_graph_id g, const char *zero_format);

#endif
