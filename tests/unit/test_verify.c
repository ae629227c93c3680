/* The verifier (gen/verify/verify.c) against the schedules the generator builds
 * and against planted bugs: every example model under GPipe, 1F1B, ZB-H1
 * and 2BW, pp 1, 2 and 4, and interleaved 1F1B at pp 2 and 4 with 2 and 3
 * chunks per stage, every recompute policy, verifies clean; a dropped
 * WAIT, two swapped sends, a stash slot shared by micro-batches that are
 * alive together, two boundary buffers laid over each other, a dropped
 * receive, and (ZB-H1) the output gradients a W pass reads left in the work
 * region that later backwards reuse, or its inputs or output gradients in
 * a pool of one slot too few, and (2BW) the next step's first activation
 * received into a slot still in use, or not received at all, and
 * (interleaved) an activation sent around the ring to the wrong chunk, or
 * two chunks' pipeline buffers laid over each other, are each reported, as
 * are a channel (one NCCL communicator) used from two streams and a
 * transfer to a stage its channel does not join. The CUDA printer fuses a linear and
 * its gelu into one cuBLASLt call only where every instance runs them back to back: an event recorded between
 * them in one micro-batch keeps them apart in all. Layers and micro-batches are cut down so that the whole
 * run takes about a second. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/analyze.h"
#include "check.h"
#include "diag.h"
#include "emit/emit.h"
#include "frontend/frontend.h"
#include "planning/passes.h"
#include "planning/plan.h"
#include "verify/access.h"
#include "verify/verify.h"
#include "verify/verify_report.h"

typedef struct {
  lx_ir ir;
  lx_pipeline pipe;
  lx_stage_layout *layouts;
} built;

/* What a built plan changes besides its depth: tp and dp (0: as the model
 * says), sequence parallelism, mini-sequences (0: whole). */
typedef struct {
  int tp, dp;
  bool sequence_parallel;
  int mini_sequences;
} parallel_plan;

/* The model at `path` with its widths, on `layers` layers, pp stages and
 * `micro_batches` micro-batches, under `par`. */
static bool build_parallel(const char *path, int layers, int pp, int micro_batches, lx_schedule schedule,
                           lx_recompute_policy policy, parallel_plan par, built *b) {
  memset(b, 0, sizeof *b);
  lx_ir_init(&b->ir);
  if (lx_parse_model(path, NULL, 0, &b->ir)) return false;
  lx_plan *plan = &b->ir.plan;
  b->ir.model.layers = layers;
  b->ir.model.seq_len = 16;
  plan->pp = pp;
  if (par.tp) plan->tp = par.tp;
  if (par.dp) plan->dp = par.dp;
  plan->sequence_parallel = par.sequence_parallel;
  plan->mini_sequences = par.mini_sequences;
  plan->schedule = schedule;
  plan->micro_batch = 1;
  plan->global_batch = micro_batches * (plan->dp ? plan->dp : 1);
  b->ir.cluster.nodes = 64; /* room for any tp x pp x dp */
  if (lx_analyze(&b->ir) || !lx_build_pipeline(&b->ir, policy, &b->pipe)) return false;
  b->layouts = calloc((size_t)pp, sizeof *b->layouts);
  for (int s = 0; s < pp; s++)
    lx_layout_stage(&b->pipe, s, 4, false, &b->layouts[s]);
  return true;
}

static bool build(const char *path, int layers, int pp, int micro_batches, lx_schedule schedule,
                  lx_recompute_policy policy, built *b) {
  return build_parallel(path, layers, pp, micro_batches, schedule, policy, (parallel_plan){0}, b);
}

/* Interleaved 1F1B with `chunks` chunks per stage: `layers` layers over pp x chunks chunks. */
static bool build_interleaved(const char *path, int layers, int pp, int chunks, int micro_batches,
                              lx_recompute_policy policy, built *b) {
  memset(b, 0, sizeof *b);
  lx_ir_init(&b->ir);
  if (lx_parse_model(path, NULL, 0, &b->ir)) return false;
  b->ir.model.layers = layers;
  b->ir.model.seq_len = 16;
  b->ir.plan = (lx_plan){.pp = pp,
                         .tp = 1,
                         .dp = 1,
                         .micro_batch = 1,
                         .global_batch = micro_batches,
                         .schedule = LX_SCHEDULE_INTERLEAVED,
                         .virtual_stages = chunks};
  b->ir.cluster.nodes = 64;
  if (lx_analyze(&b->ir) || !lx_build_pipeline(&b->ir, policy, &b->pipe)) return false;
  b->layouts = calloc((size_t)pp, sizeof *b->layouts);
  for (int s = 0; s < pp; s++)
    lx_layout_stage(&b->pipe, s, 4, false, &b->layouts[s]);
  return true;
}

