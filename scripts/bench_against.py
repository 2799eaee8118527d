"""Benchmark: this checkout's CPU figures against another commit's, on the same
machine, in alternating rounds: bench_sample, bench_dispatch, bench_dqn and
bench_eager run once per round for each gearjax, each in its own process, and
the headline figures are printed side by side with their ratios (issue goals
of the form "not slower on the CPU than main <commit>").

    python scripts/bench_against.py --baseline DIR [--baseline-name NAME]
        [--current DIR] [--rounds 2] [--benches sample,dispatch,dqn] [--smoke]
        [--out benchmarks/results/bench_against_cpu.json]

DIR is a checkout of the other commit with its extension built in place (the
gearjax found first on PYTHONPATH=DIR); --current (default: this checkout)
the same for the commit measured, best built the same way as the baseline
(e.g. both CPU-only Release builds). The bench scripts are this checkout's. Each bench script writes its JSON
into a scratch directory; this script keeps the headline figures of every
round, and reports per figure the best round of each and, the figure to
judge by, the median over rounds of the paired ratio current / baseline
(each round's two runs follow each other, so a machine whose speed drifts
over minutes, as a shared VM's does, moves both; < 1: the current one is
faster for times, > 1 for rates), with the paired ratios' range. --smoke runs each
bench at a tiny size (the figures it then lacks are left out): a check that
the comparison runs, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Per bench: the script, its arguments, and what to read from its JSON:
# (figure name, path into the JSON, "time" or "rate").
BENCHES = {
    "sample": (
        "scripts/bench_sample.py", [],
        [(f"per-call {c} gearjax (s)", ("cases", c, "systems", "gearjax", "median_s"), "time")
         for c in "ABCD"]
        + [(f"in-scan {c} gearjax (s)", ("in_scan", c, "systems", "gearjax", "median_s"), "time")
           for c in "ABCD"]
        + [(f"prioritized {n} sample+update (s)",
            ("prioritized", n, "systems", "gearjax sample+update", "median_s"), "time")
           for n in ("1000", "1000000")]),
    "dispatch": (
        "scripts/bench_dispatch.py", ["--calls", "2000", "--steps", "1000"],
        [(f"per-call {f} (us)", ("per_call", "forms", f, "median_us"), "time")
         for f in ("threaded", "threaded-fresh")]
        + [(f"train step w{w} {f} (us)", ("train_step", w, f, "median_us"), "time")
           for w in ("48", "256") for f in ("threaded", "threaded-fresh")]),
    "dqn": (
        "scripts/bench_dqn.py", ["--seeds", "0", "--systems", "gearjax"],
        [("gearjax env steps/s", ("summary", "gearjax", "env_steps_per_second", 0), "rate")]),
    # Issue 49's eager forms and the jitted call against the in-scan sample
    # (interleaved, and in runs of 20; "over" figures are quotients within
    # each run, judged as times: lower is better).
    "eager": (
        "scripts/bench_eager.py", [],
        [(f"{section} {form} (us)", (section, form, "median_us"), "time")
         for section, forms in (("call", ("jitted", "scan")), ("call_runs", ("jitted", "scan")),
                                ("sample_runs", ("eager", "eager-numpy", "jitted")),
                                ("per_runs", ("eager", "eager-numpy", "jitted")))
         for form in forms]
        + [(f"{section} jitted over scan", ((section, "jitted", "median_us"),
                                           (section, "scan", "median_us")), "time")
           for section in ("call", "call_runs")]),
}


# --smoke: each bench's arguments at a tiny size.
SMOKE_ARGS = {
    "sample": ["--cases", "A", "--repeats", "2", "--warmup", "1", "--scan-repeats", "2",
               "--prioritized-sizes", "1000", "--scale", "0.05"],
    "dispatch": ["--calls", "20", "--steps", "10", "--widths", "48"],
    "dqn": ["--seeds", "0", "--systems", "gearjax", "--steps", "1500"],
    "eager": ["--calls", "20", "--trajectories", "30"],
}


def dig(data, path) -> float | None:
    """The figure at `path`, or None where the run did not make it; a pair
    of paths gives the first figure over the second."""
    if isinstance(path[0], tuple):
        top, bottom = dig(data, path[0]), dig(data, path[1])
        return None if top is None or bottom is None else top / bottom
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return float(data)


def run_one(bench: str, pythonpath: Path, scratch: Path, tag: str,
            smoke: bool) -> dict[str, float]:
    script, args, figures = BENCHES[bench]
    if smoke:
        args = SMOKE_ARGS[bench]
    out = scratch / f"{bench}_{tag}.json"
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    # The script's own directory (scripts/, for its helpers) comes first on
    # sys.path, then PYTHONPATH's gearjax; the working directory is not added.
    cmd = [sys.executable, str(ROOT / script), *args, "--out", str(out)]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{bench} ({tag}) failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    data = json.loads(out.read_text())
    got = {name: value for name, path, _ in figures
           if (value := dig(data, path)) is not None}
    print(f"  {bench:8s} {tag:12s} {time.perf_counter() - started:6.1f} s", flush=True)
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--baseline-name", default="baseline")
    parser.add_argument("--current", type=Path, default=ROOT)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--benches", default=",".join(BENCHES))
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: a check, not a result")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/bench_against_cpu.json")
    args = parser.parse_args()
    benches = [b for b in args.benches.split(",") if b]
    unknown = set(benches) - set(BENCHES)
    if unknown:
        parser.error(f"unknown benches {sorted(unknown)}; known: {sorted(BENCHES)}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.current,
                            capture_output=True, text=True).stdout.strip()
    forms = {f"current {commit}": args.current.resolve(), args.baseline_name: args.baseline.resolve()}
    rounds: dict[str, dict[str, list[dict[str, float]]]] = {b: {f: [] for f in forms} for b in benches}
    with tempfile.TemporaryDirectory() as scratch:
        for r in range(args.rounds):
            print(f"round {r + 1} of {args.rounds}", flush=True)
            order = list(forms.items()) if r % 2 == 0 else list(forms.items())[::-1]
            for bench in benches:
                for name, path in order:
                    rounds[bench][name].append(
                        run_one(bench, path, Path(scratch), f"{name.split()[0]}{r}",
                                args.smoke))
    current, baseline = list(forms)
    lines = [f"bench_against: {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores, python {platform.python_version()}; {args.rounds} "
             f"rounds, each form's runs adjacent in each; best round of each form, and the "
             f"median (range) of the rounds' paired ratios current / baseline",
             f"{'figure':40s} {'best ' + current:>20s} {'best ' + baseline:>20s} "
             f"{'paired median (range)':>24s}  faster?"]
    summary = {}
    for bench in benches:
        for name, _, kind in BENCHES[bench][2]:
            if any(name not in r for r in rounds[bench][current] + rounds[bench][baseline]):
                continue  # not made at this size (--smoke)
            pick = min if kind == "time" else max
            a = pick(r[name] for r in rounds[bench][current])
            b = pick(r[name] for r in rounds[bench][baseline])
            paired = [c[name] / d[name]
                      for c, d in zip(rounds[bench][current], rounds[bench][baseline])]
            ratio = statistics.median(paired)
            better = ratio <= 1 if kind == "time" else ratio >= 1
            summary[name] = {"current": a, "baseline": b, "best_ratio": a / b, "ratio": ratio,
                             "paired_ratios": paired, "kind": kind}
            spread = f"{ratio:.3f} ({min(paired):.2f}-{max(paired):.2f})"
            lines.append(f"{name:40s} {a:20.6g} {b:20.6g} {spread:>24s}  "
                         f"{'yes' if better else 'no'}")
    print("\n".join(lines))
    args.out.write_text(json.dumps({"current": current, "baseline": baseline,
                                    "rounds": rounds, "summary": summary}, indent=1) + "\n")
    args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
