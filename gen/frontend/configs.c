/* configs.c — the four configs of a model file (configs.h): each designated
 * initializer of a `struct lx_model`, `lx_cluster`, `lx_parallel` or
 * `lx_training` variable, field by field, into the IR, with the place each
 * field was written. Types are checked here; values are analysis's. */
#include "frontend/configs.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "alloc.h"

typedef enum { FIELD_INT, FIELD_ENUM, FIELD_DOUBLE, FIELD_BOOL, FIELD_STRING } field_type;

typedef struct {
  const char *config; /* struct tag in lynx.h */
  const char *name;
  lx_field id;
  field_type type;
  size_t offset; /* into lx_ir */
} field_desc;

_Static_assert(sizeof(lx_gpu) == sizeof(int), "enum fields are stored as int");

#define F(cfg, member, ident, type, path)                                                                    \
  { cfg, #member, ident, type, offsetof(lx_ir, path) }
static const field_desc fields[] = {
    F("lx_model", vocab, LX_F_VOCAB, FIELD_INT, model.vocab),
    F("lx_model", seq_len, LX_F_SEQ_LEN, FIELD_INT, model.seq_len),
    F("lx_model", layers, LX_F_LAYERS, FIELD_INT, model.layers),
    F("lx_model", hidden, LX_F_HIDDEN, FIELD_INT, model.hidden),
    F("lx_model", heads, LX_F_HEADS, FIELD_INT, model.heads),
    F("lx_model", kv_heads, LX_F_KV_HEADS, FIELD_INT, model.kv_heads),
    F("lx_model", ffn_hidden, LX_F_FFN_HIDDEN, FIELD_INT, model.ffn_hidden),
    F("lx_model", dropout, LX_F_DROPOUT, FIELD_DOUBLE, model.dropout),
    F("lx_model", rope_theta, LX_F_ROPE_THETA, FIELD_DOUBLE, model.rope_theta),
    F("lx_model", tied_embeddings, LX_F_TIED, FIELD_BOOL, model.tied_embeddings),
    F("lx_cluster", gpu, LX_F_GPU, FIELD_ENUM, cluster.gpu),
    F("lx_cluster", nodes, LX_F_NODES, FIELD_INT, cluster.nodes),
    F("lx_cluster", gpus_per_node, LX_F_GPUS_PER_NODE, FIELD_INT, cluster.gpus_per_node),
    F("lx_cluster", intra_node_link, LX_F_INTRA_LINK, FIELD_ENUM, cluster.intra_node_link),
    F("lx_cluster", inter_node_link, LX_F_INTER_LINK, FIELD_ENUM, cluster.inter_node_link),
    F("lx_parallel", tp, LX_F_TP, FIELD_INT, plan.tp),
    F("lx_parallel", pp, LX_F_PP, FIELD_INT, plan.pp),
    F("lx_parallel", dp, LX_F_DP, FIELD_INT, plan.dp),
    F("lx_parallel", micro_batch, LX_F_MICRO_BATCH, FIELD_INT, plan.micro_batch),
    F("lx_parallel", global_batch, LX_F_GLOBAL_BATCH, FIELD_INT, plan.global_batch),
    F("lx_parallel", schedule, LX_F_SCHEDULE, FIELD_ENUM, plan.schedule),
    F("lx_parallel", virtual_stages, LX_F_VIRTUAL_STAGES, FIELD_INT, plan.virtual_stages),
    F("lx_parallel", sequence_parallel, LX_F_SEQ_PARALLEL, FIELD_BOOL, plan.sequence_parallel),
    F("lx_parallel", zero, LX_F_ZERO, FIELD_BOOL, plan.zero),
    F("lx_parallel", mini_sequences, LX_F_MINI_SEQUENCES, FIELD_INT, plan.mini_sequences),
    F("lx_training", steps, LX_F_STEPS, FIELD_INT, training.steps),
    F("lx_training", lr, LX_F_LR, FIELD_DOUBLE, training.lr),
    F("lx_training", min_lr, LX_F_MIN_LR, FIELD_DOUBLE, training.min_lr),
    F("lx_training", warmup_steps, LX_F_WARMUP, FIELD_INT, training.warmup_steps),
    F("lx_training", lr_schedule, LX_F_LR_SCHEDULE, FIELD_ENUM, training.lr_schedule),
    F("lx_training", beta1, LX_F_BETA1, FIELD_DOUBLE, training.beta1),
    F("lx_training", beta2, LX_F_BETA2, FIELD_DOUBLE, training.beta2),
    F("lx_training", eps, LX_F_EPS, FIELD_DOUBLE, training.eps),
    F("lx_training", weight_decay, LX_F_WEIGHT_DECAY, FIELD_DOUBLE, training.weight_decay),
    F("lx_training", grad_clip, LX_F_GRAD_CLIP, FIELD_DOUBLE, training.grad_clip),
    F("lx_training", seed, LX_F_SEED, FIELD_INT, training.seed),
    F("lx_training", dtype, LX_F_DTYPE, FIELD_ENUM, training.dtype),
    F("lx_training", train_data, LX_F_TRAIN_DATA, FIELD_STRING, training.train_data),
    F("lx_training", val_data, LX_F_VAL_DATA, FIELD_STRING, training.val_data),
    F("lx_training", val_interval, LX_F_VAL_INTERVAL, FIELD_INT, training.val_interval),
    F("lx_training", checkpoint_interval, LX_F_CHECKPOINT_INTERVAL, FIELD_INT, training.checkpoint_interval),
    F("lx_training", lora_fa, LX_F_LORA_FA, FIELD_BOOL, training.lora_fa),
    F("lx_training", lora_dropout, LX_F_LORA_DROPOUT, FIELD_DOUBLE, training.lora_dropout),
};
#undef F

static const field_desc *find_field(const char *config, const char *name) {
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (!strcmp(fields[i].config, config) && !strcmp(fields[i].name, name)) return &fields[i];
  return NULL;
}

/* The enum an enumeration constant belongs to (in C the constant itself has
 * type int), or an invalid type when `expr` is not one. */
static CXType enum_of_constant(CXCursor expr) {
  CXCursor ref = clang_getCursorReferenced(lx_strip_wrappers(expr));
  if (clang_getCursorKind(ref) != CXCursor_EnumConstantDecl) return (CXType){.kind = CXType_Invalid};
  return clang_getCanonicalType(clang_getCursorType(clang_getCursorSemanticParent(ref)));
}

/* `.gpu = LINK_NVLINK3` would silently mean a GPU: an enum field takes the
 * constants of its own enum (or a plain integer, expect_enum_value). */
static bool expect_own_enum(lx_parse_ctx *ctx, CXCursor member, CXCursor value, const char *name) {
  CXType given = enum_of_constant(value);
  CXType wanted = clang_getCanonicalType(clang_getCursorType(clang_getCursorReferenced(member)));
  if (given.kind == CXType_Invalid || clang_equalTypes(given, wanted)) return true;
  CXString g = clang_getTypeSpelling(given), w = clang_getTypeSpelling(wanted);
  lx_error(lx_expr_start_loc(ctx, value), "field '%s' takes a constant of '%s', not of '%s'", name,
           clang_getCString(w), clang_getCString(g));
  clang_disposeString(g);
  clang_disposeString(w);
  return false;
}

/* The constants of an enum type, as "NAME (value), ..." into `list`;
 * `*found` set when one of them has the value `v`. */
typedef struct {
  long long v;
  bool found;
  char list[512];
} enum_constants;

static enum CXChildVisitResult collect_constant(CXCursor c, CXCursor parent, CXClientData data) {
  (void)parent;
  enum_constants *e = data;
  if (clang_getCursorKind(c) != CXCursor_EnumConstantDecl) return CXChildVisit_Continue;
  long long v = clang_getEnumConstantDeclValue(c);
  e->found |= v == e->v;
  CXString name = clang_getCursorSpelling(c);
  size_t used = strlen(e->list);
  snprintf(e->list + used, sizeof e->list - used, "%s%s (%lld)", used ? ", " : "", clang_getCString(name), v);
  clang_disposeString(name);
  return CXChildVisit_Continue;
}

/* `.gpu = 7` is legal C, but no GPU: an integer given to an enum field must
 * be one of its constants (the schedule's 0, "open", aside), and the error
 * lists them, from lynx.h itself. */
static bool expect_enum_value(lx_srcloc at, const field_desc *f, CXCursor member, long long v) {
  bool zero_is_open = f->id == LX_F_SCHEDULE; /* lynx.h: 0 (left out) means open */
  if (v == 0 && zero_is_open) return true;
  CXType wanted = clang_getCanonicalType(clang_getCursorType(clang_getCursorReferenced(member)));
  enum_constants e = {.v = v};
  clang_visitChildren(clang_getTypeDeclaration(wanted), collect_constant, &e);
  if (e.found) return true;
  CXString w = clang_getTypeSpelling(wanted);
  lx_error(at, "field '.%s' = %lld is not a constant of '%s': %s%s", f->name, v, clang_getCString(w), e.list,
           zero_is_open ? ", or 0 (open)" : "");
  clang_disposeString(w);
  return false;
}

/* The bytes of the string literal `value` is, its terminating NUL not
 * counted, or -1 where that is not known (not a literal of chars). */
static long long literal_length(CXCursor value) {
  CXCursor literal = lx_strip_wrappers(value);
  CXType type = clang_getCursorType(literal);
  if (clang_getCursorKind(literal) != CXCursor_StringLiteral || type.kind != CXType_ConstantArray ||
      clang_Type_getSizeOf(clang_getArrayElementType(type)) != 1)
    return -1;
  return clang_getArraySize(type) - 1;
}

/* A path with a NUL in it ("a\0b") would be cut there without a word, as
 * every C string is: refused like any other control character in a path
 * (config_values.c), which that check cannot see past the cut. */
static void store_string(lx_srcloc at, lx_srcloc field_at, const field_desc *f, CXCursor value, char *slot) {
  CXEvalResult r = clang_Cursor_Evaluate(value);
  if (!r || clang_EvalResult_getKind(r) != CXEval_StrLiteral)
    lx_error(at, "field '%s' must be a string literal", f->name);
  else {
    const char *text = clang_EvalResult_getAsStr(r);
    size_t length = strlen(text);
    if (literal_length(value) > (long long)length)
      lx_error(field_at, "field '.%s' holds control character 0x00 at byte %zu; a path may not", f->name,
               length + 1);
    else {
      char *copy = lx_strdup(text);
      memcpy(slot, &copy, sizeof copy);
    }
  }
  if (r) clang_EvalResult_dispose(r);
}

/* int, enum and bool fields: the value as written must fit the int the
 * prelude declares (C would convert it silently). */
static void store_integer(lx_srcloc at, const field_desc *f, long long v, char *slot) {
  if (f->type == FIELD_BOOL) {
    bool b = v != 0;
    memcpy(slot, &b, sizeof b);
  } else if (v < INT_MIN || v > INT_MAX) {
    lx_error(at, "field '%s' = %lld does not fit in an int", f->name, v);
  } else {
    int i = (int)v;
    memcpy(slot, &i, sizeof i);
  }
}

static void store_field(lx_parse_ctx *ctx, const field_desc *f, CXCursor member, CXCursor value) {
  char *slot = (char *)ctx->ir + f->offset;
  bool integral = f->type == FIELD_INT || f->type == FIELD_ENUM || f->type == FIELD_BOOL;
  char what[80];
  snprintf(what, sizeof what, "field '%s'", f->name);
  if (integral && !lx_expect_integer(ctx, value, what)) return;
  if (f->type == FIELD_ENUM && !expect_own_enum(ctx, member, value, f->name)) return;
  lx_srcloc at = lx_expr_start_loc(ctx, value);
  lx_constant number;
  if (f->type == FIELD_STRING)
    store_string(at, ctx->ir->locs.field[f->id], f, value, slot);
  else if (!lx_number_of(ctx, value, what, &number))
    return;
  else if (f->type == FIELD_DOUBLE)
    memcpy(slot, &number.real, sizeof number.real);
  else if (f->type == FIELD_ENUM && !expect_enum_value(at, f, member, number.integer))
    return;
  else
    store_integer(at, f, number.integer, slot);
}

void lx_parse_config(lx_parse_ctx *ctx, CXCursor var, const char *config, lx_srcloc *seen) {
  lx_srcloc here = lx_cursor_loc(ctx, var);
  if (seen->line) {
    lx_error(here, "second 'struct %s' configuration (the first is at line %d)", config, seen->line);
    lx_note(*seen, "the first 'struct %s' configuration", config);
    return;
  }
  *seen = here;
  lx_children kids = lx_children_of(var);
  CXCursor init = clang_getNullCursor();
  for (int i = 0; i < kids.count; i++)
    if (clang_getCursorKind(kids.items[i]) == CXCursor_InitListExpr) init = kids.items[i];
  if (clang_Cursor_isNull(init)) {
    lx_error(here, "'struct %s' configuration needs an initializer { .field = value, ... }", config);
    return;
  }
  lx_children entries = lx_children_of(init);
  for (int i = 0; i < entries.count; i++) {
    lx_children parts = lx_children_of(entries.items[i]);
    if (parts.count != 2 || clang_getCursorKind(parts.items[0]) != CXCursor_MemberRef) {
      lx_error(lx_cursor_loc(ctx, entries.items[i]),
               "configuration values must be designated initializers (.field = value)");
      continue;
    }
    char name[64];
    lx_copy_spelling(name, sizeof name, clang_getCursorSpelling(parts.items[0]));
    const field_desc *f = find_field(config, name);
    if (!f) { /* a field of lynx.h that lynxgen does not know is a prelude bug */
      lx_error(lx_cursor_loc(ctx, parts.items[0]), "field '%s' is not supported", name);
      continue;
    }
    lx_srcloc *field_loc = &ctx->ir->locs.field[f->id];
    if (field_loc->line) {
      lx_error(lx_cursor_loc(ctx, parts.items[0]), "field '%s' is given twice", name);
      lx_note(*field_loc, "the first '.%s'", name);
      continue;
    }
    *field_loc = lx_cursor_loc(ctx, parts.items[0]);
    store_field(ctx, f, parts.items[0], parts.items[1]);
  }
}

/* ---- op graphs ----------------------------------------------------------- */