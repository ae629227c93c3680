/* emit_fusion.h — which neighbouring ops of a stage the CUDA printer issues
 * as one call (cuBLASLt epilogues, the norm that reads the residual sum as it
 * writes it). A pass over the stage's schedule, run before printing it. */
#ifndef LX_EMIT_FUSION_H
#define LX_EMIT_FUSION_H

#include "emit/emit_operands.h"

/* Flags per op, set on the op whose call does both ops' work. */
enum {
  LX_FUSE_GELU = 1,          /* a linear: the gelu after it, in its GELU epilogue (forward and recompute) */
  LX_FUSE_RESIDUAL_NORM = 2, /* an add: the layernorm / rmsnorm after it, in one pass over each row */
  LX_FUSE_DGELU = 4,         /* a linear: the backward of the gelu before it, in its DGELU epilogue */
  LX_FUSE_FORWARD = LX_FUSE_GELU | LX_FUSE_RESIDUAL_NORM,
};

/* fusion[g][i]: the flags of op i of graph g; all zero unless `fuse`. */
void emit_plan_fusions(const lx_printer *pr, bool fuse, unsigned char *fusion[LX_GRAPH_COUNT]);
void emit_free_fusions(unsigned char *fusion[LX_GRAPH_COUNT]);
/* Does op i (in range or not) carry one of `flags`? */
bool emit_fused(const lx_printer *pr, lx_graph_id g, int i, int flags);
/* Is op p's gradient written whole by a fused call (the gelu after it in the
 * DGELU epilogue of the linear after that), so that nothing zeroes it first? */
bool emit_fusion_writes_gradient(const lx_printer *pr, lx_graph_id g, int p);

#endif
