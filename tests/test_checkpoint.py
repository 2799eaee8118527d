"""Checkpoints: exact save/load round trips, atomic saves, and corrupted files refused with
gearjax.CheckpointError."""

from __future__ import annotations

import io
import json
import os
import pathlib
import signal
import struct
import subprocess
import sys
import time
import zipfile

import jax
import numpy as np
import pytest

import gearjax as gx
from conftest import COLUMNS
from reference import check_batch, random_trajectory

CK_COLUMNS = {**COLUMNS, "value": gx.Column((2,), "float64", pad=float("nan"))}
MAX_LENGTH = 10
STRATEGIES = [gx.Uniform(), gx.Timestep(), gx.Prioritized(0.6), gx.TopK(3), gx.Recent(4)]
STATE_FIELDS = ("size", "capacity", "max_length", "num_steps", "next_sequence", "inserts", "samples",
                "evictions", "priority_updates", "bytes_used", "bytes_per_step", "columns",
                "remover", "placement", "pinned_slots")
MEMBERS = ("meta.json", "keys.npy", "slots.npy", "lengths.npy", "priorities.npy",
           "stamps.npy", "times_sampled.npy", "free_slots.npy", "columns/0.bin",
           "columns/1.bin")


def build(capacity=8, inserts=13, remover="min_priority", rate_limiter=None, placement="auto",
          columns=CK_COLUMNS, seed=0):
    """A table that has evicted (when inserts > capacity), had priorities updated and been
    sampled; returns (table, stored) with stored: key -> trajectory."""
    table = gx.Table(columns, capacity, MAX_LENGTH, remover=remover, rate_limiter=rate_limiter,
                     placement=placement)
    rng = np.random.default_rng(seed)
    stored, keys = {}, []
    for _ in range(inserts):
        trajectory = random_trajectory(rng, columns, int(rng.integers(1, MAX_LENGTH + 1)))
        keys.append(table.insert(trajectory, priority=float(rng.uniform(0.1, 4))))
        stored[keys[-1]] = trajectory
    if inserts:  # the newest, the third newest, and the oldest (evicted when full)
        picked = [keys[-1], keys[max(len(keys) - 3, 0)], keys[0]]
        table.update_priorities(picked, [0.05, 6.5, 9.0])
    return table, stored


def state(table: gx.Table) -> dict:
    s = table.stats()
    return {k: s[k] for k in STATE_FIELDS} | {"rate_limiter": table.rate_limiter, "len": len(table)}


def leaves(batch: gx.Batch) -> list[bytes]:
    return [np.asarray(leaf).tobytes() for leaf in jax.tree.leaves(batch)]


def members(path) -> dict[str, bytes]:
    """Every member of a checkpoint, by name: what it holds, without zip timestamps."""
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def saved_members(table: gx.Table, path) -> dict[str, bytes]:
    table.save(path)
    return members(path)


def assert_same_saves(table: gx.Table, loaded: gx.Table, tmp_path, inserted_since: int) -> None:
    """The two tables save the same checkpoint, but for the insertion stamps of
    the last `inserted_since` items (inserted into each after the load: each
    table read its own clock)."""
    a, b = saved_members(table, tmp_path / "a.gx"), saved_members(loaded, tmp_path / "b.gx")
    stamps_a, stamps_b = (np.load(io.BytesIO(m.pop("stamps.npy"))) for m in (a, b))
    assert a == b
    kept = len(stamps_a) - inserted_since
    np.testing.assert_array_equal(stamps_a[:kept], stamps_b[:kept])


def fresh_trajectory(seed=99, length=7, columns=CK_COLUMNS):
    return random_trajectory(np.random.default_rng(seed), columns, length)


# ------------------------------------------------------------- round trip


