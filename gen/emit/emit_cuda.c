/* emit_cuda.c — the CUDA printer: one host C++ program per pipeline stage
 * (stageN.cu) that launches the kernels of templates/cuda (compiled once, in
 * lx_kernels.cu) on one cudaStream_t per schedule stream.
 *
 * bf16 activations and weights, fp32 master weights, gradients and AdamW
 * state, all in one cudaMalloc arena laid out by the static memory plan
 * (param_elt 2, master copy). RECORD and WAIT become cudaEventRecord and
 * cudaStreamWaitEvent exactly where the schedule has them; the shared walker
 * (emit_walk.c) issues every RECORD before the WAITs on its event. */
#include <stdlib.h>
#include <string.h>

#include "analysis/cost.h"
#include "diag.h"
#include "emit/emit_file.h"
#include "emit/emit_fusion.h"
#include "emit/emit_graphs.h"
#include "emit/emit_names.h"
#include "emit/emit_op.h"
#include "emit/emit_operands.h"
#include "emit/emit_reroll.h"
#include "emit/emit_walk.h"
#include "escape.h"
#include "verify/access.h"

/* ---- one op ------------------------------------------------------------------ */

/* A tensor-parallel collective on `stream` (bf16 sums): an all-reduce in
 * place, or sequence parallelism's reduce-scatter into the shard or
 * all-gather of the shards. */
static void print_nccl_call(FILE *f, lx_tp_collective coll, const lx_tp_operands *t, const char *stream) {
  switch (coll) {
  case LX_COLL_ALLREDUCE:
    fprintf(f, "lx_comm_all_reduce(%s, %s, (size_t)%s * %d, LX_COMM_BF16, LX_COMM_SUM, &tp_comm, %s);\n",
            t->shard, t->shard, t->rows, t->width, stream);
    break;
  case LX_COLL_REDUCE_SCATTER:
    fprintf(f, "lx_comm_reduce_scatter(%s, %s, (size_t)%s * %d, LX_COMM_BF16, &tp_comm, %s);\n", t->whole,
            t->shard, t->rows, t->width, stream);
    break;
  case LX_COLL_ALLGATHER:
    fprintf(f, "lx_comm_all_gather(%s, %s, (size_t)%s * %d, LX_COMM_BF16, &tp_comm, %s);\n", t->shard,
            t->whole, t->rows, t->width, stream);
    break;
  }
}

/* In the graph functions: the gather before op i, or the reduction after
 * it, in order on the function's stream. */
static void print_blocking_collective(const lx_printer *pr, lx_graph_id g, int i, bool backward,
                                      lx_tensor_role role, bool before) {
  emit_blocking_collective(pr, g, i, backward, role, before, print_nccl_call, "ctx->stream");
}

static void print_op_comment(const lx_printer *pr, const lx_op *op, const char *what) {
  char file[LX_TEXT_MAX];
  fprintf(pr->out, "  /* %s %s = %s(...)  %s:%d */\n", what, op->var[0] ? op->var : op->name,
          lx_op_kind_name(op->kind), emit_file_name(op->src.file, file), op->src.line);
}

/* The op's --profile slot: the ops of the prologue, the block and the epilogue, numbered in turn. */
static int prof_slot(const lx_printer *pr, lx_graph_id g, int i) {
  int before = 0;
  for (lx_graph_id h = LX_GRAPH_PROLOGUE; h < g; h++)
    before += lx_graph_of(pr->ir, h)->n_ops;
  return before + i;
}

/* ---- fused pairs (emit_fusion.c) --------------------------------------------- */

/* Linear i and the gelu after it as one matmul: the linear's output (the
 * gelu's saved input) is the epilogue's aux matrix. */
static void print_linear_gelu_forward(const lx_printer *pr, lx_graph_id g, int i, lx_tensor_role out_role) {
  lx_kernel_call linear_call, *linear = &linear_call;
  emit_kernel_call(pr, g, i, out_role, false, linear);
  const lx_op *op = linear->op;
  lx_operands gelu;
  emit_gather_operands(pr, g, i + 1, out_role, false, &gelu);
  fprintf(pr->out,
          "  /* with the gelu below: cuBLASLt's GELU epilogue, the pre-activation kept as %s's output */\n"
          "  lx_linear_gelu_forward(ctx, %s, %s, %s, %d, %d);\n",
          op->var[0] ? op->var : op->name, gelu.out, linear->args, linear->rows, emit_in_width(pr, g, op),
          linear->width);
}

