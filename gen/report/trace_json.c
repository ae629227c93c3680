/* trace_json.c — trace.json, the simulated iteration in Chrome's trace-event
 * format (trace.h): one process per stage, one thread per stream, one
 * complete event per instruction that takes time, and a "windows" track.
 *
 * A plan of thousands of micro-batches has millions of instructions, more
 * than a viewer loads (GPT-7B with 4096 micro-batches: 645 MB). Past
 * max_events, the file keeps the events that start in the first half of that
 * many and those in the last half (warm-up, drain, optimizer step): what is
 * left out is the steady state, which repeats. A global instant event marks
 * the cut, and otherData says what it left out.
 *
 * Written with cJSON (json.h) one event per line as the events are made:
 * large plans have hundreds of thousands of them, too many to hold as one
 * document. Times are microseconds rounded to the nanosecond, so that the
 * same simulation gives the same bytes. */
#include "json.h"
#include "report/trace.h"
#include "report/trace_draw.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

/* The trace-event category: both all-reduces are "collective". */
static const char *category_name(lx_paint p) {
  static const char *names[] = {"forward",    "forward",    "backward",  "weights",   "recompute", "p2p",
                                "collective", "collective", "optimizer", "host copy", "event"};
  _Static_assert(sizeof names / sizeof names[0] == PAINT_COUNT, "one category per paint");
  return names[p];
}

/* The window a RECOMPUTE on stream k runs in: where its op of its layer instance was placed, when it
 * is on the recompute stream; -1 when it runs on demand. */
static int window_of_instr(const lx_pipeline *p, const lx_stage *st, int k, const lx_instr *in) {
  if (k != LX_STREAM_RECOMPUTE || in->kind != LX_I_RECOMPUTE || in->graph != LX_GRAPH_BLOCK || !st->window_of)
    return -1;
  int mb = in->mb % p->micro_batches; /* a step's, where the pipeline is unrolled over several */
  return lx_piece_window(p, st, lx_layer_slot(st, in->layer) * p->micro_batches + mb, in->op,
                         in->piece_first);
}

/* Microseconds rounded to the nanosecond; never negative. */
static void put_us(cJSON *parent, const char *key, double seconds) {
  double ns = seconds > 0 ? seconds * 1e9 : 0;
  lx_json_add_number(parent, key, (double)(int64_t)(ns + 0.5) / 1e3);
}

/* The windows' track comes after the streams' threads. */
enum { WINDOWS_TID = LX_STREAM_COUNT };

/* A metadata event ("ph":"M") whose one argument is arg_key: text, or the
 * number `value` when text is NULL. */
static void put_metadata(lx_json_stream *trace, const char *name, int pid, int tid, const char *arg_key,
                         const char *text, int value) {
  cJSON *event = lx_json_document();
  lx_json_add_string(event, "name", name);
  lx_json_add_string(event, "ph", "M");
  lx_json_add_int(event, "pid", pid);
  lx_json_add_int(event, "tid", tid);
  cJSON *args = lx_json_add_object(event, "args");
  if (text)
    lx_json_add_string(args, arg_key, text);
  else
    lx_json_add_int(args, arg_key, value);
  lx_json_stream_element(trace, event);
}

static void put_thread_metadata(lx_json_stream *trace, int s, int tid, const char *name) {
  put_metadata(trace, "thread_name", s, tid, "name", name, 0);
  put_metadata(trace, "thread_sort_index", s, tid, "sort_index", NULL, tid);
}

static void put_process_metadata(lx_json_stream *trace, const lx_pipeline *p, int s, bool windows) {
  char layers[LX_RANGES_TEXT + 16], name[LX_RANGES_TEXT + 48];
  lx_layer_range(&p->stages[s], layers, sizeof layers);
  snprintf(name, sizeof name, "stage %d (%s)", s, layers);
  put_metadata(trace, "process_name", s, 0, "name", name, 0);
  put_metadata(trace, "process_sort_index", s, 0, "sort_index", NULL, s);
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    put_thread_metadata(trace, s, k, lx_stream_name((lx_stream)k));
  if (windows) put_thread_metadata(trace, s, WINDOWS_TID, "windows");
}

/* A token-split op's copies move its first rows, its recompute makes the
 * others: "rows" [first, end) in eighths of the micro-batch's rows. */
