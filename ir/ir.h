/* ir.h — the intermediate representation every lynxgen pass shares.
 *
 * Read this first. The front end (gen/frontend/frontend.c) fills the configs and the
 * three op graphs from a model file; the analysis pass (gen/analysis/analyze.c) infers
 * shapes and annotates every op with its FLOPs, bytes and parameters for the
 * plan's micro-batch, sequence length, tensor-parallel degree and dtype.
 * Later passes add their own annotations; none of them edits the graphs. */
#ifndef LX_IR_H
#define LX_IR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* A second place a diagnostic points at, printed after it as
 * "file:line:col: note: text": the macro definition or the included file
 * behind a location in the model file. */
typedef struct lx_srcnote {
  char *file, *text;
  int line, col;
  const struct lx_srcnote *next; /* the next note of the same location */
  struct lx_srcnote *owned_next; /* every note of an lx_ir, freed with it */
} lx_srcnote;

/* Where a thing came from in the model file, for diagnostics and for the
 * comments of emitted code. A thing written in an included file or by a macro
 * is located where the model file includes or expands it, and its notes say
 * where it was written. */
typedef struct {
  const char *file;        /* as the user named it; owned by lx_ir */
  int line, col;           /* 1-based; line 0 means "no location" */
  const lx_srcnote *notes; /* NULL, or the notes printed after a diagnostic here */
} lx_srcloc;

/* Values mirror enum lx_gpu, lx_link, ... of the prelude ir/lynx.h. */
typedef enum {
  LX_GPU_NONE,
  LX_GPU_V100_32GB,
  LX_GPU_A100_40GB,
  LX_GPU_A100_80GB,
  LX_GPU_H100_80GB,
  LX_GPU_H200_141GB,
  LX_GPU_GH200_96GB
} lx_gpu;
typedef enum {
  LX_LINK_NONE,
  LX_LINK_NVLINK2,
  LX_LINK_NVLINK3,
  LX_LINK_NVLINK4,
  LX_LINK_PCIE4,
  LX_LINK_PCIE5,
  LX_LINK_IB_HDR,
  LX_LINK_IB_NDR
} lx_link;
typedef enum {
  LX_SCHEDULE_OPEN,
  LX_SCHEDULE_GPIPE,
  LX_SCHEDULE_1F1B,
  LX_SCHEDULE_2BW,
  LX_SCHEDULE_INTERLEAVED,
  LX_SCHEDULE_ZB_H1, /* zero bubble (Qi et al. 2024): 1F1B with weight gradients deferred into the drain */
  LX_SCHEDULE_COUNT
} lx_schedule;
typedef enum { LX_DTYPE_NONE, LX_DTYPE_BF16, LX_DTYPE_FP16, LX_DTYPE_FP32, LX_DTYPE_INT32 } lx_dtype;
typedef enum { LX_LR_NONE, LX_LR_CONSTANT, LX_LR_COSINE, LX_LR_LINEAR } lx_lr_schedule;

typedef struct {
  int vocab, seq_len, layers, hidden, heads, kv_heads, ffn_hidden;
  double dropout;
  bool tied_embeddings;
  double rope_theta; /* rope()'s frequencies are rope_theta^(-2i/d) */
} lx_model_config;

typedef struct {
  lx_gpu gpu;
  int nodes, gpus_per_node;
  lx_link intra_node_link, inter_node_link;
} lx_cluster;

/* LX_OPEN in an integer field: left for the planner. Analysis resolves an
 * open tp, pp, dp or micro_batch to 1 and records that it was open
 * (lx_ir.open_plan), so every later pass reads a complete plan; the plan
 * search then sets the open fields and the IR is analysed again. */
enum { LX_OPEN = 0 };

/* Interleaved 1F1B: the most model chunks a stage may hold. */
enum { LX_MAX_VIRTUAL_STAGES = 8 };

typedef struct {
  bool tp, pp, dp, micro_batch;
  bool schedule; /* the plan search weighs 1F1B and ZB-H1 */
  bool mini_sequences; /* the plan search weighs the LM head, its loss and the MLPs whole and in pieces */
} lx_open_plan;

typedef struct {
  int tp, pp, dp, micro_batch, global_batch; /* global_batch 0: not given */
  lx_schedule schedule;
  int virtual_stages; /* model chunks per stage: 1, or V >= 2 under interleaved 1F1B */
  bool sequence_parallel;
  bool zero; /* ZeRO-1: AdamW state (and fp32 masters) sharded over the dp replicas */
  /* MsT (Luo et al. 2024): the LM head with its loss, and the MLPs, run over the micro-batch's rows
   * in this many consecutive pieces (analysis/mini_sequences.c), so that the logits and the MLP
   * hidden never exist whole; 1 runs them whole */
  int mini_sequences;
} lx_plan;