/* Add i and the norm after it in one pass over each row: the sum (the
 * norm's saved input) and the normalised output written together. */
static void print_residual_norm_forward(const lx_printer *pr, lx_graph_id g, int i, lx_tensor_role out_role) {
  const char *rows = emit_rows(pr, emit_op_at(pr, g, i));
  lx_operands add, norm;
  emit_gather_operands(pr, g, i, out_role, false, &add);
  emit_gather_operands(pr, g, i + 1, out_role, false, &norm);
  const lx_op *op = emit_op_at(pr, g, i + 1);
  bool layernorm = op->kind == LX_OP_LAYERNORM;
  const char *kind = lx_op_kind_name(op->kind);
  fprintf(pr->out,
          "  /* with the %s below: one pass over each row writes the sum and its norm */\n"
          "  lx_residual_%s_forward(ctx, %s, %s, %s, %s, %s%s%s, %s, %d);\n",
          kind, kind, add.out, norm.out, add.in[0], add.in[1], norm.w, layernorm ? ", " : "",
          layernorm ? norm.b : "", rows, emit_rank_width(pr, op->out));
}

/* Linear i's backward with the gelu in front of it: the weight and bias
 * gradients as usual (unless a W pass computes them), the input gradient
 * through the DGELU epilogue. */
static void print_linear_dgelu_backward(const lx_printer *pr, lx_graph_id g, int i) {
  const lx_op *op = emit_op_at(pr, g, i);
  lx_operands o, gelu;
  emit_gather_operands(pr, g, i, LX_T_OUTPUT, true, &o);
  emit_gather_operands(pr, g, i - 1, LX_T_OUTPUT, true, &gelu);
  int in_width = emit_in_width(pr, g, op), width = emit_rank_width(pr, op->out);
  char modes[64];
  emit_grad_modes(pr, g, i, modes, sizeof modes);
  if (!lx_defers_weight_grad(pr->ir, pr->st, g, i))
    fprintf(pr->out, "  lx_linear_backward(ctx, NULL, %s, %s, %s, %s, %s, %s, %d, %d%s);\n", o.dw, o.db,
            o.dout, o.in[0], o.w, emit_rows(pr, op), in_width, width, modes);
  fprintf(
      pr->out,
      "  /* with the gelu above: its input gradient straight from this one's, cuBLASLt's DGELU epilogue */\n"
      "  lx_linear_dgelu_backward(ctx, %s, %s, %s, %s, %s, %d, %d);\n",
      gelu.din[0], o.dout, o.w, gelu.in[0], emit_rows(pr, op), in_width, width);
}

/* An op whose work the fused call of the op before it (forward) or after it
 * (backward) does: a comment, and the end of its --profile interval, which
 * so measures what the op adds (nothing: the other op's time includes it). */
static bool print_if_absorbed(const lx_printer *pr, lx_graph_id g, int i, bool backward) {
  int partner = backward ? i + 1 : i - 1;
  if (!emit_fused(pr, g, partner, backward ? LX_FUSE_DGELU : LX_FUSE_FORWARD)) return false;
  const lx_op *op = emit_op_at(pr, g, i);
  fprintf(pr->out, "  /* %s %s: done by the %s above, in the same call */\n  lx_prof_end(ctx->stream);\n",
          backward ? "BWD" : "FWD", op->var[0] ? op->var : op->name,
          lx_op_kind_name(emit_op_at(pr, g, partner)->kind));
  return true;
}

