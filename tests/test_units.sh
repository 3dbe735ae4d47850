#!/bin/bash
# test_units.sh UNITS_DIR — the exposure `systemd-analyze security` gives
# each of a build's configured units stays within its target (docs/security.md
# says what is left open and why): foxd.service and foxd@.service at most 2.0 with the GPU devices
# still allowed, foxd-mps.service at most 1.0. The units are read as files
# (--offline), so nothing needs installing; skipped without systemd-analyze.
set -u
units=$(realpath "$1")
command -v systemd-analyze >/dev/null ||
    { echo "systemd-analyze (package systemd) not installed: skipping"; exit 77; }
checks=0

# exposure UNIT_FILE: the overall figure, e.g. 1.5.
exposure() {
    systemd-analyze security --offline=yes "$1" 2>&1 |
        sed -n 's/^.*Overall exposure level for [^:]*: \([0-9.]*\).*$/\1/p'
}

for spec in foxd.service:2.0 foxd@.service:2.0 foxd-mps.service:1.0; do
    unit=${spec%:*} target=${spec#*:}
    got=$(exposure "$units/$unit")
    [ -n "$got" ] || { echo "FAIL: systemd-analyze gave no exposure for $unit"; exit 1; }
    awk -v g="$got" -v t="$target" 'BEGIN { exit !(g <= t) }' ||
        { echo "FAIL: $unit exposure $got, above its target $target"; exit 1; }
    checks=$((checks + 1))
    echo "ok $checks - $unit: exposure $got (target <= $target)"
done
# The hardening must not lock the daemons out of the GPU.
for unit in foxd.service foxd@.service foxd-mps.service; do
    grep -qx 'DeviceAllow=char-nvidia\* rw' "$units/$unit" && grep -qx 'PrivateDevices=no' "$units/$unit" ||
        { echo "FAIL: $unit no longer allows the nvidia devices"; exit 1; }
done
checks=$((checks + 1))
echo "ok $checks - every unit still allows char-nvidia* rw"
echo "all $checks checks passed"
