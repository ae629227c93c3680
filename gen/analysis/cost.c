/* cost.c — the time of every op and transfer, from datasheets or a profile.
 *
 * An op costs max(FLOPs / (efficiency x peak), bytes / (memory efficiency x
 * HBM bandwidth)) plus one launch overhead per kernel it runs: a roofline
 * whose compute side is the peak real kernels reach, not the datasheet's.
 * Collectives follow the ring formulas. A profile entry replaces the model's
 * time for the ops whose shape it names. The choices and their reasons are
 * in docs/cost-model.md; the figures per GPU and link in hardware.c. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "analysis/cost.h"

#include <errno.h>
#include <math.h> /* isfinite only: lynxgen links without libm */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "diag.h"
#include "frontend/source_file.h"
#include "lx_attention_gemms.h" /* the blocks the CUDA programs' materialised attention runs */

/* ---- efficiencies (docs/cost-model.md says why each) ---------------------- */

/* Large bf16 GEMMs: 8192^3 reaches 0.80-0.81 of peak on H100/H200 (measured,
 * shared/reference/hardware.md, beside the repository); training shapes are smaller and ragged. */
static const double MATMUL_EFFICIENCY = 0.78;
/* Batched GEMMs of materialised attention: inner dimension head_dim (64-128),
 * many small matrices. */
static const double ATTENTION_EFFICIENCY = 0.5;
/* FlashAttention-2 reaches 50-73% of A100 peak forward, less backward. */
static const double FLASH_ATTENTION_EFFICIENCY = 0.55;
/* Element-wise and reduction kernels: a plain copy reaches ~0.9 of HBM
 * (measured on H100/H200), real kernels with reductions and odd widths less. */
static const double MEMORY_EFFICIENCY = 0.8;
/* Non-matmul FLOPs run on CUDA cores; they almost never bind, this keeps
 * fp32 transcendental-heavy kernels honest. */
static const double VECTOR_EFFICIENCY = 0.5;
/* Below this a GEMM dimension no longer fills the tensor-core tiles of all
 * SMs: efficiency falls by 2x / (1 + x), x = dim / knee (2/3 at half the
 * knee, 2/9 at an eighth). */
static const double SKINNY_GEMM_KNEE = 1024;
/* The gap between dependent kernels on one stream (launch, ramp-up, tail). */
static const double LAUNCH_S = 3e-6;
/* NCCL kernels take SMs and HBM bandwidth from overlapped compute. */
static const double INTERFERENCE = 1.15;

static double min_d(double a, double b) { return a < b ? a : b; }
static double max_d(double a, double b) { return a > b ? a : b; }

/* ---- setup ---------------------------------------------------------------- */

static const lx_link_spec *link_or(lx_link link, lx_link fallback) {
  const lx_link_spec *spec = lx_link_spec_of(link);
  return spec ? spec : lx_link_spec_of(fallback);
}

bool lx_cost_model_init(lx_cost_model *cm, const lx_ir *ir, const char *profile_path) {
  memset(cm, 0, sizeof *cm);
  const lx_gpu_spec *gpu = lx_gpu_spec_of(ir->cluster.gpu);
  if (!gpu) {
    lx_error(ir->locs.cluster, "the cost model needs a GPU kind in the cluster");
    return false;
  }
  cm->gpu = *gpu;
  cm->intra = *link_or(ir->cluster.intra_node_link, gpu->nvlink);
  cm->inter = *link_or(ir->cluster.inter_node_link, LX_LINK_IB_HDR);
  cm->matmul_efficiency = MATMUL_EFFICIENCY;
  cm->attention_efficiency = ATTENTION_EFFICIENCY;
  cm->flash_attention_efficiency = FLASH_ATTENTION_EFFICIENCY;
  cm->memory_efficiency = MEMORY_EFFICIENCY;
  cm->vector_efficiency = VECTOR_EFFICIENCY;
  cm->skinny_gemm_knee = SKINNY_GEMM_KNEE;
  cm->launch_s = LAUNCH_S;
  cm->interference = INTERFERENCE;
  return profile_path ? lx_cost_load_profile(cm, profile_path, NULL) : true;
}

void lx_cost_model_free(lx_cost_model *cm) {
  free(cm->profile);
  cm->profile = NULL;
  cm->n_profile = cm->cap_profile = 0;
}

