#!/bin/sh
# nm_debug.sh FOXD DEBUG_LIB PROBE — the production daemon links no debug entry point.
#
# DEBUG_LIB is the test-support library (libfoxgpu_debug.a); every global function it
# defines is a debug entry point. FOXD must define none of them, nor any fox_*_debug_* name,
# and must still carry its symbol table (else the check would pass by seeing nothing).
# PROBE is a test binary that links the library: it must show the entry points, so that a
# check which stopped seeing them fails instead of passing.
set -eu
foxd=$1 lib=$2 probe=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "nm_debug: $*" >&2; exit 1; }

nm --defined-only -g "$lib" | awk 'NF == 3 && $2 == "T" { print $3 }' | sort -u > "$dir/entries"
[ -s "$dir/entries" ] || fail "$lib defines no entry point"
nm "$foxd" | awk '{ print $NF }' | sort -u > "$dir/foxd"
grep -qx fox_engine_create "$dir/foxd" || fail "$foxd has no symbol table to check"
nm "$probe" | awk '{ print $NF }' | sort -u > "$dir/probe"
grep -qxFf "$dir/entries" "$dir/probe" ||
    fail "$probe shows none of $(basename "$lib")'s entry points: the check cannot see them"

linked=$( (grep -xFf "$dir/entries" "$dir/foxd" || true; grep -E '^fox_[a-z]+_debug_' "$dir/foxd" || true) |
    sort -u | tr '\n' ' ')
[ -z "$linked" ] || fail "$foxd links debug entry points: $linked"
echo "nm_debug: $foxd links none of the $(wc -l < "$dir/entries") entry points of $(basename "$lib")"
