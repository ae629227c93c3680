/* locate.c — libclang locations as places in the model file, with notes.
 *
 * Every diagnostic of lynxgen points into the model file the user named:
 * something written by a macro is reported where the model file expands the
 * macro, something in an included header where the model file includes it.
 * The place it was really written follows as a note, clang style:
 *
 *   gpt.model:5:16: error: field '.seq_len' ...
 *   gpt.model:2:9: note: expanded from macro 'SEQ'
 *   gpt.model:3:10: error: ...
 *   config.h:4:7: note: in file included from gpt.model:3:10 */
#define _POSIX_C_SOURCE 200809L
#include "frontend/locate.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

static void record_inclusion(CXFile file, CXSourceLocation *stack, unsigned depth, CXClientData data) {
  lx_locator *l = data;
  if (depth == 0) {
    l->main_file = file;
    return;
  }
  for (int i = 0; i < l->n_inclusions; i++)
    if (clang_File_isEqual(l->inclusions[i].file, file)) return; /* the first inclusion names it */
  if (l->n_inclusions == l->cap_inclusions) {
    l->cap_inclusions = l->cap_inclusions ? 2 * l->cap_inclusions : 8;
    l->inclusions = lx_realloc(l->inclusions, sizeof *l->inclusions * (size_t)l->cap_inclusions);
  }
  l->inclusions[l->n_inclusions++] = (struct lx_inclusion){file, stack[0]};
}

void lx_locator_init(lx_locator *l, lx_ir *ir, CXTranslationUnit tu) {
  *l = (lx_locator){.ir = ir, .tu = tu};
  clang_getInclusions(tu, record_inclusion, l);
}

void lx_locator_free(lx_locator *l) {
  free(l->inclusions);
  *l = (lx_locator){0};
}

static bool is_main(const lx_locator *l, CXFile f) {
  return l->main_file && clang_File_isEqual(f, l->main_file);
}

/* A file as the user knows it: the model file by the name it was given, the
 * prelude as lynx.h, a header by the path clang opened. */
static void display_name(const lx_locator *l, CXFile f, char *dst, size_t size) {
  if (is_main(l, f)) {
    snprintf(dst, size, "%s", l->ir->model_path);
    return;
  }
  CXString name = clang_getFileName(f);
  const char *s = clang_getCString(name);
  snprintf(dst, size, "%s", s && !strcmp(s, LX_PRELUDE_PATH) ? "lynx.h" : s ? s : "?");
  clang_disposeString(name);
}

typedef struct {
  CXFile file;
  unsigned line, col;
} file_position;

static file_position position_of(CXSourceLocation where) {
  file_position p = {NULL, 0, 0};
  clang_getFileLocation(where, &p.file, &p.line, &p.col, NULL);
  return p;
}

/* A note at `at`, owned by the IR, in front of `next`. */
__attribute__((format(printf, 4, 5))) static const lx_srcnote *
add_note(lx_locator *l, file_position at, const lx_srcnote *next, const char *fmt, ...) {
  if (!at.file) return next;
  char file[1024], text[512];
  display_name(l, at.file, file, sizeof file);
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  lx_srcnote *n = lx_calloc(1, sizeof *n);
  *n = (lx_srcnote){lx_strdup(file), lx_strdup(text), (int)at.line, (int)at.col, next, l->ir->notes};
  l->ir->notes = n;
  return n;
}

static const struct lx_inclusion *inclusion_of(const lx_locator *l, CXFile f) {
  for (int i = 0; i < l->n_inclusions; i++)
    if (clang_File_isEqual(l->inclusions[i].file, f)) return &l->inclusions[i];
  return NULL;
}

/* The place in the model file for a place `p` anywhere: itself, or the
 * #include in the model file through which its file came in, with a note at
 * `p` (one note, however deep the includes: the note names the file that
 * includes p's file, the error the model file's #include). */
static lx_srcloc model_site(lx_locator *l, file_position p, const lx_srcnote *notes) {
  lx_srcloc none = {l->ir->model_path, 0, 0, notes};
  if (!p.file) return none;
  if (is_main(l, p.file)) return (lx_srcloc){l->ir->model_path, (int)p.line, (int)p.col, notes};
  const struct lx_inclusion *inc = inclusion_of(l, p.file);
  if (!inc) return none; /* <built-in> or the command line */
  file_position from = position_of(inc->from);
  char includer[1024];
  display_name(l, from.file, includer, sizeof includer);
  notes = add_note(l, p, notes, "in file included from %s:%u:%u", includer, from.line, from.col);
  for (int hops = 0; from.file && !is_main(l, from.file) && hops <= l->n_inclusions; hops++) {
    inc = inclusion_of(l, from.file);
    from = inc ? position_of(inc->from) : (file_position){NULL, 0, 0};
  }
  return from.file ? (lx_srcloc){l->ir->model_path, (int)from.line, (int)from.col, notes} : none;
}

/* "expanded from macro 'X'" at X's definition, if `p` is a macro call. */
static const lx_srcnote *macro_note(lx_locator *l, file_position p) {
  if (!p.file) return NULL;
  CXCursor c = clang_getCursor(l->tu, clang_getLocation(l->tu, p.file, p.line, p.col));
  if (clang_getCursorKind(c) != CXCursor_MacroExpansion) return NULL;
  CXCursor def = clang_getCursorReferenced(c);
  if (clang_Cursor_isNull(def)) return NULL;
  CXString name = clang_getCursorSpelling(c);
  const lx_srcnote *n = add_note(l, position_of(clang_getCursorLocation(def)), NULL,
                                 "expanded from macro '%s'", clang_getCString(name));
  clang_disposeString(name);
  return n;
}

lx_srcloc lx_srcloc_at(lx_locator *l, CXSourceLocation where) {
  file_position p = position_of(where);
  return model_site(l, p, macro_note(l, p));
}

lx_srcloc lx_srcloc_of_diagnostic(lx_locator *l, CXDiagnostic d) {
  CXDiagnosticSet children = clang_getChildDiagnostics(d);
  const lx_srcnote *notes = NULL;
  for (unsigned i = clang_getNumDiagnosticsInSet(children); i-- > 0;) {
    CXDiagnostic child = clang_getDiagnosticInSet(children, i);
    CXString text = clang_getDiagnosticSpelling(child);
    const char *s = clang_getCString(text);
    if (strncmp(s, "in file included from", 21)) /* model_site() says that its own way */
      notes = add_note(l, position_of(clang_getDiagnosticLocation(child)), notes, "%s", s);
    clang_disposeString(text);
  }
  return model_site(l, position_of(clang_getDiagnosticLocation(d)), notes);
}
