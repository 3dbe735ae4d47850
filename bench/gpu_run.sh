#!/bin/bash
# gpu_run.sh — the CUDA backend's checks and benchmarks on a GPU machine, in one go.
#
#   bench/gpu_run.sh prepare   here (no GPU needed): build, then copy the two binaries and the
#                              shared libraries a bare CUDA machine lacks (OpenBLAS and its
#                              Fortran runtime, subunit) into .carry/ (git-ignored)
#   bench/gpu_run.sh run       on the GPU machine, from the repository root, with .carry/ there:
#                              the parity test, the batch and env sweeps, TF32 and one-stream
#                              variants, and a compute-sanitizer pass; logs under $OUT
#
# Figures from bench.md go to docs/performance.md with the machine and date of machine.txt.
set -u
cd "$(dirname "$0")/.."

prepare() {
    set -e
    local build=${BUILD:-build-gpu}
    [ -d "$build" ] || meson setup "$build" -Dcuda=enabled
    ninja -C "$build" bench/foxbench tests/test_cuda_parity
    rm -rf .carry
    mkdir -p .carry/bin .carry/lib
    cp "$build/bench/foxbench" "$build/tests/test_cuda_parity" .carry/bin/
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

case "${1:-}" in
prepare) prepare ;;
run) run ;;
*) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
