/* lx_safetensors.h — Hugging Face checkpoints in the safetensors format:
 * 8 bytes, little-endian, the size N of a JSON header; N bytes of that
 * header, an object whose members name the tensors ({"dtype": "F32",
 * "shape": [rows, cols], "data_offsets": [begin, end]}, offsets from the
 * end of the header) and "__metadata__" (string to string); then the
 * tensors' bytes, each byte in exactly one tensor. The header is read and
 * written with cJSON.
 *
 * The code printer describes the model as that file's tensors (hf_tensors,
 * gen/emit/emit_formats.c) and the stage's parameters as their rows
 * (hf_parts); lx_weights.h walks a rank's elements and moves them through
 * lx_tensor_io, a run at a time. Writing is collective like lx_checkpoint.h's
 * (PATH.tmp at full size, every rank pwrites its part, rank 0 renames);
 * reading takes F32, F16 and BF16 files, one file or a directory as
 * transformers saves it (model.safetensors, or the shards that
 * model.safetensors.index.json names). Valid C11 and C++17. */
#ifndef LX_SAFETENSORS_H
#define LX_SAFETENSORS_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_checkpoint.h" /* the create / write / commit protocol, lx_pread_full */
#include "lx_params.h"     /* lx_hf_tensor, lx_hf_part */
#include "lx_stop.h"       /* lx_probe_save_path */
#include "lx_tensor_io.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#define LX_HF_MAX_HEADER (100LL << 20) /* the safetensors library's bound */

/* Elements of the tensor, and its rows and row length as the parameter holds them. */
static inline long long lx_hf_elements(const lx_hf_tensor *t) {
  return t->shape[0] * (t->dims == 2 ? t->shape[1] : 1);
}
static inline long long lx_hf_rows(const lx_hf_tensor *t) {
  return t->layout == LX_HF_TRANSPOSED ? t->shape[1] : t->shape[0];
}
static inline long long lx_hf_cols(const lx_hf_tensor *t) {
  return t->dims == 1 ? 1 : t->layout == LX_HF_TRANSPOSED ? t->shape[0] : t->shape[1];
}

static inline void lx_hf_name(const lx_hf_tensor *t, int layer, char *buf, size_t size) {
  snprintf(buf, size, t->name, layer);
}

/* The file's tensor t as an lx_tensor_io (name: the pattern, for messages). */
static inline lx_tensor_io lx_hf_io(int fd, const char *path, int writing, int64_t at, lx_file_dtype dtype,
                                    const lx_hf_tensor *t) {
  return lx_tensor_io_open(fd, path, t->name, writing, at, dtype, t->layout, t->head_dim, lx_hf_rows(t),
                           lx_hf_cols(t));
}

/* ---- writing ---------------------------------------------------------------------- */

/* The file's tensors in order: the prologue's, a block's per layer, the epilogue's. */
typedef struct {
  int tensor, layer;
} lx_hf_instance;

static inline int lx_hf_instances(const lx_hf_tensor *tensors, int n, int layers, lx_hf_instance *out) {
  int count = 0;
  for (int section = 0; section < 3; section++)
    for (int layer = 0; layer < (section == 1 ? layers : 1); layer++)
      for (int t = 0; t < n; t++)
        if (tensors[t].section == section) {
          if (out) out[count].tensor = t, out[count].layer = section == 1 ? layer : -1;
          count++;
        }
  return count;
}

/* The header of the file holding the tensors as F32 and where each
 * instance's data starts (offsets[tensor * layers + max(layer, 0)], from
 * the end of the header); every rank computes the same. */
typedef struct {
  char *header; /* the JSON, padded with spaces to a multiple of 8 bytes */
  int64_t header_bytes, file_bytes;
  int64_t *offsets;
} lx_hf_file_plan;

