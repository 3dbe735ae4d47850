/* error.c — tables behind fox_strerror() and fox_err_name(). */
#include <stdarg.h>
#include <stdio.h>

#include "common/error.h"

static const char *const err_text[FOX_ERR_COUNT] = {[FOX_OK] = "success",
#define X(n, s) [FOX_##n] = s,
                                                    FOX_ERR_MAP(X)
#undef X
};

static const char *const err_name[FOX_ERR_COUNT] = {[FOX_OK] = "OK",
#define X(n, s) [FOX_##n] = #n,
                                                    FOX_ERR_MAP(X)
#undef X
};

const char *
fox_strerror(int code)
{
    if (code < 0 || code >= FOX_ERR_COUNT)
        return "unknown error code";
    return err_text[code];
}

const char *
fox_err_name(int code)
{
    if (code < 0 || code >= FOX_ERR_COUNT)
        return "E?";
    return err_name[code];
}

int
fox_errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}
