"""Sampling strategies: which trajectory each row of a batch comes from.

Every strategy draws trajectories independently (with replacement). The window
start inside the chosen trajectory is always uniform in [0, length - 1].
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Strategy:
    """Base class; use one of the strategies below."""

    code = -1

    @property
    def param(self) -> float:
        return 0.0


@dataclasses.dataclass(frozen=True)
class Uniform(Strategy):
    """Every stored trajectory equally likely."""

    code = 0


@dataclasses.dataclass(frozen=True)
class Timestep(Strategy):
    """Every stored step equally likely as a window start: trajectories are
    drawn in proportion to their length (the decision-transformer sampler)."""

    code = 1


@dataclasses.dataclass(frozen=True)
class Prioritized(Strategy):
    """Trajectories in proportion to ``priority ** alpha`` (``alpha=0`` is
    uniform; priority 0 is never drawn when ``alpha > 0``). A table keeps one
    sum tree per distinct alpha, at most 8."""

    alpha: float = 1.0
    code = 2

    def __post_init__(self):
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)):
            raise TypeError(f"Prioritized alpha must be a number, got {self.alpha!r}")
        if not math.isfinite(self.alpha) or self.alpha < 0:
            raise ValueError(f"Prioritized alpha must be finite and >= 0, got {self.alpha}")
        object.__setattr__(self, "alpha", float(self.alpha))

    @property
    def param(self) -> float:
        return self.alpha


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} needs an integer >= 1, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class TopK(Strategy):
    """Uniform over the ``k`` trajectories of highest priority (ties go to the
    newer trajectory); over all of them when fewer than ``k`` are stored."""

    k: int
    code = 3

    def __post_init__(self):
        _check_count("TopK", self.k)

    @property
    def param(self) -> float:
        return float(self.k)


@dataclasses.dataclass(frozen=True)
class Recent(Strategy):
    """Uniform over the ``n`` newest trajectories (by key)."""

    n: int
    code = 4

    def __post_init__(self):
        _check_count("Recent", self.n)

    @property
    def param(self) -> float:
        return float(self.n)
