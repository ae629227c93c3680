/* overlap.h — overlapped recomputation: windows, the policies that use them,
 * recompute-aware partitioning.
 *
 * The model, per stage. Every layer instance (layer l, micro-batch m) needs
 * what its ops saved when its backward B(l, m) starts. For each block op a
 * policy picks one of: keep (memory held from F(l, m) to B(l, m) in a stash
 * slot), recompute on demand (on the compute stream just before B(l, m): on
 * the critical path), or recompute in a window (on the recompute stream,
 * while the compute stream idles on communication; the tensors then wait in
 * one of two window buffers, chosen by layer parity, until B(l, m)).
 * A recompute of op i drops everything i saves: once the op runs again,
 * keeping part of what it makes saves nothing and costs memory.
 *
 * An op that is not recomputed may instead be offloaded: what it saves is
 * written into the window buffer, copied to pinned host memory after its
 * forward and back before its backward (PCIe or C2C, both ways at once), and
 * costs the compute stream only where a layer's copies outlast the layer.
 * And one op recomputed on demand may be split token-wise (MEMO): its first
 * k of P row pieces are offloaded, the others recomputed, so that the copies
 * fill what the layer hides and the recompute shrinks by k / P (one split op
 * is enough: splitting frees no more device memory than dropping, so the
 * copy time is the one budget it trades against, and the best use of one
 * budget splits one item at most, as in a fractional knapsack):
 *
 *   exposed time  = N x (r(on demand) + r(window) - k / P r(split)) - served
 *                   + N x max(0, c - f) + sum over instances of max(0, c - room)
 *   memory        = stashed x layers x kept + buffers x (window + offloaded bytes + split bytes)
 *   host memory   = stashed x layers x (offloaded bytes + k / P split bytes)
 * where N = layers x micro-batches, r(.) sums the ops' forward times, c is
 * the time to copy one layer's offloaded bytes (the split op's k / P of
 * them included) one way, f a layer's forward (the copies of a layer
 * overlap the next one's), room the compute an instance's prefetch overlaps
 * (from the start of its admissible range to its backward: about a layer's
 * backward, nothing for the first backward after a forward of the same
 * layer, as at the top of a 1F1B stage; a layer's backward b where the
 * bounds are not known), and
 * `served` is the in-window seconds the windows take. Placement is per op:
 * an instance's window ops, in op order, may spread over consecutive windows
 * of its admissible range [lo, due) (a short tensor-parallel all-reduce takes
 * a norm, a longer wait the attention after it), and whatever no window took
 * runs on demand before the backward (lx_assign_windows, an
 * earliest-deadline-first matching; the recompute stream runs in order, so
 * an op's recomputed inputs, placed in the same or an earlier window, are
 * always ready before it). A materialised attention longer than the typical
 * window is placed in pieces of its kv heads instead (pieces, below), one
 * after another like ops of their own. */
#ifndef LX_OVERLAP_H
#define LX_OVERLAP_H

#include "analysis/cost.h"
#include "planning/memplan.h"
#include "schedule.h"
#include "planning/simulate.h"

typedef uint64_t lx_opmask; /* a set of block ops; blocks have fewer than 64 */

/* Head-split recompute (lx_head_pieces_max): at most LX_MAX_PIECES pieces
 * of an op, LX_MAX_PLACED placement entries per layer instance (schedule.h). */
enum { LX_MAX_PIECES = 16 };

/* The simplex iterations one MILP (checkmate's, lynx-opt's) may take before
 * its best incumbent stands: a bound on work rather than time, so that a
 * plan never depends on the machine's speed or load (the largest stage
 * problems of make bench-lynx run 4,000-12,000 iterations a second here). */
enum { LX_MIP_WORK_LIMIT = 50000 };

/* ---- windows.c ---------------------------------------------------------- */

/* The windows of stage s: every interval where its compute stream idles in
 * a simulation of p (`compute_times`: per instruction of the stage's compute
 * stream, lx_compute_times), merged per position (the FWD/BWD it follows),
 * with capacity length / interference. Replaces p->stages[s].windows. */
