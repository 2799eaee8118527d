"""The one-sided sampler in one process: its shards are gx.Tables here and
its transport copies their memory, so the sampling logic is checked for
exact distribution, window contents and round trips without a second
process, in both implementations: Python's (gearjax/sharded/one_sided.py,
what verbs uses; on both of its read paths: tree levels and slot records
read whole in the snapshot, or one descriptor a row when they exceed
WHOLE_READ_BYTES) and the native one the nixl exchange uses
(xla_ffi/core/one_sided.h; its per-row path is tested in C++,
one_sided_test.cc). The transports themselves: tests/test_sharded.py (nixl,
verbs), tests/test_nixl_native.py."""

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


# The one-sided protocol reads other processes' host memory: host tables,
# sampled on the CPU, on any machine (a GPU machine's "auto" tables would go to
# GPU memory, which other hosts cannot read).
pytestmark = pytest.mark.usefixtures("cpu_device")


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


class NativeReader(LocalReader):
    """The same shards, sampled by the native sampler (no agent: memcpy)."""

    _native = True

    def _native_agent(self):
        return None

    def _peer_name(self, shard: int) -> str:
        return ""  # copied, as this process's own


@pytest.fixture(params=["whole", "per_row", "native"])
def read_path(request, monkeypatch):
    if request.param == "per_row":  # only the root's line is read whole
        monkeypatch.setattr(one_sided, "WHOLE_READ_BYTES", 0)
    return request.param


def reader_for(read_path: str, tables) -> LocalReader:
    return NativeReader(tables) if read_path == "native" else LocalReader(tables)


@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.0])
def test_rows_follow_priority_to_the_alpha_over_every_shard(read_path, alpha):
    tables, priorities = shards()
    reader = reader_for(read_path, tables)
    keys = sorted(priorities)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    rng = np.random.default_rng(1)
    total = sum(p ** alpha for p, _, _ in priorities.values())
    for i in range(40):
        pad_left = i % 2 == 1
        out = reader.sample(rng, 256, 4, gx.Prioritized(alpha).code, alpha, pad_left=pad_left)
        for key, start, valid, row, p, shard in zip(out["keys"], out["start"], out["valid"],
                                                    out["columns"][0], out["probability"],
                                                    out["shard"]):
            priority, ident, length = priorities[int(key)]
            assert 0 <= start < length and valid == min(4, length - start)
            assert shard == int(key) >> SHIFT
            assert np.isclose(p, priority ** alpha / total, rtol=1e-5)
            steps = row[4 - valid:] if pad_left else row[:valid]
            padding = row[:4 - valid] if pad_left else row[valid:]
            assert steps.tolist() == [ident + 100000 * (start + t) for t in range(valid)]
            assert (padding == 0).all()
            counts[index[int(key)]] += 1
    weights = np.array([priorities[k][0] ** alpha for k in keys])
    expected = weights / weights.sum() * counts.sum()
    assert stats.chisquare(counts, expected).pvalue > 1e-4


def test_a_sample_is_three_round_trips_when_its_shards_fit_the_budget(read_path):
    tables, _ = shards()
    reader = reader_for(read_path, tables)
    reader._shard = 0  # shard 0 is this process's: copied without the transport
    rng = np.random.default_rng(2)
    reader.sample(rng, 256, 4, 2, 1.0, pad_left=False)  # publishes nothing; warms buffers
    reader.round_trips = reader.descriptors = 0
    reader.sample(rng, 256, 4, 2, 1.0, pad_left=False)
    levels = len(tables[1]._native.remote_layout(2, 1.0)["tree_offsets"])
    rows = 256  # upper bound of shard 1's rows (one column: one window span a row)
    if read_path == "native":  # counted by the native sampler, both shards
        trips, descriptors = reader.native_counts
        assert trips == 3
        # The windows, and per shard its tree's levels, its size, its records twice.
        assert descriptors == rows + sum(
            len(t._native.remote_layout(2, 1.0)["tree_offsets"]) + 1 + 2 for t in tables)
    elif read_path == "whole":
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


@pytest.mark.parametrize("native", [False, True])
def test_rows_are_handed_out_without_a_copy_and_never_overwritten_while_held(native):
    tables, _ = shards((50, 50))
    reader = NativeReader(tables) if native else LocalReader(tables)
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


