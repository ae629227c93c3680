/* verify_report.h — how the verifier's checks (verify.c: memory and stream
 * order within a stage; verify_comm.c: sends and receives across stages)
 * name an instruction and report a violation, for internal use of those two. */
#ifndef LX_VERIFY_REPORT_H
#define LX_VERIFY_REPORT_H

#include "schedule.h"

enum { NS = LX_STREAM_COUNT, MAX_PRINTED = 25, TEXT = 256 /* message buffers */ };

typedef struct {
  const lx_pipeline *p;
  int violations, printed;
} reporter;

/* An instruction: its stage, stream and position in the stream. */
typedef struct {
  int stage, stream, pos;
} instr_at;

static const instr_at NO_INSTR = {-1, -1, -1};

const lx_instr *lx_verify_instr(const lx_pipeline *p, instr_at at);
/* "stage 1 compute: FWD block.linear_2 L3 mb5", or "(none)" for NO_INSTR. */
void lx_verify_describe(const lx_pipeline *p, instr_at at, char *buf, size_t size);
/* One violation; `a` and `b` are the two instructions involved (b may be
 * NO_INSTR). The first MAX_PRINTED are printed. */
void lx_verify_report(reporter *r, const char *what, instr_at a, instr_at b);

/* verify_comm.c: every send has its receive, slot for slot (check 3);
 * false when the sends and receives are too malformed to go on. */
bool lx_verify_matching(reporter *r, const lx_pipeline *p);
/* ... and the stages, run as a rendezvous game, never get stuck (check 4). */
void lx_verify_deadlock_free(reporter *r, const lx_pipeline *p);
/* ... and each channel's transfers of a stage go to the neighbour it joins,
 * on one stream, so that NCCL's order on its communicator is that stream's (check 5). */
void lx_verify_channels(reporter *r, const lx_pipeline *p);

#endif
