/* verify.c — proves the schedule's stream choreography safe (see verify.h).
 *
 * Happens-before within a stage is computed exactly with vector clocks: the
 * clock of an instruction counts, per stream, how many of that stream's
 * instructions happen before it (itself included on its own stream). An
 * instruction inherits the clock of its predecessor on the stream; a WAIT
 * joins the clock of the RECORD of its event. So A happens before B exactly
 * when clock(B)[stream(A)] > position(A).
 *
 * The memory checks use these stage-local edges only, never a path through
 * another stage (send -> peer -> receive back): a stage's arena is its own,
 * and an eager send may complete before its peer has received anything, so
 * a buffer must be protected by the stage's own events. That is the
 * conservative choice: fewer edges can only report more. Cross-stage order
 * matters for matching (check 3) and deadlock (check 4), which model a send
 * and its receive as a rendezvous, as the simulator does.
 *
 * Values have names. Every access names a tensor (lx_tensor_ref); where the
 * layout gives two names one place on purpose (a graph's output is the next
 * graph's input, the last layer's output is the outgoing activation, a
 * recomputed tensor lands where the dropped one was), the names are merged
 * into one canonical name, but only if lx_locate really puts both at the
 * same span: an alias the layout does not honour stays two names, and the
 * reader of the second then finds no writer. */
#include "verify/verify.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify/access.h"
#include "alloc.h"
#include "verify/verify_report.h"

/* ---- per-stage state --------------------------------------------------------- */

/* A tensor's canonical name, packed into two words so that sorting and
 * searching by name stay cheap on schedules of millions of accesses. */
typedef struct {
  uint64_t hi, lo;
} tensor_key;

typedef struct {
  int stream, pos; /* the instruction */
  int span;        /* index into the stage's distinct spans */
  tensor_key key;
  lx_tensor_ref tensor; /* as the instruction names it, for messages */
  lx_access_mode mode;
  lx_access_target target;
  lx_region region;      /* LX_TARGET_REGION */
  int rows;              /* of a token- or head-split tensor (lx_rows): a value of their own */
  bool generation_start; /* a write that (re)defines the whole value */
  bool value_defined;    /* some instruction writes (not only accumulates) this value */
} access_rec;

typedef struct {
  int64_t offset, bytes;
} extent;

typedef struct {
  reporter *r;
  const lx_pipeline *p;
  const lx_stage *st;
  const lx_stage_layout *l;
  int s;
  int *clock[NS];  /* clock[k][pos * NS + j] */
  int reached[NS]; /* instructions [0, reached) of each stream can run */
  access_rec *acc;
  int n_acc, cap_acc;
  extent *spans;
  int n_spans;
  int *overlap_start, *overlap; /* per span: the spans overlapping it (itself included) */
  int *place_start, *place;     /* per (span, stream): accesses in program order */
  int *write_start, *writes;    /* per (span, stream): writes and accumulations */
  int *by_key, n_by_key;        /* writes and accumulations sorted by key */
} stage_check;

static instr_at at_of(const stage_check *c, int stream, int pos) { return (instr_at){c->s, stream, pos}; }
static instr_at access_at(const stage_check *c, const access_rec *a) { return at_of(c, a->stream, a->pos); }
static const int *clock_of(const stage_check *c, int stream, int pos) { return &c->clock[stream][pos * NS]; }

/* Does instruction (sa, pa) happen before (or be) instruction (sb, pb)? */
static bool happens_before(const stage_check *c, int sa, int pa, int sb, int pb) {
  return clock_of(c, sb, pb)[sa] > pa;
}

static bool access_before(const stage_check *c, const access_rec *a, const access_rec *b) {
  return happens_before(c, a->stream, a->pos, b->stream, b->pos);
}

static bool same_instr(const access_rec *a, const access_rec *b) {
  return a->stream == b->stream && a->pos == b->pos;
}

static bool is_write(lx_access_mode m) { return m != LX_ACCESS_READ; }

