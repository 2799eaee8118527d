"""The in-jit contract of table calls ordered by a table state (passed from
call to call): every sample, update_priorities and insert_batch written in a
program runs exactly once each time its part of the program runs, whether or
not its result is used, in program order (within a program, across loop
iterations and branches, under grad and remat, with donation, and across
dispatches); vmap maps calls one after another; no table call carries a JAX
effect (JAX's fast dispatch path); an error in one program does not poison
the next."""

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


def finish(*results):
    """Blocks until results (and so the table calls they come from) are done."""
    jax.block_until_ready(results)


def drain_step(table, state, key):
    """Samples one trajectory by priority, then zeroes its priority: a program
    that runs these in order visits every trajectory exactly once in N steps."""
    state, batch = table.sample(state, key, 1, 1, gx.Prioritized(1.0))
    state, _ = table.update_priorities(state, batch.keys, jnp.zeros(1))
    return state, batch.keys[0]


def assert_drained(table, visited):
    visited = np.asarray(visited).tolist()
    assert sorted(visited) == sorted(table.contents()["key"].tolist()), \
        f"{len(set(visited))} distinct of {N}: a sample ran before the update before it"
    np.testing.assert_array_equal(table.contents()["priority"], np.zeros(N))


KEYS = jax.random.split(jax.random.key(0), N)


@pytest.mark.parametrize("unroll", [1, 2, 8, True])
def test_a_scan_drain_visits_every_trajectory_once_for_every_unroll(table, unroll):
    def body(state, key):
        return drain_step(table, state, key)

    state, visited = jax.jit(lambda s, ks: jax.lax.scan(body, s, ks, unroll=unroll))(
        table.state(), KEYS)
    finish(state)
    assert_drained(table, visited)


def test_a_fori_loop_drain(table):
    def body(i, carry):
        state, visited = carry
        state, key = drain_step(table, state, KEYS[i])
        return state, visited.at[i].set(key)

    state, visited = jax.jit(lambda s: jax.lax.fori_loop(
        0, N, body, (s, jnp.zeros(N, jnp.int32))))(table.state())
    finish(state)
    assert_drained(table, visited)


def test_a_while_loop_drain(table):
    def body(carry):
        i, state, visited = carry
        state, key = drain_step(table, state, jax.random.fold_in(KEYS[0], i))
        return i + 1, state, visited.at[i].set(key)

    _, state, visited = jax.jit(lambda s: jax.lax.while_loop(
        lambda c: c[0] < N, body, (0, s, jnp.zeros(N, jnp.int32))))(table.state())
    finish(state)
    assert_drained(table, visited)


def test_a_straight_line_drain(table):
    def program(state, ks):
        visited = []
        for i in range(N):
            state, key = drain_step(table, state, ks[i])
            visited.append(key)
        return state, jnp.stack(visited)

    state, visited = jax.jit(program)(table.state(), KEYS)
    finish(state)
    assert_drained(table, visited)


def test_a_drain_inside_cond_branches(table):
    def body(state, key):  # keys here are below 2**11: int32 holds them
        def taken(state):
            state, visited = drain_step(table, state, key)
            return state, visited.astype(jnp.int32)

        always = jax.random.key_data(key)[0] >= 0  # traced, always true
        return jax.lax.cond(always, taken, lambda s: (s, jnp.int32(-1)), state)

    state, visited = jax.jit(lambda s, ks: jax.lax.scan(body, s, ks, unroll=4))(
        table.state(), KEYS)
    finish(state)
    assert_drained(table, visited)


def test_a_call_in_the_untaken_branch_does_not_run(table):
    @jax.jit
    def program(state, flag, key):
        return jax.lax.cond(flag, lambda s: table.sample(s, key, 4, 1)[0], lambda s: s, state)

    before = table.stats()["samples"]
    finish(program(table.state(), False, jax.random.key(0)))
    assert table.stats()["samples"] == before
    finish(program(table.state(), True, jax.random.key(0)))
    assert table.stats()["samples"] == before + 4


def test_a_sample_written_after_an_update_sees_it_and_one_before_does_not(table):
    keys = table.contents()["key"]
    only = jnp.asarray(np.where(keys == keys[5], 1.0, 0.0), jnp.float32)

    @jax.jit
    def program(state, key):
        state, before = table.sample(state, key, 64, 1, gx.Prioritized(1.0))
        state, _ = table.update_priorities(state, jnp.asarray(keys), only)
        state, after = table.sample(state, key, 64, 1, gx.Prioritized(1.0))
        return state, before.keys, after.keys

    state, before, after = program(table.state(), jax.random.key(1))
    assert len(set(np.asarray(before).tolist())) > 1
    assert set(np.asarray(after).tolist()) == {int(keys[5])}


