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
        8 bits that JAX has arrays of: sub-byte types (``int4``, ``uint4``,
        ``int2``, ``float4_e2m1fn``, ``float6_e2m3fn``, ...), which XLA packs
        several to a byte, and NumPy's ``float128`` and ``complex256``
        (``longdouble``, ``clongdouble``) are refused with a TypeError. A
        dtype of the other byte order (``">i4"`` on a little-endian
        machine) becomes the same dtype in the machine's order (``int32``):
        samples are JAX arrays, which have no other, and inserted values of
        either order are converted.
      pad: the value that fills padded steps of sampled windows. It must be
        exactly representable in ``dtype`` (``-10`` for a ``uint8`` column is
        refused rather than wrapped; a complex pad only in a complex column).
        A NumPy or JAX scalar is kept as the Python scalar it holds.

    Attributes:
      shape: the per-step shape, a tuple of Python ints (an int ``n`` given
        as ``shape`` becomes ``(n,)``).
      dtype: the dtype, a ``numpy.dtype``.
      pad: the pad value, a Python scalar.

    Raises:
      TypeError: ``shape`` is not an int or a tuple (any iterable) of ints
        (bools are refused); ``dtype`` is not a dtype, is sub-byte, is not
        numeric or bool, or is one JAX has no arrays of; ``pad`` is not a
        scalar number.
      ValueError: a dimension of ``shape`` is below 1; ``pad`` cannot be
        stored in ``dtype``, or not exactly.

    Examples:
      >>> import gearjax as gx
      >>> gx.Column((17,), "float32")
      Column(shape=(17,), dtype=dtype('float32'), pad=0)
      >>> gx.Column(4, "uint8", pad=255).shape
      (4,)
      >>> gx.Column((), "bfloat16", pad=float("nan")).step_bytes
      2
      >>> gx.Column((2,), ">i4").dtype  # the machine's byte order
      dtype('int32')
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
        if not dtype.isnative:
            dtype = dtype.newbyteorder("=")  # what JAX arrays hold; inserts convert
        bits = bit_width(dtype) if jnp.issubdtype(dtype, np.number) else 8
        if bits < 8:
            wider = "int8" if jnp.issubdtype(dtype, np.signedinteger) else \
                "uint8" if jnp.issubdtype(dtype, np.unsignedinteger) else "float8_e4m3fn"
            raise TypeError(f"Column dtype {dtype} is a sub-byte type ({bits}-bit): XLA packs "
                            f"several into a byte and a table stores whole bytes, so it is "
                            f"refused. Store the values as {wider} (or wider) and convert "
                            f"them after sampling")
        if not is_numeric(dtype):
            raise TypeError(f"Column dtype must be numeric or bool, got {dtype}")
        _check_jax_holds(dtype)
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
        """The column as JSON values, as checkpoints store it.

        Returns:
          ``{"shape": list, "dtype": the dtype's name, "pad": the pad}``; a
            non-finite float pad is written as ``"nan"``, ``"inf"`` or
            ``"-inf"``, a complex pad as ``{"complex": [real, imag]}`` (each
            part a number or one of those strings: JSON has no complex
            numbers).
        """
        return {"shape": list(self.shape), "dtype": self.dtype.name, "pad": _json_scalar(self.pad)}

    @classmethod
    def from_json(cls, spec: dict) -> "Column":
        """The column a :meth:`to_json` dict describes, checked as the
        constructor checks its arguments and held to what :meth:`to_json`
        writes (checkpoints are read from files: anything else is refused).

        Args:
          spec: ``{"shape": ..., "dtype": ..., "pad": ...}``.

        Returns:
          A new :class:`Column`.

        Raises:
          KeyError: ``spec`` lacks ``"shape"``, ``"dtype"`` or ``"pad"``.
          TypeError: as the constructor; ``spec`` is not a dict, its shape not
            a list, its dtype not a dtype's name, or its pad not a number,
            bool, non-finite float string or complex pad as written.
          ValueError: as the constructor; a dtype named otherwise than
            :meth:`to_json` names it (``">i4"``, ``"int"``).
        """
        if not isinstance(spec, dict):
            raise TypeError(f"a column is a JSON object, got {type(spec).__name__}")
        shape, dtype = spec["shape"], spec["dtype"]
        if not isinstance(shape, list):
            raise TypeError(f"a column's shape is a list, got {shape!r}")
        if not isinstance(dtype, str):
            raise TypeError(f"a column's dtype is a dtype's name, got {dtype!r}")
        column = cls(tuple(shape), dtype, _pad_from_json(spec["pad"]))
        if column.dtype.name != dtype:
            raise ValueError(f"a column's dtype is written by its name "
                             f"({column.dtype.name!r}), got {dtype!r}")
        return column


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


