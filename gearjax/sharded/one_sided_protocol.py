"""What one-sided readers and shard owners agree on (the ``nixl`` and
``verbs`` exchanges): a shard's published layout and its checks, the slot
record as xla_ffi/core/table/slots.h lays it out, the messages an owner accepts
(priority updates, tree requests), and the registered buffers reads land in.
The sampler is native (xla_ffi/core/one_sided/one_sided.h); gearjax/sharded/
one_sided.py and one_sided_native.py are its Python side."""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import numpy as np

from gearjax import _gearjax
from gearjax.sharded import keys as keys_of

# Registered output buffers per column that samples hand out without a copy:
# one is reused only once nothing outside the reader refers to it (the
# caller dropped the batch, JAX freed an array aliasing it). With all in use,
# a sample copies its rows out of a shared buffer instead.
OUTPUT_BUFFERS = 4
# Staging buffers start on this boundary, so JAX aliases rows handed to it
# (jax.numpy.from_dlpack on CPU copies memory less aligned than 64 bytes).
ALIGNMENT = 64
# The owner's memory as the core lays it out, from the core itself (one
# definition: xla_ffi/core/table/slots.h and sum_tree.h).
_LAYOUT = _gearjax.slot_layout()
_FANOUT = _LAYOUT["sum_tree_fanout"]
_SLOT_BYTES = _LAYOUT["slot_bytes"]
_LIVE = _LAYOUT["live_state"]
# Priority updates for another shard travel as one message to its owner (a
# NIXL notification, a verbs SEND): _UPDATE, the job token, then n int64 keys
# and n float64 priorities; at most this many entries a message.
_UPDATE = b"GXUP"
MAX_UPDATE_ENTRIES = 1 << 20
# Step priority updates: _STEP_UPDATE, the job token, then n and W (int64),
# n int64 keys, n x W int64 steps (below 0: padding) and n x W float64
# priorities; at most MAX_UPDATE_ENTRIES steps a message.
_STEP_UPDATE = b"GXUS"
# A reader's request that the owner register and publish a strategy's tree:
# TREE_REQUEST, the job token, then {"code", "alpha"} as JSON.
TREE_REQUEST = b"GXTR"


def aligned_zeros(size: int) -> np.ndarray:
    """`size` zero bytes starting on an ALIGNMENT boundary: a view whose base
    is the allocation (what _unreferenced counts references to)."""
    raw = np.zeros(size + ALIGNMENT, np.uint8)
    offset = (-raw.ctypes.data) % ALIGNMENT
    return raw[offset:offset + size]


def _unreferenced(buffer: np.ndarray) -> bool:
    """Whether nothing but the reader refers to a buffer made by
    aligned_zeros: every array made from it (slices, views, what JAX holds
    through DLPack) refers to its base."""
    # The base's references: the buffer's .base, and getrefcount's argument.
    return sys.getrefcount(buffer.base) <= 2


def copy_local(addresses: np.ndarray, sizes: np.ndarray, destinations: np.ndarray) -> None:
    """A read of this process's own shard: spans copied here, no transport."""
    for src, n, dst in zip(addresses.tolist(), sizes.tolist(), destinations.tolist()):
        ctypes.memmove(dst, src, n)


