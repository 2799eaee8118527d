"""GPU benchmark for gearjax, every section in one run, each printed as it comes.

1. ceilings: with CuPy, a pinned host-to-device copy and a device-to-device
   copy (bytes counted once, and read plus written).
2. per_step: where a small sample's time goes, 1 KiB windows at batch 32 and
   1024 from a device and a host table: one sample per step of a jitted
   lax.scan, for gearjax, a pure-JAX random gather of the same bytes from a
   device array (Flashbax's way) and Flashbax's trajectory buffer; and one
   jitted call dispatched from Python (the table-state form) against a
   jitted pure-JAX gather.
2b. host_selected: what a sample that selects on the host (TopK, Recent,
   replace=False, cut="full") costs a scan step, batch 32 of 1 KiB windows,
   against the same sample of Uniform, selected on the GPU.
3. gather_host / gather_device / pure_jax / flashbax: bandwidth across window
   sizes (1 KiB to 1 MiB) and batches (32 to 4096), sampled inside jax.jit,
   against the pinned and the device-to-device ceilings.
4. selection: Uniform and Prioritized selection of B=1024 over N trajectories
   (10^5, 10^6, and 10^7 with --with-1e7; filled by insert_batch) and a
   priority update of 1024 keys, each in a scan.
5. prioritized: a prioritized sample and update of 256 at 10^6 in one scan
   step, against Flashbax's prioritised buffer on the GPU.
6. big: a host table larger than GPU memory (as large as 1.25 x the card
   where host memory allows, else 0.75 x host memory: the result says which)
   sampled inside jit.

--quick runs what scripts/gpu_summary.py sets against the GPU goals, with
their references, at a quick size (scripts/gpu_check.sh's goal_bench stage):
the ceilings; per_step on the device table (the host table where there is no
GPU); gather on both placements and pure_jax at windows of 4, 16, 64 and
1024 KiB and batches 32 and 1024 from a 1 GiB table; selection and update at
10^7 only; prioritized (against Flashbax). It leaves out host_selected, the
flashbax gather section and the big table (whose fill alone takes minutes).
Without --quick nothing changes.

Timing: each measurement runs a jitted lax.scan of --steps samples (so Python
dispatch is paid once per scan, not per sample), repeated --repeats times after
a warm-up; the median per-sample time is reported. Every byte of each sample
feeds the scan carry through a sum (the same for every system): consuming one
element, even behind jax.lax.optimization_barrier, let XLA skip most of a
pure-JAX gather (measured on the CPU: the same time for 64 KB and 1 MB
batches), while a custom call always writes its whole batch. On a GPU the sum
re-reads the batch from HBM, which is cheap next to the gather it follows.

The results file is rewritten after every section, so a run cut short keeps
what it measured. Run on a GPU machine (results name the device, driver, CUDA
and jax versions):

    python scripts/bench_gpu.py --with-1e7 --out benchmarks/results/bench_gpu_h100.json
    python scripts/bench_gpu.py --quick --out benchmarks/results/bench_gpu_quick_h100.json

`--smoke` shrinks every size so the script's logic can be checked anywhere; on a
machine without a GPU it runs the gearjax, pure-JAX and Flashbax sections on
the CPU and skips the CuPy ceilings. Smoke numbers are not results.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

import gearjax as gx
from gearjax import _gearjax

# Its helpers beside it, also under python -P (which leaves the script's
# folder off sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gpu_bench_common import (GIB, KIB, MIB, WINDOW_STEPS, case_steps,  # noqa: E402
                               consume, gather_cases, median_seconds, pure_jax_scan,
                               stored_trajectories)
from _gpu_bench_references import flashbax, flashbax_prioritized, pure_jax  # noqa: E402
from _machine import machine_info  # noqa: E402


def scan_sampler(table: gx.Table, batch: int, window: int, strategy: gx.Strategy, steps: int):
    """A jitted function running `steps` samples in one lax.scan."""

    def body(carry, key):
        total, state = carry
        state, out = table.sample(state, key, batch, window, strategy)
        return (total + consume(next(iter(out.columns.values()))), state), None

    @jax.jit
    def run(key):
        (total, _), _ = jax.lax.scan(body, (jnp.uint32(0), table.state()),
                                     jax.random.split(key, steps))
        return total

    return run


def fill(table: gx.Table, count: int, length: int, step_bytes: int, seed: int = 0) -> None:
    """Inserts `count` random, non-zero trajectories (views of one block)."""
    rng = np.random.default_rng(seed)
    block = rng.integers(1, 256, size=(min(count, 64), length, step_bytes), dtype=np.uint8)
    for i in range(count):
        table.insert({"x": block[i % len(block)]})


# ---------------------------------------------------------------------- sections
def machine() -> dict:
    info = machine_info(
        ("cupy-cuda13x",),
        timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(),
        jax=jax.__version__,
        devices=[f"{d.platform}:{d.device_kind}" for d in jax.devices()],
        gearjax_cuda_built=bool(_gearjax.cuda_built),
        gearjax_cuda_memory=bool(_gearjax.cuda_memory),
        host_memory_bytes=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    try:
        import cupy

        rt = cupy.cuda.runtime
        info.update(cuda_driver=rt.driverGetVersion(), cuda_runtime=rt.runtimeGetVersion(),
                    gpu=rt.getDeviceProperties(0)["name"].decode(),
                    gpu_memory_bytes=rt.memGetInfo()[1])
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        info["cupy"] = f"unavailable: {type(e).__name__}: {e}"
    return info


def ceilings(args) -> dict:
    import cupy
    import cupyx

    n = 16 * MIB if args.smoke else 1 * GIB
    host = cupyx.empty_pinned((n,), dtype=np.uint8)
    host[:] = 1
    dev_a, dev_b = cupy.empty(n, np.uint8), cupy.empty(n, np.uint8)

    def timed(copy) -> float:
        copy()
        cupy.cuda.Device().synchronize()
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        times = []
        for _ in range(args.repeats):
            start.record()
            copy()
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
        return float(np.median(times))

    h2d = timed(lambda: dev_a.set(host))
    d2d = timed(lambda: cupy.copyto(dev_b, dev_a))
    # A gather's rate counts each byte once (read from the table, written to the
    # batch), as d2d_copy_GBps does; read_plus_write is the HBM traffic.
    result = {"bytes": n, "pinned_h2d_GBps": n / h2d / 1e9, "d2d_copy_GBps": n / d2d / 1e9,
              "d2d_read_plus_write_GBps": 2 * n / d2d / 1e9}
    print(f"  pinned host-to-device copy {result['pinned_h2d_GBps']:7.2f} GB/s, device-to-device "
          f"copy {result['d2d_copy_GBps']:7.2f} GB/s (read + write "
          f"{result['d2d_read_plus_write_GBps']:7.2f})", flush=True)
    return result


def gather(args, placement: str, ceiling_gbps: float | None) -> list[dict]:
    length = 64
    rows = []
    cases = gather_cases(args)
    for window_bytes in sorted({w for w, _ in cases}):
        step = window_bytes // WINDOW_STEPS
        capacity = stored_trajectories(args, window_bytes, length)
        table = gx.Table({"x": gx.Column((step,), "uint8")}, capacity=capacity, max_length=length,
                         placement=placement)
        try:
            fill(table, capacity, length, step)
            for batch in [b for w, b in cases if w == window_bytes]:
                steps = case_steps(args, batch * window_bytes)
                run = scan_sampler(table, batch, WINDOW_STEPS, gx.Uniform(), steps)
                t = median_seconds(lambda: run(jax.random.key(1)), args.repeats) / steps
                gbps = batch * window_bytes / t / 1e9
                rows.append({"window_bytes": window_bytes, "batch": batch, "seconds": t,
                             "GBps": gbps, "memory": table.stats()["memory"],
                             "of_ceiling": gbps / ceiling_gbps if ceiling_gbps else None})
                print(f"  {placement} gather window {window_bytes // KIB:5d} KiB batch {batch:5d}: "
                      f"{t * 1e6:9.1f} us  {gbps:7.2f} GB/s", flush=True)
        finally:
            table.close()
    return rows


def small_windows(args) -> np.ndarray:
    """The trajectories of the small-sample sections (per_step,
    host_selected): 4096 (smoke: 256) of 16 steps of 64 bytes, so a whole
    trajectory is one 1 KiB window."""
    count, length, step = (256 if args.smoke else 4096), 16, 64
    return np.random.default_rng(0).integers(1, 255, (count, length, step), dtype=np.uint8)


def per_step_placements(quick: bool, gpu: bool) -> list[str]:
    """Both where there is a GPU; --quick: only the device table the goals
    are about (the host table where there is no GPU, so the section still
    runs)."""
    if quick:
        return ["device"] if gpu else ["host"]
    return ["host"] + (["device"] if gpu else [])


def per_step(args) -> dict:
    """Where a small sample's time goes (module docstring, section 2)."""
    block = small_windows(args)
    count, length, step = block.shape
    data = jnp.asarray(block)
    out: dict = {}
    placements = per_step_placements(args.quick, _gearjax.gpu_free_bytes() is not None)
    for placement in placements:
        table = gx.Table({"x": gx.Column((step,), "uint8")}, capacity=count, max_length=length,
                         placement=placement)
        try:
            table.insert_batch({"x": block}, np.full(count, length))
            for batch in (32, 1024):
                row: dict = {}
                run = scan_sampler(table, batch, length, gx.Uniform(), args.steps)
                row["gearjax_scan_step_s"] = median_seconds(
                    lambda: run(jax.random.key(1)), args.repeats) / args.steps
                pure = pure_jax_scan(data, batch, length, args.steps)
                row["pure_jax_scan_step_s"] = median_seconds(
                    lambda: pure(jax.random.key(1)), args.repeats) / args.steps
                state = table.state()
                state_form = jax.jit(lambda s, k: table.sample(s, k, batch, length))
                gather = jax.jit(lambda d, k: d[jax.random.randint(k, (batch,), 0, count)])
                calls = 20 if args.smoke else 200
                row["call_state_form_s"] = median_seconds(
                    lambda: state_form(state, jax.random.key(2))[1]["x"], calls)
                row["call_pure_jax_s"] = median_seconds(lambda: gather(data, jax.random.key(2)),
                                                        calls)
                row["scan_step_over_pure_jax"] = (row["gearjax_scan_step_s"]
                                                  / row["pure_jax_scan_step_s"])
                row["call_over_pure_jax"] = row["call_state_form_s"] / row["call_pure_jax_s"]
                out[f"{placement}_B{batch}"] = row
                print(f"  {placement} B={batch:4d}: scan step gearjax "
                      f"{row['gearjax_scan_step_s'] * 1e6:7.1f} us, pure JAX "
                      f"{row['pure_jax_scan_step_s'] * 1e6:7.1f} us "
                      f"({row['scan_step_over_pure_jax']:.2f}x); one call: state form "
                      f"{row['call_state_form_s'] * 1e6:7.1f} us, pure JAX "
                      f"{row['call_pure_jax_s'] * 1e6:7.1f} ({row['call_over_pure_jax']:.2f}x)",
                      flush=True)
        finally:
            table.close()
    return out


