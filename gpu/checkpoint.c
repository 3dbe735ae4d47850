/*
 * checkpoint.c — checkpoint files of the engine.
 *
 * Layout (little-endian, as written by x86-64 and aarch64 hosts alike):
 *   header: magic "FOXCKPT\0", format version, header size, layout
 *           fingerprint, n_params, ISV size, payload size, CRC32 of the
 *           payload, CRC32 of the header fields before it;
 *   payload: params, target params, Adam m, Adam v (n_params floats each),
 *           ISV, counters, fold and epochs done; from format 3 on, one such
 *           block per member of the population (the header's `members`);
 *           from format 2 on, then the feature normalization of the fold
 *           (n_feat, mean, std), which a backtest on other data needs.
 *           Formats 1 and 2 (one member) still load.
 * Saving goes through fox_write_atomic (temp file, fsync, rename, fsync of
 * the directory), so a crash leaves the old file or the new one, never half
 * of one. Loading reads and verifies the whole file
 * before anything in the engine changes.
 */
#include <errno.h>
#include <float.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "gpu/engine_impl.h"
#include "common/fsutil.h"
#include "gpu/isv.h"

#define CKPT_MAGIC   "FOXCKPT"
#define CKPT_VERSION 3u /* written; 1 and 2 are still read */

typedef struct ckpt_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    uint64_t fingerprint;
    uint64_t n_params;
    uint32_t isv_dim;
    uint32_t members; /* format 3: member blocks in the payload; 0 before (one) */
    uint64_t payload_bytes;
    uint32_t payload_crc;
    uint32_t header_crc; /* over every byte before this field */
} ckpt_header;

typedef struct ckpt_counters {
    int64_t adam_t, step, train_steps, env_steps;
    uint64_t rng_state[2];
    int32_t fold, epochs_done;
} ckpt_counters;

/*
 * The largest weight magnitude a checkpoint may hold. A trained network's
 * weights stay within a few units; one beyond this overflows the float
 * activations at the first step, so such a file is refused as corrupt.
 */
#define CKPT_MAX_WEIGHT 1e6f /* the messages say +-1e6 */

/* The counters' ranges: a fold of data.folds (at most 8; -1 before any), train.epochs. */
#define CKPT_MAX_FOLD   30
#define CKPT_MAX_EPOCHS (1 << 20)

/* Format 2's tail: the feature normalization the weights were trained with. */
typedef struct ckpt_norm {
    int32_t n_feat, reserved;
} ckpt_norm;

/* Where a member block's counters start: after the four parameter arrays and the ISV. */
static size_t
counters_offset(size_t np)
{
    return 4 * np * sizeof(float) + FOX_ISV_TOTAL_DIM * sizeof(float);
}

/* One member's block: its arrays, ISV and counters. */
static size_t
member_bytes(size_t np)
{
    return counters_offset(np) + sizeof(ckpt_counters);
}

static size_t
payload_bytes(size_t np, uint32_t version, int members, int n_feat)
{
    size_t b = (size_t)members * member_bytes(np);
    if (version >= 2)
        b += sizeof(ckpt_norm) + 2 * (size_t)n_feat * sizeof(float);
    return b;
}

