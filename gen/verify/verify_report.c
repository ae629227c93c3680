/* verify_report.c — naming instructions and reporting violations (see verify_report.h). */
#include "verify/verify_report.h"

#include <stdio.h>

const lx_instr *lx_verify_instr(const lx_pipeline *p, instr_at at) {
  return &p->stages[at.stage].streams[at.stream].items[at.pos];
}

void lx_verify_describe(const lx_pipeline *p, instr_at at, char *buf, size_t size) {
  if (at.stage < 0) {
    snprintf(buf, size, "(none)");
    return;
  }
  char text[TEXT / 2];
  lx_instr_describe(p->ir, lx_verify_instr(p, at), text, sizeof text);
  snprintf(buf, size, "stage %d %s: %s", at.stage, lx_stream_name((lx_stream)at.stream), text);
}

void lx_verify_report(reporter *r, const char *what, instr_at a, instr_at b) {
  r->violations++;
  if (r->printed++ >= MAX_PRINTED) return;
  char ta[TEXT], tb[TEXT];
  lx_verify_describe(r->p, a, ta, sizeof ta);
  lx_verify_describe(r->p, b, tb, sizeof tb);
  fprintf(stderr, "lynxgen: internal error: verify: %s: %s and %s\n", what, ta, tb);
}

