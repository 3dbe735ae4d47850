/*
 * dial.h — a synchronous nng dialer start that gives up at a bound.
 *
 * A refused or absent socket fails nng_dialer_start(d, 0) at once; but a
 * peer that is stopped (SIGSTOP, a debugger) or hung lets the connection
 * open and never finishes nng's handshake, which nng waits 10 s for,
 * whatever the caller's own bound. foxctl bounds its requests with it, and
 * foxd its self-probe.
 */
#ifndef FOX_DIAL_H
#define FOX_DIAL_H

#include <nng/nng.h>

/*
 * nng_dialer_start(d, 0) within timeout_ms (≤ 0: as long as it takes): its
 * status, or NNG_ETIMEDOUT when the bound passed first, in which case the
 * dialer is closed. The start runs on a thread of its own for that time.
 */
int fox_dialer_start_within(nng_dialer d, int timeout_ms);

#endif
