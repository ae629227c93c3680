/* trace.c — trace.json, schedule.svg and memory.svg from a simulation.
 *
 * The trace keeps every instruction; the SVGs are for a glance and merge
 * what a reader could not tell apart at their scale anyway. Every number is
 * printed with a fixed format, so the same simulation gives the same bytes
 * (the files are diffed across generator versions). No libm: lynxgen does
 * not link it. */
#include "trace.h"

#include "alloc.h"
#include "escape.h"

#include <stdlib.h>
#include <string.h>

/* ---- shared helpers ------------------------------------------------------ */

/* What a trace viewer groups by ("cat") and what the SVGs colour by. */
typedef enum {
  PAINT_FORWARD,
  PAINT_BACKWARD,
  PAINT_RECOMPUTE,
  PAINT_P2P,
  PAINT_TP,
  PAINT_DP,
  PAINT_OPTIMIZER,
  PAINT_NONE, /* RECORD/WAIT: they take no time of their own */
  PAINT_COUNT
} paint;

static paint paint_of(lx_instr_kind k) {
  switch (k) {
  case LX_I_FWD: return PAINT_FORWARD;
  case LX_I_BWD: return PAINT_BACKWARD;
  case LX_I_RECOMPUTE: return PAINT_RECOMPUTE;
  case LX_I_SEND_ACT:
  case LX_I_RECV_ACT:
  case LX_I_SEND_GRAD:
  case LX_I_RECV_GRAD: return PAINT_P2P;
  case LX_I_ALLREDUCE_TP: return PAINT_TP;
  case LX_I_ALLREDUCE_DP: return PAINT_DP;
  case LX_I_OPTIMIZER_STEP: return PAINT_OPTIMIZER;
  default: return PAINT_NONE;
  }
}

/* The trace-event category: both all-reduces are "collective". */
static const char *category_name(paint p) {
  static const char *names[] = {"forward",    "backward",   "recompute", "p2p",
                                "collective", "collective", "optimizer", "event"};
  _Static_assert(sizeof names / sizeof names[0] == PAINT_COUNT, "one category per paint");
  return names[p];
}

/* CSS class in schedule.svg, and the legend's words for it. */
static const char *paint_class(paint p) {
  static const char *names[] = {"fwd", "bwd", "rec", "p2p", "tp", "dp", "opt", "evt"};
  _Static_assert(sizeof names / sizeof names[0] == PAINT_COUNT, "one class per paint");
  return names[p];
}

static const char *paint_legend(paint p) {
  static const char *names[] = {"forward",       "backward",      "recompute",      "send / recv",
                                "tp all-reduce", "dp all-reduce", "optimizer step", "event"};
  _Static_assert(sizeof names / sizeof names[0] == PAINT_COUNT, "one legend entry per paint");
  return names[p];
}

static bool is_finite(double x) { return x == x && x - x == 0; }

/* The interval of instruction i of a stream, or NULL when the simulation did
 * not reach it (a deadlock) or the stream has no times. */
static const lx_interval *interval_of(const lx_simulation *sim, int stage, int stream, int i) {
  const lx_interval *t = sim->stages[stage].times[stream];
  if (!t || !is_finite(t[i].start) || !is_finite(t[i].end)) return NULL;
  return &t[i];
}

/* Seconds the drawings span: the iteration, or the last end seen where the
 * simulation stopped early. Never zero, so scales stay finite. */
static double drawn_span(const lx_simulation *sim) {
  double span = is_finite(sim->iteration_time) ? sim->iteration_time : 0;
  const lx_pipeline *p = sim->pipe;
  for (int s = 0; s < p->pp; s++)
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      for (int i = 0; i < p->stages[s].streams[k].count; i++) {
        const lx_interval *t = interval_of(sim, s, k, i);
        if (t && t->end > span) span = t->end;
      }
  return span > 0 ? span : 1e-6;
}

/* "tiny" for "examples/tiny.model". */
static void model_name(const lx_ir *ir, char *buf, size_t size) {
  const char *path = ir->model_path ? lx_file_name(ir->model_path) : "model";
  const char *base = strrchr(path, '/');
  snprintf(buf, size, "%s", base ? base + 1 : path);
  char *dot = strrchr(buf, '.');
  if (dot && dot != buf && !strcmp(dot, ".model")) *dot = '\0';
}

static void layer_range(const lx_stage *st, char *buf, size_t size) {
  if (st->n_layers == 0)
    snprintf(buf, size, "no layers");
  else if (st->n_layers == 1)
    snprintf(buf, size, "layer %d", st->first_layer);
  else
    snprintf(buf, size, "layers %d-%d", st->first_layer, st->first_layer + st->n_layers - 1);
}

/* ---- recompute windows ---------------------------------------------------- */

/* A planned policy's windows as the simulation ran them: from the end of the
 * FWD/BWD a window follows to the start of the compute stream's next FWD/BWD
 * (the recompute stream starts there; the schedule may have moved since the
 * windows were measured, so these are the simulated times, not the measured
 * ones), and how many layer instances recompute in each. */
typedef struct {
  double start, end;
  int instances;
  bool reached; /* the simulation ran the FWD/BWD it follows */
} window_span;

static bool is_pass(lx_instr_kind k) { return k == LX_I_FWD || k == LX_I_BWD; }

