/* lx_metrics.h — what a training run reports per step: a line on stdout for
 * the person watching, and the same numbers as a JSON line in the metrics
 * file for plots and for tests that compare runs. One rank calls these (the
 * one that knows the loss). Both outputs are flushed every step, so a run
 * that dies still leaves its last step behind.
 *
 * The metrics file is truncated when opened: it describes this run only,
 * or with the run it resumes, whose lines it keeps. A line is one JSON
 * object, printed by cJSON: step, loss, val_loss (only on steps that
 * validated), lr, grad_norm, ms, tokens_per_s, each number in the digits
 * that read back as it; a non-finite value (a diverged loss) is null, since
 * JSON has no NaN. A line cut short (a full disk, a crash while it was
 * written) is removed when the write fails or the file is opened again. */
#ifndef LX_METRICS_H
#define LX_METRICS_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#include "lx_check.h"
#include "lx_real_text.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Wall-clock milliseconds on a monotonic clock, for step timing. */
static inline double lx_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

typedef struct {
  FILE *file;      /* NULL: stdout only */
  const char *path; /* the file's (the command line's string), for messages */
  int print_every; /* stdout line every this many steps */
  double ms_sum;   /* over the timed steps, for the ETA */
  int timed_steps; /* steps after the first, which pays for warm-up */
  double first_ms;
} lx_metrics_state;

/* Header-only: one instance per program (the emitted program is one file). */
static inline lx_metrics_state *lx_metrics(void) {
  static lx_metrics_state state = {NULL, NULL, 1, 0, 0, 0};
  return &state;
}

/* The offset just past the last newline among the first `end` bytes of
 * fd; 0 where there is none; -1 on a read error. */
static inline off_t lx_last_line_end(int fd, off_t end) {
  char buf[4096];
  while (end > 0) {
    size_t n = end < (off_t)sizeof buf ? (size_t)end : sizeof buf;
    if (pread(fd, buf, n, end - (off_t)n) != (ssize_t)n) return -1;
    for (size_t i = n; i > 0; i--)
      if (buf[i - 1] == '\n') return end - (off_t)n + (off_t)i;
    end -= (off_t)n;
  }
  return 0;
}

/* A write that a full disk or a crash cut short leaves a partial line at
 * the end of the file (one fprintf is not atomic); the lines appended after
 * it would be glued to it, and the file would no longer read as a JSON
 * object a line. So the file is cut back to its last complete line. Only a
 * regular file this process can read: where it cannot, the lines are left
 * as they are. */
static inline void lx_metrics_drop_partial_line(const char *path) {
  int fd = open(path, O_RDWR);
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    off_t keep = lx_last_line_end(fd, st.st_size);
    if (keep >= 0 && keep < st.st_size && ftruncate(fd, keep) != 0)
      fprintf(stderr, "lynx: warning: cannot remove the partial last line of the metrics file %s: %s\n", path,
              strerror(errno));
  }
  close(fd);
}

/* path NULL: report on stdout only. append: after the lines of the run this
 * one resumes (its steps after the checkpoint appear twice, the resumed
 * run's last). */
static inline void lx_metrics_open(const char *path, int append) {
  lx_metrics_state *m = lx_metrics();
  if (m->file) fclose(m->file);
  int print_every = m->print_every;
  memset(m, 0, sizeof *m);
  m->print_every = print_every;
  if (path && append) lx_metrics_drop_partial_line(path);
  if (path && !(m->file = fopen(path, append ? "a" : "w")))
    lx_die("cannot write metrics file %s: %s", path, strerror(errno));
  m->path = path;
}

static inline void lx_metrics_set_print_every(int n) { lx_metrics()->print_every = n > 0 ? n : 1; }

static inline void lx_metrics_close(void) {
  lx_metrics_state *m = lx_metrics();
  if (m->file) fclose(m->file);
  m->file = NULL;
}