/* ---- shapes as the kernel sees them --------------------------------------- */

static int64_t tp_degree(const lx_ir *ir) { return ir->plan.tp; }

static int64_t rank_width(const lx_ir *ir, lx_shape s) { return lx_rank_width(ir, s); }

static const lx_op *input_op(const lx_graph *g, const lx_op *op, int k) { return &g->ops[op->inputs[k]]; }

static bool is_activation(lx_shape s) {
  return s.dtype != LX_DTYPE_NONE && s.dtype != LX_DTYPE_INT32 && !s.scalar;
}

static int elt_bytes(const lx_ir *ir) { return lx_dtype_bytes(ir->training.dtype); }

/* The GEMM's inner and output widths on one rank. lm_head's output is the
 * padded vocabulary (Megatron-LM pads it so every rank's slice is equal). */
static void gemm_widths(const lx_ir *ir, const lx_graph *g, const lx_op *op, double *k, double *n) {
  *k = (double)rank_width(ir, input_op(g, op, 0)->out);
  *n = op->kind == LX_OP_LM_HEAD ? (double)(ir->padded_vocab / tp_degree(ir))
                                 : (double)rank_width(ir, op->out);
}

/* Rows the kernel processes: the GEMM's M, or the tokens of its tensors on
 * this rank (fewer than b x s under sequence parallelism). */
static int64_t kernel_tokens(const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  if (op->kind == LX_OP_LINEAR || op->kind == LX_OP_LM_HEAD) {
    double k, n;
    gemm_widths(ir, g, op, &k, &n);
    return (int64_t)(op->flops_fwd / (2 * k * n) + 0.5);
  }
  const lx_op *of = op->out.scalar && op->n_inputs ? input_op(g, op, 0) : op;
  int64_t row_bytes = rank_width(ir, of->out) * lx_dtype_bytes(of->out.dtype);
  return row_bytes > 0 ? of->out_bytes / row_bytes : 0;
}

static int64_t in_width(const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  return op->n_inputs ? rank_width(ir, input_op(g, op, 0)->out) : 0;
}

static int64_t heads_per_rank(const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  return op->n_inputs && input_op(g, op, 0)->out.split ? op->heads / tp_degree(ir) : op->heads;
}

/* ---- traffic --------------------------------------------------------------- */

/* Weights the kernel touches: an embedding reads only the rows of its tokens;
 * a tied lm_head reads the embedding's table, which it does not own. */
static double weight_elements(const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  if (op->kind == LX_OP_EMBEDDING) {
    double rows = (double)kernel_tokens(ir, g, op) * op->out.width;
    return min_d((double)(op->params_per_rank + op->frozen_per_rank), rows);
  }
  if (op->kind == LX_OP_LM_HEAD) {
    double k, n;
    gemm_widths(ir, g, op, &k, &n);
    return k * n;
  }
  return (double)(op->params_per_rank + op->frozen_per_rank); /* fine-tuning reads frozen ones too */
}

static double inputs_bytes(const lx_graph *g, const lx_op *op) {
  double bytes = 0;
  for (int k = 0; k < op->n_inputs; k++)
    bytes += (double)input_op(g, op, k)->out_bytes;
  return bytes;
}

/* Gradients flow only into activations, not into token ids. */
static double input_grad_bytes(const lx_graph *g, const lx_op *op) {
  double bytes = 0;
  for (int k = 0; k < op->n_inputs; k++)
    if (is_activation(input_op(g, op, k)->out)) bytes += (double)input_op(g, op, k)->out_bytes;
  return bytes;
}

static double saved_bytes_read(const lx_op *op, bool internal_only) {
  double bytes = 0;
  for (int k = 0; k < op->n_saved; k++)
    if (!internal_only || op->saved[k].kind == LX_SAVE_INTERNAL) bytes += (double)op->saved[k].bytes;
  return bytes;
}

/* Weight gradients accumulate in fp32 over the micro-batches (Megatron-LM's
 * main_grad): read and written, 8 bytes per weight touched. */
static const double WEIGHT_GRAD_BYTES = 8;

static bool materialized_attention(const lx_op *op) {
  return op->kind == LX_OP_ATTENTION && op->attention_impl == LX_ATTN_MATERIALIZED;
}

