/* emit_cpu.c — the CPU printer: one C11 + OpenMP + OpenBLAS + MPI program per
 * pipeline stage, calling the kernels of templates/cpu/.
 *
 * The program computes in `real` (float; double with -DLX_DOUBLE for gradient
 * checks). The arena is laid out for the model's dtype; every offset is
 * scaled by REAL_SCALE = sizeof(real) / that dtype's size, which keeps every
 * buffer apart and aligned whatever `real` is. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "diag.h"
#include "emit/emit_file.h"
#include "emit/emit_graphs.h"
#include "emit/emit_names.h"
#include "emit/emit_op.h"
#include "emit/emit_operands.h"
#include "emit/emit_reroll.h"
#include "emit/emit_walk.h"
#include "escape.h"
#include "verify/access.h"

static void print_forward_op(const lx_printer *pr, lx_graph_id g, int i, lx_tensor_role out_role) {
  const lx_op *op = emit_op_at(pr, g, i);
  char file[LX_TEXT_MAX];
  fprintf(pr->out, "  /* %s = %s(...)  %s:%d */\n", op->var[0] ? op->var : op->name,
          lx_op_kind_name(op->kind), emit_file_name(op->src.file, file), op->src.line);
  emit_op_call(pr, &lx_cpu_kernels, g, i, out_role, false);
}

static void print_backward_op(const lx_printer *pr, lx_graph_id g, int i) {
  const lx_op *op = emit_op_at(pr, g, i);
  char file[LX_TEXT_MAX];
  fprintf(pr->out, "  /* d %s(...)%s  %s:%d */\n", lx_op_kind_name(op->kind),
          pr->weight_pass ? " parameter gradients" : "", emit_file_name(op->src.file, file), op->src.line);
  emit_op_call(pr, &lx_cpu_kernels, g, i, LX_T_OUTPUT, true);
}

/* ---- tensor-parallel collectives ----------------------------------------------- */

/* The call, blocking (request NULL) or posting `request`. */
static void print_tp_call(FILE *f, lx_tp_collective coll, const lx_tp_operands *t, const char *request) {
  const char *prefix = request ? "i" : "";
  const char *end = request ? request : "";
  const char *comma = request ? ", " : "";
  char count[64];
  snprintf(count, sizeof count, "(int64_t)%s * %d", t->rows, t->width);
  switch (coll) {
  case LX_COLL_ALLREDUCE:
    fprintf(f, "lx_%sallreduce_sum(%s, %s, groups.tp%s%s);\n", prefix, t->shard, count, comma, end);
    break;
  case LX_COLL_REDUCE_SCATTER:
    fprintf(f, "lx_%sreduce_scatter(%s, %s, %s, groups.tp%s%s);\n", prefix, t->whole, t->shard, count, comma,
            end);
    break;
  case LX_COLL_ALLGATHER:
    fprintf(f, "lx_%sallgather(%s, %s, %s, groups.tp%s%s);\n", prefix, t->shard, t->whole, count, comma, end);
    break;
  }
}

/* Inside a graph function (forward-only passes, and runs the schedule does
 * not split): the gather before op i, or the reduction after it, completes
 * before the next op. */
static void print_blocking_collective(const lx_printer *pr, lx_graph_id g, int i, bool backward,
                                      lx_tensor_role role, bool before) {
  emit_blocking_collective(pr, g, i, backward, role, before, print_tp_call, NULL);
}

/* ---- graph functions -------------------------------------------------------- */

static const lx_graph_printer graph_printer = {print_forward_op, print_backward_op, print_blocking_collective,
                                               "  memset(%s, 0, %lld * REAL_SCALE);\n"};

/* ---- the step: the schedule's streams, merged (emit_walk.c) ------------------- */

/* What the CPU program waits on: MPI requests, numbered in issue order. */
typedef struct {
  const lx_printer *pr;
  int last_request[LX_STREAM_COUNT]; /* the last non-blocking operation posted on each stream; -1 for none */
  int *event_request;                /* per event: the last request before its RECORD on its stream, or -1 */
  bool *waited;
  int requests;
  lx_walk_guard guard; /* 2BW: a wait inside an `if` may not run, so it does not count as done */
} cpu_step;

