/* constant.c — the value of a constant expression of a model file, checked.
 *
 * clang_Cursor_Evaluate folds an expression as C defines it: unsigned
 * arithmetic wraps modulo 2^N without a word, and clang's -Winteger-overflow
 * (an error in the front end) covers signed arithmetic only where clang
 * evaluates it (not in `x = linear(x, 65536 * 65536 + 64)`). A model file
 * means numbers: `.seq_len = 0xFFFFFFFFFFFFFFFFu + 65` must not plan for a
 * sequence of 64. So every integer operator of the expression is checked
 * here for a wrap, and a double must be finite (0.0 / 0.0 and
 * __builtin_inf() fold to NaN and inf). */
#include "frontend/constant.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  CXCursor items[2];
  int count;
} operands;

static enum CXChildVisitResult collect_operand(CXCursor c, CXCursor parent, CXClientData data) {
  (void)parent;
  operands *ops = data;
  if (ops->count < 2) ops->items[ops->count] = c;
  ops->count++;
  return CXChildVisit_Continue;
}

static bool is_unsigned_kind(enum CXTypeKind k) {
  return k == CXType_Bool || k == CXType_Char_U || k == CXType_UChar || k == CXType_UShort ||
         k == CXType_UInt || k == CXType_ULong || k == CXType_ULongLong || k == CXType_UInt128;
}

/* An integer in the type clang gave it: value bits and signedness. */
typedef struct {
  bool is_unsigned;
  int bits;
  unsigned long long u; /* the value, when unsigned */
  long long s;          /* the value, when signed */
} integer;

static bool integer_type(CXCursor expr, integer *out) {
  CXType t = clang_getCanonicalType(clang_getCursorType(expr));
  if (t.kind == CXType_Enum)
    t = clang_getCanonicalType(clang_getEnumDeclIntegerType(clang_getTypeDeclaration(t)));
  if (t.kind < CXType_Bool || t.kind > CXType_Int128) return false;
  long long bytes = clang_Type_getSizeOf(t);
  if (bytes <= 0) return false;
  out->is_unsigned = is_unsigned_kind(t.kind);
  out->bits = (int)(8 * bytes);
  return true;
}

/* The folded value of an integer expression of at most 64 bits. */
static bool integer_value(CXCursor expr, integer *out) {
  if (!integer_type(expr, out) || out->bits > 64) return false;
  CXEvalResult r = clang_Cursor_Evaluate(expr);
  bool ok = r && clang_EvalResult_getKind(r) == CXEval_Int;
  if (ok && out->is_unsigned)
    out->u = clang_EvalResult_isUnsignedInt(r) ? clang_EvalResult_getAsUnsigned(r)
                                               : (unsigned long long)clang_EvalResult_getAsLongLong(r);
  else if (ok)
    out->s = clang_EvalResult_getAsLongLong(r);
  if (r) clang_EvalResult_dispose(r);
  return ok;
}

static unsigned long long mask_of(int bits) { return bits >= 64 ? ULLONG_MAX : (1ULL << bits) - 1; }

static bool fits(const integer *type, long long v) {
  int bits = type->bits;
  return bits >= 64 || (v >= -(1LL << (bits - 1)) && v < 1LL << (bits - 1));
}

/* What an operator makes of a and b in the operation's type. */
typedef struct {
  const char *op;
  bool defined;             /* C gives it a value */
  bool wraps;               /* the exact result does not fit the type */
  unsigned long long value; /* as `type`'s bits, two's complement */
} outcome;

enum { N_OPERATORS = 11 };

static void unsigned_outcomes(unsigned long long a, unsigned long long b, int bits,
                              outcome out[N_OPERATORS]) {
  unsigned long long mask = mask_of(bits), sum, product;
  bool sum_over = __builtin_add_overflow(a, b, &sum) || sum > mask;
  bool product_over = __builtin_mul_overflow(a, b, &product) || product > mask;
  bool shift = b < (unsigned long long)bits;
  out[0] = (outcome){"+", true, sum_over, sum & mask};
  out[1] = (outcome){"-", true, a < b, (a - b) & mask};
  out[2] = (outcome){"*", true, product_over, product & mask};
  out[3] = (outcome){"<<", shift, shift && a > mask >> b, shift ? (a << b) & mask : 0};
  out[4] = (outcome){"/", b != 0, false, b ? a / b : 0};
  out[5] = (outcome){"%", b != 0, false, b ? a % b : 0};
  out[6] = (outcome){">>", shift, false, shift ? a >> b : 0};
  out[7] = (outcome){"&", true, false, a & b};
  out[8] = (outcome){"|", true, false, a | b};
  out[9] = (outcome){"^", true, false, a ^ b};
  out[10] = (outcome){",", true, false, b};
}

