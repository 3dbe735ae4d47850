#!/bin/bash
# multi_run.sh — aggregate training throughput of K independent runs sharing
# one device, for K = 1, 2, 4, 8, 16, 32 (or the Ks given).
#
#   bench/multi_run.sh [K...]              K foxbench processes at once, each its own seed
#   MPS=1 bench/multi_run.sh [K...]        the same under an MPS control daemon started here
#   MODE=sweep bench/multi_run.sh [K...]   K foxd daemons on the device and one `foxctl sweep`
#                                          of JOBS jobs over them: end-to-end jobs per minute
#
# foxbench mode: every process times REPS chunks of CHUNK train steps after
# its warm-up; the chunks are long enough that the median chunk of each
# process falls in the time when all K run, so the aggregate is the sum of
# the K medians' steps/s. Output: a markdown table on stdout, one row per K,
# with the gain over the first K measured; logs under $OUT (default: a
# temporary directory, kept and named at the end).
#
# Settings (environment): BACKEND (cuda), BATCH (256), REPS (40), CHUNK (200),
# DEVICE (0: engine.device of every run), ARGS (more foxbench or foxd options),
# BUILD (build: where foxbench, foxd and foxctl are); MODE=sweep: JOBS (32),
# STEPS (2000 train steps a job), EPOCHS (1).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build} BACKEND=${BACKEND:-cuda} BATCH=${BATCH:-256} REPS=${REPS:-40}
CHUNK=${CHUNK:-200} DEVICE=${DEVICE:-0} MODE=${MODE:-foxbench} MPS=${MPS:-0}
JOBS=${JOBS:-32} STEPS=${STEPS:-2000} EPOCHS=${EPOCHS:-1}
read -r -a extra <<<"${ARGS:-}"
ks=("$@")
((${#ks[@]})) || ks=(1 2 4 8 16 32)
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/multi_run.XXXXXX")}
mkdir -p "$OUT"
pids=()

stop_all() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
}
quit_mps() { echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 || true; }
trap 'stop_all; [ "$MPS" = 1 ] && quit_mps; true' EXIT

if [ "$MPS" = 1 ]; then
    command -v nvidia-cuda-mps-control >/dev/null || { echo "multi_run: no nvidia-cuda-mps-control" >&2; exit 2; }
    export CUDA_MPS_PIPE_DIRECTORY="$OUT/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$OUT/mps-log"
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d
fi

# foxbench's row: | backend | batch | envs | params | full µs [..] | train µs [..] |
median_us() { awk -F'|' '/^\| (cpu|cuda) /{split($7, t, " "); print t[1]}' "$1"; }

bench_k() {
    local k=$1 i
    for ((i = 0; i < k; i++)); do
        "$BUILD/bench/foxbench" --backend "$BACKEND" --batch "$BATCH" --reps "$REPS" \
            --chunk "$CHUNK" --set "engine.device=$DEVICE" --set "train.seed=$((i + 1))" \
            "${extra[@]}" >"$OUT/k$k-$i.md" 2>"$OUT/k$k-$i.log" &
        pids+=($!)
    done
    local failed=0
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
    pids=()
    [ $failed = 0 ] || { echo "multi_run: a foxbench of K=$k failed (logs in $OUT)" >&2; exit 1; }
    local sum=0 one
    for ((i = 0; i < k; i++)); do
        one=$(median_us "$OUT/k$k-$i.md")
        sum=$(awk -v s="$sum" -v u="$one" 'BEGIN{print s + 1e6 / u}')
    done
    echo "$sum $(awk -v s="$sum" -v k="$k" 'BEGIN{print s / k}')"
}

sweep_k() {
    local k=$1 i eps=()
    for ((i = 0; i < k; i++)); do
        local d="$OUT/k$k-d$i"
        mkdir -p "$d"
        "$BUILD/daemon/foxd" --backend "$BACKEND" --listen "ipc://$d/foxd.sock" \
            --pub "ipc://$d/events.sock" --set "daemon.state_dir=$d" --set "daemon.runtime_dir=$d" \
            --set daemon.resume=false --set daemon.checkpoint_on_stop=false \
            --set "engine.device=$DEVICE" --set "train.batch=$BATCH" "${extra[@]}" 2>"$d/foxd.log" &
        pids+=($!)
        eps+=("ipc://$d/foxd.sock")
    done
    for ((i = 0; i < k; i++)); do
        for _ in $(seq 1 600); do
            "$BUILD/client/foxctl" --url "${eps[$i]}" --timeout 1000 version >/dev/null 2>&1 && break
            sleep 0.2
        done
    done
    local list t0 t1
    list=$(IFS=,; echo "${eps[*]}")
    t0=$(date +%s.%N)
    "$BUILD/client/foxctl" sweep --folds 0 --seeds "$(seq -s, 1 "$JOBS")" --epochs "$EPOCHS" \
        --steps "$STEPS" --endpoints "$list" --dir "$OUT/k$k-sweep" >"$OUT/k$k-sweep.out" \
        2>"$OUT/k$k-sweep.log" || { echo "multi_run: sweep of K=$k failed (logs in $OUT)" >&2; exit 1; }
    t1=$(date +%s.%N)
    stop_all
    # Train steps of every job over the sweep's wall time: engine creation and evaluation included.
    awk -v a="$t0" -v b="$t1" -v j="$JOBS" -v s="$STEPS" -v e="$EPOCHS" -v k="$k" \
        'BEGIN{r = j * s * e / (b - a); print r, r / k}'
}

if [ "$MODE" = sweep ]; then
    echo "| K daemons | MPS | jobs | aggregate train steps/s (wall) | per daemon | × first K |"
else
    echo "| K runs | MPS | batch | aggregate train steps/s | per run | × first K |"
fi
echo "|---|---|---|---|---|---|"
first=
for k in "${ks[@]}"; do
    if [ "$MODE" = sweep ]; then res=$(sweep_k "$k") || exit 1; else res=$(bench_k "$k") || exit 1; fi
    read -r agg per <<<"$res"
    first=${first:-$agg}
    gain=$(awk -v a="$agg" -v f="$first" 'BEGIN{printf "%.2f", a / f}')
    printf "| %d | %s | %s | %.0f | %.0f | %s |\n" "$k" "$([ "$MPS" = 1 ] && echo yes || echo no)" \
        "$([ "$MODE" = sweep ] && echo "$JOBS" || echo "$BATCH")" "$agg" "$per" "$gain"
done
echo "logs: $OUT" >&2
