#!/bin/bash
# test_multi_run.sh FOXD FOXCTL FOXBENCH MULTI_RUN — bench/multi_run.sh's
# "same bits" verdict on the CPU backend.
#
# Checks: a sweep of 2 jobs on 1 and then 2 daemons gives every job the
# first K's figures and chosen checkpoint (and the checkpoint was found,
# so the comparison is not of nothing); 2 engines in one foxbench process
# give each seed's digest alone; and the verdict fails, naming what
# differs, when a run's results do change: through a build directory whose
# foxbench, or foxd, trains with another learning rate from its second run.
# Bounded for a 2-core machine: a tiny model, a few steps, one BLAS thread.
set -u
FOXD=$(realpath "$1") FOXCTL=$(realpath "$2") FOXBENCH=$(realpath "$3") MULTI_RUN=$(realpath "$4")
command -v python3 >/dev/null || { echo "python3 not installed: skipping"; exit 77; }
. "$(dirname "$(realpath "$0")")/lib.sh"

test_init foxd-multi-run
no_pictures
# One line: multi_run.sh reads ARGS as one line of words.
TINY="--set model.h1=32 --set model.h2=16 --set model.head_hidden=16 --set model.aux_hidden=8"
TINY+=" --set env.n_envs=8 --set train.learning_starts=64 --set data.synth_bars=3000"
TINY+=" --set engine.threads=1 ${REPLAY[*]}"
export BACKEND=cpu BATCH=16 REPS=3 CHUNK=5 JOBS=2 STEPS=20 EPOCHS=1 ARGS="$TINY"

# build_dir NAME: a build directory of the real programs, as multi_run.sh finds them.
build_dir() {
    mkdir -p "$dir/$1/daemon" "$dir/$1/client" "$dir/$1/bench"
    ln -s "$FOXD" "$dir/$1/daemon/foxd"
    ln -s "$FOXCTL" "$dir/$1/client/foxctl"
    ln -s "$FOXBENCH" "$dir/$1/bench/foxbench"
}

# changed PROGRAM PATTERN REAL: PROGRAM's runs whose arguments match PATTERN train with
# another learning rate from the second one on.
changed() {
    rm "$dir/changed/$1"
    cat >"$dir/changed/$1" <<EOF
#!/bin/bash
if [[ " \$* " == $2 ]]; then
    echo >>"$dir/changed/$(basename "$1").count"
    [ "\$(wc -l <"$dir/changed/$(basename "$1").count")" -ge 2 ] && set -- "\$@" --set train.lr=0.002
fi
exec "$3" "\$@"
EOF
    chmod +x "$dir/changed/$1"
}

build_dir same
build_dir changed
changed bench/foxbench '*" train.seed=1 "*' "$FOXBENCH"
changed daemon/foxd '*' "$FOXD"

# --- the same jobs on 1 and 2 daemons
BUILD="$dir/same" MODE=sweep OUT="$dir/sweep" timeout 120 "$MULTI_RUN" 1 2 >"$dir/sweep.md" \
    2>"$dir/sweep.err" || { cat "$dir/sweep.md" "$dir/sweep.err"; fail "MODE=sweep exited $?"; }
grep -qx 'same bits: 2/2 jobs against K=1' "$dir/sweep.md" || { cat "$dir/sweep.md"; fail "sweep: no same-bits line"; }
[ "$(grep -c '"chosen_crc32": \[[0-9]' "$dir/sweep/k2-results.txt")" = 2 ] ||
    fail "sweep: a job's chosen checkpoint was not found: $(cut -c1-200 "$dir/sweep/k2-results.txt")"
ok "sweep on 1 then 2 daemons: every job's figures and chosen checkpoint the same"

# --- 2 engines in one process against each seed alone
BUILD="$dir/same" MODE=engines ALONE=1 OUT="$dir/engines" timeout 60 "$MULTI_RUN" 1 2 \
    >"$dir/engines.md" 2>"$dir/engines.err" ||
    { cat "$dir/engines.md" "$dir/engines.err"; fail "MODE=engines exited $?"; }
grep -qx 'same bits: 3/3 runs against each seed alone' "$dir/engines.md" ||
    { cat "$dir/engines.md"; fail "engines: no same-bits line"; }
[ "$(awk '$1 == 2' "$dir/engines/digests.txt" | wc -l)" = 2 ] || fail "engines: K=2 gave no 2 digests"
ok "2 engines in one process: each seed's digest alone"

# --- a run whose results change is named, and the verdict fails
BUILD="$dir/changed" OUT="$dir/bench-changed" timeout 60 "$MULTI_RUN" 1 2 >"$dir/bench-changed.md" \
    2>"$dir/bench-changed.err"
rc=$?
[ $rc = 1 ] && grep -qx 'same bits: 0/1 runs against the first K that ran each seed; differ: seed 1 (K=2)' \
    "$dir/bench-changed.md" || { cat "$dir/bench-changed.md" "$dir/bench-changed.err"; fail "changed foxbench: rc $rc"; }
ok "a foxbench run whose digest changed: named, exit 1"

BUILD="$dir/changed" MODE=sweep OUT="$dir/sweep-changed" timeout 120 "$MULTI_RUN" 1 2 \
    >"$dir/sweep-changed.md" 2>"$dir/sweep-changed.err"
rc=$?
[ $rc = 1 ] && grep -qx 'same bits: 0/2 jobs against K=1; differ: c0-s1-f0 (K=2) c0-s2-f0 (K=2)' \
    "$dir/sweep-changed.md" || { cat "$dir/sweep-changed.md" "$dir/sweep-changed.err"; fail "changed foxd: rc $rc"; }
ok "sweep jobs whose results changed: named, exit 1"
echo "all $checks checks passed"
