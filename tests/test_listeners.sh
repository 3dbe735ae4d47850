#!/bin/bash
# test_listeners.sh FOXD FOXCTL — every listener of a training foxd under a
# bounded flood of hostile neighbours on loopback, at 256 descriptors and
# daemon.max_connections=40 (a quarter of it, 10, from one peer): the
# control listener, the events listener and /metrics, each flood a few
# seconds long. After the floods a fresh `foxctl status` is answered, and
# SIGTERM writes the stop checkpoint with no epoch record lost.
set -u
FOXD=$(realpath "$1") FOXCTL=$(realpath "$2")
. "$(dirname "$(realpath "$0")")/lib.sh"
test_init foxd-listeners
no_pictures
FLOOD="$(dirname "$(realpath "$0")")/flood.py"
TINY=(--backend cpu --set model.h1=32 --set model.h2=16 --set model.head_hidden=16
      --set model.aux_hidden=8 --set train.batch=16 --set env.n_envs=8
      --set train.learning_starts=64 --set data.synth_bars=3000
      --set train.steps_per_epoch=20 --set train.epochs=1 --set daemon.metrics_interval_ms=0
      "${REPLAY[@]}")
url="ipc://$dir/foxd.sock"
st=$dir/st
ctl() { timeout -k 5 60 "$FOXCTL" --url "$url" --timeout 5000 "$@"; }
# flood_opened: wait until flood.py has opened its connections, and the server a moment more.
flood_opened() {
    for _ in $(seq 1 100); do grep -q "^opened" "$dir/flood.out" && break; sleep 0.1; done
    sleep 0.5
}
# get URL: the body of an HTTP GET.
get() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"; }

# Control on ipc and tcp, events on tcp, /metrics with a 1 s deadline.
start_at_256() {
    pport=$(free_port) mport=$(free_port)
    log_mark
    (ulimit -n 256 && exec "$FOXD" "${TINY[@]}" --listen "$url" --listen "tcp://127.0.0.1:$port" \
        --pub "tcp://127.0.0.1:$pport" --set "daemon.runtime_dir=$dir/rt" \
        --set "daemon.state_dir=$st" --set daemon.token=right --set daemon.max_connections=40 \
        --set "daemon.metrics_listen=http://127.0.0.1:$mport" \
        --set daemon.metrics_timeout_ms=1000) 2>>"$dir/foxd.log" &
    pid=$!
    foxd_wait --url "$url"
}
on_free_port start_at_256
ctl --token right run --detach --folds 0 --epochs 100000 --steps 20 >/dev/null || fail "run --detach"

# ------------------------------------------------------------- control
# 100 REQ clients from 127.0.0.2 finish the handshake and hold on: they keep
# 10 connections, and foxctl over tcp from 127.0.0.1 is answered meanwhile.
: >"$dir/flood.out"
python3 "$FLOOD" --from 127.0.0.2 127.0.0.1 "$port" 100 1 3 >"$dir/flood.out" &
flood=$!
flood_opened
timeout -k 2 10 "$FOXCTL" --url "tcp://127.0.0.1:$port" --token right --timeout 5000 status >/dev/null ||
    fail "foxctl over tcp got no answer beside 100 clients from 127.0.0.2"
wait "$flood"
closed=$(sed -n 's/^closed //p' "$dir/flood.out")
[ "$closed" = 90 ] || fail "100 control clients from one address: $(echo $(cat "$dir/flood.out"))"
ok "100 control clients from 127.0.0.2 kept 10 connections; foxctl over tcp from 127.0.0.1 answered"

# -------------------------------------------------------------- events
# 100 subscribers from 127.0.0.2 keep 10 of the events listener's 40
# connections, and `foxctl watch` from 127.0.0.1 gets its events while they
# hold on (its timeout ends before the flood does).
: >"$dir/flood.out"
python3 "$FLOOD" --from 127.0.0.2 127.0.0.1 "$pport" 100 sub 7 >"$dir/flood.out" &
flood=$!
flood_opened
timeout -k 1 4 "$FOXCTL" --url "$url" --pub "tcp://127.0.0.1:$pport" watch --count 2 \
    >"$dir/watch.out" 2>&1 ||
    fail "foxctl watch beside 100 subscribers from 127.0.0.2: exit $?, $(cat "$dir/watch.out")"
wait "$flood"
closed=$(sed -n 's/^closed //p' "$dir/flood.out")
[ "$closed" = 90 ] || fail "100 subscribers from one address: $(echo $(cat "$dir/flood.out"))"
ok "100 subscribers from 127.0.0.2 kept 10 connections; foxctl watch from 127.0.0.1 got its events"

# ------------------------------------------------------------ /metrics
# 400 slow clients that never end their headers, more than foxd's 256
# descriptors: /metrics holds its share of them and closes each after
# daemon.metrics_timeout_ms, the rest wait in the kernel's queue, and the
# control plane keeps its descriptors.
: >"$dir/flood.out"
python3 "$FLOOD" 127.0.0.1 "$mport" 400 slow 4 >"$dir/flood.out" &
flood=$!
flood_opened
ctl status >/dev/null || fail "ipc status failed beside 400 slow /metrics clients"
wait "$flood"
closed=$(sed -n 's/^closed //p' "$dir/flood.out")
[ "$closed" -ge 80 ] || fail "slow /metrics clients closed in 4 s: $(echo $(cat "$dir/flood.out"))"
body=$(get "http://127.0.0.1:$mport/metrics") || fail "GET /metrics after the flood failed"
grep -q '^foxd_state{state="training"} 1$' <<<"$body" || fail "/metrics after the flood: ${body:0:300}"
grep -q "connections open; new ones wait" "$dir/foxd.log" || fail "no log line for the /metrics cap"
ok "400 slow /metrics clients: ipc status answered, $closed closed by the deadline, GET answered after"

ctl status >/dev/null || fail "a fresh ipc client got no answer after the floods"
stop_and_check_records "$st" "the floods"
ok "after the floods: status answered, $rows epochs recorded, the stop checkpoint written"
echo "all $checks checks passed"