def compiled_sampler(native_reader, batch=64, window=4, alpha=1.0, pad_left=False):
    """A jitted scan of compiled one-sided samples over the reader's plan:
    state form (threaded) and stateless form (ordered)."""
    import jax
    from gearjax import _ffi
    from gearjax import state as table_state

    plan = native_reader.plan(batch, window, 2, alpha, pad_left)
    columns = tuple((c.shape, c.dtype) for c in native_reader._local.columns.values())

    def step(state, seed):
        state, results = _ffi.one_sided_sample_call(seed, plan=plan, batch=batch, width=window,
                                                    columns=columns, state=state)
        return state, results

    def run(seeds, threaded=True):
        state = table_state.initial() if threaded else None
        if threaded:
            return jax.lax.scan(step, state, seeds)[1]
        return jax.lax.scan(lambda c, s: (c, step(None, s)[1]), 0, seeds)[1]

    return plan, jax.jit(run, static_argnames="threaded")


@pytest.mark.parametrize("threaded", [True, False])
def test_compiled_samples_run_the_native_sampler_inside_jit_and_scan(threaded):
    tables, priorities = shards()
    reader = NativeReader(tables)
    _, run = compiled_sampler(reader)
    seeds = np.random.default_rng(5).integers(0, 1 << 32, (6, 2), dtype=np.uint64).astype(
        np.uint32)
    keys, start, probability, table_size, valid, shard, x = (np.asarray(r) for r in
                                                            run(seeds, threaded=threaded))
    assert keys.dtype == np.int64 and keys.shape == (6, 64)
    assert len({tuple(k) for k in keys}) == 6  # each step its own rows
    total = sum(p for p, _, _ in priorities.values())
    for i in range(6):
        for key, s, p, v, row in zip(keys[i], start[i], probability[i], valid[i], x[i]):
            priority, ident, length = priorities[int(key)]
            assert v == min(4, length - s) and np.isclose(p, priority / total, rtol=1e-5)
            assert row[:v].tolist() == [ident + 100000 * (s + t) for t in range(v)]
        assert (table_size[i] == len(priorities)).all()
        assert (shard[i] == keys[i] >> SHIFT).all()
    # The same seed outside jit (the eager native sample) gives the same rows.
    out = reader.sample(np.random.default_rng(0), 64, 4, 2, 1.0, pad_left=False,
                        seed=(int(seeds[2, 0]), int(seeds[2, 1])))
    assert out["keys"].tolist() == keys[2].tolist()
    assert out["columns"][0].tolist() == x[2].tolist()


def test_a_threaded_compiled_sample_declares_no_effect_and_the_ordered_one_does():
    import jax
    tables, _ = shards((20, 20))
    _, run = compiled_sampler(NativeReader(tables))
    seeds = np.zeros((2, 2), np.uint32)
    assert not jax.make_jaxpr(lambda s: run(s, threaded=True))(seeds).effects
    assert jax.make_jaxpr(lambda s: run(s, threaded=False))(seeds).effects


def test_a_program_whose_plan_was_closed_fails_saying_so():
    import jax
    tables, _ = shards((20, 20))
    reader = NativeReader(tables)
    _, run = compiled_sampler(reader)
    seeds = np.zeros((2, 2), np.uint32)
    jax.block_until_ready(run(seeds))
    reader.close_plans()
    with pytest.raises(Exception, match="plan .* its sharded table was closed|closed"):
        jax.block_until_ready(run(seeds))


def test_compiled_samples_serve_tree_strategies_of_tables_a_plan_can_stage():
    from gearjax._gearjax import one_sided_plan_max_columns
    tables, _ = shards((8, 8))
    reader = NativeReader(tables)
    assert reader.compiles(gx.Prioritized(1.0)) and reader.compiles(gx.Uniform())
    assert not reader.compiles(gx.TopK(3)) and not reader.compiles(gx.Recent(3))
    assert not LocalReader(tables).compiles(gx.Uniform())  # no native sampler: io_callback
    wide = [gx.Table({f"c{i}": gx.Column((), "int32") for i in
                      range(one_sided_plan_max_columns + 1)}, capacity=4, max_length=4,
                     _key_bits=SHIFT) for _ in range(2)]
    assert not NativeReader(wide).compiles(gx.Uniform())  # more columns than a plan stages
