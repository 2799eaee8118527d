"""The transition-replay recipes of docs/concepts/transitions.md: one transition
per trajectory (insert_step, window=1), and episodes written in pieces that
share a step (writer split with overlap=1) sampled as windows of two with
cut="full" and Timestep: each transition comes out whole, with its own next
observation, and every stored transition is equally likely."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import stats as scipy_stats

import gearjax as gx


def fake_episodes(rng, count):
    """Episodes of a counter environment: obs t+1 = obs t + 1 (each episode
    starting at a multiple of 1000), so a transition's next observation is
    known from its observation."""
    for e in range(count):
        length = int(rng.integers(1, 70))
        yield [(1000 * e + t, int(rng.integers(2)), float(t), t == length - 1)
               for t in range(length)], 1000 * e + length


def test_one_transition_per_trajectory(rng):
    cols = {"obs": gx.Column((2,), "float32"), "action": gx.Column((), "int32"),
            "reward": gx.Column((), "float32"), "next_obs": gx.Column((2,), "float32"),
            "done": gx.Column((), "bool")}
    with gx.Table(cols, capacity=500, max_length=1) as table:
        for episode, _ in fake_episodes(rng, 20):
            for obs, action, reward, done in episode:
                table.insert_step({"obs": np.full(2, obs, np.float32), "action": action,
                                   "reward": reward, "next_obs": np.full(2, obs + 1, np.float32),
                                   "done": done})
        assert len(table) == 500  # a ring buffer of 500 transitions

        @jax.jit
        def sample(key):
            _, batch = table.sample(table.state(), key, 256, window=1)
            return {k: v[:, 0] for k, v in batch.columns.items()}

        batch = jax.tree.map(np.asarray, sample(jax.random.key(0)))
        np.testing.assert_array_equal(batch["next_obs"], batch["obs"] + 1)
        np.testing.assert_array_equal(batch["reward"], batch["obs"][:, 0] % 1000)


@pytest.mark.parametrize("max_length", [2, 5, 32])
def test_pieces_sampled_as_windows_of_two_give_every_transition_equally(rng, max_length):
    cols = {"obs": gx.Column((), "float32"), "action": gx.Column((), "int32"),
            "reward": gx.Column((), "float32"), "done": gx.Column((), "bool")}
    with gx.Table(cols, capacity=4096, max_length=max_length) as table:
        w = table.writer(max_length_overflow="split", overlap=1)
        transitions = set()
        for episode, last_obs in fake_episodes(rng, 60):
            for obs, action, reward, done in episode:
                w.append({"obs": float(obs), "action": action, "reward": reward, "done": done})
                transitions.add(obs)
            w.append({"obs": float(last_obs), "action": 0, "reward": 0.0, "done": True})
            w.end_episode()
        assert len(table) < 4096  # nothing evicted: every transition is stored

        @jax.jit
        def sample(key):
            _, batch = table.sample(table.state(), key, 4096, window=2, strategy=gx.Timestep(),
                                    cut="full")
            return batch["obs"], batch["reward"], batch["done"]

        draws = []
        for i in range(8):
            obs, reward, done = map(np.asarray, sample(jax.random.key(i)))
            np.testing.assert_array_equal(obs[:, 1], obs[:, 0] + 1)  # its own next obs
            np.testing.assert_array_equal(reward[:, 0], obs[:, 0] % 1000)
            draws.append(obs[:, 0].astype(np.int64))
        draws = np.concatenate(draws)
        assert set(draws.tolist()) == transitions  # every transition can come out
        counts = np.array([np.sum(draws == t) for t in sorted(transitions)])
        # Uniform over transitions: a chi-square test at 0.001.
        assert scipy_stats.chisquare(counts).pvalue > 1e-3
