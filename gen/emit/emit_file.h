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

/* The start of run_schedule(step, ahead) after its declarations: under 2BW
 * whether the step runs its fill (the pipeline is empty), then `init_2bw`;
 * elsewhere that `ahead` is not used (the pipeline drains every step). */
void emit_step_pipeline(const lx_printer *pr, const char *init_2bw);
/* Its end: under 2BW whether the pipeline now holds the next step's first forwards. */
void emit_step_pipeline_end(const lx_printer *pr);
/* The micro-batch numbers of the forward-only passes ("first; mb < end"):
 * under 2BW the next step's, so that they use the live weights. */
const char *emit_forward_only_range(const lx_printer *pr);

#endif
