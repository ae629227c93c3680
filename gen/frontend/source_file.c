/* source_file.c — reading a file lynxgen is given, within bounds (source_file.h). */
#define _POSIX_C_SOURCE 200809L
#include "frontend/source_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"

/* What a file that is not a regular one is, for the error. */
static const char *kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

/* A FIFO is opened without blocking, so that it is refused rather than waited on. */
char *lx_read_source_file(const char *path, lx_srcloc at, const char *what, size_t *length) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    lx_error(at, "cannot read %s: %s", what, strerror(errno));
    if (fd >= 0) close(fd);
    return NULL;
  }
  char *text = NULL;
  if (!S_ISREG(st.st_mode))
    lx_error(at, "%s is %s; a model file and its includes must be regular files", what, kind_of(st.st_mode));
  else if (st.st_size > LX_MAX_SOURCE_BYTES)
    lx_error(at, "%s is %lld bytes; a model file and each include may be at most %d", what,
             (long long)st.st_size, LX_MAX_SOURCE_BYTES);
  else {
    text = lx_malloc((size_t)st.st_size + 1);
    ssize_t got = read(fd, text, (size_t)st.st_size + 1); /* one more: a file that grew is refused */
    if (got != st.st_size) {
      lx_error(at, "cannot read %s: %s", what, got < 0 ? strerror(errno) : "its size changed while reading");
      free(text);
      text = NULL;
    } else {
      text[got] = '\0';
      *length = (size_t)got;
    }
  }
  close(fd);
  return text;
}
