/* directives.h — the preprocessing directives of a model file (or of a file
 * it includes), vetted before libclang sees them. A shared model file is
 * untrusted, and a directive can make clang read a file (a device, a FIFO),
 * crash it (#pragma clang __debug) or test a file's existence; lynxgen reads
 * the text as clang's first translation phases do (trigraphs, as -std=c11
 * enables them, line splices, comments, string and character literals) and
 * lets through only:
 * - #include "name", each name handed to the caller to vet, and
 *   #include <lynx.h>;
 * - the directives that read no file: #define, #undef, the conditionals,
 *   #line, #error, #warning, and #pragma once, message, STDC and
 *   (GCC|clang) diagnostic.
 * Anything that could reach those effects otherwise is refused wherever it
 * is: _Pragma, __has_include(_next), __has_embed, token pasting (## could
 * form those names) and universal character names (\u0061 spells 'a'). */
#ifndef LX_DIRECTIVES_H
#define LX_DIRECTIVES_H

#include <stdbool.h>
#include <stddef.h>

#include "diag.h"

/* Vets one `#include "name"`: name is the n bytes between the quotes, as
 * clang spells them; `at` is the directive's '#'. False after an error. */
typedef bool (*lx_include_fn)(void *context, const char *name, size_t n, lx_srcloc at);

/* True when every directive of the file at `path` (its text, length bytes)
 * is allowed and on_include accepted each file it includes; false after an
 * error located at the first directive or token refused. */
bool lx_check_directives(const char *path, const char *text, size_t length, lx_include_fn on_include,
                         void *context);

#endif
