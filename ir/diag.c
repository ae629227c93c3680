#include "diag.h"

#include <stdarg.h>

#include "escape.h"

static FILE *diag_sink;
static int errors, located_errors;

void lx_diag_set_sink(FILE *sink) { diag_sink = sink; }

void lx_diag_reset(void) { errors = located_errors = 0; }

int lx_error_count(void) { return errors; }

int lx_located_error_count(void) { return located_errors; }

static void report(lx_srcloc at, const char *severity, const char *fmt, va_list args) {
  FILE *out = diag_sink ? diag_sink : stderr;
  char file[LX_TEXT_MAX]; /* a diagnostic is one line, whatever the file is called */
  if (at.file && at.line > 0)
    fprintf(out, "%s:%d:%d: %s: ", lx_text(at.file, file, sizeof file), at.line, at.col, severity);
  else if (at.file)
    fprintf(out, "%s: %s: ", lx_text(at.file, file, sizeof file), severity);
  else
    fprintf(out, "lynxgen: %s: ", severity);
  vfprintf(out, fmt, args);
  fputc('\n', out);
  for (const lx_srcnote *n = at.notes; n; n = n->next)
    fprintf(out, "%s:%d:%d: note: %s\n", lx_text(n->file, file, sizeof file), n->line, n->col, n->text);
}

void lx_error(lx_srcloc at, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  report(at, "error", fmt, args);
  va_end(args);
  errors++;
  if (at.file && at.line > 0) located_errors++;
}

void lx_warning(lx_srcloc at, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  report(at, "warning", fmt, args);
  va_end(args);
}

void lx_note(lx_srcloc at, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  report(at, "note", fmt, args);
  va_end(args);
}
