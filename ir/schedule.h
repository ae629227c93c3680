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
#include "op_signature.h"

typedef enum { LX_GRAPH_PROLOGUE, LX_GRAPH_BLOCK, LX_GRAPH_EPILOGUE, LX_GRAPH_COUNT } lx_graph_id;

/* Streams of one stage. Communication gets streams of its own so that the
 * compute stream's waits are visible, and the recompute stream can fill them. */
typedef enum {
  LX_STREAM_COMPUTE,
  LX_STREAM_RECOMPUTE,
  LX_STREAM_SEND,     /* pipeline sends, in production order */
  LX_STREAM_RECV,     /* pipeline receives, in consumption order */
  LX_STREAM_TP,       /* tensor-parallel collectives */
  LX_STREAM_DP,       /* data-parallel gradient reduction */
  LX_STREAM_OFFLOAD,  /* activation copies to host memory (device to host) */
  LX_STREAM_PREFETCH, /* ... and back before their backward (host to device): PCIe is full duplex */
  LX_STREAM_COUNT
} lx_stream;

typedef enum {
  LX_I_FWD,        /* forward of op `op` of graph `graph` (layer `layer`), micro-batch `mb` */
  LX_I_BWD,        /* its backward: input gradients, and parameter gradients unless the stage defers them */
  LX_I_BWD_WEIGHT, /* the parameter gradients of a BWD that left them out (zero bubble's W pass) */
  LX_I_RECOMPUTE,  /* its forward again, to regenerate what was not kept */
  LX_I_SEND_ACT,   /* the stage's output activation of `mb` to stage `peer` */
  LX_I_RECV_ACT,
  LX_I_SEND_GRAD, /* the gradient of the stage's input of `mb` to stage `peer` */
  LX_I_RECV_GRAD,
  LX_I_ALLREDUCE_TP, /* a tensor-parallel collective (`coll`): after FWD/RECOMPUTE of a row-parallel op,
                        after BWD of a column-parallel one; under sequence parallelism also gathers before */
  LX_I_ALLREDUCE_DP, /* one bucket of parameter gradients across replicas (ZeRO-1: reduce-scatter) */
  LX_I_OPTIMIZER_STEP,
  LX_I_LOAD,     /* micro-batch `mb`'s data into input op `op` of graph `graph` (tokens, targets) */
  LX_I_OFFLOAD,  /* the saved tensors of op `op` (layer, mb) to their host slot (lx_op_decision.offload) */
  LX_I_PREFETCH, /* ... and back, into the window buffer of the layer's parity, before its backward */
  LX_I_RECORD,   /* record event `event` on this stream */
  LX_I_WAIT,     /* this stream waits for event `event` */
  LX_I_KIND_COUNT
} lx_instr_kind;

/* What an ALLREDUCE_TP does. Without sequence parallelism always an all-reduce
 * in place; with it (Megatron), a reduce-scatter of the op's whole partial
 * result into its sequence shard, or an all-gather of sequence shards into
 * the whole tensor the op reads. */
typedef enum { LX_COLL_ALLREDUCE, LX_COLL_REDUCE_SCATTER, LX_COLL_ALLGATHER } lx_tp_collective;

typedef struct {
  lx_instr_kind kind;
  lx_graph_id graph; /* FWD, BWD, RECOMPUTE, ALLREDUCE_TP, ALLREDUCE_DP (its bucket) */
  int layer;         /* model layer of a block op, else -1 */
  int op;            /* op index in its graph */
  int mb;            /* micro-batch, or -1 for once-per-step instructions */
  int peer;          /* SEND/RECV: the other stage */
  int chunk;         /* SEND/RECV: which of the stage's chunks sends or receives (interleaved 1F1B) */
  int event;         /* RECORD/WAIT: event id, unique in the stage */
  int64_t bytes;     /* communication payload per rank */
  bool backward;     /* ALLREDUCE_TP: the conjugate in the backward pass */
  bool recomputed;   /* ALLREDUCE_TP: of a RECOMPUTE's output (where it regenerates it) */
  lx_tp_collective coll; /* ALLREDUCE_TP */
  bool tied;         /* ALLREDUCE_DP: the bucket of the tied embedding table (or its copy) alone */
  /* PipeDream-2BW, which does not drain between steps: a `fill` instruction belongs to the step's
   * first forwards, which run only where the pipeline starts empty (at the first step, after a
   * drain); an `ahead` one to the next step's first forwards, which run in this step's drain
   * unless the pipeline drains (before validation, a checkpoint, the end). An ahead micro-batch
   * is numbered micro_batches + its number in the next step. */
  bool fill, ahead;
  int step; /* in a pipeline unrolled over consecutive steps (lx_unroll_steps): which one; else 0 */
  /* RECOMPUTE of a head-split op (lx_op_decision.window_pieces): its kv-head pieces [piece_first,
   * piece_end) of `pieces`, the query heads that read them; pieces 0: the whole op */
  int piece_first, piece_end, pieces;
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
  LX_RECOMPUTE_CHECKMATE, /* the cheapest ops to recompute on demand under the stage's budget (exact, ILP) */
  LX_RECOMPUTE_LYNX_HEU,  /* Lynx heuristic: one layer's keep / on-demand / window choice, applied to all */
  LX_RECOMPUTE_LYNX_OPT,  /* Lynx MILP: keep / on-demand / window minimising the stage's exposed recompute */
  LX_RECOMPUTE_POLICY_COUNT
} lx_recompute_policy;