typedef struct {
  int steps, warmup_steps, seed, val_interval, checkpoint_interval;
  double lr, min_lr, beta1, beta2, eps, weight_decay, grad_clip;
  lx_lr_schedule lr_schedule;
  lx_dtype dtype;
  char *train_data, *val_data; /* NULL when not given */
  /* Fine-tuning (a model with lora() adapters): LoRA-FA (Zhang et al. 2023) freezes the
   * adapters' projection down A too and trains B alone, keeping A x for the backward instead of x */
  bool lora_fa;
  double lora_dropout; /* LoRA's dropout of the adapters' input (the base linear sees x whole) */
} lx_training;

typedef enum {
  LX_OP_INPUT, /* a graph parameter: tokens, targets, or the block's x */
  LX_OP_EMBEDDING,
  LX_OP_POSITION_EMBEDDING,
  LX_OP_LAYERNORM,
  LX_OP_RMSNORM,
  LX_OP_LINEAR,
  LX_OP_ATTENTION,
  LX_OP_ROPE,
  LX_OP_GELU,
  LX_OP_SWIGLU,
  LX_OP_DROPOUT,
  LX_OP_ADD,
  LX_OP_LM_HEAD,
  LX_OP_CROSS_ENTROPY,
  LX_OP_SILU,
  LX_OP_KIND_COUNT
} lx_op_kind;

/* Attention has two implementations with different saved memory; the model
 * file picks one by calling attention() or flash_attention(). */
typedef enum { LX_ATTN_MATERIALIZED, LX_ATTN_FLASH } lx_attention_impl;

/* How tensor parallelism splits an op (Megatron-LM): a linear whose input is
 * replicated is column-parallel (its output is split over tp ranks); one whose
 * input is split is row-parallel (its output needs an all-reduce). The
 * embedding is vocab-parallel: each rank looks up its rows, then all-reduce. */
typedef enum { LX_TP_REPLICATED, LX_TP_COLUMN, LX_TP_ROW, LX_TP_SPLIT_ELEMENTWISE, LX_TP_VOCAB } lx_tp_role;

/* A tensor's shape is (micro_batch, seq_len, width); only width varies. */
typedef struct {
  int width;   /* full width, before any tensor-parallel split */
  bool split;  /* width is divided over the tp ranks */
  bool scalar; /* the loss: one number */
  bool vocab;  /* width is the vocabulary: ranks hold padded_vocab / tp columns */
  lx_dtype dtype;
} lx_shape;

/* What an op keeps alive from its forward to its backward. An op may save
 * one of its inputs, its output, or buffers of its own (dropout masks,
 * softmax probabilities, log-sum-exp). A tensor saved by several ops is held
 * once; it is charged to the first op that saves it. */
typedef enum { LX_SAVE_INPUT, LX_SAVE_OUTPUT, LX_SAVE_INTERNAL } lx_save_kind;

typedef struct {
  lx_save_kind kind;
  int input;        /* LX_SAVE_INPUT: argument index */
  const char *what; /* "input", "output", "softmax", "lse" */
  int64_t bytes;    /* per tp rank */
} lx_saved;

enum { LX_MAX_OP_INPUTS = 2, LX_MAX_SAVED = 4 };

/* An op's parameter tensors: 0 weight (or a norm's scale), 1 bias (or shift),
 * 2 and 3 a LoRA adapter's A (projection down) and B (up). */
enum { LX_PARAM_WEIGHT, LX_PARAM_BIAS, LX_PARAM_LORA_A, LX_PARAM_LORA_B, LX_MAX_OP_PARAMS };

/* The recompute planner holds a set of block ops in one 64-bit mask. */
enum { LX_MAX_BLOCK_OPS = 64 };