static double fwd_bytes(const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  double bytes = inputs_bytes(g, op) + (double)op->out_bytes + weight_elements(ir, g, op) * elt_bytes(ir);
  /* dropout masks, softmax log-sum-exp: written here, read by the backward;
   * materialised attention's score buffers are charged in score_bytes */
  return materialized_attention(op) ? bytes : bytes + saved_bytes_read(op, true);
}

/* The backward reads the output's gradient and what the forward saved, writes
 * the inputs' gradients (reading the weights to form them) and accumulates
 * the weight gradients. An embedding has no input gradient: it only
 * scatter-adds into its table's gradient. */
static double bwd_bytes(const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  double weights = weight_elements(ir, g, op), input_grads = input_grad_bytes(g, op);
  double saved = saved_bytes_read(op, false) - (materialized_attention(op) ? saved_bytes_read(op, true) : 0);
  double weights_read = input_grads > 0 ? weights * elt_bytes(ir) : 0;
  return (double)op->out_bytes + saved + input_grads + weights_read + weights * WEIGHT_GRAD_BYTES;
}

/* Materialised attention on the CUDA target (lx_cuda_attention_gemm.cuh)
 * runs blocks of query rows (lx_attention_gemms.h): each block's batched
 * products stop at its last key, so they cover `covered` of the s x s
 * square; its softmax kernels read the causal part of each row, (s + 1) / 2s
 * of the square, and write whole rows. */
typedef struct {
  double covered, causal;
  double blocks; /* per call, forward or backward (their scratch holds different head counts) */
} score_blocks;

static int kv_heads_per_rank(const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  return (int)heads_per_rank(ir, g, op) / (op->heads / op->kv_heads);
}

/* The blocks of a call over kv_count of the rank's kv heads (a head-split
 * recompute's piece runs fewer; the stream's scratch is sized for them all). */
static score_blocks materialized_blocks(const lx_ir *ir, const lx_graph *g, const lx_op *op, bool backward,
                                        int kv_count) {
  int kv = kv_heads_per_rank(ir, g, op), T = ir->model.seq_len;
  lx_attn_sizes s = {ir->plan.micro_batch, T, kv_count * (op->heads / op->kv_heads), kv_count, 1,
                     ir->model.dropout > 0};
  int per_block =
      lx_attn_heads_per_block(s, lx_attn_scratch_floats(T, kv) * 4, lx_attn_score_bytes(s, backward));
  lx_attn_slices slices = {0, kv_count, per_block};
  score_blocks b = {lx_attn_covered_share(T), (T + 1.0) / (2.0 * T), lx_attn_block_count(s, slices)};
  return b;
}

/* The s x s traffic of those blocks, per element of the square (elt: the
 * activations' bytes; the weights are the probs, or under dropout the
 * dropped probs, which a block forms in the scratch from the probs and the
 * mask drawn again):
 *   forward:  fp32 scores written where covered, read where causal; probs
 *             written; [the weights written where covered;] the weights read
 *             by the PV product where covered
 *   backward: [probs read where causal, the weights written where covered;]
 *             weights read (dV) and fp32 dP written where covered; dP and
 *             weights [and probs] read where causal; dS written where covered
 *             and read twice (dQ, dK) */
/* The s x s scores of a materialised attention on the rank: flops_fwd = 4 x scores x head_dim. */
static double scores_of(const lx_graph *g, const lx_op *op) {
  const lx_op *qkv = input_op(g, op, 0);
  double head_dim = (double)qkv->out.width / (op->heads + 2 * op->kv_heads);
  return op->flops_fwd / (4 * head_dim);
}

static double score_bytes(const lx_ir *ir, const lx_graph *g, const lx_op *op, bool backward) {
  if (!materialized_attention(op)) return 0;
  double scores = scores_of(g, op);
  score_blocks b = materialized_blocks(ir, g, op, backward, kv_heads_per_rank(ir, g, op));
  bool dropout = ir->model.dropout > 0;
  double elt = elt_bytes(ir), per_score;
  double weights = dropout ? elt : 0; /* the dropped probs' own pass */
  if (backward)
    per_score = b.covered * (weights + elt + 4 + 3 * elt) + b.causal * (weights + 4 + elt + weights);
  else
    per_score = b.covered * (4 + weights + elt) + b.causal * 4 + elt;
  return scores * per_score;
}

