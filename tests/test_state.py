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

    with pytest.raises(ValueError, match="already passed to another table call") as refused:
        jax.jit(forked)(table.state(), jax.random.key(0))
    assert f"(now: {table!r})" in str(refused.value)  # named, once there is an error


def test_a_state_form_call_builds_no_message_unless_it_fails(table, monkeypatch):
    """Issue 49: every state-form call built repr(table) (about 12 us) in
    case it needed an error message."""
    built = []
    monkeypatch.setattr(gx.Table, "__repr__", lambda self: built.append(1) or "the table")
    keys = table.contents()["key"][:2]
    state, count = table.update_priorities(table.state(), keys, np.ones(2))
    state, batch = jax.jit(lambda s, k: table.sample(s, k, 2, 1))(state, jax.random.key(0))
    jax.block_until_ready((state, batch))
    assert int(count) == 2 and built == []


# Forks the tracer rule above cannot see (state.py): each gives one state to an
# update and to a sample that nothing orders against each other; refused when
# the program is lowered (gearjax/_forks.py), before anything runs.
FORKS = {
    "nested jit and outside": lambda u, s, smp: (jax.jit(u)(s), smp(s))[1],
    "s + 0": lambda u, s, smp: (u(s + 0), smp(s))[1],
    "stop_gradient": lambda u, s, smp: (u(jax.lax.stop_gradient(s)), smp(s))[1],
    "checkpoint and outside": lambda u, s, smp: (jax.checkpoint(u)(s), smp(s))[1],
    "a cond branch and outside": lambda u, s, smp: (
        jax.lax.cond(True, u, lambda s: s, s), smp(s))[1],
    "a cond returning its input state": lambda u, s, smp: smp(
        jax.lax.cond(True, lambda s: (u(s), s)[1], lambda s: s, s)),
    "a scan closure and outside": lambda u, s, smp: (
        jax.lax.scan(lambda c, _: (c, u(s)), 0, None, length=2), smp(s))[1],
    "a while body closure and outside": lambda u, s, smp: (
        jax.lax.while_loop(lambda c: c < 2, lambda c: (u(s), c + 1)[1], 0), smp(s))[1],
    "vmap and outside": lambda u, s, smp: (
        jax.vmap(lambda k: u(s))(jax.random.split(jax.random.key(0), 3)), smp(s))[1],
    "a custom_jvp block and outside": lambda u, s, smp: (_jvp_of(u)(s), smp(s))[1],
}
# What passes each state on: allowed.
ORDERED = {
    "straight": lambda u, s, smp: smp(u(s)),
    "through a nested jit": lambda u, s, smp: smp(jax.jit(u)(s)),
    "through a checkpoint": lambda u, s, smp: smp(jax.checkpoint(u)(s)),
    "a cond, either branch": lambda u, s, smp: smp(jax.lax.cond(True, u, smp, s)),
    "a scan carry": lambda u, s, smp: smp(jax.lax.scan(lambda c, _: (u(c), None), s, None,
                                                      length=3)[0]),
    "a while carry": lambda u, s, smp: smp(jax.lax.while_loop(
        lambda c: c[0] < 3, lambda c: (c[0] + 1, u(c[1])), (0, s))[1]),
    "vmap (one call per element, in order)": lambda u, s, smp: smp(
        jax.vmap(lambda k: u(s), out_axes=None)(jax.random.split(jax.random.key(0), 3))),
}


def _jvp_of(f):
    g = jax.custom_jvp(f)
    g.defjvp(lambda primals, tangents: (f(*primals), tangents[0]))
    return g


def _calls(table):
    keys = jnp.asarray(table.contents()["key"][:1], jnp.int32)
    return (lambda s: table.update_priorities(s, keys, jnp.zeros(1))[0],
            lambda s: table.sample(s, jax.random.key(1), 4, 1, gx.Prioritized(1.0))[0])


@pytest.mark.parametrize("fork", list(FORKS))
def test_a_fork_through_any_transformation_is_refused_before_it_runs(table, fork):
    update, sample = _calls(table)
    before = table.stats()
    with pytest.raises(ValueError, match="two table calls that nothing orders"):
        jax.jit(lambda s: FORKS[fork](update, s, sample))(table.state())
    after = table.stats()
    assert after["samples"] == before["samples"]
    assert after["priority_updates"] == before["priority_updates"]


