/*
 * checkpoint.c — checkpoint files of the engine.
 *
 * Layout (little-endian, as written by x86-64 and aarch64 hosts alike):
 *   header: magic "FOXCKPT\0", format version, header size, layout
 *           fingerprint, n_params, ISV size, payload size, CRC32 of the
 *           payload, CRC32 of the header fields before it;
 *   payload: params, target params, Adam m, Adam v (n_params floats each),
 *           ISV, counters, fold and epochs done.
 * Saving goes through fox_write_atomic (temp file, fsync, rename, fsync of
 * the directory), so a crash leaves the old file or the new one, never half
 * of one. Loading reads and verifies the whole file
 * before anything in the engine changes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "gpu/engine_impl.h"
#include "common/fsutil.h"
#include "gpu/isv.h"

#define CKPT_MAGIC   "FOXCKPT"
#define CKPT_VERSION 1u

typedef struct ckpt_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    uint64_t fingerprint;
    uint64_t n_params;
    uint32_t isv_dim;
    uint32_t reserved;
    uint64_t payload_bytes;
    uint32_t payload_crc;
    uint32_t header_crc; /* over every byte before this field */
} ckpt_header;

typedef struct ckpt_counters {
    int64_t adam_t, step, train_steps, env_steps;
    uint64_t rng_state[2];
    int32_t fold, epochs_done;
} ckpt_counters;

static size_t
payload_bytes(size_t np)
{
    return 4 * np * sizeof(float) + FOX_ISV_TOTAL_DIM * sizeof(float) + sizeof(ckpt_counters);
}

static uint32_t
crc(const void *p, size_t n)
{
    uLong c = crc32(0L, Z_NULL, 0);
    const Bytef *b = p;
    /* zlib takes uInt lengths: feed large buffers in pieces. */
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, b, chunk);
        b += chunk;
        n -= chunk;
    }
    return (uint32_t)c;
}

static int
checkpoint_save(fox_engine *e, const char *path)
{
    if (!e->be)
        return fox__engine_fail(e, FOX_ESTATE, "checkpoint_save before load_data");
    size_t np = e->lay.n_params, bytes = payload_bytes(np);
    /* Header and payload in one buffer: the file is written in one piece. */
    char *file = malloc(sizeof(ckpt_header) + bytes);
    if (!file)
        return fox__engine_fail(e, FOX_ENOMEM, "checkpoint: out of memory");
    char *payload = file + sizeof(ckpt_header);
    float *f = (float *)payload;
    fox_train_counters c;
    e->ops->state_io(e->be, 0, f, f + np, f + 2 * np, f + 3 * np, &c);
    const volatile float *isv = fox__be(e)->isv;
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
        f[4 * np + (size_t)i] = isv[i];
    ckpt_counters cc = {c.adam_t,
                        c.step,
                        c.train_steps,
                        c.env_steps,
                        {c.rng_state[0], c.rng_state[1]},
                        e->fold,
                        e->rep.epochs_done};
    memcpy(payload + bytes - sizeof cc, &cc, sizeof cc);

    ckpt_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CKPT_MAGIC, sizeof CKPT_MAGIC);
    h.version = CKPT_VERSION;
    h.header_bytes = sizeof h;
    h.fingerprint = e->fingerprint;
    h.n_params = np;
    h.isv_dim = FOX_ISV_TOTAL_DIM;
    h.payload_bytes = bytes;
    h.payload_crc = crc(payload, bytes);
    h.header_crc = crc(&h, offsetof(ckpt_header, header_crc));

    memcpy(file, &h, sizeof h);
    char err[FOX_PATH_MAX + 128];
    int rv = fox_write_atomic(path, file, sizeof h + bytes, 0640, 1, err, sizeof err);
    free(file);
    if (rv != FOX_OK)
        return fox__engine_fail(e, rv, "checkpoint %s", err);
    return FOX_OK;
}

/* Read the whole file; FOX_OK with *buf (malloc'd) and *len. */
static int
slurp(fox_engine *e, const char *path, char **buf, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return fox__engine_fail(e, errno == ENOENT ? FOX_ENOENT : FOX_EIO, "checkpoint %s: %s",
                                path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(fp);
        return fox__engine_fail(e, FOX_EIO, "checkpoint %s: not a regular file", path);
    }
    *len = (size_t)sb.st_size;
    *buf = malloc(*len ? *len : 1);
    if (!*buf) {
        fclose(fp);
        return fox__engine_fail(e, FOX_ENOMEM, "checkpoint %s: out of memory", path);
    }
    size_t got = fread(*buf, 1, *len, fp);
    fclose(fp);
    if (got != *len) {
        free(*buf);
        return fox__engine_fail(e, FOX_EIO, "checkpoint %s: short read", path);
    }
    return FOX_OK;
}

