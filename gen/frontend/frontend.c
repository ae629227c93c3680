/* frontend.c — the model file to IR, through libclang.
 *
 * libclang parses the model file (C11, with the prelude ir/lynx.h handed over
 * from memory) and type-checks it; this pass then reads three things off the
 * AST: the designated-initializer configs, and the bodies of prologue(),
 * block() and epilogue(), each a straight line of tensor assignments that
 * becomes an op graph (configs.c reads the configs). Constant arguments are
 * folded by clang_Cursor_Evaluate.
 * Nothing here judges values or shapes: gen/analysis/analyze.c does. */
#define _POSIX_C_SOURCE 200809L
#include "frontend/frontend.h"

#include <clang-c/Index.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "diag.h"
#include "frontend/configs.h"
#include "frontend/cursor.h"
#include "frontend/model_file.h"
#include "op_signature.h"


typedef struct {
  const char *name;
  lx_op_kind kind;
  int tensor_args, int_args;
  const char *int_names[2];
  lx_attention_impl impl;
  bool bias;
} operator_desc;

static const operator_desc operators[] = {
    {"embedding", LX_OP_EMBEDDING, 1, 2, {"vocab", "width"}, 0, false},
    {"position_embedding", LX_OP_POSITION_EMBEDDING, 1, 1, {"width"}, 0, false},
    {"layernorm", LX_OP_LAYERNORM, 1, 0, {0}, 0, true},
    {"rmsnorm", LX_OP_RMSNORM, 1, 0, {0}, 0, false},
    {"linear", LX_OP_LINEAR, 1, 1, {"out_width"}, 0, true},
    {"linear_nobias", LX_OP_LINEAR, 1, 1, {"out_width"}, 0, false},
    {"attention", LX_OP_ATTENTION, 1, 2, {"heads", "kv_heads"}, LX_ATTN_MATERIALIZED, false},
    {"flash_attention", LX_OP_ATTENTION, 1, 2, {"heads", "kv_heads"}, LX_ATTN_FLASH, false},
    {"rope", LX_OP_ROPE, 1, 2, {"heads", "kv_heads"}, 0, false},
    {"swiglu", LX_OP_SWIGLU, 1, 0, {0}, 0, false},
    {"dropout", LX_OP_DROPOUT, 1, 0, {0}, 0, false},
    {"add", LX_OP_ADD, 2, 0, {0}, 0, false},
    {"lm_head", LX_OP_LM_HEAD, 1, 1, {"vocab"}, 0, false},
    {"cross_entropy", LX_OP_CROSS_ENTROPY, 2, 0, {0}, 0, false},
};

/* lora(linear(...), rank, alpha) is no op of its own: it gives the linear its adapters. */
static const operator_desc lora_desc = {"lora", LX_OP_LINEAR, 1, 2, {"rank", "alpha"}, 0, false};

/* The operator called `name`: one of the table above, or an element-wise op
 * of the operand table (one tensor in, one out; op_signature.h). */
static bool find_operator(const char *name, operator_desc *out) {
  for (size_t i = 0; i < sizeof operators / sizeof operators[0]; i++)
    if (!strcmp(operators[i].name, name)) {
      *out = operators[i];
      return true;
    }
  lx_op_kind kind = lx_elementwise_kind(name);
  *out = (operator_desc){lx_op_kind_name(kind), kind, 1, 0, {0}, 0, false};
  return kind != LX_OP_KIND_COUNT;
}

enum { MAX_VARS = 256 };

/* A variable whose defining expression had an error is not "undefined": its
 * uses must stay quiet, or one mistake would be reported at every later use. */
enum { VAR_UNDEFINED = -1, VAR_FAILED = -2 };

/* The tensor variables of one function: declaration -> op holding its value.
 * Variables are told apart by their declarations, not their names, which
 * may be longer than any buffer (and are kept only for messages). */
typedef struct {
  lx_parse_ctx *ctx;
  lx_graph *graph;
  struct {
    CXCursor decl;
    char name[64];
    int op; /* VAR_UNDEFINED, VAR_FAILED, or the op holding its value */
  } vars[MAX_VARS];
  int n_vars;
  bool returned;
} function_ctx;

