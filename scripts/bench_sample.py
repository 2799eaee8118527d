"""Benchmark: sampling the same batch shapes from gearjax, Flashbax, NumPy and memcpy.

Three sections (``--sections``, default all):

per-call     how long one call takes to produce a full, materialised batch
             (dispatch from Python included), for every case below;
in-scan      the cost of a sample inside a jitted ``lax.scan`` (how users train):
             each step samples a batch and sums it; the ceiling is a contiguous
             XLA ``dynamic_slice`` of the same bytes, summed the same way;
prioritized  prioritized replay as it runs in training: inside a jitted scan,
             each step samples 256 one-step windows of one float32 column by
             priority (alpha 0.6) and sets new priorities for them, in tables of
             10^3 and 10^6 trajectories, against Flashbax's prioritised buffer.

Per-call section. For each case (batch x window x per-step shape, dtype) the
script fills every system with the same random trajectories and times how long
one call takes to produce a full, materialised batch:

  gearjax        ``state, batch = table.sample(state, key, batch_size, window,
                 strategy=gx.Uniform(), pad="left")`` inside ``jax.jit`` (the
                 taught form: the table state passed in and returned), returning
                 the payload column (as Flashbax's sample returns its
                 experience); skipped, with the import error recorded, when
                 ``import gearjax`` fails.
  gearjax-ordered  the stateless form ``table.sample(key, ...)`` (JAX's ordered
                 effects, which leave JAX's fast dispatch path).
  gearjax-unordered  the stateless form with ``ordered=False`` (no ordering at
                 all, JAX's fast dispatch path).
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

In-scan section: gearjax (the taught form, the state in the scan's carry),
gearjax-ordered, gearjax-unordered, Flashbax and the ceiling, each a jitted scan of ``scan_steps`` steps (chosen per case so
that one dispatch takes tens of milliseconds and its cost is spread thin),
taking turns dispatch by dispatch; reported per step. The goal: gearjax at
least 0.8 of the ceiling's rate on every case.

Prioritized section: per-step times of sample + update (and of each alone)
for gearjax, and of sample + set_priorities for Flashbax, at 10^3 and 10^6
trajectories. Goals: at 10^6, gearjax at least 2x faster than Flashbax, and
its cost at 10^6 at most 3x its cost at 10^3.

Run (from the repository root):

    python scripts/bench_sample.py [--sections per-call,in-scan,prioritized]
        [--repeats 30] [--cases A,B,C,D] [--scale 1.0]
        [--out benchmarks/results/bench_sample_cpu.json]

Compact tables are printed at the end and the full results go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import math
import os
import platform
import resource
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import _machine

try:
    import gearjax as gx

    GEARJAX_IMPORT_ERROR = None
except Exception as exc:  # noqa: BLE001 - any import failure means "skip gearjax"
    gx = None
    GEARJAX_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "bench_sample_cpu.json"
SYSTEMS = ("gearjax", "gearjax-ordered", "gearjax-unordered", "gearjax-batch", "flashbax", "numpy",
           "memcpy-fresh",
           "memcpy-warm")
SCAN_SYSTEMS = ("gearjax", "gearjax-ordered", "gearjax-unordered", "flashbax", "ceiling")
SECTIONS = ("per-call", "in-scan", "prioritized")
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


def filled_table(case: Case, data: np.ndarray) -> "gx.Table":
    if gx is None:
        raise ImportError(GEARJAX_IMPORT_ERROR)
    table = gx.Table({"obs": gx.Column(case.step_shape, case.dtype)}, capacity=case.num_traj,
                     max_length=case.traj_len, placement="host")
    try:
        table.insert_many([{"obs": traj} for traj in data])
    except BaseException:
        table.close()
        raise
    return table


def gearjax_sampler(case: Case, data: np.ndarray, seed: int, n_calls: int,
                    whole_batch: bool = False, form: str = "threaded") -> Sampler:
    """form: "threaded" (the state passed in and returned), "ordered" or
    "unordered" (the stateless form, ordered=True or False)."""
    table = filled_table(case, data)
    try:
        def draw(state, k):
            args = dict(batch_size=case.batch, window=case.window,  # None for case B
                        strategy=gx.Uniform(), pad="left")
            if form == "threaded":
                state, batch = table.sample(state, k, **args)
            else:
                batch = table.sample(k, ordered=form == "ordered", **args)
            return state, (batch if whole_batch else {"obs": batch["obs"]})

        sample = jax.jit(draw)
    except BaseException:
        table.close()
        raise
    keys = jax_keys(seed, n_calls)
    holder = {"state": table.state() if form == "threaded" else None}

    def call(i):
        holder["state"], out = sample(holder["state"], keys[i])
        return out

    notes = [
        f"gx.Uniform(), pad='left', window={case.window}, form={form}; "
        + ("returns the whole gx.Batch (the column plus mask, timestep, keys, start, "
           "probability and table_size) to Python; GB/s counts the payload column only"
           if whole_batch else
           "the jitted function returns only the payload column, as Flashbax's returns only "
           "its experience; the Batch's other arrays are still computed (one custom call "
           "writes them all)")
    ]
    return Sampler(call, lambda out: out["obs"], table.close, notes)


def flashbax_buffer(case: Case, data: np.ndarray):
    """Flashbax's trajectory buffer holding `data` (one row per trajectory),
    its state, and notes on how it was set up."""
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
    return buffer, state, notes


def flashbax_sampler(case: Case, data: np.ndarray, seed: int, n_calls: int) -> Sampler:
    buffer, state, notes = flashbax_buffer(case, data)
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
    "gearjax-ordered": lambda *a: gearjax_sampler(*a, form="ordered"),
    "gearjax-unordered": lambda *a: gearjax_sampler(*a, form="unordered"),
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
    for mine in ("gearjax", "gearjax-ordered", "gearjax-unordered", "gearjax-batch"):
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
# In-scan section: the cost of a sample inside a jitted lax.scan
# ---------------------------------------------------------------------------


def scan_steps(case: Case) -> int:
    """Steps per dispatch: about 300 MB of payload, so that one dispatch takes
    tens of milliseconds and its fixed cost is spread thin; 5 to 1000."""
    return int(min(1000, max(5, 300e6 // case.payload_bytes)))


def scan_program(step: Callable[..., jax.Array], steps: int, *operands) -> Callable[[jax.Array], Any]:
    """key -> a jitted scan of `steps` steps, each adding step(key, *operands)
    to the carry. Arrays go in as operands, not as constants of the program."""
    def run(key, *ops):
        def body(carry, k):
            return carry + step(k, *ops), None

        return jax.lax.scan(body, jnp.float32(0), jax.random.split(key, steps))[0]

    program = jax.jit(run)
    return lambda key: program(key, *operands)


def threaded_scan_program(step: Callable[..., tuple[jax.Array, jax.Array]], steps: int,
                          table: "gx.Table") -> Callable[[jax.Array], Any]:
    """key -> a jitted scan of `steps` steps whose carry holds the table state
    and a sum: step(state, key) -> (state, value). The state is passed from
    one dispatch to the next, as the taught form does."""
    def run(state, key):
        def body(carry, k):
            state, total = carry
            state, value = step(state, k)
            return (state, total + value), None

        return jax.lax.scan(body, (state, jnp.float32(0)), jax.random.split(key, steps))[0]

    program = jax.jit(run)
    holder = {"state": table.state()}

    def call(key):
        holder["state"], total = program(holder["state"], key)
        return total

    return call


def in_scan_programs(case: Case, data: np.ndarray, steps: int) -> tuple[dict, list]:
    """name -> jitted scan(key) for every in-scan system, and things to close."""
    programs, closers = {}, []
    if gx is not None:
        table = filled_table(case, data)
        closers.append(table.close)
        programs["gearjax"] = threaded_scan_program(
            lambda state, k: (lambda r: (r[0], r[1]["obs"].astype(jnp.float32).sum()))(
                table.sample(state, k, case.batch, case.window, gx.Uniform(), "left")),
            steps, table)
        for name, ordered in (("gearjax-ordered", True), ("gearjax-unordered", False)):
            programs[name] = scan_program(
                lambda k, o=ordered: table.sample(k, case.batch, case.window, gx.Uniform(), "left",
                                                  ordered=o)["obs"].astype(jnp.float32).sum(),
                steps)
    try:
        buffer, state, _ = flashbax_buffer(case, data)
        programs["flashbax"] = scan_program(
            lambda k, st: buffer.sample(st, k).experience["obs"].astype(jnp.float32).sum(),
            steps, state)
    except ImportError as exc:
        programs["flashbax"] = exc
    rows = case.batch * case.steps

    def contiguous(k, flat):
        offset = jax.random.randint(k, (), 0, flat.shape[0] - rows + 1)
        start = (offset,) + (0,) * len(case.step_shape)
        return jax.lax.dynamic_slice(flat, start, (rows, *case.step_shape)) \
            .astype(jnp.float32).sum()

    flat = data.reshape(-1, *case.step_shape)
    if flat.shape[0] < 2 * rows:
        # A store no larger than the batch would make the slice the whole array, its
        # sum loop-invariant, and XLA would hoist it out of the scan: not a ceiling.
        flat = np.concatenate([flat] * -(-2 * rows // flat.shape[0]))
    programs["ceiling"] = scan_program(contiguous, steps, jnp.asarray(flat))
    return programs, closers


def time_round_robin(programs: dict[str, Callable[[jax.Array], Any]], repeats: int,
                     steps: int) -> dict[str, list[float]]:
    """name -> `repeats` times per step of program(key) (one dispatch of
    `steps` steps), the programs taking turns dispatch by dispatch so that the
    machine's noise hits them alike. Programs are compiled already."""
    times: dict[str, list[float]] = {name: [] for name in programs}
    for r in range(repeats):
        for name, program in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(program(jax.random.key(r + 1)))
            times[name].append((time.perf_counter() - start) / steps)
    return times


