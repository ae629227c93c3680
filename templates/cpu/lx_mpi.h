/* lx_mpi.h — MPI for the emitted CPU programs: start-up that refuses a wrong
 * number of ranks, error checks that abort the job instead of hanging it, and
 * thin non-blocking point-to-point helpers for the pipeline's sends and
 * receives.
 *
 * World ranks are laid out tensor-parallel fastest, then data-parallel, then
 * pipeline stage: rank = tp_rank + tp * (dp_rank + dp * stage), so that a
 * stage's ranks are contiguous (run.sh starts them as one app context) and a
 * tensor-parallel group shares a node. Pipeline peers are stage numbers in
 * the pipeline communicator of the rank's (tp_rank, dp_rank): literal
 * numbers in the emitted code.
 *
 * Tags: tag = kind * LX_TAG_STRIDE + micro_batch, so that a stage can have
 * the activations of several micro-batches in flight to the same peer and
 * each receive matches exactly one send, whatever order MPI completes them
 * in. */
#ifndef LX_MPI_H
#define LX_MPI_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_common.h"
#include "lx_mpi_errors.h"
#include "lx_watchdog.h"

#include <limits.h>
#include <stdint.h>

#ifdef LX_DOUBLE
#define LX_MPI_REAL MPI_DOUBLE
#else
#define LX_MPI_REAL MPI_FLOAT
#endif

/* Shown when the world size is wrong; the emitted program may define it
 * before including this header, e.g. "tp 1 x pp 4 x dp 2". */
#ifndef LX_RANK_LAYOUT
#define LX_RANK_LAYOUT "tp x pp x dp"
#endif

#define LX_TAG_STRIDE 1000000
enum {
  LX_TAG_ACTIVATION = 1, /* forward: stage s -> s+1 */
  LX_TAG_GRADIENT = 2,   /* backward: stage s+1 -> s */
  LX_TAG_USER = 3        /* first kind free for other messages */
};
#define LX_TAG_MAX_KIND 2000 /* the MPI standard only promises tags up to 32767: checked at start */

static inline void lx_mpi_check_tags(void) {
  int *tag_ub = NULL, found = 0;
  LX_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found));
  if (found && *tag_ub / LX_TAG_STRIDE < LX_TAG_MAX_KIND)
    lx_die("this MPI allows tags up to %d only; lynx needs %d", *tag_ub, LX_TAG_MAX_KIND * LX_TAG_STRIDE);
}

/* MPI_Init, errors returned to LX_MPI_CHECK, and the world size checked
 * against the plan the program was generated for. */
static inline void lx_mpi_start(int *argc, char ***argv, int expected_ranks, int *rank) {
  int provided = 0, size = 0;
  /* Funneled: OpenMP threads compute, only the main thread calls MPI. */
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  LX_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  LX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
  LX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  if (size != expected_ranks) {
    if (*rank == 0)
      fprintf(stderr,
              "lynx: error: this program was generated for %d ranks (" LX_RANK_LAYOUT
              ") but runs with %d; use run.sh\n",
              expected_ranks, size);
    lx_mpi_exit(LX_EXIT_ERROR);
  }
  lx_mpi_check_tags();
}

static inline void lx_mpi_finish(void) { LX_MPI_CHECK(MPI_Finalize()); }

/* The rank's place in the plan and its communicators. */
typedef struct {
  int tp_rank, dp_rank, stage;
  MPI_Comm tp;      /* the stage's ranks of this replica: tensor-parallel collectives */
  MPI_Comm dp;      /* the stage's ranks of this tp_rank: gradient reduction */
  MPI_Comm pp;      /* one rank per stage, same (tp_rank, dp_rank): sends and receives */
} lx_groups;

/* Where p2p traffic goes: the pipeline communicator once lx_groups_start ran. */
static MPI_Comm lx_pipeline_comm = MPI_COMM_NULL;

