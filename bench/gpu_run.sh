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
#   bench/gpu_run.sh overhead  on the GPU machine: parity and drills, then foxbench at batch 256
#                              and 4096 in both bounds modes with the sentinel on and off, for
#                              this build and foxbench_base; an ncu kernel list of adaptive steps
#                              ($NCU_MODES, at batch $NCU_BATCH: 256 unless set);
#                              foxd --once (two epochs a fold; ONCE=0 skips it); EXTRA=1 adds
#                              TF32 and one-stream runs of this build
#   bench/gpu_run.sh probe     on the GPU machine: ncu --set full on a launch of each kernel in
#                              $DETAIL, in each binary of .carry/bin named in $PROBE_BINS
#                              ($PROBE_ARGS to foxbench; PROBE_SOURCE=1: each launch's SASS with
#                              its stall samples, ncu_source<k>.csv); a regex on a template's
#                              arguments (e.g. "p99_pass1_kernel<3") matches no launch: ncu
#                              says "No kernels were profiled"; match the kernel's base name
#   bench/gpu_run.sh variants  on the GPU machine: .carry/bin/foxbench against each diagnostic
#                              build in .carry/bin/<name>/, interleaved ($ARGS to foxbench)
#   bench/gpu_run.sh envab     on the GPU machine: this build under each setting of $ENVS
#                              (e.g. "- CUDA_DEVICE_MAX_CONNECTIONS=32"): parity and drills, then foxbench
#                              interleaved ($ROUNDS rounds, $ARGS to foxbench)
#   bench/gpu_run.sh probe_gemm on the GPU machine: bench/gemm_probe at each of $BATCHES
#                              (256 4096): cuBLAS's pick against every cuBLASLt candidate
#   bench/gpu_run.sh probe_launch on the GPU machine: bench/launch_probe's small-kernel rate on
#                              1…32 streams of one process, then as 1…32 processes ($MPS=1:
#                              under an MPS control daemon started here)
#   bench/gpu_run.sh integration  on the GPU machine: tests/test_daemon.sh and tests/test_sweep.sh
#                              with FOXD_TEST_BACKEND=cuda (the carried nngcat and load_client);
#                              logs under $OUT
#   bench/gpu_run.sh once      on the GPU machine: foxd --once on the default config, two epochs
#   bench/gpu_run.sh latency [ARGS]  on the GPU machine: bench/latency.sh on the CUDA backend
#                              (default model) with the carried binaries, ARGS to latency;
#                              $OUT/latency.md
#   bench/gpu_run.sh learning [ARGS]  on the GPU machine: bench/learning.py ARGS with the carried
#                              foxctl and foxd
#   bench/gpu_run.sh sweep     on the GPU machine: run's sweeps and memcheck, without parity
#   bench/gpu_run.sh memcheck  on the GPU machine: compute-sanitizer memcheck of a few steps
#                              (batch $MC_BATCH, 256 unless set; $MC_ARGS to foxbench)
#   bench/gpu_run.sh population  on the GPU machine: aggregate member train steps/s of one engine
#                              of K members (K in $KS: 1 16 64) in each math mode of $MATHS
#                              (fp32 greedy_tf32 tf32 bf16), 16 one-member engines on threads, and
#                              the PyTorch peer batched over K members (torch_peer.py --members),
#                              all in one call; $OUT/population.md
#   bench/gpu_run.sh multi [K...]  on the GPU machine: bench/multi_run.sh K... with the carried
#                              foxbench, foxd and foxctl (its MODE, MPS, ALONE, REPS, ... from
#                              the environment; logs under $OUT/multi)
#   bench/gpu_run.sh timeline  on the GPU machine: the device's timeline of a few steps at each of
#                              $TL_BATCHES (256), every kernel with its stream (foxbench --trace)
#   bench/gpu_run.sh final     on the GPU machine: parity and drills; foxbench at batch 256 and
#                              4096 (1024 envs, learning_starts 4096), sentinel on and off, for
#                              this build, foxbench_base and foxbench_base2 (BASE2=<dir of a build>
#                              at prepare: a second earlier version); then `foxd --once` on the default
#                              config (CUDA, train.epochs=2) with its per-fold table
#
# prepare copies every shared library the binaries resolve outside the C runtime and CUDA
# (OpenBLAS, libuv, nng, cJSON, mbedTLS, ...) into .carry/lib, which run/quick/final put first
# on LD_LIBRARY_PATH; `ldd ... | grep "not found"` on the device says if one is still missing.
#
# Figures from bench.md go to docs/performance.md with the machine and versions of machine.txt.
set -u
cd "$(dirname "$0")/.."

