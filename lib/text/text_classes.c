/* text_classes.c - the character classes of text_unicode.h over its generated tables
 * (text_unicode.c) and the UTF-8 decoder the text front end reads with. Below normalize.c and
 * split.c, which both use them. */
#include "text/text_unicode.h"

static int in_ranges(const cosy_tu_range *r, int n, uint32_t cp) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (cp < r[mid].lo) hi = mid - 1;
    else if (cp > r[mid].hi) lo = mid + 1;
    else return 1;
  }
  return 0;
}

int cosy_tu_is_space(uint32_t cp) {
  if (cp < 128) return cp == ' ' || (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x1f);
  return in_ranges(cosy_tu_space, cosy_tu_n_space, cp);
}
int cosy_tu_is_digit(uint32_t cp) {
  if (cp < 128) return cp >= '0' && cp <= '9';
  return in_ranges(cosy_tu_digit, cosy_tu_n_digit, cp);
}
int cosy_tu_is_punct(uint32_t cp) { return in_ranges(cosy_tu_punct, cosy_tu_n_punct, cp); }
int cosy_tu_decimal(uint32_t cp) {
  if (cp < 128) return cp >= '0' && cp <= '9' ? (int)(cp - '0') : -1;
  int lo = 0, hi = cosy_tu_n_decimal0 - 1, best = -1;
  while (lo <= hi) { /* last run start <= cp */
    int mid = (lo + hi) / 2;
    if (cosy_tu_decimal0[mid] <= cp) {
      best = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (best < 0 || cp - cosy_tu_decimal0[best] > 9) return -1;
  return (int)(cp - cosy_tu_decimal0[best]);
}

int cosy_tu_decode(const char *s, size_t n, uint32_t *cp) {
  const uint8_t *u = (const uint8_t *)s;
  if (u[0] < 0x80 || n < 2) {
    *cp = u[0];
    return 1;
  }
  if (u[0] < 0xE0) {
    *cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    return 2;
  }
  if (u[0] < 0xF0 || n < 4) {
    if (n < 3) {
      *cp = u[0];
      return 1;
    }
    *cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    return 3;
  }
  *cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
        ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
  return 4;
}
