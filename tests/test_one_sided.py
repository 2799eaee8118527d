"""The one-sided sampler in one process: its shards are gx.Tables here and
its transport copies their memory, so the sampling is checked for exact
distribution, window contents and round trips without a second process,
over both kinds of transport the native sampler (xla_ffi/core/one_sided/one_sided.h)
takes: a Python one called back for each round trip (what verbs is; on both
read paths: tree levels and slot records read whole in the snapshot, or one
descriptor a row past whole_read_bytes), and none, every shard copied in
native code (what a compiled sample's plan runs). The transports themselves:
tests/test_sharded.py (nixl, verbs), tests/test_nixl_native.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

import gearjax as gx
from gearjax._sample_args import SampleArgs, normalise
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
    """The same shards with no transport: copied by the native sampler, as a
    compiled sample's plan does."""

    _compiles = True

    def _native_transport(self):
        return None

    def _peer_name(self, shard: int) -> str:
        return ""  # copied, as this process's own


@pytest.fixture(params=["whole", "per_row", "native"])
def read_path(request):
    return request.param


def reader_for(read_path: str, tables) -> LocalReader:
    reader = NativeReader(tables) if read_path == "native" else LocalReader(tables)
    if read_path == "per_row":  # only the root's line is read whole
        reader.whole_read_bytes = 0
    return reader


def seed_of(rng: np.random.Generator) -> tuple[int, int]:
    return tuple(int(w) for w in rng.integers(0, 1 << 32, 2, dtype=np.uint64))


def args(batch: int, window: int | None, strategy, pad_left: bool = False,
         max_length: int = 12) -> SampleArgs:
    """A sample's arguments as the sharded table hands them to its transport."""
    return normalise(batch, window, strategy, "left" if pad_left else "right",
                     max_length=max_length)


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
        out = reader.sample(seed_of(rng), args(256, 4, gx.Prioritized(alpha), pad_left))
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
    reader.sample(seed_of(rng), args(256, 4, gx.Prioritized(1.0), False))  # warms buffers
    reader.round_trips = reader.descriptors = 0
    reader.sample(seed_of(rng), args(256, 4, gx.Prioritized(1.0), False))
    trips, descriptors = reader.native_counts  # both shards'
    levels = [len(t._native.remote_layout(2, 1.0)["tree_offsets"]) for t in tables]
    if read_path == "per_row":  # each level under the root, the records before and after
        assert trips == 3 + max(levels) and descriptors > 3 * 256 / 2
        return
    assert trips == 3  # snapshot, windows, records
    # The windows (one column: one span a row), and per shard its tree's
    # levels, its size, its records twice.
    assert descriptors == 256 + sum(n + 1 + 2 for n in levels)
    if read_path == "whole":  # the Python transport read shard 1's part of each
        assert reader.round_trips == 3 and reader.descriptors < descriptors


@pytest.mark.parametrize("read_path", ["whole", "native"])
@pytest.mark.parametrize("strategy", [gx.TopK(40), gx.Recent(25), gx.TopK(5000)])
def test_topk_and_recent_draw_uniformly_among_the_best_of_every_shard(read_path, strategy):
    tables, priorities = shards()  # shard 1's items are newer than shard 0's
    reader = reader_for(read_path, tables)
    if strategy.count >= len(priorities):
        best = sorted(priorities)
    elif isinstance(strategy, gx.Recent):  # the newest: shard 1's last ones
        best = sorted(priorities)[-strategy.count:]
    else:  # priority 7 (i % 7 == 6): 43 in shard 1, the newest 40 of them
        best = sorted(k for k, v in priorities.items() if v[0] == 7.0 and k >> SHIFT == 1)
        best = best[-strategy.count:]
    counts = dict.fromkeys(best, 0)
    rng = np.random.default_rng(6)
    for _ in range(20):
        out = reader.sample(seed_of(rng), args(256, 4, strategy, False))
        assert (out["table_size"] == len(priorities)).all()
        assert np.allclose(out["probability"], 1 / len(best))
        for key, start, valid, row in zip(out["keys"], out["start"], out["valid"],
                                          out["columns"][0]):
            _, ident, length = priorities[int(key)]
            assert row[:valid].tolist() == [ident + 100000 * (start + t) for t in range(valid)]
            counts[int(key)] += 1  # KeyError: a key outside the best
    observed = np.array(list(counts.values()))
    assert stats.chisquare(observed).pvalue > 1e-4


