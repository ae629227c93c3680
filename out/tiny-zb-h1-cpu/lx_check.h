/* lx_check.h — checks for bugs of an emitted program (a broken shape, an
 * allocation that failed), which stop it at once and name the source line.
 * Shared by the CPU kernels (lx_common.h) and the host runtime of both
 * targets (templates/common); valid C11 and C++17. A user error (a missing
 * file, a bad flag) is lx_errors.h's lx_die instead. */
#ifndef LX_CHECK_H
#define LX_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static inline void lx_fatal_at(const char *file, int line, const char *what) {
  fprintf(stderr, "lynx: fatal error at %s:%d: %s\n", file, line, what);
  exit(EXIT_FAILURE);
}

#define LX_FATAL(what) lx_fatal_at(__FILE__, __LINE__, (what))

/* A broken shape or argument is a bug of the emitted program: stop at once. */
#define LX_CHECK(cond)                                                                                       \
  do {                                                                                                       \
    if (!(cond)) lx_fatal_at(__FILE__, __LINE__, "check failed: " #cond);                                    \
  } while (0)

static inline void *lx_malloc_at(size_t bytes, const char *file, int line) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) lx_fatal_at(file, line, "out of memory");
  return p;
}

static inline void *lx_calloc_at(size_t count, size_t size, const char *file, int line) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (!p) lx_fatal_at(file, line, "out of memory");
  return p;
}

static inline FILE *lx_fopen_at(const char *path, const char *mode, const char *file, int line) {
  FILE *f = fopen(path, mode);
  if (!f) {
    fprintf(stderr, "lynx: cannot open %s (mode %s)\n", path, mode);
    lx_fatal_at(file, line, "fopen failed");
  }
  return f;
}

static inline void lx_fread_at(void *dst, size_t size, size_t count, FILE *f, const char *file, int line) {
  if (fread(dst, size, count, f) != count) lx_fatal_at(file, line, "short read (truncated file?)");
}

static inline void lx_fwrite_at(const void *src, size_t size, size_t count, FILE *f, const char *file,
                                int line) {
  if (fwrite(src, size, count, f) != count) lx_fatal_at(file, line, "short write (disk full?)");
}

#define LX_MALLOC(bytes) lx_malloc_at((bytes), __FILE__, __LINE__)
#define LX_CALLOC(count, size) lx_calloc_at((count), (size), __FILE__, __LINE__)
#define LX_FOPEN(path, mode) lx_fopen_at((path), (mode), __FILE__, __LINE__)
#define LX_FREAD(dst, size, count, f) lx_fread_at((dst), (size), (count), (f), __FILE__, __LINE__)
#define LX_FWRITE(src, size, count, f) lx_fwrite_at((src), (size), (count), (f), __FILE__, __LINE__)

#endif