def test_unused_and_duplicate_samples_each_run_and_count(table):
    @jax.jit
    def program(state, key):
        state, _ = table.sample(state, key, 4)  # unused
        state, a = table.sample(state, key, 4)
        state, b = table.sample(state, key, 4)  # the same key again
        return state, a, b

    before = table.stats()["samples"]
    state, a, b = program(table.state(), jax.random.key(3))
    finish(state, a, b)
    assert table.stats()["samples"] - before == 12
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):  # no change between them
        np.testing.assert_array_equal(x, y)
    finish(program(state, jax.random.key(3)))
    assert table.stats()["samples"] - before == 24


def test_a_call_whose_results_are_all_discarded_still_runs(table):
    @jax.jit
    def program(state, key):
        table.sample(state, key, 4)  # the state it returns is dropped too
        return 0

    before = table.stats()["samples"]
    finish(program(table.state(), jax.random.key(0)))
    assert table.stats()["samples"] - before == 4


def _custom_vjp_of(f):
    g = jax.custom_vjp(f)
    g.defvjp(lambda s: (f(s), None), lambda _, cotangent: (cotangent,))
    return g


def _custom_jvp_of(f):
    g = jax.custom_jvp(f)
    g.defjvp(lambda primals, tangents: (f(*primals), tangents[0]))
    return g


# Blocks all of whose results a program discards, each holding one update of
# one key (threaded through the block as it must be): JAX's dead-code
# elimination once dropped them, table calls included.
DISCARDED_BLOCKS = {
    "cond": lambda u, s: jax.lax.cond(True, u, lambda s: s, s),
    "cond returning its input state": lambda u, s: jax.lax.cond(
        True, lambda s: (u(s), s)[1], lambda s: s, s),
    "switch": lambda u, s: jax.lax.switch(1, [lambda s: s, u], s),
    "fori_loop": lambda u, s: jax.lax.fori_loop(0, 3, lambda i, s: u(s), s),
    "scan": lambda u, s: jax.lax.scan(lambda c, _: (u(c), None), s, None, length=3),
    "while_loop": lambda u, s: jax.lax.while_loop(lambda c: c[0] < 3,
                                                  lambda c: (c[0] + 1, u(c[1])), (0, s)),
    "nested jit": lambda u, s: jax.jit(u)(s),
    "checkpoint": lambda u, s: jax.checkpoint(u)(s),
    "custom_jvp": lambda u, s: _custom_jvp_of(u)(s),
    "custom_vjp": lambda u, s: _custom_vjp_of(u)(s),
}
RUNS = {"fori_loop": 3, "scan": 3, "while_loop": 3}


@pytest.mark.parametrize("block", list(DISCARDED_BLOCKS))
def test_a_block_whose_results_are_all_discarded_still_runs_its_calls(table, block):
    keys = jnp.asarray(table.contents()["key"][:1])

    def update(state):
        return table.update_priorities(state, keys, jnp.ones(1))[0]

    @jax.jit
    def program(state):
        DISCARDED_BLOCKS[block](update, state)  # every result dropped
        return state

    before = table.stats()["priority_updates"]
    finish(program(table.state()))
    assert table.stats()["priority_updates"] - before == RUNS.get(block, 1)


def test_a_sampling_scan_under_grad_of_grad_runs_once_per_step(table):
    """grad of grad of a loss linear in the sampled data once dropped the scan
    entirely (the same call outside a loop ran)."""

    def loss(w, state):
        def body(state, key):
            state, batch = table.sample(state, key, 2, 1)
            return state, jnp.sum(batch["x"]) * w
        _, ys = jax.lax.scan(body, state, jax.random.split(jax.random.key(1), 4))
        return ys.sum()

    before = table.stats()["samples"]
    finish(jax.jit(jax.grad(jax.grad(loss)))(1.0, table.state()))
    assert table.stats()["samples"] - before == 8


def test_unused_updates_and_inserts_run(table):
    keys = jnp.asarray(table.contents()["key"][:3])

    @jax.jit
    def program(state):
        state, _ = table.update_priorities(state, keys, jnp.full(3, 7.0))
        state, _ = table.insert_batch(state, {"x": jnp.ones((2, 1, 2))}, jnp.array([1, 1]))
        return state

    finish(program(table.state()))
    stats = table.stats()
    assert stats["priority_updates"] == 3 and stats["inserts"] == N + 2