/* Its spans, or NULL when the stage places no recompute in windows. */
static window_span *window_spans(const lx_simulation *sim, int s) {
  const lx_pipeline *p = sim->pipe;
  const lx_stage *st = &p->stages[s];
  if (!st->window_of || st->n_windows <= 0) return NULL;
  window_span *w = lx_calloc((size_t)st->n_windows, sizeof *w);
  for (int i = 0; i < st->n_layers * p->micro_batches; i++)
    if (st->window_of[i] >= 0 && st->window_of[i] < st->n_windows) w[st->window_of[i]].instances++;
  const lx_instr_list *compute = &st->streams[LX_STREAM_COMPUTE];
  double span = drawn_span(sim);
  int ordinal = -1, next = 0, open = -1;
  for (int i = 0; i < compute->count; i++) {
    const lx_interval *t = interval_of(sim, s, LX_STREAM_COMPUTE, i);
    if (!is_pass(compute->items[i].kind) || !t) continue;
    ordinal++;
    if (open >= 0) w[open].end = t->start, open = -1;
    for (; next < st->n_windows && st->windows[next].after <= ordinal; next++)
      if (st->windows[next].after == ordinal) {
        w[next] = (window_span){t->end, span, w[next].instances, true};
        open = next;
      }
  }
  return w;
}

/* The window a RECOMPUTE on stream k runs in: its layer instance's, when it
 * is on the recompute stream; -1 when it runs on demand. */
static int window_of_instr(const lx_pipeline *p, const lx_stage *st, int k, const lx_instr *in) {
  if (k != LX_STREAM_RECOMPUTE || in->kind != LX_I_RECOMPUTE || in->graph != LX_GRAPH_BLOCK || !st->window_of)
    return -1;
  return st->window_of[(in->layer - st->first_layer) * p->micro_batches + in->mb];
}

static const char *schedule_label(lx_schedule k) {
  return k == LX_SCHEDULE_GPIPE ? "GPipe" : k == LX_SCHEDULE_1F1B ? "1F1B" : lx_schedule_name(k);
}

static int plan_or_one(int v) { return v > 0 ? v : 1; }

/* Microseconds with nanosecond resolution; never "-0.000". */
static void put_us(FILE *out, double seconds) { fprintf(out, "%.3f", seconds > 0 ? seconds * 1e6 : 0.0); }

/* ---- trace.json ---------------------------------------------------------- */

/* The windows' track comes after the streams' threads. */
enum { WINDOWS_TID = LX_STREAM_COUNT };

static void put_thread_metadata(FILE *out, int s, int tid, const char *name) {
  fprintf(out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
          s, tid, name);
  fprintf(
      out,
      ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
      s, tid, tid);
}

static void put_process_metadata(FILE *out, const lx_pipeline *p, int s, bool windows) {
  char layers[64];
  layer_range(&p->stages[s], layers, sizeof layers);
  /* stage 0's name is the first event: no separator before it */
  fprintf(out,
          "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"stage %d "
          "(%s)\"}}",
          s ? "," : "", s, s, layers);
  fprintf(
      out,
      ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
      s, s);
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    put_thread_metadata(out, s, k, lx_stream_name((lx_stream)k));
  if (windows) put_thread_metadata(out, s, WINDOWS_TID, "windows");
}

/* Where a recompute runs: in window w (on the recompute stream) or on demand. */
static void put_placement(FILE *out, const lx_stage *st, int w) {
  if (w < 0) {
    fputs(",\"placement\":\"on demand\"", out);
    return;
  }
  fprintf(out, ",\"placement\":\"window\",\"window\":%d,\"window_kind\":\"%s\"", w,
          lx_window_kind_name(st->windows[w].kind));
}

/* The instruction's fields that apply to its kind, for filtering in a viewer
 * (Perfetto: args.kind = 'BWD' and args.layer = 3). */
static void put_instr_args(FILE *out, const lx_pipeline *p, int s, int k, const lx_instr *in) {
  const lx_ir *ir = p->ir;
  fprintf(out, "{\"kind\":\"%s\"", lx_instr_kind_name(in->kind));
  if (in->mb >= 0) fprintf(out, ",\"mb\":%d", in->mb);
  if (in->layer >= 0) fprintf(out, ",\"layer\":%d", in->layer);
  switch (in->kind) {
  case LX_I_FWD:
  case LX_I_BWD:
  case LX_I_RECOMPUTE:
  case LX_I_ALLREDUCE_TP: {
    const lx_graph *g = lx_graph_of(ir, in->graph);
    fprintf(out, ",\"graph\":\"%s\",\"op\":", g->name);
    lx_put_json_string(out, g->ops[in->op].name);
    if (in->kind == LX_I_ALLREDUCE_TP) fprintf(out, ",\"backward\":%s", in->backward ? "true" : "false");
    if (in->kind == LX_I_RECOMPUTE)
      put_placement(out, &p->stages[s], window_of_instr(p, &p->stages[s], k, in));
    break;
  }
  case LX_I_SEND_ACT:
  case LX_I_RECV_ACT:
  case LX_I_SEND_GRAD:
  case LX_I_RECV_GRAD: fprintf(out, ",\"peer\":%d", in->peer); break;
  default: break;
  }
  if (in->bytes) fprintf(out, ",\"bytes\":%lld", (long long)in->bytes);
  fputc('}', out);
}