/* The variable a DeclRefExpr names, or -1. */
static int find_var(function_ctx *fn, CXCursor ref) {
  CXCursor decl = clang_getCursorReferenced(ref);
  for (int i = fn->n_vars - 1; i >= 0; i--)
    if (clang_equalCursors(fn->vars[i].decl, decl)) return i;
  return -1;
}

static int declare_var(function_ctx *fn, CXCursor decl) {
  char name[64];
  lx_copy_spelling(name, sizeof name, clang_getCursorSpelling(decl));
  if (fn->n_vars == MAX_VARS) {
    lx_error(lx_cursor_loc(fn->ctx, decl), "more than %d tensor variables in one function", MAX_VARS);
    return -1;
  }
  int v = fn->n_vars++;
  fn->vars[v].decl = decl;
  snprintf(fn->vars[v].name, sizeof fn->vars[v].name, "%s", name);
  fn->vars[v].op = VAR_UNDEFINED;
  return v;
}

static bool is_tensor_type(CXType t) {
  CXString s = clang_getTypeSpelling(t);
  bool yes = !strcmp(clang_getCString(s), "tensor");
  clang_disposeString(s);
  return yes;
}

static int eval_tensor(function_ctx *fn, CXCursor expr);

/* The type an argument had before the implicit conversion to the parameter's
 * type: clang converts 64.0 to int silently, so the value alone cannot tell. */
static bool eval_int_arg(function_ctx *fn, CXCursor arg, const operator_desc *od, int i, int *value) {
  lx_srcloc at = lx_expr_start_loc(fn->ctx, arg);
  const char *arg_name = od->int_names[i];
  char what[96];
  snprintf(what, sizeof what, "argument '%s' of %s()", arg_name, od->name);
  lx_constant number;
  if (!lx_expect_integer(fn->ctx, arg, what) || !lx_number_of(fn->ctx, arg, what, &number)) return false;
  long long v = number.integer;
  if (v < 1 || v > (1LL << 24)) { /* the largest width is a vocabulary (gen/analysis/analyze.c, check_int_ranges) */
    lx_error(at, "argument '%s' of %s() must be between 1 and 2^24, got %lld", arg_name, od->name, v);
    return false;
  }
  *value = (int)v;
  return true;
}

static void set_int_attr(lx_op *op, int i, int value) {
  switch (op->kind) {
  case LX_OP_EMBEDDING:
    if (i == 0)
      op->table_rows = value;
    else
      op->out_width = value;
    break;
  case LX_OP_ATTENTION:
  case LX_OP_ROPE:
    if (i == 0)
      op->heads = value;
    else
      op->kv_heads = value;
    break;
  default: op->out_width = value; break;
  }
}

static bool is_call_of(CXCursor expr, const char *a, const char *b) {
  if (clang_getCursorKind(expr) != CXCursor_CallExpr) return false;
  char callee[64];
  lx_copy_spelling(callee, sizeof callee, clang_getCursorSpelling(expr));
  return !strcmp(callee, a) || !strcmp(callee, b);
}

/* lora(linear(x, n), rank, alpha): the linear, written in the call itself so
 * that no other op reads its output without the adapter, gets rank and alpha. */
static int eval_lora(function_ctx *fn, CXCursor call, lx_srcloc at) {
  if (clang_Cursor_getNumArguments(call) != 3) {
    lx_error(at, "lora() takes 3 arguments, got %d", clang_Cursor_getNumArguments(call));
    return -1;
  }
  CXCursor target = lx_strip_wrappers(clang_Cursor_getArgument(call, 0));
  if (!is_call_of(target, "linear", "linear_nobias")) {
    lx_error(lx_expr_start_loc(fn->ctx, target),
             "lora() adapts a linear: its first argument must be a call of linear() or linear_nobias()");
    return -1;
  }
  int ints[2], op = eval_tensor(fn, target);
  for (int i = 0; i < 2; i++)
    if (!eval_int_arg(fn, clang_Cursor_getArgument(call, (unsigned)(i + 1)), &lora_desc, i, &ints[i]))
      return -1;
  if (op < 0) return -1;
  fn->graph->ops[op].lora_rank = ints[0];
  fn->graph->ops[op].lora_alpha = ints[1];
  return op;
}

