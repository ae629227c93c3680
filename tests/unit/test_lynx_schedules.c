/* Overlapped recomputation in whole pipelines (gen/planning/windows.c,
 * plan.c and the window placement of schedule.c), on the small GPT of
 * lynx_model.h:
 *   - --partition best plans the faster split that fits, and lynx-heu's
 *     best plan is never slower than checkmate's;
 *   - squeezed pipelines with recompute placed in windows verify clean,
 *     simulate without deadlock, agree with the memory plan and fit, start
 *     every in-window recompute before its window ends, and a dropped
 *     recompute-stream event is caught; with offload, token-wise splits
 *     and kv-head pieces too, and the planted faults (a prefetch too late,
 *     a host slot reused too early) are caught; under interleaved 1F1B
 *     too, whose recompute-aware partition gives every stage's chunks a
 *     layer or more, in model order;
 *   - a plan without offload that simulates faster stands, and the stages
 *     that offloaded nothing keep their windows.
 * The stage policies themselves: test_lynx_policies.c. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "diag.h"
#include "lynx_model.h"
#include "planning/layout.h"
#include "planning/overlap.h"
#include "planning/passes.h"
#include "planning/plan.h"
#include "planning/stage_problem.h"
#include "report/trace_draw.h" /* lx_window_spans: when each window ran */
#include "verify/verify.h"

/* ---- schedules with recompute in windows -------------------------------------------- */

static int64_t worst_peak(const lx_pipeline *p) {
  lx_stage_memory *mem = calloc((size_t)p->pp, sizeof *mem);
  lx_plan_memory(p, mem);
  int64_t most = 0;
  for (int s = 0; s < p->pp; s++) {
    if (mem[s].peak > most) most = mem[s].peak;
    lx_stage_memory_free(&mem[s]);
  }
  free(mem);
  return most;
}

static int count_window_recomputes_of(const lx_stage *st) {
  int n = 0;
  for (int i = 0; i < st->streams[LX_STREAM_RECOMPUTE].count; i++)
    n += st->streams[LX_STREAM_RECOMPUTE].items[i].kind == LX_I_RECOMPUTE;
  return n;
}

static int count_window_recomputes(const lx_pipeline *p) {
  int n = 0;
  for (int s = 0; s < p->pp; s++)
    n += count_window_recomputes_of(&p->stages[s]);
  return n;
}

/* Stages whose recompute stream runs recomputes and whose placement
 * (window_of) places none, or the other way round. */
static int placements_unlike_schedule(const lx_pipeline *p) {
  int unlike = 0;
  for (int s = 0; s < p->pp; s++) {
    const lx_stage *st = &p->stages[s];
    bool scheduled = false, placed = false;
    for (int i = 0; i < st->streams[LX_STREAM_RECOMPUTE].count; i++)
      scheduled |= st->streams[LX_STREAM_RECOMPUTE].items[i].kind == LX_I_RECOMPUTE;
    for (int inst = 0; inst < st->n_layers * p->micro_batches; inst++)
      for (int op = 0; op < p->ir->block.n_ops; op++)
        placed |= lx_recompute_window(p, st, inst, op) >= 0;
    unlike += scheduled != placed;
  }
  return unlike;
}

/* lx_verify of p over these layouts; `quiet` keeps its report off stderr. */
static int verify_layouts(const lx_pipeline *p, const lx_stage_layout *layouts, bool quiet) {
  int saved = -1, null = -1;
  if (quiet) {
    fflush(stderr);
    saved = dup(STDERR_FILENO), null = open("/dev/null", O_WRONLY);
    dup2(null, STDERR_FILENO);
  }
  int n = lx_verify(p, layouts);
  if (quiet) {
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(null);
    close(saved);
  }
  return n;
}

static int verify_pipeline(const lx_pipeline *p, bool quiet) {
  lx_stage_layout *layouts = calloc((size_t)p->pp, sizeof *layouts);
  for (int s = 0; s < p->pp; s++)
    lx_layout_stage(p, s, 4, false, &layouts[s]);
  int n = verify_layouts(p, layouts, quiet);
  for (int s = 0; s < p->pp; s++)
    lx_layout_free(&layouts[s]);
  free(layouts);
  return n;
}

/* The compute stream's wait for the last event a stage records on stream
 * `on` (the recompute stream: its last in-window recompute; the prefetch
 * stream: its last copy back), removed; an earlier one may still be ordered
 * by a later wait, since a stream runs in order. */
