"""Benchmark: the instructions one call executes, this checkout against another
commit's build, counted by valgrind's callgrind: figures a shared machine's
noise does not move (bench_against.py's times move by up to 2x between rounds
on a 2-core VM, hiding a slowdown of a few percent either way).

    python scripts/count_against.py --baseline DIR [--baseline-name NAME]
        [--current DIR] [--workloads insert_step,insert,sample,prioritized]
        [--jobs N] [--smoke] [--out benchmarks/results/count_against_cpu.json]
    python scripts/count_against.py --report-from JSON [--out ...]

DIR is a checkout of the other commit with its extension built in place (as
for bench_against.py). Each workload (WORKLOADS) runs in its own process
under `valgrind --tool=callgrind`, twice per build: `warmup` calls, and
`warmup + calls` calls; the difference of the two runs' counts over `calls`
is one call's, so start-up, imports, compiles and filling the table cancel.
The counts are split by where the instructions ran:

* gearjax: the extension (the FFI handlers, the native core, the bindings);
* python: the interpreter, running gearjax's Python layer and JAX's;
* runtime: the rest that runs in the caller (jaxlib's dispatch and XLA's
  runtime, NumPy, libc's memcpy and malloc);
* idle threads: thread pools waiting for work (OpenBLAS, XLA's Eigen pool),
  whose count depends on scheduling: reported, not judged.

The judged figure is `ours` = gearjax + python a call: what a change to
this repository moves, with the runtime work it causes left out; `caller`
adds the runtime. The drivers run with Python's garbage collector off (a
collection landing in one run and not the other would add its cost to one
build's count), fixed string hashes and, where setarch can, without address
randomisation; then one build measured against itself (`--current` = the
baseline's DIR) agrees to 0.1% in `ours` for the inserts and to 1.1% for
the jitted calls (their gearjax part moves: which worker thread runs the
handler), and in `caller` for the inserts, but not in a jitted call's
runtime part, which follows how XLA's
threads hand work over (0.68-1.19 in such a run). Measure a build against
itself for the floor below which a ratio means nothing. --smoke
runs each workload for a few calls without valgrind: a check that the
drivers run, not a result.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import gc
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name -> (what it measures, warmup calls, calls counted)
WORKLOADS = {
    "insert_step": (("table.insert_step of one transition (bench_dqn's table: 5 columns, "
                     "max_length 1, capacity 1000, full, so each insert also evicts)"),
                    1100, 2000),
    "insert": (("table.insert of one 200-step trajectory of 17 float32 (bench_sample's "
                "case A table, full: each insert evicts)"), 1100, 2000),
    "sample": (("a jitted call of table.sample(state, key, 256, 20), the threaded form "
                "(bench_sample's per-call case A)"), 20, 500),
    "prioritized": (("a jitted threaded Prioritized(0.6) sample of 256 and update_priorities "
                     "of the rows drawn, at 1000 trajectories (bench_sample's prioritized "
                     "row, one step per call)"), 20, 500),
    "eager_update": (("an eager table.update_priorities(keys, priorities) of 256 NumPy int64 "
                      "keys and float32 priorities, at 1000 trajectories (the update of "
                      "bench_eager's eager prioritized workload)"), 1100, 2000),
    "eager_sample": (("an eager table.sample(key, 256, 20, Prioritized(0.6), cut='full') at "
                      "1000 trajectories of 200 steps of one float32[17] column, the whole "
                      "batch waited for (an eager prioritized sample like bench_eager's)"),
                     20, 500),
    "step_update": (("an eager table.update_priorities(keys, priorities, steps=...) of 256 "
                     "windows of 20 steps drawn by PrioritizedSteps(0.6), cut='full', at 1000 "
                     "trajectories of 1000 steps (bench_torchrl's per-step row at 10^6)"),
                    110, 1000),
}
# Functions of threads that wait for work: spinning, stealing, sleeping.
IDLE = ("blas_thread_server", "Eigen::ThreadPoolTempl", "Eigen::RunQueue", "EventCount",
        "sched_yield", "futex", "pthread_cond", "__lll_lock_wait", "syscall")


def _sampled_table(gx, rng):
    """bench_sample's case A table for the sampling workloads: 1000
    trajectories of 200 steps of float32[17], random priorities."""
    import numpy as np
    table = gx.Table({"obs": gx.Column((17,), "float32")}, capacity=1000, max_length=200)
    table.insert_many([{"obs": rng.standard_normal((200, 17)).astype(np.float32)}
                       for _ in range(1000)], priorities=rng.uniform(0.1, 2.0, 1000))
    return table


def drive(workload: str, calls: int) -> None:
    """Runs `workload` for `calls` calls in this process (under callgrind)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import gearjax as gx

    # A collection of the imports' and compiles' objects would land in one
    # run and not the other, at a cost of its own: none runs here.
    gc.disable()
    rng = np.random.default_rng(0)
    if workload == "insert_step":
        table = gx.Table({"obs": gx.Column((4,), "float32"), "action": gx.Column((), "int32"),
                          "reward": gx.Column((), "float32"),
                          "next_obs": gx.Column((4,), "float32"),
                          "done": gx.Column((), "bool")}, capacity=1000, max_length=1)
        obs = rng.standard_normal((calls + 1, 4)).astype(np.float32)
        for i in range(calls):
            table.insert_step({"obs": obs[i], "action": np.int64(i % 2), "reward": 1.0,
                               "next_obs": obs[i + 1], "done": False})
    elif workload == "eager_update":
        table = gx.Table({"obs": gx.Column((17,), "float32")}, capacity=1000, max_length=200)
        table.insert_many([{"obs": np.zeros((20, 17), np.float32)} for _ in range(1000)])
        keys = rng.permutation(table.contents()["key"])[:256]
        priorities = rng.uniform(0.1, 2.0, 256).astype(np.float32)
        for _ in range(calls):
            table.update_priorities(keys, priorities)
    elif workload == "eager_sample":
        table = _sampled_table(gx, rng)
        # 64 keys made first, whatever `calls`: their cost cancels.
        keys = list(jax.random.split(jax.random.key(1), 64))
        for i in range(calls):
            jax.block_until_ready(table.sample(keys[i % 64], 256, 20, gx.Prioritized(0.6),
                                               cut="full"))
    elif workload == "step_update":
        table = gx.Table({"obs": gx.Column((17,), "float32")}, capacity=1000, max_length=1000,
                         step_priorities=True)
        table.insert_many([{"obs": np.zeros((1000, 17), np.float32)} for _ in range(1000)],
                          priorities=rng.uniform(0.1, 2.0, 1000))
        batch = table.sample(jax.random.key(1), 256, 20, gx.PrioritizedSteps(0.6), cut="full",
                             numpy=True)  # and so the full-window tree the update keeps too
        keys, steps = batch.keys, np.where(batch.mask, batch.timestep, -1)
        priorities = rng.uniform(0.1, 2.0, (256, 20)).astype(np.float32)
        for _ in range(calls):
            table.update_priorities(keys, priorities, steps=steps)
    elif workload == "insert":
        table = gx.Table({"obs": gx.Column((17,), "float32")}, capacity=1000, max_length=200)
        trajectory = {"obs": rng.standard_normal((200, 17)).astype(np.float32)}
        for _ in range(calls):
            table.insert(trajectory)
    else:
        prioritized = workload == "prioritized"
        table = _sampled_table(gx, rng)
        if prioritized:
            def draw(state, k):
                state, batch = table.sample(state, k, 256, 1, gx.Prioritized(0.6))
                state, _ = table.update_priorities(state, batch.keys,
                                                   jnp.abs(batch["obs"][:, 0, 0]) + 0.01)
                return state, batch["obs"]
        else:
            def draw(state, k):
                state, batch = table.sample(state, k, batch_size=256, window=20, pad="left")
                return state, batch["obs"]

        # Each call makes the next call's key: keys made in Python (a split's
        # rows taken one by one) would cost the caller per call as well.
        def step(state, key):
            key, k = jax.random.split(key)
            state, out = draw(state, k)
            return state, key, out

        step = jax.jit(step)
        key = jax.random.key(1)
        state = table.state()
        for _ in range(calls):
            state, key, out = step(state, key)
            jax.block_until_ready(out)
    table.close()


