#!/bin/bash
# test_install.sh BUILD_DIR FOXCTL — `meson install` into a scratch
# directory puts the unit, the example config, the docs the unit names, the
# man pages and foxctl's bash completion in place; foxctl --version and
# foxctl help work without a daemon; the completion completes.
set -u
BUILD=$(realpath "$1") FOXCTL=$(realpath "$2")
FOXD=/bin/false
. "$(dirname "$(realpath "$0")")/lib.sh"
test_init foxd-install

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
[ "$got" = "save load" ] || fail "completion of 'foxctl --json checkpoint': '$got'"
ok "bash completion completes commands and sub-commands"

v=$("$FOXCTL" --version) && [[ $v == "foxctl "[0-9]* ]] || fail "foxctl --version: $v"
out=$("$FOXCTL" help checkpoint) && [[ $out == *"checkpoint save|load"* ]] || fail "foxctl help checkpoint: $out"
"$FOXCTL" help | grep -q "^  watch" || fail "foxctl help lists no commands"
"$FOXCTL" help nonsense 2>/dev/null; [ $? -eq 2 ] || fail "foxctl help of an unknown command"
ok "foxctl --version ($v) and foxctl help [command] work without a daemon"
