"""The xla exchange against the number of shards P, on one machine: P host
devices of one process stand in for P processes (``gearjax.sharded.local``:
one gearjax.Table per device, the exchange's program in ``shard_map``).

    python scripts/bench_exchange_scaling.py                 # P = 2 ... 64
    python scripts/bench_exchange_scaling.py --shards 2 4 --calls 5 --out /tmp/x.json

For each P a worker process starts with ``--xla_force_host_platform_device_count=P``
and fills P shards of equal size (``--trajectories`` each). Two shard masses:
``equal`` (Uniform) and ``10:1`` (Prioritized(1.0), the first half of the
shards holding trajectories of priority 10, the rest 1). For each batch size
B and mass, two block policies take turns call by call:

* ``bucketed``: the exchange as shipped, the smallest compiled block that
  holds the plan (B/P growing by 1.1x up to the cap, about 3 B / P rows;
  plans above it move in rounds);
* ``full``: every block B rows (``max_block=min_block=B``), what the
  exchange moved before the buckets and the cap.

Each P's worker runs ``--repeats`` times, in rounds over every P (the order
of P reversed every other round), so that a slow spell of the machine lands on
different P in different rounds; a case's time is the median over its repeats
of each repeat's median call (the repeats' medians are recorded too).

Recorded per case: the median seconds per global sample (dispatch included,
blocked on), useful GB/s over the machine (P x B windows delivered), bytes
moved per useful byte and how often each block size ran, both as counted by
the owners (``Table.exchange_stats``), and the temporary memory XLA plans for
each device's program (``memory_analysis``).

The bytes model: what a global sample does, each at its own cost,

    T = t_call + P t_dev + P^2 t_pair + P^2 B t_draw + bytes / R:

one dispatch of the program (t_call), one program a device (t_dev), one
all-to-all chunk from every device to every device (t_pair), the plan's
draws (every device draws every process's plan: P x B shard draws a device,
P^2 x B over the machine; gearjax/sharded/exchange.py) and the bytes the
all-to-all moves over one machine-wide rate R. One model for every batch size
and mass, fitted by least squares (relative: every case weighs alike) to the
shipped exchange's cases (bucketed, both masses, every P and B: the two batch
sizes are what tell t_pair from t_draw); the report gives each case's measured
time over the model's, the full-block cases included. On this 2-core machine every device shares the
same 2 cores, so the curve is the machine's total throughput against P, not
a cluster's. The workers run with glibc malloc told to keep freed memory
(KEEP_MEMORY; ``--system-malloc`` for the defaults), so that page faults of
XLA:CPU's per-call buffers do not swamp the exchange's own costs.

    python scripts/bench_exchange_scaling.py --report-from RESULTS.json

fits and reports an earlier run's measurements again (and rewrites its
report, JSON and plot beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import cpu_model, version_of, write_results  # noqa: E402

WINDOW = 20
STEP = (17,)  # float32 per step: case A's windows of bench_sample (1360 bytes a window)
LENGTH = 100


def worker(shards: int, batches: list[int], calls: int, trajectories: int,
           full_limit_bytes: float, memory_analysis: bool) -> dict:
    import jax

    import gearjax as gx
    from gearjax.sharded import exchange, local

    assert jax.device_count() == shards, jax.devices()
    tables = local.shard_tables({"obs": gx.Column(STEP, "float32")}, capacity=trajectories,
                                max_length=LENGTH, shards=shards)
    rng = np.random.default_rng(0)
    for k, table in enumerate(tables):
        heavy = k < max(1, shards // 2)
        obs = rng.standard_normal((trajectories, LENGTH, *STEP)).astype(np.float32)
        table.insert_many([{"obs": o} for o in obs], priorities=[10.0 if heavy else 1.0]
                          * trajectories)
    row_bytes = WINDOW * int(np.prod(STEP)) * 4
    out = {"shards": shards, "row_bytes": row_bytes, "cases": []}
    keys = iter(jax.random.split(jax.random.key(1), 100_000))
    for batch in batches:
        for mass, strategy in (("equal", gx.Uniform()), ("10:1", gx.Prioritized(1.0))):
            begin = time.perf_counter()
            seeds = [np.asarray(jax.random.key_data(jax.random.split(next(keys), shards)))
                     for _ in range(calls + 3)]
            # policy -> (program, min_block)
            policies = {"bucketed": (local.sample_program(tables, batch, WINDOW, strategy), 0),
                        "full": (local.sample_program(tables, batch, WINDOW, strategy,
                                                      max_block=batch), batch)}
            if shards * shards * batch * row_bytes > full_limit_bytes:
                # Every device would hold P x B rows twice over (sent and received).
                del policies["full"]
                moved = shards * shards * batch * row_bytes / 1e9
                out["cases"].append({"batch": batch, "mass": mass, "policy": "full",
                                     "skipped": f"moves {moved:.1f} GB a sample, over "
                                                f"--full-limit-gb"})
            temp_bytes = {}
            for policy, (program, min_block) in policies.items():  # compile, warm up
                if memory_analysis:
                    temp_bytes[policy] = program.lower(seeds[0], min_block).compile() \
                        .memory_analysis().temp_size_in_bytes
                jax.block_until_ready(program(seeds[0], min_block))
            compile_seconds = time.perf_counter() - begin
            times = {p: [] for p in policies}
            # Take turns call by call; the owners' counters are read around
            # each call.
            sums = {p: {"rows_asked": 0, "rows_sent": 0, "by_block": {}} for p in policies}
            for i in range(calls):
                turns = list(policies) if i % 2 == 0 else list(policies)[::-1]
                for policy in turns:
                    before = [t._native.exchange_stats() for t in tables]
                    start = time.perf_counter()
                    program, min_block = policies[policy]
                    jax.block_until_ready(program(seeds[i + 1], min_block))
                    times[policy].append(time.perf_counter() - start)
                    after = [t._native.exchange_stats() for t in tables]
                    s = sums[policy]
                    for b, a in zip(before, after):
                        s["rows_asked"] += a["rows_asked"] - b["rows_asked"]
                        s["rows_sent"] += a["rows_sent"] - b["rows_sent"]
                        for block, n in a["serves_by_block"].items():
                            grown = n - b["serves_by_block"].get(block, 0)
                            if grown:
                                s["by_block"][block] = s["by_block"].get(block, 0) + grown
            for policy in policies:
                s = sums[policy]
                assert s["rows_asked"] == calls * shards * batch, s
                median = float(np.median(times[policy]))
                out["cases"].append({
                    "batch": batch, "mass": mass, "policy": policy,
                    "median_seconds": median, "seconds": times[policy],
                    "useful_gb_per_s": shards * batch * row_bytes / median / 1e9,
                    "moved_per_useful": s["rows_sent"] / s["rows_asked"],
                    "bytes_moved_per_sample": s["rows_sent"] * row_bytes / calls,
                    # block size -> calls (each call serves once per shard)
                    "calls_by_block": {str(k): v // shards for k, v in
                                       sorted(s["by_block"].items())},
                    "block_sizes": list(exchange.block_sizes(
                        batch, shards, batch if policy == "full" else None)),
                    "temp_bytes_per_device": temp_bytes.get(policy),
                    "compile_seconds": compile_seconds})
    for table in tables:
        table.close()
    return out


def merge_repeats(repeats: list[dict], shards: list[int], row_bytes: int) -> list[dict]:
    """One case per (P, B, mass, policy) from every repeat's worker output: the
    median over repeats of each repeat's median call, every call's p10 and
    p90, the repeats' medians and compile times; the counted bytes and blocks
    are the first repeat's (the same seeds make the same plans every time,
    which this checks)."""
    merged = []
    for p in shards:
        for i, case in enumerate(repeats[0][p]):
            same = [r[p][i] for r in repeats]
            assert all((c["batch"], c["mass"], c["policy"]) ==
                       (case["batch"], case["mass"], case["policy"]) for c in same)
            if "skipped" in case:
                merged.append({"shards": p, **case})
                continue
            assert all(c["bytes_moved_per_sample"] == case["bytes_moved_per_sample"]
                       for c in same), "the same seeds drew different plans"
            medians = [c["median_seconds"] for c in same]
            calls = np.concatenate([c["seconds"] for c in same])
            median = float(np.median(medians))
            merged.append({
                "shards": p, **{k: v for k, v in case.items() if k != "seconds"},
                "median_seconds": median,
                "repeat_median_seconds": medians,
                "p10_seconds": float(np.quantile(calls, 0.1)),
                "p90_seconds": float(np.quantile(calls, 0.9)),
                "useful_gb_per_s": p * case["batch"] * row_bytes / median / 1e9,
                "compile_seconds": [c["compile_seconds"] for c in same]})
    return merged


def _model_terms(cases: list[dict]) -> np.ndarray:
    return np.array([[1.0, c["shards"], c["shards"] ** 2, c["shards"] ** 2 * c["batch"],
                      c["bytes_moved_per_sample"]] for c in cases], float)


def fit_model(cases: list[dict]) -> dict:
    """T = t_call + P t_dev + P^2 t_pair + P^2 B t_draw + bytes / R by
    relative least squares over the bucketed cases of `cases`; returns the
    coefficients (seconds; R in GB/s, None unless positive) and every case's
    measured / model."""
    fitted = [c for c in cases if c["policy"] == "bucketed"]
    t = np.array([c["median_seconds"] for c in fitted])
    a = _model_terms(fitted) / t[:, None]
    scale = np.abs(a).max(axis=0)  # columns of like size, for a well-posed solve
    scale[scale == 0] = 1.0
    solution, *_ = np.linalg.lstsq(a / scale, np.ones_like(t), rcond=None)
    coefficients = solution / scale
    model = _model_terms(cases) @ coefficients
    measured = np.array([c["median_seconds"] for c in cases])
    t_call, t_dev, t_pair, t_draw, inverse_rate = (float(x) for x in coefficients)
    return {"t_call_seconds": t_call, "t_dev_seconds": t_dev, "t_pair_seconds": t_pair,
            "t_draw_seconds": t_draw,
            "rate_gb_per_s": 1 / inverse_rate / 1e9 if inverse_rate > 0 else None,
            "measured_over_model": [float(x) for x in measured / model]}


# glibc malloc settings for the workers (unless --system-malloc): keep freed
# memory in the process instead of handing it back to the kernel. XLA:CPU
# allocates each program's temporary buffers on every call (up to 17 MB a
# device here, about 1 GB over 64 devices); by default glibc maps large ones
# fresh and unmaps them when freed, so every call pays page faults over them,
# and how much depends on what ran before (P = 64, B = 1024: 282-346 ms a
# sample in the committed runs with the defaults, 142-172 ms with these
# settings). What any user of XLA:CPU with large per-call buffers may set.
KEEP_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(2**31 - 1),
               "MALLOC_TRIM_THRESHOLD_": str(2**34), "MALLOC_TOP_PAD_": str(2**30)}


def run_worker(shards: int, args, first_round: bool) -> dict:
    """Runs one worker at P = `shards`; only the first round's workers ask XLA
    for memory_analysis (the same programs plan the same memory every round,
    and it costs one more compile each)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={shards}")
    if not args.system_malloc:
        env.update(KEEP_MEMORY)
    if args.compilation_cache is not None:
        # JAX's persistent cache: a later round's worker loads the programs the
        # first round's compiled (every P compiles the same programs each round).
        env.update(JAX_COMPILATION_CACHE_DIR=args.compilation_cache,
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    done = subprocess.run([sys.executable, __file__, "--worker", str(shards), "--batches",
                           *map(str, args.batches), "--calls", str(args.calls),
                           "--trajectories", str(args.trajectories),
                           "--full-limit-gb", str(args.full_limit_gb),
                           *([] if first_round else ["--no-memory-analysis"])],
                          env=env, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        raise RuntimeError(f"P={shards} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _spread(case: dict) -> str:
    """The repeats' median times, lowest to highest, in ms."""
    medians = case.get("repeat_median_seconds", [case["median_seconds"]])
    return f"{min(medians) * 1e3:.2f}-{max(medians) * 1e3:.2f}"


def _malloc_text(malloc) -> str:
    return "glibc defaults" if malloc == "system" else \
        " ".join(f"{k}={v}" for k, v in malloc.items())


def _repeats_text(config: dict) -> str:
    repeats = config.get("repeats", 1)  # runs before --repeats had one
    if repeats == 1:
        return f"median of {config['calls']} calls a case"
    return (f"median over {repeats} repeats (workers, in rounds over P) of each repeat's "
            f"median of {config['calls']} calls a case")


def report(result: dict) -> str:
    m = result["machine"]
    lines = [f"bench_exchange_scaling: {m['cpu_model']}, {m['cores']} cores, python "
             f"{m['python']}, " + ", ".join(f"{p} {v}" for p, v in m["versions"].items()),
             f"windows of {WINDOW} x float32{list(STEP)} ({result['row_bytes']} bytes), "
             f"{result['config']['trajectories']} trajectories of {LENGTH} steps a shard, "
             f"{_repeats_text(result['config'])}; workers' malloc: "
             f"{_malloc_text(result['config'].get('malloc', 'system'))}", ""]
    fit = result["model"]
    rate = (f"bytes / {fit['rate_gb_per_s']:.2f} GB/s" if fit["rate_gb_per_s"] is not None
            else "bytes x (no positive rate fits these times)")
    lines += [f"model T = {fit['t_call_seconds'] * 1e6:.0f} us + P x "
              f"{fit['t_dev_seconds'] * 1e6:.0f} us + P^2 x {fit['t_pair_seconds'] * 1e6:.2f} us"
              f" + P^2 B x {fit['t_draw_seconds'] * 1e9:.1f} ns + {rate}, fitted to the "
              f"bucketed cases of every B: {fit['bucketed_within_20_percent']} of "
              f"{fit['bucketed_cases']} within 20%", ""]
    for batch in result["config"]["batches"]:
        lines.append(f"B = {batch}")
        lines.append(f"  {'P':>3} {'mass':5} {'policy':8} {'ms/sample':>10} {'useful GB/s':>11} "
                     f"{'moved/useful':>12} {'x model':>8} {'repeats ms':>17} {'temp MB':>8}  "
                     f"blocks run (size: serves per shard)")
        for c in result["runs"]:
            if c["batch"] != batch or "skipped" in c:
                continue
            ratio = c["measured_over_model"]
            lines.append(f"  {c['shards']:>3} {c['mass']:5} {c['policy']:8} "
                         f"{c['median_seconds'] * 1e3:10.2f} {c['useful_gb_per_s']:11.3f} "
                         f"{c['moved_per_useful']:12.2f} {ratio:8.2f} "
                         f"{_spread(c):>17} "
                         f"{c['temp_bytes_per_device'] / 1e6:8.1f}  "
                         + ", ".join(f"{k}: {v}" for k, v in c["calls_by_block"].items()))
        for c in result["runs"]:
            if c["batch"] == batch and "skipped" in c:
                lines.append(f"  {c['shards']:>3} {c['mass']:5} {c['policy']:8} skipped: "
                             f"{c['skipped']}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--batches", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--calls", type=int, default=30,
                        help="timed calls a case and policy in each repeat")
    parser.add_argument("--repeats", type=int, default=3,
                        help="workers a P, in rounds over every P")
    parser.add_argument("--trajectories", type=int, default=64, help="a shard")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds a worker")
    parser.add_argument("--full-limit-gb", type=float, default=1.0,
                        help="skip the full policy where a sample would move more")
    parser.add_argument("--system-malloc", action="store_true",
                        help="run the workers with glibc's default malloc settings instead "
                             "of KEEP_MEMORY")
    parser.add_argument("--out", default="benchmarks/results/bench_exchange_scaling_cpu.json")
    parser.add_argument("--plot", action="store_true", help="also write a PNG beside --out")
    parser.add_argument("--compilation-cache", default=None, metavar="DIR",
                        help="the workers share JAX's persistent compilation cache in DIR, so "
                             "rounds after the first load their programs instead of compiling "
                             "them (their compile_seconds are then load times)")
    parser.add_argument("--report-from", default=None, metavar="JSON",
                        help="fit and report the measurements of an earlier run again")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-memory-analysis", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.report_from is not None:
        result = json.loads(Path(args.report_from).read_text())
        return finish(result, result["config"]["batches"], args.report_from, args.plot)
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.batches, args.calls, args.trajectories,
                                args.full_limit_gb * 1e9, not args.no_memory_analysis)))
        return {}

    if args.repeats < 1 or args.calls < 1:
        parser.error("--repeats and --calls must be at least 1")
    result = {"config": {"shards": args.shards, "batches": args.batches, "calls": args.calls,
                         "repeats": args.repeats,
                         "trajectories": args.trajectories, "window": WINDOW,
                         "malloc": "system" if args.system_malloc else KEEP_MEMORY,
                         "step": list(STEP), "length": LENGTH,
                         **({"compilation_cache": args.compilation_cache}
                            if args.compilation_cache is not None else {})},
              "machine": {"platform": platform.platform(), "cpu_model": cpu_model(),
                          "cores": len(os.sched_getaffinity(0)),
                          "python": platform.python_version(),
                          "versions": {p: version_of(p) for p in ("gearjax", "jax", "jaxlib")}},
              "load_average_start": os.getloadavg(), "runs": []}
    repeats = []  # per round: {P: the worker's cases}
    for round_ in range(args.repeats):
        order = args.shards if round_ % 2 == 0 else args.shards[::-1]
        repeats.append({})
        for shards in order:
            run = run_worker(shards, args, round_ == 0)
            result["row_bytes"] = run["row_bytes"]
            repeats[-1][shards] = run["cases"]
            print(f"round {round_ + 1}/{args.repeats}: P={shards} done", file=sys.stderr,
                  flush=True)
    result["runs"] = merge_repeats(repeats, args.shards, result["row_bytes"])
    result["load_average_end"] = os.getloadavg()
    return finish(result, args.batches, args.out, args.plot)


