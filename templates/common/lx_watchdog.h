/* lx_watchdog.h — a rank that stops making progress takes the job down,
 * saying what it waits on, instead of hanging it until the cluster's time
 * limit (a lost message, a peer stopped by the kernel, a deadlock).
 *
 * A thread of its own checks, a few times per timeout, when the rank last
 * made progress: the training loop reports each finished step, validation
 * batch and tensor saved or loaded (lx_watchdog_progress), and the communication helpers
 * name what the rank is about to wait on (lx_watchdog_waiting: a receive
 * from stage 2 of micro-batch 5's activations, an all-reduce over the
 * data-parallel group). After `timeout_s` seconds without progress it prints
 *   lynx: watchdog: rank 3 (stage 1) made no progress for 60 s
 *   (--watchdog 60): it waits on <what>
 * then the training thread's stack (frames as program(+offset): addr2line -f
 * -e program offset names each; the thread is asked for it with SIGUSR2),
 * and ends the process with _exit: under mpirun a rank that exits without
 * MPI_Finalize makes Open MPI terminate the whole job, and no checkpoint is
 * written afterwards (the other ranks never reach one); a save it was in
 * leaves no PATH.tmp, and the last committed checkpoint as it was.
 *
 * Shared by both targets: C11 and C++17, POSIX threads. */
#ifndef LX_WATCHDOG_H
#define LX_WATCHDOG_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_checkpoint.h" /* lx_remove_pending_checkpoint */

#include <execinfo.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  pthread_mutex_t lock;
  double timeout_s;
  double last_progress_s; /* CLOCK_MONOTONIC */
  char waiting_on[192];
  int rank, stage;
  pthread_t trainer; /* the thread that runs the steps: its stack says where it waits */
} lx_watchdog_state;

static lx_watchdog_state lx_watchdog = {PTHREAD_MUTEX_INITIALIZER, 0, 0, "", 0, 0, 0};

/* SIGUSR2's handler on the training thread: its stack to stderr. Only
 * write-based calls: backtrace_symbols_fd does not allocate, and the
 * backtrace() at start has loaded what backtrace needs. */
static inline void lx_watchdog_print_stack(int sig) {
  (void)sig;
  static const char head[] = "lynx: watchdog: the training thread's stack:\n";
  void *frames[64];
  int n = backtrace(frames, 64);
  if (write(STDERR_FILENO, head, sizeof head - 1) < 0) return;
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
}

static inline double lx_watchdog_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The rank finished a unit of work (a step, a validation batch). */
static inline void lx_watchdog_progress(void) {
  pthread_mutex_lock(&lx_watchdog.lock);
  lx_watchdog.last_progress_s = lx_watchdog_now_s();
  pthread_mutex_unlock(&lx_watchdog.lock);
}

/* What the rank is about to wait on, for the message (printf-style). */
static inline LX_PRINTF(1, 2) void lx_watchdog_waiting(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  pthread_mutex_lock(&lx_watchdog.lock);
  vsnprintf(lx_watchdog.waiting_on, sizeof lx_watchdog.waiting_on, fmt, args);
  pthread_mutex_unlock(&lx_watchdog.lock);
  va_end(args);
}

/* The wait named last is over: the rank waits on nothing but its own
 * computation again (a watchdog firing now must not blame that peer). */
static inline void lx_watchdog_done_waiting(void) {
  pthread_mutex_lock(&lx_watchdog.lock);
  lx_watchdog.waiting_on[0] = '\0';
  pthread_mutex_unlock(&lx_watchdog.lock);
}

static inline void *lx_watchdog_run(void *unused) {
  (void)unused;
  double period_s = lx_watchdog.timeout_s / 4 < 1 ? lx_watchdog.timeout_s / 4 : 1;
  struct timespec nap = {(time_t)period_s, (long)((period_s - (double)(time_t)period_s) * 1e9)};
  for (;;) {
    nanosleep(&nap, NULL);
    pthread_mutex_lock(&lx_watchdog.lock);
    double idle_s = lx_watchdog_now_s() - lx_watchdog.last_progress_s;
    if (idle_s >= lx_watchdog.timeout_s) {
      fprintf(stderr,
              "lynx: watchdog: rank %d (stage %d) made no progress for %.0f s (--watchdog %g): it waits on %s\n",
              lx_watchdog.rank, lx_watchdog.stage, idle_s, lx_watchdog.timeout_s,
              lx_watchdog.waiting_on[0] ? lx_watchdog.waiting_on : "its own computation");
      fflush(stderr);
      pthread_kill(lx_watchdog.trainer, SIGUSR2);
      struct timespec printing = {0, 300000000}; /* the handler's few writes */
      nanosleep(&printing, NULL);
      lx_remove_pending_checkpoint(); /* _exit runs no atexit handler */
      _exit(LX_EXIT_ERROR);
    }
    pthread_mutex_unlock(&lx_watchdog.lock);
  }
  return NULL;
}

/* The default timeout: a floor for start-up, the first step's setup and a
 * checkpoint's write, and beyond it twenty predicted steps (on a CPU build,
 * whose cores are about a thousand times slower than the modeled GPU, twenty
 * thousand). */
static inline double lx_watchdog_default_s(double predicted_step_s, int cpu) {
  return ceil(600 + 20 * predicted_step_s * (cpu ? 1000 : 1)); /* whole seconds: --help prints it */
}

/* Starts watching this rank; timeout_s <= 0 leaves it unwatched. */
static inline void lx_watchdog_start(double timeout_s, int rank, int stage) {
  if (!(timeout_s > 0)) return;
  lx_watchdog.timeout_s = timeout_s;
  lx_watchdog.rank = rank, lx_watchdog.stage = stage;
  lx_watchdog.trainer = pthread_self();
  void *frame[1];
  (void)backtrace(frame, 1); /* loads libgcc's unwinder now, not in the handler */
  struct sigaction on_usr2;
  memset(&on_usr2, 0, sizeof on_usr2);
  on_usr2.sa_handler = lx_watchdog_print_stack;
  sigemptyset(&on_usr2.sa_mask);
  sigaction(SIGUSR2, &on_usr2, NULL);
  lx_watchdog_progress();
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&thread, &attr, lx_watchdog_run, NULL) != 0) lx_die("cannot start the watchdog thread");
  pthread_attr_destroy(&attr);
}

#endif
