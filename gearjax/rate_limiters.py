"""Rate limiters, as Reverb users know them.

A limiter decides when sampling and inserting may proceed. Blocked calls wait up
to ``timeout`` seconds and then raise; nothing ever waits forever. Counts are in
sampled rows (a batch of 64 counts 64) and inserted trajectories.
"""

from __future__ import annotations

import dataclasses
import math


def _check_timeout(timeout: float) -> None:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, got {timeout!r}")
    if not math.isfinite(timeout) or timeout < 0:
        raise ValueError(f"timeout must be finite and >= 0 seconds, got {timeout}")


def _check_min_size(min_size: int) -> None:
    if isinstance(min_size, bool) or not isinstance(min_size, int) or min_size < 1:
        raise ValueError(f"min_size must be an integer >= 1, got {min_size!r}")


@dataclasses.dataclass(frozen=True)
class MinSize:
    """Sampling waits until the table holds at least ``min_size`` trajectories."""

    min_size: int = 1
    timeout: float = 60.0

    def __post_init__(self):
        _check_min_size(self.min_size)
        _check_timeout(self.timeout)

    def native_args(self) -> tuple[int, float, float, float, float]:
        return (self.min_size, 0.0, -math.inf, math.inf, float(self.timeout))

    def check_batch(self, batch_size: int) -> None:
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
    """

    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float
    timeout: float = 60.0

    def __post_init__(self):
        spi, eb = self.samples_per_insert, self.error_buffer
        for name, v in (("samples_per_insert", spi), ("error_buffer", eb)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{name} must be a number, got {v!r}")
        if not math.isfinite(spi) or spi <= 0:
            raise ValueError(f"samples_per_insert must be finite and > 0, got {spi}")
        if not math.isfinite(eb) or eb < 0:
            raise ValueError(f"error_buffer must be finite and >= 0, got {eb}")
        _check_min_size(self.min_size_to_sample)
        _check_timeout(self.timeout)

    def native_args(self) -> tuple[int, float, float, float, float]:
        target = self.min_size_to_sample * self.samples_per_insert
        return (self.min_size_to_sample, float(self.samples_per_insert),
                target - self.error_buffer, target + self.error_buffer, float(self.timeout))

    def check_batch(self, batch_size: int) -> None:
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
    return kinds[spec.pop("type")](**spec)
