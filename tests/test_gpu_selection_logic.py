"""GPU-side selection and its slot protocol, run on the CPU: tables made under
the test-only emulate_gpu_mapping keep their selection state at "device"
addresses that are host addresses, so the GPU selection's row code
(core/gpu/select_block.h) and the ticket protocol that replaces pins for GPU
samples run here."""

from __future__ import annotations

import threading
import time

import jax
import numpy as np
import pytest

import gearjax as gx
from gearjax._sample import seed_words  # the sample's Philox seed
from reference import random_trajectory

COLUMNS = {"x": gx.Column((3,), "float32"), "r": gx.Column((), "int32")}


# Emulated tables are sampled by the CPU handler, on any machine.
pytestmark = pytest.mark.usefixtures("cpu_device")


@pytest.fixture
def mapped_table(emulated_mapping):
    table = gx.Table(COLUMNS, capacity=16, max_length=20, placement="host")
    rng = np.random.default_rng(0)
    for length in rng.integers(1, 21, size=24):  # evicts 8
        table.insert(random_trajectory(rng, COLUMNS, int(length)), priority=float(rng.uniform(0, 3)))
    yield table
    table.close()


def assert_gpu_selects_as_cpu(table, native_testing, key, strategy, window, cut) -> gx.Batch:
    """The kernel's selection code (emulated) against the CPU handler's sample
    of 256 rows with the same key: keys, starts, real steps, probabilities,
    table sizes and the slots' lengths. Returns the CPU's batch."""
    batch = table.sample(key, 256, window, strategy, cut=cut)
    seed = np.asarray(seed_words(key))
    keys, start, probability, table_size, slots, lengths, valid = \
        native_testing.emulate_gpu_select(table.handle, (int(seed[0]), int(seed[1])), 256,
                                          strategy.code, strategy.alpha, 0, window or 0,
                                          cut=gx.table.CUTS[cut])
    np.testing.assert_array_equal(keys, batch.keys)
    np.testing.assert_array_equal(start, batch.start)
    np.testing.assert_array_equal(valid, np.asarray(batch.mask).sum(1))
    np.testing.assert_array_equal(probability, batch.probability)
    np.testing.assert_array_equal(table_size, batch.table_size)
    contents = table.contents()
    np.testing.assert_array_equal(lengths, contents["length"][np.searchsorted(contents["key"], keys)])
    return batch


@pytest.mark.parametrize("strategy", [gx.Uniform(), gx.Timestep(), gx.Prioritized(0.5),
                                      gx.Prioritized(1.0)], ids=repr)
@pytest.mark.parametrize("window, cut", [(None, "start"), (1, "start"), (7, "start"),
                                         (1, "end"), (7, "end")])
def test_gpu_selection_equals_cpu_selection(mapped_table, native_testing, strategy, window, cut):
    assert_gpu_selects_as_cpu(mapped_table, native_testing, jax.random.key(11), strategy, window,
                              cut)


@pytest.mark.parametrize("window, cut", [(1, "start"), (7, "start"), (1, "end"), (7, "end")])
@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_gpu_selection_of_steps_equals_cpu_selection(emulated_mapping, native_testing, window,
                                                     cut, alpha):
    """PrioritizedSteps on the GPU: the kernel descends the step tree (a leaf
    per step) and places each window at its drawn step, exactly as the host
    does; rows never land on a step of priority 0."""
    table = gx.Table(COLUMNS, capacity=16, max_length=20, placement="host",
                     step_priorities=True)
    rng = np.random.default_rng(3)
    for length in rng.integers(1, 21, size=24):  # evicts 8
        steps = rng.uniform(0, 3, int(length)) * (rng.uniform(size=int(length)) > 0.3)
        table.insert(random_trajectory(rng, COLUMNS, int(length)), priority=steps)
    batch = assert_gpu_selects_as_cpu(table, native_testing, jax.random.key(12),
                                      gx.PrioritizedSteps(alpha), window, cut)
    contents = table.contents()
    per_key = dict(zip(contents["key"].tolist(),
                       np.split(contents["step_priorities"], np.cumsum(contents["length"])[:-1])))
    drawn = np.asarray(batch.start) if cut == "start" else \
        np.asarray(batch.start) + np.asarray(batch.mask).sum(1) - 1
    assert all(per_key[int(k)][int(t)] > 0 for k, t in zip(np.asarray(batch.keys), drawn))
    table.close()