void lx_find_windows(lx_pipeline *p, int s, const lx_interval *compute_times, double interference);
/* The same measure on a schedule that now recomputes in those windows: a
 * window that idles less there (other stages sped up, so the waits that
 * made it shrank) takes the shorter length. Sets shrunk[k] for each of the
 * stage's windows and returns how many shrank. */
int lx_shrink_windows(lx_pipeline *p, int s, const lx_interval *compute_times, double interference,
                      bool *shrunk);

/* For every layer instance of stage s (index lx_layer_slot(layer) *
 * micro_batches + mb): the window positions it may use, lo <= after < due.
 * lo is the last FWD/BWD of any layer of the same parity before its backward
 * (its forward included: the inputs exist, and nothing else touches its
 * window buffer afterwards); due is its first BWD. */
void lx_instance_bounds(const lx_pipeline *p, int s, int *lo, int *due);

/* ---- policy.c ----------------------------------------------------------- */

/* One stage's choice, as the policies see it. */
typedef struct {
  const lx_graph *block;
  int n_ops;
  double *recompute_s; /* per op: its forward time, what running it again costs */
  int64_t *drop_bytes; /* per op: kept bytes per micro-batch that dropping everything it saves frees */
  bool *windowable;    /* per op: may run on the recompute stream (its output is saved, no TP all-reduce) */
  int64_t
      *offload_bytes; /* per op: what offloading it copies each way, 0 where it may not (lx_offloadable) */
  bool *splittable;   /* per op: may offload part of its rows and recompute the rest (lx_token_splittable) */
  /* per op: how many kv-head pieces its in-window recompute is cut into, each placed on its own (1:
   * whole; lx_stage_problem_set_windows picks them); its recompute_s is then the pieces' sum (a piece
   * launches its own kernels), on demand too: the policies' price is never below the schedule's */
  int *pieces;
  /* per op, [p]: the seconds of one of p pieces; 0 where p does not divide its kv heads */
  double (*piece_options_s)[LX_MAX_PIECES + 1];
  double host_bytes_per_s;         /* the host link, one direction; 0: no offload */
  int64_t host_avail_bytes;        /* host memory the stage's offloaded tensors may take */
  double layer_fwd_s, layer_bwd_s; /* one layer instance's forward and backward: what its copies overlap */
  int64_t kept_all;    /* one layer's kept bytes per micro-batch when nothing is dropped */
  int n_layers, micro_batches;
  int64_t
      stashed_layers; /* layer instances kept at once: stashed micro-batches x layers (lx_stashed_layers) */
  int window_buffers;       /* copies of the window bytes the layout holds: 2, by layer parity */
  int64_t avail_bytes;      /* for the block's activations; INT64_MAX: unlimited */
  const lx_window *windows; /* sorted by `after`; may be NULL */
  int n_windows;
  int *lo, *due; /* per instance (n_layers x micro_batches), see lx_instance_bounds */
  int n_instances;
  /* what each instance's prefetch can hide behind, from its bounds: the FWD / BWD passes
   * strictly between lo and due at an average op's time, sorted, and their sums up to each
   * (NULL without bounds: a layer's backward each) */
  double *room_s, *room_below;
  int work_limit; /* simplex iterations of one MILP (checkmate's, lynx-opt's); 0: LX_MIP_WORK_LIMIT */
  /* ops whose recompute makes their internals alone, their outputs kept (lx_stage_problem_keep_outputs):
   * their recompute_s and drop_bytes are those of the internals */
  lx_opmask outputs_kept;
} lx_stage_problem;

/* Per-op numbers of the IR's block on the cost model; windows and bounds
 * are left empty (lx_stage_problem_set_windows adds them). */
void lx_stage_problem_init(lx_stage_problem *pr, const lx_ir *ir, const lx_cost_model *cm, int n_layers,
                           int64_t stashed_layers, int micro_batches, int64_t avail_bytes);