static inline lx_hf_file_plan lx_hf_plan(const lx_hf_tensor *tensors, int n, int layers) {
  int count = lx_hf_instances(tensors, n, layers, NULL);
  lx_hf_instance *order = (lx_hf_instance *)LX_MALLOC(sizeof(lx_hf_instance) * (size_t)count);
  lx_hf_instances(tensors, n, layers, order);
  lx_hf_file_plan plan;
  plan.offsets = (int64_t *)LX_CALLOC((size_t)(n * layers), sizeof(int64_t));
  cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "__metadata__");
  cJSON_AddStringToObject(meta, "format", "pt");
  int64_t at = 0;
  for (int i = 0; i < count; i++) {
    const lx_hf_tensor *t = &tensors[order[i].tensor];
    char name[256];
    lx_hf_name(t, order[i].layer, name, sizeof name);
    cJSON *entry = cJSON_AddObjectToObject(root, name), *shape = cJSON_AddArrayToObject(entry, "shape");
    cJSON *offsets = cJSON_AddArrayToObject(entry, "data_offsets");
    cJSON_AddStringToObject(entry, "dtype", "F32");
    for (int d = 0; d < t->dims; d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
    plan.offsets[order[i].tensor * layers + (order[i].layer > 0 ? order[i].layer : 0)] = at;
    cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)at));
    at += 4 * lx_hf_elements(t);
    cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)at));
  }
  char *json = cJSON_PrintUnformatted(root);
  if (!json) LX_FATAL("out of memory");
  cJSON_Delete(root);
  free(order);
  int64_t length = (int64_t)strlen(json), padded = (length + 7) / 8 * 8;
  plan.header = (char *)LX_MALLOC((size_t)padded);
  memset(plan.header, ' ', (size_t)padded);
  memcpy(plan.header, json, (size_t)length);
  free(json);
  plan.header_bytes = padded;
  plan.file_bytes = 8 + padded + at;
  return plan;
}

static inline void lx_hf_plan_free(lx_hf_file_plan *plan) {
  free(plan->header);
  free(plan->offsets);
}

/* Rank 0: PATH.tmp at full size, with the header. */
static inline void lx_hf_create(const char *path, const lx_hf_file_plan *plan) {
  unsigned char size[8];
  for (int i = 0; i < 8; i++)
    size[i] = (unsigned char)((uint64_t)plan->header_bytes >> (8 * i)); /* little-endian */
  char *tmp = NULL;
  int fd = lx_checkpoint_create_tmp(path, plan->file_bytes, &tmp);
  if (lx_pwrite_full(fd, size, 8, 0) != 0 || lx_pwrite_full(fd, plan->header, plan->header_bytes, 8) != 0)
    lx_die("cannot write checkpoint %s: %s", tmp, strerror(errno));
  close(fd);
  free(tmp);
}

/* dir/name, malloc'd. */
static inline char *lx_hf_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *path = (char *)LX_MALLOC(n);
  snprintf(path, n, "%s/%s", dir, name);
  return path;
}

/* The directory an export writes into: made if it is missing. Empty why: fine. */
static inline void lx_hf_probe_dir(const char *dir, char *why, size_t cap) {
  struct stat st;
  why[0] = '\0';
  if (stat(dir, &st) != 0 && mkdir(dir, 0755) != 0) {
    snprintf(why, cap, "cannot make directory %s: %s", dir, strerror(errno));
    return;
  }
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(why, cap, "%s is not a directory", dir);
    return;
  }
  static const char *const written[] = {"model.safetensors", "config.json"};
  for (size_t i = 0; i < sizeof written / sizeof written[0] && !why[0]; i++) {
    char *file = lx_hf_join(dir, written[i]);
    lx_probe_save_path(file, why, cap);
    free(file);
  }
}

/* ---- reading ---------------------------------------------------------------------- */

typedef struct {
  char *path;
  int fd;
  cJSON *header;
  int64_t data_start, data_bytes;
} lx_hf_file;

enum { LX_HF_MAX_FILES = 64 };

/* What --init names: a .safetensors file, or a directory with
 * model.safetensors or model.safetensors.index.json. */