/* ---- compute --------------------------------------------------------------- */

static double matmul_peak(const lx_cost_model *cm, const lx_ir *ir) {
  return ir->training.dtype == LX_DTYPE_FP32 ? cm->gpu.fp32_flops : cm->gpu.tensor_flops;
}

double lx_cost_gemm_efficiency(const lx_cost_model *cm, double m, double n, double k) {
  double smallest = min_d(m, min_d(n, k));
  if (!(smallest > 0) || smallest >= cm->skinny_gemm_knee) return cm->matmul_efficiency;
  double x = smallest / cm->skinny_gemm_knee;
  return cm->matmul_efficiency * 2 * x / (1 + x);
}

/* Mini-sequences: an op runs one call per piece, and the backward of one
 * whose output is chunk-local runs its forward again (its FLOPs, analysis's). */
static int pieces(const lx_op *op) { return op->chunks > 1 ? op->chunks : 1; }
static bool forward_again(const lx_graph *g, const lx_op *op, bool backward) {
  return backward && lx_chunk_local(g, (int)(op - g->ops));
}

/* FLOP/s the op's arithmetic runs at. */
static double compute_rate(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  switch (op->kind) {
  case LX_OP_LINEAR:
  case LX_OP_LM_HEAD: {
    double k, n;
    gemm_widths(ir, g, op, &k, &n);
    double rows = (double)kernel_tokens(ir, g, op) / pieces(op); /* per call */
    return lx_cost_gemm_efficiency(cm, rows, n, k) * matmul_peak(cm, ir);
  }
  case LX_OP_ATTENTION:
    return (op->attention_impl == LX_ATTN_FLASH ? cm->flash_attention_efficiency : cm->attention_efficiency) *
           matmul_peak(cm, ir);
  default: return cm->vector_efficiency * cm->gpu.fp32_flops;
  }
}

/* Kernels per op, as the emitted program runs them. */
static double launches(const lx_ir *ir, const lx_graph *g, const lx_op *op, bool backward) {
  switch (op->kind) {
  case LX_OP_INPUT: return 0;
  case LX_OP_LAYERNORM:
  case LX_OP_RMSNORM: return backward ? 2 : 1; /* input grad; weight-grad reduction */
  case LX_OP_LINEAR:
  case LX_OP_LM_HEAD: return backward ? 2 : 1;       /* dgrad and wgrad GEMMs */
  case LX_OP_CROSS_ENTROPY: return backward ? 1 : 3; /* vocab-parallel: max, sum-exp, target */
  case LX_OP_ATTENTION:
    if (op->attention_impl == LX_ATTN_FLASH) return backward ? 3 : 1; /* FA2: dot(dO,O), main, dq */
    /* per block: QK^T, softmax, PV; backward [the dropped probs,] dV, dP, softmax, dQ, dK */
    return materialized_blocks(ir, g, op, backward, kv_heads_per_rank(ir, g, op)).blocks *
           (backward ? 5 + (ir->model.dropout > 0) : 3);
  default: return 1;
  }
}

static double memory_time(const lx_cost_model *cm, double bytes) {
  return bytes / (cm->memory_efficiency * cm->gpu.hbm_bytes_per_s);
}

static double roofline(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g, const lx_op *op,
                       bool backward) {
  if (op->kind == LX_OP_INPUT) return 0;
  double flops = backward ? op->flops_bwd : op->flops_fwd;
  if (materialized_attention(op)) flops *= lx_attn_covered_share(ir->model.seq_len);
  bool again = forward_again(g, op, backward);
  double bytes = backward ? bwd_bytes(ir, g, op) : fwd_bytes(ir, g, op);
  if (again) bytes += fwd_bytes(ir, g, op);
  double compute = flops / compute_rate(cm, ir, g, op);
  double calls = pieces(op) * (launches(ir, g, op, backward) + (again ? launches(ir, g, op, false) : 0));
  return max_d(compute, memory_time(cm, bytes)) + memory_time(cm, score_bytes(ir, g, op, backward)) +
         calls * cm->launch_s;
}

/* ---- profile lookup -------------------------------------------------------- */

/* The tokens one call of the op takes: all of them, or in mini-sequences a
 * piece's. A profile times calls, and keys them so. */
