/* alloc.c — checked allocations (alloc.h). */
#define _POSIX_C_SOURCE 200809L /* strdup, open_memstream */
#include "alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void (*out_of_memory_note)(void);

void lx_on_out_of_memory(void (*note)(void)) { out_of_memory_note = note; }

static void *checked(void *p, size_t bytes) {
  if (!p && bytes) {
    fprintf(stderr, "lynxgen: error: out of memory (%zu bytes more; lynxgen --max-memory sets the budget)\n",
            bytes);
    if (out_of_memory_note) out_of_memory_note();
    exit(1);
  }
  return p;
}

void *lx_malloc(size_t bytes) { return checked(malloc(bytes), bytes); }

void *lx_calloc(size_t count, size_t size) {
  if (size && count > (size_t)-1 / size) return checked(NULL, (size_t)-1);
  return checked(calloc(count, size), count * size);
}

void *lx_realloc(void *p, size_t bytes) { return checked(realloc(p, bytes), bytes); }

char *lx_strdup(const char *s) { return checked(strdup(s), strlen(s) + 1); }

FILE *lx_memory_stream(char **text, size_t *size) {
  FILE *f = open_memstream(text, size);
  if (!f) checked(NULL, 1); /* it allocates its buffer: nothing else can fail */
  return f;
}
