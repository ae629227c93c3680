/* lx_resume.h — the training state of a stage program: what --save writes
 * and --resume reads (the file of lx_state.h), every rank its own share,
 * under whatever plan, and the checks that a checkpoint continues this run:
 * the same model, the same settings that decide the losses, the same data.
 *
 * A part of lx_loop.h, after the stage file's definitions (lx_stage.h); it
 * moves a rank's elements as the weights' formats do (lx_weights.h). Valid
 * C11 and C++17. */
#ifndef LX_RESUME_H
#define LX_RESUME_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_command_line.h"
#include "lx_data.h"
#include "lx_options.h"
#include "lx_stage.h"
#include "lx_state.h"
#include "lx_stop.h"
#include "lx_tensor_io.h"
#include "lx_watchdog.h"
#include "lx_weights.h"

/* Whether the header records opt's setting in overrides (lx_state_run),
 * and where: at byte *at of lx_train_settings, *bytes long. Steps, seed
 * and lr have fields of their own. */
static int override_slot(const lx_option *opt, size_t *at, size_t *bytes) {
  *at = opt->offset - LX_OPT_AT(train), *bytes = lx_setting_size(opt);
  return lx_option_decides_losses(opt) && opt->offset != LX_OPT_AT(train.steps) &&
         opt->offset != LX_OPT_AT(train.seed) && opt->offset != LX_OPT_AT(train.lr);
}

/* The settings of o that differ from the model file's, into the header. */
static void record_overrides(lx_state_run *run, const lx_run_options *o) {
  lx_train_settings defaults = model_defaults(o->program).train;
  int n = 0;
  const lx_option *table = lx_run_option_table(&n);
  for (int i = 0; i < n; i++) {
    size_t at, bytes;
    const char *value = (const char *)&o->train;
    if (!override_slot(&table[i], &at, &bytes) || !memcmp(value + at, (const char *)&defaults + at, bytes))
      continue;
    memcpy((char *)&run->overrides + at, value + at, bytes);
    run->overridden |= 1u << (at / 4);
  }
}

/* The settings of the run that wrote the header: the model file's but
 * where it recorded others. */
static lx_train_settings saved_settings(const lx_state_run *run, lx_program program) {
  lx_train_settings t = model_defaults(program).train;
  t.steps = run->steps, t.seed = run->seed, t.lr = run->lr;
  int n = 0;
  const lx_option *table = lx_run_option_table(&n);
  for (int i = 0; i < n; i++) {
    size_t at, bytes;
    if (override_slot(&table[i], &at, &bytes) && (run->overridden >> (at / 4) & 1))
      memcpy((char *)&t + at, (const char *)&run->overrides + at, bytes);
  }
  return t;
}

/* The plan of this program and where the run stands after `step` steps. */
static lx_state_run this_run(const lx_run_options *o, int step) {
  lx_state_run run;
  memset(&run, 0, sizeof run);
  memcpy(run.magic, LX_STATE_MAGIC, sizeof run.magic);
  run.version = LX_STATE_VERSION;
  run.ranks = STAGES * TENSOR_PARALLEL * DATA_PARALLEL;
  run.stages = STAGES, run.tensor_parallel = TENSOR_PARALLEL, run.data_parallel = DATA_PARALLEL;
  run.micro_batches = MICRO_BATCHES, run.batch = B, run.seq_len = T;
  run.step = step, run.steps = o->train.steps, run.seed = o->train.seed, run.lr = o->train.lr;
  run.delayed_update = STEPS_OVERLAP;
  record_overrides(&run, o);
  return run;
}

/* The name of t in a training state: the tied table's copy is the table. */
static const char *state_name(const lx_param_tensor *t) {
  return t->tied && !t->writes_file ? TIED_TABLE_NAME : t->name;
}

/* Collective: the model's tensor table, the same on every rank: every
 * rank's tensors, each once, sorted, with their places (lx_state_layout);
 * malloc'd, its size in run->tensors and the file's in *bytes. */
