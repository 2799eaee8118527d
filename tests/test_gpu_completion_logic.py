"""GPU samples hand their tickets back through the table's completion ring
(xla_ffi/core/gpu/gpu_completions.h), run on the CPU: the CUDA handler hands a
sample's ticket to the device once its kernels are enqueued, and the gather
kernel's last block writes it into the ring; nothing else goes on the stream.
The test-only hooks do each step by hand (hand_to_device, kernel_report:
the kernel's own block code, CompleteBlock) or as the handler does
(emulate_gpu_sample with device_completion). A writer must not reuse a slot
before the ring says so, a ticket must not take a ring place an earlier
ticket still needs, and close must wait for the ring."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest

import gearjax as gx
from reference import assert_emulated_gpu_sample_equals, random_trajectory

COLUMNS = {"x": gx.Column((3,), "float32"), "r": gx.Column((), "int32")}
RING = 4096  # GpuCompletions::kSize

# The protocol's logic runs on the CPU, on any machine.
pytestmark = pytest.mark.usefixtures("cpu_device")


@pytest.fixture
def full_table(emulated_mapping):
    """A full table (the next insert evicts) with its completion ring."""
    table = gx.Table(COLUMNS, capacity=8, max_length=6, placement="host")
    rng = np.random.default_rng(0)
    for length in rng.integers(1, 7, size=10):
        table.insert(random_trajectory(rng, COLUMNS, int(length)))
    emulated_mapping.use_gpu_completions(table.handle)
    yield table
    table.close()


def insert_in_thread(table) -> threading.Event:
    done = threading.Event()

    def run():
        table.insert({"x": np.ones((2, 3)), "r": np.ones(2, np.int32)})
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


def test_a_writer_waits_until_the_last_block_reports_the_sample(full_table, native_testing):
    handle = full_table.handle
    ticket = native_testing.begin_gpu_sample(handle, 8, gx.Uniform().code)
    native_testing.hand_to_device(handle, ticket)  # the kernels are enqueued
    assert native_testing.tickets_on_device(handle) == 1
    done = insert_in_thread(full_table)  # evicts: must wait for the sample
    assert not done.wait(0.3), "the writer overwrote a slot a GPU sample may still read"
    report = native_testing.kernel_report(handle, ticket, 3)  # a kernel of three blocks
    report(2)  # two of them done
    assert native_testing.completion_ring(handle, ticket)[:2] == (0, 2)
    assert not done.wait(0.2), "the writer went on before the kernel's last block"
    report(1)  # the last: writes the ticket
    assert done.wait(10), "the ring's report did not release the writer"
    # The place holds the ticket, and its block count is back at 0 for the next.
    assert native_testing.completion_ring(handle, ticket) == (ticket, 0, RING)
    assert native_testing.tickets_on_device(handle) == 0
    assert full_table.stats()["samples_in_flight"] == 0


def test_the_emulated_handler_returns_its_ticket_through_the_ring(emulated_mapping):
    rng = np.random.default_rng(1)
    with gx.Table(COLUMNS, capacity=12, max_length=9, placement="host") as table:
        for length in rng.integers(1, 10, size=14):
            table.insert(random_trajectory(rng, COLUMNS, int(length)), priority=1.0 + length)
        emulated_mapping.use_gpu_completions(table.handle)
        for strategy in (gx.Uniform(), gx.Prioritized(0.5), gx.TopK(3)):
            key = jax.random.key(3)
            batch = table.sample(key, 16, 5, strategy)
            # Byte for byte what the CPU handler drew, and the ticket came
            # back through the ring, written by the gather's last block.
            assert_emulated_gpu_sample_equals(table, key, batch, strategy, 5, "left", 7,
                                              device_completion=True)
            assert emulated_mapping.tickets_on_device(table.handle) == 0
            assert table.stats()["samples_in_flight"] == 0


def test_a_stale_report_in_the_place_never_counts(full_table, native_testing):
    handle = full_table.handle
    first = native_testing.begin_gpu_sample(handle, 1, gx.Uniform().code)
    native_testing.hand_to_device(handle, first)
    native_testing.kernel_report(handle, first, 1)(1)
    for _ in range(RING - 1):  # returned by hand, as the CPU handler's are
        native_testing.end_gpu_sample(handle, native_testing.begin_gpu_sample(handle, 1, 0))
    again = native_testing.begin_gpu_sample(handle, 1, gx.Uniform().code)
    assert again == first + RING  # the same place, which still holds `first`
    native_testing.hand_to_device(handle, again)
    assert native_testing.completion_ring(handle, again)[0] == first
    assert native_testing.tickets_on_device(handle) == 1, "an older ticket passed for this one"
    native_testing.kernel_report(handle, again, 1)(1)
    assert native_testing.tickets_on_device(handle) == 0


def test_a_ticket_waits_for_an_earlier_one_in_its_place(full_table, native_testing):
    handle = full_table.handle
    first = native_testing.begin_gpu_sample(handle, 1, gx.Uniform().code)
    native_testing.hand_to_device(handle, first)  # its kernel has not run
    for _ in range(RING - 1):
        native_testing.end_gpu_sample(handle, native_testing.begin_gpu_sample(handle, 1, 0))
    taken = []
    thread = threading.Thread(
        target=lambda: taken.append(native_testing.begin_gpu_sample(handle, 1, 0)), daemon=True)
    thread.start()
    thread.join(0.3)
    assert not taken, "a ticket took a ring place an earlier sample still reports into"
    native_testing.kernel_report(handle, first, 1)(1)
    thread.join(10)
    assert taken == [first + RING]
    native_testing.end_gpu_sample(handle, taken[0])


def test_close_waits_for_the_ring(full_table, native_testing):
    handle = full_table.handle
    ticket = native_testing.begin_gpu_sample(handle, 4, gx.Uniform().code)
    native_testing.hand_to_device(handle, ticket)
    report = native_testing.kernel_report(handle, ticket, 1)  # the kernel got its view
    closed = threading.Event()
    threading.Thread(target=lambda: (full_table.close(), closed.set()), daemon=True).start()
    assert not closed.wait(0.3), "close freed memory a GPU sample may still read"
    report(1)
    assert closed.wait(10)


def test_tickets_returned_by_hand_still_come_back(full_table, native_testing):
    """A handler whose launch failed returns its ticket itself (after waiting
    for its stream): the ring is not needed then."""
    handle = full_table.handle
    ticket = native_testing.begin_gpu_sample(handle, 4, gx.Uniform().code)
    done = insert_in_thread(full_table)
    assert not done.wait(0.2)
    native_testing.end_gpu_sample(handle, ticket)
    assert done.wait(10)
    assert native_testing.tickets_on_device(handle) == 0


def test_the_hooks_refuse_what_has_no_ring(native_testing):
    with gx.Table(COLUMNS, capacity=4, max_length=2) as table:
        with pytest.raises(ValueError, match="no GPU completion ring"):
            native_testing.kernel_report(table.handle, 1, 1)
        native_testing.use_gpu_completions(table.handle)
        with pytest.raises(ValueError, match="0 <= blocks <= of"):
            native_testing.kernel_report(table.handle, 1, 1)(2)
