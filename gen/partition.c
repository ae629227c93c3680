/* partition.c — which layers each pipeline stage holds. */
#include "passes.h"

void lx_partition_uniform(int layers, int pp, int *first_layer) {
  int base = layers / pp, extra = layers % pp;
  first_layer[0] = 0;
  for (int s = 0; s < pp; s++) first_layer[s + 1] = first_layer[s] + base + (s < extra ? 1 : 0);
}
