/* glpk_errors.c — GLPK's fatal errors as lynxgen's own (glpk_errors.h).
 *
 * GLPK reports an invalid call (a column out of range, a row it cannot cut)
 * on its terminal and then calls abort() unless an error hook ends the
 * process first. Its terminal is silenced (lynxgen prints its own results),
 * so its words are kept as they come and said by the hook. */
#include "planning/glpk_errors.h"

#include <glpk.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EXIT_BUG = 3 };

/* GLPK's latest output: its error message is the last thing it prints. */
static char said[1024];

static int keep_output(void *info, const char *s) {
  (void)info;
  size_t have = strlen(said), more = strlen(s);
  if (have + more >= sizeof said) have = 0; /* older output gives way */
  snprintf(said + have, sizeof said - have, "%s", s);
  return 1; /* not printed */
}

/* GLPK's lines, joined by "; " into one. */
static void one_line(const char *text, char *out, size_t size) {
  size_t n = 0;
  for (const char *c = text; *c && n + 3 < size; c++)
    if (*c != '\n')
      out[n++] = *c;
    else if (c[1])
      out[n++] = ';', out[n++] = ' ';
  out[n] = '\0';
}

static void stop_on_error(void *info) {
  (void)info;
  char line[sizeof said + 64];
  one_line(said, line, sizeof line);
  fprintf(
      stderr,
      "lynxgen: internal error: GLPK stopped on a MILP lynxgen built: %s. This is a bug in lynxgen; please "
      "report it with the model file and the command line\n",
      line);
  exit(EXIT_BUG);
}

void lx_glpk_guard(void) {
  glp_term_hook(keep_output, NULL);
  glp_error_hook(stop_on_error, NULL);
}