static bool drop_last_wait(lx_pipeline *p, lx_stream on) {
  for (int s = 0; s < p->pp; s++) {
    lx_stage *st = &p->stages[s];
    const lx_instr_list *rs = &st->streams[on];
    int done = -1;
    for (int i = 0; i < rs->count; i++)
      if (rs->items[i].kind == LX_I_RECORD) done = rs->items[i].event;
    lx_instr_list *cs = &st->streams[LX_STREAM_COMPUTE];
    for (int i = 0; done >= 0 && i < cs->count; i++)
      if (cs->items[i].kind == LX_I_WAIT && cs->items[i].event == done) {
        memmove(&cs->items[i], &cs->items[i + 1], sizeof *cs->items * (size_t)(cs->count - i - 1));
        cs->count--;
        return true;
      }
  }
  return false;
}

/* Every wait, on any stream, for an event recorded on stream `on`, removed
 * (nothing then waits for a copy back: not the backward, nor recompute in a
 * window that reads what came back). */
static bool drop_waits_on(lx_pipeline *p, lx_stream on) {
  bool dropped = false;
  for (int s = 0; s < p->pp; s++) {
    lx_stage *st = &p->stages[s];
    bool *recorded = calloc((size_t)st->n_events + 1, sizeof *recorded);
    for (int i = 0; i < st->streams[on].count; i++)
      if (st->streams[on].items[i].kind == LX_I_RECORD) recorded[st->streams[on].items[i].event] = true;
    for (int k = 0; k < LX_STREAM_COUNT; k++) {
      lx_instr_list *list = &st->streams[k];
      int kept = 0;
      for (int i = 0; i < list->count; i++) {
        bool waits = list->items[i].kind == LX_I_WAIT && recorded[list->items[i].event];
        dropped |= waits;
        if (!waits) list->items[kept++] = list->items[i];
      }
      list->count = kept;
    }
    free(recorded);
  }
  return dropped;
}

/* The instruction lists of p, to put back after a planted fault. */
static lx_instr_list *save_streams(const lx_pipeline *p) {
  lx_instr_list *saved = calloc((size_t)(p->pp > 0 ? p->pp : 1) * LX_STREAM_COUNT, sizeof *saved);
  for (int s = 0; s < p->pp; s++)
    for (int k = 0; k < LX_STREAM_COUNT; k++) {
      const lx_instr_list *list = &p->stages[s].streams[k];
      lx_instr_list *copy = &saved[s * LX_STREAM_COUNT + k];
      copy->count = list->count;
      copy->items = malloc(sizeof *list->items * (size_t)(list->count + 1));
      memcpy(copy->items, list->items, sizeof *list->items * (size_t)list->count);
    }
  return saved;
}

static void restore_streams(lx_pipeline *p, lx_instr_list *saved) {
  for (int s = 0; s < p->pp; s++)
    for (int k = 0; k < LX_STREAM_COUNT; k++) {
      lx_instr_list *list = &p->stages[s].streams[k], *copy = &saved[s * LX_STREAM_COUNT + k];
      memcpy(list->items, copy->items, sizeof *list->items * (size_t)copy->count);
      list->count = copy->count;
      free(copy->items);
    }
  free(saved);
}

/* lx_verify over layouts whose host arenas have one slot fewer than planned
 * (where they have two or more): a micro-batch's offload then overwrites the
 * host copies of one whose prefetch may not have read them yet. Returns the
 * violations, or -1 where no stage has a slot to spare. */
static int verify_with_fewer_host_slots(const lx_pipeline *p) {
  lx_stage_layout *layouts = calloc((size_t)p->pp, sizeof *layouts);
  bool shrunk = false;
  for (int s = 0; s < p->pp; s++) {
    lx_layout_stage(p, s, 4, false, &layouts[s]);
    if (layouts[s].host_slots > 1 && layouts[s].host_layer_bytes > 0) layouts[s].host_slots--, shrunk = true;
  }
  int n = shrunk ? verify_layouts(p, layouts, true) : -1;
  for (int s = 0; s < p->pp; s++)
    lx_layout_free(&layouts[s]);
  free(layouts);
  return n;
}

static int count_instrs(const lx_pipeline *p, lx_instr_kind kind) {
  int n = 0;
  for (int s = 0; s < p->pp; s++)
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      for (int i = 0; i < p->stages[s].streams[k].count; i++)
        n += p->stages[s].streams[k].items[i].kind == kind;
  return n;
}

/* A plan that offloads: one PREFETCH per OFFLOAD; the verifier reports a
 * prefetch too late for its backward and a host slot reused too early. */
