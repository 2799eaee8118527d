"""On a CUDA GPU: host tables are GPU-mapped and device tables live in GPU
memory, and sampling, priority updates and insert_batch through the CUDA
handlers give exactly what the CPU handlers give, inside jit and scan, also
while Python threads insert. Skipped, with the reason, where JAX sees no GPU
(conftest.py)."""

from __future__ import annotations

import faulthandler
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx
from conftest import COLUMNS, fill
from reference import check_batch, random_trajectory

pytestmark = pytest.mark.gpu
STRATEGIES = [gx.Uniform(), gx.Timestep(), gx.Prioritized(0.7), gx.TopK(5), gx.Recent(4)]


def on(platform: str):
    return jax.default_device(jax.devices(platform)[0])


@pytest.fixture(params=["host", "device"])
def gpu_table(rng, request):
    table = gx.Table(COLUMNS, capacity=32, max_length=12, placement=request.param)
    yield table, fill(table, rng, 40)  # 40 into 32 slots: evictions too
    table.close()


def reference_table(table: gx.Table, tmp_path) -> gx.Table:
    """A table the CPU handler samples exactly as the GPU samples `table`: the
    table itself where it is in host memory; for a device table (which the CPU
    handler refuses) a host table loaded from its checkpoint, which restores
    the slot layout exactly and so draws the same rows for the same key."""
    if table.stats()["memory"] != "device":
        return table
    table.save(tmp_path / "reference.gx")
    return gx.Table.load(tmp_path / "reference.gx", placement="host")


def on_cpu(key):
    return jax.device_put(key, jax.devices("cpu")[0])


def sample_in_jit(table, key, *args, **kwargs):
    """``table.sample(state, key, *args, **kwargs)`` jitted, from a fresh
    state made on the current default device; returns the batch."""
    return jax.jit(lambda s, k: table.sample(s, k, *args, **kwargs)[1])(table.state(), key)


def test_tables_are_where_they_were_placed(gpu_table):
    table, _ = gpu_table
    expected = {"host": "gpu-mapped pinned host", "device": "device"}[table.placement]
    assert table.stats()["memory"] == expected


def test_auto_placement_follows_free_gpu_memory():
    from gearjax import _gearjax
    from gearjax.table import AUTO_DEVICE_FRACTION, _resolve_placement
    free = _gearjax.gpu_free_bytes()
    small = gx.Table({"x": gx.Column((), "uint8")}, capacity=1, max_length=1024)
    assert small.stats()["memory"] == ("device" if 1024 <= AUTO_DEVICE_FRACTION * free else
                                       "gpu-mapped pinned host")
    # Deciding only (creating a table that large would pin half the GPU's size).
    assert not _resolve_placement("auto", int(AUTO_DEVICE_FRACTION * free) + (1 << 30))


@pytest.mark.parametrize("strategy", [gx.Uniform(), gx.Prioritized(0.7), gx.TopK(5)],
                         ids=lambda s: type(s).__name__)
def test_gpu_samples_report_themselves_done_through_the_ring(gpu_table, strategy):
    """Nothing but the kernels goes on the stream for a sample: its ticket
    comes back when the gather's last block writes it into the table's
    completion ring (xla_ffi/core/gpu/gpu_completions.h), which the host reads
    when asked. Once the results are ready no sample is in flight, and a
    writer that evicts, in a thread, gets its slot."""
    table, _ = gpu_table
    with on("gpu"):
        step = jax.jit(lambda s, k: table.sample(s, k, 16, 3, strategy))
        state = table.state()
        for i in range(50):
            state, batch = step(state, jax.random.key(i))
        jax.block_until_ready(batch)
    assert table.stats()["samples_in_flight"] == 0
    done = threading.Event()
    threading.Thread(target=lambda: (table.insert(
        {name: np.zeros((2, *c.shape), c.dtype) for name, c in COLUMNS.items()}),
        done.set()), daemon=True).start()
    assert done.wait(30), "an insert waited on samples the ring had reported done"


def test_numpy_samples_and_eager_insert_batch_on_gpu_tables(gpu_table):
    """numpy=True: a GPU-mapped host table gives the GPU sample's batch (the
    native core gathers from the mapped arena on the host); a device table is
    refused, saying so. An eager insert_batch of NumPy rows goes in either
    way (natively into host memory, through the CUDA handler into a device
    table)."""
    table, _ = gpu_table
    key = jax.random.key(5)
    if table.stats()["memory"] == "device":
        with pytest.raises(ValueError, match="lives in GPU memory: numpy=True"):
            table.sample(key, 8, 4, numpy=True)
    else:
        with on("gpu"):
            expected = table.sample(key, 8, 4)
        got = table.sample(key, 8, 4, numpy=True)
        for name in ("keys", "start", "mask", "timestep"):
            np.testing.assert_array_equal(getattr(got, name), np.asarray(getattr(expected, name)))
        for name in expected:
            np.testing.assert_array_equal(got[name], np.asarray(expected[name]))
    rows = {n: np.zeros((2, 3, *c.shape), c.dtype) for n, c in table.columns.items()}
    with on("gpu"):
        keys = table.insert_batch(rows, np.array([3, 1]))
    assert [len(table.get(int(k))[next(iter(rows))]) for k in np.asarray(keys)] == [3, 1]


