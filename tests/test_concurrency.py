"""Concurrency stress: Python threads insert (evicting constantly) and update
priorities while jit-compiled code samples. Every trajectory describes itself
(each value encodes its trajectory id and step), so a torn window (half old,
half new data) or a window of the wrong trajectory is detected."""

from __future__ import annotations

import threading
import time

import jax
import numpy as np
import pytest

import gearjax as gx

WIDTH = 64  # payload values per step
PAD = -1
COLUMNS = {"id": gx.Column((), "int32", pad=PAD), "payload": gx.Column((WIDTH,), "int32", pad=PAD)}
MAX_LENGTH = 32


MAX_ID = (2**31 - 1) // MAX_LENGTH  # every payload value fits int32


def payload_of(traj_id, step):
    """The value every payload entry of a step holds: id and step in one int32."""
    return traj_id * MAX_LENGTH + step


def trajectory(traj_id: int, length: int) -> dict:
    if not 0 <= traj_id <= MAX_ID:
        raise ValueError(f"trajectory ids go up to {MAX_ID}, got {traj_id}")
    steps = np.arange(length, dtype=np.int64)
    return {"id": np.full(length, traj_id, np.int32),
            "payload": np.repeat(payload_of(traj_id, steps).astype(np.int32)[:, None], WIDTH, axis=1)}


def check_rows(batch: dict, window: int) -> list[tuple[int, int]]:
    """Checks every row is one consistent window; returns (key, id) pairs."""
    pairs = []
    for b in range(len(batch["keys"])):
        mask, timestep = batch["mask"][b], batch["timestep"][b]
        ids, payload = batch["id"][b], batch["payload"][b]
        real = np.flatnonzero(mask)
        assert len(real) >= 1
        traj_id = int(ids[real[0]])
        assert (ids[real] == traj_id).all(), f"row {b} mixes trajectories: {ids}"
        np.testing.assert_array_equal(timestep[real], batch["start"][b] + np.arange(len(real)))
        expected = payload_of(traj_id, timestep[real])
        assert (payload[real] == expected[:, None]).all(), f"row {b} is torn"
        assert (ids[~mask] == PAD).all() and (payload[~mask] == PAD).all()
        pairs.append((int(batch["keys"][b]), traj_id))
    return pairs


# Between two inserts (or priority updates) of the busy threads below: without
# it, threads that release and retake the GIL in a tight loop starve the
# sampling thread (measured on the 2-core VM: 0.5 s per sample), while with it
# they still insert thousands of trajectories a second into 8 slots.
PAUSE = 0.0002


def test_sampling_never_sees_torn_or_foreign_windows():
    table = gx.Table(COLUMNS, capacity=8, max_length=MAX_LENGTH, remover="fifo")
    rng = np.random.default_rng(0)
    key_to_id = {table.insert(trajectory(i, int(rng.integers(1, MAX_LENGTH + 1)))): i
                 for i in range(8)}
    lock = threading.Lock()
    stop = threading.Event()
    errors = []

    def inserter(thread_index: int):
        local = np.random.default_rng(thread_index + 1)
        n = 0
        try:
            while not stop.is_set():
                traj_id = (thread_index + 1) * 100_000 + n
                key = table.insert(trajectory(traj_id, int(local.integers(1, MAX_LENGTH + 1))),
                                   priority=float(local.uniform(0.1, 2)))
                with lock:
                    key_to_id[key] = traj_id
                n += 1
                time.sleep(PAUSE)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def prioritizer():
        local = np.random.default_rng(99)
        try:
            while not stop.is_set():
                keys = table.contents()["key"]
                table.update_priorities(keys, local.uniform(0, 3, len(keys)))
                time.sleep(PAUSE)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    window = 8
    samplers = {  # the taught form, a fresh table state in each program
        "uniform": jax.jit(lambda k: table.sample(table.state(), k, 64, window, gx.Uniform(),
                                                  pad="right")[1]),
        "prioritized": jax.jit(lambda k: table.sample(table.state(), k, 64, window,
                                                      gx.Prioritized(1.0))[1]),
        "recent": jax.jit(lambda k: table.sample(table.state(), k, 64, window, gx.Recent(3))[1]),
    }
    threads = [threading.Thread(target=inserter, args=(i,)) for i in range(2)]
    threads.append(threading.Thread(target=prioritizer))
    for t in threads:
        t.start()
    pairs, batches = [], 0
    # At least 4 s of churn and 31 batches: on a busy 2-core machine the
    # inserting threads can hold the GIL for most of those 4 s.
    start = time.monotonic()
    key = jax.random.key(0)
    try:
        while (time.monotonic() < start + 4.0 or batches <= 30) and \
                time.monotonic() < start + 120.0:
            for sample in samplers.values():
                key, sub = jax.random.split(key)
                b = sample(sub)
                host = {name: np.asarray(b[name]) for name in COLUMNS}
                host.update(keys=np.asarray(b.keys), start=np.asarray(b.start),
                            mask=np.asarray(b.mask), timestep=np.asarray(b.timestep))
                pairs += check_rows(host, window)
                batches += 1
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    stats = table.stats()
    assert stats["evictions"] > 100, "the test must churn the table to mean anything"
    assert batches > 30
    for key, traj_id in pairs:  # each key names the trajectory inserted under it
        assert key_to_id[key] == traj_id
    assert stats["pinned_slots"] == 0 and stats["writers_in_flight"] == 0
    table.close()


