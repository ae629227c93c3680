/* output_dir.c — -o DIR without losing a user's file (output_dir.h). */
#define _GNU_SOURCE /* renameat2 and RENAME_EXCHANGE, nftw */
#include "report/output_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report/manifest.h"

/* Written into every output directory by lynxgen before it kept a manifest:
 * such a directory's marker is lynxgen's own file. */
#define LEGACY_MARKER ".lynxgen"

typedef struct {
  char dir[PATH_MAX];    /* the canonical path of DIR */
  char parent[PATH_MAX]; /* of its parent */
  const char *base;      /* DIR's last component, inside dir */
} target;

/* The hidden sibling: PARENT/.BASE.lynxgen-XXXXXX, and that with ".old"
 * after it where the exchange falls back to renames: BASE cut to fit a name's
 * NAME_MAX bytes (DIR's own name may take them all). */
enum { TMP_PATH_MAX = 2 * PATH_MAX + 32, STAGING_BASE_MAX = NAME_MAX - sizeof "..lynxgen-XXXXXX.old" + 1 };

typedef enum { DIR_ABSENT, DIR_EMPTY, DIR_OURS } dir_state;

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st, (void)type, (void)ftw;
  return remove(path);
}

/* Only ever called on the fresh directory this run created and filled. */
static void remove_own_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* mkdir -p of the directories that will hold `dir`. */
static void make_parents(const char *dir) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s", dir);
  for (char *slash = strchr(path + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
    *slash = '\0';
    mkdir(path, 0777); /* exists already, or realpath below reports why not */
    *slash = '/';
  }
}

/* DIR as a canonical path (symbolic links and `..` resolved), so that `.`,
 * `./`, `..` and links to them are recognized for what they are. */
static lx_output_status resolve(const char *dir, target *t) {
  char given[PATH_MAX];
  if (!*dir || strlen(dir) >= sizeof given) {
    fprintf(stderr, "lynxgen: -o needs a directory name of 1 to %d bytes\n", PATH_MAX - 1);
    return LX_OUTPUT_REFUSED;
  }
  for (const unsigned char *c = (const unsigned char *)dir; *c; c++)
    if (*c < 0x20 || *c == 0x7f) { /* the shell's $(dirname "$0") in run.sh drops a trailing newline */
      fprintf(stderr, "lynxgen: refusing -o: its name holds a control character (byte 0x%02x)\n", *c);
      return LX_OUTPUT_REFUSED;
    }
  snprintf(given, sizeof given, "%s", dir);
  for (size_t n = strlen(given); n > 1 && given[n - 1] == '/'; n--)
    given[n - 1] = '\0';
  struct stat st;
  if (lstat(given, &st) == 0 && S_ISLNK(st.st_mode)) {
    fprintf(stderr, "lynxgen: refusing -o %s: it is a symbolic link; name the directory it points to\n", dir);
    return LX_OUTPUT_REFUSED;
  }
  make_parents(given);
  char *slash = strrchr(given, '/');
  const char *base = slash ? slash + 1 : given;
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash == given ? 1 : slash - given) : 1,
           slash ? given : ".");
  bool exists = lstat(given, &st) == 0;
  char resolved[PATH_MAX];
  if (!realpath(exists ? given : parent, resolved)) {
    fprintf(stderr, "lynxgen: cannot write %s: %s\n", dir, strerror(errno));
    return LX_OUTPUT_FAILED;
  }
  int n = exists
              ? snprintf(t->dir, sizeof t->dir, "%s", resolved)
              : snprintf(t->dir, sizeof t->dir, "%s%s%s", resolved, strcmp(resolved, "/") ? "/" : "", base);
  if (n < 0 || (size_t)n >= sizeof t->dir) {
    fprintf(stderr, "lynxgen: -o %s: the path is too long\n", dir);
    return LX_OUTPUT_REFUSED;
  }
  char *last = strrchr(t->dir, '/');
  t->base = last + 1;
  snprintf(t->parent, sizeof t->parent, "%.*s", last == t->dir ? 1 : (int)(last - t->dir), t->dir);
  return LX_OUTPUT_WRITTEN; /* resolved */
}