def _check_layout(layout: Any, shard: int, capacity: int, max_length: int) -> None:
    """A peer's published layout, checked against what every process agreed
    on (capacity, max_length) before any read is sized by it."""
    def integer(name: str) -> int:
        value = layout.get(name) if isinstance(layout, dict) else None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ShardUnavailable(shard, f"published a malformed layout ({name})")
        return value

    ok = (integer("slots_bytes") == _SLOT_BYTES * capacity and
          integer("stamps_bytes") == 8 * capacity and
          integer("max_length") == max_length and
          all(integer(name) >= 0 for name in ("arena", "arena_bytes", "slots", "stamps", "tree",
                                              "tree_bytes")) and
          isinstance(layout.get("tree_offsets"), list) and
          all(isinstance(o, int) and not isinstance(o, bool) and o >= 0
              for o in layout["tree_offsets"]) and
          isinstance(layout.get("column_offsets"), list))
    if ok:  # levels in order, each a whole number of lines, inside the tree
        ends = layout["tree_offsets"][1:] + [layout["tree_bytes"] // 8]
        ok = len(layout["tree_offsets"]) >= 1 and layout["tree_bytes"] % 64 == 0 and all(
            end > start and (end - start) % _FANOUT == 0
            for start, end in zip(layout["tree_offsets"], ends))
    if not ok:
        raise ShardUnavailable(shard, "published a layout that does not match the agreed "
                                      "capacity and max_length")


def strategy_key(code: int, alpha: float) -> str:
    """How a strategy's remote layout is named where it is published."""
    return f"{code}/{alpha!r}"


def update_message(token: str, keys: np.ndarray, priorities: np.ndarray) -> bytes:
    k = np.ascontiguousarray(keys, np.int64)
    p = np.ascontiguousarray(priorities, np.float64)
    return _UPDATE + token.encode() + k.tobytes() + p.tobytes()


def rows_per_message(token: str, width: int | None, max_bytes: int | None) -> int:
    """The rows one update message carries: keys and priorities (``width``
    None), or keys and ``width`` steps and priorities a row; at most
    MAX_UPDATE_ENTRIES entries and, where given, ``max_bytes`` bytes. Raises
    ``ValueError`` where one row does not fit: a caller checks this before it
    applies any part of an update, so a refused update changes no shard."""
    head = 4 + len(token.encode())
    steps_a_row = 1 if width is None else width
    row_bytes, fixed = (16, 0) if width is None else (8 + 16 * steps_a_row, 16)
    rows = MAX_UPDATE_ENTRIES // max(steps_a_row, 1)  # W = 0: rows that name no step
    if max_bytes is not None:
        rows = min(rows, (max_bytes - head - fixed) // row_bytes)
    if rows < 1:
        limit = f"{max_bytes} bytes" if max_bytes is not None else \
            f"{MAX_UPDATE_ENTRIES} entries"
        raise ValueError(f"a row of {steps_a_row} step priorities does not fit one update "
                         f"message ({limit}): update fewer steps a row")
    return rows


def update_messages(token: str, keys: np.ndarray, priorities: np.ndarray,
                    steps: np.ndarray | None = None, max_bytes: int | None = None):
    """The messages that carry an update to one owner, in order, as
    ``(message, rows)``: at most MAX_UPDATE_ENTRIES entries (steps, with
    ``steps``) and, where given, ``max_bytes`` bytes each. Raises
    ``ValueError`` where one row of steps does not fit ``max_bytes``."""
    rows = rows_per_message(token, None if steps is None else steps.shape[1], max_bytes)
    for start in range(0, len(keys), rows):
        part = slice(start, start + rows)
        if steps is None:
            yield update_message(token, keys[part], priorities[part]), len(keys[part])
        else:
            yield (step_update_message(token, keys[part], steps[part], priorities[part]),
                   len(keys[part]))


def step_update_message(token: str, keys: np.ndarray, steps: np.ndarray,
                        priorities: np.ndarray) -> bytes:
    """A step priority update (keys [n], steps and priorities [n, W])."""
    k = np.ascontiguousarray(keys, np.int64)
    s = np.ascontiguousarray(steps, np.int64)
    p = np.ascontiguousarray(priorities, np.float64)
    return (_STEP_UPDATE + token.encode() + np.array(s.shape, np.int64).tobytes() +
            k.tobytes() + s.tobytes() + p.tobytes())


def apply_updates(local, shard: int, shard_shift: int, kind: bytes, body: bytes) -> int:
    """The owner's side of an update message whose token was checked: applies
    the entries of this shard's keys to ``local`` (a gx.Table), after its
    own checks; returns how many entries (rows of a step update) were
    refused (a malformed message counts as one)."""
    if kind == _STEP_UPDATE:
        return _apply_step_updates(local, shard, shard_shift, body)
    if kind != _UPDATE or len(body) % 16 != 0 or len(body) // 16 > MAX_UPDATE_ENTRIES:
        return 1
    n = len(body) // 16
    keys = np.frombuffer(body, np.int64, n)
    priorities = np.frombuffer(body, np.float64, n, offset=8 * n)
    mine = keys_of.owners(keys, shard_shift) == shard
    refused = int((~mine).sum())
    try:
        local.update_priorities(keys_of.local_keys(keys[mine], shard_shift), priorities[mine])
    except (TypeError, ValueError, RuntimeError):
        refused += int(mine.sum())
    return refused


def _apply_step_updates(local, shard: int, shard_shift: int, body: bytes) -> int:
    """A step update message's rows of this shard's keys, applied together
    (a step past its trajectory's length refuses them all)."""
    if len(body) < 16:
        return 1
    n, width = (int(v) for v in np.frombuffer(body, np.int64, 2))
    if not (0 <= n <= MAX_UPDATE_ENTRIES and 0 <= width and n * width <= MAX_UPDATE_ENTRIES and
            len(body) == 16 + 8 * n + 16 * n * width):
        return 1
    keys = np.frombuffer(body, np.int64, n, offset=16)
    steps = np.frombuffer(body, np.int64, n * width, offset=16 + 8 * n).reshape(n, width)
    priorities = np.frombuffer(body, np.float64, n * width,
                               offset=16 + 8 * n + 8 * n * width).reshape(n, width)
    mine = keys_of.owners(keys, shard_shift) == shard
    refused = int((~mine).sum())
    try:
        local.update_priorities(keys_of.local_keys(keys[mine], shard_shift), priorities[mine],
                                steps=steps[mine])
    except (TypeError, ValueError, RuntimeError):
        refused += int(mine.sum())
    return refused


class ShardUnavailable(RuntimeError):
    """A shard's owner did not answer a one-sided read in time (dead, frozen
    or unreachable)."""

    def __init__(self, shard: int, why: str):
        super().__init__(f"shard {shard} is unavailable: {why}")
        self.shard = shard
        self.why = why


# A slot record (SlotInfo) as the core lays it out.
_RECORD = np.dtype({"names": ["key", "length", "priority", "pins", "state"],
                    "formats": ["<i8", "<i8", "<f8", "<i4", "u1"],
                    "offsets": [_LAYOUT[f"{name}_offset"] for name in
                                ("key", "length", "priority", "pins", "state")],
                    "itemsize": _SLOT_BYTES})


def _slot_bits(capacity: int) -> int:
    """KeyLayout's slot bits (xla_ffi/core/table/slots.h): the fewest that hold
    every slot number."""
    return 0 if capacity <= 1 else (capacity - 1).bit_length()


def _fields(records: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keys, lengths, states) of slot records, copied."""
    return records["key"].copy(), records["length"].copy(), records["state"].copy()


def _root(layout: dict) -> int:
    """The address of a tree's root (its total)."""
    return layout["tree"] + 8 * layout["tree_offsets"][-1]
