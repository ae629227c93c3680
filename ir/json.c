/* json.c — JSON documents through cJSON (json.h). */
#include "json.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "escape.h"

/* cJSON allocates through lynxgen's checked malloc, so no cJSON call returns
 * NULL for want of memory. */
cJSON *lx_json_document(void) {
  static cJSON_Hooks hooks = {lx_malloc, free};
  cJSON_InitHooks(&hooks);
  return cJSON_CreateObject();
}

static cJSON *add(cJSON *parent, const char *key, cJSON *item) {
  if (key)
    cJSON_AddItemToObject(parent, key, item);
  else
    cJSON_AddItemToArray(parent, item);
  return item;
}

cJSON *lx_json_add_object(cJSON *parent, const char *key) { return add(parent, key, cJSON_CreateObject()); }

cJSON *lx_json_add_array(cJSON *parent, const char *key) { return add(parent, key, cJSON_CreateArray()); }

void lx_json_add_string(cJSON *parent, const char *key, const char *s) {
  if (!s) {
    add(parent, key, cJSON_CreateNull());
    return;
  }
  char *text = lx_utf8_text(s);
  add(parent, key, cJSON_CreateString(text));
  free(text);
}

/* A number JSON cannot hold is lynxgen's bug, not the user's (every number a
 * model file or option gives is checked where it is read): it stops here,
 * before the document is written, rather than print null or a wrong value. */
static void refuse_number(const char *key, double value) {
  fprintf(stderr, "lynxgen: error: internal error: %s%s%s is %g, and JSON has no NaN or infinity\n",
          key ? "\"" : "", key ? key : "an array element", key ? "\"" : "", value);
  exit(1);
}

/* The shortest of 15, 16 or 17 significant digits that reads back as value
 * exactly, as raw JSON: cJSON 1.7 prints 15 digits and keeps them when they
 * read back only approximately (2^53 as 9.00719925474099e+15). */
static cJSON *exact_number(double value) {
  char text[32];
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(text, sizeof text, "%.*g", digits, value);
    if (strtod(text, NULL) == value) break;
  }
  return cJSON_CreateRaw(text);
}

void lx_json_add_number(cJSON *parent, const char *key, double value) {
  if (!isfinite(value)) refuse_number(key, value);
  add(parent, key, exact_number(value));
}

/* In digits, all of them: a what-if plan's bytes may pass 2^53, where a
 * double (and cJSON) would round them. */
void lx_json_add_int(cJSON *parent, const char *key, int64_t value) {
  char text[24];
  snprintf(text, sizeof text, "%" PRId64, value);
  add(parent, key, cJSON_CreateRaw(text));
}

void lx_json_add_bool(cJSON *parent, const char *key, bool value) {
  add(parent, key, cJSON_CreateBool(value));
}

void lx_json_add_null(cJSON *parent, const char *key) { add(parent, key, cJSON_CreateNull()); }

void lx_json_write(cJSON *doc, bool indented, FILE *out) {
  char *text = indented ? cJSON_Print(doc) : cJSON_PrintUnformatted(doc);
  cJSON_Delete(doc);
  fputs(text, out);
  fputc('\n', out);
  free(text);
}

void lx_json_stream_begin(lx_json_stream *stream, cJSON *head, const char *array_key, FILE *out) {
  *stream = (lx_json_stream){.out = out};
  lx_json_add_array(head, array_key); /* printed as its key and "[]}" */
  char *text = cJSON_PrintUnformatted(head);
  cJSON_Delete(head);
  fwrite(text, 1, strlen(text) - 2, out); /* all but "]}": the elements go there */
  free(text);
}

void lx_json_stream_element(lx_json_stream *stream, cJSON *element) {
  fputs(stream->has_element ? ",\n" : "\n", stream->out);
  stream->has_element = true;
  char *text = cJSON_PrintUnformatted(element);
  cJSON_Delete(element);
  fputs(text, stream->out);
  free(text);
}

void lx_json_stream_end(lx_json_stream *stream) { fputs("\n]}\n", stream->out); }
