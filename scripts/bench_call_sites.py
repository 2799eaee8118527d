"""Benchmark: what the XLA FFI execution stages save a table call in a compiled
loop (gearjax/_ffi.py STAGED, xla_ffi/ffi/call_site.h): the same programs with
sample and update_priorities registered with stages (the table resolved and
the attributes checked once per call site) and per call
(GEARJAX_FFI_STAGES=0: every execution looks its table up in the registry and
decodes and checks its attributes).

    python scripts/bench_call_sites.py [--steps 20000] [--rounds 7]
        [--placement host] [--baseline DIR [--baseline-name NAME]]
        [--out benchmarks/results/bench_call_sites_cpu.json]

--baseline DIR adds a third form: the same programs with the gearjax found
first on PYTHONPATH=DIR (a build of another commit, e.g. the one before the
stages, whose calls all look their table up per call).

Cases, each a jitted lax.scan of --steps steps on JAX's default device, timed
as the best of 5 runs and reported per step:

* ``uniform 1 x 1``: sample(batch 1, window 1) of one float32[4] column, the
  call with the least work besides its overhead;
* ``uniform 32 x 20``: sample(batch 32, window 20, pad="left") of obs
  float32[17];
* ``prioritized 8 + update``: sample(batch 8, window 4, Prioritized(0.6)),
  then update_priorities of its 8 keys.

Each round runs the two registrations in fresh processes, in a shuffled
order. Reported: the best process of each form (the call's cost with the
least interference: a shared 2-core VM's processes vary by up to 2x) and the
median process, with their ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_info, write_results  # noqa: E402

CASES = ("uniform 1 x 1", "uniform 32 x 20", "prioritized 8 + update")


def child(steps: int, placement: str) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import gearjax as gx
    from gearjax import _ffi

    rng = np.random.default_rng(0)
    table = gx.Table({"obs": gx.Column((17,), "float32"), "x": gx.Column((4,), "float32")},
                     capacity=1000, max_length=50, placement=placement)
    for _ in range(1000):
        table.insert({"obs": rng.standard_normal((50, 17)), "x": rng.standard_normal((50, 4))},
                     priority=float(rng.uniform(0.5, 2)))

    def uniform_1(state, key):
        state, batch = table.sample(state, key, batch_size=1, window=1)
        return state, batch["x"].sum()

    def uniform_32(state, key):
        state, batch = table.sample(state, key, batch_size=32, window=20, pad="left")
        return state, batch["obs"].sum()

    def prioritized(state, key):
        state, batch = table.sample(state, key, batch_size=8, window=4,
                                    strategy=gx.Prioritized(0.6))
        state, _ = table.update_priorities(state, batch.keys, jnp.full((8,), 1.5))
        return state, batch["x"].sum()

    times = {}
    for name, step in zip(CASES, (uniform_1, uniform_32, prioritized)):
        run = jax.jit(lambda key, step=step: jax.lax.scan(
            step, table.state(), jax.random.split(key, steps))[1].sum())
        run(jax.random.key(0)).block_until_ready()
        best = float("inf")
        for r in range(5):
            start = time.perf_counter()
            run(jax.random.key(r + 1)).block_until_ready()
            best = min(best, time.perf_counter() - start)
        times[name] = best / steps * 1e6
    return {"staged": getattr(_ffi, "STAGED", None), "us_per_step": times,
            "device": str(jax.devices()[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20000, help="scan length (default 20000)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of all forms (default 7)")
    parser.add_argument("--placement", default="host", help="table placement (default host)")
    parser.add_argument("--out", default="benchmarks/results/bench_call_sites_cpu.json",
                        help="results JSON; the report goes beside it as .txt "
                             "(default benchmarks/results/bench_call_sites_cpu.json)")
    parser.add_argument("--baseline", help="a folder with another gearjax build (see above)")
    parser.add_argument("--baseline-name", default="baseline",
                        help="the baseline's name in the report (default baseline)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.steps, args.placement)))
        return

    runs: dict[str, list[dict]] = {"staged": [], "per call": []}
    if args.baseline:
        runs[args.baseline_name] = []
    order = list(runs)
    for _ in range(args.rounds):
        random.shuffle(order)
        for form in order:
            env = {**os.environ, "GEARJAX_FFI_STAGES": "1" if form == "staged" else "0"}
            if form not in ("staged", "per call"):
                env["PYTHONPATH"] = os.pathsep.join(
                    [args.baseline, *filter(None, [os.environ.get("PYTHONPATH")])])
            out = subprocess.run([sys.executable, __file__, "--child", "--steps", str(args.steps),
                                  "--placement", args.placement],
                                 capture_output=True, text=True, env=env, check=True)
            runs[form].append(json.loads(out.stdout.strip().splitlines()[-1]))
    medians = {form: {case: statistics.median(r["us_per_step"][case] for r in results)
                      for case in CASES} for form, results in runs.items()}
    bests = {form: {case: min(r["us_per_step"][case] for r in results) for case in CASES}
             for form, results in runs.items()}
    lines = [f"bench_call_sites: {args.steps} scan steps, best of 5 a process, "
             f"{args.rounds} processes a form, on {runs['staged'][0]['device']} "
             f"(placement {args.placement}); us a step"]
    for title, figures in (("best process", bests), ("median process", medians)):
        header = f"{title:<26}" + "".join(f"{form:>16}" for form in runs)
        header += f"{'staged/per call':>17}"
        if args.baseline:
            header += f"{'staged/' + args.baseline_name:>20}"
        lines.append(header)
        for case in CASES:
            s, p = figures["staged"][case], figures["per call"][case]
            line = f"{case:<26}" + "".join(f"{figures[form][case]:>16.3f}" for form in runs)
            line += f"{s / p:>17.2f}"
            if args.baseline:
                line += f"{s / figures[args.baseline_name][case]:>20.2f}"
            lines.append(line)
    text = "\n".join(lines)
    print(text)
    # The baseline by its name: its folder is this machine's business.
    recorded = {**vars(args), "baseline": args.baseline and args.baseline_name}
    result = {"args": recorded, "machine": machine_info(), "runs": runs, "medians": medians,
              "bests": bests}
    write_results(args.out, result, text)


if __name__ == "__main__":
    main()