def _check_jax_holds(dtype: np.dtype) -> None:
    """Refuses a dtype JAX has no arrays of (NumPy's float128 and complex256):
    a table of it could store steps but never return a sample."""
    try:
        jax.dtypes.scalar_type_of(np.zeros((), dtype))
    except TypeError:
        wider = "complex128" if dtype.kind == "c" else "float64"
        raise TypeError(f"Column dtype {dtype} is not one JAX has arrays of (samples are JAX "
                        f"arrays); store the values as {wider}") from None


def _check_pad(pad: Any, dtype: np.dtype) -> None:
    if isinstance(pad, (str, bytes)) or np.ndim(pad) != 0:
        raise TypeError(f"Column pad must be a scalar number, got {pad!r}")
    if isinstance(pad, complex) and _kind(dtype) != "c":
        raise ValueError(f"pad value {pad!r} is complex; a complex pad needs a complex column, "
                         f"not {dtype}")
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused below
            stored = np.array(pad, dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"pad value {pad!r} cannot be stored as {dtype}") from None
    if isinstance(pad, float) and math.isnan(pad) and jnp.issubdtype(dtype, np.inexact):
        return
    if not _same_value(stored.item(), pad):
        raise ValueError(f"pad value {pad!r} is not exactly representable as {dtype}")


def _same_value(stored: Any, pad: Any) -> bool:
    """Whether the stored pad is the pad given; a complex pad part by part,
    where a NaN part matches a NaN (a NaN equals nothing)."""
    if not isinstance(pad, complex):
        return stored == pad
    stored = complex(stored)
    return all(s == p or (math.isnan(s) and math.isnan(p))
               for s, p in ((stored.real, pad.real), (stored.imag, pad.imag)))


# How non-finite floats are written in JSON, which has no such numbers.
_NON_FINITE = ("nan", "inf", "-inf")


def _json_scalar(value: Any) -> Any:
    """A pad as a JSON value: non-finite floats as strings, complex as
    {"complex": [real, imag]}."""
    if isinstance(value, complex):
        return {"complex": [_json_scalar(value.real), _json_scalar(value.imag)]}
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # 'nan', 'inf', '-inf' parse back through float()
    return value


def _pad_from_json(value: Any) -> Any:
    """The pad a _json_scalar value stands for; TypeError for any other value
    (the constructor then checks it against the dtype)."""
    if isinstance(value, dict):
        parts = value.get("complex")
        if len(value) != 1 or not isinstance(parts, list) or len(parts) != 2:
            raise TypeError(f"a column's complex pad is {{\"complex\": [real, imag]}}, "
                            f"got {value!r}")
        real, imag = (_real_from_json(p) for p in parts)
        return complex(real, imag)
    return _real_from_json(value)


def _real_from_json(value: Any) -> Any:
    if isinstance(value, str):
        if value not in _NON_FINITE:
            raise TypeError(f"a column's pad is a number, or one of {_NON_FINITE} as a "
                            f"string, got {value!r}")
        return float(value)
    if not isinstance(value, (bool, int, float)):
        raise TypeError(f"a column's pad is a number, got {value!r}")
    return value


