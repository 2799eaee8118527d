"""Global keys of a sharded table: ``shard << shard_shift | the shard's own
key``, where the shard is the owning process's index and its own key is a
``gearjax.Table`` key (``sequence << slot_bits | slot``) of at most
``shard_shift`` bits. Every layer that splits or joins keys does it here
(the native side: xla_ffi/core/sharding/sharding.h, GlobalKey)."""

from __future__ import annotations

import numpy as np


def shard_shift(processes: int) -> int:
    """Where the shard's number starts: below it, 63 minus the fewest bits
    that hold every process index (at least one)."""
    return 63 - max(1, (processes - 1).bit_length())


def owners(keys: np.ndarray, shift: int) -> np.ndarray:
    """The shard of each global key; -1 for a negative (no) key."""
    keys = np.asarray(keys, np.int64)
    return np.where(keys >= 0, keys >> shift, -1)


def local_keys(keys: np.ndarray, shift: int) -> np.ndarray:
    """Each global key's key within its shard."""
    return np.asarray(keys, np.int64) & np.int64((1 << shift) - 1)


def global_keys(shard: int, local: np.ndarray, shift: int) -> np.ndarray:
    """Shard `shard`'s own keys as global keys."""
    return (np.int64(shard) << np.int64(shift)) | np.asarray(local, np.int64)
