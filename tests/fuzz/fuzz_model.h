/* fuzz_model.h — what the two fuzzers (fuzz_frontend.c, fuzz_plan.c) share. */
#ifndef LX_FUZZ_MODEL_H
#define LX_FUZZ_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "ir.h"

/* The front end on one input, parsed from memory under the name `path`;
 * `adjust` (NULL: none) may change the parsed IR before analysis. Checks the
 * promises of the diagnostics — a rejected input has a located
 * (file:line:col) error, an accepted one an IR that validates — and aborts
 * the run when one is broken. Returns whether the input was accepted;
 * either way `ir` is initialised and the caller frees it. The diagnostics
 * themselves go nowhere: thousands of inputs a second are noise. */
bool fuzz_front_end(const char *path, const uint8_t *data, size_t size, void (*adjust)(lx_ir *), lx_ir *ir);

#endif
