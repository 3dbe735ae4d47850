#!/bin/bash
# test_sweep.sh FOXD FOXCTL — `foxctl sweep` over two CPU daemons.
#
# Checks: 2 seeds x 2 configurations x 1 fold on two daemons finish, and
# every job's fold object is the one `foxd --once` gives for the same config
# alone (every number but the timing); the table has each configuration
# with 2 seeds; a job file names each member once; the same spec into the
# same directory runs nothing again; a bad spec, a grid of too many jobs and
# an endpoint listed twice are refused; killing one daemon mid-job still
# completes the sweep on the other, the lost job run again there; jobs of
# consecutive seeds on the same data, and jobs of a grid over member keys
# (train.lr, policy.band), packed into one engine's members give each job
# the figures it has run alone (--no-pack), and a generator whose data
# follows train.seed is not packed and says why.
# Bounded for a 2-core machine: a tiny model, 20 steps a job, one BLAS thread.
set -u
FOXD=$(realpath "$1") FOXCTL=$(realpath "$2")
command -v python3 >/dev/null || { echo "python3 not installed: skipping"; exit 77; }
. "$(dirname "$(realpath "$0")")/lib.sh"

test_init foxd-sweep
no_pictures
# FOXD_TEST_BACKEND=cuda runs the same checks on a GPU machine.
TINY=(--backend "${FOXD_TEST_BACKEND:-cpu}" --set model.h1=32 --set model.h2=16 --set model.head_hidden=16
      --set model.aux_hidden=8 --set train.batch=16 --set env.n_envs=8
      --set train.learning_starts=64 --set data.synth_bars=3000 --set engine.threads=1 "${REPLAY[@]}")
pids=()
cleanup_all() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    test_cleanup
}
trap cleanup_all EXIT

# start_daemon NAME: a foxd on $dir/NAME.sock, its pid in pids[NAME's index].
start_daemon() {
    local url="ipc://$dir/$1.sock"
    foxd_start --url "$url" -- "${TINY[@]}" --listen "$url" --pub "ipc://$dir/$1-ev.sock" \
        --set "daemon.state_dir=$dir/state-$1" --set "daemon.runtime_dir=$dir" \
        --set daemon.probe_ms=0 --set daemon.metrics_interval_ms=0
    pids+=("$pid")
    pid=
}
start_daemon a
start_daemon b
A="ipc://$dir/a.sock" B="ipc://$dir/b.sock"
sweep() { timeout -k 5 300 "$FOXCTL" --timeout 3000 sweep "$@"; }

# same_as_alone SWEEP_DIR: each job of the sweep equals `foxd --once` of its
# values alone, every number of its fold objects but the timing.
same_as_alone() {
    python3 - "$1/plan.json" >"$dir/alone.args" <<'EOF' || fail "cannot read $1/plan.json"
import json, sys
for j in json.load(open(sys.argv[1]))["jobs"]:
    sets = ["train.folds=%d" % j["fold"], "train.epochs=1", "train.steps_per_epoch=20"]
    sets += ["%s=%s" % (k, json.dumps(v)) for k, v in j["values"].items()]
    print(j["id"], " ".join("--set " + s for s in sets))
EOF
    while read -r id args; do
        # shellcheck disable=SC2086
        "$FOXD" --once --json "${TINY[@]}" $args >"$dir/alone-$id.json" 2>>"$dir/alone.log" ||
            fail "foxd --once for $id failed"
        python3 - "$dir/alone-$id.json" "$1/jobs/$id.json" <<'EOF' || fail "job $id differs from its run alone"
import json, sys
def numbers(folds):
    # Everything but the timing, which no two runs share.
    timing = ("steps_per_sec", "wall_s", "train_s", "eval_s")
    return [{k: v for k, v in f.items() if k not in timing} for f in folds]
alone = numbers(json.load(open(sys.argv[1]))["folds"])
swept = numbers(json.load(open(sys.argv[2]))["folds"])
if alone != swept or not alone:
    print("alone:", alone, "\nswept:", swept)
    sys.exit(1)
EOF
    done <"$dir/alone.args"
}

cat >"$dir/spec.json" <<'EOF'
{"folds":[0], "seeds":[1,2], "grid":{"train.lr":[0.0003,0.001]},
 "epochs":1, "steps_per_epoch":20}
EOF

# --- 2 seeds x 2 configs x 1 fold over two daemons
sweep "$dir/spec.json" --endpoints "$A,$B" --dir "$dir/sw" >"$dir/sw.out" 2>"$dir/sw.err" ||
    { cat "$dir/sw.out" "$dir/sw.err"; fail "sweep exited $?"; }
n=$(ls "$dir/sw/jobs" | grep -c '^c.*\.json$')
[ "$n" = 4 ] || fail "4 job results wanted, found $n"
ok "sweep over two daemons: 4 jobs done"
grep -q '^train.lr=0.0003  *2 ' "$dir/sw.out" && grep -q '^train.lr=0.001  *2 ' "$dir/sw.out" ||
    { cat "$dir/sw.out"; fail "table lacks a configuration with 2 seeds"; }