/* Per block op of a stage: which of the tensors it produces are dropped after
 * the forward, and so whether the op runs again before the backward. */
typedef struct {
  bool drop_output;    /* its output, where some op saves it */
  bool drop_internals; /* its own saved buffers (masks, softmax, lse) */
  bool recompute;      /* derived: re-run before the backward (closure over inputs) */
  bool in_window;      /* its recompute runs on the recompute stream in a window before the backward
                          (when the layer instance got one, else on demand), into the window buffers */
  bool offload;        /* not recomputed: what it saves (its saved output, its internals) is written into
                          the window buffer of the layer's parity, copied to host memory after its forward
                          and back before its backward (LX_I_OFFLOAD, LX_I_PREFETCH) */
  int host_pieces;     /* token-wise (MEMO): with offload and recompute both set, the first host_pieces of
                          LX_TOKEN_PIECES row pieces of its output are offloaded and the other rows
                          recomputed (lx_token_split); 0 otherwise */
  int window_pieces;   /* head-split (lx_head_splittable): its in-window recompute runs as this many pieces
                          of its kv heads, each placed in a window of its own or on demand; the placement
                          has an entry per piece (lx_placement_size); 0 or 1: whole */
} lx_op_decision;

/* Token-wise offload cuts a tensor's B x T rows into this many pieces. */
enum { LX_TOKEN_PIECES = 8 };

/* Whether a decision offloads part of an op's rows and recomputes the rest. */
bool lx_token_split(const lx_op_decision *d);
/* Of `amount` (rows of an op's output, or bytes of it), the part whose
 * place is in host memory: the first host_pieces / LX_TOKEN_PIECES of it
 * under a token split (its RECOMPUTE makes the rest), else none. */
int64_t lx_token_hosted(const lx_op_decision *d, int64_t amount);

/* How many placement entries an op takes: its window pieces, or 1. */
int lx_window_pieces(const lx_op_decision *d);
/* The kv heads [first, end) of `kv_heads` that a RECOMPUTE of pieces
 * [piece_first, piece_end) of `pieces` runs (all of them for a whole op). */
void lx_instr_kv_heads(const lx_instr *in, int kv_heads, int *first, int *end);

/* A statically known idle interval of a stage's compute stream, measured by
 * simulating the schedule with on-demand recompute (gen/planning/windows.c). */
typedef enum {
  LX_WINDOW_TP_FORWARD,  /* a tensor-parallel all-reduce of a forward */
  LX_WINDOW_TP_BACKWARD, /* ... of a backward */
  LX_WINDOW_ACTIVATION,  /* waiting for the previous stage's activation */
  LX_WINDOW_GRADIENT,    /* waiting for the next stage's gradient (1F1B steady state) */
  LX_WINDOW_WARMUP,      /* pipeline fill, before the stage's first backward */
  LX_WINDOW_COOLDOWN,    /* pipeline drain, after the stage's last forward */
  LX_WINDOW_OTHER,       /* a send buffer, the data-parallel all-reduce */
  LX_WINDOW_KIND_COUNT
} lx_window_kind;

typedef struct {
  lx_window_kind kind;
  int after;       /* the window opens when the compute stream's FWD/BWD number `after` (0-based,
                      counting only FWD and BWD) is done */
  double start;    /* seconds from the iteration's start, in the measured schedule */
  double length;   /* seconds the compute stream idles there */
  double capacity; /* seconds of recompute (as timed alone) that fit: length / interference */
} lx_window;

/* What a policy pass reports about its search, per stage. */
typedef struct {
  double search_s;      /* wall-clock seconds the policy took */
  double exposed_s;     /* predicted recompute on the critical path per iteration */
  double window_s;      /* predicted recompute hidden in windows per iteration */
  int64_t budget_bytes; /* bytes for the block's activations (kept x stashed x layers + window buffers) */
  int64_t used_bytes;   /* what the decisions take of it */
  const char *status;   /* solver status: "optimal", "feasible (time limit)", "heuristic", ... */
  double gap;           /* relative MIP gap; 0 when proven optimal or not a MIP */
  double milp_s;        /* lynx-opt: exposed_s of the MILP's own solution, before lynx-heu's is compared */
} lx_policy_stats;
/* Consecutive block layers [first_layer, first_layer + n_layers) of one
 * model chunk. A stage holds one chunk, or under interleaved 1F1B one per
 * virtual stage: chunk v of stage s is the model's chunk v * pp + s. */
