#!/usr/bin/env python3
"""learning.py — does the trained agent find the edges a one-line rule finds, and stay out where
there is none?

Runs the walk-forward (folds 0,1,2) over several seeds on each case, each run on a private foxd
(`foxctl --json run --spawn`), and prints per case the mean over folds, then mean ± standard
error over seeds, of the policy's test net Sharpe with its turnover, beside the simple rule the
case admits, the trend rule, buy-and-hold and flat on the same bars, and the policy's paired
difference against each. A line per case says whether the learning targets hold.

The cases (--cases, default all):
  known edges   ar1+ ar1- ar3+ (autocorr: lag 1 of either sign, lag 3), volmom (volatility-scaled
                momentum), hours (a drift in two windows of the day): their rule is the
                generator's own, the target is >= 50 % of its Sharpe (and the trend rule's,
                where the trend rule does not trade that edge);
  regime drift  synthetic (the default): its rule is the trend rule; the target is >= the trend
                rule and >= 40 % of the oracle;
  no edge       randomwalk, garch: the target is >= -0.3;
  real          sp500, dem2gbp (daily, from --data-dir): the target is not below flat by more
                than one SE.

Variants (--variant NAME:KEY=V,KEY=V, repeatable) run every case under other settings, so that
one call compares levers side by side on the same seeds.

    bench/learning.py                                   # 5 seeds x every case, backend auto
    bench/learning.py --seeds 3 --epochs 3 --steps 300 --backend cpu --cases ar1+,randomwalk
    bench/learning.py --variant band0:policy.band=0 --variant default: --jobs 8

Standard library only. Exit status: 0 when every run finished, 1 otherwise.
"""
import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The walks running now, so that a deadline can end them and report what finished.
LIVE, LIVE_LOCK, STOPPING = set(), threading.Lock(), False
DAILY = ["data.synth_bars=10000"]

# name: (kind, settings). The daily known-edge series get 10,000 bars (about 40 years), a
# history of the length real daily files have, so that fold 0 trains on 2,500 bars.
CASES = {
    "ar1+": ("edge", ["data.source=autocorr", "data.edge_lag=1", "data.edge_coef=0.1"] + DAILY),
    "ar1-": ("edge", ["data.source=autocorr", "data.edge_lag=1", "data.edge_coef=-0.1"] + DAILY),
    "ar3+": ("edge", ["data.source=autocorr", "data.edge_lag=3", "data.edge_coef=0.1"] + DAILY),
    "volmom": ("edge-trend", ["data.source=volmom", "data.edge_coef=0.1"] + DAILY),
    "hours": ("edge", ["data.source=hours", "data.edge_coef=0.15"]),
    "synthetic": ("regime", ["data.source=synthetic"]),
    "randomwalk": ("noedge", ["data.source=randomwalk"]),
    "garch": ("noedge", ["data.source=garch"]),
    "sp500": ("real", ["data.source={data}/sp500_daily_1928_1991.csv", "data.bars_per_year=252"]),
    "dem2gbp": ("real", ["data.source={data}/dem2gbp_daily_1984_1991.csv",
                         "data.bars_per_year=252"]),
}


