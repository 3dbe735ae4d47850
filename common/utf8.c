/* utf8.c — strict UTF-8 validation and repair (see utf8.h). */
#include "common/utf8.h"

/* Bytes in the valid sequence starting at s (at most left bytes), or 0. */
static size_t
seq_len(const unsigned char *s, size_t left)
{
    unsigned c = s[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        if (c == 0xed)
            hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        if (c == 0xf4)
            hi = 0x8f; /* beyond U+10FFFF */
    } else {
        return 0;
    }
    if (left < n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

int
fox_utf8_valid(const char *s, size_t len, size_t *bad)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t n = seq_len(p + i, len - i);
        if (n == 0) {
            if (bad)
                *bad = i;
            return 0;
        }
        i += n;
    }
    return 1;
}

void
fox_utf8_sanitize(char *s)
{
    unsigned char *p = (unsigned char *)s;
    size_t len = 0;
    while (p[len])
        len++;
    for (size_t i = 0; i < len;) {
        size_t n = seq_len(p + i, len - i);
        if (n == 0) {
            p[i++] = '?';
            continue;
        }
        i += n;
    }
}
