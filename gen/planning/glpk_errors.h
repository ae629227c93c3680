/* glpk_errors.h — GLPK's fatal errors as lynxgen's own. */
#ifndef LX_GLPK_ERRORS_H
#define LX_GLPK_ERRORS_H

/* From here on, GLPK's terminal output is kept from the user and a fatal
 * GLPK error (a MILP lynxgen built wrongly) ends lynxgen with exit status 3,
 * a bug in lynxgen, saying what GLPK said, instead of GLPK's abort() and its
 * core dump. Idempotent. */
void lx_glpk_guard(void);

#endif
