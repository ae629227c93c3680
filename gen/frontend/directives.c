/* directives.c — the preprocessing directives of a model file, vetted before
 * libclang reads it (directives.h). */
#include "frontend/directives.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"

/* The file's text after translation phases 1 and 2, which clang applies
 * before it sees a token: trigraphs replaced, line splices removed, each line
 * end one '\n'. at[k] is the offset in the file of c[k], for locations. */
typedef struct {
  const char *path, *text;
  size_t length;
  char *c;
  size_t *at;
  size_t n, i; /* i: where the scan is in c */
} lx_scan;

/* The character a trigraph at p stands for, or 0: -std=c11, which lynxgen
 * gives clang, enables trigraphs, so "??=include" is "#include". */
static char trigraph(const char *p, const char *end) {
  static const char from[] = "=(/)'<!>-", to[] = "#[\\]^{|}~";
  if (end - p < 3 || p[0] != '?' || p[1] != '?' || !p[2]) return 0;
  const char *k = strchr(from, p[2]);
  return k ? to[k - from] : 0;
}

/* The size of a line end at p, or 0 ("\r\n" and "\n\r" are one, as in a
 * clang line splice). */
static size_t line_end(const char *p, const char *end) {
  if (p == end || (*p != '\n' && *p != '\r')) return 0;
  return p + 1 < end && (p[1] == '\n' || p[1] == '\r') && p[1] != p[0] ? 2 : 1;
}

/* The size of the line splice at p whose backslash takes `backslash` bytes
 * (1, or 3 for "??/"), or 0. clang also splices across blanks after the
 * backslash (with a warning), so "\\ \n" is a splice too. */
static size_t splice(const char *p, const char *end, size_t backslash) {
  const char *q = p + backslash;
  while (q < end && (*q == ' ' || *q == '\t' || *q == '\f' || *q == '\v'))
    q++;
  size_t e = line_end(q, end);
  return e ? (size_t)(q - p) + e : 0;
}

static void translate(lx_scan *s) {
  s->c = lx_malloc(s->length + 1);
  s->at = lx_malloc((s->length + 1) * sizeof *s->at);
  const char *p = s->text, *end = p + s->length;
  while (p < end) {
    char ch = trigraph(p, end);
    size_t size = ch ? 3 : 1;
    if (!ch) ch = *p;
    size_t spliced = ch == '\\' ? splice(p, end, size) : 0;
    if (spliced) {
      p += spliced;
      continue;
    }
    if (line_end(p, end)) {
      ch = '\n';
      size = line_end(p, end);
    }
    s->c[s->n] = ch;
    s->at[s->n++] = (size_t)(p - s->text);
    p += size;
  }
}

/* Where c[k] is in the file, lines counted as clang counts them. */
static lx_srcloc place(const lx_scan *s, size_t k) {
  size_t offset = k < s->n ? s->at[k] : s->length, start = 0;
  int line = 1;
  for (size_t o = 0; o < offset;) {
    char ch = s->text[o++];
    if (ch == '\r' && o < s->length && s->text[o] == '\n') o++;
    if (ch == '\n' || ch == '\r') {
      line++;
      start = o;
    }
  }
  return (lx_srcloc){s->path, line, (int)(offset - start + 1), NULL};
}

static bool refuse(const lx_scan *s, size_t k, const char *message) {
  lx_error(place(s, k), "%s", message);
  return false;
}

/* c[k], or a line end past the text's end. */
static char at(const lx_scan *s, size_t k) { return k < s->n ? s->c[k] : '\n'; }

/* clang ignores a NUL (with a warning) and takes some Unicode spaces for
 * blanks; taking every non-ASCII byte for one can only find more directives
 * and cut identifiers shorter, which refuses more, never less. */
static bool blank(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\f' || ch == '\v' || ch == '\0' || (unsigned char)ch >= 0x80;
}

static bool identifier_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
         ch == '$';
}

