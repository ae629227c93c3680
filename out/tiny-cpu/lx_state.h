/* lx_state.h — training-state checkpoints (--save, --resume): everything a
 * run needs to continue exactly where it stopped, for every plan and model.
 *
 * One file, written by all ranks at once and committed atomically (the
 * protocol of lx_checkpoint.h: PATH.tmp at full size, every rank pwrites its
 * own section and fsyncs, rank 0 renames PATH.tmp to PATH and syncs the
 * directory). Little-endian as the machine writes it:
 *
 *   offset 0      lx_state_run: magic "LYNXSTAT", version, the plan (ranks,
 *                 stages, tp, dp, B, T, micro-batches), the steps done and
 *                 the settings that decide the losses (steps, seed, peak
 *                 lr, and those of lx_train_settings that differ from the
 *                 model file's: the learning rate and the dropout masks
 *                 are pure functions of these and the step)
 *   offset 4096   int64 section offset of each world rank, in rank order
 *   sections      each at a multiple of 4096: an lx_state_section (the
 *                 rank's place, its data loader's next window, the names
 *                 and sizes of its parts) and at +4096 the parts' bytes one
 *                 after another: the rank's weights and AdamW moments as its
 *                 arena holds them (under ZeRO-1 the replica's share of the
 *                 moments: each rank saves and restores its own shard)
 *
 * A run resumes under the plan that wrote it (same ranks, same part sizes);
 * every difference is reported with the field that differs. Valid C11 and
 * C++17. */
#ifndef LX_STATE_H
#define LX_STATE_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_checkpoint.h" /* the create / write / commit protocol and PATH.tmp */
#include "lx_data.h"
#include "lx_options.h" /* lx_train_settings */

#include <stdint.h>

#define LX_STATE_MAGIC "LYNXSTAT"
#define LX_STATE_VERSION 1
#define LX_STATE_ALIGN 4096
#define LX_STATE_MAX_PARTS 8

/* The run, the same on every rank. */
typedef struct {
  char magic[8];
  int32_t version, ranks;
  int32_t stages, tensor_parallel, data_parallel, micro_batches;
  int32_t batch, seq_len;
  int32_t step;  /* optimizer steps done */
  int32_t steps; /* the run's length: the learning-rate schedule's */
  uint64_t seed;
  double lr;
  /* The run's other settings that decide the losses, where they differ
   * from the program's defaults (its model file's): bit k of overridden
   * says that the field at byte 4 k of lx_train_settings is in overrides.
   * A run under the defaults writes zeros here, as before these were
   * recorded, so that its checkpoint stays byte for byte the same; a
   * program generated from other training values in the model file reads
   * them as its own. */
  uint32_t overridden, unused;
  lx_train_settings overrides;
} lx_state_run;

/* One part of a rank's state, in memory. */
typedef struct {
  const char *name;
  void *data;
  int64_t elements;
  int32_t element_bytes;
} lx_state_part;

typedef struct {
  char name[24];
  int64_t elements;
  int32_t element_bytes, unused;
} lx_state_part_info;

/* A rank's section header. */
typedef struct {
  int32_t rank, stage, tp_rank, replica;
  int64_t next_window, windows; /* the training data loader's position and its window count */
  int32_t parts, unused;
  lx_state_part_info part[LX_STATE_MAX_PARTS];
} lx_state_section;

static inline lx_state_part lx_state_part_of(const char *name, void *data, int64_t elements,
                                             int element_bytes) {
  lx_state_part p;
  p.name = name, p.data = data, p.elements = elements, p.element_bytes = element_bytes;
  return p;
}

static inline int64_t lx_state_round_up(int64_t bytes) {
  return (bytes + LX_STATE_ALIGN - 1) / LX_STATE_ALIGN * LX_STATE_ALIGN;
}

static inline int64_t lx_state_table_bytes(int ranks) { return lx_state_round_up(8 * (int64_t)ranks); }