@functools.cache
def _integer_bounds(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _kind(dtype: np.dtype) -> str:
    """'b', 'i' (signed or unsigned), 'f' or 'c'; '' for anything else. Knows
    ml_dtypes' floats (bfloat16, float8), whose NumPy kind is 'V'."""
    for kind, base in (("b", np.bool_), ("i", np.integer), ("f", np.floating),
                       ("c", np.complexfloating)):
        if jnp.issubdtype(dtype, base):
            return kind
    return ""


# Conversions of kind a column accepts: bool into anything, integers into
# integers, floats and complex, floats into floats and complex, complex into
# complex. Never float into integer, nor complex into real (that would drop
# the imaginary part).
_KINDS_INTO = {"b": "bifc", "i": "ifc", "f": "fc", "c": "c"}


def _unsafe(name: str, value_dtype: np.dtype, dtype: np.dtype) -> TypeError:
    return TypeError(f"column {name!r} holds {dtype}; {value_dtype} data would be converted "
                     f"unsafely")


def cast_to_column(name: str, value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Converts host data to the column dtype under the one rule every insert
    path applies (docs: Tables, "Conversions"): the kinds must allow it (see
    _KINDS_INTO), integers must fit an integer column, and a value may be
    rounded to the nearest the column can hold (underflow to 0 included) but
    never change class: a finite value must stay finite (no overflow to inf, no NaN from a type
    without inf), an infinity must stay that infinity, a NaN a NaN.
    Refusals raise (TypeError for the kind, ValueError for a value) and
    convert nothing."""
    if value.dtype == dtype:
        return np.ascontiguousarray(value)
    if value.dtype == object:  # NumPy holds integers beyond int64 and uint64 as objects
        return _from_python_integers(name, value, dtype)
    have, want = _kind(value.dtype), _kind(dtype)
    if not have or want not in _KINDS_INTO[have]:
        raise _unsafe(name, value.dtype, dtype)
    if have == "i" and want == "i":
        lo, hi = _integer_bounds(dtype)
        if value.size and (int(value.min()) < lo or int(value.max()) > hi):
            raise ValueError(f"column {name!r}: values outside the range of {dtype}")
        return np.ascontiguousarray(value, dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):  # checked below
        converted = np.ascontiguousarray(value, dtype=dtype)
    if want in "fc" and have != "b":
        changed = (np.isfinite(value) != np.isfinite(converted)) | \
                  (np.isnan(value) != np.isnan(converted))
        if have in "fc":  # an infinity must keep its sign
            changed |= np.isinf(value) & (np.sign(value) != np.sign(converted))
        if changed.any():
            i = int(np.argmax(changed))
            was, becomes = np.ravel(value)[i], np.ravel(converted)[i]
            raise ValueError(f"column {name!r} holds {dtype}: the value {was} (of "
                             f"{value.dtype}) would be stored as {becomes}; nothing was "
                             f"inserted (clip or scale it first, or use a wider column)")
    return converted


def numeric_host_array(name: str, value: Any) -> np.ndarray:
    """A column's value as a host NumPy array (host_array) of numeric data:
    numbers, bools, or Python integers beyond int64 and uint64, which NumPy
    holds as objects and cast_to_column converts under the rule; TypeError for
    anything else (strings, bytes, None)."""
    array = host_array(value)
    if is_numeric(array.dtype):  # first: every insert asks, and nearly every one is
        return array
    if array.dtype == object and all(isinstance(x, int) and not isinstance(x, bool)
                                     for x in array.ravel().tolist()):
        return array
    raise TypeError(f"column {name!r} must hold numeric data, got dtype {array.dtype}")


def _from_python_integers(name: str, value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """An object array of Python ints (one at least beyond int64 and uint64:
    NumPy keeps those as objects) under the same rule: refused by integer
    columns, naming the value; rounded into float columns unless it would
    become inf. Anything else is not numeric data."""
    flat = value.ravel().tolist()
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in flat):
        raise TypeError(f"column {name!r} must hold numeric data, got dtype object")
    want = _kind(dtype)
    if want not in _KINDS_INTO["i"]:
        raise _unsafe(name, np.dtype(object), dtype)
    if want == "i":
        lo, hi = _integer_bounds(dtype)
        outside = next(x for x in flat if not lo <= x <= hi)
        raise ValueError(f"column {name!r}: the value {outside} is outside the range of "
                         f"{dtype}; nothing was inserted")
    floats = []
    for x in flat:
        try:
            floats.append(float(x))
        except OverflowError:
            raise ValueError(f"column {name!r} holds {dtype}: the value {x} would be stored as "
                             f"inf; nothing was inserted (clip or scale it first)") from None
    return cast_to_column(name, np.asarray(floats, np.float64).reshape(value.shape), dtype)


def check_traced_conversion(name: str, value_dtype: Any, dtype: np.dtype) -> None:
    """The rule for JAX arrays (insert_batch), checked when traced, where
    values cannot be looked at: the conversion must be unable to change a
    value's class for any value of its dtype (the kinds allow it; integers
    into integers that hold every value; into floats, a range that holds the
    source's). Anything else raises TypeError: convert with ``astype`` first
    if that is what you mean."""
    value_dtype = np.dtype(value_dtype)
    if value_dtype == dtype:
        return
    have, want = _kind(value_dtype), _kind(dtype)
    if not have or want not in _KINDS_INTO[have]:
        raise _unsafe(name, value_dtype, dtype)
    if have == "b":
        return
    if want == "i":
        lo, hi = _integer_bounds(value_dtype)
        new_lo, new_hi = _integer_bounds(dtype)
        fits = new_lo <= lo and hi <= new_hi
    else:
        source_max = _integer_bounds(value_dtype)[1] if have == "i" else \
            float(jnp.finfo(value_dtype).max)
        fits = source_max <= float(jnp.finfo(dtype).max)
    if not fits:
        raise TypeError(f"column {name!r} holds {dtype}; {value_dtype} values may not fit "
                        f"(values of JAX arrays cannot be checked in compiled code, so only "
                        f"conversions that fit every value are made): convert with "
                        f"astype({dtype}) first if you mean to")


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