static void put_instr_event(FILE *out, const lx_simulation *sim, int s, int k, int i) {
  const lx_ir *ir = sim->pipe->ir;
  const lx_instr *in = &sim->pipe->stages[s].streams[k].items[i];
  const lx_interval *t = interval_of(sim, s, k, i);
  paint pt = paint_of(in->kind);
  if (pt == PAINT_NONE || !t) return; /* events take no time; unreached ones have none */
  char name[160];
  lx_instr_describe(ir, in, name, sizeof name);
  fputs(",\n{\"name\":", out);
  lx_put_json_string(out, name);
  fprintf(out, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", category_name(pt), s, k);
  put_us(out, t->start);
  fputs(",\"dur\":", out);
  put_us(out, t->end - t->start);
  fputs(",\"args\":", out);
  put_instr_args(out, sim->pipe, s, k, in);
  fputc('}', out);
}

static void put_trace_summary(FILE *out, const lx_simulation *sim) {
  const lx_pipeline *p = sim->pipe;
  char name[128];
  model_name(p->ir, name, sizeof name);
  fputs("\"otherData\":{\"generator\":\"lynxgen\",\"model\":", out);
  lx_put_json_string(out, name);
  fprintf(out, ",\"schedule\":\"%s\",\"recompute\":\"%s\",\"pp\":%d,\"tp\":%d,\"dp\":%d,\"micro_batches\":%d",
          lx_schedule_name(p->kind), lx_recompute_policy_name(p->policy), p->pp, plan_or_one(p->ir->plan.tp),
          plan_or_one(p->ir->plan.dp), p->micro_batches);
  fputs(",\"iteration_time_us\":", out);
  put_us(out, is_finite(sim->iteration_time) ? sim->iteration_time : 0);
  fprintf(out, ",\"bubble_fraction\":%.6f,\"mfu\":%.6f,\"hfu\":%.6f,\"deadlocked\":%s}",
          is_finite(sim->bubble_fraction) ? sim->bubble_fraction : 0, is_finite(sim->mfu) ? sim->mfu : 0,
          is_finite(sim->hfu) ? sim->hfu : 0, sim->deadlocked ? "true" : "false");
}

/* A window as a complete event on its stage's "windows" track: where the
 * compute stream could idle, what kind of wait it is, and how many layer
 * instances recompute there. */
static void put_window_event(FILE *out, const lx_stage *st, int s, int w, const window_span *span) {
  const lx_window *win = &st->windows[w];
  fprintf(out,
          ",\n{\"name\":\"window %d (%s)\",\"cat\":\"window\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", w,
          lx_window_kind_name(win->kind), s, WINDOWS_TID);
  put_us(out, span->start);
  fputs(",\"dur\":", out);
  put_us(out, span->end - span->start);
  fprintf(out,
          ",\"args\":{\"kind\":\"WINDOW\",\"window\":%d,\"window_kind\":\"%s\",\"after\":%d,\"instances\":%d",
          w, lx_window_kind_name(win->kind), win->after, span->instances);
  fputs(",\"measured_us\":", out);
  put_us(out, win->length);
  fputs(",\"capacity_us\":", out);
  put_us(out, win->capacity);
  fputs("}}", out);
}

void lx_write_trace_json(const lx_simulation *sim, FILE *out) {
  const lx_pipeline *p = sim->pipe;
  fputs("{\"displayTimeUnit\":\"ms\",\n", out);
  put_trace_summary(out, sim);
  fputs(",\n\"traceEvents\":[", out);
  for (int s = 0; s < p->pp; s++)
    put_process_metadata(out, p, s, p->stages[s].window_of && p->stages[s].n_windows > 0);
  for (int s = 0; s < p->pp; s++) {
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      for (int i = 0; i < p->stages[s].streams[k].count; i++)
        put_instr_event(out, sim, s, k, i);
    window_span *spans = window_spans(sim, s);
    for (int w = 0; spans && w < p->stages[s].n_windows; w++)
      if (spans[w].reached) put_window_event(out, &p->stages[s], s, w, &spans[w]);
    free(spans);
  }
  fputs("\n]}\n", out);
}

/* ---- axes ---------------------------------------------------------------- */

/* A 1-2-5 step that divides `range` into about `parts` intervals. */
static double nice_step(double range, int parts) {
  double raw = range / parts, mag = 1;
  if (!(raw > 0)) return 1;
  while (mag * 10 <= raw)
    mag *= 10;
  while (mag > raw)
    mag /= 10;
  return raw <= mag ? mag : raw <= 2 * mag ? 2 * mag : raw <= 5 * mag ? 5 * mag : 10 * mag;
}

/* Decimals that tell ticks `step` apart: 0 for 5, 1 for 0.5, 2 for 0.02. */
static int step_decimals(double step) {
  int d = 0;
  for (double unit = 1; step < unit * 0.999 && d < 9; unit /= 10)
    d++;
  return d;
}

/* ---- schedule.svg -------------------------------------------------------- */

enum {
  SVG_WIDTH = 1400,
  LABEL_WIDTH = 150, /* stage names left of the lanes */
  RIGHT_MARGIN = 24,
  TOP = 64,       /* below the title and subtitle */
  MAIN_LANE = 26, /* the compute stream */
  SUB_LANE = 9,   /* recompute and communication streams */
  LANE_GAP = 1,
  ROW_GAP = 12,
  AXIS_HEIGHT = 44,
  LEGEND_HEIGHT = 30,
};

typedef struct {
  const lx_simulation *sim;
  FILE *out;
  double span; /* seconds across the plot */
  double px_per_s;
  bool lane_used[LX_STREAM_COUNT];
  int row_height;
  bool painted[PAINT_COUNT]; /* which classes appear, for the legend */
  bool windows_drawn;        /* recompute windows too */
} timeline;

static double time_x(const timeline *tl, double t) { return LABEL_WIDTH + t * tl->px_per_s; }

static bool stream_takes_time(const lx_pipeline *p, int k) {
  for (int s = 0; s < p->pp; s++)
    for (int i = 0; i < p->stages[s].streams[k].count; i++)
      if (paint_of(p->stages[s].streams[k].items[i].kind) != PAINT_NONE) return true;
  return false;
}

/* The compute lane always; a sub-lane per other stream that has work in
 * some stage, the same lanes in every row so that rows line up. */
static void choose_lanes(timeline *tl) {
  const lx_pipeline *p = tl->sim->pipe;
  tl->row_height = MAIN_LANE;
  tl->lane_used[LX_STREAM_COMPUTE] = true;
  for (int k = 0; k < LX_STREAM_COUNT; k++) {
    if (k == LX_STREAM_COMPUTE) continue;
    tl->lane_used[k] = stream_takes_time(p, k);
    if (tl->lane_used[k]) tl->row_height += LANE_GAP + SUB_LANE;
  }
}

static int row_y(const timeline *tl, int s) { return TOP + s * (tl->row_height + ROW_GAP); }

/* Offset of stream k's lane inside its row. */
static int lane_y(const timeline *tl, int k) {
  if (k == LX_STREAM_COMPUTE) return 0;
  int y = MAIN_LANE;
  for (int j = 0; j < k; j++)
    if (j != LX_STREAM_COMPUTE && tl->lane_used[j]) y += LANE_GAP + SUB_LANE;
  return y + LANE_GAP;
}

static void put_svg_style(FILE *out) {
  fputs("<defs>\n"
        "<pattern id=\"idle\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
        "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fbfbfb\"/>"
        "<rect width=\"2\" height=\"6\" fill=\"#d9d9d9\"/></pattern>\n"
        "<style type=\"text/css\"><![CDATA[\n"
        "text{font-family:Helvetica,Arial,sans-serif;fill:#222}\n"
        ".title{font-size:16px;font-weight:bold}.sub{font-size:12px;fill:#444}\n"
        ".stage{font-size:12px;font-weight:bold}.layers{font-size:10px;fill:#555}\n"
        ".lane{font-size:8px;fill:#666}.tick{font-size:10px;fill:#444}.mb{font-size:10px;fill:#fff}\n"
        ".fwd{fill:#4e79a7}.bwd{fill:#59a14f}.rec{fill:#f28e2b}.p2p{fill:#76b7b2}\n"
        ".tp{fill:#edc948}.dp{fill:#b07aa1}.opt{fill:#9c755f}.edge{stroke:#fff;stroke-width:0.6}\n"
        ".grid{stroke:#e3e3e3;stroke-width:1}.axis{stroke:#444;stroke-width:1}\n"
        ".win{fill:#f28e2b;fill-opacity:0.2;stroke:#c0392b;stroke-width:1.2;stroke-dasharray:3 2}\n"
        "]]></style>\n</defs>\n",
        out);
}

static void put_schedule_title(const timeline *tl) {
  const lx_simulation *sim = tl->sim;
  const lx_pipeline *p = sim->pipe;
  FILE *out = tl->out;
  char name[128];
  model_name(p->ir, name, sizeof name);
  fputs("<text class=\"title\" x=\"12\" y=\"24\">", out);
  lx_put_xml_text(out, name);
  fprintf(out, ": %s schedule, %d stage%s \xc3\x97 %d micro-batch%s, recompute %s, tp %d, dp %d</text>\n",
          schedule_label(p->kind), p->pp, p->pp == 1 ? "" : "s", p->micro_batches,
          p->micro_batches == 1 ? "" : "es", lx_recompute_policy_name(p->policy), plan_or_one(p->ir->plan.tp),
          plan_or_one(p->ir->plan.dp));
  if (sim->deadlocked) {
    fputs("<text class=\"sub\" x=\"12\" y=\"44\" style=\"fill:#c00\">the simulation deadlocked (a generator "
          "bug): "
          "only the instructions that ran are drawn</text>\n",
          out);
    return;
  }
  fprintf(
      out,
      "<text class=\"sub\" x=\"12\" y=\"44\">iteration %.*f ms \xc2\xb7 bubble %.1f%% \xc2\xb7 MFU %.1f%% "
      "\xc2\xb7 hatched: compute stream idle</text>\n",
      sim->iteration_time >= 0.1 ? 1 : 3, sim->iteration_time * 1e3, sim->bubble_fraction * 100,
      sim->mfu * 100);
}

static void put_stage_labels(const timeline *tl, int s) {
  const lx_stage *st = &tl->sim->pipe->stages[s];
  FILE *out = tl->out;
  int y = row_y(tl, s);
  char layers[64];
  layer_range(st, layers, sizeof layers);
  fprintf(out, "<text class=\"stage\" x=\"12\" y=\"%d\">stage %d</text>\n", y + 12, s);
  fprintf(out, "<text class=\"layers\" x=\"12\" y=\"%d\">%s%s%s</text>\n", y + 23, layers,
          st->has_prologue ? " + embedding" : "", st->has_epilogue ? " + head" : "");
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    if (k != LX_STREAM_COMPUTE && tl->lane_used[k])
      fprintf(out, "<text class=\"lane\" x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", LABEL_WIDTH - 4,
              y + lane_y(tl, k) + SUB_LANE - 1, lx_stream_name((lx_stream)k));
}

/* The lanes' backgrounds: the compute lane hatched, so that whatever no box
 * covers (the bubbles) shows as hatching; sub-lanes plain. */
static void put_lane_backgrounds(const timeline *tl, int s) {
  double width = tl->span * tl->px_per_s;
  int y = row_y(tl, s);
  fprintf(tl->out,
          "<rect x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"url(#idle)\" stroke=\"#bbb\"/>\n",
          LABEL_WIDTH, y, width, MAIN_LANE);
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    if (k != LX_STREAM_COMPUTE && tl->lane_used[k])
      fprintf(tl->out, "<rect x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"#f1f1f1\"/>\n",
              LABEL_WIDTH, y + lane_y(tl, k), width, SUB_LANE);
}

/* Neighbouring instructions of one kind and micro-batch on one lane, drawn
 * as one box. */
typedef struct {
  lx_instr_kind kind;
  int mb;
  double start, end;
  int count;
  int first; /* index of its first instruction */
} box;

static void put_box_tooltip(const timeline *tl, int s, int k, const box *b) {
  const lx_instr *first = &tl->sim->pipe->stages[s].streams[k].items[b->first];
  char what[160];
  lx_instr_describe(tl->sim->pipe->ir, first, what, sizeof what);
  fputs("<title>", tl->out);
  if (b->count == 1)
    lx_put_xml_text(tl->out, what);
  else if (b->mb >= 0)
    fprintf(tl->out, "%s mb%d: %d instructions", lx_instr_kind_name(b->kind), b->mb, b->count);
  else
    fprintf(tl->out, "%s: %d instructions", lx_instr_kind_name(b->kind), b->count);
  fprintf(tl->out, ", %.3f-%.3f ms</title>", b->start * 1e3, b->end * 1e3);
}

/* Where a lane's labels are: a micro-batch whose forward the TP all-reduces
 * cut into pieces gets its number once, in the first piece wide enough. */
typedef struct {
  lx_instr_kind kind;
  int mb;
  bool any;
} lane_labels;

/* "5" in a forward or backward box wide enough for it; "opt" in the step. */
static void put_box_label(const timeline *tl, const box *b, double x, double width, int y,
                          lane_labels *done) {
  char label[16];
  if (done->any && done->kind == b->kind && done->mb == b->mb) return;
  if (b->kind == LX_I_OPTIMIZER_STEP)
    snprintf(label, sizeof label, "opt");
  else if (b->mb >= 0)
    snprintf(label, sizeof label, "%d", b->mb);
  else
    return;
  double text_width = 6.0 * (double)strlen(label) + 4;
  if (width < text_width) return;
  fprintf(tl->out, "<text class=\"mb\" x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x + width / 2,
          y + MAIN_LANE / 2 + 4, label);
  *done = (lane_labels){.kind = b->kind, .mb = b->mb, .any = true};
}

static void put_box(timeline *tl, int s, int k, const box *b, lane_labels *labels) {
  paint pt = paint_of(b->kind);
  double x = time_x(tl, b->start), width = (b->end - b->start) * tl->px_per_s;
  int y = row_y(tl, s) + lane_y(tl, k);
  int height = k == LX_STREAM_COMPUTE ? MAIN_LANE : SUB_LANE;
  if (width < 0.5) width = 0.5; /* an instant still shows as a hairline */
  tl->painted[pt] = true;
  /* a white edge tells apart neighbouring boxes of one colour (F3 then F4) */
  bool edged = k == LX_STREAM_COMPUTE && width >= 3;
  fprintf(tl->out, "<rect class=\"%s%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\">", paint_class(pt),
          edged ? " edge" : "", x, y, width, height);
  put_box_tooltip(tl, s, k, b);
  fputs("</rect>\n", tl->out);
  if (k == LX_STREAM_COMPUTE) put_box_label(tl, b, x, width, y, labels);
}

/* Merging stops at a gap a reader could see (half a pixel): an idle wait
 * inside one micro-batch's forward stays visible. */
static bool extends(const timeline *tl, const box *b, const lx_instr *in, const lx_interval *t) {
  return b->count > 0 && b->kind == in->kind && b->mb == in->mb && (t->start - b->end) * tl->px_per_s < 0.5;
}

static void put_lane_boxes(timeline *tl, int s, int k) {
  const lx_instr_list *list = &tl->sim->pipe->stages[s].streams[k];
  box b = {.count = 0};
  lane_labels labels = {.any = false};
  for (int i = 0; i < list->count; i++) {
    const lx_instr *in = &list->items[i];
    const lx_interval *t = interval_of(tl->sim, s, k, i);
    if (paint_of(in->kind) == PAINT_NONE || !t) continue;
    if (extends(tl, &b, in, t)) {
      if (t->end > b.end) b.end = t->end;
      b.count++;
      continue;
    }
    if (b.count) put_box(tl, s, k, &b, &labels);
    b = (box){.kind = in->kind, .mb = in->mb, .start = t->start, .end = t->end, .count = 1, .first = i};
  }
  if (b.count) put_box(tl, s, k, &b, &labels);
}

/* A stage's row in two layers, so that the time grid can go between them:
 * over the hatching, under the boxes. */
static void put_stage_row(const timeline *tl, int s) {
  fprintf(tl->out, "<g class=\"stage\" id=\"stage-%d\">\n", s);
  put_stage_labels(tl, s);
  put_lane_backgrounds(tl, s);
  fputs("</g>\n", tl->out);
}

static void put_stage_boxes(timeline *tl, int s) {
  fprintf(tl->out, "<g class=\"boxes\" id=\"boxes-%d\">\n", s);
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    if (tl->lane_used[k]) put_lane_boxes(tl, s, k);
  fputs("</g>\n", tl->out);
}

/* Windows that recompute something, on the compute lane, outlined over the
 * idle they fill; neighbours closer than half a pixel merge, like boxes. */
typedef struct {
  double start, end;
  int first, count, instances;
} window_box;

static void put_window_box(timeline *tl, int s, const window_box *b) {
  const lx_stage *st = &tl->sim->pipe->stages[s];
  double x = time_x(tl, b->start), width = (b->end - b->start) * tl->px_per_s;
  fprintf(tl->out, "<rect class=\"win\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\"><title>", x,
          row_y(tl, s), width < 1 ? 1.0 : width, MAIN_LANE);
  if (b->count == 1)
    fprintf(tl->out, "window %d (%s)", b->first, lx_window_kind_name(st->windows[b->first].kind));
  else
    fprintf(tl->out, "windows %d-%d", b->first, b->first + b->count - 1);
  fprintf(tl->out, ": %d layer instance%s recompute%s here, %.3f-%.3f ms</title></rect>\n", b->instances,
          b->instances == 1 ? "" : "s", b->instances == 1 ? "s" : "", b->start * 1e3, b->end * 1e3);
  tl->windows_drawn = true;
}

static void put_stage_windows(timeline *tl, int s) {
  window_span *spans = window_spans(tl->sim, s);
  if (!spans) return;
  fprintf(tl->out, "<g class=\"windows\" id=\"windows-%d\">\n", s);
  window_box b = {.count = 0};
  for (int w = 0; w < tl->sim->pipe->stages[s].n_windows; w++) {
    const window_span *sp = &spans[w];
    if (!sp->reached || sp->instances == 0) continue;
    if (b.count && (sp->start - b.end) * tl->px_per_s < 0.5 && w == b.first + b.count) {
      b.end = sp->end, b.count++, b.instances += sp->instances;
      continue;
    }
    if (b.count) put_window_box(tl, s, &b);
    b = (window_box){sp->start, sp->end, w, 1, sp->instances};
  }
  if (b.count) put_window_box(tl, s, &b);
  fputs("</g>\n", tl->out);
  free(spans);
}

static int rows_bottom(const timeline *tl) { return row_y(tl, tl->sim->pipe->pp) - ROW_GAP; }

/* Gridlines through every row and tick labels in ms below them. */
static void put_time_axis(const timeline *tl) {
  FILE *out = tl->out;
  double span_ms = tl->span * 1e3, step = nice_step(span_ms, 10);
  int decimals = step_decimals(step), bottom = rows_bottom(tl);
  fputs("<g id=\"time-axis\">\n", out);
  for (int i = 0; i * step <= span_ms * 1.0001; i++) {
    double x = time_x(tl, i * step / 1e3);
    fprintf(out, "<line class=\"grid\" x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\"/>\n", x, TOP - 4, x,
            bottom + 4);
    fprintf(out, "<text class=\"tick\" x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%.*f</text>\n", x,
            bottom + 18, decimals, i * step);
  }
  fprintf(out, "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\"/>\n", LABEL_WIDTH, bottom + 4,
          time_x(tl, tl->span), bottom + 4);
  fprintf(out, "<text class=\"tick\" x=\"%d\" y=\"%d\" text-anchor=\"end\">time (ms)</text>\n",
          LABEL_WIDTH - 24, bottom + 18);
  fputs("</g>\n", out);
}

static void put_legend(const timeline *tl) {
  FILE *out = tl->out;
  int y = rows_bottom(tl) + AXIS_HEIGHT, x = LABEL_WIDTH;
  fputs("<g id=\"legend\">\n", out);
  for (int pt = 0; pt < PAINT_NONE; pt++) {
    if (!tl->painted[pt]) continue;
    fprintf(out, "<rect class=\"%s\" x=\"%d\" y=\"%d\" width=\"14\" height=\"14\"/>\n",
            paint_class((paint)pt), x, y);
    fprintf(out, "<text class=\"sub\" x=\"%d\" y=\"%d\">%s</text>\n", x + 19, y + 11,
            paint_legend((paint)pt));
    x += 28 + 7 * (int)strlen(paint_legend((paint)pt));
  }
  if (tl->windows_drawn) {
    fprintf(out, "<rect class=\"win\" x=\"%d\" y=\"%d\" width=\"14\" height=\"14\"/>\n", x, y);
    fprintf(out, "<text class=\"sub\" x=\"%d\" y=\"%d\">recompute window</text>\n", x + 19, y + 11);
    x += 28 + 7 * (int)strlen("recompute window");
  }
  fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"url(#idle)\" stroke=\"#bbb\"/>\n",
          x, y);
  fprintf(out, "<text class=\"sub\" x=\"%d\" y=\"%d\">idle (bubble)</text>\n", x + 19, y + 11);
  fputs("</g>\n", out);
}

static void put_svg_open(FILE *out, int width, int height) {
  fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", out);
  fprintf(out,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\">\n",
          width, height, width, height);
  fprintf(out, "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", width, height);
}

void lx_write_schedule_svg(const lx_simulation *sim, FILE *out) {
  timeline tl = {.sim = sim, .out = out, .span = drawn_span(sim)};
  tl.px_per_s = (SVG_WIDTH - LABEL_WIDTH - RIGHT_MARGIN) / tl.span;
  choose_lanes(&tl);
  int height = rows_bottom(&tl) + AXIS_HEIGHT + LEGEND_HEIGHT;
  put_svg_open(out, SVG_WIDTH, height);
  put_svg_style(out);
  put_schedule_title(&tl);
  for (int s = 0; s < sim->pipe->pp; s++)
    put_stage_row(&tl, s);
  put_time_axis(&tl);
  for (int s = 0; s < sim->pipe->pp; s++)
    put_stage_boxes(&tl, s);
  for (int s = 0; s < sim->pipe->pp; s++)
    put_stage_windows(&tl, s);
  put_legend(&tl); /* last: it lists the classes the rows used */
  fputs("</svg>\n", out);
}

/* ---- memory.svg ---------------------------------------------------------- */

enum { PART_WEIGHTS, PART_GRADS, PART_OPTIMIZER, PART_ACTIVATIONS, PART_TRANSIENT, PART_COUNT };

static const char *const part_names[PART_COUNT] = {"weights", "gradients", "optimizer", "activations",
                                                   "transient"};
static const char *const part_colours[PART_COUNT] = {"#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#edc948"};

static void stage_parts(const lx_stage_memory *m, int64_t *parts) {
  parts[PART_WEIGHTS] = m->weights;
  parts[PART_GRADS] = m->grads;
  parts[PART_OPTIMIZER] = m->optimizer;
  parts[PART_ACTIVATIONS] = m->activations_peak;
  parts[PART_TRANSIENT] = m->transient_peak;
}

static int64_t parts_total(const lx_stage_memory *m) {
  int64_t parts[PART_COUNT], total = 0;
  stage_parts(m, parts);
  for (int i = 0; i < PART_COUNT; i++)
    total += parts[i];
  return total;
}

static const double GIB = 1024.0 * 1024.0 * 1024.0;

/* GiB with the decimals its size deserves; MiB below a hundredth of a GiB,
 * where GiB would print as zero (the tiny test models). */
static void format_bytes(int64_t bytes, char *buf, size_t size) {
  double gib = (double)bytes / GIB;
  if (gib >= 10)
    snprintf(buf, size, "%.1f GiB", gib);
  else if (gib >= 0.01 || bytes == 0)
    snprintf(buf, size, "%.2f GiB", gib);
  else
    snprintf(buf, size, "%.2f MiB", (double)bytes / (1024.0 * 1024.0));
}

enum {
  MEM_LEFT = 72, /* the GiB axis */
  MEM_TOP = 70,
  MEM_PLOT = 320, /* height of the plot area */
  MEM_LEGEND = 200,
};

typedef struct {
  const lx_simulation *sim;
  const lx_stage_memory *memory;
  double capacity, top_bytes; /* top_bytes: what the plot's height stands for */
  int slot;                   /* horizontal room per stage */
  FILE *out;
} bar_chart;

static double bytes_y(const bar_chart *c, double bytes) {
  return MEM_TOP + MEM_PLOT * (1 - bytes / c->top_bytes);
}

static void put_memory_title(const bar_chart *c) {
  const lx_pipeline *p = c->sim->pipe;
  char name[128], capacity[32];
  model_name(p->ir, name, sizeof name);
  fputs("<text class=\"title\" x=\"12\" y=\"24\">", c->out);
  lx_put_xml_text(c->out, name);
  fprintf(c->out, ": memory per stage at its peak</text>\n");
  fprintf(c->out,
          "<text class=\"sub\" x=\"12\" y=\"44\">%s schedule, %d micro-batches, recompute %s, tp %d, "
          "micro-batch %d",
          schedule_label(p->kind), p->micro_batches, lx_recompute_policy_name(p->policy),
          plan_or_one(p->ir->plan.tp), plan_or_one(p->ir->plan.micro_batch));
  if (c->capacity > 0) {
    format_bytes((int64_t)c->capacity, capacity, sizeof capacity);
    fprintf(c->out, " \xc2\xb7 %s: %s", lx_gpu_name(p->ir->cluster.gpu), capacity);
  }
  fputs("</text>\n", c->out);
}

static void put_memory_axis(const bar_chart *c, int plot_right) {
  double top_gib = c->top_bytes / GIB, step = nice_step(top_gib, 6);
  int decimals = step_decimals(step);
  fputs("<g id=\"memory-axis\">\n", c->out);
  for (int i = 0; i * step <= top_gib * 1.0001; i++) {
    double y = bytes_y(c, i * step * GIB);
    fprintf(c->out, "<line class=\"grid\" x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\"/>\n", MEM_LEFT, y,
            plot_right, y);
    fprintf(c->out, "<text class=\"tick\" x=\"%d\" y=\"%.2f\" text-anchor=\"end\">%.*f</text>\n",
            MEM_LEFT - 6, y + 4, decimals, i * step);
  }
  fprintf(c->out, "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n", MEM_LEFT, MEM_TOP,
          MEM_LEFT, MEM_TOP + MEM_PLOT);
  fprintf(
      c->out,
      "<text class=\"tick\" transform=\"translate(16 %d) rotate(-90)\" text-anchor=\"middle\">GiB</text>\n",
      MEM_TOP + MEM_PLOT / 2);
  fputs("</g>\n", c->out);
}

static void put_bar_segment(const bar_chart *c, int s, int part, double x, double width, int64_t below,
                            int64_t bytes) {
  if (bytes <= 0) return;
  double y_top = bytes_y(c, (double)(below + bytes)), height = bytes_y(c, (double)below) - y_top;
  char amount[32];
  format_bytes(bytes, amount, sizeof amount);
  fprintf(c->out, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\">", x, y_top, width,
          height, part_colours[part]);
  fprintf(c->out, "<title>stage %d %s: %s", s, part_names[part], amount);
  if (part == PART_ACTIVATIONS)
    fprintf(c->out, " (%d micro-batches stashed)", c->memory[s].stashed_micro_batches);
  fputs("</title></rect>\n", c->out);
  if (height >= 13 && width >= 40) /* the number only where it fits */
    fprintf(c->out, "<text class=\"seg\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n",
            x + width / 2, y_top + height / 2 + 4, amount);
}

static void put_stage_bar(const bar_chart *c, int s) {
  const lx_stage_memory *m = &c->memory[s];
  const lx_stage *st = &c->sim->pipe->stages[s];
  int64_t parts[PART_COUNT], below = 0;
  stage_parts(m, parts);
  double width = c->slot * 0.6, x = MEM_LEFT + s * c->slot + (c->slot - width) / 2;
  bool over = c->capacity > 0 && (double)m->peak > c->capacity;
  char peak[32], layers[64];
  fprintf(c->out, "<g class=\"bar\" id=\"bar-%d\">\n", s);
  for (int i = 0; i < PART_COUNT; i++) {
    put_bar_segment(c, s, i, x, width, below, parts[i]);
    below += parts[i];
  }
  format_bytes(m->peak, peak, sizeof peak);
  fprintf(c->out, "<text class=\"peak\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\"%s>%s</text>\n",
          x + width / 2, bytes_y(c, (double)below) - 5, over ? " style=\"fill:#c00\"" : "", peak);
  if (over) /* under the axis, where it cannot collide with a neighbour's label */
    fprintf(c->out, "<text class=\"cap\" x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">does not fit</text>\n",
            x + width / 2, MEM_TOP + MEM_PLOT + 42);
  layer_range(st, layers, sizeof layers);
  bool roomy = c->slot >= 60; /* narrow slots (many stages) get the number only */
  fprintf(c->out, "<text class=\"stage\" x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%s%d</text>\n",
          x + width / 2, MEM_TOP + MEM_PLOT + 16, roomy ? "stage " : "", s);
  if (roomy)
    fprintf(c->out, "<text class=\"layers\" x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
            x + width / 2, MEM_TOP + MEM_PLOT + 29, layers);
  fputs("</g>\n", c->out);
}

/* The capacity as a dashed line; where it is far above every bar (a small
 * model on a big GPU), the plot is scaled to the bars and the capacity is
 * written at its top instead, so the bars' composition stays readable. */
static void put_capacity_line(const bar_chart *c, int plot_right) {
  if (c->capacity <= 0) return;
  char amount[32];
  format_bytes((int64_t)c->capacity, amount, sizeof amount);
  if (c->capacity > c->top_bytes) {
    fprintf(c->out,
            "<g id=\"capacity\"><text class=\"cap\" x=\"%d\" y=\"%d\" text-anchor=\"end\">\xe2\x86\x91 "
            "capacity %s, "
            "far above this scale</text></g>\n",
            plot_right, MEM_TOP - 6, amount);
    return;
  }
  double y = bytes_y(c, c->capacity);
  fprintf(c->out,
          "<g id=\"capacity\"><line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#c00\" "
          "stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>",
          MEM_LEFT, y, plot_right, y);
  fputs("</g>\n", c->out); /* its label is in the legend, clear of the bars' */
}

static void put_memory_legend(const bar_chart *c, int x) {
  fputs("<g id=\"legend\">\n", c->out);
  for (int i = PART_COUNT - 1; i >= 0; i--) { /* top to bottom, as stacked */
    int y = MEM_TOP + 10 + (PART_COUNT - 1 - i) * 22;
    fprintf(c->out, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\"/>\n", x, y,
            part_colours[i]);
    fprintf(c->out, "<text class=\"sub\" x=\"%d\" y=\"%d\">%s</text>\n", x + 20, y + 11, part_names[i]);
  }
  if (c->capacity > 0) {
    int y = MEM_TOP + 10 + PART_COUNT * 22 + 7;
    fprintf(c->out,
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#c00\" stroke-width=\"1.5\" "
            "stroke-dasharray=\"6 4\"/>\n",
            x, y, x + 14, y);
    char amount[32];
    format_bytes((int64_t)c->capacity, amount, sizeof amount);
    fprintf(c->out, "<text class=\"sub\" x=\"%d\" y=\"%d\">GPU capacity, %s</text>\n", x + 20, y + 4, amount);
  }
  fputs("</g>\n", c->out);
}

static void put_memory_style(FILE *out) {
  fputs(
      "<defs><style type=\"text/css\"><![CDATA[\n"
      "text{font-family:Helvetica,Arial,sans-serif;fill:#222}\n"
      ".title{font-size:16px;font-weight:bold}.sub{font-size:12px;fill:#444}\n"
      ".stage{font-size:12px;font-weight:bold}.layers{font-size:10px;fill:#555}\n"
      ".tick{font-size:10px;fill:#444}.seg{font-size:10px;fill:#fff}.peak{font-size:11px;font-weight:bold}\n"
      ".cap{font-size:11px;fill:#c00}\n"
      ".grid{stroke:#e3e3e3;stroke-width:1}.axis{stroke:#444;stroke-width:1}\n"
      "]]></style></defs>\n",
      out);
}

void lx_write_memory_svg(const lx_simulation *sim, const lx_stage_memory *memory, double capacity_bytes,
                         FILE *out) {
  const lx_pipeline *p = sim->pipe;
  bar_chart c = {
      .sim = sim, .memory = memory, .capacity = capacity_bytes > 0 ? capacity_bytes : 0, .out = out};
  double highest = 0;
  for (int s = 0; s < p->pp; s++) {
    double total = (double)parts_total(&memory[s]);
    if (total > highest) highest = total;
    if ((double)memory[s].peak > highest) highest = (double)memory[s].peak;
  }
  if (c.capacity > highest && c.capacity < 20 * highest) highest = c.capacity; /* the line fits the plot */
  c.top_bytes = highest > 0 ? highest * 1.08 : GIB;
  c.slot = p->pp <= 8 ? 110 : p->pp <= 32 ? 880 / p->pp + 1 : 28;
  int plot_right = MEM_LEFT + p->pp * c.slot, width = plot_right + MEM_LEGEND;
  if (width < 700) width = 700; /* room for the title */
  put_svg_open(out, width, MEM_TOP + MEM_PLOT + 54);
  put_memory_style(out);
  put_memory_title(&c);
  put_memory_axis(&c, plot_right);
  for (int s = 0; s < p->pp; s++)
    put_stage_bar(&c, s);
  put_capacity_line(&c, plot_right);
  put_memory_legend(&c, plot_right + 24);
  fputs("</svg>\n", out);
}
