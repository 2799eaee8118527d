"""Eager samples as NumPy arrays, ``table.sample(..., numpy=True)`` (issue 49,
item 1): the native core selects and gathers straight into NumPy arrays with
no XLA program. The same key and contents give the batch the compiled sample
gives, dtypes, mask and timesteps included, for every strategy, cut and pad;
the sample counts as one (times sampled, rate limiters); bad use is refused;
failures raise the native classes that gearjax.table_error names."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest

import gearjax as gx

COLUMNS = {"obs": gx.Column((3,), "float32"), "step": gx.Column((), "int32")}
FIELDS = ("keys", "start", "probability", "table_size", "mask", "timestep")


def filled(capacity: int = 16, max_length: int = 12, n: int = 12, **kwargs) -> gx.Table:
    """n trajectories of varied lengths and priorities (the same each call)."""
    table = gx.Table(COLUMNS, capacity=capacity, max_length=max_length, placement="host",
                     **kwargs)
    rng = np.random.default_rng(1)
    for i in range(n):
        length = int(rng.integers(1, max_length + 1))
        table.insert({"obs": rng.standard_normal((length, 3), dtype=np.float32),
                      "step": np.zeros(length, np.int32)}, priority=float(i % 4))
    return table


def stamped(table: gx.Table, n: int, max_length: int) -> None:
    """n more trajectories whose obs hold their insertion number and whose
    "step" column holds the step's index, so a row says what it gathered."""
    rng = np.random.default_rng(table.stats()["inserts"])
    for _ in range(n):
        length = int(rng.integers(1, max_length + 1))
        number = table.stats()["inserts"]
        table.insert({"obs": np.full((length, 3), number, np.float32),
                      "step": np.arange(length, dtype=np.int32)})


def assert_coherent(batch: gx.Batch) -> None:
    """Every row's real steps come from one trajectory (one insertion number)
    and are the steps its timesteps name."""
    mask, obs = batch.mask, batch["obs"]
    first = obs[np.arange(len(mask)), mask.argmax(axis=1), 0]
    np.testing.assert_array_equal(np.where(mask[..., None], obs, 0),
                                  np.where(mask[..., None], first[:, None, None], 0) + 0 * obs)
    np.testing.assert_array_equal(np.where(mask, batch["step"], -1),
                                  np.where(mask, batch.timestep, -1))


def assert_same(compiled: gx.Batch, numpy_batch: gx.Batch) -> None:
    for field in FIELDS:
        expected, got = getattr(compiled, field), getattr(numpy_batch, field)
        assert isinstance(got, np.ndarray), field
        assert got.dtype == expected.dtype and got.shape == expected.shape, field
        np.testing.assert_array_equal(got, np.asarray(expected), err_msg=field)
    assert list(numpy_batch) == list(compiled)
    for name in compiled:
        assert isinstance(numpy_batch[name], np.ndarray)
        assert numpy_batch[name].dtype == compiled[name].dtype
        np.testing.assert_array_equal(numpy_batch[name], np.asarray(compiled[name]), name)


CASES = [
    dict(window=5),
    dict(window=5, pad="right"),
    dict(window=5, cut="end"),
    dict(window=4, cut="full"),
    dict(window=None),
    dict(window=5, strategy=gx.Prioritized(0.7)),
    dict(window=3, strategy=gx.Prioritized(1.0), cut="end"),
    dict(window=5, strategy=gx.Timestep(), replace=False),
    dict(window=2, strategy=gx.TopK(4)),
    dict(window=6, strategy=gx.Recent(5), pad="right"),
    dict(window=5, replace=False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_the_same_key_gives_the_compiled_sample_s_batch(case):
    table, other = filled(), filled()  # the same contents, sampled one way each
    case = dict(case)
    window = case.pop("window")
    for seed in range(3):
        key = jax.random.key(seed)
        assert_same(table.sample(key, 8, window, **case),
                    other.sample(key, 8, window, numpy=True, **case))
    # Both counted their samples alike.
    np.testing.assert_array_equal(table.contents()["times_sampled"],
                                  other.contents()["times_sampled"])


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float16", "bool", "int8",
                                   "uint64", "complex64"])
def test_every_column_dtype_gives_the_compiled_sample_s_batch(dtype):
    """Fails when the columns cross to the native core as they are: a
    bfloat16 or float8 (ml_dtypes) array cannot, and numpy=True raised a
    TypeError of nanobind's while the compiled sample served the table."""
    columns = {"x": gx.Column((2,), dtype, pad=1), "y": gx.Column((), dtype)}
    rng = np.random.default_rng(2)
    tables = [gx.Table(columns, capacity=8, max_length=6, placement="host") for _ in range(2)]
    for length in (3, 6, 1, 5):
        trajectory = {"x": rng.integers(0, 2, (length, 2)), "y": rng.integers(0, 2, length)}
        if dtype == "bool":  # an integer is never stored in a bool column
            trajectory = {n: v.astype(bool) for n, v in trajectory.items()}
        for table in tables:
            table.insert(trajectory)
    key = jax.random.key(5)
    assert_same(tables[0].sample(key, 8, 4), tables[1].sample(key, 8, 4, numpy=True))


