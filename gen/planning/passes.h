/* passes.h — the entry points of the passes after analysis, in pipeline
 * order. Each pass lives in its own file and reads only the IR and the
 * schedule IR (ir/ir.h, ir/schedule.h). */
#ifndef LX_PASSES_H
#define LX_PASSES_H

#include "schedule.h"

/* partition.c — Megatron-LM's even split of the layers over `pp` stages
 * (the first layers % pp stages take one more). first_layer has pp + 1
 * entries; stage s holds [first_layer[s], first_layer[s + 1]). */
void lx_partition_uniform(int layers, int pp, int *first_layer);

/* recompute.c — the decisions of a fixed policy for one block, then the
 * closure: an op whose dropped tensors must be regenerated runs again, and
 * so does every producer of an input that is no longer held. */
void lx_recompute_fixed(const lx_ir *ir, lx_recompute_policy policy, lx_op_decision *decisions);
void lx_recompute_closure(const lx_graph *block, lx_op_decision *decisions);
/* Whether no policy may drop what op i of the block saves: the layer input
 * (the checkpoint), and an op in mini-sequences (its backward makes its
 * pieces again; a whole recomputation would need the pieces whole). */
bool lx_never_dropped(const lx_graph *block, int i);
/* Bytes of one layer's activations kept from forward to backward, per
 * micro-batch and tp rank, under these decisions. */
int64_t lx_kept_bytes(const lx_graph *block, const lx_op_decision *decisions);
/* Whether some op of the block saves op i's output for its backward. */
bool lx_output_saved(const lx_graph *block, int i);
/* The bytes op i's output is saved as (by its last saver; every saver holds
 * the one tensor), per micro-batch and tp rank; 0 where no op saves it. */
int64_t lx_saved_output_bytes(const lx_graph *block, int i);
/* The bytes of an op's own saved buffers (masks, softmax, lse). */
int64_t lx_internal_bytes(const lx_op *op);
/* What op i leaves saved for the backward: the two above. Dropping them
 * frees this much (lx_kept_bytes sums what is kept); offloading them copies
 * this much each way. */
int64_t lx_saved_bytes(const lx_graph *block, int i);
/* Whether a policy may offload what op i of the block saves (and so not
 * recompute it): it saves something, it is not the layer's input or output
 * (they are where the neighbouring layers put and take them) and does not
 * run in mini-sequences. */
bool lx_offloadable(const lx_graph *block, int i);
/* Whether a policy may offload some rows of op i's output and recompute the
 * others (lx_token_split): it is offloadable, saves its output alone, each
 * row of it depends on the same row of its inputs alone (a norm, a linear,
 * an element-wise op, an add), it has no tensor-parallel collective around
 * its forward, its rows are the micro-batch's B x T (not a sequence shard)
 * and they cut into LX_TOKEN_PIECES equal pieces. */
bool lx_token_splittable(const lx_ir *ir, int i);
/* Whether an op's recompute can make its internals alone where its output
 * stays kept: a materialised attention runs QK^T and the softmax again for
 * the probabilities its backward reads, not the product with V
 * (lx_attention_forward with no output). */
bool lx_recompute_may_keep_output(const lx_op *op);
/* Whether op i's recompute under decisions d (NULL: none) does so. */
bool lx_recomputes_internals_only(const lx_graph *block, const lx_op_decision *d, int i);
/* How many pieces op i's in-window recompute may be cut into by kv heads
 * (lx_op_decision.window_pieces): a materialised attention's kv heads on one
 * rank (each piece the query heads that read its kv heads, a kernel call of
 * their own: lx_attention_forward_heads); 1 for every other op. */
int lx_head_pieces_max(const lx_ir *ir, int i);
/* What one instance of offloaded op i copies each way under decision d: all
 * it saves, or the rows a token-wise split offloads. */
int64_t lx_host_copy_bytes(const lx_graph *block, const lx_op_decision *d, int i);

/* schedule.c — stage s's instruction lists of a pipeline schedule (GPipe
 * or 1F1B) from its recompute decisions and windows (rebuilt from scratch). */
