/* test_glpk_errors.c — a fatal GLPK error under lx_glpk_guard ends the
 * process with exit status 3 and GLPK's own words on stderr; without the
 * guard GLPK aborts (SIGABRT). The error is a call GLPK refuses: the cost of
 * column 99 of a problem that has none. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <glpk.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "planning/glpk_errors.h"

/* Runs the refused call in a child, guarded or not; its wait status and stderr. */
static int refused_call(bool guarded, char *err, size_t size) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return -1;
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    dup2(pipe_fds[1], STDERR_FILENO);
    dup2(open("/dev/null", O_WRONLY), STDOUT_FILENO); /* GLPK's own terminal, unguarded */
    close(pipe_fds[0]);
    if (guarded) lx_glpk_guard();
    glp_term_out(GLP_OFF); /* as lynxgen's MILPs run */
    glp_set_obj_coef(glp_create_prob(), 99, 1.0);
    _exit(0);
  }
  close(pipe_fds[1]);
  size_t have = 0;
  ssize_t n;
  while (have + 1 < size && (n = read(pipe_fds[0], err + have, size - 1 - have)) > 0)
    have += (size_t)n;
  err[have] = '\0';
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return status;
}

int main(void) {
  char err[4096];
  int status = refused_call(true, err, sizeof err);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3, "guarded: a fatal GLPK error exits 3 (status %#x)",
        status);
  CHECK(strstr(err, "lynxgen: internal error: GLPK stopped") && strstr(err, "column number out of range") &&
            strstr(err, "bug in lynxgen") && strchr(err, '\n') == err + strlen(err) - 1,
        "guarded: one line on stderr, with GLPK's words: %s", err);
  status = refused_call(false, err, sizeof err);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "unguarded: GLPK aborts (status %#x)", status);
  return check_exit_status();
}
