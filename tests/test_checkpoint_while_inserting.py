"""Checkpoints saved while other threads insert: each save captures one moment
(items, counters and free slots agree), loads, and holds only whole
trajectories; a checkpoint that would not load never replaces the previous one."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import gearjax as gx
from gearjax import checkpoint

COLUMNS = {"x": gx.Column((4,), "float32")}


def _trajectory(ident: int, length: int) -> dict[str, np.ndarray]:
    """Every step holds `ident`, and the priority says it too: a loaded item is
    whole when its steps and priority agree."""
    return {"x": np.full((length, 4), ident, np.float32)}


def _priority(ident: int) -> float:
    return 1.0 + ident


class _Inserters:
    """Threads inserting through every path a trajectory enters by (insert,
    insert_step, a writer) until stopped; each thread draws its own lengths
    from a fixed seed."""

    def __init__(self, table: gx.Table, threads: int, seed: int):
        self.table, self.stop, self.errors = table, threading.Event(), []
        self.threads = [threading.Thread(target=self._run, args=(i, seed + i), daemon=True)
                        for i in range(threads)]

    def _run(self, index: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        ident = index * 1_000_000  # exact in float32 (below 2**24)
        try:
            while not self.stop.is_set():
                ident += 1
                kind = index % 3
                if kind == 0:
                    length = int(rng.integers(1, 16))
                    self.table.insert(_trajectory(ident, length), priority=_priority(ident))
                elif kind == 1:
                    self.table.insert_step({"x": np.full(4, ident, np.float32)},
                                           priority=_priority(ident))
                else:
                    with self.table.writer() as w:
                        for _ in range(int(rng.integers(1, 16))):
                            w.append({"x": np.full(4, ident, np.float32)})
                        w.end_episode(priority=_priority(ident))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)

    def __enter__(self) -> "_Inserters":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
        assert not self.errors, self.errors


def _check_loaded(path, capacity: int) -> None:
    loaded = gx.Table.load(path)
    try:
        stats = loaded.stats()
        assert stats["size"] <= capacity
        contents = loaded.contents()
        assert np.all(np.diff(contents["key"]) > 0)
        assert contents["key"].size == 0 or \
            contents["key"][-1] >> (capacity - 1).bit_length() < stats["next_sequence"]
        rng = np.random.default_rng(0)
        checked = rng.permutation(contents["key"].size)[:64]  # get() costs; 64 a load
        for key, priority in zip(contents["key"][checked], contents["priority"][checked]):
            steps = loaded.get(int(key))["x"]
            ident = steps[0, 0]
            assert np.all(steps == ident), "a torn trajectory was saved"
            assert priority == _priority(int(ident)), "a priority from another moment"
    finally:
        loaded.close()


@pytest.mark.parametrize("capacity, threads, saves", [(64, 9, 30), (4096, 3, 10)])
def test_saves_while_threads_insert_all_load_whole(tmp_path, capacity, threads, saves):
    """Fails before one-moment snapshots: the items, counters and free slots were
    read in three calls, and 18 of 30 such checkpoints of a full capacity-64
    table did not load. The checkpoints are loaded once the threads stop: a
    load beside nine threads looping in Python waits for the GIL at each of
    its reads (seconds a load), and only the saves race."""
    table = gx.Table(COLUMNS, capacity, 16, remover="fifo")
    paths = [tmp_path / f"replay-{i}.gx" for i in range(saves)]
    with _Inserters(table, threads, seed=45):
        for path in paths:
            table.save(path)
    assert table.stats()["pinned_slots"] == 0
    table.close()
    for path in paths:
        _check_loaded(path, capacity)


class _TornSnapshot:
    """A native table whose snapshot lost a free slot, as the three-call save
    could: what the file holds disagrees with itself."""

    def __init__(self, native):
        self._native = native

    def pin_snapshot(self):
        items, counters, free_slots, step_priorities = self._native.pin_snapshot()
        return items, counters, free_slots[:-1], step_priorities

    def __getattr__(self, name):
        return getattr(self._native, name)


def test_a_checkpoint_that_does_not_load_replaces_nothing(tmp_path):
    table = gx.Table(COLUMNS, 8, 16)
    table.insert(_trajectory(1, 3), priority=_priority(1))
    path = tmp_path / "replay.gx"
    table.save(path)
    before = path.read_bytes()
    table.insert(_trajectory(2, 3), priority=_priority(2))
    header = table._checkpoint_header()
    with pytest.raises(gx.CheckpointError, match="just written does not load.*free_slots"):
        checkpoint.save(_TornSnapshot(table._native), header, path)
    assert path.read_bytes() == before  # the good checkpoint stays
    assert [p.name for p in tmp_path.iterdir()] == ["replay.gx"]  # no temporary left
    assert table.stats()["pinned_slots"] == 0
    table.close()


class _Updater:
    """A thread updating every stored trajectory's priority (whole
    trajectories: each one's steps all take it) until stopped; each round
    gives each a new value."""

    def __init__(self, table: gx.Table, keys: np.ndarray):
        self.table, self.keys = table, keys
        self.stop, self.errors, self.rounds = threading.Event(), [], 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rng = np.random.default_rng(46)
        try:
            while not self.stop.is_set():
                self.table.update_priorities(self.keys, rng.uniform(0.5, 9.0, self.keys.size))
                self.rounds += 1
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)

    def __enter__(self) -> "_Updater":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.errors, self.errors


def test_saves_of_step_priorities_while_a_thread_updates_them_all_load(tmp_path):
    """Fails when the step priorities are read after the items' snapshot (one
    slot at a time, another hold of the lock each): an update in between left
    an item's saved priority other than the largest of its saved steps', the
    check before the rename refused the file, and 9 of 10 saves of such a
    table raised CheckpointError while a learner updated priorities."""
    table = gx.Table(COLUMNS, 4096, 16, step_priorities=True, placement="host")
    keys = np.asarray([table.insert(_trajectory(i, 1 + i % 16)) for i in range(4096)])
    paths = [tmp_path / f"steps-{i}.gx" for i in range(10)]
    with _Updater(table, keys) as updater:
        for path in paths:
            table.save(path)
            contents = table.contents()  # the same one moment, through contents()
            per_trajectory = np.split(contents["step_priorities"],
                                      np.cumsum(contents["length"])[:-1])
            assert [s.max() for s in per_trajectory] == list(contents["priority"])
    assert updater.rounds > 10  # the updates ran beside the saves
    table.close()
    for path in paths:
        with gx.Table.load(path) as loaded:
            assert len(loaded) == 4096