@pytest.mark.parametrize("placement", ["host", "device"])
def test_gpu_insert_batch_inside_jit(placement):
    """What test_insert_batch.py checks on the CPU, through the CUDA handler."""
    from test_insert_batch import COLUMNS as ROLLOUT, insert_batch_twice_in_jit_and_check

    with gx.Table(ROLLOUT, capacity=4, max_length=6, placement=placement) as table, on("gpu"):
        insert_batch_twice_in_jit_and_check(table)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("window, pad", [(1, "left"), (7, "right"), (None, "left")])
def test_gpu_sample_equals_cpu_sample(gpu_table, strategy, window, pad, tmp_path):
    table, stored = gpu_table
    key = jax.random.key(3)
    reference = reference_table(table, tmp_path)
    with on("gpu"):
        gpu = sample_in_jit(table, key, 64, window, strategy, pad)
    with on("cpu"):
        cpu = sample_in_jit(reference, on_cpu(key), 64, window, strategy, pad)
    assert next(iter(gpu.keys.devices())).platform == "gpu"
    for g, c in zip(jax.tree.leaves(gpu), jax.tree.leaves(cpu)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(c))
    check_batch(gpu, stored, COLUMNS, window or table.max_length, pad)


@pytest.mark.parametrize("placement", ["host", "device"])
@pytest.mark.parametrize("cut", ["start", "end", "full"])
def test_gpu_step_draws_equal_cpu_step_draws(placement, cut, rng, tmp_path):
    """PrioritizedSteps on the GPU (its kernel descends the step tree for cut
    "start" and "end"; "full" is selected on the host), then a per-step
    update in the same program: the CPU's batch for the same key, and the
    table as the CPU's update leaves it."""
    with gx.Table(COLUMNS, capacity=16, max_length=12, placement=placement,
                  step_priorities=True) as table:
        for _ in range(20):
            length = int(rng.integers(4, 13))
            table.insert(random_trajectory(rng, COLUMNS, length),
                         priority=rng.uniform(0, 2, length))
        reference = reference_table(table, tmp_path)
        strategy, key = gx.PrioritizedSteps(0.7), jax.random.key(4)

        def step(state, key):
            state, batch = table.sample(state, key, 64, 4, strategy, cut=cut)
            steps = jnp.where(batch.mask, batch.timestep, -1)
            state, _ = table.update_priorities(state, batch.keys, jnp.full((64, 4), 0.5),
                                               steps=steps)
            return state, batch

        with on("cpu"):  # first: the reference may be the table itself
            cpu = sample_in_jit(reference, on_cpu(key), 64, 4, strategy, cut=cut)
        with on("gpu"):
            state, gpu = jax.jit(step)(table.state(), key)
            jax.block_until_ready(state)
        for g, c in zip(jax.tree.leaves(gpu), jax.tree.leaves(cpu)):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(c))
        contents = table.contents()
        per_key = dict(zip(contents["key"].tolist(), np.split(
            contents["step_priorities"], np.cumsum(contents["length"])[:-1])))
        for k, starts, mask in zip(np.asarray(gpu.keys), np.asarray(gpu.start),
                                   np.asarray(gpu.mask)):
            assert (per_key[int(k)][starts:starts + int(mask.sum())] == 0.5).all()


# Per call of each CUDA path: (launches, copies, host functions, syncs,
# scratch allocations) the handler asks of the host (xla_ffi/cuda/host_work.h).
HOST_WORK_PER_CALL = {
    "fused sample": (1, 0, 0, 0, 0),            # one kernel selects and gathers
    "two-kernel sample": (2, 0, 0, 0, 1),       # rows wider than one gather part
    # TopK: the seed down, the draws into the table's pinned staging (read in
    # place by the gather: TableGpu::StagingFor), the gather.
    "host-selected sample": (1, 1, 0, 1, 0),
    "priority update": (1, 0, 0, 0, 0),         # one kernel (core/gpu/update_block.h)
    # No Prioritized tree: staged, so that inserts never wait for the GPU.
    "priority update without a tree": (0, 3, 2, 0, 0),
    # A device table's Prioritized tree has a copy in GPU memory
    # (core/gpu/tree_mirror.h): nothing written on the host between calls,
    # nothing to copy into it.
    "mirrored prioritized sample": (1, 0, 0, 0, 0),
    "mirrored priority update": (1, 0, 0, 0, 0),
    "staged priority update": (0, 3, 2, 0, 0),  # a TopK heap: through pinned host memory
}


