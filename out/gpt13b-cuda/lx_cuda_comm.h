/* lx_cuda_comm.h — the communication backend of a CUDA stage program: every
 * transfer between ranks goes through these calls (host C++, included by
 * stageN.cu through lx_cuda_parallel.h).
 *
 * Two backends, chosen once at start (`--comm`, run.sh passes it on):
 *   nccl  (default) NCCL on the GPUs' links, enqueued on the caller's stream
 *         like a kernel: the schedule's streams and events order it.
 *   host  the same transfers through host memory with Open MPI. A collective
 *         or a send waits for its stream, copies to the host and runs the
 *         MPI call (a collective's result is copied back on the same
 *         stream). A receive is enqueued on its stream as ncclRecv is: the
 *         stream, not the host, waits for the message (the stream waits
 *         for a flag in mapped host memory, lx_cuda_wait_flag, then the copy
 *         to the device), so a schedule that posts a receive long before
 *         its data is sent (1F1B posts its gradient receives first) runs as
 *         it does on NCCL, where each communicator is used from one stream
 *         (the pipeline's channels, lx_cuda_parallel.h) and so runs in that
 *         stream's order. A host function cannot do that wait: CUDA may run
 *         other streams' work after a pending host function, and a host
 *         function may not wait on what the device has still to do. The
 *         rank's progress thread (lx_comm_host_start) completes the receives and
 *         raises their flags, and keeps MPI moving while the host waits on
 *         CUDA. Slow, but the order of every stream's work is the one NCCL
 *         gives; it needs MPI_THREAD_MULTIPLE. It exists because NCCL
 *         refuses two ranks on one GPU: with it, tp x pp x dp layouts run as
 *         several ranks on a single GPU (make test-gpu). It cannot be
 *         captured in a CUDA graph.
 * Reductions of bf16 run in fp32 on the host and round back to bf16 once.
 * Sends and receives are posted at once, inside a group or not; a send's
 * host buffer is freed once MPI has sent it (lx_comm_complete), a receive
 * lands in one of the pinned staging buffers made before the first step. */
#ifndef LX_CUDA_COMM_H
#define LX_CUDA_COMM_H

#include "lx_check.h" /* LX_MALLOC */
#include "lx_cuda_api.h"
#include "lx_mpi_errors.h"
#include "lx_watchdog.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

typedef enum { LX_COMM_NCCL, LX_COMM_HOST } lx_comm_backend;
typedef enum { LX_COMM_BF16, LX_COMM_F32 } lx_comm_type;
typedef enum { LX_COMM_SUM, LX_COMM_MAX } lx_comm_op;

/* A group of ranks: the NCCL communicator (nccl backend) over the ranks of
 * an MPI one. */
typedef struct {
  ncclComm_t nccl;
  MPI_Comm mpi;
  int rank, size;
} lx_comm;

static lx_comm_backend lx_comm_kind = LX_COMM_NCCL;

/* "nccl" or "host" (--comm; NULL: nccl); returns whether name is one. */
static inline int lx_comm_choose(const char *name) {
  if (!name || !strcmp(name, "nccl"))
    lx_comm_kind = LX_COMM_NCCL;
  else if (!strcmp(name, "host"))
    lx_comm_kind = LX_COMM_HOST;
  else
    return 0;
  return 1;
}

static inline size_t lx_comm_type_bytes(lx_comm_type t) { return t == LX_COMM_BF16 ? 2 : 4; }
static inline ncclDataType_t lx_comm_nccl_type(lx_comm_type t) {
  return t == LX_COMM_BF16 ? ncclBfloat16 : ncclFloat32;
}

/* The group over MPI communicator `group`: its rank and size and, under
 * NCCL, the id its rank 0 made, into *id; lx_comm_connect makes the NCCL
 * communicator from it (alone, or several at once inside a group call). */
static inline lx_comm lx_comm_join(MPI_Comm group, ncclUniqueId *id) {
  lx_comm c;
  c.mpi = group, c.nccl = NULL;
  LX_MPI_CHECK(MPI_Comm_rank(group, &c.rank));
  LX_MPI_CHECK(MPI_Comm_size(group, &c.size));
  if (lx_comm_kind == LX_COMM_HOST) return c;
  if (c.rank == 0) NCCL_CHECK(ncclGetUniqueId(id));
  LX_MPI_CHECK(MPI_Bcast(id, sizeof *id, MPI_BYTE, 0, group));
  return c;
}

