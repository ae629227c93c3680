/* schedule.h — the schedule IR: the contract between scheduling and emission.
 *
 * Per pipeline stage: which layers it holds, what it keeps or recomputes
 * (the recompute plan), and one ordered instruction list per stream with
 * explicit events between streams. The printers (CUDA, CPU), the memory
 * planner, the verifier and the simulator all walk these same lists; a
 * recompute policy is data here, never a branch in a template. */
#ifndef LX_SCHEDULE_H
#define LX_SCHEDULE_H

#include "ir.h"

typedef enum { LX_GRAPH_PROLOGUE, LX_GRAPH_BLOCK, LX_GRAPH_EPILOGUE, LX_GRAPH_COUNT } lx_graph_id;

/* Streams of one stage. Communication gets streams of its own so that the
 * compute stream's waits are visible, and the recompute stream can fill them. */
typedef enum {
  LX_STREAM_COMPUTE,
  LX_STREAM_RECOMPUTE,
  LX_STREAM_SEND,      /* pipeline sends, in production order */
  LX_STREAM_RECV,      /* pipeline receives, in consumption order */
  LX_STREAM_TP,        /* tensor-parallel collectives */
  LX_STREAM_DP,        /* data-parallel gradient reduction */
  LX_STREAM_COUNT
} lx_stream;

typedef enum {
  LX_I_FWD,          /* forward of op `op` of graph `graph` (layer `layer`), micro-batch `mb` */
  LX_I_BWD,          /* its backward: input gradients and parameter gradients */
  LX_I_RECOMPUTE,    /* its forward again, to regenerate what was not kept */
  LX_I_SEND_ACT,     /* the stage's output activation of `mb` to stage `peer` */
  LX_I_RECV_ACT,
  LX_I_SEND_GRAD,    /* the gradient of the stage's input of `mb` to stage `peer` */
  LX_I_RECV_GRAD,
  LX_I_ALLREDUCE_TP, /* after FWD/RECOMPUTE of a row-parallel op, or BWD of a column-parallel one */
  LX_I_ALLREDUCE_DP, /* the stage's parameter gradients across replicas */
  LX_I_OPTIMIZER_STEP,
  LX_I_LOAD,         /* micro-batch `mb`'s data into input op `op` of graph `graph` (tokens, targets) */
  LX_I_RECORD,       /* record event `event` on this stream */
  LX_I_WAIT,         /* this stream waits for event `event` */
  LX_I_KIND_COUNT
} lx_instr_kind;

typedef struct {
  lx_instr_kind kind;
  lx_graph_id graph; /* FWD, BWD, RECOMPUTE, ALLREDUCE_TP */
  int layer;         /* model layer of a block op, else -1 */
  int op;            /* op index in its graph */
  int mb;            /* micro-batch, or -1 for once-per-step instructions */
  int peer;          /* SEND/RECV: the other stage */
  int event;         /* RECORD/WAIT: event id, unique in the stage */
  int64_t bytes;     /* communication payload per rank */
  bool backward;     /* ALLREDUCE_TP: the conjugate in the backward pass */
} lx_instr;

typedef struct {
  lx_instr *items;
  int count, cap;
} lx_instr_list;

/* What a stage does with the tensors an op saves for its backward. */
typedef enum {
  LX_RECOMPUTE_NONE,      /* keep everything */
  LX_RECOMPUTE_FULL,      /* keep each layer's input, recompute the layer (Megatron full) */
  LX_RECOMPUTE_SELECTIVE, /* recompute the attention core's internals (Megatron selective) */
  LX_RECOMPUTE_POLICY_COUNT
} lx_recompute_policy;

/* Per block op of a stage: which of the tensors it produces are dropped after
 * the forward, and so whether the op runs again before the backward. */
typedef struct {
  bool drop_output;    /* its output, where some op saves it */
  bool drop_internals; /* its own saved buffers (masks, softmax, lse) */
  bool recompute;      /* derived: re-run before the backward (closure over inputs) */
} lx_op_decision;

typedef struct {
  int index;
  int first_layer, n_layers; /* block layers [first_layer, first_layer + n_layers) */
  bool has_prologue, has_epilogue;
  int64_t params_per_rank;
  lx_op_decision *decisions; /* one per block op, the same for all of the stage's layers */
  int stashed_micro_batches; /* activations of this many micro-batches alive at once */
  lx_instr_list streams[LX_STREAM_COUNT];
  int n_events;
} lx_stage;

typedef struct {
  const lx_ir *ir;
  int pp, micro_batches;
  lx_schedule kind;
  lx_recompute_policy policy;
  lx_stage *stages;
} lx_pipeline;

const char *lx_stream_name(lx_stream s);
const char *lx_instr_kind_name(lx_instr_kind k);
const char *lx_recompute_policy_name(lx_recompute_policy p);
lx_instr *lx_instr_append(lx_instr_list *list, lx_instr instr);
void lx_pipeline_free(lx_pipeline *p);
const lx_graph *lx_graph_of(const lx_ir *ir, lx_graph_id id);
/* "FWD block.linear_2 L3 mb5", for traces, plans and diagnostics. */
void lx_instr_describe(const lx_ir *ir, const lx_instr *in, char *buf, size_t size);

#endif
