"""What behaviour-policy datasets are made of: the :data:`Policy` type, the
uniform-random and noisy policies every mixture uses, :class:`Mixture` (a
dataset recipe) and :func:`rollout` (one episode of a policy).

Both :mod:`gearjax.dt.generate` and :mod:`gearjax.dt.locomotion` build
mixtures from these, so they live here and neither has to import the other
to get them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

Policy = Callable[[np.ndarray, np.random.Generator], np.ndarray]


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


def rollout(env, policy: Policy, rng: np.random.Generator, seed: int) -> dict[str, np.ndarray]:
    """One episode of ``policy`` in a gymnasium environment, to its end
    (terminated or truncated)."""
    obs, _ = env.reset(seed=seed)
    observations, actions, rewards = [], [], []
    while True:
        action = policy(np.asarray(obs, np.float32), rng)
        observations.append(np.asarray(obs, np.float32))
        actions.append(np.asarray(action, np.float32))
        obs, reward, terminated, truncated, _ = env.step(action)
        rewards.append(float(reward))
        if terminated or truncated:
            return {"observations": np.stack(observations), "actions": np.stack(actions),
                    "rewards": np.asarray(rewards, np.float32), "terminal": bool(terminated)}