static inline void lx_comm_connect(lx_comm *c, const ncclUniqueId *id) {
  if (lx_comm_kind == LX_COMM_NCCL) NCCL_CHECK(ncclCommInitRank(&c->nccl, c->size, *id, c->rank));
}

static inline lx_comm lx_comm_create(MPI_Comm group) {
  ncclUniqueId id;
  lx_comm c = lx_comm_join(group, &id);
  lx_comm_connect(&c, &id);
  return c;
}

static inline void lx_comm_drain(void);

static inline void lx_comm_destroy(lx_comm *c) {
  lx_comm_drain();
  if (c->nccl) NCCL_CHECK(ncclCommDestroy(c->nccl));
  c->nccl = NULL;
}

/* An NCCL error raised asynchronously (a peer gone): abort and stop every rank. */
static inline void lx_comm_check_async(lx_comm *c, const char *name) {
  if (!c->nccl) return;
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(ncclCommGetAsyncError(c->nccl, &async));
  if (async == ncclSuccess) return;
  (void)ncclCommAbort(c->nccl);
  lx_cuda_fail_at(__FILE__, __LINE__, name, "NCCL", ncclGetErrorString(async));
}

/* ---- the host backend's staging -------------------------------------------------- */

/* count elements of type at dev, on the host once stream s has written them. */
static inline void *lx_comm_to_host(const void *dev, size_t bytes, cudaStream_t s) {
  void *host = LX_MALLOC(bytes > 0 ? bytes : 1);
  CUDA_CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return host;
}

/* host's bytes to dev, in order on stream s; frees host. */
static inline void lx_comm_to_device(void *dev, void *host, size_t bytes, cudaStream_t s) {
  CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaStreamSynchronize(s)); /* host is freed next */
  free(host);
}

static inline int lx_comm_int_count(size_t count) {
  if (count > (size_t)INT32_MAX)
    lx_cuda_fail_at(__FILE__, __LINE__, "lx_comm", "host",
                    "a transfer of over 2^31 elements (use --comm nccl)");
  return (int)count;
}

/* bf16 to fp32 and back, for the host's reductions. */
static inline float *lx_comm_widen(const void *host, size_t count, lx_comm_type type) {
  float *wide = (float *)LX_MALLOC(sizeof(float) * (count > 0 ? count : 1));
  if (type == LX_COMM_F32) {
    memcpy(wide, host, sizeof(float) * count);
  } else {
    for (size_t i = 0; i < count; i++)
      wide[i] = __bfloat162float(((const lx_bf16 *)host)[i]);
  }
  return wide;
}

/* wide (count floats) as type, into a new host buffer; frees wide. */
static inline void *lx_comm_narrow(float *wide, size_t count, lx_comm_type type) {
  if (type == LX_COMM_F32) return wide;
  lx_bf16 *narrow = (lx_bf16 *)LX_MALLOC(sizeof(lx_bf16) * (count > 0 ? count : 1));
  for (size_t i = 0; i < count; i++)
    narrow[i] = __float2bfloat16(wide[i]);
  free(wide);
  return narrow;
}

/* The host backend's receives land in pinned staging buffers, made once
 * before the first step (lx_comm_host_start): allocating or freeing pinned
 * memory synchronizes the whole device, which would wait for a receive that
 * only this rank's later work makes possible. A staging buffer is busy from
 * its receive's post until its stream has copied it. */
typedef struct {
  MPI_Request request; /* the progress thread tests it while `testing` */
  int testing;         /* set by the main thread once posted, cleared by the progress thread */
  int *arrived;        /* mapped host memory: raised once the message is in */
  int *arrived_device; /* ... as the waiting kernel sees it */
  void *host;          /* pinned: the copy to the device is asynchronous */
  cudaEvent_t copied;  /* the device has its data */
  int busy;
} lx_comm_staging;

static lx_comm_staging *lx_comm_stagings;
static int *lx_comm_flags; /* the stagings' arrived flags, one mapped allocation */
static int lx_comm_staging_count;
static size_t lx_comm_staging_bytes;

/* A host-backend send in flight, until MPI has sent its host buffer. */
typedef struct {
  MPI_Request request;
  void *host;
} lx_comm_transfer;

static lx_comm_transfer *lx_comm_pending;
static int lx_comm_pending_count, lx_comm_pending_cap;

/* Frees what is done: a send's buffer once MPI has sent it, a staging buffer
 * once its stream copied it. Never waits: a stage whose send waited for the
 * peer's receive while the peer's send waited for its own would deadlock,
 * where NCCL's streams do not. */