static void release(built *b) {
  for (int s = 0; b->layouts && s < b->pipe.pp; s++)
    lx_layout_free(&b->layouts[s]);
  free(b->layouts);
  lx_pipeline_free(&b->pipe);
  lx_ir_free(&b->ir);
}

static int verify_all(const built *b) { return lx_verify(&b->pipe, b->layouts); }

/* Check 5 alone: a transfer moved to another stream or peer upsets the other
 * checks too, which would hide whether this one saw it. */
static int verify_channels(const built *b) {
  reporter r = {&b->pipe, 0, 0};
  lx_verify_channels(&r, &b->pipe);
  return r.violations;
}

/* The planted bugs are reported at length: silenced. */
static int quietly(int (*verify)(const built *), const built *b) {
  fflush(stderr);
  int saved = dup(STDERR_FILENO), null = open("/dev/null", O_WRONLY);
  dup2(null, STDERR_FILENO);
  int n = verify(b);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(null);
  close(saved);
  return n;
}

static int verify_quietly(const built *b) { return quietly(verify_all, b); }

static const lx_schedule schedules[] = {LX_SCHEDULE_GPIPE, LX_SCHEDULE_1F1B, LX_SCHEDULE_ZB_H1,
                                        LX_SCHEDULE_2BW};
enum { SCHEDULES = sizeof schedules / sizeof schedules[0] };

static void check_examples(void) {
  glob_t models;
  CHECK(glob("examples/*.model", 0, NULL, &models) == 0 && models.gl_pathc > 0, "examples/*.model found");
  static const int pps[] = {1, 2, 4};
  for (size_t i = 0; i < models.gl_pathc; i++)
    for (int k_sched = 0; k_sched < SCHEDULES; k_sched++)
      for (int policy = 0; policy < LX_RECOMPUTE_POLICY_COUNT; policy++)
        for (size_t k = 0; k < sizeof pps / sizeof pps[0]; k++) {
          int pp = pps[k], m = 2 * pp + 1; /* an odd count: slots wrap around unevenly */
          built b;
          lx_schedule sched = schedules[k_sched];
          bool ok = build(models.gl_pathv[i], 2 * pp, pp, m, sched, (lx_recompute_policy)policy, &b);
          int violations = ok ? lx_verify(&b.pipe, b.layouts) : -1;
          CHECK(violations == 0, "%s %s recompute %s pp=%d m=%d verifies clean (%d violations)",
                models.gl_pathv[i], lx_schedule_name(sched),
                lx_recompute_policy_name((lx_recompute_policy)policy), pp, m, violations);
          release(&b);
        }
  globfree(&models);
}

/* Interleaved 1F1B: chunks of one and of two layers, 3 groups of pp micro-batches. */
static void check_interleaved_examples(void) {
  glob_t models;
  CHECK(glob("examples/*.model", 0, NULL, &models) == 0 && models.gl_pathc > 0, "examples/*.model found");
  for (size_t i = 0; i < models.gl_pathc; i++)
    for (int policy = 0; policy < LX_RECOMPUTE_POLICY_COUNT; policy++)
      for (int pp = 2; pp <= 4; pp += 2)
        for (int chunks = 2; chunks <= 3; chunks++) {
          int layers = pp * chunks * (chunks == 2 ? 2 : 1), m = 3 * pp;
          built b;
          bool ok =
              build_interleaved(models.gl_pathv[i], layers, pp, chunks, m, (lx_recompute_policy)policy, &b);
          int violations = ok ? lx_verify(&b.pipe, b.layouts) : -1;
          CHECK(violations == 0,
                "%s interleaved recompute %s pp=%d V=%d layers=%d m=%d verifies clean (%d violations)",
                models.gl_pathv[i], lx_recompute_policy_name((lx_recompute_policy)policy), pp, chunks, layers,
                m, violations);
          release(&b);
        }
  globfree(&models);
}