static void put_token_rows(cJSON *args, const lx_stage *st, const lx_instr *in) {
  const lx_op_decision *d = in->graph == LX_GRAPH_BLOCK && st->decisions ? &st->decisions[in->op] : NULL;
  if (!d || !lx_token_split(d) || in->kind == LX_I_FWD || in->kind == LX_I_BWD || in->kind == LX_I_BWD_WEIGHT)
    return;
  char rows[48];
  bool recomputed = in->kind == LX_I_RECOMPUTE;
  snprintf(rows, sizeof rows, "[%d/%d, %d/%d)", recomputed ? d->host_pieces : 0, LX_TOKEN_PIECES,
           recomputed ? LX_TOKEN_PIECES : d->host_pieces, LX_TOKEN_PIECES);
  lx_json_add_string(args, "rows", rows);
}

/* A head-split op's recompute runs its kv heads in pieces: "kv_pieces" [first, end) of how many. */
static void put_head_pieces(cJSON *args, const lx_instr *in) {
  if (!in->pieces) return;
  char pieces[48];
  snprintf(pieces, sizeof pieces, "[%d, %d) of %d", in->piece_first, in->piece_end, in->pieces);
  lx_json_add_string(args, "kv_pieces", pieces);
}

/* Where a recompute runs: in window w (on the recompute stream) or on demand. */
static void put_placement(cJSON *args, const lx_stage *st, int w) {
  if (w < 0) {
    lx_json_add_string(args, "placement", "on demand");
    return;
  }
  lx_json_add_string(args, "placement", "window");
  lx_json_add_int(args, "window", w);
  lx_json_add_string(args, "window_kind", lx_window_kind_name(st->windows[w].kind));
}

/* The instruction's fields that apply to its kind, for filtering in a viewer
 * (Perfetto: args.kind = 'BWD' and args.layer = 3). */
static void put_instr_args(cJSON *event, const lx_pipeline *p, int s, int k, const lx_instr *in) {
  cJSON *args = lx_json_add_object(event, "args");
  lx_json_add_string(args, "kind", lx_instr_kind_name(in->kind));
  if (p->steps >
      1) { /* unrolled (2BW): the step an instruction runs in, a micro-batch's own step and number */
    lx_json_add_int(args, "in_step", in->step);
    if (in->mb >= 0) lx_json_add_int(args, "step", in->mb / p->micro_batches);
  }
  if (in->mb >= 0) lx_json_add_int(args, "mb", lx_shown_mb(p, in->mb));
  if (in->layer >= 0) lx_json_add_int(args, "layer", in->layer);
  if (p->virtual_stages > 1) /* interleaved: the stage's chunk, and the model chunk it is */
    lx_json_add_int(args, "chunk", lx_instr_chunk(&p->stages[s], in));
  switch (in->kind) {
  case LX_I_FWD:
  case LX_I_BWD:
  case LX_I_BWD_WEIGHT:
  case LX_I_RECOMPUTE:
  case LX_I_OFFLOAD:
  case LX_I_PREFETCH:
  case LX_I_ALLREDUCE_TP: {
    const lx_graph *g = lx_graph_of(p->ir, in->graph);
    lx_json_add_string(args, "graph", g->name);
    lx_json_add_string(args, "op", g->ops[in->op].name);
    if (in->kind == LX_I_ALLREDUCE_TP) lx_json_add_bool(args, "backward", in->backward);
    if (in->kind == LX_I_RECOMPUTE)
      put_placement(args, &p->stages[s], window_of_instr(p, &p->stages[s], k, in));
    if (in->kind != LX_I_ALLREDUCE_TP) put_token_rows(args, &p->stages[s], in);
    put_head_pieces(args, in);
    break;
  }
  case LX_I_SEND_ACT:
  case LX_I_RECV_ACT:
  case LX_I_SEND_GRAD:
  case LX_I_RECV_GRAD: lx_json_add_int(args, "peer", in->peer); break;
  default: break;
  }
  if (in->bytes) lx_json_add_int(args, "bytes", in->bytes);
}