static inline void lx_comm_complete(void) {
  int kept = 0;
  for (int i = 0; i < lx_comm_pending_count; i++) {
    lx_comm_transfer *t = &lx_comm_pending[i];
    int done = 0;
    LX_MPI_CHECK(MPI_Test(&t->request, &done, MPI_STATUS_IGNORE));
    if (done)
      free(t->host);
    else
      lx_comm_pending[kept++] = *t;
  }
  lx_comm_pending_count = kept;
  for (int i = 0; i < lx_comm_staging_count; i++) {
    lx_comm_staging *r = &lx_comm_stagings[i];
    if (!r->busy) continue;
    cudaError_t query = cudaEventQuery(r->copied);
    if (query != cudaErrorNotReady) CUDA_CHECK(query);
    r->busy = query != cudaSuccess;
  }
}

/* At the end of the program: every send delivered, every receive landed. */
static inline void lx_comm_drain(void) {
  for (int i = 0; i < lx_comm_pending_count; i++) {
    LX_MPI_CHECK(MPI_Wait(&lx_comm_pending[i].request, MPI_STATUS_IGNORE));
    free(lx_comm_pending[i].host);
  }
  lx_comm_pending_count = 0;
  for (int i = 0; i < lx_comm_staging_count; i++) {
    if (lx_comm_stagings[i].busy) CUDA_CHECK(cudaEventSynchronize(lx_comm_stagings[i].copied));
    lx_comm_stagings[i].busy = 0;
  }
}

/* A free staging buffer for a receive of bytes. */
static inline lx_comm_staging *lx_comm_staging_for(size_t bytes) {
  if (bytes > lx_comm_staging_bytes)
    lx_cuda_fail_at(__FILE__, __LINE__, "lx_comm_recv", "host",
                    "a receive larger than the host backend's staging buffers (a lynxgen bug)");
  lx_comm_complete();
  for (int i = 0; i < lx_comm_staging_count; i++)
    if (!lx_comm_stagings[i].busy) return &lx_comm_stagings[i];
  lx_cuda_fail_at(__FILE__, __LINE__, "lx_comm_recv", "host",
                  "every staging buffer of the host backend holds a receive in flight: the schedule posts "
                  "more than the program's STAGED_RECEIVES (a lynxgen bug)");
  return NULL;
}

/* buf (bytes) from the group's rank peer, enqueued on stream s. The flag is
 * lowered before the progress thread may test the request, which it stops
 * testing before it raises the flag: a buffer is reused only once its
 * stream saw the flag, so the thread is done with it by then. */
static inline void lx_comm_host_receive(void *buf, size_t bytes, int peer, lx_comm *c, cudaStream_t s) {
  lx_comm_staging *r = lx_comm_staging_for(bytes);
  r->busy = 1;
  __atomic_store_n(r->arrived, 0, __ATOMIC_RELAXED);
  LX_MPI_CHECK(MPI_Irecv(r->host, lx_comm_int_count(bytes), MPI_BYTE, peer, 0, c->mpi, &r->request));
  __atomic_store_n(&r->testing, 1, __ATOMIC_RELEASE);
  lx_cuda_wait_flag(r->arrived_device, s);
  CUDA_CHECK(cudaMemcpyAsync(buf, r->host, bytes, cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaEventRecord(r->copied, s));
}

/* buf (bytes) to the group's rank peer once stream s has written it; the host goes on. */
static inline void lx_comm_host_send(const void *buf, size_t bytes, int peer, lx_comm *c, cudaStream_t s) {
  if (lx_comm_pending_count == lx_comm_pending_cap) {
    lx_comm_pending_cap = lx_comm_pending_cap ? 2 * lx_comm_pending_cap : 16;
    lx_comm_pending = (lx_comm_transfer *)realloc(lx_comm_pending,
                                                  sizeof *lx_comm_pending * (size_t)lx_comm_pending_cap);
    if (!lx_comm_pending) LX_FATAL("out of memory");
  }
  lx_comm_transfer *t = &lx_comm_pending[lx_comm_pending_count++];
  t->host = lx_comm_to_host(buf, bytes, s);
  LX_MPI_CHECK(MPI_Isend(t->host, lx_comm_int_count(bytes), MPI_BYTE, peer, 0, c->mpi, &t->request));
  lx_comm_complete();
}

/* The rank's progress thread, from lx_comm_host_start to lx_comm_host_stop:
 * it completes the posted receives and raises their flags, and probes a
 * communicator of its own. Without a single-copy path between processes
 * (Linux CMA, XPMEM), Open MPI moves a message over its eager size only while
 * the sender is inside an MPI call, and the main thread spends its waits in
 * CUDA. */
static std::atomic<bool> lx_comm_progressing(false);
static pthread_t lx_comm_progress_thread;
static MPI_Comm lx_comm_progress_comm;

static void lx_comm_complete_receives(void) {
  for (int i = 0; i < lx_comm_staging_count; i++) {
    lx_comm_staging *r = &lx_comm_stagings[i];
    if (!__atomic_load_n(&r->testing, __ATOMIC_ACQUIRE)) continue;
    int done = 0;
    LX_MPI_CHECK(MPI_Test(&r->request, &done, MPI_STATUS_IGNORE));
    if (!done) continue;
    __atomic_store_n(&r->testing, 0, __ATOMIC_RELAXED);
    __atomic_store_n(r->arrived, 1, __ATOMIC_RELEASE);
  }
}

static void *lx_comm_progress(void *) {
  while (lx_comm_progressing.load()) {
    lx_comm_complete_receives();
    int flag = 0;
    LX_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, lx_comm_progress_comm, &flag, MPI_STATUS_IGNORE));
    usleep(20);
  }
  return NULL;
}

