/* lx_checkpoint.h — GPT-2 checkpoints in llm.c's format, read and written a
 * pipeline stage at a time.
 *
 * File: a 256-int32 header (magic 20240326, version 3 = fp32, max_seq_len,
 * vocab, layers, heads, channels, padded_vocab, then zeros), then every
 * parameter as fp32 in llm.c's order:
 *   wte (Vp, C), wpe (maxT, C), ln1w (L, C), ln1b (L, C), qkvw (L, 3C, C),
 *   qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C), ln2w (L, C),
 *   ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C),
 *   fcprojb (L, C), lnfw (C), lnfb (C).
 * A stage holds some of these ranges (its layers of each (L, ...) tensor,
 * wte/wpe on the first stage, lnf and the tied wte on the last). The code
 * printer describes them with a table of lx_ckpt_slice: `elements` floats at
 * `file_element` of the file's parameter array live at `param_element` of the
 * stage's fp32 parameter region. lx_gpt2_tensor_offset() gives the file
 * offset of each tensor.
 *
 * Saving is collective and crash-safe; every stage writes its own slices into
 * one shared file with pwrite, so no rank gathers the model:
 *   rank 0:     lx_checkpoint_create(path, h);        PATH.tmp, full size, header
 *   all ranks:  MPI_Barrier
 *   all ranks:  lx_checkpoint_save(path, h, slices, n, params, rank == 0);
 *   all ranks:  MPI_Barrier                           every slice is on disk
 *   rank 0:     lx_checkpoint_commit(path);           rename PATH.tmp -> PATH
 * (lx_checkpoint_save_all does exactly this, through lx_checkpoint_collective,
 * which the training state and the Hugging Face export use too.) A crash at any
 * point leaves the previous PATH intact. Slices of different ranks must not
 * overlap, except where they hold equal values (a tied wte kept by the first
 * and the last stage: let one of them list it). Loading a file and saving the
 * same slices back gives a byte-identical file. */
#ifndef LX_CHECKPOINT_H
#define LX_CHECKPOINT_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_check.h"
#include "lx_data.h" /* lx_pread_full, lx_pwrite_full, lx_file_size */
#include "lx_mpi_errors.h"

#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#define LX_GPT2_MAGIC 20240326
#define LX_GPT2_VERSION_FP32 3
#define LX_GPT2_HEADER_INTS 256
#define LX_GPT2_HEADER_BYTES (LX_GPT2_HEADER_INTS * (int64_t)sizeof(int32_t))

typedef struct {
  int max_seq_len, vocab, layers, heads, channels, padded_vocab;
} lx_gpt2_header;

typedef struct {
  const char *name;      /* for messages, e.g. "qkvw[2:4]" */
  int64_t file_element;  /* offset in the file's parameter array (floats) */
  int64_t param_element; /* offset in the stage's parameter region (floats) */
  int64_t elements;
} lx_ckpt_slice;

/* The tensors of the file, in file order. */
enum {
  LX_GPT2_WTE,
  LX_GPT2_WPE,
  LX_GPT2_LN1W,
  LX_GPT2_LN1B,
  LX_GPT2_QKVW,
  LX_GPT2_QKVB,
  LX_GPT2_ATTPROJW,
  LX_GPT2_ATTPROJB,
  LX_GPT2_LN2W,
  LX_GPT2_LN2B,
  LX_GPT2_FCW,
  LX_GPT2_FCB,
  LX_GPT2_FCPROJW,
  LX_GPT2_FCPROJB,
  LX_GPT2_LNFW,
  LX_GPT2_LNFB,
  LX_GPT2_NUM_TENSORS
};

static inline const char *lx_gpt2_tensor_name(int tensor) {
  static const char *const names[LX_GPT2_NUM_TENSORS] = {
      "wte",  "wpe",  "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
      "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb"};
  LX_CHECK(tensor >= 0 && tensor < LX_GPT2_NUM_TENSORS);
  return names[tensor];
}

