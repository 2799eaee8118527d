"""Table checkpoints: the file format. Atomic, checksummed, exact, and safe to
open when hostile.

A checkpoint is one uncompressed zip file (the standard library's: every member
carries a CRC-32 that reading verifies) holding:

* ``meta.json``: format version, table name, columns, capacity, max_length,
  placement, remover, rate limiter, max_times_sampled, counters (next sequence
  number, inserts, samples, evictions, priority updates), number of items;
* ``keys.npy``, ``slots.npy``, ``lengths.npy``, ``priorities.npy``,
  ``stamps.npy`` (insertion stamps: ns since the Unix epoch, strictly
  increasing; the clock sharded tables order TopK and Recent by),
  ``times_sampled.npy`` (draws counted against max_times_sampled): one entry
  per stored trajectory, in key (= insertion) order; ``free_slots.npy``: the
  free slots in the order the table keeps them. Slots are restored as they
  were, so a loaded table gives the same batch for the same rng key as the
  saved one;
* ``columns/<i>.bin``: column i's steps of every trajectory, concatenated in
  key order (only real steps, no slot padding);
* ``step_priorities.npy`` (version 5, tables made with ``step_priorities``,
  whose meta says so): every trajectory's step priorities, concatenated in key
  order; each trajectory's priority is the largest of its steps'.

``save`` captures one moment of the table: its items, counters, free slots and
step priorities are read in one hold of the table's lock (inserts still in
flight are not in the checkpoint; their slots are saved as free; priority
updates land before or after it whole), and the items stay pinned
while their steps are copied out, so inserts and samples from other threads
may go on during a save. It writes to a temporary file beside the target
(named after the target, shortened with a digest where the name is long, and
the writing process), fsyncs it, checks it as
loading would (metadata, item arrays and column sizes; ``CheckpointError`` if
that fails, and nothing is replaced) and renames it over the target, so a
crash mid-save leaves the previous checkpoint intact. The target is the path given
or, for a symbolic link, the file the link leads to (links are followed, as
``open`` follows them, and remain links); a target that exists and is not a
regular file (a directory, a device, a FIFO, a socket) is refused with
``FileExistsError`` and left as it was. A new checkpoint gets the permissions
the umask gives a new file; one that replaces a file keeps that file's. Paths
may be str, bytes or os.PathLike. Temporaries left by a process that died
mid-save are removed by the next save or load of the same path.
While saving, the stored slots are pinned: inserts that would evict them wait.

``open_checkpoint`` checks everything before anything is built: the path is a
regular file; the metadata is at most 16 MiB and nests at most 32 levels
(checked before decoding); every member is stored uncompressed and lies inside the file;
every array's declared shape and dtype match its member's size before a byte
of it is allocated; counters are finite non-negative integers; keys, slots,
lengths and priorities are consistent; a bool column holds only the bytes 0
and 1 (checked as its steps are restored). Whatever a file holds, loading it
either succeeds or raises ``CheckpointError`` (or ``FileNotFoundError``).

Version 1 checkpoints (gearjax 0.1, whose keys were plain sequence numbers)
load too: each key k of slot s becomes ``k << slot_bits | s``, the key layout
of this version, which keeps their order. Versions 1 and 2 have no stamps:
their items are stamped anew, in key order, when loaded. Versions 1 to 3
have no max_times_sampled: they load with 0 (unlimited). Versions 1 to 4 have
no step priorities.

This module knows the native table (``gearjax._gearjax.NativeTable``), not
``gearjax.table``: ``Table.save`` and ``Table.load`` call into it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import math
import os
import re
import secrets
import stat
import threading
import time
import tokenize
import zipfile
from typing import Any, Callable

import numpy as np

from gearjax import _checks, rate_limiters
from gearjax._gearjax import NativeTable
from gearjax.columns import Column

FORMAT = "gearjax-table"
VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)
ITEM_ARRAYS = ("keys", "slots", "lengths", "priorities", "stamps", "times_sampled",
               "free_slots")
# The item arrays each version has.
_VERSION_ARRAYS = {1: ("keys", "slots", "lengths", "priorities", "free_slots"),
                   2: ("keys", "slots", "lengths", "priorities", "free_slots"),
                   3: ("keys", "slots", "lengths", "priorities", "stamps", "free_slots"),
                   4: ITEM_ARRAYS, 5: ITEM_ARRAYS}
MAX_STAMP = _checks.MAX_STAMP
STAMP_SKEW_NS = 86_400 * 10**9
COUNTERS = ("next_sequence", "inserts", "samples", "evictions", "priority_updates")
REMOVERS = tuple(_checks.REMOVER_CODES)
PLACEMENTS = _checks.PLACEMENTS
MAX_META_BYTES = 16 << 20


class CheckpointError(ValueError):
    """A checkpoint that is corrupted, truncated, hostile or not a gearjax
    checkpoint."""


# ------------------------------------------------------------------- write

# Temporaries this process is writing now (other threads' saves are not
# orphans, even though their process is alive and well).
_writing: set[str] = set()
_writing_lock = threading.Lock()


# The longest file name most file systems take, in bytes (NAME_MAX).
NAME_MAX = 255
# What a temporary's name adds to its prefix: the pid, 12 hex digits, ".tmp".
_TEMPORARY_SUFFIX_BYTES = 1 + 20 + 1 + 12 + 4


def _temporary_prefix(path: str) -> str:
    """How the temporaries of `path` begin: ".name.", or, where that would
    make a temporary's name longer than NAME_MAX bytes, the name's start and
    a digest of all of it (".start~digest."), so that any name a file can
    have can be saved to."""
    name = os.path.basename(path)
    prefix = f".{name}."
    if len(os.fsencode(prefix)) + _TEMPORARY_SUFFIX_BYTES <= NAME_MAX:
        return prefix
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:24]
    room = NAME_MAX - _TEMPORARY_SUFFIX_BYTES - len(digest) - 3
    start = name
    while len(os.fsencode(start)) > room:
        start = start[:-1]
    return f".{start}~{digest}."


def _remove_orphans(path: str) -> None:
    """Removes temporaries of `path` left by processes that no longer run."""
    directory = os.path.dirname(os.path.abspath(path))
    pattern = re.compile(re.escape(_temporary_prefix(path)) + r"(\d+)\.[^.]+\.tmp\Z")
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        match = pattern.match(name)
        if match is None:
            continue
        full = os.path.join(directory, name)
        pid = int(match.group(1))
        with _writing_lock:
            if full in _writing:
                continue
        if pid != os.getpid() and _process_alive(pid):
            continue  # another live process may be saving right now
        try:
            os.unlink(full)
        except OSError:
            pass


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # it exists (another user's), or we cannot tell: leave it
    return True


def checkpoint_path(path: str | bytes | os.PathLike) -> str:
    """`path` as a string (str, bytes and os.PathLike are accepted); refuses
    anything else, an empty path and a NUL byte."""
    try:
        text = os.fsdecode(os.fspath(path))
    except TypeError:
        raise TypeError(f"a checkpoint path must be a str, bytes or os.PathLike, got "
                        f"{type(path).__name__}") from None
    if not text or "\0" in text:
        raise ValueError(f"a checkpoint path must be non-empty and free of NUL bytes, got "
                         f"{text!r}")
    return text


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
               (stat.S_ISSOCK, "a socket"))


def _save_target(path: str) -> str:
    """The file a save to `path` replaces: `path`, or where a symbolic link
    leads (links are followed, as ``open`` follows them, and stay links).
    Refuses a path that exists and is not a regular file: saving renames a
    new file over the old one, which would replace a device, a FIFO or a
    socket with a regular file."""
    target = os.path.realpath(path)
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return target
    except OSError as e:
        raise OSError(e.errno, f"cannot save to {path}: {e.strerror}", path) from None
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _FILE_KINDS if test(info.st_mode)), "not a file")
        shown = path if target == os.path.abspath(path) else f"{path} (a link to {target})"
        raise FileExistsError(errno.EEXIST, f"cannot save to {shown}: it is {kind}, not a "
                              f"regular file, and saving would replace it", path)
    return target


def _create_temporary(path: str) -> tuple[int, str]:
    """Creates this process's temporary for `path`, beside it, with the
    permissions the umask gives a new file (mkstemp's are always 0600), and
    adds it to `_writing` first: created before, another thread's
    _remove_orphans could take it for a dead writer's and remove it. The
    caller discards it from `_writing` once it is renamed or removed."""
    directory = os.path.dirname(path)
    for _ in range(100):
        tmp = os.path.join(directory, f"{_temporary_prefix(path)}{os.getpid()}."
                                      f"{secrets.token_hex(6)}.tmp")
        with _writing_lock:
            _writing.add(tmp)
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except BaseException as e:
            with _writing_lock:
                _writing.discard(tmp)
            if not isinstance(e, FileExistsError):
                raise
    raise FileExistsError(errno.EEXIST, "no free temporary name beside the checkpoint", path)


def _keep_permissions(path: str, fd: int) -> None:
    """Gives the new file (`fd`) the permission bits of the file it will
    replace, as writing over that file would keep them: a checkpoint made
    private (0600) stays private. A new path keeps the umask's."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode) & 0o777  # not set-id or sticky bits
    except FileNotFoundError:
        return
    os.fchmod(fd, mode)


@contextlib.contextmanager
def _atomic_replace(path: str, verify: Callable[[str], None] | None = None):
    """Yields a new binary file beside `path` (see _save_target for what
    `path` may be); when the block succeeds the file is flushed to disk,
    checked by `verify(temporary)` (which raises if it is unfit) and replaces
    `path` (then the directory is synced), otherwise it is removed. Its name
    marks it as this process's temporary, which _remove_orphans leaves alone
    while it is being written. An OSError names `path`, not the temporary."""
    asked = path
    path = _save_target(path)
    directory = os.path.dirname(path)
    _remove_orphans(path)
    try:
        fd, tmp = _create_temporary(path)
    except OSError as e:
        raise type(e)(e.errno, f"cannot save to {asked}: {e.strerror}", asked) from None
    try:
        _keep_permissions(path, fd)
        with os.fdopen(fd, "wb") as raw:
            yield raw
            raw.flush()
            os.fsync(raw.fileno())
        if verify is not None:
            verify(tmp)
        _save_target(asked)  # still not a device, FIFO or directory (it may have changed)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and tmp in (e.filename, e.filename2):
            raise type(e)(e.errno, f"cannot save to {asked}: {e.strerror}", asked) from None
        raise
    finally:
        with _writing_lock:
            _writing.discard(tmp)
    _fsync_directory(directory)


def save(native: NativeTable, header: dict[str, Any], path: str | os.PathLike) -> None:
    """Writes a checkpoint of `native` atomically. `header` holds the table's
    configuration as JSON values: name, columns (a list of {"name", "shape",
    "dtype", "pad"}), capacity, max_length, placement, remover, rate_limiter,
    max_times_sampled, step_priorities."""
    path = checkpoint_path(path)
    # One moment: the items (pinned), the counters, the free slots and the
    # step priorities from one hold of the table's lock. Read apart, inserts
    # in between made files whose parts disagreed, and which did not load;
    # so did priority updates between the items and their steps.
    items, counters, free_slots, step_priorities = native.pin_snapshot()
    keys, slots, lengths, priorities, stamps, times_sampled = items
    try:
        meta = {"format": FORMAT, "version": VERSION, **header,
                "counters": {k: counters[k] for k in COUNTERS}, "num_items": int(len(keys))}
        with _atomic_replace(path, verify=_verify_written) as raw:
            with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED,
                                 allowZip64=True) as zf:
                zf.writestr("meta.json", json.dumps(meta, indent=1))
                arrays = dict(zip(ITEM_ARRAYS, (keys, slots, lengths, priorities, stamps,
                                                times_sampled, free_slots)))
                for name, array in arrays.items():
                    with zf.open(f"{name}.npy", "w") as f:
                        np.save(f, array)
                if header.get("step_priorities"):
                    with zf.open("step_priorities.npy", "w", force_zip64=True) as f:
                        np.save(f, step_priorities)
                for c in range(len(header["columns"])):
                    with zf.open(f"columns/{c}.bin", "w", force_zip64=True) as f:
                        for slot, length in zip(slots, lengths):
                            f.write(native.read_slot(c, int(slot), int(length)))
    finally:
        native.unpin_slots(slots)


