#!/usr/bin/env bash
# test_records.sh — what foxctl leaves and reads on disk: `run --spawn`
# keeps its run directory under the working directory (path printed at the
# start and the end) while the sockets' temporary directory goes away;
# `checkpoint list` shows the fold checkpoints; `backtest` applies one;
# `plot` draws again; a one-epoch run draws every picture without a
# warning, its plotter's line in foxd's log; a series with times gets
# dates on the equity picture's axis; `plot --follow` redraws a run in the
# background until it ends (or SIGINT); `compare` draws two runs in one
# picture, one legend entry each; foxplot says in one line when gnuplot is
# missing.
# Usage: test_records.sh FOXD FOXCTL FOXPLOT
# The test works in its own directory: the programs' paths must not be relative.
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
FOXD=$(abs "$1") FOXCTL=$(abs "$2") FOXPLOT=$(abs "$3")
. "$(dirname "$0")/lib.sh"
test_init foxrec
export TMPDIR="$dir/tmp" FOXD
mkdir -p "$TMPDIR" "$dir/work"
cd "$dir/work" || fail "cd"

small="--backend cpu --set data.synth_bars=6000 --set model.h1=32 --set model.h2=24
       --set train.learning_starts=256 --set env.n_envs=16 --set train.batch=32"
# shellcheck disable=SC2086
"$FOXCTL" run --spawn --folds 0 --epochs 2 --steps 40 $small --set run.name=spawned \
    >"$dir/out" 2>"$dir/err" || { cat "$dir/err"; fail "run --spawn"; }
