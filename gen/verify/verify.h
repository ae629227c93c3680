/* verify.h — a static proof that the schedule and the memory plan agree.
 *
 * Runs for every target before emission. For each stage it checks, over
 * happens-before (program order within a stream, RECORD -> WAIT between
 * streams) and the arena spans of the layout:
 *   1. every read sees the value it names: some write of that very tensor
 *      happens before it, and every contribution accumulated into it does;
 *   2. no buffer is reused while its value may still be read: no write to an
 *      overlapping span can fall between a tensor's write and its read, and
 *      no two accesses to overlapping spans from different streams, one a
 *      write, are unordered;
 * and over the whole pipeline:
 *   3. every send has exactly one matching receive on its peer stage, and
 *      the sends from s to s' run in the order s' receives them;
 *   4. the stages' streams cannot deadlock (sends and receives rendezvous);
 *   5. a stage's transfers over one channel (lx_channel: a direction of the
 *      link between neighbours and a kind of message; one NCCL communicator)
 *      go to the neighbour it joins and are all on one stream, since NCCL
 *      runs a communicator's operations in the order they were issued.
 * Each violation is a generator bug; it is printed to stderr as
 *   lynxgen: internal error: verify: <what>: <instruction A> and <instruction B>
 * with the stage and stream of each instruction. */
#ifndef LX_VERIFY_H
#define LX_VERIFY_H

#include "planning/layout.h"

/* `layouts` holds one layout per stage. Returns the number of violations. */
int lx_verify(const lx_pipeline *p, const lx_stage_layout *layouts);

#endif
