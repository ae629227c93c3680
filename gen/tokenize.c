/* tokenize.c — `lynxgen tokenize`: turns a text file into the token shards
 * the emitted training programs read (llm.c's format, see
 * templates/common/lx_data.h), so that a training run needs no Python.
 *
 * Byte-level: token = byte value, vocabulary 256. Crude, but exact and
 * dependency-free, and enough to watch a small model learn. The last
 * --val-fraction of the bytes become the validation shards: the split is
 * contiguous so that no validation text also appears in training. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../templates/common/lx_data.h" /* the shard header */
#include "alloc.h"

enum { TOKENIZE_ERROR = 1, TOKENIZE_USAGE = 2 };

#define TOKENIZE_VOCAB 256
#define DEFAULT_SHARD_TOKENS 100000000L /* as llm.c's shards; the header count is an int32 */

static const char tokenize_usage[] =
    "usage: lynxgen tokenize TEXTFILE -o DIR [--val-fraction F] [--shard-tokens N]\n"
    "\n"
    "Byte-level tokenization (token = byte value, vocabulary 256) into llm.c token\n"
    "shards: DIR/train_000000.bin, ... and DIR/val_000000.bin, ... A DIR that holds\n"
    "shards of those names already is refused (they may be another text's, hours of\n"
    "work; mixed with the new ones, a training glob would read both). Train with\n"
    "--data 'DIR/train_*.bin' --val-data 'DIR/val_*.bin' and a model whose vocab is 256.\n"
    "\n"
    "  -o, --output DIR      where the shards go (created if missing)\n"
    "  --val-fraction F      the last F of the bytes are validation data, 0 <= F < 1\n"
    "                        (default 0.1; 0 writes no validation shard)\n"
    "  --shard-tokens N      at most N tokens per shard (default 100000000); a split\n"
    "                        of more is cut into shards of equal size (within one\n"
    "                        token), so that none is a short tail the programs refuse\n"
    "  -h, --help            this text\n";

typedef struct {
  const char *text_path, *out_dir;
  double val_fraction;
  long shard_tokens;
} tokenize_options;

static int usage_error(const char *message, const char *arg) {
  fprintf(stderr, "lynxgen tokenize: %s%s\n\n%s", message, arg ? arg : "", tokenize_usage);
  return TOKENIZE_USAGE;
}

/* The value of a flag that takes one, or NULL when it is missing. */
static const char *flag_value(int argc, char **argv, int *i) { return *i + 1 < argc ? argv[++*i] : NULL; }

/* Returns -1 when parsed, otherwise the exit status (0 for --help). */
static int parse_tokenize_options(int argc, char **argv, tokenize_options *o) {
  *o = (tokenize_options){.val_fraction = 0.1, .shard_tokens = DEFAULT_SHARD_TOKENS};
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *value;
    char *end;
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      fputs(tokenize_usage, stdout);
      return 0;
    } else if (!strcmp(arg, "-o") || !strcmp(arg, "--output")) {
      if (!(o->out_dir = flag_value(argc, argv, &i)) || !*o->out_dir)
        return usage_error("-o needs a directory", NULL);
    } else if (!strcmp(arg, "--val-fraction")) {
      if (!(value = flag_value(argc, argv, &i))) return usage_error("--val-fraction needs a value", NULL);
      o->val_fraction = strtod(value, &end);
      if (!*value || *end || !(o->val_fraction >= 0 && o->val_fraction < 1))
        return usage_error("--val-fraction wants a number in [0, 1), not ", value);
    } else if (!strcmp(arg, "--shard-tokens")) {
      if (!(value = flag_value(argc, argv, &i))) return usage_error("--shard-tokens needs a value", NULL);
      errno = 0;
      o->shard_tokens = strtol(value, &end, 10);
      if (!*value || *end || errno || o->shard_tokens < 1 || o->shard_tokens > INT32_MAX)
        return usage_error("--shard-tokens wants a positive integer below 2^31, not ", value);
    } else if (arg[0] == '-' && arg[1]) {
      return usage_error("unknown option ", arg);
    } else if (o->text_path) {
      return usage_error("more than one input file: ", arg);
    } else {
      o->text_path = arg;
    }
  }
  if (!o->text_path) return usage_error("no input file", NULL);
  if (!o->out_dir) return usage_error("no output directory (-o DIR)", NULL);
  return -1;
}

/* The whole file, or NULL with a message. */
static unsigned char *read_text(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "lynxgen tokenize: cannot read %s: %s\n", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISDIR(st.st_mode))) {
    fprintf(stderr, "lynxgen tokenize: %s is %s, not a text file\n", path,
            S_ISDIR(st.st_mode) ? "a directory" : "a device"); /* /dev/zero would never end */
    fclose(f);
    return NULL;
  }
  size_t cap = 1 << 16, n = 0, got;
  unsigned char *data = lx_malloc(cap);
  while ((got = fread(data + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) data = lx_realloc(data, cap *= 2);
  }
  int failed = ferror(f);
  fclose(f);
  if (failed) {
    fprintf(stderr, "lynxgen tokenize: cannot read %s: %s\n", path, strerror(errno));
    free(data);
    return NULL;
  }
  *size = n;
  return data;
}

/* mkdir -p: every missing directory on the way. */
static int make_dirs(const char *dir) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
    fprintf(stderr, "lynxgen tokenize: output path too long: %s\n", dir);
    return -1;
  }
  for (char *p = path + 1;; p++) {
    int last = *p == '\0';
    if (*p == '/' || last) {
      *p = '\0';
      if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "lynxgen tokenize: cannot create directory %s: %s\n", path, strerror(errno));
        return -1;
      }
      if (last) break;
      *p = '/';
    }
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "lynxgen tokenize: %s is not a directory\n", dir);
    return -1;
  }
  return 0;
}