run=$(ls -d "$dir"/work/runs/*-spawned 2>/dev/null)
[ -n "$run" ] && [ -d "$run" ] || fail "no run directory under the working directory"
[ "$(grep -c "run directory $run" "$dir/err")" -eq 2 ] || fail "the path is not printed twice"
ok "run --spawn keeps $run"
[ -z "$(ls -A "$TMPDIR")" ] || fail "the temporary directory is left: $(ls -A "$TMPDIR")"
ok "the sockets' temporary directory is gone"
for f in config.json metrics.jsonl epochs.csv isv.csv foxd.log folds.json fold0-chosen.ckpt \
         fold0-chosen.json fold0-last.ckpt fold0-last.json fold0-baselines.csv fold0-equity.csv; do
    [ -s "$run/$f" ] || fail "$f missing or empty"
done
grep -q '"type":"fold"' "$run/metrics.jsonl" || fail "metrics.jsonl has no fold line"
grep -q 'fold 0 epoch 2/2' "$run/foxd.log" || fail "foxd.log lacks the progress"
ok "the run directory holds the record"

"$FOXCTL" checkpoint list "$dir/work/runs" >"$dir/list" || fail "checkpoint list"
grep -q 'spawned/fold0-chosen.ckpt *0 ' "$dir/list" || { cat "$dir/list"; fail "list: chosen"; }
grep -q 'spawned/fold0-last.ckpt *0 *2 *80 ' "$dir/list" || { cat "$dir/list"; fail "list: last"; }
"$FOXCTL" --json checkpoint list "$run" | grep -q '"name":"fold0-chosen.ckpt"' ||
    fail "checkpoint list --json"
"$FOXCTL" checkpoint list "$dir/nowhere" 2>/dev/null && fail "a missing directory is listed"
ok "checkpoint list"

"$FOXCTL" backtest --checkpoint "$run/fold0-chosen.ckpt" --out "$dir/bt" >"$dir/bt.out" \
    2>"$dir/bt.err" || { cat "$dir/bt.err"; fail "backtest"; }
grep -q '^  buy & hold ' "$dir/bt.out" && grep -q '^  policy ' "$dir/bt.out" ||
    fail "backtest prints no comparison"
[ -s "$dir/bt/backtest.json" ] && [ -s "$dir/bt/backtest-equity.csv" ] || fail "backtest files"
# shellcheck disable=SC2086
"$FOXCTL" backtest --checkpoint "$run/fold0-chosen.ckpt" --out "$dir/bt2" --set model.h1=48 \
    >/dev/null 2>"$dir/bt2.err" && fail "a foreign layout was backtested"
grep -q 'layout fingerprint [0-9a-f]*, this engine has [0-9a-f]*' "$dir/bt2.err" ||
    { cat "$dir/bt2.err"; fail "the refusal names no fingerprints"; }
ok "backtest, and the refusal of another layout"

# The daemon's backtest command: the same figures as the private foxd's, bit for bit.
mkdir -p "$dir/state"
cp "$run/fold0-chosen.ckpt" "$dir/state/chosen.ckpt"
url="ipc://$dir/foxd.sock"
# shellcheck disable=SC2086
foxd_start --url "$url" -- --listen "$url" --pub "ipc://$dir/ev.sock" \
    --set "daemon.state_dir=$dir/state" --set "daemon.runtime_dir=$dir" \
    --set daemon.probe_ms=0 --set daemon.metrics_interval_ms=0 $small
"$FOXCTL" --url "$url" --timeout 60000 backtest --daemon --checkpoint chosen.ckpt \
    >"$dir/dbt.out" 2>"$dir/dbt.err" || { cat "$dir/dbt.err"; fail "backtest --daemon"; }
diff <(grep -v '^backtest over' "$dir/bt.out") "$dir/dbt.out" >/dev/null ||
    { diff <(grep -v '^backtest over' "$dir/bt.out") "$dir/dbt.out"; fail "daemon and private foxd differ"; }
dbt=$(sed -n 's/^run directory //p' "$dir/dbt.err")
case $dbt in "$dir/state/runs/"*-backtest) ;; *) fail "daemon backtest directory '$dbt'" ;; esac
[ -s "$dbt/backtest.json" ] || fail "the daemon's backtest keeps no backtest.json"
"$FOXCTL" --url "$url" raw backtest '{"checkpoint":"/etc/passwd"}' >"$dir/perm" 2>&1 &&
    fail "a checkpoint outside the state directory was read"
grep -q EPERM "$dir/perm" || fail "outside the state directory: $(cat "$dir/perm")"
"$FOXCTL" --url "$url" shutdown --no-checkpoint >/dev/null 2>&1
wait "$pid"
pid=
ok "the daemon's backtest command"

if command -v gnuplot >/dev/null 2>&1; then
    rm -f "$run"/*.png "$run"/*.svg
    "$FOXCTL" plot "$run" 2>/dev/null || fail "plot"
    for p in fold0-loss fold0-sharpe fold0-equity isv; do
        head -c 4 "$run/$p.png" | grep -q PNG || fail "$p.png is not a PNG"
        grep -q '</svg>' "$run/$p.svg" || fail "$p.svg is not an SVG"
    done
    ok "plot draws the pictures again"

    # The shortest run: one epoch, one row of isv.csv. Every picture, and gnuplot warns of
    # nothing, in a bare environment's C locale too.
    env -u LANG -u LANGUAGE -u LC_ALL -u LC_CTYPE "$FOXD" --once --backend cpu --set train.epochs=1 --set train.steps_per_epoch=30 \
        --set train.folds=0 --set "run.root=$dir/one" >/dev/null 2>"$dir/one.err" ||
        { cat "$dir/one.err"; fail "a one-epoch run"; }
    one=$(ls -d "$dir"/one/*)
    for p in fold0-loss fold0-sharpe fold0-equity isv; do
        [ -s "$one/$p.png" ] && [ -s "$one/$p.svg" ] || { cat "$dir/one.err"; fail "one epoch: no $p"; }
    done
    ! grep -i 'warning' "$dir/one.err" || fail "one epoch: warnings on stderr"
    grep -q '^[0-9T:.-]*Z info: foxplot: pictures in ' "$dir/one.err" ||
        { cat "$dir/one.err"; fail "foxplot's line is not in foxd's log"; }
    grep -q '>validation ± SE<' "$one/fold0-sharpe.svg" || fail "the Sharpe picture has no ± SE"
    ok "a one-epoch run draws every picture without a warning"

    # A series with times: the equity's axis reads in dates.
    awk 'BEGIN { print "time,close"; p = 100; srand(7)
                 for (i = 0; i < 3000; i++) { p *= exp((rand() - 0.5) * 0.02); printf "%d,%.6f\n", 1600000000 + 3600 * i, p } }' \
        >"$dir/times.csv"
    "$FOXCTL" backtest --checkpoint "$run/fold0-chosen.ckpt" --data "$dir/times.csv" --out "$dir/btt" \
        >/dev/null 2>"$dir/btt.err" || { cat "$dir/btt.err"; fail "backtest on a series with times"; }
    [ "$(head -n 1 "$dir/btt/backtest-equity.csv")" = bar,policy,buy_and_hold,time ] ||
        fail "the equity CSV has no time column"
    grep -q '>2020-[01][0-9]-[0-3][0-9]<' "$dir/btt/backtest-equity.svg" ||
        fail "the equity picture's axis has no dates"
    ok "a series with times gets dates on the equity picture's axis"

    # plot --follow on a run going on in the background: redrawn as it goes, until it ends.
    # shellcheck disable=SC2086
    "$FOXD" --once $small --set train.epochs=8 --set train.steps_per_epoch=500 \
        --set train.folds=0 --out "$dir/live" >/dev/null 2>"$dir/live.err" &
    bg=$!
    for _ in $(seq 300); do [ -f "$dir/live/config.json" ] && break; sleep 0.1; done
    timeout 120 "$FOXCTL" plot --follow --every 1 "$dir/live" 2>"$dir/follow.err" ||
        { cat "$dir/follow.err"; fail "plot --follow"; }
    wait "$bg" || { cat "$dir/live.err"; fail "the followed run"; }
    n=$(grep -c "^foxplot: pictures in $dir/live\$" "$dir/follow.err")
    [ "$n" -ge 2 ] && grep -q "the run in $dir/live has ended after $n redraws" "$dir/follow.err" ||
        { cat "$dir/follow.err"; fail "plot --follow drew $n times"; }
    ok "plot --follow redraws a running run ($n times) and stops when it ends"
    # A run that does not end: Ctrl-C stops the follow, at once and cleanly.
    mkdir "$dir/still" && cp "$dir/live/config.json" "$dir/live/metrics.jsonl" "$dir/live/epochs.csv" "$dir/still/"
    timeout --preserve-status -s INT 3 "$FOXCTL" plot --follow "$dir/still" 2>"$dir/still.err" ||
        { cat "$dir/still.err"; fail "plot --follow under SIGINT"; }
    grep -q 'plot --follow: stopped after 1 redraws' "$dir/still.err" || { cat "$dir/still.err"; fail "SIGINT"; }
    "$FOXCTL" plot --follow "$dir/work" 2>"$dir/nofollow.err" && fail "followed a directory with no run"
    grep -q 'no config.json: not a run directory' "$dir/nofollow.err" || fail "$(cat "$dir/nofollow.err")"
    ok "plot --follow stops on SIGINT and refuses a directory that holds no run"

    # compare: one picture, one legend entry per run; a name that is not plain is left out.
    mkdir "$dir/cmp"
    "$FOXCTL" compare --out "$dir/cmp" "$run" "$one" 2>"$dir/cmp.err" || { cat "$dir/cmp.err"; fail "compare"; }
    head -c 4 "$dir/cmp/compare.png" | grep -q PNG || fail "compare.png is not a PNG"
    for r in "$run" "$one"; do
        [ "$(grep -c ">$(basename "$r")<" "$dir/cmp/compare.svg")" -eq 1 ] ||
            fail "compare.svg has not one legend entry for $(basename "$r")"
    done
    [ -z "$(ls -A "$dir/cmp" | grep -v '^compare\.\(png\|svg\)$')" ] || fail "compare left files: $(ls -A "$dir/cmp")"
    cp -r "$one" "$dir/q'x"
    "$FOXCTL" compare --out "$dir/cmp" "$run" "$dir/q'x" 2>"$dir/cmp.err" && fail "compared a run named q'x"
    grep -q "is not a plain run name" "$dir/cmp.err" || { cat "$dir/cmp.err"; fail "the refusal names no reason"; }
    ! grep -q "q'x" "$dir/cmp/compare.svg" || fail "a name that is not plain reached the picture"
    ok "compare: two runs, one picture, a legend entry each; a name with a quote is refused"
else
    echo "# gnuplot is not installed: foxctl plot not checked"
fi
msg=$(env PATH=/nonexistent /bin/bash "$FOXPLOT" "$run" 2>&1)
[ $? -eq 3 ] && [ "$(printf '%s\n' "$msg" | wc -l)" -eq 1 ] &&
    printf '%s' "$msg" | grep -q 'gnuplot is not installed' || fail "no gnuplot: '$msg'"
ok "without gnuplot, one clear line"
echo "all $checks checks passed"
