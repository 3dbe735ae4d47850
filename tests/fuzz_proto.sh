#!/bin/sh
# fuzz_proto.sh FUZZER SEED_DIR SECONDS — run the libFuzzer target for a
# bounded time on a scratch copy of the seed corpus (the seeds stay as they
# are; new inputs go to the scratch directory and are thrown away).
set -eu
fuzzer=$1 seeds=$2 secs=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/fuzz_proto.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$seeds"/* "$work"/
"$fuzzer" -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -max_len=70000 "$work"
