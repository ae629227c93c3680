/* included by tests/diag/valid/prelude_via_header.model: the prelude, one include away */
#include <lynx.h>
#define WIDTH 64