static void signed_outcomes(const integer *type, long long a, long long b, outcome out[N_OPERATORS]) {
  unsigned long long mask = mask_of(type->bits);
  long long sum, difference, product,
      most_negative = type->bits >= 64 ? LLONG_MIN : -(1LL << (type->bits - 1));
  bool sum_over = __builtin_add_overflow(a, b, &sum) || !fits(type, sum);
  bool difference_over = __builtin_sub_overflow(a, b, &difference) || !fits(type, difference);
  bool product_over = __builtin_mul_overflow(a, b, &product) || !fits(type, product);
  bool divides = b != 0, quotient_over = a == most_negative && b == -1;
  bool shift = b >= 0 && b < type->bits && a >= 0;
  out[0] = (outcome){"+", true, sum_over, (unsigned long long)sum & mask};
  out[1] = (outcome){"-", true, difference_over, (unsigned long long)difference & mask};
  out[2] = (outcome){"*", true, product_over, (unsigned long long)product & mask};
  out[3] = (outcome){"<<", shift, shift && a > (long long)(mask >> 1 >> b),
                     shift ? ((unsigned long long)a << b) & mask : 0};
  out[4] = (outcome){"/", divides, quotient_over,
                     divides && !quotient_over ? (unsigned long long)(a / b) & mask
                                               : (unsigned long long)a & mask};
  out[5] = (outcome){"%", divides, quotient_over,
                     divides && !quotient_over ? (unsigned long long)(a % b) & mask : 0};
  out[6] = (outcome){">>", shift, false, shift ? (unsigned long long)(a >> b) & mask : 0};
  out[7] = (outcome){"&", true, false, (unsigned long long)(a & b) & mask};
  out[8] = (outcome){"|", true, false, (unsigned long long)(a | b) & mask};
  out[9] = (outcome){"^", true, false, (unsigned long long)(a ^ b) & mask};
  out[10] = (outcome){",", true, false, (unsigned long long)b & mask};
}

typedef struct {
  CXFile file;
  unsigned offset;
} spelled_at;

/* The first token of an expression, and where it is spelled: tokenizing at
 * a location inside a macro lexes the macro's definition, so this is the
 * token's place in the text, macro or not. */
static bool first_token_of(CXTranslationUnit tu, CXCursor expr, spelled_at *out, char *spelling,
                           size_t size) {
  CXSourceLocation at = clang_getRangeStart(clang_getCursorExtent(expr));
  CXToken *tokens;
  unsigned n;
  clang_tokenize(tu, clang_getRange(at, at), &tokens, &n);
  out->file = NULL;
  if (n > 0) {
    clang_getFileLocation(clang_getTokenLocation(tu, tokens[0]), &out->file, NULL, NULL, &out->offset);
    CXString s = clang_getTokenSpelling(tu, tokens[0]);
    snprintf(spelling, size, "%s", clang_getCString(s));
    clang_disposeString(s);
  }
  clang_disposeTokens(tu, tokens, n);
  return n > 0 && out->file;
}

/* The last token of the text between two places of one file. */
static void token_before(CXTranslationUnit tu, spelled_at from, spelled_at to, char *dst, size_t size) {
  enum { NEARBY = 4096 }; /* bytes; operands written further apart are left to the values */
  if (!from.file || !to.file || !clang_File_isEqual(from.file, to.file) || from.offset >= to.offset ||
      to.offset - from.offset > NEARBY)
    return;
  CXSourceRange between = clang_getRange(clang_getLocationForOffset(tu, from.file, from.offset),
                                         clang_getLocationForOffset(tu, to.file, to.offset));
  CXToken *tokens;
  unsigned n;
  clang_tokenize(tu, between, &tokens, &n);
  for (unsigned i = 0; i < n; i++) {
    unsigned offset;
    clang_getFileLocation(clang_getTokenLocation(tu, tokens[i]), NULL, NULL, NULL, &offset);
    if (offset >= to.offset) break;
    CXString s = clang_getTokenSpelling(tu, tokens[i]);
    snprintf(dst, size, "%s", clang_getCString(s));
    clang_disposeString(s);
  }
  clang_disposeTokens(tu, tokens, n);
}

