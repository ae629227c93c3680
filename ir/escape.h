/* escape.h — how a string the user controls (the model file's name, the
 * data paths) is written into each language lynxgen emits, so that no such
 * string can end a literal or a comment, form a trigraph, splice or break a
 * line, or run anything where the output is compiled, parsed or shown.
 * Every user string that reaches an output goes through one of these. */
#ifndef LX_ESCAPE_H
#define LX_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* A C/CUDA string literal, quotes included: printable ASCII as is except
 * `"`, `\` and `?` (which could start a trigraph), which are backslash-escaped;
 * every other byte as a three-digit octal escape. */
void lx_put_c_string(FILE *out, const char *s);

/* Text for a comment of emitted C or CUDA code, or for one line of a
 * plain-text file or of the terminal: printable ASCII as is except `*`
 * (which could end the comment), `?` (which could start a trigraph) and `\`
 * (which could splice lines), which like every other byte are written as
 * \xNN. Writes at most size - 1 characters and never cuts an escape in two;
 * returns buf. */
enum { LX_TEXT_MAX = 1024 };
const char *lx_text(const char *s, char *buf, size_t size);

/* Text for one line of the terminal that is not a file name (a diagnostic's
 * message, which quotes what lynxgen read): as lx_text, but `*`, `?` and `\`
 * as they are. No byte that could move the cursor, retitle the window or
 * break the line reaches the terminal. */
const char *lx_line_text(const char *s, char *buf, size_t size);

/* SVG/XML character data or an attribute value: & < > " ' as entities, and
 * what XML 1.0 does not allow (control characters, U+FFFE, U+FFFF) and each
 * byte that is not part of well-formed UTF-8 as U+FFFD. */
void lx_put_xml_text(FILE *out, const char *s);

/* s as well-formed UTF-8, for JSON (json.h; cJSON escapes the rest): each
 * byte that is not part of a well-formed sequence becomes U+FFFD. A new
 * string the caller frees. */
char *lx_utf8_text(const char *s);

#endif