@pytest.mark.parametrize("path", sorted(HOST_WORK_PER_CALL))
def test_each_cuda_path_asks_the_host_for_no_more_than_its_counts(path, rng):
    """The first GPU run found a sample's cost in the handler's host work
    (47 us of it a call, a host function stalling the stream), not in its 7 us
    of kernels: each path's host work is counted and held to what it is."""
    from gearjax import _ffi, _gearjax
    columns = ({"frame": gx.Column((48, 48, 3), "uint8")} if path == "two-kernel sample"
               else {"x": gx.Column((8,), "float32")})
    # A host table's tree is the mapped one; a device table's has a mirror.
    placement = "host" if path == "priority update" else "device"
    with gx.Table(columns, capacity=16, max_length=12, placement=placement) as table:
        for _ in range(16):
            table.insert({n: np.ones((12, *c.shape), c.dtype) for n, c in columns.items()})
        keys = jnp.asarray(table.contents()["key"][:8], jnp.int32)
        strategy = (gx.TopK(4) if path == "host-selected sample"
                    else gx.Prioritized(1.0) if path.startswith("mirrored") else gx.Uniform())
        if path == "staged priority update":  # TopK's heap keeps priorities in host memory
            with on("gpu"):
                table.sample(jax.random.key(0), 2, strategy=gx.TopK(2))
        if path in ("priority update", "mirrored priority update"):  # the tree it keeps
            with on("gpu"):
                jax.block_until_ready(table.sample(jax.random.key(0), 2,
                                                   strategy=gx.Prioritized(1.0)))

        def call(state, key):
            if "priority update" in path:
                return table.update_priorities(state, keys, jnp.ones(8))
            return table.sample(state, key, 4, 10, strategy)

        with on("gpu"):
            step = jax.jit(call)
            state = jax.block_until_ready(step(table.state(), jax.random.key(0)))[0]
            before = _gearjax.cuda_host_work()
            sites = _gearjax.call_site_counts()
            calls = 20
            for i in range(calls):
                state = step(state, jax.random.key(i + 1))[0]
            jax.block_until_ready(state)
        after = _gearjax.cuda_host_work()
    per_call = tuple((after[k] - before[k]) / calls for k in (
        "launches", "copies", "host_functions", "syncs", "scratch_allocations"))
    assert per_call == HOST_WORK_PER_CALL[path]
    # Registered with stages (gearjax/_ffi.py STAGED): the executions found
    # their table through the call site, not the registry.
    assert _ffi.STAGED["CUDA"] is True
    assert _gearjax.call_site_counts() == sites


@pytest.mark.parametrize("placement", ["host", "device"])
@pytest.mark.parametrize("strategy", [gx.Uniform(), gx.Prioritized(0.7)],
                         ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("window", [9, 10])
def test_both_gpu_sample_kernels_equal_the_cpu(placement, strategy, window, rng, tmp_path):
    """Windows of 9 steps of 6912 bytes fit one gather part: the fused kernel
    selects and gathers. 10 steps do not: the select kernel, then the gather
    kernel split over the row (xla_ffi/core/gpu/sample_block.h)."""
    wide = {"frame": gx.Column((48, 48, 3), "uint8", pad=3), "r": gx.Column((), "float32")}
    with gx.Table(wide, capacity=8, max_length=12, placement=placement) as table:
        for length in rng.integers(1, 13, size=10):
            table.insert({"frame": rng.integers(0, 255, (length, 48, 48, 3), np.uint8),
                          "r": rng.normal(size=length).astype(np.float32)},
                         priority=float(rng.uniform(0.5, 2)))
        key = jax.random.key(6)
        reference = reference_table(table, tmp_path)
        with on("gpu"):
            gpu = sample_in_jit(table, key, 33, window, strategy)
        with on("cpu"):
            cpu = sample_in_jit(reference, on_cpu(key), 33, window, strategy)
        for g, c in zip(jax.tree.leaves(gpu), jax.tree.leaves(cpu)):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(c))
        assert table.stats()["samples_in_flight"] == 0


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("cut, replace", [("end", True), ("full", True), ("start", False)])
def test_gpu_sample_modes_equal_cpu_sample_modes(gpu_table, strategy, cut, replace, tmp_path):
    """cut="end" selects on the GPU; "full" and replace=False select on the
    host and gather on the GPU. Either way: what the CPU handler draws."""
    table, _ = gpu_table
    key = jax.random.key(4)
    reference = reference_table(table, tmp_path)
    with on("gpu"):
        gpu = sample_in_jit(table, key, 4, 3, strategy, cut=cut, replace=replace)
    with on("cpu"):
        cpu = sample_in_jit(reference, on_cpu(key), 4, 3, strategy, cut=cut, replace=replace)
    for g, c in zip(jax.tree.leaves(gpu), jax.tree.leaves(cpu)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(c))


@pytest.mark.parametrize("placement", ["host", "device"])
def test_gpu_consume_once_inside_scan(placement):
    table = gx.Table({"x": gx.Column((), "int32")}, capacity=16, max_length=4,
                     placement=placement, max_times_sampled=1)
    keys = {table.insert({"x": np.full(2, i, np.int32)}) for i in range(12)}

    def step(state, k):
        state, batch = table.sample(state, k, 3, 2)
        return state, batch.keys

    @jax.jit
    def drain(state, key):
        return jax.lax.scan(step, state, jax.random.split(key, 4))

    with on("gpu"):
        state, drawn = jax.block_until_ready(drain(table.state(), jax.random.key(0)))
    drawn = np.asarray(drawn).ravel().tolist()
    assert sorted(drawn) == sorted(keys) and len(table) == 0
    table.close()


