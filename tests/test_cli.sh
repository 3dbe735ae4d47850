#!/usr/bin/env bash
# test_cli.sh FOXD FOXCTL — what a first command shows, with no daemon to
# answer: `foxctl help` gives whole summaries; the global options work after
# the command as before it; `plot` names a directory that is not there;
# a data error is said once, with one prefix; a machine without a GPU is
# told so in one plain line, never with a CUDA error.
set -u
FOXD=$(realpath "$1") FOXCTL=$(realpath "$2")
. "$(dirname "$(realpath "$0")")/lib.sh"
test_init foxcli
none="ipc://$dir/none.sock"

# ------------------------------------------------------------------- help
"$FOXCTL" help >"$dir/help" || fail "foxctl help"
[ "$(grep -c '^  [a-z-]* ' "$dir/help")" -ge 20 ] || fail "help lists too few commands: $(cat "$dir/help")"
while IFS= read -r line; do
    open=${line//[^(]/} close=${line//[^)]/}
    [ ${#open} -eq ${#close} ] || fail "a summary cut inside its parentheses: '$line'"
    [ ${#line} -le 80 ] || fail "a summary wider than 80 columns: '$line'"
done <"$dir/help"
grep -q '^  inject-fault .*(debug.enable only)$' "$dir/help" || fail "inject-fault: $(cat "$dir/help")"
ok "foxctl help: one whole summary per command"

# ------------------------------------------- global options after the command
"$FOXCTL" --url "$none" --timeout 500 status --json >/dev/null 2>"$dir/err"
rc=$?
[ $rc -eq 3 ] || fail "status --json (global --url before): rc $rc, $(cat "$dir/err")"
"$FOXCTL" status --json --url "$none" --timeout=500 >/dev/null 2>"$dir/err"
rc=$?
[ $rc -eq 3 ] && grep -q "no foxd at $none" "$dir/err" ||
    fail "status --json --url after the command: rc $rc, $(cat "$dir/err")"
"$FOXCTL" --url "$none" status -j >/dev/null 2>&1
[ $? -eq 3 ] || fail "status -j"
ok "global options after the command (status --json --url ...)"
"$FOXCTL" status --timeout 2>"$dir/err"
[ $? -eq 2 ] && grep -q -- "--timeout needs a value" "$dir/err" || fail "--timeout without value: $(cat "$dir/err")"
"$FOXCTL" status --json=yes 2>"$dir/err"
[ $? -eq 2 ] && grep -q -- "--json takes no value" "$dir/err" || fail "--json=yes: $(cat "$dir/err")"
"$FOXCTL" --url "$none" status extra 2>"$dir/err"
[ $? -eq 2 ] && grep -q "status takes no arguments" "$dir/err" || fail "status extra: $(cat "$dir/err")"
ok "a global option without its value, or with one it takes none of, is a usage error"

# ------------------------------------------------------------------- plot
"$FOXCTL" plot "$dir/no-such-run" 2>"$dir/err"
rc=$?
[ $rc -eq 2 ] && grep -q "foxctl: plot: $dir/no-such-run: No such file or directory" "$dir/err" ||
    fail "plot of a missing directory: rc $rc, $(cat "$dir/err")"
ok "plot names the directory that is not there"

# ----------------------------------------------------- foxd's one-shot errors
# The default backend (auto): on a machine without a usable GPU, one plain line says so.
timeout -k 5 60 "$FOXD" --once --set "data.source=$dir/no.csv" 2>"$dir/err"
rc=$?
[ $rc -ne 0 ] || fail "foxd --once on a missing CSV exited 0"
grep -q "^foxd: data: $dir/no.csv: " "$dir/err" || fail "the data error: $(cat "$dir/err")"
grep -q "data: data:" "$dir/err" && fail "a doubled prefix: $(cat "$dir/err")"
ok "a data error names the file, with one prefix"
others=$(grep -Ev ' notice: (no GPU|not built with CUDA): CPU backend$|^foxd: data: ' "$dir/err")
[ -z "$others" ] || fail "lines besides the backend and the error: $others"
[ "$(grep -c ': CPU backend$' "$dir/err")" -le 1 ] || fail "the backend said twice: $(cat "$dir/err")"
ok "the CPU fallback is one plain line"
