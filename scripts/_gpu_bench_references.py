"""The references scripts/bench_gpu.py compares gearjax with, on the same
shapes: a pure-JAX random gather from a device array and Flashbax's trajectory
and prioritised buffers (Flashbax is an optional dependency: where it is
missing its sections say so)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from _gpu_bench_common import (KIB, WINDOW_STEPS, case_steps, consume, gather_cases,
                               median_seconds, pure_jax_scan, stored_trajectories)


def pure_jax(args, ceiling_gbps: float | None) -> list[dict]:
    length, rows = 64, []
    for window_bytes, batch in gather_cases(args):
        step = window_bytes // WINDOW_STEPS
        count = stored_trajectories(args, window_bytes, length)
        data = jax.random.randint(jax.random.key(0), (count, length, step), 1, 255, jnp.uint8)
        steps = case_steps(args, batch * window_bytes)
        run = pure_jax_scan(data, batch, WINDOW_STEPS, steps)
        t = median_seconds(lambda: run(jax.random.key(1)), args.repeats) / steps
        gbps = batch * window_bytes / t / 1e9
        rows.append({"window_bytes": window_bytes, "batch": batch, "seconds": t, "GBps": gbps,
                     "of_ceiling": gbps / ceiling_gbps if ceiling_gbps else None})
        print(f"  pure-JAX gather window {window_bytes // KIB:5d} KiB batch {batch:5d}: "
              f"{t * 1e6:9.1f} us  {gbps:7.2f} GB/s", flush=True)
        del data
    return rows


def flashbax(args) -> list[dict]:
    import flashbax as fbx

    length, rows = 64, []
    cases = gather_cases(args)
    for window_bytes in sorted({w for w, _ in cases}):
        step = window_bytes // WINDOW_STEPS
        count = stored_trajectories(args, window_bytes, length)
        data = jax.random.randint(jax.random.key(0), (count, length, step), 1, 255, jnp.uint8)
        for batch in [b for w, b in cases if w == window_bytes]:
            buffer = fbx.make_trajectory_buffer(
                add_batch_size=count, sample_batch_size=batch, sample_sequence_length=WINDOW_STEPS,
                period=1, min_length_time_axis=WINDOW_STEPS, max_length_time_axis=length)
            state = buffer.add(buffer.init({"x": data[0, 0]}), {"x": data})
            steps = case_steps(args, batch * window_bytes)

            # The buffer's state an argument: closed over, XLA embedded it as a
            # constant (2.15 GB on the first GPU run).
            @jax.jit
            def run(state, key, buffer=buffer, steps=steps):
                def body(carry, k):
                    return carry + consume(buffer.sample(state, k).experience["x"]), None
                return jax.lax.scan(body, jnp.uint32(0), jax.random.split(key, steps))[0]

            t = median_seconds(lambda: run(state, jax.random.key(1)), args.repeats) / steps
            rows.append({"window_bytes": window_bytes, "batch": batch, "seconds": t,
                         "GBps": batch * window_bytes / t / 1e9})
            print(f"  flashbax window {window_bytes // KIB:5d} KiB batch {batch:5d}: "
                  f"{t * 1e6:9.1f} us  {rows[-1]['GBps']:7.2f} GB/s", flush=True)
    return rows


def flashbax_prioritized(args, n: int, batch: int, gearjax_seconds: float) -> dict:
    """Flashbax's prioritised buffer doing what bench_gpu's prioritized section
    times for gearjax: a sample of `batch` at `n` items and its priority update
    per scan step (on the GPU where JAX's default backend is one)."""
    result: dict = {}
    try:
        import flashbax as fbx
    except ImportError as e:
        result["flashbax"] = f"skipped: {e}"
        return result
    adders = 1000
    buffer = fbx.make_prioritised_trajectory_buffer(
        add_batch_size=adders, sample_batch_size=batch, sample_sequence_length=1, period=1,
        min_length_time_axis=1, max_length_time_axis=n // adders, priority_exponent=0.6,
        device="gpu" if jax.default_backend() == "gpu" else "cpu")
    state = jax.jit(buffer.add)(buffer.init({"x": jnp.zeros((), jnp.float32)}),
                                {"x": jnp.ones((adders, n // adders), jnp.float32)})

    @jax.jit
    def flashbax_run(state, key):
        def step(st, k):
            b = buffer.sample(st, k)
            st = buffer.set_priorities(st, b.indices, b.experience["x"][:, 0] + 0.5)
            return st, b.experience["x"].sum()
        return jax.lax.scan(step, state, jax.random.split(key, args.steps))[1].sum()

    result["flashbax_seconds"] = median_seconds(lambda: flashbax_run(state, jax.random.key(0)),
                                                args.repeats) / args.steps
    result["flashbax_over_gearjax"] = result["flashbax_seconds"] / gearjax_seconds
    print(f"  flashbax prioritised buffer: {result['flashbax_seconds'] * 1e6:.1f} us "
          f"(gearjax {result['flashbax_over_gearjax']:.2f}x faster)", flush=True)
    return result

