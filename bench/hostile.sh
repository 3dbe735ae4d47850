#!/bin/bash
# hostile.sh BUILD_DIR [hostile options...] — start a CPU foxd from BUILD_DIR
# with an ipc and a loopback tcp listener and a token, run bench/hostile
# against it (see hostile.c for the options), and print the machine's load
# average before and after. Everything lives in a temp directory removed on
# exit.
set -u
build=$(realpath "$1"); shift
dir=$(mktemp -d "${TMPDIR:-/tmp}/foxd-hostile.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
port=$((20000 + RANDOM % 30000))
head -c 24 /dev/urandom | base64 > "$dir/token"
chmod 600 "$dir/token"
"$build/daemon/foxd" --backend cpu --set model.h1=64 --set model.h2=32 \
    --set data.synth_bars=20000 --set daemon.metrics_interval_ms=0 \
    --listen "ipc://$dir/foxd.sock" --listen "tcp://127.0.0.1:$port" --pub "ipc://$dir/ev.sock" \
    --set "daemon.runtime_dir=$dir/rt" --set "daemon.state_dir=$dir/st" \
    --set "daemon.token_file=$dir/token" --set daemon.resume=false \
    --set daemon.checkpoint_on_stop=false 2>"$dir/foxd.log" &
pid=$!
for _ in $(seq 1 300); do
    "$build/client/foxctl" --timeout 1000 --url "ipc://$dir/foxd.sock" version >/dev/null 2>&1 && break
    sleep 0.1
done
echo "load average before: $(cat /proc/loadavg)"
timeout 900 "$build/bench/hostile" --tcp "tcp://127.0.0.1:$port" --ipc "ipc://$dir/foxd.sock" \
    --token "$(cat "$dir/token")" "$@"
rc=$?
echo "load average after: $(cat /proc/loadavg)"
exit $rc