static int eval_call(function_ctx *fn, CXCursor call) {
  char callee[64];
  lx_copy_spelling(callee, sizeof callee, clang_getCursorSpelling(call));
  lx_srcloc at = lx_cursor_loc(fn->ctx, call);
  if (!strcmp(callee, "lora")) return eval_lora(fn, call, at);
  operator_desc found;
  const operator_desc *od = &found;
  if (!find_operator(callee, &found)) {
    lx_error(at, "unknown operator '%s' (the operators are declared in lynx.h)", callee);
    return -1;
  }
  int nargs = clang_Cursor_getNumArguments(call);
  if (nargs != od->tensor_args + od->int_args) {
    lx_error(at, "%s() takes %d arguments, got %d", od->name, od->tensor_args + od->int_args, nargs);
    return -1;
  }
  int inputs[LX_MAX_OP_INPUTS];
  for (int i = 0; i < od->tensor_args; i++)
    if ((inputs[i] = eval_tensor(fn, clang_Cursor_getArgument(call, (unsigned)i))) < 0) return -1;
  int ints[2] = {0, 0};
  for (int i = 0; i < od->int_args; i++)
    if (!eval_int_arg(fn, clang_Cursor_getArgument(call, (unsigned)(od->tensor_args + i)), od, i, &ints[i]))
      return -1;
  lx_op *op = lx_graph_add(fn->graph, od->kind);
  op->src = at;
  op->n_inputs = od->tensor_args;
  memcpy(op->inputs, inputs, sizeof(int) * (size_t)od->tensor_args);
  for (int i = 0; i < od->int_args; i++)
    set_int_attr(op, i, ints[i]);
  op->attention_impl = od->impl;
  op->has_bias = od->bias;
  return fn->graph->n_ops - 1;
}

/* The op an expression of type tensor evaluates to, or -1 after an error. */
static int eval_tensor(function_ctx *fn, CXCursor expr) {
  CXCursor e = lx_strip_wrappers(expr);
  switch (clang_getCursorKind(e)) {
  case CXCursor_CallExpr: return eval_call(fn, e);
  case CXCursor_DeclRefExpr: {
    char name[64];
    lx_copy_spelling(name, sizeof name, clang_getCursorSpelling(e));
    int v = find_var(fn, e);
    if (v < 0) {
      lx_error(lx_cursor_loc(fn->ctx, e), "'%s' is not a tensor of this function", name);
      return -1;
    }
    if (fn->vars[v].op == VAR_UNDEFINED)
      lx_error(lx_cursor_loc(fn->ctx, e), "tensor '%s' is used before it is defined", name);
    return fn->vars[v].op < 0 ? -1 : fn->vars[v].op;
  }
  default:
    lx_error(lx_cursor_loc(fn->ctx, e), "expected a tensor (a variable or an operator call) here");
    return -1;
  }
}

static void assign(function_ctx *fn, int var, int op) {
  fn->vars[var].op = op < 0 ? VAR_FAILED : op;
  if (op < 0) return;
  lx_op *o = &fn->graph->ops[op];
  if (!o->var[0]) snprintf(o->var, sizeof o->var, "%s", fn->vars[var].name);
}

static void parse_decl_stmt(function_ctx *fn, CXCursor stmt) {
  lx_children decls = lx_children_of(stmt);
  for (int i = 0; i < decls.count; i++) {
    CXCursor d = decls.items[i];
    if (clang_getCursorKind(d) != CXCursor_VarDecl || !is_tensor_type(clang_getCursorType(d))) {
      lx_error(lx_cursor_loc(fn->ctx, d),
               "only tensor variables may be declared in a model function (use #define or enum "
               "for constants)");
      continue;
    }
    int v = declare_var(fn, d);
    if (v < 0) continue;
    lx_children parts = lx_children_of(d);
    for (int j = 0; j < parts.count; j++)
      if (clang_getCursorKind(parts.items[j]) != CXCursor_TypeRef)
        assign(fn, v, eval_tensor(fn, parts.items[j]));
  }
}

/* `name = expr;` is the only binary operator a model function may use. */
static bool is_plain_assignment(function_ctx *fn, CXCursor op, CXCursor lhs) {
  CXSourceRange lhs_range = clang_getCursorExtent(lhs);
  CXToken *tokens;
  unsigned n;
  clang_tokenize(fn->ctx->tu, clang_getCursorExtent(op), &tokens, &n);
  unsigned lhs_end = clang_getRangeEnd(lhs_range).int_data;
  bool yes = false;
  for (unsigned i = 0; i < n; i++) {
    CXSourceLocation at = clang_getTokenLocation(fn->ctx->tu, tokens[i]);
    if (at.int_data < lhs_end) continue;
    CXString s = clang_getTokenSpelling(fn->ctx->tu, tokens[i]);
    yes = !strcmp(clang_getCString(s), "=");
    clang_disposeString(s);
    break;
  }
  clang_disposeTokens(fn->ctx->tu, tokens, n);
  return yes;
}