static inline lx_groups lx_groups_start(int world_rank, int tp, int dp, int stage) {
  lx_groups g = {world_rank % tp, world_rank / tp % dp, world_rank / (tp * dp), 0, 0, 0};
  if (g.stage != stage)
    lx_die("world rank %d belongs to stage %d but runs the program of stage %d; use run.sh", world_rank, g.stage,
           stage);
  LX_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, g.stage * dp + g.dp_rank, g.tp_rank, &g.tp));
  LX_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, g.stage * tp + g.tp_rank, g.dp_rank, &g.dp));
  LX_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, g.dp_rank * tp + g.tp_rank, g.stage, &g.pp));
  /* names for the watchdog's message */
  LX_MPI_CHECK(MPI_Comm_set_name(g.tp, "tensor-parallel"));
  LX_MPI_CHECK(MPI_Comm_set_name(g.dp, "data-parallel"));
  LX_MPI_CHECK(MPI_Comm_set_name(g.pp, "pipeline"));
  lx_pipeline_comm = g.pp;
  return g;
}

static inline int lx_tag(int kind, int micro_batch) {
  LX_CHECK(kind > 0 && kind < LX_TAG_MAX_KIND && micro_batch >= 0 && micro_batch < LX_TAG_STRIDE);
  return kind * LX_TAG_STRIDE + micro_batch;
}

/* What each pending request is, for the watchdog's message. The step's
 * requests live in one array, so slots keyed by a request's address do. */
enum { LX_POSTED_SLOTS = 256 };
typedef struct {
  const MPI_Request *req;
  char what[96];
} lx_posted_request;
static lx_posted_request lx_posted[LX_POSTED_SLOTS];

static inline lx_posted_request *lx_posted_slot(const MPI_Request *req) {
  return &lx_posted[(uintptr_t)req / sizeof(MPI_Request) % LX_POSTED_SLOTS];
}

static inline LX_PRINTF(2, 3) void lx_post(const MPI_Request *req, const char *fmt, ...) {
  lx_posted_request *slot = lx_posted_slot(req);
  va_list args;
  va_start(args, fmt);
  vsnprintf(slot->what, sizeof slot->what, fmt, args);
  va_end(args);
  slot->req = req;
}

static inline const char *lx_payload(int kind) {
  return kind == LX_TAG_ACTIVATION ? "activations" : kind == LX_TAG_GRADIENT ? "gradient" : "message";
}

/* Starts sending n reals to pipeline stage `peer`; buf must stay untouched
 * until lx_wait(req). */
static inline void lx_isend(const real *buf, // (n)
                            int64_t n, int peer, int kind, int micro_batch, MPI_Request *req) {
  LX_CHECK(n >= 0 && n <= INT_MAX);
  LX_MPI_CHECK(MPI_Isend(buf, (int)n, LX_MPI_REAL, peer, lx_tag(kind, micro_batch), lx_pipeline_comm, req));
  lx_post(req, "sending micro-batch %d's %s to stage %d", micro_batch, lx_payload(kind), peer);
}

/* Starts receiving exactly n reals from pipeline stage `peer`. */
static inline void lx_irecv(real *buf, // (n)
                            int64_t n, int peer, int kind, int micro_batch, MPI_Request *req) {
  LX_CHECK(n >= 0 && n <= INT_MAX);
  LX_MPI_CHECK(MPI_Irecv(buf, (int)n, LX_MPI_REAL, peer, lx_tag(kind, micro_batch), lx_pipeline_comm, req));
  lx_post(req, "receiving micro-batch %d's %s from stage %d", micro_batch, lx_payload(kind), peer);
}

static inline void lx_wait(MPI_Request *req) {
  lx_posted_request *slot = lx_posted_slot(req);
  lx_watchdog_waiting("%s", slot->req == req ? slot->what : "a request of MPI");
  LX_MPI_CHECK(MPI_Wait(req, MPI_STATUS_IGNORE));
  lx_watchdog_done_waiting();
  if (slot->req == req) slot->req = NULL;
}

static inline void lx_waitall(int n,
                              MPI_Request *reqs // (n)
) {
  for (int i = 0; i < n; i++)
    lx_wait(&reqs[i]);
}

/* comm's name (set where it is made), for the watchdog's message. */
static inline const char *lx_comm_name(MPI_Comm comm) {
  static char name[MPI_MAX_OBJECT_NAME];
  int length = 0;
  if (MPI_Comm_get_name(comm, name, &length) != MPI_SUCCESS || length == 0) return "unnamed";
  return name;
}

/* In place: buf = the sum of every rank's buf in comm (data-parallel
 * gradients, tensor-parallel partial sums). */
