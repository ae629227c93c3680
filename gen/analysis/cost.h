/* cost.h — predicted time of every op and transfer on a given cluster.
 *
 * A roofline per op kind (FLOPs at an efficiency of the GPU's peak, or bytes
 * at HBM bandwidth, whichever is slower, plus a launch overhead), ring
 * formulas for collectives, and a measured profile that overrides the model
 * wherever it has an entry. Figures and their sources: gen/analysis/hardware.c and
 * docs/cost-model.md. All times are in seconds. */
#ifndef LX_COST_H
#define LX_COST_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"

typedef struct {
  const char *name; /* "A100-SXM4-80GB" */
  double memory_bytes;
  double tensor_flops; /* bf16/fp16 dense peak, FLOP/s */
  double fp32_flops;
  double hbm_bytes_per_s;
  lx_link nvlink; /* the NVLink generation of its SXM nodes */
  const char *source;
  /* Activation offload, per GPU of a full node where every GPU copies both ways at once: the
   * effective bytes per second of one direction (the smaller of its host link and its share of
   * the node's host memory bandwidth), and its share of the node's host memory. */
  double host_bytes_per_s, host_memory_bytes;
  const char *host_source;
} lx_gpu_spec;

typedef struct {
  const char *name;   /* "nvlink3" */
  double bytes_per_s; /* per direction, effective */
  double latency_s;   /* alpha, per message / ring step */
  const char *source;
} lx_link_spec;

/* A measured time from a profile file (docs/cost-model.md). The shape is
 * what the kernel sees on one tp rank: tokens = rows it processes (the GEMM's
 * M for linear and lm_head), widths per rank. seq_len, heads and
 * attention_impl narrow the match where set (0 / -1: any). */
typedef struct {
  lx_op_kind kind;
  int64_t tokens, in_width, out_width; /* the shape the entry was measured at */
  lx_dtype dtype;
  double fwd_s, bwd_s;
  int64_t seq_len;    /* 0: any */
  int64_t heads;      /* per rank; 0: any */
  int attention_impl; /* an lx_attention_impl, or -1: any */
} lx_profile_entry;

typedef struct {
  lx_gpu_spec gpu;
  lx_link_spec intra, inter;
  double matmul_efficiency;          /* fraction of tensor peak large GEMMs reach */
  double attention_efficiency;       /* fraction of tensor peak of the attention core */
  double memory_efficiency;          /* fraction of HBM bandwidth element-wise kernels reach */
  double flash_attention_efficiency; /* fraction of tensor peak of a fused flash kernel */
  double vector_efficiency;          /* fraction of fp32 (CUDA-core) peak of non-matmul FLOPs */
  double skinny_gemm_knee;           /* a GEMM dimension below this loses efficiency */
  double launch_s;                   /* per kernel launch */
  double interference;               /* compute slowdown factor (>= 1) while NCCL runs */
  lx_profile_entry *profile;
  int n_profile, cap_profile;
} lx_cost_model;

const lx_gpu_spec *lx_gpu_spec_of(lx_gpu gpu);
const lx_link_spec *lx_link_spec_of(lx_link link);

/* Fills the model for the IR's cluster. A profile path of NULL means none.
 * Returns false (after a located diagnostic) when the profile is malformed. */
bool lx_cost_model_init(lx_cost_model *cm, const lx_ir *ir, const char *profile_path);
void lx_cost_model_free(lx_cost_model *cm);

/* Reads a profile (docs/cost-model.md) into cm, after init: its entries
 * override the model from then on. `contents` of NULL reads `path`; `path`
 * names the file in diagnostics either way. Returns false after located
 * errors; entries of a malformed profile are not kept. */
bool lx_cost_load_profile(lx_cost_model *cm, const char *path, const char *contents);

/* Fraction of the matmul peak a GEMM of m x k times k x n reaches: the
 * large-GEMM efficiency, lower when a dimension is below the knee. */
double lx_cost_gemm_efficiency(const lx_cost_model *cm, double m, double n, double k);

/* One op of graph g for one micro-batch on one tp rank; recompute = fwd. */
double lx_cost_op_fwd(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g, const lx_op *op);
double lx_cost_op_bwd(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g, const lx_op *op);
/* The forward of a materialised attention over kv_count of its kv heads on
 * the rank (a head-split recompute's piece, lx_head_splittable): the whole
 * op's time less its launches, in proportion, plus the piece's own blocks'
 * launches; the whole op's time for any other op or all its heads. */
double lx_cost_op_fwd_heads(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g, const lx_op *op,
                            int kv_count);
/* The share of an op's forward that a recompute of its internals alone takes
 * (lx_recomputes_internals_only): for a materialised attention the QK^T
 * product and the softmax (its blocks' fp32 scores written and read, the
 * probabilities written, two launches a block), not the product with V;
 * 1 for any other op. A profile's measured forward scales by it too. */
double lx_cost_internals_share(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g, const lx_op *op);
/* The part of a linear's backward that is its weight gradient (zero bubble's
 * W): the product dY^T X has the forward's FLOPs, so its share of the
 * backward's time is theirs of its FLOPs. */
double lx_cost_op_weight_grad(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g, const lx_op *op);

/* The fields of a profile `op` line (docs/cost-model.md) that match op: KIND
 * to DTYPE in `key` (before the times), seq=, heads= and impl= in `attrs`
 * (after them; empty but for attention), as a program that measured the op
 * writes them. */
void lx_cost_profile_key(const lx_ir *ir, const lx_graph *g, const lx_op *op, char *key, size_t key_size,
                         char *attrs, size_t attrs_size);

/* Communication; `cross_node` picks the inter-node link. */
double lx_cost_p2p(const lx_cost_model *cm, int64_t bytes, bool cross_node);
/* A copy of `bytes` between the GPU and pinned host memory, one direction
 * (activation offload and prefetch: gpu.host_bytes_per_s). */
double lx_cost_host_copy(const lx_cost_model *cm, int64_t bytes);
double lx_cost_allreduce(const lx_cost_model *cm, int64_t bytes, int ranks, bool cross_node);
double lx_cost_reduce_scatter(const lx_cost_model *cm, int64_t bytes, int ranks, bool cross_node);
double lx_cost_all_gather(const lx_cost_model *cm, int64_t bytes, int ranks, bool cross_node);

#endif
