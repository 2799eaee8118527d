"""Benchmark: what the sampling modes cost against today's default sampling.

For tables of ``--sizes`` trajectories (lengths uniform in [1, 100], one
float32[17] column), each case samples ``--batch`` windows of ``--window``
steps by Uniform, Timestep and Prioritized(0.6), inside ``jax.jit``, and reports the
median time per sample call over ``--repeats`` calls (cases take turns call by
call, so a noisy machine slows them alike):

  start            ``cut="start"`` with replacement: the default, drawn from
                   the table's incremental selectors (O(log size) per row);
  end              ``cut="end"``: the same selectors, another window rule;
  full             ``cut="full"``: each strategy draws from its selector and
                   keeps the rows whose window fits (normalised by a
                   per-length index; Prioritized by its tree's total less
                   the weight of the trajectories too short, visited at
                   each sample);
  no-replace       ``replace=False``: the eligible trajectories (length >=
                   window) listed at each sample (O(size)), rows drawn one after
                   another without replacement;
  max-times        a table with ``max_times_sampled`` (set so high nothing is
                   removed): every sample lists and counts;

and each mode's time over ``start``'s (the cost of the mode).

    python scripts/bench_sample_modes.py --out benchmarks/results/bench_sample_modes_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

from _machine import cpu_model

MODES = {
    "start": dict(cut="start"),
    "end": dict(cut="end"),
    "full": dict(cut="full"),
    "no-replace": dict(replace=False),
    "max-times": dict(),
}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", default="benchmarks/results/bench_sample_modes_cpu.json")
    args = parser.parse_args(argv)

    import jax

    import gearjax as gx

    column = {"obs": gx.Column((17,), "float32")}
    strategies = {"Uniform": gx.Uniform(), "Timestep": gx.Timestep(),
                  "Prioritized(0.6)": gx.Prioritized(0.6)}
    rng = np.random.default_rng(0)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        lengths = rng.integers(1, 101, size=size)
        priorities = rng.uniform(0.1, 10.0, size=size)
        tables = {
            "plain": gx.Table(column, capacity=size, max_length=100, placement="host"),
            "limited": gx.Table(column, capacity=size, max_length=100, placement="host",
                                max_times_sampled=2**31 - 1),
        }
        for table in tables.values():
            table.insert_many([{"obs": np.zeros((n, 17), np.float32)} for n in lengths],
                              priorities=priorities)
        for strategy_name, strategy in strategies.items():
            calls = {}
            for mode, kwargs in MODES.items():
                table = tables["limited" if mode == "max-times" else "plain"]
                calls[mode] = jax.jit(
                    lambda k, t=table, kw=kwargs: t.sample(t.state(), k, args.batch, args.window,
                                                           strategy, **kw)[1].columns["obs"])
            key = jax.random.key(0)
            for call in calls.values():  # compile and warm up
                for _ in range(3):
                    key, sub = jax.random.split(key)
                    jax.block_until_ready(call(sub))
            times: dict[str, list[float]] = {mode: [] for mode in MODES}
            for _ in range(args.repeats):
                for mode, call in calls.items():
                    key, sub = jax.random.split(key)
                    t0 = time.perf_counter()
                    jax.block_until_ready(call(sub))
                    times[mode].append(time.perf_counter() - t0)
            base = statistics.median(times["start"])
            for mode in MODES:
                median = statistics.median(times[mode])
                rows.append({"size": size, "strategy": strategy_name, "mode": mode,
                             "median_s": median, "p10_s": float(np.percentile(times[mode], 10)),
                             "p90_s": float(np.percentile(times[mode], 90)),
                             "over_start": median / base})
        for table in tables.values():
            table.close()

    result = {
        "script": "scripts/bench_sample_modes.py",
        "args": vars(args),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "jax": jax.__version__,
                    "gearjax": gx.__version__, "platform": jax.default_backend(),
                    "load_average_at_start": os.getloadavg()},
        "rows": rows,
    }
    print(f"{'size':>8} {'strategy':>17} {'mode':>11} {'median ms':>10} {'x start':>8}")
    for r in rows:
        print(f"{r['size']:>8} {r['strategy']:>17} {r['mode']:>11} {r['median_s'] * 1e3:>10.3f} "
              f"{r['over_start']:>8.2f}")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