static void check_offload_faults(lx_pipeline *p, const char *name, int pp, int tp, const char *pol) {
  int offloads = count_instrs(p, LX_I_OFFLOAD), prefetches = count_instrs(p, LX_I_PREFETCH);
  if (offloads == 0) return;
  CHECK(prefetches == offloads, "%s pp=%d tp=%d %s: %d offloads, each prefetched back (%d)", name, pp, tp,
        pol, offloads, prefetches);
  int reused = verify_with_fewer_host_slots(p);
  if (reused >= 0)
    CHECK(reused > 0,
          "%s pp=%d tp=%d %s: with one host slot fewer, the verifier reports a host copy "
          "overwritten before its prefetch read it (%d)",
          name, pp, tp, pol, reused);
  lx_instr_list *saved = save_streams(p);
  CHECK(drop_waits_on(p, LX_STREAM_PREFETCH) && verify_pipeline(p, true) > 0,
        "%s pp=%d tp=%d %s: without the waits for the prefetches, the verifier reports a backward reading "
        "before the copy is back",
        name, pp, tp, pol);
  restore_streams(p, saved);
}

/* Layer instances whose in-window recompute spreads over several windows
 * (or partly runs on demand). */
static int count_split_instances(const lx_pipeline *p) {
  int n = 0;
  for (int s = 0; s < p->pp; s++)
    for (int i = 0; i < p->stages[s].n_layers * p->micro_batches; i++)
      n += lx_instance_split(p, &p->stages[s], i);
  return n;
}

/* Where event e is recorded on stream list l, -1 if nowhere. */
static int record_at(const lx_instr_list *l, int e) {
  for (int i = 0; i < l->count; i++)
    if (l->items[i].kind == LX_I_RECORD && l->items[i].event == e) return i;
  return -1;
}

/* Whether a wait of the compute stream before index `before` orders every
 * recompute-stream instruction up to index `upto` (it waits for an event
 * recorded there or later). */
static bool ordered_before(const lx_instr_list *cs, const lx_instr_list *rs, int before, int upto) {
  for (int k = 0; k < before; k++)
    if (cs->items[k].kind == LX_I_WAIT && record_at(rs, cs->items[k].event) >= upto) return true;
  return false;
}

/* A split instance's backward waits for the event of its first part
 * instead of its last: the ops of the later parts are no longer ordered
 * before the backward that reads them (unless a wait for an instance due
 * earlier orders them anyway; such a planting is skipped). Returns the
 * violations the verifier reports for the first planting that has any, 0
 * if none has, -1 if there was none to plant (no instance has parts in two
 * windows unordered otherwise: one window and the rest on demand has
 * nothing to plant). */
static int first_part_plantings; /* the plans where one could be planted */
static int wait_for_first_part(lx_pipeline *p) {
  int planted = -1;
  for (int s = 0; s < p->pp; s++) {
    lx_stage *st = &p->stages[s];
    lx_instr_list *rs = &st->streams[LX_STREAM_RECOMPUTE], *cs = &st->streams[LX_STREAM_COMPUTE];
    for (int i = 0; i < rs->count; i++) {
      const lx_instr *part = &rs->items[i];
      if (part->kind != LX_I_RECOMPUTE) continue;
      /* the RECORD that ends this part, and the one that ends the instance's last part */
      int first = -1, last = -1;
      bool in_part = true;
      for (int j = i + 1; j < rs->count; j++) {
        const lx_instr *in = &rs->items[j];
        in_part |= in->kind == LX_I_RECOMPUTE && in->layer == part->layer && in->mb == part->mb;
        if (in->kind != LX_I_RECORD || !in_part) continue;
        if (first < 0) first = in->event;
        last = in->event, in_part = false;
      }
      if (first < 0 || last < 0 || last == first) continue;
      for (int j = 0; j < cs->count; j++)
        if (cs->items[j].kind == LX_I_WAIT && cs->items[j].event == last) {
          if (ordered_before(cs, rs, j, record_at(rs, last))) continue;
          cs->items[j].event = first;
          int n = verify_pipeline(p, getenv("LX_DEBUG") == NULL);
          cs->items[j].event = last;
          if (n > 0) return n;
          planted = 0;
        }
    }
  }
  return planted;
}

/* The recompute-aware partition under interleaved 1F1B: every stage's two
 * chunks hold a layer or more, and model chunk v p + s (chunk v of stage s)
 * follows chunk v p + s - 1 without a gap, all layers covered once. */
