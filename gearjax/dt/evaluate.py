"""Return-conditioned rollouts of a decision transformer in its environment.

Episodes run side by side (one gymnasium environment each) so that every
environment step is one batched, jitted forward pass over the last K steps of
every episode. The return-to-go starts at the target and drops by each reward
received, as in the decision-transformer paper.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import numpy as np
from flax import nnx

from gearjax.dt.model import DecisionTransformer, act
from gearjax.dt.train import Normalizer


@functools.partial(jax.jit, static_argnums=0)
def _policy(graphdef, params, state_mean, state_std, rtg_scale, rtg, states, actions, steps,
            mask, key):
    """The actions for the last step of each window; compiled once per model
    structure and window shape, not per rollout."""
    normalizer = Normalizer(state_mean, state_std, rtg_scale)
    return act(nnx.merge(graphdef, params), normalizer.returns(rtg), normalizer.states(states),
               actions, steps, mask, key)


def rollouts(model: DecisionTransformer, normalizer: Normalizer, env_id: str,
             target_return: float, episodes: int = 10, seed: int = 0,
             max_steps: int | None = None, sample_key: jax.Array | None = None) -> dict:
    """Runs ``episodes`` episodes conditioned on ``target_return``; returns
    ``{"returns": [episodes], "lengths": [episodes], "episodes": [...]}``,
    the last holding each episode's observations, actions and rewards (what
    an Online DT actor inserts). With ``sample_key`` a stochastic head samples
    its actions (exploration); otherwise it acts with its mean."""
    import gymnasium as gym
    envs = [gym.make(env_id) for _ in range(episodes)]
    horizon = max_steps or envs[0].spec.max_episode_steps or 1000
    k = model.config.context
    obs_dim, act_dim = model.config.obs_dim, model.config.act_dim
    states = np.zeros((episodes, horizon, obs_dim), np.float32)
    actions = np.zeros((episodes, horizon, act_dim), np.float32)
    rtg = np.zeros((episodes, horizon), np.float32)
    rewards = np.zeros((episodes, horizon), np.float32)
    done = np.zeros(episodes, bool)
    lengths = np.zeros(episodes, np.int64)
    for i, env in enumerate(envs):
        states[i, 0] = env.reset(seed=seed + i)[0]
    rtg[:, 0] = target_return
    graphdef, params = nnx.split(model)
    stats = (normalizer.state_mean, normalizer.state_std, np.float32(normalizer.rtg_scale))

    for t in range(horizon):
        lo = max(0, t - k + 1)
        n = t + 1 - lo
        pad = k - n
        window = lambda a: np.concatenate(  # noqa: E731 - left pad to K steps
            [np.zeros((episodes, pad, *a.shape[2:]), a.dtype), a[:, lo:t + 1]], axis=1)
        steps = np.concatenate([np.zeros((episodes, pad), np.int32),
                                np.broadcast_to(np.arange(lo, t + 1, dtype=np.int32),
                                                (episodes, n))], axis=1)
        mask = np.concatenate([np.zeros((episodes, pad), bool), np.ones((episodes, n), bool)],
                              axis=1)
        key = None if sample_key is None else jax.random.fold_in(sample_key, t)
        chosen = np.asarray(_policy(graphdef, params, *stats, window(rtg), window(states),
                                    window(actions), steps, mask, key))
        for i, env in enumerate(envs):
            if done[i]:
                continue
            actions[i, t] = chosen[i]
            obs, reward, terminated, truncated, _ = env.step(chosen[i])
            rewards[i, t] = reward
            lengths[i] = t + 1
            if terminated or truncated or t + 1 == horizon:
                done[i] = True
            else:
                states[i, t + 1] = obs
                rtg[i, t + 1] = rtg[i, t] - reward
        if done.all():
            break
    for env in envs:
        env.close()
    finished = [{"observations": states[i, :lengths[i]], "actions": actions[i, :lengths[i]],
                 "rewards": rewards[i, :lengths[i]]} for i in range(episodes)]
    return {"returns": rewards.sum(1), "lengths": lengths, "episodes": finished}


def evaluate(model: DecisionTransformer, normalizer: Normalizer, env_id: str,
             target_returns: Sequence[float], episodes: int = 10, seed: int = 10_000,
             max_steps: int | None = None) -> dict:
    """Mean and standard deviation of the return for each target return
    (episodes cut at ``max_steps`` when given)."""
    out = {}
    for target in target_returns:
        returns = rollouts(model, normalizer, env_id, float(target), episodes, seed,
                           max_steps)["returns"]
        out[float(target)] = {"mean": float(np.mean(returns)), "std": float(np.std(returns)),
                              "returns": [float(r) for r in returns]}
    return out

