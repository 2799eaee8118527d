"""The priority update's arguments, in one place: what ``Table`` and
``ShardedTable`` accept as keys, priorities and steps (``update_priorities(...,
steps=...)``), checked alike eagerly (NumPy) and while tracing (jax.numpy).
The values are checked where they enter the native core."""

from __future__ import annotations

from typing import Any

import numpy as np

from gearjax import _checks


def operands(xp: Any, keys: Any, priorities: Any, steps: Any = None) -> tuple[Any, Any, Any]:
    """``(keys, priorities, steps)`` as xp (NumPy or jax.numpy) arrays, their
    dtypes and shapes checked: keys and priorities flattened, as many of
    each; or, with steps, keys ``[B]`` and priorities and steps ``[B, W]``
    alike, steps signed integers. ``steps`` comes back ``None`` when not
    given. Raises ``TypeError`` (a dtype) or ``ValueError`` (a shape)."""
    keys, priorities = xp.asarray(keys), xp.asarray(priorities)
    if steps is None:
        keys, priorities = xp.ravel(keys), xp.ravel(priorities)
    if not _checks.is_integer_dtype(keys.dtype) or keys.dtype == np.uint64:
        raise TypeError(f"keys must be int32, uint32 or int64 (or narrower), got {keys.dtype}")
    if not _checks.is_real_dtype(priorities.dtype):
        raise TypeError(f"priorities must be real numbers, got {priorities.dtype}")
    if steps is None:
        if keys.shape != priorities.shape:
            raise ValueError(f"got {priorities.shape[0]} priorities for {keys.shape[0]} keys")
        return keys, priorities, None
    if keys.ndim != 1 or priorities.ndim != 2 or priorities.shape[0] != keys.shape[0]:
        raise ValueError(f"with steps, keys must be [B] and priorities and steps [B, W] alike; "
                         f"got keys {keys.shape}, priorities {priorities.shape}, steps "
                         f"{np.shape(steps)}")
    steps = xp.asarray(steps)
    if not _checks.is_integer_dtype(steps.dtype, signed=True):
        raise TypeError(f"steps must be signed integers (int32 or int64, or narrower), "
                        f"got {steps.dtype}")
    if steps.shape != priorities.shape:
        raise ValueError(f"with steps, keys must be [B] and priorities and steps [B, W] alike; "
                         f"got keys {keys.shape}, priorities {priorities.shape}, steps "
                         f"{steps.shape}")
    return keys, priorities, steps


def step_values(priorities: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Concrete per-step priorities ``[B, W]`` as float64, checked, their
    padding entries (a step below 0, which may hold anything, NaN included)
    set to 0 and not checked. Raises ``ValueError`` naming the first bad
    entry (in row-major order)."""
    return _checks.priorities(np.where(steps >= 0, priorities, 0))
