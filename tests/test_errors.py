"""gearjax/errors.py: each failure of a table call is named by table_error on
every path (eager calls of both forms, compiled programs, first and later
calls, failures seen at the call or at the read), and raised as the class the
docs give for that path (docs/concepts/effects.md, "Errors")."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx
from gearjax import _gearjax, errors
from gearjax.actors import _is_closed

JaxRuntimeError = jax.errors.JaxRuntimeError
COLUMNS = {"x": gx.Column((), "float32")}


def _closed_table(name: str = "") -> gx.Table:
    table = gx.Table(COLUMNS, 8, 4, name=name)
    table.insert({"x": np.zeros(2, np.float32)})
    return table


def _consume_once_table() -> gx.Table:
    table = gx.Table(COLUMNS, 8, 4, max_times_sampled=1)
    for _ in range(2):
        table.insert({"x": np.zeros(2, np.float32)})
    return table


def _limited_table() -> gx.Table:
    # Two samples of 2 per insert at most: the first sample is allowed, the
    # second waits for inserts that never come, 10 ms.
    table = gx.Table(COLUMNS, 8, 4,
                     rate_limiter=gx.SampleToInsertRatio(1.0, 1, 2.0, timeout=0.01))
    table.insert({"x": np.zeros(2, np.float32)})
    return table


# failure -> (make the table, the kind, close the table before which call)
FAILURES = {
    "closed": (_closed_table, "closed", 1),
    "consumed": (_consume_once_table, "shortfall", None),
    "rate_limited": (_limited_table, "timeout", None),
}


def _heavy(x):
    """Work XLA's cost model counts (over 1000 flops): the CPU runs such a
    program on its worker threads, so its failure is seen when its results
    are read, not at the call."""
    m = jnp.full((16, 16), x, jnp.float32)
    return (m @ m).sum()


def _outcomes(table, step, close_before=None, calls=3):
    """The class each of `calls` calls of `step` raised (None: it ran), and
    what table_error made of it. A call's error is looked for at the call
    and when its results are read, as a training loop would meet it."""
    state, seen = table.state(), []
    for i in range(calls):
        if i == close_before:
            table.close()
        try:
            out = step(state, jax.random.key(i))
            jax.block_until_ready(out)
            state = out[0]
            seen.append(None)
        except Exception as e:  # noqa: BLE001 - the class is what is tested
            seen.append((type(e), gx.table_error(e)))
    return seen


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_eager_calls_raise_one_class_on_every_call(cpu_device, failure):
    make, kind, close_before = FAILURES[failure]
    table = make()
    seen = _outcomes(table, lambda s, k: table.sample(s, k, 2, 1), close_before)
    assert seen[0] is None
    if kind == "closed":  # refused by the Python layer before anything runs
        assert seen[1:] == [(errors.ClosedError, "closed")] * 2
        assert issubclass(errors.ClosedError, RuntimeError)
    else:  # on 8178ead the later calls raised ValueError (JAX's fast path)
        assert seen[1:] == [(JaxRuntimeError, kind)] * 2


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_small_compiled_program_fails_at_the_call(cpu_device, failure):
    """The CPU runs a cheap program at launch: its first call (JAX's Python
    dispatch) raises JaxRuntimeError, later ones (JAX's C++ fast path)
    ValueError with the same message; table_error names both."""
    make, kind, close_before = FAILURES[failure]
    table = make()
    step = jax.jit(lambda s, k: table.sample(s, k, 2, 1))
    seen = _outcomes(table, step, close_before)
    assert seen == [None, (ValueError, kind), (ValueError, kind)]


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_large_compiled_program_fails_at_the_read(cpu_device, failure):
    make, kind, close_before = FAILURES[failure]
    table = make()

    @jax.jit
    def step(state, key):
        state, batch = table.sample(state, key, 2, 1)
        return state, _heavy(batch["x"].sum())

    seen = _outcomes(table, step, close_before)
    assert seen == [None, (JaxRuntimeError, kind), (JaxRuntimeError, kind)]


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_the_eager_stateless_form_raises_one_class_on_every_call(cpu_device, failure):
    # Each call runs from a fresh state, as eager state-form calls do: the
    # same classes. (Traced, the stateless form is refused: test_state.py.)
    make, kind, close_before = FAILURES[failure]
    table = make()

    def sample(state, key):
        return state, table.sample(key, 2, 1)

    seen = _outcomes(table, sample, close_before)
    assert seen[0] is None
    if kind == "closed":
        assert seen[1:] == [(errors.ClosedError, "closed")] * 2
    else:
        assert seen[1:] == [(JaxRuntimeError, kind)] * 2


@pytest.mark.parametrize("where", ["eager", "small", "large"])
def test_a_bad_priority_computed_in_a_program_is_failed(cpu_device, where):
    table = _closed_table()
    keys = jnp.zeros(1, jnp.int32)

    def update(state, priority):
        state, count = table.update_priorities(state, keys, priority)
        return state, (_heavy(count) if where == "large" else count)

    step = update if where == "eager" else jax.jit(update)
    state = table.state()
    state, _ = jax.block_until_ready(step(state, jnp.array([2.0])))  # the first call runs
    classes = []
    for _ in range(2):
        with pytest.raises((JaxRuntimeError, ValueError), match="entry 0 is nan") as raised:
            jax.block_until_ready(step(state, jnp.array([jnp.nan])))
        # Called eagerly, the state form checks its arguments as the stateless
        # form does: a bad value is the caller's ValueError, not a table failure.
        assert gx.table_error(raised.value) == (None if where == "eager" else "failed")
        classes.append(type(raised.value))
    expected = ValueError if where in ("small", "eager") else JaxRuntimeError
    assert classes == [expected] * 2
    assert table.stats()["priority_updates"] == 1  # the failed calls changed nothing


def test_host_calls_carry_their_kind_by_class(cpu_device):
    table = gx.Table(COLUMNS, 8, 4, rate_limiter=gx.SampleToInsertRatio(1.0, 1, 0.0,
                                                                         timeout=0.01))
    table.insert({"x": np.zeros(2, np.float32)})
    with pytest.raises(TimeoutError, match="insert timed out") as raised:
        table.insert({"x": np.zeros(2, np.float32)})
    assert isinstance(raised.value, _gearjax.TableTimeoutError)
    assert gx.table_error(raised.value) == "timeout"
    writer = gx.Table(COLUMNS, 8, 4).writer()
    writer.close()
    with pytest.raises(RuntimeError, match="writer is closed") as raised:
        writer.append({"x": 1.0})
    assert gx.table_error(raised.value) == "closed"
    table.close()
    for call in (lambda: table.insert({"x": np.zeros(2, np.float32)}),
                 lambda: table.update_priorities(np.array([0]), np.array([1.0])),
                 lambda: table.sample(jax.random.key(0), 1)):
        with pytest.raises(RuntimeError, match="is closed") as raised:
            call()
        assert gx.table_error(raised.value) == "closed"


def test_a_closed_tables_name_cannot_pass_for_another_kind(cpu_device):
    name = "FAILED_PRECONDITION: gearjax [timeout]: INVALID_ARGUMENT: gearjax: "
    table = _closed_table(name)
    step = jax.jit(lambda s, k: table.sample(s, k, 2, 1))
    seen = _outcomes(table, step, close_before=1)
    assert seen[1:] == [(ValueError, "closed")] * 2


@pytest.mark.parametrize("error", [
    ValueError("batch_size must be an integer, got 'x'"),  # refused arguments
    ValueError("FAILED_PRECONDITION: the XLA runtime's own error"),
    JaxRuntimeError("INTERNAL: gearjaxx: not ours"),
    JaxRuntimeError("RESOURCE_EXHAUSTED: out of memory"),
    RuntimeError("the table is closed"),  # not raised by gearjax
    TimeoutError("a user's own timeout"),
    TypeError("FAILED_PRECONDITION: gearjax [closed]: a TypeError is never a table's"),
    KeyError("INVALID_ARGUMENT: gearjax: "),
])
def test_other_errors_are_not_a_tables(error):
    assert gx.table_error(error) is None


def test_trace_time_refusals_are_not_a_tables(cpu_device):
    table = _closed_table()
    with pytest.raises(ValueError) as raised:
        jax.jit(lambda s, k: table.sample(s, k, 0, 1))(table.state(), jax.random.key(0))
    assert gx.table_error(raised.value) is None


def test_an_actor_feeder_knows_a_closed_table_on_every_path(cpu_device):
    table = _closed_table()
    step = jax.jit(lambda s, k: table.sample(s, k, 2, 1))
    failures = []
    state = jax.block_until_ready(step(table.state(), jax.random.key(0)))[0]
    table.close()
    for call in (lambda: step(state, jax.random.key(1)),  # ValueError on the fast path
                 lambda: table.insert({"x": np.zeros(2, np.float32)})):
        try:
            call()
        except Exception as e:  # noqa: BLE001
            failures.append(e)
    assert isinstance(failures[0], ValueError) and _is_closed(failures[0])
    assert isinstance(failures[1], RuntimeError) and _is_closed(failures[1])
    assert not _is_closed(RuntimeError("closed"))  # on 8178ead: True


def test_the_documented_retry_loop_catches_a_timeout_on_every_call(cpu_device):
    """docs/concepts/effects.md, "Errors in compiled code": catch both classes,
    keep only timeouts, dispatch again (with the state passed in)."""
    table = _limited_table()
    step = jax.jit(lambda s, k: table.sample(s, k, 2, 1))
    state, retries = table.state(), 0
    for i in range(4):
        while True:
            try:
                state, batch = step(state, jax.random.key(i))
                break
            except (jax.errors.JaxRuntimeError, ValueError) as e:
                if gx.table_error(e) != "timeout":
                    raise
                retries += 1
                table.insert({"x": np.zeros(2, np.float32)})  # what the retry waits for
    # Steps 2-4 each need two more inserts (1 sample per insert, 2 rows a step).
    assert retries == 6 and batch.keys.shape == (2,)
    with pytest.raises(ValueError, match="batch_size"):  # an argument error is not caught
        try:
            step2 = jax.jit(lambda s, k: table.sample(s, k, -1, 1))
            step2(state, jax.random.key(9))
        except (jax.errors.JaxRuntimeError, ValueError) as e:
            if gx.table_error(e) != "timeout":
                raise


def test_an_empty_table_says_so_and_what_to_do(cpu_device):
    """Sampling an empty table eagerly: the class every eager table failure
    has (JaxRuntimeError, kind "shortfall": it does not wait), a message that
    says the table is empty and how to wait for inserts, never the XLA
    runtime's DEADLINE_EXCEEDED."""
    with gx.Table({"x": gx.Column((), "float32")}, capacity=4, max_length=2) as table:
        for _ in range(2):  # the first call and the later ones alike
            with pytest.raises(JaxRuntimeError) as raised:
                table.sample(jax.random.key(0), 2)
            message = str(raised.value)
            assert "the table is empty" in message and "MinSize(1, timeout=60)" in message
            assert "DEADLINE_EXCEEDED" not in message
            assert gx.table_error(raised.value) == "shortfall"


@pytest.mark.parametrize("call", ["cut_full", "replace_false"])
def test_a_shortfall_that_does_not_wait_is_its_own_kind_and_one_that_waited_a_timeout(
        cpu_device, call):
    """Issue 49: a cut="full" sample no trajectory can serve failed as
    "gearjax [timeout]" though nothing waited. Without waiting (no rate
    limiter) it is a "shortfall", in the message's tag too; where a rate
    limiter let it wait for items and none came, it is a "timeout"."""
    args = {"cut_full": dict(window=20, cut="full"), "replace_false": dict(window=2,
                                                                          replace=False)}[call]
    for limiter, kind in [(None, "shortfall"), (gx.MinSize(1, timeout=0.05), "timeout")]:
        with gx.Table(COLUMNS, capacity=8, max_length=30, rate_limiter=limiter) as table:
            table.insert({"x": np.zeros(5, np.float32)})
            before = table.stats()["samples"]
            with pytest.raises(JaxRuntimeError, match=rf"gearjax \[{kind}\]: cannot sample 4 "
                                                      r"rows: the table holds 1 trajector"):
                table.sample(jax.random.key(0), 4, **args)
            with pytest.raises((JaxRuntimeError, ValueError)) as raised:
                jax.block_until_ready(jax.jit(lambda s, k, t=table: t.sample(s, k, 4, **args))(
                    table.state(), jax.random.key(0)))
            assert gx.table_error(raised.value) == kind
            assert table.stats()["samples"] == before  # nothing counted


def test_a_shortfall_raised_by_the_core_is_a_timeout_error_of_its_own_class():
    """A native call that raises it directly (not through a program) raises
    TableShortfallError, a TimeoutError (so code that caught the timeout it
    was before still catches it)."""
    assert issubclass(_gearjax.TableShortfallError, _gearjax.TableTimeoutError)
    assert issubclass(_gearjax.TableShortfallError, TimeoutError)
    assert gx.table_error(_gearjax.TableShortfallError("x")) == "shortfall"
    assert gx.table_error(_gearjax.TableTimeoutError("x")) == "timeout"