static void print_forward_op(const lx_printer *pr, lx_graph_id g, int i, lx_tensor_role out_role) {
  const lx_op *op = emit_op_at(pr, g, i);
  print_op_comment(pr, op, out_role == LX_T_RECOMPUTED ? "RECOMPUTE" : "FWD");
  if (pr->head_pieces) { /* --profile times whole calls, what the cost model prices */
    emit_op_call(pr, &lx_cuda_kernels, g, i, out_role, false);
    return;
  }
  fprintf(pr->out, "  lx_prof_begin(%d, 0, ctx->stream);\n", prof_slot(pr, g, i));
  if (print_if_absorbed(pr, g, i, false)) return;
  if (op->kind == LX_OP_LINEAR && emit_fused(pr, g, i, LX_FUSE_GELU))
    print_linear_gelu_forward(pr, g, i, out_role);
  else if (op->kind == LX_OP_ADD && emit_fused(pr, g, i, LX_FUSE_RESIDUAL_NORM))
    print_residual_norm_forward(pr, g, i, out_role);
  else
    emit_op_call(pr, &lx_cuda_kernels, g, i, out_role, false);
  fputs("  lx_prof_end(ctx->stream);\n", pr->out);
}

static void print_backward_op(const lx_printer *pr, lx_graph_id g, int i) {
  const lx_op *op = emit_op_at(pr, g, i);
  print_op_comment(pr, op, pr->weight_pass ? "BWD_WEIGHT" : "BWD");
  fprintf(pr->out, "  lx_prof_begin(%d, 1, ctx->stream);\n", prof_slot(pr, g, i));
  if (!pr->weight_pass && print_if_absorbed(pr, g, i, true)) return;
  if (!pr->weight_pass && op->kind == LX_OP_LINEAR && emit_fused(pr, g, i, LX_FUSE_DGELU))
    print_linear_dgelu_backward(pr, g, i);
  else
    emit_op_call(pr, &lx_cuda_kernels, g, i, LX_T_OUTPUT, true);
  fputs("  lx_prof_end(ctx->stream);\n", pr->out);
}

/* ---- graph functions: one per graph and direction, on the caller's context ---- */

static const lx_graph_printer graph_printer = {print_forward_op, print_backward_op, print_blocking_collective,
                                               "  CUDA_CHECK(cudaMemsetAsync(%s, 0, %lld, ctx->stream));\n"};

/* ---- the step: the walker's hooks --------------------------------------------- */

typedef struct {
  const lx_printer *pr;
  bool nccl_group_open; /* consecutive point-to-point calls pair in one NCCL group */
} cuda_step;

static const char *stream_var(lx_stream k) {
  static const char *names[] = {"STREAM_COMPUTE", "STREAM_RECOMPUTE", "STREAM_SEND",    "STREAM_RECV",
                                "STREAM_TP",      "STREAM_DP",        "STREAM_OFFLOAD", "STREAM_PREFETCH"};
  _Static_assert(sizeof names / sizeof names[0] == LX_STREAM_COUNT, "one name per stream");
  return names[k];
}

static void describe(const cuda_step *w, const lx_instr *in, char *buf, size_t size) {
  lx_instr_describe(w->pr->ir, in, buf, size);
}

/* The model-file line an instruction comes from: its op's, or the graph's. */
static int instr_line(const lx_printer *pr, const lx_instr *in) {
  if (in->op >= 0 && (in->kind == LX_I_FWD || in->kind == LX_I_BWD || in->kind == LX_I_BWD_WEIGHT ||
                      in->kind == LX_I_RECOMPUTE || in->kind == LX_I_LOAD))
    return emit_op_at(pr, in->graph, in->op)->src.line;
  return lx_graph_of(pr->ir, LX_GRAPH_BLOCK)->src.line;
}

static void close_group(cuda_step *w) {
  if (!w->nccl_group_open) return;
  fputs("  lx_comm_group_end();\n", w->pr->out);
  w->nccl_group_open = false;
}

static void cuda_close_group(void *ctx) { close_group(ctx); }

static void cuda_run(void *ctx, lx_stream k, const lx_instr *first, int count) {
  cuda_step *w = ctx;
  const lx_printer *pr = w->pr;
  close_group(w);
  char what[128], layer[16], name[LX_TEXT_MAX];
  describe(w, first, what, sizeof what);
  const char *graph = lx_graph_of(pr->ir, first->graph)->name;
  fprintf(pr->out, "  /* %s (%d instruction%s, %s stream)  %s:%d */\n", what, count, count == 1 ? "" : "s",
          lx_stream_name(k), emit_file_name(pr->ir->model_path, name), instr_line(pr, first));
  if (!emit_run_is_function(pr, first, count)) {
    /* part of a graph instance (between tensor-parallel all-reduces, or the
     * part of a recomputation a window took): its ops inline */
    fprintf(pr->out,
            "  {\n    const int layer = %s, mb = %d;\n    (void)layer;\n    (void)mb;\n"
            "    const lx_ctx *ctx = &ctx_of[%s];\n",
            emit_layer_text(first, layer, sizeof layer), first->mb, stream_var(k));
    emit_partial_run(pr, &graph_printer, first, count);
    fputs("  }\n", pr->out);
  } else if (first->graph == LX_GRAPH_BLOCK) {
    fprintf(pr->out, "  %s_%s(&ctx_of[%s], %d, %d);\n", emit_run_function(first->kind), graph, stream_var(k),
            first->layer, first->mb);
  } else {
    fprintf(pr->out, "  %s_%s(&ctx_of[%s], %d);\n", emit_run_function(first->kind), graph, stream_var(k),
            first->mb);
  }
}

