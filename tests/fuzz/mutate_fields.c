/* mutate_fields.c — mutations of the configuration: the value of a field
 * (or of a #define constant) replaced by a value at a boundary of its type
 * or moved from its current value, a field deleted, written twice, or added
 * where it was missing. The boundaries are where validation code breaks:
 * 0, -1, INT_MAX and one past it, 2^31, 2^63, values that overflow when
 * multiplied by a width, non-dividing counts, NaN and infinities, denormals,
 * strings that are empty, huge or path-like. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_text.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const int_values[] = {
    "0",
    "-1",
    "1",
    "2",
    "3",
    "4",
    "5",
    "7",
    "8",
    "12",
    "16",
    "64",
    "127",
    "128",
    "255",
    "256",
    "1000",
    "1024",
    "4096",
    "46341",
    "65535",
    "65536",
    "1 << 20",
    "(1 << 20) + 1",
    "1 << 30",
    "1 << 31",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551616",
    "0x7fffffff",
    "2.5",
    "1e9",
    "'a'",
    "-0",
    "(int)1e10",
    "2147483647 + 1",
};
static const char *const double_values[] = {
    "0",
    "0.0",
    "-0.0",
    "1",
    "1.0",
    "0.5",
    "-0.5",
    "0.999999",
    "0.1",
    "1e-8",
    "1e-320",
    "4.9e-324",
    "1.7976931348623157e308",
    "1e308",
    "1e999",
    "-1e999",
    "0.0 / 0.0",
    "__builtin_nan(\"\")",
    "__builtin_inf()",
    "-__builtin_inf()",
    "1e308 * 10",
    "2147483648.0",
    "-1",
    "100",
    "1e30",
};
static const char *const enum_values[] = {
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "6",
    "7",
    "8",
    "-1",
    "99",
    "2147483647",
    "GPU_V100_32GB",
    "GPU_A100_40GB",
    "GPU_A100_80GB",
    "GPU_H100_80GB",
    "GPU_H200_141GB",
    "LINK_NVLINK2",
    "LINK_NVLINK4",
    "LINK_PCIE4",
    "LINK_IB_NDR",
    "SCHEDULE_GPIPE",
    "SCHEDULE_1F1B",
    "SCHEDULE_2BW",
    "SCHEDULE_INTERLEAVED",
    "SCHEDULE_ZB_H1",
    "LR_CONSTANT",
    "LR_COSINE",
    "LR_LINEAR",
    "DTYPE_BF16",
    "DTYPE_FP16",
    "DTYPE_FP32",
    "(enum lx_gpu)9",
};
static const char *const string_values[] = {
    "\"\"",
    "\"data/*.bin\"",
    "\"/dev/null\"",
    "\"../../../etc/passwd\"",
    "\"a\\nb\\\"c\"",
    "\"%s%n%99999d\"",
    "0",
    "(const char *)0",
    "\"a\" \"b\"",
    "\"\\xff\\x00z\"",
    "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    "aaaaaa"
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    "aaaaa"
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/*.bin\"",
};

/* Fields of the four structs of ir/lynx.h, by the type of their value. */
static const char *const double_fields[] = {"dropout", "lr",  "min_lr",       "beta1",
                                            "beta2",   "eps", "weight_decay", "grad_clip"};
static const char *const enum_fields[] = {"gpu",      "intra_node_link", "inter_node_link",
                                          "schedule", "lr_schedule",     "dtype"};
static const char *const string_fields[] = {"train_data", "val_data"};
static const char *const all_fields[] = {
    "vocab",
    "seq_len",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn_hidden",
    "dropout",
    "tied_embeddings",
    "gpu",
    "nodes",
    "gpus_per_node",
    "intra_node_link",
    "inter_node_link",
    "tp",
    "pp",
    "dp",
    "micro_batch",
    "global_batch",
    "schedule",
    "sequence_parallel",
    "zero",
    "mini_sequences",
    "steps",
    "lr",
    "min_lr",
    "warmup_steps",
    "lr_schedule",
    "beta1",
    "beta2",
    "eps",
    "weight_decay",
    "grad_clip",
    "seed",
    "dtype",
    "train_data",
    "val_data",
    "val_interval",
    "checkpoint_interval",
};