def test_gpu_scan_with_priority_updates(gpu_table):
    # The state form on the CUDA handlers: the table state in the carry, the
    # result state aliasing the operand in GPU memory; a fresh state per
    # program, and one passed from program to program, both in order.
    table, _ = gpu_table

    def step(state, key):
        state, batch = table.sample(state, key, 1, 1, gx.Prioritized(1.0))
        state, _ = table.update_priorities(state, batch.keys, jnp.zeros(1))
        return state, batch.keys[0]

    with on("gpu"):
        drain = jax.jit(lambda s, ks: jax.lax.scan(step, s, ks))
        half = len(table) // 2
        keys = jax.random.split(jax.random.key(0), len(table))
        state, first = drain(table.state(), keys[:half])
        state, second = drain(state, keys[half:])
        jax.block_until_ready(state)
    visited = np.concatenate([np.asarray(first), np.asarray(second)])
    assert sorted(visited.tolist()) == sorted(table.contents()["key"].tolist())


def test_gpu_threaded_calls_keep_the_fast_dispatch_path(gpu_table, monkeypatch):
    from jax._src.interpreters import pxla
    table, _ = gpu_table
    python_calls = []
    original = pxla.ExecuteReplicated.__call__
    monkeypatch.setattr(pxla.ExecuteReplicated, "__call__",
                        lambda self, *a: (python_calls.append(1), original(self, *a))[1])
    with on("gpu"):
        sample = jax.jit(lambda s, k: table.sample(s, k, 8, 2))
        state = table.state()
        for i in range(20):
            state, batch = sample(state, jax.random.key(i))
        jax.block_until_ready(state)
    assert len(python_calls) <= 3


def test_gpu_priority_updates_count_and_defer_a_bad_value(gpu_table):
    """The CUDA update never waits for the stream: one kernel applies it
    (core/gpu/update_block.h) and writes the count; a bad value changes nothing,
    counts -1 and fails the next call on the table, once."""
    table, _ = gpu_table
    keys = table.contents()["key"]
    update = jax.jit(lambda s, k, p: table.update_priorities(s, k, p))
    with on("gpu"):
        chosen = jnp.asarray(np.array([keys[0], 10**9, keys[1], keys[1]]), jnp.int32)
        state, count = jax.block_until_ready(
            update(table.state(), chosen, jnp.array([2.0, 3.0, 4.0, 0.5])))
        assert int(count) == 3
        before = table.contents()
        assert before["priority"][0] == 2.0 and before["priority"][1] == 0.5
        state, count = jax.block_until_ready(
            update(state, chosen, jnp.array([5.0, 1.0, jnp.nan, 1.0])))
        assert int(count) == -1
        with pytest.raises(ValueError, match="earlier GPU program failed and changed nothing"):
            table.contents()
        np.testing.assert_array_equal(table.contents()["priority"], before["priority"])
        state, count = update(state, chosen, jnp.array([1.0, 1.0, 1.0, 1.0]))
        assert int(count) == 3


@pytest.mark.parametrize("placement", ["host", "device"])
def test_a_gpu_sample_after_updates_in_the_same_program_sees_them(placement):
    """The sample's handler runs before the stream applies the update: from
    all-zero priorities it waits for the stream (TableGpu::WaitsForStagedUpdates);
    to all-zero priorities its kernels return empty rows (docs: Semantics in jit)."""
    table = gx.Table(COLUMNS, capacity=8, max_length=12, placement=placement)
    try:
        keys = sorted(fill(table, np.random.default_rng(1), 4))
        table.update_priorities(np.asarray(keys), np.zeros(len(keys)))
        one = jnp.asarray(np.asarray(keys[:1]), jnp.int32)

        @jax.jit
        def wake_then_sample(state, key):
            state, _ = table.update_priorities(state, one, jnp.ones(1))
            state, batch = table.sample(state, key, 16, 1, gx.Prioritized(1.0))
            return state, batch.keys

        @jax.jit
        def zero_then_sample(state, key):
            state, _ = table.update_priorities(state, one, jnp.zeros(1))
            state, batch = table.sample(state, key, 16, 1, gx.Prioritized(1.0))
            return state, batch.keys, batch.mask

        with on("gpu"):
            state, drawn = wake_then_sample(table.state(), jax.random.key(0))
            assert set(np.asarray(drawn).tolist()) == {keys[0]}
            # Empty rows while the zero is still on the stream; the CPU's
            # error if the stream applied it before the sample began (either
            # class, gearjax/errors.py).
            try:
                _, drawn, mask = jax.block_until_ready(zero_then_sample(state, jax.random.key(1)))
            except (jax.errors.JaxRuntimeError, ValueError) as e:
                assert "priority 0" in str(e)
            else:
                assert np.all(np.asarray(drawn) == -1) and not np.asarray(mask).any()
    finally:
        table.close()


