"""Property-based tests (hypothesis) of argument validation at every public
entry point: whatever a caller passes, each call either does what it promises
or raises TypeError or ValueError (KeyError for get, CheckpointError for load)
naming the problem, and a refused call changes nothing. The crash suite
(test_crashes.py) runs the known hostile calls in subprocesses."""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import gearjax as gx

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
REFUSED = (TypeError, ValueError)

# Numbers at the edges a caller can reach: huge and tiny, NaN, infinities,
# subnormals, bools, NumPy scalars, big Python ints.
EDGE_INTS = st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, 2**31 + 1, 2**32 + 5, 2**62, 2**63 - 1,
                             2**63, 2**64, 10**30, -(2**63)])
EDGE_FLOATS = st.sampled_from([0.0, -0.0, 1e-320, 5e-324, 2.2250738585072014e-308, 1e-300, 1e30,
                               1.0000000150474662e30, 1.0000000150474663e30, 1e31, 1e200, 1e308, math.inf, -math.inf, math.nan, 0.5, -0.5])
ANY_SCALAR = st.one_of(
    st.integers(-10**40, 10**40), EDGE_INTS, st.floats(allow_nan=True, allow_infinity=True),
    EDGE_FLOATS, st.booleans(), st.none(), st.text(max_size=3),
    st.builds(np.int64, st.integers(-2**63, 2**63 - 1)), st.builds(np.float32, st.floats(width=32)),
    st.builds(np.uint64, st.integers(0, 2**64 - 1)), st.just(np.bool_(True)),
    st.just([1, 2]), st.just(np.array([1.0, 2.0])))

COLUMNS = {"x": gx.Column((2,), "float32"), "n": gx.Column((), "int32", pad=-1)}


@pytest.fixture
def table():
    t = gx.Table(COLUMNS, capacity=8, max_length=6, name="hostile")
    rng = np.random.default_rng(0)
    for length in (1, 3, 6, 2, 5):
        t.insert({"x": rng.standard_normal((length, 2)), "n": np.arange(length)},
                 priority=float(rng.uniform(0.5, 2)))
    yield t
    t.close()


def snapshot(table: gx.Table) -> tuple:
    s = table.stats()
    c = table.contents()
    return (s["size"], s["inserts"], s["samples"], s["evictions"], s["priority_updates"],
            s["next_sequence"], tuple(c["key"]), tuple(c["priority"]), tuple(c["length"]))


def attempt(table, call):
    """Runs `call`; returns True if it succeeded, False if it was refused with
    a clear error (at the Python boundary, or from inside a compiled program
    for traced values), in which case the table must be unchanged."""
    before = snapshot(table)
    try:
        jax.block_until_ready(call())
        return True
    except REFUSED:
        pass
    except jax.errors.JaxRuntimeError as e:
        assert "INVALID_ARGUMENT: gearjax: " in str(e), e
    assert snapshot(table) == before, "a refused call changed the table"
    return False