/* Members in a file of header h: formats before 3 hold one. */
static int
file_members(const ckpt_header *h)
{
    return h->version >= 3 ? (int)h->members : 1;
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

/* The current member's block at p: its arrays, ISV and counters. */
static void
save_member(fox_engine *e, char *p)
{
    size_t np = e->lay.n_params;
    float *f = (float *)p;
    fox_train_counters c;
    e->ops->state_io(e->m->be, 0, f, f + np, f + 2 * np, f + 3 * np, &c);
    const volatile float *isv = fox__be(e)->isv;
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
        f[4 * np + (size_t)i] = isv[i];
    ckpt_counters cc = {c.adam_t,
                        c.step,
                        c.train_steps,
                        c.env_steps,
                        {c.rng_state[0], c.rng_state[1]},
                        e->fold,
                        e->m->rep.epochs_done};
    memcpy(p + counters_offset(np), &cc, sizeof cc);
}

static int
checkpoint_save(fox_engine *e, const char *path)
{
    if (!e->data_loaded)
        return fox__engine_fail(e, FOX_ESTATE, "checkpoint_save before load_data");
    int K = e->cfg.members;
    size_t np = e->lay.n_params, bytes = payload_bytes(np, CKPT_VERSION, K, e->feat.n_feat);
    /* Header and payload in one buffer: the file is written in one piece. */
    char *file = malloc(sizeof(ckpt_header) + bytes);
    if (!file)
        return fox__engine_fail(e, FOX_ENOMEM, "checkpoint: out of memory");
    char *payload = file + sizeof(ckpt_header);
    fox_member *was = e->m;
    for (int k = 0; k < K; k++) {
        e->m = &e->members[k];
        save_member(e, payload + (size_t)k * member_bytes(np));
    }
    e->m = was;
    ckpt_norm cn = {e->feat.n_feat, 0};
    char *norm = payload + (size_t)K * member_bytes(np);
    memcpy(norm, &cn, sizeof cn);
    memcpy(norm + sizeof cn, e->feat.mean, (size_t)cn.n_feat * sizeof(float));
    memcpy(norm + sizeof cn + (size_t)cn.n_feat * sizeof(float), e->feat.std,
           (size_t)cn.n_feat * sizeof(float));

    ckpt_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CKPT_MAGIC, sizeof CKPT_MAGIC);
    h.version = CKPT_VERSION;
    h.header_bytes = sizeof h;
    h.fingerprint = e->fingerprint;
    h.n_params = np;
    h.isv_dim = FOX_ISV_TOTAL_DIM;
    h.members = (uint32_t)K;
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
    /* O_NONBLOCK: opening a FIFO must not hang the trainer; fstat then refuses it. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return fox__engine_fail(e, errno == ENOENT ? FOX_ENOENT : FOX_EIO, "checkpoint %s: %s",
                                path, strerror(errno));
    struct stat sb;
    FILE *fp = NULL;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || !(fp = fdopen(fd, "rb"))) {
        close(fd);
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

/* The first of n floats at f that is not finite or lies beyond bound in magnitude, or -1. */
static long
first_bad(const float *f, size_t n, float bound)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(f[i]) || fabsf(f[i]) > bound)
            return (long)i;
    return -1;
}

/*
 * The payload's values in range, beyond what the CRC can say (a file
 * written by a faulty run, or made to look valid): weights and Adam's
 * moments finite and bounded, Adam's second moment not negative, the
 * counters within their keys' ranges, the normalization's std finite and
 * positive. FOX_EFORMAT with the first value out of range.
 */
static int
check_member(fox_engine *e, const char *path, const char *block, int member)
{
    size_t np = e->lay.n_params;
    const float *f = (const float *)block;
    static const char *const arrays[] = {"weight", "target weight", "Adam m", "Adam v"};
    for (int a = 0; a < 4; a++) {
        const float *v = f + (size_t)a * np;
        long i = first_bad(v, np, a < 2 ? CKPT_MAX_WEIGHT : FLT_MAX);
        for (size_t k = 0; a == 3 && i < 0 && k < np; k++)
            if (v[k] < 0.0f)
                i = (long)k;
        if (i >= 0)
            return fox__engine_fail(e, FOX_EFORMAT,
                                    "checkpoint %s: member %d's %s %ld is %g (%s): refusing it",
                                    path, member, arrays[a], i, (double)v[i],
                                    a < 2   ? "weights are finite and within +-1e6"
                                    : a < 3 ? "Adam's first moment is finite"
                                            : "Adam's second moment is finite, not negative");
    }
    ckpt_counters cc;
    memcpy(&cc, block + counters_offset(np), sizeof cc);
    if (cc.adam_t < 0 || cc.step < 0 || cc.train_steps < 0 || cc.env_steps < 0 ||
        cc.fold < -1 || cc.fold > CKPT_MAX_FOLD || cc.epochs_done < 0 ||
        cc.epochs_done > CKPT_MAX_EPOCHS)
        return fox__engine_fail(e, FOX_EFORMAT,
                                "checkpoint %s: member %d's counters out of range (fold %d, epochs "
                                "done %d, step %lld, Adam t %lld): refusing it",
                                path, member, cc.fold, cc.epochs_done, (long long)cc.step,
                                (long long)cc.adam_t);
    return FOX_OK;
}

