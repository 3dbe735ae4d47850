# lib.sh — what the shell tests of foxd share: a scratch directory removed
# on exit (with any foxd still running killed), the ok/fail reporting,
# starting a foxd and waiting until it answers, and the TCP ports tests
# listen on (free_port, on_free_port: the one place they are chosen), the
# replay ring the tests train with (REPLAY), and no_pictures for a test that
# checks nothing of the pictures runs draw.
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

# no_pictures: every run foxd ends draws its pictures with foxplot (gnuplot, a second or two a
# run on a 2-core machine, and the run's op ends after them); a test that checks nothing of them
# runs /bin/true in its place. test_records.sh, test_population.sh and test_hostile_files.sh
# check the pictures and keep foxplot.
no_pictures() {
    export FOXPLOT=/bin/true
}

# REPLAY: the replay ring of the foxds the tests train. Each engine zeroes its ring, all of it
# under meson's MALLOC_PERTURB_: the default's million transitions (56 MB) cost a fraction of
# a second an engine, seconds a test. A run here is either short, so that 65536 never wrap and
# it trains as the default would, or stopped whatever it learned.
REPLAY=(--set train.replay_capacity=65536)

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

# free_port: a loopback TCP port nothing listens on now, as the kernel
# chooses one for a bind to port 0. Another program may still take it before
# the test binds it: on_free_port tries again then.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# on_free_port CMD...: set $port to a free_port and run CMD, which starts a
# program listening on it (every address built from $port inside CMD, or
# after it); while CMD returns 98, the port having been taken between the
# choice and the bind, again with another. Returns what CMD returned.
on_free_port() {
    local rc try
    for try in 1 2 3 4 5; do
        port=$(free_port)
        port_retry=1
        "$@"
        rc=$?
        port_retry=
        [ $rc -eq 98 ] || return $rc
        echo "# port $port was taken before it was bound (try $try): another"
    done
    fail "no port stayed free for 5 tries"
}

# log_mark: note where $dir/foxd.log ends now, in $log_from, before a foxd
# is started into it.
log_mark() {
    log_from=$(stat -c %s "$dir/foxd.log" 2>/dev/null || echo 0)
}

# foxd_wait CTL_ARGS...: wait until foxctl with CTL_ARGS (the URL and any
# certificates) gets an answer to `version` from the foxd $pid, whose stderr
# is appended to $dir/foxd.log from byte $log_from on. A daemon loads its
# data before it listens, so the wait is long. Under on_free_port a foxd that
# exited because its address was in use returns 98; any other exit fails the
# test.
foxd_wait() {
    for _ in $(seq 1 300); do
        "$FOXCTL" --timeout 1000 "$@" version >/dev/null 2>&1 && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid"
            pid=
            if [ -n "${port_retry:-}" ] &&
                tail -c +"$((log_from + 1))" "$dir/foxd.log" | grep -qiE "address (already )?in use"; then
                return 98
            fi
            fail "foxd exited at start"
        fi
        sleep 0.1
    done
    fail "foxd did not answer within 30 s"
}

# foxd_start CTL_ARGS... -- FOXD_ARGS...: run $FOXD with FOXD_ARGS in the
# background (stderr appended to $dir/foxd.log), set $pid, and foxd_wait
# with CTL_ARGS.
foxd_start() {
    local ctl=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        ctl+=("$1")
        shift
    done
    shift
    log_mark
    "$FOXD" "$@" 2>>"$dir/foxd.log" &
    pid=$!
    foxd_wait "${ctl[@]}"
}

# stop_and_check_records ST WHAT: SIGTERM the foxd $pid, which trains with
# state directory ST and logs to $dir/foxd.log from byte $log_from on; fail,
# naming WHAT, unless it exits 0 with its stop checkpoint written and every
# epoch it logged in the run's epochs.csv and in both metrics.jsonl files,
# no record refused. Sets $rows to the epochs recorded.
stop_and_check_records() {
    local st=$1 what=$2 rc run lines state logged
    kill -TERM "$pid"; wait "$pid"; rc=$?; pid=
    run=$(ls -d "$st"/runs/*/ | head -1)
    rows=$(($(wc -l <"$run/epochs.csv") - 1))
    lines=$(grep -c '"type":"epoch"' "$run/metrics.jsonl")
    state=$(grep -c '"type":"epoch"' "$st/metrics.jsonl")
    logged=$(tail -c +"$((log_from + 1))" "$dir/foxd.log" | grep -c "info: fold 0 epoch ")
    [ $rc -eq 0 ] && [ -s "$st/foxd.ckpt" ] ||
        fail "SIGTERM after $what: exit $rc, checkpoint $(ls -l "$st/foxd.ckpt" 2>&1)"
    ! tail -c +"$((log_from + 1))" "$dir/foxd.log" | grep -q "warning: run directory\|warning: metrics" ||
        fail "a record was not written: $(grep "warning: run directory\|warning: metrics" "$dir/foxd.log")"
    [ "$rows" -ge 1 ] && [ "$rows" -eq "$lines" ] && [ "$rows" -eq "$state" ] && [ "$rows" -eq "$logged" ] ||
        fail "$logged epochs ended; epochs.csv has $rows, metrics.jsonl $lines and $state ($what)"
}
