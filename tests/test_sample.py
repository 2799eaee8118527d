"""Sampling: window contents against the NumPy reference for every strategy and
pad side; whole trajectories; determinism; jit, scan, vmap and eager use."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx
from conftest import COLUMNS
from reference import check_batch

STRATEGIES = [gx.Uniform(), gx.Timestep(), gx.Prioritized(0.7), gx.TopK(5), gx.Recent(4)]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("pad", ["left", "right"])
@pytest.mark.parametrize("window", [1, 4, 12])
def test_windows_match_reference(filled, strategy, pad, window):
    table, stored = filled
    batch = table.sample(jax.random.key(3), batch_size=64, window=window, strategy=strategy,
                         pad=pad)
    assert batch["obs"].shape == (64, window, 5)
    assert batch["frame"].shape == (64, window, 3, 2) and batch["frame"].dtype == jnp.uint8
    assert batch.mask.dtype == jnp.bool_ and batch.timestep.dtype == jnp.int32
    assert batch.keys.dtype == jnp.int64 and batch.start.dtype == jnp.int32
    check_batch(batch, stored, COLUMNS, window, pad)


@pytest.mark.parametrize("pad", ["left", "right"])
def test_whole_trajectories_start_at_zero_and_pad_to_max_length(filled, pad):
    table, stored = filled
    batch = table.sample(jax.random.key(0), batch_size=32, window=None, pad=pad)
    assert batch["obs"].shape == (32, table.max_length, 5)
    assert (np.asarray(batch.start) == 0).all()
    check_batch(batch, stored, COLUMNS, table.max_length, pad)
    lengths = {k: len(t["obs"]) for k, t in stored.items()}
    np.testing.assert_array_equal(np.asarray(batch.mask).sum(1),
                                  [lengths[int(k)] for k in batch.keys])


def test_same_key_same_batch_and_different_keys_differ(filled):
    table, _ = filled
    a = table.sample(jax.random.key(7), 16, 4, gx.Timestep())
    b = table.sample(jax.random.key(7), 16, 4, gx.Timestep())
    c = table.sample(jax.random.key(8), 16, 4, gx.Timestep())
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)
    assert not (np.array_equal(a.keys, c.keys) and np.array_equal(a.start, c.start))


def test_raw_uint32_keys_work_like_typed_keys(filled):
    table, _ = filled
    typed = table.sample(jax.random.key(1), 8, 3)
    raw = table.sample(jax.random.PRNGKey(1), 8, 3)
    np.testing.assert_array_equal(typed.keys, raw.keys)
    np.testing.assert_array_equal(typed.start, raw.start)


def test_jit_eager_and_scan_agree(filled):
    table, stored = filled
    keys = jax.random.split(jax.random.key(11), 5)

    @jax.jit
    def jitted(state, k):
        return table.sample(state, k, 8, 6, gx.Timestep())

    def body(carry, k):
        state, total = carry
        state, batch = table.sample(state, k, 8, 6, gx.Timestep())
        return (state, total + batch["reward"].sum()), batch

    (state, _), scanned = jax.jit(lambda s, ks: jax.lax.scan(body, (s, 0.0), ks))(
        table.state(), keys)
    for i, k in enumerate(keys):
        eager = table.sample(k, 8, 6, gx.Timestep())
        state, via_jit = jitted(state, k)
        for x, y, z in zip(jax.tree.leaves(eager), jax.tree.leaves(via_jit),
                           jax.tree.leaves(jax.tree.map(lambda a: a[i], scanned))):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)
    check_batch(jax.tree.map(lambda a: a[2], scanned), stored, COLUMNS, 6, "left")


def test_lowers_to_a_custom_call_without_host_callbacks(filled):
    table, _ = filled
    text = jax.jit(lambda s, k: table.sample(s, k, 4, 3)).lower(
        table.state(), jax.random.key(0)).as_text()
    assert "gearjax_sample" in text
    assert "callback" not in text.lower()


def test_vmap_samples_one_batch_per_key(filled):
    table, stored = filled
    keys = jax.random.split(jax.random.key(2), 3)
    # One sample per key, in order, threading the state (unbatched: out_axes None).
    state = table.state()
    state, batched = jax.vmap(lambda k: table.sample(state, k, 4, 5, gx.Uniform()),
                              out_axes=(None, 0))(keys)
    assert state.shape == ()
    assert batched["obs"].shape == (3, 4, 5, 5)
    for i, k in enumerate(keys):
        single = table.sample(k, 4, 5, gx.Uniform())
        np.testing.assert_array_equal(batched.keys[i], single.keys)
        np.testing.assert_array_equal(batched["obs"][i], single["obs"])


def test_probability_is_what_the_strategy_says(filled):
    table, stored = filled
    lengths = {k: len(t["obs"]) for k, t in stored.items()}
    total = sum(lengths.values())
    batch = table.sample(jax.random.key(0), 32, 2, gx.Timestep())
    np.testing.assert_allclose(batch.probability,
                               [lengths[int(k)] / total for k in batch.keys], rtol=1e-6)
    batch = table.sample(jax.random.key(0), 32, 2, gx.Uniform())
    np.testing.assert_allclose(batch.probability, 1 / len(stored), rtol=1e-6)
    batch = table.sample(jax.random.key(0), 32, 2, gx.Recent(100))
    np.testing.assert_allclose(batch.probability, 1 / len(stored), rtol=1e-6)


def test_table_size_is_the_size_when_drawn_and_gives_importance_weights(filled):
    table, stored = filled
    batch = table.sample(jax.random.key(0), 32, 2, gx.Prioritized(1.0))
    assert batch.table_size.dtype == jnp.int64
    np.testing.assert_array_equal(batch.table_size, len(stored))
    # Uniform draws have importance weight exactly 1: N * (1 / N).
    uniform = table.sample(jax.random.key(0), 32, 2, gx.Uniform())
    np.testing.assert_allclose(uniform.table_size * uniform.probability, 1.0, rtol=1e-6)
    table.insert({name: np.asarray(v[:1]) for name, v in next(iter(stored.values())).items()})
    later = table.sample(jax.random.key(0), 4, 2)
    np.testing.assert_array_equal(later.table_size, len(stored) + 1)


@pytest.mark.parametrize("kwargs, error", [
    (dict(batch_size=0), ValueError),
    (dict(batch_size=-3), ValueError),
    (dict(batch_size=2.0), TypeError),
    (dict(batch_size=2, window=0), ValueError),
    (dict(batch_size=2, window=13), ValueError),
    (dict(batch_size=2, window=3, pad="middle"), ValueError),
    (dict(batch_size=2, strategy="uniform"), TypeError),
    (dict(batch_size=2, strategy=gx.Strategy()), TypeError),
])
def test_bad_sample_arguments_raise_and_change_nothing(filled, kwargs, error):
    table, _ = filled
    before = table.stats()
    with pytest.raises(error):
        table.sample(jax.random.key(0), **kwargs)
    after = table.stats()
    for field in ("size", "samples", "inserts", "num_steps", "next_sequence"):
        assert before[field] == after[field]


@pytest.mark.parametrize("make", [lambda: gx.Prioritized(-1.0), lambda: gx.Prioritized(float("nan")),
                                  lambda: gx.TopK(0), lambda: gx.Recent(0), lambda: gx.TopK(2.5)])
def test_bad_strategy_parameters_are_refused(make):
    with pytest.raises((ValueError, TypeError)):
        make()


@pytest.mark.parametrize("strategy", [gx.Prioritized, gx.PrioritizedSteps])
def test_a_subnormal_alpha_is_refused_and_the_smallest_normal_one_taken(strategy):
    # A subnormal alpha reads as 0 on XLA's threads (which treat subnormal
    # inputs as zero), where priority 0 would weigh 1, and as itself elsewhere.
    for alpha in (5e-324, 1e-310, np.float64(2.2250738585072014e-308) / 2):
        with pytest.raises(ValueError, match="not subnormal"):
            strategy(alpha)
    assert strategy(2.2250738585072014e-308).alpha == 2.2250738585072014e-308
    assert strategy(0).alpha == 0.0


def test_sampling_a_closed_table_raises_not_crashes(filled):
    table, _ = filled
    sample = jax.jit(lambda s, k: table.sample(s, k, 4, 3))
    state, _ = jax.block_until_ready(sample(table.state(), jax.random.key(0)))
    table.close()
    with pytest.raises(RuntimeError, match="closed"):
        table.sample(jax.random.key(0), 4, 3)
    with pytest.raises(Exception, match=rf"table \(handle {table.handle}\) is closed; this program "
                                         r"was compiled against it"):
        jax.block_until_ready(sample(state, jax.random.key(1)))


def test_sampling_an_empty_table_raises_at_once():
    table = gx.Table({"x": gx.Column((), "float32")}, capacity=4, max_length=4)
    with pytest.raises(Exception, match="table is empty"):
        jax.block_until_ready(table.sample(jax.random.key(0), 2, 2))
    table.close()


def test_prioritized_with_all_zero_priorities_raises(rng):
    table = gx.Table({"x": gx.Column((), "float32")}, capacity=4, max_length=4)
    table.insert({"x": np.ones(3)}, priority=0.0)
    with pytest.raises(Exception, match="priority 0"):
        jax.block_until_ready(table.sample(jax.random.key(0), 2, 2, gx.Prioritized(1.0)))
    # alpha = 0 is uniform over everything, zero priorities included
    batch = table.sample(jax.random.key(0), 2, 2, gx.Prioritized(0.0))
    assert batch["x"].shape == (2, 2)
    table.close()