def test_samples_whose_results_are_unused_still_feed_the_rate_limiter():
    limiter = gx.SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=1,
                                     error_buffer=4.0, timeout=0.05)
    with gx.Table({"x": gx.Column((), "float32")}, 8, 2, rate_limiter=limiter) as t:
        t.insert({"x": np.zeros(1)})  # diff = 1: four rows may be sampled, then no more

        @jax.jit
        def unused(state, key):
            state, _ = t.sample(state, key, 4)
            return state

        finish(unused(t.state(), jax.random.key(0)))
        assert t.stats()["samples"] == 4
        with pytest.raises(Exception, match="rate limiter held sampling back"):
            finish(t.sample(t.state(), jax.random.key(1), 1))
        t.insert({"x": np.zeros(1)})  # one more insert frees one more row
        _, batch = t.sample(t.state(), jax.random.key(2), 1)
        assert jax.block_until_ready(batch).keys.shape == (1,)


def test_dispatched_programs_act_in_dispatch_order(table):
    keys = table.contents()["key"]
    only_7 = jnp.asarray(np.where(keys == keys[7], 1.0, 0.0), jnp.float32)
    zero_all_but_7 = jax.jit(lambda s: table.update_priorities(s, jnp.asarray(keys), only_7)[0])
    sample = jax.jit(lambda s, k: table.sample(s, k, 128, 1, gx.Prioritized(1.0)))
    state = table.state()
    for i in range(5):  # dispatched without waiting in between
        finish(state)
        table.update_priorities(keys, np.ones(N))
        state = zero_all_but_7(state)
        state, drawn = sample(state, jax.random.key(i))
        assert set(np.asarray(drawn.keys).tolist()) == {int(keys[7])}


def test_programs_that_each_start_from_a_fresh_state_act_in_dispatch_order(table):
    # The taught shortcut: no state passed between programs. XLA runs a
    # device's programs in dispatch order, so a sample dispatched after an
    # update sees it, even when the update's program starts with slow work.
    keys = table.contents()["key"]
    big = jnp.ones((600, 600))

    @jax.jit
    def slow_update(m, target):
        m = m @ m @ m  # work before the update, so a reordering would show
        priorities = jnp.where(jnp.asarray(keys) == target, 1.0, 0.0) + 0 * m[0, 0]
        return table.update_priorities(table.state(), jnp.asarray(keys), priorities)[1]

    sample = jax.jit(lambda k: table.sample(table.state(), k, 64, 1, gx.Prioritized(1.0))[1].keys)
    for i in range(10):
        table.update_priorities(keys, np.ones(N))
        target = int(keys[i])
        slow_update(big, target)
        drawn = sample(jax.random.key(i))  # dispatched without waiting for the update
        assert set(np.asarray(drawn).tolist()) == {target}


def test_grad_of_a_loss_that_samples_and_updates_inside(table):
    def loss(w, state, key):
        state, batch = table.sample(state, key, 8, 2)
        error = jnp.square(batch["x"].sum((1, 2)) * w - 1.0)
        state, _ = table.update_priorities(state, batch.keys, error + 1.0)  # a traced function of w
        return error.mean(), state

    before = table.stats()["samples"]
    grad, state = jax.jit(jax.grad(loss, has_aux=True))(jnp.float32(0.5), table.state(),
                                                        jax.random.key(0))
    finish(grad, state)
    assert np.isfinite(float(grad))
    assert table.stats()["samples"] - before == 8  # once, not once per differentiation pass
    assert table.stats()["priority_updates"] == 8


def test_donated_arguments_keep_the_order(table):
    @functools.partial(jax.jit, donate_argnums=0)
    def step(carry, state, key):
        state, visited = drain_step(table, state, key)
        return carry + visited.astype(carry.dtype), state

    carry, state = jnp.zeros((), jnp.int32), table.state()
    visited = []
    for key in KEYS:
        before = set(table.contents()["key"][table.contents()["priority"] > 0].tolist())
        carry, state = step(carry, state, key)
        finish(state)
        after = set(table.contents()["key"][table.contents()["priority"] > 0].tolist())
        visited += list(before - after)
    assert_drained(table, visited)


def test_vmap_draws_each_mapped_key_on_its_own_one_after_another(table):
    keys = jax.random.split(jax.random.key(4), 3)
    before = table.stats()["samples"]
    state, mapped = jax.jit(jax.vmap(lambda k, s: table.sample(s, k, 5, 2),
                                     in_axes=(0, None), out_axes=(None, 0)))(
        keys, table.state())
    finish(state, mapped)
    assert table.stats()["samples"] - before == 15
    for i in range(3):
        _, single = table.sample(table.state(), keys[i], 5, 2)
        for x, y in zip(jax.tree.leaves(mapped), jax.tree.leaves(single)):
            np.testing.assert_array_equal(np.asarray(x)[i], y)