typedef struct {
  int first_layer, n_layers;
} lx_chunk;

typedef struct {
  int index;
  int n_chunks;
  lx_chunk chunks[LX_MAX_VIRTUAL_STAGES]; /* in model order */
  int n_layers;                   /* of all its chunks */
  bool has_prologue, has_epilogue;
  int64_t params_per_rank;
  int64_t frozen_per_rank;   /* fine-tuning's frozen weights: no gradient, no optimizer state */
  lx_op_decision *decisions; /* one per block op, the same for all of the stage's layers */
  lx_window *windows;        /* the compute stream's windows, by `after`; NULL for fixed policies */
  int n_windows;
  int *window_of; /* per layer instance (lx_layer_slot(layer) * micro_batches + mb) and block op
                     piece (each op lx_window_pieces of them, in op order): the window the piece's
                     in-window recompute runs in, or -1 (on demand); an instance's pieces may spread
                     over several windows, never decreasing in order (lx_piece_window); NULL: all
                     on demand */
  lx_policy_stats stats;
  int stashed_micro_batches; /* activations of this many micro-batches alive at once (forward to backward) */
  int chunk_slots[LX_MAX_VIRTUAL_STAGES]; /* ... per chunk: each chunk's stash slots (interleaved 1F1B) */
  int weight_lag; /* zero bubble: micro-batch m's W passes run after the B of m + weight_lag (so the
                     drain has W to fill its waits); 0: each BWD computes its parameter gradients */
  int held_micro_batches;        /* zero bubble: micro-batches whose W passes' inputs are alive at once
                                    (forward to W pass); 0 without W passes */
  int weight_grad_micro_batches; /* ... whose W passes' output gradients are (backward to W pass) */
  lx_instr_list streams[LX_STREAM_COUNT];
  int n_events;
} lx_stage;

typedef struct {
  const lx_ir *ir;
  int pp, micro_batches; /* micro-batches per optimizer step */
  int virtual_stages;    /* chunks per stage: 1, or V under interleaved 1F1B */
  int steps;             /* optimizer steps the instruction lists span: 1, or more where unrolled */
  lx_schedule kind;
  lx_recompute_policy policy;
  bool balanced_split; /* the layers split by the recompute-aware partition (an uneven split), not evenly */
  lx_stage *stages;
} lx_pipeline;

const char *lx_stream_name(lx_stream s);
const char *lx_instr_kind_name(lx_instr_kind k);
const char *lx_recompute_policy_name(lx_recompute_policy p);
const char *lx_window_kind_name(lx_window_kind k);
lx_instr *lx_instr_append(lx_instr_list *list, lx_instr instr);
void lx_pipeline_free(lx_pipeline *p);
/* Bound on the micro-batch numbers of p's instructions: one step's, 2BW's
 * ahead ones, and those of the steps it is unrolled over. */
int lx_micro_batch_ids(const lx_pipeline *p);
/* The receiver's chunk of what SEND `send` of stage `sender` carries: the
 * same chunk, except around the ring of interleaved 1F1B (the last stage's
 * activations of chunk v feed the first stage's chunk v + 1, and the first
 * stage's input gradients of chunk v go back to the last stage's v - 1). */
int lx_peer_chunk(const lx_pipeline *p, int sender, const lx_instr *send);
/* Whether `recv` on send->peer is the receive of that send: one message. */
bool lx_transfer_matches(const lx_pipeline *p, int sender, const lx_instr *send, const lx_instr *recv);
/* The channel a transfer travels on, one NCCL communicator of two ranks in
 * the CUDA programs (lx_cuda_parallel.h): one per direction of each link
 * between neighbouring stages (around the ring under interleaved 1F1B) and
 * per kind of message. NCCL runs the operations of one communicator in the
 * order the host issued them, whatever their streams: a communicator shared
 * by two streams would order them as the schedule does not (1F1B posts its
 * gradient receives before its activation sends, and over one communicator
 * for the whole pipeline the stages deadlock). The verifier checks that a
 * stage's transfers over one channel are all on one stream, whose order is
 * then NCCL's. */
