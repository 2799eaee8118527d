"""Argument checks against the numeric contract, in one place.

Every integer, size, priority and setting that reaches native code passes one
of these functions first; the bounds come from the extension
(``xla_ffi/core/limits.h``), and so do the codes of the core's enums
(strategies, cuts, removers), so Python and C++ cannot disagree. Nothing is
narrowed, wrapped or clamped here: a value is returned as a Python ``int`` or
``float`` exactly as given, or refused with ``TypeError`` (wrong kind) or
``ValueError`` (out of range), naming the argument.
"""

from __future__ import annotations

import math
import os
from typing import Any

import jax.numpy as jnp
import numpy as np

from gearjax import _gearjax

LIMITS: dict[str, Any] = _gearjax.limits()
MAX_CAPACITY: int = LIMITS["max_capacity"]
MAX_LENGTH: int = LIMITS["max_length"]
MAX_BATCH: int = LIMITS["max_batch"]
MAX_RESULT_BYTES: int = LIMITS["max_result_bytes"]
MIN_PRIORITY: float = LIMITS["min_priority"]   # the smallest normal float64
MAX_PRIORITY: float = LIMITS["max_priority"]
MAX_ALPHA: float = LIMITS["max_alpha"]
MAX_PRIORITY_TREES: int = LIMITS["max_priority_trees"]
MAX_SAMPLES_PER_INSERT: float = LIMITS["max_samples_per_insert"]
MAX_ERROR_BUFFER: float = LIMITS["max_error_buffer"]
MAX_TIMEOUT_SECONDS: float = LIMITS["max_timeout_seconds"]
MAX_STAMP: int = LIMITS["max_stamp"]   # insertion stamps are below this
INT64_MAX = 2**63 - 1

# The native core's enum codes by name (sample_request.h/window.h/removers.h through
# the extension): Python passes these numbers and never writes them itself.
ENUMS: dict[str, dict[str, int]] = _gearjax.enums()
STRATEGY_CODES: dict[str, int] = ENUMS["strategy"]
CUT_CODES: dict[str, int] = ENUMS["cut"]
REMOVER_CODES: dict[str, int] = ENUMS["remover"]
# Where a table's memory lives: a Python choice that the extension gets as flags.
PLACEMENTS = ("host", "device", "auto")

# The priority range as messages say it, from the core's own bounds.
PRIORITY_RANGE = f"0 or a float in [{MIN_PRIORITY!r}, {MAX_PRIORITY!r}] (1e30 as a float32)"


def integer(name: str, value: Any, lo: int, hi: int) -> int:
    """A Python or NumPy integer (not a bool) in [lo, hi]."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if not lo <= value <= hi:
        # A bound past int64 only says "no limit": print it as such, not as
        # hundreds of digits.
        bound = f"an integer >= {lo}" if hi >= 2**64 else f"in [{lo}, {hi}]"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def _as_float(name: str, value: Any) -> float:
    """A Python or NumPy real number (not a bool) as a float; ints beyond
    float64 become +-inf, which every range below refuses."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def alpha(name: str, value: Any) -> float:
    """A strategy's alpha: a real number in [0, MAX_ALPHA], not subnormal (a
    subnormal alpha reads as 0 on threads that treat subnormal inputs as
    zero, XLA's, where priority 0 would weigh 1, and as itself elsewhere)."""
    number = real(name, value, 0.0, MAX_ALPHA)
    if 0.0 < number < MIN_PRIORITY:
        raise ValueError(f"{name} must be 0 or at least {MIN_PRIORITY!r} (not subnormal), "
                         f"got {number!r}")
    return number


def real(name: str, value: Any, lo: float, hi: float) -> float:
    """A Python or NumPy real number (not a bool) in [lo, hi]; NaN never is."""
    number = _as_float(name, value)
    if not lo <= number <= hi:
        raise ValueError(f"{name} must be in [{lo:g}, {hi:g}], got {value!r}")
    return number


def flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def priority(value: Any, name: str = "priority") -> float:
    """A priority: 0 or a normal float64 in [MIN_PRIORITY, MAX_PRIORITY].
    NumPy and JAX scalars (0-d arrays) are accepted."""
    if not isinstance(value, (int, float)) and hasattr(value, "dtype"):  # NumPy / JAX
        if np.ndim(value) != 0:
            raise TypeError(f"{name} must be a real number, got an array of shape "
                            f"{np.shape(value)}")
        dtype = np.dtype(value.dtype)
        if not (jnp.issubdtype(dtype, np.integer) or jnp.issubdtype(dtype, np.floating)):
            raise TypeError(f"{name} must be a real number, got {value!r}")
        as_float = float(np.asarray(value).astype(np.float64))
        if as_float == 0 and np.asarray(value) != 0:  # a long double below float64's range
            raise ValueError(f"{name} must be {PRIORITY_RANGE}, got {value!r}")
        value = as_float
    number = _as_float(name, value)
    if not (number == 0 or MIN_PRIORITY <= number <= MAX_PRIORITY):
        raise ValueError(f"{name} must be {PRIORITY_RANGE}, got {value!r}")
    return number + 0.0  # -0.0 -> 0.0


def is_real_dtype(dtype: Any) -> bool:
    """Integer or floating, bfloat16 and float8 included (ml_dtypes' types:
    NumPy's issubdtype does not count them, JAX's does); not bool, complex,
    object or a key. NumPy's own kinds are read directly: JAX's issubdtype
    costs microseconds, and eager updates ask on every call."""
    if isinstance(dtype, np.dtype):
        if dtype.kind in "iuf":
            return True
        if dtype.kind != "V":
            return False
    return bool(jnp.issubdtype(dtype, np.integer) or jnp.issubdtype(dtype, np.floating))


def is_integer_dtype(dtype: Any, signed: bool = False) -> bool:
    """Integer (signed only, if asked), ml_dtypes' int4 and kin included; see
    is_real_dtype."""
    if isinstance(dtype, np.dtype) and dtype.kind != "V":
        return dtype.kind == "i" or (not signed and dtype.kind == "u")
    return bool(jnp.issubdtype(dtype, np.signedinteger if signed else np.integer))


# Dtypes that become float64 without overflow or an invalid value (each value
# exactly, for all but the 64-bit integers, which round).
_EXACT_IN_FLOAT64 = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8,
                                                    np.int16, np.int32, np.int64, np.uint8,
                                                    np.uint16, np.uint32, np.uint64, np.bool_))


def priorities(values: np.ndarray, name: str = "priorities") -> np.ndarray:
    """Real-valued array -> float64 array of valid priorities (see priority).
    Any integer or floating dtype, bfloat16 and float8 included."""
    values = np.asarray(values)
    if not is_real_dtype(values.dtype):
        raise TypeError(f"{name} must be real numbers, got {values.dtype}")
    if values.dtype in _EXACT_IN_FLOAT64:
        as_float = values.astype(np.float64, copy=False)
    else:  # float128 may overflow; errstate itself costs more than a small update's check
        with np.errstate(over="ignore", invalid="ignore"):
            as_float = values.astype(np.float64, copy=False)
    # All in the normal range (a NaN fails both): nothing to report, no 0 to
    # make positive. Two reductions instead of four temporaries.
    if as_float.size and MIN_PRIORITY <= as_float.min() and as_float.max() <= MAX_PRIORITY:
        return np.ascontiguousarray(as_float)
    bad = ~((as_float == 0) | ((as_float >= MIN_PRIORITY) & (as_float <= MAX_PRIORITY)))
    if values.dtype not in _EXACT_IN_FLOAT64:
        bad |= (as_float == 0) & (values != 0)  # a long double too small for float64: not 0
    if bad.any():
        i = int(np.argmax(bad.ravel()))
        raise ValueError(f"{name} must each be {PRIORITY_RANGE}; entry {i} is "
                         f"{values.ravel()[i].item()!r}")
    return as_float + 0.0


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def result_bytes(what: str, results: list[tuple[tuple[int, ...], int]]) -> None:
    """Refuses results (shape, itemsize) that together exceed MAX_RESULT_BYTES or
    this machine's memory: XLA would try to allocate them, and the process
    would be killed for memory rather than fail with an error."""
    total = 0
    for shape, itemsize in results:
        size = itemsize
        for d in shape:
            size *= d
        total += size
    memory = physical_memory()
    limit = MAX_RESULT_BYTES if memory is None else min(MAX_RESULT_BYTES, memory)
    if total > limit:
        raise ValueError(f"{what} would need {total} bytes of results, more than the {limit} "
                         f"bytes this machine can hold; ask for a smaller batch or window")
