"""gearjax.Column: shape and dtype validation (byte order included), pad values (complex
included), step bytes and pad steps, JSON round trip, and what from_json refuses."""

from __future__ import annotations

import json
import math

import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx

# ------------------------------------------------------------------ shapes


@pytest.mark.parametrize("shape, expected", [
    (3, (3,)),
    (np.int64(4), (4,)),
    ((), ()),
    ((17,), (17,)),
    ((3, 2), (3, 2)),
    ([2, 5, 1], (2, 5, 1)),
    ((np.int32(2), 3), (2, 3)),
])
def test_shape_forms_normalise_to_a_tuple_of_python_ints(shape, expected):
    column = gx.Column(shape, "float32")
    assert column.shape == expected
    assert type(column.shape) is tuple
    assert all(type(d) is int for d in column.shape)


@pytest.mark.parametrize("shape", [0, -1, (0,), (3, 0), (2, -4), [-1]])
def test_zero_or_negative_dimensions_are_refused(shape):
    with pytest.raises(ValueError, match=">= 1"):
        gx.Column(shape, "float32")


@pytest.mark.parametrize("shape", [
    True, False, (2, True), (False,), 2.0, (2.0,), (3, 1.5), "ab", ("3",), None, (None,), ((2,),),
])
def test_non_integer_dimensions_are_refused(shape):
    with pytest.raises(TypeError, match="shape must be a tuple of ints"):
        gx.Column(shape, "float32")


# ------------------------------------------------------------------ dtypes


@pytest.mark.parametrize("dtype, expected", [
    ("float32", np.float32),
    (np.float32, np.float32),
    (np.dtype("float64"), np.float64),
    ("uint8", np.uint8),
    (np.int16, np.int16),
    ("int64", np.int64),
    ("bool", np.bool_),
    (bool, np.bool_),
    (jnp.bfloat16, jnp.bfloat16),
    (jnp.float16, np.float16),
])
def test_numeric_and_bool_dtypes_are_accepted_as_numpy_dtypes(dtype, expected):
    column = gx.Column((2,), dtype)
    assert isinstance(column.dtype, np.dtype)
    assert column.dtype == np.dtype(expected)


@pytest.mark.parametrize("dtype", [object, str, "U3", bytes, "S4", "datetime64[s]",
                                   "V8", [("a", "f4"), ("b", "i4")]])
def test_non_numeric_dtypes_are_refused(dtype):
    with pytest.raises(TypeError, match="numeric or bool"):
        gx.Column((2,), dtype)


@pytest.mark.parametrize("dtype", ["not_a_dtype", "float33", 3.5])
def test_unknown_dtypes_are_refused(dtype):
    with pytest.raises(TypeError, match="not a dtype"):
        gx.Column((2,), dtype)


@pytest.mark.parametrize("dtype", [">i4", ">u2", ">f4", ">f8", ">c8", ">f2", "<i8", "=f4",
                                   np.dtype(jnp.bfloat16).newbyteorder(">")],
                         ids=str)
def test_a_dtype_of_either_byte_order_becomes_the_machines(dtype):
    """Samples are JAX arrays, which hold the machine's byte order only: a
    column of the other order was accepted and then failed at its first
    sample ("No dtype_to_ir_type handler for dtype: >i4")."""
    column = gx.Column((2,), dtype, pad=1)
    native = np.dtype(dtype).newbyteorder("=")
    assert column.dtype == native and column.dtype.isnative
    assert column == gx.Column((2,), native, pad=1)
    assert column.to_json()["dtype"] == native.name
    assert column.pad_step() == np.ones(2, native).tobytes()


@pytest.mark.skipif(np.dtype(np.longdouble).itemsize == 8, reason="longdouble is float64 here")
@pytest.mark.parametrize("dtype, wider", [(np.longdouble, "float64"),
                                          (np.clongdouble, "complex128")])
def test_dtypes_jax_has_no_arrays_of_are_refused(dtype, wider):
    with pytest.raises(TypeError, match=f"not one JAX has arrays of.*store the values as {wider}"):
        gx.Column((2,), dtype)


# -------------------------------------------------------------------- pads