def test_round_trip_gives_identical_batches_for_every_strategy_and_the_same_next_insert(tmp_path):
    table, stored = build()
    for i, strategy in enumerate(STRATEGIES):  # counters, and the sum tree of the original
        table.sample(jax.random.key(100 + i), 32, 4, strategy)
    assert table.stats()["evictions"] == 5
    path = tmp_path / "table.gx"
    before_save = state(table)
    table.save(path)
    assert state(table) == before_save  # saving changes nothing
    loaded = gx.Table.load(path)
    assert state(loaded) == state(table)
    assert {n: c.to_json() for n, c in loaded.columns.items()} == \
        {n: c.to_json() for n, c in table.columns.items()}

    for strategy in STRATEGIES:
        for key in (jax.random.key(1), jax.random.key(2)):
            a = table.sample(key, 32, 4, strategy)
            b = loaded.sample(key, 32, 4, strategy)
            assert leaves(a) == leaves(b), strategy
            check_batch(b, stored, CK_COLUMNS, 4, "left")

    new = fresh_trajectory()
    key = table.insert(new, priority=0.07)
    assert loaded.insert(new, priority=0.07) == key
    assert key >> table.slot_bits == 13
    stored[key] = new
    assert state(loaded) == state(table)
    for strategy in STRATEGIES:  # Timestep and Prioritized draw by slot: same slot, same batch
        a = table.sample(jax.random.key(3), 32, 4, strategy)
        b = loaded.sample(jax.random.key(3), 32, 4, strategy)
        assert leaves(a) == leaves(b), strategy
        check_batch(b, stored, CK_COLUMNS, 4, "left")
    assert_same_saves(table, loaded, tmp_path, inserted_since=1)


def test_round_trip_of_a_partly_filled_table_keeps_the_free_slot_order(tmp_path):
    table, stored = build(capacity=8, inserts=5)
    path = tmp_path / "table.gx"
    table.save(path)
    loaded = gx.Table.load(path)
    assert members(path)["free_slots.npy"] == saved_members(loaded, tmp_path / "again.gx")[
        "free_slots.npy"]
    for i, length in enumerate((9, 1, 4)):
        new = fresh_trajectory(seed=i, length=length)
        key = table.insert(new, priority=1.5)
        assert loaded.insert(new, priority=1.5) == key and key >> table.slot_bits == 5 + i
    for strategy in (gx.Timestep(), gx.Prioritized(0.6)):
        a = table.sample(jax.random.key(4), 64, 3, strategy)
        b = loaded.sample(jax.random.key(4), 64, 3, strategy)
        assert leaves(a) == leaves(b), strategy
    assert_same_saves(table, loaded, tmp_path, inserted_since=3)


@pytest.mark.parametrize("chunk_bytes", [1, 300, 1 << 20])
def test_a_load_restores_its_items_in_chunks_the_same(tmp_path, monkeypatch, chunk_bytes):
    """A load restores items by the chunk (one native call each): a chunk of
    one item, of a few, or of all of them loads the same table."""
    monkeypatch.setattr(gx.checkpoint, "RESTORE_CHUNK_BYTES", chunk_bytes)
    table, stored = build(capacity=8, inserts=13)
    table.save(tmp_path / "table.gx")
    loaded = gx.Table.load(tmp_path / "table.gx")
    assert state(loaded) == state(table)
    for key, trajectory in stored.items():
        if key in set(table.contents()["key"].tolist()):
            for name, column in loaded.get(key).items():
                np.testing.assert_array_equal(np.asarray(column), trajectory[name])
    assert_same_saves(table, loaded, tmp_path, inserted_since=0)


def test_restore_items_refuses_arguments_that_disagree():
    """The native bulk restore checks what it is given before it inserts
    anything: no item of a refused call is in the table."""
    table = gx.Table({"x": gx.Column((2,), "int32")}, capacity=4, max_length=3)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    steps = np.zeros(3 * 8, np.uint8)  # three int32[2] steps
    # keys: sequence << 2 | slot (capacity 4)
    good = ([steps], i64(1, 2), np.array([1.0, 2.0]), i64(0, 5), i64(0, 1), i64(-1, -1))
    for position, bad, message in (
            (0, [steps[:-1]], "holds 23 bytes, expected 24"),
            (0, [steps, steps], "expected 1 columns"),
            (1, i64(1, 2, 0), "differ in length"),
            (1, i64(1, 4), "trajectory length 4 is out of range"),
            (1, i64(0, 3), "trajectory length 0 is out of range")):
        args = list(good)
        args[position] = bad
        with pytest.raises(ValueError, match=message):
            table._native.restore_items(*args)
        assert len(table) == 0
    table._native.restore_items(*good)
    assert len(table) == 2
    table.close()


@pytest.mark.parametrize("remover", ["fifo", "lifo", "min_priority"])
def test_round_trip_then_the_same_inserts_evict_the_same_trajectories(tmp_path, remover):
    table, _ = build(capacity=5, inserts=9, remover=remover, seed=3)
    table.save(tmp_path / "table.gx")
    loaded = gx.Table.load(tmp_path / "table.gx")
    assert loaded.remover == remover
    for i in range(4):
        new = fresh_trajectory(seed=10 + i, length=i + 1)
        assert table.insert(new, priority=0.3 * i) == loaded.insert(new, priority=0.3 * i)
        assert state(loaded) == state(table)
    # same keys, slots, lengths, priorities, free slots, counters and bytes
    assert_same_saves(table, loaded, tmp_path, inserted_since=4)