/* Whether `inner` is `outer` or lies inside it (both canonical). */
static bool inside(const char *inner, const char *outer) {
  size_t n = strlen(outer);
  if (!strcmp(outer, "/")) return true;
  return !strncmp(inner, outer, n) && (inner[n] == '\0' || inner[n] == '/');
}

/* `/`, the working directory, the home directory and what holds them are
 * never replaced, whoever wrote them. */
static bool is_off_limits(const target *t, const char *given) {
  char cwd[PATH_MAX], home[PATH_MAX];
  const char *why = NULL;
  if (!strcmp(t->dir, "/"))
    why = "the root directory";
  else if (getcwd(cwd, sizeof cwd) && inside(cwd, t->dir))
    why = "the working directory or one that holds it";
  else if (getenv("HOME") && realpath(getenv("HOME"), home) && inside(home, t->dir))
    why = "the home directory or one that holds it";
  if (why)
    fprintf(stderr,
            "lynxgen: refusing -o %s: it is %s; name a directory for lynxgen's output alone, e.g. -o build\n",
            given, why);
  return why != NULL;
}

static bool is_own_name(const lx_manifest *m, const char *name) {
  return !strcmp(name, "manifest.txt") || !strcmp(name, LEGACY_MARKER) || lx_manifest_find(m, name);
}

/* Whether DIR may be replaced: absent, empty, or written by lynxgen with
 * every file it wrote unchanged. With `fresh` (the new output) it also must
 * not hold a user's file of a name the new output uses. */
static bool inspect(const target *t, const char *given, const char *fresh, dir_state *state, lx_manifest *m) {
  struct stat st;
  *m = (lx_manifest){0};
  if (lstat(t->dir, &st) != 0) return *state = DIR_ABSENT, true;
  if (!S_ISDIR(st.st_mode)) {
    fprintf(stderr, "lynxgen: refusing -o %s: it exists and is not a directory\n", given);
    return false;
  }
  DIR *d = opendir(t->dir);
  if (!d) {
    fprintf(stderr, "lynxgen: cannot read %s: %s\n", given, strerror(errno));
    return false;
  }
  bool ours = lx_read_manifest(t->dir, m), ok = true, empty = true;
  for (struct dirent *e; ok && (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    empty = false;
    const lx_manifest_entry *listed = ours ? lx_manifest_find(m, e->d_name) : NULL;
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/%s", fresh ? fresh : "", e->d_name);
    if (!ours) {
      fprintf(stderr,
              "lynxgen: refusing -o %s: it is not empty and lynxgen did not write it (no manifest.txt)\n",
              given);
      ok = false;
    } else if (listed && !lx_manifest_unchanged(t->dir, listed)) {
      fprintf(stderr,
              "lynxgen: refusing -o %s: %s changed since lynxgen wrote it; move it away to regenerate\n",
              given, e->d_name);
      ok = false;
    } else if (!is_own_name(m, e->d_name) && fresh && access(path, F_OK) == 0) {
      fprintf(stderr,
              "lynxgen: refusing -o %s: %s is not lynxgen's, and the new output has a file of that name\n",
              given, e->d_name);
      ok = false;
    }
  }
  closedir(d);
  *state = empty ? DIR_EMPTY : DIR_OURS;
  if (!ok) lx_free_manifest(m);
  return ok;
}

/* After the exchange `old` holds the previous output: the user's files move
 * into the new one, lynxgen's own are removed, and `old` goes if empty. */
static void retire_previous(const char *old, const target *t, const lx_manifest *m) {
  DIR *d = opendir(old);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char from[PATH_MAX + 300], to[PATH_MAX + 300];
    snprintf(from, sizeof from, "%s/%s", old, e->d_name);
    snprintf(to, sizeof to, "%s/%s", t->dir, e->d_name);
    if (is_own_name(m, e->d_name))
      unlink(from);
    else if (rename(from, to) != 0)
      fprintf(stderr, "lynxgen: could not move your %s into %s (%s); it stays in %s\n", e->d_name, t->dir,
              strerror(errno), old);
  }
  if (d) closedir(d);
  if (rmdir(old) != 0) fprintf(stderr, "lynxgen: kept %s: it still holds files lynxgen did not write\n", old);
}

