"""gearjax/_call_forms.py: both tables tell a call written with a table state
from one written without by the same rules, and refuse what would be misread."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx
from gearjax import _call_forms


@pytest.fixture
def state():
    return gx.Table({"x": gx.Column((), "float32")}, 4, 2).state()


def test_a_sample_with_a_state_first_is_split(state):
    key = jax.random.key(0)
    assert _call_forms.split_state((state, key, 8)) == (state, (key, 8))
    assert _call_forms.split_state((key, 8)) == (None, (key, 8))


@pytest.mark.parametrize("before", [3, np.int32(7), 0.5, np.zeros(2, np.uint32)])
def test_something_not_a_state_before_a_key_is_refused_as_a_state(before):
    with pytest.raises(TypeError):
        _call_forms.split_state((before, jax.random.key(0), 8))


def test_insert_batch_is_split_by_the_mapping_of_columns(state):
    columns = {"x": np.zeros((1, 2), np.float32)}
    assert _call_forms.split_insert_batch_state((state, columns, [2]), {})[0] is state
    assert _call_forms.split_insert_batch_state((columns, [2]), {})[0] is None
    assert _call_forms.split_insert_batch_state((state,), {"columns": columns})[0] is state


def test_update_priorities_is_split_by_its_count_and_refuses_a_forgotten_priority(state):
    keys, priorities = np.arange(3), np.ones(3)
    assert _call_forms.split_update_state((state, keys, priorities), {}) == \
        (state, (keys, priorities))
    assert _call_forms.split_update_state((keys, priorities), {})[0] is None
    with pytest.raises(TypeError, match="takes three"):
        _call_forms.split_update_state((state, keys), {})


def test_only_typed_keys_count_as_keys():
    assert _call_forms.is_key(jax.random.key(0))
    assert not _call_forms.is_key(jax.random.PRNGKey(0))
    assert not _call_forms.is_key(3)


def small_table() -> gx.Table:
    table = gx.Table({"x": gx.Column((), "float32")}, capacity=4, max_length=4)
    table.insert({"x": np.arange(4, dtype=np.float32)})
    return table


def test_eager_calls_share_one_zero_state_and_remake_it_once_deleted():
    first = _call_forms.eager_state("table.sample(key, ...)", "")
    assert first is _call_forms.eager_state("table.sample(key, ...)", "")
    assert first.shape == () and int(first) == 0
    first.delete()  # as a program that donated it would
    table = small_table()
    assert table.sample(jax.random.key(0), 2, 2)["x"].shape == (2, 2)
    again = _call_forms.eager_state("table.sample(key, ...)", "")
    assert again is not first and not again.is_deleted()


def test_a_checked_sample_argument_set_lets_nothing_else_pass_as_it():
    table = small_table()
    table.sample(jax.random.key(0), 1, 2)  # (int 1, int 2) checked and kept
    with pytest.raises(TypeError, match="batch_size"):
        table.sample(jax.random.key(0), True, 2)  # True == 1 and hashes alike
    with pytest.raises(TypeError, match="window"):
        table.sample(jax.random.key(0), 1, 2.0)
    with pytest.raises(TypeError, match="batch_size"):
        table.sample(jax.random.key(0), np.array([1]), 2)  # unhashable: checked, refused


def test_checked_sample_argument_sets_are_bounded():
    table = small_table()
    for batch in range(1, 100):  # the checks alone: a sample would compile each
        table._checked_sample_args(batch, 2, gx.Uniform(), None, "start", True)
    assert 0 < len(table._checked_samples) <= 64


def _pending_class(waited: list):
    """A stand-in for a state's array: its block_until_ready records the wait in `waited`."""

    class Pending:
        def block_until_ready(self):
            waited.append(self)
            return self

    return Pending


def test_waiting_for_a_state_waits_for_its_program_and_raises_its_failure():
    """wait_for, what an eager call given a state does first: a JAX state is
    waited for by its own method (once), a NumPy one has nothing to wait
    for, and a state whose program failed raises that failure there."""
    waited = []
    Pending = _pending_class(waited)

    pending = Pending()
    _call_forms.wait_for(pending)
    assert waited == [pending]
    _call_forms.wait_for(np.zeros((), np.uint32))  # nothing runs, nothing raised

    with gx.Table({"x": gx.Column((), "float32")}, capacity=4, max_length=2) as table:

        @jax.jit
        def heavy(state, key):  # XLA:CPU runs it on its threads: a failure shows when read
            state, batch = table.sample(state, key, 2)
            m = jnp.full((16, 16), batch["x"].sum(), jnp.float32)
            return state, (m @ m).sum()

        failed, _ = heavy(table.state(), jax.random.key(0))  # the table is empty
        with pytest.raises(jax.errors.JaxRuntimeError) as raised:
            _call_forms.wait_for(failed)
        assert gx.table_error(raised.value) == "shortfall"
        with pytest.raises(jax.errors.JaxRuntimeError):  # not remembered as ready
            _call_forms.wait_for(failed)