static void print_wait(cpu_step *w, int request) {
  if (w->waited[request]) return;
  fprintf(w->pr->out, "  lx_wait(&requests[%d]);\n", request);
  w->waited[request] = w->guard.open == LX_GUARD_NONE;
}

static void print_tp_collective(cpu_step *w, const lx_instr *in, const char *what) {
  char layer[16], request[32];
  lx_tp_operands t;
  emit_tp_collective_operands(w->pr, in->graph, in->op, in->backward, in->coll,
                              in->recomputed ? LX_T_RECOMPUTED : LX_T_OUTPUT, &t);
  fprintf(w->pr->out, "  {\n    const int layer = %s, mb = %d;  /* %s */\n    (void)layer, (void)mb;\n    ",
          emit_layer_text(in, layer, sizeof layer), in->mb, what);
  snprintf(request, sizeof request, "&requests[%d]", w->requests);
  print_tp_call(w->pr->out, in->coll, &t, request);
  fputs("  }\n", w->pr->out);
}

/* A bucket's gradients across the replicas (ZeRO-1: each gets its share's sum). */
static void print_dp_reduce(cpu_step *w, const lx_instr *in, const char *what) {
  const lx_param_bucket *b = lx_find_bucket(w->pr->l, in->graph, in->layer, in->tied);
  if (w->pr->l->shards > 1)
    fprintf(w->pr->out,
            "  lx_ireduce_scatter_sum(GRADS + %lldLL, %lldLL, groups.dp, &requests[%d]);  /* %s */\n",
            (long long)b->first, (long long)(b->elements / w->pr->l->shards), w->requests, what);
  else
    fprintf(w->pr->out, "  lx_iallreduce_sum(GRADS + %lldLL, %lldLL, groups.dp, &requests[%d]);  /* %s */\n",
            (long long)b->first, (long long)b->elements, w->requests, what);
}

/* OFFLOAD and PREFETCH: copies between the arena and the host arena, in
 * program order (the CPU's "host memory" is a second allocation). */
static void print_host_copies(const lx_printer *pr, const lx_instr *in, const char *what) {
  emit_host_copy copies[LX_MAX_SAVED + 1];
  int n = emit_host_copies(pr, in, copies);
  char layer[16];
  fprintf(pr->out, "  {\n    const int layer = %s, mb = %d;  /* %s */\n    (void)layer, (void)mb;\n",
          emit_layer_text(in, layer, sizeof layer), in->mb, what);
  bool offload = in->kind == LX_I_OFFLOAD;
  for (int k = 0; k < n; k++)
    fprintf(pr->out, "    memcpy(%s, %s, (size_t)%lldLL * REAL_SCALE);\n",
            offload ? copies[k].host : copies[k].device, offload ? copies[k].device : copies[k].host,
            copies[k].bytes);
  fputs("  }\n", pr->out);
}

static void cpu_comm(void *ctx, lx_stream k, const lx_instr *in) {
  cpu_step *w = ctx;
  FILE *f = w->pr->out;
  char buf[PTR], what[128];
  lx_instr_describe(w->pr->ir, in, what, sizeof what);
  const lx_printer *pr = w->pr;
  if (in->kind == LX_I_OFFLOAD || in->kind == LX_I_PREFETCH) {
    print_host_copies(pr, in, what);
    return;
  }
  if (in->kind == LX_I_ALLREDUCE_TP || in->kind == LX_I_ALLREDUCE_DP) {
    if (in->kind == LX_I_ALLREDUCE_TP)
      print_tp_collective(w, in, what);
    else
      print_dp_reduce(w, in, what);
    w->last_request[k] = w->requests++;
    return;
  }
  lx_tensor_ref t = emit_ref(pr, LX_GRAPH_BLOCK, 0, LX_T_SEND_ACT, 0);
  switch (in->kind) {
  case LX_I_SEND_ACT: t.role = LX_T_SEND_ACT; break;
  case LX_I_SEND_GRAD: t.role = LX_T_SEND_GRAD; break;
  case LX_I_RECV_GRAD: t.role = LX_T_RECV_GRAD; break;
  default: t.role = LX_T_OUTPUT; break; /* RECV_ACT: the first layer's input */
  }
  bool send = in->kind == LX_I_SEND_ACT || in->kind == LX_I_SEND_GRAD;
  /* under 2BW a message sent ahead is received as the next step's; under
   * interleaved 1F1B the tag names the receiving chunk too */
  char tag[64], layer[16];
  if (pr->p->kind == LX_SCHEDULE_2BW)
    snprintf(tag, sizeof tag, "mb %% MICRO_BATCHES");
  else if (pr->st->n_chunks > 1)
    snprintf(tag, sizeof tag, "%d * MICRO_BATCHES + mb", send ? lx_peer_chunk(pr->p, pr->s, in) : in->chunk);
  else
    snprintf(tag, sizeof tag, "mb");
  fprintf(f, "  {\n    const int mb = %d, layer = %s;  /* %s */\n    (void)layer;\n", in->mb,
          emit_chunk_layer(pr, in->chunk, layer, sizeof layer), what);
  fprintf(f, "    lx_%s(%s, BOUNDARY_ELEMENTS, %d, LX_TAG_%s, %s, &requests[%d]);\n  }\n",
          send ? "isend" : "irecv", emit_at(pr, buf, sizeof buf, t), in->peer,
          in->kind == LX_I_SEND_ACT || in->kind == LX_I_RECV_ACT ? "ACTIVATION" : "GRADIENT", tag,
          w->requests);
  w->last_request[k] = w->requests++;
}

