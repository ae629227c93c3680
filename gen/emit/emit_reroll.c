/* emit_reroll.c — loops back into a printed step.
 *
 * The walker prints a step as straight-line code, every micro-batch's
 * instructions in full: at 512 micro-batches a function the host compiler
 * takes minutes over and a reader pages through. Pipeline schedules are
 * periodic, though: in 1F1B's steady state each micro-batch's lines repeat the
 * previous one's with the micro-batch, stash slot, event and request numbers
 * moved on by the same amounts. This pass finds such runs in the printed
 * text, a block of lines repeated at least three times that is equal but for
 * integer literals each changing by its own constant step from one repetition
 * to the next, and prints each as a for loop whose literals are base + step *
 * i. A loop is taken only if expanding it gives back the original lines byte
 * for byte, so the program runs the same statements in the same order. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit/emit_reroll.h"

#include "alloc.h"

/* Longest block tried (lines), and fewest repetitions worth a loop. */
enum { MAX_PERIOD = 2048, MIN_TIMES = 3 };

typedef struct {
  int at, digits, end; /* the digits start at `at`; the literal (with any L/U suffix) ends at `end` */
  long long value;
  bool in_code_glued; /* outside a comment, right after a letter, digit or '_' (part of a name) */
} number;

typedef struct {
  const char *text;
  int len;
  uint64_t shape;              /* hash of the text with every literal's digits left out */
  int first, count;            /* its numbers in the pass's array */
  int brace_change, brace_low; /* net { minus }, and the lowest running depth, outside comments */
  bool names_var;              /* uses the pass's loop variable, which the loop would shadow */
  int next_same;               /* the next line of the same shape, or -1 */
} line;

typedef struct {
  line *lines;
  int n;
  number *numbers;
  int n_numbers, cap_numbers;
  char var; /* the loops' variable in this pass */
} text;

/* C source's ASCII classes, inline: the scan visits every byte of a step's straight-line text, and
 * <ctype.h>'s call per byte was the hottest spot of -o's profile */