typedef struct {
  lx_op_kind kind;
  char name[32];                /* unique in its graph: kind and ordinal, e.g. "linear_2" */
  char var[32];                 /* the model-file variable it was assigned to, or "" */
  lx_srcloc src;                /* the call in the model file */
  int inputs[LX_MAX_OP_INPUTS]; /* indices of producing ops in the same graph */
  int n_inputs;
  int param; /* LX_OP_INPUT: which parameter of the function */
  /* integer arguments as written (after constant folding) */
  int out_width;       /* linear: out features; embedding: width; lm_head: vocab */
  int table_rows;      /* embedding: vocab */
  int heads, kv_heads; /* attention, rope */
  lx_attention_impl attention_impl;
  bool has_bias;
  /* linear under lora(linear(...), rank, alpha) (LoRA, Hu et al. 2021): y = x W^T + b + alpha / rank
   * x A^T B^T with adapters A (rank x in) and B (out x rank); lora_rank 0 without */
  int lora_rank, lora_alpha;
  /* --- filled by the analysis pass, per tp rank, for one micro-batch --- */
  lx_shape out;
  int chunks; /* mini-sequences the op runs in (lx_plan.mini_sequences), 1 when whole */
  lx_tp_role tp_role;
  double flops_fwd, flops_bwd; /* floating-point operations */
  bool is_matmul;              /* counted by the model-FLOPs formula (Narayanan et al.) */
  double model_flops_fwd;      /* matmul FLOPs of the whole op (all ranks, unpadded) */
  int64_t out_bytes;
  lx_saved saved[LX_MAX_SAVED];
  int n_saved;
  int64_t saved_bytes; /* bytes charged to this op (see lx_saved) */
  int64_t params;      /* whole model, all ranks, frozen ones included */
  int64_t params_per_rank; /* trained: they have gradients and optimizer state */
  int64_t frozen_per_rank; /* fine-tuning: the base weights, read and never changed */
  bool needs_tp_allreduce; /* row-parallel output: all-reduce over tp */
} lx_op;

typedef struct {
  const char *name; /* "prologue", "block", "epilogue" */
  lx_srcloc src;    /* the function definition */
  lx_op *ops;       /* in program order; inputs first */
  int n_ops, cap_ops;
  int output; /* index of the returned op */
  lx_srcloc returned_at; /* its return statement */
  /* filled by the analysis pass */
  int64_t activation_bytes; /* sum of saved bytes, one micro-batch, per tp rank */
  int64_t params, params_per_rank, frozen_per_rank;
  double flops_fwd, flops_bwd, model_flops_fwd;
} lx_graph;

/* Configuration fields, for locating diagnostics (lx_config_locs.field). */
typedef enum {
  LX_F_VOCAB,
  LX_F_SEQ_LEN,
  LX_F_LAYERS,
  LX_F_HIDDEN,
  LX_F_HEADS,
  LX_F_KV_HEADS,
  LX_F_FFN_HIDDEN,
  LX_F_DROPOUT,
  LX_F_ROPE_THETA,
  LX_F_TIED,
  LX_F_GPU,
  LX_F_NODES,
  LX_F_GPUS_PER_NODE,
  LX_F_INTRA_LINK,
  LX_F_INTER_LINK,
  LX_F_TP,
  LX_F_PP,
  LX_F_DP,
  LX_F_MICRO_BATCH,
  LX_F_GLOBAL_BATCH,
  LX_F_SCHEDULE,
  LX_F_VIRTUAL_STAGES,
  LX_F_SEQ_PARALLEL,
  LX_F_ZERO,
  LX_F_MINI_SEQUENCES,
  LX_F_STEPS,
  LX_F_LR,
  LX_F_MIN_LR,
  LX_F_WARMUP,
  LX_F_LR_SCHEDULE,
  LX_F_BETA1,
  LX_F_BETA2,
  LX_F_EPS,
  LX_F_WEIGHT_DECAY,
  LX_F_GRAD_CLIP,
  LX_F_SEED,
  LX_F_DTYPE,
  LX_F_TRAIN_DATA,
  LX_F_VAL_DATA,
  LX_F_VAL_INTERVAL,
  LX_F_CHECKPOINT_INTERVAL,
  LX_F_LORA_FA,
  LX_F_LORA_DROPOUT,
  LX_F_COUNT
} lx_field;

/* Where each config field was written, for diagnostics about its value. */
typedef struct {
  lx_srcloc model, cluster, plan, training; /* the initializers */
  lx_srcloc field[LX_F_COUNT];              /* 0-line where not written */
} lx_config_locs;

typedef struct {
  char *model_path;
  lx_model_config model;
  lx_cluster cluster;
  lx_plan plan;
  lx_training training;
  lx_graph prologue, block, epilogue;
  lx_config_locs locs;
  lx_srcnote *notes; /* the notes of all locations above, owned */
  /* filled by the analysis pass */
  lx_open_plan open_plan;          /* fields the plan analysed left open (now 1) */
  int64_t params_total;            /* whole model */
  bool finetune;                   /* a lora() adapter: only the adapters train, the rest is frozen */
  int padded_vocab;                /* vocab rounded up to 128 * tp (Megatron-LM) */
  double model_flops_per_sequence; /* forward + backward matmul FLOPs, no recompute */
} lx_ir;

