"""Sampling strategies: which trajectory each row of a batch comes from.

By default every strategy draws the rows' trajectories independently, with
replacement; ``Table.sample(..., replace=False)`` draws distinct ones instead.
Where the window lies in the chosen trajectory is the sample's ``cut``
(``"start"``: a uniform start, ``"end"``: a uniform last step, ``"full"``: a
uniform start among the windows that fit), not the strategy's; see
:meth:`gearjax.Table.sample`.
"""

from __future__ import annotations

import dataclasses

from gearjax import _checks


@dataclasses.dataclass(frozen=True)
class Strategy:
    """Base class; use one of the strategies below."""

    code = -1  # the native core's code of the strategy (``_checks.STRATEGY_CODES``)

    @property
    def alpha(self) -> float:
        return 0.0

    @property
    def count(self) -> int:
        return 0


@dataclasses.dataclass(frozen=True)
class Uniform(Strategy):
    """Every stored trajectory equally likely."""

    code = _checks.STRATEGY_CODES["uniform"]


@dataclasses.dataclass(frozen=True)
class Timestep(Strategy):
    """Every stored step equally likely as a window start: trajectories are
    drawn in proportion to their length (the decision-transformer sampler)."""

    code = _checks.STRATEGY_CODES["timestep"]


@dataclasses.dataclass(frozen=True)
class Prioritized(Strategy):
    """Trajectories in proportion to ``priority ** alpha``, alpha in [0, 8]
    (``alpha=0`` is uniform; priority 0 is never drawn when ``alpha > 0``). A
    table keeps one sum tree per distinct alpha it samples with, at most 8."""

    alpha: float = 1.0  # type: ignore[assignment]
    code = _checks.STRATEGY_CODES["prioritized"]

    def __post_init__(self):
        object.__setattr__(self, "alpha",
                           _checks.real("Prioritized alpha", self.alpha, 0.0, _checks.MAX_ALPHA))


def _check_count(name: str, value: object) -> int:
    """Any integer >= 1: a count beyond the table's size means all of it."""
    return _checks.integer(name, value, 1, 2**1000)


@dataclasses.dataclass(frozen=True)
class TopK(Strategy):
    """Uniform over the ``k`` trajectories of highest priority (ties go to the
    newer trajectory); over all of them when fewer than ``k`` are stored."""

    k: int
    code = _checks.STRATEGY_CODES["topk"]

    def __post_init__(self):
        object.__setattr__(self, "k", _check_count("TopK k", self.k))

    @property
    def count(self) -> int:
        return self.k


@dataclasses.dataclass(frozen=True)
class Recent(Strategy):
    """Uniform over the ``n`` newest trajectories (by key); over all of them
    when fewer than ``n`` are stored."""

    n: int
    code = _checks.STRATEGY_CODES["recent"]

    def __post_init__(self):
        object.__setattr__(self, "n", _check_count("Recent n", self.n))

    @property
    def count(self) -> int:
        return self.n
