"""The GPU gather kernel's logic, run on the CPU: the kernel's block code
(xla_ffi/core/gpu/gather_block.h, emulated block by block and thread by thread)
must produce exactly what the CPU handler produces for the same seed, across
alignments (3-byte steps force byte copies, 68-byte steps 4-byte words),
rows split over several blocks, both pad sides and every strategy."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import gearjax as gx
from reference import assert_emulated_gpu_sample_equals, random_trajectory

COLUMNS = {
    "obs": gx.Column((17,), "float32"),                     # 68-byte steps
    "rgb": gx.Column((3,), "uint8", pad=7),                 # 3-byte steps: unaligned
    "frame": gx.Column((48, 48, 3), "uint8", pad=1),        # 6912-byte steps: multi-block rows
    "reward": gx.Column((), "float64", pad=-1.5),           # 8-byte steps
}
STRATEGIES = [gx.Uniform(), gx.Timestep(), gx.Prioritized(0.5), gx.TopK(3), gx.Recent(4)]


# The kernel's code runs on the CPU beside the CPU handler, on any machine: a
# host table, sampled on the CPU device.
pytestmark = pytest.mark.usefixtures("cpu_device")


@pytest.fixture(scope="module")
def table():
    rng = np.random.default_rng(0)
    t = gx.Table(COLUMNS, capacity=12, max_length=30, placement="host")
    for length in rng.integers(1, 31, size=16):  # evicts 4
        t.insert(random_trajectory(rng, COLUMNS, int(length)), priority=float(rng.uniform(0, 2)))
    yield t
    t.close()


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("window, pad", [(1, "left"), (11, "left"), (11, "right"), (None, "left"),
                                         (None, "right")])
@pytest.mark.parametrize("threads", [1, 7, 256])
def test_emulated_gpu_gather_equals_the_cpu_handler(table, strategy, window, pad, threads,
                                                    native_testing):
    key = jax.random.key(5)
    batch = table.sample(key, 24, window, strategy, pad)
    assert_emulated_gpu_sample_equals(table, key, batch, strategy, window, pad, threads)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("cut, replace", [("end", True), ("full", True), ("start", False),
                                          ("full", False)])
def test_emulated_gpu_gather_of_every_cut_and_replace_mode(table, strategy, cut, replace,
                                                           native_testing):
    """What the CUDA handler runs for these modes: the host selection (cut
    "full" and replace=False select on the host, cut "end" also on the GPU:
    see test_gpu_selection_logic.py) and the GPU gather's block code."""
    key = jax.random.key(8)
    batch_size = 3 if isinstance(strategy, (gx.TopK, gx.Recent)) or not replace else 24
    batch = table.sample(key, batch_size, 6, strategy, cut=cut, replace=replace)
    assert_emulated_gpu_sample_equals(table, key, batch, strategy, 6, "left", 7, cut, replace)


def test_rows_longer_than_one_block_are_split(table, native_testing):
    # 30 steps x 6912 bytes = 207 KB per row: four 64 KiB blocks per window.
    keys, *_, columns = native_testing.emulate_gpu_sample(table.handle, (1, 2), 2, 0, 0.0, 0, 0,
                                                          True, 3)
    assert columns[2].shape == (2, 30 * 6912)
    assert len(keys) == 2


def test_more_columns_than_the_gpu_gather_handles_is_refused_and_pins_nothing(native_testing):
    many = {f"c{i}": gx.Column((), "float32") for i in range(33)}
    with gx.Table(many, capacity=2, max_length=2) as t:
        t.insert({name: np.zeros(1) for name in many})
        with pytest.raises(ValueError, match="at most 32 columns"):
            native_testing.emulate_gpu_sample(t.handle, (0, 0), 1, 0, 0.0, 0, 1, True, 1)
        assert t.stats()["pinned_slots"] == 0
        t.insert({name: np.zeros(1) for name in many})  # slots are free to reuse
