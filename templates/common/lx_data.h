/* lx_data.h — token shards in llm.c's format, and the loader that cuts them
 * into batches: the same batches for the CPU and the CUDA programs.
 *
 * A shard is a 256-int32 header (magic, version, token count, then zeros)
 * followed by that many tokens, little-endian: magic 20240520 version 1 for
 * uint16 tokens (GPT-2's vocabulary; `lynxgen tokenize` writes them, as do
 * llm.c's dev/data scripts), magic 20240801 version 7 for uint32 tokens
 * (llm.c's Llama 3 shards: a vocabulary of 128256 needs them).
 *
 * Batches. Each shard of n tokens holds floor((n - 1) / (B*T)) windows of
 * B*T+1 consecutive tokens, window w starting at token w*B*T (neighbours
 * share one token, as in llm.c; the tail that is too short is skipped).
 * Numbering the windows of all shards in order (shards sorted by name) gives
 * global windows 0..W-1. Data-parallel replica r of R takes windows r, r+R,
 * r+2R, ... < W, then starts again at r: replicas never see each other's
 * windows, every call is a pure function of (files, B, T, r, R, call count),
 * and all replicas advance in lockstep with no communication.
 * inputs = window[0 .. B*T-1], targets = window[1 .. B*T].
 *
 * Tokens are checked against the vocabulary as they are read: an
 * out-of-range token would otherwise index past the embedding table. (The
 * validation windows are read once at the start: lx_loader_check_first.) */
#ifndef LX_DATA_H
#define LX_DATA_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_check.h"

#include <fcntl.h>
#include <glob.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define LX_SHARD_MAGIC 20240520 /* uint16 tokens */
#define LX_SHARD_VERSION 1
#define LX_SHARD_MAGIC_U32 20240801 /* uint32 tokens */
#define LX_SHARD_VERSION_U32 7
#define LX_SHARD_HEADER_INTS 256
#define LX_SHARD_HEADER_BYTES (LX_SHARD_HEADER_INTS * (int64_t)sizeof(int32_t))

/* ---- raw file access shared with the checkpoint code ----------------------- */

/* pread/pwrite may move fewer bytes than asked (signals, large requests):
 * loop until done. Return 0, or -1 with errno set (0 on end of file). */
static inline int lx_pread_full(int fd, void *dst, // (bytes)
                                int64_t bytes, int64_t offset) {
  char *p = (char *)dst;
  while (bytes > 0) {
    ssize_t got = pread(fd, p, (size_t)bytes, (off_t)offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = 0;
      return -1;
    }
    p += got, bytes -= got, offset += got;
  }
  return 0;
}

static inline int lx_pwrite_full(int fd, const void *src, // (bytes)
                                 int64_t bytes, int64_t offset) {
  const char *p = (const char *)src;
  while (bytes > 0) {
    ssize_t put = pwrite(fd, p, (size_t)bytes, (off_t)offset);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return -1;
    p += put, bytes -= put, offset += put;
  }
  return 0;
}

/* Opens path to read if it is a regular file. Otherwise -1, with why it
 * could not (strerror's words, or what the path is instead) in why: a named
 * pipe is not waited on (a FIFO in a downloaded checkpoint directory would
 * hang the job before any check), a directory or device is no file of data. */
