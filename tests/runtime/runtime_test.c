/* runtime_test.c — the runtime of the emitted CPU programs
 * (templates/cpu/lx_runtime.h): token loader, GPT-2 checkpoints, command line,
 * metrics, MPI helpers.
 *
 * Without arguments it runs the single-process checks; the error paths, which
 * exit, run in a child process (this same program with a mode argument) whose
 * status and message are checked. tests/runtime/runtime_mpi_test.sh runs the
 * modes that need several ranks under mpirun. */
#include "lx_runtime.h" /* first: it sets _POSIX_C_SOURCE */

#include <math.h>
#include <stdarg.h>
#include <sys/wait.h>

#include "check.h"

/* ---- helpers ---------------------------------------------------------------------- */

static char self_path[2048]; /* this program, for child processes */
static char scratch[256];    /* a fresh temporary directory */

static const char *in_scratch(const char *name) {
  static char paths[8][512];
  static int next;
  char *p = paths[next++ % 8];
  snprintf(p, sizeof paths[0], "%s/%s", scratch, name);
  return p;
}

/* Runs `prefix` (a command that runs another: "timeout 60", ...) on this
 * program with `args` (a shell word list); returns its exit status and its
 * stdout+stderr in out. */
static int run_command(char *out, size_t cap, const char *prefix, const char *args) {
  char command[8192];
  snprintf(command, sizeof command, "%s '%s' %s 2>&1", prefix, self_path, args);
  FILE *p = popen(command, "r");
  if (!p) return -1;
  size_t n = fread(out, 1, cap - 1, p);
  out[n] = '\0';
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Runs this program with `args` (a shell word list), stopped after 60 s (a
 * hang is exit status 124); returns its exit status and its stdout+stderr in
 * out. */
static int run_self(char *out, size_t cap, const char *fmt, ...) {
  char args[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  return run_command(out, cap, "timeout 60", args);
}

/* A shard with an arbitrary header (to build broken ones) and n tokens of
 * token_bytes each. */
static void write_shard_of(const char *path, int32_t magic, int32_t version, int32_t header_count,
                           const void *tokens, // (n)
                           size_t token_bytes, int64_t n) {
  int32_t header[LX_SHARD_HEADER_INTS] = {magic, version, header_count};
  FILE *f = LX_FOPEN(path, "wb");
  LX_FWRITE(header, sizeof header, 1, f);
  LX_FWRITE(tokens, token_bytes, (size_t)n, f);
  fclose(f);
}

static void write_shard(const char *path, int32_t magic, int32_t version, int32_t header_count,
                        const uint16_t *tokens, // (n)
                        int64_t n) {
  write_shard_of(path, magic, version, header_count, tokens, sizeof(uint16_t), n);
}

/* Token i of shard s names its own position, so a window tells where it came from. */
static uint16_t token_at(int shard, int64_t i) { return (uint16_t)(shard * 1000 + i); }

static void write_numbered_shard(const char *path, int shard, int64_t n) {
  uint16_t *tokens = LX_MALLOC((size_t)n * sizeof(uint16_t));
  for (int64_t i = 0; i < n; i++)
    tokens[i] = token_at(shard, i);
  write_shard(path, LX_SHARD_MAGIC, LX_SHARD_VERSION, (int32_t)n, tokens, n);
  free(tokens);
}

static int read_file(const char *path, char **data, long *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  *size = ftell(f);
  fseek(f, 0, SEEK_SET);
  *data = LX_MALLOC((size_t)*size);
  size_t got = fread(*data, 1, (size_t)*size, f);
  fclose(f);
  return got == (size_t)*size ? 0 : -1;
}

static int files_identical(const char *a, const char *b) {
  char *da = NULL, *db = NULL;
  long na = 0, nb = 0;
  int same =
      read_file(a, &da, &na) == 0 && read_file(b, &db, &nb) == 0 && na == nb && !memcmp(da, db, (size_t)na);
  free(da);
  free(db);
  return same;
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

/* ---- the loader ------------------------------------------------------------------- */

enum { B = 2, T = 8, BT = B * T, VOCAB = 4096 };
/* Shard 0: 100 tokens = 6 windows (tokens 0..96); shard 1: 50 tokens = 3 windows. */
static const int shard_windows[2] = {6, 3};
#define WINDOWS 9

/* The global index of the window whose inputs are `inputs`, or -1 when the
 * batch is not a correct window (or its targets are not inputs shifted by one). */
static int window_index(const int *inputs, // (B, T)
                        const int *targets // (B, T)
) {
  int shard = inputs[0] / 1000, first = inputs[0] % 1000;
  if (first % BT) return -1;
  for (int i = 0; i < BT; i++)
    if (inputs[i] != token_at(shard, first + i) || targets[i] != token_at(shard, first + i + 1)) return -1;
  return (shard ? shard_windows[0] : 0) + first / BT;
}

static void make_numbered_shards(void) {
  write_numbered_shard(in_scratch("tok_000000.bin"), 0, 100);
  write_numbered_shard(in_scratch("tok_000001.bin"), 1, 50);
}

static void test_loader_windows(void) {
  lx_loader *l = lx_loader_open(in_scratch("tok_*.bin"), B, T, VOCAB, 0, 1, "test data");
  int inputs[BT], targets[BT], in_order = 1;
  CHECK(l->num_shards == 2 && l->windows == WINDOWS, "loader finds 2 shards with %d windows of B*T+1 tokens",
        WINDOWS);
  for (int step = 0; step < WINDOWS + 2; step++) {
    lx_loader_next(l, inputs, targets);
    if (window_index(inputs, targets) != step % WINDOWS) in_order = 0;
  }
  CHECK(in_order,
        "one replica reads every window in shard order, targets = inputs shifted by one, then wraps");
  lx_loader_reset(l);
  lx_loader_next(l, inputs, targets);
  CHECK(window_index(inputs, targets) == 0, "reset returns to the first window");
  lx_loader_close(l);
}

/* Every replica's windows over one pass; checks they are disjoint, cover all
 * windows, follow r, r+R, ... and wrap to r. */
static void test_loader_replicas(int replicas) {
  int owner[WINDOWS], ok = 1;
  for (int w = 0; w < WINDOWS; w++)
    owner[w] = -1;
  for (int r = 0; r < replicas; r++) {
    lx_loader *l = lx_loader_open(in_scratch("tok_*.bin"), B, T, VOCAB, r, replicas, "test data");
    int inputs[BT], targets[BT], mine = (WINDOWS - r + replicas - 1) / replicas;
    for (int k = 0; k < mine; k++) {
      lx_loader_next(l, inputs, targets);
      int w = window_index(inputs, targets);
      if (w != r + k * replicas || owner[w] != -1)
        ok = 0;
      else
        owner[w] = r;
    }
    lx_loader_next(l, inputs, targets);
    if (window_index(inputs, targets) != r) ok = 0;
    lx_loader_close(l);
  }
  for (int w = 0; w < WINDOWS; w++)
    if (owner[w] < 0) ok = 0;
  CHECK(ok, "%d replicas take disjoint windows r, r+%d, ... covering all %d, and wrap to r", replicas,
        replicas, WINDOWS);
}

static void test_loader_deterministic(void) {
  int a[3][BT], b[3][BT], targets[BT];
  for (int pass = 0; pass < 2; pass++) {
    lx_loader *l = lx_loader_open(in_scratch("tok_*.bin"), B, T, VOCAB, 1, 2, "test data");
    for (int k = 0; k < 3; k++)
      lx_loader_next(l, pass ? b[k] : a[k], targets);
    lx_loader_close(l);
  }
  CHECK(!memcmp(a, b, sizeof a), "two loaders over the same files give the same batches");
}

/* One broken data set: the child must exit 1 with a message containing `expect`. */
static void expect_loader_error(const char *pattern, int vocab, int replicas, const char *expect,
                                const char *what) {
  char out[4096];
  int status = run_self(out, sizeof out, "loader-open '%s' %d %d", pattern, vocab, replicas);
  CHECK(status == 1 && strstr(out, expect), "%s: exit 1 and \"%s\"", what, expect);
  if (status != 1 || !strstr(out, expect)) printf("     exit %d, output: %s\n", status, out);
}

static void test_loader_errors(void) {
  uint16_t tokens[200];
  for (int i = 0; i < 200; i++)
    tokens[i] = (uint16_t)(i % 50);
  expect_loader_error(in_scratch("nothing_*.bin"), VOCAB, 1, "no file matches", "no shard matches the glob");
  write_shard(in_scratch("magic.bin"), 12345, 1, 200, tokens, 200);
  expect_loader_error(in_scratch("magic.bin"), VOCAB, 1, "is not a token shard (magic 12345",
                      "a shard with a bad magic");
  write_shard(in_scratch("version.bin"), LX_SHARD_MAGIC, 7, 200, tokens, 200);
  expect_loader_error(in_scratch("version.bin"), VOCAB, 1,
                      "magic 20240520 (uint16 tokens) and shard version 7: that magic's version is 1",
                      "a shard with a bad version");
  write_shard(in_scratch("truncated.bin"), LX_SHARD_MAGIC, 1, 200, tokens, 150);
  expect_loader_error(in_scratch("truncated.bin"), VOCAB, 1, "truncated", "a truncated shard");
  write_shard(in_scratch("short.bin"), LX_SHARD_MAGIC, 1, 16, tokens, 16);
  expect_loader_error(in_scratch("short.bin"), VOCAB, 1, "fewer than one batch of B*T+1 = 17",
                      "a shard smaller than one batch");
  write_shard(in_scratch("stub.bin"), LX_SHARD_MAGIC, 1, 0, tokens, 0);
  FILE *f = LX_FOPEN(in_scratch("stub.bin"), "r+b");
  CHECK(ftruncate(fileno(f), 100) == 0, "cut a shard inside its header");
  fclose(f);
  expect_loader_error(in_scratch("stub.bin"), VOCAB, 1, "too short for a token shard header",
                      "a file shorter than the header");
  tokens[12] = 77;
  write_shard(in_scratch("vocab.bin"), LX_SHARD_MAGIC, 1, 200, tokens, 200);
  expect_loader_error(in_scratch("vocab.bin"), 64, 1,
                      "vocab.bin: token 77 at position 12 is outside the vocabulary",
                      "a token outside the vocabulary, with file and position");
  expect_loader_error(in_scratch("tok_*.bin"), VOCAB, 10, "fewer than the 10 data-parallel replicas",
                      "more replicas than windows");
  CHECK(mkfifo(in_scratch("pipe.bin"), 0644) == 0, "make a named pipe");
  expect_loader_error(in_scratch("pipe.bin"), VOCAB, 1, "pipe.bin: it is a named pipe, not a file",
                      "a named pipe among the shards, without waiting for a writer");
  CHECK(mkdir(in_scratch("dir.bin"), 0755) == 0, "make a directory");
  char globs[2048];
  snprintf(globs, sizeof globs, "such as %s/train_*.bin (training) or %s/val_*.bin (validation)",
           in_scratch("dir.bin"), in_scratch("dir.bin"));
  expect_loader_error(in_scratch("dir.bin//"), VOCAB, 1, globs,
                      "a directory: the globs of the shards in it, one slash each");
}

/* The validation windows are checked before step 1: a replica its own
 * (the first 2 of windows r, r + 2, ...), the preflight every replica's;
 * then the loader starts again from the replica's first window. */
static void test_loader_check_first(void) {
  uint16_t tokens[5 * BT + 1];
  for (int i = 0; i < 5 * BT + 1; i++)
    tokens[i] = (uint16_t)(i % 50);
  tokens[BT / 2] = 5000; /* in window 0: replica 0's */
  write_shard(in_scratch("val0.bin"), LX_SHARD_MAGIC, 1, 5 * BT + 1, tokens, 5 * BT + 1);
  tokens[BT / 2] = 1, tokens[BT + BT / 2] = 5000; /* in window 1: replica 1's */
  write_shard(in_scratch("val1.bin"), LX_SHARD_MAGIC, 1, 5 * BT + 1, tokens, 5 * BT + 1);
  const struct {
    const char *file;
    int replica, every, status;
    const char *what;
  } cases[] = {{"val0.bin", 1, 0, 0, "replica 1 checks its own windows, not replica 0's bad one"},
               {"val0.bin", 1, 1, 1, "the preflight checks every replica's: replica 0's bad window"},
               {"val1.bin", 1, 0, 1, "replica 1 finds the bad token in its own window"},
               {"val1.bin", 0, 0, 0, "replica 0 checks its own windows, not replica 1's bad one"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char out[4096];
    int status = run_self(out, sizeof out, "check-first '%s' %d %d", in_scratch(cases[i].file),
                          cases[i].replica, cases[i].every);
    int said = cases[i].status == 0 || strstr(out, "token 5000 at position");
    CHECK(status == cases[i].status && said, "lx_loader_check_first: %s (exit %d)", cases[i].what, status);
    if (status != cases[i].status || !said) printf("     %s\n", out);
  }
}

/* A directory the glob reaches and cannot read stops it: glob would skip it
 * and the run would train on the shards of the others. Root reads every
 * directory, so as root the child runs without the capabilities for that. */
static void test_loader_unreadable_dir(void) {
  uint16_t tokens[200] = {0};
  CHECK(mkdir(in_scratch("parts"), 0755) == 0 && mkdir(in_scratch("parts/open"), 0755) == 0 &&
            mkdir(in_scratch("parts/locked"), 0755) == 0,
        "make two directories of shards");
  write_shard(in_scratch("parts/open/s.bin"), LX_SHARD_MAGIC, 1, 200, tokens, 200);
  write_shard(in_scratch("parts/locked/s.bin"), LX_SHARD_MAGIC, 1, 200, tokens, 200);
  CHECK(chmod(in_scratch("parts/locked"), 0) == 0, "lock one");
  /* glob reads the directory for a wildcard last part, and only stats a literal one */
  const char *patterns[] = {"parts/*/*.bin", "parts/*/s.bin"};
  for (int i = 0; i < 2; i++) {
    char out[4096], args[1024];
    snprintf(args, sizeof args, "loader-open '%s' %d 1", in_scratch(patterns[i]), VOCAB);
    int status = run_command(
        out, sizeof out,
        geteuid() == 0 ? "timeout 60 setpriv --bounding-set=-dac_override,-dac_read_search" : "timeout 60",
        args);
    const char *expect = "/parts/locked, which '";
    CHECK(status == 1 && strstr(out, "cannot read directory") && strstr(out, expect),
          "a directory the glob %s cannot read: exit 1, naming it", patterns[i]);
    if (status != 1 || !strstr(out, expect)) printf("     exit %d, output: %s\n", status, out);
  }
  chmod(in_scratch("parts/locked"), 0755);
}

/* llm.c's Llama 3 shards: uint32 tokens under magic 20240801, version 7. */
static void write_u32_shard(const char *path, int32_t version, int32_t header_count, const uint32_t *tokens,
                            int64_t n) {
  write_shard_of(path, LX_SHARD_MAGIC_U32, version, header_count, tokens, sizeof(uint32_t), n);
}

static void test_loader_uint32(void) {
  enum { N = 100, BIG = 70000, BIG_VOCAB = 128256 };
  uint32_t tokens[N];
  for (int i = 0; i < N; i++)
    tokens[i] = (uint32_t)token_at(0, i);
  write_u32_shard(in_scratch("wide_000000.bin"), LX_SHARD_VERSION_U32, N, tokens, N);
  lx_loader *narrow = lx_loader_open(in_scratch("tok_000000.bin"), B, T, VOCAB, 0, 1, "uint16");
  lx_loader *wide = lx_loader_open(in_scratch("wide_000000.bin"), B, T, VOCAB, 0, 1, "uint32");
  int same = narrow->windows == wide->windows;
  for (int k = 0; k < shard_windows[0] && same; k++) {
    int a[BT], b[BT], ta[BT], tb[BT];
    lx_loader_next(narrow, a, ta);
    lx_loader_next(wide, b, tb);
    same = !memcmp(a, b, sizeof a) && !memcmp(ta, tb, sizeof ta);
  }
  lx_loader_close(narrow), lx_loader_close(wide);
  CHECK(same, "a uint32 shard (magic %d) gives the batches of the uint16 shard of the same tokens",
        LX_SHARD_MAGIC_U32);
  for (int i = 0; i < N; i++)
    tokens[i] = (uint32_t)(BIG + i);
  write_u32_shard(in_scratch("big_000000.bin"), LX_SHARD_VERSION_U32, N, tokens, N);
  lx_loader *big = lx_loader_open(in_scratch("big_000000.bin"), B, T, BIG_VOCAB, 0, 1, "uint32");
  int inputs[BT], targets[BT], exact = 1;
  lx_loader_next(big, inputs, targets);
  lx_loader_next(big, inputs, targets);
  for (int i = 0; i < BT; i++)
    exact &= inputs[i] == BIG + BT + i && targets[i] == BIG + BT + i + 1;
  lx_loader_close(big);
  CHECK(exact, "tokens past 65535 (Llama 3's vocabulary of %d) read whole", BIG_VOCAB);
  write_u32_shard(in_scratch("wideversion.bin"), 1, N, tokens, N);
  expect_loader_error(in_scratch("wideversion.bin"), BIG_VOCAB, 1, "shard version 1",
                      "a uint32 shard with another version");
  write_u32_shard(in_scratch("widecut.bin"), LX_SHARD_VERSION_U32, N, tokens, N / 2);
  expect_loader_error(in_scratch("widecut.bin"), BIG_VOCAB, 1, "truncated", "a truncated uint32 shard");
  expect_loader_error(in_scratch("big_000000.bin"), 65536, 1, "token 70000 at position 0 is outside the vocabulary",
                      "a uint32 token outside the vocabulary");
}

/* ---- checkpoints ------------------------------------------------------------------ */

static const lx_gpt2_header small_model = {
    .max_seq_len = 8, .vocab = 16, .layers = 2, .heads = 2, .channels = 8, .padded_vocab = 16};

static float synthetic_param(int64_t i) { return (float)sin(0.37 * (double)i) * (float)(1 + i % 7); }

/* Written independently of lx_checkpoint.h, with llm.c's layout. */
static void write_synthetic_checkpoint(const char *path, const lx_gpt2_header *h, int32_t version,
                                       int64_t drop_floats) {
  int32_t header[256] = {LX_GPT2_MAGIC, version,  h->max_seq_len, h->vocab,
                         h->layers,     h->heads, h->channels,    h->padded_vocab};
  int64_t n = lx_gpt2_param_count(h) - drop_floats;
  float *params = LX_MALLOC((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++)
    params[i] = synthetic_param(i);
  FILE *f = LX_FOPEN(path, "wb");
  LX_FWRITE(header, sizeof header, 1, f);
  LX_FWRITE(params, sizeof(float), (size_t)n, f);
  fclose(f);
  free(params);
}

static int is_per_layer(int tensor) {
  return tensor != LX_GPT2_WTE && tensor != LX_GPT2_WPE && tensor != LX_GPT2_LNFW && tensor != LX_GPT2_LNFB;
}

/* The slices of pipeline stage `stage` of `stages`, as the code printer would
 * lay them out: wte and wpe on the first stage, each stage's layers of every
 * per-layer tensor, lnf on the last; packed in the stage's region. Returns
 * the count; *params gets the region's size. */
static int stage_slices(const lx_gpt2_header *h, int stage, int stages,
                        lx_ckpt_slice *out, // (LX_GPT2_NUM_TENSORS)
                        int64_t *params) {
  int n = 0, L = h->layers, first = stage * L / stages, last = (stage + 1) * L / stages;
  *params = 0;
  for (int t = 0; t < LX_GPT2_NUM_TENSORS; t++) {
    int64_t offset = lx_gpt2_tensor_offset(h, t), size = lx_gpt2_tensor_size(h, t);
    if (is_per_layer(t)) {
      int64_t per_layer = size / L;
      out[n] = (lx_ckpt_slice){lx_gpt2_tensor_name(t), offset + first * per_layer, *params,
                               (last - first) * per_layer};
    } else if ((t <= LX_GPT2_WPE && stage == 0) || (t >= LX_GPT2_LNFW && stage == stages - 1)) {
      out[n] = (lx_ckpt_slice){lx_gpt2_tensor_name(t), offset, *params, size};
    } else {
      continue;
    }
    *params += out[n++].elements;
  }
  return n;
}

static void test_checkpoint_layout(void) {
  const lx_gpt2_header *h = &small_model;
  int64_t C = h->channels, L = h->layers;
  int64_t want = h->padded_vocab * C + h->max_seq_len * C + L * (12 * C * C + 13 * C) + 2 * C;
  CHECK(lx_gpt2_param_count(h) == want, "GPT-2 parameter count %lld = Vp*C + maxT*C + L*(12C^2 + 13C) + 2C",
        (long long)want);
  CHECK(lx_gpt2_tensor_offset(h, LX_GPT2_QKVW) == (h->padded_vocab + h->max_seq_len + 2 * L) * C &&
            lx_gpt2_tensor_offset(h, LX_GPT2_LNFB) == want - C,
        "tensor offsets follow llm.c's order");
}

static void test_checkpoint_load(void) {
  const lx_gpt2_header *h = &small_model;
  int64_t n = lx_gpt2_param_count(h);
  write_synthetic_checkpoint(in_scratch("model.bin"), h, 3, 0);
  float *params = LX_MALLOC((size_t)n * sizeof(float));
  lx_ckpt_slice all = {"all", 0, 0, n};
  lx_checkpoint_load(in_scratch("model.bin"), h, &all, 1, params);
  int same = 1;
  for (int64_t i = 0; i < n; i++)
    if (params[i] != synthetic_param(i)) same = 0;
  CHECK(same, "loading the whole checkpoint as one slice gives the file's parameters");
  free(params);
}

/* Load per stage, save per stage (sequentially, as ranks would between the
 * barriers), commit: the same bytes. */
static void test_checkpoint_round_trip(void) {
  const lx_gpt2_header *h = &small_model;
  lx_ckpt_slice slices[2][LX_GPT2_NUM_TENSORS];
  int64_t sizes[2];
  int counts[2];
  float *regions[2];
  for (int s = 0; s < 2; s++) {
    counts[s] = stage_slices(h, s, 2, slices[s], &sizes[s]);
    regions[s] = LX_MALLOC((size_t)sizes[s] * sizeof(float));
    lx_checkpoint_load(in_scratch("model.bin"), h, slices[s], counts[s], regions[s]);
  }
  CHECK(sizes[0] + sizes[1] == lx_gpt2_param_count(h), "two stages' slices cover the model once");
  lx_checkpoint_create(in_scratch("copy.bin"), h);
  for (int s = 0; s < 2; s++)
    lx_checkpoint_save(in_scratch("copy.bin"), h, slices[s], counts[s], regions[s], s == 0);
  CHECK(!file_exists(in_scratch("copy.bin")) && file_exists(in_scratch("copy.bin.tmp")),
        "before commit only PATH.tmp exists");
  lx_checkpoint_commit(in_scratch("copy.bin"));
  CHECK(files_identical(in_scratch("model.bin"), in_scratch("copy.bin")) &&
            !file_exists(in_scratch("copy.bin.tmp")),
        "load -> save over 2 stages gives a byte-identical checkpoint");
  for (int s = 0; s < 2; s++)
    free(regions[s]);
}

static void expect_checkpoint_error(const char *file, const char *flags, const char *expect,
                                    const char *what) {
  char out[4096];
  int status = run_self(out, sizeof out, "checkpoint-load '%s' %s", in_scratch(file), flags);
  CHECK(status == 1 && strstr(out, expect), "%s: exit 1 and \"%s\"", what, expect);
  if (status != 1 || !strstr(out, expect)) printf("     exit %d, output: %s\n", status, out);
}

static void test_checkpoint_errors(void) {
  const lx_gpt2_header *h = &small_model;
  expect_checkpoint_error("model.bin", "3 8", "layers is 2 in the file, expected 3",
                          "a header of another depth");
  expect_checkpoint_error("model.bin", "2 16", "channels is 8 in the file, expected 16",
                          "a header of another width");
  write_synthetic_checkpoint(in_scratch("short.ckpt"), h, 3, 10);
  expect_checkpoint_error("short.ckpt", "2 8", "truncated", "a truncated checkpoint");
  write_synthetic_checkpoint(in_scratch("bf16.ckpt"), h, 5, 0);
  expect_checkpoint_error("bf16.ckpt", "2 8", "version 5", "a checkpoint of another version");
  expect_checkpoint_error("tok_000000.bin", "2 8", "is not a GPT-2 checkpoint",
                          "a file that is no checkpoint");
  expect_checkpoint_error("missing.ckpt", "2 8", "cannot open checkpoint", "a missing checkpoint");
}

/* ---- options ---------------------------------------------------------------------- */

static lx_run_options caller_defaults(lx_program program) {
  lx_run_options o = lx_run_options_default(program);
  o.train.steps = 42;
  o.train_data = "data/train_*.bin";
  return o;
}

static void test_options_all_flags(void) {
  char *argv[] = {"train",
                  "--steps",
                  "7",
                  "--data",
                  "d/*.bin",
                  "--val-data=v/*.bin",
                  "--init",
                  "in.bin",
                  "--save",
                  "out.bin",
                  "--eval-interval",
                  "5",
                  "--val-batches",
                  "3",
                  "--seed",
                  "18446744073709551615",
                  "--metrics",
                  "m.jsonl",
                  "--gradcheck",
                  "--lr=0.25",
                  "--print-every=4"};
  lx_run_options o = caller_defaults(LX_PROGRAM_CPU);
  lx_parse_run_options((int)(sizeof argv / sizeof argv[0]), argv, &o);
  CHECK(o.train.steps == 7 && !strcmp(o.train_data, "d/*.bin") && !strcmp(o.val_data, "v/*.bin") &&
            !strcmp(o.init_checkpoint, "in.bin") && !strcmp(o.save_checkpoint, "out.bin") &&
            o.val_interval == 5 && o.val_batches == 3 && o.train.seed == UINT64_MAX &&
            !strcmp(o.metrics_path, "m.jsonl") && o.gradcheck == 1 && o.train.lr == 0.25 &&
            o.print_every == 4,
        "every flag, as --flag value and --flag=value, sets its field");
  char *none[] = {"train"};
  lx_run_options d = caller_defaults(LX_PROGRAM_CPU);
  lx_parse_run_options(1, none, &d);
  CHECK(d.train.steps == 42 && !strcmp(d.metrics_path, "metrics.jsonl") && !d.val_data && !d.gradcheck,
        "no flags keep the caller's defaults (metrics.jsonl)");
}

static void expect_options_exit(const char *args, int want_status, const char *expect, const char *what) {
  char out[8192];
  int status = run_self(out, sizeof out, "options %s", args);
  CHECK(status == want_status && strstr(out, expect), "%s: exit %d and \"%s\"", what, want_status, expect);
  if (status != want_status || !strstr(out, expect)) printf("     exit %d, output: %s\n", status, out);
}

static void test_options_errors(void) {
  expect_options_exit("--bogus 3", 2, "unknown option '--bogus'", "an unknown flag");
  expect_options_exit("--steps abc", 2, "--steps wants an integer >= 0, not 'abc'", "a non-numeric value");
  expect_options_exit("--steps -1", 2, "--steps wants an integer >= 0, not '-1'", "a value out of range");
  expect_options_exit("--steps 99999999999", 2, "--steps wants an integer", "a value that overflows int");
  expect_options_exit("--seed -1", 2, "--seed wants a non-negative integer", "a negative seed");
  expect_options_exit("--seed ' -1'", 2, "--seed wants a non-negative integer, not ' -1'",
                      "a negative seed after a space (strtoull would wrap it to 2^64 - 1)");
  expect_options_exit("--save=", 2, "--save wants a path, not an empty one", "an empty --save=");
  expect_options_exit("--data ''", 2, "--data wants a glob, not an empty one", "an empty --data");
  expect_options_exit("--data", 2, "--data needs a value", "a flag missing its value");
  expect_options_exit("--eval-interval --steps 3", 2, "--eval-interval needs a value",
                      "a flag followed by another flag");
  expect_options_exit("stray", 2, "unexpected argument 'stray'", "a positional argument");
  expect_options_exit("--gradcheck=1", 2, "--gradcheck takes no value", "a value for --gradcheck");
  const char *help_lines[] = {
      "--steps N",       "[42]",        "--data GLOB",       "[data/train_*.bin]", "--val-data GLOB",
      "--init CKPT",     "--save CKPT", "--eval-interval N", "--val-batches N",    "[8]",
      "--seed N",        "[1337]",      "--metrics FILE",    "[metrics.jsonl]",    "--gradcheck",
      "--print-every N", "--help"};
  char out[8192];
  int status = run_self(out, sizeof out, "options --help");
  CHECK(status == 0, "--help exits 0");
  for (size_t i = 0; i < sizeof help_lines / sizeof help_lines[0]; i++)
    CHECK(strstr(out, help_lines[i]) != NULL, "--help shows \"%s\"", help_lines[i]);
  expect_options_exit("--steps 9 --help", 0, "[9]", "--help shows the defaults after earlier flags");
  expect_options_exit("--lr 0", 2, "--lr wants a number > 0, not '0'", "a learning rate of zero");
  expect_options_exit("--cuda-graph", 2, "unknown option '--cuda-graph'", "a CUDA flag on the CPU");
}

/* The optimizer and schedule flags: each sets its field of the run's
 * settings, a value outside the model language's range is a usage error
 * naming the flag and the value, and --help shows each with its default. */
static void test_options_training_settings(void) {
  char *argv[] = {"train",          "--min-lr",    "1e-5",        "--warmup", "4",     "--lr-schedule",
                  "linear",         "--beta1=0.8", "--beta2",     "0.99",     "--eps", "1e-6",
                  "--weight-decay", "0",           "--grad-clip", "0"};
  lx_run_options o = caller_defaults(LX_PROGRAM_CUDA);
  lx_parse_run_options((int)(sizeof argv / sizeof argv[0]), argv, &o);
  const lx_train_settings *t = &o.train;
  CHECK(t->min_lr == 1e-5 && t->warmup == 4 && t->lr_schedule == LX_SCHED_LINEAR && t->beta1 == 0.8 &&
            t->beta2 == 0.99 && t->eps == 1e-6 && t->weight_decay == 0 && t->grad_clip == 0,
        "--min-lr, --warmup, --lr-schedule, --beta1, --beta2, --eps, --weight-decay, --grad-clip set their "
        "fields");
  const char *bad[][3] = {
      {"--beta1 1", "--beta1 wants a number in [0, 1), not '1'", "beta1 of 1"},
      {"--beta2 nan", "--beta2 wants a number in [0, 1), not 'nan'", "a NaN beta2"},
      {"--eps 0", "--eps wants a number in [1.17549", "eps of 0"},
      {"--weight-decay -0.1", "--weight-decay wants a number in [0, 1], not '-0.1'",
       "a negative weight decay"},
      {"--grad-clip inf", "--grad-clip wants a number in [0, 1e+06], not 'inf'", "an infinite clip"},
      {"--warmup -1", "--warmup wants an integer in [0, 1073741824], not '-1'", "a negative warm-up"},
      {"--lr-schedule step", "--lr-schedule wants constant, cosine or linear, not 'step'",
       "an unknown schedule"},
      {"--lr 1e-3 --min-lr 1e-2", "--min-lr 0.01 is above --lr 0.001", "min_lr above lr"},
      {"--min-lr", "--min-lr needs a value", "--min-lr without its value"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    expect_options_exit(bad[i][0], 2, bad[i][1], bad[i][2]);
  const char *help_lines[] = {"--min-lr X",       "[3e-05]",       "--warmup N", "--lr-schedule NAME",
                              "[cosine]",         "--beta1 X",     "[0.9]",      "--beta2 X",
                              "[0.95]",           "--eps X",       "[1e-08]",    "[0.1]",
                              "--weight-decay X", "--grad-clip X", "[1]"};
  char out[8192];
  run_self(out, sizeof out, "options --help");
  for (size_t i = 0; i < sizeof help_lines / sizeof help_lines[0]; i++)
    CHECK(strstr(out, help_lines[i]) != NULL, "--help shows \"%s\"", help_lines[i]);
}

/* The CUDA programs parse the same command line, with their own flags instead of the gradient check's. */
static void test_options_cuda(void) {
  char *argv[] = {"train", "--steps", "3", "--cuda-graph", "--profile", "p.profile", "--lr", "0.5"};
  lx_run_options o = caller_defaults(LX_PROGRAM_CUDA);
  lx_parse_run_options((int)(sizeof argv / sizeof argv[0]), argv, &o);
  CHECK(o.train.steps == 3 && o.cuda_graph == 1 && !strcmp(o.profile_path, "p.profile") && o.train.lr == 0.5,
        "CUDA: --steps, --cuda-graph, --profile and --lr set their fields");
  char out[8192];
  int status = run_self(out, sizeof out, "options-cuda --help");
  CHECK(status == 0 && strstr(out, "--cuda-graph") && strstr(out, "--profile FILE") &&
            strstr(out, "--data GLOB") && strstr(out, "--save CKPT") && strstr(out, "--lr X") &&
            !strstr(out, "--gradcheck"),
        "CUDA: --help shows the shared options and --cuda-graph, --profile, not --gradcheck");
  status = run_self(out, sizeof out, "options-cuda --gradcheck");
  CHECK(status == 2 && strstr(out, "unknown option '--gradcheck'"), "CUDA: --gradcheck is unknown (exit 2)");
  status = run_self(out, sizeof out, "options-cuda --cuda-graph=1");
  CHECK(status == 2 && strstr(out, "--cuda-graph takes no value"),
        "CUDA: --cuda-graph takes no value (exit 2)");
}

/* ---- metrics ---------------------------------------------------------------------- */

/* A profile the CUDA program writes is read back by lynxgen line by line: a
 * model file's name in it must not add lines (lx_one_line). */
static void test_one_line(void) {
  char line[16], tiny[4];
  CHECK(!strcmp(lx_one_line("x\nop gelu\r\x7f#", line, sizeof line), "x?op gelu??#"),
        "lx_one_line: newline, carriage return and DEL become '?'");
  CHECK(!strcmp(lx_one_line("abcdef", tiny, sizeof tiny), "abc"),
        "lx_one_line: cut to its buffer, terminated");
}

/* lx_format_real is --help's, the error messages', --steps 0's and the metrics file's
 * text of a number: chosen values as written by hand (six digits where they read back,
 * else 15, 16 or 17), and every one of 100,000 random bit patterns reads back exactly. */
static void test_format_real(void) {
  static const struct {
    double v;
    const char *text;
  } chosen[] = {{0.1, "0.1"},
                {2.5, "2.5"},
                {1.2345678, "1.2345678"},
                {1.0 / 3, "0.3333333333333333"},
                {0.1 + 0.2, "0.30000000000000004"},
                {0x1p53, "9007199254740992"},
                {5e-324, "4.94066e-324"},
                {-0.0, "-0"},
                {1e300, "1e+300"}};
  char got[40];
  for (size_t k = 0; k < sizeof chosen / sizeof *chosen; k++) {
    lx_format_real(got, sizeof got, chosen[k].v);
    CHECK(!strcmp(got, chosen[k].text), "lx_format_real(%a) is %s (%s)", chosen[k].v, chosen[k].text, got);
  }
  int wrong = 0, n = 0;
  uint64_t bits = 0x9e3779b97f4a7c15ull;
  for (int k = 0; k < 100000; k++) {
    bits = bits * 6364136223846793005ull + 1442695040888963407ull;
    double v;
    memcpy(&v, &bits, sizeof v);
    if (!isfinite(v)) continue;
    lx_format_real(got, sizeof got, v);
    if (strtod(got, NULL) != v && wrong++ < 3) printf("     %a: %s\n", v, got);
    n++;
  }
  CHECK(wrong == 0, "lx_format_real: %d of %d random doubles read back exactly", n - wrong, n);
  lx_format_real(got, sizeof got, NAN);
  CHECK(!strcmp(got, "nan"), "lx_format_real: a NaN is nan (%s)", got);
  lx_format_real(got, sizeof got, -NAN); /* what 0 * inf and inf - inf give on x86 */
  CHECK(!strcmp(got, "nan"), "lx_format_real: a NaN with its sign bit set is nan too, not -nan (%s)", got);
}

static void test_metrics(void) {
  char out[4096], command[1024];
  const char *path = in_scratch("metrics.jsonl");
  int status = run_self(out, sizeof out, "metrics '%s'", path);
  CHECK(status == 0 && strstr(out, "step     1/3 | loss 5.500000 | lr 1.000e-03 | norm 2.0000") &&
            strstr(out, "| val 5.250000") && strstr(out, "tok/s | eta "),
        "metrics print one line per step with loss, val, lr, norm, ms, tokens/s and ETA");
  if (status != 0) printf("     %s\n", out);
  snprintf(command, sizeof command,
           "python3 -c 'import json, sys\n"
           "rows = [json.loads(line) for line in open(sys.argv[1])]\n"
           "keys = {\"step\", \"loss\", \"lr\", \"grad_norm\", \"ms\", \"tokens_per_s\"}\n"
           "assert len(rows) == 3, rows\n"
           "assert all(keys <= set(r) for r in rows), rows\n"
           "assert [\"val_loss\" in r for r in rows] == [False, True, False], rows\n"
           "assert rows[1][\"val_loss\"] == 5.25 and rows[0][\"loss\"] == 5.5 and rows[2][\"loss\"] is None, "
           "rows\n"
           "assert rows[0][\"tokens_per_s\"] == 16384 and rows[2][\"step\"] == 3, rows\n"
           "assert rows[1][\"grad_norm\"] == 1 / 3 and rows[2][\"tokens_per_s\"] == 2 ** 53, rows\n"
           "' '%s'",
           path);
  CHECK(system(command) == 0, "metrics JSON lines parse with python3's json, val_loss only when computed, "
                              "a NaN loss as null, every number exact (a norm of 1/3, 2^53 tokens/s)");
}

static int metrics_mode(const char *path) {
  lx_metrics_open(path, 0);
  lx_metrics_step(1, 3, 5.5, NAN, 1e-3, 2.0, 125.0, 16384.0);
  lx_metrics_step(2, 3, 5.375, 5.25, 1e-3, 1.0 / 3, 120.0, 17000.0);
  lx_metrics_step(3, 3, NAN, NAN, 5e-4, 1.25, 118.0, 0x1p53);
  lx_metrics_close();
  return 0;
}

/* ---- a save that cannot finish leaves no PATH.tmp ---------------------------------- */

/* A save's PATH.tmp is removed by the rank that exits before the commit: a
 * rank that dies on an error (exit: the atexit handler), and one the
 * watchdog ends (_exit, which runs no handler), whoever created the file. */
static void test_pending_checkpoint(void) {
  const char *modes[] = {"die-while-saving", "stuck-while-saving"};
  const char *says[] = {"cannot write checkpoint", "watchdog: rank 0 (stage 0) made no progress"};
  for (int i = 0; i < 2; i++) {
    char out[4096], path[512], tmp[600];
    snprintf(path, sizeof path, "%s", in_scratch(modes[i]));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    write_synthetic_checkpoint(path, &small_model, 3, 0); /* the last committed checkpoint */
    FILE *f = LX_FOPEN(tmp, "wb"); /* rank 0 created it; this rank opens it to write its part */
    fclose(f);
    int status = run_self(out, sizeof out, "%s '%s'", modes[i], path);
    CHECK(status == 1 && strstr(out, says[i]) && !file_exists(tmp) && file_exists(path),
          "%s: exits 1, removes PATH.tmp and leaves PATH (status %d, tmp %s)", modes[i], status,
          file_exists(tmp) ? "left" : "removed");
    if (status != 1 || !strstr(out, says[i])) printf("     %s\n", out);
  }
}

/* A rank stuck computing after a collective that completed: the watchdog
 * says so, and does not blame the collective's peers. */
static void test_watchdog_after_a_wait(void) {
  char out[4096];
  int status = run_self(out, sizeof out, "stuck-computing");
  CHECK(status == 1 && strstr(out, "made no progress") && strstr(out, "it waits on its own computation") &&
            !strstr(out, "a sum over"),
        "a rank stuck computing after an all-reduce: the watchdog names its own computation (status %d)",
        status);
  if (!strstr(out, "its own computation")) printf("     %s\n", out);
}

static int stuck_computing_mode(int argc, char **argv) {
  int rank;
  lx_mpi_start(&argc, &argv, 1, &rank);
  (void)lx_allreduce_sum_double(1.0, MPI_COMM_WORLD); /* done at once: one rank */
  lx_watchdog_start(0.5, rank, 0);
  for (int s = 0; s < 30; s++) /* a computation that never ends (the watchdog's SIGUSR2 ends each sleep) */
    sleep(1);
  return 0; /* not reached */
}

/* A rank that opened PATH.tmp for its part, then fails or stops making progress. */
static int pending_checkpoint_mode(const char *mode, const char *path) {
  char *tmp = NULL;
  int fd = lx_checkpoint_open_tmp(path, &tmp);
  if (!strcmp(mode, "die-while-saving")) lx_die("cannot write checkpoint %s: %s", tmp, strerror(ENOSPC));
  lx_watchdog_start(0.5, 0, 0);
  for (int s = 0; s < 30; s++) /* stuck in a write (the watchdog's SIGUSR2 ends each sleep) */
    sleep(1);
  close(fd);
  return 0; /* not reached: the watchdog ends the process first */
}

/* ---- MPI (several ranks: run by runtime_mpi_test.sh) ------------------------------ */

/* Each rank loads its stage's slices of SRC and all save DST together. */
static void mpi_checkpoint_round_trip(int rank, const char *src, const char *dst) {
  lx_ckpt_slice slices[LX_GPT2_NUM_TENSORS];
  int64_t size = 0;
  int n = stage_slices(&small_model, rank, 2, slices, &size);
  float *params = LX_MALLOC((size_t)size * sizeof(float));
  lx_checkpoint_load(src, &small_model, slices, n, params);
  lx_checkpoint_save_all(dst, &small_model, slices, n, params, MPI_COMM_WORLD);
  if (rank == 0) {
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    CHECK(files_identical(src, dst) && !file_exists(tmp),
          "2 ranks: load -> lx_checkpoint_save_all gives a byte-identical checkpoint");
  }
  free(params);
}

/* Micro-batches posted out of order still match by tag (2 ranks: 2 stages
 * of tp = dp = 1, peers named by stage in the pipeline communicator). */
static void mpi_point_to_point(int rank) {
  lx_groups groups = lx_groups_start(rank, 1, 1, rank);
  CHECK(groups.stage == rank && groups.tp_rank == 0 && groups.dp_rank == 0,
        "tp = dp = 1: world rank r is stage r, tp rank 0, replica 0");
  real a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, got_a[4] = {0}, got_b[4] = {0};
  MPI_Request reqs[2];
  if (rank == 0) {
    lx_isend(a, 4, 1, LX_TAG_ACTIVATION, 0, &reqs[0]);
    lx_isend(b, 4, 1, LX_TAG_ACTIVATION, 1, &reqs[1]);
    lx_waitall(2, reqs);
  } else {
    lx_irecv(got_b, 4, 0, LX_TAG_ACTIVATION, 1, &reqs[0]);
    lx_irecv(got_a, 4, 0, LX_TAG_ACTIVATION, 0, &reqs[1]);
    lx_wait(&reqs[0]);
    lx_wait(&reqs[1]);
    CHECK(!memcmp(got_a, a, sizeof a) && !memcmp(got_b, b, sizeof b),
          "lx_irecv matches lx_isend by (kind, micro-batch) tag, whatever the posting order");
  }
  double sum = lx_allreduce_sum_double(rank + 1.5, MPI_COMM_WORLD);
  real v[2] = {(real)rank, 1};
  lx_allreduce_sum(v, 2, MPI_COMM_WORLD);
  if (rank == 0) CHECK(sum == 4.0 && v[0] == 1 && v[1] == 2, "all-reduce sums over the ranks");
}

static int mpi_mode(int argc, char **argv) {
  int rank = 0;
  lx_mpi_start(&argc, &argv, 2, &rank);
  if (argc < 4) lx_die("usage: runtime_test mpi SRC DST");
  mpi_checkpoint_round_trip(rank, argv[2], argv[3]);
  mpi_point_to_point(rank);
  int failures = (int)lx_allreduce_sum_double(check_failures, MPI_COMM_WORLD);
  lx_mpi_finish();
  return failures ? 1 : 0;
}

/* A failing MPI call must stop the job with a message, not hang it. */
static int mpi_fail_mode(int argc, char **argv) {
  int rank = 0;
  lx_mpi_start(&argc, &argv, 1, &rank);
  real x = 0;
  LX_MPI_CHECK(MPI_Send(&x, 1, LX_MPI_REAL, 99, 0, MPI_COMM_WORLD));
  return 0;
}

/* ---- child modes and main --------------------------------------------------------- */

static int loader_open_mode(char **argv) {
  lx_loader *l = lx_loader_open(argv[2], B, T, atoi(argv[3]), 0, atoi(argv[4]), "test data");
  int inputs[BT], targets[BT];
  lx_loader_next(l, inputs, targets);
  lx_loader_close(l);
  return 0;
}

/* check-first PATTERN REPLICA EVERY: lx_loader_check_first of 2 batches
 * for replica REPLICA of 2 (EVERY: of both replicas); exits 0 if fine. */
static int check_first_mode(char **argv) {
  lx_loader *l = lx_loader_open(argv[2], B, T, VOCAB, atoi(argv[3]), 2, "validation data");
  lx_loader_check_first(l, 2, atoi(argv[4]));
  int inputs[BT], targets[BT];
  lx_loader_next(l, inputs, targets); /* the replica's first window again: the next is 2 on */
  int starts_again = l->next_window == l->replica + 2;
  lx_loader_close(l);
  return starts_again ? 0 : 3;
}

static int checkpoint_load_mode(char **argv) {
  lx_gpt2_header h = small_model;
  h.layers = atoi(argv[3]);
  h.channels = atoi(argv[4]);
  float *params = LX_MALLOC((size_t)lx_gpt2_param_count(&h) * sizeof(float));
  lx_ckpt_slice all = {"all", 0, 0, lx_gpt2_param_count(&h)};
  lx_checkpoint_load(argv[2], &h, &all, 1, params);
  free(params);
  return 0;
}

static int options_mode(int argc, char **argv, lx_program program) {
  lx_run_options o = caller_defaults(program);
  argv[1] = argv[0]; /* the options start after the mode word */
  lx_parse_run_options(argc - 1, argv + 1, &o);
  printf("parsed steps=%d\n", o.train.steps);
  return 0;
}

static int child_mode(int argc, char **argv) {
  const char *mode = argv[1];
  if (!strcmp(mode, "loader-open") && argc == 5) return loader_open_mode(argv);
  if (!strcmp(mode, "check-first") && argc == 5) return check_first_mode(argv);
  if (!strcmp(mode, "checkpoint-load") && argc == 5) return checkpoint_load_mode(argv);
  if (!strcmp(mode, "options")) return options_mode(argc, argv, LX_PROGRAM_CPU);
  if (!strcmp(mode, "options-cuda")) return options_mode(argc, argv, LX_PROGRAM_CUDA);
  if (!strcmp(mode, "mpi-options")) { /* as an emitted program: parse after lx_mpi_start */
    int rank;
    lx_mpi_start(&argc, &argv, 2, &rank);
    return options_mode(argc, argv, LX_PROGRAM_CPU);
  }
  if (!strcmp(mode, "metrics") && argc == 3) return metrics_mode(argv[2]);
  if (!strcmp(mode, "stuck-computing")) return stuck_computing_mode(argc, argv);
  if ((!strcmp(mode, "die-while-saving") || !strcmp(mode, "stuck-while-saving")) && argc == 3)
    return pending_checkpoint_mode(mode, argv[2]);
  if (!strcmp(mode, "mpi")) return mpi_mode(argc, argv);
  if (!strcmp(mode, "mpi-start")) {
    int rank;
    lx_mpi_start(&argc, &argv, atoi(argv[2]), &rank);
    lx_mpi_finish();
    return 0;
  }
  if (!strcmp(mode, "mpi-fail")) return mpi_fail_mode(argc, argv);
  if (!strcmp(mode, "make-checkpoint") && argc == 3) {
    write_synthetic_checkpoint(argv[2], &small_model, 3, 0);
    return 0;
  }
  if (!strcmp(mode, "check-shard") && argc == 5) { /* check-shard GLOB B T: open and read every window */
    lx_loader *l = lx_loader_open(argv[2], atoi(argv[3]), atoi(argv[4]), 256, 0, 1, "tokenized data");
    int64_t n = (int64_t)l->B * l->T;
    int *inputs = LX_MALLOC((size_t)n * sizeof(int)), *targets = LX_MALLOC((size_t)n * sizeof(int));
    for (int64_t w = 0; w < l->windows; w++)
      lx_loader_next(l, inputs, targets);
    printf("windows %lld\n", (long long)l->windows);
    lx_loader_close(l);
    return 0;
  }
  fprintf(stderr, "runtime_test: unknown mode %s\n", mode);
  return 2;
}

int main(int argc, char **argv) {
  if (argc > 1) return child_mode(argc, argv);
  ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
  if (n <= 0) LX_FATAL("cannot find this program's path");
  self_path[n] = '\0';
  snprintf(scratch, sizeof scratch, "/tmp/lx_runtime_test_XXXXXX");
  if (!mkdtemp(scratch)) LX_FATAL("cannot create a temporary directory");

  make_numbered_shards();
  test_loader_windows();
  for (int replicas = 2; replicas <= 4; replicas++)
    test_loader_replicas(replicas);
  test_loader_deterministic();
  test_loader_errors();
  test_loader_unreadable_dir();
  test_loader_check_first();
  test_loader_uint32();
  test_checkpoint_layout();
  test_checkpoint_load();
  test_checkpoint_round_trip();
  test_checkpoint_errors();
  test_options_all_flags();
  test_options_errors();
  test_options_cuda();
  test_options_training_settings();
  test_one_line();
  test_format_real();
  test_metrics();
  test_pending_checkpoint();
  test_watchdog_after_a_wait();

  char command[512];
  snprintf(command, sizeof command, "rm -rf '%s'", scratch);
  if (system(command) != 0) printf("warning: could not remove %s\n", scratch);
  return check_exit_status();
}