static void parse_assignment(function_ctx *fn, CXCursor stmt) {
  lx_children parts = lx_children_of(stmt);
  CXCursor lhs = parts.count == 2 ? lx_strip_wrappers(parts.items[0]) : clang_getNullCursor();
  if (clang_Cursor_isNull(lhs) || clang_getCursorKind(lhs) != CXCursor_DeclRefExpr ||
      !is_plain_assignment(fn, stmt, parts.items[0])) {
    lx_error(lx_cursor_loc(fn->ctx, stmt), "expected an assignment 'tensor_name = operator(...)'");
    return;
  }
  char name[64];
  lx_copy_spelling(name, sizeof name, clang_getCursorSpelling(lhs));
  int v = find_var(fn, lhs);
  if (v < 0) {
    lx_error(lx_cursor_loc(fn->ctx, lhs), "'%s' is not a tensor of this function", name);
    return;
  }
  assign(fn, v, eval_tensor(fn, parts.items[1]));
}

static void parse_statement(function_ctx *fn, CXCursor stmt) {
  lx_srcloc at = lx_cursor_loc(fn->ctx, stmt);
  if (fn->returned) {
    lx_error(at, "statement after return");
    return;
  }
  switch (clang_getCursorKind(stmt)) {
  case CXCursor_DeclStmt: parse_decl_stmt(fn, stmt); break;
  case CXCursor_BinaryOperator: parse_assignment(fn, stmt); break;
  case CXCursor_NullStmt: break;
  case CXCursor_ReturnStmt: {
    lx_children parts = lx_children_of(stmt);
    fn->returned = true;
    if (parts.count != 1) {
      lx_error(at, "%s() must return a tensor", fn->graph->name);
      break;
    }
    fn->graph->output = eval_tensor(fn, parts.items[0]);
    fn->graph->returned_at = at;
    break;
  }
  case CXCursor_CallExpr: lx_error(at, "the result of this operator call is not used"); break;
  default: lx_error(at, "only tensor declarations, assignments and return are allowed in a model function");
  }
}

typedef struct {
  const char *name;
  int params;
  const char *signature;
  int max_ops; /* 0: any number */
} function_desc;

static const function_desc model_functions[] = {
    {"prologue", 1, "tensor prologue(tensor tokens)", 0},
    {"block", 1, "tensor block(tensor x)", LX_MAX_BLOCK_OPS},
    {"epilogue", 2, "tensor epilogue(tensor x, tensor targets)", 0},
};

static lx_graph *graph_named(lx_ir *ir, const char *name) {
  if (!strcmp(name, "prologue")) return &ir->prologue;
  if (!strcmp(name, "block")) return &ir->block;
  return &ir->epilogue;
}

