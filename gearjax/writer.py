"""The streaming writer (``table.writer()``): actors append one step at a time
and end episodes; each episode goes into the table as one trajectory (or, with
``max_length_overflow="split"``, as consecutive pieces of at most
``max_length`` steps).

A writer keeps the current episode in its own buffers, one per column, sized
``max_length`` steps and made on the first append (so a writer is cheap to
create). It holds no pin and no lock of the table between appends, and
nothing of an episode is visible to samplers before it is inserted: at
``end_episode``, or, with "split", when a piece is full. The insert is the
table's ``insert`` (the copy into the table releases the GIL; it may evict by
the remover and wait on the rate limiter). A writer closed, or dropped, with a
partial episode inserts nothing more of it: with "split", the pieces that
filled before stay in the table (``inserted_keys`` names them).

Each step is checked as ``Table.insert`` checks a trajectory (the table's
columns, no others; each column's shape and a safe conversion to its dtype)
before anything is written, so a bad step raises and leaves the episode so far
intact. Writers are not shared between threads: make one per actor thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gearjax import _checks, _inserts
from gearjax.columns import cast_to_column, numeric_host_array
from gearjax.errors import ClosedError

OVERFLOWS = ("error", "split")
# The priority of the pieces of a split episode inserted before it ends (the
# last piece gets end_episode's); set them later with update_priorities on
# episode_keys.
PIECE_PRIORITY = 1.0


class Writer:
    """Appends steps to episodes of ``table`` (see the module docstring).

    Args:
      table: the :class:`gearjax.Table` to insert into (``table.writer()``
        makes the writer).
      max_length_overflow: what an episode longer than ``max_length`` does:
        ``"error"`` (default: the step that would overflow raises) or
        ``"split"`` (a piece of ``max_length`` steps is inserted as soon as it
        is full, and the episode goes on in a new piece).
      overlap: with ``"split"``, how many of a piece's last steps the next
        piece repeats at its start (0 <= overlap < max_length).

    Raises:
      TypeError: ``overlap`` is not an integer.
      ValueError: ``max_length_overflow`` is neither ``"error"`` nor
        ``"split"``; ``overlap`` is out of range, or not 0 without
        ``"split"``.

    Examples:
      >>> writer = table.writer(max_length_overflow="split", overlap=4)
      >>> for t in range(120):
      ...     writer.append({"obs": np.zeros(3, np.float32),
      ...                    "reward": np.float32(t)})
      >>> last = writer.end_episode(priority=2.0)
      >>> len(writer.episode_keys)  # max_length=50: pieces of 50, 50 and 28 steps
      3
      >>> writer.close()
    """

    def __init__(self, table: Any, max_length_overflow: str = "error", overlap: int = 0):
        if not isinstance(max_length_overflow, str) or max_length_overflow not in OVERFLOWS:
            raise ValueError(f"max_length_overflow must be 'error' or 'split', got "
                             f"{max_length_overflow!r}")
        overlap = _checks.integer("overlap", overlap, 0, table.max_length - 1)
        if overlap and max_length_overflow != "split":
            raise ValueError("overlap repeats steps between the pieces of a split episode: "
                             "it needs max_length_overflow='split'")
        self._table = table
        self._split = max_length_overflow == "split"
        self._overlap = overlap
        self._buffers: dict[str, np.ndarray] | None = None
        self._addresses: list[int] | None = None  # the buffers' data, for the fast path
        self._native, self._max_length = table._native, table.max_length
        self._steps = 0        # steps in the current piece (the overlap included)
        self._fresh = 0        # of those, steps not in an inserted piece yet
        self._keys: list[int] = []           # pieces of the current episode
        self._episode_keys: tuple[int, ...] = ()
        self._closed = False

    # ------------------------------------------------------------------ state
    @property
    def episode_keys(self) -> tuple[int, ...]:
        """The keys of the last ended episode's pieces, in order (one key
        unless it was split)."""
        return self._episode_keys

    @property
    def inserted_keys(self) -> tuple[int, ...]:
        """The keys of the current episode's pieces inserted so far (with
        ``max_length_overflow="split"``, those that filled), in order; empty
        once the episode ends (they are then :attr:`episode_keys`). After
        :meth:`close`, those of the episode it dropped: they stay in the table,
        for ``update_priorities`` (say to 0) or to be told apart."""
        return tuple(self._keys)

    @property
    def steps(self) -> int:
        """Steps appended to the current episode and not yet inserted."""
        return self._fresh

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    # ------------------------------------------------------------------ steps
    def append(self, step: Mapping[str, Any]) -> None:
        """Appends one step to the current episode.

        With ``"split"``, inserts the current piece once it holds
        ``max_length`` steps (if that insert fails, the step stays appended
        and the piece is inserted by the next ``append`` or ``end_episode``).

        Args:
          step: column name -> array of the column's shape (no time axis),
            for every column of the table; numpy, jax, any DLPack array, or
            anything ``numpy.asarray`` takes.

        Raises:
          TypeError: ``step`` is not a mapping; a value is not numeric or
            cannot convert to its column's dtype safely.
          ValueError: a column is missing or unknown; a value's shape is not
            the column's; a value does not fit the column's dtype; with
            ``"error"``, the episode would exceed ``max_length`` steps. The
            episode so far is left intact.
          RuntimeError: the writer or its table is closed.
          TimeoutError: with ``"split"``, the rate limiter held back the
            insert of a full piece past its timeout.
        """
        # The fast path: numbers and exactly typed arrays, converted and written
        # in native code (xla_ffi/python/step_values.h); anything else takes the
        # general path below, which checks it as insert does.
        if self._addresses is not None and self._steps < self._max_length and \
                self._native.write_step(step, self._addresses, self._steps):
            self._appended()
            return
        self._check_open()
        values = self._validate(step)
        if self._steps == self._table.max_length:
            if not self._split:
                raise ValueError(f"the episode would exceed max_length={self._table.max_length} "
                                 f"steps; end it, or make the writer with "
                                 f"max_length_overflow='split'")
            if self._fresh:  # a full piece whose insert failed: again, before going on
                self._insert_piece(PIECE_PRIORITY)
            self._start_next_piece()
        buffers = self._ensure_buffers()
        for name, value in values.items():
            buffers[name][self._steps] = value
        self._appended()

    def _appended(self) -> None:
        """Counts the step just written; with "split", inserts a full piece."""
        self._steps += 1
        self._fresh += 1
        if self._split and self._steps == self._table.max_length:
            # If this insert fails (closed table, limiter timeout), the step
            # stays appended and the piece is inserted by the next append or
            # end_episode.
            self._insert_piece(PIECE_PRIORITY)

    def end_episode(self, priority: float = 1.0) -> int:
        """Ends the episode, inserting what is not inserted yet.

        Inserts the steps not inserted yet as the episode's last trajectory
        (or piece) with ``priority`` and returns that key. An episode whose
        last piece was inserted when it filled returns that piece's key, and
        that piece is given ``priority`` (an ``update_priorities`` of it,
        unless ``priority`` is ``PIECE_PRIORITY``). The keys of all its
        pieces are then :attr:`episode_keys`, and the next ``append`` starts
        a new episode.

        Args:
          priority: the priority of the episode's last trajectory (or piece):
            one number (also on a table that keeps a priority per step,
            whose steps all take it; set them after with
            ``update_priorities(..., steps=...)``).

        Returns:
          The key of the episode's last trajectory (or piece), an ``int``.

        Raises:
          ValueError: the episode has no steps; ``priority`` is out of range.
          TypeError: ``priority`` is not a real number.
          RuntimeError: the writer or its table is closed.
          TimeoutError: the rate limiter held the insert back past its
            timeout (the episode is kept; ``end_episode`` may be called
            again).
        """
        self._check_open()
        priority = _checks.priority(priority)
        if not self._keys and not self._fresh:
            raise ValueError("the episode has no steps: append at least one before ending it")
        if self._fresh:
            self._insert_piece(priority)
        elif priority != PIECE_PRIORITY:
            # The last piece went in when it filled, with PIECE_PRIORITY: it
            # gets the episode's final priority now (a no-op if it has been
            # evicted or consumed since).
            self._table.update_priorities([self._keys[-1]], [priority])
        self._episode_keys = tuple(self._keys)
        self._keys, self._steps, self._fresh = [], 0, 0
        return self._episode_keys[-1]

    def flush(self) -> None:
        """Inserts the complete pieces not yet inserted, never a partial episode.

        A full piece goes in when it fills, so one is pending only if that
        insert failed (a rate-limiter timeout, say); flush tries it again.

        Raises:
          RuntimeError: the writer or its table is closed.
          TimeoutError: the rate limiter held the insert back past its
            timeout again.
        """
        self._check_open()
        if self._split and self._fresh and self._steps == self._table.max_length:
            self._insert_piece(PIECE_PRIORITY)

    def close(self) -> None:
        """Drops a partial episode (nothing more of it is inserted: with
        "split", the pieces that filled before stay, :attr:`inserted_keys`)
        and the buffers.

        Idempotent; later ``append``, ``end_episode`` and ``flush`` calls raise
        ``RuntimeError``. A writer is also a context manager: ``with
        table.writer() as writer:`` closes it on exit.
        """
        self._closed = True
        self._buffers = self._addresses = None
        self._steps, self._fresh = 0, 0  # _keys stay: inserted_keys

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._fresh} steps pending"
        return f"Writer({state}, overflow={'split' if self._split else 'error'})"

    # ------------------------------------------------------------------ inside
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this writer is closed")
        if self._table.closed:
            raise ClosedError(f"this writer's table {self._table!r} is closed: its steps "
                              f"could never be inserted")

    def _validate(self, step: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The step's values, checked and converted, before anything is
        written (so a bad step leaves the episode as it was)."""
        columns = self._table.columns
        _inserts.check_column_names("a step", columns, step)
        values = {}
        for name, column in columns.items():
            value = numeric_host_array(name, step[name])
            if value.shape != column.shape:
                raise ValueError(f"column {name!r}: a step has shape {column.shape}, got "
                                 f"{value.shape}")
            # (ascontiguousarray makes 0-d values 1-d: back to the step shape)
            values[name] = cast_to_column(name, value, column.dtype).reshape(column.shape)
        return values

    def _ensure_buffers(self) -> dict[str, np.ndarray]:
        if self._buffers is None:
            self._buffers = {name: np.empty((self._table.max_length,) + column.shape,
                                            column.dtype)
                             for name, column in self._table.columns.items()}
            self._addresses = [b.ctypes.data for b in self._buffers.values()]
        return self._buffers

    def _insert_piece(self, priority: float) -> None:
        """Inserts the current piece (its steps so far) as one trajectory."""
        buffers = self._ensure_buffers()
        # The buffers hold checked values of the columns' dtypes already.
        key = self._table._insert_checked([b[:self._steps] for b in buffers.values()],
                                          self._steps, priority)
        self._keys.append(key)
        self._fresh = 0

    def _start_next_piece(self) -> None:
        """After a full piece: the next one begins with its last `overlap`
        steps."""
        if self._overlap:
            for buffer in self._buffers.values():
                buffer[:self._overlap] = buffer[self._steps - self._overlap:self._steps].copy()
        self._steps = self._overlap