static void check_chunk_split(const lx_pipeline *p, int layers, const char *name, const char *pol) {
  int next = 0;
  bool ok = true;
  for (int c = 0; c < p->pp * p->virtual_stages; c++) {
    const lx_stage *st = &p->stages[c % p->pp];
    const lx_chunk *chunk = &st->chunks[c / p->pp];
    ok &= st->n_chunks == p->virtual_stages && chunk->n_layers >= 1 && chunk->first_layer == next;
    next = chunk->first_layer + chunk->n_layers;
  }
  CHECK(ok && next == layers,
        "%s pp=%d %s, partition dp: %d chunks of a layer or more cover the %d layers in order", name, p->pp,
        pol, p->pp * p->virtual_stages, layers);
}

/* What a squeezed plan may do beside recompute: offload, and with a profile
 * under which splitting pays (the gelu's forward costs 50 us, its whole copy
 * 150 us, more than the layer's forward), split ops token-wise. */
typedef enum { NO_OFFLOAD, OFFLOAD, TOKEN_SPLITS, HEAD_SPLITS } squeeze_mode;

static void load_split_profile(const lx_ir *ir, lx_cost_model *cm) {
  int64_t tokens = (int64_t)ir->plan.micro_batch * ir->model.seq_len,
          width = 4 * ir->model.hidden / ir->plan.tp;
  const char *dtype = ir->training.dtype == LX_DTYPE_FP32 ? "fp32" : "bf16";
  double bytes = (double)tokens * (double)width * (ir->training.dtype == LX_DTYPE_FP32 ? 4 : 2);
  char text[160];
  snprintf(text, sizeof text, "op gelu %lld %lld %lld %s 0.05 0.05\nhost %.6g\n", (long long)tokens,
           (long long)width, (long long)width, dtype, bytes / 150e-6 / 1e9);
  CHECK(lx_cost_load_profile(cm, "splits.profile", text), "the profile under which splitting pays loads");
}

/* A what-if under which the attention's recompute is cut by kv heads: a
 * forward of 110 us (73 us for the probabilities alone, the recompute that
 * keeps the output: lx_cost_internals_share is 2/3 here) against
 * tensor-parallel all-reduces of about 80 us (40 us a step): whole it fits
 * none of them, in two pieces it does. */
static void load_heads_profile(const lx_ir *ir, lx_cost_model *cm) {
  const lx_op *attention = NULL;
  for (int i = 0; i < ir->block.n_ops; i++)
    if (ir->block.ops[i].kind == LX_OP_ATTENTION) attention = &ir->block.ops[i];
  char key[96], attrs[96], text[320];
  lx_cost_profile_key(ir, &ir->block, attention, key, sizeof key, attrs, sizeof attrs);
  snprintf(text, sizeof text, "op %s 0.11 0.165%s\nlink nvlink3 235 40\n", key, attrs);
  CHECK(lx_cost_load_profile(cm, "heads.profile", text), "the profile under which head pieces pay loads");
}

/* RECOMPUTE instructions that run some of a head-split op's pieces. */
static int count_head_pieces(const lx_pipeline *p) {
  int n = 0;
  for (int s = 0; s < p->pp; s++)
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      for (int i = 0; i < p->stages[s].streams[k].count; i++)
        n += p->stages[s].streams[k].items[i].pieces > 0;
  return n;
}

/* The first RECOMPUTE of a head-split op's later pieces removed: the heads it
 * makes again then hold whatever the window buffer held last. */
static bool drop_later_piece(lx_pipeline *p) {
  for (int s = 0; s < p->pp; s++)
    for (int k = 0; k < LX_STREAM_COUNT; k++) {
      lx_instr_list *list = &p->stages[s].streams[k];
      for (int i = 0; i < list->count; i++)
        if (list->items[i].pieces > 0 && list->items[i].piece_first > 0) {
          memmove(&list->items[i], &list->items[i + 1], sizeof *list->items * (size_t)(list->count - i - 1));
          list->count--;
          return true;
        }
    }
  return false;
}

/* The decisions of p's stages that split an op token-wise. */
static int count_token_splits(const lx_pipeline *p) {
  int n = 0;
  for (int s = 0; s < p->pp; s++)
    for (int i = 0; p->stages[s].decisions && i < p->ir->block.n_ops; i++)
      n += lx_token_split(&p->stages[s].decisions[i]);
  return n;
}

/* Every RECOMPUTE of a token-split op removed from the compute stream: the
 * rows it makes again then hold whatever the window buffer held last. */
