"""The prioritized section of scripts/bench_sample.py: prioritized replay as it
runs in training, inside a jitted scan, against Flashbax's prioritised
buffer, at 10^3 and 10^6 trajectories."""

from __future__ import annotations

import argparse
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from _sample_cases import gx, paired_ratios, summarise, time_round_robin
from _sample_in_scan import threaded_scan_program


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
            "gearjax update": update_only}, table.close


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
