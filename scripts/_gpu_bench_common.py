"""What scripts/bench_gpu.py's sections share: sizes, the timing loop, the
consumer every sampled byte feeds, the gather cases and the pure-JAX gather
every gearjax figure is compared with."""

from __future__ import annotations

import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

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
    """Reads every byte of a sampled batch (see bench_gpu.py's docstring)."""
    return jnp.sum(x, dtype=jnp.uint32)


def stored_trajectories(args, window_bytes: int, length: int) -> int:
    """Trajectories stored for a gather case: the same for gearjax and Flashbax,
    so both read from a table of the same size (--table-gb)."""
    table_bytes = 64 * MIB if args.smoke else args.table_gb * GIB
    step = window_bytes // WINDOW_STEPS
    return int(max(64, min(65536, table_bytes // (length * step))))


def case_steps(args, batch_bytes: int) -> int:
    """Samples per timed scan for batches of `batch_bytes`: --steps, but at
    most 1 GiB moved per scan (and at least 2), so the largest cases take
    about a second rather than ten."""
    return int(max(2, min(args.steps, GIB // max(batch_bytes, 1))))


def gather_cases(args) -> list[tuple[int, int]]:
    """(window bytes, batch) of the bandwidth sections, batches under 4 GiB.
    --quick: fewer, for the goals' rows: 4 KiB x 1024, and for the worst
    fraction of 16 KiB and larger windows batch 32 (where the first GPU run
    had it) and 1024."""
    if args.smoke:
        windows, batches = [1 * KIB, 4 * KIB], [32, 256]
    elif getattr(args, "quick", False):
        windows, batches = [4 * KIB, 16 * KIB, 64 * KIB, MIB], [32, 1024]
    else:
        windows = [1 * KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB]
        batches = [32, 256, 1024, 4096]
    limit = 64 * MIB if args.smoke else 4 * GIB
    return [(w, b) for w in windows for b in batches if w * b <= limit]


def pure_jax_scan(data: jax.Array, batch: int, window_steps: int, steps: int):
    """One random gather of `batch` windows of `window_steps` steps per scan
    step from `data` [N, L, step] in device memory (what a pure-JAX buffer such
    as Flashbax's does), every byte summed like the others."""
    count, length = data.shape[:2]

    @jax.jit
    def run(data, key):  # data an argument: closed over, XLA would embed it as a constant
        def body(total, key):
            rows, starts = jax.random.split(key)
            row = jax.random.randint(rows, (batch,), 0, count)
            start = jax.random.randint(starts, (batch,), 0, length - window_steps + 1)
            index = start[:, None] + jnp.arange(window_steps)[None, :]
            return total + consume(data[row[:, None], index]), None

        return jax.lax.scan(body, jnp.uint32(0), jax.random.split(key, steps))[0]

    return lambda key: run(data, key)
