/* windows.c — where a stage's compute stream idles, and which layer
 * instances may recompute there (see lynx.h).
 *
 * A window is found, not predicted: the simulation of the schedule with
 * on-demand recompute says how long each compute-stream WAIT idles. Its
 * position is the FWD/BWD it follows, counted over FWD and BWD only, so
 * that it names the same point of a schedule rebuilt with recompute moved
 * around (placing recompute never adds or removes FWD or BWD; zero bubble's
 * W passes, which come and go with which linear inputs the plan keeps, are
 * not counted either). */
#include <stdlib.h>

#include "alloc.h"
#include "planning/overlap.h"

/* Shorter idles are scheduling noise, not room for a kernel. */
static const double MIN_WINDOW_S = 1e-6;

static bool is_pass(lx_instr_kind k) { return k == LX_I_FWD || k == LX_I_BWD; }

/* Which stream records each event of the stage, and at which position. */
static void index_records(const lx_stage *st, int *stream, int *pos) {
  for (int e = 0; e < st->n_events; e++)
    stream[e] = pos[e] = -1;
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    for (int i = 0; i < st->streams[k].count; i++) {
      const lx_instr *in = &st->streams[k].items[i];
      if (in->kind == LX_I_RECORD && in->event >= 0 && in->event < st->n_events)
        stream[in->event] = k, pos[in->event] = i;
    }
}

/* The latest instruction of `kind`-like interest before position `pos` on a stream. */
static const lx_instr *last_before(const lx_instr_list *list, int pos, lx_instr_kind a, lx_instr_kind b) {
  for (int i = pos - 1; i >= 0; i--)
    if (list->items[i].kind == a || list->items[i].kind == b) return &list->items[i];
  return NULL;
}

/* What the compute stream waits for: the stream that records the event says. */
static lx_window_kind classify(const lx_stage *st, int stream, int pos, bool backward_seen,
                               bool forwards_left) {
  if (stream == LX_STREAM_TP) {
    const lx_instr *ar = last_before(&st->streams[stream], pos, LX_I_ALLREDUCE_TP, LX_I_ALLREDUCE_TP);
    return ar && ar->backward ? LX_WINDOW_TP_BACKWARD : LX_WINDOW_TP_FORWARD;
  }
  if (stream == LX_STREAM_RECV) {
    const lx_instr *rv = last_before(&st->streams[stream], pos, LX_I_RECV_ACT, LX_I_RECV_GRAD);
    if (rv && rv->kind == LX_I_RECV_ACT) return backward_seen ? LX_WINDOW_ACTIVATION : LX_WINDOW_WARMUP;
    if (rv) return forwards_left ? LX_WINDOW_GRADIENT : LX_WINDOW_COOLDOWN;
  }
  return LX_WINDOW_OTHER;
}

static int forwards_in(const lx_instr_list *list) {
  int n = 0;
  for (int i = 0; i < list->count; i++)
    n += list->items[i].kind == LX_I_FWD;
  return n;
}

/* A wait on the recompute or copy streams is one the plan made itself (a
 * recompute or prefetch running late), not idle time it may fill. */
static bool waits_on_own_work(int stream) {
  return stream == LX_STREAM_RECOMPUTE || stream == LX_STREAM_OFFLOAD || stream == LX_STREAM_PREFETCH;
}

/* The windows of stage s in the simulated times, into out (room for one
 * per compute instruction); returns how many. */
static int measure(const lx_stage *st, const lx_interval *times, double interference, lx_window *out) {
  const lx_instr_list *compute = &st->streams[LX_STREAM_COMPUTE];
  int *rec_stream = lx_malloc(sizeof(int) * (size_t)(st->n_events + 1)),
      *rec_pos = lx_malloc(sizeof(int) * (size_t)(st->n_events + 1));
  index_records(st, rec_stream, rec_pos);
  int n = 0, ordinal = -1, forwards_left = forwards_in(compute);
  bool backward_seen = false;
  for (int i = 0; i < compute->count; i++) {
    const lx_instr *in = &compute->items[i];
    if (is_pass(in->kind)) {
      ordinal++;
      backward_seen |= in->kind == LX_I_BWD;
      forwards_left -= in->kind == LX_I_FWD;
    }
    double idle = times[i].end - times[i].start;
    if (in->kind != LX_I_WAIT || idle < MIN_WINDOW_S || ordinal < 0) continue;
    int e = in->event;
    bool recorded = e >= 0 && e < st->n_events && rec_stream[e] >= 0;
    if (recorded && waits_on_own_work(rec_stream[e])) continue;
    lx_window_kind kind = recorded ? classify(st, rec_stream[e], rec_pos[e], backward_seen, forwards_left > 0)
                                   : LX_WINDOW_OTHER;
    lx_window *last = n ? &out[n - 1] : NULL;
    if (last && last->after == ordinal) { /* one window per position: the idles add up */
      last->length += idle;
      last->capacity = last->length / interference;
      continue;
    }
    out[n++] = (lx_window){.kind = kind,
                           .after = ordinal,
                           .start = times[i].start,
                           .length = idle,
                           .capacity = idle / interference};
  }
  free(rec_stream);
  free(rec_pos);
  return n;
}

void lx_find_windows(lx_pipeline *p, int s, const lx_interval *times, double interference) {
  lx_stage *st = &p->stages[s];
  free(st->windows);
  st->windows = lx_malloc(sizeof *st->windows * (size_t)(st->streams[LX_STREAM_COMPUTE].count + 1));
  st->n_windows = measure(st, times, interference, st->windows);
}

int lx_shrink_windows(lx_pipeline *p, int s, const lx_interval *times, double interference, bool *shrunk) {
  lx_stage *st = &p->stages[s];
  lx_window *now = lx_malloc(sizeof *now * (size_t)(st->streams[LX_STREAM_COMPUTE].count + 1));
  int n_now = measure(st, times, interference, now), count = 0;
  for (int k = 0, j = 0; k < st->n_windows; k++) {
    lx_window *w = &st->windows[k];
    for (; j < n_now && now[j].after < w->after; j++)
      ;
    double length = j < n_now && now[j].after == w->after ? now[j].length : 0;
    shrunk[k] = length < w->length - MIN_WINDOW_S;
    if (!shrunk[k]) continue;
    w->length = length;
    w->capacity = length / interference;
    count++;
  }
  free(now);
  return count;
}

void lx_instance_bounds(const lx_pipeline *p, int s, int *lo, int *due) {
  const lx_stage *st = &p->stages[s];
  const lx_instr_list *compute = &st->streams[LX_STREAM_COMPUTE];
  int n = st->n_layers * p->micro_batches;
  for (int i = 0; i < n; i++)
    lo[i] = due[i] = -1;
  int last_touch[2] = {-1, -1}, ordinal = -1;
  for (int i = 0; i < compute->count; i++) {
    const lx_instr *in = &compute->items[i];
    if (!is_pass(in->kind)) continue;
    ordinal++;
    if (in->graph != LX_GRAPH_BLOCK) continue;
    int parity = in->layer % 2, inst = lx_layer_slot(st, in->layer) * p->micro_batches + in->mb;
    if (in->kind == LX_I_BWD && due[inst] < 0) {
      due[inst] = ordinal;
      lo[inst] = last_touch[parity];
    }
    last_touch[parity] = ordinal;
  }
}
