/* schedule_svg.c — schedule.svg: the simulated iteration at a glance (trace.h).
 * Stages are rows, the compute stream the main lane, thin sub-lanes for
 * recompute and communication, bubbles hatched; neighbouring instructions of
 * one kind and micro-batch merge into one box. */
#include "escape.h"
#include "report/trace.h"
#include "report/trace_draw.h"

#include <stdlib.h>
#include <string.h>

/* CSS class in schedule.svg, and the legend's words for it. */
static const char *paint_class(lx_paint p) {
  static const char *names[] = {"fwd", "fwd ahead", "bwd", "wgt",  "rec", "p2p",
                                "tp",  "dp",        "opt", "host", "evt"};
  _Static_assert(sizeof names / sizeof names[0] == PAINT_COUNT, "one class per paint");
  return names[p];
}

static const char *paint_legend(lx_paint p) {
  static const char *names[] = {"forward",        "next step's forward (2BW)",
                                "backward",       "weight gradients (W)",
                                "recompute",      "send / recv",
                                "tp all-reduce",  "dp all-reduce",
                                "optimizer step", "offload / prefetch",
                                "event"};
  _Static_assert(sizeof names / sizeof names[0] == PAINT_COUNT, "one legend entry per paint");
  return names[p];
}

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
      if (lx_paint_of(&p->stages[s].streams[k].items[i]) != PAINT_NONE) return true;
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
        ".fwd{fill:#4e79a7}.ahead{fill:#a0cbe8}.bwd{fill:#59a14f}.wgt{fill:#8cd17d}.rec{fill:#f28e2b}.p2p{"
        "fill:#76b7b2}\n"
        ".tp{fill:#edc948}.dp{fill:#b07aa1}.opt{fill:#9c755f}.host{fill:#bab0ac}.edge{stroke:#fff;stroke-"
        "width:0.6}\n"
        ".grid{stroke:#e3e3e3;stroke-width:1}.axis{stroke:#444;stroke-width:1}\n"
        ".c1{fill-opacity:0.7}.c2{fill-opacity:0.5}.c3{fill-opacity:0.35}.c4,.c5,.c6,.c7{fill-opacity:0.25}\n"
        ".win{fill:#f28e2b;fill-opacity:0.2;stroke:#c0392b;stroke-width:1.2;stroke-dasharray:3 2}\n"
        "]]></style>\n</defs>\n",
        out);
}

static void put_schedule_title(const timeline *tl) {
  const lx_simulation *sim = tl->sim;
  const lx_pipeline *p = sim->pipe;
  FILE *out = tl->out;
  char name[128];
  lx_model_name(p->ir, name, sizeof name);
  fputs("<text class=\"title\" x=\"12\" y=\"24\">", out);
  lx_put_xml_text(out, name);
  fprintf(out, ": %s schedule, %d stage%s \xc3\x97 %d micro-batch%s, recompute %s, tp %d, dp %d</text>\n",
          lx_schedule_label(p->kind), p->pp, p->pp == 1 ? "" : "s", p->micro_batches,
          p->micro_batches == 1 ? "" : "es", lx_recompute_policy_name(p->policy),
          lx_plan_or_one(p->ir->plan.tp), lx_plan_or_one(p->ir->plan.dp));
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
      "\xc2\xb7 hatched: compute stream idle%s</text>\n",
      sim->iteration_time >= 0.1 ? 1 : 3, sim->iteration_time * 1e3, sim->bubble_fraction * 100,
      sim->mfu * 100,
      p->steps > 1
          ? " \xc2\xb7 steps overlap: drawn back to back, the iteration is one with the pipeline full"
          : "");
}

static void put_stage_labels(const timeline *tl, int s) {
  const lx_stage *st = &tl->sim->pipe->stages[s];
  FILE *out = tl->out;
  int y = row_y(tl, s);
  char layers[LX_RANGES_TEXT + 16];
  lx_layer_range(st, layers, sizeof layers);
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
  lx_paint paint;
  int mb;
  int chunk; /* interleaved 1F1B: the stage's chunk (virtual stage) it works on */
  double start, end;
  int count;
  int first; /* index of its first instruction */
} box;

static void put_box_tooltip(const timeline *tl, int s, int k, const box *b) {
  const lx_instr *first = &tl->sim->pipe->stages[s].streams[k].items[b->first];
  char what[160];
  lx_describe_shown(tl->sim->pipe, first, what, sizeof what);
  fputs("<title>", tl->out);
  if (b->count == 1)
    lx_put_xml_text(tl->out, what);
  else if (b->mb >= 0)
    fprintf(tl->out, "%s mb%d: %d instructions", lx_instr_kind_name(b->kind),
            lx_shown_mb(tl->sim->pipe, b->mb), b->count);
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
    snprintf(label, sizeof label, "%d", lx_shown_mb(tl->sim->pipe, b->mb));
  else
    return;
  double text_width = 6.0 * (double)strlen(label) + 4;
  if (width < text_width) return;
  fprintf(tl->out, "<text class=\"mb\" x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x + width / 2,
          y + MAIN_LANE / 2 + 4, label);
  *done = (lane_labels){.kind = b->kind, .mb = b->mb, .any = true};
}

