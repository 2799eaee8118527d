"""GPU priority updates, run on the CPU: the CUDA handler stages a program's
keys and priorities in pinned host memory and applies them in a stream
callback, without waiting for the stream (xla_ffi/core/gpu/staged_update.h). The
test-only ``staged_update`` does exactly what that handler and its host
functions do, with memcpy for the copies. It must update like the host path,
and a bad value, which the callback cannot raise in its own program, must
change nothing, count -1 and be raised once by the next call on the table."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest

import gearjax as gx

COLUMNS = {"x": gx.Column((), "float32")}
DEFERRED = "a priority update from an earlier GPU program failed and changed nothing"


# The GPU's staged update run by hand on the CPU, on any machine.
pytestmark = pytest.mark.usefixtures("cpu_device")


@pytest.fixture
def table():
    t = gx.Table(COLUMNS, capacity=16, max_length=4, placement="host")
    for i in range(12):
        t.insert({"x": np.zeros(2, np.float32)}, priority=1.0 + i)
    yield t
    t.close()


def priorities(table: gx.Table) -> dict[int, float]:
    c = table.contents()
    return dict(zip(c["key"].tolist(), c["priority"].tolist()))


@pytest.mark.parametrize("key_dtype", [np.int32, np.uint32, np.int64])
@pytest.mark.parametrize("priority_dtype", [np.float32, np.float64])
def test_a_staged_update_equals_the_host_update(table, native_testing, key_dtype,
                                                priority_dtype):
    keys = table.contents()["key"]
    # Stale and unknown keys are skipped; a repeated key's last value wins;
    # a float32 subnormal stays a positive priority.
    chosen = np.array([keys[0], 999, keys[3], keys[3], keys[5]], key_dtype)
    new = np.array([2.5, 7.0, 3.0, 0.0, np.finfo(np.float32).smallest_subnormal], priority_dtype)
    twin = gx.Table(COLUMNS, capacity=16, max_length=4)
    try:
        for p in table.contents()["priority"]:
            twin.insert({"x": np.zeros(2, np.float32)}, priority=float(p))
        expected_count = twin.update_priorities(chosen.astype(np.int64), new)
        count = native_testing.staged_update(table.handle, chosen, new)
        assert count == expected_count == 4
        assert list(priorities(table).values()) == twin.contents()["priority"].tolist()
        assert priorities(table)[int(keys[5])] > 0
        assert table.stats()["priority_updates"] == 4
    finally:
        twin.close()


@pytest.mark.parametrize("bad", [np.nan, -1.0, np.inf, 1e31, 1e-320])
def test_a_bad_value_changes_nothing_counts_minus_one_and_is_raised_once(table, native_testing,
                                                                         bad):
    before = priorities(table)
    keys = np.array(list(before)[:3], np.int64)
    count = native_testing.staged_update(table.handle, keys, np.array([5.0, bad, 6.0]))
    assert count == -1
    with pytest.raises(ValueError, match=DEFERRED) as raised:
        table.contents()
    assert "entry 1" in str(raised.value)
    assert gx.table_error(raised.value) == "failed"
    assert priorities(table) == before  # raised once; the good entries were not applied either
    assert table.stats()["priority_updates"] == 0


def test_the_next_program_on_the_table_raises_it(table, native_testing):
    @jax.jit
    def sample(state, key):
        state, batch = table.sample(state, key, 4)
        return state, batch.keys

    # traced and compiled now: the FFI handler raises it below
    state, _ = jax.block_until_ready(sample(table.state(), jax.random.key(0)))
    native_testing.staged_update(table.handle, np.array([0], np.int64), np.array([np.nan]))
    # A later call: JAX's fast path may carry it as ValueError (gearjax/errors.py).
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match=DEFERRED) as raised:
        jax.block_until_ready(sample(state, jax.random.key(0)))
    assert gx.table_error(raised.value) == "failed"
    state, keys = sample(state, jax.random.key(0))
    assert keys.shape == (4,)  # once only


def test_the_next_host_call_or_gpu_update_raises_it(table, native_testing):
    zero = np.array([0], np.int64)
    assert native_testing.staged_update(table.handle, zero, np.array([-1.0])) == -1
    with pytest.raises(ValueError, match=DEFERRED):
        table.insert({"x": np.zeros(1, np.float32)})
    assert len(table) == 12  # the insert did not happen
    assert native_testing.staged_update(table.handle, zero, np.array([-2.0])) == -1
    with pytest.raises(ValueError, match=DEFERRED + ": entry 0 is -2"):
        native_testing.staged_update(table.handle, zero, np.array([3.0]))  # not applied
    table.insert({"x": np.zeros(1, np.float32)})
    assert len(table) == 13
    # Failures queued before any call looks (GPU updates enqueued back to back)
    # are reported together: xla_ffi/core/gpu/staged_update_test.cc.


def test_bad_types_and_sizes_fail_at_once(table, native_testing):
    keys = np.array([0, 1], np.int64)
    with pytest.raises(ValueError, match="keys must be"):
        native_testing.staged_update(table.handle, keys.astype(np.int16), np.ones(2))
    with pytest.raises(ValueError, match="priorities must be"):
        native_testing.staged_update(table.handle, keys, np.ones(2, np.float16))
    with pytest.raises(ValueError, match="differ in size"):
        native_testing.staged_update(table.handle, keys, np.ones(3))
    table.contents()  # nothing deferred


def test_a_closed_table_fails_at_once(table, native_testing):
    handle = table.handle
    table.close()
    with pytest.raises(RuntimeError, match="closed"):
        native_testing.staged_update(handle, np.array([0], np.int64), np.ones(1))


def test_staged_updates_from_threads_alongside_inserts_and_samples(table, native_testing):
    """Stream callbacks run on the driver's threads while the learner samples
    and actors insert: every staged update is applied whole and counted."""
    keys = table.contents()["key"]
    errors: list[BaseException] = []
    counts: list[int] = []
    stop = threading.Event()

    def update(value: float):
        try:
            for _ in range(200):
                counts.append(native_testing.staged_update(
                    table.handle, keys.astype(np.int32), np.full(len(keys), value, np.float32)))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def insert():
        try:
            while not stop.is_set():
                table.insert({"x": np.zeros(3, np.float32)}, priority=1.0)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    sample = jax.jit(lambda s, k: table.sample(s, k, 8, strategy=gx.Prioritized(1.0)))
    state = table.state()
    threads = [threading.Thread(target=update, args=(v,)) for v in (2.0, 3.0)]
    threads.append(threading.Thread(target=insert))
    for t in threads:
        t.start()
    for i in range(50):
        state, batch = sample(state, jax.random.key(i))
        assert batch.keys.shape == (8,)
    for t in threads[:2]:
        t.join(timeout=60)
    stop.set()
    threads[2].join(timeout=60)
    assert not errors
    # Inserts evict (FIFO), so later updates find fewer of the keys alive.
    assert len(counts) == 400 and all(0 <= c <= len(keys) for c in counts)
    assert table.stats()["priority_updates"] == sum(counts)