static inline int64_t lx_state_parts_bytes(const lx_state_part *parts, int n) {
  int64_t bytes = 0;
  for (int i = 0; i < n; i++)
    bytes += parts[i].elements * parts[i].element_bytes;
  return bytes;
}

static inline void lx_state_describe(lx_state_section *s, const lx_state_part *parts, int n) {
  LX_CHECK(n <= LX_STATE_MAX_PARTS);
  s->parts = n;
  for (int i = 0; i < n; i++) {
    memset(s->part[i].name, 0, sizeof s->part[i].name);
    strncpy(s->part[i].name, parts[i].name, sizeof s->part[i].name - 1);
    s->part[i].elements = parts[i].elements;
    s->part[i].element_bytes = parts[i].element_bytes;
  }
}

/* Rank 0: PATH.tmp at its full size with the run header and the offsets. */
static inline void lx_state_create(const char *path, const lx_state_run *run, const int64_t *offsets,
                                   int64_t total_bytes) {
  char *tmp = lx_checkpoint_tmp_path(path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) lx_die("cannot create checkpoint %s: %s", tmp, strerror(errno));
  lx_pending_checkpoint(tmp);
  if (ftruncate(fd, (off_t)total_bytes) != 0 || lx_pwrite_full(fd, run, sizeof *run, 0) != 0 ||
      lx_pwrite_full(fd, offsets, 8 * (int64_t)run->ranks, LX_STATE_ALIGN) != 0)
    lx_die("cannot write checkpoint %s: %s", tmp, strerror(errno));
  close(fd);
  free(tmp);
}

/* Every rank: its section into PATH.tmp, flushed to disk. */
static inline void lx_state_write_section(const char *path, int64_t offset, const lx_state_section *s,
                                          const lx_state_part *parts, int n) {
  char *tmp = lx_checkpoint_tmp_path(path);
  int fd = open(tmp, O_WRONLY);
  if (fd < 0) lx_die("cannot open checkpoint %s: %s", tmp, strerror(errno));
  int failed = lx_pwrite_full(fd, s, sizeof *s, offset);
  offset += LX_STATE_ALIGN;
  for (int i = 0; i < n && !failed; i++) {
    int64_t bytes = parts[i].elements * parts[i].element_bytes;
    failed = lx_pwrite_full(fd, parts[i].data, bytes, offset);
    offset += bytes;
  }
  if (failed || fsync(fd) != 0) lx_die("cannot write checkpoint %s: %s", tmp, strerror(errno));
  close(fd);
  free(tmp);
}

/* Collective over MPI_COMM_WORLD: every rank passes its own section and
 * parts; the file appears at path complete, or not at all. */
static inline void lx_state_save(const char *path, const lx_state_run *run, const lx_state_section *s,
                                 const lx_state_part *parts, int n) {
  int rank = 0;
  LX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  int64_t mine = LX_STATE_ALIGN + lx_state_round_up(lx_state_parts_bytes(parts, n));
  int64_t *sizes = (int64_t *)LX_MALLOC(sizeof(int64_t) * (size_t)run->ranks);
  LX_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT64_T, sizes, 1, MPI_INT64_T, MPI_COMM_WORLD));
  int64_t end = LX_STATE_ALIGN + lx_state_table_bytes(run->ranks), offset = 0;
  for (int r = 0; r < run->ranks; r++) {
    if (r == rank) offset = end;
    int64_t size = sizes[r];
    sizes[r] = end; /* from here on: the offsets */
    end += size;
  }
  if (rank == 0) lx_state_create(path, run, sizes, end);
  LX_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); /* PATH.tmp exists at full size */
  lx_state_write_section(path, offset, s, parts, n);
  LX_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); /* every section is on disk */
  if (rank == 0) lx_checkpoint_commit(path);
  LX_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); /* nobody reads PATH before the rename */
  free(sizes);
}

/* ---- reading --------------------------------------------------------------------- */

