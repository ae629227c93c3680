/* lx_stop.h — how a run stops without losing anything.
 *
 * Preemption: SIGTERM, SIGINT, SIGHUP or SIGUSR1 asks the run to stop. The
 * signal only sets a flag; every rank finishes the step it is in, and at the
 * step's end the ranks agree (one all-reduce) on whether any of them was
 * asked, so that all save the same step and stop together. mpirun kills its
 * ranks on SIGTERM rather than forwarding it, so run.sh turns a SIGTERM,
 * SIGINT or SIGHUP it receives into SIGUSR1, which mpirun forwards to every
 * rank, and names the signal it received in a file of LX_STOP_DIR (srun
 * delivers SIGTERM to the ranks themselves).
 *
 * A rank catches these signals from the first line of main, before
 * MPI_Init, and then says so to run.sh (a file in LX_STOP_DIR): a SIGUSR1
 * reaching a rank that does not catch it yet would kill it, and one reaching
 * mpirun before it has started the ranks is lost, so run.sh relays a stop
 * only once every rank catches it.
 *
 * Preflight: every path a save writes (PATH, and PATH.tmp beside it) is
 * checked before step 1, so that a bad --save fails at once, not at the
 * first checkpoint hours in; a PATH.tmp left by a killed run is
 * overwritten by the next save, a link or device there is refused.
 * Valid C11 and C++17. */
#ifndef LX_STOP_H
#define LX_STOP_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_checkpoint.h" /* lx_checkpoint_tmp_path */
#include "lx_data.h"       /* lx_strdup */
#include "lx_mpi_errors.h"
#include "lx_watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

static volatile sig_atomic_t lx_stop_signal; /* the first stop signal received; 0: none */

/* Not a signal: the reporting rank could not write the metrics file. The run
 * stops as on a signal (all ranks save the same step), then exits 1. Above
 * every signal number, so that the ranks' maximum says it. */
#define LX_STOP_UNRECORDED 1000

/* This rank cannot record the run: it stops at the end of the step, the
 * reason outranking a signal's. */
static inline void lx_stop_unrecorded(void) { lx_stop_signal = LX_STOP_UNRECORDED; }

static void lx_note_stop_signal(int sig) {
  if (!lx_stop_signal) lx_stop_signal = sig;
}

/* The stop signals set lx_stop_signal. Called first thing in main, and
 * again after MPI_Init, which may install handlers of its own (a signal
 * already noted stays noted). */
static inline void lx_catch_stop_signals(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = lx_note_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART; /* a read or write in progress goes on */
  const int signals[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
  for (int i = 0; i < 4; i++)
    if (sigaction(signals[i], &action, NULL) != 0)
      lx_die("cannot catch signal %d: %s", signals[i], strerror(errno));
}

/* LX_STOP_DIR/name into path (cap bytes); 0 when run.sh gave no directory
 * (the program was started otherwise: srun, mpirun by hand). */
static inline int lx_stop_dir_file(const char *name, char *path, size_t cap) {
  const char *dir = getenv("LX_STOP_DIR");
  if (!dir || !dir[0]) return 0;
  return snprintf(path, cap, "%s/%s", dir, name) < (int)cap;
}

/* First thing in main: catch the stop signals, then tell run.sh that this
 * process does (LX_STOP_DIR/rank.PID: run.sh counts them, and watches the
 * processes they name to see when the ranks are gone). No file can be made
 * (a rank on another node, a full disk): run.sh relays the stop after a
 * while anyway, so that is no error. */
static inline void lx_start_catching_stop_signals(void) {
  lx_catch_stop_signals();
  char name[64], path[4096];
  snprintf(name, sizeof name, "rank.%ld", (long)getpid());
  if (!lx_stop_dir_file(name, path, sizeof path)) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0) close(fd);
}

/* The signal run.sh received, which it relays as SIGUSR1 (the one mpirun
 * forwards) after writing its name (TERM, INT or HUP) to LX_STOP_DIR/signal;
 * sig itself where there is no such file (on another node) or sig is
 * another signal. */
