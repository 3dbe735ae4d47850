#!/bin/bash
# test_journal.sh FOXD — where foxd's log lines go. On stderr every line
# starts with an ISO-8601 UTC timestamp and a start-up error appears once.
# When stderr is the journal's stream (JOURNAL_STREAM names its device and
# inode) each line is a journal entry with its priority and no timestamp of
# its own, and nothing goes to stderr as well.
#
# The journal side runs against the system's journald where one runs (foxd
# started by systemd-cat, the entries read back with journalctl), else
# against a stand-in that binds journald's native socket, which needs root.
# That socket and any directory made for it are removed at the end; a
# socket or directory that existed is never touched. Skipped (77) only when
# neither is possible, after the stderr checks ran.
set -u
FOXD=$(realpath "$1")
HERE=$(dirname "$(realpath "$0")")
. "$HERE/lib.sh"

JOURNAL_DIR=/run/systemd/journal
SOCKET=$JOURNAL_DIR/socket
made_dirs=() bound=0 receiver=
test_init foxd-journal
cleanup() {
    [ -n "$receiver" ] && kill "$receiver" 2>/dev/null && wait "$receiver" 2>/dev/null
    [ $bound -eq 1 ] && rm -f "$SOCKET"
    for ((i = ${#made_dirs[@]} - 1; i >= 0; i--)); do
        rmdir "${made_dirs[i]}"
    done
    test_cleanup
}
trap cleanup EXIT
# Killed (a test timeout): exit, so that the cleanup removes what was made under /run.
trap 'exit 1' INT TERM

port=$(free_port)
# A start that fails for a clear reason after a warning and info lines: a
# tcp:// listener without a token (allowed, with a warning), then data that
# does not exist. The listener is never opened, so the port need not be free.
FAILING=(--backend cpu --listen "tcp://127.0.0.1:$port" --pub "ipc://$dir/ev.sock"
         --set daemon.allow_tcp_without_token=true --set "daemon.runtime_dir=$dir/rt"
         --set "daemon.state_dir=$dir/st" --data "$dir/missing.csv")
# A configuration foxd refuses before it starts anything.
REFUSED=(--backend cpu --set train.epochs=many --set "daemon.runtime_dir=$dir/rt"
         --set "daemon.state_dir=$dir/st")
ERR_TEXT='missing\.csv: cannot open'
STAMP='^[0-9]{4}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]\.[0-9]{3}Z (err|warning|notice|info|debug): '

# run_foxd NAME JOURNAL ARGS...: run foxd with stderr in $dir/NAME.err (with
# JOURNAL_STREAM naming that file when JOURNAL is 1), its status in $rc.
run_foxd() {
    local name=$1 journal=$2
    shift 2
    : >"$dir/$name.err"
    if [ "$journal" = 1 ]; then
        JOURNAL_STREAM=$(stat -c %d:%i "$dir/$name.err") "$FOXD" "$@" 2>>"$dir/$name.err"
    else
        "$FOXD" "$@" 2>>"$dir/$name.err"
    fi
    rc=$?
}

# check_stamped NAME: every line of NAME.err is a stamped log line, the error once.
check_stamped() {
    local bad
    bad=$(grep -Ev "$STAMP" "$dir/$1.err")
    [ -z "$bad" ] || fail "$1: lines without a timestamp and level: $bad"
}

# ------------------------------------------------------------ stderr path
unset JOURNAL_STREAM
run_foxd plain 0 "${FAILING[@]}"
[ $rc -eq 1 ] || fail "a start without its data exited $rc, want 1: $(cat "$dir/plain.err")"
check_stamped plain
[ "$(grep -Ec "err: .*$ERR_TEXT" "$dir/plain.err")" -eq 1 ] ||
    fail "the start-up error is not on stderr exactly once: $(cat "$dir/plain.err")"
grep -q 'warning: INSECURE' "$dir/plain.err" && grep -q 'info: starting the trainer' "$dir/plain.err" ||
    fail "warning or info line missing: $(cat "$dir/plain.err")"
ok "stderr: every line stamped (ISO-8601 UTC, level), the start-up error once"

run_foxd refused 0 "${REFUSED[@]}"
[ $rc -eq 2 ] && [ "$(wc -l <"$dir/refused.err")" -eq 1 ] &&
    grep -Eq "${STAMP/(err|warning|notice|info|debug)/err}.*train\.epochs" "$dir/refused.err" ||
    fail "a refused configuration (exit $rc) is not one stamped err line: $(cat "$dir/refused.err")"
ok "stderr: a refused configuration is one stamped err line, exit 2"

# JOURNAL_STREAM inherited, but stderr was redirected elsewhere: stderr wins.
: >"$dir/other"
JOURNAL_STREAM=$(stat -c %d:%i "$dir/other") "$FOXD" "${FAILING[@]}" 2>"$dir/redirected.err"
check_stamped redirected
grep -Eq "err: .*$ERR_TEXT" "$dir/redirected.err" ||
    fail "with JOURNAL_STREAM naming another file the error left stderr: $(cat "$dir/redirected.err")"
ok "stderr: a JOURNAL_STREAM that is not stderr is ignored"

# ----------------------------------------------------------- journal path
# entries FILE PID PRIORITY REGEX: how many journal entries (JSON lines) of
# PID have PRIORITY and a MESSAGE matching REGEX.
entries() {
    python3 - "$@" <<'EOF'
import json, re, sys
path, pid, prio, pattern = sys.argv[1:5]
n = 0
for line in open(path):
    e = json.loads(line)
    if e.get("_PID") == pid and e.get("PRIORITY") == prio and re.search(pattern, str(e.get("MESSAGE"))):
        n += 1
print(n)
EOF
}

# check_entries FILE PID: every entry of PID came through the native
# protocol as foxd, without a timestamp or level of its own in MESSAGE and
# without a code location (which would be the sink's, not the caller's).
check_entries() {
    python3 - "$@" "$STAMP" <<'EOF'
import json, re, sys
path, pid, stamp = sys.argv[1:4]
bare = re.compile(stamp[1:].split(" (")[0])  # a timestamp anywhere in the text
mine = [e for e in map(json.loads, open(path)) if e.get("_PID") == pid]
for e in mine:
    msg = str(e.get("MESSAGE"))
    if e.get("_TRANSPORT") != "journal":
        print("came through %s, not the native protocol: %s" % (e.get("_TRANSPORT"), msg))
    if e.get("SYSLOG_IDENTIFIER") != "foxd":
        print("SYSLOG_IDENTIFIER %r: %s" % (e.get("SYSLOG_IDENTIFIER"), msg))
    if bare.search(msg) or re.match(r"(err|warning|notice|info|debug): ", msg):
        print("timestamp or level in MESSAGE: %s" % msg)
    if "CODE_FUNC" in e or "CODE_FILE" in e:
        print("code location %s:%s: %s" % (e.get("CODE_FILE"), e.get("CODE_FUNC"), msg))
if not mine:
    print("no entries from pid %s" % pid)
EOF
}

# check_journal NAME FILE PID: foxd's failing start as journal entries.
check_journal() {
    local problems
    problems=$(check_entries "$2" "$3")
    [ -z "$problems" ] || fail "$1: $problems"
    [ "$(entries "$2" "$3" 3 "$ERR_TEXT")" -eq 1 ] ||
        fail "$1: the start-up error is not one entry at priority 3: $(cat "$2")"
    [ "$(entries "$2" "$3" 4 '^INSECURE: tcp://')" -eq 1 ] ||
        fail "$1: the warning is not one entry at priority 4: $(cat "$2")"
    [ "$(entries "$2" "$3" 6 '^starting the trainer')" -eq 1 ] ||
        fail "$1: the info line is not one entry at priority 6: $(cat "$2")"
}

if [ -S "$SOCKET" ]; then
    # A journald runs: foxd under systemd-cat, whose stream is its stderr.
    command -v systemd-cat >/dev/null && command -v journalctl >/dev/null || {
        echo "SKIP: a journald runs but systemd-cat or journalctl is missing"
        exit 77
    }
    ident="foxd-journal-test-$$-$RANDOM"
    # read_back VALUE FIELD WANT FILE: poll journalctl until WANT entries have FIELD=VALUE.
    since=$(date +%s)
    read_back() {
        for _ in $(seq 1 50); do
            journalctl -q -o json --since "@$since" "$2=$1" >"$4" 2>/dev/null
            [ "$(wc -l <"$4")" -ge "$3" ] && return 0
            sleep 0.1
        done
        return 1
    }
    systemd-cat -t "$ident" echo probe
    read_back "$ident" SYSLOG_IDENTIFIER 1 "$dir/probe.json" || {
        echo "SKIP: a journald runs but this user cannot read its entries back (journalctl)"
        exit 77
    }
    # sh records its pid and execs foxd, so the entries carry foxd's _PID.
    journal_run() {
        local name=$1
        shift
        since=$(date +%s)
        systemd-cat -t "$ident" sh -c \
            'echo $$ >"$0"; JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) exec "$@"' \
            "$dir/$name.pid" "$FOXD" "$@"
        rc=$?
        fpid=$(cat "$dir/$name.pid")
    }
    journal_run failing "${FAILING[@]}"
    [ $rc -eq 1 ] || fail "under the journal the failing start exited $rc, want 1"
    read_back "$fpid" _PID 4 "$dir/failing.json" || fail "journalctl shows no entries of pid $fpid"
    sleep 0.3 # a line foxd also wrote to the stream would arrive after its entries
    journalctl -q -o json --since "@$since" "_PID=$fpid" >"$dir/failing.json"
    check_journal journald "$dir/failing.json" "$fpid"
    ok "journald: error at 3, warning at 4, info at 6, each once, no stamp in MESSAGE"

    journal_run refused "${REFUSED[@]}"
    [ $rc -eq 2 ] || fail "under the journal the refused configuration exited $rc, want 2"
    read_back "$fpid" _PID 1 "$dir/refused.json" || fail "journalctl shows no entries of pid $fpid"
    sleep 0.3
    journalctl -q -o json --since "@$since" "_PID=$fpid" >"$dir/refused.json"
    problems=$(check_entries "$dir/refused.json" "$fpid")
    [ -z "$problems" ] && [ "$(entries "$dir/refused.json" "$fpid" 3 'train\.epochs')" -eq 1 ] ||
        fail "refused configuration under journald: $problems $(cat "$dir/refused.json")"
    ok "journald: a refused configuration is one entry at priority 3"
    echo "# the fallback to the stream (no journal socket) needs a machine without journald"
    exit 0
fi

# No journald. The stand-in needs the socket's directory and the right to bind there.
if [ -e "$SOCKET" ] || ! command -v python3 >/dev/null; then
    echo "SKIP: no journald runs and $SOCKET cannot be stood in for (exists, or no python3)"
    exit 77
fi
for d in /run/systemd "$JOURNAL_DIR"; do
    if [ ! -d "$d" ]; then
        mkdir -m 0755 "$d" 2>/dev/null || {
            echo "SKIP: no journald runs and $d cannot be created (not root?)"
            exit 77
        }
        made_dirs+=("$d")
    fi
done

# With no socket at all, sd_journal refuses each entry: the line goes to
# the stream with its priority as a "<N>" prefix, which journald reads.
run_foxd fallback 1 "${FAILING[@]}"
[ $rc -eq 1 ] || fail "failing start without a journal socket exited $rc, want 1"
bad=$(grep -Ev '^<[0-7]>' "$dir/fallback.err")
[ -z "$bad" ] && [ "$(grep -Ec "^<3>.*$ERR_TEXT" "$dir/fallback.err")" -eq 1 ] &&
    grep -q '^<4>INSECURE' "$dir/fallback.err" || fail "with no journal socket: $(cat "$dir/fallback.err")"
ok "journal socket missing: each line on the stream once, priority as <N> prefix"

# A socket file nobody listens on (journald gone): each entry is refused, the stream takes it.
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).bind(sys.argv[1])' \
    "$SOCKET" || fail "cannot make a socket file at $SOCKET"
bound=1
run_foxd stale 1 "${FAILING[@]}"
rm -f "$SOCKET"
bound=0
[ $rc -eq 1 ] || fail "failing start with a stale journal socket exited $rc, want 1"
bad=$(grep -Ev '^<[0-7]>' "$dir/stale.err")
[ -z "$bad" ] && [ "$(grep -Ec "^<3>.*$ERR_TEXT" "$dir/stale.err")" -eq 1 ] &&
    grep -q '^<4>INSECURE' "$dir/stale.err" || fail "with a stale journal socket: $(cat "$dir/stale.err")"
ok "journal socket refusing entries: each line on the stream once, priority as <N> prefix"

python3 "$HERE/journal_recv.py" "$SOCKET" "$dir/native.json" "$dir/ready" "$dir/stop" &
receiver=$!
for _ in $(seq 1 50); do
    [ -e "$dir/ready" ] && break
    kill -0 "$receiver" 2>/dev/null || break
    sleep 0.1
done
[ -e "$dir/ready" ] || {
    echo "SKIP: no journald runs and $SOCKET could not be bound"
    exit 77
}
bound=1
# journal_run NAME ARGS...: foxd in the background so that its pid is known.
journal_run() {
    local name=$1
    shift
    : >"$dir/$name.err"
    JOURNAL_STREAM=$(stat -c %d:%i "$dir/$name.err") "$FOXD" "$@" 2>>"$dir/$name.err" &
    fpid=$!
    wait $fpid
    rc=$?
}
journal_run failing "${FAILING[@]}"
[ $rc -eq 1 ] || fail "under the journal the failing start exited $rc, want 1"
failing_pid=$fpid
journal_run refused "${REFUSED[@]}"
[ $rc -eq 2 ] || fail "under the journal the refused configuration exited $rc, want 2"
refused_pid=$fpid
touch "$dir/stop"
wait "$receiver"
receiver=
grep -q MALFORMED "$dir/native.json" && fail "malformed datagrams: $(cat "$dir/native.json")"

check_journal "native socket" "$dir/native.json" "$failing_pid"
[ -s "$dir/failing.err" ] && fail "lines went to stderr as well: $(cat "$dir/failing.err")"
ok "native protocol: error at 3, warning at 4, info at 6, each once, no stamp, none on stderr"

problems=$(check_entries "$dir/native.json" "$refused_pid")
[ -z "$problems" ] && [ "$(entries "$dir/native.json" "$refused_pid" 3 'train\.epochs')" -eq 1 ] ||
    fail "refused configuration: $problems $(cat "$dir/native.json")"
[ -s "$dir/refused.err" ] && fail "the refused configuration went to stderr too: $(cat "$dir/refused.err")"
ok "native protocol: a refused configuration is one entry at priority 3, none on stderr"
