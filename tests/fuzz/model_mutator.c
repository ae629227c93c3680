/* model_mutator.c — libFuzzer's custom mutator for model files, linked into
 * both fuzzers (fuzz_frontend, fuzz_plan).
 *
 * Byte-level mutations of a model file are almost all syntax errors, which
 * libclang rejects before any of our code runs. This mutator edits the
 * structure instead (model_text.h): one to three rounds of a field mutation
 * (mutate_fields.c), an op-chain mutation (mutate_ops.c) or a new options
 * line for the plan fuzzer (mutate_options.c), the text scanned again before
 * each. A fifth of the time, or when no structured mutation applies, it
 * hands over to libFuzzer's own byte mutator (with the dictionary
 * model.dict), which still finds what structure cannot: the lexer's and the
 * parser's errors. */
#include <stddef.h>
#include <stdint.h>

#include "model_text.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
  static mt_model model; /* large; libFuzzer mutates on one thread */
  mt_rng r = {seed * 0x9E3779B97F4A7C15ull + 1};
  if (size == 0 || size > max_size || mt_below(&r, 5) == 0) return LLVMFuzzerMutate(data, size, max_size);
  mt_text t = {data, size, max_size};
  bool changed = false;
  for (int round = 1 + mt_below(&r, 3); round > 0; round--) {
    mt_scan((const char *)t.data, t.size, &model);
    int kind = mt_below(&r, 10);
    if (kind < 4)
      changed |= mt_mutate_field(&t, &model, &r);
    else if (kind < 9)
      changed |= mt_mutate_ops(&t, &model, &r);
    else
      changed |= mt_mutate_options(&t, &r);
  }
  return changed ? t.size : LLVMFuzzerMutate(data, size, max_size);
}
