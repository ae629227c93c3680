/* emit_file.c — a stage file's parts and its line width (emit_file.h). */
#include <stdlib.h>
#include <string.h>

#include "emit/emit_file.h"

#include "alloc.h"
#include "emit/emit_names.h"

enum { WIDTH = 120, CONTINUATION = 4 };

/* ---- wrapping ---------------------------------------------------------------- */

static bool is_code(const char *line, size_t length) {
  size_t i = 0;
  while (i < length && line[i] == ' ')
    i++;
  if (i == length) return false;
  if (line[i] == '#' || line[i] == '{') return false; /* preprocessor, a data table's row */
  if (line[i] == '/' && i + 1 < length && line[i + 1] == '*') return false;
  if (line[i] == '*') return false; /* inside a block comment */
  return true;
}

/* Where the line may break: after the ", " between the arguments of its
 * outermost call (outside strings, characters and a trailing comment); -1
 * ends the list. */
static int break_points(const char *line, size_t length, int *at, int max) {
  int n = 0, depth = 0, outermost = 0;
  char quote = 0;
  for (size_t i = 0; i < length && n < max - 1; i++) {
    char c = line[i];
    if (quote) {
      if (c == '\\')
        i++;
      else if (c == quote)
        quote = 0;
      continue;
    }
    if (c == '"' || c == '\'')
      quote = c;
    else if (c == '/' && i + 1 < length && line[i + 1] == '*')
      break; /* a trailing comment stays whole */
    else if (c == '(')
      depth++;
    else if (c == ')')
      depth--;
    else if (c == ',' && depth > 0 && i + 1 < length && line[i + 1] == ' ') {
      if (!outermost || depth < outermost) n = 0, outermost = depth; /* only the least nested count */
      if (depth == outermost) at[n++] = (int)i + 2;
    }
  }
  at[n] = -1;
  return n;
}

/* Greedy fill: as many arguments on a line as fit, continuations indented
 * four columns past the statement. */
static void wrap_line(const char *line, size_t length, FILE *out, int width) {
  enum { MAX_BREAKS = 512 };
  int at[MAX_BREAKS];
  int n = break_points(line, length, at, MAX_BREAKS);
  int indent = 0;
  while ((size_t)indent < length && line[indent] == ' ')
    indent++;
  int start = 0, column = 0, b = 0;
  while (b < n && column + (int)length - start > width) {
    /* the furthest break that keeps this line within the width; one argument
     * longer than the line stands alone */
    int last = b;
    for (int k = b + 1; k < n && column + (at[k] - start) - 1 <= width; k++)
      last = k;
    fwrite(line + start, 1, (size_t)(at[last] - 1 - start), out); /* without the space after the comma */
    fprintf(out, "\n%*s", indent + CONTINUATION, "");
    column = indent + CONTINUATION;
    start = at[last];
    b = last + 1;
  }
  fwrite(line + start, 1, length - (size_t)start, out);
}

/* `text` to `out`, each statement line longer than `width` continued on the
 * next lines after a comma (comments, preprocessor lines and the rows of
 * data tables stay as they are). */
static void emit_wrap(const char *text, FILE *out, int width) {
  while (*text) {
    const char *end = strchr(text, '\n');
    size_t length = end ? (size_t)(end - text) : strlen(text);
    if ((int)length > width && is_code(text, length))
      wrap_line(text, length, out, width);
    else
      fwrite(text, 1, length, out);
    if (!end) break;
    fputc('\n', out);
    text = end + 1;
  }
}

void emit_stage_file(lx_printer *pr, FILE *out, lx_file_part head, lx_file_part code) {
  char *code_text = NULL, *file_text = NULL;
  size_t code_size = 0, file_size = 0;
  pr->names = emit_names_new();
  pr->out = lx_memory_stream(&code_text, &code_size);
  code(pr);
  fclose(pr->out);
  pr->out = lx_memory_stream(&file_text, &file_size);
  head(pr);
  emit_names_print(pr, code_text);
  fputs(code_text, pr->out);
  fclose(pr->out);
  emit_wrap(file_text, out, WIDTH);
  pr->out = out;
  free(code_text);
  free(file_text);
  emit_names_free(pr->names);
  pr->names = NULL;
}

static bool has_fill(const lx_stage *st) {
  for (int k = 0; k < LX_STREAM_COUNT; k++)
    for (int i = 0; i < st->streams[k].count; i++)
      if (st->streams[k].items[i].fill) return true;
  return false;
}

void emit_step_pipeline(const lx_printer *pr, const char *init_2bw) {
  if (pr->p->kind != LX_SCHEDULE_2BW) {
    fprintf(pr->out, "  (void)ahead; /* %s drains the pipeline every step */\n",
            lx_schedule_name(pr->p->kind));
    return;
  }
  if (has_fill(pr->st))
    fprintf(pr->out,
            "  const int fill = !pipeline_filled; /* the first step, or the one before drained it */\n");
  fputs(init_2bw, pr->out);
}

void emit_step_pipeline_end(const lx_printer *pr) {
  if (pr->p->kind == LX_SCHEDULE_2BW)
    fprintf(pr->out, "  pipeline_filled = ahead; /* the next step's first forwards are done */\n");
}

const char *emit_forward_only_range(const lx_printer *pr) {
  return pr->p->kind == LX_SCHEDULE_2BW ? "MICRO_BATCHES; mb < 2 * MICRO_BATCHES" : "0; mb < MICRO_BATCHES";
}
