"""update_priorities: eager and traced, skipped keys, validation, and its effect
on sampling within a lax.scan."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx


@pytest.fixture
def table():
    t = gx.Table({"x": gx.Column((), "float32")}, capacity=8, max_length=4)
    for _ in range(8):
        t.insert({"x": np.zeros(2)}, priority=1.0)
    yield t
    t.close()


def test_eager_update_sets_priorities_and_counts_live_keys(table):
    assert table.update_priorities([1, 3, 99], [5.0, 0.5, 2.0]) == 2
    np.testing.assert_array_equal(table.contents()["priority"], [1, 5, 1, 0.5, 1, 1, 1, 1])
    assert table.stats()["priority_updates"] == 2


def test_repeated_key_last_value_wins(table):
    table.update_priorities(np.array([2, 2, 2]), np.array([4.0, 3.0, 7.0]))
    assert table.contents()["priority"][2] == 7.0


@pytest.mark.parametrize("keys, priorities, error", [
    ([0, 1], [1.0, -1.0], ValueError),
    ([0, 1], [1.0, np.nan], ValueError),
    ([0, 1], [np.inf, 1.0], ValueError),
    ([0, 1], [1.0], ValueError),
    ([0.5, 1.0], [1.0, 1.0], TypeError),
    ([0, 1], ["a", "b"], TypeError),
])
def test_bad_updates_raise_and_change_nothing(table, keys, priorities, error):
    before = table.contents()["priority"].copy()
    with pytest.raises(error):
        table.update_priorities(keys, priorities)
    np.testing.assert_array_equal(table.contents()["priority"], before)


def test_traced_update_returns_count_and_applies(table):
    update = jax.jit(lambda k, p: table.update_priorities(k, p))
    count = update(jnp.array([0, 5, 42]), jnp.array([3.0, 2.0, 1.0]))
    assert count.dtype == jnp.int32 and int(count) == 2
    np.testing.assert_array_equal(table.contents()["priority"][[0, 5]], [3.0, 2.0])


def test_traced_update_with_bad_values_fails_and_changes_nothing(table):
    update = jax.jit(lambda k, p: table.update_priorities(k, p))
    with pytest.raises(Exception, match="finite and >= 0"):
        jax.block_until_ready(update(jnp.array([0, 1]), jnp.array([1.0, -2.0])))
    np.testing.assert_array_equal(table.contents()["priority"], np.ones(8))


def test_update_inside_scan_steers_the_next_sample(table):
    """Each step samples one trajectory by priority, then zeroes its priority:
    the eight steps must visit all eight trajectories once."""

    def step(carry, key):
        batch = table.sample(key, 1, 1, gx.Prioritized(1.0))
        table.update_priorities(batch.keys, jnp.zeros(1))
        return carry, batch.keys[0]

    _, visited = jax.jit(lambda ks: jax.lax.scan(step, 0, ks))(
        jax.random.split(jax.random.key(0), 8))
    assert sorted(np.asarray(visited).tolist()) == list(range(8))
    np.testing.assert_array_equal(table.contents()["priority"], np.zeros(8))


def test_topk_follows_updates(table):
    table.update_priorities([6, 2], [10.0, 9.0])
    keys = np.asarray(table.sample(jax.random.key(0), 128, 1, gx.TopK(2)).keys)
    assert set(keys.tolist()) == {2, 6}


def test_priorities_of_evicted_keys_are_ignored(table):
    table.insert({"x": np.zeros(2)})  # evicts key 0
    assert table.update_priorities([0], [100.0]) == 0
    assert 0 not in table.contents()["key"]


def test_at_most_eight_alphas_per_table(table):
    for alpha in range(8):
        table.sample(jax.random.key(0), 1, 1, gx.Prioritized(float(alpha)))
    with pytest.raises(ValueError, match="at most 8"):
        table.sample(jax.random.key(0), 1, 1, gx.Prioritized(9.0))


def test_weight_overflow_is_refused(table):
    table.sample(jax.random.key(0), 1, 1, gx.Prioritized(200.0))
    before = table.contents()["priority"].copy()
    with pytest.raises(ValueError, match="overflows"):
        table.update_priorities([0], [1e10])
    with pytest.raises(ValueError, match="overflows"):
        table.insert({"x": np.zeros(1)}, priority=1e10)
    np.testing.assert_array_equal(table.contents()["priority"], before)
    assert len(table) == 8
