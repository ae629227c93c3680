/* report.c — the plan, for people (plan.txt, --plan) and programs (--json).
 *
 * Per stage: the layers it holds, what every op of its layers keeps or
 * recomputes and where, predicted compute / recompute / exposed
 * communication, and the memory at its peak against the GPU's capacity;
 * then the iteration: time, bubble, throughput, MFU and HFU. */
#include "report/report.h"

#include "alloc.h"
#include "escape.h"
#include "json.h"
#include "planning/passes.h"

#include <stdlib.h>

const char *lx_bytes_text(double bytes, char buf[LX_BYTES_TEXT]) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (u < 5 && bytes >= 1024)
    bytes /= 1024, u++;
  snprintf(buf, LX_BYTES_TEXT, u ? "%.2f %s" : "%.0f %s", bytes, units[u]);
  return buf;
}

const char *lx_count_text(double n, char buf[LX_BYTES_TEXT]) {
  static const char *const units[] = {"", " K", " M", " B", " T"};
  int u = 0;
  while (u < 4 && n >= 1000)
    n /= 1000, u++;
  snprintf(buf, LX_BYTES_TEXT, u ? "%.3f%s" : "%.0f%s", n, units[u]);
  return buf;
}

static double mib(int64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }
static double ms(double seconds) { return seconds * 1e3; }

enum { DECISION_TEXT = 128 };

static const char *decision_text(const lx_op_decision *d, char buf[DECISION_TEXT]) {
  if (lx_token_split(d)) {
    snprintf(buf, DECISION_TEXT, "token-wise: rows [0, %d/%d) offloaded, the rest recomputed on demand",
             d->host_pieces, LX_TOKEN_PIECES);
    return buf;
  }
  if (d->offload) return "offload to host memory after the forward, prefetch before the backward";
  if (!d->recompute) return "keep";
  const char *kept = d->drop_output ? "" : ", internals alone"; /* lx_recomputes_internals_only */
  if (d->in_window && lx_window_pieces(d) > 1)
    snprintf(buf, DECISION_TEXT,
             "recompute in a window on the recompute stream, in %d pieces of its kv heads%s",
             d->window_pieces, kept);
  else if (d->in_window)
    snprintf(buf, DECISION_TEXT,
             "recompute in a window on the recompute stream%s (on demand where the instance got none)", kept);
  else
    snprintf(buf, DECISION_TEXT, "recompute%s on demand, before the layer's backward",
             d->drop_output ? "" : " internals");
  return buf;
}

/* What the policy pass found (planned policies only): budget, windows used, and where
 * `search_times`, the wall-clock time it took. */
static void print_policy_stats(const lx_stage *st, bool search_times, FILE *out) {
  if (!st->window_of && st->stats.budget_bytes == 0) return;
  char budget[LX_BYTES_TEXT], used[LX_BYTES_TEXT], gap[48] = "";
  if (st->stats.gap > 0) snprintf(gap, sizeof gap, " (MILP gap %.2g)", st->stats.gap);
  fprintf(out,
          "  policy     %s%s, budget %s for the block's activations (uses %s), exposed "
          "recompute %.2f ms, %.2f ms hidden in windows (%d found)",
          st->stats.status ? st->stats.status : "", gap,
          lx_bytes_text((double)st->stats.budget_bytes, budget),
          lx_bytes_text((double)st->stats.used_bytes, used), ms(st->stats.exposed_s), ms(st->stats.window_s),
          st->n_windows);
  if (search_times) fprintf(out, ", search %.1f ms", ms(st->stats.search_s));
  fputc('\n', out);
}

/* How a stage's in-window recompute is placed: windows used, layer
 * instances with any op in one, (instance, window) parts, op recomputes in
 * windows, and instances split (over windows, or partly on demand). */
typedef struct {
  int used, instances, parts, ops, split;
} window_use;