static void cuda_load(void *ctx, const lx_instr *in) {
  cuda_step *w = ctx;
  close_group(w);
  fprintf(w->pr->out, "  load_micro_batch(%d, streams[STREAM_COMPUTE]); /* LOAD mb%d */\n", in->mb, in->mb);
}

static bool is_p2p(lx_instr_kind k) {
  return k == LX_I_SEND_ACT || k == LX_I_RECV_ACT || k == LX_I_SEND_GRAD || k == LX_I_RECV_GRAD;
}

static void print_p2p(cuda_step *w, lx_stream k, const lx_instr *in) {
  const lx_printer *pr = w->pr;
  char buf[PTR], what[128], name[LX_TEXT_MAX];
  describe(w, in, what, sizeof what);
  lx_tensor_ref t = emit_ref(pr, LX_GRAPH_BLOCK, 0, LX_T_OUTPUT, 0); /* RECV_ACT: the first layer's input */
  if (in->kind == LX_I_SEND_ACT) t.role = LX_T_SEND_ACT;
  if (in->kind == LX_I_SEND_GRAD) t.role = LX_T_SEND_GRAD;
  if (in->kind == LX_I_RECV_GRAD) t.role = LX_T_RECV_GRAD;
  bool send = in->kind == LX_I_SEND_ACT || in->kind == LX_I_SEND_GRAD;
  if (!w->nccl_group_open) fputs("  lx_comm_group_start();\n", pr->out);
  w->nccl_group_open = true;
  char layer[16];
  fprintf(pr->out,
          "  { /* %s  %s:%d */\n    const int mb = %d, layer = %s;\n    (void)mb;\n    (void)layer;\n", what,
          emit_file_name(pr->ir->model_path, name), instr_line(pr, in), in->mb,
          emit_chunk_layer(pr, in->chunk, layer, sizeof layer));
  fprintf(pr->out,
          "    lx_channel_%s(%s, BOUNDARY_ELEMENTS, LX_COMM_BF16, &channels[%s], streams[%s]);\n  }\n",
          send ? "send" : "recv", emit_at(pr, buf, sizeof buf, t),
          lx_channel_name(lx_transfer_channel(in->kind)), stream_var(k));
}

/* A tensor-parallel collective the schedule placed on its stream. */
static void print_tp_collective(const lx_printer *pr, lx_stream k, const lx_instr *in, const char *what) {
  char layer[16], stream[32];
  lx_tp_operands t;
  emit_tp_collective_operands(pr, in->graph, in->op, in->backward, in->coll,
                              in->recomputed ? LX_T_RECOMPUTED : LX_T_OUTPUT, &t);
  fprintf(pr->out, "  { /* %s */\n    const int layer = %s, mb = %d;\n    (void)layer;\n    (void)mb;\n    ",
          what, emit_layer_text(in, layer, sizeof layer), in->mb);
  snprintf(stream, sizeof stream, "streams[%s]", stream_var(k));
  print_nccl_call(pr->out, in->coll, &t, stream);
  fputs("  }\n", pr->out);
}

/* A bucket's fp32 gradients across the replicas; under ZeRO-1 a
 * reduce-scatter, in place: replica r's summed share lands at its own place
 * in the bucket (NCCL's recvbuff = sendbuff + r * count, lx_cuda_shards.h). */
