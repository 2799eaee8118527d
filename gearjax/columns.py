"""Column specs: the per-step shape, dtype and pad value of one table column."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True, init=False)
class Column:
    """One field of every step of a trajectory.

    Args:
      shape: the shape of one step, e.g. ``(17,)`` for a 17-dimensional
        observation or ``()`` for a scalar reward.
      dtype: any numeric or bool dtype NumPy or JAX knows (``"float32"``,
        ``np.uint8``, ``jnp.bfloat16``, ``"float8_e4m3fn"``, ...) of at least
        8 bits: sub-byte types (``int4``, ``uint4``, ``int2``,
        ``float4_e2m1fn``, ``float6_e2m3fn``, ...), which XLA packs several
        to a byte, are refused with a TypeError.
      pad: the value that fills padded steps of sampled windows. It must be
        exactly representable in ``dtype`` (``-10`` for a ``uint8`` column is
        refused rather than wrapped).
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    pad: Any

    def __init__(self, shape: tuple[int, ...] | int, dtype: Any, pad: Any = 0):
        if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
            shape = (int(shape),)
        try:
            shape = tuple(shape)
        except TypeError:
            raise TypeError(f"Column shape must be a tuple of ints, got {shape!r}") from None
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in shape):
            raise TypeError(f"Column shape must be a tuple of ints, got {shape!r}")
        shape = tuple(int(d) for d in shape)
        if any(d < 1 for d in shape):
            raise ValueError(f"Column shape dimensions must be >= 1, got {shape}")
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"Column dtype {dtype!r} is not a dtype") from None
        bits = bit_width(dtype)
        if bits < 8:
            wider = "int8" if jnp.issubdtype(dtype, np.signedinteger) else \
                "uint8" if jnp.issubdtype(dtype, np.unsignedinteger) else "float8_e4m3fn"
            raise TypeError(f"Column dtype {dtype} is a sub-byte type ({bits}-bit): XLA packs "
                            f"several into a byte and a table stores whole bytes, so it is "
                            f"refused. Store the values as {wider} (or wider) and convert "
                            f"them after sampling")
        if not is_numeric(dtype):
            raise TypeError(f"Column dtype must be numeric or bool, got {dtype}")
        if isinstance(pad, (np.generic, np.ndarray)) or hasattr(pad, "__jax_array__") or (
                hasattr(pad, "shape") and hasattr(pad, "dtype")):
            if np.ndim(pad) != 0:
                raise TypeError(f"Column pad must be a scalar number, got {pad!r}")
            pad = np.asarray(pad).item()  # NumPy/JAX scalars -> Python scalar
        _check_pad(pad, dtype)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "pad", pad)

    @property
    def step_bytes(self) -> int:
        """Bytes one step of this column occupies."""
        return math.prod(self.shape) * self.dtype.itemsize

    def pad_step(self) -> bytes:
        """One step filled with the pad value, as raw bytes."""
        return np.full(self.shape, self.pad, dtype=self.dtype).tobytes()

    def to_json(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype.name, "pad": _json_scalar(self.pad)}

    @classmethod
    def from_json(cls, spec: dict) -> "Column":
        return cls(tuple(spec["shape"]), spec["dtype"], _pad_from_json(spec["pad"]))


def bit_width(dtype: np.dtype) -> int:
    """Bits of one element: 4 for int4 and float4_e2m1fn, whose NumPy
    itemsize (1) counts the byte each element occupies unpacked."""
    if dtype.kind == "V":
        try:
            if jnp.issubdtype(dtype, np.floating):
                return int(jnp.finfo(dtype).bits)
            if jnp.issubdtype(dtype, np.integer):
                return int(jnp.iinfo(dtype).bits)
        except (TypeError, ValueError):
            pass
    return dtype.itemsize * 8


def is_numeric(dtype: np.dtype) -> bool:
    """Bool, integer, float (bfloat16 and other ml_dtypes floats included) or
    complex; not datetime or timedelta, which NumPy files under integers."""
    if dtype.kind in "biufc":
        return True
    return dtype.kind == "V" and jnp.issubdtype(dtype, np.floating)


def _check_pad(pad: Any, dtype: np.dtype) -> None:
    if isinstance(pad, (str, bytes)) or np.ndim(pad) != 0:
        raise TypeError(f"Column pad must be a scalar number, got {pad!r}")
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused below
            stored = np.array(pad, dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"pad value {pad!r} cannot be stored as {dtype}") from None
    if isinstance(pad, float) and math.isnan(pad) and jnp.issubdtype(dtype, np.inexact):
        return
    if stored.item() != pad:
        raise ValueError(f"pad value {pad!r} is not exactly representable as {dtype}")


def _json_scalar(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # 'nan', 'inf', '-inf' parse back through float()
    return value


def _pad_from_json(value: Any) -> Any:
    return float(value) if isinstance(value, str) else value


@functools.cache
def _integer_bounds(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def cast_to_column(name: str, value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Converts to the column dtype: integers into any integer column when every
    value fits, otherwise same-kind conversions only (float64 -> float32 yes,
    float -> int no)."""
    if value.dtype != dtype:
        int_to_int = value.dtype.kind in "iu" and dtype.kind in "iu"
        if int_to_int:
            lo, hi = _integer_bounds(dtype)
            if value.size and (int(value.min()) < lo or int(value.max()) > hi):
                raise ValueError(f"column {name!r}: values outside the range of {dtype}")
        elif not np.can_cast(value.dtype, dtype, casting="same_kind"):
            raise TypeError(f"column {name!r} holds {dtype}; {value.dtype} data would be "
                            f"converted unsafely")
    return np.ascontiguousarray(value, dtype=dtype)


# DLPack device types (dlpack.h): memory the host can read in place.
_HOST_DEVICES = {1, 3}  # kDLCPU, kDLCUDAHost (pinned)


def host_array(value: Any) -> np.ndarray:
    """``value`` as a NumPy array on the host: NumPy arrays as they are; any
    DLPack-capable array (jax, torch, cupy, ...) whose memory the host can
    read through ``numpy.from_dlpack``, without a copy; one in GPU memory
    through JAX's DLPack import and a device-to-host copy (unavoidable);
    anything else through ``numpy.asarray``."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, jax.Array) and _on_cpu(value):
        # The same zero-copy view of the buffer as a DLPack import, a quarter
        # of the cost (measured: 2.5 against 12 us a call), which the writer
        # pays per column per step.
        return np.asarray(value)
    device = getattr(value, "__dlpack_device__", None)
    if device is not None and hasattr(value, "__dlpack__"):
        if device()[0] in _HOST_DEVICES:
            try:
                return np.from_dlpack(value)
            except (BufferError, TypeError, ValueError, RuntimeError):
                return np.asarray(value)  # a dtype NumPy cannot import (bfloat16, say)
        # GPU memory: to a jax array, then to the host
        return np.asarray(jax.dlpack.from_dlpack(value))
    return np.asarray(value)


def _on_cpu(array: jax.Array) -> bool:
    """Whether a jax array lives in host memory (one CPU device)."""
    try:
        return array.is_fully_addressable and all(d.platform == "cpu" for d in array.devices())
    except Exception:  # noqa: BLE001 - a tracer or a deleted array: let DLPack decide
        return False
