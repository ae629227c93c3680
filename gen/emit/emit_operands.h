/* emit_operands.h — what both printers (emit_cpu.c, emit_cuda.c) print the
 * same way: a tensor's address as C text from the static memory plan, the
 * operands and shapes of one op, the parameter table and training settings. */
#ifndef LX_EMIT_OPERANDS_H
#define LX_EMIT_OPERANDS_H

#include <stdio.h>

#include "emit/emit.h"
#include "escape.h"
#include "planning/passes.h"
#include "verify/access.h"

typedef struct lx_tensor_names lx_tensor_names; /* emit_names.h */

/* One stage being printed. The element types are the target's: "real" on
 * the CPU, "lx_bf16" activations and fp32 log-sum-exp on CUDA. */
typedef struct {
  FILE *out;
  const lx_pipeline *p;
  const lx_ir *ir;
  int s;
  const lx_stage *st;
  const lx_stage_layout *l;
  const char *act_type; /* activations and weights */
  const char *lse_type; /* the attention's and the loss's saved log-sum-exp */
  /* per graph and op, the CUDA printer's cuBLASLt epilogue fusions (emit_cuda.c); NULL on the CPU */
  const unsigned char *fusion[LX_GRAPH_COUNT];
  bool reroll;             /* the step's repeating runs of lines as loops (emit_reroll.c) */
  bool weight_pass;        /* a backward printed now is a W pass (zero bubble): its parameter gradients */
  bool in_pieces;          /* inside a loop over mini-sequences: a chunked op's calls are one piece's */
  const lx_op *rows_op;    /* printed over rows [first_row, first_row + piece_rows) alone (a token split) */
  const lx_instr *head_pieces; /* a head-split op's RECOMPUTE printed now: over its kv-head pieces alone */
  lx_tensor_names *names;  /* the tensors the printed code names (emit_names.c) */
  double predicted_step_s; /* lx_program's */
} lx_printer;

enum { PTR = 320 };

/* An op's operands as C expressions, for the fused calls that combine two
 * ops' (emit_cuda.c); "NULL" where the op has none. */
typedef struct {
  char out[PTR], in[2][PTR], w[PTR], b[PTR], dout[PTR], din[2][PTR];
  char dw[PTR + 16], db[PTR + 16]; /* GRAD_OF(w), GRAD_OF(b) */
} lx_operands;

/* Tensor `role`/`index` of op `op` of graph g, for the instance named by the
 * C variables `layer` and `mb` where the text is used. */
/* The printer of stage s of prog into out; act_type names the activations
 * and weights' element type, lse_type the saved log-sum-exp's. */
lx_printer emit_printer(const lx_program *prog, int s, FILE *out, const char *act_type, const char *lse_type);
lx_tensor_ref emit_ref(const lx_printer *pr, lx_graph_id g, int op, lx_tensor_role role, int index);
/* The tensor's accessor call ("block_qkv(layer, mb)", emit_names.h), or a
 * layer-boundary function's call; returns buf. */
const char *emit_at(const lx_printer *pr, char *buf, size_t size, lx_tensor_ref t);
/* The host arena's size and HOST_AT, whose offset `scaled` stretches to bytes. */
void emit_host_arena(const lx_printer *pr, const char *scaled);
/* What an OFFLOAD or PREFETCH copies: per tensor the op saves, its place on
 * the device (the window buffer) and its host copy, and its bytes (of the
 * model's dtype). Returns how many. */
typedef struct {
  char device[PTR], host[PTR];
  long long bytes;
} emit_host_copy;
int emit_host_copies(const lx_printer *pr, const lx_instr *in, emit_host_copy out[LX_MAX_SAVED + 1]);
/* The three layer-boundary functions (layer_output, layer_output_grad, layer_input_grad). */
void emit_block_boundaries(const lx_printer *pr);

/* The file name of `path` as the comments of emitted code cite it (escape.h). */
const char *emit_file_name(const char *path, char name[LX_TEXT_MAX]);

const lx_op *emit_op_at(const lx_printer *pr, lx_graph_id g, int i);
/* The operands of op i's forward (out_role: LX_T_OUTPUT, or LX_T_RECOMPUTED
 * for a RECOMPUTE) or backward kernel, each the tensor the verifier checks
 * for it (access.h lx_operand_access). */
void emit_gather_operands(const lx_printer *pr, lx_graph_id g, int i, lx_tensor_role out_role, bool backward,
                          lx_operands *o);
/* What a printer needs for one kernel call of op i: its pointer arguments
 * (in the order of its row of the operand table), its output's width on this rank and its rows: a
 * sequence shard's (SEQ_ROWS) or all of (B, T). */
typedef struct {
  const lx_op *op;
  char args[LX_MAX_OPERANDS * (PTR + 64)];
  int width;
  bool sharded;
  const char *rows;
  bool writes; /* it writes or adds into an operand (a frozen embedding's backward does not) */
} lx_kernel_call;
void emit_kernel_call(const lx_printer *pr, lx_graph_id g, int i, lx_tensor_role out_role, bool backward,
                      lx_kernel_call *c);

