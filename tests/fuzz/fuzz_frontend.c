/* fuzz_frontend.c — libFuzzer target for the front end and the analysis pass.
 *
 * Each input is a model file. The properties checked, beyond "no crash, no
 * leak, no undefined behaviour" (the sanitizers), are the promises of the
 * diagnostics: every rejected input gets at least one located message
 * (file:line:col), and every accepted input yields an IR that validates
 * (fuzz_model.c). Inputs are mutated by model_mutator.c and
 * model_crossover.c. Build and run: make fuzz (tests/fuzz/rules.mk). */
#include <stdint.h>

#include "fuzz_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lx_ir ir;
  fuzz_front_end("fuzz.model", data, size, NULL, &ir);
  lx_ir_free(&ir);
  return 0;
}