def test_round_trip_of_an_empty_table(tmp_path, emulated_gpu_memory):
    table = gx.Table(CK_COLUMNS, capacity=4, max_length=MAX_LENGTH, remover="lifo",
                     placement="device", rate_limiter=gx.MinSize(2, timeout=0.5))
    table.save(tmp_path / "empty.gx")
    loaded = gx.Table.load(tmp_path / "empty.gx")
    assert len(loaded) == 0 and loaded.num_steps == 0
    assert state(loaded) == state(table)
    assert (loaded.capacity, loaded.max_length) == (4, MAX_LENGTH)
    new = fresh_trajectory(length=3)
    assert table.insert(new) == loaded.insert(new) == 0
    assert_same_saves(table, loaded, tmp_path, inserted_since=1)


@pytest.mark.parametrize("limiter", [
    None,
    gx.MinSize(3, timeout=0.25),
    gx.SampleToInsertRatio(samples_per_insert=2.5, min_size_to_sample=2, error_buffer=40.0,
                           timeout=1.5),
], ids=["none", "MinSize", "SampleToInsertRatio"])
@pytest.mark.parametrize("placement", ["host", "device", "auto"])
def test_round_trip_keeps_configuration(tmp_path, limiter, placement, emulated_gpu_memory):
    table, _ = build(capacity=6, inserts=4, remover="lifo", rate_limiter=limiter,
                     placement=placement)
    table.save(tmp_path / "t.gx")
    loaded = gx.Table.load(str(tmp_path / "t.gx"))
    assert type(loaded.rate_limiter) is type(limiter)
    assert loaded.rate_limiter == limiter
    assert (loaded.placement, loaded.remover) == (placement, "lifo")
    assert state(loaded) == state(table)


def test_saving_again_replaces_the_checkpoint(tmp_path):
    path = tmp_path / "t.gx"
    table, _ = build(capacity=6, inserts=3)
    table.save(path)
    table.insert(fresh_trajectory(), priority=1.0)
    table.save(str(path))
    loaded = gx.Table.load(pathlib.Path(path))
    assert len(loaded) == 4 and loaded.stats()["next_sequence"] == 4
    assert sorted(os.listdir(tmp_path)) == ["t.gx"]


# --------------------------------------------------------------- atomicity


class Boom(OSError):
    pass


def _fail_on_call(n, exc=Boom):
    calls = []

    def hook(original):
        def wrapper(*args, **kwargs):
            calls.append(1)
            if len(calls) == n:
                raise exc("injected failure")
            return original(*args, **kwargs)
        return wrapper
    return hook


def _patch_numpy_save(monkeypatch, n, exc=Boom):
    monkeypatch.setattr(np, "save", _fail_on_call(n, exc)(np.save))


def _patch_column_write(monkeypatch, member, n):
    """Fails the n-th write into `member` of the zip being written."""
    original = zipfile._ZipWriteFile.write
    calls = []

    def write(self, data):
        if self._zinfo.filename == member:
            calls.append(1)
            if len(calls) == n:
                raise Boom("disk full")
        return original(self, data)
    monkeypatch.setattr(zipfile._ZipWriteFile, "write", write)


FAILURES = {
    "meta-writestr": lambda mp: mp.setattr(zipfile.ZipFile, "writestr",
                                           _fail_on_call(1)(zipfile.ZipFile.writestr)),
    "numpy-save-first": lambda mp: _patch_numpy_save(mp, 1),
    "numpy-save-third": lambda mp: _patch_numpy_save(mp, 3),
    "numpy-save-interrupt": lambda mp: _patch_numpy_save(mp, 4, KeyboardInterrupt),
    "column-data-partway": lambda mp: _patch_column_write(mp, "columns/1.bin", 2),
    "last-column-data": lambda mp: _patch_column_write(mp, f"columns/{len(CK_COLUMNS) - 1}.bin", 3),
    "fsync": lambda mp: mp.setattr(os, "fsync", _fail_on_call(1)(os.fsync)),
    "rename": lambda mp: mp.setattr(os, "replace", _fail_on_call(1)(os.replace)),
}