grep -q 'ipc://' "$dir/sw/jobs/c0-s1-f0.json" || fail "job record does not name its endpoint"
ok "table: each configuration over 2 seeds; records name their endpoint"
python3 - "$dir"/sw/jobs/c*.json <<'EOF' || fail "a job file repeats a member"
import json, sys
def once(pairs):
    keys = [k for k, _ in pairs]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise SystemExit("%s: %s more than once" % (name, ", ".join(sorted(dup))))
    return dict(pairs)
for name in sys.argv[1:]:
    job = json.load(open(name), object_pairs_hook=once)
    if not isinstance(job.get("config"), int) or not isinstance(job.get("effective_config"), dict):
        raise SystemExit("%s: config %r, effective_config %r"
                         % (name, job.get("config"), job.get("effective_config")))
EOF
ok "job files name each member once: the configuration's index and the effective config apart"

same_as_alone "$dir/sw"
ok "every job's fold object equals foxd --once of its config alone"

# Two folds of one config and seed on one daemon: the second job must not
# train on from the first one's weights.
sweep --folds 0,1 --seeds 5 --epochs 1 --steps 20 --endpoints "$A" --dir "$dir/same" \
    >"$dir/same.out" 2>&1 || { cat "$dir/same.out"; fail "one-daemon sweep exited $?"; }
same_as_alone "$dir/same"
ok "consecutive jobs of one config on one daemon each start from a fresh engine"

# --- packing: 3 consecutive seeds on the same data (data.seed set) train as the members of
# one engine, and each job's figures are those of the same sweep run job by job
grep -q "configuration 0 \[train.lr=0.0003\] is not packed: its data comes from train.seed" \
    "$dir/sw.err" || fail "a generator with data.seed unset should say why it is not packed"
for mode in pack no-pack; do
    sweep --folds 0 --seeds 1,2,3 --set data.seed=7 --epochs 1 --steps 20 --endpoints "$A" \
        --dir "$dir/$mode" $([ $mode = no-pack ] && echo --no-pack) >"$dir/$mode.out" \
        2>"$dir/$mode.err" || { cat "$dir/$mode.out" "$dir/$mode.err"; fail "$mode sweep exited $?"; }
done
grep -q "3 jobs packed into 1 run, members apart in train.seed " "$dir/pack.err" ||
    fail "the packed sweep should say so: $(cat "$dir/pack.err")"
! grep -q "packed into" "$dir/no-pack.err" || fail "--no-pack packed: $(cat "$dir/no-pack.err")"
# On a GPU a packed run's members are one population, whose products are batched over the
# members: there a packed job is its run alone within the products' rounding (test_cuda_members),
# and only the CPU's figures are compared to the bit (here and for the grid below).
python3 - "$dir/pack" "$dir/no-pack" "${FOXD_TEST_BACKEND:-cpu}" <<'EOF' ||
import json, math, sys
for s in (1, 2, 3):
    p, n = (json.load(open("%s/jobs/c0-s%d-f0.json" % (d, s))) for d in sys.argv[1:3])
    assert p["packed"]["members"] == 3 and p["packed"]["member"] == s - 1, p.get("packed")
    assert "packed" not in n, n
    for k in ("test_sharpe", "test_sharpe_se", "best_epoch", "best_val_sharpe", "test_turnover"):
        if sys.argv[3] == "cpu":
            assert p["folds"][0][k] == n["folds"][0][k], (s, k, p["folds"][0][k], n["folds"][0][k])
        else:
            assert math.isfinite(p["folds"][0][k]), (s, k, p["folds"][0][k])
EOF
    fail "a packed job differs from its run alone"
[ "$(grep -c '^c0-s[123]-f0 ' "$dir/pack.out")" = 3 ] || fail "packed table: $(cat "$dir/pack.out")"
ok "a packed sweep of 3 seeds gives each job the figures of the sweep with --no-pack"

# --- packing by values: a grid over train.lr and policy.band, one seed, packs into one run
# whose members take their jobs' values (and one seed, as a list), each job's figures those
# of the sweep job by job
for mode in pack no-pack; do
    sweep --folds 0 --seeds 4 --set data.seed=7 --set policy.band_rule=fixed \
        --grid train.lr=0.0003,0.003 --grid policy.band=0,4 --epochs 1 --steps 20 \
        --endpoints "$A" --dir "$dir/grid-$mode" $([ $mode = no-pack ] && echo --no-pack) \
        >"$dir/grid-$mode.out" 2>"$dir/grid-$mode.err" ||
        { cat "$dir/grid-$mode.out" "$dir/grid-$mode.err"; fail "grid $mode sweep exited $?"; }
done
grep -q "4 jobs packed into 1 run, members apart in train.lr, policy.band " "$dir/grid-pack.err" ||
    fail "the packed grid should say what its members hold apart: $(cat "$dir/grid-pack.err")"
