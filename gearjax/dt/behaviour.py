"""What behaviour-policy datasets are made of: the uniform-random and noisy
policies every mixture uses and :class:`Mixture` (a dataset recipe). A
policy is a :data:`gearjax.actors.Policy`; one episode of it is
:func:`gearjax.actors.rollout` (Ray actors run the same loop).

Both :mod:`gearjax.dt.generate` and :mod:`gearjax.dt.locomotion` build
mixtures from these, so they live here and neither has to import the other
to get them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from gearjax.actors import Policy


def uniform_random(low: np.ndarray, high: np.ndarray) -> Policy:
    def policy(obs, rng):
        return rng.uniform(low, high).astype(np.float32)
    return policy


def noisy(policy: Policy, scale: float, low: np.ndarray, high: np.ndarray) -> Policy:
    """``policy`` plus Gaussian noise of standard deviation ``scale``, clipped
    to the action bounds."""
    def noisy_policy(obs, rng):
        action = policy(obs, rng) + rng.normal(0.0, scale, size=np.shape(low))
        return np.clip(action, low, high).astype(np.float32)
    return noisy_policy


@dataclasses.dataclass(frozen=True)
class Mixture:
    """A dataset recipe: an environment and (label, policy maker, episodes)."""
    env_id: str
    parts: tuple[tuple[str, Callable[[np.ndarray, np.ndarray], Policy], int], ...]
    good: str  # the label of the good policy (normalised scores' 100)