@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_failed_save_keeps_the_previous_checkpoint_and_leaves_no_temporary(tmp_path,
                                                                              monkeypatch, failure):
    table, _ = build(capacity=8, inserts=6)
    path = tmp_path / "table.gx"
    table.save(path)
    previous = path.read_bytes()
    previous_members = members(path)
    for i in range(4):  # the next save would hold different data, with evictions
        table.insert(fresh_trajectory(seed=i, length=MAX_LENGTH), priority=2.0)
    with monkeypatch.context() as mp:
        FAILURES[failure](mp)
        with pytest.raises((Boom, KeyboardInterrupt)):
            table.save(path)
    assert sorted(os.listdir(tmp_path)) == ["table.gx"]
    assert path.read_bytes() == previous
    loaded = gx.Table.load(path)
    assert len(loaded) == 6 and loaded.stats()["next_sequence"] == 6
    assert saved_members(loaded, tmp_path / "re.gx") == previous_members
    # the table is not left pinned, and the next save works
    assert table.stats()["pinned_slots"] == 0
    table.save(path)
    assert gx.Table.load(path).stats()["next_sequence"] == 10


def test_a_failed_first_save_creates_nothing(tmp_path, monkeypatch):
    table, _ = build(capacity=4, inserts=2)
    _patch_column_write(monkeypatch, "columns/0.bin", 1)
    with pytest.raises(Boom):
        table.save(tmp_path / "t.gx")
    assert os.listdir(tmp_path) == []