static void print_dp_reduce(const lx_printer *pr, lx_stream k, const lx_instr *in, const char *what) {
  const lx_param_bucket *b = lx_find_bucket(pr->l, in->graph, in->layer, in->tied);
  long long first = (long long)b->first, chunk = (long long)(b->elements / pr->l->shards);
  if (pr->l->shards > 1)
    fprintf(pr->out,
            "  /* %s */\n  lx_comm_reduce_scatter(GRAD_REGION + %lldLL, GRAD_REGION + %lldLL + replica * %lldLL, "
            "%lldLL, LX_COMM_F32, &dp_comm, streams[%s]);\n",
            what, first, first, chunk, chunk, stream_var(k));
  else
    fprintf(pr->out,
            "  /* %s */\n  lx_comm_all_reduce(GRAD_REGION + %lldLL, GRAD_REGION + %lldLL, %lldLL, LX_COMM_F32, "
            "LX_COMM_SUM, &dp_comm, streams[%s]);\n",
            what, first, first, (long long)b->elements, stream_var(k));
}

/* OFFLOAD and PREFETCH: copies between the arena and pinned host memory on
 * their own streams (the copy engines, both directions at once). */
static void print_host_copies(const lx_printer *pr, lx_stream k, const lx_instr *in, const char *what) {
  emit_host_copy copies[LX_MAX_SAVED + 1];
  int n = emit_host_copies(pr, in, copies);
  char layer[16];
  fprintf(pr->out, "  { /* %s */\n    const int layer = %s, mb = %d;\n    (void)layer;\n    (void)mb;\n",
          what, emit_layer_text(in, layer, sizeof layer), in->mb);
  bool offload = in->kind == LX_I_OFFLOAD;
  for (int c = 0; c < n; c++)
    fprintf(pr->out, "    CUDA_CHECK(cudaMemcpyAsync(%s, %s, %lldLL, %s, streams[%s]));\n",
            offload ? copies[c].host : copies[c].device, offload ? copies[c].device : copies[c].host,
            copies[c].bytes, offload ? "cudaMemcpyDeviceToHost" : "cudaMemcpyHostToDevice", stream_var(k));
  fputs("  }\n", pr->out);
}

static void cuda_comm(void *ctx, lx_stream k, const lx_instr *in) {
  cuda_step *w = ctx;
  if (is_p2p(in->kind)) {
    print_p2p(w, k, in);
    return;
  }
  close_group(w);
  char what[128];
  describe(w, in, what, sizeof what);
  if (in->kind == LX_I_OFFLOAD || in->kind == LX_I_PREFETCH)
    print_host_copies(w->pr, k, in, what);
  else if (in->kind == LX_I_ALLREDUCE_DP)
    print_dp_reduce(w->pr, k, in, what);
  else
    print_tp_collective(w->pr, k, in, what);
}

static void cuda_record(void *ctx, lx_stream k, const lx_instr *in) {
  cuda_step *w = ctx;
  close_group(w);
  fprintf(w->pr->out, "  CUDA_CHECK(cudaEventRecord(events[%d], streams[%s])); /* RECORD e%d */\n", in->event,
          stream_var(k), in->event);
}

static void cuda_wait(void *ctx, lx_stream k, const lx_instr *in, lx_stream recorded_on) {
  cuda_step *w = ctx;
  close_group(w);
  if (recorded_on == k) return; /* program order on the stream already says it */
  fprintf(w->pr->out,
          "  CUDA_CHECK(cudaStreamWaitEvent(streams[%s], events[%d], 0)); /* WAIT e%d (from %s) */\n",
          stream_var(k), in->event, in->event, lx_stream_name(recorded_on));
}

static void print_step(const lx_printer *pr) {
  fprintf(pr->out,
          "\n/* One optimizer step's forwards and backwards, in the order of the schedule\n"
          " * (%s, plan.txt): every stream's instructions on its own cudaStream_t,\n"
          " * issued so that each event is recorded before it is waited for. */\n"
          "static void run_schedule(int step, int ahead) {\n  current_step = step;\n",
          lx_schedule_name(pr->p->kind));
  emit_step_pipeline(pr, "");
  lx_step_text text;
  lx_printer body = *pr;
  body.out = emit_step_begin(&text, pr->out, pr->reroll);
  cuda_step w = {&body, false};
  lx_walk_guard guard = {.out = &body.out};
  lx_walk_hooks hooks = {&w,          cuda_run,  cuda_load, cuda_comm,
                         cuda_record, cuda_wait, &guard,    cuda_close_group};
  lx_walk_stage(pr->st, &hooks);
  close_group(&w);
  emit_step_end(&text);
  emit_step_pipeline_end(pr);
  fputs("  /* the step ends when every stream has drained into the compute stream */\n"
        "  for (int k = 1; k < STREAM_COUNT; k++) {\n"
        "    CUDA_CHECK(cudaEventRecord(stream_done[k], streams[k]));\n"
        "    CUDA_CHECK(cudaStreamWaitEvent(streams[STREAM_COMPUTE], stream_done[k], 0));\n  }\n}\n",
        pr->out);
}

