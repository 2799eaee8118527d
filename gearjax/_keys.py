"""Whether a dtype is a typed PRNG key's, asked on every eager table call (is
the first argument a state or a key? is ``rng_key`` one key?), so asked
cheaply.

``jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)`` is the public answer,
but it walks JAX's dtype machinery (microseconds), and an eager sample asked
it two or three times (is the first argument a state, is the key one key,
and with ``numpy=True`` how to read its words). The answer depends only on
the dtype's class for the classes this module remembers: NumPy's dtypes are
never keys, and a key dtype's class (JAX's ``KeyTy``) says ``type =
jax.dtypes.prng_key`` for every instance. Anything else takes the public
path every time."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

# Classes of dtypes that JAX said are a PRNG key's: every instance is.
_key_dtype_classes: set[type] = set()


def is_key_dtype(dtype: Any) -> bool:
    """``jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)``, without asking
    JAX again for a NumPy dtype or a key dtype of a class seen before.
    ``None`` (no dtype) is not a key's."""
    if dtype is None or isinstance(dtype, np.dtype):
        return False
    cls = type(dtype)
    if cls in _key_dtype_classes:
        return True
    is_key = bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))
    # Remembered only where JAX's class says so for all its instances.
    if is_key and getattr(cls, "type", None) is jax.dtypes.prng_key:
        _key_dtype_classes.add(cls)
    return is_key
