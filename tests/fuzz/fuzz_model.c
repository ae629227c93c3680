/* fuzz_model.c — the front end as both fuzzers run it (fuzz_model.h). */
#define _POSIX_C_SOURCE 200809L
#include "fuzz_model.h"

#include <stdio.h>
#include <stdlib.h>

#include "analysis/analyze.h"
#include "diag.h"
#include "frontend/frontend.h"

static void fail(const char *why) {
  fprintf(stderr, "fuzz: %s\n", why);
  abort();
}

/* Once, before the first parse. */
static void quiet_diagnostics(void) {
  static FILE *discarded;
  if (discarded) return;
  /* libclang otherwise catches crashes in its own signal handlers, which
   * would hide them from the sanitizers and from libFuzzer. */
  setenv("LIBCLANG_DISABLE_CRASH_RECOVERY", "1", 1);
  discarded = fopen("/dev/null", "w");
  if (!discarded) abort();
  lx_diag_set_sink(discarded);
}

bool fuzz_front_end(const char *path, const uint8_t *data, size_t size, void (*adjust)(lx_ir *), lx_ir *ir) {
  quiet_diagnostics();
  lx_ir_init(ir);
  lx_diag_reset();
  if (lx_parse_model(path, (const char *)data, size, ir) == 0) {
    if (adjust) adjust(ir);
    lx_analyze(ir);
  }
  if (lx_error_count() > 0 && lx_located_error_count() == 0)
    fail("the input was rejected without a located (file:line:col) error");
  if (lx_error_count() == 0 && lx_ir_validate(ir) != 0)
    fail("the input was accepted but its IR does not validate");
  return lx_error_count() == 0;
}
