/* sp_text.c -- Growable buffers, JSON escaping, number formatting.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

SP_PRIVATE int buf_reserve(sp_buf *b, size_t extra) {
  if (b->n + extra <= b->cap) return 1;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->n + extra) cap *= 2;
  char *q = realloc(b->p, cap);
  if (!q) {
    b->failed = 1;
    return 0;
  }
  b->p = q;
  b->cap = cap;
  return 1;
}

SP_PRIVATE void buf_put(sp_buf *b, const char *s, size_t n) {
  if (!buf_reserve(b, n)) return;
  memcpy(b->p + b->n, s, n);
  b->n += n;
}

static const char k_digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

SP_PRIVATE char *text_put_u64(char *o, uint64_t v) {
  if (v < 10) { /* most sizes and ids are short: skip the general loop */
    *o = (char)('0' + v);
    return o + 1;
  }
  if (v < 100) {
    memcpy(o, k_digit_pairs + 2 * v, 2);
    return o + 2;
  }
  char tmp[20];
  char *e = tmp + sizeof tmp, *q = e;
  while (v >= 100) {
    const char *d = k_digit_pairs + 2 * (v % 100);
    v /= 100;
    *--q = d[1];
    *--q = d[0];
  }
  if (v >= 10) {
    const char *d = k_digit_pairs + 2 * v;
    *--q = d[1];
    *--q = d[0];
  } else {
    *--q = (char)('0' + v);
  }
  size_t n = (size_t)(e - q);
  memcpy(o, q, n);
  return o + n;
}

SP_PRIVATE char *text_put_i64(char *o, int64_t v) {
  if (v < 0) {
    *o++ = '-';
    return text_put_u64(o, (uint64_t)0 - (uint64_t)v);
  }
  return text_put_u64(o, (uint64_t)v);
}

SP_PRIVATE char *text_put_us(char *o, int64_t ns) {
  if (ns < 0) ns = 0; /* a time is never negative: the clock is monotonic */
  o = text_put_u64(o, (uint64_t)ns / 1000);
  unsigned frac = (unsigned)((uint64_t)ns % 1000);
  *o++ = '.';
  *o++ = (char)('0' + frac / 100);
  *o++ = (char)('0' + frac / 10 % 10);
  *o++ = (char)('0' + frac % 10);
  return o;
}

SP_PRIVATE size_t text_fmt_i64(char *out, int64_t v) { return (size_t)(text_put_i64(out, v) - out); }

SP_PRIVATE void buf_i64(sp_buf *b, int64_t v) {
  if (!buf_reserve(b, 24)) return;
  b->n += text_fmt_i64(b->p + b->n, v);
}

/* At s, left > 0 bytes: the length of a valid UTF-8 sequence (1..4) as a
 * positive number, or of the maximal subpart of an invalid one as a negative
 * number (-1..-3): the longest prefix of a well-formed sequence, which the
 * Unicode Standard (ch. 3, "U+FFFD Substitution of Maximal Subparts")
 * replaces by one U+FFFD, as Python's decode("utf-8", "replace") does.
 * Surrogates (ED A0..BF ..) are not well-formed UTF-8. */
static int utf8_seq(const unsigned char *s, size_t left) {
  unsigned c = s[0];
  int n;
  unsigned lo = 0x80, hi = 0xBF; /* the second byte's range (Table 3-7) */
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return -1;
  for (int i = 1; i < n; i++) {
    if ((size_t)i >= left) return -i;
    unsigned b = s[i];
    if (i == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return -i;
  }
  return n;
}

/* The one JSON string escaper, for records and summaries alike: writes the
 * literal (quotes included) through put(sink, bytes, n). It writes only
 * valid Unicode, so that strict JSON readers take every line and the
 * summary: invalid UTF-8 (a C++ message's stray bytes, a Python string's
 * lone surrogates) becomes U+FFFD per maximal subpart, never a \udXXX
 * escape. Async-signal-safe (the dying-process summary uses it). */

SP_PRIVATE void text_json_str(put_fn put, void *sink, const char *s, size_t len) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *u = (const unsigned char *)s;
  put(sink, "\"", 1);
  size_t i = 0;
  while (i < len) {
    unsigned char c = u[i];
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      size_t j = i + 1;
      while (j < len && u[j] >= 0x20 && u[j] != '"' && u[j] != '\\' && u[j] < 0x80) j++;
      put(sink, s + i, j - i);
      i = j;
      continue;
    }
    if (c >= 0x80) {
      int k = utf8_seq(u + i, len - i);
      if (k > 0) {
        put(sink, s + i, (size_t)k);
        i += (size_t)k;
      } else {
        put(sink, "\\ufffd", 6);
        i += (size_t)-k;
      }
      continue;
    }
    char esc[6] = {'\\', 0, 0, 0, 0, 0};
    size_t en = 2;
    switch (c) {
      case '"': esc[1] = '"'; break;
      case '\\': esc[1] = '\\'; break;
      case '\n': esc[1] = 'n'; break;
      case '\r': esc[1] = 'r'; break;
      case '\t': esc[1] = 't'; break;
      case '\b': esc[1] = 'b'; break;
      case '\f': esc[1] = 'f'; break;
      default:
        esc[1] = 'u';
        esc[2] = '0';
        esc[3] = '0';
        esc[4] = hex[c >> 4];
        esc[5] = hex[c & 15];
        en = 6;
    }
    put(sink, esc, en);
    i++;
  }
  put(sink, "\"", 1);
}

SP_PRIVATE void buf_sink(void *b, const char *s, size_t n) { buf_put((sp_buf *)b, s, n); }

SP_PRIVATE void buf_json_str(sp_buf *b, const char *s, size_t len) {
  if (!buf_reserve(b, len + 2)) return;
  text_json_str(buf_sink, b, s, len);
}

SP_PRIVATE char *buf_dup(const sp_buf *b) {
  char *s = malloc(b->n + 1);
  if (!s) return NULL;
  memcpy(s, b->p, b->n);
  s[b->n] = 0;
  return s;
}

/* Writes one message line to stderr with write(2): usable anywhere. */
SP_PRIVATE void text_say(const char *a, const char *b, const char *c) {
  const char *parts[4] = {"sgl_shapeprof: ", a, b, c};
  for (int i = 0; i < 4; i++)
    if (parts[i]) {
      ssize_t r = write(2, parts[i], strlen(parts[i]));
      (void)r;
    }
  ssize_t r = write(2, "\n", 1);
  (void)r;
}

SP_PRIVATE char *text_strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}
