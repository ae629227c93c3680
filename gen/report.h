/* report.h — the plan as text (plan.txt, --plan) and JSON (--plan --json). */
#ifndef LX_REPORT_H
#define LX_REPORT_H

#include <stdio.h>

#include "layout.h"
#include "memplan.h"
#include "simulate.h"

typedef struct {
  const lx_pipeline *pipe;
  const lx_stage_memory *memory; /* one per stage */
  const lx_simulation *sim;
  double capacity_bytes;          /* of one GPU */
  const lx_stage_layout *layouts; /* the emitted program's arena per stage; NULL when not laid out */
} lx_report;

void lx_print_plan_text(const lx_report *r, FILE *out);
void lx_print_plan_json(const lx_report *r, FILE *out);

#endif
