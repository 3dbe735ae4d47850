#!/bin/bash
# test_daemon.sh FOXD FOXCTL LOAD_CLIENT COMPLETION — foxd end to end on the CPU backend.
#
# Starts foxd on a temporary ipc socket (with a token), drives it with foxctl
# and with nngcat (a client nobody here wrote), and checks: every command of
# the protocol; the whole walk-forward; pause/resume/stop/reset; checkpoint
# round trip; bad input of every kind gets its code while the daemon keeps
# serving; a resent request is answered, not run twice; a second foxd on the
# same path refuses and the first keeps serving new clients; 8 clients x 250
# requests while training; SIGTERM checkpoints and exits 0; run --spawn;
# bash completion of config keys and ISV slot names from the running foxd.
# Bounded for a 2-core machine: the model and the steps are shrunk.
set -u
FOXD=$(realpath "$1") FOXCTL=$(realpath "$2") LOAD=$(realpath "$3") COMPLETION=$(realpath "$4")
command -v nngcat >/dev/null || { echo "nngcat (nng-utils) not installed: skipping"; exit 77; }
. "$(dirname "$(realpath "$0")")/lib.sh"

test_init foxd-it
no_pictures
url="ipc://$dir/foxd.sock"
pub="ipc://$dir/events.sock"
token=t0ken-$$
printf '%s\n' "$token" > "$dir/token"
chmod 600 "$dir/token"
# FOXD_TEST_BACKEND=cuda runs the same checks on a GPU machine.
TINY=(--backend "${FOXD_TEST_BACKEND:-cpu}" --set model.h1=32 --set model.h2=16 --set model.head_hidden=16
      --set model.aux_hidden=8 --set train.batch=16 --set env.n_envs=8
      --set train.learning_starts=64 --set data.synth_bars=3000
      --set train.steps_per_epoch=20 --set train.epochs=1 "${REPLAY[@]}")

ctl() { timeout -k 5 120 "$FOXCTL" --url "$url" --pub "$pub" --token "$token" --timeout 10000 "$@"; }
ctl_notoken() { timeout -k 5 60 "$FOXCTL" --url "$url" --pub "$pub" --timeout 10000 "$@"; }
# One request through nngcat; prints the reply.
nng() { timeout -k 5 30 nngcat --req --dial "$url" --recv-timeout 10 --ascii --data "$1"; }
nng_file() { timeout -k 5 30 nngcat --req --dial "$url" --recv-timeout 10 --ascii --file "$1"; }

# expect_code JSON CODE WHAT: the reply carries error code CODE.
expect_code() {
    local out
    out=$(nng "$1") || fail "$3: nngcat got no reply"
    case $out in
    *"\"code\":\"$2\""*) ok "$3 -> $2" ;;
    *) fail "$3: wanted $2, got: $out" ;;
    esac
}
alive() {
    local out
    out=$(nng '{"v":1,"id":1,"cmd":"status"}') || fail "daemon stopped answering after $1"
    case $out in *'"ok":true'*) ;; *) fail "status after $1: $out" ;; esac
}
state_is() {
    local out
    out=$(nng '{"v":1,"id":2,"cmd":"status"}')
    case $out in *"\"state\":\"$1\""*) return 0 ;; esac
    return 1
}
wait_state() {
    for _ in $(seq 1 600); do state_is "$1" && return 0; sleep 0.1; done
    fail "state never became $1"
}
start_foxd() {
    foxd_start --url "$url" -- --listen "$url" --pub "$pub" --set "daemon.state_dir=$dir/state" \
        --set "daemon.runtime_dir=$dir" --set "daemon.token_file=$dir/token" \
        --set daemon.probe_ms=300 --set daemon.metrics_interval_ms=200 "${TINY[@]}" "$@"
}

# ---------------------------------------------------------------- no daemon
"$FOXCTL" --url "$url" --timeout 1000 status >/dev/null 2>&1
[ $? -eq 3 ] || fail "foxctl without a daemon should exit 3"
ok "foxctl exits 3 when no daemon answers"

start_foxd
ok "foxd started on $url"

