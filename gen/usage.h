/* usage.h — lynxgen --help, and the defaults of the options it names. */
#ifndef LX_USAGE_H
#define LX_USAGE_H

/* lynxgen's own budgets: a run past them stops with an error, not the machine.
 * Macros, so that --help prints the numbers the code uses. */
#define DEFAULT_MAX_MEMORY_GIB 16
#define DEFAULT_SEARCH_SECONDS 300
#define MIN_MAX_MEMORY_GIB 0.25 /* libclang's libraries cannot load below it (measured: 0.22 GiB) */
#define TEXT_OF(macro) TEXT_OF_TOKENS(macro)
#define TEXT_OF_TOKENS(tokens) #tokens

/* --trace-events: enough for a viewer to load at once (about 50 MB) */
#define DEFAULT_TRACE_EVENTS 250000

extern const char lx_usage_text[];

#endif
