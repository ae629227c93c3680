/* model_file.c — the model file and its includes, within bounds (model_file.h). */
#define _POSIX_C_SOURCE 200809L
#include "frontend/model_file.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc.h"
#include "diag.h"
#include "frontend/source_file.h"

/* The quoted file name of an `#include "name"` line, or NULL. Angle
 * includes name only the prelude (<lynx.h>): lynxgen passes -nostdinc. */
static const char *quoted_include(const char *line, const char *end, size_t *n) {
  const char *p = line;
  while (p < end && (*p == ' ' || *p == '\t'))
    p++;
  if (p == end || *p++ != '#') return NULL;
  while (p < end && (*p == ' ' || *p == '\t'))
    p++;
  if (end - p < 7 || strncmp(p, "include", 7) != 0) return NULL;
  p += 7;
  while (p < end && (*p == ' ' || *p == '\t'))
    p++;
  if (p == end || *p != '"') return NULL;
  const char *close = memchr(p + 1, '"', (size_t)(end - p - 1));
  if (!close) return NULL;
  *n = (size_t)(close - p - 1);
  return p + 1;
}

static bool check_includes(const char *path, const char *text, size_t length, int depth);

/* One include, resolved as clang does first: relative to the including
 * file's directory. A name clang finds nowhere is clang's to report. */
static bool check_include(const char *includer, const char *name, size_t n, lx_srcloc at, int depth) {
  const char *slash = strrchr(includer, '/');
  int dir = name[0] == '/' || !slash ? 0 : (int)(slash - includer + 1);
  char *path = lx_malloc((size_t)dir + n + 1);
  memcpy(path, includer, (size_t)dir);
  memcpy(path + dir, name, n);
  path[dir + n] = '\0';
  struct stat st;
  bool ok = true;
  if (stat(path, &st) == 0) {
    char what[300];
    snprintf(what, sizeof what, "the included file '%.*s'", (int)(n > 200 ? 200 : n), name);
    size_t length = 0;
    char *text = depth >= LX_MAX_INCLUDE_DEPTH ? NULL : lx_read_source_file(path, at, what, &length);
    if (depth >= LX_MAX_INCLUDE_DEPTH) lx_error(at, "includes nest more than %d deep", LX_MAX_INCLUDE_DEPTH);
    ok = text && check_includes(path, text, length, depth + 1);
    free(text);
  }
  free(path);
  return ok;
}

static bool check_includes(const char *path, const char *text, size_t length, int depth) {
  const char *end = text + length;
  int line = 1;
  for (const char *start = text; start < end; line++) {
    const char *eol = memchr(start, '\n', (size_t)(end - start));
    if (!eol) eol = end;
    size_t n;
    const char *name = quoted_include(start, eol, &n);
    if (name && !check_include(path, name, n, (lx_srcloc){path, line, 1, NULL}, depth)) return false;
    start = eol + 1;
  }
  return true;
}

char *lx_load_model_source(const char *path, const char *given, size_t *length) {
  char *text;
  if (given) {
    text = lx_malloc(*length + 1);
    memcpy(text, given, *length);
  } else {
    text = lx_read_source_file(path, (lx_srcloc){path, 0, 0, NULL}, "the model file", length);
  }
  if (text && !check_includes(path, text, *length, 1)) {
    free(text);
    return NULL;
  }
  return text;
}