static void parse_function(lx_parse_ctx *ctx, CXCursor fn_cursor, const function_desc *desc) {
  lx_graph *g = graph_named(ctx->ir, desc->name);
  lx_srcloc at = lx_cursor_loc(ctx, fn_cursor);
  if (g->src.line) {
    lx_error(at, "second definition of %s() (the first is at line %d)", desc->name, g->src.line);
    lx_note(g->src, "the first definition of %s()", desc->name);
    return;
  }
  g->src = at;
  function_ctx *fn = lx_calloc(1, sizeof *fn);
  fn->ctx = ctx;
  fn->graph = g;
  int n_params = clang_Cursor_getNumArguments(fn_cursor);
  bool params_ok = n_params == desc->params && is_tensor_type(clang_getCursorResultType(fn_cursor));
  for (int i = 0; params_ok && i < n_params; i++)
    params_ok = is_tensor_type(clang_getCursorType(clang_Cursor_getArgument(fn_cursor, (unsigned)i)));
  if (!params_ok) {
    lx_error(at, "%s() must be declared as '%s'", desc->name, desc->signature);
    free(fn);
    return;
  }
  for (int i = 0; i < n_params; i++) {
    CXCursor param = clang_Cursor_getArgument(fn_cursor, (unsigned)i);
    int v = declare_var(fn, param);
    lx_op *input = lx_graph_add(g, LX_OP_INPUT);
    input->src = lx_cursor_loc(ctx, param);
    input->param = i;
    assign(fn, v, g->n_ops - 1);
  }
  lx_children kids = lx_children_of(fn_cursor);
  bool too_long = false;
  for (int i = 0; i < kids.count; i++) {
    if (clang_getCursorKind(kids.items[i]) != CXCursor_CompoundStmt) continue;
    lx_children body = lx_children_of(kids.items[i]);
    for (int j = 0; j < body.count; j++)
      parse_statement(fn, body.items[j]);
    if (body.count == LX_MAX_CHILDREN) {
      lx_error(at, "%s() has more than %d statements", desc->name, LX_MAX_CHILDREN - 1);
      fn->returned = true; /* its return is among those not read */
      too_long = true;
    }
  }
  if (!fn->returned) lx_error(at, "%s() must end with 'return <tensor>;'", desc->name);
  if (!too_long && desc->max_ops && g->n_ops > desc->max_ops)
    lx_error(g->ops[desc->max_ops].src,
             "%s() holds %d ops, its parameters included; at most %d fit the recompute planner: "
             "move ops to prologue() or epilogue()",
             desc->name, g->n_ops, desc->max_ops);
  free(fn);
}

/* ---- top level ----------------------------------------------------------- */

/* Every declaration of the translation unit counts, the model file's and
 * those of the headers it includes alike (a header may hold a configuration;
 * it must not be ignored). The prelude declares no variable and defines no
 * function, so nothing of it is visited here. */
static enum CXChildVisitResult visit_top_level(CXCursor c, CXCursor parent, CXClientData data) {
  (void)parent;
  lx_parse_ctx *ctx = data;
  lx_ir *ir = ctx->ir;
  enum CXCursorKind kind = clang_getCursorKind(c);
  if (kind == CXCursor_VarDecl) {
    char tag[64];
    lx_struct_tag_of(c, tag, sizeof tag);
    if (!strcmp(tag, "lx_model"))
      lx_parse_config(ctx, c, tag, &ir->locs.model);
    else if (!strcmp(tag, "lx_cluster"))
      lx_parse_config(ctx, c, tag, &ir->locs.cluster);
    else if (!strcmp(tag, "lx_parallel"))
      lx_parse_config(ctx, c, tag, &ir->locs.plan);
    else if (!strcmp(tag, "lx_training"))
      lx_parse_config(ctx, c, tag, &ir->locs.training);
    else
      lx_error(lx_cursor_loc(ctx, c), "only lx_model, lx_cluster, lx_parallel and lx_training configurations "
                                   "may be declared at file scope");
  } else if (kind == CXCursor_FunctionDecl && clang_isCursorDefinition(c)) {
    char name[64];
    lx_copy_spelling(name, sizeof name, clang_getCursorSpelling(c));
    for (size_t i = 0; i < sizeof model_functions / sizeof model_functions[0]; i++)
      if (!strcmp(name, model_functions[i].name)) {
        parse_function(ctx, c, &model_functions[i]);
        return CXChildVisit_Continue;
      }
    lx_error(lx_cursor_loc(ctx, c), "function '%s' is not part of a model (define prologue, block and epilogue)",
             name);
  }
  return CXChildVisit_Continue;
}

/* The first token of a source range, e.g. the operator named by a call. */
static void first_token_of(lx_parse_ctx *ctx, CXSourceRange range, char *dst, size_t size) {
  CXToken *tokens;
  unsigned n;
  clang_tokenize(ctx->tu, range, &tokens, &n);
  dst[0] = '\0';
  if (n > 0) lx_copy_spelling(dst, size, clang_getTokenSpelling(ctx->tu, tokens[0]));
  clang_disposeTokens(ctx->tu, tokens, n);
}

/* clang says "too few arguments to function call, expected 2, have 1" at the
 * closing parenthesis; the user wants to know which operator, so the error
 * names it and points at it (the diagnostic's first range is the callee).
 * An operator of one argument has its own wordings, for none ("single
 * argument 'x' was not specified") and for more ("expected single argument
 * 'x', have 2 arguments"). */
