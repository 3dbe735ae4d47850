#!/bin/bash
# test_population.sh FOXD FOXCTL — a population (engine.members = 3) through foxd and
# foxctl on the CPU backend: --member's range on isv, flags and inject-fault (foxctl's own
# bound and foxd's engine.members), a fault in one member that halts it while the fold goes
# on, and where that shows: the fold table's members line, status, flags per member, the
# Prometheus textfile, metrics.jsonl, folds.json, members.csv and the Sharpe picture. One
# member's outputs carry none of it.
set -u
FOXD=$(realpath "$1") FOXCTL=$(realpath "$2")
. "$(dirname "$(realpath "$0")")/lib.sh"

test_init foxd-pop
url="ipc://$dir/foxd.sock"
pub="ipc://$dir/events.sock"
token=t0ken-$$
printf '%s\n' "$token" > "$dir/token"
chmod 600 "$dir/token"
TINY=(--backend cpu --set model.h1=32 --set model.h2=16 --set model.head_hidden=16
      --set model.aux_hidden=8 --set train.batch=16 --set env.n_envs=8
      --set train.learning_starts=64 --set data.synth_bars=3000 "${REPLAY[@]}")
ctl() { timeout -k 5 120 "$FOXCTL" --url "$url" --pub "$pub" --token "$token" --timeout 10000 "$@"; }

# --------------------------------------------------------------- one member
"$FOXD" --once "${TINY[@]}" --set train.folds=0 --set train.epochs=1 \
    --set train.steps_per_epoch=20 >"$dir/one.out" 2>"$dir/one.err" || fail "foxd --once: $(cat "$dir/one.err")"
! grep -q "members" "$dir/one.out" || fail "one member printed a members line: $(cat "$dir/one.out")"
ok "one member: no members line in the table"

# ---------------------------------------------------------------- three members
foxd_start --url "$url" -- --listen "$url" --pub "$pub" --set "daemon.state_dir=$dir/state" \
    --set "daemon.runtime_dir=$dir" --set "daemon.token_file=$dir/token" \
    --set daemon.metrics_interval_ms=200 "${TINY[@]}" --set engine.members=3 --set debug.enable=1 \
    --set engine.halt_rule=strict
ok "foxd started with engine.members=3"

out=$(ctl isv --member 3 2>&1)
[ $? -eq 1 ] && grep -q "args.member 3 is outside \[0, 3): engine.members is 3" <<<"$out" ||
    fail "isv --member 3: $out"
out=$(ctl inject-fault h_s2 nan --member 5 2>&1)
[ $? -eq 1 ] && grep -q "args.member 5 is outside \[0, 3)" <<<"$out" ||
    fail "inject-fault --member 5: $out"
ok "foxd refuses a member outside [0, engine.members)"
for cmd in "isv --member 64" "flags --member x" "inject-fault h_s2 nan --member -1"; do
    out=$(ctl $cmd 2>&1)
    [ $? -eq 2 ] && grep -q -- "--member takes one member index in \[0, 63\]" <<<"$out" ||
        fail "foxctl $cmd: $out"
done
ok "foxctl refuses --member outside [0, 63] with a usage error"
ctl --json isv 3 --member 2 | grep -q '"member":2' || fail "isv --member 2"
ctl --json isv 3 | grep -q '"members":\[{"slots":\[{"index":3,' || fail "isv: members: $(ctl --json isv 3)"
[ "$(ctl --json flags | grep -o '"member":[0-9]' | tr '\n' ' ')" = '"member":0 "member":1 "member":2 ' ] ||
    fail "flags: members: $(ctl --json flags)"
ok "isv and flags: one member's with --member, every member's without"

ctl --json inject-fault h_s2 nan --step 2 --member 1 | grep -q '"member":1' || fail "inject-fault --member 1"
ctl start-fold 0 --epochs 2 --steps 40 >"$dir/run.out" 2>&1 || fail "the fold with one member halted: $(cat "$dir/run.out")"
grep -Eq '^  members \(3, 2 training\): test Sharpe -?[0-9.]+ ± [0-9.]+ \(mean ± SE over members\), best #[02] -?[0-9.]+, worst #[02] -?[0-9.]+; #1 halted at step [0-9]+ \(h_s2\)$' \
    "$dir/run.out" || fail "members line: $(grep members "$dir/run.out")"
grep -Eq '^  members: test Sharpe -?[0-9.]+ ± [0-9.]+ \(the folds. mean over members, averaged; SE pooled over 1 fold\)$' \
    "$dir/run.out" || fail "the mean block's members line: $(grep members "$dir/run.out")"
ok "a fault in member 1 halts it alone; the table's members line says so"
ctl status | grep -q "^members  2/3 training$" || fail "status: $(ctl status)"
ctl flags --member 1 | grep -q "h_s2" || fail "flags --member 1: $(ctl flags --member 1)"
ctl flags --member 0 | grep -q "no sentinel flag set" || fail "flags --member 0: $(ctl flags --member 0)"
ok "status counts the members training; flags --member shows each member's"
for _ in $(seq 1 50); do grep -q 'foxd_member_halted{member="1"} 1' "$dir/state/foxd.prom" 2>/dev/null && break; sleep 0.1; done
grep -q 'foxd_member_halted{member="1"} 1' "$dir/state/foxd.prom" &&
    grep -q 'foxd_member_halted{member="0"} 0' "$dir/state/foxd.prom" &&
    grep -q 'foxd_member_flags_set{member="1"} 2' "$dir/state/foxd.prom" &&
    [ "$(grep -c '^# TYPE foxd_member_test_sharpe gauge$' "$dir/state/foxd.prom")" = 1 ] &&
    [ "$(grep -c '^foxd_member_test_sharpe{member="[0-2]"}' "$dir/state/foxd.prom")" = 3 ] ||
    fail "Prometheus: $(grep member "$dir/state/foxd.prom")"
ok "the Prometheus textfile has a gauge per member, each family once"
run=$(ls -d "$dir"/state/runs/*/ | head -1)
grep '"type":"epoch"' "$run/metrics.jsonl" | tail -1 | grep -q '"members":\[{"member":0,"training":true,.*{"member":1,"training":false,' ||
    fail "metrics.jsonl: $(tail -2 "$run/metrics.jsonl")"
python3 - "$run/folds.json" <<'PY' || fail "folds.json's members"
import json, sys
m = json.load(open(sys.argv[1]))["folds"][0]["members"]
assert m["n"] == 3 and m["training"] == 2 and m["lead"] == 0, m
e = m["each"][1]
assert e["halt"] == "nan" and e["halt_slot"] == "h_s2" and e["halt_step"] > 0, e
assert [x["seed"] - m["each"][0]["seed"] for x in m["each"]] == [0, 1, 2], m
PY
ok "metrics.jsonl and folds.json carry the members"
[ "$(head -1 "$run/members.csv")" = fold,epoch,members,training,test_sharpe_min,test_sharpe_max,test_sharpe_mean ] &&
    grep -q '^0,1,3,2,' "$run/members.csv" || fail "members.csv: $(cat "$run/members.csv")"
if command -v gnuplot >/dev/null; then
    for _ in $(seq 1 100); do [ -f "$run/fold0-sharpe.svg" ] && break; sleep 0.1; done
    grep -q "members lowest to highest" "$run/fold0-sharpe.svg" ||
        fail "the Sharpe picture has no band over the members"
fi
ok "members.csv keeps the members' spread per epoch; the Sharpe picture draws it as a band"
ctl shutdown --no-checkpoint >/dev/null || fail "shutdown"
wait "$pid"
pid=
echo "all $checks checks passed"
