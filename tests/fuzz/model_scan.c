/* model_scan.c — finds the mutable places of a model file (model_text.h).
 *
 * A tokenizer of the model language's shape (identifiers, numbers, strings,
 * punctuation; comments skipped; #define lines kept as fields), then one
 * pass over the tokens at brace depth 0: `= { ... }` is an initializer
 * whose `.name = value` pairs are fields, `) { ... }` a function whose
 * `;`-separated statements hold the calls. Unbalanced brackets simply end
 * what they open at the end of the text: any input scans, the mutator only
 * needs its places to be plausible, never right. */
#include <ctype.h>
#include <stdlib.h>

#include "model_text.h"

typedef enum { TOK_IDENT, TOK_NUMBER, TOK_STRING, TOK_PUNCT } tok_kind;

typedef struct {
  tok_kind kind;
  int start, end;
  int match; /* brackets: the index of the other one; else -1 */
} token;

typedef struct {
  const char *text;
  int size;
  token *toks;
  int n;
  mt_model *m;
} scanner;

static bool is_ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

static int skip_line(const scanner *s, int i) {
  while (i < s->size && s->text[i] != '\n')
    i++;
  return i;
}

/* "#define NAME value": value up to the end of the line (no continuations). */
static int directive(scanner *s, int hash) {
  int i = hash + 1, end = skip_line(s, hash);
  while (i < end && isspace((unsigned char)s->text[i]))
    i++;
  int word = i;
  while (i < end && is_ident_char(s->text[i]))
    i++;
  if (i - word != 6 || s->text[word] != 'd' || s->m->n_fields == MT_MAX_FIELDS) return end;
  while (i < end && isspace((unsigned char)s->text[i]))
    i++;
  int name = i;
  while (i < end && is_ident_char(s->text[i]))
    i++;
  int name_end = i;
  while (i < end && isspace((unsigned char)s->text[i]))
    i++;
  int value_end = end;
  while (value_end > i && isspace((unsigned char)s->text[value_end - 1]))
    value_end--;
  if (name_end > name && value_end > i)
    s->m->fields[s->m->n_fields++] = (mt_field){{name, name_end}, {i, value_end}, {hash, value_end}};
  return end;
}

/* The end of the token (or skipped stretch) that starts at i. */
static int lex_one(scanner *s, int i, tok_kind *kind) {
  const char *t = s->text;
  char c = t[i];
  *kind = TOK_PUNCT;
  if (is_ident_char(c)) {
    *kind = isdigit((unsigned char)c) ? TOK_NUMBER : TOK_IDENT;
    while (i < s->size && (is_ident_char(t[i]) || (*kind == TOK_NUMBER && t[i] == '.') ||
                           (*kind == TOK_NUMBER && (t[i] == '+' || t[i] == '-') && (t[i - 1] | 32) == 'e')))
      i++;
    return i;
  }
  if (c == '"' || c == '\'') {
    *kind = TOK_STRING;
    for (i++; i < s->size && t[i] != c && t[i] != '\n'; i++)
      if (t[i] == '\\') i++;
    return i < s->size ? i + 1 : s->size;
  }
  return i + 1;
}

static void tokenize(scanner *s) {
  int line_start = 1;
  for (int i = 0; i < s->size;) {
    const char *t = s->text;
    if (isspace((unsigned char)t[i])) {
      line_start |= t[i++] == '\n';
    } else if (t[i] == '/' && i + 1 < s->size && t[i + 1] == '/') {
      i = skip_line(s, i);
    } else if (t[i] == '/' && i + 1 < s->size && t[i + 1] == '*') {
      for (i += 2; i < s->size && !(t[i - 1] == '*' && t[i] == '/'); i++) {
      }
      i++;
    } else if (t[i] == '#' && line_start) {
      i = directive(s, i);
    } else {
      tok_kind kind;
      int end = lex_one(s, i, &kind);
      s->toks[s->n++] = (token){kind, i, end, -1};
      i = end, line_start = 0;
    }
  }
}

static char punct(const scanner *s, int k) {
  return k >= 0 && k < s->n && s->toks[k].kind == TOK_PUNCT ? s->text[s->toks[k].start] : 0;
}

static bool ident_is(const scanner *s, int k, const char *word) {
  if (k < 0 || k >= s->n || s->toks[k].kind != TOK_IDENT) return false;
  int len = s->toks[k].end - s->toks[k].start;
  for (int i = 0; i < len; i++)
    if (word[i] != s->text[s->toks[k].start + i]) return false;
  return word[len] == '\0';
}

/* Pairs (), [] and {}; an unclosed one matches the end of the text. */
static void match_brackets(scanner *s) {
  int *stack = malloc(sizeof *stack * (size_t)(s->n + 1)), depth = 0;
  for (int k = 0; k < s->n; k++) {
    char c = punct(s, k);
    if (c == '(' || c == '[' || c == '{')
      stack[depth++] = k;
    else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
      int open = stack[--depth];
      s->toks[open].match = k, s->toks[k].match = open;
    }
  }
  while (depth > 0)
    s->toks[stack[--depth]].match = s->n;
  free(stack);
}

