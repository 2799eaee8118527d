"""One-sided samples of a ``nixl`` ShardedTable by each strategy, eagerly and
inside jit, between two local processes: what each strategy's sample costs
over the one-sided exchange, and (with ``--baseline``) against another build.

    python scripts/bench_one_sided_strategies.py                   # prints
    python scripts/bench_one_sided_strategies.py --out benchmarks/results/bench_one_sided_strategies_cpu.json
    PYTHONPATH=/path/to/other/build python scripts/bench_one_sided_strategies.py --out base.json
    python scripts/bench_one_sided_strategies.py --baseline base.json --out ...   # adds ratios

Two ``jax.distributed`` CPU processes hold a ``nixl`` ShardedTable each,
``CAPACITY`` trajectories of ``LENGTH`` steps of a 17-float32 observation per
shard (random priorities). Process 0 times, strategies taking turns, for
Uniform, Prioritized(0.6), TopK(1000) and Recent(1000):

* ``eager``: ``table.sample(key, 256, 20, strategy)``, median seconds;
* ``in_jit``: seconds per sample of a jitted ``lax.scan`` of ``SCAN_STEPS``
  samples threading the table state (each summed, so none is dropped).

Rows come from both shards (this process's copied, the other's read over
loopback UCX), so these are one machine's numbers, not a network's. The
script uses only the public API, so it runs against any build of gearjax on
``PYTHONPATH``; ``--baseline`` reads such a run's output and reports
this run / baseline for every entry (below 1: faster here). Needs NIXL
(``python -m gearjax.sharded.install_nixl``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_info, write_results  # noqa: E402
from _processes import run_processes  # noqa: E402

CAPACITY, LENGTH, BATCH, WINDOW, SCAN_STEPS = 4096, 50, 256, 20, 20
STRATEGIES = ("Uniform()", "Prioritized(0.6)", "TopK(1000)", "Recent(1000)")


def configure(smoke: bool) -> None:
    """--smoke: small tables, few samples (what tests/test_scripts.py runs)."""
    global CAPACITY, LENGTH, BATCH, SCAN_STEPS
    if smoke:
        CAPACITY, LENGTH, BATCH, SCAN_STEPS = 256, 30, 32, 3


def child(process: int, port: int, repeats: int) -> dict:
    """One of the two processes: fills its shard, then process 0 times."""
    import jax
    jax.distributed.initialize(f"127.0.0.1:{port}", 2, process)
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    import gearjax as gx
    table = gx.ShardedTable({"obs": gx.Column((17,), "float32")}, capacity=CAPACITY,
                            max_length=LENGTH, exchange="nixl")
    rng = np.random.default_rng(process)
    for _ in range(CAPACITY):
        table.insert({"obs": rng.random((LENGTH, 17), np.float32)},
                     priority=float(rng.random() + 0.01))
    multihost_utils.sync_global_devices("filled")
    out = {}
    if process == 0:
        strategies = dict(zip(STRATEGIES, (gx.Uniform(), gx.Prioritized(0.6), gx.TopK(1000),
                                           gx.Recent(1000))))

        def scan(strategy):
            def run(state, key):
                def step(state, k):
                    state, b = table.sample(state, k, BATCH, WINDOW, strategy)
                    return state, b["obs"].sum(dtype=jnp.float32)
                return jax.lax.scan(step, state, jax.random.split(key, SCAN_STEPS))
            return jax.jit(run)

        programs = {name: scan(s) for name, s in strategies.items()}
        for name, s in strategies.items():  # warm: layouts, buffers, compiles
            jax.block_until_ready(table.sample(jax.random.key(0), BATCH, WINDOW, s))
            jax.block_until_ready(programs[name](table.state(), jax.random.key(0)))
        times = {name: {"eager": [], "in_jit": []} for name in strategies}
        shards = {name: set() for name in strategies}
        for r in range(repeats):
            for name, s in strategies.items():
                start = time.perf_counter()
                batch = table.sample(jax.random.key(r + 1), BATCH, WINDOW, s)
                jax.block_until_ready(batch)
                times[name]["eager"].append(time.perf_counter() - start)
                shards[name].update(np.asarray(batch.shard).tolist())
                start = time.perf_counter()
                jax.block_until_ready(programs[name](table.state(), jax.random.key(r + 1)))
                times[name]["in_jit"].append((time.perf_counter() - start) / SCAN_STEPS)
        for name, t in times.items():
            out[name] = {kind: float(np.median(v)) for kind, v in t.items()}
            out[name]["shards_sampled"] = sorted(shards[name])
    multihost_utils.sync_global_devices("timed")
    table.close()
    jax.distributed.shutdown()
    return out


def gearjax_commit() -> str:
    """The commit of the gearjax this run imported (its checkout's HEAD)."""
    import gearjax
    root = Path(gearjax.__file__).resolve().parent.parent
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def report(results: dict, baseline: dict | None) -> tuple[dict, list[str]]:
    """Lines per strategy, and, against a baseline run, this / baseline."""
    lines, ratios = [], {}
    for name, r in results.items():
        line = f"{name:17s} eager {r['eager'] * 1e6:9.1f} us | in jit {r['in_jit'] * 1e6:9.1f} us"
        if baseline is not None and name in baseline["strategies"]:
            b = baseline["strategies"][name]
            ratios[name] = {k: r[k] / b[k] for k in ("eager", "in_jit")}
            line += (f" | baseline ({baseline['commit']}) eager {b['eager'] * 1e6:9.1f} us, in jit "
                     f"{b['in_jit'] * 1e6:9.1f} us | this / baseline eager "
                     f"{ratios[name]['eager']:.2f}, in jit {ratios[name]['in_jit']:.2f}")
        lines.append(line)
    return ratios, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", default=None)
    parser.add_argument("--baseline", default=None, help="a run's --out file to compare with")
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true",
                        help="small tables, few samples, to check the script runs")
    args = parser.parse_args(argv)
    configure(args.smoke)
    if args.child:
        print(json.dumps(child(*args.child, args.repeats)), flush=True)
        return 0
    from gearjax.sharded import nixl
    try:
        nixl.nixl_api()
    except ValueError as e:
        print(f"bench_one_sided_strategies: {e}", file=sys.stderr)
        return 1
    baseline = json.loads(Path(args.baseline).read_text()) if args.baseline else None
    results = run_processes(__file__, 2, lambda i, port: [
        "--child", str(i), str(port), "--repeats", str(args.repeats),
        *(["--smoke"] if args.smoke else [])], timeout=1800)[0]
    ratios, lines = report(results, baseline)
    print("\n".join(lines), flush=True)
    if args.out:
        data = {"machine": machine_info(("nixl-cu12",)), "commit": gearjax_commit(),
                "repeats": args.repeats, "capacity": CAPACITY, "length": LENGTH,
                "batch": BATCH, "window": WINDOW, "scan_steps": SCAN_STEPS,
                "strategies": results}
        if baseline is not None:
            data["baseline"] = baseline
            data["this_over_baseline"] = ratios
        write_results(args.out, data, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
