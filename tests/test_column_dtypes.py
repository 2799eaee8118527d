"""Every dtype NumPy, JAX and ml_dtypes offer, one by one: a column of it either stores
and samples its values exactly (insert, get, eager and jitted sample, insert_batch in
jit) or is refused at `Column` with a clear error. Sub-byte types (int4, float4_e2m1fn,
...) are refused: XLA packs them several to a byte and a table stores whole bytes (they
corrupted memory once). A dtype of the other byte order is the machine's: its columns
store and sample values of either order exactly on every insert path. A complex pad
survives a checkpoint; a checkpoint naming a dtype or pad that save never writes is
refused."""

from __future__ import annotations

import json
import zipfile

import jax
import jax.numpy as jnp
import ml_dtypes  # JAX's own dependency: the source of its extra dtypes
import numpy as np
import pytest

import gearjax as gx

STANDARD = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
            "float16", "float32", "float64", "complex64", "complex128"]
EXTRA = sorted(name for name in dir(ml_dtypes)
               if isinstance(getattr(ml_dtypes, name), type)
               and issubclass(getattr(ml_dtypes, name), np.generic))
SUB_BYTE = {"int1", "uint1", "int2", "uint2", "int4", "uint4", "float4_e2m1fn",
            "float6_e2m3fn", "float6_e3m2fn"}
NOT_IN_JAX = {"bcomplex32", "complex32"}  # ml_dtypes complex types JAX has no arrays of


def dtype_of(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name)) if name in EXTRA else np.dtype(name)


def values_for(dtype: np.dtype) -> np.ndarray:
    """Six steps of a (2,) column, exactly representable in `dtype`."""
    if dtype == np.bool_:
        raw = [[True, False], [False, True], [True, True], [False, False], [True, False],
               [False, True]]
    elif jnp.issubdtype(dtype, np.integer):
        raw = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    elif jnp.issubdtype(dtype, np.complexfloating):
        raw = [[1 + 2j, 0.5], [2, -1j], [4, 8], [0.25, 1], [1, 2], [0.5j, 4]]
    else:  # powers of two: exact in every float type, float8_e8m0fnu included
        raw = [[0.5, 1], [2, 4], [8, 0.25], [1, 1], [2, 0.5], [4, 8]]
    return np.asarray(raw).astype(dtype)


def test_the_sweep_covers_every_extra_dtype_ml_dtypes_offers():
    assert set(EXTRA) >= SUB_BYTE | NOT_IN_JAX | {"bfloat16", "float8_e4m3fn", "float8_e5m2"}


@pytest.mark.parametrize("name", sorted(SUB_BYTE & set(EXTRA)))
def test_sub_byte_dtypes_are_refused_at_column(name):
    with pytest.raises(TypeError, match=rf"{name} is a sub-byte type \(\d-bit\).*Store the "
                                        r"values as (u?int8|float8_e4m3fn)"):
        gx.Column((3,), dtype_of(name))
    if hasattr(jnp, name):  # the same through JAX's name for it
        with pytest.raises(TypeError, match="sub-byte"):
            gx.Column((3,), getattr(jnp, name))


@pytest.mark.parametrize("name", sorted(NOT_IN_JAX & set(EXTRA)))
def test_dtypes_jax_cannot_hold_are_refused(name):
    with pytest.raises(TypeError, match="must be numeric or bool"):
        gx.Column((3,), dtype_of(name))


@pytest.mark.parametrize("name", STANDARD + sorted(set(EXTRA) - SUB_BYTE - NOT_IN_JAX))
def test_every_other_dtype_stores_and_samples_exactly(name):
    dtype = dtype_of(name)
    pad = 1 if name == "float8_e8m0fnu" else 0  # e8m0 has no zero
    table = gx.Table({"x": gx.Column((2,), dtype, pad=pad)}, capacity=4, max_length=6)
    values = values_for(dtype)
    key = table.insert({"x": values})
    np.testing.assert_array_equal(table.get(key)["x"], values)
    rows = {r.tobytes() for r in values}

    def check(sampled):
        sampled = np.asarray(sampled)
        assert sampled.dtype == dtype
        assert all(r.tobytes() in rows for r in sampled[:, 0])

    check(table.sample(jax.random.key(0), 32, 1)["x"])
    state = table.state()
    state, batch = jax.jit(lambda s, k: table.sample(s, k, 32, 1))(state, jax.random.key(1))
    check(batch["x"])
    if dtype.itemsize * 8 == 64 * (2 if dtype.kind == "c" else 1):
        table.close()  # insert_batch of 64-bit data in jit needs jax_enable_x64 (tables.md)
        return
    # insert_batch in jit: the column's own dtype goes in unchanged.
    jax_values = jnp.asarray(values)
    state, keys = jax.jit(lambda s, v: table.insert_batch(s, {"x": v[None]}, jnp.asarray([6])))(
        state, jax_values)
    np.testing.assert_array_equal(table.get(int(keys[0]))["x"].astype(jax_values.dtype),
                                  np.asarray(jax_values))
    table.close()