/* An event stands for the requests its stream posted before it; the compute
 * stream posts none, so waiting for its events costs nothing here. */
static void cpu_record(void *ctx, lx_stream k, const lx_instr *in) {
  cpu_step *w = ctx;
  w->event_request[in->event] = k == LX_STREAM_COMPUTE ? -1 : w->last_request[k];
}

static void cpu_wait(void *ctx, lx_stream k, const lx_instr *in, lx_stream recorded_on) {
  cpu_step *w = ctx;
  int request = w->event_request[in->event];
  if (request >= 0 && recorded_on != k) print_wait(w, request);
}

static void cpu_load(void *ctx, const lx_instr *in) {
  cpu_step *w = ctx;
  fprintf(w->pr->out, "  load_micro_batch(%d);\n", in->mb);
}

/* Part of a graph instance, where the schedule put it (between its
 * all-reduces, or the part of its recomputation a window took): the ops inline. */
static void print_partial_run(const lx_printer *pr, const lx_instr *run, int count) {
  char layer[16];
  fprintf(pr->out, "  {\n    const int layer = %s, mb = %d;\n    (void)layer, (void)mb;\n",
          emit_layer_text(run, layer, sizeof layer), run->mb);
  emit_partial_run(pr, &graph_printer, run, count);
  fprintf(pr->out, "  }\n");
}

/* A run of FWD/BWD/RECOMPUTE of one graph instance: one call of its graph
 * function, or its ops inline when it is only part of the body. The CPU runs
 * every stream's compute in program order. */
static void cpu_run(void *ctx, lx_stream k, const lx_instr *first, int count) {
  cpu_step *w = ctx;
  (void)k;
  const char *graph = lx_graph_of(w->pr->ir, first->graph)->name;
  if (!emit_run_is_function(w->pr, first, count))
    print_partial_run(w->pr, first, count);
  else if (first->graph == LX_GRAPH_BLOCK)
    fprintf(w->pr->out, "  %s_%s(ctx, %d, %d);\n", emit_run_function(first->kind), graph, first->layer,
            first->mb);
  else
    fprintf(w->pr->out, "  %s_%s(ctx, %d);\n", emit_run_function(first->kind), graph, first->mb);
}