static window_use window_use_of(const lx_pipeline *p, const lx_stage *st) {
  window_use u = {0};
  int *n = lx_instances_per_window(p, st);
  for (int w = 0; n && w < st->n_windows; w++)
    u.used += n[w] > 0, u.parts += n[w];
  free(n);
  for (int inst = 0; st->window_of && inst < st->n_layers * p->micro_batches; inst++) {
    int ops = 0; /* RECOMPUTE instructions in windows: a head-split op's, one per window its pieces take */
    for (int i = 0; i < p->ir->block.n_ops; i++)
      for (int k = 0, last = -1; k < lx_window_pieces(&st->decisions[i]); k++) {
        int w = lx_piece_window(p, st, inst, i, k);
        if (w >= 0 && w != last) ops++, last = w;
      }
    u.ops += ops, u.instances += ops > 0, u.split += lx_instance_split(p, st, inst);
  }
  return u;
}

enum { LISTED_WINDOWS = 4 };

/* How many of op i's pieces (its whole self, where it is not cut) instance inst runs in window w. */
static int pieces_in(const lx_pipeline *p, const lx_stage *st, int inst, int i, int w) {
  int n = 0;
  for (int k = 0; k < lx_window_pieces(&st->decisions[i]); k++)
    n += lx_piece_window(p, st, inst, i, k) == w;
  return n;
}

static bool recomputes_in(const lx_pipeline *p, const lx_stage *st, int inst, int w) {
  for (int i = 0; i < p->ir->block.n_ops; i++)
    if (pieces_in(p, st, inst, i, w)) return true;
  return false;
}

/* Which layer instances (layer, micro-batch) recompute in window w; of one
 * that spreads over several windows (or partly runs on demand), which ops. */
static void print_window_items(const lx_pipeline *p, const lx_stage *st, int w, FILE *out) {
  const lx_window *win = &st->windows[w];
  fprintf(out, "\n             window %d (%s, %.3f ms measured at %.3f ms):", w,
          lx_window_kind_name(win->kind), ms(win->length), ms(win->start));
  const char *sep = " ";
  for (int inst = 0; inst < st->n_layers * p->micro_batches; inst++) {
    if (!recomputes_in(p, st, inst, w)) continue;
    fprintf(out, "%slayer %d mb %d", sep, lx_slot_layer(st, inst / p->micro_batches),
            inst % p->micro_batches);
    sep = ", ";
    if (!lx_instance_split(p, st, inst)) continue;
    const char *op_sep = " (";
    for (int i = 0; i < p->ir->block.n_ops; i++) {
      int pieces = lx_window_pieces(&st->decisions[i]), here = pieces_in(p, st, inst, i, w);
      if (!here) continue;
      fprintf(out, "%s%s", op_sep, p->ir->block.ops[i].name);
      if (here < pieces) fprintf(out, " %d/%d of its kv heads", here, pieces);
      op_sep = ", ";
    }
    fputc(')', out);
  }
}

/* Where the in-window recompute runs: the windows by kind, and the first
 * few windows used with the layer instances each recomputes. */
static void print_windows(const lx_pipeline *p, const lx_stage *st, FILE *out) {
  int *n = lx_instances_per_window(p, st);
  if (!n) return;
  int by_kind[LX_WINDOW_KIND_COUNT] = {0};
  for (int w = 0; w < st->n_windows; w++)
    by_kind[st->windows[w].kind]++;
  window_use u = window_use_of(p, st);
  fprintf(out, "  windows    %d found (", st->n_windows);
  const char *sep = "";
  for (int k = 0; k < LX_WINDOW_KIND_COUNT; k++)
    if (by_kind[k]) {
      fprintf(out, "%s%s %d", sep, lx_window_kind_name((lx_window_kind)k), by_kind[k]);
      sep = ", ";
    }
  fprintf(out, "), %d used by %d of %d layer instances", u.used, u.instances,
          st->n_layers * p->micro_batches);
  if (u.split) fprintf(out, " (%d split over windows, or partly on demand)", u.split);
  int listed = 0;
  for (int w = 0; w < st->n_windows && listed < LISTED_WINDOWS; w++)
    if (n[w]) print_window_items(p, st, w, out), listed++;
  if (u.used > listed) fprintf(out, "\n             ... and %d more windows", u.used - listed);
  fputc('\n', out);
  free(n);
}

