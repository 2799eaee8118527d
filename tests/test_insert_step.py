"""Table.insert_step and the writer's one-step fast path (xla_ffi/python/step_values.cc):
values the fast path takes are stored exactly as the general path (insert of
a length-1 trajectory) stores them; everything else goes the general way and
is converted or refused with its rules; a refused step inserts nothing."""

from __future__ import annotations

import collections
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "bfloat16", "complex64"]

# Values a step may hold: Python numbers, NumPy scalars of several widths,
# 0-d arrays, JAX scalars.
SCALARS = [True, False, 0, 1, -1, 7, 255, 256, -129, 2**31, 2**63 - 1, 2**64, 1.5, -0.0,
           float("nan"), float("inf"), 1e40, 3.4028235e38, np.int64(3), np.int8(-3),
           np.uint64(2**63 + 1), np.float32(2.5), np.float64(1e-300), np.bool_(True),
           np.array(5, np.int16), np.array(1.25, np.float32), jnp.float32(0.5), jnp.int32(9)]


def general_path(table, column, value):
    """What insert of a length-1 trajectory stores for `value`, or the
    exception type it raises."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            key = table.insert({column: np.asarray(value)[None]})
    except (TypeError, ValueError) as e:
        return type(e)
    return table.get(key)[column][0]


def fast_path(table, column, value):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            key = table.insert_step({column: value})
    except (TypeError, ValueError) as e:
        return type(e)
    return table.get(key)[column][0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_insert_step_stores_what_insert_stores_for_every_scalar_and_dtype(dtype):
    with gx.Table({"x": gx.Column((), dtype)}, capacity=4 * len(SCALARS), max_length=1) as t:
        for value in SCALARS:
            expected, got = general_path(t, "x", value), fast_path(t, "x", value)
            if isinstance(expected, type):
                assert got is expected, (dtype, value, got)
            else:
                assert not isinstance(got, type), (dtype, value, got)
                assert got.dtype == expected.dtype
                assert got.tobytes() == expected.tobytes(), (dtype, value, got, expected)


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8", "bool", "float16"])
def test_arrays_of_the_column_dtype_and_shape_go_in_exactly(dtype, rng):
    with gx.Table({"x": gx.Column((2, 3), dtype)}, capacity=8, max_length=1) as t:
        value = (rng.standard_normal((2, 3)) * 100).astype(dtype)
        key = t.insert_step({"x": value})
        np.testing.assert_array_equal(t.get(key)["x"][0], value)
        # A view that is not C-contiguous, another dtype, another shape: the
        # general path converts or refuses them as insert does.
        strided = np.asfortranarray(value)
        np.testing.assert_array_equal(t.get(t.insert_step({"x": strided}))["x"][0], value)
        with pytest.raises(ValueError, match="must have shape"):
            t.insert_step({"x": value.reshape(1, 2, 3)})  # a T axis: that is insert's form


def test_a_bad_step_is_refused_with_insert_s_message_and_inserts_nothing():
    cols = {"obs": gx.Column((4,), "float32"), "action": gx.Column((), "int32")}
    with gx.Table(cols, capacity=8, max_length=1) as t:
        good = {"obs": np.zeros(4, np.float32), "action": 1}
        with pytest.raises(ValueError, match="missing column"):
            t.insert_step({"obs": good["obs"]})
        with pytest.raises(ValueError, match="unknown column"):
            t.insert_step({**good, "extra": 1})
        with pytest.raises(TypeError, match="unsafely"):
            t.insert_step({**good, "action": 1.5})
        with pytest.raises(ValueError, match="outside the range"):
            t.insert_step({**good, "action": 2**40})
        with pytest.raises(ValueError, match="priority"):
            t.insert_step(good, priority=float("nan"))
        with pytest.raises(ValueError, match="priority"):
            t.insert_step(good, priority=-1)
        with pytest.raises(TypeError, match="mapping"):
            t.insert_step([1, 2])
        assert len(t) == 0 and t.stats()["inserts"] == 0
        key = t.insert_step(collections.OrderedDict(good), priority=np.float32(2.0))
        assert t.contents()["priority"].tolist() == [2.0] and len(t) == 1 and key >= 0


def test_insert_step_on_a_closed_table_raises():
    t = gx.Table({"x": gx.Column((), "float32")}, capacity=2, max_length=1)
    t.close()
    with pytest.raises(RuntimeError, match="closed"):
        t.insert_step({"x": 1.0})


def test_insert_step_evicts_by_the_remover_and_keys_increase():
    with gx.Table({"x": gx.Column((), "int32")}, capacity=3, max_length=1) as t:
        keys = [t.insert_step({"x": i}) for i in range(5)]
        assert keys == sorted(keys)
        assert [t.get(k)["x"][0] for k in t.contents()["key"]] == [2, 3, 4]
        assert t.stats()["evictions"] == 2


def test_insert_step_waits_on_the_rate_limiter_without_holding_the_gil():
    import threading
    limiter = gx.SampleToInsertRatio(1.0, 1, error_buffer=1.5, timeout=5.0)
    with gx.Table({"x": gx.Column((), "float32")}, capacity=64, max_length=1,
                  rate_limiter=limiter) as t:
        t.insert_step({"x": 0.0})
        t.insert_step({"x": 0.0})  # inserts are 2 ahead of samples: the next waits
        done = threading.Event()
        threading.Thread(target=lambda: (t.insert_step({"x": 1.0}), done.set())).start()
        ticks = 0
        while not done.is_set() and ticks < 20:  # this thread runs while it waits
            ticks += 1
            done.wait(0.01)
        assert not done.is_set() and ticks == 20
        import jax
        jax.block_until_ready(t.sample(jax.random.key(0), 2))
        assert done.wait(5.0)


def test_the_writer_s_fast_path_stores_what_its_general_path_stores(rng):
    cols = {"obs": gx.Column((3,), "float32"), "action": gx.Column((), "int64"),
            "reward": gx.Column((), "float32"), "done": gx.Column((), "bool")}
    steps = [{"obs": rng.standard_normal(3).astype(np.float32), "action": int(i),
              "reward": float(i) / 3, "done": i == 8} for i in range(9)]
    with gx.Table(cols, capacity=8, max_length=4) as t:
        fast, slow = t.writer("split", overlap=1), t.writer("split", overlap=1)
        for step in steps:
            fast.append(step)
            slow.append({**step, "obs": list(step["obs"])})  # a list: the general path
        a = fast.end_episode(2.0)
        slow.end_episode(2.0)
        for ka, kb in zip(fast.episode_keys, slow.episode_keys):
            for name in cols:
                np.testing.assert_array_equal(t.get(ka)[name], t.get(kb)[name])
        assert t.contents()["priority"][list(t.contents()["key"]).index(a)] == 2.0
        with pytest.raises(TypeError, match="unsafely"):
            fast.append({**steps[0], "action": 0.5})  # refused; the episode goes on
        fast.append(steps[1])
        assert fast.steps == 1


# Values for columns of shape (1,), (1, 1) and (3,): scalars of every kind,
# arrays of the right and wrong shapes, and buffers that are not NumPy's.
SHAPED_VALUES = [2.5, 3, True, np.float32(2.5), np.array(2.5, np.float32), jnp.float32(2.5),
                 np.ones(1, np.float32), np.ones((1, 1), np.float32), np.ones(3, np.float32),
                 np.ones(3, np.uint8), b"abc", bytearray(b"abc"), memoryview(b"abc"),
                 __import__("array").array("f", [1.0, 2.0, 3.0]),
                 __import__("array").array("B", [1, 2, 3])]


def outcome(call, table, column):
    """What a path stored for one step (its bytes), or the exception type."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            key = call()
    except (TypeError, ValueError) as e:
        return type(e).__name__
    return table.get(key)[column][0].tobytes()


