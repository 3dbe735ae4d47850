/*
 * error.h — foxhunt status codes, shared by every module.
 *
 * Every function that can fail returns int: 0 (FOX_OK) or a positive FOX_E*
 * code; results come back through out-params. One X-macro list generates the
 * enum, fox_strerror() and fox_err_name(), so a code can never lack a string.
 * Foreign codes (errno, CUDA, nng) are converted at the boundary.
 */
#ifndef FOX_ERROR_H
#define FOX_ERROR_H

#define FOX_ERR_MAP(X)                                                                             \
    X(EINVAL, "invalid argument")                                                                  \
    X(ENOMEM, "out of memory")                                                                     \
    X(ESTATE, "not allowed in this state")                                                         \
    X(EIO, "input/output error")                                                                   \
    X(ENOENT, "no such file or entry")                                                             \
    X(EFORMAT, "malformed input file")                                                             \
    X(EMISMATCH, "layout fingerprint mismatch")                                                    \
    X(ECUDA, "CUDA error")                                                                         \
    X(ENODEV, "no GPU device present")                                                             \
    X(EHALT, "training halted by the stability system")                                            \
    X(EPROTO, "malformed request")                                                                 \
    X(EUNKNOWN, "unknown command")                                                                 \
    X(EPERM, "permission denied")                                                                  \
    X(EBUSY, "busy, try again")                                                                    \
    X(EINTERNAL, "internal error")

enum {
    FOX_OK = 0,
#define X(n, s) FOX_##n,
    FOX_ERR_MAP(X)
#undef X
        FOX_ERR_COUNT
};

/* Human-readable text of a status code; never NULL, thread-safe. */
const char *fox_strerror(int code);
/* Symbolic name ("EINVAL"); "OK" for 0, "E?" for an unknown code. */
const char *fox_err_name(int code);

#include <stddef.h>

/* Format a message into err (may be NULL) and return code: `return fox_errf(...)`. */
int fox_errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
