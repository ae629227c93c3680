/* lx_weights.h — a stage's weights in the checkpoint formats of others:
 * llm.c's GPT-2 file and a Hugging Face safetensors checkpoint, each rank
 * moving its own share (its tensor-parallel shard, the parts it saves) for
 * --init, --export-llmc and --export-hf; and fine-tuning's adapters merged
 * into the weights those exports write. The rank's runs of elements here
 * (shard_run, moved_part, move_rows) serve the training state of
 * lx_resume.h too. Valid C11 and C++17.
 *
 * A part of lx_loop.h, after the stage file's definitions (lx_stage.h). */
#ifndef LX_WEIGHTS_H
#define LX_WEIGHTS_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_checkpoint.h"
#include "lx_safetensors.h"
#include "lx_stage.h"
#include "lx_tensor_io.h"
#include "lx_watchdog.h"

#include <math.h>

#if FINETUNE
/* The adapted weights W + scale B A into weights (fp32 at params-region
 * indices, every tensor of the stage): what --export-llmc and --export-hf
 * write, the base model with the adapters merged in. A rank merges its
 * shard: W's rows and columns are B's rows and A's columns on the rank. */
static void merge_adapters(float *weights) {
  for (int i = 0; i < LORA_ADAPTERS; i++) {
    const lx_lora_adapter *a = &lora_adapters[i];
    const lx_param_tensor *down_t = &param_tensors[a->lora_a], *up_t = &param_tensors[a->lora_b];
    const float *down = weights + down_t->element, *up = weights + up_t->element;
    long long rows = up_t->elements / a->rank, cols = down_t->elements / a->rank;
    float *w = weights + param_tensors[a->weight].element;
    for (long long o = 0; o < rows; o++)
      for (long long r = 0; r < a->rank; r++) {
        float s = (float)(a->scale * up[o * a->rank + r]);
        for (long long c = 0; c < cols; c++)
          w[o * cols + c] += s * down[r * cols + c];
      }
  }
}
#endif

/* Tensor parallelism: the run of this rank's elements of t that starts at
 * local element e (counted from t->element) and is contiguous in the whole
 * tensor too (row-major, as all ranks together hold it): to the end of a
 * row (split 2, columns) or of a run of rows (split 1); returns its end and
 * puts its place in the whole tensor into *whole. */
static long long shard_run(const lx_param_tensor *t, long long e, long long *whole) {
  if (t->split == 1) {
    long long first = 0;
    for (int k = 0; k < t->pieces; k++) {
      long long size = t->piece_rows[k] * t->row_elements;
      if (e < first + size) {
        *whole = (t->piece_row[k] + TP_RANK * t->piece_rows[k]) * t->row_elements + (e - first);
        return first + size;
      }
      first += size;
    }
    LX_FATAL("element past the pieces of a tensor-parallel tensor");
  }
  if (t->split == 2) {
    long long row = e / t->row_elements, column = e % t->row_elements;
    *whole = row * t->whole_row + TP_RANK * t->row_elements + column;
    return (row + 1) * t->row_elements;
  }
  *whole = e; /* replicated: the whole tensor */
  return t->elements;
}

/* The elements [*lo, *hi) of t (params-region indices) that this rank
 * moves: reading, all it holds; writing, its saved part, none of a tied
 * copy (the first stage writes the table) nor of a replicated tensor on tp
 * ranks but the first. Returns whether there are any. */
static int moved_part(const lx_param_tensor *t, int writing, long long *lo, long long *hi) {
  int replicated = t->split == 0 || t->split == 3;
  *lo = t->element, *hi = t->element + t->elements;
  if (writing && (!t->writes_file || (replicated && TP_RANK > 0))) return 0;
  if (writing) saved_part(t, lo, hi);
  return *hi > *lo;
}

/* This stage's slices of llm.c's file: per parameter tensor with a place in
 * it, the runs of the rank's elements [lo, hi) that are contiguous in both
 * (a tensor-parallel shard is rows of the file's, or a column block of each
 * row); reading, every tensor the file holds (the last stage's tied copy of
 * wte too); writing, only the parts this rank saves, a replicated tensor by
 * tp rank 0. Returns them, malloc'd, and their number in *n. */
