/* layout.h — the static memory plan: where every tensor of a stage lives.
 *
 * One arena per stage, laid out in regions:
 *   params, grads, adam_m, adam_v (and master when weights are 16-bit):
 *       the stage's parameters, same element layout in each region;
 *   stash: `slots` copies of everything one micro-batch keeps from its
 *       forward to its backward (micro-batch mb uses slot mb % slots; the
 *       schedule never has more in flight than there are slots); under
 *       zero bubble two more pools of slots follow, for what W passes read
 *       after the backward: the held pool (the deferred linears' inputs,
 *       from the forward to the W pass) and the weight-gradient pool (their
 *       output gradients, from the backward to the W pass), each with as
 *       many slots as micro-batches live there at once;
 *   work: what lives only inside one F(mb) or B(mb) — op outputs nobody
 *       keeps, recomputed tensors, activation gradients. Forward outputs and
 *       backward buffers never live at once, so they share the region.
 *       At its end, two window buffers (by layer parity) for what in-window
 *       recompute regenerates: it lives from its window to the layer's
 *       backward, across other instructions (windows.c says which windows
 *       may use a buffer without overwriting what another layer still needs);
 *   boundary: the gradients that cross layer boundaries (two, used
 *       alternately), and per slot the pipeline's outgoing activations,
 *       outgoing input gradients and incoming output gradients;
 *   host: not in the arena but in pinned host memory (the host arena), what
 *       offloaded ops save, per slot and layer (offsets past the arena's
 *       end, so that the verifier sees one address space).
 * The emitted programs take every offset from here; the verifier proves that
 * no region is reused while a reader may still need it. */
#ifndef LX_LAYOUT_H
#define LX_LAYOUT_H

#include "schedule.h"

typedef enum {
  LX_REGION_PARAMS,
  LX_REGION_PREVIOUS, /* PipeDream-2BW: the weights before the last update, which the step computes with */
  LX_REGION_MASTER,   /* fp32 master weights; empty when weights are fp32 */
  LX_REGION_GRADS,
  LX_REGION_ADAM_M,
  LX_REGION_ADAM_V,
  LX_REGION_STASH,
  LX_REGION_WORK,
  LX_REGION_BOUNDARY,
  LX_REGION_HOST, /* the host arena: offloaded tensors */
  LX_REGION_COUNT
} lx_region;

/* What a tensor is, for locating it. */
typedef enum {
  LX_T_OUTPUT,     /* the op's output activation */
  LX_T_INTERNAL,   /* the op's saved buffer number `index` (mask, softmax, lse) */
  LX_T_GRAD,       /* the gradient of the op's output */
  LX_T_PARAM,      /* parameter tensor `index` of the op (0 weight, 1 bias or beta) */
  LX_T_SEND_ACT,   /* the stage's outgoing activation of a micro-batch */
  LX_T_SEND_GRAD,  /* the stage's outgoing input gradient of a micro-batch */
  LX_T_RECV_GRAD,  /* the incoming gradient of the stage's output */
  LX_T_RECOMPUTED, /* where a RECOMPUTE writes the op's output: a scratch copy when the output is kept */
  /* Sequence parallelism: the whole tensors an op reads or makes around its
   * tensor-parallel collectives, from or into sequence shards. */
  LX_T_SP_GATHERED, /* index 0: the op's whole input; 1: its output's whole gradient (all-gathered) */
  LX_T_SP_WHOLE,    /* index 0: the op's whole partial output; 1: its input's whole partial gradient
                       (reduce-scattered) */
  LX_T_HOST         /* an offloaded op's host copy: index 0 its saved output, k + 1 its internal k */
} lx_tensor_role;

typedef struct {
  lx_graph_id graph;
  int layer; /* block layer, -1 for prologue/epilogue */
  int op;
  int mb;
  lx_tensor_role role;
  int index;
} lx_tensor_ref;

typedef struct {
  lx_region region;
  int64_t offset; /* bytes from the arena's start */
  int64_t bytes;
} lx_span;

/* Where op `op` of a graph puts its output and internals within one slot or
 * the work region, and its parameters within one layer's parameter block. */