/* ---- data ------------------------------------------------------------------------ */

/* Tokens and targets of micro-batch mb, read on the host before the step
 * and copied in; a middle stage loads nothing (it has no LOAD instruction). */
static bool loads_tokens(const lx_printer *pr) { return pr->st->has_prologue || pr->st->has_epilogue; }

static void print_load(const lx_printer *pr) {
  fprintf(pr->out, "\nenum { LOADS_TOKENS = %d }; /* the stage reads the token shards */\n",
          loads_tokens(pr));
  if (!loads_tokens(pr)) return;
  char tokens[PTR], targets[PTR];
  emit_load_operands(pr, "NULL", tokens, targets);
  fprintf(pr->out,
          "/* LOAD: micro-batch mb's tokens (B, T) and targets (B, T); only the first\n"
          " * stage keeps inputs, the last targets. */\n"
          "static void load_micro_batch(int mb, cudaStream_t stream) {\n"
          "  lx_cuda_load(%s, %s, %s, BT, stream);\n}\n",
          tokens, targets,
          pr->p->kind == LX_SCHEDULE_2BW ? "(int)(RUN_MB(mb) % (2 * MICRO_BATCHES)) /* the staged ring */"
                                         : "mb");
}

/* Forward only, micro-batch after micro-batch on the compute stream, for
 * validation: a stage receives its input from the previous one and sends its
 * output to the next with NCCL calls in the same order on both sides. */
static void print_forward_pass(const lx_printer *pr) {
  FILE *f = pr->out;
  fputs("\n/* Forward only (validation): the losses of the micro-batches staged for it. */\n"
        "static void run_forward(int step) {\n  current_step = step;\n"
        "  const lx_ctx *ctx = &ctx_of[STREAM_COMPUTE];\n",
        f);
  fprintf(f, "  for (int mb = %s; mb++) {\n", emit_forward_only_range(pr));
  if (loads_tokens(pr)) fputs("    load_micro_batch(mb, ctx->stream);\n", f);
  emit_forward_only_chunks(
      pr,
      "lx_channel_recv(%s, BOUNDARY_ELEMENTS, LX_COMM_BF16, &channels[ACT_FROM_PREVIOUS], "
      "ctx->stream); /* from stage %s */",
      "lx_channel_send(%s, BOUNDARY_ELEMENTS, LX_COMM_BF16, &channels[ACT_TO_NEXT], "
      "ctx->stream); /* to stage %s */");
  fputs("  }\n}\n", f);
}

/* The profile-file fields (docs/cost-model.md) of every op, by slot: with
 * --profile the program measures each op and writes them with its times. */
static void print_profile_table(const lx_printer *pr) {
  FILE *f = pr->out;
  int slots = prof_slot(pr, LX_GRAPH_EPILOGUE, lx_graph_of(pr->ir, LX_GRAPH_EPILOGUE)->n_ops);
  fprintf(f,
          "\n/* --profile: what each op's line of the profile file says before its times */\n"
          "enum { PROF_SLOTS = %d };\nstatic const lx_prof_op prof_ops[PROF_SLOTS] = {\n",
          slots);
  for (lx_graph_id g = LX_GRAPH_PROLOGUE; g <= LX_GRAPH_EPILOGUE; g++) {
    const lx_graph *graph = lx_graph_of(pr->ir, g);
    for (int i = 0; i < graph->n_ops; i++) {
      const lx_op *op = &graph->ops[i];
      char key[128], attrs[96], where[2 * LX_TEXT_MAX];
      if (op->kind == LX_OP_INPUT) {
        fputs("    {NULL, NULL, NULL},\n", f);
        continue;
      }
      lx_cost_profile_key(pr->ir, graph, op, key, sizeof key, attrs, sizeof attrs);
      snprintf(where, sizeof where, "%s %s (%s:%d)", graph->name, op->var[0] ? op->var : op->name,
               lx_file_name(op->src.file), op->src.line);
      fprintf(f, "    {\"%s\", \"%s\", ", key, attrs);
      lx_put_c_string(f, where);
      fputs("},\n", f);
    }
  }
  fputs("};\n", f);
}

