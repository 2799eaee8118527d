"""Benchmark: sampling the same batch shapes from gearjax, Flashbax, NumPy and memcpy.

For each case (batch x window x per-step shape, dtype) the script fills every
system with the same random trajectories and times how long one call takes to
produce a full, materialised batch:

  gearjax        ``table.sample(key, batch_size, window, strategy=gx.Uniform(),
                 pad="left")`` inside ``jax.jit``, returning the payload column
                 (as Flashbax's sample returns its experience); skipped, with the
                 import error recorded, when ``import gearjax`` fails.
  gearjax-batch  the same, returning the whole gx.Batch (every array) to Python:
                 shows what handing every leaf back to the host costs.
  flashbax       ``flashbax.make_trajectory_buffer(...).sample`` inside ``jax.jit``
                 (buffer state passed as an argument, period=1).
  numpy          fancy indexing ``data[traj[:, None], start[:, None] + arange(W)]``;
                 the random trajectory indices and starts are drawn INSIDE the
                 timed region (as a sampler has to), starts in [0, L - W] so every
                 window lies inside the stored length.
  memcpy-warm    ``np.copyto(dst, src)`` of the payload bytes into a preallocated dst.
  memcpy-fresh   ``np.empty`` + ``np.copyto`` each call (sampling returns fresh buffers).

Each system is warmed up (first call, which compiles for the JAX systems, then
3 more calls) and then timed for ``--repeats`` calls, each followed by
``jax.block_until_ready`` on the whole output. The systems take turns call by
call (round-robin), so the slow phases of a noisy machine hit them alike. Reported: median, p10 and p90
seconds, GB/s of payload (batch * window * prod(step shape) * itemsize; padding
masks or other extra outputs are not counted) and, for gearjax, its payload rate
over Flashbax's and both memcpys' (> 1 means gearjax is faster). After timing,
a few sampled rows of each system are checked against the stored data.

Run (from the repository root):

    python scripts/bench_sample.py [--repeats 30] [--cases A,B,C,D]
        [--out benchmarks/results/bench_sample_cpu.json] [--scale 1.0]

A compact table is printed at the end and the full results go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import importlib.metadata
import json
import math
import os
import platform
import resource
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

try:
    import gearjax as gx

    GEARJAX_IMPORT_ERROR = None
except Exception as exc:  # noqa: BLE001 - any import failure means "skip gearjax"
    gx = None
    GEARJAX_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "bench_sample_cpu.json"
SYSTEMS = ("gearjax", "gearjax-batch", "flashbax", "numpy", "memcpy-fresh", "memcpy-warm")
ROWS_TO_CHECK = 16


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    batch: int
    window: int | None  # None: whole trajectories (window = traj_len)
    step_shape: tuple[int, ...]
    dtype: str
    num_traj: int  # trajectories stored
    traj_len: int  # steps per stored trajectory (all full length)

    @property
    def steps(self) -> int:
        """Steps per sampled row."""
        return self.traj_len if self.window is None else self.window

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.batch, self.steps, *self.step_shape)

    @property
    def step_bytes(self) -> int:
        return math.prod(self.step_shape) * np.dtype(self.dtype).itemsize

    @property
    def payload_bytes(self) -> int:
        return self.batch * self.steps * self.step_bytes

    @property
    def stored_bytes(self) -> int:
        return self.num_traj * self.traj_len * self.step_bytes

    def describe(self) -> str:
        window = f"whole({self.traj_len})" if self.window is None else str(self.window)
        return f"{self.batch} x {window} x {self.step_shape} {self.dtype}"


CASES = {
    "A": Case("A", 256, 20, (17,), "float32", num_traj=1000, traj_len=200),
    "B": Case("B", 64, None, (17,), "float32", num_traj=200, traj_len=1000),
    "C": Case("C", 256, 20, (64, 64, 3), "uint8", num_traj=64, traj_len=200),
    "D": Case("D", 1024, 64, (512,), "float32", num_traj=256, traj_len=256),
}


def scaled(case: Case, scale: float) -> Case:
    return dataclasses.replace(case, num_traj=max(1, round(case.num_traj * scale)))


def make_data(case: Case, seed: int) -> np.ndarray:
    """Random (never all-zero) trajectories, shape [num_traj, traj_len, *step_shape]."""
    rng = np.random.default_rng(seed)
    shape = (case.num_traj, case.traj_len, *case.step_shape)
    if np.dtype(case.dtype).kind == "f":
        return rng.random(shape, dtype=case.dtype) + 0.5
    return rng.integers(1, 256, size=shape, dtype=case.dtype)


# ---------------------------------------------------------------------------
# Systems: each returns a Sampler whose call(i) yields one fresh batch
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Sampler:
    call: Callable[[int], Any]  # i -> output pytree (i = call number, for keys)
    values: Callable[[Any], np.ndarray]  # output -> [B, W, *step] array to check
    close: Callable[[], None] = lambda: None
    notes: list[str] = dataclasses.field(default_factory=list)


def jax_keys(seed: int, n: int) -> list[jax.Array]:
    """Keys made outside the timed region, one per call."""
    return list(jax.random.split(jax.random.key(seed), n))


def gearjax_sampler(case: Case, data: np.ndarray, seed: int, n_calls: int,
                    whole_batch: bool = False) -> Sampler:
    if gx is None:
        raise ImportError(GEARJAX_IMPORT_ERROR)
    table = gx.Table(
        {"obs": gx.Column(case.step_shape, case.dtype)},
        capacity=case.num_traj,
        max_length=case.traj_len,
    )
    try:
        table.insert_many([{"obs": traj} for traj in data])
        def draw(k):
            batch = table.sample(
                k,
                batch_size=case.batch,
                window=case.window,  # None for case B: whole trajectories
                strategy=gx.Uniform(),
                pad="left",
            )
            return batch if whole_batch else {"obs": batch["obs"]}

        sample = jax.jit(draw)
    except BaseException:
        table.close()
        raise
    keys = jax_keys(seed, n_calls)
    notes = [
        f"gx.Uniform(), pad='left', window={case.window}; "
        + ("returns the whole gx.Batch (the column plus mask, timestep, keys, start, "
           "probability and table_size) to Python; GB/s counts the payload column only"
           if whole_batch else
           "the jitted function returns only the payload column, as Flashbax's returns only "
           "its experience; the Batch's other arrays are still computed (one custom call "
           "writes them all)")
    ]
    return Sampler(lambda i: sample(keys[i]), lambda out: out["obs"], table.close, notes)


def flashbax_sampler(case: Case, data: np.ndarray, seed: int, n_calls: int) -> Sampler:
    import flashbax as fbx

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        buffer = fbx.make_trajectory_buffer(
            add_batch_size=case.num_traj,  # one buffer row per stored trajectory
            sample_batch_size=case.batch,
            sample_sequence_length=case.steps,
            period=1,
            min_length_time_axis=case.steps,
            max_length_time_axis=case.traj_len,
        )
    notes = [
        f"make_trajectory_buffer(add_batch_size={case.num_traj}, sample_batch_size="
        f"{case.batch}, sample_sequence_length={case.steps}, period=1, "
        f"max_length_time_axis={case.traj_len}); filled by one add of the whole "
        "[num_traj, traj_len, ...] array, so the buffer is exactly full (head 0) and "
        "windows never wrap across trajectory ends"
    ]
    if case.steps == case.traj_len:
        notes.append("sample_sequence_length == max_length_time_axis is accepted; only one "
                     "start (0) is valid, so each row is a whole stored trajectory")
    notes += [f"flashbax warning: {w.message}" for w in caught]

    state = buffer.init({"obs": data[0, 0]})
    state = jax.jit(buffer.add, donate_argnums=0)(state, {"obs": data})
    state = jax.block_until_ready(state)
    if not bool(state.is_full) or int(state.current_index) != 0:
        raise RuntimeError("flashbax buffer not exactly full after filling")

    sample = jax.jit(lambda st, k: buffer.sample(st, k).experience)
    keys = jax_keys(seed, n_calls)
    return Sampler(lambda i: sample(state, keys[i]), lambda out: out["obs"], notes=notes)


def numpy_sampler(case: Case, data: np.ndarray, seed: int, n_calls: int) -> Sampler:
    rng = np.random.default_rng(seed)
    num_traj, traj_len = data.shape[:2]
    offsets = np.arange(case.steps)

    def sample(_: int) -> np.ndarray:
        traj = rng.integers(0, num_traj, size=case.batch)
        start = rng.integers(0, traj_len - case.steps + 1, size=case.batch)
        return data[traj[:, None], start[:, None] + offsets]

    notes = [
        "indices drawn inside the timed region; starts in [0, L-W] so windows "
        "stay inside the stored length (no clipping needed)"
    ]
    return Sampler(sample, lambda out: out, notes=notes)


def payload_source(case: Case, data: np.ndarray) -> np.ndarray:
    """A contiguous payload-sized array of real stored steps (batch rows of windows)."""
    flat = data.reshape(-1, *case.step_shape)
    reps = -(-case.batch * case.steps // flat.shape[0])
    src = np.concatenate([flat] * reps) if reps > 1 else flat
    return np.ascontiguousarray(src[: case.batch * case.steps]).reshape(case.out_shape)


def memcpy_warm_sampler(case: Case, data: np.ndarray, seed: int, n_calls: int) -> Sampler:
    src = payload_source(case, data)
    dst = np.empty_like(src)
    dst.fill(0)  # fault the pages in once

    def copy(_: int) -> np.ndarray:
        np.copyto(dst, src)
        return dst

    return Sampler(copy, lambda out: out, notes=["np.copyto into a preallocated dst"])


def memcpy_fresh_sampler(case: Case, data: np.ndarray, seed: int, n_calls: int) -> Sampler:
    src = payload_source(case, data)

    def copy(_: int) -> np.ndarray:
        dst = np.empty_like(src)
        np.copyto(dst, src)
        return dst

    notes = [
        "np.empty + np.copyto each call; the previous dst is freed before the next "
        "call, so the allocator may hand back recently used memory"
    ]
    return Sampler(copy, lambda out: out, notes=notes)


SAMPLER_FACTORIES = {
    "gearjax": gearjax_sampler,
    "gearjax-batch": lambda *a: gearjax_sampler(*a, whole_batch=True),
    "flashbax": flashbax_sampler,
    "numpy": numpy_sampler,
    "memcpy-fresh": memcpy_fresh_sampler,
    "memcpy-warm": memcpy_warm_sampler,
}


# ---------------------------------------------------------------------------
# Timing and checking
# ---------------------------------------------------------------------------


def locate_step(data: np.ndarray, step: np.ndarray) -> tuple[int, int] | None:
    """(trajectory, time) of a stored step equal to `step`, or None."""
    flat = data.reshape(data.shape[0] * data.shape[1], -1)
    target = step.reshape(-1)
    probe = min(8, target.size)
    for idx in np.flatnonzero((flat[:, :probe] == target[:probe]).all(axis=1)):
        if np.array_equal(flat[idx], target):
            return divmod(int(idx), data.shape[1])
    return None


def classify_row(data: np.ndarray, row: np.ndarray) -> str:
    """'window' (a stored window); 'left-padded' (constant pad steps, then a stored
    window cut at the trajectory's end: start-anchored windows); 'left-padded-at-start'
    (constant pad steps, then the trajectory's first steps: end-anchored windows);
    or 'invalid'."""
    found = locate_step(data, row[-1])
    if found is None:
        return "invalid"
    traj, end = found
    real = 1
    while real < len(row) and end - real >= 0 and np.array_equal(
        row[-1 - real], data[traj, end - real]
    ):
        real += 1
    if real == len(row):
        return "window"
    pad = row[: len(row) - real]
    if not (pad == pad[:1]).all():
        return "invalid"
    if end == data.shape[1] - 1:
        return "left-padded"
    if end - real + 1 == 0:
        return "left-padded-at-start"
    return "invalid"


def check_rows(sampler: Sampler, data: np.ndarray, case: Case, call_index: int) -> dict:
    out = np.asarray(sampler.values(jax.block_until_ready(sampler.call(call_index))))
    if out.shape != case.out_shape or out.dtype != np.dtype(case.dtype):
        detail = f"got {out.shape} {out.dtype}, want {case.out_shape} {case.dtype}"
        return {"ok": False, "detail": detail}
    rows = np.unique(np.linspace(0, case.batch - 1, ROWS_TO_CHECK).astype(int))
    kinds = [classify_row(data, out[r]) for r in rows]
    return {"ok": "invalid" not in kinds, "rows_checked": rows.tolist(), "row_kinds": kinds}

def check_summary(check: dict) -> str:
    if "detail" in check:
        return f"FAILED: {check['detail']}"
    counts = {k: check["row_kinds"].count(k) for k in dict.fromkeys(check["row_kinds"])}
    text = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    return ("ok: " if check["ok"] else "FAILED: ") + text


def summarise(times: list[float], payload_bytes: int) -> dict:
    p10, median, p90 = np.percentile(times, [10, 50, 90])
    return {
        "median_s": float(median),
        "p10_s": float(p10),
        "p90_s": float(p90),
        "min_s": float(min(times)),
        "gb_per_s": payload_bytes / median / 1e9,
        "times_s": [float(t) for t in times],
    }


def short_error(exc: BaseException) -> dict:
    return {
        "status": "error",
        "error": f"{type(exc).__name__}: {exc}",
        "traceback": traceback.format_exc(limit=6).splitlines()[-12:],
    }


def build_sampler(name: str, case: Case, data: np.ndarray,
                  args: argparse.Namespace) -> Sampler | dict:
    """The system's sampler, or an error/skip record."""
    if name.startswith("gearjax") and gx is None:
        return {"status": "skipped", "error": f"import gearjax failed: {GEARJAX_IMPORT_ERROR}"}
    try:
        return SAMPLER_FACTORIES[name](case, data, args.seed, args.warmup + args.repeats + 2)
    except Exception as exc:  # noqa: BLE001 - record and carry on with other systems
        return short_error(exc)


def run_systems(case: Case, data: np.ndarray, args: argparse.Namespace) -> dict:
    """Times every system round-robin: call r of each system runs before call
    r + 1 of any, so slow phases of a noisy machine hit all systems alike."""
    samplers, results, first, times = {}, {}, {}, {}
    for name in SYSTEMS:
        built = build_sampler(name, case, data, args)
        if isinstance(built, dict):
            results[name] = built
        else:
            samplers[name], times[name] = built, []
    live = dict(samplers)
    for name, sampler in list(live.items()):  # compile and warm up
        try:
            start = time.perf_counter()
            jax.block_until_ready(sampler.call(0))
            first[name] = time.perf_counter() - start
            for i in range(1, args.warmup + 1):
                jax.block_until_ready(sampler.call(i))
        except Exception as exc:  # noqa: BLE001
            results[name] = {**short_error(exc), "notes": sampler.notes}
            del live[name]
    for r in range(args.repeats):
        i = args.warmup + 1 + r
        for name, sampler in list(live.items()):
            try:
                start = time.perf_counter()
                out = jax.block_until_ready(sampler.call(i))
                times[name].append(time.perf_counter() - start)
                del out  # free before the next call, as a consumer would
            except Exception as exc:  # noqa: BLE001
                results[name] = {**short_error(exc), "notes": sampler.notes}
                del live[name]
    for name, sampler in samplers.items():
        try:
            if name in live:
                check = check_rows(sampler, data, case, args.warmup + args.repeats + 1)
                results[name] = {"status": "ok", "first_call_s": first[name],
                                 **summarise(times[name], case.payload_bytes),
                                 "check": check, "notes": sampler.notes}
        except Exception as exc:  # noqa: BLE001
            results[name] = {**short_error(exc), "notes": sampler.notes}
        finally:
            sampler.close()
    return {name: results[name] for name in SYSTEMS}


def gearjax_ratios(systems: dict) -> dict:
    """Rate ratios rate_gearjax / rate_other = t_other / t_gearjax (medians; > 1:
    gearjax faster), for both gearjax rows. The issue's goals read directly:
    >= 2 against flashbax, >= 0.75 against memcpy."""
    ratios = {}
    for mine in ("gearjax", "gearjax-batch"):
        gear = systems.get(mine, {})
        if gear.get("status") != "ok":
            continue
        ratios.update({
            f"{mine}/{other}": systems[other]["median_s"] / gear["median_s"]
            for other in ("flashbax", "memcpy-fresh", "memcpy-warm", "numpy")
            if systems.get(other, {}).get("status") == "ok"
        })
    return ratios


def run_case(case: Case, args: argparse.Namespace) -> dict:
    print(f"case {case.name}: {case.describe()}, payload {case.payload_bytes / 1e6:.2f} MB, "
          f"stored {case.num_traj} x {case.traj_len} steps = {case.stored_bytes / 1e6:.1f} MB",
          flush=True)
    data = make_data(case, args.seed)
    systems = run_systems(case, data, args)
    for name, result in systems.items():
        if result["status"] == "ok":
            print(f"  {name:13s} median {result['median_s'] * 1e3:9.3f} ms  "
                  f"{result['gb_per_s']:7.2f} GB/s  check {check_summary(result['check'])}",
                  flush=True)
        else:
            print(f"  {name:13s} {result['status']}: {result['error']}", flush=True)
    del data
    gc.collect()
    return {
        "description": case.describe(),
        "batch": case.batch,
        "window": case.window,
        "steps_per_row": case.steps,
        "step_shape": list(case.step_shape),
        "dtype": case.dtype,
        "stored_trajectories": case.num_traj,
        "trajectory_length": case.traj_len,
        "stored_bytes": case.stored_bytes,
        "payload_bytes": case.payload_bytes,
        "systems": systems,
        "ratios": gearjax_ratios(systems),
    }


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_caches() -> dict:
    """Cache sizes of CPU 0 from sysfs, e.g. {"L1d": "32K", "L2": "1024K", "L3": "32768K"}."""
    caches = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        caches[f"L{level}{suffix}"] = size
    return caches


def version_of(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu_model": cpu_model(),
        "cpu_caches": cpu_caches(),
        "nproc": len(os.sched_getaffinity(0)),
        "total_memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "python": sys.version.split()[0],
        "versions": {p: version_of(p) for p in ("jax", "jaxlib", "flashbax", "numpy", "gearjax")},
        "jax_devices": [str(d) for d in jax.devices()],
        "xla_flags": os.environ.get("XLA_FLAGS"),
        "gearjax_module": getattr(gx, "__file__", None),
        "gearjax_version": getattr(gx, "__version__", None),
        "gearjax_import_error": GEARJAX_IMPORT_ERROR,
    }


def fmt_ratio(ratios: dict, key: str) -> str:
    return f"{ratios[key]:.2f}" if key in ratios else "-"


def print_table(results: dict) -> None:
    header = ("case", "system", "median ms", "p10-p90 ms", "GB/s",
              "x flashbax", "x memcpy(fresh)", "x memcpy(warm)")
    rows, footnotes = [], {}
    for case_name, case in results["cases"].items():
        ratios = case["ratios"]
        for name, res in case["systems"].items():
            if res["status"] != "ok":
                mark = footnotes.setdefault(res["error"], f"[{len(footnotes) + 1}]")
                rows.append((case_name, name, f"{res['status']} {mark}", "", "", "", "", ""))
                continue
            is_gear = name.startswith("gearjax")
            rows.append((
                case_name,
                name,
                f"{res['median_s'] * 1e3:.3f}",
                f"{res['p10_s'] * 1e3:.3f}-{res['p90_s'] * 1e3:.3f}",
                f"{res['gb_per_s']:.2f}",
                fmt_ratio(ratios, f"{name}/flashbax") if is_gear else "",
                fmt_ratio(ratios, f"{name}/memcpy-fresh") if is_gear else "",
                fmt_ratio(ratios, f"{name}/memcpy-warm") if is_gear else "",
            ))
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    print()
    print(line(header))
    print(line(["-" * w for w in widths]))
    for row in rows:
        print(line(row))
    for error, mark in footnotes.items():
        print(f"{mark} {error}")
    print("x columns: gearjax's payload rate over the other's (median times; > 1: gearjax "
          "faster); goals: >= 2 x flashbax, >= 0.75 x memcpy. GB/s counts payload bytes only")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per system")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed calls after the first (compiling) one")
    parser.add_argument("--cases", default="A,B,C,D", help="comma-separated subset of A,B,C,D")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results path")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply the number of stored trajectories (e.g. to exceed the LLC)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.cases = [c.strip().upper() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(args.cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {sorted(CASES)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    results = {
        "benchmark": "bench_sample",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "machine": machine_info(),
        "settings": {"repeats": args.repeats, "warmup": args.warmup, "scale": args.scale,
                     "seed": args.seed, "cases": args.cases},
        "cases": {},
    }
    for name in args.cases:
        results["cases"][name] = run_case(scaled(CASES[name], args.scale), args)

    results["wall_time_s"] = time.perf_counter() - started
    results["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    print(f"\nwall time {results['wall_time_s']:.1f} s, peak RSS "
          f"{results['peak_rss_bytes'] / 2**30:.2f} GiB, results written to {args.out}")


if __name__ == "__main__":
    main()