@pytest.mark.parametrize("dtype, pad", [
    ("float32", 0),
    ("float32", -10.0),
    ("float32", 0.5),
    ("float32", float("inf")),
    ("float32", -float("inf")),
    ("float16", 65504.0),
    ("uint8", 0),
    ("uint8", 255),
    ("int8", -128),
    ("int32", -7),
    ("int32", 3.0),
    ("uint64", 2**64 - 1),
    ("bool", True),
    ("bool", False),
    ("bool", 0),
    (jnp.bfloat16, 0.5),
    (jnp.bfloat16, -2.0),
    ("float32", np.float32(2.5)),
    ("uint8", np.uint8(9)),
])
def test_exactly_representable_pads_are_accepted_and_kept(dtype, pad):
    column = gx.Column((2,), dtype, pad=pad)
    assert column.pad == pad
    assert np.array(column.pad, dtype=column.dtype).item() == pad


@pytest.mark.parametrize("dtype, pad", [
    ("uint8", -10),
    ("uint8", 256),
    ("int8", 128),
    ("int64", 2**63),
    ("int32", 0.5),
    ("int32", float("nan")),
    ("int32", float("inf")),
    ("uint8", 1.25),
    ("float32", 0.1),        # rounds in float32
    ("float32", 1e40),       # overflows to inf
    ("float16", 65505.0),
    (jnp.bfloat16, 0.1),
    ("bool", 2),
    ("bool", 0.5),
    ("float32", 1j),
])
def test_pads_that_would_change_when_stored_are_refused(dtype, pad):
    with pytest.raises(ValueError, match="pad value"):
        gx.Column((2,), dtype, pad=pad)


@pytest.mark.parametrize("dtype, pad", [
    ("float32", 1 + 0j), ("float64", 2j), ("int32", 0j), ("bool", 1 + 0j),
    ("float32", np.complex64(1)),
])
def test_a_complex_pad_needs_a_complex_column(dtype, pad):
    """As inserts never convert complex into real, a complex pad (even one
    with no imaginary part) is refused by a real column."""
    with pytest.raises(ValueError, match="complex pad needs a complex column"):
        gx.Column((2,), dtype, pad=pad)


@pytest.mark.parametrize("pad", [1 + 2j, -0.5j, complex(float("nan"), 1),
                                 complex(float("inf"), -float("inf")),
                                 complex(float("nan"), float("nan")), np.complex64(2 - 4j)],
                         ids=repr)
def test_complex_pads_are_kept_exactly_nan_parts_included(pad):
    column = gx.Column((2,), "complex64", pad=pad)
    assert type(column.pad) is complex
    np.testing.assert_array_equal(np.frombuffer(column.pad_step(), np.complex64),
                                  np.full(2, pad, np.complex64))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", jnp.bfloat16])
def test_nan_pad_is_accepted_for_floating_columns(dtype):
    column = gx.Column((3,), dtype, pad=float("nan"))
    assert math.isnan(column.pad)
    assert np.isnan(np.frombuffer(column.pad_step(), dtype=column.dtype).astype(np.float32)).all()


@pytest.mark.parametrize("pad", [[1.0], (0,), np.array([1.0]), np.zeros((2, 2)), "0", "nan", b"\x00"])
def test_non_scalar_pads_are_refused(pad):
    with pytest.raises(TypeError, match="pad must be a scalar"):
        gx.Column((2,), "float32", pad=pad)


def test_default_pad_is_zero():
    assert gx.Column((2,), "int32").pad == 0
    assert gx.Column((2,), "int32").pad_step() == bytes(8)


# ------------------------------------------------------- step bytes and pads


@pytest.mark.parametrize("shape, dtype, step_bytes", [
    ((), "float32", 4),
    ((), "bool", 1),
    ((), "uint8", 1),
    ((17,), "float32", 68),
    ((3, 2), "uint8", 6),
    ((4, 5, 6), "float64", 960),
    ((5,), jnp.bfloat16, 10),
    ((7,), "bool", 7),
    ((2, 3), "int16", 12),
])
def test_step_bytes_is_elements_times_itemsize(shape, dtype, step_bytes):
    assert gx.Column(shape, dtype).step_bytes == step_bytes


