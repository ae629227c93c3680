/* mutate_options.c — the command line of the plan fuzzer's input.
 *
 * A model file has no place for lynxgen's options, so fuzz_plan.c reads them
 * from a comment line of the input, `// fuzz-options: policy=lynx-heu ...`
 * (fuzz_plan_options.c). This mutation writes that line afresh with random
 * options, or adds it at the top of an input that has none; the front-end
 * fuzzer ignores it like any other comment. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "model_text.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const policies[] = {"none", "full", "selective", "checkmate", "lynx-heu", "lynx-opt"};
static const char *const partitions[] = {"uniform", "dp"};
static const char *const gpu_memory[] = {"0.001", "0.5", "2", "16", "80", "1000000"};
static const char *const flags[] = {" cuda-graph", " unfused", " unrolled", " no-offload"};

/* The line at `at` to its newline (or the end). */
static int line_end(const mt_text *t, int at) {
  while (at < (int)t->size && t->data[at] != '\n')
    at++;
  return at;
}

static int find_options(const mt_text *t) {
  static const char key[] = "// fuzz-options:";
  for (size_t i = 0; i + sizeof key - 1 <= t->size; i++)
    if (!memcmp(t->data + i, key, sizeof key - 1)) return (int)i;
  return -1;
}

bool mt_mutate_options(mt_text *t, mt_rng *r) {
  char line[256];
  int len = snprintf(line, sizeof line, "// fuzz-options: policy=%s partition=%s",
                     mt_pick(r, policies, COUNT(policies)), mt_pick(r, partitions, COUNT(partitions)));
  if (mt_below(r, 4) == 0)
    len += snprintf(line + len, sizeof line - (size_t)len, " gpu-memory=%s",
                    mt_pick(r, gpu_memory, COUNT(gpu_memory)));
  for (int i = 0; i < COUNT(flags); i++)
    if (mt_below(r, 2)) len += snprintf(line + len, sizeof line - (size_t)len, "%s", flags[i]);
  int at = find_options(t);
  if (at >= 0) return mt_splice(t, at, line_end(t, at), line, (size_t)len);
  line[len++] = '\n';
  return mt_splice(t, 0, 0, line, (size_t)len);
}