@pytest.mark.parametrize("shape, dtype", [((1,), "float32"), ((1, 1), "float32"),
                                          ((3,), "float32"), ((3,), "uint8")])
def test_every_insert_path_takes_or_refuses_each_value_alike(shape, dtype):
    """One rule, every path: insert_step (its native fast path), insert_step
    with a priority that routes it the general way, insert of a length-1
    trajectory, and a writer's first and later appends (its first append
    builds its buffers; the later ones take the fast path). A scalar for a
    (1,) column and bytes for a uint8 one once went in by the fast path and
    were refused by the others."""
    with gx.Table({"x": gx.Column(shape, dtype)}, capacity=64, max_length=2) as t:
        for value in SHAPED_VALUES:
            def through_writer(later: bool):
                w = t.writer()
                if later:
                    w.append({"x": np.zeros(shape, dtype)})
                w.append({"x": value})
                key = w.end_episode()
                return key

            paths = {
                "insert_step": outcome(lambda: t.insert_step({"x": value}), t, "x"),
                "insert_step, general": outcome(
                    lambda: t.insert_step({"x": value}, priority=np.float32(1.0)), t, "x"),
                "insert": outcome(lambda: t.insert({"x": np.asarray(value)[None]}), t, "x"),
                "writer, first append": outcome(lambda: through_writer(False), t, "x"),
            }
            later = outcome(lambda: through_writer(True), t, "x")
            # The later append's step is the trajectory's second one.
            if isinstance(later, bytes):
                later = t.get(t.contents()["key"][-1])["x"][1].tobytes()
            paths["writer, later append"] = later
            assert len(set(paths.values())) == 1, (shape, dtype, value, paths)