def finish(result: dict, batches: list[int], out: str, plot_too: bool) -> dict:
    """Fits the model to `result`'s runs, prints and writes the report, the
    JSON (and the plot)."""
    cases = [c for c in result["runs"] if c["batch"] in batches and "skipped" not in c]
    fit = fit_model(cases)
    for case, ratio in zip(cases, fit.pop("measured_over_model")):
        case["measured_over_model"] = ratio
    bucketed = [c["measured_over_model"] for c in cases if c["policy"] == "bucketed"]
    result["model"] = {**fit, "bucketed_cases": len(bucketed),
                       "bucketed_within_20_percent": sum(abs(r - 1) <= 0.2 for r in bucketed)}
    text = report(result)
    print(text)
    path = write_results(out, result, text)
    if plot_too:
        plot(result, path.with_suffix(".png"))
    return result


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for batch in result["config"]["batches"]:
        for mass in ("equal", "10:1"):
            for policy, style in (("bucketed", "-"), ("full", ":")):
                cs = [c for c in result["runs"] if c["batch"] == batch and c["mass"] == mass
                      and c["policy"] == policy and "skipped" not in c]
                p = [c["shards"] for c in cs]
                label = f"B={batch}, {mass}, {policy}"
                axes[0].plot(p, [c["moved_per_useful"] for c in cs], style, marker="o",
                             label=label)
                axes[1].plot(p, [c["useful_gb_per_s"] for c in cs], style, marker="o",
                             label=label)
    for ax, title in zip(axes, ("bytes moved per useful byte", "useful GB/s, whole machine")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("shards P (host devices, 2 cores)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