/* Where an expression starts in the file that holds it (for an expression
 * inside a macro: where the macro is called). */
static spelled_at start_in_file(CXCursor expr) {
  spelled_at at = {NULL, 0};
  clang_getFileLocation(clang_getRangeStart(clang_getCursorExtent(expr)), &at.file, NULL, NULL, &at.offset);
  return at;
}

/* The token just before the right operand: the operator, if the right operand
 * is written right after it. libclang (16) does not tell a BinaryOperator's
 * operator otherwise. Looked up where the operands are spelled (`2 * 3` in a
 * macro's definition), else where they stand in the file (`W * W`, W a
 * macro); `SQ * SQ` inside another macro's definition is left to the values. */
static void operator_before(CXCursor lhs, CXCursor rhs, char *dst, size_t size) {
  CXTranslationUnit tu = clang_Cursor_getTranslationUnit(rhs);
  spelled_at l, r;
  char first[8];
  dst[0] = '\0';
  if (first_token_of(tu, lhs, &l, first, sizeof first) && first_token_of(tu, rhs, &r, first, sizeof first))
    token_before(tu, l, r, dst, size);
  if (!dst[0]) token_before(tu, start_in_file(lhs), start_in_file(rhs), dst, size);
}

/* The bits of a value (as the operation's type has them). */
static unsigned long long bits_of(const integer *v, int bits) {
  return (v->is_unsigned ? v->u : (unsigned long long)v->s) & mask_of(bits);
}

/* The operator that wrapped a op b into r, or NULL. The operator is the token
 * before b where it is one and gives r; otherwise it is told by what it made:
 * a wrap if some operator that wraps gives r and none that does not (where
 * both could, e.g. x - 2^63 and x + 2^63 in 64 bits, it passes: never a false
 * alarm). */
static const char *wrapping_operator(const char *spelled, const integer *a, const integer *b,
                                     const integer *r) {
  outcome out[N_OPERATORS];
  if (r->is_unsigned)
    unsigned_outcomes(a->is_unsigned ? a->u : (unsigned long long)a->s,
                      b->is_unsigned ? b->u
                      : b->s < 0     ? ULLONG_MAX
                                     : (unsigned long long)b->s,
                      r->bits, out);
  else
    signed_outcomes(r, a->is_unsigned ? (long long)a->u : a->s, b->is_unsigned ? (long long)b->u : b->s, out);
  unsigned long long result = bits_of(r, r->bits);
  for (int i = 0; i < N_OPERATORS; i++)
    if (!strcmp(out[i].op, spelled) && out[i].defined && out[i].value == result)
      return out[i].wraps ? out[i].op : NULL;
  const char *wrapped = NULL;
  for (int i = 0; i < N_OPERATORS; i++) {
    if (!out[i].defined || out[i].value != result) continue;
    if (!out[i].wraps) return NULL;
    if (!wrapped) wrapped = out[i].op;
  }
  return wrapped;
}

/* Unary minus (a unary operator's first token is its operator) wraps for
 * any non-zero unsigned value and for the most negative signed one. */
static bool negation_wraps(CXCursor minus, const integer *v, const integer *r) {
  spelled_at at;
  char op[8];
  unsigned long long x = bits_of(v, r->bits);
  if (!first_token_of(clang_Cursor_getTranslationUnit(minus), minus, &at, op, sizeof op) || strcmp(op, "-"))
    return false;
  return r->is_unsigned ? x != 0 : x == 1ULL << (r->bits - 1);
}

static void print_integer(char *dst, size_t size, const integer *v) {
  if (v->is_unsigned)
    snprintf(dst, size, "%llu", v->u);
  else
    snprintf(dst, size, "%lld", v->s);
}