static lx_ckpt_slice *checkpoint_slices(int writing, int *n) {
  int cap = ALL_PARAM_TENSORS;
  lx_ckpt_slice *out = (lx_ckpt_slice *)LX_MALLOC(sizeof(lx_ckpt_slice) * (size_t)cap);
  *n = 0;
  for (int i = 0; i < ALL_PARAM_TENSORS; i++) {
    const lx_param_tensor *t = &param_tensors[i];
    long long lo, hi;
    if (t->file_element < 0 || !moved_part(t, writing, &lo, &hi)) continue;
    for (long long e = lo - t->element; e < hi - t->element;) {
      long long whole = 0, end = shard_run(t, e, &whole);
      if (end > hi - t->element) end = hi - t->element;
      if (*n == cap) out = (lx_ckpt_slice *)realloc(out, sizeof(lx_ckpt_slice) * (size_t)(cap *= 2));
      if (!out) LX_FATAL("out of memory");
      lx_ckpt_slice *slice = &out[(*n)++];
      slice->name = t->name, slice->file_element = t->file_element + whole;
      slice->param_element = t->element + e, slice->elements = end - e;
      e = end;
    }
  }
  return out;
}

/* Elements [first, first + n) of weights, read from path for tensor name,
 * are finite: a NaN there would make every loss NaN from step 1, or where
 * no step reads it (a padded vocabulary row) fail the save at the end. */
static void require_finite_weights(const char *path, const char *name, const float *weights, long long first,
                                   long long n) {
  for (long long e = first; e < first + n; e++)
    if (!isfinite(weights[e]))
      lx_die("checkpoint %s: tensor %s holds %g at element %lld: weights must be finite", path, name,
             (double)weights[e], e - first);
}

/* The stage's weights from the checkpoint at path (llm.c's or a Hugging
 * Face checkpoint), as fp32 at their params-region indices. */
static void read_hf_checkpoint(const char *path, float *weights);
static void read_checkpoint(const char *path, float *weights /* (ALL_PARAM_ELEMENTS) */) {
  lx_watchdog_waiting("the weights in %s (reading them)", path);
  if (lx_hf_is_checkpoint(path)) {
    read_hf_checkpoint(path, weights);
  } else {
    int n = 0;
    lx_ckpt_slice *slices = checkpoint_slices(0, &n);
    lx_checkpoint_load(path, &gpt2_header, slices, n, weights);
    for (int i = 0; i < n; i++)
      require_finite_weights(path, slices[i].name, weights, slices[i].param_element, slices[i].elements);
    free(slices);
  }
  lx_watchdog_done_waiting();
  lx_watchdog_progress();
}

/* Collective over every rank: each writes its saved parts of weights. */
static void write_checkpoint(const char *path, const float *weights /* (ALL_PARAM_ELEMENTS) */) {
  int n = 0;
  lx_ckpt_slice *slices = checkpoint_slices(1, &n);
  lx_checkpoint_save_all(path, &gpt2_header, slices, n, weights, MPI_COMM_WORLD);
  free(slices);
}

/* ---- Hugging Face checkpoints (lx_safetensors.h) --------------------------------------- */

/* This rank's elements [lo, hi) (params-region indices) of parameter t
 * that are rows [first_row, first_row + io->rows) of the whole tensor,
 * between data (element e of t, counted from t->element, at
 * data[e - first]) and the io's file, in blocks (lx_tensor_segment). */
static void move_rows(lx_tensor_io *io, const lx_param_tensor *t, long long first_row, float *data,
                      long long first, long long lo, long long hi) {
  lx_tensor_blocks blocks;
  memset(&blocks, 0, sizeof blocks);
  for (long long e = lo - t->element; e < hi - t->element;) {
    long long whole = 0, end = shard_run(t, e, &whole);
    if (end > hi - t->element) end = hi - t->element;
    for (long long w = whole; w < whole + (end - e);) {
      long long row = w / io->cols, column = w % io->cols;
      long long n = io->cols - column < whole + (end - e) - w ? io->cols - column : whole + (end - e) - w;
      if (row >= first_row && row < first_row + io->rows)
        lx_tensor_segment(io, &blocks, data + e + (w - whole) - first, row - first_row, column, n);
      w += n;
    }
    e = end;
  }
  lx_tensor_flush(io, &blocks);
}

#if HF_CHECKPOINT
/* Rank 0: dir/config.json, committed like a checkpoint; the norms' epsilon
 * is the kernels'. */
