"""The table state (gearjax/state.py): what it is, how a call tells its two
forms apart, what is refused while tracing, and that a block none of whose
results is used still runs its table calls."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx


@pytest.fixture
def table():
    t = gx.Table({"x": gx.Column((2,), "float32")}, capacity=16, max_length=4, name="state")
    for i in range(16):
        t.insert({"x": np.full((3, 2), i, np.float32)})
    yield t
    t.close()


def test_a_state_is_a_uint32_zero_scalar_that_calls_pass_on(table):
    state = table.state()
    assert isinstance(state, jax.Array) and state.shape == () and state.dtype == jnp.uint32
    assert int(state) == 0
    state, batch = table.sample(state, jax.random.key(0), 2, 1)
    state, count = table.update_priorities(state, batch.keys, np.ones(2))
    state, keys = table.insert_batch(state, {"x": jnp.ones((1, 1, 2))}, jnp.array([1]))
    assert int(state) == 0 and int(count) == 2 and keys.shape == (1,)
    assert isinstance(gx.TableState, type) and isinstance(state, gx.TableState)


def test_the_stateful_and_stateless_forms_are_told_apart(table):
    key = jax.random.key(0)
    assert isinstance(table.sample(key, 2, 1), gx.Batch)
    assert isinstance(table.sample(table.state(), key, 2, 1), tuple)
    # update_priorities: by the number of arguments (keys may be any integers)
    keys = table.contents()["key"][:2]
    assert table.update_priorities(keys, np.ones(2)) == 2
    state, count = table.update_priorities(table.state(), keys, np.ones(2))
    assert int(count) == 2
    state, count = table.update_priorities(table.state(), keys=keys, priorities=np.ones(2))
    assert int(count) == 2
    legacy_key = jax.random.PRNGKey(0)  # uint32[2]: a key, not a state
    assert isinstance(table.sample(legacy_key, 2, 1), gx.Batch)


def test_a_state_with_its_priorities_forgotten_is_refused_not_read_as_keys(table):
    """update_priorities(state, keys) once read the state as keys (uint32 0)
    and the keys as priorities: key 0's priority became the other key's value,
    eagerly and inside jit."""
    keys = table.contents()["key"]
    before = table.contents()["priority"].copy()
    with pytest.raises(TypeError, match="reads as a table state.*three"):
        table.update_priorities(table.state(), np.array([keys[3]]))
    with pytest.raises(TypeError, match="reads as a table state"):
        jax.jit(lambda s: table.update_priorities(s, jnp.array([keys[3]], jnp.int32)))(
            table.state())
    np.testing.assert_array_equal(table.contents()["priority"], before)
    # A key given as a uint32 array of shape [1], or a Python int, is not a state.
    assert table.update_priorities(np.array([keys[3]], np.uint32), [2.0]) == 1
    assert table.update_priorities(int(keys[4]), 3.0) == 1


def test_giving_one_state_to_two_calls_in_one_function_is_refused(table):
    def forked(state, key):
        a, _ = table.sample(state, key, 1, 1)
        b, _ = table.sample(state, key, 1, 1)  # not the state the first returned
        return a, b

    with pytest.raises(ValueError, match="already passed to another table call"):
        jax.jit(forked)(table.state(), jax.random.key(0))


def test_a_state_closed_over_by_both_branches_of_a_cond_is_allowed(table):
    @jax.jit
    def program(state, flag, key):
        return jax.lax.cond(flag, lambda: table.sample(state, key, 1, 1)[0],
                            lambda: table.sample(state, key, 2, 1)[0])

    before = table.stats()["samples"]
    jax.block_until_ready(program(table.state(), True, jax.random.key(0)))
    jax.block_until_ready(program(table.state(), False, jax.random.key(0)))
    assert table.stats()["samples"] - before == 3


def test_one_state_can_order_the_calls_of_two_tables(table):
    with gx.Table({"x": gx.Column((2,), "float32")}, 4, 4) as other:
        @jax.jit
        def move(state, key):
            state, batch = table.sample(state, key, 1, 1)
            state, keys = other.insert_batch(state, {"x": batch["x"]}, jnp.array([1]))
            return state, batch["x"]

        state, moved = move(table.state(), jax.random.key(0))
        jax.block_until_ready(state)
        assert len(other) == 1
        np.testing.assert_array_equal(other.get(int(other.contents()["key"][0]))["x"],
                                      np.asarray(moved)[0])


def test_bad_states_and_ordered_false_with_a_state_are_refused(table):
    key = jax.random.key(0)
    with pytest.raises(TypeError, match="a table state is a uint32 scalar.*int32"):
        table.sample(jnp.zeros((), jnp.int32), key, 1)
    with pytest.raises(TypeError, match="a table state is a uint32 scalar"):
        table.update_priorities(jnp.zeros(2, jnp.uint32), [1], [1.0])
    with pytest.raises(ValueError, match="ordered=False is for the stateless form"):
        table.sample(table.state(), key, 1, ordered=False)
    with pytest.raises(TypeError, match="a table state is a uint32 scalar"):
        jax.jit(lambda s: table.insert_batch(s, {"x": jnp.ones((1, 1, 2))}, jnp.array([1])))(
            jnp.zeros((), jnp.float32))


def test_a_state_survives_jit_boundaries_and_pytrees(table):
    train_state = {"params": jnp.ones(3), "table": table.state()}

    @jax.jit
    def step(train_state, key):
        state, batch = table.sample(train_state["table"], key, 2, 1)
        return {"params": train_state["params"] + batch["x"].sum(), "table": state}

    for i in range(3):
        train_state = step(train_state, jax.random.key(i))
    assert train_state["table"].dtype == jnp.uint32


def test_a_cond_whose_results_are_all_unused_still_runs_its_call(table):
    # JAX drops a block none of whose results is used unless it has effects;
    # gearjax/_jax_fixes.py counts a table call inside as one (more blocks in
    # test_effects.py).
    @jax.jit
    def discards(state, key):
        jax.lax.cond(True, lambda: table.sample(state, key, 1, 1)[0], lambda: state)
        return state

    before = table.stats()["samples"]
    jax.block_until_ready(discards(table.state(), jax.random.key(0)))
    assert table.stats()["samples"] == before + 1