/* Mini-sequences: the LM head, its loss and the MLPs (GPT's gelu, Llama's
 * SwiGLU) in 4 pieces, whose backwards make the pieces again, under every
 * schedule and policy, and at tp 2 with sequence parallelism (a run of pieces
 * gathers before its first backward). */
static void check_pieces(void) {
  static const char *models[] = {"examples/tiny.model", "examples/llama.model"};
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    for (int k_sched = 0; k_sched < SCHEDULES; k_sched++)
      for (int policy = 0; policy < LX_RECOMPUTE_POLICY_COUNT; policy++)
        for (int tp = 1; tp <= 2; tp++) {
          built b;
          parallel_plan par = {.tp = tp, .dp = 1, .sequence_parallel = tp > 1, .mini_sequences = 4};
          bool ok =
              build_parallel(models[i], 4, 2, 5, schedules[k_sched], (lx_recompute_policy)policy, par, &b);
          int violations = ok ? lx_verify(&b.pipe, b.layouts) : -1;
          CHECK(violations == 0,
                "%s in 4 mini-sequences, %s recompute %s tp=%d%s verifies clean (%d violations)", models[i],
                lx_schedule_name(schedules[k_sched]), lx_recompute_policy_name((lx_recompute_policy)policy),
                tp, tp > 1 ? " SP" : "", violations);
          release(&b);
        }
}

/* ---- planted bugs ---------------------------------------------------------- */

static void remove_instr(lx_instr_list *list, int i) {
  memmove(&list->items[i], &list->items[i + 1], sizeof *list->items * (size_t)(list->count - i - 1));
  list->count--;
}

static int find_kind(const lx_instr_list *list, lx_instr_kind kind, int nth) {
  for (int i = 0; i < list->count; i++)
    if (list->items[i].kind == kind && nth-- == 0) return i;
  return -1;
}

typedef void (*plant_fn)(built *b);

/* The compute stream of stage 1 stops waiting for its first receive. */
static void drop_wait(built *b) {
  lx_instr_list *compute = &b->pipe.stages[1].streams[LX_STREAM_COMPUTE];
  remove_instr(compute, find_kind(compute, LX_I_WAIT, 0));
}

/* Stage 0 sends its second activation before its first. */
static void swap_sends(built *b) {
  lx_instr_list *send = &b->pipe.stages[0].streams[LX_STREAM_SEND];
  int x = find_kind(send, LX_I_SEND_ACT, 0), y = find_kind(send, LX_I_SEND_ACT, 1);
  lx_instr t = send->items[x];
  send->items[x] = send->items[y];
  send->items[y] = t;
}

/* Stage 0 holds several micro-batches at once, but in one stash slot (of each chunk). */
static void share_stash_slot(built *b) {
  b->layouts[0].slots = 1;
  for (int v = 0; v < b->pipe.stages[0].n_chunks; v++)
    b->layouts[0].chunk_slots[v] = 1;
}

/* The two boundary gradients, used by alternate layers, in one place. */
static void overlay_boundary_grads(built *b) { b->layouts[0].boundary_grad_offset[1] = 0; }

/* Stage 1 never receives its last gradient. */
static void drop_recv(built *b) {
  lx_instr_list *recv = &b->pipe.stages[1].streams[LX_STREAM_RECV];
  int last = -1;
  for (int i = 0; i < recv->count; i++)
    if (recv->items[i].kind == LX_I_RECV_GRAD) last = i;
  remove_instr(recv, last);
}

/* Each wait of a stage is needed: the slot-reuse waits above all. With
 * its RECORD -> WAIT edge gone, the buffer it protects is reported. */
static void drop_slot_reuse_wait(built *b) {
  lx_instr_list *recv = &b->pipe.stages[1].streams[LX_STREAM_RECV];
  remove_instr(recv, find_kind(recv, LX_I_WAIT, 0));
}

/* The first WAIT of stage 0's stream k: its collective no longer waits for
 * the compute it reduces (tensor-parallel) or the last backward of its bucket
 * (data-parallel). */