static inline int lx_open_data_file(const char *path, char *why, // (cap)
                                    size_t cap) {
  int fd = open(path, O_RDONLY | O_NONBLOCK);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    snprintf(why, cap, "%s", strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  if (S_ISREG(st.st_mode)) return fd;
  snprintf(why, cap, "it is %s, not a file",
           S_ISDIR(st.st_mode)    ? "a directory"
           : S_ISFIFO(st.st_mode) ? "a named pipe"
           : S_ISSOCK(st.st_mode) ? "a socket"
                                  : "a device");
  close(fd);
  return -1;
}

static inline int64_t lx_file_size(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* The header of a shard holding `tokens` tokens. */
static inline void lx_shard_header(int32_t header[LX_SHARD_HEADER_INTS], int64_t tokens) {
  memset(header, 0, LX_SHARD_HEADER_BYTES);
  header[0] = LX_SHARD_MAGIC;
  header[1] = LX_SHARD_VERSION;
  header[2] = (int32_t)tokens;
}

/* ---- the loader --------------------------------------------------------------- */

typedef struct {
  char *path;
  int64_t tokens;       /* from the header, checked against the file size */
  int token_bytes;      /* 2 or 4 */
  int64_t first_window; /* global index of this shard's window 0 */
  int64_t windows;      /* floor((tokens - 1) / (B*T)), at least 1 */
} lx_shard;

typedef struct {
  int B, T, vocab;
  int replica, replicas;
  char *what;       /* "training data", ... : the prefix of every message */
  lx_shard *shards; /* (num_shards), sorted by path */
  int num_shards;
  int64_t windows;     /* W: the windows of all shards */
  int64_t next_window; /* global index of the window lx_loader_next returns */
  int shard;           /* the shard holding next_window */
  int fd, fd_shard;    /* the open shard (-1: none) */
  uint32_t *window;    /* (B*T+1) */
  unsigned char *raw;  /* the window's bytes as the shard holds them */
  uint64_t fingerprint; /* of the content (lx_loader_fingerprint); 0: not computed yet */
} lx_loader;

/* The bytes of a token of a shard whose header starts (magic, version); 0: not a shard. */
static inline int lx_shard_token_bytes(int32_t magic, int32_t version) {
  if (magic == LX_SHARD_MAGIC && version == LX_SHARD_VERSION) return 2;
  if (magic == LX_SHARD_MAGIC_U32 && version == LX_SHARD_VERSION_U32) return 4;
  return 0;
}

/* A shard opened to read (lx_open_data_file), or exit 1 saying why not. */
static inline int lx_open_shard(const char *what, const char *path) {
  char why[128];
  int fd = lx_open_data_file(path, why, sizeof why);
  if (fd < 0) lx_die("%s: cannot open %s: %s", what, path, why);
  return fd;
}

/* Reads and checks a shard's header into s (its token count and size). */
static inline void lx_shard_check(const char *what, lx_shard *s, int B, int T) {
  const char *path = s->path;
  int32_t header[LX_SHARD_HEADER_INTS];
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
      n--;
    lx_die("%s: %s is a directory: give the glob of its shards, such as %.*s/train_*.bin (training) or "
           "%.*s/val_*.bin (validation)",
           what, path, (int)n, path, (int)n, path);
  }
  int fd = lx_open_shard(what, path);
  int64_t size = lx_file_size(fd);
  if (size < LX_SHARD_HEADER_BYTES || lx_pread_full(fd, header, LX_SHARD_HEADER_BYTES, 0) != 0)
    lx_die("%s: %s is too short for a token shard header (%lld bytes, need %lld)", what, path,
           (long long)size, (long long)LX_SHARD_HEADER_BYTES);
  close(fd);
  if (header[0] != LX_SHARD_MAGIC && header[0] != LX_SHARD_MAGIC_U32)
    lx_die("%s: %s is not a token shard (magic %d, expected %d or %d; make one with `lynxgen tokenize`)", what,
           path, header[0], LX_SHARD_MAGIC, LX_SHARD_MAGIC_U32);
  s->token_bytes = lx_shard_token_bytes(header[0], header[1]);
  int u32 = header[0] == LX_SHARD_MAGIC_U32;
  if (!s->token_bytes)
    lx_die("%s: %s has magic %d (%s tokens) and shard version %d: that magic's version is %d", what, path,
           header[0], u32 ? "uint32" : "uint16", header[1], u32 ? LX_SHARD_VERSION_U32 : LX_SHARD_VERSION);
  int64_t tokens = header[2];
  int64_t expected = LX_SHARD_HEADER_BYTES + s->token_bytes * tokens;
  if (tokens < 0 || size != expected)
    lx_die("%s: %s is %lld bytes but its header says %lld tokens (%lld bytes): truncated or corrupt", what,
           path, (long long)size, (long long)tokens, (long long)expected);
  int64_t batch = (int64_t)B * T + 1;
  if (tokens < batch)
    lx_die("%s: %s holds %lld tokens, fewer than one batch of B*T+1 = %lld (B=%d, T=%d)", what, path,
           (long long)tokens, (long long)batch, B, T);
  s->tokens = tokens;
}

static inline char *lx_strdup(const char *s) {
  char *copy = (char *)LX_MALLOC(strlen(s) + 1);
  return strcpy(copy, s);
}

/* The directory glob could not read (lx_glob_unreadable), and why. */
static char lx_unreadable_dir[4096];
static int lx_unreadable_errno;

/* glob's error callback: a directory the pattern reaches that cannot be
 * read stops the search, where glob would skip it and train on the shards of
 * the others. One that does not exist is no error: nothing matches there. */
static inline int lx_glob_unreadable(const char *dir, int error) {
  if (error == ENOENT || error == ENOTDIR) return 0;
  snprintf(lx_unreadable_dir, sizeof lx_unreadable_dir, "%s", dir);
  lx_unreadable_errno = error;
  return 1;
}

/* Every directory that a leading part of pattern matches can be searched.
 * glob reads a directory to match a part with wildcards (its error callback
 * sees a failure there) but only stats a literal part inside it: in
 * 'd/<star>/s.bin' a directory d/x that cannot be searched would be skipped
 * silently, and the run would train on the shards of the others. */
static inline void lx_require_searchable(const char *what, const char *pattern) {
  char *prefix = lx_strdup(pattern);
  for (char *slash = strchr(prefix + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
    *slash = '\0';
    glob_t dirs;
    if (glob(prefix, 0, NULL, &dirs) == 0) {
      for (size_t i = 0; i < dirs.gl_pathc; i++) {
        const char *dir = dirs.gl_pathv[i];
        struct stat st;
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && faccessat(AT_FDCWD, dir, X_OK, AT_EACCESS) != 0)
          lx_die("%s: cannot read directory %s, which '%s' reaches: %s", what, dir, pattern, strerror(errno));
      }
      globfree(&dirs);
    }
    *slash = '/';
  }
  free(prefix);
}

/* The shard paths matching `pattern`, sorted (glob's default order). */
static inline void lx_loader_find_shards(lx_loader *l, const char *pattern) {
  if (!pattern || !*pattern) lx_die("%s: no file given", l->what);
  lx_require_searchable(l->what, pattern);
  glob_t found;
  int status = glob(pattern, 0, lx_glob_unreadable, &found);
  if (status == GLOB_ABORTED)
    lx_die("%s: cannot read directory %s, which '%s' reaches: %s", l->what, lx_unreadable_dir, pattern,
           strerror(lx_unreadable_errno));
  if (status == GLOB_NOMATCH) lx_die("%s: no file matches '%s'", l->what, pattern);
  if (status != 0) lx_die("%s: cannot search for '%s' (glob error %d)", l->what, pattern, status);
  l->num_shards = (int)found.gl_pathc;
  l->shards = (lx_shard *)LX_CALLOC((size_t)l->num_shards, sizeof(lx_shard));
  for (int i = 0; i < l->num_shards; i++)
    l->shards[i].path = lx_strdup(found.gl_pathv[i]);
  globfree(&found);
}

/* Opens the shards matching `pattern` (a glob(3) pattern, or one path) for
 * replica `replica` of `replicas`. Every problem with the files is reported
 * here, before training starts, except out-of-vocabulary tokens (found when
 * read, so that opening a large data set stays cheap). */
static inline lx_loader *lx_loader_open(const char *pattern, int B, int T, int vocab, int replica,
                                        int replicas, const char *what) {
  LX_CHECK(B > 0 && T > 0 && vocab > 0);
  LX_CHECK(replicas > 0 && replica >= 0 && replica < replicas);
  lx_loader *l = (lx_loader *)LX_CALLOC(1, sizeof(lx_loader));
  l->B = B, l->T = T, l->vocab = vocab, l->replica = replica, l->replicas = replicas;
  l->fd = l->fd_shard = -1;
  l->what = lx_strdup(what ? what : "data");
  lx_loader_find_shards(l, pattern);
  for (int i = 0; i < l->num_shards; i++) {
    lx_shard *s = &l->shards[i];
    lx_shard_check(l->what, s, B, T);
    s->windows = (s->tokens - 1) / ((int64_t)B * T);
    s->first_window = l->windows;
    l->windows += s->windows;
  }
  if (l->windows < replicas)
    lx_die("%s: '%s' holds %lld batches of B*T+1 = %lld tokens, fewer than the %d data-parallel replicas",
           l->what, pattern, (long long)l->windows, (long long)B * T + 1, replicas);
  l->window = (uint32_t *)LX_MALLOC(((size_t)B * T + 1) * sizeof(uint32_t));
  l->raw = (unsigned char *)LX_MALLOC(((size_t)B * T + 1) * sizeof(uint32_t));
  l->next_window = replica;
  return l;
}

/* Back to this replica's first window (before each validation pass). */
static inline void lx_loader_reset(lx_loader *l) {
  l->next_window = l->replica;
  l->shard = 0;
}

/* Continues at global window `next`, a position this replica's loader
 * reached in the run that saved it (a resumed run). */
static inline void lx_loader_seek(lx_loader *l, int64_t next) {
  if (next < 0 || next >= l->windows || (next - l->replica) % l->replicas != 0)
    lx_die("%s: window %lld is not one of replica %d's %lld windows", l->what, (long long)next, l->replica,
           (long long)l->windows);
  l->next_window = next;
  l->shard = 0;
}

/* Makes l->fd the open file of shard l->shard. */
static inline void lx_loader_open_shard(lx_loader *l) {
  if (l->fd_shard == l->shard) return;
  if (l->fd >= 0) close(l->fd);
  l->fd = lx_open_shard(l->what, l->shards[l->shard].path);
  l->fd_shard = l->shard;
}

/* Reads global window l->next_window into l->window and checks its tokens. */
static inline void lx_loader_read_window(lx_loader *l) {
  while (l->next_window >= l->shards[l->shard].first_window + l->shards[l->shard].windows)
    l->shard++;
  const lx_shard *s = &l->shards[l->shard];
  int64_t n = (int64_t)l->B * l->T + 1;
  int64_t first_token = (l->next_window - s->first_window) * ((int64_t)l->B * l->T);
  lx_loader_open_shard(l);
  int size = s->token_bytes;
  if (lx_pread_full(l->fd, l->raw, size * n, LX_SHARD_HEADER_BYTES + size * first_token) != 0)
    lx_die("%s: cannot read tokens %lld..%lld of %s: %s", l->what, (long long)first_token,
           (long long)(first_token + n - 1), s->path, errno ? strerror(errno) : "file shrank");
  for (int64_t i = 0; i < n; i++) {
    const unsigned char *b = l->raw + size * i; /* little-endian */
    l->window[i] = size == 2 ? (uint32_t)(b[0] | b[1] << 8)
                             : (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    if (l->window[i] >= (uint32_t)l->vocab)
      lx_die("%s: %s: token %u at position %lld is outside the vocabulary of %d tokens", l->what, s->path,
             (unsigned)l->window[i], (long long)(first_token + i), l->vocab);
  }
}

/* The next batch of this replica: targets are the inputs shifted by one. */
static inline void lx_loader_next(lx_loader *l,
                                  int *inputs, // (B, T)
                                  int *targets // (B, T)
) {
  lx_loader_read_window(l);
  int64_t n = (int64_t)l->B * l->T;
  for (int64_t i = 0; i < n; i++) {
    inputs[i] = l->window[i];
    targets[i] = l->window[i + 1];
  }
  l->next_window += l->replicas;
  if (l->next_window >= l->windows) lx_loader_reset(l);
}

/* Reads the first `per_replica` windows of this replica, or with
 * every_replica those of all (global windows 0 to per_replica * replicas -
 * 1: the preflight, one process, checks for every rank of the job), which
 * checks their tokens, then starts again: a bad token in what a validation
 * pass reads is found before step 1 rather than at the first validation. */
static inline void lx_loader_check_first(lx_loader *l, int64_t per_replica, int every_replica) {
  int64_t end = per_replica * l->replicas < l->windows ? per_replica * l->replicas : l->windows;
  for (l->next_window = every_replica ? 0 : l->replica; l->next_window < end;
       l->next_window += every_replica ? 1 : l->replicas)
    lx_loader_read_window(l);
  lx_loader_reset(l);
}

#define LX_FINGERPRINT_TOKENS 4096 /* of each shard's first tokens */

static inline uint64_t lx_fnv1a(uint64_t hash, const void *data, // (bytes)
                                size_t bytes) {
  const unsigned char *p = (const unsigned char *)data;
  for (size_t i = 0; i < bytes; i++)
    hash = (hash ^ p[i]) * 1099511628211ULL;
  return hash;
}

/* A fingerprint of the data's content, never 0: each shard's token count
 * and first LX_FINGERPRINT_TOKENS tokens, in the shards' order. A resumed
 * run must read the tokens its checkpoint was trained on: the paths may
 * change, the content not. Computed once, reading 8 or 16 KiB per shard. */
static inline uint64_t lx_loader_fingerprint(lx_loader *l) {
  if (l->fingerprint) return l->fingerprint;
  uint64_t hash = 14695981039346656037ULL; /* FNV-1a's offset basis */
  unsigned char *first = (unsigned char *)LX_MALLOC(LX_FINGERPRINT_TOKENS * sizeof(uint32_t));
  for (int i = 0; i < l->num_shards; i++) {
    const lx_shard *s = &l->shards[i];
    int64_t bytes = s->token_bytes * (s->tokens < LX_FINGERPRINT_TOKENS ? s->tokens : LX_FINGERPRINT_TOKENS);
    char why[128] = "it shrank";
    int fd = lx_open_data_file(s->path, why, sizeof why);
    if (fd < 0 || lx_pread_full(fd, first, bytes, LX_SHARD_HEADER_BYTES) != 0)
      lx_die("%s: cannot read %s: %s", l->what, s->path, fd < 0 || !errno ? why : strerror(errno));
    close(fd);
    hash = lx_fnv1a(hash, &s->tokens, sizeof s->tokens);
    hash = lx_fnv1a(hash, first, (size_t)bytes);
  }
  free(first);
  return l->fingerprint = hash | 1;
}

static inline void lx_loader_close(lx_loader *l) {
  if (!l) return;
  if (l->fd >= 0) close(l->fd);
  for (int i = 0; i < l->num_shards; i++)
    free(l->shards[i].path);
  free(l->shards);
  free(l->window);
  free(l->raw);
  free(l->what);
  free(l);
}

#endif
