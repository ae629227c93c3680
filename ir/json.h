/* json.h — every JSON file lynxgen writes (ir.json, trace.json, --plan
 * --json) is built with cJSON (Debian's libcjson) through these helpers, so
 * that no output can be malformed JSON:
 *   - a string is made valid UTF-8 first (a stray byte becomes U+FFFD, as in
 *     escape.h); cJSON escapes `"`, `\` and control characters;
 *   - a number is finite: JSON has no NaN or infinity, and cJSON would print
 *     null in their place, so a non-finite number is a generator bug that
 *     stops lynxgen (exit 1, one error line) as it is added, before the
 *     document is written (a streamed one: before it is complete; -o DIR
 *     then leaves DIR as it was);
 *   - a number is exact: a double as the shortest decimal that reads back as
 *     it, an integer in all its digits (beyond 2^53 too: Python reads them
 *     exactly; a reader that holds numbers as doubles rounds them).
 * Members keep the order they were added in, so the same input gives the
 * same bytes. A parent is an object (key names the member) or an array (key
 * is NULL). Running out of memory ends in alloc.h's error. */
#ifndef LX_JSON_H
#define LX_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* A new, empty top-level object. */
cJSON *lx_json_document(void);
/* A new object or array, added to parent. */
cJSON *lx_json_add_object(cJSON *parent, const char *key);
cJSON *lx_json_add_array(cJSON *parent, const char *key);
/* s, or null when s is NULL. */
void lx_json_add_string(cJSON *parent, const char *key, const char *s);
void lx_json_add_number(cJSON *parent, const char *key, double value);
void lx_json_add_int(cJSON *parent, const char *key, int64_t value);
void lx_json_add_bool(cJSON *parent, const char *key, bool value);
void lx_json_add_null(cJSON *parent, const char *key);

/* Writes doc, indented when `indented`, and a newline, then frees it. */
void lx_json_write(cJSON *doc, bool indented, FILE *out);

/* A document too large to hold at once (trace.json: up to millions of
 * events): its head object, then one array as its last member, whose
 * elements are written and freed as they are made, one per line. */
typedef struct {
  FILE *out;
  bool has_element;
} lx_json_stream;
void lx_json_stream_begin(lx_json_stream *stream, cJSON *head, const char *array_key, FILE *out);
void lx_json_stream_element(lx_json_stream *stream, cJSON *element);
void lx_json_stream_end(lx_json_stream *stream);

#endif