/* The values of every member's block and of the normalization after them (format 2 on). */
static int
check_values(fox_engine *e, const char *path, const char *payload, const ckpt_header *h)
{
    size_t np = e->lay.n_params;
    int K = file_members(h), rv;
    for (int k = 0; k < K; k++)
        if ((rv = check_member(e, path, payload + (size_t)k * member_bytes(np), k)) != FOX_OK)
            return rv;
    if (h->version < 2)
        return FOX_OK;
    ckpt_norm cn;
    const char *norm = payload + (size_t)K * member_bytes(np);
    memcpy(&cn, norm, sizeof cn);
    if (cn.n_feat != e->feat.n_feat)
        return fox__engine_fail(e, FOX_EFORMAT,
                                "checkpoint %s: %d normalized features, this engine has %d", path,
                                cn.n_feat, e->feat.n_feat);
    size_t nf = (size_t)cn.n_feat;
    for (size_t k = 0; k < nf; k++) {
        float mean, std;
        memcpy(&mean, norm + sizeof cn + k * sizeof(float), sizeof mean);
        memcpy(&std, norm + sizeof cn + (nf + k) * sizeof(float), sizeof std);
        if (!isfinite(mean) || !isfinite(std) || !(std > 0.0f))
            return fox__engine_fail(e, FOX_EFORMAT,
                                    "checkpoint %s: feature %zu's normalization is mean %g, std "
                                    "%g (std must be finite and positive): refusing it",
                                    path, k, (double)mean, (double)std);
    }
    return FOX_OK;
}

/*
 * Read path and verify all of it against this engine: magic, CRCs, a format
 * this build reads, the layout fingerprint, the sizes, the values' ranges. FOX_OK with *buf
 * (malloc'd, the whole file) and *h; otherwise the engine's message says why.
 */
static int
read_verified(fox_engine *e, const char *path, char **buf, ckpt_header *h)
{
    size_t len = 0;
    int rv = slurp(e, path, buf, &len);
    if (rv != FOX_OK)
        return rv;
    size_t np = e->lay.n_params;
    rv = FOX_EFORMAT;
    if (len < sizeof *h) {
        fox__engine_fail(e, rv, "checkpoint %s: truncated header (%zu bytes)", path, len);
        goto bad;
    }
    memcpy(h, *buf, sizeof *h);
    if (memcmp(h->magic, CKPT_MAGIC, sizeof CKPT_MAGIC) != 0) {
        fox__engine_fail(e, rv, "checkpoint %s: not a foxd checkpoint (bad magic)", path);
        goto bad;
    }
    if (h->header_crc != crc(h, offsetof(ckpt_header, header_crc))) {
        fox__engine_fail(e, rv, "checkpoint %s: header CRC mismatch (corrupt)", path);
        goto bad;
    }
    if (h->version < 1 || h->version > CKPT_VERSION || h->header_bytes != sizeof *h) {
        fox__engine_fail(e, rv, "checkpoint %s: format version %u, this build reads 1 to %u",
                         path, h->version, CKPT_VERSION);
        goto bad;
    }
    if (h->fingerprint != e->fingerprint && h->fingerprint != e->fingerprint_before_grid) {
        rv = FOX_EMISMATCH;
        fox__engine_fail(e, rv,
                         "checkpoint %s: layout fingerprint %016llx, this engine has %016llx", path,
                         (unsigned long long)h->fingerprint, (unsigned long long)e->fingerprint);
        goto bad;
    }
    if (h->version >= 3 && (h->members < 1 || h->members > FOX_MEMBERS_MAX)) {
        fox__engine_fail(e, rv, "checkpoint %s: %u members (1 to %d)", path, h->members,
                         FOX_MEMBERS_MAX);
        goto bad;
    }
    if (h->n_params != np || h->isv_dim != FOX_ISV_TOTAL_DIM ||
        h->payload_bytes != payload_bytes(np, h->version, file_members(h), e->feat.n_feat)) {
        rv = FOX_EMISMATCH;
        fox__engine_fail(e, rv, "checkpoint %s: sizes differ (%llu params, engine has %zu)", path,
                         (unsigned long long)h->n_params, np);
        goto bad;
    }
    if (len != sizeof *h + h->payload_bytes) {
        fox__engine_fail(e, rv, "checkpoint %s: %zu bytes, header says %llu (truncated?)", path,
                         len, (unsigned long long)(sizeof *h + h->payload_bytes));
        goto bad;
    }
    if (crc(*buf + sizeof *h, h->payload_bytes) != h->payload_crc) {
        fox__engine_fail(e, rv, "checkpoint %s: payload CRC mismatch (corrupt)", path);
        goto bad;
    }
    if ((rv = check_values(e, path, *buf + sizeof *h, h)) != FOX_OK)
        goto bad;
    return FOX_OK;
bad:
    free(*buf);
    *buf = NULL;
    return rv;
}

