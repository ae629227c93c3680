/* report.h — the plan as text (plan.txt, --plan) and JSON (--plan --json). */
#ifndef LX_REPORT_H
#define LX_REPORT_H

#include <stdio.h>

#include "planning/layout.h"
#include "planning/memplan.h"
#include "planning/simulate.h"

typedef struct {
  const lx_pipeline *pipe;
  const lx_stage_memory *memory; /* one per stage */
  const lx_simulation *sim;
  double capacity_bytes;          /* of one GPU */
  const lx_stage_layout *layouts; /* the emitted program's arena per stage; NULL when not laid out */
  bool search_times; /* give the policies' measured search times (--plan on stdout; never in plan.txt,
                        whose bytes are the same for the same input) */
} lx_report;

/* A size with the unit that suits it ("512 B", "1.50 KiB", "74.51 GiB"), so
 * that a small model never shows "0.00 GiB"; and a count ("1.316 B", "85.000 K"). */
enum { LX_BYTES_TEXT = 24 };
const char *lx_bytes_text(double bytes, char buf[LX_BYTES_TEXT]);
const char *lx_count_text(double n, char buf[LX_BYTES_TEXT]);

void lx_print_plan_text(const lx_report *r, FILE *out);
void lx_print_plan_json(const lx_report *r, FILE *out);

#endif