static void stage_layers(const lx_stage *st, char *buf, size_t size) {
  char ranges[LX_RANGES_TEXT];
  lx_chunk_ranges(st, ranges, sizeof ranges);
  snprintf(buf, size, "%s%s%s%s", st->has_prologue ? "prologue + " : "", st->n_layers ? "layers " : "",
           ranges, st->has_epilogue ? " + epilogue" : "");
}

static void print_layer_decisions(const lx_ir *ir, const lx_stage *st, FILE *out) {
  fprintf(out, "  every layer of the stage, per micro-batch:\n");
  fprintf(out, "    %-22s %-18s %12s  %s\n", "op", "kind", "saves", "decision");
  for (int i = 0; i < ir->block.n_ops; i++) {
    const lx_op *op = &ir->block.ops[i];
    if (op->kind == LX_OP_INPUT) continue;
    char file[LX_TEXT_MAX], saves[LX_BYTES_TEXT], decision[DECISION_TEXT];
    fprintf(out, "    %-22s %-18s %12s  %s   (%s:%d)\n", op->name, lx_op_kind_name(op->kind),
            lx_bytes_text((double)op->saved_bytes, saves), decision_text(&st->decisions[i], decision),
            lx_text(lx_file_name(op->src.file), file, sizeof file), op->src.line);
  }
}

/* The static memory plan of the emitted program: one arena, its regions. */
/* "4 slots x 1.25 MiB"; under interleaved 1F1B each chunk's: "chunk slots 4 x 0.63, 2 x 0.63 MiB". */
static void stash_slots_text(const lx_stage *st, const lx_stage_layout *l, char *buf, size_t size) {
  if (st->n_chunks == 1) {
    snprintf(buf, size, "%d slots x %.2f MiB", l->slots, mib(l->slot_bytes));
    return;
  }
  int used = snprintf(buf, size, "chunk slots");
  for (int v = 0; v < st->n_chunks && used >= 0 && (size_t)used < size; v++)
    used += snprintf(buf + used, size - (size_t)used, "%s %d x %.2f", v ? "," : "", l->chunk_slots[v],
                     mib(l->chunk_slot_bytes[v]));
  if (used >= 0 && (size_t)used < size) snprintf(buf + used, size - (size_t)used, " MiB");
}

static void print_arena(const lx_stage *st, const lx_stage_layout *l, FILE *out) {
  int64_t weights = l->region_bytes[LX_REGION_PARAMS] + l->region_bytes[LX_REGION_PREVIOUS] +
                    l->region_bytes[LX_REGION_MASTER];
  int64_t optimizer = l->region_bytes[LX_REGION_ADAM_M] + l->region_bytes[LX_REGION_ADAM_V];
  int64_t transient = l->region_bytes[LX_REGION_WORK] + l->region_bytes[LX_REGION_BOUNDARY];
  char total[LX_BYTES_TEXT], slots[256];
  stash_slots_text(st, l, slots, sizeof slots);
  fprintf(out,
          "  arena      %lld bytes (%s), the emitted program's one allocation: weights %.2f MiB, grads "
          "%.2f "
          "MiB, optimizer %.2f MiB, stashed activations %.2f MiB (%s), transient %.2f MiB\n",
          (long long)l->total, lx_bytes_text((double)l->total, total), mib(weights),
          mib(l->region_bytes[LX_REGION_GRADS]), mib(optimizer), mib(l->pool_offset[LX_POOL_HELD]), slots,
          mib(transient));
  if (l->shards > 1)
    fprintf(out,
            "  ZeRO-1     optimizer state of 1/%d of the parameters per dp replica: %.2f MiB instead of %.2f "
            "MiB\n",
            l->shards, mib(optimizer), mib(l->param_elements * 8));
  for (int k = 0; k < LX_REGION_HOST; k++)
    if (l->region_bytes[k])
      fprintf(out, "             %-9s at %12lld, %12lld bytes\n", lx_region_name((lx_region)k),
              (long long)l->region_offset[k], (long long)l->region_bytes[k]);
  if (l->region_bytes[LX_REGION_HOST]) {
    char host[LX_BYTES_TEXT], layer[LX_BYTES_TEXT];
    fprintf(
        out,
        "  host arena %lld bytes (%s) of pinned host memory, not the GPU's: the offloaded activations, %d "
        "slots x %d layers x %s\n",
        (long long)l->region_bytes[LX_REGION_HOST],
        lx_bytes_text((double)l->region_bytes[LX_REGION_HOST], host), l->host_slots, st->n_layers,
        lx_bytes_text((double)l->host_layer_bytes, layer));
  }
}

