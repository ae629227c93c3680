/* fuzz_frontend.c — libFuzzer target for the front end and the analysis pass.
 *
 * Each input is a model file. The properties checked, beyond "no crash, no
 * leak, no undefined behaviour" (the sanitizers), are the promises of the
 * diagnostics: every rejected input gets at least one located message
 * (file:line:col), and every accepted input yields an IR that validates.
 * Build and run: make fuzz (tests/fuzz/rules.mk). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "analyze.h"
#include "diag.h"
#include "frontend.h"
#include "ir.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Diagnostics of thousands of inputs are noise; they go nowhere. */
static FILE *discarded;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  /* libclang otherwise catches crashes in its own signal handlers, which
   * would hide them from the sanitizers and from libFuzzer. */
  setenv("LIBCLANG_DISABLE_CRASH_RECOVERY", "1", 1);
  discarded = fopen("/dev/null", "w");
  if (!discarded) abort();
  lx_diag_set_sink(discarded);
  return 0;
}

static void fail(const char *why) {
  fprintf(stderr, "fuzz_frontend: %s\n", why);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lx_ir ir;
  lx_ir_init(&ir);
  lx_diag_reset();
  if (lx_parse_model("fuzz.model", (const char *)data, size, &ir) == 0) lx_analyze(&ir);
  if (lx_error_count() > 0 && lx_located_error_count() == 0)
    fail("the input was rejected without a located (file:line:col) error");
  if (lx_error_count() == 0 && lx_ir_validate(&ir) != 0) fail("the input was accepted but its IR does not validate");
  lx_ir_free(&ir);
  return 0;
}
