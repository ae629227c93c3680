/* trace.c — what the trace and the drawings share (trace_draw.h).
 *
 * The trace keeps every instruction; the SVGs are for a glance and merge
 * what a reader could not tell apart at their scale anyway. Every number is
 * printed with a fixed format, so the same simulation gives the same bytes
 * (the files are diffed across generator versions). */
#include "report/trace_draw.h"

#include "alloc.h"

#include <stdlib.h>
#include <string.h>

lx_paint lx_paint_of(const lx_instr *in) {
  switch (in->kind) {
  case LX_I_FWD: return in->ahead ? PAINT_AHEAD : PAINT_FORWARD;
  case LX_I_BWD: return PAINT_BACKWARD;
  case LX_I_BWD_WEIGHT: return PAINT_WEIGHTS;
  case LX_I_RECOMPUTE: return PAINT_RECOMPUTE;
  case LX_I_SEND_ACT:
  case LX_I_RECV_ACT:
  case LX_I_SEND_GRAD:
  case LX_I_RECV_GRAD: return PAINT_P2P;
  case LX_I_ALLREDUCE_TP: return PAINT_TP;
  case LX_I_ALLREDUCE_DP: return PAINT_DP;
  case LX_I_OPTIMIZER_STEP: return PAINT_OPTIMIZER;
  case LX_I_OFFLOAD:
  case LX_I_PREFETCH: return PAINT_HOST;
  default: return PAINT_NONE;
  }
}

bool lx_is_finite(double x) { return x == x && x - x == 0; }

const lx_interval *lx_interval_of(const lx_simulation *sim, int stage, int stream, int i) {
  const lx_interval *t = sim->stages[stage].times[stream];
  if (!t || !lx_is_finite(t[i].start) || !lx_is_finite(t[i].end)) return NULL;
  return &t[i];
}

double lx_drawn_span(const lx_simulation *sim) {
  double span = lx_is_finite(sim->iteration_time) ? sim->iteration_time : 0;
  const lx_pipeline *p = sim->pipe;
  for (int s = 0; s < p->pp; s++)
    for (int k = 0; k < LX_STREAM_COUNT; k++)
      for (int i = 0; i < p->stages[s].streams[k].count; i++) {
        const lx_interval *t = lx_interval_of(sim, s, k, i);
        if (t && t->end > span) span = t->end;
      }
  return span > 0 ? span : 1e-6;
}

int lx_shown_mb(const lx_pipeline *p, int mb) { return p->steps > 1 && mb >= 0 ? mb % p->micro_batches : mb; }

void lx_describe_shown(const lx_pipeline *p, const lx_instr *in, char *buf, size_t size) {
  lx_instr shown = *in;
  shown.mb = lx_shown_mb(p, in->mb);
  lx_instr_describe(p->ir, &shown, buf, size);
  size_t n = strlen(buf);
  if (p->steps > 1 && in->mb >= 0 && n < size)
    snprintf(buf + n, size - n, " (step %d)", in->mb / p->micro_batches);
}

void lx_model_name(const lx_ir *ir, char *buf, size_t size) {
  const char *path = ir->model_path ? lx_file_name(ir->model_path) : "model";
  const char *base = strrchr(path, '/');
  snprintf(buf, size, "%s", base ? base + 1 : path);
  char *dot = strrchr(buf, '.');
  if (dot && dot != buf && !strcmp(dot, ".model")) *dot = '\0';
}

void lx_layer_range(const lx_stage *st, char *buf, size_t size) {
  char ranges[LX_RANGES_TEXT];
  lx_chunk_ranges(st, ranges, sizeof ranges);
  if (st->n_layers == 0)
    snprintf(buf, size, "no layers");
  else if (st->n_layers == 1)
    snprintf(buf, size, "layer %d", st->chunks[0].first_layer);
  else
    snprintf(buf, size, "layers %s", ranges);
}

static bool is_pass(lx_instr_kind k) { return k == LX_I_FWD || k == LX_I_BWD; }

lx_window_span *lx_window_spans(const lx_simulation *sim, int s) {
  const lx_pipeline *p = sim->pipe;
  const lx_stage *st = &p->stages[s];
  if (!st->window_of || st->n_windows <= 0) return NULL;
  lx_window_span *w = lx_calloc((size_t)st->n_windows, sizeof *w);
  int *instances = lx_instances_per_window(p, st);
  for (int k = 0; k < st->n_windows; k++)
    w[k].instances = instances[k];
  free(instances);
  const lx_instr_list *compute = &st->streams[LX_STREAM_COMPUTE];
  double span = lx_drawn_span(sim);
  int ordinal = -1, next = 0, open = -1;
  for (int i = 0; i < compute->count; i++) {
    const lx_interval *t = lx_interval_of(sim, s, LX_STREAM_COMPUTE, i);
    if (!is_pass(compute->items[i].kind) || !t) continue;
    ordinal++;
    if (open >= 0) w[open].end = t->start, open = -1;
    for (; next < st->n_windows && st->windows[next].after <= ordinal; next++)
      if (st->windows[next].after == ordinal) {
        w[next] = (lx_window_span){t->end, span, w[next].instances, true};
        open = next;
      }
  }
  return w;
}

const char *lx_schedule_label(lx_schedule k) {
  return k == LX_SCHEDULE_GPIPE         ? "GPipe"
         : k == LX_SCHEDULE_1F1B        ? "1F1B"
         : k == LX_SCHEDULE_2BW         ? "PipeDream-2BW"
         : k == LX_SCHEDULE_INTERLEAVED ? "interleaved 1F1B"
                                        : lx_schedule_name(k);
}

int lx_plan_or_one(int v) { return v > 0 ? v : 1; }

double lx_nice_step(double range, int parts) {
  double raw = range / parts, mag = 1;
  if (!(raw > 0)) return 1;
  while (mag * 10 <= raw)
    mag *= 10;
  while (mag > raw)
    mag /= 10;
  return raw <= mag ? mag : raw <= 2 * mag ? 2 * mag : raw <= 5 * mag ? 5 * mag : 10 * mag;
}

int lx_step_decimals(double step) {
  int d = 0;
  for (double unit = 1; step < unit * 0.999 && d < 9; unit /= 10)
    d++;
  return d;
}

void lx_put_svg_open(FILE *out, int width, int height) {
  fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", out);
  fprintf(out,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\">\n",
          width, height, width, height);
  fprintf(out, "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", width, height);
}