typedef struct {
  const char *path;
  char *dir;    /* where an index's files are; NULL: path is the file */
  cJSON *index; /* the parsed index; NULL: one file */
  lx_hf_file files[LX_HF_MAX_FILES];
  int n_files;
} lx_hf_source;

static inline cJSON *lx_hf_parse(const char *path, const char *text, size_t size) {
  cJSON *json = cJSON_ParseWithLength(text, size);
  if (!json || !cJSON_IsObject(json)) lx_die("checkpoint %s: its JSON header is not a JSON object", path);
  return json;
}

/* An integer of the header: exact, within [0, max]. */
static inline int64_t lx_hf_integer(const lx_hf_file *f, const char *name, const cJSON *n, int64_t max) {
  if (!cJSON_IsNumber(n) || n->valuedouble < 0 || n->valuedouble > (double)max ||
      n->valuedouble != (double)(int64_t)n->valuedouble)
    lx_die("checkpoint %s: tensor %s has a bad shape or offset in its header", f->path, name);
  return (int64_t)n->valuedouble;
}

/* [begin, end) of a tensor's bytes in the data. */
typedef struct {
  int64_t begin, end;
  const char *name;
} lx_hf_span;

static int lx_hf_by_begin(const void *a, const void *b) {
  const lx_hf_span *x = (const lx_hf_span *)a, *y = (const lx_hf_span *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end; /* an empty tensor before one that starts there */
}

static int lx_hf_by_name(const void *a, const void *b) {
  return strcmp(((const lx_hf_span *)a)->name, ((const lx_hf_span *)b)->name);
}

/* The safetensors rule that lets a reader trust the header: the tensors
 * cover the data exactly, each byte in one tensor, each name once. A size
 * field a few bytes short still parses (the header is padded with spaces)
 * and would move every tensor; overlapping or repeated entries would load
 * other weights than transformers does. */
static inline void lx_hf_check_layout(const lx_hf_file *f) {
  int n = 0;
  lx_hf_span *spans =
      (lx_hf_span *)LX_MALLOC(sizeof(lx_hf_span) * (size_t)(cJSON_GetArraySize(f->header) + 1));
  for (const cJSON *e = f->header->child; e; e = e->next) {
    if (!strcmp(e->string, "__metadata__")) continue;
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2)
      lx_die("checkpoint %s: tensor %s has no data_offsets [begin, end] in its header", f->path, e->string);
    int64_t begin = lx_hf_integer(f, e->string, cJSON_GetArrayItem(offsets, 0), INT64_MAX / 2);
    int64_t end = lx_hf_integer(f, e->string, cJSON_GetArrayItem(offsets, 1), INT64_MAX / 2);
    if (end > f->data_bytes)
      lx_die("checkpoint %s: tensor %s's data ends %lld bytes past the end of the file (truncated?)", f->path,
             e->string, (long long)(end - f->data_bytes));
    if (end < begin)
      lx_die("checkpoint %s: tensor %s's data_offsets end before they begin", f->path, e->string);
    spans[n].begin = begin, spans[n].end = end, spans[n++].name = e->string;
  }
  qsort(spans, (size_t)n, sizeof *spans, lx_hf_by_name);
  for (int i = 1; i < n; i++)
    if (!strcmp(spans[i - 1].name, spans[i].name))
      lx_die("checkpoint %s is corrupt: its header names tensor %s twice", f->path, spans[i].name);
  qsort(spans, (size_t)n, sizeof *spans, lx_hf_by_begin);
  int64_t at = 0;
  for (int i = 0; i < n; i++) {
    if (spans[i].begin != at)
      lx_die("checkpoint %s is corrupt: its tensors do not cover its data exactly (%s starts at byte %lld, "
             "where %lld was expected): a damaged header or header size",
             f->path, spans[i].name, (long long)spans[i].begin, (long long)at);
    at = spans[i].end;
  }
  if (at != f->data_bytes)
    lx_die("checkpoint %s is corrupt: its tensors do not cover its data exactly (they end at byte %lld of "
           "%lld): a damaged header or header size",
           f->path, (long long)at, (long long)f->data_bytes);
  free(spans);
}

