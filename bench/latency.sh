#!/bin/bash
# latency.sh BUILD_DIR [latency options...] — control-plane latency benchmark.
#
# Starts a private foxd (CPU backend and a shrunk model unless told otherwise) in a temp directory,
# listening on an ipc socket there and on tcp://127.0.0.1:<free port> only,
# runs BUILD_DIR/bench/latency against it (which also measures a bare nng
# echo, starts a long training run and times steps/s with and without a
# polling client), prints `uptime` before and after, and kills foxd.
# Every step is bounded in time. Extra arguments go to latency, e.g.
#   bench/latency.sh build -n 2000 --window 10 --pairs 2 --rate 1000
# FOXD_BENCH_BACKEND=cuda (or auto) trains on the GPU instead of the CPU; the model is then
# the default one, since the shrunk CPU model says little about a GPU's step. FOXD_BENCH_SET
# ="model.h1=64 model.h2=32" replaces the keys below for either backend. BUILD_DIR is a
# meson build directory or one directory holding foxd, foxctl and latency (e.g. .carry/bin
# of bench/gpu_run.sh, whose `latency` mode runs this script on a GPU machine).
set -u
B=$(realpath "${1:?usage: latency.sh BUILD_DIR [latency options...]}")
shift
if [ -x "$B/daemon/foxd" ]; then
    FOXD=$B/daemon/foxd FOXCTL=$B/client/foxctl LAT=$B/bench/latency
else
    FOXD=$B/foxd FOXCTL=$B/foxctl LAT=$B/latency
fi
for f in "$FOXD" "$FOXCTL" "$LAT"; do [ -x "$f" ] || { echo "missing $f (ninja -C $B)"; exit 2; }; done
BACKEND=${FOXD_BENCH_BACKEND:-cpu}
case "$BACKEND" in
cpu) DEFAULT_SET="model.h1=64 model.h2=32 train.epochs=100" ;;
cuda | auto) DEFAULT_SET="train.epochs=100" ;;
*) echo "FOXD_BENCH_BACKEND=$BACKEND: expected cpu, cuda or auto"; exit 2 ;;
esac

dir=$(mktemp -d "${TMPDIR:-/tmp}/foxd-lat.XXXXXX")
pid= fpid=
# foxd runs under timeout(1): $pid is timeout, $fpid foxd itself. SIGTERM (no
# checkpoint: daemon.checkpoint_on_stop=false), then SIGKILL after 10 s.
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" ${fpid:+"$fpid"} 2>/dev/null
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free loopback port (not listening now); foxd's start is retried on a clash.
free_port() {
    local p
    for _ in $(seq 1 100); do
        p=$((20000 + RANDOM % 40000))
        [ -z "$(ss -Htln "sport = :$p" 2>/dev/null)" ] && { echo "$p"; return 0; }
    done
    return 1
}

read -r -a MODEL <<<"${FOXD_BENCH_SET:-$DEFAULT_SET}"
SETS=()
for kv in "${MODEL[@]}"; do SETS+=(--set "$kv"); done

ipc="ipc://$dir/foxd.sock"
for attempt in 1 2 3; do
    port=$(free_port) || { echo "no free port"; exit 1; }
    tcp="tcp://127.0.0.1:$port"
    timeout 1200 "$FOXD" --backend "$BACKEND" --listen "$ipc" --listen "$tcp" --pub "ipc://$dir/events.sock" \
        --set "daemon.runtime_dir=$dir" --set "daemon.state_dir=$dir/state" \
        --set daemon.checkpoint_on_stop=false --set daemon.metrics_interval_ms=0 "${SETS[@]}" \
        --set "daemon.token=bench-$$" \
        2>>"$dir/foxd.log" &
    pid=$!
    up=0
    for _ in $(seq 1 600); do
        if "$FOXCTL" --url "$tcp" --timeout 1000 version >/dev/null 2>&1; then up=1; break; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ $up = 1 ] && break
    kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=
    echo "foxd did not start (attempt $attempt):"; tail -5 "$dir/foxd.log"
done
[ -n "$pid" ] || exit 1
fpid=$(ps -o pid= --ppid "$pid" | tr -d ' ')   # foxd itself ($pid is its timeout)

echo "# foxd control-plane latency, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# foxd --backend $BACKEND ${SETS[*]}; control $ipc and $tcp"
echo "# uptime before: $(uptime)"
timeout 900 "$LAT" --ipc "$ipc" --tcp "$tcp" --token "bench-$$" ${fpid:+--pid "$fpid"} "$@"
rc=$?
echo "# uptime after:  $(uptime)"
[ $rc = 0 ] || { echo "latency failed ($rc); foxd log:"; tail -20 "$dir/foxd.log"; }
exit $rc