HOST_SELECTED = {  # what selects on the host in a CUDA build, and the GPU-selected reference
    "Uniform (GPU-selected)": (gx.Uniform(), {}),
    "TopK(64)": (gx.TopK(64), {}),
    "Recent(64)": (gx.Recent(64), {}),
    "Uniform, replace=False": (gx.Uniform(), {"replace": False}),
    "Uniform, cut='full'": (gx.Uniform(), {"cut": "full"}),
}


def host_selected(args) -> dict:
    """What a sample that selects on the host costs on the GPU (docs:
    Strategies, "Where selection runs"): batch 32 of 1 KiB windows from a
    device table (else a host one), one sample per step of a jitted scan,
    against the same sample selected on the GPU."""
    block = small_windows(args)
    count, length, step = block.shape
    placement = "device" if _gearjax.gpu_free_bytes() is not None else "host"
    out: dict = {"placement": placement, "batch": 32, "window_bytes": length * step}
    table = gx.Table({"x": gx.Column((step,), "uint8")}, capacity=count, max_length=length,
                     placement=placement)
    try:
        table.insert_batch({"x": block}, np.full(count, length))
        for name, (strategy, options) in HOST_SELECTED.items():
            def body(carry, key, strategy=strategy, options=options):
                total, state = carry
                state, batch = table.sample(state, key, 32, length, strategy, **options)
                return (total + consume(batch["x"]), state), None

            run = jax.jit(lambda key, body=body: jax.lax.scan(
                body, (jnp.uint32(0), table.state()), jax.random.split(key, args.steps))[0][0])
            seconds = median_seconds(lambda: run(jax.random.key(1)), args.repeats) / args.steps
            out[name] = {"scan_step_s": seconds}
        reference = out["Uniform (GPU-selected)"]["scan_step_s"]
        for name in HOST_SELECTED:
            out[name]["over_gpu_selected"] = out[name]["scan_step_s"] / reference
            print(f"  {name:24s} {out[name]['scan_step_s'] * 1e6:8.1f} us a step "
                  f"({out[name]['over_gpu_selected']:.2f}x GPU-selected Uniform)", flush=True)
    finally:
        table.close()
    return out


