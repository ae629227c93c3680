/* config_values.c — the configs' values: defaults, ranges, relations (see config_values.h). */
#include "analysis/config_values.h"

#include <limits.h>
#include <string.h>

#include "diag.h"

/* Written in the model file or on the command line. */
static bool given(const lx_ir *ir, lx_field f) { return ir->locs.field[f].file != NULL; }

static lx_link default_intra_link(lx_gpu gpu) {
  switch (gpu) {
  case LX_GPU_V100_32GB: return LX_LINK_NVLINK2;
  case LX_GPU_A100_40GB:
  case LX_GPU_A100_80GB: return LX_LINK_NVLINK3;
  default: return LX_LINK_NVLINK4;
  }
}

static lx_link default_inter_link(lx_gpu gpu) {
  return gpu == LX_GPU_H100_80GB || gpu == LX_GPU_H200_141GB || gpu == LX_GPU_GH200_96GB ? LX_LINK_IB_NDR
                                                                                         : LX_LINK_IB_HDR;
}

static void apply_defaults(lx_ir *ir) {
  lx_model_config *m = &ir->model;
  if (!given(ir, LX_F_KV_HEADS)) m->kv_heads = m->heads;
  if (!given(ir, LX_F_FFN_HIDDEN)) m->ffn_hidden = 4 * m->hidden;
  if (!given(ir, LX_F_ROPE_THETA)) m->rope_theta = 10000; /* RoFormer, Llama 2 */
  if (!given(ir, LX_F_NODES)) ir->cluster.nodes = 1;
  if (!given(ir, LX_F_INTRA_LINK)) ir->cluster.intra_node_link = default_intra_link(ir->cluster.gpu);
  if (!given(ir, LX_F_INTER_LINK)) ir->cluster.inter_node_link = default_inter_link(ir->cluster.gpu);
  lx_training *t = &ir->training;
  if (!given(ir, LX_F_STEPS)) t->steps = 100;
  if (!given(ir, LX_F_LR)) t->lr = 3e-4;
  if (!given(ir, LX_F_MIN_LR)) t->min_lr = t->lr / 10;
  if (!given(ir, LX_F_LR_SCHEDULE)) t->lr_schedule = LX_LR_COSINE;
  if (!given(ir, LX_F_BETA1)) t->beta1 = 0.9;
  if (!given(ir, LX_F_BETA2)) t->beta2 = 0.95;
  if (!given(ir, LX_F_EPS)) t->eps = 1e-8;
  if (!given(ir, LX_F_WEIGHT_DECAY)) t->weight_decay = 0.1;
  if (!given(ir, LX_F_GRAD_CLIP)) t->grad_clip = 1.0;
  if (!given(ir, LX_F_SEED)) t->seed = 1337;
  if (!given(ir, LX_F_DTYPE)) t->dtype = LX_DTYPE_BF16;
}

/* Every number of the configs has a range, checked where it was written (or
 * on the command line). The ranges are generous for real models (GPT-3 175B:
 * vocab 50257, seq_len 2048, hidden 12288, 96 layers; Llama 3 405B: vocab
 * 128256, hidden 16384, ffn 53248, 126 layers) and keep the 64-bit integers
 * that later passes compute from them exact:
 *  - tokens per micro-batch b s <= 2^16 x 2^22 = 2^38, widths <= 2^24 (the
 *    vocabulary; operator widths are bounded alike in the front end), so one
 *    op's sizes are products of at most 2^38 x 2^24 x 4 bytes; sizes_fit()
 *    rejects an op above 2^52 bytes before they are multiplied, and
 *    check_totals() a plan whose stages would hold more than 2^60 bytes, so
 *    that sums over layers (<= 2^12) and micro-batches (<= 2^24) fit;
 *  - products of plan fields stay below 2^31 where they are ints: tp <= 64,
 *    pp <= layers <= 2^12, dp <= 2^20 (tp pp dp <= nodes x gpus_per_node <=
 *    2^22), micro_batch x dp <= global_batch <= 2^24 (check_relations());
 *  - the padded vocabulary < 2^24 + 128 x 64, the default ffn_hidden 4 hidden
 *    <= 2^19: ints;
 *  - step counts stay below 2^30 so that the emitted programs' int counters
 *    cannot overflow. */
