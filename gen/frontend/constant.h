/* constant.h — the checked value of a constant expression of a model file. */
#ifndef LX_CONSTANT_H
#define LX_CONSTANT_H

#include <clang-c/Index.h>

/* The clang warnings about numbers that C wraps, truncates or rounds to
 * infinity silently, as errors (libclang arguments of the front end); what
 * they miss, lx_evaluate_constant finds. */
#define LX_NUMBER_ERRORS                                                                                     \
  "-Werror=integer-overflow", "-Werror=constant-conversion", "-Werror=literal-range",                        \
      "-Werror=shift-count-overflow", "-Werror=shift-count-negative", "-Werror=shift-negative-value",        \
      "-Werror=shift-overflow", "-Werror=division-by-zero"

typedef enum {
  LX_CONSTANT_INTEGER,    /* .integer (and .real) hold it */
  LX_CONSTANT_REAL,       /* .real holds it, a finite double */
  LX_CONSTANT_NONE,       /* not a number clang can fold */
  LX_CONSTANT_WRAPS,      /* a step's exact result does not fit its type: .at and .why say which */
  LX_CONSTANT_HUGE,       /* an unsigned integer beyond long long; .real holds it */
  LX_CONSTANT_NOT_FINITE, /* an infinity or a NaN; .real holds it */
} lx_constant_kind;

typedef struct {
  lx_constant_kind kind;
  long long integer;
  double real;
  CXCursor at; /* LX_CONSTANT_WRAPS: the operator that wrapped */
  char
      why[160]; /* LX_CONSTANT_WRAPS: e.g. "18446744073709551615 + 65 does not fit in 'unsigned long long'" */
} lx_constant;

/* The value of `expr` as written (implicit conversions around it are the
 * caller's to judge), folded by clang, with every integer operation in it
 * checked for a wrap. */
lx_constant lx_evaluate_constant(CXCursor expr);

#endif
