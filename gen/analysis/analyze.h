/* analyze.h — value checks, shape inference and per-op numbers. */
#ifndef LX_ANALYZE_H
#define LX_ANALYZE_H

#include "ir.h"

/* Applies defaults, checks every config value and shape (located errors
 * through diag.h), then annotates each op with shapes, FLOPs, saved bytes and
 * parameters. Returns the number of errors. */
int lx_analyze(lx_ir *ir);

#endif
