/* escape.c — writing user strings into the languages lynxgen emits (escape.h). */
#include "escape.h"

#include "alloc.h"

#include <string.h>

static int printable(unsigned char ch) { return ch >= 0x20 && ch < 0x7f; }

/* The length of the well-formed UTF-8 sequence (RFC 3629) at s, or 0. */
static int utf8_length(const unsigned char *s) {
  /* lead bytes: C2-DF two, E0-EF three, F0-F4 four; C0, C1 and F5-FF never */
  int len = s[0] >= 0xf0 && s[0] <= 0xf4  ? 4
            : s[0] >= 0xe0 && s[0] < 0xf0 ? 3
            : s[0] >= 0xc2 && s[0] < 0xe0 ? 2
                                          : 0;
  for (int i = 1; i < len; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if (len == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0)))
    return 0; /* overlong, surrogate */
  if (len == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90)))
    return 0; /* overlong, > U+10FFFF */
  return len;
}

/* U+FFFE or U+FFFF (EF BF BE, EF BF BF): well-formed UTF-8, but not
 * characters XML 1.0 allows (its Char production skips them, as it skips the
 * surrogates utf8_length already refuses), so a parser rejects the file. */
static int xml_noncharacter(const unsigned char *s) { return s[0] == 0xef && s[1] == 0xbf && s[2] >= 0xbe; }

/* Text for XML, which must be UTF-8 of characters XML allows: such a
 * sequence is copied; a stray byte, and a character XML forbids, becomes
 * U+FFFD. Returns the bytes consumed. */
static int put_utf8(FILE *out, const unsigned char *s) {
  int len = utf8_length(s);
  if (len == 0 || (len == 3 && xml_noncharacter(s))) {
    fputs("\xef\xbf\xbd", out);
    return len ? len : 1;
  }
  fwrite(s, 1, (size_t)len, out);
  return len;
}

void lx_put_c_string(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\' || ch == '?')
      fprintf(out, "\\%c", ch);
    else if (printable(ch))
      fputc(ch, out);
    else /* always three digits, so that a following digit is not absorbed */
      fprintf(out, "\\%03o", ch);
  }
  fputc('"', out);
}

/* s into buf: printable ASCII as is, except the characters of `also`, which
 * like every other byte become \xNN; lx_text and lx_line_text. */
static const char *escaped_text(const char *s, const char *also, char *buf, size_t size) {
  size_t n = 0;
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    char piece[5];
    if (printable(ch) && !strchr(also, ch))
      snprintf(piece, sizeof piece, "%c", ch);
    else
      snprintf(piece, sizeof piece, "\\x%02x", ch);
    size_t len = strlen(piece);
    if (n + len + 1 > size) break;
    memcpy(buf + n, piece, len);
    n += len;
  }
  if (size) buf[n] = '\0';
  return buf;
}

const char *lx_text(const char *s, char *buf, size_t size) { return escaped_text(s, "*?\\", buf, size); }

const char *lx_line_text(const char *s, char *buf, size_t size) { return escaped_text(s, "", buf, size); }

void lx_put_xml_text(FILE *out, const char *s) {
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch >= 0x80) {
      s += put_utf8(out, (const unsigned char *)s) - 1;
      continue;
    }
    switch (ch) {
    case '&': fputs("&amp;", out); break;
    case '<': fputs("&lt;", out); break;
    case '>': fputs("&gt;", out); break;
    case '"': fputs("&quot;", out); break;
    case '\'': fputs("&apos;", out); break;
    default:
      if (ch < 0x20 || ch == 0x7f)
        fputs("\xef\xbf\xbd", out);
      else
        fputc(ch, out);
    }
  }
}

char *lx_utf8_text(const char *s) {
  char *text = lx_malloc(3 * strlen(s) + 1), *w = text; /* a stray byte grows to three */
  while (*s) {
    const unsigned char *u = (const unsigned char *)s;
    int len = *u < 0x80 ? 1 : utf8_length(u);
    if (len == 0) {
      memcpy(w, "\xef\xbf\xbd", 3), w += 3, s++;
      continue;
    }
    memcpy(w, s, (size_t)len), w += len, s += len;
  }
  *w = '\0';
  return text;
}
