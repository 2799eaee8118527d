"""An eager sample without XLA, ``Table.sample(..., numpy=True)``: the native
core selects and gathers the windows straight into NumPy arrays made here
(xla_ffi/python/eager_sample.h), through the same select and gather as the compiled
sample's CPU handler and with the same checks, so a key gives the same batch
either way, mask and timesteps included (written by the same gather:
xla_ffi/core/gather_cpu.h).

Why NumPy and not JAX arrays: JAX makes each array from host memory outside
a program with a dispatch of its own (``jax.device_put``, zero-copy or not),
and a batch has nine; scripts/bench_eager.py measured that at 3.6-4.1 times
the jitted call, whose program hands back all nine for less. So an eager sample
that returns JAX arrays runs that program, and one that may return NumPy
does not run XLA at all."""

from __future__ import annotations

from typing import Any

import numpy as np

from gearjax._keys import is_key_dtype
from gearjax._sample import ColumnLayout, seed_words
from gearjax._sample_args import SampleArgs
from gearjax.batch import Batch


def sample_numpy(native: Any, rng_key: Any, args: SampleArgs, capacity: int,
                 columns: ColumnLayout) -> Batch:
    """The batch of ``native`` (a host table's NativeTable) for ``rng_key``,
    as the compiled sample of the same arguments draws it, in new NumPy
    arrays of the compiled batch's dtypes. Arguments were checked by the
    caller (and are checked again natively); the call waits on the table's
    rate limiter with the GIL released, and raises the native classes
    (gearjax.errors: a shortfall, a timeout, a closed table)."""
    seed = host_seed_words(rng_key)
    batch, width = args.batch_size, args.width
    keys, table_size = np.empty(batch, np.int64), np.empty(batch, np.int64)
    start, valid = np.empty(batch, np.int32), np.empty(batch, np.int32)
    probability = np.empty(batch, np.float32)
    mask, timestep = np.empty((batch, width), bool), np.empty((batch, width), np.int32)
    arrays = [np.empty((batch, width, *shape), dtype) for _, shape, dtype in columns]
    strategy = args.strategy
    # The columns go as bytes: the native core checks their sizes, and
    # ml_dtypes' arrays (bfloat16, float8) cannot cross as they are.
    native.sample_into(seed, batch, strategy.code, strategy.alpha, min(strategy.count, capacity),
                       args.window_code, args.pad_left, args.cut_code, args.replace, keys, start,
                       probability, table_size, valid, mask, timestep,
                       [a.view(np.uint8) for a in arrays])
    return Batch(columns={name: a for (name, _, _), a in zip(columns, arrays)}, mask=mask,
                 timestep=timestep, keys=keys, start=start, probability=probability,
                 table_size=table_size)


def host_seed_words(rng_key: Any) -> np.ndarray:
    """``seed_words(rng_key)`` as a NumPy ``uint32[2]``, for a concrete key.

    A typed threefry key's two words are read from the array under it,
    without the JAX dispatch of ``jax.random.key_data`` (about 20-100 us on
    the 2-core machine: as much as the sample itself, scripts/bench_eager.py).
    That array is a JAX internal (``PRNGKeyArray._base_array``), read and
    never written: where it is missing or not two uint32 words, the public
    path is taken. tests/test_sample_numpy.py checks, on every JAX minor CI
    runs (scripts/test_jax_minors.sh), that both give the same words and
    that a threefry key takes the fast path."""
    if is_key_dtype(rng_key.dtype):
        base = getattr(rng_key, "_base_array", None)
        words = None if base is None else np.asarray(base)
    else:
        words = np.asarray(rng_key)  # a legacy key: its two words
    if words is not None and words.shape == (2,) and words.dtype == np.uint32:
        return words
    return np.asarray(seed_words(rng_key), np.uint32)