/* Elements of one tensor (all layers together). */
static inline int64_t lx_gpt2_tensor_size(const lx_gpt2_header *h, int tensor) {
  int64_t C = h->channels, L = h->layers;
  switch (tensor) {
  case LX_GPT2_WTE: return (int64_t)h->padded_vocab * C;
  case LX_GPT2_WPE: return (int64_t)h->max_seq_len * C;
  case LX_GPT2_QKVW: return L * 3 * C * C;
  case LX_GPT2_QKVB: return L * 3 * C;
  case LX_GPT2_ATTPROJW: return L * C * C;
  case LX_GPT2_FCW:
  case LX_GPT2_FCPROJW: return L * 4 * C * C;
  case LX_GPT2_FCB: return L * 4 * C;
  case LX_GPT2_LNFW:
  case LX_GPT2_LNFB: return C;
  default: return L * C; /* ln1w, ln1b, attprojb, ln2w, ln2b, fcprojb */
  }
}

/* Offset of a tensor in the file's parameter array (floats after the header). */
static inline int64_t lx_gpt2_tensor_offset(const lx_gpt2_header *h, int tensor) {
  int64_t offset = 0;
  for (int t = 0; t < tensor; t++)
    offset += lx_gpt2_tensor_size(h, t);
  return offset;
}

static inline int64_t lx_gpt2_param_count(const lx_gpt2_header *h) {
  return lx_gpt2_tensor_offset(h, LX_GPT2_NUM_TENSORS);
}

static inline int64_t lx_gpt2_file_bytes(const lx_gpt2_header *h) {
  return LX_GPT2_HEADER_BYTES + 4 * lx_gpt2_param_count(h);
}

static inline void lx_gpt2_header_encode(const lx_gpt2_header *h, int32_t out[LX_GPT2_HEADER_INTS]) {
  memset(out, 0, LX_GPT2_HEADER_BYTES);
  out[0] = LX_GPT2_MAGIC;
  out[1] = LX_GPT2_VERSION_FP32;
  out[2] = h->max_seq_len, out[3] = h->vocab, out[4] = h->layers;
  out[5] = h->heads, out[6] = h->channels, out[7] = h->padded_vocab;
}

/* Compares the six shape fields; prints one line per mismatch and returns
 * their number. */
static inline int lx_gpt2_header_mismatches(const char *path, const lx_gpt2_header *expect,
                                            const int32_t found[LX_GPT2_HEADER_INTS]) {
  static const char *const fields[6] = {"max_seq_len", "vocab",    "layers",
                                        "heads",       "channels", "padded_vocab"};
  const int want[6] = {expect->max_seq_len, expect->vocab,    expect->layers,
                       expect->heads,       expect->channels, expect->padded_vocab};
  int bad = 0;
  for (int i = 0; i < 6; i++)
    if (found[2 + i] != want[i]) {
      fprintf(stderr,
              "lynx: error: checkpoint %s does not fit this model: %s is %d in the file, expected %d\n", path,
              fields[i], found[2 + i], want[i]);
      bad++;
    }
  return bad;
}

/* A checkpoint file opened to read (lx_open_data_file), or exit 1 saying why not. */
static inline int lx_open_checkpoint(const char *path) {
  char why[128];
  int fd = lx_open_data_file(path, why, sizeof why);
  if (fd < 0) lx_die("cannot open checkpoint %s: %s", path, why);
  return fd;
}

/* Checks magic, version, shape and size; dies with a message otherwise.
 * A file of a longer context than the model's (llm.c's GPT-2 releases have
 * max_seq_len 1024) fits too: *expect takes the file's max_seq_len. */