# -------------------------------------------------------------- corruption


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(bytes of a small checkpoint, its members, {member: (data start, data end)})."""
    columns = {"obs": gx.Column((3,), "float32"), "frame": gx.Column((2,), "uint8", pad=7)}
    table, _ = build(capacity=4, inserts=6, columns=columns, remover="fifo")
    path = tmp_path_factory.mktemp("ck") / "good.gx"
    table.save(path)
    table.close()
    data = path.read_bytes()
    regions = {}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:
                                                             info.header_offset + 30])
            start = info.header_offset + 30 + name_len + extra_len
            regions[info.filename] = (start, start + info.compress_size)
    assert set(regions) == set(MEMBERS)
    return data, members(path), regions


def _load_bytes(tmp_path, data: bytes, name="bad.gx"):
    path = tmp_path / name
    path.write_bytes(data)
    return gx.Table.load(path)


def test_checkpoint_error_is_a_value_error():
    assert issubclass(gx.CheckpointError, ValueError)


def test_the_unmodified_checkpoint_loads(tmp_path, checkpoint):
    data, original, _ = checkpoint
    table = _load_bytes(tmp_path, data)
    assert len(table) == 4
    assert saved_members(table, tmp_path / "re.gx") == original


@pytest.mark.parametrize("member", MEMBERS)
def test_a_flipped_byte_anywhere_in_a_members_data_is_refused(tmp_path, checkpoint, member):
    data, _, regions = checkpoint
    start, end = regions[member]
    assert end > start
    path = tmp_path / "bad.gx"
    for position in range(start, end):
        corrupted = bytearray(data)
        corrupted[position] ^= 0x01
        path.write_bytes(corrupted)
        with pytest.raises(gx.CheckpointError, match="corrupt") as info:
            gx.Table.load(path)
        assert str(path) in str(info.value), position


@pytest.mark.parametrize("mask, where", [(0xFF, "all-headers"), (0x01, "central-directory")],
                         ids=["all-bits-anywhere", "low-bit-central-directory"])
def test_a_flipped_byte_in_zip_headers_is_refused_or_harmless(tmp_path, checkpoint, mask, where):
    """Outside the members' data (local headers, central directory): loading either raises
    CheckpointError or gives a table whose checkpoint holds exactly the original members."""
    data, original, regions = checkpoint
    inside = np.zeros(len(data), bool)
    for start, end in regions.values():
        inside[start:end] = True
    if where == "central-directory":  # its offset is in the end record's last 6 bytes
        inside[:struct.unpack("<I", data[-6:-2])[0]] = True
    path = tmp_path / "bad.gx"
    escaped = {}
    for position in np.flatnonzero(~inside):
        corrupted = bytearray(data)
        corrupted[position] ^= mask
        path.write_bytes(corrupted)
        try:
            table = gx.Table.load(path)
        except gx.CheckpointError:
            continue
        except Exception as e:  # noqa: BLE001 - collected and reported below
            escaped.setdefault(f"{type(e).__name__}: {e}", int(position))
            continue
        assert saved_members(table, tmp_path / "re.gx") == original, int(position)
        table.close()
    assert not escaped, f"load raised something other than CheckpointError: {escaped}"


@pytest.mark.parametrize("fraction", [0.0005, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99])
def test_a_truncated_checkpoint_is_refused(tmp_path, checkpoint, fraction):
    data, _, _ = checkpoint
    cut = max(1, int(len(data) * fraction))
    with pytest.raises(gx.CheckpointError, match="not a readable checkpoint|corrupt"):
        _load_bytes(tmp_path, data[:cut])


@pytest.mark.parametrize("missing", [1, 22, 23])
def test_a_checkpoint_missing_its_last_bytes_is_refused(tmp_path, checkpoint, missing):
    data, _, _ = checkpoint
    with pytest.raises(gx.CheckpointError):
        _load_bytes(tmp_path, data[:-missing])


@pytest.mark.parametrize("content", [
    b"",
    b"gearjax checkpoint\n",
    bytes(np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8)),
    b"PK\x03\x04" + bytes(100),
    b"PK\x05\x06" + bytes(18),  # an empty zip archive
], ids=["empty", "text", "random", "zip-magic-then-zeros", "empty-zip"])
def test_files_that_are_not_checkpoints_are_refused(tmp_path, content):
    with pytest.raises(gx.CheckpointError):
        _load_bytes(tmp_path, content)


def test_a_zip_that_is_not_a_checkpoint_is_refused(tmp_path):
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("hello.txt", "hi")
    with pytest.raises(gx.CheckpointError, match="meta.json"):
        gx.Table.load(path)


def _rezip(path, items: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, content in items.items():
            zf.writestr(name, content)


@pytest.mark.parametrize("member", MEMBERS)
def test_a_checkpoint_lacking_a_member_is_refused(tmp_path, checkpoint, member):
    _, original, _ = checkpoint
    path = tmp_path / "lacking.gx"
    _rezip(path, {n: c for n, c in original.items() if n != member})
    with pytest.raises(gx.CheckpointError, match=member):
        gx.Table.load(path)


def test_a_rezipped_intact_checkpoint_loads(tmp_path, checkpoint):
    """Control for the tampering tests below: rewriting the members unchanged is fine."""
    _, original, _ = checkpoint
    _rezip(tmp_path / "same.gx", original)
    assert saved_members(gx.Table.load(tmp_path / "same.gx"), tmp_path / "re.gx") == original


def _npy(array) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def _meta(change):
    def apply(items):
        meta = json.loads(items["meta.json"])
        change(meta)
        items["meta.json"] = json.dumps(meta).encode()
    return apply


TAMPERING = {
    "wrong-format": _meta(lambda m: m.update(format="something-else")),
    "future-version": _meta(lambda m: m.update(version=6)),
    "step-priorities-not-a-bool": _meta(lambda m: m.update(step_priorities=1)),
    "step-priorities-member-missing": _meta(lambda m: m.update(step_priorities=True)),
    "max-times-sampled-negative": _meta(lambda m: m.update(max_times_sampled=-1)),
    "max-times-sampled-missing": _meta(lambda m: m.pop("max_times_sampled")),
    "times-sampled-without-limit": lambda items: items.update(
        {"times_sampled.npy": _npy(np.array([0, 1, 0, 0]))}),
    "meta-not-json": lambda items: items.update({"meta.json": b"{not json"}),
    "meta-a-list": lambda items: items.update({"meta.json": b"[1, 2]"}),
    "meta-null": lambda items: items.update({"meta.json": b"null"}),
    "capacity-below-items": _meta(lambda m: m.update(capacity=2)),
    "num-items-wrong": _meta(lambda m: m.update(num_items=3)),
    "next-sequence-below-keys": _meta(lambda m: m["counters"].update(next_sequence=1)),
    "counter-missing": _meta(lambda m: m["counters"].pop("inserts")),
    "unknown-remover": _meta(lambda m: m.update(remover="random")),
    "unknown-placement": _meta(lambda m: m.update(placement="tpu")),
    "unknown-rate-limiter": _meta(lambda m: m.update(rate_limiter={"type": "Bogus"})),
    "no-columns": _meta(lambda m: m.update(columns=[])),
    "bad-column-dtype": _meta(lambda m: m["columns"][0].update(dtype="object")),
    "column-size-mismatch": _meta(lambda m: m["columns"][0].update(shape=[6])),
    "keys-not-increasing": lambda items: items.update({"keys.npy": _npy(np.array([5, 4, 3, 2]))}),
    "slot-twice": lambda items: items.update({"slots.npy": _npy(np.array([0, 1, 1, 2]))}),
    "length-too-long": lambda items: items.update(
        {"lengths.npy": _npy(np.array([1, 2, 3, MAX_LENGTH + 1]))}),
    "stamps-not-increasing": lambda items: items.update(
        {"stamps.npy": _npy(np.array([5, 9, 9, 12]))}),
    "stamp-beyond-bound": lambda items: items.update(
        {"stamps.npy": _npy(np.array([5, 9, 10, 2**62]))}),
    "stamp-in-the-future": lambda items: items.update(
        {"stamps.npy": _npy(np.array([5, 9, 10, 2**62 - 1]))}),
    "negative-priority": lambda items: items.update(
        {"priorities.npy": _npy(np.array([1.0, -1.0, 1.0, 1.0]))}),
    "pickled-keys": lambda items: items.update(
        {"keys.npy": _npy(np.array([2, 3, 4, 5], dtype=object))}),
    "column-bytes-short": lambda items: items.update(
        {"columns/1.bin": items["columns/1.bin"][:-1]}),
}


def _assert_refused_after(change, tmp_path, checkpoint):
    """Rezips the checkpoint's members after `change` (checksums made valid
    again) and asserts that loading it raises CheckpointError."""
    _, original, _ = checkpoint
    items = dict(original)
    change(items)
    path = tmp_path / "tampered.gx"
    _rezip(path, items)
    with pytest.raises(gx.CheckpointError):
        gx.Table.load(path)


@pytest.mark.parametrize("tamper", list(TAMPERING))
def test_a_well_formed_zip_with_inconsistent_contents_is_refused(tmp_path, checkpoint, tamper):
    _assert_refused_after(TAMPERING[tamper], tmp_path, checkpoint)


def test_a_missing_path_raises_file_not_found(tmp_path):
    for path in (tmp_path / "nope.gx", tmp_path / "no" / "such" / "dir.gx"):
        with pytest.raises(FileNotFoundError):
            gx.Table.load(path)


# ------------------------------------------------------------ hostile input


def _huge_npy_header(dtype: str, count: int) -> bytes:
    """A .npy file whose header declares `count` entries but holds none."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": dtype, "fortran_order": False,
                                               "shape": (count,)})
    return out.getvalue()