@pytest.mark.parametrize("placement", ["host", "device"])
@pytest.mark.parametrize("staged", [False, True], ids=["kernel", "staged"])
def test_gpu_updates_leave_the_table_as_cpu_updates_do(placement, staged, rng):
    """Records and Prioritized trees after updates applied on the GPU (the
    kernel, or staged where a TopK heap keeps priorities on the host) equal
    those of the same updates on the CPU: the same draws, the same
    probabilities (alphas 1 and 0, whose weights need no pow)."""
    tables = [gx.Table(COLUMNS, capacity=32, max_length=12, placement=p)
              for p in (placement, "host")]
    try:
        for t in tables:
            fill(t, np.random.default_rng(3), 40)  # evicts: stale keys exist
            for alpha in (1.0, 0.0):
                t.sample(jax.random.key(0), 4, strategy=gx.Prioritized(alpha))
            if staged:
                t.sample(jax.random.key(0), 2, strategy=gx.TopK(2))
        live = tables[0].contents()["key"]
        batches = [(rng.choice(np.concatenate([live, [0, 1, 10**9]]), 64),
                    rng.uniform(0, 4, 64)) for _ in range(20)]
        gpu_update = jax.jit(lambda s, k, p: tables[0].update_priorities(s, k, p))
        with on("gpu"):
            state, counts = tables[0].state(), []
            for k, p in batches:
                state, count = gpu_update(state, jnp.asarray(k, jnp.int32),
                                          jnp.asarray(p, jnp.float32))
                counts.append(int(count))
            jax.block_until_ready(state)
        with on("cpu"):
            expected = [tables[1].update_priorities(k, np.float32(p)) for k, p in batches]
        assert counts == expected
        for field in ("priority_updates", "skipped_updates"):
            assert tables[0].stats()[field] == tables[1].stats()[field]
        np.testing.assert_array_equal(tables[0].contents()["priority"],
                                      tables[1].contents()["priority"])
        # Each table sampled where it lives: a table in GPU memory from a
        # program on the GPU (the 2026-11-30 run: on the CPU it is refused).
        devices = ["gpu" if placement == "device" else "cpu", "cpu"]
        for alpha in (1.0, 0.0):
            a, b = (_sampled_on(d, t, alpha) for d, t in zip(devices, tables))
            np.testing.assert_array_equal(np.asarray(a.keys), np.asarray(b.keys))
            np.testing.assert_array_equal(np.asarray(a.probability), np.asarray(b.probability))
    finally:
        for t in tables:
            t.close()


def _sampled_on(device: str, table: gx.Table, alpha: float):
    """128 rows of `table` by Prioritized(alpha), from key 5, on `device`."""
    with on(device):
        return table.sample(jax.random.key(5), 128, strategy=gx.Prioritized(alpha))


@pytest.mark.parametrize("placement", ["host", "device"])
def test_gpu_update_kernels_and_inserting_threads_keep_the_trees_exact(placement):
    """A scan samples and updates on the GPU while threads insert (evicting)
    and update on the host: host writers wait for the kernels in flight
    (Table::OwnPrioritiesLocked), so every tree node stays the sum of its
    children: each drawn key's probability is its priority over the total."""
    with gx.Table(COLUMNS, capacity=64, max_length=12, placement=placement) as table:
        fill(table, np.random.default_rng(4), 64)
        stop, errors = threading.Event(), []

        def actor(seed):
            r = np.random.default_rng(seed)
            try:
                while not stop.is_set():
                    table.insert(random_trajectory(r, COLUMNS, 3), priority=float(r.uniform(0, 3)))
                    keys = table.contents()["key"][:4]
                    table.update_priorities(keys, r.uniform(0, 3, len(keys)))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        @jax.jit
        def steps(state, key):
            def step(state, key):
                state, batch = table.sample(state, key, 32, 1, gx.Prioritized(1.0))
                state, _ = table.update_priorities(state, batch.keys,
                                                   jax.random.uniform(key, (32,), maxval=3.0))
                return state, None
            return jax.lax.scan(step, state, jax.random.split(key, 50))[0]

        threads = [threading.Thread(target=actor, args=(s,)) for s in range(2)]
        for t in threads:
            t.start()
        with on("gpu"):
            state = table.state()
            for i in range(20):
                state = steps(state, jax.random.key(i))
            jax.block_until_ready(state)
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert not errors
        c = table.contents()
        priority = dict(zip(c["key"].tolist(), c["priority"].tolist()))
        if placement == "host":  # a table in GPU memory is sampled on the GPU only
            with on("cpu"):
                batch = table.sample(jax.random.key(99), 256, strategy=gx.Prioritized(1.0))
            expected = [priority[int(k)] / sum(priority.values())
                        for k in np.asarray(batch.keys)]
            np.testing.assert_allclose(np.asarray(batch.probability), expected, rtol=1e-6)
        # The GPU's draws too: on a device table they read the tree's copy in
        # GPU memory (core/gpu/tree_mirror.h), which this call brings up to date.
        with on("gpu"):
            batch = sample_in_jit(table, jax.random.key(98), 256, 1, gx.Prioritized(1.0))
        expected = [priority[int(k)] / sum(priority.values()) for k in np.asarray(batch.keys)]
        np.testing.assert_allclose(np.asarray(batch.probability), expected, rtol=1e-6)
        from gearjax import _gearjax
        if placement == "device" and hasattr(_gearjax, "testing"):
            mirrors = _gearjax.testing.tree_mirrors(table.handle)
            assert len(mirrors) == 1
            for host, mirror in mirrors:
                np.testing.assert_array_equal(mirror.view(np.uint64), host.view(np.uint64))


@pytest.mark.parametrize("placement", ["host", "device"])
def test_gpu_sampling_while_threads_insert_never_tears(placement):
    from test_concurrency import COLUMNS as SELF_DESCRIBING, sample_while_a_thread_inserts

    with gx.Table(SELF_DESCRIBING, capacity=8, max_length=32, placement=placement) as table:
        with on("gpu"):
            sample_while_a_thread_inserts(table, samples=200, min_inserts=3000)