static bool drop_split_recomputes(lx_pipeline *p) {
  bool dropped = false;
  for (int s = 0; s < p->pp; s++) {
    lx_instr_list *cs = &p->stages[s].streams[LX_STREAM_COMPUTE];
    int kept = 0;
    for (int i = 0; i < cs->count; i++) {
      const lx_instr *in = &cs->items[i];
      bool split = in->kind == LX_I_RECOMPUTE && lx_token_split(&p->stages[s].decisions[in->op]);
      dropped |= split;
      if (!split) cs->items[kept++] = *in;
    }
    cs->count = kept;
  }
  return dropped;
}

/* Plans the pipeline with the GPU's memory squeezed to `squeeze` of the way
 * from full recompute's peak to no recompute's; returns the recomputes it
 * placed in windows (or with offload, the OFFLOAD instructions; with token
 * splits, the split decisions). */
/* In-window recomputes that the simulation starts after their window has
 * closed (the compute stream's next FWD/BWD began): the windows the plan
 * placed them in were longer than the schedule it ended with. */
static int late_window_starts(const lx_simulation *sim) {
  const lx_pipeline *p = sim->pipe;
  int late = 0;
  for (int s = 0; s < p->pp; s++) {
    const lx_stage *st = &p->stages[s];
    lx_window_span *spans = lx_window_spans(sim, s);
    const lx_instr_list *rs = &st->streams[LX_STREAM_RECOMPUTE];
    for (int i = 0; spans && i < rs->count; i++) {
      const lx_instr *in = &rs->items[i];
      const lx_interval *t = lx_interval_of(sim, s, LX_STREAM_RECOMPUTE, i);
      if (in->kind != LX_I_RECOMPUTE || !t) continue;
      int inst = lx_layer_slot(st, in->layer) * p->micro_batches + in->mb;
      int w = lx_piece_window(p, st, inst, in->op, in->pieces ? in->piece_first : 0);
      if (w >= 0 && spans[w].reached && t->start > spans[w].end + 1e-12) late++;
    }
    free(spans);
  }
  return late;
}