static void drop_first_wait_of(built *b, lx_stream k) {
  lx_instr_list *list = &b->pipe.stages[0].streams[k];
  remove_instr(list, find_kind(list, LX_I_WAIT, 0));
}
static void drop_tp_wait(built *b) { drop_first_wait_of(b, LX_STREAM_TP); }
static void drop_dp_wait(built *b) { drop_first_wait_of(b, LX_STREAM_DP); }

/* The last stage's W passes read their linears' output gradients from the
 * start of the work region's gradients, which the next backwards reuse. */
static void weight_grads_in_work(built *b) {
  int s = b->pipe.pp - 1;
  for (int i = 0; i < b->ir.block.n_ops; i++) {
    lx_op_place *pl = &b->layouts[s].places[LX_GRAPH_BLOCK][i];
    if (pl->grad_in_pool) pl->grad_in_pool = false, pl->grad_offset = 0;
  }
}

/* The last stage's W passes' inputs, or their output gradients, in a pool
 * of one slot too few: a later micro-batch overwrites them before they are read. */
static void short_pool(built *b, lx_slot_pool pool) {
  lx_stage_layout *l = &b->layouts[b->pipe.pp - 1];
  CHECK(l->pool_slots[pool] > 1, "the %s pool has %d slots before planting",
        pool == LX_POOL_HELD ? "held" : "weight-gradient", l->pool_slots[pool]);
  l->pool_slots[pool]--;
}
static void short_held_pool(built *b) { short_pool(b, LX_POOL_HELD); }
static void short_weight_grad_pool(built *b) { short_pool(b, LX_POOL_WEIGHT_GRAD); }

/* 2BW: stage 1's receive, at the end of a step, of the next step's first
 * activation (ahead) no longer waits for the last backward to free its slot. */
static int ahead_receive(const lx_instr_list *recv) {
  for (int i = recv->count - 1; i >= 0; i--)
    if (recv->items[i].kind == LX_I_RECV_ACT && recv->items[i].ahead) return i;
  return -1;
}
static void ahead_receive_unwaited(built *b) {
  lx_instr_list *recv = &b->pipe.stages[1].streams[LX_STREAM_RECV];
  int at = ahead_receive(recv);
  CHECK(at > 0 && recv->items[at - 1].kind == LX_I_WAIT, "stage 1's ahead receive follows its slot wait");
  remove_instr(recv, at - 1);
}
/* ... or is gone: the previous stage's last forward ahead is never received. */
static void ahead_receive_dropped(built *b) {
  lx_instr_list *recv = &b->pipe.stages[1].streams[LX_STREAM_RECV];
  remove_instr(recv, ahead_receive(recv));
}

/* ZeRO-1's optimizer reads the gradients' reduced shares: the compute
 * stream must wait for the last bucket. */
static void drop_optimizer_wait(built *b) {
  lx_instr_list *compute = &b->pipe.stages[0].streams[LX_STREAM_COMPUTE];
  int last = -1;
  for (int i = 0; i < compute->count; i++)
    if (compute->items[i].kind == LX_I_WAIT) last = i;
  remove_instr(compute, last);
}

static void check_planted_parallel(const char *name, plant_fn plant, lx_schedule schedule,
                                   lx_recompute_policy policy, int tp, int dp) {
  built b;
  bool ok = build_parallel("examples/tiny.model", 4, 3, 7, schedule, policy,
                           (parallel_plan){.tp = tp, .dp = dp}, &b);
  CHECK(ok && lx_verify(&b.pipe, b.layouts) == 0, "%s: the pipeline verifies clean before planting", name);
  plant(&b);
  int violations = verify_quietly(&b);
  CHECK(violations > 0, "%s (%s, recompute %s) is reported (%d violations)", name, lx_schedule_name(schedule),
        lx_recompute_policy_name(policy), violations);
  release(&b);
}

static void check_planted(const char *name, plant_fn plant, lx_schedule schedule,
                          lx_recompute_policy policy) {
  check_planted_parallel(name, plant, schedule, policy, 0, 0);
}

/* The last stage's logits, made again piece by piece in the loss's
 * backward, placed where the backward's gradients live (the forward part of
 * work) instead of beside them. */
