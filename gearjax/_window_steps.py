"""The mask and timesteps of sampled windows, derived in XLA from each row's
start and count of real steps.

Where a sample's native call writes them itself (the CPU handler, and the
eager ``numpy=True`` sample: xla_ffi/core/gather_cpu.h), this is the formula
it follows. XLA derives them on a GPU, where they fuse into whatever reads
them and vanish when nothing does. On the CPU, XLA runs a program of more
than one kernel through its thread pool, and the two small kernels that
derived them after the table call cost a jitted call more than the writes
do: with the handler writing them, a jitted sample of 256 windows of 20 took
0.88 of the time interleaved and 0.90 in runs (paired medians of 6 rounds on
the 2-core VM; a sample inside a lax.scan that sums every array of the batch
took 1.10 and 1.18: docs/results/benchmarks.md, "Mask and timesteps written
by the CPU handler"). A program that reads neither (a lax.scan body that
reads only the columns, say) has the handler write neither: sample_p's DCE
rule drops them from its call (gearjax/_ffi.py). Sharded samples, whose
programs hold many kernels anyway, derive them here on every platform.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def window_steps(start: jax.Array, valid: jax.Array, width: int,
                 pad_left: bool) -> tuple[jax.Array, jax.Array]:
    """(mask, timestep), both [B, W], of windows whose row b holds valid[b]
    real steps from trajectory step start[b] on, padded on the given side
    (padding: mask False, timestep 0)."""
    position = jnp.arange(width, dtype=jnp.int32)[None, :]
    valid = valid[:, None]
    offset = position - (width - valid if pad_left else 0)  # index among the real steps
    mask = (offset >= 0) & (offset < valid)
    return mask, jnp.where(mask, start[:, None] + offset, 0)
