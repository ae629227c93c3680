/* emit_walk.c — the stream-merging walk both printers share (emit_walk.h). */
#include <stdlib.h>
#include <string.h>

#include "emit/emit_walk.h"

#include "alloc.h"

typedef struct {
  const lx_stage *st;
  const lx_walk_hooks *h;
  int next[LX_STREAM_COUNT]; /* the first instruction of each stream not yet issued */
  int *recorded_on;          /* per event: the stream that recorded it, -1 until then */
} walk;

/* ---- 2BW's guards ---------------------------------------------------------------- */

static lx_guard guard_of(const lx_instr *in) {
  return in->fill ? LX_GUARD_FILL : in->ahead ? LX_GUARD_AHEAD : LX_GUARD_NONE;
}

/* The open guard's text, one level deeper, inside its `if`; nothing when
 * its instructions printed nothing (events on the CPU). */
static void close_guard(lx_walk_guard *g) {
  fclose(*g->out);
  *g->out = g->outer;
  if (g->size > 0) {
    fprintf(g->outer, "  if (%s) {%s\n", g->open == LX_GUARD_FILL ? "fill" : "ahead",
            g->open == LX_GUARD_FILL ? " /* the pipeline starts empty: this step's first forwards */"
                                     : " /* training goes on: the next step's first forwards */");
    for (char *line = g->text; *line;) {
      char *end = strchr(line, '\n');
      size_t n = end ? (size_t)(end - line) : strlen(line);
      fprintf(g->outer, "  %.*s\n", (int)n, line);
      line += n + (end != NULL);
    }
    fputs("  }\n", g->outer);
  }
  free(g->text);
  g->text = NULL;
  g->open = LX_GUARD_NONE;
}

static void set_guard(const lx_walk_hooks *h, lx_guard to) {
  lx_walk_guard *g = h->guard;
  if (!g || g->open == to) return;
  if (h->guard_changes) h->guard_changes(h->ctx);
  if (g->open != LX_GUARD_NONE) close_guard(g);
  if (to == LX_GUARD_NONE) return;
  g->outer = *g->out;
  *g->out = lx_memory_stream(&g->text, &g->size);
  g->open = to;
}

static const lx_instr *head_of(const walk *w, int k) {
  const lx_instr_list *list = &w->st->streams[k];
  return w->next[k] < list->count ? &list->items[w->next[k]] : NULL;
}

bool lx_walk_same_run(const lx_instr *a, const lx_instr *b) {
  if (a != b && (a->pieces || b->pieces)) return false; /* a head-split op's pieces: a run of their own */
  return a->kind == b->kind && a->graph == b->graph && a->layer == b->layer && a->mb == b->mb;
}

static bool is_compute(lx_instr_kind k) {
  return k == LX_I_FWD || k == LX_I_BWD || k == LX_I_BWD_WEIGHT || k == LX_I_RECOMPUTE;
}

/* Hands the run starting at stream k's index `at` to the printer; returns
 * the index after it. */
static int issue_run(walk *w, lx_stream k, int at) {
  const lx_instr_list *list = &w->st->streams[k];
  int end = at;
  while (end < list->count && lx_walk_same_run(&list->items[end], &list->items[at])) end++;
  set_guard(w->h, guard_of(&list->items[at]));
  w->h->run(w->h->ctx, k, &list->items[at], end - at);
  return end;
}

static void issue_record(walk *w, lx_stream k, const lx_instr *in) {
  w->recorded_on[in->event] = k;
  set_guard(w->h, guard_of(in));
  w->h->record(w->h->ctx, k, in);
}

/* Issues what the other streams can issue now: communication is posted, and
 * recomputation placed in a window runs as soon as the window opens. */
static void advance_streams(walk *w) {
  for (int k = 0; k < LX_STREAM_COUNT; k++) {
    if (k == LX_STREAM_COMPUTE) continue;
    const lx_instr *in;
    while ((in = head_of(w, k))) {
      if (in->kind == LX_I_WAIT) {
        if (w->recorded_on[in->event] < 0) break;
        set_guard(w->h, guard_of(in));
        w->h->wait(w->h->ctx, (lx_stream)k, in, (lx_stream)w->recorded_on[in->event]);
      } else if (in->kind == LX_I_RECORD) {
        issue_record(w, (lx_stream)k, in);
      } else if (is_compute(in->kind)) {
        w->next[k] = issue_run(w, (lx_stream)k, w->next[k]);
        continue;
      } else {
        set_guard(w->h, guard_of(in));
        w->h->comm(w->h->ctx, (lx_stream)k, in);
      }
      w->next[k]++;
    }
  }
}

void lx_walk_stage(const lx_stage *st, const lx_walk_hooks *hooks) {
  walk w = {.st = st, .h = hooks, .recorded_on = lx_malloc(((size_t)st->n_events + 1) * sizeof(int))};
  for (int e = 0; e <= st->n_events; e++) w.recorded_on[e] = -1;
  const lx_instr_list *compute = &st->streams[LX_STREAM_COMPUTE];
  int i = 0;
  while (i < compute->count) {
    advance_streams(&w);
    const lx_instr *in = &compute->items[i];
    if (is_compute(in->kind)) {
      i = issue_run(&w, LX_STREAM_COMPUTE, i);
      continue;
    }
    if (in->kind == LX_I_LOAD) {
      set_guard(hooks, guard_of(in));
      hooks->load(hooks->ctx, in);
      while (i < compute->count && compute->items[i].kind == LX_I_LOAD && compute->items[i].mb == in->mb) i++;
      continue;
    }
    if (in->kind == LX_I_WAIT) {
      set_guard(hooks, guard_of(in));
      hooks->wait(hooks->ctx, LX_STREAM_COMPUTE, in, (lx_stream)w.recorded_on[in->event]);
    } else if (in->kind == LX_I_RECORD)
      issue_record(&w, LX_STREAM_COMPUTE, in);
    i++;
  }
  advance_streams(&w);
  set_guard(hooks, LX_GUARD_NONE);
  free(w.recorded_on);
}
