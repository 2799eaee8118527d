"""insert, insert_many and the writer take any DLPack-capable array: memory
the host can read is used in place (numpy.from_dlpack, no intermediate copy);
jax arrays go the same way. (cupy arrays in GPU memory: tests/test_gpu.py.)"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx
from gearjax.columns import host_array


class DLPackOnly:
    """An array that offers nothing but the DLPack protocol (as torch or cupy
    arrays do to NumPy), backed by a NumPy array."""

    def __init__(self, array: np.ndarray):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def table() -> gx.Table:
    return gx.Table({"obs": gx.Column((3,), "float32"), "r": gx.Column((), "int32")},
                    capacity=8, max_length=4, placement="host")


def test_host_memory_is_read_in_place():
    backing = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert np.shares_memory(host_array(DLPackOnly(backing)), backing)
    x = jax.device_put(jnp.arange(6.0, dtype=jnp.float32), jax.devices("cpu")[0])
    # jax's own buffer (a CPU jax array's view, not a copy; one in GPU memory
    # is copied: test_gpu.py::test_cupy_arrays_in_gpu_memory_insert_and_append)
    assert host_array(x).ctypes.data == x.unsafe_buffer_pointer()
    assert host_array(backing) is backing
    assert host_array([1, 2]).tolist() == [1, 2]  # neither: numpy.asarray


def test_insert_insert_many_and_the_writer_take_dlpack_arrays():
    t = table()
    obs = np.arange(9, dtype=np.float32).reshape(3, 3)
    key = t.insert({"obs": DLPackOnly(obs), "r": DLPackOnly(np.arange(3, dtype=np.int32))})
    np.testing.assert_array_equal(t.get(key)["obs"], obs)
    keys = t.insert_many([{"obs": jnp.ones((2, 3)), "r": jnp.zeros(2, jnp.int32)}] * 2)
    assert len(keys) == 2 and len(t) == 3
    w = t.writer()
    w.append({"obs": DLPackOnly(np.full(3, 5, np.float32)), "r": DLPackOnly(np.array(7))})
    w.append({"obs": jnp.full(3, 6.0), "r": jnp.int32(8)})
    stored = t.get(w.end_episode())
    assert stored["r"].tolist() == [7, 8] and stored["obs"][:, 0].tolist() == [5.0, 6.0]


def test_dlpack_arrays_are_checked_like_any_other():
    t = table()
    with pytest.raises(ValueError, match="shape"):
        t.insert({"obs": DLPackOnly(np.zeros((2, 4), np.float32)), "r": np.zeros(2, np.int32)})
    with pytest.raises(TypeError, match="unsafely"):
        t.insert({"obs": DLPackOnly(np.zeros((2, 3), np.complex64)), "r": np.zeros(2, np.int32)})
    assert len(t) == 0