static int check_window_schedules(lx_schedule schedule, int pp, int tp, lx_recompute_policy policy,
                                  double squeeze, int *split_instances, squeeze_mode mode) {
  bool offload = mode == OFFLOAD || mode == TOKEN_SPLITS;
  lx_ir ir;
  bool interleaved =
      schedule == LX_SCHEDULE_INTERLEAVED; /* 2 chunks a stage: micro-batches in groups of pp */
  int m = interleaved ? 2 * pp : 2 * pp + 1, layers = interleaved ? 4 * pp + 1 : 2 * pp + 1;
  load(&ir, layers, pp, tp, m, schedule);
  lx_cost_model cm;
  lx_cost_model_init(&cm, &ir, NULL);
  if (mode == TOKEN_SPLITS) load_split_profile(&ir, &cm);
  if (mode == HEAD_SPLITS) load_heads_profile(&ir, &cm);
  lx_pipeline none, full;
  lx_plan_options o = {.policy = LX_RECOMPUTE_NONE, .cm = &cm, .no_offload = !offload};
  lx_plan_pipeline(&ir, &o, &none);
  o.policy = LX_RECOMPUTE_FULL;
  lx_plan_pipeline(&ir, &o, &full);
  int64_t most = worst_peak(&none), least = worst_peak(&full);
  cm.gpu.memory_bytes =
      (double)least + squeeze * (double)(most - least); /* somewhere between: a choice to make */
  lx_pipeline_free(&none);
  lx_pipeline_free(&full);
  lx_pipeline p;
  o.policy = policy;
  o.partition = LX_PARTITION_DP;
  bool built = lx_plan_pipeline(&ir, &o, &p);
  const char *name = lx_schedule_name(schedule), *pol = lx_recompute_policy_name(policy);
  int in_window = built ? count_window_recomputes(&p) : 0;
  CHECK(built && (policy != LX_RECOMPUTE_CHECKMATE || in_window == 0),
        "%s pp=%d tp=%d %s squeezed to %.2f: built, %d recomputes placed in windows", name, pp, tp, pol,
        squeeze, in_window);
  int violations = built ? verify_pipeline(&p, false) : -1;
  CHECK(violations == 0, "%s pp=%d tp=%d %s: verifies clean (%d violations)", name, pp, tp, pol, violations);
  int unlike = built ? placements_unlike_schedule(&p) : -1;
  CHECK(unlike == 0,
        "%s pp=%d tp=%d %s: each stage's window placement is the one its schedule runs (%d unlike)", name, pp,
        tp, pol, unlike);
  if (interleaved && built) check_chunk_split(&p, layers, name, pol);
  lx_stage_memory *mem = calloc((size_t)p.pp, sizeof *mem);
  lx_plan_memory(&p, mem);
  lx_simulation sim;
  bool ran = lx_simulate(&p, &cm, NULL, NULL, mem, &sim);
  bool agree = true, fit = true;
  for (int s = 0; ran && s < p.pp; s++) {
    agree &= sim.stages[s].peak_bytes == mem[s].peak;
    fit &= mem[s].peak <= (int64_t)cm.gpu.memory_bytes;
  }
  CHECK(ran && agree && fit,
        "%s pp=%d tp=%d %s: simulates without deadlock, peaks agree with the plan and fit", name, pp, tp,
        pol);
  int late = ran ? late_window_starts(&sim) : -1;
  CHECK(late == 0,
        "%s pp=%d tp=%d %s squeezed to %.2f: every in-window recompute starts in its window (%d late)", name,
        pp, tp, pol, squeeze, late);
  if (ran) lx_simulation_free(&sim);
  for (int s = 0; s < p.pp; s++)
    lx_stage_memory_free(&mem[s]);
  free(mem);
  int split = built ? count_split_instances(&p) : 0, caught = split > 0 ? wait_for_first_part(&p) : -1;
  if (caught >= 0) {
    first_part_plantings++;
    CHECK(caught > 0,
          "%s pp=%d tp=%d %s: %d instances split (over windows, or the rest on demand); one whose backward "
          "waits for its first part alone is reported",
          name, pp, tp, pol, split);
  }
  *split_instances += split;
  int offloads = built ? count_instrs(&p, LX_I_OFFLOAD) : 0,
      token_splits = built ? count_token_splits(&p) : 0, head_pieces = built ? count_head_pieces(&p) : 0;
  if (head_pieces > 0)
    CHECK(drop_later_piece(&p) && verify_pipeline(&p, getenv("LX_DEBUG") == NULL) > 0,
          "%s pp=%d tp=%d %s: %d recomputes of kv-head pieces; without one of a later piece, the verifier "
          "reports the backward reading heads that nothing wrote",
          name, pp, tp, pol, head_pieces);
  if (offloads > 0) {
    check_offload_faults(&p, name, pp, tp, pol);
    if (token_splits > 0)
      CHECK(verify_pipeline(&p, true) == 0 && drop_split_recomputes(&p) &&
                verify_pipeline(&p, getenv("LX_DEBUG") == NULL) > 0,
            "%s pp=%d tp=%d %s: %d ops split token-wise; without the recompute of their other rows, the "
            "verifier reports the backward reading rows that nothing wrote",
            name, pp, tp, pol, token_splits);
  } else if (in_window > 0) {
    CHECK(drop_last_wait(&p, LX_STREAM_RECOMPUTE) && verify_pipeline(&p, getenv("LX_DEBUG") == NULL) > 0,
          "%s pp=%d tp=%d %s: without the wait for a window's recompute, the verifier reports a race", name,
          pp, tp, pol);
  }
  lx_pipeline_free(&p);
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
  return mode == HEAD_SPLITS    ? head_pieces
         : mode == TOKEN_SPLITS ? token_splits
         : offload              ? offloads
                                : in_window;
}

/* The same squeezed plans at tp 2 where the Lynx policies may offload:
 * returns the OFFLOAD instructions. */
static int check_offloads(lx_schedule schedule, int pp, lx_recompute_policy policy, double squeeze,
                          int *split_instances, squeeze_mode mode) {
  return check_window_schedules(schedule, pp, 2, policy, squeeze, split_instances, mode);
}

/* The plan of `policy` on the squeezed GPU with the layers split as
 * `partition` says: its simulated iteration and whether it fits. */
static double plan_time(const lx_ir *ir, const lx_cost_model *cm, lx_recompute_policy policy,
                        lx_partition_kind partition, bool *fits) {
  lx_pipeline p;
  lx_plan_options o = {.policy = policy, .partition = partition, .cm = cm};
  if (!lx_plan_pipeline(ir, &o, &p)) return *fits = false, -1;
  *fits = worst_peak(&p) <= (int64_t)cm->gpu.memory_bytes;
  lx_simulation sim;
  lx_simulate_training(&p, cm, NULL, NULL, NULL, &sim);
  double t = sim.iteration_time;
  lx_simulation_free(&sim);
  lx_pipeline_free(&p);
  return t;
}