static lx_state_tensor *state_table(lx_state_run *run, int64_t *bytes) {
  int mine = 0, ranks = run->ranks;
  lx_state_tensor *own = (lx_state_tensor *)LX_CALLOC(PARAM_TENSORS, sizeof(lx_state_tensor));
  for (int i = 0; i < PARAM_TENSORS; i++) {
    const lx_param_tensor *t = &param_tensors[i];
    if (t->tied && !t->writes_file) continue;
    strncpy(own[mine].name, t->name, sizeof own[mine].name - 1);
    own[mine].rows = t->rows, own[mine].cols = t->cols;
    mine++;
  }
  int *counts = (int *)LX_MALLOC(sizeof(int) * (size_t)ranks),
      *displs = (int *)LX_MALLOC(sizeof(int) * (size_t)ranks);
  int bytes_mine = mine * (int)sizeof(lx_state_tensor), all = 0;
  LX_MPI_CHECK(MPI_Allgather(&bytes_mine, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD));
  for (int r = 0; r < ranks; r++)
    displs[r] = all, all += counts[r];
  lx_state_tensor *table = (lx_state_tensor *)LX_MALLOC((size_t)all);
  LX_MPI_CHECK(MPI_Allgatherv(own, bytes_mine, MPI_BYTE, table, counts, displs, MPI_BYTE, MPI_COMM_WORLD));
  run->tensors = lx_state_layout(run, table, all / (int)sizeof(lx_state_tensor), bytes);
  free(own), free(counts), free(displs);
  return table;
}

/* Collective: the next training window of each replica, by replica. */
static int64_t *data_positions(const lx_loader *data, int ranks) {
  int64_t mine[2] = {replica, data->next_window};
  int64_t *all = (int64_t *)LX_MALLOC(16 * (size_t)ranks),
          *positions = (int64_t *)LX_MALLOC(8 * DATA_PARALLEL);
  LX_MPI_CHECK(MPI_Allgather(mine, 2, MPI_INT64_T, all, 2, MPI_INT64_T, MPI_COMM_WORLD));
  for (int r = 0; r < ranks; r++)
    positions[all[2 * r]] = all[2 * r + 1];
  free(all);
  return positions;
}

/* The elements [*lo, *hi) of t whose weights (array 0, and 3: the previous
 * ones) or moments (1, 2) this rank moves: reading, all it holds; writing,
 * each element once over all ranks (the weights: moved_part; the moments: a
 * replicated tensor's by tp rank 0, without ZeRO-1 by the first replica,
 * the tied copy's by the table's stage). Returns whether there are any. */
static int state_range(const lx_param_tensor *t, int array, int writing, long long *lo, long long *hi) {
  if (array == 0 || array == 3) {
    if (writing) return moved_part(t, 1, lo, hi);
    *lo = t->element, *hi = t->element + t->elements;
    return t->elements > 0;
  }
  moments_of(t, lo, hi);
  int replicated = t->split == 0 || t->split == 3;
  if (writing &&
      ((t->tied && !t->writes_file) || (replicated && TP_RANK > 0) || (ZERO_SHARDS == 1 && replica > 0)))
    return 0;
  return *hi > *lo;
}

/* t's arrays in this rank's state (weights, m, v, previous weights: NULL
 * without 2BW), element e of t (counted from t->element) of array a at
 * arrays[a][e - firsts[a]]. */
static void tensor_arrays(const lx_param_tensor *t, float *const state[4], float *arrays[4],
                          long long firsts[4]) {
  long long state_lo, state_hi, moments = moments_of(t, &state_lo, &state_hi);
  arrays[0] = state[0] + t->element, arrays[1] = state[1] + moments, arrays[2] = state[2] + moments;
  arrays[3] = state[3] ? state[3] + t->element : NULL;
  firsts[0] = firsts[3] = 0, firsts[1] = firsts[2] = state_lo - t->element;
}

/* Between this rank's arrays and the state file's tensors; reading first
 * zeroes what the rank holds (the vocabulary's padding is in no file). */