/* Put a verified member block's weights, Adam state, counters and ISV into the current member. */
static int
restore_member(fox_engine *e, const char *block)
{
    size_t np = e->lay.n_params;
    const float *f = (const float *)block;
    ckpt_counters cc;
    memcpy(&cc, block + counters_offset(np), sizeof cc);
    fox_train_counters c = {
        cc.adam_t, cc.step, cc.train_steps, cc.env_steps, {cc.rng_state[0], cc.rng_state[1]}};
    int rv = e->ops->state_io(e->m->be, 1, (float *)f, (float *)(f + np), (float *)(f + 2 * np),
                              (float *)(f + 3 * np), &c);
    volatile float *isv = fox__be(e)->isv;
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
        isv[i] = f[4 * np + (size_t)i];
    /* A file of the layout before the atom grid names that layout: the ISV names this one. */
    fox_isv_store_fingerprint((float *)isv, e->fingerprint);
    return rv;
}

/* FOX_OK when the file of header h holds the engine's engine.members; else the refusal. */
static int
same_members(fox_engine *e, const char *path, const ckpt_header *h, const char *engine_has)
{
    if (file_members(h) == e->cfg.members)
        return FOX_OK;
    return fox__engine_fail(e, FOX_EMISMATCH,
                            "checkpoint %s: holds %d members, %s %d (engine.members)", path,
                            file_members(h), engine_has, e->cfg.members);
}

static int
checkpoint_load(fox_engine *e, const char *path)
{
    if (!e->data_loaded)
        return fox__engine_fail(e, FOX_ESTATE, "checkpoint_load before load_data");
    char *buf = NULL;
    ckpt_header h;
    int rv = read_verified(e, path, &buf, &h);
    if (rv != FOX_OK)
        return rv;
    if ((rv = same_members(e, path, &h, "this engine trains")) != FOX_OK) {
        free(buf);
        return rv;
    }
    /* Verified: from here on the engine changes. */
    size_t np = e->lay.n_params;
    const char *payload = buf + sizeof h;
    ckpt_counters cc;
    memcpy(&cc, payload + counters_offset(np), sizeof cc);
    if (cc.fold >= 0 && cc.fold != e->fold && (rv = fox_engine_begin_fold(e, cc.fold)) != FOX_OK)
        goto out;
    fox_member *was = e->m;
    for (int k = 0; k < e->cfg.members && rv == FOX_OK; k++) {
        e->m = &e->members[k];
        rv = restore_member(e, payload + (size_t)k * member_bytes(np));
        if (cc.fold >= 0)
            e->m->rep.epochs_done = cc.epochs_done;
    }
    e->m = was;
out:
    free(buf);
    return rv;
}

