"""The per-call section of scripts/bench_sample.py: how long one call takes to
produce a full, materialised batch (dispatch from Python included), for every
system and case, each sampled row checked against the stored data."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import time
from typing import Any, Callable

import jax
import numpy as np

from _sample_cases import (GEARJAX_IMPORT_ERROR, Case, filled_table, flashbax_buffer,
                           gx, jax_keys, make_data, short_error, summarise)

SYSTEMS = ("gearjax", "gearjax-batch", "flashbax", "numpy", "memcpy-fresh", "memcpy-warm")
ROWS_TO_CHECK = 16


# ---------------------------------------------------------------------------
# Systems: each returns a Sampler whose call(i) yields one fresh batch
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Sampler:
    call: Callable[[int], Any]  # i -> output pytree (i = call number, for keys)
    values: Callable[[Any], np.ndarray]  # output -> [B, W, *step] array to check
    close: Callable[[], None] = lambda: None
    notes: list[str] = dataclasses.field(default_factory=list)


def gearjax_sampler(case: Case, data: np.ndarray, seed: int, n_calls: int,
                    whole_batch: bool = False) -> Sampler:
    """The jitted state form: the table state passed in and returned."""
    table = filled_table(case, data)
    try:
        def draw(state, k):
            state, batch = table.sample(state, k, batch_size=case.batch,
                                        window=case.window,  # None for case B
                                        strategy=gx.Uniform(), pad="left")
            return state, (batch if whole_batch else {"obs": batch["obs"]})

        sample = jax.jit(draw)
    except BaseException:
        table.close()
        raise
    keys = jax_keys(seed, n_calls)
    holder = {"state": table.state()}

    def call(i):
        holder["state"], out = sample(holder["state"], keys[i])
        return out

    notes = [
        f"gx.Uniform(), pad='left', window={case.window}, the table state threaded; "
        + ("returns the whole gx.Batch (the column plus mask, timestep, keys, start, "
           "probability and table_size) to Python; GB/s counts the payload column only"
           if whole_batch else
           "the jitted function returns only the payload column, as Flashbax's returns only "
           "its experience; the Batch's other arrays are still computed (one custom call "
           "writes them all)")
    ]
    return Sampler(call, lambda out: out["obs"], table.close, notes)


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