typedef struct {
  lx_field field;
  const char *name;
  lx_srcloc *config;
  int *value;
  int min, max; /* inclusive */
  bool required;
} int_rule;

static void check_int(const lx_ir *ir, const int_rule *r) {
  if (!given(ir, r->field)) {
    if (r->required) lx_error(*r->config, "missing field '.%s'", r->name);
    return;
  }
  if (*r->value < r->min || *r->value > r->max)
    lx_error(ir->locs.field[r->field], "field '.%s' = %d is out of range [%d, %d]", r->name, *r->value,
             r->min, r->max);
}

static void check_int_ranges(lx_ir *ir) {
  lx_config_locs *l = &ir->locs;
  const int steps = 1 << 30;
  const int_rule rules[] = {
      {LX_F_VOCAB, "vocab", &l->model, &ir->model.vocab, 1, 1 << 24, true},
      {LX_F_SEQ_LEN, "seq_len", &l->model, &ir->model.seq_len, 1, 1 << 22, true},
      {LX_F_LAYERS, "layers", &l->model, &ir->model.layers, 1, 1 << 12, true},
      {LX_F_HIDDEN, "hidden", &l->model, &ir->model.hidden, 1, 1 << 17, true},
      {LX_F_HEADS, "heads", &l->model, &ir->model.heads, 1, 1 << 17, true},
      {LX_F_KV_HEADS, "kv_heads", &l->model, &ir->model.kv_heads, 1, 1 << 17, false},
      {LX_F_FFN_HIDDEN, "ffn_hidden", &l->model, &ir->model.ffn_hidden, 1, 1 << 20, false},
      {LX_F_GPU, "gpu", &l->cluster, (int *)&ir->cluster.gpu, LX_GPU_V100_32GB, LX_GPU_GH200_96GB, true},
      {LX_F_NODES, "nodes", &l->cluster, &ir->cluster.nodes, 1, 1 << 16, false},
      {LX_F_GPUS_PER_NODE, "gpus_per_node", &l->cluster, &ir->cluster.gpus_per_node, 1, 64, true},
      {LX_F_INTRA_LINK, "intra_node_link", &l->cluster, (int *)&ir->cluster.intra_node_link, LX_LINK_NVLINK2,
       LX_LINK_IB_NDR, false},
      {LX_F_INTER_LINK, "inter_node_link", &l->cluster, (int *)&ir->cluster.inter_node_link, LX_LINK_NVLINK2,
       LX_LINK_IB_NDR, false},
      {LX_F_TP, "tp", &l->plan, &ir->plan.tp, 0, 64, false},
      {LX_F_PP, "pp", &l->plan, &ir->plan.pp, 0, 1 << 12, false},
      {LX_F_DP, "dp", &l->plan, &ir->plan.dp, 0, 1 << 20, false},
      {LX_F_MICRO_BATCH, "micro_batch", &l->plan, &ir->plan.micro_batch, 0, 1 << 16, false},
      {LX_F_GLOBAL_BATCH, "global_batch", &l->plan, &ir->plan.global_batch, 0, 1 << 24, false},
      {LX_F_SCHEDULE, "schedule", &l->plan, (int *)&ir->plan.schedule, 0, LX_SCHEDULE_COUNT - 1, false},
      {LX_F_VIRTUAL_STAGES, "virtual_stages", &l->plan, &ir->plan.virtual_stages, 0, LX_MAX_VIRTUAL_STAGES,
       false},
      {LX_F_MINI_SEQUENCES, "mini_sequences", &l->plan, &ir->plan.mini_sequences, 0, 1 << 22, false},
      {LX_F_STEPS, "steps", &l->training, &ir->training.steps, 1, steps, false},
      {LX_F_WARMUP, "warmup_steps", &l->training, &ir->training.warmup_steps, 0, steps, false},
      {LX_F_LR_SCHEDULE, "lr_schedule", &l->training, (int *)&ir->training.lr_schedule, LX_LR_CONSTANT,
       LX_LR_LINEAR, false},
      {LX_F_DTYPE, "dtype", &l->training, (int *)&ir->training.dtype, LX_DTYPE_BF16, LX_DTYPE_FP32, false},
      {LX_F_VAL_INTERVAL, "val_interval", &l->training, &ir->training.val_interval, 0, steps, false},
      {LX_F_CHECKPOINT_INTERVAL, "checkpoint_interval", &l->training, &ir->training.checkpoint_interval, 0,
       steps, false},
  };
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    check_int(ir, &rules[i]);
}