static inline lx_hf_file *lx_hf_open_file(lx_hf_source *src, char *path) {
  for (int i = 0; i < src->n_files; i++)
    if (!strcmp(src->files[i].path, path)) {
      free(path);
      return &src->files[i];
    }
  if (src->n_files == LX_HF_MAX_FILES)
    lx_die("checkpoint %s: more than %d files", src->path, LX_HF_MAX_FILES);
  lx_hf_file *f = &src->files[src->n_files++];
  f->path = path;
  f->fd = lx_open_checkpoint(path);
  unsigned char size[8];
  int64_t file_bytes = lx_file_size(f->fd);
  uint64_t n = 0;
  if (file_bytes < 8 || lx_pread_full(f->fd, size, 8, 0))
    lx_die("checkpoint %s is shorter than 8 bytes", path);
  for (int i = 7; i >= 0; i--)
    n = n << 8 | size[i];
  if (n > (uint64_t)LX_HF_MAX_HEADER || (int64_t)n > file_bytes - 8) {
    char llmc[96] = ""; /* --init's file is read as safetensors when it does not start as llm.c's */
    if (!src->dir) snprintf(llmc, sizeof llmc, "; nor is it llm.c's, whose first int32 is %d", LX_GPT2_MAGIC);
    lx_die("%s is not a safetensors file: its header would be %llu bytes, the file holds %lld%s", path,
           (unsigned long long)n, (long long)file_bytes, llmc);
  }
  char *text = (char *)LX_MALLOC((size_t)n + 1);
  if (lx_pread_full(f->fd, text, (int64_t)n, 8)) lx_die("checkpoint %s: cannot read its header", path);
  f->header = lx_hf_parse(path, text, (size_t)n);
  free(text);
  f->data_start = 8 + (int64_t)n, f->data_bytes = file_bytes - f->data_start;
  lx_hf_check_layout(f);
  return f;
}

static inline lx_hf_source lx_hf_source_open(const char *path) {
  lx_hf_source src;
  memset(&src, 0, sizeof src);
  src.path = path;
  struct stat st;
  if (stat(path, &st) != 0) lx_die("cannot open checkpoint %s: %s", path, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return src;
  char *index = lx_hf_join(path, "model.safetensors.index.json"), why[128];
  int fd = lx_open_data_file(index, why, sizeof why);
  FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
  src.dir = lx_strdup(path);
  if (f) {
    int64_t size = lx_file_size(fileno(f));
    if (size < 0 || size > LX_HF_MAX_HEADER) lx_die("%s is larger than %lld bytes", index, LX_HF_MAX_HEADER);
    char *text = (char *)LX_MALLOC((size_t)size + 1);
    size_t n = fread(text, 1, (size_t)size, f);
    fclose(f);
    src.index = lx_hf_parse(index, text, n);
    free(text);
  } else if (access(index, F_OK) == 0) {
    lx_die("cannot read %s: %s", index, fd < 0 ? why : strerror(errno));
  }
  free(index);
  return src;
}

static inline void lx_hf_source_close(lx_hf_source *src) {
  for (int i = 0; i < src->n_files; i++) {
    close(src->files[i].fd);
    cJSON_Delete(src->files[i].header);
    free(src->files[i].path);
  }
  cJSON_Delete(src->index);
  free(src->dir);
}

/* The file that holds `name`, per the index (a plain file name in the directory). */
static inline lx_hf_file *lx_hf_file_of(lx_hf_source *src, const char *name) {
  if (!src->dir) return lx_hf_open_file(src, lx_strdup(src->path));
  if (!src->index) return lx_hf_open_file(src, lx_hf_join(src->dir, "model.safetensors"));
  cJSON *file =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(src->index, "weight_map"), name);
  if (!file) return NULL;
  if (!cJSON_IsString(file) || strchr(file->valuestring, '/') || !strcmp(file->valuestring, "..") ||
      !file->valuestring[0])
    lx_die("checkpoint %s: its index names %s's file in a way this program refuses (a file name in the "
           "directory, please)",
           src->path, name);
  return lx_hf_open_file(src, lx_hf_join(src->dir, file->valuestring));
}

