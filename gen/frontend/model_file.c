/* model_file.c — the model file and its includes, within bounds (model_file.h). */
#define _POSIX_C_SOURCE 200809L
#include "frontend/model_file.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc.h"
#include "diag.h"
#include "escape.h"
#include "frontend/directives.h"
#include "frontend/source_file.h"

/* The file whose #include is being vetted, and how deep it is included. */
typedef struct {
  const char *path;
  int depth;
} includer;

static bool check_includes(const char *path, const char *text, size_t length, int depth);

/* One `#include "name"` (directives.h), resolved as clang does first:
 * relative to the including file's directory (lynxgen passes -nostdinc, and
 * the only other directory clang searches is the prelude's, which is not on
 * disk). A name clang finds nowhere is clang's to report. */
static bool check_include(void *context, const char *name, size_t n, lx_srcloc at) {
  const includer *from = context;
  const char *slash = strrchr(from->path, '/');
  int dir = name[0] == '/' || !slash ? 0 : (int)(slash - from->path + 1);
  char *path = lx_malloc((size_t)dir + n + 1);
  memcpy(path, from->path, (size_t)dir);
  memcpy(path + dir, name, n);
  path[dir + n] = '\0';
  struct stat st;
  bool ok = true;
  if (stat(path, &st) == 0) {
    /* the name as the terminal may show it: no control byte of a shared file reaches it */
    char shown[200], what[sizeof shown + 32];
    snprintf(what, sizeof what, "the included file '%s'", lx_text(path + dir, shown, sizeof shown));
    size_t length = 0;
    char *text = from->depth >= LX_MAX_INCLUDE_DEPTH ? NULL : lx_read_source_file(path, at, what, &length);
    if (from->depth >= LX_MAX_INCLUDE_DEPTH)
      lx_error(at, "includes nest more than %d deep", LX_MAX_INCLUDE_DEPTH);
    ok = text && check_includes(path, text, length, from->depth + 1);
    free(text);
  }
  free(path);
  return ok;
}

static bool check_includes(const char *path, const char *text, size_t length, int depth) {
  includer self = {path, depth};
  return lx_check_directives(path, text, length, check_include, &self);
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