def is_integer(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def is_real(v) -> bool:
    return is_integer(v) or isinstance(v, (float, np.floating))


def int_in(v, lo, hi) -> bool:
    return is_integer(v) and lo <= int(v) <= hi


def real_in(v, lo, hi) -> bool:
    try:
        return is_real(v) and lo <= float(v) <= hi
    except OverflowError:
        return False


def valid_priority(v) -> bool:
    return is_real(v) and (real_in(v, 0, 0) or real_in(v, 2.2250738585072014e-308, 1.0000000150474662e30))


# ------------------------------------------------------------ constructors


@SETTINGS
@given(shape=st.one_of(st.tuples(ANY_SCALAR), st.tuples(EDGE_INTS, EDGE_INTS), ANY_SCALAR),
       dtype=st.sampled_from(["float32", "int8", "bool", "uint64", "bfloat16", "object", "U3",
                              "datetime64[s]", 7, None, "nonsense"]),
       pad=ANY_SCALAR)
def test_column_is_built_or_refused(shape, dtype, pad):
    try:
        column = gx.Column(shape, dtype, pad)
    except REFUSED:
        return
    assert all(isinstance(d, int) and d >= 1 for d in column.shape)
    assert column.step_bytes >= 1


@SETTINGS
@given(capacity=st.one_of(st.integers(1, 64), ANY_SCALAR),
       max_length=st.one_of(st.integers(1, 64), ANY_SCALAR),
       placement=st.one_of(st.sampled_from(["host", "auto", "device"]), ANY_SCALAR),
       remover=st.one_of(st.sampled_from(["fifo", "lifo", "min_priority"]), ANY_SCALAR),
       name=st.one_of(st.text(max_size=5), ANY_SCALAR))
def test_table_is_built_or_refused(capacity, max_length, placement, remover, name):
    # Valid sizes beyond 64 would allocate for real; the contract's edges are
    # covered by EDGE_INTS (2**31 and beyond are refused before allocating).
    assume(not (is_integer(capacity) and 64 < capacity <= 2**31 and
                is_integer(max_length) and 1 <= max_length <= 2**31))
    assume(not (is_integer(max_length) and 64 < max_length <= 2**31 and
                is_integer(capacity) and 1 <= capacity <= 2**31))
    valid = (int_in(capacity, 1, 2**31) and int_in(max_length, 1, 2**31)
             and isinstance(placement, str) and placement in ("host", "auto")
             and isinstance(remover, str) and remover in ("fifo", "lifo", "min_priority")
             and isinstance(name, str)
             and (not is_integer(capacity) or not is_integer(max_length)
                  or capacity * max_length * 12 < 2**34))
    try:
        t = gx.Table(COLUMNS, capacity, max_length, placement=placement, remover=remover,
                     name=name)
    except REFUSED:
        assert not valid or (isinstance(placement, str) and placement == "device")
        return
    assert valid
    with t:
        assert 1 <= t.capacity <= 64 and 1 <= t.max_length <= 64


@SETTINGS
@given(value=st.one_of(ANY_SCALAR, st.floats(0, 8)))
def test_strategies_are_built_or_refused(value):
    # real_in first: it keeps float() away from huge integers. A subnormal
    # alpha is refused (XLA's threads would read it as 0).
    alpha_valid = real_in(value, 0, 8) and not 0 < float(value) < 2.2250738585072014e-308
    for make, valid in ((gx.Prioritized, alpha_valid),
                        (gx.TopK, int_in(value, 1, math.inf)),
                        (gx.Recent, int_in(value, 1, math.inf))):
        try:
            strategy = make(value)
        except REFUSED:
            assert not valid, f"{make.__name__}({value!r}) was refused"
            continue
        assert valid, f"{make.__name__}({value!r}) was accepted"
        if make is gx.Prioritized:
            assert 0 <= strategy.alpha <= 8
        else:
            assert isinstance(strategy.count, int) and strategy.count >= 1


@SETTINGS
@given(a=ANY_SCALAR, b=ANY_SCALAR, c=ANY_SCALAR, timeout=ANY_SCALAR)
def test_rate_limiters_are_built_or_refused(a, b, c, timeout):
    cases = ((lambda: gx.MinSize(a, timeout), int_in(a, 1, 2**31) and real_in(timeout, 0, 1e9)),
             (lambda: gx.SampleToInsertRatio(a, b, c, timeout),
              real_in(a, 0, 1e9) and float(a) > 0 and int_in(b, 1, 2**31)
              and real_in(c, 0, 1e15) and real_in(timeout, 0, 1e9)))
    for make, valid in cases:
        try:
            limiter = make()
        except REFUSED:
            assert not valid
            continue
        assert valid
        for number in (getattr(limiter, "samples_per_insert", 1.0), limiter.timeout):
            assert math.isfinite(number) and 0 <= number <= 1e9


# ------------------------------------------------------------ table calls


@SETTINGS
@given(batch_size=st.one_of(st.integers(1, 40), ANY_SCALAR),
       window=st.one_of(st.none(), st.integers(1, 6), ANY_SCALAR),
       strategy=st.one_of(
           st.sampled_from([gx.Uniform(), gx.Timestep(), gx.Prioritized(0.5), gx.Prioritized(8.0),
                            gx.TopK(1), gx.TopK(2**63), gx.Recent(10**30), gx.Recent(3)]),
           ANY_SCALAR),
       pad=st.one_of(st.sampled_from(["left", "right"]), ANY_SCALAR),
       ordered=st.one_of(st.booleans(), ANY_SCALAR))
def test_sample_samples_or_refuses(table, batch_size, window, strategy, pad, ordered):
    # ordered is deprecated and does nothing: None (the default) or a bool,
    # which warns; anything else is refused.
    assume(not (is_integer(batch_size) and 40 < batch_size < 2**31))  # would really allocate

    def sample(key):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batch = table.sample(key, batch_size, window, strategy, pad, ordered=ordered)
        warned = [w for w in caught if issubclass(w.category, DeprecationWarning)
                  and "ordered=" in str(w.message)]
        assert len(warned) == (ordered is not None), (ordered, caught)
        return batch

    ok = attempt(table, lambda: sample(jax.random.key(0)))
    valid = (int_in(batch_size, 1, 2**31 - 1) and (window is None or int_in(window, 1, 6))
             and isinstance(strategy, gx.Strategy) and isinstance(pad, str)
             and pad in ("left", "right")
             and (ordered is None or isinstance(ordered, (bool, np.bool_))))
    assert ok == valid, (batch_size, window, strategy, pad, ordered)
    if ok:
        batch = sample(jax.random.key(1))
        keys = set(table.contents()["key"].tolist())
        assert set(np.asarray(batch.keys).tolist()) <= keys
        probability = np.asarray(batch.probability)
        assert np.isfinite(probability).all() and (probability > 0).all()


@SETTINGS
@given(length=st.one_of(st.integers(0, 8), EDGE_INTS), priority=ANY_SCALAR)
def test_insert_inserts_or_refuses(table, length, priority):
    assume(not is_integer(length) or length <= 10)  # a real array of that many steps
    trajectory = {"x": np.zeros((length, 2)), "n": np.arange(length)} if is_integer(length) \
        and length >= 0 else {"x": np.zeros((1, 2)), "n": np.zeros(1)}
    ok = attempt(table, lambda: table.insert(trajectory, priority))
    assert ok == (int_in(length, 1, 6) and valid_priority(priority)), (length, priority)
    if ok:
        newest = table.contents()
        assert newest["priority"][-1] == float(priority)


@SETTINGS
@given(keys=st.lists(st.one_of(st.integers(-2**63, 2**63 - 1), EDGE_INTS), max_size=6),
       priorities=st.lists(st.one_of(st.floats(allow_nan=True), EDGE_FLOATS), max_size=6),
       traced=st.booleans())
def test_update_priorities_updates_or_refuses(table, keys, priorities, traced):
    live = table.contents()["key"].tolist()
    keys = (keys + live)[:len(priorities)] if len(priorities) > len(keys) else keys
    fits = all(-2**63 <= k < 2**63 for k in keys)
    if traced:  # integer arrays passed into jit are int32 without jax_enable_x64
        keys = [k for k in keys if -2**31 <= k < 2**31]
        priorities = priorities[:len(keys)]
        update = jax.jit(lambda s, k, p: table.update_priorities(s, k, p))

        def run():
            _, count = update(table.state(), np.asarray(keys, np.int32),
                              np.asarray(priorities, np.float64))
            if int(count) == -1:  # a GPU update never fails its program: the next call raises
                table.contents()
            return count

        ok = attempt(table, run)
    else:
        ok = attempt(table, lambda: table.update_priorities(
            np.asarray(keys, np.int64 if fits else object), priorities))
    if ok:
        stored = dict(zip(table.contents()["key"].tolist(), table.contents()["priority"]))
        final = dict(zip(keys, priorities))  # the last value of a repeated key wins
        for key, priority in final.items():
            if key in stored:
                assert stored[key] == np.float32(priority) if traced else stored[key] == priority


@SETTINGS
@given(lengths=st.lists(st.one_of(st.integers(-3, 8), EDGE_INTS), min_size=2, max_size=2),
       priorities=st.one_of(st.none(), st.lists(st.one_of(st.floats(allow_nan=True),
                                                          EDGE_FLOATS), min_size=2, max_size=2)))
def test_insert_batch_inserts_all_or_nothing(table, lengths, priorities):
    columns = {"x": jnp.zeros((2, 4, 2)), "n": jnp.zeros((2, 4), jnp.int32)}
    if attempt(table, lambda: table.insert_batch(columns, np.asarray(lengths, dtype=object)
                                                 if any(abs(x) >= 2**63 for x in lengths)
                                                 else np.asarray(lengths), priorities)):
        assert all(1 <= n <= 4 for n in lengths)


@SETTINGS
@given(key=st.one_of(ANY_SCALAR, st.sampled_from([1.5, "1", True, 2**70, -1])))
def test_get_returns_a_trajectory_or_refuses(table, key):
    stored = table.contents()["key"].tolist()
    try:
        got = table.get(key)
    except TypeError:
        assert not is_integer(key)
        return
    except KeyError:
        assert is_integer(key) and int(key) not in stored
        return
    assert is_integer(key) and int(key) in stored
    assert set(got) == set(COLUMNS)


@SETTINGS
@given(data=st.binary(max_size=600))
def test_load_of_arbitrary_bytes_is_refused(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("junk") / "junk.gx"
    path.write_bytes(data)
    with pytest.raises(gx.CheckpointError):
        gx.Table.load(path)
