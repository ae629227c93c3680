/* test_json.c — ir/json.h, the one way lynxgen writes JSON: strings come
 * back as written (stray bytes as U+FFFD), members in the order they were
 * added, numbers exactly, and a NaN or an infinity stops lynxgen before
 * anything is written. Expected texts are written out
 * here by hand from RFC 8259 and the UTF-8 tables of RFC 3629. */
#define _POSIX_C_SOURCE 200809L /* open_memstream, fork */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "json.h"

/* What lx_json_write prints of doc, unindented (a malloc'd string). */
static char *printed(cJSON *doc) {
  char *text = NULL;
  size_t size = 0;
  FILE *out = open_memstream(&text, &size);
  lx_json_write(doc, false, out);
  fclose(out);
  return text;
}

/* {"s": s} as printed, parsed back by cJSON's parser: the string it holds. */
static char *round_trip(const char *s) {
  cJSON *doc = lx_json_document();
  lx_json_add_string(doc, "s", s);
  char *text = printed(doc);
  cJSON *back = cJSON_Parse(text);
  free(text);
  const char *got = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(back, "s"));
  char *copy = got ? strdup(got) : NULL;
  cJSON_Delete(back);
  return copy;
}

static void check_string(const char *what, const char *s, const char *want) {
  char *got = round_trip(s);
  CHECK(got && !strcmp(got, want), "a string with %s comes back %s", what,
        strcmp(s, want) ? "repaired" : "exactly");
  free(got);
}

static void check_strings(void) {
  check_string("quotes, backslashes and control characters", "a\"b\\c\x01\t\n\x1f\x7f",
               "a\"b\\c\x01\t\n\x1f\x7f");
  check_string("UTF-8 of two, three and four bytes and U+2028",
               "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xe2\x80\xa8",
               "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xe2\x80\xa8");
  check_string("a stray byte",
               "a\xff"
               "b",
               "a\xef\xbf\xbd"
               "b");
  check_string("a sequence cut short", "\xe2\x82x", "\xef\xbf\xbd\xef\xbf\xbdx");
  check_string("an overlong slash", "\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd");
  check_string("a surrogate", "\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  check_string("a code point beyond U+10FFFF", "\xf4\x90\x80\x80",
               "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  check_string("lead bytes F5 and F7, never in UTF-8", "\xf5\x80\x80\xf7",
               "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");

  cJSON *doc = lx_json_document();
  lx_json_add_string(doc, "s", "\"\\\x01\n");
  char *text = printed(doc);
  CHECK(!strcmp(text, "{\"s\":\"\\\"\\\\\\u0001\\n\"}\n"),
        "quote, backslash and controls are escaped as RFC 8259 says");
  free(text);
}

static void check_order_and_numbers(void) {
  cJSON *doc = lx_json_document();
  lx_json_add_int(doc, "z", 1);
  lx_json_add_string(doc, "a", NULL);
  cJSON *list = lx_json_add_array(doc, "m");
  lx_json_add_bool(list, NULL, true);
  lx_json_add_null(list, NULL);
  lx_json_add_object(list, NULL);
  lx_json_add_number(doc, "x", 0.1);
  lx_json_add_number(doc, "sum", 0.1 + 0.2);
  lx_json_add_number(doc, "two53", 9007199254740992.0);
  lx_json_add_int(doc, "big", INT64_MAX);
  lx_json_add_int(doc, "small", INT64_MIN);
  char *text = printed(doc);
  CHECK(!strcmp(text, "{\"z\":1,\"a\":null,\"m\":[true,null,{}],\"x\":0.1,\"sum\":0.30000000000000004,"
                      "\"two53\":9007199254740992,\"big\":9223372036854775807,"
                      "\"small\":-9223372036854775808}\n"),
        "members in the order they were added; 0.1, 0.1 + 0.2, 2^53 and the int64 limits exact");
  free(text);
}

static void check_stream(void) {
  char *text = NULL;
  size_t size = 0;
  FILE *out = open_memstream(&text, &size);
  cJSON *head = lx_json_document();
  lx_json_add_string(head, "unit", "ms");
  lx_json_stream stream;
  lx_json_stream_begin(&stream, head, "events", out);
  for (int i = 1; i <= 2; i++) {
    cJSON *event = lx_json_document();
    lx_json_add_int(event, "e", i);
    lx_json_stream_element(&stream, event);
  }
  lx_json_stream_end(&stream);
  fclose(out);
  CHECK(!strcmp(text, "{\"unit\":\"ms\",\"events\":[\n{\"e\":1},\n{\"e\":2}\n]}\n"),
        "a streamed document: the head, then one element per line");
  free(text);
}

/* Adds a refused number in a child process that then writes the document
 * to a pipe: the child must exit 1 with an error and write nothing. */
static void check_refused(const char *what, double number) {
  int pipe_out[2], pipe_err[2];
  if (pipe(pipe_out) || pipe(pipe_err)) return;
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    dup2(pipe_err[1], 2);
    FILE *out = fdopen(pipe_out[1], "w");
    cJSON *doc = lx_json_document();
    lx_json_add_number(doc, "n", number);
    lx_json_write(doc, false, out);
    fclose(out);
    _exit(0);
  }
  close(pipe_out[1]);
  close(pipe_err[1]);
  char written[256] = "", error[512] = "";
  ssize_t n_written = read(pipe_out[0], written, sizeof written - 1);
  ssize_t n_error = read(pipe_err[0], error, sizeof error - 1);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1 && n_written == 0 && n_error > 0 &&
            strstr(error, "lynxgen: error: internal error: \"n\""),
        "%s is refused: exit 1, an error naming the member, nothing written", what);
  close(pipe_out[0]);
  close(pipe_err[0]);
}

int main(void) {
  check_strings();
  check_order_and_numbers();
  check_stream();
  check_refused("NaN", NAN);
  check_refused("infinity", INFINITY);
  check_refused("minus infinity", -INFINITY);
  return check_exit_status();
}