def paired_ratios(times: dict[str, list[float]], reference: str,
                  names: Sequence[str]) -> dict[str, float]:
    """name/reference -> the median over rounds of reference's time / name's
    time in the same round: less swayed than a ratio of medians by noise that
    comes and goes over minutes, as both times of a round share it."""
    out = {}
    for name in names:
        if reference in times and name in times:
            pairs = [r / t for r, t in zip(times[reference], times[name])]
            out[f"{name}/{reference}"] = float(np.median(pairs))
    return out


def run_in_scan_case(case: Case, args: argparse.Namespace) -> dict:
    steps = scan_steps(case)
    print(f"in-scan case {case.name}: {case.describe()}, {steps} steps a dispatch", flush=True)
    data = make_data(case, args.seed)
    programs, closers = in_scan_programs(case, data, steps)
    results, live = {}, {}
    for name in SCAN_SYSTEMS:
        program = programs.get(name)
        if program is None or isinstance(program, Exception):
            results[name] = {"status": "skipped", "error": f"{program}"}
            continue
        try:
            jax.block_until_ready(program(jax.random.key(0)))  # compile
            live[name] = program
        except Exception as exc:  # noqa: BLE001 - record and carry on
            results[name] = short_error(exc)
    times = time_round_robin(live, args.scan_repeats, steps)
    for name in live:
        results[name] = {"status": "ok", **summarise(times[name], case.payload_bytes)}
    for close in closers:
        close()
    ratios = {}
    if results.get("ceiling", {}).get("status") == "ok":
        for name in ("gearjax", "gearjax-ordered", "gearjax-unordered", "flashbax"):
            if results.get(name, {}).get("status") == "ok":
                ratios[f"{name}/ceiling"] = results["ceiling"]["median_s"] / results[name]["median_s"]
    if "gearjax/flashbax" not in ratios and all(
            results.get(n, {}).get("status") == "ok" for n in ("gearjax", "flashbax")):
        ratios["gearjax/flashbax"] = results["flashbax"]["median_s"] / results["gearjax"]["median_s"]
    paired = paired_ratios(times, "ceiling", ("gearjax", "gearjax-ordered", "gearjax-unordered",
                                              "flashbax"))
    for name, result in results.items():
        if result["status"] == "ok":
            print(f"  {name:18s} {result['median_s'] * 1e6:10.1f} us/step  "
                  f"{result['gb_per_s']:6.2f} GB/s", flush=True)
        else:
            print(f"  {name:18s} {result['status']}: {result['error']}", flush=True)
    del data
    gc.collect()
    return {"description": case.describe(), "payload_bytes": case.payload_bytes,
            "scan_steps": steps, "systems": results, "ratios": ratios,
            "paired_ratios": paired,
            "notes": ["each step samples (or slices) one batch and sums it in float32; the "
                      "ceiling slices B*W contiguous stored steps from a random offset "
                      "(in the store repeated to at least 2*B*W steps, so that the slice "
                      "is never the whole array)",
                      "times are per step: one dispatch's wall time / scan_steps"]}