/* The token after the bracketed group that starts at k (or k + 1). */
static int after(const scanner *s, int k) { return s->toks[k].match > k ? s->toks[k].match + 1 : k + 1; }

static mt_span span_of(const scanner *s, int first, int last) {
  int end = last < s->n ? s->toks[last].end : s->size;
  return (mt_span){s->toks[first].start, end};
}

static void initializer(scanner *s, int open, int close) {
  mt_model *m = s->m;
  if (m->n_inits < MT_MAX_INITS) m->init_ends[m->n_inits++] = close < s->n ? s->toks[close].start : s->size;
  for (int k = open + 1; k < close;) {
    if (punct(s, k) == '.' && k + 3 < close && s->toks[k + 1].kind == TOK_IDENT && punct(s, k + 2) == '=') {
      int v = k + 3;
      while (v < close && punct(s, v) != ',')
        v = after(s, v);
      if (v > k + 3 && m->n_fields < MT_MAX_FIELDS)
        m->fields[m->n_fields++] =
            (mt_field){span_of(s, k + 1, k + 1), span_of(s, k + 3, v - 1), span_of(s, k, v - 1)};
      k = v;
    } else {
      k = after(s, k);
    }
  }
}

static void add_span(mt_span *list, int *n, int max, mt_span span) {
  if (*n < max) list[(*n)++] = span;
}

/* Calls, integer literals and variables of the tokens [first, last). */
static void uses(scanner *s, int first, int last, int func) {
  mt_model *m = s->m;
  for (int k = first; k < last; k++) {
    const token *t = &s->toks[k];
    if (t->kind == TOK_IDENT && punct(s, k + 1) == '(' && m->n_calls < MT_MAX_CALLS) {
      int close = s->toks[k + 1].match;
      mt_span args = {s->toks[k + 1].end, close < s->n ? s->toks[close].start : s->size};
      m->calls[m->n_calls++] = (mt_call){span_of(s, k, k), args, func};
    } else if (t->kind == TOK_IDENT && !ident_is(s, k, "tensor") && !ident_is(s, k, "return") &&
               !ident_is(s, k, "int")) {
      if (m->n_vars < MT_MAX_VARS) m->vars[m->n_vars++] = (mt_use){span_of(s, k, k), func};
    } else if (t->kind == TOK_NUMBER) {
      bool integer = true;
      for (int i = t->start; i < t->end; i++)
        integer &= isdigit((unsigned char)s->text[i]) != 0;
      if (integer) add_span(m->ints, &m->n_ints, MT_MAX_INTS, span_of(s, k, k));
    }
  }
}

static void statement(scanner *s, int first, int last, int func) {
  mt_model *m = s->m;
  if (m->n_stmts == MT_MAX_STMTS) return;
  mt_stmt st = {span_of(s, first, last), {0, 0}, ident_is(s, first, "return"), func};
  if (ident_is(s, first, "tensor") && s->toks[first + 1].kind == TOK_IDENT && punct(s, first + 2) == '=')
    st.defined = span_of(s, first + 1, first + 1);
  else if (s->toks[first].kind == TOK_IDENT && punct(s, first + 1) == '=')
    st.defined = span_of(s, first, first);
  m->stmts[m->n_stmts++] = st;
  uses(s, first, last, func);
}

static void function(scanner *s, int open_paren, int open, int close) {
  mt_model *m = s->m;
  if (m->n_funcs == MT_MAX_FUNCS || open_paren < 1) return;
  int func = m->n_funcs++;
  int body_end = close < s->n ? s->toks[close].start : s->size;
  m->funcs[func] = (mt_func){span_of(s, open_paren - 1, open_paren - 1),
                             {s->toks[open_paren].end, s->toks[open - 1].start},
                             {s->toks[open].end, body_end}};
  for (int k = open + 1; k < close;) {
    int end = k;
    while (end < close && punct(s, end) != ';')
      end = after(s, end);
    if (end < close) statement(s, k, end, func);
    k = end + 1;
  }
}

void mt_scan(const char *text, size_t size, mt_model *m) {
  m->n_fields = m->n_inits = m->n_funcs = m->n_stmts = m->n_calls = m->n_ints = m->n_vars = 0;
  scanner s = {text, (int)size, malloc(sizeof(token) * (size + 1)), 0, m};
  tokenize(&s);
  match_brackets(&s);
  for (int k = 0; k < s.n; k = after(&s, k)) {
    if (punct(&s, k) != '{') continue;
    int close = s.toks[k].match;
    if (punct(&s, k - 1) == '=')
      initializer(&s, k, close);
    else if (punct(&s, k - 1) == ')' && s.toks[k - 1].match >= 0)
      function(&s, s.toks[k - 1].match, k, close);
  }
  free(s.toks);
}
