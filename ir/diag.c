#include "diag.h"

#include <stdarg.h>
#include <string.h>

#include "escape.h"

static FILE *diag_sink;
static int errors, located_errors;

void lx_diag_set_sink(FILE *sink) { diag_sink = sink; }

void lx_diag_reset(void) { errors = located_errors = 0; }

int lx_error_count(void) { return errors; }

int lx_located_error_count(void) { return located_errors; }

/* The longest message printed; past it, "...". A message quotes what lynxgen
 * read (a token of a profile, a name in the model file), which may be long. */
enum { MESSAGE_MAX = 1024 };

/* The message of fmt and args, escaped (lx_line_text): whatever it quotes
 * from the input, it cannot drive the terminal or break the line. */
static void put_message(FILE *out, const char *fmt, va_list args) {
  char message[MESSAGE_MAX], line[4 * MESSAGE_MAX]; /* a byte escapes to at most four */
  int length = vsnprintf(message, sizeof message, fmt, args);
  fputs(lx_line_text(message, line, sizeof line), out);
  if (length >= (int)sizeof message) fputs("...", out);
}

static void report(lx_srcloc at, const char *severity, const char *fmt, va_list args) {
  FILE *out = diag_sink ? diag_sink : stderr;
  char file[LX_TEXT_MAX], text[4 * LX_TEXT_MAX]; /* one line, whatever the file is called or holds */
  if (at.file && at.line > 0)
    fprintf(out, "%s:%d:%d: %s: ", lx_text(at.file, file, sizeof file), at.line, at.col, severity);
  else if (at.file)
    fprintf(out, "%s: %s: ", lx_text(at.file, file, sizeof file), severity);
  else
    fprintf(out, "lynxgen: %s: ", severity);
  put_message(out, fmt, args);
  fputc('\n', out);
  for (const lx_srcnote *n = at.notes; n; n = n->next)
    fprintf(out, "%s:%d:%d: note: %s\n", lx_text(n->file, file, sizeof file), n->line, n->col,
            lx_line_text(n->text, text, sizeof text));
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

const char *lx_excerpt(const char *s, char buf[LX_EXCERPT_MAX + 4]) {
  for (int i = 0; i <= LX_EXCERPT_MAX; i++)
    if (!s[i]) return s;
  memcpy(buf, s, LX_EXCERPT_MAX);
  memcpy(buf + LX_EXCERPT_MAX, "...", 4);
  return buf;
}
