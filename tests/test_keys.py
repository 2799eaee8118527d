"""gearjax/_keys.py: the cheap answer to "is this a PRNG key's dtype?" is
JAX's answer, and asks JAX again only where it must."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from gearjax import _keys


DTYPES = {
    "threefry key": lambda: jax.random.key(0).dtype,
    "rbg key": lambda: jax.random.key(0, impl="rbg").dtype,
    "legacy key's uint32": lambda: jax.random.PRNGKey(0).dtype,
    "float32": lambda: np.dtype(np.float32),
    "bfloat16": lambda: np.dtype(ml_dtypes.bfloat16),
    "a JAX array's": lambda: jnp.zeros((), jnp.uint32).dtype,
    "a name": lambda: "uint32",
    "a scalar type": lambda: np.uint32,
}


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_the_answer_is_jax_s_first_time_and_after(name):
    dtype = DTYPES[name]()
    expected = bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))
    assert _keys.is_key_dtype(dtype) is expected
    assert _keys.is_key_dtype(DTYPES[name]()) is expected  # a new instance, maybe remembered


def test_no_dtype_is_not_a_key_s():
    assert _keys.is_key_dtype(None) is False


def test_a_key_dtype_seen_once_is_known_without_asking_jax(monkeypatch):
    """The point of the module: JAX's issubdtype is asked once per key
    dtype class, then never for another instance of it."""
    assert _keys.is_key_dtype(jax.random.key(0).dtype)

    def refuse(*_):
        raise AssertionError("asked JAX again")

    monkeypatch.setattr(jax.dtypes, "issubdtype", refuse)
    assert _keys.is_key_dtype(jax.random.key(1).dtype)  # another KeyTy instance
    assert not _keys.is_key_dtype(np.dtype(np.uint32))  # NumPy's: never asked


def test_a_class_that_is_not_always_a_key_s_is_not_remembered(monkeypatch):
    """A dtype class whose instances JAX may answer differently for (one
    without ``type = prng_key``) is asked about every time."""

    class Odd:
        pass

    answers = iter([True, False])
    monkeypatch.setattr(jax.dtypes, "issubdtype", lambda *_: next(answers))
    assert _keys.is_key_dtype(Odd()) is True
    assert _keys.is_key_dtype(Odd()) is False
    assert Odd not in _keys._key_dtype_classes