def test_a_failing_python_transport_names_its_shard_and_other_errors_surface():
    tables, _ = shards((20, 20))

    class Failing(LocalReader):
        def _read_remote(self, requests):
            raise one_sided.ShardUnavailable(1, "gone")

    with pytest.raises(one_sided.ShardUnavailable, match="shard 1 is unavailable: gone"):
        Failing(tables).sample((1, 2), args(8, 4, gx.Uniform()))
    skipping = Failing(tables)
    skipping._shard, skipping._on_dead_shard = 0, "skip"  # shard 0 copied, shard 1 left out
    out = skipping.sample((1, 2), args(8, 4, gx.TopK(3)))
    assert (out["shard"] == 0).all() and skipping._dead == {1}

    class Broken(LocalReader):
        def _read_remote(self, requests):
            raise KeyError("a bug in the transport")

    with pytest.raises(KeyError, match="a bug in the transport"):  # raised as it was
        Broken(tables).sample((1, 2), args(8, 4, gx.Uniform()))

    class Liar(LocalReader):  # names a shard it was not asked to read
        def _read_remote(self, requests):
            raise one_sided.ShardUnavailable(7, "?")

    with pytest.raises(RuntimeError, match="named shard 7"):
        Liar(tables).sample((1, 2), args(8, 4, gx.Uniform()))
    with pytest.raises(ValueError, match="transport is a NixlAgent, None, or an object"):
        from gearjax import _gearjax
        _gearjax.one_sided_sample(
            object(), [], [], SHIFT, [], 0, 0, 0, 0, 1, 0, False, *(np.zeros(1, t) for t in (
                np.int64, np.int32, np.float32, np.int64, np.int32, np.int32)), [], 1.0)


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
    held = [reader.sample(seed_of(rng), args(32, 4, gx.Uniform(), True))["columns"][0]
            for _ in range(one_sided.OUTPUT_BUFFERS)]
    snapshot = [h.copy() for h in held]
    addresses = {h.ctypes.data for h in held}
    assert len(addresses) == one_sided.OUTPUT_BUFFERS  # each its own buffer
    assert all(h.ctypes.data % one_sided.ALIGNMENT == 0 for h in held)
    # Every buffer is held: the next sample copies out of a shared one.
    extra = reader.sample(seed_of(rng), args(32, 4, gx.Uniform(), True))["columns"][0]
    assert extra.ctypes.data not in addresses
    for h, before in zip(held, snapshot):
        assert np.array_equal(h, before)  # none was written over
    # A batch dropped frees its buffer for the next sample.
    freed = held.pop(1).ctypes.data
    again = reader.sample(seed_of(rng), args(32, 4, gx.Uniform(), True))["columns"][0]
    assert again.ctypes.data == freed
    for h, before in zip(held, snapshot[:1] + snapshot[2:]):
        assert np.array_equal(h, before)


def test_jax_aliases_a_handed_out_batch_and_keeps_its_buffer_from_reuse():
    import jax.numpy as jnp
    tables, _ = shards((50, 50))
    reader = LocalReader(tables)
    rng = np.random.default_rng(4)
    rows = reader.sample(seed_of(rng), args(64, 4, gx.Uniform(), False))["columns"][0]
    address = rows.ctypes.data
    array = jnp.from_dlpack(rows)
    assert array.unsafe_buffer_pointer() == address  # no copy
    expected = np.asarray(array).copy()
    del rows
    for _ in range(one_sided.OUTPUT_BUFFERS + 1):  # JAX's array still holds it
        rows = reader.sample(seed_of(rng), args(64, 4, gx.Uniform(), False))["columns"][0]
        assert rows.ctypes.data != address
    assert np.array_equal(np.asarray(array), expected)