static int64_t call_tokens(const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  return kernel_tokens(ir, g, op) / pieces(op);
}

static bool entry_matches(const lx_profile_entry *e, const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  return e->kind == op->kind && e->dtype == ir->training.dtype && e->tokens == call_tokens(ir, g, op) &&
         e->in_width == in_width(ir, g, op) && e->out_width == rank_width(ir, op->out) &&
         (!e->seq_len || e->seq_len == ir->model.seq_len) &&
         (!e->heads || (op->kind == LX_OP_ATTENTION && e->heads == heads_per_rank(ir, g, op))) &&
         (e->attention_impl < 0 ||
          (op->kind == LX_OP_ATTENTION && e->attention_impl == (int)op->attention_impl));
}

void lx_cost_profile_key(const lx_ir *ir, const lx_graph *g, const lx_op *op, char *key, size_t key_size,
                         char *attrs, size_t attrs_size) {
  snprintf(key, key_size, "%s %lld %lld %lld %s", lx_op_kind_name(op->kind),
           (long long)call_tokens(ir, g, op), (long long)in_width(ir, g, op),
           (long long)rank_width(ir, op->out), lx_dtype_name(ir->training.dtype));
  if (attrs_size) attrs[0] = '\0';
  if (op->kind == LX_OP_ATTENTION)
    snprintf(attrs, attrs_size, " seq=%d heads=%lld impl=%s", ir->model.seq_len,
             (long long)heads_per_rank(ir, g, op),
             op->attention_impl == LX_ATTN_FLASH ? "flash" : "materialized");
}

/* The last matching line wins, so a profile can be amended by appending. */
static const lx_profile_entry *profile_entry(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g,
                                             const lx_op *op) {
  for (int i = cm->n_profile - 1; i >= 0; i--)
    if (entry_matches(&cm->profile[i], ir, g, op)) return &cm->profile[i];
  return NULL;
}

/* A profiled op's time is its calls': one per piece in mini-sequences, the
 * backward's with the forward's again where it makes its pieces again. */
double lx_cost_op_fwd(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  const lx_profile_entry *e = profile_entry(cm, ir, g, op);
  return e ? pieces(op) * e->fwd_s : roofline(cm, ir, g, op, false);
}

double lx_cost_internals_share(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  if (!materialized_attention(op)) return 1;
  double scores = scores_of(g, op);
  score_blocks b = materialized_blocks(ir, g, op, false, kv_heads_per_rank(ir, g, op));
  double qk_flops = op->flops_fwd / 2 * lx_attn_covered_share(ir->model.seq_len);
  double per_score = b.covered * 4 + b.causal * 4 + elt_bytes(ir);
  double t = max_d(qk_flops / compute_rate(cm, ir, g, op), memory_time(cm, inputs_bytes(g, op))) +
             memory_time(cm, scores * per_score) + b.blocks * 2 * cm->launch_s;
  return t / roofline(cm, ir, g, op, false);
}

double lx_cost_op_fwd_heads(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g, const lx_op *op,
                            int kv_count) {
  double whole = lx_cost_op_fwd(cm, ir, g, op);
  int kv = materialized_attention(op) ? kv_heads_per_rank(ir, g, op) : 0;
  if (kv_count >= kv) return whole;
  double share = (double)kv_count / kv, whole_calls = launches(ir, g, op, false);
  double calls = materialized_blocks(ir, g, op, false, kv_count).blocks * 3;
  return share * (whole - whole_calls * cm->launch_s) + calls * cm->launch_s;
}

double lx_cost_op_bwd(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  const lx_profile_entry *e = profile_entry(cm, ir, g, op);
  if (!e) return roofline(cm, ir, g, op, true);
  return pieces(op) * (e->bwd_s + (forward_again(g, op, true) ? e->fwd_s : 0));
}

double lx_cost_op_weight_grad(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g, const lx_op *op) {
  if (op->flops_bwd <= 0) return 0;
  return lx_cost_op_bwd(cm, ir, g, op) * op->flops_fwd / op->flops_bwd;
}

/* ---- communication --------------------------------------------------------- */

static const lx_link_spec *link_for(const lx_cost_model *cm, bool cross_node) {
  return cross_node ? &cm->inter : &cm->intra;
}

