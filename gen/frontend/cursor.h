/* cursor.h — what the front end's readers share (cursor.c): the parse of
 * one model file, where a cursor is in it, a cursor's children, and the
 * checked value of a number written in it. configs.c reads the configs and
 * frontend.c the op graphs through these. */
#ifndef LX_CURSOR_H
#define LX_CURSOR_H

#include <clang-c/Index.h>
#include <stdbool.h>
#include <stddef.h>

#include "diag.h"
#include "frontend/constant.h"
#include "frontend/locate.h"
#include "ir.h"

/* The model file being read: the IR it fills and where its lines are. */
typedef struct {
  lx_ir *ir;
  CXTranslationUnit tu;
  lx_locator locator;
} lx_parse_ctx;

/* Children of one cursor that the front end looks at: a function's
 * statements, an initializer's fields, a call's arguments. More is an error
 * that names the limit. */
enum { LX_MAX_CHILDREN = 1024 };

typedef struct {
  CXCursor items[LX_MAX_CHILDREN];
  int count;
} lx_children;

/* file:line:col of a libclang location, of a cursor, and of line 1. */
lx_srcloc lx_location_at(lx_parse_ctx *ctx, CXSourceLocation where);
lx_srcloc lx_cursor_loc(lx_parse_ctx *ctx, CXCursor c);
lx_srcloc lx_file_start(lx_parse_ctx *ctx);

/* Copies a libclang string into dst (truncated to size) and disposes of it. */
void lx_copy_spelling(char *dst, size_t size, CXString s);

/* The first LX_MAX_CHILDREN children of c. */
lx_children lx_children_of(CXCursor c);

/* Implicit casts and parentheses show up as single-child wrappers. */
CXCursor lx_strip_wrappers(CXCursor c);

/* The type an expression had before its implicit conversion to the type of
 * the parameter or field it initializes: clang converts 64.0 to int silently,
 * so the folded value alone cannot tell a float from an integer. */
CXType lx_written_type(CXCursor expr);

/* An integer, bool or enum type. */
bool lx_is_integer_type(CXType t);

/* An expression is located where it starts: the cursor location of `3 * W`
 * is its operator and that of `model.hidden` its member name. */
lx_srcloc lx_expr_start_loc(lx_parse_ctx *ctx, CXCursor expr);

/* Reports a value that is not an integer where one is needed; true if it is. */
bool lx_expect_integer(lx_parse_ctx *ctx, CXCursor expr, const char *what);

/* The checked value of the number `expr` (lx_written_type says whether an
 * integer is expected); reports what is wrong with it and returns false. */
bool lx_number_of(lx_parse_ctx *ctx, CXCursor expr, const char *what, lx_constant *value);

/* The struct tag of a variable's type, e.g. "lx_model", or "" for others. */
void lx_struct_tag_of(CXCursor var, char *tag, size_t size);

#endif
