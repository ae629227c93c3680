/* alloc.h — every allocation of lynxgen (gen/ and ir/) goes through these:
 * running out of memory ends in one clear error, "lynxgen: error: out of
 * memory (N bytes)", and exit status 1, never in a crash or a NULL used. */
#ifndef LX_ALLOC_H
#define LX_ALLOC_H

#include <stddef.h>
#include <stdio.h>

void *lx_malloc(size_t bytes);
void *lx_calloc(size_t count, size_t size);
void *lx_realloc(void *p, size_t bytes);
char *lx_strdup(const char *s);
/* open_memstream(text, size), whose one way to fail is running out of memory. */
FILE *lx_memory_stream(char **text, size_t *size);
/* What to print after the out-of-memory error, before the exit (NULL: nothing);
 * the plan search says which plan it had found so far. */
void lx_on_out_of_memory(void (*note)(void));

#endif
