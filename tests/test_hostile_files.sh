#!/usr/bin/env bash
# test_hostile_files.sh — a run directory made by someone else: what foxd,
# foxctl and foxplot read from it never runs as a command. A run.name that
# closes a quoted gnuplot string and calls system() in the config.json
# beside a checkpoint, and a system() call as a field of epochs.csv, leave
# no PWNED file behind; the backtest and the plot refuse them with a clear
# error or draw without running them.
# Usage: test_hostile_files.sh FOXD FOXCTL
# The test works in its own directory: the programs' paths must not be relative.
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
FOXD=$(abs "$1") FOXCTL=$(abs "$2")
. "$(dirname "$0")/lib.sh"
test_init foxhostile
mkdir -p "$dir/work"
cd "$dir/work" || fail "cd"
command -v gnuplot >/dev/null 2>&1 || { echo "# gnuplot is not installed: nothing to attack"; exit 77; }

TINY=(--backend cpu --set model.h1=32 --set model.h2=16 --set model.head_hidden=16
      --set model.aux_hidden=8 --set train.batch=16 --set env.n_envs=8
      --set train.learning_starts=64 --set data.synth_bars=3000
      --set train.steps_per_epoch=20 --set train.epochs=1 --set train.folds=0)
"$FOXD" --once "${TINY[@]}" --out "$dir/run" >/dev/null 2>"$dir/once.err" ||
    { cat "$dir/once.err"; fail "foxd --once"; }
[ -s "$dir/run/fold0-chosen.ckpt" ] && [ -s "$dir/run/epochs.csv" ] || fail "no run to attack"

# pwned WHERE: fail when any PWNED file appeared under the test's directory.
pwned() {
    [ -z "$(find "$dir" -name 'PWNED*' -print -quit)" ] ||
        fail "$1 ran a command: $(find "$dir" -name 'PWNED*')"
}

# The config.json beside a checkpoint names the backtest's run directory.
mkdir "$dir/theirs"
cp "$dir/run/fold0-chosen.ckpt" "$dir/theirs/"
python3 - "$dir/run/config.json" "$dir/theirs/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["run.name"] = "q'\nsystem('id > PWNED.txt')\n#"
json.dump(c, open(sys.argv[2], "w"))
EOF
"$FOXCTL" backtest --checkpoint "$dir/theirs/fold0-chosen.ckpt" >"$dir/bt.out" 2>"$dir/bt.err"
rc=$?
pwned "backtest with a hostile run.name"
[ $rc -ne 0 ] && grep -q 'run.name' "$dir/bt.err" ||
    { cat "$dir/bt.err"; fail "a run.name with control characters: exit $rc, no error naming the key"; }
ok "a run.name that closes a gnuplot string is refused, and nothing runs"

# A name with a quote but no control character is a legal name: the plot draws, nothing runs.
python3 - "$dir/run/config.json" "$dir/theirs/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["run.name"] = "q'; system('id > PWNED.txt'); '"
json.dump(c, open(sys.argv[2], "w"))
EOF
"$FOXCTL" backtest --checkpoint "$dir/theirs/fold0-chosen.ckpt" >"$dir/bt.out" 2>"$dir/bt.err" ||
    { cat "$dir/bt.err"; fail "backtest with a quote in run.name"; }
pwned "backtest with a quote in run.name"
bt=$(ls -d "$dir"/work/runs/*-q* 2>/dev/null)
[ -n "$bt" ] && head -c 4 "$bt/backtest-equity.png" | grep -q PNG ||
    { cat "$dir/bt.err"; fail "the backtest's picture is not drawn"; }
ok "a quote in run.name: the backtest draws its picture and runs nothing"

# A system() call as the first field of epochs.csv.
cp -r "$dir/run" "$dir/planted"
rm -f "$dir"/planted/*.png "$dir"/planted/*.svg
sed -i '2s/^[^,]*/system("id>PWNED.txt")/' "$dir/planted/epochs.csv"
"$FOXCTL" plot "$dir/planted" 2>"$dir/plot.err" && fail "plot drew a hostile epochs.csv"
pwned "plot of a hostile epochs.csv"
grep -q "epochs.csv:2: column 1 .* is not a number" "$dir/plot.err" ||
    { cat "$dir/plot.err"; fail "the refusal names no line and column"; }
head -c 4 "$dir/planted/fold0-equity.png" | grep -q PNG || fail "the equity picture is not drawn"
ok "a system() call in epochs.csv is refused with its line; the other pictures are drawn"

# The same for a baseline's figure and a fold number with a fraction.
cp "$dir/run/epochs.csv" "$dir/planted/epochs.csv"
sed -i 's/^buy_hold,[^,]*/buy_hold,system("id>PWNED.txt")/' "$dir/planted/fold0-baselines.csv"
"$FOXCTL" plot "$dir/planted" 2>"$dir/plot.err" && fail "plot drew a hostile baselines CSV"
pwned "plot of a hostile baselines CSV"
grep -q "fold0-baselines.csv:2: column 2" "$dir/plot.err" || { cat "$dir/plot.err"; fail "baselines"; }
cp "$dir/run/fold0-baselines.csv" "$dir/planted/"
"$FOXCTL" plot "$dir/planted" 2>"$dir/plot.err" || { cat "$dir/plot.err"; fail "plot again"; }
head -c 4 "$dir/planted/fold0-sharpe.png" | grep -q PNG || fail "the Sharpe picture is not drawn"
ok "a hostile baselines CSV is refused; restored, the plot draws"
echo "all $checks checks passed"