typedef struct {
  int64_t item_offset;                   /* output kept in the stash slot; -1 if not kept */
  bool item_held;                        /* that offset is in the held pool: a W pass reads it */
  int64_t internal_offset[LX_MAX_SAVED]; /* in the slot, or in work when dropped */
  bool internals_in_work;                /* dropped: regenerated into work by recompute */
  int64_t output_work_offset;            /* output in work (transient or recomputed); -1 if none */
  bool output_recomputed;                /* that offset is in the recompute part of work */
  int64_t scratch_offset; /* recompute part of work: a recomputed op's output that is also kept; -1 if none */
  bool in_window;         /* the op's work-placed tensors (dropped output and internals, scratch) are in
                             the window buffer of the layer's parity, not the recompute part */
  bool offloaded;         /* what it saves is in the window buffer (in_window) and has host copies */
  int64_t host_offset[1 + LX_MAX_SAVED]; /* within a layer's part of a host slot: output, internals */
  int64_t grad_offset;    /* gradient of the output in work; -1 for inputs and int tensors */
  bool grad_in_pool;      /* that offset is in the weight-gradient pool: the op's W pass reads it */
  /* element offset of each parameter (ir.h LX_PARAM_*) in the layer's block of the
   * trained or the frozen ones (lx_param_trained); -1 if none */
  int64_t param_offset[LX_MAX_OP_PARAMS];
  int64_t param_elements[LX_MAX_OP_PARAMS];
} lx_op_place;

/* Parameter gradients reduced across the dp replicas at once: those of one
 * graph instance, with the tied embedding table (or the last stage's copy of
 * it) a bucket of its own, so both copies are sharded alike. Buckets tile
 * the params region. Under ZeRO-1 replica r owns elements
 * [first + r * elements / dp, first + (r + 1) * elements / dp) of each; its
 * AdamW state (and fp32 master) for them starts at shard_first. */
typedef struct {
  lx_graph_id graph;
  int layer; /* block layer, -1 for prologue/epilogue */
  bool tied;
  int64_t first, elements; /* in the params region; a multiple of dp under ZeRO-1 */
  int64_t shard_first;     /* ZeRO-1: in the optimizer regions; else == first */
} lx_param_bucket;

/* The stash region's pools of slots (see above). */
typedef enum { LX_POOL_STASH, LX_POOL_HELD, LX_POOL_WEIGHT_GRAD, LX_POOL_COUNT } lx_slot_pool;

typedef struct {
  int64_t activation_elt, param_elt; /* bytes per element */
  int64_t region_offset[LX_REGION_COUNT], region_bytes[LX_REGION_COUNT];
  int64_t total; /* the arena's bytes: every region but the host's */
  int slots;
  int64_t slot_bytes;
  int64_t graph_slot_offset[LX_GRAPH_COUNT];  /* within a slot; the block's layer 0 */
  int64_t layer_slot_bytes;                   /* slot bytes of one block layer */
  /* the held and weight-gradient pools (block layers only; pool_slots 0 when
   * unused), after the stash slots in the stash region */
  int pool_slots[LX_POOL_COUNT];
  int64_t pool_offset[LX_POOL_COUNT], pool_slot_bytes[LX_POOL_COUNT], pool_layer_bytes[LX_POOL_COUNT];
  int64_t graph_param_offset[LX_GRAPH_COUNT]; /* elements; the block's layer 0 */
  int64_t layer_param_elements;
  int64_t param_elements; /* all trained ones of the stage; the frozen ones follow */
  /* fine-tuning's frozen parameters: the params region's elements from frozen_first on,
   * laid out like the trained ones, without gradients, optimizer state or a 2BW copy */
  int64_t frozen_first, frozen_elements, layer_frozen_elements;
  int64_t graph_frozen_offset[LX_GRAPH_COUNT]; /* from frozen_first; the block's layer 0 */
  int64_t optimizer_elements; /* in adam_m, adam_v and master: all, or one replica's ZeRO-1 shards */
  int shards;                 /* ZeRO-1: dp, else 1 */
  lx_param_bucket *buckets;   /* in order of the params region */
  int n_buckets;
  lx_op_place *places[LX_GRAPH_COUNT]; /* per op of each graph */
  int64_t forward_work_bytes, backward_work_bytes;
  int64_t
      recompute_work_bytes;   /* work starts with the recomputed tensors, then forward outputs or gradients */
  int64_t window_work_offset; /* then the window buffers: layer l's at this + (l % 2) * window_buffer_bytes */
  int64_t window_buffer_bytes;
  /* in work: the gathered and the whole buffers of sequence parallelism, and
   * where a stage's block runs in mini-sequences a third, for a gathered
   * output gradient (a run's pieces read it beside a gathered input) */
  int64_t sp_buffer_offset[3];
  int64_t sp_buffer_bytes;         /* 0 without sequence parallelism */
  bool sp_grad_buffer;             /* the third is there */
  int64_t boundary_grad_offset[2]; /* in the boundary region */
  /* Interleaved 1F1B: each chunk's stash slots (chunk_slots of them) hold
   * its layers (and the prologue's or epilogue's part where the chunk has
   * it), one chunk's pool after the other; in the stash region. */
  int chunk_slots[LX_MAX_VIRTUAL_STAGES];
  int64_t chunk_pool_offset[LX_MAX_VIRTUAL_STAGES], chunk_slot_bytes[LX_MAX_VIRTUAL_STAGES];
  int64_t chunk_layer_base[LX_MAX_VIRTUAL_STAGES]; /* its first layer's part of its slot 0 */
  /* the host arena (LX_REGION_HOST): host_slots slots of the stage's layers, each layer's
   * offloaded tensors host_layer_bytes; micro-batch mb in slot mb % host_slots */
  int host_slots;
  int64_t host_layer_bytes, host_slot_bytes;
  int64_t send_offset;             /* in the boundary region: the per-slot buffers, chunk after chunk */
  int64_t chunk_send_bytes;        /* one chunk's per-slot buffers */
  int64_t boundary_bytes;          /* one boundary tensor */
} lx_stage_layout;

