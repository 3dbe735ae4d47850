#!/bin/bash
# test_ops.sh FOXD FOXCTL — operating foxd safely, end to end on the CPU
# backend: who may own the directory of its sockets, whom foxctl hands a
# token to, which listeners need a token, which files a remote client may
# name, and how the daemon holds up against descriptor floods and kills
# during a save. Checks that need a second local user run only as root
# (they become nobody with setpriv) and are skipped with a message else.
set -u
FOXD=$(realpath "$1") FOXCTL=$(realpath "$2")
. "$(dirname "$(realpath "$0")")/lib.sh"

test_init foxd-ops
chmod 755 "$dir"
TINY=(--backend cpu --set model.h1=32 --set model.h2=16 --set model.head_hidden=16
      --set model.aux_hidden=8 --set train.batch=16 --set env.n_envs=8
      --set train.learning_starts=64 --set data.synth_bars=3000
      --set train.steps_per_epoch=20 --set train.epochs=1 --set daemon.metrics_interval_ms=0)
free_port() { echo $((20000 + RANDOM % 30000)); }
as_root=0
[ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null && as_root=1
# as_nobody CMD...: run CMD as uid/gid 65534 without supplementary groups.
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# --------------------------------------------------- the runtime directory
mkdir -m 0777 "$dir/open"
chmod 0777 "$dir/open"
"$FOXD" "${TINY[@]}" --set "daemon.runtime_dir=$dir/open" --set "daemon.state_dir=$dir/st" \
    2>"$dir/refused.log"
[ $? -eq 2 ] && grep -q "writable by everyone" "$dir/refused.log" ||
    fail "foxd started in a runtime directory everyone may write to: $(cat "$dir/refused.log")"
ok "a world-writable runtime directory is refused"

foxd_start --url "ipc://$dir/rt/foxd.sock" -- "${TINY[@]}" --set "daemon.runtime_dir=$dir/rt" \
    --set "daemon.state_dir=$dir/st"
[ "$(stat -c %a "$dir/rt")" = 700 ] || fail "runtime directory made with mode $(stat -c %a "$dir/rt")"
ok "foxd makes its runtime directory 0700"
kill "$pid"; wait "$pid"; pid=

if [ $as_root -eq 1 ]; then
    mkdir "$dir/theirs"
    chown 65534:65534 "$dir/theirs"
    "$FOXD" "${TINY[@]}" --set "daemon.runtime_dir=$dir/theirs" --set "daemon.state_dir=$dir/st" \
        2>"$dir/refused.log"
    [ $? -eq 2 ] && grep -q "belongs to uid 65534" "$dir/refused.log" ||
        fail "foxd started in a directory another user owns: $(cat "$dir/refused.log")"
    ok "a runtime directory owned by another user is refused"

    # Another user's listener where foxctl looks: no token goes to it.
    mkdir -p "$dir/squat/st"
    chown -R 65534:65534 "$dir/squat"
    chmod 700 "$dir/squat"
    squat="ipc://$dir/squat/foxd.sock"
    as_nobody "$FOXD" "${TINY[@]}" --listen "$squat" --pub "ipc://$dir/squat/ev.sock" \
        --set "daemon.runtime_dir=$dir/squat" --set "daemon.state_dir=$dir/squat/st" \
        2>>"$dir/foxd.log" &
    pid=$!
    for _ in $(seq 1 300); do
        "$FOXCTL" --timeout 1000 --url "$squat" version >/dev/null 2>&1 && break
        sleep 0.1
    done
    out=$("$FOXCTL" --url "$squat" --token s3cret status 2>&1)
    rc=$?
    [ $rc -eq 3 ] && [[ $out == *"not sending it the token"* ]] ||
        fail "foxctl sent a token to another user's socket (rc $rc): $out"
    ok "foxctl does not send a token to a socket another user owns"
    kill "$pid"; wait "$pid"; pid=
else
    echo "# not root: the checks with a second local user are skipped"
fi
