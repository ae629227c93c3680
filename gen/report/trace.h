/* trace.h — the simulated iteration, drawn for people and for trace viewers.
 *
 * Three files of the output directory come from here, each from its own file
 * (what they share is trace_draw.h):
 *   trace.json    (trace_json.c) Chrome trace-event format (Perfetto, chrome://tracing): one
 *                 process per stage, one thread per stream, one complete event
 *                 per instruction that takes time. The full detail, up to
 *                 --trace-events of them (the steady state between left out).
 *   schedule.svg  (schedule_svg.c) the timeline at a glance: stages as rows, the compute stream
 *                 as the main lane, thin sub-lanes for recompute and
 *                 communication, bubbles hatched. Neighbouring instructions of
 *                 one kind and micro-batch merge into one box, so a schedule of
 *                 tens of thousands of instructions stays a small file.
 *   memory.svg    (memory_svg.c) per stage, a stacked bar of what its memory holds at the
 *                 peak, against the GPU's capacity.
 * All three are deterministic: the same simulation gives the same bytes. */
#ifndef LX_TRACE_H
#define LX_TRACE_H

#include <stdio.h>

#include "planning/memplan.h"
#include "planning/simulate.h"

/* At most max_events instruction events (0: every one): past it, the first and
 * last halves of them in time, the steady state between left out. */
void lx_write_trace_json(const lx_simulation *sim, int64_t max_events, FILE *out);
void lx_write_schedule_svg(const lx_simulation *sim, FILE *out);
/* `memory` has one entry per stage; capacity_bytes <= 0 draws no capacity line. */
void lx_write_memory_svg(const lx_simulation *sim, const lx_stage_memory *memory, double capacity_bytes,
                         FILE *out);

#endif