def fill_one_step(table: gx.Table, n: int, rng: np.random.Generator) -> None:
    """n one-step trajectories with priorities in [0.1, 10), by insert_batch in
    chunks (one Python insert each took over 5 minutes for 10^7 on the first
    GPU run)."""
    chunk = 1 << 18
    for first in range(0, n, chunk):
        m = min(chunk, n - first)
        table.insert_batch({name: np.ones((m, 1, *c.shape), c.dtype)
                            for name, c in table.columns.items()},
                           np.ones(m, np.int32), rng.uniform(0.1, 10.0, m).astype(np.float32))


def selection_sizes(args) -> list[int]:
    """Trajectories selected over: --quick only the goal's 10^7."""
    if args.smoke:
        return [4096]
    if args.quick:
        return [10**7]
    return [10**5, 10**6] + ([10**7] if args.with_1e7 else [])


def selection_and_update(args) -> list[dict]:
    sizes = selection_sizes(args)
    rows = []
    for n in sizes:
        table = gx.Table({"x": gx.Column((), "uint8")}, capacity=n, max_length=1)
        try:
            rng = np.random.default_rng(0)
            start = time.perf_counter()
            fill_one_step(table, n, rng)
            # On a device table the trees the GPU draws from and updates are
            # copies in GPU memory (core/gpu/tree_mirror.h); on a host table the
            # mapped host trees.
            row = {"n": n, "fill_seconds": time.perf_counter() - start,
                   "placement": table.placement}
            for name, strategy in (("uniform", gx.Uniform()), ("prioritized", gx.Prioritized(1.0))):
                run = scan_sampler(table, 1024, 1, strategy, args.steps)
                row[f"select_{name}_seconds"] = (
                    median_seconds(lambda: run(jax.random.key(2)), args.repeats) / args.steps)
            keys = jnp.asarray(rng.choice(n, 1024, replace=False), jnp.int32)

            @jax.jit
            def update(k, keys=keys):
                def body(carry, kk):
                    total, state = carry
                    new = jax.random.uniform(kk, (1024,), minval=0.1, maxval=10.0)
                    state, count = table.update_priorities(state, keys, new)
                    return (total + count, state), None
                return jax.lax.scan(body, (0, table.state()),
                                    jax.random.split(k, args.steps))[0][0]

            row["update_seconds"] = median_seconds(lambda: update(jax.random.key(3)),
                                                   args.repeats) / args.steps
            rows.append(row)
            print(f"  N={n:>9d} ({row['placement']}): select uniform {row['select_uniform_seconds'] * 1e6:8.1f} us, "
                  f"prioritized {row['select_prioritized_seconds'] * 1e6:8.1f} us, "
                  f"update {row['update_seconds'] * 1e6:8.1f} us", flush=True)
        finally:
            table.close()
    return rows


