/* emit_file.h — a stage file as both targets lay it out: the target's head
 * (sizes, the arena's regions, settings), the stage's named tensors
 * (emit_names.h), then the code; no line over 120 columns except a data
 * table's rows. */
#ifndef LX_EMIT_FILE_H
#define LX_EMIT_FILE_H

#include "emit/emit_operands.h"

typedef void (*lx_file_part)(const lx_printer *pr);

/* Prints `code` (which names tensors through emit_at) into memory, then
 * `head`, the accessors of every tensor `code` named, and `code` to `out`. */
void emit_stage_file(lx_printer *pr, FILE *out, lx_file_part head, lx_file_part code);

#endif
