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
#include <time.h>
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

/* What inspect found at DIR. */
typedef struct {
  dir_state state;
  mode_t mode; /* DIR's permissions, setgid included, and group: the new DIR keeps them */
  gid_t group;
  lx_manifest manifest;
} existing;

/* The signal (SIGINT, SIGTERM, SIGHUP) that asked this run to stop, 0 if none. */
static volatile sig_atomic_t interrupted;

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st, (void)type, (void)ftw;
  return remove(path);
}

/* Only ever called on the fresh directory this run created and filled. */
static void remove_own_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* mkdir -p of the directories that will hold `dir`, once it is known that
 * lynxgen may write it: a refused -o creates nothing. */
static void make_parents(const char *dir) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s", dir);
  for (char *slash = strchr(path + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
    *slash = '\0';
    mkdir(path, 0777); /* exists already, or mkdtemp beside DIR reports why not */
    *slash = '/';
  }
}

static bool is_link(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* `dir` with its `.` and `..` taken as the user reads them (lnk/. is lnk,
 * a/b/../c is a/c), into `out`. A `..` that steps back out of a symbolic
 * link is refused: lnk/x/.. or lnk/.. would name lnk's target or what holds
 * it, not what the spelling shows. So every `..` left leads the path, and
 * the path's last component is what the kernel would resolve it to. */
static bool spell_out(const char *dir, char *out, size_t size) {
  char copy[PATH_MAX];
  snprintf(copy, sizeof copy, "%s", dir);
  snprintf(out, size, "%s", dir[0] == '/' ? "/" : "");
  for (char *save, *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
    char *slash = strrchr(out, '/');
    const char *last = slash ? slash + 1 : out;
    if (!strcmp(c, ".") || (!strcmp(c, "..") && !strcmp(out, "/"))) continue; /* /.. is / */
    if (!strcmp(c, "..") && *last && strcmp(last, "..")) {
      if (is_link(out)) {
        fprintf(stderr, "lynxgen: refusing -o %s: its .. steps back out of the symbolic link %s\n", dir, out);
        return false;
      }
      *(slash ? slash + (slash == out) : out) = '\0'; /* the last component goes, a leading / stays */
      continue;
    }
    size_t n = strlen(out);
    snprintf(out + n, size - n, "%s%s", n && out[n - 1] != '/' ? "/" : "", c);
  }
  if (!*out) snprintf(out, size, ".");
  return true;
}

/* The canonical form of `path` (spelled out, as above), which need not exist
 * yet: the longest leading part of it that exists, resolved (symbolic links
 * in it are followed), then the rest as written. */
static bool canonical(const char *path, char *out, size_t size) {
  char head[PATH_MAX];
  size_t end = strlen(path);
  struct stat st;
  for (;;) {
    snprintf(head, sizeof head, "%.*s", end ? (int)end : 1, end ? path : ".");
    if (lstat(head, &st) == 0 || !end) break;
    while (end > 0 && path[end - 1] != '/') /* back to the start of the last component */
      end--;
    if (end > 1) end--; /* and before its slash, unless that is the root */
  }
  const char *rest = path + end + (path[end] == '/');
  char resolved[PATH_MAX];
  if (!realpath(head, resolved)) return false;
  int n = snprintf(out, size, "%s%s%s", resolved, *rest && strcmp(resolved, "/") ? "/" : "", rest);
  if (n < 0 || (size_t)n >= size) return errno = ENAMETOOLONG, false;
  return true;
}

/* DIR as a canonical path (symbolic links and `..` resolved), so that `.`,
 * `./`, `..` and links to them are recognized for what they are. Nothing is
 * created. */
static lx_output_status resolve(const char *dir, target *t) {
  if (!*dir || strlen(dir) >= PATH_MAX) {
    fprintf(stderr, "lynxgen: -o needs a directory name of 1 to %d bytes\n", PATH_MAX - 1);
    return LX_OUTPUT_REFUSED;
  }
  for (const unsigned char *c = (const unsigned char *)dir; *c; c++)
    if (*c < 0x20 || *c == 0x7f) { /* the shell's $(dirname "$0") in run.sh drops a trailing newline */
      fprintf(stderr, "lynxgen: refusing -o: its name holds a control character (byte 0x%02x)\n", *c);
      return LX_OUTPUT_REFUSED;
    }
  char spelled[PATH_MAX];
  if (!spell_out(dir, spelled, sizeof spelled)) return LX_OUTPUT_REFUSED;
  if (is_link(spelled)) { /* lnk, lnk/, lnk/. and a/../lnk alike */
    fprintf(stderr, "lynxgen: refusing -o %s: it is a symbolic link; name the directory it points to\n", dir);
    return LX_OUTPUT_REFUSED;
  }
  if (!canonical(spelled, t->dir, sizeof t->dir)) {
    fprintf(stderr, "lynxgen: cannot write %s: %s\n", dir, strerror(errno));
    return errno == ENAMETOOLONG ? LX_OUTPUT_REFUSED : LX_OUTPUT_FAILED;
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
static bool inspect(const target *t, const char *given, const char *fresh, existing *found) {
  struct stat st;
  *found = (existing){.state = DIR_ABSENT};
  lx_manifest *m = &found->manifest;
  if (lstat(t->dir, &st) != 0) return true;
  if (!S_ISDIR(st.st_mode)) {
    fprintf(stderr, "lynxgen: refusing -o %s: it exists and is not a directory\n", given);
    return false;
  }
  found->mode = st.st_mode & 07777;
  found->group = st.st_gid;
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
    } else if (listed && !lx_manifest_unchanged(t->dir, listed)) { /* a FIFO or a link in its place too */
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
  found->state = empty ? DIR_EMPTY : DIR_OURS;
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

/* The new DIR takes the permissions and group of the one it replaces: a
 * directory made private (0700) or shared with a group (setgid 2770) stays
 * so. A new DIR gets mkdir's: the umask's mode, and the setgid bit and group
 * a setgid parent gives (mkdtemp made it 0700 and kept those). */
static void keep_mode(const char *tmp, const char *given, const existing *found) {
  struct stat st;
  if (stat(tmp, &st) != 0) return;
  mode_t mode = found->mode;
  if (found->state == DIR_ABSENT) {
    mode_t mask = umask(0);
    umask(mask);
    mode = (0777 & ~mask) | (st.st_mode & S_ISGID);
  } else if (st.st_gid != found->group && chown(tmp, (uid_t)-1, found->group) != 0)
    fprintf(stderr, "lynxgen: %s could not keep its group (%s); it now has your group\n", given,
            strerror(errno));
  chmod(tmp, mode); /* after the group: chown may clear the setgid bit */
}

/* Whether to stop (SIGINT, SIGTERM, SIGHUP): until the exchange, lynxgen
 * stops where it stands, removing what it wrote; the exchange itself runs
 * with them held back. Not where they were ignored (nohup). */
static void note_interrupt(int sig) { interrupted = sig; }

static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
enum { STOP_SIGNALS = sizeof stop_signals / sizeof stop_signals[0] };

static void catch_interrupts(struct sigaction before[STOP_SIGNALS]) {
  struct sigaction note = {.sa_handler = note_interrupt}; /* no SA_RESTART: a wait returns */
  sigemptyset(&note.sa_mask);
  interrupted = 0;
  for (int i = 0; i < STOP_SIGNALS; i++)
    if (sigaction(stop_signals[i], NULL, &before[i]) == 0 && before[i].sa_handler != SIG_IGN)
      sigaction(stop_signals[i], &note, NULL);
}

/* Blocks them; `before` is the mask to restore. */
static void hold_interrupts(sigset_t *before) {
  sigset_t set;
  sigemptyset(&set);
  for (int i = 0; i < STOP_SIGNALS; i++)
    sigaddset(&set, stop_signals[i]);
  sigprocmask(SIG_BLOCK, &set, before);
}

/* Concurrent runs writing into the same parent take turns; the lock is
 * released when its descriptor closes, or the process ends. Any process that
 * can read the parent can hold it too: the wait says so, and an interrupt
 * ends it. */
static int lock_parent(const target *t) {
  int fd = open(t->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
  fprintf(stderr,
          "lynxgen: waiting for the lock on %s: another lynxgen is writing into it, or another process "
          "holds a lock on it (flock); Ctrl-C stops\n",
          t->parent);
  const struct timespec poll = {.tv_nsec = 100 * 1000 * 1000};
  while (flock(fd, LOCK_EX | LOCK_NB) != 0 && !interrupted)
    nanosleep(&poll, NULL); /* polled: a signal between a check and a blocking flock would be missed */
  return fd;
}

/* `found`, of the second inspection, replaced by `tmp`, signals held back:
 * an interrupt now would leave the previous DIR, or the user's files, in the
 * hidden directory. */
static lx_output_status swap(const target *t, const char *given, const char *tmp, existing *found) {
  char old[TMP_PATH_MAX + 8];
  keep_mode(tmp, given, found);
  sigset_t before;
  hold_interrupts(&before);
  lx_output_status status = LX_OUTPUT_FAILED;
  if (!interrupted) {
    status = put_in_place(tmp, t, found->state, old, sizeof old) ? LX_OUTPUT_WRITTEN : LX_OUTPUT_FAILED;
    if (status == LX_OUTPUT_FAILED)
      fprintf(stderr, "lynxgen: cannot replace %s: %s\n", given, strerror(errno));
    if (old[0]) retire_previous(old, t, &found->manifest);
  }
  sigprocmask(SIG_SETMASK, &before, NULL);
  return status;
}

static lx_output_status write_locked(const target *t, const char *given, const char *tmp,
                                     lx_output_filler fill, const void *ctx) {
  existing found;
  if (interrupted) return LX_OUTPUT_FAILED;
  if (!inspect(t, given, NULL, &found)) return LX_OUTPUT_REFUSED; /* before the work of writing */
  lx_free_manifest(&found.manifest);
  if (interrupted) return LX_OUTPUT_FAILED;
  if (!fill(tmp, ctx)) {
    fprintf(stderr, "lynxgen: cannot write %s: %s\n", given, strerror(errno));
    return LX_OUTPUT_FAILED;
  }
  if (interrupted || !inspect(t, given, tmp, &found))
    return interrupted ? LX_OUTPUT_FAILED : LX_OUTPUT_REFUSED;
  lx_output_status status = swap(t, given, tmp, &found);
  lx_free_manifest(&found.manifest);
  return status;
}

lx_output_status lx_write_output_dir(const char *dir, lx_output_filler fill, const void *ctx) {
  target t;
  lx_output_status resolved = resolve(dir, &t);
  if (resolved != LX_OUTPUT_WRITTEN) return resolved;
  if (is_off_limits(&t, dir)) return LX_OUTPUT_REFUSED;
  make_parents(t.dir);
  char tmp[TMP_PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/.%.*s.lynxgen-XXXXXX", t.parent, (int)STAGING_BASE_MAX, t.base);
  /* a file-size limit (ulimit -f) fails the write instead of killing lynxgen */
  struct sigaction ignore = {.sa_handler = SIG_IGN}, file_size, stop[STOP_SIGNALS];
  sigaction(SIGXFSZ, &ignore, &file_size);
  catch_interrupts(stop);
  lx_output_status status = LX_OUTPUT_FAILED;
  if (!mkdtemp(tmp))
    fprintf(stderr, "lynxgen: cannot create a directory in %s: %s\n", t.parent, strerror(errno));
  else {
    int lock = lock_parent(&t); /* DIR is read and replaced by one run at a time */
    status = write_locked(&t, dir, tmp, fill, ctx);
    if (lock >= 0) close(lock);
    if (status != LX_OUTPUT_WRITTEN) remove_own_tree(tmp);
  }
  if (interrupted && status != LX_OUTPUT_WRITTEN)
    fprintf(stderr, "lynxgen: interrupted; %s is as it was\n", dir);
  for (int i = 0; i < STOP_SIGNALS; i++)
    sigaction(stop_signals[i], &stop[i], NULL);
  sigaction(SIGXFSZ, &file_size, NULL);
  if (interrupted) raise(interrupted); /* ends lynxgen as the signal would have, its work undone */
  return status;
}
