/*
 * answer.h — what foxd says (internal to daemon/): the results of the
 * read-only commands, built from the trainer's snapshot and the mapped
 * ISV/flag memory; the trainer command a mutating request becomes; and the
 * Prometheus textfile. JSON in, JSON out: no sockets, no waiting on the
 * trainer.
 *
 * Called on the loop thread.
 */
#ifndef FOX_DAEMON_ANSWER_H
#define FOX_DAEMON_ANSWER_H

#include <cjson/cJSON.h>

#include "daemon/conf.h"
#include "proto/proto.h"
#include "daemon/render.h"
#include "daemon/trainer.h"

/*
 * Result of a READ command (req->cmd of kind READ, nan_flags without clear).
 * On failure returns NULL with *status and msg set (FOX_ENOENT for an unknown
 * slot name or config key, FOX_EINVAL for a slot index out of range).
 */
cJSON *fox_answer_read(fox_trainer *t, const fox_dconf *d, const fox_counters *n,
                       const fox_request *req, int *status, char *msg, size_t len);

/*
 * Fill c (zeroed by the caller) from a mutating request: copy the arguments
 * out of the request and resolve checkpoint paths inside the state
 * directory. FOX_EPERM with msg for a path that leaves it.
 */
int fox_answer_tcmd(const fox_dconf *d, const fox_request *req, fox_tcmd *c, char *msg, size_t len);

/*
 * Resolve a data.source a client sent (anything but "synthetic") to a real
 * path inside d->data_dir: no "..", an absolute path only under the data
 * directory, no symlink out of it, a regular file of at most
 * d->data_max_mb. Paths outside are refused before the file system is
 * asked, so a client learns nothing of files elsewhere. FOX_EPERM, FOX_ENOENT
 * or FOX_EINVAL with msg.
 */
int fox_answer_data_path(const fox_dconf *d, const char *path, char *out, size_t len, char *msg,
                         size_t msglen);

/*
 * Resolve a checkpoint path (NULL: the default file, foxd.ckpt) inside
 * d->state_dir, relative or absolute. It must name a .ckpt file (path
 * components of letters, digits and "._+-", none starting with '.'); write:
 * a bare file name, for the state directory's subdirectories hold runs and
 * data. FOX_EPERM with the reason in msg otherwise.
 */
int fox_answer_ckpt_path(const fox_dconf *d, const char *path, int write, char *out, size_t len,
                         char *msg, size_t msglen);

/* One-line STATUS= text for systemd. */
void fox_answer_status_line(const fox_snapshot *s, char *buf, size_t len);

/* The Prometheus textfile body (malloc'd), or NULL when out of memory. */
char *fox_answer_prometheus(const fox_snapshot *s, const fox_counters *n);

#endif
