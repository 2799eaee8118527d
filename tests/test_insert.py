"""Table.insert and insert_many: keys, sizes and stats; refused input that leaves the table
unchanged; accepted conversions; copying; Table constructor validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx
from conftest import COLUMNS
from reference import expected_window, random_trajectory

# COLUMNS (float32, uint8 and bool columns) plus an int32 one.
INT_COLUMNS = {**COLUMNS, "step": gx.Column((), "int32", pad=-1)}
MAX_LENGTH = 12
BYTES_PER_STEP = sum(c.step_bytes for c in INT_COLUMNS.values())
COUNTERS = ("size", "num_steps", "inserts", "evictions", "next_sequence", "samples",
            "priority_updates", "bytes_used", "pinned_slots", "writers_in_flight")
PROBE_STRATEGIES = (gx.Uniform(), gx.Timestep(), gx.Prioritized(2.0))


def trajectory(length: int, seed: int = 0) -> dict[str, np.ndarray]:
    return random_trajectory(np.random.default_rng(seed), INT_COLUMNS, length)


def newest(table: gx.Table) -> dict[str, np.ndarray]:
    """The newest stored trajectory as the table returns it: one whole-trajectory row,
    cut to its real steps."""
    batch = table.sample(jax.random.key(0), 1, None, gx.Recent(1), pad="right")
    length = int(np.asarray(batch.mask[0]).sum())
    return {name: np.asarray(batch[name][0, :length]) for name in table.columns}


def assert_stored(table: gx.Table, expected: dict[str, np.ndarray]) -> None:
    got = newest(table)
    for name, column in table.columns.items():
        np.testing.assert_array_equal(got[name], np.asarray(expected[name]).astype(column.dtype),
                                      err_msg=name)
        assert got[name].dtype == column.dtype


# ------------------------------------------------------------------ keys


def sequences(table: gx.Table, keys) -> list[int]:
    """The insertion sequence numbers of keys: key = sequence << slot_bits | slot."""
    return [int(k) >> table.slot_bits for k in keys]


def slots(table: gx.Table, keys) -> list[int]:
    return [int(k) & ((1 << table.slot_bits) - 1) for k in keys]


def test_keys_name_their_slot_and_count_insertions():
    table = gx.Table(INT_COLUMNS, capacity=8, max_length=MAX_LENGTH)
    assert table.slot_bits == 3  # the fewest bits that hold slots 0..7
    keys = [table.insert(trajectory(n, n)) for n in (3, 1, 12)]
    assert keys == [0 << 3 | 0, 1 << 3 | 1, 2 << 3 | 2]
    many = table.insert_many([trajectory(2), trajectory(5)])
    assert many.dtype == np.int64
    np.testing.assert_array_equal(many, [3 << 3 | 3, 4 << 3 | 4])
    assert sequences(table, [table.insert(trajectory(4))]) == [5]
    assert table.stats()["next_sequence"] == 6
    assert gx.Table(INT_COLUMNS, capacity=1, max_length=2).slot_bits == 0


@pytest.mark.parametrize("remover", ["fifo", "lifo", "min_priority"])
def test_keys_are_never_reused_after_eviction(remover):
    table = gx.Table(INT_COLUMNS, capacity=3, max_length=MAX_LENGTH, remover=remover)
    rng = np.random.default_rng(1)
    keys = [table.insert(trajectory(int(rng.integers(1, 13)), i), priority=float(rng.uniform(0, 2)))
            for i in range(10)]
    keys += list(table.insert_many([trajectory(2, 50), trajectory(3, 51)]))
    assert len(set(keys)) == 12 and keys == sorted(keys)  # unique, increasing
    assert sequences(table, keys) == list(range(12))
    assert set(slots(table, keys)) <= {0, 1, 2}
    s = table.stats()
    assert (len(table), s["size"], s["inserts"], s["evictions"], s["next_sequence"]) == (3, 3, 12, 9, 12)
    live = set(np.asarray(table.sample(jax.random.key(0), 64, 1).keys).tolist())
    assert len(live) == 3 and live <= set(keys)


def test_fifo_keeps_the_newest_keys():
    table = gx.Table(INT_COLUMNS, capacity=3, max_length=MAX_LENGTH, remover="fifo")
    keys = [table.insert(trajectory(2, i)) for i in range(7)]
    assert set(np.asarray(table.sample(jax.random.key(0), 64, 1).keys).tolist()) == set(keys[4:])


def test_refused_inserts_do_not_use_up_keys():
    table = gx.Table(INT_COLUMNS, capacity=4, max_length=MAX_LENGTH)
    assert sequences(table, [table.insert(trajectory(3))]) == [0]
    with pytest.raises(ValueError):
        table.insert(trajectory(MAX_LENGTH + 1))
    with pytest.raises(ValueError):
        table.insert_many([trajectory(3), trajectory(0)])
    assert sequences(table, [table.insert(trajectory(3))]) == [1]


# ------------------------------------------------------- sizes and stats


def test_empty_table_stats():
    table = gx.Table(INT_COLUMNS, capacity=5, max_length=MAX_LENGTH, placement="host")
    s = table.stats()
    assert len(table) == 0 and table.num_steps == 0
    for field in ("size", "num_steps", "inserts", "samples", "evictions", "priority_updates",
                  "next_sequence", "bytes_used", "pinned_slots", "writers_in_flight"):
        assert s[field] == 0, field
        assert type(s[field]) is int, field  # counts are ints, samples included
    assert (s["capacity"], s["max_length"]) == (5, MAX_LENGTH)
    assert s["bytes_per_step"] == BYTES_PER_STEP
    assert s["bytes_reserved"] >= 5 * MAX_LENGTH * BYTES_PER_STEP
    assert s["columns"] == {n: c.to_json() for n, c in INT_COLUMNS.items()}
    assert (s["remover"], s["placement"]) == ("fifo", "host")


def test_len_num_steps_and_bytes_follow_inserts_and_evictions():
    table = gx.Table(INT_COLUMNS, capacity=3, max_length=MAX_LENGTH)
    lengths = [3, 5, 1, 4, 2]
    expected = [  # (len, num_steps, evictions) after each insert; FIFO evicts the oldest
        (1, 3, 0), (2, 8, 0), (3, 9, 0), (3, 10, 1), (3, 7, 2)]
    for i, (length, (size, steps, evictions)) in enumerate(zip(lengths, expected)):
        table.insert(trajectory(length, i))
        s = table.stats()
        assert (len(table), table.num_steps) == (size, steps)
        assert (s["size"], s["num_steps"], s["evictions"], s["inserts"]) == (size, steps, evictions,
                                                                            i + 1)
        assert s["bytes_used"] == steps * BYTES_PER_STEP
    table.insert_many([trajectory(12, 9), trajectory(6, 10)])
    s = table.stats()
    assert (len(table), table.num_steps, s["evictions"], s["inserts"]) == (3, 20, 4, 7)
    assert s["pinned_slots"] == 0 and s["writers_in_flight"] == 0


def test_insert_many_of_nothing_inserts_nothing():
    table = gx.Table(INT_COLUMNS, capacity=3, max_length=MAX_LENGTH)
    keys = table.insert_many([])
    assert keys.dtype == np.int64 and keys.shape == (0,)
    assert table.stats()["inserts"] == 0 and table.stats()["next_sequence"] == 0


def test_close_warns_when_a_reader_stays_inside_and_the_memory_waits_for_it(monkeypatch):
    """tables.md: close waits up to CLOSE_WAIT_SECONDS for the readers inside,
    then warns and keeps the memory; a later close() frees it once they have
    left (or dropping the table does). What answers after."""
    import gearjax.table as table_module

    table = gx.Table(INT_COLUMNS, capacity=3, max_length=MAX_LENGTH)
    table.insert(trajectory(2))
    _, slots, *_ = table._native.pin_items()  # a reader inside (as a save is)
    monkeypatch.setattr(table_module, "CLOSE_WAIT_SECONDS", 0.1)
    with pytest.warns(RuntimeWarning, match="still inside the table after 0.1 s"):
        table.close()
    assert table.closed and table.stats()["closed"] and table.stats()["bytes_reserved"] > 0
    with pytest.raises(RuntimeError, match="closed"):
        table.contents()
    table._native.unpin_slots(slots)  # the last reader leaves
    table.close()  # nothing inside any more: no warning, and the memory goes
    assert table.stats()["bytes_reserved"] == 0 and len(table) == 0


def test_inserting_into_a_closed_table_raises():
    table = gx.Table(INT_COLUMNS, capacity=3, max_length=MAX_LENGTH)
    table.close()
    with pytest.raises(RuntimeError, match="closed"):
        table.insert(trajectory(2))
    with pytest.raises(RuntimeError, match="closed"):
        table.insert_many([trajectory(2)])


# ------------------------------------------------------- refused input


@pytest.fixture(scope="module")
def full_table():
    """A full table that has evicted, with a Prioritized(2.0) sum tree; shared by the
    bad-input cases, each of which checks it is left as it found it."""
    table = gx.Table(INT_COLUMNS, capacity=6, max_length=MAX_LENGTH)
    rng = np.random.default_rng(2)
    for i in range(9):
        table.insert(trajectory(int(rng.integers(1, 13)), 100 + i),
                     priority=float(rng.uniform(0.5, 3)))
    table.update_priorities([4, 6], [0.25, 7.5])
    table.sample(jax.random.key(0), 4, 2, gx.Prioritized(2.0))
    yield table
    table.close()


def counters(table: gx.Table) -> dict:
    s = table.stats()
    return {k: s[k] for k in COUNTERS} | {"len": len(table), "num_steps": table.num_steps}


def batches(table: gx.Table) -> list[bytes]:
    out = []
    for strategy in PROBE_STRATEGIES:
        batch = table.sample(jax.random.key(42), 16, 5, strategy)
        out += [np.asarray(leaf).tobytes() for leaf in jax.tree.leaves(batch)]
    return out


def _with(**changes):
    """A bad trajectory: a good one of 4 steps with some columns replaced (None drops one)."""
    def make():
        t = trajectory(4, 7)
        for name, value in changes.items():
            if value is None:
                del t[name]
            else:
                t[name] = value() if callable(value) else value
        return t
    return make


def _good():
    return trajectory(4, 7)


# (id, make trajectory, priority, error, regex the message must match)
BAD_INPUT = [
    ("missing-column", _with(reward=None), 1.0, ValueError, r"missing column.*'reward'"),
    ("extra-column", _with(bonus=np.zeros(4, np.float32)), 1.0, ValueError,
     r"unknown column.*'bonus'"),
    ("wrong-step-shape", _with(obs=np.zeros((4, 4), np.float32)), 1.0, ValueError,
     r"'obs' must have shape \[T, 5\], got \(4, 4\)"),
    ("wrong-step-shape-2d", _with(frame=np.zeros((4, 2, 3), np.uint8)), 1.0, ValueError,
     r"'frame' must have shape \[T, 3, 2\]"),
    ("extra-rank", _with(reward=np.zeros((4, 1), np.float32)), 1.0, ValueError,
     r"'reward' must have shape \[T\], got \(4, 1\)"),
    ("missing-time-axis", _with(obs=np.zeros(5, np.float32)), 1.0, ValueError,
     r"'obs' must have shape \[T, 5\], got \(5,\)"),
    ("scalar-for-scalar-column", _with(reward=np.float32(1.0)), 1.0, ValueError,
     r"'reward' must have shape \[T\], got \(\)"),
    ("mismatched-lengths", _with(action=np.zeros((5, 2), np.float32)), 1.0, ValueError,
     r"differ in length"),
    ("zero-steps", lambda: trajectory(0), 1.0, ValueError, r"length 0 is outside"),
    ("too-many-steps", lambda: trajectory(MAX_LENGTH + 1), 1.0, ValueError,
     rf"length {MAX_LENGTH + 1} is outside \[1, max_length={MAX_LENGTH}\]"),
    ("strings", _with(reward=np.array(["a", "b", "c", "d"])), 1.0, TypeError,
     r"'reward' must hold numeric data"),
    ("objects", _with(obs=np.array([[object()] * 5] * 4)), 1.0, TypeError,
     r"'obs' must hold numeric data"),
    ("none-value", _with(done=lambda: None), 1.0, TypeError, r"'done'"),
    ("bytes", _with(step=np.array([b"x"] * 4)), 1.0, TypeError, r"'step' must hold numeric"),
    ("complex-into-float", _with(obs=np.ones((4, 5), np.complex64)), 1.0, TypeError,
     r"'obs'.*unsafe"),
    ("float-into-int32", _with(step=np.arange(4, dtype=np.float64)), 1.0, TypeError,
     r"'step' holds int32; float64 data would be converted unsafely"),
    ("float-into-uint8", _with(frame=np.ones((4, 3, 2), np.float32)), 1.0, TypeError,
     r"'frame' holds uint8"),
    ("float-into-bool", _with(done=np.ones(4, np.float32)), 1.0, TypeError, r"'done' holds bool"),
    ("int-too-large-for-uint8", _with(frame=np.full((4, 3, 2), 256, np.int64)), 1.0,
     (ValueError, TypeError), r"'frame'.*uint8"),
    ("negative-int-into-uint8", _with(frame=np.full((4, 3, 2), -1, np.int64)), 1.0,
     (ValueError, TypeError), r"'frame'.*uint8"),
    ("uint16-too-large-for-uint8", _with(frame=np.full((4, 3, 2), 300, np.uint16)), 1.0,
     ValueError, r"'frame': values outside the range of uint8"),
    ("int-too-large-for-int32", _with(step=np.array([0, 1, 2, 2**31])), 1.0, ValueError,
     r"'step': values outside the range of int32"),
    ("int-too-small-for-int32", _with(step=np.array([0, 1, 2, -2**31 - 1])), 1.0, ValueError,
     r"'step': values outside the range of int32"),
    ("priority-nan", _good, float("nan"), ValueError, r"priority must be 0 or a float in \[2.2250738585072014e-308, 1.0000000150474662e\+30\] \(1e30 as a float32\), got nan"),
    ("priority-inf", _good, float("inf"), ValueError, r"priority must be 0 or a float in \[2.2250738585072014e-308, 1.0000000150474662e\+30\] \(1e30 as a float32\), got inf"),
    ("priority-minus-inf", _good, -float("inf"), ValueError, r"priority must be 0 or a float in \[2.2250738585072014e-308, 1.0000000150474662e\+30\] \(1e30 as a float32\), got -inf"),
    ("priority-negative", _good, -0.5, ValueError, r"priority must be 0 or a float in \[2.2250738585072014e-308, 1.0000000150474662e\+30\] \(1e30 as a float32\), got -0.5"),
    ("priority-numpy-nan", _good, np.float32("nan"), ValueError, r"priority must be 0 or a float in \[2.2250738585072014e-308, 1.0000000150474662e\+30\] \(1e30 as a float32\), got "),
    ("priority-bool", _good, True, TypeError, r"priority must be a real number, got True"),
    ("priority-numpy-bool", _good, np.bool_(False), TypeError, r"priority must be a real number"),
    ("priority-string", _good, "1.0", TypeError, r"priority must be a real number"),
    ("priority-none", _good, None, TypeError, r"priority must be a real number"),
    ("priority-vector", _good, np.array([1.0]), TypeError, r"priority must be a real number"),
    ("priority-above-the-contract", _good, 1e200, ValueError, r"priority must be 0 or a float in \[2.2250738585072014e-308, 1.0000000150474662e\+30\] \(1e30 as a float32\), got 1e\+200"),
    ("priority-subnormal", _good, 5e-324, ValueError, r"priority must be 0 or a float in \[2.2250738585072014e-308, 1.0000000150474662e\+30\] \(1e30 as a float32\), got 5e-324"),
    ("priority-huge-int", _good, 10**400, ValueError, r"priority must be 0 or a float in \[2.2250738585072014e-308, 1.0000000150474662e\+30\] \(1e30 as a float32\), got "),
    ("not-a-mapping-list", lambda: list(_good().items()), 1.0, TypeError,
     r"trajectory must be a mapping.*got list"),
    ("not-a-mapping-tuple", lambda: tuple(_good().values()), 1.0, TypeError,
     r"trajectory must be a mapping.*got tuple"),
    ("not-a-mapping-array", lambda: _good()["obs"], 1.0, TypeError,
     r"trajectory must be a mapping.*got ndarray"),
    ("not-a-mapping-none", lambda: None, 1.0, TypeError, r"trajectory must be a mapping"),
]


@pytest.mark.parametrize("how", ["insert", "insert_many-last"])
@pytest.mark.parametrize("make, priority, error, message", [case[1:] for case in BAD_INPUT],
                         ids=[case[0] for case in BAD_INPUT])
def test_bad_input_raises_and_leaves_the_table_unchanged(full_table, how, make, priority, error,
                                                         message):
    table = full_table
    sampled_before = batches(table)
    before = counters(table)
    with pytest.raises(error, match=message) as info:
        if how == "insert":
            table.insert(make(), priority=priority)
        else:
            table.insert_many([_good(), trajectory(2, 8), make()], priorities=[1.0, 2.0, priority])
    assert counters(table) == before
    assert batches(table) == sampled_before
    if how == "insert_many-last":
        assert str(info.value).startswith("trajectory 2: ")


@pytest.mark.parametrize("call, error, message", [
    (lambda t: t.insert_many([_good(), _good()], priorities=[1.0]), ValueError,
     r"got 1 priorities for 2 trajectories"),
    (lambda t: t.insert_many([_good()], priorities=[1.0, 2.0]), ValueError,
     r"got 2 priorities for 1 trajectories"),
    (lambda t: t.insert_many([_good()], priorities=2.0), TypeError, None),
    (lambda t: t.insert_many(_good()), TypeError, r"sequence of mappings"),
    (lambda t: t.insert_many(iter([_good()])), TypeError, r"sequence of mappings"),
    (lambda t: t.insert_many(None), TypeError, r"sequence of mappings"),
    (lambda t: t.insert_many([_good(), _good()], priorities=np.array([1.0, -1.0])), ValueError,
     r"trajectory 1: priority must be 0 or a float"),
], ids=["too-few-priorities", "too-many-priorities", "scalar-priorities", "a-mapping",
        "an-iterator", "none", "negative-array-priority"])
def test_bad_insert_many_arguments_raise_and_change_nothing(full_table, call, error, message):
    table = full_table
    sampled_before = batches(table)
    before = counters(table)
    with pytest.raises(error, match=message):
        call(table)
    assert counters(table) == before
    assert batches(table) == sampled_before


# ------------------------------------------------- accepted conversions


@pytest.fixture(scope="module")
def scratch():
    """A roomy table the conversion and copy tests insert into; each reads back what it
    inserted last (Recent(1)), so one compiled sampler serves them all."""
    table = gx.Table(INT_COLUMNS, capacity=64, max_length=MAX_LENGTH)
    yield table
    table.close()


def test_float64_data_is_stored_as_float32(scratch):
    table = scratch
    t = trajectory(5, 3)
    t["obs"] = np.random.default_rng(0).standard_normal((5, 5))  # float64
    t["reward"] = np.array([0.1, 1e-3, -2.5, 1e30, 3.0])
    table.insert(t)
    assert_stored(table, t)  # compares with t's values cast to float32


def test_int64_data_in_range_is_stored_as_int32(scratch):
    table = scratch
    t = trajectory(4, 3)
    t["step"] = np.array([-2**31, -1, 7, 2**31 - 1], dtype=np.int64)
    table.insert(t)
    got = newest(table)["step"]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [-2**31, -1, 7, 2**31 - 1])


def test_unsigned_and_narrower_ints_widen_into_int32(scratch):
    table = scratch
    t = trajectory(3, 3)
    t["step"] = np.array([0, 200, 65535], dtype=np.uint16)
    table.insert(t)
    np.testing.assert_array_equal(newest(table)["step"], [0, 200, 65535])
    t["step"] = np.array([1, 2, 2**31 - 1], dtype=np.uint64)
    table.insert(t)
    np.testing.assert_array_equal(newest(table)["step"], [1, 2, 2**31 - 1])


def test_python_lists_are_accepted_for_float_int_and_bool_columns(scratch):
    table = scratch
    t = trajectory(3, 4)
    as_lists = {name: value.tolist() for name, value in t.items()}
    as_lists["frame"] = t["frame"]  # uint8: see test_in_range_python_ints_fit_a_uint8_column
    as_lists["reward"] = [1, 2, 3]  # Python ints into a float column
    table.insert(as_lists)
    assert_stored(table, {**t, "reward": np.array([1.0, 2.0, 3.0])})


def test_in_range_python_ints_fit_a_uint8_column(scratch):
    """Integer data whose every value fits the column is converted (as int64 -> int32 is)."""
    table = scratch
    t = trajectory(2, 4)
    t["frame"] = [[[0, 1], [2, 3], [254, 255]], [[9, 8], [7, 6], [5, 4]]]
    table.insert(t)
    np.testing.assert_array_equal(newest(table)["frame"], np.array(t["frame"], np.uint8))


def test_jax_arrays_and_non_contiguous_arrays_are_accepted(scratch):
    table = scratch
    t = trajectory(6, 5)
    wide = np.repeat(t["obs"], 2, axis=1)  # every column twice
    src = {**t, "obs": wide[:, ::2], "frame": np.asfortranarray(t["frame"]),
           "reward": jnp.asarray(t["reward"]), "action": np.flipud(t["action"][::-1].copy())}
    for name in ("obs", "frame", "action"):
        assert not src[name].flags.c_contiguous, name
    table.insert(src)
    assert_stored(table, t)


def test_bfloat16_column_stores_and_returns_its_data():
    """Column documents jnp.bfloat16 as a column dtype; such a table must take inserts."""
    table = gx.Table({"x": gx.Column((2,), jnp.bfloat16, pad=-1.0)}, capacity=2, max_length=4)
    data = np.array([[0.5, -2.0], [3.0, 1.25], [8.0, -0.125]], dtype=jnp.bfloat16)
    table.insert({"x": data})
    table.insert({"x": data.astype(np.float32)})  # float32 -> bfloat16 is a same-kind cast
    got = newest(table)["x"]
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(got.astype(np.float32), data.astype(np.float32))


def test_real_number_priorities_of_every_kind_are_accepted():
    priorities = [0, 2, 0.0, np.float32(2.0), np.int64(3), np.array(1.5), jnp.float32(0.5)]
    table = gx.Table(INT_COLUMNS, capacity=8, max_length=MAX_LENGTH)
    keys = [table.insert(trajectory(2, i), priority=priority) for i, priority in enumerate(priorities)]
    batch = table.sample(jax.random.key(0), 512, 1, gx.Prioritized(1.0))
    index = {key: i for i, key in enumerate(keys)}
    drawn = np.array([index[int(k)] for k in np.asarray(batch.keys)])
    expected = np.array([float(p) for p in priorities]) / 9.0
    np.testing.assert_allclose(batch.probability, expected[drawn], rtol=1e-6)
    assert set(drawn.tolist()) == {1, 3, 4, 5, 6}  # priority 0 is never drawn


# --------------------------------------------------------------- copying


def test_insert_copies_the_data(scratch):
    table = scratch
    t = trajectory(7, 6)
    source = {name: value.copy() for name, value in t.items()}
    table.insert(source)
    for value in source.values():
        value[...] = 1
    assert_stored(table, t)


def test_insert_many_copies_the_data(scratch):
    table = scratch
    first, last = trajectory(3, 1), trajectory(5, 2)
    sources = [{n: v.copy() for n, v in first.items()}, {n: v.copy() for n, v in last.items()}]
    keys = table.insert_many(sources)
    for source in sources:
        for value in source.values():
            value[...] = 0
    expected = {int(keys[0]): first, int(keys[1]): last}
    batch = table.sample(jax.random.key(1), 32, None, gx.Recent(2), pad="right")
    assert set(np.asarray(batch.keys).tolist()) == set(expected)
    for row, key in enumerate(np.asarray(batch.keys)):
        row_expected = expected_window(expected[int(key)], INT_COLUMNS, 0, MAX_LENGTH, "right")
        for name in INT_COLUMNS:
            np.testing.assert_array_equal(np.asarray(batch[name][row]), row_expected[name])


# ---------------------------------------------------------- constructor


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(capacity=0), ValueError, r"capacity must be in \[1, 2147483648\], got 0"),
    (dict(capacity=-4), ValueError, r"capacity must be in \[1, 2147483648\], got -4"),
    (dict(capacity=2.0), TypeError, r"capacity must be an integer"),
    (dict(capacity=True), TypeError, r"capacity must be an integer"),
    (dict(capacity="8"), TypeError, r"capacity must be an integer"),
    (dict(capacity=None), TypeError, r"capacity must be an integer"),
    (dict(capacity=2**40), ValueError, r"capacity"),
    (dict(max_length=0), ValueError, r"max_length must be in \[1, 2147483648\], got 0"),
    (dict(max_length=-1), ValueError, r"max_length must be in \[1, 2147483648\]"),
    (dict(max_length=2**31 + 1), ValueError, r"max_length must be in \[1, 2147483648\]"),
    (dict(capacity=2**31, max_length=2**31), ValueError, r"more than this machine's"),
    (dict(name=7), TypeError, r"name must be a string"),
    (dict(max_length=1.5), TypeError, r"max_length must be an integer"),
    (dict(max_length=False), TypeError, r"max_length must be an integer"),
    (dict(placement="gpu"), ValueError, r"placement must be one of"),
    (dict(placement=None), ValueError, r"placement must be one of"),
    (dict(remover="random"), ValueError, r"remover must be one of"),
    (dict(remover=0), ValueError, r"remover must be one of"),
    (dict(columns={}), TypeError, r"non-empty mapping"),
    (dict(columns=None), TypeError, r"non-empty mapping"),
    (dict(columns=[("x", gx.Column((), "float32"))]), TypeError, r"non-empty mapping"),
    (dict(columns={"x": ((), "float32")}), TypeError, r"column 'x' must be a gearjax.Column"),
    (dict(columns={"x": {"shape": [], "dtype": "float32"}}), TypeError,
     r"column 'x' must be a gearjax.Column"),
    (dict(columns={1: gx.Column((), "float32")}), TypeError, r"column names must be non-empty"),
    (dict(columns={"": gx.Column((), "float32")}), TypeError, r"column names must be non-empty"),
    (dict(rate_limiter="min_size"), TypeError, r"rate_limiter must be MinSize"),
    (dict(rate_limiter=gx.MinSize), TypeError, r"rate_limiter must be MinSize"),
    (dict(rate_limiter=gx.MinSize(5)), ValueError, r"min size \(5\) exceeds capacity \(4\)"),
    (dict(rate_limiter=gx.SampleToInsertRatio(1.0, 9, 10.0)), ValueError, r"exceeds capacity"),
], ids=lambda v: ",".join(f"{k}={x!r}" for k, x in v.items()) if isinstance(v, dict) else "")
def test_constructor_refuses_bad_arguments(kwargs, error, message):
    args = dict(columns={"x": gx.Column((), "float32")}, capacity=4, max_length=4) | kwargs
    with pytest.raises(error, match=message):
        gx.Table(**args)


@pytest.mark.parametrize("placement", ["host", "device", "auto"])
@pytest.mark.parametrize("remover", ["fifo", "lifo", "min_priority"])
def test_constructor_records_its_arguments(placement, remover, emulated_gpu_memory):
    limiter = gx.MinSize(2, timeout=0.5)
    table = gx.Table(INT_COLUMNS, capacity=np.int64(4), max_length=3, placement=placement,
                     remover=remover, rate_limiter=limiter)
    assert (table.capacity, table.max_length) == (4, 3)
    assert (table.placement, table.remover, table.rate_limiter) == (placement, remover, limiter)
    assert table.columns == INT_COLUMNS
    assert table.columns is not INT_COLUMNS
    table.close()
    assert table.closed