static inline int lx_relayed_signal(int sig) {
  char path[4096], name[8] = "";
  if (sig != SIGUSR1 || !lx_stop_dir_file("signal", path, sizeof path)) return sig;
  FILE *f = fopen(path, "r");
  if (!f) return sig;
  if (!fgets(name, sizeof name, f)) name[0] = '\0';
  fclose(f);
  name[strcspn(name, "\n")] = '\0';
  return !strcmp(name, "TERM")  ? SIGTERM
         : !strcmp(name, "INT") ? SIGINT
         : !strcmp(name, "HUP") ? SIGHUP
                                : sig;
}

/* Collective: the stop signal some rank received (the same number on every
 * rank; the one run.sh received where it relayed it), or 0. */
static inline int lx_stop_requested(void) {
  int mine = lx_relayed_signal(lx_stop_signal), any = 0;
  lx_watchdog_waiting("the end-of-step agreement on stop signals, with every rank");
  LX_MPI_CHECK(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  lx_watchdog_done_waiting();
  return any;
}

static inline const char *lx_signal_name(int sig) {
  return sig == SIGTERM              ? "SIGTERM"
         : sig == SIGINT             ? "SIGINT"
         : sig == SIGHUP             ? "SIGHUP"
         : sig == SIGUSR1            ? "SIGUSR1"
         : sig == LX_STOP_UNRECORDED ? "the metrics file could not be written"
                                     : "a signal";
}

static inline int lx_world_rank(void) {
  int rank = 0;
  LX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return rank;
}

/* What a run that stops without saving leaves at its --save path (NULL:
 * none), for its message: "; the last good checkpoint stays in PATH" where
 * a checkpoint is there (an earlier save of this run, or the one it
 * resumes: a save never replaces another file), else that there is none. */
static inline void lx_describe_kept_checkpoint(const char *path, char *out, size_t cap) {
  out[0] = '\0';
  if (!path) return;
  if (access(path, F_OK) == 0)
    snprintf(out, cap, "; the last good checkpoint stays in %s", path);
  else
    snprintf(out, cap, "; no checkpoint was saved earlier (%s does not exist)", path);
}

/* An error every rank reaches alike: one line (from rank 0), exit 1. */
static inline LX_NORETURN LX_PRINTF(1, 2) void lx_fail_all(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  if (lx_world_rank() == 0) lx_print_error(fmt, args);
  va_end(args);
  lx_mpi_exit(LX_EXIT_ERROR);
}

/* Why the save could not write `file` (PATH, or PATH.tmp that it writes
 * first and renames to PATH), into why: where it exists it must be a
 * regular file. The rename would put a checkpoint in place of a symbolic
 * link, a device (/dev/null, as root) or a pipe, and writing PATH.tmp
 * through a link would overwrite the file the link names. */
static inline void lx_probe_replaced_file(const char *file, char *why, size_t cap) {
  struct stat st;
  if (lstat(file, &st) != 0 || S_ISREG(st.st_mode)) return;
  snprintf(why, cap, "%s is %s; a save writes only regular files (a new one, renamed over the old)", file,
           S_ISLNK(st.st_mode)   ? "a symbolic link"
           : S_ISDIR(st.st_mode) ? "a directory"
                                 : "not a regular file");
}

/* Whether dir is a directory this process can add files to; if not, why. */
static inline int lx_probe_dir(const char *dir, char *why, size_t cap) {
  struct stat st;
  if (stat(dir, &st) != 0)
    snprintf(why, cap, "directory %s: %s", dir, strerror(errno));
  else if (!S_ISDIR(st.st_mode))
    snprintf(why, cap, "%s is not a directory", dir);
  else if (access(dir, W_OK | X_OK) != 0)
    snprintf(why, cap, "directory %s: %s", dir, strerror(errno));
  else
    return 1;
  return 0;
}

/* Why no new file can be made beside path, into why: the directory must
 * exist and take one. The file is the probe's own (mkstemp's unique name,
 * removed at once). */
static inline void lx_probe_new_file(const char *path, char *why, size_t cap) {
  char *dir = lx_parent_dir(path);
  if (lx_probe_dir(dir, why, cap)) {
    size_t n = strlen(path) + sizeof ".probe-XXXXXX";
    char *probe = (char *)LX_MALLOC(n);
    snprintf(probe, n, "%s.probe-XXXXXX", path);
    int fd = mkstemp(probe);
    if (fd < 0)
      snprintf(why, cap, "cannot create a file there (%s): %s", probe, strerror(errno));
    else
      close(fd), unlink(probe);
    free(probe);
  }
  free(dir);
}

/* Why a save at path would fail, into why (empty: it would not). A file of
 * the user's, PATH.tmp too, is never opened. */
static inline void lx_probe_save_path(const char *path, char *why, size_t cap) {
  why[0] = '\0';
  char *tmp = lx_checkpoint_tmp_path(path);
  lx_probe_new_file(path, why, cap);
  if (!why[0]) lx_probe_replaced_file(path, why, cap);
  if (!why[0]) lx_probe_replaced_file(tmp, why, cap);
  free(tmp);
}

/* How a save destination is tried: why[0] stays '\0' when it will do. */
typedef void (*lx_save_probe)(const char *path, char *why, size_t cap);

#define LX_WHY_BYTES 1024 /* a probe's verdict */

/* Collective: every rank takes rank 0's verdict on a save path (why, of
 * LX_WHY_BYTES; empty: it will do). */
static inline void lx_share_save_verdict(const char *flag, const char *path, char *why) {
  LX_MPI_CHECK(MPI_Bcast(why, LX_WHY_BYTES, MPI_CHAR, 0, MPI_COMM_WORLD));
  if (why[0]) lx_fail_all("%s %s: cannot save there: %s", flag, path, why);
}

/* Collective: rank 0 tries the path with probe, every rank takes its verdict. */
static inline void lx_check_save_path(const char *flag, const char *path, lx_save_probe probe) {
  char why[LX_WHY_BYTES] = "";
  if (lx_world_rank() == 0) probe(path, why, sizeof why);
  lx_share_save_verdict(flag, path, why);
}

/* Whether paths a and b name one regular file, existing (the same inode:
 * links and other spellings included) or to be made (the same name in the
 * same directory). Devices do not count: writing /dev/null twice is fine. */
static inline int lx_same_file(const char *a, const char *b) {
  struct stat sa, sb;
  int a_exists = stat(a, &sa) == 0, b_exists = stat(b, &sb) == 0;
  if (a_exists && b_exists) return S_ISREG(sa.st_mode) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (a_exists || b_exists) return 0;
  const char *name_a = strrchr(a, '/'), *name_b = strrchr(b, '/');
  name_a = name_a ? name_a + 1 : a, name_b = name_b ? name_b + 1 : b;
  char *dir_a = lx_parent_dir(a), *dir_b = lx_parent_dir(b);
  int same = !strcmp(name_a, name_b) && stat(dir_a, &sa) == 0 && stat(dir_b, &sb) == 0 &&
             sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  free(dir_a), free(dir_b);
  return same;
}

/* Why the file at path cannot be written (into why; empty: it can), as a
 * report that is opened, not renamed, is written: the file, or a new one in
 * its directory. A device such as /dev/null will do. */
static inline void lx_probe_writable(const char *path, char *why, size_t cap) {
  why[0] = '\0';
  if (access(path, F_OK) == 0) {
    if (access(path, W_OK) != 0) snprintf(why, cap, "%s: %s", path, strerror(errno));
    return;
  }
  char *dir = lx_parent_dir(path);
  lx_probe_dir(dir, why, cap);
  free(dir);
}

#endif
