/* cursor.c — locations, children and numbers of libclang cursors (cursor.h). */
#include "frontend/cursor.h"

#include <stdio.h>

lx_srcloc lx_location_at(lx_parse_ctx *ctx, CXSourceLocation where) {
  return lx_srcloc_at(&ctx->locator, where);
}

lx_srcloc lx_cursor_loc(lx_parse_ctx *ctx, CXCursor c) {
  return lx_location_at(ctx, clang_getCursorLocation(c));
}

lx_srcloc lx_file_start(lx_parse_ctx *ctx) { return (lx_srcloc){ctx->ir->model_path, 1, 1, NULL}; }

void lx_copy_spelling(char *dst, size_t size, CXString s) {
  snprintf(dst, size, "%s", clang_getCString(s));
  clang_disposeString(s);
}

static enum CXChildVisitResult collect_child(CXCursor c, CXCursor parent, CXClientData data) {
  (void)parent;
  lx_children *kids = data;
  if (kids->count < LX_MAX_CHILDREN) kids->items[kids->count++] = c;
  return CXChildVisit_Continue;
}

lx_children lx_children_of(CXCursor c) {
  lx_children kids = {.count = 0};
  clang_visitChildren(c, collect_child, &kids);
  return kids;
}

/* Implicit casts and parentheses show up as single-child wrappers. */
CXCursor lx_strip_wrappers(CXCursor c) {
  for (;;) {
    enum CXCursorKind k = clang_getCursorKind(c);
    if (k != CXCursor_UnexposedExpr && k != CXCursor_ParenExpr) return c;
    lx_children kids = lx_children_of(c);
    if (kids.count != 1) return c;
    c = kids.items[0];
  }
}

/* The type an expression had before its implicit conversion to the type of
 * the parameter or field it initializes: clang converts 64.0 to int silently,
 * so the folded value alone cannot tell a float from an integer. */
CXType lx_written_type(CXCursor expr) {
  return clang_getCanonicalType(clang_getCursorType(lx_strip_wrappers(expr)));
}

bool lx_is_integer_type(CXType t) {
  return t.kind == CXType_Enum || (t.kind >= CXType_Bool && t.kind <= CXType_Int128);
}

/* An expression is located where it starts: the cursor location of `3 * W`
 * is its operator and that of `model.hidden` its member name. */
lx_srcloc lx_expr_start_loc(lx_parse_ctx *ctx, CXCursor expr) {
  return lx_location_at(ctx, clang_getRangeStart(clang_getCursorExtent(expr)));
}

/* Reports a value that is not an integer where one is needed; true if it is. */
bool lx_expect_integer(lx_parse_ctx *ctx, CXCursor expr, const char *what) {
  CXType type = lx_written_type(expr);
  if (lx_is_integer_type(type)) return true;
  CXString spelling = clang_getTypeSpelling(type);
  lx_error(lx_expr_start_loc(ctx, expr), "%s must be an integer, not a value of type '%s'", what,
           clang_getCString(spelling));
  clang_disposeString(spelling);
  return false;
}

/* The checked value of the number `expr` (lx_written_type says whether an
 * integer is expected); reports what is wrong with it and returns false. */
bool lx_number_of(lx_parse_ctx *ctx, CXCursor expr, const char *what, lx_constant *value) {
  *value = lx_evaluate_constant(lx_strip_wrappers(expr));
  lx_srcloc at = lx_expr_start_loc(ctx, expr);
  bool integer = lx_is_integer_type(lx_written_type(expr));
  switch (value->kind) {
  case LX_CONSTANT_INTEGER:
  case LX_CONSTANT_REAL: return true;
  case LX_CONSTANT_NONE:
    lx_error(at, "%s must be %s", what,
             integer ? "an integer constant expression" : "a constant numeric expression");
    return false;
  case LX_CONSTANT_WRAPS:
    lx_error(lx_cursor_loc(ctx, value->at), "overflow in %s: %s", what, value->why);
    return false;
  case LX_CONSTANT_HUGE: lx_error(at, "%s is too large: %s", what, value->why); return false;
  case LX_CONSTANT_NOT_FINITE:
    lx_error(at, "%s = %g is not a finite number", what, value->real);
    return false;
  }
  return false;
}

/* The struct tag of a variable's type, e.g. "lx_model", or "" for others. */
void lx_struct_tag_of(CXCursor var, char *tag, size_t size) {
  CXType t = clang_getCanonicalType(clang_getCursorType(var));
  tag[0] = '\0';
  if (t.kind == CXType_Record)
    lx_copy_spelling(tag, size, clang_getCursorSpelling(clang_getTypeDeclaration(t)));
}