@pytest.mark.parametrize("form", list(ORDERED))
def test_states_passed_on_through_every_transformation_are_allowed(table, form):
    update, sample = _calls(table)
    jax.block_until_ready(jax.jit(lambda s: ORDERED[form](update, s, sample))(table.state()))


def test_the_fork_that_ran_out_of_order_is_refused(table):
    """The issue's program: an update in a nested jit, written first, then a
    sample given the same state; the sample did not see the update in 20 of
    20 runs. Refused now, naming both calls' lines."""
    keys = table.contents()["key"]
    only_first = np.zeros(len(keys))
    only_first[0] = 1.0
    s = table.state()
    with pytest.raises(ValueError, match="update_priorities .* and sample .*test_state.py"):
        @jax.jit
        def program(s):
            jax.jit(lambda s: table.update_priorities(s, keys, jnp.asarray(only_first))[0])(s)
            return table.sample(s, jax.random.key(0), 16, 1, gx.Prioritized(1.0))[1].keys
        program(s)


def test_two_fresh_states_for_one_table_in_one_function_are_refused(table):
    update, sample = _calls(table)
    with pytest.raises(ValueError, match="a second table.state") as refused:
        jax.jit(lambda: (update(table.state()), sample(table.state()))[1])()
    assert f"a call on {table!r} a new chain" in str(refused.value)
    other = gx.Table({"x": gx.Column((2,), "float32")}, capacity=4, max_length=4)
    other.insert({"x": np.zeros((1, 2), np.float32)})
    # One fresh state per table is fine, and one passed on from call to call.
    jax.block_until_ready(jax.jit(lambda: (
        update(table.state()), other.sample(other.state(), jax.random.key(0), 1, 1)[0])[1])())
    jax.block_until_ready(jax.jit(lambda: sample(update(table.state())))())
    other.close()


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


def test_bad_states_are_refused(table):
    key = jax.random.key(0)
    with pytest.raises(TypeError, match="a table state is a uint32 scalar.*int32"):
        table.sample(jnp.zeros((), jnp.int32), key, 1)
    with pytest.raises(TypeError, match="a table state is a uint32 scalar"):
        table.update_priorities(jnp.zeros(2, jnp.uint32), [1], [1.0])
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


# The stateless form: eager calls only.
STATELESS = {
    "sample": (lambda t, k: t.sample(k, 2, 1),
               "state = table.state()\n    state, batch = table.sample(state, rng_key, ...)"),
    "update_priorities": (lambda t, k: t.update_priorities(
        jnp.asarray(t.contents()["key"][:2]), jnp.ones(2)),
        "state, count = table.update_priorities(state, keys, priorities)"),
    "insert_batch": (lambda t, k: t.insert_batch({"x": jnp.ones((1, 1, 2))}, jnp.array([1])),
                     "state, keys = table.insert_batch(state, columns, lengths, ...)"),
}
TRANSFORMS = {
    "jit": lambda f: jax.jit(f)(jax.random.key(0)),
    "scan": lambda f: jax.lax.scan(lambda c, k: (c, f(k)), 0, jax.random.split(
        jax.random.key(0), 2)),
    "vmap": lambda f: jax.vmap(f)(jax.random.split(jax.random.key(0), 2)),
    "grad": lambda f: jax.grad(lambda w, k: (f(k), w)[1])(1.0, jax.random.key(0)),
    "checkpoint": lambda f: jax.checkpoint(f)(jax.random.key(0)),
}


@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("call", list(STATELESS))
def test_a_stateless_call_traced_is_refused_with_the_state_form(table, call, transform):
    write, fix = STATELESS[call]
    before = table.stats()
    with pytest.raises(TypeError, match="without a table state was traced") as raised:
        TRANSFORMS[transform](lambda k: write(table, k))
    assert fix in str(raised.value)
    after = table.stats()
    assert (after["samples"], after["inserts"], after["priority_updates"]) == \
        (before["samples"], before["inserts"], before["priority_updates"])  # nothing ran


def test_a_stateless_call_with_only_concrete_operands_is_refused_inside_jit_too(table):
    # Every operand closed over (NumPy): the trace, not the operands, decides.
    keys, key = table.contents()["key"][:2], jax.random.key(0)
    for write in (lambda: table.sample(key, 2, 1).keys,
                  lambda: table.update_priorities(keys, np.ones(2)),
                  lambda: table.insert_batch({"x": np.ones((1, 1, 2), np.float32)},
                                             np.array([1]))):
        with pytest.raises(TypeError, match="without a table state was traced"):
            jax.jit(write)()
    assert table.stats()["priority_updates"] == 0


