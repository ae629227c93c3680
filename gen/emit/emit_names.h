/* emit_names.h — the tensors of a stage file by name. Every place an emitted
 * statement reads or writes gets a name from the model file (the variable an
 * op's result was assigned to, or the op's own name when the variable is
 * reused) and one accessor function with a shape comment, printed once ahead
 * of the code: `block_qkv(layer, mb)` instead of an arena offset. The
 * accessors take the arena offsets of the static memory plan (layout.h)
 * unchanged; the micro-batch's slot and the layer's part of it are computed
 * by small helpers printed with them. */
#ifndef LX_EMIT_NAMES_H
#define LX_EMIT_NAMES_H

#include "emit/emit_operands.h"

lx_tensor_names *emit_names_new(void);
void emit_names_free(lx_tensor_names *names);

/* "block_qkv(layer, mb)": the call of tensor t's accessor (registering it),
 * for the instance named by the C variables `layer` and `mb` where the text
 * is used; its arguments are those its place depends on. */
const char *emit_tensor_call(const lx_printer *pr, lx_tensor_ref t, char *buf, size_t size);
/* "AT(REGION_stash + 512LL + stash_slot(mb))": the address of a place, with
 * the helpers the accessors use. */
void emit_place_address(const lx_printer *pr, const lx_place_expr *e, char *buf, size_t size);
/* Is this tensor a sequence shard (SEQ_ROWS of the BT rows on each rank)? */
bool emit_sequence_sharded(const lx_printer *pr, lx_shape s);
/* The helpers and accessors the code printed so far used, in the order of
 * the arena (parameters, kept activations, work, pipeline buffers): those
 * that `code` (the stage's code text) calls; a tensor an operand list named
 * without printing it (a fused call's) gets no accessor. */
void emit_names_print(const lx_printer *pr, const char *code);
/* The slot counts of the held and weight-gradient pools (layout.h), as
 * enumerators, where the stage has them. */
void emit_pool_slots(const lx_printer *pr);
/* GLOBAL_MB, and under 2BW STEP_OF and RUN_MB: how a micro-batch's number reads. */
void emit_micro_batch_macros(const lx_printer *pr);
/* Interleaved 1F1B: the stage's chunks, chunk_of(layer) and layer_slot(layer). */
void emit_chunk_table(const lx_printer *pr);
/* Whether two places are the same expression (in layer and micro-batch). */
bool emit_same_place(const lx_place_expr *a, const lx_place_expr *b);
/* Under 2BW, weights_of(mb): the weights version a micro-batch computes with. */
void emit_weight_versions(const lx_printer *pr);
/* The region of the weights that backwards take gradients at (GRAD_OF's base). */
const char *emit_gradient_weights(const lx_printer *pr);

#endif