@pytest.mark.parametrize("shape, dtype, pad", [
    ((), "float32", -10.0),
    ((3, 2), "uint8", 7),
    ((4,), "int32", -1),
    ((2,), "bool", True),
    ((5,), jnp.bfloat16, -2.0),
    ((2, 2), "float64", float("inf")),
])
def test_pad_step_is_one_step_filled_with_the_pad(shape, dtype, pad):
    column = gx.Column(shape, dtype, pad=pad)
    raw = column.pad_step()
    assert isinstance(raw, bytes)
    assert len(raw) == column.step_bytes
    step = np.frombuffer(raw, dtype=column.dtype).reshape(shape)
    np.testing.assert_array_equal(step, np.full(shape, pad, dtype=column.dtype))


def test_pad_step_distinguishes_negative_zero():
    assert gx.Column((), "float32", pad=-0.0).pad_step() == np.float32(-0.0).tobytes()
    assert gx.Column((), "float32", pad=-0.0).pad_step() != gx.Column((), "float32").pad_step()


# --------------------------------------------------------------------- misc


def test_columns_are_immutable_and_compare_by_value():
    a = gx.Column((3,), "uint8", pad=7)
    assert a == gx.Column(3, np.uint8, pad=7)
    assert a != gx.Column((3,), "uint8", pad=8)
    assert a != gx.Column((3,), "int8", pad=7)
    assert a != gx.Column((1, 3), "uint8", pad=7)
    assert hash(a) == hash(gx.Column([3], "uint8", 7))
    with pytest.raises(AttributeError):
        a.pad = 3


# ---------------------------------------------------------------- JSON


@pytest.mark.parametrize("column", [
    gx.Column((), "float32"),
    gx.Column((17,), "float32", pad=-10.0),
    gx.Column((3, 2), "uint8", pad=7),
    gx.Column((2,), "bool", pad=True),
    gx.Column((4,), "int64", pad=-(2**62)),
    gx.Column((4,), "uint64", pad=2**64 - 1),
    gx.Column((5,), jnp.bfloat16, pad=-2.0),
    gx.Column((2,), "float32", pad=np.float32(2.5)),
    gx.Column((2,), "float32", pad=float("inf")),
    gx.Column((2,), "float64", pad=-float("inf")),
], ids=lambda c: f"{c.dtype}{list(c.shape)}pad={c.pad}")
def test_json_round_trip_through_text_gives_an_equal_column(column):
    spec = column.to_json()
    assert spec["shape"] == list(column.shape)
    assert spec["dtype"] == column.dtype.name
    restored = gx.Column.from_json(json.loads(json.dumps(spec)))
    assert restored == column
    assert restored.pad_step() == column.pad_step()
    assert restored.step_bytes == column.step_bytes


@pytest.mark.parametrize("dtype", ["float32", jnp.bfloat16])
def test_json_round_trip_keeps_a_nan_pad(dtype):
    column = gx.Column((3,), dtype, pad=float("nan"))
    restored = gx.Column.from_json(json.loads(json.dumps(column.to_json())))
    assert restored.shape == column.shape and restored.dtype == column.dtype
    assert math.isnan(restored.pad)
    assert restored.pad_step() == column.pad_step()


def test_to_json_is_plain_json_data():
    spec = gx.Column((2, 3), "uint8", pad=np.uint8(9)).to_json()
    assert spec == {"shape": [2, 3], "dtype": "uint8", "pad": 9}
    assert type(spec["pad"]) is int
    assert json.loads(json.dumps(spec, allow_nan=False)) == spec


def test_from_json_validates_like_the_constructor():
    with pytest.raises(ValueError, match="pad value"):
        gx.Column.from_json({"shape": [2], "dtype": "uint8", "pad": -10})
    with pytest.raises(ValueError, match=">= 1"):
        gx.Column.from_json({"shape": [0], "dtype": "float32", "pad": 0})
    with pytest.raises(TypeError, match="numeric or bool"):
        gx.Column.from_json({"shape": [2], "dtype": "str", "pad": 0})