static int
load_policy(fox_engine *e, const char *path, int val_begin, int begin, int end)
{
    if (!e->data_loaded)
        return fox__engine_fail(e, FOX_ESTATE, "load_policy before load_data");
    if (begin < 0)
        begin = e->feat.warmup;
    if (end <= 0)
        end = e->series.n;
    if (begin < e->feat.warmup || end > e->series.n || end - begin < 2)
        return fox__engine_fail(e, FOX_EINVAL,
                                "backtest bars [%d, %d): the series has bars %d to %d with "
                                "features (at least 2 needed)",
                                begin, end, e->feat.warmup, e->series.n);
    if (val_begin < 0)
        val_begin = begin - (end - begin) > e->feat.warmup ? begin - (end - begin) : e->feat.warmup;
    if (val_begin < e->feat.warmup || val_begin > begin)
        return fox__engine_fail(e, FOX_EINVAL,
                                "backtest validation bars [%d, %d): they must lie between bar %d "
                                "(the first with features) and the backtest's first bar",
                                val_begin, begin, e->feat.warmup);
    char *buf = NULL;
    ckpt_header h;
    int rv = read_verified(e, path, &buf, &h);
    if (rv != FOX_OK)
        return rv;
    if (h.version < 2) {
        free(buf);
        return fox__engine_fail(e, FOX_EFORMAT,
                                "checkpoint %s: format %u keeps no feature normalization; a "
                                "backtest needs format 2 or later",
                                path, h.version);
    }
    /*
     * A population's policy is its member 0's, as a fold report's lead while
     * it trains; under policy.members = ensemble, every member's together.
     */
    int ensemble = e->cfg.policy_members == FOX_POLICY_MEMBERS_ENSEMBLE;
    if (ensemble && (rv = same_members(e, path, &h, "the ensemble of this engine has")) != FOX_OK) {
        free(buf);
        return rv;
    }
    size_t np = e->lay.n_params;
    const char *payload = buf + sizeof h;
    ckpt_counters cc;
    memcpy(&cc, payload + counters_offset(np), sizeof cc);
    /* The features of the new bars are scaled as the training bars were. */
    const char *norm = payload + (size_t)file_members(&h) * member_bytes(np) + sizeof(ckpt_norm);
    size_t nf = (size_t)e->feat.n_feat;
    memcpy(e->feat.mean, norm, nf * sizeof(float));
    memcpy(e->feat.std, norm + nf * sizeof(float), nf * sizeof(float));
    fox_features_apply_norm(&e->feat);
    for (int k = 0; k < (ensemble ? e->cfg.members : 1) && rv == FOX_OK; k++) {
        e->m = &e->members[k];
        rv = restore_member(e, payload + (size_t)k * member_bytes(np));
    }
    free(buf);
    if (rv != FOX_OK)
        return fox__engine_fail(e, rv, "checkpoint %s: %s", path, fox_strerror(rv));
    /*
     * The test split walks the chosen bars, the validation split those
     * before them; the random baseline's seed follows the fold's, so that on
     * a fold's own test bars every figure is the fold's.
     */
    e->fold = cc.fold >= 0 ? cc.fold : 0;
    e->policy_loaded = 1;
    e->seg = (fox_fold){val_begin, val_begin, val_begin, begin, begin, end};
    memset(&e->halt, 0, sizeof e->halt);
    for (int k = 0; k < e->cfg.members; k++)
        memset(&e->members[k].halt, 0, sizeof e->members[k].halt);
    e->m = fox__engine_policy_member(e);
    fox_fold_report *fr = &e->m->rep;
    memset(fr, 0, sizeof *fr);
    fr->fold = e->fold;
    fr->epochs_done = cc.epochs_done;
    fr->best_epoch = cc.epochs_done - 1;
    fr->bars_per_year = e->series.bars_per_year;
    return FOX_OK;
}

/*
 * Saves and loads, timed for the run's wall-time split. A load that begins
 * its fold counts that fold's set-up and baselines where begin_fold does.
 */
typedef struct ckpt_timer {
    double t0;
    fox_engine_times before;
} ckpt_timer;

static ckpt_timer
timer_start(const fox_engine *e)
{
    return (ckpt_timer){fox_mono_s(), e->times};
}

/* Count the time since t->t0 as checkpoint time and pass rv on. */
static int
timer_stop(fox_engine *e, const ckpt_timer *t, int rv)
{
    double nested = (e->times.fold_setup - t->before.fold_setup) + (e->times.eval - t->before.eval);
    e->times.checkpoint += fox_mono_s() - t->t0 - nested;
    return rv;
}

int
fox_engine_checkpoint_save(fox_engine *e, const char *path)
{
    ckpt_timer t = timer_start(e);
    return timer_stop(e, &t, checkpoint_save(e, path));
}

int
fox_engine_checkpoint_load(fox_engine *e, const char *path)
{
    ckpt_timer t = timer_start(e);
    return timer_stop(e, &t, checkpoint_load(e, path));
}

int
fox_engine_load_policy(fox_engine *e, const char *path, int val_begin, int begin, int end)
{
    ckpt_timer t = timer_start(e);
    return timer_stop(e, &t, load_policy(e, path, val_begin, begin, end));
}