static void pieces_over_gradients(built *b) {
  lx_stage_layout *l = &b->layouts[b->pipe.pp - 1];
  const lx_graph *g = &b->ir.epilogue;
  for (int i = 0; i < g->n_ops; i++)
    if (lx_chunk_local(g, i)) {
      l->places[LX_GRAPH_EPILOGUE][i].output_recomputed = false;
      l->places[LX_GRAPH_EPILOGUE][i].output_work_offset = 0;
    }
}

/* Sequence parallelism: a run of pieces' gathered output gradient in the
 * same whole-tensor buffer as its gathered input (no third buffer). */
static void gathers_share_a_buffer(built *b) {
  for (int st = 0; st < b->pipe.pp; st++)
    b->layouts[st].sp_grad_buffer = false;
}

static void check_planted_pieces(const char *name, plant_fn plant, parallel_plan par) {
  built b;
  bool ok = build_parallel("examples/tiny.model", 4, 2, 5, LX_SCHEDULE_GPIPE, LX_RECOMPUTE_NONE, par, &b);
  CHECK(ok && lx_verify(&b.pipe, b.layouts) == 0, "%s: verifies clean before planting", name);
  plant(&b);
  int violations = verify_quietly(&b);
  CHECK(violations > 0, "%s: reported (%d violations)", name, violations);
  release(&b);
}

/* Interleaved: the last stage's first activation sent around the ring (to
 * stage 0's next chunk) names its own chunk instead. */
static void ring_send_to_wrong_chunk(built *b) {
  lx_instr_list *send = &b->pipe.stages[b->pipe.pp - 1].streams[LX_STREAM_SEND];
  int at = find_kind(send, LX_I_SEND_ACT, 0);
  CHECK(at >= 0 && send->items[at].peer == 0, "the last stage's first send goes around the ring");
  send->items[at].chunk++;
}

/* Interleaved: stage 0's chunks share their pipeline buffers. */
static void chunks_share_buffers(built *b) { b->layouts[0].chunk_send_bytes = 0; }

static void check_planted_interleaved(const char *name, plant_fn plant, lx_recompute_policy policy) {
  built b;
  bool ok = build_interleaved("examples/tiny.model", 8, 2, 2, 6, policy, &b);
  CHECK(ok && lx_verify(&b.pipe, b.layouts) == 0,
        "%s: the interleaved pipeline verifies clean before planting", name);
  plant(&b);
  int violations = verify_quietly(&b);
  CHECK(violations > 0, "%s (interleaved, recompute %s) is reported (%d violations)", name,
        lx_recompute_policy_name(policy), violations);
  release(&b);
}

/* Stage 1's first input gradient sent from its receive stream: the
 * channel GRAD_TO_PREVIOUS, one communicator, used from two streams. */
static void grad_sent_from_recv_stream(built *b) {
  lx_instr_list *send = &b->pipe.stages[1].streams[LX_STREAM_SEND];
  int at = find_kind(send, LX_I_SEND_GRAD, 0);
  lx_instr_append(&b->pipe.stages[1].streams[LX_STREAM_RECV], send->items[at]);
  remove_instr(send, at);
}

/* Stage 1's first gradient received from stage 0, which its channel
 * GRAD_FROM_NEXT does not join. */
static void grad_received_from_previous(built *b) {
  lx_instr_list *recv = &b->pipe.stages[1].streams[LX_STREAM_RECV];
  recv->items[find_kind(recv, LX_I_RECV_GRAD, 0)].peer = 0;
}

/* Check 5 finds each plant once, under 1F1B and around interleaved 1F1B's
 * ring, and nothing before it. */
static void check_channels(void) {
  plant_fn plants[] = {grad_sent_from_recv_stream, grad_received_from_previous};
  const char *names[] = {"an input gradient sent from the receive stream",
                         "a gradient received from the previous stage"};
  for (int k = 0; k < 2; k++)
    for (int interleaved = 0; interleaved <= 1; interleaved++) {
      built b;
      bool ok = interleaved ? build_interleaved("examples/tiny.model", 8, 3, 2, 6, LX_RECOMPUTE_NONE, &b)
                            : build("examples/tiny.model", 4, 3, 7, LX_SCHEDULE_1F1B, LX_RECOMPUTE_NONE, &b);
      CHECK(ok && verify_channels(&b) == 0, "%s: the channels verify clean before planting", names[k]);
      plants[k](&b);
      int violations = quietly(verify_channels, &b);
      CHECK(violations == 1, "%s (%s) is reported by the channel check once (%d)", names[k],
            interleaved ? "interleaved" : "1f1b", violations);
      release(&b);
    }
}