def _verify_written(path: str) -> None:
    """Checks a checkpoint just written, before it replaces the previous one:
    its metadata and item arrays must pass every check loading makes (the
    column bytes are checked by size, not re-read). Raises CheckpointError,
    and the previous checkpoint stays."""
    try:
        with zipfile.ZipFile(path, "r") as zf:
            _check_members(zf, os.stat(path).st_size)
            _read(zf)
    except CheckpointError as e:
        raise CheckpointError(f"the checkpoint just written does not load ({e}); nothing was "
                              f"replaced. This is a bug in gearjax: please report it") from None
    except (*_ZIP_ERRORS, *_META_ERRORS) as e:
        raise CheckpointError(f"the checkpoint just written does not load ({type(e).__name__}: "
                              f"{e}); nothing was replaced. This is a bug in gearjax: please "
                              f"report it") from None


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """Writes a small file (a sharded table's manifest) atomically: all of
    `data` or the file as it was."""
    path = checkpoint_path(path)
    with _atomic_replace(path) as raw:
        raw.write(data)


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


# -------------------------------------------------------------------- read

# What reading a damaged zip can raise: zipfile reports bad headers as
# BadZipFile, but also as RuntimeError ("encrypted") or NotImplementedError
# (an unknown compression method), and short reads as EOFError or OSError.
_ZIP_ERRORS = (zipfile.BadZipFile, OSError, EOFError, RuntimeError, NotImplementedError,
               ValueError, KeyError, OverflowError)
