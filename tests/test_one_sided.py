"""The one-sided sampler (gearjax/sharded/one_sided.py) in one process: its
shards are gx.Tables here and its transport copies their memory, so the
sampling logic, on both of its read paths (tree levels and slot records read
whole in the snapshot, or one descriptor a row when they exceed
WHOLE_READ_BYTES), is checked for exact distribution, window contents and
round trips without a second process. The transports themselves:
tests/test_sharded.py (nixl, verbs), tests/test_nixl_native.py."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import gearjax as gx
from gearjax.sharded import keys as keys_of
from gearjax.sharded import one_sided
from gearjax.sharded.one_sided import OneSidedReader, aligned_zeros, copy_local

SHIFT = keys_of.shard_shift(2)


class LocalReader(OneSidedReader):
    """Shards in this process; a read is a copy, counted."""

    NAME = "local"

    def __init__(self, tables: list[gx.Table]):
        super().__init__()
        self._tables = tables
        self._local, self._shard, self._shards = tables[0], -1, len(tables)
        self._shard_shift, self._on_dead_shard, self._dead = SHIFT, "raise", set()
        self._timeout, self._token, self._path = 5.0, "token", "local"
        self._buffers: dict[str, np.ndarray] = {}
        self.round_trips = 0
        self.descriptors = 0

    def _check_open(self) -> None:
        pass

    def _staging(self, name: str, size: int) -> np.ndarray:
        if name not in self._buffers or self._buffers[name].nbytes < size:
            self._buffers[name] = aligned_zeros(max(size, 1 << 16))
        return self._buffers[name]

    def _read_remote(self, requests) -> None:
        self.round_trips += 1
        for spans in requests.values():
            self.descriptors += len(spans[1])
            copy_local(*spans)

    def _peer_layout(self, shard: int, code: int, alpha: float) -> dict:
        table = self._tables[shard]
        layout = table._native.remote_layout(code, alpha)
        layout["max_length"] = table.max_length
        one_sided._check_layout(layout, shard, table.capacity, table.max_length)
        return layout


def shards(capacities=(700, 300), seed=0):
    """Two tables of unequal size; trajectory i of shard k holds 1000 k + i at
    every step (plus the step number), with priority 1 + (i mod 7)."""
    rng = np.random.default_rng(seed)
    tables, priorities = [], {}
    for k, capacity in enumerate(capacities):
        table = gx.Table({"x": gx.Column((), "int32")}, capacity=capacity, max_length=12,
                         _key_bits=SHIFT)
        for i in range(capacity):
            length = int(rng.integers(1, 13))
            key = table.insert({"x": 1000 * k + i + 100000 * np.arange(length, dtype=np.int32)},
                               priority=1.0 + i % 7)
            priorities[int(keys_of.global_keys(k, key, SHIFT))] = (1.0 + i % 7, 1000 * k + i,
                                                                   length)
        tables.append(table)
    return tables, priorities


@pytest.fixture(params=["whole", "per_row"])
def read_path(request, monkeypatch):
    if request.param == "per_row":  # only the root's line is read whole
        monkeypatch.setattr(one_sided, "WHOLE_READ_BYTES", 0)
    return request.param


@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.0])
def test_rows_follow_priority_to_the_alpha_over_every_shard(read_path, alpha):
    tables, priorities = shards()
    reader = LocalReader(tables)
    keys = sorted(priorities)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    rng = np.random.default_rng(1)
    for _ in range(40):
        out = reader.sample(rng, 256, 4, gx.Prioritized(alpha).code, alpha, pad_left=False)
        for key, start, valid, row in zip(out["keys"], out["start"], out["valid"],
                                          out["columns"][0]):
            _, ident, length = priorities[int(key)]
            assert 0 <= start < length and valid == min(4, length - start)
            assert row[:valid].tolist() == [ident + 100000 * (start + t) for t in range(valid)]
            assert (row[valid:] == 0).all()  # padded
            counts[index[int(key)]] += 1
    weights = np.array([priorities[k][0] ** alpha for k in keys])
    expected = weights / weights.sum() * counts.sum()
    assert stats.chisquare(counts, expected).pvalue > 1e-4


def test_a_sample_is_three_round_trips_when_its_shards_fit_the_budget(read_path):
    tables, _ = shards()
    reader = LocalReader(tables)
    reader._shard = 0  # shard 0 is this process's: copied without the transport
    rng = np.random.default_rng(2)
    reader.sample(rng, 256, 4, 2, 1.0, pad_left=False)  # publishes nothing; warms buffers
    reader.round_trips = reader.descriptors = 0
    reader.sample(rng, 256, 4, 2, 1.0, pad_left=False)
    levels = len(tables[1]._native.remote_layout(2, 1.0)["tree_offsets"])
    rows = 256  # upper bound of shard 1's rows (one column: one window span a row)
    if read_path == "whole":
        assert reader.round_trips == 3  # snapshot, windows, records
        assert reader.descriptors <= rows + levels + 3
    else:  # each level under the root, then the records before and after
        assert reader.round_trips == 3 + (levels - 1) + 1
        assert reader.descriptors > 3 * rows / 2


def test_a_hostile_layout_with_inconsistent_tree_levels_is_refused():
    tables, _ = shards((8, 8))
    layout = tables[0]._native.remote_layout(0, 0.0)
    layout["max_length"] = 12
    one_sided._check_layout(layout, 0, 8, 12)
    for offsets, tree_bytes in (([8, 0], layout["tree_bytes"]), ([0, 3], layout["tree_bytes"]),
                                (layout["tree_offsets"], layout["tree_bytes"] - 8),
                                ([], layout["tree_bytes"])):
        bad = dict(layout, tree_offsets=offsets, tree_bytes=tree_bytes)
        with pytest.raises(one_sided.ShardUnavailable, match="layout"):
            one_sided._check_layout(bad, 0, 8, 12)


def test_rows_are_handed_out_without_a_copy_and_never_overwritten_while_held():
    tables, _ = shards((50, 50))
    reader = LocalReader(tables)
    rng = np.random.default_rng(3)
    held = [reader.sample(rng, 32, 4, 0, 0.0, pad_left=True)["columns"][0]
            for _ in range(one_sided.OUTPUT_BUFFERS)]
    snapshot = [h.copy() for h in held]
    addresses = {h.ctypes.data for h in held}
    assert len(addresses) == one_sided.OUTPUT_BUFFERS  # each its own buffer
    assert all(h.ctypes.data % one_sided.ALIGNMENT == 0 for h in held)
    # Every buffer is held: the next sample copies out of a shared one.
    extra = reader.sample(rng, 32, 4, 0, 0.0, pad_left=True)["columns"][0]
    assert extra.ctypes.data not in addresses
    for h, before in zip(held, snapshot):
        assert np.array_equal(h, before)  # none was written over
    # A batch dropped frees its buffer for the next sample.
    freed = held.pop(1).ctypes.data
    again = reader.sample(rng, 32, 4, 0, 0.0, pad_left=True)["columns"][0]
    assert again.ctypes.data == freed
    for h, before in zip(held, snapshot[:1] + snapshot[2:]):
        assert np.array_equal(h, before)


def test_jax_aliases_a_handed_out_batch_and_keeps_its_buffer_from_reuse():
    import jax.numpy as jnp
    tables, _ = shards((50, 50))
    reader = LocalReader(tables)
    rng = np.random.default_rng(4)
    rows = reader.sample(rng, 64, 4, 0, 0.0, pad_left=False)["columns"][0]
    address = rows.ctypes.data
    array = jnp.from_dlpack(rows)
    assert array.unsafe_buffer_pointer() == address  # no copy
    expected = np.asarray(array).copy()
    del rows
    for _ in range(one_sided.OUTPUT_BUFFERS + 1):  # JAX's array still holds it
        assert reader.sample(rng, 64, 4, 0, 0.0, pad_left=False)["columns"][0].ctypes.data \
            != address
    assert np.array_equal(np.asarray(array), expected)
