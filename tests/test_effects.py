"""The in-jit contract: every sample, update_priorities and insert_batch written
in a program runs exactly once each time its part of the program runs, whether
or not its result is used, in program order (within a program, across loop
iterations and branches, under grad, with donation, and across dispatches);
vmap maps calls one after another; jax.checkpoint under grad is refused; the
opt-in ordered=False mode gives exactly-once and order up; an error in one
program does not poison the next."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx

N = 32


@pytest.fixture
def table():
    t = gx.Table({"x": gx.Column((2,), "float32")}, capacity=N, max_length=4, name="effects")
    for i in range(N):
        t.insert({"x": np.full((3, 2), i, np.float32)}, priority=1.0)
    yield t
    t.close()


def drain_step(table, key):
    """Samples one trajectory by priority, then zeroes its priority: a program
    that runs these in order visits every trajectory exactly once in N steps."""
    batch = table.sample(key, 1, 1, gx.Prioritized(1.0))
    table.update_priorities(batch.keys, jnp.zeros(1))
    return batch.keys[0]


def assert_drained(table, visited):
    visited = np.asarray(visited).tolist()
    assert sorted(visited) == sorted(table.contents()["key"].tolist()), \
        f"{len(set(visited))} distinct of {N}: a sample ran before the update before it"
    np.testing.assert_array_equal(table.contents()["priority"], np.zeros(N))


KEYS = jax.random.split(jax.random.key(0), N)


@pytest.mark.parametrize("unroll", [1, 2, 8, True])
def test_a_scan_drain_visits_every_trajectory_once_for_every_unroll(table, unroll):
    def body(carry, key):
        return carry, drain_step(table, key)

    _, visited = jax.jit(lambda ks: jax.lax.scan(body, 0, ks, unroll=unroll))(KEYS)
    assert_drained(table, visited)


def test_a_fori_loop_drain(table):
    def body(i, visited):
        return visited.at[i].set(drain_step(table, KEYS[i]))

    visited = jax.jit(lambda: jax.lax.fori_loop(0, N, body, jnp.zeros(N, jnp.int32)))()
    assert_drained(table, visited)


def test_a_while_loop_drain(table):
    def body(state):
        i, visited = state
        return i + 1, visited.at[i].set(drain_step(table, jax.random.fold_in(KEYS[0], i)))

    _, visited = jax.jit(lambda: jax.lax.while_loop(
        lambda s: s[0] < N, body, (0, jnp.zeros(N, jnp.int32))))()
    assert_drained(table, visited)


def test_a_straight_line_drain(table):
    visited = jax.jit(lambda ks: jnp.stack([drain_step(table, ks[i]) for i in range(N)]))(KEYS)
    assert_drained(table, visited)


def test_a_drain_inside_cond_branches(table):
    def body(carry, key):  # keys here are below 2**11: int32 holds them
        visited = jax.lax.cond(carry >= 0, lambda: drain_step(table, key).astype(jnp.int32),
                               lambda: jnp.int32(-1))
        return carry, visited

    _, visited = jax.jit(lambda ks: jax.lax.scan(body, 0, ks, unroll=4))(KEYS)
    assert_drained(table, visited)


def test_a_sample_written_after_an_update_sees_it_and_one_before_does_not(table):
    keys = table.contents()["key"]
    only = jnp.asarray(np.where(keys == keys[5], 1.0, 0.0), jnp.float32)

    @jax.jit
    def program(key):
        before = table.sample(key, 64, 1, gx.Prioritized(1.0))
        table.update_priorities(jnp.asarray(keys), only)
        after = table.sample(key, 64, 1, gx.Prioritized(1.0))
        return before.keys, after.keys

    before, after = program(jax.random.key(1))
    assert len(set(np.asarray(before).tolist())) > 1
    assert set(np.asarray(after).tolist()) == {int(keys[5])}


def test_unused_and_duplicate_samples_each_run_and_count(table):
    @jax.jit
    def program(key):
        table.sample(key, 4)  # unused
        a, b = table.sample(key, 4), table.sample(key, 4)  # the same key twice
        return a, b

    before = table.stats()["samples"]
    a, b = program(jax.random.key(3))
    jax.effects_barrier()
    assert table.stats()["samples"] - before == 12
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):  # no change between them
        np.testing.assert_array_equal(x, y)
    program(jax.random.key(3))
    jax.effects_barrier()
    assert table.stats()["samples"] - before == 24


def test_unused_updates_and_inserts_run(table):
    keys = jnp.asarray(table.contents()["key"][:3])

    @jax.jit
    def program():
        table.update_priorities(keys, jnp.full(3, 7.0))
        table.insert_batch({"x": jnp.ones((2, 1, 2))}, jnp.array([1, 1]))
        return 0

    program()
    jax.effects_barrier()
    stats = table.stats()
    assert stats["priority_updates"] == 3 and stats["inserts"] == N + 2


def test_samples_whose_results_are_unused_still_feed_the_rate_limiter():
    limiter = gx.SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=1,
                                     error_buffer=4.0, timeout=0.05)
    with gx.Table({"x": gx.Column((), "float32")}, 8, 2, rate_limiter=limiter) as t:
        t.insert({"x": np.zeros(1)})  # diff = 1: four rows may be sampled, then no more

        @jax.jit
        def unused(key):
            t.sample(key, 4)
            return 0

        unused(jax.random.key(0))
        jax.effects_barrier()
        assert t.stats()["samples"] == 4
        with pytest.raises(Exception, match="rate limiter held sampling back"):
            jax.block_until_ready(t.sample(jax.random.key(1), 1))
        t.insert({"x": np.zeros(1)})  # one more insert frees one more row
        assert jax.block_until_ready(t.sample(jax.random.key(2), 1)).keys.shape == (1,)


def test_dispatched_programs_act_in_dispatch_order(table):
    keys = table.contents()["key"]
    zero_all_but_7 = jax.jit(lambda: table.update_priorities(
        jnp.asarray(keys), jnp.asarray(np.where(keys == keys[7], 1.0, 0.0), jnp.float32)))
    sample = jax.jit(lambda k: table.sample(k, 128, 1, gx.Prioritized(1.0)).keys)
    for i in range(5):  # dispatched without waiting in between
        table.update_priorities(keys, np.ones(N))
        zero_all_but_7()
        drawn = sample(jax.random.key(i))
        assert set(np.asarray(drawn).tolist()) == {int(keys[7])}


def test_grad_of_a_loss_that_samples_and_updates_inside(table):
    keys = jnp.asarray(table.contents()["key"])

    def loss(w, key):
        batch = table.sample(key, 8, 2)
        error = jnp.square(batch["x"].sum((1, 2)) * w - 1.0)
        table.update_priorities(batch.keys, error + 1.0)  # a traced function of w
        return error.mean()

    before = table.stats()["samples"]
    grad = jax.jit(jax.grad(loss))(jnp.float32(0.5), jax.random.key(0))
    jax.effects_barrier()
    assert np.isfinite(float(grad))
    assert table.stats()["samples"] - before == 8  # once, not once per differentiation pass
    assert table.stats()["priority_updates"] == 8
    del keys


def test_donated_arguments_keep_the_order(table):
    @functools.partial(jax.jit, donate_argnums=0)
    def step(carry, key):
        return carry + drain_step(table, key).astype(carry.dtype), None

    carry = jnp.zeros((), jnp.int32)
    visited = []
    for key in KEYS:
        before = set(table.contents()["key"][table.contents()["priority"] > 0].tolist())
        carry, _ = step(carry, key)
        after = set(table.contents()["key"][table.contents()["priority"] > 0].tolist())
        visited += list(before - after)
    assert_drained(table, visited)


def test_vmap_draws_each_mapped_key_on_its_own_one_after_another(table):
    keys = jax.random.split(jax.random.key(4), 3)
    before = table.stats()["samples"]
    mapped = jax.jit(jax.vmap(lambda k: table.sample(k, 5, 2)))(keys)
    jax.effects_barrier()
    assert table.stats()["samples"] - before == 15
    for i in range(3):
        single = table.sample(keys[i], 5, 2)
        for x, y in zip(jax.tree.leaves(mapped), jax.tree.leaves(single)):
            np.testing.assert_array_equal(np.asarray(x)[i], y)


def test_vmap_of_a_drain_step_draws_distinct_keys(table):
    def steps(key):
        return drain_step(table, key)

    visited = jax.jit(jax.vmap(steps))(KEYS[:8])
    # vmap runs the 8 samples, then the 8 updates: the samples see the same
    # priorities (all 1), so repeats are possible; all 8 updates apply.
    assert len(np.asarray(visited)) == 8
    assert (table.contents()["priority"] == 0).sum() == len(set(np.asarray(visited).tolist()))


def test_checkpoint_without_differentiation_samples_once(table):
    before = table.stats()["samples"]
    jax.jit(jax.checkpoint(lambda k: table.sample(k, 4, 1).keys))(jax.random.key(0))
    jax.effects_barrier()
    assert table.stats()["samples"] - before == 4


def test_checkpoint_under_grad_is_refused_with_the_reason(table):
    def loss(w, key):
        return (table.sample(key, 4, 1)["x"].sum() * w) ** 2

    with pytest.raises(NotImplementedError, match="would rematerialise it and run it again"):
        jax.grad(jax.checkpoint(loss))(1.0, jax.random.key(0))


def test_ordered_false_gives_up_exactly_once(table):
    @jax.jit
    def program(key):
        table.sample(key, 4, ordered=False)  # unused: XLA may drop it
        a = table.sample(key, 4, ordered=False)
        b = table.sample(key, 4, ordered=False)  # identical: XLA may merge them
        return a.keys, b.keys

    before = table.stats()["samples"]
    a, b = program(jax.random.key(5))
    np.testing.assert_array_equal(a, b)
    assert table.stats()["samples"] - before < 12  # dropped or merged, as documented


def test_only_ordered_samples_carry_the_table_effect(table):
    # JAX keeps its C++ fast dispatch path for programs without effects: the
    # ordered=False program has none, the default one has the table's.
    key = jax.random.key(0)
    assert jax.make_jaxpr(lambda k: table.sample(k, 2).keys)(key).effects
    assert not jax.make_jaxpr(lambda k: table.sample(k, 2, ordered=False).keys)(key).effects


def test_an_error_in_one_program_does_not_fail_the_next(table):
    bad = jax.jit(lambda: table.insert_batch({"x": jnp.ones((1, 2, 2))}, jnp.array([0])))
    good = jax.jit(lambda k: table.sample(k, 2).keys)
    good(jax.random.key(0)).block_until_ready()
    for _ in range(2):
        with pytest.raises(Exception, match="has length 0"):
            jax.block_until_ready(bad())
        gx.clear_errors()  # (any Table method does it too)
        assert good(jax.random.key(1)).shape == (2,)
    assert gx.clear_errors() is False  # nothing to clear when nothing failed


def test_contents_get_and_save_see_what_dispatched_programs_did(table, tmp_path):
    zero = jax.jit(lambda k: table.update_priorities(k, jnp.zeros(k.shape[0])))
    keys = jnp.asarray(table.contents()["key"])
    for _ in range(20):  # dispatched, not waited for: contents() must wait
        table.update_priorities(np.asarray(keys), np.ones(N))
        zero(keys)
        assert (table.contents()["priority"] == 0).all()
    inserted = jax.jit(lambda: table.insert_batch({"x": jnp.full((1, 1, 2), 7.0)},
                                                  jnp.array([1])))()
    table.save(tmp_path / "t.gx")  # waits too: the checkpoint holds the insert
    assert gx.Table.load(tmp_path / "t.gx").stats()["inserts"] == N + 1
    assert table.get(int(inserted[0]))["x"].tolist() == [[7.0, 7.0]]
