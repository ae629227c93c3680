/* source_file.h — reading a file lynxgen is given (a model file, a file it
 * includes, a --profile): only a regular file (a device such as /dev/zero, a
 * FIFO or a directory would hang the read or make no sense) of at most
 * LX_MAX_SOURCE_BYTES. */
#ifndef LX_SOURCE_FILE_H
#define LX_SOURCE_FILE_H

#include <stddef.h>

#include "diag.h"

enum { LX_MAX_SOURCE_BYTES = 1 << 20 };

/* The bytes of the file at `path`, NUL-terminated, their number in *length;
 * NULL after an error at `at` that names the file as `what` ("the model
 * file", "the included file 'x.h'"). The caller frees it. */
char *lx_read_source_file(const char *path, lx_srcloc at, const char *what, size_t *length);

#endif
