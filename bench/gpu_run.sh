#!/bin/bash
# gpu_run.sh — the CUDA backend's checks and benchmarks on a GPU machine, in one go.
#
#   bench/gpu_run.sh prepare   here (no GPU needed): build, then copy the two binaries and the
#                              shared libraries a bare CUDA machine lacks (OpenBLAS and its
#                              Fortran runtime, subunit) into .carry/ (git-ignored)
#   bench/gpu_run.sh run       on the GPU machine, from the repository root, with .carry/ there:
#                              the parity test, the batch and env sweeps, TF32 and one-stream
#                              variants, and a compute-sanitizer pass; logs under $OUT
#   bench/gpu_run.sh quick     on the GPU machine: parity, then batch 256 / 4096 and the
#                              diagnostic variants, against .carry/bin/foxbench_base (the
#                              previous version, BASE=<dir of a build> at prepare) when present,
#                              and a per-kernel profile summed by name (ncu, no cache flush)
#
# Figures from bench.md go to docs/performance.md with the machine and date of machine.txt.
set -u
cd "$(dirname "$0")/.."

prepare() {
    set -e
    local build=${BUILD:-build-gpu}
    [ -d "$build" ] || meson setup "$build" -Dcuda=enabled
    ninja -C "$build" bench/foxbench tests/test_cuda_parity tests/test_cuda_drills
    rm -rf .carry
    mkdir -p .carry/bin .carry/lib
    cp "$build/bench/foxbench" "$build/tests/test_cuda_parity" "$build/tests/test_cuda_drills" \
        .carry/bin/
    [ -n "${BASE:-}" ] && cp "$BASE/bench/foxbench" .carry/bin/foxbench_base
    for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libsubunit.so.0; do
        path=$(ldd .carry/bin/test_cuda_parity | awk -v l="$lib" '$1 == l { print $3 }')
        [ -n "$path" ] && cp -L "$path" .carry/lib/
    done
    du -sh .carry
}

run() {
    local out=${OUT:-/tmp/foxgpu} bin=.carry/bin
    mkdir -p "$out"
    export LD_LIBRARY_PATH="$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    {
        date -u
        uname -r
        nproc
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
        ldd "$bin/test_cuda_parity" "$bin/foxbench" | grep "not found" || echo "all libraries found"
    } > "$out/machine.txt" 2>&1
    cat "$out/machine.txt"

    # Parity first: the figures below mean nothing if it fails.
    CK_FORK=no OPENBLAS_NUM_THREADS=8 timeout 300 "$bin/test_cuda_parity" > "$out/parity.log" 2>&1
    echo "parity exit $?" >> "$out/parity.log"
    grep -E "^(device|parity|graphs|memory|fold|[0-9]+%)|exit|Failure|Error" "$out/parity.log" |
        grep -v "parity fp32 mean: grad\|parity tf32 mean: grad" | head -40

    local fb="timeout 150 $bin/foxbench --backend cuda --reps 9 --chunk 100"
    {
        echo "## batch sweep: 1024 envs, FP32, two streams (learning_starts 16384 for every batch)"
        $fb --set train.learning_starts=16384 --batch 256 --batch 512 --batch 1024 \
            --batch 2048 --batch 4096 --batch 8192 --batch 16384
        echo "## env sweep: batch 256"
        for n in 64 256 1024 4096 16384; do $fb --envs "$n" --batch 256 | tail -1; done
        echo "## TF32 tensor-op products"
        FOX_CUDA_MATH=tf32 $fb --set train.learning_starts=16384 --batch 256 --batch 4096 \
            --batch 16384 | tail -3
        echo "## one stream (no concurrent weight gradients / target forward)"
        FOX_CUDA_SIDE=0 $fb --set train.learning_starts=4096 --batch 256 --batch 4096 | tail -2
        echo "## repeat of batch 256 and 4096 (spread)"
        $fb --set train.learning_starts=4096 --batch 256 --batch 4096 | tail -2
    } > "$out/bench.md" 2>&1
    cat "$out/bench.md"

    # Time of every kernel of a few eager and replayed steps (serialized by the profiler).
    if command -v ncu > /dev/null; then
        timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
            "$bin/foxbench" --backend cuda --batch 256 --envs 1024 --reps 1 --chunk 2 \
            > "$out/ncu.csv" 2> "$out/ncu.err"
        echo "ncu exit $?" >> "$out/ncu.err"
        tail -2 "$out/ncu.err"
    fi

    # Out-of-bounds and uninitialized reads in every kernel of a few eager and replayed steps.
    if command -v compute-sanitizer > /dev/null; then
        timeout 120 compute-sanitizer --tool memcheck --leak-check no --print-limit 20 \
            "$bin/foxbench" --backend cuda --batch 256 --envs 1024 --reps 1 --chunk 3 \
            > "$out/memcheck.log" 2>&1
        echo "memcheck exit $?" >> "$out/memcheck.log"
        tail -5 "$out/memcheck.log"
    fi
}