static void print_step(const lx_printer *pr) {
  int comm = 0; /* non-blocking operations: everything but events on the other streams */
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    for (int i = 0; k != LX_STREAM_COMPUTE && i < pr->st->streams[k].count; i++)
      comm += pr->st->streams[k].items[i].kind != LX_I_RECORD &&
              pr->st->streams[k].items[i].kind != LX_I_WAIT &&
              pr->st->streams[k].items[i].kind != LX_I_OFFLOAD &&
              pr->st->streams[k].items[i].kind != LX_I_PREFETCH;
  lx_step_text text;
  lx_printer body = *pr;
  cpu_step w = {.pr = &body,
                .event_request = lx_malloc(((size_t)pr->st->n_events + 1) * sizeof(int)),
                .waited = lx_calloc((size_t)comm + 1, sizeof(bool))};
  for (int e = 0; e <= pr->st->n_events; e++)
    w.event_request[e] = -1;
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    w.last_request[k] = -1;
  fprintf(pr->out,
          "\n/* One optimizer step's forwards and backwards, in the order of the schedule\n"
          " * (%s, plan.txt): the compute stream, with the communication streams'\n"
          " * operations posted as soon as their waits allow. */\nstatic void run_schedule(int step, int "
          "ahead) {\n"
          "  const lx_ctx *ctx = &kernel_ctx;\n  current_step = step;\n  MPI_Request requests[%d];\n",
          lx_schedule_name(pr->p->kind), comm > 0 ? comm : 1);
  emit_step_pipeline(pr, "  for (int r = 0; r < (int)(sizeof requests / sizeof *requests); r++) "
                         "requests[r] = MPI_REQUEST_NULL; /* posted or not */\n");
  body.out = emit_step_begin(&text, pr->out, pr->reroll);
  w.guard.out = &body.out;
  lx_walk_hooks hooks = {&w, cpu_run, cpu_load, cpu_comm, cpu_record, cpu_wait, &w.guard, NULL};
  lx_walk_stage(pr->st, &hooks);
  emit_step_end(&text);
  fprintf(pr->out, "  for (int r = 0; r < %d; r++) lx_wait(&requests[r]);\n", w.requests);
  emit_step_pipeline_end(pr);
  fprintf(pr->out, "}\n");
  free(w.event_request);
  free(w.waited);
}

/* ---- data, evaluation, parameters ---------------------------------------------- */

/* Each stage draws every micro-batch from its own loader, so stages agree on
 * the data without sending tokens; only the first keeps inputs, the last targets. */
static void print_load(const lx_printer *pr) {
  char tokens[PTR], targets[PTR];
  emit_load_operands(pr, "scratch_tokens", tokens, targets);
  if (!pr->st->has_prologue || !pr->st->has_epilogue)
    fprintf(pr->out, "\n/* the half of each (inputs, targets) pair this stage does not use */\nstatic int "
                     "scratch_tokens[BT];\n");
  fprintf(pr->out,
          "\n/* LOAD: micro-batch mb's tokens (B, T) and targets (B, T). */\n"
          "static lx_loader *loader;\n"
          "static void load_micro_batch(int mb) {\n  (void)mb;\n  lx_loader_next(loader, %s, %s);\n}\n",
          tokens, targets);
}

/* Forward only, micro-batch after micro-batch, for validation and gradient checks. */
static void print_eval(const lx_printer *pr) {
  FILE *f = pr->out;
  fprintf(f,
          "\n/* Forward only: validation loss and gradient checks. */\nstatic void run_forward(int step) {\n"
          "  const lx_ctx *ctx = &kernel_ctx;\n  current_step = step;\n"
          "  for (int mb = %s; mb++) {\n    load_micro_batch(mb);\n",
          emit_forward_only_range(pr));
  emit_forward_only_chunks(pr, "lx_recv(%s, BOUNDARY_ELEMENTS, %s, LX_TAG_USER, mb);",
                           "lx_send(%s, BOUNDARY_ELEMENTS, %s, LX_TAG_USER, mb);");
  fprintf(f, "  }\n}\n");
}

/* ---- prelude of the file ------------------------------------------------------- */

