"""Global sampling throughput of a ShardedTable per exchange, against local
sampling and a raw transfer of the same bytes by the same transport.

    python scripts/bench_exchange.py                       # 1 and 2 local processes
    python scripts/bench_exchange.py --processes 1 2 4 --out benchmarks/results/x.json

For each process count P it starts P jax.distributed processes on this
machine (CPU, gloo). Every process holds a shard of the same size, and every
measurement is a jitted ``lax.scan`` of ``--steps`` steps whose each step
samples a batch and sums it (so nothing is dropped), timed per dispatch,
systems taking turns:

* ``global``: ``state, batch = ShardedTable.sample(state, ..., axis_name=...)``
  inside ``shard_map`` (the xla exchange: two all-gathers and one all-to-all a
  step; the table state in the scan's carry);
* ``local``: the process's own shard sampled alone (``gx.Table.sample``, its
  state in the carry too), what one process gets without any exchange;
* ``all_to_all``: gloo's all-to-all of the bytes the exchange moves (a block
  of ``batch`` rows to every process), with no table at all;
* ``all_to_all_ideal``: gloo's all-to-all of ``batch`` rows in all, what an
  exchange that sent only the real rows would move.

Then one eager call at a time (dispatch included, the way the one-sided
exchange is used): the ``xla`` exchange, the ``nixl`` exchange, the local
shard, and ``nixl_read``, NIXL reading ``batch`` windows of the same size from
the next process's shard with no table logic (the transport's own rate). The
nixl rows need NIXL installed (``pip install --no-deps nixl-cu12 nixl``).

Reported: GB/s of sampled windows delivered per process and in total, and the
scaling efficiency total(P) / (P x total(1)) of the global sample. Every
process of a run shares this machine's cores, so on a 2-core machine P = 2
measures the exchange's overhead more than its scaling.

The model (``--model-from RESULTS.json`` prints it for a committed run): the
transport's per-message cost ``alpha`` and bandwidth ``beta`` are fitted to
the P = 2 all-to-all times (T = alpha + bytes / beta), and a global step at P
processes is modelled as

    T(P) = T_local + 2 alpha ceil(log2 P) + (P - 1) (alpha + B r / beta)

(a local sample, the gather of summaries, then P - 1 pairwise exchanges of a
block of B rows of r bytes each, as the exchange was before its buckets); the
bucketed exchange sends blocks of the expected compiled size instead (a Monte
Carlo of the plan over shards of equal mass, ``expected_block``), and an
exchange that sent only the real rows would move B r (P - 1) / P bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _processes import run_processes  # noqa: E402

CASES = {
    # name: (batch, window, step shape, dtype, trajectories per shard, length)
    "A": (256, 20, (17,), "float32", 2000, 100),
    "C": (64, 20, (64, 64, 3), "uint8", 64, 100),
}


def body(process: int, processes: int, port: int, args: argparse.Namespace) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    jax.distributed.initialize(f"127.0.0.1:{port}", processes, process)
    import gearjax as gx
    from jax.experimental import multihost_utils

    mesh = Mesh(np.array(jax.devices()), ("hosts",))
    results = {}
    for name in args.cases:
        batch, window, shape, dtype, count, length = CASES[name]
        table = gx.ShardedTable({"x": gx.Column(shape, dtype)}, capacity=count,
                                max_length=length)
        rng = np.random.default_rng(process)
        for _ in range(count):
            table.insert({"x": rng.integers(0, 100, (length, *shape)).astype(dtype)})
        payload = batch * window * int(np.prod(shape)) * np.dtype(dtype).itemsize
        steps = args.steps

        def scan(step_fn, start=lambda: None):
            """step_fn(carry, key) -> (carry, value); the carry starts as
            start() (a table's fresh state, or None)."""
            def run(key):
                return jax.lax.scan(step_fn, start(),
                                    jax.random.split(key[0], steps))[1].sum()[None]
            return jax.jit(jax.shard_map(run, mesh=mesh, in_specs=P("hosts"),
                                         out_specs=P("hosts")))

        def global_step(state, k):
            state, b = table.sample(state, k, batch, window, axis_name="hosts")
            return state, b["x"].sum(dtype=jnp.float32)

        def local_step(state, k):
            state, b = table.local.sample(state, k, batch, window)
            return state, b["x"].sum(dtype=jnp.float32)

        def all_to_all(rows):
            # Data that depends on the step's key, so XLA cannot fold it away.
            size = processes * rows * window * int(np.prod(shape))

            def step(carry, k):
                x = (jnp.arange(size, dtype=jnp.uint32) + jax.random.bits(k, (), jnp.uint32))
                x = x.astype(dtype).reshape(processes, rows, window, *shape)
                return carry, jax.lax.all_to_all(x, "hosts", 0, 0).sum(dtype=jnp.float32)
            return step

        programs = {"global": scan(global_step, table.state),
                    "local": scan(local_step, table.local.state),
                    "all_to_all": scan(all_to_all(batch)),
                    "all_to_all_ideal": scan(all_to_all(max(1, batch // processes)))}
        keys = jax.make_array_from_process_local_data(
            NamedSharding(mesh, P("hosts")), jax.random.key_data(jax.random.key(process))[None])
        for program in programs.values():
            jax.block_until_ready(program(keys))
        times: dict[str, list[float]] = {n: [] for n in programs}
        for _ in range(args.repeats):
            for n, program in programs.items():
                multihost_utils.sync_global_devices(f"{name}-{n}")
                start = time.perf_counter()
                jax.block_until_ready(program(keys))
                times[n].append((time.perf_counter() - start) / steps)
        medians = {n: float(np.median(t)) for n, t in times.items()}
        results[name] = {
            "batch": batch, "window": window, "step_shape": list(shape), "dtype": dtype,
            "payload_bytes": payload, "steps_per_dispatch": steps,
            "median_seconds_per_step": medians,
            "gb_per_s_per_process": {n: payload / t / 1e9 for n, t in medians.items()},
            "all_seconds_per_step": times,
        }
        results[name]["eager"] = eager_calls(table, name, batch, window, args, process,
                                             processes, payload)
        table.close()
    jax.distributed.shutdown()
    return results


def eager_calls(table, name, batch, window, args, process, processes, payload) -> dict:
    """One eager call at a time (dispatch included), every process at once:
    the xla exchange, the nixl exchange (one-sided reads; when NIXL is
    installed), the local shard alone, and NIXL reading the same number of
    windows of the same size from the next process's shard (no table
    logic). Returns median seconds per call and GB/s per process."""
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    import gearjax as gx
    from gearjax.sharded import nixl

    calls = {"xla": lambda k: table.sample(k, batch, window),
             "local": lambda k: table.local.sample(k, batch, window)}
    one_sided = None
    try:
        nixl.nixl_api()
        column = table.columns["x"]
        one_sided = gx.ShardedTable({"x": column}, capacity=table.local.capacity,
                                    max_length=table.local.max_length, exchange="nixl")
        rng = np.random.default_rng(process)
        for _ in range(table.local.capacity):
            one_sided.insert({"x": rng.integers(0, 100, (table.local.max_length, *column.shape))
                              .astype(column.dtype)})
        multihost_utils.sync_global_devices(f"{name}-nixl-filled")
        calls["nixl"] = lambda k: one_sided.sample(k, batch, window)
        transport = one_sided._transport
        peer = (process + 1) % processes
        layout = transport._peer_layout(peer, 0, 0.0)
        row = window * column.step_bytes
        addresses = (layout["arena"] + np.arange(batch) * table.local.max_length *
                     column.step_bytes).astype(np.uint64)
        sizes = np.full(batch, row, np.int64)
        calls["nixl_read"] = lambda k: transport.fetch({peer: (addresses, sizes)}, "bench")
    except ValueError:
        pass  # no NIXL here: the nixl rows are left out
    for call in calls.values():
        jax.block_until_ready(call(jax.random.key(0)))
    times: dict[str, list[float]] = {n: [] for n in calls}
    for r in range(args.repeats):
        for n, call in calls.items():
            multihost_utils.sync_global_devices(f"{name}-eager-{n}")
            start = time.perf_counter()
            jax.block_until_ready(call(jax.random.key(r + 1)))
            times[n].append(time.perf_counter() - start)
    multihost_utils.sync_global_devices(f"{name}-eager-done")
    if one_sided is not None:
        one_sided.close()
    medians = {n: float(np.median(t)) for n, t in times.items()}
    return {"median_seconds_per_call": medians,
            "gb_per_s_per_process": {n: payload / t / 1e9 for n, t in medians.items()}}


def fit_transport(result: dict, case_names: list[str]) -> tuple[float, float] | None:
    """(alpha seconds, beta bytes/s) fitted to the P = 2 all-to-all times of the
    given cases: each process sends its peer one block (all_to_all: ``batch``
    rows, all_to_all_ideal: ``batch // 2``); None when the times do not grow
    with the bytes (too few or too noisy measurements to fit)."""
    import numpy as np

    points = []
    for name in case_names:
        run = result["runs"]["2"][0][name]
        row_bytes = run["payload_bytes"] / run["batch"]
        for system, rows in (("all_to_all", run["batch"]), ("all_to_all_ideal", run["batch"] // 2)):
            points.append((rows * row_bytes, run["median_seconds_per_step"][system]))
    sent, seconds = np.array(points).T
    # Relative residuals: small messages fix alpha, large ones beta.
    slope, alpha = np.polyfit(sent, seconds, 1, w=1.0 / seconds)
    if not slope > 0:
        return None
    return max(float(alpha), 0.0), float(1.0 / slope)


def expected_block(batch: int, processes: int, samples: int = 400, seed: int = 0) -> float:
    """The mean rows a pair's blocks carry in the bucketed xla exchange for
    shards of equal mass: a Monte Carlo of the plan (each process's B rows
    drawn uniformly over the shards), the smallest compiled size that holds
    the largest count, or rounds of the cap above it."""
    import numpy as np

    from gearjax.sharded.exchange import block_sizes

    sizes = np.array(block_sizes(batch, processes))
    cap = sizes[-1]
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(batch, np.full(processes, 1 / processes), size=(samples, processes))
    need = counts.reshape(samples, -1).max(axis=1)
    rounds = np.maximum(-(-need // cap), 1)
    first = sizes[np.searchsorted(sizes, np.minimum(need, cap))]
    return float(np.where(rounds > 1, rounds * cap, first).mean())


def model(result: dict, sizes=(2, 4, 8, 16, 64)) -> dict:
    """Per-process GB/s of the global sample at larger P, from the fitted
    transport and the measured local sample (see the module docstring)."""
    import math

    names = [n for n in result["settings"]["cases"] if "2" in result["runs"]]
    fitted = fit_transport(result, names)
    if fitted is None:
        return {"error": "the P=2 all-to-all times do not grow with the bytes sent: no fit"}
    alpha, beta = fitted
    out = {"alpha_seconds": alpha, "beta_bytes_per_second": beta, "cases": {}}
    for name in names:
        run = result["runs"]["1"][0][name] if "1" in result["runs"] else result["runs"]["2"][0][name]
        payload, local = run["payload_bytes"], run["median_seconds_per_step"]["local"]
        rows = {}
        for p in sizes:
            gather = 2 * alpha * math.ceil(math.log2(p))
            padded = local + gather + (p - 1) * (alpha + payload / beta)
            block = expected_block(run["batch"], p) / run["batch"]  # in units of B
            bucketed = local + gather + (p - 1) * (alpha + block * payload / beta)
            ideal = local + gather + (p - 1) * alpha + payload * (p - 1) / p / beta
            rows[str(p)] = {"padded_gb_per_s_per_process": payload / padded / 1e9,
                            "bucketed_gb_per_s_per_process": payload / bucketed / 1e9,
                            "bucketed_moved_per_useful": p * block,
                            "real_rows_only_gb_per_s_per_process": payload / ideal / 1e9}
        out["cases"][name] = rows
    return out


def print_model(m: dict) -> None:
    if "error" in m:
        print(f"model: {m['error']}")
        return
    print(f"model: alpha {m['alpha_seconds'] * 1e6:.0f} us, beta "
          f"{m['beta_bytes_per_second'] / 1e9:.2f} GB/s (fitted to P=2 all-to-all times)")
    for name, rows in m["cases"].items():
        cells = ", ".join(f"P={p}: {r['padded_gb_per_s_per_process']:.3f} / "
                          f"{r['bucketed_gb_per_s_per_process']:.3f} / "
                          f"{r['real_rows_only_gb_per_s_per_process']:.3f}"
                          for p, r in rows.items())
        print(f"model case {name}, GB/s per process, blocks of B / bucketed blocks / real rows "
              f"only: {cells}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--steps", type=int, default=20, help="scan steps per dispatch")
    parser.add_argument("--repeats", type=int, default=15, help="timed dispatches per system")
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--model-from", default=None,
                        help="print the model for a results file and exit")
    parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.model_from:
        with open(args.model_from) as f:
            print_model(model(json.load(f)))
        return 0
    if args.child:
        print(json.dumps(body(*args.child, args)), flush=True)
        return 0
    runs = {}
    for processes in args.processes:
        per_process = run_processes(__file__, processes, lambda i, port: [
            "--child", str(i), str(processes), str(port), "--cases", *args.cases,
            "--steps", str(args.steps), "--repeats", str(args.repeats)], timeout=args.timeout)
        runs[str(processes)] = per_process
        for name in args.cases:
            rates = [r[name]["gb_per_s_per_process"] for r in per_process]
            line = " | ".join(f"{n} {sum(r[n] for r in rates):.3f}" for n in rates[0])
            print(f"P={processes} case {name}: in scan, total GB/s over processes: {line}",
                  flush=True)
            rates = [r[name]["eager"]["gb_per_s_per_process"] for r in per_process]
            line = " | ".join(f"{n} {sum(r[n] for r in rates):.3f}" for n in rates[0])
            print(f"P={processes} case {name}: eager calls, total GB/s over processes: {line}",
                  flush=True)
    summary = {}
    for name in args.cases:
        one = runs.get("1")
        for processes, per_process in runs.items():
            total = sum(r[name]["gb_per_s_per_process"]["global"] for r in per_process)
            entry = summary.setdefault(name, {})[processes] = {
                "global_total_gb_per_s": total,
                "local_total_gb_per_s": sum(r[name]["gb_per_s_per_process"]["local"]
                                            for r in per_process),
            }
            if one is not None:
                base = one[0][name]["gb_per_s_per_process"]["global"]
                entry["scaling_efficiency"] = total / (int(processes) * base)
    for name, by_p in summary.items():
        for processes, entry in by_p.items():
            print(f"case {name}, P={processes}: global {entry['global_total_gb_per_s']:.3f} GB/s "
                  f"in total, local {entry['local_total_gb_per_s']:.3f} GB/s"
                  + (f", scaling efficiency {entry['scaling_efficiency']:.2f}"
                     if "scaling_efficiency" in entry else ""), flush=True)
    import jax

    result = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                          "python": platform.python_version(), "jax": jax.__version__},
              "settings": {"processes": args.processes, "cases": args.cases,
                           "steps": args.steps, "repeats": args.repeats},
              "cases": {n: dict(zip(["batch", "window", "step_shape", "dtype",
                                     "trajectories_per_shard", "length"], CASES[n]))
                        for n in args.cases},
              "runs": runs, "summary": summary}
    if "2" in runs:
        result["model"] = model(result)
        print_model(result["model"])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