def test_vmap_of_a_drain_step_draws_and_updates_one_element_at_a_time(table):
    state, visited = jax.jit(jax.vmap(lambda k, s: drain_step(table, s, k),
                                      in_axes=(0, None), out_axes=(None, 0)))(
        KEYS[:8], table.state())
    finish(state)
    # vmap runs the 8 samples, then the 8 updates: the samples see the same
    # priorities (all 1), so repeats are possible; all 8 updates apply.
    assert len(np.asarray(visited)) == 8
    assert (table.contents()["priority"] == 0).sum() == len(set(np.asarray(visited).tolist()))


def test_checkpoint_without_differentiation_samples_once(table):
    before = table.stats()["samples"]
    finish(jax.jit(jax.checkpoint(lambda s, k: table.sample(s, k, 4, 1)))(
        table.state(), jax.random.key(0)))
    assert table.stats()["samples"] - before == 4


def test_checkpoint_under_grad_runs_once(table):
    def loss(w, state, key):
        state, batch = table.sample(state, key, 4, 1)
        return (batch["x"].sum() * w) ** 2, state

    before = table.stats()["samples"]
    for policy in (None, jax.checkpoint_policies.nothing_saveable):
        grad, state = jax.jit(jax.grad(jax.checkpoint(loss, policy=policy), has_aux=True))(
            1.0, table.state(), jax.random.key(0))
        finish(grad, state)
        assert float(grad) != 0
    assert table.stats()["samples"] - before == 8  # 4 per program, none rematerialised


def test_a_checkpointed_scan_body_under_grad_runs_once_per_step(table):

    def loss(w, state, key):
        def body(carry, k):
            state, total = carry
            state, batch = table.sample(state, k, 2, 1)
            return (state, total + jnp.sin(batch["x"].sum() * w)), None

        (state, total), _ = jax.lax.scan(jax.checkpoint(body), (state, 0.0),
                                         jax.random.split(key, 5))
        return total, state

    before = table.stats()["samples"]
    grad, state = jax.jit(jax.grad(loss, has_aux=True))(1.0, table.state(), jax.random.key(0))
    finish(grad, state)
    assert table.stats()["samples"] - before == 10


def test_no_table_call_carries_a_jax_effect(table):
    # JAX keeps its C++ fast dispatch path for programs without effects.
    key, keys = jax.random.key(0), jnp.asarray(table.contents()["key"][:2])
    programs = {
        "sample": lambda s: table.sample(s, key, 2),
        "update_priorities": lambda s: table.update_priorities(s, keys, jnp.ones(2)),
        "insert_batch": lambda s: table.insert_batch(s, {"x": jnp.ones((1, 1, 2))},
                                                     jnp.array([1])),
    }
    for name, program in programs.items():
        jaxpr = jax.make_jaxpr(program)(table.state())
        assert not jaxpr.effects, name
        assert "gearjax_" in str(jaxpr), name  # a table call (perhaps in a nested jit)


def test_an_error_in_one_program_does_not_fail_the_next(table):
    bad = jax.jit(lambda s: table.insert_batch(s, {"x": jnp.ones((1, 2, 2))}, jnp.array([0])))
    good = jax.jit(lambda s, k: table.sample(s, k, 2)[1].keys)
    good(table.state(), jax.random.key(0)).block_until_ready()
    for _ in range(2):
        with pytest.raises(Exception, match="has length 0"):
            finish(bad(table.state()))
        assert good(table.state(), jax.random.key(1)).shape == (2,)


def test_contents_get_and_save_see_what_dispatched_programs_did(table, tmp_path):
    # contents/get/save see the calls that have run: block on the state the
    # program returned first.
    zero = jax.jit(lambda s, k: table.update_priorities(s, k, jnp.zeros(k.shape[0]))[0])
    keys = jnp.asarray(table.contents()["key"])
    state = table.state()
    for _ in range(20):
        finish(state)
        table.update_priorities(np.asarray(keys), np.ones(N))
        state = zero(state, keys)
        jax.block_until_ready(state)
        assert (table.contents()["priority"] == 0).all()
    state, inserted = jax.jit(lambda s: table.insert_batch(
        s, {"x": jnp.full((1, 1, 2), 7.0)}, jnp.array([1])))(state)
    jax.block_until_ready(state)
    table.save(tmp_path / "t.gx")  # the checkpoint holds the insert
    assert gx.Table.load(tmp_path / "t.gx").stats()["inserts"] == N + 1
    assert table.get(int(inserted[0]))["x"].tolist() == [[7.0, 7.0]]
