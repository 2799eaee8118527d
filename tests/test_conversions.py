"""One conversion rule on every insert path (docs: Tables, "Conversions"): kinds that allow it
(never float into integer, never complex into real), integers that fit, and a value may
round but never change class (finite stays finite, inf stays inf, NaN stays NaN). Host
data is checked value by value; JAX arrays given to insert_batch, whose values cannot be
looked at when traced, only where every value of their dtype fits. A refusal inserts
nothing."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import gearjax as gx

# (column dtype, a host value, the error) for values the rule refuses; each was stored
# silently changed by some path once (inf, nan, or the imaginary part dropped).
REFUSED = [
    ("float32", 1e39, ValueError, r"the value 1e\+39 \(of float64\) would be stored as inf"),
    ("float32", -1e39, ValueError, "would be stored as -inf"),
    ("float16", 70000, ValueError, r"the value 70000 \(of int64\) would be stored as inf"),
    ("float8_e4m3fn", 1000.0, ValueError, "would be stored as nan"),
    ("float8_e4m3fn", float("inf"), ValueError, "the value inf .* would be stored as nan"),
    ("bfloat16", 1e39, ValueError, "would be stored as inf"),
    ("float8_e8m0fnu", -2.0, ValueError, "would be stored as nan"),
    ("bfloat16", 1 + 2j, TypeError, "complex128 data would be converted unsafely"),
    ("float32", 1 + 2j, TypeError, "complex128 data would be converted unsafely"),
    ("complex64", complex(1e39, 0), ValueError, "would be stored as"),
    ("int32", 1.5, TypeError, "float64 data would be converted unsafely"),
    ("int32", 2**40, ValueError, "outside the range of int32"),
    ("uint8", -1, ValueError, "outside the range of uint8"),
    # Integers beyond int64 and uint64 (NumPy holds them as objects): named, not
    # "must hold numeric data".
    ("int64", -2**63 - 1, ValueError, "the value -9223372036854775809 is outside the range"),
    ("uint64", 2**64, ValueError, "the value 18446744073709551616 is outside the range"),
    ("int32", 2**200, ValueError, "outside the range of int32"),
    ("float32", 2**200, ValueError, "would be stored as inf"),
    ("float64", 2**1024, ValueError, "the value 1797693134862315907729.* would be stored as inf"),
    ("bool", 2**64, TypeError, "converted unsafely"),
]
# Values the rule stores (rounded to the nearest the column holds).
STORED = [
    ("float32", 0.1, np.float32(0.1)),
    ("float32", 1e-50, np.float32(0.0)),        # underflow rounds to 0
    ("float32", float("inf"), np.float32("inf")),
    ("float32", float("nan"), np.float32("nan")),
    ("float16", 65504, np.float16(65504)),
    ("bfloat16", 3.0, ml_dtypes.bfloat16(3.0)),
    ("float32", 2**40, np.float32(2**40)),
    ("complex64", 1 + 2j, np.complex64(1 + 2j)),
    ("int8", True, np.int8(1)),
    ("float32", 2**64, np.float32(2**64)),      # rounded, as any integer into a float
    ("float32", 2**100, np.float32(2**100)),
    ("float64", 2**1023, np.float64(2**1023)),
    ("float64", -2**70, np.float64(-2**70)),
]
PATHS = ["insert", "insert_many", "writer", "insert_step", "insert_batch_numpy"]


def table(dtype: str) -> gx.Table:
    return gx.Table({"x": gx.Column((), dtype, pad=1 if dtype == "float8_e8m0fnu" else 0)},
                    capacity=4, max_length=2)


def put(t: gx.Table, path: str, value) -> int:
    """Puts one step holding `value` in by `path`; returns its key."""
    if path == "insert":
        return t.insert({"x": np.asarray([value])})
    if path == "insert_many":
        return t.insert_many([{"x": np.asarray([value])}])[0]
    if path == "writer":
        w = t.writer()
        w.append({"x": value})
        return w.end_episode()
    if path == "insert_step":
        return t.insert_step({"x": value})
    with jax.enable_x64(t.columns["x"].dtype.itemsize == 8):  # 64-bit columns need x64 here
        return int(t.insert_batch({"x": np.asarray([[value]])}, np.asarray([1]))[0])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype, value, error, message", REFUSED,
                         ids=[f"{c[0]}-{c[1]}" for c in REFUSED])
def test_a_value_the_rule_refuses_is_refused_on_every_path(path, dtype, value, error, message):
    t = table(dtype)
    with np.errstate(all="raise"):  # and no NumPy warning on the way
        with pytest.raises(error, match=message):
            put(t, path, value)
    assert len(t) == 0 and t.stats()["inserts"] == 0


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype, value, expected", STORED, ids=[f"{c[0]}-{c[1]}" for c in STORED])
def test_a_value_the_rule_allows_is_stored_rounded_on_every_path(path, dtype, value, expected):
    t = table(dtype)
    with np.errstate(all="raise"):
        key = put(t, path, value)
    stored = t.get(key)["x"][0]
    assert stored.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(stored, np.asarray(expected, dtype=dtype))


def test_a_refused_value_in_a_trajectory_inserts_none_of_it():
    t = table("float32")
    with pytest.raises(ValueError, match="entry|would be stored as inf"):
        t.insert_many([{"x": np.asarray([1.0])}, {"x": np.asarray([1e39])}])
    assert len(t) == 0


# JAX arrays in insert_batch: refused when traced unless every value of the dtype fits.
TRACED_REFUSED = [
    ("int32", jnp.float32, "float32 data would be converted unsafely"),
    ("bfloat16", jnp.float32, "float32 values may not fit"),
    ("float16", jnp.float32, "float32 values may not fit"),
    ("float16", jnp.int32, "int32 values may not fit"),
    ("int8", jnp.int32, "int32 values may not fit"),
    ("uint32", jnp.int8, "int8 values may not fit"),
    ("float32", jnp.complex64, "complex64 data would be converted unsafely"),
]
TRACED_ALLOWED = [("int32", jnp.int8), ("int32", jnp.uint16), ("float32", jnp.float16),
                  ("float32", jnp.bfloat16), ("float32", jnp.int32), ("float16", jnp.int8),
                  ("complex64", jnp.float32), ("float32", jnp.bool_)]


@pytest.mark.parametrize("dtype, given, message", TRACED_REFUSED,
                         ids=[f"{c[1].__name__}-into-{c[0]}" for c in TRACED_REFUSED])
def test_insert_batch_in_jit_refuses_at_trace_time_what_might_not_fit(dtype, given, message):
    t = table(dtype)
    insert = jax.jit(lambda s, v: t.insert_batch(s, {"x": v}, jnp.asarray([2])))
    with pytest.raises(TypeError, match=message):
        insert(t.state(), jnp.asarray([[1, 2]], given))
    with pytest.raises(TypeError, match=message):  # eager JAX arrays follow the same rule
        t.insert_batch({"x": jnp.asarray([[1, 2]], given)}, np.asarray([2]))
    assert len(t) == 0


def test_float32_nan_and_overflow_into_int32_in_jit_are_refused_not_stored_as_garbage():
    """[1.7, nan, 1e10, -2.5] once went in as [1, 0, 2147483647, -2]."""
    t = gx.Table({"x": gx.Column((), "int32")}, capacity=4, max_length=4)
    insert = jax.jit(lambda s, v: t.insert_batch(s, {"x": v}, jnp.asarray([4])))
    with pytest.raises(TypeError, match="float32 data would be converted unsafely"):
        insert(t.state(), jnp.asarray([[1.7, jnp.nan, 1e10, -2.5]], jnp.float32))
    assert len(t) == 0


@pytest.mark.parametrize("dtype, given", TRACED_ALLOWED,
                         ids=[f"{c[1].__name__}-into-{c[0]}" for c in TRACED_ALLOWED])
def test_insert_batch_in_jit_converts_what_always_fits(dtype, given):
    t = table(dtype)
    data = jnp.asarray([[1, 0]], given)
    _, keys = jax.jit(lambda s, v: t.insert_batch(s, {"x": v}, jnp.asarray([2])))(t.state(), data)
    np.testing.assert_array_equal(t.get(int(keys[0]))["x"], np.asarray(data[0]).astype(dtype))


def test_what_is_not_a_step_or_a_state_is_refused_saying_what_was_expected():
    t = table("float32")
    t.insert({"x": np.ones(1, np.float32)})
    for step in (None, 3, [1.0]):
        with pytest.raises(TypeError, match="a step must be a mapping of column name"):
            t.insert_step(step)  # not the binding's signature text
    key = jax.random.key(0)
    for not_a_state in (5, 1.5, jnp.zeros(2, jnp.uint32), np.float32(0)):
        with pytest.raises(TypeError, match="a table state is a uint32 scalar array"):
            t.sample(not_a_state, key, 2)  # once: "batch_size must be an integer, got key"
    assert len(t) == 1 and t.stats()["samples"] == 0
