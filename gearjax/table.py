"""The Table: a fixed-capacity store of trajectories, sampled inside jax.jit.

A table owns ``capacity`` slots of ``max_length`` steps for every column, in one
native arena. Inserting copies a trajectory into a free slot (or evicts one, as
the remover says) and gives it a new key. Sampling is an XLA FFI custom call:
it draws trajectories by a strategy, cuts windows and pads them, all in native
code, from inside jit-compiled programs, scans, or eagerly.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gearjax import _ffi, _gearjax, rate_limiters
from gearjax._gearjax import NativeTable
from gearjax.batch import Batch
from gearjax.columns import Column, is_numeric
from gearjax.strategies import Prioritized, Strategy, Uniform

REMOVERS = {"fifo": 0, "lifo": 1, "min_priority": 2}
PLACEMENTS = ("host", "device", "auto")
# "auto" puts a table in GPU memory when it needs at most this fraction of the
# GPU memory free when it is created; the rest stays for XLA and the model.
AUTO_DEVICE_FRACTION = 0.5
PADS = ("left", "right")


class Table:
    """A trajectory table.

    Args:
      columns: column name -> :class:`Column` (per-step shape, dtype, pad).
      capacity: number of trajectory slots.
      max_length: steps per slot; inserted trajectories have 1..max_length steps.
      placement: where the table's bytes live.

        * ``"host"``: host memory. Where a GPU is present (CUDA build), it is
          pinned and mapped into the GPU's address space, and GPU samples
          gather from it zero-copy: tables may be far larger than GPU memory.
        * ``"device"``: GPU memory, allocated beside XLA's own pool. JAX
          preallocates 75% of the GPU by default, so lower
          ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (or set
          ``XLA_PYTHON_CLIENT_PREALLOCATE=false``) before JAX starts to leave
          room. A device table is sampled and ``insert_batch``-ed from
          programs on the GPU only; ``insert``, ``get`` and ``save`` copy
          through the host. Raises ValueError where there is no GPU.
        * ``"auto"`` (default): ``"device"`` when the table needs at most
          ``AUTO_DEVICE_FRACTION`` (half) of the GPU memory free at creation,
          otherwise ``"host"``. With JAX's default preallocation little is
          free, so ``"auto"`` picks host memory unless the fraction above is
          lowered. ``stats()["memory"]`` says where the table went.
      remover: who leaves when the table is full: ``"fifo"`` (oldest key),
        ``"lifo"`` (newest key) or ``"min_priority"`` (lowest priority, oldest
        first among ties).
      rate_limiter: ``None`` (sample any non-empty table; never wait),
        :class:`gearjax.MinSize` or :class:`gearjax.SampleToInsertRatio`.

    Invariants: keys are unique, increase with insertion order and are never
    reused; a sampled window never mixes data of two trajectories, even while
    other threads insert and evict; a failed call leaves the table unchanged.
    """

    def __init__(self, columns: Mapping[str, Column], capacity: int, max_length: int, *,
                 placement: str = "auto", remover: str = "fifo",
                 rate_limiter: rate_limiters.RateLimiter | None = None):
        if not isinstance(columns, Mapping) or not columns:
            raise TypeError("columns must be a non-empty mapping of name -> gearjax.Column")
        for name, column in columns.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"column names must be non-empty strings, got {name!r}")
            if not isinstance(column, Column):
                raise TypeError(f"column {name!r} must be a gearjax.Column, got {column!r}")
        _check_positive_int("capacity", capacity)
        _check_positive_int("max_length", max_length)
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        if remover not in REMOVERS:
            raise ValueError(f"remover must be one of {tuple(REMOVERS)}, got {remover!r}")
        limiter_args = rate_limiters.native_args(rate_limiter)
        if limiter_args[0] > capacity:
            raise ValueError(f"the rate limiter's min size ({limiter_args[0]}) exceeds "
                             f"capacity ({capacity}): sampling could never start")
        capacity, max_length = int(capacity), int(max_length)
        self._columns = dict(columns)
        self._capacity = capacity
        self._max_length = max_length
        self._placement = placement
        self._remover = remover
        self._rate_limiter = rate_limiter
        on_device = _resolve_placement(
            placement, capacity * max_length * sum(c.step_bytes for c in self._columns.values()))
        self._native = NativeTable(
            [(name, c.step_bytes, c.pad_step()) for name, c in self._columns.items()],
            capacity, max_length, REMOVERS[remover], *limiter_args, gpu_mapped=True,
            on_device=on_device)
        self._alphas: set[float] = set()  # Prioritized alphas sampled so far
        self._sample_jit = jax.jit(self._sample_traced,
                                   static_argnames=("batch_size", "window", "strategy", "pad"))

    # ------------------------------------------------------------------ info
    @property
    def columns(self) -> dict[str, Column]:
        return dict(self._columns)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def placement(self) -> str:
        """The placement asked for (``stats()["memory"]`` says where the bytes went)."""
        return self._placement

    @property
    def remover(self) -> str:
        return self._remover

    @property
    def rate_limiter(self) -> rate_limiters.RateLimiter | None:
        return self._rate_limiter

    @property
    def handle(self) -> int:
        """The integer the FFI calls find this table by."""
        return self._native.handle

    def __len__(self) -> int:
        return self._native.stats()["size"]

    @property
    def num_steps(self) -> int:
        """Steps stored over all live trajectories."""
        return self._native.stats()["num_steps"]

    def stats(self) -> dict[str, Any]:
        """Sizes, counts, bytes and rates, read in one consistent snapshot.

        Counts are totals since creation (or as restored by ``load``); rates
        are those totals over the table's lifetime in this process."""
        s = self._native.stats()
        alive = max(s["seconds_alive"], 1e-9)
        s["insert_rate"] = s["inserts"] / alive
        s["sample_rate"] = s["samples"] / alive
        s["bytes_per_step"] = sum(c.step_bytes for c in self._columns.values())
        s["columns"] = {n: c.to_json() for n, c in self._columns.items()}
        s["remover"] = self._remover
        s["placement"] = self._placement
        s["memory"] = self._native.memory
        return s

    def contents(self) -> dict[str, np.ndarray]:
        """A consistent snapshot of what is stored, in key (insertion) order:
        ``{"key": int64[N], "length": int64[N], "priority": float64[N]}``."""
        self._check_open()
        keys, slots, lengths, priorities = self._native.pin_items()
        self._native.unpin_slots(slots)
        return {"key": keys, "length": lengths, "priority": priorities}

    def get(self, key: int) -> dict[str, np.ndarray]:
        """A copy of the stored trajectory ``key`` (column -> ``[T, *shape]``).
        Raises KeyError if no trajectory with that key is stored."""
        self._check_open()
        wanted = np.array([key], dtype=np.int64)
        _, slots, lengths, _ = self._native.pin_items(wanted)
        if len(slots) == 0:
            raise KeyError(f"no trajectory with key {key} is stored")
        try:
            slot, length = int(slots[0]), int(lengths[0])
            return {name: self._native.read_slot(c, slot, length)
                    .view(column.dtype).reshape(length, *column.shape)
                    for c, (name, column) in enumerate(self._columns.items())}
        finally:
            self._native.unpin_slots(slots)

    def __repr__(self) -> str:
        state = "closed" if self._native.closed else f"size={len(self)}"
        cols = ", ".join(f"{n}: {c.dtype}{list(c.shape)}" for n, c in self._columns.items())
        return (f"gearjax.Table({state}, capacity={self._capacity}, "
                f"max_length={self._max_length}, columns={{{cols}}})")

    # ------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Releases the table. Compiled programs that sample it then fail with
        a clear error; blocked inserts and samples wake up and raise."""
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    def __enter__(self) -> "Table":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._native.closed:
            raise RuntimeError("the table is closed")

    # ---------------------------------------------------------------- insert
    def insert(self, trajectory: Mapping[str, Any], priority: float = 1.0) -> int:
        """Copies one trajectory (column name -> array ``[T, *shape]``) into the
        table and returns its key. Releases the GIL while copying. May evict a
        trajectory (see ``remover``) and may wait on the rate limiter."""
        self._check_open()
        arrays, length = self._validate_trajectory(trajectory)
        priority = self._check_priority(priority)
        return self._native.insert(arrays, length, priority)

    def insert_many(self, trajectories: Sequence[Mapping[str, Any]],
                    priorities: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
        """Inserts several trajectories; returns their keys as int64. Every
        trajectory and priority is checked before the first is inserted. Only a
        rate-limiter timeout (or a close) can stop the inserts part-way; the
        error then says how many went in (the first ones, in order)."""
        self._check_open()
        if isinstance(trajectories, Mapping) or not isinstance(trajectories, Sequence):
            raise TypeError("trajectories must be a sequence of mappings")
        if priorities is None:
            priorities = [1.0] * len(trajectories)
        elif len(priorities) != len(trajectories):
            raise ValueError(f"got {len(priorities)} priorities for "
                             f"{len(trajectories)} trajectories")
        checked = []
        for i, (t, p) in enumerate(zip(trajectories, priorities)):
            try:
                checked.append((*self._validate_trajectory(t), self._check_priority(p)))
            except (TypeError, ValueError) as e:
                raise type(e)(f"trajectory {i}: {e}") from None
        keys = []
        try:
            for arrays, length, priority in checked:
                keys.append(self._native.insert(arrays, length, priority))
        except (TimeoutError, RuntimeError) as e:
            raise type(e)(f"{e} (insert_many stopped after inserting {len(keys)} of "
                          f"{len(checked)} trajectories, keys {keys[:1]}..{keys[-1:]})") from None
        return np.array(keys, dtype=np.int64)

    def insert_batch(self, columns: Mapping[str, Any], lengths: Any,
                     priorities: Any = None) -> jax.Array:
        """Inserts N trajectories given as padded arrays, from inside jit too
        (for rollouts produced on the device): ``columns[name]`` is
        ``[N, T, *shape]`` with ``1 <= T <= max_length``, and the first
        ``lengths[i]`` steps of row i are real. Returns the keys, int64 ``[N]``.

        Shapes and columns are checked when traced; lengths (in ``[1, T]``) and
        priorities (finite, >= 0; default 1) when it runs, all before the first
        insert, so bad values insert nothing and fail the computation with a
        message naming the row. It may evict, and it may wait on the rate
        limiter; a limiter timeout stops it part-way, and the error says how
        many went in. Data is converted to each column's dtype as ``astype``
        does. On a GPU the data is copied on XLA's stream straight into the
        table (device-to-device, or into mapped host memory); the lengths and
        priorities are read on the host first, so the call synchronises once.
        """
        self._check_open()
        if not isinstance(columns, Mapping):
            raise TypeError("columns must be a mapping of column name -> [N, T, *shape] array")
        missing = [n for n in self._columns if n not in columns]
        extra = [n for n in columns if n not in self._columns]
        if missing or extra:
            raise ValueError(f"insert_batch needs exactly the table's columns; missing {missing}, "
                             f"unknown {extra}")
        arrays = [jnp.asarray(columns[name]) for name in self._columns]
        rows, steps = arrays[0].shape[:2] if arrays[0].ndim >= 2 else (None, None)
        for (name, column), array in zip(self._columns.items(), arrays):
            if array.shape != (rows, steps, *column.shape):
                raise ValueError(f"column {name!r} must have shape [N, T, "
                                 f"{', '.join(map(str, column.shape))}] with the same N and T "
                                 f"as the others, got {array.shape}".replace("T, ]", "T]"))
            if not is_numeric(np.dtype(array.dtype)):
                raise TypeError(f"column {name!r} must hold numeric data, got {array.dtype}")
        if rows < 1:
            raise ValueError("insert_batch needs at least one trajectory")
        if not 1 <= steps <= self._max_length:
            raise ValueError(f"the time axis T={steps} must be in [1, max_length={self._max_length}]")
        lengths = jnp.asarray(lengths)
        if lengths.shape != (rows,) or not jnp.issubdtype(lengths.dtype, jnp.integer):
            raise ValueError(f"lengths must be integers of shape ({rows},), got "
                             f"{lengths.dtype}{list(lengths.shape)}")
        priorities = (jnp.ones(rows, jnp.float32) if priorities is None
                      else jnp.asarray(priorities))
        if priorities.shape != (rows,) or not _is_real(priorities.dtype):
            raise ValueError(f"priorities must be real numbers of shape ({rows},), got "
                             f"{priorities.dtype}{list(priorities.shape)}")
        if priorities.dtype not in (jnp.float32, jnp.float64):
            priorities = priorities.astype(jnp.float32)
        if lengths.dtype not in (jnp.int32, jnp.int64):
            lengths = lengths.astype(jnp.int32)
        arrays = [a.astype(c.dtype) for a, c in zip(arrays, self._columns.values())]
        return _ffi.insert_batch_call(arrays, lengths, priorities, handle=self._native.handle)

    def _validate_trajectory(self, trajectory: Mapping[str, Any]) -> tuple[list[np.ndarray], int]:
        if not isinstance(trajectory, Mapping):
            raise TypeError(f"a trajectory must be a mapping of column name -> array, "
                            f"got {type(trajectory).__name__}")
        missing = [n for n in self._columns if n not in trajectory]
        extra = [n for n in trajectory if n not in self._columns]
        if missing:
            raise ValueError(f"missing column(s) {missing}")
        if extra:
            raise ValueError(f"unknown column(s) {extra}; the table has {list(self._columns)}")
        arrays, lengths = [], {}
        for name, column in self._columns.items():
            value = np.asarray(trajectory[name])
            if not is_numeric(value.dtype):
                raise TypeError(f"column {name!r} must hold numeric data, got dtype {value.dtype}")
            if value.ndim != 1 + len(column.shape) or value.shape[1:] != column.shape:
                raise ValueError(f"column {name!r} must have shape [T, "
                                 f"{', '.join(map(str, column.shape))}], got {value.shape}"
                                 .replace("[T, ]", "[T]"))
            arrays.append(_cast(name, value, column.dtype))
            lengths[name] = value.shape[0]
        if len(set(lengths.values())) != 1:
            raise ValueError(f"columns differ in length: {lengths}")
        length = next(iter(lengths.values()))
        if not 1 <= length <= self._max_length:
            raise ValueError(f"trajectory length {length} is outside [1, max_length="
                             f"{self._max_length}]")
        # The core copies bytes; handing it uint8 views lets any dtype through
        # (bfloat16 included, which the binding layer cannot type).
        return [a.reshape(-1).view(np.uint8) for a in arrays], length

    def _check_priority(self, priority: Any) -> float:
        priority = _check_priority(priority)
        for alpha in self._alphas:
            try:
                weight = math.pow(priority, alpha)
            except OverflowError:
                weight = math.inf
            if not math.isfinite(weight):
                raise ValueError(f"priority {priority} ** alpha {alpha} overflows float64 "
                                 f"(this table samples with Prioritized({alpha}))")
        return priority

    # ---------------------------------------------------------------- sample
    def sample(self, rng_key: jax.Array, batch_size: int, window: int | None = None,
               strategy: Strategy = Uniform(), pad: str = "left") -> Batch:
        """Samples ``batch_size`` windows of ``window`` steps.

        A trajectory is chosen by ``strategy``, the start is uniform in
        ``[0, length - 1]``, the window is cut at the trajectory's end and padded
        to ``window`` steps on the ``pad`` side with each column's pad value.
        ``window=None`` gives whole trajectories from step 0, padded to
        ``max_length``. The same ``rng_key`` and the same table state give the
        same batch.

        Works inside ``jax.jit`` and ``lax.scan`` (one XLA FFI custom call; no
        host callback) and eagerly. Under ``vmap`` each mapped key samples its
        own batch, one after another.

        Raises (when traced, or at run time through XLA): on an empty table, and
        when the rate limiter holds sampling back past its timeout.
        """
        self._check_open()
        _check_positive_int("batch_size", batch_size)
        if window is not None:
            _check_positive_int("window", window)
            if window > self._max_length:
                raise ValueError(f"window={window} exceeds max_length={self._max_length}")
        if pad not in PADS:
            raise ValueError(f"pad must be 'left' or 'right', got {pad!r}")
        if not isinstance(strategy, Strategy) or type(strategy) is Strategy:
            raise TypeError(f"strategy must be gearjax.Uniform(), Timestep(), Prioritized(alpha), "
                            f"TopK(k) or Recent(n), got {strategy!r}")
        if self._rate_limiter is not None:
            self._rate_limiter.check_batch(batch_size)
        if isinstance(strategy, Prioritized):
            self._native.ensure_priority_tree(strategy.alpha)
            self._alphas.add(strategy.alpha)
        return self._sample_jit(rng_key, batch_size=batch_size, window=window,
                                strategy=strategy, pad=pad)

    def _sample_traced(self, rng_key, *, batch_size, window, strategy, pad) -> Batch:
        # One 64-bit seed; the native core expands it per row (Philox4x32-10).
        seed = jax.random.bits(rng_key, (2,), jnp.uint32)
        keys, start, probability, table_size, mask, timestep, *columns = _ffi.sample_call(
            seed, batch=batch_size, handle=self._native.handle, strategy=strategy.code,
            param=strategy.param,
            window=window or 0, width=window or self._max_length, pad_left=pad == "left",
            columns=[(c.shape, c.dtype) for c in self._columns.values()])
        return Batch(columns=dict(zip(self._columns, columns)), mask=mask, timestep=timestep,
                     keys=keys, start=start, probability=probability, table_size=table_size)

    # ------------------------------------------------------------ priorities
    def update_priorities(self, keys: Any, priorities: Any) -> Any:
        """Sets the priorities of trajectories by key; keys no longer stored
        (evicted meanwhile) are skipped, and for a repeated key the last value
        wins. Priorities must be finite and >= 0; otherwise nothing changes.

        Outside jit, with concrete arrays, it checks its input, applies it at
        once and returns the number of keys still stored. Inside traced code it
        is an XLA FFI custom call returning that number as an int32 scalar;
        within one program it is ordered after the sample that produced the
        keys by their data dependence (as in every step of a ``lax.scan``).
        """
        self._check_open()
        traced = isinstance(keys, jax.core.Tracer) or isinstance(priorities, jax.core.Tracer)
        xp = jnp if traced else np
        keys, priorities = xp.ravel(xp.asarray(keys)), xp.ravel(xp.asarray(priorities))
        if not jnp.issubdtype(keys.dtype, np.integer) or keys.dtype == np.uint64:
            raise TypeError(f"keys must be int32, uint32 or int64 (or narrower), got {keys.dtype}")
        if not _is_real(priorities.dtype):
            raise TypeError(f"priorities must be real numbers, got {priorities.dtype}")
        if keys.shape != priorities.shape:
            raise ValueError(f"got {priorities.shape[0]} priorities for {keys.shape[0]} keys")
        if traced:
            return _ffi.update_priorities_call(keys, priorities, handle=self._native.handle)
        priorities = priorities.astype(np.float64)
        bad = ~np.isfinite(priorities) | (priorities < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"priorities must be finite and >= 0; entry {i} is {priorities[i]}")
        return self._native.update_priorities(np.ascontiguousarray(keys, np.int64),
                                              np.ascontiguousarray(priorities))

    # ------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> None:
        """Writes a checkpoint atomically; see :mod:`gearjax.checkpoint`."""
        from gearjax import checkpoint
        self._check_open()
        checkpoint.save(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike, placement: str | None = None) -> "Table":
        """Restores a table saved with :meth:`save`: contents, priorities,
        insertion order, keys and counters, exactly. ``placement`` overrides
        the saved one (a table saved from GPU memory loads on a machine
        without a GPU with ``placement="host"``)."""
        from gearjax import checkpoint
        if placement is not None and placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        return checkpoint.load(path, placement=placement)


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


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def _is_real(dtype: Any) -> bool:
    """Integer or floating (bfloat16 included); not bool, not complex."""
    return jnp.issubdtype(dtype, np.integer) or jnp.issubdtype(dtype, np.floating)


def _check_priority(priority: Any) -> float:
    if isinstance(priority, bool) or not isinstance(priority, (int, float, np.integer, np.floating)):
        if not (isinstance(priority, (np.ndarray, jax.Array)) and np.ndim(priority) == 0):
            raise TypeError(f"priority must be a real number, got {priority!r}")
    try:
        priority = float(priority)
    except OverflowError:
        priority = math.inf
    if not math.isfinite(priority) or priority < 0:
        raise ValueError(f"priority must be finite and >= 0, got {priority}")
    return priority


@functools.cache
def _integer_bounds(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _cast(name: str, value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Converts to the column dtype: integers into any integer column when every
    value fits, otherwise same-kind conversions only (float64 -> float32 yes,
    float -> int no)."""
    if value.dtype != dtype:
        int_to_int = value.dtype.kind in "iu" and dtype.kind in "iu"
        if int_to_int:
            lo, hi = _integer_bounds(dtype)
            if value.size and (int(value.min()) < lo or int(value.max()) > hi):
                raise ValueError(f"column {name!r}: values outside the range of {dtype}")
        elif not np.can_cast(value.dtype, dtype, casting="same_kind"):
            raise TypeError(f"column {name!r} holds {dtype}; {value.dtype} data would be "
                            f"converted unsafely")
    return np.ascontiguousarray(value, dtype=dtype)