# ---------------------------------------------------------------------------
# Prioritized section: sample by priority, then set new priorities
# ---------------------------------------------------------------------------

PRIORITIZED_BATCH = 256
PRIORITIZED_ALPHA = 0.6
PRIORITIZED_STEPS = 1000


def new_priorities(x: jax.Array) -> jax.Array:
    """What a learner would set: |value| + epsilon, one per sampled row."""
    return jnp.abs(x.reshape(x.shape[0], -1)[:, 0]) + 0.01


def gearjax_prioritized(n: int, rng: np.random.Generator) -> tuple[dict, Callable[[], None]]:
    table = gx.Table({"x": gx.Column((), "float32")}, capacity=n, max_length=1, placement="host")
    chunk = min(n, 100_000)
    fill = jax.jit(lambda x, p: table.insert_batch(table.state(), {"x": x},
                                                   jnp.ones(x.shape[0], jnp.int32), p)[1])
    for _ in range(0, n, chunk):
        jax.block_until_ready(fill(jnp.asarray(rng.random((chunk, 1), dtype=np.float32)),
                                   jnp.asarray(rng.uniform(0.1, 2.0, chunk), jnp.float32)))
    strategy = gx.Prioritized(PRIORITIZED_ALPHA)
    keys = jnp.asarray(table.contents()["key"][rng.integers(0, n, (PRIORITIZED_STEPS,
                                                                     PRIORITIZED_BATCH))])

    def sample_and_update(state, k):
        state, batch = table.sample(state, k, PRIORITIZED_BATCH, 1, strategy)
        state, _ = table.update_priorities(state, batch.keys, new_priorities(batch["x"]))
        return state, batch["x"].sum()

    def sample_only(state, k):
        state, batch = table.sample(state, k, PRIORITIZED_BATCH, 1, strategy)
        return state, batch["x"].sum()

    def ordered_sample_and_update(k):
        batch = table.sample(k, PRIORITIZED_BATCH, 1, strategy)
        table.update_priorities(batch.keys, new_priorities(batch["x"]))
        return batch["x"].sum()

    def update_body(carry, step_keys):
        state, total = carry
        state, count = table.update_priorities(state, step_keys,
                                               jnp.full(PRIORITIZED_BATCH, 0.5, jnp.float32))
        return (state, total + count), None

    update_only = jax.jit(lambda _: jax.lax.scan(update_body, (table.state(), jnp.int32(0)),
                                                 keys)[0][1])
    return {"gearjax sample+update": threaded_scan_program(sample_and_update, PRIORITIZED_STEPS,
                                                           table),
            "gearjax sample": threaded_scan_program(sample_only, PRIORITIZED_STEPS, table),
            "gearjax update": update_only,
            "gearjax-ordered sample+update": scan_program(ordered_sample_and_update,
                                                          PRIORITIZED_STEPS)}, table.close