/* Zero bubble: which weight gradients wait for the drain, or why none does,
 * and the arena's pools for what the W passes read. */
static void print_pools(const lx_stage_layout *l, FILE *out) {
  fprintf(out,
          "             in the stash region: the inputs they read %.2f MiB (%d slots x %.2f MiB), the output "
          "gradients %.2f MiB (%d slots x %.2f MiB)\n",
          mib(l->pool_slots[LX_POOL_HELD] * l->pool_slot_bytes[LX_POOL_HELD]), l->pool_slots[LX_POOL_HELD],
          mib(l->pool_slot_bytes[LX_POOL_HELD]),
          mib(l->pool_slots[LX_POOL_WEIGHT_GRAD] * l->pool_slot_bytes[LX_POOL_WEIGHT_GRAD]),
          l->pool_slots[LX_POOL_WEIGHT_GRAD], mib(l->pool_slot_bytes[LX_POOL_WEIGHT_GRAD]));
}

static void print_weight_passes(const lx_pipeline *p, const lx_stage *st, const lx_stage_layout *l,
                                FILE *out) {
  if (p->kind != LX_SCHEDULE_ZB_H1) return;
  int deferred = 0;
  for (int i = 0; i < p->ir->block.n_ops; i++)
    deferred += lx_defers_weight_grad(p->ir, st, LX_GRAPH_BLOCK, i);
  if (deferred)
    fprintf(out,
            "  W passes   the weight gradients of %d linear%s per layer run %d micro-batch%s after their "
            "backward, in the drain's waits\n",
            deferred, deferred == 1 ? "" : "s", st->weight_lag, st->weight_lag == 1 ? "" : "es");
  if (deferred && l)
    print_pools(l, out);
  else
    fprintf(out, "  W passes   none: %s\n",
            st->index == 0 ? "the first stage's drain has no wait to fill (lag 0), its backwards stay whole"
                           : "the policy recomputes every linear's input, which a W pass would read");
}