/* After lx_comm_choose and cudaSetDevice, collective over MPI_COMM_WORLD;
 * nothing for nccl. receives staging buffers of bytes each: as many receives
 * as the stage can have in flight (its STAGED_RECEIVES). */
static inline void lx_comm_host_start(int receives, size_t bytes) {
  if (lx_comm_kind != LX_COMM_HOST) return;
  lx_comm_staging_count = receives;
  lx_comm_staging_bytes = bytes;
  size_t slots = (size_t)(receives > 0 ? receives : 1);
  lx_comm_stagings = (lx_comm_staging *)LX_CALLOC(slots, sizeof *lx_comm_stagings);
  int *flags_device = NULL;
  CUDA_CHECK(cudaHostAlloc((void **)&lx_comm_flags, slots * sizeof(int), cudaHostAllocMapped));
  CUDA_CHECK(cudaHostGetDevicePointer((void **)&flags_device, lx_comm_flags, 0));
  for (int i = 0; i < receives; i++) {
    lx_comm_staging *r = &lx_comm_stagings[i];
    r->arrived = lx_comm_flags + i, r->arrived_device = flags_device + i;
    CUDA_CHECK(cudaMallocHost(&r->host, bytes > 0 ? bytes : 1));
    CUDA_CHECK(cudaEventCreateWithFlags(&r->copied, cudaEventDisableTiming));
  }
  LX_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &lx_comm_progress_comm));
  lx_comm_progressing.store(true);
  if (pthread_create(&lx_comm_progress_thread, NULL, lx_comm_progress, NULL) != 0)
    LX_FATAL("cannot start the host backend's progress thread");
}

/* Before MPI_Finalize, once every transfer is drained. */
static inline void lx_comm_host_stop(void) {
  if (!lx_comm_progressing.load()) return;
  lx_comm_progressing.store(false);
  pthread_join(lx_comm_progress_thread, NULL);
  LX_MPI_CHECK(MPI_Comm_free(&lx_comm_progress_comm));
  for (int i = 0; i < lx_comm_staging_count; i++) {
    CUDA_CHECK(cudaFreeHost(lx_comm_stagings[i].host));
    CUDA_CHECK(cudaEventDestroy(lx_comm_stagings[i].copied));
  }
  CUDA_CHECK(cudaFreeHost(lx_comm_flags));
  free(lx_comm_stagings);
  lx_comm_staging_count = 0;
}

/* ---- the calls ---------------------------------------------------------------------- */

/* An NCCL group of sends and receives; the host backend posts each at once. */
static inline void lx_comm_group_start(void) {
  if (lx_comm_kind == LX_COMM_NCCL) NCCL_CHECK(ncclGroupStart());
}

static inline void lx_comm_group_end(void) {
  if (lx_comm_kind == LX_COMM_NCCL) NCCL_CHECK(ncclGroupEnd());
}

/* What the host thread waits on next, for --watchdog to name: the stream's
 * work before the call (which may wait on a receive), then MPI's. */
static inline void lx_comm_host_waiting(const char *call, size_t count, const lx_comm *c) {
  lx_watchdog_waiting(
      "the host backend's %s of %zu elements (group of %d ranks): first its stream's earlier work, "
      "then MPI",
      call, count, c->size);
}

