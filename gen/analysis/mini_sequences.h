/* mini_sequences.h — which ops run in mini-sequences (MsT, Luo et al. 2024). */
#ifndef LX_MINI_SEQUENCES_H
#define LX_MINI_SEQUENCES_H

#include "ir.h"

/* Sets lx_op.chunks on the ops of graph g that run over the micro-batch's
 * rows in plan.mini_sequences pieces (1 on the others), and reports a
 * located error where the plan asks for pieces the graph or the sequence
 * cannot be cut into. */
void lx_mark_mini_sequences(const lx_ir *ir, lx_graph *g);

#endif