/* "2h05m", "3m07s", "12s". */
static inline void lx_format_duration(double seconds,
                                      char *out, // (cap)
                                      size_t cap) {
  long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
  if (s >= 3600)
    snprintf(out, cap, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else if (s >= 60)
    snprintf(out, cap, "%ldm%02lds", s / 60, s % 60);
  else
    snprintf(out, cap, "%lds", s);
}

/* The first step pays for page faults and thread start-up: the ETA uses the
 * mean of the later ones once there are any. */
static inline double lx_metrics_eta_seconds(lx_metrics_state *m, int step, int steps, double ms) {
  if (step <= 1)
    m->first_ms = ms;
  else
    m->ms_sum += ms, m->timed_steps++;
  double mean_ms = m->timed_steps ? m->ms_sum / m->timed_steps : m->first_ms;
  return (steps - step) * mean_ms / 1000.0;
}

/* A member of a metrics line: a number as text that reads back as it exactly
 * (as raw JSON: cJSON 1.7 keeps 15 digits that read back only approximately,
 * 2^53 as 9.00719925474099e+15); a non-finite one as null. */
static inline void lx_metrics_add(cJSON *line, const char *key, double v) {
  char text[32] = "null";
  if (isfinite(v)) lx_format_real(text, sizeof text, v);
  cJSON *item = cJSON_CreateRaw(text);
  if (!item || !cJSON_AddItemToObject(line, key, item)) LX_FATAL("out of memory");
}

/* The step's line of the metrics file, malloc'd, without its newline. */
static inline char *lx_metrics_line(int step, double loss, double val_loss, double lr, double grad_norm,
                                    double ms, double tokens_per_s) {
  cJSON *line = cJSON_CreateObject();
  if (!line) LX_FATAL("out of memory");
  lx_metrics_add(line, "step", step);
  lx_metrics_add(line, "loss", loss);
  if (!isnan(val_loss)) lx_metrics_add(line, "val_loss", val_loss);
  lx_metrics_add(line, "lr", lr);
  lx_metrics_add(line, "grad_norm", grad_norm);
  lx_metrics_add(line, "ms", ms);
  lx_metrics_add(line, "tokens_per_s", tokens_per_s);
  char *text = cJSON_PrintUnformatted(line);
  cJSON_Delete(line);
  if (!text) LX_FATAL("out of memory");
  return text;
}

/* v, a NaN without its sign: printf writes a negative one as "-nan". */
static inline double lx_unsigned_nan(double v) { return isnan(v) ? fabs(v) : v; }

/* Reports a step; returns 0, or -1 when the metrics file could not take
 * it (a full disk): the error is printed, naming the file, which is closed
 * and the run should stop and save rather than go on unrecorded. */
static inline int lx_metrics_step(int step, int steps, double loss, double val_loss /* NAN if not computed */,
                                  double lr, double grad_norm, double ms, double tokens_per_s) {
  lx_metrics_state *m = lx_metrics();
  char eta[32];
  lx_format_duration(lx_metrics_eta_seconds(m, step, steps, ms), eta, sizeof eta);
  int has_val = !isnan(val_loss);
  if (step == 1 || step == steps || has_val || step % m->print_every == 0) {
    printf("step %5d/%d | loss %.6f", step, steps, lx_unsigned_nan(loss));
    if (has_val) printf(" | val %.6f", val_loss);
    printf(" | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | eta %s\n", lr, lx_unsigned_nan(grad_norm), ms,
           tokens_per_s, eta);
    fflush(stdout);
  }
  if (!m->file) return 0;
  char *line = lx_metrics_line(step, loss, val_loss, lr, grad_norm, ms, tokens_per_s);
  fprintf(m->file, "%s\n", line);
  free(line);
  if (fflush(m->file) == 0 && !ferror(m->file)) return 0;
  fprintf(stderr, "lynx: error: cannot write step %d to the metrics file %s: %s\n", step, m->path,
          strerror(errno));
  fclose(m->file);
  m->file = NULL;
  lx_metrics_drop_partial_line(m->path);
  return -1;
}

#endif