static bool report_argument_count(lx_parse_ctx *ctx, CXDiagnostic d, const char *text) {
  int expected = 0, have = 0;
  bool counted =
      sscanf(text, "too %*s arguments to function call, expected %d, have %d", &expected, &have) == 2 ||
      sscanf(text, "too many arguments to function call, expected single argument '%*[^']', have %d",
             &have) == 1;
  if (counted && !expected) expected = 1;
  bool single = !counted && strstr(text, "too few arguments to function call, single argument") == text;
  if ((!counted && !single) || clang_getDiagnosticNumRanges(d) == 0) return false;
  if (single) expected = 1, have = 0;
  CXSourceRange callee = clang_getDiagnosticRange(d, 0);
  char name[64];
  first_token_of(ctx, callee, name, sizeof name);
  if (!name[0]) return false;
  lx_error(lx_location_at(ctx, clang_getRangeStart(callee)), "%s() takes %d argument%s, got %d", name, expected,
           expected == 1 ? "" : "s", have);
  return true;
}

/* Whether the translation unit read the prelude, directly or through another header. */
static void note_prelude(CXFile included, CXSourceLocation *stack, unsigned depth, CXClientData seen) {
  (void)stack, (void)depth;
  CXString name = clang_getFileName(included);
  const char *s = clang_getCString(name);
  if (s && !strcmp(s, LX_PRELUDE_PATH)) *(bool *)seen = true;
  clang_disposeString(name);
}

static bool has_errors(CXTranslationUnit tu) {
  bool found = false;
  for (unsigned i = 0; i < clang_getNumDiagnostics(tu) && !found; i++) {
    CXDiagnostic d = clang_getDiagnostic(tu, i);
    found = clang_getDiagnosticSeverity(d) >= CXDiagnostic_Error;
    clang_disposeDiagnostic(d);
  }
  return found;
}

static bool includes_prelude(lx_parse_ctx *ctx) {
  bool seen = false;
  clang_getInclusions(ctx->tu, note_prelude, &seen);
  return seen;
}

/* clang's own errors (syntax, types, undeclared names), located. An unknown
 * operator is implicitly declared to return int, which clang then reports
 * again as an int passed for a tensor on the same line (at the call, or at
 * the variable it initialises): that echo is dropped. */
static int report_clang_errors(lx_parse_ctx *ctx) {
  int errors = 0;
  lx_srcloc unknown_operator_at = {NULL, 0, 0, NULL};
  unsigned n = clang_getNumDiagnostics(ctx->tu);
  if (has_errors(ctx->tu) &&
      !includes_prelude(ctx)) { /* every name of lynx.h is then an error of its own: say why once */
    lx_error(lx_file_start(ctx),
             "the model does not include <lynx.h>, which declares its configuration "
             "structs, 'tensor' and the operators: make '#include <lynx.h>' its first line");
    return 1;
  }
  for (unsigned i = 0; i < n; i++) {
    CXDiagnostic d = clang_getDiagnostic(ctx->tu, i);
    if (clang_getDiagnosticSeverity(d) >= CXDiagnostic_Error) {
      CXString msg = clang_getDiagnosticSpelling(d);
      const char *text = clang_getCString(msg);
      lx_srcloc at = lx_srcloc_of_diagnostic(&ctx->locator, d);
      if (at.line == 0) at = lx_file_start(ctx); /* e.g. "too many errors emitted" */
      bool echo = at.line == unknown_operator_at.line && at.file == unknown_operator_at.file &&
                  strstr(text, "incompatible integer to pointer conversion") == text;
      char name[64];
      if (echo) {
        /* already reported as the unknown operator */
      } else if (sscanf(text, "call to undeclared function '%63[^']'", name) == 1) {
        lx_error(at, "unknown operator '%s' (the operators are declared in lynx.h)", name);
        unknown_operator_at = at;
      } else if (!report_argument_count(ctx, d, text)) {
        lx_error(at, "%s", text);
      }
      clang_disposeString(msg);
      errors++;
    }
    clang_disposeDiagnostic(d);
  }
  return errors;
}

