/*
 * fsutil.h — file-system helpers. Writing a file so that a crash leaves
 * the old one or the new one, never half of one: temp file beside the
 * target, optional fsync, rename, fsync of the directory (checkpoints, the
 * daemon's metrics files). Making a directory with its parents, appending
 * whole lines to a log, and locking a directory for one process. Thread-safe
 * (the temp name carries the pid and the path).
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

/* mkdir -p: create path and its missing parents with mode. FOX_EIO with the failing directory. */
int fox_mkdir_p(const char *path, unsigned mode, char *err, size_t errlen);

/*
 * Append one line (a newline is added) to path, creating it 0640. The line
 * goes out in one write where it fits a page, so that O_APPEND keeps lines
 * written at the same time by several writers whole.
 */
int fox_append_line(const char *path, const char *line, char *err, size_t errlen);

/*
 * Take an exclusive flock on dir/name (created 0640) for as long as *fd
 * stays open, and write the caller's pid into it, so that a second process
 * asking for the same directory learns who holds it. The descriptor is
 * close-on-exec. FOX_EBUSY when another process holds the lock, with the
 * directory and the holder's pid in err; FOX_EIO when the file cannot be
 * opened or locked. *fd is -1 on any error.
 */
int fox_lock_dir(const char *dir, const char *name, int *fd, char *err, size_t errlen);

/*
 * Remove the temp files fox_write_atomic leaves when its process dies
 * mid-write ("<name>.tmp.<pid>" whose pid no longer runs) in dir and its
 * subdirectories down to depth levels. *removed counts them. A crash loop
 * would otherwise fill the disk with half-written checkpoints.
 */
int fox_remove_stale_temps(const char *dir, int depth, int *removed);

/*
 * The program `name` to run: $env when that is set, else the one beside the
 * running program (installed side by side, or in the build tree's daemon/
 * and client/ folders), else name alone for a PATH search.
 */
void fox_find_program(const char *name, const char *env, char *buf, size_t len);

/* One line a program wrote on its stderr, without its newline. */
typedef void (*fox_line_fn)(void *arg, const char *line);

/*
 * Run argv (argv[0] looked up on PATH unless it holds a '/') and wait for
 * it: its exit status, 128 + the signal that ended it, or -1 with errno set
 * when it could not be started or waited for. With on_err NULL the program
 * writes on our stderr; otherwise each line it writes there goes to
 * on_err(arg, line), on the calling thread, before this returns (a daemon's
 * logger gives them a time and a level).
 */
int fox_run_program(char *const argv[], fox_line_fn on_err, void *arg);

#endif