/* Takes the windows and instance bounds of stage s of p (not copied: p must outlive pr). */
void lx_stage_problem_set_windows(lx_stage_problem *pr, const lx_pipeline *p, int s);
/* The same choice where recomputing a materialised attention keeps its
 * output and makes its probabilities alone (lx_recomputes_internals_only):
 * cheaper to recompute, and dropping it frees its internals only. Returns
 * whether any op changed (call before lx_stage_problem_set_windows, which
 * picks head pieces by the ops' times). */
bool lx_stage_problem_keep_outputs(lx_stage_problem *pr, const lx_ir *ir, const lx_cost_model *cm);
void lx_stage_problem_free(lx_stage_problem *pr);

/* Entries of a placement (window_of): per layer instance, one per piece of
 * each block op (lx_stage_units), instance * units + lx_first_unit(op) + piece. */
size_t lx_placement_entries(const lx_stage_problem *pr);
int lx_stage_units(const lx_stage_problem *pr);
int lx_first_unit(const lx_stage_problem *pr, int op);
/* One piece's recompute seconds (recompute_s of a whole op). */
double lx_unit_seconds(const lx_stage_problem *pr, int op);
/* Places the window ops w of every instance into the windows (stage_problem.h,
 * lx_match_windows); returns the in-window seconds served. */
double lx_assign_windows(const lx_stage_problem *pr, lx_opmask w, int *window_of);

/* Exposed recompute seconds and block activation bytes of decisions plus a
 * window assignment (window_of may be NULL: all on demand). */
double lx_policy_exposed(const lx_stage_problem *pr, const lx_op_decision *d, const int *window_of);
int64_t lx_policy_bytes(const lx_stage_problem *pr, const lx_op_decision *d);

/* Runs policy `policy` on one stage: fills decisions (n_ops), window_of
 * (lx_placement_entries, -1 where on demand) and stats. Returns false when even
 * recomputing everything does not fit (the decisions then recompute
 * everything they can). Fixed policies are answered with lx_recompute_fixed. */
bool lx_policy_solve(const lx_ir *ir, lx_recompute_policy policy, const lx_stage_problem *pr,
                     lx_op_decision *d, int *window_of, lx_policy_stats *stats);

/* ---- partition.c -------------------------------------------------------- */

/* Seconds per micro-batch of stage `stage` holding `count` layers (with the
 * prologue on stage 0, the epilogue on the last), or a negative number when
 * it cannot fit memory. Layers are alike: which layers does not matter. */
typedef double (*lx_stage_cost_fn)(void *ctx, int stage, int count);

/* The split of `layers` over pp stages (each at least one layer) that
 * minimises the slowest stage's cost: a DP over layer boundaries, asking
 * `cost` at most once per (stage, count). Fills
 * first_layer (pp + 1 entries); returns the bottleneck, or -1 if none fits. */
double lx_partition_dp(int layers, int pp, lx_stage_cost_fn cost, void *ctx, int *first_layer);

/* The recompute-aware stage cost on the IR's cluster: forward + backward of
 * its graphs, exposed TP communication, and the exposed recompute that
 * `policy` needs under the stage's budget (windows: the layer's own
 * tensor-parallel all-reduces). */
typedef struct {
  const lx_ir *ir;
  const lx_cost_model *cm;
  lx_recompute_policy policy;
  int pp, micro_batches;
  double layer_s, prologue_s, epilogue_s; /* compute + exposed TP all-reduce, per micro-batch */
  double layer_window_s;                  /* a layer's TP all-reduce capacity for window recompute */
  int64_t static_per_layer, static_prologue, static_epilogue, capacity, reserve_first, reserve_last,
      reserve_middle;
  /* per-op numbers, the attention's output dropped with what it saves (layers[0]) or kept
   * (layers[1], lx_stage_problem_keep_outputs; unused where no op can keep it) */
  lx_stage_problem layers[2];
  bool outputs_may_stay;
} lx_partition_model;

void lx_partition_model_init(lx_partition_model *m, const lx_ir *ir, const lx_cost_model *cm,
                             lx_recompute_policy policy);
void lx_partition_model_free(lx_partition_model *m);
double lx_partition_stage_cost(void *model, int stage, int count);

#endif