def _npy_header_changed(data: bytes, change) -> bytes:
    """A version 1.0 .npy file whose header (its Python literal) `change`
    rewrote, kept as long, and whose data follows unchanged."""
    assert data[6:8] == b"\x01\x00"
    length = int.from_bytes(data[8:10], "little")
    header = change(data[10:10 + length])
    assert len(header) == length
    return data[:10] + header + data[10 + length:]


HOSTILE = {
    # Declared sizes far beyond the file, with valid checksums: refused before
    # anything of that size is allocated.
    "keys-declare-2**40": lambda items: items.update({"keys.npy": _huge_npy_header("<i8", 2**40)}),
    "free-slots-declare-2**50": lambda items: items.update(
        {"free_slots.npy": _huge_npy_header("<i8", 2**50)}),
    "capacity-2**40": _meta(lambda m: m.update(capacity=2**40)),
    "capacity-a-float": _meta(lambda m: m.update(capacity=8.0)),
    "max-length-2**40": _meta(lambda m: m.update(max_length=2**40)),
    "num-items-negative": _meta(lambda m: m.update(num_items=-1)),
    "column-shape-2**40": _meta(lambda m: m["columns"][0].update(shape=[2**40])),
    "meta-of-20-MB": lambda items: items.update({"meta.json": b" " * (20 << 20) + b"{}"}),
    # Nesting the decoder would recurse into (RecursionError escaped once).
    "meta-nesting-100k-arrays": lambda items: items.update(
        {"meta.json": b"[" * 100_000 + b"]" * 100_000}),
    "meta-nesting-unclosed": lambda items: items.update({"meta.json": b"{\"a\":" * 50_000}),
    "column-shape-nested-40-deep": _meta(lambda m: m["columns"][0].update(
        shape=json.loads("[" * 40 + "]" * 40))),
    "meta-unterminated-escapes": lambda items: items.update(
        {"meta.json": b'"\\"' * 100_000 + b'"\\'}),
    # Counters that are not finite non-negative integers.
    "samples-nan": _meta(lambda m: m["counters"].update(samples=float("nan"))),
    "samples-infinite": _meta(lambda m: m["counters"].update(samples=float("inf"))),
    "samples-negative": _meta(lambda m: m["counters"].update(samples=-1.0)),
    "inserts-negative": _meta(lambda m: m["counters"].update(inserts=-5)),
    "evictions-a-string": _meta(lambda m: m["counters"].update(evictions="7")),
    "updates-a-bool": _meta(lambda m: m["counters"].update(priority_updates=True)),
    "next-sequence-2**70": _meta(lambda m: m["counters"].update(next_sequence=2**70)),
    "next-sequence-beyond-the-key-space": _meta(
        lambda m: m["counters"].update(next_sequence=2**62)),
    "priority-above-1e30": lambda items: items.update(
        {"priorities.npy": _npy(np.array([1.0, 1e31, 1.0, 1.0]))}),
    "priority-subnormal": lambda items: items.update(
        {"priorities.npy": _npy(np.array([1.0, 5e-324, 1.0, 1.0]))}),
    "key-naming-another-slot": lambda items: items.update(
        {"keys.npy": _npy(np.load(io.BytesIO(items["keys.npy"])) ^ 1)}),
    "name-not-a-string": _meta(lambda m: m.update(name=["x"])),
    # .npy headers NumPy's parser refuses with TokenError (not a ValueError:
    # it escaped once) and with its nesting bound.
    "keys-header-unclosed": lambda items: items.update(
        {"keys.npy": _npy_header_changed(items["keys.npy"], lambda h: h.replace(b"}", b" "))}),
    "keys-header-nested": lambda items: items.update(
        {"keys.npy": _npy_header_changed(items["keys.npy"],
                                         lambda h: (b"(" * (len(h) - 1)).ljust(len(h)))}),
}