def compiled_sampler(native_reader, batch=64, window=4, alpha=1.0, pad_left=False):
    """A jitted scan of compiled one-sided samples over the reader's plan,
    a table state threaded through them (the only compiled form)."""
    import jax
    from gearjax import _ffi
    from gearjax import state as table_state

    plan = native_reader.plan(args(batch, window, gx.Prioritized(alpha), pad_left))
    columns = tuple((c.shape, c.dtype) for c in native_reader._local.columns.values())

    def step(state, seed):
        return _ffi.one_sided_sample_call(state, seed, plan=plan, batch=batch, width=window,
                                          columns=columns)

    def run(seeds):
        return jax.lax.scan(step, table_state.initial(), seeds)[1]

    return plan, jax.jit(run)


def test_compiled_samples_run_the_native_sampler_inside_jit_and_scan():
    tables, priorities = shards()
    reader = NativeReader(tables)
    _, run = compiled_sampler(reader)
    seeds = np.random.default_rng(5).integers(0, 1 << 32, (6, 2), dtype=np.uint64).astype(
        np.uint32)
    keys, start, probability, table_size, valid, shard, x = (np.asarray(r) for r in run(seeds))
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
    out = reader.sample((int(seeds[2, 0]), int(seeds[2, 1])), args(64, 4, gx.Prioritized(1.0)))
    assert out["keys"].tolist() == keys[2].tolist()
    assert out["columns"][0].tolist() == x[2].tolist()


def test_a_compiled_sample_declares_no_effect_and_a_stateless_traced_one_is_refused():
    """The compiled sample threads a table state: one FFI call, no JAX
    effect (JAX's fast dispatch path), no host callback. The stateless form
    (once ordered by JAX's ordered effects) is refused while tracing, before
    the exchange is looked at: the one-process table here has the xla one."""
    import jax
    tables, _ = shards((20, 20))
    _, run = compiled_sampler(NativeReader(tables))
    seeds = np.zeros((2, 2), np.uint32)
    assert not jax.make_jaxpr(run)(seeds).effects
    hlo = run.lower(seeds).as_text()
    assert "gearjax_one_sided_sample" in hlo and "callback" not in hlo
    assert "_threaded" not in hlo
    table = gx.ShardedTable({"x": gx.Column((), "int32")}, capacity=4, max_length=4)
    table.insert({"x": np.zeros(2, np.int32)})
    with pytest.raises(TypeError, match=r"ShardedTable.sample\(rng_key, ...\) without a table "
                                        r"state was traced"):
        jax.jit(lambda k: table.sample(k, 2, 2))(jax.random.key(0))
    table.close()


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


def test_compiled_samples_serve_every_strategy_of_tables_a_plan_can_stage():
    from gearjax._gearjax import one_sided_plan_max_columns
    tables, _ = shards((8, 8))
    reader = NativeReader(tables)
    assert reader.compiles()
    handles = {reader.plan(args(8, 4, s))
               for s in (gx.Prioritized(1.0), gx.Uniform(), gx.TopK(3), gx.Recent(3))}
    assert len(handles) == 4 and min(handles) >= 1  # one plan a strategy
    reader.close_plans()
    assert not LocalReader(tables).compiles()  # a Python transport: io_callback
    with pytest.raises(RuntimeError, match="cannot be compiled"):
        LocalReader(tables).plan(args(8, 4, gx.Uniform()))
    wide = [gx.Table({f"c{i}": gx.Column((), "int32") for i in
                      range(one_sided_plan_max_columns + 1)}, capacity=4, max_length=4,
                     _key_bits=SHIFT) for _ in range(2)]
    assert not NativeReader(wide).compiles()  # more columns than a plan stages


