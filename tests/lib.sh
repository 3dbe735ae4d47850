# lib.sh — what the shell tests of foxd share: a scratch directory removed
# on exit (with any foxd still running killed), the ok/fail reporting, and
# starting a foxd and waiting until it answers.
#
# Sourced by a test after it has set FOXD and FOXCTL. A test keeps the pid
# of the foxd it runs in $pid (empty when none), so that the exit trap can
# kill a daemon that a failed check left behind.

# test_init PREFIX: make $dir under $TMPDIR and arm the cleanup.
test_init() {
    dir=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    pid=
    checks=0
    trap test_cleanup EXIT
}

test_cleanup() {
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
    rm -rf "$dir"
}

# fail MESSAGE: report, show the end of the daemon's log, stop the test.
fail() {
    echo "FAIL: $*"
    echo "--- foxd log (last 40 lines) ---"
    tail -40 "$dir/foxd.log" 2>/dev/null
    exit 1
}

ok() {
    checks=$((checks + 1))
    echo "ok $checks - $*"
}

# foxd_start CTL_ARGS... -- FOXD_ARGS...: run $FOXD with FOXD_ARGS in the
# background (stderr appended to $dir/foxd.log), set $pid, and wait until
# foxctl with CTL_ARGS (the URL and any certificates) gets an answer to
# `version`. A daemon loads its data before it listens, so the wait is long.
foxd_start() {
    local ctl=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        ctl+=("$1")
        shift
    done
    shift
    "$FOXD" "$@" 2>>"$dir/foxd.log" &
    pid=$!
    for _ in $(seq 1 300); do
        "$FOXCTL" --timeout 1000 "${ctl[@]}" version >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || fail "foxd exited at start"
        sleep 0.1
    done
    fail "foxd did not answer within 30 s"
}