@pytest.mark.parametrize("tamper", list(HOSTILE))
def test_hostile_contents_with_valid_checksums_are_refused(tmp_path, checkpoint, tamper):
    _assert_refused_after(HOSTILE[tamper], tmp_path, checkpoint)


def test_compressed_members_are_refused(tmp_path, checkpoint):
    """Checkpoints store members uncompressed; a compressed one could be a zip bomb."""
    _, original, _ = checkpoint
    path = tmp_path / "deflated.gx"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, content in original.items():
            zf.writestr(name, content)
    with pytest.raises(gx.CheckpointError, match="compressed"):
        gx.Table.load(path)


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom", "/dev/null", "/tmp"])
def test_paths_that_are_not_regular_files_are_refused_without_reading_them(path):
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist here")
    with pytest.raises(gx.CheckpointError, match="not a regular file"):
        gx.Table.load(path)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.gx"
    os.mkfifo(fifo)
    with pytest.raises(gx.CheckpointError, match="not a regular file"):
        gx.Table.load(fifo)


def _v3(original: dict[str, bytes]) -> dict[str, bytes]:
    """The same checkpoint in format version 3: no max_times_sampled, no
    times_sampled."""
    items = dict(original)
    items.pop("times_sampled.npy")
    meta = json.loads(items["meta.json"])
    meta.pop("max_times_sampled")
    meta["version"] = 3
    items["meta.json"] = json.dumps(meta).encode()
    return items


def test_a_version_3_checkpoint_loads_without_draw_limits(tmp_path, checkpoint):
    _, original, _ = checkpoint
    _rezip(tmp_path / "v3.gx", _v3(original))
    _rezip(tmp_path / "v4.gx", original)
    v3, v4 = gx.Table.load(tmp_path / "v3.gx"), gx.Table.load(tmp_path / "v4.gx")
    np.testing.assert_equal(v3.contents(), v4.contents())
    assert v3.max_times_sampled == 0


def _v2(original: dict[str, bytes]) -> dict[str, bytes]:
    """The same checkpoint in format version 2 (gearjax 0.2): no insertion stamps
    (and no max_times_sampled, which came with version 4)."""
    items = _v3(original)
    items.pop("stamps.npy")
    meta = json.loads(items["meta.json"])
    meta["version"] = 2
    items["meta.json"] = json.dumps(meta).encode()
    return items


def _stamps(table: gx.Table) -> np.ndarray:
    """The insertion stamps of the table's items, in key order (not public: the
    clock sharded tables rank TopK and Recent by)."""
    _, slots, _, _, stamps, _ = table._native.pin_items()
    table._native.unpin_slots(slots)
    return stamps


def test_insertion_stamps_survive_save_and_load(tmp_path, checkpoint):
    _, original, _ = checkpoint
    _rezip(tmp_path / "v3.gx", original)
    stored = np.load(io.BytesIO(original["stamps.npy"]))
    assert np.all(np.diff(stored) > 0) and stored.min() > 1.6e18  # ns since the epoch
    np.testing.assert_array_equal(_stamps(gx.Table.load(tmp_path / "v3.gx")), stored)