/* ---- ir.c ---------------------------------------------------------------- */
void lx_ir_init(lx_ir *ir);
void lx_ir_free(lx_ir *ir);
/* A copy of `src` to analyse again under another plan (the plan search's
 * candidates): its own op arrays; paths, strings and source locations
 * borrowed from `src`, which must outlive it. */
void lx_ir_working_copy(lx_ir *copy, const lx_ir *src);
void lx_ir_free_working_copy(lx_ir *copy);
lx_op *lx_graph_add(lx_graph *g, lx_op_kind kind);
const char *lx_op_kind_name(lx_op_kind kind);
const char *lx_gpu_name(lx_gpu gpu);
const char *lx_link_name(lx_link link);
const char *lx_schedule_name(lx_schedule schedule);
const char *lx_dtype_name(lx_dtype dtype);
const char *lx_lr_schedule_name(lx_lr_schedule s);
const char *lx_tp_role_name(lx_tp_role role);
int lx_dtype_bytes(lx_dtype dtype);
/* The file name of a path: what generated files cite, so that they are the
 * same from any working directory. */
const char *lx_file_name(const char *path);
/* Where field f was written (in the model file or on the command line), or `fallback`. */
lx_srcloc lx_field_loc(const lx_ir *ir, lx_field f, lx_srcloc fallback);
/* Where an error about fields that do not go together belongs: at the first of
 * them given on the command line (a place with no line), which is what the user
 * just changed; else `fallback`, in the model file. LX_F_COUNT ends the list. */
lx_srcloc lx_relation_loc(const lx_ir *ir, lx_srcloc fallback, const lx_field *fields);
/* Width of a tensor on one tensor-parallel rank (1 for the scalar loss). */
int64_t lx_rank_width(const lx_ir *ir, lx_shape s);
/* The op whose backward is the last to need the output of op `producer`
 * (the earliest op in forward order that saves it), or -1 if none saves it. */
int lx_last_saver(const lx_graph *g, int producer);
/* Whether op c saves the output of op `producer` (as its input or output) for its backward. */
bool lx_op_saves(const lx_graph *g, int c, int producer);
/* Whether parameter k of op is trained (has a gradient and optimizer state):
 * all are, but in fine-tuning, where only the adapters LoRA-FA leaves are. */
bool lx_param_trained(const lx_ir *ir, const lx_op *op, int k);
/* "weight", "bias", "lora_a", "lora_b": parameter k's name (LX_PARAM_*). */
const char *lx_param_name(int k);
/* Whether the backward of a matmul (linear, lm_head, embedding) reads its
 * input: for its weight's gradient (not in fine-tuning, where the weights are
 * frozen), for LoRA's dA (not LoRA-FA's), or to make its output again in
 * mini-sequences. Analysis keeps the input exactly then, and under sequence
 * parallelism a column-parallel op gathers it before its backward only then. */
bool lx_matmul_reads_input(const lx_ir *ir, const lx_op *op);
/* The scale alpha / rank of a LoRA adapter. */
double lx_lora_scale(const lx_op *op);
/* How many input slots of g's ops read op i's output (add(x, x) reads it twice). */
int lx_uses(const lx_graph *g, int i);
/* Whether op i's output exists one mini-sequence at a time: the op and every
 * op that reads it run in chunks, so the output is never whole. */
bool lx_chunk_local(const lx_graph *g, int i);
/* The bytes of op i's output that exist at once: one chunk's where it is
 * chunk-local, else the whole tensor's. The same for its gradient. */
int64_t lx_resident_bytes(const lx_graph *g, int i);
/* The chunk-local tensors (by producing op, in forward order) that the
 * backward of chunked op i makes again, piece by piece, before it runs: those
 * it reads and what they are made from, less those the backwards before it
 * in the same pieces (of the later ops of its run of chunked ops) made.
 * Returns their number; `out` holds g->n_ops. */
int lx_made_again(const lx_graph *g, int i, int *out);
/* Structural checks of an analysed IR (a generator bug if any fails):
 * inputs precede their users, shapes are set, totals add up. Returns the
 * number of problems, each printed to stderr. */
int lx_ir_validate(const lx_ir *ir);

/* ---- ir_json.c ----------------------------------------------------------- */
void lx_ir_print_json(const lx_ir *ir, FILE *out);

#endif