/* --partition best (the default): a planned policy's plan is the faster of
 * its even split's and its recompute-aware split's that fits, and the Lynx
 * policies, which also try checkmate's split, are never slower than
 * checkmate's best plan. */
static void check_best_partition(int pp, int layers, double squeeze) {
  lx_ir ir;
  load(&ir, layers, pp, 2, 2 * pp + 1, LX_SCHEDULE_1F1B);
  lx_cost_model cm;
  lx_cost_model_init(&cm, &ir, NULL);
  bool fits;
  lx_pipeline none, full;
  lx_build_pipeline(&ir, LX_RECOMPUTE_NONE, &none);
  lx_build_pipeline(&ir, LX_RECOMPUTE_FULL, &full);
  int64_t most = worst_peak(&none), least = worst_peak(&full);
  cm.gpu.memory_bytes = (double)least + squeeze * (double)(most - least);
  lx_pipeline_free(&none);
  lx_pipeline_free(&full);
  double checkmate_best = plan_time(&ir, &cm, LX_RECOMPUTE_CHECKMATE, LX_PARTITION_BEST, &fits);
  bool checkmate_fits = fits;
  static const lx_recompute_policy policies[] = {LX_RECOMPUTE_CHECKMATE, LX_RECOMPUTE_LYNX_HEU};
  for (int k = 0; k < 2; k++) {
    lx_recompute_policy policy = policies[k];
    bool even_fits, dp_fits, best_fits;
    double even = plan_time(&ir, &cm, policy, LX_PARTITION_UNIFORM, &even_fits),
           dp = plan_time(&ir, &cm, policy, LX_PARTITION_DP, &dp_fits),
           best = plan_time(&ir, &cm, policy, LX_PARTITION_BEST, &best_fits);
    double want = even_fits && (!dp_fits || even <= dp) ? even : dp_fits ? dp : even;
    CHECK(best_fits == (even_fits || dp_fits) && best <= want * (1 + 1e-12),
          "pp=%d %d layers, %s squeezed to %.2f: the best split's plan (%.4g s%s) is the faster that fits of "
          "the even (%.4g s%s) and the recompute-aware (%.4g s%s)",
          pp, layers, lx_recompute_policy_name(policy), squeeze, best, best_fits ? "" : ", does not fit",
          even, even_fits ? "" : ", does not fit", dp, dp_fits ? "" : ", does not fit");
    if (policy == LX_RECOMPUTE_LYNX_HEU)
      CHECK(!checkmate_fits || (best_fits && best <= checkmate_best * (1 + 1e-9)),
            "pp=%d %d layers squeezed to %.2f: lynx-heu's best plan (%.4g s) is no slower than checkmate's "
            "(%.4g s)",
            pp, layers, squeeze, best, checkmate_best);
  }
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
}

/* README's token-wise example on GPUs of 3 MiB (examples/tiny.model, tp 2 x
 * pp 2, GPipe, tests/profiles/tiny-token-split.profile): one stage
 * offloads, the plan without offload simulates faster and stands, and the
 * stage that offloaded nothing keeps the plan it had, its window placement
 * included (only the stages that offload are solved again). */
static void check_no_offload_keeps_windows(void) {
  lx_ir ir;
  lx_ir_init(&ir);
  bool loaded = lx_parse_model("examples/tiny.model", NULL, 0, &ir) == 0;
  ir.plan.tp = 2, ir.plan.pp = 2, ir.plan.schedule = LX_SCHEDULE_GPIPE;
  loaded = loaded && lx_analyze(&ir) == 0;
  lx_cost_model cm;
  loaded = loaded && lx_cost_model_init(&cm, &ir, "tests/profiles/tiny-token-split.profile");
  CHECK(loaded, "examples/tiny.model and the token-split profile load");
  if (!loaded) return;
  cm.gpu.memory_bytes = 0.003 * (1 << 30);
  lx_pipeline p;
  lx_plan_options o = {.policy = LX_RECOMPUTE_LYNX_HEU, .partition = LX_PARTITION_BEST, .cm = &cm};
  bool built = lx_plan_pipeline(&ir, &o, &p);
  int kept_windows = 0;
  for (int s = 0; built && s < p.pp; s++)
    kept_windows += !strncmp(p.stages[s].stats.status, "the policy's plan without offload", 33) &&
                    count_window_recomputes_of(&p.stages[s]) > 0;
  int unlike = built ? placements_unlike_schedule(&p) : -1;
  CHECK(built && kept_windows == p.pp && unlike == 0,
        "tiny, tp 2 x pp 2 GPipe, 3 MiB GPUs: the plan without offload stands with windows on %d of %d "
        "stages, each placement the one its schedule runs (%d unlike)",
        kept_windows, built ? p.pp : 0, unlike);
  if (built) lx_pipeline_free(&p);
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
}