def test_a_state_form_call_with_only_concrete_operands_inside_jit_is_compiled(table):
    """A state made outside the trace and closed over, with NumPy operands:
    every form goes into the traced program and runs when it runs (the
    update was refused as a stateless call)."""
    keys, key = table.contents()["key"][:2], jax.random.key(0)
    outer = table.state()
    jax.block_until_ready(jax.jit(lambda: table.sample(outer, key, 2, 1)[1].keys)())
    update = jax.jit(lambda: table.update_priorities(outer, keys, np.full(2, 3.0))[1])
    assert int(update()) == 2 and int(update()) == 2  # runs each call, not once at trace
    assert table.stats()["priority_updates"] == 4
    assert (table.contents()["priority"] == 3.0).sum() == 2
    inserted = jax.jit(lambda: table.insert_batch(
        outer, {"x": np.ones((1, 1, 2), np.float32)}, np.array([1]))[1])()
    assert int(inserted[0]) in table.contents()["key"]


def test_eager_stateless_calls_run_at_once_each_from_a_fresh_state(table):
    before = table.stats()
    batch = table.sample(jax.random.key(0), 3, 1)
    assert batch.keys.shape == (3,)
    assert table.update_priorities(np.asarray(batch.keys), np.full(3, 2.0)) == 3
    keys = table.insert_batch({"x": jnp.ones((2, 1, 2))}, jnp.array([1, 1]))
    assert keys.shape == (2,)
    after = table.stats()
    assert after["samples"] - before["samples"] == 3 and after["inserts"] - before["inserts"] == 2
    with jax.disable_jit():  # what runs eagerly is eager, also under disable_jit
        assert jax.jit(lambda: table.sample(jax.random.key(1), 1, 1).keys.shape)() == (1,)


def test_ordered_is_deprecated_and_does_nothing(table):
    key = jax.random.key(0)
    for ordered in (True, False):
        with pytest.warns(DeprecationWarning, match=r"sample\(ordered=...\) is deprecated"):
            batch = table.sample(key, 2, 1, ordered=ordered)
        np.testing.assert_array_equal(batch.keys, table.sample(key, 2, 1).keys)
    with pytest.warns(DeprecationWarning):
        table.sample(table.state(), key, 2, 1, ordered=True)
    with pytest.raises(TypeError, match="ordered must be True or False"):
        table.sample(key, 2, 1, ordered="yes")


def test_each_state_is_its_own_array_so_donating_one_leaves_the_others(table):
    """A program that donates its table state (a train state donated whole)
    deletes that array: table.state() never hands out one array twice, or the
    other holders' states would go with it."""
    first, second = table.state(), table.state()
    assert first is not second
    jax.block_until_ready(jax.jit(lambda s: s + 0, donate_argnums=0)(first))
    state, batch = table.sample(second, jax.random.key(0), 2, 1)
    assert int(state) == 0 and batch.keys.shape == (2,)


def test_the_state_form_called_eagerly_updates_at_once_after_the_state_s_program(table):
    """Issue 49: called eagerly, update_priorities(state, ...) compiled and
    dispatched a program of its own (2.7x the stateless form). It now applies
    the update as the stateless form does, once the program that returned the
    state has run, and returns (state, count) with a NumPy int32 count."""
    keys = table.contents()["key"][:3]
    later = jax.jit(lambda s: table.update_priorities(s, jnp.asarray(keys), jnp.full(3, 5.0)))
    state, count = later(table.state())  # dispatched; may still run
    state, eager_count = table.update_priorities(state, keys, np.full(3, 7.0))
    assert isinstance(eager_count, np.int32) and int(eager_count) == 3 and int(state) == 0
    priorities = dict(zip(table.contents()["key"].tolist(), table.contents()["priority"]))
    assert [priorities[int(k)] for k in keys] == [7.0, 7.0, 7.0]  # after the program's 5.0
    assert int(count) == 3
    with pytest.raises(ValueError, match="must each be"):
        table.update_priorities(state, keys, np.array([1.0, np.nan, 1.0]))
    assert [dict(zip(table.contents()["key"].tolist(), table.contents()["priority"]))[int(k)]
            for k in keys] == [7.0, 7.0, 7.0]  # a bad value changes nothing
