/* mutate_ops.c — mutations of the op chains of prologue, block and
 * epilogue: statements deleted, duplicated, swapped or repeated many times;
 * calls of the operators of ir/lynx.h inserted (mostly as `x = op(x, ...)`,
 * which keeps the chain connected), nested around an argument, renamed to
 * another operator, given an argument more or less; variables rewired to
 * another one in scope; integer arguments moved to boundary values. Most
 * results are still well-formed model files, so that the analysis and the
 * planner behind the front end see them. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "model_text.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const struct {
  const char *name;
  int tensors, ints;
} operators[] = {
    {"embedding", 1, 2}, {"position_embedding", 1, 1},
    {"layernorm", 1, 0}, {"rmsnorm", 1, 0},
    {"linear", 1, 1},    {"linear_nobias", 1, 1},
    {"attention", 1, 2}, {"flash_attention", 1, 2},
    {"rope", 1, 2},      {"gelu", 1, 0},
    {"silu", 1, 0},      {"swiglu", 1, 0},
    {"dropout", 1, 0},   {"add", 2, 0},
    {"lm_head", 1, 1},   {"cross_entropy", 2, 0},
};

static const char *const int_args[] = {"64",  "128", "3 * 64",     "256",        "4",    "1", "2",
                                       "0",   "-1",  "2147483647", "1 << 30",    "7",    "3", "65536",
                                       "512", "8",   "1 << 16",    "2147483648", "4096", "16"};

enum { MAX_NAMES = 256, MAX_TEXT = 4096 };

/* The tensors a statement of `func` at offset `before` may name: parameters
 * and the variables assigned before it. */
static int scope_names(const mt_text *t, const mt_model *m, int func, int before, mt_span *names) {
  int n = 0;
  const mt_span params = m->funcs[func].params;
  for (int i = params.start; i < params.end && n < MAX_NAMES;) {
    int start = i;
    while (i < params.end && (t->data[i] == '_' || (t->data[i] | 32) - 'a' < 26u || t->data[i] - '0' < 10u))
      i++;
    if (i > start && !(i - start == 6 && !memcmp(t->data + start, "tensor", 6)) &&
        !(i - start == 5 && !memcmp(t->data + start, "const", 5)))
      names[n++] = (mt_span){start, i};
    if (i == start) i++;
  }
  for (int s = 0; s < m->n_stmts && n < MAX_NAMES; s++)
    if (m->stmts[s].func == func && m->stmts[s].whole.end < before && mt_span_len(m->stmts[s].defined) > 0)
      names[n++] = m->stmts[s].defined;
  return n;
}

static int append(char *buf, int at, const char *text, int len) {
  if (at + len >= MAX_TEXT) return at;
  memcpy(buf + at, text, (size_t)len);
  buf[at + len] = '\0';
  return at + len;
}

static int append_span(char *buf, int at, const mt_text *t, mt_span s) {
  return append(buf, at, (const char *)t->data + s.start, mt_span_len(s));
}

/* An integer argument: one the model already uses (a literal, a #define), or one from the table. */
static int append_int(char *buf, int at, const mt_text *t, const mt_model *m, mt_rng *r) {
  if (mt_below(r, 2) && m->n_ints > 0) return append_span(buf, at, t, m->ints[mt_below(r, m->n_ints)]);
  if (mt_below(r, 2) && m->n_fields > 0) {
    const mt_field *f = &m->fields[mt_below(r, m->n_fields)];
    if (t->data[f->whole.start] == '#') return append_span(buf, at, t, f->name);
  }
  const char *v = mt_pick(r, int_args, COUNT(int_args));
  return append(buf, at, v, (int)strlen(v));
}

/* `op(first, ...)` with the other tensors from scope and plausible integers. */
static int append_call(char *buf, int at, const mt_text *t, const mt_model *m, mt_rng *r,
                       const mt_span *names, int n_names, mt_span first) {
  int op = mt_below(r, COUNT(operators));
  at = append(buf, at, operators[op].name, (int)strlen(operators[op].name));
  at = append(buf, at, "(", 1);
  at = append_span(buf, at, t, first);
  for (int k = 1; k < operators[op].tensors; k++) {
    at = append(buf, at, ", ", 2);
    at = append_span(buf, at, t, mt_below(r, 3) ? names[mt_below(r, n_names)] : first);
  }
  for (int k = 0; k < operators[op].ints; k++) {
    at = append(buf, at, ", ", 2);
    at = append_int(buf, at, t, m, r);
  }
  return append(buf, at, ")", 1);
}

/* `x = op(x, ...);` (or a new variable) before statement s. */
static bool insert_call(mt_text *t, const mt_model *m, mt_rng *r, const mt_stmt *s) {
  mt_span names[MAX_NAMES];
  int n = scope_names(t, m, s->func, s->whole.start, names);
  if (n == 0) return false;
  mt_span target = names[mt_below(r, n)];
  char buf[MAX_TEXT] = "", decl[32];
  int at = mt_below(r, 4)
               ? append_span(buf, 0, t, target)
               : append(buf, 0, decl, snprintf(decl, sizeof decl, "tensor fz%d", mt_below(r, 1000)));
  at = append(buf, at, " = ", 3);
  at = append_call(buf, at, t, m, r, names, n, target);
  at = append(buf, at, ";\n  ", 4);
  return mt_splice(t, s->whole.start, s->whole.start, buf, (size_t)at);
}

