/* memory_svg.c — memory.svg: per stage, a stacked bar of what its memory
 * holds at the peak, against the GPU's capacity (trace.h). */
#include "escape.h"
#include "report/trace.h"
#include "report/trace_draw.h"

#include <string.h>

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
  lx_model_name(p->ir, name, sizeof name);
  fputs("<text class=\"title\" x=\"12\" y=\"24\">", c->out);
  lx_put_xml_text(c->out, name);
  fprintf(c->out, ": memory per stage at its peak</text>\n");
  fprintf(c->out,
          "<text class=\"sub\" x=\"12\" y=\"44\">%s schedule, %d micro-batches, recompute %s, tp %d, "
          "micro-batch %d",
          lx_schedule_label(p->kind), p->micro_batches, lx_recompute_policy_name(p->policy),
          lx_plan_or_one(p->ir->plan.tp), lx_plan_or_one(p->ir->plan.micro_batch));
  if (c->capacity > 0) {
    format_bytes((int64_t)c->capacity, capacity, sizeof capacity);
    fprintf(c->out, " \xc2\xb7 %s: %s", lx_gpu_name(p->ir->cluster.gpu), capacity);
  }
  fputs("</text>\n", c->out);
}

static void put_memory_axis(const bar_chart *c, int plot_right) {
  double top_gib = c->top_bytes / GIB, step = lx_nice_step(top_gib, 6);
  int decimals = lx_step_decimals(step);
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
  char peak[32], layers[LX_RANGES_TEXT + 16];
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
  lx_layer_range(st, layers, sizeof layers);
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
  lx_put_svg_open(out, width, MEM_TOP + MEM_PLOT + 54);
  put_memory_style(out);
  put_memory_title(&c);
  put_memory_axis(&c, plot_right);
  for (int s = 0; s < p->pp; s++)
    put_stage_bar(&c, s);
  put_capacity_line(&c, plot_right);
  put_memory_legend(&c, plot_right + 24);
  fputs("</svg>\n", out);
}