int main(void) {
  int split = 0, offloaded = 0, token_splits = 0, head_pieces = 0, interleaved_pieces = 0;
  for (int pp = 2; pp <= 4; pp++)
    for (int k = 1; k <= 3; k++)
      check_best_partition(pp, 3 * pp + 1, 0.2 * k);
  check_no_offload_keeps_windows();
  for (int sched = LX_SCHEDULE_GPIPE; sched <= LX_SCHEDULE_1F1B; sched++)
    for (int pp = 1; pp <= 3; pp++) {
      static const double squeezes[] = {0.75, 0.5, 0.25, 0.1};
      const char *name = lx_schedule_name((lx_schedule)sched);
      for (int pol = LX_RECOMPUTE_LYNX_HEU; pol <= LX_RECOMPUTE_LYNX_OPT; pol++) {
        int placed = 0, pieces = 0;
        for (size_t k = 0; k < sizeof squeezes / sizeof *squeezes; k++) {
          pieces += check_window_schedules((lx_schedule)sched, pp, 2, (lx_recompute_policy)pol, squeezes[k],
                                           &split, HEAD_SPLITS);
          placed += check_window_schedules((lx_schedule)sched, pp, 2, (lx_recompute_policy)pol, squeezes[k],
                                           &split, NO_OFFLOAD);
          offloaded +=
              check_offloads((lx_schedule)sched, pp, (lx_recompute_policy)pol, squeezes[k], &split, OFFLOAD);
          token_splits += check_offloads((lx_schedule)sched, pp, (lx_recompute_policy)pol, squeezes[k],
                                         &split, TOKEN_SPLITS);
        }
        CHECK(placed > 0, "%s pp=%d tp=2 %s: some squeeze puts recompute into windows (%d)", name, pp,
              lx_recompute_policy_name((lx_recompute_policy)pol), placed);
        head_pieces += pieces;
      }
      check_window_schedules((lx_schedule)sched, pp, 1, LX_RECOMPUTE_LYNX_HEU, 0.3, &split, NO_OFFLOAD);
      check_window_schedules((lx_schedule)sched, pp, 2, LX_RECOMPUTE_CHECKMATE, 0.3, &split, NO_OFFLOAD);
    }
  for (int pp = 2; pp <= 3; pp++) /* interleaved 1F1B: the partition into chunks and Lynx's windows */
    for (int pol = LX_RECOMPUTE_CHECKMATE; pol <= LX_RECOMPUTE_LYNX_OPT; pol++) {
      check_window_schedules(LX_SCHEDULE_INTERLEAVED, pp, 2, (lx_recompute_policy)pol, 0.3, &split,
                             NO_OFFLOAD);
      offloaded +=
          check_offloads(LX_SCHEDULE_INTERLEAVED, pp, (lx_recompute_policy)pol, 0.3, &split, OFFLOAD);
      token_splits +=
          check_offloads(LX_SCHEDULE_INTERLEAVED, pp, (lx_recompute_policy)pol, 0.3, &split, TOKEN_SPLITS);
      interleaved_pieces += check_window_schedules(LX_SCHEDULE_INTERLEAVED, pp, 2, (lx_recompute_policy)pol,
                                                   0.05, &split, HEAD_SPLITS);
    }
  CHECK(split > 0 && first_part_plantings > 0,
        "the squeezed pipelines split %d layer instances' in-window recompute; in %d plans one over two "
        "windows, whose backward waits for its first part in a planted fault",
        split, first_part_plantings);
  CHECK(offloaded > 0, "the squeezed pipelines with offload hold %d OFFLOAD instructions", offloaded);
  CHECK(token_splits > 0, "the squeezed pipelines under the splitting profile split %d ops token-wise",
        token_splits);
  CHECK(
      head_pieces > 0 && interleaved_pieces > 0,
      "the squeezed pipelines under the head-piece profile recompute %d kv-head pieces (%d under interleaved "
      "1F1B)",
      head_pieces, interleaved_pieces);
  return check_exit_status();
}