# What parsing damaged metadata can raise.
_META_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError)


@dataclasses.dataclass
class Checkpoint:
    """An opened, fully checked checkpoint: the table's configuration, its
    items, and (through `restore`) its contents. Close it (or use it as a
    context manager) when done."""

    name: str
    columns: dict[str, Column]
    capacity: int
    max_length: int
    placement: str
    remover: str
    rate_limiter: rate_limiters.RateLimiter | None
    max_times_sampled: int
    counters: dict[str, int | float]
    keys: np.ndarray       # in the key layout of a table of `capacity` slots
    slots: np.ndarray
    lengths: np.ndarray
    priorities: np.ndarray
    stamps: np.ndarray | None  # None for versions 1 and 2: stamped anew
    times_sampled: np.ndarray
    free_slots: np.ndarray
    step_priorities: np.ndarray | None  # None: a table without step priorities
    _zip: zipfile.ZipFile

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    def restore(self, native: NativeTable) -> None:
        """Fills a new, empty native table of this configuration with the
        checkpoint's items and counters."""
        streams = [self._zip.open(f"columns/{i}.bin") for i in range(len(self.columns))]
        try:
            stamps = self.stamps if self.stamps is not None else np.full(len(self.keys), -1)
            step_bytes = sum(c.step_bytes for c in self.columns.values())
            first_step = np.concatenate([[0], np.cumsum(self.lengths)])
            for items in _chunks(self.lengths, step_bytes):
                steps = int(self.lengths[items].sum())
                arrays = [np.frombuffer(_read_exactly(s, steps * c.step_bytes), np.uint8)
                          for s, c in zip(streams, self.columns.values())]
                _check_bools(arrays, self.columns)
                step_priorities = None if self.step_priorities is None else \
                    np.ascontiguousarray(self.step_priorities[
                        first_step[items.start]:first_step[items.stop]])
                native.restore_items(arrays, *(np.ascontiguousarray(a[items], dtype)
                                               for a, dtype in ((self.lengths, np.int64),
                                                                (self.priorities, np.float64),
                                                                (self.keys, np.int64),
                                                                (self.slots, np.int64),
                                                                (stamps, np.int64))),
                                     steps=step_priorities)
            for key, times in zip(self.keys, self.times_sampled):
                if times:
                    native.restore_times_sampled(int(key), int(times))
        finally:
            for s in streams:
                s.close()
        c = self.counters
        native.restore_state(int(c["next_sequence"]), int(c["inserts"]), float(c["samples"]),
                             int(c["evictions"]), int(c["priority_updates"]),
                             [int(s) for s in self.free_slots])


