"""The Table: a fixed-capacity store of trajectories, sampled inside jax.jit.

A table owns ``capacity`` slots of ``max_length`` steps for every column, in one
native arena. Inserting copies a trajectory into a free slot (or evicts one, as
the remover says) and gives it a new key. Sampling is an XLA FFI custom call:
it draws trajectories by a strategy, cuts windows and pads them, all in native
code, from inside jit-compiled programs, scans, or eagerly.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

import jax
import jax.numpy as jnp
import numpy as np

from gearjax import (_call_forms, _checks, _eager_sample, _exit, _gearjax, _inserts,
                     _sample, _sample_args, _update_args, checkpoint, errors, rate_limiters)
from gearjax import state as table_state
from gearjax._gearjax import NativeTable
from gearjax._sample_args import SampleArgs
from gearjax._signatures import first_overload
from gearjax.batch import Batch
from gearjax.columns import Column, host_array
from gearjax.state import TableState
from gearjax.strategies import Prioritized, PrioritizedSteps, Strategy, Uniform

if TYPE_CHECKING:
    from gearjax.writer import Writer

REMOVERS = _checks.REMOVER_CODES
PLACEMENTS = _checks.PLACEMENTS
# "auto" puts a table in GPU memory when it needs at most this fraction of the
# GPU memory free when it is created; the rest stays for XLA and the model.
AUTO_DEVICE_FRACTION = 0.5
# How long a call waits for GPU work it must not overlap (a sample's kernel
# still reading the slot an insert takes, a GPU priority update still writing
# the priorities a call reads or writes) before it raises TimeoutError naming
# it: such work ends in microseconds unless a GPU stream stalls or failed.
GPU_WAIT_SECONDS = 60.0
PADS = _sample_args.PADS
# Where a window lies in its trajectory (xla_ffi/core/window.h).
CUTS = _sample_args.CUTS
# How long close() waits for samples, readers and writers inside the table
# before it leaves the memory to the last of them.
CLOSE_WAIT_SECONDS = 30.0
# Distinct sample argument sets a table remembers as checked; more clear them
# (a sweep over batch sizes checks again rather than growing without bound).
_CHECKED_SAMPLES_KEPT = 64


class Table:
    """A trajectory table.

    Args:
      columns: column name -> :class:`Column` (per-step shape, dtype, pad).
      capacity: number of trajectory slots, in [1, 2**31].
      max_length: steps per slot, in [1, 2**31]; inserted trajectories have
        1..max_length steps.
      placement: where the table's bytes live: ``"host"`` (pinned and mapped
        for zero-copy GPU gathers where a GPU is present, so a table may be
        far larger than GPU memory), ``"device"`` (GPU memory, beside XLA's
        pool) or ``"auto"`` (default: ``"device"`` when the table needs at
        most ``AUTO_DEVICE_FRACTION`` of the GPU memory free at creation,
        else ``"host"``). See the docs' Placement page (XLA's preallocation,
        what runs where); ``stats()["memory"]`` says where the table went.
      remover: who leaves when the table is full: ``"fifo"`` (oldest key),
        ``"lifo"`` (newest key) or ``"min_priority"`` (lowest priority, oldest
        first among ties).
      rate_limiter: ``None`` (sample any non-empty table; never wait),
        :class:`gearjax.MinSize` or :class:`gearjax.SampleToInsertRatio`.
      name: a name for error messages and ``repr`` (compiled programs that
        touch a closed table fail naming it).
      max_times_sampled: a trajectory leaves the table after its n-th draw
        (Reverb's; 1: consume-once, for on-policy data); 0 (default) never.
        Every row counts, also within one batch. See the docs' Windows page,
        "Consume-once tables".
      step_priorities: keep a priority per stored step too (``False``,
        default: one per trajectory), for :class:`gearjax.PrioritizedSteps`:
        ``insert(..., priority=)`` then takes one per step (a scalar sets
        every step), ``update_priorities(..., steps=)`` sets the sampled
        steps', and a trajectory's own priority (``Prioritized``, ``TopK``,
        the ``"min_priority"`` remover, ``contents()``) is the largest of its
        steps'. Costs 8 bytes a step of ``capacity * max_length``, and each
        ``PrioritizedSteps`` alpha sampled a sum tree over them (about 9.1
        bytes a step), and one more per ``cut="full"`` window width (at most
        2 an alpha). See the docs' Strategies page, "Priorities per step".
      _key_bits: keys stay below ``2**_key_bits`` (for the shards of a
        :class:`gearjax.ShardedTable`, whose keys carry the shard above them).

    Raises:
      TypeError: ``columns`` is not a non-empty mapping of non-empty string
        names to :class:`Column`; ``name`` is not a string; ``capacity``,
        ``max_length`` or ``max_times_sampled`` is not an integer,
        ``step_priorities`` not a bool;
        ``rate_limiter`` is not ``None``, :class:`gearjax.MinSize` or
        :class:`gearjax.SampleToInsertRatio`.
      ValueError: ``capacity``, ``max_length`` or ``max_times_sampled`` is out
        of range; ``placement`` or ``remover`` is not one of the names above;
        ``placement="device"`` where there is no GPU; the rate limiter's min
        size exceeds ``capacity`` (sampling could never start); the table
        needs more bytes than this machine's memory.

    Invariants: keys are unique, increase with insertion order and are never
    reused; a sampled window never mixes data of two trajectories, even while
    other threads insert and evict; a failed call leaves the table unchanged.

    Examples:
      >>> import jax, numpy as np
      >>> import gearjax as gx
      >>> table = gx.Table({"obs": gx.Column((3,), "float32"),
      ...                   "reward": gx.Column((), "float32")},
      ...                  capacity=1000, max_length=50, placement="host")
      >>> key = table.insert({"obs": np.zeros((10, 3)), "reward": np.ones(10)})
      >>> state = table.state()
      >>> state, batch = table.sample(state, jax.random.key(0), 32, window=8)
      >>> batch["obs"].shape
      (32, 8, 3)
      >>> table.close()
    """

    def __init__(self, columns: Mapping[str, Column], capacity: int, max_length: int, *,
                 placement: str = "auto", remover: str = "fifo",
                 rate_limiter: rate_limiters.RateLimiter | None = None, name: str = "",
                 max_times_sampled: int = 0, step_priorities: bool = False,
                 _key_bits: int = 63):
        if not isinstance(columns, Mapping) or not columns:
            raise TypeError("columns must be a non-empty mapping of name -> gearjax.Column")
        for column_name, column in columns.items():
            if not isinstance(column_name, str) or not column_name:
                raise TypeError(f"column names must be non-empty strings, got {column_name!r}")
            if not isinstance(column, Column):
                raise TypeError(f"column {column_name!r} must be a gearjax.Column, got {column!r}")
        capacity = _checks.integer("capacity", capacity, 1, _checks.MAX_CAPACITY)
        max_length = _checks.integer("max_length", max_length, 1, _checks.MAX_LENGTH)
        if not isinstance(placement, str) or placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        if not isinstance(remover, str) or remover not in REMOVERS:
            raise ValueError(f"remover must be one of {tuple(REMOVERS)}, got {remover!r}")
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, got {name!r}")
        max_times_sampled = _checks.integer("max_times_sampled", max_times_sampled, 0,
                                            _checks.MAX_BATCH)
        if not isinstance(step_priorities, bool):
            raise TypeError(f"step_priorities must be a bool, got {step_priorities!r}")
        limiter_args = rate_limiters.native_args(rate_limiter)
        if limiter_args[0] > capacity:
            raise ValueError(f"the rate limiter's min size ({limiter_args[0]}) exceeds "
                             f"capacity ({capacity}): sampling could never start")
        self._columns = dict(columns)
        self._capacity = capacity
        self._max_length = max_length
        self._placement = placement
        self._remover = remover
        self._rate_limiter = rate_limiter
        self._max_times_sampled = max_times_sampled
        self._step_priorities = step_priorities
        arena_bytes = capacity * max_length * sum(c.step_bytes for c in self._columns.values())
        _check_fits_in_memory(arena_bytes, _gearjax.worst_bookkeeping_bytes(
            capacity, max_length, _checks.REMOVER_CODES[remover], step_priorities))
        on_device = _resolve_placement(placement, arena_bytes)
        self._native = NativeTable(
            name, [(n, c.step_bytes, c.pad_step()) for n, c in self._columns.items()],
            capacity, max_length, REMOVERS[remover], *limiter_args, gpu_mapped=True,
            on_device=on_device, key_bits=_key_bits, max_times_sampled=max_times_sampled,
            gpu_wait_seconds=GPU_WAIT_SECONDS, device=_default_gpu() if on_device else -1,
            step_priorities=step_priorities)
        _exit.track(self)  # blocked calls are woken at interpreter exit
        # The one-step fast path (insert_step, Writer.append): each column's
        # element kind and step shape (xla_ffi/python/step_values.h).
        self._native.set_step_formats([(_inserts.fast_kind(c.dtype), c.dtype.itemsize, c.shape)
                                       for c in self._columns.values()])
        # What compiled samples need to know: no reference back to this object,
        # so a table nobody holds is freed at once (not by the cycle collector).
        self._spec = _sample.SampleSpec(self._native.handle, max_length, capacity, tuple(
            (n, c.shape, c.dtype) for n, c in self._columns.items()))
        # Sample arguments already checked against this table, by what was
        # passed (see _checked_sample_args).
        self._checked_samples: dict[tuple, SampleArgs] = {}
        # (strategy code, alpha) of the sum trees the table is known to keep.
        self._priority_trees: set[tuple[int, float]] = set()

    # ------------------------------------------------------------------ info
    @property
    def columns(self) -> dict[str, Column]:
        """The columns, name -> :class:`Column` (a copy), in the order given."""
        return dict(self._columns)

    @property
    def capacity(self) -> int:
        """The number of trajectory slots."""
        return self._capacity

    @property
    def max_length(self) -> int:
        """Steps per slot: the longest trajectory the table stores."""
        return self._max_length

    @property
    def placement(self) -> str:
        """The placement asked for (``stats()["memory"]`` says where the bytes went)."""
        return self._placement

    @property
    def remover(self) -> str:
        """Who leaves when the table is full: ``"fifo"``, ``"lifo"`` or
        ``"min_priority"``."""
        return self._remover

    @property
    def rate_limiter(self) -> rate_limiters.RateLimiter | None:
        """The rate limiter, or ``None`` (sample any non-empty table; never wait)."""
        return self._rate_limiter

    @property
    def max_times_sampled(self) -> int:
        """Draws after which a trajectory leaves the table; 0: never."""
        return self._max_times_sampled

    @property
    def step_priorities(self) -> bool:
        """Whether the table keeps a priority per stored step (made with
        ``step_priorities=True``; :class:`gearjax.PrioritizedSteps`)."""
        return self._step_priorities

    @property
    def name(self) -> str:
        """The name given (``""`` by default), shown in errors and ``repr``."""
        return self._native.name

    @property
    def handle(self) -> int:
        """The integer the FFI calls find this table by."""
        return self._native.handle

    def state(self) -> TableState:
        """Returns a fresh table state, the first link of a chain of table calls.

        Pass it to the first table call of a program
        (``state, batch = table.sample(state, key, ...)``) and each call's
        returned state to the next. A program may start from a fresh one
        (programs on one device run in dispatch order), or take the state an
        earlier program returned. Cheap; call it inside jitted functions too.

        Returns:
          A fresh table state: a uint32 scalar ``jax.Array`` (see
            :mod:`gearjax.state`).

        Raises:
          RuntimeError: the table is closed.

        Examples:
          >>> @jax.jit
          ... def step(state, key):
          ...     state, batch = table.sample(state, key, 32, window=8)
          ...     state, count = table.update_priorities(
          ...         state, batch.keys, jax.numpy.ones(32))
          ...     return state, batch
          >>> state, batch = step(table.state(), jax.random.key(1))
        """
        self._check_open()
        return table_state.initial()

    @property
    def slot_bits(self) -> int:
        """The number of low key bits that name the slot.

        Keys are ``sequence << slot_bits | slot``: the low ``slot_bits`` bits
        name the slot, the rest count insertions."""
        return self._native.slot_bits

    def __len__(self) -> int:
        return self._native.stats()["size"]

    @property
    def num_steps(self) -> int:
        """Steps stored over all live trajectories."""
        return self._native.stats()["num_steps"]

    def stats(self) -> dict[str, Any]:
        """Sizes, counts, bytes and rates, read in one consistent snapshot.

        Counts are totals since creation (or as restored by ``load``); rates
        are those totals over the table's lifetime in this process.
        ``next_sequence`` is the sequence number of the next key; ``alphas``
        the Prioritized alphas the table keeps a sum tree for.

        Returns:
          A new ``dict``: sizes (``size``, ``capacity``, ``max_length``,
            ``num_steps``), counts (``inserts``, ``samples``, ``evictions``,
            ``priority_updates``, ``skipped_updates``), ``next_sequence``,
            what is in flight (``writers_in_flight``, ``samples_in_flight``,
            which counts GPU priority-update kernels too, ``pinned_slots``), bytes (``bytes_reserved``, ``bytes_used``,
            ``bytes_per_step``), ``seconds_alive`` and the rates
            ``insert_rate`` and ``sample_rate`` (per second), ``alphas``, and
            the configuration: ``columns`` (name -> the column as JSON values),
            ``remover``, ``max_times_sampled``, ``placement`` (as asked),
            ``memory`` (where the bytes went), ``name`` and ``closed``.
        """
        s = self._native.stats()
        # Rows, a whole number like the other counts (the core keeps it in
        # float64 for the rate limiter's arithmetic; exact below 2^53).
        s["samples"] = int(s["samples"])
        alive = max(s["seconds_alive"], 1e-9)
        s["insert_rate"] = s["inserts"] / alive
        s["sample_rate"] = s["samples"] / alive
        s["bytes_per_step"] = sum(c.step_bytes for c in self._columns.values())
        s["columns"] = {n: c.to_json() for n, c in self._columns.items()}
        s["remover"] = self._remover
        s["max_times_sampled"] = self._max_times_sampled
        s["placement"] = self._placement
        s["memory"] = self._native.memory
        s["name"] = self._native.name
        s["closed"] = self._native.closed
        return s

    def contents(self) -> dict[str, np.ndarray]:
        """A consistent snapshot of what is stored, in key (insertion) order.

        Sees the table calls that have run. JAX dispatches compiled programs
        asynchronously: to see what a program did, block on the table state
        it returned first (``jax.block_until_ready(state)``); eager calls
        have run when they return.

        Returns:
          ``{"key": int64[N], "length": int64[N], "priority": float64[N],
            "times_sampled": int64[N]}``, NumPy arrays, one entry per stored
            trajectory; ``times_sampled`` counts the draws counted against
            ``max_times_sampled`` (all 0 when the table has none). A table
            made with ``step_priorities=True`` adds ``"step_priorities":
            float64[sum(length)]``, every trajectory's step priorities back
            to back in the same order
            (``np.split(c["step_priorities"], np.cumsum(c["length"])[:-1])``
            gives them per trajectory).

        Raises:
          RuntimeError: the table is closed.
          ValueError: a priority update of a GPU program failed (it could not
            fail its own program; the next call on the table raises it).
        """
        self._check_open()
        # The step priorities are read with the items, at one moment: read
        # after them, an update in between could leave a trajectory's
        # priority other than the largest of its steps'.
        keys, slots, lengths, priorities, _, times_sampled, *steps = self._native.pin_items(
            steps=self._step_priorities)
        self._native.unpin_slots(slots)  # nothing more is read from the slots
        found = {"key": keys, "length": lengths, "priority": priorities,
                 "times_sampled": times_sampled}
        if self._step_priorities:
            found["step_priorities"] = steps[0]
        return found

    def get(self, key: int) -> dict[str, np.ndarray]:
        """Returns a copy of one stored trajectory.

        Sees the table calls that have run, like ``contents``.

        Args:
          key: the trajectory's key (a Python or NumPy integer).

        Returns:
          A new ``dict``, column name -> NumPy array ``[T, *shape]`` of the
            column's dtype, ``T`` the trajectory's length.

        Raises:
          TypeError: ``key`` is not an integer (bools are refused).
          KeyError: no trajectory with that key is stored.
          RuntimeError: the table is closed.
        """
        if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)):
            raise TypeError(f"a key is an integer, got {key!r}")
        self._check_open()
        if not 0 <= int(key) <= _checks.INT64_MAX:
            raise KeyError(f"no trajectory with key {key} is stored")
        _, slots, lengths, _, _, _ = self._native.pin_items(np.array([key], dtype=np.int64))
        if len(slots) == 0:
            raise KeyError(f"no trajectory with key {key} is stored")
        try:
            slot, length = int(slots[0]), int(lengths[0])
            return {n: self._native.read_slot(c, slot, length)
                    .view(column.dtype).reshape(length, *column.shape)
                    for c, (n, column) in enumerate(self._columns.items())}
        finally:
            self._native.unpin_slots(slots)

    def __repr__(self) -> str:
        state = "closed" if self._native.closed else f"size={len(self)}"
        cols = ", ".join(f"{n}: {c.dtype}{list(c.shape)}" for n, c in self._columns.items())
        name = f"{self.name!r}, " if self.name else ""
        return (f"gearjax.Table({name}{state}, capacity={self._capacity}, "
                f"max_length={self._max_length}, columns={{{cols}}})")

    def _repr_html_(self) -> str:
        """What Jupyter shows: size, occupancy, placement, columns, histograms
        of priorities and lengths (gearjax/display.py)."""
        from gearjax import display
        return display.table_html(self)

    # ------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Closes the table and frees its memory.

        Blocked inserts and samples wake up and raise; later calls raise
        ``RuntimeError`` (``stats()``, ``len``, ``num_steps`` and the
        properties still answer); compiled programs that touch the table fail with an
        error naming it. Samples, reads and inserts already inside the table
        finish first: close waits for them (up to ``CLOSE_WAIT_SECONDS``, then
        it warns and keeps the memory: a later ``close()`` frees it once they
        have left, and so does dropping the table). Idempotent. A table is
        also a context manager: ``with table:`` closes it on exit.

        Warns:
          RuntimeWarning: samples or inserts were still inside the table after
            ``CLOSE_WAIT_SECONDS``; the memory stays until a later ``close()``
            once they have left, or until the table is dropped.
        """
        if not self._native.close(CLOSE_WAIT_SECONDS):
            warnings.warn(f"{self!r}: samples or inserts still inside the table after "
                          f"{CLOSE_WAIT_SECONDS} s; its memory stays until close() is called "
                          f"again once they have left, or the table is dropped",
                          RuntimeWarning, stacklevel=2)
        self._spec.release()  # its eager calls' programs go now (gearjax/_sample.py)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._native.closed

    def __enter__(self) -> "Table":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._native.closed:
            raise errors.ClosedError(f"{self!r} is closed")
        # A priority update applied by a GPU stream callback cannot fail its
        # own program; a bad value there is kept and raised (ValueError) by the
        # next call on the table, once (docs: Semantics in jit).
        self._native.raise_deferred_error()

    def _wait_for_state(self, state: TableState) -> None:
        """An eager call given ``state`` runs after the program that returned
        it: waits for that program, then raises what a GPU update of it left
        for the table's next call (which this call is)."""
        _call_forms.wait_for(state)
        self._native.raise_deferred_error()

    def _eager(self, result: Any, ready: jax.Array) -> Any:
        """An eager call (its results are arrays, not tracers) waits for its
        own results before it returns, so its errors are raised at the call on
        every platform: a GPU reports a custom call's error only when its
        results are read, and a GPU priority update's bad value only once the
        stream has applied it (kept for the next call: raised here instead).
        Traced calls return at once.

        ``ready`` is the table state the call's program returned (part of
        ``result`` in the state form only): every result of one program
        becomes ready (or fails) at once, so waiting for that one waits for
        all: one wait, not a walk over the batch's arrays and a wait for each."""
        if not isinstance(ready, jax.core.Tracer):
            try:
                ready.block_until_ready()
            except jax.errors.JaxRuntimeError as e:
                errors.raise_if_interrupted(e)
                raise
            self._native.raise_deferred_error()
            if isinstance(result, tuple) and result[0] is ready:
                # The state form: the caller passes this state to its next
                # call, which need not wait for it again.
                _call_forms.mark_ready(ready)
        return result

    # ---------------------------------------------------------------- insert
    def insert(self, trajectory: Mapping[str, Any], priority: Any = 1.0) -> int:
        """Copies one trajectory into the table and returns its key.

        Acts at once, from any thread, with the GIL released while copying;
        may evict (``remover``) and wait on the rate limiter. Arrays may be
        NumPy, JAX or any DLPack array, converted to each column's dtype
        value by value (docs: Tables, "Inserting" and "Conversions").

        Args:
          trajectory: column name -> array ``[T, *shape]``, every column of
            the table and no other, all with the same ``T`` in
            ``[1, max_length]``.
          priority: 0 or a float in [2.2250738585072014e-308,
            1.0000000150474662e+30] (used by ``Prioritized``, ``TopK`` and the
            ``"min_priority"`` remover). On a table made with
            ``step_priorities=True``, also an array of ``T`` such values, one
            per step (``PrioritizedSteps``; the trajectory's own priority is
            their largest); a scalar sets every step.

        Returns:
          The new trajectory's key (an ``int``).

        Raises:
          TypeError: ``trajectory`` is not a mapping; a column holds
            non-numeric data or data whose kind cannot convert to the
            column's dtype (float into integer, complex into real);
            ``priority`` is not a real number (or, on a table made with
            ``step_priorities=True``, an array of them).
          ValueError: a column is missing or unknown; a column's shape is not
            ``[T, *shape]``; the columns differ in length; ``T`` is outside
            ``[1, max_length]``; a value does not fit the column's dtype;
            ``priority`` is out of range; an array of priorities not of ``T``
            of them.
          TimeoutError: the rate limiter held the insert back past its
            timeout.
          RuntimeError: the table is closed (or was closed while the insert
            waited).

        Examples:
          >>> key = table.insert({"obs": np.zeros((10, 3), np.float32),
          ...                     "reward": np.ones(10, np.float32)},
          ...                    priority=2.0)
          >>> table.get(key)["reward"].shape
          (10,)
        """
        self._check_open()
        arrays, length = _inserts.trajectory_bytes(self._columns, self._max_length, trajectory)
        # A Python number first: np.ndim costs an insert about a fifth more.
        if isinstance(priority, (int, float)) or np.ndim(priority) == 0:
            return self._native.insert(arrays, length, _checks.priority(priority))
        if not self._step_priorities:
            raise TypeError(f"priority must be a real number, got {priority!r} (one priority "
                            f"per step needs a table made with step_priorities=True)")
        steps = _checks.priorities(priority, "step priorities")
        if steps.shape != (length,):
            raise ValueError(f"step priorities must be one per step, shape ({length},); got "
                             f"shape {steps.shape}")
        return self._native.insert(arrays, length, float(steps.max()), steps)

    def _insert_checked(self, arrays: Sequence[np.ndarray], length: int, priority: float) -> int:
        """Inserts columns already checked and of the columns' dtypes (the
        writer's buffers), ``length`` steps each, in column order."""
        self._check_open()
        return self._native.insert([np.ascontiguousarray(a).reshape(-1).view(np.uint8)
                                    for a in arrays], length, priority)

    def insert_step(self, step: Mapping[str, Any], priority: float = 1.0) -> int:
        """Inserts one step as a trajectory of length 1 and returns its key.

        The insert of transition replay (one transition per trajectory, in a
        table of ``max_length=1``; see "Transition replay" in the docs).

        Python numbers and NumPy scalars for columns of step shape ``()``,
        and NumPy arrays of a column's own dtype and shape, go straight to
        native code, at about the cost of a NumPy ring-buffer write; anything
        else is checked and converted as :meth:`insert` does, and refused as
        it refuses: every path takes and refuses the same values.

        Args:
          step: column name -> a value of the column's step shape, with no
            time axis, for every column of the table.
          priority: as for :meth:`insert`.

        Returns:
          The new trajectory's key (an ``int``).

        Raises:
          TypeError: ``step`` is not a mapping; otherwise as :meth:`insert`.
          ValueError: as :meth:`insert` (a value of another shape than the
            column's step shape, say).
          TimeoutError: as :meth:`insert`.
          RuntimeError: the table is closed.

        Examples:
          >>> transitions = gx.Table({"obs": gx.Column((3,), "float32"),
          ...                         "action": gx.Column((), "int32")},
          ...                        capacity=100_000, max_length=1)
          >>> key = transitions.insert_step({"obs": np.zeros(3, np.float32),
          ...                                "action": 2})
        """
        key = self._native.insert_step(step, priority)
        if key is not None:
            return key
        self._check_open()
        if not isinstance(step, Mapping):
            raise TypeError(f"a step must be a mapping of column name -> array, got "
                            f"{type(step).__name__}")
        return self.insert({n: host_array(v)[None] for n, v in step.items()}, priority)

    def writer(self, max_length_overflow: str = "error", overlap: int = 0) -> "Writer":
        """Returns a streaming writer: append one step at a time, end episodes.

        Cheap (its buffers are made on the first append); make one per actor
        thread. See :class:`gearjax.writer.Writer` and the docs' "The writer"
        page.

        Args:
          max_length_overflow: what an episode longer than ``max_length``
            does: ``"error"`` (the step that would overflow raises) or
            ``"split"`` (it goes in as consecutive pieces of at most
            ``max_length`` steps).
          overlap: with ``"split"``, how many of a piece's last steps the next
            piece repeats at its start, in ``[0, max_length - 1]``.

        Returns:
          A new :class:`gearjax.writer.Writer` on this table.

        Raises:
          TypeError: ``overlap`` is not an integer.
          ValueError: ``max_length_overflow`` is neither ``"error"`` nor
            ``"split"``; ``overlap`` is out of range, or not 0 without
            ``"split"``.
          RuntimeError: the table is closed.

        Examples:
          >>> with table.writer() as writer:
          ...     for t in range(5):
          ...         writer.append({"obs": np.zeros(3, np.float32),
          ...                        "reward": np.float32(t)})
          ...     key = writer.end_episode(priority=1.0)
        """
        from gearjax.writer import Writer
        self._check_open()
        return Writer(self, max_length_overflow, overlap)

    def insert_many(self, trajectories: Sequence[Mapping[str, Any]],
                    priorities: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
        """Inserts several trajectories and returns their keys.

        Every trajectory and priority is checked before the first is
        inserted. Only a rate-limiter timeout (or a close) can stop the
        inserts part-way; the error then says how many went in (the first
        ones, in order).

        Args:
          trajectories: a sequence of trajectories, each as :meth:`insert`
            takes it.
          priorities: one priority per trajectory (as :meth:`insert` takes
            them), or ``None``: 1.0 each.

        Returns:
          The keys, a NumPy int64 array ``[N]``, in the order given.

        Raises:
          TypeError: ``trajectories`` is not a sequence of mappings
            (a single mapping is refused); ``priorities`` is not a sequence;
            a trajectory or priority fails :meth:`insert`'s checks (the
            message names its index). Nothing is inserted.
          ValueError: ``priorities`` has another length than
            ``trajectories``; a trajectory or priority fails
            :meth:`insert`'s checks (the message names its index). Nothing is
            inserted.
          TimeoutError: the rate limiter held an insert back past its timeout;
            the trajectories before it are inserted.
          RuntimeError: the table is closed (or was closed part-way; the
            trajectories before are inserted).
        """
        self._check_open()
        if isinstance(trajectories, Mapping) or not isinstance(trajectories, Sequence):
            raise TypeError("trajectories must be a sequence of mappings")
        if priorities is None:
            priorities = [1.0] * len(trajectories)
        elif isinstance(priorities, (str, bytes)) or not hasattr(priorities, "__len__"):
            raise TypeError(f"priorities must be a sequence of numbers, got {priorities!r}")
        elif len(priorities) != len(trajectories):
            raise ValueError(f"got {len(priorities)} priorities for "
                             f"{len(trajectories)} trajectories")
        checked = []
        for i, (t, p) in enumerate(zip(trajectories, priorities)):
            try:
                checked.append((*_inserts.trajectory_bytes(self._columns, self._max_length, t),
                                _checks.priority(p)))
            except (TypeError, ValueError) as e:
                raise type(e)(f"trajectory {i}: {e}") from None
        # Refused whole where fewer keys are left than trajectories (a
        # table of few key bits: a ShardedTable's shards), not part-way.
        self._native.check_keys_left(len(checked))
        keys = []
        try:
            for arrays, length, priority in checked:
                keys.append(self._native.insert(arrays, length, priority))
        except (TimeoutError, RuntimeError) as e:
            raise type(e)(f"{e} (insert_many stopped after inserting {len(keys)} of "
                          f"{len(checked)} trajectories, keys {keys[:1]}..{keys[-1:]})") from None
        return np.array(keys, dtype=np.int64)

    @overload
    def insert_batch(self, state: TableState, columns: Mapping[str, Any], lengths: Any,
                     priorities: Any = None) -> tuple[TableState, jax.Array | np.ndarray]: ...

    @overload
    def insert_batch(self, columns: Mapping[str, Any], lengths: Any,
                     priorities: Any = None) -> np.ndarray: ...

    @first_overload
    def insert_batch(self, *args: Any, **kwargs: Any) -> Any:
        """Inserts N trajectories given as padded arrays, from inside jit too.

        For rollouts produced on the device. An XLA FFI custom call on the CPU
        and the GPU. Two forms:

        * ``state, keys = table.insert_batch(state, columns, lengths,
          priorities=None)``: ordered by a table state as :meth:`sample` is;
          returns the state's successor and the keys. The form for compiled
          code.
        * ``keys = table.insert_batch(columns, lengths, priorities=None)``:
          eager calls only; returns the keys. Traced, it raises ``TypeError``.

        Called eagerly (either form) on a host table, the rows go straight to
        the native core, as :meth:`insert_many`'s do: no program is made or
        run, priorities are kept as given (a compiled call passes them as
        float32 without ``jax_enable_x64``), and the keys come back as a
        NumPy array.

        Arguments (both forms):

        * ``state`` (``TableState``, first form only): the table state (from
          :meth:`state`, or the previous table call).
        * ``columns`` (``Mapping[str, Any]``): every column of the table and no
          other; ``columns[name]`` is ``[N, T, *shape]`` with
          ``1 <= T <= max_length`` and ``N >= 1``, NumPy or JAX arrays.
        * ``lengths``: integers ``[N]``; the first ``lengths[i]`` steps of row
          i are real, ``lengths[i]`` in ``[1, T]``.
        * ``priorities``: real numbers ``[N]``, each as :meth:`insert` takes
          it, or ``None``: 1.0 each.

        Returns:
          The keys, int64 ``[N]``: a ``jax.Array`` in compiled code (and
            eagerly on a table in GPU memory), a NumPy array from an eager call
            on a host table; in the taught form ``(state, keys)``, the state's
            successor first.

        Raises:
          TypeError: ``columns`` is not a mapping; a column holds non-numeric
            data; a conversion to a column's dtype is refused (see below); a
            64-bit column without ``jax_enable_x64``; concrete priorities that
            are not real numbers; ``state`` is not a table state; the
            stateless form traced (inside jit, scan, vmap, grad).
          ValueError: columns missing or unknown; a column's shape is not
            ``[N, T, *shape]`` with the same ``N`` and ``T`` as the others;
            ``N < 1``; ``T`` outside ``[1, max_length]``; lengths or
            priorities of the wrong shape or dtype, or concrete ones out of
            range (or, in a compiled call, a priority that would become 0 in
            float32 without ``jax_enable_x64``): nothing is inserted; ``state`` was already
            given to another table call of the function being traced.
          RuntimeError: the table is closed. Errors found when the call runs
            (traced lengths or priorities out of range, a rate-limiter
            timeout) are raised by XLA: ``jax.errors.JaxRuntimeError`` (a
            ``RuntimeError``), or ``ValueError`` with the same message from a
            later call of a compiled table-state program on JAX's fast path;
            :func:`gearjax.table_error` names either (docs: Semantics in jit,
            "Errors in compiled code").

        Every row is checked before the first insert: bad values insert
        nothing (docs: Tables, "Inserting").

        Examples:
          >>> @jax.jit
          ... def store(state, obs, reward, lengths):
          ...     return table.insert_batch(state, {"obs": obs, "reward": reward},
          ...                               lengths)
          >>> state, keys = store(table.state(), jax.numpy.zeros((4, 20, 3)),
          ...                     jax.numpy.zeros((4, 20)),
          ...                     jax.numpy.array([20, 5, 12, 1]))
        """
        state, args = _call_forms.split_insert_batch_state(args, kwargs)
        return self._insert_batch(state, *args, **kwargs)

    def _insert_batch(self, state: TableState | None, columns: Mapping[str, Any], lengths: Any,
                      priorities: Any = None) -> Any:
        self._check_open()
        order = _call_forms.eager_state(
            "table.insert_batch(columns, lengths, ...)",
            "state, keys = table.insert_batch(state, columns, lengths, ...)") \
            if state is None else table_state.consume(state, self, self._spec.handle)
        # Called eagerly on a host table, the rows go straight to the native
        # core, as insert_many's do: no program, no JAX arrays made of them.
        given = [state, lengths, priorities, *(columns.values() if isinstance(columns, Mapping)
                                                else ())]
        host = self._native.memory != "device" and not _call_forms.tracing() and \
            not any(isinstance(x, jax.core.Tracer) for x in given)
        arrays = _inserts.batch_columns(self._columns, self._max_length, columns, host)
        rows, steps = arrays[0].shape[:2]
        lengths = _inserts.batch_lengths(lengths, rows, steps, host)
        priorities = _inserts.batch_priorities(priorities, rows, host)
        arrays = _inserts.convert_batch_columns(self._columns, arrays, host)
        if host:
            if state is not None:
                self._wait_for_state(state)  # after the state's program, as its calls are
            # NumPy keys, as insert_many returns them: a JAX int64 array would
            # cost a dispatch (without jax_enable_x64, a custom call: jnp.asarray
            # narrows to int32), two thirds of the call.
            keys = self._insert_rows(arrays, rows, steps, lengths, priorities)
            return keys if state is None else (state, keys)
        try:
            order, keys = self._spec.insert_batch_program()(order, arrays, lengths,
                                                            priorities)
            return self._eager(keys if state is None else (order, keys), order)
        except ValueError as e:
            errors.reraise(e)

    def _insert_rows(self, arrays: list[np.ndarray], rows: int, steps: int,
                     lengths: np.ndarray, priorities: np.ndarray) -> np.ndarray:
        """insert_batch's rows, checked, through the native core (eager, host
        tables). A failure as it runs is raised as the compiled call raises it
        (jax.errors.JaxRuntimeError, its message tagged as gearjax.table_error
        reads it): a rate limiter's timeout, a close meanwhile."""
        try:
            # As bytes: NumPy hands ml_dtypes arrays (bfloat16, ...) to no buffer
            # protocol, and the core copies bytes anyway.
            return self._native.insert_rows([a.reshape(-1).view(np.uint8) for a in arrays],
                                            rows, steps, lengths, priorities)
        except (_gearjax.TableTimeoutError, _gearjax.TableClosedError) as e:
            raise errors.as_call_failure(e) from None

    # ---------------------------------------------------------------- sample
    @overload
    def sample(self, state: TableState, rng_key: jax.Array, batch_size: int,
               window: int | None = None, strategy: Strategy = Uniform(),
               pad: str | None = None, *, cut: str = "start",
               replace: bool = True, numpy: bool = False) -> tuple[TableState, Batch]: ...

    @overload
    def sample(self, rng_key: jax.Array, batch_size: int, window: int | None = None,
               strategy: Strategy = Uniform(), pad: str | None = None, *,
               cut: str = "start", replace: bool = True, ordered: bool | None = None,
               numpy: bool = False) -> Batch: ...

    @first_overload
    def sample(self, *args: Any, **kwargs: Any) -> Any:
        """Samples ``batch_size`` windows of ``window`` steps.

        Two forms, the same arguments otherwise (docs: Semantics in jit):

        * ``state, batch = table.sample(state, rng_key, batch_size, ...)``:
          takes a table state (from :meth:`state`) and returns its successor;
          calls ordered this way keep JAX's fast dispatch path. The form for
          compiled code (``jax.jit``, ``lax.scan``, ``vmap``, ``grad``).
        * ``batch = table.sample(rng_key, batch_size, ...)``: eager calls
          only (a notebook, a data loader's loop), each from a fresh state;
          traced, it raises ``TypeError`` naming the state form.

        Args (both forms, in this order):
          state: a ``TableState`` (first form only).
          rng_key: a JAX PRNG key (``jax.random.key(...)`` or a legacy
            ``uint32[2]`` key); the same key and contents give the same batch.
          batch_size: rows, in [1, 2**31 - 1].
          window: steps per row, in [1, max_length]; ``None`` (default):
            whole trajectories from step 0, padded to ``max_length``.
          strategy: which trajectories are drawn (default ``gx.Uniform()``;
            ``Timestep()``, ``Prioritized(alpha)``, ``TopK(k)``, ``Recent(n)``).
          pad: ``"left"`` (when unset) or ``"right"``, for ``cut="start"``.
          cut: keyword; where the window lies in its trajectory: ``"start"``
            (default), ``"end"`` or ``"full"`` (docs: Windows and padding).
          replace: keyword; ``False`` draws distinct trajectories in a batch.
          ordered: deprecated, does nothing (eager calls run in order;
            compiled calls are ordered by their state); warns.
          numpy: keyword, eager calls on a host table only; ``True``: the
            batch's arrays are NumPy arrays, selected and gathered by the
            native core straight into them, with no XLA program (the
            fastest eager sample; ``torch.from_numpy`` shares them). The same
            key and table contents give the same batch, in the same dtypes,
            as without it. It runs when called, like ``insert_many``: a
            program still running may not have made its table calls yet
            (without ``numpy=True`` an eager sample runs after the programs
            dispatched before it); pass the state that program returned,
            and it waits for them first.

        Returns:
          The batch, a :class:`gearjax.Batch`; in the taught form
          ``(state, batch)``, the state's successor first.

        Raises:
          TypeError: an argument of the wrong type (``batch_size`` or
            ``window`` not an integer, an unknown strategy, a ``replace`` or
            ``ordered`` that is not a bool, ``rng_key`` not one PRNG key, a
            ``state`` that is not a table state); the stateless form traced.
          ValueError: an argument out of range or contradicting another (an
            unknown ``cut`` or ``pad``; ``cut="end"`` or ``"full"`` without a
            ``window``; ``pad`` with ``cut="full"`` or ``"right"`` with
            ``"end"``; ``replace=False`` with ``TopK(k)`` or ``Recent(n)``
            and a batch over ``k`` (``n``); a ninth ``Prioritized`` alpha; results
            larger than this machine's memory; a ``SampleToInsertRatio``
            whose ``error_buffer`` is under ``batch_size``; a ``state``
            already given to another call of the function being traced).
          RuntimeError: the table is closed. A sample that fails as it runs
            (an empty table, a rate limiter's timeout, too few eligible
            trajectories) raises ``jax.errors.JaxRuntimeError``, or
            ``ValueError`` at a later call of a compiled table-state program;
            with ``numpy=True`` (no program) ``TimeoutError`` (a shortfall or
            a timeout) or ``RuntimeError`` (closed meanwhile), as a host
            insert does; :func:`gearjax.table_error` names each (docs:
            Semantics in jit, "Errors in compiled code").

        Examples:
          >>> state = table.state()
          >>> state, batch = table.sample(state, jax.random.key(0), 64,
          ...                             window=8, strategy=gx.Prioritized(0.6))
          >>> batch["obs"].shape, batch.mask.shape
          ((64, 8, 3), (64, 8))
        """
        state, args = _call_forms.split_state(args)
        return self._sample(state, *args, **kwargs)

    def _sample(self, state: TableState | None, rng_key: jax.Array, batch_size: int,
                window: int | None = None, strategy: Strategy = Uniform(),
                pad: str | None = None, *, cut: str = "start", replace: bool = True,
                ordered: bool | None = None, numpy: bool = False) -> Any:
        self._check_open()
        order = _call_forms.eager_state(
            "table.sample(rng_key, ...)", "state, batch = table.sample(state, rng_key, ...)") \
            if state is None else table_state.consume(state, self, self._spec.handle)
        args = self._checked_sample_args(batch_size, window, strategy, pad, cut, replace)
        _sample_args.check_rng_key(rng_key)
        if ordered is not None:
            _call_forms.warn_ordered(ordered)
        if numpy is not False:
            numpy = self._numpy_sample_allowed(numpy)
        if isinstance(args.strategy, (Prioritized, PrioritizedSteps)):
            self._check_alpha_room(args.strategy)
        if numpy:
            if state is not None:
                self._wait_for_state(state)  # after the state's program, as its calls are
            try:
                batch = _eager_sample.sample_numpy(self._native, rng_key, args, self._capacity,
                                                   self._spec.columns)
            except ValueError as e:  # a failure as it ran: raised as the program's would be
                errors.reraise(e)
            return batch if state is None else (state, batch)
        try:
            order, batch = _sample.sample(rng_key, order, spec=self._spec, args=args)
            return self._eager(batch if state is None else (order, batch), order)
        except ValueError as e:
            errors.reraise(e)

    def _check_alpha_room(self, strategy: Prioritized | PrioritizedSteps) -> None:
        """Refuses (ValueError, at the call, eager or traced) an alpha of
        ``strategy`` beyond the sum trees the table keeps for it."""
        tree = (strategy.code, strategy.alpha)
        if tree in self._priority_trees:
            return
        alphas = self._native.alphas(strategy.code)
        if strategy.alpha in alphas:
            # An open table keeps its trees: asked once, not on every call.
            self._priority_trees.add(tree)
        elif len(alphas) >= _checks.MAX_PRIORITY_TREES:
            name = type(strategy).__name__
            raise ValueError(f"this table keeps sum trees for at most "
                             f"{_checks.MAX_PRIORITY_TREES} {name} alphas ({alphas}); "
                             f"{name}({strategy.alpha}) would be one more")

    def _numpy_sample_allowed(self, numpy: Any) -> bool:
        """``sample(numpy=...)`` checked: a bool, and ``True`` only for an
        eager call on a host table."""
        numpy = _checks.flag("numpy", numpy)
        if numpy and _call_forms.tracing():
            raise TypeError("sample(numpy=True) returns NumPy arrays and is for eager calls: "
                            "a traced sample's batch is JAX arrays (drop numpy=True)")
        if numpy and self._native.memory == "device":
            raise ValueError(f"{self!r} lives in GPU memory: numpy=True samples host tables "
                             f"(drop it, or jax.device_get the batch)")
        return numpy

    def _checked_sample_args(self, batch_size: Any, window: Any, strategy: Any, pad: Any,
                             cut: Any, replace: Any) -> SampleArgs:
        """The sample arguments normalised and checked against this table
        (the memory its results need, its rate limiter's batch, step
        priorities), each distinct set once: they were a sizeable part of
        what an eager sample cost over the jitted call. Keyed by the values
        and their types (``True`` must not pass as a checked ``1``);
        arguments that cannot be hashed are checked every time."""
        signature = (type(batch_size), batch_size, type(window), window, strategy, type(pad),
                     pad, type(cut), cut, type(replace), replace)
        try:
            args = self._checked_samples.get(signature)
        except TypeError:  # an unhashable argument: checked (and refused) below
            signature, args = None, None
        if args is not None:
            return args
        args = _sample_args.normalise(batch_size, window, strategy, pad, cut, replace,
                                      max_length=self._max_length)
        _sample_args.check_room("a sample", args, self._columns, self._rate_limiter)
        if isinstance(args.strategy, PrioritizedSteps) and not self._step_priorities:
            raise ValueError("PrioritizedSteps draws steps by their own priorities: make the "
                             "table with step_priorities=True")
        if signature is not None:
            if len(self._checked_samples) >= _CHECKED_SAMPLES_KEPT:
                self._checked_samples.clear()
            self._checked_samples[signature] = args
        return args

    # ------------------------------------------------------------ priorities
    @overload
    def update_priorities(self, state: TableState, keys: Any, priorities: Any, *,
                          steps: Any = None) -> tuple[TableState, jax.Array]: ...

    @overload
    def update_priorities(self, keys: Any, priorities: Any, *, steps: Any = None) -> Any: ...

    @first_overload
    def update_priorities(self, *args: Any, **kwargs: Any) -> Any:
        """Sets the priorities of trajectories by key.

        Keys no longer stored (evicted meanwhile) are skipped, and for a
        repeated key the last value wins (docs: Tables, "Priorities").

        Two forms:

        * ``state, count = table.update_priorities(state, keys, priorities)``
          (the form for compiled code): an XLA FFI custom call ordered by the
          table state (see :meth:`sample`), in or out of jit;
          ``count`` (an int32 scalar) is the number of entries whose key was
          still stored.
        * ``table.update_priorities(keys, priorities)`` with concrete arrays
          (NumPy or JAX), outside traced code: checks its input, applies it at
          once and returns ``count`` as a Python int. Traced, it raises
          ``TypeError`` naming the state form.

        Arguments (all forms):

        * ``state`` (``TableState``, first form only): the table state.
        * ``keys``: integer keys of any shape (flattened), int32, uint32 or
          int64 or narrower (uint64 is refused).
        * ``priorities``: real numbers (integer or floating), as many as
          ``keys``: 0 or in [2.2250738585072014e-308, 1.0000000150474662e+30]
          (``jnp.clip(p, 0, 1e30)`` in float32 passes). On a table with step
          priorities, a trajectory's priority sets every one of its steps.
        * ``steps`` (keyword; tables made with ``step_priorities=True``):
          per-step priorities instead. ``keys`` is then ``[B]`` and
          ``priorities`` and ``steps`` are ``[B, W]``: entry ``[b, j]`` sets
          step ``steps[b, j]`` of trajectory ``keys[b]``, and a step below 0
          is skipped (padding). For a sampled batch,
          ``steps=jnp.where(batch.mask, batch.timestep, -1)`` (padding's
          timestep is 0), or ``steps=batch.timestep`` where no window is
          padded (``cut="full"``). A named step
          past its trajectory's length is refused (nothing changes); each
          trajectory's own priority becomes the largest of its steps'.

        Returns:
          ``count``, the number of entries whose key was still stored: an
            int32 scalar ``jax.Array`` in the state form in compiled code
            (``(state, count)``, the state's successor first; -1 for a GPU
            update that failed, below); the state form called eagerly applies
            it at once, after the state's program, as the stateless form does,
            and returns ``(state, count)`` with a NumPy ``int32`` count; a
            Python ``int`` from the stateless form.

        Raises:
          TypeError: ``keys`` are not integers (or are uint64);
            ``priorities`` are not real numbers; ``state`` is not a table
            state; two arguments whose first is a uint32 scalar (a state
            with its priorities forgotten, or a key that reads as one); the
            stateless form traced.
          ValueError: ``keys`` and ``priorities`` differ in size (with
            ``steps``: ``priorities`` and ``steps`` are not ``[len(keys), W]``
            alike, the table keeps no step priorities, or a step lies past its
            trajectory's length); a priority
            is out of range (outside jit; nothing changes); ``state`` was
            already given to another table call of the function being traced;
            an earlier GPU update failed (raised by the next call on the
            table, once).
          RuntimeError: the table is closed. In compiled code on the CPU, a
            priority out of range fails the program when it runs
            (``jax.errors.JaxRuntimeError``, a ``RuntimeError``, or
            ``ValueError`` from a later call on JAX's fast path;
            :func:`gearjax.table_error` says ``"failed"`` for both; nothing
            changes).

        Compiled updates run in order with the program's samples and inserts;
        a GPU update's bad value is raised by the table's next call (docs:
        Semantics in jit, "A bad priority in a GPU update is reported late").

        Examples:
          >>> state, batch = table.sample(state, jax.random.key(2), 64, window=8)
          >>> td_error = jax.numpy.ones(64)  # from the learner
          >>> state, count = table.update_priorities(state, batch.keys,
          ...                                        td_error + 1e-6)
        """
        state, args = _call_forms.split_update_state(args, kwargs)
        return self._update_priorities(state, *args, **kwargs)

    def _update_priorities(self, state: TableState | None, keys: Any, priorities: Any, *,
                           steps: Any = None) -> Any:
        self._check_open()
        if steps is not None and not self._step_priorities:
            raise ValueError("this table keeps one priority per trajectory: steps= needs a "
                             "table made with step_priorities=True")
        if state is None:
            self._refuse_traced_update(steps)
            order = None
        else:
            order = table_state.consume(state, self, self._spec.handle)
        traced = any(isinstance(x, jax.core.Tracer) for x in (state, keys, priorities, steps))
        # A state given inside a trace is the compiled form, though it and the
        # arrays be concrete (a state made outside the trace, a constant): the
        # call goes into the program being traced, as sample's does.
        if not traced and state is not None:
            traced = _call_forms.tracing()
        if not traced:
            if state is None:
                return self._update_host_priorities(keys, priorities, steps)
            # Called eagerly, the state form does what the stateless form
            # does, once the calls before it (the state's program) have run:
            # no program of its own to dispatch and wait for.
            self._wait_for_state(state)
            return state, np.int32(self._update_host_priorities(keys, priorities, steps))
        keys, priorities, steps = _update_args.operands(jnp, keys, priorities, steps)
        if keys.dtype not in (jnp.int32, jnp.uint32, jnp.int64):
            keys = keys.astype(jnp.int32)  # int8/int16/uint8/uint16 widen exactly
        if priorities.dtype not in (jnp.float32, jnp.float64):
            priorities = priorities.astype(_inserts.widest_float())
        if steps is None:
            program, operands = self._spec.update_priorities_program(), (keys, priorities)
        else:
            if steps.dtype not in (jnp.int32, jnp.int64):
                steps = steps.astype(jnp.int32)
            program = self._spec.update_step_priorities_program()
            operands = (keys, steps, priorities)
        try:
            order, count = program(order, *operands)
            return self._eager((order, count), order)
        except ValueError as e:
            errors.reraise(e)

    def _refuse_traced_update(self, steps: Any) -> None:
        """While tracing, refuses an update that would run now, at trace time
        (its arrays are concrete), naming the state form."""
        if _call_forms.tracing():
            form = "keys, priorities" if steps is None else "keys, priorities, steps=..."
            _call_forms.refuse_traced(f"table.update_priorities({form})",
                                      f"state, count = table.update_priorities(state, {form})")

    def _update_host_priorities(self, keys: Any, priorities: Any, steps: Any) -> int:
        """An eager update of concrete arrays, checked and applied by the
        native core at once; the number of entries whose key was stored."""
        keys, priorities, steps = _update_args.operands(np, keys, priorities, steps)
        keys = np.ascontiguousarray(keys, np.int64)
        if steps is None:
            return self._native.update_priorities(keys, _checks.priorities(priorities))
        return self._native.update_step_priorities(
            keys, np.ascontiguousarray(np.ravel(steps), np.int64),
            np.ravel(_update_args.step_values(priorities, steps)), int(priorities.shape[1]))

    # ------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> None:
        """Writes a checkpoint atomically; see :mod:`gearjax.checkpoint`.

        Sees the table calls that have run, like ``contents``: block on a
        program's table state first to include its calls. The checkpoint is the table at one
        moment, also while other threads insert. It is written to a temporary
        file beside ``path``, checked as loading would check it, and renamed
        over ``path``, so a crash mid-save leaves the previous checkpoint
        intact (docs: Checkpoints).

        Args:
          path: the file to write (``str``, ``bytes`` or ``os.PathLike``); a
            symbolic link is followed.

        Raises:
          RuntimeError: the table is closed.
          TypeError: ``path`` is not a ``str``, ``bytes`` or ``os.PathLike``.
          ValueError: ``path`` is empty or holds a NUL byte.
          FileExistsError: ``path`` exists and is not a regular file (a
            directory, a device, a FIFO, a socket); it is left as it was.
          OSError: the file cannot be written (the message names ``path``).
          gearjax.CheckpointError: the file written would not load (a bug in
            gearjax); ``path`` is left as it was.

        Examples:
          >>> table.save("/tmp/replay.gx")
          >>> restored = gx.Table.load("/tmp/replay.gx", placement="host")
          >>> restored.close()
        """
        self._check_open()
        checkpoint.save(self._native, self._checkpoint_header(), path)

    def _checkpoint_header(self) -> dict[str, Any]:
        """The configuration a checkpoint records, as JSON values."""
        return {
            "name": self.name,
            "columns": [{"name": n, **c.to_json()} for n, c in self._columns.items()],
            "capacity": self._capacity,
            "max_length": self._max_length,
            "placement": self._placement,
            "remover": self._remover,
            "rate_limiter": rate_limiters.to_json(self._rate_limiter),
            "max_times_sampled": self._max_times_sampled,
            "step_priorities": self._step_priorities,
        }

    @classmethod
    def load(cls, path: str | os.PathLike, placement: str | None = None,
             _key_bits: int = 63) -> "Table":
        """Restores a table saved with :meth:`save`.

        Contents, priorities, insertion order, keys and counters are restored
        exactly.

        The loaded table is a new table with a new handle: make jitted
        functions that close over a table again after loading (docs:
        Semantics in jit, "After Table.load").

        Args:
          path: the checkpoint file (``str``, ``bytes`` or ``os.PathLike``).
          placement: ``"host"``, ``"device"`` or ``"auto"`` to override the
            saved placement (a table saved from GPU memory loads on a machine
            without a GPU with ``placement="host"``); ``None``: as saved.
          _key_bits: as for :class:`Table` (for the shards of a
            :class:`gearjax.ShardedTable`).

        Returns:
          The restored :class:`Table`.

        Raises:
          ValueError: ``placement`` is not ``None``, ``"host"``, ``"device"``
            or ``"auto"``; ``path`` is empty or holds a NUL byte.
          TypeError: ``path`` is not a ``str``, ``bytes`` or ``os.PathLike``.
          FileNotFoundError: there is no file at ``path``.
          gearjax.CheckpointError: the file is not a readable gearjax
            checkpoint (corrupted, truncated, hostile, of an unknown version),
            or the table it describes cannot be made here (e.g. its placement
            is ``"device"`` and there is no GPU). A ``ValueError``.
        """
        if placement is not None and placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        with checkpoint.open_checkpoint(path) as saved:
            try:
                table = cls(saved.columns, saved.capacity, saved.max_length,
                            placement=placement or saved.placement, remover=saved.remover,
                            rate_limiter=saved.rate_limiter, name=saved.name,
                            max_times_sampled=saved.max_times_sampled,
                            step_priorities=saved.step_priorities is not None,
                            _key_bits=_key_bits)
            except (TypeError, ValueError) as e:
                raise checkpoint.CheckpointError(f"{os.fspath(path)}: the table it describes "
                                                 f"cannot be made here: {e}") from None
            try:
                saved.restore(table._native)
            except BaseException as e:
                table.close()
                if isinstance(e, (ValueError, RuntimeError)):
                    raise checkpoint.CheckpointError(f"{os.fspath(path)}: {e}") from None
                raise
        return table


def _resolve_placement(placement: str, table_bytes: int) -> bool:
    """Whether a table of ``table_bytes`` asked to be at ``placement`` goes in
    GPU memory."""
    if placement == "host":
        return False
    free = _gearjax.gpu_free_bytes()
    if placement == "device":
        if free is None:
            raise ValueError("placement='device' needs a GPU, and gearjax sees none (no CUDA "
                             "device, or a build without CUDA); use 'host' or 'auto'")
        return True
    return free is not None and table_bytes <= AUTO_DEVICE_FRACTION * free


def _default_gpu() -> int:
    """The CUDA ordinal of the GPU JAX puts arrays on by default (the one
    ``jax.default_device`` names, else JAX's first local GPU): where a device
    table goes, whichever GPU the calling thread's CUDA runtime has current.
    -1 where JAX has no GPU (the current one)."""
    device = jax.config.jax_default_device
    if not isinstance(device, jax.Device) or device.platform != "gpu":
        try:
            gpus = jax.local_devices(backend="gpu")
        except RuntimeError:  # no GPU backend
            return -1
        if not gpus:
            return -1
        device = gpus[0]
    return int(device.local_hardware_id)


def _check_fits_in_memory(arena_bytes: int, bookkeeping_bytes: int) -> None:
    """Refuses a table larger than this machine's memory: its arena and what
    its bookkeeping holds at its worst (every selector and sum tree its
    samples may build, the scratch of calls over every key; see
    xla_ffi/core/table/footprint.h). It could never be filled, or would be killed
    for memory once sampled by every strategy."""
    memory = _checks.physical_memory()
    if memory is not None and arena_bytes + bookkeeping_bytes > memory:
        raise ValueError(f"this table needs up to {arena_bytes + bookkeeping_bytes} bytes "
                         f"({arena_bytes} for its steps, {bookkeeping_bytes} for its "
                         f"bookkeeping at its worst), more than this machine's {memory} "
                         f"bytes of memory; lower capacity or max_length")