/* The size of a '#' or its digraph "%:" at c[k], or 0. */
static size_t hash_at(const lx_scan *s, size_t k) {
  return at(s, k) == '#' ? 1 : at(s, k) == '%' && at(s, k + 1) == ':' ? 2 : 0;
}

/* Skips the comment at s->i, if one starts there. *newline: a block comment
 * spanned lines. */
static bool skip_comment(lx_scan *s, bool *newline) {
  if (at(s, s->i) != '/' || (at(s, s->i + 1) != '/' && at(s, s->i + 1) != '*')) return false;
  if (at(s, s->i + 1) == '/') {
    while (s->i < s->n && s->c[s->i] != '\n')
      s->i++;
    return true;
  }
  for (s->i += 2; s->i < s->n && !(s->c[s->i] == '*' && at(s, s->i + 1) == '/'); s->i++)
    *newline |= s->c[s->i] == '\n';
  s->i = s->i + 2 < s->n ? s->i + 2 : s->n;
  return true;
}

/* Skips blanks and comments, not the line end: a directive ends there. */
static void skip_blanks(lx_scan *s) {
  bool newline = false;
  for (;;) {
    if (s->i < s->n && blank(s->c[s->i]))
      s->i++;
    else if (!skip_comment(s, &newline))
      return;
  }
}

/* Skips a string or character literal, or a quoted #include name, as clang
 * lexes it: to the closing quote, a backslash escaping the next character
 * (so "a\" x" is one name), or to the line end if unterminated. True if closed. */
static bool skip_literal(lx_scan *s) {
  char quote = s->c[s->i++];
  while (s->i < s->n && s->c[s->i] != '\n') {
    char ch = s->c[s->i++];
    if (ch == quote) return true;
    if (ch == '\\' && at(s, s->i) != '\n') s->i++;
  }
  return false;
}

/* The identifier at s->i, skipped; its length in *n, 0 if none starts there. */
static const char *identifier(lx_scan *s, size_t *n) {
  size_t start = s->i;
  if (s->i < s->n && identifier_char(s->c[s->i]) && !(s->c[s->i] >= '0' && s->c[s->i] <= '9'))
    while (s->i < s->n && identifier_char(s->c[s->i]))
      s->i++;
  *n = s->i - start;
  return s->c + start;
}

static bool is(const char *word, const char *p, size_t n) { return strlen(word) == n && !memcmp(word, p, n); }

/* Names that make clang run a pragma or look a file up (which opens it: a
 * FIFO hangs) wherever they are expanded, without a directive. __pragma is
 * the Microsoft spelling, __has_embed that of newer clangs. */
static const char *const refused_names[] = {"_Pragma", "__pragma", "__has_include", "__has_include_next",
                                            "__has_embed"};

/* One token that does not start a directive: refused if it is one of
 * refused_names, token pasting (which could form one) or a universal
 * character name (which could spell one). Literals are skipped whole. */
static bool check_token(lx_scan *s) {
  size_t start = s->i, n;
  char ch = s->c[s->i];
  if (ch == '"' || ch == '\'') {
    skip_literal(s);
    return true;
  }
  const char *name = identifier(s, &n);
  for (size_t k = 0; n && k < sizeof refused_names / sizeof refused_names[0]; k++)
    if (is(refused_names[k], name, n)) {
      lx_error(place(s, start), "'%s' is not allowed in a model file: it can make clang read a file or crash",
               refused_names[k]);
      return false;
    }
  size_t hash = hash_at(s, s->i);
  if (!n && hash && hash_at(s, s->i + hash))
    return refuse(s, start, "token pasting (##) is not allowed in a model file");
  if (ch == '\\') return refuse(s, start, "a universal character name (\\u) is not allowed in a model file");
  if (!n) s->i += hash ? hash : 1;
  return true;
}

