/* check.h — the assertions of the C unit tests. Each check prints one line,
 * "ok - ..." or "not ok - ...", which tests/run.sh counts; the program exits
 * non-zero when any check failed (return check_exit_status() from main). */
#ifndef LX_TESTS_CHECK_H
#define LX_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>

static int check_failures;

#define CHECK(cond, ...)                                             \
  do {                                                               \
    int check_ok_ = (cond);                                          \
    printf("%s - ", check_ok_ ? "ok" : "not ok");                    \
    printf(__VA_ARGS__);                                             \
    if (!check_ok_) printf("   [%s:%d: %s]", __FILE__, __LINE__, #cond); \
    printf("\n");                                                    \
    if (!check_ok_) check_failures++;                                \
  } while (0)

/* |got - want| <= tol * max(1, |want|) */
#define CHECK_CLOSE(got, want, tol, ...)                                                    \
  do {                                                                                      \
    double g_ = (got), w_ = (want);                                                         \
    double scale_ = fabs(w_) > 1 ? fabs(w_) : 1;                                            \
    CHECK(fabs(g_ - w_) <= (tol)*scale_, __VA_ARGS__);                                      \
    if (fabs(g_ - w_) > (tol)*scale_) printf("     got %.17g, want %.17g\n", g_, w_);       \
  } while (0)

static inline int check_exit_status(void) { return check_failures ? 1 : 0; }

#endif