# With two CPUs or more, the loop (the main thread) and nng's threads keep one CPU to
# themselves and the trainer runs on the others.
if [ "$(nproc)" -ge 2 ]; then
    cpus_of() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$pid/task/$1/status"; }
    loop_cpus=$(cpus_of "$pid")
    case $loop_cpus in *[,-]*) fail "the loop may run on CPUs $loop_cpus, want one" ;; esac
    for t in /proc/"$pid"/task/*; do
        tid=${t##*/} comm=$(cat "$t/comm")
        case $comm in
        nng:*) [ "$(cpus_of "$tid")" = "$loop_cpus" ] || fail "$comm on $(cpus_of "$tid"), want $loop_cpus" ;;
        esac
    done
    # The trainer: a "foxd" thread on other CPUs (the probe thread stays with the loop).
    trainer_cpus=$(for t in /proc/"$pid"/task/*; do
        [ "$(cat "$t/comm")" = foxd ] && cpus_of "${t##*/}"; done | grep -vx "$loop_cpus" | head -1)
    [ -n "$trainer_cpus" ] || fail "no foxd thread off the loop's CPU $loop_cpus"
    case ",$trainer_cpus," in *",$loop_cpus,"*) fail "trainer shares CPU $loop_cpus" ;; esac
    ok "the control plane on CPU $loop_cpus, training on $trainer_cpus"
fi

# -------------------------------------------------------- read-only commands
ctl version | grep -q "protocol 1" || fail "version"
ok "version"
ctl status | grep -q "^state *idle" || fail "status idle"
ok "status (idle)"
out=$(nng '{"v":1,"id":11,"cmd":"status"}')
case $out in *'"as_of_step":'*'"age_ms":'*) ok "status carries as_of_step and age_ms (nngcat)" ;;
*) fail "status fields: $out" ;; esac
ctl isv 16 Q_ABS_REF H_S2_RMS_EMA | grep -q "H_S2_RMS_EMA" || fail "isv by index and name"
ok "isv by index and name"
ctl --json isv | grep -q '"index":170' || fail "isv all"
ok "isv (all 171 slots)"
ctl isv-list | grep -q "TARGET_Q_BOUND" || fail "isv-list"
ok "isv-list"
ctl sentinels | grep -q "h_s2" || fail "sentinels"
ok "sentinel_list"
ctl flags | grep -q "no sentinel flag set" || fail "flags"
ok "nan_flags"
ctl config get train.epochs model.h1 | grep -q "model.h1 = 32" || fail "config get"
ok "config_get"
ctl metrics >/dev/null || fail "metrics"
ok "metrics"
ctl status --json | grep -q '"state":"idle"' || fail "status --json: $(ctl status --json 2>&1)"
ok "status --json (a global option after the command)"

