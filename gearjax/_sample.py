"""The compiled sample: a table's FFI sample call, the seed it draws with, and
the mask and timesteps of its windows, as one jitted function per shape."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from gearjax import _ffi
from gearjax._sample_args import SampleArgs
from gearjax.batch import Batch


@dataclasses.dataclass(frozen=True)
class SampleSpec:
    """What a compiled sample needs of its table (hashable: a static jit argument)."""

    handle: int
    max_length: int
    capacity: int
    columns: tuple[tuple[str, tuple[int, ...], np.dtype], ...]


# inline=True: inside a caller's jit the call's equations join the caller's
# program rather than forming a nested jit (one block less for JAX's passes
# to look through; the table call is what must stay, gearjax/_jax_fixes.py).
@functools.partial(jax.jit, inline=True, static_argnames=("spec", "args", "ordered"))
def sample(rng_key: jax.Array, state: jax.Array | None, *, spec: SampleSpec, args: SampleArgs,
           ordered: bool) -> tuple[jax.Array | None, Batch]:
    """Returns the successor of ``state`` (None when it is None: an ordered
    or ``ordered=False`` sample) and the batch."""
    # The key's own 64 bits seed Philox4x32-10, which the native core expands
    # per row: no random numbers are computed in XLA (the key is a threefry
    # output already; other key kinds are hashed to two words first).
    seed = seed_words(rng_key)
    strategy = args.strategy
    state, (keys, start, probability, table_size, valid, *columns) = _ffi.sample_call(
        seed, handle=spec.handle, batch=args.batch_size, strategy=strategy.code,
        alpha=strategy.alpha, count=min(strategy.count, spec.capacity),
        window=args.window_code, width=args.width, pad_left=args.pad_left, cut=args.cut_code,
        replace=args.replace, columns=tuple((shape, dtype) for _, shape, dtype in spec.columns),
        ordered=ordered, state=state)
    mask, timestep = window_steps(start, valid, args.width, args.pad_left)
    return state, Batch(columns={n: c for (n, _, _), c in zip(spec.columns, columns)}, mask=mask,
                        timestep=timestep, keys=keys, start=start, probability=probability,
                        table_size=table_size)


def window_steps(start: jax.Array, valid: jax.Array, width: int,
                 pad_left: bool) -> tuple[jax.Array, jax.Array]:
    """(mask, timestep), both [B, W], of windows whose row b holds valid[b]
    real steps from trajectory step start[b] on, padded on the given side.
    Computed here rather than written by the native gather: XLA fuses them
    into whatever reads them, and drops them when nothing does."""
    position = jnp.arange(width, dtype=jnp.int32)[None, :]
    valid = valid[:, None]
    offset = position - (width - valid if pad_left else 0)  # index among the real steps
    mask = (offset >= 0) & (offset < valid)
    return mask, jnp.where(mask, start[:, None] + offset, 0)


def seed_words(key: jax.Array) -> jax.Array:
    """uint32[2] from a PRNG key: its data when it is two words (threefry keys,
    typed or legacy), else two words drawn from it."""
    data = jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) \
        else key
    if data.shape == (2,) and data.dtype == jnp.uint32:
        return data
    return jax.random.bits(key, (2,), jnp.uint32)