static void print_stage_text(const lx_report *r, int s, FILE *out) {
  const lx_ir *ir = r->pipe->ir;
  const lx_stage *st = &r->pipe->stages[s];
  const lx_stage_memory *m = &r->memory[s];
  const lx_stage_timeline *tl = &r->sim->stages[s];
  char layers[LX_RANGES_TEXT + 32];
  stage_layers(st, layers, sizeof layers);
  if (st->frozen_per_rank) /* fine-tuning: the trained ones are the adapters */
    fprintf(out, "\nstage %d: %s, %.1f M trained parameters per rank, %.1f M frozen\n", s, layers,
            (double)st->params_per_rank / 1e6, (double)st->frozen_per_rank / 1e6);
  else
    fprintf(out, "\nstage %d: %s, %.1f M parameters per rank\n", s, layers,
            (double)st->params_per_rank / 1e6);
  fprintf(
      out,
      "  time       compute %.2f ms, recompute %.2f ms, exposed communication %.2f ms, compute busy %.1f%%\n",
      ms(tl->compute_time), ms(tl->recompute_time), ms(tl->exposed_comm_time),
      100 * tl->busy[LX_STREAM_COMPUTE] / r->sim->iteration_time);
  char peak[LX_BYTES_TEXT], capacity[LX_BYTES_TEXT], weights[LX_BYTES_TEXT], grads[LX_BYTES_TEXT],
      optimizer[LX_BYTES_TEXT], activations[LX_BYTES_TEXT], kept[LX_BYTES_TEXT], transient[LX_BYTES_TEXT];
  fprintf(out,
          "  memory     modeled peak %s of %s%s (liveness of what each op keeps; the scheduler's model)\n",
          lx_bytes_text((double)m->peak, peak), lx_bytes_text(r->capacity_bytes, capacity),
          (double)m->peak > r->capacity_bytes ? "  -- DOES NOT FIT" : "");
  fprintf(out,
          "             weights %s, grads %s, optimizer %s, activations %s (%d micro-batches x %s kept), "
          "transient %s\n",
          lx_bytes_text((double)m->weights, weights), lx_bytes_text((double)m->grads, grads),
          lx_bytes_text((double)m->optimizer, optimizer),
          lx_bytes_text((double)m->activations_peak, activations), m->stashed_micro_batches,
          lx_bytes_text((double)m->kept_per_micro_batch, kept),
          lx_bytes_text((double)m->transient_peak, transient));
  if (m->host_bytes > 0)
    fprintf(out, "             host memory %s of offloaded activations (pinned, besides the GPU's)\n",
            lx_bytes_text((double)m->host_bytes, kept));
  if (r->layouts) print_arena(&r->pipe->stages[s], &r->layouts[s], out);
  print_weight_passes(r->pipe, st, r->layouts ? &r->layouts[s] : NULL, out);
  print_layer_decisions(ir, st, out);
  print_policy_stats(st, r->search_times, out);
  print_windows(r->pipe, st, out);
}

void lx_print_plan_text(const lx_report *r, FILE *out) {
  const lx_pipeline *p = r->pipe;
  const lx_ir *ir = p->ir;
  const lx_plan *plan = &ir->plan;
  char name[LX_TEXT_MAX];
  fprintf(out, "lynxgen plan for %s\n", lx_text(lx_file_name(ir->model_path), name, sizeof name));
  char params[LX_BYTES_TEXT];
  fprintf(out, "model      %d layers, hidden %d, %d heads, seq %d, vocab %d: %s parameters\n",
          ir->model.layers, ir->model.hidden, ir->model.heads, ir->model.seq_len, ir->model.vocab,
          lx_count_text((double)ir->params_total, params));
  fprintf(out, "cluster    %d node(s) x %d %s (%s inside a node, %s across)\n", ir->cluster.nodes,
          ir->cluster.gpus_per_node, lx_gpu_name(ir->cluster.gpu), lx_link_name(ir->cluster.intra_node_link),
          lx_link_name(ir->cluster.inter_node_link));
  fprintf(out,
          "plan       tp %d x pp %d x dp %d, micro-batch %d, %d micro-batches per iteration, %s, recompute "
          "%s, %s\n",
          plan->tp, p->pp, plan->dp, plan->micro_batch, p->micro_batches, lx_schedule_name(p->kind),
          lx_recompute_policy_name(p->policy), lx_dtype_name(ir->training.dtype));
  if (p->balanced_split)
    fprintf(
        out,
        "split      recompute-aware (gen/planning/partition.c): the stages' layers balance their time with\n"
        "           what each must recompute, not an even split (--partition)\n");
  if (p->kind == LX_SCHEDULE_INTERLEAVED)
    fprintf(
        out,
        "chunks     %d per stage (Megatron's interleaved 1F1B): stage s holds model chunks s, s + %d, ...;\n"
        "           the bubble is (p-1)/(V m) of the ideal step, 1F1B's divided by V, for V times the\n"
        "           point-to-point transfers (docs/schedules.md)\n",
        p->virtual_stages, p->pp);
  if (ir->plan.mini_sequences > 1)
    fprintf(
        out,
        "mini-seq   %d pieces of the sequence for the LM head with its loss and each MLP (MsT): the logits,\n"
        "           the MLP hidden and their gradients exist one piece at a time, the backward makes them "
        "again\n",
        ir->plan.mini_sequences);
  if (p->kind == LX_SCHEDULE_2BW)
    fprintf(out,
            "semantics  PipeDream-2BW, not synchronous training: the pipeline does not drain between steps,\n"
            "           and step t computes with the weights before the last update,\n"
            "           W(t+1) = W(t) - AdamW(gradient at W(t-1)) (docs/schedules.md)\n");
  for (int s = 0; s < p->pp; s++)
    print_stage_text(r, s, out);
  fprintf(out, "\niteration  %.2f ms, bubble %.1f%%, %.0f tokens/s, MFU %.1f%%, HFU %.1f%%\n",
          ms(r->sim->iteration_time), 100 * r->sim->bubble_fraction, r->sim->tokens_per_s, 100 * r->sim->mfu,
          100 * r->sim->hfu);
}

