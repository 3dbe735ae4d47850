#!/bin/bash
# test_install.sh BUILD_DIR FOXCTL — `meson install` into a scratch
# prefix puts the units (starting the foxd of that prefix; foxd@ wanting and
# following the MPS control daemon's, both with its pipe directory), the
# example config, every page of docs/ (the fold table naming the installed
# results.md), the Slurm task, the man pages and foxctl's bash completion in
# place; the installed foxd logs the runtime changes it loads; foxctl --version and
# foxctl help work without a daemon; the completion completes; every
# command of foxctl's usage and every option of foxd's is in the help, the
# completion and the man pages.
set -u
BUILD=$(realpath "$1") FOXCTL=$(realpath "$2")
FOXD=/bin/false
. "$(dirname "$(realpath "$0")")/lib.sh"
test_init foxd-install

# The build's own prefix, under a scratch root: what the units and the table name must exist there.
prefix=$(meson introspect "$BUILD" --buildoptions | python3 -c \
    'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
meson install -C "$BUILD" --destdir "$dir/root" --no-rebuild --quiet >"$dir/install.log" 2>&1 ||
    fail "meson install: $(tail -5 "$dir/install.log")"
unit=$(find "$dir/root" -name foxd.service)
[ -n "$unit" ] || fail "no unit installed"
doc=$(sed -n 's|^Documentation=file://||p' "$unit")
[ -f "$dir/root$doc" ] || fail "the unit's Documentation= $doc is not installed"
[ -n "$(find "$dir/root" -path '*doc/foxhunt/examples/foxd.json')" ] || fail "no example config"
[ -n "$(find "$dir/root" -path '*/bin/foxd')" ] && [ -n "$(find "$dir/root" -path '*/bin/foxctl')" ] ||
    fail "binaries missing"
ok "meson install: binaries, unit, example config, $doc"
tmpl=$(find "$dir/root" -name 'foxd@.service') mps=$(find "$dir/root" -name foxd-mps.service)
[ -n "$tmpl" ] && [ -n "$mps" ] || fail "foxd@.service or foxd-mps.service not installed"
[ "$(dirname "$tmpl")" = "$(dirname "$unit")" ] && [ "$(dirname "$mps")" = "$(dirname "$unit")" ] ||
    fail "the units are not installed together: $unit $tmpl $mps"
grep -qx 'Wants=foxd-mps.service' "$tmpl" && grep -qx 'After=foxd-mps.service' "$tmpl" ||
    fail "foxd@.service neither wants nor follows foxd-mps.service"
grep -qx 'Type=forking' "$mps" && grep -q '^ExecStart=.*nvidia-cuda-mps-control -d$' "$mps" &&
    grep -q "^ExecStop=.*echo quit | .*nvidia-cuda-mps-control'$" "$mps" ||
    fail "foxd-mps.service does not start and quit the MPS control daemon"
# The daemons look for the MPS server's pipes where the control daemon makes them.
pipes=$(sed -n 's/^Environment=CUDA_MPS_PIPE_DIRECTORY=//p' "$mps")
[ "$pipes" = /run/nvidia-mps ] && grep -qx "RuntimeDirectory=${pipes#/run/}" "$mps" &&
    grep -qx "Environment=CUDA_MPS_PIPE_DIRECTORY=$pipes" "$tmpl" && grep -qx "ReadWritePaths=-$pipes" "$tmpl" ||
    fail "foxd@.service and foxd-mps.service disagree on the MPS pipe directory ($pipes)"
ok "foxd@.service and foxd-mps.service installed together and agree on MPS"
for u in "$unit" "$tmpl"; do
    exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$u")
    [ "$exe" = "$prefix/bin/foxd" ] && [ -x "$dir/root$exe" ] ||
        fail "$(basename "$u"): ExecStart= starts '$exe', not the installed $prefix/bin/foxd"
done
for u in "$unit" "$tmpl" "$mps"; do
    doc=$(sed -n 's|^Documentation=file://||p' "$u")
    [ -f "$dir/root$doc" ] || fail "$(basename "$u"): Documentation= $doc is not installed"
done
! grep -l '@[a-z]*@' "$unit" "$tmpl" "$mps" || fail "a unit keeps a placeholder"
ok "the units start $prefix/bin/foxd and name installed docs"
# Another prefix gets units of its own: configuring a scratch build writes them, nothing compiles.
src=$(dirname "$(realpath "$0")")/..
meson setup "$dir/other" "$src" -Dcuda=disabled --prefix=/opt/foxtest >"$dir/other.log" 2>&1 ||
    fail "meson setup --prefix=/opt/foxtest: $(tail -3 "$dir/other.log")"
grep -qx 'ExecStart=/opt/foxtest/bin/foxd --config /etc/foxd/foxd.json' "$dir/other/systemd/foxd.service" &&
    grep -qx 'Documentation=file:///opt/foxtest/share/doc/foxhunt/operations.md' "$dir/other/systemd/foxd.service" ||
    fail "with --prefix=/opt/foxtest: $(grep -E '^(ExecStart|Documentation)=' "$dir/other/systemd/foxd.service")"
ok "the units follow meson's prefix (/opt/foxtest)"

docs=$dir/root$prefix/share/doc/foxhunt
for page in "$(dirname "$(realpath "$0")")"/../docs/*.md; do
    [ -f "$docs/$(basename "$page")" ] || fail "docs/$(basename "$page") is not installed"
done
FOXD=$dir/root$prefix/bin/foxd
"$FOXD" --once --backend cpu --set data.synth_bars=3000 --set train.epochs=1 \
    --set train.steps_per_epoch=10 --set train.folds=0 --set "run.root=$dir/runs" >"$dir/once.out" 2>&1 ||
    fail "the installed foxd --once: $(tail -5 "$dir/once.out")"
grep -q "Every figure is explained in $prefix/share/doc/foxhunt/results.md" "$dir/once.out" ||
    fail "the fold table does not name the installed results.md: $(grep -A1 Every "$dir/once.out")"
sb=$dir/root$prefix/share/foxhunt/foxhunt-sweep.sbatch
[ -x "$sb" ] && bash -n "$sb" || fail "the Slurm task $sb is not installed"
ok "every page of docs/, the table's pointer to results.md and the Slurm task are installed"

# Runtime changes kept in the state directory: one info line names the file and the keys.
mkdir -p "$dir/st" "$dir/rt"
printf '{"train.epochs": 2, "train.steps_per_epoch": 30}\n' >"$dir/st/foxd.overrides.json"
url="ipc://$dir/rt/foxd.sock"
foxd_start --url "$url" -- --backend cpu --set data.synth_bars=3000 --listen "$url" \
    --pub "ipc://$dir/rt/ev.sock" --set "daemon.runtime_dir=$dir/rt" --set "daemon.state_dir=$dir/st" \
    --set daemon.probe_ms=0 --set daemon.metrics_interval_ms=0
grep -q "info: runtime changes loaded from $dir/st/foxd.overrides.json: train.epochs, train.steps_per_epoch\$" \
    "$dir/foxd.log" || fail "no log line names the runtime changes"
"$FOXCTL" --url "$url" shutdown --no-checkpoint >/dev/null 2>&1
wait "$pid"
pid=
ok "the installed foxd logs the runtime changes it loads, and their keys"
if command -v scdoc >/dev/null; then
    for page in man8/foxd.8 man1/foxctl.1; do
        f=$(find "$dir/root" -path "*/man/$page")
        [ -n "$f" ] && grep -q '^\.SH "\?SYNOPSIS' "$f" || fail "man page $page missing or empty"
    done
    ok "man pages foxd(8) and foxctl(1) installed"
else
    echo "# scdoc not installed: man pages not checked"
fi
comp=$(find "$dir/root" -path '*bash-completion/completions/foxctl')
[ -n "$comp" ] || fail "no bash completion"
got=$(bash -c '. "$1"; COMP_WORDS=(foxctl sta); COMP_CWORD=1; _foxctl; echo "${COMPREPLY[*]}"' _ "$comp")
[ "$got" = "status start-fold" ] || fail "completion of 'foxctl sta': '$got'"
got=$(bash -c '. "$1"; COMP_WORDS=(foxctl --json checkpoint ""); COMP_CWORD=3; _foxctl; echo "${COMPREPLY[*]}"' _ "$comp")
[ "$got" = "save load list" ] || fail "completion of 'foxctl --json checkpoint': '$got'"
ok "bash completion completes commands and sub-commands"

v=$("$FOXCTL" --version) && [[ $v == "foxctl "[0-9]* ]] || fail "foxctl --version: $v"
out=$("$FOXCTL" help checkpoint) && [[ $out == *"checkpoint save|load"* && $out == *"checkpoint list DIR"* ]] ||
    fail "foxctl help checkpoint: $out"
"$FOXCTL" help | grep -q "^  watch" || fail "foxctl help lists no commands"
"$FOXCTL" help nonsense 2>/dev/null; [ $? -eq 2 ] || fail "foxctl help of an unknown command"
ok "foxctl --version ($v) and foxctl help [command] work without a daemon"

# The commands of foxctl's usage: the first word of each "  name ..." line
# under "commands:", and of each alternative after " | ".
cmds=$("$FOXCTL" --help | sed -n '/^commands:/,/^$/p' | grep '^  [a-z]' | sed 's/ | /\n  /g' |
    awk '{print $1}' | sort -u)
[ "$(wc -l <<<"$cmds")" -ge 20 ] || fail "foxctl --help lists too few commands: $cmds"
man1=$(find "$dir/root" -path '*/man/man1/foxctl.1')
helped=$("$FOXCTL" help)
for c in $cmds; do
    grep -q "^  $c " <<<"$helped" || fail "foxctl help does not list '$c'"
    got=$(bash -c '. "$1"; COMP_WORDS=(foxctl "$2"); COMP_CWORD=1; _foxctl; echo " ${COMPREPLY[*]} "' _ "$comp" "$c")
    [[ $got == *" $c "* ]] || fail "the completion does not complete '$c': '$got'"
    # scdoc sets a name in bold: \fBname\fR, or \fBname sub|sub\fR.
    [ -z "$man1" ] || grep -qE -- "\\\\fB$c(\\\\fR| )" "$man1" || fail "foxctl(1) does not name '$c'"
done
ok "foxctl help, the completion and foxctl(1) name every command of the usage ($(wc -w <<<"$cmds"))"
man8=$(find "$dir/root" -path '*/man/man8/foxd.8')
if [ -n "$man8" ]; then
    opts=$("$BUILD/daemon/foxd" --help | grep -o -- '--[a-z]*' | sort -u)
    for o in $opts; do
        grep -qF -- "\fB$o\fR" "$man8" || fail "foxd(8) does not name $o"
    done
    ok "foxd(8) names every option of foxd --help ($(wc -w <<<"$opts"))"
fi
