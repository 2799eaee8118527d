"""The in-scan section of scripts/bench_sample.py: the cost of a sample inside
a jitted lax.scan, as users train, against Flashbax and a contiguous XLA
slice of the same bytes (the ceiling)."""

from __future__ import annotations

import argparse
import gc
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from _sample_cases import (filled_table, flashbax_buffer, gx, make_data, paired_ratios,
                           short_error, summarise, time_round_robin, Case)

SCAN_SYSTEMS = ("gearjax", "flashbax", "ceiling")


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
    one dispatch to the next, as compiled table calls do."""
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
        for name in ("gearjax", "flashbax"):
            if results.get(name, {}).get("status") == "ok":
                ratios[f"{name}/ceiling"] = results["ceiling"]["median_s"] / results[name]["median_s"]
    if "gearjax/flashbax" not in ratios and all(
            results.get(n, {}).get("status") == "ok" for n in ("gearjax", "flashbax")):
        ratios["gearjax/flashbax"] = results["flashbax"]["median_s"] / results["gearjax"]["median_s"]
    paired = paired_ratios(times, "ceiling", ("gearjax", "flashbax"))
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