# Bash completion asks the foxd the command line names (here with --url) for keys and slots.
. "$COMPLETION"
complete_words() {
    COMP_WORDS=("$@")
    COMP_CWORD=$(($# - 1))
    COMPREPLY=()
    PATH="$(dirname "$FOXCTL"):$PATH" _foxctl
    echo " ${COMPREPLY[*]} "
}
out=$(complete_words foxctl --url "$url" config set model.h)
[[ $out == *" model.h1= "* && $out == *" model.h2= "* ]] || fail "completion of model.h: $out"
out=$(complete_words foxctl --url "$url" config get train.adam_b)
[[ $out == *" train.adam_b1 "* ]] || fail "completion of train.adam_b: $out"
out=$(complete_words foxctl --url "$url" config set --f)
[[ $out == *" --force "* ]] || fail "completion of config set --f: $out"
out=$(complete_words foxctl --url "$url" isv Q_ABS)
[[ $out == *" Q_ABS_REF "* ]] || fail "completion of the slot Q_ABS: $out"
out=$(complete_words foxctl --url "$url" status --js)
[[ $out == *" --json "* ]] || fail "completion of status --js: $out"
ok "bash completion: keys with digits, --force, ISV slot names, options after the command"

# ------------------------------------------------------------- walk-forward
out=$(ctl run --folds 0,1,2 --epochs 1 --steps 20 2>"$dir/run.err") || fail "run: $(cat "$dir/run.err")"
[ "$(echo "$out" | grep -cE '^fold [0-2]: epoch 1 of 1 chosen by smoothed')" -eq 3 ] ||
    fail "run table: $out"
for row in policy "trend k=" "buy & hold" flat random oracle; do
    [ "$(echo "$out" | grep -c "^  $row")" -ge 3 ] || fail "run table: no '$row' row per fold: $out"
done
echo "$out" | grep -q "^mean of 3 folds" || fail "run table: no mean block: $out"
echo "$out" | grep -qE "^verdict: policy vs flat: (beat|lost|indistinguishable|n/a) " || fail "run table verdict: $out"
echo "$out" | grep -q "selection-biased" || fail "run table note"
# The progress line of a fold's end names the choice as the fold's block does, figure and all.
for k in 0 1 2; do
    choice=$(echo "$out" | sed -n "s/^fold $k: \(epoch .*\); test split .*/\1/p")
    [ -n "$choice" ] && grep -qF "fold $k done: $choice; test Sharpe" "$dir/run.err" ||
        fail "fold $k's progress line and block differ: '$choice' vs $(grep "fold $k done" "$dir/run.err")"
done
ok "run: whole walk-forward, a block per fold with its baselines, the mean and the verdict"
[ "$(grep '"type":"fold"' "$dir/state/metrics.jsonl" | grep -c '"baselines":{"buy_hold":{')" -eq 3 ] ||
    fail "fold baselines in JSONL"
ok "each fold's baselines in metrics.jsonl"
[ "$(grep -c "sentinel flags: none" "$dir/run.err")" -eq 3 ] ||
    fail "a sentinel-flags line per fold: $(cat "$dir/run.err")"
[ "$(grep '"type":"fold"' "$dir/state/metrics.jsonl" | grep -c '"flagged":\[\]')" -eq 3 ] ||
    fail "fold flagged in JSONL"
ok "each fold reports its sentinel flags (none here)"
grep -q '"type":"epoch"' "$dir/state/metrics.jsonl" || fail "metrics.jsonl"
ok "per-epoch JSONL metrics in the state directory"
sleep 0.5
grep -q '^foxd_state{state="idle"} 1' "$dir/state/foxd.prom" || fail "prometheus textfile"
ok "Prometheus textfile"

# -------------------------------------------------- pause, resume, reset, stop
ctl start-fold 1 --steps 100000000 --detach 2>/dev/null || fail "start-fold"
wait_state training
ctl reset-fold >/dev/null 2>&1; [ $? -eq 1 ] || fail "reset-fold while training should be refused"
ok "reset-fold refused while training (ESTATE)"
ctl pause | grep -q paused || fail "pause"
ok "pause"
ctl reset-fold | grep -q paused || fail "reset-fold while paused"
ok "reset-fold while paused"
ctl resume | grep -q training || fail "resume"
ok "resume"

# ----------------------------------------------- load while training
out=$(timeout -k 5 300 "$LOAD" "$url" 8 250) || fail "load: $out"
ok "load: $out"

ctl stop | grep -q idle || fail "stop"
ok "stop"

# An op_done event never heard (here: an events socket that publishes nothing): --json still
# says how the run ended, with its folds, as status tells it.
nngcat --pub0 --listen "ipc://$dir/silent.sock" --delay 1000 --data x &
silent=$!
for _ in $(seq 50); do [ -S "$dir/silent.sock" ] && break; sleep 0.1; done
out=$(timeout -k 5 120 "$FOXCTL" --url "$url" --pub "ipc://$dir/silent.sock" --token "$token" \
    --timeout 10000 --json run --folds 0 --epochs 1 --steps 20 2>"$dir/nopub.err")
rc=$?
kill "$silent"
wait "$silent" 2>/dev/null
[ $rc -eq 0 ] || fail "run without events: exit $rc, $(cat "$dir/nopub.err")"
echo "$out" | grep '"event":"op_done"' | grep '"source":"status"' | grep -q '"folds":\[{' ||
    fail "run without events: no op_done from status: $out $(cat "$dir/nopub.err")"
ok "foxctl --json run: a run whose op_done was never heard ends with status's account"

# ------------------------------------------------------- checkpoint round trip
digest() { sed -n 's/.*"params_digest":"\([0-9a-f]*\)".*/\1/p'; }
saved=$(ctl --json checkpoint save rt.ckpt | head -1 | digest)
[ -n "$saved" ] || fail "checkpoint save: no params_digest"
ok "checkpoint save"
before=$(ctl --json isv)
ctl run --folds 0 --epochs 1 --steps 20 >/dev/null 2>&1 || fail "run after save"
trained=$(ctl --json checkpoint save other.ckpt | head -1 | digest)
[ "$trained" != "$saved" ] || fail "training did not change the parameters"
loaded=$(ctl --json checkpoint load rt.ckpt | digest)
[ "$loaded" = "$saved" ] || fail "parameters after load ($loaded) differ from the saved ones ($saved)"
after=$(ctl --json isv)
strip() { sed -e 's/"id":[^,]*//' -e 's/"as_of_step":[0-9]*//'; }
[ "$(echo "$before" | strip)" = "$(echo "$after" | strip)" ] ||
    fail "ISV differs after the round trip: $(diff <(echo "$before" | strip | tr '{' '\n') <(echo "$after" | strip | tr '{' '\n'))"
ok "checkpoint save -> train -> load restores identical parameters and ISV"

# --------------------------------------------------------------- bad input
expect_code 'this is not json' EPROTO "non-JSON"
expect_code '{"v":1,"id":3,"cmd":"sta' EPROTO "truncated JSON"
head -c $((900 * 1024)) /dev/zero | tr '\0' ' ' > "$dir/big"
expect_code_file() {
    local out
    out=$(nng_file "$1") || fail "$3: nngcat got no reply"
    case $out in *"\"code\":\"$2\""*) ok "$3 -> $2" ;; *) fail "$3: wanted $2, got: ${out:0:200}" ;; esac
}
expect_code_file "$dir/big" EPROTO "900 KiB message"
expect_code "{\"v\":1,\"id\":4,\"cmd\":\"run\",\"args\":{\"epochs\":\"three\"},\"token\":\"$token\"}" EINVAL "wrong type"
# A command that changes state shows its token before its arguments are looked at.
expect_code '{"v":1,"id":4,"cmd":"run","args":{"epochs":"three"}}' EPERM "wrong type without the token"
expect_code '{"v":1,"id":5,"cmd":"frobnicate"}' EUNKNOWN "unknown command"
expect_code '{"v":1,"id":6,"cmd":"status","colour":"red"}' EPROTO "unknown top-level field"
expect_code "{\"v\":1,\"id\":7,\"cmd\":\"run\",\"args\":{\"fold\":1},\"token\":\"$token\"}" EINVAL "unknown argument"
expect_code "{\"v\":1,\"id\":8,\"cmd\":\"pause\",\"token\":\"$token\"}" ESTATE "wrong state"
expect_code '{"v":1,"id":9,"cmd":"pause","token":"nope"}' EPERM "wrong token"
expect_code '{"v":1,"id":10,"cmd":"pause"}' EPERM "missing token"
expect_code '{"v":2,"id":12,"cmd":"status"}' EPROTO "wrong protocol version"
expect_code '{"v":1,"id":13,"cmd":"isv_read","args":{"slots":["NO_SUCH"]}}' ENOENT "unknown ISV name"
expect_code '{"v":1,"id":14,"cmd":"isv_read","args":{"slots":[9999]}}' EINVAL "ISV index out of range"
printf 'not a checkpoint, just bytes that pretend to be one ...' > "$dir/state/corrupt.ckpt"
expect_code "{\"v\":1,\"id\":15,\"cmd\":\"checkpoint_load\",\"args\":{\"path\":\"corrupt.ckpt\"},\"token\":\"$token\"}" EIO "corrupt checkpoint"
head -c 100 "$dir/state/rt.ckpt" > "$dir/state/trunc.ckpt"
expect_code "{\"v\":1,\"id\":16,\"cmd\":\"checkpoint_load\",\"args\":{\"path\":\"trunc.ckpt\"},\"token\":\"$token\"}" EIO "truncated checkpoint"
expect_code "{\"v\":1,\"id\":17,\"cmd\":\"checkpoint_load\",\"args\":{\"path\":\"../token\"},\"token\":\"$token\"}" EPERM "checkpoint path outside the state directory"
expect_code "{\"v\":1,\"id\":18,\"cmd\":\"config_set\",\"args\":{\"values\":{\"model.h1\":\"big\"}},\"token\":\"$token\"}" EINVAL "config_set wrong type"
alive "bad input"
ok "daemon still serving after every bad input"