/* The access lists the printers will use: a forward reads its inputs and
 * writes its output; a backward accumulates into its inputs' gradients. */
/* Megatron's selective plan keeps the attention's output and drops its
 * probabilities: its RECOMPUTE writes the probabilities and reads q, k, v,
 * and writes no output (the kernel is passed NULL there); full recompute's
 * writes the output again. */
static void check_probs_alone_recompute(void) {
  for (int policy = LX_RECOMPUTE_FULL; policy <= LX_RECOMPUTE_SELECTIVE; policy++) {
    built b;
    if (!build("examples/tiny.model", 2, 1, 1, LX_SCHEDULE_1F1B, (lx_recompute_policy)policy, &b)) {
      CHECK(false, "tiny builds under %s", lx_recompute_policy_name((lx_recompute_policy)policy));
      continue;
    }
    const lx_graph *g = &b.ir.block;
    int attention = -1;
    for (int i = 0; i < g->n_ops; i++)
      if (g->ops[i].kind == LX_OP_ATTENTION) attention = i;
    lx_instr rc = {.kind = LX_I_RECOMPUTE, .graph = LX_GRAPH_BLOCK, .layer = 0, .op = attention, .mb = 0};
    lx_access a[LX_MAX_ACCESSES];
    int n = lx_instr_access(&b.pipe, 0, &b.layouts[0], &rc, a, LX_MAX_ACCESSES), outputs = 0, probs = 0;
    for (int i = 0; i < n; i++) {
      outputs += a[i].mode != LX_ACCESS_READ && a[i].tensor.op == attention &&
                 (a[i].tensor.role == LX_T_OUTPUT || a[i].tensor.role == LX_T_RECOMPUTED);
      probs +=
          a[i].mode == LX_ACCESS_WRITE && a[i].tensor.op == attention && a[i].tensor.role == LX_T_INTERNAL;
    }
    bool selective = policy == LX_RECOMPUTE_SELECTIVE;
    CHECK(probs == 1 && outputs == !selective && lx_verify(&b.pipe, b.layouts) == 0,
          "%s: the attention's RECOMPUTE writes its probabilities and %s (%d output writes); the plan "
          "verifies",
          lx_recompute_policy_name((lx_recompute_policy)policy),
          selective ? "not its output, which is kept" : "its output again", outputs);
    release(&b);
  }
}

