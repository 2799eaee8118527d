"""Benchmark: putting one transition in, per call, against a NumPy ring buffer.

    python scripts/bench_insert_step.py [--calls 50000] [--rounds 7]
        [--out benchmarks/results/bench_insert_step_cpu.json]

A CartPole-sized transition: obs float32[4], action (a Python int into an
int32 column), reward (a Python float into float32), next_obs float32[4],
done (a Python bool): each case writes ``--calls`` of them, one call at a
time, with a fresh dict per call as an environment loop makes one:

* ``numpy-ring``: five NumPy arrays of 10,000 rows, one row assignment per
  column (what a hand-written replay buffer does);
* ``insert_step``: ``table.insert_step(step)`` into a table of 10,000
  one-step slots (it evicts, FIFO, once full);
* ``insert``: ``table.insert`` of the same step as a length-1 trajectory
  (each column given a time axis), the general path;
* ``writer-append``: ``w.append(step)`` of a writer made with
  ``max_length_overflow="split", overlap=1`` into pieces of 32 steps (obs,
  action, reward, done: the second recipe of docs/concepts/transitions.md),
  full pieces inserted as they fill.

Cases take turns round by round; the median over rounds is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from _machine import cpu_model, version_of

CAPACITY = 10_000


def cases(calls: int) -> dict:
    import gearjax as gx

    obs, next_obs = np.zeros(4, np.float32), np.ones(4, np.float32)
    columns = {"obs": gx.Column((4,), "float32"), "action": gx.Column((), "int32"),
               "reward": gx.Column((), "float32"), "next_obs": gx.Column((4,), "float32"),
               "done": gx.Column((), "bool")}

    def numpy_ring():
        buffers = {n: np.zeros((CAPACITY, *c.shape), c.dtype) for n, c in columns.items()}
        begin = time.perf_counter()
        for i in range(calls):
            step = {"obs": obs, "action": 1, "reward": 1.0, "next_obs": next_obs, "done": False}
            j = i % CAPACITY
            for name, value in step.items():
                buffers[name][j] = value
        return time.perf_counter() - begin

    def insert_step():
        with gx.Table(columns, CAPACITY, 1) as table:
            begin = time.perf_counter()
            for _ in range(calls):
                table.insert_step({"obs": obs, "action": 1, "reward": 1.0,
                                   "next_obs": next_obs, "done": False})
            return time.perf_counter() - begin

    def insert():
        with gx.Table(columns, CAPACITY, 1) as table:
            begin = time.perf_counter()
            for _ in range(calls):
                step = {"obs": obs, "action": 1, "reward": 1.0, "next_obs": next_obs,
                        "done": False}
                table.insert({n: np.asarray(v)[None] for n, v in step.items()})
            return time.perf_counter() - begin

    def writer_append():
        pieces = {n: c for n, c in columns.items() if n != "next_obs"}
        with gx.Table(pieces, CAPACITY, 32) as table, \
                table.writer(max_length_overflow="split", overlap=1) as w:
            begin = time.perf_counter()
            for _ in range(calls):
                w.append({"obs": obs, "action": 1, "reward": 1.0, "done": False})
            return time.perf_counter() - begin

    return {"numpy-ring": numpy_ring, "insert_step": insert_step, "insert": insert,
            "writer-append": writer_append}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default="benchmarks/results/bench_insert_step_cpu.json")
    args = parser.parse_args(argv)
    runs = cases(args.calls)
    for run in runs.values():  # warm up
        run()
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            seconds[name].append(run())
    us = {name: float(np.median(s) / args.calls * 1e6) for name, s in seconds.items()}
    result = {"config": {"calls": args.calls, "rounds": args.rounds, "capacity": CAPACITY},
              "machine": {"platform": platform.platform(), "cpu_model": cpu_model(),
                          "cores": len(os.sched_getaffinity(0)),
                          "python": platform.python_version(),
                          "versions": {p: version_of(p) for p in ("gearjax", "numpy")}},
              "us_per_call": us,
              "seconds_per_round": seconds}
    lines = [f"bench_insert_step: one transition per call, median of {args.rounds} rounds of "
             f"{args.calls} calls; {result['machine']['cpu_model']}, "
             f"{result['machine']['cores']} cores"]
    lines += [f"  {name:14s} {v:7.2f} us  (x{v / us['numpy-ring']:.2f} numpy-ring)"
              for name, v in us.items()]
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".txt").write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