void lx_schedule_stage(const lx_ir *ir, lx_pipeline *p, int s);
/* parallel.c — the plan's micro-batches per iteration and per replica. */
int lx_micro_batches(const lx_ir *ir);
/* The tensor-parallel collectives around op's forward (or backward): the
 * all-gather before it that sequence parallelism needs (of its input shards,
 * or in the backward of a row-parallel op its output gradient's), and the
 * reduction after it (its partial output; in the backward of a
 * column-parallel op, its input's partial gradient). */
typedef struct {
  bool gather_before, reduce_after;
  lx_tp_collective reduce; /* all-reduce, or reduce-scatter into the sequence shard */
} lx_tp_collectives;
lx_tp_collectives lx_tp_collectives_of(const lx_ir *ir, const lx_op *op, bool backward);
/* input_gradients.c — whether op i's backward writes the gradient of its
 * input k instead of adding to it: its kernel can (op_signature.h's
 * din_writes), it runs whole (not in mini-sequences), the gradient goes
 * straight into the input's buffer (not sequence parallelism's whole
 * buffer), and it is that gradient's only contribution (the input's one use). */
bool lx_writes_input_gradient(const lx_ir *ir, const lx_graph *g, int i, int k);
/* Whether op p's gradient buffer is so written by its consumer: no zeroing first. */
bool lx_gradient_written_by_consumer(const lx_ir *ir, const lx_graph *g, int p);
/* Stage s of a pp-stage schedule: how many micro-batches' W passes wait for
 * later backwards (zero bubble ZB-H1: s, so that stage s, which finishes its
 * last B s backwards before stage 0, fills that drain with W), and how many
 * micro-batches' activations it holds from a forward to its backward: all
 * under GPipe, p - s under 1F1B and ZB-H1 (whose W passes' inputs and
 * gradients have slots of their own: layout.h), under interleaved 1F1B the
 * most any one of its chunks holds (each chunk has slots of its own). */
int lx_weight_lag(lx_schedule kind, int s);
int lx_stashed_micro_batches(lx_schedule kind, int pp, int virtual_stages, int s, int micro_batches);
/* ... per chunk of the stage (one entry, or virtual_stages under interleaved 1F1B). */
void lx_chunk_stashes(lx_schedule kind, int pp, int virtual_stages, int s, int micro_batches, int *per_chunk);
/* Layer instances whose activations the stage keeps at once: each chunk's
 * slots times its layers (1F1B: stashed micro-batches x layers). */
int64_t lx_stashed_layers(const lx_stage *st);
/* One pass of a stage under interleaved 1F1B: the forward or the backward
 * of its chunk `chunk` for micro-batch mb. */
typedef struct {
  bool backward;
  int chunk, mb;
} lx_chunk_pass;
/* Megatron's interleaved order on stage s (micro_batches a multiple of pp):
 * virtual micro-batch k runs chunk (k / pp) % V of micro-batch
 * (k / (pp V)) pp + k % pp, backwards from the last chunk; warm-up forwards
 * 2 (pp - s - 1) + (V - 1) pp (all where micro_batches == pp), then one
 * forward and one backward alternating, then the remaining backwards.
 * Fills `order` with its 2 micro_batches V passes. */
void lx_interleaved_order(int pp, int virtual_stages, int s, int micro_batches, lx_chunk_pass *order);
/* Whether the BWD of op `op` of graph `graph` leaves its parameter gradients
 * to a BWD_WEIGHT instruction on stage st: a block linear (its weight
 * product is half its backward) where the stage has a weight lag, whose
 * input the stage keeps (a recomputed one is gone by the W pass). */
bool lx_defers_weight_grad(const lx_ir *ir, const lx_stage *st, lx_graph_id graph, int op);
/* Which part of its op's kernel an instruction runs (op_signature.h). */
lx_kernel_part lx_instr_part(const lx_ir *ir, const lx_stage *st, const lx_instr *in);
/* Under sequence parallelism, whether `part` of op's backward reads a whole
 * tensor gathered from shards just before it: a column-parallel linear's
 * input (for its weight gradient), a row-parallel one's output gradient (for
 * both). A zero-bubble B of a column-parallel linear needs no gather; its W
 * pass gathers the input again, from the shard held for it. */
bool lx_backward_gathers(const lx_ir *ir, const lx_op *op, lx_kernel_part part);
/* Sequence parallelism in effect (tp > 1): replicated activations are sequence shards. */
bool lx_sequence_parallel(const lx_ir *ir);

#endif
