#!/bin/bash
# multi_run.sh — aggregate training throughput of K independent runs sharing
# one device, for K = 1, 2, 4, 8, 16, 32 (or the Ks given), and whether each
# run's results stay those of running it alone, bit for bit.
#
#   bench/multi_run.sh [K...]              K foxbench processes at once, each its own seed
#   MPS=1 bench/multi_run.sh [K...]        the same under an MPS control daemon started here
#   MODE=engines bench/multi_run.sh [K...] one foxbench process with K engines, each on its
#                                          own thread with its own seed (--engines K)
#   MODE=sweep bench/multi_run.sh [K...]   K foxd daemons on the device and one `foxctl sweep`
#                                          of JOBS jobs over them: end-to-end jobs per minute
#
# foxbench modes: every run times REPS chunks of CHUNK train steps after
# its warm-up; the chunks are long enough that the median chunk of each
# run falls in the time when all K run, so the aggregate is the sum of
# the K medians' steps/s. Run i has train.seed i + 1 and prints the digest
# of its parameters after the timed steps (foxbench --digest); every run of
# a seed must give the digest of that seed's first run (the first K that
# ran it), or with ALONE=1 of that seed run alone, one after another, before
# the Ks. MODE=sweep: every job of every K must give the first K's figures
# (its fold objects without the timing) and the same chosen checkpoint
# (the CRC-32 of the file: weights, optimizer state, ISV and counters).
#
# Output: a markdown table on stdout, one row per K, with the gain over the
# first K measured, then the line "same bits: N/M runs" (or jobs), naming
# those that differ; the exit status is 1 when one differs. Logs under $OUT
# (default: a temporary directory, kept and named at the end).
#
# Settings (environment): BACKEND (cuda), BATCH (256), REPS (40), CHUNK (200),
# DEVICE (0: engine.device of every run), ARGS (more foxbench or foxd options),
# BUILD (build: where foxbench, foxd and foxctl are), ALONE (0); MODE=sweep:
# JOBS (32), STEPS (2000 train steps a job), EPOCHS (1).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build} BACKEND=${BACKEND:-cuda} BATCH=${BATCH:-256} REPS=${REPS:-40}
CHUNK=${CHUNK:-200} DEVICE=${DEVICE:-0} MODE=${MODE:-foxbench} MPS=${MPS:-0} ALONE=${ALONE:-0}
JOBS=${JOBS:-32} STEPS=${STEPS:-2000} EPOCHS=${EPOCHS:-1}
case $MODE in foxbench | engines | sweep) ;; *)
    echo "multi_run: MODE must be foxbench, engines or sweep, not '$MODE'" >&2
    exit 2
    ;;
esac
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

# foxbench's rows: | backend | batch | envs | params | full µs [..] | train µs [..] | seed | digest |
rows() { awk -F'|' '/^\| (cpu|cuda) /{split($7, t, " "); gsub(/ /, "", $8); gsub(/ /, "", $9);
                                       print t[1], $8, $9}' "$@"; }

# One foxbench process; add its seed (--set train.seed=S) and where its table goes.
foxbench=("$BUILD/bench/foxbench" --backend "$BACKEND" --batch "$BATCH" --reps "$REPS"
          --chunk "$CHUNK" --set "engine.device=$DEVICE" --digest "${extra[@]}")

# The aggregate and per-run steps/s of K's tables; "K seed digest" of each run into digests.txt.
sum_rows() {
    local k=$1
    shift
    rows "$@" | awk -v k="$k" -v d="$OUT/digests.txt" \
        '{s += 1e6 / $1; n++; print k, $2, $3 >>d} END{if (n != k) exit 1; print s, s / k}'
}

bench_k() {
    local k=$1 i
    if [ "$MODE" = engines ]; then
        "${foxbench[@]}" --set train.seed=1 --engines "$k" >"$OUT/k$k-engines.md" \
            2>"$OUT/k$k-engines.log" ||
            { echo "multi_run: foxbench --engines $k failed (logs in $OUT)" >&2; exit 1; }
        sum_rows "$k" "$OUT/k$k-engines.md" || { echo "multi_run: K=$k: rows missing" >&2; exit 1; }
        return
    fi
    for ((i = 0; i < k; i++)); do
        "${foxbench[@]}" --set "train.seed=$((i + 1))" >"$OUT/k$k-$i.md" 2>"$OUT/k$k-$i.log" &
        pids+=($!)
    done
    local failed=0
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
    pids=()
    [ $failed = 0 ] || { echo "multi_run: a foxbench of K=$k failed (logs in $OUT)" >&2; exit 1; }
    sum_rows "$k" "$OUT"/k"$k"-*.md || { echo "multi_run: K=$k: rows missing" >&2; exit 1; }
}

