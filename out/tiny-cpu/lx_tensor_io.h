/* lx_tensor_io.h — moving a rank's share of a parameter tensor to and from
 * a file that holds the whole tensor, row-major (or transposed, or with
 * rotary pairs reordered within heads: lx_hf_layout), a block at a time:
 * the Hugging Face checkpoints (lx_safetensors.h) and the training state
 * (lx_state.h) both write every plan's shares into the same places, so
 * that a file moves between plans. lx_weights.h cuts a rank's elements into
 * the runs of whole rows that lx_tensor_segment takes. Valid C11 and C++17. */
#ifndef LX_TENSOR_IO_H
#define LX_TENSOR_IO_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_check.h"
#include "lx_data.h"   /* lx_pread_full, lx_pwrite_full */
#include "lx_params.h" /* lx_hf_layout */

#include <math.h>
#include <stdint.h>

/* ---- element types ---------------------------------------------------------------- */

typedef enum { LX_FILE_F32, LX_FILE_F16, LX_FILE_BF16 } lx_file_dtype;

static inline int lx_dtype_bytes(lx_file_dtype d) { return d == LX_FILE_F32 ? 4 : 2; }

static inline float lx_f16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exponent = (h >> 10) & 31, mantissa = h & 1023;
  float magnitude;
  if (exponent == 0)
    magnitude = ldexpf((float)mantissa, -24); /* subnormal */
  else if (exponent == 31)
    magnitude = mantissa ? NAN : INFINITY;
  else
    magnitude = ldexpf((float)(mantissa | 1024), (int)exponent - 25);
  return sign ? -magnitude : magnitude;
}

static inline float lx_bf16_bits_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* ---- moving a tensor's rows between a rank's parameters and the file --------------- */

typedef struct {
  int fd;
  const char *path, *name; /* the file and the tensor, for messages */
  int writing;
  int64_t at; /* the tensor's first byte in the file */
  lx_file_dtype dtype;
  lx_hf_layout layout;
  int head_dim;         /* LX_HF_ROPE_PAIRS */
  long long rows, cols; /* as the parameter holds them */
  long long chunk_rows; /* whole rows moved at once */
  char *raw;            /* reading: the file's bytes of a run */
  float *gathered;      /* a transposed run, in file order */
} lx_tensor_io;

/* The tensor of rows x cols at byte `at` of the open file fd, its rows in
 * the file as `layout` says. */
static inline lx_tensor_io lx_tensor_io_open(int fd, const char *path, const char *name, int writing,
                                             int64_t at, lx_file_dtype dtype, lx_hf_layout layout,
                                             int head_dim, long long rows, long long cols) {
  lx_tensor_io io;
  io.fd = fd, io.path = path, io.name = name, io.writing = writing, io.at = at, io.dtype = dtype;
  io.layout = layout, io.head_dim = head_dim, io.rows = rows, io.cols = cols;
  io.chunk_rows = cols < (1 << 20) ? (1 << 20) / cols : 1;
  long long run = rows > cols ? rows : cols;
  if (run < io.chunk_rows * cols) run = io.chunk_rows * cols;
  io.raw = (char *)LX_MALLOC((size_t)(4 * run));
  io.gathered = (float *)LX_MALLOC((size_t)(4 * rows));
  return io;
}

/* The file's row of the parameter's row `row` (of this tensor's rows). */
static inline long long lx_file_row(const lx_tensor_io *io, long long row) {
  if (io->layout != LX_HF_ROPE_PAIRS) return row;
  long long D = io->head_dim, j = row % D;
  return row - j + (j % 2) * (D / 2) + j / 2;
}

static inline void lx_tensor_io_close(lx_tensor_io *io) {
  free(io->raw);
  free(io->gathered);
}

/* n values, contiguous in the file from element `element` of the tensor. */
static inline void lx_tensor_move(lx_tensor_io *io, float *values, long long n, long long element) {
  int size = lx_dtype_bytes(io->dtype);
  int64_t offset = io->at + (int64_t)size * element;
  if (io->writing) {
    if (lx_pwrite_full(io->fd, values, 4 * n, offset))
      lx_die("cannot write checkpoint %s: %s", io->path, strerror(errno));
    return;
  }
  if (lx_pread_full(io->fd, io->raw, (int64_t)size * n, offset))
    lx_die("checkpoint %s: cannot read %s: %s", io->path, io->name, errno ? strerror(errno) : "truncated");
  for (long long i = 0; i < n; i++) {
    uint16_t half;
    if (io->dtype == LX_FILE_F32) {
      memcpy(&values[i], io->raw + 4 * i, 4);
      continue;
    }
    memcpy(&half, io->raw + 2 * i, 2);
    values[i] = io->dtype == LX_FILE_F16 ? lx_f16_to_float(half) : lx_bf16_bits_to_float(half);
  }
}

/* A block of the parameter: its rows [r0, r0 + nrows) of this tensor and
 * columns [c0, c0 + ncols), row after row at `local`. */
static inline void lx_tensor_block(lx_tensor_io *io, float *local, long long r0, long long nrows,
                                   long long c0, long long ncols) {
  if (io->layout == LX_HF_TRANSPOSED) { /* column c of the block is part of the file's row c */
    for (long long c = 0; c < ncols; c++) {
      if (io->writing)
        for (long long r = 0; r < nrows; r++)
          io->gathered[r] = local[r * ncols + c];
      lx_tensor_move(io, io->gathered, nrows, (c0 + c) * io->rows + r0);
      if (!io->writing)
        for (long long r = 0; r < nrows; r++)
          local[r * ncols + c] = io->gathered[r];
    }
  } else if (io->layout == LX_HF_ROWS && ncols == io->cols) {
    for (long long r = 0; r < nrows; r += io->chunk_rows) /* raw holds chunk_rows */
      lx_tensor_move(io, local + r * ncols, (nrows - r < io->chunk_rows ? nrows - r : io->chunk_rows) * ncols,
                     (r0 + r) * io->cols);
  } else {
    for (long long r = 0; r < nrows; r++)
      lx_tensor_move(io, local + r * ncols, ncols, lx_file_row(io, r0 + r) * io->cols + c0);
  }
}

/* Runs of a row, gathered into the largest blocks that are contiguous in
 * the rank's memory, so that a transposed tensor moves a column at a time. */
typedef struct {
  float *local;
  long long r0, nrows, c0, ncols;
} lx_tensor_blocks;

static inline void lx_tensor_flush(lx_tensor_io *io, lx_tensor_blocks *b) {
  if (b->nrows) lx_tensor_block(io, b->local, b->r0, b->nrows, b->c0, b->ncols);
  b->nrows = 0;
}

/* Columns [c, c + n) of the tensor's row r, at local. */
static inline void lx_tensor_segment(lx_tensor_io *io, lx_tensor_blocks *b, float *local, long long r,
                                     long long c, long long n) {
  if (b->nrows && r == b->r0 + b->nrows && c == b->c0 && n == b->ncols && local == b->local + b->nrows * n) {
    b->nrows++;
    return;
  }
  lx_tensor_flush(io, b);
  b->local = local, b->r0 = r, b->nrows = 1, b->c0 = c, b->ncols = n;
}

#endif