/* The double fields: finite (the front end made sure) and in these ranges.
 * eps stays a normal number in fp32 and bf16 (>= 2^-126), or the emitted
 * AdamW could divide 0 by 0. */
typedef struct {
  lx_field field;
  const char *name;
  double value, min, max;
  bool open_min, open_max;
} double_rule;

static void check_double(const lx_ir *ir, const double_rule *r) {
  double v = r->value;
  bool below = r->open_min ? !(v > r->min) : !(v >= r->min);
  bool above = r->open_max ? !(v < r->max) : !(v <= r->max);
  if (given(ir, r->field) && (below || above))
    lx_error(ir->locs.field[r->field], "field '.%s' = %g is out of range %c%g, %g%c", r->name, v,
             r->open_min ? '(' : '[', r->min, r->max, r->open_max ? ')' : ']');
}

static void check_double_ranges(const lx_ir *ir) {
  const lx_training *t = &ir->training;
  const double_rule rules[] = {
      {LX_F_DROPOUT, "dropout", ir->model.dropout, 0, 1, false, true},
      {LX_F_ROPE_THETA, "rope_theta", ir->model.rope_theta, 1, 1e9, true, false},
      {LX_F_LR, "lr", t->lr, 0, 1, true, false},
      {LX_F_BETA1, "beta1", t->beta1, 0, 1, false, true},
      {LX_F_BETA2, "beta2", t->beta2, 0, 1, false, true},
      {LX_F_EPS, "eps", t->eps, 0x1p-126, 1, false, false},
      {LX_F_WEIGHT_DECAY, "weight_decay", t->weight_decay, 0, 1, false, false},
      {LX_F_GRAD_CLIP, "grad_clip", t->grad_clip, 0, 1e6, false, false},
      {LX_F_LORA_DROPOUT, "lora_dropout", t->lora_dropout, 0, 1, false, true},
  };
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    check_double(ir, &rules[i]);
  if (given(ir, LX_F_MIN_LR) && !(t->min_lr >= 0 && t->min_lr <= t->lr))
    lx_error(ir->locs.field[LX_F_MIN_LR], "field '.min_lr' = %g must be in [0, lr = %g]", t->min_lr, t->lr);
}

/* The data paths travel into C string literals and the run-time options of
 * the emitted programs (escaped there, escape.h). A control character in one
 * is a slip or an attack, never a file name a user wants; a path longer than
 * Linux's PATH_MAX could not be opened. */
enum { MAX_PATH_BYTES = 4096 };

static void check_path(const lx_ir *ir, lx_field field, const char *name, const char *path) {
  if (!path) return;
  size_t len = strlen(path);
  if (len == 0 || len >= MAX_PATH_BYTES) {
    lx_error(ir->locs.field[field], "field '.%s' must be a path of 1 to %d bytes, not %zu", name,
             MAX_PATH_BYTES - 1, len);
    return;
  }
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)path[i];
    if (ch < 0x20 || ch == 0x7f) {
      lx_error(ir->locs.field[field],
               "field '.%s' holds control character 0x%02x at byte %zu; a path may not", name, ch, i + 1);
      return;
    }
  }
}

/* Every micro-batch of a step is a run of instructions on every stage: the
 * schedule of gpt-23b (8 stages) at 4096 takes 30 s and 1.2 GB to plan, and
 * real runs use a few hundred. */
enum { MAX_MICRO_BATCHES = 4096 };