static void move_state(int fd, const char *path, int writing, const lx_state_tensor *table, int64_t n,
                       float *const state[4]) {
  for (int i = 0; i < PARAM_TENSORS; i++) {
    const lx_param_tensor *t = &param_tensors[i];
    const lx_state_tensor *entry = lx_state_find(table, n, state_name(t));
    if (!entry) lx_die("checkpoint %s holds no tensor %s (a run of another model?)", path, state_name(t));
    if (entry->rows != t->rows || entry->cols != t->cols)
      lx_die("checkpoint %s: tensor %s is %lld x %lld there, %lld x %lld in this model", path, t->name,
             (long long)entry->rows, (long long)entry->cols, t->rows, t->cols);
    long long lo, hi, firsts[4];
    float *arrays[4];
    tensor_arrays(t, state, arrays, firsts);
    for (int a = 0; a < 4 && arrays[a]; a++) {
      if (!state_range(t, a, writing, &lo, &hi)) continue;
      if (!writing) memset(arrays[a] + (lo - t->element) - firsts[a], 0, sizeof(float) * (size_t)(hi - lo));
      lx_tensor_io io =
          lx_tensor_io_open(fd, path, entry->name, writing, entry->offset + a * lx_state_tensor_bytes(entry),
                            LX_FILE_F32, LX_HF_ROWS, 0, t->rows, t->cols);
      move_rows(&io, t, 0, arrays[a], firsts[a], lo, hi);
      lx_tensor_io_close(&io);
    }
    lx_watchdog_progress(); /* a large model's save may outlast --watchdog; one tensor should not */
  }
}

/* splitmix64's finalizer: every input bit moves every output bit. */
static uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* The sum of mix64(mix64(salt ^ w) ^ bits) over the elements [lo, hi) of
 * t (params-region indices) in data (element e of t at data[e - first]):
 * w the element's place in the whole tensor, bits its fp32 value's. */
static uint64_t hash_elements(const lx_param_tensor *t, uint64_t salt, const float *data, long long first,
                              long long lo, long long hi) {
  uint64_t sum = 0;
  long long whole_elements = t->rows * t->cols; /* past it: the vocabulary's padding, in no file */
  for (long long e = lo - t->element; e < hi - t->element;) {
    long long whole = 0, end = shard_run(t, e, &whole);
    if (end > hi - t->element) end = hi - t->element;
    for (long long k = e; k < end && whole + (k - e) < whole_elements; k++) {
      uint32_t bits;
      memcpy(&bits, &data[k - first], sizeof bits);
      sum += mix64(mix64(salt ^ (uint64_t)(whole + (k - e))) ^ bits);
    }
    e = end;
  }
  return sum;
}

/* Collective: a checksum of the whole training state, the same under every
 * plan: every element of every array of every tensor is counted once over
 * all ranks (the parts they write, state_range), by its tensor, array, place
 * and value. Never 0: 0 in a file says that none was recorded. */
static uint64_t state_checksum(float *const state[4]) {
  uint64_t mine = 0, all = 0;
  for (int i = 0; i < PARAM_TENSORS; i++) {
    const lx_param_tensor *t = &param_tensors[i];
    const char *name = state_name(t);
    long long lo, hi, firsts[4];
    float *arrays[4];
    tensor_arrays(t, state, arrays, firsts);
    for (int a = 0; a < 4 && arrays[a]; a++)
      if (state_range(t, a, 1, &lo, &hi))
        mine += hash_elements(t, lx_fnv1a((uint64_t)a, name, strlen(name)), arrays[a], firsts[a], lo, hi);
  }
  LX_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
  return all ? all : 1;
}

/* What save_state hands lx_checkpoint_collective. */
typedef struct {
  const lx_state_run *run;
  const int64_t *positions;
  const lx_state_tensor *table;
  int64_t bytes;
  float *arrays[4];
} state_save;

static void create_state_file(const char *path, void *ctx) {
  const state_save *s = (const state_save *)ctx;
  lx_state_create(path, s->run, s->positions, s->table, s->bytes);
}

static void write_state_shares(int fd, const char *tmp, void *ctx) {
  const state_save *s = (const state_save *)ctx;
  move_state(fd, tmp, 1, s->table, s->run->tensors, s->arrays);
}

/* Collective: the state after `step` steps into o->save_checkpoint, unless
 * a weight is not finite anywhere: then the run stops and the last
 * checkpoint stays as it was. */