def test_a_compiled_topk_sample_draws_the_rows_the_eager_one_does_from_its_seed():
    import jax
    from gearjax import _ffi
    from gearjax import state as table_state
    tables, priorities = shards()
    reader = NativeReader(tables)
    plan = reader.plan(args(64, 4, gx.Recent(30)))
    columns = tuple((c.shape, c.dtype) for c in reader._local.columns.values())
    seed = np.array([11, 12], np.uint32)
    results = jax.jit(lambda s: _ffi.one_sided_sample_call(
        table_state.initial(), s, plan=plan, batch=64, width=4, columns=columns)[1])(seed)
    keys, x = np.asarray(results[0]), np.asarray(results[-1])
    assert set(keys.tolist()) <= set(sorted(priorities)[-30:])  # the newest 30
    for transport in (reader, LocalReader(tables)):  # copied, or called back
        out = transport.sample((11, 12), args(64, 4, gx.Recent(30)))
        assert out["keys"].tolist() == keys.tolist()
        assert out["columns"][0].tolist() == x.tolist()


class _Store:
    """The coordination service's key-value store, in a dict."""

    def __init__(self):
        self.values: dict[str, str] = {}

    def key_value_set(self, key, value, allow_overwrite=False):
        self.values[key] = value

    def key_value_try_get(self, key):
        return self.values[key]

    def blocking_key_value_get(self, key, timeout_ms):
        if key not in self.values:
            raise TimeoutError(f"{key} not set within {timeout_ms} ms")
        return self.values[key]


class _Owner(LocalReader):
    """Shard 1's owner: serves tree requests by publishing its layouts."""

    def _layout(self, code: int, alpha: float) -> dict:
        layout = self._local._native.remote_layout(code, alpha)
        layout["max_length"] = self._local.max_length
        one_sided.coordination.client().key_value_set(
            self._layout_path(self._shard, one_sided.strategy_key(code, alpha)),
            json.dumps(layout))
        return layout


def test_a_tree_request_the_owner_refuses_raises_at_once_not_a_dead_shard(monkeypatch):
    """Fails when the owner ignores a tree request it cannot serve (a ninth
    alpha): the reader waited out its timeout and raised ShardUnavailable,
    and with on_dead_shard="skip" excluded a live shard for good."""
    store = _Store()
    monkeypatch.setattr(one_sided.coordination, "client", lambda: store)
    tables, _ = shards((20, 20))
    owner = _Owner([tables[1], tables[1]])
    owner._shard, owner.refused_updates = 1, 0
    for alpha in range(8):  # the owner's table keeps 8 Prioritized alphas
        tables[1].sample(np.zeros(2, np.uint32), 1, 1, gx.Prioritized(float(alpha)), numpy=True)
    reader = LocalReader(tables)
    reader._shard = 0

    def ask(shard, message):  # the owner's progress thread: its errors stay there
        try:
            owner._serve(message)
        except Exception:  # noqa: BLE001
            owner.refused_updates += 1

    reader._ask = ask
    # The protocol's own (LocalReader's reads the tables): from the store,
    # asking the owner.
    reader._peer_layout = one_sided.OneSidedReader._peer_layout.__get__(reader)
    reader._loaded_layout = lambda shard, layout: None
    with pytest.raises(ValueError, match="shard 1 cannot serve .*at most 8"):
        reader._peer_layout(1, gx.Prioritized.code, 7.5)
    with pytest.raises(ValueError, match="shard 1 cannot serve"):  # asked again: the same
        reader._peer_layout(1, gx.Prioritized.code, 7.5)
    assert reader._peer_layout(1, gx.Prioritized.code, 3.0)["max_length"] == 12  # kept alphas
