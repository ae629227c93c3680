/* lx_state.h — training-state checkpoints (--save, --resume): everything a
 * run needs to continue where it stopped, for every plan and model, laid
 * out so that a run saved under one plan (tp, pp, dp, ZeRO-1, sequence
 * parallelism) continues under another.
 *
 * One file, written by all ranks at once and committed atomically (the
 * protocol of lx_checkpoint.h: PATH.tmp at full size, every rank pwrites its
 * share and fsyncs, rank 0 renames PATH.tmp to PATH and syncs the
 * directory). Little-endian as the machine writes it:
 *
 *   offset 0      lx_state_run: magic "LYNXSTAT", version, the plan that
 *                 wrote it (ranks, stages, tp, dp, B, T, micro-batches),
 *                 the steps done, the settings that decide the losses
 *                 (steps, seed, peak lr, and those of lx_train_settings
 *                 that differ from the model file's: the learning rate and
 *                 the dropout masks are pure functions of these and the
 *                 step), the number of tensors and of training windows,
 *                 the training data's fingerprint, a checksum of the
 *                 tensors' arrays and one of the header itself, the data
 *                 positions and the tensor table (each 0 in the files of
 *                 programs that did not record it)
 *   offset 4096   int64 next training window of each data-parallel replica
 *   then          lx_state_tensor of every parameter tensor of the model,
 *                 sorted by name: its whole shape and where its data lie
 *   data          from a multiple of 4096: per tensor, its weights, AdamW
 *                 m and AdamW v (and under PipeDream-2BW the weights before
 *                 the last update), each the whole tensor as fp32 rows x cols,
 *                 row-major, the vocabulary unpadded (lx_param_tensor's
 *                 rows and cols: the same under every plan)
 *
 * Every rank writes the rows and columns it holds (a tensor-parallel rank
 * its shard, a ZeRO-1 replica its share of the moments, the CUDA program
 * its fp32 masters) with lx_tensor_io.h and reads back those the plan that
 * resumes gives it. Valid C11 and C++17. */
#ifndef LX_STATE_H
#define LX_STATE_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_checkpoint.h" /* the create / write / commit protocol and PATH.tmp */
#include "lx_data.h"
#include "lx_options.h" /* lx_train_settings */

#include <stdint.h>

#define LX_STATE_MAGIC "LYNXSTAT"
#define LX_STATE_VERSION 2
#define LX_STATE_ALIGN 4096

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
   * A program generated from other training values in the model file
   * reads them as its own. */
  uint32_t overridden;
  uint32_t delayed_update; /* 1: a PipeDream-2BW run's, whose previous weights follow v; else 0 */
  lx_train_settings overrides;
  int64_t tensors; /* entries of the tensor table */
  int64_t windows; /* of the training data, which a resumed run must have too */
  uint64_t data_fingerprint; /* of the training data's content (lx_loader_fingerprint); 0: not recorded */
  uint64_t state_checksum;   /* of every tensor's arrays (lx_resume.h); 0: not recorded */
  uint64_t header_checksum;  /* of the header, positions and table (below); 0: not recorded */
} lx_state_run;

/* A parameter tensor of the model: weights, m and v (and the previous
 * weights) at offset, offset + bytes, offset + 2 bytes (offset + 3 bytes;
 * bytes: 4 rows cols). */
typedef struct {
  char name[64];
  int64_t rows, cols, offset;
} lx_state_tensor;

static inline int64_t lx_state_round_up(int64_t bytes) {
  return (bytes + LX_STATE_ALIGN - 1) / LX_STATE_ALIGN * LX_STATE_ALIGN;
}

static inline int64_t lx_state_tensor_bytes(const lx_state_tensor *t) { return 4 * t->rows * t->cols; }

/* The arrays each tensor has: weights, m, v, and under 2BW the previous weights. */
static inline int lx_state_arrays(const lx_state_run *run) { return run->delayed_update ? 4 : 3; }

static inline int64_t lx_state_table_offset(const lx_state_run *run) {
  return LX_STATE_ALIGN + 8 * (int64_t)run->data_parallel;
}

static int lx_state_by_name(const void *a, const void *b) {
  return strncmp(((const lx_state_tensor *)a)->name, ((const lx_state_tensor *)b)->name, 64);
}

/* Sorts the tensors by name, keeps each once (every tp rank and replica
 * lists the tensors it holds a part of) and gives them their places;
 * returns their number and the file's size in *bytes. */