/* A complete event ("ph":"X") from start to end on thread tid of stage s. */
static cJSON *span_event(const char *name, const char *category, int s, int tid, double start, double end) {
  cJSON *event = lx_json_document();
  lx_json_add_string(event, "name", name);
  lx_json_add_string(event, "cat", category);
  lx_json_add_string(event, "ph", "X");
  lx_json_add_int(event, "pid", s);
  lx_json_add_int(event, "tid", tid);
  put_us(event, "ts", start);
  put_us(event, "dur", end - start);
  return event;
}

/* The instruction events kept: those starting before head_end or after tail_after. */
typedef struct {
  double head_end, tail_after;
  int64_t omitted;
} kept_span;

static bool is_kept(const kept_span *keep, double start) {
  return start < keep->head_end || start > keep->tail_after;
}

static const lx_interval *timed_interval(const lx_simulation *sim, int s, int k, int i) {
  const lx_instr *in = &sim->pipe->stages[s].streams[k].items[i];
  return lx_paint_of(in) == PAINT_NONE ? NULL : lx_interval_of(sim, s, k, i); /* NULL: never reached */
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Which instruction events to write: all of them when they number at most
 * max_events (or max_events is 0); else the max_events / 2 first to start
 * and the max_events / 2 last, fewer where start times tie at a cut. */
static kept_span choose_kept(const lx_simulation *sim, int64_t max_events) {
  const lx_pipeline *p = sim->pipe;
  kept_span keep = {INFINITY, INFINITY, 0};
  size_t instructions = 0, n = 0;
  for (int s = 0; s < p->pp; s++)
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      instructions += (size_t)p->stages[s].streams[k].count;
  double *starts = lx_malloc(sizeof *starts * (instructions + 1));
  for (int s = 0; s < p->pp; s++)
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      for (int i = 0; i < p->stages[s].streams[k].count; i++) {
        const lx_interval *t = timed_interval(sim, s, k, i);
        if (t) starts[n++] = t->start;
      }
  if (max_events > 0 && n > (size_t)max_events) {
    qsort(starts, n, sizeof *starts, by_value);
    size_t half = (size_t)max_events / 2;
    keep.head_end = starts[half], keep.tail_after = starts[n - 1 - half];
    for (size_t e = 0; e < n; e++)
      keep.omitted += !is_kept(&keep, starts[e]);
  }
  free(starts);
  return keep;
}

static void put_instr_event(lx_json_stream *trace, const lx_simulation *sim, const kept_span *keep, int s,
                            int k, int i) {
  const lx_instr *in = &sim->pipe->stages[s].streams[k].items[i];
  const lx_interval *t = timed_interval(sim, s, k, i);
  if (!t || !is_kept(keep, t->start)) return; /* takes no time, never reached, or left out */
  char name[160];
  lx_describe_shown(sim->pipe, in, name, sizeof name);
  cJSON *event = span_event(name, category_name(lx_paint_of(in)), s, k, t->start, t->end);
  put_instr_args(event, sim->pipe, s, k, in);
  lx_json_stream_element(trace, event);
}

/* Where the steady state was left out: a line across every stage at each end. */
static void put_cut_event(lx_json_stream *trace, const kept_span *keep, int64_t max_events, bool first) {
  char name[192];
  snprintf(name, sizeof name, "%lld events left out %s here (trace.json holds at most %lld: --trace-events)",
           (long long)keep->omitted, first ? "from" : "up to", (long long)max_events);
  cJSON *event = lx_json_document();
  lx_json_add_string(event, "name", name);
  lx_json_add_string(event, "cat", "omitted");
  lx_json_add_string(event, "ph", "i");
  lx_json_add_string(event, "s", "g");
  lx_json_add_int(event, "pid", 0);
  lx_json_add_int(event, "tid", 0);
  put_us(event, "ts", first ? keep->head_end : keep->tail_after);
  lx_json_stream_element(trace, event);
}

/* The file name of the model without ".model", whole however long it is. */
static void put_model_name(cJSON *parent, const lx_ir *ir) {
  size_t size = (ir->model_path ? strlen(ir->model_path) : 0) + sizeof "model";
  char *name = lx_malloc(size);
  lx_model_name(ir, name, size);
  lx_json_add_string(parent, "model", name);
  free(name);
}

/* What the trace is of (a deadlocked simulation has no finite times: 0). */
static void put_trace_summary(cJSON *doc, const lx_simulation *sim, const kept_span *keep) {
  const lx_pipeline *p = sim->pipe;
  cJSON *w = lx_json_add_object(doc, "otherData");
  lx_json_add_string(w, "generator", "lynxgen");
  put_model_name(w, p->ir);
  lx_json_add_string(w, "schedule", lx_schedule_name(p->kind));
  lx_json_add_string(w, "recompute", lx_recompute_policy_name(p->policy));
  lx_json_add_int(w, "pp", p->pp);
  lx_json_add_int(w, "tp", lx_plan_or_one(p->ir->plan.tp));
  lx_json_add_int(w, "dp", lx_plan_or_one(p->ir->plan.dp));
  lx_json_add_int(w, "micro_batches", p->micro_batches);
  put_us(w, "iteration_time_us", lx_is_finite(sim->iteration_time) ? sim->iteration_time : 0);
  if (p->steps > 1) { /* steps that overlap (2BW), drawn back to back: the iteration is one in the middle */
    lx_json_add_int(w, "steps", p->steps);
    put_us(w, "span_us", lx_drawn_span(sim));
  }
  lx_json_add_number(w, "bubble_fraction", lx_is_finite(sim->bubble_fraction) ? sim->bubble_fraction : 0);
  lx_json_add_number(w, "mfu", lx_is_finite(sim->mfu) ? sim->mfu : 0);
  lx_json_add_number(w, "hfu", lx_is_finite(sim->hfu) ? sim->hfu : 0);
  lx_json_add_bool(w, "deadlocked", sim->deadlocked);
  if (keep->omitted) { /* the instruction events that start in [from_us, to_us] are not in the file */
    cJSON *o = lx_json_add_object(w, "omitted");
    lx_json_add_int(o, "events", keep->omitted);
    put_us(o, "from_us", keep->head_end);
    put_us(o, "to_us", keep->tail_after);
  }
}

/* A window as a complete event on its stage's "windows" track: where the
 * compute stream could idle, what kind of wait it is, and how many layer
 * instances recompute there. */
static void put_window_event(lx_json_stream *trace, const lx_stage *st, int s, int w,
                             const lx_window_span *span) {
  const lx_window *win = &st->windows[w];
  char name[64];
  snprintf(name, sizeof name, "window %d (%s)", w, lx_window_kind_name(win->kind));
  cJSON *event = span_event(name, "window", s, WINDOWS_TID, span->start, span->end);
  cJSON *args = lx_json_add_object(event, "args");
  lx_json_add_string(args, "kind", "WINDOW");
  lx_json_add_int(args, "window", w);
  lx_json_add_string(args, "window_kind", lx_window_kind_name(win->kind));
  lx_json_add_int(args, "after", win->after);
  lx_json_add_int(args, "instances", span->instances);
  put_us(args, "measured_us", win->length);
  put_us(args, "capacity_us", win->capacity);
  lx_json_stream_element(trace, event);
}

void lx_write_trace_json(const lx_simulation *sim, int64_t max_events, FILE *out) {
  const lx_pipeline *p = sim->pipe;
  kept_span keep = choose_kept(sim, max_events);
  cJSON *head = lx_json_document();
  lx_json_add_string(head, "displayTimeUnit", "ms");
  put_trace_summary(head, sim, &keep);
  lx_json_stream trace;
  lx_json_stream_begin(&trace, head, "traceEvents", out);
  for (int s = 0; s < p->pp; s++)
    put_process_metadata(&trace, p, s, p->stages[s].window_of && p->stages[s].n_windows > 0);
  for (int s = 0; s < p->pp; s++) {
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      for (int i = 0; i < p->stages[s].streams[k].count; i++)
        put_instr_event(&trace, sim, &keep, s, k, i);
    lx_window_span *spans = lx_window_spans(sim, s);
    for (int w = 0; spans && w < p->stages[s].n_windows; w++)
      if (spans[w].reached && is_kept(&keep, spans[w].start))
        put_window_event(&trace, &p->stages[s], s, w, &spans[w]);
    free(spans);
  }
  for (int end = 0; keep.omitted && end < 2; end++)
    put_cut_event(&trace, &keep, max_events, end == 0);
  lx_json_stream_end(&trace);
}