def test_a_version_2_checkpoint_loads_stamped_anew_in_key_order(tmp_path, checkpoint):
    _, original, _ = checkpoint
    _rezip(tmp_path / "v2.gx", _v2(original))
    _rezip(tmp_path / "v3.gx", original)
    v2, v3 = gx.Table.load(tmp_path / "v2.gx"), gx.Table.load(tmp_path / "v3.gx")
    np.testing.assert_equal(v2.contents(), v3.contents())
    stamps = _stamps(v2)
    assert np.all(np.diff(stamps) > 0)
    assert stamps.min() > np.load(io.BytesIO(original["stamps.npy"])).max()  # anew: later


def _v1(original: dict[str, bytes]) -> dict[str, bytes]:
    """The same checkpoint in format version 1 (gearjax 0.1): keys were sequence
    numbers, the counter was next_key."""
    items = _v2(original)
    meta = json.loads(items["meta.json"])
    bits = (meta["capacity"] - 1).bit_length()
    keys = np.load(io.BytesIO(items["keys.npy"]))
    items["keys.npy"] = _npy(keys >> bits)
    meta["version"] = 1
    meta["counters"]["next_key"] = meta["counters"].pop("next_sequence")
    meta.pop("name")
    items["meta.json"] = json.dumps(meta).encode()
    return items


def test_a_version_1_checkpoint_loads_with_its_keys_in_the_new_layout(tmp_path, checkpoint):
    _, original, _ = checkpoint
    _rezip(tmp_path / "v3.gx", original)
    _rezip(tmp_path / "v1.gx", _v1(original))
    v1, v2 = gx.Table.load(tmp_path / "v1.gx"), gx.Table.load(tmp_path / "v3.gx")
    np.testing.assert_equal(v1.contents(), v2.contents())
    assert v1.stats()["next_sequence"] == v2.stats()["next_sequence"]
    for key in v2.contents()["key"]:
        np.testing.assert_equal(v1.get(int(key)), v2.get(int(key)))


def _temporaries(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".tmp"))


def test_a_save_killed_mid_write_leaves_an_orphan_that_the_next_save_or_load_removes(tmp_path):
    """A real SIGKILL in the middle of writing a 100 MB checkpoint."""
    path = tmp_path / "big.gx"
    script = tmp_path / "save.py"
    script.write_text(
        "import numpy as np, gearjax as gx, sys\n"
        "t = gx.Table({'x': gx.Column((1024,), 'float32')}, 100, 256, placement='host')\n"
        "for _ in range(100):\n"
        "    t.insert({'x': np.ones((256, 1024), np.float32)})\n"
        "print('saving', flush=True)\n"
        f"while True:\n    t.save({str(path)!r})\n")
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "saving"
        deadline = time.monotonic() + 60
        while not _temporaries(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.002)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(30)
    if not _temporaries(tmp_path):
        pytest.skip("the save finished between two looks; no orphan to clean up this time")
    orphans = _temporaries(tmp_path)
    assert str(process.pid) in orphans[0]  # named after the writer
    if path.exists():  # an earlier save completed: atomicity kept it whole
        assert len(gx.Table.load(path)) == 100
    else:
        table, _ = build(capacity=4, inserts=2)
        table.save(path)
    assert _temporaries(tmp_path) == [], "the orphan was not removed"


def test_temporaries_of_a_live_writer_are_left_alone(tmp_path):
    path = tmp_path / "t.gx"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f".t.gx.{sleeper.pid}.abcd.tmp"
        dead = tmp_path / ".t.gx.999999999.efgh.tmp"  # no such process
        live.write_bytes(b"partial")
        dead.write_bytes(b"partial")
        table, _ = build(capacity=4, inserts=2)
        table.save(path)
        assert live.exists() and not dead.exists()
        other = tmp_path / ".other.gx.999999999.ijkl.tmp"  # another checkpoint's: not ours
        other.write_bytes(b"partial")
        gx.Table.load(path)
        assert other.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_bool_column_byte_other_than_0_or_1_is_refused(tmp_path):
    """No insert stores one; loaded, NumPy and XLA read it as a bool that is
    neither True nor False (`x == True` and `x & True` are False)."""
    columns = {"done": gx.Column((), "bool"), "x": gx.Column((2,), "float32")}
    table, _ = build(capacity=4, inserts=3, columns=columns, remover="fifo")
    path = tmp_path / "good.gx"
    table.save(path)
    items = members(path)
    assert gx.Table.load(path).stats()["size"] == 3  # the control: it loads

    data = bytearray(items["columns/0.bin"])
    data[-1] = 2
    _rezip(tmp_path / "bad.gx", {**items, "columns/0.bin": bytes(data)})
    with pytest.raises(gx.CheckpointError, match="'done' .bool. holds a byte that is neither"):
        gx.Table.load(tmp_path / "bad.gx")
