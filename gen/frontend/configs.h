/* configs.h — reading one config variable of a model file (configs.c). */
#ifndef LX_CONFIGS_H
#define LX_CONFIGS_H

#include "frontend/cursor.h"

/* Reads the designated initializer of `var`, a `struct <config>` (config is
 * its tag, e.g. "lx_model"), into ctx->ir's fields and their places. `seen`
 * is where this config was first written (line 0: not yet); a second one is
 * an error that points at the first. */
void lx_parse_config(lx_parse_ctx *ctx, CXCursor var, const char *config, lx_srcloc *seen);

#endif