@pytest.mark.parametrize("placement", ["host", "device"])
@pytest.mark.parametrize("strategy", [gx.Uniform(), gx.Prioritized(1.0), gx.TopK(3)])
def test_a_sharded_table_samples_and_updates_through_the_cuda_shard_handlers(placement,
                                                                               strategy):
    """One process, its GPU: the xla exchange's program (totals or best lists,
    rank, plan, serve with the GPU gather, key translation) on CUDA."""
    from jax.sharding import PartitionSpec as P
    from gearjax.sharded.exchange import process_mesh
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=8, max_length=4,
                            placement=placement)
    keys = [table.insert({"x": np.full((i + 1, 2), i, np.int32)}, priority=float(i))
            for i in range(4)]
    batch = table.sample(jax.random.key(0), 64, 2, strategy)
    assert batch.keys.devices() == {jax.devices("gpu")[0]}
    weights = {"Uniform": [1, 1, 1, 1], "Prioritized": [0, 1, 2, 3], "TopK": [0, 1, 1, 1]}[
        type(strategy).__name__]
    total = sum(weights)
    x, mask = np.asarray(batch["x"]), np.asarray(batch.mask)
    for b, key in enumerate(np.asarray(batch.keys).tolist()):
        i = keys.index(key)
        assert weights[i] > 0
        assert float(batch.probability[b]) == pytest.approx(weights[i] / total, rel=1e-6)
        assert (x[b][mask[b]] == i).all()
    assert np.asarray(batch.table_size).tolist() == [4] * 64

    @jax.jit
    def step(rng):
        def body(rng):
            state, b = table.sample(table.state(), rng[0], 16, 2, strategy,
                                    axis_name="gearjax_shards")
            state, count = table.update_priorities(state, b.keys, jnp.full(16, 5.0),
                                                   axis_name="gearjax_shards")
            return count[None]
        return jax.shard_map(body, mesh=process_mesh(), in_specs=P("gearjax_shards"),
                             out_specs=P("gearjax_shards"))(rng[None])  # raw key words [1, 2]

    assert int(step(jax.random.key_data(jax.random.key(1)))[0]) == 16
    assert 5.0 in table.local.contents()["priority"].tolist()
    table.close()


def test_cupy_arrays_in_gpu_memory_insert_and_append():
    """DLPack from GPU memory: through JAX's import, then one copy to the host."""
    cupy = pytest.importorskip("cupy", reason="needs cupy (the gpu extra) on a GPU machine")
    table = gx.Table({"x": gx.Column((2,), "float32")}, capacity=4, max_length=3,
                     placement="host")
    key = table.insert({"x": cupy.arange(6, dtype=cupy.float32).reshape(3, 2)})
    np.testing.assert_array_equal(table.get(key)["x"], np.arange(6).reshape(3, 2))
    writer = table.writer()
    writer.append({"x": cupy.ones(2, dtype=cupy.float32)})
    assert table.get(writer.end_episode())["x"].tolist() == [[1.0, 1.0]]
    table.close()


@pytest.mark.parametrize("ragged", [True, False])
def test_the_xla_exchange_over_every_local_gpu_ragged_and_blocked(ragged):
    """Shards on the local GPUs (one per GPU, gearjax.sharded.local): the
    ragged all-to-all (the GPU default) and the blocked one deliver every row
    its requester asked for, and the owners count what each moved."""
    from gearjax.sharded import keys as keys_of
    from gearjax.sharded import local
    devices = jax.devices("gpu")
    tables = local.shard_tables({"x": gx.Column((2,), "int32")}, capacity=8, max_length=4,
                                shards=len(devices), placement="host")
    shift = keys_of.shard_shift(len(devices))
    owner = {}
    for k, t in enumerate(tables):
        for i in range(3):
            key = t.insert({"x": np.full((i + 1, 2), 10 * k + i, np.int32)})
            owner[(k << shift) | key] = 10 * k + i
    program = local.sample_program(tables, 32, 2, gx.Uniform(), devices=devices, ragged=ragged)
    seeds = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(0), len(devices))))
    batch = program(seeds)
    x, mask = np.asarray(batch["x"]), np.asarray(batch.mask)
    for b, key in enumerate(np.asarray(batch.keys).tolist()):
        assert (x[b][mask[b]] == owner[key]).all()
    served = [t._native.exchange_stats() for t in tables]
    assert sum(s["rows_asked"] for s in served) == 32 * len(devices)
    if ragged:
        assert all(set(s["serves_by_block"]) == {0} for s in served)
        assert all(s["rows_sent"] == s["rows_asked"] for s in served)
    for t in tables:
        t.close()


# ------------------------------------------------------------- error paths
def test_this_builds_kernels_run_on_this_gpu():
    """A kernel without an image for the GPU launches nothing; the handlers
    refuse to run instead (KernelImageProblem), and this says why up front."""
    from gearjax import _gearjax
    assert _gearjax.cuda_kernel_problem(0) == ""
    major, minor = jax.devices("gpu")[0].compute_capability.split(".")
    assert f"{major}{minor}" in _gearjax.cuda_architectures.split(",")


