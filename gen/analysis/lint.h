/* lint.h — what a model file says validly but likely does not mean. */
#ifndef LX_LINT_H
#define LX_LINT_H

#include "ir.h"

/* Warns, at the place it was written, about each pattern of the analysed
 * `ir` that is a known slip: grouped-query attention fed GPT's 3 x hidden
 * wide qkv, a warm-up longer than the run. Call once per model. */
void lx_lint(const lx_ir *ir);

#endif