static bool named(const char *name, size_t len, const char *const *list, int n) {
  for (int i = 0; i < n; i++)
    if (strlen(list[i]) == len && !memcmp(name, list[i], len)) return true;
  return false;
}

/* A value of the field's type: from the table, or near a random scale. */
static void boundary_value(const char *name, size_t len, mt_rng *r, char *out, size_t size) {
  if (named(name, len, double_fields, COUNT(double_fields)))
    snprintf(out, size, "%s", mt_pick(r, double_values, COUNT(double_values)));
  else if (named(name, len, enum_fields, COUNT(enum_fields)))
    snprintf(out, size, "%s", mt_pick(r, enum_values, COUNT(enum_values)));
  else if (named(name, len, string_fields, COUNT(string_fields)))
    snprintf(out, size, "%s", mt_pick(r, string_values, COUNT(string_values)));
  else if (mt_below(r, 3) == 0)
    snprintf(out, size, "%d", mt_below(r, 3) ? mt_below(r, 17) : (1 << mt_below(r, 31)));
  else
    snprintf(out, size, "%s", mt_pick(r, int_values, COUNT(int_values)));
}

/* The current value moved: doubled, halved, one more or less, negated. */
static void moved_value(const mt_text *t, const mt_field *f, mt_rng *r, char *out, size_t size) {
  static const char *const moves[] = {"(%.*s) * 2", "(%.*s) / 2", "(%.*s) + 1",    "(%.*s) - 1",
                                      "-(%.*s)",    "(%.*s) * 3", "(%.*s) * 65536"};
  int len = mt_span_len(f->value) > 200 ? 200 : mt_span_len(f->value);
  snprintf(out, size, mt_pick(r, moves, COUNT(moves)), len, (const char *)t->data + f->value.start);
}

/* Removes a field with the comma after it (a #define with its line). */
static bool delete_field(mt_text *t, const mt_field *f) {
  int end = f->whole.end;
  while (end < (int)t->size && (t->data[end] == ' ' || t->data[end] == '\t'))
    end++;
  if (end < (int)t->size && t->data[end] == ',') end++;
  return mt_splice(t, f->whole.start, end, "", 0);
}

static bool duplicate_field(mt_text *t, const mt_field *f) {
  char copy[512];
  int len = mt_span_len(f->whole);
  if (t->data[f->whole.start] == '#' || len + 3 > (int)sizeof copy) return false;
  memcpy(copy, t->data + f->whole.start, (size_t)len);
  memcpy(copy + len, ", ", 3);
  return mt_splice(t, f->whole.start, f->whole.start, copy, (size_t)len + 2);
}

/* Adds `.name = value` before the closing brace of an initializer. */
static bool add_field(mt_text *t, const mt_model *m, mt_rng *r) {
  if (m->n_inits == 0) return false;
  int at = m->init_ends[mt_below(r, m->n_inits)], prev = at - 1;
  while (prev >= 0 && (t->data[prev] == ' ' || t->data[prev] == '\n' || t->data[prev] == '\t'))
    prev--;
  const char *name = mt_pick(r, all_fields, COUNT(all_fields));
  char value[512], field[600];
  boundary_value(name, strlen(name), r, value, sizeof value);
  bool comma = prev >= 0 && t->data[prev] != ',' && t->data[prev] != '{';
  int len = snprintf(field, sizeof field, "%s.%s = %s", comma ? ", " : "", name, value);
  return mt_splice(t, at, at, field, (size_t)len);
}

bool mt_mutate_field(mt_text *t, const mt_model *m, mt_rng *r) {
  int choice = mt_below(r, 20);
  if (choice == 0 || m->n_fields == 0) return add_field(t, m, r);
  const mt_field *f = &m->fields[mt_below(r, m->n_fields)];
  if (choice == 1) return delete_field(t, f);
  if (choice == 2) return duplicate_field(t, f);
  char value[512];
  if (choice < 7)
    moved_value(t, f, r, value, sizeof value);
  else
    boundary_value((const char *)t->data + f->name.start, (size_t)mt_span_len(f->name), r, value,
                   sizeof value);
  return mt_splice(t, f->value.start, f->value.end, value, strlen(value));
}
