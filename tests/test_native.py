"""The native core's building blocks seen from Python: the Philox4x32-10
generator that expands sampling seeds (known-answer vectors from Random123's
tests/kat_vectors), table handles, and the CUDA build's kernel architectures."""

from __future__ import annotations

import os

import numpy as np
import pytest

import gearjax as gx
from gearjax import _gearjax

# counter[4], key[2] -> result[4]
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter, key, expected", KNOWN_ANSWERS)
def test_philox_matches_the_published_vectors(counter, key, expected):
    assert _gearjax.philox4x32_10(counter, key) == expected


def test_philox_words_look_uniform():
    words = np.array([_gearjax.philox4x32_10((i, 0, 0, 0), (7, 9)) for i in range(4096)],
                     dtype=np.uint64).ravel()
    bits = np.unpackbits(words.astype(">u4").view(np.uint8))
    assert abs(bits.mean() - 0.5) < 0.01


def test_handles_are_unique_and_die_with_close():
    a = gx.Table({"x": gx.Column((), "float32")}, 2, 2)
    b = gx.Table({"x": gx.Column((), "float32")}, 2, 2)
    assert a.handle != b.handle
    a.close()
    a.close()  # idempotent
    assert a.closed and not b.closed
    b.close()


def test_a_cuda_build_names_its_kernel_architectures_and_checks_them():
    """The CUDA handlers refuse a GPU their kernels have no image for, naming
    the architectures built (the default list includes sm_90 and sm_100)."""
    from gearjax import _gearjax
    if not _gearjax.cuda_built:
        assert _gearjax.cuda_architectures == ""
        return
    built = _gearjax.cuda_architectures.split(",")
    assert built and all(a.isdigit() for a in built)
    if os.environ.get("GEARJAX_CUDA_ARCHITECTURES") is None:
        assert {"90", "100"} <= set(built)
    if not _gearjax.cuda_memory:  # no GPU here: nothing to run a kernel on
        assert _gearjax.cuda_kernel_problem(0).startswith("no CUDA device")
