"""Chi-square tests: each strategy draws trajectories, and starts inside them,
with the probabilities it promises (fixed seeds, so the tests are repeatable)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import stats

import gearjax as gx

P_MIN = 1e-4  # reject the strategy's promise below this p-value
DRAWS = 16_384
LENGTHS = [1, 2, 3, 5, 8, 13, 21, 34, 40, 40]
PRIORITIES = [0.5, 1.0, 2.0, 4.0, 0.25, 3.0, 1.5, 0.0, 6.0, 2.5]


@pytest.fixture(scope="module")
def table():
    t = gx.Table({"x": gx.Column((), "int32")}, capacity=16, max_length=40)
    for length, priority in zip(LENGTHS, PRIORITIES):
        t.insert({"x": np.arange(length)}, priority=priority)
    yield t
    t.close()


def sequence(table, keys) -> np.ndarray:
    """Insertion order of keys (key = sequence << slot_bits | slot); without
    evictions, the index into LENGTHS and PRIORITIES."""
    return np.asarray(keys) >> table.slot_bits


def draw_counts(table, strategy, key=0, window=1):
    batch = table.sample(jax.random.key(key), DRAWS, window, strategy)
    return np.bincount(sequence(table, batch.keys), minlength=len(LENGTHS)), batch


def assert_distribution(counts, expected_probabilities):
    expected = np.asarray(expected_probabilities, float)
    assert counts[expected == 0].sum() == 0, "drew a trajectory that has probability 0"
    support = expected > 0
    if support.sum() == 1:
        assert counts[support].sum() == DRAWS
        return
    result = stats.chisquare(counts[support], DRAWS * expected[support] / expected.sum())
    assert result.pvalue > P_MIN, (counts, expected)


def test_uniform(table):
    counts, batch = draw_counts(table, gx.Uniform())
    assert_distribution(counts, np.ones(len(LENGTHS)))
    np.testing.assert_allclose(batch.probability, 1 / len(LENGTHS), rtol=1e-6)


def test_timestep_draws_in_proportion_to_length(table):
    counts, _ = draw_counts(table, gx.Timestep())
    assert_distribution(counts, LENGTHS)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0, 2.0])
def test_prioritized_draws_priority_to_the_alpha(table, alpha):
    counts, batch = draw_counts(table, gx.Prioritized(alpha))
    weights = np.power(PRIORITIES, alpha)
    assert_distribution(counts, weights)
    np.testing.assert_allclose(batch.probability,
                               weights[sequence(table, batch.keys)] / weights.sum(), rtol=1e-6)


@pytest.mark.parametrize("k", [1, 3, 10, 50])
def test_topk_is_uniform_over_the_k_highest(table, k):
    counts, _ = draw_counts(table, gx.TopK(k))
    order = np.argsort(PRIORITIES, kind="stable")[::-1]
    expected = np.zeros(len(LENGTHS))
    expected[order[:k]] = 1
    assert_distribution(counts, expected)


@pytest.mark.parametrize("n", [1, 4, 10, 50])
def test_recent_is_uniform_over_the_n_newest(table, n):
    counts, _ = draw_counts(table, gx.Recent(n))
    expected = np.zeros(len(LENGTHS))
    expected[-n:] = 1
    assert_distribution(counts, expected)


@pytest.mark.parametrize("strategy", [gx.Uniform(), gx.Timestep(), gx.Prioritized(1.0)],
                         ids=lambda s: type(s).__name__)
def test_start_is_uniform_within_the_trajectory(table, strategy):
    batch = table.sample(jax.random.key(5), DRAWS, 3, strategy)
    keys, starts = sequence(table, batch.keys), np.asarray(batch.start)
    for key in (8, 9):  # the 40-step trajectories
        chosen = starts[keys == key]
        counts = np.bincount(chosen, minlength=40)
        assert len(counts) == 40
        assert stats.chisquare(counts).pvalue > P_MIN


def test_timestep_makes_every_stored_step_an_equally_likely_start(table):
    batch = table.sample(jax.random.key(9), DRAWS, 1, gx.Timestep())
    flat = np.cumsum([0] + LENGTHS)[sequence(table, batch.keys)] + np.asarray(batch.start)
    counts = np.bincount(flat, minlength=sum(LENGTHS))
    assert stats.chisquare(counts).pvalue > P_MIN


def test_topk_ties_prefer_newer_trajectories():
    with gx.Table({"x": gx.Column((), "float32")}, capacity=8, max_length=2) as t:
        keys = [t.insert({"x": np.zeros(1)}, priority=1.0) for _ in range(5)]
        drawn = np.asarray(t.sample(jax.random.key(0), 512, 1, gx.TopK(2)).keys)
        assert set(drawn.tolist()) == set(keys[3:])


def test_distributions_hold_after_churn():
    """Evictions and thousands of priority updates keep the sum trees exact."""
    rng = np.random.default_rng(1)
    with gx.Table({"x": gx.Column((), "float32")}, capacity=64, max_length=8) as t:
        for _ in range(200):  # evicts 136
            t.insert({"x": np.zeros(int(rng.integers(1, 9)))}, priority=float(rng.uniform(0, 3)))
        t.sample(jax.random.key(0), 1, 1, gx.Prioritized(0.8))  # creates the alpha tree
        for _ in range(50):
            keys = t.contents()["key"]
            t.update_priorities(keys, rng.uniform(0, 1000, len(keys)) ** 2)
        contents = t.contents()
        weights = contents["priority"] ** 0.8
        batch = t.sample(jax.random.key(1), DRAWS, 1, gx.Prioritized(0.8))
        index = np.searchsorted(contents["key"], np.asarray(batch.keys))
        np.testing.assert_allclose(batch.probability, weights[index] / weights.sum(), rtol=1e-6)
        counts = np.bincount(index, minlength=len(weights))
        assert_distribution(counts, weights)
        batch = t.sample(jax.random.key(2), DRAWS, 1, gx.Timestep())
        counts = np.bincount(np.searchsorted(contents["key"], np.asarray(batch.keys)),
                             minlength=len(weights))
        assert_distribution(counts, contents["length"])
