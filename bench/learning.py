#!/usr/bin/env python3
"""learning.py — does the trained agent do no harm, and how much of the edge does it take?

Runs the walk-forward (folds 0,1,2) over several seeds on each data source
(the no-edge generators randomwalk and garch, and the synthetic default), each
run on a private foxd (`foxctl --json run --spawn`), and prints per source the
mean ± standard error over seeds of every test figure the fold objects carry:
the policy's (test_sharpe, test_turnover, ...) and each baseline's, read by
name from the fold JSON, whatever baselines the build reports. A seed's figure
is the mean over its folds; the SE is the sample standard deviation over
seeds / sqrt(seeds).

    bench/learning.py                          # 5 seeds, all three sources, backend auto
    bench/learning.py --seeds 3 --epochs 3 --steps 300 --backend cpu
    bench/learning.py --sources randomwalk --set policy.band=4 --json out.json

Standard library only. Exit status: 0 when every run finished, 1 otherwise.
"""
import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def flatten(obj, prefix=""):
    """Numeric leaves of a fold object as {dotted.path: value}.

    A list of objects that name themselves ("name", "policy" or "baseline")
    is keyed by that name, so that baselines read the same whether the fold
    object nests them as an object or as a list.
    """
    out = {}
    if isinstance(obj, bool):
        return out
    if isinstance(obj, (int, float)):
        out[prefix] = float(obj)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            name = None
            if isinstance(v, dict):
                name = next((v[k] for k in ("name", "policy", "baseline")
                             if isinstance(v.get(k), str)), None)
            key = name if name is not None else str(i)
            out.update(flatten(v, f"{prefix}.{key}" if prefix else key))
    return out


def wanted(key):
    """The figures the summary shows: Sharpe ratios, turnover, drawdown, oracle fraction."""
    k = key.lower()
    if k in ("fold", "epochs", "best_epoch", "steps_per_sec", "bars_per_year"):
        return False
    return any(w in k for w in ("sharpe", "turnover", "drawdown", "oracle", "fraction"))


def run_one(args, source, seed):
    """One walk-forward; returns (list of fold objects, seconds) or raises RuntimeError."""
    cmd = [args.foxctl, "--json", "run", "--spawn", "--folds", args.folds,
           "--epochs", str(args.epochs), "--steps", str(args.steps),
           "--backend", args.backend,
           "--set", f"data.source={source}", "--set", f"train.seed={seed}"]
    for kv in args.set:
        cmd += ["--set", kv]
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.monotonic() - t0
    folds = None
    for line in p.stdout.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("event") == "op_done":
            res = (ev.get("data") or {}).get("result") or {}
            if isinstance(res.get("folds"), list):
                folds = res["folds"]
    if p.returncode != 0 or not folds:
        tail = "\n".join(p.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{tail}")
    return folds, dt


def mean_se(xs):
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, float("nan")
    var = sum((x - m) ** 2 for x in xs) / (n - 1)
    return m, math.sqrt(var / n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeds per source (default 5)")
    ap.add_argument("--first-seed", type=int, default=1, help="first train.seed (default 1)")
    ap.add_argument("--sources", default="randomwalk,garch,synthetic",
                    help="data.source values, comma-separated (default randomwalk,garch,synthetic)")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per fold (default 3)")
    ap.add_argument("--steps", type=int, default=500, help="train steps per epoch (default 500)")
    ap.add_argument("--folds", default="0,1,2", help="folds (default 0,1,2)")
    ap.add_argument("--backend", default="auto", help="auto (CUDA when present), cpu or cuda")
    ap.add_argument("--set", action="append", default=[], metavar="K=V",
                    help="extra foxd config key, repeatable (e.g. policy.band=4)")
    ap.add_argument("--foxctl", default=os.path.join(HERE, "..", "build", "client", "foxctl"),
                    help="foxctl binary (default build/client/foxctl; foxd is found beside it)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="runs at a time (default 1); a GPU serves several walks at once")
    ap.add_argument("--json", metavar="FILE", help="also write every run's fold objects here")
    args = ap.parse_args()

    sources = [s for s in args.sources.split(",") if s]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    print(f"config: backend {args.backend}, folds {args.folds}, {args.epochs} epochs x "
          f"{args.steps} steps, seeds {seeds[0]}..{seeds[-1]}, sources {','.join(sources)}"
          + (f", set {' '.join(args.set)}" if args.set else ""), flush=True)

    record, failed = {}, 0
    # Every (source, seed) walk is independent: run them --jobs at a time, say each as it
    # ends (so a run cut short still shows its finished walks), then report in order.
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = {(source, seed): pool.submit(run_one, args, source, seed)
                for source in sources for seed in seeds}
        names = {f: key for key, f in runs.items()}
        for f in concurrent.futures.as_completed(names):
            source, seed = names[f]
            if f.exception() is None:
                folds, dt = f.result()
                print(f"  done {source} seed {seed}: test Sharpe "
                      + " ".join(f"{x.get('test_sharpe', float('nan')):+.2f}" for x in folds)
                      + f", turnover "
                      + " ".join(f"{x.get('test_turnover', float('nan')):.4f}" for x in folds)
                      + f" ({dt:.0f} s)", file=sys.stderr, flush=True)
    for source in sources:
        per_seed = []
        for seed in seeds:
            try:
                folds, dt = runs[(source, seed)].result()
            except RuntimeError as e:
                print(f"  {source} seed {seed}: FAILED: {e}", file=sys.stderr, flush=True)
                failed += 1
                continue
            flat = [flatten(f) for f in folds]
            keys = [k for k in flat[0] if wanted(k) and all(k in f for f in flat)]
            means = {k: sum(f[k] for f in flat) / len(flat) for k in keys}
            per_seed.append(means)
            record.setdefault(source, []).append({"seed": seed, "folds": folds})
            print(f"  {source} seed {seed}: test Sharpe "
                  + " ".join(f"{f.get('test_sharpe', float('nan')):+.2f}" for f in flat)
                  + f", turnover {means.get('test_turnover', float('nan')):.4f} ({dt:.0f} s)",
                  file=sys.stderr, flush=True)
        if not per_seed:
            continue
        keys = [k for k in per_seed[0] if all(k in m for m in per_seed)]
        print(f"\n{source}: mean over folds, then mean ± SE over {len(per_seed)} seeds")
        width = max(len(k) for k in keys)
        for k in keys:
            m, se = mean_se([s[k] for s in per_seed])
            print(f"  {k:<{width}}  {m:+9.4f} ± {se:.4f}")
    if args.json:
        with open(args.json, "w") as fp:
            json.dump({"config": vars(args), "runs": record}, fp, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