/* Interleaved 1F1B (Megatron): at least two chunks per stage on at least
 * two stages, each chunk at least one layer. */
static void check_virtual_stages(const lx_ir *ir) {
  const lx_plan *p = &ir->plan;
  lx_srcloc at = lx_relation_loc(
      ir, lx_field_loc(ir, LX_F_VIRTUAL_STAGES, lx_field_loc(ir, LX_F_SCHEDULE, ir->locs.plan)),
      (const lx_field[]){LX_F_VIRTUAL_STAGES, LX_F_SCHEDULE, LX_F_PP, LX_F_COUNT});
  if (p->schedule != LX_SCHEDULE_INTERLEAVED) {
    if (p->virtual_stages > 1)
      lx_error(at,
               "virtual_stages (%d) goes with schedule interleaved (the plan's is %s): set .schedule = "
               "SCHEDULE_INTERLEAVED or pass --schedule interleaved",
               p->virtual_stages, lx_schedule_name(p->schedule));
    return;
  }
  if (p->virtual_stages < 2)
    lx_error(at, "schedule interleaved needs virtual_stages of 2 or more (it is %d)", p->virtual_stages);
  else if (!ir->open_plan.pp && p->pp < 2)
    lx_error(lx_relation_loc(ir, lx_field_loc(ir, LX_F_PP, ir->locs.plan),
                             (const lx_field[]){LX_F_PP, LX_F_SCHEDULE, LX_F_COUNT}),
             "schedule interleaved needs pp of 2 or more (it is %d)", p->pp);
  else if (!ir->open_plan.pp && (long long)p->pp * p->virtual_stages > ir->model.layers)
    lx_error(at, "fewer layers (%d) than model chunks (pp x virtual_stages = %d x %d)", ir->model.layers,
             p->pp, p->virtual_stages);
}

/* Relations between fields: each error names both numbers. */
static void check_relations(const lx_ir *ir) {
  const lx_model_config *m = &ir->model;
  const lx_plan *p = &ir->plan;
  const lx_config_locs *l = &ir->locs;
  lx_srcloc heads_at = lx_field_loc(ir, LX_F_HEADS, l->model);
  if (m->hidden % m->heads) lx_error(heads_at, "heads (%d) do not divide hidden (%d)", m->heads, m->hidden);
  if (m->heads % m->kv_heads)
    lx_error(lx_field_loc(ir, LX_F_KV_HEADS, heads_at), "kv_heads (%d) do not divide heads (%d)", m->kv_heads,
             m->heads);
  if (!ir->open_plan.tp) {
    lx_srcloc tp_at = lx_field_loc(ir, LX_F_TP, l->plan);
    if (m->heads % p->tp)
      lx_error(tp_at, "tp (%d) does not divide heads (%d)", p->tp, m->heads);
    else if (m->kv_heads % p->tp)
      lx_error(tp_at, "tp (%d) does not divide kv_heads (%d)", p->tp, m->kv_heads);
    else if (m->ffn_hidden % p->tp)
      lx_error(tp_at, "tp (%d) does not divide ffn_hidden (%d)", p->tp, m->ffn_hidden);
    if (p->tp > ir->cluster.gpus_per_node)
      lx_error(tp_at, "tp (%d) exceeds gpus_per_node (%d): tensor parallelism stays inside a node", p->tp,
               ir->cluster.gpus_per_node);
  }
  if (p->pp > m->layers)
    lx_error(lx_relation_loc(ir, lx_field_loc(ir, LX_F_PP, l->plan),
                             (const lx_field[]){LX_F_PP, LX_F_LAYERS, LX_F_COUNT}),
             "fewer layers (%d) than pipeline stages (pp = %d)", m->layers, p->pp);
  check_virtual_stages(ir);
  long long tokens = (long long)p->micro_batch * m->seq_len;
  if (!ir->open_plan.micro_batch && tokens > INT_MAX) /* the search's micro-batches stay far below */
    lx_error(lx_field_loc(ir, LX_F_MICRO_BATCH, l->plan),
             "micro_batch x seq_len = %d x %d is %lld tokens per micro-batch; the emitted programs count a "
             "micro-batch's tokens in int (at most %d)",
             p->micro_batch, m->seq_len, tokens, INT_MAX);
  long long gpus = (long long)ir->cluster.nodes * ir->cluster.gpus_per_node;
  const lx_open_plan *open = &ir->open_plan; /* the search checks the fields it chooses */
  if (!open->tp && !open->pp && !open->dp && (long long)p->tp * p->pp * p->dp > gpus)
    lx_error(lx_relation_loc(ir, l->plan, (const lx_field[]){LX_F_TP, LX_F_PP, LX_F_DP, LX_F_COUNT}),
             "tp x pp x dp = %d x %d x %d needs %lld GPUs; the cluster has %lld", p->tp, p->pp, p->dp,
             (long long)p->tp * p->pp * p->dp, gpus);
  if (p->global_batch && !open->micro_batch) {
    long long per_step = (long long)p->micro_batch * p->dp;
    lx_srcloc at =
        lx_relation_loc(ir, lx_field_loc(ir, LX_F_GLOBAL_BATCH, l->plan),
                        (const lx_field[]){LX_F_GLOBAL_BATCH, LX_F_MICRO_BATCH, LX_F_DP, LX_F_COUNT});
    if (p->global_batch % per_step)
      lx_error(at, "global_batch (%d) is not a multiple of micro_batch x dp (%lld)", p->global_batch,
               per_step);
    else if (p->global_batch / per_step > MAX_MICRO_BATCHES)
      lx_error(at,
               "global_batch / (micro_batch x dp) = %d / %lld is %lld micro-batches per step; lynxgen "
               "schedules at "
               "most %d (a larger micro_batch or dp makes fewer)",
               p->global_batch, per_step, p->global_batch / per_step, MAX_MICRO_BATCHES);
  }
}