def counts(callgrind_file: Path) -> dict[str, int]:
    """Instructions of a callgrind output by where they ran (see the module
    docstring), from callgrind_annotate's per-function self costs."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100",
                           str(callgrind_file)], capture_output=True, text=True,
                          check=True).stdout
    out: dict[str, int] = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*)$", line)
        if not m or "PROGRAM TOTALS" in m.group(2):
            continue
        n, where = int(m.group(1).replace(",", "")), m.group(2)
        library = re.search(r"\[([^\]]*)\]\s*$", where)
        library = library.group(1) if library else ""
        if any(word in where for word in IDLE):
            out["idle threads"] += n
        elif "_gearjax" in library:
            out["gearjax"] += n
        elif "libpython" in library:
            out["python"] += n
        else:
            out["runtime"] += n
    return dict(out)


def run_driver(workload: str, calls: int, pythonpath: Path, scratch: Path, tag: str,
               smoke: bool) -> dict[str, int]:
    # Fixed string hashes, and addresses where setarch can fix them: both
    # steer what dicts and hash tables do, which a count would show.
    env = dict(os.environ, PYTHONPATH=str(pythonpath), OPENBLAS_NUM_THREADS="1",
               PYTHONHASHSEED="0")
    cmd = [sys.executable, "-P", str(Path(__file__).resolve()), "--drive", workload,
           str(calls)]
    out = scratch / f"callgrind.{tag}.{workload}.{calls}"
    if not smoke:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd]
        if shutil.which("setarch"):
            cmd = ["setarch", platform.machine(), "-R", *cmd]
    done = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"{workload} ({tag}, {calls} calls) failed:\n{done.stderr[-3000:]}")
    return {} if smoke else counts(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drive", nargs=2, metavar=("WORKLOAD", "CALLS"), help=argparse.SUPPRESS)
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--baseline-name", default="baseline")
    parser.add_argument("--current", type=Path, default=ROOT)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="runs at a time (counts do not depend on it)")
    parser.add_argument("--smoke", action="store_true",
                        help="a few calls each, without valgrind: a check, not a result")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "benchmarks/results/count_against_cpu.json")
    parser.add_argument("--report-from", type=Path,
                        help="a JSON this script wrote: report its counts again, measuring "
                             "nothing")
    args = parser.parse_args()
    if args.drive:
        return drive(args.drive[0], int(args.drive[1]))
    if args.report_from:
        saved = json.loads(args.report_from.read_text())
        return write_report(args.out, saved["builds"],
                            {w: v["per_call"] for w, v in saved["workloads"].items()},
                            saved["smoke"],
                            {w: (v["what"], v["warmup"], v["calls"])
                             for w, v in saved["workloads"].items()})
    if args.baseline is None:
        parser.error("--baseline is required")
    workloads = [w for w in args.workloads.split(",") if w]
    if unknown := set(workloads) - set(WORKLOADS):
        parser.error(f"unknown workloads {sorted(unknown)}; known: {sorted(WORKLOADS)}")
    if not args.smoke and shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt install valgrind)")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.current,
                            capture_output=True, text=True, check=False).stdout.strip()
    builds = {f"current {commit}": args.current.resolve(),
              args.baseline_name: args.baseline.resolve()}
    results: dict[str, dict] = {w: {} for w in workloads}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        runs = {}
        for workload in workloads:
            _, warmup, calls = WORKLOADS[workload]
            if args.smoke:
                warmup, calls = 2, 3
            for name, path in builds.items():
                for n in (warmup, warmup + calls):
                    runs[workload, name, n] = pool.submit(
                        run_driver, workload, n, path, Path(scratch), name.split()[0],
                        args.smoke)
        for workload in workloads:
            _, warmup, calls = WORKLOADS[workload]
            if args.smoke:
                warmup, calls = 2, 3
            for name in builds:
                low = runs[workload, name, warmup].result()
                high = runs[workload, name, warmup + calls].result()
                per_call = {k: (high.get(k, 0) - low.get(k, 0)) / calls
                            for k in sorted(set(low) | set(high))}
                results[workload][name] = per_call
            print(f"  {workload:12s} done at {time.perf_counter() - started:6.1f} s", flush=True)
    write_report(args.out, {name: str(path) for name, path in builds.items()}, results,
                 args.smoke)


def with_sums(per_call: dict[str, float]) -> dict[str, float]:
    """A build's counts a call with the two sums the report judges by."""
    parts = {k: v for k, v in per_call.items() if k not in ("ours", "caller")}
    ours = parts.get("gearjax", 0.0) + parts.get("python", 0.0)
    return {**parts, "ours": ours, "caller": ours + parts.get("runtime", 0.0)}