/* recv = send reduced over the group, count elements (in place when equal). */
static inline void lx_comm_all_reduce(const void *send, void *recv, size_t count, lx_comm_type type,
                                      lx_comm_op op, lx_comm *c, cudaStream_t s) {
  if (lx_comm_kind == LX_COMM_NCCL) {
    NCCL_CHECK(ncclAllReduce(send, recv, count, lx_comm_nccl_type(type),
                             op == LX_COMM_SUM ? ncclSum : ncclMax, c->nccl, s));
    return;
  }
  lx_comm_host_waiting("all-reduce", count, c);
  void *host = lx_comm_to_host(send, count * lx_comm_type_bytes(type), s);
  float *wide = lx_comm_widen(host, count, type);
  free(host);
  LX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, wide, lx_comm_int_count(count), MPI_FLOAT,
                             op == LX_COMM_SUM ? MPI_SUM : MPI_MAX, c->mpi));
  lx_watchdog_done_waiting();
  lx_comm_to_device(recv, lx_comm_narrow(wide, count, type), count * lx_comm_type_bytes(type), s);
}

/* recv (count) = this rank's count-element block of send (size x count) summed over the group. */
static inline void lx_comm_reduce_scatter(const void *send, void *recv, size_t count, lx_comm_type type,
                                          lx_comm *c, cudaStream_t s) {
  if (lx_comm_kind == LX_COMM_NCCL) {
    NCCL_CHECK(ncclReduceScatter(send, recv, count, lx_comm_nccl_type(type), ncclSum, c->nccl, s));
    return;
  }
  lx_comm_host_waiting("reduce-scatter", count, c);
  size_t whole = count * (size_t)c->size;
  void *host = lx_comm_to_host(send, whole * lx_comm_type_bytes(type), s);
  float *wide = lx_comm_widen(host, whole, type);
  free(host);
  LX_MPI_CHECK(
      MPI_Reduce_scatter_block(MPI_IN_PLACE, wide, lx_comm_int_count(count), MPI_FLOAT, MPI_SUM, c->mpi));
  lx_watchdog_done_waiting();
  lx_comm_to_device(recv, lx_comm_narrow(wide, count, type), count * lx_comm_type_bytes(type), s);
}

/* recv (size x count) = every rank's send (count), in rank order. */
static inline void lx_comm_all_gather(const void *send, void *recv, size_t count, lx_comm_type type,
                                      lx_comm *c, cudaStream_t s) {
  if (lx_comm_kind == LX_COMM_NCCL) {
    NCCL_CHECK(ncclAllGather(send, recv, count, lx_comm_nccl_type(type), c->nccl, s));
    return;
  }
  lx_comm_host_waiting("all-gather", count, c);
  size_t bytes = count * lx_comm_type_bytes(type);
  void *mine = lx_comm_to_host(send, bytes, s);
  void *all = LX_MALLOC(bytes * (size_t)c->size + 1);
  int n = lx_comm_int_count(bytes);
  LX_MPI_CHECK(MPI_Allgather(mine, n, MPI_BYTE, all, n, MPI_BYTE, c->mpi));
  lx_watchdog_done_waiting();
  free(mine);
  lx_comm_to_device(recv, all, bytes * (size_t)c->size, s);
}

/* count elements of buf to (send) or from (receive) the group's rank peer. */
static inline void lx_comm_point_to_point(int receive, void *buf, size_t count, lx_comm_type type, int peer,
                                          lx_comm *c, cudaStream_t s) {
  if (lx_comm_kind == LX_COMM_NCCL) {
    if (receive)
      NCCL_CHECK(ncclRecv(buf, count, lx_comm_nccl_type(type), peer, c->nccl, s));
    else
      NCCL_CHECK(ncclSend(buf, count, lx_comm_nccl_type(type), peer, c->nccl, s));
    return;
  }
  size_t bytes = count * lx_comm_type_bytes(type);
  if (receive) {
    lx_comm_host_receive(buf, bytes, peer, c, s);
  } else {
    lx_comm_host_waiting("send", count, c);
    lx_comm_host_send(buf, bytes, peer, c, s);
    lx_watchdog_done_waiting();
  }
}

/* A channel of the pipeline (lx_cuda_parallel.h) joins its sender, rank 0, to its receiver, rank 1. */
static inline void lx_channel_send(const void *buf, size_t count, lx_comm_type type, lx_comm *channel,
                                   cudaStream_t s) {
  lx_comm_point_to_point(0, (void *)buf, count, type, 1, channel, s);
}

static inline void lx_channel_recv(void *buf, size_t count, lx_comm_type type, lx_comm *channel,
                                   cudaStream_t s) {
  lx_comm_point_to_point(1, buf, count, type, 0, channel, s);
}

#endif