static inline int lx_state_layout(const lx_state_run *run, lx_state_tensor *tensors, int n, int64_t *bytes) {
  qsort(tensors, (size_t)n, sizeof *tensors, lx_state_by_name);
  int unique = 0;
  for (int i = 0; i < n; i++)
    if (!unique || lx_state_by_name(&tensors[unique - 1], &tensors[i])) tensors[unique++] = tensors[i];
  int64_t at = lx_state_round_up(lx_state_table_offset(run) + (int64_t)sizeof(lx_state_tensor) * unique);
  for (int i = 0; i < unique; i++) {
    tensors[i].offset = at;
    at += lx_state_arrays(run) * lx_state_tensor_bytes(&tensors[i]);
  }
  *bytes = at;
  return unique;
}

/* FNV-1a over the header as the file holds it (its header_checksum 0), the
 * replicas' data positions and the tensor table; never 0, which says "not
 * recorded". A flipped bit there (the step, a position, a tensor's place)
 * would otherwise resume in range and wrong, silently. */
static inline uint64_t lx_state_header_checksum(const lx_state_run *run, const int64_t *positions,
                                                const lx_state_tensor *tensors) {
  lx_state_run header;
  memcpy(&header, run, sizeof header);
  header.header_checksum = 0;
  uint64_t hash = lx_fnv1a(14695981039346656037ULL, &header, sizeof header);
  hash = lx_fnv1a(hash, positions, 8 * (size_t)run->data_parallel);
  return lx_fnv1a(hash, tensors, sizeof *tensors * (size_t)run->tensors) | 1;
}

/* Rank 0: PATH.tmp at its full size with the header, the replicas' data
 * positions and the tensor table. */
static inline void lx_state_create(const char *path, const lx_state_run *run, const int64_t *positions,
                                   const lx_state_tensor *tensors, int64_t total_bytes) {
  char *tmp = NULL;
  int fd = lx_checkpoint_create_tmp(path, total_bytes, &tmp);
  lx_state_run header;
  memcpy(&header, run, sizeof header);
  header.header_checksum = lx_state_header_checksum(run, positions, tensors);
  if (lx_pwrite_full(fd, &header, sizeof header, 0) != 0 ||
      lx_pwrite_full(fd, positions, 8 * (int64_t)run->data_parallel, LX_STATE_ALIGN) != 0 ||
      lx_pwrite_full(fd, tensors, (int64_t)sizeof *tensors * run->tensors, lx_state_table_offset(run)) != 0)
    lx_die("cannot write checkpoint %s: %s", tmp, strerror(errno));
  close(fd);
  free(tmp);
}

/* ---- reading --------------------------------------------------------------------- */

/* Whether path begins as a training-state checkpoint does. */
static inline int lx_state_is_checkpoint(const char *path) {
  char magic[8], why[128];
  int fd = lx_open_data_file(path, why, sizeof why);
  if (fd < 0) return 0; /* its reader says why */
  int is_state = lx_pread_full(fd, magic, 8, 0) == 0 && !memcmp(magic, LX_STATE_MAGIC, 8);
  close(fd);
  return is_state;
}

static inline void lx_state_read(int fd, const char *path, void *dst, int64_t bytes, int64_t offset,
                                 const char *what) {
  if (lx_pread_full(fd, dst, bytes, offset) != 0)
    lx_die("checkpoint %s: cannot read %s: %s", path, what,
           errno ? strerror(errno) : "the file is truncated");
}

/* A training-state checkpoint opened to resume from: its header, data
 * positions and tensor table, read and checked, and the descriptor its
 * tensors are read through. Everything comes through that one descriptor:
 * a save that renames another state into path meanwhile (a requeued twin of
 * the job) must not give this run one file's header and another's tensors. */
typedef struct {
  int fd;
  lx_state_run run;
  int64_t *positions;       /* the next training window of each saved replica */
  lx_state_tensor *tensors; /* sorted by name, each inside the file */
} lx_state_file;

/* The run header, checked against this program (expect): the plan may
 * differ, but not what makes the training windows and the steps (the
 * micro-batch's sequences and length, the sequences of a step,
 * micro-batches times replicas). */
static inline void lx_state_check_run(const char *path, const lx_state_run *run, const lx_state_run *expect,
                                      int64_t size) {
  if (memcmp(run->magic, LX_STATE_MAGIC, 8) != 0)
    lx_die("%s is not a training-state checkpoint of lynx (written by --save); weights load with --init",
           path);
  if (run->version != LX_STATE_VERSION)
    lx_die("checkpoint %s has version %d; this program reads version %d", path, run->version,
           LX_STATE_VERSION);
  const char *fields[] = {"micro-batch size", "sequence length", "sequences per step (micro-batches x dp)"};
  const int64_t found[] = {run->batch, run->seq_len, (int64_t)run->micro_batches * run->data_parallel};
  const int64_t want[] = {expect->batch, expect->seq_len,
                          (int64_t)expect->micro_batches * expect->data_parallel};
  for (int i = 0; i < 3; i++)
    if (found[i] != want[i])
      lx_die("checkpoint %s was written by a run with another %s: %lld; this program has %lld", path,
             fields[i], (long long)found[i], (long long)want[i]);
  if (run->steps < 1 || run->step < 1 || run->step > run->steps)
    lx_die("checkpoint %s is corrupt: it says step %d of %d; a run saves after a step from 1 to its last",
           path, run->step, run->steps);
  if (run->data_parallel < 1 || run->tensors < 1 || lx_state_table_offset(run) > size ||
      run->tensors > (size - lx_state_table_offset(run)) / (int64_t)sizeof(lx_state_tensor))
    lx_die("checkpoint %s is corrupt: %d replicas and %lld tensors do not fit its %lld bytes", path,
           run->data_parallel, (long long)run->tensors, (long long)size);
}