/* Lays out stage `s` of the pipeline; `param_elt` is the bytes of a weight
 * element on the target; `master_copy` adds fp32 master weights (16-bit
 * training on a GPU). */
void lx_layout_stage(const lx_pipeline *p, int s, int param_elt, bool master_copy, lx_stage_layout *out);
void lx_layout_free(lx_stage_layout *l);
/* The bucket an ALLREDUCE_DP names; NULL if the stage has none such. */
const lx_param_bucket *lx_find_bucket(const lx_stage_layout *l, lx_graph_id graph, int layer, bool tied);
lx_span lx_locate(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_ref t);

/* A location as an affine expression of the instruction's micro-batch and
 * layer (see layout.c), for the printers (emit_names.c): the emitted code
 * computes every offset with the same arithmetic lx_locate does. */
typedef struct {
  lx_region region;
  int64_t constant, per_slot, per_layer, parity_stride;
  int parity_add;
  int64_t per_chunk; /* interleaved 1F1B: per chunk of the stage (its pipeline buffers) */
  bool chunk_stash;  /* interleaved 1F1B, a block layer's stash: + its chunk's layer base, + (mb % its slots)
                        x its slot bytes, + (layer - its first layer) x per_layer (slot and layer terms unused)
                      */
  int wrap;          /* with per_slot: the slot count, where it is not the pool's (a chunk's) */
  lx_slot_pool pool; /* with per_slot: whose slot count the micro-batch wraps at */
  bool frozen;       /* a frozen weight (fine-tuning): per_layer is a frozen block's */
  bool versioned;    /* a weight under 2BW: in the version the micro-batch computes with (constant is
                        relative to the params region, which holds the live one) */
  int64_t bytes;
} lx_place_expr;

lx_place_expr lx_place_of(const lx_pipeline *p, int s, const lx_stage_layout *l, lx_tensor_ref t);
const char *lx_region_name(lx_region r);
/* The slot count a place's micro-batch term wraps at. */
int lx_place_slots(const lx_stage_layout *l, const lx_place_expr *e);
/* The most slots of any pool: micro-batches 0 .. this - 1 reach every slot. */
int lx_most_slots(const lx_stage_layout *l);
/* How many bytes of each region the stage's tensors reach (the end of the
 * last buffer, without alignment padding): what a run must write, no more. */
void lx_layout_extents(const lx_pipeline *p, int s, const lx_stage_layout *l,
                       int64_t extents[LX_REGION_COUNT]);

#endif
