/* access.h — which tensors each schedule instruction reads and writes.
 *
 * The one place that ties an instruction of the schedule IR to the buffers
 * of the static memory plan (layout.h): the verifier checks the stream
 * choreography with it, and the code printers take their kernel arguments
 * from it, so that what is verified is what is emitted. */
#ifndef LX_ACCESS_H
#define LX_ACCESS_H

#include "planning/layout.h"
#include "op_signature.h"

typedef enum {
  LX_TARGET_TENSOR,     /* `tensor`, where lx_locate puts it */
  LX_TARGET_PARAM_GRAD, /* the gradient of parameter `tensor` (role LX_T_PARAM), in the grads region */
  LX_TARGET_REGION,     /* all of region `region` (the optimizer) */
  LX_TARGET_SPAN        /* `span` (a data-parallel bucket of gradients) */
} lx_access_target;

/* The part of a tensor an access touches. A token-split op's output
 * (lx_token_split) is two values: its first rows, which the offload copies
 * and the prefetch brings back, and the others, which RECOMPUTE makes; its
 * forward writes both and its readers read both. A head-split op's output
 * and internals (lx_op_decision.window_pieces, in a window) are a value per
 * kv-head piece: a RECOMPUTE of some pieces writes theirs, everything else
 * touches all. A piece's span is its share of the tensor's bytes, in order:
 * the kernels write its heads strided, and what the checks need is that the
 * pieces are disjoint and together the tensor. */
typedef enum {
  LX_ROWS_ALL,
  LX_ROWS_HOSTED,     /* its first rows, lx_token_hosted */
  LX_ROWS_RECOMPUTED, /* the rows from it on */
  LX_ROWS_HEAD_PIECE  /* + k: kv-head piece k */
} lx_rows;

typedef struct {
  lx_access_target target;
  lx_tensor_ref tensor; /* TENSOR and PARAM_GRAD; parameters have mb -1 (one copy per step) */
  lx_region region;     /* REGION */
  lx_span span;         /* SPAN */
  lx_access_mode mode;
  int rows; /* TENSOR: an lx_rows */
} lx_access;

/* Room for the accesses of most instructions; the first backward of a graph
 * instance also zeroes the instance's gradients, so a long block makes more:
 * lx_instr_access says how many, and a caller grows its buffer. */
enum { LX_MAX_ACCESSES = 64 };

/* Fills out[0 .. min(n, max)) with the accesses of instruction `in` of stage
 * `stage` and returns n, the number it makes (n > max: out is truncated).
 *   FWD, RECOMPUTE, BWD: the operands of the op's kernel (op_signature.h)
 *     with the modes it gives them (a RECOMPUTE writes role
 *     LX_T_RECOMPUTED). The first BWD of a graph instance (its last op)
 *     also writes, as zeros, every gradient buffer of the instance:
 *     gradients accumulate (+=) from zero.
 *   LOAD and the receives write their buffer, the sends read theirs;
 *   ALLREDUCE_TP accumulates into the op's output (forward) or its input's
 *   gradient (backward); ALLREDUCE_DP into the grads region; the optimizer
 *   reads the grads region and writes params, master and both moments.
 * The layout says which ops have parameters (a tied LM head on the
 * embedding's stage reads the embedding's table instead of its own). */
int lx_instr_access(const lx_pipeline *p, int stage, const lx_stage_layout *l, const lx_instr *in,
                    lx_access *out, int max);

/* The access operand o (op_signature.h) of the FWD, RECOMPUTE or BWD `in`
 * makes; false where the instance lacks it (a bias the op does not have, the
 * gradient of token ids, a buffer not saved). The printers pass the same
 * tensors to the kernels. */
bool lx_operand_access(const lx_pipeline *p, int stage, const lx_stage_layout *l, const lx_instr *in,
                       const lx_operand *o, lx_access *out);

/* Where an access lands in the stage's arena. */
lx_span lx_access_span(const lx_pipeline *p, int stage, const lx_stage_layout *l, const lx_access *a);

/* The gradient of a parameter: the same element offsets as the parameter,
 * in the fp32 grads region. */
lx_span lx_param_grad_span(const lx_pipeline *p, int stage, const lx_stage_layout *l, lx_tensor_ref param);

/* The stage's per-micro-batch pipeline buffers (role LX_T_SEND_ACT,
 * LX_T_SEND_GRAD or LX_T_RECV_GRAD), named the same way by every caller. */
lx_tensor_ref lx_boundary_ref(const lx_pipeline *p, int stage, lx_tensor_role role, int chunk, int mb);
/* Does op i start its graph instance's backward (the last op that is not an input)? */
bool lx_starts_instance_backward(const lx_graph *g, int i);

/* "block.linear_2 L3 mb5 output", for diagnostics. */
void lx_tensor_describe(const lx_ir *ir, lx_tensor_ref t, char *buf, size_t size);

#endif