def prioritized(args) -> dict:
    """A prioritized sample and update of 256 at N per scan step (section 5)."""
    n, batch = (4096 if args.smoke else 10**6), 256
    result: dict = {"n": n, "batch": batch}
    table = gx.Table({"x": gx.Column((), "float32")}, capacity=n, max_length=1)
    result["placement"] = table.placement
    try:
        fill_one_step(table, n, np.random.default_rng(0))

        @jax.jit
        def run(key):
            def step(carry, k):
                total, state = carry
                state, b = table.sample(state, k, batch, 1, gx.Prioritized(0.6))
                state, _ = table.update_priorities(state, b.keys, b["x"][:, 0] + 0.5)
                return (total + b["x"].sum(), state), None
            return jax.lax.scan(step, (0.0, table.state()), jax.random.split(key, args.steps))[0][0]

        result["gearjax_seconds"] = median_seconds(lambda: run(jax.random.key(0)),
                                                   args.repeats) / args.steps
    finally:
        table.close()
    print(f"  gearjax prioritized sample + update of {batch} at N={n}: "
          f"{result['gearjax_seconds'] * 1e6:.1f} us", flush=True)
    result.update(flashbax_prioritized(args, n, batch, result["gearjax_seconds"]))
    return result

def big_table_bytes(gpu_bytes: int | None, host_bytes: int) -> tuple[int, str]:
    """The big table's size: 1.25 x the card where 0.75 x host memory allows
    it, else 0.75 x host memory; and why."""
    room = int(0.75 * host_bytes)
    if not gpu_bytes:
        return room, "no GPU memory size known: 0.75 x host memory"
    if 1.25 * gpu_bytes <= room:
        return int(1.25 * gpu_bytes), "1.25 x GPU memory"
    if room > gpu_bytes:
        return room, "0.75 x host memory (more than GPU memory, less than 1.25 x)"
    return room, "0.75 x host memory, which is not more than GPU memory: not larger than the card"


