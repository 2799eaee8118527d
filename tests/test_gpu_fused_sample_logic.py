"""The fused GPU sample kernel's logic, run on the CPU: where every column's
window fits one gather part, a Uniform, Timestep or Prioritized sample is one
kernel whose blocks each select their row once on the GPU and copy all of it
(xla_ffi/core/gpu/sample_block.h, emulated block by block and thread by thread).
It must produce exactly what the CPU handler produces for the same seed,
across alignments, windows, pad sides and cuts, and hand its ticket back
through the completion ring; rows too wide for one part are not fused."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import gearjax as gx
from reference import assert_emulated_gpu_sample_equals, random_trajectory

COLUMNS = {
    "obs": gx.Column((17,), "float32"),               # 68-byte steps
    "rgb": gx.Column((3,), "uint8", pad=7),           # 3-byte steps: unaligned
    "frame": gx.Column((16, 16, 3), "uint8", pad=1),  # 768-byte steps
    "reward": gx.Column((), "float64", pad=-1.5),     # 8-byte steps
}
STRATEGIES = [gx.Uniform(), gx.Timestep(), gx.Prioritized(0.5)]

# The kernel's code runs on the CPU beside the CPU handler, on any machine.
pytestmark = pytest.mark.usefixtures("cpu_device")


@pytest.fixture
def table(native_testing):
    native_testing.emulate_gpu_mapping(True)  # TableGpu::BeginSample needs mapped selection state
    try:
        rng = np.random.default_rng(0)
        t = gx.Table(COLUMNS, capacity=12, max_length=30, placement="host")
        for length in rng.integers(1, 31, size=16):  # evicts 4
            t.insert(random_trajectory(rng, COLUMNS, int(length)),
                     priority=float(rng.uniform(0.1, 2)))
        native_testing.use_gpu_completions(t.handle)
        yield t
        t.close()
    finally:
        native_testing.emulate_gpu_mapping(False)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("window, pad, cut", [(1, "left", "start"), (11, "left", "start"),
                                              (11, "right", "start"), (None, "left", "start"),
                                              (7, "left", "end"), (13, "left", "end")])
@pytest.mark.parametrize("threads", [1, 7, 256])
def test_the_fused_kernel_equals_the_cpu_handler(table, strategy, window, pad, cut, threads):
    key = jax.random.key(11)
    batch = table.sample(key, 24, window, strategy, pad, cut=cut)
    assert_emulated_gpu_sample_equals(table, key, batch, strategy, window, pad, threads, cut,
                                      fused=True)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: type(s).__name__)
def test_the_fused_kernel_hands_its_ticket_back_through_the_ring(table, strategy,
                                                                 native_testing):
    key = jax.random.key(12)
    batch = table.sample(key, 9, 5, strategy)
    assert_emulated_gpu_sample_equals(table, key, batch, strategy, 5, "left", 32,
                                      device_completion=True, fused=True)
    assert native_testing.tickets_on_device(table.handle) == 0
    assert table.stats()["samples_in_flight"] == 0


def test_rows_wider_than_one_part_are_not_fused(native_testing):
    native_testing.emulate_gpu_mapping(True)
    try:
        wide = {"frame": gx.Column((48, 48, 3), "uint8")}  # 6912 bytes a step
        with gx.Table(wide, capacity=2, max_length=10, placement="host") as t:
            t.insert({"frame": np.zeros((10, 48, 48, 3), np.uint8)})
            # 9 steps: 62,208 bytes, one part; 10 steps: 69,120 bytes, two.
            native_testing.emulate_fused_gpu_sample(t.handle, (1, 2), 2, 0, 0.0, 9, True, 4)
            with pytest.raises(ValueError, match="would not fuse"):
                native_testing.emulate_fused_gpu_sample(t.handle, (1, 2), 2, 0, 0.0, 10, True, 4)
            assert t.stats()["samples_in_flight"] == 0
    finally:
        native_testing.emulate_gpu_mapping(False)