static void save_state(const lx_run_options *o, lx_loader *data, int step) {
  state_save s;
  lx_watchdog_waiting("the save of %s (its writes, or another rank's at a barrier)", o->save_checkpoint);
  state_arrays(s.arrays, 1);
  int finite = weights_finite(), all_finite = 0;
  LX_MPI_CHECK(MPI_Allreduce(&finite, &all_finite, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (!all_finite) {
    char kept[LX_WHY_BYTES];
    lx_describe_kept_checkpoint(o->save_checkpoint, kept, sizeof kept);
    lx_fail_all("the weights are not finite after step %d: stopping without saving%s", step, kept);
  }
  lx_state_run run = this_run(o, step);
  run.windows = data->windows;
  if (lx_world_rank() == 0) run.data_fingerprint = lx_loader_fingerprint(data); /* the header is rank 0's */
  run.state_checksum = state_checksum(s.arrays);
  int64_t *positions = data_positions(data, run.ranks);
  lx_state_tensor *table = state_table(&run, &s.bytes);
  s.run = &run, s.positions = positions, s.table = table;
  lx_checkpoint_collective(o->save_checkpoint, MPI_COMM_WORLD, create_state_file, write_state_shares, &s);
  lx_watchdog_done_waiting();
  free(table), free(positions);
}

/* The settings that decide the losses (every flag of lx_train_settings:
 * --steps, which sets the schedule's length, included) must be the saved
 * run's, or the resumed losses would not be the uninterrupted run's. The
 * others may change: the data paths (the same number of windows and the
 * same content, checked in resume_state), validation, checkpoint interval,
 * metrics, printing. */
static void require_same_run(const char *path, const lx_state_run *saved, const lx_run_options *o) {
  lx_run_options was = *o;
  was.train = saved_settings(saved, o->program);
  int n = 0;
  const lx_option *table = lx_run_option_table(&n);
  for (int i = 0; i < n; i++) {
    const lx_option *opt = &table[i];
    if (!lx_option_decides_losses(opt)) continue;
    char before[64], now[64]; /* exact: a number's text reads back as the number */
    lx_option_text(opt, &was, before, sizeof before);
    lx_option_text(opt, o, now, sizeof now);
    if (!strcmp(before, now)) continue;
    lx_fail_all("checkpoint %s continues a run with %s %s; this one has %s %s (the settings that decide "
                "the losses must be the saved run's)",
                path, opt->flag, before, opt->flag, now);
  }
}

/* The window this replica continues at: its own under the same dp; under
 * another, the saved replicas' common position p (replica r at p + r) moved
 * to this one: p + replica, which must be one of its windows. That holds
 * until the data wrap around: after a saved replica wrapped alone, or where
 * p is no multiple of this dp (or p + replica is past the data) once the
 * saved run wrapped, only the saved dp continues. */
static int64_t resumed_window(const char *path, const lx_state_run *saved, const int64_t *positions,
                              int64_t windows) {
  if (saved->data_parallel == DATA_PARALLEL) return positions[replica];
  int continues = positions[0] % DATA_PARALLEL == 0 && positions[0] + DATA_PARALLEL <= windows;
  for (int r = 0; r < saved->data_parallel; r++)
    continues = continues && positions[r] == positions[0] + r;
  if (!continues)
    lx_die("checkpoint %s: its %d replicas stand at training windows (the first at %lld of %lld) that only "
           "dp %d continues, since the data wrapped around: resume with dp %d",
           path, saved->data_parallel, (long long)positions[0], (long long)windows, saved->data_parallel,
           saved->data_parallel);
  return positions[0] + replica;
}

/* Collective: this run's training data are the tokens the checkpoint was
 * trained on (rank 0 reads them; the others take its verdict). Their number
 * of windows is checked before: this finds the same count of other tokens,
 * which would continue the run on data it never saw, silently not exact. */
static void require_same_data(const char *path, const lx_state_run *saved, const lx_run_options *o,
                              lx_loader *data) {
  int differs = lx_world_rank() == 0 && lx_loader_fingerprint(data) != saved->data_fingerprint;
  LX_MPI_CHECK(MPI_Bcast(&differs, 1, MPI_INT, 0, MPI_COMM_WORLD));
  if (differs)
    lx_fail_all("checkpoint %s was trained on other data than %s: as many batches, but other tokens (their "
                "shards' lengths or first tokens differ): resume with the same --data",
                path, o->train_data);
}

/* Collective: the checkpoint holds no tensor this model lacks (move_state
 * finds each of the model's there, with its shape): a deeper model's state
 * would otherwise load its first layers into this one and continue. */
static void require_model_tensors(const char *path, lx_state_run expect, const lx_state_tensor *saved,
                                  int64_t n) {
  int64_t bytes = 0;
  lx_state_tensor *model = state_table(&expect, &bytes);
  for (int64_t i = 0; i < n; i++)
    if (!lx_state_find(model, expect.tensors, saved[i].name))
      lx_fail_all("checkpoint %s holds tensor %s (%lld x %lld), which this model does not have: it was saved "
                  "by a run of another model (%lld tensors; this one has %lld)",
                  path, saved[i].name, (long long)saved[i].rows, (long long)saved[i].cols, (long long)n,
                  (long long)expect.tensors);
  free(model);
}

/* Every rank reads the parts of the state its plan gives it (the plan that
 * saved it may differ); returns the steps the run had done. */
static int resume_state(const lx_run_options *o, lx_loader *data) {
  const char *path = o->resume_checkpoint;
  if (FINETUNE && !o->init_checkpoint && lx_world_rank() == 0) /* the state holds the adapters alone */
    fprintf(stderr,
            "lynx: warning: %s holds the adapters; the frozen base comes from the seed, not from a file: "
            "resume with the --init the run started from\n",
            path);
  lx_watchdog_waiting("the training state %s (its reads, or another rank at a collective)", path);
  lx_state_run expect = this_run(o, 0);
  lx_state_file file = lx_state_open(path, &expect);
  const lx_state_run saved = file.run;
  if (o->train.steps > 0) require_same_run(path, &saved, o); /* --steps 0 only evaluates the weights */
  if (saved.windows != data->windows)
    lx_die("checkpoint %s was trained on data of %lld batches; %s holds %lld: resume with the same --data",
           path, (long long)saved.windows, o->train_data, (long long)data->windows);
  if (saved.data_fingerprint) require_same_data(path, &saved, o, data); /* 0: a file of an older program */
  if (lx_world_rank() == 0 && (saved.stages != STAGES || saved.tensor_parallel != TENSOR_PARALLEL ||
                               saved.data_parallel != DATA_PARALLEL))
    printf("lynx: resuming %s, saved by tp %d x pp %d x dp %d, under tp %d x pp %d x dp %d\n", path,
           saved.tensor_parallel, saved.stages, saved.data_parallel, TENSOR_PARALLEL, STAGES, DATA_PARALLEL);
  int versions = saved.delayed_update ? 2 : 1;
  if (versions != (STEPS_OVERLAP ? 2 : 1) && o->train.steps > 0) /* evaluating needs the live weights only */
    lx_die("checkpoint %s was saved by a run %s PipeDream-2BW and this program %s: a 2BW run's state holds "
           "two weight versions, and its losses follow the delayed update; resume it with the schedule "
           "that saved it",
           path, versions == 2 ? "under" : "without", STEPS_OVERLAP ? "runs 2BW" : "does not");
  float *arrays[4];
  state_arrays(arrays, 0);
  if (versions == 1) arrays[3] = NULL;
  require_model_tensors(path, expect, file.tensors, saved.tensors);
  move_state(file.fd, path, 0, file.tensors, saved.tensors, arrays);
  /* the checksum counts the file's arrays: evaluating a 2BW state without 2BW reads one of them fewer */
  if (saved.state_checksum && (arrays[3] != NULL) == (saved.delayed_update != 0) &&
      state_checksum(arrays) != saved.state_checksum)
    lx_fail_all(
        "checkpoint %s is corrupt: the weights and moments read from it do not match the checksum saved "
        "with them (a damaged file or storage)",
        path);
  state_restored();
  lx_loader_seek(data, resumed_window(path, &saved, file.positions, data->windows));
  lx_state_close(&file);
  lx_watchdog_done_waiting();
  return saved.step;
}

#endif