# ------------------------------------------------------------ ipc peer check
[ "$(stat -c %a "$dir/foxd.sock")" = 660 ] || fail "socket mode $(stat -c %a "$dir/foxd.sock"), want 660"
ok "ipc socket mode 0660"
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
    # Let an unrelated uid reach the socket: it may read, it may not change state.
    chmod o+x "$dir"
    chmod 666 "$dir/foxd.sock"
    as_nobody() { timeout -k 5 30 setpriv --reuid=65534 --regid=65534 --clear-groups nngcat --req \
        --dial "$url" --recv-timeout 10 --ascii --data "$1"; }
    out=$(as_nobody '{"v":1,"id":31,"cmd":"status"}')
    case $out in *'"ok":true'*) ;; *) fail "uid 65534 status: $out" ;; esac
    out=$(as_nobody "{\"v\":1,\"id\":32,\"cmd\":\"stop\",\"token\":\"$token\"}")
    case $out in *'"code":"EPERM"'*'uid 65534'*) ;; *) fail "uid 65534 stop: $out" ;; esac
    chmod 660 "$dir/foxd.sock"
    chmod o-x "$dir"
    ok "another uid on ipc: read commands served, mutating ones EPERM even with the token"
fi

# --------------------------------------- a resend is answered, not run twice
ctl start-fold 0 --steps 100000000 --detach 2>/dev/null || fail "start-fold for resend"
wait_state training
# The trainer applies a pause between chunks, the first after the fold's set-up: on a loaded
# 2-core machine the first answer once took over 10 s, hence the long wait for it.
out=$(timeout -k 5 75 nngcat --req --dial "$url" --recv-timeout 30 --ascii --count 2 --interval 1 \
    --data "{\"v\":1,\"id\":4242,\"cmd\":\"pause\",\"token\":\"$token\"}" 2>&1)
