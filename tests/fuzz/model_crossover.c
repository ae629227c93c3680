/* model_crossover.c — libFuzzer's custom cross-over for model files: the
 * first input with one piece of the second put in, where the structure says
 * it fits (model_text.h): a function body in place of one of the first's, a
 * field value in place of the same field's, or a statement inserted before
 * one of the first's statements. Two examples cross into a model with the
 * configuration of one and the layers of the other. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model_text.h"

size_t LLVMFuzzerCustomCrossOver(const uint8_t *data1, size_t size1, const uint8_t *data2, size_t size2,
                                 uint8_t *out, size_t max_out_size, unsigned int seed);

static bool same_text(const uint8_t *a, mt_span sa, const uint8_t *b, mt_span sb) {
  return mt_span_len(sa) == mt_span_len(sb) && !memcmp(a + sa.start, b + sb.start, (size_t)mt_span_len(sa));
}

/* The span of `into` to replace and the span of `from` to put there; false when none. */
static bool pick_pieces(const mt_model *into, const uint8_t *a, const mt_model *from, const uint8_t *b,
                        mt_rng *r, mt_span *target, mt_span *piece) {
  switch (mt_below(r, 3)) {
  case 0:
    if (into->n_funcs == 0 || from->n_funcs == 0) return false;
    *target = into->funcs[mt_below(r, into->n_funcs)].body;
    *piece = from->funcs[mt_below(r, from->n_funcs)].body;
    for (int i = 0; i < from->n_funcs; i++) /* the function of the same name, where there is one */
      for (int k = 0; k < into->n_funcs; k++)
        if (same_text(a, into->funcs[k].name, b, from->funcs[i].name) && mt_below(r, 2))
          *target = into->funcs[k].body, *piece = from->funcs[i].body;
    return true;
  case 1: {
    if (into->n_fields == 0 || from->n_fields == 0) return false;
    const mt_field *f = &into->fields[mt_below(r, into->n_fields)];
    *target = f->value;
    *piece = from->fields[mt_below(r, from->n_fields)].value;
    for (int i = 0; i < from->n_fields; i++) /* the same field's value, where it has one */
      if (same_text(a, f->name, b, from->fields[i].name) && mt_below(r, 3)) *piece = from->fields[i].value;
    return true;
  }
  default:
    if (into->n_stmts == 0 || from->n_stmts == 0) return false;
    int at = into->stmts[mt_below(r, into->n_stmts)].whole.start;
    *target = (mt_span){at, at};
    *piece = from->stmts[mt_below(r, from->n_stmts)].whole;
    return true;
  }
}

size_t LLVMFuzzerCustomCrossOver(const uint8_t *data1, size_t size1, const uint8_t *data2, size_t size2,
                                 uint8_t *out, size_t max_out_size, unsigned int seed) {
  static mt_model first, second; /* large; libFuzzer mutates on one thread */
  mt_rng r = {seed * 0x9E3779B97F4A7C15ull + 7};
  if (size1 > max_out_size) return 0;
  memcpy(out, data1, size1);
  mt_scan((const char *)data1, size1, &first);
  mt_scan((const char *)data2, size2, &second);
  mt_span target, piece;
  if (!pick_pieces(&first, data1, &second, data2, &r, &target, &piece)) return 0;
  mt_text t = {out, size1, max_out_size};
  bool statement = target.start == target.end;
  if (!mt_splice(&t, target.start, target.end, (const char *)data2 + piece.start, (size_t)mt_span_len(piece)))
    return 0;
  if (statement)
    mt_splice(&t, target.start + mt_span_len(piece), target.start + mt_span_len(piece), "\n  ", 3);
  return t.size;
}