def _check_bools(arrays: list[np.ndarray], columns: dict[str, Column]) -> None:
    """Refuses a bool column's byte other than 0 or 1: no insert stores one,
    and NumPy and XLA read it as a bool that is neither True nor False."""
    for data, (name, column) in zip(arrays, columns.items()):
        if column.dtype == np.bool_ and data.size and data.max() > 1:
            raise CheckpointError(f"column {name!r} (bool) holds a byte that is neither 0 "
                                  f"nor 1")


# Items restored by one native call: their steps are read into memory
# first, so a chunk holds at most this many bytes of them (or one item).
RESTORE_CHUNK_BYTES = 64 << 20


def _chunks(lengths: np.ndarray, step_bytes: int) -> list[slice]:
    """Consecutive runs of items whose steps take at most RESTORE_CHUNK_BYTES
    (an item larger than that alone)."""
    ends = np.cumsum(lengths.astype(np.int64) * step_bytes)
    chunks, start = [], 0
    while start < len(lengths):
        base = ends[start - 1] if start else 0
        stop = max(int(np.searchsorted(ends, base + RESTORE_CHUNK_BYTES, "right")), start + 1)
        chunks.append(slice(start, stop))
        start = stop
    return chunks


def _read_exactly(stream, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise CheckpointError("a column member ended early")
    return data


def open_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Opens and checks a checkpoint (see the module docstring)."""
    path = checkpoint_path(path)
    _remove_orphans(os.path.realpath(path))  # a save through a link writes beside its target
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise CheckpointError(f"{path} cannot be read: {e}") from None
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(f"{path} is not a regular file")
    try:
        zf = zipfile.ZipFile(path, "r")
    except _ZIP_ERRORS as e:
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated or corrupted?): "
                              f"{e}") from None
    try:
        _check_members(zf, info.st_size)
        try:
            bad = zf.testzip()  # reads every member and checks its CRC-32
        except _ZIP_ERRORS as e:
            raise CheckpointError(f"corrupted: {e}") from None
        if bad is not None:
            raise CheckpointError(f"corrupted: checksum mismatch in {bad}")
        try:
            return _read(zf)
        except CheckpointError:
            raise
        except _META_ERRORS as e:
            raise CheckpointError(f"invalid contents: {type(e).__name__}: {e}") from None
    except CheckpointError as e:
        zf.close()
        raise CheckpointError(f"{path}: {e}") from None
    except BaseException:
        zf.close()
        raise


MAX_JSON_DEPTH = 32  # meta.json nests 4 deep; Python's decoder recurses per level
# A string, or an unterminated one to the end (so that no quote is rescanned:
# linear time on any input).
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)', re.DOTALL)


def decode_json(data: bytes, what: str) -> Any:
    """Decodes a checkpoint's JSON metadata, bounded: at most MAX_META_BYTES
    bytes and MAX_JSON_DEPTH nested arrays and objects, checked before
    decoding (the decoder recurses per level, so hostile nesting would raise
    RecursionError, or overflow the stack). Raises CheckpointError."""
    if len(data) > MAX_META_BYTES:
        raise CheckpointError(f"{what} holds {len(data)} bytes; that is not metadata")
    structure = np.frombuffer(_JSON_STRING.sub(b'""', data), np.uint8)
    steps = (np.isin(structure, (ord("["), ord("{"))).astype(np.int64) -
             np.isin(structure, (ord("]"), ord("}"))))
    depth = int(np.cumsum(steps).max(initial=0))
    if depth > MAX_JSON_DEPTH:
        raise CheckpointError(f"{what} nests {depth} levels of arrays and objects; metadata "
                              f"nests at most {MAX_JSON_DEPTH}")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise CheckpointError(f"{what} is not valid JSON: {e}") from None


def _check_members(zf: zipfile.ZipFile, file_size: int) -> None:
    """Every member is stored (no compression, so no zip bomb) and its data
    lies inside the file."""
    for info in zf.infolist():
        if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            raise CheckpointError(f"member {info.filename} is compressed; checkpoints store "
                                  "members uncompressed")
        if info.header_offset < 0 or info.header_offset + info.file_size > file_size:
            raise CheckpointError(f"member {info.filename} claims {info.file_size} bytes, more "
                                  f"than the file holds")


# What NumPy's parse of a damaged .npy header can raise: its header is a
# Python literal, parsed by ast.literal_eval, whose tokenizer raises
# TokenError (not a ValueError) for an unclosed bracket, and which recurses
# per nested bracket.
_NPY_HEADER_ERRORS = (ValueError, SyntaxError, TypeError, EOFError, tokenize.TokenError,
                      RecursionError, MemoryError)


def _load_npy(zf: zipfile.ZipFile, name: str, dtype: np.dtype, length: int) -> np.ndarray:
    """A 1-d array of `length` entries of `dtype`, checked against the header
    and the member's size before anything is allocated."""
    member = f"{name}.npy"
    with zf.open(member) as f:
        try:
            version = np.lib.format.read_magic(f)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, stored = read_header(f)
        except _NPY_HEADER_ERRORS as e:
            raise CheckpointError(f"{member} is not a NumPy array file: {type(e).__name__}: "
                                  f"{e}") from None
        if stored != dtype or shape != (length,):
            raise CheckpointError(f"{member} holds {stored}{list(shape)}, expected "
                                  f"{dtype}[{length}]")
        data = f.read(length * dtype.itemsize + 1)
    if len(data) != length * dtype.itemsize:
        raise CheckpointError(f"{member} holds {len(data)} bytes of data, expected "
                              f"{length * dtype.itemsize}")
    return np.frombuffer(data, dtype=dtype).copy()


def _count(meta: dict, name: str, lo: int, hi: int) -> int:
    value = meta[name]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise CheckpointError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _counters(meta: dict, version: int) -> dict[str, int | float]:
    counters = meta["counters"]
    if not isinstance(counters, dict):
        raise CheckpointError("counters must be an object")
    names = ("next_key",) + COUNTERS[1:] if version == 1 else COUNTERS
    out: dict[str, int | float] = {}
    for name in names:
        value = counters[name]
        if name == "samples":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not math.isfinite(value) or value < 0:
                raise CheckpointError(f"counter samples must be a finite number >= 0, got "
                                      f"{value!r}")
            out[name] = float(value)
        else:
            if isinstance(value, bool) or not isinstance(value, int) or not \
                    0 <= value <= _checks.INT64_MAX:
                raise CheckpointError(f"counter {name} must be an integer in [0, 2**63), got "
                                      f"{value!r}")
            out[name] = value
    if version == 1:
        out["next_sequence"] = out.pop("next_key")
    return out


def _read(zf: zipfile.ZipFile) -> Checkpoint:
    """The checkpoint in ``zf``, every part checked: its metadata, its
    members, its items' arrays, their keys and priorities, its columns."""
    meta, version, columns, keeps_steps = _read_meta(zf)
    _check_member_names(zf, version, len(columns), keeps_steps)
    capacity = _count(meta, "capacity", 1, _checks.MAX_CAPACITY)
    max_length = _count(meta, "max_length", 1, _checks.MAX_LENGTH)
    num_items = _count(meta, "num_items", 0, capacity)
    if meta["remover"] not in REMOVERS or meta["placement"] not in PLACEMENTS:
        raise CheckpointError(f"unknown remover {meta['remover']!r} or placement "
                              f"{meta['placement']!r}")
    name = meta.get("name", "")
    if not isinstance(name, str):
        raise CheckpointError("the table name must be a string")
    try:
        limiter = rate_limiters.from_json(meta["rate_limiter"])
    except (TypeError, ValueError, KeyError) as e:
        raise CheckpointError(f"invalid rate limiter: {e}") from None
    counters = _counters(meta, version)
    max_times_sampled = _count(meta, "max_times_sampled", 0, _checks.MAX_BATCH) \
        if version >= 4 else 0

    i64 = np.dtype("<i8")
    keys = _load_npy(zf, "keys", i64, num_items)
    slots = _load_npy(zf, "slots", i64, num_items)
    lengths = _load_npy(zf, "lengths", i64, num_items)
    priorities = _load_npy(zf, "priorities", np.dtype("<f8"), num_items)
    stamps = _read_stamps(zf, version, num_items)
    times_sampled = _load_npy(zf, "times_sampled", i64, num_items) if version >= 4 \
        else np.zeros(num_items, np.int64)
    if num_items and (times_sampled.min() < 0 or times_sampled.max() >= max(max_times_sampled, 1)):
        raise CheckpointError(f"times_sampled must lie in [0, max_times_sampled="
                              f"{max_times_sampled}) (all 0 without max_times_sampled)")
    free_slots = _load_npy(zf, "free_slots", i64, capacity - num_items)
    keys = _checked_keys(keys, slots, free_slots, capacity, version, counters["next_sequence"])
    if num_items and (lengths.min() < 1 or lengths.max() > max_length):
        raise CheckpointError("a trajectory length is outside [1, max_length]")
    _check_priorities(priorities, "priorities")
    step_priorities = _read_step_priorities(zf, lengths, priorities) if keeps_steps else None
    _check_column_sizes(zf, columns, int(lengths.sum()))
    return Checkpoint(name, columns, capacity, max_length, meta["placement"], meta["remover"],
                      limiter, max_times_sampled, counters, keys, slots, lengths, priorities,
                      stamps, times_sampled, free_slots, step_priorities, zf)


def _read_meta(zf: zipfile.ZipFile) -> tuple[dict, int, dict[str, Column], bool]:
    """meta.json, bounded and checked: (meta, version, columns by name,
    whether the checkpoint keeps step priorities)."""
    info = zf.getinfo("meta.json")
    if info.file_size > MAX_META_BYTES:
        raise CheckpointError(f"meta.json holds {info.file_size} bytes; that is not metadata")
    meta = decode_json(zf.read("meta.json"), "meta.json")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError("not a gearjax table checkpoint")
    version = meta.get("version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise CheckpointError(f"format version {version!r}; this gearjax reads versions "
                              f"{READABLE_VERSIONS}")
    if not isinstance(meta["columns"], list) or not meta["columns"]:
        raise CheckpointError("a checkpoint needs at least one column")
    columns = {c["name"]: Column.from_json(c) for c in meta["columns"]}
    if len(columns) != len(meta["columns"]) or not all(isinstance(n, str) and n for n in columns):
        raise CheckpointError("column names must be distinct non-empty strings")
    keeps_steps = meta.get("step_priorities", False) if version >= 5 else False
    if not isinstance(keeps_steps, bool):
        raise CheckpointError("step_priorities must be true or false")
    return meta, version, columns, keeps_steps


def _check_member_names(zf: zipfile.ZipFile, version: int, num_columns: int,
                        keeps_steps: bool) -> None:
    """The members a checkpoint of this version and shape holds, no more."""
    expected = {"meta.json", *(f"{n}.npy" for n in _VERSION_ARRAYS[version]),
                *(f"columns/{i}.bin" for i in range(num_columns)),
                *(("step_priorities.npy",) if keeps_steps else ())}
    missing = sorted(expected - set(zf.namelist()))
    unexpected = sorted(set(zf.namelist()) - expected)
    if missing or unexpected:
        raise CheckpointError(f"missing members {missing}, unexpected members {unexpected}")


def _read_stamps(zf: zipfile.ZipFile, version: int, num_items: int) -> np.ndarray | None:
    """The items' insertion stamps (from version 3), increasing, in range and
    not in the future."""
    if version < 3:
        return None
    stamps = _load_npy(zf, "stamps", np.dtype("<i8"), num_items)
    if num_items and (stamps.min() < 0 or stamps.max() >= MAX_STAMP
                      or np.any(np.diff(stamps) <= 0)):
        raise CheckpointError("insertion stamps are not increasing in [0, 2**62)")
    # A stamp far in the future would keep its shard "newest" for TopK and
    # Recent long after: a day of clock skew is tolerated, no more.
    if num_items and stamps.max() > time.time_ns() + STAMP_SKEW_NS:
        raise CheckpointError("insertion stamps lie more than a day in the future")
    return stamps


def _checked_keys(keys: np.ndarray, slots: np.ndarray, free_slots: np.ndarray, capacity: int,
                  version: int, next_sequence: int) -> np.ndarray:
    """The items' keys in this version's layout (sequence number, then slot),
    checked: slots and free slots partition the table, keys increase below
    next_sequence and name their slots."""
    every_slot = np.concatenate([slots, free_slots])
    if not np.array_equal(np.sort(every_slot), np.arange(capacity)):
        raise CheckpointError("slots and free slots do not partition the table")
    slot_bits = (capacity - 1).bit_length()
    num_items = len(keys)
    if version == 1:  # keys were sequence numbers; give them this version's layout
        if num_items and (keys.min() < 0 or keys.max() >= 2 ** (63 - slot_bits)):
            raise CheckpointError("a key is out of range")
        keys = (keys << slot_bits) | slots
    sequences = keys >> slot_bits
    if num_items and (keys.min() < 0 or np.any(np.diff(keys) <= 0)
                      or np.any((keys & ((1 << slot_bits) - 1)) != slots)
                      or sequences[-1] >= next_sequence):
        raise CheckpointError("keys are not increasing below next_sequence, or do not name "
                              "their slots")
    if next_sequence > (_checks.INT64_MAX >> slot_bits) + 1:
        raise CheckpointError("next_sequence is beyond the key space")
    return keys


def _check_priorities(values: np.ndarray, name: str) -> None:
    try:
        _checks.priorities(values, name)
    except ValueError as e:
        raise CheckpointError(str(e)) from None


def _read_step_priorities(zf: zipfile.ZipFile, lengths: np.ndarray,
                          priorities: np.ndarray) -> np.ndarray:
    """Every step's priority, item after item, checked: valid priorities,
    each item's priority the largest of its steps'."""
    step_priorities = _load_npy(zf, "step_priorities", np.dtype("<f8"), int(lengths.sum()))
    _check_priorities(step_priorities, "step priorities")
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    if len(lengths) and not np.array_equal(np.maximum.reduceat(step_priorities, starts),
                                           priorities):
        raise CheckpointError("a trajectory's priority is not the largest of its steps'")
    return step_priorities


def _check_column_sizes(zf: zipfile.ZipFile, columns: dict[str, Column], total_steps: int) -> None:
    """Each column's member holds every stored step, no more, no less."""
    for i, (column_name, column) in enumerate(columns.items()):
        size = zf.getinfo(f"columns/{i}.bin").file_size
        if size != total_steps * column.step_bytes:
            raise CheckpointError(f"column {column_name!r} holds {size} bytes, expected "
                                  f"{total_steps * column.step_bytes}")