[ "$(echo "$out" | grep -o '"ok":true' | wc -l)" -eq 2 ] || fail "resend of pause: $out"
ok "the same request twice from one client: the first answer twice (pause ran once)"
ctl stop >/dev/null || fail "stop after resend test"

# ------------------------------------------- a second foxd on the same path
"$FOXD" --listen "$url" --pub "ipc://$dir/events2.sock" --set "daemon.state_dir=$dir/state2" \
    --set "daemon.runtime_dir=$dir" "${TINY[@]}" 2>"$dir/second.log"
rc=$?
[ $rc -ne 0 ] || fail "a second foxd on the same ipc path started"
grep -q "in use by another foxd" "$dir/second.log" || fail "second foxd message: $(cat "$dir/second.log")"
ok "second foxd on the same ipc path refuses (exit $rc)"
sleep 1 # past a self-probe
for i in 1 2 3; do alive "the second foxd ($i)"; done
ok "the first foxd keeps serving new clients"
# ------------------------------------------------------------ watch and events
ctl watch --until state > "$dir/watch.out" 2>&1 &
wpid=$!
sleep 1 # the SUB dial completes asynchronously
ctl start-fold 2 --steps 20 --epochs 1 >/dev/null 2>&1 || fail "start-fold for watch"
wait "$wpid" || fail "watch: $(cat "$dir/watch.out")"
grep -q "state idle -> training" "$dir/watch.out" || fail "watch output: $(cat "$dir/watch.out")"
ok "watch shows events from the PUB socket"
timeout -k 5 30 nngcat --sub --dial "$pub" --subscribe '{"event":"state"' --ascii --count 1 > "$dir/sub.out" &
spid=$!
sleep 0.5
ctl start-fold 0 --steps 20 --epochs 1 >/dev/null 2>&1 || fail "start-fold for nngcat sub"
wait "$spid"
grep -q '"seq":' "$dir/sub.out" || fail "nngcat sub: $(cat "$dir/sub.out")"
ok "nngcat --sub receives events with seq"

