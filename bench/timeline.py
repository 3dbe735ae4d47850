#!/usr/bin/env python3
"""timeline.py — one replayed train step from `foxbench --trace`'s CSV (every kernel, memset and
memcpy with its stream, start and end on the device's clock): its kernels in start order with
their stream, start offset, duration and the main stream's idle gap before each, every stream's
busy time, and the main stream's idle time in all (what its critical path waits for: launch
latency, a dependency, or another stream).

    bench/timeline.py timeline_256.csv[.gz] [--step K]   # the K-th last train step (default 2)
"""
import csv
import gzip
import re
import shutil
import subprocess
import sys


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return [(int(r["start_ns"]), int(r["end_ns"]), r["stream"], r["name"])
                for r in csv.DictReader(f)]


def demangle(names):
    """Readable kernel names: c++filt where there is one, else the mangled name's first word."""
    names = sorted(set(names))
    if shutil.which("c++filt"):
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                             text=True).stdout.split("\n")
        plain = dict(zip(names, out))
    else:
        plain = {n: (re.match(r"_Z\d+(\w+)", n) or re.match(r"(.*)", n)).group(1) for n in names}
    short = {}
    for n, p in plain.items():
        p = re.sub(r"\(.*", "", p)
        p = re.sub(r"<.*", "", p)
        short[n] = p.replace("void ", "")[:56]
    return short


def main():
    path = sys.argv[1]
    k = int(sys.argv[sys.argv.index("--step") + 1]) if "--step" in sys.argv else 2
    ev = sorted(load(path))
    gathers = [i for i, e in enumerate(ev) if "gather_kernel" in e[3]]
    if len(gathers) < k + 1:
        sys.exit("timeline.py: fewer than %d train steps in the trace" % (k + 1))
    # A train step: from its gather to the next step's gather.
    step = ev[gathers[-k - 1]:gathers[-k]]
    names = demangle(e[3] for e in step)
    t0, main_strm = step[0][0], step[0][2]
    end = max(e[1] for e in step)
    print(f"train step: {len(step)} kernels, {(end - t0) / 1e3:.1f} µs from the gather's start "
          f"to the last end; main stream {main_strm}")
    for st in sorted({e[2] for e in step}):
        on = [e for e in step if e[2] == st]
        print(f"  stream {st}: {len(on)} kernels, busy {sum(e[1] - e[0] for e in on) / 1e3:.1f} µs")
    print(f"{'start':>8} {'dur':>7} {'gap':>6}  {'strm':>4}  kernel (gap: the main stream idle "
          f"before it)")
    last_end, idle = t0, 0
    for s, e, st, name in step:
        gap = ""
        if st == main_strm:
            idle += max(s - last_end, 0)
            gap = f"{(s - last_end) / 1e3:6.1f}"
            last_end = max(last_end, e)
        print(f"{(s - t0) / 1e3:8.1f} {(e - s) / 1e3:7.1f} {gap:>6}  {st:>4}  {names[name]}")
    print(f"main stream: idle {idle / 1e3:.1f} µs between its kernels")


if __name__ == "__main__":
    main()
