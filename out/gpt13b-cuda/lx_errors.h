/* lx_errors.h — how the runtime reports a user error (a missing data file, a
 * checkpoint of another model, a bad flag): one line that says what is wrong
 * and where, then exit status 1.
 *
 * lx_check.h's LX_FATAL / LX_CHECK are for bugs of the emitted program and
 * name a source line; these messages are for the person running it and name
 * the file, field or flag instead. Under mpirun a rank that exits without
 * MPI_Finalize makes Open MPI terminate the whole job, so an error seen by one
 * stage never leaves the others hanging in a receive. */
#ifndef LX_ERRORS_H
#define LX_ERRORS_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* glob, pread, pwrite, fsync, strdup */
#endif

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* glibc decides what to declare when the first system header is included:
 * if that happened before _POSIX_C_SOURCE was defined, pread/glob would be
 * implicit declarations. Say how to fix it rather than fail obscurely. */
#if defined(__GLIBC__) && !defined(__USE_XOPEN2K8)
#error                                                                                                       \
    "lx_runtime.h needs POSIX 2008: include it before any other header, or build with -D_POSIX_C_SOURCE=200809L"
#endif

enum { LX_EXIT_ERROR = 1, LX_EXIT_USAGE = 2 };

#if defined(__GNUC__) || defined(__clang__)
#define LX_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#define LX_NORETURN __attribute__((noreturn))
#else
#define LX_PRINTF(fmt_index, first_arg)
#define LX_NORETURN
#endif

/* Prints "lynx: error: <message>" in one write, so that the same error
 * from several ranks of a job comes out as whole lines, not interleaved. */
static inline LX_PRINTF(1, 0) void lx_print_error(const char *fmt, va_list args) {
  char line[4096];
  int n = snprintf(line, sizeof line, "lynx: error: ");
  n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, args);
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2; /* cut: the start of a long message */
  line[n++] = '\n';
  fwrite(line, 1, (size_t)n, stderr);
}

/* Prints "lynx: error: <message>" and exits 1. */
static inline LX_NORETURN LX_PRINTF(1, 2) void lx_die(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  lx_print_error(fmt, args);
  va_end(args);
  fflush(stdout);
  exit(LX_EXIT_ERROR);
}

/* src as one line of at most cap - 1 bytes, for a line-oriented file the
 * programs write (a profile, which lynxgen reads back): a control character,
 * a newline above all, becomes '?', so that a model file's name cannot add
 * lines of its own. Returns dst. */
static inline const char *lx_one_line(const char *src, char *dst, size_t cap) {
  size_t n = 0;
  for (; cap && src[n] && n + 1 < cap; n++)
    dst[n] = (unsigned char)src[n] < 0x20 || src[n] == 0x7f ? '?' : src[n];
  if (cap) dst[n] = '\0';
  return dst;
}

#endif