def flashbax_prioritized(n: int, rng: np.random.Generator) -> dict:
    import flashbax as fbx

    rows = min(n, 1000)  # the buffer is [rows, n // rows]; one-step windows cover it all
    buffer = fbx.make_prioritised_trajectory_buffer(
        add_batch_size=rows, sample_batch_size=PRIORITIZED_BATCH, sample_sequence_length=1,
        period=1, min_length_time_axis=1, max_length_time_axis=n // rows,
        priority_exponent=PRIORITIZED_ALPHA)
    state = buffer.init({"x": jnp.zeros((), jnp.float32)})
    state = jax.jit(buffer.add, donate_argnums=0)(
        state, {"x": jnp.asarray(rng.random((rows, n // rows), dtype=np.float32))})

    def body(st, k):
        sample = buffer.sample(st, k)
        st = buffer.set_priorities(st, sample.indices, new_priorities(sample.experience["x"]))
        return st, sample.experience["x"].sum()

    run = jax.jit(lambda st, key: jax.lax.scan(body, st, jax.random.split(key,
                                                                          PRIORITIZED_STEPS)))
    holder = {"state": state}

    def step(key):
        holder["state"], out = run(holder["state"], key)
        return out

    return {"flashbax sample+set_priorities": step}


def run_prioritized(n: int, args: argparse.Namespace) -> dict:
    print(f"prioritized: {n} trajectories, batch {PRIORITIZED_BATCH}, alpha {PRIORITIZED_ALPHA}",
          flush=True)
    rng = np.random.default_rng(args.seed)
    programs, closers, results = {}, [], {}
    if gx is not None:
        gear, close = gearjax_prioritized(n, rng)
        programs.update(gear)
        closers.append(close)
    try:
        programs.update(flashbax_prioritized(n, rng))
    except ImportError as exc:
        results["flashbax sample+set_priorities"] = {"status": "skipped", "error": str(exc)}
    for program in programs.values():
        jax.block_until_ready(program(jax.random.key(0)))
    times = time_round_robin(programs, args.scan_repeats, PRIORITIZED_STEPS)
    for name in programs:
        results[name] = {"status": "ok", **summarise(times[name], PRIORITIZED_BATCH * 4)}
        print(f"  {name:32s} {results[name]['median_s'] * 1e6:8.1f} us/step", flush=True)
    for close in closers:
        close()
    paired = paired_ratios(times, "flashbax sample+set_priorities", ("gearjax sample+update",))
    return {"trajectories": n, "batch": PRIORITIZED_BATCH, "alpha": PRIORITIZED_ALPHA,
            "steps": PRIORITIZED_STEPS, "systems": results, "paired_ratios": paired}


def prioritized_goals(sections: dict) -> dict:
    """The issue's goals: at 10^6, gearjax at least 2x faster than Flashbax;
    gearjax's cost at 10^6 at most 3x its cost at 10^3."""
    def median(n, name):
        result = sections.get(str(n), {}).get("systems", {}).get(name, {})
        return result.get("median_s") if result.get("status") == "ok" else None

    goals = {}
    mine, theirs = "gearjax sample+update", "flashbax sample+set_priorities"
    if median(1_000_000, mine) and median(1_000_000, theirs):
        goals["flashbax/gearjax at 10^6"] = median(1_000_000, theirs) / median(1_000_000, mine)
    paired = sections.get(str(1_000_000), {}).get("paired_ratios", {}).get(f"{mine}/{theirs}")
    if paired:
        goals["flashbax/gearjax at 10^6, paired"] = paired
    if median(1_000_000, mine) and median(1_000, mine):
        goals["gearjax 10^6 / 10^3"] = median(1_000_000, mine) / median(1_000, mine)
    return goals


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------


def machine_info() -> dict:
    return _machine.machine_info(
        ("flashbax",), processor=platform.processor(), nproc=len(os.sched_getaffinity(0)),
        gearjax_module=getattr(gx, "__file__", None),
        gearjax_version=getattr(gx, "__version__", None),
        gearjax_import_error=GEARJAX_IMPORT_ERROR)


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
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--scan-repeats", type=int, default=15,
                        help="timed dispatches per system in the in-scan and prioritized sections")
    parser.add_argument("--prioritized-sizes", default="1000,1000000",
                        help="table sizes of the prioritized section")
    args = parser.parse_args(argv)
    args.cases = [c.strip().upper() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(args.cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {sorted(CASES)}")
    args.sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    if sorted(set(args.sections) - set(SECTIONS)):
        parser.error(f"unknown sections; choose from {SECTIONS}")
    args.prioritized_sizes = [int(n) for n in args.prioritized_sizes.split(",") if n.strip()]
    return args


def print_scan_tables(results: dict) -> None:
    if results.get("in_scan"):
        print("\nin a jitted lax.scan (per step; x ceiling: rate over the contiguous slice's; "
              "goal >= 0.8):")
        for name, case in results["in_scan"].items():
            row = [f"  {name}: {case['description']}"]
            for system, res in case["systems"].items():
                if res["status"] == "ok":
                    row.append(f"{system} {res['median_s'] * 1e6:.1f} us")
            for key, ratio in case["ratios"].items():
                row.append(f"{key} {ratio:.2f}")
            for key, ratio in case.get("paired_ratios", {}).items():
                row.append(f"{key} paired {ratio:.2f}")
            print(" | ".join(row))
    if results.get("prioritized"):
        print("\nprioritized replay in a jitted lax.scan (per step, batch 256):")
        for n, section in results["prioritized"].items():
            cells = [f"{system} {res['median_s'] * 1e6:.1f} us"
                     for system, res in section["systems"].items() if res["status"] == "ok"]
            print(f"  N={n}: " + " | ".join(cells))
        for goal, value in results.get("prioritized_goals", {}).items():
            print(f"  {goal}: {value:.2f}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    results = {
        "benchmark": "bench_sample",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "machine": machine_info(),
        "settings": {"repeats": args.repeats, "warmup": args.warmup, "scale": args.scale,
                     "seed": args.seed, "cases": args.cases, "sections": args.sections,
                     "scan_repeats": args.scan_repeats,
                     "prioritized_sizes": args.prioritized_sizes},
        "cases": {},
    }
    if "per-call" in args.sections:
        for name in args.cases:
            results["cases"][name] = run_case(scaled(CASES[name], args.scale), args)
    if "in-scan" in args.sections:
        results["in_scan"] = {name: run_in_scan_case(scaled(CASES[name], args.scale), args)
                              for name in args.cases}
    if "prioritized" in args.sections:
        results["prioritized"] = {str(n): run_prioritized(n, args) for n in args.prioritized_sizes}
        results["prioritized_goals"] = prioritized_goals(results["prioritized"])

    results["wall_time_s"] = time.perf_counter() - started
    results["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    if results["cases"]:
        print_table(results)
    print_scan_tables(results)
    print(f"\nwall time {results['wall_time_s']:.1f} s, peak RSS "
          f"{results['peak_rss_bytes'] / 2**30:.2f} GiB, results written to {args.out}")


if __name__ == "__main__":
    main()