static void print_header(const lx_printer *pr) {
  const lx_ir *ir = pr->ir;
  const lx_stage *st = pr->st;
  FILE *f = pr->out;
  char file[LX_TEXT_MAX];
  char ranges[LX_RANGES_TEXT];
  lx_chunk_ranges(st, ranges, sizeof ranges);
  fprintf(f, "/* stage%d.c — pipeline stage %d of %d of %s:%s layers %s%s.\n", pr->s, pr->s, pr->p->pp,
          emit_file_name(ir->model_path, file), st->has_prologue ? " prologue," : "", ranges,
          st->has_epilogue ? ", epilogue" : "");
  fprintf(f, " *\n * Generated by lynxgen from the schedule IR; plan.txt says what is kept, what\n"
             " * is recomputed and where every byte lives. Shapes, the arena layout and the\n"
             " * order of every instruction are compile-time facts here. Do not edit: change\n"
             " * the model file and generate again. */\n");
  int dp = ir->plan.dp;
  fprintf(f, "#define LX_RANK_LAYOUT \"tp %d x pp %d x dp %d\"\n", emit_tp(pr), pr->p->pp, dp);
  fprintf(f, "#include \"lx_runtime.h\"\n#include \"lx_kernels.h\"\n#include \"lx_tensor_parallel.h\"\n"
             "#include \"lx_train.h\"\n\n");
  fprintf(f, "enum {\n  STAGE = %d, STAGES = %d, FIRST_LAYER = %d, LAYERS = %d, MODEL_LAYERS = %d,\n", pr->s,
          pr->p->pp, st->chunks[0].first_layer, st->n_layers, ir->model.layers);
  fprintf(f, "  MICRO_BATCHES = %d, SLOTS = %d, TENSOR_PARALLEL = %d, DATA_PARALLEL = %d,\n",
          pr->p->micro_batches, pr->l->slots, emit_tp(pr), dp);
  emit_pool_slots(pr);
  fprintf(f, "  B = %d, T = %d, BT = B * T, C = %d, V = %d, VP = %d,\n", ir->plan.micro_batch,
          ir->model.seq_len, ir->model.hidden, ir->model.vocab, ir->padded_vocab);
  emit_boundary_sizes(pr);
  fprintf(f, "#define DROPOUT %.17g\n", ir->model.dropout);
  fprintf(
      f,
      "#define LOSS_SCALE ((real)1 / (MICRO_BATCHES * DATA_PARALLEL)) /* d loss / d micro-batch loss */\n");
  emit_micro_batch_macros(pr);
  emit_chunk_table(pr);
  fprintf(f,
          "/* The arena: the static memory plan (plan.txt), in bytes of the model's dtype\n"
          " * (%s); REAL_SCALE stretches it to the element this build computes in. */\n",
          lx_dtype_name(ir->training.dtype));
  fprintf(f, "#define ARENA_BYTES %lldLL\n#define REAL_SCALE (sizeof(real) / %d)\n", (long long)pr->l->total,
          (int)pr->l->activation_elt);
  for (int r = 0; r < LX_REGION_HOST; r++)
    fprintf(f, "#define REGION_%s %lldLL /* %lld bytes */\n", lx_region_name((lx_region)r),
            (long long)pr->l->region_offset[r], (long long)pr->l->region_bytes[r]);
  int64_t extents[LX_REGION_COUNT];
  lx_layout_extents(pr->p, pr->s, pr->l, extents);
  for (int r = 0; r < LX_REGION_HOST; r++)
    fprintf(f, "#define EXTENT_%s %lldLL /* bytes its tensors reach */\n", lx_region_name((lx_region)r),
            (long long)extents[r]);
  fprintf(f, "#define PARAM_ELEMENTS %lldLL\n", (long long)pr->l->param_elements);
  fprintf(
      f,
      "static char *arena;\nstatic lx_groups groups; /* this rank's tp_rank, dp_rank and communicators */\n"
      "#define TP_RANK groups.tp_rank\n"
      "static int replica; /* = groups.dp_rank: which shard of every batch */\n"
      "static double loss_sum;\nstatic uint64_t seed;\n"
      "static int current_step; /* dropout masks are drawn per step, micro-batch, layer and op */\n");
  emit_training(pr);
  fprintf(f, "#define AT(offset) ((void *)(arena + (size_t)(offset) * REAL_SCALE))\n");
  emit_host_arena(pr, "(size_t)(offset) * REAL_SCALE");
  fprintf(f, "/* a parameter's gradient sits at the same element in the grads region */\n");
  fprintf(f, "#define GRAD_OF(p) ((real *)((char *)(p) + (REGION_grads - REGION_%s) * REAL_SCALE))\n",
          emit_gradient_weights(pr));
  fprintf(f, "#define PARAMS ((real *)AT(REGION_params))\n#define GRADS ((real *)AT(REGION_grads))\n");
  emit_weight_versions(pr);
}

static void print_code(const lx_printer *pr) {
  emit_block_boundaries(pr);
  emit_graph_functions(pr, &graph_printer);
  print_load(pr);
  print_step(pr);
  print_eval(pr);
  emit_param_table(pr);
  fprintf(pr->out, "\n#include \"lx_main.h\"\n");
}

void lx_emit_stage_cpu(const lx_program *prog, int s, FILE *out) {
  lx_printer pr = emit_printer(prog, s, out, "real", "real");
  emit_stage_file(&pr, out, print_header, print_code);
}