/* Where tensor t of `layer` is, checked against the model: opens io on it. */
static inline lx_tensor_io lx_hf_find(lx_hf_source *src, const lx_hf_tensor *t, int layer) {
  char name[256];
  lx_hf_name(t, layer, name, sizeof name);
  /* A base model's checkpoint (GPT2Model, LlamaModel) names its tensors
   * without the prefix ("h.0.ln_1.weight", "layers.0..."). */
  const char *names[2] = {name, strchr(name, '.') ? strchr(name, '.') + 1 : name};
  lx_hf_file *f = NULL;
  cJSON *entry = NULL;
  for (int i = 0; i < 2 && !entry; i++)
    if ((f = lx_hf_file_of(src, names[i]))) entry = cJSON_GetObjectItemCaseSensitive(f->header, names[i]);
  if (!entry) lx_die("checkpoint %s holds no tensor %s (a model of another architecture?)", src->path, name);
  const char *dtype = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(entry, "dtype"));
  lx_file_dtype d = LX_FILE_F32;
  if (dtype && !strcmp(dtype, "F16"))
    d = LX_FILE_F16;
  else if (dtype && !strcmp(dtype, "BF16"))
    d = LX_FILE_BF16;
  else if (!dtype || strcmp(dtype, "F32"))
    lx_die("checkpoint %s: tensor %s is %s; this program reads F32, F16 and BF16", f->path, name,
           dtype ? dtype : "of no dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
  const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
  if (!cJSON_IsArray(shape))
    lx_die("checkpoint %s: tensor %s has no shape (an array) in its header", f->path, name);
  if (cJSON_GetArraySize(shape) != t->dims)
    lx_die("checkpoint %s: tensor %s has %d dimensions, this model's has %d", f->path, name,
           cJSON_GetArraySize(shape), t->dims);
  int64_t elements = 1;
  for (int i = 0; i < t->dims; i++) {
    int64_t size = lx_hf_integer(f, name, cJSON_GetArrayItem(shape, i), INT32_MAX);
    if (size != t->shape[i] && !(t->positions && i == 0 && size > t->shape[i]))
      lx_die("checkpoint %s: tensor %s has %lld in dimension %d, this model has %lld", f->path, name,
             (long long)size, i, t->shape[i]);
    elements *= size;
  }
  /* checked when the file was opened (lx_hf_check_layout) */
  int64_t begin = (int64_t)cJSON_GetArrayItem(offsets, 0)->valuedouble;
  int64_t end = (int64_t)cJSON_GetArrayItem(offsets, 1)->valuedouble;
  if (end - begin != elements * lx_dtype_bytes(d))
    lx_die("checkpoint %s: tensor %s's data is %lld bytes, its shape and dtype make %lld", f->path, name,
           (long long)(end - begin), (long long)(elements * lx_dtype_bytes(d)));
  return lx_hf_io(f->fd, f->path, 0, f->data_start + begin, d, t);
}

/* Is path a Hugging Face checkpoint rather than llm.c's (a directory, or a
 * file that does not start with llm.c's magic)? */
static inline int lx_hf_is_checkpoint(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 1;
  int32_t magic = 0;
  char why[128];
  int fd = lx_open_data_file(path, why, sizeof why);
  if (fd < 0) return 0; /* llm.c's reader says why */
  int read_magic = lx_pread_full(fd, &magic, 4, 0) == 0;
  close(fd);
  return read_magic && magic != LX_GPT2_MAGIC;
}

#endif