static inline void lx_state_read(int fd, const char *path, void *dst, int64_t bytes, int64_t offset,
                                 const char *what) {
  if (lx_pread_full(fd, dst, bytes, offset) != 0)
    lx_die("checkpoint %s: cannot read %s: %s", path, what,
           errno ? strerror(errno) : "the file is truncated");
}

/* The run header of the checkpoint at path, checked against the plan of
 * this program (expect: its plan fields; the step and the settings ignored). */
static inline lx_state_run lx_state_read_run(const char *path, const lx_state_run *expect) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) lx_die("cannot open checkpoint %s: %s", path, strerror(errno));
  lx_state_run run;
  lx_state_read(fd, path, &run, sizeof run, 0, "its header");
  close(fd);
  if (memcmp(run.magic, LX_STATE_MAGIC, 8) != 0)
    lx_die(
        "%s is not a training-state checkpoint of lynx (written by --save); llm.c weights load with --init",
        path);
  if (run.version != LX_STATE_VERSION)
    lx_die("checkpoint %s has version %d; this program reads version %d", path, run.version,
           LX_STATE_VERSION);
  const char *fields[] = {"ranks",
                          "pipeline stages",
                          "tensor-parallel ranks",
                          "data-parallel replicas",
                          "micro-batches per step",
                          "micro-batch size",
                          "sequence length"};
  const int32_t found[] = {run.ranks,         run.stages, run.tensor_parallel, run.data_parallel,
                           run.micro_batches, run.batch,  run.seq_len};
  const int32_t want[] = {expect->ranks,         expect->stages,        expect->tensor_parallel,
                          expect->data_parallel, expect->micro_batches, expect->batch,
                          expect->seq_len};
  for (int i = 0; i < 7; i++)
    if (found[i] != want[i])
      lx_die("checkpoint %s was written under another plan: %s %d, this program has %d", path, fields[i],
             found[i], want[i]);
  return run;
}

static inline void lx_state_check_parts(const char *path, const lx_state_section *s,
                                        const lx_state_part *parts, int n) {
  if (s->parts != n)
    lx_die("checkpoint %s: rank %d saved %d parts, this program has %d", path, s->rank, s->parts, n);
  for (int i = 0; i < n; i++) {
    const lx_state_part_info *p = &s->part[i];
    if (strncmp(p->name, parts[i].name, sizeof p->name) != 0 || p->elements != parts[i].elements ||
        p->element_bytes != parts[i].element_bytes)
      lx_die(
          "checkpoint %s: rank %d's %.*s holds %lld elements of %d bytes; this program's %s has %lld of %d "
          "(another model or plan?)",
          path, s->rank, (int)sizeof p->name, p->name, (long long)p->elements, p->element_bytes,
          parts[i].name, (long long)parts[i].elements, parts[i].element_bytes);
  }
}

/* This rank's section of the checkpoint at path into parts; returns its header. */
static inline lx_state_section lx_state_load(const char *path, int rank, int ranks,
                                             const lx_state_part *parts, int n) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) lx_die("cannot open checkpoint %s: %s", path, strerror(errno));
  int64_t offset = 0;
  lx_state_section s;
  lx_state_read(fd, path, &offset, 8, LX_STATE_ALIGN + 8 * (int64_t)rank, "its table of sections");
  if (offset < LX_STATE_ALIGN + lx_state_table_bytes(ranks) || offset % LX_STATE_ALIGN != 0)
    lx_die("checkpoint %s is corrupt: rank %d's section is at offset %lld", path, rank, (long long)offset);
  lx_state_read(fd, path, &s, sizeof s, offset, "a section header");
  if (s.rank != rank) lx_die("checkpoint %s is corrupt: rank %d's section names rank %d", path, rank, s.rank);
  lx_state_check_parts(path, &s, parts, n);
  offset += LX_STATE_ALIGN;
  for (int i = 0; i < n; i++) {
    int64_t bytes = parts[i].elements * parts[i].element_bytes;
    lx_state_read(fd, path, parts[i].data, bytes, offset, parts[i].name);
    offset += bytes;
  }
  close(fd);
  return s;
}

#endif
