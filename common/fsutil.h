/*
 * fsutil.h — writing a file so that a crash leaves the old one or the new
 * one, never half of one: temp file beside the target, optional fsync,
 * rename, fsync of the directory. Used by checkpoints and the daemon's
 * metrics files. Thread-safe (the temp name carries the pid and the path).
 */
#ifndef FOX_FSUTIL_H
#define FOX_FSUTIL_H

#include <stddef.h>

/*
 * Write len bytes of data to path atomically with permissions mode. durable:
 * fsync the file and its directory (checkpoints); 0 for files that are
 * rewritten often and may be lost in a crash (metrics). FOX_EIO with the
 * failing call and path in err.
 */
int fox_write_atomic(const char *path, const void *data, size_t len, unsigned mode, int durable,
                     char *err, size_t errlen);

#endif