prepare() {
    set -e
    local build=${BUILD:-build-gpu}
    [ -d "$build" ] || meson setup "$build" -Dcuda=enabled
    ninja -C "$build" bench/foxbench tests/test_cuda_parity tests/test_cuda_drills \
        tests/test_cuda_members daemon/foxd \
        client/foxctl bench/gemm_probe bench/launch_probe bench/latency tests/load_client
    rm -rf .carry
    mkdir -p .carry/bin .carry/lib
    cp "$build/bench/foxbench" "$build/tests/test_cuda_parity" "$build/tests/test_cuda_drills" \
        "$build/tests/test_cuda_members" \
        "$build/daemon/foxd" "$build/client/foxctl" "$build/bench/gemm_probe" \
        "$build/bench/launch_probe" "$build/bench/latency" "$build/tests/load_client" .carry/bin/
    # The daemon's integration test drives foxd with nngcat too (the integration mode).
    if command -v nngcat > /dev/null; then cp "$(command -v nngcat)" .carry/bin/; fi
    [ -n "${BASE:-}" ] && cp "$BASE/bench/foxbench" .carry/bin/foxbench_base
    [ -n "${BASE2:-}" ] && cp "$BASE2/bench/foxbench" .carry/bin/foxbench_base2
    # Everything the binaries link beyond the C runtime, libstdc++ and CUDA's own libraries;
    # the base system's own (compression, systemd, crypto) only as a fallback in lib/maybe,
    # used on the device only where its loader lacks them (use_libs), so that an older copy
    # never shadows one the driver's libraries need.
    mkdir -p .carry/lib/maybe
    ldd .carry/bin/* | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
        while read -r lib path; do
            case "$lib" in
            libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libgcc_s.so.* | \
                libstdc++.so.* | libcublas* | libcudart* | ld-linux*) ;;
            libz.so.* | libzstd.so.* | liblzma.so.* | liblz4.so.* | libcap.so.* | libgcrypt.so.* | \
                libgpg-error.so.* | libsystemd.so.*) cp -L "$path" .carry/lib/maybe/ ;;
            *) cp -L "$path" .carry/lib/ ;;
            esac
        done
    strip --strip-debug .carry/bin/*
    # .carry/ travels with the tree to the GPU machine: the large libraries go compressed.
    find .carry/lib -name "*.so*" -size +8M -exec gzip -6 {} +
    du -sh .carry
}

probe_launch() {
    use_libs
    local k i
    for k in 1 2 4 8 16 32; do .carry/bin/launch_probe --streams "$k" --seconds 3; done
    [ "${MPS:-0}" = 1 ] && nvidia-cuda-mps-control -d
    for k in 1 2 4 8 16 32; do
        for ((i = 0; i < k; i++)); do .carry/bin/launch_probe --seconds 3 > "/tmp/lp.$k.$i" & done
        wait
        awk -v k="$k" '{ s += $9; g = g + $11 } END { printf "processes %d: kernels/s %.0f graph_us %.1f\n", k, s, g / k }' /tmp/lp.$k.*
    done
    [ "${MPS:-0}" = 1 ] && { echo quit | nvidia-cuda-mps-control; }
    return 0
}

run() {
    local out=${OUT:-/tmp/foxgpu} bin=.carry/bin
    mkdir -p "$out"
    use_libs
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

    sweep
    # Time of every kernel of a few eager and replayed steps (serialized by the profiler).
    if command -v ncu > /dev/null; then
        timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
            "$bin/foxbench" --backend cuda --batch 256 --envs 1024 --reps 1 --chunk 2 \
            > "$out/ncu.csv" 2> "$out/ncu.err"
        echo "ncu exit $?" >> "$out/ncu.err"
        tail -2 "$out/ncu.err"
    fi
}

# The batch and env sweeps, the math modes and one stream (bench.md), and a compute-sanitizer
# memcheck of a few eager and replayed steps (memcheck.log): run's part after parity.
sweep() {
    local out=${OUT:-/tmp/foxgpu} bin=.carry/bin
    mkdir -p "$out"
    use_libs
    local fb="timeout 150 $bin/foxbench --backend cuda --reps 9 --chunk 100"
    {
        echo "## batch sweep: 1024 envs, FP32 (learning_starts 16384 for every batch)"
        $fb --set train.learning_starts=16384 --batch 256 --batch 512 --batch 1024 \
            --batch 2048 --batch 4096 --batch 8192 --batch 16384
        echo "## env sweep: batch 256"
        for n in 64 256 1024 4096 16384; do $fb --envs "$n" --batch 256 | tail -1; done
        echo "## TF32 tensor-op products"
        $fb --set engine.cuda_math=tf32 --set train.learning_starts=16384 --batch 256 \
            --batch 4096 --batch 16384 | tail -3
        echo "## one stream (no concurrent weight gradients / target forward)"
        $fb --set debug.enable=1 --set debug.cuda_one_stream=1 --set train.learning_starts=4096 \
            --batch 256 --batch 4096 | tail -2
        echo "## repeat of batch 256 and 4096 (spread)"
        $fb --set train.learning_starts=4096 --batch 256 --batch 4096 | tail -2
    } > "$out/bench.md" 2>&1
    cat "$out/bench.md"
    memcheck
}

# Out-of-bounds and uninitialized reads in every kernel of a few eager and replayed steps.
memcheck() {
    local out=${OUT:-/tmp/foxgpu} bin=.carry/bin
    mkdir -p "$out"
    use_libs
    if command -v compute-sanitizer > /dev/null; then
        timeout 120 compute-sanitizer --tool memcheck --leak-check no --print-limit 20 \
            "$bin/foxbench" --backend cuda --batch "${MC_BATCH:-256}" --envs 1024 --reps 1 \
            --chunk 3 ${MC_ARGS:-} > "$out/memcheck.log" 2>&1
        echo "memcheck exit $?" >> "$out/memcheck.log"
        tail -5 "$out/memcheck.log"
    fi
}

# Parity, the two headline batches for this build and the previous one, the diagnostic knobs,
# and the kernels of a few train steps (ncu, sum per kernel name: profile.txt).
quick() {
    local out=${OUT:-/tmp/foxgpu} bin=.carry/bin
    mkdir -p "$out"
    use_libs
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
        timeout 120 "$bin/foxbench" --backend cuda $args --set debug.enable=1 --set debug.cuda_one_stream=1 | tail -2
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

# bench/multi_run.sh with the carried binaries, through a build directory of links to them.
multi() {
    local out=${OUT:-/tmp/foxgpu} build
    use_libs
    build=$(mktemp -d /tmp/foxgpu-build.XXXXXX)
    mkdir -p "$build/bench" "$build/daemon" "$build/client" "$out"
    ln -s "$PWD/.carry/bin/foxbench" "$build/bench/foxbench"
    ln -s "$PWD/.carry/bin/foxd" "$build/daemon/foxd"
    ln -s "$PWD/.carry/bin/foxctl" "$build/client/foxctl"
    rm -rf "$out/multi"
    BUILD=$build OUT=$out/multi bench/multi_run.sh "$@"
}

# A population's throughput against K engines and the PyTorch peer over K members, one call.
population() {
    local out=${OUT:-/tmp/foxgpu} bin=.carry/bin k m
    mkdir -p "$out"
    use_libs
    local fb="timeout 120 $bin/foxbench --backend cuda --batch 256 --envs 1024 --reps 7 --chunk 200"
    {
        date -u
        nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
        for m in ${MATHS:-fp32 greedy_tf32 tf32 bf16}; do
            for k in ${KS:-1 16 64}; do
                echo "## engine.members=$k, engine.cuda_math=$m"
                $fb --set engine.members="$k" --set engine.cuda_math="$m" | tail -2
            done
        done
        echo "## 16 engines of one member on 16 threads, fp32"
        $fb --engines 16 --set engine.cuda_math=fp32 | tail -2
        echo "## PyTorch peer: its vmapped members against its single-model steps"
        timeout 120 python3 bench/torch_peer.py --check | tail -1
        for k in ${KS:-1 16 64}; do
            echo "## PyTorch peer, --members $k, the default widths"
            timeout 300 python3 bench/torch_peer.py --form graph --members "$k" --batch 256 \
                --widths default
        done
    } > "$out/population.md" 2>&1
    cat "$out/population.md"
}

# .carry/lib first on the loader's path, and the fallbacks of .carry/lib/maybe the system lacks.
use_libs() {
    local f dir=/tmp/foxgpu-libs
    mkdir -p "$dir"
    for f in .carry/lib/*.gz; do
        [ -e "$f" ] && gzip -d "$f"
    done
    for f in .carry/lib/maybe/*; do
        [ -e "$f" ] || continue
        ldconfig -p | grep -q "^[[:space:]]*$(basename "$f") " || ln -sf "$PWD/$f" "$dir/"
    done
    export LD_LIBRARY_PATH="$PWD/.carry/lib:$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# Everything in one short run: checks, the headline batches of this build and the earlier ones
# (sentinel on and off), and a short foxd --once on the default config.
final() {
    local out=${OUT:-/tmp/foxgpu} bin=.carry/bin
    mkdir -p "$out"
    use_libs
    {
        date -u
        nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
        ldd "$bin"/* | grep "not found" || echo "all libraries found"
    } > "$out/machine.txt" 2>&1
    cat "$out/machine.txt"
    local p
    for p in "$bin/test_cuda_parity" "$bin/test_cuda_drills"; do
        local log="$out/$(basename "$p").log"
        CK_FORK=no OPENBLAS_NUM_THREADS=8 timeout 150 "$p" > "$log" 2>&1
        echo "$p exit $?" >> "$log"
        grep -E "^(device|parity|graphs|memory|fold|drill|stab|[0-9]+%)|exit|Failure|Error" \
            "$log" | grep -v "mean: grad" | head -40
        # The verdict, which the excerpt above may cut: the summary line, failures, the exit.
        grep -E "^[0-9]+%: |:[FE]:|exit [0-9]+$" "$log" | tail -12
    done
    local args="--reps 9 --chunk 100 --set train.learning_starts=4096 --batch 256 --batch 4096"
    fb_pair() {
        echo "## $1, sentinel on"
        timeout 45 "$bin/$1" --backend cuda $args | tail -2
        echo "## $1, sentinel off (engine.sentinel=0)"
        timeout 45 "$bin/$1" --backend cuda $args --set engine.sentinel=0 | tail -2
    }
    {
        for b in foxbench foxbench_base foxbench_base2; do
            [ -x "$bin/$b" ] && fb_pair "$b"
        done
    } > "$out/bench.md" 2>&1
    cat "$out/bench.md"
    OPENBLAS_NUM_THREADS=8 timeout 120 "$bin/foxd" --once --backend cuda --set train.epochs=2 \
        > "$out/foxd_once.txt" 2> "$out/foxd_once.err"
    echo "foxd --once exit $?" >> "$out/foxd_once.err"
    tail -4 "$out/foxd_once.err"
    cat "$out/foxd_once.txt"
    echo "## repeat (spread)" >> "$out/bench.md"
    fb_pair foxbench 2>&1 | tee -a "$out/bench.md"
}

# The stability system's overhead in one short call: parity and drills, then foxbench at batch 256
# and 4096 for every {fixed, adaptive} × {sentinel on, off}, interleaved, for this build and
# foxbench_base when present; then the kernels of a few adaptive steps (ncu, no cache flush).
overhead() {
    local out=${OUT:-/tmp/foxgpu} bin=.carry/bin
    mkdir -p "$out"
    use_libs
    { date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > "$out/machine.txt" 2>&1
    cat "$out/machine.txt"
    local p sb=""
    command -v stdbuf > /dev/null && sb="stdbuf -oL -eL" # a timeout must not lose the log
    for p in "$bin/test_cuda_parity" "$bin/test_cuda_drills"; do
        local log="$out/$(basename "$p").log" t0=$SECONDS
        local lim=${TEST_S:-130}
        [ "$(basename "$p")" = test_cuda_drills ] && lim=${DRILL_S:-40}
        CK_FORK=no OPENBLAS_NUM_THREADS=8 timeout "$lim" $sb "$p" > "$log" 2>&1
        echo "$p exit $? ($((SECONDS - t0)) s)" >> "$log"
        grep -E "^(device|graphs|fold|drill|stab|[0-9]+%)|exit|Failure|Error" "$log" |
            grep -v "mean: grad" | head -40
    done
    local args="--reps ${REPS:-5} --chunk 100 --set train.learning_starts=4096 --batch 256 --batch 4096"
    local b mode sent round
    {
        for round in 1 2; do
            for b in foxbench foxbench_base; do
                [ -x "$bin/$b" ] || continue
                for mode in fixed adaptive; do
                    for sent in 1 0; do
                        echo "## round $round $b bounds_mode=$mode sentinel=$sent"
                        timeout "${BENCH_S:-40}" "$bin/$b" --backend cuda $args \
                            --set engine.bounds_mode=$mode --set engine.sentinel=$sent | tail -2
                    done
                done
            done
        done
        if [ "${EXTRA:-0}" = 1 ]; then # the math mode and the side streams, default bounds
            echo "## foxbench engine.cuda_math=tf32"
            timeout "${BENCH_S:-40}" "$bin/foxbench" --backend cuda $args \
                --set engine.cuda_math=tf32 | tail -2
            echo "## foxbench debug.cuda_one_stream=1 (one stream)"
            timeout "${BENCH_S:-40}" "$bin/foxbench" --backend cuda $args \
                --set debug.enable=1 --set debug.cuda_one_stream=1 | tail -2
        fi
    } > "$out/bench_overhead.md" 2>&1
    cat "$out/bench_overhead.md"
    if command -v ncu > /dev/null; then
        local nb=${NCU_BATCH:-256} ls=2048 # the default learning_starts, or the batch when larger
        [ "$nb" -gt "$ls" ] && ls=$nb
        for mode in ${NCU_MODES:-adaptive}; do
            timeout "${NCU_S:-150}" ncu --clock-control none --cache-control none \
                --metrics gpu__time_duration.sum --csv "$bin/foxbench" --backend cuda \
                --batch "$nb" --envs 1024 --reps 1 --chunk 2 --set engine.bounds_mode=$mode \
                --set train.learning_starts="$ls" > "$out/ncu_$mode.csv" 2>> "$out/ncu.err"
            echo "ncu $mode exit $?" >> "$out/ncu.err"
        done
        [ -f "$out/ncu.err" ] && tail -2 "$out/ncu.err"
    fi
    [ "${ONCE:-1}" = 0 ] && return
    once
}

# The daemon's integration test and the sweep test with their foxds on the CUDA backend
# (FOXD_TEST_BACKEND=cuda): every command of the protocol, the drills' halts and the sweeps'
# packing on the device, with the carried foxd, foxctl, load_client and nngcat.
integration() {
    local out=${OUT:-/tmp/foxgpu} bin=$PWD/.carry/bin t rc
    mkdir -p "$out"
    use_libs
    for t in daemon sweep; do
        local args=("$bin/foxd" "$bin/foxctl")
        [ $t = daemon ] && args+=("$bin/load_client" scripts/foxctl-completion.bash)
        PATH=$bin:$PATH FOXD_TEST_BACKEND=cuda OPENBLAS_NUM_THREADS=4 \
            timeout "${INTEGRATION_S:-300}" bash "tests/test_$t.sh" "${args[@]}" \
            > "$out/test_$t.txt" 2>&1
        rc=$?
        echo "test_$t.sh on cuda: exit $rc"
        grep -E "^FAIL|checks passed" "$out/test_$t.txt" | tail -1
    done
}

# The walk-forward end to end on the GPU (two epochs a fold: a smoke run, not a result).
once() {
    local out=${OUT:-/tmp/foxgpu}
    mkdir -p "$out"
    use_libs
    OPENBLAS_NUM_THREADS=8 timeout "${ONCE_S:-120}" .carry/bin/foxd --once --backend cuda \
        --set train.epochs=2 > "$out/foxd_once.txt" 2>&1
    echo "foxd --once exit $?" >> "$out/foxd_once.txt"
    grep -v "^{" "$out/foxd_once.txt" | tail -12
}

# Nsight Compute's full sections for one launch of each kernel in $DETAIL (space-separated
# regexes on the demangled name) in an adaptive step.
probe() {
    local out=${OUT:-/tmp/foxgpu} bin=.carry/bin k=0 re
    mkdir -p "$out"
    use_libs
    command -v ncu > /dev/null || return 0
    # learning_starts one step's collection, so that the warm-up's train steps come at once
    for b in ${PROBE_BINS:-foxbench}; do for re in ${DETAIL:-}; do
        k=$((k + 1))
        timeout "${NCU_S:-120}" ncu --set full --import-source yes --kernel-name-base demangled \
            --clock-control none --kernel-name "regex:$re" --launch-skip "${SKIP:-2}" \
            --launch-count 1 -o "/tmp/detail$k" -f "$bin/$b" --backend cuda \
            ${PROBE_ARGS:---batch 256 --envs 1024 --reps 1 --chunk 3 \
            --set engine.bounds_mode=adaptive --set train.learning_starts=1024} \
            > "/tmp/detail$k.log" 2>&1
        {
            echo "#### $b: $re"
            grep "==ERROR==\|==WARNING==" "/tmp/detail$k.log" | head -5
            ncu --import "/tmp/detail$k.ncu-rep" --print-details all 2>&1
        } >> "$out/ncu_detail.txt"
        # Per SASS instruction: stall samples and source line, to see which load a kernel waits on
        [ -n "${PROBE_SOURCE:-}" ] && ncu --import "/tmp/detail$k.ncu-rep" --page source --csv \
            --print-source sass > "$out/ncu_source$k.csv" 2>&1
    done; done
    tail -1 "$out/ncu_detail.txt"
}

# This build under several environments, interleaved: $ENVS is a space-separated list of
# settings, each a comma-separated VAR=value list or "-" for none
# (e.g. "- CUDA_DEVICE_MAX_CONNECTIONS=32");
# parity and drills under each of $CHECK_ENVS first (unset: every one of $ENVS; empty: none).
envab() {
    local out=${OUT:-/tmp/foxgpu} bin=.carry/bin r e p
    mkdir -p "$out"
    use_libs
    { date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > "$out/machine.txt" 2>&1
    cat "$out/machine.txt"
    vars() { [ "$1" = - ] || echo "${1//,/ }"; }
    for e in ${CHECK_ENVS-${ENVS:--}}; do
        for p in "$bin/test_cuda_parity" "$bin/test_cuda_drills"; do
            local log="$out/$(basename "$p")_${e//[^A-Za-z0-9]/_}.log" t0=$SECONDS
            env $(vars "$e") CK_FORK=no OPENBLAS_NUM_THREADS=8 timeout "${TEST_S:-130}" "$p" \
                > "$log" 2>&1
            echo "$p [$e] exit $? ($((SECONDS - t0)) s)" >> "$log"
            grep -E "^(device|graphs|fold|drill|stab|[0-9]+%)|exit|Failure|Error" "$log" |
                grep -v "mean: grad" | head -40
        done
    done
    local args="--reps ${REPS:-5} --chunk 100 --set train.learning_starts=4096 --batch 256 --batch 4096"
    {
        for r in $(seq "${ROUNDS:-2}"); do
            for e in ${ENVS:--}; do
                echo "## round $r [$e] ${ARGS:-}"
                env $(vars "$e") timeout "${BENCH_S:-40}" "$bin/foxbench" --backend cuda $args \
                    ${ARGS:-} | tail -2
            done
        done
    } > "$out/bench_envab.md" 2>&1
    cat "$out/bench_envab.md"
}

# The timeline of a few replayed steps (foxbench --trace: every graph node with its stream, start
# and end, through CUPTI) at each batch of $TL_BATCHES (256), with bench/timeline.py's reading of
# one train step where python3 is there, all in one archive, $OUT/timeline.tar.gz: where the
# critical path waits, which ncu's per-kernel times cannot show.
timeline() {
    local out=${OUT:-/tmp/foxgpu} bin=.carry/bin tl=/tmp/fox_timeline b
    mkdir -p "$out" "$tl"
    use_libs
    for b in ${TL_BATCHES:-256}; do
        timeout "${TL_S:-60}" "$bin/foxbench" --backend cuda --batch "$b" --envs 1024 \
            --chunk "${TL_CHUNK:-4}" --set train.learning_starts=2048 ${ARGS:-} \
            --trace "$tl/timeline_$b.csv" > "$tl/trace_$b.log" 2>&1
        echo "foxbench --trace exit $?" >> "$tl/trace_$b.log"
        tail -1 "$tl/trace_$b.log"
        [ -f "$tl/timeline_$b.csv" ] && command -v python3 > /dev/null &&
            python3 bench/timeline.py "$tl/timeline_$b.csv" > "$tl/timeline_$b.txt" 2>&1 &&
            head -9 "$tl/timeline_$b.txt"
    done
    tar -C "$tl" -czf "$out/timeline.tar.gz" .
}

# Diagnostic builds side by side: .carry/bin/foxbench and every .carry/bin/<name>/foxbench (built
# at prepare time from a temporary change, e.g. one stage of a kernel left out, never committed),
# interleaved for $ROUNDS rounds with the foxbench arguments $ARGS.
variants() {
    local out=${OUT:-/tmp/foxgpu} bin=.carry/bin r b
    mkdir -p "$out"
    use_libs
    {
        for r in $(seq "${ROUNDS:-2}"); do
            for b in "$bin"/foxbench "$bin"/*/foxbench; do
                [ -x "$b" ] || continue
                echo "## round $r $b ${ARGS:-}"
                timeout 60 "$b" --backend cuda --reps 5 --chunk 100 \
                    --set train.learning_starts=4096 ${ARGS:-} | tail -2
            done
        done
    } > "$out/bench_variants.md" 2>&1
    cat "$out/bench_variants.md"
}

case "${1:-}" in
prepare) prepare ;;
overhead) overhead ;;
run) run ;;
quick) quick ;;
final) final ;;
probe) probe ;;
variants) variants ;;
envab) envab ;;
timeline) timeline ;;
sweep) sweep ;;
memcheck) memcheck ;;
once) once ;;
integration) integration ;;
multi) shift; multi "$@" ;;
population) population ;;
probe_gemm) use_libs && for b in ${BATCHES:-256 4096}; do .carry/bin/gemm_probe "$b"; done ;;
probe_launch) probe_launch ;;
latency) shift; use_libs && mkdir -p "${OUT:-/tmp/foxgpu}" &&
    FOXD_BENCH_BACKEND=cuda bench/latency.sh .carry/bin "$@" | tee "${OUT:-/tmp/foxgpu}/latency.md" ;;
learning) shift; use_libs && python3 bench/learning.py --foxctl .carry/bin/foxctl "$@" ;;
*) echo "usage: $0 prepare|run|quick|final|overhead|probe|variants|envab|probe_gemm|timeline|once|sweep|memcheck|probe_launch|latency|learning|multi|integration" >&2
    exit 2 ;;
esac