double lx_cost_p2p(const lx_cost_model *cm, int64_t bytes, bool cross_node) {
  if (bytes <= 0) return 0;
  const lx_link_spec *l = link_for(cm, cross_node);
  return (double)bytes / l->bytes_per_s + l->latency_s;
}

double lx_cost_host_copy(const lx_cost_model *cm, int64_t bytes) {
  if (bytes <= 0) return 0;
  return (double)bytes / cm->gpu.host_bytes_per_s + cm->launch_s;
}

/* A ring collective of `passes` sweeps: each sweep is n - 1 steps of S / n. */
static double ring(const lx_cost_model *cm, int64_t bytes, int ranks, bool cross_node, int passes) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const lx_link_spec *l = link_for(cm, cross_node);
  double steps = (double)passes * (ranks - 1);
  return steps / ranks * (double)bytes / l->bytes_per_s + steps * l->latency_s;
}

double lx_cost_allreduce(const lx_cost_model *cm, int64_t bytes, int ranks, bool cross_node) {
  return ring(cm, bytes, ranks, cross_node, 2);
}

double lx_cost_reduce_scatter(const lx_cost_model *cm, int64_t bytes, int ranks, bool cross_node) {
  return ring(cm, bytes, ranks, cross_node, 1);
}

double lx_cost_all_gather(const lx_cost_model *cm, int64_t bytes, int ranks, bool cross_node) {
  return ring(cm, bytes, ranks, cross_node, 1);
}

/* ---- profile files ---------------------------------------------------------- */

enum { MAX_FIELDS = 16 };

typedef struct {
  const char *text[MAX_FIELDS]; /* NUL-terminated, inside the line buffer */
  int col[MAX_FIELDS];          /* 1-based */
  int n;
} fields;

typedef struct {
  const char *path;
  int line;
  int errors;
  lx_profile_entry *entries; /* parsed, kept only if the whole file is good */
  int n_entries, cap_entries;
  lx_link_spec intra, inter; /* overrides, applied at the end */
  double interference;
  double host_bytes_per_s;
} profile_parser;

/* what, a format of one %s: the text of a field, quoted short (lx_excerpt). */
static void parse_error(profile_parser *p, int col, const char *what, const char *text) {
  char excerpt[LX_EXCERPT_MAX + 4];
  lx_error((lx_srcloc){p->path, p->line, col, NULL}, what, lx_excerpt(text, excerpt));
  p->errors++;
}

/* Splits at blanks, stopping at '#'. Writes NULs into the line. */
static bool split_fields(profile_parser *p, char *line, fields *f) {
  f->n = 0;
  char *c = line;
  for (;;) {
    while (*c == ' ' || *c == '\t' || *c == '\r')
      c++;
    if (!*c || *c == '#') return true;
    if (f->n == MAX_FIELDS) {
      parse_error(p, (int)(c - line) + 1, "too many fields on one line%s", "");
      return false;
    }
    f->text[f->n] = c;
    f->col[f->n++] = (int)(c - line) + 1;
    while (*c && *c != ' ' && *c != '\t' && *c != '\r' && *c != '#')
      c++;
    if (!*c) return true;
    if (*c == '#') {
      *c = 0;
      return true;
    }
    *c++ = 0;
  }
}

static bool parse_count(profile_parser *p, const char *text, int col, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || *end || end == text || v < 1) {
    parse_error(p, col, "expected a positive integer, got '%s'", text);
    return false;
  }
  *out = v;
  return true;
}

/* A profile's times, rates and factors lie in [PROFILE_AMOUNT_MIN, PROFILE_AMOUNT_MAX] (or are 0
 * where that may be): far beyond any real measurement either way, and near enough that a plan's
 * sums stay finite (an infinite step time would leave nothing to draw or compare). */
#define PROFILE_AMOUNT_MIN 1e-9
#define PROFILE_AMOUNT_MAX 1e9
#define PROFILE_AMOUNT_RANGE "1e-9 to 1e9"

static bool parse_amount(profile_parser *p, const char *text, int col, bool zero_ok, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  bool in_range = v == 0 ? zero_ok : v >= PROFILE_AMOUNT_MIN && v <= PROFILE_AMOUNT_MAX;
  if (errno || *end || end == text || !isfinite(v) || !in_range) {
    parse_error(p, col,
                zero_ok ? "expected 0 or a number from " PROFILE_AMOUNT_RANGE ", got '%s'"
                        : "expected a number from " PROFILE_AMOUNT_RANGE ", got '%s'",
                text);
    return false;
  }
  *out = v;
  return true;
}