python3 - "$dir/grid-pack" "$dir/grid-no-pack" "${FOXD_TEST_BACKEND:-cpu}" <<'EOF' ||
import json, math, sys
for c in range(4):
    p, n = (json.load(open("%s/jobs/c%d-s4-f0.json" % (d, c))) for d in sys.argv[1:3])
    assert p["packed"]["members"] == 4, p.get("packed")
    eff = p["effective_config"]
    assert eff["train.seed"] == [4, 4, 4, 4], eff["train.seed"]
    member = p["packed"]["member"]
    assert eff["train.lr"][member] == n["effective_config"]["train.lr"], (c, eff["train.lr"])
    assert eff["policy.band"][member] == n["effective_config"]["policy.band"], c
    for k in ("test_sharpe", "test_sharpe_se", "best_epoch", "best_val_sharpe", "test_turnover",
              "band"):
        if sys.argv[3] == "cpu":
            assert p["folds"][0][k] == n["folds"][0][k], (c, k, p["folds"][0][k], n["folds"][0][k])
        else:
            assert math.isfinite(p["folds"][0][k]), (c, k, p["folds"][0][k])
EOF
    fail "a packed grid job differs from its run alone"
ok "a packed grid over train.lr and policy.band gives each job the figures of --no-pack"

# --- the same spec again: nothing runs (no daemon needed), the table comes back
before=$(stat -c %Y "$dir"/sw/jobs/*.json | sort | md5sum)
sweep "$dir/spec.json" --endpoints "ipc://$dir/nobody.sock" --dir "$dir/sw" >"$dir/sw2.out" \
    2>"$dir/sw2.err" || { cat "$dir/sw2.err"; fail "re-run exited $?"; }
grep -q '4 of 4 jobs already done' "$dir/sw2.err" || fail "re-run did not skip finished jobs"
[ "$before" = "$(stat -c %Y "$dir"/sw/jobs/*.json | sort | md5sum)" ] || fail "re-run rewrote results"
ok "re-run of a finished sweep skips every job"
sweep --gather "$dir/sw" >"$dir/gather.out" || fail "gather exited $?"
grep -q '4 of 4 jobs done, 0 failed' "$dir/gather.out" || fail "gather: $(cat "$dir/gather.out")"
ok "sweep --gather rebuilds the table"

# --- bad input
echo '{"folds":[0],"seeds":[1],"gird":{}}' >"$dir/bad.json"
out=$(sweep "$dir/bad.json" --dir "$dir/bad" 2>&1)
rc=$?
[ $rc = 2 ] && [[ $out == *gird*unknown* ]] || fail "bad spec: rc $rc, $out"
echo '{"epochs":2}' >"$dir/other.json"
out=$(sweep "$dir/other.json" --dir "$dir/sw" 2>&1)
rc=$?
[ $rc = 2 ] && [[ $out == *"another sweep"* ]] || fail "foreign dir: rc $rc, $out"
ok "a bad spec and another sweep's directory are refused (exit 2)"
python3 -c 'import json; print(json.dumps({"folds": [0], "seeds": [1],
    "grid": {"train.k%d" % i: [1, 2] for i in range(64)}}))' >"$dir/huge.json"
out=$(sweep "$dir/huge.json" --dir "$dir/huge" 2>&1)
rc=$?
[ $rc = 2 ] && [[ $out == *"more than 100000 jobs"* ]] && [ ! -e "$dir/huge" ] ||
    fail "a grid of 2^64 jobs: rc $rc, $out"
ok "a grid of 2^64 jobs is refused, not wrapped to 0 (exit 2)"
for twice in "$A,$A" "$A,ipc://$dir/./state-a/..//a.sock"; do
    out=$(sweep "$dir/spec.json" --endpoints "$twice" --dir "$dir/twice" 2>&1)
    rc=$?
    [ $rc = 2 ] && [[ $out == *"are the same daemon"* ]] && [ ! -e "$dir/twice" ] ||
        fail "--endpoints $twice: rc $rc, $out"
done
ok "one endpoint listed twice, as the same text or another path to it, is refused (exit 2)"

# --- kill one daemon mid-job: the sweep completes on the other
sweep "$dir/spec.json" --seeds 1,2,3 --steps 300 --endpoints "$A,$B" --dir "$dir/kill" \
    >"$dir/kill.out" 2>"$dir/kill.err" &
spid=$!
for _ in $(seq 1 300); do
    "$FOXCTL" --url "$B" --timeout 2000 status 2>/dev/null | grep -q 'training' && break
    sleep 0.1
done
kill -9 "${pids[1]}"
wait "$spid"
rc=$?
[ $rc = 0 ] || { cat "$dir/kill.out" "$dir/kill.err"; fail "sweep after a kill exited $rc"; }
grep -q "lost with $B" "$dir/kill.err" || { cat "$dir/kill.err"; fail "no job was lost with b"; }
n=$(ls "$dir/kill/jobs" | grep -c '^c.*[0-9]\.json$')
[ "$n" = 6 ] || fail "6 job results wanted after the kill, found $n"
grep -q "ipc://$dir/a.sock" "$dir"/kill/jobs/*.json || fail "results do not name a"
ok "one daemon killed mid-job: all 6 jobs finished on the other"
echo "all $checks checks passed"