/* tmp takes DIR's place; returns where the previous DIR now is ("" if none). */
static bool put_in_place(const char *tmp, const target *t, dir_state state, char *old, size_t old_size) {
  old[0] = '\0';
  if (state != DIR_OURS) return rename(tmp, t->dir) == 0; /* onto nothing or an empty directory */
  if (renameat2(AT_FDCWD, tmp, AT_FDCWD, t->dir, RENAME_EXCHANGE) == 0) {
    snprintf(old, old_size, "%s", tmp);
    return true;
  }
  if (errno != EINVAL && errno != ENOSYS) return false;
  /* a filesystem without the atomic exchange (some network filesystems):
   * two renames, the first undone if the second fails */
  snprintf(old, old_size, "%s.old", tmp);
  if (rename(t->dir, old) != 0) return old[0] = '\0', false;
  if (rename(tmp, t->dir) == 0) return true;
  int saved = errno;
  rename(old, t->dir);
  old[0] = '\0';
  errno = saved;
  return false;
}

/* Concurrent runs writing into the same parent take turns; the lock is
 * released when its descriptor closes, or the process ends. */
static int lock_parent(const target *t) {
  int fd = open(t->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
    fprintf(stderr, "lynxgen: waiting for another lynxgen writing into %s\n", t->parent);
    flock(fd, LOCK_EX);
  }
  return fd;
}

static lx_output_status write_locked(const target *t, const char *given, const char *tmp,
                                     lx_output_filler fill, const void *ctx) {
  dir_state state;
  lx_manifest m;
  if (!inspect(t, given, NULL, &state, &m)) return LX_OUTPUT_REFUSED; /* before the work of writing */
  lx_free_manifest(&m);
  if (!fill(tmp, ctx)) {
    fprintf(stderr, "lynxgen: cannot write %s: %s\n", given, strerror(errno));
    return LX_OUTPUT_FAILED;
  }
  lx_output_status status = LX_OUTPUT_REFUSED;
  char old[TMP_PATH_MAX + 8];
  if (inspect(t, given, tmp, &state, &m)) {
    status = put_in_place(tmp, t, state, old, sizeof old) ? LX_OUTPUT_WRITTEN : LX_OUTPUT_FAILED;
    if (status == LX_OUTPUT_FAILED)
      fprintf(stderr, "lynxgen: cannot replace %s: %s\n", given, strerror(errno));
    if (old[0]) retire_previous(old, t, &m);
    lx_free_manifest(&m);
  }
  return status;
}

lx_output_status lx_write_output_dir(const char *dir, lx_output_filler fill, const void *ctx) {
  target t;
  lx_output_status resolved = resolve(dir, &t);
  if (resolved != LX_OUTPUT_WRITTEN) return resolved;
  if (is_off_limits(&t, dir)) return LX_OUTPUT_REFUSED;
  char tmp[TMP_PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/.%.*s.lynxgen-XXXXXX", t.parent, (int)STAGING_BASE_MAX, t.base);
  /* an interrupt now would leave the hidden directory behind: it waits; a
   * file-size limit (ulimit -f) fails the write instead of killing lynxgen */
  sigset_t interrupts, before;
  sigemptyset(&interrupts);
  sigaddset(&interrupts, SIGINT), sigaddset(&interrupts, SIGTERM), sigaddset(&interrupts, SIGHUP);
  sigprocmask(SIG_BLOCK, &interrupts, &before);
  struct sigaction ignore = {.sa_handler = SIG_IGN}, file_size;
  sigaction(SIGXFSZ, &ignore, &file_size);
  lx_output_status status = LX_OUTPUT_FAILED;
  if (!mkdtemp(tmp))
    fprintf(stderr, "lynxgen: cannot create a directory in %s: %s\n", t.parent, strerror(errno));
  else {
    mode_t mask = umask(0);
    umask(mask);
    chmod(tmp, 0777 & ~mask);   /* as mkdir would make DIR: mkdtemp's 0700 hid it from the user's group */
    int lock = lock_parent(&t); /* DIR is read and replaced by one run at a time */
    status = write_locked(&t, dir, tmp, fill, ctx);
    if (lock >= 0) close(lock);
    if (status != LX_OUTPUT_WRITTEN) remove_own_tree(tmp);
  }
  sigaction(SIGXFSZ, &file_size, NULL);
  sigprocmask(SIG_SETMASK, &before, NULL);
  return status;
}
