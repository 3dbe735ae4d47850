/*
 * trainer_types.c — the names of the trainer's states, the heartbeat's
 * verdict and the check of a member's index, over plain data alone
 * (trainer_types.h), so that whoever shows a snapshot or answers a request
 * needs nothing of the trainer thread.
 */
#include <stdint.h>

#include "common/error.h"
#include "daemon/trainer_types.h"

static const char *const state_names[FOX_TSTATE_COUNT] = {"starting", "idle",   "training",
                                                          "paused",   "halted", "stopping"};

const char *
fox_tstate_name(int state)
{
    return state >= 0 && state < FOX_TSTATE_COUNT ? state_names[state] : "?";
}

#define STALE_MS_MIN 30000

int
fox_trainer_healthy(const fox_snapshot *s, int64_t now_ms, int64_t stale_ms)
{
    if (stale_ms < STALE_MS_MIN)
        stale_ms = STALE_MS_MIN;
    if (s->phase[0] && now_ms < s->phase_until_ms)
        return 1;
    return now_ms - s->beat_ms < stale_ms;
}

int
fox_member_check(int member, int members, char *msg, size_t len)
{
    if (member < 0 || member >= members)
        return fox_errf(msg, len, FOX_EINVAL,
                        "args.member %d is outside [0, %d): engine.members is %d", member, members,
                        members);
    return FOX_OK;
}