/* ---- prelude --------------------------------------------------------------------- */

/* The receives a stage can have in flight at once, for --comm host's pinned
 * staging (lx_cuda_comm.h): a step's and the next one's (the schedule's
 * receive list, posted ahead of use), or a forward-only pass's, one per
 * micro-batch and chunk. */
static void emit_staged_receives(const lx_printer *pr) {
  int step = pr->st->streams[LX_STREAM_RECV].count, forward_only = pr->p->micro_batches * pr->st->n_chunks;
  fprintf(pr->out, "  STAGED_RECEIVES = %d, /* in flight at most (--comm host's pinned staging) */\n",
          2 * step > forward_only ? 2 * step : forward_only);
}

/* The most heads of a rank's flash attention, the most kv heads of a rank's
 * materialized attention (0 where there is none) and the widest row of any op of the model
 * (at least the padded vocabulary): what sizes the streams' scratch
 * (lx_cuda_main.h), whose kernels check that it holds their need. */
static void emit_scratch_sizes(const lx_printer *pr, int *lora_rank, int *lora_width) {
  int heads = 0, kv_heads = 0, widest = pr->ir->padded_vocab, rank = 0, width = 0, tp = emit_tp(pr);
  for (int g = 0; g < LX_GRAPH_COUNT; g++) {
    const lx_graph *graph = lx_graph_of(pr->ir, (lx_graph_id)g);
    for (int i = 0; i < graph->n_ops; i++) {
      const lx_op *op = &graph->ops[i];
      bool attention = op->kind == LX_OP_ATTENTION, flash = op->attention_impl == LX_ATTN_FLASH;
      if (attention && flash && op->heads / tp > heads) heads = op->heads / tp;
      if (attention && !flash && op->kv_heads / tp > kv_heads) kv_heads = op->kv_heads / tp;
      if (op->out.width > widest) widest = op->out.width;
      if (op->lora_rank > rank) rank = op->lora_rank;
      if (op->lora_rank && emit_in_width(pr, (lx_graph_id)g, op) > width)
        width = emit_in_width(pr, (lx_graph_id)g, op);
    }
  }
  fprintf(pr->out,
          "  FLASH_HEADS = %d, ATTENTION_KV_HEADS = %d, WIDEST = %d, /* the streams' scratch: a rank's most\n"
          "   * heads of a flash attention and kv heads of a materialized one, the widest row */\n",
          heads, kv_heads, widest);
  *lora_rank = rank, *lora_width = width;
}

