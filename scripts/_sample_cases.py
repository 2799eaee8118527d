"""The sampling benchmark's cases and shared measuring code (scripts/bench_sample.py):
the batch shapes every system samples, their data, a filled gearjax table and
Flashbax buffer, and the timing and summary helpers every section uses."""

from __future__ import annotations

import dataclasses
import math
import time
import traceback
import warnings
from typing import Any, Callable, Sequence

import jax
import numpy as np

try:
    import gearjax as gx

    GEARJAX_IMPORT_ERROR = None
except Exception as exc:  # noqa: BLE001 - any import failure means "skip gearjax"
    gx = None
    GEARJAX_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"


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