# A foreign process that does call listen on the path (nngcat: no lock) deafens
# nng 1.5.2's listener; foxd's self-probe must notice and listen again.
# (Whether the bug bites is a race; either way new clients must be served.)
timeout -k 5 5 nngcat --rep --listen "$url" --data x >/dev/null 2>&1
# Let the probe (every 300 ms, two failures to act) settle: a re-listen drops the
# connections of that listener, so later steps must not straddle one.
sleep 1.5
served=0
for _ in $(seq 1 25); do
    if timeout -k 5 3 nngcat --req --dial "$url" --recv-timeout 1 --ascii \
        --data '{"v":1,"id":3,"cmd":"version"}' >/dev/null 2>&1; then
        served=1
        break
    fi
    sleep 0.2
done
[ $served -eq 1 ] || fail "new clients not served after a foreign listen on the path"
if grep -q "listening again" "$dir/foxd.log"; then
    ok "a foreign listen deafened the listener; the self-probe re-listened; new clients served"
else
    ok "a foreign listen on the path: new clients still served (the race did not bite)"
fi

# ------------------------------------------------------------ shutdown paths
kill -TERM "$pid"
for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
wait "$pid"
rc=$?
pid=
[ $rc -eq 0 ] || fail "SIGTERM exit status $rc"
[ -s "$dir/state/foxd.ckpt" ] || fail "no checkpoint after SIGTERM"
ok "SIGTERM: checkpoint written, exit 0"

# This foxd talks to a stand-in for systemd's notify socket.
npid=
if command -v python3 >/dev/null; then
    python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(30)
try:
    while True:
        print(s.recv(4096).decode().replace("\n", " | "), flush=True)
except socket.timeout:
    pass
' "$dir/notify.sock" > "$dir/notify.out" &
    npid=$!
    for _ in $(seq 1 50); do [ -S "$dir/notify.sock" ] && break; sleep 0.1; done
fi
NOTIFY_SOCKET=$dir/notify.sock WATCHDOG_USEC=400000 start_foxd
grep -q "resumed from $dir/state/foxd.ckpt" "$dir/foxd.log" ||
    fail "the restarted foxd did not resume: $(tail -5 "$dir/foxd.log")"
ok "a restarted foxd resumes from the stop checkpoint"
sleep 0.6
ctl_notoken shutdown >/dev/null 2>&1; [ $? -eq 1 ] || fail "shutdown without the token"
ok "shutdown needs the token"
ctl shutdown | grep -q "checkpoint saved" || fail "shutdown"
wait "$pid"
rc=$?
pid=
[ $rc -eq 0 ] || fail "shutdown exit status $rc"
ok "shutdown command: exit 0"
if [ -n "$npid" ]; then
    kill "$npid" 2>/dev/null
    for m in READY=1 STATUS= WATCHDOG=1 STOPPING=1 EXTEND_TIMEOUT_USEC=; do
        grep -q "$m" "$dir/notify.out" || fail "no $m on the notify socket: $(cat "$dir/notify.out")"
    done
    ok "sd_notify: READY, STATUS, WATCHDOG, STOPPING, EXTEND_TIMEOUT_USEC"
fi

# A corrupt stop checkpoint: the next foxd says why it cannot resume and does not start.
[ -s "$dir/state/foxd.ckpt" ] || fail "no checkpoint after the shutdown command"
printf 'garbage' | dd of="$dir/state/foxd.ckpt" bs=1 seek=200 conv=notrunc 2>/dev/null

# ------------------------------------------------------------------ fault drill
"$FOXD" --listen "$url" --pub "$pub" --set "daemon.state_dir=$dir/state" --set "daemon.runtime_dir=$dir" \
    --set "daemon.token_file=$dir/token" "${TINY[@]}" 2>"$dir/corrupt.log"
rc=$?
[ $rc -eq 1 ] && grep -q "cannot resume: checkpoint $dir/state/foxd.ckpt: payload CRC mismatch" \
    "$dir/corrupt.log" || fail "corrupt stop checkpoint (exit $rc): $(grep -i resum "$dir/corrupt.log")"