# Parity, the two headline batches for this build and the previous one, the diagnostic knobs,
# and the kernels of a few train steps (ncu, sum per kernel name: profile.txt).
quick() {
    local out=${OUT:-/tmp/foxgpu} bin=.carry/bin
    mkdir -p "$out"
    export LD_LIBRARY_PATH="$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    { date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } \
        > "$out/machine.txt" 2>&1
    cat "$out/machine.txt"
    # .carry/bin/a/ may hold an intermediate version: its parity and figures come first.
    local p
    for p in "$bin/a/test_cuda_parity" "$bin/test_cuda_parity" "$bin/test_cuda_drills"; do
        [ -x "$p" ] || continue
        local log="$out/$(basename "$(dirname "$p")")_$(basename "$p").log"
        CK_FORK=no OPENBLAS_NUM_THREADS=8 timeout 240 "$p" > "$log" 2>&1
        echo "$p exit $?" >> "$log"
        grep -E "^(device|parity|graphs|memory|fold|drill|stab|[0-9]+%)|exit|Failure|Error" \
            "$log" | grep -v "mean: grad" | head -40
    done
    local args="--reps 9 --chunk 100 --set train.learning_starts=4096 --batch 256 --batch 4096"
    {
        for b in foxbench_base a/foxbench foxbench; do
            [ -x "$bin/$b" ] || continue
            echo "## $b"
            timeout 120 "$bin/$b" --backend cuda $args | tail -2
        done
        echo "## foxbench, one stream"
        FOX_CUDA_SIDE=0 timeout 120 "$bin/foxbench" --backend cuda $args | tail -2
        echo "## foxbench, sentinel off (engine.sentinel=0: no fused check, no inline flags)"
        timeout 120 "$bin/foxbench" --backend cuda $args --set engine.sentinel=0 | tail -2
        echo "## foxbench repeat"
        timeout 120 "$bin/foxbench" --backend cuda $args | tail -2
        echo "## foxbench 16384, envs 64"
        timeout 120 "$bin/foxbench" --backend cuda --reps 5 --chunk 50 --batch 16384 \
            --set train.learning_starts=16384 | tail -1
        timeout 120 "$bin/foxbench" --backend cuda --reps 9 --chunk 100 --envs 64 --batch 256 | tail -1
    } > "$out/bench.md" 2>&1
    cat "$out/bench.md"
    if command -v ncu > /dev/null; then
        timeout 150 ncu --clock-control none --cache-control none \
            --metrics gpu__time_duration.sum --csv "$bin/foxbench" --backend cuda --batch 256 \
            --envs 1024 --reps 1 --chunk 2 > "$out/ncu.csv" 2> "$out/ncu.err"
        echo "ncu exit $?" >> "$out/ncu.err"
        tail -1 "$out/ncu.err"
    fi
}

case "${1:-}" in
prepare) prepare ;;
run) run ;;
quick) quick ;;
*) echo "usage: $0 prepare|run|quick" >&2; exit 2 ;;
esac