static inline void lx_checkpoint_check(const char *path, int fd, lx_gpt2_header *expect) {
  int32_t header[LX_GPT2_HEADER_INTS];
  int64_t size = lx_file_size(fd);
  if (size < LX_GPT2_HEADER_BYTES || lx_pread_full(fd, header, LX_GPT2_HEADER_BYTES, 0) != 0)
    lx_die("checkpoint %s is truncated: %lld bytes, shorter than its %lld-byte header", path, (long long)size,
           (long long)LX_GPT2_HEADER_BYTES);
  if (header[0] != LX_GPT2_MAGIC)
    lx_die("%s is not a GPT-2 checkpoint (magic %d, expected %d)", path, header[0], LX_GPT2_MAGIC);
  if (header[1] != LX_GPT2_VERSION_FP32)
    lx_die("checkpoint %s has version %d; this program reads version %d (fp32 parameters)", path, header[1],
           LX_GPT2_VERSION_FP32);
  if (header[2] > expect->max_seq_len) expect->max_seq_len = header[2]; /* the first rows are the model's */
  if (lx_gpt2_header_mismatches(path, expect, header)) exit(LX_EXIT_ERROR);
  int64_t want = lx_gpt2_file_bytes(expect);
  if (size != want)
    lx_die("checkpoint %s is %lld bytes, expected %lld for this model: %s", path, (long long)size,
           (long long)want, size < want ? "truncated" : "trailing data");
}

static inline void lx_checkpoint_check_slice(const lx_gpt2_header *h, const lx_ckpt_slice *s) {
  if (s->file_element < 0 || s->elements < 0 || s->param_element < 0 ||
      s->file_element + s->elements > lx_gpt2_param_count(h))
    lx_die("checkpoint slice %s (elements %lld..%lld) lies outside the model's %lld parameters",
           s->name ? s->name : "?", (long long)s->file_element, (long long)(s->file_element + s->elements),
           (long long)lx_gpt2_param_count(h));
}

/* Reads this stage's slices of the checkpoint at `path` into `params`. */
static inline void lx_checkpoint_load(const char *path, const lx_gpt2_header *expect,
                                      const lx_ckpt_slice *slices, // (n)
                                      int n,
                                      float *params // (stage parameter count)
) {
  int fd = lx_open_checkpoint(path);
  lx_gpt2_header file = *expect;
  lx_checkpoint_check(path, fd, &file);
  /* The slices are laid out for the model's context: a longer file's wpe
   * holds more rows (the model reads the first), which moves every tensor
   * after it by the extra rows. */
  int64_t wpe_end = lx_gpt2_tensor_offset(expect, LX_GPT2_LN1W);
  int64_t shift = lx_gpt2_tensor_offset(&file, LX_GPT2_LN1W) - wpe_end;
  for (int i = 0; i < n; i++) {
    lx_ckpt_slice s = slices[i];
    lx_checkpoint_check_slice(expect, &s);
    if (s.file_element >= wpe_end) s.file_element += shift;
    if (lx_pread_full(fd, params + s.param_element, 4 * s.elements, LX_GPT2_HEADER_BYTES + 4 * s.file_element))
      lx_die("checkpoint %s: cannot read %s: %s", path, s.name, errno ? strerror(errno) : "file shrank");
  }
  close(fd);
}

/* The directory a file at path is in (malloc'd): "." for a bare name. */
static inline char *lx_parent_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return lx_strdup(".");
  char *dir = lx_strdup(path);
  dir[slash == path ? 1 : slash - path] = '\0'; /* "/name": the root */
  return dir;
}

/* PATH.tmp, malloc'd: where a checkpoint is written before it is committed. */
static inline char *lx_checkpoint_tmp_path(const char *path) {
  size_t n = strlen(path) + sizeof(".tmp");
  char *tmp = (char *)LX_MALLOC(n);
  snprintf(tmp, n, "%s.tmp", path);
  return tmp;
}

/* The PATH.tmp this rank writes and that is not committed yet: removed when
 * the rank exits before the commit (an error while saving, the watchdog),
 * so that no half-written file stays behind. */
static char lx_pending_tmp[4096];

static inline void lx_remove_pending_checkpoint(void) {
  if (lx_pending_tmp[0]) (void)unlink(lx_pending_tmp);
  lx_pending_tmp[0] = '\0';
}