int emit_tp(const lx_printer *pr);
/* Whether a call of op printed now is one piece's (inside a loop over mini-sequences). */
bool emit_in_piece(const lx_printer *pr, const lx_op *op);
/* The rows of op's tensors a call of it takes: one piece's inside a loop over
 * mini-sequences (piece_rows), a sequence shard's (SEQ_ROWS) or all (BT). */
const char *emit_rows(const lx_printer *pr, const lx_op *op);
int emit_rank_width(const lx_printer *pr, lx_shape s);
int emit_in_width(const lx_printer *pr, lx_graph_id g, const lx_op *op);
/* "B, T, H, KVH, D" of an attention or rope op, per tensor-parallel rank. */
void emit_attention_dims(const lx_printer *pr, lx_graph_id g, const lx_op *op, char *buf, size_t size);

const char *emit_run_function(lx_instr_kind k);
/* Is the run exactly the body of its graph function? */
bool emit_run_is_function(const lx_printer *pr, const lx_instr *run, int count);
/* Does the stage's schedule run some instance of graph g's `kind` pass
 * whole, i.e. call its graph function? (Tensor-parallel all-reduces split
 * every backward of a graph with a column-parallel op.) */
bool emit_function_called(const lx_printer *pr, lx_instr_kind kind, lx_graph_id g);
/* Where a LOAD puts micro-batch mb's tokens (B, T) on the first stage and
 * its targets (B, T) on the last, as int pointers; `absent` for the half
 * this stage does not keep. */
void emit_load_operands(const lx_printer *pr, const char *absent, char tokens[PTR], char targets[PTR]);
/* The layer of an instruction as C text: prologue and epilogue have none. */
const char *emit_layer_text(const lx_instr *in, char *buf, size_t size);
/* The first layer of the stage's chunk `chunk`, as C: where a point-to-point
 * transfer's buffers are (the chunk's), in terms of the variable `layer`. */
const char *emit_chunk_layer(const lx_printer *pr, int chunk, char *buf, size_t size);
/* The body of the forward-only pass for micro-batch `mb`, chunk by chunk:
 * each receives its input from the previous stage (recv_format, given the
 * buffer and the peer stage) unless the prologue makes it, runs its layers,
 * and sends its output (send_format) unless the epilogue takes it. */
void emit_forward_only_chunks(const lx_printer *pr, const char *recv_format, const char *send_format);

/* ---- tensor parallelism ---- */
/* A vocabulary-parallel rank's rows of the table: first, count. */
#define VOCAB_SHARD "TP_RANK * (VP / TENSOR_PARALLEL), VP / TENSOR_PARALLEL"
/* ... its columns of the logits: count, first */
#define VOCAB_SHARD_LAST "VP / TENSOR_PARALLEL, TP_RANK * (VP / TENSOR_PARALLEL)"
/* ---- sequence parallelism ---- */
/* The whole input gradient a column-parallel backward of op i accumulates
 * into, which starts at zero: its address as a char pointer in buf (PTR)
 * and its bytes; false where the backward has none. */
bool emit_whole_gradient(const lx_printer *pr, lx_graph_id g, int i, char *buf, long long *bytes);
/* What a tensor-parallel collective around op i moves: the tensor an
 * all-reduce sums in place (the op's output, `role` naming the copy a
 * RECOMPUTE wrote, or in the backward its input's gradient), or the shard and
 * the whole tensor of a reduce-scatter or an all-gather; and the shard's
 * rows ("BT" or "SEQ_ROWS") and width on this rank. */
typedef struct {
  char shard[PTR], whole[PTR];
  const char *rows;
  int width;
} lx_tp_operands;
void emit_tp_collective_operands(const lx_printer *pr, lx_graph_id g, int i, bool backward,
                                 lx_tp_collective coll, lx_tensor_role role, lx_tp_operands *t);
/* A printer's call of a tensor-parallel collective, with its own argument
 * (the CPU's request, CUDA's stream). */
typedef void (*lx_tp_call_printer)(FILE *f, lx_tp_collective coll, const lx_tp_operands *t, const char *arg);
/* Inside a graph function: the collective `before` op i (the all-gather of
 * its input) or after it (its reduction), if any, that completes before the
 * next op, printed by `print`. */
void emit_blocking_collective(const lx_printer *pr, lx_graph_id g, int i, bool backward, lx_tensor_role role,
                              bool before, lx_tp_call_printer print, const char *arg);
/* The header's SEQ_ROWS (sequence parallelism), closing the enum, then BOUNDARY_ELEMENTS. */
void emit_boundary_sizes(const lx_printer *pr);

/* The tables of the stage's parameter tensors (init, weight decay, checkpoints; emit_params.c). */
void emit_param_table(const lx_printer *pr);
/* #define NAME "value" (escaped), or NULL where value is. */
void emit_string_macro(FILE *f, const char *name, const char *value);
/* The model file's training settings as TRAINING_* macros. */
void emit_training(const lx_printer *pr);

#endif