static inline void lx_allreduce_sum(real *buf, // (n)
                                    int64_t n, MPI_Comm comm) {
  LX_CHECK(n >= 0 && n <= INT_MAX);
  lx_watchdog_waiting("an all-reduce of %lld values over the %s group", (long long)n, lx_comm_name(comm));
  LX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, LX_MPI_REAL, MPI_SUM, comm));
  lx_watchdog_done_waiting();
}

/* Starts buf = the sum of every rank's buf in comm, in place. */
static inline void lx_iallreduce_sum(real *buf, // (n)
                                     int64_t n, MPI_Comm comm, MPI_Request *req) {
  LX_CHECK(n >= 0 && n <= INT_MAX);
  LX_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, LX_MPI_REAL, MPI_SUM, comm, req));
  lx_post(req, "an all-reduce of %lld values over the %s group", (long long)n, lx_comm_name(comm));
}

/* Sequence parallelism: starts summing `whole` over comm, rank r receiving
 * its rows' part (`shard` reals) into shard. */
static inline void lx_ireduce_scatter(const real *whole, // (size(comm) * n)
                                      real *shard,       // (n)
                                      int64_t n, MPI_Comm comm, MPI_Request *req) {
  LX_CHECK(n >= 0 && n <= INT_MAX);
  LX_MPI_CHECK(MPI_Ireduce_scatter_block(whole, shard, (int)n, LX_MPI_REAL, MPI_SUM, comm, req));
  lx_post(req, "a reduce-scatter into %lld values (sequence parallelism)", (long long)n);
}

/* Sequence parallelism: starts gathering every rank's shard into whole, in rank order. */
static inline void lx_iallgather(const real *shard, // (n)
                                 real *whole,       // (size(comm) * n)
                                 int64_t n, MPI_Comm comm, MPI_Request *req) {
  LX_CHECK(n >= 0 && n <= INT_MAX);
  LX_MPI_CHECK(MPI_Iallgather(shard, (int)n, LX_MPI_REAL, whole, (int)n, LX_MPI_REAL, comm, req));
  lx_post(req, "an all-gather of %lld values (sequence parallelism)", (long long)n);
}

static inline void lx_reduce_scatter(const real *whole, // (size(comm) * n)
                                     real *shard,       // (n)
                                     int64_t n, MPI_Comm comm) {
  MPI_Request req;
  lx_ireduce_scatter(whole, shard, n, comm, &req);
  lx_wait(&req);
}

static inline void lx_allgather(const real *shard, // (n)
                                real *whole,       // (size(comm) * n)
                                int64_t n, MPI_Comm comm) {
  MPI_Request req;
  lx_iallgather(shard, whole, n, comm, &req);
  lx_wait(&req);
}

/* ZeRO-1: starts summing buf over comm, rank r getting the sum of chunk r
 * (`chunk` reals) in buf[0, chunk) (MPI's in-place convention). */
static inline void lx_ireduce_scatter_sum(real *buf, // (size(comm) * chunk)
                                          int64_t chunk, MPI_Comm comm, MPI_Request *req) {
  LX_CHECK(chunk >= 0 && chunk <= INT_MAX);
  LX_MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, (int)chunk, LX_MPI_REAL, MPI_SUM, comm, req));
  lx_post(req, "the ZeRO-1 reduce-scatter of %lld gradients", (long long)chunk);
}

/* ZeRO-1: every rank's chunk r of buf (its updated shard) to all, in place. */
static inline void lx_allgather_chunks(real *buf, // (size(comm) * chunk)
                                       int64_t chunk, MPI_Comm comm) {
  LX_CHECK(chunk >= 0 && chunk <= INT_MAX);
  lx_watchdog_waiting("the ZeRO-1 all-gather of the updated weights");
  LX_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)chunk, LX_MPI_REAL, comm));
  lx_watchdog_done_waiting();
}

/* The sum of x over comm (squared gradient norms of the stages, losses). */
static inline double lx_allreduce_sum_double(double x, MPI_Comm comm) {
  double sum = 0;
  lx_watchdog_waiting("a sum over the %s group (losses, squared gradient norms)", lx_comm_name(comm));
  LX_MPI_CHECK(MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, comm));
  lx_watchdog_done_waiting();
  return sum;
}

#endif