static void put_box(timeline *tl, int s, int k, const box *b, lane_labels *labels) {
  lx_paint pt = b->paint;
  double x = time_x(tl, b->start), width = (b->end - b->start) * tl->px_per_s;
  int y = row_y(tl, s) + lane_y(tl, k);
  int height = k == LX_STREAM_COMPUTE ? MAIN_LANE : SUB_LANE;
  if (width < 0.5) width = 0.5; /* an instant still shows as a hairline */
  tl->painted[pt] = true;
  /* a white edge tells apart neighbouring boxes of one colour (F3 then F4) */
  bool edged = k == LX_STREAM_COMPUTE && width >= 3;
  char chunk[16] = "";
  if (b->chunk > 0) snprintf(chunk, sizeof chunk, " c%d", b->chunk); /* a lighter shade per later chunk */
  fprintf(tl->out, "<rect class=\"%s%s%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\">",
          paint_class(pt), edged ? " edge" : "", chunk, x, y, width, height);
  put_box_tooltip(tl, s, k, b);
  fputs("</rect>\n", tl->out);
  if (k == LX_STREAM_COMPUTE) put_box_label(tl, b, x, width, y, labels);
}

static int chunk_of(const timeline *tl, int s, const lx_instr *in) {
  return lx_instr_chunk(&tl->sim->pipe->stages[s], in);
}

/* Merging stops at a gap a reader could see (half a pixel): an idle wait
 * inside one micro-batch's forward stays visible, and so does a change of chunk. */
static bool extends(const timeline *tl, int s, const box *b, const lx_instr *in, const lx_interval *t) {
  return b->count > 0 && b->kind == in->kind && b->mb == in->mb && b->chunk == chunk_of(tl, s, in) &&
         (t->start - b->end) * tl->px_per_s < 0.5;
}

static void put_lane_boxes(timeline *tl, int s, int k) {
  const lx_instr_list *list = &tl->sim->pipe->stages[s].streams[k];
  box b = {.count = 0};
  lane_labels labels = {.any = false};
  for (int i = 0; i < list->count; i++) {
    const lx_instr *in = &list->items[i];
    const lx_interval *t = lx_interval_of(tl->sim, s, k, i);
    if (lx_paint_of(in) == PAINT_NONE || !t) continue;
    if (extends(tl, s, &b, in, t)) {
      if (t->end > b.end) b.end = t->end;
      b.count++;
      continue;
    }
    if (b.count) put_box(tl, s, k, &b, &labels);
    b = (box){.kind = in->kind,
              .paint = lx_paint_of(in),
              .mb = in->mb,
              .chunk = chunk_of(tl, s, in),
              .start = t->start,
              .end = t->end,
              .count = 1,
              .first = i};
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
  lx_window_span *spans = lx_window_spans(tl->sim, s);
  if (!spans) return;
  fprintf(tl->out, "<g class=\"windows\" id=\"windows-%d\">\n", s);
  window_box b = {.count = 0};
  for (int w = 0; w < tl->sim->pipe->stages[s].n_windows; w++) {
    const lx_window_span *sp = &spans[w];
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
  double span_ms = tl->span * 1e3, step = lx_nice_step(span_ms, 10);
  int decimals = lx_step_decimals(step), bottom = rows_bottom(tl);
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
            paint_class((lx_paint)pt), x, y);
    fprintf(out, "<text class=\"sub\" x=\"%d\" y=\"%d\">%s</text>\n", x + 19, y + 11,
            paint_legend((lx_paint)pt));
    x += 28 + 7 * (int)strlen(paint_legend((lx_paint)pt));
  }
  for (int v = 1; v < tl->sim->pipe->virtual_stages; v++) { /* interleaved: the shades of the later chunks */
    fprintf(out, "<rect class=\"fwd c%d\" x=\"%d\" y=\"%d\" width=\"14\" height=\"14\"/>\n", v, x, y);
    fprintf(out, "<text class=\"sub\" x=\"%d\" y=\"%d\">chunk %d</text>\n", x + 19, y + 11, v);
    x += 28 + 7 * (int)strlen("chunk 1");
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

void lx_write_schedule_svg(const lx_simulation *sim, FILE *out) {
  timeline tl = {.sim = sim, .out = out, .span = lx_drawn_span(sim)};
  tl.px_per_s = (SVG_WIDTH - LABEL_WIDTH - RIGHT_MARGIN) / tl.span;
  choose_lanes(&tl);
  int height = rows_bottom(&tl) + AXIS_HEIGHT + LEGEND_HEIGHT;
  lx_put_svg_open(out, SVG_WIDTH, height);
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