def sample_while_a_thread_inserts(table: gx.Table, samples: int, min_inserts: int,
                                  first_id: int = 100_000) -> int:
    """Samples `samples` batches with a jitted sample on JAX's default device
    while a Python thread inserts (evicting) trajectories with ids from
    `first_id` on until both are done, checking every row; returns the inserts
    made. Shared with test_gpu.py, which runs it on the GPU, where the inserter
    once made 2 million inserts during 200 samples and overflowed the
    payload's int32 (ids above 2,147,483 with the earlier encoding)."""
    for i in range(table.capacity):
        table.insert(trajectory(i, MAX_LENGTH))
    stop, errors, inserted = threading.Event(), [], [0]

    def inserter():
        try:
            while not stop.is_set() or inserted[0] < min_inserts:
                table.insert(trajectory(first_id + inserted[0] % (MAX_ID + 1 - first_id),  # ids cycle
                                        inserted[0] % MAX_LENGTH + 1))
                inserted[0] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    thread = threading.Thread(target=inserter)
    thread.start()
    sample = jax.jit(lambda s, k: table.sample(s, k, 256, 8, gx.Uniform(), pad="right"))
    state = table.state()
    try:
        for i in range(samples):
            state, b = sample(state, jax.random.key(i))
            host = {name: np.asarray(b[name]) for name in COLUMNS}
            host.update(keys=np.asarray(b.keys), start=np.asarray(b.start),
                        mask=np.asarray(b.mask), timestep=np.asarray(b.timestep))
            check_rows(host, 8)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    return inserted[0]


def test_sampling_while_a_thread_inserts_millions_of_ids_never_tears():
    with gx.Table(COLUMNS, capacity=8, max_length=MAX_LENGTH) as table:
        # Ids as high as a fast GPU run reaches (and far beyond): up to MAX_ID.
        assert sample_while_a_thread_inserts(table, samples=20, min_inserts=3000,
                                             first_id=MAX_ID - 3000) >= 3000
    assert payload_of(MAX_ID, MAX_LENGTH - 1) <= 2**31 - 1 < payload_of(MAX_ID + 1, 0)
    with pytest.raises(ValueError, match="ids go up to"):
        trajectory(MAX_ID + 1, 1)


def test_inserts_of_many_threads_get_unique_increasing_keys():
    table = gx.Table(COLUMNS, capacity=4, max_length=MAX_LENGTH)
    results = [[] for _ in range(4)]

    def worker(i):
        for n in range(200):
            results[i].append(table.insert(trajectory(i, 3)))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_keys = sorted(k for r in results for k in r)
    assert [k >> table.slot_bits for k in all_keys] == list(range(800))  # unique, no gaps
    for r in results:  # each thread sees its own keys increase
        assert r == sorted(r)
    assert len(table) == 4 and table.stats()["evictions"] == 796
    table.close()


def test_insert_releases_the_gil_while_it_copies():
    """A Python thread keeps running while the main thread copies a ~256 MB
    trajectory in; with the GIL held it could not record a single tick until
    the copy ended."""
    steps, step_shape = 64, (1024, 1024)  # 4 MiB a step, 256 MiB in all
    table = gx.Table({"x": gx.Column(step_shape, "float32")}, capacity=1, max_length=steps)
    data = np.ones((steps, *step_shape), np.float32)
    table.insert({"x": data[:1]})  # fault the slot's first pages in outside the timing
    ticks, stop = [], threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())

    thread = threading.Thread(target=ticker)
    thread.start()
    time.sleep(0.05)
    start = time.perf_counter()
    table.insert({"x": data})
    end = time.perf_counter()
    stop.set()
    thread.join()
    table.close()
    margin = 0.25 * (end - start)  # leave out the Python-side checks at either end
    inside = [t for t in ticks if start + margin < t < end - margin]
    assert len(inside) > 100, f"{len(inside)} ticks during a {end - start:.3f} s insert"