static int
checkpoint_load(fox_engine *e, const char *path)
{
    if (!e->be)
        return fox__engine_fail(e, FOX_ESTATE, "checkpoint_load before load_data");
    char *buf = NULL;
    size_t len = 0;
    int rv = slurp(e, path, &buf, &len);
    if (rv != FOX_OK)
        return rv;
    ckpt_header h;
    size_t np = e->lay.n_params;
    rv = FOX_EFORMAT;
    if (len < sizeof h) {
        fox__engine_fail(e, rv, "checkpoint %s: truncated header (%zu bytes)", path, len);
        goto out;
    }
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, CKPT_MAGIC, sizeof CKPT_MAGIC) != 0) {
        fox__engine_fail(e, rv, "checkpoint %s: not a foxd checkpoint (bad magic)", path);
        goto out;
    }
    if (h.header_crc != crc(&h, offsetof(ckpt_header, header_crc))) {
        fox__engine_fail(e, rv, "checkpoint %s: header CRC mismatch (corrupt)", path);
        goto out;
    }
    if (h.version != CKPT_VERSION || h.header_bytes != sizeof h) {
        fox__engine_fail(e, rv, "checkpoint %s: format version %u, this build reads %u", path,
                         h.version, CKPT_VERSION);
        goto out;
    }
    if (h.fingerprint != e->fingerprint) {
        rv = FOX_EMISMATCH;
        fox__engine_fail(e, rv,
                         "checkpoint %s: layout fingerprint %016llx, this engine has %016llx", path,
                         (unsigned long long)h.fingerprint, (unsigned long long)e->fingerprint);
        goto out;
    }
    if (h.n_params != np || h.isv_dim != FOX_ISV_TOTAL_DIM ||
        h.payload_bytes != payload_bytes(np)) {
        rv = FOX_EMISMATCH;
        fox__engine_fail(e, rv, "checkpoint %s: sizes differ (%llu params, engine has %zu)", path,
                         (unsigned long long)h.n_params, np);
        goto out;
    }
    if (len != sizeof h + h.payload_bytes) {
        fox__engine_fail(e, rv, "checkpoint %s: %zu bytes, header says %llu (truncated?)", path,
                         len, (unsigned long long)(sizeof h + h.payload_bytes));
        goto out;
    }
    char *payload = buf + sizeof h;
    if (crc(payload, h.payload_bytes) != h.payload_crc) {
        fox__engine_fail(e, rv, "checkpoint %s: payload CRC mismatch (corrupt)", path);
        goto out;
    }
    /* Verified: from here on the engine changes. */
    ckpt_counters cc;
    memcpy(&cc, payload + h.payload_bytes - sizeof cc, sizeof cc);
    if (cc.fold >= 0 && cc.fold != e->fold && (rv = fox_engine_begin_fold(e, cc.fold)) != FOX_OK)
        goto out;
    float *f = (float *)payload;
    fox_train_counters c = {
        cc.adam_t, cc.step, cc.train_steps, cc.env_steps, {cc.rng_state[0], cc.rng_state[1]}};
    rv = e->ops->state_io(e->be, 1, f, f + np, f + 2 * np, f + 3 * np, &c);
    volatile float *isv = fox__be(e)->isv;
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
        isv[i] = f[4 * np + (size_t)i];
    if (cc.fold >= 0)
        e->rep.epochs_done = cc.epochs_done;
out:
    free(buf);
    return rv;
}

/* Saves and loads, timed for the run's wall-time split. */
int
fox_engine_checkpoint_save(fox_engine *e, const char *path)
{
    double t0 = fox__seconds();
    int rv = checkpoint_save(e, path);
    e->times.checkpoint += fox__seconds() - t0;
    return rv;
}

int
fox_engine_checkpoint_load(fox_engine *e, const char *path)
{
    double t0 = fox__seconds();
    int rv = checkpoint_load(e, path);
    e->times.checkpoint += fox__seconds() - t0;
    return rv;
}