ok "a corrupt stop checkpoint stops the start and says why (payload CRC)"
mv "$dir/state/foxd.ckpt" "$dir/state/corrupt.ckpt"
# train.stop_on_halt=1: the halted fold stays open, for status, flags and reset-fold to see.
# engine.halt_rule=strict in every drill here: under the default (seeds) rule the injected NaN
# in h_s2 is sanitized and flagged, and the fold trains on.
start_foxd --set debug.enable=1 --set train.stop_on_halt=1 --set engine.halt_rule=strict
ctl inject-fault h_s2 nan --step 30 >/dev/null || fail "inject-fault"
ok "inject_fault armed (debug.enable)"
ctl start-fold 0 --steps 200 >"$dir/drill.out" 2>&1
rc=$?
[ $rc -eq 5 ] || fail "the drill's run should exit 5 (halted), got $rc: $(cat "$dir/drill.out")"
grep -q "HALT" "$dir/drill.out" || fail "no HALT line: $(cat "$dir/drill.out")"
ok "the injected NaN halts the fold (foxctl exit 5)"
ctl status | grep -q "^state *halted" || fail "state after the halt"
ctl status | grep -q "h_s2" || fail "halt reason should name h_s2: $(ctl status)"
fold_step() { ctl --json status | grep -o '"step":[0-9]*' | head -1; }
step0=$(fold_step)
ctl flags | grep -q "h_s2" || fail "flags after the halt"
ok "status and flags name the slot"
alive "the halt"
ctl reset-fold | grep -q idle || fail "reset-fold after the halt"
ctl flags | grep -q "no sentinel flag set" || fail "flags after reset-fold"
ok "reset-fold: halted -> idle, flags cleared"
# Armed between folds, the step counts from the next fold's start, not from the train steps
# the last fold ran: the fault fires at the same fold step as on the fresh fold above.
ctl start-fold 0 --steps 200 >/dev/null 2>&1 || fail "a clean fold after reset-fold"
ctl --json inject-fault h_s2 nan --step 30 | grep -q '"next_fold":true' ||
    fail "inject-fault between folds should say it counts from the next fold"
ctl start-fold 1 --steps 200 >"$dir/drill1.out" 2>&1
rc=$?
[ $rc -eq 5 ] || fail "the fault armed between folds did not halt fold 1 (exit $rc)"
[ "$(fold_step)" = "$step0" ] || fail "armed between folds it fired at $(fold_step), not $step0"
ok "inject-fault between folds: step 30 of the next fold"
ctl reset-fold >/dev/null || fail "reset-fold after the second drill"
ctl shutdown --no-checkpoint >/dev/null || fail "shutdown after the drill"
wait "$pid"
pid=
"$FOXD" --once "${TINY[@]}" --set train.steps_per_epoch=200 --set debug.enable=1 \
    --set engine.halt_rule=strict --set debug.inject_fault.buffer=h_s2 \
    --set debug.inject_fault.step=5 --set debug.inject_fault.kind=nan \
    >"$dir/once.out" 2>"$dir/once.err"
rc=$?
[ $rc -eq 3 ] && grep -q "h_s2" "$dir/once.err" || fail "foxd --once drill: exit $rc, $(cat "$dir/once.err")"
ok "foxd --once: the drill halts with exit 3 and names the slot"
# The default rule (seeds): the same fault is sanitized and flagged, and the run completes.
"$FOXD" --once "${TINY[@]}" --set train.folds=0 --set train.steps_per_epoch=200 \
    --set debug.enable=1 --set debug.inject_fault.buffer=h_s2 --set debug.inject_fault.step=5 \
    --set debug.inject_fault.kind=nan >"$dir/seeds.out" 2>"$dir/seeds.err"
rc=$?
[ $rc -eq 0 ] && grep -q "^fold 0: sentinel flags:.* h_s2" "$dir/seeds.err" ||
    fail "foxd --once, seeds rule: exit $rc, $(cat "$dir/seeds.err")"
ok "foxd --once: under the seeds rule the drill's NaN is flagged and the run completes"

# A halt no longer ends the walk (train.stop_on_halt=0, the default): the halted fold is marked,
# the next fold runs (the fault fires once per arming), and the exit status says a fold halted.
"$FOXD" --once "${TINY[@]}" --set train.folds=0,1 --set train.steps_per_epoch=200 \
    --set debug.enable=1 --set engine.halt_rule=strict --set debug.inject_fault.buffer=h_s2 \
    --set debug.inject_fault.step=5 --set debug.inject_fault.kind=nan \
    >"$dir/goon.out" 2>"$dir/goon.err"