def test_topk_and_recent_are_not_selected_on_the_gpu(mapped_table, native_testing):
    with pytest.raises(ValueError, match="not selected on the GPU"):
        native_testing.begin_gpu_sample(mapped_table.handle, 4, gx.TopK(2).code, count=2)
    assert mapped_table.stats()["samples_in_flight"] == 0


@pytest.mark.parametrize("cut, replace", [(2, True), (0, False)])
def test_full_windows_and_no_replacement_are_not_selected_on_the_gpu(mapped_table,
                                                                     native_testing, cut,
                                                                     replace):
    with pytest.raises(ValueError, match="not selected on the GPU"):
        native_testing.begin_gpu_sample(mapped_table.handle, 4, gx.Uniform().code, cut=cut,
                                        replace=replace)
    assert mapped_table.stats()["samples_in_flight"] == 0


def test_tables_without_gpu_mapping_refuse_gpu_samples(native_testing):
    native_testing.hide_gpu_mapping(True)  # as on a machine without a GPU
    try:
        table = gx.Table(COLUMNS, capacity=2, max_length=2, placement="host")
    finally:
        native_testing.hide_gpu_mapping(False)
    with table:
        table.insert({"x": np.zeros((1, 3)), "r": np.zeros(1, np.int32)})
        with pytest.raises(ValueError, match="not GPU-mapped"):
            native_testing.begin_gpu_sample(table.handle, 1, 0)


def insert_in_thread(table):
    done = threading.Event()

    def run():
        table.insert({"x": np.ones((2, 3)), "r": np.ones(2, np.int32)})
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


def test_a_writer_waits_for_gpu_samples_enqueued_before_its_eviction(mapped_table,
                                                                      native_testing):
    ticket = native_testing.begin_gpu_sample(mapped_table.handle, 8, 0)
    done = insert_in_thread(mapped_table)  # the table is full: this evicts
    assert not done.wait(0.3), "the writer overwrote a slot a GPU sample may still read"
    native_testing.end_gpu_sample(mapped_table.handle, ticket)
    assert done.wait(10)
    assert mapped_table.stats()["samples_in_flight"] == 0


def test_later_gpu_samples_do_not_hold_a_writer_back(mapped_table, native_testing):
    handle = mapped_table.handle
    first = native_testing.begin_gpu_sample(handle, 8, 0)
    done = insert_in_thread(mapped_table)
    time.sleep(0.1)  # the writer has evicted and waits for `first`
    later = native_testing.begin_gpu_sample(handle, 8, 0)  # no longer sees the evicted slot
    native_testing.end_gpu_sample(handle, first)
    assert done.wait(10), "a sample enqueued after the eviction held the writer back"
    native_testing.end_gpu_sample(handle, later)


def test_gpu_samples_count_for_the_rate_limiter(emulated_mapping):
    testing = emulated_mapping
    with gx.Table(COLUMNS, 4, 4, rate_limiter=gx.MinSize(2, timeout=0.1),
                  placement="host") as table:
        table.insert({"x": np.zeros((1, 3)), "r": np.zeros(1, np.int32)})
        with pytest.raises(TimeoutError, match="min_size=2"):
            testing.begin_gpu_sample(table.handle, 4, 0)
        table.insert({"x": np.zeros((1, 3)), "r": np.zeros(1, np.int32)})
        ticket = testing.begin_gpu_sample(table.handle, 4, 0)
        assert table.stats()["samples"] == 4
        testing.end_gpu_sample(table.handle, ticket)