typedef enum { OPS_RECOMPUTED, OPS_IN_WINDOWS, OPS_OFFLOADED } op_set;

/* The block's ops in one set (recomputed, recomputed in windows, offloaded), by name. */
static void put_ops(cJSON *parent, const char *key, const lx_ir *ir, const lx_stage *st, op_set set) {
  cJSON *names = lx_json_add_array(parent, key);
  for (int i = 0; i < ir->block.n_ops; i++) {
    const lx_op_decision *d = &st->decisions[i];
    bool in = set == OPS_OFFLOADED ? d->offload : d->recompute && (set == OPS_RECOMPUTED || d->in_window);
    if (in) lx_json_add_string(names, NULL, ir->block.ops[i].name);
  }
}

/* Token-wise splits: per op, the row pieces offloaded of LX_TOKEN_PIECES. */
static void put_token_splits(cJSON *parent, const lx_ir *ir, const lx_stage *st) {
  cJSON *splits = lx_json_add_array(parent, "token_split_ops");
  for (int i = 0; i < ir->block.n_ops; i++) {
    if (!lx_token_split(&st->decisions[i])) continue;
    cJSON *split = lx_json_add_object(splits, NULL);
    lx_json_add_string(split, "op", ir->block.ops[i].name);
    lx_json_add_int(split, "host_pieces", st->decisions[i].host_pieces);
    lx_json_add_int(split, "pieces", LX_TOKEN_PIECES);
  }
}

/* Head splits: per op recomputed in windows by pieces of its kv heads, how many. */
static void put_head_splits(cJSON *parent, const lx_ir *ir, const lx_stage *st) {
  cJSON *splits = lx_json_add_array(parent, "head_split_ops");
  for (int i = 0; i < ir->block.n_ops; i++) {
    const lx_op_decision *d = &st->decisions[i];
    if (!d->recompute || !d->in_window || lx_window_pieces(d) < 2) continue;
    cJSON *split = lx_json_add_object(splits, NULL);
    lx_json_add_string(split, "op", ir->block.ops[i].name);
    lx_json_add_int(split, "kv_pieces", d->window_pieces);
  }
}

/* Interleaved 1F1B: the stage's model chunks. */
static void put_chunks_json(cJSON *stage, const lx_stage *st) {
  cJSON *chunks = lx_json_add_array(stage, "chunks");
  for (int v = 0; v < st->n_chunks; v++) {
    cJSON *c = lx_json_add_object(chunks, NULL);
    lx_json_add_int(c, "first_layer", st->chunks[v].first_layer);
    lx_json_add_int(c, "layers", st->chunks[v].n_layers);
  }
}