def test_the_state_form_samples_after_the_program_that_returned_the_state():
    """The README: pass the state a program returned, and numpy=True samples
    after that program's table calls. Fails when the state is not waited
    for: the program below, still computing when the sample is called, has
    not inserted its 32 trajectories yet."""
    table = gx.Table(COLUMNS, capacity=128, max_length=4, placement="host")
    table.insert({"obs": np.zeros((4, 3), np.float32), "step": np.zeros(4, np.int32)})

    @jax.jit
    def produce(state, m):
        for _ in range(12):
            m = jax.numpy.tanh(m @ m)  # about a second of work on 2 cores
        obs = jax.numpy.ones((32, 4, 3)) + 0 * m[0, 0]
        state, _ = table.insert_batch(state, {"obs": obs, "step": jax.numpy.zeros((32, 4),
                                                                                 np.int32)},
                                      jax.numpy.full(32, 4))
        return state

    m = jax.numpy.full((1200, 1200), 1e-3)
    jax.block_until_ready(produce(table.state(), m))  # compiled, and its rows inserted
    assert len(table) == 33
    # Made first: a key made after the dispatch is computed after the program
    # (a device runs its programs in order), and reading it would wait.
    key = jax.block_until_ready(jax.random.key(1))
    state = produce(table.state(), m)
    _, batch = table.sample(state, key, 8, 1, numpy=True)
    assert (batch.table_size == 65).all()  # 1 + 32 + 32: after the second program too
    table.close()


def test_legacy_keys_and_the_state_form_give_the_same_batch():
    table = filled()
    legacy = jax.random.PRNGKey(3)
    state = table.state()
    state, compiled = table.sample(state, legacy, 6, 4)
    got_state, batch = table.sample(state, legacy, 6, 4, numpy=True)
    assert got_state is state  # nothing to order after an eager call that waited
    assert_same(compiled, batch)


def test_a_legacy_key_of_the_default_rbg_implementation_is_taken_by_every_form():
    """Under jax_default_prng_impl="rbg" jax.random.PRNGKey makes uint32[4]:
    such a key samples alike eagerly, with numpy=True and in jit (it was
    refused as not "a legacy jax.random.PRNGKey"); a raw uint32 array of
    another shape is refused, naming the shape expected."""
    table = filled()
    with jax.default_prng_impl("rbg"):
        legacy = jax.random.PRNGKey(3)
        assert legacy.shape == (4,)
        eager = table.sample(legacy, 6, 4)
        assert_same(eager, table.sample(legacy, 6, 4, numpy=True))
        _, compiled = jax.jit(lambda s, k: table.sample(s, k, 6, 4))(table.state(), legacy)
        assert_same(compiled, table.sample(legacy, 6, 4, numpy=True))
        with pytest.raises(TypeError, match=r"uint32\[4\] under the default implementation, rbg"):
            table.sample(np.zeros(3, np.uint32), 6, 4)


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg", "unsafe_rbg"])
def test_a_key_s_words_read_on_the_host_are_the_public_words(impl, monkeypatch):
    # The eager sample reads a typed key's words from JAX's internal base
    # array, sparing a dispatch: this JAX must mean by it what key_data says,
    # and a threefry key must take that path (not the public fallback).
    from gearjax import _eager_sample
    from gearjax._sample import seed_words
    keys = (jax.random.key(7, impl=impl), jax.random.split(jax.random.key(8, impl=impl))[1])
    expected = [np.asarray(seed_words(key)) for key in keys]
    if impl == "threefry2x32":
        def refuse(key):
            raise AssertionError("a threefry key's words took the key_data dispatch")
        monkeypatch.setattr(_eager_sample, "seed_words", refuse)
    for key, want in zip(keys, expected):
        words = _eager_sample.host_seed_words(key)
        assert words.dtype == np.uint32 and words.shape == (2,)
        np.testing.assert_array_equal(words, want)
    legacy = jax.random.PRNGKey(9)
    np.testing.assert_array_equal(_eager_sample.host_seed_words(legacy), np.asarray(legacy))
    np.testing.assert_array_equal(_eager_sample.host_seed_words(np.asarray(legacy)),
                                  np.asarray(legacy))


def test_step_priorities_draw_the_same_windows():
    table = gx.Table(COLUMNS, capacity=8, max_length=10, step_priorities=True,
                     placement="host")
    for i in range(6):
        table.insert({"obs": np.zeros((10, 3), np.float32), "step": np.arange(10, dtype=np.int32)},
                     priority=np.linspace(0.1, 2.0, 10) * (i + 1))
    for cut in ("start", "end", "full"):
        key = jax.random.key(7)
        assert_same(table.sample(key, 16, 4, gx.PrioritizedSteps(0.8), cut=cut),
                    table.sample(key, 16, 4, gx.PrioritizedSteps(0.8), cut=cut, numpy=True))


