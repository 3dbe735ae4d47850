#!/bin/bash
# test_sweep_slurm.sh FOXD FOXCTL SBATCH_SCRIPT — the Slurm path of a sweep
# on a real one-node cluster on this host.
#
# Starts its own munged (own key and socket), slurmctld and slurmd from a
# slurm.conf written here for this host alone, on ports of its own, with
# every state file under the test's directory. Then: `foxctl sweep --slurm`
# plans 2 seeds x 2 configs x 1 fold, an array job of
# scripts/foxhunt-sweep.sbatch runs each task's `foxd --once` into the
# sweep's directory, and a gather job that depends on it builds the table;
# every job is done and each configuration has its 2 seeds. Submitting the
# array again reruns only the task whose result was removed. Skips (77) with
# the reason when the cluster cannot start here: not root, Slurm or munge
# not installed (Debian: slurm-wlm, munge), or a daemon that does not come up.
set -u
FOXD=$(realpath "$1") FOXCTL=$(realpath "$2") SCRIPT=$(realpath "$3")
skip() { echo "skipping the Slurm test: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "slurmd must run as root to start jobs as their user"
for p in munged slurmctld slurmd sbatch squeue sinfo python3; do
    command -v "$p" >/dev/null || skip "$p not installed (apt-get install slurm-wlm munge)"
done
. "$(dirname "$(realpath "$0")")/lib.sh"

test_init foxd-slurm
no_pictures
chmod 0755 "$dir"
daemons=()
cleanup_slurm() {
    for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; done
    sleep 0.5
    for p in "${daemons[@]}"; do kill -9 "$p" 2>/dev/null; done
    test_cleanup
}
trap cleanup_slurm EXIT
# On a failure, the daemons' logs say why.
fail_logs() {
    for f in "$dir"/munged.log "$dir"/slurmctld.log "$dir"/slurmd.log; do
        echo "--- $f"
        tail -20 "$f" 2>/dev/null
    done
    fail "$@"
}

# --- munge: a key and a socket of our own
mkdir -p "$dir/munge" && chmod 0711 "$dir/munge"
dd if=/dev/urandom of="$dir/munge/key" bs=1024 count=1 status=none
chmod 0400 "$dir/munge/key"
munged --foreground --force --socket="$dir/munge/sock" --key-file="$dir/munge/key" \
    --pid-file="$dir/munge/pid" --seed-file="$dir/munge/seed" --log-file="$dir/munged.log" \
    2>>"$dir/munged.log" &
daemons+=($!)
for _ in $(seq 1 50); do [ -S "$dir/munge/sock" ] && break; sleep 0.1; done
[ -S "$dir/munge/sock" ] || skip "munged did not start: $(tail -3 "$dir/munged.log" 2>/dev/null)"

# --- a one-node cluster: this host, ports of our own
host=$(hostname -s)
port=$((20000 + $$ % 20000))
cpus=$(nproc)
export SLURM_CONF="$dir/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=foxtest
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/sock
CredType=cred/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=foxtest Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
mkdir -p "$dir/ctld" "$dir/spool"
slurmctld -D -i >>"$dir/slurmctld.out" 2>&1 &
daemons+=($!)
slurmd -D >>"$dir/slurmd.out" 2>&1 &
daemons+=($!)
up=
for _ in $(seq 1 300); do
    sinfo -h -o '%T' 2>/dev/null | grep -qE '^idle' && { up=1; break; }
    sleep 0.1
done
[ -n "$up" ] || skip "the cluster did not come up: $(tail -3 "$dir/slurmctld.log" "$dir/slurmd.log" 2>&1)"
ok "single-node Slurm cluster up ($host, $cpus CPUs)"

# --- the sweep: plan, array, gather (the replay ring of lib.sh's REPLAY)
cat >"$dir/spec.json" <<'EOF'
{"folds":[0], "seeds":[1,2], "grid":{"train.lr":[0.0003,0.001]},
 "epochs":1, "steps_per_epoch":20,
 "set":{"engine.backend":"cpu", "model.h1":32, "model.h2":16, "model.head_hidden":16,
        "model.aux_hidden":8, "train.batch":16, "env.n_envs":8, "train.learning_starts":64,
        "data.synth_bars":3000, "engine.threads":1, "train.replay_capacity":65536}}
EOF
sw="$dir/sweep"
"$FOXCTL" sweep "$dir/spec.json" --slurm --dir "$sw" >"$dir/plan.out" || fail "sweep --slurm exited $?"
[ "$(wc -l <"$sw/tasks.tsv")" = 4 ] || fail "tasks.tsv should have 4 lines"
grep -q 'array=0-3' "$dir/plan.out" || fail "sweep --slurm did not print the array: $(cat "$dir/plan.out")"
ok "sweep --slurm writes plan.json and 4 tasks"

export FOXD
submit() {
    sbatch --parsable --array=0-3 --cpus-per-task=1 --output="$dir/slurm-%A_%a.out" \
        "$SCRIPT" "$sw" 2>"$dir/sbatch.err"
}
wait_jobs() {
    for _ in $(seq 1 1200); do
        [ -z "$(squeue -h 2>/dev/null)" ] && return 0
        sleep 0.1
    done
    fail_logs "Slurm jobs still queued after 120 s: $(squeue 2>&1)"
}
array=$(submit) || fail_logs "sbatch: $(cat "$dir/sbatch.err")"
gather=$(sbatch --parsable --dependency="afterany:$array" --output="$dir/gather.out" \
    --wrap "'$FOXCTL' sweep --gather '$sw'") || fail_logs "sbatch of the gather step failed"
wait_jobs
n=$(ls "$sw/jobs" | grep -c '^c.*\.json$')
[ "$n" = 4 ] || { cat "$dir"/slurm-*.out "$sw"/logs/*.log 2>/dev/null | tail -20; fail_logs "4 results wanted, $n found"; }
ok "the array's 4 tasks each wrote their job's result"
grep -q '4 of 4 jobs done, 0 failed' "$dir/gather.out" || fail "gather job: $(cat "$dir/gather.out")"
grep -q '^train.lr=0.0003  *2 ' "$dir/gather.out" && grep -q '^train.lr=0.001  *2 ' "$dir/gather.out" ||
    fail "gather table lacks a configuration with 2 seeds: $(cat "$dir/gather.out")"
ok "the gather job (afterany:$array) printed the table: 2 configurations x 2 seeds"

# --- submit again with one result removed: only that task runs foxd
before=$(stat -c '%n %Y' "$sw"/jobs/c0-s1-f0.json "$sw"/jobs/c1-s1-f0.json "$sw"/jobs/c1-s2-f0.json)
rm "$sw/jobs/c0-s2-f0.json" "$sw/logs/c0-s2-f0.log"
sleep 1
submit >/dev/null || fail_logs "second sbatch: $(cat "$dir/sbatch.err")"
wait_jobs
[ -e "$sw/jobs/c0-s2-f0.json" ] && [ -e "$sw/logs/c0-s2-f0.log" ] || fail "the removed job did not run again"
[ "$before" = "$(stat -c '%n %Y' "$sw"/jobs/c0-s1-f0.json "$sw"/jobs/c1-s1-f0.json "$sw"/jobs/c1-s2-f0.json)" ] ||
    fail "finished jobs ran again"
ok "a second submission reruns only the missing job"
echo "all $checks checks passed"
