"""The two XLA FFI custom calls and their registration.

Attribute types are normalised here, in one place: XLA FFI bindings need exact
types (int64, float64) and calls are cached by attribute value.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from gearjax import _gearjax

SAMPLE_TARGET = "gearjax_sample"
UPDATE_PRIORITIES_TARGET = "gearjax_update_priorities"
INSERT_BATCH_TARGET = "gearjax_insert_batch"


def _register() -> None:
    for name, capsule in _gearjax.ffi_targets().items():
        jax.ffi.register_ffi_target(name, capsule, platform="cpu")
    if _gearjax.cuda_built:  # harmless where there is no GPU
        for name, capsule in _gearjax.cuda_ffi_targets().items():
            jax.ffi.register_ffi_target(name, capsule, platform="CUDA")


_register()


def sample_call(seed: jax.Array, *, batch: int, handle: int, strategy: int, param: float,
                window: int, width: int, pad_left: bool,
                columns: list[tuple[tuple[int, ...], np.dtype]]):
    """Samples ``batch`` rows determined by ``seed`` (uint32[2]); returns (keys,
    start, probability, table_size, mask, timestep, *columns). ``window=0`` asks for whole
    trajectories of ``width`` (= max_length) steps."""
    result_types = [
        jax.ShapeDtypeStruct((batch,), np.int64),
        jax.ShapeDtypeStruct((batch,), np.int32),
        jax.ShapeDtypeStruct((batch,), np.float32),
        jax.ShapeDtypeStruct((batch,), np.int64),
        jax.ShapeDtypeStruct((batch, width), np.bool_),
        jax.ShapeDtypeStruct((batch, width), np.int32),
    ] + [jax.ShapeDtypeStruct((batch, width, *shape), dtype) for shape, dtype in columns]
    # Not marked as a side effect: to XLA a sample is a function of the random
    # bits (and the table). Marking it would take every program that samples
    # off JAX's C++ dispatch fast path, about 0.1 ms per call on our CPU
    # machine. What follows: a batch nobody uses is not drawn, and two samples
    # with the same bits in one program may be merged (they would be equal).
    call = jax.ffi.ffi_call(SAMPLE_TARGET, result_types, has_side_effect=False,
                            vmap_method="sequential")
    return call(seed, table_handle=np.int64(handle), batch_size=np.int64(batch),
                strategy=np.int64(strategy),
                param=np.float64(param), window=np.int64(window), pad_left=np.int64(pad_left))


def update_priorities_call(keys: jax.Array, priorities: jax.Array, *, handle: int) -> jax.Array:
    """Sets priorities from inside traced code; returns how many keys were live
    (an int32 scalar). A side effect for XLA, so it runs even when the count is
    unused (and the program leaves JAX's fast dispatch path). The caller has
    checked the dtypes (Table.update_priorities); this only widens them to what
    the handlers read."""
    if keys.dtype not in (jnp.int32, jnp.uint32, jnp.int64):
        keys = keys.astype(jnp.int32)  # int8/int16/uint8/uint16 widen exactly
    if priorities.dtype not in (jnp.float32, jnp.float64):
        priorities = priorities.astype(jnp.float32)
    call = jax.ffi.ffi_call(UPDATE_PRIORITIES_TARGET, jax.ShapeDtypeStruct((), np.int32),
                            has_side_effect=True, vmap_method="sequential")
    return call(keys, priorities, table_handle=np.int64(handle))


def insert_batch_call(columns: list[jax.Array], lengths: jax.Array, priorities: jax.Array, *,
                      handle: int) -> jax.Array:
    """Inserts trajectories given as padded [N, T, ...] arrays from inside
    traced code; returns their keys (int64 [N]). A side effect for XLA."""
    rows, steps = columns[0].shape[:2]
    call = jax.ffi.ffi_call(INSERT_BATCH_TARGET, jax.ShapeDtypeStruct((rows,), np.int64),
                            has_side_effect=True, vmap_method="sequential")
    return call(lengths, priorities, *columns, table_handle=np.int64(handle),
                rows=np.int64(rows), steps=np.int64(steps))
