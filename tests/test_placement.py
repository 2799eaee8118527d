"""Placement: where a table's bytes live ("host", "device", "auto").

Every machine runs the "device" paths in emulated GPU memory whose
addresses the host cannot dereference (see conftest.emulated_gpu_memory), so
every host read and write of a device table is proven to go through the core's
copy hooks. The GPU kernels' reads of device tables are emulated with the
kernel's own block code and compared with the CPU handler on a host table."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx
from gearjax import _gearjax
from gearjax.table import AUTO_DEVICE_FRACTION
from reference import assert_emulated_gpu_sample_equals, random_trajectory

COLUMNS = {
    "obs": gx.Column((5,), "float32"),
    "rgb": gx.Column((3,), "uint8", pad=7),       # 3-byte steps, unaligned
    "reward": gx.Column((), "float64", pad=-1.5),
}
TABLE_BYTES = 8 * 10 * (20 + 3 + 8)  # capacity x max_length x bytes per step
needs_no_gpu = pytest.mark.skipif(_gearjax.cuda_memory, reason="checks the behaviour without a GPU")
# What stats()["memory"] says of a host table here: pinned and GPU-mapped
# where a GPU is usable (docs: Placement).
HOST_MEMORY = "gpu-mapped pinned host" if _gearjax.cuda_memory else "host"


def twin_tables(placement_b: str, count: int = 14):
    """Two tables with the same contents: one on the host, one at placement_b."""
    rng = np.random.default_rng(3)
    a = gx.Table(COLUMNS, capacity=8, max_length=10, placement="host")
    b = gx.Table(COLUMNS, capacity=8, max_length=10, placement=placement_b)
    for length in rng.integers(1, 11, size=count):  # evicts
        trajectory = random_trajectory(rng, COLUMNS, int(length))
        priority = float(rng.uniform(0.1, 2))
        assert a.insert(trajectory, priority) == b.insert(trajectory, priority)
    return a, b


@needs_no_gpu
def test_device_placement_without_a_gpu_is_refused():
    with pytest.raises(ValueError, match="placement='device' needs a GPU"):
        gx.Table(COLUMNS, capacity=4, max_length=4, placement="device")


@needs_no_gpu
def test_auto_placement_without_a_gpu_is_host_memory():
    with gx.Table(COLUMNS, capacity=4, max_length=4) as table:
        assert table.placement == "auto"
        assert table.stats()["memory"] == "host"


def test_host_placement_is_never_gpu_memory(emulated_gpu_memory):
    with gx.Table(COLUMNS, capacity=4, max_length=4, placement="host") as table:
        assert table.stats()["memory"] == HOST_MEMORY


@pytest.mark.parametrize("free, expected", [
    (int(TABLE_BYTES / AUTO_DEVICE_FRACTION), "device"),       # exactly the fraction
    (int(TABLE_BYTES / AUTO_DEVICE_FRACTION) - 1, HOST_MEMORY),  # one byte short
    (0, HOST_MEMORY),
])
def test_auto_placement_compares_the_table_with_free_gpu_memory(emulated_gpu_memory, free,
                                                                 expected):
    emulated_gpu_memory.emulate_device_memory(True, free_bytes=free)
    with gx.Table(COLUMNS, capacity=8, max_length=10) as table:
        assert table.stats()["memory"] == expected


def test_device_table_stores_and_returns_exactly_what_was_inserted(emulated_gpu_memory):
    host, device = twin_tables("device")
    assert device.stats()["memory"] == "device"
    np.testing.assert_equal(device.contents(), host.contents())
    for key in host.contents()["key"]:
        np.testing.assert_equal(device.get(int(key)), host.get(int(key)))
    assert device.stats()["bytes_used"] == host.stats()["bytes_used"]


def test_device_table_checkpoint_round_trip_and_placement_override(emulated_gpu_memory, tmp_path):
    host, device = twin_tables("device")
    device.save(tmp_path / "d.gx")
    host.save(tmp_path / "h.gx")
    for placement in (None, "host"):
        loaded = gx.Table.load(tmp_path / "d.gx", placement=placement)
        assert loaded.placement == ("device" if placement is None else "host")
        assert loaded.stats()["memory"] == ("device" if placement is None else HOST_MEMORY)
        np.testing.assert_equal(loaded.contents(), host.contents())
        for key in host.contents()["key"]:
            np.testing.assert_equal(loaded.get(int(key)), host.get(int(key)))
    moved = gx.Table.load(tmp_path / "h.gx", placement="device")
    assert moved.stats()["memory"] == "device"
    np.testing.assert_equal(moved.contents(), host.contents())
    with pytest.raises(ValueError, match="placement must be one of"):
        gx.Table.load(tmp_path / "h.gx", placement="gpu")


@pytest.mark.parametrize("strategy", [gx.Uniform(), gx.Timestep(), gx.Prioritized(0.5),
                                      gx.TopK(3), gx.Recent(4)], ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("window, pad", [(4, "left"), (None, "right")])
def test_gpu_gather_from_a_device_table_equals_the_cpu_handler_on_the_host(
        emulated_gpu_memory, strategy, window, pad):
    host, device = twin_tables("device")
    key = jax.random.key(11)
    batch = host.sample(key, 16, window, strategy, pad)
    assert_emulated_gpu_sample_equals(device, key, batch, strategy, window, pad, threads=5)


def test_cpu_programs_refuse_device_tables_clearly(emulated_gpu_memory):
    _, device = twin_tables("device", count=3)
    before = device.stats()
    with pytest.raises(Exception, match="lives in GPU memory.*sample it from a program on the GPU"):
        device.sample(jax.random.key(0), 4, 2)
    with jax.enable_x64(True):  # the float64 column needs 64-bit JAX arrays
        with pytest.raises(Exception, match="lives in GPU memory.*insert_batch from a program"):
            jax.block_until_ready(device.insert_batch(
                {"obs": jnp.zeros((1, 2, 5), jnp.float32), "rgb": jnp.zeros((1, 2, 3), jnp.uint8),
                 "reward": jnp.zeros((1, 2), jnp.float64)}, jnp.array([2])))
    after = device.stats()
    for field in ("size", "inserts", "samples", "pinned_slots", "next_sequence"):
        assert after[field] == before[field], field


def test_a_failed_copy_into_a_device_table_changes_nothing(emulated_gpu_memory):
    host, device = twin_tables("device", count=5)  # capacity 8: three free slots
    for filled in (5, 8):  # with free slots, then full (the insert would evict)
        while len(device) < filled:
            trajectory = random_trajectory(np.random.default_rng(len(device)), COLUMNS, 4)
            host.insert(trajectory)
            device.insert(trajectory)
        contents, free = device.contents(), device._native.free_slots()
        emulated_gpu_memory.emulate_device_memory(True, free_bytes=1 << 30, copies_fail=True)
        try:
            with pytest.raises(RuntimeError, match="emulated GPU copy failure"):
                device.insert(random_trajectory(np.random.default_rng(99), COLUMNS, 3))
        finally:
            emulated_gpu_memory.emulate_device_memory(True, free_bytes=1 << 30)
        stats = device.stats()
        assert stats["writers_in_flight"] == 0 and stats["pinned_slots"] == 0
        if filled < 8:  # nothing was evicted: the table is exactly as before
            np.testing.assert_equal(device.contents(), contents)
            assert device._native.free_slots() == free
        else:  # the evicted trajectory stays evicted; its slot is free again
            assert len(device) == 7
            assert device._native.free_slots() != []
        # the table keeps working, and keys are not reused
        key = device.insert(random_trajectory(np.random.default_rng(7), COLUMNS, 2))
        assert key >> device.slot_bits == stats["next_sequence"]
        host.insert(random_trajectory(np.random.default_rng(7), COLUMNS, 2))
        np.testing.assert_equal(device.get(key), host.get(key))


def test_a_device_table_goes_on_jax_s_default_gpu_not_the_thread_s_current_one(
        emulated_gpu_memory, monkeypatch):
    """Issue 48, item 8: a device table was allocated on the calling thread's
    current CUDA device, which JAX's default device (``jax.default_device``)
    need not be. It goes on the GPU gearjax.table._default_gpu names (four
    emulated GPUs here), its copies run with that GPU current, and the
    thread's current GPU is left as it was."""
    native = emulated_gpu_memory
    monkeypatch.setattr(gx.table, "_default_gpu", lambda: 2)
    native.emulated_gpu_log()  # start afresh
    with gx.Table(COLUMNS, capacity=8, max_length=4, placement="device") as table:
        made = native.emulated_gpu_log()
        assert ("allocate", 2) in made and ("allocate", 0) not in made, made
        assert made[-1] == ("current", 0)  # this thread's GPU left as it was
        trajectory = random_trajectory(np.random.default_rng(0), COLUMNS, 3)
        key = table.insert(trajectory)
        got = table.get(key)
        np.testing.assert_array_equal(got["obs"], trajectory["obs"])
        used = native.emulated_gpu_log()
        copies = [gpu for what, gpu in used if what.startswith("copy")]
        assert copies and set(copies) == {2}, used
        assert used[-1] == ("current", 0)


def test_without_a_jax_gpu_the_default_gpu_is_the_current_one():
    assert gx.table._default_gpu() == (-1 if not jax.devices()[0].platform == "gpu" else
                                       jax.devices()[0].local_hardware_id)