/* Whether name is SPLIT_NNNNNN.bin for a split of ours. */
static bool is_shard_name(const char *name) {
  static const char *const splits[] = {"train_", "val_"};
  for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
    size_t n = strlen(splits[i]);
    if (strncmp(name, splits[i], n) != 0) continue;
    const char *digits = name + n;
    if (strspn(digits, "0123456789") == 6 && !strcmp(digits + 6, ".bin")) return true;
  }
  return false;
}

/* 0 when DIR holds no shard of ours; otherwise -1, said. An earlier run's
 * shards are not replaced: they may be another text's, and those beyond the
 * new run's count would be read by the training glob with the new ones.
 * (DIR is listed, not globbed: its name may hold *, ? or [.) */
static int refuse_existing_shards(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "lynxgen tokenize: cannot list %s: %s\n", dir, strerror(errno));
    return -1;
  }
  int status = 0;
  for (struct dirent *e; status == 0 && (e = readdir(d));)
    if (is_shard_name(e->d_name)) {
      fprintf(stderr,
              "lynxgen tokenize: refusing -o %s: it holds token shards already (%s); tokenize into a new "
              "directory, or move them away first\n",
              dir, e->d_name);
      status = -1;
    }
  closedir(d);
  return status;
}

static int write_shard(const char *path, const unsigned char *bytes, // (count)
                       size_t count) {
  /* a new file, never one that appeared since the check, nor through a link */
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
  FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
  if (!f) {
    if (fd >= 0) close(fd);
    fprintf(stderr, "lynxgen tokenize: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  int32_t header[LX_SHARD_HEADER_INTS];
  lx_shard_header(header, (int64_t)count);
  int ok = fwrite(header, sizeof header, 1, f) == 1;
  uint16_t tokens[4096];
  for (size_t done = 0; ok && done < count; done += 4096) {
    size_t n = count - done < 4096 ? count - done : 4096;
    for (size_t i = 0; i < n; i++)
      tokens[i] = bytes[done + i];
    ok = fwrite(tokens, sizeof tokens[0], n, f) == n;
  }
  if (fclose(f) != 0) ok = 0;
  if (!ok) {
    fprintf(stderr, "lynxgen tokenize: cannot write %s: %s\n", path, strerror(errno));
    remove(path);
    return -1;
  }
  return 0;
}

/* DIR/SPLIT_000000.bin, ... of at most shard_tokens tokens each, as few as
 * that allows, of equal size within one token: cut at every shard_tokens,
 * the last shard could be a few tokens, fewer than a program's batch. */
static int write_split(const tokenize_options *o, const char *split, const unsigned char *bytes, // (count)
                       size_t count) {
  size_t shards = (count + (size_t)o->shard_tokens - 1) / (size_t)o->shard_tokens, first = 0;
  for (size_t shard = 0; shard < shards; shard++) {
    size_t n = count / shards + (shard < count % shards); /* the first count % shards take one more */
    char path[4200];
    snprintf(path, sizeof path, "%s/%s_%06zu.bin", o->out_dir, split, shard);
    if (write_shard(path, bytes + first, n) != 0) return -1;
    printf("wrote %s (%zu tokens)\n", path, n);
    first += n;
  }
  return 0;
}

/* 'DIR/SPLIT_*.bin' for a POSIX shell, matching DIR's shards alone: DIR's
 * glob characters escaped (run[1]/train_*.bin would read run1's shards),
 * its quotes closed around, its trailing slashes left out. */
static void print_shard_glob(const char *dir, const char *split) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/')
    n--;
  putchar('\'');
  for (size_t i = 0; i < n; i++) {
    if (dir[i] == '\'')
      fputs("'\\''", stdout);
    else if (strchr("*?[]\\", dir[i]))
      printf("\\%c", dir[i]);
    else
      putchar(dir[i]);
  }
  printf("/%s_*.bin'", split);
}

/* Train shards from the first `train` bytes, validation shards (if any) from
 * the rest. */
static int write_shards(const tokenize_options *o, const unsigned char *text, // (train + val)
                        size_t train, size_t val) {
  if (make_dirs(o->out_dir) != 0 || refuse_existing_shards(o->out_dir) != 0 ||
      write_split(o, "train", text, train) != 0)
    return -1;
  return val ? write_split(o, "val", text + train, val) : 0;
}

int lx_tokenize_main(int argc, char **argv);

int lx_tokenize_main(int argc, char **argv) {
  tokenize_options o;
  int status = parse_tokenize_options(argc, argv, &o);
  if (status >= 0) return status;
  size_t size = 0;
  unsigned char *text = read_text(o.text_path, &size);
  if (!text) return TOKENIZE_ERROR;
  size_t val = (size_t)(size * o.val_fraction), train = size - val;
  status = TOKENIZE_ERROR;
  if (size == 0)
    fprintf(stderr, "lynxgen tokenize: %s is empty: nothing to tokenize\n", o.text_path);
  else if (o.val_fraction > 0 && val == 0)
    fprintf(stderr,
            "lynxgen tokenize: %s has %zu bytes, too few to set %g of them aside (try --val-fraction 0)\n",
            o.text_path, size, o.val_fraction);
  else if (write_shards(&o, text, train, val) == 0) {
    printf("vocab %d (byte-level): train %zu tokens, val %zu tokens\ntrain with --data ", TOKENIZE_VOCAB,
           train, val);
    print_shard_glob(o.out_dir, "train");
    if (val) {
      fputs(" --val-data ", stdout);
      print_shard_glob(o.out_dir, "val");
    }
    putchar('\n');
    status = 0;
  }
  free(text);
  return status;
}
