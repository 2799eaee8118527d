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
    """Base class; use one of the strategies below.

    A strategy is a frozen dataclass passed to :meth:`gearjax.Table.sample`
    (``strategy=``); the base class itself is refused there (``TypeError``).
    """

    code = -1  # the native core's code of the strategy (``_checks.STRATEGY_CODES``)
    # Draws among the best ``count`` items it ranks (no weights, no sum tree):
    # what the exchanges, the one-sided readers and replace=False treat apart.
    ranks = False
    # Draws a step, which places the window (PrioritizedSteps), rather than a
    # trajectory: selected on the host; not in sharded tables.
    draws_steps = False

    @property
    def alpha(self) -> float:
        """The exponent of priorities (:class:`Prioritized`); 0.0 for the others."""
        return 0.0

    @property
    def count(self) -> int:
        """How many best trajectories are drawn from (``TopK``'s ``k``,
        ``Recent``'s ``n``); 0 for the others."""
        return 0


@dataclasses.dataclass(frozen=True)
class Uniform(Strategy):
    """Every stored trajectory equally likely.

    The default strategy of :meth:`gearjax.Table.sample`. With
    ``cut="full"``, uniform over the trajectories at least ``window`` steps
    long.

    Examples:
      >>> state, batch = table.sample(state, key, 32, window=8,
      ...                             strategy=gx.Uniform())
    """

    code = _checks.STRATEGY_CODES["uniform"]


@dataclasses.dataclass(frozen=True)
class Timestep(Strategy):
    """Every stored step equally likely as a window start.

    Trajectories are drawn in proportion to their length (the
    decision-transformer sampler); with ``cut="full"``, in proportion to
    their number of full windows (``length - window + 1``).

    Examples:
      >>> state, batch = table.sample(state, key, 32, window=20,
      ...                             strategy=gx.Timestep())
    """

    code = _checks.STRATEGY_CODES["timestep"]


@dataclasses.dataclass(frozen=True)
class Prioritized(Strategy):
    """Trajectories in proportion to ``priority ** alpha``.

    ``alpha=0`` is uniform; priority 0 is never drawn when ``alpha > 0``. A
    table keeps one sum tree per distinct alpha it samples with, at most 8.
    ``batch.probability`` and ``batch.table_size`` give prioritized replay's
    importance weights (see :class:`gearjax.Batch`).

    Args:
      alpha: the exponent of priorities, a real number in [0, 8], not
        subnormal.

    Raises:
      TypeError: ``alpha`` is not a real number (bools are refused).
      ValueError: ``alpha`` is outside [0, 8] (or NaN), or subnormal (in
        (0, 2.2250738585072014e-308): it would read as 0 on XLA's threads).

    Examples:
      >>> state, batch = table.sample(state, key, 32, window=8,
      ...                             strategy=gx.Prioritized(alpha=0.6))
      >>> weights = (batch.table_size * batch.probability) ** -0.4
    """

    alpha: float = 1.0  # type: ignore[assignment]
    code = _checks.STRATEGY_CODES["prioritized"]

    def __post_init__(self):
        object.__setattr__(self, "alpha", _checks.alpha("Prioritized alpha", self.alpha))


@dataclasses.dataclass(frozen=True)
class PrioritizedSteps(Strategy):
    """Steps in proportion to ``step_priority ** alpha``; the drawn step
    places the window.

    For tables made with ``step_priorities=True``, which keep a priority per
    stored step (TorchRL's ``PrioritizedSliceSampler``, R2D2-style sequence
    replay). With ``cut="start"`` the window starts at the drawn step (cut
    at the trajectory's end, padded); with ``cut="end"`` it ends there; with
    ``cut="full"`` the step is drawn among the starts of full windows only
    (the first ``length - window + 1`` steps of trajectories of at least
    ``window`` steps). ``batch.probability`` is the drawn step's
    probability; update the sampled steps' priorities with
    ``update_priorities(..., steps=...)``. A table keeps one step tree per
    alpha, at most 8; a window is required.

    Args:
      alpha: the exponent of step priorities, a real number in [0, 8], not
        subnormal.

    Raises:
      TypeError: ``alpha`` is not a real number (bools are refused).
      ValueError: ``alpha`` is outside [0, 8] (or NaN), or subnormal (in
        (0, 2.2250738585072014e-308): it would read as 0 on XLA's threads).

    Examples:
      >>> steps = gx.Table(columns, capacity=16, max_length=50, step_priorities=True)
      >>> key0 = steps.insert({"obs": np.zeros((30, 3), np.float32),
      ...                      "reward": np.zeros(30, np.float32)},
      ...                     priority=np.linspace(0.0, 1.0, 30))
      >>> s, batch = steps.sample(steps.state(), key, 8, window=4, cut="full",
      ...                         strategy=gx.PrioritizedSteps(alpha=0.6))
      >>> td = jnp.ones((8, 4))  # cut="full" windows have no padding to skip:
      >>> s, n = steps.update_priorities(s, batch.keys, td, steps=batch.timestep)
      >>> int(n)
      8
      >>> steps.close()
    """

    alpha: float = 1.0  # type: ignore[assignment]
    code = _checks.STRATEGY_CODES["prioritizedsteps"]
    draws_steps = True

    def __post_init__(self):
        object.__setattr__(self, "alpha", _checks.alpha("PrioritizedSteps alpha", self.alpha))


def _check_count(name: str, value: object) -> int:
    """Any integer >= 1: a count beyond the table's size means all of it."""
    return _checks.integer(name, value, 1, 2**1000)


@dataclasses.dataclass(frozen=True)
class TopK(Strategy):
    """Uniform over the ``k`` trajectories of highest priority.

    Ties go to the newer trajectory; over all of them when fewer than ``k``
    are stored.

    Args:
      k: how many, an integer >= 1 (a ``k`` beyond the table's size means all
        of it).

    Raises:
      TypeError: ``k`` is not an integer (bools are refused).
      ValueError: ``k`` is below 1.

    Examples:
      >>> state, batch = table.sample(state, key, 32, window=8,
      ...                             strategy=gx.TopK(100))
    """

    k: int
    code = _checks.STRATEGY_CODES["topk"]
    ranks = True

    def __post_init__(self):
        object.__setattr__(self, "k", _check_count("TopK k", self.k))

    @property
    def count(self) -> int:
        return self.k


@dataclasses.dataclass(frozen=True)
class Recent(Strategy):
    """Uniform over the ``n`` newest trajectories (by key).

    Over all of them when fewer than ``n`` are stored.

    Args:
      n: how many, an integer >= 1 (an ``n`` beyond the table's size means
        all of it).

    Raises:
      TypeError: ``n`` is not an integer (bools are refused).
      ValueError: ``n`` is below 1.

    Examples:
      >>> state, batch = table.sample(state, key, 32, window=8,
      ...                             strategy=gx.Recent(1000))
    """

    n: int
    code = _checks.STRATEGY_CODES["recent"]
    ranks = True

    def __post_init__(self):
        object.__setattr__(self, "n", _check_count("Recent n", self.n))

    @property
    def count(self) -> int:
        return self.n
