/* lx_real_text.h — a double as text that reads back as the same double: the
 * option values of --help and of error messages, the loss that --steps 0
 * prints, and the numbers of the metrics file. */
#ifndef LX_REAL_TEXT_H
#define LX_REAL_TEXT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The shortest of %g (six digits) and 15, 16 or 17 significant digits that
 * strtod reads back as v: short where it can be, exact always (a NaN, which
 * nothing reads back as itself, is "nan"). */
static inline void lx_format_real(char *out, // (cap)
                                  size_t cap, double v) {
  if (isnan(v)) { /* printf writes a NaN with its sign bit set as "-nan" */
    snprintf(out, cap, "nan");
    return;
  }
  snprintf(out, cap, "%g", v);
  for (int digits = 15; strtod(out, NULL) != v && digits <= 17; digits++)
    snprintf(out, cap, "%.*g", digits, v);
}

#endif
