#!/usr/bin/env python3
"""timeline.py — one replayed step from bench/gpu_run.sh timeline's CSV (Nsight Systems'
cuda_gpu_trace of every graph node): its kernels in start order with their stream, start offset
and duration, each stream's busy time, and the main stream's idle gaps (what its critical path
waits for: launch latency, or another stream).

    bench/timeline.py timeline_256.csv.gz [--step K]   # K-th last train step (default 2)
"""
import csv
import gzip
import re
import sys


def rows(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        for r in csv.DictReader(f):
            start = r.get("Start (ns)") or r.get("Start")
            dur = r.get("Duration (ns)") or r.get("Duration")
            if not start or not dur:
                continue
            name = r.get("Name", "")
            yield int(start), int(dur), r.get("Strm", "?"), name


def short(name):
    name = re.sub(r"\(.*", "", name)
    name = re.sub(r"<.*", "", name)
    return name.replace("void ", "")[:48]


def main():
    path = sys.argv[1]
    k = int(sys.argv[sys.argv.index("--step") + 1]) if "--step" in sys.argv else 2
    ev = sorted(rows(path))
    # A train step runs from a gather to just before the next gather (or the trace's end).
    gathers = [i for i, e in enumerate(ev) if "gather_kernel" in e[3]]
    if len(gathers) < k + 1:
        sys.exit("not enough train steps in the trace")
    i0, i1 = gathers[-k - 1], gathers[-k]
    step = ev[i0:i1]
    t0 = step[0][0]
    main_strm = step[0][2]
    end = max(s + d for s, d, _, _ in step)
    print(f"step: {len(step)} kernels, {(end - t0) / 1e3:.1f} µs from the gather's start to the "
          f"last kernel's end; main stream {main_strm}")
    busy = {}
    for s, d, st, _ in step:
        busy[st] = busy.get(st, 0) + d
    for st, b in sorted(busy.items()):
        print(f"  stream {st}: {sum(1 for e in step if e[2] == st)} kernels, busy {b / 1e3:.1f} µs")
    print(f"{'start':>8} {'dur':>7} {'gap':>6}  strm  kernel (gap: idle time of the main stream "
          f"before it)")
    last_end = t0
    idle = 0
    for s, d, st, name in step:
        gap = ""
        if st == main_strm:
            g = s - last_end
            gap = f"{g / 1e3:6.1f}"
            idle += max(g, 0)
            last_end = max(last_end, s + d)
        print(f"{(s - t0) / 1e3:8.1f} {d / 1e3:7.1f} {gap:>6}  {st:>4}  {short(name)}")
    print(f"main stream idle between its kernels: {idle / 1e3:.1f} µs")


if __name__ == "__main__":
    main()
