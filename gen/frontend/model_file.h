/* model_file.h — reading a model file, and every file it #includes, within
 * bounds (source_file.h), includes nested at most LX_MAX_INCLUDE_DEPTH deep.
 * libclang reads the included files itself; they are checked before it sees
 * them, and so is every directive that could read a file (directives.h). */
#ifndef LX_MODEL_FILE_H
#define LX_MODEL_FILE_H

#include <stddef.h>

enum { LX_MAX_INCLUDE_DEPTH = 16 };

/* The text of the model file: `given` (length *length) when not NULL, else
 * the file at `path` (checked as above), with every file it includes,
 * transitively, checked too. A copy the caller frees, its length in *length;
 * NULL after reporting an error, located at the #include that names a bad file. */
char *lx_load_model_source(const char *path, const char *given, size_t *length);

#endif