# Every job's figures without the timing and its chosen checkpoint's CRC-32, a line a job.
job_results() {
    python3 - "$1" <<'EOF'
import glob, json, os, sys, zlib
timing = ("steps_per_sec", "wall_s", "train_s", "eval_s")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "jobs", "*.json"))):
    if path.endswith(".failed.json"):
        continue
    rec = json.load(open(path))
    folds = [{k: v for k, v in f.items() if k not in timing} for f in rec.get("folds", [])]
    chosen = []
    for f in folds:
        ckpt = os.path.join(rec.get("run_dir", ""), "fold%d-chosen.ckpt" % f.get("fold", -1))
        chosen.append(zlib.crc32(open(ckpt, "rb").read()) if os.path.isfile(ckpt) else None)
    print(rec["id"], json.dumps({"folds": folds, "chosen_crc32": chosen}, sort_keys=True))
EOF
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
    job_results "$OUT/k$k-sweep" >"$OUT/k$k-results.txt" ||
        { echo "multi_run: cannot read the jobs of K=$k" >&2; exit 1; }
    # Train steps of every job over the sweep's wall time: engine creation and evaluation included.
    awk -v a="$t0" -v b="$t1" -v j="$JOBS" -v s="$STEPS" -v e="$EPOCHS" -v k="$k" \
        'BEGIN{r = j * s * e / (b - a); print r, r / k}'
}

# same_bits: the verdict line; 1 when a run or job differs from its reference.
same_bits() {
    if [ "$MODE" = sweep ]; then
        local first=${ks[0]} k n=0 same=0 differ=()
        for k in "${ks[@]:1}"; do
            while read -r id result; do
                n=$((n + 1))
                if [ "$result" = "$(awk -v id="$id" '$1 == id{sub(/^[^ ]* /, ""); print}' \
                    "$OUT/k$first-results.txt")" ]; then
                    same=$((same + 1))
                else
                    differ+=("$id (K=$k)")
                fi
            done <"$OUT/k$k-results.txt"
        done
        echo "same bits: $same/$n jobs against K=$first${differ[*]:+; differ: ${differ[*]}}"
        [ "$same" = "$n" ]
        return
    fi
    # References: each seed alone (ALONE=1), else each seed's first run.
    awk -v alone="$ALONE" '
        FILENAME == ARGV[1] { ref[$2] = $3; next }
        !($2 in ref) { ref[$2] = $3; next }
        { n++; if ($3 == ref[$2]) same++; else bad = bad " seed " $2 " (K=" $1 ")" }
        END {
            printf "same bits: %d/%d runs against %s%s\n", same, n,
                alone == 1 ? "each seed alone" : "the first K that ran each seed",
                bad == "" ? "" : "; differ:" bad
            exit same != n
        }' "$OUT/alone.txt" "$OUT/digests.txt"
}

: >"$OUT/digests.txt"
: >"$OUT/alone.txt"
if [ "$MODE" != sweep ] && [ "$ALONE" = 1 ]; then
    max=$(printf '%s\n' "${ks[@]}" | sort -n | tail -1)
    for ((i = 0; i < max; i++)); do
        "${foxbench[@]}" --set "train.seed=$((i + 1))" >"$OUT/alone-$i.md" 2>"$OUT/alone-$i.log" ||
            { echo "multi_run: foxbench of seed $((i + 1)) alone failed (logs in $OUT)" >&2; exit 1; }
        rows "$OUT/alone-$i.md" | awk '{print "alone", $2, $3}' >>"$OUT/alone.txt"
    done
fi

case $MODE in
sweep) echo "| K daemons | MPS | jobs | aggregate train steps/s (wall) | per daemon | × first K |" ;;
engines) echo "| K engines in one process | MPS | batch | aggregate train steps/s | per engine | × first K |" ;;
*) echo "| K runs | MPS | batch | aggregate train steps/s | per run | × first K |" ;;
esac
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
same_bits
