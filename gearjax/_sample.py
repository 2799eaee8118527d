"""The compiled sample: a table's FFI sample call and the seed it draws with,
as one jitted function per table.

Each table owns its jitted function (through its :class:`SampleSpec`), so the
programs it compiles for eager samples live as long as the table: JAX keys its
caches of traces, lowerings and executables weakly by the jitted function, so
they let go of a table's programs once the table is dropped (or its spec
released, :meth:`SampleSpec.release`). One jitted function for every table,
with the table's handle as a static argument, kept every table's programs in
JAX's caches until ``jax.clear_caches()``: a process that made and dropped
tables grew by 6 memory maps and 1.7 MiB a table (scripts/bench_table_churn.py).
A program cannot be shared between tables: the handle is an attribute of the
custom call, compiled into the program (docs/concepts/effects.md says why).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from gearjax import _ffi
from gearjax._keys import is_key_dtype
from gearjax._sample_args import SampleArgs
from gearjax.batch import Batch

ColumnLayout = tuple[tuple[str, tuple[int, ...], np.dtype], ...]
SampleProgram = Callable[..., tuple[jax.Array, Batch]]


class SampleSpec:
    """What a compiled sample needs of its table, and the table's jitted
    sample (made on first use, dropped by :meth:`release`).

    The table holds its spec and nothing else holds it, so the jitted
    function, and with it every program JAX compiled for it, goes when the
    table goes. The function closes over the spec's values, not the spec: no
    reference cycle (a table nobody holds is freed at once, without the
    cycle collector).
    """

    __slots__ = ("handle", "max_length", "capacity", "columns", "_program", "_writes")

    def __init__(self, handle: int, max_length: int, capacity: int,
                 columns: ColumnLayout) -> None:
        self.handle = handle
        self.max_length = max_length
        self.capacity = capacity
        self.columns = columns
        self._program: SampleProgram | None = None
        self._writes: dict[str, Callable] = {}  # the jitted insert_batch and update

    def program(self) -> SampleProgram:
        """The table's jitted sample, made now if it was not yet (or was
        released). Two threads making it at once each get a working one; the
        last stays."""
        program = self._program
        if program is None:
            program = self._program = _jitted_sample(self.handle, self.capacity, self.columns)
        return program

    def insert_batch_program(self) -> Callable:
        """The table's jitted insert_batch, ``(state, columns, lengths,
        priorities) -> (state, keys)``: eager calls compile their programs for it,
        not into JAX's primitive cache, which kept one a table (1.4 MiB) until
        ``jax.clear_caches()``. Made on first use, like :meth:`program`."""
        return self._write("insert_batch", _ffi.insert_batch_call)

    def update_priorities_program(self) -> Callable:
        """The table's jitted update_priorities, ``(state, keys, priorities)
        -> (state, count)``, for the same reason."""
        return self._write("update_priorities", _ffi.update_priorities_call)

    def update_step_priorities_program(self) -> Callable:
        """The same with steps, ``(state, keys, steps, priorities) -> (state,
        count)``."""
        return self._write("update_step_priorities", _ffi.update_step_priorities_call)

    def _write(self, name: str, call: Callable) -> Callable:
        program = self._writes.get(name)
        if program is None:
            program = self._writes[name] = _jitted_write(call, self.handle)
        return program

    def release(self) -> None:
        """Drops the jitted sample and insert_batch, and so the programs
        compiled for them (for a table that closes: its programs never run
        again, though the table object may live on). A later call makes new
        ones."""
        self._program = None
        self._writes = {}


def sample(rng_key: jax.Array, state: jax.Array, *, spec: SampleSpec,
           args: SampleArgs) -> tuple[jax.Array, Batch]:
    """Returns the successor of ``state`` and the batch, drawn by the table's
    own jitted sample (eagerly: one compiled program per table and argument
    set; inside a caller's jit: inlined into the caller's program)."""
    return spec.program()(rng_key, state, args=args)


def _jitted_sample(handle: int, capacity: int, columns: ColumnLayout) -> SampleProgram:
    """A new jitted sample of the table with this handle: its own function
    object, so JAX's weakly keyed caches drop its programs with it."""

    # inline=True: inside a caller's jit the call's equations join the caller's
    # program rather than forming a nested jit (one block less for JAX's passes
    # to look through; the table call is what must stay, gearjax/_jax_fixes.py).
    @functools.partial(jax.jit, inline=True, static_argnames=("args",))
    def table_sample(rng_key: jax.Array, state: jax.Array, *,
                     args: SampleArgs) -> tuple[jax.Array, Batch]:
        return _draw(rng_key, state, handle, capacity, columns, args)

    return table_sample


def _jitted_write(call: Callable, handle: int) -> Callable:
    """A new jitted `call` (gearjax._ffi's insert_batch_call or
    update_priorities_call) of the table with this handle (inlined into a
    caller's jit, like the sample)."""

    @functools.partial(jax.jit, inline=True)
    def table_write(state: jax.Array, *operands: jax.Array | list[jax.Array]):
        return call(state, *operands, handle=handle)

    return table_write


def _draw(rng_key: jax.Array, state: jax.Array, handle: int, capacity: int,
          columns: ColumnLayout, args: SampleArgs) -> tuple[jax.Array, Batch]:
    """The traced body of a sample: the FFI call (which gives the windows'
    mask and timesteps too: gearjax/_ffi.py sample_call)."""
    # The key's own 64 bits seed Philox4x32-10, which the native core expands
    # per row: no random numbers are computed in XLA (the key is a threefry
    # output already; other key kinds are hashed to two words first).
    seed = seed_words(rng_key)
    strategy = args.strategy
    state, (keys, start, probability, table_size, _, mask, timestep, *arrays) = \
        _ffi.sample_call(
            state, seed, handle=handle, batch=args.batch_size, strategy=strategy.code,
            alpha=strategy.alpha, count=min(strategy.count, capacity),
            window=args.window_code, width=args.width, pad_left=args.pad_left,
            cut=args.cut_code, replace=args.replace,
            columns=tuple((shape, dtype) for _, shape, dtype in columns))
    return state, Batch(columns={n: c for (n, _, _), c in zip(columns, arrays)}, mask=mask,
                        timestep=timestep, keys=keys, start=start, probability=probability,
                        table_size=table_size)


def seed_words(key: jax.Array) -> jax.Array:
    """uint32[2] from a PRNG key: its data when it is two words (threefry keys,
    typed or legacy), else two words drawn from it."""
    data = jax.random.key_data(key) if is_key_dtype(key.dtype) else key
    if data.shape == (2,) and data.dtype == jnp.uint32:
        return data
    return jax.random.bits(key, (2,), jnp.uint32)