static int compare_keys(const tensor_key *a, const tensor_key *b) {
  if (a->hi != b->hi) return a->hi < b->hi ? -1 : 1;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* ---- happens-before: vector clocks ------------------------------------------ */

static bool valid_event(const lx_stage *st, int e) { return e >= 0 && e < st->n_events; }

/* Runs every stream as far as its WAITs allow, giving each instruction its
 * clock. A stream that stops early waits for an event never recorded, or
 * recorded only behind a cycle of waits: reported. */
static void compute_clocks(stage_check *c) {
  const lx_stage *st = c->st;
  const int **event_clock = lx_calloc((size_t)st->n_events + 1, sizeof *event_clock);
  static const int zero[NS];
  for (int k = 0; k < NS; k++)
    c->clock[k] = lx_calloc((size_t)st->streams[k].count * NS + 1, sizeof(int));
  bool progress = true;
  while (progress) {
    progress = false;
    for (int k = 0; k < NS; k++)
      for (int i = c->reached[k]; i < st->streams[k].count; i = ++c->reached[k], progress = true) {
        const lx_instr *in = &st->streams[k].items[i];
        bool waits = in->kind == LX_I_WAIT;
        if (waits && (!valid_event(st, in->event) || !event_clock[in->event])) break;
        int *now = &c->clock[k][i * NS];
        const int *before = i > 0 ? clock_of(c, k, i - 1) : zero;
        for (int j = 0; j < NS; j++)
          now[j] = before[j];
        if (waits)
          for (int j = 0; j < NS; j++)
            if (event_clock[in->event][j] > now[j]) now[j] = event_clock[in->event][j];
        now[k] = i + 1;
        if (in->kind == LX_I_RECORD && valid_event(st, in->event) && !event_clock[in->event])
          event_clock[in->event] = now;
      }
  }
  free(event_clock);
}

static instr_at find_record(const stage_check *c, int event) {
  for (int k = 0; k < NS; k++)
    for (int i = 0; i < c->st->streams[k].count; i++)
      if (c->st->streams[k].items[i].kind == LX_I_RECORD && c->st->streams[k].items[i].event == event)
        return at_of(c, k, i);
  return NO_INSTR;
}

/* Events: each recorded once, each waited for recorded, every stream runs to its end. */
static void check_events(stage_check *c) {
  const lx_stage *st = c->st;
  int *records = lx_calloc((size_t)st->n_events + 1, sizeof *records);
  for (int k = 0; k < NS; k++)
    for (int i = 0; i < st->streams[k].count; i++) {
      const lx_instr *in = &st->streams[k].items[i];
      if (in->kind != LX_I_RECORD && in->kind != LX_I_WAIT) continue;
      if (!valid_event(st, in->event)) {
        lx_verify_report(c->r, "event id out of range", at_of(c, k, i), NO_INSTR);
        continue;
      }
      if (in->kind == LX_I_RECORD && records[in->event]++)
        lx_verify_report(c->r, "event recorded twice", at_of(c, k, i), find_record(c, in->event));
    }
  for (int k = 0; k < NS; k++) {
    if (c->reached[k] == st->streams[k].count) continue;
    const lx_instr *stuck = &st->streams[k].items[c->reached[k]];
    lx_verify_report(c->r, "stream can never get past this wait (its event is never recorded ahead of it)",
                     at_of(c, k, c->reached[k]),
                     valid_event(st, stuck->event) ? find_record(c, stuck->event) : NO_INSTR);
  }
  free(records);
}

/* ---- canonical names ------------------------------------------------------------ */

static bool same_span(const stage_check *c, lx_tensor_ref a, lx_tensor_ref b) {
  lx_span x = lx_locate(c->p, c->s, c->l, a), y = lx_locate(c->p, c->s, c->l, b);
  return x.offset == y.offset && x.bytes == y.bytes;
}

/* The graph's first parameter: where its caller puts the activation. */
static int activation_input(const lx_graph *g) {
  for (int i = 0; i < g->n_ops; i++)
    if (g->ops[i].kind == LX_OP_INPUT && g->ops[i].param == 0) return i;
  return 0;
}

/* The other name the layout gives a graph output's value or gradient, or a
 * stage input's gradient: the neighbouring graph's input, or the stage's
 * pipeline buffer. */
static bool boundary_alias(const stage_check *c, lx_tensor_ref t, lx_tensor_ref *alias) {
  const lx_graph *g = lx_graph_of(c->p->ir, t.graph);
  if (t.op == g->output && !g->ops[t.op].out.scalar) {
    lx_graph_id ng;
    int nl;
    if (lx_next_instance(c->st, t.graph, t.layer, &ng, &nl)) {
      *alias = (lx_tensor_ref){ng, nl, activation_input(lx_graph_of(c->p->ir, ng)), t.mb, t.role, 0};
      return true;
    }
    if (!lx_is_chunk_exit(c->st, t.graph, t.layer)) return false;
    *alias = lx_boundary_ref(c->p, c->s, t.role == LX_T_OUTPUT ? LX_T_SEND_ACT : LX_T_RECV_GRAD,
                             lx_chunk_of(c->st, t.layer), t.mb);
    return true;
  }
  bool stage_input =
      t.op == activation_input(g) && t.graph == LX_GRAPH_BLOCK && lx_is_chunk_entry(c->st, t.graph, t.layer);
  if (t.role == LX_T_GRAD && stage_input) {
    *alias = lx_boundary_ref(c->p, c->s, LX_T_SEND_GRAD, lx_chunk_of(c->st, t.layer), t.mb);
    return true;
  }
  return false;
}

static lx_tensor_ref canonical(const stage_check *c, lx_tensor_ref t) {
  if (t.role == LX_T_SEND_ACT || t.role == LX_T_SEND_GRAD || t.role == LX_T_RECV_GRAD)
    return lx_boundary_ref(c->p, c->s, t.role, lx_chunk_of(c->st, t.layer), t.mb);
  if (t.role == LX_T_RECOMPUTED) {
    lx_tensor_ref original = t;
    original.role = LX_T_OUTPUT;
    if (!same_span(c, t, original)) return t; /* a scratch copy: a value of its own */
    t = original;
  }
  lx_tensor_ref alias;
  if ((t.role == LX_T_OUTPUT || t.role == LX_T_GRAD) && boundary_alias(c, t, &alias) &&
      same_span(c, t, alias))
    return alias;
  return t;
}

/* Fields are small non-negative numbers once shifted by one (layer and mb
 * may be -1): target, region, graph, role, index 4 bits each, layer and op
 * 20 bits, mb 32 bits, the rows (lx_rows) above it. */
static tensor_key key_of(const stage_check *c, const lx_access *a) {
  if (a->target == LX_TARGET_REGION)
    return (tensor_key){(uint64_t)a->target << 60 | (uint64_t)a->region << 56, 0};
  lx_tensor_ref t = a->target == LX_TARGET_TENSOR ? canonical(c, a->tensor) : a->tensor;
  uint64_t hi = (uint64_t)a->target << 60 | (uint64_t)t.graph << 52 | (uint64_t)t.role << 48 |
                (uint64_t)t.index << 44 | (uint64_t)(t.layer + 1) << 20 | (uint64_t)t.op;
  return (tensor_key){hi, (uint64_t)a->rows << 32 | (uint64_t)(uint32_t)(t.mb + 1)};
}

/* ---- collecting accesses ---------------------------------------------------------- */

static int compare_extents(const void *x, const void *y) {
  const extent *a = x, *b = y;
  if (a->offset != b->offset) return a->offset < b->offset ? -1 : 1;
  return a->bytes < b->bytes ? -1 : a->bytes > b->bytes;
}

static void collect_accesses(stage_check *c, extent **raw_spans) {
  int cap = LX_MAX_ACCESSES;
  lx_access *buf = lx_malloc(sizeof *buf * (size_t)cap);
  for (int k = 0; k < NS; k++)
    for (int i = 0; i < c->reached[k]; i++) {
      const lx_instr *in = &c->st->streams[k].items[i];
      int n = lx_instr_access(c->p, c->s, c->l, in, buf, cap);
      if (n > cap) { /* a backward that zeroes the gradients of a long block */
        cap = n;
        buf = lx_realloc(buf, sizeof *buf * (size_t)cap);
        n = lx_instr_access(c->p, c->s, c->l, in, buf, cap);
      }
      for (int j = 0; j < n; j++) {
        lx_span span = lx_access_span(c->p, c->s, c->l, &buf[j]);
        if (span.bytes <= 0) continue;
        if (c->n_acc == c->cap_acc) {
          c->cap_acc = c->cap_acc ? 2 * c->cap_acc : 1024;
          c->acc = lx_realloc(c->acc, sizeof *c->acc * (size_t)c->cap_acc);
          *raw_spans = lx_realloc(*raw_spans, sizeof **raw_spans * (size_t)c->cap_acc);
        }
        (*raw_spans)[c->n_acc] = (extent){span.offset, span.bytes};
        c->acc[c->n_acc++] = (access_rec){.stream = k,
                                          .pos = i,
                                          .key = key_of(c, &buf[j]),
                                          .tensor = buf[j].tensor,
                                          .mode = buf[j].mode,
                                          .target = buf[j].target,
                                          .region = buf[j].region,
                                          .rows = buf[j].rows};
      }
    }
  free(buf);
}

static int span_index(const stage_check *c, extent e) {
  int lo = 0, hi = c->n_spans - 1;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (compare_extents(&c->spans[mid], &e) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Distinct spans, and for each the spans that overlap it. */
static void index_spans(stage_check *c, extent *raw) {
  c->spans = lx_malloc(sizeof *c->spans * (size_t)(c->n_acc + 1));
  memcpy(c->spans, raw, sizeof *raw * (size_t)c->n_acc);
  qsort(c->spans, (size_t)c->n_acc, sizeof *c->spans, compare_extents);
  for (int i = 0; i < c->n_acc; i++)
    if (c->n_spans == 0 || compare_extents(&c->spans[c->n_spans - 1], &c->spans[i]) != 0)
      c->spans[c->n_spans++] = c->spans[i];
  for (int i = 0; i < c->n_acc; i++)
    c->acc[i].span = span_index(c, raw[i]);
  /* sorted by offset: the spans overlapping i after it start before i ends */
  int *count = lx_calloc((size_t)c->n_spans + 1, sizeof *count);
  for (int pass = 0; pass < 2; pass++) {
    int *fill = pass ? lx_calloc((size_t)c->n_spans, sizeof *fill) : NULL;
    for (int i = 0; i < c->n_spans; i++)
      for (int j = i; j < c->n_spans && c->spans[j].offset < c->spans[i].offset + c->spans[i].bytes; j++) {
        if (!pass) {
          count[i + 1]++;
          if (j != i) count[j + 1]++;
          continue;
        }
        c->overlap[c->overlap_start[i] + fill[i]++] = j;
        if (j != i) c->overlap[c->overlap_start[j] + fill[j]++] = i;
      }
    if (!pass) {
      for (int i = 0; i < c->n_spans; i++)
        count[i + 1] += count[i];
      c->overlap_start = count;
      c->overlap = lx_malloc(sizeof *c->overlap * (size_t)(count[c->n_spans] + 1));
    }
    free(fill);
  }
}

/* Buckets of access indices per (span, stream), in program order. */
static void bucket(const stage_check *c, bool writes_only, int **start, int **items) {
  int buckets = c->n_spans * NS;
  *start = lx_calloc((size_t)buckets + 1, sizeof **start);
  *items = lx_malloc(sizeof **items * (size_t)(c->n_acc + 1));
  for (int i = 0; i < c->n_acc; i++)
    if (!writes_only || is_write(c->acc[i].mode)) (*start)[c->acc[i].span * NS + c->acc[i].stream + 1]++;
  for (int b = 0; b < buckets; b++)
    (*start)[b + 1] += (*start)[b];
  int *fill = lx_calloc((size_t)buckets, sizeof *fill);
  for (int i = 0; i < c->n_acc; i++) /* accesses were collected stream by stream in program order */
    if (!writes_only || is_write(c->acc[i].mode)) {
      int b = c->acc[i].span * NS + c->acc[i].stream;
      (*items)[(*start)[b] + fill[b]++] = i;
    }
  free(fill);
}

static const stage_check *sort_ctx; /* qsort has no context argument in C11 */

static int compare_by_key(const void *x, const void *y) {
  const access_rec *a = &sort_ctx->acc[*(const int *)x], *b = &sort_ctx->acc[*(const int *)y];
  int k = compare_keys(&a->key, &b->key);
  if (k) return k;
  if (a->stream != b->stream) return a->stream - b->stream;
  return a->pos - b->pos;
}

/* A write (re)defines a value. A tensor only ever accumulated into (a
 * gradient) starts from zero: its contributions with no other contribution
 * before them start it. */
static void mark_generation_starts(stage_check *c, int first, int end) {
  bool has_write = false;
  int first_on[NS];
  for (int k = 0; k < NS; k++)
    first_on[k] = -1;
  for (int g = first; g < end; g++) {
    const access_rec *a = &c->acc[c->by_key[g]];
    has_write |= a->mode == LX_ACCESS_WRITE;
    if (first_on[a->stream] < 0) first_on[a->stream] = a->pos;
  }
  for (int g = first; g < end; g++) {
    access_rec *a = &c->acc[c->by_key[g]];
    a->value_defined = has_write;
    bool preceded = false;
    for (int k = 0; k < NS; k++)
      if (first_on[k] >= 0 &&
          (k == a->stream ? first_on[k] < a->pos : first_on[k] < clock_of(c, a->stream, a->pos)[k]))
        preceded = true;
    a->generation_start = has_write ? a->mode == LX_ACCESS_WRITE : !preceded;
  }
}

static void index_writers(stage_check *c) {
  c->by_key = lx_malloc(sizeof *c->by_key * (size_t)(c->n_acc + 1));
  for (int i = 0; i < c->n_acc; i++)
    if (is_write(c->acc[i].mode)) c->by_key[c->n_by_key++] = i;
  sort_ctx = c;
  qsort(c->by_key, (size_t)c->n_by_key, sizeof *c->by_key, compare_by_key);
  for (int g = 0, end; g < c->n_by_key; g = end) {
    for (end = g + 1;
         end < c->n_by_key && !compare_keys(&c->acc[c->by_key[end]].key, &c->acc[c->by_key[g]].key);)
      end++;
    mark_generation_starts(c, g, end);
  }
}

/* The writers of `key`: by_key[*first .. *end). */
static void writers_of(const stage_check *c, const tensor_key *key, int *first, int *end) {
  int lo = 0, hi = c->n_by_key;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (compare_keys(&c->acc[c->by_key[mid]].key, key) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  *first = *end = lo;
  while (*end < c->n_by_key && !compare_keys(&c->acc[c->by_key[*end]].key, key))
    ++*end;
}

/* ---- check 1 and the reuse half of check 2: each read sees its value ------------- */

static void report_tensor(stage_check *c, const char *what, const access_rec *a, instr_at other) {
  char tensor[TEXT / 2], text[2 * TEXT];
  if (a->target == LX_TARGET_REGION)
    snprintf(tensor, sizeof tensor, "region %s", lx_region_name(a->region));
  else
    lx_tensor_describe(c->p->ir, a->tensor, tensor, sizeof tensor);
  static const char *rows[LX_ROWS_HEAD_PIECE] = {"", " (rows from host memory)", " (recomputed rows)"};
  char part[48] = "";
  if (a->target == LX_TARGET_TENSOR && a->rows >= LX_ROWS_HEAD_PIECE)
    snprintf(part, sizeof part, " (kv-head piece %d)", a->rows - LX_ROWS_HEAD_PIECE);
  else if (a->target == LX_TARGET_TENSOR)
    snprintf(part, sizeof part, "%s", rows[a->rows]);
  strncat(tensor, part, sizeof tensor - strlen(tensor) - 1);
  snprintf(text, sizeof text, "%s%s %s", what, a->target == LX_TARGET_PARAM_GRAD ? " the gradient of" : "",
           tensor);
  lx_verify_report(c->r, text, access_at(c, a), other);
}

/* First index in bucket [from, to) of `items` whose instruction is at or after `pos`. */
static int first_at_or_after(const stage_check *c, const int *items, int from, int to, int pos) {
  while (from < to) {
    int mid = (from + to) / 2;
    if (c->acc[items[mid]].pos < pos)
      from = mid + 1;
    else
      to = mid;
  }
  return from;
}

static bool is_parameter(const access_rec *a) {
  return a->target == LX_TARGET_TENSOR && a->tensor.role == LX_T_PARAM;
}

/* The optimizer step, in a pipeline unrolled over steps, gives the weights
 * the values that the next step's reads of them need. */
static bool updates_weights_before(const stage_check *c, const access_rec *w, const access_rec *read) {
  return is_parameter(read) && w->target == LX_TARGET_REGION && access_before(c, w, read);
}

/* Between the latest (re)definition of the value that happens before the
 * read and the read itself, no write to an overlapping span of another
 * value may run. On each stream the writes ordered before one of those
 * definitions form a prefix (positions < `defined[k]`), the writes ordered
 * after the read a suffix; anything between is a write that may clobber. */
static void check_not_clobbered(stage_check *c, const access_rec *a, const int defined[NS]) {
  for (int o = c->overlap_start[a->span]; o < c->overlap_start[a->span + 1]; o++)
    for (int k = 0; k < NS; k++) {
      int b = c->overlap[o] * NS + k;
      int j = first_at_or_after(c, c->writes, c->write_start[b], c->write_start[b + 1], defined[k]);
      for (; j < c->write_start[b + 1]; j++) {
        const access_rec *w = &c->acc[c->writes[j]];
        if (access_before(c, a, w)) break;
        if (!compare_keys(&w->key, &a->key) || updates_weights_before(c, w, a)) continue;
        char what[TEXT], other[TEXT / 2];
        lx_tensor_describe(c->p->ir, w->tensor, other, sizeof other);
        snprintf(what, sizeof what, "buffer reused by %s while still needed: read of", other);
        report_tensor(c, what, a, access_at(c, w));
        return;
      }
    }
}

static void check_read(stage_check *c, const access_rec *a) {
  int first, end;
  writers_of(c, &a->key, &first, &end);
  int defined[NS] = {0};
  bool seen = is_parameter(a); /* parameters are defined before the step */
  instr_at some_writer = NO_INSTR;
  for (int g = first; g < end; g++) {
    const access_rec *w = &c->acc[c->by_key[g]];
    /* an instruction that zeroes a gradient and adds to it does so in that order */
    bool zeroed_here = same_instr(w, a) && w->generation_start && a->mode == LX_ACCESS_ACCUMULATE;
    if (same_instr(w, a) && !zeroed_here) continue;
    if (!zeroed_here) some_writer = access_at(c, w);
    if (!w->generation_start || !(zeroed_here || access_before(c, w, a))) continue;
    seen = true;
    const int *t = clock_of(c, w->stream, w->pos);
    for (int k = 0; k < NS; k++)
      if (t[k] > defined[k]) defined[k] = t[k];
  }
  if (!seen) {
    report_tensor(
        c, some_writer.stage < 0 ? "read of a tensor nothing writes:" : "read not ordered after the write of",
        a, some_writer);
    return;
  }
  /* every contribution to the value read is in before the read, unless a
   * new definition after the read starts the value afresh (an accumulation
   * needs the value so far, not the contributions after it) */
  for (int g = first; g < end && a->mode == LX_ACCESS_READ; g++) {
    const access_rec *w = &c->acc[c->by_key[g]];
    if (w->mode != LX_ACCESS_ACCUMULATE || same_instr(w, a) || access_before(c, w, a)) continue;
    bool redefined = false;
    for (int h = first; h < end && !redefined; h++) {
      const access_rec *d = &c->acc[c->by_key[h]];
      redefined =
          d->generation_start && access_before(c, a, d) && access_before(c, d, w) && !same_instr(d, a);
    }
    if (!redefined) {
      report_tensor(c, "read misses a later accumulation into", a, access_at(c, w));
      return;
    }
  }
  check_not_clobbered(c, a, defined);
}

/* A read, or an accumulation into a value that some instruction defines
 * (a tensor-parallel all-reduce of an output): it needs that value. */
static bool needs_value(const access_rec *a) {
  if (a->target == LX_TARGET_REGION) return false; /* whole regions: check_region */
  if (a->mode == LX_ACCESS_READ) return true;
  return a->mode == LX_ACCESS_ACCUMULATE && a->value_defined;
}

/* ---- whole regions: the optimizer and the data-parallel all-reduce ------------------ */

/* A region access comes after every conflicting access to a tensor inside
 * it (the optimizer after every use of the weights and every gradient
 * contribution), and a region read after every region write (the optimizer
 * after the gradient all-reduce). */
static bool must_precede_region_access(const access_rec *region, const access_rec *b) {
  if (same_instr(region, b) || (!is_write(region->mode) && !is_write(b->mode))) return false;
  return b->target != LX_TARGET_REGION || (region->mode == LX_ACCESS_READ && is_write(b->mode));
}

/* On stream k the accesses at positions below clock(a)[k] precede `a`; of
 * the others, the first that must precede it decides (the later ones on the
 * stream follow that one): it must be a later step's, ordered after `a`. */
static void check_region(stage_check *c, const access_rec *a) {
  const int *ca = clock_of(c, a->stream, a->pos);
  for (int o = c->overlap_start[a->span]; o < c->overlap_start[a->span + 1]; o++)
    for (int k = 0; k < NS; k++) {
      int b = c->overlap[o] * NS + k;
      int j = first_at_or_after(c, c->place, c->place_start[b], c->place_start[b + 1], ca[k]);
      for (; j < c->place_start[b + 1]; j++) {
        const access_rec *other = &c->acc[c->place[j]];
        if (!must_precede_region_access(a, other)) continue;
        if (!access_before(c, a, other))
          report_tensor(c, "whole-region access not after every use of", a, access_at(c, other));
        break;
      }
    }
}

/* ---- check 2: accesses from different streams are ordered --------------------------- */

/* On stream k the accesses not ordered before `a` start at the first whose
 * position reaches clock(a)[k]; if that one is not ordered after `a`, the
 * two may run at once. Each pair is looked at from its lower stream. */
static void check_cross_stream(stage_check *c, const access_rec *a) {
  const int *ca = clock_of(c, a->stream, a->pos);
  const int *start = is_write(a->mode) ? c->place_start : c->write_start;
  const int *items = is_write(a->mode) ? c->place : c->writes;
  for (int o = c->overlap_start[a->span]; o < c->overlap_start[a->span + 1]; o++)
    for (int k = a->stream + 1; k < NS; k++) {
      int b = c->overlap[o] * NS + k;
      int j = first_at_or_after(c, items, start[b], start[b + 1], ca[k]);
      if (j == start[b + 1] || access_before(c, a, &c->acc[items[j]])) continue;
      report_tensor(c, "streams race on overlapping buffers:", a, access_at(c, &c->acc[items[j]]));
    }
}

/* ---- one instruction against itself -------------------------------------------------- */

static bool spans_overlap(const stage_check *c, int x, int y) {
  const extent *a = &c->spans[x], *b = &c->spans[y];
  return a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

/* A kernel must not write over a buffer it reads (or writes) under another name. */
static void check_within_instruction(stage_check *c, int first, int end) {
  for (int i = first; i < end; i++)
    for (int j = i + 1; j < end; j++) {
      const access_rec *a = &c->acc[i], *b = &c->acc[j];
      if ((is_write(a->mode) || is_write(b->mode)) && spans_overlap(c, a->span, b->span) &&
          compare_keys(&a->key, &b->key)) {
        char other[TEXT / 2], what[TEXT];
        lx_tensor_describe(c->p->ir, b->tensor, other, sizeof other);
        snprintf(what, sizeof what, "instruction aliases %s with", other);
        report_tensor(c, what, a, NO_INSTR);
      }
    }
}

/* ---- one stage ---------------------------------------------------------------------------- */

static void check_stage_accesses(stage_check *c) {
  for (int i = 0, end; i < c->n_acc; i = end) {
    for (end = i + 1; end < c->n_acc && same_instr(&c->acc[end], &c->acc[i]);)
      end++;
    check_within_instruction(c, i, end);
  }
  for (int i = 0; i < c->n_acc; i++) {
    const access_rec *a = &c->acc[i];
    if (needs_value(a)) check_read(c, a);
    if (a->target == LX_TARGET_REGION) check_region(c, a);
    check_cross_stream(c, a);
  }
}

static void free_stage_check(stage_check *c) {
  for (int k = 0; k < NS; k++)
    free(c->clock[k]);
  free(c->acc);
  free(c->spans);
  free(c->overlap_start);
  free(c->overlap);
  free(c->place_start);
  free(c->place);
  free(c->write_start);
  free(c->writes);
  free(c->by_key);
}

static void verify_stage(reporter *r, const lx_pipeline *p, int s, const lx_stage_layout *l) {
  stage_check c = {.r = r, .p = p, .st = &p->stages[s], .l = l, .s = s};
  compute_clocks(&c);
  check_events(&c);
  extent *raw = NULL;
  collect_accesses(&c, &raw);
  index_spans(&c, raw);
  free(raw);
  bucket(&c, false, &c.place_start, &c.place);
  bucket(&c, true, &c.write_start, &c.writes);
  index_writers(&c);
  check_stage_accesses(&c);
  free_stage_check(&c);
}

/* Event ids are in range everywhere (the deadlock search indexes by them). */
static bool events_in_range(const lx_pipeline *p) {
  for (int s = 0; s < p->pp; s++)
    for (int k = 0; k < NS; k++)
      for (int i = 0; i < p->stages[s].streams[k].count; i++) {
        const lx_instr *in = &p->stages[s].streams[k].items[i];
        if ((in->kind == LX_I_RECORD || in->kind == LX_I_WAIT) && !valid_event(&p->stages[s], in->event))
          return false;
      }
  return true;
}

static int verify_pipeline(const lx_pipeline *p, const lx_stage_layout *layouts) {
  reporter r = {p, 0, 0};
  for (int s = 0; s < p->pp; s++)
    verify_stage(&r, p, s, &layouts[s]);
  bool well_formed = lx_verify_matching(&r, p);
  if (well_formed && events_in_range(p)) lx_verify_deadlock_free(&r, p);
  lx_verify_channels(&r, p);
  if (r.printed > MAX_PRINTED)
    fprintf(stderr, "lynxgen: internal error: verify: %d more violations not shown\n",
            r.printed - MAX_PRINTED);
  return r.violations;
}

/* 2BW's steps overlap: a step's backwards read what the step before wrote
 * ahead. The program runs a step with or without its fill and with or
 * without the next step's forwards; these four in a row hold each kind of
 * step after each kind that can precede it. */
static const bool fill_2bw[] = {true, false, false, true}, ahead_2bw[] = {true, true, false, false};

int lx_verify(const lx_pipeline *p, const lx_stage_layout *layouts) {
  if (p->kind != LX_SCHEDULE_2BW) return verify_pipeline(p, layouts);
  lx_pipeline steps;
  lx_unroll_steps(p, (int)(sizeof fill_2bw / sizeof *fill_2bw), fill_2bw, ahead_2bw, &steps);
  int violations = verify_pipeline(&steps, layouts);
  lx_unrolled_free(&steps);
  return violations;
}