def rewrite_column(path, **entries) -> None:
    """Rewrites the first column's entries in a checkpoint's meta.json (what a
    hostile or corrupted file might say)."""
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    meta = json.loads(members["meta.json"])
    meta["columns"][0].update(entries)
    members["meta.json"] = json.dumps(meta).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)


def saved_table(path, column: gx.Column, values: np.ndarray) -> None:
    table = gx.Table({"x": column}, capacity=2, max_length=4)
    table.insert({"x": values})
    table.save(path)
    table.close()


@pytest.mark.parametrize("name", sorted(SUB_BYTE & set(EXTRA)))
def test_a_checkpoint_naming_a_sub_byte_dtype_is_refused(tmp_path, name):
    path = tmp_path / "t.gx"
    saved_table(path, gx.Column((2,), "uint8"), np.zeros((2, 2), np.uint8))
    rewrite_column(path, dtype=name)
    with pytest.raises(gx.CheckpointError, match="sub-byte"):
        gx.Table.load(path)


@pytest.mark.parametrize("name", [n for n in STANDARD if np.dtype(n).itemsize > 1])
def test_a_column_of_the_other_byte_order_stores_and_samples_exactly(name):
    """A ">i4" column was accepted, then every sample failed ("No
    dtype_to_ir_type handler for dtype: >i4"): it is now an int32 column, and
    values of either order go in exactly through every insert path."""
    native = np.dtype(name)
    other = native.newbyteorder("S")
    table = gx.Table({"x": gx.Column((2,), other, pad=1)}, capacity=16, max_length=6)
    assert table.columns["x"].dtype == native
    values = values_for(native)
    for given in (values.astype(other), values):
        inserted = {table.insert({"x": given}): values,
                    int(table.insert_many([{"x": given}])[0]): values}
        inserted |= {table.insert_step({"x": row}): values[i:i + 1]
                     for i, row in enumerate(given[:2])}
        writer = table.writer()
        for row in given:
            writer.append({"x": row})
        inserted[writer.end_episode()] = values
        for key, expected in inserted.items():
            stored = table.get(key)["x"]
            assert stored.dtype == native
            np.testing.assert_array_equal(stored, expected)
    rows = {r.tobytes() for r in values} | {np.ones(2, native).tobytes()}
    for sampled in (table.sample(jax.random.key(0), 16, 3)["x"],
                    jax.jit(lambda s, k: table.sample(s, k, 16, 3)[1]["x"])(
                        table.state(), jax.random.key(1))):
        sampled = np.asarray(sampled)
        assert sampled.dtype == native
        assert {r.tobytes() for r in sampled.reshape(-1, 2)} <= rows
    table.close()


@pytest.mark.parametrize("pad", [1 + 2j, complex(float("nan"), -1), complex(0, float("inf"))],
                         ids=repr)
def test_a_complex_pad_survives_a_checkpoint(tmp_path, pad):
    """Table.save failed on a complex pad ("Object of type complex is not
    JSON serializable"); it is written as {"complex": [real, imag]}."""
    path = tmp_path / "t.gx"
    column = gx.Column((2,), "complex64", pad=pad)
    saved_table(path, column, np.ones((2, 2), np.complex64))
    table = gx.Table.load(path)
    assert table.columns["x"].pad_step() == column.pad_step()
    batch = table.sample(jax.random.key(0), 4, 4, pad="right")  # two steps of padding
    np.testing.assert_array_equal(np.asarray(batch["x"])[:, 2:],
                                  np.full((4, 2, 2), pad, np.complex64))
    table.close()


@pytest.mark.parametrize("entries, match", [
    ({"dtype": ">c8"}, "dtype is written by its name"),
    ({"dtype": "complex"}, "dtype is written by its name"),
    ({"dtype": ["complex64"]}, "dtype is a dtype's name"),
    ({"pad": {"complex": [1]}}, "complex pad is"),
    ({"pad": {"complex": ["1", 0]}}, "pad is a number"),
    ({"pad": {"complex": [1, 2], "more": 3}}, "complex pad is"),
    ({"pad": "1+2j"}, "pad is a number"),
    ({"pad": None}, "pad is a number"),
    ({"shape": 2}, "shape is a list"),
])
def test_a_checkpoint_naming_what_save_never_writes_is_refused(tmp_path, entries, match):
    path = tmp_path / "t.gx"
    saved_table(path, gx.Column((2,), "complex64", pad=1j), np.ones((2, 2), np.complex64))
    rewrite_column(path, **entries)
    with pytest.raises(gx.CheckpointError, match=match):
        gx.Table.load(path)
