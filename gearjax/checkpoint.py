"""Table checkpoints: atomic, checksummed, exact.

A checkpoint is one uncompressed zip file (the standard library's: every member
carries a CRC-32 that reading verifies) holding:

* ``meta.json``: format version, columns, capacity, max_length, placement,
  remover, rate limiter, counters (next key, inserts, samples, evictions,
  priority updates);
* ``keys.npy``, ``slots.npy``, ``lengths.npy``, ``priorities.npy``: one entry
  per stored trajectory, in key (= insertion) order; ``free_slots.npy``: the
  free slots in the order inserts take them. Slots are restored as they were,
  so a loaded table gives the same batch for the same rng key as the saved one;
* ``columns/<i>.bin``: column i's steps of every trajectory, concatenated in
  key order (only real steps, no slot padding).

``save`` writes to a temporary file beside the target, fsyncs it and renames it
over the target, so a crash mid-save leaves the previous checkpoint intact.
While saving, the stored slots are pinned: inserts that would evict them wait.
``load`` verifies every checksum and the metadata before it builds anything.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from typing import TYPE_CHECKING

import numpy as np

from gearjax import rate_limiters
from gearjax.columns import Column

if TYPE_CHECKING:
    from gearjax.table import Table

FORMAT = "gearjax-table"
VERSION = 1
ITEM_ARRAYS = ("keys", "slots", "lengths", "priorities", "free_slots")
COUNTERS = ("next_key", "inserts", "samples", "evictions", "priority_updates")


class CheckpointError(ValueError):
    """A checkpoint that is corrupted, truncated or not a gearjax checkpoint."""


def save(table: "Table", path: str | os.PathLike) -> None:
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    native = table._native
    keys, slots, lengths, priorities = native.pin_items()
    try:
        stats = native.stats()
        free_slots = np.asarray(native.free_slots(), dtype=np.int64)
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "columns": [{"name": n, **c.to_json()} for n, c in table.columns.items()],
            "capacity": table.capacity,
            "max_length": table.max_length,
            "placement": table.placement,
            "remover": table.remover,
            "rate_limiter": rate_limiters.to_json(table.rate_limiter),
            "counters": {k: stats[k] for k in COUNTERS},
            "num_items": int(len(keys)),
        }
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                   dir=directory)
        try:
            with os.fdopen(fd, "wb") as raw:
                with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED,
                                     allowZip64=True) as zf:
                    zf.writestr("meta.json", json.dumps(meta, indent=1))
                    arrays = dict(zip(ITEM_ARRAYS, (keys, slots, lengths, priorities, free_slots)))
                    for name, array in arrays.items():
                        with zf.open(f"{name}.npy", "w") as f:
                            np.save(f, array)
                    for c in range(len(table.columns)):
                        with zf.open(f"columns/{c}.bin", "w", force_zip64=True) as f:
                            for slot, length in zip(slots, lengths):
                                f.write(native.read_slot(c, int(slot), int(length)))
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    finally:
        native.unpin_slots(slots)
    _fsync_directory(directory)


# What reading a damaged zip can raise: zipfile reports bad headers as
# BadZipFile, but also as RuntimeError ("encrypted") or NotImplementedError
# (an unknown compression method), and short reads as EOFError or OSError.
_ZIP_ERRORS = (zipfile.BadZipFile, OSError, EOFError, RuntimeError, NotImplementedError,
               ValueError, KeyError)
# What parsing damaged metadata can raise.
_META_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def load(path: str | os.PathLike, placement: str | None = None) -> "Table":
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    try:
        zf = zipfile.ZipFile(path, "r")
    except _ZIP_ERRORS as e:
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated or corrupted?): "
                              f"{e}") from None
    with zf:
        try:
            bad = zf.testzip()  # reads every member and checks its CRC-32
        except _ZIP_ERRORS as e:
            raise CheckpointError(f"{path} is corrupted: {e}") from None
        if bad is not None:
            raise CheckpointError(f"{path} is corrupted: checksum mismatch in {bad}")
        try:
            return _restore(zf, placement)
        except CheckpointError as e:
            raise CheckpointError(f"{path}: {e}") from None
        except _META_ERRORS as e:
            raise CheckpointError(f"{path} has invalid contents: {type(e).__name__}: {e}") \
                from None


def _restore(zf: zipfile.ZipFile, placement: str | None) -> "Table":
    from gearjax.table import Table

    meta = json.loads(zf.read("meta.json"))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError("not a gearjax table checkpoint")
    if meta.get("version") != VERSION:
        raise CheckpointError(f"format version {meta.get('version')}; this gearjax reads "
                              f"version {VERSION}")
    columns = {c["name"]: Column.from_json(c) for c in meta["columns"]}
    if len(columns) != len(meta["columns"]):
        raise CheckpointError("duplicate column names")
    expected_members = {"meta.json", *(f"{n}.npy" for n in ITEM_ARRAYS),
                        *(f"columns/{i}.bin" for i in range(len(columns)))}
    missing = sorted(expected_members - set(zf.namelist()))
    unexpected = sorted(set(zf.namelist()) - expected_members)
    if missing or unexpected:
        raise CheckpointError(f"missing members {missing}, unexpected members {unexpected}")
    items = {n: np.load(io.BytesIO(zf.read(f"{n}.npy")), allow_pickle=False)
             for n in ITEM_ARRAYS}
    counters = {k: meta["counters"][k] for k in COUNTERS}
    _check_items(meta, **items)
    total_steps = int(items["lengths"].sum())
    for i, (name, column) in enumerate(columns.items()):
        size = zf.getinfo(f"columns/{i}.bin").file_size
        if size != total_steps * column.step_bytes:
            raise CheckpointError(f"column {name!r} holds {size} bytes, expected "
                                  f"{total_steps * column.step_bytes}")

    table = Table(columns, meta["capacity"], meta["max_length"], placement=placement or meta["placement"],
                  remover=meta["remover"],
                  rate_limiter=rate_limiters.from_json(meta["rate_limiter"]))
    try:
        streams = [zf.open(f"columns/{i}.bin") for i in range(len(columns))]
        for key, slot, length, priority in zip(items["keys"], items["slots"], items["lengths"],
                                               items["priorities"]):
            arrays = [np.frombuffer(s.read(int(length) * c.step_bytes), dtype=np.uint8)
                      for s, c in zip(streams, columns.values())]
            table._native.insert(arrays, int(length), float(priority), int(key), int(slot))
        for s in streams:
            s.close()
        table._native.restore_state(
            int(counters["next_key"]), int(counters["inserts"]), float(counters["samples"]),
            int(counters["evictions"]), int(counters["priority_updates"]),
            [int(s) for s in items["free_slots"]])
    except BaseException:
        table.close()
        raise
    return table


def _check_items(meta: dict, keys: np.ndarray, slots: np.ndarray, lengths: np.ndarray,
                 priorities: np.ndarray, free_slots: np.ndarray) -> None:
    if not isinstance(meta["num_items"], int) or not isinstance(meta["capacity"], int):
        raise CheckpointError("num_items and capacity must be integers")
    n, capacity = meta["num_items"], meta["capacity"]
    if not (keys.shape == slots.shape == lengths.shape == priorities.shape == (n,)):
        raise CheckpointError("item arrays disagree with num_items")
    if any(a.dtype != np.int64 for a in (keys, slots, lengths, free_slots)) or \
            priorities.dtype != np.float64:
        raise CheckpointError("item arrays have unexpected dtypes")
    if n > capacity:
        raise CheckpointError("more items than capacity")
    every_slot = np.concatenate([slots, free_slots])
    if every_slot.shape != (capacity,) or not np.array_equal(np.sort(every_slot),
                                                             np.arange(capacity)):
        raise CheckpointError("slots and free slots do not partition the table")
    if n and (np.any(np.diff(keys) <= 0) or keys[0] < 0
              or keys[-1] >= meta["counters"]["next_key"]):
        raise CheckpointError("keys are not increasing below next_key")
    if n and (lengths.min() < 1 or lengths.max() > meta["max_length"]):
        raise CheckpointError("a trajectory length is outside [1, max_length]")
    if n and (not np.all(np.isfinite(priorities)) or priorities.min() < 0):
        raise CheckpointError("a priority is negative or not finite")


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
