/*
 * utf8.h — UTF-8 checks for text that crosses the wire: whether a buffer is
 * valid UTF-8 (strict: no overlong forms, no surrogates, nothing beyond
 * U+10FFFF), and making a C string safe to put into a JSON reply after
 * truncation may have cut a character in two. Reentrant.
 */
#ifndef FOX_UTF8_H
#define FOX_UTF8_H

#include <stddef.h>

/* 1 when the len bytes at s are valid UTF-8, else 0 and *bad (may be NULL) the first bad byte's offset. */
int fox_utf8_valid(const char *s, size_t len, size_t *bad);

/* In place: replace every byte of an invalid or cut sequence in s by '?'. */
void fox_utf8_sanitize(char *s);

#endif