static bool parse_kind(profile_parser *p, const fields *f, int i, lx_op_kind *out) {
  for (int k = LX_OP_INPUT + 1; k < LX_OP_KIND_COUNT; k++)
    if (!strcmp(f->text[i], lx_op_kind_name((lx_op_kind)k))) {
      *out = (lx_op_kind)k;
      return true;
    }
  parse_error(p, f->col[i], "unknown op kind '%s' (linear, attention, layernorm, ...)", f->text[i]);
  return false;
}

static bool parse_dtype(profile_parser *p, const fields *f, int i, lx_dtype *out) {
  for (int d = LX_DTYPE_BF16; d <= LX_DTYPE_FP32; d++)
    if (!strcmp(f->text[i], lx_dtype_name((lx_dtype)d))) {
      *out = (lx_dtype)d;
      return true;
    }
  parse_error(p, f->col[i], "unknown dtype '%s' (bf16, fp16 or fp32)", f->text[i]);
  return false;
}

static bool expect_fields(profile_parser *p, const fields *f, int min, int max, const char *usage) {
  if (f->n >= min && f->n <= max) return true;
  int col = f->n > max ? f->col[max] : f->col[0];
  lx_error((lx_srcloc){p->path, p->line, col, NULL}, "%s '%s' takes %s",
           f->n > max ? "too many fields:" : "too few fields:", f->text[0], usage);
  p->errors++;
  return false;
}

/* seq=S, heads=H (per rank), impl=flash|materialized */
static bool parse_attribute(profile_parser *p, const fields *f, int i, lx_profile_entry *e) {
  const char *t = f->text[i];
  const char *eq = strchr(t, '=');
  int value_col = f->col[i] + (eq ? (int)(eq + 1 - t) : 0);
  if (!strncmp(t, "seq=", 4)) return parse_count(p, eq + 1, value_col, &e->seq_len);
  if (!strncmp(t, "heads=", 6)) return parse_count(p, eq + 1, value_col, &e->heads);
  if (!strcmp(t, "impl=flash") || !strcmp(t, "impl=materialized")) {
    e->attention_impl = !strcmp(t, "impl=flash") ? LX_ATTN_FLASH : LX_ATTN_MATERIALIZED;
    return true;
  }
  parse_error(p, f->col[i], "unknown attribute '%s' (seq=N, heads=N, impl=flash|materialized)", t);
  return false;
}

static void add_entry(profile_parser *p, lx_profile_entry e) {
  if (p->n_entries == p->cap_entries) {
    p->cap_entries = p->cap_entries ? 2 * p->cap_entries : 16;
    p->entries = lx_realloc(p->entries, sizeof *p->entries * (size_t)p->cap_entries);
  }
  p->entries[p->n_entries++] = e;
}

/* op KIND TOKENS IN_WIDTH OUT_WIDTH DTYPE FWD_MS BWD_MS [seq=S] [heads=H] [impl=I] */
static void parse_op_line(profile_parser *p, const fields *f) {
  if (!expect_fields(p, f, 8, 11,
                     "KIND TOKENS IN_WIDTH OUT_WIDTH DTYPE FWD_MS BWD_MS [seq=S] [heads=H] [impl=I]"))
    return;
  lx_profile_entry e = {.attention_impl = -1};
  double fwd_ms, bwd_ms;
  bool ok = parse_kind(p, f, 1, &e.kind) && parse_count(p, f->text[2], f->col[2], &e.tokens) &&
            parse_count(p, f->text[3], f->col[3], &e.in_width) &&
            parse_count(p, f->text[4], f->col[4], &e.out_width) && parse_dtype(p, f, 5, &e.dtype) &&
            parse_amount(p, f->text[6], f->col[6], true, &fwd_ms) &&
            parse_amount(p, f->text[7], f->col[7], true, &bwd_ms);
  for (int i = 8; ok && i < f->n; i++)
    ok = parse_attribute(p, f, i, &e);
  if (!ok) return;
  e.fwd_s = fwd_ms * 1e-3;
  e.bwd_s = bwd_ms * 1e-3;
  add_entry(p, e);
}