static void require_definitions(lx_parse_ctx *ctx) {
  lx_ir *ir = ctx->ir;
  if (!ir->locs.model.line)
    lx_error(lx_file_start(ctx), "missing model configuration 'static const struct lx_model model = {...};'");
  if (!ir->locs.cluster.line)
    lx_error(lx_file_start(ctx),
             "missing cluster configuration 'static const struct lx_cluster cluster = {...};'");
  if (!ir->locs.plan.line)
    lx_error(lx_file_start(ctx), "missing parallel plan 'static const struct lx_parallel parallel = {...};'");
  for (size_t i = 0; i < sizeof model_functions / sizeof model_functions[0]; i++)
    if (!graph_named(ir, model_functions[i].name)->src.line)
      lx_error(lx_file_start(ctx), "missing function '%s'", model_functions[i].signature);
}

/* A dropout of probability 0 is its input: its readers read that instead, it
 * leaves the graph, and what it was assigned to names its input when that
 * has no name of its own (so the programs run no copy for it). */
static void fold_dropout(lx_graph *g, int d) {
  int input = g->ops[d].inputs[0];
  if (!g->ops[input].var[0]) memcpy(g->ops[input].var, g->ops[d].var, sizeof g->ops[d].var);
  if (g->output == d) g->output = input;
  if (g->output > d) g->output--;
  for (int i = d + 1; i < g->n_ops; i++) {
    for (int k = 0; k < g->ops[i].n_inputs; k++)
      g->ops[i].inputs[k] =
          g->ops[i].inputs[k] == d ? input : g->ops[i].inputs[k] - (g->ops[i].inputs[k] > d);
    g->ops[i - 1] = g->ops[i];
  }
  g->n_ops--;
}

static void fold_identity_dropouts(lx_ir *ir) {
  if (ir->model.dropout != 0) return;
  lx_graph *graphs[] = {&ir->prologue, &ir->block, &ir->epilogue};
  for (size_t k = 0; k < sizeof graphs / sizeof graphs[0]; k++)
    for (int i = graphs[k]->n_ops - 1; i >= 0; i--)
      if (graphs[k]->ops[i].kind == LX_OP_DROPOUT) fold_dropout(graphs[k], i);
}

int lx_parse_model(const char *path, const char *contents, size_t length, lx_ir *ir) {
  int errors_before = lx_error_count();
  free(ir->model_path);
  ir->model_path = lx_strdup(path);
  char *owned = lx_load_model_source(ir->model_path, contents, &length);
  if (!owned) return 1;
  contents = owned;
  /* A model file that is not NUL-free C is rejected by clang; libclang wants
   * lengths, not terminators, so embedded NULs are passed through as is. */
  struct CXUnsavedFile files[2] = {
      {LX_PRELUDE_PATH, lx_prelude_text, lx_prelude_length},
      {path, contents, (unsigned long)length},
  };
  const char *args[] = {"-x",
                        "c",
                        "-std=c11",
                        ("-I" LX_PRELUDE_DIR),
                        "-nostdinc",
                        "-Werror=implicit-function-declaration",
                        "-Werror=int-conversion",
                        "-Werror=literal-conversion",
                        "-Werror=float-conversion",
                        "-Werror=incompatible-pointer-types",
                        "-fspell-checking", /* libclang's default is off: "did you mean 'GPU_A100_80GB'?" */
                        LX_NUMBER_ERRORS};
  CXIndex index = clang_createIndex(0, 0);
  lx_parse_ctx ctx = {.ir = ir};
  /* the detailed preprocessing record finds the macro behind a location */
  enum CXErrorCode rc = clang_parseTranslationUnit2(
      index, path, args, sizeof args / sizeof args[0], files, 2,
      CXTranslationUnit_KeepGoing | CXTranslationUnit_DetailedPreprocessingRecord, &ctx.tu);
  if (rc == CXError_Success) lx_locator_init(&ctx.locator, ir, ctx.tu);
  if (rc != CXError_Success) {
    lx_error((lx_srcloc){ir->model_path, 1, 1, NULL}, "libclang could not parse the file (error %d)",
             (int)rc);
  } else if (report_clang_errors(&ctx) == 0) {
    clang_visitChildren(clang_getTranslationUnitCursor(ctx.tu), visit_top_level, &ctx);
    require_definitions(&ctx);
    if (lx_error_count() == errors_before) fold_identity_dropouts(ir);
  }
  lx_locator_free(&ctx.locator);
  if (ctx.tu) clang_disposeTranslationUnit(ctx.tu);
  clang_disposeIndex(index);
  free(owned);
  return lx_error_count() - errors_before;
}