/* One operator expression: fills `why` and returns false if it wrapped. */
static bool operation_fits(CXCursor e, char *why, size_t size) {
  enum CXCursorKind kind = clang_getCursorKind(e);
  integer r, a = {0}, b = {0};
  if ((kind != CXCursor_BinaryOperator && kind != CXCursor_UnaryOperator) || !integer_value(e, &r))
    return true;
  operands ops = {.count = 0};
  clang_visitChildren(e, collect_operand, &ops);
  bool unary = kind == CXCursor_UnaryOperator;
  const char *op = NULL;
  if (unary && ops.count == 1 && integer_value(ops.items[0], &b) && negation_wraps(e, &b, &r)) {
    op = "-";
  } else if (!unary && ops.count == 2 && integer_value(ops.items[0], &a) && integer_value(ops.items[1], &b)) {
    char spelled[8];
    operator_before(ops.items[0], ops.items[1], spelled, sizeof spelled);
    op = wrapping_operator(spelled, &a, &b, &r);
  }
  if (!op) return true;
  char lhs[32] = "", rhs[32];
  if (!unary) print_integer(lhs, sizeof lhs, &a);
  print_integer(rhs, sizeof rhs, &b);
  CXString type = clang_getTypeSpelling(clang_getCanonicalType(clang_getCursorType(e)));
  snprintf(why, size, "%s%s%s%s%s does not fit in '%s'", lhs, unary ? "" : " ", op, unary ? "" : " ", rhs,
           clang_getCString(type));
  clang_disposeString(type);
  return false;
}

typedef struct {
  lx_constant *result;
  bool wrapped;
} wrap_search;

/* clang_visitChildren walks expressions with its own work list, so a deeply
 * nested expression costs no stack here. The last wrap found is the deepest
 * of its branch: the first step that wrapped, not one that only carried on
 * a wrapped value. */
static enum CXChildVisitResult find_wrap(CXCursor c, CXCursor parent, CXClientData data) {
  (void)parent;
  wrap_search *search = data;
  char why[sizeof search->result->why];
  if (!operation_fits(c, why, sizeof why)) {
    memcpy(search->result->why, why, sizeof why);
    search->result->at = c;
    search->wrapped = true;
  }
  return CXChildVisit_Recurse;
}

static bool wraps(CXCursor expr, lx_constant *result) {
  wrap_search search = {result, false};
  find_wrap(expr, clang_getNullCursor(), &search);
  clang_visitChildren(expr, find_wrap, &search);
  return search.wrapped;
}

static void read_integer(CXCursor expr, CXEvalResult r, lx_constant *out) {
  integer type;
  if (!integer_type(expr, &type) || type.bits > 64) {
    out->kind = LX_CONSTANT_HUGE;
    snprintf(out->why, sizeof out->why, "wider than 64 bits");
    out->real = NAN;
  } else if (clang_EvalResult_isUnsignedInt(r) && clang_EvalResult_getAsUnsigned(r) > LLONG_MAX) {
    out->kind = LX_CONSTANT_HUGE;
    out->real = (double)clang_EvalResult_getAsUnsigned(r);
    snprintf(out->why, sizeof out->why, "%llu does not fit in a long long",
             clang_EvalResult_getAsUnsigned(r));
  } else {
    out->kind = LX_CONSTANT_INTEGER;
    out->integer = clang_EvalResult_isUnsignedInt(r) ? (long long)clang_EvalResult_getAsUnsigned(r)
                                                     : clang_EvalResult_getAsLongLong(r);
    out->real = (double)out->integer;
  }
}

lx_constant lx_evaluate_constant(CXCursor expr) {
  lx_constant result = {.kind = LX_CONSTANT_NONE, .at = expr};
  CXEvalResult r = clang_Cursor_Evaluate(expr);
  CXEvalResultKind kind = r ? clang_EvalResult_getKind(r) : CXEval_UnExposed;
  if (kind == CXEval_Int) {
    read_integer(expr, r, &result);
  } else if (kind == CXEval_Float) {
    result.real = clang_EvalResult_getAsDouble(r);
    result.kind = isfinite(result.real) ? LX_CONSTANT_REAL : LX_CONSTANT_NOT_FINITE;
  }
  if (r) clang_EvalResult_dispose(r);
  if (result.kind != LX_CONSTANT_NONE && wraps(expr, &result)) result.kind = LX_CONSTANT_WRAPS;
  return result;
}