/* A variable used in a statement wrapped in a call: x -> op(x, ...). */
static bool nest_call(mt_text *t, const mt_model *m, mt_rng *r, const mt_use *use) {
  mt_span names[MAX_NAMES];
  int n = scope_names(t, m, use->func, use->name.start, names);
  if (n == 0) return false;
  char buf[MAX_TEXT] = "";
  int at = append_call(buf, 0, t, m, r, names, n, use->name);
  return mt_splice(t, use->name.start, use->name.end, buf, (size_t)at);
}

static bool rewire(mt_text *t, const mt_model *m, mt_rng *r, const mt_use *use) {
  mt_span names[MAX_NAMES];
  int n = scope_names(t, m, use->func, use->name.start, names);
  if (n == 0) return false;
  char buf[MAX_TEXT] = "";
  int at = append_span(buf, 0, t, names[mt_below(r, n)]);
  return mt_splice(t, use->name.start, use->name.end, buf, (size_t)at);
}

static bool rename_call(mt_text *t, mt_rng *r, const mt_call *c) {
  const char *name = operators[mt_below(r, COUNT(operators))].name;
  return mt_splice(t, c->name.start, c->name.end, name, strlen(name));
}

/* One argument more (an integer) or one fewer (the last). */
static bool change_arity(mt_text *t, const mt_model *m, mt_rng *r, const mt_call *c) {
  if (mt_below(r, 2)) {
    char buf[MAX_TEXT] = ", ";
    int at = append_int(buf, 2, t, m, r);
    return mt_splice(t, c->args.end, c->args.end, buf, (size_t)at);
  }
  int comma = c->args.end - 1, depth = 0;
  for (; comma > c->args.start; comma--) {
    uint8_t ch = t->data[comma];
    depth += ch == ')' ? 1 : ch == '(' ? -1 : 0;
    if (ch == ',' && depth == 0) break;
  }
  return mt_splice(t, comma, c->args.end, "", 0);
}

static bool change_int(mt_text *t, const mt_model *m, mt_rng *r, mt_span literal) {
  char buf[MAX_TEXT] = "";
  int at = append_int(buf, 0, t, m, r);
  if (mt_below(r, 3) == 0)
    at = snprintf(buf, sizeof buf, "%.*s * %d", mt_span_len(literal), (const char *)t->data + literal.start,
                  1 + mt_below(r, 8));
  return mt_splice(t, literal.start, literal.end, buf, (size_t)at);
}

/* Statement s written `times` times (deep chains, many ops per layer). */
static bool repeat(mt_text *t, const mt_stmt *s, int times) {
  int len = mt_span_len(s->whole); /* with its ';' */
  bool ok = true;
  for (int i = 0; i < times && ok; i++) {
    char buf[MAX_TEXT];
    if (len + 3 >= MAX_TEXT) return false;
    memcpy(buf, t->data + s->whole.start, (size_t)len);
    memcpy(buf + len, "\n  ", 3);
    ok = mt_splice(t, s->whole.start, s->whole.start, buf, (size_t)len + 3);
  }
  return true;
}

static bool delete_stmt(mt_text *t, const mt_stmt *s) {
  return mt_splice(t, s->whole.start, s->whole.end, "", 0);
}

/* Exchanges statements a and b (a before b) of the text. */
static bool swap_stmts(mt_text *t, const mt_stmt *a, const mt_stmt *b) {
  if (a->whole.end > b->whole.start) return false;
  int la = mt_span_len(a->whole), lb = mt_span_len(b->whole), mid = b->whole.start - a->whole.end;
  char buf[3 * MAX_TEXT];
  if (la + lb + mid >= (int)sizeof buf) return false;
  memcpy(buf, t->data + b->whole.start, (size_t)lb);
  memcpy(buf + lb, t->data + a->whole.end, (size_t)mid);
  memcpy(buf + lb + mid, t->data + a->whole.start, (size_t)la);
  return mt_splice(t, a->whole.start, b->whole.end, buf, (size_t)(la + lb + mid));
}

bool mt_mutate_ops(mt_text *t, const mt_model *m, mt_rng *r) {
  if (m->n_stmts == 0) return false;
  const mt_stmt *s = &m->stmts[mt_below(r, m->n_stmts)];
  switch (mt_below(r, 12)) {
  case 0: return delete_stmt(t, s);
  case 1: return repeat(t, s, 1);
  case 2: return repeat(t, s, 2 + mt_below(r, mt_below(r, 4) ? 16 : 400));
  case 3: return swap_stmts(t, s, &m->stmts[mt_below(r, m->n_stmts)]);
  case 4: return m->n_vars > 0 && nest_call(t, m, r, &m->vars[mt_below(r, m->n_vars)]);
  case 5: return m->n_vars > 0 && rewire(t, m, r, &m->vars[mt_below(r, m->n_vars)]);
  case 6: return m->n_calls > 0 && rename_call(t, r, &m->calls[mt_below(r, m->n_calls)]);
  case 7: return m->n_calls > 0 && change_arity(t, m, r, &m->calls[mt_below(r, m->n_calls)]);
  case 8:
  case 9: return m->n_ints > 0 && change_int(t, m, r, m->ints[mt_below(r, m->n_ints)]);
  default: return insert_call(t, m, r, s);
  }
}