static inline void lx_pending_checkpoint(const char *tmp) {
  static int registered;
  if (!registered) registered = atexit(lx_remove_pending_checkpoint) == 0;
  snprintf(lx_pending_tmp, sizeof lx_pending_tmp, "%s", tmp);
}

static inline void lx_checkpoint_write_header(int fd, const char *tmp, const lx_gpt2_header *h) {
  int32_t header[LX_GPT2_HEADER_INTS];
  lx_gpt2_header_encode(h, header);
  if (lx_pwrite_full(fd, header, LX_GPT2_HEADER_BYTES, 0) != 0)
    lx_die("cannot write checkpoint %s: %s", tmp, strerror(errno));
}

/* Rank 0, before the first barrier: a new PATH.tmp of `bytes` zeros, open for
 * writing its head, removed should the rank exit before the commit. Returns
 * the descriptor and the malloc'd name in *tmp. */
static inline int lx_checkpoint_create_tmp(const char *path, int64_t bytes, char **tmp) {
  *tmp = lx_checkpoint_tmp_path(path);
  int fd = open(*tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644); /* never through a link */
  if (fd < 0) lx_die("cannot create checkpoint %s: %s", *tmp, strerror(errno));
  lx_pending_checkpoint(*tmp);
  if (ftruncate(fd, (off_t)bytes) != 0)
    lx_die("cannot size checkpoint %s to %lld bytes: %s", *tmp, (long long)bytes, strerror(errno));
  return fd;
}

/* Every rank, between the barriers: PATH.tmp open for writing its part,
 * removed should this rank exit before the save is done (the others are
 * then taken down before they commit it). */
static inline int lx_checkpoint_open_tmp(const char *path, char **tmp) {
  *tmp = lx_checkpoint_tmp_path(path);
  int fd = open(*tmp, O_WRONLY | O_NOFOLLOW);
  if (fd < 0)
    lx_die("cannot open checkpoint %s: %s (rank 0 creates it before a barrier)", *tmp, strerror(errno));
  lx_pending_checkpoint(*tmp);
  return fd;
}

/* The part written: on disk before the rename commits it. Frees tmp. */
static inline void lx_checkpoint_flush_tmp(int fd, char *tmp) {
  if (fsync(fd) != 0) lx_die("cannot flush checkpoint %s: %s", tmp, strerror(errno));
  close(fd);
  free(tmp);
}

/* Rank 0, before the first barrier: PATH.tmp at its full size, with header. */
static inline void lx_checkpoint_create(const char *path, const lx_gpt2_header *h) {
  char *tmp = NULL;
  int fd = lx_checkpoint_create_tmp(path, lx_gpt2_file_bytes(h), &tmp);
  lx_checkpoint_write_header(fd, tmp, h);
  close(fd);
  free(tmp);
}

/* This rank's slices into the open PATH.tmp (tmp: its name, for messages). */
static inline void lx_checkpoint_write_slices(int fd, const char *tmp, const lx_gpt2_header *h,
                                              const lx_ckpt_slice *slices, // (n)
                                              int n,
                                              const float *params, // (stage parameter count)
                                              int writes_header) {
  if (lx_file_size(fd) != lx_gpt2_file_bytes(h))
    lx_die("checkpoint %s is %lld bytes, expected %lld: was it created for this model?", tmp,
           (long long)lx_file_size(fd), (long long)lx_gpt2_file_bytes(h));
  if (writes_header) lx_checkpoint_write_header(fd, tmp, h);
  for (int i = 0; i < n; i++) {
    const lx_ckpt_slice *s = &slices[i];
    lx_checkpoint_check_slice(h, s);
    if (lx_pwrite_full(fd, params + s->param_element, 4 * s->elements,
                       LX_GPT2_HEADER_BYTES + 4 * s->file_element))
      lx_die("cannot write %s into checkpoint %s: %s", s->name, tmp, strerror(errno));
  }
}

/* Every rank, between the barriers: writes its slices into PATH.tmp and
 * flushes them to disk (so that the rename commits complete data). */