rc=$?
[ $rc -eq 3 ] || fail "foxd --once go-on drill: exit $rc, $(cat "$dir/goon.err")"
# The line under a fold's first line says whether it halted.
under() { awk -v f="^fold $1: " '$0 ~ f { getline; print }' "$dir/goon.out"; }
under 0 | grep -Eq '^  halted: halt_nan at step' ||
    fail "fold 0 not marked halted: $(cat "$dir/goon.out")"
grep -Eq '^fold 1: ' "$dir/goon.out" && ! under 1 | grep -q halted ||
    fail "fold 1 did not run clean after the halt: $(cat "$dir/goon.out")"
grep -q "left out of every row's mean: fold 0 (halted)" "$dir/goon.out" ||
    fail "the halted fold is not left out of the means: $(cat "$dir/goon.out")"
grep -q "1 fold halted" "$dir/goon.err" || fail "no halt count: $(cat "$dir/goon.err")"
ok "foxd --once: a halted fold is marked, the next fold runs, exit 3 at the end"
start_foxd --set debug.enable=1 --set engine.halt_rule=strict
ctl inject-fault h_s2 nan --step 5 >/dev/null || fail "inject-fault (go-on)"
ctl --json run --folds 0,1 --steps 200 >"$dir/goon.json" 2>&1
rc=$?
[ $rc -eq 5 ] || fail "run with a halted fold should exit 5, got $rc: $(tail -5 "$dir/goon.json")"
grep -q '"halted"' "$dir/goon.json" || fail "no halted fold object: $(tail -5 "$dir/goon.json")"
ctl status | grep -q "^state *idle" || fail "state after a run that went on: $(ctl status)"
ok "foxctl run: the walk goes on after a halted fold and exits 5 at the end"
ctl shutdown --no-checkpoint >/dev/null || fail "shutdown after the go-on drill"
wait "$pid"
pid=

# ------------------------------------------------------- SIGHUP reopens the log
start_foxd --set "daemon.log_file=$dir/rot.log"
grep -q "ready" "$dir/rot.log" || fail "daemon.log_file not written"
mv "$dir/rot.log" "$dir/rot.log.1"
kill -HUP "$pid"
for _ in $(seq 1 50); do [ -s "$dir/rot.log" ] && break; sleep 0.1; done
grep -q "reopened" "$dir/rot.log" || fail "SIGHUP did not reopen the log"
alive "SIGHUP"
ok "SIGHUP reopens daemon.log_file (log rotation)"
ctl shutdown --no-checkpoint >/dev/null || fail "shutdown after SIGHUP"
wait "$pid"
pid=

# ---------------------------------------------------------------- run --spawn
out=$(TMPDIR=$dir timeout -k 5 300 "$FOXCTL" run --spawn --folds 0,1 "${TINY[@]}" 2>"$dir/spawn.err") ||
    fail "run --spawn: $(cat "$dir/spawn.err")"
[ "$(echo "$out" | grep -cE '^fold [01]: epoch ')" -eq 2 ] || fail "run --spawn table: $out"
ls "$dir" | grep -q "^foxctl-" && fail "run --spawn left its directory behind"
ok "run --spawn: private foxd, table, stopped"

# A foxctl killed outright takes its private foxd with it: nothing trains on, orphaned.
TMPDIR=$dir "$FOXCTL" run --spawn --folds 0 --epochs 1000 "${TINY[@]}" 2>"$dir/orphan.err" >/dev/null &
spawner=$!
for _ in $(seq 100); do
    child=$(sed -n 's/^foxctl: private foxd (pid \([0-9]*\)).*/\1/p' "$dir/orphan.err")
    [ -n "$child" ] && break
    sleep 0.1
done
[ -n "$child" ] || fail "run --spawn named no private foxd: $(cat "$dir/orphan.err")"
kill -9 "$spawner"
wait "$spawner" 2>/dev/null
for _ in $(seq 150); do
    kill -0 "$child" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$child" 2>/dev/null; then
    kill -9 "$child"
    fail "the private foxd $child outlived its foxctl by 15 s"
fi
ok "run --spawn: a foxctl killed with SIGKILL takes its private foxd with it"

echo "all $checks checks passed"