def test_a_state_found_ready_is_not_waited_for_again_by_the_next_eager_call():
    """wait_for remembers (weakly) the state it last found ready, and an eager
    call given it again, as a loop passing the state on does, skips the
    wait; another state is waited for, and a state freed is forgotten."""
    waited = []
    Pending = _pending_class(waited)

    first, second = Pending(), Pending()
    _call_forms.wait_for(first)
    _call_forms.wait_for(first)
    assert waited == [first]
    _call_forms.wait_for(second)
    _call_forms.wait_for(first)  # one state at a time: the last found ready
    assert waited == [first, second, first]
    _call_forms.mark_ready(3)  # not weakly referable: not remembered, no error
    _call_forms.wait_for(first)
    assert waited == [first, second, first]
    del first, second
    waited.clear()
    third = Pending()  # may take a freed state's id: still waited for
    _call_forms.wait_for(third)
    assert waited == [third]


def test_a_state_found_ready_then_deleted_is_refused_as_before():
    """A state remembered as ready and then deleted (donated to a program)
    raises when waited for, as any deleted state does, and an eager call
    given it changes nothing."""
    table = gx.Table({"x": gx.Column((), "float32")}, 4, 2)
    state, keys = table.insert_batch(table.state(), {"x": np.ones((1, 2), np.float32)}, [2])
    assert _call_forms._last_ready() is state
    jax.block_until_ready(jax.jit(lambda s: s + 0, donate_argnums=0)(state))
    assert state.is_deleted()
    with pytest.raises(jax.errors.JaxRuntimeError, match="deleted or donated"):
        _call_forms.wait_for(state)
    with pytest.raises(jax.errors.JaxRuntimeError, match="deleted or donated"):
        table.update_priorities(state, keys, np.array([5.0]))
    assert table.contents()["priority"].tolist() == [1.0]


class _DeferredAfterWait:
    """A host table's native object whose deferred error (what a failed GPU
    priority update leaves for the table's next call) shows up while the
    given state's program runs: from its second check on, the first being
    the call's own check before the wait."""

    def __init__(self, native):
        self.native, self.checks = native, 0

    def raise_deferred_error(self):
        self.checks += 1
        if self.checks >= 2:
            raise ValueError("an earlier GPU priority update failed (simulated)")

    def __getattr__(self, name):
        return getattr(self.native, name)


@pytest.mark.parametrize("call", ["update_priorities", "insert_batch", "sample_numpy"])
def test_an_eager_state_form_call_raises_an_error_its_state_s_program_left(call):
    """Waiting for the state's program may leave a GPU update's deferred
    error for the table's next call, which this call is: it raises it after
    the wait, before it changes anything."""
    table = gx.Table({"x": gx.Column((), "float32")}, 4, 2)
    key = table.insert({"x": np.ones(2, np.float32)}, priority=1.0)
    state = table.state()
    _call_forms._last_ready = None  # it is waited for
    native = table._native
    table._native = _DeferredAfterWait(native)
    with pytest.raises(ValueError, match="simulated"):
        if call == "update_priorities":
            table.update_priorities(state, np.array([key]), np.array([5.0]))
        elif call == "insert_batch":
            table.insert_batch(state, {"x": np.ones((1, 2), np.float32)}, [2])
        else:
            table.sample(state, jax.random.key(0), 2, numpy=True)
    table._native = native
    contents = table.contents()
    assert contents["key"].tolist() == [key] and contents["priority"].tolist() == [1.0]


def test_the_eager_state_forms_pass_on_a_state_that_is_ready():
    """An eager call in the state form returns a state that is ready, which
    the next eager state-form call does not wait for again."""
    table = gx.Table({"x": gx.Column((), "float32")}, 4, 2)
    state = table.state()
    state, keys = table.insert_batch(state, {"x": np.ones((2, 2), np.float32)}, [2, 1])
    assert keys.shape == (2,)
    assert _call_forms._last_ready() is state
    state, batch = table.sample(state, jax.random.key(0), 4)
    assert _call_forms._last_ready() is state
    state, count = table.update_priorities(state, batch.keys, np.ones(4))
    assert count == 4 and _call_forms._last_ready() is state
