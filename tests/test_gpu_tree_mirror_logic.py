"""Sum trees' copies in GPU memory for device tables (xla_ffi/core/gpu/tree_mirror.h),
run on the CPU: a device table's Timestep and Prioritized GPU draws and GPU
priority updates read the tree's mirror, which each GPU call first brings up
to date with a copy of the nodes the host wrote since the last (the whole
tree the first time). The emulated kernels (selection, fused sample, update,
copy) run on the CPU with the mirror in emulated GPU memory; after every GPU
call the mirror must equal the host tree bit for bit, and every GPU sample
of the device table must equal the CPU handler's sample of a host twin (the
same writes) for the same key, whatever inserts, evictions, host updates and
GPU updates came between."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest

import gearjax as gx
from reference import assert_emulated_gpu_sample_equals

COLUMNS = {"x": gx.Column((3,), "float32")}

# The kernels' code runs on the CPU beside the CPU handler, on any machine.
pytestmark = pytest.mark.usefixtures("cpu_device")


@pytest.fixture
def device_mapping(emulated_gpu_memory):
    """Device tables (emulated GPU memory) whose selection state is
    GPU-mapped (emulated), as on a machine with a GPU."""
    emulated_gpu_memory.emulate_gpu_mapping(True)
    try:
        yield emulated_gpu_memory
    finally:
        emulated_gpu_memory.emulate_gpu_mapping(False)


def make_table(native, placement="device", capacity=24, inserts=30, seed=0) -> gx.Table:
    table = gx.Table(COLUMNS, capacity=capacity, max_length=6, placement=placement)
    rng = np.random.default_rng(seed)
    for i in range(inserts):  # evicts the first ones
        table.insert({"x": rng.standard_normal((1 + i % 6, 3)).astype(np.float32)},
                     priority=0.0 if i % 7 == 0 else float(rng.uniform(0.1, 4)))
    native.use_gpu_completions(table.handle)
    return table


def assert_mirrors_equal_trees(native, table, expected_trees):
    trees = native.tree_mirrors(table.handle)
    assert len(trees) == expected_trees
    for host, mirror in trees:
        np.testing.assert_array_equal(mirror.view(np.uint64), host.view(np.uint64))


def gpu_sample_equals_cpu(native, device, host, strategy, seed):
    """The device table's fused GPU sample (emulated) equals the host twin's
    CPU sample for the same key."""
    key = jax.random.key(seed)
    batch = host.sample(key, 16, 4, strategy)
    assert_emulated_gpu_sample_equals(device, key, batch, strategy, 4, "left", 8, fused=True)


def keys_of(table):
    return np.asarray(table.contents()["key"], np.int64)


@pytest.fixture
def twins(device_mapping):
    """A device table and a host table given the same writes."""
    device = make_table(device_mapping)
    host = make_table(device_mapping, placement="host")
    yield device, host
    device.close()
    host.close()


@pytest.mark.parametrize("strategy", [gx.Timestep(), gx.Prioritized(0.6)],
                         ids=lambda s: type(s).__name__)
def test_gpu_draws_equal_the_cpu_handler_through_every_kind_of_write(device_mapping, twins,
                                                                     strategy):
    native, (device, host) = device_mapping, twins
    assert native.tree_mirrors(device.handle) == []  # made by the first GPU call
    gpu_sample_equals_cpu(native, device, host, strategy, 0)
    assert_mirrors_equal_trees(native, device, 1)
    rng = np.random.default_rng(1)
    for step in range(12):
        kind = step % 4
        if kind == 0:  # inserts, evicting
            for _ in range(3):
                length, priority = int(rng.integers(1, 7)), float(rng.uniform(0, 3))
                for table in (device, host):
                    table.insert({"x": np.ones((length, 3), np.float32)}, priority=priority)
        elif kind == 1:  # host updates
            keys, priorities = rng.choice(keys_of(host), 5), rng.uniform(0, 3, 5)
            for table in (device, host):
                table.update_priorities(keys, priorities)
        elif kind == 2:  # a GPU update on the device table: a kernel where it has a
            # Prioritized tree, else staged (as the CUDA handler stages it)
            keys, priorities = rng.choice(keys_of(host), 9), rng.uniform(0, 3, 9)
            pending = native.begin_gpu_update(device.handle, keys, priorities)
            assert (pending is None) == isinstance(strategy, gx.Timestep)
            count = (native.staged_update(device.handle, keys, priorities) if pending is None
                     else pending.run(16))
            assert count == host.update_priorities(keys, priorities)
        # kind 3: nothing written, nothing to copy
        gpu_sample_equals_cpu(native, device, host, strategy, step + 1)
        assert_mirrors_equal_trees(native, device, 1)


def test_the_update_kernel_writes_mirror_and_host_tree(device_mapping, twins):
    native, (device, host) = device_mapping, twins
    gpu_sample_equals_cpu(native, device, host, gx.Prioritized(1.0), 0)
    gpu_sample_equals_cpu(native, device, host, gx.Prioritized(0.5), 0)
    keys = keys_of(host)
    for table in (device, host):
        table.update_priorities(keys[:4], np.full(4, 2.5))  # logged, not yet copied
    trees = native.tree_mirrors(device.handle)
    assert any((h != m).any() for h, m in trees), "a host write reached the mirror without a copy"
    priorities = np.linspace(0, 5, len(keys[::2]))
    pending = native.begin_gpu_update(device.handle, keys[::2], priorities)
    assert pending.run(7) == host.update_priorities(keys[::2], priorities)
    # The copy ran first, then the kernel wrote both copies of both trees.
    assert_mirrors_equal_trees(native, device, 2)
    gpu_sample_equals_cpu(native, device, host, gx.Prioritized(1.0), 1)
    gpu_sample_equals_cpu(native, device, host, gx.Prioritized(0.5), 2)


@pytest.mark.parametrize("who", ["next kernel", "host"])
def test_leaves_an_insert_deferred_reach_mirror_and_tree(device_mapping, who):
    """An insert that evicts nothing while an update kernel may run defers its
    Prioritized leaves (test_gpu_update_deferred_leaves.py): the next kernel
    writes them into both copies of the tree, or the next GPU sample sets them
    on the host and copies them into the mirror. Either way the device
    table's GPU draws equal its host twin's, whose insert wrote its leaves."""
    native = device_mapping
    device = make_table(native, capacity=48, inserts=20)
    host = make_table(native, placement="host", capacity=48, inserts=20)
    try:
        gpu_sample_equals_cpu(native, device, host, gx.Prioritized(1.0), 0)  # the mirror
        keys = keys_of(host)
        first = native.begin_gpu_update(device.handle, keys[:4], np.full(4, 2.0))
        for table in (device, host):  # the device table's does not wait: it evicts nothing
            table.insert({"x": np.ones((2, 3), np.float32)}, priority=3.0)
        updates = [(keys[:4], np.full(4, 2.0))]
        if who == "next kernel":
            second = native.begin_gpu_update(device.handle, keys[4:6], np.array([1.0, 1.5]))
            updates.append((keys[4:6], np.array([1.0, 1.5])))
        assert first.run(8) == 4
        if who == "next kernel":
            assert second.run(8) == 2
            assert_mirrors_equal_trees(native, device, 1)  # the kernel wrote both copies
        for k, p in updates:
            host.update_priorities(k, p)
        gpu_sample_equals_cpu(native, device, host, gx.Prioritized(1.0), 1)
        assert_mirrors_equal_trees(native, device, 1)
    finally:
        device.close()
        host.close()


def test_host_tables_and_unmapped_device_tables_have_no_mirror(device_mapping):
    native = device_mapping
    with make_table(native, placement="host") as table:
        gpu_sample_equals_cpu(native, table, table, gx.Prioritized(1.0), 0)
        assert native.tree_mirrors(table.handle) == []
    native.emulate_gpu_mapping(False)  # selection state in plain memory: no GPU kernel reads it
    with gx.Table(COLUMNS, capacity=4, max_length=6, placement="device") as table:
        table.insert({"x": np.ones((2, 3), np.float32)})
        with pytest.raises(ValueError, match="not GPU-mapped"):
            native.emulate_fused_gpu_sample(table.handle, (1, 2), 2, gx.Timestep().code, 0.0,
                                            2, True, 4)
        assert native.tree_mirrors(table.handle) == []


def test_a_log_past_its_limit_copies_the_whole_tree(device_mapping, twins):
    native, (device, host) = device_mapping, twins
    gpu_sample_equals_cpu(native, device, host, gx.Timestep(), 0)
    for i in range(10):  # more nodes written than an eighth of the tree's
        for table in (device, host):
            table.insert({"x": np.ones((1 + i % 6, 3), np.float32)})
    gpu_sample_equals_cpu(native, device, host, gx.Timestep(), 1)
    assert_mirrors_equal_trees(native, device, 1)


def test_writers_and_gpu_calls_together_leave_mirror_equal_to_tree(device_mapping):
    """Actors insert and update on the host while a learner runs GPU samples
    and GPU updates: once everyone stops, one more GPU call brings the
    mirrors exactly to the host trees, and the GPU draws' probabilities are
    each key's weight over the total the records give."""
    native = device_mapping
    with make_table(native, capacity=48, inserts=48) as table:
        strategies = [gx.Prioritized(1.0), gx.Timestep()]
        for strategy in strategies:
            native.emulate_fused_gpu_sample(table.handle, (0, 1), 8, strategy.code,
                                            strategy.alpha, 2, True, 4)
        errors: list[BaseException] = []
        stop = threading.Event()

        def actor(seed):
            rng = np.random.default_rng(seed)
            try:
                while not stop.is_set():
                    table.insert({"x": np.ones((2, 3), np.float32)},
                                 priority=float(rng.uniform(0, 3)))
                    table.update_priorities(keys_of(table)[:3], rng.uniform(0, 3, 3))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        actors = [threading.Thread(target=actor, args=(s,)) for s in range(2)]
        for t in actors:
            t.start()
        rng = np.random.default_rng(5)
        for i in range(120):
            if i % 2:
                keys = rng.choice(keys_of(table), 16)
                pending = native.begin_gpu_update(table.handle, keys, rng.uniform(0, 3, 16))
                pending.run(int(rng.integers(1, 32)))
            else:
                strategy = strategies[i % 4 // 2]
                native.emulate_fused_gpu_sample(table.handle, (i, 7), 8, strategy.code,
                                                strategy.alpha, 2, True, 4)
        stop.set()
        for t in actors:
            t.join(timeout=60)
        assert not errors
        contents = table.contents()
        weights = {"Prioritized": dict(zip(contents["key"].tolist(), contents["priority"])),
                   "Timestep": dict(zip(contents["key"].tolist(), contents["length"]))}
        for strategy in strategies:
            keys, _, probability, *_ = native.emulate_fused_gpu_sample(
                table.handle, (3, 4), 64, strategy.code, strategy.alpha, 2, True, 4)
            w = weights[type(strategy).__name__]
            total = sum(float(v) for v in w.values())
            expected = np.array([float(w[int(k)]) / total for k in keys])
            # float32 probabilities; a stale node would be off by a whole weight
            np.testing.assert_allclose(probability, expected, rtol=1e-6)
        assert_mirrors_equal_trees(native, table, 2)


def test_a_mirror_takes_the_gpu_memory_the_placement_page_states(device_mapping):
    """docs/concepts/placement.md: about 9.1 bytes a slot a tree, 35 MiB for
    one tree of 4 million slots."""
    native = device_mapping
    with gx.Table({"x": gx.Column((), "uint8")}, capacity=4_000_000, max_length=1,
                  placement="device") as table:
        table.insert({"x": np.ones(1, np.uint8)})
        native.use_gpu_completions(table.handle)
        native.emulate_fused_gpu_sample(table.handle, (0, 1), 1, gx.Timestep().code, 0.0, 1,
                                        True, 1)
        (host, mirror), = native.tree_mirrors(table.handle)
        assert mirror.nbytes == host.nbytes
        assert 9.1 <= mirror.nbytes / 4_000_000 < 9.2
        assert round(mirror.nbytes / 2**20) == 35


def test_an_update_waits_for_a_copy_in_flight_on_another_stream(device_mapping):
    """A copy into the mirrors enqueued on another stream could write, with
    the host's older value, a node the update kernel writes: the update
    waits until that copy's sample has ended (TableGpu::BeginUpdate)."""
    native = device_mapping
    with make_table(native) as table:
        ticket = native.begin_gpu_sample(table.handle, 4, gx.Prioritized(1.0).code, alpha=1.0,
                                         stream=2)  # copies the whole tree: in flight
        keys = keys_of(table)[:3]
        begun = []
        t = threading.Thread(target=lambda: begun.append(
            native.begin_gpu_update(table.handle, keys, np.ones(3), 1)))
        t.start()
        t.join(timeout=0.3)
        assert t.is_alive(), "the update began while another stream's copy was in flight"
        native.end_gpu_sample(table.handle, ticket)
        t.join(timeout=10)
        assert not t.is_alive()
        assert begun[0].run(4) == 3
        assert_mirrors_equal_trees(native, table, 1)
        # On its own stream nothing waits.
        ticket = native.begin_gpu_sample(table.handle, 4, gx.Prioritized(1.0).code, alpha=1.0,
                                         stream=1)
        native.begin_gpu_update(table.handle, keys, np.ones(3), 1).run(4)
        native.end_gpu_sample(table.handle, ticket)


def test_a_sample_on_another_stream_reads_the_host_tree_while_a_copy_may_run(device_mapping):
    """Issue 48, item 5: a copy into the mirror enqueued on one stream is not
    ordered before a kernel on another; on first use the mirror holds nothing
    yet. While such a copy may still run, another stream's sample reads the
    mapped host tree instead (and asks for no copy); its own stream, and any
    stream once the copy's sample has ended, read the mirror."""
    native = device_mapping
    with make_table(native) as table:
        first, copies, mirror = native.begin_gpu_sample_on(table.handle, 1, 1.0)
        assert copies == 1 and mirror  # the whole tree, the first time
        other, copies, mirror = native.begin_gpu_sample_on(table.handle, 2, 1.0)
        assert (copies, mirror) == (0, False), "read a mirror another stream may still write"
        native.end_gpu_sample(table.handle, other)
        same, copies, mirror = native.begin_gpu_sample_on(table.handle, 1, 1.0)
        assert mirror  # ordered behind the copy on its own stream
        native.end_gpu_sample(table.handle, same)
        native.end_gpu_sample(table.handle, first)
        other, copies, mirror = native.begin_gpu_sample_on(table.handle, 2, 1.0)
        assert mirror  # the copy has ended
        native.end_gpu_sample(table.handle, other)
        assert_mirrors_equal_trees(native, table, 1)


def test_no_pinned_memory_is_freed_under_the_table_lock(emulated_gpu_memory):
    """Issue 48, item 3: freeing pinned memory (cudaFreeHost) waits for the
    whole GPU, where a staged update's host function may wait for the table's
    lock: a GPU sample that replaces a staging list too small for its copy
    must free the old one only after releasing the lock. Each free of the
    tables' mapped memory here asks for the table's lock from another thread
    first (emulate_gpu_mapping_probing_frees)."""
    native = emulated_gpu_memory
    native.emulate_gpu_mapping_probing_frees(True)
    try:
        with gx.Table(COLUMNS, capacity=16384, max_length=2, placement="device") as table:
            for i in range(64):
                table.insert({"x": np.ones((1, 3), np.float32)}, priority=1.0 + i)
            native.use_gpu_completions(table.handle)
            native.watch_frees(table.handle)
            code = gx.Prioritized(1.0).code
            # The mirror, copied whole; then a small log: a staging list of
            # 1024 nodes; then a log of ~2,000 nodes: a larger list replaces it.
            for inserts in (0, 8, 1400):
                for i in range(inserts):
                    table.insert({"x": np.ones((1, 3), np.float32)}, priority=2.0 + i % 5)
                ticket = native.begin_gpu_sample(table.handle, 4, code, alpha=1.0, stream=1)
                native.end_gpu_sample(table.handle, ticket)
            assert_mirrors_equal_trees(native, table, 1)
            assert native.frees_under_lock() == 0
    finally:
        native.emulate_gpu_mapping_probing_frees(False)
