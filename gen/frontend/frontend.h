/* frontend.h — model file (C subset) to IR, through libclang. */
#ifndef LX_FRONTEND_H
#define LX_FRONTEND_H

#include <stddef.h>

#include "ir.h"

/* Parses the model file at `path` into `ir` (configs and the three op
 * graphs; no analysis). When `contents` is not NULL it is used instead of
 * reading the file (the fuzzer and tests parse from memory). Reports every
 * problem through diag.h; returns the number of errors. */
int lx_parse_model(const char *path, const char *contents, size_t length, lx_ir *ir);

/* The prelude ir/lynx.h, embedded at build time (build/prelude.c). */
extern const char lx_prelude_text[];
extern const unsigned long lx_prelude_length;

#endif
