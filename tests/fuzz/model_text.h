/* model_text.h — the shape of a model file, as the fuzzers' mutator sees it.
 *
 * The structure-aware mutator (model_mutator.c) does not parse C: a small
 * tokenizer (model_scan.c) finds the places worth mutating in the text of a
 * model file (ir/lynx.h): the values of the configuration fields and of the
 * #define constants, the statements of prologue / block / epilogue, the
 * operator calls in them, their integer arguments and the tensor variables.
 * Every place is a byte span of the text; a mutation splices one span and
 * the text is scanned again before the next. Inputs of any shape scan: a
 * span the scanner cannot make sense of is simply not recorded. */
#ifndef LX_FUZZ_MODEL_TEXT_H
#define LX_FUZZ_MODEL_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
  int start, end; /* byte offsets, [start, end) */
} mt_span;

/* ".name = value" of an initializer, or "#define NAME value". */
typedef struct {
  mt_span name, value, whole; /* whole: from the '.' (or '#') to the end of the value */
} mt_field;

typedef struct {
  mt_span whole;   /* from its first token to its ';' */
  mt_span defined; /* the variable it declares or assigns; empty when none */
  bool is_return;
  int func;
} mt_stmt;

typedef struct {
  mt_span name, args; /* args: between the parentheses */
  int func;
} mt_call;

typedef struct {
  mt_span name, params, body; /* body: between the braces */
} mt_func;

/* An identifier used in a statement (a tensor variable, a macro, an enum). */
typedef struct {
  mt_span name;
  int func;
} mt_use;

enum {
  MT_MAX_FIELDS = 96,
  MT_MAX_INITS = 8,
  MT_MAX_FUNCS = 8,
  MT_MAX_STMTS = 512,
  MT_MAX_CALLS = 1024,
  MT_MAX_INTS = 1024,
  MT_MAX_VARS = 1024
};

typedef struct {
  mt_field fields[MT_MAX_FIELDS];
  int n_fields;
  int init_ends[MT_MAX_INITS]; /* the offset of each initializer's closing '}' */
  int n_inits;
  mt_func funcs[MT_MAX_FUNCS];
  int n_funcs;
  mt_stmt stmts[MT_MAX_STMTS]; /* in text order */
  int n_stmts;
  mt_call calls[MT_MAX_CALLS];
  int n_calls;
  mt_span ints[MT_MAX_INTS]; /* integer literals inside function bodies */
  int n_ints;
  mt_use vars[MT_MAX_VARS]; /* identifiers of the statements that are not calls */
  int n_vars;
} mt_model;

/* model_scan.c: the places of `text` worth mutating. */
void mt_scan(const char *text, size_t size, mt_model *m);

/* A small deterministic generator, seeded by libFuzzer's seed. */
typedef struct {
  uint64_t state;
} mt_rng;

static inline uint32_t mt_next(mt_rng *r) {
  r->state ^= r->state << 13, r->state ^= r->state >> 7, r->state ^= r->state << 17;
  return (uint32_t)(r->state >> 16);
}
static inline int mt_below(mt_rng *r, int n) { return n > 0 ? (int)(mt_next(r) % (uint32_t)n) : 0; }
static inline const char *mt_pick(mt_rng *r, const char *const *list, int n) { return list[mt_below(r, n)]; }

/* The text being mutated: data[0, size), room for capacity bytes. */
typedef struct {
  uint8_t *data;
  size_t size, capacity;
} mt_text;

/* Replaces [start, end) with `with` (len bytes); false, text unchanged, when
 * the result would not fit. */
static inline bool mt_splice(mt_text *t, int start, int end, const char *with, size_t len) {
  size_t tail = t->size - (size_t)end, size = (size_t)start + len + tail;
  if (size > t->capacity || start > end || (size_t)end > t->size) return false;
  memmove(t->data + start + len, t->data + end, tail);
  memcpy(t->data + start, with, len);
  t->size = size;
  return true;
}

static inline int mt_span_len(mt_span s) { return s.end - s.start; }

/* The mutations (one file each); each returns false when it found nothing
 * to mutate or the result would not fit. */
bool mt_mutate_field(mt_text *t, const mt_model *m, mt_rng *r); /* mutate_fields.c */
bool mt_mutate_ops(mt_text *t, const mt_model *m, mt_rng *r);   /* mutate_ops.c */
bool mt_mutate_options(mt_text *t, mt_rng *r);                  /* mutate_options.c */

#endif