@pytest.mark.parametrize("pad", [1 + 2j, complex(-0.0, 0.0), complex(float("nan"), -1.5),
                                 complex(float("-inf"), float("nan")), 3],
                         ids=repr)
def test_json_round_trip_keeps_a_complex_pad(pad):
    """JSON has no complex numbers: a complex pad is written as
    {"complex": [real, imag]} (Table.save failed with "Object of type complex
    is not JSON serializable")."""
    column = gx.Column((3,), "complex128", pad=pad)
    text = json.dumps(column.to_json(), allow_nan=False)
    restored = gx.Column.from_json(json.loads(text))
    assert restored.pad_step() == column.pad_step()  # bit for bit: NaN parts and -0.0 too
    assert type(restored.pad) is type(column.pad)
    if isinstance(pad, complex):
        assert list(json.loads(text)["pad"]) == ["complex"]


@pytest.mark.parametrize("spec", [
    ["shape", "dtype", "pad"],                                    # not an object
    {"shape": 2, "dtype": "float32", "pad": 0},                   # shape not a list
    {"shape": "22", "dtype": "float32", "pad": 0},
    {"shape": {"2": 1}, "dtype": "float32", "pad": 0},
    {"shape": [2], "dtype": ["float32"], "pad": 0},               # dtype not a name
    {"shape": [2], "dtype": {"names": ["a"], "formats": ["f4"]}, "pad": 0},
    {"shape": [2], "dtype": 7, "pad": 0},
    {"shape": [2], "dtype": ">i4", "pad": 0},                     # named otherwise than saved
    {"shape": [2], "dtype": "<f4", "pad": 0},
    {"shape": [2], "dtype": "int", "pad": 0},
    {"shape": [2], "dtype": "f8", "pad": 0},
    {"shape": [2], "dtype": "float32", "pad": None},              # pads never written
    {"shape": [2], "dtype": "float32", "pad": [1.0]},
    {"shape": [2], "dtype": "float32", "pad": "1.5"},
    {"shape": [2], "dtype": "float32", "pad": "NaN"},
    {"shape": [2], "dtype": "float32", "pad": " inf"},
    {"shape": [2], "dtype": "complex64", "pad": {"complex": [1]}},
    {"shape": [2], "dtype": "complex64", "pad": {"complex": [1, 2, 3]}},
    {"shape": [2], "dtype": "complex64", "pad": {"complex": "1+2j"}},
    {"shape": [2], "dtype": "complex64", "pad": {"complex": [1, 2], "x": 0}},
    {"shape": [2], "dtype": "complex64", "pad": {"real": 1, "imag": 2}},
    {"shape": [2], "dtype": "complex64", "pad": {"complex": [[1], 2]}},
    {"shape": [2], "dtype": "complex64", "pad": {"complex": ["1", 2]}},
    {"shape": [2], "dtype": "complex64", "pad": {"complex": [None, 2]}},
    {"shape": [2], "dtype": "float32", "pad": {"complex": [1, 0]}},  # complex pad, real column
    {"shape": [2], "dtype": "complex64", "pad": {"complex": [1e300, 0]}},  # not exact
    {"shape": [2], "dtype": "complex64"},                         # a key missing
])
def test_from_json_refuses_what_to_json_never_writes(spec):
    """Checkpoints are files: from_json takes what to_json writes and refuses
    anything else with the errors the checkpoint loader turns into
    CheckpointError (KeyError, TypeError, ValueError)."""
    with pytest.raises((KeyError, TypeError, ValueError)):
        gx.Column.from_json(spec)


@pytest.mark.parametrize("pad", [np.array(2.5), np.array(2.5, np.float32), jnp.float32(2.5)],
                         ids=["numpy-0d-float64", "numpy-0d-float32", "jax-scalar"])
def test_zero_dimensional_array_pads_behave_like_the_number(pad):
    column = gx.Column((2,), "float32", pad=pad)
    assert column.pad_step() == gx.Column((2,), "float32", pad=2.5).pad_step()
    spec = json.loads(json.dumps(column.to_json()))
    assert spec["pad"] == 2.5
    assert gx.Column.from_json(spec).pad_step() == column.pad_step()