/* The operand of #include: a quoted name, vetted by on_include, or <lynx.h>. */
static bool check_include(lx_scan *s, size_t hash, lx_include_fn on_include, void *context) {
  skip_blanks(s);
  size_t start = s->i;
  if (at(s, s->i) == '<') {
    while (s->i < s->n && s->c[s->i] != '>' && s->c[s->i] != '\n')
      s->i++;
    bool prelude = at(s, s->i) == '>' && is("<lynx.h", s->c + start, s->i - start);
    if (prelude) {
      s->i++;
      return true;
    }
    return refuse(s, hash,
                  "#include <...> may name only <lynx.h>; include another file as #include \"name\"");
  }
  if (at(s, s->i) == '"' && skip_literal(s))
    return on_include(context, s->c + start + 1, s->i - start - 2, place(s, hash));
  return refuse(s, hash, "#include takes a file name in quotes or <lynx.h>, not a macro or other tokens");
}

/* #pragma: only those that read no file and cannot crash clang (#pragma
 * clang __debug crash, llvm_fatal_error, ... do). The pragma's operands are
 * left to the token scan. */
static bool check_pragma(lx_scan *s, size_t hash) {
  size_t after = s->i, n, m;
  skip_blanks(s);
  const char *space = identifier(s, &n);
  skip_blanks(s);
  const char *name = identifier(s, &m);
  s->i = after;
  if (is("once", space, n) || is("message", space, n) || is("STDC", space, n) ||
      ((is("GCC", space, n) || is("clang", space, n)) && is("diagnostic", name, m)))
    return true;
  return refuse(s, hash,
                "this #pragma is not allowed in a model file; only once, message, STDC and (GCC|clang) "
                "diagnostic are");
}

/* Directives that read no file and run nothing. */
static const char *const plain_directives[] = {"define", "undef",   "if",       "ifdef", "ifndef",
                                               "elif",   "elifdef", "elifndef", "else",  "endif",
                                               "line",   "error",   "warning"};

/* The directive whose '#' is at s->i; its operands, except those of
 * #include, are left to the token scan. */
static bool check_directive(lx_scan *s, lx_include_fn on_include, void *context) {
  size_t hash = s->i, n;
  s->i += hash_at(s, s->i);
  skip_blanks(s);
  const char *name = identifier(s, &n);
  if (!n && at(s, s->i) == '\n') return true; /* the null directive */
  if (is("include", name, n)) return check_include(s, hash, on_include, context);
  if (is("pragma", name, n)) return check_pragma(s, hash);
  for (size_t k = 0; k < sizeof plain_directives / sizeof plain_directives[0]; k++)
    if (is(plain_directives[k], name, n)) return true;
  if (is("import", name, n) || is("include_next", name, n) || is("embed", name, n)) {
    lx_error(
        place(s, hash),
        "#%.*s is not allowed in a model file; only #include \"name\" and #include <lynx.h> may read a file",
        (int)n, name);
    return false;
  }
  if (!n) return refuse(s, hash, "a directive in a model file must be named after its '#'");
  lx_error(place(s, hash), "#%.*s is not a directive a model file may use", (int)n, name);
  return false;
}

/* Every line: a directive where '#' (or "%:") is the first token of a line
 * (also after a block comment that spans lines, which clang would not take
 * for a directive: refusing more is safe), any other token checked alone. */
static bool check_lines(lx_scan *s, lx_include_fn on_include, void *context) {
  bool line_start = true;
  while (s->i < s->n) {
    char ch = s->c[s->i];
    bool newline = false;
    if (ch == '\n' || blank(ch)) {
      line_start |= ch == '\n';
      s->i++;
    } else if (skip_comment(s, &newline)) {
      line_start |= newline;
    } else if (line_start && hash_at(s, s->i) && !hash_at(s, s->i + hash_at(s, s->i))) {
      line_start = false;
      if (!check_directive(s, on_include, context)) return false;
    } else {
      line_start = false;
      if (!check_token(s)) return false;
    }
  }
  return true;
}

bool lx_check_directives(const char *path, const char *text, size_t length, lx_include_fn on_include,
                         void *context) {
  lx_scan s = {.path = path, .text = text, .length = length};
  translate(&s);
  bool ok = check_lines(&s, on_include, context);
  free(s.c);
  free(s.at);
  return ok;
}
