#!/bin/bash
# test_ops.sh FOXD FOXCTL PART — operating foxd safely, end to end on the CPU
# backend: who may own the directory of its sockets, whom foxctl hands a
# token to, which listeners need a token, which files a remote client may
# name, and how the daemon holds up against descriptor floods and kills
# during a save. Checks that need a second local user run only as root
# (they become nobody with setpriv) and are skipped with a message else.
#
# PART names one of the part_* functions below; each is a meson test of its
# own (tests/meson.build), with a scratch directory and foxds of its own, so
# that the parts run side by side.
set -u
FOXD=$(realpath "$1") FOXCTL=$(realpath "$2") PART=${3:-}
. "$(dirname "$(realpath "$0")")/lib.sh"

TINY=(--backend cpu --set model.h1=32 --set model.h2=16 --set model.head_hidden=16
      --set model.aux_hidden=8 --set train.batch=16 --set env.n_envs=8
      --set train.learning_starts=64 --set data.synth_bars=3000
      --set train.steps_per_epoch=20 --set train.epochs=1 --set daemon.metrics_interval_ms=0
      "${REPLAY[@]}")
as_root=0
[ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null && as_root=1
# Run as uid/gid 65534 without supplementary groups (setpriv execs: $! is foxd).
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
FLOOD="$(dirname "$(realpath "$0")")/flood.py"
# The parts' foxd listens here ($dir is set when the part starts).
ctl() { timeout -k 5 60 "$FOXCTL" --url "$url" --timeout 10000 "$@"; }
nng() { timeout -k 5 30 nngcat --req --dial "$url" --recv-timeout 10 --ascii "$@"; }

# --------------------------------------------------- the runtime directory
part_runtime() {
    mkdir -m 0777 "$dir/open"
    chmod 0777 "$dir/open"
    "$FOXD" "${TINY[@]}" --set "daemon.runtime_dir=$dir/open" --set "daemon.state_dir=$dir/st" \
        2>"$dir/refused.log"
    [ $? -eq 2 ] && grep -q "$dir/open is writable by everyone" "$dir/refused.log" &&
        grep -q "RuntimeDirectory=.*daemon.runtime_dir" "$dir/refused.log" ||
        fail "foxd started in a runtime directory everyone may write to: $(cat "$dir/refused.log")"
    ok "a world-writable runtime directory is refused, naming it and what to do"

    foxd_start --url "ipc://$dir/rt/foxd.sock" -- "${TINY[@]}" --set "daemon.runtime_dir=$dir/rt" \
        --set "daemon.state_dir=$dir/st"
    [ "$(stat -c %a "$dir/rt")" = 700 ] || fail "runtime directory made with mode $(stat -c %a "$dir/rt")"
    ok "foxd makes its runtime directory 0700"
    # A second foxd on the same state directory, with sockets of its own, would lose the first's updates.
    timeout -k 5 60 "$FOXD" "${TINY[@]}" --set "daemon.runtime_dir=$dir/rt2" --set "daemon.state_dir=$dir/st" \
        2>"$dir/refused.log"
    rc=$?
    [ $rc -eq 2 ] && grep -q "daemon.state_dir $dir/st is in use by another process (pid $pid," \
        "$dir/refused.log" ||
        fail "a second foxd on one state directory: exit $rc, $(cat "$dir/refused.log")"
    "$FOXCTL" --url "ipc://$dir/rt/foxd.sock" --timeout 5000 status >/dev/null ||
        fail "the first foxd stopped answering after a second was refused"
    ok "a second foxd on the same state directory is refused, naming it and the holder's pid"
    kill "$pid"; wait "$pid"; pid=

    if [ $as_root -eq 1 ]; then
        mkdir "$dir/theirs"
        chown 65534:65534 "$dir/theirs"
        "$FOXD" "${TINY[@]}" --set "daemon.runtime_dir=$dir/theirs" --set "daemon.state_dir=$dir/st" \
            2>"$dir/refused.log"
        [ $? -eq 2 ] && grep -q "$dir/theirs belongs to uid 65534" "$dir/refused.log" &&
            grep -q "RuntimeDirectory=.*daemon.runtime_dir" "$dir/refused.log" ||
            fail "foxd started in a directory another user owns: $(cat "$dir/refused.log")"
        ok "a squatted runtime directory is refused, naming it and what to do"

        # Another user's listener where foxctl looks: no token goes to it.
        mkdir -p "$dir/squat/st"
        chown -R 65534:65534 "$dir/squat"
        chmod 700 "$dir/squat"
        squat="ipc://$dir/squat/foxd.sock"
        "${NOBODY[@]}" "$FOXD" "${TINY[@]}" --listen "$squat" --pub "ipc://$dir/squat/ev.sock" \
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
}

# ------------------------------------------- listeners that need a token
part_tokens() {
    port=$(free_port)
    "$FOXD" "${TINY[@]}" --set "daemon.runtime_dir=$dir/rt" --set "daemon.state_dir=$dir/st" \
        --listen "tcp://127.0.0.1:$port" 2>"$dir/refused.log"
    [ $? -eq 2 ] && grep -q "has no authentication" "$dir/refused.log" ||
        fail "a loopback tcp:// listener without a token was not refused: $(cat "$dir/refused.log")"
    ok "a tcp:// control listener without a token is refused"
    "$FOXD" "${TINY[@]}" --set "daemon.runtime_dir=$dir/rt" --set "daemon.state_dir=$dir/st" \
        --listen "tcp://127.evil.example:$port" --set daemon.token=x 2>"$dir/refused.log"
    [ $? -eq 2 ] && grep -q "allow_insecure_remote" "$dir/refused.log" ||
        fail "tcp://127.evil.example passed as loopback: $(cat "$dir/refused.log")"
    ok "a host name beginning with 127. is not loopback"
    "$FOXD" "${TINY[@]}" --set "daemon.runtime_dir=$dir/rt" --set "daemon.state_dir=$dir/st" \
        --set daemon.token= 2>"$dir/refused.log"
    [ $? -eq 2 ] && grep -q "daemon.token is empty" "$dir/refused.log" ||
        fail "an empty daemon.token was accepted: $(cat "$dir/refused.log")"
    ok "an empty daemon.token is an error"
    printf 'tok\n' > "$dir/token"
    chmod 644 "$dir/token"
    "$FOXD" "${TINY[@]}" --set "daemon.runtime_dir=$dir/rt" --set "daemon.state_dir=$dir/st" \
        --set "daemon.token_file=$dir/token" 2>"$dir/refused.log"
    [ $? -eq 2 ] && grep -q "others may not" "$dir/refused.log" ||
        fail "a token file everyone may read was accepted: $(cat "$dir/refused.log")"
    ok "a token file others may read is refused"
    chmod 600 "$dir/token"
    start_tcp_without_token() {
        foxd_start --url "tcp://127.0.0.1:$port" -- "${TINY[@]}" --set "daemon.runtime_dir=$dir/rt" \
            --set "daemon.state_dir=$dir/st" --listen "tcp://127.0.0.1:$port" \
            --set daemon.allow_tcp_without_token=true
    }
    # The first port chosen is held by another program when foxd binds it, as a
    # port may be taken between its choice and the bind: the start moves on.
    hold='import socket, time; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()'
    python3 -c "$hold; print(s.getsockname()[1], flush=True); time.sleep(300)" >"$dir/held" &
    holder=$!
    for _ in $(seq 1 50); do [ -s "$dir/held" ] && break; sleep 0.1; done
    held=$(cat "$dir/held")
    eval "lib_$(declare -f free_port)"
    free_port() { [ -e "$dir/held.given" ] && { lib_free_port; return; }; : >"$dir/held.given"; echo "$held"; }
    on_free_port start_tcp_without_token
    free_port() { lib_free_port; }
    kill "$holder"; wait "$holder" 2>/dev/null
    [ -n "$held" ] && [ "$port" != "$held" ] && grep -q "listen tcp://127.0.0.1:$held: Address in use" "$dir/foxd.log" ||
        fail "a start on a taken port ($held) did not move to another ($port)"
    ok "a port taken before foxd binds it: the start moves to another"
    grep -q "INSECURE: tcp://127.0.0.1:$port" "$dir/foxd.log" || fail "no warning for a tcp listener without a token"
    ok "daemon.allow_tcp_without_token opens it, with a warning"
    kill "$pid"; wait "$pid"; pid=
}

# ------------------------------------ supplementary groups on ipc
part_groups() {
    # A user who is in foxd's group only as a supplementary group may control it.
    member= group=
    if [ $as_root -eq 1 ]; then
        while IFS=: read -r gname _ gid members; do
            for m in ${members//,/ }; do
                muid=$(id -u "$m" 2>/dev/null) || continue
                [ "$muid" -ne 0 ] && [ "$muid" -ne 65534 ] && [ "$(id -g "$m")" != "$gid" ] &&
                    { member=$m; group=$gid; break 2; }
            done
        done < <(getent group)
    fi
    if [ -n "$member" ]; then
        mkdir -p "$dir/grp/st"
        chown -R 65534:"$group" "$dir/grp"
        chmod 750 "$dir/grp"
        gurl="ipc://$dir/grp/foxd.sock"
        setpriv --reuid=65534 --regid="$group" --clear-groups "$FOXD" "${TINY[@]}" --listen "$gurl" \
            --pub "ipc://$dir/grp/ev.sock" --set "daemon.runtime_dir=$dir/grp" \
            --set "daemon.state_dir=$dir/grp/st" 2>>"$dir/foxd.log" &
        pid=$!
        for _ in $(seq 1 300); do
            "$FOXCTL" --timeout 1000 --url "$gurl" version >/dev/null 2>&1 && break
            sleep 0.1
        done
        out=$(setpriv --reuid="$member" --regid="$(id -g "$member")" --init-groups \
            "$FOXCTL" --url "$gurl" config set train.epochs=2 2>&1) ||
            fail "$member (supplementary group $group) was refused: $out"
        ok "a member of foxd's group by a supplementary group may control it ($member)"
        kill "$pid"; wait "$pid"; pid=
    else
        # The part checks nothing else: meson reports it skipped.
        echo "# no user with a supplementary group (or not root): group check skipped"
        exit 77
    fi
}

# --------------------------------------- files a remote client may name
part_files() {
    mkdir -p "$dir/data" "$dir/st"
    mkfifo "$dir/data/pipe" "$dir/st/pipe.ckpt"
    ln -s /etc/passwd "$dir/data/passwd"
    head -c $((2 << 20)) /dev/zero > "$dir/data/big.csv"
    foxd_start --url "$url" -- "${TINY[@]}" --listen "$url" --pub "ipc://$dir/ev.sock" \
        --set "daemon.runtime_dir=$dir/rt" --set "daemon.state_dir=$dir/st" \
        --set "daemon.data_dir=$dir/data" --set daemon.data_max_mb=1
    a=$(ctl config set data.source=/etc/passwd 2>&1) && fail "data.source=/etc/passwd accepted"
    b=$(ctl config set data.source=/etc/no-such-file 2>&1) && fail "data.source outside accepted"
    [[ $a == *"EPERM"*"inside the data directory"* ]] && [ "${a//passwd/X}" = "${b//no-such-file/X}" ] ||
        fail "a path outside the data directory: '$a' / '$b'"
    ok "a data path outside the data directory is refused alike whether it exists or not"
    out=$(ctl config set data.source=/dev/zero 2>&1) && fail "data.source=/dev/zero accepted"
    ok "/dev/zero is refused"
    out=$(ctl config set data.source=../st/x 2>&1); [[ $out == *"'..'"* ]] || fail "'..' accepted: $out"
    ok "'..' in a data path is refused"
    out=$(ctl config set data.source=passwd 2>&1); [[ $out == *"leads out of the data directory"* ]] ||
        fail "a symlink out of the data directory: $out"
    ok "a symlink out of the data directory is refused"
    out=$(ctl config set data.source=pipe 2>&1); [[ $out == *"not a regular file"* ]] ||
        fail "a FIFO as data: $out"
    ok "a FIFO as data is refused"
    out=$(ctl config set data.source=big.csv 2>&1); [[ $out == *"larger than 1 MiB"* ]] ||
        fail "a file beyond daemon.data_max_mb: $out"
    ok "a data file beyond daemon.data_max_mb is refused"
    for gen in randomwalk garch synthetic; do
        ctl config set "data.source=$gen" >/dev/null || fail "the generator name $gen refused as data.source"
    done
    ok "generator names (randomwalk, garch, synthetic) are no paths and stay allowed"
    out=$(ctl backtest --daemon --checkpoint foxd.ckpt --data /etc/passwd 2>&1) &&
        fail "backtest --data /etc/passwd accepted"
    [[ $out == *"inside the data directory"* ]] || fail "backtest data outside the data directory: $out"
    ok "a backtest's data outside the data directory is refused"
    out=$(ctl --timeout 5000 checkpoint load pipe.ckpt 2>&1)
    [ $? -eq 1 ] && [[ $out == *"not a regular file"* ]] || fail "a FIFO as checkpoint: $out"
    ctl status >/dev/null || fail "no status after a FIFO checkpoint"
    ok "a FIFO as checkpoint is refused at once, and foxd goes on"
    kill "$pid"; wait "$pid"; pid=
    timeout 20 "$FOXD" --once "${TINY[@]}" --set "data.source=$dir/data/pipe" >/dev/null 2>"$dir/once.log"
    rc=$?
    [ $rc -ne 124 ] && grep -q "not a regular file" "$dir/once.log" ||
        fail "foxd --once on a FIFO (rc $rc): $(cat "$dir/once.log")"
    ok "the data loader refuses a FIFO instead of hanging"
}

# ------------------------------------------ strings, refusals in the log
part_strings() {
    foxd_start --url "$url" -- "${TINY[@]}" --listen "$url" --pub "ipc://$dir/ev.sock" \
        --set "daemon.runtime_dir=$dir/rt" --set "daemon.state_dir=$dir/st" --set daemon.token=right
    out=$(nng --data $'{"v":1,"id":1,"cmd":"vers\xffion"}')
    [[ $out == *'"code":"EPROTO"'* && $out != *$'\xff'* ]] || fail "invalid UTF-8: $out"
    ok "invalid UTF-8 is refused with EPROTO and not echoed"
    out=$(nng --data '{"v":1,"id":1,"cmd":"version\u0000garbage"}')
    [[ $out == *'"code":"EPROTO"'* ]] || fail "\\u0000 in a command: $out"
    ok "an escaped NUL is refused with EPROTO"
    before=$(grep -c "refused pause" "$dir/foxd.log")
    timeout -k 5 60 nngcat --req --dial "$url" --recv-timeout 10 --count 300 --interval 0 \
        --data '{"v":1,"id":3,"cmd":"pause","token":"wrong"}' >/dev/null 2>&1
    sleep 1.2
    nng --data '{"v":1,"id":4,"cmd":"pause","token":"wrong"}' >/dev/null
    logged=$(( $(grep -c "refused pause" "$dir/foxd.log") - before ))
    [ "$logged" -ge 1 ] && [ "$logged" -le 10 ] && grep -q "more refusals not logged" "$dir/foxd.log" ||
        fail "301 refused requests made $logged log lines"
    ok "301 refused requests make $logged log lines, with a count of the rest"
    kill "$pid"; wait "$pid"; pid=
}

# ---------------------------------------- leaks: temp files and memory
part_leaks() {
    mkdir -p "$dir/st/runs/r1"
    dead=$(sh -c 'echo $$')   # a pid that has just ended
    : > "$dir/st/foxd.ckpt.tmp.$dead"
    : > "$dir/st/runs/r1/fold0.ckpt.tmp.$dead"
    : > "$dir/st/other.ckpt.tmp.$$"            # a live writer's: stays
    foxd_start --url "$url" -- "${TINY[@]}" --listen "$url" --pub "ipc://$dir/ev.sock" \
        --set "daemon.runtime_dir=$dir/rt" --set "daemon.state_dir=$dir/st" --set daemon.token=right
    [ ! -e "$dir/st/foxd.ckpt.tmp.$dead" ] && [ ! -e "$dir/st/runs/r1/fold0.ckpt.tmp.$dead" ] &&
        [ -e "$dir/st/other.ckpt.tmp.$$" ] || fail "stale temp files: $(find "$dir/st" -name '*.tmp.*')"
    ok "temp files of dead writers are removed at start, a live writer's kept"
    rss() { awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$pid/status"; }
    rss0=$(rss)
    head -c $((15 << 20)) /dev/zero | tr '\0' ' ' > "$dir/huge"
    for _ in $(seq 1 32); do
        timeout -k 5 60 nngcat --req --dial "$url" --recv-timeout 5 --file "$dir/huge" >/dev/null 2>&1 &
    done
    wait $(jobs -p | grep -v "^$pid$") 2>/dev/null
    sleep 1
    rss1=$(rss)
    rm -f "$dir/huge"
    [ $((rss1 - rss0)) -lt 64 ] || fail "32 requests of 15 MiB left foxd $((rss1 - rss0)) MiB larger"
    ctl status >/dev/null || fail "no status after 32 huge requests"
    ok "32 requests of 15 MiB leave foxd $((rss1 - rss0)) MiB larger (${rss0} -> ${rss1} MiB)"
    kill "$pid"; wait "$pid"; pid=

    # Kill foxd while it writes checkpoints; the next start cleans up what is left.
    foxd_start --url "$url" -- "${TINY[@]}" --listen "$url" --pub "ipc://$dir/ev.sock" \
        --set "daemon.runtime_dir=$dir/rt" --set "daemon.state_dir=$dir/st" --set daemon.token=right \
        --set model.h1=512 --set model.h2=512 --set daemon.resume=false
    # foxd dies under the saves, so no answer comes: their clients give up after 2 s, not 10.
    for i in $(seq 1 10); do
        ctl --token right --timeout 2000 checkpoint save "k$i.ckpt" >/dev/null 2>&1 &
        sleep 0.0$((RANDOM % 9))
    done
    kill -9 "$pid"; wait "$pid" 2>/dev/null; pid=
    wait
    left=$(find "$dir/st" -name '*.ckpt.tmp.*' ! -name "other.ckpt.tmp.$$" | wc -l)
    foxd_start --url "$url" -- "${TINY[@]}" --listen "$url" --pub "ipc://$dir/ev.sock" \
        --set "daemon.runtime_dir=$dir/rt" --set "daemon.state_dir=$dir/st" --set daemon.token=right
    n=$(find "$dir/st" -name '*.ckpt.tmp.*' ! -name "other.ckpt.tmp.$$" | wc -l)
    [ "$n" -eq 0 ] || fail "$n temp files left after a restart"
    ok "a kill during saves left $left temp file(s); the restart removed them"
    kill "$pid"; wait "$pid"; pid=
}

# ---------------------------------------------------- descriptor floods
part_floods() {
    # The three floods below each have a foxd, ports and a scratch directory of their own (its
    # foxd.log, sockets and state directories), so they run side by side: each in the
    # background, its output kept, shown in order (its checks counted here) once all three end.
    local floods=() flood rc=0 line
    flood_apart() {
        local name=$1
        shift
        mkdir "$dir/$name"
        (
            dir=$dir/$name pid=
            url="ipc://$dir/foxd.sock"
            trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null' EXIT
            "$@"
        ) >"$dir/$name.out" 2>&1 &
        floods+=("$name:$!")
    }
    flood_apart idle flood_idle
    flood_apart handshake1 flood_during_run 1
    flood_apart handshake0 flood_during_run 0
    for flood in "${floods[@]}"; do
        wait "${flood#*:}" || rc=1
    done
    for flood in "${floods[@]}"; do
        while IFS= read -r line; do
            case $line in
            "ok "[0-9]*" - "*) ok "${line#ok * - }" ;;
            *) printf '%s\n' "$line" ;;
            esac
        done <"$dir/${flood%:*}.out"
    done
    [ $rc -eq 0 ] || exit 1
}

# A foxd at 256 descriptors: 400 idle clients on its tcp listener, then a flood of silent ones
# that SIGTERM must get through.
flood_idle() {
    start_at_256_descriptors() {
        log_mark
        (ulimit -n 256 && exec "$FOXD" "${TINY[@]}" --listen "$url" --listen "tcp://127.0.0.1:$port" \
            --pub "ipc://$dir/ev.sock" --set "daemon.runtime_dir=$dir/rt" \
            --set "daemon.state_dir=$dir/st" --set daemon.token=right \
            --set daemon.max_connections=64) 2>>"$dir/foxd.log" &
        pid=$!
        foxd_wait --url "$url"
    }
    on_free_port start_at_256_descriptors
    out=$(python3 "$FLOOD" 127.0.0.1 "$port" 400 1 3)
    ctl status >/dev/null || fail "ipc status failed during a flood of 400 idle tcp clients ($out)"
    ok "400 idle tcp clients at 256 descriptors: ipc still answers ($(echo $out))"
    # Silent connections (no SP handshake) fill every descriptor until nng drops them;
    # the stop checkpoint still gets written from the reserve.
    python3 "$FLOOD" 127.0.0.1 "$port" 300 0 6 >/dev/null &
    flood=$!
    sleep 2
    kill -TERM "$pid"; wait "$pid"; rc=$?; pid=
    wait "$flood"
    [ $rc -eq 0 ] && [ -s "$dir/st/foxd.ckpt" ] ||
        fail "SIGTERM under a descriptor flood: exit $rc, checkpoint $(ls -l "$dir/st/foxd.ckpt" 2>&1)"
    ok "SIGTERM with every descriptor taken still writes the checkpoint and exits 0"
}

# flood_during_run HANDSHAKE: a flood beyond foxd's 256 descriptors during a run, 200 clients on
# each of two tcp listeners: every epoch still reaches epochs.csv and both metrics.jsonl files,
# and SIGTERM writes the stop checkpoint.
#   handshake 1: the clients finish the SP handshake and hold on. The two listeners'
#     daemon.max_connections (128 each) would hold every descriptor; they share those below
#     the limit instead, and a fresh ipc client is answered during the flood.
#   handshake 0: the clients stay silent, so nng holds each one unnegotiated and every
#     descriptor is taken: the records and the checkpoint are written from the reserve.
flood_during_run() {
    local handshake=$1 flood1 flood2
    st=$dir/st-flood$handshake
    start_training_at_256() {
        port2=$(free_port)
        log_mark
        (ulimit -n 256 && exec "$FOXD" "${TINY[@]}" --listen "$url" --listen "tcp://127.0.0.1:$port" \
            --listen "tcp://127.0.0.1:$port2" --pub "ipc://$dir/ev.sock" \
            --set "daemon.runtime_dir=$dir/rt" --set "daemon.state_dir=$st" \
            --set daemon.token=right) 2>>"$dir/foxd.log" &
        pid=$!
        foxd_wait --url "$url"
    }
    on_free_port start_training_at_256
    ctl --token right run --detach --folds 0 --epochs 400 --steps 20 >/dev/null || fail "run --detach"
    python3 "$FLOOD" 127.0.0.1 "$port" 200 "$handshake" 8 >/dev/null &
    flood1=$!
    python3 "$FLOOD" 127.0.0.1 "$port2" 200 "$handshake" 8 >/dev/null &
    flood2=$!
    sleep 3
    if [ "$handshake" = 1 ]; then
        ctl status >/dev/null || fail "a fresh ipc client got no answer during the flood"
    fi
    sleep 2
    stop_and_check_records "$st" "a flood (handshake $handshake)"
    wait "$flood1" "$flood2"
    ok "2 x 200 clients (handshake $handshake) beyond 256 descriptors during a run: $rows epochs recorded, stop checkpoint written"
}

# ---------------------------------------------------- idle connections
part_connections() {
    # 20 clients finish the handshake and say nothing: foxd closes them after
    # daemon.idle_timeout_s, while one client asking every 0.3 s keeps its
    # connection throughout.
    start_with_idle_timeout() {
        foxd_start --url "$url" -- "${TINY[@]}" --listen "$url" --listen "tcp://127.0.0.1:$port" \
            --pub "ipc://$dir/ev.sock" --set "daemon.runtime_dir=$dir/rt" \
            --set "daemon.state_dir=$dir/st" --set daemon.token=right --set daemon.idle_timeout_s=2
    }
    on_free_port start_with_idle_timeout
    out=$(python3 "$FLOOD" 127.0.0.1 "$port" 20 1 5 0.3)
    closed=$(sed -n 's/^closed //p' <<<"$out")
    active=$(sed -n 's/^active //p' <<<"$out")
    [ "$closed" = 20 ] || fail "idle connections after daemon.idle_timeout_s=2: $(echo $out)"
    [ -n "$active" ] && [ "${active%/*}" = "${active#*/}" ] && [ "${active%/*}" -ge 5 ] ||
        fail "the active client lost its connection: $(echo $out)"
    grep -q "idle for 2 s (daemon.idle_timeout_s)" "$dir/foxd.log" || fail "no log line for the idle close"
    ok "20 idle clients closed after 2 s, an active one answered $active on one connection"
    kill "$pid"; wait "$pid"; pid=

    # A client that keeps asking is never idle: daemon.max_connection_age_s
    # closes its connection between two requests all the same, so that busy
    # clients cannot hold a listener's share for good.
    start_with_max_age() {
        foxd_start --url "$url" -- "${TINY[@]}" --listen "$url" --listen "tcp://127.0.0.1:$port" \
            --pub "ipc://$dir/ev.sock" --set "daemon.runtime_dir=$dir/rt" \
            --set "daemon.state_dir=$dir/st" --set daemon.token=right --set daemon.max_connection_age_s=2
    }
    on_free_port start_with_max_age
    out=$(python3 "$FLOOD" 127.0.0.1 "$port" 0 1 6 0.3)
    active=$(sed -n 's/^active //p' <<<"$out")
    [ -n "$active" ] && [ "$((${active#*/} - ${active%/*}))" -eq 1 ] && [ "${active%/*}" -ge 3 ] ||
        fail "a busy connection past daemon.max_connection_age_s=2: $(echo $out)"
    grep -q "connected 2 s ago (daemon.max_connection_age_s)" "$dir/foxd.log" ||
        fail "no log line for the age close"
    ok "a connection asking every 0.3 s closed after 2 s between requests (answered $active)"
    kill "$pid"; wait "$pid"; pid=

    # One address may hold a quarter of a listener's connections: 100 clients
    # from 127.0.0.1 keep 10 of daemon.max_connections=40, and a client from
    # 127.0.0.2 still gets a connection and its answers.
    start_with_40_connections() {
        foxd_start --url "$url" -- "${TINY[@]}" --listen "$url" --listen "tcp://127.0.0.1:$port" \
            --pub "ipc://$dir/ev.sock" --set "daemon.runtime_dir=$dir/rt" \
            --set "daemon.state_dir=$dir/st" --set daemon.token=right --set daemon.max_connections=40
    }
    on_free_port start_with_40_connections
    out=$(python3 "$FLOOD" 127.0.0.1 "$port" 100 1 3 0.3 127.0.0.2)
    closed=$(sed -n 's/^closed //p' <<<"$out")
    active=$(sed -n 's/^active //p' <<<"$out")
    [ "$closed" = 90 ] || fail "100 clients from one address, daemon.max_connections=40: $(echo $out)"
    [ -n "$active" ] && [ "${active%/*}" = "${active#*/}" ] && [ "${active%/*}" -ge 3 ] ||
        fail "a client from another address lost its connection: $(echo $out)"
    ok "100 clients from one address kept 10 of 40 connections; another address answered $active"
    kill "$pid"; wait "$pid"; pid=
}

# ------------------------------------------------------------------ logs
part_logs() {
    mkdir -m 0777 "$dir/open"
    chmod 0777 "$dir/open"
    "$FOXD" "${TINY[@]}" --set "daemon.runtime_dir=$dir/open" --set "daemon.state_dir=$dir/st" \
        2>"$dir/refused.log"
    n=$(grep -c "writable by everyone" "$dir/refused.log")
    [ "$n" -eq 1 ] || fail "a start-up error printed $n times: $(cat "$dir/refused.log")"
    grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z err: .*writable by everyone' \
        "$dir/refused.log" || fail "log line without an ISO-8601 UTC timestamp: $(cat "$dir/refused.log")"
    ok "a start-up error is printed once, after an ISO-8601 UTC timestamp and its level"
}

# -------------------------------------- runtime changes survive a restart
part_restart() {
    rm -rf "$dir/kept"; mkdir -p "$dir/kept"
    # TINY without model.h1: the command line would win over the kept change.
    kept=(--backend cpu --set model.h2=16 --set model.head_hidden=16 --set model.aux_hidden=8
          --set train.batch=16 --set env.n_envs=8 --set train.learning_starts=64
          --set data.synth_bars=3000 --set daemon.metrics_interval_ms=0 "${REPLAY[@]}"
          --listen "$url" --pub "ipc://$dir/ev.sock" --set "daemon.runtime_dir=$dir/rt"
          --set "daemon.state_dir=$dir/kept" --set daemon.token=right)
    foxd_start --url "$url" -- "${kept[@]}"
    ctl --token right config set model.h1=48 >/dev/null || fail "config set model.h1=48"
    kill -TERM "$pid"; wait "$pid"; pid=
    [ -s "$dir/kept/foxd.ckpt" ] || fail "no stop checkpoint"
    foxd_start --url "$url" -- "${kept[@]}"
    out=$(ctl --json config get model.h1)
    [[ $out == *'"model.h1":48'* ]] || fail "model.h1 after a restart: $out"
    grep -q "resumed from $dir/kept/foxd.ckpt" "$dir/foxd.log" || fail "the restart did not resume"
    ok "config set is kept across a restart, which resumes the checkpoint"
    # Overrides that cannot be replaced (a directory in the file's place: root too is refused).
    mv "$dir/kept/foxd.overrides.json" "$dir/kept/saved.json"
    mkdir "$dir/kept/foxd.overrides.json"
    out=$(ctl --token right config set --force model.h1=40 2>&1) &&
        fail "config set replied as if applied with overrides it cannot write: $out"
    [[ $out == *"could not be kept for the next start"*foxd.overrides.json* ]] ||
        fail "config set with overrides it cannot write: $out"
    out=$(ctl --json config get model.h1)
    [[ $out == *'"model.h1":48'* ]] || fail "a config set that could not be kept changed the config: $out"
    rmdir "$dir/kept/foxd.overrides.json"
    mv "$dir/kept/saved.json" "$dir/kept/foxd.overrides.json"
    ok "config set fails and changes nothing when its overrides cannot be written"
    # A backtest answers when done: with foxd held for longer than the 5 s of other requests,
    # backtest --daemon still waits for it by default, and says what a timeout leaves behind.
    bt() { "$FOXCTL" --url "$url" --token right "$@" backtest --daemon --checkpoint foxd.ckpt; }
    kill -STOP "$pid"
    bt >"$dir/bt.out" 2>"$dir/bt.err" &
    bt_pid=$!
    sleep 7
    kill -CONT "$pid"
    wait "$bt_pid" || fail "backtest --daemon with foxd held 7 s: exit $?, $(cat "$dir/bt.err")"
    grep -q "run directory $dir/kept/runs/" "$dir/bt.err" || fail "backtest --daemon: $(cat "$dir/bt.err")"
    ok "backtest --daemon waits for a backtest longer than 5 s by default"
    kill -STOP "$pid"
    out=$(bt --timeout 1000 2>&1)
    rc=$?
    kill -CONT "$pid"
    [ $rc -eq 3 ] && [[ $out == *"goes on with the backtest"*"--timeout"* ]] ||
        fail "backtest --daemon past its --timeout: rc $rc, $out"
    # A stopped foxd never finishes the connection's handshake: --timeout bounds that wait too.
    [[ $out == *"did not complete the connection within 1000 ms"* ]] ||
        fail "backtest --daemon to a stopped foxd should give up at its --timeout: $out"
    ok "backtest --daemon past its --timeout says the backtest goes on in foxd"
    for _ in $(seq 1 100); do
        ctl --json status | grep -q '"phase":"backtest"' || break
        sleep 0.2
    done
    kill -TERM "$pid"; wait "$pid"; pid=
    mv "$dir/kept/foxd.overrides.json" "$dir/kept/gone.json"
    "$FOXD" "${kept[@]}" 2>"$dir/refused.log"
    rc=$?
    [ $rc -ne 0 ] && grep -q "cannot resume: .*layout" "$dir/refused.log" ||
        fail "a checkpoint of another layout (rc $rc): $(tail -3 "$dir/refused.log")"
    ok "a resume that cannot happen stops the start and says why (exit $rc)"
}

# ------------------------------------------------------------- progress
part_progress() {
    SPAWN=(--backend cpu --set model.h1=32 --set model.h2=16 --set data.synth_bars=3000
           --set train.learning_starts=64 --set train.batch=16 --set env.n_envs=8 "${REPLAY[@]}")
    if command -v script >/dev/null; then
        # script gives foxctl a terminal, where it draws its bar.
        TMPDIR=$dir timeout -k 5 300 script -qfec "$(printf '%q ' "$FOXCTL" run --spawn --folds 0,1 \
            --epochs 2 --steps 40 "${SPAWN[@]}" --set daemon.step_event_ms=50)" /dev/null \
            >"$dir/tty.out" 2>&1 || fail "run --spawn on a terminal: $(tail -5 "$dir/tty.out")"
        bars=$(tr '\r' '\n' < "$dir/tty.out" | grep -a '\[[#.]*\]')
        [ -n "$bars" ] || fail "no progress bar: $(tail -5 "$dir/tty.out")"
        grep -aq 'cpu  fold [0-9:]*, [0-9:?]* left  walk [0-9:]*, [0-9:?]* left' <<<"$bars" ||
            fail "the bar lacks backend, elapsed or time left: $(tail -2 <<<"$bars")"
        ! grep -aq 'fold -1' <<<"$bars" || fail "a stray 'fold -1' bar"
        ok "the progress bar shows the backend, elapsed and time left for the fold and the walk"
    else
        echo "# script (util-linux) not installed: the terminal bar is not checked"
    fi
    TMPDIR=$dir "$FOXCTL" run --spawn --folds 0 --epochs 50 --steps 2000 "${SPAWN[@]}" \
        >/dev/null 2>"$dir/spawn.err" &
    ctlpid=$!
    for _ in $(seq 1 300); do grep -q "begins" "$dir/spawn.err" && break; sleep 0.1; done
    spawned=$(sed -n 's/.*private foxd (pid \([0-9]*\)).*/\1/p' "$dir/spawn.err")
    kill -INT "$ctlpid"; wait "$ctlpid"; rc=$?
    [ $rc -eq 130 ] && grep -q "the spawned foxd (pid $spawned) was stopped" "$dir/spawn.err" ||
        fail "Ctrl-C on run --spawn (rc $rc): $(tail -3 "$dir/spawn.err")"
    ! kill -0 "$spawned" 2>/dev/null || fail "the spawned foxd $spawned still runs"
    ok "Ctrl-C on run --spawn says the spawned foxd was stopped (and it was)"
}

parts=$(declare -F | sed -n 's/^declare -f part_//p' | tr '\n' ' ')
declare -F "part_$PART" >/dev/null || { echo "test_ops.sh: no part '$PART'; the parts: $parts" >&2; exit 2; }
test_init "foxd-ops-$PART"
no_pictures
chmod 755 "$dir"
url="ipc://$dir/foxd.sock"
"part_$PART"