static void check_accesses(void) {
  built b;
  CHECK(build("examples/tiny.model", 2, 1, 1, LX_SCHEDULE_1F1B, LX_RECOMPUTE_NONE, &b), "tiny builds");
  const lx_graph *g = &b.ir.block;
  int linear = -1;
  for (int i = 0; i < g->n_ops && linear < 0; i++)
    if (g->ops[i].kind == LX_OP_LINEAR) linear = i;
  lx_instr fwd = {.kind = LX_I_FWD, .graph = LX_GRAPH_BLOCK, .layer = 0, .op = linear, .mb = 0};
  lx_access a[LX_MAX_ACCESSES];
  int n = lx_instr_access(&b.pipe, 0, &b.layouts[0], &fwd, a, LX_MAX_ACCESSES);
  CHECK(
      n == 4 && a[0].mode == LX_ACCESS_WRITE && a[0].tensor.op == linear && a[0].tensor.role == LX_T_OUTPUT &&
          a[1].mode == LX_ACCESS_READ && a[1].tensor.op == g->ops[linear].inputs[0] &&
          a[2].tensor.role == LX_T_PARAM && a[2].tensor.index == 0 && a[3].tensor.role == LX_T_PARAM &&
          a[3].tensor.index == 1,
      "FWD linear: writes its output, reads its input, weight and bias, in the kernel's order (%d accesses)",
      n);
  lx_instr bwd = fwd;
  bwd.kind = LX_I_BWD;
  n = lx_instr_access(&b.pipe, 0, &b.layouts[0], &bwd, a, LX_MAX_ACCESSES);
  int grads = 0, input_written = 0;
  for (int i = 0; i < n; i++) {
    grads += a[i].mode == LX_ACCESS_ACCUMULATE;
    input_written += a[i].mode == LX_ACCESS_WRITE && a[i].tensor.role == LX_T_GRAD &&
                     a[i].tensor.op == g->ops[linear].inputs[0];
  }
  CHECK(grads == 2 && input_written == 1,
        "BWD linear: writes its input's gradient (the input's one use: no zeroing first) and accumulates two "
        "parameter gradients (%d written, %d accumulated)",
        input_written, grads);
  lx_span w =
      lx_locate(&b.pipe, 0, &b.layouts[0], a[1].tensor.role == LX_T_PARAM ? a[1].tensor : a[2].tensor);
  lx_span gw = lx_param_grad_span(&b.pipe, 0, &b.layouts[0],
                                  a[1].tensor.role == LX_T_PARAM ? a[1].tensor : a[2].tensor);
  CHECK(gw.region == LX_REGION_GRADS && gw.bytes == w.bytes &&
            gw.offset - b.layouts[0].region_offset[LX_REGION_GRADS] ==
                w.offset - b.layouts[0].region_offset[LX_REGION_PARAMS],
        "a parameter's gradient sits at the parameter's offset in the grads region");
  release(&b);
  check_probs_alone_recompute();
}

/* ---- the printer's fusions against a schedule that splits a pair ------------ */

static int count_in_cuda_stage(built *b, int s, const char *needle) {
  lx_program prog = {.pipe = &b->pipe, .layouts = b->layouts, .target = LX_TARGET_CUDA};
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  lx_emit_stage_cuda(&prog, s, f);
  fclose(f);
  int n = 0;
  for (const char *at = text; (at = strstr(at, needle)); at++)
    n++;
  free(text);
  return n;
}

/* Stage 0 records an event between the forward of its first MLP linear and
 * of the gelu after it, in micro-batch 0 only. */
static bool record_between_linear_and_gelu(built *b) {
  lx_stage *st = &b->pipe.stages[0];
  lx_instr_list *compute = &st->streams[LX_STREAM_COMPUTE];
  for (int i = 0; i + 1 < compute->count; i++) {
    const lx_instr *in = &compute->items[i];
    if (in->kind != LX_I_FWD || in->graph != LX_GRAPH_BLOCK || b->ir.block.ops[in->op].kind != LX_OP_LINEAR ||
        compute->items[i + 1].kind != LX_I_FWD || b->ir.block.ops[in->op + 1].kind != LX_OP_GELU)
      continue;
    if (compute->count == compute->cap) {
      compute->cap = 2 * compute->cap + 1;
      compute->items = realloc(compute->items, sizeof *compute->items * (size_t)compute->cap);
    }
    memmove(&compute->items[i + 2], &compute->items[i + 1],
            sizeof *compute->items * (size_t)(compute->count - i - 1));
    compute->items[i + 1] = (lx_instr){.kind = LX_I_RECORD,
                                       .graph = in->graph,
                                       .layer = in->layer,
                                       .op = in->op,
                                       .mb = in->mb,
                                       .event = st->n_events++};
    compute->count++;
    return true;
  }
  return false;
}

static void check_split_pair_not_fused(void) {
  built b;
  CHECK(build("examples/tiny.model", 2, 2, 3, LX_SCHEDULE_1F1B, LX_RECOMPUTE_NONE, &b), "tiny builds");
  int fused = count_in_cuda_stage(&b, 0, "lx_linear_gelu_forward(");
  CHECK(fused > 0, "stage 0's MLP linear and gelu are one call (%d calls)", fused);
  CHECK(record_between_linear_and_gelu(&b), "an event recorded between a linear and its gelu");
  CHECK(verify_quietly(&b) == 0, "the schedule with the extra event verifies clean");
  fused = count_in_cuda_stage(&b, 0, "lx_linear_gelu_forward(");
  int apart = count_in_cuda_stage(&b, 0, " lx_gelu_forward("); /* not lx_linear_gelu_forward( */
  CHECK(fused == 0 && apart > 0, "then they are separate calls everywhere (%d fused, %d gelu calls)", fused,
        apart);
  release(&b);
}

