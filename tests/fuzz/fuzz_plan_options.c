/* fuzz_plan_options.c — reads `// fuzz-options: word word ...` from the
 * input (fuzz_plan.h): policy=NAME, partition=uniform|dp, gpu-memory=GIB,
 * cuda-graph, unfused, unrolled, no-offload. Unknown words are ignored; without the
 * line, lynxgen's defaults. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "fuzz_plan.h"

static bool word_is(const char *word, size_t len, const char *name) {
  return strlen(name) == len && !memcmp(word, name, len);
}

static void apply_word(fuzz_options *o, const char *word, size_t len) {
  for (int p = 0; p < LX_RECOMPUTE_POLICY_COUNT; p++) {
    const char *name = lx_recompute_policy_name((lx_recompute_policy)p);
    if (len == 7 + strlen(name) && !memcmp(word, "policy=", 7) && !memcmp(word + 7, name, strlen(name)))
      o->policy = (lx_recompute_policy)p;
  }
  if (word_is(word, len, "partition=dp")) o->partition = LX_PARTITION_DP;
  if (word_is(word, len, "partition=uniform")) o->partition = LX_PARTITION_UNIFORM;
  if (word_is(word, len, "cuda-graph")) o->cuda_graph = true;
  if (word_is(word, len, "unfused")) o->unfused = true;
  if (word_is(word, len, "unrolled")) o->unrolled = true;
  if (word_is(word, len, "no-offload")) o->no_offload = true;
  if (len > 11 && len < 40 && !memcmp(word, "gpu-memory=", 11)) {
    char number[40];
    memcpy(number, word + 11, len - 11);
    number[len - 11] = '\0';
    double gib = strtod(number, NULL);
    if (gib > 0 && gib <= 1e6) o->gpu_memory_bytes = gib * 1024 * 1024 * 1024; /* as lynxgen --gpu-memory */
  }
}

fuzz_options fuzz_plan_options(const uint8_t *data, size_t size) {
  static const char key[] = "// fuzz-options:";
  fuzz_options o = {LX_RECOMPUTE_NONE, LX_PARTITION_UNIFORM, 0, false, false, false, false};
  const char *text = (const char *)data, *end = text + size;
  for (const char *p = text; p + sizeof key - 1 <= end; p++) {
    if (memcmp(p, key, sizeof key - 1)) continue;
    for (p += sizeof key - 1; p < end && *p != '\n';) {
      while (p < end && *p == ' ')
        p++;
      const char *word = p;
      while (p < end && *p != ' ' && *p != '\n')
        p++;
      if (p > word) apply_word(&o, word, (size_t)(p - word));
    }
    break;
  }
  return o;
}
