"""Rate limiters, as Reverb users know them.

A limiter decides when sampling and inserting may proceed. Blocked calls wait up
to ``timeout`` seconds and then raise; nothing ever waits forever. Counts are in
sampled rows (a batch of 64 counts 64) and inserted trajectories.
"""

from __future__ import annotations

import dataclasses
import math

from gearjax import _checks


def _check_timeout(timeout: float) -> float:
    return _checks.real("timeout (seconds)", timeout, 0.0, _checks.MAX_TIMEOUT_SECONDS)


def _check_min_size(name: str, min_size: int) -> int:
    return _checks.integer(name, min_size, 1, _checks.MAX_CAPACITY)


@dataclasses.dataclass(frozen=True)
class MinSize:
    """Sampling waits until the table holds at least ``min_size`` trajectories.

    It never holds inserts back. A sample still blocked after ``timeout``
    seconds raises.

    Args:
      min_size: the number of trajectories sampling waits for, in
        [1, 2**31]; at most the table's ``capacity`` (checked by the table).
      timeout: seconds a blocked sample waits, in [0, 1e9].

    Raises:
      TypeError: ``min_size`` is not an integer, or ``timeout`` not a real
        number (bools are refused).
      ValueError: ``min_size`` or ``timeout`` is out of range.

    Examples:
      >>> table = gx.Table(columns, capacity=10_000, max_length=50,
      ...                  rate_limiter=gx.MinSize(1000, timeout=60.0))
    """

    min_size: int = 1
    timeout: float = 60.0

    def __post_init__(self):
        object.__setattr__(self, "min_size", _check_min_size("min_size", self.min_size))
        object.__setattr__(self, "timeout", _check_timeout(self.timeout))

    def native_args(self) -> tuple[int, float, float, float, float]:
        """The native table's limiter arguments: ``(min_size,
        samples_per_insert, min_diff, max_diff, timeout)``."""
        return (self.min_size, 0.0, -math.inf, math.inf, self.timeout)

    def check_batch(self, batch_size: int) -> None:
        """Checks that this limiter can admit a batch of ``batch_size`` rows:
        a ``MinSize`` admits any.

        Args:
          batch_size: rows of the sample.
        """
        del batch_size


@dataclasses.dataclass(frozen=True)
class SampleToInsertRatio:
    """Keeps ``samples / inserts`` near ``samples_per_insert``.

    With ``diff = inserts * samples_per_insert - samples`` and
    ``target = min_size_to_sample * samples_per_insert``, a batch of B rows may
    be sampled once the table holds ``min_size_to_sample`` trajectories and
    ``diff - B >= target - error_buffer``; an insert may proceed while the table
    is below ``min_size_to_sample`` or ``diff + samples_per_insert <= target +
    error_buffer``. So ``2 * error_buffer`` must cover one batch plus one insert
    (checked when sampling), or neither side could ever move.

    Args:
      samples_per_insert: sampled rows per inserted trajectory, a real number
        in (0, 1e9].
      min_size_to_sample: trajectories the table must hold before sampling
        starts, in [1, 2**31]; at most the table's ``capacity`` (checked by
        the table).
      error_buffer: how far ``diff`` may stray from ``target``, either way, a
        real number in [0, 1e15].
      timeout: seconds a blocked sample or insert waits before it raises, in
        [0, 1e9].

    Raises:
      TypeError: ``min_size_to_sample`` is not an integer, or another
        argument not a real number (bools are refused).
      ValueError: an argument is out of range (``samples_per_insert`` 0
        included: use :class:`MinSize` for no ratio).

    Examples:
      >>> limiter = gx.SampleToInsertRatio(samples_per_insert=32.0,
      ...                                  min_size_to_sample=1000,
      ...                                  error_buffer=256.0)
      >>> table = gx.Table(columns, capacity=100_000, max_length=50,
      ...                  rate_limiter=limiter)
    """

    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float
    timeout: float = 60.0

    def __post_init__(self):
        spi = _checks.real("samples_per_insert", self.samples_per_insert, 0.0,
                           _checks.MAX_SAMPLES_PER_INSERT)
        if spi == 0:
            raise ValueError("samples_per_insert must be > 0 (use MinSize for no ratio)")
        object.__setattr__(self, "samples_per_insert", spi)
        object.__setattr__(self, "error_buffer", _checks.real(
            "error_buffer", self.error_buffer, 0.0, _checks.MAX_ERROR_BUFFER))
        object.__setattr__(self, "min_size_to_sample",
                           _check_min_size("min_size_to_sample", self.min_size_to_sample))
        object.__setattr__(self, "timeout", _check_timeout(self.timeout))

    def native_args(self) -> tuple[int, float, float, float, float]:
        """The native table's limiter arguments: ``(min_size_to_sample,
        samples_per_insert, target - error_buffer, target + error_buffer,
        timeout)``."""
        target = self.min_size_to_sample * self.samples_per_insert
        return (self.min_size_to_sample, self.samples_per_insert,
                target - self.error_buffer, target + self.error_buffer, self.timeout)

    def check_batch(self, batch_size: int) -> None:
        """Checks that this limiter can admit a batch of ``batch_size`` rows
        (every sample checks it).

        Args:
          batch_size: rows of the sample.

        Raises:
          ValueError: ``2 * error_buffer < batch_size + samples_per_insert``:
            sampling and inserting could block each other forever.
        """
        if 2 * self.error_buffer < batch_size + self.samples_per_insert:
            raise ValueError(
                f"error_buffer={self.error_buffer} is too small for batch_size={batch_size}: "
                f"2 * error_buffer must be >= batch_size + samples_per_insert "
                f"({batch_size + self.samples_per_insert}), or sampling and inserting "
                f"could block each other forever")


RateLimiter = MinSize | SampleToInsertRatio


def native_args(limiter: RateLimiter | None) -> tuple[int, float, float, float, float]:
    """Arguments for the native table; ``None`` means: sample any non-empty
    table, never wait."""
    if limiter is None:
        return (1, 0.0, -math.inf, math.inf, 0.0)
    if not isinstance(limiter, (MinSize, SampleToInsertRatio)):
        raise TypeError(f"rate_limiter must be MinSize, SampleToInsertRatio or None, "
                        f"got {limiter!r}")
    return limiter.native_args()


def to_json(limiter: RateLimiter | None) -> dict | None:
    if limiter is None:
        return None
    return {"type": type(limiter).__name__, **dataclasses.asdict(limiter)}


def from_json(spec: dict | None) -> RateLimiter | None:
    if spec is None:
        return None
    kinds = {"MinSize": MinSize, "SampleToInsertRatio": SampleToInsertRatio}
    spec = dict(spec)
    return kinds[spec.pop("type")](**spec)  # checked by the constructors
