/* diag.h — located diagnostics: "file:line:col: error: message", each followed
 * by the notes of its location (lx_srcloc.notes). */
#ifndef LX_DIAG_H
#define LX_DIAG_H

#include <stdio.h>

#include "ir.h"

/* Where diagnostics go (stderr unless set; the fuzzer captures them). */
void lx_diag_set_sink(FILE *sink);
void lx_diag_reset(void);
int lx_error_count(void);
/* Counts of errors that carried a location and that did not. */
int lx_located_error_count(void);

__attribute__((format(printf, 2, 3))) void lx_error(lx_srcloc at, const char *fmt, ...);
__attribute__((format(printf, 2, 3))) void lx_note(lx_srcloc at, const char *fmt, ...);
/* What is valid but likely not meant: reported, not counted as an error. */
__attribute__((format(printf, 2, 3))) void lx_warning(lx_srcloc at, const char *fmt, ...);

/* Input quoted in a diagnostic: s, or its first LX_EXCERPT_MAX bytes and
 * "..." in buf, so that one long token does not make a line of kilobytes.
 * (Every message is escaped as it is printed: the excerpt need not be.) */
enum { LX_EXCERPT_MAX = 64 };
const char *lx_excerpt(const char *s, char buf[LX_EXCERPT_MAX + 4]);

#endif