ERROR_PATHS = """
import os
import jax, jax.numpy as jnp, numpy as np
import gearjax as gx
from gearjax import _gearjax
if os.environ.get("GEARJAX_CRASH_REPORT") == "1" and hasattr(_gearjax, "testing"):
    _gearjax.testing.install_crash_report()  # a crash's native frames (conftest.py)

def expect(name, call, match, kind):
    try:
        jax.block_until_ready(call())
    except Exception as e:  # noqa: BLE001
        assert match in str(e), (name, str(e)[:300])
        assert gx.table_error(e) == kind, (name, gx.table_error(e), str(e)[:300])
        print("raised", name, flush=True)
        return
    raise AssertionError(f"{name} did not raise")

for placement in ("host", "device"):
    limited = gx.Table({"x": gx.Column((), "float32")}, 8, 4, placement=placement,
                       rate_limiter=gx.MinSize(5, timeout=0.05))
    limited.insert({"x": np.zeros(2)})
    held = "rate limiter held sampling back"
    expect("eager timeout", lambda: limited.sample(jax.random.key(0), 2, 1), held, "timeout")
    expect("jit timeout", lambda: jax.jit(lambda s, k: limited.sample(s, k, 2, 1))(
        limited.state(), jax.random.key(0)), held, "timeout")
    ratio = gx.Table({"x": gx.Column((), "float32")}, 8, 4, placement=placement,
                     rate_limiter=gx.SampleToInsertRatio(1.0, 1, 1.0, timeout=0.05))
    expect("insert_batch timeout", lambda: jax.jit(lambda s, l: ratio.insert_batch(
        s, {"x": jnp.zeros((4, 2))}, l))(ratio.state(), jnp.array([2, 2, 2, 2])),
           "insert_batch stopped after", "timeout")
    table = gx.Table({"x": gx.Column((), "float32")}, 8, 4, placement=placement)
    expect("empty table", lambda: table.sample(jax.random.key(0), 2, 1), "the table is empty",
           "shortfall")
    keys = jnp.asarray([table.insert({"x": np.zeros(2)}) for _ in range(3)], jnp.int32)
    expect("bad length", lambda: jax.jit(lambda s, l: table.insert_batch(
        s, {"x": jnp.zeros((1, 3))}, l))(table.state(), jnp.array([9])), "nothing was inserted",
           "failed")
    update = jax.jit(lambda s, k, p: table.update_priorities(s, k, p))
    # never fails its program
    assert int(update(table.state(), keys, jnp.array([1.0, jnp.nan, 1.0]))[1]) == -1
    expect("deferred NaN", lambda: table.contents(), "earlier GPU program failed", "failed")
    expect("replace=False shortfall", lambda: table.sample(jax.random.key(1), 5, 1,
                                                         replace=False), "can serve only",
           "shortfall")
    step = jax.jit(lambda s, k: table.sample(s, k, 2, 1))
    state = jax.block_until_ready(step(table.state(), jax.random.key(2)))[0]
    table.close()  # the next call is on JAX's C++ fast path
    expect("closed table, a later call", lambda: step(state, jax.random.key(3)), "is closed",
           "closed")
    limited.close()
    ratio.close()
    print("alive", placement, flush=True)
"""


def test_every_cuda_error_path_raises_its_error_and_the_process_lives(tmp_path):
    """Timeouts (which once crashed the process: DEADLINE_EXCEEDED), an empty
    table, a bad length, a deferred bad priority, a shortfall and a closed
    table, through each CUDA handler, eager and compiled, in a process of its
    own: each raises its error and the process goes on to the end."""
    import os
    import subprocess
    import sys
    from conftest import pythonpath

    script = tmp_path / "error_paths.py"
    script.write_text(ERROR_PATHS)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": pythonpath(),
                                            "XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    out = done.stdout + done.stderr[-12000:]  # room for a crash report's frames
    assert done.returncode == 0, out
    assert "alive host" in out and "alive device" in out, out
    assert out.count("raised ") == 2 * ERROR_PATHS.count("    expect("), out


def test_a_table_the_gpu_cannot_reach_is_refused_and_nothing_faults(native_testing):
    """A table made under the test-only emulated mapping (host memory that
    claims a device address) once reached a kernel: CUDA_ERROR_ILLEGAL_ADDRESS,
    and every later GPU call in the process failed."""
    native_testing.emulate_gpu_mapping(True)
    try:
        emulated = gx.Table(COLUMNS, capacity=4, max_length=4, placement="host")
    finally:
        native_testing.emulate_gpu_mapping(False)
    real = gx.Table(COLUMNS, capacity=4, max_length=4, placement="host")
    try:
        rng = np.random.default_rng(0)
        fill(emulated, rng, 2)
        fill(real, rng, 2)
        with on("gpu"), pytest.raises(Exception, match="not reachable from the GPU"):
            jax.block_until_ready(sample_in_jit(emulated, jax.random.key(0), 2, 1).keys)
        with on("gpu"):  # the context is intact: real tables still sample
            assert sample_in_jit(real, jax.random.key(0), 2, 1).keys.shape == (2,)
        with on("cpu"):  # the CPU handler reads it as host memory, which it is
            assert emulated.sample(on_cpu(jax.random.key(0)), 2, 1).keys.shape == (2,)
    finally:
        emulated.close()
        real.close()