static bool digit(char c) { return c >= '0' && c <= '9'; }
static bool name_char(char c) {
  return digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static void add_number(text *t, number n) {
  if (t->n_numbers == t->cap_numbers) {
    t->cap_numbers = t->cap_numbers ? 2 * t->cap_numbers : 1024;
    t->numbers = lx_realloc(t->numbers, sizeof *t->numbers * (size_t)t->cap_numbers);
  }
  t->numbers[t->n_numbers++] = n;
}

/* Its numbers, shape and braces. A literal is a run of at most 18 digits
 * (longer ones stay text) with its suffix; a comment is closed on its line. */
static void scan_line(text *t, line *l) {
  uint64_t h = 1469598103934665603ull;
  bool comment = false, string = false;
  l->first = t->n_numbers;
  int depth = 0;
  for (int c = 0; c < l->len;) {
    const char *s = l->text + c;
    if (!string && !comment && s[0] == '/' && c + 1 < l->len && s[1] == '*')
      comment = true;
    else if (comment && s[0] == '*' && c + 1 < l->len && s[1] == '/')
      comment = false;
    else if (!comment && s[0] == '"' && (c == 0 || s[-1] != '\\'))
      string = !string;
    if (!string && digit(s[0])) { /* a digit in a string literal is text */
      int digits = 0;
      while (c + digits < l->len && digit(s[digits]))
        digits++;
      int end = c + digits;
      while (end < l->len && strchr("uUlL", l->text[end]))
        end++;
      bool glued = c > 0 && name_char(s[-1]);
      if (digits <= 18 && (digits == 1 || s[0] != '0') && !(end < l->len && name_char(l->text[end]))) {
        add_number(t, (number){c, digits, end, strtoll(s, NULL, 10), glued && !comment});
        h = (h ^ '#') * 1099511628211ull;
        for (int k = c + digits; k < end; k++)
          h = (h ^ (unsigned char)l->text[k]) * 1099511628211ull;
        c = end;
        continue;
      }
    }
    if (!comment && !string) {
      depth += (s[0] == '{') - (s[0] == '}');
      if (depth < l->brace_low) l->brace_low = depth;
      if (s[0] == t->var && !(c > 0 && name_char(s[-1])) && !(c + 1 < l->len && name_char(s[1])))
        l->names_var = true;
    }
    h = (h ^ (unsigned char)s[0]) * 1099511628211ull;
    c++;
  }
  l->brace_change = depth;
  l->count = t->n_numbers - l->first;
  l->shape = h ^ (uint64_t)l->count;
}

static void split_lines(text *t, const char *body) {
  int cap = 0;
  for (const char *p = body; *p;) {
    const char *end = strchr(p, '\n');
    int len = end ? (int)(end - p) : (int)strlen(p);
    if (t->n == cap) {
      cap = cap ? 2 * cap : 1024;
      t->lines = lx_realloc(t->lines, sizeof *t->lines * (size_t)cap);
    }
    line *l = &t->lines[t->n++];
    *l = (line){.text = p, .len = len};
    scan_line(t, l);
    p += len + (end != NULL);
  }
}

/* Links each line to the next one of the same shape (an open-addressing
 * table from shape to the latest line seen, filled from the end). */
static void link_same_shapes(text *t) {
  size_t slots = 1;
  while (slots < 2 * (size_t)t->n + 2)
    slots *= 2;
  int *latest = lx_realloc(NULL, sizeof(int) * slots);
  for (size_t k = 0; k < slots; k++)
    latest[k] = -1;
  for (int s = t->n - 1; s >= 0; s--) {
    size_t k = (size_t)t->lines[s].shape & (slots - 1);
    while (latest[k] >= 0 && t->lines[latest[k]].shape != t->lines[s].shape)
      k = (k + 1) & (slots - 1);
    t->lines[s].next_same = latest[k];
    latest[k] = s;
  }
  free(latest);
}

/* Is line b line a with every literal moved on by `times` of its step
 * (steps[k] for the line's k-th literal), the rest byte for byte the same? */
static bool moved_on(const text *t, const line *a, const line *b, const long long *steps, long long times) {
  if (a->shape != b->shape || a->count != b->count) return false;
  int from_a = 0, from_b = 0;
  for (int k = 0; k < a->count; k++) {
    const number *x = &t->numbers[a->first + k], *y = &t->numbers[b->first + k];
    if (x->at - from_a != y->at - from_b ||
        memcmp(a->text + from_a, b->text + from_b, (size_t)(x->at - from_a)))
      return false;
    if (y->value != x->value + steps[k] * times) return false;
    int suffix = x->end - x->at - x->digits;
    if (y->end - y->at - y->digits != suffix ||
        memcmp(a->text + x->at + x->digits, b->text + y->at + y->digits, (size_t)suffix))
      return false;
    from_a = x->end, from_b = y->end;
  }
  return a->len - from_a == b->len - from_b &&
         !memcmp(a->text + from_a, b->text + from_b, (size_t)(a->len - from_a));
}

/* The steps of block [s, s + period) read off its first repetition. */
static void steps_of(const text *t, int s, int period, long long *steps) {
  int k = 0;
  for (int j = 0; j < period; j++) {
    const line *a = &t->lines[s + j], *b = &t->lines[s + period + j];
    for (int m = 0; m < a->count; m++)
      steps[k++] = t->numbers[b->first + m].value - t->numbers[a->first + m].value;
  }
}

/* A block the loop can hold: braces balanced inside it, no variable to shadow, and
 * no changing literal glued to a name in code (it could not become an expression). */
static bool loop_body(const text *t, int s, int period, const long long *steps) {
  int depth = 0, k = 0;
  for (int j = 0; j < period; j++) {
    const line *l = &t->lines[s + j];
    if (depth + l->brace_low < 0 || l->names_var) return false;
    depth += l->brace_change;
    for (int m = 0; m < l->count; m++, k++)
      if (steps[k] != 0 && t->numbers[l->first + m].in_code_glued) return false;
  }
  return depth == 0;
}

static int literals_in(const text *t, int s, int period) {
  int n = 0;
  for (int j = 0; j < period; j++)
    n += t->lines[s + j].count;
  return n;
}

/* How many times block [s, s + period) repeats from s, each repetition its
 * predecessor moved on by the same steps. */
static int repetitions(const text *t, int s, int period, long long *steps) {
  for (int j = 0; j < period; j++)
    if (t->lines[s + j].shape != t->lines[s + period + j].shape) return 1;
  steps_of(t, s, period, steps);
  int times = 1;
  for (; s + (times + 1) * period <= t->n; times++) {
    int k = 0;
    for (int j = 0; j < period; j++) {
      const line *a = &t->lines[s + j];
      if (!moved_on(t, a, &t->lines[s + times * period + j], steps + k, times)) return times;
      k += a->count;
    }
  }
  return times;
}

typedef struct {
  int period, times;
  long long *steps; /* one per literal of the block */
} loop;

/* The loop starting at line s that covers the most lines, if any. */
static loop best_loop(const text *t, int s, long long *scratch) {
  loop best = {0, 0, NULL};
  for (int next = t->lines[s].next_same; next >= 0; next = t->lines[next].next_same) {
    int period = next - s;
    if (period > MAX_PERIOD || s + MIN_TIMES * period > t->n) break;
    if (best.period && period % best.period == 0) continue; /* covers no more than the block it repeats */
    long long *steps = scratch;                             /* room for every literal of the text */
    int times = repetitions(t, s, period, steps);
    if (times >= MIN_TIMES && (long long)times * period > (long long)best.times * best.period &&
        loop_body(t, s, period, steps)) {
      best.period = period, best.times = times;
      free(best.steps);
      size_t literals = (size_t)literals_in(t, s, period);
      best.steps = lx_realloc(NULL, sizeof(long long) * (literals + 1));
      memcpy(best.steps, steps, sizeof(long long) * literals);
    }
  }
  return best;
}

static void print_literal(FILE *out, const line *l, const number *x, long long step, char var) {
  const char *suffix = l->text + x->at + x->digits;
  int suffix_len = x->end - x->at - x->digits;
  if (step == 0) {
    fwrite(l->text + x->at, 1, (size_t)(x->end - x->at), out);
    return;
  }
  fprintf(out, "(%lld%.*s %c ", x->value, suffix_len, suffix, step > 0 ? '+' : '-');
  long long magnitude = step > 0 ? step : -step;
  if (magnitude != 1) fprintf(out, "%lld%.*s * ", magnitude, suffix_len, suffix);
  fprintf(out, "%c)", var);
}

static void print_loop(FILE *out, const text *t, int s, loop l) {
  const line *first = &t->lines[s];
  int indent = 0; /* the block's own: its first line's (its braces are balanced) */
  while (indent < first->len && first->text[indent] == ' ')
    indent++;
  fprintf(out, "%*sfor (int %c = 0; %c < %d; %c++) { /* the %d line%s below, %d times */\n", indent, "",
          t->var, t->var, l.times, t->var, l.period, l.period == 1 ? "" : "s", l.times);
  int k = 0;
  for (int j = 0; j < l.period; j++) {
    const line *ln = &t->lines[s + j];
    int from = 0;
    fputs("  ", out);
    for (int m = 0; m < ln->count; m++, k++) {
      const number *x = &t->numbers[ln->first + m];
      fwrite(ln->text + from, 1, (size_t)(x->at - from), out);
      print_literal(out, ln, x, l.steps[k], t->var);
      from = x->end;
    }
    fwrite(ln->text + from, 1, (size_t)(ln->len - from), out);
    fputc('\n', out);
  }
  fprintf(out, "%*s}\n", indent, "");
}

/* One pass with loop variable `var`; returns how many loops it made. */
static int reroll_pass(const char *body, FILE *out, char var) {
  text t = {.var = var};
  split_lines(&t, body);
  link_same_shapes(&t);
  long long *scratch = lx_realloc(NULL, sizeof(long long) * ((size_t)t.n_numbers + 1));
  int loops = 0;
  for (int s = 0; s < t.n;) {
    loop l = best_loop(&t, s, scratch);
    if (l.times) {
      print_loop(out, &t, s, l);
      s += l.period * l.times;
      loops++;
    } else {
      fwrite(t.lines[s].text, 1, (size_t)t.lines[s].len, out);
      fputc('\n', out);
      s++;
    }
    free(l.steps);
  }
  free(scratch);
  free(t.lines);
  free(t.numbers);
  return loops;
}

/* Passes with i, j, k: the first pass takes the loops that cover the most
 * lines, a later one rolls what repeats in its output (the layers inside a
 * micro-batch's loop body, or micro-batches whose body an inner loop made
 * short enough to be seen). */
void emit_reroll(const char *body, FILE *out) {
  static const char vars[] = "ijk";
  char *latest = NULL; /* the last pass's output */
  const char *in = body;
  for (int p = 0; vars[p]; p++) {
    char *next = NULL;
    size_t size = 0;
    FILE *f = lx_memory_stream(&next, &size);
    int loops = reroll_pass(in, f, vars[p]);
    fclose(f);
    free(latest);
    in = latest = next;
    if (!loops) break;
  }
  fputs(in, out);
  free(latest);
}

FILE *emit_step_begin(lx_step_text *step, FILE *out, bool reroll) {
  *step = (lx_step_text){.out = out, .reroll = reroll};
  step->body = lx_memory_stream(&step->text, &step->size);
  return step->body;
}

void emit_step_end(lx_step_text *step) {
  fclose(step->body);
  if (step->reroll)
    emit_reroll(step->text, step->out);
  else
    fwrite(step->text, 1, step->size, step->out);
  free(step->text);
}