static inline void lx_state_check_positions(const char *path, const lx_state_run *run,
                                            const int64_t *positions) {
  for (int r = 0; r < run->data_parallel; r++)
    if (positions[r] < 0 || positions[r] >= run->windows || (positions[r] - r) % run->data_parallel != 0)
      lx_die(
          "checkpoint %s is corrupt: replica %d of %d continues at training window %lld of its data's %lld "
          "(replica r reads windows r, r + %d, ...)",
          path, r, run->data_parallel, (long long)positions[r], (long long)run->windows, run->data_parallel);
}

/* Each table entry lies in the file, and the names are sorted (the table is searched). */
static inline void lx_state_check_tensors(const char *path, const lx_state_run *run, lx_state_tensor *tensors,
                                          int64_t size) {
  int arrays = lx_state_arrays(run);
  for (int64_t i = 0; i < run->tensors; i++) {
    lx_state_tensor *t = &tensors[i];
    t->name[sizeof t->name - 1] = '\0';
    /* in this order, so that no product overflows: the arrays' bytes are at most the file's */
    if (t->rows < 1 || t->cols < 1 || t->cols > size || t->rows > size / 4 / arrays / t->cols ||
        t->offset < 0 || t->offset > size - arrays * lx_state_tensor_bytes(t))
      lx_die("checkpoint %s is corrupt: its tensor %s (%lld x %lld at byte %lld) does not fit its %lld bytes",
             path, t->name, (long long)t->rows, (long long)t->cols, (long long)t->offset, (long long)size);
    if (i > 0 && lx_state_by_name(&tensors[i - 1], t) >= 0)
      lx_die("checkpoint %s is corrupt: its tensor table is not sorted by name (%s after %s)", path, t->name,
             tensors[i - 1].name);
  }
}

/* Opens the checkpoint at path and checks its header against this program
 * (expect), then its data positions and tensor table against the header's
 * checksum and the file's size. */
static inline lx_state_file lx_state_open(const char *path, const lx_state_run *expect) {
  lx_state_file f;
  memset(&f, 0, sizeof f);
  f.fd = lx_open_checkpoint(path);
  int64_t size = lx_file_size(f.fd);
  lx_state_read(f.fd, path, &f.run, sizeof f.run, 0, "its header");
  lx_state_check_run(path, &f.run, expect, size);
  f.positions = (int64_t *)LX_MALLOC(8 * (size_t)f.run.data_parallel);
  f.tensors = (lx_state_tensor *)LX_MALLOC(sizeof *f.tensors * (size_t)f.run.tensors);
  lx_state_read(f.fd, path, f.positions, 8 * (int64_t)f.run.data_parallel, LX_STATE_ALIGN,
                "its data positions");
  lx_state_read(f.fd, path, f.tensors, (int64_t)sizeof *f.tensors * f.run.tensors,
                lx_state_table_offset(&f.run), "its tensor table");
  if (f.run.header_checksum &&
      lx_state_header_checksum(&f.run, f.positions, f.tensors) != f.run.header_checksum)
    lx_die("checkpoint %s is corrupt: its header, data positions or tensor table do not match the checksum "
           "saved with them (a damaged file or storage)",
           path);
  lx_state_check_positions(path, &f.run, f.positions);
  lx_state_check_tensors(path, &f.run, f.tensors, size);
  return f;
}

static inline void lx_state_close(lx_state_file *f) {
  close(f->fd);
  free(f->positions), free(f->tensors);
}

/* The table's entry of `name`, or NULL. */
static inline const lx_state_tensor *lx_state_find(const lx_state_tensor *tensors, int64_t n,
                                                   const char *name) {
  lx_state_tensor key;
  memset(&key, 0, sizeof key);
  strncpy(key.name, name, sizeof key.name - 1);
  return (const lx_state_tensor *)bsearch(&key, tensors, (size_t)n, sizeof key, lx_state_by_name);
}

#endif
