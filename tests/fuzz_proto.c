/*
 * fuzz_proto.c — fuzz target for request parsing (proto/).
 *
 * Built two ways: with clang -fsanitize=fuzzer (meson -Dfuzz=true, defines
 * FOX_LIBFUZZER) it is a libFuzzer target; otherwise its own main() replays
 * every file of the corpus directories or files named on the command line,
 * so that the corpus runs as an ordinary test with any compiler.
 *
 * Each input is parsed as a request; whatever the outcome, a reply is built
 * for it and parsed back, as foxd would do, and the invariants of the parser
 * are checked: a status among those documented, a reason for every refusal,
 * an id only when it fits.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fox_request req;
    fox_reply rep;
    char err[512];
    int rv = fox_proto_parse_request(&req, (const char *)data, size, err, sizeof err);
    if (rv != FOX_OK && rv != FOX_EPROTO && rv != FOX_EUNKNOWN && rv != FOX_EINVAL)
        abort();
    if (rv != FOX_OK && err[0] == 0)
        abort();
    if (req.has_id && (req.id < 0 || req.id > FOX_PROTO_MAX_ID))
        abort();
    if (rv == FOX_OK && (req.cmd < 0 || req.cmd >= FOX_CMD_COUNT))
        abort();
    char *s = rv == FOX_OK ? fox_proto_reply_ok(req.has_id, req.id, NULL)
                           : fox_proto_reply_error(req.has_id, req.id, rv, err);
    if (s) {
        if (fox_proto_parse_reply(&rep, s, strlen(s), err, sizeof err) != FOX_OK)
            abort();
        if (rep.has_id != req.has_id || (rep.has_id && rep.id != req.id))
            abort();
        fox_reply_fini(&rep);
        free(s);
    }
    fox_request_fini(&req);
    return 0;
}

#ifndef FOX_LIBFUZZER
static int
replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    static uint8_t buf[FOX_PROTO_MAX_MSG + 2];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    return 0;
}

int
main(int argc, char **argv)
{
    int files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad += replay_file(argv[i]);
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char p[4096];
            if (e->d_name[0] == '.')
                continue;
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            bad += replay_file(p);
            files++;
        }
        if (d)
            closedir(d);
    }
    printf("replayed %d input(s)\n", files);
    return bad || files == 0;
}
#endif
