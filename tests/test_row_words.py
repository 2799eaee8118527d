"""gearjax.sharded.row_words: a served row's fields packed into one array of
words and back, bit for bit, for every dtype a column may have (those that
cannot be packed move alone), and the exchange moving a round in one
all-to-all whatever the fields."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import gearjax as gx
from gearjax.sharded import row_words

ROWS = 7


def random_field(rng: np.random.Generator, dtype, shape) -> np.ndarray:
    """Random bits of ``dtype`` (every pattern, NaN payloads included), bools 0/1."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, (ROWS, *shape)).astype(bool)
    raw = rng.integers(0, 256, (ROWS, *shape, dtype.itemsize), dtype=np.uint8)
    return raw.view(dtype).reshape(ROWS, *shape)


def moved_by_layout(fields, move):
    """Packs, moves every part (jitted), unpacks: what the exchange does."""
    layout = row_words.Layout.of(fields)

    @jax.jit
    def run(fields):
        return layout.unpack(tuple(move(p) for p in layout.pack(fields)))

    return layout, run(tuple(fields))


def assert_same_bits(got, want):
    got, want = np.ascontiguousarray(got), np.ascontiguousarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


# The sample's own fields (gearjax._ffi.sample_result_types), then columns.
SERVED = [(np.int64, ()), (np.int32, ()), (np.float32, ()), (np.int64, ()), (np.int32, ())]
CASES = {
    "a small float32 window": [(np.float32, (4, 3))],
    "a large window moves alone": [(np.float32, (4, 17)), (np.int32, (4,))],
    "odd uint8 bytes: byte words": [(np.uint8, (3, 5))],
    "int16 pairs: 16-bit words": [(np.int16, (3,))],
    "bool and bfloat16": [(np.bool_, (4, 3)), (ml_dtypes.bfloat16, (4, 2))],
    "float16, int8": [(np.float16, (2,)), (np.int8, (4, 2))],
    "complex moves alone": [(np.complex64, (3,)), (np.float32, (2,))],
    "an empty column": [(np.float32, (4, 0)), (np.int32, (4,))],
}


@pytest.mark.parametrize("case", list(CASES))
def test_fields_come_back_bit_for_bit_after_moving_rows(case):
    rng = np.random.default_rng(len(case))
    fields = [random_field(rng, d, s) for d, s in SERVED + CASES[case]]
    order = jnp.asarray(rng.permutation(ROWS)[:5])  # rows moved: permuted, two dropped
    inputs = [gx._ffi.int64_array(f) if f.dtype == np.int64 else f for f in fields]
    layout, moved = moved_by_layout(inputs, lambda x: x[order])
    for got, want in zip(moved, fields):
        assert_same_bits(got, want[np.asarray(order)])
    # Every small packable field travels in the words; the rest alone.
    alone = [i for i, f in enumerate(fields) if not row_words.packable(f.dtype)
             or not 0 < f[0].nbytes <= row_words.PACK_ROW_BYTES]
    assert sorted(set(range(len(fields))) - set(layout.together)) == alone
    assert len(layout.pack(inputs)) == 1 + len(alone)


def test_the_word_is_the_widest_that_divides_every_packed_field():
    def word(*fields):
        return row_words.Layout.of([jax.ShapeDtypeStruct((ROWS, *s), d) for d, s in fields]).word

    assert word((np.int64, ()), (np.float32, (4, 3))) == np.uint32
    assert word((np.int32, ()), (np.int16, (3,))) == np.uint16
    assert word((np.int32, ()), (np.uint8, (3, 5))) == np.uint8
    assert word((np.int32, ()), (np.uint8, (4,))) == np.uint32


def test_without_x64_64_bit_fields_but_int64_move_alone():
    # (Such arrays come from the table's custom calls; JAX makes none itself.)
    fields = [jax.ShapeDtypeStruct((ROWS, *s), d) for d, s in
              [(np.int64, ()), (np.float64, (2,)), (np.uint64, ()), (np.complex64, ()),
               (np.float32, (3,))]]
    layout = row_words.Layout.of(fields)
    assert layout.together == (0, 4) and layout.word == np.uint32


def test_a_field_of_more_than_pack_row_bytes_a_row_moves_alone():
    # Packing copies every packed byte in and out: a large window costs
    # more to copy than its own collective (row_words' docstring).
    limit = row_words.PACK_ROW_BYTES
    fields = [jax.ShapeDtypeStruct((ROWS, *s), np.uint8) for s in
              [(limit,), (limit + 1,), (2, limit), (1,)]]
    assert row_words.Layout.of(fields).together == (0, 3)


def test_a_single_packable_field_is_not_packed():
    fields = [jax.ShapeDtypeStruct((ROWS, 3), np.float32),
              jax.ShapeDtypeStruct((ROWS,), np.complex64)]
    assert row_words.Layout.of(fields).together == ()


def test_with_x64_every_64_bit_real_field_is_packed():
    rng = np.random.default_rng(5)
    with jax.enable_x64(True):
        fields = [random_field(rng, d, s) for d, s in
                  [(np.float64, (2,)), (np.uint64, ()), (np.int64, ()), (np.complex128, ())]]
        layout, moved = moved_by_layout(fields, lambda x: x[::-1])
        assert layout.together == (0, 1, 2)
        for got, want in zip(moved, fields):
            assert_same_bits(got, want[::-1])
    assert not row_words.packable(np.float64)  # x64 off again


def test_a_sharded_sample_moves_every_dtype_exactly():
    """The exchange end to end (one process): each window of every column,
    whatever its dtype, is the trajectory's own."""
    columns = {"flag": gx.Column((), "bool"), "pixels": gx.Column((3,), "uint8"),
               "half": gx.Column((2,), "bfloat16"), "wide": gx.Column((), "float64"),
               "z": gx.Column((), "complex64"), "id": gx.Column((), "int64")}
    table = gx.ShardedTable(columns, capacity=8, max_length=6)
    rng = np.random.default_rng(0)
    inserted = {}
    for i in range(5):
        length = 2 + i
        data = {name: np.stack([random_field(rng, c.dtype, c.shape)[0] for _ in range(length)])
                for name, c in columns.items()}
        inserted[int(table.insert(data))] = data
    batch = table.sample(jax.random.key(1), 32, 3)
    keys, timestep = np.asarray(batch.keys), np.asarray(batch.timestep)
    mask = np.asarray(batch.mask)
    for name in columns:
        got = np.asarray(batch[name])
        assert got.dtype == columns[name].dtype
        for row, key in enumerate(keys.tolist()):
            want = inserted[key][name][timestep[row][mask[row]]]
            assert_same_bits(got[row][mask[row]], want)
    table.close()