static void put_stage_json(cJSON *stages, const lx_report *r, int s) {
  const lx_pipeline *p = r->pipe;
  const lx_stage *st = &p->stages[s];
  const lx_stage_memory *m = &r->memory[s];
  const lx_stage_timeline *tl = &r->sim->stages[s];
  cJSON *w = lx_json_add_object(stages, NULL);
  lx_json_add_int(w, "stage", s);
  lx_json_add_int(w, "first_layer", st->chunks[0].first_layer);
  lx_json_add_int(w, "layers", st->n_layers);
  if (st->n_chunks > 1) put_chunks_json(w, st);
  lx_json_add_bool(w, "prologue", st->has_prologue);
  lx_json_add_bool(w, "epilogue", st->has_epilogue);
  lx_json_add_number(w, "compute_s", tl->compute_time);
  lx_json_add_number(w, "recompute_s", tl->recompute_time);
  lx_json_add_number(w, "exposed_comm_s", tl->exposed_comm_time);
  lx_json_add_int(w, "peak_bytes", m->peak);
  lx_json_add_int(w, "weights_bytes", m->weights);
  lx_json_add_int(w, "grads_bytes", m->grads);
  lx_json_add_int(w, "optimizer_bytes", m->optimizer);
  lx_json_add_int(w, "activations_bytes", m->activations_peak);
  lx_json_add_int(w, "transient_bytes", m->transient_peak);
  lx_json_add_int(w, "stashed_micro_batches", m->stashed_micro_batches);
  lx_json_add_bool(w, "fits", (double)m->peak <= r->capacity_bytes);
  if (r->layouts) lx_json_add_int(w, "arena_bytes", r->layouts[s].total);
  put_ops(w, "recomputed_ops", p->ir, st, OPS_RECOMPUTED);
  put_ops(w, "window_ops", p->ir, st, OPS_IN_WINDOWS);
  put_ops(w, "offloaded_ops", p->ir, st, OPS_OFFLOADED);
  put_token_splits(w, p->ir, st);
  put_head_splits(w, p->ir, st);
  lx_json_add_int(w, "host_bytes", m->host_bytes);
  window_use u = window_use_of(p, st);
  lx_json_add_int(w, "windows_found", st->window_of ? st->n_windows : 0);
  lx_json_add_int(w, "windows_used", u.used);
  lx_json_add_int(w, "windowed_instances", u.instances);
  lx_json_add_int(w, "window_parts", u.parts);
  lx_json_add_int(w, "windowed_ops", u.ops);
  lx_json_add_int(w, "split_instances", u.split);
}

void lx_print_plan_json(const lx_report *r, FILE *out) {
  const lx_pipeline *p = r->pipe;
  const lx_ir *ir = p->ir;
  cJSON *doc = lx_json_document();
  lx_json_add_string(doc, "model_file", lx_file_name(ir->model_path));
  cJSON *plan = lx_json_add_object(doc, "plan");
  lx_json_add_int(plan, "tp", ir->plan.tp);
  lx_json_add_int(plan, "pp", p->pp);
  lx_json_add_int(plan, "virtual_stages", p->virtual_stages);
  lx_json_add_int(plan, "dp", ir->plan.dp);
  lx_json_add_int(plan, "micro_batch", ir->plan.micro_batch);
  lx_json_add_int(plan, "micro_batches", p->micro_batches);
  lx_json_add_string(plan, "schedule", lx_schedule_name(p->kind));
  lx_json_add_string(plan, "split", p->balanced_split ? "recompute-aware" : "even");
  lx_json_add_string(plan, "recompute", lx_recompute_policy_name(p->policy));
  lx_json_add_int(plan, "mini_sequences", ir->plan.mini_sequences);
  lx_json_add_number(doc, "capacity_bytes", r->capacity_bytes);
  cJSON *stages = lx_json_add_array(doc, "stages");
  for (int s = 0; s < p->pp; s++)
    put_stage_json(stages, r, s);
  lx_json_add_number(doc, "iteration_s", r->sim->iteration_time);
  lx_json_add_number(doc, "bubble_fraction", r->sim->bubble_fraction);
  lx_json_add_number(doc, "tokens_per_s", r->sim->tokens_per_s);
  lx_json_add_number(doc, "mfu", r->sim->mfu);
  lx_json_add_number(doc, "hfu", r->sim->hfu);
  lx_json_write(doc, true, out);
}