def test_windows_hold_the_steps_they_name():
    table = gx.Table(COLUMNS, capacity=32, max_length=9, placement="host")
    stamped(table, 20, 9)
    for pad in ("left", "right"):
        batch = table.sample(jax.random.key(0), 64, 6, pad=pad, numpy=True)
        assert batch.mask.any(axis=1).all()
        assert_coherent(batch)


def test_a_sample_counts_for_the_rate_limiter():
    table = gx.Table(COLUMNS, capacity=8, max_length=4, placement="host",
                     rate_limiter=gx.SampleToInsertRatio(1.0, 1, 8.0, timeout=0))
    stamped(table, 1, 4)
    table.sample(jax.random.key(0), 8, 2, numpy=True)  # 8 samples of 1 insert: the budget
    with pytest.raises(TimeoutError) as raised:
        table.sample(jax.random.key(1), 1, 2, numpy=True)
    assert gx.table_error(raised.value) == "timeout"
    assert table.stats()["samples"] == 8


def test_failures_raise_the_native_classes_and_change_nothing():
    empty = gx.Table(COLUMNS, capacity=4, max_length=4, placement="host")
    with pytest.raises(TimeoutError) as raised:
        empty.sample(jax.random.key(0), 2, 2, numpy=True)
    assert gx.table_error(raised.value) == "shortfall"
    table = filled()
    with pytest.raises(TimeoutError) as raised:  # more distinct trajectories than stored
        table.sample(jax.random.key(0), 13, 1, replace=False, numpy=True)
    assert gx.table_error(raised.value) == "shortfall"
    assert table.contents()["times_sampled"].sum() == 0
    table.close()
    with pytest.raises(RuntimeError) as raised:
        table.sample(jax.random.key(0), 2, 2, numpy=True)
    assert gx.table_error(raised.value) == "closed"


@pytest.mark.parametrize("strategy, step_priorities",
                         [(gx.Prioritized(1.0), False), (gx.PrioritizedSteps(1.0), True)])
def test_a_failure_as_it_runs_raises_what_the_program_raises(strategy, step_priorities):
    """Every priority 0 is found as the sample runs, past its argument
    checks: with numpy=True it raises the eager program's JaxRuntimeError,
    "failed" to table_error (it was an untagged ValueError, read as a refused
    argument)."""
    table = gx.Table(COLUMNS, capacity=4, max_length=4, placement="host",
                     step_priorities=step_priorities)
    table.insert({"obs": np.zeros((3, 3), np.float32), "step": np.arange(3, dtype=np.int32)},
                 priority=0.0)
    for numpy in (True, False):
        with pytest.raises(jax.errors.JaxRuntimeError, match="priority 0") as raised:
            table.sample(jax.random.key(0), 2, 1, strategy, numpy=numpy)
        assert gx.table_error(raised.value) == "failed"
    assert table.contents()["times_sampled"].sum() == 0


@pytest.mark.parametrize("value", ["yes", 1, None, np.array(True)])
def test_numpy_must_be_a_bool(value):
    table = filled()
    with pytest.raises(TypeError, match="numpy"):
        table.sample(jax.random.key(0), 2, 2, numpy=value)
    assert table.stats()["samples"] == 0


def test_traced_calls_refuse_numpy():
    table = filled()

    @jax.jit
    def step(state, key):
        return table.sample(state, key, 2, 2, numpy=True)

    with pytest.raises(TypeError, match="eager calls"):
        step(table.state(), jax.random.key(0))
    with pytest.raises(TypeError, match="without a table state was traced"):
        jax.jit(lambda key: table.sample(key, 2, 2, numpy=True))(jax.random.key(0))


def test_threads_sample_while_others_insert():
    table = gx.Table(COLUMNS, capacity=16, max_length=8, placement="host")
    stamped(table, 16, 8)
    failures: list[BaseException] = []
    stop = threading.Event()

    def sampler(seed: int) -> None:
        try:
            for i in range(200):
                assert_coherent(table.sample(jax.random.key(seed * 1000 + i), 16, 5,
                                             numpy=True))
        except BaseException as e:  # reported below
            failures.append(e)

    def inserter() -> None:
        while not stop.is_set():
            stamped(table, 1, 8)  # evicts the oldest: a slot reused under the samplers

    threads = [threading.Thread(target=sampler, args=(s,)) for s in range(2)]
    writer = threading.Thread(target=inserter)
    writer.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    stop.set()
    writer.join(timeout=60)
    assert not failures, failures[0]
    assert table.stats()["samples_in_flight"] == 0