def big_table(args, info: dict) -> dict:
    gpu_bytes = info.get("gpu_memory_bytes")
    host_bytes = info["host_memory_bytes"]
    if args.smoke:
        target, why = 64 * MIB, "smoke"
    elif args.big_table_gb:
        target, why = int(args.big_table_gb * GIB), "--big-table-gb"
    else:
        target, why = big_table_bytes(gpu_bytes, host_bytes)
    step, length = 4096, 256  # 1 MiB a slot
    capacity = max(2, target // (step * length))
    table = gx.Table({"x": gx.Column((step,), "uint8")}, capacity=capacity, max_length=length,
                     placement="host")
    try:
        start = time.perf_counter()
        fill(table, capacity, length, step)
        fill_seconds = time.perf_counter() - start
        batch = 64 if args.smoke else 1024
        steps = case_steps(args, batch * WINDOW_STEPS * step)
        run = scan_sampler(table, batch, WINDOW_STEPS, gx.Uniform(), steps)
        t = median_seconds(lambda: run(jax.random.key(4)), args.repeats) / steps
        result = {"table_bytes": capacity * step * length, "sized_by": why,
                  "gpu_memory_bytes": gpu_bytes,
                  "larger_than_gpu_memory": bool(gpu_bytes
                                                 and capacity * step * length > gpu_bytes),
                  "fill_seconds": fill_seconds, "batch": batch, "window_bytes": WINDOW_STEPS * step,
                  "seconds": t, "GBps": batch * WINDOW_STEPS * step / t / 1e9,
                  "memory": table.stats()["memory"]}
        print(f"  big table {result['table_bytes'] / GIB:.1f} GiB: {t * 1e6:.1f} us per sample, "
              f"{result['GBps']:.2f} GB/s", flush=True)
        return result
    finally:
        table.close()


ALL_SECTIONS = "ceilings,per_step,host_selected,gather,pure_jax,flashbax,selection,prioritized,big"
# What gpu_summary.py's goal rows read, with their references (--quick).
QUICK_SECTIONS = "ceilings,per_step,gather,pure_jax,selection,prioritized"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parents[1] / "benchmarks" / "results"
                        / "bench_gpu.json")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes; checks the script only")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="samples per timed scan")
    parser.add_argument("--table-gb", type=float, default=None,
                        help="table size for the gather (default 2; 1 with --quick)")
    parser.add_argument("--big-table-gb", type=float, default=None)
    parser.add_argument("--with-1e7", action="store_true", help="also select over 10^7 items")
    parser.add_argument("--quick", action="store_true",
                        help="the goal rows and their references only, at a quick size")
    parser.add_argument("--sections", default=None,
                        help="comma-separated; 'gather' runs both placements (default: all; "
                             "with --quick: " + QUICK_SECTIONS + ")")
    args = parser.parse_args(argv)
    if args.table_gb is None:
        args.table_gb = 1.0 if args.quick else 2.0
    if args.sections is None:
        args.sections = QUICK_SECTIONS if args.quick else ALL_SECTIONS
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    info = machine()
    print(json.dumps(info, indent=1), flush=True)
    results: dict = {"machine": info, "args": vars(args) | {"out": str(args.out)},
                     "smoke": args.smoke, "quick": args.quick}
    sections = args.sections.split(",")
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def run(name: str, section: str, fn: Callable[[], object]) -> None:
        if section not in sections:
            return
        print(f"{name}:", flush=True)
        start = time.perf_counter()
        try:
            results[name] = fn()
        except Exception as e:  # noqa: BLE001 - record, keep going
            results[name] = {"error": f"{type(e).__name__}: {e}",
                             "traceback": traceback.format_exc(limit=4)}
            print(f"  {name} failed: {type(e).__name__}: {e}", flush=True)
        results.setdefault("section_seconds", {})[name] = time.perf_counter() - start
        args.out.write_text(json.dumps(results, indent=1))  # a cut-short run keeps this much

    run("ceilings", "ceilings", lambda: ceilings(args))
    ceiling = results.get("ceilings", {})
    run("per_step", "per_step", lambda: per_step(args))
    run("host_selected", "host_selected", lambda: host_selected(args))
    run("gather_host", "gather", lambda: gather(args, "host", ceiling.get("pinned_h2d_GBps")))
    if _gearjax.gpu_free_bytes() is not None:  # device tables need a GPU
        run("gather_device", "gather",
            lambda: gather(args, "device", ceiling.get("d2d_copy_GBps")))
    run("pure_jax", "pure_jax", lambda: pure_jax(args, ceiling.get("d2d_copy_GBps")))
    run("flashbax", "flashbax", lambda: flashbax(args))
    run("selection", "selection", lambda: selection_and_update(args))
    run("prioritized", "prioritized", lambda: prioritized(args))
    run("big", "big", lambda: big_table(args, info))
    print(f"results written to {args.out}")


if __name__ == "__main__":
    main()