static void write_hf_config(const char *dir) {
  cJSON *config = cJSON_Parse(HF_CONFIG);
  if (!config) LX_FATAL("the generated config.json does not parse");
  cJSON_AddNumberToObject(config, HF_NORM_EPS_KEY, LX_TARGET_NORM_EPS);
  char *text = cJSON_Print(config), *path = lx_hf_join(dir, "config.json"), *tmp = NULL;
  cJSON_Delete(config);
  FILE *f = fdopen(lx_checkpoint_create_tmp(path, 0, &tmp), "w");
  if (!f) lx_die("cannot create %s: %s", tmp, strerror(errno));
  if (fprintf(f, "%s\n", text) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0)
    lx_die("cannot write %s: %s", tmp, strerror(errno));
  lx_checkpoint_commit(path);
  free(text), free(path), free(tmp);
}

/* What write_hf_checkpoint hands lx_checkpoint_collective. */
typedef struct {
  const lx_hf_file_plan *plan;
  float *weights; /* (ALL_PARAM_ELEMENTS) */
} hf_export;

static void create_hf_file(const char *path, void *ctx) {
  lx_hf_create(path, ((const hf_export *)ctx)->plan);
}

/* This rank's rows of every tensor of the stage, into the open PATH.tmp. */
static void write_hf_parts(int fd, const char *tmp, void *ctx) {
  const hf_export *e = (const hf_export *)ctx;
  for (int i = 0; i < HF_PARTS; i++) {
    const lx_hf_part *part = &hf_parts[i];
    const lx_param_tensor *t = &param_tensors[part->param];
    long long lo, hi;
    if (!moved_part(t, 1, &lo, &hi)) continue;
    int64_t at = 8 + e->plan->header_bytes +
                 e->plan->offsets[part->tensor * HF_LAYERS + (part->layer > 0 ? part->layer : 0)];
    lx_tensor_io io = lx_hf_io(fd, tmp, 1, at, LX_FILE_F32, &hf_tensors[part->tensor]);
    move_rows(&io, t, part->first_row, e->weights + t->element, 0, lo, hi);
    lx_tensor_io_close(&io);
  }
}

/* Collective: the weights as dir/model.safetensors (F32) and its config.json. */
static void write_hf_checkpoint(const char *dir, float *weights /* (ALL_PARAM_ELEMENTS) */) {
  char *path = lx_hf_join(dir, "model.safetensors");
  lx_hf_file_plan plan = lx_hf_plan(hf_tensors, HF_TENSORS, HF_LAYERS);
  hf_export export_ctx = {&plan, weights};
  lx_checkpoint_collective(path, MPI_COMM_WORLD, create_hf_file, write_hf_parts, &export_ctx);
  if (lx_world_rank() == 0) write_hf_config(dir);
  LX_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); /* nobody reads config.json before its rename */
  lx_hf_plan_free(&plan);
  free(path);
}

/* Every element of a parameter the file holds rows of starts at zero: rows
 * it does not hold (the vocabulary's padding) stay so, as in llm.c's files. */
static void read_hf_checkpoint(const char *path, float *weights /* (ALL_PARAM_ELEMENTS) */) {
  lx_hf_source src = lx_hf_source_open(path);
  for (int i = 0; i < HF_PARTS; i++) {
    const lx_param_tensor *t = &param_tensors[hf_parts[i].param];
    memset(weights + t->element, 0, sizeof(float) * (size_t)t->elements);
  }
  for (int i = 0; i < HF_PARTS; i++) {
    const lx_param_tensor *t = &param_tensors[hf_parts[i].param];
    lx_tensor_io io = lx_hf_find(&src, &hf_tensors[hf_parts[i].tensor], hf_parts[i].layer);
    move_rows(&io, t, hf_parts[i].first_row, weights + t->element, 0, t->element, t->element + t->elements);
    lx_tensor_io_close(&io);
    char name[256];
    lx_hf_name(&hf_tensors[hf_parts[i].tensor], hf_parts[i].layer, name, sizeof name);
    require_finite_weights(path, name, weights, t->element, t->elements);
  }
  lx_hf_source_close(&src);
}
#else
static void write_hf_checkpoint(const char *dir, float *weights) {
  (void)dir, (void)weights;
  LX_FATAL("no Hugging Face checkpoint for this model (require_hf_checkpoints)");
}
static void read_hf_checkpoint(const char *path, float *weights) {
  (void)path, (void)weights;
  LX_FATAL("no Hugging Face checkpoint for this model (require_init_checkpoint)");
}
#endif

#endif