static void print_header(const lx_printer *pr) {
  const lx_ir *ir = pr->ir;
  const lx_stage *st = pr->st;
  FILE *f = pr->out;
  char name[LX_TEXT_MAX];
  char ranges[LX_RANGES_TEXT];
  lx_chunk_ranges(st, ranges, sizeof ranges);
  fprintf(f, "/* stage%d.cu — pipeline stage %d of %d of %s:%s layers %s%s (CUDA).\n", pr->s, pr->s,
          pr->p->pp, emit_file_name(pr->ir->model_path, name), st->has_prologue ? " prologue," : "", ranges,
          st->has_epilogue ? ", epilogue" : "");
  fprintf(f, " *\n * Generated by lynxgen from the schedule IR; plan.txt says what is kept, what\n"
             " * is recomputed and where every byte lives. Host code only: the kernels are\n"
             " * in lx_kernels.cu. Do not edit: change the model file and generate again. */\n");
  fprintf(f, "#include \"lx_cuda_api.h\"\n#include \"lx_cuda_train.h\"\n#include \"lx_cuda_parallel.h\"\n\n");
  fprintf(f, "enum {\n  STAGE = %d, STAGES = %d, FIRST_LAYER = %d, LAYERS = %d, MODEL_LAYERS = %d,\n", pr->s,
          pr->p->pp, st->chunks[0].first_layer, st->n_layers, ir->model.layers);
  fprintf(f, "  PIPELINE_RING = %d, /* the last stage sends to the first (interleaved 1F1B's chunks) */\n",
          st->n_chunks > 1);
  fprintf(f, "  MICRO_BATCHES = %d, SLOTS = %d, TENSOR_PARALLEL = %d, DATA_PARALLEL = %d, EVENTS = %d,\n",
          pr->p->micro_batches, pr->l->slots, emit_tp(pr), ir->plan.dp, st->n_events + 1);
  emit_pool_slots(pr);
  emit_staged_receives(pr);
  fprintf(f, "  B = %d, T = %d, BT = B * T, C = %d, V = %d, VP = %d,\n", ir->plan.micro_batch,
          ir->model.seq_len, ir->model.hidden, ir->model.vocab, ir->padded_vocab);
  int lora_rank, lora_width;
  emit_scratch_sizes(pr, &lora_rank, &lora_width);
  emit_boundary_sizes(pr);
  if (lora_rank) /* the streams' scratch holds du and, under dropout, an adapter's dropped input */
    fprintf(f,
            "#define LORA_RANK %d /* the largest adapter's rank */\n#define LORA_WIDTH %d /* and input */\n",
            lora_rank, lora_width);
  fputs("#define MODEL_FILE ", f);
  lx_put_c_string(f, lx_file_name(ir->model_path));
  fputc('\n', f);
  fprintf(f, "#define DROPOUT %.17g\n", ir->model.dropout);
  fprintf(f,
          "#define LOSS_SCALE (1.0f / (MICRO_BATCHES * DATA_PARALLEL)) /* d loss / d micro-batch loss */\n");
  emit_micro_batch_macros(pr);
  emit_chunk_table(pr);
  fprintf(f, "/* The arena: the static memory plan (plan.txt), bf16 weights and activations,\n"
             " * fp32 master weights, gradients and AdamW moments. */\n");
  fprintf(f, "#define ARENA_BYTES %lldLL\n", (long long)pr->l->total);
  for (int r = 0; r < LX_REGION_HOST; r++)
    fprintf(f, "#define REGION_%s %lldLL /* %lld bytes */\n", lx_region_name((lx_region)r),
            (long long)pr->l->region_offset[r], (long long)pr->l->region_bytes[r]);
  fprintf(f, "#define PARAM_ELEMENTS %lldLL\n", (long long)pr->l->param_elements);
  fprintf(f, "#define PARAM_ELT %d /* bytes of a weight in the params region; fp32 in the others */\n",
          (int)pr->l->param_elt);
  emit_training(pr);
  fprintf(f, "#define AT(offset) ((void *)(arena + (size_t)(offset)))\n");
  emit_host_arena(pr, "(size_t)(offset)");
  fprintf(f, "/* a parameter's fp32 gradient sits at the same element of the grads region */\n");
  fprintf(f,
          "#define GRAD_OF(p) ((float *)(arena + REGION_grads + ((char *)(p) - (arena + REGION_%s)) / "
          "PARAM_ELT * 4))\n",
          emit_gradient_weights(pr));
  fprintf(f, "#define GRAD_REGION ((float *)(arena + REGION_grads))\n");
  emit_weight_versions(pr);
}

static void print_code(const lx_printer *pr) {
  emit_block_boundaries(pr);
  emit_graph_functions(pr, &graph_printer);
  print_load(pr);
  print_step(pr);
  print_forward_pass(pr);
  emit_param_table(pr);
  print_profile_table(pr);
  fprintf(pr->out, "\n#include \"lx_cuda_main.h\"\n");
}

void lx_emit_stage_cuda(const lx_program *prog, int s, FILE *out) {
  lx_printer pr = emit_printer(prog, s, out, "lx_bf16", "float");
  unsigned char *fusion[LX_GRAPH_COUNT];
  emit_plan_fusions(&pr, !prog->unfused, fusion);
  for (int g = 0; g < LX_GRAPH_COUNT; g++)
    pr.fusion[g] = fusion[g];
  emit_stage_file(&pr, out, print_header, print_code);
  emit_free_fusions(fusion);
}
