/* emit_reroll.h — a printed step with its repeating runs of lines as loops
 * (emit_reroll.c says when a run qualifies). */
#ifndef LX_EMIT_REROLL_H
#define LX_EMIT_REROLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Writes `body` (lines of a function body at two spaces' indent) to `out`,
 * each qualifying run as a for loop over `i`. */
void emit_reroll(const char *body, FILE *out);

/* A step body printed into memory, then written to `out`, rerolled or not:
 *   FILE *f = emit_step_begin(&step, out, reroll); ...print into f...; emit_step_end(&step); */
typedef struct {
  FILE *out, *body;
  char *text;
  size_t size;
  bool reroll;
} lx_step_text;
FILE *emit_step_begin(lx_step_text *step, FILE *out, bool reroll);
void emit_step_end(lx_step_text *step);

#endif
