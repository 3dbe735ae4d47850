/*
 * hash.h — FNV-1a 64, the one hash of foxhunt (layout fingerprints, request
 * de-duplication). Byte by byte, with integers fed as little-endian bytes, so
 * a hash never depends on the host's endianness or struct padding. Not for
 * anything adversarial.
 */
#ifndef FOX_HASH_H
#define FOX_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define FOX_FNV_OFFSET 0xcbf29ce484222325ULL

static inline uint64_t
fox_fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *b = data;
    for (size_t k = 0; k < len; k++) {
        h ^= b[k];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static inline uint64_t
fox_fnv1a_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)(v >> (8 * k));
    return fox_fnv1a(h, b, sizeof b);
}

/* A string with its terminating NUL, so "ab"+"c" and "a"+"bc" hash apart. */
static inline uint64_t
fox_fnv1a_str(uint64_t h, const char *s)
{
    return fox_fnv1a(h, s, strlen(s) + 1);
}

#endif