def write_report(out: Path, builds: dict[str, str], results: dict[str, dict],
                 smoke: bool, described: dict[str, tuple] | None = None) -> None:
    """Prints the comparison and writes it as JSON (out) and text (.txt).
    ``described``: workload -> (what, warmup, calls) as a saved JSON has them
    (--report-from; it may hold workloads WORKLOADS no longer has), else
    WORKLOADS'."""
    described = described or WORKLOADS
    results = {w: {name: with_sums(c) for name, c in by_build.items()}
               for w, by_build in results.items()}
    current, baseline = builds
    lines = [(f"count_against: instructions a call, callgrind ({platform.machine()}, python "
              f"{platform.python_version()}); ours = gearjax + python (what this repository's "
              f"code moves; judged), caller = ours + runtime (JAX's runtime too: varies between "
              f"runs of one build where XLA's threads take part); ratio = current / baseline"),
             f"{'workload':12s} {'part':8s} {current:>18s} {baseline:>18s} {'ratio':>7s}"]
    for workload, by_build in results.items():
        for part in ("gearjax", "python", "runtime", "ours", "caller"):
            a, b = by_build[current].get(part, 0.0), by_build[baseline].get(part, 0.0)
            ratio = f"{a / b:7.3f}" if b else "      -"
            lines.append(f"{workload:12s} {part:8s} {a:18.0f} {b:18.0f} {ratio}")
    report = "\n".join(lines)
    print(report)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "machine": {"processor": platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version()},
        "builds": builds,
        "smoke": smoke,
        "workloads": {w: {"what": described[w][0], "warmup": described[w][1],
                          "calls": described[w][2], "per_call": results[w]}
                      for w in results},
    }, indent=2) + "\n")
    out.with_suffix(".txt").write_text(report + "\n")


if __name__ == "__main__":
    main()
