"""GPU benchmark for gearjax (issue 3), all sections in one run.

1. Ceilings, measured with CuPy: pinned host-to-device copy bandwidth and a
   device-to-device copy (bytes read plus bytes written).
2. gearjax gather bandwidth from host placement (GPU-mapped pinned memory) and
   from device placement (GPU memory) across window sizes (1 KiB to 1 MiB)
   and batches (32 to 4096), sampled inside jax.jit, against the pinned
   host-to-device and the device-to-device ceilings.
3. Flashbax's trajectory-buffer sampling of the same shapes in HBM.
4. Selection time for B=1024 over N trajectories and update time for B=1024.
5. A table larger than GPU memory (when host memory allows) sampled inside jit.

Timing: each measurement runs a jitted lax.scan of --steps samples (so Python
dispatch is paid once per scan, not per sample), repeated --repeats times after
a warm-up; the median per-sample time is reported. Every byte of each sample
feeds the scan carry through a sum (the same for every system): consuming one
element, even behind jax.lax.optimization_barrier, let XLA skip most of a
pure-JAX gather (measured on the CPU: the same time for 64 KB and 1 MB
batches), while a custom call always writes its whole batch. On a GPU the sum
re-reads the batch from HBM, which is cheap next to the gather it follows.

Run on a GPU machine (results name the device, driver, CUDA and jax versions):

    python scripts/bench_gpu.py --out benchmarks/results/bench_gpu_h200.json

`--smoke` shrinks every size so the script's logic can be checked anywhere; on a
machine without a GPU it runs the gearjax and Flashbax sections on the CPU and
skips the CuPy ceilings. Smoke numbers are not results.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
import traceback
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

import gearjax as gx
from gearjax import _gearjax

from _machine import machine_info

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
WINDOW_STEPS = 16  # steps per window; the step size sets the window's bytes


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    jax.block_until_ready(fn())  # compile and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def consume(x: jax.Array) -> jax.Array:
    """Reads every byte of a sampled batch (see the module docstring)."""
    return jnp.sum(x, dtype=jnp.uint32)


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


def stored_trajectories(args, window_bytes: int, length: int) -> int:
    """Trajectories stored for a gather case: the same for gearjax and Flashbax,
    so both read from a table of the same size (--table-gb)."""
    table_bytes = 64 * MIB if args.smoke else args.table_gb * GIB
    step = window_bytes // WINDOW_STEPS
    return int(max(64, min(65536, table_bytes // (length * step))))


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
    return {"bytes": n, "pinned_h2d_GBps": n / h2d / 1e9, "d2d_copy_GBps": n / d2d / 1e9,
            "d2d_read_plus_write_GBps": 2 * n / d2d / 1e9}


def gather(args, placement: str, ceiling_gbps: float | None) -> list[dict]:
    windows = [1 * KIB, 4 * KIB] if args.smoke else [1 * KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB]
    batches = [32, 256] if args.smoke else [32, 256, 1024, 4096]
    length = 64
    rows = []
    for window_bytes in windows:
        step = window_bytes // WINDOW_STEPS
        capacity = stored_trajectories(args, window_bytes, length)
        table = gx.Table({"x": gx.Column((step,), "uint8")}, capacity=capacity, max_length=length,
                         placement=placement)
        try:
            fill(table, capacity, length, step)
            for batch in batches:
                if batch * window_bytes > (64 * MIB if args.smoke else 4 * GIB):
                    continue
                run = scan_sampler(table, batch, WINDOW_STEPS, gx.Uniform(), args.steps)
                t = median_seconds(lambda: run(jax.random.key(1)), args.repeats) / args.steps
                gbps = batch * window_bytes / t / 1e9
                rows.append({"window_bytes": window_bytes, "batch": batch, "seconds": t,
                             "GBps": gbps, "memory": table.stats()["memory"],
                             "of_ceiling": gbps / ceiling_gbps if ceiling_gbps else None})
                print(f"  {placement} gather window {window_bytes // KIB:5d} KiB batch {batch:5d}: "
                      f"{t * 1e6:9.1f} us  {gbps:7.2f} GB/s", flush=True)
        finally:
            table.close()
    return rows


def flashbax(args) -> list[dict]:
    import flashbax as fbx

    windows = [1 * KIB, 4 * KIB] if args.smoke else [1 * KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB]
    batches = [32, 256] if args.smoke else [32, 256, 1024, 4096]
    length, rows = 64, []
    for window_bytes in windows:
        step = window_bytes // WINDOW_STEPS
        count = stored_trajectories(args, window_bytes, length)
        data = jax.random.randint(jax.random.key(0), (count, length, step), 1, 255, jnp.uint8)
        for batch in batches:
            if batch * window_bytes > (64 * MIB if args.smoke else 4 * GIB):
                continue
            buffer = fbx.make_trajectory_buffer(
                add_batch_size=count, sample_batch_size=batch, sample_sequence_length=WINDOW_STEPS,
                period=1, min_length_time_axis=WINDOW_STEPS, max_length_time_axis=length)
            state = buffer.add(buffer.init({"x": data[0, 0]}), {"x": data})

            def body(carry, key, state=state, buffer=buffer):
                return carry + consume(buffer.sample(state, key).experience["x"]), None

            run = jax.jit(lambda key, body=body: jax.lax.scan(
                body, jnp.uint32(0), jax.random.split(key, args.steps))[0])
            t = median_seconds(lambda: run(jax.random.key(1)), args.repeats) / args.steps
            rows.append({"window_bytes": window_bytes, "batch": batch, "seconds": t,
                         "GBps": batch * window_bytes / t / 1e9})
            print(f"  flashbax window {window_bytes // KIB:5d} KiB batch {batch:5d}: "
                  f"{t * 1e6:9.1f} us  {rows[-1]['GBps']:7.2f} GB/s", flush=True)
    return rows


def selection_and_update(args) -> list[dict]:
    sizes = [4096] if args.smoke else [10**5, 10**6] + ([10**7] if args.with_1e7 else [])
    rows = []
    for n in sizes:
        table = gx.Table({"x": gx.Column((), "uint8")}, capacity=n, max_length=1)
        try:
            ones = np.ones(1, np.uint8)
            rng = np.random.default_rng(0)
            for p in rng.uniform(0.1, 10.0, n):
                table.insert({"x": ones}, priority=float(p))
            row = {"n": n}
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
            print(f"  N={n:>9d}: select uniform {row['select_uniform_seconds'] * 1e6:8.1f} us, "
                  f"prioritized {row['select_prioritized_seconds'] * 1e6:8.1f} us, "
                  f"update {row['update_seconds'] * 1e6:8.1f} us", flush=True)
        finally:
            table.close()
    return rows


def big_table(args, info: dict) -> dict:
    gpu_bytes = info.get("gpu_memory_bytes")
    host_bytes = info["host_memory_bytes"]
    if args.smoke:
        target = 64 * MIB
    elif args.big_table_gb:
        target = int(args.big_table_gb * GIB)
    else:
        target = int(min(1.5 * (gpu_bytes or 0), 0.6 * host_bytes))
    step, length = 4096, 256  # 1 MiB a slot
    capacity = max(2, target // (step * length))
    table = gx.Table({"x": gx.Column((step,), "uint8")}, capacity=capacity, max_length=length,
                     placement="host")
    try:
        start = time.perf_counter()
        fill(table, capacity, length, step)
        fill_seconds = time.perf_counter() - start
        batch = 64 if args.smoke else 1024
        run = scan_sampler(table, batch, WINDOW_STEPS, gx.Uniform(), args.steps)
        t = median_seconds(lambda: run(jax.random.key(4)), args.repeats) / args.steps
        result = {"table_bytes": capacity * step * length, "gpu_memory_bytes": gpu_bytes,
                  "larger_than_gpu_memory": bool(gpu_bytes and capacity * step * length > gpu_bytes),
                  "fill_seconds": fill_seconds, "batch": batch, "window_bytes": WINDOW_STEPS * step,
                  "seconds": t, "GBps": batch * WINDOW_STEPS * step / t / 1e9,
                  "memory": table.stats()["memory"]}
        print(f"  big table {result['table_bytes'] / GIB:.1f} GiB: {t * 1e6:.1f} us per sample, "
              f"{result['GBps']:.2f} GB/s", flush=True)
        return result
    finally:
        table.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parents[1] / "benchmarks" / "results"
                        / "bench_gpu.json")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes; checks the script only")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="samples per timed scan")
    parser.add_argument("--table-gb", type=float, default=2.0, help="table size for the gather")
    parser.add_argument("--big-table-gb", type=float, default=None)
    parser.add_argument("--with-1e7", action="store_true", help="also select over 10^7 items")
    parser.add_argument("--sections", default="ceilings,gather,flashbax,selection,big",
                        help="comma-separated; 'gather' runs both placements")
    args = parser.parse_args(argv)

    info = machine()
    print(json.dumps(info, indent=1), flush=True)
    results: dict = {"machine": info, "args": vars(args) | {"out": str(args.out)}, "smoke": args.smoke}
    sections = args.sections.split(",")

    def run(name: str, fn: Callable[[], object]) -> None:
        if name.split("_")[0] not in sections:
            return
        print(f"{name}:", flush=True)
        try:
            results[name] = fn()
        except Exception as e:  # noqa: BLE001 - record, keep going
            results[name] = {"error": f"{type(e).__name__}: {e}",
                             "traceback": traceback.format_exc(limit=4)}
            print(f"  {name} failed: {type(e).__name__}: {e}", flush=True)

    run("ceilings", lambda: ceilings(args))
    ceiling = results.get("ceilings", {})
    run("gather_host", lambda: gather(args, "host", ceiling.get("pinned_h2d_GBps")))
    if _gearjax.gpu_free_bytes() is not None:  # device tables need a GPU
        run("gather_device",
            lambda: gather(args, "device", ceiling.get("d2d_copy_GBps")))
    run("flashbax", lambda: flashbax(args))
    run("selection", lambda: selection_and_update(args))
    run("big", lambda: big_table(args, info))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(f"results written to {args.out}")


if __name__ == "__main__":
    main()