int main(void) {
  check_pieces();
  check_planted_pieces("the logits' pieces, made again in the backward, placed over its gradients",
                       pieces_over_gradients, (parallel_plan){.tp = 1, .dp = 1, .mini_sequences = 4});
  check_planted_pieces("a run of pieces' gathered output gradient and gathered input in one buffer",
                       gathers_share_a_buffer,
                       (parallel_plan){.tp = 2, .dp = 1, .sequence_parallel = true, .mini_sequences = 4});
  check_split_pair_not_fused();
  check_accesses();
  check_examples();
  check_interleaved_examples();
  check_channels();
  check_planted_interleaved("a dropped WAIT", drop_wait, LX_RECOMPUTE_NONE);
  check_planted_interleaved("two swapped sends", swap_sends, LX_RECOMPUTE_NONE);
  check_planted_interleaved("a shared stash slot", share_stash_slot, LX_RECOMPUTE_FULL);
  check_planted_interleaved("overlaid boundary gradients", overlay_boundary_grads, LX_RECOMPUTE_SELECTIVE);
  check_planted_interleaved("a dropped receive", drop_recv, LX_RECOMPUTE_NONE);
  check_planted_interleaved("an activation sent to the wrong chunk", ring_send_to_wrong_chunk,
                            LX_RECOMPUTE_NONE);
  check_planted_interleaved("two chunks' pipeline buffers overlaid", chunks_share_buffers, LX_RECOMPUTE_NONE);
  for (int k = 0; k < SCHEDULES; k++) {
    lx_schedule s = schedules[k];
    check_planted("a dropped WAIT", drop_wait, s, LX_RECOMPUTE_NONE);
    check_planted("two swapped sends", swap_sends, s, LX_RECOMPUTE_NONE);
    check_planted("a shared stash slot", share_stash_slot, s, LX_RECOMPUTE_NONE);
    check_planted("a shared stash slot", share_stash_slot, s, LX_RECOMPUTE_FULL);
    check_planted("overlaid boundary gradients", overlay_boundary_grads, s, LX_RECOMPUTE_SELECTIVE);
    check_planted("a dropped receive", drop_recv, s, LX_RECOMPUTE_NONE);
  }
  check_planted("a dropped slot-reuse wait", drop_slot_reuse_wait, LX_SCHEDULE_1F1B, LX_RECOMPUTE_NONE);
  check_planted("W passes' output gradients in the work region", weight_grads_in_work, LX_SCHEDULE_ZB_H1,
                LX_RECOMPUTE_NONE);
  check_planted("W passes' output gradients in the work region", weight_grads_in_work, LX_SCHEDULE_ZB_H1,
                LX_RECOMPUTE_LYNX_HEU);
  check_planted("a held pool of one slot too few", short_held_pool, LX_SCHEDULE_ZB_H1, LX_RECOMPUTE_NONE);
  check_planted("a weight-gradient pool of one slot too few", short_weight_grad_pool, LX_SCHEDULE_ZB_H1,
                LX_RECOMPUTE_NONE);
  check_planted("the next step's first activation received into a slot in use", ahead_receive_unwaited,
                LX_SCHEDULE_2BW, LX_RECOMPUTE_NONE);
  check_planted("the next step's first activation not received", ahead_receive_dropped, LX_SCHEDULE_2BW,
                LX_RECOMPUTE_NONE);
  check_planted_parallel("a tensor-parallel all-reduce before its op", drop_tp_wait, LX_SCHEDULE_1F1B,
                         LX_RECOMPUTE_FULL, 2, 1);
  check_planted_parallel("a gradient bucket reduced before its backward", drop_dp_wait, LX_SCHEDULE_1F1B,
                         LX_RECOMPUTE_NONE, 1, 2);
  check_planted_parallel("an optimizer step before the last bucket's reduction", drop_optimizer_wait,
                         LX_SCHEDULE_GPIPE, LX_RECOMPUTE_NONE, 2, 2);
  return check_exit_status();
}