def test_an_eager_gpu_sample_raises_at_the_call():
    """GPU programs report errors when their results are read; an eager table
    call waits for its own, so it raises where it is written, as on the CPU."""
    with gx.Table(COLUMNS, capacity=4, max_length=4) as table, on("gpu"):
        with pytest.raises(Exception, match="the table is empty"):
            table.sample(jax.random.key(0), 2, 1)


def _busy_program(table: gx.Table, keys, seconds: float):
    """A jitted step whose priority update runs only after about `seconds`
    of GPU work (the update's priorities depend on it), calibrated here."""
    def step(state, x, n):
        y = jax.lax.fori_loop(0, n, lambda i, y: jnp.tanh(y @ y), x)
        return table.update_priorities(state, keys, jnp.full(keys.shape, 2.0) + 0 * y[0, 0])

    step = jax.jit(step, static_argnums=2)
    x = jnp.eye(2048, dtype=jnp.float32) * 0.5
    n = 16
    while True:
        state = jax.block_until_ready(step(table.state(), x, n))[0]
        started = time.monotonic()
        jax.block_until_ready(step(state, x, n))
        took = time.monotonic() - started
        if took >= seconds or n >= 1 << 20:
            return lambda state: step(state, x, n), took
        n *= max(2, int(seconds / max(took, 1e-3)))


@pytest.mark.parametrize("tree", [False, True], ids=["no-tree", "prioritized"])
def test_an_insert_does_not_wait_for_a_busy_program_s_priority_update(tree):
    """Issue 48, item 1: an actor's insert right after the learner dispatched
    a step that updates priorities waited for that whole step on the GPU.
    A table without a Prioritized tree stages its updates; one with a tree
    publishes the insert's record at once and leaves its leaves to the next
    update kernel or to the host once none may run (an insert that evicts
    still waits: samples taken before it may read the slot). Either way the
    insert returns while the program still runs, and with a tree the new item
    is then drawn with its exact probability."""
    capacity = 64 if tree else 32  # with a tree, room: the insert evicts nothing
    with on("gpu"), gx.Table({"x": gx.Column((3,), "float32")}, capacity=capacity,
                             max_length=4, placement="host") as table:
        for i in range(40):
            table.insert({"x": np.full((2, 3), i, np.float32)}, priority=1.0)
        if tree:
            table.sample(jax.random.key(0), 8, 1, gx.Prioritized(1.0))  # makes the tree
        keys = jnp.asarray(table.contents()["key"][:8], jnp.int32)
        run, took = _busy_program(table, keys, seconds=1.0)
        assert took >= 1.0, f"the busy program took only {took:.2f} s"
        state, _ = run(table.state())  # dispatched: the GPU works for ~took seconds
        started = time.monotonic()
        new = table.insert({"x": np.ones((2, 3), np.float32)}, priority=5.0)
        waited = time.monotonic() - started
        state = jax.block_until_ready(state)
        assert waited < 0.5 * took, f"the insert waited {waited:.2f} s for a {took:.2f} s program"
        if tree:
            contents = table.contents()
            priority = dict(zip(contents["key"].tolist(), contents["priority"].tolist()))
            state, batch = table.sample(state, jax.random.key(1), 256, 1, gx.Prioritized(1.0))
            drawn = np.asarray(batch.keys).tolist()
            assert new in drawn
            np.testing.assert_allclose(np.asarray(batch.probability),
                                       [priority[k] / sum(priority.values()) for k in drawn],
                                       rtol=1e-6)


def test_a_device_table_with_staged_updates_and_growing_logs_never_deadlocks():
    """Issue 48, item 3: a GPU sample that replaced a mirror's staging list
    freed the old one (cudaFreeHost: waits for the whole GPU) under the
    table's lock, while a staged update's host function queued on the stream
    waited for that lock. The recipe: a device table whose updates are staged
    (remover="min_priority"), Prioritized samples reading the tree's mirror,
    and host inserts between steps that grow the write log past each list.
    A deadlock dumps every thread's stack and ends the process."""
    faulthandler.dump_traceback_later(120, exit=True)
    try:
        with on("gpu"), gx.Table({"x": gx.Column((3,), "float32")}, capacity=16384,
                                 max_length=2, placement="device",
                                 remover="min_priority") as table:
            rng = np.random.default_rng(0)
            for _ in range(256):
                table.insert({"x": np.ones((1, 3), np.float32)}, priority=float(rng.uniform(1, 2)))

            @jax.jit
            def step(state, key):
                state, batch = table.sample(state, key, 64, 1, gx.Prioritized(1.0))
                return table.update_priorities(state, batch.keys, jnp.full(64, 3.0))[0]

            state = table.state()
            for i in range(12):
                state = step(state, jax.random.key(i))  # not waited for
                for _ in range(150 * i):  # a longer log each time
                    table.insert({"x": np.ones((1, 3), np.float32)},
                                 priority=float(rng.uniform(1, 2)))
            jax.block_until_ready(state)
            assert table.stats()["priority_updates"] > 0
    finally:
        faulthandler.cancel_dump_traceback_later()