typedef enum {
  LX_CHANNEL_ACT_TO_NEXT,
  LX_CHANNEL_ACT_FROM_PREVIOUS,
  LX_CHANNEL_GRAD_TO_PREVIOUS,
  LX_CHANNEL_GRAD_FROM_NEXT,
  LX_CHANNEL_COUNT
} lx_channel;
/* The channel of a SEND_ACT, RECV_ACT, SEND_GRAD or RECV_GRAD; LX_CHANNEL_COUNT for any other kind. */
lx_channel lx_transfer_channel(lx_instr_kind kind);
/* Its name in the CUDA programs: "ACT_TO_NEXT", ... */
const char *lx_channel_name(lx_channel channel);
/* The stage at the other end of stage `stage`'s `channel`, around the ring. */
int lx_channel_peer(const lx_pipeline *p, int stage, lx_channel channel);
/* The instruction lists of `steps` consecutive steps of p, one after the
 * other on every stream, as a pipeline of their own: step k runs its fill
 * where fill[k] and its ahead forwards where ahead[k] (2BW); its
 * micro-batches are numbered from k * micro_batches, its events from
 * k * n_events. The stages' other fields are p's, borrowed: free it with
 * lx_unrolled_free. The simulator and the verifier see 2BW's steps so. */
void lx_unroll_steps(const lx_pipeline *p, int steps, const bool *fill, const bool *ahead, lx_pipeline *out);
void lx_unrolled_free(lx_pipeline *p);
/* The stage's chunk an instruction works on: its layer's, the prologue's
 * (the first), the epilogue's (the last), a transfer's own; else 0. */
int lx_instr_chunk(const lx_stage *st, const lx_instr *in);
/* Where block layer `layer` is among the stage's layers, chunk after chunk
 * (its parameter and stash block), or -1 where the stage does not hold it. */
int lx_layer_slot(const lx_stage *st, int layer);
/* The window in which piece `piece` of op `op` of layer instance `inst`
 * (lx_layer_slot(layer) * micro_batches + mb) of stage st recomputes, or -1
 * (on demand, or no windows); lx_recompute_window: its first piece's. */
int lx_piece_window(const lx_pipeline *p, const lx_stage *st, int inst, int op, int piece);
int lx_recompute_window(const lx_pipeline *p, const lx_stage *st, int inst, int op);
/* How many entries st's window_of holds: per layer instance, one per piece of each block op. */
size_t lx_placement_size(const lx_pipeline *p, const lx_stage *st);
/* A layer instance's placement entries, one per piece of each block op, are
 * at most LX_MAX_PLACED. The windows instance inst's in-window pieces run
 * in, in order, each once; returns how many. */
enum { LX_MAX_PLACED = 256 };
int lx_instance_windows(const lx_pipeline *p, const lx_stage *st, int inst, int *windows);
/* Per window of st, how many layer instances recompute in it, whole or in
 * part (NULL without windows; the caller frees it). */
int *lx_instances_per_window(const lx_pipeline *p, const lx_stage *st);
/* Whether instance inst's in-window ops do not all share one place: they run
 * in several windows, or partly on demand. */
bool lx_instance_split(const lx_pipeline *p, const lx_stage *st, int inst);
/* The part of its op's forward a compute instruction of stage st runs: 1,
 * for the RECOMPUTE of a token-split op the part of the rows it recomputes,
 * for one of a head-split op the part of its heads. */
double lx_instr_fraction(const lx_stage *st, const lx_instr *in);
/* How many host slots a stage's offloaded tensors take (micro-batch mb in slot
 * mb % this): its stash slots, or under interleaved 1F1B, whose chunks count
 * slots of their own, one per micro-batch. */
int lx_host_slots(const lx_pipeline *p, const lx_stage *st, int stash_slots);
/* The stage's layer at that position. */
int lx_slot_layer(const lx_stage *st, int slot);
/* The stage's chunk that holds `layer`, or -1. */
int lx_chunk_of(const lx_stage *st, int layer);
int lx_chunk_last_layer(const lx_chunk *c);
/* "0-3" for a stage of one chunk, "0-1, 4-5" for two: its layers as text
 * (LX_RANGES_TEXT bytes hold any). */
enum { LX_RANGES_TEXT = 8 * 24 };
void lx_chunk_ranges(const lx_stage *st, char *buf, size_t size);
/* A stage's graph instances in forward order, chunk by chunk: the prologue
 * leads into chunk 0, the last chunk into the epilogue. The instance after
 * (graph, layer) in its chunk; false where the chunk ends (the stage sends). */
bool lx_next_instance(const lx_stage *st, lx_graph_id graph, int layer, lx_graph_id *next_graph,
                      int *next_layer);
/* Where a chunk begins and ends: the pipeline enters and leaves the stage there. */
bool lx_is_chunk_entry(const lx_stage *st, lx_graph_id graph, int layer);
bool lx_is_chunk_exit(const lx_stage *st, lx_graph_id graph, int layer);
const lx_graph *lx_graph_of(const lx_ir *ir, lx_graph_id id);
/* "FWD block.linear_2 L3 mb5", for traces, plans and diagnostics. */
void lx_instr_describe(const lx_ir *ir, const lx_instr *in, char *buf, size_t size);

#endif