static inline void lx_checkpoint_save(const char *path, const lx_gpt2_header *h,
                                      const lx_ckpt_slice *slices, // (n)
                                      int n,
                                      const float *params, // (stage parameter count)
                                      int writes_header) {
  char *tmp = NULL;
  int fd = lx_checkpoint_open_tmp(path, &tmp);
  lx_checkpoint_write_slices(fd, tmp, h, slices, n, params, writes_header);
  lx_checkpoint_flush_tmp(fd, tmp);
}

/* Rank 0, after the second barrier: PATH.tmp replaces PATH in one step. The
 * directory is synced too, so that the rename itself survives a crash. */
static inline void lx_checkpoint_commit(const char *path) {
  char *tmp = lx_checkpoint_tmp_path(path);
  if (rename(tmp, path) != 0) lx_die("cannot rename %s to %s: %s", tmp, path, strerror(errno));
  lx_pending_tmp[0] = '\0';
  free(tmp);
  char *dir = lx_parent_dir(path);
  int fd = open(dir, O_RDONLY);
  if (fd >= 0) {
    (void)fsync(fd); /* best effort: some file systems refuse fsync on a directory */
    close(fd);
  }
  free(dir);
}

/* The protocol of the file comment for any file, collective over comm:
 * rank 0 of comm calls create_head(path, ctx) (PATH.tmp at full size with its
 * head: lx_checkpoint_create_tmp), every rank write_part(fd, tmp, ctx) into the
 * open PATH.tmp, rank 0 commits. */
typedef void (*lx_checkpoint_creator)(const char *path, void *ctx);
typedef void (*lx_checkpoint_writer)(int fd, const char *tmp, void *ctx);

static inline void lx_checkpoint_collective(const char *path, MPI_Comm comm,
                                            lx_checkpoint_creator create_head,
                                            lx_checkpoint_writer write_part, void *ctx) {
  int rank = 0;
  LX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  if (rank == 0) create_head(path, ctx);
  LX_MPI_CHECK(MPI_Barrier(comm)); /* PATH.tmp exists at full size */
  char *tmp = NULL;
  int fd = lx_checkpoint_open_tmp(path, &tmp);
  write_part(fd, tmp, ctx);
  lx_checkpoint_flush_tmp(fd, tmp);
  LX_MPI_CHECK(MPI_Barrier(comm)); /* every part is on disk */
  if (rank == 0) lx_checkpoint_commit(path);
  LX_MPI_CHECK(MPI_Barrier(comm)); /* nobody reads PATH before the rename */
  lx_pending_tmp[0] = '\0';        /* committed: nothing of this save to remove */
}

/* lx_checkpoint_save_all's slices, for lx_checkpoint_collective. */
typedef struct {
  const lx_gpt2_header *h;
  const lx_ckpt_slice *slices;
  int n, writes_header;
  const float *params;
} lx_checkpoint_slices;

static inline void lx_checkpoint_create_gpt2(const char *path, void *ctx) {
  lx_checkpoint_create(path, ((const lx_checkpoint_slices *)ctx)->h);
}

static inline void lx_checkpoint_write_gpt2(int fd, const char *tmp, void *ctx) {
  const lx_checkpoint_slices *s = (const lx_checkpoint_slices *)ctx;
  lx_checkpoint_write_slices(fd, tmp, s->h, s->slices, s->n, s->params, s->writes_header);
}

/* The protocol of the file comment, collective over comm: every rank passes
 * its own slices; rank 0 of comm creates and commits. */
static inline void lx_checkpoint_save_all(const char *path, const lx_gpt2_header *h,
                                          const lx_ckpt_slice *slices, // (n)
                                          int n,
                                          const float *params, // (stage parameter count)
                                          MPI_Comm comm) {
  int rank = 0;
  LX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  lx_checkpoint_slices ctx = {h, slices, n, rank == 0, params};
  lx_checkpoint_collective(path, comm, lx_checkpoint_create_gpt2, lx_checkpoint_write_gpt2, &ctx);
}

#endif
