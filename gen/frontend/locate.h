/* locate.h — libclang locations as places in the model file, with notes. */
#ifndef LX_LOCATE_H
#define LX_LOCATE_H

#include <clang-c/Index.h>

#include "ir.h"

/* The prelude ir/lynx.h, as libclang sees it (handed over from memory). */
#define LX_PRELUDE_DIR "/virtual"
#define LX_PRELUDE_PATH LX_PRELUDE_DIR "/lynx.h"

typedef struct {
  lx_ir *ir; /* owns the notes */
  CXTranslationUnit tu;
  CXFile main_file;
  struct lx_inclusion {
    CXFile file;
    CXSourceLocation from; /* the #include that first included it */
  } * inclusions;
  int n_inclusions, cap_inclusions;
} lx_locator;

/* The TU must be parsed with CXTranslationUnit_DetailedPreprocessingRecord
 * (macro expansions are found through it). */
void lx_locator_init(lx_locator *l, lx_ir *ir, CXTranslationUnit tu);
void lx_locator_free(lx_locator *l);

/* Where `where` is in the model file: the place itself, or the macro call or
 * #include in the model file that leads to it, with notes naming the macro's
 * definition ("expanded from macro 'X'") and the place in the included file. */
lx_srcloc lx_srcloc_at(lx_locator *l, CXSourceLocation where);

/* The same for one of clang's diagnostics, whose notes are clang's own
 * (its macro backtrace, "previous definition is here"). */
lx_srcloc lx_srcloc_of_diagnostic(lx_locator *l, CXDiagnostic d);

#endif