/* An open field counts as 1 from here on (an open schedule as 1F1B), and
 * open_plan says it was open.
 * The plan search sets the fields it chooses before analysing again. */
static void resolve_open_plan(lx_ir *ir) {
  int *fields[] = {&ir->plan.tp, &ir->plan.pp, &ir->plan.dp, &ir->plan.micro_batch};
  bool *open[] = {&ir->open_plan.tp, &ir->open_plan.pp, &ir->open_plan.dp, &ir->open_plan.micro_batch};
  for (int k = 0; k < 4; k++) {
    *open[k] = *fields[k] == LX_OPEN;
    if (*open[k]) *fields[k] = 1;
  }
  /* chunks per stage asked for, the schedule left open: interleaved 1F1B is meant */
  if (ir->plan.schedule == LX_SCHEDULE_OPEN && ir->plan.virtual_stages > 1)
    ir->plan.schedule = LX_SCHEDULE_INTERLEAVED;
  ir->open_plan.mini_sequences = ir->plan.mini_sequences == LX_OPEN;
  if (ir->open_plan.mini_sequences) ir->plan.mini_sequences = 1;
  ir->open_plan.schedule = ir->plan.schedule == LX_SCHEDULE_OPEN;
  if (ir->open_plan.schedule) ir->plan.schedule = LX_SCHEDULE_1F1B;
  if (ir->plan.virtual_stages == LX_OPEN)
    ir->plan.virtual_stages = ir->plan.schedule == LX_SCHEDULE_INTERLEAVED ? 2 : 1;
}

int lx_check_config_values(lx_ir *ir) {
  int errors_before = lx_error_count();
  check_int_ranges(ir); /* first: defaults are computed from the values it bounds */
  if (lx_error_count() != errors_before) return lx_error_count() - errors_before;
  apply_defaults(ir);
  check_double_ranges(ir);
  check_path(ir, LX_F_TRAIN_DATA, "train_data", ir->training.train_data);
  check_path(ir, LX_F_VAL_DATA, "val_data", ir->training.val_data);
  if (lx_error_count() != errors_before) return lx_error_count() - errors_before;
  resolve_open_plan(ir);
  check_relations(ir);
  return lx_error_count() - errors_before;
}