def run_one(args, settings, seed):
    """One walk-forward; returns (list of fold objects, seconds) or raises RuntimeError."""
    # A variant's train.epochs and train.steps_per_epoch take the place of --epochs and --steps;
    # without either, the config's own budget.
    budget = {"train.epochs": args.epochs, "train.steps_per_epoch": args.steps}
    rest = []
    for kv in settings:
        k, _, v = kv.partition("=")
        if k in budget:
            budget[k] = v
        else:
            rest.append(kv)
    # run's own options come first: after them, the rest goes to the spawned foxd.
    cmd = [args.foxctl, "--json", "run", "--spawn", "--folds", args.folds]
    for flag, key in (("--epochs", "train.epochs"), ("--steps", "train.steps_per_epoch")):
        if budget[key] is not None:
            cmd += [flag, str(budget[key])]
    cmd += ["--backend", args.backend, "--set", f"train.seed={seed}"]
    for kv in rest:
        cmd += ["--set", kv]
    t0 = time.monotonic()
    with LIVE_LOCK:
        if STOPPING:
            raise RuntimeError("not started: past the deadline")
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        LIVE.add(p)
    out, err = p.communicate()
    with LIVE_LOCK:
        LIVE.discard(p)
    p.stdout, p.stderr = out, err
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
    if p.returncode not in (0, 5) or not folds:
        tail = "\n".join(p.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{tail}")
    return folds, dt


def mean_se(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    n = len(xs)
    if n == 0:
        return float("nan"), float("nan")
    m = sum(xs) / n
    if n < 2:
        return m, float("nan")
    var = sum((x - m) ** 2 for x in xs) / (n - 1)
    return m, math.sqrt(var / n)


def fold_figures(fold):
    """The figures of one fold the summary reads: policy and each row, with paired diffs."""
    base = fold.get("baselines") or {}
    out = {"policy": fold.get("test_sharpe"), "policy.turnover": fold.get("test_turnover")}
    for name in ("rule", "trend", "buy_hold", "flat", "oracle", "random"):
        b = base.get(name)
        if isinstance(b, dict):
            out[name] = b.get("sharpe")
            out[name + ".turnover"] = b.get("turnover")
            out[name + ".diff"] = b.get("policy_diff")
    return out


def seed_figures(folds):
    """A seed's figures: the mean over its folds that count (not halted, with test bars)."""
    used = [f for f in folds if not isinstance(f.get("halted"), dict) and f.get("test_bars", 0) > 1]
    per = [fold_figures(f) for f in used]
    keys = set().union(*per) if per else set()
    return {k: sum(p[k] for p in per if isinstance(p.get(k), (int, float))) /
            max(1, sum(isinstance(p.get(k), (int, float)) for p in per)) for k in keys
            if any(isinstance(p.get(k), (int, float)) for p in per)}, len(folds) - len(used)


def fmt(m, se, width=6):
    if not math.isfinite(m):
        return "n/a".rjust(width + 8)
    return f"{m:+{width}.2f} ± {se:4.2f}" if math.isfinite(se) else f"{m:+{width}.2f}       "


def verdict(kind, fig):
    """The case's learning target, as (PASS|MISS, what was asked) from its per-seed means."""
    pol, pse = fig["policy"]
    if kind in ("edge", "edge-trend"):
        rule = fig["rule"][0]
        ok = math.isfinite(rule) and pol >= 0.5 * rule
        want = f">= 50% of rule ({0.5 * rule:+.2f})"
        if kind == "edge":
            ok = ok and pol > fig["trend"][0]
            want += " and > trend"
        return ("PASS" if ok else "MISS"), want
    if kind == "regime":
        oracle = fig["oracle"][0]
        ok = pol >= fig["trend"][0] and pol >= 0.4 * oracle
        return ("PASS" if ok else "MISS"), f">= trend and >= 40% of oracle ({0.4 * oracle:+.2f})"
    if kind == "noedge":
        return ("PASS" if pol >= -0.3 else "MISS"), ">= -0.30"
    d, dse = fig["flat.diff"]
    ok = math.isfinite(d) and d >= -(dse if math.isfinite(dse) else 0.0)
    return ("PASS" if ok else "MISS"), "not below flat by more than one SE"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeds per case (default 5)")
    ap.add_argument("--first-seed", type=int, default=1, help="first train.seed (default 1)")
    ap.add_argument("--cases", default=",".join(CASES),
                    help=f"cases, comma-separated (default all: {','.join(CASES)})")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:K=V,K=V",
                    help="run every case also with these keys (repeatable; 'NAME:' = defaults)")
    ap.add_argument("--epochs", type=int, help="epochs per fold (default: the config's)")
    ap.add_argument("--steps", type=int, help="train steps per epoch (default: the config's)")
    ap.add_argument("--folds", default="0,1,2", help="folds (default 0,1,2)")
    ap.add_argument("--backend", default="auto", help="auto (CUDA when present), cpu or cuda")
    ap.add_argument("--set", action="append", default=[], metavar="K=V",
                    help="extra foxd config key for every run, repeatable (e.g. policy.band=4)")
    ap.add_argument("--data-dir", default=os.path.join(HERE, "..", "..", "shared", "data"),
                    help="folder of the real daily series (default ../shared/data)")
    ap.add_argument("--foxctl", default=os.path.join(HERE, "..", "build", "client", "foxctl"),
                    help="foxctl binary (default build/client/foxctl; foxd is found beside it)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="runs at a time (default 1); a GPU serves several walks at once")
    ap.add_argument("--json", metavar="FILE", help="also write every run's fold objects here")
    ap.add_argument("--deadline", type=float, default=0, metavar="SECONDS",
                    help="end the walks still running after this long and report the finished")
    args = ap.parse_args()

    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            ap.error(f"no case {c!r} (cases: {', '.join(CASES)})")
    variants = []
    for v in args.variant or ["default:"]:
        name, _, kv = v.partition(":")
        variants.append((name or "default", [x for x in kv.split(",") if x]))
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    data = os.path.abspath(args.data_dir)
    print(f"config: backend {args.backend}, folds {args.folds}, "
          f"{args.epochs or 'the config’s'} epochs x {args.steps or 'the config’s'} steps, "
          f"seeds {seeds[0]}..{seeds[-1]}, cases {','.join(cases)}"
          + (f", set {' '.join(args.set)}" if args.set else ""), flush=True)

    def settings(case, extra):
        return [s.format(data=data) for s in CASES[case][1]] + args.set + extra

    record, failed = {}, 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = {(vn, c, s): pool.submit(run_one, args, settings(c, vkv), s)
                for vn, vkv in variants for c in cases for s in seeds}
        names = {f: key for key, f in runs.items()}
        if args.deadline > 0:
            def stop():
                global STOPPING
                with LIVE_LOCK:
                    STOPPING = True
                    for p in LIVE:
                        p.kill()
            timer = threading.Timer(args.deadline, stop)
            timer.daemon = True
            timer.start()
        for f in concurrent.futures.as_completed(names):
            vn, c, s = names[f]
            if f.exception() is None:
                folds, dt = f.result()
                def figure(x, k):
                    v = x.get(k)
                    return v if isinstance(v, (int, float)) else float("nan")
                print(f"  done {vn} {c} seed {s}: test Sharpe "
                      + " ".join(f"{figure(x, 'test_sharpe'):+.2f}" for x in folds)
                      + " turnover "
                      + " ".join(f"{figure(x, 'test_turnover'):.3f}" for x in folds)
                      + f" ({dt:.0f} s)", file=sys.stderr, flush=True)
            else:
                print(f"  FAILED {vn} {c} seed {s}: {f.exception()}", file=sys.stderr, flush=True)

    for vn, vkv in variants:
        print(f"\nvariant {vn}{': ' + ' '.join(vkv) if vkv else ' (defaults)'} — each cell the "
              f"mean over folds, then mean ± SE over seeds; turnover in brackets")
        print(f"  {'case':<11}{'policy':>15} {'(turn)':>7} {'rule':>15} {'(turn)':>7} "
              f"{'trend':>15} {'buy&hold':>15} {'pol-flat':>15} {'pol-rule':>15}  target")
        for c in cases:
            kind = CASES[c][0]
            per, left_out = [], 0
            for s in seeds:
                try:
                    folds, _ = runs[(vn, c, s)].result()
                except RuntimeError:
                    failed += 1
                    continue
                figs, lo = seed_figures(folds)
                left_out += lo
                per.append(figs)
                record.setdefault(vn, {}).setdefault(c, []).append({"seed": s, "folds": folds})
            if not per:
                print(f"  {c:<11} no run finished")
                continue
            keys = set().union(*per)
            fig = {k: mean_se([p.get(k) for p in per]) for k in keys}
            for k in ("policy", "rule", "trend", "oracle", "flat.diff", "rule.diff"):
                fig.setdefault(k, (float("nan"), float("nan")))
            # The regime generator's simple rule is the trend rule.
            rule_key = "rule" if kind != "regime" else "trend"
            ok, want = verdict(kind, fig)
            print(f"  {c:<11}{fmt(*fig['policy']):>15} "
                  f"({fig.get('policy.turnover', (float('nan'),))[0]:5.3f}) "
                  f"{fmt(*fig[rule_key]):>15} "
                  f"({fig.get(rule_key + '.turnover', (float('nan'),))[0]:5.3f}) "
                  f"{fmt(*fig['trend']):>15} {fmt(*fig.get('buy_hold', (float('nan'),) * 2)):>15} "
                  f"{fmt(*fig['flat.diff']):>15} {fmt(*fig.get(rule_key + '.diff', fig['rule.diff'])):>15}"
                  f"  {ok} {want}"
                  + (f" ({left_out} halted folds left out)" if left_out else ""))
    if args.json:
        with open(args.json, "w") as fp:
            json.dump({"config": vars(args), "runs": record}, fp, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