/* link NAME GBPS LATENCY_US: applies to the cluster's link of that name. */
static void parse_link_line(profile_parser *p, const fields *f) {
  if (!expect_fields(p, f, 4, 4, "NAME GBPS LATENCY_US")) return;
  const lx_link_spec *spec = NULL;
  for (int l = LX_LINK_NVLINK2; l <= LX_LINK_IB_NDR && !spec; l++)
    if (!strcmp(f->text[1], lx_link_name((lx_link)l))) spec = lx_link_spec_of((lx_link)l);
  if (!spec) {
    parse_error(p, f->col[1], "unknown link '%s' (nvlink2, nvlink3, nvlink4, pcie4, pcie5, ib-hdr, ib-ndr)",
                f->text[1]);
    return;
  }
  double gbps, latency_us;
  if (!parse_amount(p, f->text[2], f->col[2], false, &gbps) ||
      !parse_amount(p, f->text[3], f->col[3], true, &latency_us))
    return;
  lx_link_spec *targets[] = {&p->intra, &p->inter};
  for (int i = 0; i < 2; i++)
    if (!strcmp(targets[i]->name, spec->name)) {
      targets[i]->bytes_per_s = gbps * 1e9;
      targets[i]->latency_s = latency_us * 1e-6;
      targets[i]->source = "measured (profile)";
    }
}

/* interference FACTOR: compute slowdown while NCCL runs, measured. */
static void parse_interference_line(profile_parser *p, const fields *f) {
  if (!expect_fields(p, f, 2, 2, "FACTOR")) return;
  double factor;
  if (!parse_amount(p, f->text[1], f->col[1], false, &factor)) return;
  if (factor < 1) {
    parse_error(p, f->col[1], "interference factor '%s' must be at least 1 (a slowdown)", f->text[1]);
    return;
  }
  p->interference = factor;
}

/* host GBPS: pinned host memory copies, each direction, measured. */
static void parse_host_line(profile_parser *p, const fields *f) {
  if (!expect_fields(p, f, 2, 2, "GBPS")) return;
  double gbps;
  if (parse_amount(p, f->text[1], f->col[1], false, &gbps)) p->host_bytes_per_s = gbps * 1e9;
}

static void parse_line(profile_parser *p, char *line) {
  fields f;
  if (!split_fields(p, line, &f) || f.n == 0) return;
  if (!strcmp(f.text[0], "op"))
    parse_op_line(p, &f);
  else if (!strcmp(f.text[0], "link"))
    parse_link_line(p, &f);
  else if (!strcmp(f.text[0], "interference"))
    parse_interference_line(p, &f);
  else if (!strcmp(f.text[0], "host"))
    parse_host_line(p, &f);
  else
    parse_error(p, f.col[0], "unknown directive '%s' (op, link, interference or host)", f.text[0]);
}

static void apply_profile(lx_cost_model *cm, profile_parser *p) {
  for (int i = 0; i < p->n_entries; i++) {
    if (cm->n_profile == cm->cap_profile) {
      cm->cap_profile = cm->cap_profile ? 2 * cm->cap_profile : 16;
      cm->profile = lx_realloc(cm->profile, sizeof *cm->profile * (size_t)cm->cap_profile);
    }
    cm->profile[cm->n_profile++] = p->entries[i];
  }
  cm->intra = p->intra;
  cm->inter = p->inter;
  cm->interference = p->interference;
  cm->gpu.host_bytes_per_s = p->host_bytes_per_s;
}

bool lx_cost_load_profile(lx_cost_model *cm, const char *path, const char *contents) {
  size_t length;
  char *text = contents ? lx_strdup(contents)
                        : lx_read_source_file(path, (lx_srcloc){path, 0, 0, NULL}, "the profile", &length);
  if (!text) return false;
  profile_parser p = {.path = path,
                      .intra = cm->intra,
                      .inter = cm->inter,
                      .interference = cm->interference,
                      .host_bytes_per_s = cm->gpu.host_bytes_per_s};
  char *line = text;
  while (line) {
    char *next = strchr(line, '\n');
    if (next) *next++ = 0;
    p.line++;
    parse_line(&p, line);
    line = next;
  }
  if (!p.errors) apply_profile(cm, &p);
  free(p.entries);
  free(text);
  return p.errors == 0;
}
