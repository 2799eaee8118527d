"""What a table's insert paths check and convert before the native core
copies anything (beside ``columns.py``, which converts one column): one
trajectory from the host (``insert``, ``insert_many``), a padded batch for
the ``insert_batch`` custom call (its columns, lengths and priorities, traced
or not), and priorities for ``update_priorities``. Bad input raises here,
naming what is wrong, and nothing is inserted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gearjax import _checks
from gearjax.columns import (Column, cast_to_column, check_traced_conversion, host_array,
                             is_numeric, numeric_host_array)


def check_column_names(what: str, columns: Mapping[str, Column], given: Any) -> None:
    """``given`` (``what``: "a trajectory", "a step") is a mapping with every
    column of the table and no other."""
    if not isinstance(given, Mapping):
        raise TypeError(f"{what} must be a mapping of column name -> array, "
                        f"got {type(given).__name__}")
    missing = [n for n in columns if n not in given]
    extra = [n for n in given if n not in columns]
    if missing:
        raise ValueError(f"missing column(s) {missing}")
    if extra:
        raise ValueError(f"unknown column(s) {extra}; the table has {list(columns)}")


def trajectory_bytes(columns: Mapping[str, Column], max_length: int,
                     trajectory: Mapping[str, Any]) -> tuple[list[np.ndarray], int]:
    """One trajectory as the core takes it: each column converted to its
    dtype (columns.cast_to_column) and viewed as bytes, in column order, and
    its length."""
    check_column_names("a trajectory", columns, trajectory)
    arrays, lengths = [], {}
    for n, column in columns.items():
        value = numeric_host_array(n, trajectory[n])
        if value.ndim != 1 + len(column.shape) or value.shape[1:] != column.shape:
            raise ValueError(f"column {n!r} must have shape [T, "
                             f"{', '.join(map(str, column.shape))}], got {value.shape}"
                             .replace("[T, ]", "[T]"))
        arrays.append(cast_to_column(n, value, column.dtype))
        lengths[n] = value.shape[0]
    if len(set(lengths.values())) != 1:
        raise ValueError(f"columns differ in length: {lengths}")
    length = next(iter(lengths.values()))
    if not 1 <= length <= max_length:
        raise ValueError(f"trajectory length {length} is outside [1, max_length="
                         f"{max_length}]")
    # The core copies bytes; handing it uint8 views lets any dtype through
    # (bfloat16 included, which the binding layer cannot type).
    return [a.reshape(-1).view(np.uint8) for a in arrays], length


def batch_columns(columns: Mapping[str, Column], max_length: int,
                  given: Mapping[str, Any], host: bool = False) -> list[Any]:
    """insert_batch's columns, [N, T, *shape] each with the same N >= 1 and
    T in [1, max_length], converted to the columns' dtypes: host data as
    insert converts it (refusing values that do not fit), JAX arrays only
    where every value of their dtype fits (columns.check_traced_conversion,
    in convert_batch_columns). Host data stays NumPy with ``host`` (the
    eager path), else becomes JAX arrays; JAX arrays stay as they are."""
    if not isinstance(given, Mapping):
        raise TypeError("columns must be a mapping of column name -> [N, T, *shape] array")
    missing = [n for n in columns if n not in given]
    extra = [n for n in given if n not in columns]
    if missing or extra:
        raise ValueError(f"insert_batch needs exactly the table's columns; missing {missing}, "
                         f"unknown {extra}")
    for n, column in columns.items():
        if jax.dtypes.canonicalize_dtype(column.dtype) != column.dtype:
            raise TypeError(f"column {n!r} is {column.dtype}, which JAX represents only with "
                            f"jax_enable_x64 on; turn it on, or insert from the host with "
                            f"insert/insert_many")
    arrays = [given[n] if isinstance(given[n], (jax.Array, jax.core.Tracer))
              else cast_to_column(n, np.asarray(given[n]), c.dtype) for n, c in columns.items()]
    if not host:
        arrays = [a if isinstance(a, (jax.Array, jax.core.Tracer)) else jnp.asarray(a)
                  for a in arrays]
    rows, steps = arrays[0].shape[:2] if arrays[0].ndim >= 2 else (None, None)
    for (n, column), array in zip(columns.items(), arrays):
        if array.shape != (rows, steps, *column.shape):
            raise ValueError(f"column {n!r} must have shape [N, T, "
                             f"{', '.join(map(str, column.shape))}] with the same N and T "
                             f"as the others, got {array.shape}".replace("T, ]", "T]"))
        if not is_numeric(np.dtype(array.dtype)):
            raise TypeError(f"column {n!r} must hold numeric data, got {array.dtype}")
    if rows < 1:
        raise ValueError("insert_batch needs at least one trajectory")
    if not 1 <= steps <= max_length:
        raise ValueError(f"the time axis T={steps} must be in [1, max_length={max_length}]")
    return arrays


def convert_batch_columns(columns: Mapping[str, Column], arrays: list[Any],
                          host: bool = False) -> list[Any]:
    """batch_columns' arrays in the columns' dtypes, each conversion checked
    (after lengths and priorities, whose errors come first); with ``host``,
    as C-contiguous NumPy arrays (a JAX array read on the host)."""
    for (n, column), array in zip(columns.items(), arrays):
        check_traced_conversion(n, array.dtype, column.dtype)
    if not host:
        return [a.astype(c.dtype) for a, c in zip(arrays, columns.values())]
    return [np.ascontiguousarray(host_array(a), dtype=c.dtype)
            for a, c in zip(arrays, columns.values())]


def batch_lengths(lengths: Any, rows: int, steps: int, host: bool = False) -> Any:
    """insert_batch's lengths: integers [rows] in [1, steps] (checked now
    when concrete, by the handler when traced), as int32 or int64; with
    ``host`` (concrete lengths only), a NumPy int64 array."""
    if not isinstance(lengths, jax.core.Tracer):
        values = np.asarray(lengths)
        if values.shape != (rows,) or not np.issubdtype(values.dtype, np.integer):
            raise ValueError(f"lengths must be integers of shape ({rows},), got "
                             f"{values.dtype}{list(values.shape)}")
        bad = (values < 1) | (values > steps)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"lengths must be in [1, T={steps}]; entry {i} is {values[i]}; "
                             f"nothing was inserted")
        if host:
            return np.ascontiguousarray(values, np.int64)
        return jnp.asarray(values.astype(np.int32))  # exact: 1 <= length <= T < 2**31
    if lengths.shape != (rows,) or not jnp.issubdtype(lengths.dtype, jnp.integer):
        raise ValueError(f"lengths must be integers of shape ({rows},), got "
                         f"{lengths.dtype}{list(lengths.shape)}")
    if lengths.dtype in (jnp.int32, jnp.int64):
        return lengths
    if lengths.dtype == jnp.uint32 or lengths.dtype == jnp.uint64:
        # Values above 2**31 would wrap in int32: clip, so they stay out of [1, T].
        return jnp.minimum(lengths, jnp.iinfo(jnp.int32).max).astype(jnp.int32)
    return lengths.astype(jnp.int32)  # int8/int16/uint8/uint16 widen exactly


def batch_priorities(priorities: Any, rows: int, host: bool = False) -> Any:
    """insert_batch's priorities: real numbers [rows] (checked now when
    concrete, by the handler when traced), float32 or float64; None: 1.0.
    With ``host`` (concrete priorities only), a NumPy float64 array, as
    given: nothing narrows them to float32."""
    if priorities is None:
        return np.ones(rows) if host else jnp.ones(rows, jnp.float32)
    if not isinstance(priorities, jax.core.Tracer):
        values = np.asarray(priorities)
        if values.shape != (rows,):
            raise ValueError(f"priorities must have shape ({rows},), got {list(values.shape)}")
        checked = _checks.priorities(values)
        if host:
            return np.ascontiguousarray(checked, np.float64)
        narrowed = checked.astype(widest_float())
        lost = (checked > 0) & (narrowed == 0)
        if lost.any():
            i = int(np.argmax(lost))
            raise ValueError(f"priority {checked[i]!r} (entry {i}) would become 0 in "
                             f"float32; turn on jax_enable_x64 to pass it as float64")
        return jnp.asarray(narrowed)
    if priorities.shape != (rows,) or not _checks.is_real_dtype(priorities.dtype):
        raise ValueError(f"priorities must be real numbers of shape ({rows},), got "
                         f"{priorities.dtype}{list(priorities.shape)}")
    if priorities.dtype not in (jnp.float32, jnp.float64):
        priorities = priorities.astype(widest_float())
    return priorities


def fast_kind(dtype: np.dtype) -> str:
    """The element kind the one-step fast path (insert_step) takes for a
    column ("" for none: ml_dtypes floats, complex, non-native byte order)."""
    if dtype.kind in "biu" or (dtype.kind == "f" and dtype.itemsize in (2, 4, 8)):
        return dtype.kind if dtype.isnative else ""
    return ""


def widest_float() -> np.dtype:
    """float64 where JAX has it (jax_enable_x64), else float32."""
    return np.dtype(np.float64) if jax.config.jax_enable_x64 else np.dtype(np.float32)
